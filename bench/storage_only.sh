#!/usr/bin/env bash
# kvio run mlperf/storage-only as it ships, against #54's bounds for it:
# peak RSS <= 2 GB and wall time <= duration + set-up + 10 s. Runs the
# preset once (its generated 6 GiB pool, 1 GiB host tier and 48 GiB slab; the slab in DIR, on
# the disk under test) under /usr/bin/time and prints the peak RSS, the
# wall time, the set-up (metrics.setup_s, before t0), storage.overrun_s
# (the real time the run went on past its duration while its requests and
# tier I/O drained) and the wall time past duration + set-up (the bound's
# 10 s: the overrun, the process's start, the results and the tear-down),
# then `figure storage_only_peak_rss_mb`, `figure storage_only_wall_s`,
# `figure storage_only_setup_s`, `figure storage_only_overrun_s`,
# `figure storage_only_wall_past_duration_and_setup_s` and
# `figure storage_only_valid` (1: the run's verdict is valid), after a line
# with the verdict's warnings, the tier saves and reads the drain's cap
# cut (tiers[].cut_puts, cut_gets), and how long after kvio's exit the slab's
# space came back (its helper frees it; the script waits for it so the
# next bench finds the disk quiet). Usage: bench/storage_only.sh
# (DURATION: seconds, default the preset's 120; KVIO_STORAGE_DIR: where the
# slab goes, default bench/.cache/storage-only; KVIO_BENCH_BUILD: the
# build directory, default build-bench, made as a Release build when it
# has none, else only kvio rebuilt in it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
dir=${KVIO_STORAGE_DIR:-$root/bench/.cache/storage-only}
duration=${DURATION:-}

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" -j 2 --target kvio >/dev/null
mkdir -p "$dir"
work=$(mktemp -d /tmp/kvio-bench-storage-only-XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

sets=(--set "serve.kvcache.tiers.1.file.path=$dir")
if [ -n "$duration" ]; then
    sets+=(--set "duration=${duration}s")
fi
free_kb() { df -Pk "$dir" | awk 'NR == 2 { print $4 }'; }
free_before=$(free_kb)
status=0
KVIO_ALLOW_INVALID=1 /usr/bin/time -f '%M %e' -o "$work/time" \
    "$build/kvio" run mlperf/storage-only "${sets[@]}" -o "$work/out" >"$work/log" 2>&1 || status=$?
exited=$(date +%s.%N)
if [ "$status" -ne 0 ]; then
    tail -20 "$work/log" >&2
    echo "kvio run mlperf/storage-only failed (exit $status)" >&2
    exit 1
fi
# The slab is freed by a helper after kvio's exit: wait for the space to
# come back (within 2 GiB: other users of the file system), so that the
# next bench finds the disk quiet, and say how long it took.
for _ in $(seq 600); do
    [ "$(free_kb)" -ge $((free_before - 2097152)) ] && break
    sleep 0.2
done
freed_s=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$exited")
read -r rss_kb wall_s <"$work/time"
python3 - "$work/out/summary.json" "$rss_kb" "$wall_s" "$freed_s" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
metrics = summary["metrics"]
rss_mb = int(sys.argv[2]) * 1024 / 1e6
wall = float(sys.argv[3])
run = metrics["wall_run_s"]
overrun = metrics["storage"]["overrun_s"]
setup = metrics["setup_s"]
duration = run - overrun
teardown = wall - run - setup
past = wall - duration - setup
print(f"mlperf/storage-only, {duration:.0f} s: peak RSS {rss_mb:.0f} MB (bound 2000), wall "
      f"{wall:.1f} s = set-up {setup:.1f} s + run {run:.1f} s + the rest (start, results, "
      f"tear-down) {teardown:.1f} s; the run {overrun:.1f} s past the duration, the wall "
      f"{past:.1f} s past duration + set-up (bound 10)")
warnings = ", ".join(w["kind"] for w in summary.get("warnings", [])) or "none"
cut_puts = sum(t.get("cut_puts", 0) for t in metrics.get("tiers", []))
cut_gets = sum(t.get("cut_gets", 0) for t in metrics.get("tiers", []))
print(f"verdict: {'valid' if summary.get('valid') else 'not valid'} (warnings: {warnings}); "
      f"drain cut {metrics.get('drain_cut_requests', 0):.0f} requests, "
      f"{metrics.get('drain_cut_overdue_requests', 0):.0f} of them past the p99 latency; "
      f"the tiers' end cut {cut_puts:.0f} saves and {cut_gets:.0f} reads; "
      f"iteration timing error p99 {metrics['executor']['timing_error_p99_us']:.0f} us; "
      f"the slab's space back {sys.argv[4]} s after kvio's exit (freed by its helper)")
print(f"figure storage_only_peak_rss_mb {rss_mb:.0f} MB")
print(f"figure storage_only_wall_s {wall:.1f} s")
print(f"figure storage_only_setup_s {setup:.1f} s")
print(f"figure storage_only_overrun_s {overrun:.1f} s")
print(f"figure storage_only_wall_past_duration_and_setup_s {past:.1f} s")
print(f"figure storage_only_valid {1 if summary.get('valid') else 0}")
PY

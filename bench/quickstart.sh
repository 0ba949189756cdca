#!/usr/bin/env bash
# Emulate holds its duration (#53.8, #58): `kvio run quickstart --set
# duration=20s` (a trainer, two serve ranks, a client), its set-up (the
# slowest rank's, summary.json metrics.setup_s) and its overrun (the
# process's wall time less the duration and the set-up: the drain, capped
# by serve.drain_timeout, and writing the results). The reference, in the
# same run: one thread making the bytes the run says it allocates real (a
# mmap and a memset, bench/fault_in.c), so a slower machine shows as both.
# Env: KVIO_BENCH_BUILD (default build-bench, a Release build),
# KVIO_BENCH_DURATION (default 20s).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
duration=${KVIO_BENCH_DURATION:-20s}
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
fi
cmake --build "$build" -j 2 --target kvio fault_in >/dev/null
kvio="$build/kvio"
work=$(mktemp -d /tmp/kvio-bench-quickstart-XXXXXX)
trap 'rm -rf "$work"' EXIT

start=$(date +%s.%N)
# A run the verdict calls invalid (this machine's cores, its timing) still
# measured its set-up and its end: KVIO_ALLOW_INVALID keeps its exit 0.
KVIO_ALLOW_INVALID=1 "$kvio" run quickstart --set "duration=$duration" -o "$work/run" \
    >"$work/table.txt" 2>"$work/err.txt" || {
    cat "$work/err.txt" >&2
    exit 1
}
end=$(date +%s.%N)
grep -E 'kvio: (set-up|warning)' "$work/err.txt" || true
read -r setup_s duration_s allocated <<<"$(python3 - "$work/run/summary.json" "$work/err.txt" <<'PY'
import json, re, sys
summary = json.load(open(sys.argv[1]))
metrics = summary["metrics"]
err = open(sys.argv[2]).read()
m = re.search(r"allocate about ([0-9.]+) GiB", err)
print(metrics["setup_s"], summary["config"]["duration"], float(m.group(1)) if m else 0)
PY
)"
duration_s=$(python3 -c "
import re
v = '$duration_s'
m = re.fullmatch(r'([0-9.]+)(ns|us|ms|s|m|h)?', v)
scale = {'ns': 1e-9, 'us': 1e-6, 'ms': 1e-3, 's': 1, 'm': 60, 'h': 3600, None: 1e-9}
print(float(m.group(1)) * scale[m.group(2)] if m else float(v))")
wall_s=$(python3 -c "print($end - $start)")
overrun_s=$(python3 -c "print($wall_s - $duration_s - $setup_s)")
bytes=$(python3 -c "print(int($allocated * 1073741824))")
fault_s=$("$build/fault_in" "$bytes")
echo "quickstart, duration $duration_s s: wall $wall_s s, set-up $setup_s s, overrun $overrun_s s; the run said it allocates $allocated GiB, which one thread makes real in $fault_s s"
printf 'figure quickstart_setup_s %.2f s\n' "$setup_s"
printf 'figure quickstart_overrun_s %.2f s\n' "$overrun_s"
printf 'figure quickstart_setup_over_fault_in %.2f x\n' "$(python3 -c "print($setup_s / $fault_s if $fault_s > 0 else 0)")"

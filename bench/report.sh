#!/usr/bin/env bash
# Builds kvio, runs two small simulate workloads (quickstart, chat), a
# scheduler compare and a cachesim sweep, writes report.html (and PNGs when
# gnuplot is installed), checks every SVG parses as XML, screenshots the page
# with headless Chromium, and measures the cost of --event-trace on the chat
# preset (best wall_s of interleaved runs with and without it: the best of N
# is the least disturbed by other work on a shared machine).
# Env: KVIO_BENCH_BUILD, KVIO_REPORT_OUT (kept for viewing), KVIO_BENCH_RUNS.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
out=${KVIO_REPORT_OUT:-$build/report-bench}
runs=${KVIO_BENCH_RUNS:-7}
trace=/work/shared/traces/mooncake_synthetic_trace.jsonl

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
make -C "$build" -j2 kvio >/dev/null
kvio=$build/kvio

rm -rf "$out"
mkdir -p "$out"
"$kvio" -q run quickstart -o "$out/quickstart" >/dev/null
"$kvio" -q run chat -o "$out/chat" >/dev/null
"$kvio" -q compare quickstart --vary serve.scheduler.policy=fcfs,lpm,pkas --repeat 2 \
    -o "$out/compare" >/dev/null 2>&1
inputs=("$out/quickstart" "$out/chat" "$out/compare")
if [ -f "$trace" ]; then
    "$kvio" cachesim "$trace" --format mooncake --capacity 1000,3000,10000,30000,unlimited \
        --eviction lru,s3fifo --json -o "$out/cachesim.json" >/dev/null
    inputs+=("$out/cachesim.json")
fi
png=()
if command -v gnuplot >/dev/null; then
    png=(--png)
else
    echo "gnuplot is not installed: no PNG charts (scripts/bootstrap.sh --dev installs it)"
fi
"$kvio" report "${inputs[@]}" -o "$out/report" "${png[@]}"
html=$out/report/report.html
echo "report: $html ($(du -k "$html" | cut -f1) KiB)"

python3 - "$html" <<'PY'
import re, sys, xml.etree.ElementTree as ET
page = open(sys.argv[1], encoding="utf-8").read()
svgs = re.findall(r"<svg.*?</svg>", page, re.S)
for svg in svgs:
    ET.fromstring(svg)
for bad in ("http:", "https:", "<script", "<link"):
    assert bad not in page, bad
assert not re.search(r"\b(nan|inf)\b", page, re.I), "NaN or inf in the page"
print(f"{len(svgs)} charts, every SVG parses as XML, nothing external, no NaN")
PY

chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$chromium_bin" ]; then
    profile=$(mktemp -d /tmp/kvio-chromium-XXXXXX)
    timeout 120 "$chromium_bin" --headless --no-sandbox --disable-gpu --disable-quic \
        --no-first-run --disable-background-networking --disable-component-update \
        --disable-sync --user-data-dir="$profile" --screenshot="$out/report.png" \
        --window-size=1400,6000 "file://$html" >/dev/null 2>&1 || true
    rm -rf "$profile"
    if [ -s "$out/report.png" ]; then
        echo "screenshot: $out/report.png"
    else
        echo "chromium did not write a screenshot" >&2
        exit 1
    fi
else
    echo "chromium is not installed: no screenshot (scripts/bootstrap.sh --dev installs it)"
fi

# Event-trace overhead: wall_s of kvio run chat, traced and not, interleaved.
work=$(mktemp -d /tmp/kvio-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
wall() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wall_s"])' "$1"; }
plain=()
traced=()
for i in $(seq "$runs"); do
    "$kvio" -q run chat -o "$work/plain-$i" >/dev/null
    plain+=("$(wall "$work/plain-$i/summary.json")")
    "$kvio" -q run chat -o "$work/traced-$i" --event-trace "$work/trace-$i.pfw" >/dev/null
    traced+=("$(wall "$work/traced-$i/summary.json")")
done
best() { sort -g | head -1; }
plain_best=$(printf '%s\n' "${plain[@]}" | best)
traced_best=$(printf '%s\n' "${traced[@]}" | best)
events=$(($(wc -l <"$work/trace-1.pfw") - 2))
echo "chat preset: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metrics"]["iterations"])' "$work/plain-1/summary.json") iterations," \
    "trace $events lines, $(du -m "$work/trace-1.pfw" | cut -f1) MB"
echo "wall_s without trace: ${plain[*]} (best $plain_best)"
echo "wall_s with trace:    ${traced[*]} (best $traced_best)"
# The same with the trace going to /dev/null: the cost of making the events
# alone, without the file system.
null=()
for i in $(seq "$runs"); do
    "$kvio" -q run chat -o "$work/null-$i" --event-trace /dev/null >/dev/null
    null+=("$(wall "$work/null-$i/summary.json")")
done
null_best=$(printf '%s\n' "${null[@]}" | best)
echo "wall_s, trace to /dev/null: ${null[*]} (best $null_best)"
printf 'event formatting alone: %.1f %%\n' \
    "$(echo "($null_best - $plain_best) / $plain_best * 100" | bc -l)"
overhead=$(echo "($traced_best - $plain_best) / $plain_best * 100" | bc -l)
printf 'figure event_trace_overhead_pct %.1f %%\n' "$overhead"

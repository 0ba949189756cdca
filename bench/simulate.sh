#!/usr/bin/env bash
# Simulate-mode speed: replays the shared Mooncake synthetic trace (3,993
# requests) with Llama-3-8B on an H200, block 16, prefix caching, fcfs, and
# prints the wall time (median of 3) and simulated requests per second; then
# the peak memory of a 1-million-request synthetic chat stream.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
trace="$root/../shared/traces/mooncake_synthetic_trace.jsonl"
[ -f "$trace" ] || { echo "bench/simulate.sh: $trace not found" >&2; exit 1; }
build=${KVIO_BENCH_BUILD:-$root/build-bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target kvio >/dev/null
kvio="$build/kvio"
work=$(mktemp -d /tmp/kvio-bench-simulate-XXXXXX)
trap 'rm -rf "$work"' EXIT

cat >"$work/mooncake.yaml" <<YAML
name: mooncake-replay
mode: simulate
model: {preset: llama3-8b}
gpu: {preset: h200}
serve:
  scheduler: {policy: fcfs}
  kvcache: {block_size: 16, prefix_caching: true}
stream:
  trace: {path: $trace, format: mooncake}
YAML

times=()
for i in 1 2 3; do
    rm -rf "$work/run"
    start=$(date +%s.%N)
    taskset -c 0 "$kvio" -q run "$work/mooncake.yaml" -o "$work/run" >/dev/null
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc -l)")
done
median=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 2p)
completed=$(python3 -c "import json;print(json.load(open('$work/run/summary.json'))['metrics']['completed'])")
printf 'mooncake replay: %s requests, wall %s s (runs: %s)\n' "$completed" "$median" "${times[*]}"
rps=$(echo "$completed / $median" | bc -l)

cat >"$work/chat1m.yaml" <<YAML
name: chat-1m
mode: simulate
model: {preset: llama3-8b}
gpu: {preset: h200}
stream:
  requests: 1000000
  arrival: {process: poisson, rate: 20}
  input_tokens: {dist: lognormal, mean: 1200, stddev: 900, min: 16, max: 16384}
  output_tokens: {dist: lognormal, mean: 220, stddev: 200, min: 1, max: 2048}
  prefix:
    system_prompts: {count: 8, tokens: 600, zipf: 1.1}
    sessions: {turns: {dist: uniform, low: 0.5, high: 6.5}, think_time: {dist: exponential, mean: 20s}}
YAML
rm -rf "$work/run1m"
/usr/bin/time -f '%M %e' -o "$work/time1m" "$kvio" -q run "$work/chat1m.yaml" -o "$work/run1m" >/dev/null
read -r rss_kb wall_1m <"$work/time1m"
printf '1M-request chat stream: peak RSS %.1f MiB, wall %s s\n' "$(echo "$rss_kb / 1024" | bc -l)" "$wall_1m"

printf 'figure simulate_wall_s %.3f s\n' "$median"
printf 'figure simulate_rps %.0f req/s\n' "$rps"
printf 'figure peak_rss_1m_mib %.1f MiB\n' "$(echo "$rss_kb / 1024" | bc -l)"

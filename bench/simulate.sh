#!/usr/bin/env bash
# Simulate-mode speed and memory: replays the shared Mooncake synthetic trace
# (3,993 requests) with Llama-3-8B on an H200, block 16, prefix caching, fcfs
# (wall time, median of 3, on one core); the peak memory of a 1-million-
# request synthetic chat stream; and the Mooncake trace replicated 50 times
# (ids and times offset per copy, as bench/cachesim.sh builds it): wall time
# (median of 3) and peak RSS. Env: KVIO_BENCH_BUILD (Release build
# directory), KVIO_TRACE.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
trace=${KVIO_TRACE:-$root/../shared/traces/mooncake_synthetic_trace.jsonl}
[ -f "$trace" ] || { echo "bench/simulate.sh: $trace not found" >&2; exit 1; }
build=${KVIO_BENCH_BUILD:-$root/build-bench}
copies=50
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target kvio >/dev/null
kvio="$build/kvio"
work=$(mktemp -d /tmp/kvio-bench-simulate-XXXXXX)
trap 'rm -rf "$work"' EXIT

# A Mooncake replay of the trace at $1 into $2.
replay_yaml() {
    cat >"$2" <<YAML
name: mooncake-replay
mode: simulate
model: {preset: llama3-8b}
gpu: {preset: h200}
serve:
  scheduler: {policy: fcfs}
  kvcache: {block_size: 16, prefix_caching: true}
stream:
  trace: {path: $1, format: mooncake}
YAML
}
replay_yaml "$trace" "$work/mooncake.yaml"

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
rm -rf "$work/run1m"

big=$work/trace_x$copies.jsonl
python3 "$root/bench/replicate_trace.py" "$trace" "$big" "$copies"
replay_yaml "$big" "$work/mooncake_x$copies.yaml"
# Median of 3 for the wall time; the peak RSS is the largest of the three.
walls50=()
rss50_kb=0
for i in 1 2 3; do
    rm -rf "$work/run50"
    /usr/bin/time -f '%M %e' -o "$work/time50" taskset -c 0 "$kvio" -q run \
        "$work/mooncake_x$copies.yaml" -o "$work/run50" >/dev/null
    read -r rss wall <"$work/time50"
    walls50+=("$wall")
    if [ "$rss" -gt "$rss50_kb" ]; then rss50_kb=$rss; fi
done
wall_50=$(printf '%s\n' "${walls50[@]}" | sort -g | sed -n 2p)
completed50=$(python3 -c "import json;print(json.load(open('$work/run50/summary.json'))['metrics']['completed'])")
printf 'mooncake x%d replay: %s requests, wall %s s (runs: %s), peak RSS %.1f MB\n' "$copies" \
    "$completed50" "$wall_50" "${walls50[*]}" "$(echo "$rss50_kb * 1024 / 1000000" | bc -l)"

printf 'figure simulate_wall_s %.3f s\n' "$median"
printf 'figure simulate_rps %.0f req/s\n' "$rps"
printf 'figure peak_rss_1m_mib %.1f MiB\n' "$(echo "$rss_kb / 1024" | bc -l)"
printf 'figure simulate_mooncake_wall_s %.3f s\n' "$median"
printf 'figure simulate_50x_wall_s %.2f s\n' "$wall_50"
printf 'figure simulate_50x_rss_mb %.0f MB\n' "$(echo "$rss50_kb * 1024 / 1000000" | bc -l)"

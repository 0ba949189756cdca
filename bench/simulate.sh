#!/usr/bin/env bash
# Simulate-mode speed and memory: replays the shared Mooncake synthetic trace
# (3,993 requests) with Llama-3-8B on an H200, block 16, prefix caching, fcfs,
# the control off (wall time, median of 3, on one core); the peak memory of
# a 1-million-request synthetic chat stream; and the Mooncake trace
# replicated 50 times (ids and times offset per copy, as bench/cachesim.sh
# builds it): wall time (median of 3) and peak RSS. The replay offers more
# than one H200 serves (its verdict is "overloaded"): a speed run, so
# KVIO_ALLOW_INVALID=1 keeps its exit status 0.
#
# KVIO_BASELINE_BUILD=DIR (a build directory of an earlier commit, its kvio
# in DIR/kvio): the replay runs this build and that one in turn, five pairs,
# and `simulate_over_baseline` is the median of the pairs' CPU-time ratios
# (user + system, this build over the baseline: a shared machine's load
# moves wall time more than CPU time), with the peak-RSS ratio beside it.
# The cost of --event-trace FILE.pfw.gz on the chat preset in simulate
# (CPU time, traced over not, nine pairs). CPU times come from getrusage
# (microseconds).
# KVIO_BENCH_10M=1: also a 10-million-request chat stream (wall time and
# peak RSS; minutes, and its CSVs take about 3 GB in /tmp while it runs).
# Env: KVIO_BENCH_BUILD (Release build directory), KVIO_TRACE.
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
export KVIO_ALLOW_INVALID=1

# Runs a command (its output dropped) and writes its user and system CPU
# seconds to the file $1: wait4's microseconds, not /usr/bin/time's
# hundredths, which on a 0.15 s run move a ratio by 7 %.
cpu_time() {
    python3 -c 'import os, subprocess, sys
child = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
child.returncode = os.waitstatus_to_exitcode(status)
open(sys.argv[1], "w").write("%.6f %.6f\n" % (usage.ru_utime, usage.ru_stime))
sys.exit(child.returncode)' "$@"
}

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

# This build and the baseline in turn on the replay; the ratios pair by pair.
over_baseline=
if [ -n "${KVIO_BASELINE_BUILD:-}" ]; then
    base_kvio=$KVIO_BASELINE_BUILD/kvio
    [ -x "$base_kvio" ] || { echo "bench/simulate.sh: KVIO_BASELINE_BUILD: $base_kvio not found" >&2; exit 1; }
    cpu_ratios=() rss_ratios=()
    for i in 1 2 3 4 5; do
        for side in this base; do
            binary=$kvio
            [ "$side" = base ] && binary=$base_kvio
            rm -rf "$work/run_$side"
            cpu_time "$work/time_$side" /usr/bin/time -f '%M' -o "$work/rss_$side" \
                taskset -c 0 "$binary" -q run "$work/mooncake.yaml" -o "$work/run_$side"
        done
        read -r user_a sys_a <"$work/time_this"
        read -r user_b sys_b <"$work/time_base"
        read -r rss_a <"$work/rss_this"
        read -r rss_b <"$work/rss_base"
        cpu_ratios+=("$(echo "($user_a + $sys_a) / ($user_b + $sys_b)" | bc -l)")
        rss_ratios+=("$(echo "$rss_a / $rss_b" | bc -l)")
        printf 'pair %d: this %.2f s cpu %.1f MiB, baseline %.2f s cpu %.1f MiB\n' "$i" \
            "$(echo "$user_a + $sys_a" | bc -l)" "$(echo "$rss_a / 1024" | bc -l)" \
            "$(echo "$user_b + $sys_b" | bc -l)" "$(echo "$rss_b / 1024" | bc -l)"
    done
    over_baseline=$(printf '%s\n' "${cpu_ratios[@]}" | sort -g | sed -n 3p)
    rss_over_baseline=$(printf '%s\n' "${rss_ratios[@]}" | sort -g | sed -n 3p)
fi

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

# The cost of --event-trace (.pfw.gz, every event) on the chat preset in
# simulate: nine pairs, traced and not in turn, the CPU time (user + system:
# the background writer's deflate included) pair by pair.
trace_ratios=()
for i in 1 2 3 4 5 6 7 8 9; do
    for side in plain traced; do
        rm -rf "$work/run_$side" "$work/trace.pfw.gz"
        trace_args=()
        [ "$side" = traced ] && trace_args=(--event-trace "$work/trace.pfw.gz")
        cpu_time "$work/time_$side" "$kvio" -q run chat --set mode=simulate \
            -o "$work/run_$side" "${trace_args[@]}"
    done
    read -r user_a sys_a <"$work/time_traced"
    read -r user_b sys_b <"$work/time_plain"
    trace_ratios+=("$(echo "($user_a + $sys_a) / ($user_b + $sys_b)" | bc -l)")
done
trace_ratio=$(printf '%s\n' "${trace_ratios[@]}" | sort -g | sed -n 5p)
printf 'chat (simulate) traced to .pfw.gz: %s events in %.1f MB (cpu ratios: %s)\n' \
    "$(($(gzip -dc "$work/trace.pfw.gz" | wc -l) - 2))" \
    "$(echo "$(stat -c %s "$work/trace.pfw.gz") / 1000000" | bc -l)" "${trace_ratios[*]}"

# The 10-million-request chat stream, when asked for.
wall_10m= rss_10m_kb=
if [ "${KVIO_BENCH_10M:-0}" = 1 ]; then
    sed -e 's/^name: chat-1m/name: chat-10m/' -e 's/requests: 1000000/requests: 10000000/' \
        "$work/chat1m.yaml" >"$work/chat10m.yaml"
    rm -rf "$work/run10m"
    /usr/bin/time -f '%M %e %U %S' -o "$work/time10m" "$kvio" -q run "$work/chat10m.yaml" \
        -o "$work/run10m" >/dev/null
    read -r rss_10m_kb wall_10m user_10m sys_10m <"$work/time10m"
    printf '10M-request chat stream: wall %s s, cpu %.1f s, peak RSS %.1f MB\n' "$wall_10m" \
        "$(echo "$user_10m + $sys_10m" | bc -l)" "$(echo "$rss_10m_kb * 1024 / 1000000" | bc -l)"
    rm -rf "$work/run10m"
fi

printf 'figure simulate_wall_s %.3f s\n' "$median"
printf 'figure simulate_rps %.0f req/s\n' "$rps"
printf 'figure peak_rss_1m_mib %.1f MiB\n' "$(echo "$rss_kb / 1024" | bc -l)"
printf 'figure simulate_mooncake_wall_s %.3f s\n' "$median"
printf 'figure simulate_50x_wall_s %.2f s\n' "$wall_50"
printf 'figure simulate_50x_rss_mb %.0f MB\n' "$(echo "$rss50_kb * 1024 / 1000000" | bc -l)"
printf 'figure simulate_event_trace_overhead_pct %.1f %%\n' "$(echo "($trace_ratio - 1) * 100" | bc -l)"
if [ -n "$over_baseline" ]; then
    printf 'figure simulate_over_baseline %.3f x\n' "$over_baseline"
    printf 'figure simulate_rss_over_baseline %.3f x\n' "$rss_over_baseline"
fi
if [ -n "$wall_10m" ]; then
    printf 'figure simulate_10m_wall_s %.1f s\n' "$wall_10m"
    printf 'figure simulate_10m_rss_mb %.0f MB\n' "$(echo "$rss_10m_kb * 1024 / 1000000" | bc -l)"
fi

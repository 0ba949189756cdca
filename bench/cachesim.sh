#!/usr/bin/env bash
# Times `kvio cachesim` against the reference replay (lru_replay.py) on the
# shared Mooncake trace replicated 50 times (ids and times offset), the
# 6-capacity LRU sweep (one pass in kvio), whole process, median of 3 runs
# each; checks that both print the same hit rates; runs the pool
# micro-benchmark; ends with the speedup figure.
# Env: KVIO_TRACE, KVIO_REFERENCE, KVIO_BENCH_BUILD, KVIO_BENCH_RUNS.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
trace=${KVIO_TRACE:-/work/shared/traces/mooncake_synthetic_trace.jsonl}
reference=${KVIO_REFERENCE:-/work/shared/reference/lru_replay.py}
build=${KVIO_BENCH_BUILD:-$root/build-bench}
runs=${KVIO_BENCH_RUNS:-3}
copies=50

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
make -C "$build" -j2 kvio kvcache_micro >/dev/null

work=$(mktemp -d /tmp/kvio-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
big=$work/trace_x$copies.jsonl
python3 "$root/bench/replicate_trace.py" "$trace" "$big" "$copies"
echo "trace: $big ($(wc -l <"$big") requests, $(du -m "$big" | cut -f1) MB)"

capacities=1000,10000,30000,50000,100000,unlimited
seconds() { # command... -> wall seconds on stdout, command output in $work/last
    local start end
    start=$(date +%s.%N)
    "$@" >"$work/last"
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l
}
median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

kvio_times=()
python_times=()
for _ in $(seq "$runs"); do
    kvio_times+=("$(seconds "$build/kvio" cachesim "$big" --format mooncake \
        --capacity "$capacities" --eviction lru --csv)")
    cp "$work/last" "$work/kvio.csv"
    python_times+=("$(seconds python3 "$reference" "$big")")
    cp "$work/last" "$work/reference.txt"
done

# Same hit rates to 4 decimals, capacity by capacity.
awk -F, 'NR > 1 {printf "%s %.4f %.4f\n", $3, $4, $5}' "$work/kvio.csv" >"$work/a"
sed -n 's/.*capacity_blocks=\([^ ]*\) block_hit=\([^ ]*\) token_hit=\(.*\)/\1 \2 \3/p' \
    "$work/reference.txt" >"$work/b"
if ! diff "$work/a" "$work/b" >/dev/null; then
    echo "kvio and the reference disagree:" >&2
    diff "$work/a" "$work/b" >&2 || true
    exit 1
fi
echo "hit rates agree with the reference at every capacity:"
sed 's/^/  /' "$work/b"

kvio_median=$(printf '%s\n' "${kvio_times[@]}" | median)
python_median=$(printf '%s\n' "${python_times[@]}" | median)
echo "kvio cachesim: ${kvio_times[*]} s (median $kvio_median)"
echo "reference:     ${python_times[*]} s (median $python_median)"
ratio=$(echo "$python_median / $kvio_median" | bc -l)
"$build/kvcache_micro"
# Last line: the headline figure.
printf 'figure cachesim_speedup %.1f x\n' "$ratio"

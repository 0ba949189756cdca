#!/usr/bin/env bash
# The shared KV store in emulate (#57) against ucx_perftest in the same run:
# bench/shared_store_rate.c moves BLOCK-byte blocks (default 512 KiB: 16
# tokens of Llama-3.2-1B) between two ranks of one node over UCX (rank 0
# gets blocks rank 1's shard holds, BATCH of them per request, default 16
# as the engine loads them, every block checksummed at the put and checked
# at the get), and
# ucx_perftest's tag_bw moves messages of the same size between two
# processes of this node with UCX's default transports. Median of TRIALS
# runs (default 3) each. Prints both, the store's puts (BATCH blocks new to
# the store a request, the holder's shard full: it evicts), the store one
# block per request (as it was before gets were batched), a load as the
# block store did it (three round trips: is the first held, how far, get)
# and as it does (one: a get of what is held), and its lookups, batched and
# one hash a request (as each contains was), then `figure
# shared_store_get_over_ucx_perftest` (batched get GB/s over tag_bw's),
# `figure shared_store_put_over_ucx_perftest` (put GB/s over tag_bw's),
# `figure shared_store_batched_over_per_block_get`, `figure
# shared_store_load_one_over_three_round_trips` and `figure
# shared_store_batched_over_per_hash_lookup`.
# Env: KVIO_BENCH_BUILD, BLOCK, COUNT, BATCH, SECONDS_PER_PHASE, TRIALS.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build}
block=${BLOCK:-524288}
count=${COUNT:-256}
batch=${BATCH:-16}
seconds=${SECONDS_PER_PHASE:-2}
trials=${TRIALS:-3}
command -v ucx_perftest >/dev/null || { echo "ucx_perftest not found (apt-get install ucx-utils)" >&2; exit 1; }
cmake --build "$build" -j2 --target shared_store_rate >/dev/null

median() { sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

work=$(mktemp -d /tmp/kvio-bench-XXXXXX)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT

# ucx_perftest: a server process, then a client on localhost; the final
# line's bandwidth column (MB/s, MB = 2^20 in perftest's output).
perftest() {
    local port=$((13337 + RANDOM % 1000))
    ucx_perftest -t tag_bw -s "$block" -n 2000 -w 100 -p "$port" -f >"$work/server.log" 2>&1 &
    server=$!
    sleep 1
    ucx_perftest 127.0.0.1 -t tag_bw -s "$block" -n 2000 -w 100 -p "$port" -f >"$work/client.log" 2>&1
    wait "$server" || true
    server=
    # -f prints: iterations, latency (typical, avg, overall), bw (avg, overall) MB/s, msgrate
    awk '/^ *[0-9]/ {mbs=$(NF-2)} END {printf "%.3f\n", mbs * 1048576 / 1e9}' "$work/client.log"
}

for i in $(seq "$trials"); do
    "$build/shared_store_rate" "$block" "$count" "$batch" "$seconds" >>"$work/kvio.txt"
    perftest >>"$work/perftest.txt"
done
field() { awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' "$work/kvio.txt" | median; }
get=$(field get_gbps)
get1=$(field get1_gbps)
put=$(field put_gbps)
load3=$(field load3_gbps)
load1=$(field load1_gbps)
lookups=$(field lookup_per_s)
lookups1=$(field lookup1_per_s)
lookup_us=$(field lookup_batch_us)
tag=$(median <"$work/perftest.txt")
printf '%-44s %10s\n' "blocks of $block bytes, $trials trials (median)" "GB/s"
printf '%-44s %10.3f\n' "ucx_perftest tag_bw" "$tag"
printf '%-44s %10.3f\n' "shared store get, $batch blocks a request" "$get"
printf '%-44s %10.3f\n' "shared store get, a request per block" "$get1"
printf '%-44s %10.3f\n' "shared store put, $batch blocks a request" "$put"
printf '%-44s %10.3f\n' "shared store load, 3 round trips a batch" "$load3"
printf '%-44s %10.3f\n' "shared store load, 1 round trip a batch" "$load1"
printf 'lookups: %.0f hashes/s, %.1f us per batch of %s; one hash a request: %.0f hashes/s\n' \
    "$lookups" "$lookup_us" "$batch" "$lookups1"
awk -v a="$get" -v b="$tag" 'BEGIN {printf "figure shared_store_get_over_ucx_perftest %.3f x\n", a / b}'
awk -v a="$put" -v b="$tag" 'BEGIN {printf "figure shared_store_put_over_ucx_perftest %.3f x\n", a / b}'
awk -v a="$get" -v b="$get1" 'BEGIN {printf "figure shared_store_batched_over_per_block_get %.2f x\n", a / b}'
awk -v a="$load1" -v b="$load3" 'BEGIN {printf "figure shared_store_load_one_over_three_round_trips %.2f x\n", a / b}'
awk -v a="$lookups" -v b="$lookups1" 'BEGIN {printf "figure shared_store_batched_over_per_hash_lookup %.2f x\n", a / b}'

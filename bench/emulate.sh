#!/usr/bin/env bash
# Emulate-mode figures: swap copy bandwidth against plain memcpy in the same
# run, the real executor's timing error and the engine's own overhead with
# one serve rank at batch 256, and the KV capacity below which swap beats
# recompute on an UnboxKV-style workload (capacity sweep on the virtual
# clock, where a swap costs bytes over the GPU's host link).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target kvio memcpy_bw >/dev/null
kvio="$build/kvio"
work=$(mktemp -d /tmp/kvio-bench-emulate-XXXXXX)
trap 'rm -rf "$work"' EXIT
metric() { python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['metrics']
for k in sys.argv[2].split('.'): m=m[k]
print(m)" "$1" "$2"; }

# 1. Swap copies vs memcpy: Llama-3-8B blocks (2 MiB), swaps forced by a
#    small pool and the first-chunk admission of vLLM before whole-sequence
#    admission (with today's default nothing is admitted that could be
#    preempted here), prefix caching off so every swapped block is copied.
cat >"$work/swap.yaml" <<YAML
name: swap-bw
mode: emulate
model: {preset: llama3-8b}
gpu: {preset: h200}
serve:
  engine: {max_num_seqs: 16, max_num_batched_tokens: 8192, preemption: swap,
           scheduler_reserve_full_isl: false}
  kvcache: {block_size: 16, blocks: 600, prefix_caching: false, swap_space: 1GiB}
stream:
  requests: 24
  arrival: {process: batch}
  input_tokens: {dist: uniform, low: 2000, high: 3000}
  output_tokens: {dist: uniform, low: 800, high: 1200}
YAML
"$kvio" -q run "$work/swap.yaml" -o "$work/swap" >/dev/null
swapped=$(metric "$work/swap/summary.json" swapped_bytes)
if [ "$(python3 -c "print(int(float('$swapped')) > 0)")" != True ]; then
    echo "bench/emulate.sh: the swap workload swapped nothing: no swap figures to give" >&2
    exit 1
fi
copy_s=$(metric "$work/swap/summary.json" swap_copy_s)
swap_gbps=$(python3 -c "print($swapped / $copy_s / 1e9 if $copy_s > 0 else 0)")
# The plain memcpy in the same run: kvio copies as many whole blocks between
# the same pool and swap space after the run (swap_reference_copy_gbps).
ref_gbps=$(metric "$work/swap/summary.json" swap_reference_copy_gbps)
memcpy_gbps=$("$build/memcpy_bw" 2097152 512 3)
# The same copies once, after the arenas sat idle 5 s (as the pool's blocks
# do between allocation and a swap): context for swap_vs_memcpy on a VM
# whose host reclaims idle guest memory.
idle_gbps=$("$build/memcpy_bw" 2097152 512 1 5)
echo "swap copies: $swapped bytes in $copy_s s = $swap_gbps GB/s; plain memcpy of the same blocks in the same run: $ref_gbps GB/s"
echo "memcpy_bw, 2 MiB blocks between two hot 1 GiB arenas: $memcpy_gbps GB/s (after 5 s idle: $idle_gbps GB/s)"

# 2. Timing error and overhead: one rank, 256 Llama-3-8B requests decoding
#    together (4.1 GiB of KV), with the serve thread under SCHED_FIFO
#    (serve.engine.realtime; root here) and, for comparison, without.
cat >"$work/batch.yaml" <<YAML
name: batch256
mode: emulate
model: {preset: llama3-8b}
gpu: {preset: h200}
serve:
  engine: {max_num_seqs: 256, max_num_batched_tokens: 65536, realtime: true}
  kvcache: {block_size: 16, capacity: 5GiB, prefix_caching: false}
stream:
  requests: 256
  arrival: {process: batch}
  input_tokens: {dist: constant, value: 32}
  output_tokens: {dist: constant, value: 120}
YAML
"$kvio" -q run "$work/batch.yaml" -o "$work/batch" >/dev/null
error_pct=$(metric "$work/batch/summary.json" executor.timing_error_p99_pct)
error_us=$(metric "$work/batch/summary.json" executor.timing_error_p99_us)
overhead=$(metric "$work/batch/summary.json" executor.engine_overhead_pct)
preempt=$(metric "$work/batch/summary.json" preemptions)
"$kvio" -q run "$work/batch.yaml" --set serve.engine.realtime=false -o "$work/batch-normal" >/dev/null
normal_us=$(metric "$work/batch-normal/summary.json" executor.timing_error_p99_us)
normal_pct=$(metric "$work/batch-normal/summary.json" executor.timing_error_p99_pct)
echo "batch 256 (SCHED_FIFO): timing error p99 $error_us us ($error_pct %), engine overhead $overhead %, preemptions $preempt"
echo "batch 256 (normal priority): timing error p99 $normal_us us ($normal_pct %)"

# 3. Swap vs recompute over KV capacity (UnboxKV): long prompts, long
#    outputs, prefix caching off; request throughput per capacity.
cat >"$work/unbox.yaml" <<YAML
name: unboxkv
mode: simulate
model: {preset: llama3-8b}
gpu: {preset: a100-80g}
serve:
  engine: {max_num_seqs: 64, max_num_batched_tokens: 8192}
  kvcache: {block_size: 16, prefix_caching: false}
stream:
  requests: 200
  arrival: {process: batch}
  input_tokens: {dist: uniform, low: 1000, high: 3000}
  output_tokens: {dist: uniform, low: 200, high: 1000}
YAML
crossover=0
printf '%-10s %14s %14s\n' "KV GiB" "recompute req/s" "swap req/s"
for gib in 2 4 8 16 32; do
    for mode in recompute swap; do
        "$kvio" -q run "$work/unbox.yaml" --set "serve.kvcache.capacity=${gib}GiB" \
            --set "serve.engine.preemption=$mode" -o "$work/u-$gib-$mode" >/dev/null
    done
    r=$(metric "$work/u-$gib-recompute/summary.json" request_throughput)
    s=$(metric "$work/u-$gib-swap/summary.json" request_throughput)
    printf '%-10s %14.3f %14.3f\n' "$gib" "$r" "$s"
    if python3 -c "import sys; sys.exit(0 if $s > $r * 1.001 else 1)"; then crossover=$gib; fi
done
echo "swap beats recompute at and below ${crossover} GiB of KV (0: at no capacity in the sweep)"

printf 'figure swap_vs_memcpy %.2f x\n' "$(python3 -c "print($swap_gbps / $ref_gbps)")"
printf 'figure swap_vs_hot_memcpy %.2f x\n' "$(python3 -c "print($swap_gbps / $memcpy_gbps)")"
printf 'figure swap_vs_idle_memcpy %.2f x\n' "$(python3 -c "print($swap_gbps / $idle_gbps)")"
printf 'figure timing_error_p99_pct %.3f %%\n' "$error_pct"
printf 'figure engine_overhead_pct %.3f %%\n' "$overhead"
printf 'figure swap_recompute_crossover_gib %s GiB\n' "$crossover"

#!/usr/bin/env bash
# Predictive admission (pkas) against fcfs, and what its gain owes to the
# prediction: sweeps the predictor (oracle, noisy sigma 0.25/0.5/1.0,
# history, constant = the workload's mean output, constant 1) and the arrival
# rate on two workloads, in simulate mode (deterministic: one run each):
#   pkas-decode-bound   short prompts, long heavy-tailed outputs (every prompt
#                       fits a chunk: only the prediction differs)
#   pkas-long-context   12K-token prompts (fcfs admits them chunk by chunk)
# Prints the sweep as a table (output throughput, its ratio over fcfs,
# preemptions, those while a request outlived its prediction, TPOT p99) and
# writes each run's results under $KVIO_PKAS_OUT (default: a temporary
# directory, removed) so `kvio report` can draw throughput against rate.
# Ends with the figures at the saturated reference rates (decode-bound 4
# req/s, long-context 1 req/s):
#   pkas_oracle_over_fcfs, pkas_constant_over_fcfs          throughput ratios
#   pkas_oracle_tpot_p99_over_fcfs                          TPOT p99 ratio
#   pkas_whole_prompt_over_fcfs, pkas_prediction_over_whole_prompt
#                                (long-context: constant 1 over fcfs, oracle
#                                 over constant 1)
#   pkas_oracle_throughput_over_vllm  (both workloads) the oracle over `vllm`:
#                                fcfs with vLLM's whole-sequence admission
#                                (the default since #35)
# `fcfs` is the presets' first-chunk admission (serve.engine.
# scheduler_reserve_full_isl: false, vLLM before PR #37307), the baseline
# the figures above were first measured against; `vllm` is today's vLLM.
# The presets keep prefix caching off, as the paper's baseline does.
# Then the SLO capacity of each policy and predictor (kvio capacity against
# the SLO each preset fixes: decode-bound TPOT 50 ms, long-context TTFT 10 s
# and TPOT 100 ms; 90 % of requests), ending with
#   pkas_oracle_capacity_over_vllm_decode_bound, .._long_context
#   pkas_oracle_capacity_over_conservative_decode_bound
# Env: KVIO_BENCH_BUILD, KVIO_PKAS_OUT, KVIO_PKAS_CAPACITY=0 (skip it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target kvio >/dev/null
kvio="$build/kvio"
if [ -n "${KVIO_PKAS_OUT:-}" ]; then
    out=$KVIO_PKAS_OUT
    mkdir -p "$out"
else
    out=$(mktemp -d /tmp/kvio-bench-pkas-XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi

# variant name and its overrides (the policy is pkas unless fcfs)
variants=(
    "fcfs|serve.scheduler.policy=fcfs"
    "vllm|serve.scheduler.policy=fcfs serve.engine.scheduler_reserve_full_isl=true"
    "oracle|serve.scheduler.predictor=oracle"
    "noisy-0.25|serve.scheduler.predictor=noisy serve.scheduler.noisy.sigma=0.25"
    "noisy-0.5|serve.scheduler.predictor=noisy serve.scheduler.noisy.sigma=0.5"
    "noisy-1.0|serve.scheduler.predictor=noisy serve.scheduler.noisy.sigma=1.0"
    "history|serve.scheduler.predictor=history"
    "constant|serve.scheduler.predictor=constant"
    "constant-1|serve.scheduler.predictor=constant serve.scheduler.constant.value=1"
)
# workload, rates, and the constant predictor's value (its mean output)
workloads=(
    "pkas-decode-bound|1 2 4 8|600"
    "pkas-long-context|0.5 1 2 4|600"
)

printf '%-18s %5s %-11s %10s %8s %8s %8s %9s\n' workload rate variant "out tok/s" "x fcfs" \
    preempt mispred "tpot p99"
for entry in "${workloads[@]}"; do
    IFS='|' read -r workload rates constant <<<"$entry"
    for rate in $rates; do
        fcfs=""
        for variant in "${variants[@]}"; do
            IFS='|' read -r name sets <<<"$variant"
            args=(--set "stream.arrival.rate=$rate" --set serve.scheduler.policy=pkas
                  --set "serve.scheduler.constant.value=$constant"
                  --set "serve.scheduler.history.fallback=$constant")
            for set in $sets; do args+=(--set "$set"); done
            dir="$out/$workload/rate-$rate/$name"
            "$kvio" -q run "$root/workloads/repro/$workload.yaml" "${args[@]}" -o "$dir" \
                --force >/dev/null
            read -r tokens preemptions mispredicted tpot < <(python3 - "$dir/summary.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
print(m["output_throughput"], m["preemptions"], m.get("mispredict_preemptions", 0),
      m["tpot_ms"]["p99"])
PY
)
            [ "$name" = fcfs ] && fcfs=$tokens
            ratio=$(echo "$tokens / $fcfs" | bc -l)
            printf '%-18s %5s %-11s %10.1f %8.2f %8d %8d %9.1f\n' "$workload" "$rate" "$name" \
                "$tokens" "$ratio" "$preemptions" "$mispredicted" "$tpot"
            echo "$workload $rate $name $tokens $tpot" >>"$out/sweep.txt"
        done
    done
done

value() { # workload rate variant column(4: tokens, 5: tpot p99)
    awk -v w="$1" -v r="$2" -v v="$3" -v c="$4" '$1 == w && $2 == r && $3 == v {print $c}' \
        "$out/sweep.txt"
}
ratio() { echo "$1 / $2" | bc -l; }
decode=pkas-decode-bound
long=pkas-long-context
printf 'figure pkas_oracle_over_fcfs %.2f x\n' \
    "$(ratio "$(value $decode 4 oracle 4)" "$(value $decode 4 fcfs 4)")"
printf 'figure pkas_constant_over_fcfs %.2f x\n' \
    "$(ratio "$(value $decode 4 constant 4)" "$(value $decode 4 fcfs 4)")"
printf 'figure pkas_oracle_tpot_p99_over_fcfs %.3f x\n' \
    "$(ratio "$(value $decode 4 oracle 5)" "$(value $decode 4 fcfs 5)")"
printf 'figure pkas_whole_prompt_over_fcfs %.2f x\n' \
    "$(ratio "$(value $long 1 constant-1 4)" "$(value $long 1 fcfs 4)")"
printf 'figure pkas_prediction_over_whole_prompt %.2f x\n' \
    "$(ratio "$(value $long 1 oracle 4)" "$(value $long 1 constant-1 4)")"
printf 'figure pkas_oracle_throughput_over_vllm_decode_bound %.2f x\n' \
    "$(ratio "$(value $decode 4 oracle 4)" "$(value $decode 4 vllm 4)")"
printf 'figure pkas_oracle_throughput_over_vllm_long_context %.2f x\n' \
    "$(ratio "$(value $long 1 oracle 4)" "$(value $long 1 vllm 4)")"
printf 'figure pkas_oracle_tpot_p99_over_vllm %.3f x\n' \
    "$(ratio "$(value $decode 4 oracle 5)" "$(value $decode 4 vllm 5)")"

[ "${KVIO_PKAS_CAPACITY:-1}" = 1 ] || exit 0
# SLO capacity (req/s) per variant: the highest rate 90 % of requests meet
# the preset's SLO at.
capacity_variants=("${variants[@]}" "conservative|serve.scheduler.policy=conservative")
printf '\n%-18s %-13s %10s %8s %s\n' workload variant "capacity" "x vllm" binding
for entry in "${workloads[@]}"; do
    IFS='|' read -r workload rates constant <<<"$entry"
    vllm_capacity=""
    for variant in "${capacity_variants[@]}"; do
        IFS='|' read -r name sets <<<"$variant"
        args=(--set serve.scheduler.policy=pkas --set "serve.scheduler.constant.value=$constant"
              --set "serve.scheduler.history.fallback=$constant")
        for set in $sets; do args+=(--set "$set"); done
        dir="$out/$workload/capacity/$name"
        "$kvio" -q capacity "$root/workloads/repro/$workload.yaml" "${args[@]}" \
            --tolerance 0.02 -o "$dir" --force >/dev/null
        read -r rps binding < <(python3 - "$dir/capacity.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["capacity_rps"], r["binding"])
PY
)
        [ "$name" = vllm ] && vllm_capacity=$rps
        echo "$workload $name $rps" >>"$out/capacity.txt"
        printf '%-18s %-13s %10.3f %8s %s\n' "$workload" "$name" "$rps" \
            "$([ -n "$vllm_capacity" ] && printf '%.2f' "$(echo "$rps / $vllm_capacity" | bc -l)" || echo -)" \
            "$binding"
    done
done
capacity() { awk -v w="$1" -v v="$2" '$1 == w && $2 == v {print $3}' "$out/capacity.txt"; }
printf 'figure pkas_oracle_capacity_over_vllm_decode_bound %.2f x\n' \
    "$(ratio "$(capacity $decode oracle)" "$(capacity $decode vllm)")"
printf 'figure pkas_oracle_capacity_over_vllm_long_context %.2f x\n' \
    "$(ratio "$(capacity $long oracle)" "$(capacity $long vllm)")"
printf 'figure pkas_oracle_capacity_over_conservative_decode_bound %.2f x\n' \
    "$(ratio "$(capacity $decode oracle)" "$(capacity $decode conservative)")"

#!/usr/bin/env bash
# Predictive admission (pkas) judged against today's vLLM, and what its gain
# owes to each part. Simulate mode (deterministic: one run each), on the
# three PKAS presets:
#   pkas-decode-bound   short prompts, long heavy-tailed outputs (every prompt
#                       fits a chunk: only the prediction differs)
#   pkas-long-context   12K-token prompts (first-chunk admission thrashes)
#   pkas-chat           ShareGPT-like chat on a small KV cache
#   pkas-swap-slow-link the decode-bound stream with preemption by swap over a
#                       2 GB/s host link and a 20 ms TPOT SLO (where
#                       prediction pays; pkas-chat under today's vLLM is
#                       where it does not)
# under two engine profiles:
#   paper   the presets as they ship: the vLLM of the paper's time (first-chunk
#           admission, prefix caching off)
#   vllm    today's vLLM defaults: whole-sequence admission
#           (scheduler_reserve_full_isl) and prefix caching on
# Variants: fcfs (the profile's baseline), pkas with each predictor (oracle,
# noisy sigma 0.25/0.5/1.0, history, constant = the workload's mean output,
# constant 1) and, for the paper profile, fcfs with whole-sequence admission
# alone (fcfs-whole, to split the gain).
#
# Part 1, the rate sweep: output throughput, its ratio over the profile's
# fcfs, preemptions, mispredict preemptions, TPOT p99, goodput. Part 2, SLO
# capacity (kvio capacity against the SLO each preset fixes in its file:
# decode-bound TPOT 50 ms; long-context TTFT 10 s, TPOT 100 ms; chat TTFT
# 2 s, TPOT 80 ms; swap-slow-link TPOT 20 ms; 90 % of requests; the knee in
# the offered rate as measured, over 3 seeds) per profile, workload and
# variant, conservative too. Figures, at the reference rates (decode-bound 4,
# long-context 1, chat 10, swap-slow-link 4 req/s) for throughput and TPOT:
#   paper profile, as first measured: pkas_oracle_over_fcfs,
#     pkas_constant_over_fcfs, pkas_oracle_tpot_p99_over_fcfs (decode-bound),
#     pkas_whole_prompt_over_fcfs, pkas_prediction_over_whole_prompt
#     (long-context)
#   vllm profile, per workload W: pkas_oracle_throughput_over_vllm_W,
#     pkas_oracle_capacity_over_vllm_W, pkas_oracle_over_conservative_W (SLO
#     capacity), pkas_oracle_tpot_p99_over_vllm_W,
#     pkas_oracle_goodput_over_vllm_W, and the oracle's rank
#     among the predictors by TPOT p99 and by mispredict preemptions
#     (pkas_oracle_tpot_p99_rank_W, pkas_oracle_mispredict_rank_W; 1 = lowest)
#   the gain split, throughput ratios per workload W: pkas_split_whole_
#     sequence_W (paper fcfs-whole / paper fcfs), pkas_split_prefix_caching_W
#     (vllm fcfs / paper fcfs-whole), pkas_split_margin_W (vllm constant-1 /
#     vllm fcfs: pkas's 5 % margin with no prediction), pkas_split_
#     prediction_W (vllm oracle / vllm constant-1)
# Results stay under $KVIO_PKAS_OUT (default: a temporary directory, removed)
# for `kvio report`. Env: KVIO_BENCH_BUILD, KVIO_PKAS_OUT, KVIO_PKAS_CAPACITY=0
# (skip part 2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target kvio >/dev/null
kvio="$build/kvio"
if [ -n "${KVIO_PKAS_OUT:-}" ]; then
    out=$KVIO_PKAS_OUT
    mkdir -p "$out"
    rm -f "$out/sweep.txt" "$out/capacity.txt"
else
    out=$(mktemp -d /tmp/kvio-bench-pkas-XXXXXX)
    trap 'rm -rf "$out"' EXIT
fi

# profile name and its overrides
profiles=(
    "paper|"
    "vllm|serve.engine.scheduler_reserve_full_isl=true serve.kvcache.prefix_caching=true"
)
# variant name, the profiles it runs under, its overrides (pkas unless fcfs)
variants=(
    "fcfs|paper vllm|serve.scheduler.policy=fcfs"
    "fcfs-whole|paper|serve.scheduler.policy=fcfs serve.engine.scheduler_reserve_full_isl=true"
    "oracle|paper vllm|serve.scheduler.predictor=oracle"
    "noisy-0.25|paper vllm|serve.scheduler.predictor=noisy serve.scheduler.noisy.sigma=0.25"
    "noisy-0.5|paper vllm|serve.scheduler.predictor=noisy serve.scheduler.noisy.sigma=0.5"
    "noisy-1.0|paper vllm|serve.scheduler.predictor=noisy serve.scheduler.noisy.sigma=1.0"
    "history|paper vllm|serve.scheduler.predictor=history"
    "constant|paper vllm|serve.scheduler.predictor=constant"
    "constant-1|paper vllm|serve.scheduler.predictor=constant serve.scheduler.constant.value=1"
)
predictors="oracle noisy-0.25 noisy-0.5 noisy-1.0 history constant constant-1"
# workload, its figure name, rates, the reference rate, the constant
# predictor's value (the workload's mean output)
workloads=(
    "pkas-decode-bound|decode_bound|1 2 4 8|4|600"
    "pkas-long-context|long_context|0.5 1 2 4|1|600"
    "pkas-chat|chat|5 10 20 40|10|400"
    "pkas-swap-slow-link|swap_slow_link|2 4 6 8|4|600"
)

ratio() { # a / b, nan when b is 0
    if [ "$(echo "$2 == 0" | bc)" = 1 ]; then echo nan; else echo "$1 / $2" | bc -l; fi
}
# The overrides of a variant under a profile.
args_of() { # profile-sets variant-sets constant
    local -n list=$4
    list=(--set serve.scheduler.policy=pkas --set "serve.scheduler.constant.value=$3"
          --set "serve.scheduler.history.fallback=$3")
    for set in $1 $2; do list+=(--set "$set"); done
}

printf '%-19s %-6s %5s %-11s %10s %8s %8s %8s %9s %8s\n' workload profile rate variant \
    "out tok/s" "x fcfs" preempt mispred "tpot p99" goodput
for entry in "${workloads[@]}"; do
    IFS='|' read -r workload _ rates _ constant <<<"$entry"
    for profile_entry in "${profiles[@]}"; do
        IFS='|' read -r profile profile_sets <<<"$profile_entry"
        for rate in $rates; do
            fcfs=""
            for variant in "${variants[@]}"; do
                IFS='|' read -r name under sets <<<"$variant"
                [[ " $under " == *" $profile "* ]] || continue
                args_of "$profile_sets" "$sets" "$constant" args
                dir="$out/$workload/$profile/rate-$rate/$name"
                # The sweep goes past the knee on purpose: an overloaded
                # run is a point of the curve (its goodput says so), not a
                # failure of the bench.
                "$kvio" -q run "$root/workloads/repro/$workload.yaml" "${args[@]}" \
                    --set "stream.arrival.rate=$rate" -o "$dir" --force --allow-invalid \
                    >/dev/null 2>&1
                read -r tokens preemptions mispredicted tpot goodput < <(python3 - "$dir/summary.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
print(m["output_throughput"], m["preemptions"], m.get("mispredict_preemptions", 0),
      m["tpot_ms"]["p99"], m["goodput"])
PY
)
                [ "$name" = fcfs ] && fcfs=$tokens
                printf '%-19s %-6s %5s %-11s %10.1f %8.2f %8d %8d %9.1f %8.2f\n' "$workload" \
                    "$profile" "$rate" "$name" "$tokens" "$(ratio "$tokens" "$fcfs")" \
                    "$preemptions" "$mispredicted" "$tpot" "$goodput"
                echo "$workload $profile $rate $name $tokens $tpot $mispredicted $goodput" \
                    >>"$out/sweep.txt"
            done
        done
    done
done

value() { # workload profile rate variant column (5: tokens, 6: tpot p99, 7: mispredicted,
          # 8: goodput)
    awk -v w="$1" -v p="$2" -v r="$3" -v v="$4" -v c="$5" \
        '$1 == w && $2 == p && $3 == r && $4 == v {print $c}' "$out/sweep.txt"
}
# 1 + how many other predictors are strictly below the oracle in column c.
rank() { # workload rate column
    local oracle others=0 v
    oracle=$(value "$1" vllm "$2" oracle "$3")
    for p in $predictors; do
        v=$(value "$1" vllm "$2" "$p" "$3")
        if (( $(echo "$v < $oracle" | bc -l) )); then others=$((others + 1)); fi
    done
    echo $((others + 1))
}
decode=pkas-decode-bound
long=pkas-long-context
printf 'figure pkas_oracle_over_fcfs %.2f x\n' \
    "$(ratio "$(value $decode paper 4 oracle 5)" "$(value $decode paper 4 fcfs 5)")"
printf 'figure pkas_constant_over_fcfs %.2f x\n' \
    "$(ratio "$(value $decode paper 4 constant 5)" "$(value $decode paper 4 fcfs 5)")"
printf 'figure pkas_oracle_tpot_p99_over_fcfs %.3f x\n' \
    "$(ratio "$(value $decode paper 4 oracle 6)" "$(value $decode paper 4 fcfs 6)")"
printf 'figure pkas_whole_prompt_over_fcfs %.2f x\n' \
    "$(ratio "$(value $long paper 1 constant-1 5)" "$(value $long paper 1 fcfs 5)")"
printf 'figure pkas_prediction_over_whole_prompt %.2f x\n' \
    "$(ratio "$(value $long paper 1 oracle 5)" "$(value $long paper 1 constant-1 5)")"
for entry in "${workloads[@]}"; do
    IFS='|' read -r workload short _ reference _ <<<"$entry"
    v() { value "$workload" "$1" "$reference" "$2" "$3"; }
    printf 'figure pkas_oracle_throughput_over_vllm_%s %.2f x\n' "$short" \
        "$(ratio "$(v vllm oracle 5)" "$(v vllm fcfs 5)")"
    printf 'figure pkas_oracle_tpot_p99_over_vllm_%s %.3f x\n' "$short" \
        "$(ratio "$(v vllm oracle 6)" "$(v vllm fcfs 6)")"
    printf 'figure pkas_oracle_goodput_over_vllm_%s %.2f x\n' "$short" \
        "$(ratio "$(v vllm oracle 8)" "$(v vllm fcfs 8)")"
    printf 'figure pkas_oracle_tpot_p99_rank_%s %d of 7\n' "$short" "$(rank "$workload" "$reference" 6)"
    printf 'figure pkas_oracle_mispredict_rank_%s %d of 7\n' "$short" "$(rank "$workload" "$reference" 7)"
    printf 'figure pkas_split_whole_sequence_%s %.2f x\n' "$short" \
        "$(ratio "$(v paper fcfs-whole 5)" "$(v paper fcfs 5)")"
    printf 'figure pkas_split_prefix_caching_%s %.2f x\n' "$short" \
        "$(ratio "$(v vllm fcfs 5)" "$(v paper fcfs-whole 5)")"
    printf 'figure pkas_split_margin_%s %.2f x\n' "$short" \
        "$(ratio "$(v vllm constant-1 5)" "$(v vllm fcfs 5)")"
    printf 'figure pkas_split_prediction_%s %.2f x\n' "$short" \
        "$(ratio "$(v vllm oracle 5)" "$(v vllm constant-1 5)")"
done

[ "${KVIO_PKAS_CAPACITY:-1}" = 1 ] || exit 0
# SLO capacity (req/s): the highest rate at which 90 % of the requests meet
# the preset's SLO.
capacity_variants=("${variants[@]}" "conservative|paper vllm|serve.scheduler.policy=conservative")
printf '\n%-19s %-6s %-13s %10s %8s %s\n' workload profile variant capacity "x fcfs" binding
for entry in "${workloads[@]}"; do
    IFS='|' read -r workload _ _ _ constant <<<"$entry"
    for profile_entry in "${profiles[@]}"; do
        IFS='|' read -r profile profile_sets <<<"$profile_entry"
        fcfs_capacity=""
        for variant in "${capacity_variants[@]}"; do
            IFS='|' read -r name under sets <<<"$variant"
            [[ " $under " == *" $profile "* ]] || continue
            args_of "$profile_sets" "$sets" "$constant" args
            dir="$out/$workload/$profile/capacity/$name"
            "$kvio" -q capacity "$root/workloads/repro/$workload.yaml" "${args[@]}" \
                --tolerance 0.02 -o "$dir" --force >/dev/null
            read -r rps binding < <(python3 - "$dir/capacity.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(r["capacity_rps"], r["binding"])
PY
)
            [ "$name" = fcfs ] && fcfs_capacity=$rps
            echo "$workload $profile $name $rps" >>"$out/capacity.txt"
            printf '%-19s %-6s %-13s %10.3f %8.2f %s\n' "$workload" "$profile" "$name" "$rps" \
                "$(ratio "$rps" "$fcfs_capacity")" "$binding"
        done
    done
done
capacity() { # workload profile variant
    awk -v w="$1" -v p="$2" -v v="$3" '$1 == w && $2 == p && $3 == v {print $4}' \
        "$out/capacity.txt"
}
for entry in "${workloads[@]}"; do
    IFS='|' read -r workload short _ _ _ <<<"$entry"
    printf 'figure pkas_oracle_capacity_over_vllm_%s %.2f x\n' "$short" \
        "$(ratio "$(capacity "$workload" vllm oracle)" "$(capacity "$workload" vllm fcfs)")"
    printf 'figure pkas_oracle_over_conservative_%s %.2f x\n' "$short" \
        "$(ratio "$(capacity "$workload" vllm oracle)" "$(capacity "$workload" vllm conservative)")"
done

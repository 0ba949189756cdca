#!/usr/bin/env bash
# Prefill/decode disaggregation (#39), three parts in one run:
#  1. The KV transfer against the model-update path, same machine, same
#     size: emulate, one prefill and one decode rank, prompts whose KV is
#     KV_BYTES (default 128 MiB: 4,096 tokens of Llama-3.2-1B) one at a
#     time (the prefill rank's staging copy with its checksums, then the
#     decode rank's reads into its pool, each block checked as it is
#     copied), against a trainer's update of the same bytes to one server
#     over ucx (its transfer stage: stores or puts, summed as they go).
#     `figure pd_kv_transfer_over_update_bw` is the decode's read bandwidth
#     (the peer tier's bytes over its read time) over the update's transfer
#     bandwidth (median of the versions); the staging copy is shown apart.
#  2. Layer-wise against whole-request transfer (simulate): one prompt of
#     LONG_PROMPT tokens (default 32,768) of Llama-3-8B over a 400 Gb/s NIC,
#     TTFT whole over TTFT layer-wise: `figure pd_layerwise_ttft_gain`.
#  3. Where ../shared/traces/mooncake_synthetic_trace.jsonl is (or
#     MOONCAKE_TRACE names it): that trace in simulate on 1P1D, 1P2D, 2P1D
#     and 2 and 3 colocated serve ranks (Llama-3-8B, H200): TTFT p99, TPOT
#     p99, throughput, KV transfer p50, each pool's utilisation.
# Usage: bench/pd.sh [BUILD_DIR] (default build/).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kvio=$build/kvio
kv_bytes=${KV_BYTES:-134217728}
long_prompt=${LONG_PROMPT:-32768}
trace=${MOONCAKE_TRACE:-../shared/traces/mooncake_synthetic_trace.jsonl}
[ -x "$kvio" ] || { echo "build kvio first ($kvio not found)" >&2; exit 1; }
work=$(mktemp -d /tmp/kvio-bench-pd-XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

# json FILE PATH: a value of summary.json by dotted path.
json() {
    python3 - "$1" "$2" <<'PY'
import json, sys
value = json.load(open(sys.argv[1]))
for part in sys.argv[2].split("."):
    value = value[part]
print(value if isinstance(value, str) else "%.4g" % value)
PY
}

# 1. The KV transfer and the update path at the same size.
tokens=$((kv_bytes / 32768))
cat >"$work/kv.yaml" <<YAML
name: bench-pd-kv
mode: emulate
seed: 1
duration: 30s
ranks: {prefill: 1, decode: 1, timeout: 120s}
model: {preset: llama3.2-1b}
gpu: {preset: h200}
serve:
  kvcache: {block_size: 16, blocks: $((tokens / 16 * 3 + 64))}
stream:
  requests: 9
  arrival: {process: constant, rate: 1}
  input_tokens: {dist: constant, value: $((tokens + 1))}
  output_tokens: {dist: constant, value: 4}
YAML
cat >"$work/update.yaml" <<YAML
name: bench-pd-update
mode: emulate
ranks: {train: 1, serve: 1, runtime: local, timeout: 120s}
train:
  step_time: {dist: constant, value: 1s}
  steps: 9
  bytes: $kv_bytes
  checkpoint: {policy: every_n_steps, every_n_steps: 1}
  transport: {kind: ucx, chunk: 4MiB, inflight: 8}
update: {iteration: 1ms, verify: true}
YAML
timeout 600 "$kvio" -q run "$work/kv.yaml" -o "$work/kv" >/dev/null
timeout 600 "$kvio" -q run "$work/update.yaml" -o "$work/update" >/dev/null
# The decode ranks' reads of the staged KV (the peer tier's bytes over its
# read time: the transfer stage, as the update's bandwidth is its own).
kv_gbps=$(python3 -c 'import json,sys; t=[t for t in json.load(open(sys.argv[1]))["metrics"]["tiers"] if t["kind"]=="remote"]; print("%.4g" % (sum(x["bytes_read"] for x in t)/sum(x["read_ns"] for x in t)))' "$work/kv/summary.json")
stage_gbps=$(json "$work/kv/summary.json" metrics.pd.transfer_gbps.p50)
kv_ms=$(json "$work/kv/summary.json" metrics.pd.transfer_ms.p50)
update_gbps=$(json "$work/update/summary.json" metrics.model_updates.bandwidth_gbps.p50)
update_ms=$(json "$work/update/summary.json" metrics.model_updates.update_latency_ms.p50)
echo "P/D KV transfer against a model update of the same $((kv_bytes >> 20)) MiB, 1 -> 1, emulate (load: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-34s %10s %10s\n' path ms_p50 GB/s
printf '%-34s %10s %10s\n' "KV transfer, the decode's read" "" "$kv_gbps"
printf '%-34s %10s %10s\n' "KV transfer, staging + read (p50)" "$kv_ms" "$stage_gbps"
printf '%-34s %10s %10s\n' "model update, ucx (p50)" "$update_ms" "$update_gbps"
echo "  verified blocks $(json "$work/kv/summary.json" metrics.pd.verified_blocks), checksum failures $(json "$work/kv/summary.json" metrics.pd.checksum_failures)"

# 2. Layer-wise against whole, one long prompt.
cat >"$work/long.yaml" <<YAML
name: bench-pd-long
mode: simulate
seed: 1
duration: 10s
ranks: {prefill: 1, decode: 1}
model: {preset: llama3-8b}
gpu: {preset: h200}
pd: {link: nic}
stream:
  requests: 1
  arrival: {process: batch}
  input_tokens: {dist: constant, value: $long_prompt}
  output_tokens: {dist: constant, value: 16}
YAML
"$kvio" -q run "$work/long.yaml" -o "$work/whole" >/dev/null
"$kvio" -q run "$work/long.yaml" -o "$work/layerwise" --set pd.layerwise=true >/dev/null
whole=$(json "$work/whole/summary.json" metrics.ttft_ms.p50)
layerwise=$(json "$work/layerwise/summary.json" metrics.ttft_ms.p50)
echo
echo "one $long_prompt-token prompt, Llama-3-8B on H200, 1P1D over a 400 Gb/s NIC (simulate)"
printf '%-12s %10s %14s\n' transfer ttft_ms transfer_ms
printf '%-12s %10s %14s\n' whole "$whole" "$(json "$work/whole/summary.json" metrics.pd.mean_ttft_parts_ms.kv_transfer)"
printf '%-12s %10s %14s\n' layer-wise "$layerwise" "$(json "$work/layerwise/summary.json" metrics.pd.mean_ttft_parts_ms.kv_transfer)"

# 3. The Mooncake trace on P/D shapes and colocated ranks.
if [ -f "$trace" ]; then
    cat >"$work/mooncake.yaml" <<YAML
name: bench-pd-mooncake
mode: simulate
seed: 1
duration: 1200s
model: {preset: llama3-8b}
gpu: {preset: h200}
serve:
  kvcache: {block_size: 16}
stream:
  trace: {path: $(realpath "$trace")}
YAML
    echo
    echo "Mooncake synthetic trace (3,993 requests, 17 min), Llama-3-8B on H200 per rank (simulate)"
    printf '%-14s %5s %12s %10s %10s %12s %14s\n' shape GPUs ttft_p99_ms tpot_p99 req/s transfer_p50 busy_P/D_or_all
    for shape in "1P1D 1 1 0" "1P2D 1 2 0" "2P1D 2 1 0" "2_colocated 0 0 2" "3_colocated 0 0 3"; do
        read -r name prefill decode serve <<<"$shape"
        sets=(--set "ranks.prefill=$prefill" --set "ranks.decode=$decode")
        [ "$serve" -gt 0 ] && sets+=(--set "ranks.serve=$serve")
        out="$work/mc-$name"
        "$kvio" -q run "$work/mooncake.yaml" -o "$out" "${sets[@]}" >/dev/null 2>&1
        gpus=$((prefill + decode + serve))
        if [ "$serve" -gt 0 ]; then
            transfer="-"
            busy=$(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["metrics"]; print("%.0f%%" % (100*m["accelerator_utilization"]))' "$out/summary.json")
        else
            transfer="$(json "$out/summary.json" metrics.pd.transfer_ms.p50) ms"
            busy=$(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["metrics"]["pd"]; print("%.0f%%/%.0f%%" % (100*p["prefill_utilization"], 100*p["decode_utilization"]))' "$out/summary.json")
        fi
        printf '%-14s %5s %12s %10s %10s %12s %14s\n' "$name" "$gpus" \
            "$(json "$out/summary.json" metrics.ttft_ms.p99)" \
            "$(json "$out/summary.json" metrics.tpot_ms.p99)" \
            "$(json "$out/summary.json" metrics.request_throughput)" "$transfer" "$busy"
    done
else
    echo
    echo "(no Mooncake trace at $trace: part 3 skipped; MOONCAKE_TRACE=FILE names one)"
fi

echo
python3 - "$kv_gbps" "$update_gbps" "$whole" "$layerwise" <<'PY'
import sys
kv, update, whole, layerwise = map(float, sys.argv[1:])
print("figure pd_kv_transfer_over_update_bw %.2f x" % (kv / update))
print("figure pd_layerwise_ttft_gain %.2f x" % (whole / layerwise))
PY

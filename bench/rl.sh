#!/usr/bin/env bash
# AReaL's published speed-up of asynchronous over synchronous RL training
# (arXiv 2505.24298: "up to 2.77x training speedup compared to synchronous
# systems with the same number of GPUs") beside kvio's: the rl-sync preset
# (verl-style, 8 H100s colocated) against rl-async (4 generating, 4
# training, interruptible rollouts) at staleness 1, 2 and 4, simulate mode
# (deterministic, a few seconds). Prints each run's step time and split,
# then `figure rl_async_speedup_eta<E> R x` lines (sync step / async step)
# and the published figure.
# Partial rollouts: Kimi k1.5 (arXiv 2501.12599) gives no number for its
# partial rollouts; APRIL (arXiv 2509.18521v3, partial rollouts in slime's
# synchronous loop: unfinished responses set aside and continued next
# step) reports rollout throughput +22.5 % on average (at most +44 %). The
# rl-sync preset with rl.partial_tokens 2048 and 4096 against without
# prints `figure rl_partial_rollout_throughput_gain_<N> R x` (rollout
# tokens/s with over without) beside it.
# Emulate (real time, this host): a 1B model's synchronous separate loop
# against async at staleness 2, the trainer a rank of its own moving 64 MiB
# of weights over UCX each step; prints `figure rl_emulate_async_speedup_eta2`
# and `figure rl_emulate_sync_gbps` (weight bytes over the measured sync)
# beside a memcpy of the same bytes (bench/memcpy_bw.c --fresh) in the run.
# Usage: bench/rl.sh [BUILD_DIR]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kvio=$build/kvio
[ -x "$kvio" ] || { echo "build kvio first ($kvio not found)" >&2; exit 1; }
work=$(mktemp -d /tmp/kvio-rl-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$kvio" -q run rl-sync -o "$work/sync" --force >/dev/null
for eta in 1 2 4; do
    "$kvio" -q run rl-async --set rl.staleness=$eta -o "$work/async-$eta" --force >/dev/null
done
cat >"$work/emulate.yaml" <<'YAML'
name: rl-emulate-bench
seed: 5
mode: emulate
model: {preset: llama3.2-1b}
gpu: {preset: h200}
ranks: {serve: 1}
serve:
  engine: {max_num_seqs: 64, max_num_batched_tokens: 4096}
  kvcache: {block_size: 16, blocks: 128}
stream:
  requests: 12
  arrival: {process: batch}
  input_tokens: 64
  output_tokens: {dist: uniform, low: 8, high: 32}
  group: {n: 4}
rl: {mode: sync, placement: separate, steps: 6, batch: 2, train_time: 100ms, weight_bytes: 64MiB}
YAML
"$kvio" -q run "$work/emulate.yaml" -o "$work/emulate-sync" --force >/dev/null
# The reference: one memcpy of the same 64 MiB between fresh buffers.
cmake --build "$build" --target memcpy_bw >/dev/null
read -r _ memcpy_gbps <<<"$("$build/memcpy_bw" --fresh $((64 << 20)) 3)"
echo "$memcpy_gbps" >"$work/memcpy_gbps"
"$kvio" -q run "$work/emulate.yaml" --set rl.mode=async --set rl.staleness=2 \
    -o "$work/emulate-async" --force >/dev/null
for cap in 2048 4096; do
    "$kvio" -q run rl-sync --set rl.partial_tokens=$cap -o "$work/partial-$cap" --force \
        >/dev/null
done

python3 - "$work" <<'PY'
import json, os, sys

work = sys.argv[1]
def metrics(name):
    return json.load(open(os.path.join(work, name, "summary.json")))["metrics"]["rl"]

runs = [("sync", "rl-sync (8 GPUs colocated)")] + \
       [(f"async-{e}", f"rl-async eta={e} (4+4 GPUs)") for e in (1, 2, 4)] + \
       [(f"partial-{c}", f"rl-sync partial_tokens={c}") for c in (2048, 4096)]
print(f"{'run':30} {'step s':>8} {'gen s':>7} {'tail s':>7} {'train s':>8} {'sync s':>7} "
      f"{'wake s':>7} {'tok/s':>8} {'stale':>6}")
got, tokens = {}, {}
for key, label in runs:
    m = metrics(key)
    got[key] = m["step_s"]
    tokens[key] = m["rollout_tokens_per_s"]
    print(f"{label:30} {m['step_s']:8.1f} {m['generation_s']:7.1f} {m['long_tail_s']:7.1f} "
          f"{m['train_s']:8.1f} {m['sync_s']:7.2f} {m.get('wake_s', 0):7.2f} "
          f"{m['rollout_tokens_per_s']:8.0f} {m['staleness']['mean']:6.2f}")
print("published: AReaL, up to 2.77x over synchronous systems on the same GPUs "
      "(arXiv 2505.24298v4, abstract)")
for eta in (1, 2, 4):
    print(f"figure rl_async_speedup_eta{eta} {got['sync'] / got[f'async-{eta}']:.2f} x")
print("figure rl_async_speedup_published 2.77 x")
print("published: APRIL, partial rollouts in a synchronous loop, rollout throughput +22.5 % "
      "on average, at most +44 % (arXiv 2509.18521v3, abstract); Kimi k1.5 publishes none")
for cap in (2048, 4096):
    print(f"figure rl_partial_rollout_throughput_gain_{cap} "
          f"{tokens[f'partial-{cap}'] / tokens['sync']:.2f} x")
print("figure rl_partial_rollout_throughput_gain_published 1.225 x")
emulated = {key: metrics(f"emulate-{key}") for key in ("sync", "async")}
for key, label in (("sync", "emulate sync separate"), ("async", "emulate async eta=2")):
    m = emulated[key]
    print(f"{label:30} {m['step_s']:8.3f} {m['generation_s']:7.3f} {m['long_tail_s']:7.3f} "
          f"{m['train_s']:8.3f} {m['sync_s']:7.4f} {'':>7} {m['rollout_tokens_per_s']:8.0f} "
          f"{m['staleness']['mean']:6.2f}")
print(f"figure rl_emulate_async_speedup_eta2 "
      f"{emulated['sync']['step_s'] / emulated['async']['step_s']:.2f} x")
sync = emulated["sync"]
sync_gbps = sync['sync_bytes'] / sync['steps'] / sync['sync_s'] / 1e9
memcpy_gbps = float(open(os.path.join(work, "memcpy_gbps")).read())
print(f"figure rl_emulate_sync_gbps {sync_gbps:.2f} GB/s")
print(f"figure rl_emulate_memcpy_gbps {memcpy_gbps:.2f} GB/s")
print(f"figure rl_emulate_sync_over_memcpy {sync_gbps / memcpy_gbps:.2f} x")
PY

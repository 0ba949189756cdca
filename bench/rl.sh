#!/usr/bin/env bash
# AReaL's published speed-up of asynchronous over synchronous RL training
# (arXiv 2505.24298: "up to 2.77x training speedup compared to synchronous
# systems with the same number of GPUs") beside kvio's: the rl-sync preset
# (verl-style, 8 H100s colocated) against rl-async (4 generating, 4
# training, interruptible rollouts) at staleness 1, 2 and 4, simulate mode
# (deterministic, a few seconds). Prints each run's step time and split,
# then `figure rl_async_speedup_eta<E> R x` lines (sync step / async step)
# and the published figure.
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

python3 - "$work" <<'PY'
import json, os, sys

work = sys.argv[1]
def metrics(name):
    return json.load(open(os.path.join(work, name, "summary.json")))["metrics"]["rl"]

runs = [("sync", "rl-sync (8 GPUs colocated)")] + \
       [(f"async-{e}", f"rl-async eta={e} (4+4 GPUs)") for e in (1, 2, 4)]
print(f"{'run':30} {'step s':>8} {'gen s':>7} {'tail s':>7} {'train s':>8} {'sync s':>7} "
      f"{'wake s':>7} {'tok/s':>8} {'stale':>6}")
got = {}
for key, label in runs:
    m = metrics(key)
    got[key] = m["step_s"]
    print(f"{label:30} {m['step_s']:8.1f} {m['generation_s']:7.1f} {m['long_tail_s']:7.1f} "
          f"{m['train_s']:8.1f} {m['sync_s']:7.2f} {m.get('wake_s', 0):7.2f} "
          f"{m['rollout_tokens_per_s']:8.0f} {m['staleness']['mean']:6.2f}")
print("published: AReaL, up to 2.77x over synchronous systems on the same GPUs "
      "(arXiv 2505.24298v4, abstract)")
for eta in (1, 2, 4):
    print(f"figure rl_async_speedup_eta{eta} {got['sync'] / got[f'async-{eta}']:.2f} x")
print("figure rl_async_speedup_published 2.77 x")
PY

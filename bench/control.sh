#!/usr/bin/env bash
# What measuring the updates' cost against a control costs, and what the
# controls say on this machine:
#  - control_overhead_*: a simulate coupled run with its no-update twin
#    (update.control: twin, the default) over the same run without a
#    control (update.control: off), wall time of the whole kvio process,
#    median of KVIO_BENCH_REPEAT alternating runs; on the quickstart (in
#    simulate) and the update-interference preset. Target <= 2.0.
#  - control_overhead_compare: kvio compare of three cache modes on
#    update-interference, whose variants share one twin, over the same
#    compare without a control. Target <= 1.4.
#  - emulate (KVIO_BENCH_EMULATE=1, the default; 0 skips it, ~3 min): an A/A
#    paired run (both sides publish nothing: train.checkpoint.policy: never)
#    of a shortened quickstart, 3 pairs: how many of its intervals contain 0
#    (each should, 95 % of the time); and the quickstart over Redis: decode
#    gaps during updates against outside them (no control needed).
# Prints `figure NAME VALUE UNIT` lines. Usage: bench/control.sh [BUILD_DIR].
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kvio=$build/kvio
repeat=${KVIO_BENCH_REPEAT:-7}
emulate=${KVIO_BENCH_EMULATE:-1}
[ -x "$kvio" ] || { echo "build kvio first ($kvio not found)" >&2; exit 1; }
work=$(mktemp -d /tmp/kvio-bench-control-XXXXXX)
redis_pid=""
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# ratio NAME REPEAT -- COMMAND_WITH... -- COMMAND_WITHOUT...: the median wall
# time of the first command over the second's, run alternately.
ratio() {
    python3 - "$@" <<'PY'
import statistics, subprocess, sys, time
name, repeat = sys.argv[1], int(sys.argv[2])
rest = sys.argv[4:]
split = rest.index("--")
with_cmd, without_cmd = rest[:split], rest[split + 1:]
times = {"with": [], "without": []}
for r in range(repeat):
    order = [("with", with_cmd), ("without", without_cmd)]
    if r % 2:
        order.reverse()
    for side, cmd in order:
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times[side].append(time.perf_counter() - start)
w, wo = statistics.median(times["with"]), statistics.median(times["without"])
print(f"  {name}: with a control {w:.3f} s, without {wo:.3f} s (median of {repeat})")
print(f"figure {name} {w / wo:.2f} x")
PY
}

echo "== simulate: a coupled run with its twin, against the same run without a control"
ratio control_overhead_quickstart "$repeat" -- \
    "$kvio" run quickstart --set mode=simulate -q -o "$work/q-twin" --force -- \
    "$kvio" run quickstart --set mode=simulate --set update.control=off -q \
    -o "$work/q-off" --force
ratio control_overhead_update_interference "$repeat" -- \
    "$kvio" run update-interference -q -o "$work/ui-twin" --force -- \
    "$kvio" run update-interference --set update.control=off -q -o "$work/ui-off" --force
echo "== compare: three cache modes sharing one twin, against no control"
compare_repeat=$(( (repeat + 1) / 2 ))
ratio control_overhead_compare "$compare_repeat" -- \
    "$kvio" compare update-interference --vary update.on_activate.cache=flush,version,keep \
    -o "$work/cmp-twin" --force -- \
    "$kvio" compare update-interference --vary update.on_activate.cache=flush,version,keep \
    --set update.control=off -o "$work/cmp-off" --force
python3 - "$work/cmp-twin/compare.json" <<'PY'
import json, sys
controls = json.load(open(sys.argv[1]))["controls"]
print(f"  compare: {controls['served']} twin served, {controls['shared']} shared")
PY

if [ "$emulate" = 1 ]; then
    short=(--set duration=4s --set ranks.runtime=local --set train.steps=20
           --set train.step_time.mean=100ms --set train.step_time.stddev=10ms
           --set train.checkpoint.every_n_steps=5 --set train.bytes=16MiB
           --set train.transport.chunk=4MiB)
    echo "== emulate: an A/A paired run (3 pairs, nothing published on either side)"
    "$kvio" run quickstart "${short[@]}" --set update.control=paired \
        --set train.checkpoint.policy=never --repeat 3 -o "$work/aa" --force
    python3 - "$work/aa/summary.json" <<'PY'
import json, sys
cost = json.load(open(sys.argv[1]))["metrics"]["update_cost"]
figures = [k for k, v in cost.items() if isinstance(v, dict) and "ci95" in v]
inside = [k for k in figures
          if cost[k]["mean"] is not None and abs(cost[k]["mean"]) <= cost[k]["ci95"]]
for k in figures:
    print(f"  {k}: {cost[k]['mean']:+.4f} ± {cost[k]['ci95']:.4f}")
print(f"figure aa_intervals_containing_zero {len(inside)}/{len(figures)} intervals")
PY
    echo "== emulate: the quickstart over Redis, decode gaps during updates and outside"
    port=6391
    redis-server --port $port --bind 127.0.0.1 --save "" --appendonly no \
        --daemonize no >/dev/null 2>&1 &
    redis_pid=$!
    for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
    "$kvio" run quickstart --set train.transport.kind=redis \
        --set train.transport.redis.url=redis://127.0.0.1:$port -q -o "$work/redis" --force
    python3 - "$work/redis/summary.json" <<'PY'
import json, sys
during = json.load(open(sys.argv[1]))["metrics"]["update_interference"]["during_updates"]
gaps = during["decode_gap_ms"]
d, o = gaps["during"], gaps["outside"]
print(f"  decode gap p99: {d['p99']:.2f} ms during updates ({d['gaps']:.0f} gaps), "
      f"{o['p99']:.2f} ms outside ({o['gaps']:.0f})")
print(f"figure redis_decode_gap_p99_during_over_outside {d['p99'] / o['p99']:.2f} x")
print(f"figure redis_decode_gap_p99_during_ms {d['p99']:.2f} ms")
PY
fi

#!/usr/bin/env bash
# Local tiers against the shared KV store on the Mooncake trace (#57), as
# the Mooncake paper's global-against-local cache (it reports up to 2.36x
# the hit rate on its traces), in one `kvio compare`: the fleet-routers
# preset (simulate, Llama-3-8B on H200) with REPLICAS serve ranks (default
# 4), round robin, the whole trace (DURATION, default 1100s), each rank's
# pool BLOCKS blocks (default 12000: the trace's longest prompt needs 5179)
# and under it a tier of SIZE per rank, write-through: `host` (each rank's
# own) or `shared` (one store of REPLICAS x SIZE that every rank reads and
# writes, placement by block hash), at each size in SIZES (default 8GiB,
# 32GiB, 128GiB). Prints per configuration the hit rate with the tiers
# (pool and tier hits over prompt tokens), TTFT p99 and rank 0's tier hits,
# and whether the run was valid (the first warning of those that were not:
# hit rates are the caches', TTFT is only comparable on valid runs), then
# `figure shared_over_local_hit_rate_<size>` for each size and
# `figure shared_over_local_hit_rate` (the largest).
# Env: KVIO_TRACE, KVIO_BENCH_BUILD, REPLICAS, DURATION, BLOCKS, SIZES.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trace=${KVIO_TRACE:-/work/shared/traces/mooncake_synthetic_trace.jsonl}
build=${KVIO_BENCH_BUILD:-$root/build}
replicas=${REPLICAS:-4}
duration=${DURATION:-1100s}
blocks=${BLOCKS:-12000}
sizes=${SIZES:-8GiB,32GiB,128GiB}
cmake --build "$build" -j2 --target kvio >/dev/null

work=$(mktemp -d /tmp/kvio-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

# One compare: tier kind x size (both in the variants' names).
"$build/kvio" compare fleet-routers --set "stream.trace.path=$trace" \
    --set stream.trace.format=mooncake --set "ranks.serve=$replicas" \
    --set "duration=$duration" --set stream.requests=1000000 \
    --set "serve.kvcache.blocks=$blocks" --set serve.router.policy=round_robin \
    --set 'serve.kvcache.tiers=[{kind: host, size: 1GiB, write: through}]' \
    --vary serve.kvcache.tiers.0.kind=host,shared --vary "serve.kvcache.tiers.0.size=$sizes" \
    --metrics hit_rate_with_tiers,tiers.0.hits,tiers.0.shared.peer_shard_hits \
    -o "$work/compare" >"$work/compare.log" 2>&1 || { cat "$work/compare.log" >&2; exit 1; }
python3 - "$work/compare/compare.json" <<'PY'
import json, sys
variants = json.load(open(sys.argv[1]))["variants"]
rows = {}
for v in variants:
    settings = v["settings"]
    kind = settings["serve.kvcache.tiers.0.kind"]
    size = settings["serve.kvcache.tiers.0.size"]
    rows[(size, kind)] = dict(v["runs"][0]["figures"], valid=v["runs"][0]["valid"],
                              warning=(v["runs"][0]["warnings"] or [{}])[0])
sizes = sorted({s for s, _ in rows}, key=lambda s: float(s[:-3]) * 1024 ** "KMGT".index(s[-3]))
print("%-8s %-7s %10s %12s %15s %6s" % ("size", "tier", "hit_rate", "ttft_p99_ms",
                                         "rank0_tier_hits", "valid"))
best = 0
for size in sizes:
    for kind in ("host", "shared"):
        f = rows[(size, kind)]
        print("%-8s %-7s %10.4f %12.1f %15.0f %6s" % (size, kind, f["hit_rate_with_tiers"],
                                                    f["ttft_ms p99"], f["tiers.0.hits"],
                                                    "yes" if f["valid"] else "no"))
warnings = {json.dumps(f["warning"]) for f in rows.values() if not f["valid"]}
for w in sorted(warnings):
    print("not valid:", json.loads(w).get("message", w))
ratios = []
for size in sizes:
    ratio = rows[(size, "shared")]["hit_rate_with_tiers"] / rows[(size, "host")]["hit_rate_with_tiers"]
    ratios.append(ratio)
    print("figure shared_over_local_hit_rate_%s %.3f x" % (size, ratio))
print("figure shared_over_local_hit_rate %.3f x" % max(ratios))
PY

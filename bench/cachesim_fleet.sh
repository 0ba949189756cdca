#!/usr/bin/env bash
# Local against global prefix caching on a fleet (#57): `kvio cachesim
# --replicas 4` on the shared Mooncake trace, round robin, LRU, at several
# capacities per replica: each replica's own cache (local) against one store
# of 4x the capacity shared by all (global, as Mooncake Store). Checks both
# columns against an independent replay in the same run (local: the trace
# split round robin, each part through lru_replay.py's semantics; global:
# lru_replay.py's replay at 4x the capacity), checks global >= local at
# every capacity; then the same fleet behind prefix_affinity (the local
# caches with a cache-aware router). Ends with the largest global/local
# token hit ratio under each router (the Mooncake paper reports up to 2.36x
# on its traces) and the ratio with unlimited caches (what only the sharing
# gives); the round-robin one last.
# Env: KVIO_TRACE, KVIO_REFERENCE, KVIO_BENCH_BUILD, KVIO_BENCH_REPLICAS.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
trace=${KVIO_TRACE:-/work/shared/traces/mooncake_synthetic_trace.jsonl}
reference=${KVIO_REFERENCE:-/work/shared/reference/lru_replay.py}
build=${KVIO_BENCH_BUILD:-$root/build}
replicas=${KVIO_BENCH_REPLICAS:-4}
capacities=100,250,500,1000,2500,5000,10000,unlimited

cmake --build "$build" -j2 --target kvio >/dev/null

work=$(mktemp -d /tmp/kvio-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

"$build/kvio" cachesim "$trace" --format mooncake --replicas "$replicas" \
    --capacity "$capacities" --eviction lru
"$build/kvio" cachesim "$trace" --format mooncake --replicas "$replicas" \
    --capacity "$capacities" --eviction lru --csv >"$work/kvio.csv"

# The reference: its replay() for one cache; the fleet's local caches are
# the trace split round robin, counts summed over the replicas.
python3 - "$reference" "$trace" "$replicas" "$capacities" "$work/kvio.csv" <<'EOF'
import csv, importlib.util, json, sys

reference, trace, replicas, capacities, kvio_csv = sys.argv[1:]
replicas = int(replicas)
argv, sys.argv = sys.argv, [reference]  # the module replays sys.argv[1:] on import
spec = importlib.util.spec_from_file_location("lru_replay", reference)
lru = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lru)
sys.argv = argv

reqs = [json.loads(line) for line in open(trace)]
reqs.sort(key=lambda r: r["timestamp"])

def counts(part, cap):
    """(hit blocks, blocks, hit tokens, tokens) of one cache: lru.replay's rates
    times the part's totals (its rates are sums over the part)."""
    blocks = sum(len(r["hash_ids"]) for r in part)
    tokens = sum(r["input_length"] for r in part)
    b, t = lru.replay(part, cap)
    return b * blocks, blocks, t * tokens, tokens

rows = {(r["capacity"], r["scope"]): r for r in csv.DictReader(open(kvio_csv))}
worst = None
for text in capacities.split(","):
    cap = None if text == "unlimited" else int(text)
    local = [0.0] * 4
    for k in range(replicas):
        for i, v in enumerate(counts(reqs[k::replicas], cap)):
            local[i] += v
    glob = counts(reqs, None if cap is None else cap * replicas)
    for scope, c in (("local", local), ("global", glob)):
        row = rows[(text, scope)]
        for name, want in (("block_hit_rate", c[0] / c[1]), ("token_hit_rate", c[2] / c[3])):
            if abs(float(row[name]) - want) > 5e-6:
                sys.exit(f"capacity {text} {scope} {name}: kvio {row[name]}, reference {want:.6f}")
    l, g = float(rows[(text, "local")]["token_hit_rate"]), float(rows[(text, "global")]["token_hit_rate"])
    if g < l:
        sys.exit(f"capacity {text}: global {g:.4f} below local {l:.4f}")
print(f"local and global hit rates agree with the reference at every capacity; "
      f"global >= local at each")
EOF

# With a cache-aware router in front of the local caches (kvio's
# prefix_affinity: no reference replays it; its global column is the same
# store as above).
"$build/kvio" cachesim "$trace" --format mooncake --replicas "$replicas" \
    --router prefix_affinity --capacity "$capacities" --eviction lru
"$build/kvio" cachesim "$trace" --format mooncake --replicas "$replicas" \
    --router prefix_affinity --capacity "$capacities" --eviction lru --csv >"$work/affinity.csv"

# The largest gain of the shared store over the replicas' own caches, and
# the gain with unlimited caches, under each router.
gains() { # CSV suffix
    awk -F, -v suffix="$2" 'NR > 1 { rate[$2 "," $3] = $6; caps[$2] = 1 }
        END { best = 0
              for (c in caps) if (rate[c ",local"] > 0 && rate[c ",global"] / rate[c ",local"] > best) {
                  best = rate[c ",global"] / rate[c ",local"]; at = c }
              printf "largest gain%s at %s blocks per replica\n", suffix, at
              printf "figure cachesim_global_over_local%s %.2f x\n", suffix, best
              printf "figure cachesim_global_over_local%s_unlimited %.2f x\n", suffix,
                  rate["unlimited,global"] / rate["unlimited,local"] }' "$1"
}
gains "$work/affinity.csv" _affinity
gains "$work/kvio.csv" ""

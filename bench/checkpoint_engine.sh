#!/usr/bin/env bash
# checkpoint-engine's published weight-sync times against kvio's model of
# them (simulate mode, deterministic, a few seconds). Each
# workloads/repro/checkpoint-engine-*.yaml names in its header the model and
# GPUs, the published broadcast and P2P times, and the --set options of its
# P2P run; this script runs both and prints them beside the published ones,
# then `figure checkpoint_engine_<topology>_over_published_<model> R x`
# lines and their geometric means.
# Usage: bench/checkpoint_engine.sh [BUILD_DIR]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kvio=$build/kvio
[ -x "$kvio" ] || { echo "build kvio first ($kvio not found)" >&2; exit 1; }
work=$(mktemp -d /tmp/kvio-ce-XXXXXX)
trap 'rm -rf "$work"' EXIT

for file in workloads/repro/checkpoint-engine-*.yaml; do
    name=$(basename "$file" .yaml)
    # The P2P options: every "--set K=V" in the header's P2P lines.
    p2p=$(sed -n '/^# P2P/,/^[^#]/p' "$file" | grep -o -- '--set [^ ]*' | tr '\n' ' ')
    "$kvio" -q run "$file" -o "$work/$name-broadcast" --force >/dev/null
    # shellcheck disable=SC2086 # the options split into words on purpose
    "$kvio" -q run "$file" $p2p -o "$work/$name-p2p" --force >/dev/null
done

python3 - "$work" workloads/repro <<'EOF'
import glob, json, math, os, re, sys

work, repro = sys.argv[1], sys.argv[2]
rows = []
for path in sorted(glob.glob(os.path.join(repro, "checkpoint-engine-*.yaml"))):
    name = os.path.basename(path)[:-5]
    header = open(path).read().split("\n")
    what = header[0].split("weight sync: ", 1)[1].rstrip(".")
    published = re.search(r"([\d.]+) s to update every GPU; P2P ([\d.]+) s", header[1])
    pub = {"broadcast": float(published.group(1)), "p2p": float(published.group(2))}
    got = {}
    for topology in ("broadcast", "p2p"):
        summary = json.load(open(os.path.join(work, f"{name}-{topology}", "summary.json")))
        got[topology] = summary["metrics"]["model_updates"]["update_latency_ms"]["p50"] / 1000
    rows.append((name[len("checkpoint-engine-"):], what, pub, got))

print("checkpoint-engine: time to update every GPU, seconds (simulate, kvio's link model)")
ratios = {"broadcast": [], "p2p": []}
for topology in ("broadcast", "p2p"):
    print(f"\n  {topology}")
    print(f"  {'model, GPUs':<44} {'published':>9} {'kvio':>6} {'kvio/published':>14}")
    print(f"  {'-' * 44} {'-' * 9} {'-' * 6} {'-' * 14}")
    for short, what, pub, got in rows:
        ratio = got[topology] / pub[topology]
        ratios[topology].append((short, ratio))
        print(f"  {what:<44} {pub[topology]:>9.2f} {got[topology]:>6.2f} {ratio:>14.2f}")
print()
for topology, values in ratios.items():
    for short, ratio in values:
        key = re.sub(r"[^a-z0-9]+", "_", short.lower())
        print(f"figure checkpoint_engine_{topology}_over_published_{key} {ratio:.2f} x")
    mean = math.exp(sum(math.log(r) for _, r in values) / len(values))
    print(f"figure checkpoint_engine_{topology}_over_published {mean:.2f} x")
EOF

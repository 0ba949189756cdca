#!/usr/bin/env bash
# README command one: installs what is missing, builds kvio (Release) and
# runs the quickstart preset, then says where the results are.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
build=${KVIO_BUILD_DIR:-build-release}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" >/dev/null
out="results/demo-$(date -u +%Y%m%dT%H%M%S)-$$"
# --allow-invalid: the demo shows its results whatever the verdict; the last
# line says when they are not valid on this machine (e.g. more ranks than cores).
"$build/kvio" run workloads/presets/quickstart.yaml -o "$out" --allow-invalid "$@"
echo
echo "results: $out/summary.json"

#!/usr/bin/env bash
# README command two: installs what is missing, builds kvio with every
# optional part required (so a broken dependency fails the build instead of
# stubbing a part out), starts a private redis-server, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

scripts/bootstrap.sh

build=${KVIO_BUILD_DIR:-$root/build}
cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda=ON
    export PATH="$PATH:/usr/local/cuda/bin"
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVIO_WITH_UCX=ON -DKVIO_WITH_MPI=ON -DKVIO_WITH_REDIS=ON -DKVIO_WITH_CUDA=$cuda \
    -DKVIO_BUILD_TESTS=ON >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)"

# A private redis-server, stopped on exit whatever happens.
. scripts/private_redis.sh
# Every part this script builds must run its tests (a skip would hide it);
# gpu too when a device answers.
KVIO_TEST_REQUIRE=redis,mpi,ucx,mount
if [ "$cuda" = ON ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    KVIO_TEST_REQUIRE=$KVIO_TEST_REQUIRE,gpu
fi
export KVIO_TEST_REQUIRE

cd "$build"
ctest --output-on-failure --timeout 300 -j 2

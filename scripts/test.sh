#!/usr/bin/env bash
# README command two: installs what is missing, builds kvio with every
# optional part required (so a broken dependency fails the build instead of
# stubbing a part out), starts a private redis-server, and runs every test.
#
#   scripts/test.sh              the whole suite once
#   scripts/test.sh --stress N   the whole suite N times, each with two busy
#                                loops pinned beside it (one per core of a
#                                two-core machine), as on a shared machine;
#                                prints how many runs passed
#   scripts/test.sh --fast       only the suites labelled fast (ctest -L fast:
#                                the unit tests, about a minute); the default
#                                runs every suite, fast and slow (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

stress=0
labels=()
while [ $# -gt 0 ]; do
    case "$1" in
    --stress) stress=${2:?--stress needs a count}; shift 2 ;;
    --stress=*) stress=${1#--stress=}; shift ;;
    --fast) labels=(-L fast); shift ;;
    *) echo "usage: scripts/test.sh [--fast] [--stress N]" >&2; exit 2 ;;
    esac
done
case "$stress" in ''|*[!0-9]*) echo "scripts/test.sh: --stress takes a count" >&2; exit 2 ;; esac

scripts/bootstrap.sh
# The module order holds (an include that points up fails here, named).
scripts/check_layers.sh

build=${KVIO_BUILD_DIR:-$root/build}
cuda=OFF
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda=ON
    export PATH="$PATH:/usr/local/cuda/bin"
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVIO_WITH_UCX=ON -DKVIO_WITH_MPI=ON -DKVIO_WITH_REDIS=ON -DKVIO_WITH_CUDA=$cuda \
    -DKVIO_WITH_HTTP=ON -DKVIO_WITH_ZMQ=ON \
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

run_suite() {
    (cd "$build" && ctest --output-on-failure --timeout 600 -j 2 ${labels[@]+"${labels[@]}"})
}

if [ "$stress" -eq 0 ]; then
    run_suite
    exit
fi

# Two busy loops, each pinned to a core (the first two), for the length of
# one suite run; only the loops this script started are stopped.
busy_pids=()
busy_start() {
    local cores core
    cores=$(nproc)
    for core in 0 1; do
        if command -v taskset >/dev/null 2>&1; then
            taskset -c $((core % cores)) sh -c 'while :; do :; done' &
        else
            sh -c 'while :; do :; done' &
        fi
        busy_pids+=($!)
    done
}
busy_stop() {
    for pid in "${busy_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    busy_pids=()
}
trap 'busy_stop; private_redis_stop' EXIT INT TERM

passed=0
for run in $(seq 1 "$stress"); do
    busy_start
    start=$(date +%s)
    if run_suite; then
        passed=$((passed + 1))
        verdict=passed
    else
        verdict=FAILED
    fi
    busy_stop
    echo "stress: run $run of $stress $verdict in $(( $(date +%s) - start )) s (two busy loops beside it)"
done
echo "stress: $passed of $stress runs passed"
[ "$passed" -eq "$stress" ]

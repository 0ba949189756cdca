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

# A private redis-server on a free loopback port, stopped on exit whatever
# happens. Tests share it, each under its own key prefix.
redis_dir=$(mktemp -d /tmp/kvio-redis-XXXXXX)
redis_pid=""
cleanup() {
    if [ -n "$redis_pid" ]; then
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$redis_dir"
}
trap cleanup EXIT INT TERM
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 16379)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$redis_dir" --daemonize no >"$redis_dir/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 50); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
redis-cli -p "$port" ping >/dev/null || { echo "redis-server did not start" >&2; cat "$redis_dir/redis.log" >&2; exit 1; }
export KVIO_TEST_REDIS_URL="redis://127.0.0.1:$port"
export KVIO_TEST_REQUIRE=redis,mpi

cd "$build"
ctest --output-on-failure --timeout 300 -j 2

# Sourced by scripts/test.sh and bench/sanitize.sh: starts a private
# redis-server on a free loopback port, stopped (and its directory removed)
# when the script exits whatever happens, and exports KVIO_TEST_REDIS_URL.
# Tests share it, each under its own key prefix. Fails if it does not start.
redis_dir=$(mktemp -d /tmp/kvio-redis-XXXXXX)
redis_pid=""
private_redis_stop() {
    if [ -n "$redis_pid" ]; then
        kill "$redis_pid" 2>/dev/null || true
        wait "$redis_pid" 2>/dev/null || true
    fi
    rm -rf "$redis_dir"
}
trap private_redis_stop EXIT INT TERM
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

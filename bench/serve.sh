#!/usr/bin/env bash
# kvio serve under real clients, each event timed as the client got it
# against what the engine did (kvio serve --record-tokens' tokens.csv):
#  - the npm openai package (OpenAI's own client library; installed into
#    bench/.cache/node when missing) streams completions and chat
#    completions one after another: serve_openai_ttft_error_p99_ms and
#    serve_openai_itl_error_p99_ms;
#  - bench/serve_load, a fixed-rate load generator on plain sockets (its
#    own time is a few microseconds): KVIO_BENCH_RATE requests per second
#    (default 8) of 256 prompt and 64 output tokens: serve_ttft_error_p99_ms
#    (the client's TTFT minus the engine's) and serve_itl_error_p99_ms (each
#    gap between two token events minus the gap between the engine's steps);
#  - serve_max_streams: the most concurrent streams (16, 32, 64, ... up to
#    KVIO_BENCH_MAX_STREAMS, default 512) whose ITL error p99 stays within
#    1 ms on this machine.
# Prints `figure NAME VALUE UNIT` lines. Usage: bench/serve.sh [BUILD_DIR].
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${1:-build}
kvio=$build/kvio
rate=${KVIO_BENCH_RATE:-8}
max_streams=${KVIO_BENCH_MAX_STREAMS:-512}
[ -x "$kvio" ] || { echo "build kvio first ($kvio not found)" >&2; exit 1; }
cmake --build "$build" --target serve_load >/dev/null
load=$build/serve_load
work=$(mktemp -d /tmp/kvio-bench-serve-XXXXXX)
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# start_server NAME: kvio serve (1 GiB of KV: 8K tokens of Llama-3-8B), its
# port in $port once it answers /health.
start_server() {
    local name=$1
    "$kvio" serve --listen 127.0.0.1:0 -o "$work/$name" --record-tokens \
        --set serve.kvcache.capacity=1GiB >"$work/$name.out" 2>"$work/$name.err" &
    server_pid=$!
    port=""
    for _ in $(seq 1 300); do
        port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/$name.err" | head -1)
        if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
            return
        fi
        sleep 0.1
    done
    cat "$work/$name.err" >&2
    exit 1
}

stop_server() {
    kill -TERM "$server_pid"
    wait "$server_pid"
    server_pid=""
}

# field JSON PATH: one number of serve_analyze.py's output.
field() {
    python3 -c 'import json,sys; v=json.loads(sys.argv[1])
for k in sys.argv[2].split("."): v=v[k]
print(f"{v:.3f}" if isinstance(v, float) else v)' "$1" "$2"
}

# --- the npm openai client ---
node_dir=$root/bench/.cache/node
if [ ! -d "$node_dir/node_modules/openai" ]; then
    mkdir -p "$node_dir"
    npm install --silent --prefix "$node_dir" openai@4 >/dev/null
fi
start_server openai
cp bench/serve_openai.mjs "$node_dir/serve_openai.mjs"
node "$node_dir/serve_openai.mjs" "$port" 20 "$work/openai.log"
stop_server
openai=$(python3 bench/serve_analyze.py "$work/openai.log" "$work/openai")
echo "openai client: $openai"

# --- the fixed-rate load generator ---
start_server rate
"$load" --port "$port" --rate "$rate" --requests 100 --prompt-tokens 256 --max-tokens 64 \
    --log "$work/rate.log"
stop_server
fixed=$(python3 bench/serve_analyze.py "$work/rate.log" "$work/rate")
echo "fixed rate $rate/s: $fixed"

# --- the most streams held within 1 ms ---
held=0
streams=16
while [ "$streams" -le "$max_streams" ]; do
    start_server "streams-$streams"
    "$load" --port "$port" --concurrency "$streams" --requests "$streams" --prompt-tokens 64 \
        --max-tokens 64 --log "$work/streams-$streams.log"
    stop_server
    result=$(python3 bench/serve_analyze.py "$work/streams-$streams.log" "$work/streams-$streams")
    p99=$(field "$result" itl_error_ms.p99)
    echo "$streams streams: ITL error p99 $p99 ms ($result)"
    if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1.0 else 1)" "$p99"; then
        held=$streams
    else
        break
    fi
    streams=$((streams * 2))
done

echo "figure serve_openai_ttft_error_p99_ms $(field "$openai" ttft_error_ms.p99) ms"
echo "figure serve_openai_itl_error_p99_ms $(field "$openai" itl_error_ms.p99) ms"
echo "figure serve_ttft_error_p99_ms $(field "$fixed" ttft_error_ms.p99) ms"
echo "figure serve_itl_error_p99_ms $(field "$fixed" itl_error_ms.p99) ms"
echo "figure serve_max_streams $held streams"

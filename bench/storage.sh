#!/usr/bin/env bash
# kvio's KV tiers against the tools storage engineers measure with, in the
# same run (#36):
#  - the file tier's slab (O_DIRECT, io_uring at queue depth 8, batches of
#    64 blocks) against fio's io_uring at depth 8 on the same directory,
#    same block size and direct flag; the slab one block at a time (sync)
#    and the one-file-per-block layout against fio's psync at depth 1;
#  - the host tier against memcpy (bench/memcpy_bw.c), same block size;
#  - the Redis tier against redis-benchmark SET/GET at the block size,
#    one connection, on a redis-server of its own: one block at a time
#    against no pipelining, batches of 8 against 8 pipelined.
# Blocks are BLOCK bytes (default 2 MiB: 16 tokens of Llama-3-8B), COUNT of
# them (default 256) per phase, median of TRIALS (default 3) runs each.
# fio is installed with apt-get when missing. Prints a table, then
# `figure tier_file_over_fio_write|read` (slab QD8 against io_uring QD8),
# `figure tier_file_over_fio_qd1_write|read` (slab QD1 against psync),
# `figure tier_files_layout_over_fio_qd1_write|read`,
# `figure tier_host_over_memcpy`, `figure tier_redis_over_redis_benchmark`
# and `figure tier_redis_pipelined_over_redis_benchmark_p8` (the slower of
# SET and GET).
# Then `figure storage_cv` (the coefficient of variation of the storage
# throughput of CV_TRIALS runs, default 5, of the mlperf/storage-only
# preset, CV_DURATION each (default 60s) and 16 users, its slab in this
# directory) and `figure storage_cv_over_fio` (against fio's over as many
# time-based QD8 write runs of the same duration, same directory).
# Then two storage targets of different speed made here: one loop device
# (direct I/O onto a sparse image in this directory, ext4) whose reads and
# writes a blkio cgroup throttles to FAST_BPS (default 1.2e9) and to
# SLOW_BPS (default 3e8); `figure tier_ratio_over_fio_ratio` is kvio's
# storage throughput (the mlperf/stress preset, one turn a user, so that
# every request writes its KV: 20 s, 16 users) on the fast target over the
# slow, divided by fio's QD8 write bandwidth on the fast over the slow.
# Needs root, losetup and cgroup v1 blkio or v2 io; said and skipped where
# the machine cannot make them. The unthrottled device is measured too,
# for what it shows about kvio's own ceiling on this machine (`figure
# tier_ratio_over_fio_ratio_unthrottled`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
dir=${KVIO_STORAGE_DIR:-$root/bench/.cache/storage}
block=${BLOCK:-2097152}
count=${COUNT:-256}
trials=${TRIALS:-3}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target tier_rate memcpy_bw kvio >/dev/null
if ! command -v fio >/dev/null; then
    echo "installing fio (apt-get)" >&2
    apt-get install -y -qq fio >/dev/null
fi
mkdir -p "$dir"
work=$(mktemp -d /tmp/kvio-bench-storage-XXXXXX)
redis_pid=""
loop_dev="" loop_mount="" cgroups=()
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null || true
    wait 2>/dev/null || true
    [ -n "$loop_mount" ] && umount "$loop_mount" 2>/dev/null || true
    [ -n "$loop_dev" ] && losetup -d "$loop_dev" 2>/dev/null || true
    for cg in "${cgroups[@]}"; do rmdir "$cg" 2>/dev/null || true; done
    rm -rf "$work" "$dir/kvio" "$dir/fio.dat" "$dir/targets.img"
}
trap cleanup EXIT INT TERM

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# field NAME TEXT: the number after NAME in tier_rate's last line
field() { tail -1 <<<"$2" | awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
bytes=$((block * count))

# tier KIND_YAML [BATCH]: trials of tier_rate, medians into tier_write, tier_read
tier() {
    local writes=() reads=() out
    for _ in $(seq 1 "$trials"); do
        out=$("$build/tier_rate" "$1" "$block" "$count" "${2:-1}")
        tier_info=$(head -1 <<<"$out")
        writes+=("$(field write_gbps "$out")")
        reads+=("$(field read_gbps "$out")")
    done
    tier_write=$(printf '%s\n' "${writes[@]}" | median)
    tier_read=$(printf '%s\n' "${reads[@]}" | median)
}

# fio_rate RW ENGINE DEPTH: median GB/s of trials on the same directory
fio_rate() {
    for _ in $(seq 1 "$trials"); do
        fio --name=kvio --directory="$dir" --filename=fio.dat --rw="$1" --bs="$block" \
            --size="$bytes" --direct=1 --ioengine="$2" --iodepth="$3" --output-format=json |
            python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['$1']['bw_bytes'] / 1e9)"
    done | median
}

printf '%-34s %10s %10s\n' "$(printf 'blocks of %d bytes, %d a phase' "$block" "$count")" "write GB/s" "read GB/s"
# The slab at queue depth 8, batches of 64 blocks (the engine hands a
# request's blocks over together), against fio's io_uring at depth 8; the
# slab one block at a time (sync) against fio's psync.
tier "{kind: file, size: $((bytes + block)), file: {path: $dir/kvio, io_engine: io_uring, queue_depth: 8}}" 64
file_write=$tier_write file_read=$tier_read file_info=$tier_info
printf '%-34s %10.3f %10.3f\n' "kvio file tier (slab, QD8)" "$file_write" "$file_read"
tier "{kind: file, size: $((bytes + block)), file: {path: $dir/kvio, io_engine: sync}}" 1
file_write1=$tier_write file_read1=$tier_read
printf '%-34s %10.3f %10.3f\n' "kvio file tier (slab, QD1)" "$file_write1" "$file_read1"
tier "{kind: file, size: $((bytes + block)), file: {path: $dir/kvio, layout: files}}" 1
files_write=$tier_write files_read=$tier_read
printf '%-34s %10.3f %10.3f\n' "kvio file tier (file per block)" "$files_write" "$files_read"
fio_write1=$(fio_rate write psync 1); fio_read1=$(fio_rate read psync 1)
printf '%-34s %10.3f %10.3f\n' "fio psync QD1, direct" "$fio_write1" "$fio_read1"
fio_write8=$(fio_rate write io_uring 8); fio_read8=$(fio_rate read io_uring 8)
printf '%-34s %10.3f %10.3f\n' "fio io_uring QD8, direct" "$fio_write8" "$fio_read8"

tier "{kind: host, size: $((bytes + block))}"
host_write=$tier_write host_read=$tier_read host_info=$tier_info
printf '%-34s %10.3f %10.3f\n' "kvio host tier" "$host_write" "$host_read"
memcpy=$(for _ in $(seq 1 "$trials"); do "$build/memcpy_bw" "$block" "$count" 3 | awk '{print $1}'; done | median)
printf '%-34s %10.3f %10.3f\n' "memcpy (same blocks)" "$memcpy" "$memcpy"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
tier "{kind: redis, size: $((bytes + block)), redis: {url: \"redis://127.0.0.1:$port\"}}" 1
redis_write=$tier_write redis_read=$tier_read
printf '%-34s %10.3f %10.3f\n' "kvio redis tier, one at a time" "$redis_write" "$redis_read"
tier "{kind: redis, size: $((bytes + block)), redis: {url: \"redis://127.0.0.1:$port\"}}" 8
redis_write8=$tier_write redis_read8=$tier_read
printf '%-34s %10.3f %10.3f\n' "kvio redis tier, batches of 8" "$redis_write8" "$redis_read8"
# bench_rate TEST [PIPELINE]: redis-benchmark's requests/s at the block
# size, as GB/s
bench_rate() {
    for _ in $(seq 1 "$trials"); do
        redis-benchmark -p "$port" -t "$1" -d "$block" -n "$count" -c 1 -P "${2:-1}" -r "$count" --csv -q |
            awk -F'"' -v b="$block" 'NR > 0 && $2 != "test" {print $4 * b / 1e9; exit}'
    done | median
}
set_rate=$(bench_rate set)
# Every key of the keyspace set before GETs are timed (a missing key's nil
# would flatter them).
redis-benchmark -p "$port" -t set -d "$block" -n $((count * 8)) -c 1 -P 1 -r "$count" -q >/dev/null
get_rate=$(bench_rate get)
printf '%-34s %10.3f %10.3f\n' "redis-benchmark SET/GET, P1 c1" "$set_rate" "$get_rate"
set_rate8=$(bench_rate set 8); get_rate8=$(bench_rate get 8)
printf '%-34s %10.3f %10.3f\n' "redis-benchmark SET/GET, P8 c1" "$set_rate8" "$get_rate8"

# preset PRESET OUT TIER_DIR DURATION [KEY=VALUE...]: the preset as a
# workload file, DURATION long with 16 users, its file tier's slab (8 GiB)
# in TIER_DIR, no assessment, with the stream keys given (a dotted path
# under stream).
preset() {
    "$build/kvio" validate "$1" --dump | python3 -c '
import json, sys
workload = json.load(sys.stdin)
out, tier_dir, duration = sys.argv[1], sys.argv[2], sys.argv[3]
workload.update(duration=duration)
workload.pop("assess", None)
workload["stream"]["users"] = 16
tier = workload["serve"]["kvcache"]["tiers"][-1]
tier.update(size="8GiB")
tier["file"]["path"] = tier_dir + "/kvio"
for pair in sys.argv[4:]:
    key, value = pair.split("=", 1)
    *parents, last = key.split(".")
    node = workload["stream"]
    for part in parents:
        node = node[part]
    node[last] = json.loads(value)
json.dump(workload, open(out, "w"), indent=1)
' "$2" "$3" "$4" "${@:5}"
}
# moved RUN_DIR: the run's storage throughput (tokens/s moved to and from
# the tiers)
moved() { python3 -c "import json; print(json.load(open('$1/summary.json'))['storage']['storage_throughput_tokens_per_s'])"; }

# storage_cv: the spread of a whole storage run, trial to trial (MLPerf
# Storage's kv-cache.py measured a coefficient of variation of 50-125 % a
# run): CV_TRIALS emulate runs of the mlperf/storage-only preset, the same
# seed, their storage throughput in tokens/s; against fio's own spread over
# as many io_uring QD8 write runs of the same length here.
cv_trials=${CV_TRIALS:-5}
cv_duration=${CV_DURATION:-60s}
preset mlperf/storage-only "$work/storage.json" "$dir" "$cv_duration"
cv_of() { awk '{v[NR] = $1; s += $1} END {m = s / NR; for (i = 1; i <= NR; i++) q += (v[i] - m) ^ 2; printf "%.4f", (NR > 1 && m > 0 ? sqrt(q / (NR - 1)) / m : 0)}'; }
kvio_rates=$(for t in $(seq 1 "$cv_trials"); do
    "$build/kvio" run "$work/storage.json" -o "$work/cv-$t" --force >/dev/null 2>&1
    moved "$work/cv-$t"
done)
storage_cv=$(cv_of <<<"$kvio_rates")
fio_cv=$(for _ in $(seq 1 "$cv_trials"); do
    fio --name=kvio --directory="$dir" --filename=fio.dat --rw=write --bs="$block" \
        --size="$bytes" --direct=1 --ioengine=io_uring --iodepth=8 --time_based \
        --runtime="$cv_duration" --output-format=json |
        python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['write']['bw_bytes'] / 1e9)"
done | cv_of)
printf '%-34s %10s %10s\n' "storage run, $cv_trials x $cv_duration" "CV kvio" "CV fio"
printf '%-34s %10.4f %10.4f\n' "tokens/s moved; fio QD8 writes" "$storage_cv" "$fio_cv"

# Two targets of different speed: one loop device, throttled by a cgroup
# to each rate in turn (and not at all), kvio and fio inside it.
targets_why=""
if [ "$(id -u)" != 0 ]; then targets_why="not root"
elif ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; then targets_why="no losetup or mkfs.ext4"
elif [ ! -d /sys/fs/cgroup/blkio ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then targets_why="no blkio (v1) or io (v2) cgroup"
fi
# throttled BPS COMMAND...: runs COMMAND in a cgroup whose reads and writes
# of the loop device are held to BPS bytes/s (0: no cgroup)
throttled() {
    local bps=$1; shift
    if [ "$bps" = 0 ]; then "$@"; return; fi
    local cg majmin
    majmin=$(printf '%d:%d' "0x$(stat -c %t "$loop_dev")" "0x$(stat -c %T "$loop_dev")")
    if [ -d /sys/fs/cgroup/blkio ]; then
        cg=/sys/fs/cgroup/blkio/kvio-bench-$bps
        mkdir -p "$cg"
        echo "$majmin $bps" >"$cg/blkio.throttle.read_bps_device"
        echo "$majmin $bps" >"$cg/blkio.throttle.write_bps_device"
    else
        cg=/sys/fs/cgroup/kvio-bench-$bps
        mkdir -p "$cg"
        echo "$majmin rbps=$bps wbps=$bps" >"$cg/io.max"
    fi
    cgroups+=("$cg")
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@"
}
fast_bps=${FAST_BPS:-1200000000} slow_bps=${SLOW_BPS:-300000000}
if [ -z "$targets_why" ]; then
    truncate -s 16G "$dir/targets.img"
    loop_dev=$(losetup -f --show --direct-io=on "$dir/targets.img" 2>/dev/null) || targets_why="losetup refused a loop device"
fi
if [ -z "$targets_why" ]; then
    loop_mount="$work/targets"
    mkdir -p "$loop_mount"
    mkfs.ext4 -q -F "$loop_dev" && mount "$loop_dev" "$loop_mount" || targets_why="cannot make or mount ext4 on $loop_dev"
fi
if [ -z "$targets_why" ]; then
    preset mlperf/stress "$work/targets.json" "$loop_mount" 20s prefix.sessions.turns=1
    printf '%-34s %10s %10s\n' "loop device $loop_dev, throttled" "kvio tok/s" "fio GB/s"
    declare -A target_kvio target_fio
    for bps in "$fast_bps" "$slow_bps" 0; do
        throttled "$bps" "$build/kvio" run "$work/targets.json" -o "$work/target-$bps" --force >/dev/null 2>&1
        target_kvio[$bps]=$(moved "$work/target-$bps")
        rm -rf "$loop_mount/kvio"
        target_fio[$bps]=$(throttled "$bps" fio --name=kvio --directory="$loop_mount" --filename=fio.dat \
            --rw=write --bs="$block" --size=1G --direct=1 --ioengine=io_uring --iodepth=8 \
            --output-format=json | python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['write']['bw_bytes'] / 1e9)")
        rm -f "$loop_mount/fio.dat"
        printf '%-34s %10.0f %10.3f\n' "$([ "$bps" = 0 ] && echo unthrottled || echo "$bps bytes/s")" \
            "${target_kvio[$bps]}" "${target_fio[$bps]}"
    done
    kvio_ratio=$(ratio "${target_kvio[$fast_bps]}" "${target_kvio[$slow_bps]}")
    fio_ratio=$(ratio "${target_fio[$fast_bps]}" "${target_fio[$slow_bps]}")
    kvio_ratio0=$(ratio "${target_kvio[0]}" "${target_kvio[$slow_bps]}")
    fio_ratio0=$(ratio "${target_fio[0]}" "${target_fio[$slow_bps]}")
    echo "fast over slow: kvio ${kvio_ratio}x, fio ${fio_ratio}x; unthrottled over slow: kvio ${kvio_ratio0}x, fio ${fio_ratio0}x"
else
    echo "two storage targets: skipped ($targets_why)"
fi

echo "file tier: $file_info; host tier: $host_info"
echo "$(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg); directory $dir ($(df -T "$dir" | awk 'NR == 2 {print $2}'))"
echo "figure tier_file_over_fio_write $(ratio "$file_write" "$fio_write8") x"
echo "figure tier_file_over_fio_read $(ratio "$file_read" "$fio_read8") x"
echo "figure tier_file_over_fio_qd1_write $(ratio "$file_write1" "$fio_write1") x"
echo "figure tier_file_over_fio_qd1_read $(ratio "$file_read1" "$fio_read1") x"
echo "figure tier_files_layout_over_fio_qd1_write $(ratio "$files_write" "$fio_write1") x"
echo "figure tier_files_layout_over_fio_qd1_read $(ratio "$files_read" "$fio_read1") x"
host_slower=$(awk -v a="$host_write" -v b="$host_read" 'BEGIN {print (a < b ? a : b)}')
echo "figure tier_host_over_memcpy $(ratio "$host_slower" "$memcpy") x"
set_ratio=$(ratio "$redis_write" "$set_rate"); get_ratio=$(ratio "$redis_read" "$get_rate")
echo "figure tier_redis_over_redis_benchmark $(awk -v a="$set_ratio" -v b="$get_ratio" 'BEGIN {printf "%.2f", (a < b ? a : b)}') x"
set_ratio8=$(ratio "$redis_write8" "$set_rate8"); get_ratio8=$(ratio "$redis_read8" "$get_rate8")
echo "figure storage_cv $storage_cv"
echo "figure storage_cv_over_fio $(ratio "$storage_cv" "$fio_cv") x"
echo "figure tier_redis_pipelined_over_redis_benchmark_p8 $(awk -v a="$set_ratio8" -v b="$get_ratio8" 'BEGIN {printf "%.2f", (a < b ? a : b)}') x"
if [ -z "$targets_why" ]; then
    echo "figure tier_ratio_over_fio_ratio $(ratio "$kvio_ratio" "$fio_ratio") x"
    echo "figure tier_ratio_over_fio_ratio_unthrottled $(ratio "$kvio_ratio0" "$fio_ratio0") x"
fi

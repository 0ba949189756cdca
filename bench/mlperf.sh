#!/usr/bin/env bash
# kvio mlperf (MLPerf Storage v3.0's KV-cache benchmark, docs/mlperf.md)
# against two storage targets of different speed, and fio on the same
# targets in the same run (#54):
#  - the targets: one loop device (direct I/O onto a sparse image in this
#    directory, ext4) whose reads and writes a blkio cgroup throttles to
#    FAST_BPS (default 8e8) and SLOW_BPS (default 2e8) bytes/s
#    (bench/targets.sh); where the machine cannot make it (not root, no
#    cgroup), tmpfs (/dev/shm) and this directory's disk instead;
#  - kvio: option 1's I/O (open-loop users, .npy objects written and
#    fsync'ed, read back after a page-cache drop, once and once per 32
#    tokens) with USERS users (default 8) of MODEL (default tiny-1b, 24 KiB
#    a token, so that objects of 12-600 MB fit the target), DURATION seconds
#    (default 30) a trial, TRIALS trials (default 3), in 1 MiB reads and
#    writes. Its read rate is kvio_window_read_gibps: the objects' bytes
#    read from the files within the trials' wall time, summed over clients,
#    mean of trials. v3.0's aggregated_read_bandwidth_gbps also counts what
#    the requests in progress at the stop read while kv-cache.py joins its
#    threads (up to 2 s each): more of it on a slower target, so its ratio
#    between targets is printed as a figure of its own;
#  - fio: buffered sequential reads at the same block size (1 MiB) and
#    queue depth (USERS synchronous jobs, each its own file, the page cache
#    dropped first: --invalidate=1), TRIALS runs of DURATION on each target.
# Prints a table, then `figure mlperf_target_ratio_over_fio_ratio` (kvio's
# read GiB/s on the fast target over the slow, divided by fio's; target
# 0.9-1.1), `figure mlperf_cv` (the larger of the two targets' coefficients
# of variation of kvio's read GiB/s over its trials; target <= 0.05, or <=
# 1.2x fio's), `figure fio_cv` (fio's, the same way),
# `figure mlperf_cv_over_fio_cv`, and v3.0's own figure's ratio and CV
# (`figure mlperf_v3_read_ratio_over_fio_ratio`, `figure mlperf_v3_cv`).
# fio is installed with apt-get when missing. Usage: bench/mlperf.sh
# (KVIO_BENCH_BUILD: the build directory, default build-bench, Release;
# KVIO_MLPERF_DIR: where the image goes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
dir=${KVIO_MLPERF_DIR:-$root/bench/.cache/mlperf}
fast_bps=${FAST_BPS:-800000000} slow_bps=${SLOW_BPS:-200000000}
users=${USERS:-8} model=${MODEL:-tiny-1b} duration=${DURATION:-30} trials=${TRIALS:-3}
capacity_gb=${CAPACITY_GB:-6}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target kvio >/dev/null
if ! command -v fio >/dev/null; then
    echo "installing fio (apt-get)" >&2
    apt-get install -y -qq fio >/dev/null
fi
mkdir -p "$dir"
work=$(mktemp -d /tmp/kvio-bench-mlperf-XXXXXX)
. "$root/bench/targets.sh"
shm_dir=""
cleanup() {
    targets_clean
    rm -rf "$work" "$dir/targets.img" "$dir/disk" ${shm_dir:+"$shm_dir"}
}
trap cleanup EXIT INT TERM

# The two targets: FAST and SLOW (a directory each) and how to run on them.
targets_make "$dir/targets.img" "$work/targets" 16G
if [ -z "$targets_why" ]; then
    fast_dir=$loop_mount/fast slow_dir=$loop_mount/slow
    fast_rate=$fast_bps slow_rate=$slow_bps
    fast_name="loop device at $fast_bps B/s" slow_name="loop device at $slow_bps B/s"
else
    echo "throttled loop device: not made ($targets_why); tmpfs and the disk instead" >&2
    shm_dir=$(mktemp -d /dev/shm/kvio-bench-mlperf-XXXXXX)
    fast_dir=$shm_dir slow_dir=$dir/disk
    fast_rate=0 slow_rate=0
    fast_name="tmpfs" slow_name="disk ($dir)"
fi
mkdir -p "$fast_dir" "$slow_dir"

cv_of() { awk '{v[NR] = $1; s += $1} END {m = s / NR; for (i = 1; i <= NR; i++) q += (v[i] - m) ^ 2; printf "%.4f", (NR > 1 && m > 0 ? sqrt(q / (NR - 1)) / m : 0)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", (b > 0 ? a / b : 0)}'; }
mean() { awk '{s += $1} END {printf "%.4f", (NR > 0 ? s / NR : 0)}'; }

# kvio_on NAME DIR RATE: TRIALS trials of option 1 there; its mlperf.json in work/NAME
kvio_on() {
    throttled "$3" "$build/kvio" mlperf 1 --dir "$2/kv" -o "$work/$1" --model "$model" \
        --users "$users" --duration "$duration" --trials "$trials" --start-delay 0 \
        --end-delay 0 --storage-capacity-gb "$capacity_gb" --io-size 1MiB >/dev/null
}
# field NAME KEY: a figure of option 1 in work/NAME/mlperf.json
field() { python3 -c "import json,sys; o=json.load(open('$work/$1/mlperf.json'))['options'][0]; print(eval(sys.argv[1]))" "$2"; }

# fio_on DIR RATE: TRIALS runs of buffered 1 MiB reads, USERS jobs, GiB/s each
fio_on() {
    for _ in $(seq 1 "$trials"); do
        throttled "$2" fio --name=kvio --directory="$1" --rw=read --bs=1M --ioengine=psync \
            --numjobs="$users" --size=256M --invalidate=1 --direct=0 --time_based \
            --runtime="$duration" --group_reporting --output-format=json |
            python3 -c "import json,sys; print(json.load(sys.stdin)['jobs'][0]['read']['bw_bytes'] / 2**30)"
    done
}

printf '%-32s %12s %10s %12s %10s %12s %10s\n' "target ($users users, ${duration}s)" \
    "kvio GiB/s" "kvio CV" "v3.0 GiB/s" "v3.0 CV" "fio GiB/s" "fio CV"
declare -A kvio_read kvio_cv v3_read v3_cv fio_read fio_cv
for target in fast slow; do
    target_dir=${target}_dir target_rate=${target}_rate target_name=${target}_name
    kvio_on "kvio-$target" "${!target_dir}" "${!target_rate}"
    kvio_read[$target]=$(field "kvio-$target" "o['kvio']['kvio_window_read_gibps']")
    kvio_cv[$target]=$(field "kvio-$target" "o['kvio']['kvio_window_read_cv']")
    v3_read[$target]=$(field "kvio-$target" "o['aggregated_read_bandwidth_gbps']")
    v3_cv[$target]=$(field "kvio-$target" "o['kvio']['kvio_read_bandwidth_cv']")
    rates=$(fio_on "${!target_dir}" "${!target_rate}")
    rm -f "${!target_dir}"/kvio.*
    fio_read[$target]=$(mean <<<"$rates")
    fio_cv[$target]=$(cv_of <<<"$rates")
    printf '%-32s %12.3f %10.4f %12.3f %10.4f %12.3f %10.4f\n' "${!target_name}" \
        "${kvio_read[$target]}" "${kvio_cv[$target]}" "${v3_read[$target]}" "${v3_cv[$target]}" \
        "${fio_read[$target]}" "${fio_cv[$target]}"
done
larger() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.4f", (a > b ? a : b)}'; }
kvio_ratio=$(ratio "${kvio_read[fast]}" "${kvio_read[slow]}")
v3_ratio=$(ratio "${v3_read[fast]}" "${v3_read[slow]}")
fio_ratio=$(ratio "${fio_read[fast]}" "${fio_read[slow]}")
cv=$(larger "${kvio_cv[fast]}" "${kvio_cv[slow]}")
cv_fio=$(larger "${fio_cv[fast]}" "${fio_cv[slow]}")
echo "fast over slow: kvio ${kvio_ratio}x (v3.0's figure ${v3_ratio}x), fio ${fio_ratio}x"
echo "figure mlperf_target_ratio_over_fio_ratio $(ratio "$kvio_ratio" "$fio_ratio") x"
echo "figure mlperf_cv $cv"
echo "figure fio_cv $cv_fio"
echo "figure mlperf_cv_over_fio_cv $(ratio "$cv" "$cv_fio") x"
echo "figure mlperf_v3_read_ratio_over_fio_ratio $(ratio "$v3_ratio" "$fio_ratio") x"
echo "figure mlperf_v3_cv $(larger "${v3_cv[fast]}" "${v3_cv[slow]}")"

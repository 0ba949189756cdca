# Two storage targets of different speed for the benches (sourced by
# bench/storage.sh and bench/mlperf.sh): one loop device (direct I/O onto a
# sparse image, ext4) whose reads and writes a blkio cgroup throttles
# (cgroup v1 blkio, or v2 io.max), one rate per command. Needs root,
# losetup and mkfs.ext4; targets_why says why not where the machine cannot.
#
#   targets_make IMAGE MOUNT_DIR SIZE   sets loop_dev, loop_mount (or targets_why)
#   throttled BPS COMMAND...            COMMAND with the device held to BPS bytes/s (0: as is)
#   targets_clean                       unmounts, detaches, removes the cgroups
loop_dev="" loop_mount="" targets_why="" cgroups=()

targets_make() {
    local image=$1 mount=$2 size=$3
    if [ "$(id -u)" != 0 ]; then targets_why="not root"
    elif ! command -v losetup >/dev/null || ! command -v mkfs.ext4 >/dev/null; then targets_why="no losetup or mkfs.ext4"
    elif [ ! -d /sys/fs/cgroup/blkio ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then targets_why="no blkio (v1) or io (v2) cgroup"
    fi
    [ -z "$targets_why" ] || return 0
    truncate -s "$size" "$image"
    loop_dev=$(losetup -f --show --direct-io=on "$image" 2>/dev/null) || { targets_why="losetup refused a loop device"; return 0; }
    mkdir -p "$mount"
    if mkfs.ext4 -q -F "$loop_dev" && mount "$loop_dev" "$mount"; then
        loop_mount=$mount
    else
        targets_why="cannot make or mount ext4 on $loop_dev"
    fi
}

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

targets_clean() {
    [ -n "$loop_mount" ] && umount "$loop_mount" 2>/dev/null || true
    [ -n "$loop_dev" ] && losetup -d "$loop_dev" 2>/dev/null || true
    for cg in "${cgroups[@]}"; do rmdir "$cg" 2>/dev/null || true; done
}

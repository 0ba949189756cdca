#!/usr/bin/env bash
# GPU check of kvio (issue 8), for a machine with a CUDA device. Prints:
#   - the cuda-ipc update time of a 16 GB buffer between two MPI processes
#     (copy start -> receiver notified, verify off) against the device-to-
#     device copy bandwidth measured here (target >= 0.9x);
#   - the staged update bandwidth against the pinned host<->device bandwidth
#     measured here (target >= 0.8x), with the rings' hop as a UCX put (on
#     one node a CPU copy, the bottleneck) and as host_hop: mapped;
#   - the GPU-pool <-> host swap bandwidth (scattered 2 MiB blocks, batched);
#   - a short coupled emulate run with the KV pool on the GPU;
# then a short table and `figure NAME VALUE UNIT` lines. Logs go to $OUT
# (default /tmp/kvio-gpu). Needs no Redis and builds nothing.
#
# It first runs the GPU unit tests (build/test_gpu) on the device when they
# were carried, and notes the GPU's compute mode (exclusive-process mode
# would break the two-process cuda-ipc run).
#
# How to run it on the device machine:
#   1. Here (with the CUDA toolkit): cmake -S . -B build -DKVIO_WITH_CUDA=ON
#      then bench/gpu_pack.sh build gpu-carry, which builds kvio, gpu_bw and
#      test_gpu and copies them with the shared libraries a bare machine may
#      lack into gpu-carry/ (about 15 MB, git-ignored).
#   2. Carry gpu-carry (the device tool's carry: ["gpu-carry"]) and run
#        bench/gpu.sh gpu-carry
#      with timeout_s 520: the steps' own timeouts add up to 470 s (tests
#      90, gpu_bw 60, cuda-ipc 100, staged put 80, staged mapped 80,
#      coupled 60); a normal run takes about 3 to 4 minutes. KVIO_GPU_IPC_BYTES / KVIO_GPU_STAGED_BYTES /
#      KVIO_GPU_BW_BYTES make it shorter.
# A dry run here, without a GPU, against the stand-in CUDA runtime that the
# tests use (it checks the script's flow; its numbers mean nothing):
#   LD_PRELOAD=$PWD/build/libkvio_fake_cudart.so KVIO_GPU_IPC_BYTES=256MiB \
#   KVIO_GPU_STAGED_BYTES=256MiB KVIO_GPU_STAGED_CHUNK=16MiB \
#   KVIO_GPU_BW_BYTES=$((256 << 20)) bench/gpu.sh build
# Every background process is waited for by its PID, never with a bare wait.
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kvio=$build/kvio
gpu_bw=$build/gpu_bw
out=${OUT:-/tmp/kvio-gpu}
ipc_bytes=${KVIO_GPU_IPC_BYTES:-16GB}
staged_bytes=${KVIO_GPU_STAGED_BYTES:-4GiB}
staged_chunk=${KVIO_GPU_STAGED_CHUNK:-64MiB}
bw_bytes=${KVIO_GPU_BW_BYTES:-$((4 << 30))}
mkdir -p "$out"
# Carried libraries go on the search path only where the machine lacks one
# of that name (its own Open MPI, UCX and C runtime win).
if [ -d "$build/libs" ]; then
    mkdir -p "$out/libs"
    rm -f "$out/libs"/*
    for lib in "$build/libs"/*; do
        name=$(basename "$lib")
        ldconfig -p 2>/dev/null | awk '{print $1}' | grep -qxF "$name" ||
            ln -sf "$(realpath "$lib")" "$out/libs/$name"
    done
    echo "carried libraries used: $(ls "$out/libs" | tr '\n' ' ')" >&2
    export LD_LIBRARY_PATH="$out/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for tool in "$kvio" "$gpu_bw"; do
    [ -x "$tool" ] || { echo "gpu.sh: $tool not found (build it with CUDA first)" >&2; exit 1; }
done
kvio=$(realpath "$kvio")
# Both ranks may use every core (Open MPI binds each to one by default).
mpirun_cmd=(mpirun --oversubscribe --bind-to none -np 2)
[ "$(id -u)" = 0 ] && mpirun_cmd=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)

# 0. The device, and kvio's GPU unit tests on it.
nvidia-smi --query-gpu=name,driver_version,compute_mode,memory.total --format=csv \
    >"$out/nvidia-smi.txt" 2>&1 || true
cat "$out/nvidia-smi.txt" >&2
tests=skipped
if [ -x "$build/test_gpu" ]; then
    echo "== GPU unit tests (test_gpu)" >&2
    KVIO_TEST_BINARY=$kvio KVIO_TEST_REQUIRE=gpu,mpi timeout 90 "$build/test_gpu" --jobs 1 \
        >"$out/test_gpu.log" 2>&1 &
    tests_pid=$!
    wait "$tests_pid"
    tests_rc=$?
    tests="rc $tests_rc: $(grep -o 'Tested: [0-9]* | Passing: [0-9]* | Failing: [0-9]* | Crashing: [0-9]*' "$out/test_gpu.log" | tail -1)"
    echo "test_gpu $tests" >&2
    [ "$tests_rc" = 0 ] || grep -E 'FAIL|Assertion|error' "$out/test_gpu.log" | head -20 >&2
fi

# 1. Reference bandwidths (and: is there a device at all?).
echo "== reference bandwidths (gpu_bw)" >&2
if ! timeout 60 "$gpu_bw" "$bw_bytes" $((2 << 20)) >"$out/gpu_bw.txt" 2>"$out/gpu_bw.err"; then
    echo "gpu.sh: no usable GPU: $(cat "$out/gpu_bw.err")" >&2
    echo "figure cuda_ipc_16gb_ms NA ms"
    exit 2
fi
cat "$out/gpu_bw.txt" >&2
value() { awk -v k="$1" '$1 == k {print $2}' "$out/gpu_bw.txt"; }
d2d=$(value d2d_GBps)
pcie=$(value pcie_GBps)
swap=$(value swap_GBps)

# Runs a 1-trainer 1-server update workload over mpirun; prints the median
# of (t_notified - t_xfer_start) in ms over the versions from updates.csv.
update_run() { # name kind bytes chunk timeout_s [host_hop]
    local name=$1 kind=$2 bytes=$3 chunk=$4 limit=$5 hop=${6:-put}
    cat >"$out/$name.yaml" <<YAML
name: gpu-$name
seed: 1
mode: emulate
ranks: {train: 1, serve: 1, runtime: mpi, timeout: 60s}
train:
  step_time: {dist: constant, value: 1s}
  steps: 4
  bytes: $bytes
  checkpoint: {policy: every_n_steps, every_n_steps: 1}
  transport: {kind: $kind, chunk: $chunk, inflight: 4, host_hop: $hop}
update: {apply: shadow, verify: false, iteration: 5ms}
YAML
    rm -rf "$out/$name"
    timeout "$limit" "${mpirun_cmd[@]}" "$kvio" run "$out/$name.yaml" -o "$out/$name" \
        >"$out/$name.log" 2>&1 &
    local pid=$!
    wait "$pid"
    local rc=$?
    if [ $rc -ne 0 ] || [ ! -f "$out/$name/updates.csv" ]; then
        echo "gpu.sh: $name run failed (rc $rc), see $out/$name.log" >&2
        tail -5 "$out/$name.log" >&2
        echo NA
        return
    fi
    # Median of t_notified_ms - t_xfer_start_ms over the versions (awk: the
    # device machine may have no python).
    awk -F, 'NR == 1 {for (i = 1; i <= NF; i++) col[$i] = i; next}
             $col["t_notified_ms"] != "" && $col["t_xfer_start_ms"] != "" {
                 print $col["t_notified_ms"] - $col["t_xfer_start_ms"]}' \
        "$out/$name/updates.csv" | sort -g |
        awk '{v[NR] = $1} END {if (NR == 0) print "NA";
             else printf "%.3f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

bytes_of() { # 16GB, 4GiB, 256MiB -> bytes (GB = 1e9, GiB = 2^30)
    echo "$1" | awk '{
        n = $0 + 0; u = $0; sub(/^[0-9.]+[ ]*/, "", u)
        m["B"] = 1; m[""] = 1; m["KB"] = 1e3; m["MB"] = 1e6; m["GB"] = 1e9; m["TB"] = 1e12
        m["KiB"] = 1024; m["MiB"] = 1048576; m["GiB"] = 1073741824
        printf "%.0f\n", n * m[u]}'
}
ratio() { # a / b, NA when either is NA or b is 0
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a == "NA" || b == "NA" || b + 0 == 0) print "NA"; else printf "%.3f\n", a / b}'
}
gbps() { # bytes, ms -> GB/s
    awk -v b="$1" -v ms="$2" 'BEGIN {
        if (ms == "NA" || ms + 0 == 0) print "NA"; else printf "%.2f\n", b / (ms * 1e6)}'
}

# 2. cuda-ipc, two processes, 16 GB.
echo "== cuda-ipc, $ipc_bytes, mpirun -np 2" >&2
ipc_ms=$(update_run cuda_ipc cuda-ipc "$ipc_bytes" 256MiB 100)
ipc_gbps=$(gbps "$(bytes_of "$ipc_bytes")" "$ipc_ms")
ipc_vs_d2d=$(ratio "$ipc_gbps" "$d2d")

# 3. staged, two processes.
echo "== staged, $staged_bytes in $staged_chunk chunks, mpirun -np 2" >&2
staged_ms=$(update_run staged staged "$staged_bytes" "$staged_chunk" 80)
staged_gbps=$(gbps "$(bytes_of "$staged_bytes")" "$staged_ms")
staged_vs_pcie=$(ratio "$staged_gbps" "$pcie")

# 3b. staged with host_hop: mapped (same node: the GPU copies into the
# receiver's ring mapped by UCX; no CPU copy between the rings).
echo "== staged, host_hop: mapped, $staged_bytes in $staged_chunk chunks" >&2
mapped_ms=$(update_run staged_mapped staged "$staged_bytes" "$staged_chunk" 80 mapped)
mapped_gbps=$(gbps "$(bytes_of "$staged_bytes")" "$mapped_ms")
mapped_vs_pcie=$(ratio "$mapped_gbps" "$pcie")

# 4. A short coupled emulate run (local ranks) with the KV pool on the GPU.
echo "== coupled emulate, KV pool on the GPU" >&2
rm -rf "$out/coupled"
timeout 60 "$kvio" run quickstart -o "$out/coupled" --set duration=10s \
    --set ranks.runtime=local --set device.memory=cuda --set device.fallback=error \
    --set serve.engine.preemption=swap >"$out/coupled.log" 2>&1 &
coupled_pid=$!
wait "$coupled_pid"
coupled_rc=$?
# From kvio's own summary table on stdout (no JSON tools needed).
coupled_field() { # label, field number (or last) -> value or NA
    awk -v label="$1" -v field="$2" 'index($0, label) {v = field == "last" ? $NF : $field}
        END {print v == "" ? "NA" : v}' "$out/coupled.log"
}
coupled="$(coupled_field "requests completed" last) $(coupled_field "ttft_ms" 5) \
$(coupled_field "updates activated" 3) $(coupled_field "update latency ms" 7)"
read -r coupled_done coupled_ttft coupled_updates coupled_latency <<<"$coupled"

# 5. The table, then the figures.
{
    printf '%-34s %s\n' "GPU unit tests" "$tests"
    printf '%-34s %14s %14s %8s\n' "measure" "kvio" "reference" "ratio"
    printf '%-34s %11s ms %11s GB/s %8s\n' "cuda-ipc $ipc_bytes (copy->notified)" "$ipc_ms" "$d2d" "$ipc_vs_d2d"
    printf '%-34s %9s GB/s %11s GB/s %8s\n' "staged $staged_bytes (put)" "$staged_gbps" "$pcie" "$staged_vs_pcie"
    printf '%-34s %9s GB/s %11s GB/s %8s\n' "staged $staged_bytes (mapped)" "$mapped_gbps" "$pcie" "$mapped_vs_pcie"
    printf '%-34s %9s GB/s\n' "GPU pool <-> host swap" "$swap"
    printf '%-34s rc %s, %s requests, TTFT p99 %s ms, %s updates (p50 %s ms)\n' \
        "coupled emulate, KV pool on GPU" "$coupled_rc" "$coupled_done" "$coupled_ttft" \
        "$coupled_updates" "$coupled_latency"
} | tee "$out/table.txt"
echo "figure cuda_ipc_16gb_ms $ipc_ms ms"
echo "figure cuda_ipc_vs_d2d $ipc_vs_d2d x"
echo "figure staged_vs_pcie $staged_vs_pcie x"
echo "figure staged_mapped_vs_pcie $mapped_vs_pcie x"
echo "figure gpu_swap_GBps $swap GB/s"

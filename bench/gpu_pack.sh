#!/usr/bin/env bash
# Packs what bench/gpu.sh needs on a device machine into one small folder
# (default gpu-carry/, git-ignored) to name in the device tool's carry:
# kvio, gpu_bw and test_gpu built here with CUDA, and libs/ with the shared
# libraries they link that a bare machine may lack (libyaml, jansson,
# hiredis, criterion and its dependencies, UCX, libcudart). Open MPI and the
# C and C++ runtimes are left out: the device machine's own are used, and
# gpu.sh puts a carried library on the search path only when the machine
# has none of that name. Usage: bench/gpu_pack.sh [BUILD [DEST]]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
dest=${2:-gpu-carry}
make -C "$build" -j2 kvio gpu_bw test_gpu >/dev/null
rm -rf "$dest"
mkdir -p "$dest/libs"
cp "$build/kvio" "$build/gpu_bw" "$build/test_gpu" "$dest/"
# Every shared library the three link, but the machine's own runtimes.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libstdc\+\+|libgcc_s|libmpi|libopen-rte|libopen-pal|libhwloc|libevent|libudev|libz\.)'
for binary in "$dest/kvio" "$dest/gpu_bw" "$dest/test_gpu"; do
    ldd "$binary" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
    [[ $name =~ $skip ]] && continue
    cp -L "$path" "$dest/libs/$name"
done
du -sh "$dest" | awk '{print "gpu_pack.sh: " $2 " is " $1}'
ls "$dest/libs" | tr '\n' ' '
echo

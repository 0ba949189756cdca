#!/usr/bin/env bash
# Installs the Debian packages kvio needs to build, run and test, skipping
# those already present; safe to run again. --dev adds fuzzing, sanitizer and
# report tools (clang, its runtime, gnuplot, chromium) and fio for the
# storage bench.
set -euo pipefail

packages=(build-essential cmake pkg-config libyaml-dev libjansson-dev
          libxxhash-dev xxhash libhiredis-dev redis-server libucx-dev ucx-utils
          libopenmpi-dev openmpi-bin libcriterion-dev libmicrohttpd-dev libzmq3-dev
          libmsgpack-dev libcurl4-openssl-dev libpcre2-dev libutf8proc-dev
          liburing-dev zlib1g-dev libdeflate-dev libisal-dev)
if [ "${1:-}" = "--dev" ]; then
    packages+=(clang libclang-rt-14-dev gnuplot chromium fio)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
echo "bootstrap: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done" >&2

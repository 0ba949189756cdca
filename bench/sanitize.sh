#!/usr/bin/env bash
# The whole test suite under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer: its own build dir (build-sanitize/), every
# optional part that is installed, a private redis-server as scripts/test.sh
# starts it, and ctest. Any ASan error, UBSan report or leak fails its
# test; bench/lsan.supp holds the leak suppressions for third-party
# libraries, each with its reason. Prints `figure sanitize_failed_tests N`.
# Env: KVIO_SANITIZE_BUILD, CTEST_ARGS (e.g. "-R stream").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_SANITIZE_BUILD:-$root/build-sanitize}

mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DKVIO_ASAN=ON -DKVIO_UBSAN=ON \
    -DKVIO_WITH_CUDA=AUTO -DKVIO_BUILD_TESTS=ON >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j 2 >"$build/build.log" 2>&1 || { tail -40 "$build/build.log"; exit 1; }

if command -v redis-server >/dev/null; then
    # shellcheck source=../scripts/private_redis.sh
    . "$root/scripts/private_redis.sh"
else
    echo "sanitize.sh: no redis-server; the Redis tests skip" >&2
fi

# halt_on_error: the first report fails the process (and so the test).
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Keep Open MPI's components loaded until exit, so leak reports name them
# (and the suppressions match) instead of an unknown module.
export OMPI_MCA_mca_base_component_disable_dlclose=1
export LSAN_OPTIONS=suppressions=$root/bench/lsan.supp:print_suppressions=0

cd "$build"
status=0
# shellcheck disable=SC2086
ctest --output-on-failure --timeout 900 -j 2 ${CTEST_ARGS:-} >"$build/ctest.log" 2>&1 || status=$?
tail -25 "$build/ctest.log"
# Sanitizer reports, whichever test they came from.
reports=$(grep -cE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$build/ctest.log" || true)
failed=$(grep -oE '[0-9]+ tests failed' "$build/ctest.log" | grep -oE '^[0-9]+' || echo 0)
echo "sanitizer reports in the log: $reports (full log: $build/ctest.log)"
echo "figure sanitize_failed_tests $failed"
exit $status

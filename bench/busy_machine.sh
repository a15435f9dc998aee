#!/bin/bash
# Search on a busy machine (doc/benchmarks.md, "A busy machine"): one index, its queries
# and no search flags (the calibrated set), one thread, search_bench of each build given,
# under the conditions a shared machine puts a search in:
#   quiet       nothing else running, warm page cache
#   cold        the residual file dropped from the page cache before every query
#   membw       a neighbour streaming memory (memcpy of 256 MiB buffers) on the other core
#   cpu x2      two busy loops (more runnable threads than cores)
#   cgroup N    the search in a memory cgroup of N MiB (page cache dropped first), so that
#               the kernel must evict the index's pages to make room
# and prints one Markdown row per round, build and condition: p50, p95, CPU p50, major
# page faults per query, stage times, time in residual reads.
#
# usage: bench/busy_machine.sh WORKDIR INDEX QUERIES.npy QIDS.txt BUILDDIR [BUILDDIR...]
# Environment: ROUNDS (default 2), LIMITS (cgroup sizes in MiB, default "256 160"),
# SCORE (sum or mean, default sum), K (default 10).
# The cgroup rows need root and a cgroup v1 memory controller or cgroup v2 (skipped
# otherwise); dropping the page cache needs root (the cold rows use search_bench --cold,
# which does not).
set -eu -o pipefail
W=$(cd "$1" && pwd); IDX=$2; QRY=$3; QIDS=$4; shift 4
ROUNDS=${ROUNDS:-2}; LIMITS=${LIMITS:-"256 160"}; SCORE=${SCORE:-sum}; K=${K:-10}
export OPENBLAS_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd); top=$(cd "$here/.." && pwd)
PY=/usr/bin/python3

# One search_bench per build (as bench/search_bench.sh builds it).
n=0; SBS=()
for B in "$@"; do
    B=$(cd "$B" && pwd); n=$((n + 1)); sb="$W/busy_search_bench.$n"
    # shellcheck disable=SC2046 # the libraries are words
    gcc -O2 -std=c11 -D_GNU_SOURCE -include "$B/config.h" -I"$top/include" -I"$top/src" \
        "$top/bench/search_bench.c" "$B/.libs/libtartan-internal.a" \
        $(sed -n "s/^dependency_libs='\(.*\)'/\1/p" "$B/libtartan.la") -lpthread -o "$sb"
    SBS+=("$sb")
done
cat > "$W/busy_membw.c" <<'EOF'
#include <stdlib.h>
#include <string.h>
int main(void) {
    size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b)
        return 1;
    memset(a, 1, n);
    memset(b, 2, n);
    for (;;) {
        memcpy(b, a, n);
        memcpy(a, b, n);
    }
}
EOF
gcc -O2 "$W/busy_membw.c" -o "$W/busy_membw"

# The memory cgroup: v1 (memory.limit_in_bytes) or v2 (memory.max).
CG=
if [ "$(id -u)" = 0 ]; then
    if [ -d /sys/fs/cgroup/memory ]; then
        CG=/sys/fs/cgroup/memory/tartan_busy.$$ LIMF=memory.limit_in_bytes
    elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
        CG=/sys/fs/cgroup/tartan_busy.$$ LIMF=memory.max
    fi
    if [ -n "$CG" ] && ! mkdir "$CG" 2>/dev/null; then CG=; fi
fi
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
}
trap cleanup EXIT

row() { # ROUND BUILD CONDITION RUNNER SEARCH_BENCH [MORE SEARCH_BENCH ARGS...]
    local r=$1 b=$2 what=$3 runner=$4 sb=$5; shift 5
    local out rc=0
    out=$($runner "$sb" --index "$IDX" --queries "$QRY" --query-ids "$QIDS" --k "$K" \
        --score "$SCORE" --run "$W/busy.run" "$@" 2>"$W/busy.err" | tail -n 1) || rc=$?
    if [ "$rc" = 0 ] && [ -n "$out" ]; then
        echo "$out" | $PY -c "
import json, sys
j = json.loads(sys.stdin.read())
s = j['stage_ms']
print('| %s | %s | %s | %.2f | %.2f | %.2f | %.1f | %.2f / %.2f / %.2f / %.2f | %.2f |' % (
    '$r', '$b', '$what', j['p50_ms'], j['p95_ms'], j['cpu_p50_ms'],
    j['major_faults_per_query'], s[0], s[1], s[2], s[3], j['fetch_ms']))"
    else
        echo "| $r | $b | $what | failed (exit status $rc$( [ "$rc" = 137 ] && echo ": killed, e.g. by the OOM killer")): $(tail -c 200 "$W/busy.err" | tr '\n' ' ') |"
    fi
}
in_cgroup() { # runs "$@" inside the cgroup
    sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@"
}

echo "| round | build | condition | p50 ms | p95 ms | CPU p50 ms | major faults / query | stages 1 / 2 / 3 / 4 ms | reads ms |"
echo "|---:|---|---|---:|---:|---:|---:|---|---:|"
for r in $(seq "$ROUNDS"); do
    i=0
    for sb in "${SBS[@]}"; do
        i=$((i + 1))
        row "$r" "$i" quiet env "$sb"
        row "$r" "$i" cold env "$sb" --cold
        "$W/busy_membw" & pids="$!"; sleep 1
        row "$r" "$i" membw env "$sb"
        kill "$pids"; wait 2>/dev/null || true
        yes > /dev/null & p1=$!; yes > /dev/null & p2=$!; pids="$p1 $p2"; sleep 1
        row "$r" "$i" "cpu x2" env "$sb"
        # shellcheck disable=SC2086 # two pids
        kill $pids; wait 2>/dev/null || true; pids=
        for lim in $LIMITS; do
            if [ -z "$CG" ]; then
                echo "| $r | $i | cgroup ${lim} MiB | skipped (needs root and a memory cgroup) |"
                continue
            fi
            sync; echo 3 > /proc/sys/vm/drop_caches
            echo $((lim << 20)) > "$CG/$LIMF"
            row "$r" "$i" "cgroup ${lim} MiB" in_cgroup "$sb"
        done
    done
done

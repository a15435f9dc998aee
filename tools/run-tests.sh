#!/bin/sh
# The whole test suite: installs what is needed, builds with warnings as errors, runs
# `make check`, then again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage (Debian 12, as root): tools/run-tests.sh      (CI: .ci/run calls this)
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-debian.sh" || exit 1
cd "$top" && autoreconf -fi >/dev/null 2>&1 || { echo "autoreconf failed" >&2; exit 1; }
jobs=$(nproc)
status=0
summary=""
run_suite() { # name, configure flags...
    name=$1; shift
    dir="$top/build-test-$name"
    rm -rf "$dir" && mkdir -p "$dir"
    echo "=== $name: configure $*"
    if ! (cd "$dir" && "$top/configure" -q --enable-werror "$@" >configure.out 2>&1); then
        cat "$dir/configure.out"; status=1; return
    fi
    echo "=== $name: make"
    if ! make -C "$dir" -j"$jobs" >"$dir/make.out" 2>&1; then
        grep -E 'error|warning' "$dir/make.out" | head -50; status=1; return
    fi
    echo "=== $name: make check"
    make -C "$dir" -j"$jobs" check >"$dir/check.out" 2>&1 || status=1
    grep -E '^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):' "$dir/check.out"
    for log in "$dir"/tests/*.log; do
        [ -f "$log" ] || continue
        case "$log" in */test-suite.log) continue ;; esac
        line=$(grep -E '^[0-9]+%: Checks: ' "$log" | tail -n 1)
        [ -n "$line" ] && echo "$(basename "$log" .log): $line"
        if grep -qE '^(FAIL|ERROR)' "${log%.log}.trs" 2>/dev/null; then
            echo "--- $log"; tail -n 40 "$log"
        fi
    done
    p=$(grep -E '^# PASS:' "$dir/check.out" | awk '{print $3}')
    f=$(grep -E '^# (FAIL|ERROR|XPASS):' "$dir/check.out" | awk '{s+=$3} END {print s+0}')
    summary="$summary $name: ${p:-0} passed, ${f:-0} failed;"
    [ "${f:-0}" = 0 ] || status=1
    [ -n "$p" ] || status=1
}
run_suite plain
run_suite sanitizers --enable-sanitizers
echo "=== summary:$summary"
# CI reads the closing line: every Check test program counts once per configuration.
tp=0; tf=0
for d in "$top"/build-test-*; do
    p=$(grep -E '^# PASS:' "$d/check.out" 2>/dev/null | awk '{print $3}')
    f=$(grep -E '^# (FAIL|ERROR|XPASS):' "$d/check.out" 2>/dev/null | awk '{s+=$3} END {print s+0}')
    tp=$((tp + ${p:-0})); tf=$((tf + ${f:-0}))
done
echo "$tp passed, $tf failed"
exit $status

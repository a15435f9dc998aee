#!/bin/sh
# Runs every fuzz target for a bounded time (`make fuzz-run FUZZ_SECONDS=60`, and CI):
#   tests/fuzz/run.sh SRCDIR FUZZDIR [SECONDS [TARGET...]]
# FUZZDIR holds the targets built by tests/fuzz/build.sh. Each target starts from its
# seeds (tests/files, tests/fuzz/corpus/TARGET, tests/fuzz/regress/TARGET) plus what
# earlier runs found (FUZZDIR/corpus/TARGET, kept between runs). A crash, leak,
# sanitizer report or hang (> 30 s on one input) is written to
# FUZZDIR/crashes/TARGET-*; the script then prints it and exits 1. To keep it as a
# regression test: copy the file into tests/fuzz/regress/TARGET/ (make check replays it).
# FUZZ_JOBS targets run at once (default 2); every target gets one core. fvecs and ids
# (tiny parsers whose coverage saturates in seconds) run for half of SECONDS.
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 SRCDIR FUZZDIR [SECONDS [TARGET...]]" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
fz=$(cd "$2" && pwd)
secs=${3:-60}
[ -n "$secs" ] || secs=60

if [ "${FUZZ_ONE:-}" = 1 ]; then # one target (re-invoked through xargs below)
    t=$4
    f="$src/tests/files"
    c="$src/tests/fuzz"
    case $t in
        npy) seeds="$f/good $f/bad $f/unsupported" ;;
        fvecs | ids) seeds="$f/good $f/bad" ;;
        *) seeds="" ;;
    esac
    for d in "$c/corpus/$t" "$c/regress/$t"; do
        [ -d "$d" ] && seeds="$seeds $d"
    done
    # The two smallest parsers saturate their coverage in seconds: half the time.
    case $t in fvecs | ids) secs=$(( (secs + 1) / 2 )) ;; esac
    mkdir -p "$fz/corpus/$t" "$fz/crashes" "$fz/logs"
    log="$fz/logs/$t.log"
    # OPENBLAS_NUM_THREADS=1: idle BLAS threads would spin on the other fuzzers' cores.
    # shellcheck disable=SC2086
    OPENBLAS_NUM_THREADS=1 "$fz/fuzz_$t" -max_total_time="$secs" -timeout=30 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$fz/crashes/$t-" \
        "$fz/corpus/$t" $seeds >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -n 1)
    if [ $rc -eq 0 ]; then
        n=$(ls "$fz/corpus/$t" | wc -l)
        echo "fuzz $t: ok, ${runs:-?} runs in ${secs} s (${eps:-?}/s), ${cov:-cov: ?}, corpus $n"
    else
        echo "fuzz $t: FAILED (exit $rc) after ${runs:-?} runs; log $log:"
        grep -E -A30 'ERROR|runtime error|SUMMARY|Test unit written' "$log" | head -60
    fi
    exit $rc
fi

shift 3 2>/dev/null || shift $#
if [ $# -gt 0 ]; then
    targets="$*"
else
    targets=""
    for t in "$fz"/fuzz_*; do
        [ -x "$t" ] && targets="$targets ${t##*/fuzz_}"
    done
fi
[ -n "$targets" ] || { echo "fuzz: no targets in $fz (run make fuzz first)" >&2; exit 1; }
jobs=${FUZZ_JOBS:-2}
echo "fuzz: running$(echo " $targets" | sed 's/  */ /g') for $secs s each, $jobs at a time"
# shellcheck disable=SC2086
printf '%s\n' $targets | FUZZ_ONE=1 xargs -P "$jobs" -I{} sh "$0" "$src" "$fz" "$secs" {}
rc=$?
if [ -n "$(ls "$fz/crashes" 2>/dev/null)" ]; then
    echo "fuzz: inputs that failed (copy them into tests/fuzz/regress/TARGET/):"
    ls -l "$fz/crashes"
    rc=1
fi
exit $rc

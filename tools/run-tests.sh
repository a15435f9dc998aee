#!/bin/sh
# The whole test suite: installs what is needed, builds with warnings as errors, runs
# `make check`, then again under AddressSanitizer + UndefinedBehaviorSanitizer; then
# the reliability stages (doc/reliability.md): every libFuzzer target for a bounded
# time, the concurrency test under ThreadSanitizer, and valgrind memcheck on the
# command-line integration path.
# Usage (Debian 12, as root): tools/run-tests.sh      (CI: .ci/run calls this)
# TT_FUZZ_SECONDS (default 6) per fuzz target; TT_SKIP_STAGES="fuzz tsan valgrind"
# leaves stages out (also "python": the Python binding's tests; "python-asan": the same
# under ASan + UBSan).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
TT_EXTRA_PKGS="${TT_EXTRA_PKGS:-} clang libclang-rt-14-dev valgrind" "$top/tools/setup-debian.sh" \
    || exit 1
cd "$top" && autoreconf -fi >/dev/null 2>&1 || { echo "autoreconf failed" >&2; exit 1; }
jobs=$(nproc)
status=0
t0=$(date +%s)
# A stage's header, with the minutes and seconds since the start (the budget is 20
# minutes on 2 cores: CI's log shows where it goes).
stage() { t=$(($(date +%s) - t0)); printf '=== %s [%d:%02d]\n' "$*" $((t / 60)) $((t % 60)); }
summary=""
# Suites that did not get as far as running their tests (configure, make, or the test
# programs' build failed): each counts as one failure in the closing line.
sf=0
run_suite() { # name, configure flags...
    name=$1; shift
    dir="$top/build-test-$name"
    rm -rf "$dir" && mkdir -p "$dir"
    stage "$name: configure $*"
    if ! (cd "$dir" && "$top/configure" -q --enable-werror "$@" >configure.out 2>&1); then
        cat "$dir/configure.out"; status=1; sf=$((sf + 1))
        summary="$summary $name: configure FAILED;"; return
    fi
    # config.status writes stamp-h1 just after config.h, so every make would "remake"
    # config.h (a no-op); inside `make -j check` that wait defers every compiled test
    # until all the script tests have started. Same time stamps: no remake, and the
    # tests start in Makefile.am's order (slowest first).
    touch -r "$dir/stamp-h1" "$dir/config.h"
    stage "$name: make"
    if ! make -C "$dir" -j"$jobs" >"$dir/make.out" 2>&1; then
        grep -E 'error|warning' "$dir/make.out" | head -50; status=1; sf=$((sf + 1))
        summary="$summary $name: make FAILED;"; return
    fi
    stage "$name: make check"
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
    if [ -z "$p" ]; then # no test ran: the test programs did not build
        grep -E 'error|warning' "$dir/check.out" | head -50
        status=1; sf=$((sf + 1))
        summary="$summary $name: the tests did not build (1 failed);"
        return
    fi
    summary="$summary $name: $p passed, ${f:-0} failed;"
    [ "${f:-0}" = 0 ] || status=1
}
run_suite plain
run_suite sanitizers --enable-sanitizers

# ---------------------------------------------------------------- reliability stages
# Each stage adds its checks to the closing count (xp passed, xf failed).
xp=0; xf=0
skip() { case " ${TT_SKIP_STAGES:-} " in *" $1 "*) stage "$1: skipped"; return 0 ;; esac; return 1; }
pass() { xp=$((xp + 1)); }
fail() { xf=$((xf + 1)); status=1; }

# Fuzzing: the libFuzzer targets, built with clang (ASan + UBSan), each run for a
# bounded time from its seed corpus; any crash, leak or hang fails the stage.
run_fuzz() {
    dir="$top/build-test-plain"
    secs=${TT_FUZZ_SECONDS:-6}
    stage "fuzz: build (clang, libFuzzer + ASan + UBSan)"
    if ! make -C "$dir" fuzz >"$dir/fuzz-build.out" 2>&1; then
        tail -n 30 "$dir/fuzz-build.out"; fail; return
    fi
    stage "fuzz: $secs s per target"
    FUZZ_JOBS=$jobs sh "$top/tests/fuzz/run.sh" "$top" "$dir/fuzz" "$secs" >"$dir/fuzz-run.out" 2>&1
    cat "$dir/fuzz-run.out"
    p=$(grep -c '^fuzz [a-z_]*: ok' "$dir/fuzz-run.out")
    f=$(grep -c '^fuzz [a-z_]*: FAILED' "$dir/fuzz-run.out")
    xp=$((xp + p)); xf=$((xf + f))
    if [ "$f" != 0 ] || [ "$p" = 0 ]; then status=1; [ "$p" = 0 ] && xf=$((xf + 1)); fi
    summary="$summary fuzz: $p targets clean, $f failed;"
}

# ThreadSanitizer: only the library and the concurrency test, in their own tree.
run_tsan() {
    dir="$top/build-test-tsan"
    rm -rf "$dir" && mkdir -p "$dir"
    stage "tsan: configure + make tests/test_concurrency"
    if ! (cd "$dir" && "$top/configure" -q --enable-werror CFLAGS="-g -O1 -fsanitize=thread" \
            LDFLAGS="-fsanitize=thread" >configure.out 2>&1 &&
          make -j"$jobs" tests/test_concurrency >make.out 2>&1); then
        tail -n 30 "$dir/configure.out" "$dir/make.out"; fail; return
    fi
    stage "tsan: tests/test_concurrency"
    if (cd "$dir" && CK_FORK=no TSAN_OPTIONS="halt_on_error=1 exitcode=66" \
            ./tests/test_concurrency >tsan.out 2>&1); then
        pass; summary="$summary tsan: clean;"
    else
        tail -n 60 "$dir/tsan.out"; fail; summary="$summary tsan: FAILED;"
    fi
    grep -E '^[0-9]+%: Checks' "$dir/tsan.out"
}

# Valgrind memcheck on the integration path (build, verify, info, search in every
# mode, eval, a failing build) and the npy fuzz replay, in the plain build. Residuals
# come through mmap: io_uring reads land in memory valgrind cannot see being written.
run_valgrind() {
    dir="$top/build-test-plain"
    if [ ! -x "$dir/tartan" ] || [ ! -x "$dir/tests/fuzz/replay_npy" ]; then
        stage "valgrind: the plain build is missing"; fail; return
    fi
    w=$(mktemp -d /tmp/tartan-vg-XXXXXX)
    vg="$dir/libtool --mode=execute valgrind -q --error-exitcode=99 --leak-check=full"
    vg="$vg --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect"
    vg="$vg --log-file=$w/vg.%p.log"
    stage "valgrind: memcheck on the integration path"
    "$dir/tartan-synth" --out "$w/c" --docs 200 --doclen 5-15 --dim 32 --queries 8 --qlen 4 \
        >/dev/null 2>&1
    ok=0; bad=0
    vgrun() { # expected-exit description command...
        want=$1; desc=$2; shift 2
        OPENBLAS_NUM_THREADS=1 $vg "$@" >"$w/out" 2>"$w/err"; rc=$?
        if [ $rc = "$want" ]; then
            ok=$((ok + 1)); pass
        else
            bad=$((bad + 1)); fail
            echo "valgrind: $desc: exit $rc (expected $want)"; cat "$w"/vg.*.log | head -n 60
        fi
        rm -f "$w"/vg.*.log
    }
    T="$dir/tartan"
    vgrun 0 "build" "$T" build --vectors "$w/c.vectors.npy" --doclens "$w/c.doclens.npy" \
        --ids "$w/c.ids.txt" --out "$w/idx" --centroids 32 --threads 2 --keep-originals f16 \
        --no-tune
    vgrun 0 "tune" "$T" tune --index "$w/idx" --pseudo-queries 8 --threads 2 --io mmap
    vgrun 0 "verify" "$T" verify "$w/idx"
    vgrun 0 "info" "$T" info "$w/idx"
    vgrun 0 "info --json" "$T" info --json "$w/idx"
    for m in plaid exhaustive exact; do
        vgrun 0 "search $m" "$T" search --index "$w/idx" --queries "$w/c.queries.npy" \
            --query-ids "$w/c.qids.txt" --out "$w/$m.run" --mode $m --io mmap --threads 2
    done
    vgrun 0 "eval" "$T" eval --qrels "$w/c.qrels.tsv" --run "$w/plaid.run"
    vgrun 1 "failing build" "$T" build --vectors "$w/c.vectors.npy" \
        --doclens "$w/c.vectors.npy" --out "$w/bad"
    cp -r "$w/idx" "$w/bad-idx"
    printf '\377' | dd of="$w/bad-idx/ivf.tt" bs=1 seek=100 conv=notrunc 2>/dev/null
    vgrun 1 "damaged index" "$T" verify "$w/bad-idx"
    vgrun 0 "npy fuzz replay" "$dir/tests/fuzz/replay_npy" "$top/tests/files/good" \
        "$top/tests/files/bad" "$top/tests/files/unsupported"
    rm -rf "$w"
    summary="$summary valgrind: $ok clean, $bad failed;"
}

# Python binding (doc/python.md): `make python` installs the extension into a venv of
# the plain build (Debian's python3-numpy through --system-site-packages; no PyPI) and
# `make python-check` runs python/tests there; each Python test counts once.
run_python() {
    dir="$top/build-test-plain"
    if [ ! -f "$dir/libtartan.la" ]; then
        stage "python: the plain build is missing"; fail; return
    fi
    stage "python: make python python-check"
    make -C "$dir" python-check TT_PYTHON3=/usr/bin/python3 PYTHON_TEST_FLAGS=-v \
        >"$dir/python.out" 2>&1
    rc=$?
    p=$(grep -cE ' \.\.\. ok$' "$dir/python.out")
    f=$(grep -cE ' \.\.\. (FAIL|ERROR)$' "$dir/python.out")
    grep -E ' \.\.\. (FAIL|ERROR|skipped)' "$dir/python.out"
    xp=$((xp + p)); xf=$((xf + f))
    if [ $rc != 0 ] || [ "$f" != 0 ] || [ "$p" = 0 ]; then
        tail -n 60 "$dir/python.out"
        [ "$f" = 0 ] && fail
        status=1
    fi
    summary="$summary python: $p passed, $f failed;"
}

# The Python binding under AddressSanitizer + UBSan: `make python-check` in the sanitizer
# build compiles the extension with the sanitizer flags against that build's libtartan
# and runs python/tests with the ASan runtime preloaded (Makefile.am, python-check).
run_python_asan() {
    dir="$top/build-test-sanitizers"
    if [ ! -f "$dir/libtartan.la" ]; then
        stage "python-asan: the sanitizer build is missing"; fail; return
    fi
    stage "python-asan: make python python-check (ASan + UBSan)"
    make -C "$dir" python-check TT_PYTHON3=/usr/bin/python3 PYTHON_TEST_FLAGS=-v \
        >"$dir/python.out" 2>&1
    rc=$?
    p=$(grep -cE ' \.\.\. ok$' "$dir/python.out")
    f=$(grep -cE ' \.\.\. (FAIL|ERROR)$' "$dir/python.out")
    grep -E ' \.\.\. (FAIL|ERROR)|ERROR: AddressSanitizer|runtime error:' "$dir/python.out"
    xp=$((xp + p)); xf=$((xf + f))
    if [ $rc != 0 ] || [ "$f" != 0 ] || [ "$p" = 0 ]; then
        tail -n 60 "$dir/python.out"
        [ "$f" = 0 ] && fail   # a sanitizer abort ends the run without a FAIL line
        status=1
    fi
    summary="$summary python-asan: $p passed, $f failed;"
}

skip fuzz || run_fuzz
skip tsan || run_tsan
skip valgrind || run_valgrind
skip python || run_python
skip python-asan || run_python_asan

stage "summary:$summary"
# CI reads the closing line: every Check test program counts once per configuration,
# plus each check of the reliability stages.
tp=$xp; tf=$((xf + sf))
for d in "$top"/build-test-*; do
    p=$(grep -E '^# PASS:' "$d/check.out" 2>/dev/null | awk '{print $3}')
    f=$(grep -E '^# (FAIL|ERROR|XPASS):' "$d/check.out" 2>/dev/null | awk '{s+=$3} END {print s+0}')
    tp=$((tp + ${p:-0})); tf=$((tf + ${f:-0}))
done
echo "$tp passed, $tf failed"
exit $status

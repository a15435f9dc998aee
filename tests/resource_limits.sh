#!/bin/sh
# Resource limits (doc/reliability.md): the build keeps to its --memory budget on an
# input several times larger (peak RSS measured); too few file descriptors give a
# clear error naming the file (or still work), never a crash; without io_uring,
# search falls back to mmap/pread with a note and returns the same results.
. "${TT_SRCDIR:-.}/tests/lib.sh"
FI="${TT_BUILDDIR:-.}/tests/.libs/libfaultinject.so"
# The libtool wrapper script of an uninstalled shared build is itself a bash process
# that does not cope with a tiny descriptor limit: run the real binary.
R="$T"
if [ -x "${TT_BUILDDIR:-.}/.libs/tartan" ] && [ "$(head -c 2 "$T")" = "#!" ]; then
    R="${TT_BUILDDIR:-.}/.libs/tartan"
    LD_LIBRARY_PATH="${TT_BUILDDIR:-.}/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
fi
sanitized=""
grep -q '^SAN_CFLAGS = .*fsanitize' "${TT_BUILDDIR:-.}/Makefile" 2>/dev/null && sanitized=1

"$SYNTH" --out "$WORK/c" --docs 2500 --doclen 10-30 --dim 64 --queries 20 --qlen 8 --seed 5 \
    >/dev/null 2>&1
C="$WORK/c"
# --no-tune everywhere: what is checked here is the build, reads and descriptors; the
# calibration (tests/cli_tune.sh) would be most of this test's time (20 s under ASan).
"$R" build --vectors "$C.vectors.npy" --doclens "$C.doclens.npy" --ids "$C.ids.txt" \
    --out "$WORK/idx" --centroids 128 --threads 2 --keep-originals f16 --no-tune >/dev/null 2>&1 \
    || { bad "build"; finish; }
search() { # out-file [options]: a search of the 20 queries
    o=$1; shift
    "$R" search --index "$WORK/idx" --queries "$C.queries.npy" --query-ids "$C.qids.txt" \
        --k 20 --out "$o" "$@"
}
search "$WORK/ref.run" --threads 2 >/dev/null 2>&1 || bad "reference search"
search "$WORK/ref-ex.run" --threads 2 --mode exhaustive >/dev/null 2>&1 || bad "reference search"

# 1. io_uring cannot be set up (a kernel without it, seccomp): the index falls back to
# mmap, each search context to mmap or pread, with a note, and the same results.
if [ -f "$FI" ]; then
    for args in "--io uring" "--io uring --direct" "--io uring --threads 2" \
                "--io uring --mode exhaustive"; do
        # shellcheck disable=SC2086
        env LD_PRELOAD="$FI" ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
            TT_FAIL_URING=1 "$R" search --index "$WORK/idx" --queries "$C.queries.npy" \
            --query-ids "$C.qids.txt" --k 20 --out "$WORK/nouring.run" $args \
            >"$WORK/out" 2>"$WORK/err"; rc=$?
        case $args in *exhaustive*) ref="$WORK/ref-ex.run" ;; *) ref="$WORK/ref.run" ;; esac
        if [ $rc = 0 ] && grep -q "io_uring unavailable" "$WORK/err" && cmp -s "$ref" "$WORK/nouring.run"; then
            ok "no io_uring ($args): $(grep -o 'note: .*' "$WORK/err" | head -n 1); same results"
        else
            bad "no io_uring ($args): exit $rc: $(head -c 400 "$WORK/err")"
        fi
    done
else
    echo "# skip: $FI not built"
fi

# 2. Few file descriptors: each command either works (same results) or fails with
# exit 1 and a message naming the file it could not open; a build leaves nothing.
for n in 4 5 6 8 10 12 13 14 16; do
    (ulimit -n $n; exec "$R" build --vectors "$C.vectors.npy" --doclens "$C.doclens.npy" \
        --out "$WORK/fd$n" --centroids 64 --threads 2 --no-tune) >"$WORK/out" 2>"$WORK/err"; rc=$?
    if [ $rc = 0 ] && "$R" verify "$WORK/fd$n" >/dev/null 2>&1; then
        ok "ulimit -n $n: build works"
    elif [ $rc = 1 ] && grep -q "/[^ ]*: .*Too many open files" "$WORK/err" && [ ! -e "$WORK/fd$n" ] &&
         [ -z "$(ls -d "$WORK/fd$n".tmp-* 2>/dev/null)" ]; then
        ok "ulimit -n $n: build fails cleanly: $(head -c 160 "$WORK/err")"
    else
        bad "ulimit -n $n: build exit $rc: $(head -c 400 "$WORK/err")"
    fi
    rm -rf "$WORK/fd$n"
    for cmd in "search" "verify"; do
        if [ $cmd = search ]; then
            (ulimit -n $n; exec "$R" search --index "$WORK/idx" --queries "$C.queries.npy" \
                --query-ids "$C.qids.txt" --k 20 --out "$WORK/fd.run" --threads 2) \
                >"$WORK/out" 2>"$WORK/err"; rc=$?
        else
            (ulimit -n $n; exec "$R" verify "$WORK/idx") >"$WORK/out" 2>"$WORK/err"; rc=$?
        fi
        if [ $rc = 0 ] && { [ $cmd = verify ] || cmp -s "$WORK/ref.run" "$WORK/fd.run"; }; then
            ok "ulimit -n $n: $cmd works"
        elif [ $rc = 1 ] && grep -q "[^ ]*: .*Too many open files" "$WORK/err"; then
            ok "ulimit -n $n: $cmd fails cleanly: $(grep -o 'error: .*' "$WORK/err" | head -c 160)"
        else
            bad "ulimit -n $n: $cmd exit $rc: $(head -c 400 "$WORK/err")"
        fi
        rm -f "$WORK/fd.run"
    done
done

# 3. The build keeps to --memory on an input larger than the budget: peak RSS (of the
# whole process, measured by the kernel) below the budget plus a fixed allowance for
# the program, libraries and BLAS buffers. Meaningless under ASan (shadow memory).
# The calibration that follows a build by default is not under --memory (it holds the
# index as a search does): --no-tune, and it would take 36 of this test's 56 s.
# bench/rss_budget.sh is the full-size version (2 GiB budget, ~4 GB input).
if [ -n "$sanitized" ]; then
    echo "# skip: RSS budget under sanitizers"
elif ! have_numpy; then
    echo "# skip: RSS budget needs python3"
else
    "$SYNTH" --out "$WORK/big" --docs 9000 --doclen 20-44 --dim 128 --queries 1 --seed 6 \
        >/dev/null 2>&1
    in_mb=$(( $(wc -c <"$WORK/big.vectors.npy") / 1048576 ))
    budget=64
    allow=48
    "$PY" -c '
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024, rc)
' "$R" build --vectors "$WORK/big.vectors.npy" --doclens "$WORK/big.doclens.npy" \
        --out "$WORK/bigidx" --memory ${budget}M --centroids 1024 --threads 2 --no-tune \
        >"$WORK/rss" 2>"$WORK/err"
    read -r peak rc <"$WORK/rss"
    if [ "${rc:-1}" = 0 ] && [ "$peak" -lt $((budget + allow)) ] && [ "$in_mb" -gt $((2 * budget)) ]; then
        ok "build of $in_mb MiB with --memory ${budget}M: peak RSS $peak MiB (< $budget + $allow)"
    else
        bad "build of $in_mb MiB with --memory ${budget}M: exit ${rc:-?}," \
            "peak RSS ${peak:-?} MiB: $(head -c 300 "$WORK/err")"
    fi
fi
finish

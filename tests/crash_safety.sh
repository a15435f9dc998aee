#!/bin/sh
# Crash safety of `tartan build` (doc/reliability.md): whatever happens to a build --
# SIGKILL at a random moment or in a chosen phase, a file size limit, a full file
# system, a failing write, fsync or rename -- the output path afterwards holds either
# no index or a complete one (the previous or the new), which opens and verifies.
# A build that fails must say which file and why, exit 1 and leave nothing behind.
# TT_CRASH_ITERS (default 6, 3 under sanitizers) random kills; TT_CRASH_SEED makes their delays repeatable.
. "${TT_SRCDIR:-.}/tests/lib.sh"
trap 'umount "$WORK/small" 2>/dev/null; rm -rf "$WORK"' EXIT
have_numpy || true # not needed: tartan-synth writes the corpora
FI="${TT_BUILDDIR:-.}/tests/.libs/libfaultinject.so"
# Under the sanitizers every build is several times slower: fewer random kills, and
# every third write instead of every second (each file still takes three writes).
sanitized=""
grep -q '^SAN_CFLAGS = .*fsanitize' "${TT_BUILDDIR:-.}/Makefile" 2>/dev/null && sanitized=1
iters=${TT_CRASH_ITERS:-$([ -n "$sanitized" ] && echo 3 || echo 6)}
wstep=$([ -n "$sanitized" ] && echo 3 || echo 2)
seed=${TT_CRASH_SEED:-$$}
echo "# random kill seed $seed (TT_CRASH_SEED=$seed repeats the delays)"

# Two corpora with different document counts: "info" tells which one an index holds.
"$SYNTH" --out "$WORK/a" --docs 300 --doclen 10-30 --dim 64 --queries 2 --seed 3 >/dev/null 2>&1
"$SYNTH" --out "$WORK/b" --docs 2500 --doclen 10-30 --dim 64 --queries 2 --seed 4 >/dev/null 2>&1
IDX="$WORK/idx"
build() { # corpus out [extra options]: the command line of one build
    c=$1; o=$2; shift 2
    "$T" build --vectors "$WORK/$c.vectors.npy" --doclens "$WORK/$c.doclens.npy" \
        --ids "$WORK/$c.ids.txt" --out "$o" --threads 2 --centroids 128 --force --no-tune "$@"
}
# A build in the background whose pid ($!) is tartan's own, so that kill -9 hits the
# build and not a shell around it: the subshell execs tartan (the libtool wrapper
# script execs the binary in turn).
build_bg() { # corpus out
    (exec "$T" build --vectors "$WORK/$1.vectors.npy" --doclens "$WORK/$1.doclens.npy" \
        --ids "$WORK/$1.ids.txt" --out "$2" --threads 2 --centroids 128 --force --no-tune \
        >/dev/null 2>&1) &
}
docs_of() { # index -> its document count, or "none" (no index), or "bad" (does not open)
    if [ ! -e "$1" ]; then echo none; return; fi
    if ! "$T" verify "$1" >/dev/null 2>"$WORK/verify.err"; then echo bad; return; fi
    n=$("$T" info --json "$1" 2>"$WORK/verify.err" |
        sed -n 's/.*"num_docs": *\([0-9]*\).*/\1/p' | head -n 1)
    echo "${n:-info-failed}"
}
leftovers() { ls -d "$1".tmp-* 2>/dev/null | wc -l; }

# Timing: a clean build of b, to spread the random kills over its duration.
t0=$(date +%s%N)
build b "$IDX" >/dev/null 2>&1 || { bad "reference build failed"; finish; }
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
[ "$ms" -gt 0 ] || ms=1
echo "# a build of b takes $ms ms"
[ "$(docs_of "$IDX")" = 2500 ] && ok "reference build verifies" || bad "reference build"
rm -rf "$IDX"

# 1. SIGKILL at random moments, alternating corpora, with and without a previous index.
prev=none
i=0
while [ $i -lt "$iters" ]; do
    i=$((i + 1))
    if [ $((i % 2)) = 1 ]; then c=b; n=2500; else c=a; n=300; fi
    [ $i = 3 ] && { rm -rf "$IDX"; prev=none; } # one round starting from nothing
    delay=$(awk -v s="$seed" -v i="$i" -v ms="$ms" 'BEGIN { srand(s + i); printf "%.3f", rand() * ms * 1.1 / 1000 }')
    build_bg $c "$IDX"
    pid=$!
    sleep "$delay"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    kill -0 $pid 2>/dev/null && bad "build $pid survived kill -9"
    now=$(docs_of "$IDX")
    if [ "$now" = "$prev" ] || [ "$now" = "$n" ]; then
        ok "kill after ${delay}s: index holds $now (before: $prev, building: $n)"
    else
        bad "kill after ${delay}s: index holds '$now' (before: $prev, building: $n): $(cat "$WORK/verify.err")"
    fi
    rm -rf "$IDX".tmp-* # a killed build cannot clean up after itself
    prev=$now
done

# 1b. What a killed build leaves behind, the next build into the same path removes. It
# holds OUT.lock, so no build that made one of them can still run: a directory named
# with a live pid (this shell's) is stale too, and goes.
build_bg b "$IDX"
pid=$!
while kill -0 $pid 2>/dev/null; do
    if [ "$(leftovers "$IDX")" -ge 1 ]; then kill -9 $pid 2>/dev/null; break; fi
done
wait $pid 2>/dev/null
left=$(leftovers "$IDX")
mkdir "$IDX.tmp-$$-abcdef"
build a "$IDX" >/dev/null 2>&1 || bad "build after a killed one"
if [ "$left" -ge 1 ] && [ "$(leftovers "$IDX")" = 0 ]; then
    ok "the next build removed the killed builds' directories"
else
    bad "stale build directories: $left before, $(ls -d "$IDX".tmp-* 2>/dev/null) after"
fi
rm -rf "$IDX".tmp-*

# 2. SIGKILL in each phase: poll the build directory for the first file of the phase
# (and, last, OUT for the moment the new index took the old one's place).
kill_at() { # marker-file phase-name (marker "exchanged": OUT/MANIFEST was replaced)
    ino=$(stat -c %i "$IDX/MANIFEST")
    build_bg b "$IDX"
    pid=$!
    hit=""
    while kill -0 $pid 2>/dev/null; do
        if [ "$1" = exchanged ]; then
            if [ "$(stat -c %i "$IDX/MANIFEST" 2>/dev/null)" != "$ino" ]; then
                kill -9 $pid 2>/dev/null
                hit=1
                break
            fi
            continue
        fi
        for d in "$IDX".tmp-*; do
            if [ -e "$d/$1" ]; then
                kill -9 $pid 2>/dev/null
                hit=1
                break 2
            fi
        done
    done
    wait $pid 2>/dev/null
    now=$(docs_of "$IDX")
    if [ "$now" = 300 ] || [ "$now" = 2500 ]; then
        ok "kill in phase $2 ($([ -n "$hit" ] && echo killed || echo finished first)): index holds $now"
    else
        bad "kill in phase $2: index holds '$now': $(cat "$WORK/verify.err")"
    fi
    rm -rf "$IDX".tmp-*
    # back to the small index, so the next kill has a previous index to keep
    build a "$IDX" >/dev/null 2>&1 || bad "rebuilding the previous index"
}
build a "$IDX" >/dev/null 2>&1
kill_at . "sample/train"
kill_at codes.tt "encode"
kill_at ivf.tt "ivf"
kill_at centroids.tt "tables"
kill_at meta.tt "meta"
kill_at MANIFEST.tmp "publish"
kill_at MANIFEST "rename"
kill_at exchanged "removing the previous index"

# A failed build must exit 1 naming a file of the build and the cause, keep the
# previous index byte for byte and leave no temporary directory.
before=$(cat "$IDX"/MANIFEST | cksum)
prev_docs=300
check_failed() { # description rc stderr-pattern (the previous index has $prev_docs documents)
    if [ "$2" = 1 ] && grep -Eq -- "$3" "$WORK/err"; then
        ok "$1: exit 1, $(head -c 200 "$WORK/err")"
    else
        bad "$1: exit $2, stderr: $(head -c 400 "$WORK/err")"
    fi
    if [ "$(cat "$IDX"/MANIFEST 2>/dev/null | cksum)" = "$before" ] && [ "$(docs_of "$IDX")" = "$prev_docs" ]; then
        ok "$1: previous index intact"
    else
        bad "$1: previous index damaged: $(docs_of "$IDX") $(cat "$WORK/verify.err")"
    fi
    if [ "$(leftovers "$IDX")" = 0 ]; then ok "$1: no temporary directory left"
    else bad "$1: left $(ls -d "$IDX".tmp-*)"; rm -rf "$IDX".tmp-*; fi
}

# 3. File size limit (RLIMIT_FSIZE): with SIGXFSZ ignored a write fails with EFBIG;
# at several limits, so that different files are the first to hit it.
for blocks in 16 128 512; do # 512-byte (dash) or 1 KiB (bash) blocks: below 800 KB
    (trap '' XFSZ; ulimit -f $blocks; build b "$IDX" >"$WORK/out" 2>"$WORK/err"); rc=$?
    check_failed "ulimit -f $blocks" $rc "tmp-[^ ]*/[a-zA-Z_.]+: .*File too large"
done
# ... and with SIGXFSZ at its default, the build dies by the signal: same guarantees.
(ulimit -f 64; build b "$IDX" >"$WORK/out" 2>"$WORK/err"); rc=$?
[ $rc -gt 128 ] && ok "SIGXFSZ kills the build (exit $rc)" || bad "SIGXFSZ: exit $rc"
rm -rf "$IDX".tmp-*
[ "$(cat "$IDX"/MANIFEST | cksum)" = "$before" ] && ok "SIGXFSZ: previous index intact" \
    || bad "SIGXFSZ: previous index damaged"

# 4. A really full file system: a 1 MiB tmpfs (needs mount permission; else skipped).
mkdir -p "$WORK/small"
if mount -t tmpfs -o size=1m tartan-test "$WORK/small" 2>/dev/null; then
    S="$WORK/small/idx"
    build a "$S" >/dev/null 2>&1 || bad "build on the small file system"
    sbefore=$(cat "$S/MANIFEST" | cksum)
    build b "$S" >"$WORK/out" 2>"$WORK/err"; rc=$?
    if [ $rc = 1 ] && grep -Eq "tmp-[^ ]*/[a-zA-Z_.]+: .*No space left on device" "$WORK/err"; then
        ok "full disk: exit 1, $(head -c 200 "$WORK/err")"
    else
        bad "full disk: exit $rc: $(head -c 400 "$WORK/err")"
    fi
    [ "$(cat "$S/MANIFEST" | cksum)" = "$sbefore" ] && [ "$(docs_of "$S")" = 300 ] \
        && ok "full disk: previous index intact" || bad "full disk: previous index damaged"
    [ "$(leftovers "$S")" = 0 ] && ok "full disk: no temporary directory left" \
        || bad "full disk: temporary directory left"
    umount "$WORK/small"
else
    echo "# skip: cannot mount a tmpfs here (full-disk case covered by ulimit -f and injection)"
fi

# 5. Injected failures (LD_PRELOAD tests/faultinject.c): the n-th write into the build
# directory fails, and every later one, for n = 0, 2, 4... (0, 3, 6... under the
# sanitizers) until the build needs fewer writes; so every file is hit in turn. Then fsync and rename failures.
if [ -f "$FI" ]; then
    fi_build() { # VAR=VALUE...: build a into $IDX with these failures injected
        (
            for a in "$@"; do export "${a?}"; done
            export LD_PRELOAD="$FI" TT_FAIL_PATH=".tmp-"
            export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0"
            build a "$IDX" >"$WORK/out" 2>"$WORK/err"
        )
    }
    build b "$IDX" >/dev/null 2>&1
    prev_docs=2500
    before=$(cat "$IDX"/MANIFEST | cksum)
    after=0
    files=""
    while [ $after -le 200 ]; do
        err=ENOSPC; msg="No space left on device"
        [ $(((after / wstep) % 2)) = 1 ] && { err=EIO; msg="Input/output error"; }
        fi_build TT_FAIL_WRITE_AFTER=$after TT_FAIL_ERRNO=$err; rc=$?
        if [ $rc = 0 ]; then # more writes allowed than the build makes: it must succeed
            [ "$(docs_of "$IDX")" = 300 ] && ok "$after writes allowed: the build succeeds" \
                || bad "$after writes allowed: build claims success but does not verify"
            break
        fi
        check_failed "write #$after fails ($err)" $rc "tmp-[^ ]*/[a-zA-Z_.]+: .*$msg"
        files="$files $(sed -n 's|.*tmp-[^ ]*/\([a-zA-Z_.]*\): .*|\1|p' "$WORK/err")"
        after=$((after + wstep)) # a file takes three writes: every file gets hit
    done
    [ $after -le 200 ] || bad "the build still failed with 200 writes allowed"
    nf=$(printf '%s\n' $files | sort -u | wc -l)
    hit=$(printf '%s\n' $files | sort -u | tr '\n' ' ')
    [ "$nf" -ge 8 ] && ok "failed writes hit $nf different files: $hit" \
        || bad "failed writes hit only:$files"
    prev_docs=300 # the last build of the loop succeeded
    before=$(cat "$IDX"/MANIFEST | cksum)
    fi_build TT_FAIL_FSYNC=1; rc=$?
    check_failed "fsync fails" $rc "tmp-[^ ]*/[a-zA-Z_.]+: .*fsync.*Input/output error"
    fi_build TT_FAIL_RENAME=1; rc=$?
    check_failed "rename fails" $rc "MANIFEST.*Input/output error"
else
    echo "# skip: $FI not built"
fi
finish

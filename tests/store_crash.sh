#!/bin/sh
# Crash safety of changes to an index (tartan add, delete, compact; doc/format.md,
# "Publishing and removal"), as crash_safety.sh is for builds: whatever happens to a
# change -- SIGKILL at a random moment or in a chosen phase, a full disk, a failing
# write, fsync or rename -- the index afterwards verifies and holds the previous
# generation or the new one, and searches work. A killed change's files (and a killed
# change's LOCK) are removed by the next change; a change that fails exits 1 naming the
# file and the cause, leaves the index byte for byte as it was, and nothing behind.
# TT_CRASH_ITERS (default 6, 3 under sanitizers) random kills; TT_CRASH_SEED makes their
# delays repeatable. Slow phases are made with the delay hooks of tests/faultinject.c.
. "${TT_SRCDIR:-.}/tests/lib.sh"
. "${TT_SRCDIR:-.}/tests/bg.sh"
cleanup() {
    kill_bg
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
BD=$(cd "${TT_BUILDDIR:-.}" && pwd)
T="$BD/tartan"
SYNTH="$BD/tartan-synth"
FI="$BD/tests/.libs/libfaultinject.so"
[ -f "$FI" ] || { echo "$FI not built (make check builds it): skip"; exit 77; }
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" # LD_PRELOAD under ASan
# Under the sanitizers every change is several times slower: fewer random kills. The
# failing writes go in steps of 2 either way: an add or a compaction writes codes,
# residuals and originals in turn (a period of 3), so a step of 3 would miss two of them.
sanitized=""
grep -q '^SAN_CFLAGS = .*fsanitize' "$BD/Makefile" 2>/dev/null && sanitized=1
iters=${TT_CRASH_ITERS:-$([ -n "$sanitized" ] && echo 3 || echo 6)}
wstep=2
seed=${TT_CRASH_SEED:-$$}
echo "# random kill seed $seed (TT_CRASH_SEED=$seed repeats the delays)"

# ------------------------------------------------------------------ helpers
verifies() { "$T" verify "$1" >/dev/null 2>"$WORK/verify.err"; }
msum() { cksum <"$1/MANIFEST" 2>/dev/null; }
# sig DIR: "generation live deleted segments" of the index, "bad" if it does not verify
sig() {
    if ! verifies "$1"; then echo bad; return; fi
    "$T" info --json "$1" 2>/dev/null | "$PY" -c 'import json, sys
j = json.load(sys.stdin)
print("%d %d %d %d" % (j["generation"], j["live_docs"], j["deleted_docs"], len(j["segments"])))' \
        2>/dev/null || echo info-failed
}
MF_PY='import struct, sys
b = open(sys.argv[1] + "/MANIFEST", "rb").read()
ver = struct.unpack_from("<I", b, 8)[0]
n = struct.unpack_from("<I", b, 64)[0]
head = 32 if ver == 2 else 8
for i in range(n):
    e = b[64 + head + 64 * i: 64 + head + 64 * i + 32]
    print(e.split(b"\0")[0].decode())'
# strays DIR: the files of DIR, other than MANIFEST, that the manifest does not name
strays() {
    "$PY" -c "$MF_PY" "$1" 2>/dev/null | sort >"$WORK/named.txt"
    ls -A "$1" | grep -vx MANIFEST | sort | comm -23 - "$WORK/named.txt" | tr '\n' ' '
}
# searches DIR: an exhaustive and a PLAID search succeed and return results
searches() {
    for m in exhaustive plaid; do
        "$T" search --index "$1" --queries "$WORK/b.queries.npy" --k 10 --mode $m \
            --out "$WORK/s.run" >/dev/null 2>&1 && [ -s "$WORK/s.run" ] || return 1
    done
}

# Background runs whose pid ($!) is tartan's own (the subshell execs the libtool wrapper,
# which execs the binary), so that kill -9 hits the change, not a shell around it.
bg() { # VAR=VALUE... -- CMD...: sets lpid
    (
        while [ "$1" != -- ]; do export "${1?}"; shift; done
        shift
        exec "$@" >"$WORK/bg.out" 2>"$WORK/bg.err"
    ) &
    lpid=$!
    bgpids="$bgpids $lpid"
}
exists_glob() { for g in $*; do [ -e "$g" ] && return 0; done; return 1; }
lock_by() { grep -qs "$2" "$1/LOCK"; }
replaced() { [ "$(stat -c %i "$1/MANIFEST" 2>/dev/null)" != "$2" ]; } # DIR INODE

# ------------------------------------------------------------------ collections
# b: 3000 documents (ids doc0...); m: 2000 more (ids m0...); del.ids: 1500 of b's.
"$SYNTH" --out "$WORK/b" --docs 3000 --doclen 10-30 --dim 64 --queries 4 --seed 4 \
    >/dev/null 2>&1
"$SYNTH" --out "$WORK/m" --docs 2000 --doclen 10-30 --dim 64 --queries 2 --seed 5 \
    >/dev/null 2>&1
[ -s "$WORK/b.vectors.npy" ] && [ -s "$WORK/m.vectors.npy" ] || { bad "tartan-synth"; finish; }
sed 's/^doc/m/' "$WORK/m.ids.txt" >"$WORK/m.ids"
# Metadata (doc/metadata.md) on both, so that every change also publishes the next
# generation's metadata.tt and every check below (verify) covers it: b in document
# order, m keyed by id in reverse.
awk '{ printf "{\"n\": %d, \"t\": \"x%d\"}\n", NR, NR % 7 }' "$WORK/b.ids.txt" >"$WORK/b.meta"
sort -r "$WORK/m.ids" | awk '{ printf "{\"id\": \"%s\", \"n\": %d}\n", $1, NR }' >"$WORK/m.meta"
seq 0 2 2999 | sed 's/^/doc/' >"$WORK/del.ids"
seq 1 4 1999 | sed 's/^/m/' >"$WORK/mdel.ids"

# P0: the build; P1: P0 + the 2000 added + 500 of them deleted (work for a compaction).
P0="$WORK/p0"
P1="$WORK/p1"
"$T" build --vectors "$WORK/b.vectors.npy" --doclens "$WORK/b.doclens.npy" \
    --ids "$WORK/b.ids.txt" --out "$P0" --threads 2 --centroids 128 --metadata "$WORK/b.meta" \
    --no-tune >/dev/null 2>&1 ||
    { bad "build"; finish; }
cp -a "$P0" "$P1"
"$T" add --index "$P1" --vectors "$WORK/m.vectors.npy" --doclens "$WORK/m.doclens.npy" \
    --ids "$WORK/m.ids" --threads 2 --metadata "$WORK/m.meta" >/dev/null 2>&1 &&
    "$T" delete --index "$P1" --ids "$WORK/mdel.ids" >/dev/null 2>&1 || { bad "P1"; finish; }

# The three changes: the state each starts from and its command line (on index $2).
op_from() { case $1 in add) echo "$P0" ;; *) echo "$P1" ;; esac; }
op_cmd() { # OP DIR
    case $1 in
    add) echo "$T add --index $2 --vectors $WORK/m.vectors.npy --doclens $WORK/m.doclens.npy --ids $WORK/m.ids --threads 2 --metadata $WORK/m.meta" ;;
    delete) echo "$T delete --index $2 --ids $WORK/del.ids" ;;
    compact) echo "$T compact --index $2 --threads 2" ;;
    esac
}
# Slowed: every fsync of a file of the change 30 ms, every read 5 ms (LOCK, headers,
# vectors), so that random kills land in every phase and not mostly in startup.
SLOW="LD_PRELOAD=$FI TT_DELAY_FSYNC_MS=30 TT_DELAY_PREAD_MS=5 TT_FAIL_PATH=/g0"
K="$WORK/k"
# Reference runs: the old and new signatures of each change, and how long it takes.
for op in add delete compact; do
    for speed in fast slow; do
        rm -rf "$K"
        cp -a "$(op_from $op)" "$K"
        old=$(sig "$K")
        env=""
        [ $speed = slow ] && env=$SLOW
        t0=$(date +%s%N)
        # shellcheck disable=SC2046,SC2086
        env $env $(op_cmd $op "$K") >/dev/null 2>"$WORK/ref.err" ||
            bad "$op ($speed): $(head -c 300 "$WORK/ref.err")"
        t1=$(date +%s%N)
        ms=$(( (t1 - t0) / 1000000 ))
        [ "$ms" -gt 0 ] || ms=1
        new=$(sig "$K")
        eval "old_$op='$old' new_$op='$new' ms_${op}_$speed=$ms"
        echo "# $op ($speed) takes $ms ms: $old -> $new"
        [ -z "$(strays "$K")" ] || bad "$op ($speed) left: $(strays "$K")"
    done
done

# One change after a crash removes what the killed one left (LOCK, files no manifest
# names) and works on whatever generation the crash left.
next_change() { # DIR: a delete of one live id (doc1 is never deleted above)
    "$T" delete --index "$1" --id doc1 --strict >/dev/null 2>"$WORK/next.err"
}

# ------------------------------------------------------------------ 1. random kills
ops="add delete compact"
i=0
while [ $i -lt "$iters" ]; do
    i=$((i + 1))
    op=$(echo "$ops" | cut -d' ' -f$(( (i - 1) % 3 + 1 )))
    speed=$([ $(( (i - 1) / 3 % 2 )) = 0 ] && echo slow || echo fast)
    eval "ms=\$ms_${op}_$speed old=\$old_$op new=\$new_$op"
    delay=$(awk -v s="$seed" -v i="$i" -v ms="$ms" \
        'BEGIN { srand(s + i); printf "%.3f", rand() * ms * 1.1 / 1000 }')
    rm -rf "$K"
    cp -a "$(op_from $op)" "$K"
    env=""
    [ $speed = slow ] && env=$SLOW
    # shellcheck disable=SC2046,SC2086
    bg $env -- $(op_cmd $op "$K")
    pid=$lpid
    sleep "$delay"
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    now=$(sig "$K")
    left=$(strays "$K")
    what="kill -9 of $op ($speed) after ${delay}s"
    if [ "$now" = "$old" ] || [ "$now" = "$new" ]; then
        ok "$what: holds $([ "$now" = "$old" ] && echo the old || echo the new) generation ($now), left: ${left:-nothing}"
    else
        bad "$what: holds '$now' (old $old, new $new): $(head -c 300 "$WORK/verify.err")"
    fi
    searches "$K" && ok "$what: searches work" || bad "$what: search fails"
    if next_change "$K" && [ -z "$(strays "$K")" ]; then
        ok "$what: the next change succeeds and removes the leftovers"
    else
        bad "$what: next change: $(head -c 300 "$WORK/next.err"); left: $(strays "$K")"
    fi
done

# ------------------------------------------------------------------ 2. kill in a phase
# A delay hook holds the change in the phase; it is killed there:
#   lock       it holds DIR/LOCK (reads slowed)                       -> old generation
#   write      its first g<N>. file exists (fsyncs of its files slowed) -> old
#   publish    MANIFEST.tmp exists (rename slowed)                    -> old
#   published  MANIFEST replaced, the directory fsync slowed: the files
#              the new generation does not name are not yet removed   -> new
kill_at() { # OP PHASE
    kop=$1; kph=$2
    rm -rf "$K"
    cp -a "$(op_from $kop)" "$K"
    eval "old=\$old_$kop new=\$new_$kop"
    gnext=$(printf 'g%06d.' $(($(echo "$old" | cut -d' ' -f1) + 1)))
    ino=$(stat -c %i "$K/MANIFEST")
    case $kph in
    lock) env="TT_DELAY_PREAD_MS=300"; want=$old ;;
    write) env="TT_DELAY_FSYNC_MS=2000 TT_FAIL_PATH=/g0"; want=$old ;;
    publish) env="TT_DELAY_RENAME_MS=2000"; want=$old ;;
    published) env="TT_DELAY_DIRSYNC_MS=2000"; want=$new ;;
    esac
    # shellcheck disable=SC2046,SC2086
    bg LD_PRELOAD="$FI" $env -- $(op_cmd $kop "$K")
    pid=$lpid
    case $kph in
    lock) wait_for 30 $pid lock_by "$K" $pid ;;
    write) wait_for 30 $pid exists_glob "$K/$gnext*" ;;
    publish) wait_for 30 $pid exists_glob "$K/MANIFEST.tmp" ;;
    published) wait_for 30 $pid replaced "$K" "$ino" ;;
    esac
    hit=$?
    kill -0 $pid 2>/dev/null || hit=finished
    kill -9 $pid 2>/dev/null
    wait $pid 2>/dev/null
    now=$(sig "$K")
    left=$(strays "$K")
    what="kill -9 of $kop in phase $kph"
    if [ "$hit" != 0 ]; then
        bad "$what: never reached the phase ($hit; $(head -c 200 "$WORK/bg.err"))"
    elif [ "$now" = "$want" ]; then
        ok "$what: holds $now as it should; left: ${left:-nothing}"
    else
        bad "$what: holds '$now', should hold $want: $(head -c 300 "$WORK/verify.err")"
    fi
    case $kph in # what a kill there must leave (so that the next change has work)
    write | publish) [ -n "$left" ] || bad "$what: no file of the change left (phase missed?)" ;;
    esac
    searches "$K" || bad "$what: search fails"
    if next_change "$K" && [ -z "$(strays "$K")" ]; then
        ok "$what: the next change succeeds and removes: ${left:-nothing}"
    else
        bad "$what: next change: $(head -c 300 "$WORK/next.err"); left: $(strays "$K")"
    fi
}
for op in add delete compact; do
    for ph in lock write publish published; do
        kill_at $op $ph
    done
done

# ------------------------------------------------------------------ 3. failures
# A small index (400 documents with float16 originals, so that an add and a compaction
# write every kind of file), changed with writes, fsyncs and renames failing.
"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-15 --dim 32 --queries 4 --qlen 4 >/dev/null 2>&1
"$SYNTH" --out "$WORK/n" --docs 60 --doclen 5-15 --dim 32 --queries 2 --qlen 4 --seed 9 \
    >/dev/null 2>&1
# n's ids: 30 new, 30 that replace documents of c (an upsert writes a deletion list too)
awk 'NR <= 30 { print "doc" (NR * 7); next } { print "n" NR }' "$WORK/n.ids.txt" >"$WORK/n.ids"
F0="$WORK/f0"
"$T" build --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" \
    --ids "$WORK/c.ids.txt" --out "$F0" --centroids 16 --threads 2 --keep-originals f16 \
    --no-tune >/dev/null 2>&1 || { bad "small build"; finish; }
F1="$WORK/f1" # with an added segment and deletions: work for a compaction
cp -a "$F0" "$F1"
"$T" add --index "$F1" --vectors "$WORK/n.vectors.npy" --doclens "$WORK/n.doclens.npy" \
    --ids "$WORK/n.ids" --upsert >/dev/null 2>&1 &&
    "$T" delete --index "$F1" --id doc1 --id n40 >/dev/null 2>&1 || { bad "F1"; finish; }
F="$WORK/f"
fop_cmd() { # OP: the change of $F
    case $1 in
    add) echo "$T add --index $F --vectors $WORK/n.vectors.npy --doclens $WORK/n.doclens.npy --ids $WORK/n.ids --upsert --threads 2" ;;
    delete) echo "$T delete --index $F --id doc2 --id doc3 --id n41" ;;
    compact) echo "$T compact --index $F --threads 2" ;;
    retrain) echo "$T compact --index $F --retrain --threads 2" ;;
    esac
}
fop_from() { case $1 in add) echo "$F0" ;; *) echo "$F1" ;; esac; }
# frun OP VAR=VALUE...: the change of a fresh copy with these failures injected; $rc
frun() {
    fo=$1; shift
    rm -rf "$F"
    cp -a "$(fop_from "$fo")" "$F"
    fbefore=$(msum "$F")
    fsig=$(sig "$F")
    # shellcheck disable=SC2046
    env LD_PRELOAD="$FI" "$@" $(fop_cmd "$fo") >"$WORK/out" 2>"$WORK/err"
    rc=$?
}
# check_failed DESCRIPTION PATTERN: exit 1 with PATTERN; the index byte for byte as it
# was; nothing left (no file of the change, no MANIFEST.tmp, no LOCK)
check_failed() {
    if [ "$rc" = 1 ] && grep -Eq -- "$2" "$WORK/err"; then
        ok "$1: exit 1, $(head -c 160 "$WORK/err")"
    else
        bad "$1: exit $rc, stderr: $(head -c 300 "$WORK/err")"
    fi
    if [ "$(msum "$F")" = "$fbefore" ] && [ "$(sig "$F")" = "$fsig" ]; then
        ok "$1: index as it was, verifies"
    else
        bad "$1: index changed or damaged: $(sig "$F") $(head -c 200 "$WORK/verify.err")"
    fi
    fl=$(strays "$F")
    [ -z "$fl" ] && ok "$1: nothing left" || bad "$1: left $fl"
}
for fo in add delete compact retrain; do
    after=0
    files=""
    while [ $after -le 200 ]; do
        err=ENOSPC; msg="No space left on device"
        [ $(((after / wstep) % 2)) = 1 ] && { err=EIO; msg="Input/output error"; }
        frun $fo TT_FAIL_WRITE_AFTER=$after TT_FAIL_PATH=/g0 TT_FAIL_ERRNO=$err
        if [ $rc = 0 ]; then # more writes allowed than the change makes: it succeeds
            verifies "$F" && [ "$(msum "$F")" != "$fbefore" ] && [ -z "$(strays "$F")" ] &&
                ok "$fo: $after writes allowed: the change succeeds" ||
                bad "$fo: $after writes allowed: exit 0 but $(sig "$F"), left: $(strays "$F")"
            break
        fi
        check_failed "$fo: write #$after of its files fails ($err)" \
            "/g[0-9]+\.[a-z]+\.tt: write failed: $msg"
        files="$files $(sed -n 's|.*/\(g[0-9]*\.[a-z]*\.tt\): .*|\1|p' "$WORK/err")"
        after=$((after + wstep))
    done
    [ $after -le 200 ] || bad "$fo still fails with 200 writes allowed"
    hit=$(printf '%s\n' $files | sed 's/^g[0-9]*\.//' | sort -u | tr '\n' ' ')
    case $fo in
    add) want="codes.tt doclens.tt idmap.tt ids.tt ivf.tt originals.tt residuals.tt tombs.tt" ;;
    delete) want="tombs.tt" ;;
    compact) want="codes.tt doclens.tt idmap.tt ids.tt ivf.tt originals.tt residuals.tt" ;;
    retrain) want="centroids.tt codec.tt codes.tt doclens.tt idmap.tt ids.tt ivf.tt meta.tt originals.tt residuals.tt" ;;
    esac
    missing=""
    for w in $want; do
        case " $hit" in *" $w "*) ;; *) missing="$missing $w" ;; esac
    done
    [ -z "$missing" ] && ok "$fo: failed writes hit every file: $hit" ||
        bad "$fo: failed writes never hit:$missing (hit: $hit)"

    frun $fo TT_FAIL_WRITE_AFTER=0 TT_FAIL_PATH=MANIFEST.tmp TT_FAIL_ERRNO=ENOSPC
    check_failed "$fo: the manifest's first write fails (ENOSPC)" \
        "MANIFEST.tmp: write failed: No space left on device"
    frun $fo TT_FAIL_WRITE_AFTER=1 TT_FAIL_PATH=MANIFEST.tmp TT_FAIL_ERRNO=EIO
    check_failed "$fo: the manifest's second write fails (EIO)" \
        "MANIFEST.tmp: write failed: Input/output error"
    frun $fo TT_FAIL_FSYNC=1 TT_FAIL_PATH=/g0
    check_failed "$fo: fsync of its files fails" "/g[0-9]+\.[a-z]+\.tt: fsync failed: Input/output error"
    frun $fo TT_FAIL_FSYNC=1 TT_FAIL_PATH=MANIFEST.tmp
    check_failed "$fo: fsync of the manifest fails" "MANIFEST.tmp: fsync failed: Input/output error"
    frun $fo TT_FAIL_RENAME=1
    check_failed "$fo: rename of the manifest fails" "MANIFEST: cannot publish manifest: Input/output error"
    # The directory's fsync fails after MANIFEST was renamed into place: the new
    # generation is already what a reader opens. Whatever the exit status, the index must
    # open and verify, and what tartan says must be true: exit 0 with the new generation,
    # an error with the index as it was, or an error that says the new generation is
    # published (tartan's answer: the change stands but may not survive a power failure).
    frun $fo TT_FAIL_DIRSYNC=1
    now=$(sig "$F")
    if [ "$now" = bad ] || [ "$now" = info-failed ]; then
        bad "$fo: directory fsync fails after the rename: exit $rc ($(head -c 160 "$WORK/err")), the index is damaged: $(head -c 200 "$WORK/verify.err")"
    elif [ "$rc" = 0 ] && [ "$(msum "$F")" != "$fbefore" ]; then
        ok "$fo: directory fsync fails after the rename: exit 0, new generation $now"
    elif [ "$rc" = 1 ] && [ "$(msum "$F")" = "$fbefore" ]; then
        ok "$fo: directory fsync fails after the rename: exit 1, index as it was"
    elif [ "$rc" = 1 ] && grep -q "generation [0-9]* is published, but it may not survive a power failure: .*fsync of directory failed" "$WORK/err"; then
        ok "$fo: directory fsync fails after the rename: exit 1 saying the new generation $now is published"
    else
        bad "$fo: directory fsync fails after the rename: exit $rc ($(head -c 160 "$WORK/err")), index $([ "$(msum "$F")" = "$fbefore" ] && echo unchanged || echo "changed to $now")"
    fi
done
finish

#!/bin/sh
# The output paths of `tartan build --out DIR` and `tartan search --out RUN` never lose
# data that is not tartan's and are safe against races and signals:
#   A1   --out a symlink: builds into its target; the link is never modified; the
#        cleanup of stale build directories never follows a symlink and removes only
#        the files tartan writes
#   A2   a directory that appears at --out during a build is never replaced; two
#        builds into one --out: the second fails at once ("being built by pid N")
#   A3   --force replaces only an index: files that are not part of it (a link
#        or a user's file under an index file's name included; or an old
#        index that cannot be removed) make the build fail before anything changes;
#        an index with damaged files (its MANIFEST too) is rebuilt
#   A5   two searches writing the same --out at once: the run is complete
#   A6   SIGINT/SIGTERM/SIGHUP during a build or search leave no temporary files
#   A7   a residuals file truncated under a running search: exit 1 naming it, no SIGBUS
#   A8   --out a regular file: refused at once, before training
#   B15  --out "" is a usage error; a missing parent is named without the temporary name
# Races are made deterministic with the delay hooks of tests/faultinject.c
# (TT_DELAY_RENAME_MS, TT_DELAY_PREAD_MS). Every wait has a time limit.
. "${TT_SRCDIR:-.}/tests/lib.sh"
. "${TT_SRCDIR:-.}/tests/bg.sh"
cleanup() {
    kill_bg
    chmod -R u+w "$WORK" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
# Absolute paths: every case runs in a directory of its own.
BD=$(cd "${TT_BUILDDIR:-.}" && pwd)
T="$BD/tartan"
SYNTH="$BD/tartan-synth"
FI="$BD/tests/.libs/libfaultinject.so"
[ -f "$FI" ] || { echo "$FI not built (make check builds it): skip"; exit 77; }
chmod 755 "$WORK" # A3c runs tartan as another user
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" # LD_PRELOAD under ASan

"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-15 --dim 32 --queries 10 --qlen 4 >/dev/null 2>&1
# A larger collection for the searches: 3000 queries of exhaustive search take seconds.
"$SYNTH" --out "$WORK/L" --docs 3000 --doclen 5-15 --dim 32 --queries 3000 --qlen 4 --seed 5 \
    >/dev/null 2>&1
"$SYNTH" --out "$WORK/s" --docs 3000 --doclen 5-15 --dim 32 --queries 200 --qlen 4 --seed 6 \
    >/dev/null 2>&1
chmod a+r "$WORK"/c.* "$WORK"/L.* "$WORK"/s.*
# bld ARGS: a build of collection c; a script so that it can run in the background
# (and as another user) with tartan's own pid: it execs tartan.
cat >"$WORK/bld" <<EOF
#!/bin/sh
exec "$T" build --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" \\
    --ids "$WORK/c.ids.txt" --centroids 16 --threads 2 --no-tune "\$@"
EOF
chmod 755 "$WORK/bld"
BLD="$WORK/bld"
# srch ARGS: an exhaustive top-10 search of the index of collection L (made in A5).
cat >"$WORK/srch" <<EOF
#!/bin/sh
exec "$T" search --index "$WORK/Lidx" --mode exhaustive --threads 1 --k 10 "\$@"
EOF
chmod 755 "$WORK/srch"
SRCH="$WORK/srch"

run() { # SECONDS STDOUT STDERR [VAR=VALUE...] -- CMD...: runs it with a time limit; $rc
    rt=$1; shift
    launch "$@"
    wait_pid "$lpid" "$rt"
    rc=$wrc
}
# The glob helpers expand their arguments themselves (unquoted $*), so that a quoted
# pattern given to wait_for is expanded anew at every poll. No spaces in the paths.
exists_glob() { # GLOB...: a path matches (dangling symlinks count)
    for g in $*; do [ -e "$g" ] || [ -L "$g" ] && return 0; done
    return 1
}
dir_glob() { for g in $*; do [ -d "$g" ] && return 0; done; return 1; }
gone() { ! exists_glob "$@"; }
ls_glob() { for g in $*; do [ -e "$g" ] || [ -L "$g" ] && printf ' %s' "${g##*/}"; done; }
failed() { [ "$rc" != timeout ] && [ "$rc" != 0 ]; } # ended with an error or by a signal
verifies() { "$T" verify "$1" >/dev/null 2>&1; }
sum() { echo "$(stat -c %i "$1" 2>/dev/null) $(cksum <"$1" 2>/dev/null)"; } # replaced or changed

# One line per case: every failed check is listed.
case_begin() { cid=$1; cdesc=$2; cfail=""; }
check() { # WHAT TEST...
    cw=$1; shift
    "$@" || cfail="$cfail; $cw"
}
case_end() {
    if [ -z "$cfail" ]; then ok "$cid $cdesc"; else bad "$cid $cdesc:${cfail#;}"; fi
}
err_has() { grep -q -- "$1" "$E"; } # in the stderr of the case
err_hasF() { grep -qF -- "$1" "$E"; }
err_hasE() { grep -qE -- "$1" "$E"; }
rc_is() { [ "$rc" = "$1" ]; }
stderr_note() { cfail="$cfail [exit $rc, stderr: $(head -c 300 "$E" | tr '\n' ' ')]"; }
newcase() { # DIR: a fresh directory for the case, made current
    D="$WORK/$1"
    mkdir -p "$D"
    cd "$D" || exit 1
    O="$D/out.txt"
    E="$D/err.txt"
}

# ---------------------------------------------------------------- A1: symlinks
newcase a1a
run 30 "$O" "$E" -- "$BLD" --out real
ln -s real link
run 30 "$O" "$E" -- "$BLD" --out link --force
case_begin A1a "build --out LINK --force builds into the link's target"
check "exit 0 (got $rc)" rc_is 0
check "link is no longer a symlink" [ -L link ]
check "link no longer points to real ($(readlink link))" [ "$(readlink link)" = real ]
check "real/MANIFEST missing" [ -f real/MANIFEST ]
check "real does not verify" verifies real
check "left:$(ls_glob link.tmp-* real.tmp-*)" gone link.tmp-* real.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

newcase a1b
run 30 "$O" "$E" -- "$BLD" --out real
ln -s real link
before=$(sum real/MANIFEST)
run 30 "$O" "$E" -- "$BLD" --out link
case_begin A1b "build --out LINK to an index without --force is refused"
check "exit 1 (got $rc)" rc_is 1
check "no 'already exists'" err_has "already exists"
check "link is no longer a symlink" [ -L link ]
check "real/MANIFEST changed" [ "$(sum real/MANIFEST)" = "$before" ]
check "real does not verify" verifies real
check "left:$(ls_glob link.tmp-* real.tmp-*)" gone link.tmp-* real.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

newcase a1c
ln -s newtarget newlink
run 30 "$O" "$E" -- "$BLD" --out newlink
case_begin A1c "build --out DANGLING-LINK builds at the link's target"
check "exit 0 (got $rc)" rc_is 0
check "newlink is no longer a symlink" [ -L newlink ]
check "newtarget/MANIFEST missing" [ -f newtarget/MANIFEST ]
check "newlink does not verify" verifies newlink
check "left:$(ls_glob newlink.tmp-* newtarget.tmp-*)" gone newlink.tmp-* newtarget.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

newcase a1d
mkdir userdata
echo "four years of work" >userdata/thesis.txt
ln -s userdata "idx2.tmp-99999999-abcdef" # the name of a dead build's directory
run 30 "$O" "$E" -- "$BLD" --out idx2
case_begin A1d "stale-build cleanup does not follow a symlink"
check "exit 0 (got $rc)" rc_is 0
check "userdata/thesis.txt deleted or changed" \
    [ "$(cat userdata/thesis.txt 2>/dev/null)" = "four years of work" ]
check "idx2 does not verify" verifies idx2
[ -z "$cfail" ] || stderr_note
case_end

newcase a1e
mkdir idx3.tmp-99999999-abc123
echo keep >idx3.tmp-99999999-abc123/keep.txt
: >idx3.tmp-99999999-abc123/MANIFEST.tmp
run 30 "$O" "$E" -- "$BLD" --out idx3
case_begin A1e "stale-build cleanup removes only files tartan writes"
check "exit 0 (got $rc)" rc_is 0
check "keep.txt deleted" [ "$(cat idx3.tmp-99999999-abc123/keep.txt 2>/dev/null)" = keep ]
check "idx3 does not verify" verifies idx3
[ -z "$cfail" ] || stderr_note
case_end

# ---------------------------------------------------------------- A2: races at --out
# A build slowed in its renames (the index's MANIFEST, then the publication) is
# still running when a directory appears at its --out.
newcase a2a
launch "$O" "$E" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=1500 -- "$BLD" --out nf2
p=$lpid
raced=""
if wait_for 20 $p dir_glob 'nf2.tmp-*'; then
    mkdir nf2 && echo x >nf2/thesis.txt && raced=1
fi
wait_pid $p 30
rc=$wrc
case_begin A2a "a directory appearing at --out during a build is not replaced"
check "the build ended before the race (exit $rc)" [ -n "$raced" ]
check "exit 1 (got $rc)" rc_is 1
check "message does not name nf2" err_has "nf2"
check "no 'exists' in the message" err_has "exists"
check "nf2/thesis.txt deleted or changed" [ "$(cat nf2/thesis.txt 2>/dev/null)" = x ]
check "left:$(ls_glob nf2.tmp-*)" gone nf2.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

two_builds() { # ID DESCRIPTION OUT [--force]: a slowed build, and a second one beside it
    launch "$D/o1" "$D/e1" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=2500 -- "$BLD" --out "$3" ${4:-}
    p1=$lpid
    second=""
    if wait_for 20 $p1 dir_glob "$3.tmp-*"; then
        t0=$(date +%s)
        run 30 "$O" "$E" -- "$BLD" --out "$3" ${4:-}
        t1=$(date +%s)
        second=$rc
        kill -0 $p1 2>/dev/null && first_alive=1 || first_alive=""
    fi
    wait_pid $p1 30
    rc1=$wrc
    case_begin "$1" "$2"
    check "the first build ended before the second started (exit $rc1)" [ -n "$second" ]
    check "second: exit 1 (got $second)" [ "$second" = 1 ]
    check "second: no 'being built by pid $p1' in the message" err_has "being built by pid $p1"
    check "second: not at once ($((t1 - t0)) s, first still running: ${first_alive:-no})" \
        [ -n "$first_alive" ]
    check "first: exit 0 (got $rc1: $(head -c 200 "$D/e1" | tr '\n' ' '))" [ "$rc1" = 0 ]
    check "$3 does not verify" verifies "$3"
    check "left:$(ls_glob "$3".tmp-*)" gone "$3".tmp-*
    [ -z "$cfail" ] || stderr_note
    case_end
}
newcase a2b
two_builds A2b "two builds into one new --out: the second fails at once" nf
"$BLD" --out idx >/dev/null 2>&1
two_builds A2b-force "two --force builds into one index: the second fails at once" idx --force

newcase a2c
launch "$O" "$E" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=1500 -- "$BLD" --out x --force
p=$lpid
raced=""
if wait_for 20 $p dir_glob 'x.tmp-*'; then
    mkdir x && echo "user data" >x/notes.txt && raced=1
fi
wait_pid $p 30
rc=$wrc
case_begin A2c "--force never replaces a non-index directory that appears during the build"
check "the build ended before the race (exit $rc)" [ -n "$raced" ]
check "exit 1 (got $rc)" rc_is 1
check "x/notes.txt deleted or changed" [ "$(cat x/notes.txt 2>/dev/null)" = "user data" ]
check "left:$(ls_glob x.tmp-*)" gone x.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

# ---------------------------------------------------------------- A3: --force
# force_refuses_file ID CASE DESCRIPTION NAME: a user's file NAME in an index directory
# makes --force refuse, and nothing changes.
force_refuses_file() {
    newcase "$1"
    "$BLD" --out idx >/dev/null 2>&1
    echo "my notes" >"idx/$4"
    before=$(sum idx/MANIFEST)
    run 30 "$O" "$E" -- "$BLD" --out idx --force
    case_begin "$2" "$3"
    check "exit 1 (got $rc)" rc_is 1
    check "message does not name $4" err_has "$4"
    check "old index replaced or damaged" [ "$(sum idx/MANIFEST)" = "$before" ]
    check "old index does not verify" verifies idx
    check "$4 deleted or changed" [ "$(cat "idx/$4" 2>/dev/null)" = "my notes" ]
    check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
    [ -z "$cfail" ] || stderr_note
    case_end
}
force_refuses_file a3a A3a "--force refuses an index directory holding a user file" NOTES.txt

newcase a3b
"$BLD" --out idx >/dev/null 2>&1
mkdir idx/runs
echo "run 1" >idx/runs/r1.trec
before=$(sum idx/MANIFEST)
run 30 "$O" "$E" -- "$BLD" --out idx --force
case_begin A3b "--force refuses an index directory holding a subdirectory"
check "exit 1 (got $rc)" rc_is 1
check "message does not name runs" err_has "runs"
check "old index replaced or damaged" [ "$(sum idx/MANIFEST)" = "$before" ]
check "old index does not verify" verifies idx
check "runs/r1.trec deleted or changed" [ "$(cat idx/runs/r1.trec 2>/dev/null)" = "run 1" ]
check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

# A link under an index file's name is not part of the index either.
newcase a3d
"$BLD" --out idx >/dev/null 2>&1
echo "outside" >outside.txt
ln -s ../outside.txt idx/g000007.ivf.tt
before=$(sum idx/MANIFEST)
run 30 "$O" "$E" -- "$BLD" --out idx --force
case_begin A3d "--force refuses an index directory holding a link under an index file's name"
check "exit 1 (got $rc)" rc_is 1
check "message does not name g000007.ivf.tt" err_has "g000007.ivf.tt"
check "old index replaced or damaged" [ "$(sum idx/MANIFEST)" = "$before" ]
check "old index does not verify" verifies idx
check "the link removed or moved" [ -L idx/g000007.ivf.tt ]
check "the linked file changed" [ "$(cat outside.txt)" = "outside" ]
check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

# A user's regular file under an index file's name, that no manifest lists and that
# does not start with tartan's magic, is the user's: the name alone decides nothing.
force_refuses_file a3e A3e \
    "--force refuses an index directory holding a user's file under an index file's name" \
    g000009.sketch.tt

# An index file the manifest lists stays the index's even with its header overwritten:
# --force is how a damaged index is rebuilt. An unlisted leftover with tartan's magic
# (a killed add's) goes with it.
newcase a3f
"$BLD" --out idx >/dev/null 2>&1
printf 'XXXXXXXXXXXXXXXX' | dd of=idx/codes.tt bs=16 count=1 conv=notrunc 2>/dev/null
cp idx/ivf.tt idx/g000005.ivf.tt
run 30 "$O" "$E" -- "$BLD" --out idx --force
case_begin A3f "--force rebuilds an index whose listed file's header was overwritten"
check "exit 0 (got $rc)" rc_is 0
check "the new index does not verify" verifies idx
check "the killed add's leftover g000005.ivf.tt stayed" gone idx/g000005.ivf.tt
check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

# The index's own MANIFEST overwritten: the other files are tartan's, so the directory
# is an index and the MANIFEST at its name its damaged manifest (nobody else's file can
# sit there): --force rebuilds it, as tartan report does with a cached index that does
# not open. A directory holding only such a MANIFEST is not an index: refused.
newcase a3g
"$BLD" --out idx >/dev/null 2>&1
echo garbage >idx/MANIFEST
run 30 "$O" "$E" -- "$BLD" --out idx --force
case_begin A3g "--force rebuilds an index whose MANIFEST was overwritten"
check "exit 0 (got $rc)" rc_is 0
check "the new index does not verify" verifies idx
check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
[ -z "$cfail" ] || stderr_note
case_end
newcase a3h
mkdir idx
echo "my manifest" >idx/MANIFEST
run 30 "$O" "$E" -- "$BLD" --out idx --force
case_begin A3h "--force refuses a directory whose only file is a user's MANIFEST"
check "exit 1 (got $rc)" rc_is 1
check "message does not name MANIFEST" err_has "MANIFEST"
check "MANIFEST deleted or changed" [ "$(cat idx/MANIFEST 2>/dev/null)" = "my manifest" ]
check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
[ -z "$cfail" ] || stderr_note
case_end
# A3i: a user's MANIFEST beside files that merely carry index names (an empty ids.tt,
# a touched LOCK) is still the user's: only a file of index data marks an index.
newcase a3i
mkdir idx
echo "my manifest" >idx/MANIFEST
: >idx/ids.tt
: >idx/LOCK
run 30 "$O" "$E" -- "$BLD" --out idx --force
case_begin A3i "--force refuses a user's MANIFEST beside an empty ids.tt and LOCK"
check "exit 1 (got $rc)" rc_is 1
check "message does not name MANIFEST" err_has "MANIFEST"
check "MANIFEST deleted or changed" [ "$(cat idx/MANIFEST 2>/dev/null)" = "my manifest" ]
check "left:$(ls_glob idx.tmp-*)" gone idx.tmp-*
[ -z "$cfail" ] || stderr_note
case_end

# A3c: a read-only old index, as a user who cannot write it (root could).
newcase a3c
AS=""
skip=""
if [ "$(id -u)" = 0 ]; then
    if command -v setpriv >/dev/null 2>&1; then
        AS="setpriv --reuid=65534 --regid=65534 --clear-groups"
        chown 65534:65534 "$D"
        $AS "$T" --help >/dev/null 2>&1 || $AS test -x "$T" ||
            skip="uid 65534 cannot run $T"
    else
        skip="running as root and setpriv is missing"
    fi
fi
if [ -n "$skip" ]; then
    ok "A3c skipped: $skip"
else
    $AS "$BLD" --out "$D/idx" >/dev/null 2>"$E" || echo "# A3c: first build: $(cat "$E")"
    $AS chmod a-w "$D/idx"
    before=$(sum "$D/idx/MANIFEST")
    case_begin A3c "--force over a read-only index fails, naming it, and leaves nothing"
    for i in 1 2; do
        run 30 "$O" "$E" -- $AS "$BLD" --out "$D/idx" --force
        check "run $i: exit 1 (got $rc)" rc_is 1
        check "run $i: message does not name $D/idx" err_hasF "$D/idx"
        check "run $i: message does not say why" err_hasE "writ|ermission|read-only"
        check "run $i: old index replaced or damaged" [ "$(sum "$D/idx/MANIFEST")" = "$before" ]
        check "run $i: old index does not verify" verifies "$D/idx"
        check "run $i: left:$(ls_glob "$D"/*.tmp-*)" gone "$D"/*.tmp-*
        [ -z "$cfail" ] || stderr_note
    done
    case_end
    chmod -R u+w "$D"
fi

# ---------------------------------------------------------------- A5: concurrent search --out
newcase a5
"$T" build --vectors "$WORK/L.vectors.npy" --doclens "$WORK/L.doclens.npy" --ids "$WORK/L.ids.txt" \
    --out "$WORK/Lidx" --centroids 16 --threads 2 --no-tune >/dev/null 2>&1 ||
    bad "building the search index"
chmod -R a+rX "$WORK/Lidx"
# Both searches write RUN, then sleep 1.5 s before their renames: their writes overlap.
launch "$D/o1" "$D/e1" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=1500 -- "$SRCH" \
    --queries "$WORK/s.queries.npy" --query-ids "$WORK/s.qids.txt" --out RUN
p1=$lpid
wait_for 20 $p1 grep -q "queries on" "$D/e1"
launch "$D/o2" "$D/e2" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=1500 -- "$SRCH" \
    --queries "$WORK/s.queries.npy" --query-ids "$WORK/s.qids.txt" --out RUN
p2=$lpid
wait_pid $p1 30
rc1=$wrc
wait_pid $p2 30
rc2=$wrc
case_begin A5 "two searches writing the same --out at once both succeed, the run is whole"
check "first: exit 0 (got $rc1: $(head -c 200 "$D/e1" | tail -n 1))" [ "$rc1" = 0 ]
check "second: exit 0 (got $rc2: $(tail -n 1 "$D/e2" | head -c 200))" [ "$rc2" = 0 ]
check "RUN is not a complete run of 200 queries x 10: $(wc -l <RUN 2>/dev/null) lines" \
    awk 'NF != 6 || $4 != ++r[$1] || $4 > 10 { exit 1 }
         END { n = 0; for (q in r) { if (r[q] != 10) exit 1; n++ } if (n != 200 || NR != 2000) exit 1 }' RUN
check "left:$(ls_glob RUN.tmp*)" gone RUN.tmp*
case_end

# ---------------------------------------------------------------- A6: signals
for sig in INT TERM HUP; do
    newcase a6-build-$sig
    launch "$O" "$E" LD_PRELOAD="$FI" TT_DELAY_PREAD_MS=50 -- "$BLD" --out sig
    p=$lpid
    inflight=""
    if wait_for 20 $p dir_glob 'sig.tmp-*'; then
        inflight=1
        kill -s $sig $p
    fi
    wait_pid $p 20
    rc=$wrc
    case_begin A6a-$sig "SIG$sig during a build leaves no temporary directory"
    check "the build ended before the signal (exit $rc)" [ -n "$inflight" ]
    check "the build was not stopped (exit $rc)" failed
    check "left:$(ls_glob sig.tmp-*)" gone sig.tmp-*
    check "sig exists" [ ! -e sig ]
    [ -z "$cfail" ] || stderr_note
    case_end
done

for sig in INT TERM HUP; do
    newcase a6-search-$sig
    printf 'the previous run\n' >run.trec
    # 3000 exhaustive queries (seconds), and then the rename sleeps 3 s.
    launch "$O" "$E" LD_PRELOAD="$FI" TT_DELAY_RENAME_MS=3000 -- "$SRCH" \
        --queries "$WORK/L.queries.npy" --out run.trec
    p=$lpid
    inflight=""
    if wait_for 20 $p grep -q "queries on" "$E"; then
        wait_for 1 $p exists_glob 'run.trec.tmp*' # at most 1 s: any moment of the search will do
        if kill -s $sig $p 2>/dev/null; then inflight=1; fi
    fi
    wait_pid $p 20
    rc=$wrc
    case_begin A6b-$sig "SIG$sig during a search leaves no temporary file, RUN unchanged"
    check "the search ended before the signal (exit $rc)" [ -n "$inflight" ]
    check "the search was not stopped (exit $rc)" failed
    check "left:$(ls_glob run.trec.tmp*)" gone run.trec.tmp*
    check "run.trec changed" [ "$(cat run.trec 2>/dev/null)" = "the previous run" ]
    [ -z "$cfail" ] || stderr_note
    case_end
done

# ---------------------------------------------------------------- A7: truncated residuals
for io in mmap uring; do
    newcase a7-$io
    cp -r "$WORK/Lidx" idx
    launch "$O" "$E" -- "$T" search --index idx --mode exhaustive --threads 1 --k 10 --io $io \
        --queries "$WORK/L.queries.npy" --out run.trec
    p=$lpid
    inflight=""
    if wait_for 20 $p grep -q "queries on" "$E"; then
        sleep 0.1
        kill -0 $p 2>/dev/null && inflight=1
        truncate -s $(($(stat -c %s idx/residuals.tt) / 2)) idx/residuals.tt
    fi
    wait_pid $p 30
    rc=$wrc
    case_begin A7-$io "residuals.tt truncated under a running --io $io search: exit 1 naming it"
    check "the search ended before the truncation (exit $rc)" [ -n "$inflight" ]
    check "exit 1 (got $rc$( [ "$rc" = 135 ] && echo ": SIGBUS"))" rc_is 1
    check "message does not name residuals.tt" err_has "residuals.tt"
    check "left:$(ls_glob run.trec.tmp*)" gone run.trec.tmp*
    [ -z "$cfail" ] || stderr_note
    case_end
done

# ---------------------------------------------------------------- A8: --out a regular file
newcase a8
for force in "" --force; do
    echo hi >f
    t0=$(date +%s%N)
    # with reads slowed to 200 ms, training would take more than a minute
    run 5 "$O" "$E" LD_PRELOAD="$FI" TT_DELAY_PREAD_MS=200 -- "$BLD" --out "$D/f" $force
    t1=$(date +%s%N)
    ms=$(((t1 - t0) / 1000000))
    case_begin "A8${force:+-force}" "build --out FILE${force:+ --force} is refused before training"
    check "exit 1 (got $rc)" rc_is 1
    check "message does not name $D/f" err_hasF "$D/f"
    check "no 'not a directory' in the message" err_has "not a directory"
    check "took $ms ms (limit 2000)" [ "$ms" -lt 2000 ]
    check "f changed" [ "$(cat f 2>/dev/null)" = hi ]
    check "left:$(ls_glob f.tmp-*)" gone f.tmp-*
    [ -z "$cfail" ] || stderr_note
    case_end
    rm -rf f f.tmp-*
done

# ---------------------------------------------------------------- B15: --out "" and a missing parent
newcase b15
run 30 "$O" "$E" -- "$BLD" --out ""
case_begin B15-out-empty "build --out '' is a usage error"
check "exit 2 (got $rc)" rc_is 2
[ -z "$cfail" ] || stderr_note
case_end
run 30 "$O" "$E" -- "$BLD" --out "$WORK/missing/a/b"
case_begin B15-out-parent "build --out with a missing parent names the parent"
check "exit 1 (got $rc)" rc_is 1
check "message does not name $WORK/missing/a" err_hasF "$WORK/missing/a"
check "no 'No such file or directory'" err_has "No such file or directory"
check "message names the temporary directory" eval '! grep -q -- ".tmp-" "$E"'
check "$WORK/missing created" [ ! -e "$WORK/missing" ]
[ -z "$cfail" ] || stderr_note
case_end

cd "$WORK/.." || exit 1
finish

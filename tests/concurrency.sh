#!/bin/sh
# Several processes on the same index files return exactly the serial results (the
# run files are byte-identical: scores print with the digits that read back to the
# same float), in every mode and I/O path; and searches that run while `build
# --force` replaces the index get the old index's results or the new one's -- never
# a mix -- or a clear error naming a file. Threads within one process:
# tests/test_concurrency.c.
. "${TT_SRCDIR:-.}/tests/lib.sh"
"$SYNTH" --out "$WORK/a" --docs 1500 --doclen 8-24 --dim 64 --queries 30 --qlen 6 --seed 8 \
    >/dev/null 2>&1
"$SYNTH" --out "$WORK/b" --docs 900 --doclen 8-24 --dim 64 --queries 30 --qlen 6 --seed 9 \
    >/dev/null 2>&1
IDX="$WORK/idx"
build() { # corpus
    "$T" build --vectors "$WORK/$1.vectors.npy" --doclens "$WORK/$1.doclens.npy" \
        --ids "$WORK/$1.ids.txt" --out "$IDX" --centroids 128 --threads 2 --force \
        --keep-originals f16 --no-tune
}
search() { # out-file [options]: the queries of corpus a, top 20
    o=$1; shift
    "$T" search --index "$IDX" --queries "$WORK/a.queries.npy" --query-ids "$WORK/a.qids.txt" \
        --k 20 --out "$o" "$@"
}
build a >/dev/null 2>&1 || { bad "build"; finish; }
for m in plaid exhaustive exact; do
    search "$WORK/ref-$m.run" --mode $m --threads 1 --io mmap 2>"$WORK/err" \
        || bad "serial search $m: $(cat "$WORK/err")"
done

# 1. Eight processes at once, each on 2 threads, every mode and both I/O paths.
pids=""
n=0
for m in plaid exhaustive exact; do
    for io in uring mmap; do
        n=$((n + 1))
        search "$WORK/p$n-$m.run" --mode $m --io $io --threads 2 2>"$WORK/p$n.err" &
        pids="$pids $!"
    done
done
for extra in "--mode plaid --threads 3" "--mode exhaustive --threads 3 --io uring --direct"; do
    n=$((n + 1))
    m=$(echo "$extra" | sed 's/--mode \([a-z]*\).*/\1/')
    # shellcheck disable=SC2086
    search "$WORK/p$n-$m.run" $extra 2>"$WORK/p$n.err" &
    pids="$pids $!"
done
failed=0
for p in $pids; do wait "$p" || failed=$((failed + 1)); done
[ $failed = 0 ] && ok "$n concurrent search processes succeed" \
    || bad "$failed of $n concurrent searches failed: $(cat "$WORK"/p*.err | grep error | head -n 3)"
same=0
for f in "$WORK"/p*-*.run; do
    m=${f##*-}; m=${m%.run}
    if cmp -s "$f" "$WORK/ref-$m.run"; then
        same=$((same + 1))
    else
        bad "$(basename "$f") differs from the serial $m run"
    fi
done
[ $same = $n ] && ok "all $n concurrent runs equal the serial runs byte for byte"

# 2. Searches while the index is replaced: the index at the path is always complete,
# and a search that opened one index keeps reading it (its files stay open/mapped).
build b >/dev/null 2>&1
search "$WORK/ref-b.run" --mode exhaustive --io mmap 2>/dev/null || bad "serial search of b"
build a >/dev/null 2>&1
search "$WORK/ref-a.run" --mode exhaustive --io mmap 2>/dev/null || bad "serial search of a"
(for c in b a b a; do build $c >/dev/null 2>&1 || echo "build $c failed"; done) >"$WORK/builds" &
bpid=$!
runs=0; good=0; errs=0; wrong=0
while kill -0 $bpid 2>/dev/null && [ $runs -lt 200 ]; do
    runs=$((runs + 1))
    if search "$WORK/during.run" --mode exhaustive --threads 2 >/dev/null 2>"$WORK/during.err"; then
        if cmp -s "$WORK/during.run" "$WORK/ref-a.run" || cmp -s "$WORK/during.run" "$WORK/ref-b.run"; then
            good=$((good + 1))
        else
            wrong=$((wrong + 1)); cp "$WORK/during.run" "$WORK/wrong.run"
        fi
    elif [ $? = 1 ] && grep -q "error: .*/[a-zA-Z_.]*" "$WORK/during.err"; then
        errs=$((errs + 1)); cp "$WORK/during.err" "$WORK/last.err"
    else
        wrong=$((wrong + 1)); cp "$WORK/during.err" "$WORK/wrong.err"
    fi
done
wait $bpid
[ -s "$WORK/builds" ] && bad "concurrent builds: $(cat "$WORK/builds")"
echo "# $runs searches during 4 rebuilds: $good with the old or new results, $errs clean errors"
[ $errs = 0 ] || echo "# last error: $(head -c 300 "$WORK/last.err")"
if [ $wrong = 0 ] && [ $good -gt 0 ]; then
    ok "searches during rebuilds: $good complete results, $errs clean errors, none mixed"
else
    bad "searches during rebuilds: $wrong wrong, $good good, $errs errors"
fi
"$T" verify "$IDX" >/dev/null 2>&1 && ok "index verifies after the rebuilds" || bad "verify after rebuilds"
finish

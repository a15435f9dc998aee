#!/bin/sh
# Token pooling from the command line (doc/pooling.md): build --pool-factor (1 is the
# build without it, file for file; the same index on any number of threads), what info
# and info --json say before and after pooling, add with the index's factor, another one
# or none, compaction keeping pooled vectors, search over a pooled index, and usage errors
# for bad factors.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }

"$SYNTH" --out "$WORK/c" --docs 300 --doclen 1-40 --dim 32 --queries 10 --qlen 4 2>/dev/null
"$SYNTH" --out "$WORK/a" --docs 40 --doclen 1-30 --dim 32 --queries 1 --seed 9 2>/dev/null
V="$WORK/c.vectors.npy"; L="$WORK/c.doclens.npy"
# --no-tune: the comparisons below are file by file, and a calibration chosen by measured
# time is not (tests/cli_tune.sh covers it).
b() { "$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 --no-tune "$@"; }
# j DIR EXPR: EXPR of `tartan info --json DIR` as j
j() { "$T" info --json "$1" | "$PY" -c "import json, sys
j = json.load(sys.stdin)
print($2)"; }
# same_index A B: every file the same, but meta.tt's moment and threads
same_index() {
    for f in "$1"/*; do
        n=$(basename "$f")
        if [ "$n" = meta.tt ]; then
            tail -c +65 "$1/meta.tt" | grep -v '^created=\|^build_seconds=\|^threads=' >"$WORK/m1"
            tail -c +65 "$2/meta.tt" | grep -v '^created=\|^build_seconds=\|^threads=' >"$WORK/m2"
            cmp -s "$WORK/m1" "$WORK/m2" || return 1
        elif [ "$n" != MANIFEST ]; then
            cmp -s "$f" "$2/$n" || return 1
        fi
    done
    [ "$(ls "$1" | wc -l)" = "$(ls "$2" | wc -l)" ]
}
N=$("$PY" -c "import numpy; print(int(numpy.load('$L').sum()))")
K=$("$PY" -c "import numpy; print(int(sum(max(1, int(n) // 2) for n in numpy.load('$L'))))")

# factor 1 is no pooling
expect_ok "build without --pool-factor" b --out "$WORK/plain" --threads 2
expect_ok "build --pool-factor 1" b --out "$WORK/plain1" --threads 2 --pool-factor 1
same_index "$WORK/plain" "$WORK/plain1" && ok "--pool-factor 1 writes the index without pooling" \
    || bad "--pool-factor 1 differs from no pooling"
"$T" info "$WORK/plain" | grep -q "^pooling *none (factor 1)" && ok "info: not pooled" \
    || bad "info of an unpooled index: $("$T" info "$WORK/plain" | grep pooling)"

# factor 2
expect_ok "build --pool-factor 2" b --out "$WORK/p2" --threads 2 --pool-factor 2
grep -q "300 documents, $K vectors (pooled by 2 from $N)" "$WORK/out" && ok "build summary" \
    || bad "build summary: $(head -1 "$WORK/out")"
expect_ok "build --pool-factor 2 on one thread" b --out "$WORK/p2t1" --threads 1 --pool-factor 2
same_index "$WORK/p2" "$WORK/p2t1" && ok "the same pooled index on 1 and 2 threads" \
    || bad "pooled builds differ with the thread count"
[ -f "$WORK/p2/inlens.tt" ] && ok "inlens.tt written" || bad "no inlens.tt"
expect_ok "verify" "$T" verify "$WORK/p2"
"$T" info "$WORK/p2" >"$WORK/info"
grep -q "^pooling *factor 2 (tartan add's default): $N vectors before, $K after" "$WORK/info" \
    && grep -q "^vectors *$K " "$WORK/info" \
    && grep -q "smaller than the float16 vectors before pooling" "$WORK/info" \
    && ok "info: before and after" || bad "info: $(grep -A1 '^vectors\|^pooling' "$WORK/info")"
[ "$(j "$WORK/p2" '"%d %d %d" % (j["pool_factor"], j["input_vectors"], j["num_vectors"])')" = "2 $N $K" ] \
    && [ "$(j "$WORK/p2" 'round(j["ratio_input_f16"] / j["ratio_f16"], 2) == round(j["input_vectors"] / j["num_vectors"], 2)')" = True ] \
    && ok "info --json: pool_factor, input_vectors, ratio_input_f16" \
    || bad "info --json: $(j "$WORK/p2" 'j["pool_factor"], j["input_vectors"], j["num_vectors"]')"
expect_ok "search a pooled index" "$T" search --index "$WORK/p2" --queries "$WORK/c.queries.npy" \
    --query-ids "$WORK/c.qids.txt" --k 10 --mode exhaustive --out "$WORK/p2.run"
[ "$(wc -l <"$WORK/p2.run")" -eq 100 ] && ok "10 hits per query" || bad "run: $(wc -l <"$WORK/p2.run") lines"

# add: the index's factor, none, another; then compaction
A="--vectors $WORK/a.vectors.npy --doclens $WORK/a.doclens.npy"
NA=$("$PY" -c "import numpy; print(int(numpy.load('$WORK/a.doclens.npy').sum()))")
KA() { "$PY" -c "import numpy; print(int(sum(max(1, int(n) // $1) for n in numpy.load('$WORK/a.doclens.npy'))))"; }
expect_ok "add (the index's factor)" "$T" add --index "$WORK/p2" $A
grep -q "($NA vectors pooled by 2 to $(KA 2))" "$WORK/out" && ok "add pools with the index's factor" \
    || bad "add: $(head -1 "$WORK/out")"
expect_ok "add --pool-factor 1" "$T" add --index "$WORK/p2" $A --pool-factor 1
grep -q "($NA vectors)" "$WORK/out" && ok "add --pool-factor 1 does not pool" || bad "add 1: $(head -1 "$WORK/out")"
expect_ok "add --pool-factor 3" "$T" add --index "$WORK/p2" $A --pool-factor 3
grep -q "($NA vectors pooled by 3 to $(KA 3))" "$WORK/out" && ok "add --pool-factor 3" \
    || bad "add 3: $(head -1 "$WORK/out")"
TOT=$((K + $(KA 2) + NA + $(KA 3)))
TIN=$((N + 3 * NA))
[ "$(j "$WORK/p2" '"%d %d %d" % (j["pool_factor"], j["input_vectors"], j["num_vectors"])')" = "2 $TIN $TOT" ] \
    && ok "info counts every segment" || bad "info after adds: $(j "$WORK/p2" 'j["input_vectors"], j["num_vectors"]')"
expect_ok "compact" "$T" compact --index "$WORK/p2"
[ "$(j "$WORK/p2" '"%d %d %d %d" % (j["pool_factor"], j["input_vectors"], j["num_vectors"], len(j["segments"]))')" = "2 $TIN $TOT 1" ] \
    && ok "compaction keeps the pooled vectors and the counts before pooling" \
    || bad "after compact: $(j "$WORK/p2" 'j["input_vectors"], j["num_vectors"]')"
expect_ok "verify after compaction" "$T" verify "$WORK/p2"

# usage errors: exit 2, a clear message, nothing built
for f in 0 -1 abc 2.5 ""; do
    b --out "$WORK/bad" --pool-factor "$f" >"$WORK/out" 2>"$WORK/err"; rc=$?
    if [ $rc -eq 2 ] && grep -q -- "--pool-factor must be a whole number >= 1" "$WORK/err" \
        && [ ! -e "$WORK/bad" ]; then
        ok "build --pool-factor '$f' is a usage error"
    else
        bad "build --pool-factor '$f': exit $rc, $(cat "$WORK/err")"
    fi
    "$T" add --index "$WORK/plain" $A --pool-factor "$f" >"$WORK/out" 2>"$WORK/err"; rc=$?
    if [ $rc -eq 2 ] && grep -q -- "--pool-factor must be a whole number >= 1" "$WORK/err"; then
        ok "add --pool-factor '$f' is a usage error"
    else
        bad "add --pool-factor '$f': exit $rc, $(cat "$WORK/err")"
    fi
done
"$T" build --help | grep -q -- "--pool-factor F" && "$T" add --help | grep -q -- "--pool-factor F" \
    && ok "--help documents --pool-factor" || bad "--help without --pool-factor"

# One cut for the whole collection (--pool-global F): about N/F vectors kept, the cut's
# height stored; the same index on any number of threads; tartan add cuts new documents
# at that height, so the collection added again under new ids keeps as many vectors.
expect_ok "build --pool-global 2" b --out "$WORK/g2" --threads 2 --pool-global 2
expect_ok "build --pool-global 2, one thread" b --out "$WORK/g2t1" --threads 1 --pool-global 2
same_index "$WORK/g2" "$WORK/g2t1" && ok "--pool-global: the same index on 1 and 2 threads" \
    || bad "--pool-global: 1 and 2 threads differ"
G=$(j "$WORK/g2" 'j["num_vectors"]')
[ "$(j "$WORK/g2" 'j["pool_global"] == 2 and j["pool_threshold"] > 0 and j["pool_factor"] == 1 and j["input_vectors"] == '"$N"' and abs(j["num_vectors"] - '"$N"' / 2) <= 0.05 * '"$N"' / 2')" = True ] \
    && ok "info --json: pool_global, pool_threshold, about N/2 vectors kept" \
    || bad "--pool-global info: $(j "$WORK/g2" 'j["pool_global"], j["pool_threshold"], j["num_vectors"]'), N $N"
"$T" info "$WORK/g2" | grep -q "pooling      one cut at height" && ok "info: the cut" \
    || bad "info: $("$T" info "$WORK/g2" | grep pooling)"
"$PY" -c "import numpy; print('\n'.join('n%d' % i for i in range(len(numpy.load('$L')))))" \
    >"$WORK/new.ids.txt"
expect_ok "add the collection again (the index's cut)" "$T" add --index "$WORK/g2" \
    --vectors "$V" --doclens "$L" --ids "$WORK/new.ids.txt"
grep -q "($N vectors pooled by the index's cut at .* to $G)" "$WORK/out" \
    && ok "add cuts at the index's height: as many vectors as the build kept" \
    || bad "add with the cut: $(head -1 "$WORK/out") (build kept $G)"
expect_ok "search the globally pooled index" "$T" search --index "$WORK/g2" \
    --queries "$WORK/c.queries.npy" --k 10 --mode exhaustive --out "$WORK/g2.run"
for f in 1 0.5 x -3 nan; do
    "$T" build --vectors "$V" --doclens "$L" --out "$WORK/gbad" --pool-global "$f" \
        >"$WORK/out" 2>"$WORK/err"; rc=$?
    [ "$rc" = 2 ] && grep -q -- "--pool-global" "$WORK/err" && [ ! -e "$WORK/gbad" ] \
        && ok "--pool-global '$f' is a usage error" || bad "--pool-global '$f': exit $rc, $(cat "$WORK/err")"
done
expect_fail "--pool-global with --pool-factor" "not both" b --out "$WORK/gbad" --pool-global 2 \
    --pool-factor 2
finish

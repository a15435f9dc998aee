#!/bin/sh
# tartan reshard (doc/scale.md): a sharded or plain index re-partitioned without
# re-encoding. Checked against independent builds: exhaustive runs equal the plain
# index's for every shard count; PLAID runs equal those of an index built with the same
# layout (1 shard: the plain build without calibration, file for file; 3 shards: the
# sharded build); deleted documents are left out; metadata follows the documents (--where
# runs equal the source's), and so do calibrations (tune.tt); the source is never
# changed; an
# existing --out is refused (with --force only an index is replaced); a damaged source
# fails naming the file, and nothing is published.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }
"$SYNTH" --out "$WORK/c" --docs 300 --doclen 1-30 --dim 32 --queries 23 --qlen 4 2>/dev/null
B="--vectors $WORK/c.vectors.npy --doclens $WORK/c.doclens.npy --ids $WORK/c.ids.txt --centroids 32"
"$T" build $B --no-tune --out "$WORK/p" >/dev/null 2>&1 || bad "build"
"$T" build $B --shards 3 --out "$WORK/sh" >/dev/null 2>&1 || bad "build --shards 3"
tree_sum() { (cd "$1" && find . -type f | sort | xargs md5sum) | md5sum; }
before=$(tree_sum "$WORK/sh")
run() { # INDEX MODE OUT
    "$T" search --index "$1" --queries "$WORK/c.queries.npy" --query-ids "$WORK/c.qids.txt" \
        --k 15 --mode "$2" --out "$3" 2>/dev/null
}
for s in 1 2 3 5; do
    expect_ok "reshard 3 shards into $s" "$T" reshard --index "$WORK/sh" --shards $s --out "$WORK/r$s"
    expect_ok "... which verifies" "$T" verify "$WORK/r$s"
done
expect_ok "reshard the plain index into 3" "$T" reshard --index "$WORK/p" --shards 3 --out "$WORK/p3"
expect_ok "reshard 5 shards into 2" "$T" reshard --index "$WORK/r5" --shards 2 --out "$WORK/r52"
[ "$(tree_sum "$WORK/sh")" = "$before" ] && ok "the source is unchanged" || bad "source changed"
run "$WORK/p" exhaustive "$WORK/ref.ex"
for i in sh r1 r2 r3 r5 p3 r52; do
    run "$WORK/$i" exhaustive "$WORK/$i.ex"
    cmp -s "$WORK/ref.ex" "$WORK/$i.ex" && ok "$i: exhaustive run = the plain index's" \
        || bad "$i: exhaustive run differs"
done
# 1 shard is the plain build, file for file (but meta.tt and MANIFEST)
same=1
for f in centroids.tt codec.tt codes.tt residuals.tt doclens.tt ids.tt idmap.tt ivf.tt; do
    cmp -s "$WORK/p/$f" "$WORK/r1/$f" || { same=0; bad "1 shard: $f differs from the plain build's"; }
done
[ $same = 1 ] && ok "1 shard: the plain build's codebook, codes, residuals, IVF and ids"
run "$WORK/p" plaid "$WORK/p.pl"; run "$WORK/r1" plaid "$WORK/r1.pl"
cmp -s "$WORK/p.pl" "$WORK/r1.pl" && ok "1 shard: PLAID run = the plain build's" || bad "1 shard: PLAID differs"
run "$WORK/sh" plaid "$WORK/sh.pl"
for i in r3 p3; do
    run "$WORK/$i" plaid "$WORK/$i.pl"
    cmp -s "$WORK/sh.pl" "$WORK/$i.pl" && ok "$i: PLAID run = the 3-shard build's" \
        || bad "$i: PLAID run differs from the 3-shard build's"
done
# per-vector residual scales (vscale.tt) go with their vectors: reshards of a sharded
# --vector-scale build search as the plain build does, and 1 shard has its file
"$T" build $B --codec adaptive --vector-scale --no-tune --out "$WORK/v" >/dev/null 2>&1 || bad "build --vector-scale"
"$T" build $B --codec adaptive --vector-scale --shards 3 --out "$WORK/vs" >/dev/null 2>&1 || bad "build --vector-scale --shards 3"
run "$WORK/v" exhaustive "$WORK/v.ex"
for s in 1 2; do
    expect_ok "reshard a --vector-scale index into $s" "$T" reshard --index "$WORK/vs" --shards $s --out "$WORK/vs$s"
    expect_ok "... which verifies" "$T" verify "$WORK/vs$s"
    run "$WORK/vs$s" exhaustive "$WORK/vs$s.ex"
    cmp -s "$WORK/v.ex" "$WORK/vs$s.ex" && ok "vs$s: exhaustive run = the plain --vector-scale build's" \
        || bad "vs$s: exhaustive run differs"
done
cmp -s "$WORK/v/vscale.tt" "$WORK/vs1/vscale.tt" && ok "1 shard: the plain build's residual scales" \
    || bad "1 shard: vscale.tt differs from the plain build's"
cmp -s "$WORK/v.ex" "$WORK/ref.ex" && bad "--vector-scale changed no score" || ok "--vector-scale scores differ from the default's"
# deleted documents are left out
cp -r "$WORK/p" "$WORK/pd"
head -40 "$WORK/c.ids.txt" | tail -7 >"$WORK/del.txt"
"$T" delete --index "$WORK/pd" --ids "$WORK/del.txt" >/dev/null 2>&1 || bad "delete"
expect_ok "reshard an index with deletions" "$T" reshard --index "$WORK/pd" --shards 2 --out "$WORK/pd2"
run "$WORK/pd" exhaustive "$WORK/pd.ex"; run "$WORK/pd2" exhaustive "$WORK/pd2.ex"
"$T" info "$WORK/pd2" >"$WORK/info" 2>&1
cmp -s "$WORK/pd.ex" "$WORK/pd2.ex" && ! grep -q -F -f "$WORK/del.txt" "$WORK/pd2.ex" \
    && grep -q "293" "$WORK/info" && ok "live documents only (293 of 300)" \
    || bad "deleted documents: runs differ or count wrong"
# metadata follows the documents: each new shard gets its rows' part (deleted documents
# left out; a column only some rows have, merged): --where runs with --with-metadata
# equal the source's
"$PY" - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
with open(w + "/m.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"year": 1990 + (i * 7) % 31, "lang": ["en", "de", "fr"][i % 3],
                            "score": i / 7}) + "\n")
PY
"$T" build $B --metadata "$WORK/m.jsonl" --shards 3 --out "$WORK/shm" >/dev/null 2>&1 || bad "build --metadata --shards 3"
"$T" build $B --metadata "$WORK/m.jsonl" --no-tune --out "$WORK/pm" >/dev/null 2>&1 || bad "build --metadata"
"$T" delete --index "$WORK/pm" --ids "$WORK/del.txt" >/dev/null 2>&1 || bad "delete"
"$PY" - "$WORK" <<'PY'
import numpy as np, sys
w = sys.argv[1]
v = np.load(w + "/c.vectors.npy"); d = np.load(w + "/c.doclens.npy")
np.save(w + "/a.vectors.npy", v[:int(d[:5].sum())]); np.save(w + "/a.doclens.npy", d[:5])
open(w + "/a.ids.txt", "w").write("".join("new%d\n" % i for i in range(5)))
open(w + "/a.jsonl", "w").write("".join('{"year": 2030, "extra": "x%d"}\n' % i for i in range(5)))
PY
"$T" add --index "$WORK/pm" --vectors "$WORK/a.vectors.npy" --doclens "$WORK/a.doclens.npy" \
    --ids "$WORK/a.ids.txt" --metadata "$WORK/a.jsonl" >/dev/null 2>&1 || bad "add --metadata"
cat >"$WORK/near.py" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(f)] for f in sys.argv[1:3])
assert len(a) == len(b)
for x, y in zip(a, b):
    assert x["qid"] == y["qid"] and len(x["results"]) == len(y["results"])
    ka = {r["docid"]: r for r in x["results"]}; kb = {r["docid"]: r for r in y["results"]}
    sa = sorted(r["score"] for r in x["results"]); sb = sorted(r["score"] for r in y["results"])
    assert all(abs(u - v) <= 1e-5 * max(1, abs(u)) for u, v in zip(sa, sb))
    for d in set(ka) & set(kb):
        assert ka[d]["metadata"] == kb[d]["metadata"], d
    assert len(set(ka) ^ set(kb)) <= 2  # a document at the cut may give way to its duplicate
PY
for x in "shm 2" "shm 1" "pm 3"; do
    set -- $x
    "$T" reshard --index "$WORK/$1" --shards $2 --out "$WORK/$1.$2" >"$WORK/log" 2>&1 \
        && "$T" verify "$WORK/$1.$2" >/dev/null 2>&1 || bad "reshard $1 into $2 ($(cat "$WORK/log"))"
    for wh in "year > 2005 AND lang <> 'de'" "score < 20 OR extra IS NOT NULL"; do
        [ $1 = shm ] && [ "${wh#*extra}" != "$wh" ] && continue
        for i in "$1" "$1.$2"; do
            "$T" search --index "$WORK/$i" --queries "$WORK/c.queries.npy" --mode exhaustive --k 20 \
                --where "$wh" --json --with-metadata --out "$WORK/$i.w" 2>/dev/null
        done
        # (pm: the added documents repeat documents 0-4, so their scores tie, and filtered
        # exhaustive scores can differ in the last bits: compared with a tolerance)
        [ -s "$WORK/$1.w" ] && { cmp -s "$WORK/$1.w" "$WORK/$1.$2.w" || { [ $1 = pm ] && \
            "$PY" "$WORK/near.py" "$WORK/$1.w" "$WORK/$1.$2.w"; }; } \
            && ok "reshard $1 into $2: --where \"$wh\" with metadata = the source's" \
            || bad "reshard $1 into $2: --where \"$wh\" differs"
    done
done
grep -q '"extra":"x3"' "$WORK/pm.3.w" && ok "... the added documents' own column carried" \
    || bad "added documents' column lost"

# calibrations follow too: each new shard gets the tune.tt of the source part holding
# most of its documents; searches then use the source's calibrated parameters
"$T" build $B --out "$WORK/pt" >/dev/null 2>&1 || bad "build (calibrated)"
for s in 1 2; do
    "$T" reshard --index "$WORK/pt" --shards $s --out "$WORK/pt$s" >/dev/null 2>&1 || bad "reshard pt"
done
for i in pt pt1 pt2; do
    "$T" search --index "$WORK/$i" --queries "$WORK/c.queries.npy" --k 10 --out "$WORK/$i.pl" \
        2>"$WORK/$i.err"
    sed -n 's/.*; \(\(plaid\|exhaustive\) k=.*\)); residuals.*/\1/p' "$WORK/$i.err" | head -1 \
        >"$WORK/$i.par"
done
grep -q "calibrated for k=10" "$WORK/pt.par" && cmp -s "$WORK/pt.par" "$WORK/pt1.par" \
    && cmp -s "$WORK/pt.par" "$WORK/pt2.par" && cmp -s "$WORK/pt.pl" "$WORK/pt1.pl" \
    && [ -e "$WORK/pt2/shard-0001/tune.tt" ] \
    && ok "tune.tt carried: the source's calibrated parameters, the same run (1 shard)" \
    || bad "calibration not carried ($(cat "$WORK/pt.par" "$WORK/pt2.par"))"

# publishing: never over something that exists unless --force, and then only an index
expect_fail "existing --out refused" "already exists" \
    "$T" reshard --index "$WORK/sh" --shards 2 --out "$WORK/r2"
mkdir "$WORK/mine"; echo keep >"$WORK/mine/notes.txt"
expect_fail "--force over a directory of other files refused" "not a tartan index" \
    "$T" reshard --index "$WORK/sh" --shards 1 --out "$WORK/mine" --force
[ "$(cat "$WORK/mine/notes.txt")" = keep ] && ok "... and its file is untouched" || bad "notes.txt lost"
expect_ok "a plain index to replace" \
    "$T" reshard --index "$WORK/sh" --shards 1 --out "$WORK/p3x" 
expect_ok "--force over an index replaces it" "$T" reshard --index "$WORK/sh" --shards 1 --out "$WORK/p3x" --force
expect_fail "the source as --out refused" "is the source" \
    "$T" reshard --index "$WORK/p" --shards 1 --out "$WORK/p" --force
"$T" reshard --index "$WORK/sh" --shards 0 --out "$WORK/z" 2>"$WORK/err"
[ $? -eq 2 ] && grep -q "shards must be" "$WORK/err" && ok "--shards 0: a usage error" \
    || bad "--shards 0 accepted"
expect_fail "more shards than documents refused" "live documents for" \
    "$T" reshard --index "$WORK/sh" --shards 400 --out "$WORK/z"
# a damaged source: the file is named, nothing is published
cp -r "$WORK/sh" "$WORK/bad"
res="$WORK/bad/shard-0001/residuals.tt"
head -c $(($(wc -c <"$res") - 100)) "$res" >"$WORK/t" && mv "$WORK/t" "$res"
expect_fail "truncated residuals: named" "shard-0001/residuals.tt" \
    "$T" reshard --index "$WORK/bad" --shards 2 --out "$WORK/z"
[ ! -e "$WORK/z" ] && [ -z "$(ls "$WORK" | grep '^z')" ] && ok "... nothing published or left" \
    || bad "left: $(ls "$WORK" | grep '^z')"
rm -rf "$WORK/bad"; cp -r "$WORK/sh" "$WORK/bad"
codes="$WORK/bad/shard-0002/codes.tt"
printf '\377\377' | dd of="$codes" bs=1 seek=70 conv=notrunc 2>/dev/null
expect_fail "damaged codes: named" "shard-0002/codes.tt" \
    "$T" reshard --index "$WORK/bad" --shards 2 --out "$WORK/z"
rm "$WORK/bad/SHARDS"
expect_ok "a shard alone (a plain index) reshards" \
    "$T" reshard --index "$WORK/sh/shard-0000" --shards 2 --out "$WORK/one"
finish

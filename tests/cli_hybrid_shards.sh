#!/bin/sh
# Sparse postings in sharded indexes (doc/search.md, "Sharded indexes"): a sharded build
# with --bm25, --sparse (string terms) or term ids with a vocabulary writes each shard's
# postings; sparse and hybrid search over it use the whole collection's BM25 statistics
# and the whole set's quantization scales, so the run files must be IDENTICAL to those of
# the unsharded index of the same documents (hybrid with the exhaustive dense mode,
# whose dense lists are the unsharded ones too, up to float rounding: see close()),
# with and without a filter. tartan
# reshard carries the postings: runs over the resharded index equal the source's.
. "${TT_SRCDIR:-.}/tests/lib.sh"
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder --dim 16"

"$PY" - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(23)
words = ["w%d" % i for i in range(60)]
def text(n):  # skewed: low word numbers are frequent
    return " ".join(words[min(59, int(rng.paretovariate(1.1) * 2))] for _ in range(n))
with open(w + "/c.jsonl", "w") as f, open(w + "/sp.jsonl", "w") as g, open(w + "/ids.jsonl", "w") as h:
    for i in range(157):
        f.write(json.dumps({"_id": "d%d" % i, "text": text(2 + rng.randrange(40))}) + "\n")
        t = {rng.choice(words): round(rng.uniform(0.05, 5.0), 3) for _ in range(1 + rng.randrange(15))}
        g.write(json.dumps({"id": "d%d" % i, "terms": t}) + "\n")
        h.write(json.dumps({"id": "d%d" % i, "term_ids": {k[1:]: v for k, v in t.items()}}) + "\n")
with open(w + "/q.jsonl", "w") as f, open(w + "/sq.jsonl", "w") as g:
    for q in range(25):
        f.write(json.dumps({"_id": "q%d" % q, "text": text(1 + rng.randrange(5))}) + "\n")
        t = {rng.choice(words): round(rng.uniform(0.5, 2.0), 2) for _ in range(1 + rng.randrange(5))}
        g.write(json.dumps({"id": "q%d" % q, "terms": t}) + "\n")
    f.write(json.dumps({"_id": "q25", "text": "nosuchword"}) + "\n")
with open(w + "/vocab.txt", "w") as f:
    f.write("".join(x + "\n" for x in words))
with open(w + "/keep.txt", "w") as f:
    f.write("".join("d%d\n" % i for i in range(157) if i % 3))
EOF

B() { "$T" build --encoder "$HASH" --corpus "$WORK/c.jsonl" --centroids 16 --threads 2 --no-tune "$@"; }
S() { "$T" search --encoder "$HASH" --queries "$WORK/q.jsonl" --k 100 "$@"; }
same() { # same NAME RUN1 RUN2: identical, non-empty run files
    if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1: identical runs ($(wc -l <"$2") lines)"
    else bad "$1: runs differ ($(cmp "$2" "$3" 2>&1 | head -1))"; fi
}
# close NAME RUN1 RUN2: runs with dense scores. A shard groups its documents otherwise
# than the unsharded index, and OpenBLAS's sgemm rounds a row by its place in the
# product on some CPUs (Zen with 8 or more query columns): the dense scores may differ
# in their last bits (doc/search.md, "Sharded indexes"). So per query the same number
# of hits, the scores equal within 1e-5 (relative) rank by rank, and the same documents
# but for ties within that at the cut.
close() {
    if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1: identical runs ($(wc -l <"$2") lines)"; return; fi
    if msg=$("$PY" "$TT_SRCDIR/tests/runs_close.py" "$2" "$3" 2>&1); then
        ok "$1: the same runs up to float rounding of the dense scores"
    else bad "$1: runs differ: $msg"; fi
}

# BM25
expect_ok "build --bm25" B --bm25 --out "$WORK/u"
expect_ok "build --bm25 --shards 3" B --bm25 --shards 3 --out "$WORK/s"
n=$(ls "$WORK"/s/shard-*/sparse.tt 2>/dev/null | wc -l)
[ "$n" -eq 3 ] && ok "every shard has its sparse.tt" || bad "shards with sparse.tt: $n"
expect_ok "verify a shard" "$T" verify "$WORK/s/shard-0001"
for m in "sparse" "hybrid --dense-mode exhaustive" \
         "hybrid --dense-mode exhaustive --fusion rrf" "hybrid --dense-mode exhaustive --alpha 0.2 --fusion-depth 30"; do
    rm -f "$WORK/u.run" "$WORK/s.run"
    # shellcheck disable=SC2086
    S --index "$WORK/u" --mode $m --out "$WORK/u.run" 2>"$WORK/err" &&
    "$T" search --encoder "$HASH" --queries "$WORK/q.jsonl" --k 100 --index "$WORK/s" --mode $m \
        --out "$WORK/s.run" 2>"$WORK/err" || { cat "$WORK/err"; bad "BM25 --mode $m: search failed"; }
    check=same
    [ "$m" = sparse ] || check=close
    $check "BM25 --mode $m, 3 shards vs unsharded" "$WORK/u.run" "$WORK/s.run"
done
grep -q '^q25 ' "$WORK/u.run" && ok "hybrid: the query without a known word still has dense hits" ||
    bad "q25 has no hybrid hits"
S --index "$WORK/u" --mode sparse --filter-ids "$WORK/keep.txt" --out "$WORK/u.run" 2>/dev/null
S --index "$WORK/s" --mode sparse --filter-ids "$WORK/keep.txt" --out "$WORK/s.run" 2>/dev/null
same "BM25 sparse with --filter-ids" "$WORK/u.run" "$WORK/s.run"
"$PY" - "$WORK/s.run" <<'EOF' && ok "filtered sharded run holds allowed documents only" || bad "a filtered-out document"
import sys
for l in open(sys.argv[1]):
    assert int(l.split()[2][1:]) % 3, l
EOF
S --index "$WORK/u" --mode hybrid --dense-mode exhaustive --filter-ids "$WORK/keep.txt" --out "$WORK/u.run" 2>/dev/null
S --index "$WORK/s" --mode hybrid --dense-mode exhaustive --filter-ids "$WORK/keep.txt" --out "$WORK/s.run" 2>/dev/null
close "BM25 hybrid with --filter-ids" "$WORK/u.run" "$WORK/s.run"

# precomputed weights (string terms): the shards quantize with the whole set's scales
expect_ok "build --sparse" B --sparse "$WORK/sp.jsonl" --out "$WORK/wu"
expect_ok "build --sparse --shards 4" B --sparse "$WORK/sp.jsonl" --shards 4 --out "$WORK/ws"
for m in "sparse" "hybrid --encoder HASH --dense-mode exhaustive"; do
    rm -f "$WORK/u.run" "$WORK/s.run"
    for x in wu ws; do
        # shellcheck disable=SC2086
        set -- $m
        [ "${2:-}" = "--encoder" ] && set -- "$1" --encoder "$HASH" --queries "$WORK/q.jsonl" --dense-mode exhaustive
        "$T" search --index "$WORK/$x" --mode "$@" --sparse-queries "$WORK/sq.jsonl" --k 100 \
            --out "$WORK/$x.run" 2>"$WORK/err" || { cat "$WORK/err"; bad "weights --mode $m: search failed"; }
    done
    check=same
    [ "$m" = sparse ] || check=close
    $check "weights --mode $m, 4 shards vs unsharded" "$WORK/wu.run" "$WORK/ws.run"
    rm -f "$WORK/wu.run" "$WORK/ws.run"
done

# term ids with a vocabulary: each shard stores it; string queries need no --vocab
expect_ok "build term ids --vocab --shards 2" B --sparse "$WORK/ids.jsonl" --vocab "$WORK/vocab.txt" \
    --shards 2 --out "$WORK/is"
[ -f "$WORK/is/shard-0000/vocab.tt" ] && [ -f "$WORK/is/shard-0001/vocab.tt" ] &&
    ok "every shard stores the vocabulary" || bad "a shard without vocab.tt"
"$T" search --index "$WORK/is" --mode sparse --sparse-queries "$WORK/sq.jsonl" --k 100 --out "$WORK/s.run" 2>/dev/null
"$T" search --index "$WORK/wu" --mode sparse --sparse-queries "$WORK/sq.jsonl" --k 100 --out "$WORK/u.run" 2>/dev/null
same "term ids (string queries via the stored vocabulary), 2 shards vs string terms unsharded" \
    "$WORK/u.run" "$WORK/s.run"

# tartan reshard of indexes with sparse postings (doc/scale.md): documents deleted from
# the source first (among them, for the weights, the holder of some term's largest
# weight, whose quantization scale a reshard must keep), then resharded into 1, 2 and 3
# shards from the plain and from the sharded index: every sparse run must be IDENTICAL
# to the source's, every hybrid run the same up to float rounding (close()).
"$PY" - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
best = {}
for l in open(w + "/sp.jsonl"):
    r = json.loads(l)
    for t, x in r["terms"].items():
        if t not in best or x > best[t][0]:
            best[t] = (x, r["id"])
dels = sorted(set(v[1] for v in best.values()))[:8] + ["d3", "d60", "d61", "d140"]
open(w + "/del.txt", "w").write("".join(d + "\n" for d in dels))
with open(w + "/sqi.jsonl", "w") as f:  # the sparse queries as integer term ids
    for l in open(w + "/sq.jsonl"):
        r = json.loads(l)
        f.write(json.dumps({"id": r["id"], "term_ids": {t[1:]: x for t, x in r["terms"].items()}}) + "\n")
EOF
del() { # del INDEX: the ids of del.txt deleted from it (each shard of a sharded one)
    if [ -f "$1/SHARDS" ]; then
        for d in "$1"/shard-*; do "$T" delete --index "$d" --ids "$WORK/del.txt" >/dev/null 2>&1; done
    else "$T" delete --index "$1" --ids "$WORK/del.txt" >/dev/null 2>&1; fi
}
for x in u s wu ws is; do del "$WORK/$x"; done
for src in u s wu ws; do
    for n in 1 2 3; do
        "$T" reshard --index "$WORK/$src" --shards $n --out "$WORK/$src-r$n" >/dev/null 2>"$WORK/err" ||
            { cat "$WORK/err"; bad "reshard $src into $n"; }
    done
done
[ -f "$WORK/s-r2/shard-0001/sparse.tt" ] && [ -f "$WORK/u-r1/sparse.tt" ] &&
    ok "resharded: every shard has its sparse.tt" || bad "a resharded shard without sparse.tt"
expect_ok "verify a resharded shard" "$T" verify "$WORK/ws-r3/shard-0002"
for m in "sparse" "hybrid" "hybrid --fusion rrf" "hybrid --alpha 0.3 --fusion-depth 40"; do
    for src in u s wu ws; do
        sq=""
        case $src in w*) sq="--sparse-queries $WORK/sq.jsonl" ;; esac
        kind=BM25
        [ -n "$sq" ] && kind=weights
        run() { # run INDEX OUT: the text queries through the encoder, but for sparse weights
            if [ "$m" = sparse ] && [ -n "$sq" ]; then
                # shellcheck disable=SC2086
                "$T" search --index "$1" --mode $m $sq --k 100 --out "$2" 2>/dev/null
            else
                # shellcheck disable=SC2086
                S --index "$1" --mode $m --dense-mode exhaustive $sq --out "$2" 2>/dev/null
            fi
        }
        run "$WORK/$src" "$WORK/src.run"
        for n in 1 2 3; do
            run "$WORK/$src-r$n" "$WORK/r.run"
            check=same
            [ "$m" = sparse ] || check=close
            $check "$kind --mode $m, $src with deletions resharded into $n" "$WORK/src.run" "$WORK/r.run"
            rm -f "$WORK/r.run"
        done
        rm -f "$WORK/src.run"
    done
done
# term ids with a stored vocabulary: kept by every new shard; queries of integer ids and
# of words (through the stored vocabulary) give the source's runs
expect_ok "reshard term ids with a vocabulary into 3" "$T" reshard --index "$WORK/is" --shards 3 --out "$WORK/is3"
[ -f "$WORK/is3/shard-0000/vocab.tt" ] && [ -f "$WORK/is3/shard-0002/vocab.tt" ] &&
    cmp -s "$WORK/is/shard-0000/vocab.tt" "$WORK/is3/shard-0002/vocab.tt" &&
    ok "every new shard stores the vocabulary" || bad "a resharded shard without the vocabulary"
for q in sqi sq; do
    "$T" search --index "$WORK/is" --mode sparse --sparse-queries "$WORK/$q.jsonl" --k 100 --out "$WORK/src.run" 2>/dev/null
    "$T" search --index "$WORK/is3" --mode sparse --sparse-queries "$WORK/$q.jsonl" --k 100 --out "$WORK/r.run" 2>"$WORK/err" ||
        { cat "$WORK/err"; bad "term ids: $q search failed"; }
    same "term ids ($q queries), resharded into 3" "$WORK/src.run" "$WORK/r.run"
    rm -f "$WORK/src.run" "$WORK/r.run"
done
echo '{"id": "x", "term_ids": {"60": 1}}' >"$WORK/q60.jsonl"
expect_fail "resharded: a term id past the stored vocabulary" "past" \
    "$T" search --index "$WORK/is3" --mode sparse --sparse-queries "$WORK/q60.jsonl" --out "$WORK/x.run"
# a damaged sparse.tt in the source: named, nothing published
cp -r "$WORK/ws" "$WORK/wbad"
"$PY" -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[-3]^=0x5a; open(p,'wb').write(b)" \
    "$WORK/wbad/shard-0001/sparse.tt"
expect_fail "reshard: a damaged sparse.tt named" "shard-0001/sparse.tt" \
    "$T" reshard --index "$WORK/wbad" --shards 2 --out "$WORK/wbad2"
[ ! -e "$WORK/wbad2" ] && ok "a failed reshard publishes nothing" || bad "a failed reshard left $WORK/wbad2"

# bad input
expect_fail "--mode sparse on a sharded index without postings" "no sparse postings" sh -c \
    "'$T' build --encoder '$HASH' --corpus '$WORK/c.jsonl' --centroids 16 --no-tune --shards 2 --out '$WORK/d' >/dev/null &&
     '$T' search --index '$WORK/d' --mode sparse --queries '$WORK/q.jsonl' --out '$WORK/x.run'"
finish

#!/bin/sh
# Sparse postings in sharded indexes (doc/search.md, "Sharded indexes"): a sharded build
# with --bm25, --sparse (string terms) or term ids with a vocabulary writes each shard's
# postings; sparse and hybrid search over it use the whole collection's BM25 statistics
# and the whole set's quantization scales, so the run files must be IDENTICAL to those of
# the unsharded index of the same documents (hybrid with the exhaustive dense mode,
# whose dense lists are the unsharded ones too), with and without a filter.
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
    same "BM25 --mode $m, 3 shards vs unsharded" "$WORK/u.run" "$WORK/s.run"
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
same "BM25 hybrid with --filter-ids" "$WORK/u.run" "$WORK/s.run"

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
    same "weights --mode $m, 4 shards vs unsharded" "$WORK/wu.run" "$WORK/ws.run"
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

# bad input
expect_fail "--mode sparse on a sharded index without postings" "no sparse postings" sh -c \
    "'$T' build --encoder '$HASH' --corpus '$WORK/c.jsonl' --centroids 16 --no-tune --shards 2 --out '$WORK/d' >/dev/null &&
     '$T' search --index '$WORK/d' --mode sparse --queries '$WORK/q.jsonl' --out '$WORK/x.run'"
finish

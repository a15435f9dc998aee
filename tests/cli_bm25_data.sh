#!/bin/sh
# tartan's BM25 (build --bm25, search --mode sparse, eval) on the shared collections
# reproduces ../shared/data/README.md's figures: nDCG@10 scifact 0.661, cranfield
# 0.328, cisi 0.296, within 0.003. The dense part is a tiny hash-encoder index (the
# sparse postings ride along with it). Skips without the data.
. "${TT_SRCDIR:-.}/tests/lib.sh"
DATA="${TT_DATA:-${TT_SRCDIR:-.}/../shared/data}"
[ -f "$DATA/scifact/corpus.jsonl" ] || { echo "no shared data: skip"; exit 77; }
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder --dim 16 --kind fixed --k 4"
for spec in scifact:0.661 cranfield:0.328 cisi:0.296; do
    c=${spec%%:*}; want=${spec#*:}
    expect_ok "$c: build --bm25" "$T" build --encoder "$HASH" --corpus "$DATA/$c/corpus.jsonl" \
        --bm25 --centroids 64 --kmeans-iters 1 --threads 2 --no-tune --out "$WORK/$c"
    expect_ok "$c: search --mode sparse" "$T" search --index "$WORK/$c" --mode sparse \
        --queries "$DATA/$c/queries.jsonl" --k 100 --out "$WORK/$c.run"
    got=$("$T" eval --qrels "$DATA/$c/qrels.trec" --run "$WORK/$c.run" --metrics nDCG@10 2>/dev/null \
        | awk '$1 == "nDCG@10" {print $2}')
    "$PY" -c "import sys; sys.exit(0 if abs(float('${got:-nan}') - $want) <= 0.003 else 1)" \
        && ok "$c: BM25 nDCG@10 $got (README: $want)" || bad "$c: BM25 nDCG@10 '$got', README $want"
done
finish

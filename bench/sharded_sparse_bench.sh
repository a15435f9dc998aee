#!/bin/sh
# Sparse and hybrid search over a sharded index against the unsharded index of the same
# documents, in the same run (doc/benchmarks.md, "Sparse postings in sharded indexes"):
# BM25 over SciFact's corpus, hash-encoder vectors, S shards; the latency of --mode
# sparse at k 10 and 1000 and of --mode hybrid (PLAID dense, fusion depth 1000) on one
# thread, with the run files compared (sparse: identical required).
#   bench/sharded_sparse_bench.sh BUILDDIR DATADIR WORK [SHARDS [REPS]]
set -eu
B=$1 D=$2 W=$3 S=${4:-4} R=${5:-3}
T="$B/tartan"
HASH="$B/tartan-hash-encoder --dim 64"
mkdir -p "$W"
[ -d "$W/u" ] || nice "$T" build --encoder "$HASH" --corpus "$D/corpus.jsonl" --bm25 --no-tune \
    --threads 2 --out "$W/u" >/dev/null
[ -d "$W/s" ] || nice "$T" build --encoder "$HASH" --corpus "$D/corpus.jsonl" --bm25 --no-tune \
    --threads 2 --shards "$S" --out "$W/s" >/dev/null
p50() { sed -n 's/.* p50 \([0-9.]*\) ms.*/\1/p' "$1"; }
echo "| mode | k | rep | unsharded p50 | $S shards p50 | ratio | runs |"
echo "|---|---:|---:|---:|---:|---:|---|"
for m in "sparse 10" "sparse 1000" "hybrid 10"; do
    set -- $m
    mode=$1 k=$2
    for rep in $(seq 1 "$R"); do
        for x in u s; do
            "$T" search --index "$W/$x" --mode "$mode" --encoder "$HASH" \
                --queries "$D/queries.jsonl" --k "$k" --threads 1 --out "$W/$x.run" 2>"$W/$x.err"
        done
        a=$(p50 "$W/u.err") b=$(p50 "$W/s.err")
        same=differ
        cmp -s "$W/u.run" "$W/s.run" && same=identical
        echo "| $mode | $k | $rep | $a ms | $b ms | $(echo "$b $a" | awk '{printf "%.2f", $1 / $2}') | $same |"
    done
done

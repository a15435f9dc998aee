#!/bin/sh
# Sparse and hybrid retrieval (doc/benchmarks.md, "Hybrid retrieval"): on each shared
# collection, one index (tartan-hash-encoder token vectors, dim 128, 2-bit PLAID + BM25
# postings), then in the same run
#   - BM25 top-10 and top-1000 latency and nDCG@10, against SQLite FTS5's bm25() ranking
#     (bench/sparse_fts5.py) on the same texts;
#   - BM25 with FTS5's parameters (k1 1.2, b 0.75), for equal footing;
#   - BM25 with every weight quantized to 8 bits (bench/sparse_quant.py: float impacts
#     -> tartan build --sparse): what the weight quantization loses;
#   - dense (PLAID), sparse, hybrid (min-max, alpha 0.5, depth 1000) and RRF: nDCG@10
#     and per-query latency, one search thread.
# Usage: bench/sparse_bench.sh [BUILD_DIR [DATA_DIR [WORK]]]
set -eu
B=${1:-.}
DATA=${2:-$(dirname "$0")/../../shared/data}
W=${3:-/tmp/tartan-sparse-bench}
HERE=$(cd "$(dirname "$0")" && pwd)
T="$B/tartan"
HASH="$B/tartan-hash-encoder --dim 128"
PY=/usr/bin/python3
mkdir -p "$W"
# lat LOG: "mean p50" (ms) from tartan search's summary
lat() { sed -n 's/.*latency mean \([0-9.]*\) ms, p50 \([0-9.]*\) ms.*/\1 \2/p' "$1"; }
ndcg() { "$T" eval --qrels "$1" --run "$2" --metrics nDCG@10 2>/dev/null | awk '$1 == "nDCG@10" {print $2}'; }
echo "| collection | run | nDCG@10 | mean ms | p50 ms |"
echo "|---|---|---:|---:|---:|"
for c in scifact cranfield cisi; do
    D="$DATA/$c"
    Q="$D/queries.jsonl"
    R="$D/qrels.trec"
    rm -rf "$W/$c.idx"
    "$T" build --encoder "$HASH" --corpus "$D/corpus.jsonl" --bm25 --threads 2 --out "$W/$c.idx" >/dev/null 2>&1
    s() { name=$1; shift; "$T" search --index "$W/$c.idx" --threads 1 --out "$W/$c.$name.run" "$@" 2>"$W/$c.$name.log"
          echo "| $c | $name | $(ndcg "$R" "$W/$c.$name.run") | $(lat "$W/$c.$name.log" | tr ' ' '|') |"; }
    s bm25-k10 --mode sparse --queries "$Q" --k 10
    s bm25-k1000 --mode sparse --queries "$Q" --k 1000
    s bm25-fts5params-k10 --mode sparse --queries "$Q" --k 10 --k1 1.2 --b 0.75
    for k in 10 1000; do
        set -- $("$PY" "$HERE/sparse_fts5.py" "$D/corpus.jsonl" "$Q" $k "$W/$c.fts5-k$k.run")
        echo "| $c | fts5-bm25-k$k | $(ndcg "$R" "$W/$c.fts5-k$k.run") | $1 | $2 |"
    done
    s dense-plaid-k10 --mode plaid --encoder "$HASH" --queries "$Q" --k 10
    s dense-plaid-k1000 --mode plaid --encoder "$HASH" --queries "$Q" --k 1000
    s hybrid-minmax-k10 --mode hybrid --encoder "$HASH" --queries "$Q" --k 10
    s hybrid-rrf-k10 --mode hybrid --fusion rrf --encoder "$HASH" --queries "$Q" --k 10
    s hybrid-minmax-depth100-k10 --mode hybrid --fusion-depth 100 --encoder "$HASH" --queries "$Q" --k 10
    # 8-bit weights: BM25 impacts precomputed as floats, quantized by tartan
    "$PY" "$HERE/sparse_quant.py" "$D/corpus.jsonl" "$Q" "$W/$c.imp.jsonl" "$W/$c.qimp.jsonl"
    rm -rf "$W/$c.q8.idx"
    "$T" build --encoder "$HASH" --corpus "$D/corpus.jsonl" --sparse "$W/$c.imp.jsonl" --threads 2 \
        --out "$W/$c.q8.idx" >/dev/null 2>&1
    "$T" search --index "$W/$c.q8.idx" --mode sparse --sparse-queries "$W/$c.qimp.jsonl" --k 10 \
        --out "$W/$c.q8.run" 2>"$W/$c.q8.log"
    echo "| $c | bm25-8bit-weights-k10 | $(ndcg "$R" "$W/$c.q8.run") | $(lat "$W/$c.q8.log" | tr ' ' '|') |"
done

#!/bin/sh
# How small can a 128-d index get within 0.01 nDCG@10 of exact? (doc/benchmarks.md,
# "Codec ceilings, third pass": scifact and cranfield through the hash encoder,
# ColBERTv2 NanoFiQA). For each variant NBITS:POOL:K builds an index with tartan build
# (--nbits NBITS --pool-factor POOL --centroids K, plus BUILD_ARGS), searches it
# exhaustively (decompressed MaxSim over every document) and with PLAID (PLAID ARGS),
# and compares nDCG@10 per query with exact MaxSim over the unpooled float16 vectors
# (paired two-sided t-test, bench/paired_t.py; '†' at p < 0.05).
#
#   sh bench/small_index.sh BUILD W PREFIX QPREFIX QRELS 'VARIANTS' ['PLAID ARGS']
#
# PREFIX.{vectors,doclens}.npy + PREFIX.ids.txt: documents (tartan encode output);
# QPREFIX.{vectors,doclens}.npy + QPREFIX.ids.txt: queries. The exact run is made once
# (W/NAME.exact.run, an index with --keep-originals f16 searched with --mode exact).
# Prints one Markdown row per variant: size (the whole index directory, without
# originals), x smaller than the float16 input vectors, nDCG@10 and difference and p
# for exhaustive and PLAID search.
set -eu
B=$1 W=$2 P=$3 QP=$4 QRELS=$5 VARIANTS=$6 PLAID=${7:-}
BUILD_ARGS=${BUILD_ARGS:-} THREADS=${THREADS:-2}
HERE=$(cd "$(dirname "$0")" && pwd)
NAME=$(basename "$P")
mkdir -p "$W"
Q="--queries $QP.vectors.npy --qlens $QP.doclens.npy --query-ids $QP.ids.txt --k 100 --threads $THREADS"
pq() { "$B/tartan" eval --qrels "$QRELS" --run "$1" --metrics nDCG@10 --per-query -c > "$1.pq"; }
# "B (B-A, p = P[†])" from paired_t.py's line "n N  A a  B b  B-A d  t t  p p".
row() { /usr/bin/python3 "$HERE/paired_t.py" "$W/$NAME.exact.run.pq" "$1.pq" |
        awk '{ printf "%s (%s, p = %.3f%s)", $6, $8, $12, ($12 < 0.05 ? " †" : "") }'; }
if [ ! -f "$W/$NAME.exact.run" ]; then
    "$B/tartan" build --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
        --out "$W/$NAME.orig.idx" --nbits 1 --keep-originals f16 --no-tune --threads "$THREADS" --force >&2
    # shellcheck disable=SC2086
    "$B/tartan" search --index "$W/$NAME.orig.idx" $Q --mode exact --out "$W/$NAME.exact.run" 2>/dev/null
    rm -rf "$W/$NAME.orig.idx"
fi
[ -f "$W/$NAME.exact.run.pq" ] || pq "$W/$NAME.exact.run"
echo "| nbits | pool | K | build args | size | x smaller than f16 | exhaustive nDCG@10 (diff, p) | PLAID nDCG@10 (diff, p) |"
echo "|---:|---:|---:|---|---:|---:|---:|---:|"
for v in $VARIANTS; do
    nbits=${v%%:*} rest=${v#*:}; pool=${rest%%:*} k=${rest#*:}
    idx=$W/$NAME.$nbits-$pool-$k.idx
    # shellcheck disable=SC2086
    "$B/tartan" build --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
        --out "$idx" --nbits "$nbits" --pool-factor "$pool" --centroids "$k" --no-tune \
        --threads "$THREADS" --force $BUILD_ARGS >&2
    # shellcheck disable=SC2086
    "$B/tartan" search --index "$idx" $Q --mode exhaustive --out "$idx.exh.run" 2>/dev/null
    # shellcheck disable=SC2086
    "$B/tartan" search --index "$idx" $Q $PLAID --out "$idx.plaid.run" 2>/dev/null
    pq "$idx.exh.run"; pq "$idx.plaid.run"
    size=$(du -sb "$idx" | cut -f1)
    f16=$("$B/tartan" info --json "$idx" | /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['input_f16_bytes'])")
    printf '| %s | %s | %s | %s | %.2f MiB | %.2f | %s | %s |\n' "$nbits" "$pool" "$k" "${BUILD_ARGS:--}" \
        "$(echo "$size / 1048576" | bc -l)" "$(echo "$f16 / $size" | bc -l)" \
        "$(row "$idx.exh.run")" "$(row "$idx.plaid.run")"
    rm -rf "$idx"
done

#!/bin/sh
# Search benchmark (doc/benchmarks.md, "Search"): on one collection made by tartan-synth,
# in the same run: exhaustive search as the reference; PLAID at k = 10 and k = 100
# (p50/p95, recall@10 against exhaustive); QPS with 2 threads; cold page cache with
# io_uring, io_uring + O_DIRECT and mmap (bytes and reads per query, major faults); the
# device's random-read IOPS by fio; optionally (FAISS=1) FAISS IVF-PQ + exact rerank
# tuned to PLAID's recall against exact MaxSim at k = 10 and k = 100
# (bench/search_faiss.py).
#
# usage: bench/search_bench.sh BUILDDIR WORKDIR PREFIX [NQUERIES]
#   PREFIX: tartan-synth output (PREFIX.vectors.npy, .doclens.npy, .ids.txt,
#   .queries.npy, .qids.txt) inside WORKDIR; the index WORKDIR/PREFIX.idx is built if
#   missing. Example (ColBERT shape, 300k docs x 32 x 128-d):
#     build/tartan-synth --out /var/tmp/tt/cb300k --docs 300000 --doclen 32 --dim 128 \
#         --queries 500 --qlen 32 --noise 0.3 --qnoise 0.2 --f16 --seed 5
#     FAISS=1 bench/search_bench.sh build /var/tmp/tt cb300k 100
# Environment: THREADS (QPS run, default 2), NQ_EXH (queries for the exhaustive
# reference, default NQUERIES), NQ_COLD (default 50), NQ_QPS (queries of the threaded
# QPS runs, default NQUERIES; a run shorter than a second mostly measures start-up),
# SCORE (sum or mean; DiffRetriever averages over query vectors), NDOCS (extra k = 10
# runs with these ndocs), FIO=0 to skip fio, QUERIES / QLENS (a 2-D query file with
# per-query lengths instead of PREFIX.queries.npy), FAISS=1.
set -eu
B=$(cd "$1" && pwd); W=$(cd "$2" && pwd); P=$3; NQ=${4:-100}
THREADS=${THREADS:-2}; NQ_EXH=${NQ_EXH:-$NQ}; NQ_COLD=${NQ_COLD:-50}; NQ_QPS=${NQ_QPS:-$NQ}
# OpenBLAS's own threads stay off (the library's tt_blas_set_threads(1) does the same
# once it runs; the variable also keeps OpenBLAS's start-up threads from spinning).
export OPENBLAS_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd); top=$(cd "$here/.." && pwd)
PY=/usr/bin/python3
SB="$W/search_bench"
cd "$W"
if [ ! -x "$SB" ] || [ "$top/bench/search_bench.c" -nt "$SB" ]; then
    gcc -O2 -std=c11 -D_GNU_SOURCE -include "$B/config.h" -I"$top/include" -I"$top/src" \
        $(pkg-config --cflags openblas 2>/dev/null) "$top/bench/search_bench.c" \
        "$B/.libs/libtartan-internal.a" -lopenblas -luring -lxxhash -lm -lpthread -o "$SB"
fi
if [ ! -f "$P.idx/MANIFEST" ]; then
    /usr/bin/time -f "build: %e s, peak RSS %M KiB" "$B/tartan" build --vectors "$P.vectors.npy" \
        --doclens "$P.doclens.npy" --ids "$P.ids.txt" --out "$P.idx" --threads "$THREADS"
fi
"$B/tartan" info "$P.idx" | sed -n '1,6p'
Q=${QUERIES:-$P.queries.npy}
echo "== machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"

run() { # label, args...
    label=$1; shift
    "$SB" --index "$P.idx" --queries "$Q" ${QLENS:+--qlens "$QLENS"} \
        --query-ids "$P.qids.txt" --label "$label" --score "${SCORE:-sum}" "$@" |
        tee -a "$W/results.jsonl"
}
: > "$W/results.jsonl"
run exhaustive --mode exhaustive --k 100 --limit "$NQ_EXH" --run "$W/exh.run"
run plaid-k10 --k 10 --limit "$NQ" --run "$W/k10.run"
run plaid-k100 --k 100 --limit "$NQ" --run "$W/k100.run"
R10=$($PY "$here/search_recall.py" "$W/k10.run" "$W/exh.run" 10)
R100=$($PY "$here/search_recall.py" "$W/k100.run" "$W/exh.run" 10)
R100at100=$($PY "$here/search_recall.py" "$W/k100.run" "$W/exh.run" 100)
echo "recall@10 vs exhaustive: k=10 $R10, k=100 $R100 (recall@100 $R100at100)"
# Larger ndocs at k = 10 (NDOCS="640 768"): what recall costs where the defaults fall short.
for nd in ${NDOCS:-}; do
    run "plaid-k10-ndocs$nd" --k 10 --ndocs "$nd" --limit "$NQ" --run "$W/k10n$nd.run"
    echo "recall@10 vs exhaustive, k=10 ndocs $nd:" \
        "$($PY "$here/search_recall.py" "$W/k10n$nd.run" "$W/exh.run" 10)"
done
run plaid-k10-${THREADS}t --k 10 --limit "$NQ_QPS" --threads "$THREADS"
run plaid-k100-${THREADS}t --k 100 --limit "$NQ_QPS" --threads "$THREADS"
# Cold page cache: residuals evicted before every query.
run cold-uring --k 10 --limit "$NQ_COLD" --cold --io uring
run cold-uring-direct --k 10 --limit "$NQ_COLD" --cold --io uring --direct
run cold-mmap --k 10 --limit "$NQ_COLD" --cold --io mmap
run warm-mmap --k 10 --limit "$NQ" --io mmap
# The device under the residual file: 4 KiB random reads, queue depth 64, O_DIRECT.
if [ "${FIO:-1}" = 1 ] && command -v fio >/dev/null; then
    fio --name=randread --filename="$P.idx/residuals.tt" --readonly --rw=randread --bs=4k \
        --direct=1 --ioengine=io_uring --iodepth=64 --runtime=10 --time_based \
        --output-format=terse --terse-version=3 2>/dev/null |
        awk -F';' '{printf "fio 4k randread qd64 O_DIRECT: %d IOPS, %.0f MiB/s\n", $8, $7/1024}'
    fio --name=randread1 --filename="$P.idx/residuals.tt" --readonly --rw=randread --bs=4k \
        --direct=1 --ioengine=psync --iodepth=1 --runtime=5 --time_based \
        --output-format=terse --terse-version=3 2>/dev/null |
        awk -F';' '{printf "fio 4k randread qd1 O_DIRECT: %d IOPS (%.0f us per read)\n", $8, 1e6/$8}'
fi
if [ "${FAISS:-0}" = 1 ]; then
    $PY "$here/search_faiss.py" "$P" "$W/k10.run" "$NQ" 10
    $PY "$here/search_faiss.py" "$P" "$W/k100.run" "$NQ" 100
fi

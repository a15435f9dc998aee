#!/bin/sh
# tartan against the PLAID reference (stanford-futuredata/ColBERT) side by side on the same
# vectors, one thread, k = 10, defaults on both (doc/benchmarks.md, "Side by side with the
# PLAID reference"). tartan: an index built with `tartan build` defaults (calibrated at
# build time) searched with no search flags (bench/search_bench.c, which resolves the
# index's calibrated parameters as `tartan search` does). The reference: its own indexer
# (nbits 2) and Searcher.dense_search() with only the text encoder stubbed
# (bench/plaid_ref.py). Truth: exact MaxSim over the uncompressed float32 vectors
# (bench/maxsim_exact.py); tartan's own --mode exhaustive (decompressed) is reported too.
# The two searches run in alternation, ROUNDS times (A B A B ...).
#
# usage: bench/plaid_side_by_side.sh BUILDDIR WORKDIR PREFIX COLBERT_CHECKOUT [NQUERIES]
#   PREFIX: tartan-synth output inside WORKDIR (PREFIX.vectors.npy, .doclens.npy,
#   .ids.txt, .queries.npy, .qids.txt). Example (ColBERT shape, 20k docs x 30 x 128-d):
#     B/tartan-synth --out W/s20k --docs 20000 --doclen 30 --dim 128 --queries 200 \
#         --qlen 32 --noise 0.3 --qnoise 0.2
#     sh bench/plaid_side_by_side.sh B W s20k /tmp/colbert 200
# Environment: ROUNDS (default 2), BUILD_THREADS (index builds, default 2), REPEAT
# (default 1: tartan's turn searches the queries REPEAT times over and takes p50 over all
# of them, so that its turn lasts about as long as the reference's single pass and both
# sides sample the same speed phases of a VM; the reference's turn is unchanged).
set -eu
B=$(cd "$1" && pwd); W=$(cd "$2" && pwd); P=$3; CB=$(cd "$4" && pwd); NQ=${5:-200}
ROUNDS=${ROUNDS:-2}; BT=${BUILD_THREADS:-2}; REPEAT=${REPEAT:-1}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd); top=$(cd "$here/.." && pwd)
PY=/usr/bin/python3
SB="$W/search_bench"
cd "$W"
if [ ! -x "$SB" ] || [ "$top/bench/search_bench.c" -nt "$SB" ]; then
    gcc -O2 -std=c11 -D_GNU_SOURCE -include "$B/config.h" -I"$top/include" -I"$top/src" \
        $(pkg-config --cflags openblas 2>/dev/null) "$top/bench/search_bench.c" \
        "$B/.libs/libtartan-internal.a" $(sed -n "s/^dependency_libs='\(.*\)'/\1/p" \
        "$B/libtartan.la") -lpthread -o "$SB"
fi
echo "== machine: $(getconf _NPROCESSORS_ONLN) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== reference: $(git -C "$CB" describe --tags 2>/dev/null || cat "$CB/REVISION" 2>/dev/null || echo "$CB")"
if [ ! -f "$P.idx/MANIFEST" ]; then
    /usr/bin/time -f "tartan build: %e s, %U s user, peak RSS %M KiB" "$B/tartan" build \
        --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
        --out "$P.idx" --threads "$BT"
fi
if [ ! -f "$W/plaid/plaid/indexes/$P.plaid/metadata.json" ]; then
    OMP_NUM_THREADS=$BT /usr/bin/time -f "reference build: %e s, %U s user, peak RSS %M KiB" \
        "$PY" "$here/plaid_ref.py" --colbert "$CB" --threads "$BT" build \
        --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --root "$W/plaid" \
        --name "$P.plaid" > "$W/$P.plaid-build.log" 2>&1 || { tail -20 "$W/$P.plaid-build.log"; exit 1; }
    tail -1 "$W/$P.plaid-build.log"
fi
"$B/tartan" info "$P.idx" | sed -n '1,12p'
# What a plain `tartan search` uses (and says where it came from).
"$B/tartan" search --index "$P.idx" --queries "$P.queries.npy" --k 10 --threads 1 \
    --out /dev/null 2>&1 | grep -i -m3 'calibrat' || true
if [ ! -s "$W/$P.exact.run" ]; then
    "$PY" "$here/maxsim_exact.py" "$P.vectors.npy" "$P.doclens.npy" "$P.ids.txt" \
        "$P.queries.npy" "$P.qids.txt" 10 "$W/$P.exact.run" "$NQ"
fi
if [ ! -s "$W/$P.exh.run" ]; then
    "$SB" --index "$P.idx" --queries "$P.queries.npy" --query-ids "$P.qids.txt" \
        --mode exhaustive --k 10 --limit "$NQ" --run "$W/$P.exh.run" --label exhaustive
fi
rec() { echo "recall@10 $1: vs exact $($PY "$here/search_recall.py" "$2" "$W/$P.exact.run" 10)," \
    "vs tartan exhaustive $($PY "$here/search_recall.py" "$2" "$W/$P.exh.run" 10)"; }
: > "$W/$P.side.jsonl"
i=1
while [ "$i" -le "$ROUNDS" ]; do
    echo "== round $i, load $(cut -d' ' -f1-3 /proc/loadavg)"
    # (Not through a pipe: sh has no pipefail, and a failed search must stop the run.)
    line=$("$SB" --index "$P.idx" --queries "$P.queries.npy" --query-ids "$P.qids.txt" \
        --k 10 --limit "$NQ" --repeat "$REPEAT" --run "$W/$P.tartan.run" \
        --label "tartan-r$i") ||
        { echo "tartan search failed (round $i)" >&2; exit 1; }
    echo "$line" | tee -a "$W/$P.side.jsonl"
    line=$("$PY" "$here/plaid_ref.py" --colbert "$CB" --threads 1 search --root "$W/plaid" \
        --name "$P.plaid" --queries "$P.queries.npy" --qids "$P.qids.txt" --ids "$P.ids.txt" \
        --k 10 --limit "$NQ" --run "$W/$P.plaid.run" --label "plaid-ref-r$i" \
        2>>"$W/$P.plaid-search.log") ||
        { echo "reference search failed (round $i):" >&2; tail -20 "$W/$P.plaid-search.log" >&2
          exit 1; }
    echo "$line" | tee -a "$W/$P.side.jsonl"
    i=$((i + 1))
done
rec tartan "$W/$P.tartan.run"
rec plaid-ref "$W/$P.plaid.run"
# Ratios per round (tartan / reference) of p50 wall and p50 CPU time.
"$PY" - "$W/$P.side.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
t = [r for r in rows if r["label"].startswith("tartan")]
p = [r for r in rows if r["label"].startswith("plaid")]
for a, b in zip(t, p):
    print("%s/%s: p50 %.3f/%.3f ms = %.3fx, p95 %.3f/%.3f = %.3fx, cpu p50 %.3f/%.3f = %.3fx"
          % (a["label"], b["label"], a["p50_ms"], b["p50_ms"], a["p50_ms"] / b["p50_ms"],
             a["p95_ms"], b["p95_ms"], a["p95_ms"] / b["p95_ms"],
             a["cpu_p50_ms"], b["cpu_p50_ms"], a["cpu_p50_ms"] / b["cpu_p50_ms"]))
EOF

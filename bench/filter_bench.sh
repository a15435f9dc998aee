#!/bin/sh
# Filtered search (doc/benchmarks.md, "Filtered search"): p50 latency and recall@10
# against exhaustive search restricted to the same filter, at selectivities 0.1% to
# 100%, for each plan (auto: the default crossover; direct: every allowed document
# scored by centroid interaction; ivf: candidates from the IVF, outside the filter
# dropped), beside unfiltered search, all in one run, one thread.
#
# usage: sh bench/filter_bench.sh BUILD W NAME [NQ]
#   W/NAME.idx       an index built with --metadata whose column "bucket" is uniform in
#                    [0, 1000) (independent of the vectors): bucket < c allows c/10 %
#   W/NAME.queries.npy  queries (the first NQ, default 50, are used)
# NDOCS (default 768) and EXTRA (more search flags) apply to every PLAID run; CUTS
# (default "1 10 100 500 1000") are the bucket bounds; REUSE=1 keeps the exhaustive
# reference runs of an earlier run in W (they depend only on the index, the queries and
# the filter) and reruns everything else.
set -eu
B=$1
W=$2
N=$3
NQ=${4:-50}
NDOCS=${NDOCS:-768}
EXTRA=${EXTRA:-}
PY=/usr/bin/python3
T="$B/tartan"
I="$W/$N.idx"
Q="$W/fb.q.npy"
$PY -c "import numpy as np, sys; q = np.load(sys.argv[1]); np.save(sys.argv[2], q[:int(sys.argv[3])])" \
    "$W/$N.queries.npy" "$Q" "$NQ"

p50() { sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' "$1"; }
recall() { $PY "$(dirname "$0")/search_recall.py" "$1" "$2" 10; }
# run OUT ARGS...: one search, its p50 in ms on stdout
run() {
    out=$1; shift
    # shellcheck disable=SC2086
    "$T" search --index "$I" --queries "$Q" --k 10 --threads 1 --out "$out" "$@" 2>"$out.err"
    p50 "$out.err"
}

echo "| filter | allowed | plan | p50 | recall@10 vs exhaustive restricted |"
echo "|---|---:|---|---:|---:|"
# Unfiltered: the exhaustive reference and PLAID (defaults and NDOCS).
if [ -n "${REUSE:-}" ] && [ -s "$W/fb.ex.run" ]; then
    echo "| none | all | exhaustive | (earlier run) | (reference) |"
else
    ex=$(run "$W/fb.ex.run" --mode exhaustive)
    echo "| none | all | exhaustive | $ex ms | (reference) |"
fi
for nd in 0 "$NDOCS"; do
    flag=""
    [ "$nd" = 0 ] || flag="--ndocs $nd"
    # shellcheck disable=SC2086
    t=$(run "$W/fb.u$nd.run" $flag $EXTRA)
    echo "| none | all | plaid ${flag:-defaults} | $t ms | $(recall "$W/fb.u$nd.run" "$W/fb.ex.run") |"
done
for cut in ${CUTS:-1 10 100 500 1000}; do
    w="bucket < $cut"
    ref="$W/fb.ex$cut.run"
    if [ "$cut" = 1000 ] && [ -z "${FULL_REF:-}" ]; then
        # Every document allowed: the reference is the unfiltered exhaustive run (the
        # filtered scan reads the same documents; FULL_REF=1 runs it anyway).
        cp "$W/fb.ex.run" "$ref"
        allowed=all
        t="(as unfiltered)"
    elif [ -n "${REUSE:-}" ] && [ -s "$ref" ]; then
        t="(earlier run)"
        allowed=$(sed -n 's/.*filter: \([0-9]*\) documents allowed.*/\1/p' "$ref.err")
    else
        t="$(run "$ref" --mode exhaustive --where "$w") ms"
        allowed=$(sed -n 's/.*filter: \([0-9]*\) documents allowed.*/\1/p' "$ref.err")
    fi
    echo "| $w | $allowed | exhaustive | $t | (reference) |"
    for plan in auto direct ivf; do
        case $plan in
        auto) pf="" ;;
        direct) pf="--filter-direct-max 1000000000" ;;
        ivf) pf="--filter-direct-max 1" ;;
        esac
        for nd in 0 "$NDOCS"; do
            flag=""
            [ "$nd" = 0 ] || flag="--ndocs $nd"
            out="$W/fb.$plan$cut.$nd.run"
            # shellcheck disable=SC2086
            t=$(run "$out" --where "$w" $pf $flag $EXTRA)
            echo "| $w | $allowed | $plan ${flag:-defaults} | $t ms | $(recall "$out" "$ref") |"
        done
    done
done

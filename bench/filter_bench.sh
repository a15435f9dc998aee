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
# NDOCS (default 768; empty: none) is an extra --ndocs run beside the one with no
# PLAID flags (an index calibrated by tartan build / tartan tune then uses its tune.tt);
# EXTRA (more search flags) applies to every PLAID run; PLANS (default "auto direct ivf")
# the plans; UNTUNED=1 adds an --untuned row (ColBERTv2's defaults by k) per filter; CUTS
# (default "1 10 100 500 1000") are the bucket bounds; REUSE=1 keeps the exhaustive
# reference runs of an earlier run in W (they depend only on the index, the queries and
# the filter) and reruns everything else; REPEAT=N runs each PLAID search N times and
# reports the median p50 (the machine's noise; the exhaustive references run once). The last column is the fewest hits any query
# returned (it must be min(10, allowed)).
set -eu
B=$1
W=$2
N=$3
NQ=${4:-50}
NDOCS=${NDOCS-768}
EXTRA=${EXTRA:-}
PY=/usr/bin/python3
T="$B/tartan"
I="$W/$N.idx"
Q="$W/fb.q.npy"
$PY -c "import numpy as np, sys; q = np.load(sys.argv[1]); np.save(sys.argv[2], q[:int(sys.argv[3])])" \
    "$W/$N.queries.npy" "$Q" "$NQ"

REP=${REPEAT:-1}
p50() { sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' "$1"; }
recall() { $PY "$(dirname "$0")/search_recall.py" "$1" "$2" 10; }
# run OUT ARGS...: one search (REPEAT times, default 1), the median of their p50s in ms
# on stdout (the runs are deterministic: the last one's results are kept)
run() {
    out=$1; shift
    : >"$out.p50"
    i=0
    while [ "$i" -lt "$REP" ]; do
        # shellcheck disable=SC2086
        "$T" search --index "$I" --queries "$Q" --k 10 --threads 1 --out "$out" "$@" 2>"$out.err"
        p50 "$out.err" >>"$out.p50"
        i=$((i + 1))
    done
    sort -n "$out.p50" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# fewest RUN: the fewest hits of any query of the run (queries with none count 0)
fewest() {
    $PY -c 'import sys, collections
c = collections.Counter(l.split()[0] for l in open(sys.argv[1]))
q = [l.split()[0] for l in open(sys.argv[2])] if len(sys.argv) > 2 else []
print(min([c[x] for x in set(q) | set(c)] or [0]))' "$1" "$W/fb.ex.run"
}

echo "| filter | allowed | plan | p50 | recall@10 vs exhaustive restricted | fewest hits |"
echo "|---|---:|---|---:|---:|---:|"
# Unfiltered: the exhaustive reference and PLAID (defaults and NDOCS).
if [ -n "${REUSE:-}" ] && [ -s "$W/fb.ex.run" ]; then
    echo "| none | all | exhaustive | (earlier run) | (reference) | |"
else
    REP=1
    ex=$(run "$W/fb.ex.run" --mode exhaustive --latency)
    REP=${REPEAT:-1}
    echo "| none | all | exhaustive | $ex ms | (reference) | $(fewest "$W/fb.ex.run") |"
fi
# shellcheck disable=SC2086
for nd in 0 $NDOCS ${UNTUNED:+untuned}; do
    flag=""
    [ "$nd" = 0 ] || flag="--ndocs $nd"
    [ "$nd" = untuned ] && flag="--untuned"
    # shellcheck disable=SC2086
    t=$(run "$W/fb.u$nd.run" $flag $EXTRA)
    echo "| none | all | plaid ${flag:-no flags} | $t ms | $(recall "$W/fb.u$nd.run" "$W/fb.ex.run") | $(fewest "$W/fb.u$nd.run") |"
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
        REP=1
        t="$(run "$ref" --mode exhaustive --latency --where "$w") ms"
        REP=${REPEAT:-1}
        allowed=$(sed -n 's/.*filter: \([0-9]*\) documents allowed.*/\1/p' "$ref.err")
    fi
    echo "| $w | $allowed | exhaustive | $t | (reference) | $(fewest "$ref") |"
    for plan in ${PLANS:-auto direct ivf}; do
        case $plan in
        auto) pf="" ;;
        direct) pf="--filter-direct-max 1000000000" ;;
        ivf) pf="--filter-direct-max 1" ;;
        esac
        # shellcheck disable=SC2086
        for nd in 0 $NDOCS ${UNTUNED:+untuned}; do
            flag=""
            [ "$nd" = 0 ] || flag="--ndocs $nd"
            [ "$nd" = untuned ] && flag="--untuned"
            out="$W/fb.$plan$cut.$nd.run"
            # shellcheck disable=SC2086
            t=$(run "$out" --where "$w" $pf $flag $EXTRA)
            echo "| $w | $allowed | $plan ${flag:-no flags} | $t ms | $(recall "$out" "$ref") | $(fewest "$out") |"
        done
    done
done

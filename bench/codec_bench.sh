#!/bin/sh
# Residual codecs measured end to end in tartan (doc/benchmarks.md, "Codecs on LLM-like
# vectors"): one index per codec and bit width over the same tartan-synth collection,
# each searched exhaustively (decompressed MaxSim over every document, so the numbers
# measure the codec, not PLAID's pruning) and with PLAID, against exact MaxSim over
# the float16 originals.
#
#   sh bench/codec_bench.sh BUILD W NAME 'SYNTH ARGS' [VARIANTS] [PLAID ARGS]
#
# BUILD: a build tree (tartan, tartan-synth); W: work directory; NAME: collection
# prefix in W (made with tartan-synth SYNTH ARGS unless W/NAME.vectors.npy exists);
# VARIANTS: space-separated CODEC:NBITS[:POOL] (default
# "per-dim:2 adaptive:2 per-dim:1 adaptive:1"); PLAID ARGS: extra tartan search
# options of the PLAID row (default none: the defaults for k = 10). Environment:
# THREADS (build and search threads, default 2), MEMORY (build budget, default 4G),
# SCORE (sum or mean, default sum), K (default 10), BUILD_ARGS (more tartan build
# options for every variant, e.g. --no-debias).
#
# Prints one Markdown row per variant: MRR@10 exhaustive and PLAID, recall@K vs exact
# (exhaustive and PLAID), payload bytes per vector (centroid code + residual + residual
# scale with --debias vector; file headers included), its ratio
# to float16 (2 * dim bytes), the centroids' bytes, the whole index's ratio, the build
# time. Needs /usr/bin/python3 (bench/search_recall.py).
set -eu
B=$1 W=$2 NAME=$3 SYNTH=$4
VARIANTS=${5:-"per-dim:2 adaptive:2 per-dim:1 adaptive:1"}
PLAID=${6:-}
THREADS=${THREADS:-2} MEMORY=${MEMORY:-4G} SCORE=${SCORE:-sum} K=${K:-10}
BUILD_ARGS=${BUILD_ARGS:-}
HERE=$(cd "$(dirname "$0")" && pwd)
P=$W/$NAME
mkdir -p "$W"

if [ ! -f "$P.vectors.npy" ]; then
    # shellcheck disable=SC2086
    "$B/tartan-synth" --out "$P" $SYNTH >&2
fi
Q="--queries $P.queries.npy --query-ids $P.qids.txt --k $K --score $SCORE --threads $THREADS"
mrr() { "$B/tartan" eval --qrels "$P.qrels.tsv" --run "$1" --metrics "MRR@$K" --json |
        /usr/bin/python3 -c "import json,sys; print('%.4f' % json.load(sys.stdin)['MRR@$K'])"; }
json() { /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# The reference: exact MaxSim over the kept float16 originals.
if [ ! -f "$P.exact.run" ]; then
    "$B/tartan" build --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
        --out "$P.orig.idx" --nbits 1 --keep-originals f16 --no-tune --threads "$THREADS" \
        --memory "$MEMORY" --force >&2
    # shellcheck disable=SC2086
    "$B/tartan" search --index "$P.orig.idx" $Q --mode exact --out "$P.exact.run" 2>/dev/null
    rm -rf "$P.orig.idx"
fi
echo "exact MaxSim: MRR@$K $(mrr "$P.exact.run")"
echo
echo "| codec | nbits | pool | MRR@$K exhaustive | MRR@$K PLAID | R@$K vs exact, exhaustive | R@$K vs exact, PLAID | payload B/vector | vs float16 | centroids | index vs float16 | build s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for v in $VARIANTS; do
    codec=${v%%:*} rest=${v#*:}
    nbits=${rest%%:*} pool=1
    [ "$rest" != "$nbits" ] && pool=${rest#*:}
    idx=$P.$codec-$nbits-$pool.idx
    popt=
    [ "$pool" != 1 ] && popt="--pool-factor $pool"
    # shellcheck disable=SC2086
    "$B/tartan" build --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
        --out "$idx" --codec "$codec" --nbits "$nbits" $popt --no-tune $BUILD_ARGS --threads "$THREADS" \
        --memory "$MEMORY" --force >&2
    "$B/tartan" info --json "$idx" > "$idx.json"
    # shellcheck disable=SC2086
    "$B/tartan" search --index "$idx" $Q --mode exhaustive --out "$idx.exh.run" 2>/dev/null
    # shellcheck disable=SC2086
    "$B/tartan" search --index "$idx" $Q $PLAID --out "$idx.plaid.run" 2>/dev/null
    payload=$(json "$idx.json" "(j['bytes']['codes'] + j['bytes']['residuals'] + j['bytes'].get('vscale', 0)) / j['num_vectors']")
    f16=$(json "$idx.json" "2 * j['dim']")
    printf '| %s | %s | %s | %s | %s | %s | %s | %.1f | %.2fx | %s | %.2fx | %.1f |\n' \
        "$codec" "$nbits" "$pool" "$(mrr "$idx.exh.run")" "$(mrr "$idx.plaid.run")" \
        "$(/usr/bin/python3 "$HERE/search_recall.py" "$idx.exh.run" "$P.exact.run" "$K")" \
        "$(/usr/bin/python3 "$HERE/search_recall.py" "$idx.plaid.run" "$P.exact.run" "$K")" \
        "$payload" "$(json "$idx.json" "$f16 / $payload")" \
        "$(json "$idx.json" "'%.1f MiB' % (j['bytes']['centroids'] / 2**20)")" \
        "$(json "$idx.json" "j['ratio_f16']")" "$(json "$idx.json" "j['build']['seconds']")"
    rm -rf "$idx"
done

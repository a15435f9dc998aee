#!/bin/sh
# Does a larger K (smaller residuals) close the LLM-like 2-bit / 1-bit gap, and what
# does it cost in index size? (doc/benchmarks.md, "Codec ceilings, third pass").
# For each tartan-synth seed and each centroid count, runs bench/codec_bench.sh (tartan
# build + exhaustive search against exact MaxSim over the float16 originals) with
# --centroids K added to every build.
#
#   sh bench/codec_k_sweep.sh BUILD W 'SEEDS' 'KS' 'VARIANTS' ['MORE BUILD ARGS']
#
# e.g. sh bench/codec_k_sweep.sh /tmp/b W "3 4 5" "1024 4096 16384" "adaptive:2 adaptive:1"
# Collections: W/llmS made with the LLM-like arguments of "Codecs on LLM-like vectors"
# and --seed S. Prints, per seed and K, codec_bench.sh's table (its "centroids" and
# "index vs float16" columns are the cost of K).
set -eu
B=$1 W=$2 SEEDS=$3 KS=$4 VARIANTS=$5 MORE=${6:-}
HERE=$(cd "$(dirname "$0")" && pwd)
for s in $SEEDS; do
    for k in $KS; do
        echo "## seed $s, K = $k $MORE"
        BUILD_ARGS="--centroids $k $MORE" sh "$HERE/codec_bench.sh" "$B" "$W" "llm$s" \
            "--docs 5000 --doclen 16 --dim 1024 --queries 200 --qlen 4 --outliers 4 --qnoise 0.8 --seed $s" \
            "$VARIANTS" "--threshold 0 --ndocs 1024"
    done
done

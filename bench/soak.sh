#!/bin/sh
# Soak: a mixed query load on one index for minutes (bench/soak.c), with p50/p99 and
# RSS sampled every interval; passes when no search failed and RSS stayed flat (at the
# end within SOAK_RSS_GROWTH percent, default 5, of its value after a quarter of the run).
#   bench/soak.sh [BUILDDIR]        (BUILDDIR: a configured and built tree, default .)
# Environment: SOAK_SECONDS (180), SOAK_INTERVAL (10), SOAK_THREADS (2), SOAK_RENEW
# (0: one search context per thread; N: a new context every N queries), SOAK_DOCS
# (30000 documents of 10-50 vectors x 128 dims, ~460 MB float32), SOAK_IO (auto),
# SOAK_DIR (work directory, default /tmp/tartan-soak; the corpus and index are reused
# when present). Results: doc/benchmarks.md, section Soak.
set -eu
B=$(cd "${1:-.}" && pwd)
secs=${SOAK_SECONDS:-180}
interval=${SOAK_INTERVAL:-10}
threads=${SOAK_THREADS:-2}
renew=${SOAK_RENEW:-0}
docs=${SOAK_DOCS:-30000}
io=${SOAK_IO:-auto}
growth=${SOAK_RSS_GROWTH:-5}
W=${SOAK_DIR:-/tmp/tartan-soak}
mkdir -p "$W"
C="$W/c$docs"
if [ ! -f "$C.vectors.npy" ]; then
    echo "soak: corpus of $docs documents in $W"
    "$B/tartan-synth" --out "$C" --docs "$docs" --doclen 10-50 --dim 128 --queries 300 \
        --qlen 32 --seed 17 >/dev/null
fi
if [ ! -f "$C.idx/MANIFEST" ]; then
    "$B/tartan" build --vectors "$C.vectors.npy" --doclens "$C.doclens.npy" --ids "$C.ids.txt" \
        --out "$C.idx" --threads 2 --force
fi
"$B/tartan" info "$C.idx" | head -n 8
echo "soak: $secs s, $threads threads, samples every $interval s ($(nproc) CPUs, $(uname -r))"
"$B/bench/soak" --index "$C.idx" --queries "$C.queries.npy" --seconds "$secs" \
    --interval "$interval" --threads "$threads" --io "$io" --renew "$renew" | tee "$W/soak.log"
line=$(grep '^# total' "$W/soak.log")
pctg=$(echo "$line" | sed -n 's/.*at the end (\([-+0-9.]*\)%).*/\1/p')
errs=$(echo "$line" | sed -n 's/.* \([0-9]*\) errors$/\1/p')
if [ "${errs:-1}" = 0 ] && awk -v g="$pctg" -v m="$growth" 'BEGIN { exit !(g < m) }'; then
    echo "soak: PASS (RSS growth ${pctg}% < ${growth}%, no errors)"
else
    echo "soak: FAIL (RSS growth ${pctg:-?}%, ${errs:-?} errors)"
    exit 1
fi

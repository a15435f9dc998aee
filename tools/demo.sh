#!/bin/sh
# The demo: installs what is needed, builds tartan, makes a synthetic collection with
# known answers, builds a compressed index, inspects and verifies it, searches it and
# evaluates the run. Usage (Debian 12, as root): tools/demo.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/tools/setup-debian.sh"
build="$top/build"
if [ ! -x "$build/tartan" ] || [ "$top/Makefile.am" -nt "$build/Makefile" ]; then
    (cd "$top" && autoreconf -fi >/dev/null 2>&1)
    mkdir -p "$build"
    (cd "$build" && "$top/configure" -q)
fi
make -C "$build" -j"$(nproc)" -s >/dev/null
T="$build/tartan"
# The demo's files stay for you to look at, in the build tree: each run replaces the
# last one's (the index with --force, which replaces only a tartan index).
work="$build/demo"
mkdir -p "$work"
echo "== 1. a synthetic collection: 20,000 documents x 20-40 vectors x 128-d, 200 queries"
# Noise levels like ColBERT token vectors: most vectors score > 0.5 with their centroid,
# which is what PLAID's default pruning threshold assumes (doc/search.md).
"$build/tartan-synth" --out "$work/demo" --docs 20000 --doclen 20-40 --dim 128 \
    --queries 200 --qlen 32 --seed 7 --noise 0.3 --qnoise 0.2
echo "== 2. build a 2-bit index (it ends by calibrating its search: tartan tune)"
"$T" build --vectors "$work/demo.vectors.npy" --doclens "$work/demo.doclens.npy" \
    --ids "$work/demo.ids.txt" --out "$work/index" --nbits 2 --describe "tartan-synth demo" \
    --force
echo "== 3. what was built"
"$T" info "$work/index"
echo "== 4. verify every checksum"
"$T" verify "$work/index"
if "$T" search --help >/dev/null 2>&1; then
    echo "== 5. search (PLAID, k=10) and show the first results"
    "$T" search --index "$work/index" --queries "$work/demo.queries.npy" \
        --query-ids "$work/demo.qids.txt" --k 10 --out "$work/run.trec"
    head -n 5 "$work/run.trec"
    if "$T" eval --help >/dev/null 2>&1; then
        echo "== 6. evaluate against the planted answers"
        "$T" eval --qrels "$work/demo.qrels.tsv" --run "$work/run.trec"
    fi
fi
echo "(demo files in $work)"

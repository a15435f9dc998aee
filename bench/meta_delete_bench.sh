#!/bin/sh
# The cost of a delete with metadata (doc/benchmarks.md, "Filtered search: sparse,
# hybrid, sizes, deletes"): a delete publishes the next generation's metadata database
# whole (doc/metadata.md), so its time grows with the number of documents. For each
# size N: two indexes of the same tiny vectors (N documents x 4 vectors x 16-d, 256
# centroids), one built with --metadata (3 columns) and one without; then REPS deletes
# of one id each on both, timed (wall clock of `tartan delete`, the median). The
# difference is what the metadata costs a delete.
#
# usage: sh bench/meta_delete_bench.sh BUILD W [SIZES] [REPS]
set -eu
B=$1
W=$2
SIZES=${3:-10000 100000 300000}
REPS=${4:-5}
T="$B/tartan"
PY=/usr/bin/python3
mkdir -p "$W"
now() { $PY -c 'import time; print(time.monotonic())'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "| documents | metadata.tt | delete, no metadata | delete, with metadata | difference |"
echo "|---:|---:|---:|---:|---:|"
for n in $SIZES; do
    P="$W/md$n"
    "$B/tartan-synth" --out "$P" --docs "$n" --doclen 4 --dim 16 --queries 1 --seed 3 >/dev/null
    $PY -c 'import random, sys; r = random.Random(7); L = ["en", "fr", "de", "es"]
open(sys.argv[1], "w").writelines("{\"bucket\": %d, \"year\": %d, \"lang\": \"%s\"}\n"
    % (r.randrange(1000), 1990 + r.randrange(35), L[r.randrange(4)]) for i in range(int(sys.argv[2])))' \
        "$P.meta.jsonl" "$n"
    for m in plain meta; do
        flag=""
        [ $m = meta ] && flag="--metadata $P.meta.jsonl"
        # shellcheck disable=SC2086
        "$T" build --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
            --out "$P.$m.idx" --centroids 256 --threads 2 --no-tune --force $flag >/dev/null 2>&1
        : >"$P.$m.times"
        i=0
        while [ "$i" -lt "$REPS" ]; do
            id=$(sed -n "$((i * 7 + 1))p" "$P.ids.txt")
            t0=$(now)
            "$T" delete --index "$P.$m.idx" --id "$id" >/dev/null 2>&1
            t1=$(now)
            $PY -c "print('%.1f' % ((float('$t1') - float('$t0')) * 1000))" >>"$P.$m.times"
            i=$((i + 1))
        done
    done
    a=$(median <"$P.plain.times")
    b=$(median <"$P.meta.times")
    size=$(ls -l "$P.meta.idx" | awk '/metadata\.tt$/ { print $5 }')
    echo "| $n | $size bytes | $a ms | $b ms | $($PY -c "print('%.1f' % ($b - $a))") ms |"
done

#!/bin/sh
# Calibrated defaults (doc/search.md, "Calibrated defaults"): for each collection, recall
# against exhaustive search and p50 with no search flags before calibration (ColBERTv2's
# table, --untuned) and after `tartan tune` (pseudo-queries), at k = 10 and k = 100, and
# what the calibration cost. Prints one Markdown row per collection and k.
# Usage: bench/tune_bench.sh BUILD WORKDIR NAME [SEARCH ARGS...]
#   WORKDIR/NAME.{vectors,doclens,queries}.npy (+ NAME.qlens.npy for 2-D queries) and
#   NAME.qids.txt must exist (tartan-synth or tartan encode makes them); the index is
#   built as WORKDIR/NAME.tidx with BUILD_ARGS (e.g. --no-normalize).
# Env: THREADS (2) for the build, the reference and the calibration; TUNE_ARGS for
# tartan tune (e.g. "--queries W/x.npy" to calibrate on real queries).
set -eu
B=$1; W=$2; N=$3; shift 3
T=$B/tartan
th=${THREADS:-2}
Q="--queries $W/$N.queries.npy --query-ids $W/$N.qids.txt"
[ -f "$W/$N.qlens.npy" ] && Q="$Q --qlens $W/$N.qlens.npy"
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$W/$N.tidx/MANIFEST" ]; then
    $T build --vectors "$W/$N.vectors.npy" --doclens "$W/$N.doclens.npy" --out "$W/$N.tidx" \
        --threads "$th" --no-tune --force ${BUILD_ARGS:-} >/dev/null
fi
$T search --index "$W/$N.tidx" $Q --k 100 --mode exhaustive --threads "$th" "$@" \
    --out "$W/$N.texh.run" 2>/dev/null
p50() { grep -o 'p50 [0-9.]* ms' "$1" | awk '{print $2}'; }
for k in 10 100; do
    $T search --index "$W/$N.tidx" $Q --k $k --threads 1 --untuned "$@" --out "$W/$N.u.run" \
        2>"$W/$N.u.err"
    eval "u$k=\"$(/usr/bin/python3 "$here/search_recall.py" "$W/$N.u.run" "$W/$N.texh.run" $k | awk '{print $NF}') / $(p50 "$W/$N.u.err")\""
done
t0=$(date +%s.%N)
$T tune --index "$W/$N.tidx" --threads "$th" ${TUNE_ARGS:-} 2>"$W/$N.tune.err"
t1=$(date +%s.%N)
secs=$(echo "$t1 - $t0" | bc)
for k in 10 100; do
    $T search --index "$W/$N.tidx" $Q --k $k --threads 1 "$@" --out "$W/$N.t.run" 2>"$W/$N.t.err"
    r=$(/usr/bin/python3 "$here/search_recall.py" "$W/$N.t.run" "$W/$N.texh.run" $k | awk '{print $NF}')
    # the first k=$k line: the full-length set (short queries' sets follow it)
    set=$(grep -m1 "k=$k " "$W/$N.tune.err" | sed 's/^ *k=[0-9]* *//; s/:.*//')
    pseudo=$(grep -m1 "k=$k " "$W/$N.tune.err" | sed 's/.*recall@[0-9]* \([0-9.]*\).*/\1/')
    eval "u=\$u$k"
    echo "| $N | $k | $u | $r / $(p50 "$W/$N.t.err") | $pseudo | $set | $secs |"
done

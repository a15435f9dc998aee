#!/bin/sh
# Distributed k-means in `tartan-mpi build` (doc/benchmarks.md, "Distributed k-means
# training"): one synthetic corpus, flat k-means (KM_CENTROIDS < 4096; hierarchical from
# 4096, whose fine k-means are spread over the ranks), built by
# `tartan build --shards 2` in one process and by `tartan-mpi build` on 1 and 2 ranks,
# one thread each. Reports each build's wall time and its training time (rank 0's
# "train" figure: sample reading + k-means + codec), the reduce volume, and checks
# that every build's centroids equal the one-process build's (cmp).
#   bench/mpi_kmeans_bench.sh [BUILDDIR]
# Environment: KM_DOCS (8000), KM_DIM (128), KM_CENTROIDS (1024), KM_ITERS (4),
# KM_DIR (/tmp/tartan-kmbench, removed at the end).
set -eu
B=$(cd "${1:-.}" && pwd)
W=${KM_DIR:-/tmp/tartan-kmbench}
docs=${KM_DOCS:-8000}
dim=${KM_DIM:-128}
K=${KM_CENTROIDS:-1024}
it=${KM_ITERS:-4}
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export OMPI_MCA_btl_vader_single_copy_mechanism=none
trap 'rm -rf "$W"' EXIT
mkdir -p "$W"
echo "mpi_kmeans_bench: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $docs docs x 30 x $dim, K = $K, $it iterations; $(date -u)"
"$B/tartan-synth" --out "$W/c" --docs "$docs" --doclen 30 --dim "$dim" --queries 1 \
    --qlen 4 --seed 5 >/dev/null 2>&1
args="--vectors $W/c.vectors.npy --doclens $W/c.doclens.npy --centroids $K --kmeans-iters $it --shards 2 --threads 1"
row() { # NAME LOG WALL
    tr=$(grep -o 'train [0-9.]* s' "$2" | head -1)
    echo "$1: wall $3 s, $tr; $(grep -o '[0-9]* reduces.*rank 0' "$2" || echo 'no reduces')"
}
s=$(date +%s.%N); "$B/tartan" build $args --out "$W/one" >"$W/one.log" 2>&1; e=$(date +%s.%N)
row "one process (tartan build)" "$W/one.log" "$(echo "$e - $s" | bc)"
grep -o 'train[_a-z]* [0-9]* vectors\|[0-9]* training vectors' "$W/one.log" | head -1 || true
for n in 1 2; do
    s=$(date +%s.%N)
    $MPIRUN -n $n "$B/tartan-mpi" build $args --out "$W/m$n" >"$W/m$n.log" 2>&1
    e=$(date +%s.%N)
    row "tartan-mpi build, $n rank(s)" "$W/m$n.log" "$(echo "$e - $s" | bc)"
    cmp -s "$W/one/shard-0000/centroids.tt" "$W/m$n/shard-0000/centroids.tt" \
        && echo "  centroids identical to one process" || echo "  CENTROIDS DIFFER"
done

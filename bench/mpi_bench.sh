#!/bin/sh
# tartan-mpi on one machine (oversubscribed when ranks > cores; doc/benchmarks.md,
# "Sharded search and build over MPI"). Builds a synthetic corpus, a sharded index
# (MPI_SHARDS shards) with `tartan build --shards` and with `tartan-mpi build` on 1 and 2
# ranks (times), then searches it with one-process `tartan search` and with
# `tartan-mpi search` on 1, 2 and 4 ranks: QPS, and rank 0's merge time per query.
# Every run is checked identical to the one-process run.
#   bench/mpi_bench.sh [BUILDDIR]
# Environment: MPI_DOCS (20000), MPI_DIM (128), MPI_SHARDS (4), MPI_QUERIES (500),
# MPI_MODE (plaid), MPI_DIR (/tmp/tartan-mpibench, removed at the end).
set -eu
B=$(cd "${1:-.}" && pwd)
W=${MPI_DIR:-/tmp/tartan-mpibench}
docs=${MPI_DOCS:-20000}
dim=${MPI_DIM:-128}
S=${MPI_SHARDS:-4}
nq=${MPI_QUERIES:-500}
mode=${MPI_MODE:-plaid}
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
trap 'rm -rf "$W"' EXIT
mkdir -p "$W"
echo "mpi_bench: $(nproc) cores; $docs docs x 30 x $dim, $S shards, $nq queries, $mode; $(date -u)"
"$B/tartan-synth" --out "$W/c" --docs "$docs" --doclen 30 --dim "$dim" --queries "$nq" \
    --qlen 32 --seed 11 >/dev/null 2>&1
args="--vectors $W/c.vectors.npy --doclens $W/c.doclens.npy --ids $W/c.ids.txt --shards $S --threads 1"
t() { /usr/bin/time -f "%e" "$@" 2>&1 >/dev/null | tail -1; }
echo "build, one process (tartan build --shards $S --threads 1): $(t "$B/tartan" build $args --out "$W/idx") s"
for n in 1 2; do
    rm -rf "$W/idx$n"
    echo "build, tartan-mpi build on $n rank(s), 1 thread each: $(t $MPIRUN -n $n "$B/tartan-mpi" build $args --out "$W/idx$n") s"
done
# OpenMPI spins in a waiting collective (rank 1 waits while rank 0 trains): yield instead
rm -rf "$W/idx2y"
echo "build, tartan-mpi build on 2 ranks, --mca mpi_yield_when_idle 1: $(t $MPIRUN --mca mpi_yield_when_idle 1 -n 2 "$B/tartan-mpi" build $args --out "$W/idx2y") s"
"$B/tartan" search --index "$W/idx" --queries "$W/c.queries.npy" --k 10 --mode "$mode" \
    --out "$W/one" 2>"$W/one.log"
echo "search, one process: $(grep -o '[0-9.]* QPS' "$W/one.log")"
for n in 1 2 4; do
    $MPIRUN -n $n "$B/tartan-mpi" search --index "$W/idx" --queries "$W/c.queries.npy" \
        --k 10 --mode "$mode" --batch 32 --out "$W/m$n" 2>"$W/m$n.log"
    cmp -s "$W/one" "$W/m$n" && same=identical || same=DIFFERENT
    echo "search, tartan-mpi on $n rank(s): $(grep -o '[0-9.]* QPS.*' "$W/m$n.log") (run $same)"
done

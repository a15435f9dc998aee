#!/bin/sh
# tartan-mpi (doc/scale.md) under mpirun -n 1..4 on one machine (oversubscribed):
# distributed search gives the run of one-process `tartan search` over the same sharded
# index, byte for byte, in PLAID and exhaustive modes, for every rank count and batch
# size, and in --mode sparse and hybrid (BM25 statistics summed over the ranks, lists
# fused at rank 0); a rank that reports an error, dies or is killed mid-search fails the job with a
# message naming the rank, and no run is written. Distributed builds (flat and
# hierarchical k-means) give the one-process files; a rank killed mid-k-means, or one
# that meets bad input in its slice, fails the build, publishes nothing and leaves an
# existing index as it was (every failure bounded by timeout: no hang). Skips (77) when tartan-mpi was not built
# (configure found no MPI) and in sanitizer builds (OpenMPI's own allocations show up
# as leaks under LeakSanitizer: the MPI tests run in the plain build).
. "${TT_SRCDIR:-.}/tests/lib.sh"
TM="${TT_BUILDDIR:-.}/tartan-mpi"
[ -x "$TM" ] || { echo "tartan-mpi not built (no MPI): skip"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun missing: skip"; exit 77; }
grep -q 'fsanitize=address' "${TT_BUILDDIR:-.}/Makefile" && { echo "sanitizer build: skip"; exit 77; }
have_numpy || { echo "numpy missing: skip"; exit 77; }
# As root (CI containers) OpenMPI wants to be told; more ranks than cores is intended.
MPIRUN="mpirun --oversubscribe"
[ "$(id -u)" = 0 ] && MPIRUN="$MPIRUN --allow-run-as-root"
export OMPI_MCA_btl_vader_single_copy_mechanism=none # containers without CMA

"$SYNTH" --out "$WORK/c" --docs 300 --doclen 1-30 --dim 32 --queries 23 --qlen 4 2>/dev/null
V="$WORK/c.vectors.npy"; L="$WORK/c.doclens.npy"; Q="$WORK/c.queries.npy"
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 --shards 3 \
    --out "$WORK/sh" >/dev/null 2>&1 || bad "build --shards 3"
for m in plaid exhaustive; do
    "$T" search --index "$WORK/sh" --queries "$Q" --query-ids "$WORK/c.qids.txt" --k 15 \
        --mode $m --out "$WORK/one.$m" 2>/dev/null
    for n in 1 2 3 4; do
        batch=$((n * 3 + 2))
        $MPIRUN -n $n "$TM" search --index "$WORK/sh" --queries "$Q" \
            --query-ids "$WORK/c.qids.txt" --k 15 --mode $m --batch $batch \
            --out "$WORK/mpi.$m.$n" >"$WORK/log" 2>&1
        [ -s "$WORK/one.$m" ] && cmp -s "$WORK/one.$m" "$WORK/mpi.$m.$n" \
            && ok "$m, $n ranks, batches of $batch: the one-process run" \
            || bad "$m, $n ranks: runs differ ($(tail -c 300 "$WORK/log"))"
    done
done
# a plain index is one shard: rank 0 searches it, the others idle
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 \
    --out "$WORK/one" >/dev/null 2>&1
"$T" search --index "$WORK/one" --queries "$Q" --k 15 --mode exhaustive --out "$WORK/p1" 2>/dev/null
$MPIRUN -n 2 "$TM" search --index "$WORK/one" --queries "$Q" --k 15 --mode exhaustive \
    --out "$WORK/p2" >/dev/null 2>&1
cmp -s "$WORK/p1" "$WORK/p2" && ok "a plain index under 2 ranks: its own run" || bad "plain index differs"

# filters: --where over each shard's metadata and --filter-ids, every rank its own
# shards: the one-process run over the sharded index, and in exhaustive mode the
# unsharded index's filtered run
"$PY" - "$WORK" <<'PY'
import json, sys
w = sys.argv[1]
with open(w + "/c.meta.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"year": 1990 + (i * 7) % 31, "lang": ["en", "de", "fr"][i % 3]}) + "\n")
PY
awk 'NR % 2 == 0' "$WORK/c.ids.txt" >"$WORK/even.ids"; echo no-such-id >>"$WORK/even.ids"
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 --shards 3 \
    --metadata "$WORK/c.meta.jsonl" --out "$WORK/shm" >/dev/null 2>&1 || bad "build --shards 3 --metadata"
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 \
    --metadata "$WORK/c.meta.jsonl" --out "$WORK/onem" >/dev/null 2>&1 || bad "build --metadata"
for fl in "--where year>2005" "--filter-ids $WORK/even.ids" "--where lang<>'de' --filter-ids $WORK/even.ids"; do
    "$T" search --index "$WORK/onem" --queries "$Q" --query-ids "$WORK/c.qids.txt" --k 15 \
        --mode exhaustive $fl --out "$WORK/fu" 2>/dev/null
    "$T" search --index "$WORK/shm" --queries "$Q" --query-ids "$WORK/c.qids.txt" --k 15 \
        --mode exhaustive $fl --out "$WORK/fs" 2>/dev/null
    [ -s "$WORK/fu" ] && cmp -s "$WORK/fu" "$WORK/fs" || bad "$fl: sharded tartan search differs"
    for n in 1 2 4; do
        $MPIRUN -n $n "$TM" search --index "$WORK/shm" --queries "$Q" --query-ids "$WORK/c.qids.txt" \
            --k 15 --mode exhaustive --batch 4 $fl --out "$WORK/fm" >"$WORK/log" 2>&1
        cmp -s "$WORK/fu" "$WORK/fm" && grep -q "documents allowed" "$WORK/log" \
            && ok "$fl, $n ranks: the unsharded index's filtered run" \
            || bad "$fl, $n ranks differs ($(tail -c 300 "$WORK/log"))"
    done
done
grep -q "1 of them name no live document" "$WORK/log" && ok "... unknown ids counted over every rank" \
    || bad "unknown ids not counted ($(head -c 300 "$WORK/log"))"
rm -f "$WORK/fm"
$MPIRUN -n 2 "$TM" search --index "$WORK/shm" --queries "$Q" --where "nosuch > 1" \
    --out "$WORK/fm" >"$WORK/log" 2>&1
[ $? -ne 0 ] && grep -q "rank 1: error: .*nosuch" "$WORK/log" && [ ! -e "$WORK/fm" ] \
    && ok "--where naming no column: each rank's error, no run" || bad "bad --where ($(head -c 300 "$WORK/log"))"
$MPIRUN -n 2 "$TM" search --index "$WORK/sh" --queries "$Q" --where "year > 1" \
    --out "$WORK/fm" >"$WORK/log" 2>&1
[ $? -ne 0 ] && grep -q "has no metadata" "$WORK/log" && [ ! -e "$WORK/fm" ] \
    && ok "--where on shards without metadata: refused, no run" || bad "no metadata ($(head -c 300 "$WORK/log"))"
rm -rf "$WORK/shm" "$WORK/onem"

# sparse and hybrid (--mode sparse|hybrid): the ranks sum their shards' BM25 statistics
# (MPI_Allreduce), search their shards with the sums, rank 0 merges by exact score and,
# for hybrid, fuses: the run of one-process `tartan search --mode sparse|hybrid` over the
# same index, byte for byte (texts: skewed words, so scores tie and terms are rare)
"$PY" - "$WORK" <<'PY'
import json, random, sys
w = sys.argv[1]
rng = random.Random(5)
words = ["w%d" % i for i in range(40)]
def text(n):
    return " ".join(words[min(39, int(rng.paretovariate(1.2) * 2))] for _ in range(n))
with open(w + "/c.text.tsv", "w") as f, open(w + "/sp.jsonl", "w") as g:
    for i in open(w + "/c.ids.txt").read().split():
        f.write("%s\t%s\n" % (i, text(1 + rng.randrange(25))))
        t = {rng.choice(words): round(rng.uniform(0.05, 5.0), 3) for _ in range(1 + rng.randrange(10))}
        g.write(json.dumps({"id": i, "terms": t}) + "\n")
with open(w + "/q.tsv", "w") as f, open(w + "/sq.jsonl", "w") as g:
    for j, q in enumerate(open(w + "/c.qids.txt").read().split()):
        if j == 4:
            continue  # a dense query without a sparse one: its dense list alone
        f.write("%s\t%s\n" % (q, text(1 + rng.randrange(4)) if j != 7 else "nosuchword"))
        t = {rng.choice(words): round(rng.uniform(0.5, 2), 2) for _ in range(1 + rng.randrange(4))}
        g.write(json.dumps({"id": q, "terms": t}) + "\n")
PY
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 --shards 3 \
    --bm25 --text "$WORK/c.text.tsv" --out "$WORK/bm" >/dev/null 2>&1 || bad "build --shards 3 --bm25"
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 \
    --bm25 --text "$WORK/c.text.tsv" --out "$WORK/bm1" >/dev/null 2>&1 || bad "build --bm25"
"$T" build --vectors "$V" --doclens "$L" --ids "$WORK/c.ids.txt" --centroids 32 --shards 3 \
    --sparse "$WORK/sp.jsonl" --out "$WORK/ws" >/dev/null 2>&1 || bad "build --shards 3 --sparse"
QV="--queries $Q --query-ids $WORK/c.qids.txt"
same_mpi() { # DESC RANKS INDEX ARGS...: tartan search and tartan-mpi search, the same run
    d=$1 n=$2 x=$3
    shift 3
    rm -f "$WORK/s1" "$WORK/s2"
    "$T" search --index "$x" --k 15 "$@" --out "$WORK/s1" >"$WORK/log" 2>&1 \
        || bad "$d: tartan search failed ($(tail -c 300 "$WORK/log"))"
    $MPIRUN -n "$n" "$TM" search --index "$x" --k 15 --batch 5 "$@" --out "$WORK/s2" \
        >"$WORK/log" 2>&1
    [ -s "$WORK/s1" ] && cmp -s "$WORK/s1" "$WORK/s2" \
        && ok "$d, $n ranks: the one-process run ($(wc -l <"$WORK/s1") lines)" \
        || bad "$d, $n ranks: runs differ ($(tail -c 300 "$WORK/log"))"
}
same_mpi "BM25 sparse" 2 "$WORK/bm" --mode sparse --queries "$WORK/q.tsv"
same_mpi "BM25 sparse (rank 3 opens no shard)" 4 "$WORK/bm" --mode sparse --query-text "$WORK/q.tsv" --k1 1.2 --b 0.75
same_mpi "BM25 hybrid, exhaustive dense" 2 "$WORK/bm" --mode hybrid $QV --query-text "$WORK/q.tsv" --dense-mode exhaustive
grep -q "1 of 23 queries have no sparse query" "$WORK/log" && ok "... a dense query without a sparse one: warned" \
    || bad "no warning for the query without a sparse one"
same_mpi "BM25 hybrid, plaid dense, alpha 0.2, depth 30" 3 "$WORK/bm" --mode hybrid $QV --query-text "$WORK/q.tsv" --alpha 0.2 --fusion-depth 30
same_mpi "hybrid, --sparse-queries, rrf" 2 "$WORK/bm" --mode hybrid $QV --sparse-queries "$WORK/sq.jsonl" --fusion rrf --dense-mode exhaustive
same_mpi "hybrid with --filter-ids" 2 "$WORK/bm" --mode hybrid $QV --query-text "$WORK/q.tsv" --dense-mode exhaustive --filter-ids "$WORK/even.ids"
same_mpi "weights (--sparse) sparse" 2 "$WORK/ws" --mode sparse --sparse-queries "$WORK/sq.jsonl"
same_mpi "weights hybrid" 3 "$WORK/ws" --mode hybrid $QV --sparse-queries "$WORK/sq.jsonl"
same_mpi "a plain BM25 index: hybrid" 2 "$WORK/bm1" --mode hybrid $QV --query-text "$WORK/q.tsv"
# an index without sparse postings: named by every rank that serves a shard, every rank
# exits non-zero (no hang: bounded by timeout), no run
rm -f "$WORK/x.run"
timeout 120 $MPIRUN -n 4 "$TM" search --index "$WORK/sh" --mode hybrid $QV --query-text "$WORK/q.tsv" \
    --out "$WORK/x.run" >"$WORK/log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c "error: $WORK/sh has no sparse postings" "$WORK/log")" -eq 3 ] \
    && [ ! -e "$WORK/x.run" ] && ok "an index without sparse postings: named by each rank, no run" \
    || bad "no sparse postings: exit $rc, $(head -c 300 "$WORK/log")"
rm -f "$WORK/x.run"
TARTAN_MPI_FAULT=search-error:1:1 timeout 120 $MPIRUN -n 2 "$TM" search --index "$WORK/bm" --mode sparse \
    --queries "$WORK/q.tsv" --batch 5 --out "$WORK/x.run" >"$WORK/log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1: error: injected" "$WORK/log" && [ -z "$(ls "$WORK" | grep x.run)" ] \
    && ok "sparse: rank 1 fails at batch 1: named, no run" || bad "sparse fault: exit $rc, $(head -c 300 "$WORK/log")"
# shards of two kinds (shard 1 of the weights index in the BM25 one): one process refuses
# them; so do 2 ranks, each of which sees one kind only
cp -r "$WORK/bm" "$WORK/mix" && rm -r "$WORK/mix/shard-0001" && cp -r "$WORK/ws/shard-0001" "$WORK/mix/"
timeout 120 $MPIRUN -n 2 "$TM" search --index "$WORK/mix" --mode sparse --queries "$WORK/q.tsv" \
    --out "$WORK/x.run" >"$WORK/log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "error: $WORK/mix: the ranks' shards have sparse postings of different kinds" "$WORK/log" \
    && [ ! -e "$WORK/x.run" ] && ok "shards with postings of two kinds on two ranks: refused, no run" \
    || bad "two kinds: exit $rc, $(head -c 300 "$WORK/log")"
rm -rf "$WORK/bm" "$WORK/bm1" "$WORK/ws" "$WORK/mix"

# failures: an error reported by a rank, a rank that dies, a shard that is missing
fails() { # DESC PATTERN FAULT N
    rm -f "$WORK"/f.run*
    TARTAN_MPI_FAULT=$3 timeout 120 $MPIRUN -n $4 "$TM" search --index "$WORK/sh" --queries "$Q" --batch 5 \
        --out "$WORK/f.run" >"$WORK/log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$2" "$WORK/log" && [ -z "$(ls "$WORK" | grep f.run)" ]; then
        ok "$1"
    else
        bad "$1 (exit $rc, $(ls "$WORK" | grep f.run), $(head -c 300 "$WORK/log"))"
    fi
}
fails "rank 2 reports an error at batch 1: named, no run" "rank 2: error: injected" search-error:2:1 3
fails "rank 0 fails at batch 0: named, no run" "rank 0: error: .*injected" search-error:0:0 2
fails "rank 1 dies before batch 2: the job fails, no run" "exit\|terminated\|abort" search-die:1:2 4
fails "rank 2 killed (SIGKILL) at batch 1: the job fails, no run" "signal 9\|Killed" search-kill:2:1 3
"$T" verify "$WORK/sh" >/dev/null 2>&1 && "$T" search --index "$WORK/sh" --queries "$Q" \
    --query-ids "$WORK/c.qids.txt" --k 15 --mode exhaustive --out "$WORK/again" 2>/dev/null \
    && cmp -s "$WORK/again" "$WORK/one.exhaustive" \
    && ok "... the index searched by the failed jobs verifies and gives the same run" \
    || bad "index damaged by a failed distributed search"
cp -r "$WORK/sh" "$WORK/sh2"
rm -r "$WORK/sh2/shard-0002"
TARTAN_MPI_FAULT= $MPIRUN -n 3 "$TM" search --index "$WORK/sh2" --queries "$Q" \
    --out "$WORK/g.run" >"$WORK/log" 2>&1
[ $? -ne 0 ] && grep -q "shard-0002" "$WORK/log" && [ ! -e "$WORK/g.run" ] \
    && ok "a missing shard: named by the rank that serves it, no run" \
    || bad "missing shard ($(head -c 300 "$WORK/log"))"

# distributed build: the files of one-process `tartan build --shards 3` (meta.tt but its
# moment, time and threads; MANIFEST names meta.tt's checksum), for 1..4 ranks
same_tree() { # A B
    (cd "$1" && find . -type f | sort) >"$WORK/t1"; (cd "$2" && find . -type f | sort) >"$WORK/t2"
    cmp -s "$WORK/t1" "$WORK/t2" || return 1
    for f in $(cat "$WORK/t1"); do
        case $f in
        */MANIFEST) ;;
        */meta.tt)
            tail -c +65 "$1/$f" | grep -v '^created=\|^build_seconds=\|^threads=' >"$WORK/m1"
            tail -c +65 "$2/$f" | grep -v '^created=\|^build_seconds=\|^threads=' >"$WORK/m2"
            cmp -s "$WORK/m1" "$WORK/m2" || return 1 ;;
        *) cmp -s "$1/$f" "$2/$f" || return 1 ;;
        esac
    done
}
bargs="--vectors $V --doclens $L --ids $WORK/c.ids.txt --centroids 32 --shards 3"
for n in 1 2 3 4; do
    $MPIRUN -n $n "$TM" build $bargs --out "$WORK/d$n" >"$WORK/log" 2>&1
    same_tree "$WORK/sh" "$WORK/d$n" && "$T" verify "$WORK/d$n/shard-0002" >/dev/null 2>&1 \
        && ok "build by $n ranks: the one-process sharded index, file for file" \
        || bad "build by $n ranks differs ($(tail -c 300 "$WORK/log"))"
    grep -q "k-means distributed over every rank" "$WORK/log" \
        && ok "... its k-means ran on all $n ranks (MPI_Allreduce of the sums)" \
        || bad "build by $n ranks: k-means not distributed ($(tail -c 300 "$WORK/log"))"
done
# distributed k-means with random seeding (k > 256) and 3 ranks, against one process:
# centroids, codec and residuals byte for byte
"$T" build --vectors "$V" --doclens "$L" --centroids 300 --shards 2 --out "$WORK/k1" \
    >/dev/null 2>&1 || bad "build --centroids 300"
for n in 2 3; do
    $MPIRUN -n $n "$TM" build --vectors "$V" --doclens "$L" --centroids 300 --shards 2 \
        --out "$WORK/k$n" >"$WORK/log" 2>&1
    grep -q "k-means distributed" "$WORK/log" && same_tree "$WORK/k1" "$WORK/k$n" \
        && ok "300 centroids, $n ranks: the one-process centroids, codec and codes" \
        || bad "300 centroids, $n ranks differ ($(tail -c 300 "$WORK/log"))"
done
# with --metadata (every rank reads the file; each shard gets its documents' rows): the
# one-process sharded build's files, metadata.tt included
"$T" build $bargs --metadata "$WORK/c.meta.jsonl" --out "$WORK/md1" >/dev/null 2>&1 || bad "build --metadata"
$MPIRUN -n 2 "$TM" build $bargs --metadata "$WORK/c.meta.jsonl" --out "$WORK/md2" >"$WORK/log" 2>&1
[ -e "$WORK/md2/shard-0002/metadata.tt" ] && same_tree "$WORK/md1" "$WORK/md2" \
    && ok "--metadata, 2 ranks: the one-process files, each shard's metadata.tt included" \
    || bad "--metadata under 2 ranks differs ($(tail -c 300 "$WORK/log"))"
head -3 "$WORK/c.meta.jsonl" >"$WORK/short.jsonl"
rm -rf "$WORK/md2"
$MPIRUN -n 2 "$TM" build $bargs --metadata "$WORK/short.jsonl" --out "$WORK/md2" >"$WORK/log" 2>&1
[ $? -ne 0 ] && grep -q "short.jsonl" "$WORK/log" && [ -z "$(ls "$WORK" | grep '^md2')" ] \
    && ok "bad --metadata under 2 ranks: named, nothing published" \
    || bad "bad --metadata under 2 ranks ($(head -c 300 "$WORK/log"))"
rm -rf "$WORK/md1"
# hierarchical k-means (4096 centroids: every large index) on 2..4 ranks: the coarse
# k-means and refine distributed, each fine k-means on one rank; the same files again
"$SYNTH" --out "$WORK/h" --docs 1500 --doclen 1-15 --dim 8 --queries 3 --qlen 4 2>/dev/null
hargs="--vectors $WORK/h.vectors.npy --doclens $WORK/h.doclens.npy --centroids 4096 --shards 2"
"$T" build $hargs --out "$WORK/h1" >/dev/null 2>&1 || bad "build --centroids 4096"
for n in 2 4; do
    $MPIRUN -n $n "$TM" build $hargs --out "$WORK/h$n" >"$WORK/log" 2>&1
    grep -q "k-means distributed" "$WORK/log" && same_tree "$WORK/h1" "$WORK/h$n" \
        && ok "4096 centroids (hierarchical), $n ranks: the one-process centroids, codec and codes" \
        || bad "4096 centroids, $n ranks differ ($(tail -c 300 "$WORK/log"))"
done
# a rank killed (SIGKILL) mid-way through the hierarchical k-means (its 40th reduce: the
# fine clusters' exchange) and mid-way through a flat one (6th: a Lloyd iteration):
# the job ends (no hang: bounded by timeout), nothing is published
for kf in "kmeans-kill:1:40 2 h" "kmeans-kill:2:6 3 c"; do
    set -- $kf
    if [ $3 = h ]; then a=$hargs; else a=$bargs; fi
    rm -rf "$WORK/e"
    TARTAN_MPI_FAULT=$1 timeout 120 $MPIRUN -n $2 "$TM" build $a --out "$WORK/e" >"$WORK/log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "signal 9\|Killed\|terminated" "$WORK/log" \
        && [ ! -e "$WORK/e" ] \
        && ok "$1 of $2 ranks ($3): the job fails, nothing published" \
        || bad "$1: exit $rc, $(ls "$WORK" | grep '^e'), $(head -c 300 "$WORK/log")"
done
rm -rf "$WORK"/h[124] "$WORK"/e.tmp-*
bfails() { # DESC PATTERN FAULT N
    rm -rf "$WORK/e"
    TARTAN_MPI_FAULT=$3 $MPIRUN -n $4 "$TM" build $bargs --out "$WORK/e" >"$WORK/log" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q -- "$2" "$WORK/log" && [ ! -e "$WORK/e" ]; then
        ok "$1"
    else
        bad "$1 (exit $rc, $(ls "$WORK" | grep '^e'), $(head -c 300 "$WORK/log"))"
    fi
}
bfails "rank 1 fails after writing its shard: nothing published" \
    "rank 1: error: injected" build-error:1:2 3
[ -z "$(ls "$WORK" | grep '^e.tmp-')" ] && ok "... and the build directory is removed" \
    || bad "build directory left: $(ls "$WORK" | grep '^e')"
bfails "rank 0 fails while training: nothing published" "rank 0: error: injected" build-error:0:1 4
bfails "rank 2 dies after writing its shard: nothing published" "exit\|terminated\|abort" \
    build-die:2:2 3
$MPIRUN -n 2 "$TM" build $bargs --out "$WORK/e" >"$WORK/log" 2>&1 && same_tree "$WORK/sh" "$WORK/e" \
    && [ -z "$(ls "$WORK" | grep '^e.tmp-')" ] \
    && ok "the next build publishes and removes the dead build's directory" \
    || bad "rebuild after a dead rank ($(ls "$WORK" | grep '^e'))"
# a rank that meets bad input in its slice of the sample (a NaN in document 298):
# every rank fails, the error names the file and document, nothing is published
/usr/bin/python3 -c "
import numpy as np, sys
v = np.load(sys.argv[1]).copy(); l = np.load(sys.argv[2])
v[int(l[:298].sum()), 3] = np.nan; np.save(sys.argv[3], v)" "$V" "$L" "$WORK/nan.npy"
timeout 120 $MPIRUN -n 2 "$TM" build --vectors "$WORK/nan.npy" --doclens "$L" --centroids 32 \
    --shards 3 --out "$WORK/x9" >"$WORK/log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "nan.npy: vector .* (document 298) contains NaN" "$WORK/log" \
    && grep -q "rank 1 failed" "$WORK/log" && [ -z "$(ls "$WORK" | grep '^x9')" ] \
    && ok "NaN in rank 1's slice of the sample: named, every rank fails, nothing left" \
    || bad "NaN in a slice: exit $rc, $(ls "$WORK" | grep '^x9'), $(head -c 400 "$WORK/log")"
# an existing index under --force survives a build whose rank is killed mid-k-means
cp -r "$WORK/one" "$WORK/keep"
TARTAN_MPI_FAULT=kmeans-kill:1:7 timeout 120 $MPIRUN -n 2 "$TM" build $bargs --force \
    --out "$WORK/one" >"$WORK/log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && diff -r "$WORK/keep" "$WORK/one" >/dev/null \
    && "$T" verify "$WORK/one" >/dev/null 2>&1 \
    && ok "--force over an index, a rank killed mid-k-means: the index is untouched" \
    || bad "--force, killed rank: exit $rc, index changed or broken"
rm -rf "$WORK/keep" "$WORK"/one.tmp-*
finish

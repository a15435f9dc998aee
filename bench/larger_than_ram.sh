#!/bin/sh
# An index far larger than the memory of the process that serves it (doc/scale.md,
# "Larger than RAM"; heavy, opt-in). Builds an index of LTR_DOCS documents x 32 vectors
# x LTR_DIM dims at LTR_NBITS bits (float16 input written by numpy: clustered vectors),
# then searches it inside a memory cgroup limited to LTR_MEM (cgroup v1 memory
# controller under /sys/fs/cgroup, created and removed here; page cache counts
# against the limit), with O_DIRECT io_uring reads so that no page cache of earlier
# runs serves them. Reports the residuals' size against the limit, QPS and p50/p99
# (tartan search), the peak RSS (/usr/bin/time %M) and the cgroup's peak memory, the
# bytes the search process read from the device per query (ru_inblock, /usr/bin/time
# %I) and the device's read requests per query (/proc/diskstats: the whole machine's,
# an upper bound on a shared machine), and, in
# the same run, fio's random-read IOPS on the residual file (O_DIRECT, io_uring, 16 KiB
# = one document's residuals at the default size, queue depth 64).
#   bench/larger_than_ram.sh [BUILDDIR]
# Environment: LTR_DIR (/tmp/tartan-ltr; ~10 GB, removed at the end unless LTR_KEEP=1),
# LTR_DOCS (120000), LTR_DIM (1024), LTR_NBITS (4), LTR_CENTROIDS (4096), LTR_MEM
# (384M), LTR_QUERIES (300), LTR_THREADS (2), LTR_SEARCH_THREADS (4).
set -eu
B=$(cd "${1:-.}" && pwd)
S=$(cd "$(dirname "$0")" && pwd)
W=${LTR_DIR:-/tmp/tartan-ltr}
docs=${LTR_DOCS:-120000}
dim=${LTR_DIM:-1024}
nbits=${LTR_NBITS:-4}
cents=${LTR_CENTROIDS:-4096}
mem=${LTR_MEM:-384M}
nq=${LTR_QUERIES:-300}
threads=${LTR_THREADS:-2}
sthreads=${LTR_SEARCH_THREADS:-4}
PY=/usr/bin/python3
CG=tartan-ltr-$$
MEMCG=/sys/fs/cgroup/memory/$CG
cleanup() {
    [ -d "$MEMCG" ] && rmdir "$MEMCG" 2>/dev/null || true
    [ "${LTR_KEEP:-0}" = 1 ] || rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W"
echo "larger_than_ram: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB RAM; $(date -u)"
if [ ! -f "$W/v.npy" ]; then
    echo "larger_than_ram: writing $docs x 32 x $dim float16 vectors to $W"
    "$PY" - "$W" "$docs" "$dim" "$nq" <<'PYEOF'
import sys, numpy as np
w, docs, dim, nq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
L = 32
rng = np.random.default_rng(5)
topics = rng.standard_normal((512, dim)).astype(np.float32)
v = np.lib.format.open_memmap(f"{w}/v.npy", mode="w+", dtype=np.float16, shape=(docs * L, dim))
step = 2000
for d0 in range(0, docs, step):
    d1 = min(docs, d0 + step)
    t = rng.integers(0, 512, size=(d1 - d0, 4))
    base = topics[t[:, rng.integers(0, 4, size=L)]]  # (docs, L, dim): each vector one of the doc's 4 topics
    x = base + 0.7 * rng.standard_normal(base.shape, dtype=np.float32)
    v[d0 * L:d1 * L] = x.reshape(-1, dim).astype(np.float16)
v.flush()
np.save(f"{w}/l.npy", np.full(docs, L, dtype=np.int32))
qd = rng.choice(docs, size=nq, replace=False)
q = np.stack([v[d * L:(d + 1) * L].astype(np.float32) for d in qd])
q += 0.3 * rng.standard_normal(q.shape, dtype=np.float32)
np.save(f"{w}/q.npy", q.astype(np.float32))
PYEOF
fi
if [ ! -f "$W/idx/MANIFEST" ]; then
    rm -rf "$W/idx"
    echo "larger_than_ram: build --nbits $nbits --centroids $cents --threads $threads"
    /usr/bin/time -f "build: wall %e s, user %U s, maxrss %M KiB" "$B/tartan" build \
        --vectors "$W/v.npy" --doclens "$W/l.npy" --nbits "$nbits" --centroids "$cents" \
        --threads "$threads" --memory 2G --out "$W/idx"
fi
res=$(stat -c %s "$W/idx/residuals.tt")
case $mem in
    *G) memb=$(( ${mem%G} * 1073741824 )) ;;
    *M) memb=$(( ${mem%M} * 1048576 )) ;;
    *) echo "LTR_MEM must end in M or G" >&2; exit 2 ;;
esac
echo "larger_than_ram: residuals $((res / 1048576)) MiB = $(echo "$res $memb" | awk '{printf "%.2f", $1 / $2}') x the search cgroup's limit ($mem)"

# fio first, in the same run: what the device gives to 16 KiB random reads.
fio --name=ltr --filename="$W/idx/residuals.tt" --readonly --rw=randread --bs=16k \
    --direct=1 --ioengine=io_uring --iodepth=64 --runtime=15 --time_based \
    --output-format=terse --terse-version=3 >"$W/fio.out" 2>&1 || cat "$W/fio.out"
# terse v3: field 8 read iops, 7 read bandwidth KiB/s, 40 read clat mean (usec)
awk -F';' '{printf "fio randread 16KiB qd64 O_DIRECT: %d IOPS, %.1f MiB/s, mean latency %.0f us\n", $8, $7 / 1024, $40}' "$W/fio.out"
fio --name=ltr1 --filename="$W/idx/residuals.tt" --readonly --rw=randread --bs=16k \
    --direct=1 --ioengine=io_uring --iodepth=1 --runtime=10 --time_based \
    --output-format=terse --terse-version=3 >"$W/fio1.out" 2>&1 || cat "$W/fio1.out"
awk -F';' '{printf "fio randread 16KiB qd1 O_DIRECT: %d IOPS, mean latency %.0f us\n", $8, $40}' "$W/fio1.out"

# The search, inside the memory cgroup.
mkdir "$MEMCG"
echo "$memb" >"$MEMCG/memory.limit_in_bytes"
for mode in plaid exhaustive; do
    [ $mode = exhaustive ] && q=5 || q=$nq
    "$PY" -c "import numpy as np; q = np.load('$W/q.npy'); np.save('$W/q$q.npy', q[:$q])"
    echo 0 >"$MEMCG/memory.max_usage_in_bytes" 2>/dev/null || true
    dev=$(df --output=source "$W" | tail -1 | sed 's|/dev/||')
    d0=$(awk -v d="$dev" '$3 == d {print $4, $6}' /proc/diskstats)
    sh -c "echo \$\$ >$MEMCG/cgroup.procs; exec /usr/bin/time -f 'time: inblock %I maxrss_kib %M wall %e' \
        $B/tartan search --index $W/idx --queries $W/q$q.npy --k 10 --mode $mode --direct \
        --latency --threads $sthreads --out $W/run.$mode" 2>&1 | grep -v "^tartan search: note" | tee "$W/s.log"
    d1=$(awk -v d="$dev" '$3 == d {print $4, $6}' /proc/diskstats)
    inb=$(sed -n 's/^time: inblock \([0-9]*\).*/\1/p' "$W/s.log")
    peak=$(cat "$MEMCG/memory.max_usage_in_bytes")
    echo "larger_than_ram: $mode: $q queries; the search process read $((inb / 2048)) MiB from the" \
        "device (ru_inblock) = $(echo "$inb $q" | awk '{printf "%.0f KiB = %.1f 16-KiB documents", $1 / 2 / $2, $1 / 32 / $2}') per query;" \
        "device $dev (whole machine, /proc/diskstats): $(echo "$d0 $d1 $q" | awk '{printf "%.1f read requests, %.0f KiB", ($3 - $1) / $5, ($4 - $2) / 2 / $5}') per query;" \
        "cgroup peak memory $((peak / 1048576)) MiB of $mem"
done

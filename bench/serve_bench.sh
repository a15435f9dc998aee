#!/bin/sh
# tartan serve under load (doc/benchmarks.md, "tartan serve"): on one collection made by
# tartan-synth, in the same run,
#   1. the library directly: `tartan search` over the same queries on 1 and on T threads
#      (p50/p99 per query, QPS);
#   2. the server on loopback, one query per request, with wrk (bench/serve_bench.lua)
#      at 1, 8 and 64 connections for SECS seconds each: QPS and p50/p99 per request, with
#      the queries as JSON lists (the required form) and as base64 float32;
#   3. optionally (RSS_SECS > 0) RSS of the server sampled every 5 s during a long run
#      at 8 connections: it must stay flat.
# usage: bench/serve_bench.sh BUILDDIR WORKDIR PREFIX [SECS]
#   PREFIX: tartan-synth output in WORKDIR (PREFIX.queries.npy, ...); the index
#   WORKDIR/PREFIX.idx is built if missing. Example (doc/benchmarks.md's 20k collection):
#     build/tartan-synth --out W/s20k --docs 20000 --doclen 30 --dim 128 --queries 1000 \
#         --qlen 32 --noise 0.3 --qnoise 0.2
#     RSS_SECS=300 sh bench/serve_bench.sh build W s20k 20
# Environment: THREADS (server --threads and the library's threaded run, default 2),
# K (default 10), NQ (queries cycled through, default 1000), RSS_SECS (default 0).
set -eu
B=$(cd "$1" && pwd); W=$(cd "$2" && pwd); P=$3; SECS=${4:-20}
THREADS=${THREADS:-2}; K=${K:-10}; NQ=${NQ:-1000}; RSS_SECS=${RSS_SECS:-0}
export OPENBLAS_NUM_THREADS=1
here=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
cd "$W"
if [ ! -f "$P.idx/MANIFEST" ]; then
    "$B/tartan" build --vectors "$P.vectors.npy" --doclens "$P.doclens.npy" --ids "$P.ids.txt" \
        --out "$P.idx" --threads "$THREADS"
fi
echo "== machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

# The request bodies, one query per line: JSON lists and base64 float32.
"$PY" - "$P.queries.npy" "$NQ" "$K" <<'EOF'
import base64, json, sys
import numpy as np
Q = np.load(sys.argv[1]).astype(np.float32)[: int(sys.argv[2])]
k = int(sys.argv[3])
np.save("serve_q.npy", Q)
with open("bodies.json.txt", "w") as f:
    for q in Q:
        f.write(json.dumps({"queries": [q.tolist()], "k": k}) + "\n")
with open("bodies.b64.txt", "w") as f:
    for q in Q:
        f.write(json.dumps({"queries": {"dtype": "float32", "shape": [1] + list(q.shape),
                "data": base64.b64encode(q.astype("<f4").tobytes()).decode()}, "k": k}) + "\n")
EOF

echo "== library: tartan search, $NQ queries, k = $K"
for t in 1 "$THREADS"; do
    "$B/tartan" search --index "$P.idx" --queries serve_q.npy --k "$K" --out /dev/null \
        --threads "$t" 2>&1 | grep 'QPS' | sed "s/^/threads $t: /"
done

"$B/tartan" serve --index "$P=$P.idx" --listen 127.0.0.1:0 --threads "$THREADS" --queue 256 \
    >serve.out 2>serve.err &
spid=$!
trap 'kill -TERM $spid 2>/dev/null' EXIT
i=0
while ! grep -q 'listening on' serve.out 2>/dev/null; do
    sleep 0.1; i=$((i + 1)); [ $i -lt 300 ] || { cat serve.err; exit 1; }
done
URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' serve.out)
echo "== server: $URL, --threads $THREADS; wrk $SECS s per row"
for form in json b64; do
    for c in 1 8 64; do
        t=$([ "$c" -ge 2 ] && echo 2 || echo 1)
        BODIES="bodies.$form.txt" INDEX="$P" wrk -t "$t" -c "$c" -d "${SECS}s" --timeout 30s \
            -s "$here/serve_bench.lua" "$URL" 2>&1 | grep '^result' | sed "s/^result/$form c=$c/"
    done
    [ "$form" = json ] || break
done
curl -s "$URL/metrics" | grep -E '^tartan_(requests_total\{endpoint="search"|rejected|queries_total)'

if [ "$RSS_SECS" -gt 0 ]; then
    echo "== RSS over $RSS_SECS s at 8 connections (JSON bodies), sampled every 5 s"
    BODIES=bodies.json.txt INDEX="$P" wrk -t 2 -c 8 -d "${RSS_SECS}s" --timeout 30s \
        -s "$here/serve_bench.lua" "$URL" >wrk_rss.out 2>&1 &
    wpid=$!
    : >rss.txt
    while kill -0 $wpid 2>/dev/null; do
        awk -v t="$(date +%s)" '/^(VmRSS|RssAnon|RssFile):/ {printf "%s %s ", $1, $2} END {print "t=" t}' \
            "/proc/$spid/status" >>rss.txt
        sleep 5
    done
    grep '^result' wrk_rss.out
    "$PY" - <<'EOF'
rows = [dict(zip(l.split()[0::2], l.split()[1::2])) for l in open("rss.txt") if "VmRSS:" in l]
rss = [int(r["VmRSS:"]) / 1024 for r in rows]
anon = [int(r["RssAnon:"]) / 1024 for r in rows]
n = len(rss)
q = max(1, n // 4)
print("samples %d; VmRSS MiB first %.1f, after 1/4 %.1f, last %.1f, max %.1f; RssAnon MiB first "
      "%.1f, after 1/4 %.1f, last %.1f, max %.1f" % (n, rss[0], rss[q], rss[-1], max(rss), anon[0],
                                                       anon[q], anon[-1], max(anon)))
EOF
fi

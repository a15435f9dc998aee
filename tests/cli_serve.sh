#!/bin/sh
# tartan serve (doc/server.md) on loopback: search results identical to tartan search
# (ids and scores, every mode, the search options, JSON / base64 float32 / float16
# queries, text queries through an encoder); add, delete and compact over HTTP; a
# `tartan add` by another process picked up; concurrent clients while the index
# changes (every answer equals the serial one); every 4xx path names its problem; a
# full queue answers 503, a wait longer than --timeout too; /metrics counts what was
# sent; searches keep their snapshot while a (slowed) add publishes, then move on;
# SIGTERM lets a search or an add in flight finish; a busy port and an index that does
# not open are clear start-up errors.
. "${TT_SRCDIR:-.}/tests/lib.sh"
. "${TT_SRCDIR:-.}/tests/bg.sh"
cleanup() {
    kill_bg
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
have_numpy || { echo "numpy missing: skip"; exit 77; }
BD=$(cd "${TT_BUILDDIR:-.}" && pwd)
T="$BD/tartan"
HASH="$BD/tartan-hash-encoder"
export OPENBLAS_NUM_THREADS=1

"$BD/tartan-synth" --out "$WORK/c" --docs 300 --doclen 5-15 --dim 16 --queries 12 --qlen 4 \
    --seed 7 >/dev/null 2>&1
# metadata (doc/metadata.md) for the "where" filter: bucket = row % 10
"$PY" -c 'import sys
for i in range(int(sys.argv[1])): print("{\"bucket\": %d}" % (i % 10))' \
    "$(wc -l <"$WORK/c.ids.txt")" >"$WORK/c.meta.jsonl"
"$T" build --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" --ids "$WORK/c.ids.txt" \
    --out "$WORK/idx" --centroids 32 --threads 2 --keep-originals f16 \
    --metadata "$WORK/c.meta.jsonl" >/dev/null 2>&1 ||
    { bad "build the test index"; finish; }
cp -r "$WORK/idx" "$WORK/idx2"
"$T" build --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" --out "$WORK/plain" \
    --centroids 32 --threads 2 >/dev/null 2>&1 || { bad "build the index without originals"; finish; }

# start_server OUT ERR ARGS...: launches tartan serve on a free port; sets spid, URL.
start_server() {
    so=$1; se=$2; shift 2
    launch "$so" "$se" -- "$T" serve --listen 127.0.0.1:0 "$@"
    spid=$lpid
    wait_for 20 "$spid" grep -q 'listening on' "$so" 2>/dev/null
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$so")
}
stop_server() { # PID: SIGTERM, then its exit status in $wrc
    kill -TERM "$1" 2>/dev/null
    wait_pid "$1" 30
}

start_server "$WORK/s1.out" "$WORK/s1.err" --index "$WORK/idx" --index other="$WORK/idx2" \
    --index "$WORK/plain/" \
    --threads 2 --max-body 256K --max-queries 64 --max-query-vectors 32 --max-k 100 \
    --refresh-ms 0 --encoder "$HASH --dim 16"
if [ -z "$URL" ]; then
    bad "serve starts and prints its address ($(head -c 400 "$WORK/s1.err"))"
    finish
fi
ok "serve listens on $URL"

# The checks are in one Python client (standard library + numpy): one line per case.
cat >"$WORK/client.py" <<'EOF'
import base64, http.client, json, os, subprocess, sys, threading, urllib.parse
import numpy as np

url, work, T = sys.argv[1], sys.argv[2], sys.argv[3]
u = urllib.parse.urlparse(url)
results = []
import time
t_start = time.time()
def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what + " [%.2f s]" % (time.time() - t_start), flush=True)

def req(method, path, body=None, raw=None, headers=None):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    c.request(method, path, body=data, headers=headers or {})
    r = c.getresponse()
    out = r.read()
    c.close()
    try:
        j = json.loads(out)
    except ValueError:
        j = out.decode(errors="replace")
    return r.status, j

Q = np.load(work + "/c.queries.npy").astype(np.float32)   # [nq, 4, 16]
qids = open(work + "/c.qids.txt").read().split()
nq = Q.shape[0]

def cli_run(args):
    out = work + "/run.jsonl"
    subprocess.run([T, "search", "--index", work + "/idx", "--queries", work + "/c.queries.npy",
                    "--query-ids", work + "/c.qids.txt", "--out", out, "--jsonl"] + args,
                   check=True, stderr=subprocess.DEVNULL)
    runs = [json.loads(l) for l in open(out)]
    return [[(h["docid"], h["score"]) for h in r["results"]] for r in runs]

def srv_results(j):
    return [[(h["id"], h["score"]) for h in r] for r in j["results"]]

# 1. the required form, every mode, identical ids and scores
for mode, k in (("plaid", 10), ("exhaustive", 10), ("exact", 7)):
    want = cli_run(["--mode", mode, "--k", str(k)])
    st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": k, "mode": mode})
    got = srv_results(j) if st == 200 else j
    ok(st == 200 and got == want and len(got) == nq and all(len(r) == k for r in got),
       "search %s k=%d: %d queries, ids and scores identical to tartan search" % (mode, k, nq))
    if mode == "plaid":
        plaid_want = want

# default k and mode: {"queries", "k"} only
st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10})
ok(st == 200 and srv_results(j) == plaid_want and set(j) >= {"results"},
   "the required form {queries, k} answers {results: [[{id, score}]]} in query order")

# 2. every search option passes through
opts = {"nprobe": 4, "ndocs": 64, "rerank": "fixed", "score": "mean", "pruning": "relative",
        "prune_ratio": 0.3}
want = cli_run(["--nprobe", "4", "--ndocs", "64", "--rerank", "fixed", "--score", "mean",
                "--pruning", "relative", "--prune-ratio", "0.3", "--k", "5"])
st, j = req("POST", "/indexes/idx/search", dict(opts, queries=Q.tolist(), k=5))
ok(st == 200 and srv_results(j) == want, "nprobe, ndocs, rerank, score, pruning, prune_ratio as tartan search's")
want = cli_run(["--threshold", "0.3", "--k", "5"])
st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 5, "threshold": 0.3})
ok(st == 200 and srv_results(j) == want, "threshold (absolute pruning) as tartan search's")

# 2b. filters: "where" and "filter_ids" as tartan search --where / --filter-ids
allowed = open(work + "/c.ids.txt").read().split()[::7]
with open(work + "/allowed.txt", "w") as f:
    f.write("\n".join(allowed + ["no-such-doc"]) + "\n")
for mode in ("exhaustive", "plaid"):
    want = cli_run(["--mode", mode, "--k", "10", "--filter-ids", work + "/allowed.txt"])
    st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": mode,
                                                "filter_ids": allowed + ["no-such-doc"]})
    got = srv_results(j) if st == 200 else j
    ok(st == 200 and got == want and all(d in allowed for r in got for d, _ in r)
       and all(len(r) == 10 for r in got), "filter_ids (%s): only those ids, as tartan search --filter-ids" % mode)
    want = cli_run(["--mode", mode, "--k", "10", "--where", "bucket < 3"])
    st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": mode,
                                                "where": "bucket < 3"})
    got = srv_results(j) if st == 200 else j
    rows = {d: i for i, d in enumerate(open(work + "/c.ids.txt").read().split())}
    ok(st == 200 and got == want and all(rows[d] % 10 < 3 for r in got for d, _ in r),
       "where (%s): only matching documents, as tartan search --where" % mode)
want = cli_run(["--mode", "exhaustive", "--k", "10", "--where", "bucket < 3", "--filter-ids",
                work + "/allowed.txt"])
st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": "exhaustive",
                                            "where": "bucket < 3", "filter_ids": allowed})
ok(st == 200 and srv_results(j) == want, "where and filter_ids together: documents allowed by both")
st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "filter_ids": []})
ok(st == 200 and all(r == [] for r in j["results"]), "filter_ids []: no document allowed, 0 results")

# 3. base64 float32 and float16
b32 = {"dtype": "float32", "shape": list(Q.shape), "data": base64.b64encode(Q.astype("<f4").tobytes()).decode()}
st, j = req("POST", "/indexes/idx/search", {"queries": b32, "k": 10})
ok(st == 200 and srv_results(j) == plaid_want, "base64 float32 queries: the same results")
Qh = Q.astype("<f2")
b16 = {"dtype": "float16", "shape": list(Q.shape), "data": base64.b64encode(Qh.tobytes()).decode()}
st1, j1 = req("POST", "/indexes/idx/search", {"queries": b16, "k": 10, "mode": "exhaustive"})
st2, j2 = req("POST", "/indexes/idx/search", {"queries": Qh.astype(np.float32).tolist(), "k": 10, "mode": "exhaustive"})
ok(st1 == 200 and st2 == 200 and j1["results"] == j2["results"], "base64 float16 queries equal their float32 values as JSON")

# 4. text queries through the encoder, as tartan search --encoder
with open(work + "/q.tsv", "w") as f:
    f.write("t1\tthe quick brown fox\nt2\tlazy dogs sleep\n")
r = subprocess.run([T, "search", "--index", work + "/idx", "--encoder", os.environ["HASH"] + " --dim 16",
                    "--queries", work + "/q.tsv", "--out", work + "/t.jsonl", "--jsonl", "--mode", "exhaustive"],
                   stderr=subprocess.DEVNULL)
want = [[(h["docid"], h["score"]) for h in json.loads(l)["results"]] for l in open(work + "/t.jsonl")] if r.returncode == 0 else None
st, j = req("POST", "/indexes/idx/search", {"texts": ["the quick brown fox", "lazy dogs sleep"], "k": 10, "mode": "exhaustive"})
ok(want is not None and st == 200 and srv_results(j) == want, "text queries through --encoder: as tartan search --encoder")

# 5. every 4xx path, each naming its problem
v16 = [0.5] * 16
bad = [
    ("malformed JSON", "/indexes/idx/search", b'{"queries": [[[1, 2', 400, "malformed JSON"),
    ("NaN literal", "/indexes/idx/search", b'{"queries": [[[NaN]]]}', 400, "malformed JSON"),
    ("not an object", "/indexes/idx/search", b'[1, 2]', 400, "JSON object"),
    ("empty body", "/indexes/idx/search", b'', 400, "malformed JSON"),
    ("duplicate key", "/indexes/idx/search", b'{"k": 1, "k": 2}', 400, "duplicate"),
    ("unknown field", "/indexes/idx/search", {"queries": [[v16]], "wher": "x"}, 400, "unknown field 'wher'"),
    ("where: bad SQL", "/indexes/idx/search", {"queries": [[v16]], "where": "no_such_col > 1"}, 400, "no such column: no_such_col"),
    ("where: a write", "/indexes/idx/search", {"queries": [[v16]], "where": "1); DROP TABLE meta; --"}, 400, "'where'"),
    ("where: not a string", "/indexes/idx/search", {"queries": [[v16]], "where": 3}, 400, "'where' must be"),
    ("where without metadata", "/indexes/plain/search", {"queries": [[v16]], "where": "1"}, 400, "'where'"),
    ("filter_ids: not a list", "/indexes/idx/search", {"queries": [[v16]], "filter_ids": "doc1"}, 400, "'filter_ids' must be"),
    ("filter_ids: id not a string", "/indexes/idx/search", {"queries": [[v16]], "filter_ids": [3]}, 400, "must be a string"),
    ("no queries", "/indexes/idx/search", {"k": 3}, 400, "'queries'"),
    ("empty queries", "/indexes/idx/search", {"queries": []}, 400, "empty"),
    ("query without vectors", "/indexes/idx/search", {"queries": [[]]}, 400, "query 0 has no vectors"),
    ("wrong dimension", "/indexes/idx/search", {"queries": [[v16, [1.0] * 15]]}, 400, "vector 1 has 15 values; the index's dimension is 16"),
    ("not a number", "/indexes/idx/search", {"queries": [[["x"] * 16]]}, 400, "not a number"),
    ("overflows float32", "/indexes/idx/search", {"queries": [[[1e39] * 16]]}, 400, "not a finite float32"),
    ("k = 0", "/indexes/idx/search", {"queries": [[v16]], "k": 0}, 400, "'k' must be"),
    ("k over --max-k", "/indexes/idx/search", {"queries": [[v16]], "k": 101}, 400, "1..100"),
    ("k not whole", "/indexes/idx/search", {"queries": [[v16]], "k": 2.5}, 400, "'k' must be"),
    ("unknown mode", "/indexes/idx/search", {"queries": [[v16]], "mode": "fast"}, 400, "'mode' must be one of"),
    ("bad prune_ratio", "/indexes/idx/search", {"queries": [[v16]], "prune_ratio": 2}, 400, "prune_ratio"),
    ("too many queries", "/indexes/idx/search", {"queries": [[v16]] * 65}, 413, "--max-queries"),
    ("too many vectors", "/indexes/idx/search", {"queries": [[v16] * 33]}, 413, "--max-query-vectors"),
    ("body over --max-body", "/indexes/idx/search", {"queries": [[[0.1234567891] * 16] * 30] * 60}, 413, "--max-body"),
    ("queries and texts", "/indexes/idx/search", {"queries": [[v16]], "texts": ["a"]}, 400, "not both"),
    ("bad base64", "/indexes/idx/search", {"queries": {"dtype": "float32", "shape": [1, 1, 16], "data": "!!!!" * 22}}, 400, "not valid base64"),
    ("base64 short", "/indexes/idx/search", {"queries": {"dtype": "float32", "shape": [1, 2, 16], "data": base64.b64encode(b"\0" * 64).decode()}}, 400, "need 128"),
    ("base64 NaN", "/indexes/idx/search", {"queries": {"dtype": "float32", "shape": [1, 1, 16], "data": base64.b64encode(np.full(16, np.nan, "<f4").tobytes()).decode()}}, 400, "not finite"),
    ("base64 wrong dim", "/indexes/idx/search", {"queries": {"dtype": "float16", "shape": [1, 1, 8], "data": ""}}, 400, "dimension is 16"),
    ("bad dtype", "/indexes/idx/search", {"queries": {"dtype": "int8", "shape": [1, 1, 16], "data": ""}}, 400, "'dtype'"),
    ("exact without originals", "/indexes/plain/search", {"queries": [[v16]], "mode": "exact"}, 400, "exact mode needs the original vectors"),
    ("unknown index", "/indexes/nope/search", {"queries": [[v16]]}, 404, "no index named 'nope'"),
    ("unknown endpoint", "/indexes/idx/frobnicate", {}, 404, "no such endpoint"),
    ("add: duplicate id", "/indexes/idx/add", {"documents": [{"id": "fresh", "vectors": [v16]}, {"id": "doc1", "vectors": [v16]}]}, 409, "document 1: id 'doc1' is already in the index"),
    ("add: id with a space", "/indexes/idx/add", {"documents": [{"id": "a b", "vectors": [v16]}]}, 400, "whitespace"),
    ("add: ids on some documents only", "/indexes/idx/add", {"documents": [{"id": "a", "vectors": [v16]}, {"vectors": [v16]}]}, 400, "every document"),
    ("add: wrong dimension", "/indexes/idx/add", {"documents": [{"id": "a", "vectors": [[1.0] * 3]}]}, 400, "dimension is 16"),
    ("add: no documents", "/indexes/idx/add", {"upsert": True}, 400, "'documents'"),
    ("delete: no ids", "/indexes/idx/delete", {"ids": []}, 400, "'ids'"),
    ("delete: id not a string", "/indexes/idx/delete", {"ids": [3]}, 400, "must be a string"),
    ("delete strict: unknown id", "/indexes/idx/delete", {"ids": ["no-such-doc"], "strict": True}, 404, "no-such-doc"),
    ("compact: unknown field", "/indexes/idx/compact", {"retrain": True, "x": 1}, 400, "unknown field 'x'"),
]
for what, path, body, want_st, want_msg in bad:
    if isinstance(body, bytes):
        st, j = req("POST", path, raw=body)
    else:
        st, j = req("POST", path, body)
    msg = j["error"]["message"] if isinstance(j, dict) and "error" in j else str(j)
    ok(st == want_st and isinstance(j, dict) and j["error"]["status"] == want_st and want_msg in msg,
       "%s: %d (got %d: %s)" % (what, want_st, st, msg[:160]))
st, j = req("GET", "/indexes/idx/search")
ok(st == 405 and "POST" in j["error"]["message"], "GET on search: 405 naming POST")
st, j = req("POST", "/health")
ok(st == 405, "POST on health: 405")
st, j = req("POST", "/indexes/other/search", raw=b'{"queries": [[' + b'[1,' * 20000 + b']]]}')
ok(st in (400, 413) and "error" in j, "deeply nested JSON: a 4xx, no crash (%d)" % st)
# 413 before the body is read, from Content-Length
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
c.putrequest("POST", "/indexes/idx/search")
c.putheader("Content-Length", str(1 << 30))
c.endheaders()
r = c.getresponse()
j = json.loads(r.read())
c.close()
ok(r.status == 413 and "--max-body" in j["error"]["message"], "Content-Length over --max-body: 413 before the body")

# 6. info, health, indexes
st, info = req("GET", "/indexes/idx/info")
ok(st == 200 and info["dim"] == 16 and info["num_docs"] == 300 and info["live_docs"] == 300 and info["exact_available"], "info: dim, documents")
ok(info["pool_factor"] == 1 and info["pool_global"] == 0 and info["pool_threshold"] == 0, "info: not pooled")
g0 = info["generation"]
st, j = req("GET", "/health")
ok(st == 200 and j["status"] == "ok" and j["indexes"] == 3, "health")
st, j = req("GET", "/indexes")
ok(st == 200 and [x["name"] for x in j["indexes"]] == ["idx", "other", "plain"]
   and not j["indexes"][2]["exact_available"], "indexes lists the three names")

# 7. add, search finds it, delete, gone; generations advance
qv = Q[0].tolist()
st, j = req("POST", "/indexes/idx/add", {"documents": [{"id": "new-a", "vectors": qv}, {"id": "new-b", "vectors": [qv[0]]}]})
ok(st == 200 and j["added"] == 2 and j["generation"] == g0 + 1 and j["live_docs"] == 302, "add two documents: generation %d -> %d" % (g0, j.get("generation", -1)))
st, j = req("POST", "/indexes/idx/search", {"queries": [qv], "k": 3, "mode": "exhaustive"})
top = srv_results(j)[0] if st == 200 else []
q = Q[0] / np.linalg.norm(Q[0], axis=1, keepdims=True)
ok(st == 200 and top[0][0] == "new-a" and j["generation"] == g0 + 1, "the added document is found at once (%s)" % (top[:1],))
st, j = req("POST", "/indexes/idx/add", {"documents": [{"id": "new-a", "vectors": [qv[1]]}], "upsert": True})
ok(st == 200 and j["replaced"] == 1 and j["live_docs"] == 302, "upsert replaces")
st, j = req("POST", "/indexes/idx/delete", {"ids": ["new-a", "new-b", "never-was"]})
ok(st == 200 and j["deleted"] == 2 and j["unknown"] == 1 and j["live_docs"] == 300, "delete two, one unknown")
st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": "exhaustive"})
ok(st == 200 and not any(h[0].startswith("new-") for r in srv_results(j) for h in r), "deleted documents are gone")
st, j = req("POST", "/indexes/idx/add", {"documents": [{"vectors": [qv[2]]}]})
ok(st == 200 and j["added"] == 1, "add without ids: a new number")
st, j = req("POST", "/indexes/idx/compact", {})
ok(st == 200 and j["segments"] == 1, "compact: one segment")
g1 = j["generation"]

# 8. a change by another process is picked up
ext = np.ascontiguousarray(-Q[1], dtype=np.float32)
np.save(work + "/ext.npy", ext)
np.save(work + "/ext.doclens.npy", np.array([ext.shape[0]], dtype=np.int64))
open(work + "/ext.ids", "w").write("ext-doc\n")
subprocess.run([T, "add", "--index", work + "/idx", "--vectors", work + "/ext.npy", "--doclens",
                work + "/ext.doclens.npy", "--ids", work + "/ext.ids"], check=True, stdout=subprocess.DEVNULL)
st, j = req("POST", "/indexes/idx/search", {"queries": [(-Q[1]).tolist()], "k": 1, "mode": "exact"})
ok(st == 200 and j["generation"] == g1 + 1 and srv_results(j)[0][0][0] == "ext-doc", "tartan add by another process: seen by the next search")

# 9. concurrent clients while the index changes: every answer is the serial one
base_st, base = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": "exhaustive"})
want = base["results"]
errors, gens = [], set()
def client(n):
    for _ in range(n):
        st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": "exhaustive"})
        if st != 200 or j["results"] != want:
            errors.append((st, str(j)[:200]))
        else:
            gens.add(j["generation"])
stop = False
def writer():
    i = 0
    while not stop:
        # far from every query: the negated vectors of query 2
        st, j = req("POST", "/indexes/idx/add", {"documents": [{"id": "w%d" % i, "vectors": (-Q[2]).tolist()}]})
        if st != 200:
            errors.append(("add", st, str(j)[:200]))
        i += 1
    st, j = req("POST", "/indexes/idx/compact")
    if st != 200:
        errors.append(("compact", st, str(j)[:200]))
ths = [threading.Thread(target=client, args=(15,)) for _ in range(6)]
w = threading.Thread(target=writer)
w.start()
for t in ths: t.start()
for t in ths: t.join()
stop = True
w.join()
ok(not errors and len(gens) >= 2, "6 clients x 15 searches during adds: all identical to the serial answer, %d generations seen (%s)" % (len(gens), errors[:2]))
st, j = req("POST", "/indexes/idx/search", {"queries": Q.tolist(), "k": 10, "mode": "exhaustive"})
ok(st == 200 and j["results"] == want and j["generation"] > max(gens), "after the compaction: same answer, newer generation")

# 10. metrics count what was sent
st, m = req("GET", "/metrics")
lines = {l.rsplit(" ", 1)[0]: float(l.rsplit(" ", 1)[1]) for l in m.splitlines() if l and not l.startswith("#")}
st2, info = req("GET", "/indexes/idx/info")
n4 = sum(1 for b in bad if b[1].endswith("/search")) + 3  # + GET 405, nested, Content-Length
ok(lines.get('tartan_index_generation{index="idx"}') == info["generation"]
   and lines.get('tartan_requests_total{endpoint="search",code="4xx"}') == n4
   and lines.get('tartan_request_duration_seconds_count{endpoint="add"}', 0) >= 3
   and lines.get('tartan_request_duration_seconds_bucket{endpoint="search",le="+Inf"}', 0) > 0,
   "metrics: generation gauge, 4xx count of search (%s, want %d), latency histogram" % (lines.get('tartan_requests_total{endpoint="search",code="4xx"}'), n4))
EOF
HASH="$HASH" "$PY" "$WORK/client.py" "$URL" "$WORK" "$T" >"$WORK/client.out" 2>&1
while IFS= read -r line; do
    case $line in
        "ok - "*) ok "${line#ok - }" ;;
        "not ok - "*) bad "${line#not ok - }" ;;
        *) echo "# $line" ;;
    esac
done <"$WORK/client.out"
grep -q '^ok - metrics' "$WORK/client.out" || bad "the client ran to the end"

# A second server on the same port: a clear start-up error.
port=${URL##*:}
"$T" serve --index "$WORK/idx" --listen "127.0.0.1:$port" >"$WORK/o" 2>"$WORK/e"; rc=$?
if [ $rc = 1 ] && grep -q "cannot listen on 127.0.0.1:$port: Address already in use" "$WORK/e"; then
    ok "busy port: exit 1, 'Address already in use'"
else
    bad "busy port (exit $rc: $(head -c 300 "$WORK/e"))"
fi
stop_server "$spid"
if [ "$wrc" = 0 ] && grep -q "stopped" "$WORK/s1.err"; then ok "SIGTERM: exit 0"; else bad "SIGTERM (exit $wrc)"; fi

# Start-up errors: an index that does not open, a bad name, a bad --listen.
expect_fail "missing index: named, exit 1" "index 'nothere' ($WORK/nothere) does not open" \
    "$T" serve --index "$WORK/nothere" --listen 127.0.0.1:0
cp -r "$WORK/idx2" "$WORK/broken"
printf 'garbage' | dd of="$WORK/broken/centroids.tt" bs=1 seek=70 conv=notrunc 2>/dev/null
expect_fail "damaged index: exit 1 naming the file" "centroids.tt" \
    "$T" serve --index b="$WORK/broken" --listen 127.0.0.1:0
"$T" serve --index 'a/b=x' >"$WORK/o" 2>"$WORK/e"; rc=$?
if [ $rc = 2 ] && grep -q "index name 'a/b'" "$WORK/e"; then ok "bad index name: usage error"; else bad "bad index name (exit $rc)"; fi
expect_fail "bad --listen" "cannot listen on\|--listen" "$T" serve --index "$WORK/idx2" --listen 203.0.113.7:1

# A full queue answers 503 at once; SIGTERM lets the request in flight finish.
start_server "$WORK/s2.out" "$WORK/s2.err" --index "$WORK/idx2" --threads 1 --queue 0 --refresh-ms 100
cat >"$WORK/load.py" <<'EOF'
import http.client, json, sys, threading, urllib.parse
import numpy as np
u = urllib.parse.urlparse(sys.argv[1])
what = sys.argv[2]
rng = np.random.default_rng(1)
heavy = json.dumps({"queries": rng.standard_normal((400, 32, 16)).round(3).tolist(), "k": 10,
                    "mode": "exhaustive"}).encode()
def post(out):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    c.request("POST", "/indexes/idx2/search", body=heavy)
    r = c.getresponse()
    b = r.read()
    out.append((r.status, json.loads(b)))
if what == "burst":
    outs = []
    ts = [threading.Thread(target=post, args=(outs,)) for _ in range(6)]
    for t in ts: t.start()
    for t in ts: t.join()
    codes = sorted(s for s, _ in outs)
    busy = [j for s, j in outs if s == 503]
    good = all(len(j["results"]) == 400 for s, j in outs if s == 200)
    print("ok" if 200 in codes and busy and good and "server busy" in busy[0]["error"]["message"]
          else "bad", codes)
else:
    outs = []
    post(outs)
    s, j = outs[0]
    print("ok" if s == 200 and len(j["results"]) == 400 and all(len(r) == 10 for r in j["results"])
          else "bad", s)
EOF
res=$("$PY" "$WORK/load.py" "$URL" burst 2>&1)
case $res in ok*) ok "--threads 1 --queue 0: 6 concurrent searches, some 200, others 503 'server busy' ($res)" ;;
    *) bad "full queue: $res" ;; esac
"$PY" "$WORK/load.py" "$URL" one >"$WORK/inflight.out" 2>&1 &
lp=$!
inflight() { curl -s "$URL/metrics" | grep -q '^tartan_requests_in_flight [2-9]'; }
wait_for 20 "$lp" inflight && seen=1 || seen=0
kill -TERM "$spid"
wait "$lp"
wait_pid "$spid" 30
if grep -q '^ok' "$WORK/inflight.out" && [ "$wrc" = 0 ]; then
    ok "SIGTERM during a search (in flight seen: $seen): it finishes with 200, then exit 0"
else
    bad "SIGTERM in flight: client $(cat "$WORK/inflight.out"), server exit $wrc"
fi
if curl -s -m 5 "$URL/health" >/dev/null 2>&1; then bad "stopped server still answers"; else ok "after SIGTERM: no longer listening"; fi

# Slow changes, made deterministic by tests/faultinject.c (every fsync of the server
# sleeps): searches answer from the old snapshot while an add publishes, then from the
# new one; a request waiting for a slot longer than --timeout gets 503, one that finds
# the queue full gets 503 at once; health skips the queue; SIGTERM during an add lets
# it publish before the server exits.
FI="$BD/tests/.libs/libfaultinject.so"
if [ -f "$FI" ]; then
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" # LD_PRELOAD under ASan
    cp -r "$WORK/idx" "$WORK/slow"
    launch "$WORK/s3.out" "$WORK/s3.err" LD_PRELOAD="$FI" TT_DELAY_FSYNC_MS=250 -- \
        "$T" serve --listen 127.0.0.1:0 --index "$WORK/slow" --threads 2 --queue 1 --timeout 1
    spid=$lpid
    wait_for 20 "$spid" grep -q 'listening on' "$WORK/s3.out" 2>/dev/null
    URL=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$WORK/s3.out")
    cat >"$WORK/slow.py" <<'EOF2'
import http.client, json, sys, threading, time, urllib.parse
import numpy as np
u = urllib.parse.urlparse(sys.argv[1])
Q = np.load(sys.argv[2] + "/c.queries.npy").astype(np.float32)
def req(method, path, body=None):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request(method, path, body=None if body is None else json.dumps(body).encode())
    r = c.getresponse()
    b = r.read()
    c.close()
    return r.status, (json.loads(b) if b.startswith(b"{") else b.decode())
def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what, flush=True)
def inflight():
    st, m = req("GET", "/metrics")
    return int([l for l in m.splitlines() if l.startswith("tartan_requests_in_flight ")][0].split()[1])
# A few queries: the searches made while the first add publishes must end well before
# it does (under ASan all of them took long enough for that add to finish first, and
# the queue cases below found a slot free).
search = {"queries": Q[:4].tolist(), "k": 10, "mode": "exhaustive"}
st, base = req("POST", "/indexes/slow/search", search)
g0 = base["generation"]
outs = {}
def add(name, doc):
    outs[name] = req("POST", "/indexes/slow/add", {"documents": [{"id": doc, "vectors": (-Q[3]).tolist()}]})
a = threading.Thread(target=add, args=("a", "slow-a"))
a.start()
t0 = time.time()
while inflight() < 2 and time.time() - t0 < 10:
    time.sleep(0.01)
during = [req("POST", "/indexes/slow/search", search) for _ in range(3)]
a_running = a.is_alive()
ok(a_running and all(s == 200 and j["generation"] == g0 and j["results"] == base["results"] for s, j in during),
   "3 searches while an add publishes: generation %d, the serial answer (add still running: %s)" % (g0, a_running))
# A second add takes the other slot (it waits for the first one's turn).
b = threading.Thread(target=add, args=("b", "slow-b"))
b.start()
while inflight() < 3 and time.time() - t0 < 10:
    time.sleep(0.01)
res = {}
def queued():
    t = time.time()
    res["q"] = req("POST", "/indexes/slow/search", search) + (time.time() - t,)
c = threading.Thread(target=queued)
c.start()
time.sleep(0.3)
t = time.time()
full = req("POST", "/indexes/slow/search", search)
full_s = time.time() - t
t = time.time()
hst, h = req("GET", "/health")
health_s = time.time() - t
c.join()
qst, qj, qs = res["q"]
ok(qst == 503 and "server busy" in qj["error"]["message"] and 0.9 < qs < 5,
   "both slots busy: a queued search gives up after --timeout 1 with 503 (%d after %.2f s)" % (qst, qs))
ok(full[0] == 503 and full_s < 0.9, "queue full (--queue 1): 503 at once (%d after %.2f s)" % (full[0], full_s))
ok(hst == 200 and health_s < 0.9, "health skips the queue (%.2f s)" % health_s)
a.join()
b.join()
ok(outs["a"][0] == 200 and outs["b"][0] == 200 and outs["b"][1]["generation"] == g0 + 2,
   "both adds published: generation %d" % outs["b"][1].get("generation", -1))
st, j = req("POST", "/indexes/slow/search", search)
ok(st == 200 and j["generation"] == g0 + 2 and j["results"] == base["results"],
   "then searches move to generation %d (same answer: the new documents are far from every query)" % (g0 + 2))
# SIGTERM during an add: it finishes and publishes
e = threading.Thread(target=add, args=("e", "slow-e"))
e.start()
while inflight() < 2 and time.time() - t0 < 30:
    time.sleep(0.01)
print("SIGNAL", flush=True)
sys.stdin.readline()
e.join()
ok(outs["e"][0] == 200 and outs["e"][1]["generation"] == g0 + 3, "SIGTERM during an add: it answers 200, generation %d" % (g0 + 3))
EOF2
    mkfifo "$WORK/go"
    "$PY" "$WORK/slow.py" "$URL" "$WORK" <"$WORK/go" >"$WORK/slow.out" 2>&1 &
    pyp=$!
    exec 7>"$WORK/go"
    wait_for 60 "$pyp" grep -q '^SIGNAL' "$WORK/slow.out"
    kill -TERM "$spid"
    echo >&7
    exec 7>&-
    wait "$pyp"
    wait_pid "$spid" 30
    while IFS= read -r line; do
        case $line in
            "ok - "*) ok "${line#ok - }" ;;
            "not ok - "*) bad "${line#not ok - }" ;;
            SIGNAL) ;;
            *) echo "# $line" ;;
        esac
    done <"$WORK/slow.out"
    gen=$("$T" info --json "$WORK/slow" 2>/dev/null | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["generation"])')
    if [ "$wrc" = 0 ] && grep -q '^ok - SIGTERM during an add' "$WORK/slow.out" &&
        "$T" verify "$WORK/slow" >/dev/null 2>&1; then
        ok "server exits 0 after the add; the index verifies at generation $gen"
    else
        bad "SIGTERM during an add: server exit $wrc, generation $gen"
    fi
else
    echo "# $FI missing: slow-change cases skipped"
fi
finish

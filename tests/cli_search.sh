#!/bin/sh
# tartan search from the command line: TREC and JSON-lines output, the three modes, the
# two residual paths, threads, 2-D queries with --qlens, and bad input (exit codes and
# messages naming the file / query). Needs python3 (no numpy) to edit .npy files.
. "${TT_SRCDIR:-.}/tests/lib.sh"
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }

# Vectors near their topics (PLAID's centroid stages assume residuals small next to the
# centroids, as with real encoders; the synthesizer's default noise is far larger).
"$SYNTH" --out "$WORK/c" --docs 600 --doclen 5-20 --dim 32 --queries 12 --qlen 8 \
    --noise 0.2 --qnoise 0.1 2>/dev/null \
    || { echo "tartan-synth failed"; exit 1; }
Q="$WORK/c.queries.npy"
expect_ok "build" "$T" build --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" \
    --ids "$WORK/c.ids.txt" --out "$WORK/idx" --centroids 64 --threads 2 --keep-originals f16
expect_ok "build without originals" "$T" build --vectors "$WORK/c.vectors.npy" \
    --doclens "$WORK/c.doclens.npy" --out "$WORK/plain" --centroids 64 --threads 2
S() { "$T" search --index "$WORK/idx" --queries "$Q" --query-ids "$WORK/c.qids.txt" "$@"; }

expect_ok "search plaid" S --k 10 --out "$WORK/run.plaid"
# The default is the calibrated search: PLAID, timed query by query, or, where the
# calibration found the scan no dearer (on 600 documents it can, by measured time), one
# pass; the summary says which.
if grep -q "exhaustive k=10 (calibrated" "$WORK/err"; then
    grep -q "searched together in passes over the index" "$WORK/err" \
        && ok "default summary (exhaustive chosen)" || bad "default summary: $(cat "$WORK/err")"
else
    grep -q "p50 .* ms, p95 .* ms, p99 .* ms" "$WORK/err" && grep -q "QPS" "$WORK/err" \
        && ok "latency summary" || bad "latency summary: $(cat "$WORK/err")"
fi
# A PLAID flag forces PLAID, which always reports latency.
expect_ok "search plaid --nprobe 2" S --k 10 --nprobe 2 --out "$WORK/run.np2"
grep -q "p50 .* ms, p95 .* ms, p99 .* ms" "$WORK/err" && grep -q "QPS" "$WORK/err" \
    && grep -q "plaid k=10 nprobe=2" "$WORK/err" \
    && ok "PLAID latency summary" || bad "PLAID latency summary: $(cat "$WORK/err")"
# TREC format: qid Q0 docid rank score tag, 10 per query, ranks 1..10, scores descending.
awk -v ids="$WORK/c.qids.txt" 'BEGIN { while ((getline l < ids) > 0) want[l] = 1 }
    NF != 6 || $2 != "Q0" || $6 != "tartan" || !($1 in want) { bad = 1 }
    { n[$1]++; if ($4 != n[$1]) bad = 1; if ($1 == q && $5 > prev + 1e-6) bad = 1; q = $1; prev = $5 }
    END { for (k in n) if (n[k] != 10) bad = 1; if (length(n) != 12) bad = 1; exit bad }' \
    "$WORK/run.plaid" && ok "TREC run format" || bad "TREC run format: $(head -3 "$WORK/run.plaid")"
[ ! -e "$WORK/run.plaid.tmp" ] && ok "no temporary file left" || bad "temporary file left"

expect_ok "search exhaustive" S --k 10 --mode exhaustive --out "$WORK/run.exh"
grep -q "searched together in passes over the index" "$WORK/err" \
    && ok "exhaustive: one pass, said" || bad "exhaustive summary: $(cat "$WORK/err")"
expect_ok "search exact" S --k 10 --mode exact --out "$WORK/run.exact"
# --latency: the reference modes query by query, timed; the same runs as the one pass.
for m in exhaustive exact; do
    expect_ok "search $m --latency" S --k 10 --mode $m --latency --threads 2 \
        --out "$WORK/run.$m.each"
    grep -q "p50 .* ms" "$WORK/err" && ok "$m --latency: latency summary" \
        || bad "$m --latency summary: $(cat "$WORK/err")"
done
cmp -s "$WORK/run.exh" "$WORK/run.exhaustive.each" && ok "exhaustive: one pass == per query" \
    || bad "exhaustive: the one pass differs from per-query search"
cmp -s "$WORK/run.exact" "$WORK/run.exact.each" && ok "exact: one pass == per query" \
    || bad "exact: the one pass differs from per-query search"
# Against exhaustive search: the same top document for most queries (it is the query's
# target document of the qrels; checked by cli_eval), equal scores for
# the documents both return, and (nothing pruned) the same top 10 when every centroid
# is probed and every candidate kept.
expect_ok "search probing everything" S --k 10 --nprobe 64 --threshold -100 --ndocs 100000 \
    --out "$WORK/run.full"
cat > "$WORK/cmp.py" <<'PYEOF'
import sys
def load(p):
    r = {}
    for line in open(p):
        q, _, d, rank, s, _ = line.split()
        r.setdefault(q, []).append((d, float(s)))
    return r
a, b, mode = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
top1 = sum(a[q][0][0] == b[q][0][0] for q in a) / len(a)
recall = sum(len({d for d, _ in a[q]} & {d for d, _ in b[q]}) for q in a) / (10 * len(a))
print(mode, "top-1 agreement", top1, "recall@10", recall)
for q in a:
    eb = dict(b[q])
    for d, s in a[q]:
        if d in eb:
            assert abs(s - eb[d]) <= 1e-4 * (1 + abs(eb[d])), (q, d, s, eb[d])
assert (recall == 1.0) if mode == "full" else (top1 >= 0.9), (top1, recall)
PYEOF
"$PY" "$WORK/cmp.py" "$WORK/run.plaid" "$WORK/run.exh" default && ok "plaid vs exhaustive" \
    || bad "plaid vs exhaustive"
"$PY" "$WORK/cmp.py" "$WORK/run.full" "$WORK/run.exh" full && ok "unpruned plaid == exhaustive" \
    || bad "unpruned plaid vs exhaustive"

expect_ok "search --io mmap" S --k 10 --io mmap --out "$WORK/run.mmap"
cmp -s "$WORK/run.plaid" "$WORK/run.mmap" && ok "mmap == io_uring" || bad "mmap differs from io_uring"
expect_ok "search --direct" S --k 10 --direct --queue-depth 4 --out "$WORK/run.direct"
cmp -s "$WORK/run.plaid" "$WORK/run.direct" && ok "O_DIRECT == buffered" || bad "O_DIRECT differs"
expect_ok "search --threads 2" S --k 10 --threads 2 --out "$WORK/run.t2"
cmp -s "$WORK/run.plaid" "$WORK/run.t2" && ok "2 threads == 1 thread" || bad "threads differ"
expect_ok "search --k 100 explicit parameters" S --k 100 --nprobe 4 --threshold 0.3 --ndocs 512 \
    --score mean --tag mine --out "$WORK/run.k100"
[ "$(wc -l < "$WORK/run.k100")" -eq 1200 ] && awk '$6 != "mine" { exit 1 }' "$WORK/run.k100" \
    && ok "k=100 run" || bad "k=100 run"
grep -q "nprobe=4 threshold=0.3 ndocs=512" "$WORK/err" && ok "effective parameters shown" \
    || bad "parameters: $(cat "$WORK/err")"

expect_ok "search --jsonl" S --k 5 --jsonl --out "$WORK/run.jsonl"
"$PY" - "$WORK/run.jsonl" "$WORK/run.plaid" <<'PYEOF' && ok "JSON lines" || bad "JSON lines"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
trec = [l.split() for l in open(sys.argv[2])]
assert len(lines) == 12
first = {t[0]: t[2] for t in trec if t[3] == "1"}
for j in lines:
    assert len(j["results"]) == 5 and [r["rank"] for r in j["results"]] == [1, 2, 3, 4, 5]
    assert first[j["qid"]] == j["results"][0]["docid"]
PYEOF
expect_ok "search to stdout" S --k 3 --out -
[ "$(wc -l < "$WORK/out")" -eq 36 ] && ok "stdout run" || bad "stdout run"

# 2-D queries plus --qlens give the same run as the 3-D array.
"$PY" - "$Q" "$WORK" <<'PYEOF'
import ast, struct, sys
raw = open(sys.argv[1], "rb").read()
hl = struct.unpack("<H", raw[8:10])[0]
h = ast.literal_eval(raw[10:10 + hl].decode("latin1"))
n, kq, dim = h["shape"]
data = raw[10 + hl:]
def npy(path, descr, shape, payload):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * (63 - (10 + len(d)) % 64) + "\n"
    open(path, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + payload)
w = sys.argv[2]
npy(w + "/q2d.npy", "<f4", "(%d, %d)" % (n * kq, dim), data)
npy(w + "/qlens.npy", "<i8", "(%d,)" % n, struct.pack("<%dq" % n, *([kq] * n)))
npy(w + "/qlens_bad.npy", "<i8", "(%d,)" % n, struct.pack("<%dq" % n, *([kq] * (n - 1) + [kq + 1])))
nan = bytearray(data); nan[(3 * kq + 2) * dim * 4: (3 * kq + 2) * dim * 4 + 4] = struct.pack("<f", float("nan"))
npy(w + "/qnan.npy", "<f4", "(%d, %d, %d)" % (n, kq, dim), bytes(nan))
half = b"".join(data[(r * dim) * 4: (r * dim + dim // 2) * 4] for r in range(n * kq))
npy(w + "/qdim.npy", "<f4", "(%d, %d, %d)" % (n, kq, dim // 2), half)
PYEOF
expect_ok "2-D queries with --qlens" "$T" search --index "$WORK/idx" --queries "$WORK/q2d.npy" \
    --qlens "$WORK/qlens.npy" --query-ids "$WORK/c.qids.txt" --k 10 --out "$WORK/run.2d"
cmp -s "$WORK/run.plaid" "$WORK/run.2d" && ok "2-D + qlens == 3-D" || bad "2-D + qlens differs"

# Bad input.
expect_fail "query dim != index dim" "qdim.npy.*dimension 16.*32" \
    "$T" search --index "$WORK/idx" --queries "$WORK/qdim.npy" --out "$WORK/x"
expect_fail "NaN in a query" "qnan.npy: query 3" \
    "$T" search --index "$WORK/idx" --queries "$WORK/qnan.npy" --out "$WORK/x"
expect_fail "qlens do not add up" "qlens_bad.npy" "$T" search --index "$WORK/idx" \
    --queries "$WORK/q2d.npy" --qlens "$WORK/qlens_bad.npy" --out "$WORK/x"
expect_fail "2-D without qlens" "q2d.npy.*qlens" \
    "$T" search --index "$WORK/idx" --queries "$WORK/q2d.npy" --out "$WORK/x"
head -n 5 "$WORK/c.qids.txt" > "$WORK/short.txt"
expect_fail "too few query ids" "short.txt" S --query-ids "$WORK/short.txt" --out "$WORK/x"
expect_fail "exact mode without originals" "original" \
    "$T" search --index "$WORK/plain" --queries "$Q" --mode exact --out "$WORK/x"
expect_fail "missing index" "nonexistent" \
    "$T" search --index "$WORK/nonexistent" --queries "$Q" --out "$WORK/x"
[ ! -e "$WORK/x" ] && [ ! -e "$WORK/x.tmp" ] && ok "no run left after errors" || bad "run left"
"$T" search --index "$WORK/idx" --queries "$Q" --k 0 --out "$WORK/x" 2>"$WORK/err"
[ $? -eq 2 ] && grep -q -- "--k" "$WORK/err" && ok "k = 0 is a usage error" || bad "k = 0"
"$T" search --index "$WORK/idx" --queries "$Q" --k -3 --out "$WORK/x" 2>/dev/null
[ $? -eq 2 ] && ok "negative k is a usage error" || bad "negative k"
"$T" search --index "$WORK/idx" --queries "$Q" --mode fast --out "$WORK/x" 2>/dev/null
[ $? -eq 2 ] && ok "unknown mode is a usage error" || bad "unknown mode"
"$T" search --queries "$Q" --out "$WORK/x" 2>/dev/null
[ $? -eq 2 ] && ok "missing --index is a usage error" || bad "missing --index"
"$T" search --help | grep -q -- "--nprobe" && ok "--help" || bad "--help"

# Real ColBERTv2 vectors, when the shared data is there.
NF="${TT_DATA:-}/emb/colbertv2_nanofiqa"
if [ -f "$NF/doc_token_embeddings.npy" ]; then
    expect_ok "nanofiqa build" "$T" build --vectors "$NF/doc_token_embeddings.npy" \
        --doclens "$NF/doclens.npy" --ids "$NF/doc_ids.txt" --out "$WORK/nf" --threads 2
    expect_ok "nanofiqa search" "$T" search --index "$WORK/nf" \
        --queries "$NF/query_token_embeddings.npy" --query-ids "$NF/query_ids.txt" --k 10 \
        --out "$WORK/nf.run"
    # Each document is relevant to one query: the top hit of every query is relevant.
    awk -F'\t' 'NR == FNR { if (FNR > 1) rel[$1 " " $2] = 1; next }
        $4 == 1 { n++; if (($1 " " $3) in rel) hit++ } END { exit !(n == 5 && hit == 5) }' \
        "$NF/qrels.tsv" FS=' ' "$WORK/nf.run" && ok "nanofiqa top hits are relevant" \
        || bad "nanofiqa top hits: $(awk '$4 == 1' "$WORK/nf.run")"
fi
finish

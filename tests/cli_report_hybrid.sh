#!/bin/sh
# `tartan report` with dense, sparse and hybrid columns (D / S / H per variant,
# doc/report.md): on a small random corpus the test makes, every S and H number of the
# report is recomputed from the runs it wrote (tartan eval -c per query, a t-test
# against the same variant's D written here), and the runs themselves equal what
# `tartan search --mode sparse|hybrid` returns on the report's indexes; precomputed
# weights with RRF fusion; the encoder's own sparse parts (--encoder-sparse); index
# reuse; bad input. Then SciFact with the hash encoder
# and --bm25: S reproduces the data README's BM25 nDCG@10 0.661 (exit 77 without it).
. "${TT_SRCDIR:-.}/tests/lib.sh"
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder --dim 16"

"$PY" - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(7)
vocab = ["w%d" % i for i in range(60)]
def text(n):
    return " ".join(rng.choice(vocab[: 8 + rng.randrange(52)]) for _ in range(n))
docs = [{"_id": "d%d" % i, "title": text(2), "text": text(5 + rng.randrange(30))}
        for i in range(200)]
with open(w + "/corpus.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps(d) + "\n")
judged = set()
with open(w + "/queries.jsonl", "w") as f, open(w + "/qrels.tsv", "w") as g, \
        open(w + "/squeries.jsonl", "w") as sq:
    g.write("query-id\tcorpus-id\tscore\n")
    for q in range(30):
        d = docs[rng.randrange(200)]
        words = (d["title"] + " " + d["text"]).split()
        qt = " ".join(rng.choice(words) for _ in range(3)) + " " + text(1)
        f.write(json.dumps({"_id": "q%d" % q, "text": qt}) + "\n")
        for doc in {d["_id"], "d%d" % rng.randrange(200)}:
            g.write("q%d\t%s\t1\n" % (q, doc))
        if q != 4:  # q4 has no sparse query (no sparse hits; its dense list in H)
            terms = {t: round(rng.uniform(0.5, 2.0), 2) for t in qt.split()}
            sq.write(json.dumps({"id": "q%d" % q, "terms": terms}) + "\n")
    # a query without any known term: zero sparse hits, dense still answers in H
    f.write(json.dumps({"_id": "q30", "text": "zzz qqq"}) + "\n")
    g.write("q30\td5\t1\n")
    sq.write(json.dumps({"id": "q30", "terms": {"zzz": 1.0}}) + "\n")
with open(w + "/sparse.jsonl", "w") as f:
    for d in docs:
        ws = (d["title"] + " " + d["text"]).split()
        terms = {t: round(rng.uniform(0.1, 3.0), 3) for t in set(ws)}
        f.write(json.dumps({"id": d["_id"], "terms": terms}) + "\n")
EOF

R() {
    "$T" report --encoder "$HASH" --corpus "$WORK/corpus.jsonl" \
        --query-text "$WORK/queries.jsonl" --qrels "$WORK/qrels.tsv" --k 20 --centroids 16 \
        --threads 2 --variants 2bit --metrics nDCG@10,Recall@20,MRR@10 --latency-queries 5 "$@"
}
expect_ok "report --bm25" R --bm25 --out "$WORK/b"
cp "$WORK/err" "$WORK/err.b"
for f in report.md report.csv report.json; do
    for v in original 2bit; do
        for r in run sparse.run hybrid.run; do
            [ -s "$WORK/b/runs/$v.$r" ] || bad "runs/$v.$r missing"
        done
    done
    [ -s "$WORK/b/$f" ] || bad "$f missing"
done
grep -q '| Variant | nDCG@10 D | nDCG@10 S | nDCG@10 H |' "$WORK/b/report.md" &&
    grep -q 'Paired t-test p-values of sparse (S) and hybrid (H)' "$WORK/b/report.md" &&
    ok "Markdown has D / S / H columns and their p-values" || bad "report.md: $(head -c 600 "$WORK/b/report.md")"

# ck DIR: every S and H number of DIR's report.json against tartan eval of its runs and
# a t-test written here (against the same variant's D), and the CSV against the JSON.
ck() {
    for v in original 2bit; do
        for r in run sparse.run hybrid.run; do
            "$T" eval --qrels "$WORK/qrels.tsv" --run "$WORK/$1/runs/$v.$r" -c --json \
                --per-query --digits 15 -m nDCG@10,Recall@20,MRR@10 \
                >"$WORK/$1.eval.$v.$r.json" 2>/dev/null || bad "tartan eval $v.$r"
        done
    done
    "$PY" - "$WORK" "$1" <<'EOF'
import csv, json, math, sys
w, d = sys.argv[1], sys.argv[2]
rep = json.load(open("%s/%s/report.json" % (w, d)))

def t_pvalue(a, b):  # Student's t density integrated numerically (Simpson)
    dd = [x - y for x, y in zip(a, b)]
    n = len(dd)
    mean = sum(dd) / n
    var = sum((x - mean) ** 2 for x in dd) / (n - 1)
    if var == 0:
        return 1.0 if mean == 0 else 0.0
    t = abs(mean / math.sqrt(var / n))
    nu = n - 1
    c = math.gamma((nu + 1) / 2) / (math.sqrt(nu * math.pi) * math.gamma(nu / 2))
    dens = lambda x: c * (1 + x * x / nu) ** (-(nu + 1) / 2)
    def simpson(g, a, b, N=20000):
        h = (b - a) / N
        return (g(a) + g(b) + sum((4 if i % 2 else 2) * g(a + i * h) for i in range(1, N))) * h / 3
    if t < 1:
        return 1 - 2 * simpson(dens, 0, t)
    return 2 * simpson(lambda u: 0.0 if u == 0 else dens(t / u) * t / (u * u), 0, 1)

M = rep["metrics"]
rows = {r["variant"]: r for r in csv.DictReader(open("%s/%s/report.csv" % (w, d)))}
assert [v["name"] for v in rep["variants"]] == ["original", "2bit"]
for v in rep["variants"]:
    ev = lambda r: json.load(open("%s/%s.eval.%s.%s.json" % (w, d, v["name"], r)))
    dense = ev("run")
    qs = sorted(dense["per_query"])
    assert len(qs) == 31, len(qs)
    for part, r in (("sparse", "sparse.run"), ("hybrid", "hybrid.run")):
        e = ev(r)
        assert v[part]["run"] == "runs/%s.%s" % (v["name"], r)
        for m in M:
            got = v[part]["metrics"][m]
            assert abs(got - e[m]) < 1e-6, (v["name"], part, m, got, e[m])
            p = t_pvalue([e["per_query"][q][m] for q in qs], [dense["per_query"][q][m] for q in qs])
            gp = v[part]["p_values_vs_dense"][m]
            assert abs(gp - p) <= 1e-4 * max(p, 1e-3) + 1e-9, (v["name"], part, m, gp, p)
            assert v[part]["significant_vs_dense"][m] == (gp < 0.05)
            col = "%s_%s" % (m, "S" if part == "sparse" else "H")
            assert abs(float(rows[v["name"]][col]) - got) < 1e-6
            assert abs(float(rows[v["name"]][col + "_p"]) - gp) <= 1e-5 * gp + 1e-12
        assert v[part]["latency_p50_ms"] > 0
print("ok")
EOF
}
ck b >"$WORK/m" 2>&1 && ok "BM25: S and H means, p-values against D and CSV equal eval and a t-test" ||
    bad "BM25 check: $(cat "$WORK/m")"
grep -q '"sparse": {"kind": "bm25"' "$WORK/b/report.json" &&
    grep -q '"fusion": {"method": "minmax", "depth": 1000, "alpha": 0.5' "$WORK/b/report.json" &&
    ok "JSON names the sparse source and the fusion" || bad "JSON sparse/fusion header"

# The report's S and H runs are what tartan search returns on the same index (its
# hybrid with the report's dense settings: exact for the original, PLAID with
# ColBERTv2's defaults at the fusion depth for 2bit).
Q=$(ls "$WORK"/b/encoded/queries-*.vectors.npy); Q=${Q%.vectors.npy}
for v in original 2bit; do
    I=$(ls -d "$WORK"/b/indexes/$v-*)
    dm=plaid; [ $v = original ] && dm=exact
    "$T" search --index "$I" --mode sparse --query-text "$WORK/queries.jsonl" --k 20 \
        --out "$WORK/s.$v.run" 2>/dev/null || bad "search --mode sparse $v"
    "$T" search --index "$I" --mode hybrid --dense-mode $dm --untuned --queries "$Q.vectors.npy" \
        --qlens "$Q.doclens.npy" --query-ids "$Q.ids.txt" --query-text "$WORK/queries.jsonl" \
        --k 20 --out "$WORK/h.$v.run" 2>/dev/null || bad "search --mode hybrid $v"
done
"$PY" - "$WORK" <<'EOF' && ok "S and H runs equal tartan search --mode sparse / hybrid" || bad "runs differ from tartan search"
import sys
w = sys.argv[1]
def rd(p):  # per query: document -> score (the writers may order tied scores apart)
    r = {}
    for l in open(p):
        q, _, d, rank, score, tag = l.split()
        r.setdefault(q, {})[d] = float(score)
    return r
for v in ("original", "2bit"):
    for a, b in (("s.%s.run" % v, "b/runs/%s.sparse.run" % v), ("h.%s.run" % v, "b/runs/%s.hybrid.run" % v)):
        x, y = rd(w + "/" + a), rd(w + "/" + b)
        assert sorted(x) == sorted(y) and len(x) > 0, (a, len(x), len(y))
        for q in x:
            assert sorted(x[q]) == sorted(y[q]), (a, q)
            for d in x[q]:
                assert abs(x[q][d] - y[q][d]) <= 1e-5 * max(1, abs(x[q][d])), (a, q, d)
EOF
grep -q "^q30 " "$WORK/b/runs/original.sparse.run" && bad "a query without known terms got sparse hits" ||
    ok "a query without known terms: no sparse hits"
[ "$(grep -c '^q30 ' "$WORK/b/runs/2bit.hybrid.run")" -eq 20 ] &&
    ok "... and its hybrid list is the dense one (20 hits)" || bad "q30 in hybrid"

# Reuse: the indexes (with their sparse postings) are found again.
expect_ok "report --bm25 again" R --bm25 --out "$WORK/b"
[ "$(grep -c ': reused ' "$WORK/err")" -eq 4 ] && ok "encoded vectors and indexes reused" ||
    bad "reuse: $(cat "$WORK/err")"

# Precomputed weights, RRF fusion, a query without a sparse query.
expect_ok "report --sparse --fusion rrf" R --sparse "$WORK/sparse.jsonl" \
    --sparse-queries "$WORK/squeries.jsonl" --fusion rrf --out "$WORK/wt"
grep -q "1 of 31 queries have no sparse query" "$WORK/err" && ok "warning about the query without sparse terms" ||
    bad "no-sparse warning: $(cat "$WORK/err")"
ck wt >"$WORK/m" 2>&1 && ok "weights + RRF: S and H equal eval and a t-test" || bad "weights check: $(cat "$WORK/m")"
grep -q '"fusion": {"method": "rrf"' "$WORK/wt/report.json" &&
    grep -q '"queries_without_sparse": 1' "$WORK/wt/report.json" && ok "JSON: rrf, one query without sparse" ||
    bad "JSON rrf header"
grep -q "^q4 " "$WORK/wt/runs/2bit.sparse.run" && bad "q4 has sparse hits" || ok "q4: no sparse hits"

# The same weights keyed by integer term ids (word wN -> id N): the same S and H.
"$PY" - "$WORK" <<'EOF'
import json, sys
w = sys.argv[1]
for src, dst in (("sparse.jsonl", "ids.jsonl"), ("squeries.jsonl", "qids.jsonl")):
    with open(w + "/" + dst, "w") as f:
        for l in open(w + "/" + src):
            r = json.loads(l)
            f.write(json.dumps({"id": r["id"], "term_ids": {t[1:]: v for t, v in r["terms"].items()
                                                             if t.startswith("w")}}) + "\n")
EOF
expect_ok "report --sparse with term ids" R --sparse "$WORK/ids.jsonl" \
    --sparse-queries "$WORK/qids.jsonl" --fusion rrf --out "$WORK/ti"
"$PY" - "$WORK" <<'EOF' && ok "term ids give the string terms' S and H" || bad "term-id report differs"
import json, sys
w = sys.argv[1]
a, b = (json.load(open(w + "/%s/report.json" % d)) for d in ("wt", "ti"))
for va, vb in zip(a["variants"], b["variants"]):
    for part in ("sparse", "hybrid"):
        assert va[part]["metrics"] == vb[part]["metrics"], (part, va[part], vb[part])
for v in ("original", "2bit"):
    for r in ("sparse", "hybrid"):
        x = [l.split()[:5] for l in open(w + "/wt/runs/%s.%s.run" % (v, r))]
        y = [l.split()[:5] for l in open(w + "/ti/runs/%s.%s.run" % (v, r))]
        assert x == y, (v, r)
EOF

# Without sparse input the report has no S/H columns (and its JSON no sparse part).
expect_ok "report without sparse" R --out "$WORK/d"
grep -q 'nDCG@10 S' "$WORK/d/report.md" || grep -q '"sparse"' "$WORK/d/report.json" ||
    grep -q '_S,' "$WORK/d/report.csv" && bad "D-only report has S columns" || ok "D-only report unchanged"

# Bad input: usage errors (exit 2) and a file error (exit 1), no report written.
rc_of() { "$@" >/dev/null 2>"$WORK/err"; echo $?; }
[ "$(rc_of R --sparse "$WORK/sparse.jsonl" --out "$WORK/x")" -eq 2 ] &&
    grep -q "go together" "$WORK/err" && ok "--sparse without --sparse-queries refused" || bad "--sparse alone"
[ "$(rc_of R --fusion rrf --out "$WORK/x")" -eq 2 ] && ok "--fusion without sparse refused" || bad "--fusion alone"
[ "$(rc_of R --bm25 --sparse "$WORK/sparse.jsonl" --sparse-queries "$WORK/squeries.jsonl" --out "$WORK/x")" -eq 2 ] &&
    ok "--bm25 with --sparse refused" || bad "--bm25 --sparse"
[ "$(rc_of R --bm25 --alpha 2 --out "$WORK/x")" -eq 2 ] && ok "--alpha 2 refused" || bad "--alpha 2"
printf '{"id": "q1", "terms": {"w1": NaN}}\n' >"$WORK/badq.jsonl"
expect_fail "a NaN sparse query weight" "badq.jsonl" R --sparse "$WORK/sparse.jsonl" \
    --sparse-queries "$WORK/badq.jsonl" --out "$WORK/x"
[ -f "$WORK/x/report.md" ] && bad "a failed report left report.md" || ok "no report after a failure"

# The encoder's own sparse parts (protocol 2: tartan-hash-encoder --sparse) as S: the
# same checks against eval and a t-test, and the S runs equal tartan search --mode
# sparse through the same encoder on the report's indexes.
RE() {
    "$T" report --encoder "$HASH --sparse" --corpus "$WORK/corpus.jsonl" \
        --query-text "$WORK/queries.jsonl" --qrels "$WORK/qrels.tsv" --k 20 --centroids 16 \
        --threads 2 --variants 2bit --metrics nDCG@10,Recall@20,MRR@10 --latency-queries 5 "$@"
}
expect_ok "report --encoder-sparse" RE --encoder-sparse --out "$WORK/es"
ck es >"$WORK/m" 2>&1 && ok "encoder sparse parts: S and H equal eval and a t-test" ||
    bad "encoder-sparse check: $(cat "$WORK/m")"
grep -q '"sparse": {"kind": "encoder"' "$WORK/es/report.json" &&
    grep -q "the encoder's own sparse vectors" "$WORK/es/report.md" &&
    ok "JSON and Markdown name the encoder's sparse vectors" || bad "encoder sparse header"
for v in original 2bit; do
    I=$(ls -d "$WORK"/es/indexes/$v-*)
    "$T" search --index "$I" --mode sparse --encoder "$HASH --sparse" --queries "$WORK/queries.jsonl" \
        --k 20 --out "$WORK/es.$v.run" 2>/dev/null || bad "search --mode sparse --encoder $v"
done
"$PY" - "$WORK" <<'EOF' && ok "encoder S runs equal tartan search --mode sparse --encoder" || bad "encoder S runs differ"
import sys
w = sys.argv[1]
def rd(p):
    r = {}
    for l in open(p):
        q, _, d, rank, score, tag = l.split()
        r.setdefault(q, {})[d] = float(score)
    return r
for v in ("original", "2bit"):
    x, y = rd(w + "/es.%s.run" % v), rd(w + "/es/runs/%s.sparse.run" % v)
    assert sorted(x) == sorted(y) and len(x) > 20, (v, len(x), len(y))
    for q in x:
        assert sorted(x[q]) == sorted(y[q]), (v, q)
        for d in x[q]:
            assert abs(x[q][d] - y[q][d]) <= 1e-5 * max(1, abs(x[q][d])), (v, q, d)
EOF
expect_fail "--encoder-sparse with a protocol-1 encoder" "sent no sparse parts" R --encoder-sparse --out "$WORK/x"
[ "$(rc_of R --encoder-sparse --bm25 --out "$WORK/x")" -eq 2 ] && ok "--encoder-sparse with --bm25 refused" ||
    bad "--encoder-sparse --bm25"

# ---------------------------------------------------------------- SciFact
DATA="${TT_DATA:-${TT_SRCDIR:-.}/../shared/data}"
if [ ! -f "$DATA/scifact/corpus.jsonl" ]; then
    [ $nfail -eq 0 ] && { echo "$npass passed, no shared data: skip"; exit 77; }
    finish
fi
expect_ok "scifact report --bm25" "$T" report --encoder "${TT_BUILDDIR:-.}/tartan-hash-encoder --dim 16 --kind fixed --k 4" \
    --corpus "$DATA/scifact/corpus.jsonl" --query-text "$DATA/scifact/queries.jsonl" \
    --qrels "$DATA/scifact/qrels.trec" --bm25 --variants 2bit --centroids 64 --threads 2 \
    --latency-queries 5 --metrics nDCG@10 --out "$WORK/sf"
"$T" eval --qrels "$DATA/scifact/qrels.trec" --run "$WORK/sf/runs/2bit.sparse.run" -c --json \
    --digits 15 -m nDCG@10 >"$WORK/sf.eval.json" 2>/dev/null || bad "tartan eval on scifact"
"$PY" - "$WORK" <<'EOF' >"$WORK/m" 2>&1 && ok "scifact: $(cat "$WORK/m")" || bad "scifact: $(cat "$WORK/m")"
import json, sys
w = sys.argv[1]
rep = json.load(open(w + "/sf/report.json"))
e = json.load(open(w + "/sf.eval.json"))
for v in rep["variants"]:
    s = v["sparse"]["metrics"]["nDCG@10"]
    assert abs(s - 0.661) <= 0.003, (v["name"], s)  # ../shared/data/README.md: BM25 0.661
    assert abs(s - e["nDCG@10"]) < 1e-6
    h = v["hybrid"]["metrics"]["nDCG@10"]
    assert 0 < h <= 1
print("S nDCG@10 %.4f (README BM25 0.661), D %.4f, H %.4f" % (
    s, rep["variants"][1]["metrics"]["nDCG@10"], rep["variants"][1]["hybrid"]["metrics"]["nDCG@10"]))
EOF
finish

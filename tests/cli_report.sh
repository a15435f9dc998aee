#!/bin/sh
# End-to-end tests of `tartan report`: a synthetic collection with known answers
# (tartan-synth), whose report is cross-checked against `tartan eval` on the runs it
# wrote, an independent t-test and top-k overlap in Python, and `tartan info`; index
# reuse and rebuild; bad input; then the real ColBERTv2 fixture
# $TT_DATA/emb/colbertv2_nanofiqa (exit 77 when it is absent and all else passed).
. "${TT_SRCDIR:-.}/tests/lib.sh"
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
[ -x "$T" ] || { echo "no tartan binary at $T"; exit 99; }


# ------------------------------------------------------------------ synthetic
"$SYNTH" --out "$WORK/c" --docs 400 --doclen 5-20 --dim 32 --queries 16 --qlen 8 \
    --noise 0.3 --qnoise 0.2 2>/dev/null || { echo "tartan-synth failed"; exit 1; }
# Two judged queries without vectors (they count 0 in every variant) and one
# searched query without judgements (not evaluated).
cp "$WORK/c.qrels.tsv" "$WORK/qrels.tsv"
printf 'zz1\tdoc1\t1\nzz2\tdoc2\t1\n' >>"$WORK/qrels.tsv"
grep -v "^q15	" "$WORK/qrels.tsv" >"$WORK/qrels2.tsv" && mv "$WORK/qrels2.tsv" "$WORK/qrels.tsv"
R() {
    "$T" report --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" \
        --ids "$WORK/c.ids.txt" --queries "$WORK/c.queries.npy" --query-ids "$WORK/c.qids.txt" \
        --qrels "$WORK/qrels.tsv" --centroids 64 --threads 2 --k 20 "$@"
}
# "exact" is the original's other name; 1bit-adaptive-pool2 is 1bit-pool2 (adaptive is
# the default codec)
VARS=exact,1bit,2bit,4bit,2bit-shared,1bit-adaptive-pool2
METRICS=MRR@10,nDCG@10,Recall@20,P@5
expect_ok "synthetic report" R --out "$WORK/syn" --variants $VARS --metrics $METRICS
cp "$WORK/err" "$WORK/err1"
for f in report.md report.csv report.json report.svg runs/original.run runs/2bit-shared.run; do
    [ -s "$WORK/syn/$f" ] || bad "synthetic: $f missing"
done
ls "$WORK/syn" "$WORK/syn/runs" | grep -q '\.tmp$' && bad "temporary files left" ||
    ok "four report files and the runs, no temporary file"
grep -q "2 of 17 judged queries .* have no query vectors" "$WORK/err1" &&
    grep -q "1 of 16 queries have no judgements" "$WORK/err1" &&
    ok "warnings about unmatched queries" || bad "unmatched-query warnings: $(cat "$WORK/err1")"
[ "$(grep -c ': building ' "$WORK/err1")" -eq 6 ] && ok "six indexes built" ||
    bad "builds: $(cat "$WORK/err1")"

# Each number of the report, recomputed from what it wrote: tartan eval -c on each
# run (per-query values), a t-test written here (Student's t density integrated
# numerically, independent of the library's incomplete beta), the top-k overlap of
# the runs, and tartan info of each index.
for v in original 1bit 2bit 4bit 2bit-shared 1bit-pool2; do
    "$T" eval --qrels "$WORK/qrels.tsv" --run "$WORK/syn/runs/$v.run" -c --json --per-query \
        --digits 15 -m $METRICS >"$WORK/eval.$v.json" 2>/dev/null || bad "tartan eval on $v"
done
for d in "$WORK"/syn/indexes/*; do
    "$T" info --json "$d" >"$d.info.json" || bad "tartan info $d"
done
"$PY" - "$WORK" <<'EOF' && ok "report numbers equal eval, t-test, overlap, info" ||
import glob, json, math, os, sys
w = sys.argv[1]
rep = json.load(open(w + "/syn/report.json"))
V = [v["name"] for v in rep["variants"]]
assert V == ["original", "1bit", "2bit", "4bit", "2bit-shared", "1bit-pool2"], V
M = rep["metrics"]
assert M == ["MRR@10", "nDCG@10", "Recall@20", "P@5"], M
assert rep["queries"] == {"searched": 16, "evaluated": 17, "judged_without_vectors": 2,
                          "unjudged": 1}, rep["queries"]
assert rep["collection"]["dim"] == 32 and rep["collection"]["documents"] == 400

def t_pvalue(a, b):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1)
    if var == 0:
        return 1.0 if mean == 0 else 0.0
    t = abs(mean / math.sqrt(var / n))
    nu = n - 1
    c = math.gamma((nu + 1) / 2) / (math.sqrt(nu * math.pi) * math.gamma(nu / 2))
    dens = lambda x: c * (1 + x * x / nu) ** (-(nu + 1) / 2)
    def simpson(g, a, b, N=20000):
        h = (b - a) / N
        return (g(a) + g(b) + sum((4 if i % 2 else 2) * g(a + i * h) for i in range(1, N))) * h / 3
    if t < 1:  # P(|T| >= t) = 1 - 2 * integral_0^t f
        return 1 - 2 * simpson(dens, 0, t)
    # = 2 * integral_t^inf f, with x = t / u: 2 * integral_0^1 f(t / u) t / u^2 du
    return 2 * simpson(lambda u: 0.0 if u == 0 else dens(t / u) * t / (u * u), 0, 1)

def run(v):
    r = {}
    for line in open(w + "/syn/runs/%s.run" % v):
        q, _, d, rank, s, tag = line.split()
        assert tag == v
        r.setdefault(q, []).append(d)
    return r

ev = {v: json.load(open(w + "/eval.%s.json" % v)) for v in V}
orig = rep["variants"][0]
exact = run("original")
assert len(exact) == 16 and all(len(x) == 20 for x in exact.values())
nv, dim = rep["collection"]["vectors"], rep["collection"]["dim"]
for v in rep["variants"]:
    e = ev[v["name"]]
    for m in M:
        assert abs(v["metrics"][m] - e[m]) < 1e-6, (v["name"], m, v["metrics"][m], e[m])
        assert v["original_metrics"][m] == orig["metrics"][m]
        if v["original"]:
            assert v["p_values"][m] is None
            continue
        qs = sorted(e["per_query"])
        assert len(qs) == 17
        p = t_pvalue([e["per_query"][q][m] for q in qs],
                     [ev["original"]["per_query"][q][m] for q in qs])
        got = v["p_values"][m]
        assert abs(got - p) <= 1e-4 * max(p, 1e-3) + 1e-9, (v["name"], m, got, p)
        assert v["significant"][m] == (got < 0.05)
    r = run(v["name"])
    ov = sum(len(set(r[q]) & set(exact[q])) / len(exact[q]) for q in exact) / len(exact)
    assert abs(v["recall_vs_exact"] - ov) < 1e-6, (v["name"], v["recall_vs_exact"], ov)
    info = json.load(open(v["index"] + ".info.json"))
    assert v["original_bytes"] == nv * dim * 2 == info["input_f16_bytes"]
    assert info["pool_factor"] == v["pool_factor"] and info["input_vectors"] == nv
    assert (info["num_vectors"] < nv) == (v["pool_factor"] > 1), (v["name"], info["num_vectors"])
    if v["original"]:
        assert v["storage_bytes"] == nv * dim * 2 and v["ratio"] == 1 and v["bits_per_dim"] == 16
        assert info["keep_originals"] is not None
    else:
        assert v["storage_bytes"] == info["bytes"]["index"], (v["storage_bytes"], info["bytes"])
        assert info["nbits"] == v["nbits"] and info["keep_originals"] is None
        assert info["codec_tables"] == v["codec_tables"]
        assert abs(v["ratio"] - nv * dim * 2 / v["storage_bytes"]) < 1e-4
        assert abs(v["bits_per_dim"] - v["storage_bytes"] * 8 / (nv * dim)) < 1e-4
    assert v["build_seconds"] > 0 and abs(v["build_seconds"] - info["build"]["seconds"]) < 2e-3
    assert v["latency_p50_ms"] > 0 and v["latency_queries"] == 16 and v["reused"] is False
# Known answers: each query is its target document plus noise, so exact MaxSim ranks
# that document first for nearly every query (15 of the 17 judged queries have
# vectors; the other 2 count 0).
assert orig["metrics"]["MRR@10"] >= 0.9 * 15 / 17, orig["metrics"]
S = {v["name"]: v["storage_bytes"] for v in rep["variants"]}
assert S["1bit"] < S["2bit"] < S["4bit"] < S["original"], S
EOF
    bad "report numbers"

"$PY" - "$WORK/syn" <<'EOF' && ok "Markdown table, CSV and SVG agree with the JSON" ||
import csv, json, sys, xml.etree.ElementTree as E
d = sys.argv[1]
rep = json.load(open(d + "/report.json"))
md = open(d + "/report.md", encoding="utf-8").read()
rows = [l for l in md.splitlines() if l.startswith("| ") and "\u2192" in l and "iB" in l]
assert len(rows) == 5, rows
head = [l for l in md.splitlines() if l.startswith("| Variant") and "Bits/dim" in l][0]
assert head.count("|") == 1 + 1 + 4 + 6, head
for v in rep["variants"][1:]:
    row = [r for r in rows if r.startswith("| %s |" % v["label"])][0]
    for m in rep["metrics"]:
        cell = "%.4f \u2192 %.4f%s" % (v["original_metrics"][m], v["metrics"][m],
                                       "\u2020" if v["significant"][m] else "")
        assert cell in row, (cell, row)
    assert ("%.2f\u00d7" % v["ratio"]) in row
rows = list(csv.DictReader(open(d + "/report.csv")))
assert [r["variant"] for r in rows] == [v["name"] for v in rep["variants"]]
for r, v in zip(rows, rep["variants"]):
    assert int(r["storage_bytes"]) == v["storage_bytes"]
    assert abs(float(r["nDCG@10"]) - v["metrics"]["nDCG@10"]) < 1e-6
    assert (r["MRR@10_p"] == "") == v["original"]
svg = E.parse(d + "/report.svg")
pts = [e.get("data-variant") for e in svg.iter() if e.get("class") == "point"]
assert pts == [v["name"] for v in rep["variants"]], pts
EOF
    bad "md/csv/svg"

# Reuse: the same command again finds every index and builds none (what that saves is a
# benchmark matter, not a test: timings on a loaded machine prove nothing).
expect_ok "second run" R --out "$WORK/syn" --variants $VARS --metrics $METRICS
[ "$(grep -c ': reused ' "$WORK/err")" -eq 6 ] && ! grep -q ': building ' "$WORK/err" &&
    ok "second run reuses all six indexes" || bad "reuse: $(cat "$WORK/err")"
"$PY" -c "import json,sys; a,b=[json.load(open(sys.argv[i])) for i in (1,2)]
assert all(x['reused'] for x in b['variants'])
assert [x['metrics'] for x in a['variants']] == [x['metrics'] for x in b['variants']]" \
    "$WORK/syn/report.json" "$WORK/syn/report.json" && ok "reused indexes give the same metrics" ||
    bad "metrics after reuse"
# Another build option or a changed input file names other indexes.
expect_ok "other seed" R --out "$WORK/syn" --variants 2bit --seed 7
[ "$(grep -c ': building ' "$WORK/err")" -eq 2 ] && ok "another seed: indexes built again" ||
    bad "another seed: $(cat "$WORK/err")"
touch -d '2001-01-01' "$WORK/c.doclens.npy"
expect_ok "touched input" R --out "$WORK/syn" --variants 2bit
[ "$(grep -c ': building ' "$WORK/err")" -eq 2 ] && ok "changed input mtime: indexes rebuilt" ||
    bad "mtime change: $(cat "$WORK/err")"
expect_ok "--rebuild" R --out "$WORK/syn" --variants 2bit --rebuild
[ "$(grep -c ': building ' "$WORK/err")" -eq 2 ] && ok "--rebuild builds again" ||
    bad "--rebuild: $(cat "$WORK/err")"
# A cached index that does not open is rebuilt, not trusted.
broken=$(sed -n 's/.* 2bit: building //p' "$WORK/err")
[ -f "$broken/MANIFEST" ] || bad "no MANIFEST in '$broken'"
echo garbage >"$broken/MANIFEST"
expect_ok "broken cached index" R --out "$WORK/syn" --variants 2bit
grep -q "not reusing .*2bit-" "$WORK/err" && ok "broken cached index rebuilt" ||
    bad "broken cache: $(cat "$WORK/err")"

# The debiasing as a variant: each its own index, built with it (the 32-d synthetic
# vectors have no 8-bit dimension: the default there is debiased tables).
expect_ok "debiasing variants" R --out "$WORK/syn" --variants 1bit-vector,1bit-table,1bit
dv=$(sed -n 's/.* 1bit-vector: building //p' "$WORK/err")
dt=$(sed -n 's/.* 1bit-table: building //p' "$WORK/err")
[ -n "$dv" ] && [ -n "$dt" ] && [ "$dv" != "$dt" ] &&
    "$T" info --json "$dv" | grep -q '"debias": "vector"' && [ -f "$dv/vscale.tt" ] &&
    "$T" info --json "$dt" | grep -q '"debias": "table"' && [ ! -f "$dt/vscale.tt" ] &&
    grep -q "1-bit (adaptive bits, vector scales)" "$WORK/syn/report.md" &&
    ok "-vector and -table variants: built as named" ||
    bad "debiasing variants: $(cat "$WORK/err")"
R --out "$WORK/syn" --variants 2bit-perdim-vector >"$WORK/out" 2>"$WORK/err"
[ $? = 2 ] && grep -q "unknown variant '2bit-perdim-vector'" "$WORK/err" &&
    ok "-vector with the per-dim codec: a usage error" || bad "2bit-perdim-vector: $(cat "$WORK/err")"

# ------------------------------------------------------------------ bad input
"$PY" - "$WORK" <<'EOF'
import ast, struct, sys
w = sys.argv[1]
raw = open(w + "/c.queries.npy", "rb").read()
hl = struct.unpack("<H", raw[8:10])[0]
n, kq, dim = ast.literal_eval(raw[10:10 + hl].decode("latin1"))["shape"]
data = raw[10 + hl:]
half = b"".join(data[r * dim * 4: (r * dim + dim // 2) * 4] for r in range(n * kq))
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d, %d), }" % (n, kq, dim // 2)
d += " " * (63 - (10 + len(d)) % 64) + "\n"
hdr = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()
open(w + "/qdim.npy", "wb").write(hdr + half)
EOF
B() { R --out "$WORK/bad" "$@"; }
expect_fail "query dimension differs" "qdim.npy: queries have dimension 16 .* 32" \
    "$T" report --vectors "$WORK/c.vectors.npy" --doclens "$WORK/c.doclens.npy" \
    --queries "$WORK/qdim.npy" --qrels "$WORK/qrels.tsv" --out "$WORK/bad"
expect_fail "missing qrels file" "nope.tsv" B --qrels "$WORK/nope.tsv"
printf 'q0\tdoc0\t1\nq1\tdoc1\n' >"$WORK/short.tsv"
expect_fail "malformed qrels names file:line" "short.tsv:2" B --qrels "$WORK/short.tsv"
printf 'x1\tdoc0\t1\n' >"$WORK/other.tsv"
expect_fail "no query in common" "no query id of .*other.tsv" B --qrels "$WORK/other.tsv"
expect_fail "missing vectors" "missing.npy" B --vectors "$WORK/missing.npy"
sed '3s/.*/q0/' "$WORK/c.qids.txt" >"$WORK/dupq.txt"
expect_fail "duplicate query id" "dupq.txt:3: duplicate query id 'q0'" \
    B --query-ids "$WORK/dupq.txt"
[ ! -e "$WORK/bad/report.md" ] && [ -z "$(ls "$WORK/bad" 2>/dev/null | grep report)" ] &&
    ok "no report files after failures" || bad "report files left: $(ls "$WORK/bad")"
# An output path that cannot be a directory.
: >"$WORK/file"
expect_fail "--out is a file" "file" R --out "$WORK/file" --variants 2bit
B --variants original,3bit-perdim >/dev/null 2>"$WORK/err"
[ $? -eq 2 ] && grep -q "unknown variant '3bit-perdim'" "$WORK/err" && ok "unknown variant" ||
    bad "unknown variant: $(cat "$WORK/err")"
B --variants 2bit,2bit-adaptive >/dev/null 2>&1
[ $? -eq 2 ] && ok "variant listed twice (2bit is 2bit-adaptive)" || bad "variant listed twice"
B --variants 2bit-pool0 >/dev/null 2>"$WORK/err"
[ $? -eq 2 ] && grep -q "unknown variant '2bit-pool0'" "$WORK/err" && ok "pool factor 0 refused" ||
    bad "pool factor 0: $(cat "$WORK/err")"
B --metrics nDCG@100 >/dev/null 2>"$WORK/err"
[ $? -eq 2 ] && grep -q "at most --k 20" "$WORK/err" && ok "metric cutoff beyond k" ||
    bad "metric cutoff: $(cat "$WORK/err")"
B --metrics foo >/dev/null 2>&1
[ $? -eq 2 ] && ok "unknown metric" || bad "unknown metric"
"$T" report --vectors x >/dev/null 2>&1
[ $? -eq 2 ] && ok "missing options are a usage error" || bad "missing options"
"$T" report --help | grep -q -- "--variants" && ok "--help" || bad "--help"

# ------------------------------------------------- with an encoder and texts
# 40 documents of distinct made-up words; each query repeats 3 words of its document,
# so the lexical hash encoder finds it.
HE="${TT_BUILDDIR:-.}/tartan-hash-encoder"
if [ -x "$HE" ]; then
    "$PY" - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(3)
syl = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pu", "gi", "fa"]
word = lambda: "".join(rng.choice(syl) for _ in range(3))
with open(w + "/corpus.jsonl", "w") as c, open(w + "/queries.jsonl", "w") as q, \
        open(w + "/tq.tsv", "w") as r:
    r.write("query-id\tcorpus-id\tscore\n")
    for i in range(40):
        words = [word() for _ in range(12)]
        c.write(json.dumps({"_id": "d%d" % i, "title": "", "text": " ".join(words)}) + "\n")
        if i % 4 == 0:
            q.write(json.dumps({"_id": "q%d" % i, "text": " ".join(words[2:5])}) + "\n")
            r.write("q%d\td%d\t1\n" % (i, i))
EOF
    E() {
        "$T" report --encoder "$HE --kind token --dim 64" --corpus "$WORK/corpus.jsonl" \
            --query-text "$WORK/queries.jsonl" --qrels "$WORK/tq.tsv" --out "$WORK/enc" \
            --centroids 16 --threads 2 --k 10 --variants 2bit "$@"
    }
    expect_ok "report from texts with --encoder" E
    grep -q "corpus: encoding" "$WORK/err" && grep -q "queries: encoding" "$WORK/err" &&
        ok "corpus and queries encoded" || bad "encoding: $(cat "$WORK/err")"
    "$PY" - "$WORK/enc" <<'EOF' && ok "encoder report: ids, description, known answers" ||
import json, sys
rep = json.load(open(sys.argv[1] + "/report.json"))
assert rep["inputs"]["encoder"].endswith("--kind token --dim 64"), rep["inputs"]
assert rep["inputs"]["encoder_description"].startswith("hash-encoder"), rep["inputs"]
assert rep["inputs"]["corpus_text"].endswith("corpus.jsonl")
assert rep["collection"]["documents"] == 40 and rep["collection"]["dim"] == 64
assert rep["queries"]["evaluated"] == 10
o = rep["variants"][0]
assert o["metrics"]["MRR@10"] >= 0.9, o["metrics"]
EOF
        bad "encoder report"
    grep -q "hash-encoder" "$WORK/enc/report.md" && ok "Markdown names the encoder" ||
        bad "Markdown encoder line"
    expect_ok "second report from texts" E
    grep -q "corpus: reused" "$WORK/err" && grep -q "queries: reused" "$WORK/err" &&
        [ "$(grep -c ': reused ' "$WORK/err")" -eq 4 ] && ok "encoded vectors and indexes reused" ||
        bad "encoder reuse: $(cat "$WORK/err")"
    "$T" report --encoder "$HE" --vectors x --out "$WORK/enc" --qrels "$WORK/tq.tsv" \
        >/dev/null 2>&1
    [ $? -eq 2 ] && ok "--encoder with --vectors is a usage error" || bad "--encoder + --vectors"
    expect_fail "encoder that does not exist" "no-such-encoder" "$T" report \
        --encoder "$WORK/no-such-encoder" --corpus "$WORK/corpus.jsonl" \
        --query-text "$WORK/queries.jsonl" --qrels "$WORK/tq.tsv" --out "$WORK/enc2"
    [ -z "$(ls "$WORK/enc2" 2>/dev/null | grep report)" ] && ok "no report after encoder failure" ||
        bad "report left after encoder failure"
else
    echo "skip - --encoder (no $HE)"
fi

# ------------------------------------------------------------- ColBERTv2 fixture
NF="${TT_DATA:-}/emb/colbertv2_nanofiqa"
if [ ! -f "$NF/doc_token_embeddings.npy" ]; then
    echo "skip - ColBERTv2 fixture ($NF absent)"
    [ $nfail -eq 0 ] && { echo "$npass passed, fixture absent: skip"; exit 77; }
    finish
fi
N() {
    "$T" report --vectors "$NF/doc_token_embeddings.npy" --doclens "$NF/doclens.npy" \
        --ids "$NF/doc_ids.txt" --queries "$NF/query_token_embeddings.npy" \
        --query-ids "$NF/query_ids.txt" --qrels "$NF/qrels.tsv" --out "$WORK/nf" --threads 2 "$@"
}
expect_ok "nanofiqa report (default variants)" N
"$PY" - "$WORK/nf" <<'EOF' && ok "nanofiqa: files, variants, ratios, ordering, SVG" ||
import json, os, sys, xml.etree.ElementTree as E
d = sys.argv[1]
for f in ("report.md", "report.csv", "report.json", "report.svg"):
    assert os.path.getsize(os.path.join(d, f)) > 0, f
rep = json.load(open(d + "/report.json"))
V = {v["name"]: v for v in rep["variants"]}
want = ["original", "1bit", "2bit", "4bit", "2bit-perdim", "2bit-shared", "2bit-pool2"]
assert list(V) == want, list(V)
assert V["2bit"]["codec_tables"] == "adaptive" and V["2bit-perdim"]["codec_tables"] == "per-dim"
assert V["2bit-pool2"]["pool_factor"] == 2 and V["2bit"]["pool_factor"] == 1
o = V["original"]
assert all(p is None or p == 1 for p in o["p_values"].values()) and o["ratio"] == 1
assert o["storage_bytes"] == 4430 * 128 * 2 and o["bits_per_dim"] == 16
for n in want[1:]:
    v = V[n]
    assert v["ratio"] > 1 and v["bits_per_dim"] < 16, (n, v["ratio"], v["bits_per_dim"])
    assert all(p is not None and 0 <= p <= 1 for p in v["p_values"].values()), v["p_values"]
    assert 0 < v["recall_vs_exact"] <= 1
S = {n: V[n]["storage_bytes"] for n in want}
assert S["1bit"] < S["2bit"] < S["4bit"] < S["original"], S
assert S["2bit-pool2"] < S["2bit"], S
# bits per dimension are over the vectors as given, pooled or not
assert V["2bit-pool2"]["bits_per_dim"] < V["2bit"]["bits_per_dim"], V["2bit-pool2"]
# every document is relevant to one of the 5 queries: exact MaxSim finds them
assert o["metrics"]["Recall@100"] == 1 and o["metrics"]["MRR@10"] == 1, o["metrics"]
svg = E.parse(d + "/report.svg")
pts = [e.get("data-variant") for e in svg.iter() if e.get("class") == "point"]
assert pts == want, pts
EOF
    bad "nanofiqa report checks"
expect_ok "nanofiqa second run" N
[ "$(grep -c ': reused ' "$WORK/err")" -eq 7 ] && ! grep -q ': building ' "$WORK/err" &&
    ok "nanofiqa: second run says reused for all seven" || bad "nanofiqa reuse: $(cat "$WORK/err")"
finish

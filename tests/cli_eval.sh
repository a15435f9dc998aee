#!/bin/sh
# End-to-end tests of `tartan eval`: a hand-worked case (values derived in
# tests/test_eval.c), output formats, errors, a randomized comparison with an
# independent Python implementation of trec_eval's definitions, and (when
# ../shared/data is present) BM25 runs on Cranfield and CISI against the trec_eval
# figures recorded in ../shared/data/README.md.
. "${TT_SRCDIR:-.}/tests/lib.sh"

[ -x "$T" ] || { echo "no tartan binary at $T"; exit 99; }

# --------------------------------------------------------------- hand-worked
# Query a: judged d1=3 d2=2 d3=0 d4=1 d5=2; ranked (ties by docid descending)
# d3 dX d2 d1 d9 d4 -> MRR@10 = 1/3, nDCG@5 = 0.402638, MAP@4 = 0.208333, P@10 = 0.3.
# Query b: judged only d1=0 -> 0 everywhere. c: judged, not in the run. z: run only.
cat >"$WORK/qrels.trec" <<'EOF'
a 0 d1 3
a 0 d2 2
a 0 d3 0
a 0 d4 1
a 0 d5 2
b 0 d1 0
c 0 d7 1
EOF
printf 'query-id\tcorpus-id\tscore\n' >"$WORK/qrels.tsv"
awk '{printf "%s\t%s\t%s\n", $1, $3, $4}' "$WORK/qrels.trec" >>"$WORK/qrels.tsv"
cat >"$WORK/run.txt" <<'EOF'
a Q0 d4 6 0.4 t
a Q0 d1 4 0.5 t
z Q0 d1 1 9 t
a Q0 dX 2 0.8 t
b Q0 d1 1 1.0 t
a Q0 d3 1 0.9 t
a Q0 d9 5 0.4 t
a Q0 d2 3 0.8 t
EOF

expect_ok "table output" "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/run.txt" \
    -m MRR@10,nDCG@5,MAP@4,P@10
# means over a and b: 1/6 = 0.1667, 0.201319 -> 0.2013, 0.104167 -> 0.1042, 0.15
if grep -q '^MRR@10  *0\.1667  *2$' "$WORK/out" && grep -q '^nDCG@5  *0\.2013  *2$' "$WORK/out" &&
    grep -q '^MAP@4  *0\.1042  *2$' "$WORK/out" && grep -q '^P@10  *0\.1500  *2$' "$WORK/out"; then
    ok "table values"
else
    bad "table values: $(cat "$WORK/out")"
fi
if grep -q "1 of 3 judged queries have no results" "$WORK/err" &&
    grep -q "1 of 3 run queries have no judgements" "$WORK/err" &&
    grep -q "1 evaluated queries have no relevant" "$WORK/err"; then
    ok "warnings about missing, ignored and no-relevant queries"
else
    bad "warnings: $(cat "$WORK/err")"
fi
expect_ok "default metrics" "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/run.txt"
for m in MRR@10 nDCG@10 nDCG@100 Recall@10 Recall@100 Recall@1000 MAP@1000 Success@5; do
    grep -q "^$m " "$WORK/out" || bad "default metric $m missing"
done

if [ -x "$PY" ]; then
    expect_ok "json, per-query, missing as zero" "$T" eval --qrels "$WORK/qrels.tsv" \
        --run "$WORK/run.txt" --json --per-query --missing-as-zero -m MRR@10,nDCG@5,P@10
    "$PY" - "$WORK/out" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
want = {"MRR@10": 1 / 9, "nDCG@5": 0.40263770803761884 / 3, "P@10": 0.3 / 3}
assert list(j)[:3] == list(want), list(j)
for k, v in want.items():
    assert abs(j[k] - v) < 5e-5, (k, j[k], v)
pq = j["per_query"]
assert list(pq) == ["a", "b", "c"], list(pq)
assert abs(pq["a"]["nDCG@5"] - 0.4026) < 1e-9 and pq["c"] == {"MRR@10": 0, "nDCG@5": 0, "P@10": 0}
EOF
    if [ $? -eq 0 ]; then ok "json values"; else bad "json values: $(cat "$WORK/out")"; fi
    # stdin, and TREC and TSV qrels give the same output
    "$T" eval --qrels "$WORK/qrels.trec" --run - --json <"$WORK/run.txt" >"$WORK/a.json" 2>/dev/null
    "$T" eval --qrels "$WORK/qrels.tsv" --run "$WORK/run.txt" --json >"$WORK/b.json" 2>/dev/null
    if [ -s "$WORK/a.json" ] && cmp -s "$WORK/a.json" "$WORK/b.json"; then
        ok "stdin run; TREC and BEIR qrels agree"
    else
        bad "stdin run / formats differ"
    fi
fi

# ------------------------------------------------ scores are doubles (10.0)
# 0.30000002 and 0.30000001 are the same float32: trec_eval 9.0.8 (float scores)
# ties them and puts d2 ("d2" > "d1") first, MRR@10 = 1; trec_eval 10.0 and tartan
# rank d1 (the higher double) first, so the relevant d2 is at rank 2: MRR@10 = 0.5.
printf 'q1 0 d2 1\n' >"$WORK/f32.qrels"
printf 'q1 Q0 d2 1 0.30000001 t\nq1 Q0 d1 2 0.30000002 t\n' >"$WORK/f32.run"
"$T" eval --qrels "$WORK/f32.qrels" --run "$WORK/f32.run" -m MRR@10 >"$WORK/out" 2>"$WORK/err"
grep -q '^MRR@10  *0\.5000  *1$' "$WORK/out" && ok "scores equal as floats rank as doubles" ||
    bad "float-equal scores: $(cat "$WORK/out" "$WORK/err")"

# ---------------------------------------------------------------------- --docs
printf 'd1\nd2\nd3\nd4\nd5\nd7\n' >"$WORK/ids.txt"
expect_ok "--docs" "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/run.txt" --docs "$WORK/ids.txt"
grep -q "2 run lines (2 distinct documents) name documents not in" "$WORK/err" &&
    ok "--docs warns about dX and d9" || bad "--docs warning: $(cat "$WORK/err")"

# ---------------------------------------------------------------------- errors
printf 'a Q0 d1 1 0.5 t\na Q0 d2 2 0.4\n' >"$WORK/short.txt"
expect_fail "malformed run line names file:line" "short.txt:2: expected 6 fields" \
    "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/short.txt"
# an id with a space makes 7 fields: refused, not read with the rank as the score
printf 'a Q0 d1 1 0.5 t\na Q0 has space 2 0.4 t\n' >"$WORK/long.txt"
expect_fail "7-field run line refused" \
    "long.txt:2: expected 6 fields (qid Q0 docid rank score tag), got 7" \
    "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/long.txt"
printf 'a 0 d1 1\na 0 d2 yes\n' >"$WORK/badrel.trec"
expect_fail "malformed qrels line names file:line" "badrel.trec:2: relevance 'yes'" \
    "$T" eval --qrels "$WORK/badrel.trec" --run "$WORK/run.txt"
printf 'a Q0 d1 1 0.5 t\nb Q0 d1 1 0.5 t\na Q0 d1 2 0.4 t\n' >"$WORK/dup.txt"
expect_fail "duplicate document in run" "document 'd1' appears twice for query 'a'" \
    "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/dup.txt"
printf 'x Q0 d1 1 0.5 t\n' >"$WORK/other.txt"
expect_fail "no query in common" "no query in common" \
    "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/other.txt"
expect_fail "missing file" "nope.txt" "$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/nope.txt"
"$T" eval --qrels "$WORK/qrels.trec" >/dev/null 2>&1
[ $? -eq 2 ] && ok "missing --run is a usage error" || bad "missing --run exit status"
"$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/run.txt" -m nDCG@10,foo@3 >/dev/null 2>"$WORK/err"
[ $? -eq 2 ] && grep -q "unknown metric 'foo@3'" "$WORK/err" && ok "unknown metric" ||
    bad "unknown metric: $(cat "$WORK/err")"
"$T" eval --qrels "$WORK/qrels.trec" --run "$WORK/run.txt" -m R@10,Recall@10 >/dev/null 2>&1
[ $? -eq 2 ] && ok "metric listed twice" || bad "metric listed twice accepted"
"$T" eval --help >"$WORK/out" 2>&1 && grep -q -- "--missing-as-zero" "$WORK/out" && ok "--help" ||
    bad "--help"

# ------------------------------------------------ randomized reference check
# An independent, deliberately naive Python implementation of trec_eval's rules
# (doc/metrics.md) on random qrels/runs with many score ties, graded and negative
# rels, shuffled run lines, queries missing from either side.
if [ -x "$PY" ]; then
    "$PY" - "$T" "$WORK" <<'EOF'
import json, math, random, subprocess, sys
T, work = sys.argv[1], sys.argv[2]
METRICS = [("MRR@10", "MRR", 10), ("MRR", "MRR", 0), ("nDCG@10", "nDCG", 10),
           ("nDCG@5", "nDCG", 5), ("nDCG", "nDCG", 0), ("Recall@10", "Recall", 10),
           ("Recall@3", "Recall", 3), ("MAP@1000", "MAP", 1000), ("MAP@5", "MAP", 5),
           ("MAP", "MAP", 0), ("Success@1", "Success", 1), ("Success@5", "Success", 5),
           ("P@5", "P", 5), ("P@20", "P", 20)]

def reference(qrels, run, level, complete):
    out = {}
    for q in sorted(qrels, key=lambda s: s.encode()):
        if q not in run and not complete:
            continue
        ranking = sorted(run.get(q, {}).items(), key=lambda x: x[0].encode(), reverse=True)
        ranking.sort(key=lambda x: -x[1])  # stable: equal scores keep docid-descending order
        rels = [qrels[q].get(d, 0) for d, _ in ranking]
        judged = list(qrels[q].values())
        R = sum(r >= level for r in judged)
        ideal = sorted((r for r in judged if r > 0), reverse=True)
        vals = {}
        for name, kind, k in METRICS:
            top = rels[:k] if k else rels
            hits = [r >= level for r in top]
            if kind == "MRR":
                v = next((1 / (i + 1) for i, h in enumerate(hits) if h), 0.0)
            elif kind == "nDCG":
                dcg = sum(r / math.log2(i + 2) for i, r in enumerate(top) if r > 0)
                idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:k] if k else ideal))
                v = dcg / idcg if idcg > 0 else 0.0
            elif kind == "Recall":
                v = sum(hits) / R if R else 0.0
            elif kind == "MAP":
                v = sum(sum(hits[:i + 1]) / (i + 1) for i, h in enumerate(hits) if h)
                v = v / R if R else 0.0
            elif kind == "Success":
                v = 1.0 if any(hits) else 0.0
            else:
                v = sum(hits) / k
            vals[name] = v
        out[q] = vals
    return out

for seed in range(8):
    rng = random.Random(seed)
    docs = ["d%d" % j for j in range(45)] + ["D1", "x", "10", "9", "Z-9"]
    qids = [str(i) for i in range(28)] + ["A", "a"]
    qrels, run = {}, {}
    for q in qids[:26]:
        n = rng.randint(1, 12)
        qrels[q] = {d: rng.choice([0, 0, 1, 1, 2, 3, -1]) for d in rng.sample(docs, n)}
    for q in qids[3:]:  # 0, 1, 2 judged but not run; 26..a run but not judged
        n = rng.randint(1, 40)
        pool = [0.5, 0.25, 1.0, 2.0, 3.0, -1.0, 1e-3, 0.0]
        run[q] = {d: (rng.choice(pool) if rng.random() < 0.7 else rng.random())
                  for d in rng.sample(docs, n)}
    with open(work + "/r.qrels", "w") as f:
        for q, js in qrels.items():
            for d, r in js.items():
                f.write("%s 0 %s %d\n" % (q, d, r))
    lines = ["%s Q0 %s 0 %r t\n" % (q, d, s) for q, ds in run.items() for d, s in ds.items()]
    rng.shuffle(lines)
    with open(work + "/r.run", "w") as f:
        f.writelines(lines)
    level, complete = 1 + seed % 3 // 2, seed % 2 == 1
    cmd = [T, "eval", "--qrels", work + "/r.qrels", "--run", work + "/r.run", "--json",
           "--per-query", "--digits", "15", "-m", ",".join(m[0] for m in METRICS),
           "-l", str(level)] + (["-c"] if complete else [])
    got = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    want = reference(qrels, run, level, complete)
    assert list(got["per_query"]) == list(want), (seed, list(got["per_query"]), list(want))
    for q in want:
        for name, _, _ in METRICS:
            assert abs(got["per_query"][q][name] - want[q][name]) < 1e-12, (seed, q, name)
    for name, _, _ in METRICS:
        mean = sum(v[name] for v in want.values()) / len(want)
        assert abs(got[name] - mean) < 1e-12, (seed, name, got[name], mean)
EOF
    if [ $? -eq 0 ]; then ok "randomized comparison with the Python reference"; else bad "randomized comparison"; fi
else
    echo "skip - randomized comparison (no $PY)"
fi

# ------------------------------------------------------------- real collections
# ../shared/data/README.md reports, "by trec_eval", a simple BM25 (k1=0.9, b=0.4,
# lowercase alphanumeric tokens, title+text) at nDCG@10 / MRR / R@100 of
# cranfield 0.328 / 0.495 / 0.685 and cisi 0.296 / 0.556 / 0.389 (3 decimals).
# The same BM25, written here, must give those figures through tartan eval (within
# the 3-decimal rounding plus 0.001 of slack for BM25 details), on both qrels files.
if [ -n "${TT_DATA:-}" ] && [ -d "$TT_DATA/cranfield" ] && [ -d "$TT_DATA/cisi" ] &&
    [ -x "$PY" ]; then
    cat >"$WORK/bm25.py" <<'EOF'
import collections, json, math, re, sys
coll, out = sys.argv[1], sys.argv[2]
tok = lambda s: re.findall(r"[a-z0-9]+", s.lower())
docs = []
for line in open(coll + "/corpus.jsonl"):
    d = json.loads(line)
    docs.append((d["_id"], tok(d.get("title", "") + " " + d.get("text", ""))))
N = len(docs)
avgdl = sum(len(t) for _, t in docs) / N
df, post = collections.Counter(), collections.defaultdict(list)
for i, (_, t) in enumerate(docs):
    for w, c in collections.Counter(t).items():
        df[w] += 1
        post[w].append((i, c))
k1, b = 0.9, 0.4
judged = set(l.split()[0] for l in open(coll + "/qrels.trec"))
with open(out, "w") as f:
    for line in open(coll + "/queries.jsonl"):
        q = json.loads(line)
        if q["_id"] not in judged:
            continue
        sc = collections.defaultdict(float)
        for w in tok(q["text"]):
            if w in df:
                idf = math.log(1 + (N - df[w] + 0.5) / (df[w] + 0.5))
                for i, c in post[w]:
                    sc[i] += idf * c * (k1 + 1) / (c + k1 * (1 - b + b * len(docs[i][1]) / avgdl))
        for r, (i, s) in enumerate(sorted(sc.items(), key=lambda x: -x[1])[:1000]):
            f.write("%s Q0 %s %d %r bm25\n" % (q["_id"], docs[i][0], r + 1, s))
EOF
    for spec in "cranfield 0.328 0.495 0.685" "cisi 0.296 0.556 0.389"; do
        set -- $spec
        c=$1
        "$PY" "$WORK/bm25.py" "$TT_DATA/$c" "$WORK/$c.run" || { bad "bm25 $c"; continue; }
        "$T" eval --qrels "$TT_DATA/$c/qrels.trec" --run "$WORK/$c.run" -m nDCG@10,MRR,R@100 \
            --json --digits 6 >"$WORK/$c.trec.json" 2>/dev/null
        "$T" eval --qrels "$TT_DATA/$c/qrels.tsv" --run "$WORK/$c.run" -m nDCG@10,MRR,R@100 \
            --json --digits 6 >"$WORK/$c.tsv.json" 2>/dev/null
        if "$PY" - "$WORK/$c.trec.json" "$2" "$3" "$4" <<'EOF'; then
import json, sys
j = json.load(open(sys.argv[1]))
for name, want in zip(["nDCG@10", "MRR", "Recall@100"], map(float, sys.argv[2:])):
    assert abs(j[name] - want) <= 0.0015, (name, j[name], want)
print("  %s" % j)
EOF
            ok "BM25 on $c matches the README's trec_eval figures"
        else
            bad "BM25 on $c: $(cat "$WORK/$c.trec.json")"
        fi
        if cmp -s "$WORK/$c.trec.json" "$WORK/$c.tsv.json"; then
            ok "$c: qrels.trec and qrels.tsv agree"
        else
            bad "$c: qrels.trec and qrels.tsv differ"
        fi
    done
else
    echo "skip - real collections (no \$TT_DATA/cranfield, cisi or python)"
fi

finish

#!/bin/sh
# Sparse and hybrid retrieval from the command line (doc/search.md, "Hybrid
# retrieval"): BM25 scores against an independent Python model on a small random
# corpus, quantized weights (--sparse) against the same model with 8-bit quantization,
# hybrid search with min-max and RRF fusion (alpha 1 is the dense ranking), a query
# without any known term, add/delete/compact against a fresh build of the live
# documents, filters (--where, --filter-ids) against the unfiltered rankings restricted
# to the allowed documents, info's sizes, and bad input.
. "${TT_SRCDIR:-.}/tests/lib.sh"
have_numpy || { echo "numpy missing: skip"; exit 77; }
PYTHONDONTWRITEBYTECODE=1; export PYTHONDONTWRITEBYTECODE
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder --dim 16"

# A random corpus of 120 documents over 40 words (titles on some), in two parts, and
# 12 queries, one of words no document has.
"$PY" - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(5)
vocab = ["w%d" % i for i in range(40)]
def text(n):
    return " ".join(rng.choice(vocab[: 5 + rng.randrange(35)]) for _ in range(n))
docs = []
for i in range(120):
    d = {"_id": "doc%d" % i, "text": text(3 + rng.randrange(30)) + ", W1-" + vocab[i % 40].upper()}
    if i % 3 == 0:
        d["title"] = text(2)
    docs.append(d)
for name, part in (("all", docs), ("one", docs[:80]), ("two", docs[80:])):
    with open(w + "/%s.jsonl" % name, "w") as f:
        for d in part:
            f.write(json.dumps(d) + "\n")
with open(w + "/queries.jsonl", "w") as f:
    for q in range(11):
        f.write(json.dumps({"_id": "q%d" % q, "text": text(1 + rng.randrange(4))}) + "\n")
    f.write(json.dumps({"_id": "q11", "text": "zzzz unknownword"}) + "\n")
# sparse weights for the same documents and queries
with open(w + "/sparse.jsonl", "w") as f:
    for d in docs:
        terms = {rng.choice(vocab): round(rng.uniform(0.1, 3.0), 3) for _ in range(1 + rng.randrange(12))}
        f.write(json.dumps({"id": d["_id"], "terms": terms}) + "\n")
with open(w + "/squeries.jsonl", "w") as f:
    for q in range(12):
        terms = {rng.choice(vocab): round(rng.uniform(0.5, 2.0), 2) for _ in range(1 + rng.randrange(4))}
        f.write(json.dumps({"id": "q%d" % q, "terms": terms}) + "\n")
EOF

B() { "$T" build --encoder "$HASH" --centroids 16 --threads 2 "$@"; }
expect_ok "build --bm25" B --corpus "$WORK/all.jsonl" --bm25 --out "$WORK/i"
[ -f "$WORK/i/sparse.tt" ] && ok "sparse.tt written" || bad "no sparse.tt"
expect_ok "verify" "$T" verify "$WORK/i"
expect_ok "search --mode sparse" "$T" search --index "$WORK/i" --mode sparse \
    --queries "$WORK/queries.jsonl" --k 200 --out "$WORK/s.run"

# model.py MODE RUN: checks a sparse run against an independent model
cat >"$WORK/model.py" <<'EOF'
import json, math, re, sys
mode, run, w = sys.argv[1], sys.argv[2], sys.argv[3]
tok = lambda s: [t.lower() for t in re.findall(r"[A-Za-z0-9]+", s)]
docs = [json.loads(l) for l in open(w + "/all.jsonl")]
live = set(sys.argv[4].split(",")) if len(sys.argv) > 4 else None
if live is not None:
    docs = [d for d in docs if d["_id"] in live]
scores = {}
if mode == "bm25":
    toks = {d["_id"]: tok((d.get("title", "") + " " + d["text"]) if d.get("title") else d["text"]) for d in docs}
    N = len(toks); avgdl = sum(len(t) for t in toks.values()) / N
    df = {}
    for t in toks.values():
        for x in set(t):
            df[x] = df.get(x, 0) + 1
    for q in (json.loads(l) for l in open(w + "/queries.jsonl")):
        qt = tok(q["text"]); s = {}
        for term in sorted(set(qt)):
            if term not in df: continue
            idf = math.log(1 + (N - df[term] + 0.5) / (df[term] + 0.5))
            for d, t in toks.items():
                tf = t.count(term)
                if tf:
                    s[d] = s.get(d, 0) + qt.count(term) * idf * tf * 1.9 / (tf + 0.9 * (1 - 0.4 + 0.4 * len(t) / avgdl))
        scores[q["_id"]] = s
else:  # quantized weights: per term, scale = max / 255, q = round(w / scale) in 1..255
    sp = [json.loads(l) for l in open(w + "/sparse.jsonl")]
    mx = {}
    for d in sp:
        for t, v in d["terms"].items():
            mx[t] = max(mx.get(t, 0), v)
    for q in (json.loads(l) for l in open(w + "/squeries.jsonl")):
        s = {}
        for t, qw in q["terms"].items():
            if t not in mx: continue
            scale = mx[t] / 255
            for d in sp:
                if t in d["terms"]:
                    s[d["id"]] = s.get(d["id"], 0) + qw * scale * min(255, max(1, round(d["terms"][t] / scale)))
        scores[q["id"]] = s
got = {}
for line in open(run):
    qid, _, doc, rank, score, _ = line.split()
    got.setdefault(qid, []).append((doc, float(score)))
bad = 0
for qid, s in scores.items():
    g = got.get(qid, [])
    if len(g) != len(s):
        print("query %s: %d hits, the model %d" % (qid, len(g), len(s))); bad += 1; continue
    for i, (doc, score) in enumerate(g):
        if doc not in s or abs(s[doc] - score) > 1e-5 * max(1, abs(score)):
            print("query %s: %s %r, the model %r" % (qid, doc, score, s.get(doc))); bad += 1; break
        if i and score > g[i - 1][1]:
            print("query %s: not sorted" % qid); bad += 1; break
print("queries %d bad %d" % (len(scores), bad))
sys.exit(1 if bad else 0)
EOF
"$PY" "$WORK/model.py" bm25 "$WORK/s.run" "$WORK" >"$WORK/m" && ok "BM25 scores equal the model's" \
    || bad "BM25 against the model: $(head -5 "$WORK/m")"
grep -q "^q11 " "$WORK/s.run" && bad "a query without known terms got sparse hits" \
    || ok "a query without known terms gets no sparse hits"

# hybrid: dense and sparse at once, fused
expect_ok "search --mode hybrid (encoder; query texts tokenized)" "$T" search --index "$WORK/i" \
    --mode hybrid --encoder "$HASH" --queries "$WORK/queries.jsonl" --k 10 --out "$WORK/h.run"
[ "$(grep -c '^q11 ' "$WORK/h.run")" -eq 10 ] && ok "hybrid: the query without sparse terms answered by dense" \
    || bad "hybrid q11: $(grep -c '^q11 ' "$WORK/h.run") hits"
[ "$(wc -l <"$WORK/h.run")" -eq 120 ] && ok "hybrid: 10 hits per query" || bad "hybrid run: $(wc -l <"$WORK/h.run") lines"
expect_ok "search --mode exhaustive" "$T" search --index "$WORK/i" --mode exhaustive \
    --encoder "$HASH" --queries "$WORK/queries.jsonl" --k 10 --out "$WORK/d.run"
expect_ok "hybrid --alpha 1" "$T" search --index "$WORK/i" --mode hybrid --dense-mode exhaustive \
    --alpha 1 --encoder "$HASH" --queries "$WORK/queries.jsonl" --k 10 --out "$WORK/h1.run"
cut -d' ' -f1,3 "$WORK/d.run" >"$WORK/d.ids"; cut -d' ' -f1,3 "$WORK/h1.run" >"$WORK/h1.ids"
cmp -s "$WORK/d.ids" "$WORK/h1.ids" && ok "alpha 1: the dense ranking" || bad "alpha 1 differs from dense"
expect_ok "hybrid --fusion rrf" "$T" search --index "$WORK/i" --mode hybrid --fusion rrf \
    --encoder "$HASH" --queries "$WORK/queries.jsonl" --k 5 --out "$WORK/r.run"
"$PY" - "$WORK/r.run" <<'EOF' && ok "rrf scores are sums of 1/(60 + rank)" || bad "rrf scores out of range"
import sys
for l in open(sys.argv[1]):
    s = float(l.split()[4])
    assert 1 / 1060 - 1e-7 <= s <= 2 / 61 + 1e-7, s
EOF
expect_fail "hybrid without sparse queries is a usage error" "needs --sparse-queries" \
    sh -c "'$T' search --index '$WORK/i' --mode hybrid --queries x.npy --out '$WORK/x.run'; [ \$? -eq 2 ] && exit 1"
expect_fail "--fusion must be minmax or rrf" "--fusion must be minmax or rrf" \
    sh -c "'$T' search --index '$WORK/i' --mode hybrid --fusion max --queries x --out '$WORK/x.run'; [ \$? -eq 2 ] && exit 1"

# filters (--where) in sparse and hybrid search: the unfiltered results restricted to the
# allowed documents (sparse: exactly, the unfiltered run being checked against the model
# above; hybrid: min-max fusion of the restricted dense and sparse rankings); and info's
# sizes, which count sparse.tt, metadata.tt and tune.tt
"$PY" -c "
import json
for i in range(120):
    print(json.dumps({'bucket': (i * 37) % 100}))" >"$WORK/meta.jsonl"
expect_ok "build --bm25 --metadata" B --corpus "$WORK/all.jsonl" --bm25 --metadata "$WORK/meta.jsonl" \
    --out "$WORK/im"
"$T" info --json "$WORK/im" >"$WORK/im.json" 2>&1
"$PY" - "$WORK/im" "$WORK/im.json" >"$WORK/py" 2>&1 <<'EOF' && ok "info: bytes.index counts sparse.tt, metadata.tt and tune.tt" \
    || bad "info sizes: $(tail -3 "$WORK/py")"
import json, os, sys
d, j = sys.argv[1], json.load(open(sys.argv[2]))["bytes"]
size = lambda part: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if part in f)
files = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
            if os.path.isfile(os.path.join(d, f)) and "originals" not in f and f != "LOCK")
assert j["sparse"] == size("sparse") > 0, (j, size("sparse"))
assert j["metadata"] == size("metadata") > 0, (j, size("metadata"))
assert j["tune"] == size("tune") > 0, (j, size("tune"))
assert j["index"] == files, (j, files)
EOF
"$T" info "$WORK/im" >"$WORK/im.txt" 2>&1
grep -q "^  sparse " "$WORK/im.txt" && grep -q "^  metadata " "$WORK/im.txt" \
    && ok "info: sparse and metadata rows in the sizes" || bad "info rows: $(cat "$WORK/im.txt")"
expect_ok "sparse, unfiltered" "$T" search --index "$WORK/im" --mode sparse \
    --queries "$WORK/queries.jsonl" --k 200 --out "$WORK/fs.run"
cmp -s "$WORK/fs.run" "$WORK/s.run" && ok "the metadata changes no sparse result" || bad "fs.run differs from s.run"
expect_ok "dense exhaustive, unfiltered" "$T" search --index "$WORK/im" --mode exhaustive \
    --encoder "$HASH" --queries "$WORK/queries.jsonl" --k 120 --out "$WORK/fd.run"
cat >"$WORK/restrict.py" <<'EOF'
import sys
cut, kind, got_path, dense, sparse = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
allowed = set("doc%d" % i for i in range(120) if (i * 37) % 100 < cut)
def run(p):
    r = {}
    for l in open(p):
        q, _, d, rank, s, _ = l.split()
        r.setdefault(q, []).append((d, float(s)))
    return r
got, D, S = run(got_path), run(dense), run(sparse)
for q in ["q%d" % i for i in range(12)]:
    g = got.get(q, [])
    assert all(d in allowed for d, s in g), (q, "a hit outside the filter")
    s = [x for x in S.get(q, []) if x[0] in allowed]
    if kind == "sparse":
        assert g == s[:200], (q, g[:3], s[:3])
        continue
    d = [x for x in D.get(q, []) if x[0] in allowed]
    def norm(l):
        if not l:
            return {}
        lo, hi = min(v for _, v in l), max(v for _, v in l)
        return {k: (v - lo) / (hi - lo) if hi > lo else 1.0 for k, v in l}
    a, b = norm(d), norm(s)
    fused = sorted(((0.5 * a.get(k, 0) + 0.5 * b.get(k, 0), k) for k in set(a) | set(b)), reverse=True)
    assert len(g) == min(10, len(fused)), (q, len(g), len(fused))
    for i, (doc, score) in enumerate(g):
        want = 0.5 * a.get(doc, 0) + 0.5 * b.get(doc, 0)
        assert doc in a or doc in b, (q, doc)
        assert abs(score - want) <= 1e-5 and abs(score - fused[i][0]) <= 1e-5, (q, i, doc, score, want, fused[i])
print("ok")
EOF
for cut in 1 5 30 100; do
    "$T" search --index "$WORK/im" --mode sparse --queries "$WORK/queries.jsonl" --k 200 \
        --where "bucket < $cut" --out "$WORK/fs$cut.run" 2>"$WORK/err"
    if "$PY" "$WORK/restrict.py" $cut sparse "$WORK/fs$cut.run" "$WORK/fd.run" "$WORK/s.run" >"$WORK/py" 2>&1; then
        ok "sparse --where 'bucket < $cut': the unfiltered BM25 ranking of the allowed documents"
    else bad "sparse --where 'bucket < $cut': $(tail -1 "$WORK/py") $(head -c 300 "$WORK/err")"; fi
    "$T" search --index "$WORK/im" --mode hybrid --dense-mode exhaustive --encoder "$HASH" \
        --queries "$WORK/queries.jsonl" --k 10 --where "bucket < $cut" --out "$WORK/fh$cut.run" 2>"$WORK/err"
    if "$PY" "$WORK/restrict.py" $cut hybrid "$WORK/fh$cut.run" "$WORK/fd.run" "$WORK/s.run" >"$WORK/py" 2>&1; then
        ok "hybrid --where 'bucket < $cut': min-max fusion of the restricted rankings"
    else bad "hybrid --where 'bucket < $cut': $(tail -1 "$WORK/py") $(head -c 300 "$WORK/err")"; fi
done
printf 'doc5\ndoc17\nnot-a-doc\n' >"$WORK/ids.txt"
"$T" search --index "$WORK/im" --mode hybrid --encoder "$HASH" --queries "$WORK/queries.jsonl" \
    --k 10 --filter-ids "$WORK/ids.txt" --out "$WORK/fi.run" 2>"$WORK/err"
[ $? -eq 0 ] && [ -z "$(cut -d' ' -f3 "$WORK/fi.run" | grep -v -x -e doc5 -e doc17)" ] \
    && [ "$(grep -c '^q0 ' "$WORK/fi.run")" = 2 ] && grep -q "1 of them name no live" "$WORK/err" \
    && ok "hybrid --filter-ids: only the listed documents, both of them" \
    || bad "hybrid --filter-ids: $(head -c 300 "$WORK/err") $(head -3 "$WORK/fi.run")"
"$T" search --index "$WORK/im" --mode sparse --queries "$WORK/queries.jsonl" --where "bucket < 0" \
    --out "$WORK/f0.run" 2>"$WORK/err"
[ $? -eq 0 ] && [ ! -s "$WORK/f0.run" ] && grep -q "matches no document" "$WORK/err" \
    && ok "sparse: a filter matching nothing gives no hits, exit 0, a note" || bad "sparse empty filter: $(cat "$WORK/err")"

# add, delete, compact: the same sparse run as a fresh build of the live documents
expect_ok "build the first part" B --corpus "$WORK/one.jsonl" --bm25 --out "$WORK/live"
expect_fail "add without --bm25 to a BM25 index" "need theirs too" \
    "$T" add --index "$WORK/live" --encoder "$HASH" --corpus "$WORK/two.jsonl"
expect_ok "add --bm25" "$T" add --index "$WORK/live" --encoder "$HASH" --corpus "$WORK/two.jsonl" --bm25
expect_ok "delete" "$T" delete --index "$WORK/live" --id doc3 --id doc50 --id doc81 --id doc119
LIVE=$("$PY" -c "print(','.join('doc%d' % i for i in range(120) if i not in (3, 50, 81, 119)))")
expect_ok "sparse search after add and delete" "$T" search --index "$WORK/live" --mode sparse \
    --queries "$WORK/queries.jsonl" --k 200 --out "$WORK/l.run"
"$PY" "$WORK/model.py" bm25 "$WORK/l.run" "$WORK" "$LIVE" >"$WORK/m" \
    && ok "after add and delete: the model's BM25 over the live documents" || bad "after delete: $(head -5 "$WORK/m")"
expect_ok "compact" "$T" compact --index "$WORK/live"
expect_ok "verify after compaction" "$T" verify "$WORK/live"
expect_ok "sparse search after compaction" "$T" search --index "$WORK/live" --mode sparse \
    --queries "$WORK/queries.jsonl" --k 200 --out "$WORK/c.run"
cmp -s "$WORK/l.run" "$WORK/c.run" && ok "compaction changes no sparse result" || bad "compaction changed the sparse run"
expect_ok "hybrid after compaction" "$T" search --index "$WORK/live" --mode hybrid \
    --encoder "$HASH" --queries "$WORK/queries.jsonl" --k 10 --out "$WORK/hc.run"
# the calibration (build, add) lives beside the sparse postings through all of it
ls "$WORK/live" | grep -q 'tune\.tt$' && ls "$WORK/live" | grep -q 'sparse\.tt$' \
    && ok "compaction keeps tune.tt and sparse.tt" || bad "after compaction: $(ls "$WORK/live")"
# (on this small index the calibration may find exhaustive search the cheaper)
grep -Eq "sparse BM25 \+ (plaid|exhaustive) dense \(calibrated for k=" "$WORK/err" \
    && ok "hybrid's dense part uses the calibration" || bad "hybrid parameters: $(cat "$WORK/err")"

# precomputed weights
expect_ok "build --sparse" B --corpus "$WORK/all.jsonl" --sparse "$WORK/sparse.jsonl" --out "$WORK/w"
expect_ok "search --sparse-queries" "$T" search --index "$WORK/w" --mode sparse \
    --sparse-queries "$WORK/squeries.jsonl" --k 200 --out "$WORK/w.run"
"$PY" "$WORK/model.py" weights "$WORK/w.run" "$WORK" >"$WORK/m" \
    && ok "weighted scores equal the 8-bit quantized model's" || bad "weights: $(head -5 "$WORK/m")"
expect_ok "compact a weighted index" "$T" compact --index "$WORK/w"
expect_ok "search it again" "$T" search --index "$WORK/w" --mode sparse \
    --sparse-queries "$WORK/squeries.jsonl" --k 200 --out "$WORK/w2.run"
cmp -s "$WORK/w.run" "$WORK/w2.run" && ok "compaction keeps quantized weights as they were" \
    || bad "compaction changed the weighted run"
expect_ok "verify the compacted weighted index" "$T" verify "$WORK/w"
expect_fail "add BM25 counts to a weighted index" "has weighted sparse postings" \
    "$T" add --index "$WORK/w" --encoder "$HASH" --corpus "$WORK/two.jsonl" --bm25

# encoder protocol 2: a Python encoder with sparse parts (term -> its length), round trip
# through build and search against the model of the same weights
mkdir -p "$WORK/enc"
cat >"$WORK/enc.py" <<EOF
import re, sys
sys.path.insert(0, "${TT_SRCDIR:-.}/tools/encoders")
import tartan_protocol as tp
def terms(t):
    return {w: float(len(w)) for w in re.findall(r"[a-z0-9]+", t.lower())}
def enc(texts):
    return [([[float(len(t)), 1.0, 0.5, float(t.count("w1"))]], terms(t)) for t in texts]
if __name__ == "__main__":
    tp.argument_parser("test").parse_args()
    tp.serve(enc, 4, description="sparse-test", batch_size=7, sparse=True)
EOF
"$PY" - "$WORK" <<'EOF'
import json, re, sys
w = sys.argv[1]
terms = lambda t: {x: float(len(x)) for x in re.findall(r"[a-z0-9]+", t.lower())}
with open(w + "/enc/sparse.jsonl", "w") as f:
    for l in open(w + "/all.jsonl"):
        d = json.loads(l)
        t = d["title"] + " " + d["text"] if d.get("title") else d["text"]
        f.write(json.dumps({"id": d["_id"], "terms": terms(t)}) + "\n")
with open(w + "/enc/squeries.jsonl", "w") as f:
    for l in open(w + "/queries.jsonl"):
        q = json.loads(l)
        f.write(json.dumps({"id": q["_id"], "terms": terms(q["text"])}) + "\n")
EOF
cp "$WORK/all.jsonl" "$WORK/queries.jsonl" "$WORK/enc/"
expect_ok "build with a protocol-2 encoder" "$T" build --encoder "$PY $WORK/enc.py" \
    --corpus "$WORK/all.jsonl" --centroids 8 --out "$WORK/p2"
expect_ok "search --mode sparse with its query parts" "$T" search --index "$WORK/p2" \
    --mode sparse --encoder "$PY $WORK/enc.py" --queries "$WORK/queries.jsonl" --k 200 \
    --out "$WORK/p2.run"
"$PY" "$WORK/model.py" weights "$WORK/p2.run" "$WORK/enc" >"$WORK/m" \
    && ok "protocol 2 round trip: the encoder's sparse parts, indexed and searched" \
    || bad "protocol 2: $(head -5 "$WORK/m")"
expect_ok "hybrid with a protocol-2 encoder" "$T" search --index "$WORK/p2" --mode hybrid \
    --encoder "$PY $WORK/enc.py" --queries "$WORK/queries.jsonl" --k 10 --out "$WORK/p2h.run"
sed 's/, terms(t)) for t in texts]/) for t in texts]/; s/sparse=True/sparse=False/' \
    "$WORK/enc.py" >"$WORK/enc_v1.py"
expect_fail "a protocol-1 encoder cannot give a weighted index sparse queries" "sent no sparse parts" \
    "$T" search --index "$WORK/p2" --mode hybrid --encoder "$PY $WORK/enc_v1.py" \
    --queries "$WORK/queries.jsonl" --out "$WORK/x.run"
expect_ok "a protocol-1 encoder still builds (no sparse parts)" "$T" build --encoder \
    "$PY $WORK/enc_v1.py" --corpus "$WORK/all.jsonl" --centroids 8 --out "$WORK/v1"
[ ! -e "$WORK/v1/sparse.tt" ] && ok "protocol 1: no sparse postings" || bad "protocol 1 wrote sparse.tt"
sed 's/float(len(w))/float("nan")/' "$WORK/enc.py" >"$WORK/enc_nan.py"
expect_fail "a NaN sparse weight from an encoder" "weight" \
    "$T" build --encoder "$PY $WORK/enc_nan.py" --corpus "$WORK/all.jsonl" --out "$WORK/bad"
expect_ok "hash encoder --sparse" "$T" build --encoder "$HASH --sparse" --corpus "$WORK/all.jsonl" \
    --centroids 8 --out "$WORK/hs"
expect_ok "hybrid with the hash encoder's sparse parts" "$T" search --index "$WORK/hs" \
    --mode hybrid --encoder "$HASH --sparse" --queries "$WORK/queries.jsonl" --k 10 --out "$WORK/hs.run"
[ "$(wc -l <"$WORK/hs.run")" -eq 120 ] && ok "hash --sparse: 10 hits per query" || bad "hs.run: $(wc -l <"$WORK/hs.run")"
"$PY" - "${TT_SRCDIR:-.}/tools/encoders" <<'EOF' && ok "diffretriever sparse_terms: max-pool, log1p(relu), content words" \
    || bad "diffretriever sparse_terms"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import diffretriever_encoder as de
words = [de.content_word(t) for t in ["\u2581cell", "\u2581the", "Cap", "\u0120dna", "x", "\u2581Cell", "ab"]]
assert words == ["cell", None, None, "dna", None, None, "ab"], words
lg = np.array([[1.0, 5.0, 9.0, -1.0, 3.0, 2.0, 0.5], [2.0, 0.0, 0.0, -2.0, 0.0, 0.0, 4.0]])
t = de.sparse_terms(lg, words, top=2)
assert t == {"ab": float(np.log1p(4.0)), "cell": float(np.log1p(2.0))}, t
assert "dna" not in de.sparse_terms(lg, words)  # negative logits give no term
EOF

# bad input: nothing built, a message naming the file and line
printf '{"id": "doc0", "terms": {"a": NaN}}\n' >"$WORK/nan.jsonl"
expect_fail "NaN weight" "nan.jsonl:1" B --corpus "$WORK/all.jsonl" --sparse "$WORK/nan.jsonl" --out "$WORK/bad"
printf '{"id": "doc0", "terms": {"a": -1e999}}\n' >"$WORK/inf.jsonl"
expect_fail "-inf weight" "non-finite weight" B --corpus "$WORK/all.jsonl" --sparse "$WORK/inf.jsonl" --out "$WORK/bad"
printf '{"id": "doc0", "terms": {"": 1}}\n' >"$WORK/empty.jsonl"
expect_fail "empty term" "an empty term" B --corpus "$WORK/all.jsonl" --sparse "$WORK/empty.jsonl" --out "$WORK/bad"
expect_fail "sparse records of another count" "records for 120 documents" \
    B --corpus "$WORK/all.jsonl" --sparse "$WORK/squeries.jsonl" --out "$WORK/bad"
printf '{"_id": "doc0", "title": "no text here"}\n' >"$WORK/notext.jsonl"
expect_fail "--bm25 over a corpus without text" "no \"text\" string" \
    "$T" build --vectors "$WORK/x.npy" --doclens "$WORK/x.npy" --bm25 --text "$WORK/notext.jsonl" --out "$WORK/bad"
[ ! -e "$WORK/bad" ] && ok "nothing built from bad input" || bad "a failed build left $WORK/bad"
expect_ok "build without sparse postings" B --corpus "$WORK/two.jsonl" --out "$WORK/plain"
expect_fail "sparse search on an index without postings" "no sparse postings" \
    "$T" search --index "$WORK/plain" --mode sparse --queries "$WORK/queries.jsonl" --out "$WORK/x.run"
[ ! -e "$WORK/x.run" ] && ok "no run written" || bad "a failed search wrote a run"
# info, and an upsert: the replaced text is gone from the sparse postings
"$T" info "$WORK/live" | grep -q "^sparse *BM25 postings: " && ok "info: BM25 postings" \
    || bad "info: $("$T" info "$WORK/live" | grep sparse)"
"$T" info "$WORK/plain" | grep -q "^sparse *none" && ok "info: no sparse postings" || bad "info without sparse"
"$T" info --json "$WORK/live" | "$PY" -c "import json, sys; s = json.load(sys.stdin)['sparse']; assert s['kind'] == 'bm25' and s['postings'] > 0, s" \
    && ok "info --json: sparse" || bad "info --json: sparse"
printf '{"_id": "doc7", "text": "zebra quagga"}\n' >"$WORK/up.jsonl"
expect_ok "add --upsert --bm25" "$T" add --index "$WORK/live" --encoder "$HASH" --corpus "$WORK/up.jsonl" --bm25 --upsert
printf 'u1\tzebra\n' >"$WORK/uq.tsv"
expect_ok "search after the upsert" "$T" search --index "$WORK/live" --mode sparse --queries "$WORK/uq.tsv" --k 500 --out "$WORK/u.run"
[ "$(grep -c '^u1 ' "$WORK/u.run")" = 1 ] && grep -q '^u1 Q0 doc7 1 ' "$WORK/u.run" \
    && ok "upsert: the new text is found" || bad "upsert: $(grep '^u1 ' "$WORK/u.run")"
[ "$(grep -c ' doc7 ' "$WORK/u.run")" -le 1 ] && ok "upsert: the replaced document is returned once at most" \
    || bad "upsert: doc7 twice"
# a sharded index built without sparse postings: a sparse search is refused clearly
# (sharded indexes with postings: tests/cli_hybrid_shards.sh)
expect_ok "a sharded build" B --corpus "$WORK/all.jsonl" --shards 2 --no-tune --out "$WORK/sh"
expect_fail "sparse search on a sharded index without postings" "has no sparse postings" \
    "$T" search --index "$WORK/sh" --mode sparse --queries "$WORK/queries.jsonl" --out "$WORK/sh.run"
[ ! -e "$WORK/sh.run" ] && ok "no run written" || bad "a run was written"
finish

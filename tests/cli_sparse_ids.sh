#!/bin/sh
# Sparse vectors keyed by integer term ids with a vocabulary (doc/search.md, "Integer
# term ids"): build, search, add, compact and verify an index of term ids against an
# independent model of 8-bit quantized weights; string query terms mapped through the
# vocabulary; the sparse.tt kind (3) and its 4-byte terms; the vocabulary stored in the
# index (vocab.tt: string and text queries without --vocab, add checks it, compaction
# keeps it); bad input (an id past the vocabulary, a term not in it, ids mixed with
# strings, string queries against ids, a different vocabulary).
. "${TT_SRCDIR:-.}/tests/lib.sh"
[ -x "$PY" ] || { echo "python3 missing: skip"; exit 77; }
HASH="${TT_BUILDDIR:-.}/tartan-hash-encoder --dim 16"

"$PY" - "$WORK" <<'EOF'
import json, random, sys
w = sys.argv[1]
rng = random.Random(11)
V = 500  # vocabulary: tok0 .. tok499, id = line number - 1
with open(w + "/vocab.txt", "w") as f:
    for i in range(V):
        f.write("tok%d\n" % i)
docs = []
for i in range(150):
    # skewed ids, as logits over a vocabulary are: many small ids, a few large
    terms = {str(min(V - 1, int(rng.paretovariate(1.2) * 3))): round(rng.uniform(0.05, 4.0), 3)
             for _ in range(1 + rng.randrange(25))}
    docs.append({"id": "d%d" % i, "term_ids": terms})
for name, part in (("all", docs), ("one", docs[:100]), ("two", docs[100:])):
    with open(w + "/%s.ids.jsonl" % name, "w") as f:
        for d in part:
            f.write(json.dumps(d) + "\n")
    with open(w + "/%s.corpus.jsonl" % name, "w") as f:
        for d in part:
            f.write(json.dumps({"_id": d["id"], "text": " ".join("tok" + t for t in d["term_ids"])}) + "\n")
with open(w + "/q.ids.jsonl", "w") as f, open(w + "/q.str.jsonl", "w") as g:
    for q in range(20):
        t = {str(min(V - 1, int(rng.paretovariate(1.2) * 3))): round(rng.uniform(0.5, 2.0), 2)
             for _ in range(1 + rng.randrange(5))}
        f.write(json.dumps({"id": "q%d" % q, "term_ids": t}) + "\n")
        g.write(json.dumps({"id": "q%d" % q, "terms": {"tok" + k: v for k, v in t.items()}}) + "\n")
    f.write(json.dumps({"id": "q20", "term_ids": {"499": 1.0}}) + "\n")
# texts: words of the vocabulary (repeated: a count is the weight) and words outside it
with open(w + "/q.text.jsonl", "w") as f, open(w + "/q.cnt.jsonl", "w") as g:
    for q in range(15):
        ids = [min(V - 1, int(rng.paretovariate(1.2) * 3)) for _ in range(1 + rng.randrange(6))]
        words = ["tok%d" % i for i in ids] + ["unknownword"] * rng.randrange(2)
        rng.shuffle(words)
        text = " ".join(x.upper() if k % 2 else x for k, x in enumerate(words))
        f.write(json.dumps({"_id": "t%d" % q, "text": text}) + "\n")
        cnt = {}
        for i in ids:
            cnt[str(i)] = cnt.get(str(i), 0) + 1
        g.write(json.dumps({"id": "t%d" % q, "term_ids": cnt}) + "\n")
with open(w + "/two.str.jsonl", "w") as f:
    for d in docs[100:]:
        f.write(json.dumps({"id": d["id"], "terms": {"tok" + t: v for t, v in d["term_ids"].items()}}) + "\n")
with open(w + "/vocab2.txt", "w") as f:  # another vocabulary: the first two lines swapped
    for i in range(V):
        f.write("tok%d\n" % (i ^ 1 if i < 2 else i))
EOF

# model.py RUN DOCS QUERIES [LIVE [SPLIT [COMPACTED]]]: quantized weights per term id and
# segment (scale = the segment's max / 255, halves rounded away from zero). SPLIT: the
# first SPLIT documents were one segment, the rest another (all documents, deleted ones
# too, set a segment's scales); COMPACTED: then merged, each live weight dequantized and
# quantized again with the merged term's scale.
cat >"$WORK/model.py" <<'EOF'
import json, math, sys
run, docs, queries = sys.argv[1], sys.argv[2], sys.argv[3]
sp = [json.loads(l) for l in open(docs)]
live = set(sys.argv[4].split(",")) if len(sys.argv) > 4 else {d["id"] for d in sp}
split = int(sys.argv[5]) if len(sys.argv) > 5 else len(sp)
compacted = len(sys.argv) > 6
def quantize(seg):  # {doc: {term: weight}} -> {doc: {term: dequantized weight}}
    mx = {}
    for ws in seg.values():
        for t, v in ws.items():
            mx[t] = max(mx.get(t, 0), v)
    return {d: {t: mx[t] / 255 * min(255, max(1, math.floor(v / (mx[t] / 255) + 0.5)))
                for t, v in ws.items()} for d, ws in seg.items()}
segs = [sp[:split], sp[split:]]
W = {}
for seg in segs:
    W.update(quantize({d["id"]: {int(t): v for t, v in d["term_ids"].items()} for d in seg}))
W = {d: ws for d, ws in W.items() if d in live}
if compacted:
    W = quantize(W)
scores = {}
for q in (json.loads(l) for l in open(queries)):
    s = {}
    for t, qw in q["term_ids"].items():
        for d, ws in W.items():
            if int(t) in ws:
                s[d] = s.get(d, 0) + qw * ws[int(t)]
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
    for doc, score in g:
        if doc not in s or abs(s[doc] - score) > 1e-5 * max(1, abs(score)):
            print("query %s: %s %r, the model %r" % (qid, doc, score, s.get(doc))); bad += 1; break
print("queries %d bad %d" % (len(scores), bad))
sys.exit(1 if bad else 0)
EOF

ALL=$("$PY" -c "print(','.join('d%d' % i for i in range(150)))")
B() { "$T" build --encoder "$HASH" --centroids 16 --threads 2 --no-tune "$@"; }
S() { "$T" search --mode sparse --k 200 "$@"; }
expect_ok "build --sparse term ids --vocab" B --corpus "$WORK/all.corpus.jsonl" \
    --sparse "$WORK/all.ids.jsonl" --vocab "$WORK/vocab.txt" --out "$WORK/i"
"$PY" - "$WORK" <<'EOF' && ok "sparse.tt: kind 3, T distinct ids in 4 bytes each, ascending" || bad "sparse.tt kind/terms"
import glob, json, struct, sys
w = sys.argv[1]
f = open(glob.glob(w + "/i/*sparse.tt")[0], "rb").read()
assert f[:8] == b"TRTNSPRS", f[:8]
D, T, kind = struct.unpack_from("<QQQ", f, 16)
assert kind == 3 and D == 150, (kind, D)
ids = sorted({int(t) for l in open(w + "/all.ids.jsonl") for t in json.loads(l)["term_ids"]})
assert T == len(ids), (T, len(ids))
p = f[64:]
NB, L = struct.unpack_from("<QQ", p, 0)
assert L == 4 * T, (L, T)
toff = 32 + ((4 * D + 7) & ~7)
blob = toff + 8 * (T + 1)
got = [struct.unpack_from(">I", p, blob + 4 * i)[0] for i in range(T)]
assert got == ids, (got[:5], ids[:5])
EOF
expect_ok "verify" "$T" verify "$WORK/i"
"$T" info --json "$WORK/i" 2>/dev/null | grep -q '"kind": "term_ids"' && "$T" info "$WORK/i" 2>/dev/null |
    grep -q "weighted (integer term ids) postings" && ok "tartan info names the term-id postings" || bad "info kind"
expect_ok "search --sparse-queries term ids" S --index "$WORK/i" \
    --sparse-queries "$WORK/q.ids.jsonl" --out "$WORK/a.run"
"$PY" "$WORK/model.py" "$WORK/a.run" "$WORK/all.ids.jsonl" "$WORK/q.ids.jsonl" >"$WORK/m" &&
    ok "term-id scores equal the quantized model's ($(cat "$WORK/m"))" || bad "ids model: $(head -5 "$WORK/m")"
expect_ok "search with string terms mapped through --vocab" S --index "$WORK/i" \
    --sparse-queries "$WORK/q.str.jsonl" --vocab "$WORK/vocab.txt" --out "$WORK/b.run"
grep -v '^q20 ' "$WORK/a.run" | cmp -s - "$WORK/b.run" && ok "string terms via the vocabulary = their ids" ||
    bad "vocab-mapped run differs"

# the vocabulary stored in the index (vocab.tt)
"$PY" - "$WORK" <<'EOF' && ok "vocab.tt: kind VOCB, the vocabulary's 500 terms in id order, in the manifest" || bad "vocab.tt"
import struct, sys
w = sys.argv[1]
f = open(w + "/i/vocab.tt", "rb").read()
assert f[:8] == b"TRTNVOCB", f[:8]
V, L, c = struct.unpack_from("<QQQ", f, 16)
terms = [l.rstrip("\n") for l in open(w + "/vocab.txt")]
assert (V, L, c) == (len(terms), sum(map(len, terms)), 0), (V, L, c)
p = f[64:]
off = struct.unpack_from("<%dQ" % (V + 1), p, 0)
blob = p[8 * (V + 1):]
assert [blob[off[i]:off[i + 1]].decode() for i in range(V)] == terms
assert b"vocab.tt" in open(w + "/i/MANIFEST", "rb").read()
EOF
expect_ok "search with string terms, the stored vocabulary (no --vocab)" S --index "$WORK/i" \
    --sparse-queries "$WORK/q.str.jsonl" --out "$WORK/c.run"
cmp -s "$WORK/b.run" "$WORK/c.run" && ok "stored vocabulary = the --vocab file's mapping" ||
    bad "stored-vocabulary run differs"
expect_ok "--query-text through the stored vocabulary" S --index "$WORK/i" \
    --query-text "$WORK/q.text.jsonl" --out "$WORK/t.run"
expect_ok "the same queries as term ids weighted by count" S --index "$WORK/i" \
    --sparse-queries "$WORK/q.cnt.jsonl" --out "$WORK/t2.run"
cmp -s "$WORK/t.run" "$WORK/t2.run" && [ -s "$WORK/t.run" ] &&
    ok "text queries = their words' ids weighted by count (unknown words dropped)" || bad "text queries differ"
"$PY" "$WORK/model.py" "$WORK/t.run" "$WORK/all.ids.jsonl" "$WORK/q.cnt.jsonl" >"$WORK/m" &&
    ok "text-query scores equal the quantized model's" || bad "text model: $(head -5 "$WORK/m")"
expect_fail "a --vocab that is not the stored one" "vocab2.txt is not the vocabulary stored in" \
    S --index "$WORK/i" --sparse-queries "$WORK/q.str.jsonl" --vocab "$WORK/vocab2.txt" --out "$WORK/x.run"
expect_fail "... naming the first difference" "term id 0 is 'tok1' in one and 'tok0' in the other" \
    S --index "$WORK/i" --sparse-queries "$WORK/q.str.jsonl" --vocab "$WORK/vocab2.txt" --out "$WORK/x.run"
# an index with a vocabulary through add (strings mapped by the stored one), add with
# another vocabulary refused, compaction keeps it
expect_ok "build the first part with the vocabulary" B --corpus "$WORK/one.corpus.jsonl" \
    --sparse "$WORK/one.ids.jsonl" --vocab "$WORK/vocab.txt" --out "$WORK/v"
expect_fail "add with another vocabulary" "vocab2.txt is not the vocabulary stored in" "$T" add \
    --index "$WORK/v" --encoder "$HASH" --corpus "$WORK/two.corpus.jsonl" \
    --sparse "$WORK/two.ids.jsonl" --vocab "$WORK/vocab2.txt"
printf '{"id": "d100", "term_ids": {"500": 1.0}}\n' >"$WORK/past1.jsonl"
head -1 "$WORK/two.corpus.jsonl" >"$WORK/one1.corpus.jsonl"
expect_fail "add ids past the stored vocabulary" "term id 500 is past the vocabulary (500 terms" \
    "$T" add --index "$WORK/v" --encoder "$HASH" --corpus "$WORK/one1.corpus.jsonl" --sparse "$WORK/past1.jsonl"
expect_ok "add string terms without --vocab (the stored vocabulary)" "$T" add --index "$WORK/v" \
    --encoder "$HASH" --corpus "$WORK/two.corpus.jsonl" --sparse "$WORK/two.str.jsonl"
expect_ok "search after the add" S --index "$WORK/v" --sparse-queries "$WORK/q.ids.jsonl" --out "$WORK/v0.run"
"$PY" "$WORK/model.py" "$WORK/v0.run" "$WORK/all.ids.jsonl" "$WORK/q.ids.jsonl" "$ALL" 100 >"$WORK/m" &&
    ok "strings added through the stored vocabulary = their ids (two segments)" || bad "v add: $(head -5 "$WORK/m")"
expect_ok "compact (vocabulary)" "$T" compact --index "$WORK/v"
grep -q vocab.tt "$WORK/v/MANIFEST" && [ -f "$WORK/v/vocab.tt" ] && ok "compaction keeps vocab.tt" ||
    bad "vocab.tt lost in compaction"
expect_ok "verify after compaction (vocabulary)" "$T" verify "$WORK/v"
expect_ok "string queries after compaction" S --index "$WORK/v" --sparse-queries "$WORK/q.str.jsonl" \
    --out "$WORK/v1.run"
expect_ok "id queries after compaction" S --index "$WORK/v" --sparse-queries "$WORK/q.ids.jsonl" \
    --out "$WORK/v2.run"
grep -v '^q20 ' "$WORK/v2.run" | cmp -s - "$WORK/v1.run" &&
    ok "after compaction: strings via the stored vocabulary = ids" || bad "compacted vocabulary run differs"
cp -r "$WORK/v" "$WORK/vbad"
"$PY" - "$WORK/vbad/vocab.tt" <<'EOF'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[-1] ^= 1; open(sys.argv[1], "wb").write(b)
EOF
expect_fail "a damaged vocab.tt" "vocab.tt" S --index "$WORK/vbad" --sparse-queries "$WORK/q.ids.jsonl" --out "$WORK/x.run"
expect_ok "build --force over an index with vocab.tt (an index file)" B --corpus "$WORK/one.corpus.jsonl" \
    --sparse "$WORK/one.ids.jsonl" --force --out "$WORK/v"
[ ! -e "$WORK/v/vocab.tt" ] && ok "the replacing build (without --vocab) has no vocab.tt" || bad "vocab.tt left behind"

# add, delete, compact: the same results as the model over the live documents
expect_ok "build the first part" B --corpus "$WORK/one.corpus.jsonl" --sparse "$WORK/one.ids.jsonl" \
    --out "$WORK/l"
expect_fail "add with --vocab to an index built without one" "was built without a vocabulary" \
    "$T" add --index "$WORK/l" --encoder "$HASH" --corpus "$WORK/two.corpus.jsonl" \
    --sparse "$WORK/two.ids.jsonl" --vocab "$WORK/vocab.txt"
expect_ok "add term ids" "$T" add --index "$WORK/l" --encoder "$HASH" \
    --corpus "$WORK/two.corpus.jsonl" --sparse "$WORK/two.ids.jsonl"
expect_fail "string query terms against an index of ids without a vocabulary" "sparse terms are integer ids" \
    S --index "$WORK/l" --sparse-queries "$WORK/q.str.jsonl" --out "$WORK/x.run"
printf 'd3\nd50\nd120\n' >"$WORK/del.txt"
expect_ok "delete" "$T" delete --index "$WORK/l" --ids "$WORK/del.txt"
LIVE=$("$PY" -c "print(','.join('d%d' % i for i in range(150) if i not in (3, 50, 120)))")
expect_ok "search after add and delete" S --index "$WORK/l" \
    --sparse-queries "$WORK/q.ids.jsonl" --out "$WORK/l0.run"
"$PY" "$WORK/model.py" "$WORK/l0.run" "$WORK/all.ids.jsonl" "$WORK/q.ids.jsonl" "$LIVE" 100 >"$WORK/m" &&
    ok "after add and delete: the model of two segments" || bad "two segments: $(head -5 "$WORK/m")"
expect_ok "compact" "$T" compact --index "$WORK/l"
expect_ok "verify after compaction" "$T" verify "$WORK/l"
expect_ok "search after add/delete/compact" S --index "$WORK/l" \
    --sparse-queries "$WORK/q.ids.jsonl" --out "$WORK/l.run"
"$PY" "$WORK/model.py" "$WORK/l.run" "$WORK/all.ids.jsonl" "$WORK/q.ids.jsonl" "$LIVE" 100 c >"$WORK/m" &&
    ok "after compaction: the live weights quantized again with the merged scales" || bad "live: $(head -5 "$WORK/m")"
expect_fail "add string terms to an index of ids" "term-id weighted" "$T" add --index "$WORK/l" \
    --encoder "$HASH" --corpus "$WORK/two.corpus.jsonl" --sparse "$WORK/q.str.jsonl"

# bad input
printf '{"id": "d0", "term_ids": {"500": 1.0}}\n' >"$WORK/past.jsonl"
expect_fail "an id past the vocabulary" "past.jsonl:1: term id 500 is past the vocabulary (500 terms" \
    S --index "$WORK/i" --sparse-queries "$WORK/past.jsonl" --vocab "$WORK/vocab.txt" --out "$WORK/x.run"
printf '{"id": "q0", "terms": {"nosuchword": 1.0}}\n' >"$WORK/unk.jsonl"
expect_fail "a term not in the vocabulary" "unk.jsonl:1: term 'nosuchword' is not in the vocabulary" \
    S --index "$WORK/i" --sparse-queries "$WORK/unk.jsonl" --vocab "$WORK/vocab.txt" --out "$WORK/x.run"
printf '{"id": "a", "term_ids": {"1": 1.0}}\n{"id": "b", "terms": {"x": 1.0}}\n' >"$WORK/mix.jsonl"
expect_fail "ids then strings without a vocabulary" "mix.jsonl:2: string \"terms\" after records with \"term_ids\"" \
    S --index "$WORK/l" --sparse-queries "$WORK/mix.jsonl" --out "$WORK/x.run"
printf '{"id": "a", "terms": {"x": 1.0}}\n{"id": "b", "term_ids": {"1": 1.0}}\n' >"$WORK/mix2.jsonl"
expect_fail "strings then ids" "mix2.jsonl:2: \"term_ids\" after records with string" \
    S --index "$WORK/l" --sparse-queries "$WORK/mix2.jsonl" --out "$WORK/x.run"
for k in '"-1"' '"01"' '"4294967296"' '"x1"' '""'; do
    printf '{"id": "a", "term_ids": {%s: 1.0}}\n' "$k" >"$WORK/badid.jsonl"
    expect_fail "term id key $k refused" "is not a decimal integer" \
        S --index "$WORK/i" --sparse-queries "$WORK/badid.jsonl" --out "$WORK/x.run"
done
printf '{"id": "a", "term_ids": {"4294967295": 1.0, "0": 2.0}}\n' >"$WORK/edge.jsonl"
expect_ok "ids 0 and 2^32-1 accepted without a vocabulary" S --index "$WORK/l" \
    --sparse-queries "$WORK/edge.jsonl" --out "$WORK/x.run"
printf '{"id": "a", "term_ids": {"7": NaN}}\n' >"$WORK/nan.jsonl"
expect_fail "a NaN weight" "nan.jsonl:1" S --index "$WORK/i" --sparse-queries "$WORK/nan.jsonl" --out "$WORK/x.run"
printf '{"id": "a", "term_ids": {"7": -1}}\n' >"$WORK/neg.jsonl"
expect_fail "a negative weight names the id" "term id 7 has a negative weight" \
    S --index "$WORK/i" --sparse-queries "$WORK/neg.jsonl" --out "$WORK/x.run"
printf 'a\nb\na\n' >"$WORK/dup.txt"
expect_fail "a repeated vocabulary term" "dup.txt:3: term 'a' repeats line 1" \
    S --index "$WORK/i" --sparse-queries "$WORK/q.ids.jsonl" --vocab "$WORK/dup.txt" --out "$WORK/x.run"
printf 'a\n\nb\n' >"$WORK/empty.txt"
expect_fail "an empty vocabulary line" "empty.txt:2: an empty term" \
    S --index "$WORK/i" --sparse-queries "$WORK/q.ids.jsonl" --vocab "$WORK/empty.txt" --out "$WORK/x.run"
finish

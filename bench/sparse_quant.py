#!/usr/bin/env python3
"""BM25 as precomputed float weights, for measuring what tartan's 8-bit quantization of
sparse weights loses (bench/sparse_bench.sh): writes DOCS.jsonl with each document's
BM25 impacts idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl)) (k1 0.9,
b 0.4, tartan's tokenizer and idf) and QUERIES.jsonl with each query's term counts, so
that `tartan build --sparse DOCS.jsonl` + `search --sparse-queries QUERIES.jsonl` is
BM25 with every weight quantized to 8 bits (one scale per term).

    sparse_quant.py CORPUS QUERIES DOCS_OUT QUERIES_OUT
"""
import json
import math
import re
import sys
from collections import Counter

tok = lambda s: [t.lower() for t in re.findall(r"[A-Za-z0-9]+", s)]
corpus, queries, dout, qout = sys.argv[1:5]
docs = []
for line in open(corpus, encoding="utf-8"):
    d = json.loads(line)
    docs.append((d["_id"], Counter(tok((d["title"] + " " + d["text"]) if d.get("title") else d["text"]))))
N = len(docs)
lens = {i: sum(c.values()) for i, c in docs}
avgdl = sum(lens.values()) / N
df = Counter()
for _, c in docs:
    df.update(c.keys())
k1, b = 0.9, 0.4
with open(dout, "w") as f:
    for i, c in docs:
        norm = k1 * (1 - b + b * lens[i] / avgdl)
        terms = {t: math.log(1 + (N - df[t] + 0.5) / (df[t] + 0.5)) * tf * (k1 + 1) / (tf + norm)
                 for t, tf in c.items()}
        f.write(json.dumps({"id": i, "terms": terms}) + "\n")
with open(qout, "w") as f:
    for line in open(queries, encoding="utf-8"):
        q = json.loads(line)
        f.write(json.dumps({"id": q["_id"], "terms": dict(Counter(tok(q["text"])))}) + "\n")

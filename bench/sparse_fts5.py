#!/usr/bin/env python3
"""SQLite FTS5 bm25() ranking (what next-plaid uses for its lexical side) on a BEIR
collection, the baseline of bench/sparse_bench.sh: builds an FTS5 table of title + " " +
text, runs every query as an OR of its tokens ordered by bm25() (FTS5's k1 = 1.2,
b = 0.75, its unicode61 tokenizer), and writes a TREC run and per-query latencies.

    sparse_fts5.py CORPUS QUERIES K RUN   -> prints "mean_ms p50_ms p95_ms queries"
"""
import json
import re
import sqlite3
import sys
import time


def main():
    corpus, queries, k, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE docs USING fts5(docid UNINDEXED, body)")
    rows = []
    for line in open(corpus, encoding="utf-8"):
        d = json.loads(line)
        body = (d["title"] + " " + d["text"]) if d.get("title") else d["text"]
        rows.append((str(d["_id"]), body))
    db.executemany("INSERT INTO docs(docid, body) VALUES (?, ?)", rows)
    db.commit()
    qs = [json.loads(l) for l in open(queries, encoding="utf-8")]
    sql = "SELECT docid, bm25(docs) FROM docs WHERE docs MATCH ? ORDER BY bm25(docs) LIMIT ?"
    lat = []
    with open(run, "w") as out:
        for q in qs:
            toks = sorted(set(t.lower() for t in re.findall(r"[A-Za-z0-9]+", q["text"])))
            expr = " OR ".join('"%s"' % t for t in toks)
            t0 = time.perf_counter()
            res = db.execute(sql, (expr, k)).fetchall() if toks else []
            lat.append(time.perf_counter() - t0)
            for r, (docid, score) in enumerate(res):
                out.write("%s Q0 %s %d %.6f fts5\n" % (q["_id"], docid, r + 1, -score))
    lat.sort()
    n = len(lat)
    print("%.3f %.3f %.3f %d" % (1e3 * sum(lat) / n, 1e3 * lat[(n - 1) // 2],
                                 1e3 * lat[min(n - 1, int(0.95 * n))], n))


if __name__ == "__main__":
    main()

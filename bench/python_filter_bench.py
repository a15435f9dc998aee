#!/usr/bin/env python3
"""Filtered search: the Python binding's overhead against the C CLI on the same index,
queries and filter (doc/benchmarks.md, "Python binding: filtered search").

    python-venv/bin/python bench/python_filter_bench.py --builddir BUILD --work W \
        [--docs 20000] [--reps 3] [--queries 300]

Makes W/f{docs}.* with tartan-synth, a metadata file (year = 1990 + i % 34, lang one of
three) and the index with `tartan build --metadata` when missing. Then, for each filter
(about 41% of the documents allowed, and about 3%), interleaved REPS times:
  * `tartan search --where EXPR --k 10 --threads 1`: the CLI's p50 per query (timed
    around tt_search inside its batch; the filter is made once per run);
  * Index.search(q, k=10, filter=f) with f = Index.filter(where=EXPR) made once: p50 of
    the whole call timed from Python, and of the call minus the time inside tt_search
    (clocked by the extension): what the binding adds per filtered query;
  * Index.search(q, k=10, where=EXPR): the SQL run at every call (p50 of the call);
  * the unfiltered CLI p50 and Index.search(q, k=10) p50, for scale;
  * batches, 2 threads: `tartan search --where --threads 2` QPS against
    Index.search(all queries, where=EXPR, threads=2).
BLAS threads are 1 in both. Prints one JSON object per measurement and a Markdown table.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import time

import numpy as np

import tartan

FILTERS = [("year >= 2010", "41%"), ("year = 2000", "3%")]


def sh(*args):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True)


def cli(build, idx, qpath, k, threads, out, where=None):
    cmd = [os.path.join(build, "tartan"), "search", "--index", idx, "--queries", qpath,
           "--k", k, "--threads", threads, "--out", out]
    if where:
        cmd += ["--where", where]
    r = sh(*cmd)
    m = re.search(r"([\d.]+) QPS; latency mean ([\d.]+) ms, p50 ([\d.]+) ms", r.stderr)
    return {"qps": float(m.group(1)), "p50_ms": float(m.group(3))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tartan.set_blas_threads(1)
    pre = os.path.join(a.work, f"f{a.docs}")
    idx = pre + ".idx"
    if not os.path.exists(pre + ".queries.npy"):
        sh(os.path.join(a.builddir, "tartan-synth"), "--out", pre, "--docs", a.docs,
           "--queries", a.queries, "--seed", 1)
    if not os.path.exists(idx):
        with open(pre + ".meta.jsonl", "w") as f:
            for i in range(a.docs):
                f.write(json.dumps({"year": 1990 + i % 34, "lang": ("en", "fr", "de")[i % 3]})
                        + "\n")
        sh(os.path.join(a.builddir, "tartan"), "build", "--vectors", pre + ".vectors.npy",
           "--doclens", pre + ".doclens.npy", "--ids", pre + ".ids.txt", "--metadata",
           pre + ".meta.jsonl", "--out", idx, "--threads", 2)
    qpath = pre + ".queries.npy"
    Q = np.load(qpath)
    out = os.path.join(a.work, "bench.run")
    rows = []
    with tartan.Index(idx) as ix:
        for q in Q[:20]:  # warm the mapping and the caches
            ix.search(q, k=a.k)
        for rep in range(a.reps):
            c0 = cli(a.builddir, idx, qpath, a.k, 1, out)
            p0 = [0.0] * len(Q)
            for i, q in enumerate(Q):
                t = time.perf_counter()
                ix.search(q, k=a.k)
                p0[i] = time.perf_counter() - t
            for where, sel in FILTERS:
                c1 = cli(a.builddir, idx, qpath, a.k, 1, out, where)
                f = ix.filter(where=where)
                wall, inside, each = [], [], []
                for q in Q:
                    t = time.perf_counter()
                    ix.search(q, k=a.k, filter=f)
                    wall.append(time.perf_counter() - t)
                    inside.append(ix._last_seconds)
                for q in Q:
                    t = time.perf_counter()
                    ix.search(q, k=a.k, where=where)
                    each.append(time.perf_counter() - t)
                c2 = cli(a.builddir, idx, qpath, a.k, 2, out, where)
                t = time.perf_counter()
                ix.search(Q, k=a.k, where=where, threads=2)
                bq = len(Q) / (time.perf_counter() - t)
                r = {"rep": rep, "where": where, "allowed": f.allowed, "sel": sel,
                     "cli_p50_ms": c1["p50_ms"],
                     "py_filter_p50_ms": 1e3 * statistics.median(wall),
                     "outside_p50_us": 1e6 * statistics.median(
                         [w - s for w, s in zip(wall, inside)]),
                     "py_where_p50_ms": 1e3 * statistics.median(each),
                     "cli_unfiltered_p50_ms": c0["p50_ms"],
                     "py_unfiltered_p50_ms": 1e3 * statistics.median(p0),
                     "cli_qps_2t": c2["qps"], "py_qps_2t": bq}
                print(json.dumps(r), flush=True)
                rows.append(r)
    print("\n| filter | allowed | rep | CLI p50 | Python p50, filter= | vs CLI | outside "
          "tt_search (p50) | Python p50, where= each call | CLI / Python p50 unfiltered | "
          "CLI QPS 2 threads | Python batch QPS 2 threads | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        d = r["py_filter_p50_ms"] - r["cli_p50_ms"]
        print(f"| `{r['where']}` | {r['allowed']} ({r['sel']}) | {r['rep']} | "
              f"{r['cli_p50_ms']:.3f} ms | {r['py_filter_p50_ms']:.3f} ms | "
              f"{1e3 * d:+.0f} us ({100 * d / r['cli_p50_ms']:+.1f}%) | "
              f"{r['outside_p50_us']:.1f} us | {r['py_where_p50_ms']:.3f} ms | "
              f"{r['cli_unfiltered_p50_ms']:.3f} / {r['py_unfiltered_p50_ms']:.3f} ms | "
              f"{r['cli_qps_2t']:.0f} | {r['py_qps_2t']:.0f} | "
              f"{r['py_qps_2t'] / r['cli_qps_2t']:.2f} |")


if __name__ == "__main__":
    main()

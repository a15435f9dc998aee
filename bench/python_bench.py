#!/usr/bin/env python3
"""Python binding overhead against the C CLI on the same index and queries
(doc/benchmarks.md, "Python binding").

    python-venv/bin/python bench/python_bench.py --builddir BUILD --work W [--reps 3]

Makes W/s20k.* with tartan-synth and W/s20k.idx with `tartan build` when missing (the
20k-document collection of "PLAID at the reference's scale"; and W/s1k, 1000 documents,
where a search is so short that the binding's fixed cost per call shows), then,
interleaved, REPS times on each:
  * `tartan search --k 10 --threads 1`: its p50 per-query latency (timed around
    tt_search inside the batch) and QPS;
  * tartan.Index.search of each query alone from Python, timed around the whole call
    (array checks, the C call, ids to str, result arrays): p50 and QPS;
  * batch search, 2 threads: `tartan search --threads 2` against
    Index.search(all queries, threads=2).
BLAS threads are 1 in both (the CLI sets that; here tartan.set_blas_threads(1)).
Prints one JSON object per measurement and a summary table in Markdown.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

import tartan


def sh(*args, **kw):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True, **kw)


def cli_search(build, idx, pre, k, threads, out):
    r = sh(os.path.join(build, "tartan"), "search", "--index", idx, "--queries",
           pre + ".queries.npy", "--query-ids", pre + ".qids.txt", "--k", k, "--threads",
           threads, "--out", out)
    m = re.search(r"([\d.]+) QPS; latency mean ([\d.]+) ms, p50 ([\d.]+) ms", r.stderr)
    return {"qps": float(m.group(1)), "mean_ms": float(m.group(2)), "p50_ms": float(m.group(3))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builddir", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tartan.set_blas_threads(1)
    out = os.path.join(a.work, "bench.run")
    rows = []
    for name, ndocs in (("s20k", 20000), ("s1k", 1000)):
        pre = os.path.join(a.work, name)
        idx = pre + ".idx"
        if not os.path.exists(pre + ".queries.npy"):
            sh(os.path.join(a.builddir, "tartan-synth"), "--out", pre, "--docs", ndocs,
               "--doclen", 30, "--dim", 128, "--queries", 1000, "--qlen", 32, "--noise", 0.3,
               "--qnoise", 0.2)
        if not os.path.exists(idx):
            sh(os.path.join(a.builddir, "tartan"), "build", "--vectors", pre + ".vectors.npy",
               "--doclens", pre + ".doclens.npy", "--ids", pre + ".ids.txt", "--out", idx,
               "--threads", 2)
        Q = np.ascontiguousarray(np.load(pre + ".queries.npy"), dtype=np.float32)
        with tartan.Index(idx) as ix:
            for q in Q[:50]:  # warm the page cache and the context pool
                ix.search(q, k=a.k)
            for rep in range(a.reps):
                c1 = cli_search(a.builddir, idx, pre, a.k, 1, out)
                lat, inner = [], []
                t0 = time.perf_counter()
                for q in Q:
                    s = time.perf_counter()
                    ix.search(q, k=a.k)
                    lat.append(time.perf_counter() - s)
                    inner.append(ix._last_seconds)  # tt_search's own time in that call
                wall = time.perf_counter() - t0
                p1 = {"qps": len(Q) / wall, "p50_ms": 1e3 * statistics.median(lat),
                      "mean_ms": 1e3 * statistics.fmean(lat),
                      "inner_p50_ms": 1e3 * statistics.median(inner),
                      "outside_p50_us": 1e6 * statistics.median(
                          [x - y for x, y in zip(lat, inner)])}
                # in-process pairs: the same query through Index.search and through the
                # library alone (tt_search's own time, as the CLI measures it), in
                # alternating order; their difference is the binding's cost per call
                sec = np.empty(1, np.float64)
                r_, s_, n_ = (np.empty(a.k, np.int64), np.empty(a.k, np.float32),
                              np.empty(1, np.uint32))
                one_off, one_len = np.zeros(1, np.uint64), np.empty(1, np.uint32)
                py_t, c_t = [], []
                for i, q in enumerate(Q):
                    one_len[0] = q.shape[0]
                    for first in ((0, 1) if i % 2 else (1, 0)):
                        if first:
                            s = time.perf_counter()
                            ix.search(q, k=a.k)
                            py_t.append(time.perf_counter() - s)
                        else:
                            ix._search_batch(q, one_off, one_len, a.k, None, 1, r_, s_, n_,
                                             False, sec)
                            c_t.append(sec[0])
                pair = {"python_p50_ms": 1e3 * statistics.median(py_t),
                        "library_p50_ms": 1e3 * statistics.median(c_t),
                        "median_diff_us": 1e6 * statistics.median(
                            [x - y for x, y in zip(py_t, c_t)])}
                c2 = cli_search(a.builddir, idx, pre, a.k, 2, out)
                t0 = time.perf_counter()
                ix.search(Q, k=a.k, threads=2)
                p2 = {"qps": len(Q) / (time.perf_counter() - t0)}
                row = {"index": name, "rep": rep, "cli_1t": c1, "python_1t": p1, "cli_2t": c2,
                       "python_batch_2t": p2, "in_process": pair}
                print(json.dumps(row), flush=True)
                rows.append(row)
    # The binding's fixed cost: a 300-document index (4 x 128-d each) where tt_search is
    # short; Index.search against its C method with preallocated outputs.
    tiny = os.path.join(a.work, "tiny.idx")
    rng = np.random.default_rng(0)
    if not os.path.exists(tiny):
        tartan.build(tiny, [rng.standard_normal((4, 128)).astype(np.float32)
                            for _ in range(300)], centroids=8, threads=1)
    q = rng.standard_normal((32, 128)).astype(np.float32)
    r_, s_ = np.empty(a.k, np.int64), np.empty(a.k, np.float32)

    def med(f, n=5000):
        lat = []
        for _ in range(n):
            t = time.perf_counter()
            f()
            lat.append(time.perf_counter() - t)
        return 1e6 * statistics.median(lat)
    with tartan.Index(tiny) as ix:
        fixed = []
        for rep in range(a.reps):
            f = {"search_us": med(lambda: ix.search(q, k=a.k)),
                 "search_rows_us": med(lambda: ix.search(q, k=a.k, rows=True)),
                 "c_method_ids_us": med(lambda: ix._search(q, a.k, None, r_, s_, True)),
                 "c_method_rows_us": med(lambda: ix._search(q, a.k, None, r_, s_, False))}
            print(json.dumps({"index": "tiny", "rep": rep, **f}), flush=True)
            fixed.append(f)
    print()
    print("| rep | Index.search | rows=True | C method, ids | C method, rows |")
    print("|---:|---:|---:|---:|---:|")
    for i, f in enumerate(fixed):
        print(f"| {i} | {f['search_us']:.1f} us | {f['search_rows_us']:.1f} us | "
              f"{f['c_method_ids_us']:.1f} us | {f['c_method_rows_us']:.1f} us |")
    print()
    print("| index | rep | CLI p50 | Python p50 | vs CLI | time outside tt_search per call "
          "(p50) | same process: library p50 | Python p50 | median paired difference "
          "| CLI QPS 2 threads | Python batch QPS 2 threads | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c, p = r["cli_1t"], r["python_1t"]
        print(f"| {r['index']} | {r['rep']} | {c['p50_ms']:.3f} ms | {p['p50_ms']:.3f} ms | "
              f"{1e3 * (p['p50_ms'] - c['p50_ms']):+.0f} us "
              f"({100 * (p['p50_ms'] / c['p50_ms'] - 1):+.1f}%) | "
              f"{p['outside_p50_us']:.1f} us ({p['outside_p50_us'] / 10 / p['inner_p50_ms']:.1f}%)"
              f" | {r['in_process']['library_p50_ms']:.3f} ms | "
              f"{r['in_process']['python_p50_ms']:.3f} ms | "
              f"{r['in_process']['median_diff_us']:+.1f} us "
              f"({100 * r['in_process']['median_diff_us'] / 1e3 / r['in_process']['library_p50_ms']:+.1f}%) | "
              f"{r['cli_2t']['qps']:.0f} | "
              f"{r['python_batch_2t']['qps']:.0f} | "
              f"{r['python_batch_2t']['qps'] / r['cli_2t']['qps']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

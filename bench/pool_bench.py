#!/usr/bin/python3
"""Token pooling: what it costs and saves (doc/benchmarks.md, "Token pooling").

For each pool factor (1 = none) builds a 2-bit index of the collection with kept
float16 originals, then searches it with PLAID (k = 10, default parameters) and exactly
(MaxSim over its stored vectors: the pooled ones for factors > 1). The reference is exact
MaxSim over the unpooled vectors (factor 1, --mode exact). Per variant: build seconds
(`tartan info`: wall clock, and the process's CPU seconds), index bytes (without the
originals) against float16 input vectors, the metric, its difference to the reference
and a paired two-sided t-test over queries (scipy.stats.ttest_rel; '*' at p < 0.05).

    bench/pool_bench.py --tartan build/tartan --vectors W/sf.vectors.npy \\
        --doclens W/sf.doclens.npy --ids W/sf.ids.txt --queries W/sfq.vectors.npy \\
        --qlens W/sfq.doclens.npy --query-ids W/sfq.ids.txt \\
        --qrels ../shared/data/scifact/qrels.trec --work W/pool-sf --factors 1,2,3,4
"""
import argparse
import json
import os
import resource
import subprocess
import time

from scipy.stats import ttest_rel


def run(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, time.time() - t0, cpu


def per_query(t, qrels, runfile, metric):
    out, _, _ = run([t, "eval", "--qrels", qrels, "--run", runfile, "--metrics", metric,
                     "--per-query", "--digits", "6"])
    vals, mean, section = {}, None, None
    for line in out.splitlines():  # "query METRIC", "qid value"...; "metric value queries"
        f = line.split()
        if f[:1] in (["query"], ["metric"]):
            section = f[0]
        elif section == "query" and len(f) == 2:
            vals[f[0]] = float(f[1])
        elif section == "metric" and len(f) == 3 and f[0] == metric:
            mean = float(f[1])
    return vals, mean


def main():
    ap = argparse.ArgumentParser()
    for a in ("tartan", "vectors", "doclens", "ids", "queries", "query-ids", "qrels", "work"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--qlens", help="vectors per query, for 2-D --queries")
    ap.add_argument("--factors", default="1,2,3,4")
    ap.add_argument("--metric", default="nDCG@10")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--extra", default="", help="more build options, space-separated")
    a = ap.parse_args()
    t = a.tartan
    os.makedirs(a.work, exist_ok=True)
    q = ["--queries", a.queries, "--query-ids", a.query_ids, "--k", "10"]
    if a.qlens:
        q += ["--qlens", a.qlens]
    rows, ref = [], None
    for f in [int(x) for x in a.factors.split(",")]:
        idx = os.path.join(a.work, "pool%d" % f)
        _, wall, cpu = run([t, "build", "--vectors", a.vectors, "--doclens", a.doclens,
                            "--ids", a.ids, "--out", idx, "--force", "--threads", a.threads,
                            "--keep-originals", "f16", "--pool-factor", str(f)] +
                           a.extra.split())
        info = json.loads(run([t, "info", "--json", idx])[0])
        res = {}
        for mode in ("plaid", "exact"):
            rf = os.path.join(a.work, "pool%d.%s.run" % (f, mode))
            run([t, "search", "--index", idx, "--mode", mode, "--out", rf] + q)
            res[mode] = per_query(t, a.qrels, rf, a.metric)
        if f == 1:
            ref = res["exact"]
        rows.append((f, wall, cpu, info, res))
    print("| pool factor | vectors | build s (CPU s) | index | x smaller than f16 input "
          "| %s PLAID | %s exact over stored vectors |" % (a.metric, a.metric))
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for f, wall, cpu, info, res in rows:
        cells = []
        for mode in ("plaid", "exact"):
            vals, mean = res[mode]
            qs = sorted(set(vals) & set(ref[0]))
            if f == 1 and mode == "exact":
                cells.append("%.4f (reference)" % mean)
                continue
            p = ttest_rel([vals[x] for x in qs], [ref[0][x] for x in qs]).pvalue
            cells.append("%.4f (%+.4f, p = %.2f%s)" % (mean, mean - ref[1], p,
                                                       "*" if p < 0.05 else ""))
        print("| %d | %d | %.1f (%.1f) | %.2f MiB | %.2f | %s | %s |" % (
            f, info["num_vectors"], wall, cpu, info["bytes"]["index"] / 1048576.0,
            info["ratio_input_f16"], cells[0], cells[1]))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Token pooling by a factor against one cut for the whole collection, in numpy/SciPy
(doc/benchmarks.md, "Token pooling by one cut"): exact MaxSim over the pooled float
vectors, no compression, nDCG@10 against the qrels.

Each document's vectors get SciPy's Ward dendrogram; "factor F" cuts it to
max(1, floor(n / F)) clusters, "global F" cuts every dendrogram at the one height that
leaves about N / F of the N vectors, "none" keeps them all. Clusters are replaced by
their means, renormalised.

    bench/pool_cut.py --docs W/sf --queries W/sfq --qrels ../shared/data/scifact/qrels.tsv \\
        none factor:2 global:2 global:3
(W/sf.{vectors,doclens}.npy + W/sf.ids.txt: tartan encode output; the same for queries.)
"""
import argparse
import collections
import math

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", required=True)
    ap.add_argument("--queries", required=True)
    ap.add_argument("--qrels", required=True)
    ap.add_argument("runs", nargs="+", help="none, factor:F or global:F")
    a = ap.parse_args()
    V = np.load(a.docs + ".vectors.npy").astype(np.float32)
    L = np.load(a.docs + ".doclens.npy").astype(np.int64)
    ids = [l.strip() for l in open(a.docs + ".ids.txt")]
    Q = np.load(a.queries + ".vectors.npy").astype(np.float32)
    QL = np.load(a.queries + ".doclens.npy").astype(np.int64)
    qids = [l.strip() for l in open(a.queries + ".ids.txt")]
    qrels = collections.defaultdict(dict)
    for line in open(a.qrels):
        f = line.split()
        if len(f) >= 3 and f[0] not in ("query-id", "qid"):
            qrels[f[0]][f[-2] if len(f) == 4 else f[1]] = int(f[-1])
    off = np.concatenate([[0], np.cumsum(L)])
    Z = [linkage(V[off[d]:off[d + 1]].astype(np.float64), "ward") if L[d] > 1 else None
         for d in range(len(L))]

    def pool(labels_of):
        out, lens = [], []
        for d in range(len(L)):
            x = V[off[d]:off[d + 1]]
            if Z[d] is None:
                out.append(x)
                lens.append(len(x))
                continue
            lab = labels_of(d)
            P = np.stack([x[lab == c].mean(0) for c in range(1, lab.max() + 1)])
            out.append((P / np.linalg.norm(P, axis=1, keepdims=True)).astype(np.float32))
            lens.append(len(P))
        return np.concatenate(out), np.array(lens)

    def ndcg10(Vp, Lp):
        starts = np.concatenate([[0], np.cumsum(Lp)])[:-1]
        qo = np.concatenate([[0], np.cumsum(QL)])
        vals = []
        for i, q in enumerate(qids):
            rel = qrels.get(q)
            if not rel:
                continue
            s = np.maximum.reduceat(Q[qo[i]:qo[i + 1]] @ Vp.T, starts, axis=1).sum(0)
            top = np.argsort(-s, kind="stable")[:10]
            dcg = sum(rel.get(ids[t], 0) / math.log2(r + 2) for r, t in enumerate(top))
            idcg = sum(g / math.log2(r + 2)
                       for r, g in enumerate(sorted(rel.values(), reverse=True)[:10]))
            vals.append(dcg / idcg)
        return float(np.mean(vals)), len(vals)

    for run in a.runs:
        kind, _, f = run.partition(":")
        if kind == "none":
            Vp, Lp = V, L
        elif kind == "factor":
            F = float(f)
            Vp, Lp = pool(lambda d: fcluster(Z[d], t=max(1, int(L[d] // F)), criterion="maxclust"))
        elif kind == "global":
            F = float(f)
            h = np.sort(np.concatenate([z[:, 2] for z in Z if z is not None]))
            h = h[int(len(V) - len(V) / F) - 1]
            Vp, Lp = pool(lambda d: fcluster(Z[d], t=h, criterion="distance"))
        else:
            raise SystemExit("unknown run " + run)
        m, n = ndcg10(Vp, Lp)
        print("%-12s vectors %9d  nDCG@10 %.4f  (%d queries)" % (run, len(Vp), m, n), flush=True)


if __name__ == "__main__":
    main()

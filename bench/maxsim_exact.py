#!/usr/bin/python3
"""Exact MaxSim over the uncompressed float32 document vectors, every document, as a TREC
run: the ground truth for recall@k of both tartan and the PLAID reference in
bench/plaid_side_by_side.sh (independent of either's index).

usage: maxsim_exact.py VECTORS.npy DOCLENS.npy IDS.txt QUERIES.npy QIDS.txt K OUT.run
       [LIMIT]
Score of a document: sum over query vectors of the best inner product with any of its
vectors (ColBERT's MaxSim).
"""
import sys

import numpy as np


def main():
    vpath, lpath, idpath, qpath, qidpath, k, out = sys.argv[1:8]
    limit = int(sys.argv[8]) if len(sys.argv) > 8 else 0
    k = int(k)
    v = np.load(vpath)
    v = v.reshape(-1, v.shape[-1]).astype(np.float32, copy=False)
    lens = np.load(lpath).astype(np.int64)
    starts = np.zeros(len(lens), dtype=np.int64)
    np.cumsum(lens[:-1], out=starts[1:])
    assert starts[-1] + lens[-1] == len(v), "doclens do not add up to the vectors"
    ids = open(idpath).read().split("\n")
    qids = open(qidpath).read().split()
    q = np.load(qpath).astype(np.float32)
    n = len(q) if not limit else min(limit, len(q))
    with open(out, "w") as f:
        for i in range(n):
            sims = v @ q[i].T                          # (vectors, qlen)
            best = np.maximum.reduceat(sims, starts, axis=0)  # (docs, qlen)
            score = best.sum(axis=1)
            top = np.argpartition(-score, k)[:k]
            top = top[np.argsort(-score[top], kind="stable")]
            for r, d in enumerate(top):
                f.write(f"{qids[i]} Q0 {ids[d]} {r + 1} {score[d]:.6f} exact\n")


main()

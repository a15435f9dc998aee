#!/usr/bin/python3
"""Scales on decoded residuals at scale (doc/benchmarks.md, "Debiasing at 1 bit: per
table, per vector, or none"): what a per-vector scale would give on a collection too
large for bench/codec_study.py, which holds every vector several times over.

Takes the centroids and the centroid of every vector from a tartan index (any codec:
centroids.tt is in the codec's position order, codec.tt's permutation maps it back) and
the collection it was built from, forms every residual r = v - c (v L2-normalised), and
codes it with per-dimension Lloyd-Max tables (25 rounds from the quantile start, trained
on the residuals of every 20th document): the NOUT dimensions of largest second moment at
8 bits, the NZERO of least weighted variance at 0 bits (their mean), the rest at --bits
(tartan's adaptive allocation at 1 bit on the DiffRetriever shape with 4 outlier
dimensions: 4 x 8, 3552 x 1, 28 x 0). Then it scores every query against every document
by exact MaxSim (--score mean or sum) over the decoded vectors c + r^ with
  none       r^ as decoded;
  table      each dimension's weights times g_j = sum x^2 / sum x w(x) over its
             held-out values (tartan's debiased weights, doc/format.md);
  vector     r^ on the dimensions below 8 bits times s = |r_R|^2 / <r_R, r^_R> (0 if
             <r_R, r^_R> <= 0), rounded to float16: one scale per vector;
  vector-sqrt  the same with sqrt(s);
and prints recall@10 against exact MaxSim over the original vectors and MRR@10 on the
qrels. Documents are processed in chunks (--chunk documents at a time), so memory stays
at the collection's float32 copy plus a few chunks.

  /usr/bin/python3 bench/codec_scale.py --index IDX --prefix W/dr20k --bits 1 \\
      --nout 4 --nzero 28 --score mean
"""
import argparse
import os
import sys
import time

import numpy as np

from codec_bound import lloyd_max, read_tt  # the same tables and file reader as the bound study


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def lloyd_max_1bit(H, rounds=25):
    """1-bit Lloyd-Max tables of every column of H at once: cutoffs (dim), weights (dim, 2)."""
    cut = np.median(H, axis=0)
    for _ in range(rounds):
        lo = H < cut
        n_lo = lo.sum(axis=0)
        s_lo = np.where(lo, H, 0).sum(axis=0)
        s_all = H.sum(axis=0)
        w_lo = s_lo / np.maximum(n_lo, 1)
        w_hi = (s_all - s_lo) / np.maximum(len(H) - n_lo, 1)
        cut = 0.5 * (w_lo + w_hi)
    return cut, np.stack([w_lo, w_hi], axis=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--index', required=True)
    ap.add_argument('--prefix', required=True)
    ap.add_argument('--bits', type=int, default=1, choices=(1, 2))
    ap.add_argument('--nout', type=int, default=4)
    ap.add_argument('--nzero', type=int, default=28)
    ap.add_argument('--score', default='mean', choices=('mean', 'sum'))
    ap.add_argument('--k', type=int, default=10)
    ap.add_argument('--chunk', type=int, default=1000)
    a = ap.parse_args()
    for p in (a.prefix + '.vectors.npy', os.path.join(a.index, 'codec.tt')):
        if not os.path.exists(p):
            print(f'codec_scale: {p} is missing', file=sys.stderr)
            return 77
    t0 = time.time()
    X = np.load(a.prefix + '.vectors.npy', mmap_mode='r')
    N, dim = X.shape
    lens = np.load(a.prefix + '.doclens.npy').astype(np.int64)
    Q = np.load(a.prefix + '.queries.npy').astype(np.float32)
    nq, qlen, _ = Q.shape
    qids = open(a.prefix + '.qids.txt').read().split()
    ids = open(a.prefix + '.ids.txt').read().split()
    rel = {}
    for line in open(a.prefix + '.qrels.tsv').read().splitlines()[1:]:
        q, d, s = line.split('\t')
        if int(s) > 0:
            rel.setdefault(q, set()).add(d)
    raw = read_tt(os.path.join(a.index, 'codec.tt'), np.uint8, 1)
    bits_len = (dim + 3) // 4 * 4
    perm = raw[bits_len:bits_len + 4 * dim].view(np.uint32).astype(np.int64)
    C = read_tt(os.path.join(a.index, 'centroids.tt'), np.float32, dim)
    K = C.shape[0]
    codes = read_tt(os.path.join(a.index, 'codes.tt'), np.uint16 if K <= 65536 else np.uint32, 1)
    codes = codes.astype(np.int64)
    assert codes.shape[0] == N, (codes.shape, N)
    # Everything in the index's position order: position k holds input dimension perm[k].
    Qp = Q[:, :, perm].reshape(-1, dim)
    starts = np.concatenate([[0], np.cumsum(lens)])
    ndocs = len(lens)
    scale_q = 1.0 / qlen if a.score == 'mean' else 1.0

    def rows(d0, d1):
        """Vectors of documents [d0, d1): normalised, in position order, and residuals."""
        V = np.asarray(X[starts[d0]:starts[d1]], dtype=np.float32)[:, perm]
        V /= np.linalg.norm(V, axis=1, keepdims=True)
        return V, V - C[codes[starts[d0]:starts[d1]]]

    def maxsim(Y, d0, d1):
        S = Qp @ Y.T  # (nq * qlen, vectors)
        M = np.maximum.reduceat(S, starts[d0:d1] - starts[d0], axis=1)
        return M.reshape(nq, qlen, -1).sum(axis=1) * scale_q

    # Held-out residuals (every 20th document) for the tables and the allocation.
    held = [rows(d, d + 1) for d in range(19, ndocs, 20)]
    m2 = np.concatenate([v for v, _ in held]) ** 2
    m2 = m2.mean(axis=0)  # the vectors' second moments: the allocation's query weights
    H = np.concatenate([r for _, r in held])
    del held
    var = H.var(axis=0)
    out = np.argsort(-m2)[:a.nout]
    gain = m2 * var
    gain[out] = np.inf
    zero = np.argsort(gain)[:a.nzero]
    rest = np.setdiff1d(np.arange(dim), np.concatenate([out, zero]))
    scaled = np.setdiff1d(np.arange(dim), out)  # every dimension below 8 bits
    log(f'N {N} dim {dim} K {K} docs {ndocs} held-out {len(H)}: outliers {len(out)} at 8 bits, '
        f'{len(zero)} at 0, {len(rest)} at {a.bits}')
    # Tables: rest at --bits, outliers at 8, zero-bit dims their mean.
    if a.bits == 1:
        cut_r, w_r = lloyd_max_1bit(H[:, rest])
        cut_r = cut_r[:, None]
    else:
        t = [lloyd_max(H[:, j], a.bits) for j in rest]
        cut_r = np.stack([c for c, _ in t])
        w_r = np.stack([w for _, w in t])
    t8 = [lloyd_max(H[:, j], 8) for j in out]
    zmean = H[:, zero].mean(axis=0)

    def decode(R):
        D = np.empty_like(R)
        Rr = R[:, rest]
        idx = (Rr[:, :, None] > cut_r[None, :, :]).sum(axis=2)
        D[:, rest] = np.take_along_axis(w_r[None, :, :], idx[:, :, None], axis=2)[:, :, 0]
        for t_, j in enumerate(out):
            c8, w8 = t8[t_]
            D[:, j] = w8[np.searchsorted(c8, R[:, j], side='left')]
        D[:, zero] = zmean
        return D

    # Per-table debias factors g_j over the held-out values (tartan's debias=1).
    Hd = decode(H)
    xd = (H * Hd).sum(axis=0)
    g = np.where(xd > 0, (H * H).sum(axis=0) / np.where(xd > 0, xd, 1), 1.0).astype(np.float32)
    g[zero] = 1.0  # a constant: no table to debias
    del Hd
    variants = ('exact', 'none', 'table', 'vector', 'vector-sqrt')
    scores = {v: np.empty((nq, ndocs), np.float32) for v in variants}
    for d0 in range(0, ndocs, a.chunk):
        d1 = min(d0 + a.chunk, ndocs)
        V, R = rows(d0, d1)
        Cc = V - R
        scores['exact'][:, d0:d1] = maxsim(V, d0, d1)
        D = decode(R)
        scores['none'][:, d0:d1] = maxsim(Cc + D, d0, d1)
        scores['table'][:, d0:d1] = maxsim(Cc + D * g[None, :], d0, d1)
        rr = (R[:, scaled] * R[:, scaled]).sum(axis=1)
        rd = (R[:, scaled] * D[:, scaled]).sum(axis=1)
        s = np.where(rd > 0, rr / np.where(rd > 0, rd, 1), 0).astype(np.float16).astype(np.float32)
        for name, f in (('vector', s), ('vector-sqrt', np.sqrt(s))):
            Dv = D.copy()
            Dv[:, scaled] *= f[:, None]
            scores[name][:, d0:d1] = maxsim(Cc + Dv, d0, d1)
        if d0 // a.chunk % 5 == 0:
            log(f'documents {d1} of {ndocs}')
    ref = np.argsort(-scores['exact'], axis=1)[:, :a.k]
    print(f'\n{a.prefix}: {N} vectors x {dim}, {ndocs} documents, {nq} queries of {qlen}, '
          f'K {K}; {len(out)} dims at 8 bits, {len(rest)} at {a.bits}, {len(zero)} at 0\n')
    print(f'| residual code | R@{a.k} vs exact | MRR@{a.k} |')
    print('|---|---:|---:|')
    for v in variants:
        top = np.argsort(-scores[v], axis=1)[:, :a.k]
        rec = np.mean([len(set(top[i]) & set(ref[i])) / a.k for i in range(nq)])
        mrr = 0.0
        for i in range(nq):
            for r_, d in enumerate(top[i]):
                if ids[d] in rel.get(qids[i], ()):
                    mrr += 1.0 / (r_ + 1)
                    break
        print(f'| {v} | {rec:.3f} | {mrr / nq:.3f} |')
    log(f'done in {time.time() - t0:.0f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())

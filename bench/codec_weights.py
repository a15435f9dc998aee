#!/usr/bin/python3
"""Does a better query-weight estimate w_j move the adaptive codec? (doc/benchmarks.md,
"Codec ceilings, third pass").

Reads a tartan index built with --codec per-dim (centroids.tt and codes.tt in input
dimension order; see bench/codec_bound.py) and its collection, and re-runs the adaptive
allocation in numpy: per-dimension Lloyd-Max tables at every width {0,1,2,4,8} trained on
every 20th document's residuals, greedy water-filling on w_j * D_j(b) with a total of
B * dim bits, for three estimates of w_j:

  doc      mean x_j^2 over the (L2-normalised) document vectors: what tartan uses;
  query    mean q_j^2 over the queries themselves (an oracle: build has no queries);
  uniform  w_j = 1 (plain MSE allocation).

With --debias A1,A2,... (documents' weights only) each dimension's table weights are
instead multiplied by g_j^A, g_j = sum x^2 / sum x * w(x) over its held-out values:
A = 1 is tartan's debiased weights (doc/format.md), A = 0 its --no-debias tables, and
values between are a partial rescaling.

Scores every query against every document by exact MaxSim (sum) over c + r_hat and
prints recall@10 against exact MaxSim over the originals, MRR@10 and the widths.

  /usr/bin/python3 bench/codec_weights.py --index IDX --prefix W/llm3 [--bits 1,2]
      [--debias 0,0.5,1]
"""
import argparse
import heapq

import numpy as np

from codec_bound import load_collection, lloyd_max, maxsim, recall_mrr

WIDTHS = [0, 1, 2, 4, 8]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--index', required=True)
    ap.add_argument('--prefix', required=True)
    ap.add_argument('--bits', default='1,2')
    ap.add_argument('--k', type=int, default=10)
    ap.add_argument('--debias', help='comma-separated strengths A (documents\' weights only)')
    a = ap.parse_args()
    X, lens, Q, qids, ids, rel, C, codes = load_collection(a.index, a.prefix)
    N, dim = X.shape
    nq, qlen, _ = Q.shape
    K = C.shape[0]
    assert codes.shape[0] == N
    Cd = C[codes]
    R = X - Cd
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    docof = np.repeat(np.arange(len(lens)), lens)
    Rh = R[(docof % 20) == 19]
    # Tables and held-out distortion of every width of every dimension.
    tabs = {}
    D = np.zeros((dim, len(WIDTHS)))
    for j in range(dim):
        col = Rh[:, j]
        for wi, b in enumerate(WIDTHS):
            if b == 0:
                cut, w = np.zeros(0, np.float32), np.array([col.mean()], np.float32)
            else:
                cut, w = lloyd_max(col, b)
            tabs[j, b] = (cut, w)
            D[j, wi] = ((w[np.searchsorted(cut, col, side='left')] - col) ** 2).mean()

    def allocate(wt, budget):
        wi = np.zeros(dim, np.int64)
        heap = [(-(wt[j] * (D[j, 0] - D[j, 1])) / 1.0, j) for j in range(dim)]
        heapq.heapify(heap)
        used = 0
        while heap:
            g, j = heapq.heappop(heap)
            step = WIDTHS[wi[j] + 1] - WIDTHS[wi[j]]
            if used + step > budget:
                continue
            used += step
            wi[j] += 1
            if wi[j] + 1 < len(WIDTHS):
                nstep = WIDTHS[wi[j] + 1] - WIDTHS[wi[j]]
                heapq.heappush(heap, (-(wt[j] * (D[j, wi[j]] - D[j, wi[j] + 1])) / nstep, j))
        return wi

    def scores(Xd):
        return maxsim(Q, Xd, starts)

    S0 = scores(X)
    ref = np.argsort(-S0, axis=1)[:, :a.k]

    def evaluate(S):
        return recall_mrr(S, ref, a.k, ids, qids, rel)

    weights = {'doc': (X ** 2).mean(axis=0), 'query': (Q.reshape(-1, dim) ** 2).mean(axis=0),
               'uniform': np.ones(dim)}
    print('N %d dim %d K %d (centroids %.1f MiB float32)' % (N, dim, K, C.nbytes / 2 ** 20))
    print('\n| w_j | bits/dim | widths 8/4/2/1/0 | R@%d vs exact | MRR@%d |' % (a.k, a.k))
    print('|---|---:|---|---:|---:|')
    runs = [(name, wt, 0.0) for name, wt in weights.items()]
    if a.debias:
        runs = [('doc, debias %g' % float(x), weights['doc'], float(x)) for x in a.debias.split(',')]
    for b in [int(x) for x in a.bits.split(',')]:
        for name, wt, strength in runs:
            wi = allocate(wt, b * dim)
            Rd = np.empty_like(R)
            for j in range(dim):
                cut, w = tabs[j, WIDTHS[wi[j]]]
                if strength and len(cut):
                    col = Rh[:, j]
                    xw = (col * w[np.searchsorted(cut, col, side='left')]).sum()
                    if xw > 0:
                        w = w * ((col ** 2).sum() / xw) ** strength
                Rd[:, j] = w[np.searchsorted(cut, R[:, j], side='left')] if len(cut) else w[0]
            rr, mm = evaluate(scores(Cd + Rd))
            cnt = '/'.join(str(int((wi == k).sum())) for k in (4, 3, 2, 1, 0))
            print('| %s | %d | %s | %.3f | %.3f |' % (name, b, cnt, rr, mm))


if __name__ == '__main__':
    main()

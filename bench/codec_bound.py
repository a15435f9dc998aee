#!/usr/bin/python3
"""How far can ANY fixed-rate residual code go on a collection? (doc/benchmarks.md,
"Codec ceilings: the rate-distortion bound on LLM-like residuals").

Reads a tartan index built with --codec per-dim (centroids.tt and codes.tt in input
dimension order) and the collection it was built from, forms every vector's residual
(L2-normalised vector minus its centroid), and scores the queries by exact MaxSim
(sum over query vectors) over decoded vectors c + r_hat for:

  lm-B      per-dimension Lloyd-Max tables of B bits (quantile start, 25 rounds,
            trained on every 20th document's residuals), outlier dimensions at 8 bits;
  ideal-B   Shannon's Gaussian test channel at B bits per dimension on the non-outlier
            dimensions: r_hat = a r + sqrt(a D) e, a = 1 - D/var, D = var * 4^-B, e ~
            N(0, 1); per-dimension MSE D, which no code of B bits per dimension can
            beat on a Gaussian source (rate-distortion bound; a code that gets there
            needs infinitely long blocks). Outlier dimensions exact.

Prints per dimension statistics (kurtosis of the residuals: 3 for a Gaussian), MSE and
recall@10 against exact MaxSim over the original vectors, and MRR@10 on the qrels.

  /usr/bin/python3 bench/codec_bound.py --index IDX --prefix W/llm [--bits 1,2,3]
      [--seed S] [--ideal-only]
"""
import argparse
import os

import numpy as np


def read_tt(path, dtype, cols):
    with open(path, 'rb') as f:
        f.seek(64)
        a = np.fromfile(f, dtype=dtype)
    return a.reshape(-1, cols) if cols > 1 else a


def load_collection(index, prefix):
    """The collection (unit-normalised vectors, lengths, queries, ids, qrels' relevant
    documents by query) and the index's centroids and codes, as both studies read them."""
    X = np.load(prefix + '.vectors.npy').astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    dim = X.shape[1]
    lens = np.load(prefix + '.doclens.npy').astype(np.int64)
    Q = np.load(prefix + '.queries.npy').astype(np.float32)
    qids = open(prefix + '.qids.txt').read().split()
    ids = open(prefix + '.ids.txt').read().split()
    rel = {}
    for line in open(prefix + '.qrels.tsv').read().splitlines()[1:]:
        q, d, s = line.split('\t')
        if int(s) > 0:
            rel.setdefault(q, set()).add(d)
    C = read_tt(os.path.join(index, 'centroids.tt'), np.float32, dim)
    codes = read_tt(os.path.join(index, 'codes.tt'),
                    np.uint16 if C.shape[0] <= 65536 else np.uint32, 1)
    return X, lens, Q, qids, ids, rel, C, codes


def maxsim(Q, Xd, starts):
    """Exact MaxSim (sum over each query's vectors) of queries Q (nq x qlen x dim) against
    the documents whose vectors Xd start at rows `starts`: an nq x documents matrix."""
    nq, qlen, dim = Q.shape
    S = Q.reshape(-1, dim) @ Xd.T  # (nq*qlen, N)
    M = np.maximum.reduceat(S, starts, axis=1)  # per doc max
    return M.reshape(nq, qlen, -1).sum(axis=1)


def recall_mrr(S, ref_top, k, ids, qids, rel):
    """Recall@k of the scores S against the reference top k, and MRR@k on the qrels."""
    nq = S.shape[0]
    top = np.argsort(-S, axis=1)[:, :k]
    rec = np.mean([len(set(top[i]) & set(ref_top[i])) / k for i in range(nq)])
    mrr = 0.0
    for i in range(nq):
        for r, d in enumerate(top[i]):
            if ids[d] in rel.get(qids[i], ()):
                mrr += 1.0 / (r + 1)
                break
    return rec, mrr / nq


def lloyd_max(col, b, rounds=25):
    """Per-dimension Lloyd-Max table for one column (sorted), from the quantile start."""
    nb = 1 << b
    x = np.sort(col)
    cut = np.quantile(x, [(i + 1) / nb for i in range(nb - 1)])
    w = np.quantile(x, [(i + 0.5) / nb for i in range(nb)])
    for _ in range(rounds):
        idx = np.searchsorted(cut, x, side='left')
        s = np.bincount(idx, weights=x, minlength=nb)
        c = np.bincount(idx, minlength=nb)
        w = np.where(c > 0, s / np.maximum(c, 1), w)
        cut = 0.5 * (w[1:] + w[:-1])
    return cut, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--index', required=True)
    ap.add_argument('--prefix', required=True)
    ap.add_argument('--bits', default='1,2,3')
    ap.add_argument('--k', type=int, default=10)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--ideal-only', action='store_true', help='skip the Lloyd-Max rows')
    a = ap.parse_args()
    X, lens, Q, qids, ids, rel, C, codes = load_collection(a.index, a.prefix)
    N, dim = X.shape
    nq, qlen, _ = Q.shape
    K = C.shape[0]
    assert codes.shape[0] == N, (codes.shape, N)
    R = X - C[codes]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    docof = np.repeat(np.arange(len(lens)), lens)
    held = (docof % 20) == 19
    Rh = R[held]
    var = Rh.var(axis=0)
    m2 = (Rh ** 2).mean(axis=0)
    med = np.median(m2)
    out = np.where(m2 > 8 * med)[0]  # 4 dims at ~14x on the LLM-like collection
    rest = np.setdiff1d(np.arange(dim), out)
    z = (Rh[:, rest] - Rh[:, rest].mean(axis=0)) / np.sqrt(var[rest])
    kurt = (z ** 4).mean(axis=0)
    # Covariance spectrum of the non-outlier residuals: flat means no transform gain.
    ev = np.linalg.eigvalsh(np.cov(Rh[:, rest], rowvar=False))
    agm = np.exp(np.mean(np.log(np.maximum(ev, 1e-30)))) / ev.mean()
    print('N %d dim %d K %d held-out %d; outlier dims %s (%.1f%% of residual energy)'
          % (N, dim, K, Rh.shape[0], list(out), 100 * m2[out].sum() / m2.sum()))
    print('non-outlier residuals: kurtosis mean %.3f (min %.3f max %.3f; Gaussian 3); '
          'covariance eigenvalues geometric/arithmetic mean %.3f (1: no transform-coding gain)'
          % (kurt.mean(), kurt.min(), kurt.max(), agm))

    def scores(Xd):
        return maxsim(Q, Xd, starts)

    def evaluate(S, ref_top):
        return recall_mrr(S, ref_top, a.k, ids, qids, rel)

    S0 = scores(X)
    ref = np.argsort(-S0, axis=1)[:, :a.k]
    print('\n| code | bits/dim (non-outlier) | MSE / var (non-outlier) | R@%d vs exact | MRR@%d |'
          % (a.k, a.k))
    print('|---|---:|---:|---:|---:|')
    r, m = evaluate(S0, ref)
    print('| exact | - | 0 | %.3f | %.3f |' % (r, m))
    rng = np.random.default_rng(a.seed)
    Cd = C[codes]
    for b in [int(x) for x in a.bits.split(',')]:
        if not a.ideal_only:
            # Lloyd-Max per dimension (outliers at 8 bits), trained on the held-out rows.
            Rd = np.empty_like(R)
            for j in range(dim):
                cut, w = lloyd_max(Rh[:, j], 8 if j in set(out) else b)
                Rd[:, j] = w[np.searchsorted(cut, R[:, j], side='left')]
            mse = ((Rd[:, rest] - R[:, rest]) ** 2).mean(axis=0) / R[:, rest].var(axis=0)
            rr, mm = evaluate(scores(Cd + Rd), ref)
            print('| Lloyd-Max, outliers 8-bit | %d | %.4f | %.3f | %.3f |'
                  % (b, mse.mean(), rr, mm))
        # Ideal Gaussian test channel on the rest, outliers exact.
        Rd = R.copy()
        mu = R[:, rest].mean(axis=0)
        v = R[:, rest].var(axis=0)
        D = v * 4.0 ** (-b)
        g = 1 - D / v
        Rd[:, rest] = mu + g * (R[:, rest] - mu) + np.sqrt(g * D) * rng.standard_normal(
            (N, len(rest))).astype(np.float32)
        mse = ((Rd[:, rest] - R[:, rest]) ** 2).mean(axis=0) / v
        rr, mm = evaluate(scores(Cd + Rd), ref)
        print('| ideal (Gaussian R-D bound), outliers exact | %d | %.4f | %.3f | %.3f |'
              % (b, mse.mean(), rr, mm))


if __name__ == '__main__':
    main()

#!/usr/bin/python3
"""Would k-means that discounts the massive-activation dimensions help? (doc/benchmarks.md,
"k-means that discounts outlier dimensions: measured, not built").

On LLM-like vectors (tartan-synth --outliers N) a handful of dimensions hold about half
of the vectors' variance, so plain k-means spends its centroids on them. This trains
two centroid sets on the same sample in numpy: plain k-means (L2, as tartan's), and
k-means on vectors whose outlier dimensions (variance > 20x the median) are scaled to
the median variance (centroids scaled back afterwards; assignment in the scaled space).
For each it prints:
  - the mean energy of the residuals on the non-outlier dimensions (what the 1-2-bit
    codes must carry);
  - the recall of a stage-3-like candidate list: documents ranked by MaxSim over
    <q, c> + the exact outlier part of <q, r> (what tartan's residual sketch adds),
    top N for N in 100, 300, 1000, against the exact top 10;
  - recall@10 against exact MaxSim of an exhaustive search over c + r_hat, r_hat the
    residuals coded per dimension by Gaussian Lloyd-Max tables of 1 and 2 bits
    (outlier dimensions kept exact).

  /usr/bin/python3 bench/kmeans_outliers.py --prefix W/llm [--k 4096] [--sample 40000]
      [--iters 4] [--seed 0]
"""
import argparse

import numpy as np

# Gaussian Lloyd-Max quantizers (unit variance): thresholds, levels.
LLOYD_MAX = {1: (np.array([0.0]), np.array([-0.7979, 0.7979])),
             2: (np.array([-0.9816, 0.0, 0.9816]),
                 np.array([-1.510, -0.4528, 0.4528, 1.510]))}


def assign(x, c):
    out = np.empty(len(x), np.int64)
    half = (c * c).sum(1) / 2
    for i in range(0, len(x), 8192):
        out[i:i + 8192] = np.argmax(x[i:i + 8192] @ c.T - half, 1)
    return out


def kmeans(x, k, iters, rng):
    c = x[rng.choice(len(x), k, replace=False)].copy()
    for _ in range(iters):
        a = assign(x, c)
        order = np.argsort(a, kind="stable")
        n = np.bincount(a, minlength=k)
        s = np.add.reduceat(x[order], np.r_[0, np.cumsum(n)[:-1]])
        c[n > 0] = s[n > 0] / n[n > 0, None]
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--sample", type=int, default=40000)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    v = np.load(a.prefix + ".vectors.npy").astype(np.float32)
    dl = np.load(a.prefix + ".doclens.npy").astype(np.int64)
    q = np.load(a.prefix + ".queries.npy").astype(np.float32)
    dim = v.shape[1]
    q = q.reshape(-1, dim)
    qlen = 4 if len(q) % 4 == 0 else 1
    q = q.reshape(len(q) // qlen, qlen, dim)
    doc = np.repeat(np.arange(len(dl)), dl)
    var = v.var(0)
    med = np.median(var)
    out = np.where(var > 20 * med)[0]
    non = np.setdiff1d(np.arange(dim), out)
    print(f"{len(v)} vectors x {dim}, {len(dl)} documents, {len(q)} queries of {qlen}; "
          f"{len(out)} outlier dimensions holding {var[out].sum() / var.sum():.3f} of the "
          f"variance; k {a.k}, sample {a.sample}, {a.iters} iterations")

    def maxsim(s):
        m = np.full((qlen, len(dl)), -np.inf, np.float32)
        for i in range(qlen):
            np.maximum.at(m[i], doc, s[i].astype(np.float32))
        return m.sum(0)

    exact = [set(np.argsort(-maxsim(q[j] @ v.T))[:10]) for j in range(len(q))]
    sample = v[rng.choice(len(v), a.sample, replace=False)]
    scale = np.where(var > 20 * med, np.sqrt(med / var), 1).astype(np.float32)
    for name, w in (("plain", np.ones(dim, np.float32)), ("outliers scaled", scale)):
        c = kmeans(sample * w, a.k, a.iters, rng) / w
        codes = assign(v * w, c * w)
        cv = c[codes]
        r = v - cv
        print(f"{name}: non-outlier residual energy {(r[:, non] ** 2).sum(1).mean():.5f}, "
              f"outlier {(r[:, out] ** 2).sum(1).mean():.5f}")
        for n in (100, 300, 1000):
            hit = 0
            for j in range(len(q)):
                s = q[j] @ cv.T + q[j][:, out] @ r[:, out].T
                hit += len(set(np.argsort(-maxsim(s))[:n]) & exact[j]) / 10
            print(f"{name}: candidates by centroid + outlier part, top {n}: "
                  f"recall of the exact top 10 {hit / len(q):.4f}")
        mu, sd = r.mean(0), r.std(0) + 1e-12
        for bits, (th, lv) in LLOYD_MAX.items():
            rq = (lv[np.searchsorted(th, (r - mu) / sd)] * sd + mu).astype(np.float32)
            rq[:, out] = r[:, out]
            vq = cv + rq
            hit = 0
            for j in range(len(q)):
                hit += len(set(np.argsort(-maxsim(q[j] @ vq.T))[:10]) & exact[j]) / 10
            print(f"{name}: {bits}-bit Lloyd-Max codes, exhaustive recall@10 vs exact "
                  f"{hit / len(q):.4f}")


if __name__ == "__main__":
    main()

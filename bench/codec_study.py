#!/usr/bin/python3
"""Residual codec study (issue 18): per-dimension quantile tables, Lloyd-Max,
adaptive bit allocation and RaBitQ-style codes, measured in numpy.

Centroids are trained the way `tartan build` trains them (doc/benchmarks.md,
"Residual codecs: bit allocation, Lloyd-Max and RaBitQ"): L2-normalised vectors, the
ColBERTv2 document sample, every 20th sampled document held out for the codec,
K = 2^floor(log2(16*sqrt(N))) (halved while it exceeds the training vectors), 4 Lloyd
iterations of spherical k-means, inner-product assignment. Every codec then encodes
every residual r = v - c(v), and each query is scored against every document by
exact MaxSim over the decoded vectors (sum over query vectors of the max over the
document's vectors): no candidate generation, so the numbers measure the codec only.

Reported per codec: recall@10 against exact MaxSim on the original vectors (share of
the exact top 10 found), MRR@10 on the qrels, bytes per vector (centroid id +
residual code + per-vector scalars), and the relative dot-product error on the
held-out residuals, mean((<q, r^> - <q, r>)^2) / mean(<q, r>^2) over every
(query vector, held-out residual) pair (queries are used here for measurement only;
no codec sees them unless its name says so).

Input: a tartan-synth prefix (--prefix P: P.vectors.npy, P.doclens.npy,
P.queries.npy [Q, Kq, dim], P.ids.txt, P.qids.txt, P.qrels.tsv) or a directory in
the layout of ../shared/data/emb/colbertv2_nanofiqa (--collection DIR). Exits 77
(skip) when the data is absent. Deterministic for a given --seed.

Second study (doc/benchmarks.md): outlier dimensions (second moment > 20x the
median) apart, the others rotated by one random orthogonal matrix; per-vector float16
scales on the non-outlier dimensions (proj / unbiased / norm); RaBitQ and extended
RaBitQ on the rotated rest; the share of the dot-product error in the outlier
dimensions; an adaptive sweep over average bits (--sections sweep). Exact commands of
the published numbers (W = a scratch directory; tartan-synth is built with tartan):

    tartan-synth --out W/llm3 --docs 5000 --doclen 16 --dim 1024 --queries 200 --qlen 4 \
        --outliers 4 --qnoise 0.8 --seed 3
    tartan-synth --out W/llm3n03 --docs 5000 --doclen 16 --dim 1024 --queries 200 --qlen 4 \
        --outliers 4 --qnoise 0.8 --seed 3 --noise 0.3
    /usr/bin/python3 bench/codec_study.py --prefix W/llm3 --name "LLM-like (seed 3)" --nbits 1,2
    /usr/bin/python3 bench/codec_study.py --prefix W/llm3n03 --name "LLM-like, --noise 0.3 (seed 3)" --nbits 1,2
    /usr/bin/python3 bench/codec_study.py --prefix W/llm3 --sections sweep --sweep 2.5,3,4

Each takes 1.5-10 minutes on 2 vCPUs and ~3 GB of memory; all 200 queries are scored.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

SKIP = 77
WIDTHS = (0, 1, 2, 4, 8)  # adaptive allocation: allowed bits per dimension


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data

def read_lines(path):
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def read_qrels(path):
    """BEIR TSV (query-id, corpus-id, score with a header) or TREC (qid 0 docid rel)."""
    rel = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if not p or p[0] == "query-id":
                continue
            qid, did, score = (p[0], p[1], p[2]) if len(p) == 3 else (p[0], p[2], p[3])
            if float(score) > 0:
                rel.setdefault(qid, set()).add(did)
    return rel


def load(args):
    if args.prefix:
        p = args.prefix
        files = dict(vectors=p + ".vectors.npy", doclens=p + ".doclens.npy",
                     queries=p + ".queries.npy", ids=p + ".ids.txt", qids=p + ".qids.txt",
                     qrels=p + ".qrels.tsv")
    else:
        d = args.collection
        files = dict(vectors=os.path.join(d, "doc_token_embeddings.npy"),
                     doclens=os.path.join(d, "doclens.npy"),
                     queries=os.path.join(d, "query_token_embeddings.npy"),
                     ids=os.path.join(d, "doc_ids.txt"), qids=os.path.join(d, "query_ids.txt"),
                     qrels=os.path.join(d, "qrels.tsv"))
    missing = [f for f in files.values() if not os.path.exists(f)]
    if missing:
        print(f"codec_study: skipped, missing {', '.join(missing)}", file=sys.stderr)
        sys.exit(SKIP)
    V = np.load(files["vectors"]).astype(np.float32, copy=False)
    V = np.ascontiguousarray(V, dtype=np.float32)
    norms = np.linalg.norm(V, axis=1, keepdims=True)
    np.divide(V, np.maximum(norms, 1e-30), out=V)  # tartan build L2-normalises by default
    doclens = np.load(files["doclens"]).astype(np.int64)
    Q = np.load(files["queries"]).astype(np.float32)  # [Q, Kq, dim]; tartan scores them as given
    ids, qids = read_lines(files["ids"]), read_lines(files["qids"])
    assert doclens.sum() == len(V) and len(ids) == len(doclens) and len(qids) == len(Q)
    return dict(V=V, doclens=doclens, Q=Q, ids=ids, qids=qids, qrels=read_qrels(files["qrels"]))


# ----------------------------------------------------------------- training (tartan)

def default_centroids(n):
    """ColBERTv2: 2^floor(log2(16*sqrt(n))) (src/index/train.c)."""
    return 1 << int(min(max(np.floor(np.log2(16.0 * np.sqrt(n))), 0), 24))


def sample_docs(doclens, K, dim, rng, memory=2 << 30, sample_factor=16.0,
                min_per_centroid=32, max_per_centroid=256):
    """tartan's training sample (src/index/train.c): 1 + f*sqrt(120*D) documents, grown
    to >= 32*1.05 vectors per centroid, capped at 256 per centroid and at half of
    --memory (2G); every 20th sampled document is held out for the codec."""
    D, N = len(doclens), int(doclens.sum())
    avg = N / D
    want = max((1.0 + sample_factor * np.sqrt(120.0 * D)) * avg, min_per_centroid * K * 1.05)
    want = min(want, max_per_centroid * K, memory * 0.5 / (dim * 4.0 + 64.0))
    ndocs = int(min(max(np.ceil(want / avg), 1), D))
    docs = np.sort(rng.choice(D, ndocs, replace=False))
    held = (np.arange(ndocs) % 20 == 19) if ndocs >= 20 else np.zeros(ndocs, bool)
    return docs[~held], docs[held]


def second_moment(V, rows, chunk=8192):
    """mean x_j^2 over V[rows], accumulated in float64 by blocks."""
    acc = np.zeros(V.shape[1])
    for i in range(0, len(rows), chunk):
        x = V[rows[i:i + chunk]].astype(np.float64)
        acc += np.einsum("ij,ij->j", x, x)
    return acc / len(rows)


def doc_rows(doc_ids, offsets, doclens):
    return np.concatenate([np.arange(offsets[d], offsets[d] + doclens[d]) for d in doc_ids])


def assign(X, C, chunk=8192):
    """Nearest centroid by inner product (centroids are unit: = L2-nearest)."""
    out = np.empty(len(X), np.int64)
    for i in range(0, len(X), chunk):
        out[i:i + chunk] = np.argmax(X[i:i + chunk] @ C.T, axis=1)
    return out


def kmeans(X, K, iters, rng):
    """Spherical Lloyd: random initial centroids drawn from X, `iters` rounds of
    assign + mean + renormalise; an empty cluster keeps its centroid. (tartan trains
    hierarchically from K >= 4096 and re-seeds empty clusters by splitting; the study
    uses flat Lloyd, which reaches a similar objective.)"""
    C = X[rng.choice(len(X), K, replace=False)].copy()
    for _ in range(iters):
        a = assign(X, C)
        S = np.zeros_like(C, dtype=np.float64)
        _sum_by(S, a, X)
        cnt = np.bincount(a, minlength=K)
        nz = cnt > 0
        C[nz] = (S[nz] / np.linalg.norm(S[nz], axis=1, keepdims=True)).astype(np.float32)
    return C


def _sum_by(S, a, X):
    order = np.argsort(a, kind="stable")
    bounds = np.searchsorted(a[order], np.arange(len(S) + 1))
    Xs = X[order]
    nz = np.nonzero(bounds[1:] > bounds[:-1])[0]
    S[nz] = np.add.reduceat(Xs, bounds[nz], axis=0)


# ------------------------------------------------------------ per-dimension tables

class Column:
    """One dimension's held-out values, sorted, with prefix sums: bucket means and
    distortions of any table cost O(buckets log n)."""

    def __init__(self, x):
        self.x = np.sort(x.astype(np.float64))
        self.s1 = np.concatenate([[0.0], np.cumsum(self.x)])
        self.s2 = np.concatenate([[0.0], np.cumsum(self.x * self.x)])

    def buckets(self, cut):
        # bucket(x) = number of cutoffs strictly below x, so bucket i holds cut[i-1] < x <= cut[i]
        b = np.searchsorted(self.x, cut, side="right")
        return np.concatenate([[0], b, [len(self.x)]])

    def stats(self, cut):
        b = self.buckets(cut)
        return np.diff(b), self.s1[b[1:]] - self.s1[b[:-1]], self.s2[b[1:]] - self.s2[b[:-1]]

    def distortion(self, cut, w):
        cnt, s1, s2 = self.stats(cut)
        return float(np.sum(s2 - 2 * w * s1 + cnt * w * w) / len(self.x))


def quantile_table(x, nbits):
    """tartan today (ColBERTv2 levels): cutoffs at quantiles i/2^b, weights at (i+0.5)/2^b."""
    nb = 1 << nbits
    cut = np.quantile(x, np.arange(1, nb) / nb)
    w = np.quantile(x, (np.arange(nb) + 0.5) / nb)
    return cut, w


def lloyd_max(col, cut, w, rounds):
    """Lloyd-Max from a starting table: weights <- mean of the held-out values in each
    bucket (an empty bucket keeps its weight), then cutoffs <- midpoints of adjacent
    weights; `rounds` times. Weights are kept ascending (np.sort) so cutoffs stay so."""
    w = w.astype(np.float64).copy()
    for _ in range(rounds):
        cnt, s1, _ = col.stats(cut)
        nz = cnt > 0
        w[nz] = s1[nz] / cnt[nz]
        w = np.sort(w)
        cut = 0.5 * (w[:-1] + w[1:])
    return cut, w


def train_tables(H, nbits, lm_rounds):
    """Per-dimension tables at one width for every dimension of H (n, dim)."""
    cuts, ws = [], []
    for j in range(H.shape[1]):
        cut, w = quantile_table(H[:, j], nbits)
        if lm_rounds:
            cut, w = lloyd_max(Column(H[:, j]), cut, w, lm_rounds)
        cuts.append(cut)
        ws.append(w)
    return cuts, ws


def encode_decode_dims(RT, widths, tables, means):
    """Decoded residuals, transposed (dim, N): dimension j at width widths[j] uses
    tables[width][j]; 0-bit dimensions decode to the held-out mean."""
    out = np.empty_like(RT)
    for j in range(RT.shape[0]):
        b = int(widths[j])
        if b == 0:
            out[j] = means[j]
        elif b == 16:
            out[j] = RT[j].astype(np.float16).astype(np.float32)
        else:
            cut, w = tables[b][0][j], tables[b][1][j]
            out[j] = w[np.searchsorted(cut, RT[j], side="left")]  # cutoffs strictly below
    return out


# ---------------------------------------------------------------- bit allocation

def allocate(D, weight, total_bits, widths=WIDTHS):
    """Greedy water-filling. D[j, l] is dimension j's distortion at widths[l]; all
    dimensions start at width 0; each step raises one dimension to its next width,
    the step with the largest weight[j] * (D[j, l] - D[j, l+1]) / (added bits) among
    steps that fit in the remaining budget (ties: lowest j). Stops when the budget is
    spent; with widths (0,1,2,4,8) and dim a multiple of 4 the total is always exact
    (a 1-bit step exists while any dimension is below 2 bits; after that every width
    is even, and once every width is >= 4 every width and the budget are multiples of
    4). Returns the width of every dimension."""
    dim = D.shape[0]
    widths = np.asarray(widths)
    level = np.zeros(dim, np.int64)
    top = len(widths) - 1
    remaining = total_bits
    idx = np.arange(dim)
    while remaining > 0:
        can = level < top
        nxt = np.minimum(level + 1, top)
        cost = np.where(can, widths[nxt] - widths[level], 1 << 30)
        gain = weight * (D[idx, level] - D[idx, nxt]) / np.maximum(cost, 1)
        gain = np.where(can & (cost <= remaining), gain, -np.inf)
        j = int(np.argmax(gain))
        if gain[j] == -np.inf:
            raise RuntimeError(f"allocation cannot spend the last {remaining} bits exactly")
        remaining -= int(cost[j])
        level[j] += 1
    return widths[level]


def width_histogram(widths):
    vals, cnt = np.unique(widths, return_counts=True)
    return " ".join(f"{int(c)}x{int(v)}" for v, c in zip(vals[::-1], cnt[::-1]))


# ------------------------------------------------------------------------ RaBitQ

def random_rotation(dim, rng):
    """Haar-random orthogonal matrix: QR of a Gaussian matrix, signs fixed by diag(R)."""
    A = rng.standard_normal((dim, dim))
    Qm, Rm = np.linalg.qr(A)
    return (Qm * np.sign(np.diag(Rm))).astype(np.float32)


def rabitq_codes(RT, P, B, projection=False, nscales=48, chunk=4096):
    """(Extended) RaBitQ code of every residual (Gao & Long, SIGMOD 2024; Gao et al.,
    SIGMOD 2025). o = P^T r/|r| (for rows: r @ P / |r|). The code is a point y of the
    grid {-(2^B-1)/2, ..., (2^B-1)/2} (steps of 1; B = 1: y = sign(o)/2); for B > 1
    the grid point nearest to t*o for the scale t (searched over `nscales` values)
    that maximises <y, o>/|y|. The unbiased estimator is <o, q> ~ <y, P^T q>/<y, o>,
    so <q, r> ~ s * <y, P^T q> with ONE stored scalar s = |r| / <y, o>.
    projection=True stores s = |r| <y, o> / |y|^2 instead: the orthogonal projection of r
    on the code direction, a least-squares (shrunk, biased) reconstruction, for comparison.
    RT: residuals transposed (dim, N); P None: no rotation (RT already rotated).
    Returns YT (dim, N) float32 grid values, s (N,)."""
    dim, N = RT.shape
    YT = np.empty((dim, N), np.float32)
    s = np.empty(N, np.float32)
    top = (2 ** B - 1) / 2.0
    for i in range(0, N, chunk):
        r = RT[:, i:i + chunk].T
        nr = np.linalg.norm(r, axis=1)
        o = (r if P is None else r @ P) / np.maximum(nr, 1e-30)[:, None]
        if B == 1:
            y = np.where(o >= 0, 0.5, -0.5).astype(np.float32)
        else:
            amax = np.maximum(np.max(np.abs(o), axis=1, keepdims=True), 1e-30)
            y, bestcos = None, np.full(len(o), -np.inf)
            # t*max|o_i| from 0.5 (all in the two inner levels) to 2^B + 1 (heavy clipping)
            for u in np.geomspace(0.5, 2 ** B + 1, nscales):
                cand = np.clip(np.floor(o * (u / amax)) + 0.5, -top, top).astype(np.float32)
                cos = np.einsum("ij,ij->i", cand, o) / np.linalg.norm(cand, axis=1)
                better = cos > bestcos
                if y is None:
                    y = cand
                else:
                    y[better] = cand[better]
                bestcos = np.maximum(bestcos, cos)
        ip = np.einsum("ij,ij->i", y, o)
        if projection:  # r^ = |r| <y,o>/|y|^2 y: the least-squares reconstruction (biased)
            s[i:i + chunk] = nr * ip / np.einsum("ij,ij->i", y, y)
        else:  # the paper's unbiased estimator
            s[i:i + chunk] = np.where(nr > 0, nr / np.where(ip > 0, ip, 1.0), 0.0)
        YT[:, i:i + chunk] = y.T
    return YT, s


# ------------------------------------------------------------------------- scoring

class Scorer:
    """Exact MaxSim of every query against every document, for any representation
    <q, v> = <q, c(v)> + scale(v) * <T q, y(v)> (T = identity, scale = 1 for decoded
    residuals; T = P^T and scale = s for RaBitQ)."""

    def __init__(self, data, C, a, max_block=60_000_000):
        self.Q = data["Q"]
        self.nq, self.kq, self.dim = self.Q.shape
        self.QV = np.ascontiguousarray(self.Q.reshape(-1, self.dim))
        self.QC = self.QV @ C.T  # (nq*kq, K)
        self.a = a
        self.doclens = data["doclens"]
        self.starts = np.concatenate([[0], np.cumsum(self.doclens)[:-1]])
        N = len(a)
        self.qchunk = max(1, int(max_block // (N * self.kq)))

    def doc_scores(self, YT=None, scale=None, T=None):
        """YT: (dim, N) representation; returns (nq, ndocs) MaxSim scores."""
        out = np.empty((self.nq, len(self.doclens)), np.float32)
        for q0 in range(0, self.nq, self.qchunk):
            q1 = min(self.nq, q0 + self.qchunk)
            rows = slice(q0 * self.kq, q1 * self.kq)
            S = self.QC[rows][:, self.a]
            if YT is not None:
                qv = self.QV[rows] if T is None else self.QV[rows] @ T
                part = qv @ YT
                if scale is not None:
                    part *= scale[None, :]
                S += part
            m = np.maximum.reduceat(S, self.starts, axis=1)
            out[q0:q1] = m.reshape(q1 - q0, self.kq, -1).sum(axis=1)
        return out


def top10(scores):
    # ties broken by document row (stable sort on -score)
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def metrics(scores, exact_top, data):
    top = top10(scores)
    recall = np.mean([len(set(t) & set(e)) / 10.0 for t, e in zip(top, exact_top)])
    ids, rr = data["ids"], []
    for qi, qid in enumerate(data["qids"]):
        rel = data["qrels"].get(qid)
        if not rel:
            continue
        r = 0.0
        for rank, d in enumerate(top[qi]):
            if ids[d] in rel:
                r = 1.0 / (rank + 1)
                break
        rr.append(r)
    return float(recall), float(np.mean(rr)) if rr else float("nan")


def margins(scores, exact, data):
    """Where MRR is won or lost: the mean change (codec - exact) of the score of each
    query's relevant document (the best one by exact MaxSim) and of the best
    non-relevant document's score."""
    row = {d: i for i, d in enumerate(data["ids"])}
    d_rel, d_other = [], []
    for qi, qid in enumerate(data["qids"]):
        rel = [row[d] for d in data["qrels"].get(qid, ()) if d in row]
        if not rel:
            continue
        best = rel[int(np.argmax(exact[qi, rel]))]
        mask = np.ones(exact.shape[1], bool)
        mask[rel] = False
        d_rel.append(scores[qi, best] - exact[qi, best])
        d_other.append(scores[qi, mask].max() - exact[qi, mask].max())
    return float(np.mean(d_rel)), float(np.mean(d_other))


def dot_error(QV, Hres, HdecT, out_idx):
    """Relative dot-product error on held-out residuals, mean((<q, r^> - <q, r>)^2) /
    mean(<q, r>^2), and the outlier dimensions' share of it: the error
    e = <q, r^ - r> splits into e_O (sum over the outlier dimensions out_idx) + e_R (the
    rest); share = mean(e_O^2) / (mean(e_O^2) + mean(e_R^2)) (the cross term is small).
    HdecT: decoded held-out residuals in the original coordinates, (dim, nheld)."""
    true = QV @ Hres.T
    D = HdecT - Hres.T
    e_o = QV[:, out_idx] @ D[out_idx] if len(out_idx) else np.zeros_like(true)
    e = QV @ D
    e_r = e - e_o
    mo, mr = float(np.mean(e_o ** 2)), float(np.mean(e_r ** 2))
    return float(np.mean(e ** 2) / np.mean(true ** 2)), (mo / (mo + mr) if mo + mr > 0 else 0.0)


# ---------------------------------------------------------------------------- study

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--prefix", help="tartan-synth output prefix")
    src.add_argument("--collection", help="directory in the colbertv2_nanofiqa layout")
    ap.add_argument("--name", help="collection label for the tables")
    ap.add_argument("--seed", type=int, default=42, help="sampling, k-means and rotation seed (42, as tartan)")
    ap.add_argument("--nbits", default="1,2,4", help="average bits per dimension to study")
    ap.add_argument("--iters", type=int, default=4, help="k-means iterations (4, as tartan)")
    ap.add_argument("--lm-rounds", type=int, default=25, help="Lloyd-Max rounds")
    ap.add_argument("--centroids", type=int, default=0, help="override K (default: tartan's rule)")
    ap.add_argument("--grid", action="store_true",
                    help="all adaptive variants (distortion estimate x weight), for choosing the design")
    ap.add_argument("--no-rabitq-ext", action="store_true", help="skip extended RaBitQ at 2 and 4 bits")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--sections", default="base,block",
                    help="base: the codecs of the first study (quantile, Lloyd-Max, adaptive, "
                         "outliers f16, RaBitQ); block: outlier dims apart + rotation of the "
                         "rest, per-vector scales (the second study); sweep: adaptive +LM "
                         "(and + unbiased scale) at the average bits of --sweep; scale: the "
                         "adaptive codec with no, the unbiased, a halfway (sqrt) and one "
                         "global scale")
    ap.add_argument("--sweep", default="2.5,3,4",
                    help="average bits per dimension for the sweep section")
    args = ap.parse_args()
    t_start = time.time()
    rng = np.random.default_rng(args.seed)
    data = load(args)
    V, doclens = data["V"], data["doclens"]
    N, dim = V.shape
    name = args.name or (args.prefix or args.collection)
    offsets = np.concatenate([[0], np.cumsum(doclens)[:-1]])

    # -- centroids and held-out residuals, as tartan build
    K = args.centroids or default_centroids(N)
    train_docs, held_docs = sample_docs(doclens, K, dim, rng)
    tr = doc_rows(train_docs, offsets, doclens)
    hr = doc_rows(held_docs, offsets, doclens) if len(held_docs) else tr
    if not args.centroids:
        while K > len(tr):
            K >>= 1
    log(f"{name}: N={N} dim={dim} K={K} train={len(tr)} held-out={len(hr)} "
        f"({len(held_docs)} docs)")
    C = kmeans(V[tr], K, args.iters, rng)
    a = assign(V, C)
    # Query-weight stand-ins for the allocation: w_j = mean x_j^2 over the (normalised)
    # training-sample vectors (known at build time); 1 (plain MSE); the queries' second
    # moments (an oracle: queries are not known at build time).
    QV = data["Q"].reshape(-1, dim)
    weights = {"doc": second_moment(V, tr),
               "mse": np.ones(dim),
               "query": np.mean(QV.astype(np.float64) ** 2, axis=0)}
    # Outlier ("massive activation") dimensions: second moment > 20x the median.
    out_idx = np.nonzero(weights["doc"] > 20 * np.median(weights["doc"]))[0]
    rest_idx = np.setdiff1d(np.arange(dim), out_idx)
    # Full second-moment matrix of the training vectors, for the weights of rotated
    # coordinates (w_z = diag(T^T M T)); diag(M) = weights["doc"].
    M = np.zeros((dim, dim))
    for i in range(0, len(tr), 8192):
        x = V[tr[i:i + 8192]]
        M += (x.T @ x).astype(np.float64)
    M /= len(tr)
    log(f"outlier dimensions {out_idx.tolist()}: {weights['doc'][out_idx].sum():.2f} of the "
        f"vectors' energy, {weights['query'][out_idx].sum() / weights['query'].sum():.2f} of the queries'")
    R = V
    R -= C[a]  # residuals in place of the vectors
    del data["V"], V
    RT = np.ascontiguousarray(R.T)  # (dim, N): every codec works on columns
    H = R[hr].copy()  # held-out residuals (their documents were not used for k-means)
    del R
    scorer = Scorer(data, C, a)
    exact = scorer.doc_scores(YT=RT)  # <q, c> + <q, r> = <q, v>
    exact_top = top10(exact)
    id_bytes = 2 if K <= 65536 else 4
    means = H.mean(axis=0)
    var = H.var(axis=0)
    log(f"k-means + exact scoring done ({time.time() - t_start:.0f} s)")

    rows = []

    def report(codec, nbits, nbytes, scores, HdecT, note=""):
        """HdecT: the codec's decoded held-out residuals (dim, nheld), or a number (the
        relative dot error itself, for the reference rows)."""
        rec, mrr = metrics(scores, exact_top, data)
        d_rel, d_other = margins(scores, exact, data)
        if isinstance(HdecT, float):
            err, share = HdecT, float("nan")
        else:
            err, share = dot_error(QV, H, HdecT, out_idx)
        rows.append(dict(collection=name, codec=codec, nbits=nbits, bytes=float(nbytes),
                         recall10=rec, mrr10=mrr, d_rel=d_rel, d_other=d_other, dot_err=err,
                         err_outlier_share=share, note=note))
        log(f"  {codec:52s} {nbits}  {nbytes:7.1f} B  R@10 {rec:.3f}  MRR {mrr:.3f}  "
            f"drel {d_rel:+.4f} doth {d_other:+.4f}  err {err:.4f} (outl {share:.2f})  {note}")

    report("exact (float32)", "-", 4 * dim, exact, 0.0)
    report("centroid only", "0", id_bytes, scorer.doc_scores(), 1.0)

    nbits_list = [int(b) for b in args.nbits.split(",")]
    # Tables for every width the codecs need: quantile (q) and Lloyd-Max (lm).
    tables_q, tables_lm, Dlm = {}, {}, {}
    for b in sorted(set(nbits_list) | {1, 2, 4, 8}):
        t0 = time.time()
        tables_lm[b] = train_tables(H, b, args.lm_rounds)
        if b in nbits_list:
            tables_q[b] = train_tables(H, b, 0)
        cols = [Column(H[:, j]) for j in range(dim)]
        Dlm[b] = np.array([cols[j].distortion(tables_lm[b][0][j], tables_lm[b][1][j]) for j in range(dim)])
        log(f"tables at {b} bits: {time.time() - t0:.1f} s")

    # Held-out distortion measured out of sample: tables trained on one half of the
    # held-out residuals, distortion measured on the other half (and vice versa).
    def split_distortion():
        half = np.arange(len(H)) % 2 == 0
        Dsp = {}
        for b in (1, 2, 4, 8):
            d = np.zeros(dim)
            for A_, B_ in ((half, ~half), (~half, half)):
                cuts, ws = train_tables(H[A_], b, args.lm_rounds)
                d += np.array([Column(H[B_, j]).distortion(cuts[j], ws[j]) for j in range(dim)])
            Dsp[b] = d / 2
        return Dsp

    dist_est = {"trained": np.stack([var] + [Dlm[b] for b in (1, 2, 4, 8)], axis=1),
                "model": var[:, None] * 4.0 ** -np.array(WIDTHS, float)[None, :]}
    if args.grid:
        Dsp = split_distortion()
        dist_est["split"] = np.stack([var] + [Dsp[b] for b in (1, 2, 4, 8)], axis=1)

    def eval_dims(codec, nbits, widths, tables, nbytes, note=""):
        dec = encode_decode_dims(RT, widths, tables, means)
        scores = scorer.doc_scores(YT=dec)
        Hdec = encode_decode_dims(np.ascontiguousarray(H.T), widths, tables, means)
        report(codec, nbits, nbytes, scores, Hdec, note)

    # ---- the second study: outlier dimensions apart, the rest rotated, per-vector scales.
    # z = T^T r with T = identity on the outlier dimensions and a Haar-random rotation P_R
    # of the other dimensions (positions kept: z_O = r_O, z_R = P_R^T r_R); any code of z
    # is scored as <q, r^> = <T^T q, z^> (the query is rotated once, then per-query lookup
    # tables as today).
    sections = set(args.sections.split(","))
    if "block" in sections:
        T = np.zeros((dim, dim), np.float32)
        T[out_idx, out_idx] = 1.0
        T[np.ix_(rest_idx, rest_idx)] = random_rotation(len(rest_idx),
                                                        np.random.default_rng([args.seed, 11]))
        ZT = T.T @ RT
        HzT = np.ascontiguousarray(T.T @ H.T)
        wz = np.einsum("ij,ij->j", T, (M @ T).astype(np.float32))  # diag(T^T M T)
        tables_z = {b: train_tables(HzT.T, b, args.lm_rounds) for b in (1, 2, 4, 8)}
        means_z, var_z = HzT.mean(axis=1), HzT.var(axis=1)
        Dz = np.stack([var_z] + [np.array([Column(HzT[j]).distortion(tables_z[b][0][j], tables_z[b][1][j])
                                           for j in range(dim)]) for b in (1, 2, 4, 8)], axis=1)
        log(f"block transform and z tables done ({time.time() - t_start:.0f} s)")
    else:
        T = ZT = HzT = None

    def vector_scale(XT, DT, rows, mode):
        """One float16 scalar per vector, multiplying the decoded rows `rows` of DT (the
        code is unchanged): proj s = <x, d>/|d|^2 (least squares, keeps the shrinkage),
        unbiased s = |x|^2/<x, d> (so that <r^, r> = |r|^2, RaBitQ's estimator), norm
        s = |x|/|d| (the decoded block keeps the true norm). In place."""
        for c0 in range(0, XT.shape[1], 8192):
            cols = slice(c0, c0 + 8192)
            x, d = XT[rows, cols], DT[rows, cols]
            xd = np.einsum("ij,ij->j", x, d)
            dd = np.einsum("ij,ij->j", d, d)
            xx = np.einsum("ij,ij->j", x, x)
            with np.errstate(divide="ignore", invalid="ignore"):
                if mode == "proj":
                    sc = np.where(dd > 0, xd / dd, 0.0)
                elif mode == "unbiased":
                    sc = np.where(xd > 0, xx / xd, 0.0)
                elif mode == "sqrt":  # halfway (geometrically) to unbiased
                    sc = np.where(xd > 0, np.sqrt(xx / np.where(xd > 0, xd, 1)), 0.0)
                else:
                    sc = np.where(dd > 0, np.sqrt(xx / dd), 0.0)
            DT[rows, cols] = d * sc.astype(np.float16).astype(np.float32)[None, :]

    def global_scale(XT, DT, rows):
        """One scale for every vector: sum |x|^2 / sum <x, d> over the rows of all of
        them (the unbiased scale of the whole collection: no per-vector noise)."""
        x, d = XT[rows], DT[rows]
        return float(np.einsum("ij,ij->", x, x, dtype=np.float64) /
                     np.einsum("ij,ij->", x, d, dtype=np.float64))

    def eval_z(codec, nbits, ZdecT, HzdecT, nbytes, note=""):
        report(codec, nbits, nbytes, scorer.doc_scores(YT=ZdecT, T=T), T @ HzdecT, note)

    def block_study(nb):
        log(f"--- {nb} bit(s): outlier dims {len(out_idx)} apart, rest rotated")
        nr, no = len(rest_idx), len(out_idx)
        base_bytes = id_bytes + nb * dim / 8
        HT = np.ascontiguousarray(H.T)
        # (a) adaptive in the original coordinates + a per-vector scale on the non-outlier dims
        widths = allocate(dist_est["trained"], weights["doc"], nb * dim)
        for mode in ("proj", "unbiased", "norm"):
            dec = encode_decode_dims(RT, widths, tables_lm, means)
            Hdec = encode_decode_dims(HT, widths, tables_lm, means)
            vector_scale(RT, dec, rest_idx, mode)
            vector_scale(HT, Hdec, rest_idx, mode)
            report(f"adaptive + per-vector scale ({mode})", nb, base_bytes + 2,
                   scorer.doc_scores(YT=dec), Hdec, width_histogram(widths) + ", 1 f16/vector")
            del dec
        # (b) adaptive allocation over the block-rotated coordinates (same bytes as today)
        wz_alloc = allocate(Dz, wz, nb * dim)
        for mode in (None, "unbiased"):
            dec = encode_decode_dims(ZT, wz_alloc, tables_z, means_z)
            Hdec = encode_decode_dims(HzT, wz_alloc, tables_z, means_z)
            if mode:
                vector_scale(ZT, dec, rest_idx, mode)
                vector_scale(HzT, Hdec, rest_idx, mode)
            eval_z("rotated rest, adaptive +LM" + (f" + scale ({mode})" if mode else ""), nb,
                   dec, Hdec, base_bytes + (2 if mode else 0),
                   width_histogram(wz_alloc) + (", 1 f16/vector" if mode else ""))
            del dec
        # (c) outliers at 8 bits (Lloyd-Max) or float16, rest rotated at nb bits (Lloyd-Max)
        for ow in (8, 16):
            w_ = np.where(np.isin(np.arange(dim), out_idx), ow, nb)
            nbytes = id_bytes + np.ceil(nr * nb / 8) + (no if ow == 8 else 2 * no)
            for mode in (None, "unbiased"):
                dec = encode_decode_dims(ZT, w_, tables_z, means_z)
                Hdec = encode_decode_dims(HzT, w_, tables_z, means_z)
                if mode:
                    vector_scale(ZT, dec, rest_idx, mode)
                    vector_scale(HzT, Hdec, rest_idx, mode)
                eval_z(f"outliers {'8-bit LM' if ow == 8 else 'f16'} + rotated rest {nb}-bit LM"
                       + (f" + scale ({mode})" if mode else ""), nb, dec, Hdec,
                       nbytes + (2 if mode else 0), "1 f16/vector" if mode else "")
                del dec
        # (d) outliers at 8 bits + (extended) RaBitQ on the rotated rest, one f16 scalar
        w_ = np.where(np.isin(np.arange(dim), out_idx), 8, 0)
        nbytes = id_bytes + np.ceil(nr * nb / 8) + no + 2
        for proj in (False, True):
            dec = encode_decode_dims(ZT, w_, tables_z, means_z)
            Hdec = encode_decode_dims(HzT, w_, tables_z, means_z)
            for D_, X_ in ((dec, ZT), (Hdec, HzT)):
                for c0 in range(0, X_.shape[1], 8192):
                    cols = slice(c0, c0 + 8192)
                    YT, sc = rabitq_codes(X_[rest_idx, cols], None, nb, proj)
                    D_[rest_idx, cols] = YT * sc.astype(np.float16).astype(np.float32)[None, :]
            eval_z(f"outliers 8-bit LM + {'RaBitQ' if nb == 1 else f'ext. RaBitQ {nb}-bit'} on rotated rest"
                   + (", projection scale" if proj else ""), nb, dec, Hdec, nbytes, "1 f16/vector")
            del dec
        # (e) the adaptive codec given the bytes of (d), for a same-bytes comparison
        extra = int(round((nbytes - base_bytes) * 8))
        widths = allocate(dist_est["trained"], weights["doc"], nb * dim + extra)
        eval_dims(f"adaptive +LM at {nbytes:.0f} B", nb, widths, tables_lm, nbytes,
                  width_histogram(widths))

    if "scale" in sections:  # the adaptive codec's per-vector scale: none, full, partial, global
        HT = np.ascontiguousarray(H.T)
        for nb in nbits_list:
            widths = allocate(dist_est["trained"], weights["doc"], nb * dim)
            nbytes = id_bytes + nb * dim / 8
            dec0 = encode_decode_dims(RT, widths, tables_lm, means)  # once; each mode scales a copy
            Hdec0 = encode_decode_dims(HT, widths, tables_lm, means)
            for mode in (None, "unbiased", "sqrt", "global"):
                dec, Hdec = dec0.copy(), Hdec0.copy()
                if mode == "global":
                    g = global_scale(HT, Hdec, rest_idx)  # from the held-out residuals
                    dec[rest_idx] *= g
                    Hdec[rest_idx] *= g
                    note = f"one scale {g:.4f}"
                elif mode:
                    vector_scale(RT, dec, rest_idx, mode)
                    vector_scale(HT, Hdec, rest_idx, mode)
                    note = "1 f16/vector"
                else:
                    note = ""
                report(f"adaptive +LM, scale {mode or 'none'}", nb,
                       nbytes + (2 if mode in ("unbiased", "sqrt") else 0),
                       scorer.doc_scores(YT=dec), Hdec, width_histogram(widths) + ", " + note)
                del dec
            del dec0, Hdec0

    if "sweep" in sections:  # how many bytes the adaptive codec needs for a given recall
        HT = np.ascontiguousarray(H.T)
        for avg in (float(x) for x in args.sweep.split(",")):
            bits = int(round(avg * dim))
            widths = allocate(dist_est["trained"], weights["doc"], bits)
            nbytes = id_bytes + np.ceil(bits / 8)
            eval_dims(f"adaptive +LM, {avg:g} bits/dim", f"{avg:g}", widths, tables_lm, nbytes,
                      width_histogram(widths))
            dec = encode_decode_dims(RT, widths, tables_lm, means)
            Hdec = encode_decode_dims(HT, widths, tables_lm, means)
            vector_scale(RT, dec, rest_idx, "unbiased")
            vector_scale(HT, Hdec, rest_idx, "unbiased")
            report(f"adaptive +LM + scale (unbiased), {avg:g} bits/dim", f"{avg:g}", nbytes + 2,
                   scorer.doc_scores(YT=dec), Hdec, width_histogram(widths) + ", 1 f16/vector")
            del dec

    for nb in nbits_list:
        if not sections & {"base", "block"}:
            break
        log(f"--- {nb} bit(s) per dimension")
        code_bytes = nb * dim / 8
        uniform = np.full(dim, nb)
        if "base" not in sections:
            block_study(nb)
            continue
        eval_dims("per-dim quantile (tartan today)", nb, uniform, tables_q, id_bytes + code_bytes)
        eval_dims("per-dim Lloyd-Max", nb, uniform, tables_lm, id_bytes + code_bytes)
        variants = [(d, w) for d in dist_est for w in weights] if args.grid else \
                   [("trained", "doc"), ("model", "doc"), ("trained", "mse")]
        for d, w in variants:
            widths = allocate(dist_est[d], weights[w], nb * dim)
            assert widths.sum() == nb * dim
            eval_dims(f"adaptive D={d} w={w} +LM", nb, widths, tables_lm, id_bytes + code_bytes,
                      width_histogram(widths))
        # Outlier dimensions as float16 beside per-dimension codes. The issue picked them
        # by residual variance > 20x the median; with tartan's K the outlier dimensions'
        # residual variance is only ~10x the median on the LLM-like collection, so they
        # are picked by the vectors' second moment (w_j) > 20x its median instead.
        out = weights["doc"] > 20 * np.median(weights["doc"])
        if out.any():
            widths = np.where(out, 16, nb)
            nbytes = id_bytes + np.ceil((dim - out.sum()) * nb / 8) + 2 * out.sum()
            eval_dims("outliers f16 + per-dim Lloyd-Max", nb, widths, tables_lm, nbytes,
                      f"{int(out.sum())} f16 dims")
        # Hybrid: the adaptive allocation (D=trained, w=doc), but the dimensions it gives
        # 1 bit are coded together by RaBitQ (rotation of that subspace + signs + one
        # float16 scalar per vector) instead of per-dimension 1-bit tables.
        widths = allocate(dist_est["trained"], weights["doc"], nb * dim)
        one = np.nonzero(widths == 1)[0]
        if len(one) >= 16:
            dec = encode_decode_dims(RT, np.where(widths == 1, 0, widths), tables_lm, means)
            Hdec = encode_decode_dims(np.ascontiguousarray(H.T), np.where(widths == 1, 0, widths),
                                      tables_lm, means)
            P1 = random_rotation(len(one), np.random.default_rng([args.seed, 7]))
            for T_, X_ in ((dec, RT), (Hdec, np.ascontiguousarray(H.T))):
                for c0 in range(0, X_.shape[1], 8192):  # in column blocks: memory
                    cols = slice(c0, c0 + 8192)
                    sub = X_[one, cols] - means[one, None].astype(np.float32)  # centred
                    YT, s = rabitq_codes(sub, P1, 1)
                    T_[one, cols] += (P1 @ YT) * s.astype(np.float16).astype(np.float32)[None, :]
            report("adaptive + RaBitQ on its 1-bit dims", nb, id_bytes + code_bytes + 2,
                   scorer.doc_scores(YT=dec), Hdec,
                   width_histogram(widths) + ", 1 f16 scalar/vector")
            del dec

        # RaBitQ (B = 1) and extended RaBitQ (B = 2, 4): the same bits, one float16 scalar
        if nb == 1 or not args.no_rabitq_ext:
            P = random_rotation(dim, np.random.default_rng([args.seed, 7]))
            label = "RaBitQ (rotation + signs)" if nb == 1 else f"extended RaBitQ ({nb}-bit grid)"
            for proj in (False, True):
                YT, s = rabitq_codes(RT, P, nb, proj)
                YhT, sh = rabitq_codes(np.ascontiguousarray(H.T), P, nb, proj)
                for sdt, sb in ((np.float16, 2), (np.float32, 4)) if not proj else ((np.float16, 2),):
                    sq = s.astype(sdt).astype(np.float32)  # the stored scalar
                    scores = scorer.doc_scores(YT=YT, scale=sq, T=P)
                    HdecT = (P @ YhT) * sh.astype(sdt).astype(np.float32)[None, :]
                    report(label + (", projection scale" if proj else ""), nb,
                           id_bytes + code_bytes + sb, scores, HdecT,
                           f"1 {np.dtype(sdt).name} scalar/vector")
                del YT
        if "block" in sections:
            block_study(nb)

    log(f"done in {time.time() - t_start:.0f} s")
    print(f"\n### {name}\n")
    print(f"N = {N} vectors x {dim}, K = {K} centroids, {len(tr)} training / {len(hr)} "
          f"held-out vectors, seed {args.seed}; float16 vectors: {2 * dim} B/vector.\n")
    print("| codec | bits/dim | bytes/vector | recall@10 vs exact | MRR@10 | Δ relevant | "
          "Δ best other | held-out dot error | outlier share of it | note |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['codec']} | {r['nbits']} | {r['bytes']:.0f} | {r['recall10']:.3f} | "
              f"{r['mrr10']:.3f} | {r['d_rel']:+.4f} | {r['d_other']:+.4f} | "
              f"{r['dot_err']:.4f} | {r['err_outlier_share']:.2f} | {r['note']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(collection=name, N=N, dim=dim, K=K, train=len(tr), heldout=len(hr),
                           seed=args.seed, rows=rows), f, indent=1, default=float)


if __name__ == "__main__":
    main()

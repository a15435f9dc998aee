"""FAISS baseline for bench/search_bench.sh: IVF-PQ candidate generation over all
document vectors + exact MaxSim rerank on the original vectors (the ColBERTv1
pipeline), Debian python3-faiss, one thread.

The reference is exact MaxSim over the original vectors (brute force, cached in
PREFIX.exact<N>.run): tartan's exhaustive mode scores decompressed vectors, and an
exact reranker cannot match its top 10 beyond what 2-bit compression changes. The
tartan run's recall@10 against exact is computed first; FAISS is then tuned over
(nprobe, k') to the same recall, and the cheapest setting that reaches it is reported
with its latency (p50/p95) and QPS.

usage: search_faiss.py PREFIX TARTAN_RUN [NQUERIES] [K]
  PREFIX.vectors.npy (float16/32 [N, dim]), PREFIX.doclens.npy, PREFIX.ids.txt,
  PREFIX.queries.npy [Q, Kq, dim], PREFIX.qids.txt (tartan-synth output)."""
import os
import sys
import time

import faiss
import numpy as np

prefix, tartan_run = sys.argv[1], sys.argv[2]
nqueries = int(sys.argv[3]) if len(sys.argv) > 3 else 100
k = int(sys.argv[4]) if len(sys.argv) > 4 else 10
faiss.omp_set_num_threads(1)

x = np.load(prefix + ".vectors.npy", mmap_mode="r")
doclens = np.load(prefix + ".doclens.npy").astype(np.int64)
ids = [l.rstrip("\n") for l in open(prefix + ".ids.txt")]
Q = np.load(prefix + ".queries.npy").astype(np.float32)[:nqueries]
qids = [l.rstrip("\n") for l in open(prefix + ".qids.txt")][:nqueries]
n, dim = x.shape
vec2doc = np.repeat(np.arange(len(doclens)), doclens)
off = np.concatenate([[0], np.cumsum(doclens)])



def load_run(path):
    r = {}
    for line in open(path):
        q, _, d, rank, _, _ = line.split()
        if int(rank) <= k:
            r.setdefault(q, set()).add(d)
    return r


# Exact MaxSim ground truth, brute force over every document in chunks: the top
# max(k, 100) of each query, cached, so that k = 10 and k = 100 share one pass.
exact_path = "%s.exact%d.run" % (prefix, len(Q))
kk = max(k, 100)
if not os.path.exists(exact_path):
    t0 = time.time()
    best = [[] for _ in range(len(Q))]
    chunk_docs = max(1, (1 << 20) // int(doclens.mean()))
    for d0 in range(0, len(doclens), chunk_docs):
        d1 = min(len(doclens), d0 + chunk_docs)
        D = np.asarray(x[off[d0]:off[d1]], dtype=np.float32)
        starts = off[d0:d1] - off[d0]
        for qi in range(len(Q)):
            sc = np.maximum.reduceat(Q[qi] @ D.T, starts, axis=1).sum(axis=0)
            top = np.argpartition(-sc, min(kk, len(sc) - 1))[:kk]
            best[qi].extend((float(sc[t]), d0 + int(t)) for t in top)
        best = [sorted(b, key=lambda e: (-e[0], e[1]))[:kk] for b in best]
    with open(exact_path + ".tmp", "w") as f:
        for qi in range(len(Q)):
            top = best[qi]
            for r, (sc, d) in enumerate(top):
                f.write("%s Q0 %s %d %.6f exact\n" % (qids[qi], ids[d], r + 1, sc))
    os.rename(exact_path + ".tmp", exact_path)
    print("exact MaxSim reference in %.1f s" % (time.time() - t0), file=sys.stderr)
ref = load_run(exact_path)
tr = load_run(tartan_run)
target = sum(len(tr.get(q, set()) & ref[q]) for q in ref) / (k * len(ref))
print("tartan run recall@%d against exact MaxSim: %.4f" % (k, target))

# IVF-PQ with the storage of tartan's 2-bit 128-d residuals (32 bytes per vector):
# 4*sqrt(N) lists (FAISS's guideline), 32 sub-quantizers of 8 bits. Cached in
# PREFIX.ivfpq.faiss (building it is slow and not what is measured).
nlist = 1 << int(np.log2(4 * np.sqrt(n)))
m = 32 if dim % 32 == 0 else 16
cache = prefix + ".ivfpq.faiss"
if os.path.exists(cache):
    index = faiss.read_index(cache)
else:
    t0 = time.time()
    faiss.omp_set_num_threads(2)
    rng = np.random.default_rng(1)
    ntrain = min(n, 64 * nlist)
    train = np.ascontiguousarray(x[np.sort(rng.choice(n, ntrain, replace=False))],
                                 dtype=np.float32)
    quant = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(quant, dim, nlist, m, 8, faiss.METRIC_INNER_PRODUCT)
    index.train(train)
    del train
    for i in range(0, n, 1 << 18):
        index.add(np.ascontiguousarray(x[i:i + (1 << 18)], dtype=np.float32))
    faiss.write_index(index, cache)
    print("faiss IVF%d,PQ%dx8 built in %.1f s (2 threads)" % (nlist, m, time.time() - t0),
          file=sys.stderr)
faiss.omp_set_num_threads(1)


def search(q, nprobe, kp):
    index.nprobe = nprobe
    _, I = index.search(q, kp)
    docs = np.unique(vec2doc[I[I >= 0]])
    # exact MaxSim over the candidates' original vectors
    rows = np.concatenate([np.arange(off[d], off[d + 1]) for d in docs])
    D = np.asarray(x[rows], dtype=np.float32)
    S = q @ D.T  # [Kq, rows]
    lens = doclens[docs]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    best = np.maximum.reduceat(S, starts, axis=1)  # [Kq, ndocs]
    scores = best.sum(axis=0)
    top = np.argsort(-scores, kind="stable")[:k]
    return docs[top], scores[top]


for qi in range(len(Q)):  # untimed pass: page in the vectors the rerank reads
    search(Q[qi], 1, 32)
results = []
for nprobe in (1, 2, 4, 8, 16, 32, 64):
    for kp in (16 * k // 10, 32 * k // 10, 64 * k // 10, 128 * k // 10, 256 * k // 10):
        lat, found = [], 0
        for qi in range(len(Q)):
            t = time.perf_counter()
            docs, _ = search(Q[qi], nprobe, kp)
            lat.append(time.perf_counter() - t)
            found += len({ids[d] for d in docs} & ref[qids[qi]])
        recall = found / (k * len(Q))
        lat.sort()
        p50, p95 = lat[len(lat) // 2], lat[int(0.95 * (len(lat) - 1))]
        results.append((recall, p50, p95, nprobe, kp, len(Q) / sum(lat)))
        print("nprobe %d k' %d: recall@%d %.4f p50 %.2f ms p95 %.2f ms" %
              (nprobe, kp, k, recall, 1e3 * p50, 1e3 * p95), file=sys.stderr)
        if recall >= target:
            break
ok = [r for r in results if r[0] >= target]
best = min(ok, key=lambda r: r[1]) if ok else max(results, key=lambda r: r[0])
print("faiss IVF%d,PQ%dx8+rerank nprobe=%d k'=%d: recall@%d %.4f p50 %.3f ms p95 %.3f ms "
      "QPS %.1f (1 thread)%s" % (nlist, m, best[3], best[4], k, best[0], 1e3 * best[1],
                                 1e3 * best[2], best[5], "" if ok else " (target not reached)"))

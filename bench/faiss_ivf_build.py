"""FAISS baseline for bench_build.sh: spherical k-means IVF training on the same number
of vectors and iterations as tartan, then add of every vector (nearest-centroid
assignment + storage), vectors streamed from the .npy in chunks."""
import sys, time
import numpy as np
import faiss

path, k, ntrain, iters, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
faiss.omp_set_num_threads(threads)
x = np.load(path, mmap_mode="r")
n, d = x.shape
rng = np.random.default_rng(42)
sel = np.sort(rng.choice(n, size=min(ntrain, n), replace=False))
t0 = time.time()
train = np.ascontiguousarray(x[sel], dtype=np.float32)
faiss.normalize_L2(train)
quantizer = faiss.IndexFlatIP(d)
index = faiss.IndexIVFFlat(quantizer, d, k, faiss.METRIC_INNER_PRODUCT)
index.cp.niter = iters
index.cp.spherical = True
index.cp.max_points_per_centroid = 1 << 30  # use the whole sample, as tartan does
index.train(train)
t1 = time.time()
del train
chunk = 1 << 18
for i in range(0, n, chunk):
    b = np.ascontiguousarray(x[i:i + chunk], dtype=np.float32)
    faiss.normalize_L2(b)
    index.add(b)
t2 = time.time()
print("faiss: train %.1f s, add %.1f s, total %.1f s (%d vectors, k=%d)" % (t1 - t0, t2 - t1, t2 - t0, index.ntotal, k))

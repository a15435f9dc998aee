#!/usr/bin/python3
"""Run the PLAID reference (stanford-futuredata/ColBERT) on precomputed vectors, on CPU,
for a side-by-side comparison with tartan (doc/benchmarks.md, "Side by side with the
PLAID reference").

The reference is imported from a checkout given on the command line (never copied here).
Only its text encoder is stubbed: the collection handed to its indexer is the list of
document numbers as strings, and a stand-in for colbert.modeling.checkpoint.Checkpoint
answers docFromText() with those documents' vectors from the .npy file. Search calls the
reference's own Searcher.dense_search() with the query vectors (what Searcher.search()
does after encoding the text). Indexing (sampling, faiss k-means, residual codec,
bucket quantiles, IVF) and search (candidate generation, filter_pids and
decompress_residuals C++ extensions, MaxSim) are the reference's code.

The reference's encoder module needs `transformers` and `huggingface_hub`, which are not
installed; empty stand-in modules are registered for them so that its package imports.
Nothing from them is called on this path except hf_hub_download(), which the reference
calls inside try/except and which the stand-in makes fail.

usage:
  plaid_ref.py --colbert DIR build --vectors V.npy --doclens L.npy --root R --name N
               [--nbits 2] [--kmeans-niters 4]
  plaid_ref.py --colbert DIR search --root R --name N --queries Q.npy [--qids F]
               [--k 10] [--limit N] [--run OUT] [--label TEXT] [--all-docs]
Threads: torch.set_num_threads(--threads, default 1); set OMP_NUM_THREADS and
MKL_NUM_THREADS=1 in the environment as well. Search prints one JSON line: p50/p95 wall
time per query and p50/p95 of the process CPU time per query (all threads of the
process), and the mean. --run writes a TREC run (document ids are the document numbers,
as in tartan-synth's .ids.txt when it numbers them; see --ids).
"""
import argparse
import contextlib
import json
import os
import sys
import time
import types

import numpy as np


def stub_modules():
    """Empty stand-ins for the encoder's third-party packages (not installed here)."""
    class _Dummy:
        def __init__(self, *a, **kw):
            raise RuntimeError("text encoder stubbed: not available in this benchmark")

    def mod(name):
        m = types.ModuleType(name)
        m.__getattr__ = lambda attr: type(attr, (_Dummy,), {})  # noqa: E731
        m.__path__ = []  # a package, so that submodules import
        return m

    for name in ("transformers", "transformers.dynamic_module_utils", "huggingface_hub",
                 "huggingface_hub.utils", "git"):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                sys.modules[name] = mod(name)


class Vectors:
    """Documents' vectors: flat (n, dim) array plus per-document offsets."""

    def __init__(self, vectors, doclens):
        self.v = np.load(vectors, mmap_mode="r")
        self.lens = np.load(doclens).astype(np.int64)
        self.off = np.zeros(len(self.lens) + 1, dtype=np.int64)
        np.cumsum(self.lens, out=self.off[1:])
        if self.v.ndim == 3:  # (docs, doclen, dim): fixed length
            self.v = self.v.reshape(-1, self.v.shape[-1])
        assert self.off[-1] == self.v.shape[0], (self.off[-1], self.v.shape)


def make_stub_checkpoint(torch, vecs):
    class StubCheckpoint:
        """Stands in for the text encoder: passage text is the document number."""

        def __init__(self, name=None, colbert_config=None, verbose=3):
            self.name = name
            self.colbert_config = colbert_config

        def cuda(self):
            return self

        def docFromText(self, docs, bsize=None, keep_dims=True, to_cpu=False,
                        showprogress=False, return_tokens=False, pool_factor=1,
                        protected_tokens=0, clustering_mode="hierarchical"):
            assert keep_dims == "flatten", keep_dims
            ids = [int(d) for d in docs]
            parts = [np.asarray(vecs.v[vecs.off[i]:vecs.off[i + 1]], dtype=np.float32)
                     for i in ids]
            D = torch.from_numpy(np.concatenate(parts)) if parts else \
                torch.empty(0, vecs.v.shape[1])
            return D, [int(vecs.lens[i]) for i in ids]

        def queryFromText(self, *a, **kw):
            raise RuntimeError("queries are given as vectors (Searcher.dense_search)")

    return StubCheckpoint


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--colbert", required=True, help="checkout of stanford-futuredata/ColBERT")
    ap.add_argument("--threads", type=int, default=1)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--vectors", required=True)
    b.add_argument("--doclens", required=True)
    b.add_argument("--root", required=True)
    b.add_argument("--name", required=True)
    b.add_argument("--nbits", type=int, default=2)
    b.add_argument("--kmeans-niters", type=int, default=4)
    s = sub.add_parser("search")
    s.add_argument("--root", required=True)
    s.add_argument("--name", required=True)
    s.add_argument("--queries", required=True)
    s.add_argument("--qids")
    s.add_argument("--ids", help="document ids file (line i = id of document i)")
    s.add_argument("--k", type=int, default=10)
    s.add_argument("--limit", type=int, default=0)
    s.add_argument("--run")
    s.add_argument("--label", default="plaid-ref")
    s.add_argument("--all-docs", action="store_true",
                   help="the reference's own exhaustive search: every document scored "
                        "decompressed (dense_search's pids= argument)")
    a = ap.parse_args()

    stub_modules()
    sys.path.insert(0, os.path.abspath(a.colbert))
    import torch
    torch.set_num_threads(a.threads)
    import colbert.indexing.collection_indexer as ci
    import colbert.searcher as cs
    from colbert.infra import Run, RunConfig, ColBERTConfig

    if a.cmd == "build":
        vecs = Vectors(a.vectors, a.doclens)
        stub = make_stub_checkpoint(torch, vecs)
        ci.Checkpoint = stub
        from colbert import Indexer
        dim = vecs.v.shape[1]
        coll = [str(i) for i in range(len(vecs.lens))]
        t0, c0 = time.time(), time.process_time()
        with Run().context(RunConfig(nranks=1, root=a.root, experiment="plaid",
                                     avoid_fork_if_possible=True)):
            cfg = ColBERTConfig(nbits=a.nbits, dim=dim, kmeans_niters=a.kmeans_niters,
                                avoid_fork_if_possible=True, index_root=a.root)
            idx = Indexer(checkpoint="stub-encoder", config=cfg, verbose=1)
            idx.configure(avoid_fork_if_possible=True)  # one process: the stubs stay in
            idx.index(name=a.name, collection=coll, overwrite="force_silent_overwrite")
        print(json.dumps({"label": "plaid-ref-build", "docs": len(coll), "dim": dim,
                          "nbits": a.nbits, "wall_s": round(time.time() - t0, 2),
                          "cpu_s": round(time.process_time() - c0, 2)}), flush=True)
        return

    q = np.load(a.queries).astype(np.float32)
    if q.ndim == 2:
        q = q[None]
    n = len(q) if not a.limit else min(a.limit, len(q))
    qids = open(a.qids).read().split() if a.qids else [str(i) for i in range(len(q))]
    ids = open(a.ids).read().split("\n") if a.ids else None
    stub = make_stub_checkpoint(torch, None)
    cs.Checkpoint = stub
    # The real Checkpoint's model constructor loads the segmented_maxsim C++ extension
    # that scoring uses; with the encoder stubbed, call the reference's loader directly.
    from colbert.modeling.colbert import ColBERT
    # The reference logs on stdout; keep stdout for the one JSON line.
    with contextlib.redirect_stdout(sys.stderr), \
            Run().context(RunConfig(nranks=1, root=a.root, experiment="plaid")):
        ColBERT.try_load_torch_extensions(use_gpu=False)
        searcher = cs.Searcher(index=a.name, checkpoint="stub-encoder",
                               collection=["0"], verbose=1,
                               index_root=os.path.join(a.root, "plaid", "indexes"))
        Q = torch.from_numpy(q)
        every = list(range(len(searcher.ranker.doclens))) if a.all_docs else None
        searcher.dense_search(Q[0:1], k=a.k)  # warm-up (loads the C++ extensions)
        wall, cpu, out = [], [], []
        for i in range(n):
            t0, c0 = time.perf_counter(), time.process_time()
            pids, ranks, scores = searcher.dense_search(Q[i:i + 1], k=a.k, pids=every)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            out.append((qids[i], pids, scores))
    if a.run:
        with open(a.run, "w") as f:
            for qid, pids, scores in out:
                for r, (p, sc) in enumerate(zip(pids, scores)):
                    f.write(f"{qid} Q0 {ids[p] if ids else p} {r + 1} {sc:.6f} plaid-ref\n")

    def pct(v, p):
        v = sorted(v)
        return v[max(0, int(np.ceil(p / 100 * len(v))) - 1)] * 1e3

    print(json.dumps({"label": a.label, "queries": n, "k": a.k, "threads": a.threads,
                      "p50_ms": round(pct(wall, 50), 3), "p95_ms": round(pct(wall, 95), 3),
                      "mean_ms": round(1e3 * sum(wall) / n, 3),
                      "cpu_p50_ms": round(pct(cpu, 50), 3),
                      "cpu_p95_ms": round(pct(cpu, 95), 3),
                      "cpu_mean_ms": round(1e3 * sum(cpu) / n, 3)}), flush=True)


if __name__ == "__main__":
    main()

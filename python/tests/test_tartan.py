"""Tests of the Python binding (run by `make python-check`, tools/run-tests.sh stage
"python"). They need TT_BUILDDIR (for the tartan CLI and tartan-synth) and skip the
CLI comparisons when it is absent."""
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tracemalloc
import unittest

import numpy as np

import tartan

BUILDDIR = os.environ.get("TT_BUILDDIR", "")
CLI = os.path.join(BUILDDIR, "tartan")
SYNTH = os.path.join(BUILDDIR, "tartan-synth")
HAVE_CLI = bool(BUILDDIR) and os.access(CLI, os.X_OK) and os.access(SYNTH, os.X_OK)
# Under ASan + UBSan (`make python-check` in a --enable-sanitizers build): measures of
# the process's memory include the sanitizer's shadow and quarantine, and the large
# builds are slow; those tests skip (the plain build runs them), the shared index is
# not calibrated (TestProgress's build is) and the refcount loop makes 1,000 calls.
SANITIZERS = bool(os.environ.get("TT_SANITIZERS"))


def docs_of(vectors, doclens):
    ends = np.cumsum(doclens)
    return [vectors[e - n:e] for e, n in zip(ends, doclens)]


def synthetic(ndocs=300, dim=32, seed=0):
    """Clustered unit vectors: ndocs documents of 4..12 vectors."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((24, dim))
    lens = rng.integers(4, 13, ndocs)
    x = centres[rng.integers(0, 24, lens.sum())] + 0.4 * rng.standard_normal((lens.sum(), dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), lens.astype(np.int64)


def maxsim(q, d):
    return float((q @ d.T).max(axis=1).sum())


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tartan-py-")
        cls.x, cls.lens = synthetic()
        cls.docs = docs_of(cls.x, cls.lens)
        cls.ids = [f"doc{i}" for i in range(len(cls.docs))]
        cls.path = os.path.join(cls.tmp, "idx")
        tartan.build(cls.path, cls.docs, ids=cls.ids, centroids=32, threads=2, tune=not SANITIZERS,
                     keep_originals="f16")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def queries(self, n=12, nq=4, seed=1):
        rng = np.random.default_rng(seed)
        qs = []
        for i in range(n):
            d = self.docs[int(rng.integers(0, len(self.docs)))]
            q = d[rng.integers(0, len(d), nq)] + 0.1 * rng.standard_normal((nq, d.shape[1]))
            qs.append(q.astype(np.float32))
        return np.stack(qs)


class TestSearch(Base):
    def test_exact_mode_is_brute_force_maxsim(self):
        # mode="exact" scores the kept float16 originals: compare with MaxSim in NumPy
        qs = self.queries()
        with tartan.Index(self.path) as ix:
            for q in qs:
                ids, scores = ix.search(q, k=5, mode="exact")
                ref = sorted(((maxsim(q, d.astype(np.float16).astype(np.float32)), i)
                              for i, d in enumerate(self.docs)), reverse=True)[:5]
                self.assertEqual(list(ids), [self.ids[i] for _, i in ref])
                np.testing.assert_allclose(scores, [s for s, _ in ref], rtol=1e-4)

    def test_batch_single_list_agree(self):
        qs = self.queries()
        with tartan.Index(self.path) as ix:
            bids, bscores = ix.search(qs, k=7, threads=2)
            lids, lscores = ix.search(list(qs), k=7)
            self.assertEqual(bids.shape, (len(qs), 7))
            np.testing.assert_array_equal(bids, lids)
            np.testing.assert_array_equal(bscores, lscores)
            for i, q in enumerate(qs):
                ids, scores = ix.search(q, k=7)
                self.assertEqual(list(ids), list(bids[i]))
                np.testing.assert_array_equal(scores, bscores[i])
                # the C fast path (this call) and the Python path agree exactly
                pids, pscores = ix._search_py(q, k=7)
                self.assertEqual(list(pids), list(ids))
                np.testing.assert_array_equal(pscores, scores)
                self.assertEqual((ids.dtype, scores.dtype), (np.dtype(object), np.float32))
                rows, rscores = ix.search(q, k=7, rows=True)
                self.assertEqual(ix.doc_ids(rows), list(ids))
                dicts = ix.search(q, k=7, as_dicts=True)
                self.assertEqual([d["id"] for d in dicts], list(ids))
                self.assertEqual([d["score"] for d in dicts], [float(s) for s in scores])
            self.assertTrue(all(np.all(np.diff(s) <= 0) for s in bscores))

    def test_lengths_of_list_queries_differ(self):
        qs = self.queries()
        with tartan.Index(self.path) as ix:
            mixed = [qs[0][:2], qs[1], qs[2][:3]]
            ids, _ = ix.search(mixed, k=3)
            for i, q in enumerate(mixed):
                self.assertEqual(list(ids[i]), list(ix.search(q, k=3)[0]))

    def test_pool_global(self):
        """build(pool_global=F): one cut for the collection, about 1/F of the vectors kept."""
        d = os.path.join(self.tmp, "gpool")
        x, lens = synthetic(ndocs=60, dim=8, seed=5)
        tartan.build(d, docs_of(x, lens), centroids=4, threads=1, pool_global=2.0)
        with tartan.Index(d) as ix:
            info = ix.info()
        self.assertEqual(info["pool_global"], 2.0)
        self.assertGreater(info["pool_threshold"], 0)
        self.assertEqual(info["input_vectors"], int(np.sum(lens)))
        self.assertLess(abs(info["num_vectors"] - np.sum(lens) / 2), 0.1 * np.sum(lens) / 2)
        with self.assertRaises(ValueError):
            tartan.build(d + "x", docs_of(x, lens), centroids=4, pool_global=2.0, pool_factor=2)

    def test_debias_choices(self):
        """build(debias=...): True/"table" (the default), False/"none", "vector" (one
        residual scale per vector, 2 bytes each in vscale.tt, adaptive codec only)."""
        x, lens = synthetic(ndocs=60, dim=8, seed=6)
        want = {True: "table", "table": "table", False: "none", "none": "none", "vector": "vector",
                "auto": "table"}  # no outlier dimensions here: no 8-bit positions
        for i, (arg, name) in enumerate(want.items()):
            d = os.path.join(self.tmp, "debias%d" % i)
            tartan.build(d, docs_of(x, lens), centroids=4, threads=1, tune=False, debias=arg)
            with tartan.Index(d) as ix:
                info = ix.info()
            self.assertEqual(info["debias"], name, arg)
            self.assertEqual(info["bytes_vscale"], 64 + 2 * int(np.sum(lens)) if name == "vector" else 0)
        self.assertRaisesRegex(ValueError, "'none', 'table', 'vector', 'auto'", tartan.build,
                               os.path.join(self.tmp, "debias-x"), docs_of(x, lens), debias="row")
        self.assertRaisesRegex(tartan.InvalidArgumentError, "adaptive", tartan.build,
                               os.path.join(self.tmp, "debias-y"), docs_of(x, lens), centroids=4,
                               codec="per-dim", debias="vector")

    def test_tune_keeps_first_documents(self):
        """tune() reports, per set, the share of the calibration queries whose first
        document by exhaustive search it keeps in its top k ("first"); a set marked
        reached keeps it for at least the target's share."""
        x, lens = synthetic(ndocs=120, dim=16, seed=8)
        d = os.path.join(self.tmp, "first")
        tartan.build(d, docs_of(x, lens), centroids=8, threads=1, tune=False)
        cal = tartan.tune(d, target_recall=0.9, cost="work", pseudo_queries=16, threads=1)
        for k in ("k10", "k100"):
            s = cal[k]
            self.assertIsInstance(s["first"], float)
            self.assertTrue(0 <= s["first"] <= 1, s)
            if s["reached"]:
                self.assertGreaterEqual(s["first"], 0.9, s)

    def test_padding_when_k_exceeds_documents(self):
        d = os.path.join(self.tmp, "tiny")
        x, lens = synthetic(ndocs=40, dim=8, seed=3)
        tartan.build(d, docs_of(x, lens), centroids=4, threads=1)
        with tartan.Index(d) as ix:
            ids, scores = ix.search(x[None, :3], k=50, mode="exhaustive")
            self.assertEqual(ids.shape, (1, 50))
            self.assertEqual(sum(i is not None for i in ids[0]), 40)
            self.assertTrue(np.all(np.isneginf(scores[0, 40:])))
            one, s1 = ix.search(x[:3], k=50, mode="exhaustive")
            self.assertEqual(len(one), 40)
            self.assertEqual(sorted(one), sorted(str(i) for i in range(40)))

    def test_info_and_len(self):
        with tartan.Index(self.path) as ix:
            info = ix.info()
            self.assertEqual(len(ix), len(self.docs))
            self.assertEqual(info["num_docs"], len(self.docs))
            self.assertEqual(info["num_vectors"], int(self.lens.sum()))
            self.assertEqual(info["dim"], 32)
            self.assertEqual(info["nbits"], 2)
            self.assertEqual(info["centroids"], 32)
            self.assertTrue(info["keep_originals"])
            self.assertEqual(ix.dim, 32)
        self.assertTrue(ix.closed)
        self.assertIn("closed", repr(ix))
        with self.assertRaisesRegex(ValueError, "closed"):
            ix.search(self.docs[0], k=1)

    @unittest.skipUnless(HAVE_CLI, "needs TT_BUILDDIR with tartan and tartan-synth")
    def test_info_matches_cli(self):
        """Index.info() reports what `tartan info --json` reports, field for field."""
        import json
        out = subprocess.run([CLI, "info", "--json", self.path], check=True,
                             capture_output=True, text=True).stdout
        cli = json.loads(out)
        with tartan.Index(self.path) as ix:
            info = ix.info()
        for name, value in cli["bytes"].items():
            self.assertEqual(info["bytes_" + name], value, name)
        for name in ("num_docs", "num_vectors", "dim", "nbits", "sketch_bytes", "debias",
                     "pool_factor", "input_vectors", "lloyd_max_rounds", "bits_per_dim",
                     "resident_bytes", "generation", "pool_global", "pool_threshold"):
            self.assertAlmostEqual(info[name], cli[name], places=3, msg=name)
        for name in ("train_vectors", "heldout_vectors", "kmeans_iters", "threads",
                     "sample_factor", "seed"):
            self.assertAlmostEqual(info[name], cli["build"][name], places=6, msg=name)
        self.assertEqual({int(w): n for w, n in info["dims_by_width"].items()},
                         {int(w): n for w, n in cli["dims_by_width"].items()})
        self.assertEqual(sum(info["dims_by_width"].values()), 32)
        self.assertEqual(info["added_vectors"], cli["drift"]["added_vectors"])

    @unittest.skipUnless(HAVE_CLI, "needs TT_BUILDDIR with tartan and tartan-synth")
    @unittest.skipIf(SANITIZERS, "builds three indexes; the plain build compares with the CLI")
    def test_identical_to_cli(self):
        pre = os.path.join(self.tmp, "syn")
        subprocess.run([SYNTH, "--out", pre, "--docs", "400", "--doclen", "5-15", "--dim", "32",
                        "--queries", "25", "--qlen", "4"], check=True, capture_output=True)
        x = np.load(pre + ".vectors.npy")
        lens = np.load(pre + ".doclens.npy")
        with open(pre + ".ids.txt") as f:
            ids = f.read().split()
        with open(pre + ".qids.txt") as f:
            qids = f.read().split()
        Q = np.load(pre + ".queries.npy")
        idx = os.path.join(self.tmp, "syn-idx")
        # built from Python (a list of per-document arrays), searched by both
        tartan.build(idx, docs_of(x, lens), ids=ids, centroids=64, threads=2)
        # as `tartan search` does: OpenBLAS's threads split a product's rows among them,
        # and some of its kernels (Prescott's) then sum a row in another order
        tartan.set_blas_threads(1)
        self.addCleanup(tartan.set_blas_threads, os.cpu_count() or 1)
        for mode in ("plaid", "exhaustive"):
            run = os.path.join(self.tmp, f"cli-{mode}.run")
            subprocess.run([CLI, "search", "--index", idx, "--queries", pre + ".queries.npy",
                            "--query-ids", pre + ".qids.txt", "--k", "10", "--out", run,
                            "--mode", mode], check=True, capture_output=True)
            cli = {}
            with open(run) as f:
                for line in f:
                    qid, _, doc, rank, score, _ = line.split()
                    cli.setdefault(qid, []).append((doc, np.float32(score)))
            with tartan.Index(idx) as ix:
                bids, bscores = ix.search(Q, k=10, mode=mode, threads=2)
                for i, qid in enumerate(qids):
                    got = [(d, s) for d, s in zip(bids[i], bscores[i]) if d is not None]
                    self.assertEqual(got, cli[qid], f"{mode} query {qid}")
                    one = ix.search(Q[i], k=10, mode=mode)
                    self.assertEqual(list(zip(one[0], one[1])), cli[qid])
        # and the CLI-built index from the same files is the same index
        idx2 = os.path.join(self.tmp, "syn-cli-idx")
        subprocess.run([CLI, "build", "--vectors", pre + ".vectors.npy", "--doclens",
                        pre + ".doclens.npy", "--ids", pre + ".ids.txt", "--out", idx2,
                        "--centroids", "64", "--threads", "2"], check=True, capture_output=True)
        # (searched with ColBERTv2's defaults: each build calibrates by measured CPU time,
        # so the two may store different search parameters for the same index)
        with tartan.Index(idx) as a, tartan.Index(idx2) as b:
            ra, sa = a.search(Q, k=10, tuned=False)
            rb, sb = b.search(Q, k=10, tuned=False)
            np.testing.assert_array_equal(ra, rb)
            np.testing.assert_array_equal(sa, sb)
        # .npy paths as build() input
        idx3 = os.path.join(self.tmp, "syn-npy-idx")
        tartan.build(idx3, pre + ".vectors.npy", pre + ".doclens.npy", pre + ".ids.txt",
                     centroids=64, threads=2)
        with tartan.Index(idx3) as c:
            rc, sc = c.search(Q, k=10, tuned=False)
            np.testing.assert_array_equal(ra, rc)


class TestThreads(Base):
    def test_threads_share_one_index(self):
        qs = self.queries(n=16)
        with tartan.Index(self.path) as ix:
            serial = [ix.search(q, k=5) for q in qs]
            errors, results = [], {}

            def worker(t):
                try:
                    for rep in range(20):
                        for i, q in enumerate(qs):
                            ids, scores = ix.search(q, k=5)
                            if list(ids) != list(serial[i][0]) or \
                                    not np.array_equal(scores, serial[i][1]):
                                errors.append((t, rep, i))
                    results[t] = True
                except Exception as e:  # pragma: no cover
                    errors.append(e)
            ths = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
            self.assertEqual(errors, [])
            self.assertEqual(len(results), 4)

    def test_close_while_threads_search(self):
        # searches running when close() (or a change's reopen) drops the snapshot finish
        # on it; later ones raise ValueError("closed"); nothing crashes or leaks a context
        qs = self.queries(n=4)
        ix = tartan.Index(self.path)
        errors, done = [], [0]

        def worker():
            try:
                while True:
                    for q in qs:
                        ix.search(q, k=3, mode="exhaustive")
                        ix.search(qs, k=3)
                    done[0] += 1
            except ValueError as e:
                if "closed" not in str(e):
                    errors.append(e)
            except Exception as e:  # pragma: no cover
                errors.append(e)
        ths = [threading.Thread(target=worker) for _ in range(3)]
        for t in ths:
            t.start()
        time.sleep(0.05)
        ix.reopen()
        time.sleep(0.05)
        ix.close()
        for t in ths:
            t.join()
        self.assertEqual(errors, [])
        self.assertTrue(ix.closed)

    def test_gil_released_during_batch_search(self):
        # a Python thread keeps counting while a long exhaustive batch search runs
        qs = self.queries(n=8)
        with tartan.Index(self.path) as ix:
            while True:  # a batch that takes at least 0.1 s on this machine
                t0 = time.perf_counter()
                ix.search(qs, k=10, mode="exhaustive", threads=1)
                if time.perf_counter() - t0 >= 0.1:
                    break
                qs = np.concatenate([qs, qs])
            stop = threading.Event()
            count = [0]

            def spin():
                while not stop.is_set():
                    count[0] += 1
            th = threading.Thread(target=spin)
            th.start()
            time.sleep(0.01)
            c0 = count[0]
            t0 = time.perf_counter()
            ix.search(qs, k=10, mode="exhaustive", threads=1)
            dt = time.perf_counter() - t0
            c1 = count[0]
            stop.set()
            th.join()
            # with the GIL held the counter could not move during the call
            self.assertGreater(c1 - c0, 1000, f"counter moved {c1 - c0} in {dt:.3f} s")


    @unittest.skipIf(SANITIZERS, "a 100,000-vector build; every build runs on the worker")
    def test_gil_released_during_build(self):
        x = np.random.default_rng(3).standard_normal((100000, 32), dtype=np.float32)
        stop = threading.Event()
        count = [0]

        def spin():
            while not stop.is_set():
                count[0] += 1
        th = threading.Thread(target=spin)
        th.start()
        try:
            time.sleep(0.01)
            c0 = count[0]
            tartan.build(os.path.join(self.tmp, "gil-build"), x, np.full(5000, 20), threads=1,
                         tune=False)
            c1 = count[0]
        finally:
            stop.set()
            th.join()
        self.assertGreater(c1 - c0, 1000)


class TestErrors(Base):
    def check(self, cls, status, pattern, fn, *a, **kw):
        with self.assertRaises(cls) as cm:
            fn(*a, **kw)
        e = cm.exception
        self.assertIsInstance(e, tartan.Error)
        self.assertEqual(e.status, status)
        self.assertRegex(str(e), pattern)
        self.assertEqual(e.message, str(e))
        return e

    def test_library_errors(self):
        d = os.path.join(self.tmp, "err")
        os.makedirs(d, exist_ok=True)
        e = self.check(tartan.ExistsError, -8, "already exists", tartan.build, self.path,
                       self.docs, centroids=8)
        self.assertIsInstance(e, FileExistsError)
        e = self.check(tartan.NotFoundError, -14, "nope", tartan.Index, os.path.join(d, "nope"))
        self.assertIsInstance(e, FileNotFoundError)
        self.check(tartan.DimensionError, -10, r"doclens sum to 10", tartan.build,
                   os.path.join(d, "a"), self.x[:12], np.array([4, 6]))
        bad = [dd.copy() for dd in self.docs[:50]]
        bad[7][2, 3] = np.nan
        self.check(tartan.BadValueError, -11, r"vector \d+ \(document 7\).*NaN", tartan.build,
                   os.path.join(d, "b"), bad, centroids=8)
        self.assertFalse(os.path.exists(os.path.join(d, "b")))
        self.check(tartan.ParseError, -15, "duplicate id 'x'", tartan.build,
                   os.path.join(d, "c"), self.docs[:3], ids=["x", "y", "x"], centroids=2)
        self.check(tartan.InvalidArgumentError, -1, "nbits", tartan.build, os.path.join(d, "n"),
                   self.docs[:50], nbits=5)
        self.check(tartan.InvalidArgumentError, -1, "nbits 3 needs the adaptive codec",
                   tartan.build, os.path.join(d, "n"), self.docs[:50], nbits=3, codec="per-dim")
        self.assertFalse(os.path.exists(os.path.join(d, "n")))
        self.check(tartan.NotFoundError, -14, "missing.npy", tartan.build, os.path.join(d, "f"),
                   os.path.join(d, "missing.npy"), os.path.join(d, "missing.doclens.npy"))
        with tartan.Index(self.path) as ix:
            q = self.docs[0].copy()
            q[1, 1] = np.inf
            self.check(tartan.BadValueError, -11, "query vector 1", ix.search, q)
            self.check(tartan.InvalidArgumentError, -1, "nprobe -1", ix.search, self.docs[0],
                       nprobe=-1)
            self.check(tartan.InvalidArgumentError, -1, "centroid_groups -2", ix.search,
                       self.docs[0], centroid_groups=-2)
            # an index without centroid groups scores every centroid whatever the option
            np.testing.assert_array_equal(ix.search(self.docs[0], centroid_groups=1)[1],
                                          ix.search(self.docs[0])[1])
        # a damaged index: the message names the file
        dmg = os.path.join(d, "damaged")
        shutil.copytree(self.path, dmg)
        with open(os.path.join(dmg, "ivf.tt"), "r+b") as f:
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xff]))
        self.check(tartan.CorruptError, -6, "ivf.tt", tartan.Index, dmg)

    def test_argument_errors(self):
        with tartan.Index(self.path) as ix:
            q = self.docs[0]
            self.check(tartan.UnsupportedError, -7, "int64 is not a floating", ix.search,
                       q.astype(np.int64))
            self.assertRaises(TypeError, ix.search, q.astype(np.int32))
            self.check(tartan.DimensionError, -10, "2-D", ix.search, q[0])
            self.check(tartan.DimensionError, -10, "dim 16, the index has dim 32", ix.search,
                       q[:, :16])
            self.check(tartan.BadValueError, -11, "empty", ix.search, q[:0])
            self.check(tartan.InvalidArgumentError, -1, "k must be", ix.search, q, k=0)
            self.assertRaisesRegex(TypeError, "unknown option 'nprobes'", ix.search, q,
                                   nprobes=2)
            self.assertRaisesRegex(ValueError, "'plaid', 'exhaustive', 'exact'", ix.search, q,
                                   mode="fast")
            self.assertRaisesRegex(TypeError, "option nprobe: expected an int", ix.search, q,
                                   nprobe=1.5)
            # non-contiguous and float64 are converted once, with the same results
            f = np.asfortranarray(q)
            self.assertFalse(f.flags.c_contiguous)
            np.testing.assert_array_equal(ix.search(f)[1], ix.search(q)[1])
            np.testing.assert_array_equal(ix.search(q.astype(np.float64))[1], ix.search(q)[1])
            h = q.astype(np.float16)
            np.testing.assert_array_equal(ix.search(h)[1], ix.search(h.astype(np.float32))[1])
        d = os.path.join(self.tmp, "arg")
        self.check(tartan.InvalidArgumentError, -1, "would be copied", tartan.build, d,
                   self.x[::2], self.lens, copy=False)
        self.check(tartan.InvalidArgumentError, -1, "would be copied", tartan.build, d,
                   [a.astype(np.float64) for a in self.docs], copy=False)
        self.check(tartan.BadValueError, -11, "document 1 has no vectors", tartan.build, d,
                   [self.docs[0], self.docs[1][:0]])
        self.check(tartan.DimensionError, -10, "expected a 2-D", tartan.build, d,
                   [self.docs[0], self.docs[1][0]])
        self.check(tartan.DimensionError, -10, "3-D", tartan.build, d, self.queries())
        self.check(tartan.InvalidArgumentError, -1, "needs doclens", tartan.build, d, self.x)
        self.check(tartan.UnsupportedError, -7, "not a floating", tartan.build, d,
                   [np.ones((3, 4), np.int32)])
        self.check(tartan.DimensionError, -10, "2 ids for 3 documents", tartan.build, d,
                   self.docs[:3], ids=["a", "b"])
        self.assertRaisesRegex(TypeError, "unknown option 'bits'", tartan.build, d, self.docs,
                               bits=2)
        self.assertFalse(os.path.exists(d))


@unittest.skipIf(SANITIZERS, "memory measures; run in the plain build")
class TestZeroCopy(Base):
    def test_float32_and_float16_not_copied(self):
        # NumPy reports its allocations to tracemalloc: a copy of the corpus would show
        # in the peak. Negative control: float64 input is converted (one float32 copy).
        rng = np.random.default_rng(5)
        n, dim = 60000, 64
        big = rng.standard_normal((n, dim)).astype(np.float32)  # 15 MiB
        lens = np.full(n // 20, 20, np.int64)
        size = big.nbytes
        for name, arr, copied in (("f32", big, False), ("f16", big.astype(np.float16), False),
                                  ("list", list(big.reshape(-1, 20, dim)), False),
                                  ("f64", big.astype(np.float64), True)):
            gc.collect()
            tracemalloc.start()
            try:
                if name == "list":
                    tartan.build(os.path.join(self.tmp, "zc-" + name), arr, centroids=64,
                                 threads=2, memory=64 << 20, tune=False)
                else:
                    tartan.build(os.path.join(self.tmp, "zc-" + name), arr, lens, centroids=64,
                                 threads=2, memory=64 << 20, tune=False)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            if copied:
                self.assertGreater(peak, size * 0.9, name)
            else:
                self.assertLess(peak, size * 0.05, f"{name}: traced peak {peak} bytes")

    def test_peak_rss_of_a_large_build(self):
        # In a fresh process: the build's peak RSS stays well below input + a copy.
        code = textwrap.dedent("""
            import resource, sys, numpy as np, tartan
            n, dim = 400000, 64
            x = np.random.default_rng(0).standard_normal((n, dim), dtype=np.float32)
            lens = np.full(n // 20, 20, np.int64)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            tartan.build(sys.argv[1], x, lens, centroids=256, threads=2, memory=64 << 20,
                         kmeans_iters=1, tune=False)
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            print(x.nbytes, before, after)
        """)
        out = subprocess.run([sys.executable, "-c", code, os.path.join(self.tmp, "rss")],
                             check=True, capture_output=True, text=True).stdout.split()
        size, before, after = map(int, out)
        # a copy of the 100 MiB input would add 100 MiB; the build's budget is 64 MiB
        self.assertLess(after - before, size * 0.5, f"peak grew by {after - before} bytes")


class TestRefcounts(Base):
    def test_no_growth_over_10000_calls(self):
        q = self.docs[3].copy()
        qs = self.queries(n=4)
        with tartan.Index(self.path) as ix:
            for _ in range(100):
                ix.search(q, k=5)
            rq, rqs, rix = sys.getrefcount(q), sys.getrefcount(qs), sys.getrefcount(ix)
            gc.collect()
            tracemalloc.start()
            snap0 = tracemalloc.get_traced_memory()[0]
            for i in range(1000 if SANITIZERS else 10000):
                ix.search(q, k=5)
                if i % 10 == 0:
                    ix.search(qs, k=5, as_dicts=True)
                    try:
                        ix.search(q[:, :3])
                    except tartan.DimensionError:
                        pass
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - snap0
            tracemalloc.stop()
            self.assertEqual(sys.getrefcount(q), rq)
            self.assertEqual(sys.getrefcount(qs), rqs)
            self.assertEqual(sys.getrefcount(ix), rix)
            self.assertLess(grown, 64 * 1024, f"{grown} bytes more after 10,000 calls")
        before = [sys.getrefcount(d) for d in self.docs[:20]]
        tartan.build(os.path.join(self.tmp, "rc"), self.docs[:20], centroids=4, threads=1)
        self.assertEqual([sys.getrefcount(d) for d in self.docs[:20]], before)


class TestChanges(Base):
    def test_add_delete_compact(self):
        d = os.path.join(self.tmp, "live")
        tartan.build(d, self.docs[:200], ids=self.ids[:200], centroids=32, threads=2)
        with tartan.Index(d) as ix:
            self.assertEqual(len(ix), 200)
            st = ix.add(self.docs[200:], ids=self.ids[200:])
            self.assertEqual(st["added"], len(self.docs) - 200)
            self.assertEqual(len(ix), len(self.docs))
            ids, _ = ix.search(self.docs[250], k=1, mode="exhaustive")
            self.assertEqual(ids[0], "doc250")
            with self.assertRaises(tartan.ExistsError):
                ix.add(self.docs[:1], ids=["doc5"])
            st = ix.delete(["doc250", "nosuch"])
            self.assertEqual((st["deleted"], st["unknown"]), (1, 1))
            self.assertEqual(len(ix), len(self.docs) - 1)
            ids, _ = ix.search(self.docs[250], k=5, mode="exhaustive")
            self.assertNotIn("doc250", list(ids))
            with self.assertRaises(tartan.NotFoundError):
                ix.delete(["nosuch"], strict=True)
            # Options compact does not use are refused, not ignored.
            for bad in ({"metadata": "m.jsonl"}, {"upsert": True}, {"pool_factor": 2}):
                with self.assertRaisesRegex(TypeError, "compact: unknown option"):
                    ix.compact(**bad)
            with self.assertRaisesRegex(TypeError, "add: unknown option 'retrain'"):
                ix.add(self.docs[:1], ids=["new"], retrain=True)
            with self.assertRaisesRegex(TypeError, "add: unknown option 'strict'"):
                ix.add(self.docs[:1], ids=["new"], strict=True)
            self.assertEqual(len(ix), len(self.docs) - 1)
            st = ix.compact()
            self.assertEqual(st["segments"], 1)
            self.assertEqual(ix.info()["num_docs"], len(self.docs) - 1)
            ids2, _ = ix.search(self.docs[250], k=5, mode="exhaustive")
            self.assertEqual(list(ids), list(ids2))


class TestEvaluate(unittest.TestCase):
    def test_hand_worked_values(self):
        qrels = {"q1": {"a": 1, "b": 2}, "q2": {"c": 1}}
        run = {"q1": {"b": 3.0, "x": 2.0, "a": 1.0}, "q2": {"y": 2.0, "c": 1.0}}
        ev = tartan.evaluate(qrels, run, ["nDCG@10", "MRR@10", "Recall@1", "P@2"])
        # q1: ranking b(2), x, a(1): DCG = 2/1 + 1/2 = 2.5; ideal 2 + 1/log2(3)
        n1 = 2.5 / (2 + 1 / np.log2(3))
        n2 = (1 / np.log2(3)) / 1.0
        self.assertEqual(ev.query_ids, ["q1", "q2"])
        np.testing.assert_allclose(ev.values["nDCG@10"], [n1, n2])
        self.assertAlmostEqual(ev["nDCG@10"], (n1 + n2) / 2)
        self.assertAlmostEqual(ev["MRR@10"], (1 + 0.5) / 2)
        np.testing.assert_allclose(ev.values["Recall@1"], [0.5, 0.0])
        self.assertAlmostEqual(ev["P@2"], (0.5 + 0.5) / 2)
        self.assertEqual(ev.per_query("MRR@10"), {"q1": 1.0, "q2": 0.5})
        self.assertEqual(ev.counts["queries"], 2)
        with tempfile.TemporaryDirectory() as t:
            with open(os.path.join(t, "qrels.tsv"), "w") as f:
                f.write("query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\t2\nq2\tc\t1\n")
            with open(os.path.join(t, "run"), "w") as f:
                f.write("q1 Q0 b 1 3 t\nq1 Q0 x 2 2 t\nq1 Q0 a 3 1 t\nq2 Q0 y 1 2 t\n"
                        "q2 Q0 c 2 1 t\n")
            ev2 = tartan.evaluate(os.path.join(t, "qrels.tsv"), os.path.join(t, "run"),
                                  "nDCG@10,MRR@10")
            self.assertAlmostEqual(ev2["nDCG@10"], ev["nDCG@10"])
            with open(os.path.join(t, "bad"), "w") as f:
                f.write("q1 Q0 b 1 3\n")
            with self.assertRaisesRegex(tartan.ParseError, "bad:1: expected 6 fields"):
                tartan.evaluate(os.path.join(t, "qrels.tsv"), os.path.join(t, "bad"))
        with self.assertRaisesRegex(tartan.InvalidArgumentError, "nDCH"):
            tartan.evaluate(qrels, run, ["nDCH@10"])

    def test_dict_inputs_checked(self):
        # qrels and runs as dicts share one walker: each wrong shape or value type is a
        # TypeError naming the input (and the query); a path that does not exist is the
        # library's NotFoundError
        qrels = {"q1": {"a": 1}}
        run = {"q1": {"a": 1.5}}
        for q, r, pattern in [
                ({"q1": {"a": 1.0}}, run, r"qrels\['q1'\]: a dict \{docid str: int relevance\}"),
                ({"q1": {"a": 2 ** 40}}, run, r"qrels\['q1'\]: .*int relevance"),
                ({"q1": {3: 1}}, run, r"qrels\['q1'\]"),
                ({"q1": [("a", 1)]}, run, r"qrels: a dict \{qid str: \{docid str: int"),
                ({1: {"a": 1}}, run, r"qrels: a dict \{qid str"),
                (qrels, {"q1": {"a": "high"}}, r"run\['q1'\]: a dict \{docid str: float score\}"),
                (qrels, {"q1": 3.0}, r"run: a dict \{qid str: \{docid str: float score"),
                ([("q1", "a", 1)], run, r"qrels: a path or a dict"),
                (qrels, 7, r"run: a path or a dict")]:
            with self.subTest(pattern=pattern):
                self.assertRaisesRegex(TypeError, pattern, tartan.evaluate, q, r, ["MRR@10"])
        # ints are scores too (PyFloat_AsDouble accepts them), bools are relevances
        ev = tartan.evaluate({"q1": {"a": True}}, {"q1": {"a": 2, "b": 3}}, ["MRR@10"])
        self.assertAlmostEqual(ev["MRR@10"], 0.5)
        with self.assertRaisesRegex(tartan.NotFoundError, "no-such-run"):
            tartan.evaluate(qrels, "/nonexistent/no-such-run", ["MRR@10"])

    def test_ttest_against_formula(self):
        rng = np.random.default_rng(2)
        a, b = rng.random(30), rng.random(30)
        t, p = tartan.ttest(a, b)
        d = a - b
        self.assertAlmostEqual(t, d.mean() / (d.std(ddof=1) / np.sqrt(len(d))), places=10)
        self.assertTrue(0 < p < 1)
        # hand-worked: d = (1, 2, 3): t = 2 / (1 / sqrt 3) = 2 sqrt 3, 2 dof:
        # p = 1 - |t| / sqrt(t^2 + 2) = 1 - sqrt(12/14)
        t, p = tartan.ttest([2, 3, 4], [1, 1, 1])
        self.assertAlmostEqual(t, 2 * np.sqrt(3))
        self.assertAlmostEqual(p, 1 - np.sqrt(12 / 14))
        self.assertEqual(tartan.ttest([1, 2], [1, 2]), (0.0, 1.0))
        self.assertRaises(tartan.InvalidArgumentError, tartan.ttest, [1], [2])
        self.assertRaises(tartan.BadValueError, tartan.ttest, [1, np.nan], [2, 3])
        self.assertRaises(ValueError, tartan.ttest, [1, 2, 3], [2, 3])


class TestProgress(Base):
    def test_progress_reports_and_stops(self):
        seen = []
        d = os.path.join(self.tmp, "prog")
        tartan.build(d, self.docs, centroids=32, threads=1,
                     progress=lambda ph, done, total: seen.append((ph, done, total)))
        phases = [p for p, _, _ in seen]
        self.assertIn("publish", phases)
        self.assertEqual(seen[-1], ("publish", 1, 1))
        for ph, done, total in seen:
            if total:
                self.assertLessEqual(done, total, ph)

        class Stop(Exception):
            pass

        def stop(ph, done, total):
            raise Stop(ph)
        # a build that takes well over the 50 ms between deliveries: the callable's
        # exception stops it, nothing is published
        d2 = os.path.join(self.tmp, "prog2")
        big = np.random.default_rng(1).standard_normal((200000, 32), dtype=np.float32)
        t0 = time.perf_counter()
        with self.assertRaises(Stop) as cm:
            tartan.build(d2, big, np.full(10000, 20), threads=1, progress=stop)
        self.assertNotEqual(str(cm.exception), "publish")
        self.assertLess(time.perf_counter() - t0, 5)
        self.assertFalse(os.path.exists(d2))
        self.assertEqual([f for f in os.listdir(self.tmp) if f.startswith("prog2")], [])
        self.assertRaises(TypeError, tartan.build, d2, self.docs, progress=3)


class TestInterrupt(unittest.TestCase):
    @unittest.skipIf(SANITIZERS, "a 600,000-vector build; under ASan the build's cancel flag "
                     "is tested by TestProgress (a raising progress callable sets it)")
    def test_ctrl_c_stops_a_build_cleanly(self):
        with tempfile.TemporaryDirectory() as t:
            out = os.path.join(t, "idx")
            code = textwrap.dedent("""
                import signal, sys, time, numpy as np, tartan
                # A process started in the background by a non-interactive shell (as a
                # CI runner may start the suite) inherits SIGINT ignored: take it back.
                signal.signal(signal.SIGINT, signal.default_int_handler)
                x = np.random.default_rng(0).standard_normal((600000, 64), dtype=np.float32)
                lens = np.full(30000, 20, np.int64)
                print("start", flush=True)
                t0 = time.perf_counter()
                try:
                    tartan.build(sys.argv[1], x, lens, threads=1, kmeans_iters=20)
                    print("finished", flush=True)
                except KeyboardInterrupt:
                    print("interrupted %.3f" % (time.perf_counter() - t0), flush=True)
            """)
            p = subprocess.Popen([sys.executable, "-c", code, out], stdout=subprocess.PIPE,
                                 text=True)
            self.assertEqual(p.stdout.readline().strip(), "start")
            time.sleep(0.5)
            t0 = time.perf_counter()
            p.send_signal(signal.SIGINT)
            line = p.stdout.readline().strip()
            p.wait(timeout=60)
            p.stdout.close()
            latency = time.perf_counter() - t0
            if line == "finished":
                self.skipTest("the build finished before the signal")
            self.assertTrue(line.startswith("interrupted"), line)
            self.assertLess(latency, 10)
            self.assertEqual(os.listdir(t), [], "the build left files behind")


if __name__ == "__main__":
    unittest.main()

"""Filtered search and metadata through the binding (doc/python.md, "Filters and
metadata"): every filtered result is checked against a model computed here in Python --
the allowed set from the metadata records this test wrote, the ranking from unfiltered
exhaustive search (all documents) or from MaxSim in NumPy over the kept originals."""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import warnings

import numpy as np

import tartan
from tartan.pylate import PLAID

LANGS = ["en", "fr", "de"]
BUILDDIR = os.environ.get("TT_BUILDDIR", "")
CLI = os.path.join(BUILDDIR, "tartan")
HAVE_CLI = bool(BUILDDIR) and os.access(CLI, os.X_OK)


def corpus(ndocs=240, dim=32, seed=7):
    """Clustered unit vectors (documents of 4..10 vectors) and one metadata record each:
    year 1980..2023, lang, a flag, a nullable real."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((16, dim))
    docs = []
    for _ in range(ndocs):
        n = int(rng.integers(4, 11))
        x = centres[rng.integers(0, 16, n)] + 0.5 * rng.standard_normal((n, dim))
        docs.append((x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32))
    meta = [{"year": 1980 + (i * 7) % 44, "lang": LANGS[i % 3], "flag": bool(i % 4 == 0),
             "weight": None if i % 5 == 0 else round(i / 8, 3)} for i in range(ndocs)]
    return docs, meta


def maxsim(q, d):
    return float((q @ d.T).max(axis=1).sum())


def tree_digest(path):
    """Names and contents of every file under path (to prove nothing changed)."""
    h = hashlib.sha256()
    for f in sorted(glob.glob(os.path.join(path, "**"), recursive=True)):
        if os.path.isfile(f):
            h.update(os.path.relpath(f, path).encode())
            with open(f, "rb") as fp:
                h.update(fp.read())
    return h.hexdigest()


class FilterBase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tartan-filter-")
        cls.docs, cls.meta = corpus()
        cls.ids = [f"p{i}" for i in range(len(cls.docs))]
        cls.path = os.path.join(cls.tmp, "idx")
        tartan.build(cls.path, cls.docs, ids=cls.ids, centroids=32, threads=2,
                     keep_originals="f16", metadata=cls.meta, tune=False)
        rng = np.random.default_rng(3)
        cls.qs = []
        for _ in range(6):
            d = cls.docs[int(rng.integers(0, len(cls.docs)))]
            q = d[rng.integers(0, len(d), 4)] + 0.2 * rng.standard_normal((4, d.shape[1]))
            cls.qs.append(q.astype(np.float32))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def allowed(self, pred):
        return {self.ids[i] for i, m in enumerate(self.meta) if pred(m)}

    def restricted(self, full_ids, full_scores, allowed, k):
        """The brute-force restriction: the unfiltered full ranking, allowed ids only."""
        keep = [(d, s) for d, s in zip(full_ids, full_scores) if d in allowed]
        return keep[:k]

    def assertHits(self, ids, scores, want):
        """The same documents in the same order; scores equal to float32 rounding (a
        filtered search sums a document's MaxSim in another order: last-bit changes)."""
        self.assertEqual(list(ids), [d for d, _ in want])
        np.testing.assert_allclose(scores, [s for _, s in want], rtol=2e-6)


class TestFilteredSearch(FilterBase):
    WHERE = [
        ("year > 2000", lambda m: m["year"] > 2000),
        ("year >= 1990 AND lang = 'en'", lambda m: m["year"] >= 1990 and m["lang"] == "en"),
        ("lang IN ('fr', 'de') OR flag", lambda m: m["lang"] in ("fr", "de") or m["flag"]),
        ("weight IS NULL", lambda m: m["weight"] is None),
        ("weight BETWEEN 3 AND 9.5", lambda m: m["weight"] is not None and 3 <= m["weight"] <= 9.5),
        ("lower(lang) LIKE 'D%' AND NOT flag", lambda m: m["lang"] == "de" and not m["flag"]),
        ("year < 1000", lambda m: False),
    ]

    def test_where_equals_restricted_exhaustive(self):
        n = len(self.docs)
        with tartan.Index(self.path) as ix:
            for expr, pred in self.WHERE:
                allowed = self.allowed(pred)
                for qi, q in enumerate(self.qs):
                    with self.subTest(where=expr, query=qi):
                        fids, fsc = ix.search(q, k=n, mode="exhaustive")
                        want = self.restricted(fids, fsc, allowed, 10)
                        ids, scores = ix.search(q, k=10, mode="exhaustive", where=expr)
                        self.assertHits(ids, scores, want)
                        self.assertEqual(len(ids), min(10, len(allowed)))

    def test_exact_mode_is_numpy_maxsim_over_allowed(self):
        # fully independent of the library's ranking: MaxSim over the float16 originals
        allowed = self.allowed(lambda m: m["year"] > 2000 and m["lang"] != "fr")
        with tartan.Index(self.path) as ix:
            for q in self.qs:
                ids, scores = ix.search(q, k=8, mode="exact",
                                        where="year > 2000 AND lang <> 'fr'")
                ref = sorted(((maxsim(q, d.astype(np.float16).astype(np.float32)), self.ids[i])
                              for i, d in enumerate(self.docs) if self.ids[i] in allowed),
                             reverse=True)[:8]
                self.assertEqual(list(ids), [i for _, i in ref])
                np.testing.assert_allclose(scores, [s for s, _ in ref], rtol=1e-4)

    def test_plaid_returns_only_allowed(self):
        allowed = self.allowed(lambda m: m["lang"] == "de")
        with tartan.Index(self.path) as ix:
            for q in self.qs:
                ids, _ = ix.search(q, k=10, where="lang = 'de'")
                self.assertTrue(set(ids) <= allowed)
                self.assertEqual(len(ids), 10)
                # the direct plan with every allowed document scored is exhaustive's order
                ids2, s2 = ix.search(q, k=10, where="lang = 'de'", filter_direct_max=10 ** 6,
                                     ndocs=4096)
                full = ix.search(q, k=len(self.docs), mode="exhaustive")
                self.assertHits(ids2, s2, self.restricted(*full, allowed, 10))

    def test_filter_ids_with_unknown_ids(self):
        rng = np.random.default_rng(11)
        chosen = [self.ids[i] for i in rng.choice(len(self.ids), 25, replace=False)]
        given = chosen + ["nope-1", "nope-2", chosen[0], "nope-1"]
        allowed = set(chosen)
        with tartan.Index(self.path) as ix:
            for q in self.qs:
                full = ix.search(q, k=len(self.docs), mode="exhaustive")
                with warnings.catch_warnings(record=True) as w:
                    warnings.simplefilter("always")
                    ids, scores = ix.search(q, k=7, mode="exhaustive", filter_ids=given)
                self.assertHits(ids, scores, self.restricted(*full, allowed, 7))
                self.assertEqual(len(w), 1)
                self.assertIs(w[0].category, tartan.FilterWarning)
                # as the CLI counts them: entries given, distinct unknown ones
                self.assertEqual(str(w[0].message),
                                 "filter_ids: 29 ids, 2 of them name no live document")
                self.assertEqual(w[0].filename, __file__)
            f = ix.filter(ids=given)
            self.assertEqual((f.allowed, f.unknown, f.num_ids, len(f)), (25, 2, 29, 25))
            self.assertEqual(ix.doc_ids(f.rows()), [i for i in self.ids if i in allowed])
            # int ids are str()-converted like build's; all known: no warning
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                ix.search(self.qs[0], k=3, filter_ids=chosen)

    def test_where_and_ids_intersect(self):
        chosen = set(self.ids[::3])
        allowed = chosen & self.allowed(lambda m: m["year"] > 2005)
        with tartan.Index(self.path) as ix:
            f = ix.filter(where="year > 2005", ids=sorted(chosen))
            self.assertEqual(set(ix.doc_ids(f.rows())), allowed)
            q = self.qs[1]
            full = ix.search(q, k=len(self.docs), mode="exhaustive")
            ids, scores = ix.search(q, k=6, mode="exhaustive", where="year > 2005",
                                    filter_ids=sorted(chosen))
            self.assertHits(ids, scores, self.restricted(*full, allowed, 6))

    def test_batch_and_reused_filter(self):
        allowed = self.allowed(lambda m: m["flag"] or m["year"] < 1990)
        qs = np.stack(self.qs)
        with tartan.Index(self.path) as ix:
            f = ix.filter(where="flag OR year < 1990")
            self.assertEqual(set(ix.doc_ids(f.rows())), allowed)
            for mode in ("exhaustive", "plaid"):
                bids, bsc = ix.search(qs, k=9, mode=mode, filter=f, threads=2)
                lids, lsc = ix.search(list(qs), k=9, mode=mode, where="flag OR year < 1990")
                np.testing.assert_array_equal(bids, lids)
                np.testing.assert_array_equal(bsc, lsc)
                for i, q in enumerate(qs):
                    one, s1 = ix.search(q, k=9, mode=mode, filter=f)
                    self.assertEqual(list(one), list(bids[i]))
                    np.testing.assert_array_equal(s1, bsc[i])
                    self.assertTrue(set(one) <= allowed)
                    if mode == "exhaustive":
                        full = ix.search(q, k=len(self.docs), mode="exhaustive")
                        self.assertHits(one, s1, self.restricted(*full, allowed, 9))
            # as dicts with each hit's metadata, the records this test wrote
            hits = ix.search(qs, k=4, filter=f, as_dicts=True, with_metadata=True)
            for row in hits:
                for h in row:
                    self.assertEqual(h["metadata"], self.meta[self.ids.index(h["id"])])

    @unittest.skipUnless(HAVE_CLI, "needs TT_BUILDDIR with the tartan CLI")
    def test_identical_to_cli(self):
        # the same index (built from Python with metadata=) and queries, filtered by
        # `tartan search --where --filter-ids` and by search(where=, filter_ids=)
        qpath = os.path.join(self.tmp, "q.npy")
        np.save(qpath, np.stack(self.qs))
        qids = [f"q{i}" for i in range(len(self.qs))]
        with open(os.path.join(self.tmp, "qids.txt"), "w") as f:
            f.write("\n".join(qids) + "\n")
        allow = self.ids[::2] + ["ghost"]
        with open(os.path.join(self.tmp, "allow.txt"), "w") as f:
            f.write("\n".join(allow) + "\n")
        where = "year >= 1995 AND (lang = 'en' OR flag)"
        for mode in ("plaid", "exhaustive"):
            run = os.path.join(self.tmp, f"cli-{mode}.run")
            p = subprocess.run([CLI, "search", "--index", self.path, "--queries", qpath,
                                "--query-ids", os.path.join(self.tmp, "qids.txt"), "--k", "10",
                                "--out", run, "--mode", mode, "--where", where, "--filter-ids",
                                os.path.join(self.tmp, "allow.txt")],
                               check=True, capture_output=True, text=True)
            self.assertIn(f"{len(allow)} ids, 1 of them name no live document", p.stderr)
            cli = {}
            with open(run) as f:
                for line in f:
                    qid, _, doc, _, score, _ = line.split()
                    cli.setdefault(qid, []).append((doc, np.float32(score)))
            with tartan.Index(self.path) as ix, warnings.catch_warnings():
                warnings.simplefilter("ignore", tartan.FilterWarning)
                bids, bsc = ix.search(np.stack(self.qs), k=10, mode=mode, where=where,
                                      filter_ids=allow, threads=2)
                for i, qid in enumerate(qids):
                    got = [(d, s) for d, s in zip(bids[i], bsc[i]) if d is not None]
                    self.assertEqual(got, cli.get(qid, []), f"{mode} {qid}")

    def test_empty_filter_gives_no_results(self):
        with tartan.Index(self.path) as ix:
            ids, scores = ix.search(self.qs[0], k=5, where="year < 0")
            self.assertEqual((len(ids), len(scores)), (0, 0))
            bids, bsc = ix.search(np.stack(self.qs[:2]), k=3, filter_ids=[])
            self.assertTrue(all(i is None for i in bids.reshape(-1)))
            self.assertTrue(np.all(np.isneginf(bsc)))


class TestMetadata(FilterBase):
    def test_read_back(self):
        with tartan.Index(self.path) as ix:
            self.assertEqual(ix.metadata_columns(), {"year": "integer", "lang": "text",
                                                     "flag": "boolean", "weight": "real"})
            got = ix.metadata(["p3", "missing", "p0", "p17"])
            self.assertEqual(got, [self.meta[3], None, self.meta[0], self.meta[17]])
            self.assertEqual(ix.metadata(rows=np.arange(len(self.docs))), self.meta)
            self.assertRaises(IndexError, ix.metadata, rows=[len(self.docs)])
            self.assertRaises(IndexError, ix.metadata, rows=[-1])

    def test_jsonl_path_keyed_by_id_and_changes(self):
        d = os.path.join(self.tmp, "keyed")
        docs = self.docs[:60]
        ids = self.ids[:60]
        order = np.random.default_rng(2).permutation(60)
        path = os.path.join(self.tmp, "meta.jsonl")
        with open(path, "w") as f:
            for i in order:  # any order when keyed by "id"
                f.write(json.dumps({"id": ids[i], "n": int(i), "tag": f"t{i % 4}"}) + "\n")
        tartan.build(d, docs, ids=ids, centroids=8, threads=1, metadata=path, tune=False)
        with tartan.Index(d) as ix:
            self.assertEqual(ix.metadata(ids), [{"id": ids[i], "n": i, "tag": f"t{i % 4}"}
                                                for i in range(60)])
            f_old = ix.filter(where="n < 10")
            # add with metadata (a list), then without (rows of nulls); delete drops rows
            more = self.docs[60:70]
            ix.add(more, ids=self.ids[60:70], threads=1,
                   metadata=[{"n": 100 + j, "tag": "new"} for j in range(10)])
            self.assertEqual(ix.metadata(["p61"]), [{"id": None, "n": 101, "tag": "new"}])
            ix.add(self.docs[70:72], ids=self.ids[70:72], threads=1)
            self.assertEqual(ix.metadata(["p70"]), [{"id": None, "n": None, "tag": None}])
            ix.delete(["p5"])
            self.assertEqual(ix.metadata(["p5", "p6"])[0], None)
            f = ix.filter(where="tag = 't1'")
            self.assertEqual(set(ix.doc_ids(f.rows())),
                             {ids[i] for i in range(60) if i % 4 == 1 and i != 5})
            # a filter made before the changes is over old rows: refused, not misapplied
            with self.assertRaisesRegex(tartan.InvalidArgumentError, "make the filter again"):
                ix.search(self.qs[0], k=3, filter=f_old)
            ix.compact()
            self.assertEqual(set(ix.doc_ids(ix.filter(where="tag = 't1'").rows())),
                             {ids[i] for i in range(60) if i % 4 == 1 and i != 5})

    def test_no_metadata(self):
        d = os.path.join(self.tmp, "plain")
        tartan.build(d, self.docs[:40], centroids=8, threads=1, tune=False)
        with tartan.Index(d) as ix:
            self.assertEqual(ix.metadata_columns(), {})
            with self.assertRaisesRegex(tartan.NotFoundError, "has no metadata") as cm:
                ix.search(self.qs[0], where="year > 1")
            self.assertEqual(cm.exception.status, -14)
            self.assertRaises(tartan.NotFoundError, ix.metadata, ["0"])
            # ids filters need no metadata
            ids, _ = ix.search(self.qs[0], k=40, mode="exhaustive", filter_ids=["3", "9"])
            self.assertEqual(sorted(ids), ["3", "9"])


class TestFilterErrors(FilterBase):
    def check(self, cls, status, pattern, fn, *a, **kw):
        with self.assertRaises(cls) as cm:
            fn(*a, **kw)
        e = cm.exception
        self.assertIsInstance(e, tartan.Error)
        self.assertEqual(e.status, status)
        self.assertRegex(str(e), pattern)
        self.assertEqual(e.message, str(e))

    def test_bad_and_hostile_statements(self):
        before = tree_digest(self.path)
        files = sorted(os.listdir(self.path))
        with tartan.Index(self.path) as ix:
            q = self.qs[0]
            E = tartan.InvalidArgumentError
            self.check(E, -1, "no such column: yeer", ix.search, q, where="yeer > 3")
            self.check(E, -1, "syntax error", ix.search, q, where="year >")
            self.check(E, -1, "more than one SQL statement", ix.search, q,
                       where="1); DROP TABLE meta; --")
            self.check(E, -1, "more than one SQL statement", ix.search, q,
                       where="1); DELETE FROM meta; --")
            self.check(E, -1, "not authorized", ix.search, q,
                       where="year IN (SELECT 1 FROM pragma_table_info('meta'))")
            self.check(E, -1, "load_extension", ix.filter, where="load_extension('x')")
            attach = os.path.join(self.tmp, "x.db")
            self.check(E, -1, r"^filter '1\); ATTACH .*more than one SQL statement", ix.filter,
                       where=f"1); ATTACH DATABASE '{attach}' AS x; --")
            self.assertFalse(os.path.exists(attach))
            self.check(E, -1, "refused: a filter may only read", ix.filter,
                       where="row IN (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                             "FROM c) SELECT x FROM c)")
            self.check(E, -1, "NUL", ix.filter, where="year > 1\0; DELETE FROM meta")
            self.check(E, -1, "give where=", ix.filter)
            self.check(E, -1, "not both", ix.search, q, where="year > 1",
                       filter=ix.filter(where="year > 1"))
            self.check(E, -1, "with_metadata=True needs as_dicts", ix.search, q,
                       where="year > 1", with_metadata=True)
            self.assertRaises(TypeError, ix.search, q, where=3)
            self.assertRaises(TypeError, ix.search, q, filter="year > 1")
            self.check(E, -1, "single str", ix.search, q, filter_ids="p1")
            self.check(tartan.UnsupportedError, -7, "float", ix.search, q, filter_ids=[1.5])
            self.assertRaises(TypeError, tartan.Filter)
            # the index still searches, and no byte or file of it changed
            self.assertEqual(len(ix.search(q, k=3, where="year > 2000")[0]), 3)
        self.assertEqual(sorted(os.listdir(self.path)), files)
        self.assertEqual(tree_digest(self.path), before)

    def test_bad_metadata_lists(self):
        d = os.path.join(self.tmp, "badmeta")
        docs = self.docs[:4]
        pattern_tmp = os.path.join(tempfile.gettempdir(), "tartan-metadata-*")
        temps = set(glob.glob(pattern_tmp))
        cases = [
            (tartan.BadValueError, -11, r"^metadata\[2\]: member 'a' is a text",
             [{"a": 1}, {"a": 2}, {"a": "x"}, {"a": 4}]),
            (tartan.InvalidArgumentError, -1, r"^metadata\[1\]: .*NaN|^metadata\[1\]: Out of range",
             [{"a": 1.0}, {"a": float("nan")}, {}, {}]),
            (tartan.InvalidArgumentError, -1, r"^metadata\[3\]: expected a dict, got list",
             [{}, {}, {}, [1]]),
            (tartan.InvalidArgumentError, -1, r"^metadata\[0\]: .*set",
             [{"a": {1, 2}}, {}, {}, {}]),
            (tartan.Error, None, r"^metadata\[1\]: .*(array|object)",
             [{"a": 1}, {"a": [1, 2]}, {}, {}]),
            (tartan.Error, None, r"metadata: 3 lines for 4 documents", [{}, {}, {}]),
            (tartan.InvalidArgumentError, -1, "sequence of dicts", {"a": 1}),
        ]
        for cls, status, pattern, meta in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaises(cls) as cm:
                    tartan.build(d, docs, centroids=2, threads=1, tune=False, metadata=meta)
                self.assertRegex(str(cm.exception), pattern)
                if status is not None:
                    self.assertEqual(cm.exception.status, status)
                self.assertNotRegex(str(cm.exception), "tartan-metadata-")
                self.assertFalse(os.path.exists(d))
        # NumPy scalars are written as their values
        tartan.build(d, docs, centroids=2, threads=1, tune=False,
                     metadata=[{"a": np.int64(i), "b": np.float32(0.5), "c": np.bool_(i % 2)}
                               for i in range(4)])
        with tartan.Index(d) as ix:
            self.assertEqual(ix.metadata(rows=[3]), [{"a": 3, "b": 0.5, "c": True}])
        # the temporary JSON Lines files are gone, failed or not
        self.assertEqual(set(glob.glob(pattern_tmp)) - temps, set())


class TestPyLateSubset(unittest.TestCase):
    """subset= as PyLate's PLAID takes it (pylate/indexes/plaid.py, fast_plaid.py):
    one list of document ids for every query, or a list of lists (one per query);
    ids not in the index are skipped."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tartan-subset-")
        cls.docs, _ = corpus(ndocs=90, dim=24, seed=5)
        cls.ids = [f"document_id_{i}" for i in range(90)]
        cls.index = PLAID(index_folder=cls.tmp, index_name="colbert", override=True,
                          search_options={"mode": "exact"},
                          build_options={"keep_originals": "f16", "centroids": 16})
        cls.index.add_documents(documents_ids=cls.ids, documents_embeddings=cls.docs)
        cls.qs = [cls.docs[i][:4] + 0.05 for i in (3, 40, 77)]

    @classmethod
    def tearDownClass(cls):
        cls.index.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def ref(self, q, subset, k):
        allowed = set(subset)
        r = sorted(((maxsim(q, d.astype(np.float16).astype(np.float32)), self.ids[i])
                    for i, d in enumerate(self.docs) if self.ids[i] in allowed), reverse=True)
        return [i for _, i in r[:k]]

    def test_one_list_for_all_queries(self):
        subset = [self.ids[i] for i in range(0, 90, 4)]
        res = self.index(self.qs, k=5, subset=subset)
        self.assertEqual(len(res), 3)
        for q, r in zip(self.qs, res):
            self.assertEqual([h["id"] for h in r], self.ref(q, subset, 5))
            self.assertEqual(set(r[0]), {"id", "score"})
        # one (nq, dim) array is one query
        one = self.index(self.qs[0], k=2, subset=subset)
        self.assertEqual([h["id"] for h in one[0]], self.ref(self.qs[0], subset, 2))

    def test_one_list_per_query(self):
        subsets = [self.ids[:10], self.ids[30:33] + ["not-there"], self.ids[:10]]
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            res = self.index(np.stack(self.qs), k=4, subset=subsets)
        for q, s, r in zip(self.qs, subsets, res):
            self.assertEqual([h["id"] for h in r], self.ref(q, s, 4))
        self.assertEqual(len(res[1]), 3)  # three known ids
        self.assertEqual([x.category for x in w], [tartan.FilterWarning])
        self.assertEqual(str(w[0].message),
                         "subset: 14 ids, 1 of them name no document of the index (skipped)")
        # an empty list: no results (for all, or for that query)
        self.assertEqual(self.index(self.qs, k=3, subset=[]), [[], [], []])
        res = self.index(self.qs[:2], k=3, subset=[[], self.ids[:5]])
        self.assertEqual(res[0], [])
        self.assertEqual([h["id"] for h in res[1]], self.ref(self.qs[1], self.ids[:5], 3))
        with self.assertRaisesRegex(ValueError, "2 lists for 3 queries"):
            self.index(self.qs, k=3, subset=[self.ids[:3], self.ids[:3]])
        self.assertRaises(TypeError, self.index, self.qs, k=3, subset="document_id_1")


if __name__ == "__main__":
    unittest.main()

"""The PyLate index contract, tested against a stand-in for pylate.retrieve.ColBERT written
from PyLate's documented behaviour (PyLate itself cannot be installed here):

  * retrieve.ColBERT(index=...) keeps the index; retrieve(queries_embeddings, k, k_token,
    device, batch_size, subset) on a PLAID-style index returns
    index(queries_embeddings=..., k=k, subset=subset) as it is;
  * index.add_documents(documents_ids=..., documents_embeddings=...) returns the index;
    documents_ids may be a list of str or a range; embeddings a list of (n_i, dim)
    arrays (model.encode(..., is_query=False));
  * index(queries_embeddings, k) returns one list per query of {"id", "score"} dicts,
    best first; one (nq, dim) array is one query (PyLate's reshape_embeddings);
  * index.remove_documents(documents_ids) returns the index and the documents are gone;
  * index(queries_embeddings, k, subset) restricts each query to subset: one list of ids
    for all queries or one list per query (PyLate's PLAID, fast-plaid backend).
"""
import shutil
import tempfile
import unittest

import numpy as np

import tartan
from tartan.pylate import PLAID


class ColBERT:
    """Stand-in for pylate.retrieve.ColBERT (PLAID branch of retrieve)."""

    def __init__(self, index):
        self.index = index

    def retrieve(self, queries_embeddings, k=10, k_token=100, device=None, batch_size=50,
                 subset=None):
        return self.index(queries_embeddings=queries_embeddings, k=k, subset=subset)


def encode(n, dim=24, seed=0):
    """Stand-in for model.encode(is_query=False): a list of (n_i, dim) float32 arrays."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = rng.standard_normal((int(rng.integers(5, 15)), dim)).astype(np.float32)
        out.append(a / np.linalg.norm(a, axis=1, keepdims=True))
    return out


class TestPyLateContract(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tartan-pylate-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_retriever_round_trip(self):
        docs = encode(120)
        ids = [f"document_id_{i}" for i in range(120)]
        index = PLAID(index_folder=self.tmp, index_name="colbert", override=True, nbits=2)
        self.assertIs(index.add_documents(documents_ids=ids, documents_embeddings=docs), index)
        retriever = ColBERT(index=index)
        queries = [docs[3][:4], docs[77][:6]]
        results = retriever.retrieve(queries_embeddings=queries, k=5)
        self.assertIsInstance(results, list)
        self.assertEqual(len(results), 2)
        for res, want in zip(results, ["document_id_3", "document_id_77"]):
            self.assertEqual(len(res), 5)
            self.assertEqual(set(res[0]), {"id", "score"})
            self.assertIsInstance(res[0]["id"], str)
            self.assertIsInstance(res[0]["score"], float)
            self.assertEqual(res[0]["id"], want)
            scores = [r["score"] for r in res]
            self.assertEqual(scores, sorted(scores, reverse=True))
        # one (nq, dim) array is one query
        one = retriever.retrieve(queries_embeddings=docs[10][:3], k=2)
        self.assertEqual(len(one), 1)
        self.assertEqual(one[0][0]["id"], "document_id_10")
        # a padded 3-D batch works like the list
        batch = np.stack([docs[3][:4], docs[77][:4]])
        self.assertEqual([r[0]["id"] for r in retriever.retrieve(batch, k=1)],
                         ["document_id_3", "document_id_77"])
        # more documents later, ids as a range (PyLate's docstring does that)
        more = encode(30, seed=1)
        index.add_documents(documents_ids=range(1000, 1030), documents_embeddings=more)
        self.assertEqual(len(index), 150)
        self.assertEqual(retriever.retrieve([more[5][:5]], k=1)[0][0]["id"], "1005")
        # removal
        self.assertIs(index.remove_documents(["document_id_3"]), index)
        res = retriever.retrieve([docs[3][:4]], k=10)[0]
        self.assertNotIn("document_id_3", [r["id"] for r in res])
        self.assertEqual(len(index), 149)
        # subset= (test_filters.TestPyLateSubset has the rest)
        with self.assertWarnsRegex(tartan.FilterWarning, "3 ids, 1 of them name no document"):
            res = retriever.retrieve([docs[3][:4], docs[8][:4]], k=3,
                                     subset=["document_id_4", "document_id_3", "1001"])
        self.assertEqual([sorted(h["id"] for h in r) for r in res],
                         [["1001", "document_id_4"]] * 2)
        with self.assertRaises(tartan.ExistsError):
            index.add_documents(documents_ids=["document_id_5"], documents_embeddings=[docs[5]])
        index.close()
        # reopening without override keeps the documents; override replaces them
        again = PLAID(index_folder=self.tmp, index_name="colbert")
        self.assertEqual(len(again), 149)
        self.assertEqual(ColBERT(again).retrieve([more[5][:5]], k=1)[0][0]["id"], "1005")
        again.close()
        fresh = PLAID(index_folder=self.tmp, index_name="colbert", override=True)
        fresh.add_documents(documents_ids=["a", "b", "c"] + [f"x{i}" for i in range(40)],
                            documents_embeddings=encode(43, seed=2))
        self.assertEqual(len(fresh), 43)
        fresh.close()

    def test_scores_are_maxsim(self):
        # exhaustive search through the drop-in scores like PyLate's colbert_scores
        docs = encode(60, seed=4)
        index = PLAID(index_folder=self.tmp, index_name="ex", override=True,
                      search_options={"mode": "exhaustive"},
                      build_options={"keep_originals": "f16"})
        index.add_documents(documents_ids=[str(i) for i in range(60)], documents_embeddings=docs)
        q = docs[9][:4] + 0.05
        res = index(q, k=60)[0]
        self.assertEqual(len(res), 60)
        exact = PLAID(index_folder=self.tmp, index_name="ex", search_options={"mode": "exact"})
        ex = exact(q, k=3)[0]
        ref = sorted(((float((q @ d.astype(np.float16).astype(np.float32).T).max(1).sum()),
                       str(i)) for i, d in enumerate(docs)), reverse=True)[:3]
        self.assertEqual([r["id"] for r in ex], [i for _, i in ref])
        np.testing.assert_allclose([r["score"] for r in ex], [s for s, _ in ref], rtol=1e-4)
        index.close()
        exact.close()


if __name__ == "__main__":
    unittest.main()

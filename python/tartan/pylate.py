"""A drop-in for PyLate's index objects (pylate.indexes.PLAID / Voyager's interface).

    from tartan.pylate import PLAID
    index = PLAID(index_folder="pylate-index", index_name="index", override=True)
    index.add_documents(documents_ids=ids, documents_embeddings=model.encode(docs, is_query=False))
    retriever = pylate.retrieve.ColBERT(index=index)      # unchanged PyLate code
    results = retriever.retrieve(queries_embeddings=model.encode(qs, is_query=True), k=10)

What PyLate's retriever calls, with PyLate's behaviour: add_documents(documents_ids,
documents_embeddings) returns the index (the first call builds the index, later ones
add a segment; an id added twice raises tartan.ExistsError); remove_documents(ids)
returns the index; index(queries_embeddings, k=10) returns, per query, a list of
{"id": str, "score": float}, best first. queries_embeddings is one (nq, dim) array (one
query), an (n, nq, dim) array or a list of arrays; numpy arrays or torch tensors.
Document ids are kept as str (ints are converted with str(), as PyLate's stores do).

subset= restricts the search as PyLate's PLAID does: one list of document ids for every
query, or a list of lists (one per query); an empty list gives no results. Ids that name
no document are skipped, as PyLate skips them, and counted in a tartan.FilterWarning.
The restriction is a tartan filter (Index.filter(ids=...)): queries with the same
subset are searched as one batch.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Dict, List, Optional

import numpy as np

from . import FilterWarning, Index, build

__all__ = ["PLAID"]


class PLAID:
    """PyLate-compatible index over tartan. Parameters as PyLate's PLAID where they mean
    the same: index_folder/index_name (the index is index_folder/index_name), override
    (replace an existing index at the first add_documents), nbits (default 2 here;
    PyLate's fast-plaid default is 4), kmeans_niters, max_points_per_centroid. Search
    parameters: n_ivf_probe -> nprobe, n_full_scores -> ndocs (None: tartan's defaults
    by k). Other tartan build/search options go in build_options / search_options."""

    def __init__(self, index_folder: str = "indexes", index_name: str = "colbert",
                 override: bool = False, nbits: int = 2, kmeans_niters: int = 4,
                 max_points_per_centroid: int = 256, n_ivf_probe: Optional[int] = None,
                 n_full_scores: Optional[int] = None, threads: int = 0,
                 build_options: Optional[Dict[str, Any]] = None,
                 search_options: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        self.path = os.path.join(index_folder, index_name)
        self.override = override
        self.threads = threads
        self.build_options = dict(nbits=nbits, kmeans_iters=kmeans_niters,
                                  max_train_per_centroid=max_points_per_centroid)
        self.build_options.update(build_options or {})
        self.search_options: Dict[str, Any] = {}
        if n_ivf_probe is not None:
            self.search_options["nprobe"] = n_ivf_probe
        if n_full_scores is not None:
            self.search_options["ndocs"] = n_full_scores
        self.search_options.update(search_options or {})
        self._index: Optional[Index] = None
        # With override an existing index is replaced at the first add_documents
        # (force=True: atomically, and only if its directory holds nothing else).
        if not override and os.path.isdir(self.path) and os.listdir(self.path):
            self._index = Index(self.path)
        os.makedirs(index_folder, exist_ok=True)

    # PyLate passes ids as a str, a list, or a range
    @staticmethod
    def _ids(documents_ids: Any) -> List[str]:
        if isinstance(documents_ids, (str, int, np.integer)):
            return [str(documents_ids)]
        return [str(i) for i in documents_ids]

    @staticmethod
    def _docs(documents_embeddings: Any) -> List[Any]:
        if isinstance(documents_embeddings, np.ndarray) and documents_embeddings.ndim == 2:
            return [documents_embeddings]
        return list(documents_embeddings)

    def add_documents(self, documents_ids: Any, documents_embeddings: Any, **kwargs: Any) -> "PLAID":
        ids = self._ids(documents_ids)
        docs = self._docs(documents_embeddings)
        if self._index is None:
            build(self.path, docs, ids=ids, force=self.override, threads=self.threads,
                  **self.build_options)
            self._index = Index(self.path)
        else:
            self._index.add(docs, ids=ids, threads=self.threads)
        return self

    def remove_documents(self, documents_ids: Any) -> "PLAID":
        if self._index is not None:
            self._index.delete(self._ids(documents_ids))
        return self

    def __call__(self, queries_embeddings: Any, k: int = 10, subset: Any = None,
                 **kwargs: Any) -> List[List[Dict[str, Any]]]:
        if self._index is None:
            raise ValueError(f"tartan.pylate.PLAID: no documents in {self.path} yet "
                             f"(call add_documents first)")
        q = queries_embeddings
        if hasattr(q, "detach") and hasattr(q, "cpu"):
            q = q.detach().cpu().numpy()
        if isinstance(q, np.ndarray) and q.ndim == 2:
            q = q[np.newaxis]  # one query, as PyLate's reshape_embeddings does
        if subset is None:
            return self._index.search(q, k=k, as_dicts=True, threads=self.threads,
                                      **self.search_options)
        queries = [qi.detach().cpu().numpy() if hasattr(qi, "detach") else qi for qi in q]
        return self._search_subsets(queries, k, self._subsets(subset, len(queries)))

    @staticmethod
    def _is_list(x: Any) -> bool:
        return isinstance(x, (list, tuple, range, set, frozenset, np.ndarray))

    def _subsets(self, subset: Any, nq: int) -> List[tuple]:
        """One tuple of str ids per query, from PyLate's subset (one list for every query,
        or one list per query)."""
        if not self._is_list(subset):
            raise TypeError(f"subset: expected a list of document ids or a list of lists, "
                            f"got {type(subset).__name__}")
        subset = list(subset)
        if subset and self._is_list(subset[0]):
            if len(subset) != nq:
                raise ValueError(f"subset: {len(subset)} lists for {nq} queries (one list of "
                                 f"ids per query, or one list for all)")
            return [tuple(self._ids(s)) for s in subset]
        return [tuple(self._ids(subset))] * nq

    def _search_subsets(self, queries: List[Any], k: int,
                        subsets: List[tuple]) -> List[List[Dict[str, Any]]]:
        groups: Dict[tuple, List[int]] = {}
        for i, s in enumerate(subsets):
            groups.setdefault(s, []).append(i)
        out: List[List[Dict[str, Any]]] = [[] for _ in queries]
        given = unknown = 0
        for ids, members in groups.items():
            if not ids:
                continue  # an empty subset: no results, as PyLate gives
            f = self._index.filter(ids=list(ids))
            given += f.num_ids
            unknown += f.unknown
            res = self._index.search([queries[i] for i in members], k=k, as_dicts=True,
                                     threads=self.threads, filter=f, **self.search_options)
            for i, r in zip(members, res):
                out[i] = r
        if unknown:
            warnings.warn(f"subset: {given} ids, {unknown} of them name no document of the "
                          f"index (skipped)", FilterWarning, stacklevel=3)
        return out

    def __len__(self) -> int:
        return 0 if self._index is None else len(self._index)

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None

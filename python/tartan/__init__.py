"""tartan: late-interaction (ColBERT/PLAID-style) retrieval over compressed,
disk-resident indexes, from Python.

    import numpy as np, tartan
    docs = [np.random.rand(30, 128).astype(np.float32) for _ in range(1000)]
    tartan.build("idx", docs, ids=[f"d{i}" for i in range(1000)], nbits=2,
                 metadata=[{"year": 1990 + i % 35} for i in range(1000)])
    with tartan.Index("idx") as index:
        ids, scores = index.search(query, k=10)           # query: (nq, dim)
        ids, scores = index.search(queries, k=10)         # queries: (n, nq, dim) or a list
        ids, scores = index.search(query, k=10, where="year > 2000")  # filtered

Arrays: float32 and float16 C-contiguous arrays are used in place (never copied);
float64, other float types and non-contiguous arrays are converted once to float32
(copy=False refuses instead); integer, bool, complex and object arrays are refused
(UnsupportedError). Every library failure raises a subclass of tartan.Error carrying
.status (the tt_status code) and .message (naming the file and the cause).

doc/python.md is the manual; the pylate submodule is a drop-in index for PyLate.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _tartan

__version__ = _tartan.version()
__all__ = [
    "build", "tune", "Index", "evaluate", "Evaluation", "ttest", "to_run", "set_blas_threads",
    "Error", "InvalidArgumentError", "OutOfMemoryError", "InputOutputError", "FormatError",
    "VersionError", "CorruptError", "UnsupportedError", "ExistsError", "NoSpaceError",
    "DimensionError", "BadValueError", "EncoderError", "EncoderTimeoutError", "NotFoundError",
    "ParseError", "BusyError", "CancelledError", "OPTIONS", "DEFAULT_METRICS",
    "Filter", "FilterWarning",
]

# ------------------------------------------------------------------ errors


class Error(Exception):
    """A libtartan failure. .status is the tt_status code (negative int), .message the
    library's message (naming the file or argument and the cause)."""

    status: int = 0
    message: str = ""

    def __init__(self, message: str = "", status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class InvalidArgumentError(Error, ValueError):
    """TT_EINVAL: invalid argument or option value."""
    status = -1


class OutOfMemoryError(Error, MemoryError):
    """TT_ENOMEM: out of memory, or a size computation overflowed."""
    status = -2


class InputOutputError(Error, OSError):
    """TT_EIO: a read, write, open or fsync failed."""
    status = -3


class FormatError(Error):
    """TT_EFORMAT: not a file of the expected format."""
    status = -4


class VersionError(Error):
    """TT_EVERSION: a format version this library does not read."""
    status = -5


class CorruptError(Error):
    """TT_ECORRUPT: checksum mismatch or a broken structural invariant."""
    status = -6


class UnsupportedError(Error, TypeError):
    """TT_EUNSUPPORTED: valid but unsupported input (dtype, byte order, layout)."""
    status = -7


class ExistsError(Error, FileExistsError):
    """TT_EEXIST: the output exists and replacing it was not requested (force=True)."""
    status = -8


class NoSpaceError(Error, OSError):
    """TT_ENOSPC: no space left on device."""
    status = -9


class DimensionError(Error, ValueError):
    """TT_EDIM: dimension or count mismatch between inputs."""
    status = -10


class BadValueError(Error, ValueError):
    """TT_EVALUE: bad values (NaN/Inf, an all-zero vector, an empty document)."""
    status = -11


class EncoderError(Error):
    """TT_EENCODER: an external encoder failed."""
    status = -12


class EncoderTimeoutError(Error, TimeoutError):
    """TT_ETIMEOUT: an external program did not answer in time."""
    status = -13


class NotFoundError(Error, FileNotFoundError):
    """TT_ENOTFOUND: a file or program does not exist."""
    status = -14


class ParseError(Error, ValueError):
    """TT_EPARSE: a malformed text input (qrels, run, ids)."""
    status = -15


class BusyError(Error):
    """TT_EBUSY: another process holds the lock of the output or index."""
    status = -16


class CancelledError(Error):
    """TT_ECANCELED: the operation was cancelled."""
    status = -17


_ERRORS = {c.status: c for c in (
    InvalidArgumentError, OutOfMemoryError, InputOutputError, FormatError, VersionError,
    CorruptError, UnsupportedError, ExistsError, NoSpaceError, DimensionError, BadValueError,
    EncoderError, EncoderTimeoutError, NotFoundError, ParseError, BusyError, CancelledError)}
_tartan.set_error_classes(_ERRORS, Error)

#: Option names accepted by build (**options), Index.add/delete/compact, search, Index().
#: ("metadata" is build's and add's metadata= argument, a path once it reaches them.)
OPTIONS: Dict[str, List[str]] = _tartan.option_names()

#: A filter over one snapshot of an index (Index.filter; search(..., filter=f)).
Filter = _tartan.Filter


class FilterWarning(UserWarning):
    """A search filter's ids (filter_ids=, PyLate's subset=) include ids that name no
    live document: they are counted and skipped, as `tartan search --filter-ids` does."""

DEFAULT_METRICS = ["MRR@10", "nDCG@10", "nDCG@100", "Recall@10", "Recall@100",
                   "Recall@1000", "MAP@1000", "Success@5"]


# ------------------------------------------------------------------ arrays


def _array(x: Any, what: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "detach") and hasattr(x, "cpu"):   # a torch tensor
        x = x.detach().cpu()
        if hasattr(x, "numpy"):
            return x.numpy()
    try:
        return np.asarray(x)
    except Exception as e:  # ragged lists and the like
        raise UnsupportedError(f"{what}: cannot be read as an array ({e})") from None


def _check_float(a: np.ndarray, what: str) -> None:
    if a.dtype.kind != "f":
        raise UnsupportedError(
            f"{what}: dtype {a.dtype} is not a floating type (float32 and float16 are used "
            f"in place, float64 is converted once to float32)")


def _matrix(x: Any, what: str, *, f16_ok: bool, copy: bool = True, dim: Optional[int] = None
            ) -> np.ndarray:
    """A 2-D C-contiguous float32 (or float16 when f16_ok) array: the same object when
    it already is one, else one converted copy (refused when copy is False)."""
    a = _array(x, what)
    _check_float(a, what)
    if a.ndim != 2:
        raise DimensionError(f"{what}: expected a 2-D array (vectors, dim), got {a.ndim}-D "
                             f"shape {a.shape}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise BadValueError(f"{what}: empty array of shape {a.shape}")
    if dim is not None and a.shape[1] != dim:
        raise DimensionError(f"{what}: vectors of dim {a.shape[1]}, the index has dim {dim}")
    ok = a.dtype == np.float32 or (f16_ok and a.dtype == np.float16)
    if ok and a.flags.c_contiguous and a.dtype.byteorder in "=|<":
        return a
    if not copy:
        why = "is not C-contiguous" if ok else f"has dtype {a.dtype}"
        raise InvalidArgumentError(f"{what}: the array {why}, so it would be copied; pass "
                                   f"copy=True or a C-contiguous float32/float16 array")
    return np.ascontiguousarray(a, dtype=np.float32)


def _ids_list(ids: Any, n: int, what: str = "ids") -> Optional[List[str]]:
    if ids is None:
        return None
    if isinstance(ids, (str, bytes)):
        raise InvalidArgumentError(f"{what}: expected a sequence of ids, got a single string")
    out = []
    for i in ids:
        if isinstance(i, (bool, float)) or not isinstance(i, (str, int, np.integer)):
            raise UnsupportedError(f"{what}: id {i!r} is a {type(i).__name__}, not a str or int")
        out.append(str(i))
    if len(out) != n:
        raise DimensionError(f"{what}: {len(out)} ids for {n} documents")
    return out


def _source(vectors: Any, doclens: Any, ids: Any, copy: bool, bf16: bool = False
            ) -> Tuple[tuple, list]:
    """The input tuple _tartan.build/add read, and the arrays it borrows (kept alive by
    the caller for the call)."""
    if isinstance(vectors, (str, os.PathLike)) or (
            isinstance(vectors, (list, tuple)) and vectors and
            all(isinstance(v, (str, os.PathLike)) for v in vectors)):
        vp = [os.fspath(vectors)] if isinstance(vectors, (str, os.PathLike)) else \
            [os.fspath(v) for v in vectors]
        if doclens is None:
            raise InvalidArgumentError("doclens: .npy vector files need their doclens files")
        lp = [os.fspath(doclens)] if isinstance(doclens, (str, os.PathLike)) else \
            [os.fspath(v) for v in doclens]
        if ids is not None and not isinstance(ids, (str, os.PathLike)):
            raise InvalidArgumentError("ids: with .npy files, ids is a file (one id per line)")
        return ("files", vp, lp, None if ids is None else os.fspath(ids), bool(bf16)), []
    if isinstance(vectors, (list, tuple)):
        if doclens is not None:
            raise InvalidArgumentError("doclens: a list of per-document arrays needs no doclens")
        if len(vectors) == 0:
            raise BadValueError("vectors: an empty list of documents")
        blocks = []
        dim = None
        for i, v in enumerate(vectors):
            a = _array(v, f"vectors[{i}]")
            _check_float(a, f"vectors[{i}]")
            if a.ndim != 2:
                raise DimensionError(f"vectors[{i}]: expected a 2-D array (vectors, dim), got "
                                     f"{a.ndim}-D shape {a.shape}")
            if a.shape[0] == 0:
                raise BadValueError(f"vectors[{i}]: document {i} has no vectors")
            if dim is None:
                dim = a.shape[1]
            elif a.shape[1] != dim:
                raise DimensionError(f"vectors[{i}]: dim {a.shape[1]}, vectors[0] has dim {dim}")
            blocks.append(a)
        f16 = all(a.dtype == np.float16 for a in blocks)
        conv = [_matrix(a, f"vectors[{i}]", f16_ok=f16, copy=copy) for i, a in enumerate(blocks)]
        return ("memory", conv, int(dim), f16, None, _ids_list(ids, len(conv)),
                "vectors"), conv
    a = _array(vectors, "vectors")
    if a.ndim == 3:
        raise DimensionError(f"vectors: a 3-D array {a.shape}: pass a 2-D (vectors, dim) array "
                             f"with doclens, or a list of per-document arrays")
    a = _matrix(a, "vectors", f16_ok=True, copy=copy)
    if doclens is None:
        raise InvalidArgumentError("doclens: one (vectors, dim) array needs doclens (vectors "
                                   "per document); or pass a list of per-document arrays")
    lens = _array(doclens, "doclens")
    if lens.dtype.kind not in "iu" or lens.ndim != 1:
        raise UnsupportedError(f"doclens: expected a 1-D integer array, got {lens.ndim}-D "
                               f"{lens.dtype}")
    if lens.size == 0:
        raise BadValueError("doclens: no documents")
    if lens.dtype.kind == "u" and lens.size and int(lens.max()) > np.iinfo(np.int64).max:
        raise BadValueError("doclens: a length beyond int64")
    lens = np.ascontiguousarray(lens, dtype=np.int64)
    return ("memory", [a], int(a.shape[1]), a.dtype == np.float16, lens,
            _ids_list(ids, len(lens)), "vectors"), [a, lens]


def _options(kind: str, options: Dict[str, Any], what: str,
             only: Optional[List[str]] = None) -> Dict[str, Any]:
    """options, checked against the option names of kind (only: the subset that this
    operation uses; the others would be accepted and ignored)."""
    known = only if only is not None else OPTIONS[kind]
    for k in options:
        if k not in known:
            raise TypeError(f"{what}: unknown option {k!r} (known: {', '.join(known)})")
    return options

# ------------------------------------------------------------------ metadata


def _json_scalar(o: Any) -> Any:
    """json.dumps' default=: NumPy scalars as their Python values."""
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"{o!r} ({type(o).__name__}) is not a str, int, float, bool or None")


def _relabel(e: "Error", tmp: str) -> "Error":
    """e with the temporary JSON Lines file's name replaced by the list position:
    'FILE:6: ...' (line 6) becomes 'metadata[5]: ...'."""
    msg = re.sub(re.escape(tmp) + r":(\d+)", lambda m: f"metadata[{int(m.group(1)) - 1}]",
                 e.message)
    msg = msg.replace(tmp, "metadata")
    return type(e)(msg, e.status)


@contextlib.contextmanager
def _metadata_path(metadata: Any) -> Iterator[Optional[str]]:
    """The JSON Lines path for build/add's metadata=: a path as given, or a sequence of
    dicts (one per document, in document order or each with an "id") written to a
    temporary file for the call; library errors then name metadata[i] instead."""
    if metadata is None or isinstance(metadata, (str, os.PathLike)):
        yield None if metadata is None else os.fspath(metadata)
        return
    if isinstance(metadata, (bytes, Mapping)) or not isinstance(metadata, Iterable):
        raise InvalidArgumentError(
            f"metadata: expected a JSON Lines path or a sequence of dicts (one per document), "
            f"got {type(metadata).__name__}")
    fd, tmp = tempfile.mkstemp(prefix="tartan-metadata-", suffix=".jsonl")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for i, rec in enumerate(metadata):
                if not isinstance(rec, Mapping):
                    raise InvalidArgumentError(f"metadata[{i}]: expected a dict, got "
                                               f"{type(rec).__name__}")
                try:
                    f.write(json.dumps(rec, ensure_ascii=False, allow_nan=False,
                                       default=_json_scalar) + "\n")
                except (TypeError, ValueError) as e:  # NaN, sets, surrogates...
                    raise InvalidArgumentError(f"metadata[{i}]: {e}") from None
        try:
            yield tmp
        except Error as e:
            raise _relabel(e, tmp) from None
    finally:
        os.unlink(tmp)


def _id_strs(ids: Any, what: str) -> List[str]:
    """Document ids as str (ints converted with str(), as build's ids= are)."""
    if isinstance(ids, (str, bytes)):
        raise InvalidArgumentError(f"{what}: expected a sequence of ids, got a single "
                                   f"{type(ids).__name__} (wrap it in a list)")
    out = []
    for i in ids:
        if isinstance(i, (bool, float)) or not isinstance(i, (str, int, np.integer)):
            raise UnsupportedError(f"{what}: id {i!r} is a {type(i).__name__}, not a str or int")
        out.append(str(i))
    return out

# ------------------------------------------------------------------ build


def _check_progress(progress: Any) -> Any:
    if progress is not None and not callable(progress):
        raise TypeError("progress: expected a callable(phase, done, total) or None")
    return progress


def build(path: Union[str, os.PathLike], vectors: Any, doclens: Any = None, ids: Any = None, *,
          copy: bool = True, bf16: bool = False, progress: Any = None, tune: bool = True,
          target_recall: float = 0.95, metadata: Any = None, **options: Any) -> Dict[str, Any]:
    """Builds a compressed index at `path` and returns the build's statistics (a dict:
    seconds, centroids, heldout_mse, index_bytes, ...).

    vectors is one of:
      * a list of per-document (n_i, dim) arrays (what PyLate's encode returns);
        doclens must be None;
      * one (num_vectors, dim) array with doclens, a 1-D integer array of vectors per
        document;
      * a .npy path (or a list of them) with doclens the matching .npy path(s), read in
        chunks as `tartan build` reads them (bf16=True reads uint16 as bfloat16).
    float32/float16 C-contiguous arrays are read in place, chunk by chunk (no copy of the
    corpus); others are converted once to float32 (copy=False raises instead).
    ids: one str (or int) per document (a path with .npy files); default: row numbers.

    Options (as `tartan build`'s flags): nbits (1, 2, 4; 3 with the adaptive codec; default 2), centroids, threads,
    memory (bytes), seed, normalize, keep_originals ("none"/"f16"), codec
    ("adaptive"/"per-dim"/"shared"), assign, sample_factor, min_train_per_centroid,
    max_train_per_centroid, kmeans_iters, force, encoder, codebook, lloyd_max_rounds,
    pool_factor, pool_global (one cut for the collection, doc/pooling.md), debias ("auto",
    the default: "vector" where the adaptive codec gives some dimensions 8 bits, else
    "table"; "table" or True: debiased tables; "vector": one residual scale per vector,
    adaptive codec only; "none" or False: the tables as trained; as `tartan build
    --debias`).

    metadata: the documents' metadata for filtered search (doc/metadata.md): a JSON Lines
    path (as `tartan build --metadata`), or a sequence of dicts, one per document in
    document order, or each with an "id" naming its document; values str, int, float,
    bool or None. Errors name the line, or metadata[i] for a sequence.

    progress: a callable(phase, done, total), called on the calling thread (at most every
    50 ms) with the library's progress ("sample", "codec", "encode", "ivf", "publish");
    an exception it raises stops the build and propagates.

    tune: as `tartan build`, the index is then calibrated (tartan.tune with target_recall;
    doc/search.md, "Calibrated defaults"): stats["calibration"] has what was stored.

    The GIL is released; Ctrl-C stops the build (nothing is left at path) and raises
    KeyboardInterrupt. Errors: tartan.Error subclasses (ExistsError without force=True,
    BadValueError for NaN/Inf naming the vector and document, ...)."""
    src, keep = _source(vectors, doclens, ids, copy, bf16)
    opts = _options("build", options, "build")
    with _metadata_path(metadata) as mp:
        if mp is not None:
            opts = dict(opts, metadata=mp)
        stats = _tartan.build(os.fspath(path), src, opts, _check_progress(progress))
    del keep
    if tune:
        stats["calibration"] = globals()["tune"](path, target_recall=target_recall,
                                                 threads=options.get("threads", 0),
                                                 progress=progress)
    return stats


def tune(path: Union[str, os.PathLike], *, target_recall: float = 0.95,
         pseudo_queries: int = 64, query_len: int = 0, noise: Optional[float] = None,
         seed: int = 42,
         cost: str = "time", threads: int = 0, if_stale: bool = False,
         progress: Any = None) -> Optional[Dict[str, Any]]:
    """Calibrates PLAID's search parameters on the index at path, as `tartan tune` does
    (doc/search.md, "Calibrated defaults"): recall@10 and recall@100 against exhaustive
    search on pseudo-queries made from the index, over a grid of nprobe, ndocs and the
    adaptive stage-4 margin; the cheapest set reaching target_recall is stored in the
    index (a new generation), and every search without those options uses it. Returns
    the stored calibration (a dict: target, source, k10 and k100 with nprobe, ndocs,
    prune_ratio, rerank_margin, recall, first (the share of the queries whose first
    document by exhaustive search the set keeps in its top k; a reached set keeps it for
    at least target_recall of them), ms, reached). cost="work" makes the choice
    repeatable; if_stale=True re-checks only when the index changed by a quarter since.
    noise=None: the library's default (0.5). The GIL is released; Ctrl-C stops it (nothing
    published)."""
    return _tartan.tune(os.fspath(path), float(target_recall), int(pseudo_queries),
                        int(query_len), float("nan") if noise is None else float(noise),
                        int(seed), str(cost), int(threads),
                        bool(if_stale), _check_progress(progress))

# ------------------------------------------------------------------ search


def _queries(queries: Any, dim: int) -> Tuple[bool, np.ndarray, Optional[np.ndarray],
                                             Optional[np.ndarray]]:
    """(single, Q, qoffs, qlens): Q float32 C-contiguous rows."""
    if isinstance(queries, (list, tuple)):
        if len(queries) == 0:
            return False, np.zeros((0, dim), np.float32), np.zeros(0, np.uint64), \
                np.zeros(0, np.uint32)
        mats = [_matrix(q, f"queries[{i}]", f16_ok=False, dim=dim) for i, q in enumerate(queries)]
        lens = np.fromiter((m.shape[0] for m in mats), np.uint32, len(mats))
        offs = np.zeros(len(mats), np.uint64)
        np.cumsum(lens[:-1], out=offs[1:])
        return False, np.concatenate(mats) if len(mats) > 1 else mats[0], offs, lens
    a = _array(queries, "queries")
    if a.ndim == 3:
        _check_float(a, "queries")
        n, nq, d = a.shape
        if d != dim:
            raise DimensionError(f"queries: vectors of dim {d}, the index has dim {dim}")
        if nq == 0:
            raise BadValueError(f"queries: empty array of shape {a.shape}")
        q = a.reshape(n * nq, d) if n else np.zeros((0, d), np.float32)
        q = q if (q.dtype == np.float32 and q.flags.c_contiguous) else \
            np.ascontiguousarray(q, dtype=np.float32)
        return False, q, np.arange(0, n * nq, nq, dtype=np.uint64), np.full(n, nq, np.uint32)
    return True, _matrix(a, "queries", f16_ok=False, dim=dim), None, None


def to_run(query_ids: Sequence[Any], ids: Any, scores: Any) -> Dict[str, Dict[str, float]]:
    """A run dict {qid: {docid: score}} for evaluate() from a batch search's (ids,
    scores) (padding None entries are skipped)."""
    run: Dict[str, Dict[str, float]] = {}
    for q, row_ids, row_scores in zip(query_ids, ids, scores):
        run[str(q)] = {d: float(s) for d, s in zip(row_ids, row_scores) if d is not None}
    return run


class Index(_tartan.Index):
    """An open index (a snapshot of its current generation). Any number of threads may
    search one Index at once (each borrows a search context); searches release the GIL.

        Index(path, io="auto"|"uring"|"mmap", direct=False, queue_depth=64)

    len(index) is the number of live documents; index.dim the vector dimension;
    index.info() a dict of tt_index_info (sizes, bits per dimension, ratios, build
    parameters). Use it as a context manager, or call close(); searches already running
    finish on the snapshot they started with."""

    def __init__(self, path: Union[str, os.PathLike], **options: Any) -> None:
        super().__init__(os.fspath(path), _options("open", options, "Index"))

    def __enter__(self) -> "Index":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"<tartan.Index {self.path!r} closed>"
        return f"<tartan.Index {self.path!r}: {len(self)} documents, dim {self.dim}>"

    def _search_py(self, queries: Any, k: int = 10, *, as_dicts: bool = False,
                   rows: bool = False, threads: int = 0, where: Optional[str] = None,
                   filter_ids: Any = None, filter: Optional[Filter] = None,
                   with_metadata: bool = False, **options: Any) -> Any:
        """Searches one query, a (nq, dim) array, or a batch: an (n, nq, dim) array or a
        list of (nq_i, dim) arrays.

        Returns (ids, scores): for one query ids is a 1-D object array of document ids
        (str) and scores a float32 array, best first (len = min(k, documents)); for a
        batch both are (n, k) arrays, padded with None / -inf past a query's hits.
        rows=True gives int64 document rows (-1 as padding) instead of ids.
        as_dicts=True gives PyLate's format instead: a list of {"id", "score"} dicts (a
        list of such lists for a batch).

        Options: mode ("plaid", "exhaustive", "exact"), nprobe, threshold, ndocs, score
        ("sum", "mean"), pruning ("auto", "absolute", "relative"), prune_ratio, rerank
        ("adaptive", "fixed") as in `tartan search`; threads (batch: 0 = all CPUs).
        Queries that are float32 C-contiguous are used in place; others are converted
        once. NaN/Inf raises BadValueError; a wrong dim DimensionError.

        Filters (doc/metadata.md; every query of a batch): where, an SQL expression over
        the index's metadata ("year > 2000 AND lang = 'en'"); filter_ids, the ids of the
        documents allowed (ids naming no live document are counted: a FilterWarning);
        both: documents allowed by both. filter, a Filter made by Index.filter(), instead
        of where/filter_ids (made once, reused). A search returns min(k, allowed) hits;
        filter_direct_max as `tartan search --filter-direct-max`. with_metadata=True
        (with as_dicts) adds each hit's "metadata" dict."""
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise InvalidArgumentError(f"search: k must be a positive int, got {k!r}")
        k = int(k)
        if with_metadata and not as_dicts:
            raise InvalidArgumentError("search: with_metadata=True needs as_dicts=True")
        opts = _options("search", options, "search") if options else None
        single, q, offs, lens = _queries(queries, self.dim)
        flt = self._filter_of(where, filter_ids, filter)
        if single:
            r = np.empty(k, np.int64)
            s = np.empty(k, np.float32)
            n, ids = self._search(q, k, opts, r, s, as_dicts or not rows, flt)
            if as_dicts:
                hits = [{"id": i, "score": float(v)} for i, v in zip(ids, s[:n].tolist())]
                if with_metadata:
                    for h, m in zip(hits, self._metadata_of_rows(r[:n])):
                        h["metadata"] = m
                return hits
            if rows:
                return r[:n], s[:n]
            out = np.empty(n, dtype=object)
            out[:] = ids
            return out, s[:n]
        nqry = len(lens)
        r = np.empty((nqry, k), np.int64)
        s = np.empty((nqry, k), np.float32)
        nh = np.empty(nqry, np.uint32)
        ids = self._search_batch(q, offs, lens, k, opts, int(threads), r, s, nh,
                                 as_dicts or not rows, None, flt)
        if as_dicts:
            sl = s.tolist()
            out = [[{"id": ids[i * k + j], "score": sl[i][j]} for j in range(int(nh[i]))]
                   for i in range(nqry)]
            if with_metadata and nqry:
                md = self._metadata_of_rows(r.reshape(-1))
                for i, hits in enumerate(out):
                    for j, h in enumerate(hits):
                        h["metadata"] = md[i * k + j]
            return out
        if rows:
            return r, s
        out = np.empty((nqry, k), dtype=object)
        if nqry:
            out.reshape(-1)[:] = ids
        return out, s

    # search() itself is the C type's: one float32 C-contiguous (nq, dim) query with no
    # option but k runs entirely in C; anything else comes back to _search_py above
    # (same arguments, same results). Its docstring is _search_py's.

    # ------------------------------------------------------------- filters

    def filter(self, where: Optional[str] = None, ids: Any = None) -> Filter:
        """A Filter of the live documents for which the SQL expression `where` holds
        over the index's metadata (SQLite's dialect, as `tartan search --where`), and/or
        whose ids are among `ids` (str or int; ids naming no live document are counted
        in .unknown, not an error); with both, the documents allowed by both. It is
        over this snapshot: search(..., filter=f) with this Index until a change or
        reopen(). Errors: InvalidArgumentError with SQLite's message (syntax error,
        unknown column) or the reason a statement is refused (writes, ATTACH, pragmas,
        load_extension, a second statement); NotFoundError when the index has no
        metadata. The GIL is released while SQLite runs."""
        return super().filter(where=where, ids=None if ids is None else _id_strs(ids, "ids"))

    def _filter_of(self, where: Optional[str], filter_ids: Any,
                   flt: Optional[Filter]) -> Optional[Filter]:
        """The Filter of a search's where/filter_ids/filter arguments (None: no filter);
        unknown ids are reported with a FilterWarning, as the CLI counts them."""
        if flt is not None:
            if where is not None or filter_ids is not None:
                raise InvalidArgumentError("search: give filter= (a made Filter) or "
                                           "where=/filter_ids=, not both")
            return flt
        if where is None and filter_ids is None:
            return None
        f = self.filter(where=where, ids=filter_ids)
        if f.unknown:
            warnings.warn(f"filter_ids: {f.num_ids} ids, {f.unknown} of them name no live "
                          f"document", FilterWarning, stacklevel=3)
        return f

    def _metadata_of_rows(self, rows: np.ndarray) -> List[Optional[Dict[str, Any]]]:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        return [None if j is None else json.loads(j) for j in self._metadata_rows(rows)]

    def metadata(self, ids: Any = None, *, rows: Any = None) -> List[Optional[Dict[str, Any]]]:
        """The metadata records (dicts, nulls as None, booleans as bool) of documents by
        id, or by row (rows=, as search(..., rows=True) returns them), in the order
        asked: None for an id that names no live document or a deleted row. Errors:
        NotFoundError when the index has no metadata; IndexError for a row out of
        range."""
        if (ids is None) == (rows is None):
            raise InvalidArgumentError("metadata: give ids or rows=")
        if ids is not None:
            lst = _id_strs(ids, "ids")
            f = super().filter(ids=lst)
            live = f.rows()
            row_of = dict(zip(self.doc_ids(live), live.tolist()))
            rr = np.array([row_of.get(i, -1) for i in lst], dtype=np.int64)
        else:
            rr = _array(rows, "rows")
            if rr.dtype.kind not in "iu" or rr.ndim != 1:
                raise UnsupportedError(f"rows: expected a 1-D integer array, got {rr.ndim}-D "
                                       f"{rr.dtype}")
            if rr.size and int(rr.min()) < 0:
                raise IndexError(f"row {int(rr.min())} is not a document of the index")
        return self._metadata_of_rows(rr)

    # ------------------------------------------------------------- changes

    def add(self, vectors: Any, doclens: Any = None, ids: Any = None, *, copy: bool = True,
            bf16: bool = False, progress: Any = None, metadata: Any = None,
            **options: Any) -> Dict[str, Any]:
        """Adds documents (same inputs as build()) as a new segment encoded with the
        index's codebook; then this Index sees the new generation. An id already in the
        index raises ExistsError unless upsert=True. Options: upsert, threads, memory,
        pool_factor. metadata: the new documents' metadata, as build()'s (without it,
        an index with metadata gets rows of nulls for them). Returns the change's
        statistics (a dict)."""
        src, keep = _source(vectors, doclens, ids, copy, bf16)
        opts = _options("change", options, "add",
                        [k for k in OPTIONS["change"] if k not in ("retrain", "strict")])
        with _metadata_path(metadata) as mp:
            if mp is not None:
                opts = dict(opts, metadata=mp)
            stats = _tartan.add(self.path, src, opts, _check_progress(progress))
        del keep
        self.reopen()
        return stats

    def delete(self, ids: Iterable[Any], *, strict: bool = False) -> Dict[str, Any]:
        """Deletes the documents with these ids (unknown ids are counted in
        stats["unknown"], or raise NotFoundError with strict=True)."""
        lst = [str(i) for i in ([ids] if isinstance(ids, str) else ids)]
        stats = _tartan.delete(self.path, lst, {"strict": bool(strict)})
        self.reopen()
        return stats

    def compact(self, *, retrain: bool = False, progress: Any = None,
                **options: Any) -> Dict[str, Any]:
        """Merges the segments and drops deleted documents (retrain=True: a new
        codebook first)."""
        opts = dict(_options("change", options, "compact", ["threads", "memory"]),
                    retrain=bool(retrain))
        stats = _tartan.compact(self.path, opts, _check_progress(progress))
        self.reopen()
        return stats

# ------------------------------------------------------------------ evaluation


class Evaluation:
    """Measures of a run against qrels (trec_eval's definitions, doc/metrics.md).

    ev["nDCG@10"] is the mean; ev.values["nDCG@10"] the per-query values (float64
    array in the order of ev.query_ids); ev.per_query("nDCG@10") a dict qid -> value;
    ev.counts the query counts (evaluated, missing, ignored, ...)."""

    def __init__(self, metrics: List[str], query_ids: List[str], means: List[float],
                 values: List[List[float]], counts: Dict[str, int]) -> None:
        self.metrics = metrics
        self.query_ids = query_ids
        self.means = dict(zip(metrics, means))
        self.values = {m: np.asarray(v, dtype=np.float64) for m, v in zip(metrics, values)}
        self.counts = counts

    def __getitem__(self, metric: str) -> float:
        return self.means[metric]

    def per_query(self, metric: str) -> Dict[str, float]:
        return dict(zip(self.query_ids, self.values[metric].tolist()))

    def __repr__(self) -> str:
        body = ", ".join(f"{m}={v:.4f}" for m, v in self.means.items())
        return f"<tartan.Evaluation {self.counts['queries']} queries: {body}>"


def evaluate(qrels: Any, run: Any, metrics: Optional[Sequence[str]] = None, *,
             missing_as_zero: bool = False, relevance_level: int = 1) -> Evaluation:
    """Evaluates a run against qrels. qrels: a TREC or BEIR TSV file path, or a dict
    {qid: {docid: relevance int}}; run: a TREC run path or a dict {qid: {docid: score}}
    (to_run() makes one from search results). metrics: names such as "nDCG@10",
    "MRR@10", "Recall@100", "MAP@1000", "Success@5", "P@10" (default: `tartan eval`'s).
    missing_as_zero averages over every qrels query (trec_eval -c)."""
    if isinstance(qrels, os.PathLike):
        qrels = os.fspath(qrels)
    if isinstance(run, os.PathLike):
        run = os.fspath(run)
    if isinstance(metrics, str):
        metrics = [m for m in metrics.split(",") if m]
    res = _tartan.evaluate(qrels, run, list(metrics or DEFAULT_METRICS), bool(missing_as_zero),
                           int(relevance_level))
    return Evaluation(*res)


def ttest(a: Any, b: Any) -> Tuple[float, float]:
    """Two-sided paired Student t-test of a against b (per-query values in the same
    order): returns (t, p). Like scipy.stats.ttest_rel, except that all-zero
    differences give (0.0, 1.0)."""
    x = np.ascontiguousarray(_array(a, "a"), dtype=np.float64).reshape(-1)
    y = np.ascontiguousarray(_array(b, "b"), dtype=np.float64).reshape(-1)
    return _tartan.ttest(x, y)


def set_blas_threads(n: int) -> bool:
    """Threads OpenBLAS may use inside one matrix product, process-wide (the CLI sets 1
    for searches; batch searches bring their own threads). False if not supported."""
    return _tartan.blas_set_threads(int(n))

"""Type stubs of the tartan package (doc/python.md is the manual)."""
import os
from typing import Any, Callable, Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str
OPTIONS: Dict[str, List[str]]
DEFAULT_METRICS: List[str]

PathLike = Union[str, os.PathLike]
ArrayLike = npt.ArrayLike
#: build/add metadata=: a JSON Lines path, or one dict per document
Metadata = Union[PathLike, Sequence[Mapping[str, Union[str, int, float, bool, None]]], None]
Ids = Iterable[Union[str, int]]

class Filter:
    """The documents a search may return, over one snapshot of an index (Index.filter)."""
    @property
    def allowed(self) -> int: ...
    @property
    def unknown(self) -> int: ...
    @property
    def num_ids(self) -> int: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def generation(self) -> int: ...
    def rows(self) -> npt.NDArray[np.int64]: ...
    def __len__(self) -> int: ...

class FilterWarning(UserWarning): ...

class Error(Exception):
    status: int
    message: str
    def __init__(self, message: str = ..., status: Optional[int] = ...) -> None: ...

class InvalidArgumentError(Error, ValueError): ...
class OutOfMemoryError(Error, MemoryError): ...
class InputOutputError(Error, OSError): ...
class FormatError(Error): ...
class VersionError(Error): ...
class CorruptError(Error): ...
class UnsupportedError(Error, TypeError): ...
class ExistsError(Error, FileExistsError): ...
class NoSpaceError(Error, OSError): ...
class DimensionError(Error, ValueError): ...
class BadValueError(Error, ValueError): ...
class EncoderError(Error): ...
class EncoderTimeoutError(Error, TimeoutError): ...
class NotFoundError(Error, FileNotFoundError): ...
class ParseError(Error, ValueError): ...
class BusyError(Error): ...
class CancelledError(Error): ...

def build(
    path: PathLike,
    vectors: Union[ArrayLike, Sequence[ArrayLike], PathLike, Sequence[PathLike]],
    doclens: Union[ArrayLike, PathLike, Sequence[PathLike], None] = ...,
    ids: Union[Sequence[Union[str, int]], PathLike, None] = ...,
    *,
    copy: bool = ...,
    bf16: bool = ...,
    progress: Optional[Callable[[str, int, int], Any]] = ...,
    tune: bool = ...,
    target_recall: float = ...,
    metadata: Metadata = ...,
    nbits: int = ...,
    centroids: int = ...,
    threads: int = ...,
    memory: int = ...,
    seed: int = ...,
    normalize: bool = ...,
    keep_originals: Literal["none", "f16"] = ...,
    codec: Literal["adaptive", "per-dim", "shared"] = ...,
    assign: Literal["two-level", "exact"] = ...,
    sample_factor: float = ...,
    min_train_per_centroid: int = ...,
    max_train_per_centroid: int = ...,
    kmeans_iters: int = ...,
    force: bool = ...,
    encoder: Optional[str] = ...,
    codebook: Optional[str] = ...,
    lloyd_max_rounds: int = ...,
    pool_factor: int = ...,
    pool_global: float = ...,
    debias: Union[bool, Literal["auto", "none", "table", "vector"]] = ...,
) -> Dict[str, Any]: ...

def tune(
    path: PathLike,
    *,
    target_recall: float = ...,
    pseudo_queries: int = ...,
    query_len: int = ...,
    noise: Optional[float] = ...,
    seed: int = ...,
    cost: Literal["time", "work"] = ...,
    threads: int = ...,
    if_stale: bool = ...,
    progress: Optional[Callable[[str, int, int], Any]] = ...,
) -> Optional[Dict[str, Any]]: ...

Hit = Dict[str, Any]  # {"id": str, "score": float}

class Index:
    def __init__(self, path: PathLike, *, io: Literal["auto", "uring", "mmap"] = ...,
                 direct: bool = ..., queue_depth: int = ...) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "Index": ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    def reopen(self) -> None: ...
    def info(self) -> Dict[str, Any]: ...
    def doc_ids(self, rows: npt.NDArray[np.int64]) -> List[str]: ...
    def search(
        self,
        queries: Union[ArrayLike, Sequence[ArrayLike]],
        k: int = ...,
        *,
        as_dicts: bool = ...,
        rows: bool = ...,
        threads: int = ...,
        mode: Literal["plaid", "exhaustive", "exact"] = ...,
        nprobe: int = ...,
        threshold: float = ...,
        ndocs: int = ...,
        score: Literal["sum", "mean"] = ...,
        pruning: Literal["auto", "absolute", "relative"] = ...,
        prune_ratio: float = ...,
        rerank: Literal["adaptive", "fixed"] = ...,
        tuned: bool = ...,
        rerank_margin: float = ...,
        centroid_groups: int = ...,
        where: Optional[str] = ...,
        filter_ids: Optional[Ids] = ...,
        filter: Optional[Filter] = ...,
        filter_direct_max: int = ...,
        with_metadata: bool = ...,
    ) -> Union[Tuple[npt.NDArray[Any], npt.NDArray[np.float32]], List[Hit], List[List[Hit]]]: ...
    def filter(self, where: Optional[str] = ..., ids: Optional[Ids] = ...) -> Filter: ...
    def metadata(self, ids: Optional[Ids] = ..., *,
                 rows: Optional[ArrayLike] = ...) -> List[Optional[Dict[str, Any]]]: ...
    def metadata_columns(self) -> Dict[str, str]: ...
    def add(
        self,
        vectors: Union[ArrayLike, Sequence[ArrayLike], PathLike, Sequence[PathLike]],
        doclens: Union[ArrayLike, PathLike, Sequence[PathLike], None] = ...,
        ids: Union[Sequence[Union[str, int]], PathLike, None] = ...,
        *,
        copy: bool = ...,
        bf16: bool = ...,
        progress: Optional[Callable[[str, int, int], Any]] = ...,
        metadata: Metadata = ...,
        upsert: bool = ...,
        threads: int = ...,
        memory: int = ...,
        pool_factor: int = ...,
    ) -> Dict[str, Any]: ...
    def delete(self, ids: Iterable[Union[str, int]], *, strict: bool = ...) -> Dict[str, Any]: ...
    def compact(self, *, retrain: bool = ..., progress: Optional[Callable[[str, int, int], Any]] = ...,
                threads: int = ..., memory: int = ...) -> Dict[str, Any]: ...

class Evaluation:
    metrics: List[str]
    query_ids: List[str]
    means: Dict[str, float]
    values: Dict[str, npt.NDArray[np.float64]]
    counts: Dict[str, int]
    def __getitem__(self, metric: str) -> float: ...
    def per_query(self, metric: str) -> Dict[str, float]: ...

def evaluate(
    qrels: Union[PathLike, Dict[str, Dict[str, int]]],
    run: Union[PathLike, Dict[str, Dict[str, float]]],
    metrics: Union[Sequence[str], str, None] = ...,
    *,
    missing_as_zero: bool = ...,
    relevance_level: int = ...,
) -> Evaluation: ...

def ttest(a: ArrayLike, b: ArrayLike) -> Tuple[float, float]: ...
def to_run(query_ids: Sequence[Any], ids: Any, scores: Any) -> Dict[str, Dict[str, float]]: ...
def set_blas_threads(n: int) -> bool: ...

/*
 * tartan — late-interaction (multi-vector, ColBERT/PLAID-style) retrieval over
 * compressed, disk-resident indexes.
 *
 * This header is the manual. Conventions:
 *  - Every function that can fail returns an int status: TT_OK (0) on success or a
 *    negative tt_status. The thread-local message tt_last_error() then names the
 *    file or argument and the cause.
 *  - Handles are opaque; every *_free / *_close accepts NULL.
 *  - Options structs are filled with defaults by their *_init() function, so new
 *    fields can be added without breaking callers that use the initialiser.
 *  - The library never prints, never exits and never reads the environment.
 */
#ifndef TARTAN_H
#define TARTAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(TT_BUILDING_LIBRARY) && defined(__GNUC__)
#define TT_API __attribute__((visibility("default")))
#else
#define TT_API
#endif

/* ---------------------------------------------------------------- version */

#define TT_VERSION_MAJOR 0
#define TT_VERSION_MINOR 2
#define TT_VERSION_PATCH 0
#define TT_VERSION_NUMBER (TT_VERSION_MAJOR * 10000 + TT_VERSION_MINOR * 100 + TT_VERSION_PATCH)
#define TT_VERSION_STRING "0.2.0"

/* Version of the library actually linked (compare with TT_VERSION_NUMBER). */
TT_API unsigned tt_version_number(void);
TT_API const char *tt_version_string(void);

/* ----------------------------------------------------------------- errors */

typedef enum tt_status {
    TT_OK = 0,
    TT_EINVAL = -1,       /* invalid argument or option value */
    TT_ENOMEM = -2,       /* out of memory, or a size computation overflowed */
    TT_EIO = -3,          /* read/write/open/fsync failed (errno in the message) */
    TT_EFORMAT = -4,      /* not a file of the expected format (bad magic, malformed header) */
    TT_EVERSION = -5,     /* a format version this library does not read */
    TT_ECORRUPT = -6,     /* checksum mismatch or broken structural invariant */
    TT_EUNSUPPORTED = -7, /* valid but unsupported input (dtype, byte order, layout) */
    TT_EEXIST = -8,       /* output exists and replacing it was not requested */
    TT_ENOSPC = -9,       /* no space left on device / file size limit */
    TT_EDIM = -10,        /* dimension or count mismatch between inputs */
    TT_EVALUE = -11,      /* bad values: NaN/Inf, all-zero vector, zero doclen */
    TT_EENCODER = -12,    /* an external encoder failed or broke the protocol */
    TT_ETIMEOUT = -13,    /* an external program did not answer in time */
    TT_ENOTFOUND = -14,   /* a file or program does not exist */
    TT_EPARSE = -15,      /* a text input (qrels, run, ids) has a malformed line */
    TT_EBUSY = -16,       /* another process holds the lock of the output or index */
    TT_ECANCELED = -17    /* stopped because the caller's cancel flag was set */
} tt_status;

/* Short description of a status code ("checksum mismatch", ...). Never NULL. */
TT_API const char *tt_strerror(int status);
/* Message of the last failure on the calling thread, naming the file/argument and
 * the cause; "" if none. Valid until the next tartan call on this thread. */
TT_API const char *tt_last_error(void);

/* Progress callback: phase is a short static string ("train", "encode", ...);
 * done/total count work units of that phase (total may be 0 if unknown).
 * Called from the calling thread only. */
typedef void (*tt_progress_fn)(void *user, const char *phase, uint64_t done, uint64_t total);

/* ------------------------------------------------------------------ input */

/* A corpus: a sequence of (vector file, doclens file) pairs, concatenated in order.
 * Vector files: NumPy .npy (format 1.0/2.0/3.0, little-endian, C order, 2-D
 * [num_vectors, dim], float32, float16 or float64 (narrowed to float32 as it is read),
 * or uint16 read as bfloat16 when bf16_from_uint16 is set) or .fvecs (int32 dim +
 * float32 values per vector). Doclens files: .npy 1-D of any integer dtype (int8,
 * int16, int32, int64 or their unsigned forms; uint64 at most INT64_MAX), vectors per
 * document, in order.
 * An optional ids file holds one external document id per line (default: the
 * document's row number). Vectors are read in chunks, never all at once. */
typedef struct tt_input tt_input;

typedef struct tt_input_options {
    uint32_t struct_size;  /* set by tt_input_options_init */
    int bf16_from_uint16;  /* read uint16 .npy data as bfloat16 (default 0: reject) */
} tt_input_options;

TT_API void tt_input_options_init(tt_input_options *opt);

/* Opens and validates the headers of nfiles vector/doclens pairs: dims agree,
 * doclens sum to each file's vector count, no zero doclen, ids count matches.
 * Errors: TT_ENOTFOUND, TT_EFORMAT, TT_EUNSUPPORTED, TT_EDIM, TT_EVALUE, TT_EIO. */
TT_API int tt_input_open(tt_input **out, size_t nfiles, const char *const *vector_paths,
                         const char *const *doclens_paths, const char *ids_path,
                         const tt_input_options *opt);
TT_API void tt_input_free(tt_input *in);
TT_API uint32_t tt_input_dim(const tt_input *in);
TT_API uint64_t tt_input_num_docs(const tt_input *in);
TT_API uint64_t tt_input_num_vectors(const tt_input *in);

/* --------------------------------------------------- input from memory */

/* Element types of vectors held in memory. */
enum { TT_DTYPE_F32 = 1, TT_DTYPE_F16 = 2 };

/* A corpus held by the caller, read in place (never copied as a whole): nblocks blocks
 * of row-major vectors, blocks[b] holding block_rows[b] rows of dim elements of dtype
 * (TT_DTYPE_F32: float; TT_DTYPE_F16: IEEE half as uint16_t), concatenated in order.
 * Documents: with doclens (num_docs values, each 1..2^31, summing to the rows
 * of all blocks) they run across blocks as doclens says; with doclens NULL each block
 * is one document (num_docs is ignored; a block of 0 rows is TT_EVALUE). ids (may be
 * NULL: row numbers) holds num_docs NUL-terminated ids, copied, checked as an ids
 * file's lines are (1..1024 bytes, no whitespace or control characters, no
 * duplicates). name (may be NULL: "memory") names the vectors in messages.
 * OWNERSHIP: the blocks are borrowed: they must stay valid and unchanged until
 * tt_input_free; the build copies rows out of them a chunk at a time (from its worker
 * threads), converting float16 to float32. Finiteness is checked as the build reads them
 * (TT_EVALUE naming the vector and document), like a file's.
 * Errors: TT_EINVAL (NULL arguments), TT_EUNSUPPORTED (dtype), TT_EDIM (dim 0, doclens
 * that do not sum to the rows), TT_EVALUE (no vectors, a document of length 0),
 * TT_EPARSE (a bad or duplicate id), TT_ENOMEM. */
TT_API int tt_input_from_memory(tt_input **out, uint32_t dim, int dtype, size_t nblocks,
                                const void *const *blocks, const uint64_t *block_rows,
                                const int64_t *doclens, uint64_t num_docs,
                                const char *const *ids, const char *name);

/* ------------------------------------------------------------------ build */

enum { TT_KEEP_NONE = 0, TT_KEEP_F16 = 1 };
enum { TT_CODEC_SHARED = 0, TT_CODEC_PER_DIM = 1, TT_CODEC_ADAPTIVE = 2 };
enum { TT_ASSIGN_EXACT = 0, TT_ASSIGN_TWO_LEVEL = 1 };

/* tt_build_options.debias, tt_index_info.debias. */
typedef enum tt_debias {
    TT_DEBIAS_AUTO = -1,  /* build option only: VECTOR where the adaptive codec gives some
                           * dimensions 8 bits (outlier dimensions), else TABLE */
    TT_DEBIAS_NONE = 0,   /* the codec's weights as trained */
    TT_DEBIAS_TABLE = 1,  /* one scale per codec table (the weights themselves) */
    TT_DEBIAS_VECTOR = 2  /* one float16 scale per vector (vscale.tt) */
} tt_debias;

typedef struct tt_build_options {
    uint32_t struct_size;       /* set by tt_build_options_init */
    int nbits;                  /* residual bits per dimension: 1, 2 or 4 (default 2); 3
                                 * with the adaptive codec (an average) */
    uint32_t num_centroids;     /* 0: 2^floor(log2(16*sqrt(num_vectors))) as ColBERTv2 */
    int threads;                /* worker threads; 0: number of online CPUs */
    uint64_t memory_bytes;      /* working-memory budget of the build (default 2 GiB) */
    uint64_t seed;              /* sampling and k-means seed (default 42) */
    int normalize;              /* L2-normalise vectors (default 1); 0 keeps raw inner products */
    int keep_originals;         /* TT_KEEP_NONE (default) or TT_KEEP_F16: keep vectors for exact scoring */
    int codec_tables;           /* TT_CODEC_ADAPTIVE (default: bits allocated per
                                 * dimension; uniform, i.e. TT_CODEC_PER_DIM's layout, on
                                 * isotropic vectors), TT_CODEC_PER_DIM or TT_CODEC_SHARED
                                 * (ColBERTv2) */
    int assign;                 /* TT_ASSIGN_TWO_LEVEL (default) or TT_ASSIGN_EXACT */
    double sample_factor;       /* training docs = 1 + f*sqrt(120*num_docs) (default 16, ColBERTv2) */
    uint32_t min_train_per_centroid; /* grow the sample to at least this many vectors per centroid (default 32) */
    uint32_t max_train_per_centroid; /* cap the sample at this many vectors per centroid
                                      * (default 256, FAISS's max_points_per_centroid) */
    int kmeans_iters;           /* Lloyd iterations (default 4, ColBERTv2's kmeans_niters) */
    int force;                  /* replace an existing index at out_dir (kept intact if the build fails) */
    const char *encoder;        /* free-text encoder description stored in the index (may be NULL) */
    tt_progress_fn progress;    /* may be NULL */
    void *progress_user;
    const volatile int *cancel; /* may be NULL; once *cancel != 0 (e.g. set by a signal
                                 * handler) the build stops within a chunk of work with
                                 * TT_ECANCELED, removes its files and publishes nothing */
    const char *codebook;       /* NULL, or an index whose centroids and codec are used
                                 * as they are (no training; its nbits, tables,
                                 * normalisation, assignment and seed too): indexes that
                                 * share a codebook encode a vector alike */
    int lloyd_max_rounds;       /* Lloyd-Max refinement rounds of the codec tables, at most
                                 * (default 100; 0: ColBERTv2's quantile tables as they are) */
    int pool_factor;            /* token pooling (doc/pooling.md): each document's vectors
                                 * are clustered by Ward's method into max(1, floor(n / F))
                                 * clusters, each replaced by its mean (renormalised when the
                                 * index normalises), before anything else sees them. 1
                                 * (default; 0 too): no pooling. Stored in the index as the
                                 * factor tt_index_add uses. Queries are never pooled. A
                                 * document of n vectors needs about 8 n^2 bytes per thread
                                 * within a quarter of memory_bytes (TT_ENOMEM naming it) */
    int debias;                 /* how decoded residuals are kept unbiased (tt_debias).
                                 * TT_DEBIAS_AUTO (default): TT_DEBIAS_VECTOR when the
                                 * adaptive codec gives some dimensions 8 bits (the outlier
                                 * dimensions of LLM hidden states), else TT_DEBIAS_TABLE.
                                 * TT_DEBIAS_TABLE: each codec table's
                                 * reconstruction weights scaled so that a decoded residual's
                                 * inner product with its own residual is unbiased over the
                                 * held-out vectors (doc/format.md, "Debiased weights");
                                 * TT_DEBIAS_NONE: the weights as trained (ColBERTv2's, with
                                 * lloyd_max_rounds 0); TT_DEBIAS_VECTOR (adaptive codec
                                 * only): the weights as trained and one float16 scale per
                                 * vector on its positions below 8 bits, 2 bytes a vector in
                                 * vscale.tt (doc/format.md, "Per-vector residual scales") */
    uint32_t shards;            /* 0 or 1 (default): one index directory. S >= 2 (at most
                                 * 4096, at most the number of documents): a sharded
                                 * index (doc/format.md, "Sharded indexes"): S index
                                 * directories out_dir/shard-NNNN, shard s holding the
                                 * documents [D*s/S, D*(s+1)/S) encoded with the one
                                 * codebook trained on the whole input (the same as an
                                 * unsharded build's), and out_dir/SHARDS naming them;
                                 * published as one directory. force does not replace a
                                 * sharded index yet (refused: "not a tartan index") */
    const struct tt_build_group *group; /* NULL (default): this process builds alone. Else
                                 * one of a group of processes (e.g. MPI ranks:
                                 * tartan-mpi build) that build one sharded index
                                 * together; every member calls tt_build with the same
                                 * input, options and out_dir (a file system they all
                                 * see). Rank 0 checks and locks out_dir, trains the
                                 * codebook (k-means with every member when the group
                                 * has a reduce) and leaves it in the build directory; rank r
                                 * encodes shards r, r + size, ...; rank 0 writes SHARDS
                                 * and publishes once every rank succeeded. A failure
                                 * anywhere fails every member (TT_EIO "another process
                                 * of the build failed" where it did not happen) and
                                 * nothing is published. Needs shards >= 2, no codebook */
    const struct tt_sparse_set *sparse; /* NULL (default), or the documents' sparse vectors
                                 * (tt_sparse_set_load_text for BM25, _load_jsonl for
                                 * weights), record i for document i, ids equal when the
                                 * input has ids: written as the segment's sparse.tt
                                 * (doc/search.md, "Hybrid retrieval"); with shards >= 2
                                 * each shard's documents' (weights quantized with the
                                 * whole set's scales). Not with a group yet
                                 * (TT_EUNSUPPORTED) */
    const char *metadata;       /* NULL, or a JSON Lines file of document metadata
                                 * (doc/metadata.md): one object per document, in document
                                 * order or keyed by "id"; stored in the index as an SQLite
                                 * database (metadata.tt) for filtered search; with
                                 * shards >= 2 each shard gets its documents' rows
                                 * (every column) as its own metadata.tt */
    double pool_global;         /* token pooling by one cut for the whole collection
                                 * (doc/pooling.md): every document's Ward dendrogram is
                                 * cut at the one height that leaves about 1/F of all the
                                 * vectors (F > 1, e.g. 2.5), so that documents with
                                 * near-duplicate vectors pool more and the others less;
                                 * found by two extra passes over the input. 0 (default):
                                 * off. Not with pool_factor > 1. The height is stored
                                 * in the index and tt_index_add cuts new documents at
                                 * it */
} tt_build_options;

/* The members of a group build (tt_build_options.group). */
typedef struct tt_build_group {
    uint32_t rank, size;        /* this member, 0 .. size-1; rank 0 publishes */
    /* Called by every member at the same points in the same order. Returns 0 if every
     * member passed status 0 (TT_OK), else non-zero; and copies `bytes` bytes at buf
     * from rank 0 to the others (buf NULL when bytes is 0). E.g. MPI_Allreduce of the
     * statuses, then MPI_Bcast. */
    int (*sync)(void *user, int status, void *buf, size_t bytes);
    void *user;
    /* Distributed k-means (may be NULL: rank 0 then trains the codebook alone). Called
     * by every member at the same points in the same order with the same n: replaces
     * buf[0..n) by the element-wise sum (op TT_REDUCE_SUM) or maximum (TT_REDUCE_MAX)
     * of every member's buf (e.g. MPI_Allreduce of MPI_INT64_T); returns 0, or
     * non-zero if it failed (the build then fails with TT_EIO). With it, each member
     * reads its own slice of the training sample and assigns it, and each Lloyd
     * iteration sums the members' per-centroid partial sums (integers, exact): the
     * centroids are those of a one-process build, bit for bit (doc/scale.md). Flat and
     * hierarchical k-means (from 4096 centroids) alike: there each coarse cluster's
     * fine k-means runs on one member, which receives its vectors through the sum. */
    int (*reduce)(void *user, int64_t *buf, size_t n, int op);
} tt_build_group;

/* tt_build_group.reduce's operations. */
enum { TT_REDUCE_SUM = 0, TT_REDUCE_MAX = 1 };

TT_API void tt_build_options_init(tt_build_options *opt);

typedef struct tt_build_stats {
    double seconds_total, seconds_train, seconds_encode, seconds_ivf;
    uint64_t train_vectors;     /* vectors k-means was trained on */
    uint64_t heldout_vectors;   /* vectors the codec quantiles came from */
    uint32_t num_centroids;
    double heldout_mse;         /* mean squared reconstruction error on held-out vectors */
    uint64_t index_bytes;
} tt_build_stats;

/* Builds a compressed index from `in` into directory out_dir. out_dir is checked
 * before any work: its parent must exist; a symbolic link means the directory it
 * points to (the link is left as it is); a non-directory is refused. The index is
 * written into OUT.tmp-PID-RANDOM beside it and published atomically: on failure
 * nothing that opens is left at out_dir. OUT.lock, beside out_dir, is held for the
 * whole build, so a second build into the same directory fails at once (TT_EBUSY,
 * "being built by pid N"). Without force an existing out_dir is TT_EEXIST, also one
 * that appears during the build (never replaced). With force an existing index is
 * replaced atomically, only if its directory holds nothing but index files (else
 * TT_EEXIST naming the others), and survives intact if the build fails. Only files
 * tartan wrote are ever removed (doc/format.md, "Publishing and removal").
 * Errors: any input error, TT_EEXIST, TT_EBUSY, TT_ENOTFOUND, TT_EIO, TT_ENOSPC,
 * TT_EVALUE, TT_ENOMEM, TT_ECANCELED. */
TT_API int tt_build(const char *out_dir, tt_input *in, const tt_build_options *opt,
                    tt_build_stats *stats /* may be NULL */);

/* ------------------------------------------------------------------ index */

typedef struct tt_index tt_index;

enum { TT_IO_AUTO = 0, TT_IO_URING = 1, TT_IO_MMAP = 2 };

typedef struct tt_open_options {
    uint32_t struct_size;
    int io;          /* TT_IO_AUTO (default: io_uring if it can be set up, else mmap) */
    int direct;      /* O_DIRECT residual reads with aligned buffers (io_uring only) */
    int queue_depth; /* io_uring reads in flight per search context (default 64) */
} tt_open_options;

TT_API void tt_open_options_init(tt_open_options *opt);

/* Opens an index read-only. Checks the manifest, every file's header checksum and
 * size, the payload checksums of the files search keeps in memory (all but the
 * residuals and the originals: 0.8 ms of a 10 ms open for a million 128-d vectors,
 * doc/benchmarks.md), structural invariants, and that centroids and codec tables are
 * finite.
 * Small structures are mmap'd; residuals are read per query. One open index may be
 * shared by any number of threads. Errors: TT_ENOTFOUND, TT_EFORMAT, TT_EVERSION,
 * TT_ECORRUPT (naming the file), TT_EIO, TT_ENOMEM. */
TT_API int tt_index_open(tt_index **out, const char *dir, const tt_open_options *opt);
TT_API void tt_index_close(tt_index *idx);

typedef struct tt_index_info {
    uint32_t format_version;
    uint32_t dim, nbits, num_centroids;
    uint64_t num_docs, num_vectors;
    int normalized, codec_tables, keep_originals;
    int has_ids;                      /* 1: ids from the build's ids file; 0: row numbers */
    int io;                           /* residual I/O path in use (TT_IO_URING / TT_IO_MMAP) */
    /* bytes on disk by component (bytes_doclens: with the lengths before pooling) */
    uint64_t bytes_meta, bytes_centroids, bytes_codec, bytes_doclens, bytes_codes,
             bytes_residuals, bytes_ivf, bytes_ids, bytes_originals, bytes_manifest;
    uint64_t bytes_index;             /* everything except the kept originals (sparse
                                       * postings, metadata and tune.tt included) */
    uint64_t bytes_f16, bytes_f32;    /* size of the uncompressed vectors */
    double bits_per_dim;              /* index bits per stored dimension (excl. originals) */
    double ratio_f16, ratio_f32;      /* uncompressed size / index size */
    uint64_t resident_bytes;          /* memory search keeps (everything but residuals/originals) */
    /* build parameters */
    uint64_t seed, train_vectors, heldout_vectors;
    uint32_t kmeans_iters, threads;
    int assign;
    double sample_factor, build_seconds, heldout_mse;
    char encoder[256];
    char created[32];                 /* ISO 8601 UTC */
    char tartan_version[16];
    /* the living index (doc/format.md, "Generations and segments") */
    uint64_t generation;              /* of this snapshot; 0: a format-1 index */
    uint32_t num_segments;
    uint64_t num_deleted;             /* deleted rows; num_docs - num_deleted are live */
    uint64_t bytes_idmap, bytes_tombs;/* id lookup tables; deletion lists */
    uint64_t added_vectors;           /* vectors added since training whose error was measured */
    double added_mse;                 /* their mean squared residual reconstruction error */
    double drift;                     /* added_mse / heldout_mse (0: nothing added) */
    int retrain_advised;              /* drift makes compression measurably worse: consider
                                       * tt_index_compact with retrain (TT_DRIFT_RETRAIN) */
    /* the codec */
    int lloyd_max_rounds;             /* refinement rounds of its tables (0: quantiles) */
    uint32_t dims_by_width[9];        /* dimensions coded with 0..8 bits (adaptive: the
                                       * allocation; otherwise all at nbits) */
    /* token pooling (doc/pooling.md) */
    uint32_t pool_factor;             /* the index's: what tt_index_add pools with by default
                                       * (1: not pooled) */
    uint64_t input_vectors;           /* the documents' vectors before pooling (all rows, as
                                       * num_vectors counts them after) */
    int debias;                       /* tt_debias: TT_DEBIAS_TABLE, the codec's weights are
                                       * debiased; TT_DEBIAS_VECTOR, one scale per vector */
    /* the residual sketch (doc/search.md, "Residual sketch") */
    uint32_t sketch_bytes;            /* per vector, kept in RAM for PLAID's centroid
                                       * stages; 0: none */
    uint64_t bytes_sketch;            /* the sketch.tt files (counted in bytes_index) */
    uint64_t bytes_vscale;            /* the vscale.tt files, 2 bytes a vector with
                                       * TT_DEBIAS_VECTOR (counted in bytes_index) */
    /* The generation's other files, counted in bytes_index (and resident_bytes: they
     * are mapped whole); bits_per_dim and ratio_f16/f32 stay those of the dense part,
     * bytes_index minus these three. */
    uint64_t bytes_sparse;            /* every segment's sparse.tt, and vocab.tt
                                       * (tt_sparse_info.bytes) */
    uint64_t bytes_metadata;          /* metadata.tt, the SQLite metadata database */
    uint64_t bytes_tune;              /* tune.tt, the calibrated search parameters */
    /* token pooling by one cut (tt_build_options.pool_global): the factor asked for and
     * the height every document was cut at (0, 0: not pooled so) */
    double pool_global, pool_threshold;
} tt_index_info;

/* Drift (added_mse / heldout_mse) at which tt_index_info advises retraining: residuals
 * of added documents that compress 25% worse than the build's held-out ones. */
#define TT_DRIFT_RETRAIN 1.25

TT_API int tt_index_get_info(const tt_index *idx, tt_index_info *out);

/* One segment of the snapshot (0 <= i < num_segments), in row order. */
typedef struct tt_segment_info {
    uint64_t id;                      /* the generation that wrote it; 0: a build's */
    uint64_t first_doc, num_docs, num_vectors, num_deleted;
    uint64_t bytes;                   /* its files (originals excluded) */
    uint64_t added_vectors;           /* vectors added since the codebook was trained, whose
                                       * residual error was measured (an add's; a compaction
                                       * that keeps the codebook keeps its sources' live
                                       * share; 0 for builds and retraining compactions) */
    double added_mse;
} tt_segment_info;

/* Errors: TT_EINVAL (NULL, i out of range). */
TT_API int tt_index_segment_info(const tt_index *idx, uint32_t i, tt_segment_info *out);
/* External id of document `doc` (0-based row): the build's ids file line, or the row
 * number as text. The pointer is valid until tt_index_close and thread-safe; the id is
 * not NUL-terminated (len receives its length). NULL, with TT_EINVAL as the last
 * error, when doc >= num_docs. */
TT_API const char *tt_index_doc_id(const tt_index *idx, uint64_t doc, size_t *len);

/* Path of the index file whose mapping holds addr, or NULL. Reads only fields fixed
 * at open: safe in a SIGBUS handler (an index file truncated under a mapping faults on
 * access; tartan search reports it through this). */
TT_API const char *tt_index_file_at(const tt_index *idx, const void *addr);

/* Re-checks every checksum and structural invariant of the index at dir, and that the
 * kept originals are finite. Returns TT_OK, or the first problem found with a message
 * naming the file. */
TT_API int tt_index_verify(const char *dir, tt_progress_fn progress, void *user);

/* --------------------------------------------------------- changing an index */

/* An index changes by generations (doc/format.md, "Generations and segments"): an add
 * writes a new segment, a delete a list of deleted documents, a compaction one segment
 * in place of all; each publishes the next generation atomically (the manifest is
 * written aside, fsynced and renamed). An open tt_index is a snapshot: it keeps
 * searching the generation it opened while a change publishes the next, and sees it
 * once reopened. One writer at a time: each change holds DIR/LOCK (flock) while it
 * runs, and a second one fails at once with TT_EBUSY ("being modified by pid N").
 * Readers take no lock. A killed or failed change leaves the previous generation as it
 * was; the files it left are removed by the next change. External ids are never
 * renumbered; the rows of surviving documents change only at compaction. */
typedef struct tt_change_options {
    uint32_t struct_size;       /* set by tt_change_options_init */
    int upsert;                 /* add: an id already in the index is replaced (deleted and
                                 * added in the same generation); 0: refused (TT_EEXIST) */
    int strict;                 /* delete: an id not in the index is an error (TT_ENOTFOUND)
                                 * instead of being counted in stats->unknown */
    int retrain;                /* compact: re-run k-means and train the codec over a sample
                                 * of the live documents, then re-encode them all (from the
                                 * kept originals, else from the decompressed vectors) */
    int threads;                /* 0: every CPU */
    uint64_t memory_bytes;      /* working-memory budget (default 2 GiB) */
    tt_progress_fn progress;    /* may be NULL */
    void *progress_user;
    const volatile int *cancel; /* may be NULL; set: the change stops with TT_ECANCELED and
                                 * publishes nothing */
    int pool_factor;            /* add: token pooling factor of the new documents
                                 * (tt_build_options.pool_factor); 0 (default): the index's
                                 * own (1 for indexes built before pooling existed; an
                                 * index pooled by one cut cuts them at its height). A
                                 * compaction never pools again: it keeps pooled vectors as
                                 * they are, and retraining re-encodes them */
    const struct tt_sparse_set *sparse; /* add: the new documents' sparse vectors, required
                                 * when the index has sparse postings and refused when it
                                 * has none (as tt_build_options.sparse); a compaction
                                 * merges the segments' postings itself */
    const char *metadata;       /* add: NULL, or a JSON Lines file of the new documents'
                                 * metadata (as tt_build_options.metadata). Without it, an
                                 * index that has metadata gets rows of NULLs for them */
} tt_change_options;

TT_API void tt_change_options_init(tt_change_options *opt);

typedef struct tt_change_stats {
    uint64_t generation;        /* the one published (unchanged when nothing changed) */
    uint64_t added;             /* documents added */
    uint64_t replaced;          /* of those, replacing a document with the same id (upsert) */
    uint64_t deleted;           /* documents deleted */
    uint64_t unknown;           /* delete: ids not in the index (or deleted already) */
    uint64_t live_docs;         /* live documents after the change */
    uint64_t segments;          /* segments after the change */
    double added_mse;           /* add: residual error of the added vectors (drift's measure) */
    double seconds;
} tt_change_stats;

/* Adds the documents of `in` to the index at dir as a new segment, encoded with the
 * index's centroids and codec (no training; vectors are normalised as the index's
 * were, and token-pooled with opt->pool_factor, else the index's factor). Ids come from
 * in's ids file: one already in the index is TT_EEXIST naming it,
 * unless opt->upsert. Without ids, new documents get decimal ids counting up from the
 * index's next free number, skipping any id ever used. Streams like tt_build: memory
 * is bounded by opt->memory_bytes. stats may be NULL.
 * Errors: those of tt_build's input, TT_EDIM (dimension), TT_EEXIST, TT_EBUSY,
 * TT_ENOTFOUND (no index), TT_ECORRUPT, TT_EIO, TT_ENOSPC, TT_ECANCELED. */
TT_API int tt_index_add(const char *dir, tt_input *in, const tt_change_options *opt,
                        tt_change_stats *stats);
/* Deletes the documents with the n given ids (each NUL-terminated). Work is
 * proportional to n (a binary search per id in each segment's id map) and to the
 * deletions since the last compaction, not to the index. Ids not in the index are
 * counted in stats->unknown, or TT_ENOTFOUND with opt->strict. Nothing deleted: no new
 * generation. Errors: TT_EINVAL, TT_ENOTFOUND, TT_EBUSY, TT_ECORRUPT, TT_EIO, TT_ENOSPC. */
TT_API int tt_index_delete(const char *dir, const char *const *ids, size_t n,
                           const tt_change_options *opt, tt_change_stats *stats);
/* Merges every segment into one, leaving out deleted documents: the live documents in
 * row order with their codes, residuals and ids as they were, and a new IVF, exactly
 * what a build over the same documents with this codebook writes. With opt->retrain, a
 * new codebook is trained first (doc/format.md). Pooled documents stay as they are (a
 * retraining re-encodes their pooled vectors; nothing is pooled twice). Streams segment
 * by segment.
 * Errors: TT_EBUSY, TT_ECORRUPT, TT_EIO, TT_ENOSPC, TT_ENOMEM, TT_ECANCELED. */
TT_API int tt_index_compact(const char *dir, const tt_change_options *opt,
                            tt_change_stats *stats);

/* ------------------------------------------------------------- resharding */

/* Options of tt_index_reshard; zero means the default (tt_reshard_options_init). */
typedef struct tt_reshard_options {
    uint32_t struct_size;       /* set by tt_reshard_options_init */
    int force;                  /* replace an existing index at out_dir (only tartan's own
                                 * files are removed, as tt_build_options.force) */
    int threads;                /* 0: every CPU */
    uint64_t memory_bytes;      /* working-memory budget (default 2 GiB) */
    tt_progress_fn progress;    /* may be NULL */
    void *progress_user;
    const volatile int *cancel; /* may be NULL; set: TT_ECANCELED, nothing published */
} tt_reshard_options;

TT_API void tt_reshard_options_init(tt_reshard_options *opt);

/* Re-partitions the index at dir (sharded: tartan build --shards; or plain) into
 * `shards` shards (1: a plain index) written to out_dir, without re-encoding: the live
 * documents of every source shard, in their global row order, are cut into `shards`
 * consecutive ranges of about equal document counts, and each new shard gets the
 * source's codebook (centroids and codec, byte for byte) and one segment whose codes,
 * residuals, originals, ids and lengths are copied document by document; its IVF is
 * rebuilt. Deleted documents are left out. The source is only read (the writer lock of
 * each of its parts is held during the copy, so no change runs meanwhile); out_dir is
 * written and published as tt_build writes an index (OUT.tmp-*, atomic rename; without
 * force an existing out_dir is TT_EEXIST; with force only a plain index's own files are
 * replaced). Metadata is copied with the documents (each new shard's metadata.tt holds its
 * documents' rows; columns merged by name, a column of two incompatible types is
 * TT_EUNSUPPORTED), and each new shard gets the calibration (tune.tt) of the source
 * part holding most of its documents. Sparse postings (every source part has them, or
 * none) follow their documents: each new shard's sparse.tt holds its documents' BM25
 * counts and lengths, or quantized weights with the scale each term had in the source
 * (so sparse and hybrid runs equal the source's), and every new shard keeps the stored
 * vocabulary (vocab.tt; the source parts must share it, else TT_ECORRUPT).
 * Errors: TT_EINVAL (shards 0 or > 4096, fewer live documents than shards, out_dir the
 * source), TT_ENOTFOUND, TT_ECORRUPT (naming the damaged file), TT_EBUSY, TT_EEXIST,
 * TT_EIO, TT_ENOSPC, TT_ENOMEM, TT_ECANCELED, TT_EUNSUPPORTED. */
TT_API int tt_index_reshard(const char *dir, uint32_t shards, const char *out_dir,
                            const tt_reshard_options *opt);

/* ----------------------------------------------------------------- search */

enum { TT_MODE_PLAID = 0, TT_MODE_EXHAUSTIVE = 1, TT_MODE_EXACT = 2 };
enum { TT_SCORE_SUM = 0, TT_SCORE_MEAN = 1 };
/* PLAID stage-2 pruning (doc/search.md, "Pruning"). AUTO: ABSOLUTE when threshold is
 * set (not NaN), else RELATIVE. ABSOLUTE: ColBERTv2's rule, a centroid counts if its
 * best score over the query vectors reaches `threshold` (NaN: ColBERTv2's value by k).
 * RELATIVE: a centroid counts if, for some query vector i, its score reaches
 * top_i - (1 - prune_ratio) * |top_i|, top_i being that query vector's best centroid
 * score: the rule does not depend on the scale of the scores. */
enum { TT_PRUNE_AUTO = 0, TT_PRUNE_ABSOLUTE = 1, TT_PRUNE_RELATIVE = 2 };
/* PLAID stage 4 depth. FIXED (ColBERTv2): the max(ndocs/4, k) best documents of stage 3
 * are scored. ADAPTIVE: those first; then, best stage-3 score first, the next batches of
 * as many documents, for as long as a document's stage-3 score plus the largest
 * (decompressed - stage-3) difference seen in this query could still enter the top k;
 * at most ndocs in all (doc/search.md, "Stage-4 depth"). */
enum { TT_RERANK_ADAPTIVE = 0, TT_RERANK_FIXED = 1 };

typedef struct tt_search_options {
    uint32_t struct_size;
    int mode;            /* TT_MODE_PLAID (default), _EXHAUSTIVE, _EXACT */
    int nprobe;          /* centroids probed per query vector; 0: default by k */
    float threshold;     /* absolute centroid score pruning threshold; NaN: see pruning */
    uint32_t ndocs;      /* candidates kept after stage 2; 0: default by k; below k: k */
    int score;           /* TT_SCORE_SUM (ColBERT) or TT_SCORE_MEAN (DiffRetriever Eq. 2) */
    /* Appended after score: a caller built against an older tartan.h passes a smaller
     * struct_size and gets the defaults of these. */
    int pruning;         /* TT_PRUNE_AUTO (default), _ABSOLUTE or _RELATIVE */
    float prune_ratio;   /* RELATIVE: in [0, 1]; NaN: the default (0.5) */
    int rerank;          /* TT_RERANK_ADAPTIVE (default) or TT_RERANK_FIXED */
    int tuned;           /* 1 (default): nprobe, ndocs, prune_ratio and rerank_margin
                          * left at their defaults take the index's calibrated values
                          * (tt_index_tune) when it has them; 0: ColBERTv2's table by k */
    float rerank_margin; /* ADAPTIVE: standard deviations of the query's stage-3 error
                          * added to its mean when deciding whether a document could
                          * still enter the top k (>= 0; NaN: the default, 1) */
    /* Appended after rerank (filtered search, doc/search.md "Filters"). */
    const struct tt_filter *filter; /* NULL, or the allowed rows (a tt_filter over the
                         * index's num_docs rows, not owned): no other document counts in
                         * any stage, and a search returns min(k, allowed live) hits */
    uint64_t filter_direct_max; /* PLAID with a filter: at most this many allowed live
                         * documents are scored directly (centroid interaction over all of
                         * them, then decompressed MaxSim over the best) instead of through
                         * the IVF; 0: the default crossover, sqrt(TT_FILTER_DIRECT_MUL *
                         * ndocs * live documents) (doc/search.md, "Filters") */
    /* Appended after filter_direct_max (doc/search.md, "Residual sketch"). */
    int sketch;          /* 1: where the index has a residual sketch, PLAID's centroid
                          * stages score each vector as <q, c> plus <q, r> over the
                          * sketched positions; 0: centroid scores alone (PLAID as
                          * published); -1 (default): the index's calibrated choice
                          * (tt_index_tune measures both), else 1 */
    /* Appended after sketch (doc/search.md, "Centroid groups"). */
    int centroid_groups; /* PLAID stage 1 on an index with centroid groups (stored by
                          * tt_index_tune): N >= 1 scores the centroids of each query
                          * vector's N best groups and gives every other centroid its
                          * group's score; 0: every centroid scored; -1 (default): the
                          * index's calibrated choice, else 0. An index without groups
                          * scores every centroid whatever this says */
} tt_search_options;

/* The default crossover of filtered PLAID search: the direct plan costs about the
 * allowed count A, the IVF plan about the lists probed to find ndocs allowed candidates,
 * ndocs * live / A; they meet at A = sqrt(TT_FILTER_DIRECT_MUL * ndocs * live), with the
 * factor measured on 300k documents (doc/benchmarks.md, "Filtered search"). */
#define TT_FILTER_DIRECT_MUL 2

TT_API void tt_search_options_init(tt_search_options *opt);

/* Per-thread scratch space (and io_uring ring) for searches on one index. */
typedef struct tt_search_ctx tt_search_ctx;
TT_API int tt_search_ctx_new(const tt_index *idx, tt_search_ctx **out);
TT_API void tt_search_ctx_free(tt_search_ctx *ctx);

typedef struct tt_hit {
    uint64_t doc;  /* 0-based document row; see tt_index_doc_id */
    float score;
} tt_hit;

/* Searches one query of nq vectors (Q is nq * dim floats, row-major). Writes
 * min(k, num_docs) hits, best first, to hits (size k) and their count to *nhits.
 * opt may be NULL (the defaults). Errors: TT_EINVAL (k == 0, nq == 0, NULL, options with
 * a struct_size of another version, a negative nprobe, an unknown mode), TT_EVALUE
 * (NaN/Inf in Q), TT_EUNSUPPORTED (exact mode on an index without originals), TT_EIO,
 * TT_ECORRUPT (a residual or original read back damaged or short). */
TT_API int tt_search(const tt_index *idx, tt_search_ctx *ctx, const float *Q, uint32_t nq,
                     uint32_t k, const tt_search_options *opt, tt_hit *hits, uint32_t *nhits);

/* Searches nqueries queries on `threads` threads (0: all CPUs). Query i has qlens[i]
 * vectors starting at Q + qoffs[i]*dim. hits is nqueries*k; nhits is nqueries;
 * seconds (may be NULL) receives each query's latency. Results equal serial ones. In
 * exhaustive and exact modes without seconds, the queries share one pass over the
 * index (each document read and decoded or converted once, scored against all of them;
 * with opt->filter, only the documents it allows). */
TT_API int tt_search_batch(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                           const uint32_t *qlens, uint64_t nqueries, uint32_t k,
                           const tt_search_options *opt, int threads, tt_hit *hits,
                           uint32_t *nhits, double *seconds);

/* ------------------------------------------------------- sharded indexes */

/* A sharded index (tt_build_options.shards >= 2; doc/format.md, "Sharded indexes") is
 * a directory holding SHARDS and the shards shard-0000 ... shard-NNNN, each an ordinary
 * index (tt_index_open, tt_index_verify, tt_search work on one alone) with a
 * contiguous range of the documents, all sharing one codebook. Its rows are the
 * shards' rows laid end to end: shard s's row r is global row first_row(s) + r. A
 * search of several shards searches each with tt_search_batch and merges the per-shard
 * top-k lists by the total order of one search (higher score, then lower global row):
 * in exhaustive and exact modes the result equals the unsharded index's; in PLAID mode
 * each shard chooses its own candidates (what MPI ranks serving the shards do too). */
typedef struct tt_sharded tt_sharded;

/* 1 if dir holds a sharded index (a SHARDS file), else 0. */
TT_API int tt_index_is_sharded(const char *dir);
/* Opens the shards s of the sharded index at dir with s % nranks == rank (rank 0 of 1:
 * every shard), checking each against SHARDS (its documents and the shared codebook).
 * A plain index opens as one shard (rank 0 opens it; other ranks open nothing). opt as
 * tt_index_open. Errors: TT_EINVAL (NULL, rank >= nranks), those of tt_index_open, and
 * TT_ECORRUPT (SHARDS damaged, a shard changed after the build). */
TT_API int tt_sharded_open(tt_sharded **out, const char *dir, const tt_open_options *opt,
                           uint32_t rank, uint32_t nranks);
TT_API void tt_sharded_close(tt_sharded *sh);
TT_API uint32_t tt_sharded_num_shards(const tt_sharded *sh); /* in the index */
TT_API uint32_t tt_sharded_num_open(const tt_sharded *sh);   /* opened by this call */
TT_API uint64_t tt_sharded_num_docs(const tt_sharded *sh);   /* rows of every shard */
/* The i-th open shard (0 <= i < num_open, ascending shard numbers): its index, and (may
 * be NULL) its number and first global row. NULL with TT_EINVAL when i is out of range.
 * Owned by sh. */
TT_API const tt_index *tt_sharded_shard(const tt_sharded *sh, uint32_t i, uint32_t *shard,
                                        uint64_t *first_row);
/* The id of global row `row`, as tt_index_doc_id; NULL (TT_EINVAL) when the row is
 * beyond the index or in a shard this process did not open. */
TT_API const char *tt_sharded_doc_id(const tt_sharded *sh, uint64_t row, size_t *len);
/* tt_search_batch over the open shards: per query, each shard's top k, rows made
 * global, merged into the best k (hits nq*k, nhits nq; seconds, may be NULL: each
 * query's latency summed over the shards). opt->filter, when set, is over the GLOBAL
 * rows (tt_sharded_num_docs of them; e.g. tt_filter_from_ids on each shard, rows offset
 * by its first row): each shard searches with its own rows' part of it.
 * Errors: those of tt_search_batch; TT_EINVAL (a filter over another number of rows). */
TT_API int tt_sharded_search_batch(const tt_sharded *sh, const float *Q,
                                   const uint64_t *qoffs, const uint32_t *qlens, uint64_t nq,
                                   uint32_t k, const tt_search_options *opt, int threads,
                                   tt_hit *hits, uint32_t *nhits, double *seconds);
/* Merges nlists hit lists, each sorted best first by (higher score, then lower doc) and
 * over disjoint documents, into the best k of them in that order (out: k entries).
 * Returns how many were written (min(k, sum of counts)); UINT32_MAX if out of memory
 * (more than 64 lists). */
TT_API uint32_t tt_hits_merge(const tt_hit *const *lists, const uint32_t *counts,
                              uint32_t nlists, uint32_t k, tt_hit *out);

/* ------------------------------------------------------ search (more) */

/* Residual path of a context whose io_uring ring could not be set up although the
 * index chose io_uring (synchronous pread; see tt_search_stats.io_note). */
enum { TT_IO_PREAD = 3 };

/* The parameters a search with these options and k really uses: nprobe and ndocs
 * defaults by k filled in (ColBERTv2: k <= 10: 1, 256; k <= 100: 2, 1024; larger: 4,
 * max(4k, 4096)), ndocs raised to k when below it (so that a search returns k hits),
 * pruning resolved to TT_PRUNE_ABSOLUTE or TT_PRUNE_RELATIVE; ABSOLUTE gets the
 * threshold (ColBERTv2's by k when NaN: 0.5, 0.45, 0.4) and RELATIVE its prune_ratio
 * (threshold stays NaN). opt may be NULL (defaults). */
TT_API void tt_search_options_resolve(const tt_search_options *opt, uint32_t k,
                                      tt_search_options *out);
/* The same for a search of idx: where opt leaves nprobe, ndocs or prune_ratio at their
 * defaults (0, 0, NaN, NaN), opt->tuned is set and idx has calibrated parameters
 * (tt_index_tuned), those fields take them (k <= 10: the k = 10 set; k <= 100: the
 * k = 100 set; larger k: the k = 100 set with ndocs scaled by k / 100, never below
 * the table's). An explicit threshold (absolute pruning) keeps its own rule; nprobe
 * and ndocs may still come from the calibration. Where the calibration chose
 * exhaustive search (tt_tuned.exhaustive) and opt sets none of PLAID's parameters,
 * out->mode is TT_MODE_EXHAUSTIVE. Returns how many fields came from the calibration
 * (0: none; the parameters are ColBERTv2's table and the caller's). */
TT_API int tt_search_options_resolve_index(const tt_index *idx, const tt_search_options *opt,
                                           uint32_t k, tt_search_options *out);
/* The same for a query of nq vectors: a calibration with short-query sets
 * (tt_tune_info.short_len) gives them to queries of at most 2 * short_len vectors
 * (nq 0: the long sets, as tt_search_options_resolve_index). tt_search uses this. */
TT_API int tt_search_options_resolve_query(const tt_index *idx, const tt_search_options *opt,
                                           uint32_t k, uint32_t nq, tt_search_options *out);

/* Counters of one search context since it was created or last reset. */
typedef struct tt_search_stats {
    uint64_t queries;       /* searches run */
    uint64_t candidates;    /* documents from the probed IVF lists (PLAID stage 1) */
    uint64_t stage2_docs;   /* documents scored by pruned centroid interaction (stage 2) */
    uint64_t stage3_docs;   /* documents scored by full centroid interaction (stage 3) */
    uint64_t scored_docs;   /* documents scored by decompressed (or exact) MaxSim */
    uint64_t bytes_read;    /* residual bytes read from the file (mmap: bytes touched) */
    uint64_t reads;         /* read requests issued (io_uring, pread; 0 with mmap) */
    double seconds[4];      /* time in stage 1 (Q·Cᵀ, IVF), 2, 3, 4 (fetch + MaxSim) */
    double seconds_fetch;   /* part of stage 4 (or of a scan) spent waiting for residual reads */
    int io;                 /* TT_IO_URING, TT_IO_MMAP or TT_IO_PREAD */
    char io_note[160];      /* why this context does not use io_uring, or "" */
    uint64_t centroids_scored; /* centroids given their own score in stage 1 (the others
                            * their group's; doc/search.md, "Centroid groups") */
    uint64_t rescored_docs; /* of scored_docs, those ranked by the residual lookup tables
                            * and then scored exactly (doc/search.md, "Stage 4 through
                            * lookup tables") */
} tt_search_stats;

/* Errors: TT_EINVAL (NULL). */
TT_API int tt_search_ctx_stats(const tt_search_ctx *ctx, tt_search_stats *out);
TT_API void tt_search_ctx_reset_stats(tt_search_ctx *ctx);

/* ------------------------------------------------------ calibrated defaults */

/* Search parameters measured for one k (doc/search.md, "Calibrated defaults"). */
typedef struct tt_tuned {
    uint32_t k;            /* 10 or 100 */
    int nprobe;
    uint32_t ndocs;
    float prune_ratio;     /* relative pruning */
    float rerank_margin;   /* adaptive stage-4 depth */
    double recall;         /* mean recall@k against exhaustive search on the calibration
                            * queries, with these parameters */
    double ms;             /* their mean CPU time per query (ms, one thread), as measured */
    int reached;           /* recall and first reach the target; 0: the best recall the
                            * grid had */
    int sketch;            /* 1: with the index's residual sketch (or it has none); 0: the
                            * calibration found search better without it */
    /* Appended in library version 2:0:0: exhaustive search as a calibrated choice. */
    int exhaustive;        /* 1: exhaustive search measured cheaper than every PLAID set
                            * that reaches the target (or none reached it): a search that
                            * sets none of nprobe, ndocs, threshold and prune_ratio scans
                            * the index exhaustively (exact ranking of the compressed
                            * vectors); the PLAID fields above serve searches that set some */
    double exhaustive_ms;  /* exhaustive search's CPU time per query (ms, one thread) when
                            * exhaustive is 1, else 0 */
    /* Appended in library version 3:0:0 (doc/search.md, "Centroid groups"). */
    uint32_t centroid_groups; /* groups probed per query vector in stage 1 (0: every
                            * centroid scored): tt_search_options.centroid_groups */
    /* Appended in library version 6:0:0 (doc/search.md, "Calibrated defaults"). */
    double first;          /* share of the calibration queries whose first document by
                            * exhaustive search is in these parameters' top k (reached
                            * needs it at the target too); -1: not measured (a tune.tt
                            * written before it was) */
} tt_tuned;

/* An index's calibration (tune.tt), as tt_index_tune measured it. */
typedef struct tt_tune_info {
    int tuned;             /* 0: the index has none (search uses ColBERTv2's table) */
    int pseudo;            /* 1: pseudo-queries made from the index's documents; 0: the
                            * caller's queries */
    uint32_t num_queries;  /* calibration queries */
    uint32_t query_len;    /* vectors per pseudo-query (0 with the caller's queries) */
    double noise;          /* pseudo-queries: relative noise added to document vectors */
    double target;         /* target recall */
    uint64_t seed;
    uint64_t live_docs;    /* live documents when measured */
    uint64_t generation;   /* the generation measured */
    int cost;              /* TT_TUNE_COST_TIME or TT_TUNE_COST_WORK */
    tt_tuned k10, k100;
    /* Short queries: with ColBERT-length pseudo-queries (more than 2 * TT_TUNE_SHORT_LEN
     * vectors), the calibration also measures pseudo-queries of short_len vectors
     * (TT_TUNE_SHORT_LEN), whose sets serve queries of at most 2 * short_len vectors
     * (a lexical or unpadded encoder's queries: fewer vectors, more near-ties, a deeper
     * search for the same recall). 0: none (the long sets serve every query). */
    uint32_t short_len;
    tt_tuned k10_short, k100_short;
    uint32_t centroid_groups; /* groups of centroids stored with the calibration (0: none;
                            * then every set's centroid_groups is 0) */
} tt_tune_info;

enum { TT_TUNE_SHORT_LEN = 8 };

/* Errors: TT_EINVAL (NULL). out->tuned = 0 for an index without calibration. */
TT_API int tt_index_tuned(const tt_index *idx, tt_tune_info *out);

/* How candidate parameter sets are compared: by measured time per query (the searching
 * thread's CPU time, robust to other processes' load; default: the choice among sets
 * that all reach the target can still differ between runs), or by a
 * deterministic count of the work a search did (documents and vectors scored, weighted
 * by their per-item cost on this code path: the same choice on every run). */
enum { TT_TUNE_COST_TIME = 0, TT_TUNE_COST_WORK = 1 };

typedef struct tt_tune_options {
    uint32_t struct_size;    /* set by tt_tune_options_init */
    double target_recall;    /* recall@k against exhaustive to reach; default 0.95 */
    /* Calibration queries: the caller's (Q, qoffs, qlens, nqueries as tt_search_batch
     * takes them; Q may be NULL), else pseudo-queries: num_queries (default 64) random
     * live documents, query_len of each one's decompressed vectors (with repeats when it
     * has fewer; 0: 4 when the documents hold at most 16 vectors each and dim >= 1024,
     * the DiffRetriever shape, else 32, ColBERT's), each moved by Gaussian noise of
     * `noise` times its norm (NaN, the default: 0.5) and renormalised when the index
     * is; pseudo-queries of more than 8 vectors take half of them from other random
     * documents, shorter ones all from their document (doc/search.md). */
    const float *Q;
    const uint64_t *qoffs;
    const uint32_t *qlens;
    uint64_t nqueries;
    uint32_t num_queries;
    uint32_t query_len;
    float noise;
    uint64_t seed;           /* pseudo-queries (default 42) */
    int threads;             /* threads (0: every CPU) of the exhaustive reference and
                              * of the measurements, each timing its own CPU */
    int cost;                /* TT_TUNE_COST_TIME (default) or TT_TUNE_COST_WORK */
    int if_stale;            /* 1: re-check (what tartan add does): nothing happens
                              * unless the index has changed by a quarter of its live
                              * documents since it was calibrated, or drifted
                              * (retrain_advised); then the stored parameters are
                              * measured on the new calibration queries and kept when
                              * they still reach the target (republished with the new
                              * figures), else re-tuned. An index without calibration
                              * is tuned */
    tt_progress_fn progress; /* may be NULL */
    void *progress_user;
    const volatile int *cancel; /* may be NULL: set, the tuning stops with TT_ECANCELED */
    int io;                  /* how the measured searches read residuals: TT_IO_AUTO
                              * (default), TT_IO_URING or TT_IO_MMAP (tt_open_options) */
} tt_tune_options;

TT_API void tt_tune_options_init(tt_tune_options *opt);

/* Calibrates PLAID's parameters for the index at dir (doc/search.md, "Calibrated
 * defaults"): the exact top 100 of every calibration query by exhaustive search; then,
 * over a grid of nprobe (1..32), ndocs (k..8192) and the adaptive stage-4 margin (1, 2,
 * 4 standard deviations) with relative pruning, the cheapest set
 * (by opt->cost) whose recall@k against it reaches the target, for k = 10 and k = 100;
 * the best-recall set when none does. Publishes them as tune.tt in the next generation
 * (a change: it holds DIR/LOCK while it measures), where tt_search and
 * tt_search_options_resolve_index find them. out (may be NULL) receives what was
 * stored (with if_stale and nothing due: the stored calibration, unchanged; its
 * generation tells which).
 * Errors: TT_EINVAL (options, queries of another dimension), TT_EVALUE (NaN in Q),
 * TT_ENOTFOUND, TT_EBUSY, TT_ECORRUPT, TT_EIO, TT_ENOSPC, TT_ENOMEM, TT_ECANCELED. */
TT_API int tt_index_tune(const char *dir, const tt_tune_options *opt, tt_tune_info *out);

/* Threads the BLAS library (OpenBLAS) may use inside one sgemm call, process-wide.
 * Search threads come from tt_search_batch; BLAS threads on top of them oversubscribe
 * the cores, so callers that run searches in parallel (tartan search does) set 1.
 * Returns TT_OK, or TT_EUNSUPPORTED when the linked BLAS has no such control. */
TT_API int tt_blas_set_threads(int n);

/* Query vectors loaded from NumPy files: a 3-D float32/float16 array
 * [num_queries, Kq, dim] (every query has Kq vectors), or a 2-D array
 * [num_vectors, dim] plus qlens_path, a 1-D integer array of vectors per query (their
 * sum must be num_vectors). With a 3-D array, qlens (num_queries values <= Kq) selects
 * the first qlens[i] vectors of each padded query. ids_path (may be NULL) holds one
 * query id per line; the default id is the query's row number. Every vector is
 * checked to be finite. Read-only after loading; free with tt_queries_free. */
typedef struct tt_queries {
    char *path;             /* the vector file */
    uint64_t num_queries;
    uint32_t dim;
    uint64_t num_vectors;   /* rows in `vectors` */
    float *vectors;         /* num_vectors * dim, row-major */
    uint64_t *offsets;      /* num_queries: first row of each query in `vectors` */
    uint32_t *lens;         /* num_queries: vectors per query (>= 1) */
    char **ids;             /* num_queries NUL-terminated ids */
} tt_queries;

/* Query vectors: .npy float32, float16 or float64 (narrowed to float32; a value
 * beyond float32's range becomes inf and is refused as such). Query lengths: .npy 1-D
 * of any integer dtype, int8 to int64 or uint8 to uint64.
 * Errors: TT_ENOTFOUND, TT_EFORMAT/TT_EUNSUPPORTED (not a float .npy of 2 or 3
 * dimensions), TT_EDIM (qlens or ids count disagree with the vectors, a qlen of 0 or
 * above Kq), TT_EVALUE (NaN/Inf: names the query number and id), TT_EPARSE, TT_EIO,
 * TT_ENOMEM. */
TT_API int tt_queries_load(tt_queries **out, const char *path, const char *qlens_path,
                           const char *ids_path);
/* Checks that the queries fit the index: TT_EDIM naming the query file and both
 * dimensions when they differ. */
TT_API int tt_queries_check(const tt_queries *q, const tt_index *idx);
TT_API void tt_queries_free(tt_queries *q);

/* ------------------------------------------------- metadata and filters */

/* A filter is a set of allowed rows (0-based document rows of one index, as tt_hit.doc
 * numbers them), a bitmap of num_rows bits: any front end can make one by hand, from
 * external ids (tt_filter_from_ids) or from SQL over the index's metadata
 * (tt_metadata_where). A search with tt_search_options.filter returns only live allowed
 * documents. A filter is only read by searches: one may be shared by threads. */
typedef struct tt_filter tt_filter;

/* An empty filter over num_rows rows (tt_index_info.num_docs). Errors: TT_EINVAL,
 * TT_ENOMEM. Free with tt_filter_free. */
TT_API int tt_filter_new(tt_filter **out, uint64_t num_rows);
TT_API void tt_filter_free(tt_filter *f);
/* Allows row. Errors: TT_EINVAL (NULL, row >= num_rows). */
TT_API int tt_filter_add(tt_filter *f, uint64_t row);
/* 1 if row is allowed, else 0 (also for NULL or a row out of range). */
TT_API int tt_filter_has(const tt_filter *f, uint64_t row);
/* Keeps in dst only the rows src allows too (both filters over the same rows: a --where
 * filter and a --filter-ids one). Errors: TT_EINVAL (NULL, different numbers of rows). */
TT_API int tt_filter_intersect(tt_filter *dst, const tt_filter *src);
/* Allowed rows, and the rows the filter is over. */
TT_API uint64_t tt_filter_count(const tt_filter *f);
TT_API uint64_t tt_filter_num_rows(const tt_filter *f);
/* The live documents whose external ids are among ids[0..n) (NUL-terminated; repeats
 * count once). *unknown (may be NULL) receives the number of distinct ids that name no
 * live document. Errors: TT_EINVAL, TT_ENOMEM. */
TT_API int tt_filter_from_ids(const tt_index *idx, const char *const *ids, size_t n,
                              tt_filter **out, uint64_t *unknown);

/* The metadata of an open index (doc/metadata.md): a read-only SQLite connection over
 * the snapshot's metadata.tt, table meta (row INTEGER PRIMARY KEY, then one column per
 * key). One handle per thread; it must be closed before the index. */
typedef struct tt_metadata tt_metadata;

/* Errors: TT_ENOTFOUND (the index has no metadata), TT_ECORRUPT, TT_ENOMEM. */
TT_API int tt_metadata_open(const tt_index *idx, tt_metadata **out);
TT_API void tt_metadata_close(tt_metadata *m);
/* Columns, in the order they first appeared; type is "integer", "real", "text",
 * "boolean" or "null" (only nulls so far). Pointers live until tt_metadata_close; NULL
 * when i is out of range. */
TT_API size_t tt_metadata_num_columns(const tt_metadata *m);
TT_API const char *tt_metadata_column(const tt_metadata *m, size_t i, const char **type);
/* The filter of the rows for which the SQL expression expr holds, evaluated by SQLite
 * as SELECT row FROM meta WHERE (expr): one statement only, read-only (only reads and
 * functions are authorised: no writes, pragmas, ATTACH, extensions or recursive
 * queries), and stopped past a bound on the work per row. Deleted documents have no
 * row. Errors: TT_EINVAL with SQLite's message (unknown column, syntax error) or the
 * reason for a refusal, TT_ENOMEM. A filter matching nothing is not an error. */
TT_API int tt_metadata_where(tt_metadata *m, const char *expr, tt_filter **out);
/* The metadata of row as a JSON object (nulls included; booleans as true/false), or
 * "null" if the row has none (a deleted document). Release *json with tt_free.
 * Errors: TT_EINVAL (row out of range), TT_ECORRUPT, TT_ENOMEM. */
TT_API int tt_metadata_json(tt_metadata *m, uint64_t row, char **json);
/* Releases memory tartan allocated for the caller (tt_metadata_json). Accepts NULL. */
TT_API void tt_free(void *p);

/* ----------------------------------------------------------------- encoders */

/* An encoder is an external program that turns texts into vectors, speaking the
 * protocol of doc/encoder-protocol.md over its stdin/stdout. A session runs one
 * encoder process over one stream of records: start (handshake) -> run -> free.
 * All callbacks run on the calling thread. The calling thread blocks SIGPIPE only
 * around its own writes to the encoder; dispositions are never changed. */
typedef struct tt_encoder tt_encoder;

enum { TT_ENC_PASSAGE = 0, TT_ENC_QUERY = 1 };          /* --mode passage / query */
enum { TT_ENC_F32 = 1, TT_ENC_F16 = 2 };                /* dtype on the wire */
enum { TT_REC_AUTO = 0, TT_REC_JSONL = 1, TT_REC_TSV = 2 }; /* record file formats */

/* Receives the encoder's raw stderr as it arrives (e.g. to echo it live). */
typedef void (*tt_encoder_stderr_fn)(void *user, const char *data, size_t len);

typedef struct tt_encoder_options {
    uint32_t struct_size;        /* set by tt_encoder_options_init */
    uint32_t timeout_ms;         /* no-progress timeout while owed output (0: 300000) */
    uint32_t startup_timeout_ms; /* time allowed for the hello line (0: 600000) */
    uint32_t expected_dim;       /* 0: any; else a hello with another dim is TT_EDIM */
    int input_format;            /* TT_REC_AUTO (default: by extension/content), _JSONL, _TSV */
    int force;                   /* tt_encode_to_npy: replace existing outputs (default 0) */
    tt_encoder_stderr_fn stderr_fn; /* may be NULL: stderr is only captured */
    void *stderr_user;
    tt_progress_fn progress;     /* phase "encode": records answered / records in file */
    void *progress_user;
    const volatile int *cancel;  /* may be NULL; once *cancel != 0 the session kills the
                                  * encoder and fails with TT_ECANCELED (a signal that
                                  * interrupts the wait is noticed at once) */
    struct tt_sparse_set *sparse_out; /* tt_encode_to_npy: NULL (default), or a set of
                                  * weights (tt_sparse_set_new_weights) that receives every
                                  * record's sparse part when the encoder sends them
                                  * (protocol 2); left empty by a protocol-1 encoder */
} tt_encoder_options;

TT_API void tt_encoder_options_init(tt_encoder_options *opt);

/* Starts `command` (split into words as doc/encoder-protocol.md section 1 says, no
 * shell) with "--mode passage|query" appended, and reads its hello line.
 * Errors: TT_EINVAL (empty command, bad mode), TT_ENOTFOUND (no such program, named in
 * the message), TT_EENCODER (not executable, exited, bad hello; the message carries
 * the encoder's stderr tail), TT_EVERSION (other protocol version), TT_EDIM
 * (expected_dim differs), TT_ETIMEOUT, TT_ENOMEM, TT_EIO. On error *out is NULL and no
 * process is left behind. */
TT_API int tt_encoder_start(tt_encoder **out, const char *command, int mode,
                            const tt_encoder_options *opt);
/* Same with an explicit NULL-terminated argv (argv[0] looked up in PATH). */
TT_API int tt_encoder_start_argv(tt_encoder **out, const char *const *argv, int mode,
                                 const tt_encoder_options *opt);
/* Kills the encoder if it still runs (SIGKILL to its process group), reaps it and
 * frees the session. Accepts NULL. */
TT_API void tt_encoder_free(tt_encoder *enc);

/* From the hello line. The description pointer lives until tt_encoder_free. */
TT_API uint32_t tt_encoder_dim(const tt_encoder *enc);
TT_API int tt_encoder_dtype(const tt_encoder *enc);           /* TT_ENC_F32 / TT_ENC_F16 */
TT_API uint32_t tt_encoder_max_vectors(const tt_encoder *enc); /* 0: no declared limit */
TT_API const char *tt_encoder_description(const tt_encoder *enc);
/* The last (at most 4 KiB) bytes the encoder wrote to stderr, NUL-terminated. */
TT_API const char *tt_encoder_stderr_tail(const tt_encoder *enc);

/* One record to encode. The pointers must stay valid until the next source call. */
typedef struct tt_record {
    const char *id;     /* 1..4096 bytes of UTF-8, no whitespace or control characters */
    size_t id_len;
    const char *text;   /* UTF-8, at most 64 MiB */
    size_t text_len;
} tt_record;

/* Fills *rec with the next record and returns 1, returns 0 at the end, or a negative
 * tt_status (with tt_err message) to abort the session. */
typedef int (*tt_record_source_fn)(void *user, tt_record *rec);
/* Receives record number `index` (0-based, input order): its id (id_len bytes, not
 * NUL-terminated), n vectors of tt_encoder_dim floats (float32, finite; valid only
 * during the call). Return 0 to continue or a negative tt_status to abort. */
typedef int (*tt_vectors_sink_fn)(void *user, uint64_t index, const char *id, size_t id_len,
                                  uint32_t n, const float *vectors);

/* Streams every record of `source` through the encoder and delivers the replies in
 * order to `sink`, then reads the end marker and reaps the encoder. One run per
 * session. Errors: those of the source and sink, TT_EENCODER (death, bad reply, id
 * order, wrong count, non-zero exit), TT_ETIMEOUT, TT_EVALUE (NaN/Inf), TT_EINVAL (a
 * record with an empty or oversized id or text); every message names the record
 * ("record #6 'doc6'", 1-based) and ends with the encoder's stderr tail. On error the
 * encoder is killed and reaped. */
TT_API int tt_encoder_run(tt_encoder *enc, tt_record_source_fn source, void *source_user,
                          tt_vectors_sink_fn sink, void *sink_user);
/* tt_encoder_run over the records of a BEIR corpus/queries .jsonl or a TSV file
 * (doc/encoder-protocol.md section 6) in the session's mode. Adds TT_ENOTFOUND,
 * TT_EIO and TT_EPARSE (file:line) to the errors above. */
TT_API int tt_encoder_encode_file(tt_encoder *enc, const char *input_path,
                                  tt_vectors_sink_fn sink, void *sink_user);

typedef struct tt_encode_stats {
    uint64_t records, vectors;
    uint32_t dim;
    int dtype;                  /* on the wire */
    double seconds;
    char description[1024];     /* the encoder's hello description */
    char stderr_tail[4097];     /* last 4 KiB of the encoder's stderr (also on failure) */
} tt_encode_stats;

/* Runs `command` over input_path and writes out_prefix.vectors.npy (float32
 * [vectors, dim]), out_prefix.doclens.npy (int64 [records]), out_prefix.ids.txt and
 * out_prefix.encoder.txt (the description). Written aside and renamed on success;
 * on failure nothing new is left behind and existing outputs are untouched.
 * Errors: those of tt_encoder_start and tt_encoder_encode_file, TT_EEXIST (outputs
 * exist and !opt->force), TT_EVALUE (a record with 0 vectors), TT_EIO, TT_ENOSPC.
 * stats may be NULL. */
TT_API int tt_encode_to_npy(const char *command, const char *input_path, int mode,
                            const char *out_prefix, const tt_encoder_options *opt,
                            tt_encode_stats *stats);

/* ------------------------------------------------------------------ evaluation */

/* Relevance judgements (qrels), ranked runs and the measures computed from them,
 * with trec_eval 10.0's definitions (scores are doubles; trec_eval 9.0.x and
 * pytrec_eval held them as floats); doc/metrics.md states each one precisely.
 * Query and document ids are byte strings without whitespace (tabs in BEIR TSV);
 * they are compared as bytes (strcmp), never as numbers. */
typedef struct tt_qrels tt_qrels;
typedef struct tt_run tt_run;

/* Loads relevance judgements from path ("-" reads stdin). The format is detected
 * from the first line that is neither blank nor a '#' comment:
 *  - TREC: `qid iter docid rel`, whitespace-separated, iter ignored;
 *  - BEIR TSV: `qid<TAB>docid<TAB>rel`, with an optional header line such as
 *    `query-id<TAB>corpus-id<TAB>score` (a first line whose rel is not a number).
 * rel is a decimal integer: rel >= relevance_level (default 1) makes a document
 * relevant; a positive rel is its nDCG gain; rel <= 0 is non-relevant.
 * Errors: TT_ENOTFOUND, TT_EIO; TT_EPARSE with "file:line: what" for a wrong field
 * count, a rel that is not an integer, a NUL byte, or a (qid, docid) pair judged
 * twice (trec_eval refuses those too); TT_EFORMAT if the file holds no judgement;
 * TT_ENOMEM. */
TT_API int tt_qrels_load(tt_qrels **out, const char *path);
/* An empty qrels to fill with tt_qrels_add. Errors: TT_ENOMEM. */
TT_API int tt_qrels_new(tt_qrels **out);
/* Adds one judgement. Errors: TT_EINVAL (NULL or empty id, id with whitespace, pair
 * already judged), TT_ENOMEM. */
TT_API int tt_qrels_add(tt_qrels *qrels, const char *qid, const char *docid, int rel);
TT_API void tt_qrels_free(tt_qrels *qrels);
/* Distinct queries / judgements held. */
TT_API size_t tt_qrels_num_queries(const tt_qrels *qrels);
TT_API uint64_t tt_qrels_num_judgements(const tt_qrels *qrels);

/* Loads a TREC run: lines `qid Q0 docid rank score tag`, exactly six
 * whitespace-separated fields (trec_eval ignores anything after the tag; tartan
 * refuses it, since a seventh field usually means an id with a space in it, which
 * would shift the rank into the score column); blank lines and '#' lines are
 * ignored. The rank and Q0 columns are ignored: documents are ranked by score (read
 * as a double), highest first, ties broken by docid in decreasing strcmp order
 * (trec_eval's rule). Lines of one query need not be contiguous nor sorted. path "-"
 * reads stdin. Memory: about 16 bytes per line plus the distinct id strings.
 * Errors: TT_ENOTFOUND, TT_EIO; TT_EPARSE with "file:line: what" for a line of other
 * than six fields ("expected 6 fields (qid Q0 docid rank score tag), got N"), a score
 * that is not a number (or NaN), a NUL byte, or a document listed twice for one
 * query; TT_EFORMAT for a file without any result line; TT_ENOMEM. */
TT_API int tt_run_load(tt_run **out, const char *path);
/* An empty run to fill with tt_run_add (e.g. from tt_search results). */
TT_API int tt_run_new(tt_run **out);
/* Adds one retrieved document with its score; the order of calls does not matter.
 * Errors: TT_EINVAL (NULL or empty id, id with whitespace, NaN score, the document
 * already added for this query: detected here, or by tt_evaluate/tt_run_write when
 * the query's additions were interleaved with other queries'), TT_ENOMEM. */
TT_API int tt_run_add(tt_run *run, const char *qid, const char *docid, double score);
TT_API void tt_run_free(tt_run *run);
TT_API size_t tt_run_num_queries(const tt_run *run);
TT_API uint64_t tt_run_num_entries(const tt_run *run);
/* Writes the run in TREC format to path (replaced if it exists): queries in the
 * order they first appeared, each ranked as tt_evaluate ranks it, rank from 1,
 * scores printed with the fewest digits that read back to the same double, and
 * `tag` (no whitespace; NULL: "tartan") in the last column.
 * Errors: TT_EINVAL (duplicate document, bad tag), TT_EIO, TT_ENOSPC, TT_ENOMEM. */
TT_API int tt_run_write(const tt_run *run, const char *path, const char *tag);
/* Counts run entries (and distinct documents) whose docid is not a line of ids_path
 * (one id per line, e.g. the --ids file of tt_input_open; blank lines skipped).
 * Evaluation treats such documents as non-relevant, like any unjudged document.
 * Errors: TT_ENOTFOUND, TT_EIO, TT_ENOMEM. */
TT_API int tt_run_count_unknown(const tt_run *run, const char *ids_path, uint64_t *entries,
                                uint64_t *docs);

/* Measures. k is the rank cutoff: only the top k documents of the ranking count. */
typedef enum tt_metric_kind {
    TT_METRIC_MRR = 1,     /* "MRR@k": trec_eval recip_rank over the top k (-M k)      */
    TT_METRIC_NDCG = 2,    /* "nDCG@k": ndcg_cut.k, gain = rel, discount log2(rank+1) */
    TT_METRIC_RECALL = 3,  /* "Recall@k" (or "R@k"): recall.k                         */
    TT_METRIC_MAP = 4,     /* "MAP@k": map over the top k (-M k map, = map_cut.k)     */
    TT_METRIC_SUCCESS = 5, /* "Success@k": success.k                                  */
    TT_METRIC_P = 6        /* "P@k": P.k, relevant in the top k divided by k          */
} tt_metric_kind;

typedef struct tt_metric {
    int kind;   /* a tt_metric_kind */
    uint32_t k; /* cutoff >= 1; 0 = whole ranking (not allowed for Success and P) */
} tt_metric;

/* The measures `tartan eval` reports when none are asked for. */
#define TT_METRICS_DEFAULT \
    "MRR@10,nDCG@10,nDCG@100,Recall@10,Recall@100,Recall@1000,MAP@1000,Success@5"

/* Parses a measure name: NAME@k or NAME (no cutoff) with NAME, case-insensitive, one
 * of MRR (or RR, recip_rank), nDCG (ndcg_cut), Recall (R), MAP (map_cut), Success,
 * P (Precision); trec_eval's spelling NAME.k is accepted too ("ndcg_cut.10").
 * Errors: TT_EINVAL with the name in the message. */
TT_API int tt_metric_parse(const char *name, tt_metric *out);
/* Writes the canonical name ("nDCG@10", "Recall@100", "MAP") into buf of len bytes
 * (32 always suffice) and returns buf. */
TT_API const char *tt_metric_name(const tt_metric *m, char *buf, size_t len);

typedef struct tt_eval_options {
    uint32_t struct_size;  /* set by tt_eval_options_init */
    int missing_as_zero;   /* 1: average over every qrels query, those absent from the
                              run scoring 0 (trec_eval -c). Default 0: average only
                              over queries present in both (trec_eval's default). */
    int relevance_level;   /* minimum rel of a relevant document (trec_eval -l; default 1) */
} tt_eval_options;

TT_API void tt_eval_options_init(tt_eval_options *opt);

/* Per-query values and means of nmetrics measures of run against qrels. */
typedef struct tt_eval tt_eval;

typedef struct tt_eval_counts {
    size_t queries;       /* evaluated queries: the denominator of every mean */
    size_t qrels_queries; /* queries with at least one judgement */
    size_t run_queries;   /* queries with at least one result */
    size_t missing;       /* qrels queries absent from the run (skipped, or 0 if missing_as_zero) */
    size_t ignored;       /* run queries without any judgement (never evaluated, as in trec_eval) */
    size_t no_relevant;   /* evaluated queries judged but with no relevant document (score 0) */
} tt_eval_counts;

/* Evaluates. Queries are those of qrels (in strcmp order of their ids) that the run
 * has, or all of them with missing_as_zero.
 * Errors: TT_EINVAL (NULL, nmetrics == 0, a bad metric, relevance_level < 1, a
 * duplicate document in the run, or no query in common between qrels and run,
 * also with missing_as_zero, since that always means mismatched files), TT_ENOMEM. */
TT_API int tt_evaluate(tt_eval **out, const tt_qrels *qrels, const tt_run *run,
                       const tt_metric *metrics, size_t nmetrics, const tt_eval_options *opt);
TT_API void tt_eval_free(tt_eval *ev);
TT_API void tt_eval_get_counts(const tt_eval *ev, tt_eval_counts *out);
/* Number of evaluated queries and the id of query i (valid until tt_eval_free). */
TT_API size_t tt_eval_num_queries(const tt_eval *ev);
TT_API const char *tt_eval_query_id(const tt_eval *ev, size_t i);
/* 1 if evaluated query i has results in the run, 0 if it was scored 0 as missing. */
TT_API int tt_eval_query_in_run(const tt_eval *ev, size_t i);
/* Index of the evaluated query with id qid, or SIZE_MAX. */
TT_API size_t tt_eval_find_query(const tt_eval *ev, const char *qid);
/* Mean of metric m (index into the metrics passed to tt_evaluate) over the
 * evaluated queries, and its per-query values (tt_eval_num_queries of them, in
 * query order; valid until tt_eval_free). */
TT_API double tt_eval_mean(const tt_eval *ev, size_t m);
TT_API const double *tt_eval_values(const tt_eval *ev, size_t m);

/* Two-sided paired Student t-test of a against b (n pairs): d = a - b,
 * t = mean(d) / (sd(d) / sqrt(n)) with the n-1 sample standard deviation and n-1
 * degrees of freedom; p = P(|T| >= |t|), from the regularized incomplete beta
 * function. Same as SciPy's ttest_rel, except that when every difference is 0 this
 * returns t = 0, p = 1 (SciPy: NaN); equal non-zero differences give t = +-inf, p = 0.
 * t may be NULL. Errors: TT_EINVAL (n < 2, NULL), TT_EVALUE (NaN or infinity). */
TT_API int tt_ttest_paired(const double *a, const double *b, size_t n, double *t, double *p);

/* ------------------------------------------- sparse and hybrid retrieval */

/* Sparse vectors (term -> weight) of records: documents to index, or queries. Terms are
 * strings (1..256 bytes of UTF-8); weights are finite and >= 0. Held in memory. */
typedef struct tt_sparse_set tt_sparse_set;

/* BM25 term counts of a BEIR .jsonl or TSV record file (the records tt_encoder reads;
 * passage mode: title + " " + text, query = 1: the query text). The tokenizer: maximal
 * runs of ASCII letters and digits, lowercased; every other byte separates (so UTF-8
 * letters outside ASCII separate too). Errors: TT_ENOTFOUND, TT_EIO, TT_EPARSE
 * (file:line; a record without text), TT_EVALUE (repeated or bad id), TT_EFORMAT (no
 * record), TT_ENOMEM. */
TT_API int tt_sparse_set_load_text(tt_sparse_set **out, const char *path, int query);
/* Precomputed sparse vectors, JSON Lines: {"id": "...", "terms": {"term": weight, ...}}
 * per line ("_id" is accepted for "id"; other members are ignored; blank lines skipped;
 * a repeated term's weights add up; zero weights are dropped). Errors: TT_EPARSE
 * (file:line: column: what), TT_EVALUE (NaN, infinite or negative weight, empty or
 * oversized term, repeated id), TT_ENOTFOUND, TT_EIO, TT_EFORMAT, TT_ENOMEM. */
TT_API int tt_sparse_set_load_jsonl(tt_sparse_set **out, const char *path);
TT_API void tt_sparse_set_free(tt_sparse_set *s);
TT_API uint64_t tt_sparse_set_size(const tt_sparse_set *s);
/* Id of record i (NUL-terminated; valid until tt_sparse_set_free), or NULL. */
TT_API const char *tt_sparse_set_id(const tt_sparse_set *s, uint64_t i);
/* Record number of id, or -1. */
TT_API int64_t tt_sparse_set_find(const tt_sparse_set *s, const char *id);

/* An empty set of sparse weights (kind TT_SPARSE_WEIGHTS), to fill with
 * tt_sparse_set_add (e.g. from an encoder's sparse parts). Errors: TT_ENOMEM. */
TT_API int tt_sparse_set_new_weights(tt_sparse_set **out);
/* Appends one record: n (term, weight) pairs (terms need not be distinct: weights of a
 * repeated term add up; zeros are dropped). Errors: TT_EVALUE (bad or repeated id, empty
 * or oversized term, NaN, infinite or negative weight, repeated weights adding up past
 * float's range), TT_ENOMEM; after an error other than a bad weight or term (checked
 * first) the set may hold a partial record: free it. */
TT_API int tt_sparse_set_add(tt_sparse_set *s, const char *id, size_t id_len, uint32_t n,
                             const char *const *terms, const size_t *term_lens,
                             const float *weights);

/* Encoders with sparse parts (doc/encoder-protocol.md, protocol 2): an encoder whose
 * hello says version 2 sends, with every reply's vectors, the record's sparse vector.
 * tt_encoder_sparse: 1 for such an encoder (after tt_encoder_start), else 0. The sink,
 * set before tt_encoder_run / tt_encoder_encode_file, receives record `index`'s n terms
 * (not NUL-terminated; term_lens bytes each) and weights (finite, >= 0), valid during
 * the call, right after the vector sink saw the record; it returns 0 or a negative
 * tt_status to abort. Without a sink the sparse parts are checked and dropped. */
typedef int (*tt_sparse_sink_fn)(void *user, uint64_t index, const char *id, size_t id_len,
                                 uint32_t n, const char *const *terms,
                                 const size_t *term_lens, const float *weights);
TT_API int tt_encoder_sparse(const tt_encoder *enc);
TT_API void tt_encoder_set_sparse_sink(tt_encoder *enc, tt_sparse_sink_fn fn, void *user);

/* The kind of sparse postings an index has: 0 none, 1 BM25 (term counts and document
 * lengths; scores computed at query time), 2 quantized weights. */
enum { TT_SPARSE_NONE = 0, TT_SPARSE_BM25 = 1, TT_SPARSE_WEIGHTS = 2 };
/* 3: quantized weights keyed by integer term ids (see "Integer term ids" below). */
enum { TT_SPARSE_TERM_IDS = 3 };
TT_API int tt_index_sparse_kind(const tt_index *idx);

/* The sparse postings of an open index (kind TT_SPARSE_NONE: none, the rest 0). */
typedef struct tt_sparse_info {
    int kind;              /* TT_SPARSE_NONE, _BM25 or _WEIGHTS */
    uint64_t bytes;        /* the sparse.tt files, and vocab.tt when stored
                            * (tt_index_info's bytes_sparse) */
    uint64_t terms;        /* dictionary entries, summed over the segments */
    uint64_t postings;     /* (term, document) pairs, deleted documents included */
    uint64_t live_docs;    /* BM25's N */
    double avgdl;          /* BM25's avgdl over the live documents */
} tt_sparse_info;
/* Errors: TT_EINVAL (NULL). */
TT_API int tt_index_sparse_info(const tt_index *idx, tt_sparse_info *out);

typedef struct tt_sparse_options {
    uint32_t struct_size;  /* set by tt_sparse_options_init */
    double k1, b;          /* BM25 (defaults 0.9, 0.4) */
    int brute_force;       /* 1: score every posting (the reference the tests compare
                            * with); 0 (default): block-max MaxScore, the same hits */
    /* Appended (filtered search, doc/search.md "Filters"): a caller built against the
     * shorter struct passes its struct_size and gets no filter. */
    const struct tt_filter *filter; /* NULL, or the allowed rows (over the index's
                            * num_docs rows, not owned): exactly the top k of the allowed
                            * live documents; BM25's N, df and avgdl stay those of every
                            * live document (a filter selects, it does not re-weight) */
} tt_sparse_options;
TT_API void tt_sparse_options_init(tt_sparse_options *opt);

/* Exact top-k sparse search of record qi of `queries` over the live documents: a
 * document's score is the sum over the query's terms it holds of
 *   BM25:    w_q * idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avgdl)),
 *            idf = ln(1 + (N - df + 0.5) / (df + 0.5)), with N, df and avgdl over the
 *            live documents of the snapshot (equal to a fresh build's after any change);
 *   weights: w_q * the document's quantized weight (8 bits per posting, one scale per
 *            term and segment),
 * w_q being the query's weight (BM25 queries: the term's count). Only documents holding
 * some query term are returned (fewer than k, or none, if few do); ties go to the lower
 * row. Thread-safe on one index. Errors: TT_EINVAL, TT_EUNSUPPORTED (no sparse
 * postings), TT_ENOMEM. */
TT_API int tt_sparse_search(const tt_index *idx, const tt_sparse_set *queries, uint64_t qi,
                            uint32_t k, const tt_sparse_options *opt, tt_hit *hits,
                            uint32_t *nhits);

enum { TT_FUSION_MINMAX = 0, TT_FUSION_RRF = 1 };
typedef struct tt_fusion_options {
    uint32_t struct_size;  /* set by tt_fusion_options_init */
    int method;            /* TT_FUSION_MINMAX (default, DiffRetriever's Eq. 3-4) or _RRF */
    uint32_t depth;        /* each list's top `depth` hits are fused (default 1000) */
    double alpha;          /* min-max: weight of the first (dense) list, 1 - alpha the
                            * second's (default 0.5) */
    double rrf_k;          /* RRF's k (default 60) */
} tt_fusion_options;
TT_API void tt_fusion_options_init(tt_fusion_options *opt);

/* Fuses two ranked lists (best first, each document at most once per list) into the k
 * best, best first. MINMAX: within each list's top depth, s' = (s - min) / (max - min)
 * (every document 1 when max = min); fused = alpha * a' + (1 - alpha) * b', a document
 * missing from a list getting 0 there. RRF: fused = sum over the lists holding it of
 * 1 / (rrf_k + rank), rank from 1 (missing: nothing). Ties: lower row first.
 * Errors: TT_EINVAL (options, k = 0), TT_EVALUE (non-finite score), TT_ENOMEM. */
TT_API int tt_fuse(const tt_hit *a, uint32_t na, const tt_hit *b, uint32_t nb,
                   const tt_fusion_options *opt, uint32_t k, tt_hit *out, uint32_t *nout);

/* Sparse or hybrid search of nqueries queries on `threads` threads (0: all CPUs).
 * Filters: a hybrid search filters both retrievers by dopt->filter or sopt->filter
 * (either may be set; both set: the same filter, else TT_EINVAL), so the fused list
 * holds allowed documents only; a sparse search by sopt->filter.
 * Q NULL: sparse only (query i is record sparse_of[i] of sq, or record i when sparse_of
 * is NULL; UINT64_MAX: a query without sparse terms, no hits). Q set (as
 * tt_search_batch's Q, qoffs, qlens): hybrid, each query's dense (PLAID, dopt) and
 * sparse searches run at once on two threads to depth max(k, fopt->depth), then fused
 * (a query without sparse terms gets its dense list, normalised). hits is nqueries * k;
 * seconds (may be NULL) each query's latency. Errors: those of tt_search,
 * tt_sparse_search and tt_fuse, naming the query. */
TT_API int tt_hybrid_search_batch(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                                  const uint32_t *qlens, const tt_search_options *dopt,
                                  const tt_sparse_set *sq, const uint64_t *sparse_of,
                                  const tt_sparse_options *sopt, const tt_fusion_options *fopt,
                                  uint64_t nqueries, uint32_t k, int threads, tt_hit *hits,
                                  uint32_t *nhits, double *seconds);

/* ------------------------------------------------- integer term ids (sparse) */

/* Sparse vectors whose terms are integer ids over a tokenizer's vocabulary (SPLADE or
 * DiffRetriever logits): JSON Lines records {"id": "...", "term_ids": {"2023": 1.5, ...}}
 * (keys decimal 0..4294967295; the weights as "terms"). The first record decides: a
 * file of "term_ids" gives a set of kind TT_SPARSE_TERM_IDS, indexed as ids (4 bytes
 * per term, not strings; doc/format.md) and searchable only with queries of ids. vocab
 * (NULL: none) is a vocabulary file, one term per line, term id = line number - 1 (a
 * BERT vocab.txt): ids must be below its size, and records with string "terms" are
 * mapped to ids through it (a term not in it is refused). tt_sparse_set_load_jsonl(out,
 * path) is this with vocab NULL. Errors: those of tt_sparse_set_load_jsonl, and
 * TT_EVALUE (an id past the vocabulary, a term not in it, ids and string terms mixed
 * without a vocabulary, a bad vocabulary line), TT_EFORMAT (an empty vocabulary). */
TT_API int tt_sparse_set_load_jsonl_vocab(tt_sparse_set **out, const char *path,
                                          const char *vocab);
/* The kind of the postings s makes: TT_SPARSE_BM25, TT_SPARSE_WEIGHTS or
 * TT_SPARSE_TERM_IDS (0 for NULL). */
TT_API int tt_sparse_set_kind(const tt_sparse_set *s);

/* ------------------------------------------ stored vocabulary (term ids) */

/* An index of term ids built with a vocabulary (tt_sparse_set_load_jsonl_vocab with a
 * vocab file, then tt_build) stores it (vocab.tt, doc/format.md "Stored vocabulary"):
 * searches can then write queries as words without the file, and tt_add checks that
 * the documents it adds use the same vocabulary (the same terms in the same order,
 * else TT_EVALUE), or, given without one, ids below its size. An index of term ids
 * without a stored vocabulary (built from ids, or by a tartan older than vocab.tt)
 * refuses documents given with a vocabulary (TT_EINVAL: nothing ties its ids to one; add
 * them as term ids). Compaction keeps it.
 *
 * tt_index_vocab_size: the stored vocabulary's number of terms, 0 without one (or for
 * NULL). tt_index_vocab_term: the term of id (NUL-terminated, owned by idx), or NULL
 * when id is past the vocabulary. */
TT_API uint64_t tt_index_vocab_size(const tt_index *idx);
TT_API const char *tt_index_vocab_term(const tt_index *idx, uint64_t id);
/* Sparse query or document records for idx: tt_sparse_set_load_jsonl_vocab, except
 * that without a vocab file the index's stored vocabulary (if any) is used (string
 * "terms" are mapped through it, ids checked against it), and that a vocab file given
 * for an index with a stored vocabulary must equal it (else TT_EVALUE naming the first
 * difference). idx NULL: exactly tt_sparse_set_load_jsonl_vocab. Errors: its errors. */
TT_API int tt_sparse_set_load_jsonl_index(tt_sparse_set **out, const char *path,
                                          const char *vocab, const tt_index *idx);
/* Texts (as tt_sparse_set_load_text) for idx: for an index with a stored vocabulary,
 * each record's tokens (the BM25 tokenizer's, doc/search.md) are looked up in it and
 * become term ids weighted by their count; tokens it lacks are dropped (a record may end
 * up with no term: no sparse hits). Otherwise exactly tt_sparse_set_load_text. */
TT_API int tt_sparse_set_load_text_index(tt_sparse_set **out, const char *path, int query,
                                         const tt_index *idx);

/* ------------------------------------ sparse and hybrid search, sharded indexes */

/* tt_hybrid_search_batch over a sharded index opened whole in one process (every
 * shard: tt_sharded_open rank 0 of 1), rows global: each shard's sparse postings are
 * searched with the whole collection's BM25 statistics (live documents, mean length,
 * each query term's document frequency summed over the shards) and the lists merged by
 * score, then lower global row, so the sparse results equal the unsharded index's of
 * the same documents (a sharded build quantizes weights with the whole set's scales).
 * Q set: hybrid, the dense lists from tt_sharded_search_batch to the fusion depth,
 * fused as tt_hybrid_search_batch does (equal to the unsharded index's in exhaustive
 * and exact dense modes, see tt_sharded_search_batch). Filters (dopt->filter or
 * sopt->filter, one of them or the same) are over the GLOBAL rows. A plain index
 * opened as one shard: exactly tt_hybrid_search_batch. seconds: each query's dense and
 * sparse time added. Errors: those of tt_hybrid_search_batch and
 * tt_sharded_search_batch; TT_EUNSUPPORTED (a shard without sparse postings, not every
 * shard open), TT_ECORRUPT (shards with postings of different kinds). */
TT_API int tt_sharded_hybrid_search_batch(const tt_sharded *sh, const float *Q,
                                          const uint64_t *qoffs, const uint32_t *qlens,
                                          const tt_search_options *dopt,
                                          const tt_sparse_set *sq, const uint64_t *sparse_of,
                                          const tt_sparse_options *sopt,
                                          const tt_fusion_options *fopt, uint64_t nqueries,
                                          uint32_t k, int threads, tt_hit *hits,
                                          uint32_t *nhits, double *seconds);

/* ------------------ sparse search split over processes (some shards each, MPI) */

/* A sparse or hybrid search of a sharded index whose shards are served by several
 * processes (tartan-mpi search: each opens some shards, tt_sharded_open rank r of R)
 * needs the whole collection's BM25 statistics, the sums of every process's part:
 * compute each process's part with tt_sharded_sparse_stats, sum them (MPI_Allreduce),
 * search each process's shards with tt_sharded_sparse_search_stats, and merge the
 * processes' lists by (higher double score, then lower global row), cut to k: the result
 * is exactly tt_sharded_hybrid_search_batch's sparse one in one process (and, for a
 * hybrid search, fusing the merged dense list of tt_sharded_search_batch to depth
 * max(k, fusion depth) with that sparse list cut to the same depth, by tt_fuse, is
 * exactly its hybrid one).
 *
 * tt_sparse_set_num_entries: the (term, weight) entries of every record of s, records
 * in order (record r's terms follow those of records 0..r-1); 0 for NULL. */
TT_API uint64_t tt_sparse_set_num_entries(const tt_sparse_set *s);
/* The statistics of the shards sh opened: *live_docs (their live documents, BM25's N),
 * *total_len (those documents' summed lengths) and, for each entry e of queries (df:
 * tt_sparse_set_num_entries(queries) of them), df[e] the number of live documents
 * holding its term (all 0 for postings of weights, whose scores need no statistics).
 * sh may have no shard open (all 0). Errors: TT_EINVAL (NULL), TT_EUNSUPPORTED (a shard
 * without sparse postings), TT_ECORRUPT (shards with postings of different kinds),
 * TT_ENOMEM. */
TT_API int tt_sharded_sparse_stats(const tt_sharded *sh, const tt_sparse_set *queries,
                                   uint64_t *live_docs, uint64_t *total_len, uint64_t *df);
/* Exact sparse top-k of nqueries queries over the shards sh opened, scored with the
 * given statistics (the sums of every process's tt_sharded_sparse_stats; df one per
 * entry of queries): per query, each shard's top k, merged by (higher score, then lower
 * global row) on the exact double scores. Query i is record sparse_of[i] of queries
 * (sparse_of NULL: record i; UINT64_MAX: no terms, no hits). hits: nqueries * k, rows
 * global, scores rounded to float; scores (may be NULL): nqueries * k, the exact
 * scores, by which lists of several processes must be merged (two hits whose float
 * scores tie may not tie as doubles). sopt->filter, when set, is over the GLOBAL rows
 * (tt_sharded_num_docs; each shard searches its own rows' part). sh without a shard open:
 * no hits. Errors: those of tt_sparse_search, naming the query and the shard;
 * TT_EINVAL (NULL, k = 0, a filter over another number of rows, sparse_of past the
 * records), TT_EDIM (fewer records than queries), TT_EUNSUPPORTED, TT_ECORRUPT. */
TT_API int tt_sharded_sparse_search_stats(const tt_sharded *sh, const tt_sparse_set *queries,
                                          const uint64_t *sparse_of, uint64_t nqueries,
                                          uint32_t k, const tt_sparse_options *sopt,
                                          uint64_t live_docs, uint64_t total_len,
                                          const uint64_t *df, int threads, tt_hit *hits,
                                          double *scores, uint32_t *nhits);

#ifdef __cplusplus
}
#endif
#endif /* TARTAN_H */

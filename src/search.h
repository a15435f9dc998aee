/* Search internals: the residual fetcher (src/fetch.c) and the scoring kernels of
 * PLAID search (src/search.c), exposed here for the index opener and the unit tests. */
#ifndef TT_SEARCH_H
#define TT_SEARCH_H

#include "index.h"

/* ---------------------------------------------------------------- fetcher */

/* A residual fetcher reads many byte ranges of one file per call: with io_uring
 * (batched submissions, up to queue_depth reads in flight), with pread (used when a
 * ring cannot be set up and the file is not mapped), or by pointing into a mapping.
 * One fetcher belongs to one search context (one thread). */
enum { TT_FETCH_URING = 1, TT_FETCH_MMAP = 2, TT_FETCH_PREAD = 3 };

typedef struct tt_fetch_config {
    int mode;               /* TT_FETCH_URING, _MMAP or _PREAD */
    int fd;                 /* buffered read-only descriptor (URING, PREAD) */
    int fd_direct;          /* O_DIRECT descriptor, or -1 for buffered reads */
    const char *path;       /* for messages */
    uint64_t file_size;     /* bytes in the file */
    uint64_t base;          /* file offset of range offset 0 (the payload start) */
    const uint8_t *map;     /* mapping of the payload (MMAP) */
    int queue_depth;        /* reads in flight (URING), default 64 */
    uint32_t max_read;      /* longest single read in bytes (default 1 MiB) */
} tt_fetch_config;

typedef struct tt_fetch_stats {
    uint64_t calls;         /* tt_fetcher_read calls */
    uint64_t ranges;        /* ranges requested */
    uint64_t bytes;         /* bytes read from the file (MMAP: bytes of the ranges) */
    uint64_t reads;         /* read requests issued, resubmissions included (MMAP: 0) */
} tt_fetch_stats;

typedef struct tt_fetcher tt_fetcher;

/* Creates a fetcher. If cfg->mode is URING and a ring cannot be set up (ENOSYS,
 * EPERM under seccomp, ENOMEM...), falls back to MMAP when cfg->map is set, else to
 * PREAD, and writes the reason to note (may be NULL). Errors: TT_EINVAL, TT_ENOMEM. */
int tt_fetcher_new(tt_fetcher **out, const tt_fetch_config *cfg, char *note, size_t note_len);
void tt_fetcher_free(tt_fetcher *f);
int tt_fetcher_mode(const tt_fetcher *f);

/* Reads n ranges [off[i], off[i] + len[i]) (payload offsets) and sets ptr[i] to
 * their bytes. Ranges may come in any order and may overlap; overlapping or adjacent
 * ones (and, with O_DIRECT, ones sharing a 4 KiB block) are read once. Pointers stay
 * valid until the next call. A range past the end of the file is TT_ECORRUPT;
 * a failed read TT_EIO naming the file. */
int tt_fetcher_read(tt_fetcher *f, size_t n, const uint64_t *off, const uint64_t *len,
                    const uint8_t **ptr);
void tt_fetcher_stats(const tt_fetcher *f, tt_fetch_stats *out);
void tt_fetcher_stats_reset(tt_fetcher *f);

/* ---------------------------------------------------------------- kernels */

/* Residual decoder: unpacks packed residuals (layout of codec.h) to floats through
 * byte tables: one 256-entry table of (8/nbits) floats for a shared codec; for
 * per-dimension codecs one such table per byte position when they fit in 512 KiB,
 * else bucket indices + per-dimension weights. */
typedef struct tt_resdec {
    uint32_t dim, nbits, bytes_per_vec, per_byte;  /* per_byte = 8 / nbits */
    int shared;
    float *tab;            /* shared: 256 * per_byte weights */
    float *ptab;           /* per-dim, small: bytes_per_vec * 256 * per_byte weights */
    uint8_t *bucket;       /* per-dim: 256 * per_byte bucket indices */
    const float *weights;  /* per-dim: dim * nbuckets (borrowed from the codec) */
    uint32_t nbuckets;
    int avx512;            /* per-dim without tables, 1-2 bits: 16 dimensions at a time */
} tt_resdec;

/* d->avx512 is set where the CPU has AVX-512; a test may clear it to compare with the
 * portable loop (the two write the same floats). */
int tt_resdec_init(tt_resdec *d, const tt_codec *c);
void tt_resdec_free(tt_resdec *d);
/* Unpacks n packed vectors (n * bytes_per_vec bytes) into n * dim floats. */
void tt_resdec_decode(const tt_resdec *d, const uint8_t *packed, uint64_t n, float *out);
/* The same, adding centroid codes[v] (rows of centroids, dim floats) to vector v: the
 * decompressed vectors c + r. */
void tt_resdec_decode_add(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                          const float *centroids, const uint32_t *codes, float *out);

/* Bounded top-k selection with deterministic order: a hit is better if its score is
 * higher, or equal with a lower document id, so that any evaluation order of the same
 * (doc, score) pairs keeps the same set. */
typedef struct tt_topk {
    tt_hit *h;            /* min-heap of the k best so far (worst at h[0]) */
    uint32_t n, k, cap;
} tt_topk;

int tt_topk_reset(tt_topk *t, uint32_t k);
void tt_topk_push(tt_topk *t, uint64_t doc, float score);
/* Sorts the kept hits best first into t->h[0..n) and returns n. */
uint32_t tt_topk_finish(tt_topk *t);
void tt_topk_free(tt_topk *t);

/* Query vectors are processed in blocks of TT_QB (SSE) lanes: score tables have a row stride
 * of nqp = nq rounded up to TT_QB, with zero query rows as padding. */
#define TT_QB 4u
static inline uint32_t tt_qpad(uint32_t nq) { return (nq + TT_QB - 1) / TT_QB * TT_QB; }

/* MaxSim of a group of documents over decoded vectors (c + r, or the originals):
 *   score(d) = sum_{i < nq} max_j <q_i, v_j>
 * from one sgemm V Qpᵀ over the group (`QR`: nvec * nqp scratch). Qp is nqp * dim
 * (rows nq.. zero), R is nvec * dim (rows of the group's documents in order), doclens
 * ndocs lengths. nqp = tt_qpad(nq). */
void tt_maxsim_group(const float *Qp, uint32_t nq, uint32_t nqp, uint32_t dim, const float *R,
                     const uint32_t *doclens, uint32_t ndocs, float *QR, float *scores);

/* Scalar reference of the same score for one document (double accumulation), from
 * the packed residuals and the codec; used by the tests. */
double tt_maxsim_reference(const float *Q, uint32_t nq, uint32_t dim, const float *centroids,
                           const tt_codec *c, const uint32_t *codes, const uint8_t *packed,
                           uint32_t doclen);

/* Switches the AVX-512 row loops of the centroid stages on (where the CPU has AVX-512)
 * or off; returns whether they were on. For the tests, which compare the two. */
int tt_search_ctx_use_avx512(tt_search_ctx *ctx, int on);

/* PLAID defaults by k (ColBERTv2): k <= 10: nprobe 1, threshold 0.5, ndocs 256;
 * k <= 100: 2, 0.45, 1024; larger: 4, 0.4, max(4k, 4096). */
void tt_search_defaults_for_k(uint32_t k, int *nprobe, float *threshold, uint32_t *ndocs);

#endif

/* Token pooling of one document (Clavié, Chaffin and Adams 2024, "Reducing the Footprint
 * of Multi-Vector Retrieval with Minimal Performance Impact via Token Pooling"): its n
 * vectors are clustered by Ward's method into k = max(1, floor(n / factor)) clusters and
 * each cluster is replaced by the mean of its vectors. doc/pooling.md states exactly what
 * is computed (the distance, how ties are broken) and how it differs from PyLate's.
 *
 * The clustering is the nearest-neighbour chain (Murtagh 1983; Müllner 2011, "Modern
 * hierarchical, agglomerative clustering algorithms", section 3.3) over a full matrix of
 * Ward dissimilarities kept up to date by the Lance-Williams formula: O(n^2) time after
 * the O(n^2 dim) pairwise distances, n^2 doubles of memory. */
#ifndef TT_POOL_H
#define TT_POOL_H

#include "common/common.h"

/* The number of vectors a document of n vectors keeps: max(1, floor(n / factor))
 * (factor >= 1; factor 1 keeps them all). */
static inline uint32_t tt_pool_len(uint32_t n, uint32_t factor) {
    uint32_t k = n / factor;
    return k ? k : 1;
}

/* Vector paths of the pairwise distances (all return the same bits). */
enum { TT_POOL_SCALAR = 0, TT_POOL_SSE2 = 1, TT_POOL_AVX512 = 2 };

/* Work space for documents of up to max_n vectors of dim dimensions. One per thread. */
typedef struct tt_pool_work {
    uint32_t max_n, dim;
    int simd;               /* TT_POOL_*: the best the CPU has (tests may lower it) */
    double *d;              /* max_n * max_n: Ward dissimilarities, row-major */
    double *height;         /* per slot: height of the merge that formed its cluster */
    uint32_t *size;         /* per slot: vectors in its cluster, 0 once merged away */
    uint32_t *active;       /* the live slots, ascending */
    uint32_t *chain;        /* the nearest-neighbour chain */
    uint32_t *parent;       /* union-find over slots for the cut */
    uint32_t *label;        /* per vector: its cluster */
    float *row;             /* distances of one vector to the later ones */
    struct tt_pool_merge *merges; /* max_n - 1 */
    double *sum;            /* max_n * dim: the clusters' sums */
} tt_pool_work;

/* Bytes tt_pool_work_init allocates for (max_n, dim), or UINT64_MAX if that overflows. */
uint64_t tt_pool_work_bytes(uint32_t max_n, uint32_t dim);
/* Errors: TT_EINVAL (max_n or dim 0), TT_ENOMEM. */
int tt_pool_work_init(tt_pool_work *w, uint32_t max_n, uint32_t dim);
void tt_pool_work_free(tt_pool_work *w);

/* Pools the n (1 <= n <= w->max_n) vectors x (n * w->dim floats, finite) of one document
 * with factor (>= 1) and writes the k = tt_pool_len(n, factor) cluster means to out
 * (k * dim floats), ordered by their lowest-numbered vector; returns k. The means are
 * not renormalised (the build does that when the index normalises). A mean that is
 * exactly zero (vectors that cancel) is replaced by its cluster's lowest-numbered vector.
 * labels (may be NULL, n entries) receives each vector's cluster. Deterministic: the
 * result depends on the input bits only, whatever the vector path or thread. */
uint32_t tt_pool_ward(tt_pool_work *w, const float *x, uint32_t n, uint32_t factor, float *out,
                      uint32_t *labels);

/* The same clustering cut after n - k merges instead (1 <= k; k >= n: the vectors as
 * they are): the document's share of a global cut (tt_pool_cut_len). */
uint32_t tt_pool_ward_k(tt_pool_work *w, const float *x, uint32_t n, uint32_t k, float *out,
                        uint32_t *labels);

/* Global pooling (doc/pooling.md, "One cut for the whole collection"): the heights of
 * the n - 1 merges of x's dendrogram (n >= 2; 0 returned for n < 2), ascending, in the
 * order the cut applies them (heights must hold n - 1). */
uint32_t tt_pool_heights(tt_pool_work *w, const float *x, uint32_t n, double *heights);
/* The vectors a document keeps when every merge at or below threshold is applied:
 * n - (merges with height <= threshold), from its ascending heights (n - 1 of them). */
uint32_t tt_pool_cut_len(const double *heights, uint32_t n, double threshold);

/* Squared Euclidean distance of a and b (dim floats) as tt_pool_ward computes it: float
 * arithmetic in 16 lanes (lane l sums dimensions l, l + 16, ...), then a fixed tree;
 * simd selects the vector path (exposed for the tests that compare them). */
float tt_pool_sqdist(const float *a, const float *b, uint32_t dim, int simd);

#endif

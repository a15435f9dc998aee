/* k-means for centroid training and nearest-centroid assignment (OpenBLAS sgemm).
 *
 * Assignment uses argmax_c (x.c - |c|^2/2), i.e. the L2-nearest centroid, which for
 * unit-norm centroids is the maximum inner product (spherical k-means). */
#ifndef TT_KMEANS_H
#define TT_KMEANS_H

#include "internal.h"

typedef struct tt_kmeans_params {
    uint32_t k, dim;
    int iters;         /* Lloyd iterations */
    uint64_t seed;
    int threads;
    int spherical;     /* renormalise centroids to unit length after each update */
    tt_progress_fn progress;
    void *progress_user;
} tt_kmeans_params;

/* Trains k centroids on n vectors x (n*dim, row-major) into centroids (k*dim).
 * Seeded and reproducible for a given seed and thread count. Empty clusters are
 * re-seeded from a split of the largest cluster. n must be >= k.
 * Errors: TT_EINVAL, TT_ENOMEM. */
int tt_kmeans_train(const float *x, uint64_t n, const tt_kmeans_params *p, float *centroids);

/* Nearest-centroid search structure. */
typedef struct tt_assigner tt_assigner;

/* method: TT_ASSIGN_EXACT (brute force N*K*dim via sgemm) or TT_ASSIGN_TWO_LEVEL
 * (centroids grouped by a small k-means; each vector is compared with the group
 * centres, then exactly with the members of its best `probe` groups).
 * The centroids array must outlive the assigner. */
int tt_assigner_new(const float *centroids, uint32_t k, uint32_t dim, int method,
                    uint64_t seed, int threads, tt_assigner **out);
void tt_assigner_free(tt_assigner *a);
/* Assigns n vectors; out_ids[i] = nearest centroid. Uses up to `threads` threads.
 * Errors: TT_ENOMEM. */
int tt_assign(const tt_assigner *a, const float *x, uint64_t n, uint32_t *out_ids, int threads);

#endif

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

/* Trains k centroids on n vectors x (n*dim, row-major, finite) into centroids (k*dim).
 * Initial centroids are k distinct random vectors (greedy k-means++ on a subsample
 * when k <= 256, where random seeding misses clusters); each of `iters` Lloyd iterations
 * assigns every vector to its nearest centroid and moves each centroid to the mean of
 * its members (renormalised when spherical). Empty clusters are re-seeded from a
 * split of the largest cluster. threads <= 0 means the number of online CPUs.
 * Reproducible: the result depends on (x, n, k, dim, iters, seed, spherical) only,
 * bit for bit, for any thread count on a given machine and BLAS. progress (may be
 * NULL) is called as progress(user, "kmeans", iteration, iters) after each iteration.
 * Errors: TT_EINVAL (NULL pointer, k = 0, dim = 0, n < k, iters < 0), TT_ENOMEM. */
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
/* Assigns n vectors; out_ids[i] = nearest centroid (ties: lowest id). Uses up to
 * `threads` threads (<= 0: online CPUs); the result does not depend on the thread count.
 * Safe to call concurrently on one assigner (not concurrently with set_probe).
 * Errors: TT_EINVAL (NULL pointer), TT_ENOMEM. */
int tt_assign(const tt_assigner *a, const float *x, uint64_t n, uint32_t *out_ids, int threads);

/* Two-level with an explicit number of k-means groups (1 <= groups <= k; groups left
 * empty are dropped), whatever k; groups = 0 is exact. tt_assigner_new with
 * TT_ASSIGN_TWO_LEVEL uses max(sqrt k, k/64) groups when k >= 4096 and is exact below.
 * Errors: TT_EINVAL, TT_ENOMEM. */
int tt_assigner_new_groups(const float *centroids, uint32_t k, uint32_t dim, uint32_t groups,
                           uint64_t seed, int threads, tt_assigner **out);

/* Two-level tuning and introspection. Without groups (exact) groups() and probe()
 * return 0 and set_probe does nothing. set_probe clamps probe to the number of groups;
 * the default is max(groups/8, 4).
 * Errors: TT_EINVAL (probe = 0). */
int tt_assigner_set_probe(tt_assigner *a, uint32_t probe);
uint32_t tt_assigner_probe(const tt_assigner *a);
uint32_t tt_assigner_groups(const tt_assigner *a);

#endif

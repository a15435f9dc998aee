/* k-means for centroid training and nearest-centroid assignment (OpenBLAS sgemm).
 *
 * Assignment uses argmax_c (x.c - |c|^2/2), i.e. the L2-nearest centroid, which for
 * unit-norm centroids is the maximum inner product (spherical k-means). */
#ifndef TT_KMEANS_H
#define TT_KMEANS_H

#include "common/common.h"

#include <math.h>

/* Training methods (tt_kmeans_params.method). */
enum {
    TT_KMEANS_AUTO = 0, /* hierarchical when k >= TT_KMEANS_HIER_MIN_K, else flat */
    TT_KMEANS_FLAT = 1, /* Lloyd with exact assignment over all k centroids */
    TT_KMEANS_HIER = 2  /* two-level (hierarchical) training, whatever k */
};
#define TT_KMEANS_HIER_MIN_K 4096u
/* Default refine iterations of hierarchical training (tt_kmeans_params.refine = 0). */
#define TT_KMEANS_DEFAULT_REFINE 1

/* Zero-initialise and set what you need: every zero field means its default. */
typedef struct tt_kmeans_params {
    uint32_t k, dim;
    int iters;         /* Lloyd iterations (hierarchical: of the coarse and of each fine
                        * k-means) */
    uint64_t seed;
    int threads;
    int spherical;     /* renormalise centroids to unit length after each update */
    tt_progress_fn progress;
    void *progress_user;
    int method;        /* TT_KMEANS_AUTO (0), TT_KMEANS_FLAT or TT_KMEANS_HIER */
    int refine;        /* hierarchical: Lloyd iterations over all vectors with two-level
                        * assignment at the end; 0 = TT_KMEANS_DEFAULT_REFINE, < 0 = none */
    const volatile int *cancel; /* may be NULL; once *cancel != 0 training stops with
                                 * TT_ECANCELED within one block of vectors */
    const struct tt_kmeans_part *part; /* NULL: x is all the vectors. Else x is one part
                                 * of them (below) */
} tt_kmeans_params;

/* Distributed (partitioned) training. The vectors are cut into parts, one per member
 * of a group (MPI ranks, or threads in the tests); every member calls tt_kmeans_train
 * with its part as (x, n), the same params and a part naming where its rows lie in the
 * whole. The members exchange data only through `reduce`, which they all call at the
 * same points with the same n: it replaces buf[0..n) by the sum (TT_REDUCE_SUM) or
 * maximum (TT_REDUCE_MAX) over the members, element-wise; it returns 0, or non-zero on
 * failure. The initial centroids are gathered from their owners through a sum (one
 * member contributes each row's bits, the others zero), each iteration's per-centroid
 * sums are fixed-point integers (tt_fix_add), so their total does not depend on how the
 * rows are split, and the counts are summed. Every member ends with the centroids of a
 * one-process tt_kmeans_train over the whole, bit for bit, when every part starts at a
 * multiple of TT_KMEANS_PART_ROWS (the assignment's sgemm blocks, exact and two-level,
 * then see the same operands as in one process).
 *
 * Hierarchical training (TT_KMEANS_HIER, or AUTO from TT_KMEANS_HIER_MIN_K) needs rank
 * and size: the coarse k-means is distributed as above; the coarse cluster sizes are
 * summed; each fine k-means is given to one member (largest work first, to the least
 * loaded member), which receives its coarse cluster's vectors (a sum of the parts' rows,
 * in pieces of at most TT_KMEANS_GATHER_WORDS words) and runs it as one process would;
 * the fine centroids are shared by a sum; the refine iterations are distributed like
 * flat ones (two-level assignment of each part's rows). Each vector of the sample thus
 * crosses the reduce once, in int64 words (8 bytes per component), and a member holds
 * about its share of the sample twice (its rows and its coarse clusters).
 *
 * A failure in one member (TT_ENOMEM, TT_ECANCELED) fails every member at the next
 * reduce (the others with TT_EIO "another part failed"). */
#define TT_KMEANS_PART_ROWS 2048u
#define TT_KMEANS_GATHER_WORDS ((size_t)1 << 24)
typedef struct tt_kmeans_part {
    uint64_t first;  /* the whole's index of x's row 0 */
    uint64_t total;  /* rows in the whole (< 2^31) */
    int (*reduce)(void *user, int64_t *buf, size_t n, int op);
    void *user;
    uint32_t rank, size; /* this member of size (hierarchical training; 0, 0 for flat) */
} tt_kmeans_part;

/* Exact, order-independent sums of floating-point values: each value is rounded to a
 * multiple of 2^-F once (F = 61 - e, where every |value| < 2^e: tt_fix_exponent of
 * the largest magnitude; exact for every float within 2^-37 of it), then summed as
 * an integer split into two int64 words (acc[0]: the multiples of 2^32, acc[1]: the
 * low 32 bits), so sums of up to 2^31 values never overflow and any order or split
 * gives the same integers. scale = 2^F, from tt_fix_scale(e). */
int tt_fix_exponent(double maxabs);
double tt_fix_scale(int e);
static inline void tt_fix_add(int64_t *acc, double v, double scale) {
    int64_t q = (int64_t)llrint(v * scale);
    int64_t lo = (int64_t)((uint64_t)q & 0xffffffffu);
    acc[0] += (q - lo) / 4294967296LL;
    acc[1] += lo;
}
/* The sum in acc as a double (rounded once), divided by scale. */
double tt_fix_value(const int64_t *acc, double scale);

/* Trains k centroids on n vectors x (n*dim, row-major, finite) into centroids (k*dim).
 *
 * Flat: initial centroids are k distinct random vectors (greedy k-means++ on a
 * subsample when k <= 256, where random seeding misses clusters); each of `iters` Lloyd
 * iterations assigns every vector to its nearest centroid and moves each centroid to
 * the mean of its members (renormalised when spherical). Empty clusters are re-seeded
 * from a split of the largest cluster. Costs n * k * dim * iters multiply-adds.
 *
 * Hierarchical (default when k >= TT_KMEANS_HIER_MIN_K): a flat k-means into
 * G = round(sqrt k) coarse clusters; each coarse cluster of n_c vectors is then split
 * by a flat k-means into k_c ~ k * n_c / n centroids (largest remainders, 1 <= k_c <=
 * n_c, sum k); then `refine` Lloyd iterations over all vectors whose assignment step
 * uses the two-level assigner (TT_ASSIGN_TWO_LEVEL) on the current centroids. Costs
 * about n * (G + k/G) * dim * iters multiply-adds, sqrt(k)/2 times fewer than flat
 * (measured: 2.3-6x less CPU, no objective loss; doc/benchmarks.md). The centroids
 * come grouped by coarse cluster.
 *
 * threads <= 0 means the number of online CPUs. Reproducible: the result depends on
 * (x, n, k, dim, iters, seed, spherical, method, refine) only, bit for bit, for any
 * thread count on a given machine and BLAS. progress (may be NULL) is called from the
 * calling thread as progress(user, "kmeans", done, total): flat, after each iteration
 * (total = iters); hierarchical, after each coarse iteration, fine k-means and refine
 * iteration (total = iters + G + refine).
 * Errors: TT_EINVAL (NULL pointer, k = 0, dim = 0, n < k, iters < 0, unknown method),
 * TT_ENOMEM. */
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

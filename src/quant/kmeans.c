/* k-means centroid training and nearest-centroid assignment.
 *
 * Everything rests on one kernel: a block of vectors times a block of centroids with
 * cblas_sgemm (row-major, centroids transposed), then a row-wise argmax of
 * x.c - |c|^2/2, which is the L2-nearest centroid (|x|^2 is the same for every c)
 * and, for unit-norm centroids, the maximum inner product.
 *
 * Training is Lloyd's algorithm as FAISS runs it for ColBERTv2 (spherical k-means,
 * random initial centroids, empty clusters re-seeded by splitting a large cluster),
 * except that small k (<= 256) starts from greedy k-means++. From k = 4096 on, training
 * is hierarchical by default (FAISS two_level_clustering: sqrt(k) coarse clusters, each
 * split in proportion to its size, then Lloyd refinement with two-level assignment),
 * sqrt(k)/2 times fewer multiply-adds than flat Lloyd, measured 2.3-6x less CPU at equal
 * or better objective (doc/benchmarks.md, "Training at large K"); see train_hier.
 *
 * Assignment is exact (blocked sgemm over all centroids) or two-level: the centroids
 * are grouped by a k-means of their own, each vector scores the group centres and
 * scans the members of its best `probe` groups exactly.
 *
 * Parallelism and determinism. Vectors are cut into fixed blocks that start at row 0,
 * whatever the thread count, and each thread runs cblas_sgemm on whole blocks of its
 * own; so every sgemm call sees the same operands for any thread count. The update
 * step sums each centroid's members in increasing vector order (a counting sort of the
 * assignment) in double, one centroid per thread at a time. Hence the centroids are a
 * function of (data, k, seed) alone: identical, bit for bit, for any thread count on a
 * given machine and BLAS. (The reduction of per-thread partial sums was the other
 * option; it costs k*dim doubles per thread and its result depends on the thread
 * count.)
 *
 * OpenBLAS threads. Debian's OpenBLAS is the pthread build: each sgemm call would
 * also fan out to OpenBLAS's own pool, whose threads then busy-wait after the call and
 * compete with ours. Measured on the 2-core build machine (65536 x 4096 x 128 assign,
 * two workers): 0.60 s with OpenBLAS at 1 thread, 0.77 s with its default 2. So while
 * a k-means or assignment call runs, OpenBLAS is set to one thread and restored after
 * (reference counted for concurrent callers). That is process-global state: a sgemm
 * made by another thread of the process meanwhile runs single-threaded, which costs
 * speed only, never correctness. */
#include "quant/kmeans.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    BLOCK_ROWS = 256,     /* vectors per sgemm block (exact assignment, training) */
    BLOCK_COLS = 1024,    /* centroids per sgemm block: scores scratch is 1 MiB/thread */
    TWO_ROWS = 2048,      /* vectors per two-level block: more vectors per group */
    GATHER_ROWS = 256,    /* gathered vectors per sgemm in the two-level scan */
    /* Below this many centroids two-level is exact: exact costs at most 4096 dot
     * products per vector there, and two-level saved < 2x at >= 0.99 agreement on
     * K = 1024 (bench_assign cases C, R). */
    TWO_LEVEL_MIN_K = 4096,
    GROUP_ITERS = 10,     /* Lloyd iterations when grouping the centroids */
    GROUP_MAX_SIZE = 64   /* average centroids per group, at most */
};
/* A part that starts at a multiple of TT_KMEANS_PART_ROWS starts a block of both
 * assignments (tt_kmeans_part). */
_Static_assert(TT_KMEANS_PART_ROWS % BLOCK_ROWS == 0 && TT_KMEANS_PART_ROWS % TWO_ROWS == 0,
               "TT_KMEANS_PART_ROWS must be a multiple of the assignment blocks");

/* -------------------------------------------------- OpenBLAS thread guard */

/* OpenBLAS extensions, absent from other CBLAS implementations: declared weak so the
 * library still links against a reference CBLAS, where the guard does nothing. */
extern int openblas_get_num_threads(void) __attribute__((weak));
extern void openblas_set_num_threads(int) __attribute__((weak));

static pthread_mutex_t blas_mu = PTHREAD_MUTEX_INITIALIZER;
static int blas_users, blas_saved;

static void blas_single_begin(void) {
    if (!openblas_get_num_threads || !openblas_set_num_threads)
        return;
    pthread_mutex_lock(&blas_mu);
    if (blas_users++ == 0) {
        blas_saved = openblas_get_num_threads();
        if (blas_saved != 1)
            openblas_set_num_threads(1);
    }
    pthread_mutex_unlock(&blas_mu);
}

static void blas_single_end(void) {
    if (!openblas_get_num_threads || !openblas_set_num_threads)
        return;
    pthread_mutex_lock(&blas_mu);
    if (--blas_users == 0 && blas_saved != 1)
        openblas_set_num_threads(blas_saved);
    pthread_mutex_unlock(&blas_mu);
}

/* ------------------------------------------------------------ the kernel */

typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));

/* Index of the first maximum of s[j] - hn[j] over j < n; the maximum goes to *best.
 * The scalar loop costs as much as the sgemm that produced s (measured: 0.30 s vs
 * 0.85 s single-threaded for 65536 x 4096 x 128), so it runs on 4-lane vectors,
 * the width of baseline SSE2/NEON: each lane keeps its running maximum and index
 * with strict '>', and lanes merge on (value, lowest index), which gives exactly the
 * answer of a sequential scan. NaN scores are never chosen. */
static uint32_t row_argmax(const float *s, const float *hn, uint32_t n, float *best) {
    float b = -INFINITY;
    uint32_t bi = 0, j = 0;
    if (n >= 8) {
        v4f b0 = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, b1 = b0;
        v4i i0 = {0, 0, 0, 0}, i1 = i0;
        v4i c0 = {0, 1, 2, 3}, c1 = {4, 5, 6, 7};
        const v4i step = {8, 8, 8, 8};
        for (; j + 8 <= n; j += 8) {
            v4f a0, a1, h0, h1;
            memcpy(&a0, s + j, sizeof a0);
            memcpy(&a1, s + j + 4, sizeof a1);
            memcpy(&h0, hn + j, sizeof h0);
            memcpy(&h1, hn + j + 4, sizeof h1);
            v4f v0 = a0 - h0, v1 = a1 - h1;
            v4i m0 = v0 > b0, m1 = v1 > b1;
            b0 = (v4f)(((v4i)b0 & ~m0) | ((v4i)v0 & m0));
            b1 = (v4f)(((v4i)b1 & ~m1) | ((v4i)v1 & m1));
            i0 = (i0 & ~m0) | (c0 & m0);
            i1 = (i1 & ~m1) | (c1 & m1);
            c0 += step;
            c1 += step;
        }
        for (int l = 0; l < 4; l++) {
            if (b0[l] > b || (b0[l] == b && (uint32_t)i0[l] < bi)) {
                b = b0[l];
                bi = (uint32_t)i0[l];
            }
            if (b1[l] > b || (b1[l] == b && (uint32_t)i1[l] < bi)) {
                b = b1[l];
                bi = (uint32_t)i1[l];
            }
        }
    }
    for (; j < n; j++) {
        float v = s[j] - hn[j];
        if (v > b) {
            b = v;
            bi = j;
        }
    }
    *best = b;
    return bi;
}

/* Nearest of the k centroids c (half squared norms hn) for the nb <= rows_max rows of
 * x (stride dim): ids[r] and its score best[r]. Centroids are taken BLOCK_COLS at a
 * time so the scratch S (rows_max * BLOCK_COLS floats) stays small. Ties go to the
 * lowest centroid index. */
static void nearest_block(const float *x, uint32_t nb, const float *c, const float *hn,
                          uint32_t k, uint32_t dim, float *S, uint32_t *ids, float *best) {
    for (uint32_t r = 0; r < nb; r++) {
        best[r] = -INFINITY;
        ids[r] = 0;
    }
    for (uint32_t j0 = 0; j0 < k; j0 += BLOCK_COLS) {
        uint32_t kc = TT_MIN((uint32_t)BLOCK_COLS, k - j0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nb, (int)kc, (int)dim, 1.0f,
                    x, (int)dim, c + (size_t)j0 * dim, (int)dim, 0.0f, S, (int)kc);
        for (uint32_t r = 0; r < nb; r++) {
            float v;
            uint32_t j = row_argmax(S + (size_t)r * kc, hn + j0, kc, &v);
            if (v > best[r]) {
                best[r] = v;
                ids[r] = j0 + j;
            }
        }
    }
}

/* hn[j] = |c_j|^2 / 2, summed in double. */
static void half_norms(const float *c, uint32_t k, uint32_t dim, float *hn) {
    for (uint32_t j = 0; j < k; j++) {
        const float *r = c + (size_t)j * dim;
        double s = 0;
        for (uint32_t d = 0; d < dim; d++)
            s += (double)r[d] * r[d];
        hn[j] = (float)(0.5 * s);
    }
}

static int check_cancel(const volatile int *cancel) {
    return cancel && *cancel ? tt_err(TT_ECANCELED, "k-means cancelled") : TT_OK;
}

static int resolve_threads(int threads) {
    return threads > 0 ? TT_MIN(threads, 256) : tt_default_threads();
}

/* Exact assignment of n vectors, blocks of BLOCK_ROWS split over threads in
 * contiguous runs (block boundaries do not depend on the thread count). */
typedef struct exact_job {
    const float *x;
    uint64_t n;
    const float *c, *hn;
    uint32_t k, dim;
    uint32_t *ids;
    float *scratch; /* per thread: BLOCK_ROWS * BLOCK_COLS + BLOCK_ROWS floats */
    const volatile int *cancel; /* set: the remaining blocks are skipped */
} exact_job;

static size_t exact_scratch_floats(void) { return (size_t)BLOCK_ROWS * BLOCK_COLS + BLOCK_ROWS; }

static void exact_worker(void *arg, int t, int nt) {
    exact_job *j = (exact_job *)arg;
    uint64_t nblk = (j->n + BLOCK_ROWS - 1) / BLOCK_ROWS;
    uint64_t b0 = nblk * (uint64_t)t / (uint64_t)nt, b1 = nblk * (uint64_t)(t + 1) / (uint64_t)nt;
    float *S = j->scratch + exact_scratch_floats() * (size_t)t;
    float *best = S + (size_t)BLOCK_ROWS * BLOCK_COLS;
    for (uint64_t b = b0; b < b1 && !(j->cancel && *j->cancel); b++) {
        uint64_t i = b * BLOCK_ROWS;
        uint32_t nb = (uint32_t)TT_MIN((uint64_t)BLOCK_ROWS, j->n - i);
        nearest_block(j->x + i * j->dim, nb, j->c, j->hn, j->k, j->dim, S, j->ids + i, best);
    }
}

/* Runs the exact assignment with up to `threads` threads; the caller holds the BLAS
 * guard. TT_ECANCELED (ids incomplete) once *cancel is set. */
static int assign_exact(const float *x, uint64_t n, const float *c, const float *hn, uint32_t k,
                        uint32_t dim, uint32_t *ids, int threads, const volatile int *cancel) {
    uint64_t nblk = (n + BLOCK_ROWS - 1) / BLOCK_ROWS;
    int nt = (int)TT_MIN((uint64_t)threads, TT_MAX(nblk, (uint64_t)1));
    float *scratch = tt_alloc((uint64_t)nt * exact_scratch_floats(), sizeof(float),
                              "kmeans: assignment scratch");
    if (!scratch)
        return TT_ENOMEM;
    exact_job job = {x, n, c, hn, k, dim, ids, scratch, cancel};
    /* tt_parallel runs the share of a thread that fails to start on the caller, so the
     * work is complete whatever it returns. */
    (void)tt_parallel(nt, exact_worker, &job);
    free(scratch);
    return check_cancel(cancel);
}

/* ------------------------------------------------------- exact fixed-point sums */

int tt_fix_exponent(double maxabs) {
    int e = 0;
    if (maxabs > 0 && isfinite(maxabs))
        (void)frexp(maxabs, &e); /* maxabs = m 2^e, 0.5 <= m < 1: below 2^e */
    return e;
}

double tt_fix_scale(int e) { return ldexp(1.0, 61 - e); }

double tt_fix_value(const int64_t *acc, double scale) {
    int64_t carry = acc[1] / 4294967296LL; /* acc[1] >= 0 */
    int64_t lo = acc[1] - carry * 4294967296LL;
    return ((double)(acc[0] + carry) * 4294967296.0 + (double)lo) / scale;
}

/* The exponent of the largest |x[i]| over n values, over every part when distributed
 * (a reduce). */
static int part_reduce(const tt_kmeans_part *part, int64_t *buf, size_t n, int op) {
    if (part->reduce(part->user, buf, n, op))
        return tt_err(TT_EIO, "k-means: the reduce between the parts of a distributed "
                      "training failed");
    return TT_OK;
}

static int data_exponent(const float *x, uint64_t n, const tt_kmeans_part *part, int *e) {
    float m = 0;
    for (uint64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > m)
            m = a;
    }
    *e = tt_fix_exponent(m);
    if (!part)
        return TT_OK;
    int64_t v = *e;
    int st = part_reduce(part, &v, 1, TT_REDUCE_MAX);
    *e = (int)v;
    return st;
}

/* Rows idx[0..m) (idx NULL: rows 0..m-1) of the whole into out (m * dim). Alone: copies
 * from x. Distributed: first a sum of the parts' failure flags (local_st != 0, or no
 * memory for the buffer: every part fails), then the owner of each row contributes its
 * bits, the others zero, and a sum gives every part the rows. */
static int gather_rows(const float *x, uint64_t n, uint32_t dim, const tt_kmeans_part *part,
                       const uint64_t *idx, uint64_t m, float *out, int local_st) {
    if (!part) {
        for (uint64_t i = 0; i < m; i++)
            memcpy(out + i * dim, x + (idx ? idx[i] : i) * dim, sizeof(float) * dim);
        return TT_OK;
    }
    const uint64_t words = m * dim;
    int64_t *buf = local_st ? NULL : tt_calloc(words, sizeof *buf, "k-means: gathered rows");
    if (!buf && !local_st)
        local_st = TT_ENOMEM;
    int64_t flag = local_st != 0;
    int st = part_reduce(part, &flag, 1, TT_REDUCE_SUM);
    if (!st && local_st)
        st = local_st;
    else if (!st && flag)
        st = tt_err(TT_EIO, "k-means: another part of the distributed training failed");
    if (st) {
        free(buf);
        return st;
    }
    for (uint64_t i = 0; i < m; i++) {
        uint64_t g = idx ? idx[i] : i;
        if (g < part->first || g - part->first >= n)
            continue;
        const float *r = x + (g - part->first) * dim;
        for (uint32_t d = 0; d < dim; d++) {
            uint32_t bits;
            memcpy(&bits, &r[d], 4);
            buf[i * dim + d] = (int64_t)bits;
        }
    }
    st = part_reduce(part, buf, words, TT_REDUCE_SUM);
    for (uint64_t i = 0; i < words && !st; i++) {
        uint32_t bits = (uint32_t)buf[i];
        memcpy(&out[i], &bits, 4);
    }
    free(buf);
    return st;
}

/* --------------------------------------------------------------- training */

/* k distinct indices of [0, n) in `out`, by Floyd's algorithm (Bentley & Floyd, "A
 * sample of brilliance", CACM 1987): O(k) memory where a shuffle would need O(n). The
 * open-addressing set stores index+1 (0 = empty) in `set` of `cap` (a power of two
 * >= 2k) slots. */
static void sample_distinct(tt_rng *rng, uint64_t n, uint32_t k, uint64_t *set, uint64_t cap,
                            uint64_t *out) {
    uint32_t m = 0;
    for (uint64_t j = n - k; j < n; j++) {
        uint64_t t = tt_rng_below(rng, j + 1);
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: insert t; if already there, pass 1 inserts j (never present) */
            uint64_t v = pass == 0 ? t : j;
            uint64_t h = (v * 0x9e3779b97f4a7c15ull) & (cap - 1);
            while (set[h] && set[h] != v + 1)
                h = (h + 1) & (cap - 1);
            if (set[h] == v + 1)
                continue;
            set[h] = v + 1;
            out[m++] = v;
            break;
        }
    }
}

/* Greedy k-means++ seeding (Arthur & Vassilvitskii 2007; the greedy variant of
 * scikit-learn, 2 + ln k candidates per step, keeping the one that lowers the
 * potential most) on a random subsample of at most KMPP_PER_CENTROID * k vectors
 * and KMPP_BYTES of gathered rows. Random seeding leaves some of k well separated
 * clusters without a centroid and Lloyd cannot leave that local minimum; k-means++
 * avoids it but is sequential in k, so it is used for small k only (the grouping of
 * the two-level assigner, small corpora). Candidate distances come from one sgemm
 * per step. set has room for 2m entries. */
enum { KMPP_MAX_K = 256, KMPP_PER_CENTROID = 32 };
#define KMPP_BYTES ((uint64_t)64 << 20)

static uint64_t kmpp_sample_size(uint64_t n, uint32_t k, uint32_t dim) {
    uint64_t m = TT_MIN(n, (uint64_t)KMPP_PER_CENTROID * k);
    return TT_MIN(m, TT_MAX((uint64_t)k, KMPP_BYTES / ((uint64_t)dim * sizeof(float))));
}

/* n is the whole's size; distributed (part), x holds the part's nloc rows and the
 * sample (or, when it is the whole, every row) is gathered from the parts. */
static int kmpp_init(const float *x, uint64_t n, uint64_t nloc, const tt_kmeans_part *part,
                     uint32_t k, uint32_t dim, tt_rng *rng, uint64_t *set, uint64_t cap,
                     float *c) {
    const uint64_t m = kmpp_sample_size(n, k, dim);
    const uint32_t trials = 2 + (uint32_t)log((double)k);
    const bool copy = m < n || part;
    uint64_t *idx = tt_alloc(m, sizeof *idx, "kmeans++: sample");
    float *xs = copy ? tt_alloc(m, (uint64_t)dim * sizeof(float), "kmeans++: rows") : NULL;
    double *d2 = tt_alloc(m, 3 * sizeof(double), "kmeans++: distances");
    float *cand = tt_alloc(trials, (uint64_t)dim * sizeof(float), "kmeans++: candidates");
    float *dots = tt_alloc(trials, m * sizeof(float), "kmeans++: dots");
    uint64_t *ci = tt_alloc(trials, sizeof *ci, "kmeans++: candidate ids");
    int st = TT_ENOMEM;
    bool oom = !idx || (copy && !xs) || !d2 || !cand || !dots || !ci;
    if (oom && !part)
        goto done;
    if (copy) {
        if (m < n && !oom)
            sample_distinct(rng, n, (uint32_t)m, set, cap, idx);
        /* distributed: every part reaches the gather, a failed one with its status */
        if ((st = gather_rows(x, nloc, dim, part, m < n ? idx : NULL, m, xs, oom ? st : TT_OK)))
            goto done;
    }
    double *xn = d2 + m, *cum = d2 + 2 * m;
    const float *X = copy ? xs : x;
    for (uint64_t i = 0; i < m; i++) {
        double s = 0;
        for (uint32_t d = 0; d < dim; d++)
            s += (double)X[i * dim + d] * X[i * dim + d];
        xn[i] = s;
    }
    uint64_t first = tt_rng_below(rng, m);
    memcpy(c, X + first * dim, sizeof(float) * dim);
    for (uint64_t i = 0; i < m; i++)
        d2[i] = INFINITY;
    for (uint32_t j = 0; j < k; j++) {
        uint32_t nc = j == 0 ? 1 : trials;
        if (j == 0) {
            ci[0] = first;
        } else {
            cum[0] = d2[0];
            for (uint64_t i = 1; i < m; i++)
                cum[i] = cum[i - 1] + d2[i];
            double pot = cum[m - 1];
            for (uint32_t t = 0; t < nc; t++) {
                if (!(pot > 0)) { /* every vector sits on a centre: duplicates */
                    ci[t] = tt_rng_below(rng, m);
                    continue;
                }
                double r = tt_rng_uniform(rng) * pot;
                uint64_t lo = 0, hi = m - 1; /* first i with cum[i] > r */
                while (lo < hi) {
                    uint64_t mid = lo + (hi - lo) / 2;
                    if (cum[mid] > r)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                ci[t] = lo;
            }
        }
        for (uint32_t t = 0; t < nc; t++)
            memcpy(cand + (size_t)t * dim, X + ci[t] * dim, sizeof(float) * dim);
        /* m <= KMPP_PER_CENTROID * KMPP_MAX_K fits an int */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nc, (int)m, (int)dim, 1.0f,
                    cand, (int)dim, X, (int)dim, 0.0f, dots, (int)m);
        /* potential after adding each candidate; keep the lowest (first on ties) */
        uint32_t bt = 0;
        double bpot = INFINITY;
        for (uint32_t t = 0; t < nc; t++) {
            const float *dt = dots + (size_t)t * m;
            double cn = xn[ci[t]], pot = 0;
            for (uint64_t i = 0; i < m; i++) {
                double dd = TT_MAX(xn[i] + cn - 2.0 * dt[i], 0.0);
                pot += TT_MIN(dd, d2[i]);
            }
            if (pot < bpot) {
                bpot = pot;
                bt = t;
            }
        }
        const float *dt = dots + (size_t)bt * m;
        double cn = xn[ci[bt]];
        for (uint64_t i = 0; i < m; i++)
            d2[i] = TT_MIN(d2[i], TT_MAX(xn[i] + cn - 2.0 * dt[i], 0.0));
        d2[ci[bt]] = 0;
        memcpy(c + (size_t)j * dim, cand + (size_t)bt * dim, sizeof(float) * dim);
    }
    st = TT_OK;
done:
    free(idx);
    free(xs);
    free(d2);
    free(cand);
    free(dots);
    free(ci);
    return st;
}

/* Max-heap of clusters by (count desc, index asc) for the empty-cluster split. */
typedef struct split_heap {
    uint32_t *h;
    uint32_t len;
    const uint64_t *cnt;
} split_heap;

static bool heap_above(const split_heap *s, uint32_t a, uint32_t b) {
    return s->cnt[a] > s->cnt[b] || (s->cnt[a] == s->cnt[b] && a < b);
}

static void heap_down(split_heap *s, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < s->len && heap_above(s, s->h[l], s->h[m]))
            m = l;
        if (l + 1 < s->len && heap_above(s, s->h[l + 1], s->h[m]))
            m = l + 1;
        if (m == i)
            return;
        uint32_t t = s->h[i];
        s->h[i] = s->h[m];
        s->h[m] = t;
        i = m;
    }
}

static void heap_push(split_heap *s, uint32_t c) {
    uint32_t i = s->len++;
    s->h[i] = c;
    while (i > 0 && heap_above(s, s->h[i], s->h[(i - 1) / 2])) {
        uint32_t p = (i - 1) / 2, t = s->h[i];
        s->h[i] = s->h[p];
        s->h[p] = t;
        i = p;
    }
}

/* Empty clusters take a copy of the largest cluster's centroid, and the two copies are
 * pushed apart by a small symmetric perturbation, +-eps on alternate dimensions (FAISS
 * Clustering, split_clusters); the split cluster's count is assumed to halve. Counts
 * always sum to n >= k, so while a cluster is empty another holds >= 2 members and
 * the heap is never empty. Returns the number of splits. */
static uint32_t split_empty(float *c, uint32_t k, uint32_t dim, uint64_t *cnt, uint32_t *heap) {
    const float eps = 1.0f / 1024;
    split_heap s = {heap, 0, cnt};
    uint32_t nsplit = 0;
    for (uint32_t j = 0; j < k; j++)
        if (cnt[j] >= 2)
            heap_push(&s, j);
    for (uint32_t ci = 0; ci < k; ci++) {
        if (cnt[ci] != 0)
            continue;
        if (s.len == 0) /* unreachable while sum(cnt) = n >= k */
            break;
        uint32_t cj = s.h[0];
        float *a = c + (size_t)ci * dim, *b = c + (size_t)cj * dim;
        for (uint32_t d = 0; d < dim; d++) {
            float v = b[d];
            a[d] = v * (d % 2 == 0 ? 1 + eps : 1 - eps);
            b[d] = v * (d % 2 == 0 ? 1 - eps : 1 + eps);
        }
        cnt[ci] = cnt[cj] / 2;
        cnt[cj] -= cnt[ci];
        /* cj, the root, only shrank: drop it if it cannot be split again (it held 2),
         * else sift it down; then add ci if it can be split */
        if (cnt[cj] < 2)
            s.h[0] = s.h[--s.len];
        heap_down(&s, 0);
        if (cnt[ci] >= 2)
            heap_push(&s, ci);
        nsplit++;
    }
    return nsplit;
}

/* The update step: each centroid becomes the mean of its members, summed exactly as
 * fixed-point integers (tt_fix_add), so the sum does not depend on the order of the
 * members nor on how they are split between threads or the parts of a distributed
 * training (perm lists the members of centroid j at off[j]..off[j+1]). Centroids
 * [cb[t], cb[t+1]) belong to thread t. Alone (shared = false) a thread sums in its own
 * 2*dim words and writes the mean; distributed, it leaves centroid j's sums at
 * sums[2*dim*j] for the reduce (fix_mean after). Empty centroids are left unchanged. */
typedef struct update_job {
    const float *x;
    uint32_t dim;
    const uint64_t *off, *perm;
    const uint32_t *cb; /* nt+1 centroid bounds */
    float *c;
    int64_t *sums;      /* per thread, or per centroid when shared: 2*dim words */
    bool shared;
    double scale;
} update_job;

static void fix_mean(float *cj, const int64_t *acc, uint32_t dim, uint64_t cnt, double scale) {
    for (uint32_t d = 0; d < dim; d++)
        cj[d] = (float)(tt_fix_value(acc + 2 * (size_t)d, scale) / (double)cnt);
}

static void update_worker(void *arg, int t, int nt) {
    update_job *u = (update_job *)arg;
    const size_t w = 2 * (size_t)u->dim;
    for (uint32_t j = u->cb[t]; j < u->cb[t + 1]; j++) {
        uint64_t m0 = u->off[j], m1 = u->off[j + 1];
        if (m0 == m1)
            continue;
        int64_t *acc = u->sums + w * (u->shared ? (size_t)j : (size_t)t);
        memset(acc, 0, sizeof *acc * w);
        for (uint64_t m = m0; m < m1; m++) {
            const float *r = u->x + u->perm[m] * u->dim;
            for (uint32_t d = 0; d < u->dim; d++)
                tt_fix_add(acc + 2 * (size_t)d, r[d], u->scale);
        }
        if (!u->shared)
            fix_mean(u->c + (size_t)j * u->dim, acc, u->dim, m1 - m0, u->scale);
    }
    (void)nt;
}

static int check_params(uint64_t n, const tt_kmeans_params *p) {
    uint64_t bytes;
    if (p->k == 0)
        return tt_err(TT_EINVAL, "kmeans: k must be at least 1");
    if (p->dim == 0 || p->dim > INT_MAX)
        return tt_err(TT_EINVAL, "kmeans: dimension %u out of range", p->dim);
    if (n < p->k)
        return tt_err(TT_EINVAL, "kmeans: %llu vectors for k=%u centroids (need n >= k)",
                      (unsigned long long)n, p->k);
    if (p->iters < 0)
        return tt_err(TT_EINVAL, "kmeans: iterations %d < 0", p->iters);
    if (!tt_mul_ok(n, (uint64_t)p->dim * sizeof(float), &bytes) || bytes > SIZE_MAX)
        return tt_err(TT_ENOMEM, "kmeans: %llu x %u vectors overflow", (unsigned long long)n,
                      p->dim);
    return TT_OK;
}

/* ------------------------------------------------ flat and hierarchical Lloyd */

/* One flat Lloyd run. Seeds the centroids first when `init`, else starts from the
 * given ones. The assignment step is exact, or by a two-level assigner rebuilt on the
 * current centroids each iteration when `two_level` (hierarchical refinement).
 * Progress is reported as (base + iteration, total) when total != 0. */
typedef struct lloyd_cfg {
    uint32_t k, dim;
    int iters;
    uint64_t seed;
    int spherical;
    int threads; /* resolved, >= 1 */
    bool init, two_level;
    tt_progress_fn progress;
    void *progress_user;
    uint64_t prog_base, prog_total;
    const volatile int *cancel;
    const tt_kmeans_part *part; /* distributed training: x is this part's rows */
} lloyd_cfg;

/* Distributed: the parts agree on a status (sum of failure flags); a part that failed
 * keeps its error, the others get TT_EIO. */
static int part_agree(const tt_kmeans_part *part, int st) {
    if (!part)
        return st;
    int64_t flag = st != 0;
    int rst = part_reduce(part, &flag, 1, TT_REDUCE_SUM);
    if (st || rst)
        return st ? st : rst;
    return flag ? tt_err(TT_EIO, "k-means: another part of the distributed training failed")
                : TT_OK;
}

static int lloyd(const float *x, uint64_t n, const lloyd_cfg *cf, float *centroids) {
    int st;
    const uint32_t k = cf->k, dim = cf->dim;
    const int threads = cf->threads;
    const tt_kmeans_part *part = cf->part;
    const uint64_t N = part ? part->total : n; /* rows of the whole */
    const bool kmpp = cf->init && k > 1 && k <= KMPP_MAX_K;
    uint64_t cap = 2, want = 2 * (kmpp ? kmpp_sample_size(N, k, dim) : k);
    while (cap < want)
        cap *= 2;
    const uint64_t nal = TT_MAX(n, (uint64_t)1);
    /* the update's sums: per thread alone; per centroid, then counts and a failure flag,
     * when distributed */
    const uint64_t swords = part ? (uint64_t)k * (2 * (uint64_t)dim + 1) + 1
                                 : (uint64_t)threads * 2 * dim;
    uint32_t *ids = tt_alloc(nal, sizeof *ids, "kmeans: assignment");
    uint64_t *perm = tt_alloc(nal, sizeof *perm, "kmeans: members");
    uint64_t *pick = cf->init ? tt_alloc(k, sizeof *pick, "kmeans: initial rows") : NULL;
    uint64_t *off = tt_alloc((uint64_t)k + 1, sizeof *off, "kmeans: offsets");
    uint64_t *cnt = tt_alloc(k, sizeof *cnt, "kmeans: counts");
    uint64_t *set = cf->init ? tt_calloc(cap, sizeof *set, "kmeans: sample set") : NULL;
    uint32_t *heap = tt_alloc(k, sizeof *heap, "kmeans: split heap");
    float *hn = tt_alloc(k, sizeof *hn, "kmeans: norms");
    uint32_t *cb = tt_alloc((uint64_t)threads + 1, sizeof *cb, "kmeans: bounds");
    int64_t *sums = tt_alloc(swords, sizeof *sums, "kmeans: sums");
    bool guard = false;
    st = !ids || !perm || (cf->init && !pick) || !off || !cnt || (cf->init && !set) || !heap ||
                 !hn || !cb || !sums
             ? TT_ENOMEM
             : TT_OK;
    if ((st = part_agree(part, st)))
        goto done;
    int e;
    if ((st = data_exponent(x, n * dim, part, &e)))
        goto done;
    const double scale = tt_fix_scale(e);

    blas_single_begin();
    guard = true;
    /* Initial centroids: k distinct random vectors, as FAISS does (k-means++ is
     * sequential in k, too slow for the 2^12..2^18 centroids of real corpora), except
     * for small k where greedy k-means++ is cheap and much more robust. */
    if (cf->init) {
        tt_rng rng;
        tt_rng_seed(&rng, cf->seed);
        if (kmpp) {
            if ((st = kmpp_init(x, N, n, part, k, dim, &rng, set, cap, centroids)))
                goto done;
        } else {
            sample_distinct(&rng, N, k, set, cap, pick);
            if ((st = gather_rows(x, n, dim, part, pick, k, centroids, TT_OK)))
                goto done;
        }
        if (cf->spherical)
            tt_normalize_rows(centroids, k, dim);
    }
    for (int it = 0; it < cf->iters; it++) {
        int lst = check_cancel(cf->cancel);
        if (lst && !part) {
            st = lst;
            goto done;
        }
        if (lst) {
        } else if (cf->two_level) {
            /* distributed: every part builds the same assigner from the same centroids
             * and assigns its rows; a failure goes to the reduce below */
            tt_assigner *a = NULL;
            lst = tt_assigner_new(centroids, k, dim, TT_ASSIGN_TWO_LEVEL,
                                  cf->seed + (uint64_t)it, threads, &a);
            if (!lst)
                lst = tt_assign(a, x, n, ids, threads);
            tt_assigner_free(a);
            if (lst && !part) {
                st = lst;
                goto done;
            }
        } else {
            half_norms(centroids, k, dim, hn);
            lst = assign_exact(x, n, centroids, hn, k, dim, ids, threads, cf->cancel);
            if (lst && !part) {
                st = lst;
                goto done;
            }
        }
        if (!lst) {
            /* counting sort of the vectors by centroid: members in increasing order */
            memset(cnt, 0, sizeof *cnt * k);
            for (uint64_t i = 0; i < n; i++)
                cnt[ids[i]]++;
            off[0] = 0;
            for (uint32_t j = 0; j < k; j++)
                off[j + 1] = off[j] + cnt[j];
            for (uint32_t j = 0; j < k; j++)
                cnt[j] = off[j];
            for (uint64_t i = 0; i < n; i++)
                perm[cnt[ids[i]]++] = i;
            for (uint32_t j = 0; j < k; j++)
                cnt[j] = off[j + 1] - off[j];
            /* centroid ranges of about n/threads members each */
            int nt = (int)TT_MIN((uint64_t)threads, (uint64_t)k);
            cb[0] = 0;
            uint32_t j = 0;
            for (int t = 1; t <= nt; t++) {
                uint64_t goal = n * (uint64_t)t / (uint64_t)nt;
                while (j < k && (off[j + 1] <= goal || t == nt))
                    j++;
                cb[t] = j;
            }
            if (part)
                memset(sums, 0, sizeof *sums * swords);
            update_job u = {x, dim, off, perm, cb, centroids, sums, part != NULL, scale};
            (void)tt_parallel(nt, update_worker, &u); /* complete whatever it returns */
        }
        if (part) {
            /* the parts' sums, counts and failure flags summed: the whole's */
            int64_t *pc = sums + (size_t)k * 2 * dim;
            if (lst)
                memset(sums, 0, sizeof *sums * swords);
            for (uint32_t j = 0; j < k && !lst; j++)
                pc[j] = (int64_t)cnt[j];
            pc[k] = lst != 0;
            if ((st = part_reduce(part, sums, swords, TT_REDUCE_SUM)))
                goto done;
            if (lst || pc[k]) {
                st = lst ? lst
                         : tt_err(TT_EIO, "k-means: another part of the distributed training "
                                  "failed");
                goto done;
            }
            for (uint32_t j = 0; j < k; j++) {
                cnt[j] = (uint64_t)pc[j];
                if (cnt[j])
                    fix_mean(centroids + (size_t)j * dim, sums + (size_t)j * 2 * dim, dim,
                             cnt[j], scale);
            }
        }
        split_empty(centroids, k, dim, cnt, heap);
        if (cf->spherical)
            tt_normalize_rows(centroids, k, dim);
        if (cf->progress && cf->prog_total)
            cf->progress(cf->progress_user, "kmeans", cf->prog_base + (uint64_t)it + 1,
                         cf->prog_total);
    }
    st = TT_OK;
done:
    if (guard)
        blas_single_end();
    free(ids);
    free(perm);
    free(pick);
    free(off);
    free(cnt);
    free(set);
    free(heap);
    free(hn);
    free(cb);
    free(sums);
    return st;
}

/* Hierarchical training: the two-level clustering of FAISS
 * (faiss/contrib/clustering.py, two_level_clustering), which trains nc1 ~ sqrt(k)
 * coarse clusters, then k-means inside each with sub-cluster counts proportional to
 * the coarse cluster sizes; plus optional Lloyd refinement over all vectors.
 *
 * Why: flat Lloyd costs n*k*dim per iteration (1.9M x 32768 x 128 is 8 T multiply-adds,
 * minutes per iteration on a small CPU). Here the coarse level costs n*G*dim and the
 * fine level sum_c n_c*k_c*dim ~ n*(k/G)*dim per iteration; with G = sqrt(k) that is
 * 2n*sqrt(k)*dim. A vector can only end up with centroids of its own coarse cluster,
 * which loses little when clusters are much finer than the coarse partition; the
 * refine iterations let vectors and centroids cross coarse borders again at the price
 * of a two-level assignment (~15% of an exact one, see default_probe).
 *
 * Parallelism and determinism. Fine k-means run one per thread (single-threaded
 * inside), handed out largest first from an atomic counter; each one's result depends
 * only on its vectors (gathered in increasing index order), its k_c and a seed derived
 * from (seed, coarse cluster), and lands at a fixed offset, so which thread runs it does
 * not matter. */
typedef struct hier_job {
    const float *x;
    uint32_t dim;
    int iters, spherical;
    uint64_t seed;
    const uint64_t *perm;   /* vectors grouped by coarse cluster, increasing within */
    const uint64_t *voff;   /* G + 1 offsets into perm */
    const uint64_t *koff;   /* G + 1 offsets of each cluster's centroids */
    const float *rows;      /* distributed: the owned clusters' rows, gathered, or NULL */
    const uint64_t *rows_off; /* cluster c's first row in rows */
    const uint32_t *order;  /* coarse clusters, largest work first */
    uint32_t ntask;         /* clusters with k_c >= 1 */
    float *c;
    _Atomic uint32_t next, finished;
    _Atomic int status;     /* first failure */
    pthread_mutex_t mu;
    char msg[512];          /* its tt_last_error() */
    tt_progress_fn progress;
    void *progress_user;
    uint64_t prog_base, prog_total;
    const volatile int *cancel;
} hier_job;

static void hier_worker(void *arg, int t, int nt) {
    hier_job *j = (hier_job *)arg;
    (void)nt;
    for (;;) {
        uint32_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->ntask || atomic_load(&j->status) != TT_OK)
            return;
        uint32_t c = j->order[i];
        uint64_t v0 = j->voff[c], nc = j->voff[c + 1] - v0;
        uint32_t kc = (uint32_t)(j->koff[c + 1] - j->koff[c]);
        /* the cluster's vectors, in increasing index order: gathered (distributed), or
         * copied here */
        float *sub = j->rows ? NULL
                             : tt_alloc(nc, (uint64_t)j->dim * sizeof(float),
                                        "kmeans: coarse cluster");
        const float *src = j->rows ? j->rows + j->rows_off[c] * j->dim : sub;
        int st = TT_ENOMEM;
        if (src) {
            for (uint64_t m = 0; sub && m < nc; m++)
                memcpy(sub + m * j->dim, j->x + j->perm[v0 + m] * j->dim,
                       sizeof(float) * j->dim);
            /* splitmix-style decorrelation of the per-cluster seeds (tt_rng_seed mixes
             * again) */
            lloyd_cfg cf = {.k = kc, .dim = j->dim, .iters = j->iters,
                            .seed = j->seed ^ ((uint64_t)(c + 1) * 0x9e3779b97f4a7c15ull),
                            .spherical = j->spherical, .threads = 1, .init = true,
                            .cancel = j->cancel};
            st = lloyd(src, nc, &cf, j->c + j->koff[c] * j->dim);
            free(sub);
        }
        if (st != TT_OK) {
            pthread_mutex_lock(&j->mu);
            if (atomic_load(&j->status) == TT_OK) {
                snprintf(j->msg, sizeof j->msg, "%s", tt_last_error());
                atomic_store(&j->status, st);
            }
            pthread_mutex_unlock(&j->mu);
            return;
        }
        uint32_t done = atomic_fetch_add(&j->finished, 1) + 1;
        /* thread 0 is the caller: the only one allowed to call progress */
        if (t == 0 && j->progress)
            j->progress(j->progress_user, "kmeans", j->prog_base + done, j->prog_total);
    }
}

/* k_c for each of the g coarse clusters of sizes nc (sum n >= k): the largest-remainder
 * apportionment of k in proportion to nc, with 1 <= k_c <= n_c for non-empty clusters
 * and 0 for empty ones. At most g adjustments either way, each O(g). */
static void apportion(const uint64_t *nc, uint32_t g, uint64_t n, uint32_t k, uint64_t *kc,
                      double *quota) {
    uint64_t sum = 0;
    for (uint32_t c = 0; c < g; c++) {
        quota[c] = (double)k * (double)nc[c] / (double)n;
        uint64_t q = (uint64_t)floor(quota[c]);
        if (nc[c] > 0 && q < 1)
            q = 1;
        kc[c] = TT_MIN(q, nc[c]);
        sum += kc[c];
    }
    while (sum < k) { /* a cluster with kc < nc exists since sum(nc) = n >= k */
        uint32_t best = g;
        for (uint32_t c = 0; c < g; c++)
            if (kc[c] < nc[c] && (best == g || quota[c] - (double)kc[c] >
                                                   quota[best] - (double)kc[best]))
                best = c;
        kc[best]++;
        sum++;
    }
    while (sum > k) { /* then some kc > 1: at most g <= k clusters are non-empty */
        uint32_t best = g;
        for (uint32_t c = 0; c < g; c++)
            if (kc[c] > 1 && (best == g || quota[c] - (double)kc[c] <
                                               quota[best] - (double)kc[best]))
                best = c;
        kc[best]--;
        sum--;
    }
}

/* Distributed hierarchical training: the pieces that exchange data. */

/* Member of the least load (lowest rank on ties) for each task of `order`, largest
 * work first (LPT): owner[c] for the coarse clusters with k_c >= 1. */
static void assign_owners(const uint32_t *order, uint32_t ntask, const uint64_t *nc,
                          const uint64_t *kc, uint32_t size, double *load, uint32_t *owner) {
    for (uint32_t r = 0; r < size; r++)
        load[r] = 0;
    for (uint32_t i = 0; i < ntask; i++) {
        uint32_t c = order[i], best = 0;
        for (uint32_t r = 1; r < size; r++)
            if (load[r] < load[best])
                best = r;
        owner[c] = best;
        load[best] += (double)nc[c] * (double)kc[c] + 1.0;
    }
}

/* Rows [a, b) of a matrix of `rows` x dim floats that the members hold in pieces:
 * `have(ctx, i)` says whether this member holds row i (at src(ctx, i)); after a sum of
 * the bits (every row held by exactly one member) each member's `take(ctx, i, row)` is
 * called for every row it wants. In pieces of at most TT_KMEANS_GATHER_WORDS words
 * through buf. */
typedef struct share_fns {
    const float *(*src)(void *ctx, uint64_t i); /* NULL: not held here */
    float *(*dst)(void *ctx, uint64_t i);       /* NULL: not wanted here */
    void *ctx;
} share_fns;

static int share_rows(const tt_kmeans_part *part, uint64_t a, uint64_t b, uint32_t dim,
                      const share_fns *f, int64_t *buf) {
    const uint64_t step = TT_MAX((uint64_t)TT_KMEANS_GATHER_WORDS / dim, (uint64_t)1);
    for (uint64_t r0 = a; r0 < b; r0 += step) {
        uint64_t r1 = TT_MIN(b, r0 + step);
        memset(buf, 0, sizeof *buf * (size_t)(r1 - r0) * dim);
        for (uint64_t i = r0; i < r1; i++) {
            const float *r = f->src(f->ctx, i);
            for (uint32_t d = 0; r && d < dim; d++) {
                uint32_t bits;
                memcpy(&bits, &r[d], 4);
                buf[(i - r0) * dim + d] = (int64_t)bits;
            }
        }
        int st = part_reduce(part, buf, (size_t)(r1 - r0) * dim, TT_REDUCE_SUM);
        if (st)
            return st;
        for (uint64_t i = r0; i < r1; i++) {
            float *o = f->dst(f->ctx, i);
            for (uint32_t d = 0; o && d < dim; d++) {
                uint32_t bits = (uint32_t)buf[(i - r0) * dim + d];
                memcpy(&o[d], &bits, 4);
            }
        }
    }
    return TT_OK;
}

/* The rows of coarse cluster c, in the whole's order: this part's members of c are
 * rows [lo, lo + lcnt) of the cluster, at x rows lperm[lvoff[c]..]. */
typedef struct gather_ctx {
    const float *x;
    uint32_t dim;
    const uint64_t *lperm;
    uint64_t lbase, lo, lcnt; /* lperm offset of c's local members, their cluster rows */
    float *out;               /* the cluster's rows here (owner), or NULL */
} gather_ctx;

static const float *gather_src(void *ctx, uint64_t i) {
    gather_ctx *g = ctx;
    if (i < g->lo || i - g->lo >= g->lcnt)
        return NULL;
    return g->x + g->lperm[g->lbase + (i - g->lo)] * g->dim;
}

static float *gather_dst(void *ctx, uint64_t i) {
    gather_ctx *g = ctx;
    return g->out ? g->out + i * g->dim : NULL;
}

/* The fine centroids: row i belongs to the coarse cluster cof[i]'s owner. */
typedef struct fine_ctx {
    float *c;
    uint32_t dim, rank;
    const uint32_t *owner;
    const uint64_t *koff;
    uint32_t g;
    uint32_t cur; /* cluster of the last row asked for (rows come in increasing order) */
} fine_ctx;

static uint32_t fine_cluster(fine_ctx *f, uint64_t i) {
    if (f->cur >= f->g || i < f->koff[f->cur])
        f->cur = 0;
    while (f->koff[f->cur + 1] <= i)
        f->cur++;
    return f->cur;
}

static const float *fine_src(void *ctx, uint64_t i) {
    fine_ctx *f = ctx;
    return f->owner[fine_cluster(f, i)] == f->rank ? f->c + i * f->dim : NULL;
}

static float *fine_dst(void *ctx, uint64_t i) {
    fine_ctx *f = ctx;
    return f->owner[fine_cluster(f, i)] == f->rank ? NULL : f->c + i * f->dim;
}

static int train_hier(const float *x, uint64_t n, const tt_kmeans_params *p, int threads,
                      float *centroids) {
    int st, lst = TT_OK;
    const tt_kmeans_part *part = p->part;
    const uint64_t N = part ? part->total : n; /* rows of the whole */
    const uint32_t k = p->k, dim = p->dim, size = part ? part->size : 1;
    const uint32_t g = TT_MIN(TT_MAX((uint32_t)lround(sqrt((double)k)), 1u), k);
    const int refine = p->refine == 0 ? TT_KMEANS_DEFAULT_REFINE : TT_MAX(p->refine, 0);
    const uint64_t total = (uint64_t)p->iters + g + (uint64_t)refine;
    const uint64_t nal = TT_MAX(n, (uint64_t)1);
    float *gc = tt_alloc(g, (uint64_t)dim * sizeof(float), "kmeans: coarse centroids");
    float *ghn = tt_alloc(g, sizeof *ghn, "kmeans: coarse norms");
    uint32_t *own = tt_alloc(nal, sizeof *own, "kmeans: coarse assignment");
    uint64_t *perm = tt_alloc(nal, sizeof *perm, "kmeans: coarse members");
    /* sizes, fine counts, fill cursors (g each), vector and centroid offsets (g + 1),
     * and distributed: local sizes, local offsets (g each, g + 1) */
    uint64_t *nc = tt_alloc(7 * (uint64_t)g + 3, sizeof *nc, "kmeans: coarse sizes");
    double *quota = tt_alloc(g + (uint64_t)size, sizeof *quota, "kmeans: quotas");
    /* the tasks by work, their owners, this part's own tasks (g each) */
    uint32_t *order = tt_alloc(3 * (uint64_t)g, sizeof *order, "kmeans: order");
    /* distributed: every part's first row and cluster sizes, then the gather buffer */
    int64_t *xb = part ? tt_alloc(TT_MAX((uint64_t)size * (g + 1),
                                         (uint64_t)TT_MIN((size_t)N * dim,
                                                          TT_MAX(TT_KMEANS_GATHER_WORDS,
                                                                 (size_t)dim))),
                                  sizeof *xb, "kmeans: exchange buffer")
                       : NULL;
    float *mine = NULL; /* distributed: the coarse clusters this part trains, gathered */
    uint64_t *moff = NULL;
    st = !gc || !ghn || !own || !perm || !nc || !quota || !order || (part && !xb) ? TT_ENOMEM
                                                                                 : TT_OK;
    if ((st = part_agree(part, st)))
        goto done;
    uint64_t *kc = nc + g, *cur = kc + g, *voff = cur + g, *koff = voff + g + 1;
    uint64_t *lnc = koff + g + 1, *lvoff = lnc + g; /* local sizes, local offsets */
    uint32_t *owner = order + g;
    double *load = quota + g;

    /* (1) coarse k-means of all vectors, then every vector to its coarse cluster */
    lloyd_cfg cf = {.k = g, .dim = dim, .iters = p->iters, .seed = p->seed,
                    .spherical = p->spherical, .threads = threads, .init = true,
                    .progress = p->progress, .progress_user = p->progress_user,
                    .prog_base = 0, .prog_total = total, .cancel = p->cancel, .part = part};
    if ((st = lloyd(x, n, &cf, gc)))
        goto done;
    half_norms(gc, g, dim, ghn);
    blas_single_begin();
    lst = assign_exact(x, n, gc, ghn, g, dim, own, threads, p->cancel);
    blas_single_end();
    if ((st = part_agree(part, lst)))
        goto done;

    /* (2) sizes, apportionment of k, vectors grouped by coarse cluster (this part's:
     * lperm = perm, lvoff; the whole's sizes nc and offsets voff) */
    memset(lnc, 0, sizeof *lnc * g);
    for (uint64_t i = 0; i < n; i++)
        lnc[own[i]]++;
    lvoff[0] = 0;
    for (uint32_t c = 0; c < g; c++)
        lvoff[c + 1] = lvoff[c] + lnc[c];
    memcpy(cur, lvoff, sizeof *cur * g);
    for (uint64_t i = 0; i < n; i++)
        perm[cur[own[i]]++] = i;
    memcpy(nc, lnc, sizeof *nc * g);
    if (part) {
        /* every part's first row and sizes; this part's members of c come after those of
         * the parts that start before it */
        const size_t w = (size_t)size * (g + 1);
        memset(xb, 0, sizeof *xb * w);
        xb[(size_t)part->rank * (g + 1)] = (int64_t)part->first;
        for (uint32_t c = 0; c < g; c++)
            xb[(size_t)part->rank * (g + 1) + 1 + c] = (int64_t)lnc[c];
        if ((st = part_reduce(part, xb, w, TT_REDUCE_SUM)))
            goto done;
        memset(nc, 0, sizeof *nc * g);
        memset(cur, 0, sizeof *cur * g); /* cur[c]: this part's first row of cluster c */
        for (uint32_t r = 0; r < size; r++) {
            const int64_t *row = xb + (size_t)r * (g + 1);
            for (uint32_t c = 0; c < g; c++) {
                nc[c] += (uint64_t)row[1 + c];
                if ((uint64_t)row[0] < part->first)
                    cur[c] += (uint64_t)row[1 + c];
            }
        }
    }
    apportion(nc, g, N, k, kc, quota);
    voff[0] = koff[0] = 0;
    for (uint32_t c = 0; c < g; c++) {
        voff[c + 1] = voff[c] + nc[c];
        koff[c + 1] = koff[c] + kc[c];
    }
    /* largest work (n_c * k_c) first, so the last fine k-means to start are short */
    uint32_t ntask = 0;
    for (uint32_t c = 0; c < g; c++)
        if (kc[c] > 0)
            order[ntask++] = c;
    for (uint32_t i = 1; i < ntask; i++) { /* insertion sort: g ~ sqrt(k) */
        uint32_t c = order[i], m = i;
        double w = (double)nc[c] * (double)kc[c];
        while (m > 0 && (double)nc[order[m - 1]] * (double)kc[order[m - 1]] < w) {
            order[m] = order[m - 1];
            m--;
        }
        order[m] = c;
    }

    /* (3) fine k-means, one coarse cluster per thread at a time; distributed, each one
     * on the member that owns it, on its cluster's rows gathered there */
    hier_job job = {.x = x, .dim = dim, .iters = p->iters, .spherical = p->spherical,
                    .seed = p->seed, .perm = perm, .voff = voff, .koff = koff,
                    .order = order, .ntask = ntask, .c = centroids,
                    .progress = p->progress, .progress_user = p->progress_user,
                    .prog_base = (uint64_t)p->iters, .prog_total = total, .cancel = p->cancel};
    if (part) {
        assign_owners(order, ntask, nc, kc, size, load, owner);
        uint64_t rows = 0, mt = 0;
        for (uint32_t i = 0; i < ntask; i++)
            if (owner[order[i]] == part->rank)
                rows += nc[order[i]];
        moff = tt_alloc(g, sizeof *moff, "kmeans: gathered clusters");
        mine = tt_alloc(TT_MAX(rows, (uint64_t)1), (uint64_t)dim * sizeof(float),
                        "kmeans: gathered clusters");
        if ((st = part_agree(part, moff && mine ? TT_OK : TT_ENOMEM)))
            goto done;
        rows = 0;
        uint32_t *mo = owner + g; /* this part's tasks, largest first */
        for (uint32_t i = 0; i < ntask; i++) {
            uint32_t c = order[i];
            const bool here = owner[c] == part->rank;
            gather_ctx gx = {.x = x, .dim = dim, .lperm = perm, .lbase = lvoff[c],
                             .lo = cur[c], .lcnt = lnc[c], .out = here ? mine + rows * dim : NULL};
            if (here) {
                moff[c] = rows;
                rows += nc[c];
                mo[mt++] = c;
            }
            share_fns f = {gather_src, gather_dst, &gx};
            if ((st = share_rows(part, 0, nc[c], dim, &f, xb)))
                goto done;
        }
        job.order = mo;
        job.ntask = (uint32_t)mt;
        job.rows = mine;
        job.rows_off = moff;
    }
    atomic_init(&job.next, 0);
    atomic_init(&job.finished, 0);
    atomic_init(&job.status, TT_OK);
    pthread_mutex_init(&job.mu, NULL);
    if (job.ntask)
        (void)tt_parallel((int)TT_MIN((uint64_t)threads, (uint64_t)job.ntask), hier_worker,
                          &job);
    pthread_mutex_destroy(&job.mu);
    if ((lst = atomic_load(&job.status)))
        lst = tt_err(lst, "%s", job.msg);
    if ((st = part_agree(part, lst)))
        goto done;
    if (part) { /* every part gets the fine centroids of every owner */
        fine_ctx fx = {.c = centroids, .dim = dim, .rank = part->rank, .owner = owner,
                       .koff = koff, .g = g, .cur = 0};
        share_fns f = {fine_src, fine_dst, &fx};
        if ((st = share_rows(part, 0, k, dim, &f, xb)))
            goto done;
    }
    if (p->progress)
        p->progress(p->progress_user, "kmeans", (uint64_t)p->iters + g, total);

    /* (4) refinement over all vectors with two-level assignment */
    if (refine > 0) {
        lloyd_cfg rf = {.k = k, .dim = dim, .iters = refine, .seed = p->seed,
                        .spherical = p->spherical, .threads = threads, .init = false,
                        .two_level = true, .progress = p->progress,
                        .progress_user = p->progress_user,
                        .prog_base = (uint64_t)p->iters + g, .prog_total = total,
                        .cancel = p->cancel, .part = part};
        if ((st = lloyd(x, n, &rf, centroids)))
            goto done;
    }
    st = TT_OK;
done:
    free(gc);
    free(ghn);
    free(own);
    free(perm);
    free(nc);
    free(quota);
    free(order);
    free(xb);
    free(mine);
    free(moff);
    return st;
}

int tt_kmeans_train(const float *x, uint64_t n, const tt_kmeans_params *p, float *centroids) {
    int st;
    if (!x || !p || !centroids)
        return tt_err(TT_EINVAL, "kmeans: NULL argument");
    if (p && p->part && (!p->part->reduce || p->part->total >= (1ull << 31) ||
                         p->part->first > p->part->total || n > p->part->total - p->part->first))
        return tt_err(TT_EINVAL, "kmeans: bad part (rows %llu.. of %llu, %llu here)",
                      (unsigned long long)p->part->first, (unsigned long long)p->part->total,
                      (unsigned long long)n);
    if ((st = check_params(p->part ? p->part->total : n, p)))
        return st;
    if (p->method != TT_KMEANS_AUTO && p->method != TT_KMEANS_FLAT &&
        p->method != TT_KMEANS_HIER)
        return tt_err(TT_EINVAL, "kmeans: unknown method %d", p->method);
    const int threads = resolve_threads(p->threads);
    const bool hier = p->method == TT_KMEANS_HIER ||
                      (p->method == TT_KMEANS_AUTO && p->k >= TT_KMEANS_HIER_MIN_K);
    if (hier && p->part && (p->part->size == 0 || p->part->rank >= p->part->size))
        return tt_err(TT_EINVAL, "kmeans: hierarchical distributed training needs the part's "
                      "rank and size (rank %u of %u)", p->part->rank, p->part->size);
    if (hier)
        return train_hier(x, n, p, threads, centroids);
    lloyd_cfg cf = {.k = p->k, .dim = p->dim, .iters = p->iters, .seed = p->seed,
                    .spherical = p->spherical, .threads = threads, .init = true,
                    .progress = p->progress, .progress_user = p->progress_user,
                    .prog_base = 0, .prog_total = (uint64_t)p->iters, .cancel = p->cancel,
                    .part = p->part};
    return lloyd(x, n, &cf, centroids);
}

/* ------------------------------------------------------------- assigner */

struct tt_assigner {
    const float *c; /* caller's centroids, k * dim */
    uint32_t k, dim;
    float *hn;      /* k half squared norms */
    /* two-level only (g > 0): */
    uint32_t g;     /* non-empty groups */
    uint32_t probe; /* groups scanned per vector */
    float *gc;      /* g * dim group centres */
    float *ghn;     /* g half norms */
    uint32_t *goff; /* g + 1 offsets into gid / gmem */
    uint32_t *gid;  /* centroid ids, grouped, increasing within a group */
    float *gmem;    /* member centroids gathered in gid order, k * dim */
    float *gmhn;    /* their half norms */
};

void tt_assigner_free(tt_assigner *a) {
    if (!a)
        return;
    free(a->hn);
    free(a->gc);
    free(a->ghn);
    free(a->goff);
    free(a->gid);
    free(a->gmem);
    free(a->gmhn);
    free(a);
}

/* Default number of groups probed: groups/8, at least 4. Measured with bench_assign
 * (doc/benchmarks.md, "k-means and assignment"), CPU-time speedup over exact and
 * agreement with exact: on flat clustered data, the worst case for grouping, g/16
 * gives ~6x but only 0.95-0.96; g/8 gives ~4x at 0.975-0.99; g/4 ~2x at 0.99-0.998.
 * With cluster structure (hierarchical topics) even g/16 agrees fully. g/8 keeps most
 * of the speed with >= 97.5% agreement in the worst case; whoever needs every vector
 * on its nearest centroid uses TT_ASSIGN_EXACT. */
static uint32_t default_probe(uint32_t g) {
    uint32_t p = (g + 7) / 8;
    return TT_MIN(TT_MAX(p, 4u), g);
}

/* Number of groups: sqrt(k), which balances the group scan (g) against the member
 * scan (probe * k/g), but never groups of more than GROUP_MAX_SIZE centroids: a group
 * centre is the mean of its members, and the larger the group the weaker the pull of
 * any one member on it, so the right group ranks lower. Measured on flat clustered
 * data (no structure among clusters), the probe fraction needed for a given agreement
 * depends on the group size, not on k (bench_assign, doc/benchmarks.md). */
static uint32_t num_groups(uint32_t k) {
    uint32_t g = (uint32_t)lround(sqrt((double)k));
    return TT_MAX(g, (k + GROUP_MAX_SIZE / 2) / GROUP_MAX_SIZE);
}

/* Groups the centroids by a k-means of the centroids themselves; each centroid goes to
 * its nearest group centre. Groups left empty are dropped, and members are gathered
 * contiguously per group so the scan of a group is one sgemm over a contiguous block. */
static int build_groups(tt_assigner *a, uint32_t g, uint64_t seed, int threads) {
    const uint32_t k = a->k, dim = a->dim;
    uint32_t *own = tt_alloc(k, sizeof *own, "assigner: groups");
    uint32_t *cnt = tt_calloc(g, sizeof *cnt, "assigner: group sizes");
    float *gc = tt_alloc((uint64_t)g, (uint64_t)dim * sizeof(float), "assigner: group centres");
    int st;
    a->ghn = tt_alloc(g, sizeof *a->ghn, "assigner: group norms");
    a->goff = tt_alloc((uint64_t)g + 1, sizeof *a->goff, "assigner: group offsets");
    a->gid = tt_alloc(k, sizeof *a->gid, "assigner: group members");
    a->gmem = tt_alloc(k, (uint64_t)dim * sizeof(float), "assigner: gathered centroids");
    a->gmhn = tt_alloc(k, sizeof *a->gmhn, "assigner: gathered norms");
    if (!own || !cnt || !gc || !a->ghn || !a->goff || !a->gid || !a->gmem || !a->gmhn) {
        st = TT_ENOMEM;
        goto done;
    }
    tt_kmeans_params kp = {.k = g, .dim = dim, .iters = GROUP_ITERS, .seed = seed,
                           .threads = threads, .spherical = 0, .method = TT_KMEANS_FLAT};
    if ((st = tt_kmeans_train(a->c, k, &kp, gc)))
        goto done;
    half_norms(gc, g, dim, a->ghn);
    blas_single_begin();
    st = assign_exact(a->c, k, gc, a->ghn, g, dim, own, threads, NULL);
    blas_single_end();
    if (st)
        goto done;
    for (uint32_t j = 0; j < k; j++)
        cnt[own[j]]++;
    /* compact: keep non-empty groups in order; cnt[grp] becomes its new index */
    uint32_t ng = 0;
    a->goff[0] = 0;
    for (uint32_t q = 0; q < g; q++) {
        if (cnt[q] == 0)
            continue;
        if (ng != q) {
            memcpy(gc + (size_t)ng * dim, gc + (size_t)q * dim, sizeof(float) * dim);
            a->ghn[ng] = a->ghn[q];
        }
        a->goff[ng + 1] = a->goff[ng] + cnt[q];
        cnt[q] = ng++;
    }
    for (uint32_t j = 0; j < k; j++)
        own[j] = cnt[own[j]];
    for (uint32_t q = 0; q < ng; q++)
        cnt[q] = a->goff[q];
    for (uint32_t j = 0; j < k; j++) {
        uint32_t m = cnt[own[j]]++;
        a->gid[m] = j;
        memcpy(a->gmem + (size_t)m * dim, a->c + (size_t)j * dim, sizeof(float) * dim);
        a->gmhn[m] = a->hn[j];
    }
    a->g = ng;
    a->gc = gc;
    gc = NULL;
    a->probe = default_probe(ng);
    st = TT_OK;
done:
    free(own);
    free(cnt);
    free(gc);
    return st;
}

static int assigner_create(const float *centroids, uint32_t k, uint32_t dim, uint32_t groups,
                           uint64_t seed, int threads, tt_assigner **out) {
    int st;
    tt_assigner *a = NULL;
    if (!out)
        return tt_err(TT_EINVAL, "assigner: NULL output");
    *out = NULL;
    if (!centroids || k == 0 || dim == 0 || dim > INT_MAX)
        return tt_err(TT_EINVAL, "assigner: need centroids, k >= 1 and 1 <= dim <= INT_MAX "
                      "(k=%u, dim=%u)", k, dim);
    if (groups > k)
        return tt_err(TT_EINVAL, "assigner: %u groups for %u centroids", groups, k);
    uint64_t bytes;
    if (!tt_mul_ok(k, (uint64_t)dim * sizeof(float), &bytes) || bytes > SIZE_MAX)
        return tt_err(TT_ENOMEM, "assigner: %u x %u centroids overflow", k, dim);
    a = tt_calloc(1, sizeof *a, "assigner");
    if (!a)
        return TT_ENOMEM;
    a->c = centroids;
    a->k = k;
    a->dim = dim;
    a->hn = tt_alloc(k, sizeof *a->hn, "assigner: norms");
    if (!a->hn) {
        st = TT_ENOMEM;
        goto fail;
    }
    half_norms(centroids, k, dim, a->hn);
    if (groups && (st = build_groups(a, groups, seed, resolve_threads(threads))))
        goto fail;
    *out = a;
    return TT_OK;
fail:
    tt_assigner_free(a);
    return st;
}

int tt_assigner_new(const float *centroids, uint32_t k, uint32_t dim, int method, uint64_t seed,
                    int threads, tt_assigner **out) {
    if (method != TT_ASSIGN_EXACT && method != TT_ASSIGN_TWO_LEVEL) {
        if (out)
            *out = NULL;
        return tt_err(TT_EINVAL, "assigner: unknown method %d", method);
    }
    uint32_t groups = method == TT_ASSIGN_TWO_LEVEL && k >= TWO_LEVEL_MIN_K ? num_groups(k) : 0;
    return assigner_create(centroids, k, dim, groups, seed, threads, out);
}

int tt_assigner_new_groups(const float *centroids, uint32_t k, uint32_t dim, uint32_t groups,
                           uint64_t seed, int threads, tt_assigner **out) {
    return assigner_create(centroids, k, dim, groups, seed, threads, out);
}

int tt_assigner_set_probe(tt_assigner *a, uint32_t probe) {
    if (!a || probe == 0)
        return tt_err(TT_EINVAL, "assigner: probe must be at least 1");
    if (a->g)
        a->probe = TT_MIN(probe, a->g);
    return TT_OK;
}

uint32_t tt_assigner_probe(const tt_assigner *a) { return a ? a->probe : 0; }
uint32_t tt_assigner_groups(const tt_assigner *a) { return a ? a->g : 0; }

/* Two-level assignment of blocks of TWO_ROWS vectors. Per block: (1) scores against
 * the group centres by sgemm and each vector's top `probe` groups; (2) the (vector,
 * group) pairs bucketed by group, so each group's members are scanned once per block
 * by sgemm over the gathered vectors that probe it, instead of one sgemv per vector. */
typedef struct two_ws {
    float *S1;      /* BLOCK_ROWS * g group scores */
    float *topv;    /* probe: heap of top group scores of one vector */
    uint32_t *sel;  /* TWO_ROWS * probe selected groups */
    uint32_t *gcnt; /* g + 1 bucket offsets */
    uint32_t *list; /* TWO_ROWS * probe vectors bucketed by group */
    float *A;       /* GATHER_ROWS * dim gathered vectors */
    float *S2;      /* GATHER_ROWS * BLOCK_COLS member scores */
    float *best;    /* TWO_ROWS */
    uint32_t *bi;   /* TWO_ROWS */
} two_ws;

typedef struct two_job {
    const tt_assigner *a;
    const float *x;
    uint64_t n;
    uint32_t *ids;
    two_ws *ws;
} two_job;

/* The p best groups of a row by (score desc, group asc), in any order, into sel: a
 * min-heap of size p whose root is the worst kept group (p may reach G/8 = 128 for
 * 2^16 centroids, where insertion into a sorted list would cost G*p). */
static void top_groups(const float *s, const float *ghn, uint32_t g, uint32_t p, uint32_t *sel,
                       float *hv) {
    uint32_t m = 0;
    for (uint32_t q = 0; q < g; q++) {
        float v = s[q] - ghn[q];
        uint32_t i;
        if (m < p) { /* sift up; on equal scores the later group is the worse */
            i = m++;
            while (i > 0 && !(v > hv[(i - 1) / 2])) {
                hv[i] = hv[(i - 1) / 2];
                sel[i] = sel[(i - 1) / 2];
                i = (i - 1) / 2;
            }
        } else if (v > hv[0]) { /* replace the root, sift down */
            i = 0;
            for (;;) {
                uint32_t l = 2 * i + 1, w = i;
                float wv = v;
                uint32_t wq = q;
                if (l < p && (hv[l] < wv || (hv[l] == wv && sel[l] > wq)))
                    w = l, wv = hv[l], wq = sel[l];
                if (l + 1 < p && (hv[l + 1] < wv || (hv[l + 1] == wv && sel[l + 1] > wq)))
                    w = l + 1;
                if (w == i)
                    break;
                hv[i] = hv[w];
                sel[i] = sel[w];
                i = w;
            }
        } else {
            continue;
        }
        hv[i] = v;
        sel[i] = q;
    }
}

static void two_block(const tt_assigner *a, const float *x, uint32_t nb, uint32_t *ids,
                      two_ws *w) {
    const uint32_t g = a->g, p = a->probe, dim = a->dim;
    /* (1) top groups */
    for (uint32_t r0 = 0; r0 < nb; r0 += BLOCK_ROWS) {
        uint32_t rb = TT_MIN((uint32_t)BLOCK_ROWS, nb - r0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rb, (int)g, (int)dim, 1.0f,
                    x + (size_t)r0 * dim, (int)dim, a->gc, (int)dim, 0.0f, w->S1, (int)g);
        for (uint32_t r = 0; r < rb; r++)
            top_groups(w->S1 + (size_t)r * g, a->ghn, g, p, w->sel + (size_t)(r0 + r) * p,
                       w->topv);
    }
    /* (2) bucket by group, vectors in increasing order within a bucket */
    memset(w->gcnt, 0, sizeof *w->gcnt * (g + 1));
    for (size_t i = 0; i < (size_t)nb * p; i++)
        w->gcnt[w->sel[i] + 1]++;
    for (uint32_t q = 0; q < g; q++)
        w->gcnt[q + 1] += w->gcnt[q];
    for (uint32_t r = 0; r < nb; r++) {
        for (uint32_t i = 0; i < p; i++)
            w->list[w->gcnt[w->sel[(size_t)r * p + i]]++] = r;
        w->best[r] = -INFINITY;
        w->bi[r] = UINT32_MAX;
    }
    /* gcnt[q] is now the end of bucket q and the start of bucket q+1 */
    uint32_t start = 0;
    for (uint32_t q = 0; q < g; q++) {
        uint32_t end = w->gcnt[q];
        const uint32_t m0 = a->goff[q], msz = a->goff[q + 1] - m0;
        for (uint32_t l0 = start; l0 < end; l0 += GATHER_ROWS) {
            uint32_t rb = TT_MIN((uint32_t)GATHER_ROWS, end - l0);
            for (uint32_t r = 0; r < rb; r++)
                memcpy(w->A + (size_t)r * dim, x + (size_t)w->list[l0 + r] * dim,
                       sizeof(float) * dim);
            for (uint32_t j0 = 0; j0 < msz; j0 += BLOCK_COLS) {
                uint32_t mc = TT_MIN((uint32_t)BLOCK_COLS, msz - j0);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rb, (int)mc, (int)dim,
                            1.0f, w->A, (int)dim, a->gmem + (size_t)(m0 + j0) * dim, (int)dim,
                            0.0f, w->S2, (int)mc);
                for (uint32_t r = 0; r < rb; r++) {
                    float v;
                    uint32_t j = row_argmax(w->S2 + (size_t)r * mc, a->gmhn + m0 + j0, mc, &v);
                    uint32_t id = a->gid[m0 + j0 + j], v_r = w->list[l0 + r];
                    /* same tie rule as the exact scan: the lowest centroid id wins */
                    if (v > w->best[v_r] || (v == w->best[v_r] && id < w->bi[v_r])) {
                        w->best[v_r] = v;
                        w->bi[v_r] = id;
                    }
                }
            }
        }
        start = end;
    }
    for (uint32_t r = 0; r < nb; r++)
        ids[r] = w->bi[r] == UINT32_MAX ? a->gid[a->goff[w->sel[(size_t)r * p]]] : w->bi[r];
}

static void two_worker(void *arg, int t, int nt) {
    two_job *j = (two_job *)arg;
    uint64_t nblk = (j->n + TWO_ROWS - 1) / TWO_ROWS;
    uint64_t b0 = nblk * (uint64_t)t / (uint64_t)nt, b1 = nblk * (uint64_t)(t + 1) / (uint64_t)nt;
    for (uint64_t b = b0; b < b1; b++) {
        uint64_t i = b * TWO_ROWS;
        uint32_t nb = (uint32_t)TT_MIN((uint64_t)TWO_ROWS, j->n - i);
        two_block(j->a, j->x + i * j->a->dim, nb, j->ids + i, &j->ws[t]);
    }
}

static int assign_two(const tt_assigner *a, const float *x, uint64_t n, uint32_t *ids,
                      int threads) {
    uint64_t nblk = (n + TWO_ROWS - 1) / TWO_ROWS;
    int nt = (int)TT_MIN((uint64_t)threads, TT_MAX(nblk, (uint64_t)1));
    const uint64_t g = a->g, p = a->probe, dim = a->dim;
    /* one allocation per thread, carved into the workspace arrays (all 4-byte types) */
    const uint64_t words = BLOCK_ROWS * g + p + TWO_ROWS * p + (g + 1) + TWO_ROWS * p +
                           GATHER_ROWS * dim + (uint64_t)GATHER_ROWS * BLOCK_COLS + 2 * TWO_ROWS;
    two_ws ws[256];
    float *mem = tt_alloc((uint64_t)nt * words, sizeof(float), "assigner: two-level scratch");
    if (!mem)
        return TT_ENOMEM;
    for (int t = 0; t < nt; t++) {
        float *f = mem + words * (uint64_t)t;
        ws[t].S1 = f, f += BLOCK_ROWS * g;
        ws[t].topv = f, f += p;
        ws[t].sel = (uint32_t *)(void *)f, f += TWO_ROWS * p;
        ws[t].gcnt = (uint32_t *)(void *)f, f += g + 1;
        ws[t].list = (uint32_t *)(void *)f, f += TWO_ROWS * p;
        ws[t].A = f, f += GATHER_ROWS * dim;
        ws[t].S2 = f, f += (uint64_t)GATHER_ROWS * BLOCK_COLS;
        ws[t].best = f, f += TWO_ROWS;
        ws[t].bi = (uint32_t *)(void *)f;
    }
    two_job job = {a, x, n, ids, ws};
    (void)tt_parallel(nt, two_worker, &job); /* complete whatever it returns */
    free(mem);
    return TT_OK;
}

int tt_assign(const tt_assigner *a, const float *x, uint64_t n, uint32_t *out_ids, int threads) {
    uint64_t bytes;
    if (!a || (n && (!x || !out_ids)))
        return tt_err(TT_EINVAL, "assign: NULL argument");
    if (n == 0)
        return TT_OK;
    if (!tt_mul_ok(n, (uint64_t)a->dim * sizeof(float), &bytes) || bytes > SIZE_MAX)
        return tt_err(TT_ENOMEM, "assign: %llu x %u vectors overflow", (unsigned long long)n,
                      a->dim);
    int nt = resolve_threads(threads);
    blas_single_begin();
    int st = a->g ? assign_two(a, x, n, out_ids, nt)
                  : assign_exact(x, n, a->c, a->hn, a->k, a->dim, out_ids, nt, NULL);
    blas_single_end();
    return st;
}

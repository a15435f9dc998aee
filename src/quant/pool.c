/* Token pooling of one document: Ward clustering by the nearest-neighbour chain, each
 * cluster replaced by its mean (pool.h; doc/pooling.md).
 *
 * What is computed, exactly (so that an independent implementation can reproduce it):
 *  - dissimilarity of two vectors: the squared Euclidean distance |x - y|^2 (for unit
 *    vectors 2 (1 - cos)); of two clusters A, B: Ward's 2 |A||B| / (|A| + |B|) times the
 *    squared distance of their means, i.e. twice the increase of the within-cluster sum
 *    of squares that merging them costs, kept by the Lance-Williams recurrence
 *    d(A+B, C) = ((|A|+|C|) d(A,C) + (|B|+|C|) d(B,C) - |C| d(A,B)) / (|A|+|B|+|C|);
 *  - the dendrogram: SciPy's nearest-neighbour chain (scipy.cluster.hierarchy.linkage,
 *    method "ward"), slot for slot: clusters live in slots 0..n-1; a chain starts at the
 *    lowest live slot; a nearest-neighbour search keeps the chain's previous element on
 *    a tie and otherwise takes the lowest slot; two merged clusters leave the lower slot
 *    empty and the union in the higher one;
 *  - the cut: the merges sorted by height (ties in the order the chain found them; a
 *    merge's height is raised to those of the merges that formed its two clusters, so
 *    rounding can never put a parent before its child), and the first n - k applied;
 *  - the means in double, in vector order, rounded to float; clusters ordered by their
 *    lowest-numbered vector.
 * So the clusters are those of SciPy's linkage(x, "ward") cut after n - k merges, tie
 * for tie, except where a rounding difference between the two computations decides. */
#include "quant/pool.h"
#include "common/simd.h"

#include <math.h>
#include <stdlib.h>

typedef struct tt_pool_merge {
    double h;      /* height (the Ward dissimilarity of the two clusters) */
    uint32_t seq;  /* the order the chain found it in */
    uint32_t a, b; /* the slots merged (a < b; the union stays in b) */
} tt_pool_merge;

/* ------------------------------------------------------------ distances */

/* The lanes' fixed reduction tree: lanes l and l + w added for w = 8, 4, 2, 1. */
static inline float reduce16(float *acc) {
    for (int w = 8; w; w >>= 1)
        for (int l = 0; l < w; l++)
            acc[l] += acc[l + w];
    return acc[0];
}

/* The dimensions past the last whole group of 16, into lanes 0.. in order. */
static inline float tail16(float *acc, const float *a, const float *b, uint32_t j, uint32_t dim) {
    for (uint32_t l = 0; j + l < dim; l++) {
        float t = a[j + l] - b[j + l];
        acc[l] += t * t;
    }
    return reduce16(acc);
}

static float sqdist_scalar(const float *a, const float *b, uint32_t dim) {
    float acc[16] = {0};
    uint32_t j = 0;
    for (; j + 16 <= dim; j += 16)
        for (int l = 0; l < 16; l++) {
            float t = a[j + l] - b[j + l];
            acc[l] += t * t;
        }
    return tail16(acc, a, b, j, dim);
}

#ifdef TT_SSE2
/* The tree on four registers holding lanes 0-3, 4-7, 8-11, 12-15. */
static inline float reduce_sse2(const __m128 *s) {
    __m128 s4 = _mm_add_ps(_mm_add_ps(s[0], s[2]), _mm_add_ps(s[1], s[3]));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

static float sqdist_sse2(const float *a, const float *b, uint32_t dim) {
    __m128 s[4] = {_mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps()};
    uint32_t j = 0;
    for (; j + 16 <= dim; j += 16)
        for (int q = 0; q < 4; q++) {
            __m128 t = _mm_sub_ps(_mm_loadu_ps(a + j + 4 * q), _mm_loadu_ps(b + j + 4 * q));
            s[q] = _mm_add_ps(s[q], _mm_mul_ps(t, t));
        }
    if (j == dim)
        return reduce_sse2(s);
    float acc[16];
    for (int q = 0; q < 4; q++)
        _mm_storeu_ps(acc + 4 * q, s[q]);
    return tail16(acc, a, b, j, dim);
}
#endif

#ifdef TT_AVX512
/* The tree in registers: 8 + 8 lanes, 4 + 4, 2 + 2, 1 + 1. */
AVX512_FN static inline float reduce_avx512(__m512 s) {
    __m256 lo = _mm512_castps512_ps256(s);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    return tt_hsum8(_mm256_add_ps(lo, hi));
}

/* One step of 16 dimensions (fewer at the end: masked loads add +0 to the other lanes,
 * as the scalar loop leaves them). No FMA: the scalar path's rounding. */
#define AVX512_STEP(s, va, bp, j, m)                                                              \
    do {                                                                                          \
        __m512 t_ = _mm512_sub_ps(va, _mm512_maskz_loadu_ps(m, (bp) + (j)));                    \
        s = _mm512_add_ps(s, _mm512_mul_ps(t_, t_));                                              \
    } while (0)

AVX512_FN static float sqdist_avx512(const float *a, const float *b, uint32_t dim) {
    __m512 s = _mm512_setzero_ps();
    for (uint32_t j = 0; j < dim; j += 16) {
        __mmask16 m = dim - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dim - j)) - 1);
        __m512 va = _mm512_maskz_loadu_ps(m, a + j);
        AVX512_STEP(s, va, b, j, m);
    }
    return reduce_avx512(s);
}

/* a against the m rows at b, four at a time (a's loads shared, four sums in flight). */
AVX512_FN static void sqdist_rows_avx512(const float *a, const float *b, uint32_t m, uint32_t dim,
                                         float *out) {
    uint32_t r = 0;
    for (; r + 4 <= m; r += 4) {
        const float *b0 = b + (uint64_t)r * dim, *b1 = b0 + dim, *b2 = b1 + dim, *b3 = b2 + dim;
        __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        for (uint32_t j = 0; j < dim; j += 16) {
            __mmask16 mk = dim - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (dim - j)) - 1);
            __m512 va = _mm512_maskz_loadu_ps(mk, a + j);
            AVX512_STEP(s0, va, b0, j, mk);
            AVX512_STEP(s1, va, b1, j, mk);
            AVX512_STEP(s2, va, b2, j, mk);
            AVX512_STEP(s3, va, b3, j, mk);
        }
        out[r] = reduce_avx512(s0);
        out[r + 1] = reduce_avx512(s1);
        out[r + 2] = reduce_avx512(s2);
        out[r + 3] = reduce_avx512(s3);
    }
    for (; r < m; r++)
        out[r] = sqdist_avx512(a, b + (uint64_t)r * dim, dim);
}
#endif

float tt_pool_sqdist(const float *a, const float *b, uint32_t dim, int simd) {
#ifdef TT_AVX512
    if (simd == TT_POOL_AVX512)
        return sqdist_avx512(a, b, dim);
#endif
#ifdef TT_SSE2
    if (simd >= TT_POOL_SSE2)
        return sqdist_sse2(a, b, dim);
#endif
    (void)simd;
    return sqdist_scalar(a, b, dim);
}

/* a against the m rows at b (dim floats each), into out. */
static void sqdist_rows(const float *a, const float *b, uint32_t m, uint32_t dim, int simd,
                        float *out) {
#ifdef TT_AVX512
    if (simd == TT_POOL_AVX512) {
        sqdist_rows_avx512(a, b, m, dim, out);
        return;
    }
#endif
    for (uint32_t r = 0; r < m; r++)
        out[r] = tt_pool_sqdist(a, b + (uint64_t)r * dim, dim, simd);
}

/* Exact in double, for the pairs whose float sum overflowed (huge raw vectors). */
static double sqdist_double(const float *a, const float *b, uint32_t dim) {
    double s = 0;
    for (uint32_t j = 0; j < dim; j++) {
        double t = (double)a[j] - b[j];
        s += t * t;
    }
    return s;
}

/* d[i][j] = d[j][i] = |x_i - x_j|^2 for every pair. */
static void pairwise(tt_pool_work *w, const float *x, uint32_t n) {
    const uint32_t dim = w->dim;
    double *d = w->d;
    float *row = w->row;
    for (uint32_t i = 0; i < n; i++) {
        const float *xi = x + (uint64_t)i * dim;
        d[(uint64_t)i * n + i] = INFINITY; /* no cluster is its own neighbour */
        sqdist_rows(xi, xi + dim, n - i - 1, dim, w->simd, row);
        for (uint32_t j = i + 1; j < n; j++) {
            double v = row[j - i - 1];
            if (!(v < INFINITY))
                v = sqdist_double(xi, x + (uint64_t)j * dim, dim);
            d[(uint64_t)i * n + j] = d[(uint64_t)j * n + i] = v;
        }
    }
}

/* ------------------------------------------------------------ work space */

/* The arrays of a work space, in allocation order: their element sizes and counts. */
static uint64_t work_bytes(uint64_t n, uint64_t dim) {
    return n * n * sizeof(double) + n * sizeof(double) + 7 * n * sizeof(uint32_t) +
           n * sizeof(tt_pool_merge) + n * dim * sizeof(double);
}

uint64_t tt_pool_work_bytes(uint32_t max_n, uint32_t dim) {
    uint64_t nn;
    if (!tt_mul_ok(max_n, max_n, &nn) || nn > (UINT64_MAX >> 5) ||
        (uint64_t)max_n * dim > (UINT64_MAX >> 5))
        return UINT64_MAX;
    return work_bytes(max_n, dim);
}

int tt_pool_work_init(tt_pool_work *w, uint32_t max_n, uint32_t dim) {
    memset(w, 0, sizeof *w);
    if (!max_n || !dim)
        return tt_err(TT_EINVAL, "token pooling: no vectors (%u) or no dimensions (%u)", max_n,
                      dim);
    w->max_n = max_n;
    w->dim = dim;
    w->simd = TT_POOL_SCALAR;
#ifdef TT_SSE2
    w->simd = TT_POOL_SSE2;
#endif
#ifdef TT_AVX512
    if (__builtin_cpu_supports("avx512f"))
        w->simd = TT_POOL_AVX512;
#endif
    const char *what = "token pooling work space";
    uint64_t nn;
    if (!tt_mul_ok(max_n, max_n, &nn))
        return tt_err(TT_ENOMEM, "%s: %u vectors overflow", what, max_n);
    w->d = tt_alloc(nn, sizeof *w->d, what);
    w->height = tt_alloc(max_n, sizeof *w->height, what);
    w->size = tt_alloc(max_n, sizeof *w->size, what);
    w->active = tt_alloc(max_n, sizeof *w->active, what);
    w->chain = tt_alloc(max_n, sizeof *w->chain, what);
    w->parent = tt_alloc(max_n, sizeof *w->parent, what);
    w->label = tt_alloc(max_n, sizeof *w->label, what);
    w->row = tt_alloc(max_n, sizeof *w->row, what);
    w->merges = tt_alloc(max_n, sizeof *w->merges, what);
    w->sum = tt_alloc((uint64_t)max_n * dim, sizeof *w->sum, what);
    if (!w->d || !w->height || !w->size || !w->active || !w->chain || !w->parent || !w->label ||
        !w->row || !w->merges || !w->sum) {
        tt_pool_work_free(w);
        return TT_ENOMEM;
    }
    return TT_OK;
}

void tt_pool_work_free(tt_pool_work *w) {
    if (!w)
        return;
    free(w->d);
    free(w->height);
    free(w->size);
    free(w->active);
    free(w->chain);
    free(w->parent);
    free(w->label);
    free(w->row);
    free(w->merges);
    free(w->sum);
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------ clustering */

/* The n - 1 merges of the full dendrogram, in the order the chain finds them. */
static void nn_chain(tt_pool_work *w, uint32_t n) {
    double *d = w->d;
    uint32_t *size = w->size, *active = w->active, *chain = w->chain;
    uint32_t nact = n, clen = 0;
    for (uint32_t i = 0; i < n; i++) {
        size[i] = 1;
        active[i] = i;
        w->height[i] = 0;
    }
    for (uint32_t step = 0; step + 1 < n; step++) {
        if (clen == 0)
            chain[clen++] = active[0];
        uint32_t x, y;
        double cur;
        for (;;) {
            x = chain[clen - 1];
            const double *row = d + (uint64_t)x * n;
            /* The chain's previous element wins a tie: that is what ends the chain. */
            if (clen > 1) {
                y = chain[clen - 2];
                cur = row[y];
            } else {
                y = UINT32_MAX;
                cur = INFINITY;
            }
            for (uint32_t t = 0; t < nact; t++) { /* branch-free: the row is noise */
                uint32_t i = active[t];
                double v = row[i]; /* row[x] is +inf: never chosen */
                bool lt = v < cur;
                cur = lt ? v : cur;
                y = lt ? i : y;
            }
            if (y == UINT32_MAX) { /* not reachable with finite distances; stay total */
                y = active[0] == x ? active[1] : active[0];
                cur = row[y];
            }
            if (clen > 1 && y == chain[clen - 2])
                break;
            chain[clen++] = y;
        }
        clen -= 2;
        uint32_t a = TT_MIN(x, y), b = TT_MAX(x, y);
        double na = size[a], nb = size[b];
        double h = TT_MAX(cur, TT_MAX(w->height[a], w->height[b]));
        w->merges[step] = (tt_pool_merge){h, step, a, b};
        size[a] = 0;
        size[b] += (uint32_t)na;
        w->height[b] = h;
        /* a leaves the live slots (ascending: find it by bisection) */
        uint32_t lo = 0, hi = nact;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (active[mid] < a)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(active + lo, active + lo + 1, (size_t)(nact - lo - 1) * sizeof *active);
        nact--;
        /* Lance-Williams for Ward: the union's row and column */
        double *ra = d + (uint64_t)a * n, *rb = d + (uint64_t)b * n;
        for (uint32_t t = 0; t < nact; t++) {
            uint32_t i = active[t];
            if (i == b)
                continue;
            double ni = size[i];
            double v = ((na + ni) * ra[i] + (nb + ni) * rb[i] - ni * cur) / (na + nb + ni);
            rb[i] = v;
            d[(uint64_t)i * n + b] = v;
        }
    }
}

static int cmp_merge(const void *pa, const void *pb) {
    const tt_pool_merge *a = pa, *b = pb;
    if (a->h != b->h)
        return a->h < b->h ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static uint32_t find_root(uint32_t *parent, uint32_t i) {
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

/* The dendrogram of x, its merges sorted into the order the cut applies them. */
static void dendrogram(tt_pool_work *w, const float *x, uint32_t n) {
    pairwise(w, x, n);
    nn_chain(w, n);
    qsort(w->merges, n - 1, sizeof *w->merges, cmp_merge);
}

uint32_t tt_pool_heights(tt_pool_work *w, const float *x, uint32_t n, double *heights) {
    if (n < 2)
        return 0;
    dendrogram(w, x, n);
    for (uint32_t m = 0; m + 1 < n; m++)
        heights[m] = w->merges[m].h;
    return n - 1;
}

uint32_t tt_pool_cut_len(const double *heights, uint32_t n, double threshold) {
    /* heights ascending: the merges at or below the threshold are the first ones */
    uint32_t lo = 0, hi = n ? n - 1 : 0;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (heights[mid] <= threshold)
            lo = mid + 1;
        else
            hi = mid;
    }
    return n - lo;
}

uint32_t tt_pool_ward(tt_pool_work *w, const float *x, uint32_t n, uint32_t factor, float *out,
                      uint32_t *labels) {
    return tt_pool_ward_k(w, x, n, tt_pool_len(n, factor), out, labels);
}

uint32_t tt_pool_ward_k(tt_pool_work *w, const float *x, uint32_t n, uint32_t k, float *out,
                        uint32_t *labels) {
    const uint32_t dim = w->dim;
    if (k == 0)
        k = 1;
    if (k >= n) { /* nothing to merge: the vectors as they are */
        memcpy(out, x, (size_t)n * dim * sizeof *out);
        for (uint32_t i = 0; labels && i < n; i++)
            labels[i] = i;
        return n;
    }
    dendrogram(w, x, n);
    uint32_t *parent = w->parent;
    for (uint32_t i = 0; i < n; i++)
        parent[i] = i;
    for (uint32_t m = 0; m < n - k; m++) {
        uint32_t ra = find_root(parent, w->merges[m].a), rb = find_root(parent, w->merges[m].b);
        parent[ra] = rb;
    }
    /* Clusters numbered by their lowest vector; sums in double, in vector order. The
     * slot arrays are free now: size[] maps a root to its cluster, chain[] holds each
     * cluster's first vector, active[] its count. */
    uint32_t *root_label = w->size, *first = w->chain, *count = w->active, next = 0;
    for (uint32_t i = 0; i < n; i++)
        root_label[i] = UINT32_MAX;
    memset(w->sum, 0, (size_t)k * dim * sizeof *w->sum);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t r = find_root(parent, i);
        if (root_label[r] == UINT32_MAX) {
            root_label[r] = next;
            first[next] = i;
            count[next] = 0;
            next++;
        }
        uint32_t l = root_label[r];
        w->label[i] = l;
        count[l]++;
        double *s = w->sum + (uint64_t)l * dim;
        const float *xi = x + (uint64_t)i * dim;
        for (uint32_t j = 0; j < dim; j++)
            s[j] += xi[j];
    }
    for (uint32_t l = 0; l < k; l++) {
        float *o = out + (uint64_t)l * dim;
        const double *s = w->sum + (uint64_t)l * dim;
        bool zero = true;
        for (uint32_t j = 0; j < dim; j++) {
            o[j] = (float)(s[j] / count[l]);
            zero = zero && o[j] == 0.0f;
        }
        /* Vectors that cancel have no direction to keep: their first one stands in. */
        if (zero)
            memcpy(o, x + (uint64_t)first[l] * dim, (size_t)dim * sizeof *o);
    }
    if (labels)
        memcpy(labels, w->label, (size_t)n * sizeof *labels);
    return k;
}

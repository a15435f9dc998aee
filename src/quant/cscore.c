/* int8 centroid scores for PLAID's candidate stages; see cscore.h. */
#include "quant/cscore.h"
#include "common/simd.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TT_CQ_X86 1 /* cscore.h included <immintrin.h> */
#endif

/* The largest finite |x| of n values (0 if none). */
static float max_abs(const float *x, uint32_t n) {
    float m = 0;
    for (uint32_t j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (isfinite(a) && a > m)
            m = a;
    }
    return m;
}

/* x / m * qmax rounded to int8 (m = max_abs of the whole row, qmax <= 127; non-finite
 * values and an all-zero row give 0). x / m lies in [-1, 1], so the rounded value lies
 * in [-qmax, qmax]. */
static void quantize(const float *x, uint32_t n, float m, float qmax, int8_t *out) {
    for (uint32_t j = 0; j < n; j++) {
        float v = m > 0 && isfinite(x[j]) ? x[j] / m * qmax : 0.0f;
        long r = lrintf(v);
        out[j] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
}

#ifdef TT_AVX2
/* max_abs and quantize eight values at a time, with the same results: the maximum is
 * exact in any order, and the division, product and rounding to nearest even
 * (cvtps, as lrintf in the default rounding mode) are the scalar ones, lane by lane.
 * Opening a 3584-d index quantizes its 29 million centroid values (doc/benchmarks.md,
 * "Opening an index"). */
AVX2_FN static float max_abs_avx2(const float *x, uint32_t n) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    __m256 m8 = _mm256_setzero_ps();
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + j), abs);
        m8 = _mm256_max_ps(m8, _mm256_and_ps(a, _mm256_cmp_ps(a, inf, _CMP_LT_OQ)));
    }
    float t[8];
    _mm256_storeu_ps(t, m8);
    float m = max_abs(x + j, n - j);
    for (int i = 0; i < 8; i++)
        m = t[i] > m ? t[i] : m;
    return m;
}

AVX2_FN static void quantize_avx2(const float *x, uint32_t n, float m, float qmax,
                                  int8_t *out) {
    if (!(m > 0)) {
        memset(out, 0, n);
        return;
    }
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY), m8 = _mm256_set1_ps(m),
                 q8 = _mm256_set1_ps(qmax);
    const __m256i hi = _mm256_set1_epi32(127), lo = _mm256_set1_epi32(-127);
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 x8 = _mm256_loadu_ps(x + j);
        const __m256 fin = _mm256_cmp_ps(_mm256_and_ps(x8, abs), inf, _CMP_LT_OQ);
        const __m256 v = _mm256_and_ps(_mm256_mul_ps(_mm256_div_ps(x8, m8), q8), fin);
        __m256i r = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), lo), hi);
        const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r),
                                          _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(out + j), _mm_packs_epi16(w, w));
    }
    quantize(x + j, n - j, m, qmax, out + j);
}
#endif

bool tt_cq_simd_ok(void) {
#ifdef TT_AVX2
    return tt_cpu_avx2();
#else
    return false;
#endif
}

/* max_abs and quantize, by the AVX2 loops where simd (and the build has them). */
static float max_abs_by(const float *x, uint32_t n, bool simd) {
#ifdef TT_AVX2
    if (simd)
        return max_abs_avx2(x, n);
#endif
    (void)simd;
    return max_abs(x, n);
}

static void quantize_by(const float *x, uint32_t n, float m, float qmax, bool simd,
                        int8_t *out) {
#ifdef TT_AVX2
    if (simd) {
        quantize_avx2(x, n, m, qmax, out);
        return;
    }
#endif
    (void)simd;
    quantize(x, n, m, qmax, out);
}

/* |x|^2 over the finite values. */
static float sq_norm(const float *x, uint32_t n) {
    float s = 0;
    for (uint32_t j = 0; j < n; j++)
        s += isfinite(x[j]) ? x[j] * x[j] : 0.0f;
    return s;
}

#ifdef TT_AVX2
/* The same in eight lanes (the scalar chain took ~30 ms for 8192 x 3584 values). */
AVX2_FN static float sq_norm_avx2(const float *x, uint32_t n) {
    const __m256 inf = _mm256_set1_ps(INFINITY), sign = _mm256_set1_ps(-0.0f);
    __m256 acc = _mm256_setzero_ps();
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const __m256 ok = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), inf, _CMP_LT_OQ);
        const __m256 f = _mm256_and_ps(v, ok);
        acc = _mm256_fmadd_ps(f, f, acc);
    }
    return tt_hsum8(acc) + sq_norm(x + j, n - j);
}
#endif

float tt_cq_sq_norm(const float *x, uint32_t n, bool simd) {
#ifdef TT_AVX2
    if (simd)
        return sq_norm_avx2(x, n);
#endif
    (void)simd;
    return sq_norm(x, n);
}

void tt_cq_quantize_row(const float *x, uint32_t n, float qmax, bool simd, int8_t *out,
                        float *m) {
    *m = max_abs_by(x, n, simd);
    quantize_by(x, n, *m, qmax, simd, out);
}

static inline size_t cq_pos(uint32_t nd4, uint32_t row, uint32_t d) {
    return (((size_t)(row / TT_CQ_LANES) * nd4 + d / 4) * TT_CQ_LANES + row % TT_CQ_LANES) * 4 +
           d % 4;
}

bool tt_cq_kernel_ok(int kernel) {
    switch (kernel) {
    case TT_CQ_F32:
    case TT_CQ_PORTABLE:
        return true;
#ifdef TT_SSE2
    case TT_CQ_SSE2:
        return true;
#endif
#ifdef TT_CQ_X86
    case TT_CQ_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2");
    case TT_CQ_VNNI:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
#endif
    default:
        return false;
    }
}

/* Without AVX2 (measured with OpenBLAS forced to its non-AVX2 kernels, doc/benchmarks.md)
 * the SSE2 kernel beats OpenBLAS's SSE sgemm 1.8x at 128-d x 32 query vectors and 2.8x
 * at 3584-d x 4, and its AVX sgemm 4.3x at 3584-d x 4 (the float32 table is 4x the
 * bytes to read), but is 0.73-0.82x the AVX sgemm at 128-d x 32. The portable loop is
 * 3-20x slower than sgemm, so builds without a vector int8 kernel use the sgemm. */
int tt_cq_best_kernel(void) {
    if (tt_cq_kernel_ok(TT_CQ_VNNI))
        return TT_CQ_VNNI;
    if (tt_cq_kernel_ok(TT_CQ_AVX2))
        return TT_CQ_AVX2;
    if (tt_cq_kernel_ok(TT_CQ_SSE2))
        return TT_CQ_SSE2;
    return TT_CQ_F32;
}

int tt_cq_init(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim) {
    return tt_cq_init_kernel(q, centroids, K, dim, tt_cq_best_kernel());
}

int tt_cq_init_kernel(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim, int kernel) {
    return tt_cq_init_rows(q, centroids, K, dim, kernel, K, NULL);
}

int tt_cq_init_rows(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim, int kernel,
                    uint32_t nrows, const uint32_t *row_id) {
    memset(q, 0, sizeof *q);
    if (!tt_cq_kernel_ok(kernel) || (!row_id && nrows != K))
        return TT_EINVAL;
    q->K = nrows;
    q->dim = dim;
    q->f32 = centroids;
    q->kernel = kernel;
    q->simd = tt_cq_simd_ok();
    q->nd4 = (dim + 3) / 4;
    q->nblk = (nrows + TT_CQ_LANES - 1) / TT_CQ_LANES;
    if (kernel == TT_CQ_F32)
        return row_id ? TT_EINVAL : TT_OK;
    const uint64_t nk = (uint64_t)q->nblk * TT_CQ_LANES;
    q->data = tt_alloc_aligned((uint64_t)q->nblk * q->nd4 * 64, 1, 64, "int8 centroids");
    q->scale = tt_alloc(nk, sizeof *q->scale, "int8 centroids");
    q->csum = tt_alloc(nk, sizeof *q->csum, "int8 centroids");
    int8_t *row = tt_alloc(dim ? dim : 1, 1, "int8 centroids");
    if (!q->data || !q->scale || !q->csum || !row) {
        free(row);
        tt_cq_free(q);
        return TT_ENOMEM;
    }
    memset(q->data, 0, (size_t)q->nblk * q->nd4 * 64);
    for (uint64_t k = 0; k < nk; k++) {
        q->scale[k] = 0;
        q->csum[k] = 0;
    }
    /* The kernels sum dim products of at most 255 * cmax in 32 bits: past 66,000
     * dimensions the centroids get fewer levels so that the sums cannot overflow. */
    const uint64_t cmax = TT_MIN(127u, (uint64_t)INT32_MAX / (255u * (uint64_t)TT_MAX(dim, 1u)));
    q->cmax = (float)TT_MAX(cmax, 1u);
    const bool simd = q->simd;
    for (uint32_t r = 0; r < nrows; r++) {
        const uint32_t k = row_id ? row_id[r] : r;
        if (k == UINT32_MAX)
            continue; /* a padding row: all zero, scale 0, it scores 0 */
        float m;
        const float *x = centroids + (uint64_t)k * dim;
        tt_cq_quantize_row(x, dim, q->cmax, simd, row, &m);
        q->scale[r] = m / q->cmax;
        q->stepmax = q->scale[r] > q->stepmax ? q->scale[r] : q->stepmax;
        const float c2 = tt_cq_sq_norm(x, dim, simd);
        q->c2max = c2 > q->c2max ? c2 : q->c2max;
        int32_t s = 0;
        for (uint32_t d = 0; d < dim; d++)
            s += row[d];
        q->csum[r] = 128 * s;
        /* four dimensions at a time: a row's groups of four lie 64 bytes apart */
        uint8_t *dst = q->data + cq_pos(q->nd4, r, 0);
        uint32_t d = 0;
        for (; d + 4 <= dim; d += 4)
            memcpy(dst + (size_t)d / 4 * 64, row + d, 4);
        if (d < dim)
            memcpy(dst + (size_t)d / 4 * 64, row + d, dim - d);
    }
    free(row);
    return TT_OK;
}

void tt_cq_free(tt_cq *q) {
    if (!q)
        return;
    free(q->data);
    free(q->scale);
    free(q->csum);
    free(q->gblk);
    free(q->row_id);
    if (q->centres) {
        tt_cq_free(q->centres);
        free(q->centres);
    }
    memset(q, 0, sizeof *q);
}

uint64_t tt_cq_bytes(const tt_cq *q) {
    if (q->kernel == TT_CQ_F32)
        return 0;
    uint64_t b =
        (uint64_t)q->nblk * (q->nd4 * 64 + TT_CQ_LANES * (sizeof(float) + sizeof(int32_t)));
    if (q->ngroups)
        b += (q->ngroups + 1ull) * sizeof *q->gblk +
             (uint64_t)q->nblk * TT_CQ_LANES * sizeof *q->row_id + tt_cq_bytes(q->centres);
    return b;
}

size_t tt_cq_qpack_bytes(const tt_cq *q, uint32_t nq) {
    return (size_t)((nq + TT_CQ_LANES - 1) / TT_CQ_LANES) * q->nd4 * 64;
}

void tt_cq_query(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp, uint8_t *qpack,
                 float *qscale) {
    const uint32_t dim = q->dim;
    memset(qpack, 128, tt_cq_qpack_bytes(q, nqp));
    int8_t row[64];
    const bool simd = q->simd;
    for (uint32_t i = 0; i < nqp; i++)
        qscale[i] = 0;
    for (uint32_t i = 0; i < nq; i++) {
        const float *x = Q + (uint64_t)i * dim;
        const float m = max_abs_by(x, dim, simd);
        qscale[i] = m / 127.0f;
        for (uint32_t d0 = 0; d0 < dim; d0 += 64) {
            uint32_t n = dim - d0 < 64 ? dim - d0 : 64;
            quantize_by(x + d0, n, m, 127.0f, simd, row);
            for (uint32_t j = 0; j < n; j++)
                qpack[cq_pos(q->nd4, i, d0 + j)] = (uint8_t)(row[j] + 128);
        }
    }
}

void tt_cq_scores_portable(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                           uint32_t nqp, float *St) {
    const uint32_t nd4 = q->nd4;
    for (uint32_t k = 0; k < q->K; k++) {
        const int8_t *c = (const int8_t *)q->data + cq_pos(nd4, k, 0);
        for (uint32_t i = 0; i < nqp; i++) {
            const uint8_t *x = qpack + cq_pos(nd4, i, 0);
            int32_t dot = 0;
            for (uint32_t g = 0; g < nd4; g++)
                for (uint32_t b = 0; b < 4; b++)
                    dot += ((int32_t)x[g * 64 + b] - 128) * (int32_t)c[g * 64 + b];
            St[(uint64_t)k * nqp + i] = (float)dot * (q->scale[k] * qscale[i]);
        }
    }
}

#ifdef TT_SSE2
/* SSE2, which every x86-64 CPU has: for CPUs without AVX2 (before Haswell / Excavator),
 * where the portable loop is 3-20x slower than a float32 sgemm. SSE2 has no byte
 * multiply, so both sides are widened to int16 and pmaddwd sums pairs of products into
 * int32: the query bytes stay offset (q8 + 128, in [0, 255]; 2 * 255 * 127 fits easily)
 * and the 128 * sum(c8) this adds is subtracted per centroid, as in the VNNI kernel, so
 * the sums are the same exact integers. A tile is 4 centroids x 4 query vectors: one
 * 16-byte load of the packed layout gives either, and its 8 accumulators, 2 widened
 * centroid registers, 4 query registers and a zero fit the 16 XMM registers. */
static void tile_4x4_sse2(const tt_cq *q, const uint8_t *cp, const uint8_t *xp, uint32_t k0,
                          uint32_t i0, const float *qscale, uint32_t nqp, float *St) {
    const __m128i zero = _mm_setzero_si128();
    __m128i a0 = zero, a1 = zero, a2 = zero, a3 = zero, b0 = zero, b1 = zero, b2 = zero,
            b3 = zero;
    for (uint32_t g = 0; g < q->nd4; g++) {
        const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(cp + (size_t)g * 64));
        const __m128i sign = _mm_cmpgt_epi8(zero, c);
        /* centroids k0, k0 + 1 (four int16 each); k0 + 2, k0 + 3 */
        const __m128i c01 = _mm_unpacklo_epi8(c, sign), c23 = _mm_unpackhi_epi8(c, sign);
        const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(xp + (size_t)g * 64));
        const __m128i x01 = _mm_unpacklo_epi8(x, zero), x23 = _mm_unpackhi_epi8(x, zero);
        /* query vector i's four int16, twice */
        const __m128i q0 = _mm_shuffle_epi32(x01, 0x44), q1 = _mm_shuffle_epi32(x01, 0xee);
        const __m128i q2 = _mm_shuffle_epi32(x23, 0x44), q3 = _mm_shuffle_epi32(x23, 0xee);
        a0 = _mm_add_epi32(a0, _mm_madd_epi16(c01, q0));
        a1 = _mm_add_epi32(a1, _mm_madd_epi16(c01, q1));
        a2 = _mm_add_epi32(a2, _mm_madd_epi16(c01, q2));
        a3 = _mm_add_epi32(a3, _mm_madd_epi16(c01, q3));
        b0 = _mm_add_epi32(b0, _mm_madd_epi16(c23, q0));
        b1 = _mm_add_epi32(b1, _mm_madd_epi16(c23, q1));
        b2 = _mm_add_epi32(b2, _mm_madd_epi16(c23, q2));
        b3 = _mm_add_epi32(b3, _mm_madd_epi16(c23, q3));
    }
    /* a_i = [k0 d01, k0 d23, k1 d01, k1 d23] for query i: transpose and add the halves
     * to get, per centroid, its four query vectors' sums. */
    const __m128i ta = _mm_unpacklo_epi32(a0, a1), tb = _mm_unpackhi_epi32(a0, a1);
    const __m128i tc = _mm_unpacklo_epi32(a2, a3), td = _mm_unpackhi_epi32(a2, a3);
    const __m128i ua = _mm_unpacklo_epi32(b0, b1), ub = _mm_unpackhi_epi32(b0, b1);
    const __m128i uc = _mm_unpacklo_epi32(b2, b3), ud = _mm_unpackhi_epi32(b2, b3);
    __m128i s[4];
    s[0] = _mm_add_epi32(_mm_unpacklo_epi64(ta, tc), _mm_unpackhi_epi64(ta, tc));
    s[1] = _mm_add_epi32(_mm_unpacklo_epi64(tb, td), _mm_unpackhi_epi64(tb, td));
    s[2] = _mm_add_epi32(_mm_unpacklo_epi64(ua, uc), _mm_unpackhi_epi64(ua, uc));
    s[3] = _mm_add_epi32(_mm_unpacklo_epi64(ub, ud), _mm_unpackhi_epi64(ub, ud));
    const __m128 qs = _mm_loadu_ps(qscale + i0);
    for (uint32_t t = 0; t < 4 && k0 + t < q->K; t++) {
        const uint32_t k = k0 + t;
        const __m128i d = _mm_sub_epi32(s[t], _mm_set1_epi32(q->csum[k]));
        _mm_storeu_ps(St + (uint64_t)k * nqp + i0,
                      _mm_mul_ps(_mm_cvtepi32_ps(d), _mm_mul_ps(_mm_set1_ps(q->scale[k]), qs)));
    }
}

static void scores_sse2(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                        uint32_t nqp, float *St) {
    const size_t bstride = (size_t)q->nd4 * 64;
    /* For each quad of centroids (its bytes stay in L1/L2 across the query quads), every
     * quad of query vectors; nqp is a multiple of 4. */
    for (uint32_t blk = 0; blk < q->nblk; blk++)
        for (uint32_t h = 0; h < 4 && blk * 16 + h * 4 < q->K; h++)
            for (uint32_t i0 = 0; i0 < nqp; i0 += 4)
                tile_4x4_sse2(q, q->data + blk * bstride + h * 16,
                              qpack + (i0 / 16) * bstride + (i0 % 16) * 4, blk * 16 + h * 4, i0,
                              qscale, nqp, St);
}
#endif

#ifdef TT_CQ_X86
#define VNNI __attribute__((target("avx512f,avx512vnni")))

/* Query vectors in the lanes (nqp > 8): a centroid's four bytes are broadcast against
 * a block of 16 query vectors, so each accumulator ends as 16 scores of one St row.
 * Tiles of 8 centroids x 2 query blocks, or 16 centroids x 1 block, keep 16 accumulators
 * in registers (named, so that the compiler does not spill them). */
#define DP1(A, X, T)                                                                        \
    do {                                                                                    \
        int32_t w_;                                                                         \
        memcpy(&w_, cp + (size_t)g * 64 + 4 * (T), 4);                                      \
        A = _mm512_dpbusd_epi32(A, X, _mm512_set1_epi32(w_));                               \
    } while (0)
#define DP2(A, B, T)                                                                        \
    do {                                                                                    \
        int32_t w_;                                                                         \
        memcpy(&w_, cp + (size_t)g * 64 + 4 * (T), 4);                                      \
        const __m512i c_ = _mm512_set1_epi32(w_);                                           \
        A = _mm512_dpbusd_epi32(A, x0, c_);                                                 \
        B = _mm512_dpbusd_epi32(B, x1, c_);                                                 \
    } while (0)

/* The scores of centroid k from its accumulator A (16 query lanes, their scales qs). */
static inline __attribute__((always_inline)) VNNI __m512 row_scores(const tt_cq *q, uint32_t k,
                                                                    __m512i A, __m512 qs) {
    const __m512i corr = _mm512_set1_epi32(q->csum[k]);
    const __m512 s = _mm512_mul_ps(_mm512_set1_ps(q->scale[k]), qs);
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(A, corr)), s);
}

/* Row k's scores x (lanes m) into the lanes' maxima b and rows a: strictly greater
 * replaces, and rows come in increasing order, so ties keep the lower row. */
static inline __attribute__((always_inline)) VNNI void top1_update(__m512 x, uint32_t k,
                                                                   __mmask16 m, __m512 *b,
                                                                   __m512i *a) {
    const __mmask16 up = _mm512_mask_cmp_ps_mask(m, x, *b, _CMP_GT_OQ);
    *b = _mm512_mask_mov_ps(*b, up, x);
    *a = _mm512_mask_mov_epi32(*a, up, _mm512_set1_epi32((int)k));
}

/* Tiles write St rows [k0, k0 + 8) (or 16) in the lanes of one or two query blocks (b0:
 * the first block's number); with tc, they keep its column maxima and reach mask
 * as they go (mq0, mq1: the lanes of the first nq columns). */
VNNI static void tile_8x2(const tt_cq *q, const uint8_t *q0, const uint8_t *q1, uint32_t k0,
                          const uint8_t *cp, __m512 qs0, __m512 qs1, __mmask16 m0, __mmask16 m1,
                          uint32_t nqp, float *Sb, const tt_cq_top1 *tc, uint32_t b0,
                          __mmask16 mq0, __mmask16 mq1) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
            a7 = a0, b0_ = a0, b1 = a0, b2 = a0, b3 = a0, b4 = a0, b5 = a0, b6 = a0, b7 = a0;
    for (uint32_t g = 0; g < q->nd4; g++) {
        const __m512i x0 = _mm512_load_si512((const void *)(q0 + (size_t)g * 64));
        const __m512i x1 = _mm512_load_si512((const void *)(q1 + (size_t)g * 64));
        DP2(a0, b0_, 0); DP2(a1, b1, 1); DP2(a2, b2, 2); DP2(a3, b3, 3);
        DP2(a4, b4, 4); DP2(a5, b5, 5); DP2(a6, b6, 6); DP2(a7, b7, 7);
    }
    const __m512i A[8] = {a0, a1, a2, a3, a4, a5, a6, a7},
                  B[8] = {b0_, b1, b2, b3, b4, b5, b6, b7};
    const uint32_t n = q->K - k0 < 8 ? q->K - k0 : 8;
    if (!tc) {
        for (uint32_t t = 0; t < n; t++) {
            float *row = Sb + (uint64_t)(k0 + t) * nqp;
            _mm512_mask_storeu_ps(row, m0, row_scores(q, k0 + t, A[t], qs0));
            _mm512_mask_storeu_ps(row + 16, m1, row_scores(q, k0 + t, B[t], qs1));
        }
        return;
    }
    float *best = tc->best + 16 * b0;
    uint32_t *arg = tc->arg + 16 * b0;
    uint8_t *reach = tc->reach;
    const __m512 thr = _mm512_set1_ps(tc->thr);
    __m512 bx0 = _mm512_maskz_loadu_ps(m0, best), bx1 = _mm512_maskz_loadu_ps(m1, best + 16);
    __m512i ax0 = _mm512_maskz_loadu_epi32(m0, arg), ax1 = _mm512_maskz_loadu_epi32(m1, arg + 16);
    for (uint32_t t = 0; t < n; t++) {
        float *row = Sb + (uint64_t)(k0 + t) * nqp;
        const __m512 x0 = row_scores(q, k0 + t, A[t], qs0), x1 = row_scores(q, k0 + t, B[t], qs1);
        _mm512_mask_storeu_ps(row, m0, x0);
        _mm512_mask_storeu_ps(row + 16, m1, x1);
        top1_update(x0, k0 + t, m0, &bx0, &ax0);
        top1_update(x1, k0 + t, m1, &bx1, &ax1);
        if (reach)
            reach[k0 + t] |= (_mm512_mask_cmp_ps_mask(mq0, x0, thr, _CMP_GE_OQ) |
                              _mm512_mask_cmp_ps_mask(mq1, x1, thr, _CMP_GE_OQ)) != 0;
    }
    _mm512_mask_storeu_ps(best, m0, bx0);
    _mm512_mask_storeu_ps(best + 16, m1, bx1);
    _mm512_mask_storeu_epi32(arg, m0, ax0);
    _mm512_mask_storeu_epi32(arg + 16, m1, ax1);
}

VNNI static void tile_16x1(const tt_cq *q, const uint8_t *q0, uint32_t k0, const uint8_t *cp,
                           __m512 qs0, __mmask16 m0, uint32_t nqp, float *Sb,
                           const tt_cq_top1 *tc, uint32_t b0, __mmask16 mq0) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
            a7 = a0, a8 = a0, a9 = a0, a10 = a0, a11 = a0, a12 = a0, a13 = a0, a14 = a0,
            a15 = a0;
    for (uint32_t g = 0; g < q->nd4; g++) {
        const __m512i x0 = _mm512_load_si512((const void *)(q0 + (size_t)g * 64));
        DP1(a0, x0, 0); DP1(a1, x0, 1); DP1(a2, x0, 2); DP1(a3, x0, 3);
        DP1(a4, x0, 4); DP1(a5, x0, 5); DP1(a6, x0, 6); DP1(a7, x0, 7);
        DP1(a8, x0, 8); DP1(a9, x0, 9); DP1(a10, x0, 10); DP1(a11, x0, 11);
        DP1(a12, x0, 12); DP1(a13, x0, 13); DP1(a14, x0, 14); DP1(a15, x0, 15);
    }
    const __m512i A[16] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15};
    const uint32_t n = q->K - k0 < 16 ? q->K - k0 : 16;
    if (!tc) {
        for (uint32_t t = 0; t < n; t++)
            _mm512_mask_storeu_ps(Sb + (uint64_t)(k0 + t) * nqp, m0,
                                  row_scores(q, k0 + t, A[t], qs0));
        return;
    }
    float *best = tc->best + 16 * b0;
    uint32_t *arg = tc->arg + 16 * b0;
    uint8_t *reach = tc->reach;
    const __m512 thr = _mm512_set1_ps(tc->thr);
    __m512 bx = _mm512_maskz_loadu_ps(m0, best);
    __m512i ax = _mm512_maskz_loadu_epi32(m0, arg);
    for (uint32_t t = 0; t < n; t++) {
        const __m512 x = row_scores(q, k0 + t, A[t], qs0);
        _mm512_mask_storeu_ps(Sb + (uint64_t)(k0 + t) * nqp, m0, x);
        top1_update(x, k0 + t, m0, &bx, &ax);
        if (reach)
            reach[k0 + t] |= _mm512_mask_cmp_ps_mask(mq0, x, thr, _CMP_GE_OQ) != 0;
    }
    _mm512_mask_storeu_ps(best, m0, bx);
    _mm512_mask_storeu_epi32(arg, m0, ax);
}

VNNI static void scores_qlanes(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                               uint32_t nq, uint32_t nqp, float *St, const tt_cq_top1 *tc) {
    const size_t bstride = (size_t)q->nd4 * 64;
    const uint32_t nqb = (nqp + 15) / 16;
    for (uint32_t b = 0; b < nqb; b += 2) {
        const uint8_t *q0 = qpack + b * bstride, *q1 = q0 + bstride;
        const __mmask16 m0 = tt_lanes16(nqp, b), mq0 = tt_lanes16(nq, b);
        const __m512 qs0 = _mm512_maskz_loadu_ps(m0, qscale + 16 * b);
        float *Sb = St + 16 * b;
        if (b + 1 < nqb) {
            const __mmask16 m1 = tt_lanes16(nqp, b + 1), mq1 = tt_lanes16(nq, b + 1);
            const __m512 qs1 = _mm512_maskz_loadu_ps(m1, qscale + 16 * b + 16);
            for (uint32_t blk = 0; blk < q->nblk; blk++)
                for (uint32_t h = 0; h < 2 && blk * 16 + h * 8 < q->K; h++)
                    tile_8x2(q, q0, q1, blk * 16 + h * 8, q->data + blk * bstride + h * 32, qs0,
                             qs1, m0, m1, nqp, Sb, tc, b, mq0, mq1);
        } else {
            for (uint32_t blk = 0; blk < q->nblk; blk++)
                tile_16x1(q, q0, blk * 16, q->data + blk * bstride, qs0, m0, nqp, Sb, tc, b,
                          mq0);
        }
    }
}

/* Centroids in the lanes (nqp <= 8, DiffRetriever's 4-vector queries): one 64-byte load
 * gives 16 centroids' next four values, against each query vector's four bytes
 * broadcast; the 16 x nqp scores are then written out row by row. With tc, each query
 * vector's 16 lanes keep the best score of their centroids so far and its row in bv, av
 * (strictly greater replaces: ties keep the earlier block), and the block's rows their
 * reach. */
static inline __attribute__((always_inline)) VNNI void
clanes_block(const tt_cq *q, const uint8_t *qpack, const float *qscale, const uint32_t NQ,
             uint32_t nq, uint32_t blk, float *St, const tt_cq_top1 *tc, __m512 *bv, __m512i *av) {
    __m512i a[8];
    for (uint32_t i = 0; i < NQ; i++)
        a[i] = _mm512_setzero_si512();
    const uint8_t *cb = q->data + (size_t)blk * q->nd4 * 64;
    for (uint32_t g = 0; g < q->nd4; g++) {
        const __m512i c = _mm512_load_si512((const void *)(cb + (size_t)g * 64));
#pragma GCC unroll 8
        for (uint32_t i = 0; i < NQ; i++) {
            int32_t w;
            memcpy(&w, qpack + (size_t)g * 64 + i * 4, 4);
            a[i] = _mm512_dpbusd_epi32(a[i], _mm512_set1_epi32(w), c);
        }
    }
    const __m512i corr = _mm512_loadu_si512((const void *)(q->csum + blk * 16));
    const __m512 sc = _mm512_loadu_ps(q->scale + blk * 16);
    const uint32_t n = q->K - blk * 16 < 16 ? q->K - blk * 16 : 16;
    const __mmask16 live = tt_lanes16(n, 0);
    const __m512i ids = _mm512_add_epi32(_mm512_set1_epi32((int)(blk * 16)),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                                                           11, 12, 13, 14, 15));
    float tmp[8][16];
    __mmask16 hit = 0;
    for (uint32_t i = 0; i < NQ; i++) {
        const __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a[i], corr)),
                                       _mm512_mul_ps(sc, _mm512_set1_ps(qscale[i])));
        _mm512_storeu_ps(tmp[i], x);
        if (tc) {
            const __mmask16 up = _mm512_mask_cmp_ps_mask(live, x, bv[i], _CMP_GT_OQ);
            bv[i] = _mm512_mask_mov_ps(bv[i], up, x);
            av[i] = _mm512_mask_mov_epi32(av[i], up, ids);
            if (i < nq)
                hit |= _mm512_mask_cmp_ps_mask(live, x, _mm512_set1_ps(tc->thr), _CMP_GE_OQ);
        }
    }
    for (uint32_t l = 0; l < n; l++)
        for (uint32_t i = 0; i < NQ; i++)
            St[(uint64_t)(blk * 16 + l) * NQ + i] = tmp[i][l];
    if (tc && tc->reach)
        for (uint32_t l = 0; l < n; l++)
            tc->reach[blk * 16 + l] = (uint8_t)((hit >> l) & 1);
}

VNNI static void scores_clanes(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                               uint32_t nq, uint32_t nqp, float *St, const tt_cq_top1 *tc) {
    __m512 bv[8];
    __m512i av[8];
    for (uint32_t i = 0; i < 8; i++) {
        bv[i] = _mm512_set1_ps(-INFINITY);
        av[i] = _mm512_set1_epi32(-1);
    }
    for (uint32_t blk = 0; blk < q->nblk; blk++) {
        if (nqp == 4)
            clanes_block(q, qpack, qscale, 4, nq, blk, St, tc, bv, av);
        else
            clanes_block(q, qpack, qscale, 8, nq, blk, St, tc, bv, av);
    }
    /* A query vector's best over its 16 lanes; of equal ones, the lowest row. */
    for (uint32_t i = 0; tc && i < nqp; i++) {
        const float m = _mm512_reduce_max_ps(bv[i]);
        const __mmask16 at = _mm512_cmp_ps_mask(bv[i], _mm512_set1_ps(m), _CMP_EQ_OQ);
        tc->best[i] = m;
        tc->arg[i] = at ? (uint32_t)_mm512_mask_reduce_min_epu32(at, av[i]) : UINT32_MAX;
    }
}

/* AVX2 without VNNI (Zen 2/3, most Intel client CPUs): 8 query lanes per register. The
 * byte products use the usual sign trick, |q8| * (c8 * sign(q8)) through vpmaddubsw:
 * with |q8| <= 127 a pair sum stays below 2^15, so nothing saturates, and the 32-bit
 * sums are the same exact integers as the VNNI kernel's (no +128 offset here). Tiles of
 * 4 centroids x 16 query lanes. */
#define AVX2 __attribute__((target("avx2")))

/* Four bytes at p in every 32-bit lane: vbroadcastss from memory is a load alone, where
 * a 32-bit value taken through a general register (memcpy, then _mm256_set1_epi32) cost
 * a move to the vector unit and a shuffle for each (doc/benchmarks.md, *Stage 1 on
 * AVX2*). */
#define BCAST4(p) _mm256_castps_si256(_mm256_broadcast_ss((const float *)(const void *)(p)))

#define DPA(A, X, AX, C)                                                                    \
    A = _mm256_add_epi32(A, _mm256_madd_epi16(_mm256_maddubs_epi16(AX, _mm256_sign_epi8(C, X)), \
                                              ones))

AVX2 static void tile_4x16_avx2(const tt_cq *q, const uint8_t *qb, uint32_t k0, const uint8_t *cp,
                                uint32_t nqp, uint32_t lane0, const float *qs16, float *St) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0,
            b3 = a0;
    for (uint32_t g = 0; g < q->nd4; g++) {
        const __m256i x0 = _mm256_xor_si256(_mm256_load_si256((const void *)(qb + (size_t)g * 64)),
                                            flip);
        const __m256i x1 = _mm256_xor_si256(
            _mm256_load_si256((const void *)(qb + (size_t)g * 64 + 32)), flip);
        const __m256i ax0 = _mm256_abs_epi8(x0), ax1 = _mm256_abs_epi8(x1);
        const uint8_t *w = cp + (size_t)g * 64;
        __m256i c = BCAST4(w);
        DPA(a0, x0, ax0, c);
        DPA(b0, x1, ax1, c);
        c = BCAST4(w + 4);
        DPA(a1, x0, ax0, c);
        DPA(b1, x1, ax1, c);
        c = BCAST4(w + 8);
        DPA(a2, x0, ax0, c);
        DPA(b2, x1, ax1, c);
        c = BCAST4(w + 12);
        DPA(a3, x0, ax0, c);
        DPA(b3, x1, ax1, c);
    }
    const __m256i A[4] = {a0, a1, a2, a3}, B[4] = {b0, b1, b2, b3};
    for (uint32_t t = 0; t < 4 && k0 + t < q->K; t++) {
        const uint32_t k = k0 + t;
        const __m256 s = _mm256_set1_ps(q->scale[k]);
        float out[16];
        _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(A[t]),
                                            _mm256_mul_ps(s, _mm256_loadu_ps(qs16))));
        _mm256_storeu_ps(out + 8,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(B[t]),
                                       _mm256_mul_ps(s, _mm256_loadu_ps(qs16 + 8))));
        uint32_t n = nqp - lane0 < 16 ? nqp - lane0 : 16;
        memcpy(St + (uint64_t)k * nqp + lane0, out, n * sizeof(float));
    }
}

/* AVX2 with centroids in the lanes, for nqp <= 8 (DiffRetriever's 4-vector queries,
 * where the 16-lane query tile above computes 12 padding lanes): one 32-byte load gives
 * 8 centroids' next four values, against one query vector's four bytes broadcast, with
 * the same sign trick and so the same exact sums. A pass covers a block of 16 centroids
 * and four query vectors (eight accumulators); nqp = 8 takes two passes. */
AVX2 static void clanes_block_avx2(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                                   uint32_t nqp, uint32_t i0, uint32_t blk, float *St) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0,
            b3 = a0;
    const uint8_t *cb = q->data + (size_t)blk * q->nd4 * 64, *xb = qpack + (size_t)i0 * 4;
    for (uint32_t g = 0; g < q->nd4; g++) {
        /* 2 KiB ahead: at 3584-d the table (29 MiB) comes from memory, and the hardware
         * prefetcher alone left stage 1 12-25% slower (doc/benchmarks.md, *Centroid rows
         * and the int8 table from memory*); past the end it is a no-op. */
        _mm_prefetch((const char *)(cb + (size_t)g * 64 + 2048), _MM_HINT_T0);
        const __m256i c0 = _mm256_load_si256((const void *)(cb + (size_t)g * 64));
        const __m256i c1 = _mm256_load_si256((const void *)(cb + (size_t)g * 64 + 32));
        const uint8_t *w = xb + (size_t)g * 64;
        __m256i x = _mm256_xor_si256(BCAST4(w), flip), ax = _mm256_abs_epi8(x);
        DPA(a0, x, ax, c0);
        DPA(b0, x, ax, c1);
        x = _mm256_xor_si256(BCAST4(w + 4), flip);
        ax = _mm256_abs_epi8(x);
        DPA(a1, x, ax, c0);
        DPA(b1, x, ax, c1);
        x = _mm256_xor_si256(BCAST4(w + 8), flip);
        ax = _mm256_abs_epi8(x);
        DPA(a2, x, ax, c0);
        DPA(b2, x, ax, c1);
        x = _mm256_xor_si256(BCAST4(w + 12), flip);
        ax = _mm256_abs_epi8(x);
        DPA(a3, x, ax, c0);
        DPA(b3, x, ax, c1);
    }
    const __m256 s0 = _mm256_loadu_ps(q->scale + blk * 16);
    const __m256 s1 = _mm256_loadu_ps(q->scale + blk * 16 + 8);
    const __m256i A[4] = {a0, a1, a2, a3}, B[4] = {b0, b1, b2, b3};
    float tmp[4][16];
    for (uint32_t i = 0; i < 4; i++) {
        const __m256 qs = _mm256_set1_ps(qscale[i0 + i]);
        _mm256_storeu_ps(tmp[i], _mm256_mul_ps(_mm256_cvtepi32_ps(A[i]), _mm256_mul_ps(s0, qs)));
        _mm256_storeu_ps(tmp[i] + 8,
                         _mm256_mul_ps(_mm256_cvtepi32_ps(B[i]), _mm256_mul_ps(s1, qs)));
    }
    for (uint32_t l = 0; l < 16 && blk * 16 + l < q->K; l++)
        for (uint32_t i = 0; i < 4; i++)
            St[(uint64_t)(blk * 16 + l) * nqp + i0 + i] = tmp[i][l];
}

AVX2 static void scores_clanes_avx2(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                                    uint32_t nqp, float *St) {
    for (uint32_t blk = 0; blk < q->nblk; blk++)
        for (uint32_t i0 = 0; i0 < nqp; i0 += 4)
            clanes_block_avx2(q, qpack, qscale, nqp, i0, blk, St);
}

AVX2 static void scores_avx2(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                             uint32_t nqp, float *St) {
    const size_t bstride = (size_t)q->nd4 * 64;
    const uint32_t nqb = (nqp + 15) / 16;
    /* qscale holds nqp entries; the tile reads 16 (padding lanes: scale 0). */
    float qs[16];
    for (uint32_t b = 0; b < nqb; b++) {
        const uint32_t lane0 = 16 * b, n = nqp - lane0 < 16 ? nqp - lane0 : 16;
        memset(qs, 0, sizeof qs);
        memcpy(qs, qscale + lane0, n * sizeof *qs);
        for (uint32_t blk = 0; blk < q->nblk; blk++)
            for (uint32_t h = 0; h < 4 && blk * 16 + h * 4 < q->K; h++)
                tile_4x16_avx2(q, qpack + b * bstride, blk * 16 + h * 4,
                               q->data + blk * bstride + h * 16, nqp, lane0, qs, St);
    }
}
#endif

/* St by q->kernel; with top, what it asks for too where the kernel is VNNI, which keeps
 * it as it writes St. Returns whether it did. */
static bool scores_by(const tt_cq *q, const uint8_t *qpack, const float *qscale, uint32_t nq,
                      uint32_t nqp, float *St, const tt_cq_top1 *top) {
#ifdef TT_CQ_X86
    if (q->kernel == TT_CQ_VNNI) {
        if (top) {
            for (uint32_t i = 0; i < nqp; i++) {
                top->best[i] = -INFINITY;
                top->arg[i] = UINT32_MAX;
            }
            if (top->reach)
                memset(top->reach, 0, q->K);
        }
        if (nqp <= 8)
            scores_clanes(q, qpack, qscale, nq, nqp, St, top);
        else
            scores_qlanes(q, qpack, qscale, nq, nqp, St, top);
        return top != NULL;
    }
    if (q->kernel == TT_CQ_AVX2) {
        if (nqp <= 8)
            scores_clanes_avx2(q, qpack, qscale, nqp, St);
        else
            scores_avx2(q, qpack, qscale, nqp, St);
        return false;
    }
#endif
#ifdef TT_SSE2
    if (q->kernel >= TT_CQ_SSE2) {
        scores_sse2(q, qpack, qscale, nqp, St);
        return false;
    }
#endif
    (void)nq;
    (void)top;
    tt_cq_scores_portable(q, qpack, qscale, nqp, St);
    return false;
}

void tt_cq_scores(const tt_cq *q, const uint8_t *qpack, const float *qscale, uint32_t nqp,
                  float *St) {
    scores_by(q, qpack, qscale, nqp, nqp, St, NULL);
}

bool tt_cq_centroid_scores_top1(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp,
                                uint8_t *qpack, float *qscale, float *St,
                                const tt_cq_top1 *top) {
    if (q->kernel == TT_CQ_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)q->K, (int)nqp, (int)q->dim,
                    1.0f, q->f32, (int)q->dim, Q, (int)q->dim, 0.0f, St, (int)nqp);
        return false;
    }
    tt_cq_query(q, Q, nq, nqp, qpack, qscale);
    return scores_by(q, qpack, qscale, nq, nqp, St, top);
}

void tt_cq_centroid_scores(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp,
                           uint8_t *qpack, float *qscale, float *St) {
    tt_cq_centroid_scores_top1(q, Q, nq, nqp, qpack, qscale, St, NULL);
}

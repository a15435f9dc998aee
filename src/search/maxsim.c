/* MaxSim kernels: one product per group of decoded documents (AVX-512 multiply-adds
 * in position order, or an sgemm), then row maxima; and the scalar reference the tests
 * compare them with. */
#include "search/maxsim.h"

#include <cblas.h>
#include <math.h>

/* Running maxima over the rows of one document, left in its first row of QR:
 * m[i] = max_j QR[j, i]. */
static void maxsim_rows(float *QR, uint32_t len, uint32_t nqp) {
    for (uint32_t j = 1; j < len; j++)
        max_into(QR, QR + (uint64_t)j * nqp, nqp);
}

/* A document's score from its row maxima m: their sum over the query vectors. */
static inline float sum_maxima(const float *m, uint32_t nq) {
    float sum = 0;
    for (uint32_t i = 0; i < nq; i++)
        sum += m[i];
    return sum;
}

/* Each document's score from QR (its rows' scores, in order): the sum over the query
 * vectors of their row maxima. */
static void group_scores(float *QR, uint32_t nq, uint32_t nqp, const uint32_t *doclens,
                         uint32_t ndocs, float *scores) {
    uint64_t v = 0;
    for (uint32_t d = 0; d < ndocs; d++) {
        /* The document's first row of QR becomes its running maximum. */
        float *m = QR + v * nqp;
        maxsim_rows(m, doclens[d], nqp);
        scores[d] = sum_maxima(m, nq);
        v += doclens[d];
    }
}

bool tt_maxsim_own(uint32_t nqp) {
#ifdef TT_AVX512
    return nqp >= 16 && nqp <= TT_MAXSIM_OWN_MAX_NQP && __builtin_cpu_supports("avx512f");
#else
    (void)nqp;
    return false;
#endif
}

void tt_maxsim_transpose(const float *Qp, uint32_t nqp, uint32_t dim, float *Qt) {
    for (uint32_t i = 0; i < nqp; i++)
        for (uint32_t k = 0; k < dim; k++)
            Qt[(uint64_t)k * nqp + i] = Qp[(uint64_t)i * dim + k];
}

void tt_maxsim_products_portable(const float *Qt, uint32_t nqp, uint32_t dim, const float *R,
                                 uint64_t nrows, float *QR) {
    for (uint64_t j = 0; j < nrows; j++)
        for (uint32_t i = 0; i < nqp; i++) {
            float s = 0;
            for (uint32_t k = 0; k < dim; k++)
                s = fmaf(R[j * dim + k], Qt[(uint64_t)k * nqp + i], s);
            QR[j * nqp + i] = s;
        }
}

#ifdef TT_AVX512
/* Rows j..j+8 of QR, query columns in NZ registers of 16 (the last one masked): for
 * each position k, the 8 rows' values broadcast against the columns' Qt row, one
 * multiply-add each, in position order (so every product is the portable loop's). */
__attribute__((always_inline)) AVX512_FN static inline void
products_rows8(const float *Qt, uint32_t nqp, uint32_t dim, const float *R, float *QR,
               const uint32_t NZ, __mmask16 last) {
    __m512 acc[8][4];
    _Pragma("GCC unroll 8")
    for (uint32_t r = 0; r < 8; r++)
        _Pragma("GCC unroll 4")
        for (uint32_t z = 0; z < NZ; z++)
            acc[r][z] = _mm512_setzero_ps();
    for (uint32_t k = 0; k < dim; k++) {
        const float *q = Qt + (uint64_t)k * nqp;
        __m512 qz[4];
        _Pragma("GCC unroll 4")
        for (uint32_t z = 0; z < NZ; z++)
            qz[z] = _mm512_maskz_loadu_ps(z + 1 < NZ ? (__mmask16)0xffff : last, q + 16 * z);
        _Pragma("GCC unroll 8")
        for (uint32_t r = 0; r < 8; r++) {
            const __m512 b = _mm512_set1_ps(R[(uint64_t)r * dim + k]);
            _Pragma("GCC unroll 4")
            for (uint32_t z = 0; z < NZ; z++)
                acc[r][z] = _mm512_fmadd_ps(b, qz[z], acc[r][z]);
        }
    }
    _Pragma("GCC unroll 8")
    for (uint32_t r = 0; r < 8; r++)
        _Pragma("GCC unroll 4")
        for (uint32_t z = 0; z < NZ; z++)
            _mm512_mask_storeu_ps(QR + (uint64_t)r * nqp + 16 * z,
                                  z + 1 < NZ ? (__mmask16)0xffff : last, acc[r][z]);
}

AVX512_FN void tt_maxsim_products_avx512(const float *Qt, uint32_t nqp, uint32_t dim,
                                         const float *R, uint64_t nrows, float *QR) {
    const uint32_t nz = (nqp + 15) / 16;
    const __mmask16 last = nqp % 16 ? (__mmask16)((1u << nqp % 16) - 1) : (__mmask16)0xffff;
    for (uint64_t j = 0; j < nrows; j += 8) {
        const float *r = R + j * dim;
        float *o = QR + j * nqp;
        switch (nz) {
        case 1: products_rows8(Qt, nqp, dim, r, o, 1, last); break;
        case 2: products_rows8(Qt, nqp, dim, r, o, 2, last); break;
        case 3: products_rows8(Qt, nqp, dim, r, o, 3, last); break;
        default: products_rows8(Qt, nqp, dim, r, o, 4, last); break;
        }
    }
}
#endif

bool tt_maxsim_rowdot(uint32_t nqp) {
#ifdef TT_AVX512
    return nqp >= 1 && nqp <= TT_MAXSIM_ROWDOT_MAX_NQP && __builtin_cpu_supports("avx512f");
#else
    (void)nqp;
    return false;
#endif
}

/* The fixed tree that adds a product's 16 lanes (tt_maxsim_rowdot's order). */
static inline float lanes_sum(float p[16]) {
    for (uint32_t w = 8; w >= 1; w /= 2)
        for (uint32_t l = 0; l < w; l++)
            p[l] = p[l] + p[l + w];
    return p[0];
}

void tt_maxsim_rowdot_portable(const float *Qp, uint32_t nqp, uint32_t dim, const float *R,
                               uint64_t nrows, float *QR) {
    const uint32_t dim16 = (dim + 15) / 16 * 16;
    for (uint64_t j = 0; j < nrows; j++)
        for (uint32_t i = 0; i < nqp; i++) {
            float p[16] = {0};
            for (uint32_t k = 0; k < dim16; k++) {
                const float x = k < dim ? R[j * dim + k] : 0.0f;
                const float q = k < dim ? Qp[(uint64_t)i * dim + k] : 0.0f;
                p[k % 16] = fmaf(x, q, p[k % 16]);
            }
            QR[j * nqp + i] = lanes_sum(p);
        }
}

#ifdef TT_AVX512
/* lanes_sum of a register: the same pairs added in the same order. */
__attribute__((always_inline)) AVX512_FN static inline float lanes_sum512(__m512 v) {
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), hi);
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* Positions [k0, k1) of RB rows of R against the NQ query rows, into RB * NQ
 * accumulators of 16 positions kept in acc between calls. */
__attribute__((always_inline)) AVX512_FN static inline void
rowdot_block(const float *Qp, uint32_t dim, const float *R, __m512 *acc, uint32_t k0,
             uint32_t k1, const uint32_t RB, const uint32_t NQ) {
    __m512 a[4][TT_MAXSIM_ROWDOT_MAX_NQP];
    _Pragma("GCC unroll 4")
    for (uint32_t r = 0; r < RB; r++)
        _Pragma("GCC unroll 12")
        for (uint32_t i = 0; i < NQ; i++)
            a[r][i] = acc[r * NQ + i];
    const uint32_t full = dim / 16 * 16;
    for (uint32_t k = k0; k < k1; k += 16) {
        /* whole blocks unmasked; the last, partial one with zeros past dim */
        const __mmask16 m = k < full ? (__mmask16)0xffff : (__mmask16)((1u << (dim - k)) - 1);
        __m512 x[4];
        _Pragma("GCC unroll 4")
        for (uint32_t r = 0; r < RB; r++)
            x[r] = k < full ? _mm512_loadu_ps(R + (uint64_t)r * dim + k)
                            : _mm512_maskz_loadu_ps(m, R + (uint64_t)r * dim + k);
        _Pragma("GCC unroll 12")
        for (uint32_t i = 0; i < NQ; i++) {
            const float *q = Qp + (uint64_t)i * dim + k;
            const __m512 qv = k < full ? _mm512_loadu_ps(q) : _mm512_maskz_loadu_ps(m, q);
            _Pragma("GCC unroll 4")
            for (uint32_t r = 0; r < RB; r++)
                a[r][i] = _mm512_fmadd_ps(x[r], qv, a[r][i]);
        }
    }
    _Pragma("GCC unroll 4")
    for (uint32_t r = 0; r < RB; r++)
        _Pragma("GCC unroll 12")
        for (uint32_t i = 0; i < NQ; i++)
            acc[r * NQ + i] = a[r][i];
}

/* Rows a panel at a time and positions a chunk at a time, so that the query's chunk
 * (NQ x ROWDOT_KC floats) stays in L1 while the panel's rows pass: at 3584-d a 4-vector
 * query is 56 KiB, and read whole for every few rows it came from L2 beside them. The
 * accumulators wait in acc between chunks; each lane still adds its positions in
 * order. */
#define ROWDOT_PANEL 16u
#define ROWDOT_KC 512u
__attribute__((always_inline)) AVX512_FN static inline void
rowdot_panel(const float *Qp, uint32_t dim, const float *R, float *QR, const uint32_t RB,
             const uint32_t NQ) {
    __m512 acc[ROWDOT_PANEL * TT_MAXSIM_ROWDOT_MAX_NQP];
    for (uint32_t t = 0; t < ROWDOT_PANEL * NQ; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint32_t k0 = 0; k0 < dim; k0 += ROWDOT_KC) {
        const uint32_t k1 = dim - k0 > ROWDOT_KC ? k0 + ROWDOT_KC : dim;
        for (uint32_t r = 0; r < ROWDOT_PANEL; r += RB)
            rowdot_block(Qp, dim, R + (uint64_t)r * dim, acc + r * NQ, k0, k1, RB, NQ);
    }
    for (uint32_t t = 0; t < ROWDOT_PANEL * NQ; t++)
        QR[t] = lanes_sum512(acc[t]);
}

AVX512_FN void tt_maxsim_rowdot_avx512(const float *Qp, uint32_t nqp, uint32_t dim,
                                       const float *R, uint64_t nrows, float *QR) {
    uint64_t j = 0;
    if (nqp == 4 || nqp == 8 || nqp == 12) /* the padded widths: whole panels */
        for (; j + ROWDOT_PANEL <= nrows; j += ROWDOT_PANEL) {
            const float *r = R + j * dim;
            float *o = QR + j * nqp;
            if (nqp == 4)
                rowdot_panel(Qp, dim, r, o, 4, 4);
            else if (nqp == 8)
                rowdot_panel(Qp, dim, r, o, 2, 8);
            else
                rowdot_panel(Qp, dim, r, o, 2, 12);
        }
    for (; j < nrows; j++) /* other widths, and rows past the last whole panel */
        for (uint32_t i = 0; i < nqp; i++) {
            __m512 a = _mm512_setzero_ps();
            rowdot_block(Qp + (uint64_t)i * dim, dim, R + j * dim, &a, 0, dim, 1, 1);
            QR[j * nqp + i] = lanes_sum512(a);
        }
}
#endif

/* QR[j, i] = <v_j, q_i> for the nvec rows of R (the rows up to tt_maxsim_rows(nvec)
 * computed too, and ignored): by tt_maxsim_products_avx512 where Qt is given, by
 * tt_maxsim_rowdot_avx512 for a few query rows, else one sgemm; returns nvec. */
static uint64_t group_products(const float *Qp, const float *Qt, uint32_t nqp, uint32_t dim,
                               const float *R, const uint32_t *doclens, uint32_t ndocs,
                               float *QR) {
    uint64_t nvec = 0;
    for (uint32_t d = 0; d < ndocs; d++)
        nvec += doclens[d];
    if (!nvec)
        return 0;
#ifdef TT_AVX512
    if (Qt) {
        tt_maxsim_products_avx512(Qt, nqp, dim, R, tt_maxsim_rows(nvec), QR);
        return nvec;
    }
    if (tt_maxsim_rowdot(nqp)) {
        tt_maxsim_rowdot_avx512(Qp, nqp, dim, R, tt_maxsim_rows(nvec), QR);
        return nvec;
    }
#endif
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)tt_maxsim_rows(nvec), (int)nqp,
                (int)dim, 1.0f, R, (int)dim, Qp, (int)dim, 0.0f, QR, (int)nqp);
    return nvec;
}

void tt_maxsim_group(const float *Qp, const float *Qt, uint32_t nq, uint32_t nqp, uint32_t dim,
                     const float *R, const uint32_t *doclens, uint32_t ndocs, float *QR,
                     float *scores) {
    if (group_products(Qp, Qt, nqp, dim, R, doclens, ndocs, QR))
        group_scores(QR, nq, nqp, doclens, ndocs, scores);
}

void tt_maxsim_group_split(const float *Qp, const float *Qt, uint32_t nq, uint32_t nqp,
                           uint32_t dim, const float *R, const uint32_t *doclens,
                           uint32_t ndocs, const uint32_t *codes, const float *CS,
                           uint64_t cs_stride, float *QR, float *scores) {
    uint64_t nvec = 0;
    if (R)
        nvec = group_products(Qp, Qt, nqp, dim, R, doclens, ndocs, QR);
    else
        for (uint32_t d = 0; d < ndocs; d++)
            nvec += doclens[d];
    if (!nvec)
        return;
    /* Each row gets its centroid's scores and joins its document's running maximum (the
     * first row) while it is in cache: group_scores' maxima, in one pass. */
    uint64_t v = 0;
    for (uint32_t d = 0; d < ndocs; d++) {
        float *m = QR + v * nqp;
        for (uint32_t j = 0; j < doclens[d]; j++, v++) {
            float *row = QR + v * nqp;
            const float *cs = CS + codes[v] * cs_stride;
            if (v + 4 < nvec) { /* CS rows are random reads (32 query vectors: 2 lines) */
                const float *a = CS + codes[v + 4] * cs_stride;
                __builtin_prefetch(a);
                __builtin_prefetch(a + nqp - 1);
            }
            add_into(row, cs, nqp);
            if (j)
                max_into(m, row, nqp);
        }
        scores[d] = sum_maxima(m, nq);
    }
}

#ifdef TT_AVX2
/* Eight values of a centroid row from position k: float32, or float16 (F16C). */
__attribute__((always_inline)) AVX2_FN static inline __m256 row8(const void *r, bool half,
                                                                  uint32_t k) {
    return half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)r + k)))
                : _mm256_loadu_ps((const float *)r + k);
}

static inline float row1(const void *r, bool half, uint32_t k) {
    return half ? tt_f16_to_f32(((const uint16_t *)r)[k]) : ((const float *)r)[k];
}

/* Four query rows (Q, stride dim) against two centroid rows a and b: oa[i] = <q_i, a>,
 * ob[i] = <q_i, b>. pa and pb (or NULL) are the next rows, prefetched a 64-byte line at
 * a time so that their reads overlap this pair's arithmetic. */
__attribute__((always_inline)) AVX2_FN static inline void
dot_pair4(const float *Q, uint32_t dim, const void *a, const void *b, const void *pa,
          const void *pb, bool half, float *oa, float *ob) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0,
           b3 = a0;
    const float *q0 = Q, *q1 = Q + dim, *q2 = Q + 2 * (uint64_t)dim, *q3 = Q + 3 * (uint64_t)dim;
    const uint32_t line = half ? 32 : 16, esz = half ? 2 : 4;
    uint32_t k = 0;
    for (; k + 8 <= dim; k += 8) {
        if (pa && k % line == 0) {
            _mm_prefetch((const char *)pa + (uint64_t)k * esz, _MM_HINT_T0);
            _mm_prefetch((const char *)pb + (uint64_t)k * esz, _MM_HINT_T0);
        }
        const __m256 x = row8(a, half, k), y = row8(b, half, k);
        __m256 q = _mm256_loadu_ps(q0 + k);
        a0 = _mm256_fmadd_ps(x, q, a0);
        b0 = _mm256_fmadd_ps(y, q, b0);
        q = _mm256_loadu_ps(q1 + k);
        a1 = _mm256_fmadd_ps(x, q, a1);
        b1 = _mm256_fmadd_ps(y, q, b1);
        q = _mm256_loadu_ps(q2 + k);
        a2 = _mm256_fmadd_ps(x, q, a2);
        b2 = _mm256_fmadd_ps(y, q, b2);
        q = _mm256_loadu_ps(q3 + k);
        a3 = _mm256_fmadd_ps(x, q, a3);
        b3 = _mm256_fmadd_ps(y, q, b3);
    }
    const __m256 A[4] = {a0, a1, a2, a3}, B[4] = {b0, b1, b2, b3};
    for (uint32_t i = 0; i < 4; i++) {
        float sa = tt_hsum8(A[i]), sb = tt_hsum8(B[i]);
        for (uint32_t t = k; t < dim; t++) {
            sa += Q[(uint64_t)i * dim + t] * row1(a, half, t);
            sb += Q[(uint64_t)i * dim + t] * row1(b, half, t);
        }
        oa[i] = sa;
        ob[i] = sb;
    }
}

/* Rows two at a time: a 14 KiB float32 row of a 3584-d index comes from memory, and one
 * stream per row (an sgemv a row) left the memory system idle between rows. */
__attribute__((always_inline)) AVX2_FN static inline void
centroid_dots_avx2(const float *Qp, uint32_t nqp, uint32_t dim, const void *centroids,
                   bool half, const uint32_t *codes, uint64_t n, float *CS) {
    const uint64_t rb = (uint64_t)dim * (half ? 2 : 4);
    const char *base = centroids;
    for (uint64_t t = 0; t < n; t += 2) {
        const uint32_t ca = codes[t], cb = codes[t + 1 < n ? t + 1 : t];
        const char *a = base + ca * rb, *b = base + cb * rb, *pa = NULL, *pb = NULL;
        if (t + 2 < n) {
            pa = base + codes[t + 2] * rb;
            pb = base + codes[t + 3 < n ? t + 3 : t + 2] * rb;
        }
        for (uint32_t i0 = 0; i0 < nqp; i0 += 4)
            dot_pair4(Qp + (uint64_t)i0 * dim, dim, a, b, i0 ? NULL : pa, pb, half,
                      CS + (uint64_t)ca * nqp + i0, CS + (uint64_t)cb * nqp + i0);
    }
}

AVX2_FN static void centroid_dots32_avx2(const float *Qp, uint32_t nqp, uint32_t dim,
                                         const float *centroids, const uint32_t *codes,
                                         uint64_t n, float *CS) {
    centroid_dots_avx2(Qp, nqp, dim, centroids, false, codes, n, CS);
}

AVX2_FN static void centroid_dots16_avx2(const float *Qp, uint32_t nqp, uint32_t dim,
                                         const uint16_t *centroids, const uint32_t *codes,
                                         uint64_t n, float *CS) {
    centroid_dots_avx2(Qp, nqp, dim, centroids, true, codes, n, CS);
}
#endif

/* Positions of a float16 row converted at a time by the portable loop. */
#define DOTS16_CHUNK 256u

void tt_centroid_dots(const float *Qp, uint32_t nqp, uint32_t dim, const float *centroids,
                      const uint16_t *centroids16, const uint32_t *codes, uint64_t n,
                      float *CS, bool avx2) {
#ifdef TT_AVX2
    if (avx2) {
        if (centroids16)
            centroid_dots16_avx2(Qp, nqp, dim, centroids16, codes, n, CS);
        else
            centroid_dots32_avx2(Qp, nqp, dim, centroids, codes, n, CS);
        return;
    }
#else
    (void)avx2;
#endif
    float buf[DOTS16_CHUNK];
    for (uint64_t t = 0; t < n; t++) {
        float *cs = CS + (uint64_t)codes[t] * nqp;
        if (!centroids16) {
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nqp, (int)dim, 1.0f, Qp, (int)dim,
                        centroids + (uint64_t)codes[t] * dim, 1, 0.0f, cs, 1);
            continue;
        }
        const uint16_t *row = centroids16 + (uint64_t)codes[t] * dim;
        for (uint32_t k = 0; k < dim; k += DOTS16_CHUNK) {
            const uint32_t m = TT_MIN(DOTS16_CHUNK, dim - k);
            tt_f16_to_f32_n(buf, row + k, m);
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nqp, (int)m, 1.0f, Qp + k, (int)dim,
                        buf, 1, k ? 1.0f : 0.0f, cs, 1);
        }
    }
}

double tt_maxsim_reference(const float *Q, uint32_t nq, uint32_t dim, const float *centroids,
                           const tt_codec *c, const uint32_t *codes, const uint8_t *packed,
                           uint32_t doclen) {
    double total = 0;
    for (uint32_t i = 0; i < nq; i++) {
        double best = -INFINITY;
        for (uint32_t j = 0; j < doclen; j++) {
            const uint8_t *p = packed + (uint64_t)j * c->bytes_per_vec;
            const float *cen = centroids + (uint64_t)codes[j] * dim;
            double s = 0;
            for (uint32_t k = 0; k < dim; k++)
                s += (double)Q[(uint64_t)i * dim + k] * ((double)cen[k] + tt_codec_value(c, p, k));
            if (s > best)
                best = s;
        }
        total += best;
    }
    return total;
}

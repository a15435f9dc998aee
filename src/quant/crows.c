/* Row-major int8 centroids (tt_crows, src/quant/cscore.h): approximate <q, C[c]> for a
 * list of centroids, as stage 4's lookup-table pass needs them. */
#include "quant/cscore.h"

#include "common/simd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Positions a row is padded to: one AVX2 register of bytes. */
#define CROW_ALIGN 32u

/* cmax[j] = max(cmax[j], |x[j]|); a NaN is never larger, so it never counts. */
static void col_max_portable(float *cmax, const float *x, uint32_t n) {
    for (uint32_t j = 0; j < n; j++) {
        const float v = fabsf(x[j]);
        cmax[j] = v > cmax[j] ? v : cmax[j];
    }
}

#ifdef TT_AVX2
/* The same eight at a time (scalar, 8,192 x 3,584 values took ~15 ms of an open). */
AVX2_FN static void col_max_avx2(float *cmax, const float *x, uint32_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) /* vmaxps(a, b): b where a is NaN */
        _mm256_storeu_ps(cmax + j, _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)),
                                                 _mm256_loadu_ps(cmax + j)));
    col_max_portable(cmax + j, x + j, n - j);
}
#endif

static void col_max(float *cmax, const float *x, uint32_t n, bool simd) {
#ifdef TT_AVX2
    if (simd) {
        col_max_avx2(cmax, x, n);
        return;
    }
#endif
    (void)simd;
    col_max_portable(cmax, x, n);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* A dimension whose largest |value| over the centroids exceeds TT_CROWS_HEAD_RATIO
 * times the median dimension's is a head dimension (at most TT_CROWS_HEAD_MAX of them,
 * the largest): LLM hidden states' massive activations, a large offset shared by every
 * vector. Kept in float32 beside the int8 rows, and left out of both sides' int8 rows,
 * they no longer set every row's step: on the LLM-like collection (4 such dimensions),
 * rows with them in int8 made stage 4 rescore 111 documents a query instead of 11. */
static int head_dims(tt_crows *r, const float *centroids) {
    const uint32_t dim = r->dim;
    float *cmax = tt_calloc(dim, sizeof *cmax, "int8 centroid rows");
    float *sorted = tt_alloc(dim, sizeof *sorted, "int8 centroid rows");
    if (!cmax || !sorted) {
        free(cmax);
        free(sorted);
        return TT_ENOMEM;
    }
    const bool simd = tt_cq_simd_ok();
    for (uint64_t k = 0; k < r->K; k++)
        col_max(cmax, centroids + k * dim, dim, simd);
    memcpy(sorted, cmax, dim * sizeof *cmax);
    qsort(sorted, dim, sizeof *sorted, cmp_float);
    const float cut = TT_CROWS_HEAD_RATIO * sorted[dim / 2];
    /* the largest ones, at most TT_CROWS_HEAD_MAX, then in dimension order */
    for (uint32_t h = 0; h < TT_CROWS_HEAD_MAX && h < dim; h++) {
        const float v = sorted[dim - 1 - h];
        if (!(v > cut))
            break;
        for (uint32_t j = 0; j < dim; j++)
            if (cmax[j] == v) {
                bool taken = false;
                for (uint32_t t = 0; t < r->nhead; t++)
                    taken |= r->head[t] == j;
                if (!taken) {
                    r->head[r->nhead++] = j;
                    break;
                }
            }
    }
    for (uint32_t a = 1; a < r->nhead; a++) /* insertion sort: a few entries */
        for (uint32_t b = a; b > 0 && r->head[b - 1] > r->head[b]; b--) {
            const uint32_t t = r->head[b];
            r->head[b] = r->head[b - 1];
            r->head[b - 1] = t;
        }
    free(cmax);
    free(sorted);
    return TT_OK;
}

/* x without its head dimensions (zero there) into tmp; their values into hv. */
static void split_head(const tt_crows *r, const float *x, float *tmp, float *hv) {
    memcpy(tmp, x, r->dim * sizeof *x);
    for (uint32_t h = 0; h < r->nhead; h++) {
        const float v = x[r->head[h]];
        if (hv)
            hv[h] = isfinite(v) ? v : 0.0f;
        tmp[r->head[h]] = 0;
    }
}

int tt_crows_init(tt_crows *r, const float *centroids, uint32_t K, uint32_t dim) {
    memset(r, 0, sizeof *r);
    r->K = K;
    r->dim = dim;
    r->stride = (dim + CROW_ALIGN - 1) / CROW_ALIGN * CROW_ALIGN;
    float *tmp = NULL;
    if (!(r->data = tt_alloc_aligned((uint64_t)K * r->stride, 1, 64, "int8 centroid rows")) ||
        !(r->scale = tt_alloc(K ? K : 1, sizeof *r->scale, "int8 centroid rows")) ||
        !(tmp = tt_alloc(dim ? dim : 1, sizeof *tmp, "int8 centroid rows")) ||
        (dim && head_dims(r, centroids)) ||
        !(r->hval = tt_alloc((uint64_t)K * (r->nhead ? r->nhead : 1), sizeof *r->hval,
                             "int8 centroid rows"))) {
        free(tmp);
        tt_crows_free(r);
        return TT_ENOMEM;
    }
    const bool simd = tt_cq_simd_ok();
    for (uint64_t k = 0; k < K; k++) {
        split_head(r, centroids + k * dim, tmp, r->hval + k * r->nhead);
        float m;
        int8_t *row = r->data + k * r->stride;
        memset(row + dim, 0, r->stride - dim);
        tt_cq_quantize_row(tmp, dim, 127.0f, simd, row, &m);
        r->scale[k] = m / 127.0f;
        r->stepmax = r->scale[k] > r->stepmax ? r->scale[k] : r->stepmax;
        const float s = tt_cq_sq_norm(tmp, dim, simd);
        r->c2max = s > r->c2max ? s : r->c2max;
    }
    free(tmp);
    return TT_OK;
}

void tt_crows_free(tt_crows *r) {
    free(r->data);
    free(r->scale);
    free(r->hval);
    memset(r, 0, sizeof *r);
}

uint64_t tt_crows_bytes(const tt_crows *r) {
    return r->data ? (uint64_t)r->K * (r->stride + sizeof *r->scale +
                                       r->nhead * sizeof *r->hval)
                   : 0;
}

int tt_crows_query(const tt_crows *r, const float *Q, uint32_t nqp, int8_t *q8, int8_t *qa,
                   float *qscale, float *qvar) {
    float *tmp = tt_alloc(r->dim ? r->dim : 1, sizeof *tmp, "query int8 rows");
    if (!tmp)
        return TT_ENOMEM;
    const bool simd = tt_cq_simd_ok();
    for (uint32_t i = 0; i < nqp; i++) {
        int8_t *row = q8 + (uint64_t)i * r->stride, *abs_row = qa + (uint64_t)i * r->stride;
        float m;
        memset(row, 0, r->stride);
        split_head(r, Q + (uint64_t)i * r->dim, tmp, NULL);
        tt_cq_quantize_row(tmp, r->dim, 127.0f, simd, row, &m);
        qscale[i] = m / 127.0f;
        for (uint32_t j = 0; j < r->stride; j++)
            abs_row[j] = (int8_t)(row[j] < 0 ? -row[j] : row[j]);
        const double qs = qscale[i], cs = r->stepmax;
        qvar[i] = (float)((qs * qs * r->c2max + cs * cs * tt_cq_sq_norm(tmp, r->dim, simd)) /
                          12.0);
    }
    free(tmp);
    return TT_OK;
}

/* The one float expression both kernels end with: the exact integer sum, scaled, plus
 * the head dimensions' products in dimension order. */
static inline float crow_score(const tt_crows *r, int32_t sum, float qs, const float *q,
                               uint32_t code) {
    float s = (float)sum * (qs * r->scale[code]);
    const float *hv = r->hval + (uint64_t)code * r->nhead;
    for (uint32_t h = 0; h < r->nhead; h++)
        s += q[r->head[h]] * hv[h];
    return s;
}

static void dots_portable(const tt_crows *r, const float *Q, const int8_t *q8,
                          const float *qscale, uint32_t nqp, const uint32_t *codes, uint64_t n,
                          float *CS) {
    for (uint64_t t = 0; t < n; t++) {
        const uint32_t code = codes[t];
        const int8_t *c = r->data + (uint64_t)code * r->stride;
        for (uint32_t i = 0; i < nqp; i++) {
            const int8_t *q = q8 + (uint64_t)i * r->stride;
            int32_t s = 0;
            for (uint32_t j = 0; j < r->stride; j++)
                s += (int32_t)q[j] * c[j];
            CS[(uint64_t)code * nqp + i] =
                crow_score(r, s, qscale[i], Q + (uint64_t)i * r->dim, code);
        }
    }
}

#ifdef TT_AVX2
/* The sum of a register's 8 int32 lanes (exact: any order). */
AVX2_FN static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* q * c for 32 byte pairs, summed in 32-bit lanes: |q| * (c with q's sign) through
 * vpmaddubsw (|q| <= 127, |c| <= 127: a pair sum stays below 2^15, nothing saturates). */
#define CROW_DPA(A, QA, QS, C)                                                               \
    A = _mm256_add_epi32(A, _mm256_madd_epi16(_mm256_maddubs_epi16(QA, _mm256_sign_epi8(C, QS)), \
                                              ones))

/* Two rows against four query rows; pa and pb (or NULL) the next pair, prefetched a
 * line at a time (a 3584-d row is 3.5 KiB from memory). */
AVX2_FN static void pair4(const tt_crows *r, const float *Q, const int8_t *q8, const int8_t *qa,
                          const float *qs,
                          uint32_t nqp, uint32_t i0, uint32_t ca, uint32_t cb, const int8_t *pa,
                          const int8_t *pb, float *CS) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *a = r->data + (uint64_t)ca * r->stride, *b = r->data + (uint64_t)cb * r->stride;
    const uint64_t st = r->stride;
    const int8_t *q0 = q8 + i0 * st, *a0p = qa + i0 * st;
    __m256i x0 = _mm256_setzero_si256(), x1 = x0, x2 = x0, x3 = x0, y0 = x0, y1 = x0, y2 = x0,
            y3 = x0;
    for (uint64_t k = 0; k < st; k += 64) {
        if (pa) {
            _mm_prefetch((const char *)(pa + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(pb + k), _MM_HINT_T0);
        }
        for (uint64_t h = k; h < k + 64 && h < st; h += 32) {
            const __m256i va = _mm256_load_si256((const void *)(a + h));
            const __m256i vb = _mm256_load_si256((const void *)(b + h));
            __m256i s = _mm256_load_si256((const void *)(q0 + h));
            __m256i m = _mm256_load_si256((const void *)(a0p + h));
            CROW_DPA(x0, m, s, va);
            CROW_DPA(y0, m, s, vb);
            s = _mm256_load_si256((const void *)(q0 + st + h));
            m = _mm256_load_si256((const void *)(a0p + st + h));
            CROW_DPA(x1, m, s, va);
            CROW_DPA(y1, m, s, vb);
            s = _mm256_load_si256((const void *)(q0 + 2 * st + h));
            m = _mm256_load_si256((const void *)(a0p + 2 * st + h));
            CROW_DPA(x2, m, s, va);
            CROW_DPA(y2, m, s, vb);
            s = _mm256_load_si256((const void *)(q0 + 3 * st + h));
            m = _mm256_load_si256((const void *)(a0p + 3 * st + h));
            CROW_DPA(x3, m, s, va);
            CROW_DPA(y3, m, s, vb);
        }
    }
    const __m256i X[4] = {x0, x1, x2, x3}, Y[4] = {y0, y1, y2, y3};
    for (uint32_t i = 0; i < 4; i++) {
        const float *q = Q + (uint64_t)(i0 + i) * r->dim;
        CS[(uint64_t)ca * nqp + i0 + i] = crow_score(r, hsum_epi32(X[i]), qs[i0 + i], q, ca);
        CS[(uint64_t)cb * nqp + i0 + i] = crow_score(r, hsum_epi32(Y[i]), qs[i0 + i], q, cb);
    }
}

AVX2_FN static void dots_avx2(const tt_crows *r, const float *Q, const int8_t *q8, const int8_t *qa,
                              const float *qscale, uint32_t nqp, const uint32_t *codes,
                              uint64_t n, float *CS) {
    for (uint64_t t = 0; t < n; t += 2) {
        const uint32_t ca = codes[t], cb = codes[t + 1 < n ? t + 1 : t];
        const int8_t *pa = NULL, *pb = NULL;
        if (t + 2 < n) {
            pa = r->data + (uint64_t)codes[t + 2] * r->stride;
            pb = r->data + (uint64_t)codes[t + 3 < n ? t + 3 : t + 2] * r->stride;
        }
        for (uint32_t i0 = 0; i0 < nqp; i0 += 4)
            pair4(r, Q, q8, qa, qscale, nqp, i0, ca, cb, i0 ? NULL : pa, i0 ? NULL : pb, CS);
    }
}
#endif

void tt_crows_dots(const tt_crows *r, const float *Q, const int8_t *q8, const int8_t *qa,
                   const float *qscale, uint32_t nqp, const uint32_t *codes, uint64_t n,
                   float *CS, bool avx2) {
#ifdef TT_AVX2
    if (avx2 && nqp % 4 == 0) {
        dots_avx2(r, Q, q8, qa, qscale, nqp, codes, n, CS);
        return;
    }
#endif
    (void)avx2;
    (void)qa;
    dots_portable(r, Q, q8, qscale, nqp, codes, n, CS);
}

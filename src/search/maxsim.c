/* MaxSim kernels: one sgemm per group of decoded documents, then row maxima; and the
 * scalar reference the tests compare them with. */
#include "search/maxsim.h"

#include <cblas.h>
#include <math.h>

/* Running maxima over the rows of one document, left in its first row of QR:
 * m[i] = max_j QR[j, i]. */
static void maxsim_rows(float *QR, uint32_t len, uint32_t nqp) {
    for (uint32_t j = 1; j < len; j++)
        max_into(QR, QR + (uint64_t)j * nqp, nqp);
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
        float sum = 0;
        for (uint32_t i = 0; i < nq; i++)
            sum += m[i];
        scores[d] = sum;
        v += doclens[d];
    }
}

/* QR[j, i] = <v_j, q_i> for the nvec rows of R; returns nvec. */
static uint64_t group_products(const float *Qp, uint32_t nqp, uint32_t dim, const float *R,
                               const uint32_t *doclens, uint32_t ndocs, float *QR) {
    uint64_t nvec = 0;
    for (uint32_t d = 0; d < ndocs; d++)
        nvec += doclens[d];
    if (nvec)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nvec, (int)nqp, (int)dim,
                    1.0f, R, (int)dim, Qp, (int)dim, 0.0f, QR, (int)nqp);
    return nvec;
}

void tt_maxsim_group(const float *Qp, uint32_t nq, uint32_t nqp, uint32_t dim, const float *R,
                     const uint32_t *doclens, uint32_t ndocs, float *QR, float *scores) {
    if (group_products(Qp, nqp, dim, R, doclens, ndocs, QR))
        group_scores(QR, nq, nqp, doclens, ndocs, scores);
}

void tt_maxsim_group_split(const float *Qp, uint32_t nq, uint32_t nqp, uint32_t dim,
                           const float *R, const uint32_t *doclens, uint32_t ndocs,
                           const uint32_t *codes, const float *CS, float *QR, float *scores) {
    uint64_t nvec = 0;
    if (R)
        nvec = group_products(Qp, nqp, dim, R, doclens, ndocs, QR);
    else
        for (uint32_t d = 0; d < ndocs; d++)
            nvec += doclens[d];
    if (!nvec)
        return;
    for (uint64_t j = 0; j < nvec; j++) {
        float *row = QR + j * nqp;
        const float *cs = CS + (uint64_t)codes[j] * nqp;
        for (uint32_t i = 0; i < nqp; i++)
            row[i] += cs[i];
    }
    group_scores(QR, nq, nqp, doclens, ndocs, scores);
}

#ifdef TT_AVX2
/* Four query rows (Q, stride dim) against two centroid rows a and b: oa[i] = <q_i, a>,
 * ob[i] = <q_i, b>. pa and pb (or NULL) are the next rows, prefetched a line per 16
 * floats so that their reads overlap this pair's arithmetic. */
AVX2_FN static void dot_pair4_avx2(const float *Q, uint32_t dim, const float *a, const float *b,
                                   const float *pa, const float *pb, float *oa, float *ob) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0,
           b3 = a0;
    const float *q0 = Q, *q1 = Q + dim, *q2 = Q + 2 * (uint64_t)dim, *q3 = Q + 3 * (uint64_t)dim;
    uint32_t k = 0;
    for (; k + 8 <= dim; k += 8) {
        if (pa && k % 16 == 0) {
            _mm_prefetch((const char *)(pa + k), _MM_HINT_T0);
            _mm_prefetch((const char *)(pb + k), _MM_HINT_T0);
        }
        const __m256 x = _mm256_loadu_ps(a + k), y = _mm256_loadu_ps(b + k);
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
            sa += Q[(uint64_t)i * dim + t] * a[t];
            sb += Q[(uint64_t)i * dim + t] * b[t];
        }
        oa[i] = sa;
        ob[i] = sb;
    }
}

/* Rows two at a time: a 14 KiB float32 row of a 3584-d index comes from memory, and one
 * stream per row (an sgemv a row) left the memory system idle between rows. */
AVX2_FN static void centroid_dots_avx2(const float *Qp, uint32_t nqp, uint32_t dim,
                                       const float *centroids, const uint32_t *codes,
                                       uint64_t n, float *CS) {
    for (uint64_t t = 0; t < n; t += 2) {
        const uint32_t ca = codes[t], cb = codes[t + 1 < n ? t + 1 : t];
        const float *a = centroids + (uint64_t)ca * dim, *b = centroids + (uint64_t)cb * dim;
        const float *pa = NULL, *pb = NULL;
        if (t + 2 < n) {
            pa = centroids + (uint64_t)codes[t + 2] * dim;
            pb = centroids + (uint64_t)codes[t + 3 < n ? t + 3 : t + 2] * dim;
        }
        for (uint32_t i0 = 0; i0 < nqp; i0 += 4)
            dot_pair4_avx2(Qp + (uint64_t)i0 * dim, dim, a, b, i0 ? NULL : pa, pb,
                           CS + (uint64_t)ca * nqp + i0, CS + (uint64_t)cb * nqp + i0);
    }
}
#endif

void tt_centroid_dots(const float *Qp, uint32_t nqp, uint32_t dim, const float *centroids,
                      const uint32_t *codes, uint64_t n, float *CS, bool avx2) {
#ifdef TT_AVX2
    if (avx2) {
        centroid_dots_avx2(Qp, nqp, dim, centroids, codes, n, CS);
        return;
    }
#else
    (void)avx2;
#endif
    for (uint64_t t = 0; t < n; t++)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nqp, (int)dim, 1.0f, Qp, (int)dim,
                    centroids + (uint64_t)codes[t] * dim, 1, 0.0f, CS + (uint64_t)codes[t] * nqp,
                    1);
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

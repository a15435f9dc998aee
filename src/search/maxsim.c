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

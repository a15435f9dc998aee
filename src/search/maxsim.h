/* Scoring kernels of search: bounded top-k selection and MaxSim over groups of decoded
 * documents (src/search/topk.c, src/search/maxsim.c). */
#ifndef TT_SEARCH_MAXSIM_H
#define TT_SEARCH_MAXSIM_H

#include "common/simd.h"
#include "quant/codec.h"

/* Bounded top-k selection with deterministic order: a hit is better if its score is
 * higher, or equal with a lower document id, so that any evaluation order of the same
 * (doc, score) pairs keeps the same set. */
typedef struct tt_topk {
    tt_hit *h;            /* min-heap of the k best so far (worst at h[0]) */
    uint32_t n, k, cap;
} tt_topk;

int tt_topk_reset(tt_topk *t, uint32_t k);
void tt_topk_push(tt_topk *t, uint64_t doc, float score);
/* Sorts the kept hits best first into t->h[0..n) and returns n. */
uint32_t tt_topk_finish(tt_topk *t);
void tt_topk_free(tt_topk *t);
/* Sorts h[0..n) best first (the top-k order; hits of distinct documents). */
void tt_hits_sort(tt_hit *h, size_t n);
/* Moves the m best of h[0..n) to h[0..m), sorted best first; the rest in any order. */
void tt_hits_best(tt_hit *h, size_t n, size_t m);

/* Query vectors are processed in blocks of TT_QB (SSE) lanes: score tables have a row stride
 * of nqp = nq rounded up to TT_QB, with zero query rows as padding. */
#define TT_QB 4u
static inline uint32_t tt_qpad(uint32_t nq) { return (nq + TT_QB - 1) / TT_QB * TT_QB; }

/* The sgemm of a MaxSim group multiplies its rows rounded up to a multiple of
 * TT_MAXSIM_ROW_PAD, so that a row's scores do not depend on how many rows share the
 * call nor where it sits among them: BLAS kernels take the rows in blocks and the last,
 * partial block by other code, which sums in another order (OpenBLAS's Prescott kernels,
 * which Debian 12's OpenBLAS takes on CPUs it does not recognise: a document's score
 * then changed with the documents grouped with it, and a sharded search's scores
 * differed from the unsharded one's in the last bit). */
#define TT_MAXSIM_ROW_PAD 16u
static inline uint64_t tt_maxsim_rows(uint64_t nvec) {
    return (nvec + TT_MAXSIM_ROW_PAD - 1) / TT_MAXSIM_ROW_PAD * TT_MAXSIM_ROW_PAD;
}

/* The products V Qpᵀ of a group without BLAS, where tt_maxsim_own(nqp): each
 * <v_j, q_i> is a chain of float multiply-adds in position order from zero (fmaf), so
 * it does not depend on the rows, the columns or the number of either that share the
 * call, and equals tt_maxsim_products_portable's bit for bit. For a group of a few
 * hundred 128-d rows and 32 query vectors it takes about half the time of OpenBLAS's
 * sgemm with its SkylakeX kernels and a fifth with the Prescott ones Debian's OpenBLAS
 * runs on CPUs it does not know (doc/benchmarks.md, *MaxSim products without BLAS*).
 * Qt is Qp transposed (dim * nqp: tt_maxsim_transpose); nrows a multiple of 8. Used
 * from 16 query rows (below, 16-wide registers would be mostly padding) to
 * TT_MAXSIM_OWN_MAX_NQP on CPUs with AVX-512; elsewhere the sgemm. */
#define TT_MAXSIM_OWN_MAX_NQP 64u
bool tt_maxsim_own(uint32_t nqp);
void tt_maxsim_transpose(const float *Qp, uint32_t nqp, uint32_t dim, float *Qt);
void tt_maxsim_products_portable(const float *Qt, uint32_t nqp, uint32_t dim, const float *R,
                                 uint64_t nrows, float *QR);
#ifdef TT_AVX512
void tt_maxsim_products_avx512(const float *Qt, uint32_t nqp, uint32_t dim, const float *R,
                               uint64_t nrows, float *QR);
#endif

/* The same products for queries of at most TT_MAXSIM_ROWDOT_MAX_NQP padded rows (the
 * DiffRetriever shape's 4 vectors: nqp 4), where tt_maxsim_rowdot(nqp): registers run
 * along the positions instead of the query rows, 16 at a time. Each <v_j, q_i> is 16
 * partial sums, position k in lane k mod 16 (a chain of fmaf in position order from
 * zero, the positions past dim taken as zeros up to a multiple of 16), added in a fixed
 * tree: lane l + lane l+8, then + l+4, + l+2, + l+1 (tt_maxsim_rowdot_portable's order,
 * bit for bit). OpenBLAS's sgemm with 4 columns spent a third of its time packing the
 * rows, and Debian 12's OpenBLAS runs its Prescott (SSE3) kernels on CPUs it does not
 * know: exhaustive search on 3584-d DiffRetriever-shape vectors spent 84% of its time
 * there (doc/benchmarks.md, *Small queries' MaxSim products without BLAS*). Qp is nqp *
 * dim, row-major (no transpose); any nrows (whole panels of 16 are the fast path). */
#define TT_MAXSIM_ROWDOT_MAX_NQP 12u
bool tt_maxsim_rowdot(uint32_t nqp);
void tt_maxsim_rowdot_portable(const float *Qp, uint32_t nqp, uint32_t dim, const float *R,
                               uint64_t nrows, float *QR);
#ifdef TT_AVX512
void tt_maxsim_rowdot_avx512(const float *Qp, uint32_t nqp, uint32_t dim, const float *R,
                             uint64_t nrows, float *QR);
#endif

/* MaxSim of a group of documents over decoded vectors (c + r, or the originals):
 *   score(d) = sum_{i < nq} max_j <q_i, v_j>
 * from one product V Qpᵀ over the group (`QR`: tt_maxsim_rows(nvec) * nqp scratch):
 * tt_maxsim_products_avx512 where Qt (Qp transposed) is given, which callers do where
 * tt_maxsim_own(nqp), else tt_maxsim_rowdot_avx512 where tt_maxsim_rowdot(nqp), else
 * one sgemm. Qp is nqp * dim (rows nq.. zero), R is nvec * dim
 * (rows of the group's documents in order) with room for tt_maxsim_rows(nvec) rows, the
 * ones past nvec finite (any values: zero them once when the buffer is made), doclens
 * ndocs lengths. nqp = tt_qpad(nq). */
void tt_maxsim_group(const float *Qp, const float *Qt, uint32_t nq, uint32_t nqp, uint32_t dim,
                     const float *R, const uint32_t *doclens, uint32_t ndocs, float *QR,
                     float *scores);

/* The same score with the centroid part apart, <q_i, c + r> = <q_i, c> + <q_i, r>
 * (PLAID stage 4 on indexes whose float centroids do not stay in cache): R holds the
 * decoded residuals r of the nvec rows, codes[j] row j's centroid and CS[c * cs_stride +
 * i] = <q_i, centroid c> for every code used (rows nq.. of it zero, or anything: they
 * are not summed; cs_stride >= nqp: one table for many queries, side by side). Equals
 * tt_maxsim_group over c + r up to float rounding. R NULL: QR already holds <q_i, r_j>
 * (tt_resdec_dot); R given: R and QR sized as for tt_maxsim_group. */
void tt_maxsim_group_split(const float *Qp, const float *Qt, uint32_t nq, uint32_t nqp,
                           uint32_t dim, const float *R, const uint32_t *doclens,
                           uint32_t ndocs, const uint32_t *codes, const float *CS,
                           uint64_t cs_stride, float *QR, float *scores);

/* The centroid part of the split: CS[codes[t] * nqp + i] = <q_i, centroid codes[t]> for
 * the n codes given (rows of dim values each; nqp a multiple of 4), read from the float16
 * rows `centroids16` where given (the index's copy), else from the float32 `centroids`.
 * With avx2 (where the CPU has AVX2, FMA and F16C) two rows at a time, the next two
 * prefetched, and float16 rows give the same floats as their float32 values; otherwise
 * one sgemv a row (float16: a row converted 256 positions at a time). The two agree up
 * to float rounding. */
void tt_centroid_dots(const float *Qp, uint32_t nqp, uint32_t dim, const float *centroids,
                      const uint16_t *centroids16, const uint32_t *codes, uint64_t n,
                      float *CS, bool avx2);

/* Scalar reference of the same score for one document (double accumulation), from
 * the packed residuals and the codec; used by the tests. */
double tt_maxsim_reference(const float *Q, uint32_t nq, uint32_t dim, const float *centroids,
                           const tt_codec *c, const uint32_t *codes, const uint8_t *packed,
                           uint32_t doclen);

/* x[i] += c[i] for i < nqp (a multiple of 4), as max_into. */
static inline void add_into(float *x, const float *c, uint32_t nqp) {
#ifdef TT_SSE2
    for (uint32_t i = 0; i < nqp; i += 4)
        _mm_storeu_ps(x + i, _mm_add_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(c + i)));
#else
    for (uint32_t i = 0; i < nqp; i++)
        x[i] += c[i];
#endif
}

/* m[i] = max(m[i], x[i]) for a row of nqp scores (nqp a multiple of 4). */
static inline void max_into(float *m, const float *x, uint32_t nqp) {
#ifdef TT_SSE2
    for (uint32_t i = 0; i < nqp; i += 4)
        _mm_storeu_ps(m + i, _mm_max_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(m + i)));
#else
    for (uint32_t i = 0; i < nqp; i++)
        m[i] = x[i] > m[i] ? x[i] : m[i];
#endif
}

#endif

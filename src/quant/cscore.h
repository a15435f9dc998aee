/* Centroid scores for PLAID's candidate stages from int8 centroids (src/quant/cscore.c).
 *
 * Stages 1-3 only rank centroids and documents by approximate scores, so they read
 * St[k, i] ~ <q_i, c_k> computed from int8 copies of the centroids and of the query
 * (one scale per vector): St = (float)(sum_d q8[i, d] * c8[k, d]) * (cscale[k] *
 * qscale[i]). The integer dot products are exact, so every int8 kernel (AVX-512 VNNI,
 * AVX2, SSE2 or the portable loop) returns bit-identical scores. Stage 4 and the
 * exhaustive mode do not use these scores: they score c + r in float32.
 *
 * Which kernel (tt_cq_best_kernel, measured in doc/benchmarks.md): the best int8 kernel
 * where there is a vector one (SSE2 is baseline on x86-64; without AVX2 it beats a
 * float32 sgemm except against OpenBLAS's AVX kernels at 128-d). Where there is none
 * (non-x86 builds), TT_CQ_F32:
 * St = C·Qᵀ by one float32 sgemm over the index's own float32 centroids, which the
 * portable int8 loop is 3-20x slower than. That path builds no int8 table (it keeps a
 * pointer to the caller's centroids) and its scores differ from the int8 ones by the
 * quantisation error (about 0.001-0.004 on unit vectors), so candidates, and rarely
 * final rankings, can differ between the two.
 *
 * Layout: centroids in blocks of 16; a block holds, for each group of four dimensions,
 * 16 x 4 bytes (centroid-major within the group), so that one 64-byte load gives 16
 * centroids' next four values and a 4-byte broadcast gives one centroid's. The query
 * is packed the same way in blocks of 16 query vectors, as unsigned bytes q8 + 128
 * (the VNNI instruction multiplies unsigned by signed bytes); the 128 * sum(c8) this
 * adds is subtracted per centroid. The VNNI and AVX2 kernels put the centroids in the
 * lanes for queries of at most 8 vectors (nqp <= 8: a 4-vector query would leave 12 of
 * 16 query lanes as padding) and the query vectors in the lanes above. */
#ifndef TT_CSCORE_H
#define TT_CSCORE_H

#include "common/common.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* The lanes of 16-wide block r that hold one of the first n values. */
static inline __mmask16 tt_lanes16(uint32_t n, uint32_t r) {
    return n <= 16 * r ? 0 : n - 16 * r >= 16 ? 0xffff : (__mmask16)((1u << (n - 16 * r)) - 1);
}
#endif

#define TT_CQ_LANES 16u

typedef struct tt_cq {
    uint32_t K, dim;
    const float *f32;      /* K x dim float32 centroids (the caller's, not owned) */
    uint32_t nd4;          /* groups of four dimensions: ceil(dim / 4) */
    uint32_t nblk;         /* blocks of 16 centroids: ceil(K / 16) */
    uint8_t *data;         /* nblk * nd4 * 64 bytes of int8 (zero padded) */
    float *scale;          /* nblk * 16: the value of one int8 step, per centroid */
    int32_t *csum;         /* nblk * 16: 128 * sum of a centroid's int8 values */
    float cmax;            /* centroid levels: +-127, fewer past 66,000 dimensions */
    int kernel;            /* TT_CQ_* kernel used by tt_cq_centroid_scores */
    float stepmax;         /* the largest int8 step of a row (0: TT_CQ_F32, no int8) */
    float c2max;           /* the largest squared norm of a row's float centroid: with
                            * stepmax, the bound of the scores' int8 rounding error */
    bool simd;             /* tt_cq_simd_ok(), asked once: queries quantized by AVX2 */
    /* Grouped tables (tt_cq_init_grouped, src/quant/cgroup.c): K counts rows, in order of
     * group, each group padded with zero rows to whole blocks; row r holds centroid
     * row_id[r] (UINT32_MAX: padding). Ungrouped: ngroups 0, row k is centroid k. */
    uint32_t ngroups;
    uint32_t ncent;        /* grouped: the centroids (K: their rows with the padding) */
    uint32_t *gblk;        /* ngroups + 1: each group's first block */
    uint32_t *row_id;      /* nblk * 16 */
    uint32_t max_gblk;     /* the largest group's blocks */
    struct tt_cq *centres; /* the groups' mean centroids, an ungrouped table of ngroups */
} tt_cq;

/* TT_CQ_F32 is not an int8 kernel (no table: data, scale and csum are NULL); the int8
 * kernels are ordered, and a test may lower q->kernel from one to a smaller one. */
enum { TT_CQ_F32 = -1, TT_CQ_PORTABLE = 0, TT_CQ_SSE2 = 1, TT_CQ_AVX2 = 2, TT_CQ_VNNI = 3 };

/* The fastest kernel this build and CPU have (see above). */
int tt_cq_best_kernel(void);
/* Whether this build and CPU can run kernel. */
bool tt_cq_kernel_ok(int kernel);

/* Prepares centroid scores over K x dim centroids with tt_cq_best_kernel(): quantizes
 * them (non-finite values count as 0), or for TT_CQ_F32 keeps the pointer, which must
 * stay valid until tt_cq_free. TT_ENOMEM. */
int tt_cq_init(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim);
/* The same with a given kernel, for tests and benchmarks: TT_EINVAL if
 * !tt_cq_kernel_ok(kernel). */
int tt_cq_init_kernel(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim, int kernel);
/* The same over nrows rows, row r holding centroid row_id[r] (UINT32_MAX: a zero row,
 * which scores 0); row_id NULL: nrows = K, row k is centroid k. Not for TT_CQ_F32
 * with row_id (TT_EINVAL). */
int tt_cq_init_rows(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim, int kernel,
                    uint32_t nrows, const uint32_t *row_id);
void tt_cq_free(tt_cq *q);
/* One row quantized as the tables' rows are: out[j] the int8 rounding of x[j] / *m * qmax
 * (clamped to +-127), *m set to the largest finite |x[j]|; non-finite values and an
 * all-zero row give 0. simd: the AVX2 loops (only where tt_cq_simd_ok()), else the
 * portable ones; the same bytes and *m either way. */
void tt_cq_quantize_row(const float *x, uint32_t n, float qmax, bool simd, int8_t *out,
                        float *m);
/* |x|^2 over the finite values of x; simd: an AVX2 loop (where tt_cq_simd_ok()), which
 * rounds differently from the portable one (for error bounds, not for scores). */
float tt_cq_sq_norm(const float *x, uint32_t n, bool simd);
/* Whether this build and CPU have tt_cq_quantize_row's AVX2 loops. */
bool tt_cq_simd_ok(void);
/* Memory held by q (0 for TT_CQ_F32: the centroids are the caller's). */
uint64_t tt_cq_bytes(const tt_cq *q);

/* St[k * nqp + i] ~ <Q_i, c_k> for every centroid k and i < nqp with q->kernel: Q holds
 * nqp rows of dim floats, rows nq.. zero (they score 0); qpack and qscale are scratch
 * (tt_cq_qpack_bytes, 64-byte aligned; nqp floats). Ungrouped tables (on a grouped one,
 * St is in row order: tt_cq_group_scores). */
void tt_cq_centroid_scores(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp,
                           uint8_t *qpack, float *qscale, float *St);
/* What tt_cq_centroid_scores_top1 keeps besides St: each column's best score
 * (best[i] = max over k of St[k * nqp + i], nqp entries) and its lowest row (arg), and,
 * with reach (K entries; NULL: not wanted), whether row k reaches thr in one of the
 * first nq columns (reach[k] = max over i < nq of St[k * nqp + i] >= thr). */
typedef struct tt_cq_top1 {
    float *best;
    uint32_t *arg;
    uint8_t *reach;
    float thr;
} tt_cq_top1;
/* tt_cq_centroid_scores and *top, which the VNNI kernels keep as they write St (for
 * PLAID's stage 1: no pass over St for it). Returns false, with *top's arrays
 * unspecified, where the kernel does not keep them (the caller scans St then). */
bool tt_cq_centroid_scores_top1(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp,
                                uint8_t *qpack, float *qscale, float *St,
                                const tt_cq_top1 *top);

/* Two-level centroid scores (src/quant/cgroup.c; doc/search.md, "Centroid groups").
 * The centroids are grouped by a k-means of the centroids themselves; a query vector's
 * score of a group's mean centroid stands for its members' until the group is among
 * the vector's best: then its members are scored. Stage 1 then reads the int8 rows of
 * a few groups instead of the whole table (29 MiB at 8192 x 3584-d).
 *
 * The groups of K centroids (group_of[k] < *ngroups, every group non-empty, numbered
 * by their first member): a k-means of the centroids into max(16, K / TT_CQ_GROUP_SIZE)
 * groups, trained on at most TT_CQ_GROUP_SAMPLE of them (every centroid assigned to its
 * nearest centre). Deterministic for a seed and any thread count. TT_EINVAL for fewer
 * than TT_CQ_GROUP_MIN_K centroids, TT_ENOMEM. */
#define TT_CQ_GROUP_SIZE 64u
#define TT_CQ_GROUP_MIN_K 1024u
#define TT_CQ_GROUP_SAMPLE 65536u
int tt_cq_train_groups(const float *centroids, uint32_t K, uint32_t dim, uint64_t seed,
                       int threads, uint32_t *group_of, uint32_t *ngroups);
/* A grouped table (see tt_cq) of K centroids with group_of[k] < ngroups (every group
 * non-empty), and the table of the groups' mean centroids. For TT_CQ_F32, or ngroups
 * 0, an ungrouped table (tt_cq_init_kernel). TT_EINVAL (a group id out of range or a
 * group without members), TT_ENOMEM. */
int tt_cq_init_grouped(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim, int kernel,
                       const uint32_t *group_of, uint32_t ngroups);
/* Scratch bytes of tt_cq_group_scores for queries of up to nqp vectors. */
size_t tt_cq_group_work_bytes(const tt_cq *q, uint32_t nqp);
/* St[k * nqp + i] for every centroid k (as tt_cq_centroid_scores) on any table. On a
 * grouped one with 0 < probe < ngroups: the groups among the `probe` best of some query
 * vector i < nq by their mean centroid's score get their members' own scores (the same
 * bits as an ungrouped table's), every other centroid its group's score (imputed).
 * probe 0 (or >= ngroups), and any ungrouped table: every centroid's own. work:
 * tt_cq_group_work_bytes, 64-byte aligned. Returns the centroids given their own score. */
uint32_t tt_cq_group_scores(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp,
                            uint32_t probe, uint8_t *qpack, float *qscale, void *work,
                            float *St);

/* The int8 steps of tt_cq_centroid_scores (not for TT_CQ_F32). */

/* Bytes of a packed query of nq vectors (a multiple of 64). */
size_t tt_cq_qpack_bytes(const tt_cq *q, uint32_t nq);
/* Packs nq query vectors (dim floats each) into qpack (tt_cq_qpack_bytes, 64-byte
 * aligned) and their scales into qscale (nqp = tt_qpad(nq) floats; rows nq.. are
 * padding that scores 0). */
void tt_cq_query(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp, uint8_t *qpack,
                 float *qscale);
/* St[k * nqp + i] for every centroid k and i < nqp, nqp a multiple of 4, with the int8
 * kernel q->kernel (which a test may lower to compare the kernels). */
void tt_cq_scores(const tt_cq *q, const uint8_t *qpack, const float *qscale, uint32_t nqp,
                  float *St);
/* The same with the portable loop (the tests compare the two). */
void tt_cq_scores_portable(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                           uint32_t nqp, float *St);

/* Row-major int8 centroids (src/quant/crows.c), for scoring a list of centroids against
 * a short query where reading float rows would cost more: stage 4's lookup-table pass at
 * 512 dimensions and more (src/search/score.c), whose ~2,000 distinct 3584-d centroids a
 * query were 16% of its time as float16 rows. Row k holds centroid k rounded to int8 on
 * its own step (the largest |value| over 127), in `stride` bytes (dim padded with zeros
 * to 32), except the head dimensions (crows.c: at most TT_CROWS_HEAD_MAX whose largest
 * value is TT_CROWS_HEAD_RATIO times the median dimension's, as LLM hidden states'
 * massive activations), which are 0 in the rows and kept as floats in hval.
 * tt_crows_dots gives St[code * nqp + i] = (float)(exact integer dot of the rows) *
 * (qscale[i] * scale[code]) + the head dimensions' float products in dimension order:
 * the AVX2 kernel and the portable loop the same floats. Its error against <q, c> is that
 * of two int8 roundings: variance at most (|q|^2 stepmax^2 + qstep^2 c2max) / 12 over the
 * other dimensions (tt_crows_query's qvar). */
#define TT_CROWS_MIN_DIM 512u /* stage 4 splits <q, c + r> from 512 dimensions on */
#define TT_CROWS_HEAD_MAX 16u
#define TT_CROWS_HEAD_RATIO 8.0f
typedef struct tt_crows {
    uint32_t K, dim, stride;
    int8_t *data;   /* K * stride, 64-byte aligned */
    float *scale;   /* K: each row's int8 step */
    float stepmax;  /* the largest step */
    float c2max;    /* the largest squared norm of a centroid without its head dimensions */
    uint32_t nhead; /* head dimensions, ascending */
    uint32_t head[TT_CROWS_HEAD_MAX];
    float *hval;    /* K * nhead: their values */
} tt_crows;
/* TT_ENOMEM (r zeroed). Non-finite values count as 0. */
int tt_crows_init(tt_crows *r, const float *centroids, uint32_t K, uint32_t dim);
void tt_crows_free(tt_crows *r);
uint64_t tt_crows_bytes(const tt_crows *r);
/* nqp query rows Q (dim floats each) without the head dimensions as int8 rows of
 * `stride` bytes (q8), their absolute values (qa), steps (qscale) and the variance bound
 * of each row's int8 error (qvar); q8 and qa 32-byte aligned, nqp * stride bytes each.
 * TT_ENOMEM. */
int tt_crows_query(const tt_crows *r, const float *Q, uint32_t nqp, int8_t *q8, int8_t *qa,
                   float *qscale, float *qvar);
/* CS[codes[t] * nqp + i] for t < n, i < nqp, from the rows tt_crows_query made of Q: with
 * avx2 (where tt_cq_simd_ok(); nqp a multiple of 4) two rows against four query rows at
 * a time, the next rows prefetched; otherwise the portable loop. */
void tt_crows_dots(const tt_crows *r, const float *Q, const int8_t *q8, const int8_t *qa,
                   const float *qscale, uint32_t nqp, const uint32_t *codes, uint64_t n,
                   float *CS, bool avx2);
#endif

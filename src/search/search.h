/* Search internals: the per-thread search context and the parts of one search, split
 * by concern over src/search/ (context.c, plaid.c, score.c, scan.c, scan_batch.c, search.c,
 * batch.c).
 * The kernels below them have their own headers (decode.h, maxsim.h; io/fetch.h,
 * quant/cscore.h). */
#ifndef TT_SEARCH_H
#define TT_SEARCH_H

#include "index/index.h"
#include "io/fetch.h"
#include "search/decode.h"
#include "search/maxsim.h"

/* Floats of decoded rows per MaxSim group (1 MiB: stays in L2 between the decode and
 * the sgemm that reads it). */
#define GROUP_FLOATS (1u << 18)
/* Decoded rows per MaxSim group: GROUP_FLOATS of them, or the longest document. The
 * groups, hence the float rounding of their sgemm, follow from it (score.c). */
static inline uint64_t tt_group_rows(const tt_index *idx) {
    return TT_MAX((uint64_t)idx->max_doclen, GROUP_FLOATS / TT_MAX(idx->dim, 1u));
}

struct tt_search_ctx {
    const tt_index *idx;
    tt_fetcher *fetch;
    tt_resdec dec;
    /* Per query (sized for nqp_cap padded query vectors). */
    uint32_t nqp_cap;
    uint32_t nq, nqp;      /* the current query: vectors and padded row stride */
    float scale;           /* 1 (sum) or 1/nq (mean) */
    float *Qp;             /* nqp_cap * dim: the query, zero-padded */
    float *Qt;             /* dim * nqp: Qp transposed where tt_maxsim_own(nqp), else NULL
                            * (the MaxSim products then by sgemm) */
    float *Qt_buf;         /* nqp_cap * dim: Qt's room */
    uint8_t *qpack;        /* the query in int8 (tt_cq_query) */
    float *qscale;         /* nqp_cap int8 scales */
    void *cgwork;          /* tt_cq_group_work_bytes of the index's table (cgwork_cap) */
    size_t cgwork_cap;
    uint32_t cgroups;      /* the current query's centroid_groups (0: every centroid) */
    float *St;             /* num_centroids * nqp_cap: int8 centroid scores, centroid-major */
    bool st_every;         /* every centroid has its own score in St (no group's) */
    bool st_top1;          /* probe_s / probe hold each query vector's best centroid
                            * (tt_ctx_centroid_scores with top1) */
    bool st_keep;          /* and keep[] the centroids reaching its threshold */
    float *m;              /* 2 * nqp_cap: running maxima, and a row's scratch */
    float *probe_s;        /* nq * nprobe best centroid scores of stage 1 */
    uint32_t *probe;
    size_t probe_cap, probe_s_cap;
    /* Per index. */
    uint8_t *keep;         /* num_centroids: survives stage-2 pruning */
    uint8_t *cell_seen;    /* num_centroids: probed in stage 1 (all zero between calls) */
    uint32_t *cells;       /* the distinct probed centroids */
    uint64_t *bits;        /* candidate bitmap, num_docs bits, all zero between queries */
    uint64_t *cand;        /* candidate documents, ascending */
    size_t cand_cap;
    uint64_t *list;        /* documents passed between stages */
    size_t list_cap;
    tt_hit *s3;            /* stage-3 survivors and scores, best first (adaptive stage 4) */
    tt_hit *batch;         /* one stage-4 batch of them, in document order */
    size_t s3_cap, batch_cap;
    float *rec;            /* with rec_on: the scores tt_score_flush pushes, in order */
    size_t rec_n, rec_cap;
    bool rec_on;
    tt_topk top;
    uint64_t *roff, *rlen; /* residual ranges of stage 4 / a scan chunk */
    const uint8_t **rptr;
    size_t r_cap;
    uint64_t rows_cap;     /* decoded rows per MaxSim group */
    float *R;              /* rows_cap * dim */
    float *QR;             /* rows_cap * nqp_cap */
    uint32_t *gcodes;      /* rows_cap: a document's codes (split: a group's new ones) */
    uint32_t *glens;       /* rows_cap (a group holds at most rows_cap documents) */
    uint64_t *gdocs;
    float *gscores;
    /* Stage 4 split (score.c): <q, c + r> scored as <q, c> + <q, r> for few query
     * vectors on high-dimensional vectors, so that each centroid row a query's
     * candidates use is read once per query instead of once per vector, and <q, r>
     * comes from the packed bytes: cfs[code * nqp + i] = <q_i, centroid code>, valid
     * where cfs_seen[code] == cfs_query; rcodes holds the group's rows' codes.
     * split_mode: TT_SPLIT_AUTO, _ON or _OFF (tests, benchmarks). */
    int split_mode;
    bool split;            /* the group being decoded is split */
    bool split_dot;        /* and its <q, r> come from tt_resdec_dot, not an sgemm */
    float *cfs;            /* num_centroids * cfs_nqp, allocated at the first split */
    uint32_t cfs_nqp;
    uint32_t *cfs_seen;    /* num_centroids */
    uint32_t cfs_query;    /* the current query's stamp */
    uint32_t *rcodes;      /* rows_cap */
    /* Stage 4 through residual lookup tables (score.c, rlut.c): where the CPU has AVX2
     * and the codec has whole bytes of 1-2-bit codes, every document is first ranked
     * by an approximate <q, c + r> (<q, r> from the tables; lut_pass: tt_score_flush
     * stores the scores in ascore instead of pushing them), then scored exactly, best
     * first, while it can still enter the top k. lut_off: never (tests, benchmarks). */
    tt_reslut lut;
    bool lut_off, lut_pass;
    bool lut_plain;        /* without the split: <q, C[c]> from stage 1's St (every
                            * centroid scored: no groups), the exact pass unsplit */
    bool rows_off;         /* never lut_rows (tests, benchmarks) */
    bool lut_rows;         /* with the split: the lookup pass's <q, C[c]> from the
                            * index's int8 rows (cfa), the exact pass's from cfs */
    float *cfa;            /* num_centroids * cfa_nqp: int8-row centroid scores, valid
                            * where cfa_seen[code] == cfs_query */
    uint32_t cfa_nqp;
    uint32_t *cfa_seen;    /* num_centroids */
    int8_t *rq8, *rqa;     /* the query's int8 rows for tt_crows_dots (nqp x stride) */
    float *rqs;            /* and their steps (nqp), then their error variances (nqp) */
    uint32_t rq_nqp;       /* rows rq8, rqa, rqs have room for */
    uint32_t lut_query;    /* the cfs_query stamp the tables are for (0: none) */
    float lut_margin;      /* and the query's rescoring margin (score.c, lut_margin) */
    float *ascore;         /* approximate scores of the documents of one tt_score_docs */
    tt_hit *aorder;        /* (position, approximate score), best first */
    size_t ascore_n, ascore_cap, aorder_cap;
    uint32_t gn;           /* documents in the group being decoded into R */
    uint64_t grows;        /* and their rows */
    int avx512;            /* the AVX-512 row loops are used */
    int rows4;             /* the 128-bit row loops for 4-vector queries (SSE2) are used */
    /* The residual sketch's lookup table for the current query, or NULL (not used):
     * slut[(p * 256 + byte) * nqp + i] = q_i[p] * weight(p, byte), p < sketch_bytes. */
    float *slut;
    size_t slut_cap;
    bool use_sketch;

    /* The current query's filter (NULL: none), its allowed live documents, and whether
     * PLAID scores them directly instead of reaching them through the IVF. */
    const tt_filter *filter;
    uint64_t allowed;
    bool direct;
    tt_search_stats st;
};

/* Switches the vector row loops of the centroid stages on (the AVX-512 ones where the
 * CPU has AVX-512, and the 128-bit ones of stages 2-3 for 4-vector queries on every
 * x86-64 CPU) or off (the general SSE2 / scalar loops); returns whether the AVX-512 ones
 * were on. For the tests and benchmarks, which compare the two. */
int tt_search_ctx_use_avx512(tt_search_ctx *ctx, int on);

/* Stage 4's centroid split: chosen per query by the index's shape (auto, the
 * default), always, or never; returns the mode it replaces. For the tests and
 * benchmarks, which compare the two. */
enum { TT_SPLIT_AUTO = 0, TT_SPLIT_ON = 1, TT_SPLIT_OFF = 2 };
int tt_search_ctx_use_split(tt_search_ctx *ctx, int mode);
/* Stage 4's lookup-table ranking (on by default where it applies); returns whether it
 * was on. For the tests and benchmarks. */
bool tt_search_ctx_use_lut(tt_search_ctx *ctx, bool on);
/* Whether the lookup pass of a split stage 4 takes <q, C[c]> from the index's int8
 * rows (default, where the index has them) or from the float rows; returns the
 * previous setting. */
bool tt_search_ctx_use_crows(tt_search_ctx *ctx, bool on);

/* TT_EINVAL for options no resolve can make sense of: a struct_size of another
 * version, a negative nprobe, an infinite threshold. NULL is fine (the defaults). */
int tt_search_options_check(const tt_search_options *opt);

/* The relative pruning rule's default prune_ratio (doc/search.md, "Pruning"). */
#define TT_PRUNE_RATIO_DEFAULT 0.5f
/* The adaptive stage-4 depth's default margin, in standard deviations (doc/search.md,
 * "Stage-4 depth"). */
#define TT_RERANK_MARGIN_DEFAULT 1.0f

/* PLAID defaults by k (ColBERTv2): k <= 10: nprobe 1, threshold 0.5, ndocs 256;
 * k <= 100: 2, 0.45, 1024; larger: 4, 0.4, max(4k, 4096). */
void tt_search_defaults_for_k(uint32_t k, int *nprobe, float *threshold, uint32_t *ndocs);

/* ----------------------------------------------------- the parts of a search */

/* context.c: takes the query (copied zero-padded to nqp rows, per-query buffers sized)
 * and computes St ~ C.Q^T from the int8 centroids (of the c->cgroups best groups per
 * query vector on an index with centroid groups; TT_ENOMEM for its scratch). With top1
 * (probe_s and probe of nqp entries or more), each query vector's best centroid and its
 * score too where the kernel keeps them as it scores (every centroid scored): then
 * c->st_top1; with thr as well, keep[k] = some query vector scores centroid k at *thr
 * or more: then c->st_keep. */
int tt_ctx_set_query(tt_search_ctx *c, const float *Q, uint32_t nq, int score);
int tt_ctx_centroid_scores(tt_search_ctx *c, bool top1, const float *thr);

/* search.c: whether live row d may be returned (the filter's, when there is one). */
static inline bool tt_ctx_allowed(const tt_search_ctx *c, uint64_t d) {
    return !c->filter || tt_filter_bit(c->filter, d);
}
/* The allowed live documents (every live one without a filter), ascending, into c->cand
 * (c->allowed of them). */
int tt_ctx_allowed_list(tt_search_ctx *c);

/* plaid.c: PLAID stage 1 (candidates into c->cand, their count in *ncand, and the
 * pruning mask c->keep by the resolved options o: nprobe, pruning with threshold or
 * prune_ratio, ndocs) and stages 2-3 (centroid interaction of docs[0..n), pruned by
 * keep if not NULL, into c->top). */
int tt_plaid_stage1(tt_search_ctx *c, const tt_search_options *o, size_t *ncand);
void tt_plaid_interaction(tt_search_ctx *c, const uint64_t *docs, size_t n,
                          const uint8_t *keep);

/* score.c: MaxSim in groups. Documents join the group being decoded (tt_score_slot
 * gives the rows for one, scoring the group first when it is full) and tt_score_flush
 * scores what is left; scores go into c->top. A group spans fetches and segments, so
 * the groups, hence the float rounding of their sgemm, depend only on the sequence of
 * documents scored (and rows_cap: while no document is longer than GROUP_FLOATS/dim
 * rows): a document scores the same in a compacted index as in the segments it came
 * from. tt_score_packed decodes n documents whose packed residuals
 * are at ptr[t] into the group (not flushed: ptr need only live until it returns);
 * tt_score_fetch reads the packed residuals of docs[0..n) into c->rptr (valid until the
 * next fetch); tt_score_docs fetches, decodes and scores them, flushed (PLAID stage 4). */
float *tt_score_slot(tt_search_ctx *c, uint64_t doc, uint32_t len);
void tt_score_flush(tt_search_ctx *c);
void tt_score_packed(tt_search_ctx *c, const uint64_t *docs, size_t n,
                     const uint8_t *const *ptr);
int tt_score_fetch(tt_search_ctx *c, const uint64_t *docs, size_t n);
int tt_score_docs(tt_search_ctx *c, const uint64_t *docs, size_t n);
int tt_score_reserve_ranges(tt_search_ctx *c, size_t n);
/* n packed vectors decoded with their centroids codes[v] added (c + r) into out: from
 * the float16 centroids where the index has them, else the float32 ones (the same
 * floats either way); v0: the first vector's row (for its residual scale, debias 2). */
void tt_score_decode_add(const tt_search_ctx *c, const uint8_t *packed, uint64_t n,
                         const uint32_t *codes, uint64_t v0, float *out);
/* The products out[j * nqp + i] = <q_i, r_j> of the unscaled residuals of n packed
 * vectors of rows v0.. turned into those of the scaled residuals (debias 2,
 * idx->vscale): the 8-bit positions' part as it is, the rest times the vector's scale. */
void tt_score_vscale_products(const tt_index *idx, const float *Qp, uint32_t nqp,
                              const uint8_t *packed, uint64_t v0, uint64_t n, float *out);
/* Whether an exhaustive scan scores <q, c + r> as <q, c> + <q, r> for a query of nqp
 * padded rows (the split of stage 4): at 512 dimensions and more, where the decoder
 * can give <q, r> from the packed bytes and, bit for bit, from decoded rows
 * (tt_resdec_dot_rows: the one-pass batch of scan_batch.c scores each query as a scan
 * of it alone). tt_score_scan_begin sets the current query's scan up for it (or not). */
bool tt_scan_splits(const tt_index *idx, const tt_resdec *d, uint32_t nqp);
int tt_score_scan_begin(tt_search_ctx *c);
/* The decompressed vectors c + r of document doc (doclens[doc] * dim floats, in the
 * codec's position order) into out; for calibration's pseudo-queries (src/tune/). */
int tt_score_doc_vectors(tt_search_ctx *c, uint64_t doc, float *out);

/* search.c: every query of a batch (query q: qlens[q] vectors at Q + qoffs[q] * dim)
 * has vectors (TT_EINVAL) and finite values (TT_EVALUE), the error naming who, the
 * query and the vector. */
int tt_queries_valid(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                     const uint32_t *qlens, uint64_t nq, const char *who);

/* scan.c: the reference modes over every document: decompressed (exhaustive) and
 * float16 originals (exact). */
int tt_scan_decompressed(tt_search_ctx *c);
int tt_scan_exact(tt_search_ctx *c);
/* scan.c: the float16 originals of live row d (in segment s) as floats into dst
 * (doclens[d] * dim); TT_ECORRUPT naming the file when one is not finite. */
int tt_original_rows(const tt_index *idx, uint32_t s, uint64_t d, float *dst);
/* scan_batch.c: the search of nq queries (query q: qlens[q] vectors at Q + qoffs[q] *
 * dim, checked by the caller) in a reference mode (TT_MODE_EXHAUSTIVE or _EXACT) in one
 * pass over the live documents (those filter allows, when it is not NULL: one filter for
 * every query) on `threads` threads (one pass per as many queries as 64 MiB of
 * per-thread tops and query copies hold), each document decoded or converted once: the
 * top k of query q into hits + q * k and their count into nhits[q], the same hits and
 * scores as tt_search in that mode with that score reduction (TT_SCORE_*) and filter.
 * Stops with TT_ECANCELED when *cancel (may be NULL) becomes non-zero. */
int tt_scan_batch(const tt_index *idx, const tt_filter *filter, const float *Q,
                  const uint64_t *qoffs, const uint32_t *qlens, uint64_t nq, uint32_t k,
                  int mode, int score, int threads, const volatile int *cancel, tt_hit *hits,
                  uint32_t *nhits);

/* sparse_search.c: sparse options checked (struct_size of this library or its first
 * version, k1, b: TT_EINVAL), and copied at this library's size. */
int tt_sparse_options_check(const tt_sparse_options *o);
void tt_sparse_options_copy(const tt_sparse_options *in, tt_sparse_options *out);
/* sparse_search.c: the options of a hybrid batch (sopt must not be NULL; dopt may be):
 * checked (dopt only when dense), copied at this library's size into dso and so, both
 * with the one filter of the two retrievers (the dense options', else the sparse
 * options'; two different ones: TT_EINVAL naming who). */
int tt_hybrid_options(const char *who, bool dense, const tt_search_options *dopt,
                      const tt_sparse_options *sopt, tt_search_options *dso,
                      tt_sparse_options *so);
/* sparse_search.c: the sparse search of a shard of a sharded index with the whole
 * collection's BM25 statistics (shard/hybrid.c): N live documents, avgdl, and per query
 * term its live document frequency over every shard (tt_sparse_query_df of each shard,
 * summed; a query of n terms, df[n]). */
typedef struct tt_sparse_global {
    uint64_t N;
    double avgdl;
    const uint64_t *df;
} tt_sparse_global;
/* The live document frequency in idx of each term of query qi of q (0 for every term
 * of weighted postings), into df (one per query term). */
int tt_sparse_query_df(const tt_index *idx, const tt_sparse_set *q, uint64_t qi, uint64_t *df);
/* tt_sparse_search with g's statistics (NULL: idx's own), and (scores, may be NULL)
 * each hit's score as a double. */
int tt_sparse_search_global(const tt_index *idx, const tt_sparse_set *q, uint64_t qi,
                            uint32_t k, const tt_sparse_options *opt,
                            const tt_sparse_global *g, tt_hit *hits, double *scores,
                            uint32_t *nhits);

#endif

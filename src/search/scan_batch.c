/* The reference modes for many queries in one pass over the index: each document's
 * residuals are read and decoded (exhaustive) or its float16 originals converted
 * (exact) once and scored against every query, instead of once per query. The
 * calibration's reference (src/tune/) is this: decoding was most of a per-query scan's
 * time (a 3584-d document is 57,344 values to decode for 4 query vectors).
 *
 * The results are those of tt_search in that mode, bit for bit: documents are grouped
 * exactly as its scans group them (score.c: consecutive live documents, allowed by the
 * filter if there is one, until the group's rows are full), each group is scored per
 * query by the same call with the same rows (or, for a query whose scan splits
 * <q, c + r>, tt_resdec_dot_rows gives its <q, r> as tt_resdec_dot gives them a scan
 * of it alone, from residuals decoded once for all the queries, and its centroid scores
 * are tt_centroid_dots' computed before the pass), and the top k of every query is kept
 * under the same total order (higher score, then lower document), so splitting the
 * documents over threads and merging their tops changes nothing. */
#include "common/first_err.h"
#include "search/search.h"

#include <stdatomic.h>
#include <stdlib.h>

/* Residual bytes per unit of work (whole groups): enough for long sequential reads,
 * small enough to balance the threads. */
#define UNIT_BYTES (2u << 20)

typedef struct scan_job {
    const tt_index *idx;
    const tt_filter *filter;  /* NULL, or the allowed rows (all the queries') */
    const float *Qall;        /* every query's padded rows, in order */
    const float *Qtall;       /* each query's rows transposed (dim * its padded rows, at
                               * col0 * dim) where tt_maxsim_own: the product
                               * tt_ctx_set_query's Qt gives a search */
    const uint64_t *col0;     /* nq + 1: query q's first row in Qall */
    const uint32_t *qlens;
    const float *scale;       /* nq: 1 or 1/qlens[q] */
    float **CS;               /* nq: the query's centroid scores where its scan splits
                               * (tt_scan_splits; code c's at CS[q][c * cs_stride]), else
                               * NULL: columns of one table, a code's row for every query
                               * side by side (one row per scored vector, not one per
                               * vector and query, comes from memory) */
    float *CSall;             /* K x cs_stride */
    uint64_t cs_stride;
    float **Qs;               /* nq: the same queries' rows as tt_resdec_dot_rows takes
                               * them (stride, shift), else NULL */
    uint32_t stride, shift;   /* tt_resdec_rows_layout */
    bool whole, split;        /* some query scores c + r rows; some splits */
    bool exact;               /* the float16 originals, not the decoded residuals */
    uint64_t nq;
    uint32_t k;
    const uint64_t *unit;     /* nunit + 1: first row of each unit (a group's first) */
    size_t nunit;
    uint64_t rows_cap;
    tt_search_ctx **ctx;      /* per thread */
    float **QR;               /* per thread: rows_cap * the widest query's padded rows */
    float **Rr;               /* per thread, where some query splits: the group's residual
                               * rows without centroids (rows_cap x stride, at shift) */
    float **Lr;               /* per thread, the same where tt_resdec_rows_lanes: their
                               * copy by lanes (tt_resdec_to_lanes; each document's at its
                               * first row's place, without the shift) */
    const uint8_t ***gptr;    /* per thread, the same: each group document's packed bytes */
    tt_topk *top;             /* per thread, nq each */
    atomic_uint_fast64_t next;
    tt_first_err err;
    const volatile int *cancel;
} scan_job;

/* The split scores of the group in c against query q (nqp padded rows at Qq), as a
 * scan of q alone gives them (score.c with c->split_dot): <q, r> of each document's
 * rows (tt_resdec_dot_rows: tt_resdec_dot's sums, from the rows decoded once for every
 * query), scaled, then each row's centroid scores added in tt_maxsim_group_split. */
static void group_split(scan_job *j, tt_search_ctx *c, int t, uint64_t q, const float *Qq,
                        uint32_t nqp, float *QR) {
    const tt_index *idx = j->idx;
    uint64_t r0 = 0;
    for (uint32_t g = 0; g < c->gn; g++) {
        const uint32_t len = c->glens[g];
        tt_resdec_dot_rows(&c->dec, j->Rr[t] + r0 * j->stride + j->shift,
                           j->Lr[t] ? j->Lr[t] + r0 * j->stride : NULL, j->stride,
                           j->gptr[t][g], len, j->Qs[q] + j->shift, nqp, QR + r0 * nqp);
        if (idx->vscale)
            tt_score_vscale_products(idx, Qq, nqp, j->gptr[t][g], idx->doc_vec0[c->gdocs[g]],
                                     len, QR + r0 * nqp);
        r0 += len;
    }
    tt_maxsim_group_split(Qq, NULL, j->qlens[q], nqp, idx->dim, NULL, c->glens, c->gn, c->rcodes,
                          j->CS[q], j->cs_stride, QR, c->gscores);
}

/* Scores the group decoded in c (c->gn documents of c->glens rows in c->R) against
 * every query into the thread's tops: one tt_maxsim_group per query, the very call a
 * search of that query alone makes on this group, or group_split. (One sgemm over all
 * the queries' columns would multiply faster, but OpenBLAS picks its kernel by the
 * shape, and at 3584-d a 4-vector query's product takes a path that rounds
 * differently: 5,468 of 6,400 top-100 scores differed in the last bits.) */
static void group_flush(scan_job *j, tt_search_ctx *c, int t, float *QR, tt_topk *top) {
    const uint32_t dim = j->idx->dim;
    if (c->gn == 0)
        return;
    for (uint64_t q = 0; q < j->nq; q++) {
        const uint32_t nqp = (uint32_t)(j->col0[q + 1] - j->col0[q]);
        if (j->CS[q])
            group_split(j, c, t, q, j->Qall + j->col0[q] * dim, nqp, QR);
        else
            tt_maxsim_group(j->Qall + j->col0[q] * dim,
                            tt_maxsim_own(nqp) ? j->Qtall + j->col0[q] * dim : NULL,
                            j->qlens[q], nqp, dim, c->R, c->glens, c->gn, QR, c->gscores);
        for (uint32_t d = 0; d < c->gn; d++)
            tt_topk_push(&top[q], c->gdocs[d], c->gscores[d] * j->scale[q]);
    }
    c->gn = 0;
    c->grows = 0;
}

/* Whether row d is scored: live, and allowed by the filter if there is one. */
static inline bool scanned(const tt_index *idx, const tt_filter *f, uint64_t d) {
    return !tt_index_deleted(idx, d) && (!f || tt_filter_bit(f, d));
}

/* Reads, decodes (or converts the originals of) and scores the rows [r0, r1) (whole
 * groups). */
static int scan_unit(scan_job *j, tt_search_ctx *c, int t, float *QR, tt_topk *top,
                     uint64_t r0, uint64_t r1) {
    const tt_index *idx = j->idx;
    const uint64_t rb = idx->res_bytes;
    int st;
    /* The residuals (exhaustive): one range per segment the unit touches (rows are
     * contiguous within a segment's residual file, deleted ones included); c->list
     * holds each range's first row. */
    size_t nr = 0;
    if (!j->exact) {
        if ((st = tt_score_reserve_ranges(c, idx->nseg)) ||
            (st = tt_grow((void **)&c->list, &c->list_cap, idx->nseg, sizeof *c->list,
                          "scan ranges")))
            return st;
        for (uint32_t s = 0; s < idx->nseg; s++) {
            const uint64_t a = TT_MAX(r0, idx->seg[s].doc0);
            const uint64_t b = TT_MIN(r1, idx->seg[s].doc0 + idx->seg[s].num_docs);
            if (a >= b)
                continue;
            c->roff[nr] = idx->doc_vec0[a] * rb;
            c->rlen[nr] = (idx->doc_vec0[b] - idx->doc_vec0[a]) * rb;
            c->list[nr++] = a;
        }
        if (nr && (st = tt_fetcher_read(c->fetch, nr, c->roff, c->rlen, c->rptr)))
            return st;
    }
    const uint64_t *first = c->list;
    const uint8_t *const *base = c->rptr;
    size_t r = 0;
    uint32_t s = tt_index_segment_of(idx, r0);
    c->gn = 0;
    c->grows = 0;
    for (uint64_t d = r0; d < r1; d++) {
        while (r + 1 < nr && d >= first[r + 1])
            r++;
        while (s + 1 < idx->nseg && d >= idx->seg[s + 1].doc0)
            s++;
        if (!scanned(idx, j->filter, d))
            continue;
        const uint32_t len = idx->doclens[d];
        if (c->grows + len > j->rows_cap)
            group_flush(j, c, t, QR, top);
        float *dst = c->R + c->grows * idx->dim;
        const uint64_t v0 = idx->doc_vec0[d];
        if (j->exact) {
            if ((st = tt_original_rows(idx, s, d, dst)))
                return st;
        } else {
            const uint8_t *packed = base[r] + (v0 - idx->doc_vec0[first[r]]) * rb;
            for (uint32_t v = 0; v < len; v++)
                c->gcodes[v] = tt_index_code(idx, v0 + v);
            if (j->whole)
                tt_score_decode_add(c, packed, len, c->gcodes, v0, dst);
            if (j->split) {
                memcpy(c->rcodes + c->grows, c->gcodes, len * sizeof *c->rcodes);
                j->gptr[t][c->gn] = packed;
                float *rows = j->Rr[t] + c->grows * j->stride + j->shift;
                for (uint32_t v = 0; v < len; v++)
                    tt_resdec_decode(&c->dec, packed + v * rb, 1, rows + v * j->stride);
                if (j->Lr[t])
                    tt_resdec_to_lanes(&c->dec, rows, j->stride, len,
                                       j->Lr[t] + c->grows * j->stride);
            }
        }
        c->glens[c->gn] = len;
        c->gdocs[c->gn] = d;
        c->gn++;
        c->grows += len;
    }
    group_flush(j, c, t, QR, top);
    return TT_OK;
}

static void scan_worker(void *arg, int t, int nthreads) {
    (void)nthreads;
    scan_job *j = arg;
    tt_topk *top = j->top + (uint64_t)t * j->nq;
    while (!tt_first_err_failed(&j->err)) {
        uint64_t u = atomic_fetch_add(&j->next, 1);
        if (u >= j->nunit)
            break;
        int st = j->cancel && *j->cancel
                     ? tt_err(TT_ECANCELED, "%s: exhaustive scan cancelled", j->idx->dir)
                     : scan_unit(j, j->ctx[t], t, j->QR[t], top, j->unit[u], j->unit[u + 1]);
        if (st) {
            tt_first_err_set(&j->err, st, UINT64_MAX);
            break;
        }
    }
}

/* The units: the scan's groups (consecutive scanned rows while their vectors fit
 * rows_cap, as tt_score_slot forms them), cut after a group once a unit holds
 * UNIT_BYTES of residuals, or an eighth of a thread's share of them on a small index.
 * unit[nunit] = num_docs. */
static int make_units(const tt_index *idx, const tt_filter *f, uint64_t rows_cap, int threads,
                      uint64_t **unit, size_t *nunit) {
    size_t cap = 0, n = 0;
    uint64_t *u = NULL, rows = 0, start = 0, bytes = 0, live = 0;
    int st;
    for (uint64_t d = 0; d < idx->num_docs; d++)
        if (scanned(idx, f, d))
            live += (uint64_t)idx->doclens[d] * idx->res_bytes;
    const uint64_t unit_bytes = TT_MIN((uint64_t)UNIT_BYTES, live / (8 * (uint64_t)threads));
    for (uint64_t d = 0; d <= idx->num_docs; d++) {
        const bool end = d == idx->num_docs;
        const uint32_t len = end || !scanned(idx, f, d) ? 0 : idx->doclens[d];
        /* A group closes before d: at the end, or when d does not fit. */
        if (end || (len && rows + len > rows_cap)) {
            if (end || bytes >= unit_bytes) {
                if ((st = tt_grow((void **)&u, &cap, n + 2, sizeof *u, "scan units"))) {
                    free(u);
                    return st;
                }
                u[n++] = start;
                start = d;
                bytes = 0;
            }
            rows = 0;
        }
        rows += len;
        bytes += (uint64_t)len * idx->res_bytes;
    }
    u[n] = idx->num_docs;
    *unit = u;
    *nunit = n;
    return TT_OK;
}

/* Centroids per unit of the centroid scores' work: their rows (448 KiB of float16 at
 * 3584-d) stay in L2 while every query is scored against them. */
#define CS_BLOCK 64u

typedef struct cs_job {
    const scan_job *j;
    const uint32_t *codes; /* 0 .. CS_BLOCK-1 */
    bool avx2;
    atomic_uint_fast64_t next;
} cs_job;

static void cs_worker(void *arg, int t, int nthreads) {
    (void)t, (void)nthreads;
    cs_job *w = arg;
    const scan_job *j = w->j;
    const tt_index *idx = j->idx;
    const uint64_t K = idx->num_centroids, dim = idx->dim;
    float tmp[CS_BLOCK * 8];
    for (;;) {
        const uint64_t b = atomic_fetch_add(&w->next, 1) * CS_BLOCK;
        if (b >= K)
            break;
        const uint64_t n = TT_MIN((uint64_t)CS_BLOCK, K - b);
        for (uint64_t q = 0; q < j->nq; q++) {
            if (!j->CS[q])
                continue;
            const uint32_t nqp = (uint32_t)(j->col0[q + 1] - j->col0[q]);
            /* centroids b.. as codes 0..n-1 of a table of their own: each score is
             * computed by itself, whatever list it is in */
            tt_centroid_dots(j->Qall + j->col0[q] * dim, nqp, idx->dim,
                             idx->centroids16 ? NULL : idx->centroids + b * dim,
                             idx->centroids16 ? idx->centroids16 + b * dim : NULL, w->codes, n,
                             tmp, w->avx2);
            for (uint64_t c = 0; c < n; c++)
                memcpy(j->CS[q] + (b + c) * j->cs_stride, tmp + c * nqp, nqp * sizeof *tmp);
        }
    }
}

/* The split queries' tables (j->CS[q] allocated where the query splits on this CPU, as
 * ctx's decoder says) and their centroid scores: those tt_centroid_dots gives a scan of
 * the query alone, each computed by itself whatever the list it is in. */
static int split_tables(scan_job *j, const tt_search_ctx *ctx, int threads) {
    const tt_index *idx = j->idx;
    const uint64_t K = idx->num_centroids;
    j->whole = j->exact;
    tt_resdec_rows_layout(&ctx->dec, &j->stride, &j->shift);
    j->cs_stride = 0;
    for (uint64_t q = 0; q < j->nq; q++) {
        const uint32_t nqp = (uint32_t)(j->col0[q + 1] - j->col0[q]);
        if (!j->exact && tt_scan_splits(idx, &ctx->dec, nqp))
            j->cs_stride += nqp;
    }
    if (j->cs_stride && !(j->CSall = tt_alloc(K * j->cs_stride, sizeof(float), "exhaustive scan")))
        return TT_ENOMEM;
    for (uint64_t q = 0, col = 0; q < j->nq; q++) {
        const uint32_t nqp = (uint32_t)(j->col0[q + 1] - j->col0[q]);
        if (j->exact || !tt_scan_splits(idx, &ctx->dec, nqp)) {
            j->whole = true;
            continue;
        }
        j->CS[q] = j->CSall + col;
        col += nqp;
        if (!(j->Qs[q] = tt_alloc_aligned((uint64_t)nqp * j->stride, sizeof(float), 64,
                                          "exhaustive scan")))
            return TT_ENOMEM;
        memset(j->Qs[q], 0, (uint64_t)nqp * j->stride * sizeof(float));
        for (uint32_t i = 0; i < nqp; i++)
            memcpy(j->Qs[q] + (uint64_t)i * j->stride + j->shift,
                   j->Qall + (j->col0[q] + i) * idx->dim, idx->dim * sizeof(float));
        j->split = true;
    }
    if (!j->split)
        return TT_OK;
    uint32_t codes[CS_BLOCK];
    for (uint32_t c = 0; c < CS_BLOCK; c++)
        codes[c] = c;
    cs_job w = {.j = j, .codes = codes, .avx2 = ctx->dec.avx2};
    atomic_init(&w.next, 0);
    tt_parallel(threads, cs_worker, &w);
    return TT_OK;
}

/* One pass for queries [0, nq) (checked): their top k (kept kk = min(k, live) deep). */
static int scan_chunk(const tt_index *idx, const tt_filter *filter, const float *Q,
                      const uint64_t *qoffs, const uint32_t *qlens, uint64_t nq, uint32_t k,
                      uint32_t kk, int mode, int score, int threads, const volatile int *cancel,
                      tt_hit *hits, uint32_t *nhits) {
    const uint32_t dim = idx->dim;
    scan_job j = {.idx = idx, .filter = filter, .qlens = qlens, .nq = nq, .k = kk,
                  .cancel = cancel, .exact = mode == TT_MODE_EXACT};
    uint64_t *col0 = tt_alloc(nq + 1, sizeof *col0, "exhaustive scan");
    float *scale = tt_alloc(nq, sizeof *scale, "exhaustive scan");
    float *Qall = NULL, *Qtall = NULL;
    uint64_t *unit = NULL;
    int st = TT_OK;
    if (!col0 || !scale) {
        st = TT_ENOMEM;
        goto out;
    }
    col0[0] = 0;
    for (uint64_t q = 0; q < nq; q++) {
        col0[q + 1] = col0[q] + tt_qpad(qlens[q]);
        scale[q] = score == TT_SCORE_MEAN ? 1.0f / (float)qlens[q] : 1.0f;
    }
    bool own = false; /* some query's products without sgemm: Qtall needed */
    for (uint64_t q = 0; q < nq; q++)
        own = own || tt_maxsim_own((uint32_t)(col0[q + 1] - col0[q]));
    if (!(Qall = tt_alloc_aligned(col0[nq] * dim, sizeof *Qall, 64, "exhaustive scan")) ||
        (own && !(Qtall = tt_alloc_aligned(col0[nq] * dim, sizeof *Qtall, 64,
                                           "exhaustive scan")))) {
        st = TT_ENOMEM;
        goto out;
    }
    /* Each query as tt_ctx_set_query lays it out: the codec's position order, zero rows
     * up to the padded count. */
    for (uint64_t q = 0; q < nq; q++) {
        float *dst = Qall + col0[q] * dim;
        for (uint32_t i = 0; i < qlens[q]; i++)
            tt_codec_to_positions(&idx->codec, Q + (qoffs[q] + i) * dim, dst + (uint64_t)i * dim);
        memset(dst + (uint64_t)qlens[q] * dim, 0,
               (col0[q + 1] - col0[q] - qlens[q]) * dim * sizeof *dst);
        if (tt_maxsim_own((uint32_t)(col0[q + 1] - col0[q])))
            tt_maxsim_transpose(dst, (uint32_t)(col0[q + 1] - col0[q]), dim, Qtall + col0[q] * dim);
    }
    j.rows_cap = tt_group_rows(idx);
    uint64_t widest = 0;
    for (uint64_t q = 0; q < nq; q++)
        widest = TT_MAX(widest, col0[q + 1] - col0[q]);
    if ((st = make_units(idx, filter, j.rows_cap, threads, &unit, &j.nunit)))
        goto out;
    if ((uint64_t)threads > j.nunit)
        threads = (int)j.nunit;
    j.Qall = Qall;
    j.Qtall = Qtall;
    j.col0 = col0;
    j.scale = scale;
    j.unit = unit;
    j.ctx = tt_calloc((size_t)threads, sizeof *j.ctx, "exhaustive scan");
    j.QR = tt_calloc((size_t)threads, sizeof *j.QR, "exhaustive scan");
    j.Rr = tt_calloc((size_t)threads, sizeof *j.Rr, "exhaustive scan");
    j.Lr = tt_calloc((size_t)threads, sizeof *j.Lr, "exhaustive scan");
    j.gptr = tt_calloc((size_t)threads, sizeof *j.gptr, "exhaustive scan");
    j.CS = tt_calloc(nq, sizeof *j.CS, "exhaustive scan");
    j.Qs = tt_calloc(nq, sizeof *j.Qs, "exhaustive scan");
    j.top = tt_calloc((uint64_t)threads * nq, sizeof *j.top, "exhaustive scan");
    if (!j.ctx || !j.QR || !j.Rr || !j.Lr || !j.gptr || !j.CS || !j.Qs || !j.top) {
        st = TT_ENOMEM;
        goto free_threads;
    }
    for (int t = 0; t < threads; t++) {
        if ((st = tt_search_ctx_new(idx, &j.ctx[t])))
            goto free_threads;
        if (!(j.QR[t] = tt_alloc_aligned(tt_maxsim_rows(j.rows_cap) * widest, sizeof(float),
                                         64, "exhaustive scan"))) {
            st = TT_ENOMEM;
            goto free_threads;
        }
        for (uint64_t q = 0; q < nq; q++)
            if ((st = tt_topk_reset(&j.top[(uint64_t)t * nq + q], kk)))
                goto free_threads;
    }
    if ((st = split_tables(&j, j.ctx[0], threads)))
        goto free_threads;
    for (int t = 0; t < threads && j.split; t++)
        if (!(j.Rr[t] = tt_alloc_aligned(j.rows_cap * j.stride, sizeof(float), 64,
                                         "exhaustive scan")) ||
            !(j.gptr[t] = tt_alloc(j.rows_cap, sizeof *j.gptr[t], "exhaustive scan")) ||
            (tt_resdec_rows_lanes(&j.ctx[t]->dec) &&
             !(j.Lr[t] = tt_alloc_aligned(j.rows_cap * j.stride, sizeof(float), 64,
                                          "exhaustive scan")))) {
            st = TT_ENOMEM;
            goto free_threads;
        }
    atomic_init(&j.next, 0);
    tt_first_err_init(&j.err);
    tt_parallel(threads, scan_worker, &j);
    if ((st = tt_first_err_end(&j.err)))
        goto free_threads;
    /* Every query's top k of the threads' tops. */
    tt_topk all = {0};
    for (uint64_t q = 0; q < nq && !st; q++) {
        if ((st = tt_topk_reset(&all, kk)))
            break;
        for (int t = 0; t < threads; t++) {
            const tt_topk *tq = &j.top[(uint64_t)t * nq + q];
            for (uint32_t i = 0; i < tq->n; i++)
                tt_topk_push(&all, tq->h[i].doc, tq->h[i].score);
        }
        nhits[q] = tt_topk_finish(&all);
        memcpy(hits + q * k, all.h, (size_t)nhits[q] * sizeof *hits);
    }
    tt_topk_free(&all);
free_threads:
    for (int t = 0; t < threads; t++) {
        if (j.ctx)
            tt_search_ctx_free(j.ctx[t]);
        if (j.QR)
            free(j.QR[t]);
        if (j.Rr)
            free(j.Rr[t]);
        if (j.Lr)
            free(j.Lr[t]);
        if (j.gptr)
            free(j.gptr[t]);
        if (j.top)
            for (uint64_t q = 0; q < nq; q++)
                tt_topk_free(&j.top[(uint64_t)t * nq + q]);
    }
    free(j.CSall);
    for (uint64_t q = 0; j.Qs && q < nq; q++)
        free(j.Qs[q]);
    free(j.ctx);
    free(j.QR);
    free(j.Rr);
    free(j.Lr);
    free(j.gptr);
    free(j.CS);
    free(j.Qs);
    free(j.top);
out:
    free(col0);
    free(scale);
    free(Qall);
    free(Qtall);
    free(unit);
    return st;
}

/* Queries per pass: their tops on every thread, their padded copies and the centroid
 * scores of those that may split within this many bytes (more queries take more passes
 * over the index). */
#define SCAN_QUERY_BYTES (64ull << 20)

int tt_scan_batch(const tt_index *idx, const tt_filter *filter, const float *Q,
                  const uint64_t *qoffs, const uint32_t *qlens, uint64_t nq, uint32_t k,
                  int mode, int score, int threads, const volatile int *cancel, tt_hit *hits,
                  uint32_t *nhits) {
    if (!idx || !Q || !qoffs || !qlens || !hits || !nhits || k == 0)
        return tt_err(TT_EINVAL, "tt_scan_batch: NULL argument or k = 0");
    if (filter && filter->num_rows != idx->num_docs)
        return tt_err(TT_EINVAL, "tt_scan_batch: the filter is over %llu rows, the index %s "
                      "has %llu", (unsigned long long)filter->num_rows, idx->dir,
                      (unsigned long long)idx->num_docs);
    if (mode != TT_MODE_EXHAUSTIVE && mode != TT_MODE_EXACT)
        return tt_err(TT_EINVAL, "tt_scan_batch: mode %d is not a reference mode", mode);
    if (mode == TT_MODE_EXACT && !idx->has_originals)
        return tt_err(TT_EUNSUPPORTED,
                      "%s: exact mode needs the original vectors, which this index did not keep "
                      "(build with keep_originals)", idx->dir);
    for (uint64_t q = 0; q < nq; q++)
        nhits[q] = 0;
    if (nq == 0 || idx->num_live == 0)
        return TT_OK;
    if (threads <= 0)
        threads = tt_default_threads();
    /* A top never holds more than the live documents (as tt_search's). */
    const uint32_t kk = (uint32_t)TT_MIN((uint64_t)k, idx->num_live);
    const uint64_t per_top = (uint64_t)threads * kk * sizeof(tt_hit);
    for (uint64_t q0 = 0; q0 < nq;) {
        uint64_t q1 = q0, bytes = 0;
        do {
            const uint64_t nqp = tt_qpad(qlens[q1]);
            bytes += per_top + nqp * idx->dim * sizeof(float);
            if (idx->dim >= TT_CROWS_MIN_DIM && mode == TT_MODE_EXHAUSTIVE) /* may split */
                bytes += nqp * (idx->num_centroids + idx->dim + 32) * sizeof(float);
            q1++;
        } while (q1 < nq && bytes < SCAN_QUERY_BYTES);
        int st = scan_chunk(idx, filter, Q, qoffs + q0, qlens + q0, q1 - q0, k, kk, mode,
                            score, threads, cancel, hits + q0 * k, nhits + q0);
        if (st)
            return st;
        q0 = q1;
    }
    return TT_OK;
}

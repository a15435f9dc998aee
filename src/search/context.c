/* The search context: per-thread scratch space, the residual fetcher, counters, and
 * the per-query setup (query copy, int8 centroid scores). */
#include "search/search.h"

#include <stdio.h>
#include <stdlib.h>

int tt_search_ctx_new(const tt_index *idx, tt_search_ctx **out) {
    int st = TT_OK;
    if (!out)
        return tt_err(TT_EINVAL, "tt_search_ctx_new: NULL output");
    *out = NULL;
    if (!idx)
        return tt_err(TT_EINVAL, "tt_search_ctx_new: NULL index");
    tt_search_ctx *c = tt_calloc(1, sizeof *c, "search context");
    if (!c)
        return TT_ENOMEM;
    c->idx = idx;
#ifdef TT_AVX512
    __builtin_cpu_init();
    c->avx512 = __builtin_cpu_supports("avx512f");
#endif
#ifdef TT_SSE2
    c->rows4 = 1;
#endif
    const uint64_t K = idx->num_centroids, D = idx->num_docs;
    if ((st = tt_resdec_init(&c->dec, &idx->codec)) || (st = tt_reslut_init(&c->lut, &c->dec)))
        goto fail;
    if (idx->no_avx512)
        c->dec.avx512 = 0;
    c->keep = tt_calloc(K ? K : 1, 1, "search context");
    c->cell_seen = tt_calloc(K ? K : 1, 1, "search context");
    c->cells = tt_alloc(K ? K : 1, sizeof *c->cells, "search context");
    c->bits = tt_calloc((D + 63) / 64 + 1, sizeof *c->bits, "search context");
    c->rows_cap = tt_group_rows(idx);
    /* Room for the MaxSim sgemm's padded rows, zero until decoded rows overwrite them. */
    const uint64_t rows = tt_maxsim_rows(c->rows_cap);
    c->R = tt_alloc_aligned(rows * idx->dim, sizeof *c->R, 64, "search context");
    if (c->R)
        memset(c->R, 0, rows * idx->dim * sizeof *c->R);
    c->gcodes = tt_alloc(c->rows_cap, sizeof *c->gcodes, "search context");
    c->rcodes = tt_alloc(c->rows_cap, sizeof *c->rcodes, "search context");
    c->glens = tt_alloc(c->rows_cap, sizeof *c->glens, "search context");
    c->gdocs = tt_alloc(c->rows_cap, sizeof *c->gdocs, "search context");
    c->gscores = tt_alloc(c->rows_cap, sizeof *c->gscores, "search context");
    if (!c->keep || !c->cell_seen || !c->cells || !c->bits || !c->R || !c->gcodes ||
        !c->rcodes || !c->glens || !c->gdocs || !c->gscores) {
        st = TT_ENOMEM;
        goto fail;
    }
    /* The segments' residual files laid end to end: row d's residuals are at
     * doc_vec0[d] * res_bytes of that space. */
    tt_fetch_file *files = tt_alloc(idx->nseg, sizeof *files, "search context");
    if (!files) {
        st = TT_ENOMEM;
        goto fail;
    }
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        files[s] = (tt_fetch_file){
            .fd = sg->f_residuals.fd,
            .fd_direct = idx->direct ? sg->res_fd_direct : -1,
            .path = sg->f_residuals.path,
            .file_size = sg->f_residuals.size,
            .base = TT_HEADER_SIZE,
            .map = sg->res_map,
            .start = sg->vec0 * idx->res_bytes,
        };
    }
    tt_fetch_config fc = {
        .mode = idx->io == TT_IO_URING ? TT_FETCH_URING : TT_FETCH_MMAP,
        .nfiles = idx->nseg,
        .files = files,
        .queue_depth = idx->queue_depth,
    };
    st = tt_fetcher_new(&c->fetch, &fc, c->st.io_note, sizeof c->st.io_note);
    free(files);
    if (st)
        goto fail;
    switch (tt_fetcher_mode(c->fetch)) {
    case TT_FETCH_URING: c->st.io = TT_IO_URING; break;
    case TT_FETCH_MMAP: c->st.io = TT_IO_MMAP; break;
    default: c->st.io = TT_IO_PREAD; break;
    }
    if (!c->st.io_note[0] && idx->io_note[0])
        snprintf(c->st.io_note, sizeof c->st.io_note, "%s", idx->io_note);
    *out = c;
    return TT_OK;
fail:
    tt_search_ctx_free(c);
    return st;
}

/* Frees the buffers sized by the query length (nqp_cap). */
static void free_query_buffers(tt_search_ctx *c) {
    free(c->Qp);
    free(c->Qt_buf);
    c->Qt_buf = c->Qt = NULL;
    free(c->qpack);
    free(c->qscale);
    free(c->St);
    free(c->m);
    free(c->QR);
    c->Qp = c->St = c->m = c->QR = c->qscale = NULL;
    c->qpack = NULL;
    c->nqp_cap = 0;
}

void tt_search_ctx_free(tt_search_ctx *c) {
    if (!c)
        return;
    tt_fetcher_free(c->fetch);
    tt_resdec_free(&c->dec);
    tt_reslut_free(&c->lut);
    free(c->ascore);
    free(c->aorder);
    free_query_buffers(c);
    free(c->probe_s);
    free(c->probe);
    free(c->slut);
    free(c->keep);
    free(c->cell_seen);
    free(c->cells);
    free(c->bits);
    free(c->cand);
    free(c->list);
    free(c->s3);
    free(c->batch);
    free(c->rec);
    tt_topk_free(&c->top);
    free(c->roff);
    free(c->rlen);
    free(c->rptr);
    free(c->R);
    free(c->gcodes);
    free(c->rcodes);
    free(c->cfs);
    free(c->cfs_seen);
    free(c->cfa);
    free(c->cfa_seen);
    free(c->rq8);
    free(c->rqa);
    free(c->rqs);
    free(c->glens);
    free(c->gdocs);
    free(c->gscores);
    free(c->cgwork);
    free(c);
}

int tt_search_ctx_use_avx512(tt_search_ctx *ctx, int on) {
    int had = ctx->avx512;
#ifdef TT_SSE2
    ctx->rows4 = on != 0;
#endif
#ifdef TT_AVX512
    ctx->avx512 = on && __builtin_cpu_supports("avx512f");
#else
    (void)on;
#endif
    return had;
}

int tt_search_ctx_use_split(tt_search_ctx *ctx, int mode) {
    int had = ctx->split_mode;
    ctx->split_mode = mode;
    return had;
}

bool tt_search_ctx_use_lut(tt_search_ctx *ctx, bool on) {
    const bool had = !ctx->lut_off;
    ctx->lut_off = !on;
    return had;
}

bool tt_search_ctx_use_crows(tt_search_ctx *ctx, bool on) {
    const bool had = !ctx->rows_off;
    ctx->rows_off = !on;
    return had;
}

int tt_search_ctx_stats(const tt_search_ctx *ctx, tt_search_stats *out) {
    if (!ctx || !out)
        return tt_err(TT_EINVAL, "tt_search_ctx_stats: NULL argument");
    *out = ctx->st;
    tt_fetch_stats fs;
    tt_fetcher_stats(ctx->fetch, &fs);
    out->bytes_read = fs.bytes;
    out->reads = fs.reads;
    return TT_OK;
}

void tt_search_ctx_reset_stats(tt_search_ctx *ctx) {
    if (!ctx)
        return;
    int io = ctx->st.io;
    char note[sizeof ctx->st.io_note];
    memcpy(note, ctx->st.io_note, sizeof note);
    memset(&ctx->st, 0, sizeof ctx->st);
    ctx->st.io = io;
    memcpy(ctx->st.io_note, note, sizeof note);
    tt_fetcher_stats_reset(ctx->fetch);
}

/* Takes the query: copies it zero-padded to nqp rows, in the codec's position order
 * (where the index keeps centroids, residuals and originals), and sizes the per-query
 * buffers. */
int tt_ctx_set_query(tt_search_ctx *c, const float *Q, uint32_t nq, int score) {
    const tt_index *idx = c->idx;
    const uint32_t nqp = tt_qpad(nq), dim = idx->dim;
    c->gn = 0; /* a group a failed query left is dropped */
    c->grows = 0;
    if (nqp > c->nqp_cap) {
        /* Replaced, not grown: their contents do not outlive a query. On failure the
         * context holds none and the next query allocates again. */
        free_query_buffers(c);
        c->Qp = tt_alloc_aligned((uint64_t)nqp * dim, sizeof *c->Qp, 64, "query");
        c->Qt_buf = tt_alloc_aligned((uint64_t)nqp * dim, sizeof *c->Qt_buf, 64, "query");
        c->St = tt_alloc_aligned((uint64_t)idx->num_centroids * nqp, sizeof *c->St, 64,
                                 "centroid scores");
        /* m: running maxima, and nqp more floats for a sketched row (plaid.c). */
        c->m = tt_alloc(2 * (uint64_t)nqp, sizeof *c->m, "search context");
        c->QR = tt_alloc_aligned(tt_maxsim_rows(c->rows_cap) * nqp, sizeof *c->QR, 64,
                                 "search context");
        c->qpack = tt_alloc_aligned(tt_cq_qpack_bytes(&idx->cq, nqp), 1, 64, "query");
        c->qscale = tt_alloc(nqp, sizeof *c->qscale, "query");
        if (!c->Qp || !c->Qt_buf || !c->St || !c->m || !c->QR || !c->qpack || !c->qscale) {
            free_query_buffers(c);
            return TT_ENOMEM;
        }
        c->nqp_cap = nqp;
    }
    for (uint32_t i = 0; i < nq; i++)
        tt_codec_to_positions(&idx->codec, Q + (size_t)i * dim, c->Qp + (size_t)i * dim);
    memset(c->Qp + (size_t)nq * dim, 0, (size_t)(nqp - nq) * dim * sizeof *Q);
    c->nq = nq;
    c->nqp = nqp;
    c->Qt = tt_maxsim_own(nqp) ? c->Qt_buf : NULL;
    if (c->Qt)
        tt_maxsim_transpose(c->Qp, nqp, dim, c->Qt);
    c->split = c->split_dot = false;
    if (++c->cfs_query == 0) { /* the stamps wrapped: none may be current */
        if (c->cfs_seen)
            memset(c->cfs_seen, 0, idx->num_centroids * sizeof *c->cfs_seen);
        if (c->cfa_seen)
            memset(c->cfa_seen, 0, idx->num_centroids * sizeof *c->cfa_seen);
        c->lut_query = 0;
        c->cfs_query = 1;
    }
    c->scale = score == TT_SCORE_MEAN ? 1.0f / (float)nq : 1.0f;
    return TT_OK;
}

/* St ~ C·Qᵀ: the approximate centroid scores of every query vector, int8 or, where the
 * CPU has no vector int8 kernel, float32 (src/quant/cscore.c); on an index with centroid
 * groups and c->cgroups > 0, only the best groups' centroids scored (quant/cgroup.c). */
int tt_ctx_centroid_scores(tt_search_ctx *c, bool top1, const float *thr) {
    const tt_index *idx = c->idx;
    const size_t need = tt_cq_group_work_bytes(&idx->cq, c->nqp);
    if (need > c->cgwork_cap) {
        /* The table may have been regrouped (the calibration) since the last query. */
        free(c->cgwork);
        c->cgwork_cap = 0;
        if (!(c->cgwork = tt_alloc_aligned(need, 1, 64, "centroid scores")))
            return TT_ENOMEM;
        c->cgwork_cap = need;
    }
    uint32_t scored = idx->num_centroids;
    c->st_top1 = c->st_keep = false;
    if (top1 && !idx->cq.ngroups) {
        const tt_cq_top1 t = {c->probe_s, c->probe, thr ? c->keep : NULL, thr ? *thr : 0};
        c->st_top1 = tt_cq_centroid_scores_top1(&idx->cq, c->Qp, c->nq, c->nqp, c->qpack,
                                                c->qscale, c->St, &t);
        c->st_keep = c->st_top1 && thr;
    } else
        scored = tt_cq_group_scores(&idx->cq, c->Qp, c->nq, c->nqp, c->cgroups, c->qpack,
                                    c->qscale, c->cgwork, c->St);
    c->st.centroids_scored += scored;
    c->st_every = scored >= idx->num_centroids;
    return TT_OK;
}

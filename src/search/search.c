/* tt_search: checks the query and options and runs one mode (PLAID stages 1-4,
 * exhaustive or exact); tt_queries_check. */
#include "search/search.h"

#include <math.h>
#include <stdlib.h>

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int check_options(const tt_index *idx, const tt_search_options *o) {
    if (o->mode != TT_MODE_PLAID && o->mode != TT_MODE_EXHAUSTIVE && o->mode != TT_MODE_EXACT)
        return tt_err(TT_EINVAL, "search: unknown mode %d", o->mode);
    if (o->score != TT_SCORE_SUM && o->score != TT_SCORE_MEAN)
        return tt_err(TT_EINVAL, "search: unknown score reduction %d", o->score);
    if (o->nprobe < 1)
        return tt_err(TT_EINVAL, "search: nprobe %d must be at least 1", o->nprobe);
    if (o->pruning == TT_PRUNE_ABSOLUTE && !isfinite(o->threshold))
        return tt_err(TT_EINVAL, "search: the centroid score threshold must be finite");
    if (o->ndocs < 1)
        return tt_err(TT_EINVAL, "search: ndocs must be at least 1");
    if (o->mode == TT_MODE_EXACT && !idx->has_originals)
        return tt_err(TT_EUNSUPPORTED,
                      "%s: exact mode needs the original vectors, which this index did not keep "
                      "(build with keep_originals)", idx->dir);
    return TT_OK;
}

/* Keeps the documents of c->top as the next stage's list. */
static int top_to_list(tt_search_ctx *c, size_t *n) {
    int st;
    *n = c->top.n;
    if ((st = tt_grow((void **)&c->list, &c->list_cap, *n, sizeof *c->list, "candidates")))
        return st;
    for (size_t t = 0; t < *n; t++)
        c->list[t] = c->top.h[t].doc;
    return TT_OK;
}

int tt_search(const tt_index *idx, tt_search_ctx *ctx, const float *Q, uint32_t nq, uint32_t k,
              const tt_search_options *opt, tt_hit *hits, uint32_t *nhits) {
    int st;
    if (nhits)
        *nhits = 0;
    if (!idx || !ctx || !Q || !hits || !nhits)
        return tt_err(TT_EINVAL, "tt_search: NULL argument");
    if (ctx->idx != idx)
        return tt_err(TT_EINVAL, "tt_search: the context belongs to another index");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_search: k must be at least 1");
    if (nq == 0)
        return tt_err(TT_EINVAL, "tt_search: a query needs at least one vector");
    int64_t bad = tt_find_nonfinite(Q, nq, idx->dim);
    if (bad >= 0)
        return tt_err(TT_EVALUE, "tt_search: query vector %lld has a NaN or infinite value",
                      (long long)bad);
    tt_search_options o;
    if ((st = tt_search_options_check(opt)))
        return st;
    tt_search_options_resolve(opt, k, &o);
    if ((st = check_options(idx, &o)) || (st = tt_ctx_set_query(ctx, Q, nq, o.score)))
        return st;
    uint32_t kk = (uint64_t)k > idx->num_live ? (uint32_t)idx->num_live : k;
    if (kk == 0)
        return TT_OK; /* every document is deleted */
    ctx->st.queries++;
    double t0 = tt_now(), t1;

    if (o.mode == TT_MODE_EXACT) {
        if ((st = tt_topk_reset(&ctx->top, kk)))
            return st;
        if ((st = tt_scan_exact(ctx)))
            return st;
        ctx->st.seconds[3] += tt_now() - t0;
        goto done;
    }
    if (o.mode == TT_MODE_EXHAUSTIVE) {
        t1 = t0;
        if ((st = tt_topk_reset(&ctx->top, kk)) || (st = tt_scan_decompressed(ctx)))
            return st;
        ctx->st.seconds[3] += tt_now() - t1;
        goto done;
    }

    /* PLAID. */
    size_t n = 0;
    if ((st = tt_plaid_stage1(ctx, &o, &n)))
        return st;
    ctx->st.candidates += n;
    t1 = tt_now();
    ctx->st.seconds[0] += t1 - t0;
    const uint64_t *docs = ctx->cand;
    /* Stage 2: pruned centroid interaction, skipped when every candidate is kept. */
    if (n > o.ndocs) {
        if ((st = tt_topk_reset(&ctx->top, o.ndocs)))
            return st;
        tt_plaid_interaction(ctx, docs, n, ctx->keep);
        ctx->st.stage2_docs += n;
        if ((st = top_to_list(ctx, &n)))
            return st;
        docs = ctx->list;
    }
    t0 = tt_now();
    ctx->st.seconds[1] += t0 - t1;
    /* Stage 3: full centroid interaction. */
    uint32_t n3 = TT_MAX(o.ndocs / 4, kk);
    if (n > n3) {
        if ((st = tt_topk_reset(&ctx->top, n3)))
            return st;
        tt_plaid_interaction(ctx, docs, n, NULL);
        ctx->st.stage3_docs += n;
        if ((st = top_to_list(ctx, &n)))
            return st;
        docs = ctx->list;
    }
    t1 = tt_now();
    ctx->st.seconds[2] += t1 - t0;
    /* Stage 4 in document order: the fetcher then reads ascending offsets and the
     * groups (hence the float rounding of their sgemm) do not depend on heap order. */
    if (docs == ctx->list && n > 1)
        qsort(ctx->list, n, sizeof *ctx->list, u64_cmp);
    if ((st = tt_topk_reset(&ctx->top, kk)) || (st = tt_score_docs(ctx, docs, n)))
        return st;
    ctx->st.seconds[3] += tt_now() - t1;

done:;
    uint32_t got = tt_topk_finish(&ctx->top);
    memcpy(hits, ctx->top.h, (size_t)got * sizeof *hits);
    *nhits = got;
    return TT_OK;
}

int tt_queries_check(const tt_queries *q, const tt_index *idx) {
    if (!q || !idx)
        return tt_err(TT_EINVAL, "tt_queries_check: NULL argument");
    if (q->dim != idx->dim)
        return tt_err(TT_EDIM, "%s: query vectors have dimension %u but the index %s has %u",
                      q->path, q->dim, idx->dir, idx->dim);
    return TT_OK;
}

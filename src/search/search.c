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

static int hit_doc_cmp(const void *a, const void *b) {
    uint64_t x = ((const tt_hit *)a)->doc, y = ((const tt_hit *)b)->doc;
    return x < y ? -1 : x > y;
}

/* Adaptive PLAID stage 4. c->top holds the stage-3 survivors with their centroid-only
 * scores s3. They are scored in batches of `first`, best s3 first; after each batch,
 * e = mean + margin standard deviations (default 1) of (decompressed score - s3 * scale)
 * over the documents
 * scored so far in this query, and the
 * next batch holds only documents with s3 * scale + e >= the k-th best decompressed
 * score so far (once there are k): the documents that, erring as much as the worst
 * seen, could still enter the top k. Nothing is assumed about the scale or spread of
 * the scores: each query measures its own error, so sharply ranked queries (real text)
 * stop after the first batch and noisy ones (stage-3 scores far from the decompressed
 * ones) go deeper, up to every survivor. */
static int stage4_adaptive(tt_search_ctx *c, uint32_t kk, uint32_t first, float margin) {
    int st;
    /* Unsorted: each batch takes the best of what is left, sorted (most queries stop
     * after a batch or two of the survivors). */
    size_t n = c->top.n;
    if ((st = tt_grow((void **)&c->s3, &c->s3_cap, n, sizeof *c->s3, "candidates")) ||
        (st = tt_grow((void **)&c->batch, &c->batch_cap, first, sizeof *c->batch,
                       "candidates")) ||
        (st = tt_grow((void **)&c->list, &c->list_cap, first, sizeof *c->list, "candidates")) ||
        (st = tt_grow((void **)&c->rec, &c->rec_cap, first, sizeof *c->rec, "candidates")))
        return st;
    memcpy(c->s3, c->top.h, n * sizeof *c->s3);
    if ((st = tt_topk_reset(&c->top, kk)))
        return st;
    float emax = -INFINITY;
    double esum = 0, esq = 0, ecnt = 0;
    for (size_t p = 0; p < n;) {
        size_t e = TT_MIN(p + first, n);
        tt_hits_best(c->s3 + p, n - p, e - p);
        if (p > 0 && c->top.n == c->top.k) {
            /* The batch is sorted: cut it at the first document that cannot make it. */
            const float worst = c->top.h[0].score;
            size_t q = p;
            while (q < e && c->s3[q].score * c->scale + emax >= worst)
                q++;
            e = q;
            if (e == p)
                break;
        }
        size_t m = e - p;
        memcpy(c->batch, c->s3 + p, m * sizeof *c->batch);
        /* Document order: ascending reads, and groups independent of heap order. */
        qsort(c->batch, m, sizeof *c->batch, hit_doc_cmp);
        for (size_t t = 0; t < m; t++)
            c->list[t] = c->batch[t].doc;
        c->rec_n = 0;
        c->rec_on = true;
        st = tt_score_docs(c, c->list, m);
        c->rec_on = false;
        if (st)
            return st;
        for (size_t t = 0; t < m; t++) {
            float err = c->rec[t] - c->batch[t].score * c->scale;
            esum += err;
            esq += (double)err * err;
            ecnt++;
        }
        /* The mean error plus one standard deviation: the largest error seen made noisy
         * queries score all ndocs (1.7x the latency of 1 sd on a DiffRetriever shape and
         * on noisy 128-d synthetics, for at most 0.004 more recall@10); no margin at all
         * is about ColBERTv2's fixed depth. */
        double mu = esum / ecnt, var = esq / ecnt - mu * mu;
        emax = (float)(mu + margin * sqrt(var > 0 ? var : 0));
        p = e;
    }
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
    tt_search_options_resolve_query(idx, opt, k, nq, &o);
    if ((st = check_options(idx, &o)) || (st = tt_ctx_set_query(ctx, Q, nq, o.score)))
        return st;
    /* The filter: the allowed live documents, counted; the plan follows from it. */
    ctx->filter = o.filter;
    ctx->allowed = idx->num_live;
    ctx->direct = false;
    if (o.filter) {
        if (o.filter->num_rows != idx->num_docs)
            return tt_err(TT_EINVAL, "tt_search: the filter is over %llu rows, the index %s "
                          "has %llu", (unsigned long long)o.filter->num_rows, idx->dir,
                          (unsigned long long)idx->num_docs);
        uint64_t n = 0;
        for (uint64_t w = 0; w < (idx->num_docs + 63) / 64; w++)
            n += (uint64_t)__builtin_popcountll(
                idx->deleted ? o.filter->bits[w] & ~idx->deleted[w] : o.filter->bits[w]);
        ctx->allowed = n;
        uint64_t dmax = o.filter_direct_max
                            ? o.filter_direct_max
                            : (uint64_t)sqrt(TT_FILTER_DIRECT_MUL * (double)o.ndocs *
                                             (double)idx->num_live);
        ctx->direct = n <= dmax && n < idx->num_live;
    }
    uint32_t kk = (uint64_t)k > ctx->allowed ? (uint32_t)ctx->allowed : k;
    if (kk == 0)
        return TT_OK; /* every document is deleted, or none is allowed */
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
    /* The scan plan: a filter allowing no more live documents than PLAID's stage 4
     * decompresses at least (max(ndocs / 4, k), its first batch) gets them all scored,
     * as the exhaustive mode does. The direct plan would score the same documents after
     * computing C·Qᵀ over every centroid: this is its result (exact) for less work.
     * Above that the direct plan may stop early, and on 300k documents it did (a wider
     * rule, up to K / (4 x mean doclen) more documents, measured slower: doc/search.md,
     * "Filters"). */
    const uint64_t scan_max = TT_MAX(o.ndocs / 4, kk);
    if (o.mode == TT_MODE_PLAID && ctx->direct && ctx->allowed <= scan_max) {
        ctx->st.candidates += ctx->allowed;
        o.mode = TT_MODE_EXHAUSTIVE;
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
    if (n > n3 && o.rerank == TT_RERANK_ADAPTIVE) {
        /* Keep every survivor, ranked: stage 4 decides how deep to go. */
        if ((st = tt_topk_reset(&ctx->top, (uint32_t)n)))
            return st;
        tt_plaid_interaction(ctx, docs, n, NULL);
        ctx->st.stage3_docs += n;
        t1 = tt_now();
        ctx->st.seconds[2] += t1 - t0;
        if ((st = stage4_adaptive(ctx, kk, n3, o.rerank_margin)))
            return st;
        ctx->st.seconds[3] += tt_now() - t1;
        goto done;
    }
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

int tt_ctx_allowed_list(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    int st = tt_grow((void **)&c->cand, &c->cand_cap, (size_t)(c->allowed ? c->allowed : 1),
                     sizeof *c->cand, "candidates");
    if (st)
        return st;
    size_t n = 0;
    for (uint64_t w = 0; w < (idx->num_docs + 63) / 64; w++) {
        /* Without a filter, every row (the last word's bits past num_docs are not). */
        uint64_t x = c->filter ? c->filter->bits[w]
                     : idx->num_docs - 64 * w >= 64 ? ~0ull
                                                    : (1ull << (idx->num_docs - 64 * w)) - 1;
        if (idx->deleted)
            x &= ~idx->deleted[w];
        while (x) {
            c->cand[n++] = (w << 6) | (uint64_t)__builtin_ctzll(x);
            x &= x - 1;
        }
    }
    return TT_OK;
}

int tt_queries_valid(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                     const uint32_t *qlens, uint64_t nq, const char *who) {
    for (uint64_t q = 0; q < nq; q++) {
        if (qlens[q] == 0)
            return tt_err(TT_EINVAL, "%s: query %llu has no vectors", who,
                          (unsigned long long)q);
        int64_t bad = tt_find_nonfinite(Q + qoffs[q] * idx->dim, qlens[q], idx->dim);
        if (bad >= 0)
            return tt_err(TT_EVALUE, "%s: query %llu, vector %lld, has a NaN or infinite value",
                          who, (unsigned long long)q, (long long)bad);
    }
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

/* Decompressed MaxSim of a list of documents: their packed residuals are read (io_uring,
 * pread or the mapping), decoded with their centroids added, and scored in groups.
 * PLAID stage 4 and the exhaustive scan both end here. */
#include "search/search.h"

/* Scores one group of decoded documents and pushes them into c->top. */
void tt_score_flush_group(tt_search_ctx *c, uint32_t ndocs) {
    const tt_index *idx = c->idx;
    tt_maxsim_group(c->Qp, c->nq, c->nqp, idx->dim, c->R, c->glens, ndocs, c->QR, c->gscores);
    for (uint32_t d = 0; d < ndocs; d++)
        tt_topk_push(&c->top, c->gdocs[d], c->gscores[d] * c->scale);
}

/* Decompressed MaxSim of n documents whose packed residuals are at ptr[t]; docs NULL
 * means the consecutive documents first, first+1, ... */
void tt_score_packed(tt_search_ctx *c, const uint64_t *docs, uint64_t first, size_t n,
                               const uint8_t *const *ptr) {
    const tt_index *idx = c->idx;
    const uint32_t dim = idx->dim;
    uint64_t rows = 0;
    uint32_t g = 0;
    for (size_t t = 0; t < n; t++) {
        uint64_t d = docs ? docs[t] : first + t;
        uint32_t len = idx->doclens[d];
        if (rows + len > c->rows_cap) {
            tt_score_flush_group(c, g);
            rows = 0;
            g = 0;
        }
        uint64_t v0 = idx->doc_vec0[d];
        for (uint32_t j = 0; j < len; j++)
            c->gcodes[j] = tt_index_code(idx, v0 + j);
        tt_resdec_decode_add(&c->dec, ptr[t], len, idx->centroids, c->gcodes, c->R + rows * dim);
        c->glens[g] = len;
        c->gdocs[g] = d;
        g++;
        rows += len;
    }
    if (g)
        tt_score_flush_group(c, g);
    c->st.scored_docs += n;
}

int tt_score_reserve_ranges(tt_search_ctx *c, size_t n) {
    size_t cap = c->r_cap, cap2 = c->r_cap, cap3 = c->r_cap;
    int st;
    if ((st = tt_grow((void **)&c->roff, &cap, n, sizeof *c->roff, "residual ranges")) ||
        (st = tt_grow((void **)&c->rlen, &cap2, n, sizeof *c->rlen, "residual ranges")) ||
        (st = tt_grow((void **)&c->rptr, &cap3, n, sizeof *c->rptr, "residual ranges")))
        return st;
    c->r_cap = cap;
    return TT_OK;
}

/* PLAID stage 4: fetch the residuals of docs[0..n) and score them. */
int tt_score_docs(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    const tt_index *idx = c->idx;
    const uint64_t rb = idx->res_bytes;
    int st;
    if ((st = tt_score_reserve_ranges(c, n)))
        return st;
    for (size_t t = 0; t < n; t++) {
        c->roff[t] = idx->doc_vec0[docs[t]] * rb;
        c->rlen[t] = (uint64_t)idx->doclens[docs[t]] * rb;
    }
    double t0 = tt_now();
    if ((st = tt_fetcher_read(c->fetch, n, c->roff, c->rlen, c->rptr)))
        return st;
    c->st.seconds_fetch += tt_now() - t0;
    tt_score_packed(c, docs, 0, n, c->rptr);
    return TT_OK;
}

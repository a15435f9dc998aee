/* Decompressed MaxSim of a list of documents: their packed residuals are read (io_uring,
 * pread or the mapping), decoded with their centroids added, and scored in groups.
 * PLAID stage 4 and the exhaustive scan both end here. */
#include "search/search.h"

/* Scores the group of decoded documents and pushes them into c->top. */
void tt_score_flush(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    if (c->gn)
        tt_maxsim_group(c->Qp, c->nq, c->nqp, idx->dim, c->R, c->glens, c->gn, c->QR,
                        c->gscores);
    for (uint32_t d = 0; d < c->gn; d++) {
        float s = c->gscores[d] * c->scale;
        tt_topk_push(&c->top, c->gdocs[d], s);
        if (c->rec_on) /* rec has room: the caller reserved it */
            c->rec[c->rec_n++] = s;
    }
    c->gn = 0;
    c->grows = 0;
}

float *tt_score_slot(tt_search_ctx *c, uint64_t doc, uint32_t len) {
    if (c->grows + len > c->rows_cap)
        tt_score_flush(c);
    float *rows = c->R + c->grows * c->idx->dim;
    c->glens[c->gn] = len;
    c->gdocs[c->gn] = doc;
    c->gn++;
    c->grows += len;
    return rows;
}

void tt_score_packed(tt_search_ctx *c, const uint64_t *docs, size_t n,
                     const uint8_t *const *ptr) {
    const tt_index *idx = c->idx;
    for (size_t t = 0; t < n; t++) {
        uint64_t d = docs[t], v0 = idx->doc_vec0[d];
        uint32_t len = idx->doclens[d];
        float *rows = tt_score_slot(c, d, len);
        for (uint32_t j = 0; j < len; j++)
            c->gcodes[j] = tt_index_code(idx, v0 + j);
        tt_resdec_decode_add(&c->dec, ptr[t], len, idx->centroids, c->gcodes, rows);
    }
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

int tt_score_fetch(tt_search_ctx *c, const uint64_t *docs, size_t n) {
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
    return TT_OK;
}

/* PLAID stage 4: fetch the residuals of docs[0..n) and score them. */
int tt_score_docs(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    int st = tt_score_fetch(c, docs, n);
    if (st)
        return st;
    tt_score_packed(c, docs, n, c->rptr);
    tt_score_flush(c);
    return TT_OK;
}

int tt_score_doc_vectors(tt_search_ctx *c, uint64_t doc, float *out) {
    const tt_index *idx = c->idx;
    const uint64_t rb = idx->res_bytes, v0 = idx->doc_vec0[doc];
    const uint32_t len = idx->doclens[doc];
    int st;
    if (len > c->rows_cap)
        return tt_err(TT_EINVAL, "%s: document %llu has more vectors than this context holds",
                      idx->dir, (unsigned long long)doc);
    if ((st = tt_score_reserve_ranges(c, 1)))
        return st;
    c->roff[0] = v0 * rb;
    c->rlen[0] = (uint64_t)len * rb;
    if ((st = tt_fetcher_read(c->fetch, 1, c->roff, c->rlen, c->rptr)))
        return st;
    for (uint32_t j = 0; j < len; j++)
        c->gcodes[j] = tt_index_code(idx, v0 + j);
    tt_resdec_decode_add(&c->dec, c->rptr[0], len, idx->centroids, c->gcodes, out);
    return TT_OK;
}

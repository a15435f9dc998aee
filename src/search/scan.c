/* The reference modes: every live document scored, decompressed (exhaustive: what
 * PLAID's pruning loses) or from the float16 originals (exact: what compression
 * loses). */
#include "search/search.h"

/* Residual bytes per chunk of an exhaustive scan. */
#define SCAN_BYTES (8u << 20)

/* Exhaustive decompressed MaxSim: each segment's residual file in sequential chunks,
 * deleted rows skipped; one sequence of groups over all of them. At 512 dimensions and
 * more, queries of 4 or 8 padded rows on AVX-512 or AVX2 take stage 4's split (<q, c>
 * once per centroid, <q, r> from the packed bytes: tt_scan_splits): at 3584-d adding
 * each vector's centroid row and writing the decoded rows was most of a query's time. */
int tt_scan_decompressed(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint64_t rb = idx->res_bytes;
    int st;
    if ((st = tt_score_scan_begin(c)))
        return st;
    if (c->filter) {
        /* Only the allowed documents: read one by one (ascending), in batches, and
         * grouped as one sequence over all of them (as the one pass groups them). */
        if ((st = tt_ctx_allowed_list(c)))
            return st;
        for (uint64_t p = 0; p < c->allowed; p += 4096) {
            size_t m = (size_t)TT_MIN((uint64_t)4096, c->allowed - p);
            if ((st = tt_score_fetch(c, c->cand + p, m)))
                return st;
            tt_score_packed(c, c->cand + p, m, c->rptr);
        }
        tt_score_flush(c);
        c->split = c->split_dot = false;
        return TT_OK;
    }
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const uint64_t D = idx->seg[s].doc0 + idx->seg[s].num_docs;
        uint64_t d0 = idx->seg[s].doc0;
        while (d0 < D) {
            uint64_t d1 = d0 + 1;
            while (d1 < D && (idx->doc_vec0[d1 + 1] - idx->doc_vec0[d0]) * rb <= SCAN_BYTES)
                d1++;
            uint64_t off = idx->doc_vec0[d0] * rb;
            uint64_t len = (idx->doc_vec0[d1] - idx->doc_vec0[d0]) * rb;
            const uint8_t *base;
            double t0 = tt_now();
            if ((st = tt_fetcher_read(c->fetch, 1, &off, &len, &base)))
                return st;
            c->st.seconds_fetch += tt_now() - t0;
            if ((st = tt_score_reserve_ranges(c, (size_t)(d1 - d0))) ||
                (st = tt_grow((void **)&c->list, &c->list_cap, (size_t)(d1 - d0),
                              sizeof *c->list, "candidates")))
                return st;
            size_t m = 0;
            for (uint64_t d = d0; d < d1; d++) {
                if (tt_index_deleted(idx, d))
                    continue;
                c->list[m] = d;
                c->rptr[m++] = base + (idx->doc_vec0[d] - idx->doc_vec0[d0]) * rb;
            }
            tt_score_packed(c, c->list, m, c->rptr);
            d0 = d1;
        }
    }
    tt_score_flush(c);
    c->split = c->split_dot = false;
    return TT_OK;
}

int tt_original_rows(const tt_index *idx, uint32_t s, uint64_t d, float *dst) {
    const tt_segment *sg = &idx->seg[s];
    const uint32_t len = idx->doclens[d], dim = idx->dim;
    tt_f16_to_f32_n(dst, tt_index_original(idx, s, idx->doc_vec0[d]), (size_t)len * dim);
    /* Builds refuse values float16 cannot hold; a damaged file can still hold them. */
    int64_t bad = tt_find_nonfinite(dst, len, dim);
    if (bad >= 0)
        return tt_err(TT_ECORRUPT, "%s: vector %llu (document %llu) is not finite",
                      sg->f_originals.path,
                      (unsigned long long)(idx->doc_vec0[d] - sg->vec0 + (uint64_t)bad),
                      (unsigned long long)(d - sg->doc0));
    return TT_OK;
}

/* Exact MaxSim over the kept float16 originals of every live document. */
int tt_scan_exact(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    int st;
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        for (uint64_t d = sg->doc0; d < sg->doc0 + sg->num_docs; d++) {
            if (tt_index_deleted(idx, d) || !tt_ctx_allowed(c, d))
                continue;
            if ((st = tt_original_rows(idx, s, d, tt_score_slot(c, d, idx->doclens[d]))))
                return st;
        }
    }
    tt_score_flush(c);
    c->st.scored_docs += c->allowed;
    return TT_OK;
}

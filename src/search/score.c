/* Decompressed MaxSim of a list of documents: their packed residuals are read (io_uring,
 * pread or the mapping), decoded with their centroids added, and scored in groups.
 * PLAID stage 4 and the exhaustive scan both end here; either may instead score the
 * centroids and the residuals apart (the split below; the scan only where its one-pass
 * batch can give the same floats: tt_scan_splits). */
#include "search/search.h"

#include <math.h>

/* Stage 4 splits <q, c + r> into <q, c> + <q, r> for queries of at most SPLIT_MAX_NQP
 * (padded) vectors on vectors of at least SPLIT_MIN_DIM dimensions: each centroid row is
 * then read once per query (not once per vector scored), and on AVX-512 or AVX2 <q, r>
 * comes from the packed bytes without writing decoded rows (tt_resdec_dot). Measured
 * (doc/benchmarks.md, "Stage 4 without decoded rows"): stage 4 1.4-2.2x faster at 1024-
 * and 3584-d with 4 or 8 query vectors, 9-40% slower at 128-d, where the decoded rows
 * stay in cache and one sgemm scores them. */
#define SPLIT_MIN_DIM TT_CROWS_MIN_DIM /* 512: the index has int8 rows from there on */
#define SPLIT_MAX_NQP 8u

/* Lists in gcodes (which the split does not otherwise use) the codes of the group's
 * rows not yet marked in seen with the current query's stamp, and marks them; returns
 * how many. */
static uint64_t unseen_codes(tt_search_ctx *c, uint32_t *seen) {
    uint64_t n = 0;
    for (uint64_t j = 0; j < c->grows; j++) {
        const uint32_t code = c->rcodes[j];
        if (seen[code] == c->cfs_query)
            continue;
        seen[code] = c->cfs_query;
        c->gcodes[n++] = code;
    }
    return n;
}

/* The current query's centroid scores of every code of the group's rows, computed for
 * the codes not seen yet in this query. */
static void split_centroid_scores(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint64_t n = unseen_codes(c, c->cfs_seen);
    tt_centroid_dots(c->Qp, c->nqp, idx->dim, idx->centroids, idx->centroids16, c->gcodes, n,
                     c->cfs, c->dec.avx2);
}

/* The lookup pass's: from the index's int8 rows (tt_crows_dots), into cfa. */
static void rows_centroid_scores(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint64_t n = unseen_codes(c, c->cfa_seen);
    tt_crows_dots(&idx->crows, c->Qp, c->rq8, c->rqa, c->rqs, c->nqp, c->gcodes, n, c->cfa,
                  c->lut.avx2);
}

/* Sizes a memoised centroid-score table (*tab: num_centroids x nqp floats, valid where
 * (*seen)[code] is the current query's stamp) for the current query's nqp rows. A table
 * made anew (it was empty or had another stride) holds nothing current. */
static int memo_reserve(tt_search_ctx *c, float **tab, uint32_t *tab_nqp, uint32_t **seen) {
    const uint64_t K = c->idx->num_centroids;
    if (*tab_nqp >= c->nqp)
        return TT_OK;
    free(*tab);
    *tab_nqp = 0;
    if (!(*tab = tt_alloc(K * c->nqp, sizeof **tab, "centroid scores")))
        return TT_ENOMEM;
    if (!*seen && !(*seen = tt_calloc(K, sizeof **seen, "centroid scores")))
        return TT_ENOMEM;
    memset(*seen, 0, K * sizeof **seen);
    *tab_nqp = c->nqp;
    return TT_OK;
}

/* Room for the int8-row centroid scores and the query's int8 rows (lut_rows). */
static int rows_alloc(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint64_t stride = idx->crows.stride;
    if (c->rq_nqp < c->nqp) {
        free(c->rq8);
        free(c->rqa);
        free(c->rqs);
        c->rq_nqp = 0;
        if (!(c->rq8 = tt_alloc_aligned(c->nqp, stride, 64, "query int8 rows")) ||
            !(c->rqa = tt_alloc_aligned(c->nqp, stride, 64, "query int8 rows")) ||
            !(c->rqs = tt_alloc(2 * (uint64_t)c->nqp, sizeof *c->rqs, "query int8 rows")))
            return TT_ENOMEM;
        c->rq_nqp = c->nqp;
    }
    return memo_reserve(c, &c->cfa, &c->cfa_nqp, &c->cfa_seen);
}

/* Whether stage 4 of the current query splits (c->split_mode, or by the index's shape),
 * with its centroid score table sized; TT_ENOMEM if it cannot be. */
static int split_begin(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    c->split = c->split_mode == TT_SPLIT_ON ||
               (c->split_mode == TT_SPLIT_AUTO && c->nqp <= SPLIT_MAX_NQP &&
                idx->dim >= SPLIT_MIN_DIM);
    /* The fused kernel answers for the query sizes it has (on AVX-512 or AVX2). */
    c->split_dot = c->split && tt_resdec_dot_ok(&c->dec, c->nqp);
    if (!c->split)
        return TT_OK;
    c->split = false; /* until the table has room */
    int st = memo_reserve(c, &c->cfs, &c->cfs_nqp, &c->cfs_seen);
    c->split = st == TT_OK;
    return st;
}

/* Per-vector residual scales (debias 2, idx->vscale): the positions from vscale_k0 on
 * of each decoded residual are multiplied by its vector's scale (decoding:
 * tt_resdec_decode_scaled). tt_score_vscale_products (search.h) turns the unscaled
 * products into the scaled residuals' ones: the 8-bit positions' part (their codes are
 * the first bytes of a packed vector) as it is, the rest times the scale. */
void tt_score_vscale_products(const tt_index *idx, const float *Qp, uint32_t nqp,
                              const uint8_t *packed, uint64_t v0, uint64_t n, float *out) {
    const uint32_t dim = idx->dim, k0 = idx->vscale_k0;
    const uint64_t rb = idx->res_bytes;
    const tt_codec *cd = &idx->codec;
    for (uint64_t j = 0; j < n; j++) {
        const float s = tt_f16_to_f32(idx->vscale[v0 + j]);
        const uint8_t *p = packed + j * rb;
        for (uint32_t i = 0; i < nqp; i++) {
            float part8 = 0;
            for (uint32_t k = 0; k < k0; k++)
                part8 += Qp[(size_t)i * dim + k] * cd->weights[cd->woff[k] + p[k]];
            float *o = out + j * nqp + i;
            *o = part8 + s * (*o - part8);
        }
    }
}

void tt_score_decode_add(const tt_search_ctx *c, const uint8_t *packed, uint64_t n,
                         const uint32_t *codes, uint64_t v0, float *out) {
    const tt_index *idx = c->idx;
    if (idx->vscale) {
        tt_resdec_decode_scaled(&c->dec, packed, n, idx->centroids, idx->centroids16, codes,
                                idx->vscale_k0, idx->vscale + v0, out);
        return;
    }
    if (idx->centroids16)
        tt_resdec_decode_add16(&c->dec, packed, n, idx->centroids16, codes, out);
    else
        tt_resdec_decode_add(&c->dec, packed, n, idx->centroids, codes, out);
}

bool tt_scan_splits(const tt_index *idx, const tt_resdec *d, uint32_t nqp) {
    return idx->dim >= SPLIT_MIN_DIM && tt_resdec_dot_rows_ok(d, nqp);
}

int tt_score_scan_begin(tt_search_ctx *c) {
    c->split = c->split_dot = c->lut_pass = c->lut_plain = false;
    if (!tt_scan_splits(c->idx, &c->dec, c->nqp))
        return TT_OK;
    int st = memo_reserve(c, &c->cfs, &c->cfs_nqp, &c->cfs_seen);
    c->split = c->split_dot = st == TT_OK;
    return st;
}

/* Scores the group of decoded documents and pushes them into c->top (in the lookup
 * pass: stores them in c->ascore). */
void tt_score_flush(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    if (c->gn && c->split) {
        const float *CS = c->cfs;
        if (c->lut_pass && c->lut_rows) {
            rows_centroid_scores(c);
            CS = c->cfa;
        } else {
            split_centroid_scores(c);
        }
        tt_maxsim_group_split(c->Qp, c->Qt, c->nq, c->nqp, idx->dim, c->split_dot ? NULL : c->R,
                              c->glens, c->gn, c->rcodes, CS, c->nqp, c->QR, c->gscores);
    } else if (c->gn) {
        tt_maxsim_group(c->Qp, c->Qt, c->nq, c->nqp, idx->dim, c->R, c->glens, c->gn, c->QR,
                        c->gscores);
    }
    for (uint32_t d = 0; d < c->gn; d++) {
        float s = c->gscores[d] * c->scale;
        if (c->lut_pass) { /* ascore has room: tt_score_docs reserved it */
            c->ascore[c->ascore_n++] = s;
            continue;
        }
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

static void score_packed(tt_search_ctx *c, const uint64_t *docs, size_t n,
                         const uint8_t *const *ptr) {
    const tt_index *idx = c->idx;
    for (size_t t = 0; t < n; t++) {
        uint64_t d = docs[t], v0 = idx->doc_vec0[d];
        uint32_t len = idx->doclens[d];
        float *rows = tt_score_slot(c, d, len);
        if (c->split) {
            const uint64_t r0 = c->grows - len;
            for (uint32_t j = 0; j < len; j++)
                c->rcodes[r0 + j] = tt_index_code(idx, v0 + j);
            /* <q, r> straight into QR where the kernel can, else decoded for the sgemm */
            if (!c->split_dot) {
                if (idx->vscale)
                    tt_resdec_decode_scaled(&c->dec, ptr[t], len, NULL, NULL, NULL,
                                            idx->vscale_k0, idx->vscale + v0, rows);
                else
                    tt_resdec_decode(&c->dec, ptr[t], len, rows);
                continue;
            }
            if (c->lut_pass)
                tt_reslut_dot(&c->lut, &c->dec, ptr[t], len, c->Qp, c->R, c->QR + r0 * c->nqp);
            else
                tt_resdec_dot(&c->dec, ptr[t], len, c->Qp, c->nqp, c->R,
                              c->QR + r0 * c->nqp);
            if (idx->vscale)
                tt_score_vscale_products(idx, c->Qp, c->nqp, ptr[t], v0, len,
                                         c->QR + r0 * c->nqp);
            continue;
        }
        for (uint32_t j = 0; j < len; j++)
            c->gcodes[j] = tt_index_code(idx, v0 + j);
        tt_score_decode_add(c, ptr[t], len, c->gcodes, v0, rows);
    }
}

void tt_score_packed(tt_search_ctx *c, const uint64_t *docs, size_t n,
                     const uint8_t *const *ptr) {
    score_packed(c, docs, n, ptr);
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

/* The residual ranges of docs[0..n) in c->roff, c->rlen (room for n in c->rptr too). */
static int doc_ranges(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    const tt_index *idx = c->idx;
    const uint64_t rb = idx->res_bytes;
    int st;
    if ((st = tt_score_reserve_ranges(c, n)))
        return st;
    for (size_t t = 0; t < n; t++) {
        c->roff[t] = idx->doc_vec0[docs[t]] * rb;
        c->rlen[t] = (uint64_t)idx->doclens[docs[t]] * rb;
    }
    return TT_OK;
}

int tt_score_fetch(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    int st;
    if ((st = doc_ranges(c, docs, n)))
        return st;
    double t0 = tt_now();
    if ((st = tt_fetcher_read(c->fetch, n, c->roff, c->rlen, c->rptr)))
        return st;
    c->st.seconds_fetch += tt_now() - t0;
    return TT_OK;
}

/* Residual bytes scored per wait in stage 4: the first documents are scored while the
 * reads of the others are still in flight (io_uring), so that on a cold page cache the
 * decoding overlaps the device's latency instead of following it (doc/benchmarks.md,
 * *Stage 4 overlapped with its reads*). A wait costs a system call and, cold, a sleep:
 * with 8 documents a wait, 128-d documents of a kilobyte were no faster. Documents are
 * scored in the same order and groups as in one piece: the same floats. */
#define SCORE_CHUNK_BYTES (96u << 10)

/* Standard deviations of the lookup tables' error on a document's score that the
 * exact pass allows for: a document is scored exactly while its approximate score is
 * within this many of the k-th best exact score (see lut_margin). */
#define LUT_SIGMAS 4.0f

/* How far a document's approximate score may lie from its exact one: LUT_SIGMAS
 * standard deviations of the error of a sum over the real query rows of one vector's
 * score each (the approximate maximum is at least the approximate score of the exact
 * maximum's vector). A vector's tables err by 2 npos independent roundings, each
 * uniform within half a step (variance step^2 / 12); St (plain pass) by the int8
 * roundings of the query row and of the centroid, at most qstep^2 |c|^2 / 12 +
 * cstep^2 |q|^2 / 12 with the index's largest |c| and cstep; the int8 rows (split pass)
 * likewise, without their head dimensions (tt_crows_query's qvar). */
static float lut_margin(const tt_search_ctx *c) {
    const uint32_t dim = c->idx->dim;
    double v = 0;
    for (uint32_t i = 0; i < c->nq; i++) {
        const double step = c->lut.scale[i];
        v += step * step * c->lut.npos / 6.0;
        const tt_cq *cq = &c->idx->cq;
        if (c->lut_plain && cq->stepmax > 0) {
            const float *q = c->Qp + (uint64_t)i * dim;
            double q2 = 0;
            for (uint32_t j = 0; j < dim; j++)
                q2 += (double)q[j] * q[j];
            const double qs = c->qscale[i], cs = cq->stepmax;
            v += (qs * qs * cq->c2max + cs * cs * q2) / 12.0;
        } else if (c->lut_rows) {
            v += c->rqs[c->nqp + i]; /* tt_crows_query's bound */
        }
    }
    return LUT_SIGMAS * (float)sqrt(v) * c->scale;
}

/* Whether stage 4 of the current query ranks by the lookup tables first, with the
 * tables built for this query and room for n approximate scores: with the split's
 * fused kernel (<q, C[c]> exact, from the float rows), or without the split where
 * stage 1 gave every centroid its own score (lut_plain: <q, C[c]> from St). */
static int lut_begin(tt_search_ctx *c, size_t n) {
    c->lut_pass = c->lut_plain = false;
    if (c->lut_off || !c->lut.npos || c->nqp % 4 || !c->lut.avx2)
        return TT_OK;
    if (!c->split_dot && (c->split || !c->st_every))
        return TT_OK;
    int st;
    if ((st = tt_grow((void **)&c->ascore, &c->ascore_cap, n, sizeof *c->ascore, "stage 4")) ||
        (st = tt_grow((void **)&c->aorder, &c->aorder_cap, n, sizeof *c->aorder, "stage 4")))
        return st;
    c->lut_plain = !c->split_dot;
    c->lut_rows = c->split_dot && c->idx->crows.data && !c->rows_off;
    if (c->lut_rows && (st = rows_alloc(c)))
        return st;
    if (c->lut_query != c->cfs_query) { /* the query's first batch */
        if ((st = tt_reslut_set(&c->lut, &c->dec, c->Qp, c->nqp)))
            return st;
        if (c->lut_rows && (st = tt_crows_query(&c->idx->crows, c->Qp, c->nqp, c->rq8, c->rqa,
                                                c->rqs, c->rqs + c->nqp)))
            return st;
        c->lut_margin = lut_margin(c);
        c->lut_query = c->cfs_query;
    }
    c->ascore_n = 0;
    c->lut_pass = true;
    return TT_OK;
}

/* The plain pass: each document's approximate MaxSim from St and the tables' <q, r>
 * (the split's MaxSim with St for the centroid scores). */
static void lut_plain_scores(tt_search_ctx *c, const uint64_t *docs, size_t n,
                             const uint8_t *const *ptr) {
    const tt_index *idx = c->idx;
    for (size_t t = 0; t < n; t++) {
        const uint64_t v0 = idx->doc_vec0[docs[t]];
        uint32_t len = idx->doclens[docs[t]];
        for (uint32_t j = 0; j < len; j++)
            c->rcodes[j] = tt_index_code(idx, v0 + j);
        tt_reslut_dot(&c->lut, &c->dec, ptr[t], len, c->Qp, c->R, c->QR);
        if (idx->vscale)
            tt_score_vscale_products(idx, c->Qp, c->nqp, ptr[t], v0, len, c->QR);
        float s;
        tt_maxsim_group_split(c->Qp, NULL, c->nq, c->nqp, idx->dim, NULL, &len, 1, c->rcodes, c->St,
                              c->nqp, c->QR, &s);
        c->ascore[c->ascore_n++] = s * c->scale;
    }
    c->st.scored_docs += n;
}

/* The exact pass: documents in order of their approximate scores, each scored exactly
 * (and pushed) while it could still enter the top k; then c->ascore holds every
 * document's score, exact where it was rescored. */
static void lut_rescore(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    c->lut_pass = false;
    for (size_t t = 0; t < n; t++)
        c->aorder[t] = (tt_hit){.doc = t, .score = c->ascore[t]};
    /* Best approximate score first, ties by position: sorted as far as it is read, in
     * chunks that double (most queries rescore a dozen documents of hundreds). */
    const float margin = c->lut_margin;
    size_t sorted = 0;
    for (size_t r = 0; r < n; r++) {
        if (r == sorted) {
            const size_t m = TT_MIN(n - r, TT_MAX((size_t)32, r));
            tt_hits_best(c->aorder + r, n - r, m);
            sorted = r + m;
        }
        const size_t t = c->aorder[r].doc;
        if (c->top.n == c->top.k && c->aorder[r].score + margin < c->top.h[0].score)
            break;
        score_packed(c, docs + t, 1, c->rptr + t);
        tt_score_flush(c);
        c->ascore[t] = c->gscores[0] * c->scale;
        c->st.rescored_docs++;
    }
}

/* PLAID stage 4: fetch the residuals of docs[0..n) and score them. */
int tt_score_docs(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    int st;
    if ((st = doc_ranges(c, docs, n)) || (st = split_begin(c)) || (st = lut_begin(c, n)))
        return st;
    const bool rec = c->rec_on;
    if (c->lut_pass)
        c->rec_on = false;
    double t0 = tt_now();
    st = tt_fetcher_start(c->fetch, n, c->roff, c->rlen, c->rptr);
    c->st.seconds_fetch += tt_now() - t0;
    for (size_t p = 0, m; !st && p < n; p += m) {
        uint64_t bytes = 0;
        for (m = 0; p + m < n && bytes < SCORE_CHUNK_BYTES; m++)
            bytes += c->rlen[p + m];
        t0 = tt_now();
        st = tt_fetcher_wait(c->fetch, p + m - 1);
        c->st.seconds_fetch += tt_now() - t0;
        if (!st && c->lut_plain)
            lut_plain_scores(c, docs + p, m, c->rptr + p);
        else if (!st)
            tt_score_packed(c, docs + p, m, c->rptr + p);
    }
    if (st) {
        /* A failed read: the unscored part of the group is dropped (the search fails). */
        c->gn = 0;
        c->grows = 0;
    } else {
        tt_score_flush(c);
    }
    if (!st && c->lut_pass) {
        lut_rescore(c, docs, n);
        c->rec_on = rec;
        for (size_t t = 0; rec && t < n; t++) /* rec has room: the caller reserved it */
            c->rec[c->rec_n++] = c->ascore[t];
    }
    c->rec_on = rec;
    c->lut_pass = c->lut_plain = c->lut_rows = false;
    c->split = c->split_dot = false;
    return st;
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
    tt_score_decode_add(c, c->rptr[0], len, c->gcodes, v0, out);
    return TT_OK;
}

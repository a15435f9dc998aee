/* The payload of a segment's sparse.tt (doc/format.md, "Sparse postings"): the
 * documents' lengths, the sorted term dictionary, per term its document frequency and
 * quantization scale, per block of 128 postings its last document, smallest length and
 * largest value, and the blocks: varint document gaps, then one byte per posting. */
#include "sparse/sparse.h"

#include <math.h>
#include <stdlib.h>

static size_t put_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

typedef struct sterm {
    const char *s;
    size_t len;
    uint32_t t;
} sterm;

static int cmp_term(const void *a, const void *b) {
    const sterm *x = a, *y = b;
    int c = memcmp(x->s, y->s, TT_MIN(x->len, y->len));
    return c ? c : (x->len < y->len ? -1 : x->len > y->len);
}

static uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

int tt_sparse_payload(const tt_sparse_set *set, uint64_t r0, uint64_t n, uint8_t **out,
                      uint64_t *len, uint64_t *a, uint64_t *b, uint64_t *c) {
    return tt_sparse_payload_scaled(set, r0, n, false, out, len, a, b, c);
}

int tt_sparse_payload_scaled(const tt_sparse_set *set, uint64_t r0, uint64_t n,
                             bool global_scale, uint8_t **out, uint64_t *len, uint64_t *a,
                             uint64_t *b, uint64_t *c) {
    return tt_sparse_payload_fixed(set, r0, n, global_scale, NULL, out, len, a, b, c);
}

/* The scale of term t: the given one (fixed[t] > 0), else the largest weight's / 255. */
static double term_scale(const float *fixed, const float *maxw, uint32_t t) {
    return fixed && fixed[t] > 0 ? (double)fixed[t] : (double)maxw[t] / 255.0;
}

int tt_sparse_payload_fixed(const tt_sparse_set *set, uint64_t r0, uint64_t n,
                            bool global_scale, const float *fixed, uint8_t **out,
                            uint64_t *len, uint64_t *a, uint64_t *b, uint64_t *c) {
    *out = NULL;
    if (r0 + n > set->n)
        return tt_err(TT_EINVAL, "sparse payload: records out of range");
    if (n > UINT32_MAX)
        return tt_err(TT_EINVAL, "sparse payload: more than 2^32 documents in one segment");
    uint32_t V = set->terms.n;
    uint64_t e0 = set->off[r0], e1 = set->off[r0 + n];
    int st = TT_ENOMEM;
    uint64_t *df = tt_calloc(V ? V : 1, sizeof *df, "sparse postings");
    float *maxw = tt_calloc(V ? V : 1, sizeof *maxw, "sparse postings");
    uint32_t *order = tt_alloc(V ? V : 1, sizeof *order, "sparse postings");
    uint32_t *rank = tt_alloc(V ? V : 1, sizeof *rank, "sparse postings");
    uint64_t *start = NULL, *fill = NULL;
    uint32_t *pdoc = NULL;
    uint8_t *pval = NULL, *p = NULL;
    if (!df || !maxw || !order || !rank)
        goto done;
    for (uint64_t e = e0; e < e1; e++) {
        df[set->term[e]]++;
        maxw[set->term[e]] = TT_MAX(maxw[set->term[e]], set->value[e]);
    }
    /* a shard of a sharded build: every term's scale is the whole set's, so that the
     * quantized weights are those of the unsharded index */
    for (uint64_t e = 0; global_scale && e < set->nent; e++)
        maxw[set->term[e]] = TT_MAX(maxw[set->term[e]], set->value[e]);
    /* the terms this segment uses, sorted bytewise */
    uint32_t T = 0;
    for (uint32_t t = 0; t < V; t++)
        if (df[t])
            order[T++] = t;
    sterm *srt = tt_alloc(T ? T : 1, sizeof *srt, "sparse postings");
    if (!srt)
        goto done;
    for (uint32_t i = 0; i < T; i++)
        srt[i] = (sterm){tt_st_str(&set->terms, order[i]), tt_st_len(&set->terms, order[i]),
                         order[i]};
    qsort(srt, T, sizeof *srt, cmp_term);
    for (uint32_t i = 0; i < T; i++)
        order[i] = srt[i].t;
    free(srt);
    for (uint32_t i = 0; i < T; i++)
        rank[order[i]] = i;
    /* postings grouped by term (counting sort, documents ascending within a term) */
    uint64_t P = e1 - e0;
    start = tt_alloc((uint64_t)T + 1, sizeof *start, "sparse postings");
    fill = tt_alloc(T ? T : 1, sizeof *fill, "sparse postings");
    pdoc = tt_alloc(P ? P : 1, sizeof *pdoc, "sparse postings");
    pval = tt_alloc(P ? P : 1, 1, "sparse postings");
    if (!start || !fill || !pdoc || !pval)
        goto done;
    start[0] = 0;
    uint64_t NB = 0;
    for (uint32_t i = 0; i < T; i++) {
        start[i + 1] = start[i] + df[order[i]];
        fill[i] = start[i];
        NB += (df[order[i]] + TT_SPARSE_BLOCK - 1) / TT_SPARSE_BLOCK;
    }
    for (uint64_t d = 0; d < n; d++)
        for (uint64_t e = set->off[r0 + d]; e < set->off[r0 + d + 1]; e++) {
            uint32_t t = set->term[e];
            uint32_t i = rank[t];
            uint8_t q;
            if (set->kind == TT_SPARSE_KIND_BM25) {
                double tf = nearbyint((double)set->value[e]);
                q = (uint8_t)(tf < 1 ? 1 : tf > 255 ? 255 : tf);
            } else {
                double scale = term_scale(fixed, maxw, t);
                double x = nearbyint((double)set->value[e] / scale);
                q = (uint8_t)(x < 1 ? 1 : x > 255 ? 255 : x);
            }
            pdoc[fill[i]] = (uint32_t)d;
            pval[fill[i]] = q;
            fill[i]++;
        }
    /* sizes */
    uint64_t blob = 0;
    for (uint32_t i = 0; i < T; i++)
        blob += tt_st_len(&set->terms, order[i]);
    uint64_t data = 0;
    for (uint64_t j = 0; j < P; j++)
        data += 6; /* upper bound: a varint of a u32 gap (5) + the value */
    uint64_t off_lens = TT_SPARSE_DIR_BYTES, off_toff = off_lens + pad8(4 * n);
    uint64_t off_blob = off_toff + 8 * ((uint64_t)T + 1), off_tt = off_blob + pad8(blob);
    uint64_t off_blk = off_tt + (uint64_t)TT_SPARSE_TERM_BYTES * T;
    uint64_t off_data = off_blk + TT_SPARSE_BLOCK_BYTES * NB;
    p = tt_calloc(off_data + data + 8, 1, "sparse.tt");
    if (!p)
        goto done;
    uint64_t total_len = 0;
    for (uint64_t d = 0; d < n; d++) {
        tt_wr32(p + off_lens + 4 * d, set->len[r0 + d]);
        total_len += set->len[r0 + d];
    }
    uint64_t bo = 0, blk = 0, w = 0;
    for (uint32_t i = 0; i < T; i++) {
        uint32_t t = order[i];
        size_t tl = tt_st_len(&set->terms, t);
        tt_wr64(p + off_toff + 8 * i, bo);
        memcpy(p + off_blob + bo, tt_st_str(&set->terms, t), tl);
        bo += tl;
        uint8_t *te = p + off_tt + TT_SPARSE_TERM_BYTES * i;
        tt_wr32(te, (uint32_t)df[t]);
        tt_wrf32(te + 4, set->kind == TT_SPARSE_KIND_BM25 ? 1.0f
                                                         : (float)term_scale(fixed, maxw, t));
        tt_wr64(te + 8, blk);
        uint64_t prev_last = 0;
        for (uint64_t j0 = start[i]; j0 < start[i + 1]; j0 += TT_SPARSE_BLOCK, blk++) {
            uint64_t j1 = TT_MIN(j0 + TT_SPARSE_BLOCK, start[i + 1]);
            uint8_t *be = p + off_blk + TT_SPARSE_BLOCK_BYTES * blk;
            uint32_t minlen = UINT32_MAX, maxv = 0;
            tt_wr64(be, w);
            for (uint64_t j = j0; j < j1; j++) {
                uint64_t gap = j == j0 ? (j0 == start[i] ? pdoc[j] : pdoc[j] - prev_last - 1)
                                       : pdoc[j] - pdoc[j - 1] - 1;
                w += put_varint(p + off_data + w, gap);
                minlen = TT_MIN(minlen, set->len[r0 + pdoc[j]]);
                maxv = TT_MAX(maxv, pval[j]);
            }
            for (uint64_t j = j0; j < j1; j++)
                p[off_data + w++] = pval[j];
            prev_last = pdoc[j1 - 1];
            tt_wr32(be + 8, pdoc[j1 - 1]);
            tt_wr32(be + 12, minlen);
            tt_wr32(be + 16, maxv);
        }
    }
    tt_wr64(p + off_toff + 8 * (uint64_t)T, bo);
    tt_wr64(p, NB);
    tt_wr64(p + 8, blob);
    tt_wr64(p + 16, w);
    tt_wr64(p + 24, total_len);
    *out = p;
    p = NULL;
    *len = off_data + w;
    *a = n;
    *b = T;
    *c = (uint64_t)set->kind;
    st = TT_OK;
done:
    free(df);
    free(maxw);
    free(order);
    free(rank);
    free(start);
    free(fill);
    free(pdoc);
    free(pval);
    free(p);
    return st;
}

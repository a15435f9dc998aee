/* Reading sparse.tt: the payload validated once, completely (every block decoded), so
 * that search can decode blocks without checks; term lookup; a block's decoding; and
 * the extraction of live documents for a compaction. */
#include "sparse/sparse.h"

#include <math.h>
#include <stdlib.h>

static int bad(const char *path, const char *what) {
    return tt_err(TT_ECORRUPT, "%s: sparse postings: %s", path, what);
}

static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static int term_cmp(const tt_sparse_seg *s, uint64_t i, const char *t, size_t n) {
    uint64_t o0 = tt_rd64(s->term_off + 8 * i), o1 = tt_rd64(s->term_off + 8 * (i + 1));
    size_t l = (size_t)(o1 - o0);
    int c = memcmp(s->blob + o0, t, TT_MIN(l, n));
    return c ? c : (l < n ? -1 : l > n);
}

int64_t tt_sparse_seg_find(const tt_sparse_seg *s, const char *t, size_t n) {
    uint64_t lo = 0, hi = s->T;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = term_cmp(s, mid, t, n);
        if (c == 0)
            return (int64_t)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

uint32_t tt_sparse_block_decode(const tt_sparse_seg *s, uint64_t first, uint32_t df, uint64_t blk,
                                uint32_t *docs, uint8_t *vals) {
    uint64_t j = blk - first;
    uint32_t n = (uint32_t)TT_MIN((uint64_t)TT_SPARSE_BLOCK, df - j * TT_SPARSE_BLOCK);
    const uint8_t *be = s->blocks + TT_SPARSE_BLOCK_BYTES * blk;
    const uint8_t *p = s->data + tt_rd64(be), *end = s->data + s->data_bytes;
    uint64_t prev = j == 0 ? 0 : (uint64_t)tt_rd32(be - TT_SPARSE_BLOCK_BYTES + 8) + 1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t g = 0;
        varint(&p, end, &g);
        uint64_t d = (i == 0 ? prev : (uint64_t)docs[i - 1] + 1) + g;
        docs[i] = (uint32_t)d;
    }
    memcpy(vals, p, n);
    return n;
}

int tt_sparse_seg_parse(tt_sparse_seg *s, const uint8_t *payload, uint64_t len, uint64_t a,
                        uint64_t b, uint64_t c, const char *path) {
    memset(s, 0, sizeof *s);
    if (c != TT_SPARSE_KIND_BM25 && c != TT_SPARSE_KIND_WEIGHTS && c != TT_SPARSE_KIND_IDS)
        return bad(path, "unknown kind");
    if (len < TT_SPARSE_DIR_BYTES)
        return bad(path, "payload too short");
    if (a > UINT32_MAX || b > UINT32_MAX)
        return bad(path, "too many documents or terms");
    s->D = a;
    s->T = b;
    s->kind = (uint32_t)c;
    s->NB = tt_rd64(payload);
    uint64_t blob = tt_rd64(payload + 8);
    s->data_bytes = tt_rd64(payload + 16);
    s->total_len = tt_rd64(payload + 24);
    if (s->NB > len || blob > len || s->data_bytes > len)
        return bad(path, "section sizes exceed the file");
    uint64_t off_lens = TT_SPARSE_DIR_BYTES, off_toff = off_lens + ((4 * s->D + 7) & ~7ull);
    uint64_t off_blob = off_toff + 8 * (s->T + 1), off_tt = off_blob + ((blob + 7) & ~7ull);
    uint64_t off_blk = off_tt + TT_SPARSE_TERM_BYTES * s->T;
    uint64_t off_data = off_blk + TT_SPARSE_BLOCK_BYTES * s->NB;
    if (off_data + s->data_bytes != len)
        return bad(path, "section sizes disagree with the payload length");
    s->lens = payload + off_lens;
    s->term_off = payload + off_toff;
    s->blob = (const char *)payload + off_blob;
    s->tterm = payload + off_tt;
    s->blocks = payload + off_blk;
    s->data = payload + off_data;
    uint64_t total = 0;
    for (uint64_t d = 0; d < s->D; d++)
        total += tt_sparse_seg_len(s, d);
    if (total != s->total_len)
        return bad(path, "document lengths do not add up to the recorded total");
    /* terms: offsets ascending from 0 to blob, non-empty, strictly increasing */
    if (tt_rd64(s->term_off) != 0 || tt_rd64(s->term_off + 8 * s->T) != blob)
        return bad(path, "term offsets do not span the term bytes");
    for (uint64_t i = 0; i < s->T; i++) {
        uint64_t o0 = tt_rd64(s->term_off + 8 * i), o1 = tt_rd64(s->term_off + 8 * (i + 1));
        if (o1 <= o0 || o1 > blob || o1 - o0 > TT_SPARSE_MAX_TERM)
            return bad(path, "a term is empty, too long or out of place");
        if (s->kind == TT_SPARSE_KIND_IDS && o1 - o0 != TT_SPARSE_ID_BYTES)
            return bad(path, "a term id is not 4 bytes");
        if (i > 0 && term_cmp(s, i - 1, s->blob + o0, (size_t)(o1 - o0)) >= 0)
            return bad(path, "terms are not sorted and distinct");
    }
    /* per term: blocks consecutive, each decoding to ascending documents < D */
    uint64_t blk = 0, dpos = 0;
    uint32_t docs[TT_SPARSE_BLOCK];
    for (uint64_t i = 0; i < s->T; i++) {
        uint32_t df = tt_sparse_seg_df(s, i);
        float scale = tt_sparse_seg_scale(s, i);
        if (df == 0 || df > s->D)
            return bad(path, "a term's document frequency is out of range");
        if (!isfinite(scale) || !(scale > 0))
            return bad(path, "a term's scale is not a positive finite number");
        if (s->kind == TT_SPARSE_KIND_BM25 && scale != 1.0f)
            return bad(path, "a BM25 term's scale is not 1");
        if (tt_sparse_seg_first_block(s, i) != blk)
            return bad(path, "a term's first block is out of place");
        uint64_t nb = (df + TT_SPARSE_BLOCK - 1) / TT_SPARSE_BLOCK;
        if (nb > s->NB - blk)
            return bad(path, "more blocks than the block table holds");
        int64_t prev = -1;
        for (uint64_t j = 0; j < nb; j++, blk++) {
            const uint8_t *be = s->blocks + TT_SPARSE_BLOCK_BYTES * blk;
            if (tt_rd64(be) != dpos)
                return bad(path, "a block's data offset is out of place");
            uint32_t n = (uint32_t)TT_MIN((uint64_t)TT_SPARSE_BLOCK, df - j * TT_SPARSE_BLOCK);
            const uint8_t *p = s->data + dpos, *end = s->data + s->data_bytes;
            uint32_t minlen = UINT32_MAX, maxv = 0;
            for (uint32_t k = 0; k < n; k++) {
                uint64_t g;
                if (!varint(&p, end, &g) || g > s->D)
                    return bad(path, "a document gap is truncated or too large");
                int64_t d = prev + 1 + (int64_t)g;
                if ((uint64_t)d >= s->D)
                    return bad(path, "a posting names a document past the segment");
                docs[k] = (uint32_t)d;
                prev = d;
                minlen = TT_MIN(minlen, tt_sparse_seg_len(s, (uint64_t)d));
            }
            if ((uint64_t)(end - p) < n)
                return bad(path, "a block's values are truncated");
            for (uint32_t k = 0; k < n; k++) {
                if (p[k] == 0)
                    return bad(path, "a posting has the value 0");
                maxv = TT_MAX(maxv, p[k]);
            }
            p += n;
            if (tt_rd32(be + 8) != docs[n - 1] || tt_rd32(be + 12) != minlen ||
                tt_rd32(be + 16) != maxv || tt_rd32(be + 20) != 0)
                return bad(path, "a block's summary disagrees with its postings");
            dpos = (uint64_t)(p - s->data);
        }
    }
    if (blk != s->NB || dpos != s->data_bytes)
        return bad(path, "blocks or bytes left over");
    return TT_OK;
}

int tt_sparse_seg_extract(const tt_sparse_seg *seg, const uint64_t *dead, tt_sparse_id_fn id,
                          void *user, tt_sparse_set *set) {
    if (set->kind != (int)seg->kind)
        return tt_err(TT_EINVAL, "sparse postings of different kinds cannot be merged");
    /* invert: per document its (term, value) pairs, via counts */
    uint64_t P = 0;
    for (uint64_t t = 0; t < seg->T; t++)
        P += tt_sparse_seg_df(seg, t);
    uint64_t *cnt = tt_calloc(seg->D + 1, sizeof *cnt, "compaction");
    uint64_t *fill = tt_alloc(seg->D + 1, sizeof *fill, "compaction");
    uint32_t *pt = tt_alloc(P ? P : 1, sizeof *pt, "compaction");
    float *pv = tt_alloc(P ? P : 1, sizeof *pv, "compaction");
    const char **tp = tt_alloc(P ? P : 1, sizeof *tp, "compaction");
    size_t *tl = tt_alloc(P ? P : 1, sizeof *tl, "compaction");
    int st = TT_ENOMEM;
    if (!cnt || !fill || !pt || !pv || !tp || !tl)
        goto done;
    uint32_t docs[TT_SPARSE_BLOCK];
    uint8_t vals[TT_SPARSE_BLOCK];
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            fill[0] = 0;
            for (uint64_t d = 0; d < seg->D; d++)
                fill[d + 1] = fill[d] + cnt[d];
            memcpy(cnt, fill, (seg->D + 1) * sizeof *cnt);
        }
        for (uint64_t t = 0; t < seg->T; t++) {
            uint32_t df = tt_sparse_seg_df(seg, t);
            uint64_t first = tt_sparse_seg_first_block(seg, t);
            uint64_t nb = (df + TT_SPARSE_BLOCK - 1) / TT_SPARSE_BLOCK;
            float scale = tt_sparse_seg_scale(seg, t);
            for (uint64_t j = 0; j < nb; j++) {
                uint32_t n = tt_sparse_block_decode(seg, first, df, first + j, docs, vals);
                for (uint32_t k = 0; k < n; k++) {
                    if (pass == 0) {
                        cnt[docs[k]]++;
                    } else {
                        uint64_t e = fill[docs[k]]++;
                        pt[e] = (uint32_t)t;
                        pv[e] = seg->kind == TT_SPARSE_KIND_BM25 ? (float)vals[k]
                                                                 : (float)((double)vals[k] * scale);
                    }
                }
            }
        }
    }
    /* fill[d] is now the end of d's pairs; cnt[d] its start */
    for (uint64_t d = 0; d < seg->D; d++) {
        if (tt_bit_get(dead, d))
            continue;
        uint64_t e0 = cnt[d], e1 = fill[d];
        for (uint64_t e = e0; e < e1; e++) {
            uint64_t o0 = tt_rd64(seg->term_off + 8 * pt[e]);
            tp[e - e0] = seg->blob + o0;
            tl[e - e0] = (size_t)(tt_rd64(seg->term_off + 8 * (pt[e] + 1)) - o0);
        }
        size_t idl;
        const char *ids = id(user, d, &idl);
        if ((st = tt_sparse_set_append(set, ids, idl, (uint32_t)(e1 - e0), tp, tl, pv + e0,
                                       tt_sparse_seg_len(seg, d), "compaction")))
            goto done;
        if (set->kind != TT_SPARSE_KIND_BM25) /* keep the stored length, not the count */
            set->len[set->n - 1] = tt_sparse_seg_len(seg, d);
    }
    st = TT_OK;
done:
    free(cnt);
    free(fill);
    free(pt);
    free(pv);
    free(tp);
    free(tl);
    return st;
}

/* The vocabulary of term ids stored in an index (vocab.tt, doc/format.md "Stored
 * vocabulary"): writing its payload from a set's vocabulary, reading and validating it
 * into a table, comparing two vocabularies, and mapping string terms to ids through one
 * (queries written as words against an index of term ids). */
#include "sparse/sparse.h"

#include <stdio.h>
#include <stdlib.h>

int tt_sparse_vocab_payload(const tt_strtab *v, uint8_t **out, uint64_t *len, uint64_t *a,
                            uint64_t *b) {
    *out = NULL;
    uint64_t V = v->n, L = 0;
    for (uint32_t i = 0; i < v->n; i++)
        L += tt_st_len(v, i);
    uint64_t n = 8 * (V + 1) + L;
    uint8_t *p = tt_calloc(n ? n : 1, 1, "vocab.tt");
    if (!p)
        return TT_ENOMEM;
    uint64_t o = 0;
    for (uint32_t i = 0; i < v->n; i++) {
        size_t tl = tt_st_len(v, i);
        tt_wr64(p + 8 * (uint64_t)i, o);
        memcpy(p + 8 * (V + 1) + o, tt_st_str(v, i), tl);
        o += tl;
    }
    tt_wr64(p + 8 * V, o);
    *out = p;
    *len = n;
    *a = V;
    *b = L;
    return TT_OK;
}

int tt_sparse_vocab_read(tt_strtab *v, const uint8_t *payload, uint64_t len, uint64_t a,
                         uint64_t b, uint64_t c, const char *path) {
    memset(v, 0, sizeof *v);
    if (c != 0)
        return tt_err(TT_ECORRUPT, "%s: vocabulary header field c is %llu (expected 0)", path,
                      (unsigned long long)c);
    if (a == 0 || a >= UINT32_MAX - 1)
        return tt_err(TT_ECORRUPT, "%s: a vocabulary of %llu terms", path,
                      (unsigned long long)a);
    if (b > len || (len - b) / 8 != a + 1 || (len - b) % 8)
        return tt_err(TT_ECORRUPT, "%s: %llu payload bytes for %llu terms of %llu bytes", path,
                      (unsigned long long)len, (unsigned long long)a, (unsigned long long)b);
    const char *blob = (const char *)payload + 8 * (a + 1);
    if (tt_rd64(payload) != 0 || tt_rd64(payload + 8 * a) != b)
        return tt_err(TT_ECORRUPT, "%s: term offsets do not span the term bytes", path);
    int st = TT_OK;
    for (uint64_t i = 0; i < a && !st; i++) {
        uint64_t o0 = tt_rd64(payload + 8 * i), o1 = tt_rd64(payload + 8 * (i + 1));
        if (o1 < o0 || o1 > b || o1 - o0 == 0 || o1 - o0 > TT_SPARSE_MAX_TERM) {
            st = tt_err(TT_ECORRUPT, "%s: term %llu has a bad offset or length", path,
                        (unsigned long long)i);
            break;
        }
        size_t tl = (size_t)(o1 - o0);
        if (memchr(blob + o0, 0, tl) || tt_utf8_invalid_at(blob + o0, tl) != SIZE_MAX) {
            st = tt_err(TT_ECORRUPT, "%s: term %llu is not UTF-8 without NUL", path,
                        (unsigned long long)i);
            break;
        }
        uint32_t id;
        bool added;
        if ((st = tt_st_intern(v, blob + o0, tl, &id, &added)))
            break;
        if (!added)
            st = tt_err(TT_ECORRUPT, "%s: term %llu repeats term %u", path,
                        (unsigned long long)i, id);
    }
    if (st)
        tt_st_free(v);
    return st;
}

int tt_sparse_vocab_compare(const tt_strtab *x, const tt_strtab *y, char *why, size_t n) {
    uint32_t m = TT_MIN(x->n, y->n);
    for (uint32_t i = 0; i < m; i++) {
        size_t lx = tt_st_len(x, i), ly = tt_st_len(y, i);
        if (lx != ly || memcmp(tt_st_str(x, i), tt_st_str(y, i), lx)) {
            snprintf(why, n, "term id %u is '%.*s' in one and '%.*s' in the other", i,
                     (int)TT_MIN(lx, 64), tt_st_str(x, i), (int)TT_MIN(ly, 64), tt_st_str(y, i));
            return 1;
        }
    }
    if (x->n != y->n) {
        snprintf(why, n, "one has %u terms, the other %u", x->n, y->n);
        return 1;
    }
    return 0;
}

int tt_sparse_vocab_copy(tt_sparse_set *s, const tt_strtab *v) {
    tt_st_free(&s->vocab);
    for (uint32_t i = 0; i < v->n; i++) {
        uint32_t id;
        int st = tt_st_intern(&s->vocab, tt_st_str(v, i), tt_st_len(v, i), &id, NULL);
        if (st)
            return st;
    }
    s->vocab_size = v->n;
    return TT_OK;
}

int tt_sparse_set_to_ids(const tt_sparse_set *in, const tt_strtab *v, tt_sparse_set **out) {
    *out = NULL;
    if (in->kind == TT_SPARSE_KIND_IDS)
        return tt_err(TT_EINVAL, "sparse set: already term ids");
    tt_sparse_set *s = NULL;
    uint32_t *tids = NULL;
    float *vals = NULL;
    int st = tt_sparse_set_new(&s, TT_SPARSE_KIND_IDS);
    if (!st)
        st = tt_sparse_vocab_copy(s, v);
    for (uint64_t r = 0; r < in->n && !st; r++) {
        uint64_t e0 = in->off[r], e1 = in->off[r + 1];
        free(tids);
        free(vals);
        tids = tt_alloc(e1 - e0 + 1, sizeof *tids, "sparse set");
        vals = tt_alloc(e1 - e0 + 1, sizeof *vals, "sparse set");
        if (!tids || !vals) {
            st = TT_ENOMEM;
            break;
        }
        uint32_t nt = 0;
        for (uint64_t e = e0; e < e1; e++) {
            uint32_t id = tt_st_find(v, tt_st_str(&in->terms, in->term[e]),
                                     tt_st_len(&in->terms, in->term[e]));
            if (id == TT_ST_NONE)
                continue; /* a word the vocabulary lacks matches no document */
            tids[nt] = id;
            vals[nt++] = in->value[e];
        }
        char where[160];
        snprintf(where, sizeof where, "sparse record %llu", (unsigned long long)r + 1);
        st = tt_sparse_set_append_ids(s, tt_st_str(&in->ids, (uint32_t)r),
                                      tt_st_len(&in->ids, (uint32_t)r), nt, tids, vals, where);
    }
    free(tids);
    free(vals);
    if (st) {
        tt_sparse_set_free(s);
        return st;
    }
    *out = s;
    return TT_OK;
}

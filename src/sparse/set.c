/* Sparse vectors in memory (tt_sparse_set): built from text by the BM25 tokenizer, or
 * appended term by term (JSON Lines input, encoders). */
#include "sparse/sparse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int tt_sparse_set_new(tt_sparse_set **out, int kind) {
    *out = NULL;
    if (kind != TT_SPARSE_KIND_BM25 && kind != TT_SPARSE_KIND_WEIGHTS && kind != TT_SPARSE_KIND_IDS)
        return tt_err(TT_EINVAL, "sparse set: unknown kind %d", kind);
    tt_sparse_set *s = tt_calloc(1, sizeof *s, "sparse set");
    if (!s)
        return TT_ENOMEM;
    s->kind = kind;
    s->off = tt_calloc(1, sizeof *s->off, "sparse set");
    if (!s->off) {
        free(s);
        return TT_ENOMEM;
    }
    *out = s;
    return TT_OK;
}

void tt_sparse_set_free(tt_sparse_set *s) {
    if (!s)
        return;
    tt_st_free(&s->terms);
    tt_st_free(&s->ids);
    tt_st_free(&s->vocab);
    free(s->off);
    free(s->term);
    free(s->value);
    free(s->len);
    free(s);
}

uint64_t tt_sparse_set_size(const tt_sparse_set *s) { return s ? s->n : 0; }

int tt_sparse_set_kind(const tt_sparse_set *s) { return s ? s->kind : 0; }

static int grow_rec(tt_sparse_set *s) {
    if (s->n + 1 < s->cap_rec)
        return TT_OK;
    uint64_t cap = s->cap_rec ? s->cap_rec * 2 : 1024;
    uint64_t *off = tt_regrow(s->off, cap + 1, sizeof *off, "sparse set");
    if (!off)
        return TT_ENOMEM;
    s->off = off;
    uint32_t *len = tt_regrow(s->len, cap, sizeof *len, "sparse set");
    if (!len)
        return TT_ENOMEM;
    s->len = len;
    s->cap_rec = cap;
    return TT_OK;
}

static int grow_ent(tt_sparse_set *s, uint64_t more) {
    if (s->nent + more <= s->cap_ent)
        return TT_OK;
    uint64_t cap = TT_MAX(s->cap_ent * 2, s->nent + more);
    cap = TT_MAX(cap, 4096);
    uint32_t *t = tt_regrow(s->term, cap, sizeof *t, "sparse set");
    if (!t)
        return TT_ENOMEM;
    s->term = t;
    float *v = tt_regrow(s->value, cap, sizeof *v, "sparse set");
    if (!v)
        return TT_ENOMEM;
    s->value = v;
    s->cap_ent = cap;
    return TT_OK;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts n (term, value) pairs by term, stably. */
static void insertion_sort(uint32_t *t, float *v, uint64_t n) {
    for (uint64_t i = 1; i < n; i++) {
        uint32_t tt = t[i];
        float vv = v[i];
        uint64_t j = i;
        while (j > 0 && t[j - 1] > tt) {
            t[j] = t[j - 1];
            v[j] = v[j - 1];
            j--;
        }
        t[j] = tt;
        v[j] = vv;
    }
}

/* Sorts the new record's entries by term id and merges repeats (values add). */
static void merge_record(tt_sparse_set *s, uint64_t e0) {
    uint64_t n = s->nent - e0;
    if (n < 2)
        return;
    /* sort pairs by term: pack (term, index) into u64 keys to keep it simple */
    uint32_t *t = s->term + e0;
    float *v = s->value + e0;
    /* insertion sort for short records, else a sort of packed keys */
    if (n <= 32) {
        insertion_sort(t, v, n);
    } else {
        /* values are attached through a temporary array of (term, slot) */
        uint32_t *pair = malloc(2 * n * sizeof *pair);
        float *tmp = malloc(n * sizeof *tmp);
        if (!pair || !tmp) { /* fall back to the quadratic sort: correct, only slower */
            free(pair);
            free(tmp);
            insertion_sort(t, v, n);
        } else {
            for (uint64_t i = 0; i < n; i++) {
                pair[2 * i] = t[i];
                pair[2 * i + 1] = (uint32_t)i;
            }
            qsort(pair, n, 2 * sizeof *pair, cmp_u32); /* compares the first u32: term */
            for (uint64_t i = 0; i < n; i++)
                tmp[i] = v[pair[2 * i + 1]];
            for (uint64_t i = 0; i < n; i++) {
                t[i] = pair[2 * i];
                v[i] = tmp[i];
            }
            free(pair);
            free(tmp);
        }
    }
    uint64_t w = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (w > 0 && t[w - 1] == t[i]) {
            v[w - 1] += v[i];
        } else {
            t[w] = t[i];
            v[w] = v[i];
            w++;
        }
    }
    s->nent = e0 + w;
}

static int begin_record(tt_sparse_set *s, const char *id, size_t id_len, const char *where) {
    const char *why = tt_id_problem(id, id_len, 4096);
    if (why)
        return tt_err(TT_EVALUE, "%s: bad id: %s", where, why);
    uint32_t idn;
    bool added;
    int st = tt_st_intern(&s->ids, id, id_len, &idn, &added);
    if (st)
        return st;
    if (!added)
        return tt_err(TT_EVALUE, "%s: id '%.*s' appears twice", where, (int)TT_MIN(id_len, 200),
                      id);
    return grow_rec(s);
}

static void end_record(tt_sparse_set *s, uint64_t e0, uint32_t len) {
    merge_record(s, e0);
    s->len[s->n] = len;
    s->n++;
    s->off[s->n] = s->nent;
}

/* The checks of one record's (term, weight) pairs, before anything is appended: every
 * way a record comes in (JSON Lines, an encoder's sparse parts through tt_sparse_set_add,
 * term ids, a compaction) goes through here. */
static int check_pairs(const tt_sparse_set *s, uint32_t nt, const char *const *terms,
                       const size_t *term_lens, const float *values, const char *where) {
    for (uint32_t i = 0; i < nt; i++) {
        if (s->kind == TT_SPARSE_KIND_IDS) { /* 4-byte keys (tt_sparse_set_append_ids) */
            if (term_lens[i] != TT_SPARSE_ID_BYTES)
                return tt_err(TT_EINVAL, "%s: a term id key of %zu bytes", where, term_lens[i]);
            if (s->vocab_size && tt_sparse_key_id(terms[i]) >= s->vocab_size)
                return tt_err(TT_EVALUE, "%s: term id %u is past the vocabulary (%llu terms, "
                              "ids 0..%llu)", where, tt_sparse_key_id(terms[i]),
                              (unsigned long long)s->vocab_size,
                              (unsigned long long)s->vocab_size - 1);
        } else if (term_lens[i] == 0)
            return tt_err(TT_EVALUE, "%s: an empty term", where);
        else if (term_lens[i] > TT_SPARSE_MAX_TERM)
            return tt_err(TT_EVALUE, "%s: term '%.40s...' longer than %u bytes", where, terms[i],
                          TT_SPARSE_MAX_TERM);
        else if (tt_utf8_invalid_at(terms[i], term_lens[i]) != SIZE_MAX)
            return tt_err(TT_EVALUE, "%s: term is not valid UTF-8", where);
        if (!isfinite(values[i]) || values[i] < 0) {
            char name[96];
            if (s->kind == TT_SPARSE_KIND_IDS)
                snprintf(name, sizeof name, "term id %u", tt_sparse_key_id(terms[i]));
            else
                snprintf(name, sizeof name, "term '%.*s'", (int)TT_MIN(term_lens[i], 64),
                         terms[i]);
            if (!isfinite(values[i]))
                return tt_err(TT_EVALUE, "%s: %s has a non-finite weight (%g)", where, name,
                              (double)values[i]);
            return tt_err(TT_EVALUE, "%s: %s has a negative weight (%g); sparse weights must "
                          "be >= 0", where, name, (double)values[i]);
        }
    }
    return TT_OK;
}

int tt_sparse_set_append(tt_sparse_set *s, const char *id, size_t id_len, uint32_t nt,
                         const char *const *terms, const size_t *term_lens,
                         const float *values, uint32_t len, const char *where) {
    int st = check_pairs(s, nt, terms, term_lens, values, where);
    if (st || (st = begin_record(s, id, id_len, where)) || (st = grow_ent(s, nt)))
        return st;
    uint64_t e0 = s->nent;
    for (uint32_t i = 0; i < nt; i++) {
        if (values[i] == 0)
            continue;
        uint32_t t;
        if ((st = tt_st_intern(&s->terms, terms[i], term_lens[i], &t, NULL)))
            return st;
        s->term[s->nent] = t;
        s->value[s->nent] = values[i];
        s->nent++;
    }
    merge_record(s, e0);
    for (uint64_t e = e0; e < s->nent; e++)
        if (!isfinite(s->value[e]))
            return tt_err(TT_EVALUE, "%s: the weights of a repeated term add up to more than a "
                          "float holds", where);
    /* the length: the caller's, else the number of distinct terms */
    end_record(s, e0, len ? len : (uint32_t)TT_MIN(s->nent - e0, UINT32_MAX));
    return TT_OK;
}

int tt_sparse_set_append_ids(tt_sparse_set *s, const char *id, size_t id_len, uint32_t nt,
                             const uint32_t *tids, const float *values, const char *where) {
    if (s->kind != TT_SPARSE_KIND_IDS)
        return tt_err(TT_EINVAL, "%s: term ids in a set of string terms", where);
    unsigned char *keys = tt_alloc(nt ? nt : 1, TT_SPARSE_ID_BYTES, "sparse set");
    const char **tp = tt_alloc(nt ? nt : 1, sizeof *tp, "sparse set");
    size_t *tl = tt_alloc(nt ? nt : 1, sizeof *tl, "sparse set");
    int st = TT_ENOMEM;
    if (keys && tp && tl) {
        for (uint32_t i = 0; i < nt; i++) {
            unsigned char *k = keys + (size_t)TT_SPARSE_ID_BYTES * i;
            k[0] = (unsigned char)(tids[i] >> 24);
            k[1] = (unsigned char)(tids[i] >> 16);
            k[2] = (unsigned char)(tids[i] >> 8);
            k[3] = (unsigned char)tids[i];
            tp[i] = (const char *)k;
            tl[i] = TT_SPARSE_ID_BYTES;
        }
        st = tt_sparse_set_append(s, id, id_len, nt, tp, tl, values, 0, where);
    }
    free(keys);
    free(tp);
    free(tl);
    return st;
}

int tt_sparse_tokenize(const char *text, size_t n, tt_token_fn fn, void *user, uint64_t *ntok) {
    char buf[TT_SPARSE_MAX_TERM];
    uint64_t count = 0;
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)text[i];
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (!alnum) {
            i++;
            continue;
        }
        size_t len = 0;
        while (i < n) {
            c = (unsigned char)text[i];
            if (c >= 'A' && c <= 'Z')
                c = (unsigned char)(c - 'A' + 'a');
            else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z')))
                break;
            if (len < sizeof buf)
                buf[len++] = (char)c;
            i++;
        }
        count++;
        int st = fn(user, buf, len);
        if (st)
            return st;
    }
    if (ntok)
        *ntok = count;
    return TT_OK;
}

typedef struct text_ctx {
    tt_sparse_set *s;
} text_ctx;

static int add_token(void *user, const char *tok, size_t len) {
    tt_sparse_set *s = user;
    uint32_t t;
    int st = tt_st_intern(&s->terms, tok, len, &t, NULL);
    if (st || (st = grow_ent(s, 1)))
        return st;
    s->term[s->nent] = t;
    s->value[s->nent] = 1.0f;
    s->nent++;
    return TT_OK;
}

int tt_sparse_set_append_text(tt_sparse_set *s, const char *id, size_t id_len,
                              const char *text, size_t n, const char *where) {
    int st = begin_record(s, id, id_len, where);
    if (st)
        return st;
    uint64_t e0 = s->nent, ntok = 0;
    if ((st = tt_sparse_tokenize(text, n, add_token, s, &ntok)))
        return st;
    if (ntok > UINT32_MAX)
        return tt_err(TT_EVALUE, "%s: more than 2^32 tokens", where);
    end_record(s, e0, (uint32_t)ntok);
    return TT_OK;
}

int tt_sparse_set_new_weights(tt_sparse_set **out) {
    return tt_sparse_set_new(out, TT_SPARSE_KIND_WEIGHTS);
}

int tt_sparse_set_add(tt_sparse_set *s, const char *id, size_t id_len, uint32_t n,
                      const char *const *terms, const size_t *term_lens, const float *weights) {
    if (!s || !id || (n && (!terms || !term_lens || !weights)))
        return tt_err(TT_EINVAL, "tt_sparse_set_add: NULL argument");
    char where[160];
    snprintf(where, sizeof where, "sparse record %llu '%.*s'", (unsigned long long)s->n + 1,
             (int)TT_MIN(id_len, 100), id);
    return tt_sparse_set_append(s, id, id_len, n, terms, term_lens, weights, 0, where);
}

/* Sparse sets from files: BM25 term counts of text records (BEIR .jsonl or TSV, the
 * encoder's record reader), and precomputed sparse vectors from JSON Lines
 * {"id": ..., "terms": {"term": weight, ...}} (doc/search.md, "Hybrid retrieval"). */
#include "input/records.h"
#include "sparse/sparse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int tt_sparse_set_load_text(tt_sparse_set **out, const char *path, int query) {
    *out = NULL;
    tt_records *r = NULL;
    tt_sparse_set *s = NULL;
    int st = tt_records_open(&r, path, TT_REC_AUTO, query ? TT_ENC_QUERY : TT_ENC_PASSAGE);
    if (st || (st = tt_sparse_set_new(&s, TT_SPARSE_KIND_BM25)))
        goto done;
    tt_record rec;
    char where[600];
    while ((st = tt_records_next(r, &rec)) == 1) {
        snprintf(where, sizeof where, "%s:%llu", path, (unsigned long long)tt_records_line(r));
        if ((st = tt_sparse_set_append_text(s, rec.id, rec.id_len, rec.text, rec.text_len, where)))
            goto done;
    }
    if (st == 0 && s->n == 0)
        st = tt_err(TT_EFORMAT, "%s: no records", path);
done:
    tt_records_close(r);
    if (st) {
        tt_sparse_set_free(s);
        return st;
    }
    *out = s;
    return TT_OK;
}

/* ---------------------------------------------------- a small JSON reader */

typedef struct jcur {
    const char *p, *end;
    const char *what;
} jcur;

static void ws(jcur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

static int fail(jcur *c, const char *what) {
    c->what = what;
    return TT_EPARSE;
}

static int put_cp(tt_sbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return tt_sbuf_append(b, u, n);
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = p[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0'
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A string into out (decoded; out may be NULL to skip). */
static int jstring(jcur *c, tt_sbuf *out) {
    if (c->p >= c->end || *c->p != '"')
        return fail(c, "expected a string");
    c->p++;
    if (out)
        out->len = 0;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20)
            return fail(c, "control character in a string");
        if (ch != '\\') {
            if (out && tt_sbuf_append(out, c->p, 1))
                return TT_ENOMEM;
            c->p++;
            continue;
        }
        if (c->end - c->p < 2)
            return fail(c, "unterminated escape");
        char e = c->p[1];
        c->p += 2;
        char lit = e == '"' ? '"' : e == '\\' ? '\\' : e == '/' ? '/' : e == 'b' ? '\b'
                 : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : 0;
        if (lit) {
            if (out && tt_sbuf_append(out, &lit, 1))
                return TT_ENOMEM;
            continue;
        }
        if (e != 'u')
            return fail(c, "bad escape");
        uint32_t cp;
        if (c->end - c->p < 4 || hex4(c->p, &cp))
            return fail(c, "bad \\u escape");
        c->p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && c->end - c->p >= 6 && c->p[0] == '\\' &&
            c->p[1] == 'u') {
            uint32_t lo;
            if (!hex4(c->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                c->p += 6;
            }
        }
        if (cp >= 0xD800 && cp < 0xE000)
            cp = 0xFFFD;
        if (out && put_cp(out, cp))
            return TT_ENOMEM;
    }
    if (c->p >= c->end)
        return fail(c, "unterminated string");
    c->p++;
    return TT_OK;
}

/* A number (strtod over a copy; JSON syntax only loosely checked, the value must parse). */
static int jnumber(jcur *c, double *v) {
    char buf[64];
    size_t n = 0;
    while (c->p + n < c->end && n < sizeof buf - 1 &&
           strchr("+-0123456789.eE", c->p[n]) && c->p[n])
        n++;
    if (n == 0)
        return fail(c, "expected a number");
    memcpy(buf, c->p, n);
    buf[n] = 0;
    char *e;
    errno = 0;
    double x = strtod(buf, &e);
    if (e != buf + n)
        return fail(c, "bad number");
    c->p += n;
    *v = x;
    return TT_OK;
}

static int jskip(jcur *c, int depth) {
    ws(c);
    if (c->p >= c->end)
        return fail(c, "expected a value");
    if (depth > 64)
        return fail(c, "nested too deeply");
    char ch = *c->p;
    if (ch == '"')
        return jstring(c, NULL);
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++;
        ws(c);
        if (c->p < c->end && *c->p == close) {
            c->p++;
            return TT_OK;
        }
        for (;;) {
            int st;
            if (ch == '{') {
                ws(c);
                if ((st = jstring(c, NULL)))
                    return st;
                ws(c);
                if (c->p >= c->end || *c->p != ':')
                    return fail(c, "expected ':'");
                c->p++;
            }
            if ((st = jskip(c, depth + 1)))
                return st;
            ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (c->p < c->end && *c->p == close) {
                c->p++;
                return TT_OK;
            }
            return fail(c, "expected ',' or a closing bracket");
        }
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if ((size_t)(c->end - c->p) >= n && !memcmp(c->p, lits[i], n)) {
            c->p += n;
            return TT_OK;
        }
    }
    double v;
    return jnumber(c, &v);
}

typedef struct jline {
    tt_sbuf key, id, terms;     /* terms: decoded strings back to back */
    size_t *tlen;
    float *w;
    size_t nt, cap;
    bool has_id, has_terms, has_ids; /* has_ids: the pairs came as "term_ids" */
    uint32_t *tid;                   /* has_ids or a vocabulary: the pairs' term ids */
    size_t tid_cap;
} jline;

static int parse_terms(jcur *c, jline *L) {
    ws(c);
    if (c->p >= c->end || *c->p != '{')
        return fail(c, "\"terms\" (\"term_ids\") must be an object of term (id): weight");
    c->p++;
    L->nt = 0;
    L->terms.len = 0;
    ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
        return TT_OK;
    }
    tt_sbuf t = {0};
    int st = TT_OK;
    for (;;) {
        ws(c);
        st = jstring(c, &t);
        if (st)
            goto out;
        ws(c);
        if (c->p >= c->end || *c->p != ':') {
            st = fail(c, "expected ':'");
            goto out;
        }
        c->p++;
        ws(c);
        double v;
        if (c->p < c->end && (*c->p == 'N' || *c->p == 'I' || *c->p == 'n' ||
                              (*c->p == '-' && c->end - c->p > 1 && c->p[1] == 'I'))) {
            st = fail(c, "weight is not a number (NaN and Infinity are refused)");
            goto out;
        }
        if ((st = jnumber(c, &v)))
            goto out;
        if (L->nt == L->cap) {
            size_t cap = L->cap ? 2 * L->cap : 64;
            size_t *tl = realloc(L->tlen, cap * sizeof *tl);
            if (!tl) {
                st = TT_ENOMEM;
                goto out;
            }
            L->tlen = tl;
            float *w = realloc(L->w, cap * sizeof *w);
            if (!w) {
                st = TT_ENOMEM;
                goto out;
            }
            L->w = w;
            L->cap = cap;
        }
        if ((st = tt_sbuf_append(&L->terms, t.p ? t.p : "", t.len)))
            goto out;
        L->tlen[L->nt] = t.len;
        L->w[L->nt] = (float)v;
        if (isfinite(v) && !isfinite(L->w[L->nt]))
            L->w[L->nt] = (float)v; /* out of float range: inf, refused by the caller */
        L->nt++;
        ws(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end && *c->p == '}') {
            c->p++;
            break;
        }
        st = fail(c, "expected ',' or '}'");
        goto out;
    }
out:
    tt_sbuf_free(&t);
    return st;
}

static int parse_line(jcur *c, jline *L) {
    L->has_id = L->has_terms = L->has_ids = false;
    ws(c);
    if (c->p >= c->end || *c->p != '{')
        return fail(c, "expected a JSON object");
    c->p++;
    ws(c);
    if (c->p < c->end && *c->p == '}')
        c->p++;
    else
        for (;;) {
            ws(c);
            int st = jstring(c, &L->key);
            if (st)
                return st;
            ws(c);
            if (c->p >= c->end || *c->p != ':')
                return fail(c, "expected ':'");
            c->p++;
            ws(c);
            bool is_id = (L->key.len == 2 && !memcmp(L->key.p, "id", 2)) ||
                         (L->key.len == 3 && !memcmp(L->key.p, "_id", 3));
            bool is_terms = L->key.len == 5 && !memcmp(L->key.p, "terms", 5);
            bool is_ids = L->key.len == 8 && !memcmp(L->key.p, "term_ids", 8);
            if ((is_terms || is_ids) && (L->has_terms || L->has_ids))
                return fail(c, "more than one of \"terms\" and \"term_ids\"");
            if (is_id) {
                if ((st = jstring(c, &L->id)))
                    return fail(c, "\"id\" must be a string");
                L->has_id = true;
            } else if (is_terms || is_ids) {
                if ((st = parse_terms(c, L)))
                    return st;
                L->has_terms = is_terms;
                L->has_ids = is_ids;
            } else if ((st = jskip(c, 0))) {
                return st;
            }
            ws(c);
            if (c->p < c->end && *c->p == ',') {
                c->p++;
                continue;
            }
            if (c->p < c->end && *c->p == '}') {
                c->p++;
                break;
            }
            return fail(c, "expected ',' or '}'");
        }
    ws(c);
    if (c->p != c->end)
        return fail(c, "text after the object");
    if (!L->has_id)
        return fail(c, "no \"id\"");
    if (!L->has_terms && !L->has_ids)
        return fail(c, "no \"terms\" (or \"term_ids\")");
    return TT_OK;
}

/* The term ids of line L into L->tid: "term_ids" keys are decimal integers 0..2^32-1;
 * string "terms" are looked up in the set's vocabulary (refused without one). */
static int ids_of(tt_sparse_set *s, jline *L, const char *const *tp, const char *where) {
    if (L->nt > L->tid_cap) {
        uint32_t *t = realloc(L->tid, L->nt * sizeof *t);
        if (!t)
            return tt_err(TT_ENOMEM, "%s: out of memory", where);
        L->tid = t;
        L->tid_cap = L->nt;
    }
    for (size_t i = 0; i < L->nt; i++) {
        const char *k = tp[i];
        size_t n = L->tlen[i];
        if (L->has_ids) {
            uint64_t v = 0;
            bool okn = n > 0 && n <= 10 && (n == 1 || k[0] != '0');
            for (size_t j = 0; okn && j < n; j++) {
                okn = k[j] >= '0' && k[j] <= '9';
                v = v * 10 + (uint64_t)(k[j] - '0');
            }
            if (!okn || v > UINT32_MAX)
                return tt_err(TT_EVALUE, "%s: term id '%.*s' is not a decimal integer in "
                              "0..4294967295", where, (int)TT_MIN(n, 40), k);
            L->tid[i] = (uint32_t)v;
        } else {
            uint32_t id = s->vocab_size ? tt_st_find(&s->vocab, k, n) : TT_ST_NONE;
            if (!s->vocab_size)
                return tt_err(TT_EVALUE, "%s: string \"terms\" after records with \"term_ids\" "
                              "(a vocabulary maps strings to ids)", where);
            if (id == TT_ST_NONE)
                return tt_err(TT_EVALUE, "%s: term '%.*s' is not in the vocabulary", where,
                              (int)TT_MIN(n, 64), k);
            L->tid[i] = id;
        }
    }
    return TT_OK;
}

int tt_sparse_set_parse_jsonl(tt_sparse_set *s, const char *data, size_t n, const char *path) {
    jline L = {0};
    const char **tp = NULL;
    int st = TT_OK;
    uint64_t lineno = 0;
    const char *p = data, *end = data + n;
    char where[600];
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        lineno++;
        jcur c = {.p = p, .end = le};
        ws(&c);
        if (c.p == le) { /* blank line */
            p = nl ? nl + 1 : end;
            continue;
        }
        snprintf(where, sizeof where, "%s:%llu", path, (unsigned long long)lineno);
        if (memchr(p, 0, (size_t)(le - p))) {
            st = tt_err(TT_EPARSE, "%s: NUL byte", where);
            break;
        }
        if ((st = parse_line(&c, &L))) {
            if (st == TT_EPARSE)
                st = tt_err(TT_EPARSE, "%s: column %zu: %s", where, (size_t)(c.p - p) + 1,
                            c.what ? c.what : "syntax error");
            else
                st = tt_err(st, "%s: out of memory", where);
            break;
        }
        free(tp);
        tp = malloc((L.nt ? L.nt : 1) * sizeof *tp);
        if (!tp) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", where);
            break;
        }
        size_t o = 0;
        for (size_t i = 0; i < L.nt; i++) {
            tp[i] = L.terms.p + o;
            o += L.tlen[i];
        }
        if (L.nt > UINT32_MAX) {
            st = tt_err(TT_EVALUE, "%s: too many terms", where);
            break;
        }
        if (L.has_ids && s->kind == TT_SPARSE_KIND_WEIGHTS && s->n == 0)
            s->kind = TT_SPARSE_KIND_IDS; /* the first record decides */
        if (L.has_ids && s->kind != TT_SPARSE_KIND_IDS) {
            st = tt_err(TT_EVALUE, "%s: \"term_ids\" after records with string \"terms\"",
                        where);
            break;
        }
        if (s->kind == TT_SPARSE_KIND_IDS) {
            if ((st = ids_of(s, &L, tp, where)))
                break;
            st = tt_sparse_set_append_ids(s, L.id.p ? L.id.p : "", L.id.len, (uint32_t)L.nt,
                                          L.tid, L.w, where);
        } else {
            st = tt_sparse_set_append(s, L.id.p ? L.id.p : "", L.id.len, (uint32_t)L.nt, tp,
                                      L.tlen, L.w, 0, where);
        }
        if (st)
            break;
        p = nl ? nl + 1 : end;
    }
    free(tp);
    free(L.tlen);
    free(L.w);
    free(L.tid);
    tt_sbuf_free(&L.key);
    tt_sbuf_free(&L.id);
    tt_sbuf_free(&L.terms);
    return st;
}

static int slurp(const char *path, tt_sbuf *b) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return tt_err_errno(TT_EIO, errno, "%s", path);
    char buf[65536];
    size_t got;
    int st = TT_OK;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0)
        if ((st = tt_sbuf_append(b, buf, got)))
            break;
    if (!st && ferror(f))
        st = tt_err_errno(TT_EIO, errno, "%s: read", path);
    fclose(f);
    return st;
}

int tt_sparse_vocab_parse(tt_sparse_set *s, const char *data, size_t n, const char *path) {
    const char *p = data, *end = data + n;
    uint64_t line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        size_t len = (size_t)(le - p);
        if (len && p[len - 1] == '\r')
            len--;
        const char *why = len == 0 ? "an empty term"
                          : len > TT_SPARSE_MAX_TERM ? "a term longer than 256 bytes"
                          : memchr(p, 0, len) ? "a NUL byte"
                          : tt_utf8_invalid_at(p, len) != SIZE_MAX ? "a term that is not UTF-8"
                                                                  : NULL;
        if (why)
            return tt_err(TT_EVALUE, "%s:%llu: %s (a vocabulary is one term per line, term id "
                          "= line number - 1)", path, (unsigned long long)line, why);
        uint32_t id;
        bool added;
        int st = tt_st_intern(&s->vocab, p, len, &id, &added);
        if (st)
            return st;
        if (!added)
            return tt_err(TT_EVALUE, "%s:%llu: term '%.*s' repeats line %u", path,
                          (unsigned long long)line, (int)TT_MIN(len, 64), p, id + 1);
        p = nl ? nl + 1 : end;
    }
    if (line == 0)
        return tt_err(TT_EFORMAT, "%s: an empty vocabulary", path);
    s->vocab_size = line;
    return TT_OK;
}

int tt_sparse_set_load_jsonl_vocab(tt_sparse_set **out, const char *path, const char *vocab) {
    return tt_sparse_set_load_jsonl_stored(out, path, vocab, NULL, NULL);
}

int tt_sparse_set_load_jsonl_stored(tt_sparse_set **out, const char *path, const char *vocab,
                                    const tt_strtab *stored, const char *stored_path) {
    if (!out || !path)
        return tt_err(TT_EINVAL, "tt_sparse_set_load_jsonl: NULL argument");
    *out = NULL;
    tt_sbuf b = {0};
    int st = TT_OK;
    tt_sparse_set *s = NULL;
    if (stored && !stored->n)
        stored = NULL;
    if (!(st = tt_sparse_set_new(&s, vocab || stored ? TT_SPARSE_KIND_IDS
                                                     : TT_SPARSE_KIND_WEIGHTS)) &&
        vocab && !(st = slurp(vocab, &b))) {
        st = tt_sparse_vocab_parse(s, b.p ? b.p : "", b.len, vocab);
        b.len = 0;
        char why[300];
        if (!st && stored && tt_sparse_vocab_compare(&s->vocab, stored, why, sizeof why))
            st = tt_err(TT_EVALUE, "%s is not the vocabulary stored in %s (%s); leave --vocab "
                        "out to use the stored one", vocab, stored_path ? stored_path : "the index",
                        why);
    } else if (!st && stored) {
        st = tt_sparse_vocab_copy(s, stored);
    }
    if (!st)
        st = slurp(path, &b);
    if (!st)
        st = tt_sparse_set_parse_jsonl(s, b.p ? b.p : "", b.len, path);
    if (!st && s->n == 0)
        st = tt_err(TT_EFORMAT, "%s: no records", path);
    tt_sbuf_free(&b);
    if (st) {
        tt_sparse_set_free(s);
        return st;
    }
    *out = s;
    return TT_OK;
}

int tt_sparse_set_load_jsonl(tt_sparse_set **out, const char *path) {
    return tt_sparse_set_load_jsonl_vocab(out, path, NULL);
}

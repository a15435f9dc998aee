/* A JSON member extractor for one object per line (BEIR .jsonl records): strict
 * RFC 8259 syntax, string values decoded to UTF-8, everything else skipped. */
#include "input/records.h"

#include <stdlib.h>

/* A recursive-descent reader of RFC 8259 JSON, just enough to pull string members out
 * of one flat object per line (BEIR corpus.jsonl / queries.jsonl). Values of other
 * members are validated and skipped. */

#define JSON_MAX_DEPTH 256

typedef struct json_cur {
    const char *s;
    size_t n, i;
    const char *what; /* first error */
} json_cur;

static void json_ws(json_cur *c) {
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' ||
                           c->s[c->i] == '\r'))
        c->i++;
}

static int json_fail(json_cur *c, const char *what) {
    c->what = what;
    return TT_EPARSE;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        char h = p[k];
        int d = h >= '0' && h <= '9' ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static int put_utf8(tt_sbuf *b, uint32_t cp) {
    char u[4];
    size_t k;
    if (cp < 0x80) {
        u[0] = (char)cp;
        k = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        k = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        k = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        k = 4;
    }
    return tt_sbuf_append(b, u, k);
}

/* String at c->i (which is '"'); decoded into out unless out is NULL. */
static int json_string(json_cur *c, tt_sbuf *out) {
    c->i++;
    for (;;) {
        if (c->i >= c->n)
            return json_fail(c, "unterminated string");
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == '"') {
            c->i++;
            return TT_OK;
        }
        if (ch < 0x20)
            return json_fail(c, "control character inside a string");
        if (ch != '\\') {
            size_t q = c->i;
            while (q < c->n && c->s[q] != '"' && c->s[q] != '\\' && (unsigned char)c->s[q] >= 0x20)
                q++;
            if (out && tt_sbuf_append(out, c->s + c->i, q - c->i))
                return TT_ENOMEM;
            c->i = q;
            continue;
        }
        if (c->i + 1 >= c->n)
            return json_fail(c, "unterminated string");
        char e = c->s[c->i + 1];
        c->i += 2;
        char lit;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            int u1 = c->i + 4 <= c->n ? hex4(c->s + c->i) : -1;
            if (u1 < 0)
                return json_fail(c, "bad \\u escape");
            c->i += 4;
            uint32_t cp = (uint32_t)u1;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                /* UTF-16 surrogate pair -> one code point; a lone high surrogate is
                 * replaced (it has no UTF-8 encoding). */
                int u2 = -1;
                if (c->i + 6 <= c->n && c->s[c->i] == '\\' && c->s[c->i + 1] == 'u')
                    u2 = hex4(c->s + c->i + 2);
                if (u2 >= 0xdc00 && u2 <= 0xdfff) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + ((uint32_t)u2 - 0xdc00);
                    c->i += 6;
                } else {
                    cp = 0xfffd;
                }
            } else if (cp >= 0xdc00 && cp <= 0xdfff) {
                cp = 0xfffd;
            }
            if (out && put_utf8(out, cp))
                return TT_ENOMEM;
            continue;
        }
        default:
            c->i -= 2; /* point at the backslash */
            return json_fail(c, "invalid escape in string");
        }
        if (out && tt_sbuf_append(out, &lit, 1))
            return TT_ENOMEM;
    }
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* Number per RFC 8259 section 6. */
static int json_number(json_cur *c) {
    size_t i = c->i;
    if (i < c->n && c->s[i] == '-')
        i++;
    if (i < c->n && c->s[i] == '0') {
        i++;
    } else if (i < c->n && is_digit(c->s[i])) {
        while (i < c->n && is_digit(c->s[i]))
            i++;
    } else {
        return json_fail(c, "bad number");
    }
    if (i < c->n && c->s[i] == '.') {
        i++;
        if (i >= c->n || !is_digit(c->s[i]))
            return json_fail(c, "bad number");
        while (i < c->n && is_digit(c->s[i]))
            i++;
    }
    if (i < c->n && (c->s[i] == 'e' || c->s[i] == 'E')) {
        i++;
        if (i < c->n && (c->s[i] == '+' || c->s[i] == '-'))
            i++;
        if (i >= c->n || !is_digit(c->s[i]))
            return json_fail(c, "bad number");
        while (i < c->n && is_digit(c->s[i]))
            i++;
    }
    c->i = i;
    return TT_OK;
}

/* Any value at c->i. A string goes to out (if not NULL) and a number's text too;
 * *kind receives TT_JSON_*. */
static int json_value(json_cur *c, tt_sbuf *out, int *kind, int depth) {
    if (depth > JSON_MAX_DEPTH)
        return json_fail(c, "nesting too deep");
    json_ws(c);
    if (c->i >= c->n)
        return json_fail(c, "value expected");
    char ch = c->s[c->i];
    if (ch == '"') {
        *kind = TT_JSON_STRING;
        return json_string(c, out);
    }
    if (ch == '-' || is_digit(ch)) {
        size_t start = c->i;
        int st = json_number(c);
        if (st)
            return st;
        *kind = TT_JSON_NUMBER;
        return out ? tt_sbuf_append(out, c->s + start, c->i - start) : TT_OK;
    }
    *kind = TT_JSON_OTHER;
    static const char *const lits[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t L = strlen(lits[k]);
        if (c->n - c->i >= L && !memcmp(c->s + c->i, lits[k], L)) {
            c->i += L;
            return TT_OK;
        }
    }
    if (ch != '{' && ch != '[')
        return json_fail(c, "value expected");
    char close = ch == '{' ? '}' : ']';
    c->i++;
    json_ws(c);
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        return TT_OK;
    }
    for (;;) {
        int k2, st;
        if (close == '}') {
            json_ws(c);
            if (c->i >= c->n || c->s[c->i] != '"')
                return json_fail(c, "member name expected");
            if ((st = json_string(c, NULL)))
                return st;
            json_ws(c);
            if (c->i >= c->n || c->s[c->i] != ':')
                return json_fail(c, "':' expected");
            c->i++;
        }
        if ((st = json_value(c, NULL, &k2, depth + 1)))
            return st;
        json_ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == close) {
            c->i++;
            return TT_OK;
        }
        return json_fail(c, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
    }
}

int tt_json_members(const char *s, size_t n, tt_json_member_fn fn, void *user, size_t *err_col,
                    const char **err_what) {
    json_cur c = {s, n, 0, NULL};
    tt_sbuf key = {0}, val = {0};
    int st = TT_OK;
    json_ws(&c);
    if (c.i >= c.n || s[c.i] != '{') {
        st = json_fail(&c, "'{' expected");
        goto done;
    }
    c.i++;
    json_ws(&c);
    if (c.i < c.n && s[c.i] == '}') {
        c.i++;
        goto tail;
    }
    for (;;) {
        json_ws(&c);
        if (c.i >= c.n || s[c.i] != '"') {
            st = json_fail(&c, "member name expected");
            goto done;
        }
        key.len = 0;
        if ((st = json_string(&c, &key)))
            goto done;
        json_ws(&c);
        if (c.i >= c.n || s[c.i] != ':') {
            st = json_fail(&c, "':' expected");
            goto done;
        }
        c.i++;
        json_ws(&c);
        size_t start = c.i;
        int kind = 0;
        val.len = 0;
        if ((st = json_value(&c, &val, &kind, 1)))
            goto done;
        if (kind == TT_JSON_OTHER) {
            char ch = s[start];
            kind = ch == 't' ? TT_JSON_TRUE : ch == 'f' ? TT_JSON_FALSE
                 : ch == 'n' ? TT_JSON_NULL : TT_JSON_OTHER;
        }
        if ((st = tt_sbuf_append(&key, "", 1)) || (st = tt_sbuf_append(&val, "", 1)))
            goto done;
        if ((st = fn(user, key.p, key.len - 1, kind, val.p, val.len - 1)))
            goto done;
        json_ws(&c);
        if (c.i < c.n && s[c.i] == ',') {
            c.i++;
            continue;
        }
        if (c.i < c.n && s[c.i] == '}') {
            c.i++;
            break;
        }
        st = json_fail(&c, "',' or '}' expected");
        goto done;
    }
tail:
    json_ws(&c);
    if (c.i != c.n)
        st = json_fail(&c, "text after the object");
done:
    if (st == TT_EPARSE && c.what) {
        if (err_col)
            *err_col = c.i;
        if (err_what)
            *err_what = c.what;
    }
    tt_sbuf_free(&key);
    tt_sbuf_free(&val);
    return st;
}

/* tt_json_fields on tt_json_members: each member named by one of the keys is copied
 * into its slot (the last of a repeated key wins); literals count as TT_JSON_OTHER. */
typedef struct fields_job {
    size_t nkeys;
    const char *const *keys;
    tt_sbuf *vals;
    int *kinds;
} fields_job;

static int fields_member(void *user, const char *name, size_t len, int kind, const char *val,
                         size_t vlen) {
    fields_job *j = user;
    for (size_t k = j->nkeys; k-- > 0;) {
        if (strlen(j->keys[k]) != len || memcmp(j->keys[k], name, len))
            continue;
        j->vals[k].len = 0;
        j->kinds[k] = kind > TT_JSON_OTHER ? TT_JSON_OTHER : kind;
        return tt_sbuf_append(&j->vals[k], val, vlen);
    }
    return TT_OK;
}

int tt_json_fields(const char *s, size_t n, size_t nkeys, const char *const *keys,
                   tt_sbuf *vals, int *kinds, size_t *err_col, const char **err_what) {
    for (size_t k = 0; k < nkeys; k++) {
        vals[k].len = 0;
        kinds[k] = TT_JSON_ABSENT;
    }
    fields_job j = {nkeys, keys, vals, kinds};
    return tt_json_members(s, n, fields_member, &j, err_col, err_what);
}

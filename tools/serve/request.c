/* tartan serve: request bodies into validated requests. Pure functions (no I/O, no
 * global state), so that tests/fuzz/fuzz_serve.c can throw any bytes at them: every
 * input either yields a request whose every vector is finite and of the index's
 * dimension, within the limits, or a 4xx status with a message naming the field.
 * JSON is parsed by jansson (duplicate keys refused, NUL in strings refused, UTF-8
 * validated, nesting depth bounded by jansson). */
#include "serve.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void srv_limits_init(srv_limits *lim) {
    lim->max_body = 64u << 20;
    lim->max_k = 1000;
    lim->max_queries = 1024;
    lim->max_query_vectors = 1024;
    lim->max_docs = 100000;
    lim->max_doc_vectors = 65536;
    lim->max_ids = 1000000;
}

static int fail(char *err, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t errlen, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return status;
}

static json_t *load(const char *body, size_t len, char *err, size_t errlen, int *status) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        *status = fail(err, errlen, 400, "malformed JSON at line %d, column %d: %s", je.line,
                       je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        *status = fail(err, errlen, 400, "the request body must be a JSON object");
        return NULL;
    }
    *status = 0;
    return root;
}

/* Every key of obj must be one of known (NULL-terminated). */
static int check_keys(json_t *obj, const char *const *known, char *err, size_t errlen) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        size_t i;
        for (i = 0; known[i]; i++)
            if (!strcmp(key, known[i]))
                break;
        if (!known[i]) {
            char list[512];
            size_t n = 0;
            list[0] = '\0';
            for (i = 0; known[i] && n < sizeof list; i++) {
                int w = snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", known[i]);
                if (w < 0)
                    break;
                n += (size_t)w;
            }
            char shown[64];
            snprintf(shown, sizeof shown, "%.60s", key);
            return fail(err, errlen, 400, "unknown field '%s' (known: %s)", shown, list);
        }
    }
    return 0;
}

/* A whole number in [lo, hi]. */
static int get_uint(json_t *obj, const char *key, uint64_t lo, uint64_t hi, uint64_t *out,
                    bool *present, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        (uint64_t)json_integer_value(v) < lo || (uint64_t)json_integer_value(v) > hi)
        return fail(err, errlen, 400, "'%s' must be a whole number in %llu..%llu", key,
                    (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_bool(json_t *obj, const char *key, bool *out, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return fail(err, errlen, 400, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

/* One of names (NULL-terminated) -> its index in *out. */
static int get_enum(json_t *obj, const char *key, const char *const *names, const int *values,
                    int *out, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (json_is_string(v))
        for (size_t i = 0; names[i]; i++)
            if (!strcmp(json_string_value(v), names[i])) {
                *out = values[i];
                return 0;
            }
    char list[256];
    size_t n = 0;
    list[0] = '\0';
    for (size_t i = 0; names[i]; i++) {
        int w = snprintf(list + n, sizeof list - n, "%s\"%s\"", i ? ", " : "", names[i]);
        if (w < 0 || (size_t)w >= sizeof list - n)
            break;
        n += (size_t)w;
    }
    return fail(err, errlen, 400, "'%s' must be one of %s", key, list);
}

/* ------------------------------------------------------------ base64, half */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

int srv_base64_decode(const char *in, size_t n, uint8_t *out, size_t *outlen) {
    /* Padding: at most two '=' at the very end, only where they complete a quad. */
    size_t pad = 0;
    while (n > 0 && in[n - 1] == '=' && pad < 2) {
        n--;
        pad++;
    }
    if (pad && (n + pad) % 4)
        return -1;
    if (n % 4 == 1)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) /* the unused low bits of the last character must be zero */
        return -1;
    *outlen = o;
    return 0;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float f;
    if (exp == 0) {
        f = ldexpf((float)man, -24); /* zero or subnormal */
        return sign ? -f : f;
    }
    if (exp == 31)
        return man ? NAN : (sign ? -INFINITY : INFINITY);
    uint32_t bits = sign | ((exp + 112) << 23) | (man << 13);
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* ---------------------------------------------------------------- vectors */

/* Growing float storage for the rows of a request. */
typedef struct rows {
    float *v;
    uint64_t n, cap; /* rows */
    uint32_t dim;
} rows;

static float *rows_add(rows *r, uint64_t n) {
    if (r->n + n > r->cap) {
        uint64_t nc = r->cap ? r->cap : 64;
        while (nc < r->n + n)
            nc *= 2;
        if (nc > SIZE_MAX / sizeof(float) / (r->dim ? r->dim : 1))
            return NULL;
        float *p = realloc(r->v, (size_t)nc * r->dim * sizeof *p);
        if (!p)
            return NULL;
        r->v = p;
        r->cap = nc;
    }
    float *out = r->v + r->n * r->dim;
    r->n += n;
    return out;
}

/* A list of vectors in JSON, [[f, ...], ...], appended to r. what names it in errors
 * ("query 3"). Returns the number of rows, or -status. */
static long long json_matrix(json_t *m, rows *r, uint32_t max_rows, const char *what,
                             const char *limit_opt, char *err, size_t errlen) {
    if (!json_is_array(m))
        return -fail(err, errlen, 400, "%s must be a list of vectors (lists of numbers) or a "
                     "base64 object", what);
    size_t n = json_array_size(m);
    if (n == 0)
        return -fail(err, errlen, 400, "%s has no vectors", what);
    if (n > max_rows)
        return -fail(err, errlen, 413, "%s has %zu vectors; at most %u are allowed (%s)", what, n,
                     max_rows, limit_opt);
    float *dst = rows_add(r, n);
    if (!dst)
        return -fail(err, errlen, 500, "out of memory for %zu vectors", n);
    for (size_t i = 0; i < n; i++) {
        json_t *vec = json_array_get(m, i);
        if (!json_is_array(vec))
            return -fail(err, errlen, 400, "%s, vector %zu: not a list of numbers", what, i);
        if (json_array_size(vec) != r->dim)
            return -fail(err, errlen, 400, "%s, vector %zu has %zu values; the index's "
                         "dimension is %u", what, i, json_array_size(vec), r->dim);
        for (uint32_t j = 0; j < r->dim; j++) {
            json_t *x = json_array_get(vec, j);
            if (!json_is_number(x))
                return -fail(err, errlen, 400, "%s, vector %zu, value %u is not a number", what,
                             i, j);
            float f = (float)json_number_value(x);
            if (!isfinite(f))
                return -fail(err, errlen, 400, "%s, vector %zu, value %u is not a finite "
                             "float32 (%g)", what, i, j, json_number_value(x));
            dst[i * r->dim + j] = f;
        }
    }
    return (long long)n;
}

/* {"dtype": "float32"|"float16", "shape": [...], "data": base64 of little-endian
 * values in row-major order}: the shape must have ndims entries, the last one the
 * index's dimension. Appends prod(shape[:-1]) rows to r; shape receives the sizes. */
static int b64_tensor(json_t *o, int ndims, rows *r, uint64_t *shape, const char *what,
                      char *err, size_t errlen) {
    static const char *const keys[] = {"dtype", "shape", "data", NULL};
    int st = check_keys(o, keys, err, errlen);
    if (st)
        return st;
    json_t *dt = json_object_get(o, "dtype"), *sh = json_object_get(o, "shape"),
           *data = json_object_get(o, "data");
    size_t esz;
    if (!dt || !json_is_string(dt))
        return fail(err, errlen, 400, "%s: 'dtype' (\"float32\" or \"float16\") is required", what);
    if (!strcmp(json_string_value(dt), "float32"))
        esz = 4;
    else if (!strcmp(json_string_value(dt), "float16"))
        esz = 2;
    else
        return fail(err, errlen, 400, "%s: 'dtype' must be \"float32\" or \"float16\"", what);
    if (!sh || !json_is_array(sh) || json_array_size(sh) != (size_t)ndims)
        return fail(err, errlen, 400, "%s: 'shape' must be a list of %d sizes", what, ndims);
    uint64_t count = 1;
    for (int i = 0; i < ndims; i++) {
        json_t *x = json_array_get(sh, (size_t)i);
        if (!json_is_integer(x) || json_integer_value(x) < 1 ||
            json_integer_value(x) > (json_int_t)UINT32_MAX)
            return fail(err, errlen, 400, "%s: 'shape' sizes must be whole numbers >= 1", what);
        shape[i] = (uint64_t)json_integer_value(x);
        if (count > UINT64_MAX / shape[i] / 4)
            return fail(err, errlen, 413, "%s: 'shape' is too large", what);
        count *= shape[i];
    }
    if (shape[ndims - 1] != r->dim)
        return fail(err, errlen, 400, "%s: 'shape' ends in %llu; the index's dimension is %u",
                    what, (unsigned long long)shape[ndims - 1], r->dim);
    if (!data || !json_is_string(data))
        return fail(err, errlen, 400, "%s: 'data' (base64) is required", what);
    size_t slen = json_string_length(data);
    uint64_t want = count * esz;
    /* base64 of want bytes is 4 * ceil(want / 3) characters, padded or not */
    if (slen / 4 * 3 + 3 < want || want / 3 * 4 > slen)
        return fail(err, errlen, 400, "%s: 'data' holds about %zu bytes; shape and dtype "
                    "need %llu", what, slen / 4 * 3, (unsigned long long)want);
    uint8_t *raw = malloc(slen / 4 * 3 + 3);
    if (!raw)
        return fail(err, errlen, 500, "out of memory");
    size_t got = 0;
    if (srv_base64_decode(json_string_value(data), slen, raw, &got)) {
        free(raw);
        return fail(err, errlen, 400, "%s: 'data' is not valid base64", what);
    }
    if (got != want) {
        free(raw);
        return fail(err, errlen, 400, "%s: 'data' holds %zu bytes; shape and dtype need %llu",
                    what, got, (unsigned long long)want);
    }
    float *dst = rows_add(r, count / r->dim);
    if (!dst) {
        free(raw);
        return fail(err, errlen, 500, "out of memory");
    }
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *p = raw + i * esz;
        float f;
        if (esz == 4) {
            uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                         (uint32_t)p[3] << 24;
            memcpy(&f, &u, sizeof f);
        } else {
            f = half_to_float((uint16_t)(p[0] | p[1] << 8));
        }
        if (!isfinite(f)) {
            free(raw);
            return fail(err, errlen, 400, "%s: value %llu (vector %llu) is not finite", what,
                        (unsigned long long)i, (unsigned long long)(i / r->dim));
        }
        dst[i] = f;
    }
    free(raw);
    return 0;
}

/* ----------------------------------------------------------------- search */

void srv_search_req_free(srv_search_req *r) {
    if (!r)
        return;
    free(r->vectors);
    free(r->offs);
    free(r->lens);
    if (r->texts)
        for (uint32_t i = 0; i < r->nqueries; i++)
            free(r->texts[i]);
    free(r->texts);
    free(r->where);
    if (r->filter_ids)
        for (uint32_t i = 0; i < r->nfilter_ids; i++)
            free(r->filter_ids[i]);
    free(r->filter_ids);
    memset(r, 0, sizeof *r);
}

static char *id_copy(json_t *v, const char *what, size_t i, int *st, char *err, size_t errlen);

/* "where" (a non-empty SQL expression) and "filter_ids" (a list of ids, at most
 * --max-ids; empty: no document allowed). */
static int search_filter(json_t *root, const srv_limits *lim, srv_search_req *out, char *err,
                         size_t errlen) {
    json_t *v = json_object_get(root, "where");
    if (v) {
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 65536)
            return fail(err, errlen, 400, "'where' must be a non-empty string of at most 65536 "
                        "bytes (an SQL expression over the index's metadata)");
        if (!(out->where = strdup(json_string_value(v))))
            return fail(err, errlen, 500, "out of memory");
    }
    v = json_object_get(root, "filter_ids");
    if (v) {
        if (!json_is_array(v))
            return fail(err, errlen, 400, "'filter_ids' must be a list of document ids");
        size_t n = json_array_size(v);
        if (n > lim->max_ids)
            return fail(err, errlen, 413, "'filter_ids': %zu ids; at most %u per request "
                        "(--max-ids)", n, lim->max_ids);
        if (!(out->filter_ids = calloc(n ? n : 1, sizeof *out->filter_ids)))
            return fail(err, errlen, 500, "out of memory");
        out->nfilter_ids = (uint32_t)n;
        int st = 0;
        for (size_t i = 0; i < n; i++)
            if (!(out->filter_ids[i] = id_copy(json_array_get(v, i), "'filter_ids' id", i, &st,
                                               err, errlen)))
                return st;
    }
    return 0;
}

static int search_options(json_t *root, const srv_limits *lim, srv_search_req *out, char *err,
                          size_t errlen) {
    static const char *const modes[] = {"plaid", "exhaustive", "exact", NULL};
    static const int mode_v[] = {TT_MODE_PLAID, TT_MODE_EXHAUSTIVE, TT_MODE_EXACT};
    static const char *const scores[] = {"sum", "mean", NULL};
    static const int score_v[] = {TT_SCORE_SUM, TT_SCORE_MEAN};
    static const char *const prunes[] = {"relative", "absolute", NULL};
    static const int prune_v[] = {TT_PRUNE_RELATIVE, TT_PRUNE_ABSOLUTE};
    static const char *const reranks[] = {"adaptive", "fixed", NULL};
    static const int rerank_v[] = {TT_RERANK_ADAPTIVE, TT_RERANK_FIXED};
    tt_search_options *o = &out->opt;
    uint64_t u = 10;
    int st;
    bool has;
    if ((st = get_uint(root, "k", 1, lim->max_k, &u, NULL, err, errlen)))
        return st;
    out->k = (uint32_t)u;
    if ((st = get_enum(root, "mode", modes, mode_v, &o->mode, err, errlen)) ||
        (st = get_enum(root, "score", scores, score_v, &o->score, err, errlen)) ||
        (st = get_enum(root, "pruning", prunes, prune_v, &o->pruning, err, errlen)) ||
        (st = get_enum(root, "rerank", reranks, rerank_v, &o->rerank, err, errlen)))
        return st;
    if ((st = get_uint(root, "nprobe", 1, 1u << 24, &u, &has, err, errlen)))
        return st;
    if (has)
        o->nprobe = (int)u;
    if ((st = get_uint(root, "ndocs", 1, UINT32_MAX, &u, &has, err, errlen)))
        return st;
    if (has)
        o->ndocs = (uint32_t)u;
    json_t *v = json_object_get(root, "threshold");
    if (v) {
        if (!json_is_number(v) || !isfinite((float)json_number_value(v)))
            return fail(err, errlen, 400, "'threshold' must be a finite number");
        o->threshold = (float)json_number_value(v);
    }
    v = json_object_get(root, "prune_ratio");
    if (v) {
        double d = json_is_number(v) ? json_number_value(v) : -1;
        if (!(d >= 0 && d <= 1))
            return fail(err, errlen, 400, "'prune_ratio' must be a number in [0, 1]");
        o->prune_ratio = (float)d;
    }
    return 0;
}

/* ---------------------------------------------- the required form, fast */

/* jansson builds a json_t per number (an allocation, strtod through a locale fix-up):
 * for a query of 32 x 128 values that costs more than the search itself. The required
 * form {"queries": [[[n, ...], ...], ...], "k": N} (those two keys, any order, k
 * optional) is therefore read by this scanner first. It accepts only what it fully
 * checks (JSON's number grammar, dimension, limits, finite float32 values, no
 * duplicate key) and produces what srv_parse_search_json produces for the same bytes,
 * value for value (tests/fuzz/fuzz_serve.c compares them); anything else, including
 * every error, goes to the jansson path, which writes the messages. */
typedef struct scan {
    const char *p, *end;
} scan;

static void ws(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool lit(scan *s, char c) {
    ws(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

/* One JSON number as jansson reads it (integers: strtoll then double; reals: strtod). */
static bool number(scan *s, double *out) {
    ws(s);
    const char *b = s->p, *q = s->p;
    bool real = false;
    if (q < s->end && *q == '-')
        q++;
    if (q >= s->end || !is_digit(*q))
        return false;
    if (*q == '0')
        q++;
    else
        while (q < s->end && is_digit(*q))
            q++;
    if (q < s->end && *q == '.') {
        real = true;
        q++;
        if (q >= s->end || !is_digit(*q))
            return false;
        while (q < s->end && is_digit(*q))
            q++;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        real = true;
        q++;
        if (q < s->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= s->end || !is_digit(*q))
            return false;
        while (q < s->end && is_digit(*q))
            q++;
    }
    size_t n = (size_t)(q - b);
    char tok[48];
    if (n >= sizeof tok || (!real && n > 18))
        return false; /* long tokens (and integers jansson may refuse) go to jansson */
    memcpy(tok, b, n);
    tok[n] = '\0';
    *out = real ? strtod(tok, NULL) : (double)strtoll(tok, NULL, 10);
    s->p = q;
    return true;
}

static bool key(scan *s, const char *k) {
    ws(s);
    size_t n = strlen(k);
    if ((size_t)(s->end - s->p) < n + 2 || s->p[0] != '"' || memcmp(s->p + 1, k, n) ||
        s->p[n + 1] != '"')
        return false;
    s->p += n + 2;
    return lit(s, ':');
}

static bool fast_queries(scan *s, uint32_t dim, const srv_limits *lim, rows *r,
                         srv_search_req *out) {
    uint32_t cap = 0;
    if (!lit(s, '['))
        return false;
    do {
        if (out->nqueries == lim->max_queries)
            return false;
        if (out->nqueries == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t *o = realloc(out->offs, cap * sizeof *o);
            if (o)
                out->offs = o;
            uint32_t *l = realloc(out->lens, cap * sizeof *l);
            if (l)
                out->lens = l;
            if (!o || !l)
                return false;
        }
        uint32_t q = out->nqueries++, nv = 0;
        out->offs[q] = r->n;
        if (!lit(s, '['))
            return false;
        do {
            if (nv == lim->max_query_vectors || !lit(s, '['))
                return false;
            float *v = rows_add(r, 1);
            if (!v)
                return false;
            for (uint32_t j = 0; j < dim; j++) {
                double d;
                if ((j && !lit(s, ',')) || !number(s, &d))
                    return false;
                v[j] = (float)d;
                if (!isfinite(v[j]))
                    return false;
            }
            if (!lit(s, ']'))
                return false;
            nv++;
        } while (lit(s, ','));
        if (!lit(s, ']'))
            return false;
        out->lens[q] = nv;
    } while (lit(s, ','));
    return lit(s, ']');
}

static bool fast_search(const char *body, size_t len, uint32_t dim, const srv_limits *lim,
                        srv_search_req *out) {
    scan s = {body, body + len};
    rows r = {.dim = dim};
    bool have_q = false, have_k = false, good = false;
    if (!lit(&s, '{'))
        goto done;
    do {
        if (!have_q && key(&s, "queries")) {
            have_q = true;
            if (!fast_queries(&s, dim, lim, &r, out))
                goto done;
        } else if (!have_k && key(&s, "k")) {
            double d;
            have_k = true;
            const char *b = (ws(&s), s.p);
            if (!number(&s, &d) || memchr(b, '.', (size_t)(s.p - b)) ||
                memchr(b, 'e', (size_t)(s.p - b)) || memchr(b, 'E', (size_t)(s.p - b)) ||
                d < 1 || d > lim->max_k)
                goto done;
            out->k = (uint32_t)d;
        } else {
            goto done;
        }
    } while (lit(&s, ','));
    if (!lit(&s, '}'))
        goto done;
    ws(&s);
    good = have_q && s.p == s.end;
done:
    if (good) {
        out->vectors = r.v;
        out->nvectors = r.n;
    } else {
        free(r.v);
        free(out->offs);
        free(out->lens);
        out->offs = NULL;
        out->lens = NULL;
        out->nqueries = 0;
        out->k = 10;
    }
    return good;
}

int srv_parse_search(const char *body, size_t len, uint32_t dim, bool have_encoder,
                     const srv_limits *lim, srv_search_req *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    tt_search_options_init(&out->opt);
    out->k = 10;
    if (fast_search(body, len, dim, lim, out))
        return 0;
    return srv_parse_search_json(body, len, dim, have_encoder, lim, out, err, errlen);
}

int srv_parse_search_json(const char *body, size_t len, uint32_t dim, bool have_encoder,
                          const srv_limits *lim, srv_search_req *out, char *err,
                          size_t errlen) {
    static const char *const keys[] = {"queries", "texts", "k", "mode", "nprobe", "threshold",
                                       "ndocs", "score", "pruning", "prune_ratio", "rerank",
                                       "where", "filter_ids", NULL};
    memset(out, 0, sizeof *out);
    tt_search_options_init(&out->opt);
    int st;
    json_t *root = load(body, len, err, errlen, &st);
    if (!root)
        return st;
    rows r = {.dim = dim};
    if ((st = check_keys(root, keys, err, errlen)) ||
        (st = search_options(root, lim, out, err, errlen)) ||
        (st = search_filter(root, lim, out, err, errlen)))
        goto done;
    json_t *q = json_object_get(root, "queries"), *t = json_object_get(root, "texts");
    if (!!q == !!t) {
        st = fail(err, errlen, 400, q ? "give 'queries' or 'texts', not both"
                  : "'queries' (a list of queries, each a list of vectors) is required");
        goto done;
    }
    if (t) {
        if (!have_encoder) {
            st = fail(err, errlen, 400, "'texts' needs a query encoder (tartan serve --encoder "
                      "CMD); send 'queries' as vectors");
            goto done;
        }
        if (!json_is_array(t) || json_array_size(t) == 0) {
            st = fail(err, errlen, 400, "'texts' must be a non-empty list of strings");
            goto done;
        }
        size_t n = json_array_size(t);
        if (n > lim->max_queries) {
            st = fail(err, errlen, 413, "%zu queries; at most %u per request (--max-queries)",
                      n, lim->max_queries);
            goto done;
        }
        out->texts = calloc(n, sizeof *out->texts);
        out->offs = calloc(n, sizeof *out->offs);
        out->lens = calloc(n, sizeof *out->lens);
        if (!out->texts || !out->offs || !out->lens) {
            st = fail(err, errlen, 500, "out of memory");
            goto done;
        }
        out->nqueries = (uint32_t)n;
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_array_get(t, i);
            if (!json_is_string(s) || json_string_length(s) == 0) {
                st = fail(err, errlen, 400, "'texts'[%zu] must be a non-empty string", i);
                goto done;
            }
            if (!(out->texts[i] = strdup(json_string_value(s)))) {
                st = fail(err, errlen, 500, "out of memory");
                goto done;
            }
        }
        goto done;
    }
    if (json_is_object(q)) {
        /* base64: shape [num_queries, vectors_per_query, dim] */
        uint64_t shape[3];
        if ((st = b64_tensor(q, 3, &r, shape, "'queries'", err, errlen)))
            goto done;
        if (shape[0] > lim->max_queries) {
            st = fail(err, errlen, 413, "%llu queries; at most %u per request (--max-queries)",
                      (unsigned long long)shape[0], lim->max_queries);
            goto done;
        }
        if (shape[1] > lim->max_query_vectors) {
            st = fail(err, errlen, 413, "queries of %llu vectors; at most %u per query "
                      "(--max-query-vectors)", (unsigned long long)shape[1],
                      lim->max_query_vectors);
            goto done;
        }
        out->nqueries = (uint32_t)shape[0];
        out->offs = calloc(shape[0], sizeof *out->offs);
        out->lens = calloc(shape[0], sizeof *out->lens);
        if (!out->offs || !out->lens) {
            st = fail(err, errlen, 500, "out of memory");
            goto done;
        }
        for (uint64_t i = 0; i < shape[0]; i++) {
            out->offs[i] = i * shape[1];
            out->lens[i] = (uint32_t)shape[1];
        }
    } else if (json_is_array(q)) {
        size_t n = json_array_size(q);
        if (n == 0) {
            st = fail(err, errlen, 400, "'queries' is empty");
            goto done;
        }
        if (n > lim->max_queries) {
            st = fail(err, errlen, 413, "%zu queries; at most %u per request (--max-queries)",
                      n, lim->max_queries);
            goto done;
        }
        out->nqueries = (uint32_t)n;
        out->offs = calloc(n, sizeof *out->offs);
        out->lens = calloc(n, sizeof *out->lens);
        if (!out->offs || !out->lens) {
            st = fail(err, errlen, 500, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            char what[48];
            snprintf(what, sizeof what, "query %zu", i);
            out->offs[i] = r.n;
            long long got = json_matrix(json_array_get(q, i), &r, lim->max_query_vectors, what,
                                        "--max-query-vectors", err, errlen);
            if (got < 0) {
                st = (int)-got;
                goto done;
            }
            out->lens[i] = (uint32_t)got;
        }
    } else {
        st = fail(err, errlen, 400, "'queries' must be a list of queries (each a list of "
                  "vectors) or a base64 object {dtype, shape, data}");
        goto done;
    }
    out->vectors = r.v;
    out->nvectors = r.n;
    r.v = NULL;
done:
    free(r.v);
    json_decref(root);
    if (st)
        srv_search_req_free(out);
    return st;
}

/* -------------------------------------------------------------------- ids */

const char *srv_id_problem(const char *id, size_t len) {
    if (len == 0)
        return "is empty";
    if (len > 4096)
        return "is longer than 4096 bytes";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c <= 0x20 || c == 0x7f)
            return "holds whitespace or a control character";
    }
    return NULL;
}

static char *id_copy(json_t *v, const char *what, size_t i, int *st, char *err, size_t errlen) {
    if (!json_is_string(v)) {
        *st = fail(err, errlen, 400, "%s %zu: the id must be a string", what, i);
        return NULL;
    }
    const char *p = srv_id_problem(json_string_value(v), json_string_length(v));
    if (p) {
        *st = fail(err, errlen, 400, "%s %zu: the id %s", what, i, p);
        return NULL;
    }
    char *s = strdup(json_string_value(v));
    if (!s)
        *st = fail(err, errlen, 500, "out of memory");
    return s;
}

/* -------------------------------------------------------------------- add */

void srv_add_req_free(srv_add_req *r) {
    if (!r)
        return;
    free(r->vectors);
    free(r->offs);
    free(r->lens);
    if (r->ids)
        for (uint32_t i = 0; i < r->ndocs; i++)
            free(r->ids[i]);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

int srv_parse_add(const char *body, size_t len, uint32_t dim, const srv_limits *lim,
                  srv_add_req *out, char *err, size_t errlen) {
    static const char *const keys[] = {"documents", "upsert", NULL};
    static const char *const dkeys[] = {"id", "vectors", NULL};
    memset(out, 0, sizeof *out);
    int st;
    json_t *root = load(body, len, err, errlen, &st);
    if (!root)
        return st;
    rows r = {.dim = dim};
    if ((st = check_keys(root, keys, err, errlen)) ||
        (st = get_bool(root, "upsert", &out->upsert, err, errlen)))
        goto done;
    json_t *docs = json_object_get(root, "documents");
    if (!docs || !json_is_array(docs) || json_array_size(docs) == 0) {
        st = fail(err, errlen, 400, "'documents' (a non-empty list of {\"id\", \"vectors\"}) "
                  "is required");
        goto done;
    }
    size_t n = json_array_size(docs);
    if (n > lim->max_docs) {
        st = fail(err, errlen, 413, "%zu documents; at most %u per request (--max-docs)", n,
                  lim->max_docs);
        goto done;
    }
    out->ndocs = (uint32_t)n;
    out->offs = calloc(n, sizeof *out->offs);
    out->lens = calloc(n, sizeof *out->lens);
    if (!out->offs || !out->lens) {
        st = fail(err, errlen, 500, "out of memory");
        goto done;
    }
    bool with_ids = json_object_get(json_array_get(docs, 0), "id") != NULL;
    if (with_ids && !(out->ids = calloc(n, sizeof *out->ids))) {
        st = fail(err, errlen, 500, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(docs, i);
        char what[48];
        snprintf(what, sizeof what, "document %zu", i);
        if (!json_is_object(d)) {
            st = fail(err, errlen, 400, "%s must be an object {\"id\", \"vectors\"}", what);
            goto done;
        }
        if ((st = check_keys(d, dkeys, err, errlen)))
            goto done;
        json_t *id = json_object_get(d, "id");
        if (!!id != with_ids) {
            st = fail(err, errlen, 400, "%s: either every document has an 'id' or none has "
                      "(new numbers)", what);
            goto done;
        }
        if (id && !(out->ids[i] = id_copy(id, "document", i, &st, err, errlen)))
            goto done;
        json_t *v = json_object_get(d, "vectors");
        if (!v) {
            st = fail(err, errlen, 400, "%s: 'vectors' is required", what);
            goto done;
        }
        out->offs[i] = r.n;
        if (json_is_object(v)) {
            uint64_t shape[2];
            if ((st = b64_tensor(v, 2, &r, shape, what, err, errlen)))
                goto done;
            if (shape[0] > lim->max_doc_vectors) {
                st = fail(err, errlen, 413, "%s has %llu vectors; at most %u (--max-doc-vectors)",
                          what, (unsigned long long)shape[0], lim->max_doc_vectors);
                goto done;
            }
            out->lens[i] = (uint32_t)shape[0];
        } else {
            long long got = json_matrix(v, &r, lim->max_doc_vectors, what, "--max-doc-vectors",
                                        err, errlen);
            if (got < 0) {
                st = (int)-got;
                goto done;
            }
            out->lens[i] = (uint32_t)got;
        }
    }
    out->vectors = r.v;
    out->nvectors = r.n;
    r.v = NULL;
done:
    free(r.v);
    json_decref(root);
    if (st)
        srv_add_req_free(out);
    return st;
}

/* ----------------------------------------------------------------- delete */

void srv_delete_req_free(srv_delete_req *r) {
    if (!r)
        return;
    if (r->ids)
        for (uint32_t i = 0; i < r->nids; i++)
            free(r->ids[i]);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

int srv_parse_delete(const char *body, size_t len, const srv_limits *lim, srv_delete_req *out,
                     char *err, size_t errlen) {
    static const char *const keys[] = {"ids", "strict", NULL};
    memset(out, 0, sizeof *out);
    int st;
    json_t *root = load(body, len, err, errlen, &st);
    if (!root)
        return st;
    if ((st = check_keys(root, keys, err, errlen)) ||
        (st = get_bool(root, "strict", &out->strict, err, errlen)))
        goto done;
    json_t *ids = json_object_get(root, "ids");
    if (!ids || !json_is_array(ids) || json_array_size(ids) == 0) {
        st = fail(err, errlen, 400, "'ids' (a non-empty list of document ids) is required");
        goto done;
    }
    size_t n = json_array_size(ids);
    if (n > lim->max_ids) {
        st = fail(err, errlen, 413, "%zu ids; at most %u per request (--max-ids)", n,
                  lim->max_ids);
        goto done;
    }
    if (!(out->ids = calloc(n, sizeof *out->ids))) {
        st = fail(err, errlen, 500, "out of memory");
        goto done;
    }
    out->nids = (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        if (!(out->ids[i] = id_copy(json_array_get(ids, i), "id", i, &st, err, errlen)))
            goto done;
done:
    json_decref(root);
    if (st)
        srv_delete_req_free(out);
    return st;
}

/* ---------------------------------------------------------------- routing */

static const char *const ep_names[SRV_EP_COUNT] = {
    "other", "search", "add", "delete", "compact", "info", "indexes", "health", "metrics"};

const char *srv_endpoint_name(int ep) {
    return ep >= 0 && ep < SRV_EP_COUNT ? ep_names[ep] : "other";
}

int srv_route(const char *path, char *name, size_t namelen) {
    if (namelen)
        name[0] = '\0';
    if (!strcmp(path, "/health"))
        return SRV_EP_HEALTH;
    if (!strcmp(path, "/metrics"))
        return SRV_EP_METRICS;
    if (!strcmp(path, "/indexes") || !strcmp(path, "/indexes/"))
        return SRV_EP_INDEXES;
    if (strncmp(path, "/indexes/", 9))
        return SRV_EP_NONE;
    const char *p = path + 9, *slash = strchr(p, '/');
    size_t n = slash ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || n >= namelen)
        return SRV_EP_NONE;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return SRV_EP_NONE;
    }
    memcpy(name, p, n);
    name[n] = '\0';
    const char *rest = slash ? slash + 1 : "";
    if (!*rest || !strcmp(rest, "info"))
        return SRV_EP_INFO;
    static const struct { const char *s; int ep; } sub[] = {
        {"search", SRV_EP_SEARCH}, {"add", SRV_EP_ADD}, {"delete", SRV_EP_DELETE},
        {"compact", SRV_EP_COMPACT}};
    for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++)
        if (!strcmp(rest, sub[i].s))
            return sub[i].ep;
    name[0] = '\0';
    return SRV_EP_NONE;
}

/* ---------------------------------------------------------------- compact */

int srv_parse_compact(const char *body, size_t len, bool *retrain, char *err, size_t errlen) {
    static const char *const keys[] = {"retrain", NULL};
    *retrain = false;
    size_t i = 0;
    while (i < len && (body[i] == ' ' || body[i] == '\n' || body[i] == '\r' || body[i] == '\t'))
        i++;
    if (i == len)
        return 0; /* no body: the defaults */
    int st;
    json_t *root = load(body, len, err, errlen, &st);
    if (!root)
        return st;
    if (!(st = check_keys(root, keys, err, errlen)))
        st = get_bool(root, "retrain", retrain, err, errlen);
    json_decref(root);
    return st;
}

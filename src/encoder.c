/* External encoders: the protocol of doc/encoder-protocol.md.
 *
 * One encoder process per session. The calling thread runs a single poll() loop that
 * writes framed records to the encoder's stdin, reads framed replies from its stdout
 * and captures its stderr, so neither side can deadlock on a full pipe and the pipes
 * provide the back-pressure (section 5 of the protocol). The child is started with
 * posix_spawnp in its own process group; every exit path kills (SIGKILL to the group)
 * and reaps it. SIGPIPE is blocked only around our own write() calls, and a SIGPIPE we
 * caused is consumed with sigtimedwait before the mask is restored, so the process-wide
 * disposition is never touched.
 *
 * Also here: the record readers (BEIR .jsonl, TSV) with a small JSON string-field
 * extractor, the no-shell command splitter, and tt_encode_to_npy (tartan encode). */
#include "encoder.h"

#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ================================================================ strings */

int tt_sbuf_reserve(tt_sbuf *b, size_t extra) {
    if (b->cap - b->len > extra)
        return TT_OK;
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || need == SIZE_MAX)
        return tt_err(TT_ENOMEM, "string buffer: size overflows");
    need += 1; /* room for a terminating NUL */
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return tt_err(TT_ENOMEM, "string buffer: cannot allocate %zu bytes", cap);
    b->p = p;
    b->cap = cap;
    return TT_OK;
}

int tt_sbuf_append(tt_sbuf *b, const void *data, size_t n) {
    int st = tt_sbuf_reserve(b, n);
    if (st)
        return st;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    return TT_OK;
}

const char *tt_sbuf_cstr(tt_sbuf *b) {
    if (tt_sbuf_reserve(b, 0))
        return NULL;
    b->p[b->len] = '\0';
    return b->p;
}

void tt_sbuf_free(tt_sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* =================================================================== JSON */

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

int tt_json_fields(const char *s, size_t n, size_t nkeys, const char *const *keys,
                   tt_sbuf *vals, int *kinds, size_t *err_col, const char **err_what) {
    json_cur c = {s, n, 0, NULL};
    tt_sbuf key = {0};
    int st = TT_OK;
    for (size_t k = 0; k < nkeys; k++) {
        vals[k].len = 0;
        kinds[k] = TT_JSON_ABSENT;
    }
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
        size_t which = nkeys;
        for (size_t k = 0; k < nkeys; k++)
            if (strlen(keys[k]) == key.len && !memcmp(keys[k], key.p, key.len))
                which = k;
        int kind = 0;
        if (which < nkeys) {
            vals[which].len = 0;
            st = json_value(&c, &vals[which], &kind, 1);
            kinds[which] = kind;
        } else {
            st = json_value(&c, NULL, &kind, 1);
        }
        if (st)
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
    if (st == TT_EPARSE) {
        if (err_col)
            *err_col = c.i;
        if (err_what)
            *err_what = c.what;
    }
    tt_sbuf_free(&key);
    return st;
}

/* ================================================================ records */

struct tt_records {
    FILE *f;
    char *path;
    int format; /* TT_REC_AUTO until the first record line decides */
    int mode;
    char *line;
    size_t linecap;
    uint64_t lineno, recline;
    bool seen_first;
    tt_sbuf vals[3];
    int kinds[3];
    tt_sbuf text;
};

static bool has_suffix_ci(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    if (a < b)
        return false;
    for (size_t i = 0; i < b; i++) {
        char x = s[a - b + i], y = suf[i];
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (x != y)
            return false;
    }
    return true;
}

static int format_by_name(const char *path) {
    if (has_suffix_ci(path, ".jsonl") || has_suffix_ci(path, ".json"))
        return TT_REC_JSONL;
    if (has_suffix_ci(path, ".tsv") || has_suffix_ci(path, ".tab") || has_suffix_ci(path, ".txt"))
        return TT_REC_TSV;
    return TT_REC_AUTO;
}

const char *tt_record_id_problem(const char *id, size_t len) {
    if (len == 0)
        return "empty id";
    if (len > TT_ENC_MAX_ID)
        return "id longer than 4096 bytes";
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)id[i];
        if (ch < 0x20 || ch == 0x7f)
            return "id contains a control character (NUL, TAB, CR, LF, ...)";
    }
    return NULL;
}

int tt_records_open(tt_records **out, const char *path, int format, int mode) {
    *out = NULL;
    if (!path || (format != TT_REC_AUTO && format != TT_REC_JSONL && format != TT_REC_TSV) ||
        (mode != TT_ENC_PASSAGE && mode != TT_ENC_QUERY))
        return tt_err(TT_EINVAL, "records: bad path, format or mode");
    tt_records *r = calloc(1, sizeof *r);
    if (!r)
        return tt_err(TT_ENOMEM, "%s: cannot allocate a record reader", path);
    int st = TT_OK;
    r->path = strdup(path);
    if (!r->path) {
        st = tt_err(TT_ENOMEM, "%s: cannot allocate a record reader", path);
        goto fail;
    }
    r->f = fopen(path, "rb");
    if (!r->f) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot open the record file", path);
        goto fail;
    }
    r->format = format != TT_REC_AUTO ? format : format_by_name(path);
    r->mode = mode;
    *out = r;
    return TT_OK;
fail:
    tt_records_close(r);
    return st;
}

void tt_records_close(tt_records *r) {
    if (!r)
        return;
    if (r->f)
        fclose(r->f);
    free(r->path);
    free(r->line);
    for (int k = 0; k < 3; k++)
        tt_sbuf_free(&r->vals[k]);
    tt_sbuf_free(&r->text);
    free(r);
}

int tt_records_format(const tt_records *r) { return r->format; }
uint64_t tt_records_line(const tt_records *r) { return r->recline; }

static bool blank_line(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

static char first_nonblank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return s[i];
    return 0;
}

/* "id<TAB>text..." as the first line of a TSV file is a header. */
static bool tsv_header(const char *s, size_t n) {
    const char *tab = memchr(s, '\t', n);
    if (!tab)
        return false;
    size_t a = (size_t)(tab - s);
    const char *rest = tab + 1;
    size_t b = n - a - 1;
    const char *tab2 = memchr(rest, '\t', b);
    if (tab2)
        b = (size_t)(tab2 - rest);
    bool id = (a == 2 && !memcmp(s, "id", 2)) || (a == 3 && !memcmp(s, "_id", 3));
    return id && b == 4 && !memcmp(rest, "text", 4);
}

/* text = title + " " + text in passage mode when the title is non-empty. */
static int assemble(tt_records *r, const char *title, size_t tlen, const char *body, size_t blen) {
    r->text.len = 0;
    int st = TT_OK;
    if (r->mode == TT_ENC_PASSAGE && tlen) {
        if ((st = tt_sbuf_append(&r->text, title, tlen)) || (st = tt_sbuf_append(&r->text, " ", 1)))
            return st;
    }
    return tt_sbuf_append(&r->text, body, blen);
}

static int parse_jsonl(tt_records *r, const char *s, size_t n, tt_record *rec) {
    static const char *const keys[3] = {"_id", "text", "title"};
    size_t col = 0;
    const char *what = NULL;
    int st = tt_json_fields(s, n, 3, keys, r->vals, r->kinds, &col, &what);
    if (st == TT_EPARSE)
        return tt_err(TT_EPARSE, "%s:%llu:%zu: malformed JSON: %s", r->path,
                      (unsigned long long)r->lineno, col + 1, what ? what : "syntax error");
    if (st)
        return st;
    if (r->kinds[0] != TT_JSON_STRING && r->kinds[0] != TT_JSON_NUMBER)
        return tt_err(TT_EPARSE, "%s:%llu: no \"_id\" string or number", r->path,
                      (unsigned long long)r->lineno);
    if (r->kinds[1] != TT_JSON_STRING)
        return tt_err(TT_EPARSE, "%s:%llu: no \"text\" string", r->path,
                      (unsigned long long)r->lineno);
    size_t tlen = r->kinds[2] == TT_JSON_STRING ? r->vals[2].len : 0;
    if ((st = assemble(r, r->vals[2].p, tlen, r->vals[1].p, r->vals[1].len)))
        return st;
    rec->id = r->vals[0].p;
    rec->id_len = r->vals[0].len;
    return TT_OK;
}

static int parse_tsv(tt_records *r, const char *s, size_t n, tt_record *rec) {
    const char *tab = memchr(s, '\t', n);
    if (!tab)
        return tt_err(TT_EPARSE, "%s:%llu: expected id<TAB>text", r->path,
                      (unsigned long long)r->lineno);
    size_t idl = (size_t)(tab - s);
    const char *body = tab + 1;
    size_t bl = n - idl - 1, tl = 0;
    const char *title = NULL;
    const char *tab2 = memchr(body, '\t', bl);
    if (tab2) { /* id, text, title (ColBERT collection.tsv); further columns ignored */
        title = tab2 + 1;
        tl = (size_t)(s + n - title);
        const char *tab3 = memchr(title, '\t', tl);
        if (tab3)
            tl = (size_t)(tab3 - title);
        bl = (size_t)(tab2 - body);
    }
    int st;
    if ((st = tt_sbuf_append(&r->vals[0], s, idl)) || (st = assemble(r, title, tl, body, bl)))
        return st;
    rec->id = r->vals[0].p;
    rec->id_len = r->vals[0].len;
    return TT_OK;
}

int tt_records_next(tt_records *r, tt_record *rec) {
    for (;;) {
        errno = 0;
        ssize_t got = getline(&r->line, &r->linecap, r->f);
        if (got < 0) {
            if (ferror(r->f))
                return tt_err_errno(TT_EIO, errno ? errno : EIO, "%s: read failed", r->path);
            return 0;
        }
        r->lineno++;
        size_t n = (size_t)got;
        while (n && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r'))
            n--;
        if (blank_line(r->line, n))
            continue;
        bool first = !r->seen_first;
        r->seen_first = true;
        if (r->format == TT_REC_AUTO)
            r->format = first_nonblank(r->line, n) == '{' ? TT_REC_JSONL : TT_REC_TSV;
        int st;
        r->vals[0].len = 0;
        if (r->format == TT_REC_JSONL) {
            st = parse_jsonl(r, r->line, n, rec);
        } else {
            if (first && tsv_header(r->line, n))
                continue;
            st = parse_tsv(r, r->line, n, rec);
        }
        if (st)
            return st;
        const char *bad = tt_record_id_problem(rec->id, rec->id_len);
        if (bad)
            return tt_err(TT_EPARSE, "%s:%llu: %s", r->path, (unsigned long long)r->lineno, bad);
        if (r->text.len > TT_ENC_MAX_TEXT)
            return tt_err(TT_EPARSE, "%s:%llu: text longer than %u bytes", r->path,
                          (unsigned long long)r->lineno, TT_ENC_MAX_TEXT);
        rec->text = r->text.p ? r->text.p : "";
        rec->text_len = r->text.len;
        r->recline = r->lineno;
        return 1;
    }
}

uint64_t tt_records_count(const char *path, int format) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    if (format == TT_REC_AUTO)
        format = format_by_name(path);
    char *line = NULL;
    size_t cap = 0;
    uint64_t count = 0;
    bool first = true;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        size_t n = (size_t)got;
        if (blank_line(line, n))
            continue;
        if (format == TT_REC_AUTO)
            format = first_nonblank(line, n) == '{' ? TT_REC_JSONL : TT_REC_TSV;
        if (!(first && format == TT_REC_TSV && tsv_header(line, n)))
            count++;
        first = false;
    }
    free(line);
    fclose(f);
    return count;
}

/* ============================================================ command line */

void tt_argv_free(char **argv) {
    if (!argv)
        return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}

int tt_split_command(const char *cmd, char ***argv_out, size_t *argc_out) {
    *argv_out = NULL;
    if (argc_out)
        *argc_out = 0;
    if (!cmd)
        return tt_err(TT_EINVAL, "encoder command: NULL");
    size_t cap = 8, argc = 0;
    char **argv = calloc(cap + 1, sizeof *argv);
    tt_sbuf word = {0};
    int st = TT_OK;
    if (!argv)
        return tt_err(TT_ENOMEM, "encoder command: cannot allocate");
    const char *p = cmd;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        word.len = 0;
        bool any = false;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            any = true;
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q) {
                    st = tt_err(TT_EINVAL, "encoder command '%s': unterminated ' quote", cmd);
                    goto fail;
                }
                if ((st = tt_sbuf_append(&word, p + 1, (size_t)(q - p - 1))))
                    goto fail;
                p = q + 1;
            } else if (*p == '"') {
                p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                        p++;
                    if ((st = tt_sbuf_append(&word, p, 1)))
                        goto fail;
                    p++;
                }
                if (*p != '"') {
                    st = tt_err(TT_EINVAL, "encoder command '%s': unterminated \" quote", cmd);
                    goto fail;
                }
                p++;
            } else if (*p == '\\') {
                if (!p[1]) {
                    st = tt_err(TT_EINVAL, "encoder command '%s': trailing backslash", cmd);
                    goto fail;
                }
                if ((st = tt_sbuf_append(&word, p + 1, 1)))
                    goto fail;
                p += 2;
            } else {
                if ((st = tt_sbuf_append(&word, p, 1)))
                    goto fail;
                p++;
            }
        }
        if (!any)
            continue;
        if (argc == cap) {
            char **n2 = realloc(argv, (cap * 2 + 1) * sizeof *argv);
            if (!n2) {
                st = tt_err(TT_ENOMEM, "encoder command: cannot allocate");
                goto fail;
            }
            argv = n2;
            cap *= 2;
        }
        argv[argc] = malloc(word.len + 1);
        if (!argv[argc]) {
            st = tt_err(TT_ENOMEM, "encoder command: cannot allocate");
            goto fail;
        }
        if (word.len)
            memcpy(argv[argc], word.p, word.len);
        argv[argc][word.len] = '\0';
        argv[++argc] = NULL;
    }
    if (argc == 0) {
        st = tt_err(TT_EINVAL, "encoder command '%s': no program given", cmd);
        goto fail;
    }
    tt_sbuf_free(&word);
    *argv_out = argv;
    if (argc_out)
        *argc_out = argc;
    return TT_OK;
fail:
    tt_sbuf_free(&word);
    tt_argv_free(argv);
    return st;
}

/* ================================================================ session */

#define WBUF_LOW (512u << 10)   /* top up the request buffer below this many bytes */
#define READ_CHUNK (64u << 10)
#define MSG_TAIL 420            /* stderr bytes quoted in an error message */

static const uint8_t TAG_VECS[4] = {'V', 'E', 'C', 'S'};
static const uint8_t TAG_DONE[4] = {'D', 'O', 'N', 'E'};
static const char HELLO_MAGIC[] = "TARTAN-ENCODER ";

struct tt_encoder {
    char *name;                 /* the command, for messages */
    pid_t pid;                  /* > 0 while not reaped */
    int fd_in, fd_out, fd_err;  /* our ends; -1 once closed */
    int mode;
    tt_encoder_options opt;
    /* from the hello line */
    uint32_t dim, max_vectors;
    int dtype;
    uint32_t elem;              /* bytes per value on the wire */
    char *description;
    /* stdout bytes not yet parsed: rbuf[rstart, rend) */
    uint8_t *rbuf;
    size_t rcap, rstart, rend;
    /* requests not yet written: wbuf[wpos, wlen) */
    uint8_t *wbuf;
    size_t wcap, wpos, wlen;
    /* FIFO of the ids of records sent and not yet answered */
    char **qid;
    size_t *qlen;
    size_t qcap, qhead, qcount;
    uint64_t sent, answered, total, done_count;
    float *vecs;                /* one reply converted to float32 */
    size_t vecs_cap;
    /* the last TT_ENC_STDERR_KEEP bytes of stderr, kept NUL-terminated */
    char err[TT_ENC_STDERR_KEEP + 1];
    size_t err_len;
    bool ran;
    bool reaped, killed, wait_unknown;
    int wstatus;
};

void tt_encoder_options_init(tt_encoder_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->timeout_ms = 300000;
    opt->startup_timeout_ms = 600000;
    opt->input_format = TT_REC_AUTO;
}

uint32_t tt_encoder_dim(const tt_encoder *enc) { return enc->dim; }
int tt_encoder_dtype(const tt_encoder *enc) { return enc->dtype; }
uint32_t tt_encoder_max_vectors(const tt_encoder *enc) { return enc->max_vectors; }
const char *tt_encoder_description(const tt_encoder *enc) { return enc->description; }

const char *tt_encoder_stderr_tail(const tt_encoder *enc) { return enc->err; }

/* ------------------------------------------------------------ process */

static void close_fd(int *fd) {
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void keep_stderr(tt_encoder *e, const char *buf, size_t n) {
    const size_t cap = TT_ENC_STDERR_KEEP;
    if (n >= cap) {
        memcpy(e->err, buf + n - cap, cap);
        e->err_len = cap;
    } else {
        if (e->err_len + n > cap) {
            size_t drop = e->err_len + n - cap;
            memmove(e->err, e->err + drop, e->err_len - drop);
            e->err_len -= drop;
        }
        memcpy(e->err + e->err_len, buf, n);
        e->err_len += n;
    }
    e->err[e->err_len] = '\0';
}

/* Reads what stderr has now (bounded, so a chatty encoder cannot starve the loop). */
static void drain_stderr(tt_encoder *e) {
    char buf[4096];
    for (int k = 0; k < 16 && e->fd_err >= 0; k++) {
        ssize_t r = read(e->fd_err, buf, sizeof buf);
        if (r > 0) {
            keep_stderr(e, buf, (size_t)r);
            if (e->opt.stderr_fn)
                e->opt.stderr_fn(e->opt.stderr_user, buf, (size_t)r);
        } else if (r == 0) {
            close_fd(&e->fd_err);
        } else if (errno != EINTR) {
            return; /* EAGAIN: nothing more now */
        }
    }
}

static void kill_group(tt_encoder *e) {
    if (e->pid > 0) {
        kill(-e->pid, SIGKILL); /* the encoder leads its own process group */
        kill(e->pid, SIGKILL);
        e->killed = true;
    }
}

/* Waits up to wait_s for the child to exit (draining stderr meanwhile so it cannot
 * block on a full stderr pipe), then kills its group. Always reaps. */
static void reap(tt_encoder *e, double wait_s) {
    double t0 = tt_now();
    while (e->pid > 0) {
        int status;
        pid_t r = waitpid(e->pid, &status, e->killed ? 0 : WNOHANG);
        if (r == e->pid) {
            e->wstatus = status;
            e->pid = 0;
            e->reaped = true;
            break;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) { /* ECHILD: someone else reaped it (SIGCHLD ignored) */
            e->pid = 0;
            e->reaped = true;
            e->wait_unknown = true;
            break;
        }
        if (tt_now() - t0 >= wait_s) {
            kill_group(e);
            continue;
        }
        if (e->fd_err >= 0) {
            struct pollfd p = {e->fd_err, POLLIN, 0};
            if (poll(&p, 1, 5) > 0)
                drain_stderr(e);
        } else {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    /* The child is gone; whatever it wrote to stderr is in the pipe (unless a
     * grandchild keeps it open: then we take what is there now). */
    drain_stderr(e);
}

static void describe_exit(const tt_encoder *e, char *buf, size_t n) {
    if (e->killed) /* only reached when stdout closed and no exit followed */
        snprintf(buf, n, "closed its stdout but did not exit (killed by tartan)");
    else if (e->wait_unknown)
        snprintf(buf, n, "ended (exit status unavailable)");
    else if (WIFEXITED(e->wstatus))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(e->wstatus));
    else if (WIFSIGNALED(e->wstatus))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(e->wstatus),
                 strsignal(WTERMSIG(e->wstatus)));
    else
        snprintf(buf, n, "ended");
}

/* Records a failure: kills and reaps the encoder if it still runs, then sets the
 * message "encoder 'CMD': <what>" followed by the tail of its stderr. */
static int enc_fail(tt_encoder *e, int status, const char *fmt, ...) TT_PRINTF(3, 4);
static int enc_fail(tt_encoder *e, int status, const char *fmt, ...) {
    char head[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (e->pid > 0) {
        kill_group(e);
        reap(e, 0);
    }
    close_fd(&e->fd_in);
    close_fd(&e->fd_out);
    /* Quote the last lines of stderr, from a line start when possible. */
    size_t n = e->err_len, start = n > MSG_TAIL ? n - MSG_TAIL : 0;
    while (n > start && (e->err[n - 1] == '\n' || e->err[n - 1] == '\r' || e->err[n - 1] == ' '))
        n--;
    if (start > 0) {
        const char *nl = memchr(e->err + start, '\n', n - start);
        if (nl && (size_t)(nl - e->err) < start + MSG_TAIL / 2)
            start = (size_t)(nl - e->err) + 1;
    }
    if (n <= start)
        return tt_err(status, "encoder '%s': %s (its stderr is empty)", e->name, head);
    return tt_err(status, "encoder '%s': %s; its stderr ends with:\n%s%.*s", e->name, head,
                  start > 0 ? "..." : "", (int)(n - start), e->err + start);
}

/* Moves fd above 2 so that dup2 onto 0/1/2 in the child always clears CLOEXEC. */
static int fd_above_stdio(int *fd) {
    if (*fd > 2)
        return 0;
    int nfd = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
    if (nfd < 0)
        return -1;
    close(*fd);
    *fd = nfd;
    return 0;
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int spawn(tt_encoder *e, const char *const *argv) {
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    char **full = NULL;
    int st = TT_OK;
    bool fa_ok = false, attr_ok = false;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    size_t argc = 0;
    while (argv[argc])
        argc++;
    full = calloc(argc + 3, sizeof *full);
    if (!full) {
        st = tt_err(TT_ENOMEM, "encoder '%s': cannot allocate", e->name);
        goto done;
    }
    for (size_t i = 0; i < argc; i++)
        full[i] = (char *)argv[i];
    full[argc] = (char *)"--mode";
    full[argc + 1] = (char *)(e->mode == TT_ENC_QUERY ? "query" : "passage");
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC) ||
        fd_above_stdio(&pin[0]) || fd_above_stdio(&pout[1]) || fd_above_stdio(&perr[1])) {
        st = tt_err_errno(TT_EIO, errno, "encoder '%s': cannot create pipes", e->name);
        goto done;
    }
#ifdef F_SETPIPE_SZ
    /* Larger pipes mean fewer wake-ups for big replies (DiffRetriever: 16 x 3584 floats);
     * the default 64 KiB still works, so failure is ignored. */
    (void)fcntl(pout[0], F_SETPIPE_SZ, 1 << 20);
    (void)fcntl(pin[1], F_SETPIPE_SZ, 1 << 20);
#endif
    int rc;
    if ((rc = posix_spawn_file_actions_init(&fa))) {
        st = tt_err_errno(TT_ENOMEM, rc, "encoder '%s': spawn setup", e->name);
        goto done;
    }
    fa_ok = true;
    if ((rc = posix_spawnattr_init(&attr))) {
        st = tt_err_errno(TT_ENOMEM, rc, "encoder '%s': spawn setup", e->name);
        goto done;
    }
    attr_ok = true;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    if ((rc = posix_spawn_file_actions_adddup2(&fa, pin[0], 0)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, pout[1], 1)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, perr[1], 2)) ||
        (rc = posix_spawnattr_setsigmask(&attr, &none)) ||
        (rc = posix_spawnattr_setsigdefault(&attr, &defaults)) ||
        (rc = posix_spawnattr_setpgroup(&attr, 0)) ||
        (rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                  POSIX_SPAWN_SETPGROUP))) {
        st = tt_err_errno(TT_EIO, rc, "encoder '%s': spawn setup", e->name);
        goto done;
    }
    pid_t pid;
    rc = posix_spawnp(&pid, full[0], &fa, &attr, full, environ);
    if (rc == ENOENT || rc == ENOTDIR) {
        st = tt_err(TT_ENOTFOUND, "encoder '%s': %s: %s", e->name, full[0],
                    strchr(full[0], '/') ? "no such file" : "command not found in PATH");
        goto done;
    }
    if (rc == EACCES || rc == ENOEXEC || rc == EISDIR) {
        st = tt_err_errno(TT_EENCODER, rc, "encoder '%s': cannot execute %s", e->name, full[0]);
        goto done;
    }
    if (rc) {
        st = tt_err_errno(TT_EIO, rc, "encoder '%s': cannot start %s", e->name, full[0]);
        goto done;
    }
    e->pid = pid;
    e->fd_in = pin[1];
    e->fd_out = pout[0];
    e->fd_err = perr[0];
    pin[1] = pout[0] = perr[0] = -1;
    if (set_nonblock(e->fd_in) || set_nonblock(e->fd_out) || set_nonblock(e->fd_err))
        st = tt_err_errno(TT_EIO, errno, "encoder '%s': fcntl", e->name);
done:
    for (int k = 0; k < 2; k++) {
        close_fd(&pin[k]);
        close_fd(&pout[k]);
        close_fd(&perr[k]);
    }
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    free(full);
    return st;
}

/* write() with SIGPIPE blocked for this thread only. A SIGPIPE raised by this write
 * (EPIPE) is consumed before the old mask returns, unless one was already pending. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t n, int *err) {
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE) == 1;
    ssize_t w = write(fd, buf, n);
    *err = w < 0 ? errno : 0;
    if (w < 0 && *err == EPIPE && !was_pending) {
        const struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return w;
}

/* Makes room for `need` unparsed bytes plus a read chunk in rbuf. */
static int rbuf_room(tt_encoder *e, size_t need) {
    size_t have = e->rend - e->rstart;
    if (e->rstart > 0 && (e->rcap - e->rend < READ_CHUNK || e->rcap - e->rstart < need)) {
        memmove(e->rbuf, e->rbuf + e->rstart, have);
        e->rstart = 0;
        e->rend = have;
    }
    size_t want = TT_MAX(need, have) + READ_CHUNK;
    if (e->rcap >= want)
        return TT_OK;
    uint8_t *p = realloc(e->rbuf, want);
    if (!p)
        return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate a %zu-byte reply buffer",
                      e->name, want);
    e->rbuf = p;
    e->rcap = want;
    return TT_OK;
}

/* One read from stdout: >0 bytes read, 0 at EOF, -1 nothing now, or an error status
 * (< -1 never collides: statuses are <= -1 but returned separately via *st). */
static int read_stdout(tt_encoder *e, size_t need, int *st) {
    *st = rbuf_room(e, need);
    if (*st)
        return -1;
    for (;;) {
        ssize_t r = read(e->fd_out, e->rbuf + e->rend, e->rcap - e->rend);
        if (r > 0) {
            e->rend += (size_t)r;
            return 1;
        }
        if (r == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -1;
        *st = tt_err_errno(TT_EIO, errno, "encoder '%s': reading its output", e->name);
        return -1;
    }
}

static int ms_left(double deadline) {
    double left = deadline - tt_now();
    if (left <= 0)
        return 0;
    return left > 3600 ? 3600000 : (int)(left * 1000) + 1;
}

/* A printable rendering of up to 16 bytes of unexpected output, for messages. */
static void show_bytes(const uint8_t *p, size_t n, char *buf, size_t cap) {
    bool text = true;
    n = TT_MIN(n, 16);
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] >= 0x7f)
            text = p[i] == '\n' || p[i] == '\t' ? text : false;
    size_t k = 0;
    buf[0] = '\0';
    if (text) {
        buf[k++] = '"';
        for (size_t i = 0; i < n && k + 4 < cap; i++) {
            if (p[i] == '\n' || p[i] == '\t') {
                buf[k++] = '\\';
                buf[k++] = p[i] == '\n' ? 'n' : 't';
            } else {
                buf[k++] = (char)p[i];
            }
        }
        buf[k++] = '"';
        buf[k] = '\0';
    } else {
        for (size_t i = 0; i < n && k + 4 < cap; i++)
            k += (size_t)snprintf(buf + k, cap - k, "%s%02x", i ? " " : "", p[i]);
    }
}

static bool parse_u32(const char **p, uint32_t max, uint32_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    if (!is_digit(*s))
        return false;
    while (is_digit(*s)) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return false;
        s++;
    }
    *p = s;
    *out = (uint32_t)v;
    return true;
}

/* The hello line (protocol section 2), without its '\n'. */
static int parse_hello(tt_encoder *e, char *line, size_t n) {
    if (n && line[n - 1] == '\r')
        line[--n] = '\0';
    const char *p = line + sizeof HELLO_MAGIC - 1;
    uint32_t version, dim, maxv;
    if (!parse_u32(&p, 1000000, &version) || *p != ' ')
        return enc_fail(e, TT_EENCODER, "malformed hello line '%.200s'", line);
    if (version != 1)
        return enc_fail(e, TT_EVERSION, "speaks protocol version %u; this tartan speaks 1",
                        version);
    p++;
    if (!parse_u32(&p, TT_ENC_MAX_DIM, &dim) || dim == 0 || *p != ' ')
        return enc_fail(e, TT_EENCODER, "hello line '%.200s': dim must be 1..%u", line,
                        TT_ENC_MAX_DIM);
    p++;
    int dtype = !strncmp(p, "f32 ", 4) ? TT_ENC_F32 : !strncmp(p, "f16 ", 4) ? TT_ENC_F16 : 0;
    if (!dtype)
        return enc_fail(e, TT_EENCODER, "hello line '%.200s': dtype must be f32 or f16", line);
    p += 4;
    if (!parse_u32(&p, TT_ENC_MAX_VECTORS, &maxv) || (*p != ' ' && *p != '\0'))
        return enc_fail(e, TT_EENCODER, "hello line '%.200s': max_vectors must be 0..%u", line,
                        TT_ENC_MAX_VECTORS);
    if (*p == ' ')
        p++;
    for (const char *q = p; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            return enc_fail(e, TT_EENCODER, "hello line: control character in the description");
    if (e->opt.expected_dim && dim != e->opt.expected_dim)
        return enc_fail(e, TT_EDIM, "produces %u-dimensional vectors but %u are required",
                        dim, e->opt.expected_dim);
    e->description = strdup(p);
    if (!e->description)
        return enc_fail(e, TT_ENOMEM, "cannot allocate the description");
    e->dim = dim;
    e->dtype = dtype;
    e->elem = dtype == TT_ENC_F32 ? 4 : 2;
    e->max_vectors = maxv;
    return TT_OK;
}

/* Reads the hello line within the startup timeout (protocol section 2). */
static int read_hello(tt_encoder *e) {
    double deadline = tt_now() + e->opt.startup_timeout_ms / 1000.0;
    const size_t magic_len = sizeof HELLO_MAGIC - 1;
    for (;;) {
        size_t have = e->rend - e->rstart;
        const uint8_t *p = e->rbuf ? e->rbuf + e->rstart : NULL;
        if (have && memcmp(p, HELLO_MAGIC, TT_MIN(have, magic_len))) {
            char shown[80];
            show_bytes(p, have, shown, sizeof shown);
            return enc_fail(e, TT_EENCODER,
                            "expected the hello line 'TARTAN-ENCODER 1 ...' on stdout but got "
                            "%s (does it print to stdout?)", shown);
        }
        const uint8_t *nl = have ? memchr(p, '\n', have) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - p);
            char line[TT_ENC_MAX_HELLO + 1];
            memcpy(line, p, n);
            line[n] = '\0';
            e->rstart += n + 1;
            return parse_hello(e, line, n);
        }
        if (have >= TT_ENC_MAX_HELLO)
            return enc_fail(e, TT_EENCODER, "hello line longer than %u bytes", TT_ENC_MAX_HELLO);
        struct pollfd pf[2] = {{e->fd_out, POLLIN, 0}, {e->fd_err, POLLIN, 0}};
        int nfd = e->fd_err >= 0 ? 2 : 1;
        int ms = ms_left(deadline);
        if (ms == 0)
            return enc_fail(e, TT_ETIMEOUT, "no hello line within %.1f s (startup timeout; "
                            "killed)", e->opt.startup_timeout_ms / 1000.0);
        int pr = poll(pf, (nfds_t)nfd, ms);
        if (pr < 0 && errno != EINTR)
            return enc_fail(e, TT_EIO, "poll: %s", strerror(errno));
        if (pr <= 0)
            continue;
        if (nfd == 2 && pf[1].revents)
            drain_stderr(e);
        if (pf[0].revents) {
            int st;
            int r = read_stdout(e, 0, &st);
            if (st)
                return enc_fail(e, st, "reading the hello line");
            if (r == 0) {
                reap(e, TT_MIN(10.0, e->opt.timeout_ms / 1000.0));
                char how[96];
                describe_exit(e, how, sizeof how);
                bool nf = e->reaped && !e->killed && !e->wait_unknown &&
                          WIFEXITED(e->wstatus) && WEXITSTATUS(e->wstatus) == 127;
                return enc_fail(e, nf ? TT_ENOTFOUND : TT_EENCODER, "%s before its hello line%s",
                                how, nf ? " (127: command not found?)" : "");
            }
        }
    }
}

static int enc_start_impl(tt_encoder *e, const char *const *argv, int mode,
                          const tt_encoder_options *opt) {
    e->fd_in = e->fd_out = e->fd_err = -1;
    tt_encoder_options_init(&e->opt);
    if (opt) {
        size_t n = opt->struct_size && opt->struct_size < sizeof *opt ? opt->struct_size
                                                                      : sizeof *opt;
        memcpy(&e->opt, opt, n);
        e->opt.struct_size = sizeof e->opt;
    }
    if (e->opt.timeout_ms == 0)
        e->opt.timeout_ms = 300000;
    if (e->opt.startup_timeout_ms == 0)
        e->opt.startup_timeout_ms = 600000;
    e->mode = mode;
    /* The command as the user would read it, for messages. */
    tt_sbuf nm = {0};
    for (size_t i = 0; argv[i]; i++) {
        if ((i && tt_sbuf_append(&nm, " ", 1)) || tt_sbuf_append(&nm, argv[i], strlen(argv[i]))) {
            tt_sbuf_free(&nm);
            return tt_err(TT_ENOMEM, "encoder: cannot allocate");
        }
    }
    if (nm.len > 160) {
        nm.len = 157;
        tt_sbuf_append(&nm, "...", 3);
    }
    if (!tt_sbuf_cstr(&nm)) {
        tt_sbuf_free(&nm);
        return tt_err(TT_ENOMEM, "encoder: cannot allocate");
    }
    e->name = nm.p;
    int st = spawn(e, argv);
    if (st)
        return st;
    return read_hello(e);
}

static int check_start_args(const void *cmd, int mode) {
    if (!cmd)
        return tt_err(TT_EINVAL, "encoder: no command given");
    if (mode != TT_ENC_PASSAGE && mode != TT_ENC_QUERY)
        return tt_err(TT_EINVAL, "encoder: mode must be TT_ENC_PASSAGE or TT_ENC_QUERY, not %d",
                      mode);
    return TT_OK;
}

int tt_encoder_start_argv(tt_encoder **out, const char *const *argv, int mode,
                          const tt_encoder_options *opt) {
    if (!out)
        return tt_err(TT_EINVAL, "encoder: out is NULL");
    *out = NULL;
    int st = check_start_args(argv, mode);
    if (st)
        return st;
    if (!argv[0] || !argv[0][0])
        return tt_err(TT_EINVAL, "encoder: empty command");
    tt_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return tt_err(TT_ENOMEM, "encoder: cannot allocate a session");
    st = enc_start_impl(e, argv, mode, opt);
    if (st) {
        tt_encoder_free(e); /* keeps the message: free never sets errors */
        return st;
    }
    *out = e;
    return TT_OK;
}

int tt_encoder_start(tt_encoder **out, const char *command, int mode,
                     const tt_encoder_options *opt) {
    if (!out)
        return tt_err(TT_EINVAL, "encoder: out is NULL");
    *out = NULL;
    int st = check_start_args(command, mode);
    if (st)
        return st;
    char **argv;
    if ((st = tt_split_command(command, &argv, NULL)))
        return st;
    st = tt_encoder_start_argv(out, (const char *const *)argv, mode, opt);
    tt_argv_free(argv);
    return st;
}

void tt_encoder_free(tt_encoder *e) {
    if (!e)
        return;
    close_fd(&e->fd_in);
    close_fd(&e->fd_out);
    if (e->pid > 0) {
        kill_group(e);
        reap(e, 0);
    }
    close_fd(&e->fd_err);
    for (size_t i = 0; i < e->qcount; i++)
        free(e->qid[(e->qhead + i) % e->qcap]);
    free(e->qid);
    free(e->qlen);
    free(e->name);
    free(e->description);
    free(e->rbuf);
    free(e->wbuf);
    free(e->vecs);
    free(e);
}

/* ------------------------------------------------------------- the run */

static int queue_push(tt_encoder *e, const char *id, size_t len) {
    if (e->qcount == e->qcap) {
        size_t ncap = e->qcap ? e->qcap * 2 : 256;
        char **nid = malloc(ncap * sizeof *nid);
        size_t *nlen = malloc(ncap * sizeof *nlen);
        if (!nid || !nlen) {
            free(nid);
            free(nlen);
            return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate the pending-id queue",
                          e->name);
        }
        for (size_t i = 0; i < e->qcount; i++) {
            nid[i] = e->qid[(e->qhead + i) % e->qcap];
            nlen[i] = e->qlen[(e->qhead + i) % e->qcap];
        }
        free(e->qid);
        free(e->qlen);
        e->qid = nid;
        e->qlen = nlen;
        e->qcap = ncap;
        e->qhead = 0;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate", e->name);
    memcpy(copy, id, len);
    copy[len] = '\0';
    size_t slot = (e->qhead + e->qcount) % e->qcap;
    e->qid[slot] = copy;
    e->qlen[slot] = len;
    e->qcount++;
    return TT_OK;
}

static void queue_pop(tt_encoder *e) {
    free(e->qid[e->qhead]);
    e->qhead = (e->qhead + 1) % e->qcap;
    e->qcount--;
}

/* Appends one request frame (protocol section 3) to the write buffer. */
static int put_request(tt_encoder *e, const tt_record *rec) {
    size_t need = 8 + rec->id_len + rec->text_len;
    if (e->wpos > 0) { /* compact */
        memmove(e->wbuf, e->wbuf + e->wpos, e->wlen - e->wpos);
        e->wlen -= e->wpos;
        e->wpos = 0;
    }
    if (e->wcap - e->wlen < need) {
        size_t ncap = TT_MAX(e->wlen + need, (size_t)WBUF_LOW * 2);
        uint8_t *p = realloc(e->wbuf, ncap);
        if (!p)
            return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate %zu bytes for requests",
                          e->name, ncap);
        e->wbuf = p;
        e->wcap = ncap;
    }
    uint8_t *w = e->wbuf + e->wlen;
    tt_wr32(w, (uint32_t)rec->id_len);
    memcpy(w + 4, rec->id, rec->id_len);
    tt_wr32(w + 4 + rec->id_len, (uint32_t)rec->text_len);
    if (rec->text_len)
        memcpy(w + 8 + rec->id_len, rec->text, rec->text_len);
    e->wlen += need;
    return TT_OK;
}

/* What tartan is waiting for, for messages. */
static void waiting_for(const tt_encoder *e, char *buf, size_t n) {
    if (e->qcount)
        snprintf(buf, n, "the reply to record #%llu '%.100s' (%llu of the %llu records sent "
                 "so far were answered)", (unsigned long long)e->answered + 1, e->qid[e->qhead],
                 (unsigned long long)e->answered, (unsigned long long)e->sent);
    else
        snprintf(buf, n, "the end marker (%llu records answered)",
                 (unsigned long long)e->answered);
}

/* Converts and checks one reply's values into e->vecs. */
static int convert(tt_encoder *e, const uint8_t *data, uint32_t n, const char *id) {
    uint64_t count = (uint64_t)n * e->dim;
    if (count > e->vecs_cap) {
        float *p = realloc(e->vecs, (size_t)count * sizeof *p);
        if (!p)
            return enc_fail(e, TT_ENOMEM, "cannot allocate %llu floats for record '%.100s'",
                            (unsigned long long)count, id);
        e->vecs = p;
        e->vecs_cap = (size_t)count;
    }
    if (e->dtype == TT_ENC_F32) {
        if (tt_host_is_le())
            memcpy(e->vecs, data, (size_t)count * 4);
        else
            for (uint64_t i = 0; i < count; i++)
                e->vecs[i] = tt_rdf32(data + 4 * i);
    } else {
        for (uint64_t i = 0; i < count; i++)
            e->vecs[i] = tt_f16_to_f32(tt_rd16(data + 2 * i));
    }
    int64_t bad = n ? tt_find_nonfinite(e->vecs, n, e->dim) : -1;
    if (bad >= 0)
        return enc_fail(e, TT_EVALUE, "record #%llu '%.100s': vector %lld of %u contains NaN "
                        "or Inf", (unsigned long long)e->answered + 1, id, (long long)bad + 1, n);
    return TT_OK;
}

/* Parses one frame from rbuf. Returns 1 if one was consumed, 0 if more bytes are needed
 * (*need: how many unparsed bytes the frame takes), or a negative status. */
static int parse_one(tt_encoder *e, tt_vectors_sink_fn sink, void *sink_user, bool *got_done,
                     size_t *need) {
    size_t have = e->rend - e->rstart;
    const uint8_t *p = e->rbuf + e->rstart;
    *need = 4;
    if (have < 4)
        return 0;
    if (!memcmp(p, TAG_DONE, 4)) {
        *need = 12;
        if (have < 12)
            return 0;
        e->done_count = tt_rd64(p + 4);
        e->rstart += 12;
        *got_done = true;
        return 1;
    }
    if (memcmp(p, TAG_VECS, 4)) {
        char shown[80], hint[160] = "";
        show_bytes(p, have, shown, sizeof shown);
        if (e->answered)
            snprintf(hint, sizeof hint, "; if the previous reply was not %u values of %s per "
                     "vector, the stream lost its framing", e->dim,
                     e->dtype == TT_ENC_F32 ? "f32" : "f16");
        return enc_fail(e, TT_EENCODER, "garbage on stdout: expected a reply tag \"VECS\" or "
                        "\"DONE\" after %llu replies but got %s%s",
                        (unsigned long long)e->answered, shown, hint);
    }
    *need = 8;
    if (have < 8)
        return 0;
    uint32_t idlen = tt_rd32(p + 4);
    if (idlen == 0 || idlen > TT_ENC_MAX_ID)
        return enc_fail(e, TT_EENCODER, "reply %llu: id length %u out of range 1..%u "
                        "(garbage on stdout?)", (unsigned long long)e->answered + 1, idlen,
                        TT_ENC_MAX_ID);
    *need = 12 + (size_t)idlen;
    if (have < *need)
        return 0;
    const char *rid = (const char *)p + 8;
    uint32_t n = tt_rd32(p + 8 + idlen);
    uint32_t limit = e->max_vectors ? e->max_vectors : TT_ENC_MAX_VECTORS;
    uint64_t bytes = (uint64_t)n * e->dim * e->elem;
    if (n > limit || bytes > TT_ENC_MAX_REPLY_DATA)
        return enc_fail(e, TT_EENCODER, "reply %llu (id '%.*s'): %u vectors is more than %s %u "
                        "(garbage on stdout?)", (unsigned long long)e->answered + 1,
                        (int)TT_MIN(idlen, 100), rid, n,
                        e->max_vectors ? "its declared max_vectors" : "the protocol limit",
                        limit);
    *need += (size_t)bytes;
    if (have < *need)
        return 0;
    if (e->qcount == 0)
        return enc_fail(e, TT_EENCODER, "too many replies: reply %llu (id '%.*s') but only "
                        "%llu records were sent, all answered", (unsigned long long)e->answered
                        + 1, (int)TT_MIN(idlen, 100), rid, (unsigned long long)e->sent);
    const char *want = e->qid[e->qhead];
    size_t wlen = e->qlen[e->qhead];
    if (wlen != idlen || memcmp(want, rid, idlen))
        return enc_fail(e, TT_EENCODER, "replies out of order or missing: expected the reply to "
                        "record #%llu '%.100s' but got id '%.*s'",
                        (unsigned long long)e->answered + 1, want, (int)TT_MIN(idlen, 100), rid);
    int st = convert(e, p + 12 + idlen, n, want);
    if (st)
        return st;
    e->rstart += *need;
    st = sink(sink_user, e->answered, want, wlen, n, e->vecs);
    if (st < 0) {
        int keep = st;
        if (e->pid > 0) { /* the sink's own message stays */
            kill_group(e);
            reap(e, 0);
        }
        return keep;
    }
    queue_pop(e);
    e->answered++;
    if (e->opt.progress)
        e->opt.progress(e->opt.progress_user, "encode", e->answered, e->total);
    return 1;
}

/* After the end marker: the encoder must close stdout without more bytes and exit 0
 * within the timeout. */
static int finish(tt_encoder *e, bool src_done) {
    char what[256];
    if (!src_done || e->fd_in >= 0)
        return enc_fail(e, TT_EENCODER, "sent its end marker after %llu replies, before tartan "
                        "finished sending records (%llu sent so far)",
                        (unsigned long long)e->answered, (unsigned long long)e->sent);
    if (e->qcount) {
        waiting_for(e, what, sizeof what);
        return enc_fail(e, TT_EENCODER, "wrong record count: end marker while tartan waited "
                        "for %s", what);
    }
    if (e->done_count != e->answered)
        return enc_fail(e, TT_EENCODER, "wrong record count: its end marker says %llu replies "
                        "but it wrote %llu", (unsigned long long)e->done_count,
                        (unsigned long long)e->answered);
    double timeout = e->opt.timeout_ms / 1000.0, deadline = tt_now() + timeout;
    for (;;) {
        if (e->rend > e->rstart) {
            char shown[80];
            show_bytes(e->rbuf + e->rstart, e->rend - e->rstart, shown, sizeof shown);
            return enc_fail(e, TT_EENCODER, "trailing bytes after its end marker: %s", shown);
        }
        struct pollfd pf[2] = {{e->fd_out, POLLIN, 0}, {e->fd_err, POLLIN, 0}};
        int ms = ms_left(deadline);
        if (ms == 0)
            return enc_fail(e, TT_ETIMEOUT, "did not close its output within %.1f s after its "
                            "end marker (killed)", timeout);
        int pr = poll(pf, e->fd_err >= 0 ? 2 : 1, ms);
        if (pr < 0 && errno != EINTR)
            return enc_fail(e, TT_EIO, "poll: %s", strerror(errno));
        if (pr <= 0)
            continue;
        if (e->fd_err >= 0 && pf[1].revents)
            drain_stderr(e);
        if (pf[0].revents) {
            int st;
            int r = read_stdout(e, 0, &st);
            if (st)
                return enc_fail(e, st, "reading its output");
            if (r == 0)
                break;
        }
    }
    close_fd(&e->fd_out);
    reap(e, TT_MAX(0.0, deadline - tt_now()));
    char how[96];
    describe_exit(e, how, sizeof how);
    if (e->killed)
        return enc_fail(e, TT_ETIMEOUT, "did not exit within %.1f s after its end marker "
                        "(killed)", timeout);
    if (!e->wait_unknown && !(WIFEXITED(e->wstatus) && WEXITSTATUS(e->wstatus) == 0))
        return enc_fail(e, TT_EENCODER, "%s after answering all %llu records", how,
                        (unsigned long long)e->answered);
    close_fd(&e->fd_err);
    return TT_OK;
}

int tt_encoder_run(tt_encoder *e, tt_record_source_fn source, void *source_user,
                   tt_vectors_sink_fn sink, void *sink_user) {
    if (!e || !source || !sink)
        return tt_err(TT_EINVAL, "tt_encoder_run: NULL argument");
    if (e->ran || e->pid <= 0)
        return tt_err(TT_EINVAL, "encoder '%s': a session runs once (start a new one)", e->name);
    e->ran = true;
    const double timeout = e->opt.timeout_ms / 1000.0;
    bool src_done = false, got_done = false;
    double last = tt_now();
    size_t need = 0;
    char what[256];
    while (!got_done) {
        /* 1. Keep up to WBUF_LOW bytes of requests ready. Records are sent without
         * waiting for replies, so an encoder reading B records per batch never starves. */
        while (!src_done && e->fd_in >= 0 && e->wlen - e->wpos < WBUF_LOW) {
            tt_record rec;
            memset(&rec, 0, sizeof rec);
            int r = source(source_user, &rec);
            last = tt_now();
            if (r < 0) {
                int keep = r;
                kill_group(e);
                reap(e, 0);
                return keep;
            }
            if (r == 0) {
                src_done = true;
                break;
            }
            const char *bad = rec.id ? tt_record_id_problem(rec.id, rec.id_len) : "NULL id";
            if (bad || (!rec.text && rec.text_len) || rec.text_len > TT_ENC_MAX_TEXT)
                return enc_fail(e, TT_EINVAL, "record #%llu: %s", (unsigned long long)e->sent + 1,
                                bad ? bad : "text NULL or longer than 64 MiB");
            int st = put_request(e, &rec);
            if (!st)
                st = queue_push(e, rec.id, rec.id_len);
            if (st)
                return enc_fail(e, st, "queueing record #%llu", (unsigned long long)e->sent + 1);
            e->sent++;
        }
        if (src_done && e->fd_in >= 0 && e->wpos == e->wlen)
            close_fd(&e->fd_in); /* EOF at a record boundary: no more records */
        /* 2. Wait for any pipe, or for the no-progress timeout. */
        struct pollfd pf[3];
        int np = 0, iout = -1, iin = -1, ierr = -1;
        if (e->fd_out >= 0) {
            pf[np] = (struct pollfd){e->fd_out, POLLIN, 0};
            iout = np++;
        }
        if (e->fd_in >= 0 && e->wpos < e->wlen) {
            pf[np] = (struct pollfd){e->fd_in, POLLOUT, 0};
            iin = np++;
        }
        if (e->fd_err >= 0) {
            pf[np] = (struct pollfd){e->fd_err, POLLIN, 0};
            ierr = np++;
        }
        int ms = ms_left(last + timeout);
        if (ms == 0) {
            waiting_for(e, what, sizeof what);
            return enc_fail(e, TT_ETIMEOUT, "no progress for %.1f s while tartan waited for %s "
                            "(killed)", timeout, what);
        }
        int pr = poll(pf, (nfds_t)np, ms);
        if (pr < 0 && errno != EINTR)
            return enc_fail(e, TT_EIO, "poll: %s", strerror(errno));
        if (pr <= 0)
            continue;
        if (ierr >= 0 && pf[ierr].revents)
            drain_stderr(e);
        /* 3. Requests. */
        if (iin >= 0 && pf[iin].revents) {
            int err;
            ssize_t w = write_nosigpipe(e->fd_in, e->wbuf + e->wpos, e->wlen - e->wpos, &err);
            if (w > 0) {
                e->wpos += (size_t)w;
                last = tt_now();
                if (e->wpos == e->wlen)
                    e->wpos = e->wlen = 0;
            } else if (w < 0 && err == EPIPE) {
                /* It closed stdin (or died): stop sending, read on to learn why. */
                close_fd(&e->fd_in);
                e->wpos = e->wlen = 0;
            } else if (w < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
                return enc_fail(e, TT_EIO, "writing records: %s", strerror(err));
            }
        }
        /* 4. Replies. */
        if (iout >= 0 && pf[iout].revents) {
            int st;
            int r = read_stdout(e, need, &st);
            if (st)
                return enc_fail(e, st, "reading its output");
            if (r > 0) {
                last = tt_now();
                for (;;) {
                    int k = parse_one(e, sink, sink_user, &got_done, &need);
                    if (k < 0)
                        return k;
                    if (k == 0 || got_done)
                        break;
                    last = tt_now();
                }
            } else if (r == 0) {
                /* stdout closed without the end marker: it died or quit. */
                close_fd(&e->fd_out);
                size_t partial = e->rend - e->rstart;
                waiting_for(e, what, sizeof what);
                reap(e, TT_MIN(10.0, timeout));
                char how[96], part[64] = "";
                describe_exit(e, how, sizeof how);
                if (partial)
                    snprintf(part, sizeof part, " (after %zu bytes of a partial reply)", partial);
                return enc_fail(e, TT_EENCODER, "%s while tartan waited for %s%s", how, what,
                                part);
            }
        }
    }
    return finish(e, src_done);
}

/* ------------------------------------------------------------ files */

static int records_source(void *user, tt_record *rec) { return tt_records_next(user, rec); }

int tt_encoder_encode_file(tt_encoder *enc, const char *input_path, tt_vectors_sink_fn sink,
                           void *sink_user) {
    if (!enc || !input_path || !sink)
        return tt_err(TT_EINVAL, "tt_encoder_encode_file: NULL argument");
    tt_records *r = NULL;
    int st = tt_records_open(&r, input_path, enc->opt.input_format, enc->mode);
    if (st) {
        /* As after any failed run: the session is over and no process is left. */
        enc->ran = true;
        if (enc->pid > 0) {
            kill_group(enc);
            reap(enc, 0);
        }
        return st;
    }
    if (enc->opt.progress)
        enc->total = tt_records_count(input_path, enc->opt.input_format);
    st = tt_encoder_run(enc, records_source, r, sink, sink_user);
    tt_records_close(r);
    return st;
}

/* ======================================================= tartan encode */

enum { OUT_VECTORS, OUT_DOCLENS, OUT_IDS, OUT_ENCODER, NOUT };
static const char *const out_suffix[NOUT] = {".vectors.npy", ".doclens.npy", ".ids.txt",
                                             ".encoder.txt"};

typedef struct npy_sink {
    tt_npy_writer vec, len;
    bool vec_open, len_open;
    FILE *ids;
    const char *ids_path;
    int64_t lens[4096];
    size_t nlens;
    uint64_t records, vectors;
} npy_sink;

static int flush_lens(npy_sink *s) {
    int st = tt_npy_writer_append(&s->len, s->lens, s->nlens);
    s->nlens = 0;
    return st;
}

static int npy_sink_fn(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                       const float *vectors) {
    npy_sink *s = user;
    if (n == 0)
        return tt_err(TT_EVALUE, "record #%llu '%.*s': the encoder gave 0 vectors; an indexed "
                      "document or query needs at least one", (unsigned long long)index + 1,
                      (int)TT_MIN(id_len, 100), id);
    int st = tt_npy_writer_append(&s->vec, vectors, n);
    if (st)
        return st;
    s->lens[s->nlens++] = n;
    if (s->nlens == sizeof s->lens / sizeof s->lens[0] && (st = flush_lens(s)))
        return st;
    if (fwrite(id, 1, id_len, s->ids) != id_len || putc('\n', s->ids) == EOF)
        return tt_err_errno(TT_EIO, errno, "%s: write failed", s->ids_path);
    s->records++;
    s->vectors += n;
    return TT_OK;
}

static int close_text(FILE **f, const char *path) {
    int st = TT_OK;
    if (fflush(*f) != 0 || fsync(fileno(*f)) != 0)
        st = tt_err_errno(TT_EIO, errno, "%s: write failed", path);
    if (fclose(*f) != 0 && !st)
        st = tt_err_errno(TT_EIO, errno, "%s: close failed", path);
    *f = NULL;
    return st;
}

/* fsync of the directory holding `path`, so the renames survive a crash. */
static int sync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy)
        return tt_err(TT_ENOMEM, "%s: out of memory", path);
    const char *dir = dirname(copy);
    int st = TT_OK, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        st = tt_err_errno(TT_EIO, errno, "%s: cannot sync the directory", dir);
    if (fd >= 0)
        close(fd);
    free(copy);
    return st;
}

int tt_encode_to_npy(const char *command, const char *input_path, int mode,
                     const char *out_prefix, const tt_encoder_options *opt,
                     tt_encode_stats *stats) {
    char *final[NOUT] = {0}, *tmp[NOUT] = {0};
    npy_sink s;
    tt_encoder *e = NULL;
    FILE *desc = NULL;
    int st = TT_OK;
    double t0 = tt_now();
    memset(&s, 0, sizeof s);
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!command || !input_path || !out_prefix || !*out_prefix)
        return tt_err(TT_EINVAL, "tt_encode_to_npy: NULL or empty argument");
    tt_encoder_options o;
    tt_encoder_options_init(&o);
    if (opt)
        memcpy(&o, opt, opt->struct_size && opt->struct_size < sizeof o ? opt->struct_size
                                                                         : sizeof o);
    o.struct_size = sizeof o;
    for (int k = 0; k < NOUT; k++) {
        size_t L = strlen(out_prefix) + strlen(out_suffix[k]) + 5;
        final[k] = malloc(L);
        tmp[k] = malloc(L);
        if (!final[k] || !tmp[k]) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", out_prefix);
            goto done;
        }
        snprintf(final[k], L, "%s%s", out_prefix, out_suffix[k]);
        snprintf(tmp[k], L, "%s%s.tmp", out_prefix, out_suffix[k]);
        struct stat sb;
        if (!o.force && stat(final[k], &sb) == 0) {
            st = tt_err(TT_EEXIST, "%s exists (force replaces it)", final[k]);
            goto done;
        }
    }
    /* Start the encoder first: its hello gives the dimension of the vectors file. */
    char **argv = NULL;
    if ((st = tt_split_command(command, &argv, NULL)))
        goto done;
    if ((st = check_start_args(argv, mode)) == TT_OK) {
        e = calloc(1, sizeof *e);
        st = e ? enc_start_impl(e, (const char *const *)argv, mode, &o)
               : tt_err(TT_ENOMEM, "encoder: cannot allocate a session");
    }
    tt_argv_free(argv);
    if (st)
        goto done;
    if ((st = tt_npy_writer_open(&s.vec, tmp[OUT_VECTORS], TT_DT_F32, e->dim)))
        goto done;
    s.vec_open = true;
    if ((st = tt_npy_writer_open(&s.len, tmp[OUT_DOCLENS], TT_DT_I64, 0)))
        goto done;
    s.len_open = true;
    s.ids_path = tmp[OUT_IDS];
    if (!(s.ids = fopen(tmp[OUT_IDS], "wb"))) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot create", tmp[OUT_IDS]);
        goto done;
    }
    if ((st = tt_encoder_encode_file(e, input_path, npy_sink_fn, &s)))
        goto done;
    if (s.records == 0) {
        st = tt_err(TT_EVALUE, "%s: no records to encode", input_path);
        goto done;
    }
    if ((st = flush_lens(&s)))
        goto done;
    s.vec_open = false; /* close (fsync) aborts and removes the file on failure */
    if ((st = tt_npy_writer_close(&s.vec)))
        goto done;
    s.len_open = false;
    if ((st = tt_npy_writer_close(&s.len)))
        goto done;
    if ((st = close_text(&s.ids, tmp[OUT_IDS])))
        goto done;
    if (!(desc = fopen(tmp[OUT_ENCODER], "wb"))) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot create", tmp[OUT_ENCODER]);
        goto done;
    }
    if (fprintf(desc, "%s\n", e->description) < 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: write failed", tmp[OUT_ENCODER]);
        goto done;
    }
    if ((st = close_text(&desc, tmp[OUT_ENCODER])))
        goto done;
    /* Publish: the ids last, so a complete set of names is the sign of a finished run. */
    static const int order[NOUT] = {OUT_VECTORS, OUT_DOCLENS, OUT_ENCODER, OUT_IDS};
    for (int k = 0; k < NOUT; k++) {
        int j = order[k];
        if (rename(tmp[j], final[j]) != 0) {
            st = tt_err_errno(TT_EIO, errno, "%s: cannot rename to %s", tmp[j], final[j]);
            goto done;
        }
    }
    st = sync_dir_of(final[OUT_IDS]);
done:
    if (s.vec_open)
        tt_npy_writer_abort(&s.vec);
    if (s.len_open)
        tt_npy_writer_abort(&s.len);
    if (s.ids)
        fclose(s.ids);
    if (desc)
        fclose(desc);
    for (int k = 0; k < NOUT; k++) {
        if (st && tmp[k])
            unlink(tmp[k]); /* ENOENT when never created or already renamed: fine */
        free(tmp[k]);
        free(final[k]);
    }
    if (stats) {
        stats->records = s.records;
        stats->vectors = s.vectors;
        stats->seconds = tt_now() - t0;
        if (e) {
            stats->dim = e->dim;
            stats->dtype = e->dtype;
            snprintf(stats->description, sizeof stats->description, "%s",
                     e->description ? e->description : "");
            snprintf(stats->stderr_tail, sizeof stats->stderr_tail, "%s",
                     tt_encoder_stderr_tail(e));
        }
    }
    tt_encoder_free(e);
    return st;
}

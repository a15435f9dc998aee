/* Streaming readers of BEIR .jsonl and TSV record files (doc/encoder-protocol.md
 * section 6): one line at a time, texts assembled for passage or query mode. */
#include "input/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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
    return tt_id_problem(id, len, TT_ENC_MAX_ID);
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

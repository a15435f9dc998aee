/* Evaluation: qrels and run readers, trec_eval 10.0 measures, the paired t-test.
 *
 * The measures reproduce trec_eval 10.0 (usnistgov/trec_eval) exactly, including its
 * floating-point summation order, so values agree to the last printed digit:
 *  - form_res_rels.c ranks a query's retrieved documents by score (double) descending,
 *    ties by docid in decreasing strcmp order, ignoring the rank column. trec_eval
 *    9.0.x up to the 2020 tag v9.0.8 (and pytrec_eval, built on it) held the score in
 *    a float, so scores equal as floats tied there; doc/metrics.md has the example;
 *  - a document is relevant when its judged rel >= relevance_level (default 1);
 *    unjudged documents are non-relevant;
 *  - m_recip_rank.c, m_ndcg_cut.c (gain = rel, discount log2(rank + 1), ideal DCG from
 *    all judged positive rels), m_recall.c, m_map.c, m_success.c, m_P.c;
 *  - trec_eval.c evaluates the qrels queries that the run has (with -c, all qrels
 *    queries, missing ones scoring 0) and ignores run queries without judgements.
 * doc/metrics.md is the user-facing statement of all of this.
 *
 * Data layout: ids are interned in open-addressing string tables (one for query ids,
 * one for document ids per object); a run keeps per query an array of (score, doc)
 * of 16 bytes; qrels keep a hash map (query, doc) -> rel plus per query the list of
 * rels. Parsing a 10M-line run is one hash lookup per id and one strtod per line. */
#include "eval/eval.h"

#include "common/strtab.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ------------------------------------------------------------- pair map */

/* (query, doc) -> rel, open addressing on the 64-bit key (q+1)<<32 | d (never 0). */
typedef struct pairmap {
    uint64_t *key;
    int32_t *val;
    uint64_t n, nslot;
} pairmap;

static inline uint64_t pair_key(uint32_t q, uint32_t d) { return ((uint64_t)q + 1) << 32 | d; }

static const int32_t *pm_get(const pairmap *m, uint64_t key) {
    if (!m->nslot)
        return NULL;
    uint64_t mask = m->nslot - 1;
    for (uint64_t p = tt_fmix64(key) & mask;; p = (p + 1) & mask) {
        if (m->key[p] == key)
            return &m->val[p];
        if (!m->key[p])
            return NULL;
    }
}

static void pm_place(uint64_t *keys, int32_t *vals, uint64_t mask, uint64_t key, int32_t v) {
    uint64_t p = tt_fmix64(key) & mask;
    while (keys[p])
        p = (p + 1) & mask;
    keys[p] = key;
    vals[p] = v;
}

/* Inserts key -> v; *existed is set (and nothing changes) if key is present. */
static int pm_put(pairmap *m, uint64_t key, int32_t v, bool *existed) {
    *existed = pm_get(m, key) != NULL;
    if (*existed)
        return TT_OK;
    if ((m->n + 1) * 2 > m->nslot) {
        uint64_t ns = m->nslot ? m->nslot * 2 : 256;
        uint64_t *keys = tt_calloc(ns, sizeof *keys, "judgement table");
        int32_t *vals = tt_alloc(ns, sizeof *vals, "judgement table");
        if (!keys || !vals) {
            free(keys);
            free(vals);
            return TT_ENOMEM;
        }
        for (uint64_t i = 0; i < m->nslot; i++)
            if (m->key[i])
                pm_place(keys, vals, ns - 1, m->key[i], m->val[i]);
        free(m->key);
        free(m->val);
        m->key = keys;
        m->val = vals;
        m->nslot = ns;
    }
    pm_place(m->key, m->val, m->nslot - 1, key, v);
    m->n++;
    return TT_OK;
}

/* ---------------------------------------------------------- line reader */

/* Buffered reader of text lines (any length) from a file or stdin ("-"). Each line
 * is returned NUL-terminated without its '\n' and trailing '\r'. */
typedef struct lreader {
    FILE *f;
    const char *path;
    char *buf;
    size_t cap, len, pos;
    bool eof, is_stdin;
    uint64_t lineno;
} lreader;

static int lr_open(lreader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->path = path;
    if (strcmp(path, "-") == 0) {
        r->f = stdin;
        r->is_stdin = true;
    } else if (!(r->f = fopen(path, "rb"))) {
        return tt_err_errno(TT_EIO, errno, "%s", path);
    }
    r->cap = 1 << 20;
    if (!(r->buf = tt_alloc(r->cap, 1, "line buffer"))) {
        if (!r->is_stdin)
            fclose(r->f);
        r->f = NULL;
        return TT_ENOMEM;
    }
    return TT_OK;
}

static void lr_close(lreader *r) {
    if (r->f && !r->is_stdin)
        fclose(r->f);
    free(r->buf);
    memset(r, 0, sizeof *r);
}

/* 1: a line in *line (length *n); 0: end of file; < 0: error. */
static int lr_next(lreader *r, char **line, size_t *n) {
    for (;;) {
        char *start = r->buf + r->pos;
        char *nl = memchr(start, '\n', r->len - r->pos);
        if (nl || (r->eof && r->pos < r->len)) {
            size_t len = nl ? (size_t)(nl - start) : r->len - r->pos;
            r->pos += len + (nl ? 1 : 0);
            if (len && start[len - 1] == '\r')
                len--;
            start[len] = '\0'; /* the '\n', or the spare byte kept after the data */
            r->lineno++;
            *line = start;
            *n = len;
            return 1;
        }
        if (r->eof)
            return 0;
        /* Keep the partial line, make room and read more. One byte stays spare so the
         * last line of a file without a final newline can be NUL-terminated. */
        memmove(r->buf, start, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
        if (r->cap - r->len < (1 << 16)) {
            if (r->cap > SIZE_MAX / 2)
                return tt_err(TT_ENOMEM, "%s: line too long", r->path);
            char *buf = tt_regrow(r->buf, r->cap * 2, 1, "line buffer");
            if (!buf)
                return TT_ENOMEM;
            r->buf = buf;
            r->cap *= 2;
        }
        size_t got = fread(r->buf + r->len, 1, r->cap - r->len - 1, r->f);
        r->len += got;
        if (got == 0) {
            if (ferror(r->f))
                return tt_err_errno(TT_EIO, errno ? errno : EIO, "%s: read", r->path);
            r->eof = true;
        }
    }
}

static inline bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Splits s at runs of whitespace, NUL-terminating the fields. Stores at most max
 * fields and returns how many there are (possibly more than max). */
static size_t split_ws(char *s, char **f, size_t max) {
    size_t k = 0;
    for (;;) {
        while (is_ws(*s))
            s++;
        if (!*s)
            return k;
        if (k < max)
            f[k] = s;
        k++;
        while (*s && !is_ws(*s))
            s++;
        if (*s)
            *s++ = '\0';
    }
}

/* Splits s at tabs; fields keep inner spaces but lose surrounding ones. */
static size_t split_tabs(char *s, char **f, size_t max) {
    size_t k = 0;
    for (;;) {
        char *tab = strchr(s, '\t');
        if (tab)
            *tab = '\0';
        while (*s == ' ')
            s++;
        size_t len = strlen(s);
        while (len && s[len - 1] == ' ')
            s[--len] = '\0';
        if (k < max)
            f[k] = s;
        k++;
        if (!tab)
            return k;
        s = tab + 1;
    }
}

/* True for a blank line or a '#' comment. */
static bool skip_line(const char *s) {
    while (is_ws(*s))
        s++;
    return *s == '\0' || *s == '#';
}

static bool parse_int(const char *s, int32_t *out) {
    if (!*s)
        return false;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < INT32_MIN || v > INT32_MAX)
        return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_score(const char *s, double *out) {
    if (!*s)
        return false;
    char *end;
    double v = strtod(s, &end);
    if (*end || isnan(v))
        return false;
    *out = v; /* overflow gives +-HUGE_VAL, which still ranks correctly */
    return true;
}

static bool valid_id(const char *s) {
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (is_ws(*s) || *s == '\n')
            return false;
    return true;
}

/* ------------------------------------------------------------------ qrels */

typedef struct qrels_query {
    int32_t *rel; /* every judged rel of the query, in input order */
    uint32_t n, cap;
} qrels_query;

struct tt_qrels {
    tt_strtab qids, docs;
    qrels_query *q;
    uint32_t qcap;
    pairmap judged;
};

int tt_qrels_new(tt_qrels **out) {
    if (!out)
        return tt_err(TT_EINVAL, "tt_qrels_new: NULL argument");
    *out = tt_calloc(1, sizeof **out, "qrels");
    return *out ? TT_OK : TT_ENOMEM;
}

void tt_qrels_free(tt_qrels *qrels) {
    if (!qrels)
        return;
    for (uint32_t i = 0; i < qrels->qids.n; i++)
        free(qrels->q[i].rel);
    free(qrels->q);
    tt_st_free(&qrels->qids);
    tt_st_free(&qrels->docs);
    free(qrels->judged.key);
    free(qrels->judged.val);
    free(qrels);
}

size_t tt_qrels_num_queries(const tt_qrels *qrels) { return qrels ? qrels->qids.n : 0; }
uint64_t tt_qrels_num_judgements(const tt_qrels *qrels) { return qrels ? qrels->judged.n : 0; }

/* Adds a judgement; *dup is set (and nothing added) if the pair is already judged. */
static int qrels_put(tt_qrels *qr, const char *qid, size_t qlen, const char *doc, size_t dlen,
                     int32_t rel, bool *dup) {
    uint32_t q, d;
    bool added;
    int st = tt_st_intern(&qr->qids, qid, qlen, &q, &added);
    if (st)
        return st;
    if (added) {
        if (q >= qr->qcap) {
            uint32_t cap = tt_next_cap(qr->qcap, 64);
            qrels_query *qs = tt_regrow(qr->q, cap, sizeof *qs, "qrels");
            if (!qs)
                return TT_ENOMEM;
            qr->q = qs;
            qr->qcap = cap;
        }
        memset(&qr->q[q], 0, sizeof qr->q[q]);
    }
    if ((st = tt_st_intern(&qr->docs, doc, dlen, &d, NULL)))
        return st;
    if ((st = pm_put(&qr->judged, pair_key(q, d), rel, dup)) || *dup)
        return st;
    qrels_query *qq = &qr->q[q];
    if (qq->n == qq->cap) {
        if (qq->cap == UINT32_MAX)
            return tt_err(TT_ENOMEM, "qrels: too many judgements for query '%s'", qid);
        uint32_t cap = tt_next_cap(qq->cap, 8);
        int32_t *rels = tt_regrow(qq->rel, cap, sizeof *rels, "qrels");
        if (!rels)
            return TT_ENOMEM;
        qq->rel = rels;
        qq->cap = cap;
    }
    qq->rel[qq->n++] = rel;
    return TT_OK;
}

int tt_qrels_add(tt_qrels *qrels, const char *qid, const char *docid, int rel) {
    if (!qrels)
        return tt_err(TT_EINVAL, "tt_qrels_add: NULL qrels");
    if (!valid_id(qid) || !valid_id(docid))
        return tt_err(TT_EINVAL, "tt_qrels_add: query and document ids must be non-empty and "
                                 "without whitespace");
    bool dup;
    int st = qrels_put(qrels, qid, strlen(qid), docid, strlen(docid), rel, &dup);
    if (!st && dup)
        st = tt_err(TT_EINVAL, "qrels: document '%s' is judged twice for query '%s'", docid, qid);
    return st;
}

enum { QF_UNKNOWN = 0, QF_TREC = 1, QF_TSV = 2, QF_WS3 = 3 };

int tt_qrels_load(tt_qrels **out, const char *path) {
    if (out)
        *out = NULL;
    if (!out || !path)
        return tt_err(TT_EINVAL, "tt_qrels_load: NULL argument");
    lreader r;
    tt_qrels *qr = NULL;
    int st = lr_open(&r, path);
    if (st)
        return st;
    if ((st = tt_qrels_new(&qr)))
        goto done;
    int format = QF_UNKNOWN;
    char *line, *f[4];
    size_t len;
    while ((st = lr_next(&r, &line, &len)) > 0) {
        unsigned long long ln = (unsigned long long)r.lineno;
        if (memchr(line, '\0', len)) {
            st = tt_err(TT_EPARSE, "%s:%llu: NUL byte in line", path, ln);
            goto done;
        }
        if (skip_line(line))
            continue;
        bool first = format == QF_UNKNOWN;
        if (first) {
            /* The first content line decides: three tab-separated fields make BEIR
             * TSV, else four (TREC) or three whitespace-separated fields. */
            char probe[4096];
            bool tabs3 = false;
            if (strchr(line, '\t') && len < sizeof probe) {
                memcpy(probe, line, len + 1);
                tabs3 = split_tabs(probe, f, 4) == 3;
            }
            if (tabs3) {
                format = QF_TSV;
            } else {
                memcpy(probe, line, TT_MIN(len + 1, sizeof probe));
                probe[sizeof probe - 1] = '\0';
                size_t nf = split_ws(probe, f, 4);
                if (nf == 4)
                    format = QF_TREC;
                else if (nf == 3)
                    format = QF_WS3;
                else {
                    st = tt_err(TT_EPARSE, "%s:%llu: expected 4 fields (qid iter docid rel) or "
                                "3 (qid docid rel), found %zu", path, ln, nf);
                    goto done;
                }
            }
        }
        size_t want = format == QF_TREC ? 4 : 3;
        size_t nf = format == QF_TSV ? split_tabs(line, f, 4) : split_ws(line, f, 4);
        if (nf != want) {
            st = tt_err(TT_EPARSE, "%s:%llu: expected %zu %sfields (%s), found %zu", path, ln, want,
                        format == QF_TSV ? "tab-separated " : "",
                        want == 4 ? "qid iter docid rel" : "qid docid rel", nf);
            goto done;
        }
        const char *qid = f[0], *doc = f[want - 2], *rs = f[want - 1];
        int32_t rel;
        if (!parse_int(rs, &rel)) {
            if (first && want == 3)
                continue; /* a header line such as "query-id corpus-id score" */
            st = tt_err(TT_EPARSE, "%s:%llu: relevance '%s' is not an integer", path, ln, rs);
            goto done;
        }
        if (!*qid || !*doc) {
            st = tt_err(TT_EPARSE, "%s:%llu: empty query or document id", path, ln);
            goto done;
        }
        bool dup;
        if ((st = qrels_put(qr, qid, strlen(qid), doc, strlen(doc), rel, &dup)))
            goto done;
        if (dup) {
            st = tt_err(TT_EPARSE, "%s:%llu: document '%s' is judged twice for query '%s'", path,
                        ln, doc, qid);
            goto done;
        }
    }
    if (st < 0)
        goto done;
    if (qr->judged.n == 0) {
        st = tt_err(TT_EFORMAT, "%s: no judgements", path);
        goto done;
    }
    st = TT_OK;
    *out = qr;
    qr = NULL;
done:
    lr_close(&r);
    tt_qrels_free(qr);
    return st;
}

/* -------------------------------------------------------------------- run */

typedef struct run_entry {
    double score;
    uint32_t doc;
} run_entry;

typedef struct run_query {
    run_entry *e;
    uint32_t n, cap;
    bool fragmented; /* its additions were interleaved with another query's */
} run_query;

struct tt_run {
    tt_strtab qids, docs;
    run_query *q;
    uint32_t qcap;
    /* Duplicate detection without a (query, doc) set: stamp[d] = 1 + the query that
     * last added document d. A match is always a true duplicate; only queries whose
     * lines are not contiguous can hide one (a stamp overwritten in between), and
     * those are marked fragmented and checked by sorting (run_check_dups). */
    uint32_t *stamp;
    uint32_t stamp_cap;
    uint32_t last_q;
    uint64_t nentries;
};

int tt_run_new(tt_run **out) {
    if (!out)
        return tt_err(TT_EINVAL, "tt_run_new: NULL argument");
    *out = tt_calloc(1, sizeof **out, "run");
    if (!*out)
        return TT_ENOMEM;
    (*out)->last_q = TT_ST_NONE;
    return TT_OK;
}

void tt_run_free(tt_run *run) {
    if (!run)
        return;
    for (uint32_t i = 0; i < run->qids.n; i++)
        free(run->q[i].e);
    free(run->q);
    free(run->stamp);
    tt_st_free(&run->qids);
    tt_st_free(&run->docs);
    free(run);
}

size_t tt_run_num_queries(const tt_run *run) { return run ? run->qids.n : 0; }
uint64_t tt_run_num_entries(const tt_run *run) { return run ? run->nentries : 0; }

static int run_put(tt_run *run, const char *qid, size_t qlen, const char *doc, size_t dlen,
                   double score, bool *dup) {
    uint32_t q, d;
    bool added;
    int st;
    *dup = false;
    /* Consecutive lines of one query are the common case: skip its hash lookup. */
    if (run->last_q != TT_ST_NONE && tt_st_len(&run->qids, run->last_q) == qlen &&
        memcmp(tt_st_str(&run->qids, run->last_q), qid, qlen) == 0) {
        q = run->last_q;
    } else {
        if ((st = tt_st_intern(&run->qids, qid, qlen, &q, &added)))
            return st;
        if (added) {
            if (q >= run->qcap) {
                uint32_t cap = tt_next_cap(run->qcap, 64);
                run_query *qs = tt_regrow(run->q, cap, sizeof *qs, "run");
                if (!qs)
                    return TT_ENOMEM;
                run->q = qs;
                run->qcap = cap;
            }
            memset(&run->q[q], 0, sizeof run->q[q]);
        } else if (run->q[q].n) {
            run->q[q].fragmented = true;
        }
        run->last_q = q;
    }
    if ((st = tt_st_intern(&run->docs, doc, dlen, &d, &added)))
        return st;
    if (added && d >= run->stamp_cap) {
        uint32_t cap = tt_next_cap(run->stamp_cap, 1024);
        uint32_t *stamp = tt_regrow(run->stamp, cap, sizeof *stamp, "run");
        if (!stamp)
            return TT_ENOMEM;
        run->stamp = stamp;
        memset(run->stamp + run->stamp_cap, 0, (size_t)(cap - run->stamp_cap) * sizeof *run->stamp);
        run->stamp_cap = cap;
    }
    if (run->stamp[d] == q + 1) {
        *dup = true;
        return TT_OK;
    }
    run_query *rq = &run->q[q];
    if (rq->n == rq->cap) {
        if (rq->cap == UINT32_MAX)
            return tt_err(TT_ENOMEM, "run: too many documents for query '%s'",
                          tt_st_str(&run->qids, q));
        uint32_t cap = tt_next_cap(rq->cap, 16);
        run_entry *e = tt_regrow(rq->e, cap, sizeof *e, "run");
        if (!e)
            return TT_ENOMEM;
        rq->e = e;
        rq->cap = cap;
    }
    run->stamp[d] = q + 1;
    rq->e[rq->n].score = score;
    rq->e[rq->n].doc = d;
    rq->n++;
    run->nentries++;
    return TT_OK;
}

int tt_run_add(tt_run *run, const char *qid, const char *docid, double score) {
    if (!run)
        return tt_err(TT_EINVAL, "tt_run_add: NULL run");
    if (!valid_id(qid) || !valid_id(docid))
        return tt_err(TT_EINVAL, "tt_run_add: query and document ids must be non-empty and "
                                 "without whitespace");
    if (isnan(score))
        return tt_err(TT_EINVAL, "tt_run_add: NaN score for document '%s' of query '%s'", docid,
                      qid);
    bool dup;
    int st = run_put(run, qid, strlen(qid), docid, strlen(docid), score, &dup);
    if (!st && dup)
        st = tt_err(TT_EINVAL, "run: document '%s' added twice for query '%s'", docid, qid);
    return st;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Finds duplicates the stamps may have missed: in fragmented queries only. */
static int run_check_dups(const tt_run *run, const char *what, int status) {
    uint32_t *ids = NULL;
    uint32_t cap = 0;
    int st = TT_OK;
    for (uint32_t q = 0; q < run->qids.n && !st; q++) {
        const run_query *rq = &run->q[q];
        if (!rq->fragmented)
            continue;
        if (rq->n > cap) {
            uint32_t *more = tt_regrow(ids, rq->n, sizeof *more, "run check");
            if (!more) {
                st = TT_ENOMEM;
                break;
            }
            ids = more;
            cap = rq->n;
        }
        for (uint32_t i = 0; i < rq->n; i++)
            ids[i] = rq->e[i].doc;
        qsort(ids, rq->n, sizeof *ids, cmp_u32);
        for (uint32_t i = 1; i < rq->n; i++)
            if (ids[i] == ids[i - 1]) {
                st = tt_err(status, "%s: document '%s' appears twice for query '%s'", what,
                            tt_st_str(&run->docs, ids[i]), tt_st_str(&run->qids, q));
                break;
            }
    }
    free(ids);
    return st;
}

int tt_run_load(tt_run **out, const char *path) {
    if (out)
        *out = NULL;
    if (!out || !path)
        return tt_err(TT_EINVAL, "tt_run_load: NULL argument");
    lreader r;
    tt_run *run = NULL;
    int st = lr_open(&r, path);
    if (st)
        return st;
    if ((st = tt_run_new(&run)))
        goto done;
    char *line, *f[6];
    size_t len;
    while ((st = lr_next(&r, &line, &len)) > 0) {
        unsigned long long ln = (unsigned long long)r.lineno;
        if (memchr(line, '\0', len)) {
            st = tt_err(TT_EPARSE, "%s:%llu: NUL byte in line", path, ln);
            goto done;
        }
        size_t nf = split_ws(line, f, 6);
        if (nf == 0 || f[0][0] == '#')
            continue;
        /* Exactly six: trec_eval skips whatever follows the tag, but a seventh field
         * almost always means an id with a space in it, which shifts the rank into
         * the score column and ranks the run silently wrong. */
        if (nf != 6) {
            st = tt_err(TT_EPARSE, "%s:%llu: expected 6 fields (qid Q0 docid rank score tag), "
                        "got %zu", path, ln, nf);
            goto done;
        }
        double score;
        if (!parse_score(f[4], &score)) {
            st = tt_err(TT_EPARSE, "%s:%llu: score '%s' is not a number", path, ln, f[4]);
            goto done;
        }
        bool dup;
        if ((st = run_put(run, f[0], strlen(f[0]), f[2], strlen(f[2]), score, &dup)))
            goto done;
        if (dup) {
            st = tt_err(TT_EPARSE, "%s:%llu: document '%s' appears twice for query '%s'", path,
                        ln, f[2], f[0]);
            goto done;
        }
    }
    if (st < 0)
        goto done;
    if (run->nentries == 0) {
        st = tt_err(TT_EFORMAT, "%s: no results", path);
        goto done;
    }
    if ((st = run_check_dups(run, path, TT_EPARSE)))
        goto done;
    *out = run;
    run = NULL;
done:
    lr_close(&r);
    tt_run_free(run);
    return st;
}

/* A retrieved document in trec_eval's ranking order. */
typedef struct ranked {
    double score;
    const char *doc;
    uint32_t id;
} ranked;

/* form_res_rels.c comp_sim_docno: score descending, then docid descending. */
static int cmp_ranked(const void *pa, const void *pb) {
    const ranked *a = pa, *b = pb;
    if (a->score > b->score)
        return -1;
    if (a->score < b->score)
        return 1;
    return strcmp(b->doc, a->doc);
}

/* Fills out[0..n) with query q's documents in ranking order. */
static void rank_query(const tt_run *run, uint32_t q, ranked *out) {
    const run_query *rq = &run->q[q];
    for (uint32_t i = 0; i < rq->n; i++) {
        out[i].score = rq->e[i].score;
        out[i].id = rq->e[i].doc;
        out[i].doc = tt_st_str(&run->docs, rq->e[i].doc);
    }
    qsort(out, rq->n, sizeof *out, cmp_ranked);
}

static uint32_t run_max_query_len(const tt_run *run) {
    uint32_t m = 0;
    for (uint32_t q = 0; q < run->qids.n; q++)
        m = TT_MAX(m, run->q[q].n);
    return m;
}

/* Shortest of %.9g / %.15g / %.17g that reads back as exactly v. */
static void fmt_score(char *buf, size_t len, double v) {
    static const int digits[] = {9, 15, 17};
    for (size_t i = 0; i < 3; i++) {
        snprintf(buf, len, "%.*g", digits[i], v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

int tt_run_write(const tt_run *run, const char *path, const char *tag) {
    if (!run || !path)
        return tt_err(TT_EINVAL, "tt_run_write: NULL argument");
    if (!tag)
        tag = "tartan";
    if (!valid_id(tag))
        return tt_err(TT_EINVAL, "tt_run_write: tag must be non-empty and without whitespace");
    int st = run_check_dups(run, "run", TT_EINVAL);
    if (st)
        return st;
    ranked *rk = tt_alloc(TT_MAX(run_max_query_len(run), 1), sizeof *rk, "run write");
    if (!rk)
        return TT_ENOMEM;
    FILE *f = fopen(path, "w");
    if (!f) {
        st = tt_err_errno(TT_EIO, errno, "%s", path);
        goto done;
    }
    char sc[40];
    for (uint32_t q = 0; q < run->qids.n; q++) {
        rank_query(run, q, rk);
        const char *qid = tt_st_str(&run->qids, q);
        for (uint32_t i = 0; i < run->q[q].n; i++) {
            fmt_score(sc, sizeof sc, rk[i].score);
            if (fprintf(f, "%s Q0 %s %u %s %s\n", qid, rk[i].doc, i + 1, sc, tag) < 0)
                break;
        }
        if (ferror(f))
            break;
    }
    bool bad = ferror(f) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (bad)
        st = tt_err_errno(TT_EIO, err ? err : EIO, "%s: write", path);
done:
    free(rk);
    return st;
}

int tt_run_count_unknown(const tt_run *run, const char *ids_path, uint64_t *entries,
                         uint64_t *docs) {
    if (!run || !ids_path || !entries || !docs)
        return tt_err(TT_EINVAL, "tt_run_count_unknown: NULL argument");
    tt_strtab known = {0};
    lreader r;
    uint8_t *unknown = NULL;
    int st = lr_open(&r, ids_path);
    if (st)
        return st;
    char *line;
    size_t len;
    uint32_t id;
    while ((st = lr_next(&r, &line, &len)) > 0)
        if (len && (st = tt_st_intern(&known, line, len, &id, NULL)))
            goto done;
    if (st < 0)
        goto done;
    if (!(unknown = tt_alloc(TT_MAX(run->docs.n, 1), 1, "unknown documents"))) {
        st = TT_ENOMEM;
        goto done;
    }
    *docs = 0;
    for (uint32_t d = 0; d < run->docs.n; d++) {
        unknown[d] = tt_st_find(&known, tt_st_str(&run->docs, d), tt_st_len(&run->docs, d)) == TT_ST_NONE;
        *docs += unknown[d];
    }
    *entries = 0;
    for (uint32_t q = 0; q < run->qids.n; q++)
        for (uint32_t i = 0; i < run->q[q].n; i++)
            *entries += unknown[run->q[q].e[i].doc];
    st = TT_OK;
done:
    lr_close(&r);
    tt_st_free(&known);
    free(unknown);
    return st;
}

/* ---------------------------------------------------------------- metrics */

static const struct {
    const char *name; /* canonical */
    int kind;
} metric_names[] = {
    {"MRR", TT_METRIC_MRR},         {"RR", TT_METRIC_MRR},
    {"recip_rank", TT_METRIC_MRR},  {"nDCG", TT_METRIC_NDCG},
    {"ndcg_cut", TT_METRIC_NDCG},   {"Recall", TT_METRIC_RECALL},
    {"R", TT_METRIC_RECALL},        {"MAP", TT_METRIC_MAP},
    {"map_cut", TT_METRIC_MAP},     {"Success", TT_METRIC_SUCCESS},
    {"P", TT_METRIC_P},             {"Precision", TT_METRIC_P},
};

static const char *kind_name(int kind) {
    switch (kind) {
    case TT_METRIC_MRR: return "MRR";
    case TT_METRIC_NDCG: return "nDCG";
    case TT_METRIC_RECALL: return "Recall";
    case TT_METRIC_MAP: return "MAP";
    case TT_METRIC_SUCCESS: return "Success";
    case TT_METRIC_P: return "P";
    default: return NULL;
    }
}

static int check_metric(const tt_metric *m) {
    if (!kind_name(m->kind))
        return tt_err(TT_EINVAL, "metric: unknown kind %d", m->kind);
    if (m->k == 0 && (m->kind == TT_METRIC_SUCCESS || m->kind == TT_METRIC_P))
        return tt_err(TT_EINVAL, "metric %s needs a cutoff (%s@k)", kind_name(m->kind),
                      kind_name(m->kind));
    return TT_OK;
}

int tt_metric_parse(const char *name, tt_metric *out) {
    if (!name || !out)
        return tt_err(TT_EINVAL, "tt_metric_parse: NULL argument");
    const char *sep = strchr(name, '@');
    if (!sep)
        sep = strchr(name, '.');
    size_t nlen = sep ? (size_t)(sep - name) : strlen(name);
    tt_metric m = {0, 0};
    for (size_t i = 0; i < sizeof metric_names / sizeof metric_names[0]; i++)
        if (strlen(metric_names[i].name) == nlen &&
            strncasecmp(metric_names[i].name, name, nlen) == 0)
            m.kind = metric_names[i].kind;
    if (!m.kind)
        return tt_err(TT_EINVAL, "unknown metric '%s' (known: MRR, nDCG, Recall/R, MAP, Success, "
                      "P, each as NAME@k)", name);
    if (sep) {
        const char *k = sep + 1;
        char *end;
        errno = 0;
        unsigned long long v = (*k >= '0' && *k <= '9') ? strtoull(k, &end, 10) : 0;
        if (!(*k >= '0' && *k <= '9') || errno || *end || v == 0 || v > UINT32_MAX)
            return tt_err(TT_EINVAL, "metric '%s': the cutoff must be an integer from 1 to %u",
                          name, UINT32_MAX);
        m.k = (uint32_t)v;
    }
    int st = check_metric(&m);
    if (st)
        return tt_err(st, "metric '%s' needs a cutoff (%s@k)", name, kind_name(m.kind));
    *out = m;
    return TT_OK;
}

const char *tt_metric_name(const tt_metric *m, char *buf, size_t len) {
    if (!buf || !len)
        return buf;
    const char *n = m ? kind_name(m->kind) : NULL;
    if (!n)
        snprintf(buf, len, "?");
    else if (m->k)
        snprintf(buf, len, "%s@%u", n, m->k);
    else
        snprintf(buf, len, "%s", n);
    return buf;
}

/* One query's value of m. rel[0..depth) are the rels of the ranked documents (0 for
 * unjudged), depth covering every cutoff; num_rel judged relevant documents; gains
 * the query's positive rels, descending (the ideal ranking). The loops mirror
 * trec_eval's so the floating-point sums are identical. */
static double metric_value(const tt_metric *m, const int32_t *rel, uint32_t depth,
                           uint64_t num_rel, const int32_t *gains, uint32_t ngains, int level) {
    uint32_t top = m->k ? TT_MIN(m->k, depth) : depth;
    uint64_t found = 0;
    double sum = 0;
    switch (m->kind) {
    case TT_METRIC_MRR: /* m_recip_rank.c over the top k */
        for (uint32_t i = 0; i < top; i++)
            if (rel[i] >= level)
                return 1.0 / (double)(i + 1);
        return 0;
    case TT_METRIC_NDCG: { /* m_ndcg_cut.c */
        for (uint32_t i = 0; i < top; i++)
            if (rel[i] > 0)
                sum += (double)rel[i] / log2((double)(i + 2));
        uint32_t itop = m->k ? TT_MIN(m->k, ngains) : ngains;
        double ideal = 0;
        for (uint32_t i = 0; i < itop; i++)
            ideal += (double)gains[i] / log2((double)(i + 2));
        return ideal > 0 ? sum / ideal : 0;
    }
    case TT_METRIC_RECALL: /* m_recall.c: 0 when nothing is relevant */
        if (!num_rel)
            return 0;
        for (uint32_t i = 0; i < top; i++)
            found += rel[i] >= level;
        return (double)found / (double)num_rel;
    case TT_METRIC_MAP: /* m_map.c on the ranking cut at k (trec_eval -M k) */
        for (uint32_t i = 0; i < top; i++)
            if (rel[i] >= level) {
                found++;
                sum += (double)found / (double)(i + 1);
            }
        return found ? sum / (double)num_rel : 0;
    case TT_METRIC_SUCCESS: /* m_success.c */
        for (uint32_t i = 0; i < top; i++)
            if (rel[i] >= level)
                return 1;
        return 0;
    case TT_METRIC_P: /* m_P.c: missing ranks count as non-relevant */
        for (uint32_t i = 0; i < top; i++)
            found += rel[i] >= level;
        return (double)found / (double)m->k;
    default:
        return NAN;
    }
}

/* ------------------------------------------------------------- evaluation */

struct tt_eval {
    size_t nmetrics, nq;
    tt_metric *metrics;
    double *values; /* nmetrics x nq, metric-major */
    double *means;
    char *qid_arena;
    size_t *qid_off;
    uint8_t *in_run;
    tt_eval_counts counts;
};

void tt_eval_options_init(tt_eval_options *opt) {
    if (!opt)
        return;
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->missing_as_zero = 0;
    opt->relevance_level = 1;
}

void tt_eval_free(tt_eval *ev) {
    if (!ev)
        return;
    free(ev->metrics);
    free(ev->values);
    free(ev->means);
    free(ev->qid_arena);
    free(ev->qid_off);
    free(ev->in_run);
    free(ev);
}

typedef struct qorder {
    const char *qid;
    uint32_t qrels_q, run_q;
} qorder;

static int cmp_qorder(const void *pa, const void *pb) {
    return strcmp(((const qorder *)pa)->qid, ((const qorder *)pb)->qid);
}

static int cmp_int_desc(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a < b) - (a > b);
}

#define DOC_UNSET UINT32_MAX
#define DOC_ABSENT (UINT32_MAX - 1)

int tt_evaluate(tt_eval **out, const tt_qrels *qrels, const tt_run *run,
                const tt_metric *metrics, size_t nmetrics, const tt_eval_options *opt) {
    if (out)
        *out = NULL;
    if (!out || !qrels || !run || !metrics)
        return tt_err(TT_EINVAL, "tt_evaluate: NULL argument");
    if (nmetrics == 0)
        return tt_err(TT_EINVAL, "tt_evaluate: no metric");
    tt_eval_options defaults;
    tt_eval_options_init(&defaults);
    if (!opt)
        opt = &defaults;
    int level = opt->relevance_level;
    if (level < 1)
        return tt_err(TT_EINVAL, "tt_evaluate: relevance_level must be >= 1 (got %d)", level);
    int st;
    for (size_t m = 0; m < nmetrics; m++)
        if ((st = check_metric(&metrics[m])))
            return st;
    if ((st = run_check_dups(run, "run", TT_EINVAL)))
        return st;

    tt_eval *ev = NULL;
    qorder *order = NULL;
    uint32_t *dmap = NULL;
    ranked *rk = NULL;
    int32_t *rel = NULL, *gains = NULL;

    uint32_t nqr = qrels->qids.n;
    tt_eval_counts c = {0};
    c.qrels_queries = nqr;
    c.run_queries = run->qids.n;
    if (!(order = tt_alloc(TT_MAX(nqr, 1), sizeof *order, "evaluation"))) {
        st = TT_ENOMEM;
        goto fail;
    }
    size_t common = 0, nq = 0;
    uint32_t max_judged = 0;
    for (uint32_t q = 0; q < nqr; q++) {
        uint32_t rq = tt_st_find(&run->qids, tt_st_str(&qrels->qids, q), tt_st_len(&qrels->qids, q));
        common += rq != TT_ST_NONE;
        if (rq == TT_ST_NONE && !opt->missing_as_zero)
            continue;
        order[nq].qid = tt_st_str(&qrels->qids, q);
        order[nq].qrels_q = q;
        order[nq].run_q = rq;
        max_judged = TT_MAX(max_judged, qrels->q[q].n);
        nq++;
    }
    c.missing = nqr - common;
    c.ignored = run->qids.n - common;
    c.queries = nq;
    if (common == 0) {
        st = tt_err(TT_EINVAL, "no query in common between the qrels (%u queries) and the run "
                    "(%u queries): are they for the same collection?", nqr, run->qids.n);
        goto fail;
    }
    qsort(order, nq, sizeof *order, cmp_qorder);

    /* Depth of ranking any measure looks at. */
    uint32_t depth_cap = 0;
    for (size_t m = 0; m < nmetrics; m++)
        depth_cap = metrics[m].k == 0 ? UINT32_MAX : TT_MAX(depth_cap, metrics[m].k);
    uint32_t maxn = run_max_query_len(run);

    if (!(ev = tt_calloc(1, sizeof *ev, "evaluation")) ||
        !(ev->metrics = tt_alloc(nmetrics, sizeof *ev->metrics, "evaluation")) ||
        !(ev->values = tt_calloc((uint64_t)nmetrics * nq, sizeof *ev->values, "evaluation")) ||
        !(ev->means = tt_calloc(nmetrics, sizeof *ev->means, "evaluation")) ||
        !(ev->qid_off = tt_alloc(nq, sizeof *ev->qid_off, "evaluation")) ||
        !(ev->in_run = tt_alloc(nq, 1, "evaluation")) ||
        !(dmap = tt_alloc(TT_MAX(run->docs.n, 1), sizeof *dmap, "evaluation")) ||
        !(rk = tt_alloc(TT_MAX(maxn, 1), sizeof *rk, "evaluation")) ||
        !(rel = tt_alloc(TT_MAX(maxn, 1), sizeof *rel, "evaluation")) ||
        !(gains = tt_alloc(TT_MAX(max_judged, 1), sizeof *gains, "evaluation"))) {
        st = TT_ENOMEM;
        goto fail;
    }
    memcpy(ev->metrics, metrics, nmetrics * sizeof *metrics);
    ev->nmetrics = nmetrics;
    ev->nq = nq;
    for (uint32_t d = 0; d < run->docs.n; d++)
        dmap[d] = DOC_UNSET;

    uint64_t arena = 0;
    for (size_t i = 0; i < nq; i++)
        arena += tt_st_len(&qrels->qids, order[i].qrels_q) + 1;
    if (!(ev->qid_arena = tt_alloc(TT_MAX(arena, 1), 1, "evaluation"))) {
        st = TT_ENOMEM;
        goto fail;
    }
    arena = 0;

    for (size_t i = 0; i < nq; i++) {
        uint32_t qq = order[i].qrels_q, rq = order[i].run_q;
        size_t qlen = tt_st_len(&qrels->qids, qq);
        memcpy(ev->qid_arena + arena, order[i].qid, qlen + 1);
        ev->qid_off[i] = arena;
        arena += qlen + 1;
        ev->in_run[i] = rq != TT_ST_NONE;

        /* The judgements: relevant count and the ideal gains. */
        const qrels_query *jq = &qrels->q[qq];
        uint64_t num_rel = 0;
        uint32_t ngains = 0;
        for (uint32_t j = 0; j < jq->n; j++) {
            num_rel += jq->rel[j] >= level;
            if (jq->rel[j] > 0)
                gains[ngains++] = jq->rel[j];
        }
        qsort(gains, ngains, sizeof *gains, cmp_int_desc);
        c.no_relevant += num_rel == 0;

        /* The ranking and the rel of each ranked document. */
        uint32_t n = 0;
        if (rq != TT_ST_NONE) {
            n = run->q[rq].n;
            rank_query(run, rq, rk);
        }
        uint32_t depth = TT_MIN(n, depth_cap);
        for (uint32_t r = 0; r < depth; r++) {
            uint32_t d = rk[r].id;
            if (dmap[d] == DOC_UNSET) {
                uint32_t qd = tt_st_find(&qrels->docs, rk[r].doc, tt_st_len(&run->docs, d));
                dmap[d] = qd == TT_ST_NONE ? DOC_ABSENT : qd;
            }
            const int32_t *v = NULL;
            if (dmap[d] != DOC_ABSENT)
                v = pm_get(&qrels->judged, pair_key(qq, dmap[d]));
            rel[r] = v ? *v : 0;
        }
        for (size_t m = 0; m < nmetrics; m++)
            ev->values[m * nq + i] =
                metric_value(&metrics[m], rel, depth, num_rel, gains, ngains, level);
    }
    /* trec_eval's te_calc_avg_meas_s: plain sum over queries / number of queries. */
    for (size_t m = 0; m < nmetrics; m++) {
        double s = 0;
        for (size_t i = 0; i < nq; i++)
            s += ev->values[m * nq + i];
        ev->means[m] = s / (double)nq;
    }
    ev->counts = c;
    *out = ev;
    ev = NULL;
    st = TT_OK;
fail:
    tt_eval_free(ev);
    free(order);
    free(dmap);
    free(rk);
    free(rel);
    free(gains);
    return st;
}

void tt_eval_get_counts(const tt_eval *ev, tt_eval_counts *out) {
    if (!out)
        return;
    if (ev)
        *out = ev->counts;
    else
        memset(out, 0, sizeof *out);
}

size_t tt_eval_num_queries(const tt_eval *ev) { return ev ? ev->nq : 0; }

const char *tt_eval_query_id(const tt_eval *ev, size_t i) {
    return ev && i < ev->nq ? ev->qid_arena + ev->qid_off[i] : NULL;
}

int tt_eval_query_in_run(const tt_eval *ev, size_t i) {
    return ev && i < ev->nq ? ev->in_run[i] : 0;
}

size_t tt_eval_find_query(const tt_eval *ev, const char *qid) {
    if (!ev || !qid)
        return SIZE_MAX;
    size_t lo = 0, hi = ev->nq; /* queries are in strcmp order */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ev->qid_arena + ev->qid_off[mid], qid);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

double tt_eval_mean(const tt_eval *ev, size_t m) {
    return ev && m < ev->nmetrics ? ev->means[m] : NAN;
}

const double *tt_eval_values(const tt_eval *ev, size_t m) {
    return ev && m < ev->nmetrics ? ev->values + m * ev->nq : NULL;
}

/* ------------------------------------------------------------- statistics */

/* Continued fraction for the incomplete beta function (Abramowitz & Stegun 26.5.8):
 *   I_x(a,b) = x^a y^b / (a B(a,b)) * 1 / (1 + c1 / (1 + c2 / (1 + ...)))
 * with y = 1 - x and coefficients
 *   c(2m+1) = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),   c(2m) = m(b-m) x / ((a+2m-1)(a+2m)).
 * It converges quickly for x < (a+1)/(a+b+2). F = 1 + c1/(1 + c2/(1 + ...)) is
 * evaluated front to back by the modified Lentz method (Lentz 1976; Thompson & Barnett
 * 1986), the scheme of Numerical Recipes' betacf: writing the j-th convergent as
 * A_j / B_j, it carries C_j = A_j / A_{j-1} = 1 + c_j / C_{j-1} and
 * D_j = B_{j-1} / B_j = 1 / (1 + c_j D_{j-1}), so F_j = F_{j-1} C_j D_j without the
 * A_j, B_j themselves (which overflow); a C or 1/D that hits 0 is replaced by a tiny
 * number. Stops when a step changes F by less than 1e-16. Returns 1 / F. */
static double beta_cfrac(double a, double b, double x) {
    const double tiny = 1e-300;
    double F = 1.0, C = 1.0, D = 0.0;
    for (int j = 1; j <= 20000; j++) {
        double m = (double)(j / 2), c;
        if (j & 1)
            c = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
        else
            c = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
        D = 1.0 + c * D;
        D = 1.0 / (fabs(D) < tiny ? tiny : D);
        C = 1.0 + c / C;
        if (fabs(C) < tiny)
            C = tiny;
        double step = C * D;
        F *= step;
        if (fabs(step - 1.0) < 1e-16)
            break;
    }
    return 1.0 / F;
}

static double log_beta(double a, double b) {
    int s;
    return lgamma_r(a, &s) + lgamma_r(b, &s) - lgamma_r(a + b, &s); /* a, b > 0: signs + */
}

/* I_x(a, b) given both x and y = 1 - x, so that callers who know y exactly (the t
 * distribution: y = t^2/(df+t^2)) do not lose it to cancellation. */
static double incbeta_xy(double a, double b, double x, double y) {
    if (!(a > 0) || !(b > 0) || !(x >= 0) || !(y >= 0) || isinf(a) || isinf(b))
        return NAN;
    if (x == 0)
        return 0;
    if (y == 0)
        return 1;
    double lfront = a * log(x) + b * log(y) - log_beta(a, b);
    if (x < (a + 1) / (a + b + 2))
        return exp(lfront) / a * beta_cfrac(a, b, x);
    return 1.0 - exp(lfront) / b * beta_cfrac(b, a, y); /* I_x(a,b) = 1 - I_y(b,a) */
}

double tt_incbeta(double a, double b, double x) {
    if (!(x >= 0 && x <= 1))
        return NAN;
    return incbeta_xy(a, b, x, 1.0 - x);
}

double tt_student_t_p2(double t, double df) {
    if (isnan(t) || !(df > 0))
        return NAN;
    if (isinf(t))
        return 0;
    double t2 = t * t;
    if (isinf(t2))
        return 0;
    /* P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2) (Abramowitz & Stegun, section 26.7). */
    return incbeta_xy(df / 2, 0.5, df / (df + t2), t2 / (df + t2));
}

int tt_ttest_paired(const double *a, const double *b, size_t n, double *t, double *p) {
    if (!a || !b || !p)
        return tt_err(TT_EINVAL, "tt_ttest_paired: NULL argument");
    if (n < 2)
        return tt_err(TT_EINVAL, "tt_ttest_paired: need at least 2 pairs (got %zu)", n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double d = a[i] - b[i];
        if (!isfinite(a[i]) || !isfinite(b[i]) || !isfinite(d))
            return tt_err(TT_EVALUE, "tt_ttest_paired: pair %zu is not finite", i);
        sum += d;
    }
    double mean = sum / (double)n, ss = 0;
    for (size_t i = 0; i < n; i++) { /* two passes: no cancellation in the variance */
        double e = (a[i] - b[i]) - mean;
        ss += e * e;
    }
    double tv, pv;
    if (ss == 0) {
        tv = mean == 0 ? 0 : copysign(INFINITY, mean);
        pv = mean == 0 ? 1 : 0;
    } else {
        double se = sqrt(ss / (double)(n - 1) / (double)n);
        tv = mean / se;
        pv = tt_student_t_p2(tv, (double)(n - 1));
    }
    if (t)
        *t = tv;
    *p = pv;
    return TT_OK;
}

/* tartan serve: the endpoints (doc/server.md). Each takes a parsed request to the
 * library and writes the JSON reply; errors become {"error": {"status", "message"}}
 * with a 4xx status for the client's mistakes and 5xx for the server's. */
#include "serve.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char JSON_TYPE[] = "application/json";

void srv_reply_error(srv_reply *rep, int status, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_buf_free(&rep->body);
    rep->status = status;
    rep->content_type = JSON_TYPE;
    srv_buf_printf(&rep->body, "{\"error\": {\"status\": %d, \"message\": ", status);
    srv_buf_json_str(&rep->body, msg, strlen(msg));
    srv_buf_puts(&rep->body, "}}\n");
}

/* The library's message for status st, or its description. */
static const char *lib_msg(int st) {
    const char *m = tt_last_error();
    return m && *m ? m : tt_strerror(st);
}

/* HTTP status for a library error of a change or a search. */
static int lib_status(int st) {
    switch (st) {
    case TT_EINVAL: case TT_EDIM: case TT_EVALUE: case TT_EUNSUPPORTED: return 400;
    case TT_ENOTFOUND: return 404;
    case TT_EEXIST: case TT_EBUSY: return 409;
    case TT_ENOSPC: return 507;
    default: return 500;
    }
}

/* ------------------------------------------------------------ query texts */

typedef struct text_run {
    srv_search_req *req;
    uint32_t next;
    char id[32];
    float *v;
    uint64_t n, cap;
    uint32_t dim, max_vectors;
    char err[256];
} text_run;

static int text_source(void *user, tt_record *rec) {
    text_run *t = user;
    if (t->next == t->req->nqueries)
        return 0;
    snprintf(t->id, sizeof t->id, "q%u", t->next);
    rec->id = t->id;
    rec->id_len = strlen(t->id);
    rec->text = t->req->texts[t->next];
    rec->text_len = strlen(rec->text);
    t->next++;
    return 1;
}

static int text_sink(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                     const float *vectors) {
    text_run *t = user;
    (void)id;
    (void)id_len;
    if (n == 0 || n > t->max_vectors) {
        snprintf(t->err, sizeof t->err, "the encoder returned %u vectors for text %llu (1..%u "
                 "allowed, --max-query-vectors)", n, (unsigned long long)index, t->max_vectors);
        return TT_EVALUE;
    }
    if (t->n + n > t->cap) {
        uint64_t nc = t->cap ? 2 * t->cap : 256;
        while (nc < t->n + n)
            nc *= 2;
        float *p = realloc(t->v, nc * t->dim * sizeof *p);
        if (!p)
            return TT_ENOMEM;
        t->v = p;
        t->cap = nc;
    }
    memcpy(t->v + t->n * t->dim, vectors, (size_t)n * t->dim * sizeof *vectors);
    t->req->offs[index] = t->n;
    t->req->lens[index] = n;
    t->n += n;
    return TT_OK;
}

/* Runs the query encoder over the texts of req (one encoder process per request: the
 * protocol has one run per session). */
static int encode_texts(srv_state *st, srv_search_req *req, uint32_t dim, srv_reply *rep) {
    tt_encoder_options eo;
    tt_encoder_options_init(&eo);
    eo.expected_dim = dim;
    if (st->cfg.encoder_timeout_ms)
        eo.timeout_ms = eo.startup_timeout_ms = st->cfg.encoder_timeout_ms;
    text_run t = {.req = req, .dim = dim, .max_vectors = st->cfg.lim.max_query_vectors};
    tt_encoder *enc = NULL;
    int s = tt_encoder_start(&enc, st->cfg.encoder, TT_ENC_QUERY, &eo);
    if (s == TT_OK)
        s = tt_encoder_run(enc, text_source, &t, text_sink, &t);
    if (s) {
        if (t.err[0])
            srv_reply_error(rep, 400, "%s", t.err);
        else
            srv_reply_error(rep, s == TT_EINVAL ? 400 : 502, "query encoder: %s", lib_msg(s));
        tt_encoder_free(enc);
        free(t.v);
        return -1;
    }
    tt_encoder_free(enc);
    req->vectors = t.v;
    req->nvectors = t.n;
    return 0;
}

/* ----------------------------------------------------------------- search */

/* The filter of req's "where" and/or "filter_ids" (both: rows allowed by both) over
 * the snapshot's rows. Returns 0, or -1 with the error reply made. */
static int make_filter(const tt_index *idx, const srv_search_req *req, tt_filter **out,
                       srv_reply *rep) {
    tt_filter *w = NULL, *f = NULL;
    int e;
    *out = NULL;
    if (req->where) {
        tt_metadata *md = NULL;
        if ((e = tt_metadata_open(idx, &md))) {
            srv_reply_error(rep, e == TT_ENOTFOUND ? 400 : lib_status(e), "'where': %s",
                            lib_msg(e));
            return -1;
        }
        e = tt_metadata_where(md, req->where, &w);
        tt_metadata_close(md);
        if (e) {
            srv_reply_error(rep, lib_status(e), "'where': %s", lib_msg(e));
            return -1;
        }
    }
    if (req->filter_ids &&
        (e = tt_filter_from_ids(idx, (const char *const *)req->filter_ids, req->nfilter_ids,
                                &f, NULL))) {
        srv_reply_error(rep, lib_status(e), "'filter_ids': %s", lib_msg(e));
        tt_filter_free(w);
        return -1;
    }
    if (w && f) {
        e = tt_filter_intersect(w, f);
        tt_filter_free(f);
        f = NULL;
        if (e) {
            srv_reply_error(rep, 500, "filter: %s", lib_msg(e));
            tt_filter_free(w);
            return -1;
        }
    }
    *out = w ? w : f;
    return 0;
}

static void do_search(srv_state *st, srv_index *ix, const char *body, size_t len,
                      srv_reply *rep) {
    char err[512];
    srv_snap *s = srv_snap_acquire(&st->reg, ix, false);
    srv_search_req req;
    tt_hit *hits = NULL;
    tt_search_ctx *ctx = NULL;
    tt_filter *filter = NULL;
    int code = srv_parse_search(body, len, s->info.dim, st->cfg.encoder != NULL, &st->cfg.lim,
                                &req, err, sizeof err);
    if (code) {
        srv_reply_error(rep, code, "%s", err);
        goto done;
    }
    if (req.texts && encode_texts(st, &req, s->info.dim, rep))
        goto done;
    if ((req.where || req.filter_ids) && make_filter(s->idx, &req, &filter, rep))
        goto done;
    req.opt.filter = filter;
    int status = TT_OK;
    if (!(ctx = srv_ctx_get(s, &status))) {
        srv_reply_error(rep, 500, "search context: %s", lib_msg(status));
        goto done;
    }
    if (!(hits = malloc((size_t)req.k * sizeof *hits))) {
        srv_reply_error(rep, 500, "out of memory for %u results", req.k);
        goto done;
    }
    srv_buf *b = &rep->body;
    srv_buf_puts(b, "{\"results\": [");
    for (uint32_t q = 0; q < req.nqueries; q++) {
        uint32_t n = 0;
        int e = tt_search(s->idx, ctx, req.vectors + req.offs[q] * s->info.dim, req.lens[q],
                          req.k, &req.opt, hits, &n);
        if (e) {
            srv_reply_error(rep, lib_status(e), "query %u: %s", q, lib_msg(e));
            goto done;
        }
        srv_buf_puts(b, q ? ", [" : "[");
        for (uint32_t i = 0; i < n; i++) {
            size_t idlen;
            const char *id = tt_index_doc_id(s->idx, hits[i].doc, &idlen);
            srv_buf_puts(b, i ? ", {\"id\": " : "{\"id\": ");
            srv_buf_json_str(b, id ? id : "", id ? idlen : 0);
            srv_buf_puts(b, ", \"score\": ");
            srv_buf_json_float(b, hits[i].score);
            srv_buf_puts(b, "}");
        }
        srv_buf_puts(b, "]");
    }
    atomic_fetch_add(&st->metrics.queries, req.nqueries);
    srv_buf_printf(b, "], \"generation\": %llu}\n", (unsigned long long)s->info.generation);
    rep->status = 200;
    rep->content_type = JSON_TYPE;
done:
    if (ctx)
        srv_ctx_put(s, ctx);
    free(hits);
    srv_search_req_free(&req);
    tt_filter_free(filter);
    srv_snap_release(s);
}

/* -------------------------------------------------------------------- add */

/* A 2-D float32 or 1-D int64 .npy (format 1.0). */
static int write_npy(const char *path, const char *descr, uint64_t rows, uint32_t cols,
                     const void *data, size_t bytes) {
    char dict[160];
    int n = cols ? snprintf(dict, sizeof dict,
                            "{'descr': '%s', 'fortran_order': False, 'shape': (%llu, %u), }",
                            descr, (unsigned long long)rows, cols)
                 : snprintf(dict, sizeof dict,
                            "{'descr': '%s', 'fortran_order': False, 'shape': (%llu,), }", descr,
                            (unsigned long long)rows);
    size_t hl = (size_t)n + 1, total = 10 + hl;
    size_t padded = (total + 63) / 64 * 64;
    hl += padded - total;
    char head[256];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (char)(hl & 0xff);
    head[9] = (char)(hl >> 8);
    memcpy(head + 10, dict, (size_t)n);
    memset(head + 10 + n, ' ', hl - (size_t)n - 1);
    head[10 + hl - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int bad = fwrite(head, 1, 10 + hl, f) != 10 + hl || fwrite(data, 1, bytes, f) != bytes;
    bad |= fclose(f) != 0;
    return bad ? -1 : 0;
}

/* The add's documents as files tt_input_open reads, in a directory made beside the
 * index (same file system, as tartan add --encoder's spool). */
static int spool_add(const char *dir, const srv_add_req *req, uint32_t dim, char *spool,
                     size_t splen, char *err, size_t errlen) {
    snprintf(spool, splen, "%s.serve-add-XXXXXX", dir);
    if (!mkdtemp(spool)) {
        snprintf(err, errlen, "%s: cannot create a directory beside the index: %s", spool,
                 strerror(errno));
        spool[0] = '\0';
        return -1;
    }
    char p[4400];
    int64_t *lens = malloc((size_t)req->ndocs * sizeof *lens);
    if (!lens) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < req->ndocs; i++)
        lens[i] = req->lens[i];
    snprintf(p, sizeof p, "%s/vectors.npy", spool);
    int bad = write_npy(p, "<f4", req->nvectors, dim, req->vectors,
                        (size_t)req->nvectors * dim * sizeof(float));
    snprintf(p, sizeof p, "%s/doclens.npy", spool);
    bad |= write_npy(p, "<i8", req->ndocs, 0, lens, (size_t)req->ndocs * sizeof *lens);
    free(lens);
    if (!bad && req->ids) {
        snprintf(p, sizeof p, "%s/ids.txt", spool);
        FILE *f = fopen(p, "w");
        bad = !f;
        for (uint32_t i = 0; f && i < req->ndocs; i++)
            bad |= fprintf(f, "%s\n", req->ids[i]) < 0;
        if (f)
            bad |= fclose(f) != 0;
    }
    if (bad) {
        snprintf(err, errlen, "%s: cannot write the new documents: %s", spool, strerror(errno));
        return -1;
    }
    return 0;
}

static void spool_remove(const char *spool) {
    static const char *const names[] = {"vectors.npy", "doclens.npy", "ids.txt"};
    char p[4400];
    if (!spool[0])
        return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", spool, names[i]);
        unlink(p);
    }
    rmdir(spool);
}

static void change_reply(srv_state *st, srv_index *ix, const tt_change_stats *cs,
                         srv_reply *rep) {
    /* See our own change at once, whatever the refresh interval. */
    srv_snap_release(srv_snap_acquire(&st->reg, ix, true));
    srv_buf_printf(&rep->body, "{\"added\": %llu, \"replaced\": %llu, \"deleted\": %llu, "
                   "\"unknown\": %llu, \"live_docs\": %llu, \"segments\": %llu, "
                   "\"generation\": %llu, \"seconds\": %.6f}\n",
                   (unsigned long long)cs->added, (unsigned long long)cs->replaced,
                   (unsigned long long)cs->deleted, (unsigned long long)cs->unknown,
                   (unsigned long long)cs->live_docs, (unsigned long long)cs->segments,
                   (unsigned long long)cs->generation, cs->seconds);
    rep->status = 200;
    rep->content_type = JSON_TYPE;
}

static void do_add(srv_state *st, srv_index *ix, const char *body, size_t len, srv_reply *rep) {
    char err[512], spool[4300] = "";
    srv_snap *s = srv_snap_acquire(&st->reg, ix, false);
    uint32_t dim = s->info.dim;
    srv_snap_release(s);
    srv_add_req req;
    int code = srv_parse_add(body, len, dim, &st->cfg.lim, &req, err, sizeof err);
    if (code) {
        srv_reply_error(rep, code, "%s", err);
        return;
    }
    pthread_mutex_lock(&ix->write_mu);
    tt_input *in = NULL;
    if (spool_add(ix->dir, &req, dim, spool, sizeof spool, err, sizeof err)) {
        srv_reply_error(rep, 500, "%s", err);
        goto done;
    }
    char v[4400], l[4400], ids[4400];
    snprintf(v, sizeof v, "%s/vectors.npy", spool);
    snprintf(l, sizeof l, "%s/doclens.npy", spool);
    snprintf(ids, sizeof ids, "%s/ids.txt", spool);
    const char *vp = v, *lp = l;
    int e = tt_input_open(&in, 1, &vp, &lp, req.ids ? ids : NULL, NULL);
    tt_change_options co;
    tt_change_options_init(&co);
    co.upsert = req.upsert;
    co.threads = st->cfg.change_threads;
    tt_change_stats cs;
    if (e == TT_OK)
        e = tt_index_add(ix->dir, in, &co, &cs);
    if (e) {
        /* "SPOOL/ids.txt:N: ..." names a file the client never saw: say "document N-1". */
        const char *m = lib_msg(e);
        size_t sl = strlen(ids);
        unsigned long line;
        char *end;
        if (!strncmp(m, ids, sl) && m[sl] == ':' &&
            (line = strtoul(m + sl + 1, &end, 10)) >= 1 && *end == ':')
            srv_reply_error(rep, lib_status(e), "document %lu%s", line - 1, end);
        else
            srv_reply_error(rep, lib_status(e), "%s", m);
        goto done;
    }
    change_reply(st, ix, &cs, rep);
done:
    tt_input_free(in);
    spool_remove(spool);
    pthread_mutex_unlock(&ix->write_mu);
    srv_add_req_free(&req);
}

static void do_delete(srv_state *st, srv_index *ix, const char *body, size_t len,
                      srv_reply *rep) {
    char err[512];
    srv_delete_req req;
    int code = srv_parse_delete(body, len, &st->cfg.lim, &req, err, sizeof err);
    if (code) {
        srv_reply_error(rep, code, "%s", err);
        return;
    }
    tt_change_options co;
    tt_change_options_init(&co);
    co.strict = req.strict;
    co.threads = st->cfg.change_threads;
    tt_change_stats cs;
    pthread_mutex_lock(&ix->write_mu);
    int e = tt_index_delete(ix->dir, (const char *const *)req.ids, req.nids, &co, &cs);
    pthread_mutex_unlock(&ix->write_mu);
    if (e)
        srv_reply_error(rep, lib_status(e), "%s", lib_msg(e));
    else
        change_reply(st, ix, &cs, rep);
    srv_delete_req_free(&req);
}

static void do_compact(srv_state *st, srv_index *ix, const char *body, size_t len,
                       srv_reply *rep) {
    char err[512];
    bool retrain;
    int code = srv_parse_compact(body, len, &retrain, err, sizeof err);
    if (code) {
        srv_reply_error(rep, code, "%s", err);
        return;
    }
    tt_change_options co;
    tt_change_options_init(&co);
    co.retrain = retrain;
    co.threads = st->cfg.change_threads;
    tt_change_stats cs;
    pthread_mutex_lock(&ix->write_mu);
    int e = tt_index_compact(ix->dir, &co, &cs);
    pthread_mutex_unlock(&ix->write_mu);
    if (e)
        srv_reply_error(rep, lib_status(e), "%s", lib_msg(e));
    else
        change_reply(st, ix, &cs, rep);
}

/* ------------------------------------------------------------------- info */

static void info_json(srv_buf *b, const srv_index *ix, const tt_index_info *i) {
    srv_buf_puts(b, "{\"name\": ");
    srv_buf_json_str(b, ix->name, strlen(ix->name));
    srv_buf_puts(b, ", \"dir\": ");
    srv_buf_json_str(b, ix->dir, strlen(ix->dir));
    srv_buf_printf(b, ", \"generation\": %llu, \"dim\": %u, \"nbits\": %u, "
                   "\"num_centroids\": %u, \"num_docs\": %llu, \"num_deleted\": %llu, "
                   "\"live_docs\": %llu, \"num_vectors\": %llu, \"num_segments\": %u, "
                   "\"normalized\": %s, \"exact_available\": %s, \"pool_factor\": %u, "
                   "\"bytes_index\": %llu, \"drift\": ",
                   (unsigned long long)i->generation, i->dim, i->nbits, i->num_centroids,
                   (unsigned long long)i->num_docs, (unsigned long long)i->num_deleted,
                   (unsigned long long)(i->num_docs - i->num_deleted),
                   (unsigned long long)i->num_vectors, i->num_segments,
                   i->normalized ? "true" : "false", i->keep_originals ? "true" : "false",
                   i->pool_factor, (unsigned long long)i->bytes_index);
    srv_buf_json_float(b, i->drift);
    srv_buf_puts(b, ", \"pool_global\": ");
    srv_buf_json_float(b, i->pool_global);
    srv_buf_puts(b, ", \"pool_threshold\": ");
    srv_buf_json_float(b, i->pool_threshold);
    srv_buf_printf(b, ", \"retrain_advised\": %s, \"encoder\": ",
                   i->retrain_advised ? "true" : "false");
    srv_buf_json_str(b, i->encoder, strnlen(i->encoder, sizeof i->encoder));
    srv_buf_puts(b, ", \"created\": ");
    srv_buf_json_str(b, i->created, strnlen(i->created, sizeof i->created));
    srv_buf_puts(b, ", \"tartan_version\": ");
    srv_buf_json_str(b, i->tartan_version, strnlen(i->tartan_version, sizeof i->tartan_version));
    srv_buf_puts(b, "}");
}

static void do_info(srv_state *st, srv_index *ix, srv_reply *rep) {
    srv_snap *s = srv_snap_acquire(&st->reg, ix, false);
    info_json(&rep->body, ix, &s->info);
    srv_buf_puts(&rep->body, "\n");
    srv_snap_release(s);
    rep->status = 200;
    rep->content_type = JSON_TYPE;
}

static void do_indexes(srv_state *st, srv_reply *rep) {
    srv_buf_puts(&rep->body, "{\"indexes\": [");
    for (size_t k = 0; k < st->reg.n; k++) {
        srv_snap *s = srv_snap_acquire(&st->reg, &st->reg.ix[k], false);
        if (k)
            srv_buf_puts(&rep->body, ", ");
        info_json(&rep->body, &st->reg.ix[k], &s->info);
        srv_snap_release(s);
    }
    srv_buf_puts(&rep->body, "]}\n");
    rep->status = 200;
    rep->content_type = JSON_TYPE;
}

/* ---------------------------------------------------------------- metrics */

static void do_metrics(srv_state *st, srv_reply *rep) {
    srv_metrics *m = &st->metrics;
    srv_buf *b = &rep->body;
    srv_buf_puts(b, "# HELP tartan_requests_total Requests answered, by endpoint and status "
                 "class.\n# TYPE tartan_requests_total counter\n");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++)
        for (int c = 1; c <= 5; c++) {
            uint64_t v = atomic_load(&m->requests[ep][c]);
            if (v || c == 2)
                srv_buf_printf(b, "tartan_requests_total{endpoint=\"%s\",code=\"%dxx\"} %llu\n",
                               srv_endpoint_name(ep), c, (unsigned long long)v);
        }
    srv_buf_puts(b, "# HELP tartan_request_errors_total Requests answered with a 4xx or 5xx "
                 "status.\n# TYPE tartan_request_errors_total counter\n");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++)
        srv_buf_printf(b, "tartan_request_errors_total{endpoint=\"%s\"} %llu\n",
                       srv_endpoint_name(ep),
                       (unsigned long long)(atomic_load(&m->requests[ep][4]) +
                                            atomic_load(&m->requests[ep][5])));
    srv_buf_puts(b, "# HELP tartan_request_duration_seconds Time from the request's arrival "
                 "to its reply.\n# TYPE tartan_request_duration_seconds histogram\n");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++) {
        uint64_t cum = 0;
        const char *n = srv_endpoint_name(ep);
        for (int k = 0; k <= SRV_LAT_BUCKETS; k++) {
            cum += atomic_load(&m->lat_bucket[ep][k]);
            if (k < SRV_LAT_BUCKETS)
                srv_buf_printf(b, "tartan_request_duration_seconds_bucket{endpoint=\"%s\","
                               "le=\"%g\"} %llu\n", n, srv_lat_bounds[k], (unsigned long long)cum);
            else
                srv_buf_printf(b, "tartan_request_duration_seconds_bucket{endpoint=\"%s\","
                               "le=\"+Inf\"} %llu\n", n, (unsigned long long)cum);
        }
        srv_buf_printf(b, "tartan_request_duration_seconds_sum{endpoint=\"%s\"} %.6f\n", n,
                       (double)atomic_load(&m->lat_sum_us[ep]) * 1e-6);
        srv_buf_printf(b, "tartan_request_duration_seconds_count{endpoint=\"%s\"} %llu\n", n,
                       (unsigned long long)cum);
    }
    srv_buf_puts(b, "# HELP tartan_index_generation The generation each index is searched "
                 "at.\n# TYPE tartan_index_generation gauge\n");
    for (size_t k = 0; k < st->reg.n; k++) {
        srv_index *ix = &st->reg.ix[k];
        pthread_mutex_lock(&ix->mu);
        unsigned long long g = (unsigned long long)ix->cur->info.generation;
        unsigned long long live = (unsigned long long)(ix->cur->info.num_docs -
                                                       ix->cur->info.num_deleted);
        pthread_mutex_unlock(&ix->mu);
        srv_buf_printf(b, "tartan_index_generation{index=\"%s\"} %llu\n", ix->name, g);
        srv_buf_printf(b, "tartan_index_live_documents{index=\"%s\"} %llu\n", ix->name, live);
    }
    srv_buf_printf(b, "# TYPE tartan_queries_total counter\ntartan_queries_total %llu\n"
                   "# TYPE tartan_rejected_busy_total counter\ntartan_rejected_busy_total %llu\n"
                   "# TYPE tartan_reopen_errors_total counter\ntartan_reopen_errors_total %llu\n"
                   "# TYPE tartan_requests_in_flight gauge\ntartan_requests_in_flight %lld\n"
                   "# TYPE tartan_requests_queued gauge\ntartan_requests_queued %lld\n",
                   (unsigned long long)atomic_load(&m->queries),
                   (unsigned long long)atomic_load(&m->rejected_busy),
                   (unsigned long long)atomic_load(&m->reopen_errors),
                   (long long)atomic_load(&m->in_flight), (long long)atomic_load(&m->queued));
    rep->status = 200;
    rep->content_type = "text/plain; version=0.0.4";
}

/* ----------------------------------------------------------------- routing */

void srv_handle(srv_state *st, const char *method, const char *path, const char *body,
                size_t len, srv_reply *rep, int *ep_out) {
    char name[129];
    int ep = srv_route(path, name, sizeof name);
    *ep_out = ep;
    memset(rep, 0, sizeof *rep);
    if (ep == SRV_EP_NONE) {
        char shown[128];
        snprintf(shown, sizeof shown, "%.100s", path);
        srv_reply_error(rep, 404, "no such endpoint: %s (see doc/server.md)", shown);
        return;
    }
    bool post = ep == SRV_EP_SEARCH || ep == SRV_EP_ADD || ep == SRV_EP_DELETE ||
                ep == SRV_EP_COMPACT;
    bool is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (post ? strcmp(method, "POST") : !is_get) {
        srv_reply_error(rep, 405, "%s %s: use %s", method, srv_endpoint_name(ep),
                        post ? "POST" : "GET");
        return;
    }
    srv_index *ix = NULL;
    if (name[0] && !(ix = srv_registry_find(&st->reg, name))) {
        char list[512];
        size_t n = 0;
        list[0] = '\0';
        for (size_t k = 0; k < st->reg.n && n < sizeof list; k++) {
            int w = snprintf(list + n, sizeof list - n, "%s%s", k ? ", " : "", st->reg.ix[k].name);
            if (w < 0)
                break;
            n += (size_t)w;
        }
        srv_reply_error(rep, 404, "no index named '%s' (serving: %s)", name, list);
        return;
    }
    switch (ep) {
    case SRV_EP_SEARCH: do_search(st, ix, body, len, rep); break;
    case SRV_EP_ADD: do_add(st, ix, body, len, rep); break;
    case SRV_EP_DELETE: do_delete(st, ix, body, len, rep); break;
    case SRV_EP_COMPACT: do_compact(st, ix, body, len, rep); break;
    case SRV_EP_INFO: do_info(st, ix, rep); break;
    case SRV_EP_INDEXES: do_indexes(st, rep); break;
    case SRV_EP_METRICS: do_metrics(st, rep); break;
    case SRV_EP_HEALTH:
        srv_buf_printf(&rep->body, "{\"status\": \"ok\", \"indexes\": %zu}\n", st->reg.n);
        rep->status = 200;
        rep->content_type = JSON_TYPE;
        break;
    default: srv_reply_error(rep, 404, "no such endpoint"); break;
    }
    if (rep->body.oom)
        srv_reply_error(rep, 500, "out of memory for the reply");
}

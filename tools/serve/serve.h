/* tartan serve: an HTTP/JSON search service over one or more indexes (doc/server.md).
 * The server's one internal header. Its rooms, lowest first:
 *   buf.c       growable output buffer, JSON string escaping
 *   request.c   request bodies -> validated requests (pure: no I/O, fuzzed)
 *   metrics.c   counters and latency histograms, Prometheus text
 *   registry.c  the named indexes: reference-counted snapshots, reopened when the
 *               index's MANIFEST changes; search contexts pooled per snapshot
 *   api.c       the endpoints: a routed request -> a status and a JSON body
 *   http.c      libmicrohttpd glue: bodies, limits, the bounded queue, shutdown
 * Uses only include/tartan.h of the library. */
#ifndef TT_SERVE_H
#define TT_SERVE_H

#include "tartan.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ buf.c */

typedef struct srv_buf {
    char *p;
    size_t len, cap;
    bool oom; /* an append failed: the content is incomplete */
} srv_buf;

void srv_buf_free(srv_buf *b);
void srv_buf_add(srv_buf *b, const char *s, size_t n);
void srv_buf_puts(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s (n bytes, any content) as a JSON string literal; invalid UTF-8 bytes become U+FFFD. */
void srv_buf_json_str(srv_buf *b, const char *s, size_t n);
/* A float that reads back to the same float32 (%.9g); NaN/Inf as null. */
void srv_buf_json_float(srv_buf *b, double v);

/* -------------------------------------------------------------- request.c */

/* Limits of one request (doc/server.md, "Limits"). */
typedef struct srv_limits {
    uint64_t max_body;          /* bytes of a request body */
    uint32_t max_k;             /* results per query */
    uint32_t max_queries;       /* queries per search request */
    uint32_t max_query_vectors; /* vectors per query */
    uint32_t max_docs;          /* documents per add request */
    uint32_t max_doc_vectors;   /* vectors per added document */
    uint32_t max_ids;           /* ids per delete request */
} srv_limits;

void srv_limits_init(srv_limits *lim);

/* A parsed search request. Vectors (float32, finite) are nvectors * dim, row-major;
 * query i has lens[i] vectors from row offs[i]. With text queries (texts != NULL),
 * vectors are empty until the caller encodes the texts. */
typedef struct srv_search_req {
    uint32_t nqueries;
    uint64_t nvectors;
    float *vectors;
    uint64_t *offs;
    uint32_t *lens;
    char **texts;               /* ntexts = nqueries NUL-terminated texts, or NULL */
    uint32_t k;
    tt_search_options opt;
    /* Filters (doc/metadata.md): an SQL expression over the index's metadata, and/or
     * external ids; NULL when absent. opt.filter stays NULL: the caller makes it. */
    char *where;
    char **filter_ids;
    uint32_t nfilter_ids;
} srv_search_req;

/* A parsed add request: ndocs documents, document i with lens[i] vectors from row
 * offs[i]; ids[i] its id, or ids == NULL (every document without one: new numbers). */
typedef struct srv_add_req {
    uint32_t ndocs;
    uint64_t nvectors;
    float *vectors;
    uint64_t *offs;
    uint32_t *lens;
    char **ids;
    bool upsert;
} srv_add_req;

typedef struct srv_delete_req {
    uint32_t nids;
    char **ids;
    bool strict;
} srv_delete_req;

/* Parsers: body (len bytes, not NUL-terminated, any content) into *out for an index of
 * dimension dim. Return 0 on success, else the HTTP status to answer (400 malformed,
 * 413 over a limit, 422 well-formed but unusable values: NaN, wrong dimension) with a
 * message naming the problem in err (errlen bytes). On failure *out holds nothing to
 * free; on success free it with the matching *_free. */
int srv_parse_search(const char *body, size_t len, uint32_t dim, bool have_encoder,
                     const srv_limits *lim, srv_search_req *out, char *err, size_t errlen);
void srv_search_req_free(srv_search_req *r);
/* srv_parse_search without its fast path for the required form (the reference the
 * fuzz target compares the fast path with). */
int srv_parse_search_json(const char *body, size_t len, uint32_t dim, bool have_encoder,
                          const srv_limits *lim, srv_search_req *out, char *err, size_t errlen);
int srv_parse_add(const char *body, size_t len, uint32_t dim, const srv_limits *lim,
                  srv_add_req *out, char *err, size_t errlen);
void srv_add_req_free(srv_add_req *r);
int srv_parse_delete(const char *body, size_t len, const srv_limits *lim, srv_delete_req *out,
                     char *err, size_t errlen);
void srv_delete_req_free(srv_delete_req *r);
/* A compaction's body: empty, or {"retrain": bool}. */
int srv_parse_compact(const char *body, size_t len, bool *retrain, char *err, size_t errlen);

/* Checks an external document id: 1..4096 bytes, no whitespace or control characters
 * (the ids file of an add is one id per line). NULL if fine, else what is wrong. */
const char *srv_id_problem(const char *id, size_t len);

/* Routing of a URL path: what endpoint and which index name (into name, namelen bytes).
 * SRV_EP_NONE for an unknown path. */
enum srv_endpoint {
    SRV_EP_NONE = 0, SRV_EP_SEARCH, SRV_EP_ADD, SRV_EP_DELETE, SRV_EP_COMPACT, SRV_EP_INFO,
    SRV_EP_INDEXES, SRV_EP_HEALTH, SRV_EP_METRICS, SRV_EP_COUNT
};
int srv_route(const char *path, char *name, size_t namelen);
const char *srv_endpoint_name(int ep);

/* Base64 (RFC 4648, with or without padding; whitespace not allowed) into out
 * (*outlen receives the byte count; out must hold 3 * (n / 4) + 3 bytes). -1 if
 * malformed. */
int srv_base64_decode(const char *in, size_t n, uint8_t *out, size_t *outlen);

/* -------------------------------------------------------------- metrics.c */

#define SRV_LAT_BUCKETS 14

typedef struct srv_metrics {
    _Atomic uint64_t requests[SRV_EP_COUNT][6]; /* by status class 1xx..5xx (index 1..5) */
    _Atomic uint64_t lat_bucket[SRV_EP_COUNT][SRV_LAT_BUCKETS + 1]; /* last: +Inf */
    _Atomic uint64_t lat_sum_us[SRV_EP_COUNT];
    _Atomic uint64_t queries;       /* queries searched */
    _Atomic uint64_t rejected_busy; /* 503 for a full queue */
    _Atomic uint64_t reopen_errors; /* snapshots that failed to reopen */
    _Atomic int64_t in_flight, queued;
} srv_metrics;

extern const double srv_lat_bounds[SRV_LAT_BUCKETS];
void srv_metrics_observe(srv_metrics *m, int ep, int status, double seconds);

/* ------------------------------------------------------------- registry.c */

/* One open generation of an index. Held by reference: a search keeps the snapshot it
 * acquired even when a newer one is published meanwhile. */
typedef struct srv_snap {
    tt_index *idx;
    tt_index_info info;
    _Atomic int refs;
    pthread_mutex_t mu;   /* the context pool */
    tt_search_ctx **ctx;  /* idle search contexts of this snapshot */
    size_t nctx, capctx;
} srv_snap;

typedef struct srv_index {
    char *name, *dir;
    pthread_mutex_t mu;   /* cur, sig, checked */
    srv_snap *cur;
    struct stat sig;      /* stat of DIR/MANIFEST when cur was opened */
    double checked;       /* monotonic time of the last look at MANIFEST */
    bool reopening;
    pthread_mutex_t write_mu; /* one change at a time from this server */
} srv_index;

typedef struct srv_registry {
    srv_index *ix;
    size_t n;
    tt_open_options oo;
    double check_interval; /* seconds between looks at MANIFEST per index (0: each request) */
    srv_metrics *metrics;
} srv_registry;

/* Opens every index (names[i] -> dirs[i]). On failure: -1 with the message in err,
 * naming the index and the library's error, and nothing left open. */
int srv_registry_open(srv_registry *r, size_t n, char *const *names, char *const *dirs,
                      const tt_open_options *oo, char *err, size_t errlen);
void srv_registry_close(srv_registry *r);
srv_index *srv_registry_find(srv_registry *r, const char *name);
/* The current snapshot of ix, first reopened if DIR/MANIFEST changed (looked at most
 * every check_interval seconds; force: now). Never NULL: a failed reopen keeps the
 * snapshot it has (counted in metrics->reopen_errors, reported on stderr). */
srv_snap *srv_snap_acquire(srv_registry *r, srv_index *ix, bool force);
void srv_snap_release(srv_snap *s);
/* A search context of s (pooled), or NULL with the library's error. */
tt_search_ctx *srv_ctx_get(srv_snap *s, int *status);
void srv_ctx_put(srv_snap *s, tt_search_ctx *ctx);

/* ------------------------------------------------------------------ api.c */

typedef struct srv_config {
    srv_limits lim;
    const char *encoder;        /* query encoder command, or NULL */
    uint32_t encoder_timeout_ms;
    int change_threads;         /* threads of an add or compaction */
} srv_config;

typedef struct srv_state {
    srv_registry reg;
    srv_config cfg;
    srv_metrics metrics;
} srv_state;

typedef struct srv_reply {
    int status;
    const char *content_type; /* static */
    srv_buf body;
} srv_reply;

/* Answers one request (method "GET"/"POST"/..., path, body) into *rep; ep receives
 * the endpoint for the metrics. Never fails: errors become a 4xx/5xx JSON reply
 * {"error": {"status": N, "message": "..."}}. */
void srv_handle(srv_state *st, const char *method, const char *path, const char *body,
                size_t len, srv_reply *rep, int *ep);
void srv_reply_error(srv_reply *rep, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ----------------------------------------------------------------- http.c */

typedef struct srv_http_options {
    int threads;            /* searches at once */
    uint32_t queue;         /* requests waiting for a search slot before 503 */
    uint32_t timeout_s;     /* idle connection timeout, and longest wait in the queue */
    uint32_t max_conns;     /* connections at once */
} srv_http_options;

typedef struct srv_http srv_http;

/* Starts serving on the listening socket fd (taken over). NULL with err on failure. */
srv_http *srv_http_start(srv_state *st, int fd, const srv_http_options *o, char *err,
                         size_t errlen);
/* Graceful stop: no new connections; requests in flight finish (at most grace_s
 * seconds), then everything closes. */
void srv_http_stop(srv_http *h, double grace_s);

double srv_now(void);

#endif

/* tartan serve: libmicrohttpd glue. A thread per connection reads the request (its
 * body up to the size limit), waits for one of `threads` work slots in a bounded
 * queue (503 at once when the queue is full, or when the wait outlasts the timeout),
 * runs the endpoint (api.c) and queues the reply. Cheap endpoints (health, metrics,
 * info) skip the queue, so a saturated server still answers its probes. Shutdown stops
 * accepting, lets the requests in flight finish, then closes every connection. */
#include "serve.h"

#include <microhttpd.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if MHD_VERSION < 0x00097002
typedef int MHD_Result;
#define MHD_RESULT int
#else
#define MHD_RESULT enum MHD_Result
#endif

struct srv_http {
    struct MHD_Daemon *d;
    srv_state *st;
    srv_http_options o;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t active, waiting;
    atomic_bool stopping;
};

typedef struct conn_req {
    double t0;
    srv_buf body;
    bool too_big, answered;
    int ep, status;
} conn_req;

static MHD_RESULT send_reply(struct MHD_Connection *c, srv_http *h, conn_req *r,
                             srv_reply *rep) {
    size_t n = rep->body.len;
    char *p = rep->body.p;
    rep->body.p = NULL;
    srv_buf_free(&rep->body);
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n, p ? p : (char *)"", p ? MHD_RESPMEM_MUST_FREE
                                                                  : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(p);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            rep->content_type ? rep->content_type : "application/json");
    if (atomic_load(&h->stopping))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    MHD_RESULT ret = MHD_queue_response(c, (unsigned)rep->status, resp);
    MHD_destroy_response(resp);
    r->status = rep->status;
    r->answered = true;
    return ret;
}

/* A work slot: 0, or 503 (queue full or waited too long). */
static int slot_take(srv_http *h) {
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    if (h->active >= (uint32_t)h->o.threads) {
        if (h->waiting >= h->o.queue) {
            pthread_mutex_unlock(&h->mu);
            return 503;
        }
        h->waiting++;
        atomic_fetch_add(&h->st->metrics.queued, 1);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += h->o.timeout_s;
        while (h->active >= (uint32_t)h->o.threads && rc == 0)
            if (pthread_cond_timedwait(&h->cv, &h->mu, &until) == ETIMEDOUT &&
                h->active >= (uint32_t)h->o.threads)
                rc = 503;
        h->waiting--;
        atomic_fetch_sub(&h->st->metrics.queued, 1);
    }
    if (rc == 0)
        h->active++;
    pthread_mutex_unlock(&h->mu);
    return rc;
}

static void slot_give(srv_http *h) {
    pthread_mutex_lock(&h->mu);
    h->active--;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

static MHD_RESULT on_request(void *cls, struct MHD_Connection *c, const char *url,
                             const char *method, const char *version, const char *upload_data,
                             size_t *upload_data_size, void **con_cls) {
    srv_http *h = cls;
    srv_state *st = h->st;
    conn_req *r = *con_cls;
    (void)version;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        r->t0 = srv_now();
        *con_cls = r;
        atomic_fetch_add(&st->metrics.in_flight, 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > st->cfg.lim.max_body) {
            /* Refused before the body is read (curl's Expect: 100-continue gets no 100). */
            char name[129];
            r->ep = srv_route(url, name, sizeof name);
            srv_reply rep = {0};
            srv_reply_error(&rep, 413, "the body is %s bytes; at most %llu are allowed "
                            "(--max-body)", cl, (unsigned long long)st->cfg.lim.max_body);
            return send_reply(c, h, r, &rep);
        }
        return MHD_YES;
    }
    if (r->answered) { /* the rest of an upload refused above */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!r->too_big) {
            if (r->body.len + *upload_data_size > st->cfg.lim.max_body) {
                r->too_big = true;
                srv_buf_free(&r->body);
            } else {
                srv_buf_add(&r->body, upload_data, *upload_data_size);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    srv_reply rep = {0};
    char name[129];
    int ep = srv_route(url, name, sizeof name);
    r->ep = ep;
    if (r->too_big) {
        srv_reply_error(&rep, 413, "the body exceeds %llu bytes (--max-body)",
                        (unsigned long long)st->cfg.lim.max_body);
        return send_reply(c, h, r, &rep);
    }
    if (r->body.oom) {
        srv_reply_error(&rep, 500, "out of memory for the request body");
        return send_reply(c, h, r, &rep);
    }
    bool queued = ep == SRV_EP_SEARCH || ep == SRV_EP_ADD || ep == SRV_EP_DELETE ||
                  ep == SRV_EP_COMPACT;
    if (queued && slot_take(h)) {
        atomic_fetch_add(&st->metrics.rejected_busy, 1);
        srv_reply_error(&rep, 503, "server busy: %u requests running and %u queued "
                        "(--threads, --queue); retry later", h->o.threads, h->o.queue);
        return send_reply(c, h, r, &rep);
    }
    srv_handle(st, method, url, r->body.p ? r->body.p : "", r->body.len, &rep, &r->ep);
    if (queued)
        slot_give(h);
    srv_buf_free(&r->body);
    return send_reply(c, h, r, &rep);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    srv_http *h = cls;
    conn_req *r = *con_cls;
    (void)c;
    (void)toe;
    if (!r)
        return;
    if (r->answered)
        srv_metrics_observe(&h->st->metrics, r->ep, r->status, srv_now() - r->t0);
    atomic_fetch_sub(&h->st->metrics.in_flight, 1);
    srv_buf_free(&r->body);
    free(r);
    *con_cls = NULL;
}

srv_http *srv_http_start(srv_state *st, int fd, const srv_http_options *o, char *err,
                         size_t errlen) {
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "out of memory");
        close(fd);
        return NULL;
    }
    h->st = st;
    h->o = *o;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    atomic_init(&h->stopping, false);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC;
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_conns,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "libmicrohttpd could not start on the listening socket");
        close(fd);
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
        free(h);
        return NULL;
    }
    return h;
}

void srv_http_stop(srv_http *h, double grace_s) {
    if (!h)
        return;
    atomic_store(&h->stopping, true);
    MHD_socket lfd = MHD_quiesce_daemon(h->d); /* no new connections from here */
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    double until = srv_now() + grace_s;
    while (atomic_load(&h->st->metrics.in_flight) > 0 && srv_now() < until) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(h->d);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

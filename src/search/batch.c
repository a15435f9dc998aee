/* tt_search_batch: queries spread over threads, each with its own search context. */
#include "search/search.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

typedef struct batch_job {
    const tt_index *idx;
    const float *Q;
    const uint64_t *qoffs;
    const uint32_t *qlens;
    uint64_t nqueries;
    uint32_t k;
    const tt_search_options *opt;
    tt_hit *hits;
    uint32_t *nhits;
    double *seconds;
    atomic_uint_fast64_t next;   /* next query to take */
    atomic_int failed;
    pthread_mutex_t mu;          /* guards the first error below */
    int status;
    char msg[1024];
} batch_job;

static void batch_fail(batch_job *j, int st, uint64_t q) {
    pthread_mutex_lock(&j->mu);
    if (j->status == TT_OK) {
        j->status = st;
        if (q == UINT64_MAX)
            snprintf(j->msg, sizeof j->msg, "%s", tt_last_error());
        else
            snprintf(j->msg, sizeof j->msg, "query %llu: %s", (unsigned long long)q,
                     tt_last_error());
    }
    pthread_mutex_unlock(&j->mu);
    atomic_store(&j->failed, 1);
}

/* Each thread owns a search context and takes queries from a shared counter, so the
 * work balances itself; every query's result depends on the query alone. */
static void batch_worker(void *arg, int t, int nthreads) {
    (void)t;
    (void)nthreads;
    batch_job *j = arg;
    tt_search_ctx *ctx = NULL;
    int st = tt_search_ctx_new(j->idx, &ctx);
    if (st) {
        batch_fail(j, st, UINT64_MAX);
        return;
    }
    const uint64_t dim = j->idx->dim;
    while (!atomic_load(&j->failed)) {
        uint64_t q = atomic_fetch_add(&j->next, 1);
        if (q >= j->nqueries)
            break;
        double t0 = tt_now();
        st = tt_search(j->idx, ctx, j->Q + j->qoffs[q] * dim, j->qlens[q], j->k, j->opt,
                       j->hits + q * j->k, &j->nhits[q]);
        if (j->seconds)
            j->seconds[q] = tt_now() - t0;
        if (st) {
            batch_fail(j, st, q);
            break;
        }
    }
    tt_search_ctx_free(ctx);
}

int tt_search_batch(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                    const uint32_t *qlens, uint64_t nqueries, uint32_t k,
                    const tt_search_options *opt, int threads, tt_hit *hits, uint32_t *nhits,
                    double *seconds) {
    if (!idx || (nqueries && (!Q || !qoffs || !qlens || !hits || !nhits)))
        return tt_err(TT_EINVAL, "tt_search_batch: NULL argument");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_search_batch: k must be at least 1");
    int st = tt_search_options_check(opt);
    if (st)
        return st;
    if (nqueries == 0)
        return TT_OK;
    if (threads <= 0)
        threads = tt_default_threads();
    if ((uint64_t)threads > nqueries)
        threads = (int)nqueries;
    for (uint64_t q = 0; q < nqueries; q++)
        nhits[q] = 0;
    batch_job j = {.idx = idx, .Q = Q, .qoffs = qoffs, .qlens = qlens, .nqueries = nqueries,
                   .k = k, .opt = opt, .hits = hits, .nhits = nhits, .seconds = seconds,
                   .status = TT_OK};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.mu, NULL);
    tt_parallel(threads, batch_worker, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.status != TT_OK)
        return tt_err(j.status, "%s", j.msg);
    return TT_OK;
}

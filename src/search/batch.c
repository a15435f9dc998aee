/* tt_search_batch: queries spread over threads, each with its own search context. */
#include "common/first_err.h"
#include "search/search.h"

#include <stdatomic.h>

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
    tt_first_err err;
} batch_job;

/* Each thread owns a search context and takes queries from a shared counter, so the
 * work balances itself; every query's result depends on the query alone. */
static void batch_worker(void *arg, int t, int nthreads) {
    (void)t;
    (void)nthreads;
    batch_job *j = arg;
    tt_search_ctx *ctx = NULL;
    int st = tt_search_ctx_new(j->idx, &ctx);
    if (st) {
        tt_first_err_set(&j->err, st, UINT64_MAX);
        return;
    }
    const uint64_t dim = j->idx->dim;
    while (!tt_first_err_failed(&j->err)) {
        uint64_t q = atomic_fetch_add(&j->next, 1);
        if (q >= j->nqueries)
            break;
        double t0 = tt_now();
        st = tt_search(j->idx, ctx, j->Q + j->qoffs[q] * dim, j->qlens[q], j->k, j->opt,
                       j->hits + q * j->k, &j->nhits[q]);
        if (j->seconds)
            j->seconds[q] = tt_now() - t0;
        if (st) {
            tt_first_err_set(&j->err, st, q);
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
    /* The reference modes without per-query times: one pass over the index for all the
     * queries (scan_batch.c; with the filter, if any, for all of them), each document
     * decoded or converted once; the same results. The queries are checked first, as
     * tt_search checks them. */
    tt_search_options o;
    tt_search_options_resolve(opt, k, &o);
    /* Also when the index's calibration chose exhaustive search for every query here
     * (by its length: the short-query sets may differ). */
    bool scan = o.mode == TT_MODE_EXHAUSTIVE || o.mode == TT_MODE_EXACT;
    if (!scan && o.mode == TT_MODE_PLAID && o.tuned && idx->tuned.tuned) {
        scan = true;
        for (uint64_t q = 0; q < nqueries && scan; q++) {
            tt_search_options oq;
            tt_search_options_resolve_query(idx, opt, k, qlens[q], &oq);
            scan = oq.mode == TT_MODE_EXHAUSTIVE;
        }
        if (scan)
            o.mode = TT_MODE_EXHAUSTIVE;
    }
    if (scan && !seconds && nqueries > 1) {
        if ((st = tt_queries_valid(idx, Q, qoffs, qlens, nqueries, "tt_search_batch")))
            return st;
        return tt_scan_batch(idx, o.filter, Q, qoffs, qlens, nqueries, k, o.mode, o.score,
                             threads, NULL, hits, nhits);
    }
    batch_job j = {.idx = idx, .Q = Q, .qoffs = qoffs, .qlens = qlens, .nqueries = nqueries,
                   .k = k, .opt = opt, .hits = hits, .nhits = nhits, .seconds = seconds};
    atomic_init(&j.next, 0);
    tt_first_err_init(&j.err);
    tt_parallel(threads, batch_worker, &j);
    return tt_first_err_end(&j.err);
}

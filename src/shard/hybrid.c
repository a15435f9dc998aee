/* Sparse and hybrid search over a sharded index in one process: every shard's sparse
 * postings searched with the WHOLE collection's BM25 statistics (live documents, mean
 * length, and each query term's live document frequency summed over the shards), the
 * per-shard lists merged by (score, then lower global row) on the double scores, so the
 * sparse results are exactly the unsharded index's (a sharded build quantizes weights
 * with the whole set's scales: index/shards.c); hybrid fuses that with the sharded
 * dense search (tt_sharded_search_batch) as tt_hybrid_search_batch does. */
#include "common/first_err.h"
#include "search/search.h"
#include "shard/shard.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct shit {
    uint64_t doc;
    double score;
} shit;

static int by_score(const void *x, const void *y) {
    const shit *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->doc < b->doc ? -1 : a->doc > b->doc;
}

typedef struct sjob {
    const tt_sharded *sh;
    const tt_sparse_set *sq;
    const uint64_t *sparse_of;
    const tt_sparse_options *sopt;
    tt_filter **filters;        /* per shard, or NULL */
    uint64_t N;
    double avgdl;
    uint64_t nqueries;
    uint32_t depth;
    const uint64_t *gdf;        /* per entry of sq: its term's df over the whole collection,
                                 * given (tt_sharded_sparse_search_stats), or NULL: summed
                                 * over the open shards, query by query */
    double *out_scores;         /* nqueries * depth exact scores, or NULL */
    tt_hit *out;                /* nqueries * depth */
    uint32_t *nout;
    double *seconds;            /* may be NULL: added to */
    atomic_uint_fast64_t next;
    tt_first_err err;
} sjob;

/* One query: global df, each shard's top depth, the merge. */
static int one_query(sjob *j, uint64_t r, tt_hit *out, double *out_scores, uint32_t *nout,
                     uint64_t *df, uint64_t *part, tt_hit *hits, double *scores, shit *all) {
    const tt_sharded *sh = j->sh;
    const uint32_t S = sh->nopen;
    uint64_t nt = j->sq->off[r + 1] - j->sq->off[r];
    int st;
    for (uint64_t i = 0; i < nt; i++)
        df[i] = j->gdf ? j->gdf[j->sq->off[r] + i] : 0;
    for (uint32_t s = 0; s < S && !j->gdf; s++) {
        if ((st = tt_sparse_query_df(sh->idx[s], j->sq, r, part)))
            return st;
        for (uint64_t i = 0; i < nt; i++)
            df[i] += part[i];
    }
    tt_sparse_global g = {.N = j->N, .avgdl = j->avgdl, .df = df};
    tt_sparse_options so = *j->sopt;
    uint64_t n = 0;
    for (uint32_t s = 0; s < S; s++) {
        uint32_t m = 0;
        so.filter = j->filters ? j->filters[s] : NULL;
        if ((st = tt_sparse_search_global(sh->idx[s], j->sq, r, j->depth, &so, &g, hits, scores,
                                          &m)))
            return tt_err_prefix(st, "%s", sh->idx[s]->dir);
        const uint64_t base = sh->first_row[sh->open_id[s]];
        for (uint32_t i = 0; i < m; i++)
            all[n++] = (shit){.doc = hits[i].doc + base, .score = scores[i]};
    }
    qsort(all, n, sizeof *all, by_score);
    uint32_t m = (uint32_t)TT_MIN(n, (uint64_t)j->depth);
    for (uint32_t i = 0; i < m; i++) {
        out[i] = (tt_hit){.doc = all[i].doc, .score = (float)all[i].score};
        if (out_scores)
            out_scores[i] = all[i].score;
    }
    *nout = m;
    return TT_OK;
}

static void sparse_worker(void *arg, int t, int nthreads) {
    (void)t;
    (void)nthreads;
    sjob *j = arg;
    const uint32_t S = j->sh->nopen;
    uint64_t maxnt = 1;
    for (uint64_t r = 0; r < j->sq->n; r++)
        maxnt = TT_MAX(maxnt, j->sq->off[r + 1] - j->sq->off[r]);
    uint64_t *df = tt_alloc(maxnt, sizeof *df, "sparse search");
    uint64_t *part = tt_alloc(maxnt, sizeof *part, "sparse search");
    tt_hit *hits = tt_alloc(j->depth, sizeof *hits, "sparse search");
    double *scores = tt_alloc(j->depth, sizeof *scores, "sparse search");
    shit *all = tt_alloc((uint64_t)S * j->depth, sizeof *all, "sparse search");
    if (!df || !part || !hits || !scores || !all) {
        tt_first_err_set(&j->err, TT_ENOMEM, 0);
        goto out;
    }
    while (!tt_first_err_failed(&j->err)) {
        uint64_t q = atomic_fetch_add(&j->next, 1);
        if (q >= j->nqueries)
            break;
        double t0 = tt_now();
        uint64_t r = j->sparse_of ? j->sparse_of[q] : q;
        j->nout[q] = 0;
        int st = r == UINT64_MAX ? TT_OK
                                 : one_query(j, r, j->out + q * j->depth,
                                             j->out_scores ? j->out_scores + q * j->depth : NULL,
                                             &j->nout[q], df, part, hits, scores, all);
        if (j->seconds)
            j->seconds[q] += tt_now() - t0;
        if (st) {
            tt_first_err_set(&j->err, st, q);
            break;
        }
    }
out:
    free(df);
    free(part);
    free(hits);
    free(scores);
    free(all);
}

/* The open shards' sparse kind (0: none open) and, when live is not NULL, their live
 * documents and summed lengths (BM25's N and avgdl over them); TT_EUNSUPPORTED for a
 * shard without postings, TT_ECORRUPT for two kinds. */
static int shards_sparse(const tt_sharded *sh, uint32_t *kind, uint64_t *live,
                         uint64_t *total_len) {
    *kind = 0;
    if (live)
        *live = *total_len = 0;
    for (uint32_t s = 0; s < sh->nopen; s++) {
        const tt_index *x = sh->idx[s];
        if (!x->sparse_kind)
            return tt_err(TT_EUNSUPPORTED, "%s: the shard has no sparse postings (build with "
                          "--bm25 or --sparse)", x->dir);
        if (*kind && x->sparse_kind != *kind)
            return tt_err(TT_ECORRUPT, "%s: sparse postings of another kind than %s's", x->dir,
                          sh->idx[0]->dir);
        *kind = x->sparse_kind;
        if (live) {
            *live += x->sparse_live;
            *total_len += x->sparse_total_len;
        }
    }
    return TT_OK;
}

/* The caller's sparse options (NULL: the defaults), checked as tt_sparse_search checks
 * them, into out at this library's size. */
static int sparse_opts(const tt_sparse_options *in, tt_sparse_options *out) {
    if (!in) {
        tt_sparse_options_init(out);
        return TT_OK;
    }
    int st = tt_sparse_options_check(in);
    if (!st)
        tt_sparse_options_copy(in, out);
    return st;
}

/* Runs j's queries on `threads` threads (<= 0: every CPU; at most one a query); the
 * first error, naming its query. */
static int run_sparse(sjob *j, int threads) {
    atomic_init(&j->next, 0);
    tt_first_err_init(&j->err);
    if (threads <= 0)
        threads = tt_default_threads();
    if ((uint64_t)threads > j->nqueries)
        threads = j->nqueries ? (int)j->nqueries : 1;
    if (j->nqueries)
        tt_parallel(threads, sparse_worker, j);
    return tt_first_err_end(&j->err);
}

int tt_sharded_hybrid_search_batch(const tt_sharded *sh, const float *Q, const uint64_t *qoffs,
                                   const uint32_t *qlens, const tt_search_options *dopt,
                                   const tt_sparse_set *sq, const uint64_t *sparse_of,
                                   const tt_sparse_options *sopt, const tt_fusion_options *fopt,
                                   uint64_t nqueries, uint32_t k, int threads, tt_hit *hits,
                                   uint32_t *nhits, double *seconds) {
    if (!sh || !sq || (nqueries && (!hits || !nhits)) || (Q && (!qoffs || !qlens)))
        return tt_err(TT_EINVAL, "tt_sharded_hybrid_search_batch: NULL argument");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_sharded_hybrid_search_batch: k must be at least 1");
    if (sh->nopen == 1 && sh->num_shards == 1) /* a plain index */
        return tt_hybrid_search_batch(sh->idx[0], Q, qoffs, qlens, dopt, sq, sparse_of, sopt,
                                      fopt, nqueries, k, threads, hits, nhits, seconds);
    if (sh->nopen != sh->num_shards)
        return tt_err(TT_EUNSUPPORTED, "%s: a sparse or hybrid search needs every shard open "
                      "(the BM25 statistics are the whole collection's); this process opened "
                      "%u of %u", sh->dir, sh->nopen, sh->num_shards);
    tt_sparse_options so, sdef;
    tt_fusion_options fdef;
    tt_search_options dso;
    if (!fopt) {
        tt_fusion_options_init(&fdef);
        fopt = &fdef;
    }
    if (!sopt) {
        tt_sparse_options_init(&sdef);
        sopt = &sdef;
    }
    int st = tt_hybrid_options("tt_sharded_hybrid_search_batch", Q != NULL, dopt, sopt, &dso,
                               &so);
    if (st)
        return st;
    /* the one filter is over the global rows: each shard gets its part (below) */
    const tt_filter *gf = so.filter;
    so.filter = NULL;
    if ((st = tt_sharded_check_filter("tt_sharded_hybrid_search_batch", sh, gf)))
        return st;
    uint32_t kind;
    uint64_t N, total;
    if ((st = shards_sparse(sh, &kind, &N, &total)))
        return st;
    if (!sparse_of && sq->n < nqueries)
        return tt_err(TT_EDIM, "tt_sharded_hybrid_search_batch: %llu sparse queries for %llu "
                      "queries", (unsigned long long)sq->n, (unsigned long long)nqueries);
    if (Q) { /* check the fusion options once */
        uint32_t dummy;
        tt_hit h;
        if ((st = tt_fuse(NULL, 0, NULL, 0, fopt, 1, &h, &dummy)))
            return st;
    }
    const uint32_t depth = Q ? TT_MAX(k, fopt->depth) : k;
    uint64_t nq1 = nqueries ? nqueries : 1;
    tt_hit *sh_hits = tt_alloc(nq1 * depth, sizeof *sh_hits, "sparse results");
    uint32_t *sh_n = tt_calloc(nq1, sizeof *sh_n, "sparse results");
    tt_hit *dh = Q ? tt_alloc(nq1 * depth, sizeof *dh, "dense results") : NULL;
    uint32_t *dn = Q ? tt_calloc(nq1, sizeof *dn, "dense results") : NULL;
    tt_filter **filters = NULL;
    if (!sh_hits || !sh_n || (Q && (!dh || !dn))) {
        st = TT_ENOMEM;
        goto done;
    }
    if ((st = tt_sharded_split_filter(sh, gf, &filters))) /* each shard's part */
        goto done;
    if (seconds)
        memset(seconds, 0, nqueries * sizeof *seconds);
    /* the dense lists to the fusion depth (their latency: tt_sharded_search_batch's) */
    if (Q && (st = tt_sharded_search_batch(sh, Q, qoffs, qlens, nqueries, depth, &dso, threads,
                                           dh, dn, seconds)))
        goto done;
    sjob j = {.sh = sh, .sq = sq, .sparse_of = sparse_of, .sopt = &so, .filters = filters,
              .N = N, .avgdl = tt_bm25_avgdl(N, total), .nqueries = nqueries, .depth = depth,
              .out = sh_hits, .nout = sh_n, .seconds = seconds};
    if ((st = run_sparse(&j, threads)))
        goto done;
    for (uint64_t q = 0; q < nqueries && !st; q++) {
        tt_hit *out = hits + q * k;
        const tt_hit *sp = sh_hits + q * depth;
        if (Q) {
            double t0 = tt_now();
            st = tt_fuse(dh + q * depth, dn[q], sp, sh_n[q], fopt, k, out, &nhits[q]);
            if (st) {
                char msg[512];
                snprintf(msg, sizeof msg, "%s", tt_last_error());
                st = tt_err(st, "query %llu: %s", (unsigned long long)q, msg);
            }
            if (seconds)
                seconds[q] += tt_now() - t0;
        } else {
            nhits[q] = TT_MIN(sh_n[q], k);
            memcpy(out, sp, nhits[q] * sizeof *out);
        }
    }
done:
    free(sh_hits);
    free(sh_n);
    free(dh);
    free(dn);
    tt_sharded_filters_free(sh, filters);
    return st;
}

/* ------------------------------- sparse search of some shards, given statistics */

uint64_t tt_sparse_set_num_entries(const tt_sparse_set *s) { return s ? s->off[s->n] : 0; }

int tt_sharded_sparse_stats(const tt_sharded *sh, const tt_sparse_set *queries,
                            uint64_t *live_docs, uint64_t *total_len, uint64_t *df) {
    if (!sh || !queries || !live_docs || !total_len || (queries->off[queries->n] && !df))
        return tt_err(TT_EINVAL, "tt_sharded_sparse_stats: NULL argument");
    uint32_t kind;
    int st = shards_sparse(sh, &kind, live_docs, total_len);
    if (st)
        return st;
    const uint64_t E = queries->off[queries->n];
    if (E)
        memset(df, 0, E * sizeof *df);
    uint64_t maxnt = 1;
    for (uint64_t r = 0; r < queries->n; r++)
        maxnt = TT_MAX(maxnt, queries->off[r + 1] - queries->off[r]);
    uint64_t *part = tt_alloc(maxnt, sizeof *part, "sparse statistics");
    if (!part)
        return TT_ENOMEM;
    for (uint32_t s = 0; s < sh->nopen && !st && kind == TT_SPARSE_KIND_BM25; s++) {
        for (uint64_t r = 0; r < queries->n && !st; r++) {
            if ((st = tt_sparse_query_df(sh->idx[s], queries, r, part)))
                break;
            for (uint64_t i = queries->off[r]; i < queries->off[r + 1]; i++)
                df[i] += part[i - queries->off[r]];
        }
    }
    free(part);
    return st;
}

int tt_sharded_sparse_search_stats(const tt_sharded *sh, const tt_sparse_set *queries,
                                   const uint64_t *sparse_of, uint64_t nqueries, uint32_t k,
                                   const tt_sparse_options *sopt, uint64_t live_docs,
                                   uint64_t total_len, const uint64_t *df, int threads,
                                   tt_hit *hits, double *scores, uint32_t *nhits) {
    const tt_sparse_set *sq = queries;
    if (!sh || !sq || (nqueries && (!hits || !nhits)) || (sq->off[sq->n] && !df))
        return tt_err(TT_EINVAL, "tt_sharded_sparse_search_stats: NULL argument");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_sharded_sparse_search_stats: k must be at least 1");
    if (!sparse_of && sq->n < nqueries)
        return tt_err(TT_EDIM, "tt_sharded_sparse_search_stats: %llu sparse queries for %llu "
                      "queries", (unsigned long long)sq->n, (unsigned long long)nqueries);
    for (uint64_t q = 0; sparse_of && q < nqueries; q++)
        if (sparse_of[q] != UINT64_MAX && sparse_of[q] >= sq->n)
            return tt_err(TT_EINVAL, "tt_sharded_sparse_search_stats: query %llu names sparse "
                          "record %llu of %llu", (unsigned long long)q,
                          (unsigned long long)sparse_of[q], (unsigned long long)sq->n);
    uint32_t kind;
    tt_sparse_options so;
    int st = shards_sparse(sh, &kind, NULL, NULL);
    if (st || (st = sparse_opts(sopt, &so)))
        return st;
    const tt_filter *gf = so.filter;
    so.filter = NULL;
    if ((st = tt_sharded_check_filter("tt_sharded_sparse_search_stats", sh, gf)))
        return st;
    const uint32_t S = sh->nopen;
    if (S == 0) { /* no shard here: no hits */
        if (nqueries)
            memset(nhits, 0, nqueries * sizeof *nhits);
        return TT_OK;
    }
    tt_filter **filters;
    if ((st = tt_sharded_split_filter(sh, gf, &filters))) /* each shard's part */
        return st;
    sjob j = {.sh = sh, .sq = sq, .sparse_of = sparse_of, .sopt = &so, .filters = filters,
              .N = live_docs, .avgdl = tt_bm25_avgdl(live_docs, total_len),
              .nqueries = nqueries, .depth = k, .gdf = df, .out_scores = scores, .out = hits,
              .nout = nhits};
    st = run_sparse(&j, threads);
    tt_sharded_filters_free(sh, filters);
    return st;
}

/* Sparse retrieval over an open index (every segment's sparse.tt, deleted rows never
 * returned), score fusion, and hybrid search: a dense (PLAID) and a sparse search of the
 * same query run side by side on two threads, their lists fused (doc/search.md,
 * "Hybrid retrieval"). */
#include "common/first_err.h"
#include "search/search.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

void tt_sparse_options_init(tt_sparse_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->k1 = 0.9;
    o->b = 0.4;
    o->brute_force = 0;
}

void tt_fusion_options_init(tt_fusion_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->method = TT_FUSION_MINMAX;
    o->depth = 1000;
    o->alpha = 0.5;
    o->rrf_k = 60;
}

int tt_index_sparse_kind(const tt_index *idx) { return idx ? (int)idx->sparse_kind : 0; }

int tt_index_sparse_info(const tt_index *idx, tt_sparse_info *out) {
    if (!idx || !out)
        return tt_err(TT_EINVAL, "tt_index_sparse_info: NULL argument");
    memset(out, 0, sizeof *out);
    out->kind = (int)idx->sparse_kind;
    if (!idx->sparse_kind)
        return TT_OK;
    out->bytes = idx->sparse_bytes;
    out->live_docs = idx->sparse_live;
    out->avgdl = idx->sparse_avgdl;
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_sparse_seg *sp = &idx->seg[s].sparse;
        out->terms += sp->T;
        for (uint64_t t = 0; t < sp->T; t++)
            out->postings += tt_sparse_seg_df(sp, t);
    }
    return TT_OK;
}

const char *tt_sparse_set_id(const tt_sparse_set *s, uint64_t i) {
    return s && i < s->n ? tt_st_str(&s->ids, (uint32_t)i) : NULL;
}

int64_t tt_sparse_set_find(const tt_sparse_set *s, const char *id) {
    if (!s || !id)
        return -1;
    uint32_t i = tt_st_find(&s->ids, id, strlen(id));
    return i == TT_ST_NONE ? -1 : (int64_t)i;
}

/* The size of tt_sparse_options before its filter was appended. */
#define SPARSE_OPTIONS_V1_SIZE offsetof(tt_sparse_options, filter)

/* The caller's options, whole: the fields past its struct_size at their defaults
 * (the copy is of this library's size, so it can be passed on with a filter set). */
void tt_sparse_options_copy(const tt_sparse_options *in, tt_sparse_options *out) {
    tt_sparse_options_init(out);
    if (in->struct_size == SPARSE_OPTIONS_V1_SIZE || in->struct_size == sizeof *in)
        memcpy(out, in, in->struct_size);
    out->struct_size = sizeof *out;
}

int tt_sparse_options_check(const tt_sparse_options *o) {
    if (o->struct_size != sizeof *o && o->struct_size != SPARSE_OPTIONS_V1_SIZE)
        return tt_err(TT_EINVAL, "sparse options: struct_size %u (expected %zu)", o->struct_size,
                      sizeof *o);
    if (!(o->k1 >= 0) || !isfinite(o->k1) || !(o->b >= 0 && o->b <= 1))
        return tt_err(TT_EINVAL, "sparse options: k1 must be >= 0 and b within [0, 1]");
    return TT_OK;
}

/* Live document frequency of term t of segment sg: its df, or with deletions in the
 * segment, its postings on live rows counted. */
static uint64_t live_df(const tt_index *idx, const tt_segment *sg, uint64_t t) {
    uint32_t df = tt_sparse_seg_df(&sg->sparse, t);
    if (!sg->num_deleted)
        return df;
    uint64_t first = tt_sparse_seg_first_block(&sg->sparse, t), nb = (df + TT_SPARSE_BLOCK - 1) / TT_SPARSE_BLOCK,
             n = 0;
    uint32_t docs[TT_SPARSE_BLOCK];
    uint8_t vals[TT_SPARSE_BLOCK];
    for (uint64_t j = 0; j < nb; j++) {
        uint32_t m = tt_sparse_block_decode(&sg->sparse, first, df, first + j, docs, vals);
        for (uint32_t i = 0; i < m; i++)
            n += !tt_index_deleted(idx, sg->doc0 + docs[i]);
    }
    return n;
}

int tt_sparse_query_df(const tt_index *idx, const tt_sparse_set *q, uint64_t qi, uint64_t *df) {
    if (qi >= q->n)
        return tt_err(TT_EINVAL, "tt_sparse_search: query %llu of %llu", (unsigned long long)qi,
                      (unsigned long long)q->n);
    uint64_t e0 = q->off[qi], e1 = q->off[qi + 1];
    for (uint64_t i = 0; i < e1 - e0; i++) {
        df[i] = 0;
        if (idx->sparse_kind != TT_SPARSE_KIND_BM25)
            continue;
        const char *ts = tt_st_str(&q->terms, q->term[e0 + i]);
        size_t tl = tt_st_len(&q->terms, q->term[e0 + i]);
        for (uint32_t s = 0; s < idx->nseg; s++) {
            int64_t t = tt_sparse_seg_find(&idx->seg[s].sparse, ts, tl);
            if (t >= 0)
                df[i] += live_df(idx, &idx->seg[s], (uint64_t)t);
        }
    }
    return TT_OK;
}

int tt_sparse_search(const tt_index *idx, const tt_sparse_set *q, uint64_t qi, uint32_t k,
                     const tt_sparse_options *opt, tt_hit *hits, uint32_t *nhits) {
    return tt_sparse_search_global(idx, q, qi, k, opt, NULL, hits, NULL, nhits);
}

int tt_sparse_search_global(const tt_index *idx, const tt_sparse_set *q, uint64_t qi,
                            uint32_t k, const tt_sparse_options *opt,
                            const tt_sparse_global *g, tt_hit *hits, double *scores,
                            uint32_t *nhits) {
    tt_sparse_options defaults;
    if (!opt) {
        tt_sparse_options_init(&defaults);
        opt = &defaults;
    }
    if (!idx || !q || !hits || !nhits)
        return tt_err(TT_EINVAL, "tt_sparse_search: NULL argument");
    *nhits = 0;
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_sparse_search: k must be at least 1");
    if (qi >= q->n)
        return tt_err(TT_EINVAL, "tt_sparse_search: query %llu of %llu", (unsigned long long)qi,
                      (unsigned long long)q->n);
    int st = tt_sparse_options_check(opt);
    if (st)
        return st;
    tt_sparse_options so;
    tt_sparse_options_copy(opt, &so);
    opt = &so;
    if (!idx->sparse_kind)
        return tt_err(TT_EUNSUPPORTED, "%s: the index has no sparse postings (build or add "
                      "with --bm25 or --sparse)", idx->dir);
    if ((idx->sparse_kind == TT_SPARSE_KIND_IDS) != (q->kind == TT_SPARSE_KIND_IDS))
        return tt_err(TT_EINVAL, "%s: the index's sparse terms are %s, the query's are %s "
                      "(JSON Lines \"term_ids\", or a vocabulary, give ids)", idx->dir,
                      idx->sparse_kind == TT_SPARSE_KIND_IDS ? "integer ids" : "strings",
                      q->kind == TT_SPARSE_KIND_IDS ? "integer ids" : "strings");
    if (opt->filter && opt->filter->num_rows != idx->num_docs)
        return tt_err(TT_EINVAL, "tt_sparse_search: the filter is over %llu rows, the index %s "
                      "has %llu", (unsigned long long)opt->filter->num_rows, idx->dir,
                      (unsigned long long)idx->num_docs);
    const uint64_t *allow = opt->filter ? opt->filter->bits : NULL;
    uint64_t e0 = q->off[qi], e1 = q->off[qi + 1];
    uint32_t nq = (uint32_t)(e1 - e0);
    tt_sparse_scoring sc = {.kind = idx->sparse_kind, .k1 = opt->k1, .b = opt->b,
                            .avgdl = g ? g->avgdl : idx->sparse_avgdl};
    tt_sparse_term *terms = tt_alloc(nq ? nq : 1, sizeof *terms, "sparse search");
    int64_t *tid = tt_alloc((uint64_t)(nq ? nq : 1) * idx->nseg, sizeof *tid, "sparse search");
    double *idf = tt_alloc(nq ? nq : 1, sizeof *idf, "sparse search");
    tt_sparse_heap h = {0};
    if (!terms || !tid || !idf || (st = tt_sparse_heap_init(&h, k))) {
        st = TT_ENOMEM;
        goto done;
    }
    /* the query's terms in each segment, and BM25's idf over the live documents */
    for (uint32_t i = 0; i < nq; i++) {
        const char *ts = tt_st_str(&q->terms, q->term[e0 + i]);
        size_t tl = tt_st_len(&q->terms, q->term[e0 + i]);
        uint64_t df = 0;
        for (uint32_t s = 0; s < idx->nseg; s++) {
            tid[(uint64_t)i * idx->nseg + s] = tt_sparse_seg_find(&idx->seg[s].sparse, ts, tl);
            if (!g && tid[(uint64_t)i * idx->nseg + s] >= 0 && sc.kind == TT_SPARSE_KIND_BM25)
                df += live_df(idx, &idx->seg[s], (uint64_t)tid[(uint64_t)i * idx->nseg + s]);
        }
        if (g) /* a sharded index: the whole collection's statistics */
            df = g->df[i];
        double N = g ? (double)g->N : (double)idx->sparse_live;
        idf[i] = df ? log(1.0 + (N - (double)df + 0.5) / ((double)df + 0.5)) : 0;
    }
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        uint32_t nt = 0;
        for (uint32_t i = 0; i < nq; i++) {
            int64_t t = tid[(uint64_t)i * idx->nseg + s];
            if (t < 0)
                continue;
            double qw = (double)q->value[e0 + i];
            double f = sc.kind == TT_SPARSE_KIND_BM25
                           ? qw * idf[i]
                           : qw * (double)tt_sparse_seg_scale(&sg->sparse, (uint64_t)t);
            if (!(f > 0))
                continue;
            terms[nt++] = (tt_sparse_term){.qi = i, .factor = f, .first =
                                               tt_sparse_seg_first_block(&sg->sparse, (uint64_t)t),
                                           .df = tt_sparse_seg_df(&sg->sparse, (uint64_t)t)};
        }
        st = opt->brute_force
                 ? tt_sparse_seg_brute(&sg->sparse, &sc, terms, nt, nq, idx->deleted, allow,
                                       sg->doc0, &h)
                 : tt_sparse_seg_topk(&sg->sparse, &sc, terms, nt, nq, idx->deleted, allow,
                                      sg->doc0, &h, NULL);
        if (st)
            goto done;
    }
    tt_sparse_heap_sort(&h);
    for (uint32_t i = 0; i < h.n; i++) {
        hits[i] = (tt_hit){.doc = h.row[i], .score = (float)h.score[i]};
        if (scores)
            scores[i] = h.score[i];
    }
    *nhits = h.n;
done:
    tt_sparse_heap_free(&h);
    free(terms);
    free(tid);
    free(idf);
    return st;
}

/* ---------------------------------------------------------------- fusion */

typedef struct fused {
    uint64_t doc;
    double a, b;        /* normalised scores (or reciprocal ranks) in each list */
    double score;
} fused;

static int by_doc(const void *x, const void *y) {
    uint64_t a = ((const fused *)x)->doc, b = ((const fused *)y)->doc;
    return a < b ? -1 : a > b;
}

static int by_score(const void *x, const void *y) {
    const fused *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->doc < b->doc ? -1 : a->doc > b->doc;
}

int tt_fuse(const tt_hit *a, uint32_t na, const tt_hit *b, uint32_t nb,
            const tt_fusion_options *opt, uint32_t k, tt_hit *out, uint32_t *nout) {
    tt_fusion_options defaults;
    if (!opt) {
        tt_fusion_options_init(&defaults);
        opt = &defaults;
    }
    if ((na && !a) || (nb && !b) || !out || !nout)
        return tt_err(TT_EINVAL, "tt_fuse: NULL argument");
    *nout = 0;
    if (opt->struct_size != sizeof *opt)
        return tt_err(TT_EINVAL, "fusion options: struct_size %u (expected %zu)",
                      opt->struct_size, sizeof *opt);
    if (opt->method != TT_FUSION_MINMAX && opt->method != TT_FUSION_RRF)
        return tt_err(TT_EINVAL, "fusion options: unknown method %d", opt->method);
    if (!(opt->alpha >= 0 && opt->alpha <= 1))
        return tt_err(TT_EINVAL, "fusion options: alpha must be within [0, 1]");
    if (opt->depth == 0 || !(opt->rrf_k >= 0) || !isfinite(opt->rrf_k))
        return tt_err(TT_EINVAL, "fusion options: depth must be >= 1 and rrf_k >= 0");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_fuse: k must be at least 1");
    na = TT_MIN(na, opt->depth);
    nb = TT_MIN(nb, opt->depth);
    for (uint32_t i = 0; i < na; i++)
        if (!isfinite(a[i].score))
            return tt_err(TT_EVALUE, "tt_fuse: a non-finite score in the first list");
    for (uint32_t i = 0; i < nb; i++)
        if (!isfinite(b[i].score))
            return tt_err(TT_EVALUE, "tt_fuse: a non-finite score in the second list");
    fused *f = tt_alloc((uint64_t)na + nb + 1, sizeof *f, "fusion");
    if (!f)
        return TT_ENOMEM;
    /* per list: min-max normalisation within its top `depth` (a list whose scores are
     * all equal gives each of its documents 1), or the reciprocal rank 1 / (rrf_k + r) */
    double amin = INFINITY, amax = -INFINITY, bmin = INFINITY, bmax = -INFINITY;
    for (uint32_t i = 0; i < na; i++) {
        amin = fmin(amin, a[i].score);
        amax = fmax(amax, a[i].score);
    }
    for (uint32_t i = 0; i < nb; i++) {
        bmin = fmin(bmin, b[i].score);
        bmax = fmax(bmax, b[i].score);
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < na; i++) {
        double v = opt->method == TT_FUSION_RRF ? 1.0 / (opt->rrf_k + (double)(i + 1))
                   : amax > amin ? ((double)a[i].score - amin) / (amax - amin) : 1.0;
        f[n++] = (fused){.doc = a[i].doc, .a = v, .b = 0};
    }
    for (uint32_t i = 0; i < nb; i++) {
        double v = opt->method == TT_FUSION_RRF ? 1.0 / (opt->rrf_k + (double)(i + 1))
                   : bmax > bmin ? ((double)b[i].score - bmin) / (bmax - bmin) : 1.0;
        f[n++] = (fused){.doc = b[i].doc, .a = 0, .b = v};
    }
    qsort(f, n, sizeof *f, by_doc);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m > 0 && f[m - 1].doc == f[i].doc) {
            f[m - 1].a += f[i].a; /* a document appears at most once per list */
            f[m - 1].b += f[i].b;
        } else {
            f[m++] = f[i];
        }
    }
    for (uint32_t i = 0; i < m; i++)
        f[i].score = opt->method == TT_FUSION_RRF ? f[i].a + f[i].b
                                                  : opt->alpha * f[i].a + (1 - opt->alpha) * f[i].b;
    qsort(f, m, sizeof *f, by_score);
    uint32_t r = TT_MIN(m, k);
    for (uint32_t i = 0; i < r; i++)
        out[i] = (tt_hit){.doc = f[i].doc, .score = (float)f[i].score};
    *nout = r;
    free(f);
    return TT_OK;
}

/* ---------------------------------------------------------------- batches */

int tt_hybrid_options(const char *who, bool dense, const tt_search_options *dopt,
                      const tt_sparse_options *sopt, tt_search_options *dso,
                      tt_sparse_options *so) {
    int st = tt_sparse_options_check(sopt);
    if (st || (dense && (st = tt_search_options_check(dopt))))
        return st;
    tt_sparse_options_copy(sopt, so);
    tt_search_options_init(dso);
    if (dopt) {
        memcpy(dso, dopt, TT_MIN((size_t)dopt->struct_size, sizeof *dso));
        dso->struct_size = sizeof *dso;
    }
    /* One filter for both retrievers: the dense options', or the sparse options'. */
    const tt_filter *df = dense ? dso->filter : NULL;
    if (df && so->filter && df != so->filter)
        return tt_err(TT_EINVAL, "%s: the dense and the sparse options name different filters "
                      "(give one, or the same)", who);
    if (df)
        so->filter = df;
    dso->filter = so->filter;
    return TT_OK;
}

typedef struct sbatch {
    const tt_index *idx;
    /* dense side (Q NULL: sparse only) */
    const float *Q;
    const uint64_t *qoffs;
    const uint32_t *qlens;
    const tt_search_options *dopt;
    /* sparse side (sq NULL: dense only) */
    const tt_sparse_set *sq;
    const uint64_t *sparse_of;   /* per query: its record in sq, or UINT64_MAX (no terms) */
    const tt_sparse_options *sopt;
    const tt_fusion_options *fopt;
    uint64_t nqueries;
    uint32_t k;
    tt_hit *hits;
    uint32_t *nhits;
    double *seconds;
    atomic_uint_fast64_t next;
    tt_first_err err;
} sbatch;

/* One hybrid query: the dense search on the calling thread and the sparse one on a
 * second, both to the fusion depth. */
typedef struct hq {
    sbatch *j;
    tt_search_ctx *ctx;
    uint64_t q;
    uint32_t depth;
    tt_hit *dh, *sh;
    uint32_t nd, ns;
    int dst, sst;
    char smsg[512];
} hq;

static void hq_part(void *arg, int t, int nthreads) {
    (void)nthreads;
    hq *h = arg;
    sbatch *j = h->j;
    if (t == 0) {
        h->dst = tt_search(j->idx, h->ctx, j->Q + j->qoffs[h->q] * j->idx->dim, j->qlens[h->q],
                           h->depth, j->dopt, h->dh, &h->nd);
    } else {
        uint64_t r = j->sparse_of ? j->sparse_of[h->q] : h->q;
        h->ns = 0;
        h->sst = r == UINT64_MAX ? TT_OK
                                 : tt_sparse_search(j->idx, j->sq, r, h->depth, j->sopt, h->sh,
                                                    &h->ns);
        if (h->sst)
            snprintf(h->smsg, sizeof h->smsg, "%s", tt_last_error());
    }
}

static void sb_worker(void *arg, int t, int nthreads) {
    (void)t;
    (void)nthreads;
    sbatch *j = arg;
    tt_search_ctx *ctx = NULL;
    tt_hit *dh = NULL, *sh = NULL;
    uint32_t depth = j->Q && j->sq ? TT_MAX(j->k, j->fopt->depth) : j->k;
    int st = TT_OK;
    if (j->Q && (st = tt_search_ctx_new(j->idx, &ctx))) {
        tt_first_err_set(&j->err, st, 0);
        return;
    }
    dh = tt_alloc(depth, sizeof *dh, "hybrid search");
    sh = tt_alloc(depth, sizeof *sh, "hybrid search");
    if (!dh || !sh) {
        tt_first_err_set(&j->err, TT_ENOMEM, 0);
        goto out;
    }
    while (!tt_first_err_failed(&j->err)) {
        uint64_t q = atomic_fetch_add(&j->next, 1);
        if (q >= j->nqueries)
            break;
        double t0 = tt_now();
        tt_hit *out = j->hits + q * j->k;
        if (!j->Q) { /* sparse only */
            uint64_t r = j->sparse_of ? j->sparse_of[q] : q;
            j->nhits[q] = 0;
            st = r == UINT64_MAX ? TT_OK
                                 : tt_sparse_search(j->idx, j->sq, r, j->k, j->sopt, out,
                                                    &j->nhits[q]);
        } else {
            hq h = {.j = j, .ctx = ctx, .q = q, .depth = depth, .dh = dh, .sh = sh};
            tt_parallel(2, hq_part, &h);
            st = h.dst;
            if (!st && h.sst)
                st = tt_err(h.sst, "%s", h.smsg);
            if (!st)
                st = tt_fuse(dh, h.nd, sh, h.ns, j->fopt, j->k, out, &j->nhits[q]);
        }
        if (j->seconds)
            j->seconds[q] = tt_now() - t0;
        if (st) {
            tt_first_err_set(&j->err, st, q);
            break;
        }
    }
out:
    free(dh);
    free(sh);
    tt_search_ctx_free(ctx);
}

int tt_hybrid_search_batch(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                           const uint32_t *qlens, const tt_search_options *dopt,
                           const tt_sparse_set *sq, const uint64_t *sparse_of,
                           const tt_sparse_options *sopt, const tt_fusion_options *fopt,
                           uint64_t nqueries, uint32_t k, int threads, tt_hit *hits,
                           uint32_t *nhits, double *seconds) {
    tt_sparse_options sdef;
    tt_fusion_options fdef;
    if (!sopt) {
        tt_sparse_options_init(&sdef);
        sopt = &sdef;
    }
    if (!fopt) {
        tt_fusion_options_init(&fdef);
        fopt = &fdef;
    }
    if (!idx || !sq || (nqueries && (!hits || !nhits)) || (Q && (!qoffs || !qlens)))
        return tt_err(TT_EINVAL, "tt_hybrid_search_batch: NULL argument");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_hybrid_search_batch: k must be at least 1");
    tt_sparse_options sso;
    tt_search_options dso;
    int st = tt_hybrid_options("tt_hybrid_search_batch", Q != NULL, dopt, sopt, &dso, &sso);
    if (st)
        return st;
    sopt = &sso;
    if (Q)
        dopt = &dso;
    if (!idx->sparse_kind)
        return tt_err(TT_EUNSUPPORTED, "%s: the index has no sparse postings (build or add "
                      "with --bm25 or --sparse)", idx->dir);
    if (!sparse_of && sq->n < nqueries)
        return tt_err(TT_EDIM, "tt_hybrid_search_batch: %llu sparse queries for %llu queries",
                      (unsigned long long)sq->n, (unsigned long long)nqueries);
    if (Q) { /* check the fusion options once */
        uint32_t dummy;
        tt_hit h;
        if ((st = tt_fuse(NULL, 0, NULL, 0, fopt, 1, &h, &dummy)))
            return st;
    }
    sbatch j = {.idx = idx, .Q = Q, .qoffs = qoffs, .qlens = qlens, .dopt = dopt, .sq = sq,
                .sparse_of = sparse_of, .sopt = sopt, .fopt = fopt, .nqueries = nqueries,
                .k = k, .hits = hits, .nhits = nhits, .seconds = seconds};
    atomic_init(&j.next, 0);
    tt_first_err_init(&j.err);
    if (threads <= 0)
        threads = tt_default_threads();
    if ((uint64_t)threads > nqueries)
        threads = nqueries ? (int)nqueries : 1;
    tt_parallel(threads, sb_worker, &j);
    return tt_first_err_end(&j.err);
}

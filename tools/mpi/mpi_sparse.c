/* tartan-mpi search --mode sparse|hybrid: each rank opens the shards s with
 * s % R == rank. A sparse score needs the whole collection's BM25 statistics: each
 * rank computes its shards' part (tt_sharded_sparse_stats: live documents, summed
 * lengths, each query term's document frequency), MPI_Allreduce sums them, and each
 * rank searches its shards with the sums (tt_sharded_sparse_search_stats). Rank 0
 * merges the ranks' lists by (higher exact double score, lower global row): the sparse
 * list of one process over every shard. Hybrid: the dense lists (tt_sharded_search_batch)
 * and the sparse lists go to the fusion depth max(k, --fusion-depth), both are merged,
 * and rank 0 fuses them with tt_fuse, as tt_sharded_hybrid_search_batch does in one
 * process: the run is identical to `tartan search --mode sparse|hybrid`'s.
 *
 * Batches are pipelined as in the dense search (mpi_search.c). A message: i32 status,
 * u32 queries; status 0: per query, per list (hybrid: dense, then sparse; sparse: one),
 * u32 n, then n hits of (f64 score, u64 global row, u16 id length, id bytes); else the
 * error text. */
#include "mpi_search.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { TAG_SPARSE = 2 };

/* A hit of some rank's list, as rank 0 holds it. */
typedef struct shit {
    uint64_t doc;
    double score;
    const char *id; /* into a message, or rank 0's shards */
    uint16_t idlen;
} shit;

static int by_score(const void *x, const void *y) {
    const shit *a = x, *b = y;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    return a->doc < b->doc ? -1 : a->doc > b->doc;
}

static int by_doc(const void *x, const void *y) {
    const shit *a = x, *b = y;
    return a->doc < b->doc ? -1 : a->doc > b->doc;
}

/* One list of a query: n hits (scores exact doubles) with their ids. */
static int pack_list(mpi_buf *b, const tt_sharded *sh, uint32_t n, const tt_hit *hits,
                     const double *scores) {
    if (mpi_put(b, &n, 4))
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *id = tt_sharded_doc_id(sh, hits[i].doc, &len);
        uint16_t l = (uint16_t)(id ? len : 0);
        double s = scores ? scores[i] : (double)hits[i].score;
        if (mpi_put(b, &s, 8) || mpi_put(b, &hits[i].doc, 8) || mpi_put(b, &l, 2) ||
            mpi_put(b, id ? id : "", l))
            return -1;
    }
    return 0;
}

/* A rank's results: per query, the dense list (hybrid) and the sparse list, depth D. */
typedef struct lists {
    tt_hit *dh, *sh; /* m * D */
    double *ss;      /* m * D: the sparse scores, exact */
    uint32_t *dn, *sn;
} lists;

static int pack(mpi_buf *b, const tt_sharded *sh, uint32_t m, uint32_t D, bool hybrid,
                const lists *l) {
    int32_t st = 0;
    b->n = 0;
    if (mpi_put(b, &st, 4) || mpi_put(b, &m, 4))
        return -1;
    for (uint32_t q = 0; q < m; q++)
        if ((hybrid && pack_list(b, sh, l->dn[q], l->dh + (uint64_t)q * D, NULL)) ||
            pack_list(b, sh, l->sn[q], l->sh + (uint64_t)q * D, l->ss + (uint64_t)q * D))
            return -1;
    return 0;
}

/* Appends one list of a message at p to out (*n hits so far); NULL if malformed. */
static const char *unpack_list(const char *p, const char *end, uint32_t D, shit *out,
                               uint32_t *n) {
    uint32_t c;
    if (end - p < 4)
        return NULL;
    memcpy(&c, p, 4);
    p += 4;
    if (c > D)
        return NULL;
    for (uint32_t i = 0; i < c; i++) {
        shit *h = &out[(*n)++];
        if (end - p < 18)
            return NULL;
        memcpy(&h->score, p, 8);
        memcpy(&h->doc, p + 8, 8);
        memcpy(&h->idlen, p + 16, 2);
        p += 18;
        if (end - p < h->idlen)
            return NULL;
        h->id = p;
        p += h->idlen;
    }
    return p;
}

/* Sorts n hits by score and keeps the first D (the merge of the ranks' lists). */
static uint32_t cut(shit *a, uint32_t n, uint32_t D) {
    qsort(a, n, sizeof *a, by_score);
    return n < D ? n : D;
}

/* Searches one batch of m queries from q0 over this rank's shards into l. */
static int search_batch(const mpi_search_args *a, const tt_sharded *sh, const tt_queries *qs,
                        const tt_sparse_set *sq, const uint64_t *sparse_of, uint64_t q0,
                        uint64_t m, uint32_t D, const uint64_t *stats, uint64_t *rows,
                        lists *l) {
    const bool hybrid = a->retriever == MPI_HYBRID;
    if (!tt_sharded_num_open(sh)) {
        memset(l->sn, 0, m * sizeof *l->sn);
        memset(l->dn, 0, m * sizeof *l->dn);
        return TT_OK;
    }
    for (uint64_t i = 0; i < m; i++)
        rows[i] = hybrid ? sparse_of[q0 + i] : q0 + i;
    int st = tt_sharded_sparse_search_stats(sh, sq, rows, m, D, &a->spo, stats[0], stats[1],
                                            stats + 2, a->threads, l->sh, l->ss, l->sn);
    if (!st && hybrid)
        st = tt_sharded_search_batch(sh, qs->vectors, qs->offsets + q0, qs->lens + q0, m, D,
                                     &a->so, a->threads, l->dh, l->dn, NULL);
    return st;
}

static void lists_free(lists *l) {
    free(l->dh);
    free(l->sh);
    free(l->ss);
    free(l->dn);
    free(l->sn);
}

int mpi_search_sparse(mpi_search_args *a) {
    const bool hybrid = a->retriever == MPI_HYBRID;
    const uint32_t k = (uint32_t)a->k;
    const uint32_t D = hybrid && a->fo.depth > k ? a->fo.depth : k; /* each list's depth */
    tt_sharded *sh = NULL;
    tt_queries *qs = NULL;
    tt_sparse_set *sq = NULL;
    uint64_t *sparse_of = NULL, *stats = NULL, E = 0, missing = 0;
    char err[1024] = "";
    int st = tt_sharded_open(&sh, a->index, &a->oo, (uint32_t)mpi_rank, (uint32_t)mpi_size);
    const uint32_t nopen = st ? 0 : tt_sharded_num_open(sh);
    const tt_index *idx = nopen ? tt_sharded_shard(sh, 0, NULL, NULL) : NULL;
    for (uint32_t i = 0; i < nopen && !st; i++)
        if (!tt_index_sparse_kind(tt_sharded_shard(sh, i, NULL, NULL))) {
            snprintf(err, sizeof err, "%s has no sparse postings (build or add with --bm25 or "
                     "--sparse)", a->index);
            st = TT_EUNSUPPORTED;
        }
    /* Every rank reads the dense queries of a hybrid search (it searches them on its
     * shards); the sparse queries, ranks that opened a shard (their terms map through
     * its vocabulary; rank 0 always has shard 0). */
    if (!st && hybrid && (st = tt_queries_load(&qs, a->queries, a->qlens, a->qids)) == TT_OK &&
        idx)
        st = tt_queries_check(qs, idx);
    if (!st && idx)
        st = a->sparse_queries ? tt_sparse_set_load_jsonl_index(&sq, a->sparse_queries, a->vocab,
                                                                idx)
                               : tt_sparse_set_load_text_index(&sq, a->query_text, 1, idx);
    if (!st && idx) {
        E = tt_sparse_set_num_entries(sq);
        if (!(stats = calloc(E + 2, sizeof *stats))) {
            snprintf(err, sizeof err, "out of memory for the sparse statistics");
            st = TT_ENOMEM;
        } else
            st = tt_sharded_sparse_stats(sh, sq, &stats[0], &stats[1], stats + 2);
    }
    if (!st && idx && hybrid) { /* the sparse query of each dense query, by id */
        if (!(sparse_of = malloc((qs->num_queries ? qs->num_queries : 1) * sizeof *sparse_of))) {
            snprintf(err, sizeof err, "out of memory");
            st = TT_ENOMEM;
        }
        for (uint64_t q = 0; !st && q < qs->num_queries; q++) {
            int64_t r = tt_sparse_set_find(sq, qs->ids[q]);
            sparse_of[q] = r < 0 ? UINT64_MAX : (uint64_t)r;
            missing += r < 0;
        }
    }
    if (st && !*err)
        snprintf(err, sizeof err, "%s", tt_last_error());
    /* Filters: each rank over its own shards, at the global rows (as the dense search). */
    cli_smeta *md = NULL;
    tt_filter *filter = NULL;
    size_t nids = 0;
    uint64_t found = 0;
    if (!st && (a->where || a->filter_ids)) /* err stays empty on failure: already said */
        st = mpi_open_filter(a, sh, &md, &filter, &nids, &found);
    /* Every rank agrees on a failure anywhere before any collective that needs data. */
    int failed = st != 0, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    /* The shape of the sparse queries (records, entries) and the shards' kind of
     * postings: the same on every rank that opened a shard (max and min, as max of x and
     * of ~x; ranks without a shard give 0). One process refuses shards of two kinds
     * (tt_sharded_sparse_stats); so do the ranks together. */
    uint64_t shape[6] = {0, 0, 0, 0, 0, 0}, agreed[6] = {0, 0, 0, 0, 0, 0};
    lists l = {0}; /* the batches' buffers (below) */
    uint64_t *rows = NULL;
    mpi_buf out[2] = {{0}, {0}};
    int rc = CLI_FAIL;
    if (!any && idx) {
        shape[0] = tt_sparse_set_size(sq);
        shape[1] = E;
        shape[2] = (uint64_t)tt_index_sparse_kind(idx);
        for (int i = 0; i < 3; i++)
            shape[3 + i] = ~shape[i];
    }
    if (!any)
        MPI_Allreduce(shape, agreed, 6, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    const bool mismatch = !any && (~agreed[3] != agreed[0] || ~agreed[4] != agreed[1] ||
                                   ~agreed[5] != agreed[2] ||
                                   agreed[1] > (uint64_t)INT32_MAX - 2);
    if (any || mismatch) {
        if (any)
            mpi_say_errors(failed, err);
        if (mpi_rank == 0 && mismatch)
            fprintf(stderr, "tartan-mpi search: error: %s: the ranks' shards have sparse "
                    "postings of different kinds, or the ranks read different sparse queries "
                    "(%llu or %llu records; a file changed?), or the queries have too many "
                    "terms\n", a->index, (unsigned long long)agreed[0],
                    (unsigned long long)~agreed[3]);
        if (mpi_rank == 0)
            fprintf(stderr, "tartan-mpi search: no run written\n");
        goto done;
    }
    E = agreed[1];
    /* The whole collection's statistics: every rank's part summed. */
    if (!stats && !(stats = calloc(E + 2, sizeof *stats))) {
        fprintf(stderr, "tartan-mpi search: rank %d: out of memory\n", mpi_rank);
        mpi_fail_all(CLI_FAIL);
    }
    MPI_Allreduce(MPI_IN_PLACE, stats, (int)(E + 2), MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (a->where || a->filter_ids)
        mpi_filter_totals(a, filter, nids, found);
    if (mpi_rank == 0 && missing)
        fprintf(stderr, "tartan-mpi search: warning: %llu of %llu queries have no sparse query "
                "(dense results only)\n", (unsigned long long)missing,
                (unsigned long long)qs->num_queries);
    const uint64_t nq = hybrid ? qs->num_queries : agreed[0];
    const uint64_t B = a->batch, nbatch = (nq + B - 1) / B;
    l = (lists){.dh = hybrid ? malloc(B * D * sizeof *l.dh) : NULL,
                .sh = malloc(B * D * sizeof *l.sh),
                .ss = malloc(B * D * sizeof *l.ss),
                .dn = calloc(B, sizeof *l.dn),
                .sn = calloc(B, sizeof *l.sn)};
    rows = malloc(B * sizeof *rows);
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if ((hybrid && !l.dh) || !l.sh || !l.ss || !l.dn || !l.sn || !rows) {
        fprintf(stderr, "tartan-mpi search: rank %d: out of memory\n", mpi_rank);
        mpi_fail_all(CLI_FAIL);
    }
    rc = CLI_OK;

    if (mpi_rank != 0) {
        for (uint64_t b = 0; b < nbatch; b++) {
            uint64_t q0 = b * B, m = nq - q0 < B ? nq - q0 : B;
            mpi_buf *o = &out[b % 2];
            MPI_Wait(&req[b % 2], MPI_STATUS_IGNORE); /* the buffer's previous send */
            int f = mpi_fault("search", b);
            st = f ? TT_EIO : search_batch(a, sh, qs, sq, sparse_of, q0, m, D, stats, rows, &l);
            mpi_reply(o, st, f, (uint32_t)m, st ? 0 : pack(o, sh, (uint32_t)m, D, hybrid, &l),
                      TAG_SPARSE, &req[b % 2]);
            if (st)
                break; /* rank 0 reports it and ends the job */
        }
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD); /* rank 0 has every result */
        rc = st ? CLI_FAIL : CLI_OK;
        goto done;
    }

    /* Rank 0: its own lists, then every other rank's, merged per query. */
    const int R = mpi_size;
    char **msgs = calloc((size_t)R, sizeof *msgs);
    const char **cur = calloc((size_t)R, sizeof *cur), **ends = calloc((size_t)R, sizeof *ends);
    shit *dm = malloc((size_t)R * D * sizeof *dm), *sm = malloc((size_t)R * D * sizeof *sm);
    shit *byid = malloc(2 * (size_t)D * sizeof *byid);
    tt_hit *dh = malloc(D * sizeof *dh), *sp = malloc(D * sizeof *sp), *fused = malloc(k * sizeof *fused);
    mpi_buf lines = {0};
    if (!msgs || !cur || !ends || !dm || !sm || !byid || !dh || !sp || !fused) {
        fprintf(stderr, "tartan-mpi search: rank 0: out of memory\n");
        mpi_fail_all(CLI_FAIL);
    }
    double t0 = mpi_now(), t_search = 0, t_wait = 0, t_merge = 0;
    for (uint64_t b = 0; b < nbatch; b++) {
        uint64_t q0 = b * B, m = nq - q0 < B ? nq - q0 : B;
        double ta = mpi_now();
        int f = mpi_fault("search", b);
        st = f ? TT_EIO : search_batch(a, sh, qs, sq, sparse_of, q0, m, D, stats, rows, &l);
        if (st) {
            fprintf(stderr, "tartan-mpi search: rank 0: error: in the queries from number %llu "
                    "(id %s) on: %s; no run written\n", (unsigned long long)q0,
                    hybrid ? qs->ids[q0] : tt_sparse_set_id(sq, q0),
                    f ? "injected failure (TARTAN_MPI_FAULT)" : tt_last_error());
            mpi_fail_all(CLI_FAIL);
        }
        double tb = mpi_now();
        t_search += tb - ta;
        for (int r = 1; r < R; r++) {
            int len;
            double tw = mpi_now();
            /* The message stays until the batch is written: the ids point into it. */
            msgs[r] = mpi_recv(r, TAG_SPARSE, &len);
            t_wait += mpi_now() - tw;
            int32_t rs = 1;
            uint32_t mm = 0;
            if (len >= 8) {
                memcpy(&rs, msgs[r], 4);
                memcpy(&mm, msgs[r] + 4, 4);
            }
            if (len < 8 || rs || mm != m) {
                const char *msg = len >= 8 && rs && memchr(msgs[r] + 8, 0, (size_t)len - 7)
                                      ? msgs[r] + 8 : "malformed results message";
                fprintf(stderr, "tartan-mpi search: rank %d: error: %s; no run written\n", r, msg);
                mpi_fail_all(CLI_FAIL);
            }
            cur[r] = msgs[r] + 8;
            ends[r] = msgs[r] + len;
        }
        double tm = mpi_now();
        for (uint64_t q = 0; q < m; q++) {
            uint32_t nd = 0, ns = 0;
            for (uint32_t i = 0; hybrid && i < l.dn[q]; i++) {
                const tt_hit *h = &l.dh[q * D + i];
                size_t len = 0;
                const char *id = tt_sharded_doc_id(sh, h->doc, &len);
                dm[nd++] = (shit){h->doc, (double)h->score, id, (uint16_t)(id ? len : 0)};
            }
            for (uint32_t i = 0; i < l.sn[q]; i++) {
                const tt_hit *h = &l.sh[q * D + i];
                size_t len = 0;
                const char *id = tt_sharded_doc_id(sh, h->doc, &len);
                sm[ns++] = (shit){h->doc, l.ss[q * D + i], id, (uint16_t)(id ? len : 0)};
            }
            for (int r = 1; r < R; r++)
                if ((hybrid && !(cur[r] = unpack_list(cur[r], ends[r], D, dm, &nd))) ||
                    !(cur[r] = unpack_list(cur[r], ends[r], D, sm, &ns))) {
                    fprintf(stderr, "tartan-mpi search: rank %d: error: malformed results "
                            "message; no run written\n", r);
                    mpi_fail_all(CLI_FAIL);
                }
            nd = cut(dm, nd, D);
            ns = cut(sm, ns, D);
            const shit *res = sm; /* sparse: the merged list, cut to k */
            uint32_t n = ns < k ? ns : k;
            if (hybrid) {
                /* The fusion's input: the lists of one process (float scores; the sparse
                 * ones rounded as tt_sharded_hybrid_search_batch rounds them). */
                for (uint32_t i = 0; i < nd; i++)
                    dh[i] = (tt_hit){dm[i].doc, (float)dm[i].score};
                for (uint32_t i = 0; i < ns; i++)
                    sp[i] = (tt_hit){sm[i].doc, (float)sm[i].score};
                if ((st = tt_fuse(dh, nd, sp, ns, &a->fo, k, fused, &n))) {
                    fprintf(stderr, "tartan-mpi search: rank 0: error: query %s: %s; no run "
                            "written\n", qs->ids[q0 + q], tt_last_error());
                    mpi_fail_all(CLI_FAIL);
                }
                /* the fused hits' ids: from either list, looked up by row */
                memcpy(byid, dm, nd * sizeof *dm);
                memcpy(byid + nd, sm, ns * sizeof *sm);
                qsort(byid, nd + ns, sizeof *byid, by_doc);
                for (uint32_t i = 0; i < n; i++) {
                    shit key = {.doc = fused[i].doc};
                    const shit *h = bsearch(&key, byid, nd + ns, sizeof *byid, by_doc);
                    dm[i] = (shit){fused[i].doc, (double)fused[i].score, h ? h->id : NULL,
                                   h ? h->idlen : 0};
                }
                res = dm; /* the dense list is no longer needed */
            }
            const char *qid = hybrid ? qs->ids[q0 + q] : tt_sparse_set_id(sq, q0 + q);
            for (uint32_t i = 0; i < n; i++)
                mpi_put_run_line(&lines, qid, res[i].id, res[i].idlen, i + 1,
                                 (float)res[i].score, a->tag);
        }
        for (int r = 1; r < R; r++) {
            free(msgs[r]);
            msgs[r] = NULL;
        }
        t_merge += mpi_now() - tm;
    }
    double wall = mpi_now() - t0;
    rc = mpi_write_run(a->out, &lines) ? CLI_FAIL : CLI_OK;
    if (rc == CLI_OK)
        fprintf(stderr, "tartan-mpi search: %llu %s queries on %u shards, %d ranks, batches of "
                "%llu: %.3f s, %.1f QPS; rank 0: own search %.3f s, waiting %.3f s, merge%s "
                "%.1f us per query\n", (unsigned long long)nq, hybrid ? "hybrid" : "sparse",
                tt_sharded_num_shards(sh), R, (unsigned long long)B, wall,
                wall > 0 ? (double)nq / wall : 0.0, t_search, t_wait,
                hybrid ? " and fusion" : "", nq ? 1e6 * t_merge / (double)nq : 0.0);
    MPI_Barrier(MPI_COMM_WORLD);
    free(msgs);
    free(cur);
    free(ends);
    free(dm);
    free(sm);
    free(byid);
    free(dh);
    free(sp);
    free(fused);
    free(lines.p);
done:
    lists_free(&l);
    free(rows);
    free(out[0].p);
    free(out[1].p);
    tt_filter_free(filter);
    cli_smeta_close(md);
    tt_queries_free(qs);
    tt_sparse_set_free(sq);
    free(sparse_of);
    free(stats);
    tt_sharded_close(sh);
    return rc;
}

/* Sharded indexes opened for search: open (all shards, or those of one rank of a
 * group), search (each open shard searched, the lists merged by the one total order of
 * tt_search: higher score, then lower global row), ids by global row. */
#include "shard/shard.h"
#include "io/dir.h"
#include "meta/meta.h"

#include <stdio.h>
#include <stdlib.h>

int tt_index_is_sharded(const char *dir) {
    return dir && tt_is_sharded_dir(dir) ? 1 : 0;
}

void tt_sharded_close(tt_sharded *sh) {
    if (!sh)
        return;
    for (uint32_t i = 0; i < sh->nopen; i++)
        tt_index_close(sh->idx[i]);
    free(sh->idx);
    free(sh->open_id);
    free(sh->first_row);
    free(sh->dir);
    free(sh);
}

/* A shard opened alone must be the one SHARDS describes: its documents (the row space
 * depends on them) and the shared codebook. */
static int check_shard(const tt_index *idx, const tt_shard_entry *e, const char *top) {
    const tt_manifest_entry *c = NULL, *k = NULL;
    for (uint32_t i = 0; i < idx->man.n; i++) {
        if (!memcmp(idx->man.e[i].kind, "CENT", 4))
            c = &idx->man.e[i];
        if (!memcmp(idx->man.e[i].kind, "CODC", 4))
            k = &idx->man.e[i];
    }
    if (idx->num_docs != e->num_docs || idx->num_vectors != e->num_vectors)
        return tt_err(TT_ECORRUPT, "%s: holds %llu documents and %llu vectors, %s/%s says "
                      "%llu and %llu (the shard was changed on its own after the sharded "
                      "build)", idx->dir, (unsigned long long)idx->num_docs,
                      (unsigned long long)idx->num_vectors, top, TT_F_SHARDS,
                      (unsigned long long)e->num_docs, (unsigned long long)e->num_vectors);
    if (!c || !k || c->payload_hash != e->centroids_hash || k->payload_hash != e->codec_hash)
        return tt_err(TT_ECORRUPT, "%s: its centroids or codec are not the codebook %s/%s "
                      "names (shards must share one codebook)", idx->dir, top, TT_F_SHARDS);
    return TT_OK;
}

int tt_sharded_open(tt_sharded **out, const char *dir, const tt_open_options *opt,
                    uint32_t rank, uint32_t nranks) {
    tt_err_clear();
    if (!out || !dir || nranks == 0 || rank >= nranks)
        return tt_err(TT_EINVAL, "tt_sharded_open: NULL argument or rank out of range");
    *out = NULL;
    tt_sharded *sh = calloc(1, sizeof *sh);
    if (!sh || !(sh->dir = strdup(dir))) {
        free(sh);
        return tt_err(TT_ENOMEM, "%s: out of memory", dir);
    }
    tt_shards_file f = {0};
    int st;
    bool sharded = tt_is_sharded_dir(dir);
    if (sharded) {
        if ((st = tt_shards_read(dir, &f)))
            goto fail;
        sh->num_shards = f.n;
    } else {
        sh->num_shards = 1; /* a plain index: one shard, the directory itself */
    }
    sh->first_row = tt_calloc(sh->num_shards + 1, sizeof *sh->first_row, "shards");
    sh->open_id = tt_calloc(sh->num_shards, sizeof *sh->open_id, "shards");
    sh->idx = tt_calloc(sh->num_shards, sizeof *sh->idx, "shards");
    if (!sh->first_row || !sh->open_id || !sh->idx) {
        st = TT_ENOMEM;
        goto fail;
    }
    for (uint32_t s = 0; s < sh->num_shards; s++) {
        sh->first_row[s + 1] = sh->first_row[s] + (sharded ? f.e[s].num_docs : 0);
        if (s % nranks != rank)
            continue;
        tt_index *idx = NULL;
        if (sharded) {
            char *p = tt_path_join(dir, f.e[s].name);
            if (!p) {
                st = tt_err(TT_ENOMEM, "%s: out of memory", dir);
                goto fail;
            }
            st = tt_index_open(&idx, p, opt);
            free(p);
            if (!st && (st = check_shard(idx, &f.e[s], dir)))
                tt_index_close(idx);
        } else {
            st = tt_index_open(&idx, dir, opt);
        }
        if (st)
            goto fail;
        if (sh->nopen && (idx->dim != sh->idx[0]->dim)) {
            tt_index_close(idx);
            st = tt_err(TT_ECORRUPT, "%s: shards of different dimensions", dir);
            goto fail;
        }
        sh->open_id[sh->nopen] = s;
        sh->idx[sh->nopen++] = idx;
    }
    if (sharded) {
        sh->num_docs = f.num_docs;
        sh->num_vectors = f.num_vectors;
    } else if (sh->nopen) {
        sh->num_docs = sh->first_row[1] = sh->idx[0]->num_docs;
        sh->num_vectors = sh->idx[0]->num_vectors;
    }
    tt_shards_file_free(&f);
    *out = sh;
    return TT_OK;
fail:
    tt_shards_file_free(&f);
    tt_sharded_close(sh);
    return st;
}

uint32_t tt_sharded_num_shards(const tt_sharded *sh) {
    return sh ? sh->num_shards : 0;
}

uint32_t tt_sharded_num_open(const tt_sharded *sh) {
    return sh ? sh->nopen : 0;
}

uint64_t tt_sharded_num_docs(const tt_sharded *sh) {
    return sh ? sh->num_docs : 0;
}

const tt_index *tt_sharded_shard(const tt_sharded *sh, uint32_t i, uint32_t *shard,
                                 uint64_t *first_row) {
    if (!sh || i >= sh->nopen) {
        tt_err(TT_EINVAL, "tt_sharded_shard: %u is not an open shard", i);
        return NULL;
    }
    if (shard)
        *shard = sh->open_id[i];
    if (first_row)
        *first_row = sh->first_row[sh->open_id[i]];
    return sh->idx[i];
}

const char *tt_sharded_doc_id(const tt_sharded *sh, uint64_t row, size_t *len) {
    if (!sh || row >= sh->num_docs) {
        tt_err(TT_EINVAL, "row %llu is not in the index", (unsigned long long)row);
        return NULL;
    }
    /* The shard holding row: the last first_row <= row among the open ones. */
    uint32_t lo = 0, hi = sh->nopen;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (sh->first_row[sh->open_id[mid]] <= row)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || row >= sh->first_row[sh->open_id[lo - 1] + 1]) {
        tt_err(TT_EINVAL, "row %llu is in a shard this process did not open",
               (unsigned long long)row);
        return NULL;
    }
    uint32_t i = lo - 1;
    return tt_index_doc_id(sh->idx[i], row - sh->first_row[sh->open_id[i]], len);
}

static inline bool better(const tt_hit *a, const tt_hit *b) {
    return a->score > b->score || (a->score == b->score && a->doc < b->doc);
}

uint32_t tt_hits_merge(const tt_hit *const *lists, const uint32_t *counts, uint32_t nlists,
                       uint32_t k, tt_hit *out) {
    /* nlists is small (shards of a process, ranks): a linear scan of the heads. */
    uint32_t pos[64], *p = nlists <= 64 ? pos : calloc(nlists, sizeof *p);
    if (!p)
        return UINT32_MAX;
    memset(p, 0, (nlists <= 64 ? 64 : nlists) * sizeof *p);
    uint32_t n = 0;
    while (n < k) {
        int32_t best = -1;
        for (uint32_t l = 0; l < nlists; l++)
            if (p[l] < counts[l] && (best < 0 || better(&lists[l][p[l]], &lists[best][p[best]])))
                best = (int32_t)l;
        if (best < 0)
            break;
        out[n++] = lists[best][p[best]++];
    }
    if (p != pos)
        free(p);
    return n;
}

/* Queries [0, nq) of a chunk: each shard searched, rows made global, lists merged. The
 * work space holds S * cap lists of k hits. */
typedef struct chunk_space {
    tt_hit *part;
    uint32_t *pn;
    double *ps;
    const tt_hit **lists;
    uint32_t *counts;
    tt_filter **filters; /* per open shard, from opt->filter over global rows (or NULL) */
} chunk_space;

static int search_chunk(const tt_sharded *sh, const float *Q, const uint64_t *qoffs,
                        const uint32_t *qlens, uint64_t nq, uint32_t k,
                        const tt_search_options *opt, int threads, tt_hit *hits,
                        uint32_t *nhits, double *seconds, chunk_space *w) {
    const uint32_t S = sh->nopen;
    int st = TT_OK;
    if (seconds)
        memset(seconds, 0, nq * sizeof *seconds);
    for (uint32_t s = 0; s < S; s++) {
        tt_search_options so;
        if (opt) {
            so = *opt;
            so.filter = w->filters ? w->filters[s] : NULL;
        }
        st = tt_search_batch(sh->idx[s], Q, qoffs, qlens, nq, k, opt ? &so : NULL, threads,
                             w->part + (uint64_t)s * nq * k, w->pn + (uint64_t)s * nq,
                             seconds ? w->ps : NULL);
        if (st)
            return tt_err_prefix(st, "%s", sh->idx[s]->dir);
        const uint64_t base = sh->first_row[sh->open_id[s]];
        for (uint64_t q = 0; q < nq; q++) {
            tt_hit *h = w->part + ((uint64_t)s * nq + q) * k;
            for (uint32_t r = 0; r < w->pn[(uint64_t)s * nq + q]; r++)
                h[r].doc += base;
            if (seconds)
                seconds[q] += w->ps[q];
        }
    }
    for (uint64_t q = 0; q < nq; q++) {
        for (uint32_t s = 0; s < S; s++) {
            w->lists[s] = w->part + ((uint64_t)s * nq + q) * k;
            w->counts[s] = w->pn[(uint64_t)s * nq + q];
        }
        nhits[q] = tt_hits_merge(w->lists, w->counts, S, k, hits + q * k);
        if (nhits[q] == UINT32_MAX)
            return tt_err(TT_ENOMEM, "merging results: out of memory");
    }
    return TT_OK;
}

int tt_sharded_check_filter(const char *who, const tt_sharded *sh, const tt_filter *gf) {
    if (gf && gf->num_rows != sh->num_docs)
        return tt_err(TT_EINVAL, "%s: the filter is over %llu rows, the index %s has %llu", who,
                      (unsigned long long)gf->num_rows, sh->dir,
                      (unsigned long long)sh->num_docs);
    return TT_OK;
}

int tt_sharded_split_filter(const tt_sharded *sh, const tt_filter *gf, tt_filter ***out) {
    *out = NULL;
    if (!gf)
        return TT_OK;
    tt_filter **f = tt_calloc(sh->nopen ? sh->nopen : 1, sizeof *f, "shard filters");
    if (!f)
        return TT_ENOMEM;
    int st = TT_OK;
    for (uint32_t s = 0; s < sh->nopen && !st; s++) {
        const uint64_t base = sh->first_row[sh->open_id[s]], n = sh->idx[s]->num_docs;
        if ((st = tt_filter_new(&f[s], n)))
            break;
        for (uint64_t r = 0; r < n; r++)
            if (tt_filter_bit(gf, base + r))
                f[s]->bits[r >> 6] |= (uint64_t)1 << (r & 63);
    }
    if (st)
        tt_sharded_filters_free(sh, f);
    else
        *out = f;
    return st;
}

void tt_sharded_filters_free(const tt_sharded *sh, tt_filter **f) {
    for (uint32_t s = 0; f && s < sh->nopen; s++)
        tt_filter_free(f[s]);
    free(f);
}

int tt_sharded_search_batch(const tt_sharded *sh, const float *Q, const uint64_t *qoffs,
                            const uint32_t *qlens, uint64_t nq, uint32_t k,
                            const tt_search_options *opt, int threads, tt_hit *hits,
                            uint32_t *nhits, double *seconds) {
    if (!sh || !hits || !nhits || k == 0)
        return tt_err(TT_EINVAL, "tt_sharded_search_batch: NULL argument or k = 0");
    const tt_filter *gf = opt ? opt->filter : NULL;
    int st = tt_sharded_check_filter("tt_sharded_search_batch", sh, gf);
    if (st)
        return st;
    if (sh->nopen == 1 && sh->first_row[sh->open_id[0]] == 0 &&
        (!gf || sh->idx[0]->num_docs == gf->num_rows))
        return tt_search_batch(sh->idx[0], Q, qoffs, qlens, nq, k, opt, threads, hits, nhits,
                               seconds);
    if (sh->nopen == 0)
        return tt_err(TT_EINVAL, "%s: this process opened none of the shards", sh->dir);
    const uint32_t S = sh->nopen;
    /* Queries in chunks whose per-shard lists take at most 4M hits (64 MiB). */
    uint64_t cap = ((uint64_t)1 << 22) / ((uint64_t)S * k);
    cap = TT_MIN(TT_MAX(cap, (uint64_t)64), nq ? nq : 1);
    chunk_space w = {0};
    w.part = tt_alloc((uint64_t)S * cap, (uint64_t)k * sizeof *w.part, "per-shard results");
    w.pn = tt_alloc((uint64_t)S * cap, sizeof *w.pn, "per-shard results");
    w.ps = seconds ? tt_alloc(cap, sizeof *w.ps, "latencies") : NULL;
    w.lists = tt_alloc(S, sizeof *w.lists, "per-shard results");
    w.counts = tt_alloc(S, sizeof *w.counts, "per-shard results");
    st = TT_OK;
    if (!w.part || !w.pn || (seconds && !w.ps) || !w.lists || !w.counts)
        st = TT_ENOMEM;
    /* A filter over the global rows: each shard gets its own rows' part. */
    if (!st)
        st = tt_sharded_split_filter(sh, gf, &w.filters);
    for (uint64_t q0 = 0; q0 < nq && !st; q0 += cap) {
        uint64_t m = TT_MIN(cap, nq - q0);
        st = search_chunk(sh, Q, qoffs + q0, qlens + q0, m, k, opt, threads, hits + q0 * k,
                          nhits + q0, seconds ? seconds + q0 : NULL, &w);
    }
    free(w.part);
    free(w.pn);
    free(w.ps);
    free(w.lists);
    free(w.counts);
    tt_sharded_filters_free(sh, w.filters);
    return st;
}

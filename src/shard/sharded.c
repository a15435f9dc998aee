/* Sharded indexes opened for search: open (all shards, or those of one rank of a
 * group), search (each open shard searched, the lists merged by the one total order of
 * tt_search: higher score, then lower global row), ids by global row. */
#include "shard/shard.h"
#include "io/dir.h"

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

int tt_sharded_search_batch(const tt_sharded *sh, const float *Q, const uint64_t *qoffs,
                            const uint32_t *qlens, uint64_t nq, uint32_t k,
                            const tt_search_options *opt, int threads, tt_hit *hits,
                            uint32_t *nhits, double *seconds) {
    if (!sh || !hits || !nhits || k == 0)
        return tt_err(TT_EINVAL, "tt_sharded_search_batch: NULL argument or k = 0");
    if (sh->nopen == 1 && sh->first_row[sh->open_id[0]] == 0)
        return tt_search_batch(sh->idx[0], Q, qoffs, qlens, nq, k, opt, threads, hits, nhits,
                               seconds);
    const uint32_t S = sh->nopen;
    tt_hit *part = tt_alloc((uint64_t)S * (nq ? nq : 1), (uint64_t)k * sizeof *part,
                            "per-shard results");
    uint32_t *pn = tt_alloc((uint64_t)S * (nq ? nq : 1), sizeof *pn, "per-shard results");
    double *ps = seconds ? tt_alloc(nq ? nq : 1, sizeof *ps, "latencies") : NULL;
    const tt_hit **lists = tt_alloc(S, sizeof *lists, "per-shard results");
    uint32_t *counts = tt_alloc(S, sizeof *counts, "per-shard results");
    int st = TT_OK;
    if (!part || !pn || (seconds && !ps) || !lists || !counts) {
        st = TT_ENOMEM;
        goto done;
    }
    if (seconds)
        memset(seconds, 0, nq * sizeof *seconds);
    for (uint32_t s = 0; s < S && !st; s++) {
        st = tt_search_batch(sh->idx[s], Q, qoffs, qlens, nq, k, opt, threads,
                             part + (uint64_t)s * nq * k, pn + (uint64_t)s * nq, ps);
        if (st) {
            st = tt_err_prefix(st, "%s", sh->idx[s]->dir);
            break;
        }
        const uint64_t base = sh->first_row[sh->open_id[s]];
        for (uint64_t q = 0; q < nq; q++) {
            tt_hit *h = part + ((uint64_t)s * nq + q) * k;
            for (uint32_t r = 0; r < pn[(uint64_t)s * nq + q]; r++)
                h[r].doc += base;
            if (seconds)
                seconds[q] += ps[q];
        }
    }
    for (uint64_t q = 0; q < nq && !st; q++) {
        for (uint32_t s = 0; s < S; s++) {
            lists[s] = part + ((uint64_t)s * nq + q) * k;
            counts[s] = pn[(uint64_t)s * nq + q];
        }
        nhits[q] = tt_hits_merge(lists, counts, S, k, hits + q * k);
        if (nhits[q] == UINT32_MAX)
            st = tt_err(TT_ENOMEM, "merging results: out of memory");
    }
done:
    free(part);
    free(pn);
    free(ps);
    free(lists);
    free(counts);
    return st;
}

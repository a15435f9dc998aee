/* tt_index_add: new documents as a new segment of an existing index, encoded with its
 * codebook (no training); an upsert deletes the documents it replaces in the same
 * generation. The residual error of every added vector is measured on the way: the
 * drift tartan info reports against the build's own held-out figure. */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

/* Ids for documents added without any: decimal numbers from the index's next free one,
 * skipping every id some row has or had (a deleted one's too, so that old runs never
 * meet a new document under an old id). */
static int auto_ids(tt_store *s, uint64_t D, char **blob_out, uint64_t **off_out,
                    uint64_t *next_out) {
    uint64_t next = s->man.next_auto_id, pos = 0, cap = D * 8 + 16;
    char *blob = tt_alloc(cap, 1, "ids");
    uint64_t *off = tt_alloc(D + 1, sizeof *off, "ids");
    int st = TT_OK;
    if (!blob || !off) {
        st = TT_ENOMEM;
        goto fail;
    }
    for (uint64_t d = 0; d < D; d++) {
        char num[24];
        int n;
        for (;;) {
            n = snprintf(num, sizeof num, "%llu", (unsigned long long)next++);
            uint32_t sg;
            uint64_t row;
            bool ever;
            st = tt_store_find(s, num, (size_t)n, &sg, &row, &ever);
            if (st != TT_OK && st != TT_ENOTFOUND)
                goto fail;
            st = TT_OK;
            if (!ever)
                break;
        }
        if (pos + (uint64_t)n + 1 > cap) {
            size_t c = (size_t)cap;
            if ((st = tt_grow((void **)&blob, &c, (size_t)(pos + (uint64_t)n + 1), 1, "ids")))
                goto fail;
            cap = c;
        }
        off[d] = pos;
        memcpy(blob + pos, num, (size_t)n + 1);
        pos += (uint64_t)n + 1;
    }
    off[D] = pos;
    *blob_out = blob;
    *off_out = off;
    *next_out = next;
    return TT_OK;
fail:
    free(blob);
    free(off);
    return st;
}

int tt_index_add(const char *dir, tt_input *in, const tt_change_options *opt,
                 tt_change_stats *stats) {
    tt_store s;
    builder b;
    tt_index *cb = NULL;
    tt_manifest next;
    uint64_t *pairs = NULL, npairs = 0, next_auto;
    char *auto_blob = NULL;
    uint64_t *auto_off = NULL;
    tt_pooled *pool = NULL;
    tt_mdb mdb;
    bool mdb_open = false;
    int st;
    memset(&b, 0, sizeof b);
    memset(&next, 0, sizeof next);
    tt_err_clear();
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!in)
        return tt_err(TT_EINVAL, "tt_index_add: no input");
    if ((st = tt_store_open(&s, dir, opt)))
        goto done;
    if ((st = tt_index_open_codebook(&cb, dir, &s.man)))
        goto done;
    if (cb->dim != in->dim) {
        st = tt_err(TT_EDIM, "the index %s has dimension %u, the vectors to add %u", dir,
                    cb->dim, in->dim);
        goto done;
    }
    /* Sparse postings: an index has them in every segment or in none. */
    bool has_sparse = false;
    for (uint32_t i = 0; i < s.man.n && !has_sparse; i++)
        if (!memcmp(s.man.e[i].kind, "SPRS", 4)) {
            has_sparse = true;
            tt_fmap f = {.fd = -1};
            if ((st = tt_fmap_open(&f, dir, s.man.e[i].name, "SPRS", TT_MAP_NONE)))
                goto done;
            uint64_t kind = f.h.c;
            tt_fmap_close(&f);
            if (s.o.sparse && kind != (uint64_t)s.o.sparse->kind) {
                st = tt_err(TT_EINVAL, "the index %s has %s sparse postings, the documents to "
                            "add %s", dir, kind == TT_SPARSE_KIND_BM25 ? "BM25"
                                           : kind == TT_SPARSE_KIND_IDS ? "term-id weighted"
                                                                        : "weighted",
                            s.o.sparse->kind == TT_SPARSE_KIND_BM25 ? "BM25 counts"
                            : s.o.sparse->kind == TT_SPARSE_KIND_IDS ? "weights by term id"
                                                                      : "weights");
                goto done;
            }
        }
    if (has_sparse && !s.o.sparse) {
        st = tt_err(TT_EINVAL, "the index %s has sparse postings: the documents to add need "
                    "theirs too (--bm25 or --sparse)", dir);
        goto done;
    }
    if (!has_sparse && s.o.sparse) {
        st = tt_err(TT_EINVAL, "the index %s has no sparse postings; sparse vectors can only "
                    "be added to an index built with them", dir);
        goto done;
    }
    if (s.o.sparse && (st = tt_build_check_sparse(s.o.sparse, in, true)))
        goto done;
    if (s.o.sparse && s.o.sparse->kind == TT_SPARSE_KIND_IDS &&
        (st = tt_store_check_vocab(&s, s.o.sparse)))
        goto done;
    /* Ids: the input's, each new to the index unless it replaces (upsert); or made. */
    next_auto = s.man.next_auto_id;
    if (in->ids_blob) {
        if (!(pairs = tt_alloc(2 * in->num_docs, sizeof *pairs, "replaced documents"))) {
            st = TT_ENOMEM;
            goto done;
        }
        for (uint64_t d = 0; d < in->num_docs; d++) {
            const char *id = in->ids_blob + in->id_off[d];
            size_t len = (size_t)(in->id_off[d + 1] - in->id_off[d] - 1);
            uint32_t sg;
            uint64_t row;
            st = tt_store_find(&s, id, len, &sg, &row, NULL);
            if (st == TT_ENOTFOUND) {
                st = TT_OK;
                continue;
            }
            if (st)
                goto done;
            if (!s.o.upsert) {
                st = tt_err(TT_EEXIST, "%s:%llu: id '%s' is already in the index %s (upsert "
                            "replaces it)", in->ids_path ? in->ids_path : "ids",
                            (unsigned long long)d + 1, id, dir);
                goto done;
            }
            pairs[2 * npairs] = s.seg[sg].m.id;
            pairs[2 * npairs + 1] = row;
            npairs++;
        }
    } else {
        if ((st = auto_ids(&s, in->num_docs, &auto_blob, &auto_off, &next_auto)))
            goto done;
        in->ids_blob = auto_blob; /* lent for the build; given back below */
        in->id_off = auto_off;
    }

    /* The metadata: the current database (or, for an index without one that is given
     * metadata now, rows of NULLs for its live documents), the new documents' rows, and
     * the replaced ones removed. Read before the encoding: a bad line fails at once. */
    if ((st = tt_store_meta_load(&s, &mdb, &mdb_open)))
        goto done;
    if (!mdb_open && s.o.metadata) {
        if ((st = tt_store_meta_create(&s, &mdb)))
            goto done;
        mdb_open = true;
    }
    if (mdb_open) {
        uint64_t row0 = tt_store_rows(&s);
        st = s.o.metadata ? tt_mdb_read_jsonl(&mdb, s.o.metadata, row0, in->num_docs,
                                              in->ids_blob, in->id_off)
                          : tt_mdb_insert_null(&mdb, row0, in->num_docs);
        if (st || (st = tt_store_meta_delete(&s, &mdb, pairs, (size_t)npairs)))
            goto done;
    }

    /* The segment, as a build with this index's codebook would write it: from the
     * documents pooled with the change's factor, else as the index's were (its factor,
     * or its one cut's height). */
    tt_build_options bo;
    uint32_t factor = s.o.pool_factor ? (uint32_t)s.o.pool_factor : cb->info.pool_factor;
    const bool cut = !s.o.pool_factor && cb->info.pool_global > 0;
    const tt_pool_spec spec = {.factor = cut ? 0 : factor,
                               .threshold = cut ? cb->info.pool_threshold : -1,
                               .normalize = cb->normalized,
                               .threads = s.o.threads ? s.o.threads : tt_default_threads(),
                               .memory_bytes = s.o.memory_bytes, .cancel = s.o.cancel,
                               .progress = s.o.progress, .progress_user = s.o.progress_user};
    if ((factor > 1 || cut) && (st = tt_pooled_open(&pool, in, &spec)))
        goto done;
    tt_input *seg_in = pool ? tt_pooled_input(pool) : in;
    tt_store_builder(&s, cb, seg_in, &bo, &b);
    b.measure = 1;
    if ((st = tt_build_codebook_from(&b, cb)) || (st = tt_build_segment(&b)) ||
        (s.o.sparse && (st = tt_build_write_sparse(&b, s.o.sparse))))
        goto done;

    /* The next generation: the current one, the new segment, the replaced documents. */
    if ((st = tt_store_next(&s, &next)))
        goto done;
    for (uint32_t i = 0; i < b.man.n && !st; i++)
        st = tt_manifest_add(&next, &b.man.e[i]);
    tt_manifest_segment seg = {.id = s.gen, .num_docs = in->num_docs,
                               .num_vectors = seg_in->num_vectors,
                               .added_vectors = seg_in->num_vectors,
                               .added_mse = b.err_values ? b.err_sum / (double)b.err_values : 0};
    memcpy(seg.prefix, s.prefix, sizeof seg.prefix);
    next.next_auto_id = next_auto;
    if (st || (st = tt_manifest_add_segment(&next, &seg)) ||
        (st = tt_store_write_tombs(&s, &next, pairs, (size_t)npairs)) ||
        (mdb_open && (st = tt_store_meta_write(&s, &mdb, &next))) ||
        (st = tt_store_publish(&s, &next)))
        goto done;
    if (stats) {
        stats->generation = s.gen;
        stats->added = in->num_docs;
        stats->replaced = npairs;
        stats->segments = next.nseg;
        for (uint32_t i = 0; i < next.nseg; i++)
            stats->live_docs += next.seg[i].num_docs - next.seg[i].num_deleted;
        stats->added_mse = seg.added_mse;
        stats->seconds = tt_now() - s.t0;
    }
done:
    if (auto_blob) {
        in->ids_blob = NULL;
        in->id_off = NULL;
    }
    if (mdb_open)
        tt_mdb_free(&mdb);
    free(auto_blob);
    free(auto_off);
    free(pairs);
    tt_manifest_free(&next);
    tt_build_free(&b);
    tt_pooled_free(pool);
    tt_index_close(cb);
    return tt_store_end(&s, st);
}

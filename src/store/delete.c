/* tt_index_delete: documents marked deleted by a new deletion list (tombs.tt); nothing
 * else changes: no row is renumbered and no other file is rewritten until compaction.
 * The work is a binary search per id in each segment's id map plus reading the
 * deletion lists since the last compaction: it does not grow with the index. */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

static int cmp_pair(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

int tt_index_delete(const char *dir, const char *const *ids, size_t n,
                    const tt_change_options *opt, tt_change_stats *stats) {
    tt_store s;
    tt_manifest next;
    uint64_t *pairs = NULL, unknown = 0;
    size_t npairs = 0;
    const char *first_unknown = NULL;
    int st;
    memset(&next, 0, sizeof next);
    tt_err_clear();
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!ids && n)
        return tt_err(TT_EINVAL, "tt_index_delete: NULL ids");
    if ((st = tt_store_open(&s, dir, opt)))
        goto done;
    if (!(pairs = tt_alloc(n ? 2 * n : 2, sizeof *pairs, "deletions"))) {
        st = TT_ENOMEM;
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (!ids[i]) {
            st = tt_err(TT_EINVAL, "tt_index_delete: id %zu is NULL", i);
            goto done;
        }
        uint32_t sg;
        uint64_t row;
        st = tt_store_find(&s, ids[i], strlen(ids[i]), &sg, &row, NULL);
        if (st == TT_ENOTFOUND) {
            if (!first_unknown)
                first_unknown = ids[i];
            unknown++;
            continue;
        }
        if (st)
            goto done;
        pairs[2 * npairs] = s.seg[sg].m.id;
        pairs[2 * npairs + 1] = row;
        npairs++;
        if ((i & 4095) == 0 && (st = tt_store_progress(&s, "delete", i, n)))
            goto done;
    }
    st = TT_OK;
    if (unknown && s.o.strict) {
        st = tt_err(TT_ENOTFOUND, "%s: %llu of the ids are not in the index (the first: '%s'); "
                    "nothing was deleted", dir, (unsigned long long)unknown, first_unknown);
        goto done;
    }
    /* The same id twice in one request deletes one document. */
    qsort(pairs, npairs, 2 * sizeof *pairs, cmp_pair);
    size_t m = 0;
    for (size_t k = 0; k < npairs; k++)
        if (m == 0 || cmp_pair(pairs + 2 * k, pairs + 2 * (m - 1))) {
            pairs[2 * m] = pairs[2 * k];
            pairs[2 * m + 1] = pairs[2 * k + 1];
            m++;
        }
    npairs = m;
    uint64_t generation = s.man.generation;
    if (npairs) {
        bool mdb_open = false;
        tt_mdb mdb;
        if (!(st = tt_store_meta_load(&s, &mdb, &mdb_open)) && mdb_open) {
            if (!(st = tt_store_meta_delete(&s, &mdb, pairs, npairs)) &&
                !(st = tt_store_next(&s, &next)))
                st = tt_store_meta_write(&s, &mdb, &next);
            tt_mdb_free(&mdb);
            if (st)
                goto done;
        } else if (st || (st = tt_store_next(&s, &next))) {
            goto done;
        }
        if ((st = tt_store_write_tombs(&s, &next, pairs, npairs)) ||
            (st = tt_store_publish(&s, &next)))
            goto done;
        generation = s.gen;
    } else if ((st = tt_manifest_copy(&next, &s.man))) {
        goto done;
    }
    if (stats) {
        stats->generation = generation;
        stats->deleted = npairs;
        stats->unknown = unknown;
        stats->segments = next.nseg;
        for (uint32_t i = 0; i < next.nseg; i++)
            stats->live_docs += next.seg[i].num_docs - next.seg[i].num_deleted;
        stats->seconds = tt_now() - s.t0;
    }
done:
    free(pairs);
    tt_manifest_free(&next);
    return tt_store_end(&s, st);
}

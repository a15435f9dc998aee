/* The metadata database of the next generation (meta/meta.h): a copy of the current
 * generation's, changed as the change changes the rows, written as g<gen>.metadata.tt
 * and named by the next manifest in place of the current one's. Published with the
 * manifest rename like every other file of the change; the current file is never
 * written, and is removed with the rest of the old generation after the publish. */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

static const tt_manifest_entry *current(const tt_manifest *man) {
    for (uint32_t i = 0; i < man->n; i++)
        if (!memcmp(man->e[i].kind, TT_METADATA_KIND, 4))
            return &man->e[i];
    return NULL;
}

int tt_store_meta_load(tt_store *s, tt_mdb *m, bool *have) {
    const tt_manifest_entry *e = current(&s->man);
    *have = false;
    if (!e)
        return TT_OK;
    int st = tt_mdb_load(m, s->dir, e->name, e->size, e->payload_hash);
    *have = !st;
    return st;
}

uint64_t tt_store_row(const tt_store *s, uint64_t seg_id, uint64_t row) {
    uint64_t base = 0;
    for (uint32_t j = 0; j < s->man.nseg; j++) {
        if (s->man.seg[j].id == seg_id)
            return base + row;
        base += s->man.seg[j].num_docs;
    }
    return UINT64_MAX;
}

uint64_t tt_store_rows(const tt_store *s) {
    uint64_t n = 0;
    for (uint32_t j = 0; j < s->man.nseg; j++)
        n += s->man.seg[j].num_docs;
    return n;
}

int tt_store_meta_create(tt_store *s, tt_mdb *m) {
    int st = tt_mdb_create(m);
    uint64_t base = 0;
    for (uint32_t j = 0; j < s->man.nseg && !st; j++) {
        for (uint64_t r = 0; r < s->man.seg[j].num_docs && !st; r++)
            if (!tt_store_is_dead(s, j, r))
                st = tt_mdb_insert_null(m, base + r, 1);
        base += s->man.seg[j].num_docs;
    }
    if (st)
        tt_mdb_free(m);
    return st;
}

int tt_store_meta_delete(tt_store *s, tt_mdb *m, const uint64_t *pairs, size_t n) {
    uint64_t *rows = tt_alloc(n ? n : 1, sizeof *rows, "metadata");
    if (!rows)
        return TT_ENOMEM;
    for (size_t k = 0; k < n; k++)
        rows[k] = tt_store_row(s, pairs[2 * k], pairs[2 * k + 1]);
    int st = tt_mdb_delete(m, rows, n);
    free(rows);
    return st;
}

int tt_store_meta_write(tt_store *s, tt_mdb *m, tt_manifest *next) {
    char name[TT_MANIFEST_NAME_LEN];
    snprintf(name, sizeof name, "%s%s", s->prefix, TT_F_METADATA);
    uint32_t k = 0;
    for (uint32_t i = 0; i < next->n; i++)
        if (memcmp(next->e[i].kind, TT_METADATA_KIND, 4))
            next->e[k++] = next->e[i];
    next->n = k;
    tt_manifest_entry e;
    int st = tt_mdb_write(m, s->dir, name, &e);
    return st ? st : tt_manifest_add(next, &e);
}

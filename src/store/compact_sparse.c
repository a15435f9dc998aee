/* A compaction's sparse.tt: the live documents' postings of every segment, in row
 * order, merged into one file as a build over those documents writes it (BM25 counts and
 * lengths are copied exactly; quantized weights are dequantized and quantized again with
 * the merged list's scale, which keeps them when the scales agree). */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct idgen {
    char buf[32];
    uint64_t n;
} idgen;

/* The merged set needs distinct ids only: the running count serves. */
static const char *next_id(void *user, uint64_t row, size_t *len) {
    (void)row;
    idgen *g = user;
    int n = snprintf(g->buf, sizeof g->buf, "%llu", (unsigned long long)g->n++);
    *len = (size_t)n;
    return g->buf;
}

int tt_store_compact_sparse(tt_store *s, builder *b) {
    uint32_t with = 0;
    char name[TT_MANIFEST_NAME_LEN + 16];
    for (uint32_t i = 0; i < s->man.nseg; i++) {
        snprintf(name, sizeof name, "%s%s", s->man.seg[i].prefix, TT_F_SPARSE);
        with += tt_manifest_find(&s->man, name) != NULL;
    }
    if (with == 0)
        return TT_OK;
    if (with != s->man.nseg)
        return tt_err(TT_ECORRUPT, "%s: some segments have sparse postings and some do not",
                      s->dir);
    tt_sparse_set *set = NULL;
    uint64_t *dead = NULL;
    idgen g = {.n = 0};
    int st = TT_OK;
    for (uint32_t i = 0; i < s->man.nseg && !st; i++) {
        const tt_manifest_segment *m = &s->man.seg[i];
        snprintf(name, sizeof name, "%s%s", m->prefix, TT_F_SPARSE);
        const tt_manifest_entry *e = tt_manifest_find(&s->man, name);
        tt_fmap f = {.fd = -1};
        tt_sparse_seg sp;
        if ((st = tt_fmap_open(&f, s->dir, name, "SPRS", TT_MAP_WHOLE)))
            break;
        if (f.size != e->size || f.h.payload_hash != e->payload_hash)
            st = tt_err(TT_ECORRUPT, "%s: does not match the manifest", f.path);
        else if (f.h.a != m->num_docs)
            st = tt_err(TT_ECORRUPT, "%s: sparse postings of another number of documents",
                        f.path);
        if (!st)
            st = tt_fmap_check_payload(&f, NULL, NULL);
        if (!st)
            st = tt_sparse_seg_parse(&sp, f.payload, f.h.payload_bytes, f.h.a, f.h.b, f.h.c,
                                     f.path);
        if (!st && !set)
            st = tt_sparse_set_new(&set, (int)sp.kind);
        if (!st) {
            free(dead);
            dead = tt_calloc(m->num_docs / 64 + 1, sizeof *dead, "deleted rows");
            if (!dead)
                st = TT_ENOMEM;
        }
        if (!st) {
            for (uint64_t r = 0; r < m->num_docs; r++)
                if (tt_store_is_dead(s, i, r))
                    dead[r >> 6] |= 1ull << (r & 63);
            st = tt_sparse_seg_extract(&sp, dead, next_id, &g, set);
        }
        tt_fmap_close(&f);
    }
    if (!st)
        st = tt_build_write_sparse(b, set);
    free(dead);
    tt_sparse_set_free(set);
    return st;
}

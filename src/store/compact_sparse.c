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
static const char *next_id_fn(void *user, uint64_t row, size_t *len) {
    (void)row;
    idgen *g = user;
    int n = snprintf(g->buf, sizeof g->buf, "%llu", (unsigned long long)g->n++);
    *len = (size_t)n;
    return g->buf;
}

/* Term t of sp (found in set, when a live document holds it) has scale x: recorded
 * for set's term, or -1 where another segment gave another scale. */
static int note_scales(const tt_sparse_seg *sp, const tt_sparse_set *set, tt_sparse_scales *sc) {
    if (sc->cap < set->terms.n) {
        uint64_t c = TT_MAX((uint64_t)set->terms.n, 2 * sc->cap);
        float *v = tt_regrow(sc->v, c, sizeof *v, "sparse scales");
        if (!v)
            return TT_ENOMEM;
        memset(v + sc->cap, 0, (c - sc->cap) * sizeof *v);
        sc->v = v;
        sc->cap = c;
    }
    for (uint64_t t = 0; t < sp->T; t++) {
        uint64_t o0 = tt_rd64(sp->term_off + 8 * t), o1 = tt_rd64(sp->term_off + 8 * (t + 1));
        uint32_t i = tt_st_find(&set->terms, sp->blob + o0, (size_t)(o1 - o0));
        if (i == TT_ST_NONE)
            continue; /* only on deleted documents */
        float x = tt_sparse_seg_scale(sp, t);
        if (sc->v[i] == 0)
            sc->v[i] = x;
        else if (sc->v[i] != x)
            sc->v[i] = -1;
    }
    return TT_OK;
}

int tt_store_sparse_extract(tt_store *s, tt_sparse_set **set, uint64_t *next_id,
                            tt_sparse_scales *sc, bool *found) {
    uint32_t with = 0;
    char name[TT_MANIFEST_NAME_LEN + 16];
    *found = false;
    for (uint32_t i = 0; i < s->man.nseg; i++) {
        snprintf(name, sizeof name, "%s%s", s->man.seg[i].prefix, TT_F_SPARSE);
        with += tt_manifest_find(&s->man, name) != NULL;
    }
    if (with == 0)
        return TT_OK;
    if (with != s->man.nseg)
        return tt_err(TT_ECORRUPT, "%s: some segments have sparse postings and some do not",
                      s->dir);
    *found = true;
    uint64_t *dead = NULL;
    idgen g = {.n = *next_id};
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
        if (!st && !*set)
            st = tt_sparse_set_new(set, (int)sp.kind);
        if (!st && (*set)->kind != (int)sp.kind)
            st = tt_err(TT_ECORRUPT, "%s: sparse postings of another kind than the other "
                        "segments' (or shards')", f.path);
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
            st = tt_sparse_seg_extract(&sp, dead, next_id_fn, &g, *set);
        }
        if (!st && sc && (*set)->kind != TT_SPARSE_KIND_BM25)
            st = note_scales(&sp, *set, sc);
        tt_fmap_close(&f);
    }
    *next_id = g.n;
    free(dead);
    return st;
}

int tt_store_compact_sparse(tt_store *s, builder *b) {
    tt_sparse_set *set = NULL;
    uint64_t n = 0;
    bool found;
    int st = tt_store_sparse_extract(s, &set, &n, NULL, &found);
    if (!st && found)
        st = tt_build_write_sparse(b, set);
    tt_sparse_set_free(set);
    return st;
}

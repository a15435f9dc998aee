/* tt_index_verify: every checksum of every file the current generation names, then every
 * structural invariant (a full open), then the kept originals' values and the lengths
 * before token pooling. */
#include "index/index.h"

#include <stdio.h>

static bool row_live(const void *user, uint64_t row) {
    return !tt_index_deleted((const tt_index *)user, row);
}

int tt_index_verify(const char *dir, tt_progress_fn progress, void *user) {
    tt_manifest man;
    int st;
    tt_err_clear();
    if (!dir)
        return tt_err(TT_EINVAL, "tt_index_verify: NULL directory");
    if ((st = tt_manifest_read(dir, &man))) {
        if (st == TT_ENOTFOUND)
            st = tt_index_not_found(dir);
        return st;
    }
    /* Every listed file: header, size and payload checksum against the manifest. */
    for (uint32_t i = 0; i < man.n && !st; i++) {
        tt_fmap f;
        if ((st = tt_fmap_open(&f, dir, man.e[i].name, man.e[i].kind, TT_MAP_NONE)))
            break;
        if (f.size != man.e[i].size || f.h.payload_hash != man.e[i].payload_hash)
            st = tt_err(TT_ECORRUPT, "%s: does not match the manifest", f.path);
        if (!st)
            st = tt_fmap_check_payload(&f, progress, user);
        tt_fmap_close(&f);
    }
    tt_manifest_free(&man);
    if (st)
        return st;
    /* Then every structural invariant, as a full open checks them. */
    tt_open_options o;
    tt_open_options_init(&o);
    o.io = TT_IO_MMAP;
    tt_index *idx;
    if ((st = tt_index_open(&idx, dir, &o)))
        return st;
    /* The originals are not checked at open (they are not resident): no value float16
     * cannot hold (exponent all ones: infinity or NaN). */
    for (uint32_t s = 0; s < idx->nseg && !st && idx->has_originals; s++) {
        const tt_segment *sg = &idx->seg[s];
        uint64_t n = sg->num_vectors * idx->dim;
        for (uint64_t i = 0; i < n; i++) {
            if ((sg->originals[i] & 0x7c00) == 0x7c00) {
                st = tt_err(TT_ECORRUPT, "%s: vector %llu has an infinite or NaN value",
                            sg->f_originals.path, (unsigned long long)(i / idx->dim));
                break;
            }
        }
    }
    /* The residual sketch is a copy of each packed residual's first bytes. */
    for (uint32_t s = 0; s < idx->nseg && !st && idx->sketch_bytes; s++) {
        const tt_segment *sg = &idx->seg[s];
        const uint32_t sb = idx->sketch_bytes, rb = idx->res_bytes;
        if (!sg->res_map || !sg->f_sketch.payload)
            continue;
        for (uint64_t v = 0; v < sg->num_vectors; v++) {
            if (memcmp(sg->f_sketch.payload + v * sb, sg->res_map + v * rb, sb)) {
                st = tt_err(TT_ECORRUPT, "%s: the sketch of vector %llu differs from its "
                            "residual in %s", sg->f_sketch.path, (unsigned long long)v,
                            sg->f_residuals.path);
                break;
            }
        }
    }
    /* The lengths before token pooling: each document had at least the vectors it
     * kept, and they add up to the total in the header (open reads only that). */
    for (uint32_t s = 0; s < idx->nseg && !st; s++) {
        const tt_segment *sg = &idx->seg[s];
        if (!sg->inlens_bytes)
            continue;
        char name[TT_MANIFEST_NAME_LEN + 16];
        snprintf(name, sizeof name, "%s%s", sg->prefix, TT_F_INLENS);
        tt_fmap f;
        if ((st = tt_fmap_open(&f, dir, name, "INLN", TT_MAP_WHOLE)))
            break;
        const uint32_t *dl = (const uint32_t *)sg->f_doclens.payload;
        uint64_t sum = 0;
        for (uint64_t d = 0; d < sg->num_docs && !st; d++) {
            uint32_t len = tt_rd32(f.payload + 4 * d);
            sum += len;
            if (len < dl[d])
                st = tt_err(TT_ECORRUPT, "%s: document %llu had %u vectors before pooling but "
                            "keeps %u", f.path, (unsigned long long)d, len, dl[d]);
        }
        if (!st && sum != f.h.b)
            st = tt_err(TT_ECORRUPT, "%s: the lengths add up to %llu vectors, the header says "
                        "%llu", f.path, (unsigned long long)sum, (unsigned long long)f.h.b);
        tt_fmap_close(&f);
    }
    /* The metadata database: SQLite's own check, and one row per live document. */
    if (!st && idx->f_metadata.base)
        st = tt_mdb_verify(idx->f_metadata.payload, idx->f_metadata.h.payload_bytes,
                           idx->f_metadata.path, idx->num_docs, idx->num_live, row_live, idx);
    tt_index_close(idx);
    return st;
}

/* Index build, one segment: the encode pass and the IVF (encode.c), then the segment's
 * small files: doclens.tt, ids.tt and idmap.tt (doc/format.md). Builds write one; adds
 * (src/store/) write one into an existing index. */
#include "index/build.h"

#include <stdio.h>
#include <stdlib.h>

/* ids as tt_input keeps them: NUL-terminated, id d = blob[off[d] .. off[d+1] - 1). */
typedef struct id_table {
    const char *blob;
    const uint64_t *off;
} id_table;

static int cmp_rows_by_id(const void *pa, const void *pb, void *arg) {
    const id_table *t = arg;
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    size_t la = (size_t)(t->off[a + 1] - t->off[a] - 1), lb = (size_t)(t->off[b + 1] - t->off[b] - 1);
    int c = memcmp(t->blob + t->off[a], t->blob + t->off[b], TT_MIN(la, lb));
    if (c)
        return c;
    return la < lb ? -1 : la > lb;
}

int tt_build_write_ids(builder *b, uint64_t D, const char *blob, const uint64_t *off) {
    /* ids.tt: u64 off[D+1] into the blob of ids (no separators). */
    tt_fwriter w;
    uint64_t size, pos = 0;
    uint8_t tmp[8];
    char name[TT_MANIFEST_NAME_LEN];
    int st = tt_fw_open(&w, b->wdir, tt_build_name(b, TT_F_IDS, name), "IDS_");
    if (st)
        return st;
    for (uint64_t d = 0; d <= D && !st; d++) {
        tt_wr64(tmp, pos);
        st = tt_fw_write(&w, tmp, 8);
        if (d < D)
            pos += off[d + 1] - off[d] - 1; /* without the NUL */
    }
    for (uint64_t d = 0; d < D && !st; d++)
        st = tt_fw_write(&w, blob + off[d], (size_t)(off[d + 1] - off[d] - 1));
    if (!st)
        st = tt_fw_finish(&w, D, pos, 0, &size);
    if (!st)
        st = tt_build_add_manifest(b, &w, name, size);
    tt_fw_abort(&w);
    if (st)
        return st;
    /* idmap.tt: the rows sorted by id (bytewise), so that an add or a delete finds an id
     * by binary search, touching log2(D) ids instead of reading them all. */
    uint64_t *rows = tt_alloc(D ? D : 1, sizeof *rows, "id map");
    if (!rows)
        return TT_ENOMEM;
    for (uint64_t d = 0; d < D; d++)
        rows[d] = d;
    id_table t = {blob, off};
    qsort_r(rows, (size_t)D, sizeof *rows, cmp_rows_by_id, &t);
    const uint32_t width = D <= UINT32_MAX ? 4 : 8;
    uint8_t *buf = tt_alloc(D ? D : 1, width, "id map");
    if (!buf) {
        free(rows);
        return TT_ENOMEM;
    }
    for (uint64_t i = 0; i < D; i++) {
        if (width == 4)
            tt_wr32(buf + 4 * i, (uint32_t)rows[i]);
        else
            tt_wr64(buf + 8 * i, rows[i]);
    }
    free(rows);
    st = tt_build_write_small(b, TT_F_IDMAP, "IDMP", buf, (size_t)(D * width), D, width, 0);
    free(buf);
    return st;
}

/* The ids "0", "1", ... as an id table (for inputs without ids). */
static int row_number_ids(uint64_t D, char **blob_out, uint64_t **off_out) {
    uint64_t digits = 0;
    for (uint64_t lo = 0, hi = 10, w = 1; lo < D; lo = hi, hi *= 10, w++)
        digits += (w + 1) * (TT_MIN(hi, D) - lo); /* with the NUL */
    char *blob = tt_alloc(digits ? digits : 1, 1, "row ids");
    uint64_t *off = tt_alloc(D + 1, sizeof *off, "row ids");
    if (!blob || !off) {
        free(blob);
        free(off);
        return TT_ENOMEM;
    }
    uint64_t pos = 0;
    for (uint64_t d = 0; d < D; d++) {
        off[d] = pos;
        pos += (uint64_t)snprintf(blob + pos, 24, "%llu", (unsigned long long)d) + 1;
    }
    off[D] = pos;
    *blob_out = blob;
    *off_out = off;
    return TT_OK;
}

int tt_build_ivf_alloc(builder *b) {
    b->code_bytes = b->K <= 65536 ? 2 : 4;
    b->ivf_len = tt_calloc(b->K, sizeof *b->ivf_len, "IVF counts");
    b->ivf_bytes = tt_calloc(b->K, sizeof *b->ivf_bytes, "IVF counts");
    b->ivf_last = tt_calloc(b->K, sizeof *b->ivf_last, "IVF counts");
    b->stamp = tt_calloc(b->K, sizeof *b->stamp, "IVF counts");
    if (!b->ivf_len || !b->ivf_bytes || !b->ivf_last || !b->stamp)
        return TT_ENOMEM;
    return TT_OK;
}

int tt_vec_files_open(builder *b, tt_vec_files *f, bool with_originals) {
    f->with_originals = with_originals;
    int st;
    if ((st = tt_fw_open(&f->codes, b->wdir, tt_build_name(b, TT_F_CODES, f->nc), "CODE")) ||
        (st = tt_fw_open(&f->residuals, b->wdir, tt_build_name(b, TT_F_RESIDUALS, f->nr),
                         "RESI")))
        return st;
    if (f->sb && (st = tt_fw_open(&f->sketch, b->wdir, tt_build_name(b, TT_F_SKETCH, f->ns),
                                  "SKCH")))
        return st;
    if (with_originals &&
        (st = tt_fw_open(&f->originals, b->wdir, tt_build_name(b, TT_F_ORIGINALS, f->no),
                         "ORIG")))
        return st;
    if (f->vs && (st = tt_fw_open(&f->vscale, b->wdir, tt_build_name(b, TT_F_VSCALE, f->nv),
                                  "VSCL")))
        return st;
    return TT_OK;
}

int tt_vec_files_write_residuals(tt_vec_files *f, const uint8_t *packed, uint64_t n,
                                 uint32_t res_bytes) {
    int st = tt_fw_write(&f->residuals, packed, (size_t)(n * res_bytes));
    for (uint64_t v = 0; v < n && !st && f->sb; v++)
        st = tt_fw_write(&f->sketch, packed + v * res_bytes, f->sb);
    return st;
}

int tt_vec_files_finish(builder *b, tt_vec_files *f, uint64_t n, uint32_t code_bytes,
                        uint32_t res_bytes, uint32_t dim, uint64_t *codes_size) {
    uint64_t size;
    int st;
    if ((st = tt_fw_finish(&f->codes, n, code_bytes, 0, &size)) ||
        (st = tt_build_add_manifest(b, &f->codes, f->nc, size)))
        return st;
    if (codes_size)
        *codes_size = size;
    if ((st = tt_fw_finish(&f->residuals, n, res_bytes, 0, &size)) ||
        (st = tt_build_add_manifest(b, &f->residuals, f->nr, size)))
        return st;
    if (f->sb && ((st = tt_fw_finish(&f->sketch, n, f->sb, 0, &size)) ||
                  (st = tt_build_add_manifest(b, &f->sketch, f->ns, size))))
        return st;
    if (f->with_originals && ((st = tt_fw_finish(&f->originals, n, dim, 1, &size)) ||
                              (st = tt_build_add_manifest(b, &f->originals, f->no, size))))
        return st;
    if (f->vs && ((st = tt_fw_finish(&f->vscale, n, 2, 0, &size)) ||
                  (st = tt_build_add_manifest(b, &f->vscale, f->nv, size))))
        return st;
    return TT_OK;
}

void tt_vec_files_abort(tt_vec_files *f) {
    tt_fw_abort(&f->codes);
    tt_fw_abort(&f->residuals);
    tt_fw_abort(&f->originals);
    tt_fw_abort(&f->sketch);
    tt_fw_abort(&f->vscale);
}

int tt_build_segment(builder *b) {
    uint64_t codes_size = 0;
    int st;
    if ((st = tt_build_ivf_alloc(b)) || (st = tt_build_encode(b, &codes_size)) ||
        (st = tt_build_write_ivf(b)))
        return st;
    return tt_build_segment_tables(b);
}

/* A u32 per document: doclens.tt, or inlens.tt (with the vectors they sum to in `b`). */
static int write_lens(builder *b, const char *file, const char *kind, const uint32_t *lens,
                      uint64_t bb) {
    uint64_t D = b->in->num_docs;
    uint8_t *buf = tt_alloc(D ? D : 1, 4, file);
    if (!buf)
        return TT_ENOMEM;
    for (uint64_t d = 0; d < D; d++)
        tt_wr32(buf + 4 * d, lens[d]);
    int st = tt_build_write_small(b, file, kind, buf, (size_t)D * 4, D, bb, 0);
    free(buf);
    return st;
}

int tt_build_segment_tables(builder *b) {
    const tt_input *in = b->in;
    int st;
    /* doclens: u32 per document; pooled documents also keep their lengths before */
    if ((st = write_lens(b, TT_F_DOCLENS, "DOCL", in->doclens, 0)) ||
        (in->input_lens &&
         (st = write_lens(b, TT_F_INLENS, "INLN", in->input_lens, in->input_vectors))))
        return st;
    /* Without an ids file the ids are the row numbers, stored all the same: every
     * segment has ids, and tt_index_doc_id never has to make strings. */
    if (in->ids_blob)
        return tt_build_write_ids(b, in->num_docs, in->ids_blob, in->id_off);
    char *blob;
    uint64_t *off;
    if ((st = row_number_ids(in->num_docs, &blob, &off)))
        return st;
    st = tt_build_write_ids(b, in->num_docs, blob, off);
    free(blob);
    free(off);
    return st;
}

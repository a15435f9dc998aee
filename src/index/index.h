/* The open index, shared read-only by every search thread (src/index/open.c), and the
 * varint coding of its IVF lists. */
#ifndef TT_INDEX_H
#define TT_INDEX_H

#include "io/file.h"
#include "quant/codec.h"
#include "quant/cscore.h"

struct tt_index {
    char *dir;
    tt_index_info info;        /* filled at open; see tt_index_get_info */
    uint32_t dim, nbits, num_centroids;
    uint64_t num_docs, num_vectors;
    int normalized;

    tt_fmap f_meta, f_centroids, f_codec, f_doclens, f_codes, f_residuals, f_ivf, f_ids,
        f_originals;

    const float *centroids;    /* num_centroids * dim (mmap, little-endian host) */
    tt_cq cq;                  /* int8 copy for the candidate stages (made at open) */
    tt_codec codec;
    const uint32_t *doclens;   /* num_docs (mmap) */
    uint64_t *doc_vec0;        /* num_docs + 1, computed at open (in RAM) */
    uint32_t max_doclen;
    const uint8_t *codes;      /* num_vectors * code_bytes (mmap) */
    uint32_t code_bytes;       /* 2 (num_centroids <= 65536) or 4 */

    /* IVF: for centroid c, ivf_len[c] documents, delta-varint coded at
     * ivf_data[ivf_off[c] .. ivf_off[c+1]) (ascending doc ids, first delta from 0). */
    const uint32_t *ivf_len;   /* num_centroids */
    const uint64_t *ivf_off;   /* num_centroids + 1 */
    const uint8_t *ivf_data;
    uint64_t ivf_data_bytes;

    const uint64_t *id_off;    /* num_docs + 1 offsets into id_data */
    const char *id_data;
    void *ids_made;            /* row-number ids made at open for an index without ids.tt */

    /* Residuals: num_vectors * res_bytes at file offset TT_HEADER_SIZE of f_residuals;
     * the vectors of document d are at [doc_vec0[d], doc_vec0[d+1]). */
    uint32_t res_bytes;
    const uint8_t *res_map;    /* mmap of the residual payload when io == TT_IO_MMAP */
    int io;                    /* TT_IO_URING or TT_IO_MMAP */
    int direct;
    int res_fd_direct;         /* O_DIRECT descriptor, or -1 */
    int queue_depth;
    char io_note[160];         /* why io_uring was not used, if it was requested */

    const uint16_t *originals; /* num_vectors * dim float16, or NULL */
};

/* TT_ENOTFOUND for an index directory without a MANIFEST, saying why: the path does
 * not exist ("No such file or directory"), is not a directory, or holds no index. */
int tt_index_not_found(const char *dir);

/* Centroid id of vector v. */
static inline uint32_t tt_index_code(const tt_index *idx, uint64_t v) {
    return idx->code_bytes == 2 ? tt_rd16(idx->codes + 2 * v) : tt_rd32(idx->codes + 4 * v);
}

/* Decodes one unsigned LEB128 varint from [*p, end); returns false on overrun/overlong. */
static inline bool tt_varint_get(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

/* Appends a varint to out (at most 10 bytes); returns bytes written. */
static inline size_t tt_varint_put(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

#endif

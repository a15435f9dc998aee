/* The open index, shared read-only by every search thread (src/index/open.c): a
 * snapshot of one generation, its segments laid end to end as one row space with the
 * deleted rows marked; and the varint coding of the IVF lists. */
#ifndef TT_INDEX_H
#define TT_INDEX_H

#include "io/file.h"
#include "meta/meta.h"
#include "quant/codec.h"
#include "quant/cscore.h"
#include "sparse/sparse.h"

/* One segment of an open index: the immutable files one build, add or compaction wrote
 * (doc/format.md). Its documents are the index's rows [doc0, doc0 + num_docs), its
 * vectors [vec0, vec0 + num_vectors); its files hold local rows (from 0). */
typedef struct tt_segment {
    uint64_t id;               /* the generation that wrote it; 0: a build's */
    char prefix[TT_SEGMENT_PREFIX_LEN]; /* its file names: "<prefix><kind>.tt" */
    uint64_t doc0, vec0, num_docs, num_vectors;
    uint64_t num_deleted;
    uint64_t added_vectors;    /* an add's measured vectors and their residual error */
    double added_mse;
    uint64_t input_vectors;    /* its documents' vectors before token pooling (inlens.tt's
                                * total; num_vectors when it has none) */
    uint64_t inlens_bytes;     /* size of its inlens.tt, 0 if none */

    tt_fmap f_doclens, f_codes, f_residuals, f_ivf, f_ids, f_idmap, f_originals;
    tt_fmap f_sketch;          /* sketch.tt, when the codec has a sketch (resident) */
    tt_fmap f_vscale;          /* vscale.tt, with debias 2 (resident) */

    /* IVF: for centroid c, ivf_len[c] local rows, delta-varint coded at
     * ivf_data[ivf_off[c] .. ivf_off[c+1]) (ascending, first delta from 0). */
    const uint32_t *ivf_len;   /* num_centroids */
    const uint64_t *ivf_off;   /* num_centroids + 1 */
    const uint8_t *ivf_data;
    uint64_t ivf_data_bytes;

    const uint64_t *id_off;    /* num_docs + 1 offsets into id_data */
    const char *id_data;
    void *ids_made;            /* row-number ids made at open for a segment without ids.tt */
    const uint8_t *idmap;      /* local rows sorted by id, idmap_width bytes each, or NULL */
    uint32_t idmap_width;      /* 4 or 8 */

    const uint8_t *res_map;    /* mapping of the residual payload when io == TT_IO_MMAP */
    int res_fd_direct;         /* O_DIRECT descriptor, or -1 */
    const uint16_t *originals; /* num_vectors * dim float16, or NULL */

    tt_fmap f_sparse;          /* sparse.tt (doc/format.md, "Sparse postings"), if any */
    bool has_sparse;
    tt_sparse_seg sparse;      /* its validated payload */
} tt_segment;

struct tt_index {
    char *dir;
    tt_index_info info;        /* filled at open; see tt_index_get_info */
    uint32_t dim, nbits, num_centroids;
    uint64_t num_docs, num_vectors; /* rows of every segment, deleted ones included */
    uint64_t num_live;         /* rows not deleted */
    int normalized;
    tt_manifest man;           /* the generation this index is a snapshot of */

    tt_fmap f_meta, f_centroids, f_codec;
    tt_fmap f_tune;            /* tune.tt, when the generation has one */
    tt_tune_info tuned;        /* its parameters (tuned = 0 without) */
    const float *centroids;    /* num_centroids * dim (mmap, little-endian host) */
    uint16_t *centroids16;     /* the same as float16, when every value is one exactly
                                * (builds round them): what search reads, the float32
                                * file then mapped, not copied; else NULL */
    tt_cq cq;                  /* int8 copy for the candidate stages (made at open;
                                * grouped by cgroup_of when the calibration has groups) */
    tt_crows crows;            /* row-major int8 centroids for stage 4's lookup-table
                                * pass: made at open from TT_CROWS_MIN_DIM dimensions on
                                * CPUs with AVX2, else empty (data NULL) */
    uint32_t *cgroup_of;       /* num_centroids: each centroid's group (tune.tt), or NULL */
    uint32_t cgroup_n;         /* the number of groups (0 without) */
    tt_codec codec;

    uint32_t nseg;
    tt_segment *seg;

    /* By row and by vector over all segments: the one segment's mappings, or copies in
     * RAM when there are several. */
    const uint32_t *doclens;   /* num_docs */
    uint32_t *doclens_owned;
    uint64_t *doc_vec0;        /* num_docs + 1, computed at open (in RAM) */
    uint32_t max_doclen;       /* over live documents */
    const uint8_t *codes;      /* num_vectors * code_bytes */
    uint8_t *codes_owned;
    uint32_t code_bytes;       /* 2 (num_centroids <= 65536) or 4 */
    /* The residual sketch (quant/codec.h, tt_codec_sketch_bytes): sketch_bytes per
     * vector, in RAM like the codes; NULL (sketch_bytes 0) when the codec has none or a
     * segment was written before sketches existed. */
    const uint8_t *sketch;
    uint8_t *sketch_owned;
    uint32_t sketch_bytes;
    /* With debias 2: each vector's residual scale (float16, little-endian), in RAM like
     * the codes; the positions from vscale_k0 on are scaled (the first are the 8-bit
     * ones). NULL otherwise. */
    const uint16_t *vscale;
    uint16_t *vscale_owned;
    uint32_t vscale_k0;
    uint64_t *deleted;         /* num_docs bits, or NULL when no document is deleted */

    /* Residuals: segment s holds num_vectors * res_bytes at file offset TT_HEADER_SIZE
     * of seg[s].f_residuals; row d's are at global byte doc_vec0[d] * res_bytes of the
     * segments' payloads laid end to end (io/fetch.h reads such ranges). */
    uint32_t res_bytes;
    int io;                    /* TT_IO_URING or TT_IO_MMAP */
    int direct;
    int queue_depth;
    int no_avx512;             /* tests: search contexts made while it is set decode and
                                * score residuals as on a CPU without AVX-512 (0 at open) */
    char io_note[160];         /* why io_uring was not used, if it was requested */
    int has_originals;         /* every segment kept float16 originals */
    tt_fmap f_metadata;        /* the metadata database (meta/meta.h), fd -1 if none */

    /* Sparse postings: every segment has them (kind TT_SPARSE_KIND_*) or none (0). */
    uint32_t sparse_kind;
    uint64_t sparse_live;      /* live documents */
    double sparse_avgdl;       /* their mean length (BM25's avgdl) */
    uint64_t sparse_total_len; /* the sum of their lengths */
    uint64_t sparse_bytes;     /* the sparse.tt files */
    /* The stored vocabulary of an index of term ids (vocab.tt, one per generation, when
     * the build was given one): vocab.n terms, id = entry number. */
    tt_fmap f_vocab;           /* fd -1 without */
    tt_strtab vocab;
};

/* Centroid id of vector v. */
static inline uint32_t tt_index_code(const tt_index *idx, uint64_t v) {
    return idx->code_bytes == 2 ? tt_rd16(idx->codes + 2 * v) : tt_rd32(idx->codes + 4 * v);
}

/* Whether row d is deleted in this snapshot. */
static inline bool tt_index_deleted(const tt_index *idx, uint64_t d) {
    return idx->deleted && (idx->deleted[d >> 6] >> (d & 63) & 1);
}

/* The segment holding row d (binary search over the segments' first rows). */
static inline uint32_t tt_index_segment_of(const tt_index *idx, uint64_t d) {
    uint32_t lo = 0, hi = idx->nseg;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (idx->seg[mid].doc0 <= d)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Float16 originals of vector v (has_originals must be set). */
static inline const uint16_t *tt_index_original(const tt_index *idx, uint32_t s, uint64_t v) {
    return idx->seg[s].originals + (v - idx->seg[s].vec0) * idx->dim;
}

/* meta.tt's "key=value" lines: the value of key (cut to cap), and the same as an integer
 * in [lo, hi] (TT_ECORRUPT naming the file otherwise). */
bool tt_meta_get(const tt_fmap *m, const char *key, char *val, size_t cap);
int tt_meta_u64(const tt_fmap *m, const char *key, uint64_t lo, uint64_t hi, uint64_t *out);
/* tune.tt (src/index/tuned.c): writes t, with the group of each of the K centroids
 * when t->centroid_groups, as its text into *out (allocated, NUL-terminated, free it;
 * *len its length); reads the mapped file m, checking every value (TT_ECORRUPT naming
 * the file and key), with the centroids' groups into *group_of (allocated, or NULL
 * without). */
int tt_tune_format(const tt_tune_info *t, const uint32_t *group_of, uint32_t K, char **out,
                   size_t *len);
int tt_tune_parse(const tt_fmap *m, uint32_t num_centroids, tt_tune_info *t,
                  uint32_t **group_of);

/* Ids "0", "1", ..., "D-1" laid out as ids.tt's payload (offsets then digits), in one
 * allocation *mem (free it). For segments without ids.tt. */
int tt_row_ids(uint64_t D, void **mem, const uint64_t **off, const char **data);

/* Opens only the shared files of the generation `man` describes (meta.tt, centroids,
 * codec; checksums and values checked as tt_index_open does): what a change needs to
 * encode documents like the index's, without reading its segments. num_docs and
 * num_vectors are those of meta.tt (the build's). Close with tt_index_close. */
int tt_index_open_codebook(tt_index **out, const char *dir, const tt_manifest *man);

/* Rebuilds idx's centroid-score table for another kernel (TT_CQ_*), for the tests and
 * benchmarks that compare the stage-1 paths on one CPU; not while idx is searched.
 * TT_EINVAL if this CPU cannot run it, TT_ENOMEM (idx keeps its table on failure). */
int tt_index_use_cq_kernel(tt_index *idx, int kernel);
/* Makes idx's int8 centroid rows (tt_crows) where open did not (fewer than
 * TT_CROWS_MIN_DIM dimensions, or no AVX2), for the tests that run stage 4's lookup pass
 * with them on small indexes; not while idx is searched. TT_ENOMEM. */
int tt_index_make_crows(tt_index *idx);
/* Regroups idx's centroid-score table by group_of (G groups; G 0: ungrouped), for the
 * calibration, which measures both; not while idx is searched. idx keeps group_of
 * (copied) as cgroup_of. TT_EINVAL (a group out of range or empty), TT_ENOMEM (idx
 * keeps its table). */
int tt_index_set_centroid_groups(tt_index *idx, const uint32_t *group_of, uint32_t G);

/* TT_ENOTFOUND for an index directory without a MANIFEST, saying why: the path does
 * not exist ("No such file or directory"), is not a directory, or holds no index. */
int tt_index_not_found(const char *dir);


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

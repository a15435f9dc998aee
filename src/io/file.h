/* The on-disk index format (doc/format.md): every file starts with a 64-byte header
 *
 *   0  magic "TRTN"          4  kind (4 ASCII bytes, e.g. "CENT")
 *   8  format version u32   12  flags u32 (0)
 *  16  a u64   24  b u64   32  c u64   (kind-specific counts)
 *  40  payload bytes u64    48  XXH64 of the payload (seed 0) u64
 *  56  reserved u32 (0)     60  XXH32 of bytes 0..59 (seed 0) u32
 *
 * followed by the payload. All integers little-endian. The MANIFEST lists every file
 * with its size and payload hash and is published last. */
#ifndef TT_IO_FILE_H
#define TT_IO_FILE_H

#include "common/common.h"

#include <xxhash.h>

/* The index format (doc/format.md): 2 since indexes have segments and generations. Each
 * file's header carries the version of its own layout: 1 for every data file, whose
 * layout did not change, 2 for a manifest with segments. A reader takes versions up to
 * TT_FORMAT_VERSION and refuses newer ones. */
#define TT_FORMAT_VERSION 2
#define TT_FILE_VERSION 1
#define TT_HEADER_SIZE 64
#define TT_MAGIC "TRTN"

/* File names inside an index directory and their kinds. */
#define TT_F_META "meta.tt"
#define TT_F_CENTROIDS "centroids.tt"
#define TT_F_CODEC "codec.tt"
#define TT_F_TUNE "tune.tt"
#define TT_F_DOCLENS "doclens.tt"
#define TT_F_CODES "codes.tt"
#define TT_F_RESIDUALS "residuals.tt"
#define TT_F_IVF "ivf.tt"
#define TT_F_IDS "ids.tt"
#define TT_F_ORIGINALS "originals.tt"
#define TT_F_IDMAP "idmap.tt"          /* document rows sorted by id (format 2) */
#define TT_F_TOMBS "tombs.tt"          /* deleted documents of one delete (format 2) */
#define TT_F_INLENS "inlens.tt"        /* vectors per document before token pooling */
#define TT_F_SPARSE "sparse.tt"        /* sparse postings (src/sparse/) */
#define TT_F_SKETCH "sketch.tt"        /* residual sketch: a prefix of every packed residual */
#define TT_F_VSCALE "vscale.tt"        /* one float16 residual scale per vector (debias 2) */
#define TT_F_MANIFEST "MANIFEST"
#define TT_F_LOCK "LOCK"

typedef struct tt_header {
    char kind[5];
    uint32_t version, flags;
    uint64_t a, b, c;
    uint64_t payload_bytes;
    uint64_t payload_hash;
} tt_header;

void tt_header_encode(const tt_header *h, uint8_t out[TT_HEADER_SIZE]);
/* Validates in order: magic, header checksum, version, kind (expected may be NULL).
 * Errors: TT_EFORMAT (magic), TT_ECORRUPT (checksum), TT_EVERSION, TT_EFORMAT (kind). */
int tt_header_decode(const uint8_t in[TT_HEADER_SIZE], const char *path, const char *expected_kind,
                     tt_header *h);

/* A file being written: buffered, payload hashed as it goes, header written last. */
typedef struct tt_fwriter {
    char *path;
    int fd;
    tt_header h;
    XXH64_state_t *xxh;
    uint8_t *buf;
    size_t buf_used, buf_cap;
    uint64_t written;    /* payload bytes so far */
} tt_fwriter;

/* Creates dir/name (O_EXCL) and reserves the header. */
int tt_fw_open(tt_fwriter *w, const char *dir, const char *name, const char *kind);
int tt_fw_write(tt_fwriter *w, const void *data, size_t n);
/* Writes the header with a, b, c, fsyncs and closes. *size_out gets the file size. */
int tt_fw_finish(tt_fwriter *w, uint64_t a, uint64_t b, uint64_t c, uint64_t *size_out);
/* Closes (if open) and frees; the file is left for the caller's directory cleanup. */
void tt_fw_abort(tt_fwriter *w);

/* A file mapped read-only. */
typedef struct tt_fmap {
    char *path;
    int fd;               /* kept open (residuals are read through it) */
    const uint8_t *base;  /* whole file (mapped or copied); NULL if neither */
    uint64_t size;
    tt_header h;
    const uint8_t *payload;
    int copied;           /* base is a private copy (TT_MAP_COPY) */
} tt_fmap;

enum { TT_MAP_NONE = 0, TT_MAP_WHOLE = 1, TT_MAP_COPY = 2 };
/* Opens dir/name, reads and validates the header, checks that header + payload_bytes
 * equals the file size, and with TT_MAP_WHOLE mmaps the file; with TT_MAP_COPY reads it
 * into private anonymous memory instead (what must stay in RAM: file pages are evicted
 * under memory pressure and come back one synchronous fault at a time, anonymous pages
 * are not; doc/benchmarks.md, *A busy machine*). Either way base/payload are read-only
 * and tt_fmap_close releases them. */
int tt_fmap_open(tt_fmap *m, const char *dir, const char *name, const char *kind, int map);
/* Recomputes the payload hash and compares it with the header. TT_ECORRUPT naming the file. */
int tt_fmap_check_payload(const tt_fmap *m, tt_progress_fn progress, void *user);
/* Turns a TT_MAP_WHOLE mapping into what TT_MAP_COPY would have made: a read-only copy
 * in private anonymous memory (for a file whose use is decided after it was mapped and
 * checked). base and payload change. TT_ENOMEM naming the file, the mapping kept. */
int tt_fmap_own(tt_fmap *m);
void tt_fmap_close(tt_fmap *m);

/* The manifest: the list of files of an index generation with their sizes and payload
 * hashes and, from format version 2 on, its segments (doc/format.md). Version 1 (a
 * frozen single-segment index) is read; version 2 is written. */
#define TT_MANIFEST_NAME_LEN 32
typedef struct tt_manifest_entry {
    char name[TT_MANIFEST_NAME_LEN];
    char kind[5];
    uint64_t size, payload_hash;
} tt_manifest_entry;

/* One segment: the files named "<prefix><kind>.tt" (prefix "" for a build's, else
 * "g<generation>." of the generation that wrote it). */
#define TT_SEGMENT_PREFIX_LEN 16
typedef struct tt_manifest_segment {
    uint64_t id;                /* the generation that wrote it; 0 for a build's */
    char prefix[TT_SEGMENT_PREFIX_LEN];
    uint64_t num_docs, num_vectors;
    uint64_t num_deleted;       /* its tombstoned documents as of this generation */
    uint64_t added_vectors;     /* an add: vectors whose residual error was measured */
    double added_mse;           /* an add: their mean squared reconstruction error */
} tt_manifest_segment;

typedef struct tt_manifest {
    uint32_t version;           /* as read: 1 or 2 */
    uint32_t n, cap;            /* files */
    tt_manifest_entry *e;
    uint32_t nseg, seg_cap;     /* segments (0 in a version-1 manifest) */
    tt_manifest_segment *seg;
    uint64_t generation;        /* 0 for a version-1 index */
    uint64_t next_auto_id;      /* the next id an add without ids tries */
    uint64_t hash;              /* as read: the file's payload XXH64 (tells two apart) */
} tt_manifest;

void tt_manifest_free(tt_manifest *m);
/* Appends a file / a segment (copied). TT_ENOMEM. */
int tt_manifest_add(tt_manifest *m, const tt_manifest_entry *e);
int tt_manifest_add_segment(tt_manifest *m, const tt_manifest_segment *s);
/* Writes dir/MANIFEST.tmp (version 2), fsyncs it and renames it to MANIFEST: the atomic
 * switch to this generation. TT_OK means the rename happened; the caller fsyncs dir
 * (and must not take the new generation's files back if that fails). */
int tt_manifest_publish(const char *dir, const tt_manifest *m);
/* Reads dir/MANIFEST (version 1 or 2), checksums first. The caller frees m. */
int tt_manifest_read(const char *dir, tt_manifest *m);
const tt_manifest_entry *tt_manifest_find(const tt_manifest *m, const char *name);
/* The payload hash of the first file of this kind (4 bytes, e.g. "CENT"), 0 if none. */
uint64_t tt_manifest_kind_hash(const tt_manifest *m, const char *kind);
/* Copies src into dst (deep). TT_ENOMEM. */
int tt_manifest_copy(tt_manifest *dst, const tt_manifest *src);

#endif

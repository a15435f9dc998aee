/* The store: an index directory as something that changes (doc/format.md, "Generations
 * and segments"). writer.c holds the writer's side: the lock, the current generation
 * read lightly (a delete must not cost in proportion to the index: only the manifest,
 * the deletion lists, and the ids it looks up are read), id lookup by binary search in
 * each segment's id map, the publication of the next generation and the removal of the
 * files no generation names. add.c, delete.c and compact.c are the three changes. */
#ifndef TT_STORE_H
#define TT_STORE_H

#include "index/build.h"
#include "index/index.h"
#include "io/dir.h"
#include "io/file.h"

typedef struct tt_store_seg {
    tt_manifest_segment m;     /* as the current manifest has it */
    bool ids_open;
    tt_fmap f_ids, f_idmap;    /* mapped on the first lookup */
    const uint64_t *id_off;    /* m.num_docs + 1 */
    const char *id_data;
    uint64_t id_bytes;
    const uint8_t *idmap;      /* rows sorted by id, width bytes each */
    uint32_t width;
    uint64_t *perm;            /* the same, computed, for a segment without idmap.tt */
    void *ids_made;            /* row-number ids of a format-1 segment without ids.tt */
    uint64_t *dead;            /* its deleted rows, ascending */
    uint64_t ndead;
} tt_store_seg;

typedef struct tt_store {
    char *dir;
    int dfd;
    tt_lock lock;              /* DIR/LOCK */
    tt_manifest man;           /* the current generation (format 1: its files, one segment) */
    tt_store_seg *seg;         /* man.nseg */
    uint64_t gen;              /* the generation this change writes */
    char prefix[TT_SEGMENT_PREFIX_LEN]; /* its files' prefix, "g<gen>." */
    tt_change_options o;       /* the caller's, defaults filled */
    double t0;
    bool published;            /* the manifest rename happened: this change's files stay */
} tt_store;

/* Validates and copies the options (by struct_size). */
int tt_store_options(const tt_change_options *in, tt_change_options *out);
/* Takes DIR/LOCK ("being modified by pid N"), reads the current generation, removes the
 * files a killed change left (index files no manifest names), and loads the deletion
 * lists. `doing` names the change in messages. */
int tt_store_open(tt_store *s, const char *dir, const tt_change_options *o);
/* Releases everything (the lock last). */
void tt_store_close(tt_store *s);
/* A copy of the current manifest to build the next generation on (generation = s->gen). */
int tt_store_next(const tt_store *s, tt_manifest *next);

/* Looks id[0..len) up in every segment: its live document in *seg, *row (TT_OK), else
 * TT_ENOTFOUND; *ever (may be NULL): some row has or had it, live or deleted. */
int tt_store_find(tt_store *s, const char *id, size_t len, uint32_t *seg, uint64_t *row,
                  bool *ever);
/* Whether local row `row` of segment i is deleted in the current generation. */
bool tt_store_is_dead(const tt_store *s, uint32_t i, uint64_t row);

/* Adds this generation's deletion list (pairs of segment id and row, any order, each a
 * live row, no repeats) to next: writes g<gen>.tombs.tt and counts them in the segments. */
int tt_store_write_tombs(tt_store *s, tt_manifest *next, uint64_t *pairs, size_t n);
/* Writes data (n bytes) as this change's file "g<gen>.<file>" of the given kind (header
 * count a), fsynced, and adds it to next. */
int tt_store_write_file(tt_store *s, tt_manifest *next, const char *file, const char *kind,
                        const void *data, size_t n, uint64_t a);
/* Publishes next as the current generation (MANIFEST written aside, fsynced, renamed),
 * then removes every index file of the directory that next does not name. */
int tt_store_publish(tt_store *s, const tt_manifest *next);
/* After a failure: removes the files of this change (prefix "g<gen>."). */
void tt_store_discard(tt_store *s);
/* The end of every change: unless tt_store_publish renamed the manifest, removes its
 * files (keeping the error message of st); then closes the store. Returns st. */
int tt_store_end(tt_store *s, int st);
/* A builder that writes a segment like the index's, with codebook cb (options in bo,
 * owned by the caller): vectors normalised and originals kept as the index's, its pool
 * factor recorded (in is read as it is: pooling is the caller's), the change's threads,
 * memory, progress and cancel; files g<gen>.* in the index. */
void tt_store_builder(tt_store *s, const tt_index *cb, tt_input *in, tt_build_options *bo,
                      builder *b);
/* compact.c's reading of an index's live documents, shared with reshard.c. */
/* One segment's files, mapped while it is copied or read. */
typedef struct seg_files {
    tt_fmap doclens, codes, residuals, ids, originals, inlens;
    tt_fmap vscale;           /* with debias 2: each vector's residual scale (float16 LE) */
    const uint64_t *id_off;
    const char *id_data;
    void *ids_made;
} seg_files;

/* The live documents over all segments: their lengths, first vectors, ids (laid out
 * as tt_input's), and where each comes from. */
typedef struct live_set {
    uint64_t ndocs, nvecs;
    uint32_t *doclens;
    uint64_t *doc_vec0;       /* ndocs + 1 */
    uint32_t *seg;            /* segment index of each */
    uint64_t *vec;            /* its first vector within its segment */
    char *ids;
    uint64_t *id_off;         /* ndocs + 1 */
    uint64_t ids_cap;
    uint64_t next_auto_id;    /* past every number a dropped document had as its id */
    uint32_t *inlens;         /* vectors of each before token pooling */
    uint64_t in_vecs;         /* their sum */
    bool pooled;              /* some segment's documents were pooled (had inlens.tt) */
} live_set;

void tt_store_seg_files_init(seg_files *f);
void tt_store_seg_files_close(seg_files *f);
/* Maps segment m's files (the small ones checksummed, the large ones checked for size). */
int tt_store_seg_files_open(tt_store *s, const tt_index *cb, const tt_manifest_segment *m,
                            seg_files *f);
/* The live documents of every segment of s, in row order. */
int tt_store_live_collect(tt_store *s, const tt_index *cb, live_set *l);
void tt_store_live_free(live_set *l);
/* compact_sparse.c: the live documents' sparse postings of every segment merged into
 * the new segment's sparse.tt (nothing when the index has none). */
int tt_store_compact_sparse(tt_store *s, builder *b);
/* Per term of a sparse set, the quantization scale its postings had in the source
 * segments (0: none yet; -1: segments with different scales). */
typedef struct tt_sparse_scales {
    float *v;
    uint64_t cap;
} tt_sparse_scales;
/* Appends the live documents' sparse vectors of every segment of s, in row order, to
 * *set (created, of the postings' kind, when NULL; ids "0", "1", ... counted from
 * *next_id, which is advanced); *found false (nothing appended) when s has no sparse
 * postings. sc (may be NULL; weights only): each term's source scale recorded. */
int tt_store_sparse_extract(tt_store *s, tt_sparse_set **set, uint64_t *next_id,
                            tt_sparse_scales *sc, bool *found);
/* The stored vocabulary (vocab.tt) of s's generation into v (*have false: none). */
int tt_store_vocab_load(tt_store *s, tt_strtab *v, bool *have);
/* vocab.c: an add's term-id set checked against the index's stored vocabulary (the
 * same vocabulary, or ids below its size); refused with a vocabulary when the index has
 * none. */
int tt_store_check_vocab(tt_store *s, const tt_sparse_set *set);
/* Progress and the cancel flag, as tt_build_progress. */
int tt_store_progress(tt_store *s, const char *phase, uint64_t done, uint64_t total);

/* metadata.c: the next generation's metadata database. */
/* A writable copy of the current generation's database (*have false: it has none). */
int tt_store_meta_load(tt_store *s, tt_mdb *m, bool *have);
/* A new database with a row of NULLs for every live document of the current generation. */
int tt_store_meta_create(tt_store *s, tt_mdb *m);
/* Removes the rows of the (segment id, local row) pairs. */
int tt_store_meta_delete(tt_store *s, tt_mdb *m, const uint64_t *pairs, size_t n);
/* Writes g<gen>.metadata.tt and names it in next instead of the current database. */
int tt_store_meta_write(tt_store *s, tt_mdb *m, tt_manifest *next);
/* The index row of local row `row` of the segment with id seg_id (UINT64_MAX: none), and
 * the rows of the current generation (deleted ones included). */
uint64_t tt_store_row(const tt_store *s, uint64_t seg_id, uint64_t row);
uint64_t tt_store_rows(const tt_store *s);

#endif

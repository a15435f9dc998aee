/* Index build internals: the builder shared by the phases of tt_build, one file each:
 * build.c (options, small files, the pipeline), train.c (sample, k-means, codec),
 * encode.c (the encode pass and the IVF), segment.c (a segment's small files: lengths,
 * ids, the id map), publish.c (moving the result into place). The store (src/store/)
 * uses the same builder to write the segment of an add into an existing index. */
#ifndef TT_BUILD_H
#define TT_BUILD_H

#include "index/index.h"
#include "input/input.h"
#include "io/dir.h"
#include "quant/codec.h"
#include "quant/kmeans.h"

typedef struct builder {
    const tt_build_options *o;
    tt_input *in;
    tt_outpath op;              /* OUT, resolved, its parent held open */
    tt_lock lock;               /* OUT.lock, held for the whole build */
    char *tmp_name;             /* the build directory OUT.tmp-PID-RANDOM in OUT's parent */
    char *tmp;                  /* and its path */
    int tmp_fd;                 /* and the directory, open from creation to the end */
    const char *wdir;           /* where the segment's files go: tmp, or the index (add) */
    char prefix[TT_SEGMENT_PREFIX_LEN]; /* their names' prefix: "" or "g<generation>." */
    uint32_t dim, K, nbits;
    int debias;                 /* tt_debias: o->debias, TT_DEBIAS_AUTO resolved by training
                                 * (train.c), or the codebook's */
    int threads;
    uint64_t chunk_vectors;     /* vectors per encode chunk */
    float *centroids;
    tt_codec codec;
    tt_assigner *assigner;
    tt_manifest man;
    tt_build_stats st;
    uint64_t code_bytes;
    /* IVF bookkeeping gathered during the encode pass */
    uint32_t *ivf_len;          /* documents per centroid */
    uint64_t *ivf_bytes;        /* varint bytes per centroid */
    uint64_t *ivf_last;         /* last document appended per centroid (+1; 0 = none) */
    uint64_t *stamp;            /* per centroid: last document seen + 1 (dedupe) */
    /* The residual error of every encoded vector, when `measure` (adds: the drift) */
    int measure;
    double err_sum;             /* squared reconstruction errors, summed */
    uint64_t err_values;        /* values they are over */
    /* A sharded build's document metadata (global rows), or NULL: each shard gets its
     * rows' part as its own metadata.tt (index/shards.c) */
    tt_mdb *mdb;
    /* Token pooling by one cut (doc/pooling.md): the cut's height and the factor asked
     * for, recorded in META for the index's adds (0, 0: none) */
    double pool_threshold, pool_global;
} builder;

/* Reports progress; TT_ECANCELED (with a message) once the caller's cancel flag is set,
 * which every phase checks at least once per chunk of work. */
int tt_build_progress(builder *b, const char *phase, uint64_t done, uint64_t total);
int tt_build_cancelled(const builder *b);
/* Records a finished file in b->man. */
int tt_build_add_manifest(builder *b, const tt_fwriter *w, const char *name, uint64_t size);
/* "<prefix><file>" into buf (TT_MANIFEST_NAME_LEN bytes). */
const char *tt_build_name(const builder *b, const char *file, char *buf);
/* Normalises (if asked) and validates n vectors that start at global vector v0. */
int tt_build_prepare_vectors(builder *b, float *x, uint64_t v0, uint64_t n);
/* The same for n vectors of `in` from its vector v0: NaN/Inf and all-zero vectors are
 * refused (TT_EVALUE) naming their file, row and document; with f16_range, so are
 * values float16 cannot hold. */
int tt_prepare_vectors(const tt_input *in, uint32_t dim, int normalize, int f16_range, float *x,
                       uint64_t v0, uint64_t n);
/* The per-vector files of a segment being written, in vector order: codes.tt,
 * residuals.tt, with sb > 0 sketch.tt (the first sb bytes of every packed residual:
 * tt_codec_sketch_bytes of the codec), and, with originals, originals.tt (encode.c; a
 * compaction's copy). */
typedef struct tt_vec_files {
    tt_fwriter codes, residuals, originals, sketch, vscale;
    char nc[TT_MANIFEST_NAME_LEN], nr[TT_MANIFEST_NAME_LEN], no[TT_MANIFEST_NAME_LEN],
        ns[TT_MANIFEST_NAME_LEN], nv[TT_MANIFEST_NAME_LEN];
    bool with_originals;
    bool vs;                    /* vscale.tt: one float16 per vector (debias 2); set before
                                 * tt_vec_files_open */
    uint32_t sb;                /* sketch bytes per vector; set before tt_vec_files_open */
} tt_vec_files;
#define TT_VEC_FILES_INIT                                                                   \
    {.codes = {.fd = -1}, .residuals = {.fd = -1}, .originals = {.fd = -1},                 \
     .sketch = {.fd = -1}, .vscale = {.fd = -1}}
/* Opens them in b->wdir under the segment's prefix (f initialised with
 * TT_VEC_FILES_INIT). Whatever happens, tt_vec_files_abort releases them after. */
int tt_vec_files_open(builder *b, tt_vec_files *f, bool with_originals);
/* Appends the packed residuals of n vectors (res_bytes each) and their sketch. */
int tt_vec_files_write_residuals(tt_vec_files *f, const uint8_t *packed, uint64_t n,
                                 uint32_t res_bytes);
/* Finishes the files of n vectors (code_bytes and res_bytes per vector, originals dim
 * float16) and records them in the manifest; *codes_size (may be NULL) receives the
 * codes file's size. */
int tt_vec_files_finish(builder *b, tt_vec_files *f, uint64_t n, uint32_t code_bytes,
                        uint32_t res_bytes, uint32_t dim, uint64_t *codes_size);
void tt_vec_files_abort(tt_vec_files *f);
/* Writes a whole small file of the segment (named with the prefix) in one go. */
int tt_build_write_small(builder *b, const char *file, const char *kind, const void *data,
                         size_t n, uint64_t a, uint64_t bb, uint64_t c);

/* train.c: the training sample, k-means, the assigner and the codec; or, with the
 * codebook option, those of another index. */
/* The training of a group build (o->group), called by every process with its status
 * so far: they agree on it, then train together through the group's reduce when the
 * plan allows (flat k-means, held-out documents: src/index/train.c), else rank 0 trains
 * alone. Rank 0 ends with the codebook, the others with nothing. */
int tt_build_train_group(builder *b, int st);
int tt_build_train(builder *b);
/* The codebook (centroids, codec, assigner) of an open index instead of training. */
int tt_build_codebook_from(builder *b, const tt_index *src);
/* encode.c: every vector encoded into codes.tt, residuals.tt (and originals.tt), then
 * the IVF written from the codes. */
int tt_build_encode(builder *b, uint64_t *codes_size);
/* Counts the codes (centroid ids) of vectors [v0, v0+n) of b->in into the IVF
 * bookkeeping; tt_build_write_ivf then writes the lists from the codes file. */
void tt_build_ivf_count(builder *b, const uint32_t *ids, uint64_t v0, uint64_t n);
/* Allocates the IVF bookkeeping for b->K centroids (and sets b->code_bytes). */
int tt_build_ivf_alloc(builder *b);
int tt_build_write_ivf(builder *b);
/* segment.c: a whole segment from b->in with the codebook in b: the encode pass, the
 * IVF, doclens.tt, ids.tt (the input's ids, else the row numbers) and idmap.tt. */
int tt_build_segment(builder *b);
/* doclens.tt, ids.tt and idmap.tt of b->in (its ids, else the row numbers). */
int tt_build_segment_tables(builder *b);
/* meta.tt: b's parameters, training figures and b->in's counts. */
int tt_build_write_meta(builder *b, double seconds);
/* centroids.tt and codec.tt of b's codebook. */
int tt_build_write_codebook(builder *b);
/* Writes ids.tt and idmap.tt for num_docs ids laid out as tt_input's ids_blob/id_off. */
int tt_build_write_ids(builder *b, uint64_t num_docs, const char *blob, const uint64_t *off);
/* The pooled input of a build with a pool factor or a global cut (b->o), the cut's
 * height recorded in b; TT_OK with *pool left NULL when b->o pools nothing. */
typedef struct tt_pooled tt_pooled;
int tt_build_pool(builder *b, tt_input *in, tt_pooled **pool);
/* The assigner for b's centroids (b->o->assign, seed, threads). */
int tt_build_make_assigner(builder *b);
/* Frees what the builder allocated (not the input, the lock or the output path). */
void tt_build_free(builder *b);
/* pooled.c: token pooling as an input transform. The input whose documents are src's,
 * each pooled with spec->factor (>= 2; quant/pool.h) when it is read, or, with a factor
 * < 2, by one cut of every document's dendrogram at a height: spec->threshold when it
 * is >= 0, else the height that leaves about 1/spec->global (> 1) of the vectors, found
 * by a first pass over the documents (a second finds each one's pooled length; cancel
 * is checked and progress reported between batches of them). Its doclens are the
 * pooled lengths, its input_lens src's; ids are src's (lent: src must outlive it and
 * keep them). Source vectors are validated and, with normalize, L2-normalised before
 * they are clustered; the means are left as they are (the build normalises what it
 * reads). Documents are pooled on up to `threads` threads, in batches that, with the
 * work spaces, fit in a quarter of memory_bytes; a document too long for that is
 * TT_ENOMEM naming it. Errors when reading: those of src and of tt_prepare_vectors. */
typedef struct tt_pooled tt_pooled;
typedef struct tt_pool_spec {
    uint32_t factor;            /* >= 2: by this factor; else one cut: */
    double global, threshold;   /* the height threshold if >= 0, else for 1/global */
    int normalize, threads;
    uint64_t memory_bytes;
    const volatile int *cancel; /* may be NULL */
    tt_progress_fn progress;    /* may be NULL: the cut's passes, "pool heights" and
                                 * "pool lengths", in documents */
    void *progress_user;
} tt_pool_spec;
int tt_pooled_open(tt_pooled **out, tt_input *src, const tt_pool_spec *spec);
tt_input *tt_pooled_input(tt_pooled *p);
/* The global cut's height (NaN when pooled by a factor). */
double tt_pooled_threshold(const tt_pooled *p);
void tt_pooled_free(tt_pooled *p);
/* sparse_write.c: checks that set holds one record per document of in (and, with
 * check_ids and ids in `in`, the same ids in the same order); writes the segment's
 * sparse.tt from it. */
int tt_build_check_sparse(const tt_sparse_set *set, const tt_input *in, bool check_ids);
int tt_build_write_sparse(builder *b, const tt_sparse_set *set);
/* The sparse.tt of a shard: records [r0, r0 + n) of set, each term's quantization
 * scale the whole set's (so that a sharded index scores as the unsharded one). */
int tt_build_write_sparse_range(builder *b, const tt_sparse_set *set, uint64_t r0, uint64_t n);
/* The same with the terms' scales given where fixed (one per term of set) holds one
 * (tt_sparse_payload_fixed): a reshard's shard, whose weights keep their source's. */
int tt_build_write_sparse_fixed(builder *b, const tt_sparse_set *set, uint64_t r0, uint64_t n,
                                const float *fixed);
/* The index's vocab.tt (named with b's prefix) from set's vocabulary; nothing when
 * the set has none. Written by a build (every shard of a sharded one). */
int tt_build_write_vocab(builder *b, const tt_sparse_set *set);
/* publish.c: resolves and locks OUT, checks what is there (before any work), removes
 * killed builds' leftovers and creates the build directory; publishes it; and at the
 * end (status: the build's result, whose message is kept) removes what is left of the
 * build directory and releases the lock. */
int tt_build_prepare_output(builder *b, const char *out_dir);
int tt_build_publish(builder *b);
void tt_build_discard(builder *b, int status);
/* shards.c: a sharded build (b->o->shards >= 2) after training: shards first,
 * first + stride, ... of b->o->shards, each an index directory shard-NNNN in the build
 * directory with the documents [D*s/S, D*(s+1)/S) of b->in; with every shard
 * (first 0, stride 1) also the SHARDS file. _finish writes SHARDS from a list
 * (index/shards.h); _discard removes the shards' files from the build directory (a
 * failed build; tt_build_discard removes the rest). */
struct tt_shards_file;
int tt_build_shards(builder *b, uint32_t first, uint32_t stride, double t0);
int tt_build_shards_finish(builder *b, const struct tt_shards_file *f);
void tt_build_shards_discard(builder *b);
/* The whole build of one process of b->o->group (a sharded build by several
 * processes, tartan-mpi build): rank 0 prepares OUT and trains; every rank writes its
 * shards; rank 0 writes SHARDS and publishes once every rank succeeded. Every process
 * passes the same sync points whatever happens. */
/* Removes the shards (shard-NNNN holding only index files) and SHARDS from a killed
 * sharded build's directory `name` in pfd (path for messages), so that the removal of
 * the directory itself can follow. Best effort. */
void tt_shards_remove_stale(int pfd, const char *name, const char *path);
/* (tt_build_in_group) st0: this process's status so far (reading the metadata), agreed
 * on at the first sync point. */
int tt_build_in_group(builder *b, const char *out_dir, tt_input *in, tt_pooled **pool,
                      double t0, int st0);

#endif

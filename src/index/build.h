/* Index build internals: the builder shared by the phases of tt_build, one file each:
 * build.c (options, small files, the pipeline), train.c (sample, k-means, codec),
 * encode.c (the encode pass and the IVF), publish.c (moving the result into place). */
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
    uint32_t dim, K, nbits;
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
} builder;

/* Reports progress; TT_ECANCELED (with a message) once the caller's cancel flag is set,
 * which every phase checks at least once per chunk of work. */
int tt_build_progress(builder *b, const char *phase, uint64_t done, uint64_t total);
int tt_build_cancelled(const builder *b);
int tt_build_add_manifest(builder *b, const tt_fwriter *w, const char *name, uint64_t size);
/* Normalises (if asked) and validates n vectors that start at global vector v0. */
int tt_build_prepare_vectors(builder *b, float *x, uint64_t v0, uint64_t n);

/* train.c: the training sample, k-means, the assigner and the codec. */
int tt_build_train(builder *b);
/* encode.c: every vector encoded into codes.tt, residuals.tt (and originals.tt), then
 * the IVF written from the codes. */
int tt_build_encode(builder *b, uint64_t *codes_size);
int tt_build_write_ivf(builder *b);
/* publish.c: resolves and locks OUT, checks what is there (before any work), removes
 * killed builds' leftovers and creates the build directory; publishes it; and at the
 * end (status: the build's result, whose message is kept) removes what is left of the
 * build directory and releases the lock. */
int tt_build_prepare_output(builder *b, const char *out_dir);
int tt_build_publish(builder *b);
void tt_build_discard(builder *b, int status);

#endif

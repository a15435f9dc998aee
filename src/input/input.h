/* The corpus a build reads: (vector file, doclens file) pairs concatenated in order,
 * plus an optional file of external document ids (struct tt_input of tartan.h). */
#ifndef TT_INPUT_H
#define TT_INPUT_H

#include "input/npy.h"

struct tt_input {
    size_t nfiles;
    tt_vecfile *files;
    uint64_t *file_vec0;   /* nfiles+1: first global vector of each file */
    uint64_t *file_doc0;   /* nfiles+1: first global document of each file */
    uint32_t *doclens;     /* num_docs */
    uint64_t *doc_vec0;    /* num_docs+1: first vector of each document */
    uint32_t dim;
    uint64_t num_docs, num_vectors;
    char *ids_blob;        /* ids, each NUL-terminated (trailing '\r' dropped); NULL if none */
    uint64_t *id_off;      /* num_docs+1 offsets: id i = ids_blob[id_off[i], id_off[i+1]-1) */
    char *ids_path;
    /* Instead of files: vectors read by a callback (the live documents of an index, for
     * a compaction that retrains); `source` names them in messages. */
    int (*read_fn)(void *user, uint64_t v0, uint64_t n, float *out);
    void *read_user;
    const char *source;
    /* Documents that were pooled (index/pooled.c, or a compaction of pooled segments):
     * the number of vectors each had before pooling, and their sum; NULL when the
     * documents were not pooled (their lengths are doclens). */
    const uint32_t *input_lens;
    uint64_t input_vectors;
    /* tt_input_from_memory's blocks (input/memory.c), freed with the input; NULL for
     * files and callbacks. */
    struct tt_input_mem *mem;
};

typedef struct tt_input_mem tt_input_mem;
void tt_input_mem_free(tt_input_mem *m);

/* Reads global vectors [v0, v0+n) (may span files) as float32 into out (n*dim floats).
 * Thread-safe. Errors: TT_EINVAL (range), and those of tt_vecfile_read. */
int tt_input_read(const tt_input *in, uint64_t v0, uint64_t n, float *out);
/* Where global vector v comes from, for messages: the file (or `source`) and the row in
 * it, and the document holding it. */
void tt_input_locate(const tt_input *in, uint64_t v, const char **path, uint64_t *row,
                     uint64_t *doc);

#endif

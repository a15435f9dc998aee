/* Fuzz target: the .npy reader on arbitrary bytes. The input is one .npy file: its
 * header goes through tt_npy_parse_header (from memory), then the file through
 * tt_vecfile_open + tt_vecfile_read of every row, tt_npy_read_ints,
 * tt_npy_read_floats and tt_queries_load. Seeds: tests/files/{good,bad,unsupported}. */
#include "fuzz.h"
#include "input/input.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_dir();
    return 0;
}

/* Reads every row of an open vector file. The file size bounds rows * row_bytes, so
 * the float buffer is at most twice the input (float16 rows widen to float32). */
static void read_all(const tt_vecfile *vf) {
    uint64_t n = vf->rows, chunk = 64;
    float *buf = malloc((size_t)(chunk * vf->dim * sizeof(float)));
    if (!buf)
        return;
    for (uint64_t r = 0; r < n; r += chunk) {
        uint64_t m = n - r < chunk ? n - r : chunk;
        if (tt_vecfile_read(vf, r, m, buf) != TT_OK)
            break;
    }
    /* Out-of-range requests must be refused, not read. */
    if (tt_vecfile_read(vf, n, 1, buf) == TT_OK)
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fds = fz_count_fds();
    tt_npy_header h;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        if (tt_npy_parse_header(data, size, "fuzz.npy", bf16, &h) == TT_OK &&
            (h.data_offset > size || h.ndim < 0 || h.ndim > 3))
            abort(); /* the contract: data_offset <= len, ndim <= 3 */
    }
    const char *path = fz_write("fuzz.npy", data, size);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        tt_vecfile vf;
        if (tt_vecfile_open(&vf, path, bf16) == TT_OK) {
            read_all(&vf);
            tt_vecfile_close(&vf);
        }
    }
    int64_t *ints = NULL;
    uint64_t n = 0;
    if (tt_npy_read_ints(path, &ints, &n) == TT_OK && n && ints)
        (void)ints[n - 1];
    free(ints);
    float *fl = NULL;
    if (tt_npy_read_floats(path, &fl, &h) == TT_OK) {
        uint64_t count = h.shape[0] * h.shape[1] * h.shape[2];
        if (count)
            (void)fl[count - 1];
    }
    free(fl);
    /* As query vectors (tt_queries_load, src/search.c): alone, and with the same file
     * as the query lengths. Every loaded query must lie inside the vectors. */
    for (int with_lens = 0; with_lens < 2; with_lens++) {
        tt_queries *q = NULL;
        if (tt_queries_load(&q, path, with_lens ? path : NULL, NULL) == TT_OK) {
            for (uint64_t i = 0; i < q->num_queries; i++)
                if (!q->lens[i] || q->offsets[i] + q->lens[i] > q->num_vectors || !q->ids[i])
                    abort();
        }
        tt_queries_free(q);
    }
    if (fz_count_fds() != fds)
        abort(); /* a descriptor leaked */
    return 0;
}

/* Fuzz target: the .fvecs reader on arbitrary bytes (int32 dim + dim float32 per
 * record): tt_vecfile_open and tt_vecfile_read of every row, which checks each row's
 * dimension prefix. Seeds: the .fvecs files of tests/files/{good,bad}. */
#include "fuzz.h"
#include "input/input.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_dir();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("fuzz.fvecs", data, size);
    int fds = fz_count_fds();
    tt_vecfile vf;
    if (tt_vecfile_open(&vf, path, 0) != TT_OK) {
        if (fz_count_fds() != fds)
            abort(); /* a failed open leaked its descriptor */
        return 0;
    }
    /* rows * (4 + 4 * dim) <= size: the buffer is bounded by the input. */
    float *buf = malloc((size_t)vf.dim * sizeof(float) * 16);
    for (uint64_t r = 0; buf && r < vf.rows; r += 16) {
        uint64_t m = vf.rows - r < 16 ? vf.rows - r : 16;
        if (tt_vecfile_read(&vf, r, m, buf) != TT_OK)
            break;
    }
    if (buf && tt_vecfile_read(&vf, vf.rows, 1, buf) == TT_OK)
        abort();
    free(buf);
    tt_vecfile_close(&vf);
    return 0;
}

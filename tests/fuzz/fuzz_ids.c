/* Fuzz target: the external-id file of a corpus (tt_input_open's --ids parser). A
 * fixed valid corpus of 6 vectors in 3 documents is written once; the input is the ids
 * file. On success every id must be a NUL-terminated string of the recorded length. */
#include "fuzz.h"
#include "input/input.h"

#include <stdio.h>
#include <stdlib.h>

static const char *vec_path, *len_path;
static char vec_buf[512], len_buf[512];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    float x[6 * 4];
    int64_t lens[3] = {2, 1, 3};
    tt_npy_writer w;
    for (int i = 0; i < 24; i++)
        x[i] = (float)(i + 1) / 8.0f;
    snprintf(vec_buf, sizeof vec_buf, "%s/vectors.npy", fz_dir());
    snprintf(len_buf, sizeof len_buf, "%s/doclens.npy", fz_dir());
    if (tt_npy_writer_open(&w, vec_buf, TT_DT_F32, 4) || tt_npy_writer_append(&w, x, 6) ||
        tt_npy_writer_close(&w) || tt_npy_writer_open(&w, len_buf, TT_DT_I64, 0) ||
        tt_npy_writer_append(&w, lens, 3) || tt_npy_writer_close(&w)) {
        fprintf(stderr, "fuzz_ids: cannot write the corpus: %s\n", tt_last_error());
        abort();
    }
    vec_path = vec_buf;
    len_path = len_buf;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *ids = fz_write("ids.txt", data, size);
    int fds = fz_count_fds();
    tt_input *in = NULL;
    if (tt_input_open(&in, 1, &vec_path, &len_path, ids, NULL) == TT_OK) {
        if (!in->ids_blob || !in->id_off || in->num_docs != 3)
            abort();
        for (uint64_t d = 0; d < in->num_docs; d++) {
            uint64_t a = in->id_off[d], b = in->id_off[d + 1];
            if (b <= a + 1 || strlen(in->ids_blob + a) != b - a - 1)
                abort();
        }
    }
    tt_input_free(in);
    if (fz_count_fds() != fds)
        abort(); /* a descriptor leaked */
    return 0;
}

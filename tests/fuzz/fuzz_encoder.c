/* Fuzz target: the encoder protocol parser (doc/encoder-protocol.md sections 2-4) on
 * arbitrary encoder output. Each input is what the "encoder" writes on its stdout:
 * the encoder is `sh -c 'exec cat "$0"' INPUTFILE --mode passage`, so tartan's real
 * session code (spawn, poll loop, hello, replies, end marker, reaping) reads exactly
 * the input bytes. Three records ("d1", "doc-2", "3") are sent. Checked: the sink
 * only sees records in order with finite vectors of the hello's dimension; a failure
 * has a message; no file descriptor leaks, no child is left (the library reaps).
 * Seeds: tests/fuzz/corpus/encoder (written when TT_FUZZ_WRITE_SEEDS=DIR is set). */
#include "encoder/encoder.h"
#include "fuzz.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char *const ids[] = {"d1", "doc-2", "3"};
static const char *const texts[] = {"first text", "", "third text, a little longer"};
#define NREC 3

typedef struct state {
    int next;        /* source: next record */
    uint64_t sunk;   /* sink: records delivered */
    uint32_t dim;
} state;

static int source(void *user, tt_record *rec) {
    state *s = user;
    if (s->next >= NREC)
        return 0;
    rec->id = ids[s->next];
    rec->id_len = strlen(ids[s->next]);
    rec->text = texts[s->next];
    rec->text_len = strlen(texts[s->next]);
    s->next++;
    return 1;
}

static int sink(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                const float *v) {
    state *s = user;
    if (index != s->sunk || index >= NREC || id_len != strlen(ids[index]) ||
        memcmp(id, ids[index], id_len))
        abort(); /* replies arrive in order, with the request's id */
    for (uint64_t i = 0; i < (uint64_t)n * s->dim; i++)
        if (!isfinite(v[i]))
            abort(); /* the protocol promises finite values */
    s->sunk++;
    return 0;
}

static void put32(FILE *f, uint32_t v) {
    uint8_t b[4];
    tt_wr32(b, v);
    fwrite(b, 1, 4, f);
}

/* A valid session (f32 or f16, dim 3, 2 vectors per record) and a few broken ones. */
static void write_seeds(const char *dir) {
    mkdir(dir, 0755);
    for (int variant = 0; variant < 6; variant++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/session-%d", dir, variant);
        FILE *f = fopen(p, "wb");
        if (!f)
            abort();
        int f16 = variant == 1;
        fprintf(f, "TARTAN-ENCODER 1 3 %s %d fuzz encoder\n", f16 ? "f16" : "f32",
                variant == 2 ? 1 : 8);
        for (int r = 0; r < NREC; r++) {
            fwrite("VECS", 1, 4, f);
            uint32_t len = (uint32_t)strlen(ids[r]);
            put32(f, len);
            fwrite(ids[variant == 3 ? (r + 1) % NREC : r], 1,
                   strlen(ids[variant == 3 ? (r + 1) % NREC : r]), f);
            put32(f, 2);
            for (int i = 0; i < 6; i++) {
                float x = (float)(r * 6 + i) / 8.0f;
                if (variant == 4 && r == 1 && i == 4)
                    x = NAN;
                if (f16) {
                    uint8_t b[2];
                    tt_wr16(b, tt_f32_to_f16(x));
                    fwrite(b, 1, 2, f);
                } else {
                    uint8_t b[4];
                    tt_wrf32(b, x);
                    fwrite(b, 1, 4, f);
                }
            }
        }
        if (variant != 5) {
            uint8_t b[8];
            fwrite("DONE", 1, 4, f);
            tt_wr64(b, NREC);
            fwrite(b, 1, 8, f);
        }
        fclose(f);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *seeds = getenv("TT_FUZZ_WRITE_SEEDS");
    if (seeds && *seeds) {
        write_seeds(seeds);
        printf("fuzz_encoder: seeds written to %s\n", seeds);
        exit(0);
    }
    fz_dir();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_write("encoder-output", data, size);
    const char *argv[] = {"/bin/sh", "-c", "exec cat \"$0\"", path, NULL};
    int fds = fz_count_fds();
    tt_encoder_options o;
    tt_encoder_options_init(&o);
    o.timeout_ms = 5000; /* cat never stalls: a timeout would be a bug */
    o.startup_timeout_ms = 5000;
    tt_encoder *enc = NULL;
    int st = tt_encoder_start_argv(&enc, argv, TT_ENC_PASSAGE, &o);
    if ((st == TT_OK) != (enc != NULL))
        abort();
    if (st == TT_OK) {
        state s = {0, 0, tt_encoder_dim(enc)};
        if (s.dim == 0 || s.dim > TT_ENC_MAX_DIM || !tt_encoder_description(enc))
            abort();
        st = tt_encoder_run(enc, source, &s, sink, &s);
        if (st == TT_OK && s.sunk != NREC)
            abort(); /* success means every record was answered */
        tt_encoder_free(enc);
    }
    if (st == TT_ETIMEOUT)
        abort();
    if (st != TT_OK && !*tt_last_error())
        abort();
    if (fz_count_fds() != fds)
        abort(); /* every pipe closed */
    if (waitpid(-1, NULL, WNOHANG) > 0)
        abort(); /* the library reaps its children itself */
    return 0;
}

/* Fuzz target: the encoder's input parsers (src/encoder.c): the BEIR JSON-lines and
 * TSV record readers, the JSON field extractor and the no-shell command splitter.
 * Byte 0 picks the record format (JSONL, TSV, by content) and mode; the rest is the
 * file. Every record returned must satisfy the protocol's limits (id 1..4096 bytes
 * without control characters, text <= 64 MiB). Seeds: tests/fuzz/corpus/records. */
#include "encoder/encoder.h"
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_dir();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    static const char *const fnames[] = {"in.jsonl", "in.tsv", "in.dat"};
    static const int formats[] = {TT_REC_JSONL, TT_REC_TSV, TT_REC_AUTO};
    int sel = data[0] % 3, mode = (data[0] >> 2) & 1 ? TT_ENC_QUERY : TT_ENC_PASSAGE;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    const char *path = fz_write(fnames[sel], body, n);

    int fds = fz_count_fds();
    tt_records *r = NULL;
    if (tt_records_open(&r, path, formats[sel], mode) == TT_OK) {
        tt_record rec;
        int st;
        uint64_t count = 0;
        while ((st = tt_records_next(r, &rec)) == 1) {
            if (tt_record_id_problem(rec.id, rec.id_len) || rec.text_len > TT_ENC_MAX_TEXT)
                abort();
            volatile unsigned sink = 0;
            for (size_t i = 0; i < rec.text_len; i++)
                sink += (unsigned char)rec.text[i];
            (void)sink;
            count++;
        }
        if (st < 0 && !*tt_last_error())
            abort();
        /* tt_records_count (the progress total) is only a hint: not compared. */
        (void)tt_records_count(path, tt_records_format(r));
        (void)count;
        tt_records_close(r);
    }
    if (fz_count_fds() != fds)
        abort(); /* a descriptor leaked */

    /* JSON fields of the whole body as one object */
    static const char *const keys[] = {"_id", "title", "text"};
    tt_sbuf vals[3] = {{0}, {0}, {0}};
    int kinds[3];
    size_t col;
    const char *what;
    if (tt_json_fields((const char *)body, n, 3, keys, vals, kinds, &col, &what) == TT_EPARSE &&
        (col > n || !what))
        abort();
    for (int i = 0; i < 3; i++)
        tt_sbuf_free(&vals[i]);

    /* the body as an encoder command line */
    char *cmd = malloc(n + 1);
    if (cmd) {
        memcpy(cmd, body, n);
        cmd[n] = '\0';
        char **argv = NULL;
        size_t argc = 0;
        if (tt_split_command(cmd, &argv, &argc) == TT_OK) {
            if (!argv || argc == 0 || argv[argc] != NULL)
                abort();
            for (size_t i = 0; i < argc; i++)
                if (!argv[i])
                    abort();
        }
        tt_argv_free(argv);
        free(cmd);
    }
    return 0;
}

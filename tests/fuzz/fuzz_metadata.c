/* Fuzz target: the metadata JSON Lines reader (src/meta/write.c over
 * tt_json_members in src/input/json.c) and the database it makes. Byte 0 gives the
 * number of documents (1..8, row numbers as ids); the rest is the file. A file that is
 * accepted must give exactly one row per document, a database that passes SQLite's
 * integrity check, and a JSON object for every row; one that is refused must say why.
 * Seeds: tests/fuzz/corpus/metadata. */
#include "fuzz.h"
#include "input/records.h"
#include "meta/meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    fz_dir();
    return 0;
}

static int count_member(void *user, const char *name, size_t len, int kind, const char *val,
                        size_t vlen) {
    (void)val;
    if (strlen(name) > len || strlen(val) > vlen || kind < TT_JSON_STRING || kind > TT_JSON_NULL)
        abort();
    (*(size_t *)user)++;
    return TT_OK;
}

static bool all_live(const void *user, uint64_t row) {
    (void)user;
    (void)row;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint64_t ndocs = 1 + data[0] % 8;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    const char *path = fz_write("m.jsonl", body, n);
    int fds = fz_count_fds();

    size_t members = 0, col = 0;
    const char *what = NULL;
    int st = tt_json_members((const char *)body, n, count_member, &members, &col, &what);
    if (st == TT_EPARSE && (col > n || !what))
        abort();

    tt_mdb m;
    if (tt_mdb_create(&m) != TT_OK)
        abort();
    tt_err_clear();
    st = tt_mdb_read_jsonl(&m, path, 0, ndocs, NULL, NULL);
    if (st != TT_OK) {
        if (!*tt_last_error())
            abort();
        tt_mdb_free(&m);
    } else {
        uint64_t rows;
        if (tt_mdb_count(&m, &rows) != TT_OK || rows != ndocs)
            abort();
        tt_manifest_entry e;
        (void)unlink(fz_write("metadata.tt", "", 0));
        if (tt_mdb_write(&m, fz_dir(), "metadata.tt", &e) != TT_OK)
            abort();
        tt_mdb_free(&m);
        char full[4096];
        snprintf(full, sizeof full, "%s/metadata.tt", fz_dir());
        size_t fsize;
        uint8_t *img = fz_read(full, &fsize);
        if (!img || fsize < TT_HEADER_SIZE || fsize != e.size)
            abort();
        if (tt_mdb_verify(img + TT_HEADER_SIZE, fsize - TT_HEADER_SIZE, full, ndocs, ndocs,
                          all_live, NULL) != TT_OK)
            abort();
        sqlite3 *db;
        if (tt_mdb_open_ro(&db, img + TT_HEADER_SIZE, fsize - TT_HEADER_SIZE, full) != TT_OK)
            abort();
        for (uint64_t r = 0; r < ndocs; r++) {
            char *js;
            if (tt_mdb_row_json(db, full, r, &js) != TT_OK || js[0] != '{')
                abort();
            free(js);
        }
        tt_filter *f;
        if (tt_mdb_where(db, full, "row >= 0", ndocs, &f) != TT_OK ||
            tt_filter_count(f) != ndocs)
            abort();
        tt_filter_free(f);
        sqlite3_close(db);
        free(img);
    }
    if (fz_count_fds() != fds)
        abort(); /* a descriptor leaked */
    return 0;
}

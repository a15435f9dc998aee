/* Helpers shared by the Check unit tests. */
#ifndef TT_TESTUTIL_H
#define TT_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "input/input.h"

#define TT_SKIP 77

/* Directory of the shared test data (../shared/data), or NULL if absent. */
static inline const char *tu_data_dir(void) {
    const char *d = getenv("TT_DATA");
    static char buf[4096];
    if (!d || !*d) {
        const char *src = getenv("TT_SRCDIR");
        snprintf(buf, sizeof buf, "%s/../shared/data", src ? src : "..");
        d = buf;
    }
    struct stat st;
    return stat(d, &st) == 0 && S_ISDIR(st.st_mode) ? d : NULL;
}

/* A fresh temporary directory (malloc'd path). */
static inline char *tu_tmpdir(void) {
    char tmpl[] = "/tmp/tartan-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static inline void tu_rmrf(const char *path) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) { /* best effort */ }
}

/* Writes a whole file. */
static inline int tu_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* Writes rows x cols values of dtype as a .npy file (cols 0: 1-D). Returns the status
 * of the first step that failed (a failed append removes the file). */
static inline int tu_write_npy(const char *path, tt_dtype dtype, uint32_t cols, const void *data,
                               uint64_t rows) {
    tt_npy_writer w;
    int st = tt_npy_writer_open(&w, path, dtype, cols);
    if (st)
        return st;
    if ((st = tt_npy_writer_append(&w, data, rows))) {
        tt_npy_writer_abort(&w);
        return st;
    }
    return tt_npy_writer_close(&w);
}

/* Clustered synthetic vectors: `nclusters` random unit centres; each vector is its
 * centre plus N(0, noise^2) per dimension, normalised. Reproducible for a seed.
 * labels (may be NULL) receives each vector's cluster. */
static inline void tu_clustered(float *x, uint64_t n, uint32_t dim, uint32_t nclusters, float noise,
                                uint64_t seed, uint32_t *labels) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    float *c = malloc((size_t)nclusters * dim * sizeof *c);
    for (uint64_t i = 0; i < (uint64_t)nclusters * dim; i++) {
        double u1 = tt_rng_uniform(&r) + 1e-12, u2 = tt_rng_uniform(&r);
        c[i] = (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
    }
    tt_normalize_rows(c, nclusters, dim);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t k = (uint32_t)tt_rng_below(&r, nclusters);
        if (labels)
            labels[i] = k;
        for (uint32_t j = 0; j < dim; j++) {
            double u1 = tt_rng_uniform(&r) + 1e-12, u2 = tt_rng_uniform(&r);
            x[i * dim + j] = c[(uint64_t)k * dim + j] + noise * (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
        }
    }
    tt_normalize_rows(x, n, dim);
    free(c);
}

/* Runs a suite; returns the process exit code. */
static inline int tu_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif

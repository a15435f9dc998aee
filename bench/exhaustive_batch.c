/* One pass for many exhaustive queries (doc/benchmarks.md, "One pass for many
 * exhaustive queries"): N calibration pseudo-queries searched in a reference mode query
 * by query (tt_search_batch with per-query times) and in one pass over the index
 * (tt_search_batch without them: src/search/scan_batch.c), wall-clock seconds of each
 * and whether the two returned the same top K, documents and scores bit for bit.
 *
 * usage: exhaustive_batch INDEX THREADS QLEN N SCORE [exact]
 *   QLEN vectors per pseudo-query (0: the index's shape), SCORE 0 sum, 1 mean; K = 100;
 *   exact: the exact mode (float16 originals) instead of the exhaustive one.
 *
 * Build (from a configured build directory B, after make):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -include B/config.h -I include -I src \
 *       bench/exhaustive_batch.c B/.libs/libtartan-internal.a -lopenblas -luring -lxxhash \
 *       -lsqlite3 -lm -lpthread -o exhaustive_batch
 * and run with OPENBLAS_NUM_THREADS=1. */
#include "tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K 100

int main(int argc, char **argv) {
    if (argc != 6 && !(argc == 7 && !strcmp(argv[6], "exact"))) {
        fprintf(stderr, "usage: exhaustive_batch INDEX THREADS QLEN N SCORE [exact]\n");
        return 2;
    }
    const int threads = atoi(argv[2]), score = atoi(argv[5]);
    const uint32_t qlen = (uint32_t)atoi(argv[3]), n = (uint32_t)atoi(argv[4]);
    tt_index *idx;
    tt_calib c;
    uint32_t used;
    if (tt_index_open(&idx, argv[1], NULL) ||
        tt_calib_init_pseudo(&c, idx, n, qlen, NAN, 42, TT_TUNE_COST_WORK, &used)) {
        fprintf(stderr, "%s\n", tt_last_error());
        return 1;
    }
    tt_hit *h1 = malloc(sizeof *h1 * K * n), *h2 = malloc(sizeof *h2 * K * n);
    uint32_t *n1 = malloc(sizeof *n1 * n), *n2 = malloc(sizeof *n2 * n);
    double *secs = malloc(sizeof *secs * n);
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = argc == 7 ? TT_MODE_EXACT : TT_MODE_EXHAUSTIVE;
    o.score = score;
    double t0 = tt_now();
    int st = tt_search_batch(idx, c.Q, c.qoffs, c.qlens, n, K, &o, threads, h1, n1, secs);
    double t1 = tt_now();
    st = st ? st : tt_search_batch(idx, c.Q, c.qoffs, c.qlens, n, K, &o, threads, h2, n2, NULL);
    double t2 = tt_now();
    if (st) {
        fprintf(stderr, "%s\n", tt_last_error());
        return 1;
    }
    uint64_t diff = 0;
    for (uint32_t q = 0; q < n; q++) {
        diff += n1[q] != n2[q];
        for (uint32_t i = 0; i < n1[q] && i < n2[q]; i++)
            diff += h1[q * K + i].doc != h2[q * K + i].doc ||
                    h1[q * K + i].score != h2[q * K + i].score;
    }
    printf("%s, %u queries of %u vectors, %d thread(s): query by query %.2f s, one pass "
           "%.2f s (%.1fx); hits that differ: %llu\n",
           argc == 7 ? "exact" : "exhaustive", n, used, threads, t1 - t0, t2 - t1, (t1 - t0) / (t2 - t1), (unsigned long long)diff);
    free(h1);
    free(h2);
    free(n1);
    free(n2);
    free(secs);
    tt_calib_free(&c);
    tt_index_close(idx);
    return diff != 0;
}

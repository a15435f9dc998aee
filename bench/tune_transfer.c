/* Pseudo-query calibration transfer (doc/benchmarks.md, "Pseudo-query calibration
 * transfer"): the recall@k against exhaustive search that pseudo-queries of one kind
 * predict for fixed parameter sets, to set beside what the real queries get with the
 * same sets (tartan search + bench/search_recall.py). A kind that predicts well makes
 * the calibration choose the set real queries need.
 *
 * usage: tune_transfer INDEX N NOISE OTHER OUTLIER QLEN SEED K SET...
 *   N pseudo-queries of QLEN vectors (0: the index's shape), Gaussian noise NOISE,
 *   share OTHER of the vectors from other documents, at most the share OUTLIER of a
 *   vector's energy on the sketched positions (-1: the defaults); each SET is
 *   nprobe:ndocs:margin:sketch[:groups[:ratio]] (groups: centroid groups per query
 *   vector, on an index whose calibration stored groups, default 0; ratio: the
 *   relative pruning ratio, default 0.5). Prints one line per set: recall@K and CPU
 *   ms/query.
 *
 * Build (from a configured build directory B, after make):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -include B/config.h -I include -I src \
 *       bench/tune_transfer.c B/.libs/libtartan-internal.a -lopenblas -luring -lxxhash \
 *       -lsqlite3 -lm -lpthread -o tune_transfer */
#include "tune/tune.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 10) {
        fprintf(stderr, "usage: tune_transfer INDEX N NOISE OTHER OUTLIER QLEN SEED K SET...\n");
        return 2;
    }
    tt_index *idx = NULL;
    if (tt_index_open(&idx, argv[1], NULL)) {
        fprintf(stderr, "tune_transfer: %s\n", tt_last_error());
        return 1;
    }
    uint32_t n = (uint32_t)atoi(argv[2]), qlen = (uint32_t)atoi(argv[6]), k = (uint32_t)atoi(argv[8]);
    float noise = strtof(argv[3], NULL);
    double other = strtod(argv[4], NULL), outlier = strtod(argv[5], NULL);
    uint64_t seed = strtoull(argv[7], NULL, 10);
    tt_calib c;
    uint32_t used = 0;
    if (tt_calib_init_pseudo_mix(&c, idx, n, qlen, noise, other, outlier, seed, TT_TUNE_COST_TIME, &used) ||
        tt_calib_truth(&c, 2)) {
        fprintf(stderr, "tune_transfer: %s\n", tt_last_error());
        return 1;
    }
    for (int a = 9; a < argc; a++) {
        int np = 0, sk = 1;
        unsigned nd = 0, groups = 0;
        float margin = 1, ratio = 0.5f;
        if (sscanf(argv[a], "%d:%u:%f:%d:%u:%f", &np, &nd, &margin, &sk, &groups, &ratio) < 4) {
            fprintf(stderr, "tune_transfer: bad set %s\n", argv[a]);
            return 2;
        }
        tt_tuned t;
        double cost;
        c.cgroups = groups;
        if (tt_calib_measure(&c, k, np, nd, ratio, margin, sk, &t, &cost)) {
            fprintf(stderr, "tune_transfer: %s\n", tt_last_error());
            return 1;
        }
        printf("noise %.2f other %.2f outlier %.2f qlen %u seed %llu set %s: recall@%u %.3f, %.2f ms\n",
               (double)noise, other, outlier, used, (unsigned long long)seed, argv[a], k, t.recall, t.ms);
        fflush(stdout);
    }
    tt_calib_free(&c);
    tt_index_close(idx);
    return 0;
}

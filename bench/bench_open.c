/* What opening an index costs, and the part of it spent verifying the payload checksums
 * of the resident files (everything search keeps in memory: all but the residuals and
 * the originals), in one run: tt_index_open + tt_index_close R times (median), then the
 * checksums alone over the same files, R times (median), warm page cache.
 *
 * Built by `make` as bench/bench_open (not installed).
 * Usage: bench/bench_open INDEX_DIR [REPS] */
#include "benchutil.h"
#include "index/index.h"

#include <stdio.h>
#include <stdlib.h>

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_dcmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_open INDEX_DIR [REPS]\n");
        return 2;
    }
    const int reps = argc > 2 ? atoi(argv[2]) : 21;
    double *t_open = malloc((size_t)reps * sizeof *t_open);
    double *t_sum = malloc((size_t)reps * sizeof *t_sum);
    tt_index *idx = NULL;
    uint64_t bytes = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_wall();
        if (tt_index_open(&idx, argv[1], NULL)) {
            fprintf(stderr, "bench_open: %s\n", tt_last_error());
            return 1;
        }
        t_open[r] = bench_wall() - t0;
        const tt_fmap *res[3 + 5 * 64];
        size_t nres = 0;
        res[nres++] = &idx->f_meta;
        res[nres++] = &idx->f_centroids;
        res[nres++] = &idx->f_codec;
        for (uint32_t s = 0; s < idx->nseg && s < 64; s++) {
            const tt_segment *sg = &idx->seg[s];
            const tt_fmap *fs[] = {&sg->f_doclens, &sg->f_codes, &sg->f_ivf, &sg->f_ids,
                                   &sg->f_idmap};
            for (size_t i = 0; i < 5; i++)
                res[nres++] = fs[i];
        }
        t0 = bench_wall();
        bytes = 0;
        for (size_t i = 0; i < nres; i++) {
            if (!res[i]->base)
                continue;
            if (tt_fmap_check_payload(res[i], NULL, NULL)) {
                fprintf(stderr, "bench_open: %s\n", tt_last_error());
                return 1;
            }
            bytes += res[i]->h.payload_bytes;
        }
        t_sum[r] = bench_wall() - t0;
        if (r + 1 < reps)
            tt_index_close(idx);
    }
    tt_index_info info;
    tt_index_get_info(idx, &info);
    double o = median(t_open, reps), c = median(t_sum, reps);
    printf("index %s: %llu vectors, %llu documents, %u centroids x %u dims\n", argv[1],
           (unsigned long long)info.num_vectors, (unsigned long long)info.num_docs,
           info.num_centroids, info.dim);
    printf("open+close (median of %d): %.2f ms; checksums of the %.2f MiB resident: %.2f ms "
           "(%.0f%% of open, %.1f GB/s)\n", reps, o * 1e3, (double)bytes / 1048576.0, c * 1e3,
           100.0 * c / o, (double)bytes / c / 1e9);
    tt_index_close(idx);
    free(t_open);
    free(t_sum);
    return 0;
}

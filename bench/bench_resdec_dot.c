/* Stage 4's residual kernels on an index's own residuals: <q_i, r_j> for the first N
 * vectors of INDEX (its codec, the packed bytes of its residuals.tt) against NQ random
 * query rows, by every path this CPU has: the fused kernel (tt_resdec_dot: AVX-512 and
 * AVX2, where the CPU has them) and decode + sgemm (the path without them). The methods
 * are interleaved within each repetition; prints thread CPU time per vector (median and
 * minimum over the repetitions) and the largest difference from decode + sgemm.
 *
 * Built by `make` as bench/bench_resdec_dot (not installed).
 * Usage: OPENBLAS_NUM_THREADS=1 bench/bench_resdec_dot INDEX NQ [N] [REPS]
 *   NQ 4 or 8 (the fused kernel's query sizes); INDEX a one-segment index. */
#include "search/search.h"
#include "benchutil.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

enum { NMETHOD = 3 }; /* decode + sgemm, AVX2 fused, AVX-512 fused */

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_resdec_dot INDEX NQ [N] [REPS]\n");
        return 2;
    }
    const uint32_t nq = (uint32_t)atoi(argv[2]);
    uint64_t n = argc > 3 ? strtoull(argv[3], NULL, 10) : 4096;
    const int reps = argc > 4 ? atoi(argv[4]) : 21;
    if ((nq != 4 && nq != 8) || n == 0 || reps < 1) {
        fprintf(stderr, "bench_resdec_dot: NQ must be 4 or 8, N and REPS positive\n");
        return 2;
    }
    tt_index *idx = NULL;
    if (tt_index_open(&idx, argv[1], NULL)) {
        fprintf(stderr, "bench_resdec_dot: %s\n", tt_last_error());
        return 1;
    }
    const uint32_t dim = idx->dim;
    const uint64_t bpv = idx->res_bytes;
    if (n > idx->num_vectors)
        n = idx->num_vectors;
    char path[4096];
    snprintf(path, sizeof path, "%s/residuals.tt", argv[1]);
    FILE *f = fopen(path, "rb");
    uint8_t *packed = malloc(n * bpv);
    if (!f || !packed || fseek(f, 64, SEEK_SET) || fread(packed, bpv, n, f) != n) {
        fprintf(stderr, "bench_resdec_dot: cannot read %llu vectors of %s\n",
                (unsigned long long)n, path);
        return 1;
    }
    fclose(f);
    tt_resdec d;
    if (tt_resdec_init(&d, &idx->codec)) {
        fprintf(stderr, "bench_resdec_dot: %s\n", tt_last_error());
        return 1;
    }
    const int a512 = d.avx512, a2 = d.avx2;
    float *Q = malloc((size_t)nq * dim * sizeof *Q), *x = malloc((size_t)dim * sizeof *x);
    float *R = malloc(n * dim * sizeof *R), *ref = malloc(n * nq * sizeof *ref);
    float *out = malloc(n * nq * sizeof *out);
    double *t[NMETHOD];
    for (int m = 0; m < NMETHOD; m++)
        t[m] = malloc((size_t)reps * sizeof *t[m]);
    if (!Q || !x || !R || !ref || !out || !t[0] || !t[1] || !t[2]) {
        fprintf(stderr, "bench_resdec_dot: out of memory\n");
        return 1;
    }
    tt_rng r;
    tt_rng_seed(&r, 7);
    for (uint64_t i = 0; i < (uint64_t)nq * dim; i++)
        Q[i] = bench_gauss(&r) / sqrtf((float)dim);
    double maxdiff[NMETHOD] = {0};
    for (int rep = 0; rep < reps; rep++)
        for (int m = 0; m < NMETHOD; m++) {
            if ((m == 1 && !a2) || (m == 2 && !a512))
                continue;
            d.avx512 = m == 2 ? a512 : 0;
            d.avx2 = m == 1 ? a2 : 0;
            double t0 = bench_cpu_now();
            if (m == 0) {
                tt_resdec_decode(&d, packed, n, R);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)nq, (int)dim,
                            1.0f, R, (int)dim, Q, (int)dim, 0.0f, ref, (int)nq);
            } else {
                /* per document of 16 vectors, as stage 4 calls it */
                for (uint64_t v = 0; v < n; v += 16)
                    tt_resdec_dot(&d, packed + v * bpv, n - v < 16 ? n - v : 16, Q, nq, x,
                                  out + v * nq);
            }
            t[m][rep] = bench_cpu_now() - t0;
            for (uint64_t i = 0; m && i < n * nq; i++)
                maxdiff[m] = fmax(maxdiff[m], fabs((double)out[i] - ref[i]));
        }
    d.avx512 = a512;
    d.avx2 = a2;
    static const char *name[NMETHOD] = {"decode + sgemm", "fused, AVX2", "fused, AVX-512"};
    printf("%s: %llu vectors x %u dims, %u query rows, %d reps\n", argv[1],
           (unsigned long long)n, dim, nq, reps);
    for (int m = 0; m < NMETHOD; m++) {
        if ((m == 1 && !a2) || (m == 2 && !a512))
            continue;
        qsort(t[m], (size_t)reps, sizeof *t[m], bench_dcmp);
        printf("  %-15s %8.3f us/vector  (min %.3f)  max |diff| %.2g\n", name[m],
               t[m][reps / 2] * 1e6 / (double)n, t[m][0] * 1e6 / (double)n, maxdiff[m]);
    }
    for (int m = 0; m < NMETHOD; m++)
        free(t[m]);
    free(Q), free(x), free(R), free(ref), free(out), free(packed);
    tt_resdec_free(&d);
    tt_index_close(idx);
    return 0;
}

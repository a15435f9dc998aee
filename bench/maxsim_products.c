/* MaxSim products of one stage-4 group, QR = R Qpᵀ (NROWS decoded rows of DIM floats,
 * NQP padded query rows): OpenBLAS's sgemm against tartan's own AVX-512 multiply-adds
 * (tt_maxsim_products_avx512 with Qt from 16 query rows, tt_maxsim_rowdot_avx512 below:
 * what tt_maxsim_group runs). Prints the median thread CPU time of each over REPS calls
 * and the largest difference.
 *
 * Built with the rest (B/bench/maxsim_products), or from a configured build directory B:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -include B/config.h -I include -I src \
 *       bench/maxsim_products.c B/.libs/libtartan-internal.a -lopenblas -luring -lxxhash \
 *       -lm -lpthread -o maxsim_products
 * Usage: OPENBLAS_NUM_THREADS=1 maxsim_products NROWS NQP DIM [REPS]
 * (OPENBLAS_CORETYPE=SkylakeX, Haswell... to time other sgemm kernels) */
#include "search/maxsim.h"
#include "benchutil.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s NROWS NQP DIM [REPS]\n", argv[0]);
        return 2;
    }
    const uint32_t nrows = (uint32_t)tt_maxsim_rows((uint64_t)atoi(argv[1]));
    const uint32_t nqp = (uint32_t)atoi(argv[2]), dim = (uint32_t)atoi(argv[3]);
    const int reps = argc > 4 ? atoi(argv[4]) : 201;
#ifdef TT_AVX512
    if (!__builtin_cpu_supports("avx512f") || nqp == 0 || nqp > TT_MAXSIM_OWN_MAX_NQP) {
        fprintf(stderr, "needs AVX-512 and 1 <= NQP <= %u\n", TT_MAXSIM_OWN_MAX_NQP);
        return 77;
    }
    tt_rng r;
    tt_rng_seed(&r, 5);
    float *R = malloc((size_t)nrows * dim * sizeof *R), *Qp = malloc((size_t)nqp * dim * 4);
    float *Qt = malloc((size_t)nqp * dim * 4), *A = malloc((size_t)nrows * nqp * 4);
    float *B = malloc((size_t)nrows * nqp * 4);
    double *ta = malloc(reps * sizeof *ta), *tb = malloc(reps * sizeof *tb);
    for (size_t i = 0; i < (size_t)nrows * dim; i++)
        R[i] = bench_gauss(&r);
    for (size_t i = 0; i < (size_t)nqp * dim; i++)
        Qp[i] = bench_gauss(&r);
    tt_maxsim_transpose(Qp, nqp, dim, Qt);
    const bool rowdot = nqp <= TT_MAXSIM_ROWDOT_MAX_NQP;
    for (int k = 0; k < reps; k++) {
        double t0 = bench_cpu_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nrows, (int)nqp, (int)dim,
                    1.0f, R, (int)dim, Qp, (int)dim, 0.0f, A, (int)nqp);
        double t1 = bench_cpu_now();
        if (rowdot)
            tt_maxsim_rowdot_avx512(Qp, nqp, dim, R, nrows, B);
        else
            tt_maxsim_products_avx512(Qt, nqp, dim, R, nrows, B);
        ta[k] = t1 - t0;
        tb[k] = bench_cpu_now() - t1;
    }
    double md = 0;
    for (size_t i = 0; i < (size_t)nrows * nqp; i++)
        md = fmax(md, fabs((double)A[i] - B[i]) / (1 + fabs((double)A[i])));
    qsort(ta, reps, sizeof *ta, bench_dcmp);
    qsort(tb, reps, sizeof *tb, bench_dcmp);
    printf("rows %u, nqp %u, dim %u: sgemm %.2f us, own%s %.2f us (%.2fx), largest relative "
           "difference %.2g\n",
           nrows, nqp, dim, ta[reps / 2] * 1e6, rowdot ? " (rowdot)" : "", tb[reps / 2] * 1e6,
           ta[reps / 2] / tb[reps / 2], md);
    free(R);
    free(Qp);
    free(Qt);
    free(A);
    free(B);
    free(ta);
    free(tb);
    return 0;
#else
    (void)nrows, (void)nqp, (void)dim, (void)reps;
    fprintf(stderr, "needs AVX-512\n");
    return 77;
#endif
}

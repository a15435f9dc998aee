/* Stage-1 centroid scores: float32 sgemm St = C·Qᵀ (what search did before) against
 * the int8 kernels of src/cscore.c (AVX-512 VNNI, AVX2, portable), on random unit
 * vectors. Prints thread CPU time per call (median of REPS) and the largest absolute
 * difference between the int8 and float32 scores.
 *
 * Built by `make` as bench/bench_cscore (not installed).
 * Usage: OPENBLAS_NUM_THREADS=1 bench/bench_cscore K DIM NQ [REPS] */
#include "quant/cscore.h"
#include "search/search.h"
#include "benchutil.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_cscore K DIM NQ [REPS]\n");
        return 2;
    }
    const uint32_t K = (uint32_t)atoi(argv[1]), dim = (uint32_t)atoi(argv[2]);
    const uint32_t nq = (uint32_t)atoi(argv[3]), nqp = tt_qpad(nq);
    const int reps = argc > 4 ? atoi(argv[4]) : 21;
    tt_rng r;
    tt_rng_seed(&r, 7);
    float *C = malloc((size_t)K * dim * sizeof *C), *Q = calloc((size_t)nqp * dim, sizeof *Q);
    for (size_t i = 0; i < (size_t)K * dim; i++)
        C[i] = bench_gauss(&r);
    for (size_t i = 0; i < (size_t)nq * dim; i++)
        Q[i] = bench_gauss(&r);
    tt_normalize_rows(C, K, dim);
    tt_normalize_rows(Q, nq, dim);
    tt_cq cq;
    if (tt_cq_init(&cq, C, K, dim)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint8_t *qp = tt_alloc_aligned(tt_cq_qpack_bytes(&cq, nqp), 1, 64, "query");
    float *qs = malloc(nqp * sizeof *qs);
    float *S32 = malloc((size_t)K * nqp * sizeof *S32), *S8 = malloc((size_t)K * nqp * sizeof *S8);
    double *t = malloc(reps * sizeof *t);
    static const char *names[] = {"portable", "avx2", "avx512-vnni"};

    for (int rep = 0; rep < reps; rep++) {
        double t0 = bench_cpu_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)K, (int)nqp, (int)dim, 1.0f, C,
                    (int)dim, Q, (int)dim, 0.0f, S32, (int)nqp);
        t[rep] = bench_cpu_now() - t0;
    }
    qsort(t, reps, sizeof *t, bench_dcmp);
    double base = t[reps / 2];
    printf("K %u dim %u nq %u: sgemm float32 %.3f ms\n", K, dim, nq, 1e3 * base);
    const int best = cq.kernel;
    for (int kern = best; kern >= TT_CQ_PORTABLE; kern--) {
        cq.kernel = kern;
        int n = kern == TT_CQ_PORTABLE ? (reps + 4) / 5 : reps;
        for (int rep = 0; rep < n; rep++) {
            double t0 = bench_cpu_now();
            tt_cq_query(&cq, Q, nq, nqp, qp, qs);
            tt_cq_scores(&cq, qp, qs, nqp, S8);
            t[rep] = bench_cpu_now() - t0;
        }
        qsort(t, n, sizeof *t, bench_dcmp);
        double err = 0;
        for (size_t i = 0; i < (size_t)K * nqp; i++)
            err = fmax(err, fabs((double)S8[i] - S32[i]));
        printf("  int8 %-12s %.3f ms (%.1fx sgemm), max |int8 - float32| %.4f\n", names[kern],
               1e3 * t[n / 2], base / t[n / 2], err);
    }
    tt_cq_free(&cq);
    free(C);
    free(Q);
    free(qp);
    free(qs);
    free(S32);
    free(S8);
    free(t);
    return 0;
}

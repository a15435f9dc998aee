/* Stage-1 centroid scores St ~ C·Qᵀ on random unit vectors: float32 sgemm (what search
 * did before the int8 table, and what it does where the CPU has no vector int8 kernel)
 * against every int8 kernel this CPU can run (AVX-512 VNNI, AVX2, SSE2, portable), each
 * through tt_cq_centroid_scores (the int8 ones include packing the query). The methods
 * are interleaved within each repetition, so that load from other jobs hits them alike;
 * prints thread CPU time per call (median over the repetitions; the portable loop runs
 * in every fifth), its ratio to sgemm's median, and the largest |int8 - float32|.
 *
 * To see what a CPU without AVX2 would get from OpenBLAS, force its kernels with
 * OPENBLAS_CORETYPE=Sandybridge (AVX) or Nehalem (SSE only); the line "openblas core"
 * says which ran.
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

enum { NMETHOD = 5 }; /* TT_CQ_F32 .. TT_CQ_VNNI */

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_cscore K DIM NQ [REPS]\n");
        return 2;
    }
    const uint32_t K = (uint32_t)atoi(argv[1]), dim = (uint32_t)atoi(argv[2]);
    const uint32_t nq = (uint32_t)atoi(argv[3]), nqp = tt_qpad(nq);
    const int reps = argc > 4 ? atoi(argv[4]) : 21;
    if (K == 0 || dim == 0 || nq == 0 || reps < 1) {
        fprintf(stderr, "bench_cscore: K, DIM, NQ and REPS must be positive\n");
        return 2;
    }
    tt_rng r;
    tt_rng_seed(&r, 7);
    float *C = malloc((size_t)K * dim * sizeof *C), *Q = calloc((size_t)nqp * dim, sizeof *Q);
    for (size_t i = 0; i < (size_t)K * dim; i++)
        C[i] = bench_gauss(&r);
    for (size_t i = 0; i < (size_t)nq * dim; i++)
        Q[i] = bench_gauss(&r);
    tt_normalize_rows(C, K, dim);
    tt_normalize_rows(Q, nq, dim);
    static const char *names[NMETHOD] = {"float32 sgemm", "int8 portable", "int8 sse2",
                                         "int8 avx2", "int8 avx512-vnni"};
    tt_cq cq[NMETHOD];
    int have[NMETHOD] = {0};
    for (int m = 0; m < NMETHOD; m++) {
        int kern = m - 1;
        if (!tt_cq_kernel_ok(kern))
            continue;
        if (tt_cq_init_kernel(&cq[m], C, K, dim, kern)) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        have[m] = 1;
    }
    uint8_t *qp = tt_alloc_aligned(tt_cq_qpack_bytes(&cq[0], nqp), 1, 64, "query");
    float *qs = malloc(nqp * sizeof *qs);
    float *S32 = malloc((size_t)K * nqp * sizeof *S32), *S = malloc((size_t)K * nqp * sizeof *S);
    double *t[NMETHOD], err[NMETHOD] = {0};
    int n[NMETHOD] = {0};
    for (int m = 0; m < NMETHOD; m++)
        t[m] = malloc(reps * sizeof *t[m]);
    for (int rep = 0; rep < reps; rep++)
        for (int m = 0; m < NMETHOD; m++) {
            if (!have[m] || (m == 1 + TT_CQ_PORTABLE && rep % 5))
                continue;
            float *out = m == 0 ? S32 : S;
            double t0 = bench_cpu_now();
            if (m == 0) /* what search did before: OpenBLAS directly */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)K, (int)nqp, (int)dim,
                            1.0f, C, (int)dim, Q, (int)dim, 0.0f, out, (int)nqp);
            else
                tt_cq_centroid_scores(&cq[m], Q, nq, nqp, qp, qs, out);
            t[m][n[m]++] = bench_cpu_now() - t0;
            for (size_t i = 0; m && i < (size_t)K * nqp; i++)
                err[m] = fmax(err[m], fabs((double)out[i] - S32[i]));
        }
    /* the library's float32 path must be the same product */
    tt_cq_centroid_scores(&cq[0], Q, nq, nqp, qp, qs, S);
    for (size_t i = 0; i < (size_t)K * nqp; i++)
        err[0] = fmax(err[0], fabs((double)S[i] - S32[i]));
    printf("K %u dim %u nq %u, %d reps", K, dim, nq, reps);
#ifdef OPENBLAS_VERSION
    printf(", openblas core %s", openblas_get_corename());
#endif
    printf(" (best kernel here: %s)\n", names[tt_cq_best_kernel() + 1]);
    double base = 0;
    for (int m = 0; m < NMETHOD; m++) {
        if (!have[m])
            continue;
        qsort(t[m], n[m], sizeof *t[m], bench_dcmp);
        double med = t[m][n[m] / 2];
        if (m == 0)
            base = med;
        printf("  %-17s %9.3f ms  %6.2fx sgemm  (min %.3f, max %.3f, n %d)  max |St - sgemm| %.4f\n",
               names[m], 1e3 * med, base / med, 1e3 * t[m][0], 1e3 * t[m][n[m] - 1], n[m],
               err[m]);
    }
    for (int m = 0; m < NMETHOD; m++) {
        if (have[m])
            tt_cq_free(&cq[m]);
        free(t[m]);
    }
    free(C);
    free(Q);
    free(qp);
    free(qs);
    free(S32);
    free(S);
    return 0;
}

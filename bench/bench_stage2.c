/* PLAID's centroid stages (stage 2: the pruned centroid interaction over every
 * candidate) on a built index and real queries: the vector row loops (AVX-512, and the
 * 128-bit ones for 4-vector queries; tt_search_ctx_use_avx512) against their portable
 * twin (the general SSE2 / scalar codes_max), with and without the residual sketch,
 * and stage 1 (St = C·Qᵀ and the candidates) for scale. Per query, after stage 1, each
 * method runs the stage-2 interaction over the same candidates with the same pruning
 * mask; the methods alternate within each query, so that load from other jobs hits them
 * alike. Prints thread CPU time per query (median over the queries) of each, its ratio
 * to the portable twin, and how many queries' stage-2 lists (documents and scores,
 * bit for bit) differ between the twins (must be 0).
 *
 * Built by `make` as bench/bench_stage2 (not installed).
 * Usage: OPENBLAS_NUM_THREADS=1 bench/bench_stage2 INDEX Q.npy [NPROBE] [NDOCS]
 *        [sum|mean] [LIMIT]
 * (NPROBE >= the number of centroids: the all-documents plan.) */
#include "search/search.h"
#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, uint64_t n) {
    qsort(v, n, sizeof *v, dcmp);
    return n ? v[n / 2] : 0;
}

enum { NM = 4 }; /* sketch x {avx512, portable}; no sketch x {avx512, portable} */

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_stage2 INDEX Q.npy [NPROBE] [NDOCS] [sum|mean] [LIMIT]\n");
        return 2;
    }
    tt_blas_set_threads(1);
    tt_queries *qs;
    tt_index *idx;
    tt_open_options oo;
    tt_open_options_init(&oo);
    if (tt_queries_load(&qs, argv[2], NULL, NULL) || tt_index_open(&idx, argv[1], &oo) ||
        tt_queries_check(qs, idx)) {
        fprintf(stderr, "bench_stage2: %s\n", tt_last_error());
        return 1;
    }
    tt_search_options o, r;
    tt_search_options_init(&o);
    o.nprobe = argc > 3 ? atoi(argv[3]) : (int)idx->num_centroids;
    o.ndocs = argc > 4 ? (uint32_t)atoi(argv[4]) : 256;
    const int score = argc > 5 && !strcmp(argv[5], "mean") ? TT_SCORE_MEAN : TT_SCORE_SUM;
    uint64_t nq = argc > 6 ? strtoull(argv[6], NULL, 10) : qs->num_queries;
    nq = nq < qs->num_queries ? nq : qs->num_queries;
    tt_search_ctx *ctx;
    if (tt_search_ctx_new(idx, &ctx)) {
        fprintf(stderr, "bench_stage2: %s\n", tt_last_error());
        return 1;
    }
    const int avx = tt_search_ctx_use_avx512(ctx, 1) || ctx->avx512;
    static const char *names[NM] = {"stage 2, sketch, vector", "stage 2, sketch, portable",
                                    "stage 2, centroids only, vector",
                                    "stage 2, centroids only, portable"};
    double *t[NM], *t1 = malloc(nq * sizeof *t1);
    for (int m = 0; m < NM; m++)
        t[m] = malloc(nq * sizeof *t[m]);
    tt_hit *ref = NULL;
    uint64_t differ[2] = {0, 0}, ncand = 0;
    const int nsk = idx->sketch_bytes ? 2 : 1;
    for (uint64_t q = 0; q < nq; q++) {
        for (int sk = 0; sk < nsk; sk++) {
            o.sketch = sk == 0 && idx->sketch_bytes;
            tt_search_options_resolve(&o, 10, &r);
            const float *Q = qs->vectors + qs->offsets[q] * idx->dim;
            double c0 = bench_cpu_now();
            size_t n;
            if (tt_ctx_set_query(ctx, Q, qs->lens[q], score)) {
                fprintf(stderr, "bench_stage2: %s\n", tt_last_error());
                return 1;
            }
            /* what tt_search sets up for a query without a filter */
            ctx->filter = NULL;
            ctx->direct = false;
            ctx->allowed = idx->num_live;
            if (tt_plaid_stage1(ctx, &r, &n)) {
                fprintf(stderr, "bench_stage2: %s\n", tt_last_error());
                return 1;
            }
            if (sk == 0) {
                t1[q] = bench_cpu_now() - c0;
                ncand += n;
            }
            for (int a = 0; a < 2; a++) {
                const int m = 2 * sk + a;
                tt_search_ctx_use_avx512(ctx, a == 0);
                if (tt_topk_reset(&ctx->top, r.ndocs)) {
                    fprintf(stderr, "bench_stage2: %s\n", tt_last_error());
                    return 1;
                }
                c0 = bench_cpu_now();
                tt_plaid_interaction(ctx, ctx->cand, n, ctx->keep);
                t[m][q] = bench_cpu_now() - c0;
                uint32_t got = tt_topk_finish(&ctx->top);
                if (a == 0) {
                    free(ref);
                    ref = malloc((got ? got : 1) * sizeof *ref);
                    memcpy(ref, ctx->top.h, got * sizeof *ref);
                } else {
                    differ[sk] += memcmp(ref, ctx->top.h, got * sizeof *ref) != 0;
                }
            }
        }
    }
    printf("%s: %llu queries, nprobe %d, ndocs %u, %.0f candidates per query, sketch %u "
           "bytes, AVX-512 %s\n",
           argv[1], (unsigned long long)nq, o.nprobe, o.ndocs, (double)ncand / (double)nq,
           idx->sketch_bytes, avx ? "yes" : "no (vector rows: the 128-bit loops only)");
    printf("  %-36s %8.3f ms CPU per query (median)\n", "stage 1 (sketch on)",
           1e3 * median(t1, nq));
    for (int sk = 0; sk < nsk; sk++) {
        double a = median(t[2 * sk], nq), p = median(t[2 * sk + 1], nq);
        printf("  %-36s %8.3f ms  %5.2fx portable\n", names[2 * sk], 1e3 * a, p / a);
        printf("  %-36s %8.3f ms  1.00x   (lists differing: %llu of %llu)\n",
               names[2 * sk + 1], 1e3 * p, (unsigned long long)differ[sk],
               (unsigned long long)nq);
    }
    free(ref);
    free(t1);
    for (int m = 0; m < NM; m++)
        free(t[m]);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
    tt_queries_free(qs);
    return differ[0] || differ[1];
}

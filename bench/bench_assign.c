/* Exact vs two-level nearest-centroid assignment (src/kmeans.c) on synthetic
 * clustered data: time of each, and the two-level accuracy (fraction of vectors given
 * the exact nearest centroid; mean relative loss of x.c over the mismatches), for a
 * few probe settings. Prints a Markdown table (see doc/benchmarks.md).
 *
 *   bench/bench_assign [threads [case [probe,probe,...]]]
 *
 * threads: 0 (default) = online CPUs. case: run only that row group (A, B or C; "all").
 * probes: groups scanned per vector, replacing each case's list (0 = the default).
 * Centroids are trained by tt_kmeans_train itself (few iterations, to fit the time
 * budget); the time per training iteration is printed as a by-product. */
#include "kmeans.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Clustered data shaped like token embeddings: `nc` random unit topic centres, each
 * vector a centre plus isotropic Gaussian noise of expected norm `spread`, then
 * L2-normalised (cosine to its centre about 1/sqrt(1+spread^2)). Reproducible. */
static void gen(float *x, uint64_t n, uint32_t dim, uint32_t nc, double spread, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    float *c = malloc((size_t)nc * dim * sizeof *c);
    if (!c) {
        fprintf(stderr, "bench_assign: out of memory\n");
        exit(1);
    }
    for (uint64_t i = 0; i < (uint64_t)nc * dim; i += 2) { /* Box-Muller, two at a time */
        double u1 = tt_rng_uniform(&r) + 1e-300, u2 = tt_rng_uniform(&r);
        double m = sqrt(-2 * log(u1));
        c[i] = (float)(m * cos(2 * M_PI * u2));
        if (i + 1 < (uint64_t)nc * dim)
            c[i + 1] = (float)(m * sin(2 * M_PI * u2));
    }
    tt_normalize_rows(c, nc, dim);
    const double sigma = spread / sqrt((double)dim);
    for (uint64_t i = 0; i < n; i++) {
        const float *ci = c + tt_rng_below(&r, nc) * dim;
        float *xi = x + i * dim;
        for (uint32_t d = 0; d < dim; d += 2) {
            double u1 = tt_rng_uniform(&r) + 1e-300, u2 = tt_rng_uniform(&r);
            double m = sigma * sqrt(-2 * log(u1));
            xi[d] = ci[d] + (float)(m * cos(2 * M_PI * u2));
            if (d + 1 < dim)
                xi[d + 1] = ci[d + 1] + (float)(m * sin(2 * M_PI * u2));
        }
    }
    tt_normalize_rows(x, n, dim);
    free(c);
}

static double dot(const float *a, const float *b, uint32_t dim) {
    double s = 0;
    for (uint32_t d = 0; d < dim; d++)
        s += (double)a[d] * b[d];
    return s;
}

typedef struct bcase {
    const char *name;
    uint64_t n;      /* vectors assigned */
    uint32_t dim, k;
    uint64_t ntrain; /* k-means sample (first ntrain vectors) */
    int iters;
    uint32_t topics;
    uint32_t probes[8]; /* UINT32_MAX = the default; 0 ends the list */
} bcase;

static int die(const char *what, int st) {
    fprintf(stderr, "bench_assign: %s: %s (%s)\n", what, tt_strerror(st), tt_last_error());
    exit(1);
}

static void run(const bcase *bc, int threads, const uint32_t *probes) {
    float *x = malloc(bc->n * bc->dim * sizeof *x);
    float *c = malloc((size_t)bc->k * bc->dim * sizeof *c);
    uint32_t *ex = malloc(bc->n * sizeof *ex), *tw = malloc(bc->n * sizeof *tw);
    if (!x || !c || !ex || !tw)
        die("allocation", TT_ENOMEM);
    gen(x, bc->n, bc->dim, bc->topics, 0.6, 42);

    tt_kmeans_params p = {.k = bc->k, .dim = bc->dim, .iters = bc->iters, .seed = 1,
                          .threads = threads, .spherical = 1};
    double t0 = tt_now();
    int st = tt_kmeans_train(x, bc->ntrain, &p, c);
    if (st)
        die("kmeans", st);
    double ttrain = tt_now() - t0;

    tt_assigner *a = NULL;
    if ((st = tt_assigner_new(c, bc->k, bc->dim, TT_ASSIGN_EXACT, 1, threads, &a)))
        die("assigner", st);
    t0 = tt_now();
    if ((st = tt_assign(a, x, bc->n, ex, threads)))
        die("assign", st);
    double texact = tt_now() - t0;
    tt_assigner_free(a);

    t0 = tt_now();
    if ((st = tt_assigner_new(c, bc->k, bc->dim, TT_ASSIGN_TWO_LEVEL, 1, threads, &a)))
        die("assigner", st);
    double tgroups = tt_now() - t0;
    const uint32_t g = tt_assigner_groups(a), pdef = tt_assigner_probe(a);
    fprintf(stderr, "# %s: train %.2f s (%d iters on %llu), groups %.2f s\n", bc->name, ttrain,
            bc->iters, (unsigned long long)bc->ntrain, tgroups);
    if (!probes)
        probes = bc->probes;
    for (int i = 0; i < 8 && probes[i]; i++) {
        uint32_t probe = probes[i] == UINT32_MAX ? pdef : probes[i];
        if ((st = tt_assigner_set_probe(a, probe)))
            die("probe", st);
        t0 = tt_now();
        if ((st = tt_assign(a, x, bc->n, tw, threads)))
            die("assign", st);
        double ttwo = tt_now() - t0;
        uint64_t same = 0;
        double loss = 0;
        for (uint64_t v = 0; v < bc->n; v++) {
            if (tw[v] == ex[v]) {
                same++;
                continue;
            }
            const float *xv = x + v * bc->dim;
            double se = dot(xv, c + (size_t)ex[v] * bc->dim, bc->dim);
            double s2 = dot(xv, c + (size_t)tw[v] * bc->dim, bc->dim);
            loss += (se - s2) / fabs(se);
        }
        uint64_t miss = bc->n - same;
        printf("| %s | %llu | %u | %u | %.2f | %u | %u%s | %.2f | %.3f | %.1fx | %.4f | %.4f |\n",
               bc->name, (unsigned long long)bc->n, bc->dim, bc->k, ttrain / bc->iters, g,
               tt_assigner_probe(a), probe == pdef ? " (default)" : "", texact, ttwo,
               texact / ttwo, (double)same / (double)bc->n, miss ? loss / (double)miss : 0.0);
        fflush(stdout);
    }
    tt_assigner_free(a);
    free(x);
    free(c);
    free(ex);
    free(tw);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    const char *only = argc > 2 && strcmp(argv[2], "all") != 0 ? argv[2] : NULL;
    uint32_t plist[8] = {0};
    if (argc > 3) {
        char *s = argv[3];
        for (int i = 0; i < 7 && *s; i++) {
            unsigned long v = strtoul(s, &s, 10);
            plist[i] = v ? (uint32_t)v : UINT32_MAX;
            if (*s == ',')
                s++;
        }
    }
    if (threads <= 0)
        threads = tt_default_threads();
    /* K for A follows ColBERTv2, 2^floor(log2(16 sqrt(N))); B is a larger K; C is a
     * DiffRetriever-sized 3584-d case with fewer vectors. */
    const bcase cases[] = {
        {"A", 200000, 128, 4096, 200000, 3, 2048, {4, UINT32_MAX, 16}},
        {"B", 200000, 128, 16384, 65536, 3, 4096, {8, UINT32_MAX, 24}},
        {"C", 20000, 3584, 2048, 20000, 3, 512, {3, UINT32_MAX, 10}},
    };
    printf("threads: %d\n\n", threads);
    printf("| case | N | dim | K | train s/iter | groups | probe | exact s | two-level s "
           "| speedup | agreement | mean rel. loss (mismatches) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    double t0 = tt_now();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!only || strcmp(only, cases[i].name) == 0)
            run(&cases[i], threads, argc > 3 ? plist : NULL);
    fprintf(stderr, "# total %.1f s\n", tt_now() - t0);
    return 0;
}

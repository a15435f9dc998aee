/* Exact vs two-level nearest-centroid assignment (src/kmeans.c): time of each, and the
 * two-level accuracy (fraction of vectors given the exact nearest centroid; mean
 * relative loss of x.c over the mismatches) for a few probe settings. Prints a
 * Markdown table (see doc/benchmarks.md, "k-means and assignment").
 *
 *   bench/bench_assign [-t threads] [-c cases] [-d datadir]
 *   bench/bench_assign -T [-t threads] [-c T1,T2,T3]
 *
 * -T: instead, flat vs hierarchical k-means training at large K (tt_kmeans_params.method):
 * training time and the held-out objective, mean max_c x.c (doc/benchmarks.md,
 * "Training at large K").
 * -t: worker threads (default: online CPUs). -c: the cases to run, e.g. "A,C" (default
 * all). -d: the shared test data directory (default $TT_DATA, else ../shared/data
 * next to the source tree); case R, real ColBERTv2 token embeddings, is skipped when
 * it is missing.
 *
 * Synthetic data: `topics` unit topic centres; each vector is a centre plus isotropic
 * Gaussian noise of expected norm 0.6 (cosine to its centre ~0.86), L2-normalised.
 * "flat" topics are independent random directions, the hardest case for grouping
 * centroids: a group's mean carries little of any one member. "hier" topics are drawn
 * around 64 super-topics (noise of norm 1 around each), a structure real embeddings
 * have to some degree. Centroids are trained by tt_kmeans_train itself (spherical, few
 * iterations to fit the time budget) on the first `ntrain` vectors.
 *
 * Times are wall-clock seconds; "CPU speedup" is the ratio of process CPU times, which
 * is steadier than wall-clock when the machine is shared. */
#include "quant/kmeans.h"
#include "input/input.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *xalloc(uint64_t n, uint64_t size) {
    void *p = tt_alloc(n, size, "bench_assign");
    if (!p) {
        fprintf(stderr, "bench_assign: %s\n", tt_last_error());
        exit(1);
    }
    return p;
}

static void gauss(tt_rng *r, float *v, uint64_t n, double sigma) {
    for (uint64_t i = 0; i < n; i += 2) { /* Box-Muller, two at a time */
        double u1 = tt_rng_uniform(r) + 1e-300, u2 = tt_rng_uniform(r);
        double m = sigma * sqrt(-2 * log(u1));
        v[i] = (float)(m * cos(2 * M_PI * u2));
        if (i + 1 < n)
            v[i + 1] = (float)(m * sin(2 * M_PI * u2));
    }
}

/* supers == 0: flat topics; else topics around `supers` super-topic centres. */
static void gen(float *x, uint64_t n, uint32_t dim, uint32_t topics, uint32_t supers,
                uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    float *tc = xalloc(topics, (uint64_t)dim * sizeof(float));
    gauss(&r, tc, (uint64_t)topics * dim, 1.0);
    if (supers) {
        float *sc = xalloc(supers, (uint64_t)dim * sizeof(float));
        gauss(&r, sc, (uint64_t)supers * dim, 1.0);
        tt_normalize_rows(sc, supers, dim);
        for (uint64_t i = 0; i < (uint64_t)topics * dim; i++) /* noise of norm ~1 */
            tc[i] = tc[i] / (float)sqrt((double)dim) + sc[(i / dim % supers) * dim + i % dim];
        free(sc);
    }
    tt_normalize_rows(tc, topics, dim);
    for (uint64_t i = 0; i < n; i++) {
        const float *t = tc + tt_rng_below(&r, topics) * dim;
        float *xi = x + i * dim;
        gauss(&r, xi, dim, 0.6 / sqrt((double)dim));
        for (uint32_t d = 0; d < dim; d++)
            xi[d] += t[d];
    }
    tt_normalize_rows(x, n, dim);
    free(tc);
}

static double dot(const float *a, const float *b, uint32_t dim) {
    double s = 0;
    for (uint32_t d = 0; d < dim; d++)
        s += (double)a[d] * b[d];
    return s;
}

typedef struct bcase {
    const char *name, *data; /* data: "flat", "hier" or "real" */
    uint64_t n;              /* vectors assigned (real: from the file) */
    uint32_t dim, k;
    uint64_t ntrain;         /* k-means on the first ntrain vectors */
    int iters;
    uint32_t topics;
    uint32_t groups;         /* 0: as tt_assigner_new; else tt_assigner_new_groups */
} bcase;

static void die(const char *what, int st) {
    fprintf(stderr, "bench_assign: %s: %s (%s)\n", what, tt_strerror(st), tt_last_error());
    exit(1);
}

static void run(const bcase *bc, int threads, const char *datadir) {
    float *x = NULL;
    uint64_t n = bc->n, ntrain = bc->ntrain;
    uint32_t dim = bc->dim;
    int st;
    if (strcmp(bc->data, "real") == 0) {
        char path[4096];
        tt_npy_header h;
        snprintf(path, sizeof path, "%s/emb/colbertv2_nanofiqa/doc_token_embeddings.npy",
                 datadir ? datadir : "");
        if (!datadir || tt_npy_read_floats(path, &x, &h) != TT_OK || h.ndim != 2) {
            fprintf(stderr, "# %s: skipped, no %s\n", bc->name, path);
            free(x);
            return;
        }
        n = ntrain = h.shape[0];
        dim = (uint32_t)h.shape[1];
    } else {
        x = xalloc(n, (uint64_t)dim * sizeof(float));
        gen(x, n, dim, bc->topics, strcmp(bc->data, "hier") == 0 ? 64 : 0, 42);
    }
    float *c = xalloc(bc->k, (uint64_t)dim * sizeof(float));
    uint32_t *ex = xalloc(n, sizeof *ex), *tw = xalloc(n, sizeof *tw);

    tt_kmeans_params p = {.k = bc->k, .dim = dim, .iters = bc->iters, .seed = 1,
                          .threads = threads, .spherical = 1};
    double t0 = tt_now();
    if ((st = tt_kmeans_train(x, ntrain, &p, c)))
        die("kmeans", st);
    double ttrain = tt_now() - t0;

    tt_assigner *a = NULL;
    if ((st = tt_assigner_new(c, bc->k, dim, TT_ASSIGN_EXACT, 1, threads, &a)))
        die("assigner", st);
    t0 = tt_now();
    double c0 = cpu_now();
    if ((st = tt_assign(a, x, n, ex, threads)))
        die("assign", st);
    double texact = tt_now() - t0, cexact = cpu_now() - c0;
    tt_assigner_free(a);

    t0 = tt_now();
    st = bc->groups ? tt_assigner_new_groups(c, bc->k, dim, bc->groups, 1, threads, &a)
                    : tt_assigner_new(c, bc->k, dim, TT_ASSIGN_TWO_LEVEL, 1, threads, &a);
    if (st)
        die("assigner", st);
    double tgroups = tt_now() - t0;
    const uint32_t g = tt_assigner_groups(a), pdef = tt_assigner_probe(a);
    fprintf(stderr, "# %s: k-means %.1f s (%d iterations on %llu vectors), grouping %.2f s\n",
            bc->name, ttrain, bc->iters, (unsigned long long)ntrain, tgroups);
    /* probes: g/16, g/8, g/4 (rounded up, deduplicated) */
    uint32_t last = 0;
    for (uint32_t div = 16; div >= 4; div /= 2) {
        uint32_t probe = (g + div - 1) / div;
        if (probe == last)
            continue;
        last = probe;
        if ((st = tt_assigner_set_probe(a, probe)))
            die("probe", st);
        t0 = tt_now();
        c0 = cpu_now();
        if ((st = tt_assign(a, x, n, tw, threads)))
            die("assign", st);
        double ttwo = tt_now() - t0, ctwo = cpu_now() - c0;
        uint64_t same = 0;
        double loss = 0;
        for (uint64_t v = 0; v < n; v++) {
            if (tw[v] == ex[v]) {
                same++;
                continue;
            }
            const float *xv = x + v * dim;
            double se = dot(xv, c + (size_t)ex[v] * dim, dim);
            double s2 = dot(xv, c + (size_t)tw[v] * dim, dim);
            loss += (se - s2) / fabs(se);
        }
        uint64_t miss = n - same;
        printf("| %s | %s | %llu | %u | %u | %u%s | %u%s | %.3f | %.3f | %.1fx | %.1fx | %.4f "
               "| %.3f |\n",
               bc->name, bc->data, (unsigned long long)n, dim, bc->k, g, bc->groups ? "*" : "",
               probe,
               probe == pdef ? " (default)" : "", texact, ttwo, texact / ttwo, cexact / ctwo,
               (double)same / (double)n, miss ? loss / (double)miss : 0.0);
        fflush(stdout);
    }
    tt_assigner_free(a);
    free(x);
    free(c);
    free(ex);
    free(tw);
}

/* ------------------------------------------------------- training at large K */

typedef struct tcase {
    const char *name, *data;
    uint64_t n, nheld; /* training vectors, held-out vectors */
    uint32_t dim, k, topics;
    int iters;
} tcase;

/* Mean over the held-out vectors h of max_c h.c (unit centroids: the inner product
 * the index scores with) by exact assignment. */
static double heldout_objective(const float *h, uint64_t nh, const float *c, uint32_t k,
                                uint32_t dim, int threads) {
    tt_assigner *a = NULL;
    uint32_t *ids = xalloc(nh, sizeof *ids);
    int st;
    if ((st = tt_assigner_new(c, k, dim, TT_ASSIGN_EXACT, 1, threads, &a)) ||
        (st = tt_assign(a, h, nh, ids, threads)))
        die("assign", st);
    double s = 0;
    for (uint64_t i = 0; i < nh; i++)
        s += dot(h + i * dim, c + (size_t)ids[i] * dim, dim);
    tt_assigner_free(a);
    free(ids);
    return s / (double)nh;
}

/* Flat Lloyd vs hierarchical (refine 0, 1, 2) at the same iteration count; times and
 * the held-out objective with its relative loss against flat, and the mean squared
 * distance 2 - 2 h.c (unit vectors) with its relative increase. */
static void run_train(const tcase *tc, int threads) {
    const uint32_t dim = tc->dim, k = tc->k;
    uint64_t ntot = tc->n + tc->nheld;
    float *x = xalloc(ntot, (uint64_t)dim * sizeof(float));
    gen(x, ntot, dim, tc->topics, strcmp(tc->data, "hier") == 0 ? 64 : 0, 42);
    const float *h = x + tc->n * dim;
    float *c = xalloc(k, (uint64_t)dim * sizeof(float));
    const struct { const char *label; int method, refine; } v[] = {
        {"flat (exact Lloyd)", TT_KMEANS_FLAT, 0},
        {"hierarchical, refine 0", TT_KMEANS_HIER, -1},
        {"hierarchical, refine 1 (default)", TT_KMEANS_HIER, 1},
        {"hierarchical, refine 2", TT_KMEANS_HIER, 2},
    };
    double obj0 = 0, wall0 = 0, cpu0 = 0;
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tt_kmeans_params p = {.k = k, .dim = dim, .iters = tc->iters, .seed = 1,
                              .threads = threads, .spherical = 1, .method = v[i].method,
                              .refine = v[i].refine};
        double t0 = tt_now(), c0 = cpu_now();
        int st = tt_kmeans_train(x, tc->n, &p, c);
        double wall = tt_now() - t0, cpu = cpu_now() - c0;
        if (st)
            die("kmeans", st);
        double obj = heldout_objective(h, tc->nheld, c, k, dim, threads);
        if (i == 0) {
            obj0 = obj;
            wall0 = wall;
            cpu0 = cpu;
        }
        printf("| %s | %s | %llu | %u | %u | %d | %s | %.1f | %.1f | %.1fx | %.1fx | %.5f "
               "| %.2f %% | %.5f | %.2f %% |\n",
               tc->name, tc->data, (unsigned long long)tc->n, dim, k, tc->iters, v[i].label,
               wall, cpu, wall0 / wall, cpu0 / cpu, obj, 100 * (obj0 - obj) / obj0,
               2 - 2 * obj, 100 * ((2 - 2 * obj) - (2 - 2 * obj0)) / (2 - 2 * obj0));
        fflush(stdout);
    }
    free(x);
    free(c);
}

static bool selected(const char *only, const char *name) {
    if (!only)
        return true;
    char want[64], list[256];
    snprintf(want, sizeof want, ",%s,", name);
    snprintf(list, sizeof list, ",%s,", only);
    return strstr(list, want) != NULL;
}

static int main_train(int threads, const char *only) {
    /* T1/T2: a ColBERTv2-like 128-d sample at K = 8192 (topics = K/2, as case A);
     * T3: 3584-d (DiffRetriever-sized) at K = 4096. iters = 4, ColBERTv2's default
     * (T3: 2, to keep the flat run within the time budget). */
    const tcase cases[] = {
        {"T1", "flat", 300000, 20000, 128, 8192, 4096, 4},
        {"T2", "hier", 300000, 20000, 128, 8192, 4096, 4},
        {"T3", "flat", 40000, 4000, 3584, 4096, 2048, 2},
    };
    printf("threads: %d\n\n", threads);
    printf("| case | data | N | dim | K | iters | method | wall s | CPU s | speedup "
           "| CPU speedup | held-out mean max x.c | rel. loss | held-out MSE | MSE increase |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    double t0 = tt_now();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (selected(only, cases[i].name))
            run_train(&cases[i], threads);
    fprintf(stderr, "# total %.1f s\n", tt_now() - t0);
    return 0;
}

int main(int argc, char **argv) {
    int threads = 0, opt;
    const char *only = NULL, *datadir = getenv("TT_DATA");
    bool train = false;
    while ((opt = getopt(argc, argv, "t:c:d:T")) != -1) {
        switch (opt) {
        case 'T': train = true; break;
        case 't': threads = atoi(optarg); break;
        case 'c': only = optarg; break;
        case 'd': datadir = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-T] [-t threads] [-c A,B,...] [-d datadir]\n",
                    argv[0]);
            return 2;
        }
    }
#ifdef TT_SRCDIR
    if (!datadir)
        datadir = TT_SRCDIR "/../shared/data";
#endif
    if (threads <= 0)
        threads = tt_default_threads();
    if (train)
        return main_train(threads, only);
    /* K follows ColBERTv2, 2^floor(log2(16 sqrt(N))), except B, a larger K. C is a
     * DiffRetriever-sized 3584-d case and R real ColBERTv2 data (4430 token vectors of 35
     * NanoFiQA documents); their K = 1024 is below the two-level threshold (4096), so
     * they force sqrt(K) = 32 groups (marked *) to show how grouping fares there. */
    const bcase cases[] = {
        {"A", "flat", 200000, 128, 4096, 65536, 2, 2048, 0},
        {"A'", "hier", 200000, 128, 4096, 65536, 2, 2048, 0},
        {"B", "flat", 100000, 128, 16384, 32768, 2, 8192, 0},
        {"C", "flat", 10000, 3584, 1024, 10000, 2, 512, 32},
        {"R", "real", 0, 128, 1024, 0, 10, 0, 32},
    };
    printf("threads: %d\n\n", threads);
    printf("| case | data | N | dim | K | groups | probe | exact s | two-level s | speedup "
           "| CPU speedup | agreement | mean rel. loss of x.c (mismatches) |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    double t0 = tt_now();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (only) {
            char want[64];
            snprintf(want, sizeof want, ",%s,", cases[i].name);
            char list[256];
            snprintf(list, sizeof list, ",%s,", only);
            if (!strstr(list, want))
                continue;
        }
        run(&cases[i], threads, datadir);
    }
    fprintf(stderr, "# total %.1f s\n", tt_now() - t0);
    return 0;
}

/* Exact vs two-level nearest-centroid assignment (src/kmeans.c): time of each, and the
 * two-level accuracy (fraction of vectors given the exact nearest centroid; mean
 * relative loss of x.c over the mismatches) for a few probe settings. Prints a
 * Markdown table (see doc/benchmarks.md, "k-means and assignment").
 *
 *   bench/bench_assign [-t threads] [-c cases] [-d datadir]
 *
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
#include "kmeans.h"
#include "npy.h"

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

int main(int argc, char **argv) {
    int threads = 0, opt;
    const char *only = NULL, *datadir = getenv("TT_DATA");
    while ((opt = getopt(argc, argv, "t:c:d:")) != -1) {
        switch (opt) {
        case 't': threads = atoi(optarg); break;
        case 'c': only = optarg; break;
        case 'd': datadir = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-t threads] [-c A,B,...] [-d datadir]\n", argv[0]);
            return 2;
        }
    }
#ifdef TT_SRCDIR
    if (!datadir)
        datadir = TT_SRCDIR "/../shared/data";
#endif
    if (threads <= 0)
        threads = tt_default_threads();
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

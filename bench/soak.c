/* tartan soak: a mixed query load on one index for a bounded time, reporting latency
 * percentiles, throughput and resident memory over time, so that slow leaks, latency
 * drift and RSS growth show up (bench/soak.sh runs it; results in doc/benchmarks.md).
 *
 *   soak --index DIR --queries Q.npy [--qlens L.npy] [--seconds 180] [--threads 2]
 *        [--interval 10] [--io auto|uring|mmap] [--seed 1] [--renew 0]
 *
 * Each worker thread has its own search context and draws, per query, a random query
 * and a random setting from the mix below (PLAID at k = 10/100/1000, mean scoring,
 * and a small share of exhaustive scans when the index has few documents). By default
 * each thread keeps one context for the whole run, as `tartan search` and a server
 * do; with --renew N it frees its context and makes a new one every N queries, to
 * soak context set-up and teardown too. Every interval the main thread prints one line:
 *   t_s  queries  qps  p50_ms  p99_ms  max_ms  rss_mib  anon_mib  file_mib  errors
 * and at the end the whole-run percentiles and the RSS growth from a quarter of the
 * run (warm: scratch buffers and mapped index pages at their working size) to the
 * end. Uses only the public API. */
#include "tartan.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct mix {
    const char *name;
    int mode, score;
    uint32_t k;
    int weight;
} mix;

static mix mixes[] = {
    {"plaid-k10", TT_MODE_PLAID, TT_SCORE_SUM, 10, 50},
    {"plaid-k100", TT_MODE_PLAID, TT_SCORE_SUM, 100, 30},
    {"plaid-k1000", TT_MODE_PLAID, TT_SCORE_SUM, 1000, 10},
    {"plaid-mean-k10", TT_MODE_PLAID, TT_SCORE_MEAN, 10, 8},
    {"exhaustive-k10", TT_MODE_EXHAUSTIVE, TT_SCORE_SUM, 10, 2},
};
#define NMIX (sizeof mixes / sizeof mixes[0])

/* Latencies of one thread for the current interval (swapped out by the main thread). */
typedef struct lat {
    double *v;
    size_t n, cap;
} lat;

typedef struct worker {
    pthread_t th;
    int id;
    uint64_t seed;
    pthread_mutex_t mu;
    lat cur;             /* guarded by mu */
    uint64_t errors;     /* guarded by mu */
    char err[256];
} worker;

static const tt_index *g_idx;
static tt_queries *g_q;
static atomic_int g_stop;
static int g_exhaustive_ok;
static uint64_t g_renew = 0;     /* queries per search context (0: keep one) */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int lat_push(lat *l, double x) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 4096;
        double *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return -1;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
    return 0;
}

static const mix *pick(uint64_t *s) {
    int total = 0;
    for (size_t i = 0; i < NMIX; i++)
        total += (mixes[i].mode != TT_MODE_EXHAUSTIVE || g_exhaustive_ok) ? mixes[i].weight : 0;
    int r = (int)(rnd(s) % (uint64_t)total);
    for (size_t i = 0; i < NMIX; i++) {
        if (mixes[i].mode == TT_MODE_EXHAUSTIVE && !g_exhaustive_ok)
            continue;
        if (r < mixes[i].weight)
            return &mixes[i];
        r -= mixes[i].weight;
    }
    return &mixes[0];
}

static void *work(void *p) {
    worker *w = p;
    tt_hit *hits = malloc(1000 * sizeof *hits);
    tt_search_ctx *ctx = NULL;
    uint64_t s = w->seed, done = 0;
    while (hits && !atomic_load(&g_stop)) {
        if (!ctx && tt_search_ctx_new(g_idx, &ctx) != TT_OK) {
            pthread_mutex_lock(&w->mu);
            w->errors++;
            snprintf(w->err, sizeof w->err, "context: %s", tt_last_error());
            pthread_mutex_unlock(&w->mu);
            break;
        }
        const mix *m = pick(&s);
        uint64_t q = rnd(&s) % g_q->num_queries;
        tt_search_options o;
        tt_search_options_init(&o);
        o.mode = m->mode;
        o.score = m->score;
        uint32_t nh;
        double t0 = now();
        int st = tt_search(g_idx, ctx, g_q->vectors + g_q->offsets[q] * g_q->dim, g_q->lens[q],
                           m->k, &o, hits, &nh);
        double dt = now() - t0;
        pthread_mutex_lock(&w->mu);
        if (st != TT_OK) {
            if (!w->errors++)
                snprintf(w->err, sizeof w->err, "%s", tt_last_error());
        } else if (lat_push(&w->cur, dt) != 0) {
            w->errors++;
        }
        pthread_mutex_unlock(&w->mu);
        if (g_renew && ++done % g_renew == 0) { /* soak context set-up and teardown too */
            tt_search_ctx_free(ctx);
            ctx = NULL;
        }
    }
    tt_search_ctx_free(ctx);
    free(hits);
    return NULL;
}

/* Whole-run latencies go into a fixed histogram, not a growing array, so that the
 * benchmark's own memory stays flat: 4000 log-spaced bins from 1 us to 100 s (0.46 %
 * wide; a percentile is reported as the bin's geometric middle). */
#define HBINS 4000
static uint64_t hist[HBINS];
static double hist_max;

static void hist_add(double x) {
    double b = log(x / 1e-6) / log(1e8) * HBINS;
    int i = b < 0 ? 0 : b >= HBINS ? HBINS - 1 : (int)b;
    hist[i]++;
    if (x > hist_max)
        hist_max = x;
}

static double hist_pct(uint64_t n, double p) {
    uint64_t want = (uint64_t)ceil(p * (double)n), seen = 0;
    for (int i = 0; i < HBINS; i++) {
        seen += hist[i];
        if (seen >= want && seen > 0)
            return 1e-6 * pow(1e8, (i + 0.5) / HBINS);
    }
    return NAN;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double p) {
    if (!n)
        return NAN;
    size_t i = (size_t)ceil(p * (double)n) - (p > 0);
    return v[i < n ? i : n - 1];
}

/* Resident set size, its high-water mark, and its anonymous (heap, stacks) and
 * file-backed (mapped index files) parts, MiB (/proc/self/status). */
static void rss(double *cur, double *hwm, double *anon, double *file) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    *cur = *hwm = *anon = *file = NAN;
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        unsigned long kb;
        if (sscanf(line, "VmRSS: %lu kB", &kb) == 1)
            *cur = (double)kb / 1024.0;
        else if (sscanf(line, "VmHWM: %lu kB", &kb) == 1)
            *hwm = (double)kb / 1024.0;
        else if (sscanf(line, "RssAnon: %lu kB", &kb) == 1)
            *anon = (double)kb / 1024.0;
        else if (sscanf(line, "RssFile: %lu kB", &kb) == 1)
            *file = (double)kb / 1024.0;
    }
    fclose(f);
}

static void usage(FILE *f) {
    fprintf(f, "usage: soak --index DIR --queries Q.npy [--qlens L.npy] [--seconds 180]\n"
               "            [--threads 2] [--interval 10] [--io auto|uring|mmap] [--seed 1]\n"
               "            [--renew 0]\n");
}

int main(int argc, char **argv) {
    static const struct option lo[] = {
        {"index", required_argument, 0, 'x'},   {"queries", required_argument, 0, 'q'},
        {"qlens", required_argument, 0, 'l'},   {"seconds", required_argument, 0, 's'},
        {"threads", required_argument, 0, 't'}, {"interval", required_argument, 0, 'i'},
        {"io", required_argument, 0, 'o'},      {"seed", required_argument, 0, 'S'},
        {"renew", required_argument, 0, 'r'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *index = NULL, *queries = NULL, *qlens = NULL;
    double seconds = 180, interval = 10;
    int threads = 2, c;
    uint64_t seed = 1;
    tt_open_options oo;
    tt_open_options_init(&oo);
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'q': queries = optarg; break;
        case 'l': qlens = optarg; break;
        case 's': seconds = atof(optarg); break;
        case 't': threads = atoi(optarg); break;
        case 'i': interval = atof(optarg); break;
        case 'S': seed = strtoull(optarg, NULL, 10); break;
        case 'r': g_renew = strtoull(optarg, NULL, 10); break;
        case 'o':
            oo.io = !strcmp(optarg, "uring") ? TT_IO_URING : !strcmp(optarg, "mmap") ? TT_IO_MMAP
                                                                                    : TT_IO_AUTO;
            break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!index || !queries || seconds <= 0 || interval <= 0 || threads < 1 || threads > 256) {
        usage(stderr);
        return 2;
    }
    tt_index *idx;
    if (tt_index_open(&idx, index, &oo) != TT_OK ||
        tt_queries_load(&g_q, queries, qlens, NULL) != TT_OK || tt_queries_check(g_q, idx)) {
        fprintf(stderr, "soak: %s\n", tt_last_error());
        return 1;
    }
    g_idx = idx;
    tt_blas_set_threads(1);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    g_exhaustive_ok = info.num_docs <= 200000; /* a scan per query: only on small indexes */
    printf("# soak: %s: %llu docs, %llu vectors x %u dims; %llu queries; %d threads; %.0f s; "
           "residuals via %s\n# mix:", index, (unsigned long long)info.num_docs,
           (unsigned long long)info.num_vectors, info.dim, (unsigned long long)g_q->num_queries,
           threads, seconds, info.io == TT_IO_URING ? "io_uring" : "mmap");
    for (size_t i = 0; i < NMIX; i++)
        if (mixes[i].mode != TT_MODE_EXHAUSTIVE || g_exhaustive_ok)
            printf(" %s %d%%", mixes[i].name, mixes[i].weight);
    printf("\n# t_s\tqueries\tqps\tp50_ms\tp99_ms\tmax_ms\trss_mib\tanon_mib\tfile_mib\terrors\n");
    fflush(stdout);

    worker *w = calloc((size_t)threads, sizeof *w);
    lat iv = {0};
    uint64_t total = 0;
    if (!w)
        return 1;
    for (int t = 0; t < threads; t++) {
        w[t].id = t;
        w[t].seed = seed * 1000003u + (uint64_t)t;
        pthread_mutex_init(&w[t].mu, NULL);
        if (pthread_create(&w[t].th, NULL, work, &w[t]) != 0) {
            fprintf(stderr, "soak: cannot start thread %d\n", t);
            return 1;
        }
    }
    double start = now(), next = start + interval, rss_first = NAN, rss_last = NAN, hwm = NAN;
    double t_first = 0;
    uint64_t errors = 0;
    int intervals = 0, rc = 0;
    for (;;) {
        double t = now();
        if (t < next) {
            double d = next - t;
            struct timespec sl = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
            nanosleep(&sl, NULL);
            continue;
        }
        iv.n = 0;
        uint64_t errs = 0;
        for (int k = 0; k < threads; k++) {
            pthread_mutex_lock(&w[k].mu);
            for (size_t i = 0; i < w[k].cur.n; i++) {
                if (lat_push(&iv, w[k].cur.v[i]))
                    rc = 1;
                hist_add(w[k].cur.v[i]);
                total++;
            }
            w[k].cur.n = 0;
            errs += w[k].errors;
            pthread_mutex_unlock(&w[k].mu);
        }
        errors = errs;
        qsort(iv.v, iv.n, sizeof *iv.v, cmp_d);
        double r, h, ra, rf;
        rss(&r, &h, &ra, &rf);
        intervals++;
        /* the baseline: after a quarter of the run, once scratch buffers have grown to
         * their working size and the mapped index pages are resident */
        if (isnan(rss_first) && next - start >= 0.25 * seconds - 1e-9) {
            rss_first = r;
            t_first = next - start;
        }
        rss_last = r;
        hwm = h;
        printf("%.0f\t%zu\t%.1f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%llu\n", next - start,
               iv.n, (double)iv.n / interval, 1e3 * pct(iv.v, iv.n, 0.5),
               1e3 * pct(iv.v, iv.n, 0.99), iv.n ? 1e3 * iv.v[iv.n - 1] : NAN, r, ra, rf,
               (unsigned long long)errors);
        fflush(stdout);
        next += interval;
        if (next - start > seconds + 1e-9)
            break;
    }
    atomic_store(&g_stop, 1);
    for (int t = 0; t < threads; t++)
        pthread_join(w[t].th, NULL);
    printf("# total: %llu queries in %.0f s (%.1f qps), p50 %.3f ms, p99 %.3f ms, max %.3f ms; "
           "RSS %.1f MiB at %.0f s, %.1f MiB at the end (%+.1f%%), peak %.1f MiB; "
           "%llu errors\n",
           (unsigned long long)total, (double)intervals * interval,
           (double)total / ((double)intervals * interval), 1e3 * hist_pct(total, 0.5),
           1e3 * hist_pct(total, 0.99), 1e3 * hist_max, rss_first, t_first, rss_last,
           100.0 * (rss_last - rss_first) / rss_first, hwm, (unsigned long long)errors);
    for (int t = 0; t < threads; t++) {
        if (w[t].errors)
            fprintf(stderr, "soak: thread %d: %llu errors, first: %s\n", t,
                    (unsigned long long)w[t].errors, w[t].err);
        free(w[t].cur.v);
        pthread_mutex_destroy(&w[t].mu);
    }
    free(w);
    free(iv.v);
    tt_queries_free(g_q);
    tt_index_close(idx);
    return rc || errors ? 1 : 0;
}

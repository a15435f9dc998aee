/* Search latency / throughput / I/O benchmark over an index and a query file.
 *
 *   search_bench --index DIR --queries Q.npy [--qlens L.npy] [--query-ids FILE] [--k 10]
 *                [--mode plaid|exhaustive|exact]
 *                [--io uring|mmap] [--direct] [--queue-depth N] [--nprobe N]
 *                [--threshold T] [--ndocs N] [--cold] [--threads T] [--limit N]
 *                [--pruning relative|absolute] [--prune-ratio F] [--rerank adaptive|fixed]
 *                [--rerank-margin M]
 *                [--score sum|mean] [--run FILE] [--label TEXT] [--no-sketch]
 *                [--no-avx512] [--split auto|on|off] [--centroid-groups N] [--repeat R]
 *                [--cq-kernel vnni|avx2|sse2|portable]
 *
 * Single thread (default): one context, queries in order, wall time per query. With
 * --cold the residual file is evicted from the page cache before every query (our own
 * mapping dropped with madvise(MADV_DONTNEED), then posix_fadvise(POSIX_FADV_DONTNEED)
 * on the file), so every residual byte a query needs comes from the device; centroids,
 * codes and IVF stay resident, as they do by design. Without --cold the residual file is
 * read once before timing (warm page cache). With --threads T > 1: QPS of
 * tt_search_batch over all queries (warm). Prints one JSON object on stdout: latency
 * percentiles, QPS, residual bytes and read requests per query, major page faults per
 * query, time per stage, and the thread CPU time per query (p50/p95: less disturbed
 * than wall time on a loaded machine; 0 with --threads). --run writes the hits as a TREC
 * run (for recall). --no-avx512 runs the centroid stages' portable row loops (what a CPU
 * without AVX-512 runs; single thread only), for ratios against the AVX-512 ones.
 * --split chooses stage 4's centroid split (single thread only; default auto).
 * --centroid-groups N as tartan search's (default: the index's calibrated choice); the
 * JSON's "centroids_scored" is stage 1's mean per query (single thread only).
 * --cq-kernel runs stage 1 on a lower int8 kernel than this CPU's best (with
 * --no-avx512: what a CPU without AVX-512, or without any AVX, runs).
 * --repeat R (single thread) searches the queries R times over, in order, and takes the
 * percentiles and per-query means over all R x queries searches (the run file holds one
 * pass): a longer measurement at the same per-query cost, less at the mercy of a VM's
 * speed phases when compared with a slower engine's turn.
 * --lut off scores stage 4 without the residual lookup tables' ranking (single thread
 * only); "scored" and "rescored" are stage 4's documents per query, and those of them
 * scored exactly after the tables' ranking. --crows off takes that ranking's centroid
 * scores from the float rows instead of the index's int8 rows (split stage 4).
 *
 * Uses the internal index struct only to reach the segments' residual mappings and
 * descriptors for eviction and warm-up, and tt_index_use_cq_kernel for --cq-kernel. Build: see bench/search_bench.sh. */
#include "search/search.h"
#include "index/index.h"
#include "quant/cscore.h"
#include "benchutil.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double pct(const double *v, uint64_t n, double p) {
    uint64_t r = (uint64_t)ceil(p / 100.0 * (double)n);
    return n ? v[r ? r - 1 : 0] : 0;
}

static long majflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_majflt;
}

/* Drops every segment's residual file from the page cache (and from our mapping). */
static int evict(const tt_index *idx) {
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        if (sg->res_map && madvise((void *)sg->f_residuals.base, (size_t)sg->f_residuals.size,
                                   MADV_DONTNEED))
            return -1;
        if (posix_fadvise(sg->f_residuals.fd, 0, 0, POSIX_FADV_DONTNEED))
            return -1;
    }
    return 0;
}

/* Reads the residual files once so that a warm run starts warm. */
static void warm_up(const tt_index *idx) {
    static uint8_t buf[1 << 20];
    for (uint32_t s = 0; s < idx->nseg; s++) {
        uint64_t off = 0;
        ssize_t r;
        while ((r = pread(idx->seg[s].f_residuals.fd, buf, sizeof buf, (off_t)off)) > 0)
            off += (uint64_t)r;
    }
}

int main(int argc, char **argv) {
    static const struct option lo[] = {
        {"index", 1, 0, 'x'}, {"queries", 1, 0, 'q'}, {"k", 1, 0, 'k'}, {"mode", 1, 0, 'm'},
        {"io", 1, 0, 'i'}, {"direct", 0, 0, 'D'}, {"queue-depth", 1, 0, 'Q'},
        {"nprobe", 1, 0, 'p'}, {"threshold", 1, 0, 'T'}, {"ndocs", 1, 0, 'n'},
        {"cold", 0, 0, 'c'}, {"threads", 1, 0, 't'}, {"limit", 1, 0, 'l'}, {"run", 1, 0, 'r'},
        {"label", 1, 0, 'L'}, {"query-ids", 1, 0, 'I'}, {"score", 1, 0, 'S'}, {"qlens", 1, 0, 'J'},
        {"pruning", 1, 0, 'P'}, {"prune-ratio", 1, 0, 'R'}, {"rerank", 1, 0, 'K'},
        {"rerank-margin", 1, 0, 'M'},
        {"no-sketch", 0, 0, 'N'}, {"no-avx512", 0, 0, 'A'},
        {"split", 1, 0, 'Y'}, {"centroid-groups", 1, 0, 'G'}, {"lut", 1, 0, 'U'},
        {"crows", 1, 0, 'O'}, {"repeat", 1, 0, 'E'}, {"cq-kernel", 1, 0, 'C'},
        {0, 0, 0, 0}};
    const char *index = NULL, *queries = NULL, *runpath = NULL, *label = "", *qids = NULL;
    const char *qlens = NULL;
    uint32_t k = 10;
    int cold = 0, threads = 1, c, avx512 = 1, split = TT_SPLIT_AUTO, lut = 1, crows = 1;
    int cqk = -2; /* the index's own */
    uint64_t limit = UINT64_MAX, repeat = 1;
    tt_open_options oo;
    tt_search_options so;
    tt_open_options_init(&oo);
    tt_search_options_init(&so);
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'q': queries = optarg; break;
        case 'k': k = (uint32_t)atoi(optarg); break;
        case 'm':
            so.mode = !strcmp(optarg, "exhaustive") ? TT_MODE_EXHAUSTIVE
                      : !strcmp(optarg, "exact")    ? TT_MODE_EXACT
                                                    : TT_MODE_PLAID;
            break;
        case 'i': oo.io = !strcmp(optarg, "mmap") ? TT_IO_MMAP : TT_IO_URING; break;
        case 'D': oo.direct = 1; break;
        case 'Q': oo.queue_depth = atoi(optarg); break;
        case 'p': so.nprobe = atoi(optarg); break;
        case 'T': so.threshold = strtof(optarg, NULL); break;
        case 'n': so.ndocs = (uint32_t)atoi(optarg); break;
        case 'P':
            so.pruning = !strcmp(optarg, "absolute") ? TT_PRUNE_ABSOLUTE : TT_PRUNE_RELATIVE;
            break;
        case 'R': so.prune_ratio = strtof(optarg, NULL); break;
        case 'K':
            so.rerank = !strcmp(optarg, "fixed") ? TT_RERANK_FIXED : TT_RERANK_ADAPTIVE;
            break;
        case 'M': so.rerank_margin = strtof(optarg, NULL); break;
        case 'c': cold = 1; break;
        case 'N': so.sketch = 0; break;
        case 'G': so.centroid_groups = atoi(optarg); break;
        case 'A': avx512 = 0; break; /* the portable twins of the AVX-512 row loops */
        case 'Y':
            split = !strcmp(optarg, "on") ? TT_SPLIT_ON : !strcmp(optarg, "off") ? TT_SPLIT_OFF
                                                                                  : TT_SPLIT_AUTO;
            break;
        case 'U': lut = strcmp(optarg, "off") != 0; break;
        case 'O': crows = strcmp(optarg, "off") != 0; break;
        case 't': threads = atoi(optarg); break;
        case 'l': limit = strtoull(optarg, NULL, 10); break;
        case 'E': repeat = strtoull(optarg, NULL, 10); break;
        case 'C':
            cqk = !strcmp(optarg, "vnni")       ? TT_CQ_VNNI
                  : !strcmp(optarg, "avx2")     ? TT_CQ_AVX2
                  : !strcmp(optarg, "sse2")     ? TT_CQ_SSE2
                  : !strcmp(optarg, "portable") ? TT_CQ_PORTABLE
                                                : -3;
            if (cqk == -3) {
                fprintf(stderr, "search_bench: --cq-kernel: vnni, avx2, sse2 or portable\n");
                return 2;
            }
            break;
        case 'r': runpath = optarg; break;
        case 'L': label = optarg; break;
        case 'I': qids = optarg; break;
        case 'J': qlens = optarg; break;
        case 'S': so.score = !strcmp(optarg, "mean") ? TT_SCORE_MEAN : TT_SCORE_SUM; break;
        default: return 2;
        }
    }
    if (!index || !queries || k == 0) {
        fprintf(stderr, "usage: search_bench --index DIR --queries Q.npy [options]\n");
        return 2;
    }
    tt_blas_set_threads(1);
    tt_queries *qs;
    tt_index *idx;
    int st;
    if ((st = tt_queries_load(&qs, queries, qlens, qids)) ||
        (st = tt_index_open(&idx, index, &oo)) || (st = tt_queries_check(qs, idx))) {
        fprintf(stderr, "search_bench: %s\n", tt_last_error());
        return 1;
    }
    if (cqk != -2 && tt_index_use_cq_kernel(idx, cqk)) {
        fprintf(stderr, "search_bench: --cq-kernel: %s\n", tt_last_error());
        return 2;
    }
    uint64_t nq = qs->num_queries < limit ? qs->num_queries : limit;
    if (repeat < 1 || (repeat > 1 && threads > 1)) {
        fprintf(stderr, "search_bench: --repeat takes a positive count, with one thread\n");
        return 2;
    }
    const uint64_t ns = nq * repeat; /* searches timed */
    tt_hit *hits = malloc(nq * k * sizeof *hits);
    uint32_t *nh = malloc(nq * sizeof *nh);
    double *lat = malloc(ns * sizeof *lat), *cpu = calloc(ns, sizeof *cpu);
    tt_search_stats ss;
    memset(&ss, 0, sizeof ss);
    if (!cold)
        warm_up(idx);
    long f0 = majflt();
    double t0 = bench_wall(), total;
    if (threads > 1) {
        if (cold)
            fprintf(stderr, "search_bench: --cold is single-threaded; ignored\n");
        st = tt_search_batch(idx, qs->vectors, qs->offsets, qs->lens, nq, k, &so, threads, hits,
                             nh, lat);
        total = bench_wall() - t0;
    } else {
        tt_search_ctx *ctx;
        if ((st = tt_search_ctx_new(idx, &ctx))) {
            fprintf(stderr, "search_bench: %s\n", tt_last_error());
            return 1;
        }
        tt_search_ctx_use_avx512(ctx, avx512);
        tt_search_ctx_use_split(ctx, split);
        tt_search_ctx_use_lut(ctx, lut);
        tt_search_ctx_use_crows(ctx, crows);
        total = 0;
        for (uint64_t s = 0; s < ns && !st; s++) {
            const uint64_t q = s % nq;
            if (cold && evict(idx)) {
                fprintf(stderr, "search_bench: evict: %s\n", strerror(errno));
                return 1;
            }
            double a = bench_wall(), ca = bench_cpu_now();
            st = tt_search(idx, ctx, qs->vectors + qs->offsets[q] * qs->dim, qs->lens[q], k, &so,
                           hits + q * k, &nh[q]);
            lat[s] = bench_wall() - a;
            cpu[s] = bench_cpu_now() - ca;
            total += lat[s];
        }
        tt_search_ctx_stats(ctx, &ss);
        tt_search_ctx_free(ctx);
    }
    long faults = majflt() - f0;
    if (st) {
        fprintf(stderr, "search_bench: %s\n", tt_last_error());
        return 1;
    }
    if (runpath) {
        FILE *f = fopen(runpath, "w");
        for (uint64_t q = 0; q < nq; q++)
            for (uint32_t r = 0; r < nh[q]; r++) {
                size_t len;
                const char *id = tt_index_doc_id(idx, hits[q * k + r].doc, &len);
                fprintf(f, "%s Q0 %.*s %u %.6f tartan\n", qs->ids[q], (int)len, id, r + 1,
                        hits[q * k + r].score);
            }
        fclose(f);
    }
    double mean = 0;
    for (uint64_t q = 0; q < ns; q++)
        mean += lat[q];
    mean /= (double)ns;
    qsort(lat, ns, sizeof *lat, bench_dcmp);
    qsort(cpu, ns, sizeof *cpu, bench_dcmp);
    /* What the searches used: the index's calibrated parameters where no flag was given. */
    tt_search_options eff;
    tt_search_options_resolve_index(idx, &so, k, &eff);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    const char *io = info.io == TT_IO_URING ? (oo.direct ? "io_uring+O_DIRECT" : "io_uring")
                                            : "mmap";
    double n = (double)ns;
    printf("{\"label\": \"%s\", \"mode\": %d, \"k\": %u, \"nprobe\": %d, \"pruning\": \"%s\", "
           "\"threshold\": %g, \"prune_ratio\": %g, \"rerank\": \"%s\", \"margin\": %g, "
           "\"ndocs\": %u, \"centroid_groups\": %d, \"io\": \"%s\", \"cold\": %d, "
           "\"threads\": %d, \"queries\": %llu, \"repeat\": %llu, "
           "\"p50_ms\": %.3f, \"p95_ms\": %.3f, \"p99_ms\": %.3f, \"mean_ms\": %.3f, "
           "\"cpu_p50_ms\": %.3f, \"cpu_p95_ms\": %.3f, "
           "\"qps\": %.1f, \"bytes_per_query\": %.0f, \"reads_per_query\": %.1f, "
           "\"major_faults_per_query\": %.1f, \"candidates\": %.1f, \"stage_ms\": "
           "[%.3f, %.3f, %.3f, %.3f], \"fetch_ms\": %.3f, \"centroids_scored\": %.0f, "
           "\"scored\": %.1f, \"rescored\": %.1f}\n",
           label, eff.mode, k, eff.nprobe,
           eff.pruning == TT_PRUNE_ABSOLUTE ? "absolute" : "relative",
           eff.pruning == TT_PRUNE_ABSOLUTE ? eff.threshold : 0.0,
           eff.pruning == TT_PRUNE_RELATIVE ? eff.prune_ratio : 0.0,
           eff.rerank == TT_RERANK_FIXED ? "fixed" : "adaptive", (double)eff.rerank_margin,
           eff.ndocs, eff.centroid_groups, io, cold, threads,
           (unsigned long long)nq, (unsigned long long)repeat, 1e3 * pct(lat, ns, 50),
           1e3 * pct(lat, ns, 95), 1e3 * pct(lat, ns, 99), 1e3 * mean, 1e3 * pct(cpu, ns, 50),
           1e3 * pct(cpu, ns, 95),
           n / total, (double)ss.bytes_read / n,
           (double)ss.reads / n, (double)faults / n, (double)ss.candidates / n,
           1e3 * ss.seconds[0] / n, 1e3 * ss.seconds[1] / n, 1e3 * ss.seconds[2] / n,
           1e3 * ss.seconds[3] / n, 1e3 * ss.seconds_fetch / n,
           (double)ss.centroids_scored / n, (double)ss.scored_docs / n,
           (double)ss.rescored_docs / n);
    free(hits);
    free(nh);
    free(lat);
    free(cpu);
    tt_queries_free(qs);
    tt_index_close(idx);
    return 0;
}

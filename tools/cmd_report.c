/* tartan report: builds (or reuses) one index per variant, searches each with the same
 * queries, evaluates the runs and writes the storage-vs-effectiveness report
 * (DIR/report.md, .csv, .json, .svg; doc/report.md defines every column).
 * Written over the public API only. */
#include "cli.h"
#include "report.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *const CMD = "report";
/* A failure of the tool itself (not the library), already printed: a positive status,
 * so that tt_last_error(), which may hold an older message, is not printed for it. */
enum { REPORTED = 1 };

static int oom(void) {
    fprintf(stderr, "tartan report: error: out of memory\n");
    return REPORTED;
}
#define DEFAULT_VARIANTS "original,1bit,2bit,4bit,2bit-perdim,2bit-shared,2bit-pool2"

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan report --vectors A.npy[,B.npy...] --doclens L.npy[,...] [--ids FILE]\n"
        "                     --queries Q.npy [--qlens F] [--query-ids FILE] --qrels FILE\n"
        "                     --out DIR [options]\n"
        "\n"
        "Builds an index per variant (or reuses one built before for the same inputs and\n"
        "options, under DIR/indexes/), searches each with the queries, evaluates the runs\n"
        "against the qrels and writes DIR/report.md (a table for papers), report.csv,\n"
        "report.json and report.svg (storage, log scale, against the first metric). Each\n"
        "variant's TREC run goes to DIR/runs/VARIANT.run. See doc/report.md.\n"
        "\n"
        "   or: tartan report --encoder CMD --corpus FILE --query-text FILE --qrels FILE\n"
        "                     --out DIR [options]\n"
        "\n"
        "  --vectors LIST       document vector files (as tartan build)\n"
        "  --doclens LIST       one doclens file per vector file\n"
        "  --ids FILE           document ids, one per line, as the qrels name them\n"
        "                       (default: row numbers)\n"
        "  --queries Q.npy      query vectors [num_queries, Kq, dim], or [num_vectors, dim]\n"
        "                       with --qlens\n"
        "  --qlens F            vectors per query (.npy int)\n"
        "  --query-ids FILE     one query id per line, as the qrels name them\n"
        "  --encoder CMD        instead of vectors: run this encoder program (as tartan\n"
        "                       encode) over --corpus (BEIR corpus.jsonl or TSV) and\n"
        "                       --query-text (queries.jsonl or TSV); the vectors are kept\n"
        "                       in DIR/encoded/ and reused by later runs\n"
        "  --qrels FILE         relevance judgements (TREC or BEIR TSV)\n"
        "  --out DIR            report directory (created if missing)\n"
        "  --variants LIST      comma-separated, default\n"
        "                       " DEFAULT_VARIANTS "\n"
        "                       original (or exact): float16 vectors, exact MaxSim (always\n"
        "                       included: it is the reference); Nbit: N-bit residuals (N 1,\n"
        "                       2 or 4) with the default codec; Nbit-perdim: per-dimension\n"
        "                       tables; Nbit-shared: one table for all dimensions\n"
        "                       (ColBERTv2); Nbit-adaptive: bits allocated per dimension;\n"
        "                       then -table, -vector or -nodebias: how residuals are\n"
        "                       debiased (tartan build --debias; default auto), e.g.\n"
        "                       1bit-vector, 2bit-adaptive-table;\n"
        "                       a -poolF suffix (2bit-pool2, 2bit-adaptive-pool3) pools\n"
        "                       each document's vectors by a factor F first; -gpoolF\n"
        "                       (2bit-gpool2.5) by one cut for the whole collection that\n"
        "                       keeps about 1/F of the vectors (tartan build --pool-global)\n"
        "  --metrics LIST       default MRR@10,nDCG@10,Recall@100 (cutoffs at most --k); the\n"
        "                       first one is plotted\n"
        "  --k N                results per query (default 100)\n"
        "  --score sum|mean     MaxSim reduction over query vectors (default sum)\n"
        "  --nprobe N, --threshold T, --ndocs N   PLAID parameters (default by k)\n"
        "  --latency-queries N  queries timed on one thread for the p50 (default 100; 0: all)\n"
        "  --threads T          build and search threads (default 0: all CPUs)\n"
        "  --centroids K        centroids per index (default 2^floor(log2(16*sqrt(N))))\n"
        "  --seed S             sampling and k-means seed (default 42)\n"
        "  --no-normalize       keep raw vectors (default: L2-normalise)\n"
        "  --bf16               read uint16 .npy data as bfloat16\n"
        "  --rebuild            build every index again even if one is there\n"
        "\n"
        "Dense, sparse and hybrid columns (D / S / H per variant; doc/report.md):\n"
        "  --bm25               index BM25 postings of the documents' texts (--text FILE,\n"
        "                       or --corpus with --encoder) in every variant's index and\n"
        "                       search the query texts (--query-text) with them\n"
        "  --text FILE          the documents' texts for --bm25 (BEIR corpus.jsonl or TSV)\n"
        "  --sparse FILE        instead: precomputed document sparse vectors (JSON Lines\n"
        "                       {\"id\", \"terms\": {t: w}} or \"term_ids\"), with\n"
        "                       --sparse-queries FILE (and --vocab FILE for term ids)\n"
        "  --encoder-sparse     instead: the encoder's own sparse parts (protocol 2) of the\n"
        "                       --corpus and --query-text records (with --encoder)\n"
        "  --fusion minmax|rrf  hybrid fusion (default minmax), --fusion-depth N (default\n"
        "                       1000), --alpha A (dense weight in minmax, default 0.5)\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ------------------------------------------------------------ index cache */

/* FNV-1a 64 (Fowler/Noll/Vo): a name for a set of build inputs, not a checksum. */
static uint64_t fnv1a(uint64_t h, const char *s) {
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Folds a file's absolute path, size and modification time into h; a file changed in
 * place (new mtime) or replaced gives another hash, hence a new index. */
static uint64_t hash_file(uint64_t h, const char *path) {
    char buf[PATH_MAX + 96], abs[PATH_MAX];
    struct stat st;
    const char *p = realpath(path, abs) ? abs : path;
    if (stat(path, &st) == 0)
        snprintf(buf, sizeof buf, "%s\n%lld\n%lld.%09ld\n", p, (long long)st.st_size,
                 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    else
        snprintf(buf, sizeof buf, "%s\n?\n", p);
    return fnv1a(h, buf);
}

typedef struct build_cfg {
    char **vectors, **doclens;
    size_t nfiles;
    const char *ids;
    uint32_t centroids;
    uint64_t seed;
    int normalize, bf16, threads;
    const char *describe; /* encoder description stored in each index */
    const tt_sparse_set *sparse; /* the documents' sparse vectors, or NULL */
    int sparse_kind;      /* TT_SPARSE_NONE, _BM25 or _WEIGHTS */
    const char *sparse_file; /* where they come from (texts or JSON Lines) */
} build_cfg;

static uint64_t variant_hash(const build_cfg *c, const rp_variant *v) {
    char buf[256];
    uint64_t h = 0xcbf29ce484222325ull;
    /* The library version is part of the name: a new release may build differently. */
    snprintf(buf, sizeof buf, "tartan-report-1 %s nbits=%d codec=%d pool=%d%s%s keep=%d "
             "centroids=%u seed=%llu normalize=%d bf16=%d files=%zu\n", tt_version_string(),
             v->original ? 1 : v->nbits, v->codec, v->pool, v->gpool > 0 ? v->name : "",
             v->debias == TT_DEBIAS_AUTO ? "" : v->name,
             v->original, c->centroids,
             (unsigned long long)c->seed, c->normalize, c->bf16, c->nfiles);
    h = fnv1a(h, buf);
    for (size_t i = 0; i < c->nfiles; i++)
        h = hash_file(hash_file(h, c->vectors[i]), c->doclens[i]);
    h = c->ids ? hash_file(h, c->ids) : fnv1a(h, "no ids\n");
    if (c->sparse_kind) { /* sparse postings make another index (none: the hash of before) */
        snprintf(buf, sizeof buf, "sparse=%d\n", c->sparse_kind);
        h = hash_file(fnv1a(h, buf), c->sparse_file);
    }
    return h;
}

/* What TT_DEBIAS_AUTO, the build default the report uses, makes of an index like this
 * one: per-vector scales where the adaptive codec has 8-bit positions, else debiased
 * tables (an index built before that default, or otherwise, is built again). */
static int auto_debias(const tt_index_info *info) {
    return info->codec_tables == TT_CODEC_ADAPTIVE && info->dims_by_width[8] > 0
               ? TT_DEBIAS_VECTOR
               : TT_DEBIAS_TABLE;
}

/* The variant's index at path: reused when one is there that opens and matches, else
 * built (replacing whatever is there). *built_s receives the build time (stored in the
 * index when reused). */
static int ensure_index(const char *path, tt_input *in, const build_cfg *c, const rp_variant *v,
                        bool rebuild, const char *step, bool *reused, double *built_s) {
    struct stat st;
    *reused = false;
    if (!rebuild && stat(path, &st) == 0) {
        tt_index *idx = NULL;
        tt_index_info info;
        const char *why = "built with other parameters";
        if (tt_index_open(&idx, path, NULL) != TT_OK || tt_index_get_info(idx, &info) != TT_OK)
            why = tt_last_error();
        else if (info.nbits == (uint32_t)(v->original ? 1 : v->nbits) &&
                 info.codec_tables == v->codec && (int)info.pool_factor == v->pool &&
                 info.debias == (v->debias == TT_DEBIAS_AUTO ? auto_debias(&info) : v->debias) &&
                 info.pool_global == v->gpool &&
                 (info.keep_originals != TT_KEEP_NONE) == v->original &&
                 tt_index_sparse_kind(idx) == c->sparse_kind &&
                 info.num_docs == tt_input_num_docs(in) &&
                 info.input_vectors == tt_input_num_vectors(in) && info.dim == tt_input_dim(in)) {
            *reused = true;
            *built_s = info.build_seconds;
            tt_index_close(idx);
            fprintf(stderr, "tartan report: %s %s: reused %s (built in %.2f s)\n", step, v->name,
                    path, *built_s);
            return TT_OK;
        }
        fprintf(stderr, "tartan report: %s %s: not reusing %s (%s); building it again\n", step,
                v->name, path, why);
        tt_index_close(idx);
    }
    fprintf(stderr, "tartan report: %s %s: building %s\n", step, v->name, path);
    tt_build_options o;
    tt_build_options_init(&o);
    /* The original's index is only searched in exact mode over the kept float16
     * vectors; its compressed part is the cheapest one (1 bit). */
    o.nbits = v->original ? 1 : v->nbits;
    o.codec_tables = v->codec;
    o.debias = v->debias;
    o.pool_factor = v->pool;
    o.pool_global = v->gpool;
    o.keep_originals = v->original ? TT_KEEP_F16 : TT_KEEP_NONE;
    o.num_centroids = c->centroids;
    o.seed = c->seed;
    o.normalize = c->normalize;
    o.threads = c->threads;
    o.force = 1;
    o.sparse = c->sparse;
    o.encoder = c->describe ? c->describe : "tartan report";
    o.cancel = (const volatile int *)&cli_cancel;
    cli_progress_state ps;
    cli_progress_init(&ps);
    o.progress = cli_progress;
    o.progress_user = &ps;
    tt_build_stats bs;
    int rc = tt_build(path, in, &o, &bs);
    cli_progress_done(&ps);
    if (rc)
        return rc;
    *built_s = bs.seconds_total;
    char hb[32];
    fprintf(stderr, "tartan report: %s %s: built in %.2f s (%s)\n", step, v->name,
            bs.seconds_total, rp_human_bytes((double)bs.index_bytes, hb, sizeof hb));
    return TT_OK;
}

/* ------------------------------------------------------------------ search */

typedef struct search_out {
    tt_hit *hits;      /* nq * k */
    uint32_t *nhits;   /* nq */
    double p50;        /* seconds */
    uint64_t timed;
} search_out;

/* All queries (on `threads` threads, in slices so that a terminal shows progress),
 * then the latency pass: the first `timed` queries again, one at a time on this
 * thread, after the first pass has warmed the caches. */
static int run_search(const tt_index *idx, const tt_queries *qs, uint32_t k,
                      const tt_search_options *so, int threads, uint64_t timed, search_out *out) {
    const uint64_t nq = qs->num_queries, slice = 64;
    int st = TT_OK;
    tt_search_ctx *ctx = NULL;
    double *secs = NULL;
    tt_hit *one = NULL;
    cli_progress_state ps;
    cli_progress_init(&ps);
    for (uint64_t q0 = 0; q0 < nq; q0 += slice) {
        uint64_t m = nq - q0 < slice ? nq - q0 : slice;
        if ((st = tt_search_batch(idx, qs->vectors, qs->offsets + q0, qs->lens + q0, m, k, so,
                                  threads, out->hits + q0 * k, out->nhits + q0, NULL))) {
            cli_progress_done(&ps);
            fprintf(stderr, "tartan report: in the queries from number %llu (id %s) on:\n",
                    (unsigned long long)q0, qs->ids[q0]);
            goto done;
        }
        cli_progress(&ps, "search", q0 + m, nq);
    }
    cli_progress_done(&ps);
    secs = malloc((timed ? timed : 1) * sizeof *secs);
    one = malloc((size_t)k * sizeof *one);
    if (!secs || !one) {
        st = oom();
        goto done;
    }
    if ((st = tt_search_ctx_new(idx, &ctx)))
        goto done;
    for (uint64_t q = 0; q < timed; q++) {
        uint32_t n;
        double t0 = now_s();
        st = tt_search(idx, ctx, qs->vectors + qs->offsets[q] * qs->dim, qs->lens[q], k, so, one,
                       &n);
        secs[q] = now_s() - t0;
        if (st)
            goto done;
        cli_progress(&ps, "latency", q + 1, timed);
    }
    cli_progress_done(&ps);
    qsort(secs, timed, sizeof *secs, dbl_cmp);
    /* Nearest-rank median (as tartan search reports p50). */
    out->p50 = timed ? secs[(timed + 1) / 2 - 1] : NAN;
    out->timed = timed;
done:
    tt_search_ctx_free(ctx);
    free(secs);
    free(one);
    return st;
}

/* The hits as a run with the index's external document ids. */
static int hits_to_run(const tt_index *idx, const tt_queries *qs, uint32_t k,
                       const search_out *so, tt_run **out) {
    tt_run *run = NULL;
    char *buf = NULL;
    size_t cap = 0;
    int st = tt_run_new(&run);
    for (uint64_t q = 0; !st && q < qs->num_queries; q++)
        for (uint32_t r = 0; !st && r < so->nhits[q]; r++) {
            const tt_hit *h = &so->hits[q * k + r];
            size_t len;
            const char *id = tt_index_doc_id(idx, h->doc, &len);
            if (len + 1 > cap) {
                char *nb = realloc(buf, len + 64);
                if (!nb) {
                    st = oom();
                    break;
                }
                buf = nb;
                cap = len + 64;
            }
            memcpy(buf, id, len);
            buf[len] = '\0';
            st = tt_run_add(run, qs->ids[q], buf, (double)h->score);
        }
    free(buf);
    if (st) {
        tt_run_free(run);
        run = NULL;
    }
    *out = run;
    return st;
}

/* Mean over queries of |top-k(variant) ∩ top-k(original)| / |top-k(original)|. */
static double overlap_recall(const search_out *orig, const search_out *var, uint64_t nq,
                             uint32_t k) {
    uint64_t *set = malloc((size_t)k * sizeof *set);
    if (!set || nq == 0) {
        free(set);
        return NAN;
    }
    double sum = 0;
    for (uint64_t q = 0; q < nq; q++) {
        uint32_t n = orig->nhits[q], hit = 0;
        for (uint32_t r = 0; r < n; r++)
            set[r] = orig->hits[q * k + r].doc;
        qsort(set, n, sizeof *set, u64_cmp);
        for (uint32_t r = 0; r < var->nhits[q]; r++) {
            uint64_t d = var->hits[q * k + r].doc;
            if (bsearch(&d, set, n, sizeof *set, u64_cmp))
                hit++;
        }
        sum += n ? (double)hit / n : 1.0;
    }
    free(set);
    return sum / (double)nq;
}

/* -------------------------------------------------------- sparse and hybrid */

/* Sparse (hybrid false) or hybrid search of every query (query q's sparse query is
 * record sparse_of[q] of sq, UINT64_MAX: none), on `threads` threads in slices, then
 * the latency pass: the first `timed` queries again on one calling thread (a hybrid
 * query still runs its dense and sparse parts at once, tt_hybrid_search_batch). */
static int run_sparse_hybrid(const tt_index *idx, const tt_queries *qs, bool hybrid,
                             const tt_search_options *dopt, const tt_sparse_set *sq,
                             const uint64_t *sparse_of, const tt_sparse_options *spo,
                             const tt_fusion_options *fo, uint32_t k, int threads,
                             uint64_t timed, search_out *out) {
    const uint64_t nq = qs->num_queries, slice = 64;
    const char *what = hybrid ? "hybrid" : "sparse";
    double *secs = NULL;
    tt_hit *th = NULL;
    uint32_t *tn = NULL;
    int st = TT_OK;
    cli_progress_state ps;
    cli_progress_init(&ps);
    for (uint64_t q0 = 0; q0 < nq; q0 += slice) {
        uint64_t m = nq - q0 < slice ? nq - q0 : slice;
        st = tt_hybrid_search_batch(idx, hybrid ? qs->vectors : NULL,
                                    hybrid ? qs->offsets + q0 : NULL,
                                    hybrid ? qs->lens + q0 : NULL, hybrid ? dopt : NULL, sq,
                                    sparse_of + q0, spo, fo, m, k, threads, out->hits + q0 * k,
                                    out->nhits + q0, NULL);
        if (st) {
            cli_progress_done(&ps);
            fprintf(stderr, "tartan report: %s search, in the queries from number %llu (id %s) "
                    "on:\n", what, (unsigned long long)q0, qs->ids[q0]);
            return st;
        }
        cli_progress(&ps, what, q0 + m, nq);
    }
    cli_progress_done(&ps);
    secs = malloc((timed ? timed : 1) * sizeof *secs);
    th = malloc((timed ? timed : 1) * k * sizeof *th);
    tn = malloc((timed ? timed : 1) * sizeof *tn);
    if (!secs || !th || !tn) {
        st = oom();
        goto done;
    }
    if (timed && (st = tt_hybrid_search_batch(idx, hybrid ? qs->vectors : NULL,
                                              hybrid ? qs->offsets : NULL,
                                              hybrid ? qs->lens : NULL, hybrid ? dopt : NULL, sq,
                                              sparse_of, spo, fo, timed, k, 1, th, tn, secs)))
        goto done;
    qsort(secs, timed, sizeof *secs, dbl_cmp);
    out->p50 = timed ? secs[(timed + 1) / 2 - 1] : NAN;
    out->timed = timed;
done:
    free(secs);
    free(th);
    free(tn);
    return st;
}

/* The hits of `so` as a run written aside to tmp (tag), evaluated: the means into val
 * and, per metric, the paired t-test against the dense evaluation `dense` (the same
 * judged queries) into p. */
static int eval_against_dense(const tt_index *idx, const tt_queries *qs, uint32_t k,
                              const search_out *so, const char *tmp, const char *tag,
                              const tt_qrels *qrels, const tt_metric *metrics, size_t nm,
                              const tt_eval *dense, double *val, double *p) {
    tt_run *run = NULL;
    tt_eval *ev = NULL;
    tt_eval_options eo;
    tt_eval_options_init(&eo);
    eo.missing_as_zero = 1;
    int st;
    if ((st = hits_to_run(idx, qs, k, so, &run)) || (st = tt_run_write(run, tmp, tag)) ||
        (st = tt_evaluate(&ev, qrels, run, metrics, nm, &eo)))
        goto done;
    const size_t n = tt_eval_num_queries(dense);
    if (tt_eval_num_queries(ev) != n) {
        fprintf(stderr, "tartan report: error: %s evaluated %zu queries, the dense run %zu\n",
                tag, tt_eval_num_queries(ev), n);
        st = REPORTED;
        goto done;
    }
    for (size_t m = 0; m < nm; m++) {
        val[m] = tt_eval_mean(ev, m);
        if (tt_ttest_paired(tt_eval_values(ev, m), tt_eval_values(dense, m), n, NULL, &p[m]) !=
            TT_OK)
            p[m] = NAN; /* fewer than 2 queries: no test */
    }
done:
    tt_eval_free(ev);
    tt_run_free(run);
    return st;
}

/* ------------------------------------------------------------------ output */

/* The command line, each word single-quoted when the shell would split or expand it. */
static char *command_line(int argc, char **argv) {
    size_t cap = 16;
    for (int i = 0; i < argc; i++)
        cap += 4 * strlen(argv[i]) + 3;
    char *s = malloc(cap), *p = s;
    if (!s)
        return NULL;
    p += sprintf(p, "tartan");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool plain = *a != '\0';
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,=:@%+-",
                        *c))
                plain = false;
        *p++ = ' ';
        if (plain) {
            p += sprintf(p, "%s", a);
            continue;
        }
        *p++ = '\'';
        for (const char *c = a; *c; c++) {
            if (*c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        *p++ = '\'';
        *p = '\0';
    }
    return s;
}

typedef int (*writer_fn)(FILE *, const rp_report *);

/* Writes path.tmp through fn; the caller renames it once every output is ready. */
static int write_aside(const char *tmp, writer_fn fn, const rp_report *r) {
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "tartan report: error: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    int bad = fn(f, r);
    if (fflush(f) || fsync(fileno(f)))
        bad = -1;
    if (fclose(f))
        bad = -1;
    if (bad)
        fprintf(stderr, "tartan report: error: %s: write failed: %s\n", tmp, strerror(errno));
    return bad;
}

static int make_dir(const char *path) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        errno = ENOTDIR;
    }
    fprintf(stderr, "tartan report: error: %s: %s\n", path, strerror(errno));
    return -1;
}

static char *concat(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", a, b);
    return s;
}

static char *path_join(const char *a, const char *b, const char *c) {
    size_t n = strlen(a) + strlen(b) + (c ? strlen(c) : 0) + 3;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s/%s%s", a, b, c ? c : "");
    return s;
}

/* ---------------------------------------------------------------- encoding */

/* The vectors of `input` made by `command` in `mode`, as tartan encode writes them:
 * DIR/encoded/<what>-HASH.{vectors.npy, doclens.npy, ids.txt, encoder.txt}, HASH over
 * the command, the mode and the input file's path, size and mtime. Reused when all
 * four files are there (tt_encode_to_npy publishes them only on success). *prefix
 * receives the malloc'd path prefix. */
static int encode_cached(const char *enc_dir, const char *what, const char *command,
                         const char *input, int mode, tt_sparse_set *sparse_out, char **prefix) {
    char name[64], buf[64];
    uint64_t h = fnv1a(0xcbf29ce484222325ull, "tartan-report-encode-1\n");
    h = fnv1a(h, command);
    h = fnv1a(h, mode == TT_ENC_QUERY ? "\nquery\n" : "\npassage\n");
    h = hash_file(h, input);
    snprintf(name, sizeof name, "%s-%016llx", what, (unsigned long long)h);
    *prefix = path_join(enc_dir, name, NULL);
    if (!*prefix)
        return oom();
    static const char *const ext[] = {".vectors.npy", ".doclens.npy", ".ids.txt",
                                      ".encoder.txt"};
    bool all = true;
    for (int i = 0; i < 4 && all; i++) {
        char *p = path_join(enc_dir, name, ext[i]);
        struct stat st;
        if (!p)
            return oom();
        all = stat(p, &st) == 0;
        free(p);
    }
    if (all && !sparse_out) {
        fprintf(stderr, "tartan report: %s: reused %s.*\n", what, *prefix);
        return TT_OK;
    }
    fprintf(stderr, "tartan report: %s: encoding %s with '%s'\n", what, input, command);
    tt_encoder_options eo;
    tt_encoder_options_init(&eo);
    eo.force = 1;
    eo.sparse_out = sparse_out;
    eo.cancel = (const volatile int *)&cli_cancel;
    cli_progress_state ps;
    cli_progress_init(&ps);
    eo.progress = cli_progress;
    eo.progress_user = &ps;
    tt_encode_stats es;
    int st = tt_encode_to_npy(command, input, mode, *prefix, &eo, &es);
    cli_progress_done(&ps);
    if (st == TT_OK) {
        snprintf(buf, sizeof buf, "%.2f s", es.seconds);
        fprintf(stderr, "tartan report: %s: %llu records, %llu vectors x %u in %s\n", what,
                (unsigned long long)es.records, (unsigned long long)es.vectors, es.dim, buf);
    }
    return st;
}

/* -------------------------------------------------------------------- main */

enum {
    O_VECTORS = 256, O_DOCLENS, O_IDS, O_QUERIES, O_QLENS, O_QIDS, O_QRELS, O_OUT, O_VARIANTS,
    O_METRICS, O_K, O_SCORE, O_NPROBE, O_THRESHOLD, O_NDOCS, O_LATQ, O_THREADS, O_CENTROIDS,
    O_SEED, O_NONORM, O_BF16, O_REBUILD, O_ENCODER, O_CORPUS, O_QTEXT,
    O_BM25, O_TEXT, O_SPARSE, O_SPARSEQ, O_FUSION, O_FDEPTH, O_ALPHA, O_VOCAB, O_ENCSPARSE
};

int cmd_report(int argc, char **argv) {
    static const struct option longopts[] = {
        {"vectors", required_argument, 0, O_VECTORS}, {"doclens", required_argument, 0, O_DOCLENS},
        {"ids", required_argument, 0, O_IDS},         {"queries", required_argument, 0, O_QUERIES},
        {"qlens", required_argument, 0, O_QLENS},     {"query-ids", required_argument, 0, O_QIDS},
        {"qrels", required_argument, 0, O_QRELS},     {"out", required_argument, 0, O_OUT},
        {"variants", required_argument, 0, O_VARIANTS},
        {"metrics", required_argument, 0, O_METRICS}, {"k", required_argument, 0, O_K},
        {"score", required_argument, 0, O_SCORE},     {"nprobe", required_argument, 0, O_NPROBE},
        {"threshold", required_argument, 0, O_THRESHOLD},
        {"ndocs", required_argument, 0, O_NDOCS},
        {"latency-queries", required_argument, 0, O_LATQ},
        {"threads", required_argument, 0, O_THREADS},
        {"centroids", required_argument, 0, O_CENTROIDS},
        {"seed", required_argument, 0, O_SEED},       {"no-normalize", no_argument, 0, O_NONORM},
        {"bf16", no_argument, 0, O_BF16},             {"rebuild", no_argument, 0, O_REBUILD},
        {"encoder", required_argument, 0, O_ENCODER}, {"corpus", required_argument, 0, O_CORPUS},
        {"query-text", required_argument, 0, O_QTEXT},
        {"encoder-sparse", no_argument, 0, O_ENCSPARSE},
        {"bm25", no_argument, 0, O_BM25},             {"text", required_argument, 0, O_TEXT},
        {"sparse", required_argument, 0, O_SPARSE},
        {"sparse-queries", required_argument, 0, O_SPARSEQ},
        {"vocab", required_argument, 0, O_VOCAB},
        {"fusion", required_argument, 0, O_FUSION},
        {"fusion-depth", required_argument, 0, O_FDEPTH},
        {"alpha", required_argument, 0, O_ALPHA},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0}};
    const char *vectors = NULL, *doclens = NULL, *queries = NULL, *qlens = NULL, *qids = NULL;
    const char *qrels_path = NULL, *out = NULL, *variants_arg = DEFAULT_VARIANTS;
    const char *metrics_arg = NULL, *encoder = NULL, *corpus = NULL, *qtext = NULL;
    uint64_t k = 100, latq = 100, u;
    double d;
    bool rebuild = false;
    build_cfg cfg = {.normalize = 1, .seed = 42};
    tt_search_options so;
    tt_search_options_init(&so);
    int bm25 = 0, enc_sparse = 0;
    bool fusion_set = false;
    const char *text = NULL, *sparse_path = NULL, *sparse_qpath = NULL, *vocab = NULL;
    tt_sparse_options spo;
    tt_fusion_options fo;
    tt_sparse_options_init(&spo);
    tt_fusion_options_init(&fo);
    int c, rc_arg;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case O_VECTORS: vectors = optarg; break;
        case O_DOCLENS: doclens = optarg; break;
        case O_IDS: cfg.ids = optarg; break;
        case O_QUERIES: queries = optarg; break;
        case O_QLENS: qlens = optarg; break;
        case O_QIDS: qids = optarg; break;
        case O_QRELS: qrels_path = optarg; break;
        case O_OUT: out = optarg; break;
        case O_VARIANTS: variants_arg = optarg; break;
        case O_METRICS: metrics_arg = optarg; break;
        case O_K:
            if (!cli_parse_u64(optarg, &k) || k == 0 || k > 100000)
                return cli_usage_error(CMD, "--k must be 1..100000");
            break;
        case O_SCORE:
            if (!strcmp(optarg, "sum"))
                so.score = TT_SCORE_SUM;
            else if (!strcmp(optarg, "mean"))
                so.score = TT_SCORE_MEAN;
            else
                return cli_usage_error(CMD, "--score must be sum or mean");
            break;
        case O_NPROBE:
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > (1u << 24))
                return cli_usage_error(CMD, "--nprobe must be 1..16777216");
            so.nprobe = (int)u;
            break;
        case O_THRESHOLD:
            if (!cli_parse_double(optarg, &d))
                return cli_usage_error(CMD, "--threshold must be a finite number");
            so.threshold = (float)d;
            break;
        case O_NDOCS:
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > UINT32_MAX)
                return cli_usage_error(CMD, "--ndocs must be 1..4294967295");
            so.ndocs = (uint32_t)u;
            break;
        case O_LATQ:
            if (!cli_parse_u64(optarg, &latq))
                return cli_usage_error(CMD, "--latency-queries must be a non-negative integer");
            break;
        case O_THREADS:
            if ((rc_arg = cli_threads_arg(CMD, optarg, &cfg.threads)))
                return rc_arg;
            break;
        case O_CENTROIDS:
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > (1u << 24))
                return cli_usage_error(CMD, "--centroids must be 1..16777216");
            cfg.centroids = (uint32_t)u;
            break;
        case O_SEED:
            if (!cli_parse_u64(optarg, &cfg.seed))
                return cli_usage_error(CMD, "--seed must be a non-negative integer");
            break;
        case O_NONORM: cfg.normalize = 0; break;
        case O_BF16: cfg.bf16 = 1; break;
        case O_REBUILD: rebuild = true; break;
        case O_ENCODER: encoder = optarg; break;
        case O_CORPUS: corpus = optarg; break;
        case O_QTEXT: qtext = optarg; break;
        case O_BM25: bm25 = 1; break;
        case O_ENCSPARSE: enc_sparse = 1; break;
        case O_TEXT: text = optarg; break;
        case O_SPARSE: sparse_path = optarg; break;
        case O_SPARSEQ: sparse_qpath = optarg; break;
        case O_VOCAB: vocab = optarg; break;
        case O_FUSION:
            fusion_set = true;
            if (!strcmp(optarg, "minmax"))
                fo.method = TT_FUSION_MINMAX;
            else if (!strcmp(optarg, "rrf"))
                fo.method = TT_FUSION_RRF;
            else
                return cli_usage_error(CMD, "--fusion must be minmax or rrf");
            break;
        case O_FDEPTH:
            fusion_set = true;
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 1000000)
                return cli_usage_error(CMD, "--fusion-depth must be 1..1000000");
            fo.depth = (uint32_t)u;
            break;
        case O_ALPHA:
            fusion_set = true;
            if (!cli_parse_double(optarg, &d) || d < 0 || d > 1)
                return cli_usage_error(CMD, "--alpha must be a number in [0, 1]");
            fo.alpha = d;
            break;
        case 'h': usage(stdout); return CLI_OK;
        case ':': return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (encoder) {
        if (vectors || doclens || cfg.ids || queries || qlens || qids)
            return cli_usage_error(CMD, "--encoder makes the vectors: give --corpus and "
                                   "--query-text, not --vectors/--doclens/--ids/--queries/"
                                   "--qlens/--query-ids");
        if (!corpus || !qtext || !qrels_path || !out)
            return cli_usage_error(CMD, "--encoder needs --corpus, --query-text, --qrels and "
                                   "--out");
    } else if (corpus || (qtext && !bm25)) {
        return cli_usage_error(CMD, "--corpus and --query-text go with --encoder (or "
                               "--query-text with --bm25)");
    } else if (!vectors || !doclens || !queries || !qrels_path || !out) {
        return cli_usage_error(CMD, "--vectors, --doclens, --queries, --qrels and --out are "
                               "required");
    }

    if (!*out)
        return cli_usage_error(CMD, "--out must name a directory");
    /* D / S / H: the sparse side's documents and queries */
    if (bm25 && sparse_path)
        return cli_usage_error(CMD, "--bm25 and --sparse exclude each other");
    if (bm25 && !qtext)
        return cli_usage_error(CMD, "--bm25 needs the query texts: --query-text FILE");
    if (bm25 && !text && !corpus)
        return cli_usage_error(CMD, "--bm25 needs the documents' texts: --text FILE (BEIR "
                               "corpus.jsonl or TSV), or --encoder with --corpus");
    if (text && !bm25)
        return cli_usage_error(CMD, "--text goes with --bm25");
    if (!sparse_path != !sparse_qpath)
        return cli_usage_error(CMD, "--sparse and --sparse-queries go together");
    if (enc_sparse && (!encoder || bm25 || sparse_path))
        return cli_usage_error(CMD, "--encoder-sparse takes the sparse vectors from --encoder "
                               "(not with --bm25 or --sparse)");
    if (fusion_set && !bm25 && !sparse_path && !enc_sparse)
        return cli_usage_error(CMD, "--fusion, --fusion-depth and --alpha go with --bm25, "
                               "--sparse or --encoder-sparse");
    const bool hybrid = bm25 || sparse_path || enc_sparse;
    /* An interrupt stops a build or encoder at once and the report after the current
     * search; its temporary files are removed either way. */
    cli_signals_install(true);
    int rc = CLI_FAIL, st = TT_OK;
    char **mlist = NULL;
    size_t nvar = 0, nm = 0;
    rp_variant *vars = NULL;
    tt_metric metrics[RP_MAX_METRICS];
    rp_report rep;
    memset(&rep, 0, sizeof rep);
    tt_input *in = NULL;
    tt_queries *qs = NULL;
    tt_qrels *qrels = NULL;
    tt_run *run = NULL;
    tt_eval *ev = NULL;
    tt_index *idx = NULL;
    search_out orig = {0}, cur = {0};
    double *orig_vals = NULL;
    char **index_dirs = NULL, **run_tmp = NULL, **run_final = NULL, **run_rel = NULL;
    char *cmdline = NULL, *dir_idx = NULL, *dir_runs = NULL, *dir_enc = NULL;
    char *enc_docs = NULL, *enc_queries = NULL, *enc_paths[6] = {0}, enc_desc[256] = "";
    static const char *const outs[] = {"report.md", "report.csv", "report.json", "report.svg"};
    static const writer_fn writers[] = {rp_write_markdown, rp_write_csv, rp_write_json,
                                        rp_write_svg};
    char *out_tmp[4] = {0}, *out_final[4] = {0};
    tt_sparse_set *sp_docs = NULL, *sq = NULL;
    uint64_t *sparse_of = NULL;
    search_out sres = {0}, hres = {0};
    tt_search_options so_user;

    /* ---- variants: canonical, distinct, the original first */
    {
        size_t n = 0;
        char **list = cli_split_commas(variants_arg, &n);
        if (!list || !(vars = calloc(n + 1, sizeof *vars))) {
            cli_free_list(list);
            fprintf(stderr, "tartan report: error: out of memory\n");
            goto done;
        }
        rp_parse_variant("original", &vars[nvar++]);
        for (size_t i = 0; i < n; i++) {
            rp_variant v;
            if (!rp_parse_variant(list[i], &v)) {
                rc = cli_usage_error(CMD, "--variants: unknown variant '%s' (original or exact; "
                                     "Nbit with N 1, 2, 3 (adaptive) or 4, then -perdim, -shared "
                                     "or -adaptive, then -table, -vector (adaptive) or "
                                     "-nodebias, then -poolF or -gpoolF: 2bit, "
                                     "2bit-adaptive, 1bit-vector, 2bit-pool2, 2bit-gpool2.5...)",
                                     list[i]);
                cli_free_list(list);
                goto done;
            }
            bool dup = false;
            for (size_t j = 0; j < nvar; j++)
                dup |= !strcmp(vars[j].name, v.name);
            if (dup && !v.original) {
                rc = cli_usage_error(CMD, "--variants: %s is listed twice", v.name);
                cli_free_list(list);
                goto done;
            }
            if (!dup)
                vars[nvar++] = v;
        }
        cli_free_list(list);
    }

    /* ---- metrics, with cutoffs within the k searched */
    char dflt[96];
    {
        if (!metrics_arg) {
            snprintf(dflt, sizeof dflt, "MRR@%llu,nDCG@%llu,Recall@%llu",
                     (unsigned long long)(k < 10 ? k : 10), (unsigned long long)(k < 10 ? k : 10),
                     (unsigned long long)(k < 100 ? k : 100));
            metrics_arg = dflt;
        }
        mlist = cli_split_commas(metrics_arg, &nm);
        if (!mlist) {
            fprintf(stderr, "tartan report: error: out of memory\n");
            goto done;
        }
        if (nm == 0 || nm > RP_MAX_METRICS) {
            rc = cli_usage_error(CMD, "--metrics: give 1 to %d measures", RP_MAX_METRICS);
            goto done;
        }
        for (size_t m = 0; m < nm; m++) {
            if (tt_metric_parse(mlist[m], &metrics[m]) != TT_OK) {
                rc = cli_usage_error(CMD, "--metrics: %s", tt_last_error());
                goto done;
            }
            tt_metric_name(&metrics[m], rep.metric[m], sizeof rep.metric[m]);
            if (metrics[m].k == 0 || metrics[m].k > k) {
                rc = cli_usage_error(CMD, "--metrics: %s needs a cutoff of at most --k %llu "
                                     "(the runs hold the top %llu only)", rep.metric[m],
                                     (unsigned long long)k, (unsigned long long)k);
                goto done;
            }
            for (size_t j = 0; j < m; j++)
                if (!strcmp(rep.metric[j], rep.metric[m])) {
                    rc = cli_usage_error(CMD, "--metrics: %s is listed twice", rep.metric[m]);
                    goto done;
                }
        }
    }

    /* ---- with --encoder: the vectors first (cached under DIR/encoded) */
    if (encoder) {
        if (make_dir(out) || !(dir_enc = path_join(out, "encoded", NULL)) || make_dir(dir_enc))
            goto done;
        /* --encoder-sparse: the sparse parts come with the vectors (not cached: encoded
         * again every run) */
        if (enc_sparse &&
            ((st = tt_sparse_set_new_weights(&sp_docs)) || (st = tt_sparse_set_new_weights(&sq))))
            goto fail;
        if ((st = encode_cached(dir_enc, "corpus", encoder, corpus, TT_ENC_PASSAGE, sp_docs,
                                &enc_docs)) ||
            (st = encode_cached(dir_enc, "queries", encoder, qtext, TT_ENC_QUERY, sq,
                                &enc_queries)))
            goto fail;
        if (enc_sparse && (!tt_sparse_set_size(sp_docs) || !tt_sparse_set_size(sq))) {
            fprintf(stderr, "tartan report: error: --encoder-sparse: the encoder '%s' sent no "
                    "sparse parts (it speaks protocol 1; doc/encoder-protocol.md, protocol 2)\n",
                    encoder);
            goto done;
        }
        static const char *const sfx[] = {".vectors.npy", ".doclens.npy", ".ids.txt"};
        for (int j = 0; j < 6; j++)
            if (!(enc_paths[j] = concat(j < 3 ? enc_docs : enc_queries, sfx[j % 3])))
                goto nomem;
        /* The encoder's self-description, one line, for the indexes and the report. */
        char *dp = concat(enc_docs, ".encoder.txt");
        FILE *df = dp ? fopen(dp, "r") : NULL;
        if (df && fgets(enc_desc, sizeof enc_desc, df))
            enc_desc[strcspn(enc_desc, "\r\n")] = '\0';
        if (df)
            fclose(df);
        free(dp);
        cfg.describe = enc_desc[0] ? enc_desc : encoder;
        vectors = enc_paths[0];
        doclens = enc_paths[1];
        cfg.ids = enc_paths[2];
        queries = enc_paths[3];
        qlens = enc_paths[4];
        qids = enc_paths[5];
    }

    /* ---- inputs: all read and checked before anything is built */
    size_t nl = 0;
    cfg.vectors = cli_split_commas(vectors, &cfg.nfiles);
    cfg.doclens = cli_split_commas(doclens, &nl);
    if (!cfg.vectors || !cfg.doclens) {
        fprintf(stderr, "tartan report: error: out of memory\n");
        goto done;
    }
    if (cfg.nfiles == 0 || cfg.nfiles != nl) {
        rc = cli_usage_error(CMD, "%zu vector files but %zu doclens files", cfg.nfiles, nl);
        goto done;
    }
    tt_input_options io;
    tt_input_options_init(&io);
    io.bf16_from_uint16 = cfg.bf16;
    if ((st = tt_input_open(&in, cfg.nfiles, (const char *const *)cfg.vectors,
                            (const char *const *)cfg.doclens, cfg.ids, &io)) ||
        (st = tt_queries_load(&qs, queries, qlens, qids)) ||
        (st = tt_qrels_load(&qrels, qrels_path)))
        goto fail;
    if (qs->dim != tt_input_dim(in)) {
        fprintf(stderr, "tartan report: error: %s: queries have dimension %u but the document "
                "vectors (%s) have %u\n", queries, qs->dim, cfg.vectors[0], tt_input_dim(in));
        goto done;
    }
    const uint64_t nq = qs->num_queries;
    if (hybrid) { /* the sparse vectors of the documents and of the queries (by query id) */
        if (!enc_sparse &&
            (rc_arg = cli_sparse_load(CMD, bm25, text, sparse_path, corpus, vocab, &sp_docs))) {
            rc = rc_arg;
            goto done;
        }
        if (!enc_sparse && (st = bm25 ? tt_sparse_set_load_text(&sq, qtext, 1)
                                      : tt_sparse_set_load_jsonl_vocab(&sq, sparse_qpath, vocab)))
            goto fail;
        if (!(sparse_of = malloc((nq ? nq : 1) * sizeof *sparse_of)))
            goto nomem;
        for (uint64_t q = 0; q < nq; q++) {
            int64_t r = tt_sparse_set_find(sq, qs->ids[q]);
            sparse_of[q] = r < 0 ? UINT64_MAX : (uint64_t)r;
            rep.no_sparse += r < 0;
        }
        if (rep.no_sparse == nq) {
            fprintf(stderr, "tartan report: error: no query id of %s is in %s\n",
                    sparse_qpath ? sparse_qpath : qtext, qids ? qids : queries);
            goto done;
        }
        if (rep.no_sparse)
            fprintf(stderr, "tartan report: warning: %zu of %llu queries have no sparse query in "
                    "%s: no sparse hits, their dense list in hybrid\n", rep.no_sparse,
                    (unsigned long long)nq, sparse_qpath ? sparse_qpath : qtext);
        cfg.sparse = sp_docs;
        cfg.sparse_kind = tt_sparse_set_kind(sp_docs);
        cfg.sparse_file = bm25 ? (text ? text : corpus) : enc_sparse ? corpus : sparse_path;
    }
    {
        /* Which queries the evaluation will count: a run naming every query once. */
        tt_eval_options eo;
        tt_eval_options_init(&eo);
        if ((st = tt_run_new(&run)))
            goto fail;
        for (uint64_t q = 0; q < nq; q++)
            if ((st = tt_run_add(run, qs->ids[q], "-", 0)))
                goto fail;
        if (tt_evaluate(&ev, qrels, run, metrics, 1, &eo) != TT_OK) {
            fprintf(stderr, "tartan report: error: no query id of %s is in %s (query ids: %s)\n",
                    qrels_path, qids ? qids : queries,
                    qids ? "one per line" : "row numbers; give --query-ids");
            goto done;
        }
        tt_eval_counts cnt;
        tt_eval_get_counts(ev, &cnt);
        rep.missing = cnt.missing;
        rep.unjudged = cnt.ignored;
        if (cnt.missing)
            fprintf(stderr, "tartan report: warning: %zu of %zu judged queries of %s have no query "
                    "vectors; they count 0 in every variant\n", cnt.missing, cnt.qrels_queries,
                    qrels_path);
        if (cnt.ignored)
            fprintf(stderr, "tartan report: note: %zu of %llu queries have no judgements in %s and "
                    "are searched but not evaluated\n", cnt.ignored, (unsigned long long)nq,
                    qrels_path);
        tt_eval_free(ev);
        ev = NULL;
        tt_run_free(run);
        run = NULL;
    }

    /* ---- output directories and names */
    /* Temporaries named by pid: two reports into one directory never share one. */
    char tmp_suffix[32];
    snprintf(tmp_suffix, sizeof tmp_suffix, ".tmp-%ld", (long)getpid());
    if (make_dir(out) || !(dir_idx = path_join(out, "indexes", NULL)) || make_dir(dir_idx) ||
        !(dir_runs = path_join(out, "runs", NULL)) || make_dir(dir_runs))
        goto done;
    index_dirs = calloc(nvar, sizeof *index_dirs);
    /* runs: [0, nvar) dense, then sparse and hybrid (with --bm25 or --sparse) */
    run_tmp = calloc(3 * nvar, sizeof *run_tmp);
    run_final = calloc(3 * nvar, sizeof *run_final);
    run_rel = calloc(3 * nvar, sizeof *run_rel);
    if (!index_dirs || !run_tmp || !run_final || !run_rel)
        goto nomem;
    for (size_t i = 0; i < nvar; i++) {
        char iname[64], rname[64];
        snprintf(iname, sizeof iname, "%s-%016llx", vars[i].name,
                 (unsigned long long)variant_hash(&cfg, &vars[i]));
        snprintf(rname, sizeof rname, "%s.run", vars[i].name);
        if (!(index_dirs[i] = path_join(dir_idx, iname, NULL)) ||
            !(run_final[i] = path_join(dir_runs, rname, NULL)) ||
            !(run_tmp[i] = path_join(dir_runs, rname, tmp_suffix)) ||
            !(run_rel[i] = path_join("runs", rname, NULL)))
            goto nomem;
        vars[i].index_dir = index_dirs[i];
        vars[i].run_path = run_rel[i];
        for (size_t j = 1; hybrid && j < 3; j++) {
            size_t r = j * nvar + i;
            snprintf(rname, sizeof rname, "%s.%s.run", vars[i].name, j == 1 ? "sparse" : "hybrid");
            if (!(run_final[r] = path_join(dir_runs, rname, NULL)) ||
                !(run_tmp[r] = path_join(dir_runs, rname, tmp_suffix)) ||
                !(run_rel[r] = path_join("runs", rname, NULL)))
                goto nomem;
        }
        vars[i].sparse_run_path = run_rel[nvar + i];
        vars[i].hybrid_run_path = run_rel[2 * nvar + i];
    }
    for (int j = 0; j < 4; j++)
        if (!(out_final[j] = path_join(out, outs[j], NULL)) ||
            !(out_tmp[j] = path_join(out, outs[j], tmp_suffix)))
            goto nomem;

    /* ---- phase 1: every index (built before searching so that build times are
     * measured alike: searches switch BLAS to one thread). */
    for (size_t i = 0; i < nvar; i++) {
        char step[48];
        snprintf(step, sizeof step, "[%zu/%zu]", i + 1, nvar);
        if ((st = ensure_index(index_dirs[i], in, &cfg, &vars[i], rebuild, step, &vars[i].reused,
                               &vars[i].build_seconds)))
            goto fail;
    }

    /* ---- phase 2: search, evaluate, compare with the original */
    tt_blas_set_threads(1); /* search threads come from --threads */
    /* Hybrid: the dense part runs to the fusion depth, with the parameters of that k. */
    const uint32_t dense_k = fo.depth > k ? fo.depth : (uint32_t)k;
    tt_search_options_resolve(&so, dense_k, &so_user);
    tt_search_options_resolve(&so, (uint32_t)k, &so);
    uint64_t timed = latq == 0 || latq > nq ? nq : latq;
    orig.hits = malloc((size_t)(nq ? nq : 1) * k * sizeof *orig.hits);
    orig.nhits = malloc((size_t)(nq ? nq : 1) * sizeof *orig.nhits);
    cur.hits = malloc((size_t)(nq ? nq : 1) * k * sizeof *cur.hits);
    cur.nhits = malloc((size_t)(nq ? nq : 1) * sizeof *cur.nhits);
    if (!orig.hits || !orig.nhits || !cur.hits || !cur.nhits)
        goto nomem;
    if (hybrid) {
        sres.hits = malloc((size_t)(nq ? nq : 1) * k * sizeof *sres.hits);
        sres.nhits = malloc((size_t)(nq ? nq : 1) * sizeof *sres.nhits);
        hres.hits = malloc((size_t)(nq ? nq : 1) * k * sizeof *hres.hits);
        hres.nhits = malloc((size_t)(nq ? nq : 1) * sizeof *hres.nhits);
        if (!sres.hits || !sres.nhits || !hres.hits || !hres.nhits)
            goto nomem;
    }
    tt_eval_options eo;
    tt_eval_options_init(&eo);
    eo.missing_as_zero = 1; /* every judged query, in every variant: a paired sample */
    size_t neval = 0;
    for (size_t i = 0; i < nvar; i++) {
        rp_variant *v = &vars[i];
        search_out *so_out = v->original ? &orig : &cur;
        tt_search_options o = so;
        o.mode = v->original ? TT_MODE_EXACT : TT_MODE_PLAID;
        tt_index_info info;
        if ((st = tt_index_open(&idx, index_dirs[i], NULL)) ||
            (st = tt_index_get_info(idx, &info)) ||
            (st = run_search(idx, qs, (uint32_t)k, &o, cfg.threads, timed, so_out)) ||
            (st = hits_to_run(idx, qs, (uint32_t)k, so_out, &run)) ||
            (st = tt_run_write(run, run_tmp[i], v->name)) ||
            (st = tt_evaluate(&ev, qrels, run, metrics, nm, &eo)))
            goto fail;
        if (cli_cancel)
            goto done;
        /* As recorded in the index, so a reused index reports what its build took. */
        v->build_seconds = info.build_seconds;
        v->latency_p50 = so_out->p50;
        v->latency_queries = so_out->timed;
        v->bytes = v->original ? info.bytes_f16 : info.bytes_index;
        v->debias_used = info.debias;
        /* Over the vectors as given (before any pooling), like the original's storage. */
        v->bits_per_dim = 8.0 * (double)v->bytes / ((double)info.input_vectors * info.dim);
        if (v->original) {
            rep.num_docs = info.num_docs;
            rep.num_vectors = info.num_vectors;
            rep.dim = info.dim;
            neval = tt_eval_num_queries(ev);
            if (!(orig_vals = malloc((neval ? neval : 1) * nm * sizeof *orig_vals)))
                goto nomem;
            for (size_t m = 0; m < nm; m++)
                memcpy(orig_vals + m * neval, tt_eval_values(ev, m), neval * sizeof *orig_vals);
        } else if (tt_eval_num_queries(ev) != neval) {
            fprintf(stderr, "tartan report: error: %s evaluated %zu queries, the original %zu\n",
                    v->name, tt_eval_num_queries(ev), neval);
            goto done;
        }
        v->recall = v->original ? 1.0 : overlap_recall(&orig, &cur, nq, (uint32_t)k);
        for (size_t m = 0; m < nm; m++) {
            v->value[m] = tt_eval_mean(ev, m);
            double p = NAN;
            if (!v->original && tt_ttest_paired(tt_eval_values(ev, m), orig_vals + m * neval,
                                                neval, NULL, &p) != TT_OK)
                p = NAN; /* fewer than 2 queries: no test */
            v->p[m] = p;
        }
        fprintf(stderr, "tartan report: [%zu/%zu] %s: %s search of %llu queries, %s %.4f, "
                "p50 %.3f ms\n", i + 1, nvar, v->name, v->original ? "exact" : "plaid",
                (unsigned long long)nq, rep.metric[0], v->value[0], v->latency_p50 * 1e3);
        if (hybrid) { /* S and H through the same index, compared with its D */
            tt_search_options dopt = so_user;
            dopt.mode = o.mode;
            char tag[64];
            snprintf(tag, sizeof tag, "%s.sparse", v->name);
            if ((st = run_sparse_hybrid(idx, qs, false, NULL, sq, sparse_of, &spo, &fo,
                                        (uint32_t)k, cfg.threads, timed, &sres)) ||
                (st = eval_against_dense(idx, qs, (uint32_t)k, &sres, run_tmp[nvar + i], tag,
                                         qrels, metrics, nm, ev, v->s_value, v->s_p)))
                goto fail;
            if (cli_cancel)
                goto done;
            snprintf(tag, sizeof tag, "%s.hybrid", v->name);
            if ((st = run_sparse_hybrid(idx, qs, true, &dopt, sq, sparse_of, &spo, &fo,
                                        (uint32_t)k, cfg.threads, timed, &hres)) ||
                (st = eval_against_dense(idx, qs, (uint32_t)k, &hres, run_tmp[2 * nvar + i], tag,
                                         qrels, metrics, nm, ev, v->h_value, v->h_p)))
                goto fail;
            if (cli_cancel)
                goto done;
            v->s_latency_p50 = sres.p50;
            v->h_latency_p50 = hres.p50;
            fprintf(stderr, "tartan report: [%zu/%zu] %s: sparse %s %.4f (p50 %.3f ms), hybrid "
                    "%s %.4f (p50 %.3f ms)\n", i + 1, nvar, v->name, rep.metric[0],
                    v->s_value[0], sres.p50 * 1e3, rep.metric[0], v->h_value[0],
                    hres.p50 * 1e3);
        }
        tt_eval_free(ev);
        ev = NULL;
        tt_run_free(run);
        run = NULL;
        tt_index_close(idx);
        idx = NULL;
    }

    /* ---- the report */
    char created[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tmv));
    if (!(cmdline = command_line(argc, argv)))
        goto nomem;
    rep.command = cmdline;
    rep.created = created;
    rep.version = tt_version_string();
    rep.vectors = vectors;
    rep.doclens = doclens;
    rep.ids = cfg.ids;
    rep.queries = queries;
    rep.qrels = qrels_path;
    if (encoder) {
        rep.encoder = encoder;
        rep.encoder_description = enc_desc;
        rep.corpus_text = corpus;
        rep.query_text = qtext;
    }
    rep.num_queries = nq;
    rep.eval_queries = neval;
    rep.k = (uint32_t)k;
    rep.score_mean = so.score == TT_SCORE_MEAN;
    rep.nprobe = so.nprobe;
    rep.threshold = so.threshold;
    rep.prune_ratio = so.prune_ratio;
    rep.ndocs = so.ndocs;
    rep.threads = cfg.threads;
    rep.nmetrics = nm;
    rep.nvariants = nvar;
    if (hybrid) {
        rep.hybrid = true;
        rep.sparse_kind = bm25 ? "bm25" : enc_sparse ? "encoder" : "weights";
        rep.sparse_docs = cfg.sparse_file;
        rep.sparse_queries = sparse_qpath ? sparse_qpath : qtext;
        rep.fusion = fo.method;
        rep.fusion_depth = fo.depth;
        rep.fusion_alpha = fo.alpha;
    }
    rep.variants = vars;
    for (int j = 0; j < 4; j++)
        if (write_aside(out_tmp[j], writers[j], &rep))
            goto done;
    for (size_t i = 0; i < 3 * nvar; i++)
        if (run_tmp[i] && rename(run_tmp[i], run_final[i])) {
            fprintf(stderr, "tartan report: error: %s: %s\n", run_final[i], strerror(errno));
            goto done;
        }
    for (int j = 0; j < 4; j++)
        if (rename(out_tmp[j], out_final[j])) {
            fprintf(stderr, "tartan report: error: %s: %s\n", out_final[j], strerror(errno));
            goto done;
        }
    printf("report written to %s/report.md, report.csv, report.json, report.svg\n", out);
    rc = CLI_OK;
    goto done;
nomem:
    oom();
    goto done;
fail:
    rc = st == REPORTED ? CLI_FAIL : cli_fail(CMD, st);
done:
    if (rc != CLI_OK) {
        /* Nothing half-written is left: no report file and no run of this attempt. */
        for (int j = 0; j < 4; j++)
            if (out_tmp[j])
                unlink(out_tmp[j]);
        for (size_t i = 0; run_tmp && i < 3 * nvar; i++)
            if (run_tmp[i])
                unlink(run_tmp[i]);
    }
    for (int j = 0; j < 4; j++) {
        free(out_tmp[j]);
        free(out_final[j]);
    }
    for (size_t i = 0; i < 3 * nvar; i++) {
        if (index_dirs && i < nvar)
            free(index_dirs[i]);
        if (run_tmp)
            free(run_tmp[i]);
        if (run_final)
            free(run_final[i]);
        if (run_rel)
            free(run_rel[i]);
    }
    free(index_dirs);
    free(run_tmp);
    free(run_final);
    free(run_rel);
    free(cmdline);
    free(dir_idx);
    free(dir_runs);
    free(dir_enc);
    free(enc_docs);
    free(enc_queries);
    for (int j = 0; j < 6; j++)
        free(enc_paths[j]);
    free(orig_vals);
    free(sres.hits);
    free(sres.nhits);
    free(hres.hits);
    free(hres.nhits);
    free(sparse_of);
    tt_sparse_set_free(sq);
    tt_sparse_set_free(sp_docs);
    free(orig.hits);
    free(orig.nhits);
    free(cur.hits);
    free(cur.nhits);
    tt_index_close(idx);
    tt_eval_free(ev);
    tt_run_free(run);
    tt_qrels_free(qrels);
    tt_queries_free(qs);
    tt_input_free(in);
    cli_free_list(cfg.vectors);
    cli_free_list(cfg.doclens);
    cli_free_list(mlist);
    free(vars);
    cli_die_if_cancelled(CMD, rc == CLI_OK, "the report was not written");
    return rc;
}

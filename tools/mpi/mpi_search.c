/* tartan-mpi search (dense; --mode sparse|hybrid: mpi_sparse.c): each rank opens the
 * shards s with s % R == rank of a sharded index and searches them; rank 0 merges the
 * per-query top-k lists of every rank by the total order of tt_search (tt_hits_merge:
 * higher score, then lower global row) and writes the run, which is identical to
 * `tartan search` over the same index in one process.
 *
 * Queries go in batches. A rank searches a batch, posts its results to rank 0
 * (MPI_Isend, two buffers) and goes on with the next batch while rank 0 merges the
 * previous one. A message: i32 status, u32 queries; status 0: per query u32 n, then n
 * hits of (f32 score, u64 global row, u16 id length, id bytes); else the error text. */
#include "mpi_search.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { TAG_RESULTS = 1 };

static void usage(FILE *f) {
    fprintf(f,
        "usage: mpirun -n R tartan-mpi search --index DIR --queries Q.npy --out RUN [options]\n"
        "       mpirun -n R tartan-mpi search --index DIR --mode sparse --queries Q.tsv --out RUN\n"
        "       mpirun -n R tartan-mpi search --index DIR --mode hybrid --queries Q.npy\n"
        "           --query-ids FILE --query-text Q.tsv --out RUN\n"
        "\n"
        "Each rank searches the shards s of DIR with s %% R == rank; rank 0 merges and\n"
        "writes the TREC run, identical to `tartan search` over DIR in one process.\n"
        "Every rank reads DIR and the query files (a shared or replicated file system).\n"
        "\n"
        "  --index DIR          sharded index (tartan build --shards), or a plain index\n"
        "  --queries Q.npy      as tartan search; --qlens L.npy, --query-ids FILE too\n"
        "  --k N                results per query (default 10)\n"
        "  --out RUN            output file, written by rank 0 aside, then renamed\n"
        "  --mode M             dense: plaid (default; also 'dense'), exhaustive or exact;\n"
        "                       sparse: the index's sparse postings (BM25 or weights), with\n"
        "                       the whole collection's BM25 statistics (MPI_Allreduce);\n"
        "                       hybrid: both, fused at rank 0 (doc/search.md)\n"
        "  --dense-mode M       the dense part of --mode hybrid: plaid, exhaustive or exact\n"
        "  --sparse-queries F   sparse queries, JSON Lines {\"id\", \"terms\": {t: w}}\n"
        "                       (or \"term_ids\": {\"2023\": w} for an index of term ids)\n"
        "  --vocab FILE         the term ids' vocabulary for --sparse-queries (default: the\n"
        "                       vocabulary stored in the index)\n"
        "  --query-text F       query texts (BEIR queries.jsonl or TSV) for the sparse part,\n"
        "                       BM25-tokenized (default with --mode sparse: --queries)\n"
        "  --k1 X, --b X        BM25 parameters (default 0.9, 0.4)\n"
        "  --fusion minmax|rrf, --fusion-depth N, --alpha A: hybrid fusion, as tartan\n"
        "                       search (default minmax, 1000, 0.5)\n"
        "  --nprobe N, --ndocs N, --threshold T, --pruning R, --prune-ratio F,\n"
        "  --rerank adaptive|fixed, --score sum|mean, --io uring|mmap: as tartan search\n"
        "  --threads T          search threads per rank (default 1)\n"
        "  --batch B            queries per batch (default 64)\n"
        "  --where EXPR         SQL over the shards' metadata (built with --metadata), as\n"
        "                       tartan search; each rank filters its own shards\n"
        "  --filter-ids FILE    external document ids, one per line; with --where: both\n"
        "  --tag NAME           run tag (default tartan)\n");
}

double mpi_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------- packing */

int mpi_put(mpi_buf *b, const void *x, size_t n) {
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 4096;
        while (c < b->n + n)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q)
            return -1;
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, x, n);
    b->n += n;
    return 0;
}

void mpi_put_run_line(mpi_buf *lines, const char *qid, const char *id, size_t idlen,
                      uint32_t rank, float score, const char *tag) {
    char line[1400];
    int w = snprintf(line, sizeof line, "%s Q0 %.*s %u %.9g %s\n", qid, (int)idlen,
                     id ? id : "?", rank, (double)score, tag);
    if (w < 0 || mpi_put(lines, line, (size_t)w)) {
        fprintf(stderr, "tartan-mpi search: rank 0: out of memory\n");
        mpi_fail_all(CLI_FAIL);
    }
}

char *mpi_recv(int r, int tag, int *len) {
    MPI_Status ms;
    MPI_Probe(r, tag, MPI_COMM_WORLD, &ms);
    MPI_Get_count(&ms, MPI_BYTE, len);
    char *m = malloc((size_t)*len + 1);
    if (!m) {
        fprintf(stderr, "tartan-mpi search: rank 0: out of memory\n");
        mpi_fail_all(CLI_FAIL);
    }
    MPI_Recv(m, *len, MPI_BYTE, r, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    m[*len] = '\0';
    return m;
}

/* An error message for a batch of m queries: i32 status 1, u32 m, the text. */
static int pack_error(mpi_buf *b, uint32_t m, const char *msg) {
    int32_t st = 1;
    b->n = 0;
    return mpi_put(b, &st, 4) || mpi_put(b, &m, 4) || mpi_put(b, msg, strlen(msg) + 1);
}

void mpi_reply(mpi_buf *o, int st, bool injected, uint32_t m, int pe, int tag,
               MPI_Request *req) {
    if (st)
        pe = pack_error(o, m, injected ? "injected failure (TARTAN_MPI_FAULT)" : tt_last_error());
    if (pe) {
        fprintf(stderr, "tartan-mpi search: rank %d: out of memory\n", mpi_rank);
        mpi_fail_all(CLI_FAIL);
    }
    MPI_Isend(o->p, (int)o->n, MPI_BYTE, 0, tag, MPI_COMM_WORLD, req);
}

static int pack_results(mpi_buf *b, const tt_sharded *sh, uint32_t m, uint32_t k, const tt_hit *hits,
                        const uint32_t *nhits) {
    int32_t st = 0;
    b->n = 0;
    if (mpi_put(b, &st, 4) || mpi_put(b, &m, 4))
        return -1;
    for (uint32_t q = 0; q < m; q++) {
        if (mpi_put(b, &nhits[q], 4))
            return -1;
        for (uint32_t r = 0; r < nhits[q]; r++) {
            const tt_hit *h = &hits[(uint64_t)q * k + r];
            size_t len = 0;
            const char *id = tt_sharded_doc_id(sh, h->doc, &len);
            uint16_t l = (uint16_t)(id ? len : 0);
            if (mpi_put(b, &h->score, 4) || mpi_put(b, &h->doc, 8) || mpi_put(b, &l, 2) ||
                mpi_put(b, id ? id : "", l))
                return -1;
        }
    }
    return 0;
}

/* One rank's results for a batch, unpacked: hits and their ids. */
typedef struct part {
    tt_hit *hits;        /* m * k */
    uint32_t *n;         /* m */
    const char **id;     /* m * k, into the message */
    uint16_t *idlen;
} part;

static int unpack(const char *p, size_t len, uint32_t m, uint32_t k, part *out, const char **err) {
    const char *end = p + len;
    int32_t st;
    uint32_t mm;
    if (len < 8)
        return -1;
    memcpy(&st, p, 4);
    memcpy(&mm, p + 4, 4);
    p += 8;
    if (st) {
        *err = memchr(p, 0, (size_t)(end - p)) ? p : "(no message)";
        return 1;
    }
    if (mm != m)
        return -1;
    for (uint32_t q = 0; q < m; q++) {
        uint32_t n;
        if (end - p < 4)
            return -1;
        memcpy(&n, p, 4);
        p += 4;
        if (n > k)
            return -1;
        out->n[q] = n;
        for (uint32_t r = 0; r < n; r++) {
            uint64_t i = (uint64_t)q * k + r;
            uint16_t l;
            if (end - p < 14)
                return -1;
            memcpy(&out->hits[i].score, p, 4);
            memcpy(&out->hits[i].doc, p + 4, 8);
            memcpy(&l, p + 12, 2);
            p += 14;
            if (end - p < l)
                return -1;
            out->id[i] = p;
            out->idlen[i] = l;
            p += l;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ the command */


/* The dense search mode named s (plaid, exhaustive, exact), or -1. */
static int dense_mode(const char *s) {
    return !strcmp(s, "plaid")        ? TT_MODE_PLAID
           : !strcmp(s, "exhaustive") ? TT_MODE_EXHAUSTIVE
           : !strcmp(s, "exact")      ? TT_MODE_EXACT
                                      : -1;
}

static int parse(int argc, char **argv, mpi_search_args *a) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},   {"queries", required_argument, 0, 'q'},
        {"qlens", required_argument, 0, 'L'},   {"query-ids", required_argument, 0, 'i'},
        {"k", required_argument, 0, 'k'},       {"out", required_argument, 0, 'o'},
        {"mode", required_argument, 0, 'm'},    {"io", required_argument, 0, 'I'},
        {"nprobe", required_argument, 0, 'p'},  {"threshold", required_argument, 0, 'T'},
        {"ndocs", required_argument, 0, 'n'},   {"score", required_argument, 0, 's'},
        {"threads", required_argument, 0, 't'}, {"tag", required_argument, 0, 'g'},
        {"pruning", required_argument, 0, 'P'}, {"prune-ratio", required_argument, 0, 'R'},
        {"rerank", required_argument, 0, 'K'},  {"batch", required_argument, 0, 'B'},
        {"where", required_argument, 0, 'W'},   {"filter-ids", required_argument, 0, 'F'},
        {"dense-mode", required_argument, 0, 1001}, {"sparse-queries", required_argument, 0, 1002},
        {"vocab", required_argument, 0, 1019},
        {"query-text", required_argument, 0, 1003}, {"k1", required_argument, 0, 1004},
        {"b", required_argument, 0, 1005},      {"fusion", required_argument, 0, 1006},
        {"fusion-depth", required_argument, 0, 1007}, {"alpha", required_argument, 0, 1008},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *cmd = "mpi search";
    uint64_t u;
    double d;
    int c, rc;
    memset(a, 0, sizeof *a);
    a->k = 10;
    a->batch = 64;
    a->threads = 1;
    a->tag = "tartan";
    tt_search_options_init(&a->so);
    tt_open_options_init(&a->oo);
    tt_sparse_options_init(&a->spo);
    tt_fusion_options_init(&a->fo);
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': a->index = optarg; break;
        case 'q': a->queries = optarg; break;
        case 'L': a->qlens = optarg; break;
        case 'i': a->qids = optarg; break;
        case 'o': a->out = optarg; break;
        case 'g': a->tag = optarg; break;
        case 'W': a->where = optarg; break;
        case 'F': a->filter_ids = optarg; break;
        case 'k':
            if (!cli_parse_u64(optarg, &a->k) || a->k == 0 || a->k > 1000000)
                return cli_usage_error(cmd, "--k must be 1..1000000");
            break;
        case 'B':
            if (!cli_parse_u64(optarg, &a->batch) || a->batch == 0 || a->batch > 1000000)
                return cli_usage_error(cmd, "--batch must be 1..1000000");
            break;
        case 'm':
            if (!strcmp(optarg, "sparse"))
                a->retriever = MPI_SPARSE;
            else if (!strcmp(optarg, "hybrid"))
                a->retriever = MPI_HYBRID;
            else if (!strcmp(optarg, "dense"))
                a->so.mode = TT_MODE_PLAID;
            else if ((a->so.mode = dense_mode(optarg)) < 0)
                return cli_usage_error(cmd, "--mode must be plaid (dense), exhaustive, exact, "
                                       "sparse or hybrid");
            break;
        case 1001:
            if ((a->so.mode = dense_mode(optarg)) < 0)
                return cli_usage_error(cmd, "--dense-mode must be plaid, exhaustive or exact");
            break;
        case 1002: a->sparse_queries = optarg; break;
        case 1019: a->vocab = optarg; break;
        case 1003: a->query_text = optarg; break;
        case 1004:
            if (!cli_parse_double(optarg, &d) || d < 0)
                return cli_usage_error(cmd, "--k1 must be a number >= 0");
            a->spo.k1 = d;
            break;
        case 1005:
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1))
                return cli_usage_error(cmd, "--b must be in [0, 1]");
            a->spo.b = d;
            break;
        case 1006:
            if (!strcmp(optarg, "minmax"))
                a->fo.method = TT_FUSION_MINMAX;
            else if (!strcmp(optarg, "rrf"))
                a->fo.method = TT_FUSION_RRF;
            else
                return cli_usage_error(cmd, "--fusion must be minmax or rrf");
            break;
        case 1007:
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 1000000)
                return cli_usage_error(cmd, "--fusion-depth must be 1..1000000");
            a->fo.depth = (uint32_t)u;
            break;
        case 1008:
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1))
                return cli_usage_error(cmd, "--alpha must be in [0, 1]");
            a->fo.alpha = d;
            break;
        case 'I':
            if (!strcmp(optarg, "uring"))
                a->oo.io = TT_IO_URING;
            else if (!strcmp(optarg, "mmap"))
                a->oo.io = TT_IO_MMAP;
            else
                return cli_usage_error(cmd, "--io must be uring or mmap");
            break;
        case 'p':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > (1u << 24))
                return cli_usage_error(cmd, "--nprobe must be 1..16777216");
            a->so.nprobe = (int)u;
            break;
        case 'T':
            if (!cli_parse_double(optarg, &d))
                return cli_usage_error(cmd, "--threshold must be a finite number");
            a->so.threshold = (float)d;
            break;
        case 'P':
            if (!strcmp(optarg, "relative"))
                a->so.pruning = TT_PRUNE_RELATIVE;
            else if (!strcmp(optarg, "absolute"))
                a->so.pruning = TT_PRUNE_ABSOLUTE;
            else
                return cli_usage_error(cmd, "--pruning must be relative or absolute");
            break;
        case 'K':
            if (!strcmp(optarg, "adaptive"))
                a->so.rerank = TT_RERANK_ADAPTIVE;
            else if (!strcmp(optarg, "fixed"))
                a->so.rerank = TT_RERANK_FIXED;
            else
                return cli_usage_error(cmd, "--rerank must be adaptive or fixed");
            break;
        case 'R':
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1))
                return cli_usage_error(cmd, "--prune-ratio must be in [0, 1]");
            a->so.prune_ratio = (float)d;
            break;
        case 'n':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > UINT32_MAX)
                return cli_usage_error(cmd, "--ndocs must be 1..4294967295");
            a->so.ndocs = (uint32_t)u;
            break;
        case 's':
            if (!strcmp(optarg, "sum"))
                a->so.score = TT_SCORE_SUM;
            else if (!strcmp(optarg, "mean"))
                a->so.score = TT_SCORE_MEAN;
            else
                return cli_usage_error(cmd, "--score must be sum or mean");
            break;
        case 't':
            if ((rc = cli_threads_arg(cmd, optarg, &a->threads)))
                return rc;
            break;
        case 'h': usage(stdout); return -1;
        default: usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    /* Where the sparse queries come from: as tartan search (without --encoder). */
    if (a->retriever == MPI_SPARSE) {
        if (a->qlens || a->qids)
            return cli_usage_error(cmd, "--mode sparse takes --queries (texts), --query-text "
                                   "or --sparse-queries, not vectors");
        if (!a->sparse_queries && !a->query_text)
            a->query_text = a->queries;
        if (!a->sparse_queries && !a->query_text)
            return cli_usage_error(cmd, "--mode sparse needs --queries (texts), --query-text "
                                   "or --sparse-queries");
        if (a->queries && a->query_text != a->queries)
            return cli_usage_error(cmd, "--mode sparse: give the queries once");
    } else if (a->retriever == MPI_HYBRID && !a->sparse_queries && !a->query_text) {
        return cli_usage_error(cmd, "--mode hybrid needs --sparse-queries or --query-text");
    }
    if (a->vocab && !a->sparse_queries)
        return cli_usage_error(cmd, "--vocab goes with --sparse-queries");
    if (a->sparse_queries && a->query_text)
        return cli_usage_error(cmd, "--sparse-queries and --query-text exclude each other");
    if (a->retriever == MPI_DENSE && (a->sparse_queries || a->query_text))
        return cli_usage_error(cmd, "--sparse-queries/--query-text need --mode sparse or "
                               "hybrid");
    if (!a->index || (!a->queries && a->retriever != MPI_SPARSE) || !a->out || !*a->out ||
        !strcmp(a->out, "-"))
        return cli_usage_error(cmd, "--index, --queries and --out FILE are required");
    if (!*a->tag || strpbrk(a->tag, " \t\n\r\v\f"))
        return cli_usage_error(cmd, "--tag must be a non-empty word without whitespace");
    return CLI_OK;
}

/* Rank 0: writes the lines to RUN aside and renames it. */
int mpi_write_run(const char *out, const mpi_buf *lines) {
    char *tmp = malloc(strlen(out) + 16);
    if (!tmp)
        return -1;
    sprintf(tmp, "%s.tmp-XXXXXX", out);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fprintf(stderr, "tartan-mpi search: error: %s: cannot create a file beside it\n", out);
        free(tmp);
        return -1;
    }
    cli_cleanup_file(tmp);
    (void)fchmod(fd, 0666 & ~cli_umask());
    size_t off = 0;
    int bad = 0;
    while (off < lines->n && !bad) {
        ssize_t w = write(fd, lines->p + off, lines->n - off);
        if (w <= 0)
            bad = 1;
        else
            off += (size_t)w;
    }
    bad |= fsync(fd) != 0;
    bad |= close(fd) != 0;
    if (bad || cli_rename_published(tmp, out)) {
        fprintf(stderr, "tartan-mpi search: error: %s: write failed\n", out);
        unlink(tmp);
        cli_cleanup_file(NULL);
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int mpi_open_filter(mpi_search_args *a, const tt_sharded *sh, cli_smeta **md,
                    tt_filter **filter, size_t *nids, uint64_t *found) {
    char who[64];
    snprintf(who, sizeof who, "tartan-mpi search: rank %d", mpi_rank);
    int st = TT_OK;
    if ((a->where && cli_smeta_open(who, sh, md)) ||
        cli_shard_filter(who, sh, *md, a->where, a->filter_ids, filter, nids, found))
        st = TT_EINVAL;
    a->so.filter = *filter;
    a->spo.filter = *filter;
    return st;
}

void mpi_filter_totals(const mpi_search_args *a, const tt_filter *filter, size_t nids,
                       uint64_t found) {
    uint64_t mine[2] = {tt_filter_count(filter), found}, all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (mpi_rank == 0 && a->filter_ids)
        fprintf(stderr, "tartan-mpi search: --filter-ids %s: %zu ids, %llu of them name no "
                "live document\n", a->filter_ids, nids, (unsigned long long)(nids - all[1]));
    if (mpi_rank == 0)
        fprintf(stderr, "tartan-mpi search: filter: %llu documents allowed\n",
                (unsigned long long)all[0]);
}

void mpi_say_errors(bool failed, const char *err) {
    for (int r = 0; r < mpi_size; r++) {
        if (r == mpi_rank && failed && *err)
            fprintf(stderr, "tartan-mpi search: rank %d: error: %s\n", mpi_rank, err);
        fflush(stderr);
        MPI_Barrier(MPI_COMM_WORLD);
    }
}

int mpi_cmd_search(int argc, char **argv) {
    mpi_search_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    tt_blas_set_threads(1);
    cli_signals_install(false);
    if (a.retriever != MPI_DENSE)
        return mpi_search_sparse(&a);
    const uint32_t k = (uint32_t)a.k;
    tt_sharded *sh = NULL;
    tt_queries *qs = NULL;
    char err[1024] = "";
    int st = tt_sharded_open(&sh, a.index, &a.oo, (uint32_t)mpi_rank, (uint32_t)mpi_size);
    if (!st)
        st = tt_queries_load(&qs, a.queries, a.qlens, a.qids);
    if (!st && tt_sharded_num_open(sh))
        st = tt_queries_check(qs, tt_sharded_shard(sh, 0, NULL, NULL));
    if (st)
        snprintf(err, sizeof err, "%s", tt_last_error());
    /* Filters: each rank evaluates --where and --filter-ids over its own shards, at the
     * global rows (tools/shard_filter.c); its errors are printed at once. */
    cli_smeta *md = NULL;
    tt_filter *filter = NULL;
    size_t nids = 0;
    uint64_t found = 0;
    if (!st && (a.where || a.filter_ids)) /* err stays empty on failure: already said */
        st = mpi_open_filter(&a, sh, &md, &filter, &nids, &found);
    const uint64_t nq = qs ? qs->num_queries : 0;
    /* Rank 0 learns of a failure to open anywhere before any batch: every rank agrees. */
    int failed = st != 0, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        mpi_say_errors(failed, err);
        if (mpi_rank == 0)
            fprintf(stderr, "tartan-mpi search: no run written\n");
        tt_filter_free(filter);
        cli_smeta_close(md);
        tt_queries_free(qs);
        tt_sharded_close(sh);
        return CLI_FAIL;
    }
    if (a.where || a.filter_ids)
        mpi_filter_totals(&a, filter, nids, found);
    const uint64_t B = a.batch, nbatch = (nq + B - 1) / B;
    tt_hit *hits = malloc(B * k * sizeof *hits);
    uint32_t *nhits = malloc(B * sizeof *nhits);
    mpi_buf out[2] = {{0}, {0}};
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (!hits || !nhits) {
        fprintf(stderr, "tartan-mpi search: rank %d: out of memory\n", mpi_rank);
        mpi_fail_all(CLI_FAIL);
    }

    if (mpi_rank != 0) {
        for (uint64_t b = 0; b < nbatch; b++) {
            uint64_t q0 = b * B, m = nq - q0 < B ? nq - q0 : B;
            mpi_buf *o = &out[b % 2];
            MPI_Wait(&req[b % 2], MPI_STATUS_IGNORE); /* the buffer's previous send */
            int f = mpi_fault("search", b);
            st = f ? TT_EIO
                   : tt_sharded_num_open(sh)
                         ? tt_sharded_search_batch(sh, qs->vectors, qs->offsets + q0,
                                                   qs->lens + q0, m, k, &a.so, a.threads, hits,
                                                   nhits, NULL)
                         : (memset(nhits, 0, m * sizeof *nhits), TT_OK);
            mpi_reply(o, st, f, (uint32_t)m,
                      st ? 0 : pack_results(o, sh, (uint32_t)m, k, hits, nhits), TAG_RESULTS,
                      &req[b % 2]);
            if (st)
                break; /* rank 0 reports it and ends the job */
        }
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD); /* rank 0 has every result */
        free(out[0].p);
        free(out[1].p);
        free(hits);
        free(nhits);
        tt_filter_free(filter);
        cli_smeta_close(md);
        tt_queries_free(qs);
        tt_sharded_close(sh);
        return st ? CLI_FAIL : CLI_OK;
    }

    /* Rank 0: its own shards, then every other rank's lists, merged. */
    const int R = mpi_size;
    part *parts = calloc((size_t)R, sizeof *parts);
    char **msgs = calloc((size_t)R, sizeof *msgs);
    uint32_t *counts = calloc((size_t)R, sizeof *counts), *pos = calloc((size_t)R, sizeof *pos);
    tt_hit *merged = malloc(k * sizeof *merged);
    const tt_hit **heads = calloc((size_t)R, sizeof *heads);
    mpi_buf lines = {0};
    bool oom = !parts || !msgs || !counts || !pos || !merged || !heads;
    for (int r = 0; r < R && !oom; r++) {
        parts[r].hits = malloc(B * k * sizeof *parts[r].hits);
        parts[r].n = malloc(B * sizeof *parts[r].n);
        parts[r].id = malloc(B * k * sizeof *parts[r].id);
        parts[r].idlen = malloc(B * k * sizeof *parts[r].idlen);
        oom = !parts[r].hits || !parts[r].n || !parts[r].id || !parts[r].idlen;
    }
    if (oom) {
        fprintf(stderr, "tartan-mpi search: rank 0: out of memory\n");
        mpi_fail_all(CLI_FAIL);
    }
    double t0 = mpi_now(), t_search = 0, t_wait = 0, t_merge = 0;
    for (uint64_t b = 0; b < nbatch; b++) {
        uint64_t q0 = b * B, m = nq - q0 < B ? nq - q0 : B;
        double ta = mpi_now();
        int f = mpi_fault("search", b);
        st = f ? TT_EIO
               : tt_sharded_num_open(sh)
                     ? tt_sharded_search_batch(sh, qs->vectors, qs->offsets + q0, qs->lens + q0,
                                               m, k, &a.so, a.threads, parts[0].hits,
                                               parts[0].n, NULL)
                     : (memset(parts[0].n, 0, m * sizeof *parts[0].n), TT_OK);
        if (st) {
            fprintf(stderr, "tartan-mpi search: rank 0: error: in the queries from number %llu "
                    "(id %s) on: %s; no run written\n", (unsigned long long)q0, qs->ids[q0],
                    f ? "injected failure (TARTAN_MPI_FAULT)" : tt_last_error());
            mpi_fail_all(CLI_FAIL);
        }
        for (uint64_t q = 0; q < m; q++)
            for (uint32_t r = 0; r < parts[0].n[q]; r++)
                parts[0].id[q * k + r] = NULL; /* rank 0's ids come from its shards */
        double tb = mpi_now();
        t_search += tb - ta;
        double twait = 0;
        for (int r = 1; r < R; r++) {
            int len;
            double tw = mpi_now();
            /* The message stays until the batch is written: the ids point into it. */
            msgs[r] = mpi_recv(r, TAG_RESULTS, &len);
            twait += mpi_now() - tw;
            const char *msg = NULL;
            int u = unpack(msgs[r], (size_t)len, (uint32_t)m, k, &parts[r], &msg);
            if (u) {
                fprintf(stderr, "tartan-mpi search: rank %d: error: %s; no run written\n", r,
                        u > 0 ? msg : "malformed results message");
                mpi_fail_all(CLI_FAIL);
            }
        }
        t_wait += twait;
        double tm = mpi_now();
        for (uint64_t q = 0; q < m; q++) {
            for (int r = 0; r < R; r++) {
                counts[r] = parts[r].n[q];
                pos[r] = 0;
            }
            for (int r = 0; r < R; r++)
                heads[r] = parts[r].hits + q * k;
            uint32_t n = tt_hits_merge(heads, counts, (uint32_t)R, k, merged);
            if (n == UINT32_MAX) {
                fprintf(stderr, "tartan-mpi search: rank 0: out of memory\n");
                mpi_fail_all(CLI_FAIL);
            }
            for (uint32_t i = 0; i < n; i++) {
                /* The merge takes every list in order: the hit is some list's next one. */
                int r = 0;
                while (r < R && !(pos[r] < counts[r] && heads[r][pos[r]].doc == merged[i].doc))
                    r++;
                const char *id;
                size_t len = 0;
                if (r == 0) {
                    id = tt_sharded_doc_id(sh, merged[i].doc, &len);
                } else {
                    id = parts[r].id[q * k + pos[r]];
                    len = parts[r].idlen[q * k + pos[r]];
                }
                pos[r]++;
                mpi_put_run_line(&lines, qs->ids[q0 + q], id, len, i + 1, merged[i].score,
                                 a.tag);
            }
        }
        for (int r = 1; r < R; r++) {
            free(msgs[r]);
            msgs[r] = NULL;
        }
        t_merge += mpi_now() - tm;
    }
    double wall = mpi_now() - t0;
    rc = mpi_write_run(a.out, &lines) ? CLI_FAIL : CLI_OK;
    if (rc == CLI_OK)
        fprintf(stderr, "tartan-mpi search: %llu queries on %u shards, %d ranks, batches of %llu: "
                "%.3f s, %.1f QPS; rank 0: own search %.3f s, waiting %.3f s, merge %.1f us "
                "per query\n", (unsigned long long)nq, tt_sharded_num_shards(sh), R,
                (unsigned long long)B, wall, wall > 0 ? (double)nq / wall : 0.0, t_search,
                t_wait, nq ? 1e6 * t_merge / (double)nq : 0.0);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int r = 0; r < R; r++) {
        free(parts[r].hits);
        free(parts[r].n);
        free(parts[r].id);
        free(parts[r].idlen);
    }
    free(parts);
    free(msgs);
    free(counts);
    free(pos);
    free(merged);
    free(heads);
    free(lines.p);
    free(out[0].p);
    free(out[1].p);
    free(hits);
    free(nhits);
    tt_filter_free(filter);
    cli_smeta_close(md);
    tt_queries_free(qs);
    tt_sharded_close(sh);
    return rc;
}

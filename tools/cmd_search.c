/* tartan search: query vectors -> ranked run (TREC or JSON lines), with a latency
 * summary. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan search --index DIR --queries Q.npy --out RUN [options]\n"
        "       tartan search --index DIR --encoder CMD --queries queries.jsonl --out RUN\n"
        "\n"
        "Searches an index with query vectors and writes a TREC run\n"
        "(qid Q0 docid rank score tag), or JSON lines with --jsonl. Prints a latency\n"
        "summary (p50/p95/p99, QPS) on stderr; the reference modes (exhaustive, exact)\n"
        "search many queries in one pass over the index instead and print QPS only,\n"
        "unless --latency is given.\n"
        "\n"
        "  --index DIR          index directory\n"
        "  --queries Q.npy      float32/float16/float64 [num_queries, Kq, dim], or\n"
        "                       [num_vectors, dim] with --qlens\n"
        "  --qlens L.npy        vectors per query (any integer dtype); with a 3-D array: the\n"
        "                       first qlens[i] vectors of each padded query\n"
        "  --query-ids FILE     one query id per line (default: query row number)\n"
        "  --encoder CMD        encode --queries (BEIR queries.jsonl or id<TAB>text TSV) with\n"
        "                       this encoder program in query mode (doc/encoder-protocol.md)\n"
        "  --encoder-timeout S  seconds without progress before the encoder is killed (300)\n"
        "  --k N                results per query (default 10)\n"
        "  --out RUN            output file ('-' for stdout); written aside, then renamed\n"
        "  --mode M             dense retrieval: plaid (default; also 'dense': the\n"
        "                       calibrated search, which scans exhaustively where the\n"
        "                       index's calibration found that cheaper, unless a PLAID\n"
        "                       flag such as --nprobe is given), exhaustive (decompressed\n"
        "                       MaxSim over every document) or exact\n"
        "                       (original vectors; index built with --keep-originals f16);\n"
        "                       sparse: the index's sparse postings only (BM25 or weights);\n"
        "                       hybrid: dense and sparse at once, fused (doc/search.md,\n"
        "                       \"Hybrid retrieval\")\n"
        "  --dense-mode M       the dense part of --mode hybrid: plaid, exhaustive or exact\n"
        "  --sparse-queries F   sparse queries, JSON Lines {\"id\", \"terms\": {t: w}}\n"
        "                       (or \"term_ids\": {\"2023\": w} for an index of term ids)\n"
        "  --vocab FILE         the term ids' vocabulary (one term per line, id = line - 1):\n"
        "                       maps --sparse-queries string terms to ids (default: the\n"
        "                       vocabulary stored in the index, which also maps --query-text)\n"
        "  --query-text F       query texts (BEIR queries.jsonl or TSV) for the sparse part,\n"
        "                       BM25-tokenized (default with --mode sparse: --queries when it\n"
        "                       is not .npy; with --mode hybrid and --encoder: --queries)\n"
        "  --k1 X, --b X        BM25 parameters (default 0.9, 0.4)\n"
        "  --fusion minmax|rrf  hybrid fusion (default minmax: alpha * dense' + (1 - alpha)\n"
        "                       * sparse', each min-max normalised within its top\n"
        "                       --fusion-depth, a document missing from a list getting 0;\n"
        "                       rrf: sum of 1 / (60 + rank))\n"
        "  --fusion-depth N     hits of each retriever fused (default 1000)\n"
        "  --alpha A            weight of the dense scores in minmax fusion (default 0.5)\n"
        "  --io uring|mmap      residual reads (default: io_uring when available)\n"
        "  --direct             O_DIRECT residual reads (io_uring only)\n"
        "  --queue-depth N      io_uring reads in flight per thread (default 64)\n"
        "  --nprobe N           centroids probed per query vector (default: the index's\n"
        "                       calibrated value (tartan tune), else by k: 1, 2, 4)\n"
        "  --untuned            ColBERTv2's defaults by k even where the index has\n"
        "                       calibrated parameters\n"
        "  --no-sketch          centroid scores alone in stages 2-3, even where the index\n"
        "                       keeps a residual sketch\n"
        "  --centroid-groups N  stage 1 scores the centroids of each query vector's N best\n"
        "                       centroid groups, the others get their group's score; 0:\n"
        "                       every centroid (default: calibrated, where tartan tune\n"
        "                       stored groups, else 0)\n"
        "  --threshold T        absolute centroid pruning threshold (ColBERTv2's rule;\n"
        "                       implies --pruning absolute)\n"
        "  --pruning R          relative (default: a centroid counts if it scores within a\n"
        "                       ratio of a query vector's best centroid score) or absolute\n"
        "                       (ColBERTv2: --threshold, default by k 0.5, 0.45, 0.4)\n"
        "  --prune-ratio F      relative pruning ratio in [0, 1] (default: calibrated, else\n"
        "                       0.5)\n"
        "  --rerank adaptive|fixed  documents scored decompressed: adaptive (default:\n"
        "                       ndocs/4, then more while the query's own stage-3 errors\n"
        "                       say they could enter the top k, at most ndocs) or fixed\n"
        "                       (ColBERTv2: max(ndocs/4, k))\n"
        "  --rerank-margin F    adaptive depth: standard deviations of the query's stage-3\n"
        "                       error allowed for (default: calibrated, else 1)\n"
        "  --ndocs N            candidates kept after pruned centroid interaction (default:\n"
        "                       calibrated, else by k: 256, 1024, max(4k, 4096))\n"
        "  --score sum|mean     sum of MaxSim over query vectors (ColBERT, default) or mean\n"
        "  --threads T          search threads (default 1; 0: all CPUs)\n"
        "  --latency            exhaustive and exact modes: search and time each query on\n"
        "                       its own (per-query latency) instead of one pass over the\n"
        "                       index for all of them (the same results, 1.4-3.4x\n"
        "                       faster: doc/search.md, \"Reference modes\")\n"
        "  --jsonl              JSON lines: {\"qid\", \"results\": [{\"docid\", \"rank\", \"score\"}]}\n"
        "  --json               the same as --jsonl\n"
        "  --tag NAME           run tag (default tartan)\n"
        "\n"
        "Filters (doc/search.md, \"Filters\"): only allowed documents count and are returned\n"
        "  --where EXPR         SQL expression over the index's metadata columns, e.g.\n"
        "                       \"year >= 2020 AND lang = 'en'\" (read-only, one expression)\n"
        "  --filter-ids FILE    external document ids, one per line (unknown ids counted);\n"
        "                       with --where: documents allowed by both\n"
        "  --with-metadata      --jsonl/--json: each result carries its \"metadata\" object\n"
        "  --filter-direct-max N  score at most N allowed documents directly rather than\n"
        "                       through the IVF (default: sqrt(%d * ndocs * documents))\n",
        TT_FILTER_DIRECT_MUL);
}

static int dbl_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted values. */
static double pct(const double *v, uint64_t n, double p) {
    if (n == 0)
        return 0;
    uint64_t r = (uint64_t)ceil(p / 100.0 * (double)n);
    return v[r ? r - 1 : 0];
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *mode_name(int m) {
    return m == TT_MODE_EXACT ? "exact" : m == TT_MODE_EXHAUSTIVE ? "exhaustive" : "plaid";
}

static const char *io_name(int io) {
    return io == TT_IO_URING ? "io_uring" : io == TT_IO_PREAD ? "pread" : "mmap";
}

/* Scores with 9 significant digits: every float32 reads back exactly, and scores of tiny
 * magnitude (raw inner products) stay distinct. */
static int write_results(FILE *f, const tt_sharded *idx, const char *qid,
                         const tt_hit *hits, uint32_t n, bool jsonl, const char *tag,
                         cli_smeta *md) {
    if (jsonl) {
        fputs("{\"qid\": ", f);
        cli_json_string(f, qid);
        fputs(", \"results\": [", f);
    }
    for (uint32_t r = 0; r < n; r++) {
        size_t len;
        const char *id = tt_sharded_doc_id(idx, hits[r].doc, &len);
        if (jsonl) {
            char *s = strndup(id, len);
            if (!s)
                return -1;
            fputs(r ? ", {\"docid\": " : "{\"docid\": ", f);
            cli_json_string(f, s);
            free(s);
            fprintf(f, ", \"rank\": %u, \"score\": %.9g", r + 1, hits[r].score);
            if (md) {
                char *js = NULL;
                if (cli_smeta_json(md, hits[r].doc, &js) != TT_OK) {
                    fprintf(stderr, "tartan search: error: %s\n", tt_last_error());
                    return -1;
                }
                fprintf(f, ", \"metadata\": %s", js);
                tt_free(js);
            }
            fputs("}", f);
        } else {
            fprintf(f, "%s Q0 %.*s %u %.9g %s\n", qid, (int)len, id, r + 1, hits[r].score,
                    tag);
        }
    }
    if (jsonl)
        fputs("]}\n", f);
    return ferror(f) ? -1 : 0;
}

/* ------------------------------------------------------------- filters */

/* The allowed documents of --where and/or --filter-ids (both: those allowed by both),
 * over every shard (tools/shard_filter.c), reported on stderr. Returns 0, or -1 with
 * the error printed. */
static int make_filter(const tt_sharded *sh, cli_smeta *md, const char *where,
                       const char *ids_path, tt_filter **out) {
    size_t n = 0;
    uint64_t found = 0;
    if (cli_shard_filter("tartan search", sh, md, where, ids_path, out, &n, &found))
        return -1;
    if (ids_path)
        fprintf(stderr, "tartan search: --filter-ids %s: %zu ids, %llu of them name no live "
                "document\n", ids_path, n, (unsigned long long)(n - found));
    uint64_t allowed = tt_filter_count(*out);
    if (allowed == 0)
        fprintf(stderr, "tartan search: note: the filter matches no document: every query "
                "gets 0 results\n");
    else
        fprintf(stderr, "tartan search: filter: %llu documents allowed\n",
                (unsigned long long)allowed);
    return 0;
}

/* ------------------------------------------------- queries from an encoder */

typedef struct query_acc {
    tt_queries *q;
    uint64_t cap_q, cap_v;
} query_acc;

/* Encoder sink: appends one query's vectors and id to the growing tt_queries. */
static int add_query(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                     const float *vectors) {
    query_acc *a = user;
    tt_queries *q = a->q;
    (void)index;
    if (n == 0) {
        fprintf(stderr, "tartan search: the encoder returned no vectors for query '%.*s'\n",
                (int)id_len, id);
        return TT_EVALUE;
    }
    if (q->num_queries == a->cap_q) {
        uint64_t nc = a->cap_q ? 2 * a->cap_q : 64;
        uint64_t *o = realloc(q->offsets, nc * sizeof *o);
        if (o)
            q->offsets = o;
        uint32_t *l = realloc(q->lens, nc * sizeof *l);
        if (l)
            q->lens = l;
        char **ids = realloc(q->ids, nc * sizeof *ids);
        if (ids)
            q->ids = ids;
        if (!o || !l || !ids)
            return TT_ENOMEM;
        a->cap_q = nc;
    }
    if (q->num_vectors + n > a->cap_v) {
        uint64_t nc = a->cap_v ? 2 * a->cap_v : 1024;
        while (nc < q->num_vectors + n)
            nc *= 2;
        float *v = realloc(q->vectors, nc * q->dim * sizeof *v);
        if (!v)
            return TT_ENOMEM;
        q->vectors = v;
        a->cap_v = nc;
    }
    char *qid = malloc(id_len + 1);
    if (!qid)
        return TT_ENOMEM;
    memcpy(qid, id, id_len);
    qid[id_len] = '\0';
    memcpy(q->vectors + q->num_vectors * q->dim, vectors, (size_t)n * q->dim * sizeof *vectors);
    q->ids[q->num_queries] = qid;
    q->offsets[q->num_queries] = q->num_vectors;
    q->lens[q->num_queries] = n;
    q->num_queries++;
    q->num_vectors += n;
    return TT_OK;
}

/* Copies the words of a description into out (cap bytes), single-spaced, leaving out
 * those that apply to one mode only ("passage:..." / "query:...",
 * doc/encoder-protocol.md section 2). At most 255 bytes of desc are read: the index
 * keeps that much. */
static void model_words(const char *desc, char *out, size_t cap) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", desc);
    size_t n = 0;
    out[0] = '\0';
    for (char *save = NULL, *w = strtok_r(buf, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
        if (!strncmp(w, "passage:", 8) || !strncmp(w, "query:", 6))
            continue;
        int k = snprintf(out + n, cap - n, "%s%s", n ? " " : "", w);
        if (k < 0 || (size_t)k >= cap - n)
            break;
        n += (size_t)k;
    }
}

/* Warns when the query encoder is not the one the index's passages came from. */
static void check_same_encoder(const char *stored, const char *query_desc) {
    char a[256], b[256];
    if (!stored[0])
        return; /* built from vectors without a description: nothing to compare */
    model_words(stored, a, sizeof a);
    model_words(query_desc, b, sizeof b);
    if (strcmp(a, b))
        fprintf(stderr, "tartan search: warning: the query encoder describes itself as\n  %s\n"
                "but the index was built by\n  %s\n(queries and passages from different "
                "encoders give meaningless scores)\n", query_desc, stored);
}

/* Runs `encoder` in query mode over the query texts in `path` (BEIR queries.jsonl or
 * TSV); the encoder must produce vectors of the index's dimension. */
/* Protocol 2: each query's sparse part appended to the set. */
static int add_sparse_query(void *user, uint64_t index, const char *id, size_t id_len,
                            uint32_t n, const char *const *terms, const size_t *term_lens,
                            const float *weights) {
    (void)index;
    return tt_sparse_set_add(user, id, id_len, n, terms, term_lens, weights);
}

static int encode_queries(const char *encoder, const char *path, const tt_index *idx,
                          uint32_t timeout_ms, tt_queries **out, tt_sparse_set **sparse) {
    tt_index_info info;
    tt_index_get_info(idx, &info);
    tt_encoder_options eo;
    tt_encoder_options_init(&eo);
    eo.expected_dim = info.dim;
    if (timeout_ms)
        eo.timeout_ms = timeout_ms;
    tt_encoder *enc = NULL;
    query_acc acc = {0};
    int st = TT_ENOMEM;
    acc.q = calloc(1, sizeof *acc.q);
    if (!acc.q || !(acc.q->path = strdup(path)))
        goto fail;
    if ((st = tt_encoder_start(&enc, encoder, TT_ENC_QUERY, &eo)))
        goto fail;
    acc.q->dim = tt_encoder_dim(enc);
    check_same_encoder(info.encoder, tt_encoder_description(enc));
    if (sparse && tt_encoder_sparse(enc)) { /* the encoder's sparse query vectors */
        if ((st = tt_sparse_set_new_weights(sparse)))
            goto fail;
        tt_encoder_set_sparse_sink(enc, add_sparse_query, *sparse);
    }
    if ((st = tt_encoder_encode_file(enc, path, add_query, &acc)))
        goto fail;
    tt_encoder_free(enc);
    if (acc.q->num_queries == 0) {
        fprintf(stderr, "tartan search: %s holds no queries\n", path);
        st = TT_EVALUE;
        enc = NULL;
        goto fail;
    }
    *out = acc.q;
    return TT_OK;
fail:
    tt_encoder_free(enc);
    tt_queries_free(acc.q);
    return st;
}

/* The dense search mode named s (plaid, exhaustive, exact), or -1. */
static int dense_mode(const char *s) {
    return !strcmp(s, "plaid")        ? TT_MODE_PLAID
           : !strcmp(s, "exhaustive") ? TT_MODE_EXHAUSTIVE
           : !strcmp(s, "exact")      ? TT_MODE_EXACT
                                      : -1;
}

int cmd_search(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},   {"queries", required_argument, 0, 'q'},
        {"qlens", required_argument, 0, 'L'},   {"query-ids", required_argument, 0, 'i'},
        {"k", required_argument, 0, 'k'},       {"out", required_argument, 0, 'o'},
        {"mode", required_argument, 0, 'm'},    {"io", required_argument, 0, 'I'},
        {"direct", no_argument, 0, 'D'},        {"queue-depth", required_argument, 0, 'Q'},
        {"nprobe", required_argument, 0, 'p'},  {"threshold", required_argument, 0, 'T'},
        {"ndocs", required_argument, 0, 'n'},   {"score", required_argument, 0, 's'},
        {"threads", required_argument, 0, 't'}, {"jsonl", no_argument, 0, 'j'},
        {"tag", required_argument, 0, 'g'},     {"help", no_argument, 0, 'h'},
        {"encoder", required_argument, 0, 'E'}, {"encoder-timeout", required_argument, 0, 'O'},
        {"pruning", required_argument, 0, 'P'}, {"prune-ratio", required_argument, 0, 'R'},
        {"rerank", required_argument, 0, 'K'},  {"untuned", no_argument, 0, 'U'},
        {"rerank-margin", required_argument, 0, 'M'},
        {"dense-mode", required_argument, 0, 1001}, {"sparse-queries", required_argument, 0, 1002},
        {"vocab", required_argument, 0, 1019},
        {"query-text", required_argument, 0, 1003}, {"k1", required_argument, 0, 1004},
        {"b", required_argument, 0, 1005},      {"fusion", required_argument, 0, 1006},
        {"fusion-depth", required_argument, 0, 1007}, {"alpha", required_argument, 0, 1008},
        {"json", no_argument, 0, 'j'},          {"where", required_argument, 0, 'W'},
        {"filter-ids", required_argument, 0, 'F'}, {"with-metadata", no_argument, 0, 'V'},
        {"filter-direct-max", required_argument, 0, 'X'},
        {"no-sketch", no_argument, 0, 1009},    {"latency", no_argument, 0, 1010},
        {"centroid-groups", required_argument, 0, 1020},
        {0, 0, 0, 0}};
    enum { R_DENSE = 0, R_SPARSE = 1, R_HYBRID = 2 };
    int retriever = R_DENSE;
    const char *sparse_queries = NULL, *query_text = NULL, *vocab = NULL;
    bool text_default = false; /* hybrid with --encoder: its sparse parts, else the texts */
    tt_sparse_options spo;
    tt_fusion_options fo;
    tt_sparse_options_init(&spo);
    tt_fusion_options_init(&fo);
    const char *index = NULL, *queries = NULL, *qlens = NULL, *qids = NULL, *out = NULL;
    const char *encoder = NULL;
    uint32_t enc_timeout_ms = 0;
    const char *tag = "tartan";
    uint64_t k = 10, u;
    int threads = 1, c, rc_arg;
    bool jsonl = false, with_md = false, latency = false;
    const char *where = NULL, *filter_ids = NULL;
    double d;
    tt_search_options so;
    tt_open_options oo;
    tt_search_options_init(&so);
    tt_open_options_init(&oo);
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'q': queries = optarg; break;
        case 'L': qlens = optarg; break;
        case 'i': qids = optarg; break;
        case 'o': out = optarg; break;
        case 'g': tag = optarg; break;
        case 'j': jsonl = true; break;
        case 'W': where = optarg; break;
        case 'F': filter_ids = optarg; break;
        case 'V': with_md = true; break;
        case 1010: latency = true; break;
        case 'X':
            if (!cli_parse_u64(optarg, &u) || u < 1)
                return cli_usage_error("search", "--filter-direct-max must be at least 1");
            so.filter_direct_max = u;
            break;
        case 'D': oo.direct = 1; break;
        case 'k':
            if (!cli_parse_u64(optarg, &k) || k == 0 || k > 1000000)
                return cli_usage_error("search", "--k must be 1..1000000");
            break;
        case 'm':
            if (!strcmp(optarg, "sparse"))
                retriever = R_SPARSE;
            else if (!strcmp(optarg, "hybrid"))
                retriever = R_HYBRID;
            else if (!strcmp(optarg, "dense"))
                so.mode = TT_MODE_PLAID;
            else if ((so.mode = dense_mode(optarg)) < 0)
                return cli_usage_error("search", "--mode must be plaid (dense), exhaustive, "
                                       "exact, sparse or hybrid");
            break;
        case 1001:
            if ((so.mode = dense_mode(optarg)) < 0)
                return cli_usage_error("search", "--dense-mode must be plaid, exhaustive or exact");
            break;
        case 1002: sparse_queries = optarg; break;
        case 1019: vocab = optarg; break;
        case 1003: query_text = optarg; break;
        case 1004:
            if (!cli_parse_double(optarg, &d) || d < 0)
                return cli_usage_error("search", "--k1 must be a number >= 0");
            spo.k1 = d;
            break;
        case 1005:
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1))
                return cli_usage_error("search", "--b must be in [0, 1]");
            spo.b = d;
            break;
        case 1006:
            if (!strcmp(optarg, "minmax"))
                fo.method = TT_FUSION_MINMAX;
            else if (!strcmp(optarg, "rrf"))
                fo.method = TT_FUSION_RRF;
            else
                return cli_usage_error("search", "--fusion must be minmax or rrf");
            break;
        case 1007:
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 1000000)
                return cli_usage_error("search", "--fusion-depth must be 1..1000000");
            fo.depth = (uint32_t)u;
            break;
        case 1008:
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1))
                return cli_usage_error("search", "--alpha must be in [0, 1]");
            fo.alpha = d;
            break;
        case 'I':
            if (!strcmp(optarg, "uring"))
                oo.io = TT_IO_URING;
            else if (!strcmp(optarg, "mmap"))
                oo.io = TT_IO_MMAP;
            else
                return cli_usage_error("search", "--io must be uring or mmap");
            break;
        case 'Q':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 4096)
                return cli_usage_error("search", "--queue-depth must be 1..4096");
            oo.queue_depth = (int)u;
            break;
        case 'p':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > (1u << 24))
                return cli_usage_error("search", "--nprobe must be 1..16777216");
            so.nprobe = (int)u;
            break;
        case 'T':
            if (!cli_parse_double(optarg, &d))
                return cli_usage_error("search", "--threshold must be a finite number");
            so.threshold = (float)d;
            break;
        case 'P':
            if (!strcmp(optarg, "relative"))
                so.pruning = TT_PRUNE_RELATIVE;
            else if (!strcmp(optarg, "absolute"))
                so.pruning = TT_PRUNE_ABSOLUTE;
            else
                return cli_usage_error("search", "--pruning must be relative or absolute");
            break;
        case 'K':
            if (!strcmp(optarg, "adaptive"))
                so.rerank = TT_RERANK_ADAPTIVE;
            else if (!strcmp(optarg, "fixed"))
                so.rerank = TT_RERANK_FIXED;
            else
                return cli_usage_error("search", "--rerank must be adaptive or fixed");
            break;
        case 'U':
            so.tuned = 0;
            break;
        case 1009:
            so.sketch = 0;
            break;
        case 1020: {
            uint64_t g;
            if (!cli_parse_u64(optarg, &g) || g > 1000000)
                return cli_usage_error("search", "--centroid-groups must be 0 (every centroid) "
                                       "or a number of groups");
            so.centroid_groups = (int)g;
            break;
        }
        case 'M':
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1000))
                return cli_usage_error("search", "--rerank-margin must be in [0, 1000]");
            so.rerank_margin = (float)d;
            break;
        case 'R':
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 1))
                return cli_usage_error("search", "--prune-ratio must be in [0, 1]");
            so.prune_ratio = (float)d;
            break;
        case 'n':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > UINT32_MAX)
                return cli_usage_error("search", "--ndocs must be 1..4294967295");
            so.ndocs = (uint32_t)u;
            break;
        case 's':
            if (!strcmp(optarg, "sum"))
                so.score = TT_SCORE_SUM;
            else if (!strcmp(optarg, "mean"))
                so.score = TT_SCORE_MEAN;
            else
                return cli_usage_error("search", "--score must be sum or mean");
            break;
        case 't':
            if ((rc_arg = cli_threads_arg("search", optarg, &threads)))
                return rc_arg;
            break;
        case 'E': encoder = optarg; break;
        case 'O': {
            uint64_t secs;
            if (!cli_parse_u64(optarg, &secs) || secs == 0 || secs > 86400)
                return cli_usage_error("search", "--encoder-timeout must be 1..86400 seconds");
            enc_timeout_ms = (uint32_t)(secs * 1000);
            break;
        }
        case 'h': usage(stdout); return CLI_OK;
        default: usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("search", "unexpected argument '%s'", argv[optind]);
    if (!index || !out)
        return cli_usage_error("search", "--index and --out are required");
    /* Where the sparse queries come from (doc/search.md, "Hybrid retrieval"). */
    if (retriever == R_SPARSE) {
        if (qlens || qids)
            return cli_usage_error("search", "--mode sparse takes --queries (texts),"
                                   " --query-text or --sparse-queries, not vectors");
        if (encoder && (sparse_queries || query_text))
            return cli_usage_error("search", "--mode sparse: --encoder or --sparse-queries/"
                                   "--query-text, not both");
        if (!sparse_queries && !query_text) {
            query_text = queries;
            text_default = encoder != NULL;
        }
        if (!sparse_queries && !query_text)
            return cli_usage_error("search", "--mode sparse needs --queries (texts), "
                                   "--query-text or --sparse-queries");
        if (queries && query_text != queries)
            return cli_usage_error("search", "--mode sparse: give the queries once");
    } else if (retriever == R_HYBRID) {
        if (!sparse_queries && !query_text && encoder) {
            query_text = queries;
            text_default = true;
        }
        if (!sparse_queries && !query_text)
            return cli_usage_error("search", "--mode hybrid needs --sparse-queries or "
                                   "--query-text (or --encoder, whose --queries texts are "
                                   "tokenized too)");
    }
    if (vocab && !sparse_queries)
        return cli_usage_error("search", "--vocab goes with --sparse-queries");
    if (sparse_queries && query_text)
        return cli_usage_error("search", "--sparse-queries and --query-text exclude each other");
    if (retriever == R_DENSE && (sparse_queries || query_text))
        return cli_usage_error("search", "--sparse-queries/--query-text need --mode sparse or "
                               "hybrid");
    /* Filters apply to every retriever: the dense one (tt_search_options.filter), the
     * sparse one (tt_sparse_options.filter) and both lists of a hybrid search.
     * --with-metadata only annotates the results: any mode. */
    if (retriever != R_SPARSE && !queries)
        return cli_usage_error("search", "--index, --queries and --out are required");
    if (encoder && (qlens || qids))
        return cli_usage_error("search", "with --encoder the query ids come from --queries; "
                               "--qlens/--query-ids do not apply");
    if (oo.direct && oo.io == TT_IO_MMAP)
        return cli_usage_error("search", "--direct needs io_uring reads (not --io mmap)");

    if (!*out)
        return cli_usage_error("search", "--out must name a file (or '-' for stdout)");
    if (with_md && !jsonl)
        return cli_usage_error("search", "--with-metadata needs --jsonl (or --json)");
    if (!*tag || strpbrk(tag, " \t\n\r\v\f"))
        return cli_usage_error("search", "--tag must be a non-empty word without whitespace");
    /* Parallelism comes from --threads; sgemm threads on top would oversubscribe. */
    tt_blas_set_threads(1);
    /* A search cannot be cancelled half-way: an interrupt removes the temporary run and
     * ends the process at once. */
    cli_signals_install(false);
    int rc = CLI_FAIL, st = TT_OK;
    tt_queries *qs = NULL;
    tt_sparse_set *sq = NULL;
    uint64_t *sparse_of = NULL;
    tt_sharded *sh = NULL; /* a plain index opens as one shard */
    const tt_index *idx = NULL;
    tt_hit *hits = NULL;
    uint32_t *nhits = NULL;
    double *secs = NULL;
    cli_smeta *md = NULL;
    tt_filter *filter = NULL;
    FILE *f = NULL;
    char *tmp = NULL;
    if ((st = tt_sharded_open(&sh, index, &oo, 0, 1)) ||
        (st = (idx = tt_sharded_shard(sh, 0, NULL, NULL)) ? TT_OK : TT_EINVAL)) {
        rc = cli_fail("search", st);
        goto done;
    }
    /* A sharded index: every shard has sparse postings or none (a sharded build writes
     * them in each); its sparse and hybrid searches use the whole collection's BM25
     * statistics (tt_sharded_hybrid_search_batch), so they equal the unsharded index's. */
    /* --mode sparse with --encoder: the encoder's sparse parts (a weighted index) or the
     * texts (BM25); its dense vectors are not searched. */
    if (retriever == R_SPARSE && encoder && tt_index_sparse_kind(idx) != TT_SPARSE_WEIGHTS)
        encoder = NULL;
    if (((retriever != R_SPARSE || encoder) &&
         ((st = encoder ? encode_queries(encoder, queries, idx, enc_timeout_ms, &qs,
                                         text_default && tt_index_sparse_kind(idx) ==
                                                             TT_SPARSE_WEIGHTS ? &sq : NULL)
                        : tt_queries_load(&qs, queries, qlens, qids)) ||
          (st = tt_queries_check(qs, idx)))) ||
        (retriever != R_DENSE && !sq &&
         !(text_default && tt_index_sparse_kind(idx) == TT_SPARSE_WEIGHTS) &&
         (st = sparse_queries
                   ? tt_sparse_set_load_jsonl_index(&sq, sparse_queries, vocab, idx)
                              : tt_sparse_set_load_text_index(&sq, query_text, 1, idx)))) {
        rc = cli_fail("search", st);
        goto done;
    }
    if (retriever != R_DENSE && !tt_index_sparse_kind(idx)) {
        fprintf(stderr, "tartan search: error: %s has no sparse postings (build or add with "
                "--bm25 or --sparse)\n", index);
        goto done;
    }
    if (retriever == R_HYBRID) { /* the sparse query of each dense query, by id */
        sparse_of = malloc((qs->num_queries ? qs->num_queries : 1) * sizeof *sparse_of);
        if (!sparse_of) {
            fprintf(stderr, "tartan search: out of memory\n");
            goto done;
        }
        uint64_t missing = 0;
        for (uint64_t q = 0; q < qs->num_queries; q++) {
            int64_t r = tt_sparse_set_find(sq, qs->ids[q]);
            sparse_of[q] = r < 0 ? UINT64_MAX : (uint64_t)r;
            missing += r < 0;
        }
        if (missing)
            fprintf(stderr, "tartan search: warning: %llu of %llu queries have no sparse query "
                    "(dense results only)\n", (unsigned long long)missing,
                    (unsigned long long)qs->num_queries);
    }
    cli_sigbus_install("search", idx);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    /* Metadata: each shard's own metadata.tt, its rows offset to the global rows;
     * --filter-ids works on the global rows too: each shard searches its own part. */
    if ((where || with_md) && cli_smeta_open("tartan search", sh, &md))
        goto done;
    if ((where || filter_ids) && make_filter(sh, md, where, filter_ids, &filter)) {
        rc = CLI_FAIL;
        goto done;
    }
    so.filter = filter;
    spo.filter = filter;
    tt_search_options eff;
    /* Hybrid: the dense search runs to the fusion depth, so its parameters are those of
     * that k (tt_hybrid_search_batch). */
    const uint32_t dense_k = retriever == R_HYBRID && fo.depth > k ? fo.depth : (uint32_t)k;
    int tuned_fields = tt_search_options_resolve_index(idx, &so, dense_k, &eff);
    if (retriever != R_DENSE && !sq) {
        fprintf(stderr, "tartan search: error: the encoder sent no sparse parts (protocol 2, "
                "doc/encoder-protocol.md) for the weighted sparse index %s\n", index);
        goto done;
    }
    const bool by_sparse = retriever == R_SPARSE; /* query ids and order: the sparse set's */
    const uint64_t nq = by_sparse ? tt_sparse_set_size(sq) : qs->num_queries;
    /* Where the dense parameters come from (tartan tune). */
    char from[384];
    tt_search_options eff_short;
    bool short_used = false; /* some queries take the calibration's short-query set */
    {
        tt_tune_info ti;
        tt_index_tuned(idx, &ti);
        const tt_tuned *ts = dense_k <= 10 ? &ti.k10 : &ti.k100;
        if (tuned_fields && ti.short_len && qs) {
            for (uint64_t i = 0; i < qs->num_queries && !short_used; i++)
                short_used = qs->lens[i] <= 2 * ti.short_len;
            tt_search_options_resolve_query(idx, &so, dense_k, ti.short_len, &eff_short);
        }
        const tt_tuned *tss = dense_k <= 10 ? &ti.k10_short : &ti.k100_short;
        char shorts[160] = "";
        if (short_used && eff_short.mode == TT_MODE_EXHAUSTIVE)
            snprintf(shorts, sizeof shorts, "; queries of at most %u vectors: exhaustive "
                     "(%.3f ms per query on pseudo-queries of %u)", 2 * ti.short_len,
                     tss->exhaustive_ms, ti.short_len);
        else if (short_used)
            snprintf(shorts, sizeof shorts, "; queries of at most %u vectors: nprobe=%d ndocs=%u "
                     "margin=%g (recall@%u %.3f on pseudo-queries of %u)", 2 * ti.short_len,
                     eff_short.nprobe, eff_short.ndocs, (double)eff_short.rerank_margin,
                     tss->k, tss->recall, ti.short_len);
        char first[48]; /* the share of exhaustive search's first documents kept */
        cli_first_kept(ts, first, sizeof first);
        if (tuned_fields && eff.mode == TT_MODE_EXHAUSTIVE)
            snprintf(from, sizeof from, "calibrated for k=%u on %u %s: exhaustive search, "
                     "%.3f ms per query, %s (PLAID's %s: recall@%u %.3f%s, %.3f ms)%s",
                     ts->k, ti.num_queries, ti.pseudo ? "pseudo-queries" : "queries",
                     ts->exhaustive_ms, cli_exhaustive_why(ts), ts->reached ? "set" : "best",
                     ts->k, ts->recall, first, ts->ms, shorts);
        else if (tuned_fields)
            snprintf(from, sizeof from, "calibrated for k=%u on %u %s (recall@%u %.3f%s, target "
                     "%.2f%s)%s%s", ts->k, ti.num_queries, ti.pseudo ? "pseudo-queries" : "queries",
                     ts->k, ts->recall, first, ti.target, ts->reached ? "" : ", not reached",
                     tuned_fields < 4 ? ", with your flags" : "", shorts);
        else
            snprintf(from, sizeof from, "%s", !ti.tuned ? "ColBERTv2's defaults by k (the index "
                     "is not calibrated: tartan tune)" : so.tuned ? "your flags" :
                     "ColBERTv2's defaults by k (--untuned)");
    }
    /* Where the dense parameters came from: PLAID always says, another mode when the
     * calibration chose it. */
    const bool say_from = eff.mode == TT_MODE_PLAID || tuned_fields;
    if (retriever != R_DENSE) {
        char fusion[480] = "";
        if (retriever == R_HYBRID)
            snprintf(fusion, sizeof fusion, " + %s dense%s%s%s, fusion %s depth %u%s",
                     mode_name(eff.mode), say_from ? " (" : "", say_from ? from : "",
                     say_from ? ")" : "",
                     fo.method == TT_FUSION_RRF ? "rrf" : "minmax", fo.depth,
                     fo.method == TT_FUSION_RRF ? "" : " (alpha)");
        fprintf(stderr, "tartan search: %llu queries on %llu documents; %s k=%llu, sparse %s%s\n",
                (unsigned long long)nq, (unsigned long long)tt_sharded_num_docs(sh),
                retriever == R_HYBRID ? "hybrid" : "sparse", (unsigned long long)k,
                tt_index_sparse_kind(idx) == TT_SPARSE_BM25 ? "BM25" : "weights", fusion);
    } else if (eff.mode == TT_MODE_PLAID) {
        char prune[64];
        if (eff.pruning == TT_PRUNE_ABSOLUTE)
            snprintf(prune, sizeof prune, "threshold=%g", (double)eff.threshold);
        else
            snprintf(prune, sizeof prune, "pruning=relative ratio=%g", (double)eff.prune_ratio);
        char rerank[64];
        if (eff.rerank == TT_RERANK_FIXED)
            snprintf(rerank, sizeof rerank, "fixed");
        else
            snprintf(rerank, sizeof rerank, "adaptive margin=%g", (double)eff.rerank_margin);
        if (info.sketch_bytes)
            snprintf(rerank + strlen(rerank), sizeof rerank - strlen(rerank), " sketch=%s",
                     eff.sketch ? "on" : "off");
        char groups[48] = "";
        if (eff.centroid_groups > 0)
            snprintf(groups, sizeof groups, " centroid-groups=%d", eff.centroid_groups);
        fprintf(stderr, "tartan search: %llu queries on %llu documents; plaid k=%llu nprobe=%d"
                "%s %s ndocs=%u rerank=%s (%s); residuals via %s\n",
                (unsigned long long)qs->num_queries, (unsigned long long)tt_sharded_num_docs(sh),
                (unsigned long long)k, eff.nprobe, groups, prune, eff.ndocs,
                rerank, from, io_name(info.io));
    }
    else
        fprintf(stderr, "tartan search: %llu queries on %llu documents; %s k=%llu%s%s%s; "
                "residuals via %s\n", (unsigned long long)qs->num_queries,
                (unsigned long long)tt_sharded_num_docs(sh), mode_name(eff.mode),
                (unsigned long long)k, say_from ? " (" : "", say_from ? from : "",
                say_from ? ")" : "", io_name(info.io));
    {
        /* Why io_uring is not used, if it was asked for (or chosen by default). */
        tt_search_ctx *probe = NULL;
        tt_search_stats ss;
        if ((st = tt_search_ctx_new(idx, &probe)) == TT_OK &&
            tt_search_ctx_stats(probe, &ss) == TT_OK && ss.io_note[0])
            fprintf(stderr, "tartan search: note: %s\n", ss.io_note);
        tt_search_ctx_free(probe);
        if (st) {
            rc = cli_fail("search", st);
            goto done;
        }
    }

    hits = malloc((nq ? nq : 1) * k * sizeof *hits);
    nhits = malloc((nq ? nq : 1) * sizeof *nhits);
    secs = malloc((nq ? nq : 1) * sizeof *secs);
    if (!hits || !nhits || !secs) {
        fprintf(stderr, "tartan search: out of memory for %llu x %llu results\n",
                (unsigned long long)nq, (unsigned long long)k);
        goto done;
    }
    if (strcmp(out, "-")) {
        /* Written aside under a unique name in the same directory, then renamed: two
         * searches into one RUN never mix, and an interrupted one leaves nothing. */
        tmp = malloc(strlen(out) + 16);
        if (!tmp) {
            fprintf(stderr, "tartan search: out of memory\n");
            goto done;
        }
        sprintf(tmp, "%s.tmp-XXXXXX", out);
        /* Registered for removal as it is made: a signal in between left it behind. */
        int fd = cli_mkstemp_cleanup(tmp);
        if (fd < 0) {
            fprintf(stderr, "tartan search: error: %s: cannot create a file beside it: %s\n", out,
                    strerror(errno));
            free(tmp);
            tmp = NULL;
            goto done;
        }
        (void)fchmod(fd, 0666 & ~cli_umask());
        if (!(f = fdopen(fd, "w"))) {
            fprintf(stderr, "tartan search: error: %s: %s\n", tmp, strerror(errno));
            close(fd);
            goto done;
        }
    } else {
        f = stdout;
    }

    /* The reference modes share passes over the index between queries (tt_search_batch
     * without latencies; with the filter, if any, for all of them), unless each query is
     * to be timed. */
    const bool one_pass = retriever == R_DENSE && nq > 1 && !latency &&
                          (eff.mode == TT_MODE_EXHAUSTIVE || eff.mode == TT_MODE_EXACT);
    /* On a terminal, search in slices to show progress (in the reference modes each
     * slice is one pass); otherwise in one batch. */
    cli_progress_state ps;
    cli_progress_init(&ps);
    int nt = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t slice = ps.tty ? (uint64_t)(nt > 0 ? nt : 1) * 32 : (nq ? nq : 1);
    double t0 = now_s();
    for (uint64_t q0 = 0; q0 < nq; q0 += slice) {
        uint64_t m = nq - q0 < slice ? nq - q0 : slice;
        if (retriever == R_DENSE)
            st = tt_sharded_search_batch(sh, qs->vectors, qs->offsets + q0, qs->lens + q0, m,
                                         (uint32_t)k, &so, threads, hits + q0 * k, nhits + q0,
                                         one_pass ? NULL : secs + q0);
        else if (retriever == R_SPARSE) {
            uint64_t *rows = malloc(m * sizeof *rows);
            if (!rows) {
                fprintf(stderr, "tartan search: out of memory\n");
                goto done;
            }
            for (uint64_t i = 0; i < m; i++)
                rows[i] = q0 + i;
            st = tt_sharded_hybrid_search_batch(sh, NULL, NULL, NULL, NULL, sq, rows, &spo, &fo,
                                                m, (uint32_t)k, threads, hits + q0 * k,
                                                nhits + q0, secs + q0);
            free(rows);
        } else
            st = tt_sharded_hybrid_search_batch(sh, qs->vectors, qs->offsets + q0,
                                                qs->lens + q0, &so, sq, sparse_of + q0, &spo,
                                                &fo, m, (uint32_t)k, threads, hits + q0 * k,
                                                nhits + q0, secs + q0);
        if (st) {
            cli_progress_done(&ps);
            if (m == nq) {
                rc = cli_fail("search", st);
            } else {
                /* The batch numbers queries from the start of its slice. */
                fprintf(stderr, "tartan search: error: in the queries from number %llu (id %s) "
                        "on: %s\n", (unsigned long long)q0,
                        by_sparse ? tt_sparse_set_id(sq, q0) : qs->ids[q0], tt_last_error());
            }
            goto done;
        }
        cli_progress(&ps, "search", q0 + m, nq);
    }
    double wall = now_s() - t0;
    cli_progress_done(&ps);
    for (uint64_t q = 0; q < nq; q++)
        if (write_results(f, sh, by_sparse ? tt_sparse_set_id(sq, q) : qs->ids[q], hits + q * k,
                          nhits[q], jsonl, tag, with_md ? md : NULL)) {
            fprintf(stderr, "tartan search: error: %s: write failed: %s\n", tmp ? tmp : "stdout",
                    strerror(errno));
            goto done;
        }
    if (f != stdout) {
        int e = fflush(f) || fsync(fileno(f));
        e |= fclose(f);
        f = NULL;
        if (e || cli_rename_published(tmp, out)) {
            fprintf(stderr, "tartan search: error: %s: %s\n", out, strerror(errno));
            goto done;
        }
    } else if (fflush(stdout)) {
        fprintf(stderr, "tartan search: error: stdout: %s\n", strerror(errno));
        goto done;
    }
    if (one_pass) {
        fprintf(stderr, "tartan search: %llu queries in %.3f s on %d thread%s: %.1f QPS; searched "
                "together in passes over the index (per-query latency: --latency)\n",
                (unsigned long long)nq, wall, nt, nt == 1 ? "" : "s",
                wall > 0 ? (double)nq / wall : 0.0);
        rc = CLI_OK;
        goto done;
    }
    qsort(secs, nq, sizeof *secs, dbl_cmp);
    double sum = 0;
    for (uint64_t q = 0; q < nq; q++)
        sum += secs[q];
    fprintf(stderr, "tartan search: %llu queries in %.3f s on %d thread%s: %.1f QPS; latency "
            "mean %.3f ms, p50 %.3f ms, p95 %.3f ms, p99 %.3f ms\n",
            (unsigned long long)nq, wall, nt, nt == 1 ? "" : "s",
            wall > 0 ? (double)nq / wall : 0.0, nq ? 1e3 * sum / (double)nq : 0.0,
            1e3 * pct(secs, nq, 50), 1e3 * pct(secs, nq, 95), 1e3 * pct(secs, nq, 99));
    rc = CLI_OK;
done:
    if (f && f != stdout)
        fclose(f);
    if (rc != CLI_OK && tmp) {
        unlink(tmp);
        cli_cleanup_file(NULL);
    }
    free(tmp);
    free(hits);
    free(nhits);
    free(secs);
    tt_filter_free(filter);
    cli_smeta_close(md);
    tt_sharded_close(sh);
    tt_queries_free(qs);
    tt_sparse_set_free(sq);
    free(sparse_of);
    return rc;
}

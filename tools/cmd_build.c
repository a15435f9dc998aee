/* tartan build: vectors (+ doclens, ids) -> compressed index directory. */
#include "cli.h"

#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan build --vectors A.npy[,B.npy...] --doclens A.npy[,B.npy...] --out DIR\n"
        "                    [options]\n"
        "       tartan build --encoder CMD --corpus FILE --out DIR [options]\n"
        "\n"
        "Builds a compressed PLAID/ColBERTv2-style index from vector files (.npy float32,\n"
        "float16 or float64 [num_vectors, dim], or .fvecs) and per-document vector counts\n"
        "(.npy of any integer dtype: int8..int64, uint8..uint64).\n"
        "\n"
        "  --vectors LIST       vector files, comma-separated, in corpus order\n"
        "  --doclens LIST       one doclens file per vector file\n"
        "  --ids FILE           external document ids, one per line (default: row number)\n"
        "  --encoder CMD        encoder program (doc/encoder-protocol.md) run in passage mode\n"
        "                       over --corpus (BEIR corpus.jsonl or id<TAB>text TSV); its\n"
        "                       vectors are spooled beside DIR, then indexed and removed\n"
        "  --corpus FILE        the texts to encode (with --encoder)\n"
        "  --encoder-timeout S  seconds without progress before the encoder is killed (300)\n"
        "  --out DIR            index directory to create\n"
        "  --force              replace an existing index at DIR (kept if the build fails)\n"
        "  --nbits N            residual bits per dimension: 1, 2 or 4 (default 2); 3 with\n"
        "                       the adaptive codec (an average over widths 0-4 and 8)\n"
        "  --centroids K        number of centroids (default 2^floor(log2(16*sqrt(N))))\n"
        "  --codec shared|per-dim|adaptive   one bucket table for all dimensions\n"
        "                       (ColBERTv2), one per dimension, or (default) bits\n"
        "                       allocated per dimension (0-8, nbits on average) where the\n"
        "                       vectors' energy is (LLM hidden states' outlier dimensions;\n"
        "                       on isotropic vectors the same as per-dim)\n"
        "  --lloyd-max-rounds N refine the bucket tables with up to N Lloyd-Max rounds\n"
        "                       (default 100; 0: ColBERTv2's quantile tables)\n"
        "  --debias auto|table|vector|none  how decoded residuals keep their inner\n"
        "                       product with the original: table (each table's weights\n"
        "                       scaled), vector (one float16 scale per vector, 2 bytes,\n"
        "                       adaptive codec), none (weights as trained; with\n"
        "                       --lloyd-max-rounds 0, ColBERTv2's tables); auto (default):\n"
        "                       vector where the codec gives some dimensions 8 bits\n"
        "                       (outlier dimensions), else table (doc/format.md)\n"
        "  --no-debias, --vector-scale  --debias none, --debias vector\n"
        "  --assign two-level|exact  nearest-centroid search for encoding (default two-level)\n"
        "  --threads T          worker threads (default: all CPUs)\n"
        "  --memory SIZE        the build's working-memory budget, e.g. 512M, 4G (default\n"
        "                       2G; the calibration after it holds what a search holds)\n"
        "  --seed S             sampling and k-means seed (default 42)\n"
        "  --kmeans-iters N     k-means iterations (default 4, as ColBERTv2)\n"
        "  --sample-factor F    training docs = 1 + F*sqrt(120*num_docs) (default 16), kept\n"
        "                       within 32..256 vectors per centroid and half of --memory\n"
        "  --keep-originals f16 also store the vectors as float16 for exact scoring\n"
        "  --no-normalize       keep raw vectors (inner-product encoders); default L2-normalises\n"
        "  --pool-factor F      token pooling: cluster each document's n vectors (Ward) into\n"
        "                       max(1, floor(n/F)) means, about F times fewer vectors to store\n"
        "                       and search (default 1: none; doc/pooling.md). Queries are\n"
        "                       never pooled; tartan add uses the index's factor\n"
        "  --pool-global F      token pooling by one cut: every document's Ward tree is cut\n"
        "                       at the one height that keeps about 1/F of all the vectors\n"
        "                       (F > 1, e.g. 2.5): near-duplicate vectors pool first,\n"
        "                       wherever they are (doc/pooling.md, \"One cut for the whole\n"
        "                       collection\"); tartan add cuts new documents at that height\n"
        "  --bf16               read uint16 .npy data as bfloat16\n"
        "  --describe TEXT      encoder description stored in the index\n"
        "  --metadata FILE      document metadata, JSON Lines: one object per document in\n"
        "                       document order, or keyed by a string \"id\" when the first\n"
        "                       object has one; values string, number, boolean or null. Kept\n"
        "                       in the index (SQLite) for tartan search --where\n"
        "  --target-recall F    calibrate search for this recall@k against exhaustive\n"
        "                       search (default 0.95; tartan tune, doc/search.md)\n"
        "  --no-tune            do not calibrate (tartan search then uses ColBERTv2's\n"
        "                       defaults by k until tartan tune is run)\n"
        "  --shards S           a sharded index: S index directories OUT/shard-NNNN of\n"
        "                       consecutive documents sharing one codebook, and OUT/SHARDS\n"
        "                       naming them (doc/format.md; search it whole, or per shard\n"
        "                       under MPI: doc/scale.md)\n"
        "  --bm25               also index BM25 postings of the documents' texts (--corpus,\n"
        "                       or --text), for tartan search --mode sparse|hybrid\n"
        "  --text FILE          the documents' texts for --bm25 (BEIR corpus.jsonl or TSV,\n"
        "                       one record per document in the vectors' order)\n"
        "  --sparse FILE        also index precomputed sparse vectors, JSON Lines\n"
        "                       {\"id\", \"terms\": {term: weight}} in the vectors' order,\n"
        "                       or {\"id\", \"term_ids\": {\"2023\": weight}} (integer term ids)\n"
        "  --vocab FILE         with --sparse: the term ids' vocabulary (one term per line,\n"
        "                       id = line - 1): ids must be below its size; string terms are\n"
        "                       mapped to ids through it; stored in the index (vocab.tt)\n");
}

/* Calibration after the build (tartan tune): on unless --no-tune. */
static bool tune_after = true;
static double tune_target = 0.95;

/* Builds from an open input and prints the summary; then calibrates the index. */
static int run_build(tt_input *in, const char *out, tt_build_options *o) {
    cli_progress_state ps;
    cli_progress_init(&ps);
    o->progress = cli_progress;
    o->progress_user = &ps;
    tt_build_stats bs;
    int st = tt_build(out, in, o, &bs);
    cli_progress_done(&ps);
    if (st == TT_ECANCELED)
        return CLI_FAIL; /* the caller dies of the signal after its own cleanup */
    if (st)
        return cli_fail("build", st);
    if (o->group && o->group->rank != 0)
        return CLI_OK; /* rank 0 reports */
    char h1[32], h2[32], pooled[96] = "";
    uint64_t stored = tt_input_num_vectors(in);
    if (o->pool_factor > 1 || o->pool_global > 0) { /* what pooling kept: the index knows */
        tt_open_options oo;
        tt_open_options_init(&oo);
        oo.io = TT_IO_MMAP;
        tt_index *idx;
        tt_index_info ii;
        if (tt_index_open(&idx, out, &oo) == TT_OK && tt_index_get_info(idx, &ii) == TT_OK) {
            stored = ii.num_vectors;
            if (o->pool_global > 0)
                snprintf(pooled, sizeof pooled, " (pooled by one cut at %.4g from %llu)",
                         ii.pool_threshold, (unsigned long long)tt_input_num_vectors(in));
            else
                snprintf(pooled, sizeof pooled, " (pooled by %d from %llu)", o->pool_factor,
                         (unsigned long long)tt_input_num_vectors(in));
            tt_index_close(idx);
        }
    }
    printf("built %s: %llu documents, %llu vectors%s x %u dims, %u centroids, %d-bit residuals\n",
           out, (unsigned long long)tt_input_num_docs(in), (unsigned long long)stored, pooled,
           tt_input_dim(in), bs.num_centroids, o->nbits);
    if (o->shards > 1)
        printf("in %u shards (%s/shard-0000 ...)\n", o->shards, out);
    uint64_t f16 = tt_input_num_vectors(in) * tt_input_dim(in) * 2;
    printf("index %s (float16 input vectors: %s, %.2fx smaller) in %.2f s "
           "(train %.2f s, encode %.2f s, ivf %.2f s)\n",
           cli_human_bytes(bs.index_bytes, h1, sizeof h1), cli_human_bytes(f16, h2, sizeof h2),
           (double)f16 / (double)bs.index_bytes, bs.seconds_total, bs.seconds_train,
           bs.seconds_encode, bs.seconds_ivf);
    fflush(stdout);
    if (tune_after && o->shards > 1) {
        /* Each shard is an index of its own: calibrating is per shard (and the same
         * parameters then serve one process and MPI ranks alike). */
        fprintf(stderr, "tartan build: the shards are not calibrated: tartan search uses "
                "ColBERTv2's defaults on each until 'tartan tune --index %s/shard-NNNN'\n", out);
    } else if (tune_after) {
        tt_tune_options to;
        tt_tune_options_init(&to);
        to.target_recall = tune_target;
        to.threads = o->threads;
        /* The index is built and published whatever happens here: a failed calibration
         * leaves it with ColBERTv2's defaults, which is what it says. */
        if (cli_tune_index("build", out, &to) != CLI_OK)
            fprintf(stderr, "tartan build: %s is built, but not calibrated: tartan search will "
                    "use ColBERTv2's defaults until 'tartan tune --index %s' succeeds\n", out,
                    out);
    }
    return CLI_OK;
}

/* build --encoder: the encoder's vectors are spooled to .npy files in a directory
 * beside the output (same file system), indexed, and the spool removed. */
static int build_with_encoder(const char *encoder, const char *corpus, uint32_t timeout_ms,
                              const char *out, tt_build_options *o) {
    cli_spool sp;
    int rc = cli_spool_encode("build", encoder, corpus, timeout_ms, out, &sp);
    if (rc == CLI_OK) {
        if (!o->encoder)
            o->encoder = sp.description;
        if (!o->sparse && sp.sparse) /* the encoder's, unless --bm25/--sparse */
            o->sparse = sp.sparse;
        rc = run_build(sp.in, out, o);
    }
    cli_spool_remove(&sp);
    cli_die_if_cancelled("build", rc == CLI_OK, "nothing was published");
    return rc;
}

int cmd_build(int argc, char **argv) {
    return cmd_build_group(argc, argv, NULL);
}

int cmd_build_group(int argc, char **argv, const tt_build_group *group) {
    static const struct option longopts[] = {
        {"vectors", required_argument, 0, 'v'},  {"doclens", required_argument, 0, 'l'},
        {"ids", required_argument, 0, 'i'},      {"out", required_argument, 0, 'o'},
        {"force", no_argument, 0, 'f'},          {"nbits", required_argument, 0, 'b'},
        {"centroids", required_argument, 0, 'k'}, {"codec", required_argument, 0, 'c'},
        {"assign", required_argument, 0, 'a'},   {"threads", required_argument, 0, 't'},
        {"memory", required_argument, 0, 'm'},   {"seed", required_argument, 0, 's'},
        {"kmeans-iters", required_argument, 0, 'I'}, {"sample-factor", required_argument, 0, 'S'},
        {"keep-originals", required_argument, 0, 'K'}, {"no-normalize", no_argument, 0, 'N'},
        {"bf16", no_argument, 0, 'B'},           {"describe", required_argument, 0, 'd'},
        {"encoder", required_argument, 0, 'E'},  {"corpus", required_argument, 0, 'C'},
        {"encoder-timeout", required_argument, 0, 'T'}, {"pool-factor", required_argument, 0, 'P'},
        {"pool-global", required_argument, 0, 1301},
        {"lloyd-max-rounds", required_argument, 0, 'L'}, {"no-debias", no_argument, 0, 'D'},
        {"vector-scale", no_argument, 0, 'V'},   {"debias", required_argument, 0, 1302},
        {"metadata", required_argument, 0, 'M'},
        {"no-tune", no_argument, 0, 'U'},        {"target-recall", required_argument, 0, 'R'},
        {"shards", required_argument, 0, 'Z'},
        {"bm25", no_argument, 0, 2001}, {"text", required_argument, 0, 2002},
        {"sparse", required_argument, 0, 2003}, {"vocab", required_argument, 0, 2009},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    const char *vectors = NULL, *doclens = NULL, *ids = NULL, *out = NULL;
    const char *encoder = NULL, *corpus = NULL;
    const char *text = NULL, *sparse = NULL, *vocab = NULL;
    int bm25 = 0;
    tt_sparse_set *sp_set = NULL;
    uint32_t enc_timeout_ms = 0;
    tt_build_options o;
    tt_input_options io;
    tt_build_options_init(&o);
    tt_input_options_init(&io);
    o.group = group;
    uint64_t u;
    double d;
    int c, rc_arg;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'v': vectors = optarg; break;
        case 'l': doclens = optarg; break;
        case 'i': ids = optarg; break;
        case 'M': o.metadata = optarg; break;
        case 'o': out = optarg; break;
        case 'f': o.force = 1; break;
        case 'b':
            if (!cli_parse_u64(optarg, &u) || u < 1 || u > 4)
                return cli_usage_error("build", "--nbits must be 1, 2, 3 or 4");
            o.nbits = (int)u;
            break;
        case 'k':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > (1u << 24))
                return cli_usage_error("build", "--centroids must be 1..16777216");
            o.num_centroids = (uint32_t)u;
            break;
        case 'c':
            if (!strcmp(optarg, "shared"))
                o.codec_tables = TT_CODEC_SHARED;
            else if (!strcmp(optarg, "per-dim"))
                o.codec_tables = TT_CODEC_PER_DIM;
            else if (!strcmp(optarg, "adaptive"))
                o.codec_tables = TT_CODEC_ADAPTIVE;
            else
                return cli_usage_error("build", "--codec must be shared, per-dim or adaptive");
            break;
        case 'L':
            if (!cli_parse_u64(optarg, &u) || u > 1000)
                return cli_usage_error("build", "--lloyd-max-rounds must be 0..1000");
            o.lloyd_max_rounds = (int)u;
            break;
        case 'D':
            o.debias = TT_DEBIAS_NONE;
            break;
        case 'V':
            o.debias = TT_DEBIAS_VECTOR;
            break;
        case 1302:
            if (!strcmp(optarg, "auto"))
                o.debias = TT_DEBIAS_AUTO;
            else if (!strcmp(optarg, "table"))
                o.debias = TT_DEBIAS_TABLE;
            else if (!strcmp(optarg, "vector"))
                o.debias = TT_DEBIAS_VECTOR;
            else if (!strcmp(optarg, "none"))
                o.debias = TT_DEBIAS_NONE;
            else
                return cli_usage_error("build", "--debias must be auto, table, vector or none");
            break;
        case 'a':
            if (!strcmp(optarg, "exact"))
                o.assign = TT_ASSIGN_EXACT;
            else if (!strcmp(optarg, "two-level"))
                o.assign = TT_ASSIGN_TWO_LEVEL;
            else
                return cli_usage_error("build", "--assign must be two-level or exact");
            break;
        case 't':
            if ((rc_arg = cli_threads_arg("build", optarg, &o.threads)))
                return rc_arg;
            break;
        case 'm':
            if ((rc_arg = cli_memory_arg("build", optarg, &o.memory_bytes)))
                return rc_arg;
            break;
        case 's':
            if (!cli_parse_u64(optarg, &o.seed))
                return cli_usage_error("build", "--seed must be a non-negative integer");
            break;
        case 'I':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 1000)
                return cli_usage_error("build", "--kmeans-iters must be 1..1000");
            o.kmeans_iters = (int)u;
            break;
        case 'S':
            if (!cli_parse_double(optarg, &d) || d <= 0)
                return cli_usage_error("build", "--sample-factor must be > 0");
            o.sample_factor = d;
            break;
        case 'K':
            if (strcmp(optarg, "f16"))
                return cli_usage_error("build", "--keep-originals supports only f16");
            o.keep_originals = TT_KEEP_F16;
            break;
        case 'N': o.normalize = 0; break;
        case 'P':
            if ((rc_arg = cli_pool_factor_arg("build", optarg, &o.pool_factor)))
                return rc_arg;
            break;
        case 1301:
            if (!cli_parse_double(optarg, &o.pool_global) || !(o.pool_global > 1) ||
                o.pool_global > 1e6)
                return cli_usage_error("build", "--pool-global must be a number > 1 (the "
                                       "share of vectors kept is about 1/F; got '%s')", optarg);
            break;
        case 'Z':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 4096)
                return cli_usage_error("build", "--shards must be 1..4096");
            o.shards = (uint32_t)u;
            break;
        case 'B': io.bf16_from_uint16 = 1; break;
        case 'U': tune_after = false; break;
        case 'R':
            if (!cli_parse_double(optarg, &tune_target) || !(tune_target > 0 && tune_target <= 1))
                return cli_usage_error("build", "--target-recall must be in (0, 1]");
            break;
        case 'd': o.encoder = optarg; break;
        case 'E': encoder = optarg; break;
        case 'C': corpus = optarg; break;
        case 'T':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 86400)
                return cli_usage_error("build", "--encoder-timeout must be 1..86400 seconds");
            enc_timeout_ms = (uint32_t)(u * 1000);
            break;
        case 2001: bm25 = 1; break;
        case 2002: text = optarg; break;
        case 2003: sparse = optarg; break;
        case 2009: vocab = optarg; break;
        case 'h': usage(stdout); return CLI_OK;
        default: usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("build", "unexpected argument '%s'", argv[optind]);
    if (!out || !*out)
        return cli_usage_error("build", "--out is required (a directory to create)");
    if ((bm25 || sparse) && group)
        return cli_usage_error("build", "--bm25 and --sparse are not supported in a group "
                               "(MPI) build yet; --shards in one process supports them");
    if ((rc_arg = cli_sparse_load("build", bm25, text, sparse, corpus, vocab, &sp_set)))
        return rc_arg;
    o.sparse = sp_set;
    /* An interrupt stops the build at its next check; it removes what it wrote. */
    cli_signals_install(true);
    o.cancel = (const volatile int *)&cli_cancel;
    if ((encoder || corpus) && group) {
        tt_sparse_set_free(sp_set);
        return cli_usage_error("build", "--encoder is not supported in a group build (encode "
                               "to .npy first: tartan encode)");
    }
    if (encoder || corpus) {
        int r;
        if (!encoder || !corpus || vectors || doclens || ids)
            r = cli_usage_error("build", "--encoder and --corpus go together, without "
                                "--vectors/--doclens/--ids");
        else
            r = build_with_encoder(encoder, corpus, enc_timeout_ms, out, &o);
        tt_sparse_set_free(sp_set);
        return r;
    }
    if (!vectors || !doclens) {
        tt_sparse_set_free(sp_set);
        return cli_usage_error("build", "--vectors and --doclens (or --encoder and --corpus) "
                               "are required");
    }

    size_t nv = 0, nl = 0;
    char **vlist = cli_split_commas(vectors, &nv), **llist = cli_split_commas(doclens, &nl);
    int rc = CLI_FAIL;
    tt_input *in = NULL;
    if (!vlist || !llist) {
        fprintf(stderr, "tartan build: out of memory\n");
        goto done;
    }
    if (nv == 0 || nv != nl) {
        rc = cli_usage_error("build", "%zu vector files but %zu doclens files", nv, nl);
        goto done;
    }
    int st = tt_input_open(&in, nv, (const char *const *)vlist, (const char *const *)llist, ids,
                           &io);
    if (st) {
        rc = cli_fail("build", st);
        goto done;
    }
    rc = run_build(in, out, &o);
done:
    tt_sparse_set_free(sp_set);
    tt_input_free(in);
    cli_free_list(vlist);
    cli_free_list(llist);
    cli_die_if_cancelled("build", rc == CLI_OK, "nothing was published");
    return rc;
}

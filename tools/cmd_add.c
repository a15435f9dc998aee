/* tartan add: new documents into an existing index, as a new segment encoded with the
 * index's own centroids and codec (no retraining). */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan add --index DIR --vectors A.npy[,B.npy...] --doclens A.npy[,B.npy...]\n"
        "                  [--ids FILE] [--upsert] [options]\n"
        "       tartan add --index DIR --encoder CMD --corpus FILE [--upsert] [options]\n"
        "\n"
        "Adds documents to an index without rebuilding it: they become a new segment,\n"
        "encoded with the index's centroids and codec, published as the index's next\n"
        "generation (searches already running keep the generation they opened).\n"
        "\n"
        "  --index DIR          the index to add to\n"
        "  --vectors LIST       vector files, comma-separated (as tartan build)\n"
        "  --doclens LIST       one doclens file per vector file\n"
        "  --ids FILE           ids of the new documents, one per line; an id already in the\n"
        "                       index is refused unless --upsert. Without ids, new documents\n"
        "                       get numbers no document of the index ever had\n"
        "  --upsert             replace documents whose id is already in the index\n"
        "  --encoder CMD        encode --corpus with this encoder (doc/encoder-protocol.md)\n"
        "  --corpus FILE        the texts to encode (BEIR corpus.jsonl or id<TAB>text TSV)\n"
        "  --encoder-timeout S  seconds without progress before the encoder is killed (300)\n"
        "  --pool-factor F      token pooling of the new documents (as tartan build; 1: none)\n"
        "                       default: the index's own factor (tartan info shows it)\n"
        "  --bf16               read uint16 .npy data as bfloat16\n"
        "  --threads T          worker threads (default: all CPUs)\n"
        "  --memory SIZE        working-memory budget, e.g. 512M, 4G (default 2G)\n"
        "  --bm25               BM25 postings of the documents' texts (--corpus or --text):\n"
        "                       required when the index was built with --bm25\n"
        "  --text FILE          the documents' texts for --bm25, in the vectors' order\n"
        "  --sparse FILE        precomputed sparse vectors (JSON Lines, as tartan build)\n"
        "  --vocab FILE         with --sparse: the term ids' vocabulary (as tartan build)\n"
        "  --metadata FILE      metadata of the new documents (JSON Lines, as tartan build);\n"
        "                       without it, an index with metadata gets null rows for them\n");
}

static int run_add(const char *index, tt_input *in, tt_change_options *o) {
    cli_progress_state ps;
    cli_progress_init(&ps);
    o->progress = cli_progress;
    o->progress_user = &ps;
    tt_change_stats cs;
    int st = tt_index_add(index, in, o, &cs);
    cli_progress_done(&ps);
    if (st == TT_ECANCELED)
        return CLI_FAIL;
    if (st)
        return cli_fail("add", st);
    printf("added %llu documents (%llu vectors", (unsigned long long)cs.added,
           (unsigned long long)tt_input_num_vectors(in));
    /* Pooled (by the option, else the index's factor): the new segment, the last one,
     * says what was kept. */
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = TT_IO_MMAP;
    tt_index *idx;
    tt_index_info ii;
    tt_segment_info si;
    tt_tune_info ti = {0};
    if (tt_index_open(&idx, index, &oo) == TT_OK) {
        tt_index_get_info(idx, &ii);
        tt_index_tuned(idx, &ti);
        int factor = o->pool_factor ? o->pool_factor : (int)ii.pool_factor;
        bool cut = !o->pool_factor && ii.pool_global > 0;
        if ((factor > 1 || cut) &&
            tt_index_segment_info(idx, ii.num_segments - 1, &si) == TT_OK) {
            if (cut)
                printf(" pooled by the index's cut at %.4g to %llu", ii.pool_threshold,
                       (unsigned long long)si.num_vectors);
            else
                printf(" pooled by %d to %llu", factor, (unsigned long long)si.num_vectors);
        }
        tt_index_close(idx);
    }
    if (cs.replaced)
        printf(", %llu replacing documents with their ids", (unsigned long long)cs.replaced);
    printf(") to %s in %.2f s: generation %llu, %llu segments, %llu live documents\n", index,
           cs.seconds, (unsigned long long)cs.generation, (unsigned long long)cs.segments,
           (unsigned long long)cs.live_docs);
    printf("residual MSE of the added vectors %.3g (tartan info compares it with the build's)\n",
           cs.added_mse);
    fflush(stdout);
    /* The calibration is re-checked when the index has grown or drifted enough. */
    if (ti.tuned) {
        tt_tune_options to;
        tt_tune_options_init(&to);
        to.target_recall = ti.target;
        to.threads = o->threads;
        to.if_stale = 1;
        if (cli_tune_index("add", index, &to) != CLI_OK)
            fprintf(stderr, "tartan add: the documents are added, but the search calibration "
                    "was not re-checked: run 'tartan tune --index %s'\n", index);
    }
    return CLI_OK;
}

int cmd_add(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},   {"vectors", required_argument, 0, 'v'},
        {"doclens", required_argument, 0, 'l'}, {"ids", required_argument, 0, 'i'},
        {"upsert", no_argument, 0, 'u'},        {"encoder", required_argument, 0, 'E'},
        {"corpus", required_argument, 0, 'C'},  {"encoder-timeout", required_argument, 0, 'T'},
        {"bf16", no_argument, 0, 'B'},          {"threads", required_argument, 0, 't'},
        {"memory", required_argument, 0, 'm'},  {"pool-factor", required_argument, 0, 'P'},
        {"bm25", no_argument, 0, 2001}, {"text", required_argument, 0, 2002},
        {"sparse", required_argument, 0, 2003}, {"vocab", required_argument, 0, 2009},
        {"metadata", required_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *index = NULL, *vectors = NULL, *doclens = NULL, *ids = NULL;
    const char *encoder = NULL, *corpus = NULL;
    const char *text = NULL, *sparse = NULL, *vocab = NULL;
    int bm25 = 0;
    tt_sparse_set *sp_set = NULL;
    uint32_t timeout_ms = 0;
    tt_change_options o;
    tt_input_options io;
    tt_change_options_init(&o);
    tt_input_options_init(&io);
    uint64_t u;
    int c, rc_arg;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'v': vectors = optarg; break;
        case 'l': doclens = optarg; break;
        case 'i': ids = optarg; break;
        case 'u': o.upsert = 1; break;
        case 'M': o.metadata = optarg; break;
        case 'E': encoder = optarg; break;
        case 'C': corpus = optarg; break;
        case 'B': io.bf16_from_uint16 = 1; break;
        case 'T':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 86400)
                return cli_usage_error("add", "--encoder-timeout must be 1..86400 seconds");
            timeout_ms = (uint32_t)(u * 1000);
            break;
        case 't':
            if ((rc_arg = cli_threads_arg("add", optarg, &o.threads)))
                return rc_arg;
            break;
        case 'm':
            if ((rc_arg = cli_memory_arg("add", optarg, &o.memory_bytes)))
                return rc_arg;
            break;
        case 'P':
            if ((rc_arg = cli_pool_factor_arg("add", optarg, &o.pool_factor)))
                return rc_arg;
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
        return cli_usage_error("add", "unexpected argument '%s'", argv[optind]);
    if (!index || !*index)
        return cli_usage_error("add", "--index is required");
    int rc_sp = cli_sparse_load_for("add", bm25, text, sparse, corpus, vocab, index, &sp_set);
    if (rc_sp)
        return rc_sp;
    o.sparse = sp_set;
    /* An interrupt stops the add at its next check; it removes what it wrote. */
    cli_signals_install(true);
    o.cancel = (const volatile int *)&cli_cancel;
    int rc = CLI_FAIL;
    if (encoder || corpus) {
        if (!encoder || !corpus || vectors || doclens || ids) {
            tt_sparse_set_free(sp_set);
            return cli_usage_error("add", "--encoder and --corpus go together, without "
                                   "--vectors/--doclens/--ids");
        }
        cli_spool sp;
        rc = cli_spool_encode("add", encoder, corpus, timeout_ms, index, &sp);
        if (rc == CLI_OK && !o.sparse && sp.sparse) /* the encoder's, unless --bm25/--sparse */
            o.sparse = sp.sparse;
        if (rc == CLI_OK)
            rc = run_add(index, sp.in, &o);
        cli_spool_remove(&sp);
        tt_sparse_set_free(sp_set);
        cli_die_if_cancelled("add", rc == CLI_OK, "the index is as it was");
        return rc;
    }
    if (!vectors || !doclens) {
        tt_sparse_set_free(sp_set);
        return cli_usage_error("add", "--vectors and --doclens (or --encoder and --corpus) are "
                               "required");
    }
    size_t nv = 0, nl = 0;
    char **vlist = cli_split_commas(vectors, &nv), **llist = cli_split_commas(doclens, &nl);
    tt_input *in = NULL;
    if (!vlist || !llist) {
        fprintf(stderr, "tartan add: out of memory\n");
        goto done;
    }
    if (nv == 0 || nv != nl) {
        rc = cli_usage_error("add", "%zu vector files but %zu doclens files", nv, nl);
        goto done;
    }
    int st = tt_input_open(&in, nv, (const char *const *)vlist, (const char *const *)llist, ids,
                           &io);
    rc = st ? cli_fail("add", st) : run_add(index, in, &o);
done:
    tt_sparse_set_free(sp_set);
    tt_input_free(in);
    cli_free_list(vlist);
    cli_free_list(llist);
    cli_die_if_cancelled("add", rc == CLI_OK, "the index is as it was");
    return rc;
}

/* tartan tune: calibrates PLAID's parameters on an index (doc/search.md, "Calibrated
 * defaults") and stores them in it, for tartan search to use by default. */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan tune --index DIR [--queries Q.npy [--qlens L.npy]] [options]\n"
        "\n"
        "Measures recall@10 and recall@100 against exhaustive search for a grid of PLAID\n"
        "parameters (nprobe, ndocs, relative pruning) and stores, for k = 10 and k = 100,\n"
        "the cheapest set that reaches the target recall, in the index's next generation.\n"
        "tartan search then uses them unless its flags say otherwise. tartan build tunes\n"
        "every index it builds (--no-tune: not); tartan add re-checks them.\n"
        "\n"
        "  --index DIR           the index\n"
        "  --queries Q.npy       calibration queries, as tartan search reads them (default:\n"
        "                        pseudo-queries made from the index's documents)\n"
        "  --qlens L.npy         vectors per query for a 2-D --queries\n"
        "  --target-recall F     recall@k against exhaustive search to reach, with 95%%\n"
        "                        confidence on the calibration queries (default 0.95)\n"
        "  --pseudo-queries N    pseudo-queries (default 64)\n"
        "  --query-len N         vectors per pseudo-query (default: 4 for DiffRetriever-\n"
        "                        shaped indexes, dim >= 1024 and <= 16 vectors per document;\n"
        "                        else 32, ColBERT's)\n"
        "  --noise F             pseudo-queries: Gaussian noise relative to a vector's norm\n"
        "                        (default 0.5; 0.75 for pseudo-queries of at most 8\n"
        "                        vectors on an index with massive-activation dimensions;\n"
        "                        pseudo-queries of more than 8 vectors take half of them\n"
        "                        from other documents, shorter ones none)\n"
        "  --seed S              pseudo-queries' seed (default 42)\n"
        "  --cost time|work      compare sets by measured time per query (default) or by a\n"
        "                        deterministic work count (the same choice on every run)\n"
        "  --if-stale            only re-check the stored parameters on new pseudo-queries;\n"
        "                        re-tune when they miss the target\n"
        "  --threads T           threads (default: all CPUs) for the exhaustive reference\n"
        "                        and the measured searches (each thread times its own CPU)\n"
        "  --io uring|mmap       residual reads of the measured searches (default: as\n"
        "                        tartan search)\n");
}

void cli_print_tune(FILE *f, const char *cmd, const tt_tune_info *t, bool published) {
    const tt_tuned *s[4] = {&t->k10, &t->k100, &t->k10_short, &t->k100_short};
    fprintf(f, "%s: %s on %u %s (target recall %.2f):\n", cmd,
            published ? "calibrated" : "calibration still holds", t->num_queries,
            t->pseudo ? "pseudo-queries" : "queries", t->target);
    for (int i = 0; i < (t->short_len ? 4 : 2); i++) {
        if (i == 2)
            fprintf(f, "  queries of at most %u vectors (measured on pseudo-queries of %u):\n",
                    2 * t->short_len, t->short_len);
        char groups[48] = "";
        if (s[i]->centroid_groups)
            snprintf(groups, sizeof groups, " centroid-groups %u", s[i]->centroid_groups);
        char first[48];
        fprintf(f, "  k=%-3u nprobe %-2d ndocs %-5u prune-ratio %.2f rerank-margin %.0f%s%s: "
                "recall@%u %.3f%s, %.3f ms per query%s\n", s[i]->k, s[i]->nprobe, s[i]->ndocs,
                (double)s[i]->prune_ratio, (double)s[i]->rerank_margin,
                s[i]->sketch ? "" : " no-sketch", groups, s[i]->k, s[i]->recall,
                cli_first_kept(s[i], first, sizeof first), s[i]->ms,
                s[i]->reached ? "" : " (target not reached: the best the grid had)");
        if (s[i]->exhaustive)
            fprintf(f, "        exhaustive search, %.3f ms per query, %s: searches without "
                    "PLAID flags use it\n", s[i]->exhaustive_ms, cli_exhaustive_why(s[i]));
    }
    if (t->centroid_groups)
        fprintf(f, "  the centroids in %u groups (stage 1 scores the best groups' centroids)\n",
                t->centroid_groups);
}

int cmd_tune(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},          {"queries", required_argument, 0, 'q'},
        {"qlens", required_argument, 0, 'L'},          {"target-recall", required_argument, 0, 'r'},
        {"pseudo-queries", required_argument, 0, 'n'}, {"query-len", required_argument, 0, 'l'},
        {"noise", required_argument, 0, 'N'},          {"seed", required_argument, 0, 's'},
        {"cost", required_argument, 0, 'c'},           {"if-stale", no_argument, 0, 'S'},
        {"threads", required_argument, 0, 't'},        {"help", no_argument, 0, 'h'},
        {"io", required_argument, 0, 'I'},
        {0, 0, 0, 0}};
    const char *index = NULL, *queries = NULL, *qlens = NULL;
    tt_tune_options o;
    tt_tune_options_init(&o);
    int c, rc_arg;
    double d;
    uint64_t u;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'q': queries = optarg; break;
        case 'L': qlens = optarg; break;
        case 'r':
            if (!cli_parse_double(optarg, &d) || !(d > 0 && d <= 1))
                return cli_usage_error("tune", "--target-recall must be in (0, 1]");
            o.target_recall = d;
            break;
        case 'n':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 100000)
                return cli_usage_error("tune", "--pseudo-queries must be 1..100000");
            o.num_queries = (uint32_t)u;
            break;
        case 'l':
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 4096)
                return cli_usage_error("tune", "--query-len must be 1..4096");
            o.query_len = (uint32_t)u;
            break;
        case 'N':
            if (!cli_parse_double(optarg, &d) || !(d >= 0 && d <= 10))
                return cli_usage_error("tune", "--noise must be in [0, 10]");
            o.noise = (float)d;
            break;
        case 's':
            if (!cli_parse_u64(optarg, &u))
                return cli_usage_error("tune", "--seed must be a non-negative integer");
            o.seed = u;
            break;
        case 'c':
            if (!strcmp(optarg, "time"))
                o.cost = TT_TUNE_COST_TIME;
            else if (!strcmp(optarg, "work"))
                o.cost = TT_TUNE_COST_WORK;
            else
                return cli_usage_error("tune", "--cost must be time or work");
            break;
        case 'S': o.if_stale = 1; break;
        case 'I':
            if (!strcmp(optarg, "uring"))
                o.io = TT_IO_URING;
            else if (!strcmp(optarg, "mmap"))
                o.io = TT_IO_MMAP;
            else
                return cli_usage_error("tune", "--io must be uring or mmap");
            break;
        case 't':
            if ((rc_arg = cli_threads_arg("tune", optarg, &o.threads)))
                return rc_arg;
            break;
        case 'h': usage(stdout); return CLI_OK;
        default: usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("tune", "unexpected argument '%s'", argv[optind]);
    if (!index || !*index)
        return cli_usage_error("tune", "--index is required");
    if (qlens && !queries)
        return cli_usage_error("tune", "--qlens needs --queries");
    int st;
    tt_queries *qs = NULL;
    if (queries) {
        tt_index *idx = NULL;
        if ((st = tt_index_open(&idx, index, NULL)) ||
            (st = tt_queries_load(&qs, queries, qlens, NULL)) ||
            (st = tt_queries_check(qs, idx))) {
            tt_index_close(idx);
            tt_queries_free(qs);
            return cli_fail("tune", st);
        }
        tt_index_close(idx);
        o.Q = qs->vectors;
        o.qoffs = qs->offsets;
        o.qlens = qs->lens;
        o.nqueries = qs->num_queries;
    }
    int rc = cli_tune_index("tune", index, &o);
    tt_queries_free(qs);
    return rc;
}

int cli_tune_index(const char *cmd, const char *index, tt_tune_options *o) {
    /* The calibration spreads its reference scan and its measurements over o->threads
     * itself; sgemm threads on top would oversubscribe and escape its CPU clocks. */
    tt_blas_set_threads(1);
    cli_signals_install(true);
    o->cancel = (const volatile int *)&cli_cancel;
    cli_progress_state ps;
    cli_progress_init(&ps);
    o->progress = cli_progress;
    o->progress_user = &ps;
    tt_index *before = NULL;
    uint64_t gen0 = 0;
    if (tt_index_open(&before, index, NULL) == TT_OK) {
        tt_index_info in;
        tt_index_get_info(before, &in);
        gen0 = in.generation;
    }
    tt_index_close(before);
    tt_tune_info t;
    int st = tt_index_tune(index, o, &t);
    cli_progress_done(&ps);
    cli_die_if_cancelled(cmd, st == TT_OK, "the index is as it was");
    if (st)
        return cli_fail(cmd, st);
    if (t.generation > gen0 || !o->if_stale)
        cli_print_tune(stderr, cmd, &t, t.generation > gen0);
    return CLI_OK;
}

/* tartan eval: measures of a TREC run against qrels, with trec_eval's definitions
 * (doc/metrics.md). Prints an aligned table or JSON. */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "eval";

static int imax(int a, int b) { return a > b ? a : b; }

static void usage(FILE *f) {
    fprintf(f,
            "usage: tartan eval --qrels FILE --run FILE [options]\n"
            "\n"
            "Evaluates a TREC run (qid Q0 docid rank score tag) against relevance judgements\n"
            "(TREC 'qid iter docid rel' or BEIR TSV 'query-id corpus-id score', detected).\n"
            "Definitions are trec_eval 10.0's: documents ranked by score (a double), ties by\n"
            "docid in decreasing byte order; see doc/metrics.md. A run line has exactly 6\n"
            "fields.\n"
            "\n"
            "options:\n"
            "  -q, --qrels FILE         relevance judgements ('-' for stdin)\n"
            "  -r, --run FILE           run to evaluate ('-' for stdin)\n"
            "  -m, --metrics LIST       comma-separated measures (default:\n"
            "                           %s)\n"
            "                           names: MRR@k nDCG@k Recall@k (R@k) MAP@k Success@k P@k;\n"
            "                           MRR, nDCG, Recall, MAP without @k: the whole ranking\n"
            "      --per-query          also print every query's values\n"
            "      --json               print JSON: {\"MRR@10\": 0.3421, ...}\n"
            "  -c, --missing-as-zero    average over all qrels queries, those absent from the\n"
            "                           run counting 0 (trec_eval -c); default: only queries in\n"
            "                           both (trec_eval's default)\n"
            "  -l, --relevance-level N  minimum judged rel of a relevant document (default 1)\n"
            "      --docs FILE          document ids of the collection, one per line: warn about\n"
            "                           run documents not in it (they count as non-relevant)\n"
            "      --digits N           decimals printed (default 4, as trec_eval)\n"
            "  -h, --help               this help\n"
            "\n"
            "Exit status: 0 success, 1 error (file:line named), 2 usage error.\n",
            TT_METRICS_DEFAULT);
}

static void print_json(const tt_eval *ev, char (*names)[32], size_t nm, bool per_query,
                       int digits) {
    printf("{\n");
    for (size_t m = 0; m < nm; m++)
        printf("  \"%s\": %.*f%s\n", names[m], digits, tt_eval_mean(ev, m),
               (m + 1 < nm || per_query) ? "," : "");
    if (per_query) {
        size_t nq = tt_eval_num_queries(ev);
        printf("  \"per_query\": {\n");
        for (size_t i = 0; i < nq; i++) {
            printf("    ");
            cli_json_string(stdout, tt_eval_query_id(ev, i));
            printf(": {");
            for (size_t m = 0; m < nm; m++)
                printf("%s\"%s\": %.*f", m ? ", " : "", names[m], digits,
                       tt_eval_values(ev, m)[i]);
            printf("}%s\n", i + 1 < nq ? "," : "");
        }
        printf("  }\n");
    }
    printf("}\n");
}

static void print_table(const tt_eval *ev, char (*names)[32], size_t nm, bool per_query,
                        int digits) {
    size_t nq = tt_eval_num_queries(ev);
    int valw = digits + 3;
    if (per_query) {
        int qw = 5;
        for (size_t i = 0; i < nq; i++)
            qw = imax(qw, (int)strlen(tt_eval_query_id(ev, i)));
        printf("%-*s", qw, "query");
        for (size_t m = 0; m < nm; m++)
            printf("  %*s", imax(valw, (int)strlen(names[m])), names[m]);
        printf("\n");
        for (size_t i = 0; i < nq; i++) {
            printf("%-*s", qw, tt_eval_query_id(ev, i));
            for (size_t m = 0; m < nm; m++)
                printf("  %*.*f", imax(valw, (int)strlen(names[m])), digits,
                       tt_eval_values(ev, m)[i]);
            printf("\n");
        }
        printf("\n");
    }
    int mw = 6;
    for (size_t m = 0; m < nm; m++)
        mw = imax(mw, (int)strlen(names[m]));
    printf("%-*s  %*s  %7s\n", mw, "metric", valw, "value", "queries");
    for (size_t m = 0; m < nm; m++)
        printf("%-*s  %*.*f  %7zu\n", mw, names[m], valw, digits, tt_eval_mean(ev, m), nq);
}

int cmd_eval(int argc, char **argv) {
    const char *qrels_path = NULL, *run_path = NULL, *docs_path = NULL;
    const char *metrics_arg = TT_METRICS_DEFAULT;
    bool per_query = false, json = false;
    uint64_t digits = 4, level = 1;
    tt_eval_options opt;
    tt_eval_options_init(&opt);

    enum { OPT_PER_QUERY = 256, OPT_JSON, OPT_DOCS, OPT_DIGITS };
    static const struct option longopts[] = {
        {"qrels", required_argument, NULL, 'q'},
        {"run", required_argument, NULL, 'r'},
        {"metrics", required_argument, NULL, 'm'},
        {"per-query", no_argument, NULL, OPT_PER_QUERY},
        {"json", no_argument, NULL, OPT_JSON},
        {"missing-as-zero", no_argument, NULL, 'c'},
        {"relevance-level", required_argument, NULL, 'l'},
        {"docs", required_argument, NULL, OPT_DOCS},
        {"digits", required_argument, NULL, OPT_DIGITS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":q:r:m:cl:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'q': qrels_path = optarg; break;
        case 'r': run_path = optarg; break;
        case 'm': metrics_arg = optarg; break;
        case OPT_PER_QUERY: per_query = true; break;
        case OPT_JSON: json = true; break;
        case 'c': opt.missing_as_zero = 1; break;
        case 'l':
            if (!cli_parse_u64(optarg, &level) || level < 1 || level > 1000000)
                return cli_usage_error(CMD, "--relevance-level: expected an integer >= 1, got '%s'",
                                       optarg);
            opt.relevance_level = (int)level;
            break;
        case OPT_DOCS: docs_path = optarg; break;
        case OPT_DIGITS:
            if (!cli_parse_u64(optarg, &digits) || digits > 17)
                return cli_usage_error(CMD, "--digits: expected 0 to 17, got '%s'", optarg);
            break;
        case 'h': usage(stdout); return CLI_OK;
        case ':': return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (!qrels_path || !run_path)
        return cli_usage_error(CMD, "--qrels and --run are required");
    if (!strcmp(qrels_path, "-") && !strcmp(run_path, "-"))
        return cli_usage_error(CMD, "--qrels and --run cannot both read stdin");

    int rc = CLI_FAIL, st;
    size_t nm = 0;
    char **list = cli_split_commas(metrics_arg, &nm);
    tt_metric *metrics = NULL;
    char (*names)[32] = NULL;
    tt_qrels *qrels = NULL;
    tt_run *run = NULL;
    tt_eval *ev = NULL;
    if (!list) {
        fprintf(stderr, "tartan eval: error: out of memory\n");
        goto done;
    }
    if (nm == 0) {
        rc = cli_usage_error(CMD, "--metrics: empty list");
        goto done;
    }
    metrics = calloc(nm, sizeof *metrics);
    names = calloc(nm, sizeof *names);
    if (!metrics || !names) {
        fprintf(stderr, "tartan eval: error: out of memory\n");
        goto done;
    }
    for (size_t m = 0; m < nm; m++) {
        if (tt_metric_parse(list[m], &metrics[m]) != TT_OK) {
            rc = cli_usage_error(CMD, "--metrics: %s", tt_last_error());
            goto done;
        }
        tt_metric_name(&metrics[m], names[m], sizeof names[m]);
        for (size_t j = 0; j < m; j++)
            if (!strcmp(names[j], names[m])) {
                rc = cli_usage_error(CMD, "--metrics: %s is listed twice", names[m]);
                goto done;
            }
    }

    if ((st = tt_qrels_load(&qrels, qrels_path)) || (st = tt_run_load(&run, run_path))) {
        rc = cli_fail(CMD, st);
        goto done;
    }
    if (docs_path) {
        uint64_t unknown_entries, unknown_docs;
        if ((st = tt_run_count_unknown(run, docs_path, &unknown_entries, &unknown_docs))) {
            rc = cli_fail(CMD, st);
            goto done;
        }
        if (unknown_entries)
            fprintf(stderr,
                    "tartan eval: warning: %llu run lines (%llu distinct documents) name "
                    "documents not in %s; they count as non-relevant\n",
                    (unsigned long long)unknown_entries, (unsigned long long)unknown_docs,
                    docs_path);
    }
    if ((st = tt_evaluate(&ev, qrels, run, metrics, nm, &opt))) {
        rc = cli_fail(CMD, st);
        goto done;
    }
    tt_eval_counts cnt;
    tt_eval_get_counts(ev, &cnt);
    if (cnt.missing && !opt.missing_as_zero)
        fprintf(stderr,
                "tartan eval: warning: %zu of %zu judged queries have no results in the run and "
                "are skipped, as trec_eval does (--missing-as-zero counts them as 0)\n",
                cnt.missing, cnt.qrels_queries);
    else if (cnt.missing)
        fprintf(stderr, "tartan eval: note: %zu judged queries have no results and count as 0\n",
                cnt.missing);
    if (cnt.ignored)
        fprintf(stderr,
                "tartan eval: warning: %zu of %zu run queries have no judgements and are ignored\n",
                cnt.ignored, cnt.run_queries);
    if (cnt.no_relevant)
        fprintf(stderr,
                "tartan eval: note: %zu evaluated queries have no relevant judged document; they "
                "score 0 on every measure\n",
                cnt.no_relevant);

    if (json)
        print_json(ev, names, nm, per_query, (int)digits);
    else
        print_table(ev, names, nm, per_query, (int)digits);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tartan eval: error: cannot write the output\n");
        goto done;
    }
    rc = CLI_OK;
done:
    tt_eval_free(ev);
    tt_run_free(run);
    tt_qrels_free(qrels);
    free(names);
    free(metrics);
    cli_free_list(list);
    return rc;
}

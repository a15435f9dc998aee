/* Unit tests of the evaluation module: measures on hand-worked cases, qrels/run
 * readers and their errors, the paired t-test against independently computed values. */
#include "testutil.h"

#include "eval/eval.h"

#define EPS 1e-12

static tt_metric M(const char *name) {
    tt_metric m;
    ck_assert_msg(tt_metric_parse(name, &m) == TT_OK, "parse %s: %s", name, tt_last_error());
    return m;
}

static char *write_tmp(const char *dir, const char *name, const char *text) {
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    ck_assert_int_eq(tu_write_file(path, text, strlen(text)), 0);
    return path;
}

/* --------------------------------------------------------------- names */

START_TEST(metric_names) {
    char buf[32];
    static const struct { const char *in, *canon; } ok[] = {
        {"MRR@10", "MRR@10"},          {"mrr@10", "MRR@10"},       {"RR@5", "MRR@5"},
        {"recip_rank", "MRR"},         {"nDCG@10", "nDCG@10"},     {"NDCG@100", "nDCG@100"},
        {"ndcg_cut.20", "nDCG@20"},    {"R@50", "Recall@50"},      {"Recall@1000", "Recall@1000"},
        {"recall.100", "Recall@100"},  {"MAP@1000", "MAP@1000"},   {"map", "MAP"},
        {"map_cut.100", "MAP@100"},    {"Success@5", "Success@5"}, {"success.1", "Success@1"},
        {"P@10", "P@10"},              {"precision@3", "P@3"},     {"nDCG", "nDCG"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tt_metric m = M(ok[i].in);
        ck_assert_str_eq(tt_metric_name(&m, buf, sizeof buf), ok[i].canon);
        /* the canonical name parses back to the same measure */
        tt_metric again = M(buf);
        ck_assert_int_eq(again.kind, m.kind);
        ck_assert_uint_eq(again.k, m.k);
    }
    static const char *bad[] = {"foo@10", "nDCG@0", "nDCG@", "MRR@x", "R@-1", "P", "Success",
                                "P@10x", "MAP@99999999999", "", "@10"};
    tt_metric m;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(tt_metric_parse(bad[i], &m) == TT_EINVAL, "'%s' accepted", bad[i]);
    /* the default list parses */
    char list[] = TT_METRICS_DEFAULT;
    size_t n = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ","), n++)
        (void)M(tok);
    ck_assert_uint_eq(n, 8);
}
END_TEST

/* --------------------------------------------------------- hand-worked */

/* Query "a": judged d1=3, d2=2, d3=0, d4=1, d5=2 -> relevant (rel >= 1): d1 d2 d4 d5,
 * num_rel = 4; ideal gains 3, 2, 2, 1.
 * Run "a": d3 0.9, d2 0.8, dX 0.8, d1 0.5, d9 0.4, d4 0.4 (dX, d9 unjudged; d5 not
 * retrieved). Ties are broken by docid in decreasing strcmp order: "dX" > "d2"
 * ('X' = 0x58 > '2' = 0x32) and "d9" > "d4", so the ranking is
 *   1 d3 (0)   2 dX (-)   3 d2 (2)   4 d1 (3)   5 d9 (-)   6 d4 (1).
 * (Breaking ties the other way would put d2 at rank 2 and change MRR to 1/2.)
 *  MRR@10 = 1/3 (first relevant at rank 3);  MRR@2 = 0.
 *  nDCG@5: DCG = 2/log2(4) + 3/log2(5) = 1 + 1.2920296742 = 2.2920296742201796
 *          IDCG@5 = 3/log2(2) + 2/log2(3) + 2/log2(4) + 1/log2(5) = 5.692536065216308
 *          -> 0.40263770803761884
 *  nDCG@10: DCG adds 1/log2(7) -> 2.648236861328202; IDCG unchanged (4 gains)
 *          -> 0.46521213585452664
 *  nDCG@3: DCG = 2/log2(4) = 1; IDCG@3 = 3 + 2/log2(3) + 2/log2(4) = 5.2618595071
 *          -> 0.19004688335796713
 *  Recall@5 = 2/4 (d2, d1);  Recall@10 = 3/4 (+ d4)
 *  MAP (whole ranking) = (1/3 + 2/4 + 3/6) / 4 = 1/3;  MAP@4 = (1/3 + 1/2) / 4 = 0.2083333
 *  Success@1 = 0, Success@3 = 1;  P@5 = 2/5, P@10 = 3/10 (missing ranks non-relevant)
 * Query "b": judged only d1=0 (no relevant document); run "b": d1 1.0 -> all 0.
 * Query "c": judged d7=1, absent from the run: skipped, or 0 with missing_as_zero.
 * Query "z": in the run only: ignored. */
static void build_case(tt_qrels **qr, tt_run **run) {
    ck_assert_int_eq(tt_qrels_new(qr), TT_OK);
    static const struct { const char *q, *d; int rel; } j[] = {
        {"a", "d1", 3}, {"a", "d2", 2}, {"a", "d3", 0}, {"a", "d4", 1}, {"a", "d5", 2},
        {"b", "d1", 0}, {"c", "d7", 1},
    };
    for (size_t i = 0; i < sizeof j / sizeof j[0]; i++)
        ck_assert_int_eq(tt_qrels_add(*qr, j[i].q, j[i].d, j[i].rel), TT_OK);
    ck_assert_int_eq(tt_run_new(run), TT_OK);
    static const struct { const char *q, *d; double s; } r[] = {
        /* deliberately not in rank order, and "a" interleaved with "z" and "b" */
        {"a", "d4", 0.4}, {"a", "d1", 0.5}, {"z", "d1", 9.0}, {"a", "dX", 0.8},
        {"b", "d1", 1.0}, {"a", "d3", 0.9}, {"a", "d9", 0.4}, {"a", "d2", 0.8},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        ck_assert_int_eq(tt_run_add(*run, r[i].q, r[i].d, r[i].s), TT_OK);
}

START_TEST(hand_worked) {
    tt_qrels *qr;
    tt_run *run;
    build_case(&qr, &run);
    ck_assert_uint_eq(tt_qrels_num_queries(qr), 3);
    ck_assert_uint_eq(tt_qrels_num_judgements(qr), 7);
    ck_assert_uint_eq(tt_run_num_queries(run), 3);
    ck_assert_uint_eq(tt_run_num_entries(run), 8);

    const char *names[] = {"MRR@10", "MRR@2",    "nDCG@5",  "nDCG@10",   "nDCG@3", "Recall@5",
                           "R@10",   "MAP",      "MAP@4",   "Success@1", "Success@3",
                           "P@5",    "P@10",     "MRR"};
    const double want_a[] = {1.0 / 3, 0, 0.40263770803761884, 0.46521213585452664,
                             0.19004688335796713, 0.5, 0.75, 1.0 / 3, 0.20833333333333331, 0, 1,
                             0.4, 0.3, 1.0 / 3};
    enum { NM = sizeof names / sizeof names[0] };
    tt_metric ms[NM];
    for (size_t m = 0; m < NM; m++)
        ms[m] = M(names[m]);

    tt_eval *ev;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms, NM, NULL), TT_OK);
    tt_eval_counts c;
    tt_eval_get_counts(ev, &c);
    ck_assert_uint_eq(c.queries, 2);       /* a, b */
    ck_assert_uint_eq(c.qrels_queries, 3);
    ck_assert_uint_eq(c.run_queries, 3);
    ck_assert_uint_eq(c.missing, 1);       /* c */
    ck_assert_uint_eq(c.ignored, 1);       /* z */
    ck_assert_uint_eq(c.no_relevant, 1);   /* b */
    ck_assert_uint_eq(tt_eval_num_queries(ev), 2);
    ck_assert_str_eq(tt_eval_query_id(ev, 0), "a");
    ck_assert_str_eq(tt_eval_query_id(ev, 1), "b");
    ck_assert_uint_eq(tt_eval_find_query(ev, "b"), 1);
    ck_assert_uint_eq(tt_eval_find_query(ev, "c"), SIZE_MAX);
    ck_assert_uint_eq(tt_eval_find_query(ev, "z"), SIZE_MAX);
    for (size_t m = 0; m < NM; m++) {
        const double *v = tt_eval_values(ev, m);
        ck_assert_msg(fabs(v[0] - want_a[m]) < EPS, "%s(a) = %.17g, want %.17g", names[m], v[0],
                      want_a[m]);
        ck_assert_msg(v[1] == 0, "%s(b) = %g, want 0 (no relevant document)", names[m], v[1]);
        ck_assert_msg(fabs(tt_eval_mean(ev, m) - want_a[m] / 2) < EPS, "mean %s", names[m]);
    }
    ck_assert(isnan(tt_eval_mean(ev, NM)));
    ck_assert_ptr_null(tt_eval_values(ev, NM));
    tt_eval_free(ev);

    /* missing_as_zero (trec_eval -c): c joins with 0 everywhere; means over 3. */
    tt_eval_options opt;
    tt_eval_options_init(&opt);
    opt.missing_as_zero = 1;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms, NM, &opt), TT_OK);
    tt_eval_get_counts(ev, &c);
    ck_assert_uint_eq(c.queries, 3);
    ck_assert_uint_eq(c.missing, 1);
    ck_assert_uint_eq(tt_eval_num_queries(ev), 3);
    ck_assert_str_eq(tt_eval_query_id(ev, 2), "c");
    ck_assert_int_eq(tt_eval_query_in_run(ev, 0), 1);
    ck_assert_int_eq(tt_eval_query_in_run(ev, 2), 0);
    for (size_t m = 0; m < NM; m++) {
        ck_assert(tt_eval_values(ev, m)[2] == 0);
        ck_assert_msg(fabs(tt_eval_mean(ev, m) - want_a[m] / 3) < EPS, "-c mean %s", names[m]);
    }
    tt_eval_free(ev);

    /* relevance_level 2 (trec_eval -l2): relevant = d1 (3), d2 (2), d5 (2); num_rel = 3.
     * MRR@10: d2 at rank 3 -> 1/3. Recall@10: d2, d1 -> 2/3. MAP = (1/3 + 2/4) / 3
     * = 0.2777...; nDCG@10 keeps every positive gain: unchanged 0.46521213585452664. */
    opt.missing_as_zero = 0;
    opt.relevance_level = 2;
    tt_metric ms2[] = {M("MRR@10"), M("R@10"), M("MAP"), M("nDCG@10")};
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms2, 4, &opt), TT_OK);
    ck_assert(fabs(tt_eval_values(ev, 0)[0] - 1.0 / 3) < EPS);
    ck_assert(fabs(tt_eval_values(ev, 1)[0] - 2.0 / 3) < EPS);
    ck_assert(fabs(tt_eval_values(ev, 2)[0] - (1.0 / 3 + 0.5) / 3) < EPS);
    ck_assert(fabs(tt_eval_values(ev, 3)[0] - 0.46521213585452664) < EPS);
    tt_eval_free(ev);

    /* bad options and metrics */
    opt.relevance_level = 0;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms2, 4, &opt), TT_EINVAL);
    ck_assert_ptr_null(ev);
    tt_metric bad = {TT_METRIC_P, 0};
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, &bad, 1, NULL), TT_EINVAL);
    bad.kind = 99;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, &bad, 1, NULL), TT_EINVAL);
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms2, 0, NULL), TT_EINVAL);
    tt_qrels_free(qr);
    tt_run_free(run);
}
END_TEST

/* All scores equal: the ranking is docid descending. Judged: x=1 relevant, 3 docs
 * "10", "9", "x" retrieved with score 1. strcmp order descending: "x" > "9" > "10"
 * ('x' 0x78 > '9' 0x39 > '1' 0x31), so x is at rank 1: MRR = 1, Success@1 = 1.
 * If ids were compared as numbers, "10" would come first. With x at rank 3 instead
 * (ids "a", "b", "c", relevant "a" -> ranking c, b, a) MRR = 1/3. */
START_TEST(ties_by_docid) {
    tt_qrels *qr;
    tt_run *run;
    ck_assert_int_eq(tt_qrels_new(&qr), TT_OK);
    ck_assert_int_eq(tt_qrels_add(qr, "1", "x", 1), TT_OK);
    ck_assert_int_eq(tt_qrels_add(qr, "2", "a", 1), TT_OK);
    ck_assert_int_eq(tt_run_new(&run), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "1", "10", 1.0), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "1", "x", 1.0), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "1", "9", 1.0), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "2", "a", 0.5), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "2", "c", 0.5), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "2", "b", 0.5), TT_OK);
    tt_metric ms[] = {M("MRR@10"), M("Success@1")};
    tt_eval *ev;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms, 2, NULL), TT_OK);
    ck_assert_str_eq(tt_eval_query_id(ev, 0), "1");
    ck_assert(tt_eval_values(ev, 0)[0] == 1.0);
    ck_assert(tt_eval_values(ev, 1)[0] == 1.0);
    ck_assert(fabs(tt_eval_values(ev, 0)[1] - 1.0 / 3) < EPS);
    ck_assert(tt_eval_values(ev, 1)[1] == 0.0);
    tt_eval_free(ev);
    tt_qrels_free(qr);
    tt_run_free(run);
}
END_TEST

/* Scores are doubles, as in trec_eval 10.0. a = 0.30000001 and b = 0.30000002 are
 * distinct doubles that round to the same float32 (0.300000011920929). The relevant
 * document "d2" has the lower score a, the non-relevant "d1" the higher b:
 *  - trec_eval 10.0 and tartan: d1 (b) before d2 (a) -> MRR@10 = 1/2;
 *  - trec_eval 9.0.8 (2020 tag v9.0.8, float sim; also pytrec_eval): a tie, broken by
 *    docid in decreasing strcmp order, "d2" > "d1" -> d2 first -> MRR@10 = 1.
 * Read from a file too, so that strtod's result is what is compared. */
START_TEST(scores_are_doubles) {
    const double a = 0.30000001, b = 0.30000002;
    ck_assert((float)a == (float)b);
    ck_assert(a != b && a < b);
    ck_assert(strcmp("d2", "d1") > 0); /* the docid tie-break 9.0.8 would apply */
    tt_qrels *qr;
    ck_assert_int_eq(tt_qrels_new(&qr), TT_OK);
    ck_assert_int_eq(tt_qrels_add(qr, "q1", "d2", 1), TT_OK);
    char *dir = tu_tmpdir();
    char *p = write_tmp(dir, "f32.run", "q1 Q0 d2 1 0.30000001 t\nq1 Q0 d1 2 0.30000002 t\n");
    tt_run *loaded, *added;
    ck_assert_int_eq(tt_run_load(&loaded, p), TT_OK);
    ck_assert_int_eq(tt_run_new(&added), TT_OK);
    ck_assert_int_eq(tt_run_add(added, "q1", "d2", a), TT_OK);
    ck_assert_int_eq(tt_run_add(added, "q1", "d1", b), TT_OK);
    tt_run *runs[] = {loaded, added};
    tt_metric ms[] = {M("MRR@10"), M("Success@1")};
    for (size_t r = 0; r < 2; r++) {
        tt_eval *ev;
        ck_assert_int_eq(tt_evaluate(&ev, qr, runs[r], ms, 2, NULL), TT_OK);
        ck_assert_msg(tt_eval_values(ev, 0)[0] == 0.5, "run %zu: MRR@10 = %g, want 0.5 (9.0.8: 1)",
                      r, tt_eval_values(ev, 0)[0]);
        ck_assert(tt_eval_values(ev, 1)[0] == 0.0);
        tt_eval_free(ev);
    }
    tt_run_free(added);
    tt_run_free(loaded);
    tt_qrels_free(qr);
    free(p);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* A run line has exactly six fields, whatever the whitespace between them; blank and
 * '#' lines are skipped. (Other field counts: files_errors.) */
START_TEST(run_six_fields) {
    char *dir = tu_tmpdir();
    char *p = write_tmp(dir, "six.run", "# comment\n\nq1\tQ0\td1\t1\t2.5\tt\r\n"
                                        "  q1  Q0 d2   2 1.5 t  \n   \n#q1 Q0 d3 3 1 t x y\n"
                                        "q2 Q0 d1 1 -1e3 tag");
    tt_run *run;
    ck_assert_msg(tt_run_load(&run, p) == TT_OK, "%s", tt_last_error());
    ck_assert_uint_eq(tt_run_num_queries(run), 2);
    ck_assert_uint_eq(tt_run_num_entries(run), 3);
    tt_run_free(run);
    free(p);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Duplicates: caught at once when a query's additions are contiguous, and by
 * tt_evaluate / tt_run_write when they were interleaved with another query's. */
START_TEST(duplicates) {
    tt_run *run;
    ck_assert_int_eq(tt_run_new(&run), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "q1", "d1", 1), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "q1", "d1", 2), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "d1"));
    ck_assert_uint_eq(tt_run_num_entries(run), 1);
    ck_assert_int_eq(tt_run_add(run, "q2", "d1", 1), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "q1", "d1", 3), TT_OK); /* interleaved: not seen here */
    tt_qrels *qr;
    ck_assert_int_eq(tt_qrels_new(&qr), TT_OK);
    ck_assert_int_eq(tt_qrels_add(qr, "q1", "d1", 1), TT_OK);
    ck_assert_int_eq(tt_qrels_add(qr, "q1", "d1", 0), TT_EINVAL);
    tt_metric m = M("MRR@10");
    tt_eval *ev = (tt_eval *)1;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, &m, 1, NULL), TT_EINVAL);
    ck_assert_ptr_null(ev);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "'d1'"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "'q1'"));
    char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/run.txt", dir);
    ck_assert_int_eq(tt_run_write(run, path, NULL), TT_EINVAL);
    tu_rmrf(dir);
    free(dir);
    /* bad ids and scores */
    ck_assert_int_eq(tt_run_add(run, "q 1", "d", 1), TT_EINVAL);
    ck_assert_int_eq(tt_run_add(run, "q", "", 1), TT_EINVAL);
    ck_assert_int_eq(tt_run_add(run, "q", "d", NAN), TT_EINVAL);
    ck_assert_int_eq(tt_qrels_add(qr, "q", "d\t", 1), TT_EINVAL);
    tt_qrels_free(qr);
    tt_run_free(run);
}
END_TEST

START_TEST(no_common_query) {
    tt_qrels *qr;
    tt_run *run;
    ck_assert_int_eq(tt_qrels_new(&qr), TT_OK);
    ck_assert_int_eq(tt_qrels_add(qr, "1", "d", 1), TT_OK);
    ck_assert_int_eq(tt_run_new(&run), TT_OK);
    ck_assert_int_eq(tt_run_add(run, "01", "d", 1), TT_OK); /* ids are strings: "01" != "1" */
    tt_metric m = M("nDCG@10");
    tt_eval *ev;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, &m, 1, NULL), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "no query in common"));
    tt_eval_options opt;
    tt_eval_options_init(&opt);
    opt.missing_as_zero = 1;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, &m, 1, &opt), TT_EINVAL);
    tt_qrels_free(qr);
    tt_run_free(run);
}
END_TEST

/* ----------------------------------------------------------------- files */

/* The hand-worked case as files in every accepted qrels format, with comments,
 * blank lines, CRLF endings, tabs and spaces, no final newline. (A run line has
 * exactly six fields: more or fewer are errors, see files_errors.) */
START_TEST(files_all_formats) {
    char *dir = tu_tmpdir();
    const char *qrels_texts[] = {
        /* TREC */
        "# judgements\na 0 d1 3\na 0 d2 2\na 0 d3 0\n\na 0 d4 1\na 0 d5 2\nb 0 d1 0\nc Q0 d7 1\n",
        /* BEIR TSV with header, CRLF, no final newline */
        "query-id\tcorpus-id\tscore\r\na\td1\t3\r\na\td2\t2\r\na\td3\t0\r\na\td4\t1\r\n"
        "a\td5\t2\r\nb\td1\t0\r\nc\td7\t1",
        /* TSV without header */
        "a\td1\t3\na\td2\t2\na\td3\t0\na\td4\t1\na\td5\t2\nb\td1\t0\nc\td7\t1\n",
        /* three whitespace-separated columns with a header */
        "qid docid rel\na d1 3\na  d2 2\na d3 0\na d4 1\na d5 2\nb d1 0\nc d7 1\n",
    };
    char *runp = write_tmp(dir, "run.txt",
                           "a Q0 d4 6 0.4 tag\n"
                           "a  Q0 d1   4 0.5 tag  \n"
                           "# comment\n"
                           "z Q0 d1 1 9 tag\n"
                           "a\tQ0\tdX\t2\t0.8\ttag\n"
                           "b Q0 d1 1 1e0 tag\r\n"
                           "\n"
                           "a Q0 d3 1 .9 tag\n"
                           "a Q0 d9 5 4e-1 tag\n"
                           "a Q0 d2 3 0.80 tag");
    tt_run *run;
    ck_assert_int_eq(tt_run_load(&run, runp), TT_OK);
    ck_assert_uint_eq(tt_run_num_entries(run), 8);
    ck_assert_uint_eq(tt_run_num_queries(run), 3);
    tt_metric ms[] = {M("MRR@10"), M("nDCG@5"), M("MAP@4"), M("P@10")};
    const double want[] = {1.0 / 3, 0.40263770803761884, 0.20833333333333331, 0.3};
    for (size_t f = 0; f < sizeof qrels_texts / sizeof qrels_texts[0]; f++) {
        char name[32];
        snprintf(name, sizeof name, "qrels%zu", f);
        char *qp = write_tmp(dir, name, qrels_texts[f]);
        tt_qrels *qr;
        ck_assert_msg(tt_qrels_load(&qr, qp) == TT_OK, "format %zu: %s", f, tt_last_error());
        ck_assert_uint_eq(tt_qrels_num_judgements(qr), 7);
        ck_assert_uint_eq(tt_qrels_num_queries(qr), 3);
        tt_eval *ev;
        ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms, 4, NULL), TT_OK);
        ck_assert_uint_eq(tt_eval_num_queries(ev), 2);
        for (size_t m = 0; m < 4; m++)
            ck_assert_msg(fabs(tt_eval_values(ev, m)[0] - want[m]) < EPS, "format %zu metric %zu",
                          f, m);
        tt_eval_free(ev);
        tt_qrels_free(qr);
        free(qp);
    }

    /* tt_run_write: ranked order, ranks from 1, exact scores; reloads identically. */
    char out[4200];
    snprintf(out, sizeof out, "%s/written.txt", dir);
    ck_assert_int_eq(tt_run_write(run, out, "mytag"), TT_OK);
    FILE *f = fopen(out, "r");
    char line[256];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "a Q0 d3 1 0.9 mytag\n"); /* queries in first-seen order */
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "a Q0 dX 2 0.8 mytag\n");
    fclose(f);
    tt_run *back;
    ck_assert_int_eq(tt_run_load(&back, out), TT_OK);
    ck_assert_uint_eq(tt_run_num_entries(back), 8);
    char *qp = write_tmp(dir, "q", qrels_texts[0]);
    tt_qrels *qr;
    ck_assert_int_eq(tt_qrels_load(&qr, qp), TT_OK);
    tt_eval *e1, *e2;
    ck_assert_int_eq(tt_evaluate(&e1, qr, run, ms, 4, NULL), TT_OK);
    ck_assert_int_eq(tt_evaluate(&e2, qr, back, ms, 4, NULL), TT_OK);
    for (size_t m = 0; m < 4; m++)
        ck_assert(tt_eval_mean(e1, m) == tt_eval_mean(e2, m));
    tt_eval_free(e1);
    tt_eval_free(e2);

    /* unknown documents against an id list */
    char *ids = write_tmp(dir, "ids.txt", "d1\nd2\nd3\n\nd4\nd5\nd7\n");
    uint64_t ue = 0, ud = 0;
    ck_assert_int_eq(tt_run_count_unknown(run, ids, &ue, &ud), TT_OK);
    ck_assert_uint_eq(ud, 2); /* dX, d9 */
    ck_assert_uint_eq(ue, 2);
    free(ids);

    tt_qrels_free(qr);
    tt_run_free(back);
    tt_run_free(run);
    free(qp);
    free(runp);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Each bad file gives its status and a message naming file:line and the problem. */
START_TEST(files_errors) {
    char *dir = tu_tmpdir();
    static const struct {
        int is_run;
        const char *text, *msg;
        int status;
    } cases[] = {
        {0, "q 0 d 1\nq 0 d2 1 extra\n", ":2: expected 4 fields", TT_EPARSE},
        {0, "q 0 d 1\nq 0 d2 x\n", ":2: relevance 'x' is not an integer", TT_EPARSE},
        {0, "q 0 d 1\nq 0 d2 1.5\n", ":2: relevance '1.5'", TT_EPARSE},
        {0, "q 0 d 1\n# c\nq 0 d 2\n", ":3: document 'd' is judged twice for query 'q'", TT_EPARSE},
        {0, "query-id\tcorpus-id\tscore\nq\td\t1\nq\td 2\n", ":3: expected 3 tab-separated",
         TT_EPARSE},
        {0, "one two\n", ":1: expected 4 fields", TT_EPARSE},
        {0, "# nothing\n\n", "no judgements", TT_EFORMAT},
        {0, "", "no judgements", TT_EFORMAT},
        {1, "q Q0 d 1 0.5 t\nq Q0 d2 2 0.4\n",
         ":2: expected 6 fields (qid Q0 docid rank score tag), got 5", TT_EPARSE},
        /* an id with a space: 7 fields, which would put the rank (1) in the score */
        {1, "q Q0 d 1 0.5 t\n\nq Q0 has space 1 0.5 tag\n",
         ":3: expected 6 fields (qid Q0 docid rank score tag), got 7", TT_EPARSE},
        {1, "q Q0 d 1 0.5 t extra\n", ":1: expected 6 fields", TT_EPARSE},
        {1, "q Q0 d 1 0.5 t\nq Q0 d2 2 abc t\n", ":2: score 'abc' is not a number", TT_EPARSE},
        {1, "q Q0 d 1 0.5 t\nq Q0 d2 2 nan t\n", ":2: score 'nan'", TT_EPARSE},
        {1, "q Q0 d 1 0.5 t\nq Q0 d 2 0.4 t\n", ":2: document 'd' appears twice for query 'q'",
         TT_EPARSE},
        /* interleaved duplicate: found after reading, named without a line */
        {1, "q Q0 d 1 0.5 t\nr Q0 d 1 0.5 t\nq Q0 d 2 0.4 t\n",
         "document 'd' appears twice for query 'q'", TT_EPARSE},
        {1, "# only a comment\n", "no results", TT_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "bad%zu.txt", i);
        char *p = write_tmp(dir, name, cases[i].text);
        int st;
        if (cases[i].is_run) {
            tt_run *run = (tt_run *)1;
            st = tt_run_load(&run, p);
            ck_assert_ptr_null(run);
        } else {
            tt_qrels *qr = (tt_qrels *)1;
            st = tt_qrels_load(&qr, p);
            ck_assert_ptr_null(qr);
        }
        ck_assert_msg(st == cases[i].status, "case %zu: status %d (%s)", i, st, tt_last_error());
        ck_assert_msg(strstr(tt_last_error(), name) && strstr(tt_last_error(), cases[i].msg),
                      "case %zu: message '%s' lacks '%s'", i, tt_last_error(), cases[i].msg);
        free(p);
    }
    /* a NUL byte inside a line */
    char path[4200];
    snprintf(path, sizeof path, "%s/nul.txt", dir);
    ck_assert_int_eq(tu_write_file(path, "q 0 d 1\nq 0 d\0 1\n", 17), 0);
    tt_qrels *qr;
    ck_assert_int_eq(tt_qrels_load(&qr, path), TT_EPARSE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), ":2: NUL byte"));
    snprintf(path, sizeof path, "%s/absent.txt", dir);
    ck_assert_int_eq(tt_qrels_load(&qr, path), TT_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "absent.txt"));
    tt_run *run;
    ck_assert_int_eq(tt_run_load(&run, path), TT_ENOTFOUND);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Many queries, non-contiguous lines, long ids and a line longer than the reader's
 * first buffer: the hash tables and the reader grow; values match a direct count. */
START_TEST(files_large) {
    char *dir = tu_tmpdir();
    char qp[4200], rp[4200];
    snprintf(qp, sizeof qp, "%s/qrels", dir);
    snprintf(rp, sizeof rp, "%s/run", dir);
    FILE *fq = fopen(qp, "w"), *fr = fopen(rp, "w");
    enum { NQ = 3000, ND = 40 };
    /* query q has relevant docs q-0 .. q-(q%5) (rel 1); the run ranks doc q-i with
     * score ND - i, written in two interleaved halves (lines of a query are not
     * contiguous). Success@1 = 1 for every query; Recall@10 = 1 (at most 5 relevant,
     * ranked 1..5); MRR@10 = 1. P@10 = (q%5 + 1)/10 -> mean over q of (q%5+1)/10 = 0.3. */
    for (int q = 0; q < NQ; q++)
        for (int i = 0; i <= q % 5; i++)
            fprintf(fq, "query%d 0 document-with-a-long-name-%d-%d 1\n", q, q, i);
    for (int half = 0; half < 2; half++)
        for (int q = 0; q < NQ; q++)
            for (int i = half; i < ND; i += 2)
                fprintf(fr, "query%d Q0 document-with-a-long-name-%d-%d 0 %d run\n", q, q, i,
                        ND - i);
    /* one huge id (3 MB) in a query of its own, not judged */
    fprintf(fr, "huge Q0 ");
    for (int i = 0; i < 3 << 20; i++)
        fputc('x', fr);
    fprintf(fr, " 1 1 run\n");
    fclose(fq);
    fclose(fr);
    tt_qrels *qr;
    tt_run *run;
    ck_assert_int_eq(tt_qrels_load(&qr, qp), TT_OK);
    ck_assert_int_eq(tt_run_load(&run, rp), TT_OK);
    ck_assert_uint_eq(tt_run_num_entries(run), (uint64_t)NQ * ND + 1);
    tt_metric ms[] = {M("Success@1"), M("Recall@10"), M("MRR@10"), M("P@10")};
    tt_eval *ev;
    ck_assert_int_eq(tt_evaluate(&ev, qr, run, ms, 4, NULL), TT_OK);
    tt_eval_counts c;
    tt_eval_get_counts(ev, &c);
    ck_assert_uint_eq(c.queries, NQ);
    ck_assert_uint_eq(c.ignored, 1);
    ck_assert(tt_eval_mean(ev, 0) == 1.0);
    ck_assert(tt_eval_mean(ev, 1) == 1.0);
    ck_assert(tt_eval_mean(ev, 2) == 1.0);
    ck_assert(fabs(tt_eval_mean(ev, 3) - 0.3) < 1e-12);
    tt_eval_free(ev);
    tt_qrels_free(qr);
    tt_run_free(run);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------ statistics */

/* Closed forms: I_x(1,1) = x; I_x(a,1) = x^a; I_x(1,b) = 1 - (1-x)^b; I_{1/2}(a,a) = 1/2;
 * I_x(a,b) + I_{1-x}(b,a) = 1. */
START_TEST(incbeta_closed_forms) {
    const double xs[] = {1e-6, 0.01, 0.2, 0.5, 0.73, 0.99, 1 - 1e-9};
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        double x = xs[i];
        ck_assert(fabs(tt_incbeta(1, 1, x) - x) < 1e-14);
        ck_assert(fabs(tt_incbeta(3.5, 1, x) - pow(x, 3.5)) < 1e-14);
        ck_assert(fabs(tt_incbeta(1, 7, x) - (1 - pow(1 - x, 7))) < 1e-13);
        ck_assert(fabs(tt_incbeta(2.5, 40, x) + tt_incbeta(40, 2.5, 1 - x) - 1) < 1e-13);
    }
    /* log B(a,b) comes from lgamma values of size ~ (a+b) log(a+b), whose rounding
     * bounds the accuracy: ~1e-14 for small a, ~1e-12 at a = b = 400 (eval.h). */
    const double as[] = {0.5, 1, 3, 17.5, 400}, tol[] = {1e-14, 1e-14, 1e-14, 1e-13, 2e-12};
    for (size_t i = 0; i < sizeof as / sizeof as[0]; i++)
        ck_assert_msg(fabs(tt_incbeta(as[i], as[i], 0.5) - 0.5) < tol[i], "a = %g", as[i]);
    ck_assert(tt_incbeta(2, 3, 0) == 0);
    ck_assert(tt_incbeta(2, 3, 1) == 1);
    ck_assert(isnan(tt_incbeta(-1, 3, 0.5)));
    ck_assert(isnan(tt_incbeta(2, 3, 1.5)));
}
END_TEST

/* Reference p-values computed independently (no incomplete beta) by integrating the
 * Student t density numerically with numpy (/usr/bin/python3, numpy 1.24):
 *
 *   import math, numpy as np
 *   def dens(u, nu):
 *       c = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi)
 *       return np.exp(c - (nu + 1) / 2 * np.log1p(u * u / nu))
 *   def p2(t, nu, n=2_000_000):
 *       # P(|T| >= |t|) = 2 * int_{|t|}^inf f(u) du with u = |t| + tan(phi), phi in [0, pi/2]
 *       phi = np.linspace(0.0, math.pi / 2, n + 1)
 *       tan = np.tan(phi)
 *       g = dens(abs(t) + tan, nu) * (1.0 + tan * tan)
 *       g[-1] = 1 / math.pi if nu == 1 else 0.0   # limit at phi = pi/2
 *       h = phi[1] - phi[0]
 *       s = g[0] + g[-1] + 4 * g[1:-1:2].sum() + 2 * g[2:-1:2].sum()   # Simpson
 *       return 2 * s * h / 3
 *   def ttest_rel(a, b):
 *       d = np.asarray(a, float) - np.asarray(b, float)
 *       t = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
 *       return t, p2(t, len(d) - 1)
 *
 * (values agree with n = 1,000,000 to ~1e-16; df=1 and df=2 also match the closed
 * forms 1 - 2 atan(|t|)/pi and 1 - |t|/sqrt(2 + t^2)). */
START_TEST(student_t_tail) {
    static const struct { double t, df, p; } c[] = {
        {2.0, 1, 0.29516723530086647},    {1.5, 2, 0.27239312489100104},
        {0.5, 30, 0.62072300488512366},   {10.0, 5, 0.00017094757574296347},
        {3.0, 1000, 0.002766709044238402}, {0.0, 7, 1.0},
        {-2.2, 12, 0.048136813445022381},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        double p = tt_student_t_p2(c[i].t, c[i].df);
        ck_assert_msg(fabs(p - c[i].p) <= 1e-10 * c[i].p, "t=%g df=%g: p=%.17g want %.17g",
                      c[i].t, c[i].df, p, c[i].p);
    }
    ck_assert(fabs(tt_student_t_p2(2.0, 1) - (1 - 2 * atan(2.0) / M_PI)) < 1e-14);
    ck_assert(fabs(tt_student_t_p2(1.5, 2) - (1 - 1.5 / sqrt(2 + 2.25))) < 1e-14);
    ck_assert(tt_student_t_p2(INFINITY, 3) == 0);
    ck_assert(tt_student_t_p2(1e300, 3) == 0);
    ck_assert(isnan(tt_student_t_p2(NAN, 3)));
    ck_assert(isnan(tt_student_t_p2(1, 0)));
}
END_TEST

START_TEST(ttest_paired) {
    /* Cases and expected (t, p) from the script above (ttest_rel). */
    static const double a1[] = {0.9, 0.8, 0.75, 0.6, 0.95, 0.4, 0.7, 0.85},
                        b1[] = {0.85, 0.7, 0.8, 0.5, 0.9, 0.3, 0.72, 0.8};
    static const double a2[] = {1, 2, 3, 4, 5}, b2[] = {1.1, 2.3, 2.9, 4.4, 5.2};
    static const double a3[] = {0.3, 0.7}, b3[] = {0.1, 0.2};
    double a4[40], b4[40];
    for (int i = 0; i < 40; i++) {
        a4[i] = 0.5 + 0.01 * i;
        b4[i] = 0.5 + 0.01 * i - 0.05 - 0.01 * sin(i);
    }
    static const struct { double t, p; } want[] = {
        {2.3776551154182801, 0.049050928974605675},
        {-2.0924574973887471, 0.10453999977837551},
        {2.3333333333333339, 0.25776211681831313},
        {44.58234943756424, 4.4820650671963551e-35},
    };
    const double *as[] = {a1, a2, a3, a4}, *bs[] = {b1, b2, b3, b4};
    const size_t ns[] = {8, 5, 2, 40};
    for (size_t i = 0; i < 4; i++) {
        double t, p;
        ck_assert_int_eq(tt_ttest_paired(as[i], bs[i], ns[i], &t, &p), TT_OK);
        ck_assert_msg(fabs(t - want[i].t) <= 1e-12 * fabs(want[i].t), "case %zu t=%.17g", i, t);
        ck_assert_msg(fabs(p - want[i].p) <= 1e-9 * want[i].p, "case %zu p=%.17g want %.17g", i,
                      p, want[i].p);
        /* swapping the samples flips t and keeps p */
        double t2, p2;
        ck_assert_int_eq(tt_ttest_paired(bs[i], as[i], ns[i], &t2, &p2), TT_OK);
        ck_assert(fabs(t2 + t) <= 1e-12 * fabs(t));
        ck_assert(fabs(p2 - p) <= 1e-12 * p);
    }
    /* degenerate cases */
    double t, p;
    ck_assert_int_eq(tt_ttest_paired(a1, a1, 8, &t, &p), TT_OK);
    ck_assert(t == 0 && p == 1);
    static const double c1[] = {1, 2, 3}, c2[] = {0.5, 1.5, 2.5};
    ck_assert_int_eq(tt_ttest_paired(c1, c2, 3, &t, &p), TT_OK);
    ck_assert(isinf(t) && t > 0 && p == 0);
    ck_assert_int_eq(tt_ttest_paired(a1, b1, 1, &t, &p), TT_EINVAL);
    ck_assert_int_eq(tt_ttest_paired(a1, b1, 8, NULL, NULL), TT_EINVAL);
    ck_assert_int_eq(tt_ttest_paired(a1, b1, 8, NULL, &p), TT_OK);
    static const double bad[] = {0.1, NAN};
    ck_assert_int_eq(tt_ttest_paired(a1, bad, 2, &t, &p), TT_EVALUE);
}
END_TEST

START_TEST(free_null) {
    tt_qrels_free(NULL);
    tt_run_free(NULL);
    tt_eval_free(NULL);
    ck_assert_uint_eq(tt_eval_num_queries(NULL), 0);
    ck_assert_ptr_null(tt_eval_query_id(NULL, 0));
}
END_TEST

int main(void) {
    Suite *s = suite_create("eval");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, metric_names);
    tcase_add_test(tc, hand_worked);
    tcase_add_test(tc, ties_by_docid);
    tcase_add_test(tc, scores_are_doubles);
    tcase_add_test(tc, run_six_fields);
    tcase_add_test(tc, duplicates);
    tcase_add_test(tc, no_common_query);
    tcase_add_test(tc, files_all_formats);
    tcase_add_test(tc, files_errors);
    tcase_add_test(tc, files_large);
    tcase_add_test(tc, incbeta_closed_forms);
    tcase_add_test(tc, student_t_tail);
    tcase_add_test(tc, ttest_paired);
    tcase_add_test(tc, free_null);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

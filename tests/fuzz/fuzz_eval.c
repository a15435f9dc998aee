/* Fuzz target: the qrels and run parsers of src/eval.c and what is computed from
 * them. The input is a qrels file and a run file separated by the line "--RUN--"
 * (without it, the whole input serves as both). When both load, every measure is
 * evaluated (means must be in [0, 1]), and the run is written and read back: the
 * round trip keeps its queries and entries and every mean. Seeds: tests/fuzz/corpus/eval. */
#include "fuzz.h"
#include "common/common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static const char *const names[] = {"MRR@10", "nDCG@10", "nDCG", "Recall@100", "MAP", "MAP@5",
                                    "Success@1", "P@5", "R@1"};
#define NM (sizeof names / sizeof names[0])
static tt_metric metrics[NM];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < NM; i++)
        if (tt_metric_parse(names[i], &metrics[i]))
            abort();
    fz_dir();
    return 0;
}

static void evaluate(const tt_qrels *q, const tt_run *r, double *means, int *ok) {
    tt_eval *ev = NULL;
    *ok = 0;
    for (int zero = 0; zero < 2; zero++) {
        tt_eval_options o;
        tt_eval_options_init(&o);
        o.missing_as_zero = zero;
        if (tt_evaluate(&ev, q, r, metrics, NM, &o) != TT_OK)
            continue;
        size_t nq = tt_eval_num_queries(ev);
        for (size_t m = 0; m < NM; m++) {
            double v = tt_eval_mean(ev, m);
            if (!(v >= 0 && v <= 1 + 1e-9))
                abort();
            const double *per = tt_eval_values(ev, m);
            for (size_t i = 0; i < nq; i++)
                if (!(per[i] >= 0 && per[i] <= 1 + 1e-9))
                    abort();
            if (!zero)
                means[m] = v;
        }
        for (size_t i = 0; i < nq; i++) {
            const char *id = tt_eval_query_id(ev, i);
            if (!id || tt_eval_find_query(ev, id) != i)
                abort();
        }
        if (!zero)
            *ok = 1;
        tt_eval_free(ev);
        ev = NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char sep[] = "\n--RUN--\n";
    const uint8_t *run = data;
    size_t qn = size, rn = size;
    for (size_t i = 0; i + sizeof sep - 1 <= size; i++)
        if (!memcmp(data + i, sep, sizeof sep - 1)) {
            qn = i + 1;
            run = data + i + sizeof sep - 1;
            rn = size - (i + sizeof sep - 1);
            break;
        }
    const char *qp = fz_write("qrels.txt", data, qn);
    const char *rp = fz_write("run.txt", run, rn);
    int fds = fz_count_fds();
    tt_qrels *q = NULL;
    tt_run *r = NULL;
    int qs = tt_qrels_load(&q, qp), rs = tt_run_load(&r, rp);
    if ((qs == TT_OK) != (q != NULL) || (rs == TT_OK) != (r != NULL))
        abort(); /* a handle exactly when it succeeded */
    if (qs && !*tt_last_error())
        abort();
    if (r) {
        uint64_t e = 0, d = 0;
        (void)tt_run_count_unknown(r, qp, &e, &d);
        if (e < d)
            abort();
    }
    if (q && r) {
        double m1[NM], m2[NM];
        int ok1, ok2;
        evaluate(q, r, m1, &ok1);
        char out[600];
        snprintf(out, sizeof out, "%s/written.run", fz_dir());
        if (tt_run_write(r, out, "fuzz") == TT_OK) {
            tt_run *r2 = NULL;
            if (tt_run_load(&r2, out) != TT_OK)
                abort(); /* what tartan writes, tartan reads */
            if (tt_run_num_queries(r2) != tt_run_num_queries(r) ||
                tt_run_num_entries(r2) != tt_run_num_entries(r))
                abort();
            evaluate(q, r2, m2, &ok2);
            if (ok1 != ok2)
                abort();
            for (size_t m = 0; ok1 && m < NM; m++)
                if (fabs(m1[m] - m2[m]) > 1e-12)
                    abort();
            tt_run_free(r2);
        }
    }
    tt_qrels_free(q);
    tt_run_free(r);
    if (fz_count_fds() != fds)
        abort(); /* a descriptor leaked */
    return 0;
}

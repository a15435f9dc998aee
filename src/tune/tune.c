/* tt_index_tune: calibrates PLAID's parameters on the index and publishes them as the
 * next generation's tune.tt (doc/search.md, "Calibrated defaults"; doc/format.md,
 * "tune.tt"). A change like any other: it holds the writer's lock while it measures,
 * so the generation it measures is the one it publishes on. */
#include "store/store.h"
#include "tune/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

void tt_tune_options_init(tt_tune_options *opt) {
    if (!opt)
        return;
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->target_recall = 0.95;
    opt->num_queries = 64;
    opt->noise = NAN;
    opt->seed = 42;
    opt->cost = TT_TUNE_COST_TIME;
    opt->io = TT_IO_AUTO;
}

static int check_options(const tt_tune_options *in, tt_tune_options *o) {
    tt_tune_options_init(o);
    if (!in)
        return TT_OK;
    if (in->struct_size < sizeof(uint32_t) || in->struct_size > sizeof *o)
        return tt_err(TT_EINVAL, "tune options: struct_size %u is not a size this library knows "
                      "(initialise them with tt_tune_options_init)", in->struct_size);
    memcpy(o, in, in->struct_size);
    o->struct_size = sizeof *o;
    if (!(o->target_recall > 0 && o->target_recall <= 1))
        return tt_err(TT_EINVAL, "tune options: target recall %g is not in (0, 1]",
                      o->target_recall);
    if (!o->Q && o->num_queries == 0)
        return tt_err(TT_EINVAL, "tune options: zero pseudo-queries");
    if (!o->Q && o->num_queries > 100000)
        return tt_err(TT_EINVAL, "tune options: %u pseudo-queries (at most 100000)",
                      o->num_queries);
    if (o->Q && (!o->qoffs || !o->qlens || o->nqueries == 0))
        return tt_err(TT_EINVAL, "tune options: queries without offsets, lengths or count");
    /* NaN stays: the default depends on the query length (calibrate.c). */
    if (!isnan(o->noise) && !(o->noise >= 0 && o->noise <= 10))
        return tt_err(TT_EINVAL, "tune options: noise %g is not in [0, 10]", (double)o->noise);
    if (o->cost != TT_TUNE_COST_TIME && o->cost != TT_TUNE_COST_WORK)
        return tt_err(TT_EINVAL, "tune options: unknown cost %d", o->cost);
    if (o->io != TT_IO_AUTO && o->io != TT_IO_URING && o->io != TT_IO_MMAP)
        return tt_err(TT_EINVAL, "tune options: unknown io %d", o->io);
    if (o->threads < 0)
        return tt_err(TT_EINVAL, "tune options: threads %d", o->threads);
    return TT_OK;
}

static int progress(tt_store *s, const char *phase, uint64_t done, uint64_t total) {
    return tt_store_progress(s, phase, done, total);
}

/* Writes t (and the centroids' groups, when it has them) as g<gen>.tune.tt and makes
 * it the next generation's only TUNE file. */
static int write_tune(tt_store *s, tt_manifest *next, const tt_tune_info *t,
                      const uint32_t *group_of, uint32_t K) {
    char *text;
    size_t n;
    int st = tt_tune_format(t, group_of, K, &text, &n);
    if (st)
        return st;
    uint32_t m = 0;
    for (uint32_t i = 0; i < next->n; i++)
        if (memcmp(next->e[i].kind, "TUNE", 4))
            next->e[m++] = next->e[i];
    next->n = m;
    st = tt_store_write_file(s, next, TT_F_TUNE, "TUNE", text, n, 0);
    free(text);
    return st;
}

/* With if_stale: the stored sets measured again on these queries (the short-query sets
 * on the short pseudo-queries cs, when both exist); *good when all still reach the
 * target (t receives the new figures). */
static int still_good(tt_calib *c, tt_calib *cs, const tt_tune_info *old, double target,
                      tt_tune_info *t, bool *good) {
    *t = *old;
    double cost;
    int st;
    const tt_tuned *sets[4] = {&old->k10, &old->k100, &old->k10_short, &old->k100_short};
    tt_tuned *outs[4] = {&t->k10, &t->k100, &t->k10_short, &t->k100_short};
    /* short sets wanted but not stored, or stored but no longer wanted: re-tune; also
     * where exhaustive search was chosen, as the index grew it may no longer be the
     * cheaper (a small index's calibration is quick) */
    *good = !cs == !old->short_len;
    for (int i = 0; i < 4; i++)
        *good = *good && !sets[i]->exhaustive;
    if (!*good)
        return TT_OK;
    for (int i = 0; i < (cs && old->short_len ? 4 : 2); i++) {
        tt_calib *ci = i < 2 ? c : cs;
        /* with the set's centroid groups, on the index's stored groups */
        ci->cgroups = sets[i]->centroid_groups;
        st = tt_calib_measure(ci, sets[i]->k, sets[i]->nprobe, sets[i]->ndocs,
                              sets[i]->prune_ratio, sets[i]->rerank_margin, sets[i]->sketch,
                              outs[i], &cost);
        ci->cgroups = 0;
        if (st)
            return st;
        outs[i]->reached = tt_calib_set_reaches(i < 2 ? c : cs, outs[i], target);
        *good = *good && outs[i]->reached;
    }
    return TT_OK;
}

int tt_index_tune(const char *dir, const tt_tune_options *opt, tt_tune_info *out) {
    tt_tune_options o;
    tt_store s;
    tt_index *idx = NULL;
    tt_calib c, cs;
    tt_manifest next;
    uint32_t *group_of = NULL;
    int st;
    memset(&next, 0, sizeof next);
    memset(&c, 0, sizeof c);
    memset(&cs, 0, sizeof cs);
    tt_err_clear();
    if (out)
        memset(out, 0, sizeof *out);
    if ((st = check_options(opt, &o)))
        return st;
    tt_change_options co;
    tt_change_options_init(&co);
    co.threads = o.threads;
    co.progress = o.progress;
    co.progress_user = o.progress_user;
    co.cancel = o.cancel;
    if ((st = tt_store_open(&s, dir, &co)))
        goto done;
    /* We hold the lock: the current generation is the one we publish on. */
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = o.io;
    if ((st = tt_index_open(&idx, dir, &oo)))
        goto done;
    if (idx->man.generation != s.man.generation) {
        st = tt_err(TT_EBUSY, "%s: the index changed while it was opened", dir);
        goto done;
    }
    /* A re-check is due when the index has changed enough since it was measured:
     * a quarter more or fewer live documents, or added vectors that compress worse
     * than the build's (drift, doc/format.md). */
    if (o.if_stale && idx->tuned.tuned) {
        double was = (double)idx->tuned.live_docs, now = (double)idx->num_live;
        if (fabs(now - was) <= 0.25 * was && !idx->info.retrain_advised) {
            if (out)
                *out = idx->tuned;
            goto done;
        }
    }
    if (idx->num_live == 0) {
        st = tt_err(TT_EINVAL, "%s: the index has no live documents to calibrate on", dir);
        goto done;
    }
    tt_tune_info t;
    memset(&t, 0, sizeof t);
    t.tuned = 1;
    t.target = o.target_recall;
    t.seed = o.seed;
    t.cost = o.cost;
    t.live_docs = idx->num_live;
    t.generation = s.gen;
    if (o.Q) {
        t.pseudo = 0;
        t.num_queries = (uint32_t)TT_MIN(o.nqueries, (uint64_t)UINT32_MAX);
        st = tt_calib_init(&c, idx, o.Q, o.qoffs, o.qlens, o.nqueries, o.cost);
    } else {
        t.pseudo = 1;
        t.num_queries = o.num_queries;
        st = tt_calib_init_pseudo(&c, idx, o.num_queries, o.query_len, o.noise, o.seed, o.cost,
                                  &t.query_len);
        t.noise = c.noise;
    }
    if (st)
        goto done;
    /* ColBERT-length pseudo-queries (32 vectors) calibrate too cheap a search for
     * queries of a few vectors (a lexical encoder's: scifact's average 9), which have
     * more near-ties at rank k: short ones are measured too, made like the long ones
     * (half their vectors from other documents), twice as many: half the long ones'
     * query vectors (64 short ones predicted scifact's recall at one set 0.914 or 0.958
     * by seed, 128 0.926-0.947, 256 0.932-0.941; doc/benchmarks.md, "Short queries";
     * 256 made the calibration of small noisy indexes, and the test suite, much
     * slower). Fewer vectors search at least as deep (scifact: lower recall at every
     * ndocs), so their search is the (nprobe, ndocs) staircase from the long set's
     * ndocs up, at its stage-4 margin and sketch setting (tt_calib_search_like): the
     * whole grid over 256 short queries made calibration, and the test suite, several
     * times slower. */
    if (t.pseudo && t.query_len > 2 * TT_TUNE_SHORT_LEN) {
        uint32_t used, ns = (uint32_t)TT_MIN((uint64_t)o.num_queries * t.query_len /
                                                 (2 * TT_TUNE_SHORT_LEN), 100000u);
        if ((st = tt_calib_init_pseudo_mix(&cs, idx, ns, TT_TUNE_SHORT_LEN, c.noise,
                                           0.5, -1, o.seed + 1, o.cost, &used)))
            goto done;
        t.short_len = used;
    }
    /* Both the reference scan and the measurements run on every thread asked for. */
    cs.cancel = c.cancel = o.cancel;
    cs.threads = c.threads = o.threads > 0 ? o.threads : tt_default_threads();
    if ((st = progress(&s, "reference", 0, 1)) || (st = tt_calib_truth(&c, o.threads)) ||
        (t.short_len && (st = tt_calib_truth(&cs, o.threads))) ||
        (st = progress(&s, "reference", 1, 1)))
        goto done;
    bool good = false;
    if (o.if_stale && idx->tuned.tuned) {
        tt_tune_info now;
        if ((st = still_good(&c, t.short_len ? &cs : NULL, &idx->tuned, o.target_recall, &now,
                             &good)))
            goto done;
        if (good) { /* the same parameters, measured on this generation */
            t.k10 = now.k10;
            t.k100 = now.k100;
            t.k10_short = now.k10_short;
            t.k100_short = now.k100_short;
            t.centroid_groups = idx->cgroup_of ? idx->cgroup_n : 0;
        }
    }
    const uint32_t steps = t.short_len ? 4 : 2;
    if (!good &&
        ((st = progress(&s, "tune k=10", 0, steps)) ||
         (st = tt_calib_search(&c, 10, o.target_recall, &t.k10)) ||
         (st = progress(&s, "tune k=100", 1, steps)) ||
         (st = tt_calib_search(&c, 100, o.target_recall, &t.k100)) ||
         (t.short_len &&
          ((st = progress(&s, "tune k=10, short queries", 2, steps)) ||
           (st = tt_calib_search_like(&cs, &t.k10, o.target_recall, &t.k10_short)) ||
           (st = progress(&s, "tune k=100, short queries", 3, steps)) ||
           (st = tt_calib_search_like(&cs, &t.k100, o.target_recall, &t.k100_short)))) ||
         (st = progress(&s, t.short_len ? "tune k=100, short queries" : "tune k=100", steps,
                        steps))))
        goto done;
    if (!good) {
        tt_calib *cals[4] = {&c, &c, &cs, &cs};
        tt_tuned *sets[4] = {&t.k10, &t.k100, &t.k10_short, &t.k100_short};
        if ((st = progress(&s, "centroid groups", 0, 1)) ||
            (st = tt_calib_groups(idx, cals, sets, t.short_len ? 4 : 2, o.target_recall,
                                  o.seed, c.threads, &group_of, &t.centroid_groups)) ||
            (st = progress(&s, "centroid groups", 1, 1)))
            goto done;
    }
    if ((st = tt_store_next(&s, &next)) ||
        (st = write_tune(&s, &next, &t, good ? idx->cgroup_of : group_of,
                         idx->num_centroids)) ||
        (st = tt_store_publish(&s, &next)))
        goto done;
    if (out)
        *out = t;
done:
    free(group_of);
    tt_calib_free(&c);
    tt_calib_free(&cs);
    tt_index_close(idx);
    tt_manifest_free(&next);
    return tt_store_end(&s, st);
}

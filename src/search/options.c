/* Search options and PLAID's defaults by k (ColBERTv2). */
#include "search/search.h"

#include <math.h>
#include <stddef.h>

/* The size of the first published tt_search_options: struct_size below it, or above
 * this library's, is a caller built against another tartan.h (or garbage). */
#define OPTIONS_V1_SIZE (offsetof(tt_search_options, score) + sizeof(int))

int tt_search_options_check(const tt_search_options *opt) {
    if (!opt)
        return TT_OK;
    if (opt->struct_size < OPTIONS_V1_SIZE || opt->struct_size > sizeof *opt)
        return tt_err(TT_EINVAL, "search options: struct_size %u is not a size this library "
                      "knows (%zu..%zu; initialise them with tt_search_options_init)",
                      opt->struct_size, (size_t)OPTIONS_V1_SIZE, sizeof *opt);
    if (opt->nprobe < 0)
        return tt_err(TT_EINVAL, "search options: nprobe %d (0 means the default, else >= 1)",
                      opt->nprobe);
    if (isinf(opt->threshold))
        return tt_err(TT_EINVAL, "search options: the threshold must be finite (NaN means the "
                      "default)");
    /* Fields past the caller's struct_size are not the caller's: resolve defaults them. */
    if (opt->struct_size >= offsetof(tt_search_options, pruning) + sizeof(int) &&
        (opt->pruning < TT_PRUNE_AUTO || opt->pruning > TT_PRUNE_RELATIVE))
        return tt_err(TT_EINVAL, "search options: unknown pruning mode %d", opt->pruning);
    if (opt->struct_size >= offsetof(tt_search_options, prune_ratio) + sizeof(float) &&
        !isnan(opt->prune_ratio) && !(opt->prune_ratio >= 0 && opt->prune_ratio <= 1))
        return tt_err(TT_EINVAL, "search options: prune_ratio %g is not in [0, 1] (NaN means "
                      "the default)", (double)opt->prune_ratio);
    if (opt->struct_size >= offsetof(tt_search_options, rerank) + sizeof(int) &&
        opt->rerank != TT_RERANK_ADAPTIVE && opt->rerank != TT_RERANK_FIXED)
        return tt_err(TT_EINVAL, "search options: unknown rerank mode %d", opt->rerank);
    if (opt->struct_size >= offsetof(tt_search_options, rerank_margin) + sizeof(float) &&
        !isnan(opt->rerank_margin) && !(opt->rerank_margin >= 0 && opt->rerank_margin <= 1e3))
        return tt_err(TT_EINVAL, "search options: rerank_margin %g is not in [0, 1000] (NaN "
                      "means the default)", (double)opt->rerank_margin);
    if (opt->struct_size >= offsetof(tt_search_options, sketch) + sizeof(int) &&
        (opt->sketch < -1 || opt->sketch > 1))
        return tt_err(TT_EINVAL, "search options: sketch %d is not -1 (the index's choice), 0 "
                      "or 1", opt->sketch);
    if (opt->struct_size >= offsetof(tt_search_options, centroid_groups) + sizeof(int) &&
        opt->centroid_groups < -1)
        return tt_err(TT_EINVAL, "search options: centroid_groups %d is not -1 (the index's "
                      "choice), 0 (every centroid) or a number of groups", opt->centroid_groups);
    return TT_OK;
}

void tt_search_options_init(tt_search_options *opt) {
    if (!opt)
        return;
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->mode = TT_MODE_PLAID;
    opt->nprobe = 0;
    opt->threshold = NAN;
    opt->ndocs = 0;
    opt->score = TT_SCORE_SUM;
    opt->pruning = TT_PRUNE_AUTO;
    opt->prune_ratio = NAN;
    opt->rerank = TT_RERANK_ADAPTIVE;
    opt->tuned = 1;
    opt->rerank_margin = NAN;
    opt->sketch = -1;
    opt->centroid_groups = -1;
}

void tt_search_defaults_for_k(uint32_t k, int *nprobe, float *threshold, uint32_t *ndocs) {
    if (k <= 10) {
        *nprobe = 1;
        *threshold = 0.5f;
        *ndocs = 256;
    } else if (k <= 100) {
        *nprobe = 2;
        *threshold = 0.45f;
        *ndocs = 1024;
    } else {
        *nprobe = 4;
        *threshold = 0.4f;
        *ndocs = k > 1024 ? (k > UINT32_MAX / 4 ? UINT32_MAX : 4 * k) : 4096;
    }
}

void tt_search_options_resolve(const tt_search_options *opt, uint32_t k,
                               tt_search_options *out) {
    tt_search_options o;
    tt_search_options_init(&o);
    /* Callers built against an older, shorter struct pass their struct_size. */
    if (opt && opt->struct_size > sizeof(uint32_t))
        memcpy(&o, opt, TT_MIN((size_t)opt->struct_size, sizeof o));
    o.struct_size = sizeof o;
    int np;
    float th;
    uint32_t nd;
    tt_search_defaults_for_k(k, &np, &th, &nd);
    if (o.nprobe <= 0)
        o.nprobe = np;
    /* Pruning: an explicit threshold keeps ColBERTv2's absolute rule (parity with its
     * table and with what --threshold always meant); otherwise the relative rule. */
    if (o.pruning == TT_PRUNE_AUTO)
        o.pruning = isnan(o.threshold) ? TT_PRUNE_RELATIVE : TT_PRUNE_ABSOLUTE;
    if (o.pruning == TT_PRUNE_ABSOLUTE) {
        if (isnan(o.threshold))
            o.threshold = th;
    } else {
        o.threshold = NAN;
        if (isnan(o.prune_ratio))
            o.prune_ratio = TT_PRUNE_RATIO_DEFAULT;
    }
    if (isnan(o.rerank_margin))
        o.rerank_margin = TT_RERANK_MARGIN_DEFAULT;
    if (o.ndocs == 0)
        o.ndocs = nd;
    if (o.sketch < 0)
        o.sketch = 1;
    if (o.centroid_groups < 0)
        o.centroid_groups = 0;
    /* Stage 2 keeps ndocs documents: fewer than k would return fewer than k hits. */
    if (o.ndocs < k)
        o.ndocs = k;
    *out = o;
}

/* Calibrated parameters (doc/search.md, "Calibrated defaults"): the fields the caller
 * left at their defaults take the index's measured values. */
int tt_search_options_resolve_index(const tt_index *idx, const tt_search_options *opt,
                                    uint32_t k, tt_search_options *out) {
    return tt_search_options_resolve_query(idx, opt, k, 0, out);
}

int tt_search_options_resolve_query(const tt_index *idx, const tt_search_options *opt,
                                    uint32_t k, uint32_t nq, tt_search_options *out) {
    tt_search_options o;
    tt_search_options_init(&o);
    if (opt && opt->struct_size > sizeof(uint32_t))
        memcpy(&o, opt, TT_MIN((size_t)opt->struct_size, sizeof o));
    o.struct_size = sizeof o;
    /* A caller built before calibration existed gets it (init's default: the memcpy
     * above stops at its struct_size): it is the index's default. */
    int from = 0;
    if (idx && idx->tuned.tuned && o.tuned && o.mode == TT_MODE_PLAID) {
        const tt_tune_info *ti = &idx->tuned;
        const bool short_q = ti->short_len && nq && nq <= 2 * ti->short_len;
        const tt_tuned *t = k <= 10 ? (short_q ? &ti->k10_short : &ti->k10)
                                    : (short_q ? &ti->k100_short : &ti->k100);
        /* Exhaustive search measured cheaper than PLAID at the target: taken unless the
         * caller set one of PLAID's own parameters (then PLAID, the rest calibrated). */
        if (t->exhaustive && o.nprobe <= 0 && o.ndocs == 0 && isnan(o.threshold) &&
            isnan(o.prune_ratio) && isnan(o.rerank_margin) && o.pruning == TT_PRUNE_AUTO &&
            o.rerank == TT_RERANK_ADAPTIVE && o.sketch < 0 && o.centroid_groups < 0) {
            o.mode = TT_MODE_EXHAUSTIVE;
            tt_search_options_resolve(&o, k, out);
            return 4;
        }
        if (o.nprobe <= 0) {
            o.nprobe = t->nprobe;
            from++;
        }
        if (o.ndocs == 0) {
            uint64_t nd = t->ndocs;
            if (k > 100) {
                int np;
                float th;
                uint32_t table;
                tt_search_defaults_for_k(k, &np, &th, &table);
                nd = TT_MAX(nd * k / 100, (uint64_t)table);
                nd = TT_MIN(nd, (uint64_t)UINT32_MAX);
            }
            o.ndocs = (uint32_t)nd;
            from++;
        }
        bool relative = o.pruning == TT_PRUNE_RELATIVE ||
                        (o.pruning == TT_PRUNE_AUTO && isnan(o.threshold));
        if (relative && isnan(o.prune_ratio)) {
            o.prune_ratio = t->prune_ratio;
            from++;
        }
        if (isnan(o.rerank_margin)) {
            o.rerank_margin = t->rerank_margin;
            from++;
        }
        if (o.sketch < 0 && idx->sketch_bytes) {
            o.sketch = t->sketch;
            from++;
        }
        if (o.centroid_groups < 0 && ti->centroid_groups) {
            o.centroid_groups = (int)t->centroid_groups;
            from++;
        }
    }
    tt_search_options_resolve(&o, k, out);
    return from;
}

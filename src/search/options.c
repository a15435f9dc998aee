/* Search options and PLAID's defaults by k (ColBERTv2). */
#include "search/search.h"

#include <math.h>

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
    if (isnan(o.threshold))
        o.threshold = th;
    if (o.ndocs == 0)
        o.ndocs = nd;
    *out = o;
}

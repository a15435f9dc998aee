/* tt_filter: the set of allowed rows a filtered search takes (include/tartan.h). */
#include "meta/meta.h"

#include <stdlib.h>

int tt_filter_alloc(tt_filter **out, uint64_t num_rows) {
    *out = NULL;
    if (num_rows > (UINT64_MAX >> 8))
        return tt_err(TT_EINVAL, "filter: %llu rows is too many", (unsigned long long)num_rows);
    tt_filter *f = tt_calloc(1, sizeof *f, "filter");
    if (!f)
        return TT_ENOMEM;
    uint64_t words = (num_rows + 63) / 64;
    if (!(f->bits = tt_calloc(words ? words : 1, sizeof *f->bits, "filter"))) {
        free(f);
        return TT_ENOMEM;
    }
    f->num_rows = num_rows;
    *out = f;
    return TT_OK;
}

int tt_filter_new(tt_filter **out, uint64_t num_rows) {
    if (!out)
        return tt_err(TT_EINVAL, "tt_filter_new: NULL argument");
    return tt_filter_alloc(out, num_rows);
}

void tt_filter_free(tt_filter *f) {
    if (!f)
        return;
    free(f->bits);
    free(f);
}

int tt_filter_add(tt_filter *f, uint64_t row) {
    if (!f)
        return tt_err(TT_EINVAL, "tt_filter_add: NULL filter");
    if (row >= f->num_rows)
        return tt_err(TT_EINVAL, "tt_filter_add: row %llu is not below the filter's %llu rows",
                      (unsigned long long)row, (unsigned long long)f->num_rows);
    f->bits[row >> 6] |= 1ull << (row & 63);
    return TT_OK;
}

int tt_filter_has(const tt_filter *f, uint64_t row) {
    return f && tt_filter_bit(f, row);
}

uint64_t tt_filter_num_rows(const tt_filter *f) {
    return f ? f->num_rows : 0;
}

int tt_filter_intersect(tt_filter *dst, const tt_filter *src) {
    if (!dst || !src)
        return tt_err(TT_EINVAL, "tt_filter_intersect: NULL filter");
    if (dst->num_rows != src->num_rows)
        return tt_err(TT_EINVAL, "tt_filter_intersect: a filter over %llu rows and one over %llu",
                      (unsigned long long)dst->num_rows, (unsigned long long)src->num_rows);
    for (uint64_t w = 0; w < (dst->num_rows + 63) / 64; w++)
        dst->bits[w] &= src->bits[w];
    return TT_OK;
}

uint64_t tt_filter_count(const tt_filter *f) {
    if (!f)
        return 0;
    uint64_t n = 0;
    for (uint64_t w = 0; w < (f->num_rows + 63) / 64; w++)
        n += (uint64_t)__builtin_popcountll(f->bits[w]);
    return n;
}

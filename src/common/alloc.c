/* Memory: checked, aligned and growing allocations that name what they were for. */
#include "common/common.h"

#include <stdlib.h>

void *tt_alloc(uint64_t n, uint64_t size, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size %llu x %llu overflows", what, (unsigned long long)n,
               (unsigned long long)size);
        return NULL;
    }
    void *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
}

void *tt_calloc(uint64_t n, uint64_t size, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size %llu x %llu overflows", what, (unsigned long long)n,
               (unsigned long long)size);
        return NULL;
    }
    void *p = calloc(bytes ? (size_t)bytes : 1, 1);
    if (!p)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
}

int tt_grow(void **p, size_t *cap, size_t n, size_t elem, const char *what) {
    if (n <= *cap)
        return TT_OK;
    size_t nc = TT_MAX(n, *cap + *cap / 2);
    uint64_t bytes;
    if (!tt_mul_ok(nc, elem, &bytes) || bytes > SIZE_MAX)
        return tt_err(TT_ENOMEM, "%s: size overflows", what);
    void *q = realloc(*p, (size_t)bytes);
    if (!q)
        return tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what,
                      (unsigned long long)bytes);
    *p = q;
    *cap = nc;
    return TT_OK;
}

void *tt_alloc_aligned(uint64_t n, uint64_t size, uint64_t align, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || !tt_add_ok(bytes, align, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size overflows", what);
        return NULL;
    }
    bytes = (bytes / align) * align; /* aligned_alloc wants a multiple of align */
    if (bytes == 0)
        bytes = align;
    void *p = aligned_alloc((size_t)align, (size_t)bytes);
    if (!p)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
}

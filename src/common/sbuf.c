/* Growable byte strings. */
#include "common/common.h"

#include <stdlib.h>

int tt_sbuf_reserve(tt_sbuf *b, size_t extra) {
    if (b->cap - b->len > extra)
        return TT_OK;
    size_t need;
    if (__builtin_add_overflow(b->len, extra, &need) || need == SIZE_MAX)
        return tt_err(TT_ENOMEM, "string buffer: size overflows");
    need += 1; /* room for a terminating NUL */
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = realloc(b->p, cap);
    if (!p)
        return tt_err(TT_ENOMEM, "string buffer: cannot allocate %zu bytes", cap);
    b->p = p;
    b->cap = cap;
    return TT_OK;
}

int tt_sbuf_append(tt_sbuf *b, const void *data, size_t n) {
    int st = tt_sbuf_reserve(b, n);
    if (st)
        return st;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    return TT_OK;
}

const char *tt_sbuf_cstr(tt_sbuf *b) {
    if (tt_sbuf_reserve(b, 0))
        return NULL;
    b->p[b->len] = '\0';
    return b->p;
}

void tt_sbuf_free(tt_sbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* Bounded top-k selection with a total order (higher score, then lower document). */
#include "search/maxsim.h"

#include <stdlib.h>

static inline bool hit_better(float s1, uint64_t d1, float s2, uint64_t d2) {
    return s1 > s2 || (s1 == s2 && d1 < d2);
}

int tt_topk_reset(tt_topk *t, uint32_t k) {
    if (k > t->cap) {
        tt_hit *h = realloc(t->h, (size_t)k * sizeof *h);
        if (!h)
            return tt_err(TT_ENOMEM, "top-k heap of %u: out of memory", k);
        t->h = h;
        t->cap = k;
    }
    t->k = k;
    t->n = 0;
    return TT_OK;
}

/* Min-heap on "better": h[0] is the worst kept hit. */
void tt_topk_push(tt_topk *t, uint64_t doc, float score) {
    tt_hit *h = t->h;
    if (t->n < t->k) {
        uint32_t i = t->n++;
        while (i > 0) {
            uint32_t p = (i - 1) / 2;
            if (!hit_better(h[p].score, h[p].doc, score, doc))
                break;
            h[i] = h[p];
            i = p;
        }
        h[i] = (tt_hit){doc, score};
        return;
    }
    if (t->k == 0 || !hit_better(score, doc, h[0].score, h[0].doc))
        return;
    uint32_t i = 0, n = t->n;
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        float ws = score;
        uint64_t wd = doc;
        if (l < n && hit_better(ws, wd, h[l].score, h[l].doc)) {
            w = l;
            ws = h[l].score;
            wd = h[l].doc;
        }
        if (r < n && hit_better(ws, wd, h[r].score, h[r].doc))
            w = r;
        if (w == i)
            break;
        h[i] = h[w];
        i = w;
    }
    h[i] = (tt_hit){doc, score};
}

static int hit_cmp(const void *a, const void *b) {
    const tt_hit *x = a, *y = b;
    if (hit_better(x->score, x->doc, y->score, y->doc))
        return -1;
    return hit_better(y->score, y->doc, x->score, x->doc) ? 1 : 0;
}

uint32_t tt_topk_finish(tt_topk *t) {
    qsort(t->h, t->n, sizeof *t->h, hit_cmp);
    return t->n;
}

void tt_topk_free(tt_topk *t) {
    if (!t)
        return;
    free(t->h);
    memset(t, 0, sizeof *t);
}

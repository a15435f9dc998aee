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

/* Sorting hits best first with the comparison inlined: qsort's call per comparison
 * made sorting stage 3's survivors (4,096 a query on the LLM-like collection) 13% of a
 * query (doc/benchmarks.md, *Stage 4 sorts only the batches it scores*). */
static inline bool before(const tt_hit *a, const tt_hit *b) {
    return hit_better(a->score, a->doc, b->score, b->doc);
}

static inline void swap_hits(tt_hit *a, tt_hit *b) {
    tt_hit t = *a;
    *a = *b;
    *b = t;
}

static void insertion_sort(tt_hit *h, size_t n) {
    for (size_t i = 1; i < n; i++) {
        tt_hit x = h[i];
        size_t j = i;
        for (; j > 0 && before(&x, &h[j - 1]); j--)
            h[j] = h[j - 1];
        h[j] = x;
    }
}

/* Partitions h[0..n) (n >= 3) around the median of its first, middle and last hits:
 * returns p with h[0..p) before h[p] and h[p+1..n) after it. */
static size_t partition(tt_hit *h, size_t n) {
    size_t m = n / 2;
    if (before(&h[m], &h[0]))
        swap_hits(&h[m], &h[0]);
    if (before(&h[n - 1], &h[0]))
        swap_hits(&h[n - 1], &h[0]);
    if (before(&h[n - 1], &h[m]))
        swap_hits(&h[n - 1], &h[m]);
    swap_hits(&h[m], &h[n - 1]); /* the pivot, last */
    const tt_hit pivot = h[n - 1];
    size_t p = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (before(&h[i], &pivot))
            swap_hits(&h[i], &h[p++]);
    swap_hits(&h[p], &h[n - 1]);
    return p;
}

void tt_hits_sort(tt_hit *h, size_t n) {
    while (n > 16) {
        size_t p = partition(h, n);
        /* the smaller side by recursion, the larger by the loop: O(log n) stack */
        if (p < n - p - 1) {
            tt_hits_sort(h, p);
            h += p + 1;
            n -= p + 1;
        } else {
            tt_hits_sort(h + p + 1, n - p - 1);
            n = p;
        }
    }
    insertion_sort(h, n);
}

void tt_hits_best(tt_hit *h, size_t n, size_t m) {
    if (m >= n) {
        tt_hits_sort(h, n);
        return;
    }
    /* Quickselect: narrow [lo, hi) to the part holding the m-th boundary. */
    size_t lo = 0, hi = n;
    while (hi - lo > 16) {
        size_t p = lo + partition(h + lo, hi - lo);
        if (p == m)
            break;
        if (p < m)
            lo = p + 1;
        else
            hi = p;
    }
    if (hi - lo <= 16)
        insertion_sort(h + lo, hi - lo);
    tt_hits_sort(h, m);
}

uint32_t tt_topk_finish(tt_topk *t) {
    tt_hits_sort(t->h, t->n);
    return t->n;
}

void tt_topk_free(tt_topk *t) {
    if (!t)
        return;
    free(t->h);
    memset(t, 0, sizeof *t);
}

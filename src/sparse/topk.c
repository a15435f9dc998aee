/* Exact top-k over one segment's sparse postings: document-at-a-time MaxScore (Turtle
 * and Flood 1995, as Lucene's MaxScoreBulkScorer and PISA's maxscore) with block-max
 * bounds (Ding and Suel 2011) on the non-essential lists. A document's score is the sum
 * of its postings' contributions in query term order, computed in double precision,
 * exactly as the brute force sums them, so the two agree bit for bit; bounds are only
 * used to skip, with a margin far above the rounding of a sum. */
#include "sparse/sparse.h"

#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- heap */

int tt_sparse_heap_init(tt_sparse_heap *h, uint32_t k) {
    h->k = k;
    h->n = 0;
    h->score = tt_alloc(k ? k : 1, sizeof *h->score, "sparse top-k");
    h->row = tt_alloc(k ? k : 1, sizeof *h->row, "sparse top-k");
    if (!h->score || !h->row) {
        tt_sparse_heap_free(h);
        return TT_ENOMEM;
    }
    return TT_OK;
}

void tt_sparse_heap_free(tt_sparse_heap *h) {
    free(h->score);
    free(h->row);
    h->score = NULL;
    h->row = NULL;
}

/* a worse than b: lower score, or equal score and higher row */
static inline bool worse(double sa, uint64_t ra, double sb, uint64_t rb) {
    return sa < sb || (sa == sb && ra > rb);
}

static void sift_down(tt_sparse_heap *h, uint32_t i) {
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && worse(h->score[l], h->row[l], h->score[m], h->row[m]))
            m = l;
        if (r < h->n && worse(h->score[r], h->row[r], h->score[m], h->row[m]))
            m = r;
        if (m == i)
            return;
        double ts = h->score[i];
        uint64_t tr = h->row[i];
        h->score[i] = h->score[m];
        h->row[i] = h->row[m];
        h->score[m] = ts;
        h->row[m] = tr;
        i = m;
    }
}

void tt_sparse_heap_push(tt_sparse_heap *h, double score, uint64_t row) {
    if (h->k == 0)
        return;
    if (h->n < h->k) {
        uint32_t i = h->n++;
        h->score[i] = score;
        h->row[i] = row;
        while (i > 0) {
            uint32_t p = (i - 1) / 2;
            if (!worse(h->score[i], h->row[i], h->score[p], h->row[p]))
                break;
            double ts = h->score[i];
            uint64_t tr = h->row[i];
            h->score[i] = h->score[p];
            h->row[i] = h->row[p];
            h->score[p] = ts;
            h->row[p] = tr;
            i = p;
        }
        return;
    }
    if (!worse(h->score[0], h->row[0], score, row))
        return;
    h->score[0] = score;
    h->row[0] = row;
    sift_down(h, 0);
}

double tt_sparse_heap_threshold(const tt_sparse_heap *h) {
    return h->n < h->k ? -INFINITY : h->score[0];
}

void tt_sparse_heap_sort(tt_sparse_heap *h) {
    uint32_t n = h->n;
    while (h->n > 1) { /* heap sort: the worst goes to the end */
        uint32_t last = h->n - 1;
        double ts = h->score[0];
        uint64_t tr = h->row[0];
        h->score[0] = h->score[last];
        h->row[0] = h->row[last];
        h->score[last] = ts;
        h->row[last] = tr;
        h->n--;
        sift_down(h, 0);
    }
    h->n = n;
}

/* -------------------------------------------------------------- cursors */

typedef struct cursor {
    const tt_sparse_term *t;
    double ub;                 /* bound of any contribution of the list */
    uint64_t blk, end;         /* current block, one past the last */
    uint32_t n, pos;           /* postings decoded in the current block, position */
    bool decoded;
    uint32_t docs[TT_SPARSE_BLOCK];
    uint8_t vals[TT_SPARSE_BLOCK];
} cursor;

#define DONE UINT64_MAX

static double block_bound(const tt_sparse_seg *s, const tt_sparse_scoring *sc, double factor,
                          uint64_t blk) {
    const uint8_t *be = s->blocks + TT_SPARSE_BLOCK_BYTES * blk;
    return tt_sparse_contrib(sc, factor, tt_rd32(be + 16), tt_rd32(be + 12));
}

static inline uint32_t block_last(const tt_sparse_seg *s, uint64_t blk) {
    return tt_rd32(s->blocks + TT_SPARSE_BLOCK_BYTES * blk + 8);
}

static void cur_decode(const tt_sparse_seg *s, cursor *c, tt_sparse_counts *cnt) {
    c->n = tt_sparse_block_decode(s, c->t->first, c->t->df, c->blk, c->docs, c->vals);
    c->decoded = true;
    if (cnt)
        cnt->postings_decoded += c->n;
}

static inline uint64_t cur_doc(const tt_sparse_seg *s, cursor *c, tt_sparse_counts *cnt) {
    if (c->blk >= c->end)
        return DONE;
    if (!c->decoded)
        cur_decode(s, c, cnt);
    return c->docs[c->pos];
}

static void cur_next(cursor *c) {
    if (++c->pos >= c->n) {
        c->blk++;
        c->pos = 0;
        c->decoded = false;
    }
}

/* Moves to the block that may hold d (its last document >= d) without decoding. */
static void cur_shallow(const tt_sparse_seg *s, cursor *c, uint64_t d, tt_sparse_counts *cnt) {
    while (c->blk < c->end && block_last(s, c->blk) < d) {
        c->blk++;
        c->pos = 0;
        c->decoded = false;
        if (cnt)
            cnt->blocks_skipped++;
    }
}

/* First posting >= d. */
static uint64_t cur_advance(const tt_sparse_seg *s, cursor *c, uint64_t d, tt_sparse_counts *cnt) {
    cur_shallow(s, c, d, cnt);
    if (c->blk >= c->end)
        return DONE;
    if (!c->decoded)
        cur_decode(s, c, cnt);
    while (c->docs[c->pos] < d)
        c->pos++; /* the block's last document is >= d */
    return c->docs[c->pos];
}

static int by_ub(const void *a, const void *b) {
    const cursor *x = *(cursor *const *)a, *y = *(cursor *const *)b;
    if (x->ub != y->ub)
        return x->ub < y->ub ? -1 : 1;
    return x->t->qi < y->t->qi ? -1 : x->t->qi > y->t->qi;
}

/* Skipping is allowed when a bound is below the threshold by more than any rounding. */
static inline bool cannot_enter(double bound, double thr) {
    return bound + 1e-9 * (1.0 + fabs(thr)) <= thr;
}

int tt_sparse_seg_topk(const tt_sparse_seg *s, const tt_sparse_scoring *sc,
                       const tt_sparse_term *t, uint32_t nt, uint32_t nq, const uint64_t *dead,
                       const uint64_t *allow, uint64_t doc0, tt_sparse_heap *h,
                       tt_sparse_counts *cnt) {
    if (nt == 0)
        return TT_OK;
    cursor *cs = tt_alloc(nt, sizeof *cs, "sparse search");
    cursor **c = tt_alloc(nt, sizeof *c, "sparse search");
    double *prefix = tt_alloc((uint64_t)nt + 1, sizeof *prefix, "sparse search");
    double *part = tt_calloc(nq ? nq : 1, sizeof *part, "sparse search");
    uint8_t *hit = tt_calloc(nq ? nq : 1, 1, "sparse search");
    int st = TT_ENOMEM;
    if (!cs || !c || !prefix || !part || !hit)
        goto done;
    for (uint32_t i = 0; i < nt; i++) {
        cursor *x = &cs[i];
        x->t = &t[i];
        x->blk = t[i].first;
        x->end = t[i].first + (t[i].df + TT_SPARSE_BLOCK - 1) / TT_SPARSE_BLOCK;
        x->n = x->pos = 0;
        x->decoded = false;
        x->ub = 0;
        for (uint64_t b = x->blk; b < x->end; b++)
            x->ub = TT_MAX(x->ub, block_bound(s, sc, t[i].factor, b));
        c[i] = x;
    }
    qsort(c, nt, sizeof *c, by_ub);
    prefix[0] = 0;
    for (uint32_t i = 0; i < nt; i++)
        prefix[i + 1] = prefix[i] + c[i]->ub * (1.0 + 1e-12);
    uint32_t e = 0; /* lists [0, e) are non-essential: together they cannot make the top k */
    for (;;) {
        double thr = tt_sparse_heap_threshold(h);
        while (e < nt && cannot_enter(prefix[e + 1], thr))
            e++;
        if (e == nt)
            break;
        /* the next candidate: the smallest document of the essential lists */
        uint64_t d = DONE;
        for (uint32_t i = e; i < nt; i++) {
            uint64_t x = cur_doc(s, c[i], cnt);
            if (x < d)
                d = x;
        }
        if (d == DONE)
            break;
        /* A deleted document, or one outside the filter, is never scored: its essential
         * postings are passed over and its non-essential lists never read. */
        bool skip = tt_bit_get(dead, doc0 + d) || (allow && !tt_bit_get(allow, doc0 + d));
        double sum = 0;
        for (uint32_t i = e; i < nt; i++)
            if (cur_doc(s, c[i], cnt) == d) {
                if (!skip) {
                    double v = tt_sparse_contrib(sc, c[i]->t->factor, c[i]->vals[c[i]->pos],
                                                 tt_sparse_seg_len(s, d));
                    part[c[i]->t->qi] = v;
                    hit[c[i]->t->qi] = 1;
                    sum += v;
                }
                cur_next(c[i]);
            }
        /* the non-essential lists, largest bound first */
        for (uint32_t i = e; i-- > 0 && !skip;) {
            if (cannot_enter(sum + prefix[i + 1], thr)) {
                skip = true;
                break;
            }
            cur_shallow(s, c[i], d, cnt);
            if (c[i]->blk >= c[i]->end)
                continue;
            double bb = block_bound(s, sc, c[i]->t->factor, c[i]->blk);
            if (cannot_enter(sum + bb * (1.0 + 1e-12) + prefix[i], thr)) {
                skip = true; /* not even this block's best posting lifts it in */
                break;
            }
            if (cur_advance(s, c[i], d, cnt) == d) {
                double v = tt_sparse_contrib(sc, c[i]->t->factor, c[i]->vals[c[i]->pos],
                                             tt_sparse_seg_len(s, d));
                part[c[i]->t->qi] = v;
                hit[c[i]->t->qi] = 1;
                sum += v;
            }
        }
        if (!skip) {
            double total = 0;
            for (uint32_t q = 0; q < nq; q++)
                if (hit[q])
                    total += part[q];
            if (cnt)
                cnt->docs_scored++;
            tt_sparse_heap_push(h, total, doc0 + d);
        }
        for (uint32_t i = 0; i < nt; i++)
            hit[c[i]->t->qi] = 0;
    }
    st = TT_OK;
done:
    free(cs);
    free(c);
    free(prefix);
    free(part);
    free(hit);
    return st;
}

int tt_sparse_seg_brute(const tt_sparse_seg *s, const tt_sparse_scoring *sc,
                        const tt_sparse_term *t, uint32_t nt, uint32_t nq, const uint64_t *dead,
                        const uint64_t *allow, uint64_t doc0, tt_sparse_heap *h) {
    uint64_t D = s->D;
    double *part = tt_calloc(D * (uint64_t)(nq ? nq : 1) + 1, sizeof *part, "brute force");
    uint8_t *any = tt_calloc(D + 1, 1, "brute force");
    if (!part || !any) {
        free(part);
        free(any);
        return TT_ENOMEM;
    }
    uint32_t docs[TT_SPARSE_BLOCK];
    uint8_t vals[TT_SPARSE_BLOCK];
    for (uint32_t i = 0; i < nt; i++) {
        uint64_t nb = (t[i].df + TT_SPARSE_BLOCK - 1) / TT_SPARSE_BLOCK;
        for (uint64_t j = 0; j < nb; j++) {
            uint32_t n = tt_sparse_block_decode(s, t[i].first, t[i].df, t[i].first + j, docs, vals);
            for (uint32_t k = 0; k < n; k++) {
                part[(uint64_t)docs[k] * nq + t[i].qi] =
                    tt_sparse_contrib(sc, t[i].factor, vals[k], tt_sparse_seg_len(s, docs[k]));
                any[docs[k]] = 1;
            }
        }
    }
    for (uint64_t d = 0; d < D; d++) {
        if (!any[d] || tt_bit_get(dead, doc0 + d) || (allow && !tt_bit_get(allow, doc0 + d)))
            continue;
        double total = 0;
        for (uint32_t q = 0; q < nq; q++)
            total += part[d * nq + q];
        tt_sparse_heap_push(h, total, doc0 + d);
    }
    free(part);
    free(any);
    return TT_OK;
}

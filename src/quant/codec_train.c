/* Residual codec training (quant/codec.h): exact quantiles of held-out residuals,
 * Lloyd-Max refinement, and the adaptive codec's bit allocation.
 *
 * Quantiles are exact: tt_quantile selects (no sorting of the whole array and no
 * sample ceiling: torch.quantile refuses inputs above 16M elements, which is why
 * ColBERTv2 cannot use all held-out values of high-dimensional encoders); the tables
 * sort each column once, which Lloyd-Max then refines in O(2^b log n) per round from
 * prefix sums. Lloyd-Max: S. Lloyd, "Least squares quantization in PCM" (1957/1982);
 * J. Max, "Quantizing for minimum distortion" (1960). The allocation is the classic
 * greedy for rate allocation over independent scalar quantizers (Gersho & Gray,
 * "Vector Quantization and Signal Compression", 1992, section 8.3), on measured
 * distortions and importance-weighted as issue 18's study found necessary for LLM
 * hidden states. */
#include "quant/codec.h"

#include <math.h>
#include <stdlib.h>

/* ================================================================ selection */

static inline void swapf(float *x, size_t a, size_t b) {
    float t = x[a];
    x[a] = x[b];
    x[b] = t;
}

static void insertion_sort(float *x, size_t lo, size_t hi) {
    for (size_t i = lo + 1; i <= hi; i++) {
        float v = x[i];
        size_t j = i;
        while (j > lo && x[j - 1] > v) {
            x[j] = x[j - 1];
            j--;
        }
        x[j] = v;
    }
}

/* Index of the median of x[a], x[b], x[c]. */
static inline size_t median3(const float *x, size_t a, size_t b, size_t c) {
    if (x[a] < x[b])
        return x[b] < x[c] ? b : (x[a] < x[c] ? c : a);
    return x[a] < x[c] ? a : (x[b] < x[c] ? c : b);
}

static void select_k(float *x, size_t lo, size_t hi, size_t k);

/* Median-of-medians pivot (Blum, Floyd, Pratt, Rivest, Tarjan 1973): the medians of
 * groups of 5 are gathered at the front of the range and their median selected
 * recursively. Guarantees a 30/70 split; used only when median-of-3 keeps failing
 * (introselect, Musser 1997), so the worst case stays O(n). */
static size_t mom_pivot(float *x, size_t lo, size_t hi) {
    size_t ngroups = 0;
    for (size_t g = lo; g + 4 <= hi; g += 5) {
        insertion_sort(x, g, g + 4);
        swapf(x, lo + ngroups, g + 2);
        ngroups++;
    }
    if (ngroups == 0)
        return lo + (hi - lo) / 2;
    size_t mid = lo + ngroups / 2;
    select_k(x, lo, lo + ngroups - 1, mid);
    return mid;
}

/* Partially orders x[lo..hi] (inclusive) so that x[k] holds the value it would have
 * if the range were sorted, everything before it is <= x[k] and everything after is
 * >= x[k] (quickselect, Hoare 1961). Hoare's two-pointer partition splits runs of
 * equal values evenly, so duplicates cost nothing extra. NaNs give an unspecified
 * order but the loops stay within bounds and terminate. */
static void select_k(float *x, size_t lo, size_t hi, size_t k) {
    unsigned bad = 0;
    while (hi > lo) {
        size_t n = hi - lo + 1;
        if (n <= 16) {
            insertion_sort(x, lo, hi);
            return;
        }
        size_t pi;
        if (bad > 4) {
            pi = mom_pivot(x, lo, hi);
        } else {
            size_t mid = lo + (hi - lo) / 2;
            if (n >= 1024) { /* Tukey's ninther for large ranges */
                size_t s = n / 8;
                pi = median3(x, median3(x, lo, lo + s, lo + 2 * s),
                             median3(x, mid - s, mid, mid + s),
                             median3(x, hi - 2 * s, hi - s, hi));
            } else {
                pi = median3(x, lo, mid, hi);
            }
        }
        float p = x[pi];
        /* Sentinels: make x[lo] <= p <= x[hi] while keeping p in the range, so the
         * scans below stop inside it and both sides shrink. */
        if (x[lo] > x[hi]) {
            swapf(x, lo, hi);
            pi = pi == lo ? hi : pi == hi ? lo : pi;
        }
        if (p < x[lo])
            swapf(x, pi, lo);
        else if (p > x[hi])
            swapf(x, pi, hi);
        size_t i = lo, j = hi;
        for (;;) {
            do
                i++;
            while (i < hi && x[i] < p);
            do
                j--;
            while (j > lo && x[j] > p);
            if (i >= j)
                break;
            swapf(x, i, j);
        }
        /* Now x[lo..j] <= p <= x[j+1..hi], with lo <= j < hi. */
        size_t nn;
        if (k <= j) {
            hi = j;
            nn = j - lo + 1;
        } else {
            lo = j + 1;
            nn = hi - j;
        }
        if (nn > n / 4 * 3) /* a poor split: after a few, switch to median of medians */
            bad++;
    }
}

/* Places the order statistics of ranks ks[0..nk) (ascending, within [lo, hi]) at their
 * sorted positions: select the middle rank, then recurse on each side with the ranks
 * that fall there. O(n log nk) expected instead of O(n nk). */
static void select_multi(float *x, size_t lo, size_t hi, const size_t *ks, size_t nk) {
    while (nk > 0) {
        if (hi - lo < 16) {
            insertion_sort(x, lo, hi);
            return;
        }
        size_t m = nk / 2, km = ks[m];
        select_k(x, lo, hi, km);
        if (m > 0 && km > lo)
            select_multi(x, lo, km - 1, ks, m);
        /* tail-iterate on the right part */
        ks += m + 1;
        nk -= m + 1;
        lo = km + 1;
        if (lo > hi)
            return;
    }
}

/* numpy/torch 'linear' quantile position: pos = q*(n-1), lo = floor(pos). */
static void quantile_ranks(double q, size_t n, size_t *lo, size_t *hi, double *frac) {
    if (!(q > 0))
        q = 0; /* also maps NaN to 0 */
    if (q > 1)
        q = 1;
    double pos = q * (double)(n - 1);
    double f = floor(pos);
    size_t l = (size_t)f;
    if (l > n - 1)
        l = n - 1;
    *lo = l;
    *hi = l + 1 < n ? l + 1 : l;
    *frac = pos - f;
}

/* Value at quantile q of x once the needed ranks are in place. */
static float quantile_value(const float *x, size_t n, double q) {
    size_t lo, hi;
    double frac;
    quantile_ranks(q, n, &lo, &hi, &frac);
    double a = x[lo], b = x[hi];
    return (float)(a + frac * (b - a));
}

float tt_quantile(float *x, uint64_t n, double q) {
    if (n == 0 || n > SIZE_MAX)
        return NAN;
    size_t lo, hi;
    double frac;
    quantile_ranks(q, (size_t)n, &lo, &hi, &frac);
    size_t ks[2] = {lo, hi};
    select_multi(x, 0, (size_t)n - 1, ks, hi > lo ? 2 : 1);
    return quantile_value(x, (size_t)n, q);
}

/* The ColBERTv2 quantile levels: cutoffs at i/nb (i = 1..nb-1), weights at (i+0.5)/nb. */
static double cutoff_level(uint32_t nb, uint32_t i) { return (double)(i + 1) / nb; }
static double weight_level(uint32_t nb, uint32_t i) { return (i + 0.5) / nb; }

/* ========================================================== one table */

/* A column of held-out values, sorted, with prefix sums of x and x^2 (double): what
 * every table of the column is trained from. The count of values <= t is a binary
 * search and a bucket's sum and square sum are two subtractions, so a Lloyd-Max round
 * costs O(2^b log n) instead of O(n). */
typedef struct column {
    const float *x;
    size_t n;
    const double *s, *s2; /* n + 1 */
} column;

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static void column_init(column *col, float *x, size_t n, double *s, double *s2) {
    qsort(x, n, sizeof *x, cmp_float);
    s[0] = s2[0] = 0;
    for (size_t i = 0; i < n; i++) {
        s[i + 1] = s[i] + x[i];
        s2[i + 1] = s2[i] + (double)x[i] * x[i];
    }
    col->x = x;
    col->n = n;
    col->s = s;
    col->s2 = s2;
}

/* Values <= t (the encoder sends a value equal to a cutoff to the lower bucket). */
static size_t count_le(const column *col, float t) {
    size_t lo = 0, hi = col->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (col->x[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Squared error of the column under a table of nb buckets (floats as stored). */
static double table_error(const column *col, uint32_t nb, const float *cut, const float *w) {
    double e = 0;
    size_t lo = 0;
    for (uint32_t i = 0; i < nb; i++) {
        size_t hi = i + 1 < nb ? count_le(col, cut[i]) : col->n;
        if (hi > lo) {
            double m = (double)(hi - lo), sx = col->s[hi] - col->s[lo],
                   sxx = col->s2[hi] - col->s2[lo];
            e += sxx - 2.0 * w[i] * sx + m * (double)w[i] * w[i];
        }
        lo = hi;
    }
    return e > 0 ? e : 0;
}

/* Scales the weights of a table by g = sum x^2 / sum x * w(x) over the column, which
 * makes sum x * g w(x) = sum x^2: the decoded value's product with the value is
 * unbiased. Bucket means (Lloyd-Max) and medians shrink towards the centre, so
 * sum x * w(x) < sum x^2 and a document's best-matching vectors, the ones most like the
 * query, lose the most score to compression; g (>= 1 for bucket means) gives it back.
 * Order is kept (g > 0); nothing happens when the product is not positive. */
static void debias_table(const column *col, uint32_t nb, const float *cut, float *w) {
    double sxw = 0;
    size_t lo = 0;
    for (uint32_t i = 0; i < nb; i++) {
        size_t hi = i + 1 < nb ? count_le(col, cut[i]) : col->n;
        sxw += (double)w[i] * (col->s[hi] - col->s[lo]);
        lo = hi;
    }
    if (!(sxw > 0))
        return;
    double g = col->s2[col->n] / sxw;
    for (uint32_t i = 0; i < nb; i++)
        w[i] = (float)((double)w[i] * g);
}

/* The table of 2^b buckets for a sorted column: the ColBERTv2 quantiles, then up to
 * `rounds` Lloyd-Max rounds, keeping the best table seen (so refinement never raises
 * the error on these values), then, with debias, its weights scaled (debias_table).
 * Returns the squared error before that scaling (the one allocation compares). */
static double train_table(const column *col, uint32_t b, int rounds, bool debias, float *cut,
                          float *w) {
    const uint32_t nb = 1u << b;
    const size_t n = col->n;
    if (b == 0) { /* a constant: the mean */
        w[0] = (float)(col->s[n] / (double)n);
        return table_error(col, 1, cut, w);
    }
    for (uint32_t i = 0; i + 1 < nb; i++)
        cut[i] = quantile_value(col->x, n, cutoff_level(nb, i));
    for (uint32_t i = 0; i < nb; i++)
        w[i] = quantile_value(col->x, n, weight_level(nb, i));
    double best = table_error(col, nb, cut, w);
    float tc[255], tw[256];
    memcpy(tc, cut, (nb - 1) * sizeof *cut);
    memcpy(tw, w, nb * sizeof *w);
    for (int r = 0; r < rounds; r++) {
        /* Weights: the mean of each bucket; an empty one the middle of its interval,
         * which keeps the weights (and so the cutoffs) ascending. */
        size_t lo = 0;
        for (uint32_t i = 0; i < nb; i++) {
            size_t hi = i + 1 < nb ? count_le(col, tc[i]) : n;
            if (hi > lo)
                tw[i] = (float)((col->s[hi] - col->s[lo]) / (double)(hi - lo));
            else
                tw[i] = (float)(0.5 * ((double)tc[i > 0 ? i - 1 : 0] + tc[i + 1 < nb ? i : nb - 2]));
            lo = hi;
        }
        for (uint32_t i = 0; i + 1 < nb; i++)
            tc[i] = (float)(0.5 * ((double)tw[i] + tw[i + 1]));
        double e = table_error(col, nb, tc, tw);
        if (!(e < best))
            break; /* converged (or float rounding turned it back up) */
        bool done = best - e <= 1e-9 * best;
        best = e;
        memcpy(cut, tc, (nb - 1) * sizeof *cut);
        memcpy(w, tw, nb * sizeof *w);
        if (done)
            break;
    }
    if (debias)
        debias_table(col, nb, cut, w);
    return best;
}

/* ========================================================= allocation */

/* The widths a dimension may have, in order: a step goes to the next one. 3 bits is
 * the Lloyd-Max step that a 2/4-bit mix cannot replace (for a Gaussian, an even mix of
 * 2 and 4 bits has 1.84x the error of 3 bits: doc/benchmarks.md, "Codec ceilings"). */
enum { NW = 6 };
static const uint32_t widths[NW] = {0, 1, 2, 3, 4, 8};
/* A dimension's tables at every width, one block: where width index wi's start. */
static const uint32_t cut_at[NW] = {0, 0, 1, 4, 11, 26}, w_at[NW] = {0, 1, 3, 7, 15, 31};
enum { max_cut = 26 + 255, max_w = 31 + 256 };

/* Greedy water-filling: every dimension starts at width 0; the step (to its next
 * width) with the largest importance-weighted error drop per added bit is taken while
 * it fits in the budget. If bits are left that no single step fits, pairs (one
 * dimension a step down, another a step up) spend them exactly when one exists, the
 * one that loses least. Ties go to the lower dimension: deterministic. */
static void allocate(uint32_t dim, uint64_t budget, const double *err, const float *imp,
                     uint8_t *wi) {
    memset(wi, 0, dim);
    uint64_t left = budget;
    for (;;) {
        int64_t best = -1;
        double bg = -1;
        for (uint32_t j = 0; j < dim; j++) {
            if (wi[j] == NW - 1)
                continue;
            uint32_t cost = widths[wi[j] + 1] - widths[wi[j]];
            if (cost > left)
                continue;
            double g = (imp ? imp[j] : 1.0) * (err[j * NW + wi[j]] - err[j * NW + wi[j] + 1]) / cost;
            if (g > bg) {
                bg = g;
                best = j;
            }
        }
        if (best < 0)
            break;
        left -= widths[wi[best] + 1] - widths[wi[best]];
        wi[best]++;
    }
    while (left > 0) {
        int64_t ba = -1, bb = -1;
        double bnet = -INFINITY;
        for (uint32_t a = 0; a < dim; a++) {
            if (wi[a] == 0)
                continue;
            uint32_t freed = widths[wi[a]] - widths[wi[a] - 1];
            double loss = (imp ? imp[a] : 1.0) * (err[a * NW + wi[a] - 1] - err[a * NW + wi[a]]);
            for (uint32_t b = 0; b < dim; b++) {
                if (b == a || wi[b] == NW - 1)
                    continue;
                uint32_t cost = widths[wi[b] + 1] - widths[wi[b]];
                if (cost <= freed || cost - freed > left)
                    continue;
                double net = (imp ? imp[b] : 1.0) * (err[b * NW + wi[b]] - err[b * NW + wi[b] + 1]) -
                             loss;
                if (net > bnet) {
                    bnet = net;
                    ba = a;
                    bb = b;
                }
            }
        }
        if (ba < 0)
            break;
        left -= (widths[wi[bb] + 1] - widths[wi[bb]]) - (widths[wi[ba]] - widths[wi[ba] - 1]);
        wi[ba]--;
        wi[bb]++;
    }
}

/* ============================================================== training */

/* Columns gathered per pass of the per-dimension training: n*64 floats of scratch
 * instead of a transposed copy of the whole sample, with sequential reads of rows. */
#define TT_CODEC_TRAIN_BLOCK 64

/* Columns d0..d0+m of the n residual rows (n*dim) into scratch, one column of n values
 * after another (m <= TT_CODEC_TRAIN_BLOCK). */
static void load_columns(const float *residuals, uint64_t n, uint32_t dim, uint32_t d0,
                         uint32_t m, float *scratch) {
    for (uint64_t i = 0; i < n; i++) {
        const float *row = residuals + i * dim + d0;
        for (uint32_t b = 0; b < m; b++)
            scratch[(size_t)b * n + i] = row[b];
    }
}

int tt_codec_train_ex(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim,
                      const tt_codec_params *p) {
    int rc = TT_OK;
    float *scratch = NULL, *cut = NULL, *w = NULL;
    double *s = NULL, *s2 = NULL, *err = NULL;
    uint8_t *wi = NULL, *bits = NULL;
    uint32_t *perm = NULL;
    if (c)
        memset(c, 0, sizeof *c);
    if (!c || !p || !residuals || n == 0 || dim == 0 || p->nbits < 1 ||
        !tt_codec_nbits_ok(p->kind, (uint32_t)p->nbits) || p->lloyd_rounds < 0 ||
        (p->kind != TT_CODEC_SHARED && p->kind != TT_CODEC_PER_DIM &&
         p->kind != TT_CODEC_ADAPTIVE))
        return tt_err(TT_EINVAL, "codec: invalid arguments (n=%llu, dim=%u, nbits=%d, kind=%d)",
                      (unsigned long long)n, dim, p ? p->nbits : 0, p ? p->kind : -1);
    uint64_t total;
    if (!tt_mul_ok(n, dim, &total) || total > SIZE_MAX / 2 || n > SIZE_MAX / 16)
        return tt_err(TT_ENOMEM, "codec: %llu x %u residual values overflow",
                      (unsigned long long)n, dim);
    int64_t bad = tt_find_nonfinite(residuals, n, dim);
    if (bad >= 0)
        return tt_err(TT_EVALUE, "codec: held-out residual %lld has a NaN or Inf value",
                      (long long)bad);
    const uint32_t nbits = (uint32_t)p->nbits, nb = 1u << nbits;
    column col;
    if (p->kind == TT_CODEC_SHARED) {
        /* ColBERTv2: one table from every value of every held-out residual. */
        scratch = tt_alloc(total, sizeof(float), "codec: held-out residual copy");
        s = tt_alloc(total + 1, sizeof *s, "codec: held-out residual sums");
        s2 = tt_alloc(total + 1, sizeof *s2, "codec: held-out residual sums");
        if (!scratch || !s || !s2) {
            rc = TT_ENOMEM;
            goto done;
        }
        memcpy(scratch, residuals, (size_t)total * sizeof(float));
        column_init(&col, scratch, (size_t)total, s, s2);
        float tc[15], tw[16];
        train_table(&col, nbits, p->lloyd_rounds, p->debias, tc, tw);
        rc = tt_codec_init(c, dim, nbits, 1, tc, tw);
        goto done;
    }
    const int adaptive = p->kind == TT_CODEC_ADAPTIVE;
    /* Per dimension: its table at nbits, or (adaptive) at every width with its error. */
    const uint32_t ncut = adaptive ? max_cut : nb - 1, nw = adaptive ? max_w : nb;
    uint32_t block = TT_MIN(dim, TT_CODEC_TRAIN_BLOCK);
    scratch = tt_alloc(n, (uint64_t)block * sizeof(float), "codec: residual column block");
    s = tt_alloc(n + 1, sizeof *s, "codec: residual column sums");
    s2 = tt_alloc(n + 1, sizeof *s2, "codec: residual column sums");
    cut = tt_alloc(dim, (uint64_t)ncut * sizeof *cut, "codec tables");
    w = tt_alloc(dim, (uint64_t)nw * sizeof *w, "codec tables");
    err = tt_alloc(dim, NW * sizeof *err, "codec errors");
    if (!scratch || !s || !s2 || !cut || !w || !err) {
        rc = TT_ENOMEM;
        goto done;
    }
    for (uint32_t d0 = 0; d0 < dim; d0 += block) {
        uint32_t m = TT_MIN(block, dim - d0);
        load_columns(residuals, n, dim, d0, m, scratch);
        for (uint32_t b = 0; b < m; b++) {
            uint32_t d = d0 + b;
            column_init(&col, scratch + (size_t)b * n, (size_t)n, s, s2);
            if (!adaptive) {
                train_table(&col, nbits, p->lloyd_rounds, p->debias, cut + (size_t)d * ncut,
                            w + (size_t)d * nw);
                continue;
            }
            for (uint32_t k = 0; k < NW; k++)
                err[d * NW + k] = train_table(&col, widths[k], p->lloyd_rounds, p->debias,
                                             cut + (size_t)d * ncut + cut_at[k],
                                             w + (size_t)d * nw + w_at[k]);
        }
    }
    if (!adaptive) {
        rc = tt_codec_init(c, dim, nbits, dim, cut, w);
        goto done;
    }
    /* Widths, then positions by decreasing width (ties by dimension), then the tables
     * of the chosen widths in position order. */
    wi = tt_alloc(dim, 1, "codec widths");
    bits = tt_alloc(dim, 1, "codec widths");
    perm = tt_alloc(dim, sizeof *perm, "codec positions");
    float *pc = tt_alloc(dim, (uint64_t)ncut * sizeof *pc, "codec tables");
    float *pw = tt_alloc(dim, (uint64_t)nw * sizeof *pw, "codec tables");
    if (!wi || !bits || !perm || !pc || !pw) {
        free(pc);
        free(pw);
        rc = TT_ENOMEM;
        goto done;
    }
    allocate(dim, (uint64_t)nbits * dim, err, p->importance, wi);
    uint32_t k = 0;
    uint64_t oc = 0, ow = 0;
    for (int x = NW - 1; x >= 0; x--)
        for (uint32_t d = 0; d < dim; d++) {
            if (wi[d] != (uint32_t)x)
                continue;
            uint32_t b = widths[x], cnt = (1u << b) - 1;
            perm[k] = d;
            bits[k++] = (uint8_t)b;
            memcpy(pc + oc, cut + (size_t)d * ncut + cut_at[x], cnt * sizeof *pc);
            memcpy(pw + ow, w + (size_t)d * nw + w_at[x], (cnt + 1) * sizeof *pw);
            oc += cnt;
            ow += cnt + 1;
        }
    rc = tt_codec_init_adaptive(c, dim, nbits, bits, perm, pc, pw);
    free(pc);
    free(pw);
done:
    free(scratch);
    free(s);
    free(s2);
    free(cut);
    free(w);
    free(err);
    free(wi);
    free(bits);
    free(perm);
    return rc;
}

int tt_codec_debias(tt_codec *c, const float *residuals, uint64_t n) {
    if (!c || !residuals || n == 0 || c->kind == TT_CODEC_SHARED)
        return tt_err(TT_EINVAL, "codec: debiasing needs a per-dimension or adaptive codec "
                                 "and residuals");
    const uint32_t dim = c->dim, block = TT_MIN(dim, TT_CODEC_TRAIN_BLOCK);
    float *scratch = tt_alloc(n, (uint64_t)block * sizeof(float), "codec: residual column block");
    double *s = tt_alloc(n + 1, sizeof *s, "codec: residual column sums");
    double *s2 = tt_alloc(n + 1, sizeof *s2, "codec: residual column sums");
    uint32_t *pos = tt_alloc(dim, sizeof *pos, "codec positions");
    int rc = TT_OK;
    if (!scratch || !s || !s2 || !pos) {
        rc = TT_ENOMEM;
        goto done;
    }
    for (uint32_t k = 0; k < dim; k++) /* the position of each input dimension */
        pos[c->perm ? c->perm[k] : k] = k;
    for (uint32_t d0 = 0; d0 < dim; d0 += block) {
        const uint32_t m = TT_MIN(block, dim - d0);
        load_columns(residuals, n, dim, d0, m, scratch);
        for (uint32_t b = 0; b < m; b++) {
            const uint32_t k = pos[d0 + b];
            if (!c->bits[k]) /* a constant: train_table leaves it as it is */
                continue;
            column col;
            column_init(&col, scratch + (size_t)b * n, (size_t)n, s, s2);
            debias_table(&col, 1u << c->bits[k], c->cutoffs + c->coff[k],
                         c->weights + c->woff[k]);
        }
    }
done:
    free(scratch);
    free(s);
    free(s2);
    free(pos);
    return rc;
}

int tt_codec_train(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim, int nbits,
                   int per_dim) {
    tt_codec_params p = {.kind = per_dim ? TT_CODEC_PER_DIM : TT_CODEC_SHARED,
                         .nbits = nbits, .lloyd_rounds = 0};
    return tt_codec_train_ex(c, residuals, n, dim, &p);
}

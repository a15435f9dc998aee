/* Residual codec (ColBERTv2, Santhanam et al. 2022, "ColBERTv2: Effective and
 * Efficient Retrieval via Lightweight Late Interaction", section 3.2 and the
 * ResidualCodec of the reference implementation).
 *
 * Training takes exact quantiles of held-out residuals by selection (no sorting of the
 * whole array and no sample ceiling: torch.quantile refuses inputs above 16M elements,
 * which is why ColBERTv2 cannot use all held-out values of high-dimensional encoders).
 * Encoding counts the cutoffs below each value (torch.bucketize convention) and packs
 * the codes MSB-first; decoding and the per-query lookup tables invert that. */
#include "quant/codec.h"

#include <math.h>
#include <stdlib.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define TT_CODEC_X86 1
#include <immintrin.h>
#endif

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

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

/* The ColBERTv2 quantile levels: cutoffs at i/nb (i = 1..nb-1), weights at (i+0.5)/nb. */
static double cutoff_level(uint32_t nb, uint32_t i) { return (double)(i + 1) / nb; }
static double weight_level(uint32_t nb, uint32_t i) { return (i + 0.5) / nb; }

/* Computes one table (nb-1 cutoffs, nb weights) from x[0..n) (reordered). */
static void table_from_values(float *x, size_t n, uint32_t nb, float *cut, float *w) {
    size_t ks[4 * 16];
    size_t nk = 0;
    for (uint32_t i = 0; i < 2 * nb - 1; i++) {
        double q = i < nb - 1 ? cutoff_level(nb, i) : weight_level(nb, i - (nb - 1));
        size_t lo, hi;
        double frac;
        quantile_ranks(q, n, &lo, &hi, &frac);
        ks[nk++] = lo;
        ks[nk++] = hi;
    }
    qsort(ks, nk, sizeof ks[0], cmp_size);
    size_t u = 0;
    for (size_t i = 0; i < nk; i++)
        if (u == 0 || ks[i] != ks[u - 1])
            ks[u++] = ks[i];
    select_multi(x, 0, n - 1, ks, u);
    for (uint32_t i = 0; i + 1 < nb; i++)
        cut[i] = quantile_value(x, n, cutoff_level(nb, i));
    for (uint32_t i = 0; i < nb; i++)
        w[i] = quantile_value(x, n, weight_level(nb, i));
}

/* ================================================================= tables */

static int valid_nbits(uint32_t nbits) { return nbits == 1 || nbits == 2 || nbits == 4; }

/* Allocates the tables and the transposed cutoff copy; fills the sizes. */
static int codec_alloc(tt_codec *c, uint32_t dim, uint32_t nbits, uint32_t ntables) {
    memset(c, 0, sizeof *c);
    c->dim = dim;
    c->nbits = nbits;
    c->ntables = ntables;
    c->nbuckets = 1u << nbits;
    c->bytes_per_vec = (uint32_t)(((uint64_t)dim * nbits + 7) / 8);
    c->cutoffs = tt_alloc((uint64_t)ntables * (c->nbuckets - 1), sizeof(float), "codec cutoffs");
    c->weights = tt_alloc((uint64_t)ntables * c->nbuckets, sizeof(float), "codec weights");
    if (ntables > 1)
        c->cutoffs_t = tt_alloc((uint64_t)dim * (c->nbuckets - 1), sizeof(float), "codec cutoffs");
    if (!c->cutoffs || !c->weights || (ntables > 1 && !c->cutoffs_t)) {
        tt_codec_free(c);
        return TT_ENOMEM;
    }
    return TT_OK;
}

/* The per-dimension encoder compares a run of consecutive dimensions with cutoff i at
 * once, which wants cutoff i of every dimension contiguous: cutoffs_t[i*dim + d]. */
static void codec_finish(tt_codec *c) {
    uint32_t nc = c->nbuckets - 1;
    if (c->ntables > 1)
        for (uint32_t d = 0; d < c->dim; d++)
            for (uint32_t i = 0; i < nc; i++)
                c->cutoffs_t[(size_t)i * c->dim + d] = c->cutoffs[(size_t)d * nc + i];
}

/* Columns gathered per pass of the per-dimension training: n*64 floats of scratch
 * instead of a transposed copy of the whole sample, with sequential reads of rows. */
#define TT_CODEC_TRAIN_BLOCK 64

int tt_codec_train(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim, int nbits,
                   int per_dim) {
    int rc = TT_OK;
    float *scratch = NULL;
    if (c)
        memset(c, 0, sizeof *c);
    if (!c || !residuals || n == 0 || dim == 0 || nbits < 1 || !valid_nbits((uint32_t)nbits))
        return tt_err(TT_EINVAL, "codec: invalid arguments (n=%llu, dim=%u, nbits=%d)",
                      (unsigned long long)n, dim, nbits);
    uint64_t total;
    if (!tt_mul_ok(n, dim, &total) || total > SIZE_MAX)
        return tt_err(TT_ENOMEM, "codec: %llu x %u residual values overflow",
                      (unsigned long long)n, dim);
    int64_t bad = tt_find_nonfinite(residuals, n, dim);
    if (bad >= 0)
        return tt_err(TT_EVALUE, "codec: held-out residual %lld has a NaN or Inf value",
                      (long long)bad);
    rc = codec_alloc(c, dim, (uint32_t)nbits, per_dim ? dim : 1);
    if (rc < 0)
        return rc;
    uint32_t nb = c->nbuckets, nc = nb - 1;
    if (!per_dim) {
        /* ColBERTv2: one table from every value of every held-out residual. */
        scratch = tt_alloc(total, sizeof(float), "codec: held-out residual copy");
        if (!scratch) {
            rc = TT_ENOMEM;
            goto fail;
        }
        memcpy(scratch, residuals, (size_t)total * sizeof(float));
        table_from_values(scratch, (size_t)total, nb, c->cutoffs, c->weights);
    } else {
        uint32_t block = TT_MIN(dim, TT_CODEC_TRAIN_BLOCK);
        scratch = tt_alloc(n, (uint64_t)block * sizeof(float), "codec: residual column block");
        if (!scratch) {
            rc = TT_ENOMEM;
            goto fail;
        }
        for (uint32_t d0 = 0; d0 < dim; d0 += block) {
            uint32_t m = TT_MIN(block, dim - d0);
            for (uint64_t i = 0; i < n; i++) {
                const float *row = residuals + i * dim + d0;
                for (uint32_t b = 0; b < m; b++)
                    scratch[(size_t)b * n + i] = row[b];
            }
            for (uint32_t b = 0; b < m; b++)
                table_from_values(scratch + (size_t)b * n, (size_t)n, nb,
                                  c->cutoffs + (size_t)(d0 + b) * nc,
                                  c->weights + (size_t)(d0 + b) * nb);
        }
    }
    codec_finish(c);
    free(scratch);
    return TT_OK;
fail:
    free(scratch);
    tt_codec_free(c);
    return rc;
}

int tt_codec_init(tt_codec *c, uint32_t dim, uint32_t nbits, uint32_t ntables,
                  const float *cutoffs, const float *weights) {
    if (c)
        memset(c, 0, sizeof *c);
    if (!c || !cutoffs || !weights || dim == 0 || !valid_nbits(nbits) ||
        (ntables != 1 && ntables != dim))
        return tt_err(TT_EINVAL, "codec: invalid table shape (dim=%u, nbits=%u, tables=%u)",
                      dim, nbits, ntables);
    uint32_t nb = 1u << nbits, nc = nb - 1;
    for (uint64_t t = 0; t < ntables; t++) {
        const float *ct = cutoffs + t * nc, *wt = weights + t * nb;
        for (uint32_t i = 0; i < nb; i++)
            if (!isfinite(wt[i]))
                return tt_err(TT_ECORRUPT, "codec: table %llu: weight %u is not finite",
                              (unsigned long long)t, i);
        for (uint32_t i = 0; i < nc; i++)
            if (!isfinite(ct[i]) || (i > 0 && ct[i] < ct[i - 1]))
                return tt_err(TT_ECORRUPT, "codec: table %llu: cutoff %u is not finite "
                              "or not ascending", (unsigned long long)t, i);
    }
    int rc = codec_alloc(c, dim, nbits, ntables);
    if (rc < 0)
        return rc;
    memcpy(c->cutoffs, cutoffs, (size_t)ntables * nc * sizeof(float));
    memcpy(c->weights, weights, (size_t)ntables * nb * sizeof(float));
    codec_finish(c);
    return TT_OK;
}

void tt_codec_free(tt_codec *c) {
    if (!c)
        return;
    free(c->cutoffs);
    free(c->weights);
    free(c->cutoffs_t);
    c->cutoffs = c->weights = c->cutoffs_t = NULL;
}

/* ============================================================ encode/decode */

/* Dimensions quantized per step: a multiple of 8 so every chunk starts on a byte. */
#define TT_CODEC_CHUNK 64

/* GCC/Clang generic vectors: 4 floats compared at once with plain SSE2 on x86-64 (the
 * baseline) and NEON elsewhere; a comparison yields -1 (true) or 0 per lane. */
typedef float tt_v4f __attribute__((vector_size(16)));
/* Inlined at each call so a constant table stride (0 = shared) specialises the loops. */
#define TT_CODEC_INLINE __attribute__((always_inline))
typedef int32_t tt_v4i __attribute__((vector_size(16)));

static inline tt_v4f load4(const float *p) {
    tt_v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Bucket of value x = number of cutoffs strictly below x, i.e. the index of the first
 * cutoff >= x. This is torch.bucketize(x, cutoffs) with right=False, which is what
 * ColBERTv2's ResidualCodec.binarize calls: a value equal to a cutoff goes to the
 * lower bucket. A NaN compares false and lands in bucket 0. Counting (nb-1 compares)
 * instead of a binary search keeps it branch-free and 4-wide.
 *
 * codes[0..m) for m values r[0..m); cut_t is the cutoff i of value j at
 * cut_t[i*stride + j] (stride 0: a shared table). */
static inline TT_CODEC_INLINE void bucket_codes(const float *r, uint32_t m, const float *cut_t,
                                                size_t stride, uint32_t nc, int32_t *codes) {
    uint32_t j = 0;
    for (; j + 16 <= m; j += 16) {
        tt_v4f v0 = load4(r + j), v1 = load4(r + j + 4), v2 = load4(r + j + 8),
               v3 = load4(r + j + 12);
        tt_v4i a0 = {0, 0, 0, 0}, a1 = a0, a2 = a0, a3 = a0;
        for (uint32_t i = 0; i < nc; i++) {
            const float *t = cut_t + i * stride + j;
            tt_v4f t0, t1, t2, t3;
            if (stride == 0) {
                t0 = t1 = t2 = t3 = (tt_v4f){0, 0, 0, 0} + cut_t[i];
            } else {
                t0 = load4(t), t1 = load4(t + 4), t2 = load4(t + 8), t3 = load4(t + 12);
            }
            a0 -= (tt_v4i)(v0 > t0);
            a1 -= (tt_v4i)(v1 > t1);
            a2 -= (tt_v4i)(v2 > t2);
            a3 -= (tt_v4i)(v3 > t3);
        }
        memcpy(codes + j, &a0, 16);
        memcpy(codes + j + 4, &a1, 16);
        memcpy(codes + j + 8, &a2, 16);
        memcpy(codes + j + 12, &a3, 16);
    }
    for (; j < m; j++) {
        int32_t k = 0;
        for (uint32_t i = 0; i < nc; i++)
            k += r[j] > (stride ? cut_t[i * stride + j] : cut_t[i]);
        codes[j] = k;
    }
}

/* Packs codes[0..m) MSB-first; codes[m..] must be zero up to a multiple of 8/nbits. */
static inline void pack_codes(const int32_t *c, uint32_t m, uint32_t nbits, uint8_t *out) {
    switch (nbits) {
    case 1:
        for (uint32_t j = 0; j < m; j += 8)
            out[j / 8] = (uint8_t)(c[j] << 7 | c[j + 1] << 6 | c[j + 2] << 5 | c[j + 3] << 4 |
                                   c[j + 4] << 3 | c[j + 5] << 2 | c[j + 6] << 1 | c[j + 7]);
        break;
    case 2:
        for (uint32_t j = 0; j < m; j += 4)
            out[j / 4] = (uint8_t)(c[j] << 6 | c[j + 1] << 4 | c[j + 2] << 2 | c[j + 3]);
        break;
    default:
        for (uint32_t j = 0; j < m; j += 2)
            out[j / 2] = (uint8_t)(c[j] << 4 | c[j + 1]);
        break;
    }
}

void tt_codec_encode(const tt_codec *c, const float *residual, uint8_t *packed) {
    int32_t codes[TT_CODEC_CHUNK + 8];
    uint32_t nc = c->nbuckets - 1, dim = c->dim;
    for (uint32_t d0 = 0; d0 < dim; d0 += TT_CODEC_CHUNK) {
        uint32_t m = TT_MIN(TT_CODEC_CHUNK, dim - d0);
        const float *r = residual + d0;
        if (c->ntables == 1) {
            bucket_codes(r, m, c->cutoffs, 0, nc, codes);
        } else if (c->cutoffs_t) {
            bucket_codes(r, m, c->cutoffs_t + d0, dim, nc, codes);
        } else { /* a codec filled by hand: same bucket rule on the row-major tables */
            for (uint32_t j = 0; j < m; j++) {
                const float *t = c->cutoffs + (size_t)(d0 + j) * nc;
                int32_t k = 0;
                for (uint32_t i = 0; i < nc; i++)
                    k += r[j] > t[i];
                codes[j] = k;
            }
        }
        memset(codes + m, 0, 8 * sizeof codes[0]); /* unused trailing bits are zero */
        pack_codes(codes, m, c->nbits, packed + (size_t)d0 * c->nbits / 8);
    }
}

/* out[d] = w[d*stride + code(d)] for the dims of whole bytes, unrolled per width. */
static inline TT_CODEC_INLINE void decode_bytes(const uint8_t *p, uint32_t nbytes, uint32_t nbits,
                                                const float *w, size_t stride, float *out) {
    switch (nbits) {
    case 1:
        for (uint32_t b = 0; b < nbytes; b++, out += 8, w += 8 * stride) {
            uint32_t x = p[b];
            out[0] = w[x >> 7];
            out[1] = w[stride + ((x >> 6) & 1)];
            out[2] = w[2 * stride + ((x >> 5) & 1)];
            out[3] = w[3 * stride + ((x >> 4) & 1)];
            out[4] = w[4 * stride + ((x >> 3) & 1)];
            out[5] = w[5 * stride + ((x >> 2) & 1)];
            out[6] = w[6 * stride + ((x >> 1) & 1)];
            out[7] = w[7 * stride + (x & 1)];
        }
        break;
    case 2:
        for (uint32_t b = 0; b < nbytes; b++, out += 4, w += 4 * stride) {
            uint32_t x = p[b];
            out[0] = w[x >> 6];
            out[1] = w[stride + ((x >> 4) & 3)];
            out[2] = w[2 * stride + ((x >> 2) & 3)];
            out[3] = w[3 * stride + (x & 3)];
        }
        break;
    default:
        for (uint32_t b = 0; b < nbytes; b++, out += 2, w += 2 * stride) {
            uint32_t x = p[b];
            out[0] = w[x >> 4];
            out[1] = w[stride + (x & 15)];
        }
        break;
    }
}

void tt_codec_decode(const tt_codec *c, const uint8_t *packed, float *out) {
    uint32_t nbits = c->nbits, per = 8 / nbits, dim = c->dim;
    size_t stride = c->ntables == 1 ? 0 : c->nbuckets;
    uint32_t full = dim / per; /* bytes whose every code belongs to a dimension */
    if (stride == 0)
        decode_bytes(packed, full, nbits, c->weights, 0, out);
    else
        decode_bytes(packed, full, nbits, c->weights, stride, out);
    for (uint32_t d = full * per; d < dim; d++) {
        uint32_t t = d % per;
        uint32_t code = (packed[full] >> (8 - nbits * (t + 1))) & (c->nbuckets - 1);
        out[d] = c->weights[d * stride + code];
    }
}

/* ================================================================ LUT dot */

/* Sum table of the 4 bits of one nibble: nib[v] = sum over the codes packed in the
 * nibble (v's top bits first) of q[d]*w_d[code]; dimensions past dim contribute 0. */
static void nibble_table(const tt_codec *c, const float *q, uint32_t d0, float nib[16]) {
    uint32_t nbits = c->nbits, nb = c->nbuckets, codes = 4 / nbits;
    size_t stride = c->ntables == 1 ? 0 : nb;
    for (uint32_t v = 0; v < 16; v++) {
        float s = 0;
        for (uint32_t t = 0; t < codes; t++) {
            uint32_t d = d0 + t;
            uint32_t code = (v >> (4 - nbits * (t + 1))) & (nb - 1);
            if (d < c->dim)
                s += q[d] * c->weights[d * stride + code];
        }
        nib[v] = s;
    }
}

/* Each byte's 256 entries are (high-nibble sum) + (low-nibble sum): two 16-entry
 * tables and 256 additions, vectorized, instead of 256*(8/nbits) multiply-adds. */
void tt_codec_build_lut(const tt_codec *c, const float *q, float *lut) {
    uint32_t per = 8 / c->nbits;
    float hi[16], lo[16];
    for (uint32_t b = 0; b < c->bytes_per_vec; b++) {
        nibble_table(c, q, b * per, hi);
        nibble_table(c, q, b * per + per / 2, lo);
        tt_v4f l0 = load4(lo), l1 = load4(lo + 4), l2 = load4(lo + 8), l3 = load4(lo + 12);
        float *L = lut + (size_t)b * 256;
        for (uint32_t h = 0; h < 16; h++) {
            tt_v4f x = (tt_v4f){0, 0, 0, 0} + hi[h];
            tt_v4f s0 = x + l0, s1 = x + l1, s2 = x + l2, s3 = x + l3;
            memcpy(L + h * 16, &s0, 16);
            memcpy(L + h * 16 + 4, &s1, 16);
            memcpy(L + h * 16 + 8, &s2, 16);
            memcpy(L + h * 16 + 12, &s3, 16);
        }
    }
}

float tt_codec_dot_lut_scalar(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    uint32_t b = 0;
    for (; b + 4 <= bytes_per_vec; b += 4) {
        const float *L = lut + (size_t)b * 256;
        s0 += L[packed[b]];
        s1 += L[256 + packed[b + 1]];
        s2 += L[512 + packed[b + 2]];
        s3 += L[768 + packed[b + 3]];
    }
    for (; b < bytes_per_vec; b++)
        s0 += lut[(size_t)b * 256 + packed[b]];
    return (s0 + s1) + (s2 + s3);
}

#ifdef TT_CODEC_X86
/* AVX2: 8 bytes -> 8 indices (byte + lane*256) -> one gather from 8 consecutive
 * 256-entry tables. Two independent accumulators hide the gather latency. */
__attribute__((target("avx2"))) static float dot_lut_avx2(const float *lut, const uint8_t *packed,
                                                         uint32_t nbytes) {
    const __m256i off = _mm256_setr_epi32(0, 256, 512, 768, 1024, 1280, 1536, 1792);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    uint32_t b = 0;
    for (; b + 16 <= nbytes; b += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)(packed + b));
        __m256i i0 = _mm256_add_epi32(_mm256_cvtepu8_epi32(bytes), off);
        __m256i i1 = _mm256_add_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)), off);
        acc0 = _mm256_add_ps(acc0, _mm256_i32gather_ps(lut + (size_t)b * 256, i0, 4));
        acc1 = _mm256_add_ps(acc1, _mm256_i32gather_ps(lut + (size_t)(b + 8) * 256, i1, 4));
    }
    if (b + 8 <= nbytes) {
        __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)(packed + b));
        __m256i i0 = _mm256_add_epi32(_mm256_cvtepu8_epi32(bytes), off);
        acc0 = _mm256_add_ps(acc0, _mm256_i32gather_ps(lut + (size_t)b * 256, i0, 4));
        b += 8;
    }
    __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    float sum = _mm_cvtss_f32(s);
    for (; b < nbytes; b++)
        sum += lut[(size_t)b * 256 + packed[b]];
    return sum;
}
#endif

int tt_codec_have_avx2(void) {
#ifdef TT_CODEC_X86
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

float tt_codec_dot_lut_avx2(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec) {
#ifdef TT_CODEC_X86
    if (__builtin_cpu_supports("avx2"))
        return dot_lut_avx2(lut, packed, bytes_per_vec);
#endif
    return tt_codec_dot_lut_scalar(lut, packed, bytes_per_vec);
}

/* The scalar loop is the default: on the AMD EPYC (Zen) development machine the AVX2
 * gather was no faster (3584-d: ~530 ns scalar vs ~570 ns gather at 2 bits; 128-d: 14
 * vs 24 ns), see doc/benchmarks.md. Gathers are microcoded on Zen; re-measure before
 * dispatching to it on other CPUs (bench/bench_codec). */
float tt_codec_dot_lut(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec) {
    return tt_codec_dot_lut_scalar(lut, packed, bytes_per_vec);
}

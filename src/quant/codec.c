/* Residual codec: the tables and the layout (quant/codec.h), encoding, the scalar
 * decoder and the per-query lookup tables (ColBERTv2, Santhanam et al. 2022,
 * "ColBERTv2: Effective and Efficient Retrieval via Lightweight Late Interaction",
 * section 3.2 and the ResidualCodec of the reference implementation, generalised to
 * per-dimension and adaptive widths). Training is in codec_train.c.
 *
 * Encoding counts the cutoffs below each value (torch.bucketize convention) and packs
 * the codes MSB-first; decoding and the per-query lookup tables invert that. */
#include "quant/codec.h"

#include <math.h>
#include <stdlib.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define TT_CODEC_X86 1
#include <immintrin.h>
#endif

/* ================================================================= tables */

/* Allocates the tables and the layout of a codec whose position k has width bits[k]
 * (bits NULL: nbits everywhere; shared: one table) and fills the layout. */
static int codec_alloc(tt_codec *c, uint32_t dim, uint32_t nbits, int kind, const uint8_t *bits) {
    memset(c, 0, sizeof *c);
    c->dim = dim;
    c->nbits = nbits;
    c->kind = kind;
    c->ntables = kind == TT_CODEC_SHARED ? 1 : dim;
    c->nbuckets = 1u << nbits;
    c->bytes_per_vec = (uint32_t)(((uint64_t)dim * nbits + 7) / 8);
    c->bits = tt_alloc(dim, 1, "codec layout");
    c->bitoff = tt_alloc(dim, sizeof *c->bitoff, "codec layout");
    c->woff = tt_alloc(dim, sizeof *c->woff, "codec layout");
    c->coff = tt_alloc(dim, sizeof *c->coff, "codec layout");
    if (!c->bits || !c->bitoff || !c->woff || !c->coff)
        goto oom;
    uint64_t bit = 0, nw = 0, nc = 0;
    for (uint32_t k = 0; k < dim; k++) {
        uint32_t b = bits ? bits[k] : nbits;
        c->bits[k] = (uint8_t)b;
        c->bitoff[k] = (uint32_t)bit;
        bit += b;
        c->woff[k] = c->coff[k] = 0;
        if (kind == TT_CODEC_SHARED)
            continue;
        c->woff[k] = (uint32_t)nw;
        c->coff[k] = (uint32_t)nc;
        nw += 1u << b;
        nc += (1u << b) - 1;
    }
    c->nweights = kind == TT_CODEC_SHARED ? c->nbuckets : nw;
    c->ncutoffs = kind == TT_CODEC_SHARED ? c->nbuckets - 1 : nc;
    c->cutoffs = tt_alloc(c->ncutoffs ? c->ncutoffs : 1, sizeof(float), "codec cutoffs");
    c->weights = tt_alloc(c->nweights, sizeof(float), "codec weights");
    if (kind != TT_CODEC_SHARED)
        c->cutoffs_t = tt_alloc(c->ncutoffs ? c->ncutoffs : 1, sizeof(float), "codec cutoffs");
    if (!c->cutoffs || !c->weights || (kind != TT_CODEC_SHARED && !c->cutoffs_t))
        goto oom;
    return TT_OK;
oom:
    tt_codec_free(c);
    memset(c, 0, sizeof *c);
    return TT_ENOMEM;
}

/* The runs of equal widths, and the cutoffs transposed per run: the encoder compares a
 * run of consecutive positions with cutoff i at once, which wants cutoff i of each of
 * them contiguous. */
static void codec_finish(tt_codec *c) {
    c->nruns = 0;
    for (uint32_t k = 0; k < c->dim;) {
        uint32_t e = k + 1;
        while (e < c->dim && c->bits[e] == c->bits[k])
            e++;
        tt_codec_run *r = &c->runs[c->nruns++];
        r->w = c->bits[k];
        r->k0 = k;
        r->n = e - k;
        r->ct = NULL;
        if (c->cutoffs_t && r->w) {
            uint32_t nc = (1u << r->w) - 1;
            float *t = c->cutoffs_t + c->coff[k];
            for (uint32_t j = 0; j < r->n; j++)
                for (uint32_t i = 0; i < nc; i++)
                    t[(size_t)i * r->n + j] = c->cutoffs[c->coff[k + j] + i];
            r->ct = t;
        }
        k = e;
    }
}

/* Finite weights and finite ascending cutoffs, table by table. */
static int check_tables(const tt_codec *c) {
    for (uint32_t t = 0; t < c->ntables; t++) {
        uint32_t b = c->bits[t], nb = 1u << b;
        const float *ct = c->cutoffs + c->coff[t], *wt = c->weights + c->woff[t];
        for (uint32_t i = 0; i < nb; i++)
            if (!isfinite(wt[i]))
                return tt_err(TT_ECORRUPT, "codec: table %u: weight %u is not finite", t, i);
        for (uint32_t i = 0; i + 1 < nb; i++)
            if (!isfinite(ct[i]) || (i > 0 && ct[i] < ct[i - 1]))
                return tt_err(TT_ECORRUPT, "codec: table %u: cutoff %u is not finite or not "
                              "ascending", t, i);
    }
    return TT_OK;
}

/* The last step of both initialisers: copies the tables into an allocated codec,
 * checks them and derives the lookup layout; on failure frees and zeroes *c. */
static int codec_fill(tt_codec *c, const float *cutoffs, const float *weights) {
    memcpy(c->cutoffs, cutoffs, (size_t)c->ncutoffs * sizeof(float));
    memcpy(c->weights, weights, (size_t)c->nweights * sizeof(float));
    int rc = check_tables(c);
    if (rc) {
        tt_codec_free(c);
        memset(c, 0, sizeof *c);
        return rc;
    }
    codec_finish(c);
    return TT_OK;
}

int tt_codec_init(tt_codec *c, uint32_t dim, uint32_t nbits, uint32_t ntables,
                  const float *cutoffs, const float *weights) {
    if (c)
        memset(c, 0, sizeof *c);
    if (!c || !cutoffs || !weights || dim == 0 || !tt_codec_nbits_ok(TT_CODEC_PER_DIM, nbits) ||
        (ntables != 1 && ntables != dim))
        return tt_err(TT_EINVAL, "codec: invalid table shape (dim=%u, nbits=%u, tables=%u)",
                      dim, nbits, ntables);
    int rc = codec_alloc(c, dim, nbits, ntables == 1 ? TT_CODEC_SHARED : TT_CODEC_PER_DIM, NULL);
    if (rc < 0)
        return rc;
    return codec_fill(c, cutoffs, weights);
}

int tt_codec_init_adaptive(tt_codec *c, uint32_t dim, uint32_t nbits, const uint8_t *bits,
                           const uint32_t *perm, const float *cutoffs, const float *weights) {
    if (c)
        memset(c, 0, sizeof *c);
    if (!c || !bits || !perm || !cutoffs || !weights || dim == 0 ||
        !tt_codec_nbits_ok(TT_CODEC_ADAPTIVE, nbits))
        return tt_err(TT_EINVAL, "codec: invalid adaptive codec (dim=%u, nbits=%u)", dim, nbits);
    uint64_t sum = 0;
    for (uint32_t k = 0; k < dim; k++) {
        uint32_t b = bits[k];
        if ((b > 4 && b != 8) || (k > 0 && b > bits[k - 1]))
            return tt_err(TT_ECORRUPT, "codec: position %u: width %u (widths are 0, 1, 2, 3, "
                          "4 or 8, in non-increasing order)", k, b);
        sum += b;
    }
    if (sum > (uint64_t)nbits * dim)
        return tt_err(TT_ECORRUPT, "codec: widths add up to %llu bits, more than %u x %u",
                      (unsigned long long)sum, nbits, dim);
    uint8_t *seen = tt_calloc(dim, 1, "codec positions");
    if (!seen)
        return TT_ENOMEM;
    for (uint32_t k = 0; k < dim; k++) {
        if (perm[k] >= dim || seen[perm[k]]) {
            free(seen);
            return tt_err(TT_ECORRUPT, "codec: position %u: input dimension %u is out of range "
                          "or repeated", k, perm[k]);
        }
        seen[perm[k]] = 1;
    }
    free(seen);
    int rc = codec_alloc(c, dim, nbits, TT_CODEC_ADAPTIVE, bits);
    if (rc < 0)
        return rc;
    bool identity = true;
    for (uint32_t k = 0; k < dim; k++)
        identity = identity && perm[k] == k;
    if (!identity && !(c->perm = tt_alloc(dim, sizeof *c->perm, "codec positions"))) {
        tt_codec_free(c);
        memset(c, 0, sizeof *c);
        return TT_ENOMEM;
    }
    if (c->perm)
        memcpy(c->perm, perm, (size_t)dim * sizeof *perm);
    return codec_fill(c, cutoffs, weights);
}

uint32_t tt_codec_n8(const tt_codec *c) {
    uint32_t n = 0;
    while (n < c->dim && c->bits[n] == 8)
        n++;
    return n;
}

void tt_codec_scale(const tt_codec *c, float s, float *d) {
    for (uint32_t k = tt_codec_n8(c); k < c->dim; k++)
        d[k] *= s;
}

float tt_codec_vector_scale(const tt_codec *c, const float *r, const float *d) {
    double rr = 0, rd = 0, dd = 0;
    for (uint32_t k = tt_codec_n8(c); k < c->dim; k++) {
        rr += (double)r[k] * r[k];
        rd += (double)r[k] * d[k];
        dd += (double)d[k] * d[k];
    }
    if (!(rd > 0))
        return 0.0f;
    /* A residual far smaller than its decoded value (a vector that is nearly its own
     * centroid) has a tiny <r, d>: the scaled decode may not outgrow twice |r|. */
    const double cap = 2 * sqrt(rr / dd);
    return (float)TT_MIN(rr / rd, cap);
}

uint32_t tt_codec_sketch_bytes(const tt_codec *c) {
    if (c->kind != TT_CODEC_ADAPTIVE || !c->bits)
        return 0;
    uint32_t n = 0;
    while (n < c->dim && c->bits[n] == 8)
        n++;
    return n <= TT_SKETCH_MAX ? n : 0;
}

int tt_codec_clone(tt_codec *dst, const tt_codec *src) {
    if (src->kind != TT_CODEC_ADAPTIVE)
        return tt_codec_init(dst, src->dim, src->nbits, src->ntables, src->cutoffs,
                             src->weights);
    uint32_t *id = NULL;
    if (!src->perm) {
        if (!(id = tt_alloc(src->dim, sizeof *id, "codec positions")))
            return TT_ENOMEM;
        for (uint32_t k = 0; k < src->dim; k++)
            id[k] = k;
    }
    int rc = tt_codec_init_adaptive(dst, src->dim, src->nbits, src->bits,
                                    src->perm ? src->perm : id, src->cutoffs, src->weights);
    free(id);
    return rc;
}

void tt_codec_free(tt_codec *c) {
    if (!c)
        return;
    free(c->cutoffs);
    free(c->weights);
    free(c->cutoffs_t);
    free(c->bits);
    free(c->bitoff);
    free(c->woff);
    free(c->coff);
    free(c->perm);
    c->cutoffs = c->weights = c->cutoffs_t = NULL;
    c->bits = NULL;
    c->bitoff = c->woff = c->coff = c->perm = NULL;
    c->nruns = 0;
}

void tt_codec_to_positions(const tt_codec *c, const float *x, float *out) {
    if (!c->perm) {
        memcpy(out, x, (size_t)c->dim * sizeof *x);
        return;
    }
    for (uint32_t k = 0; k < c->dim; k++)
        out[k] = x[c->perm[k]];
}

void tt_codec_to_input(const tt_codec *c, const float *x, float *out) {
    if (!c->perm) {
        memcpy(out, x, (size_t)c->dim * sizeof *x);
        return;
    }
    for (uint32_t k = 0; k < c->dim; k++)
        out[c->perm[k]] = x[k];
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

/* Adaptive: run by run (one width each), each code then or-ed in at its bit offset
 * (into two bytes when it straddles them: 3-bit codes). */
static void encode_adaptive(const tt_codec *c, const float *residual, uint8_t *packed) {
    int32_t codes[TT_CODEC_CHUNK];
    memset(packed, 0, c->bytes_per_vec);
    for (uint32_t r = 0; r < c->nruns; r++) {
        const tt_codec_run *run = &c->runs[r];
        if (run->w == 0)
            continue;
        const uint32_t nc = (1u << run->w) - 1;
        for (uint32_t j0 = 0; j0 < run->n; j0 += TT_CODEC_CHUNK) {
            uint32_t m = TT_MIN(TT_CODEC_CHUNK, run->n - j0);
            bucket_codes(residual + run->k0 + j0, m, run->ct + j0, run->n, nc, codes);
            for (uint32_t t = 0; t < m; t++) {
                uint32_t off = c->bitoff[run->k0 + j0 + t];
                uint32_t x = (uint32_t)codes[t] << (16 - run->w - (off & 7));
                packed[off >> 3] |= (uint8_t)(x >> 8);
                if (x & 0xff)
                    packed[(off >> 3) + 1] |= (uint8_t)x;
            }
        }
    }
}

void tt_codec_encode(const tt_codec *c, const float *residual, uint8_t *packed) {
    if (c->kind == TT_CODEC_ADAPTIVE) {
        encode_adaptive(c, residual, packed);
        return;
    }
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
    if (c->kind == TT_CODEC_ADAPTIVE) { /* the scalar definition; search uses tt_resdec */
        for (uint32_t k = 0; k < c->dim; k++)
            out[k] = tt_codec_value(c, packed, k);
        return;
    }
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

/* Adaptive: each position adds q[k] * its weight to the 256 entries of its byte; the
 * 0-bit positions' constant goes to byte 0's. */
static void build_lut_adaptive(const tt_codec *c, const float *q, float *lut) {
    memset(lut, 0, (size_t)c->bytes_per_vec * 256 * sizeof *lut);
    float cst = 0;
    for (uint32_t k = 0; k < c->dim; k++) {
        const uint32_t w = c->bits[k], off = c->bitoff[k];
        const float *wt = c->weights + c->woff[k];
        if (w == 0) {
            cst += q[k] * wt[0];
            continue;
        }
        const uint32_t sh = 8 - w - (off & 7), mask = (1u << w) - 1;
        float *L = lut + (size_t)(off >> 3) * 256;
        for (uint32_t x = 0; x < 256; x++)
            L[x] += q[k] * wt[(x >> sh) & mask];
    }
    for (uint32_t x = 0; x < 256; x++)
        lut[x] += cst;
}

bool tt_codec_lut_ok(const tt_codec *c) {
    for (uint32_t r = 0; r < c->nruns; r++)
        if (c->runs[r].w == 3)
            return false;
    return true;
}

/* Each byte's 256 entries are (high-nibble sum) + (low-nibble sum): two 16-entry
 * tables and 256 additions, vectorized, instead of 256*(8/nbits) multiply-adds. */
void tt_codec_build_lut(const tt_codec *c, const float *q, float *lut) {
    if (!tt_codec_lut_ok(c)) {
        for (uint64_t i = 0; i < (uint64_t)c->bytes_per_vec * 256; i++)
            lut[i] = NAN;
        return;
    }
    if (c->kind == TT_CODEC_ADAPTIVE) {
        build_lut_adaptive(c, q, lut);
        return;
    }
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

/* The residual decoder: unpacks packed residuals (layout of quant/codec.h) to floats
 * through byte tables, adding the centroid rows when asked (c + r for stage 4). */
#include "search/decode.h"

#include "common/simd.h"

#include <stdlib.h>

/* Largest per-byte-position decode table (per-dimension codecs): 512 KiB, so that it
 * stays in L2 (dim <= 512 at any nbits). */
#define RESDEC_TABLE_BYTES (512u << 10)

/* Bucket indices of every byte value at width w: (8/w) per byte, MSB-first. */
static int bucket_table(tt_resdec *d, uint32_t w) {
    if (d->bucket[w])
        return TT_OK;
    const uint32_t pb = 8 / w, mask = (1u << w) - 1;
    if (!(d->bucket[w] = tt_alloc(256 * pb, 1, "residual decode table")))
        return TT_ENOMEM;
    for (uint32_t x = 0; x < 256; x++)
        for (uint32_t t = 0; t < pb; t++)
            d->bucket[w][x * pb + t] = (uint8_t)((x >> (8 - w * (t + 1))) & mask);
    return TT_OK;
}

static uint64_t ptab_bytes(const tt_resdec_run *r) {
    return (uint64_t)r->nbytes * 256 * r->pb * sizeof(float);
}

/* Expands a run's weights per byte position: decoding is then one table row copy per
 * byte, as with a shared table. */
static int expand_run(tt_resdec_run *r) {
    if (!(r->ptab = tt_alloc((uint64_t)r->nbytes * 256 * r->pb, sizeof *r->ptab,
                             "residual decode table")))
        return TT_ENOMEM;
    for (uint32_t b = 0; b < r->nbytes; b++)
        for (uint32_t x = 0; x < 256; x++)
            for (uint32_t t = 0; t < r->pb; t++)
                r->ptab[((uint64_t)b * 256 + x) * r->pb + t] =
                    r->weights[(uint64_t)(b * r->pb + t) * r->nb + r->bucket[x * r->pb + t]];
    return TT_OK;
}

int tt_resdec_init(tt_resdec *d, const tt_codec *c) {
    memset(d, 0, sizeof *d);
    d->dim = c->dim;
    d->nbits = c->nbits;
    d->bytes_per_vec = c->bytes_per_vec;
    d->codec = c;
    d->shared = c->kind == TT_CODEC_SHARED;
    int st;
    if (d->shared) {
        if (!tt_codec_nbits_ok(TT_CODEC_SHARED, c->nbits))
            return tt_err(TT_EINVAL, "residual decoder: nbits %u not in {1, 2, 4}", c->nbits);
        const uint32_t pb = d->per_byte = 8 / c->nbits, mask = (1u << c->nbits) - 1;
        d->weights = c->weights;
        d->tab = tt_alloc(256 * pb, sizeof *d->tab, "residual decode table");
        if (!d->tab)
            return TT_ENOMEM;
        for (uint32_t x = 0; x < 256; x++)
            for (uint32_t t = 0; t < pb; t++)
                d->tab[x * pb + t] = c->weights[(x >> (8 - c->nbits * (t + 1))) & mask];
        return TT_OK;
    }
    /* Runs: each codec run's codes that fill whole bytes of their own; the others are
     * loose. */
    if (!(d->loose = tt_alloc(c->dim, sizeof *d->loose, "residual decoder")))
        return TT_ENOMEM;
    for (uint32_t i = 0; i < c->nruns; i++) {
        const tt_codec_run *cr = &c->runs[i];
        uint32_t a = 0;
        if (cr->w)
            while (a < cr->n && (c->bitoff[cr->k0 + a] & 7))
                a++;
        /* whole groups: 1 byte of 8 / w codes, or 3 bytes of 8 3-bit codes */
        const uint32_t gp = cr->w == 3 ? 8 : 8 / TT_MAX(cr->w, 1u), gb = cr->w == 3 ? 3 : 1;
        const uint32_t groups = cr->w ? (cr->n - a) / gp : 0;
        const uint32_t nbytes = groups * gb, covered = groups * gp;
        for (uint32_t j = 0; j < cr->n; j++)
            if (j < a || j >= a + covered)
                d->loose[d->nloose++] = cr->k0 + j;
        if (!nbytes)
            continue;
        tt_resdec_run *r = &d->runs[d->nruns++];
        r->w = cr->w;
        r->pb = gp;
        r->nb = 1u << cr->w;
        r->k0 = cr->k0 + a;
        r->byte0 = c->bitoff[r->k0] / 8;
        r->nbytes = nbytes;
        r->weights = c->weights + c->woff[r->k0];
        if (cr->w == 3)
            continue; /* no byte tables: codes straddle bytes */
        if ((st = bucket_table(d, cr->w)))
            return st;
        r->bucket = d->bucket[cr->w];
    }
    /* Expanded tables, smallest runs first, while they fit in RESDEC_TABLE_BYTES. */
    uint64_t used = 0;
    for (;;) {
        tt_resdec_run *best = NULL;
        for (uint32_t i = 0; i < d->nruns; i++)
            if (!d->runs[i].ptab && d->runs[i].w != 3 &&
                used + ptab_bytes(&d->runs[i]) <= RESDEC_TABLE_BYTES &&
                (!best || ptab_bytes(&d->runs[i]) < ptab_bytes(best)))
                best = &d->runs[i];
        if (!best)
            break;
        if ((st = expand_run(best)))
            return st;
        used += ptab_bytes(best);
    }
#ifdef TT_AVX512
    __builtin_cpu_init();
    d->avx512 = __builtin_cpu_supports("avx512f");
#endif
    return TT_OK;
}

void tt_resdec_free(tt_resdec *d) {
    if (!d)
        return;
    free(d->tab);
    for (uint32_t i = 0; i < d->nruns; i++)
        free(d->runs[i].ptab);
    free(d->loose);
    for (uint32_t w = 0; w < 9; w++)
        free(d->bucket[w]);
    memset(d, 0, sizeof *d);
}

/* Asks for the start of a row of n floats (at most 512 bytes: the hardware prefetcher
 * follows a longer one). */
static inline void prefetch_row(const float *row, uint32_t n) {
    for (uint32_t j = 0; j < n && j < 128; j += 16)
        __builtin_prefetch(row + j);
}

/* o[j] = c[j] + r[j] for j < n (n a small constant where it is inlined). */
static inline void add_floats(float *o, const float *c, const float *r, uint32_t n) {
    uint32_t j = 0;
#ifdef TT_SSE2
    for (; j + 4 <= n; j += 4)
        _mm_storeu_ps(o + j, _mm_add_ps(_mm_loadu_ps(c + j), _mm_loadu_ps(r + j)));
#endif
    for (; j < n; j++)
        o[j] = c[j] + r[j];
}

/* Writes the table row of each byte (per_byte floats, a constant size per case so that
 * the loops compile to single vector moves), plus the centroid row c if there is one. */
#define DECODE_ROWS(PB, ROW)                                                                \
    if (c) {                                                                                \
        for (uint32_t b = 0; b < full; b++) {                                               \
            add_floats(o + b * (PB), c + b * (PB), (ROW), (PB));                            \
        }                                                                                   \
    } else {                                                                                \
        for (uint32_t b = 0; b < full; b++)                                                 \
            memcpy(o + b * (PB), (ROW), (PB) * sizeof(float));                              \
    }

#ifdef TT_AVX512
/* A run of 1- or 2-bit codes without expanded tables: 16 positions (2 * w bytes,
 * byte-aligned) at a time. Lane j's bucket is a shift of the chunk read as a
 * little-endian word (fields are MSB-first), and its weight weights[(d0 + j) * nb +
 * bucket] one of the chunk's 16 * nb consecutive weights (32 or 64 floats), picked with
 * vpermi2ps; then the centroid is added, as in the scalar loop, so both write the same
 * floats. Returns the positions done (a multiple of 16). */
AVX512_FN static uint32_t decode_bucket_avx512(const tt_resdec_run *run, const uint8_t *p,
                                               const float *c, float *o) {
    const uint32_t nbits = run->w, nb = run->nb, full = run->nbytes * run->pb / 16 * 16;
    if (nbits > 2)
        return 0;
    int32_t sh[16], lane[16];
    for (uint32_t j = 0; j < 16; j++) {
        uint32_t bit = j * nbits;
        sh[j] = (int32_t)(8 * (bit / 8) + (8 - nbits - bit % 8));
        lane[j] = (int32_t)(j * nb);
    }
    const __m512i shv = _mm512_loadu_si512(sh), lanev = _mm512_loadu_si512(lane);
    const __m512i mask = _mm512_set1_epi32((int)nb - 1), bit5 = _mm512_set1_epi32(32);
    for (uint32_t d0 = 0; d0 < full; d0 += 16) {
        uint32_t w;
        if (nbits == 2) {
            memcpy(&w, p + d0 / 4, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + d0 / 8, 2);
            w = h;
        }
        const __m512i idx = _mm512_add_epi32(
            lanev, _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w), shv), mask));
        const float *t = run->weights + (uint64_t)d0 * nb;
        __m512 r = _mm512_permutex2var_ps(_mm512_loadu_ps(t), idx, _mm512_loadu_ps(t + 16));
        if (nb == 4) {
            __m512 hi =
                _mm512_permutex2var_ps(_mm512_loadu_ps(t + 32), idx, _mm512_loadu_ps(t + 48));
            r = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, bit5), r, hi);
        }
        if (c)
            r = _mm512_add_ps(_mm512_loadu_ps(c + d0), r);
        _mm512_storeu_ps(o + d0, r);
    }
    return full;
}

/* A run of 3-bit codes: 16 positions (two groups of 3 bytes) at a time. The 6 bytes,
 * read big-endian, hold codes 0-7 in their top 24 bits and 8-15 in the low 24; lane j
 * shifts its group's word by 21 - 3 (j % 8). Its weight weights[(d0 + j) * 8 + code] is
 * one of the 128 consecutive weights of the 16 positions: four vpermi2ps over 32 each,
 * lanes 4i..4i+3 taken from the i-th. Then the centroid, as in the scalar loop.
 * Returns the positions done (a multiple of 16). */
AVX512_FN static uint32_t decode3_avx512(const tt_resdec_run *run, const uint8_t *p,
                                         const float *c, float *o) {
    const uint32_t full = run->nbytes / 6 * 16;
    int32_t sh[16], lane[16];
    for (uint32_t j = 0; j < 16; j++) {
        sh[j] = (int32_t)(21 - 3 * (j % 8));
        lane[j] = (int32_t)(j * 8);
    }
    const __m512i shv = _mm512_loadu_si512(sh), lanev = _mm512_loadu_si512(lane);
    const __m512i mask = _mm512_set1_epi32(7);
    for (uint32_t d0 = 0; d0 < full; d0 += 16) {
        uint64_t v = 0;
        memcpy(&v, p + d0 / 8 * 3, 6);
        v = __builtin_bswap64(v) >> 16;
        const __m512i x = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32((int)(v >> 24)),
                                                  _mm512_set1_epi32((int)(v & 0xFFFFFF)));
        const __m512i idx =
            _mm512_add_epi32(lanev, _mm512_and_si512(_mm512_srlv_epi32(x, shv), mask));
        const float *t = run->weights + (uint64_t)d0 * 8;
        __m512 r = _mm512_permutex2var_ps(_mm512_loadu_ps(t), idx, _mm512_loadu_ps(t + 16));
        for (uint32_t i = 1; i < 4; i++) {
            __m512 ri = _mm512_permutex2var_ps(_mm512_loadu_ps(t + 32 * i), idx,
                                               _mm512_loadu_ps(t + 32 * i + 16));
            r = _mm512_mask_blend_ps((__mmask16)(0xFu << (4 * i)), r, ri);
        }
        if (c)
            r = _mm512_add_ps(_mm512_loadu_ps(c + d0), r);
        _mm512_storeu_ps(o + d0, r);
    }
    return full;
}
#endif

/* A 3-bit run, portable: each group of 3 bytes read as a 24-bit big-endian word holds
 * 8 codes, MSB-first. Positions from g0 (a multiple of 8) on. */
static void decode_run3(const tt_resdec_run *run, uint32_t g0, const uint8_t *p,
                        const float *c, float *o) {
    const uint32_t groups = run->nbytes / 3;
    for (uint32_t g = g0 / 8; g < groups; g++) {
        const uint8_t *q = p + 3 * g;
        const uint32_t x = (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
        const float *w = run->weights + (uint64_t)g * 64;
        for (uint32_t j = 0; j < 8; j++)
            o[8 * g + j] = (c ? c[8 * g + j] : 0.0f) + w[j * 8 + ((x >> (21 - 3 * j)) & 7)];
    }
}

/* One run of one vector: p, c and o start at the run's first byte and position. */
static inline void decode_run(const tt_resdec *d, const tt_resdec_run *run, const uint8_t *p,
                              const float *c, float *o) {
    const uint32_t full = run->nbytes, pb = run->pb, nb = run->nb;
    if (run->w == 3) {
        uint32_t k0 = 0;
#ifdef TT_AVX512
        if (d->avx512)
            k0 = decode3_avx512(run, p, c, o);
#endif
        decode_run3(run, k0, p, c, o);
        return;
    }
    if (run->ptab) {
        const float *t = run->ptab;
        switch (pb) {
        case 1: DECODE_ROWS(1, t + (b * 256 + p[b])) break;
        case 2: DECODE_ROWS(2, t + (b * 256 + p[b]) * 2) break;
        case 4: DECODE_ROWS(4, t + (b * 256 + p[b]) * 4) break;
        default: DECODE_ROWS(8, t + (b * 256 + p[b]) * 8) break;
        }
        return;
    }
    uint32_t b0 = 0;
#ifdef TT_AVX512
    if (d->avx512)
        b0 = decode_bucket_avx512(run, p, c, o) / pb;
#else
    (void)d;
#endif
    for (uint32_t b = b0; b < full; b++) {
        const uint8_t *bk = run->bucket + p[b] * pb;
        const float *w = run->weights + (uint64_t)b * pb * nb;
        for (uint32_t j = 0; j < pb; j++)
            o[b * pb + j] = (c ? c[b * pb + j] : 0.0f) + w[j * nb + bk[j]];
    }
}

void tt_resdec_decode_add(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                          const float *centroids, const uint32_t *codes, float *out) {
    const uint32_t dim = d->dim;
    for (uint64_t v = 0; v < n; v++) {
        const uint8_t *p = packed + v * d->bytes_per_vec;
        const float *c = centroids ? centroids + (uint64_t)codes[v] * dim : NULL;
        float *o = out + v * dim;
        /* Centroid rows are random reads: ask for the one four vectors ahead. */
        if (c && v + 4 < n)
            prefetch_row(centroids + (uint64_t)codes[v + 4] * dim, dim);
        if (d->shared) {
            const uint32_t pb = d->per_byte, full = dim / pb, rem = dim % pb;
            const float *t = d->tab;
            switch (pb) {
            case 2: DECODE_ROWS(2, t + p[b] * 2) break;
            case 4: DECODE_ROWS(4, t + p[b] * 4) break;
            default: DECODE_ROWS(8, t + p[b] * 8) break;
            }
            if (rem) {
                const float *r = t + p[full] * pb;
                for (uint32_t j = 0; j < rem; j++)
                    o[full * pb + j] = (c ? c[full * pb + j] : 0.0f) + r[j];
            }
            continue;
        }
        for (uint32_t i = 0; i < d->nruns; i++) {
            const tt_resdec_run *run = &d->runs[i];
            decode_run(d, run, p + run->byte0, c ? c + run->k0 : NULL, o + run->k0);
        }
        for (uint32_t i = 0; i < d->nloose; i++) {
            uint32_t k = d->loose[i];
            o[k] = (c ? c[k] : 0.0f) + tt_codec_value(d->codec, p, k);
        }
    }
}

void tt_resdec_decode(const tt_resdec *d, const uint8_t *packed, uint64_t n, float *out) {
    tt_resdec_decode_add(d, packed, n, NULL, NULL, out);
}

/* The residual decoder: unpacks packed residuals (layout of quant/codec.h) to floats
 * through byte tables, adding the centroid rows when asked (c + r for stage 4). */
#include "search/decode.h"

#include "common/simd.h"

#include <math.h>
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
                r->ptab[((uint64_t)b * 256 + x) * r->pb + t] = tt_resdec_run_weight(r, b, x, t);
    return TT_OK;
}

/* Positions a run covers. */
static uint32_t run_positions(const tt_resdec_run *r) {
    return r->w == 3 ? r->nbytes / 3 * 8 : r->nbytes * r->pb;
}

/* The run's weights of each block of 8 positions, bucket by bucket (wt8), for the AVX2
 * loop: a bucket's 8 weights are then one load. */
static int transpose_run(tt_resdec_run *r) {
    const uint32_t blocks = run_positions(r) / 8, nb = r->nb;
    if (!blocks)
        return TT_OK;
    if (!(r->wt8 = tt_alloc((uint64_t)blocks * nb * 8, sizeof *r->wt8, "residual decode table")))
        return TT_ENOMEM;
    for (uint64_t g = 0; g < blocks; g++)
        for (uint32_t b = 0; b < nb; b++)
            for (uint32_t j = 0; j < 8; j++)
                r->wt8[(g * nb + b) * 8 + j] = r->weights[(g * 8 + j) * nb + b];
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
    /* The fused kernels sum the loose positions of 1 bit or more vector by vector and
     * add the 0-bit ones' constant, summed once a call (zero_dots). */
    if (!(d->lsplit = tt_alloc(TT_MAX(d->nloose, 1u), sizeof *d->lsplit, "residual decoder")))
        return TT_ENOMEM;
    for (uint32_t i = 0; i < d->nloose; i++)
        if (c->bits[d->loose[i]])
            d->lsplit[d->nloose_w++] = d->loose[i];
    for (uint32_t i = 0, z = d->nloose_w; i < d->nloose; i++)
        if (!c->bits[d->loose[i]])
            d->lsplit[z++] = d->loose[i];
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
#ifdef TT_AVX2
    d->avx2 = tt_cpu_avx2();
    d->lanes = d->avx2;
    for (uint32_t i = 0; i < d->nruns && d->avx2; i++)
        if (!d->runs[i].ptab && d->runs[i].w <= 3 && (st = transpose_run(&d->runs[i])))
            return st;
#endif
    return TT_OK;
}

void tt_resdec_free(tt_resdec *d) {
    if (!d)
        return;
    free(d->tab);
    for (uint32_t i = 0; i < d->nruns; i++) {
        free(d->runs[i].ptab);
        free(d->runs[i].wt8);
    }
    free(d->loose);
    free(d->lsplit);
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
/* The constants of a run of 1- or 2-bit codes without expanded tables, decoded 16
 * positions (2 * w bytes, byte-aligned) at a time: lane j's bucket is a shift of the
 * chunk read as a little-endian word (fields are MSB-first), and its weight
 * weights[(d0 + j) * nb + bucket] one of the chunk's 16 * nb consecutive weights (32 or
 * 64 floats), picked with vpermi2ps. */
typedef struct bucket16 {
    __m512i sh, lane, mask, bit5;
} bucket16;

AVX512_FN static inline bucket16 bucket16_init(uint32_t nbits, uint32_t nb) {
    int32_t sh[16], lane[16];
    for (uint32_t j = 0; j < 16; j++) {
        uint32_t bit = j * nbits;
        sh[j] = (int32_t)(8 * (bit / 8) + (8 - nbits - bit % 8));
        lane[j] = (int32_t)(j * nb);
    }
    return (bucket16){_mm512_loadu_si512(sh), _mm512_loadu_si512(lane),
                      _mm512_set1_epi32((int)nb - 1), _mm512_set1_epi32(32)};
}

/* Lane j's index into the 16 * nb weights of positions d0..d0+15 of a run of nbits-bit
 * codes (p at its first byte): j * nb plus position d0 + j's bucket. */
AVX512_FN static inline __m512i bucket16_index(uint32_t nbits, const bucket16 *k,
                                               const uint8_t *p, uint32_t d0) {
    uint32_t w;
    if (nbits == 2) {
        memcpy(&w, p + d0 / 4, 4);
    } else {
        uint16_t h;
        memcpy(&h, p + d0 / 8, 2);
        w = h;
    }
    return _mm512_add_epi32(
        k->lane, _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w), k->sh), k->mask));
}

/* The chunk's weights t[idx] (t: its 16 * nb weights in registers t0..t3, nb 2 or 4). */
AVX512_FN static inline __m512 bucket16_pick(const bucket16 *k, uint32_t nb, __m512i idx,
                                             __m512 t0, __m512 t1, __m512 t2, __m512 t3) {
    __m512 r = _mm512_permutex2var_ps(t0, idx, t1);
    if (nb == 4)
        r = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, k->bit5), r,
                                 _mm512_permutex2var_ps(t2, idx, t3));
    return r;
}

/* The weights of positions d0..d0+15 of the run (p at its first byte). */
AVX512_FN static inline __m512 bucket16_weights(const tt_resdec_run *run, const bucket16 *k,
                                                const uint8_t *p, uint32_t d0) {
    const float *t = run->weights + (uint64_t)d0 * run->nb;
    const __m512 z = _mm512_setzero_ps();
    return bucket16_pick(k, run->nb, bucket16_index(run->w, k, p, d0), _mm512_loadu_ps(t),
                         _mm512_loadu_ps(t + 16), run->nb == 4 ? _mm512_loadu_ps(t + 32) : z,
                         run->nb == 4 ? _mm512_loadu_ps(t + 48) : z);
}

/* A run of 1- or 2-bit codes without expanded tables (bucket16), plus the centroid c
 * when there is one, as in the scalar loop, so both write the same floats. Returns the
 * positions done (a multiple of 16). */
AVX512_FN static uint32_t decode_bucket_avx512(const tt_resdec_run *run, const uint8_t *p,
                                               const float *c, float *o) {
    const uint32_t full = run->nbytes * run->pb / 16 * 16;
    if (run->w > 2)
        return 0;
    const bucket16 k = bucket16_init(run->w, run->nb);
    for (uint32_t d0 = 0; d0 < full; d0 += 16) {
        __m512 r = bucket16_weights(run, &k, p, d0);
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

#ifdef TT_AVX2
/* AVX2 (no vpermi2ps): 8 positions at a time, lane j's weight chosen among the block's
 * nb bucket vectors (wt8) by a tree of blends on its code's bits, each bit moved to
 * the lane's sign by a variable shift of the block's word. For widths 1-2 the word is
 * the block's w bytes read little-endian and code j starts at bit sh_j = 8 (jw / 8) +
 * 8 - w - jw % 8 (as in bucket16_init); for 3 bits it is the block's 3 bytes read
 * big-endian and code j starts at bit 21 - 3j. cnt[b] lane j = 31 - (sh_j + b). */
typedef struct pick8 {
    __m256i cnt[3];
} pick8;

AVX2_FN static inline pick8 pick8_init(uint32_t w) {
    pick8 k;
    for (uint32_t b = 0; b < w; b++) {
        int32_t cnt[8];
        for (uint32_t j = 0; j < 8; j++) {
            const uint32_t bit = j * w;
            const uint32_t sh = w == 3 ? 21 - 3 * j : 8 * (bit / 8) + 8 - w - bit % 8;
            cnt[j] = (int32_t)(31 - sh - b);
        }
        k.cnt[b] = _mm256_loadu_si256((const __m256i *)cnt);
    }
    for (uint32_t b = w; b < 3; b++)
        k.cnt[b] = _mm256_setzero_si256();
    return k;
}

/* The word of block d0 (a multiple of 8) of a run of w-bit codes at p. */
static inline int pick8_word(uint32_t w, const uint8_t *p, uint32_t d0) {
    if (w == 1)
        return p[d0 / 8];
    if (w == 2)
        return p[d0 / 4] | p[d0 / 4 + 1] << 8;
    const uint8_t *q = p + d0 / 8 * 3;
    return q[0] << 16 | q[1] << 8 | q[2];
}

/* The weights of positions d0..d0+7 (t: the block's wt8 rows), written out per width
 * so that the bucket rows stay loads folded into the blends (an array of them went
 * through the stack). */
__attribute__((always_inline)) AVX2_FN static inline __m256
pick8_weights(const pick8 *k, uint32_t w, const float *t, int word) {
    const __m256i x = _mm256_set1_epi32(word);
    const __m256 m0 = _mm256_castsi256_ps(_mm256_sllv_epi32(x, k->cnt[0]));
    if (w == 1)
        return _mm256_blendv_ps(_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8), m0);
    const __m256 m1 = _mm256_castsi256_ps(_mm256_sllv_epi32(x, k->cnt[1]));
    const __m256 lo = _mm256_blendv_ps(_mm256_loadu_ps(t), _mm256_loadu_ps(t + 8), m0);
    const __m256 hi = _mm256_blendv_ps(_mm256_loadu_ps(t + 16), _mm256_loadu_ps(t + 24), m0);
    const __m256 r = _mm256_blendv_ps(lo, hi, m1);
    if (w == 2)
        return r;
    const __m256 m2 = _mm256_castsi256_ps(_mm256_sllv_epi32(x, k->cnt[2]));
    const __m256 lo2 = _mm256_blendv_ps(_mm256_loadu_ps(t + 32), _mm256_loadu_ps(t + 40), m0);
    const __m256 hi2 = _mm256_blendv_ps(_mm256_loadu_ps(t + 48), _mm256_loadu_ps(t + 56), m0);
    return _mm256_blendv_ps(r, _mm256_blendv_ps(lo2, hi2, m1), m2);
}

/* A run of 1- to 3-bit codes without expanded tables, plus the centroid c when there
 * is one, as in the scalar loops, so all write the same floats. Returns the positions
 * done (a multiple of 8). */
AVX2_FN static uint32_t decode_pick8_avx2(const tt_resdec_run *run, const uint8_t *p,
                                          const float *c, float *o) {
    const uint32_t full = run_positions(run) / 8 * 8, w = run->w;
    const pick8 k = pick8_init(w);
    for (uint32_t d0 = 0; d0 < full; d0 += 8) {
        const float *t = run->wt8 + (uint64_t)d0 * run->nb;
        const int word = pick8_word(w, p, d0);
        __m256 r = w == 1   ? pick8_weights(&k, 1, t, word)
                   : w == 2 ? pick8_weights(&k, 2, t, word)
                            : pick8_weights(&k, 3, t, word);
        if (c)
            r = _mm256_add_ps(_mm256_loadu_ps(c + d0), r);
        _mm256_storeu_ps(o + d0, r);
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
        else if (d->avx2 && run->wt8)
            k0 = decode_pick8_avx2(run, p, c, o);
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
    else if (d->avx2 && run->wt8)
        b0 = decode_pick8_avx2(run, p, c, o) / pb;
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

/* One vector: o = c + its residual (c may be NULL, or o itself: every loop reads a
 * position of c before it writes that position of o, and no other). */
static void decode_add_one(const tt_resdec *d, const uint8_t *p, const float *c, float *o) {
    const uint32_t dim = d->dim;
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
        return;
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

void tt_resdec_decode_add(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                          const float *centroids, const uint32_t *codes, float *out) {
    const uint32_t dim = d->dim;
    for (uint64_t v = 0; v < n; v++) {
        const float *c = centroids ? centroids + (uint64_t)codes[v] * dim : NULL;
        /* Centroid rows are random reads: ask for the one four vectors ahead. */
        if (c && v + 4 < n)
            prefetch_row(centroids + (uint64_t)codes[v + 4] * dim, dim);
        decode_add_one(d, packed + v * d->bytes_per_vec, c, out + v * dim);
    }
}

#ifdef TT_AVX2
AVX2_FN static void f16_row_avx2(const uint16_t *h, uint32_t n, float *o) {
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(o + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + j))));
    tt_f16_to_f32_n(o + j, h + j, n - j);
}
#endif

void tt_resdec_decode_add16(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                            const uint16_t *centroids, const uint32_t *codes, float *out) {
    const uint32_t dim = d->dim;
    for (uint64_t v = 0; v < n; v++) {
        const uint16_t *c = centroids + (uint64_t)codes[v] * dim;
        float *o = out + v * dim;
        if (v + 4 < n) /* half the bytes of a float32 row: the same lines ahead */
            prefetch_row((const float *)(centroids + (uint64_t)codes[v + 4] * dim), dim / 2);
        /* The row as float32 where the vector goes, then the residual added in place. */
#ifdef TT_AVX2
        if (d->avx2)
            f16_row_avx2(c, dim, o);
        else
#endif
            tt_f16_to_f32_n(o, c, dim);
        decode_add_one(d, packed + v * d->bytes_per_vec, o, o);
    }
}

void tt_resdec_decode(const tt_resdec *d, const uint8_t *packed, uint64_t n, float *out) {
    tt_resdec_decode_add(d, packed, n, NULL, NULL, out);
}

/* o = the residual, in place: o[k] += c[k] for k < k0, o[k] = s o[k] + c[k] after (c16
 * or c: the centroid row; neither: 0). The AVX2 loop writes the same floats: a fused
 * multiply-add rounds once, so the portable one uses fmaf. */
static void scale_add_row(float *o, uint32_t k0, uint32_t dim, float s, const uint16_t *c16,
                          const float *c) {
    for (uint32_t k = 0; k < dim; k++) {
        const float ck = c16 ? tt_f16_to_f32(c16[k]) : c ? c[k] : 0.0f;
        o[k] = k < k0 ? o[k] + ck : fmaf(s, o[k], ck);
    }
}

#ifdef TT_AVX2
AVX2_FN static void scale_add_row_avx2(float *o, uint32_t k0, uint32_t dim, float s,
                                       const uint16_t *c16, const float *c) {
    uint32_t k = 0;
    for (; k < k0; k++) /* the 8-bit positions: a few */
        o[k] += c16 ? tt_f16_to_f32(c16[k]) : c ? c[k] : 0.0f;
    const __m256 vs = _mm256_set1_ps(s);
    for (; k + 8 <= dim; k += 8) {
        const __m256 ck = c16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(c16 + k)))
                          : c ? _mm256_loadu_ps(c + k)
                              : _mm256_setzero_ps();
        _mm256_storeu_ps(o + k, _mm256_fmadd_ps(vs, _mm256_loadu_ps(o + k), ck));
    }
    for (; k < dim; k++)
        o[k] = fmaf(s, o[k], c16 ? tt_f16_to_f32(c16[k]) : c ? c[k] : 0.0f);
}
#endif

void tt_resdec_decode_scaled(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                             const float *centroids, const uint16_t *centroids16,
                             const uint32_t *codes, uint32_t k0, const uint16_t *scales,
                             float *out) {
    const uint32_t dim = d->dim;
    for (uint64_t v = 0; v < n; v++) {
        float *o = out + v * dim;
        decode_add_one(d, packed + v * d->bytes_per_vec, NULL, o);
        const float s = tt_f16_to_f32(scales[v]);
        const uint16_t *c16 = centroids16 ? centroids16 + (uint64_t)codes[v] * dim : NULL;
        const float *c = !c16 && centroids ? centroids + (uint64_t)codes[v] * dim : NULL;
#ifdef TT_AVX2
        if (d->avx2) {
            scale_add_row_avx2(o, k0, dim, s, c16, c);
            continue;
        }
#endif
        scale_add_row(o, k0, dim, s, c16, c);
    }
}

/* Positions j0..n of one vector's run (p at the run's first byte) decoded into o[j],
 * without a centroid: the fused kernels' tail after their whole blocks (3 bits: j0 a
 * multiple of 8). */
static inline void decode_tail(const tt_resdec_run *run, const uint8_t *p, uint32_t j0,
                               uint32_t n, float *o) {
    if (run->w == 3) {
        decode_run3(run, j0, p, NULL, o);
        return;
    }
    for (uint32_t j = j0; j < n; j++) {
        const uint32_t bucket = run->bucket[p[j / run->pb] * run->pb + j % run->pb];
        o[j] = run->weights[(uint64_t)j * run->nb + bucket];
    }
}

/* The products of one vector's positions list[0..n) (decoded one by one) with the nq
 * query rows: out[i] for i < nq. */
static inline void list_dots(const tt_resdec *d, const uint32_t *list, uint32_t n,
                             const uint8_t *p, const float *Q, uint32_t nq, float *out) {
    for (uint32_t i = 0; i < nq; i++)
        out[i] = 0;
    for (uint32_t t = 0; t < n; t++) {
        const uint32_t k = list[t];
        const float val = tt_codec_value(d->codec, p, k);
        for (uint32_t i = 0; i < nq; i++)
            out[i] += val * Q[(uint64_t)i * d->dim + k];
    }
}

/* The fused kernels' sum over the 0-bit positions (a constant weight each) with the nq
 * query rows, once a call: z[i] for i < nq (nq <= 8). */
static inline void zero_dots(const tt_resdec *d, const float *Q, uint64_t qstride, uint32_t nq,
                             float *z) {
    const tt_codec *c = d->codec;
    for (uint32_t i = 0; i < nq; i++)
        z[i] = 0;
    for (uint32_t t = d->nloose_w; t < (d->shared ? 0 : d->nloose); t++) {
        const uint32_t k = d->lsplit[t];
        for (uint32_t i = 0; i < nq; i++)
            z[i] += c->weights[c->woff[k]] * Q[i * qstride + k];
    }
}

/* The fused kernels' products of one vector's loose positions with the nq query rows:
 * loose[i] for i < nq (nq <= 8), those of 1 bit or more summed in order, then z (the
 * 0-bit ones', zero_dots) added. */
static inline void loose_dots(const tt_resdec *d, const uint8_t *p, const float *Q,
                              uint64_t qstride, uint32_t nq, const float *z, float *loose) {
    /* a local array that the compiler keeps in registers (summed through loose, which
     * the loads of Q might alias, each step went through memory) */
    float a[8] = {0};
    const uint32_t n = d->shared ? 0 : d->nloose_w;
    for (uint32_t t = 0; t < n; t++) {
        const uint32_t k = d->lsplit[t];
        const float val = tt_codec_value(d->codec, p, k);
        _Pragma("GCC unroll 8")
        for (uint32_t i = 0; i < 8; i++)
            a[i] += i < nq ? val * Q[i * qstride + k] : 0.0f;
    }
    for (uint32_t i = 0; i < nq; i++)
        loose[i] = a[i] + z[i];
}

void tt_resdec_dot_rest(const tt_resdec *d, const uint32_t *loose, uint32_t nloose,
                        uint32_t skip, const uint8_t *packed, uint64_t n, const float *Q,
                        uint32_t nq, float *x, float *out) {
    skip |= 1u << 1 | 1u << 2;
    const uint32_t dim = d->dim;
    for (uint64_t v = 0; v < n; v++) {
        const uint8_t *p = packed + v * d->bytes_per_vec;
        float *o = out + v * nq;
        list_dots(d, loose, nloose, p, Q, nq, o);
        for (uint32_t r = 0; r < d->nruns; r++) {
            const tt_resdec_run *run = &d->runs[r];
            if (skip >> run->w & 1)
                continue;
            const uint32_t np = run_positions(run);
            decode_run(d, run, p + run->byte0, NULL, x + run->k0);
            for (uint32_t i = 0; i < nq; i++) {
                const float *q = Q + (uint64_t)i * dim + run->k0;
                float s = 0;
                for (uint32_t j = 0; j < np; j++)
                    s += q[j] * x[run->k0 + j];
                o[i] += s;
            }
        }
    }
}

#ifdef TT_AVX512
/* Loops over the query rows are unrolled, so that their accumulators stay in registers
 * (nq is a constant, at most 8, where these are inlined). */
#define TT_UNROLL_NQ _Pragma("GCC unroll 8")

/* acc[i] += x * Q_i[k .. k + 16) for i < nq: the 16 values x of positions k.. of a
 * residual against every query row (Q: nq rows of dim floats). */
__attribute__((always_inline)) AVX512_FN static inline void
fma_rows(__m512 *acc, uint32_t nq, const float *Q, uint32_t dim, uint32_t k, __m512 x) {
    TT_UNROLL_NQ
    for (uint32_t i = 0; i < nq; i++)
        acc[i] = _mm512_fmadd_ps(x, _mm512_loadu_ps(Q + (uint64_t)i * dim + k), acc[i]);
}

/* The same over positions a..b of decoded values x (x[k] is position k's). */
__attribute__((always_inline)) AVX512_FN static inline void
fma_range(__m512 *acc, uint32_t nq, const float *Q, uint32_t dim, const float *x, uint32_t a,
          uint32_t b) {
    uint32_t k = a;
    for (; k + 16 <= b; k += 16)
        fma_rows(acc, nq, Q, dim, k, _mm512_loadu_ps(x + k));
    if (k < b) {
        const __mmask16 m = (__mmask16)((1u << (b - k)) - 1);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + k);
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < nq; i++)
            acc[i] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(m, Q + (uint64_t)i * dim + k),
                                     acc[i]);
    }
}

/* The part of dot_block for one run of W-bit codes (W 1 or 2, a constant where this is
 * inlined) without expanded tables: n positions. */
__attribute__((always_inline)) AVX512_FN static inline void
fma_run(const tt_resdec_run *run, const uint8_t *p, uint32_t bpv, const float *Q, uint32_t dim,
        const uint32_t NV, const uint32_t NQ, const uint32_t W, uint32_t n, __m512 *acc,
        float *x) {
    const uint32_t nb = 1u << W, full = n / 16 * 16;
    const bucket16 k = bucket16_init(W, nb);
    const uint8_t *rp = p + run->byte0;
    const __m512 z = _mm512_setzero_ps();
    for (uint32_t d0 = 0; d0 < full; d0 += 16) {
        const float *t = run->weights + (uint64_t)d0 * nb;
        const __m512 t0 = _mm512_loadu_ps(t), t1 = _mm512_loadu_ps(t + 16);
        const __m512 t2 = nb == 4 ? _mm512_loadu_ps(t + 32) : z;
        const __m512 t3 = nb == 4 ? _mm512_loadu_ps(t + 48) : z;
        __m512 q[8];
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < NQ; i++)
            q[i] = _mm512_loadu_ps(Q + (uint64_t)i * dim + run->k0 + d0);
        _Pragma("GCC unroll 4")
        for (uint32_t v = 0; v < NV; v++) {
            const __m512 w = bucket16_pick(
                &k, nb, bucket16_index(W, &k, rp + (uint64_t)v * bpv, d0), t0, t1, t2, t3);
            TT_UNROLL_NQ
            for (uint32_t i = 0; i < NQ; i++)
                acc[v * NQ + i] = _mm512_fmadd_ps(w, q[i], acc[v * NQ + i]);
        }
    }
    for (uint32_t v = 0; v < NV && full < n; v++) {
        decode_tail(run, rp + (uint64_t)v * bpv, full, n, x + run->k0);
        fma_range(acc + v * NQ, NQ, Q, dim, x, run->k0 + full, run->k0 + n);
    }
}

/* out[v * NQ + i] for the NV vectors at p: accumulator v * NQ + i's lanes summed, plus
 * the products of the vector's loose positions (loose_dots, z: zero_dots). */
__attribute__((always_inline)) AVX512_FN static inline void
block_out(const tt_resdec *d, const uint8_t *p, const float *Q, uint64_t qstride,
          const uint32_t NV, const uint32_t NQ, const float *z, const __m512 *acc, float *out) {
    for (uint32_t v = 0; v < NV; v++) {
        float loose[8];
        loose_dots(d, p + (uint64_t)v * d->bytes_per_vec, Q, qstride, NQ, z, loose);
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < NQ; i++)
            out[v * NQ + i] = _mm512_reduce_add_ps(acc[v * NQ + i]) + loose[i];
    }
}

/* The inner products of NV consecutive vectors (at p, NV and NQ constants where this
 * is inlined, NV * NQ <= 16) with NQ query rows, into out[v * NQ + i]. Runs of 1-2 bits
 * without expanded tables are multiplied 16 positions at a time as they are decoded,
 * the chunk's weights and query values loaded once for the NV vectors (from L2 at
 * 3584-d: loaded for each vector, they bounded the loop); every other position is
 * decoded into x first, vector by vector. */
__attribute__((always_inline)) AVX512_FN static inline void
dot_block(const tt_resdec *d, const uint8_t *p, const float *Q, const uint32_t NV,
          const uint32_t NQ, const float *z, float *x, float *out) {
    const uint32_t dim = d->dim, bpv = d->bytes_per_vec;
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (uint32_t a = 0; a < NV * NQ; a++)
        acc[a] = _mm512_setzero_ps();
    for (uint32_t v = 0; v < NV && d->shared; v++) {
        tt_resdec_decode(d, p + (uint64_t)v * bpv, 1, x);
        fma_range(acc + v * NQ, NQ, Q, dim, x, 0, dim);
    }
    for (uint32_t r = 0; r < d->nruns && !d->shared; r++) {
        const tt_resdec_run *run = &d->runs[r];
        const uint32_t n = run_positions(run);
        if (run->ptab || run->w > 2) {
            for (uint32_t v = 0; v < NV; v++) {
                decode_run(d, run, p + (uint64_t)v * bpv + run->byte0, NULL, x + run->k0);
                fma_range(acc + v * NQ, NQ, Q, dim, x, run->k0, run->k0 + n);
            }
            continue;
        }
        if (run->w == 2)
            fma_run(run, p, bpv, Q, dim, NV, NQ, 2, n, acc, x);
        else
            fma_run(run, p, bpv, Q, dim, NV, NQ, 1, n, acc, x);
    }
    block_out(d, p, Q, dim, NV, NQ, z, acc, out);
}

/* Blocks of 4 vectors for 4 query rows, of 2 for 8: 16 accumulators. */
AVX512_FN static void dot_avx512(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                                 const float *Q, uint32_t nq, float *x, float *out) {
    const uint64_t bpv = d->bytes_per_vec;
    uint64_t v = 0;
    float z[8];
    zero_dots(d, Q, d->dim, nq, z);
    if (nq == 4) {
        for (; v + 4 <= n; v += 4)
            dot_block(d, packed + v * bpv, Q, 4, 4, z, x, out + v * 4);
        for (; v < n; v++)
            dot_block(d, packed + v * bpv, Q, 1, 4, z, x, out + v * 4);
    } else {
        for (; v + 2 <= n; v += 2)
            dot_block(d, packed + v * bpv, Q, 2, 8, z, x, out + v * 8);
        for (; v < n; v++)
            dot_block(d, packed + v * bpv, Q, 1, 8, z, x, out + v * 8);
    }
}

/* tt_resdec_dot_rows: fma_range over NV decoded rows X at once (X and Q: rows of
 * `stride` floats), each query row's 16 values loaded once for the NV rows. Lane for
 * lane the same operations as fma_range on each row alone. */
__attribute__((always_inline)) AVX512_FN static inline void
fma_rows_range(__m512 *acc, const uint32_t NV, const uint32_t NQ, const float *Q,
               uint32_t stride, const float *X, uint32_t a, uint32_t b) {
    uint32_t k = a;
    for (; k + 16 <= b; k += 16) {
        __m512 q[8];
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < NQ; i++)
            q[i] = _mm512_loadu_ps(Q + (uint64_t)i * stride + k);
        _Pragma("GCC unroll 4")
        for (uint32_t v = 0; v < NV; v++) {
            const __m512 x = _mm512_loadu_ps(X + (uint64_t)v * stride + k);
            TT_UNROLL_NQ
            for (uint32_t i = 0; i < NQ; i++)
                acc[v * NQ + i] = _mm512_fmadd_ps(x, q[i], acc[v * NQ + i]);
        }
    }
    if (k < b)
        for (uint32_t v = 0; v < NV; v++)
            fma_range(acc + v * NQ, NQ, Q, stride, X + (uint64_t)v * stride, k, b);
}

/* Positions of a query row's chunk that stay in L1 across a panel of rows; query rows
 * of at most ROWS_WHOLE_BYTES together stay there whole (1024-d, 4 of them). */
#define ROWS_CHUNK 512u
#define ROWS_WHOLE_BYTES (24u << 10)

/* One chunk [a, b) of NV rows X (their accumulators in mem: 16 floats per row and
 * query row) against NQ query rows. */
__attribute__((always_inline)) AVX512_FN static inline void
rows_chunk(float *mem, const uint32_t NV, const uint32_t NQ, const float *Q, uint32_t stride,
           const float *X, uint32_t a, uint32_t b) {
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (uint32_t t = 0; t < NV * NQ; t++)
        acc[t] = _mm512_loadu_ps(mem + 16 * t);
    fma_rows_range(acc, NV, NQ, Q, stride, X, a, b);
    _Pragma("GCC unroll 16")
    for (uint32_t t = 0; t < NV * NQ; t++)
        _mm512_storeu_ps(mem + 16 * t, acc[t]);
}

/* dot_block's products from the decoded rows X of NV vectors at p whose query rows stay
 * in L1 whole: every run's positions from its first, 16 at a time, the sums in
 * registers throughout, then the loose ones. */
__attribute__((always_inline)) AVX512_FN static inline void
rows_whole(const tt_resdec *d, const float *X, uint32_t stride, const uint8_t *p, const float *Q,
           const uint32_t NV, const uint32_t NQ, const float *z, float *out) {
    __m512 acc[16];
    _Pragma("GCC unroll 16")
    for (uint32_t t = 0; t < NV * NQ; t++)
        acc[t] = _mm512_setzero_ps();
    for (uint32_t r = 0; r < (d->shared ? 1 : d->nruns); r++) {
        const uint32_t a = d->shared ? 0 : d->runs[r].k0,
                       b = d->shared ? d->dim : a + run_positions(&d->runs[r]);
        fma_rows_range(acc, NV, NQ, Q, stride, X, a, b);
    }
    block_out(d, p, Q, stride, NV, NQ, z, acc, out);
}

/* dot_block's products from the decoded rows X of a panel of np <= 16 vectors at p:
 * each run's positions from its first, 16 at a time (in chunks of ROWS_CHUNK, the
 * lanes' sums kept in memory between them), then the loose ones, summed as dot_block
 * sums them. */
__attribute__((always_inline)) AVX512_FN static inline void
rows_panel(const tt_resdec *d, const float *X, uint32_t stride, const uint8_t *p, uint32_t np,
           const float *Q, const uint32_t NQ, const float *z, float *out) {
    const uint32_t dim = d->dim, bpv = d->bytes_per_vec, NV = NQ == 4 ? 4 : 2;
    if ((uint64_t)stride * NQ * sizeof(float) <= ROWS_WHOLE_BYTES) {
        uint32_t v = 0;
        for (; v + NV <= np; v += NV)
            rows_whole(d, X + (uint64_t)v * stride, stride, p + (uint64_t)v * bpv, Q, NV, NQ, z,
                       out + v * NQ);
        for (; v < np; v++)
            rows_whole(d, X + (uint64_t)v * stride, stride, p + (uint64_t)v * bpv, Q, 1, NQ, z,
                       out + v * NQ);
        return;
    }
    float mem[16 * 8 * 16];
    memset(mem, 0, (size_t)np * NQ * 16 * sizeof *mem);
    for (uint32_t r = 0; r < (d->shared ? 1 : d->nruns); r++) {
        const uint32_t a = d->shared ? 0 : d->runs[r].k0,
                       b = d->shared ? dim : a + run_positions(&d->runs[r]);
        for (uint32_t c0 = a; c0 < b; c0 += ROWS_CHUNK) {
            const uint32_t c1 = TT_MIN(b, c0 + ROWS_CHUNK);
            uint32_t v = 0;
            for (; v + NV <= np; v += NV)
                rows_chunk(mem + (uint64_t)v * NQ * 16, NV, NQ, Q, stride,
                           X + (uint64_t)v * stride, c0, c1);
            for (; v < np; v++)
                rows_chunk(mem + (uint64_t)v * NQ * 16, 1, NQ, Q, stride,
                           X + (uint64_t)v * stride, c0, c1);
        }
    }
    for (uint32_t v = 0; v < np; v++) {
        __m512 acc[8];
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < NQ; i++)
            acc[i] = _mm512_loadu_ps(mem + ((uint64_t)v * NQ + i) * 16);
        block_out(d, p + (uint64_t)v * bpv, Q, stride, 1, NQ, z, acc, out + v * NQ);
    }
}

AVX512_FN static void dot_rows_avx512(const tt_resdec *d, const float *X, uint32_t stride,
                                      const uint8_t *packed, uint64_t n, const float *Q,
                                      uint32_t nq, float *out) {
    const uint64_t bpv = d->bytes_per_vec;
    float z[8];
    zero_dots(d, Q, stride, nq, z);
    for (uint64_t v = 0; v < n; v += 16) {
        const uint32_t np = (uint32_t)TT_MIN((uint64_t)16, n - v);
        if (nq == 4)
            rows_panel(d, X + v * stride, stride, packed + v * bpv, np, Q, 4, z, out + v * 4);
        else
            rows_panel(d, X + v * stride, stride, packed + v * bpv, np, Q, 8, z, out + v * 8);
    }
}
#endif

#ifdef TT_AVX2
/* The AVX2 twin of the loops above: 8 positions a register, 16 registers, so blocks of
 * 2 vectors for 4 query rows and of 1 for 8 (8 accumulators), and runs of 1-3 bits
 * without expanded tables multiplied as they are decoded (pick8). */
__attribute__((always_inline)) AVX2_FN static inline void
fma_range8(__m256 *acc, uint32_t nq, const float *Q, uint32_t dim, const float *x, uint32_t a,
           uint32_t b) {
    uint32_t k = a;
    for (; k + 8 <= b; k += 8) {
        const __m256 v = _mm256_loadu_ps(x + k);
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < nq; i++)
            acc[i] = _mm256_fmadd_ps(v, _mm256_loadu_ps(Q + (uint64_t)i * dim + k), acc[i]);
    }
    if (k < b) {
        int32_t lane[8];
        for (uint32_t j = 0; j < 8; j++)
            lane[j] = k + j < b ? -1 : 0;
        const __m256i m = _mm256_loadu_si256((const __m256i *)lane);
        const __m256 v = _mm256_maskload_ps(x + k, m);
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < nq; i++)
            acc[i] = _mm256_fmadd_ps(v, _mm256_maskload_ps(Q + (uint64_t)i * dim + k, m),
                                     acc[i]);
    }
}

/* One run of W-bit codes (W 1-3, a constant where this is inlined) with wt8: n
 * positions of NV vectors. */
__attribute__((always_inline)) AVX2_FN static inline void
fma_run8(const tt_resdec_run *run, const uint8_t *p, uint32_t bpv, const float *Q, uint32_t dim,
         const uint32_t NV, const uint32_t NQ, const uint32_t W, uint32_t n, __m256 *acc,
         float *x) {
    const uint32_t nb = 1u << W, full = n / 8 * 8;
    const pick8 k = pick8_init(W);
    const uint8_t *rp = p + run->byte0;
    for (uint32_t d0 = 0; d0 < full; d0 += 8) {
        const float *t = run->wt8 + (uint64_t)d0 * nb;
        /* The vectors' weights first, then each query row loaded once for all of them:
         * 8 accumulators, 2 weights and 1 query row leave room for the blends, where
         * the 4 query rows held across both vectors spilled accumulators. */
        __m256 w[2];
        _Pragma("GCC unroll 2")
        for (uint32_t v = 0; v < NV; v++)
            w[v] = pick8_weights(&k, W, t, pick8_word(W, rp + (uint64_t)v * bpv, d0));
        TT_UNROLL_NQ
        for (uint32_t i = 0; i < NQ; i++) {
            const __m256 q = _mm256_loadu_ps(Q + (uint64_t)i * dim + run->k0 + d0);
            _Pragma("GCC unroll 2")
            for (uint32_t v = 0; v < NV; v++)
                acc[v * NQ + i] = _mm256_fmadd_ps(w[v], q, acc[v * NQ + i]);
        }
    }
    for (uint32_t v = 0; v < NV && full < n; v++) {
        decode_tail(run, rp + (uint64_t)v * bpv, full, n, x + run->k0);
        fma_range8(acc + v * NQ, NQ, Q, dim, x, run->k0 + full, run->k0 + n);
    }
}

/* The final sums of one vector that dot_block8 takes (and rows_block8 after it): its
 * accumulators' reductions plus its loose products. */
__attribute__((always_inline)) AVX2_FN static inline void
block8_out(const tt_resdec *d, const uint8_t *p, const float *Q, uint64_t qstride,
           const uint32_t NQ, const float *z, const __m256 *acc, float *out) {
    float loose[8];
    loose_dots(d, p, Q, qstride, NQ, z, loose);
    TT_UNROLL_NQ
    for (uint32_t i = 0; i < NQ; i++)
        out[i] = tt_hsum8(acc[i]) + loose[i];
}

/* dot_block's AVX2 twin: NV vectors at p against NQ query rows, NV * NQ <= 8. */
__attribute__((always_inline)) AVX2_FN static inline void
dot_block8(const tt_resdec *d, const uint8_t *p, const float *Q, const uint32_t NV,
           const uint32_t NQ, const float *z, float *x, float *out) {
    const uint32_t dim = d->dim, bpv = d->bytes_per_vec;
    __m256 acc[8];
    _Pragma("GCC unroll 8")
    for (uint32_t a = 0; a < NV * NQ; a++)
        acc[a] = _mm256_setzero_ps();
    for (uint32_t v = 0; v < NV && d->shared; v++) {
        tt_resdec_decode(d, p + (uint64_t)v * bpv, 1, x);
        fma_range8(acc + v * NQ, NQ, Q, dim, x, 0, dim);
    }
    for (uint32_t r = 0; r < d->nruns && !d->shared; r++) {
        const tt_resdec_run *run = &d->runs[r];
        const uint32_t n = run_positions(run);
        if (!run->wt8) {
            for (uint32_t v = 0; v < NV; v++) {
                decode_run(d, run, p + (uint64_t)v * bpv + run->byte0, NULL, x + run->k0);
                fma_range8(acc + v * NQ, NQ, Q, dim, x, run->k0, run->k0 + n);
            }
            continue;
        }
        if (run->w == 3)
            fma_run8(run, p, bpv, Q, dim, NV, NQ, 3, n, acc, x);
        else if (run->w == 2)
            fma_run8(run, p, bpv, Q, dim, NV, NQ, 2, n, acc, x);
        else
            fma_run8(run, p, bpv, Q, dim, NV, NQ, 1, n, acc, x);
    }
    for (uint32_t v = 0; v < NV; v++)
        block8_out(d, p + (uint64_t)v * bpv, Q, dim, NQ, z, acc + v * NQ, out + v * NQ);
}

/* Lanes as vectors (blocks of 8 or 16 vectors, runs of 1-2 bits): a register holds one
 * position of 8 vectors, so the position's 2 or 4 weights are the same for every lane
 * and one in-lane permute (vpermilps, indexed by each lane's code) picks every vector's
 * weight, and the query rows' values there are broadcasts. Per 8 vector-positions that
 * is a shift, a permute and one FMA per query row, where dot_block8 spends 2-3 blends
 * and 2 shifts per vector; the sums come out one lane per vector, without horizontal
 * adds. The block's packed bytes are transposed 16 byte positions at a time, so that
 * one load gives a byte position of 8 vectors. */

/* t[b * 16 + v] = p[v * bpv + b] for b < 16, v < 8 (t: rows of 16 bytes, of which
 * this writes the first 8). */
AVX2_FN static inline void transpose8x16(const uint8_t *p, uint64_t bpv, uint8_t *t) {
    __m128i a[8], b[8], c[8];
    for (uint32_t v = 0; v < 8; v++)
        a[v] = _mm_loadu_si128((const __m128i *)(p + v * bpv));
    for (uint32_t v = 0; v < 8; v += 2) { /* b[v]: bytes 0-7 of rows v, v+1 interleaved */
        b[v] = _mm_unpacklo_epi8(a[v], a[v + 1]);
        b[v + 1] = _mm_unpackhi_epi8(a[v], a[v + 1]);
    }
    for (uint32_t h = 0; h < 8; h += 4) /* c: 4 byte positions of 4 rows each */
        for (uint32_t j = 0; j < 2; j++) {
            c[h + 2 * j] = _mm_unpacklo_epi16(b[h + j], b[h + 2 + j]);
            c[h + 2 * j + 1] = _mm_unpackhi_epi16(b[h + j], b[h + 2 + j]);
        }
    /* c[0..3]: rows 0-3 at positions 0-3, 4-7, 8-11, 12-15; c[4..7]: rows 4-7 */
    for (uint32_t j = 0; j < 4; j++) {
        const __m128i lo = _mm_unpacklo_epi32(c[j], c[4 + j]),
                      hi = _mm_unpackhi_epi32(c[j], c[4 + j]);
        _mm_storel_epi64((__m128i *)(t + (4 * j + 0) * 16), lo);
        _mm_storel_epi64((__m128i *)(t + (4 * j + 1) * 16), _mm_unpackhi_epi64(lo, lo));
        _mm_storel_epi64((__m128i *)(t + (4 * j + 2) * 16), hi);
        _mm_storel_epi64((__m128i *)(t + (4 * j + 3) * 16), _mm_unpackhi_epi64(hi, hi));
    }
}

/* One run of W-bit codes (W 1 or 2) of 8 * NS vectors at p against NQ query rows:
 * acc[s * NQ + i] lane v += <Q_i, r_{8s+v}> over the run's positions. */
__attribute__((always_inline)) AVX2_FN static inline void
lanes_run(const tt_resdec_run *run, const uint8_t *p, uint64_t bpv, const float *Q,
          uint32_t dim, const uint32_t NS, const uint32_t NQ, const uint32_t W, __m256 *acc) {
    const uint32_t pb = 8 / W;
    const uint8_t *rp = p + run->byte0;
    uint8_t t[16 * 16];
    for (uint32_t b0 = 0; b0 < run->nbytes; b0 += 16) {
        const uint32_t nb = TT_MIN(16u, run->nbytes - b0);
        for (uint32_t s = 0; s < NS; s++) {
            const uint8_t *sp = rp + (uint64_t)8 * s * bpv + b0;
            if (nb == 16)
                transpose8x16(sp, bpv, t + 8 * s);
            else
                for (uint32_t b = 0; b < nb; b++)
                    for (uint32_t v = 0; v < 8; v++)
                        t[b * 16 + 8 * s + v] = sp[v * bpv + b];
        }
        for (uint32_t b = 0; b < nb; b++) {
            __m256i c[2];
            _Pragma("GCC unroll 2")
            for (uint32_t s = 0; s < NS; s++)
                c[s] = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(t + b * 16 + 8 * s)));
            const uint32_t k = (b0 + b) * pb;
            const float *wp = run->weights + (uint64_t)k * run->nb, *qp = Q + run->k0 + k;
            _Pragma("GCC unroll 8")
            for (uint32_t m = 0; m < pb; m++) {
                __m256 tab;
                if (W == 2) {
                    tab = _mm256_broadcast_ps((const __m128 *)(wp + 4 * m));
                } else { /* [w0 w1] in every pair: bit 1 of the index is the next code's */
                    long long two;
                    memcpy(&two, wp + 2 * m, sizeof two);
                    tab = _mm256_castsi256_ps(_mm256_set1_epi64x(two));
                }
                __m256 wv[2];
                _Pragma("GCC unroll 2")
                for (uint32_t s = 0; s < NS; s++)
                    wv[s] = _mm256_permutevar_ps(tab, _mm256_srli_epi32(c[s], (int)(8 - W * (m + 1))));
                TT_UNROLL_NQ
                for (uint32_t i = 0; i < NQ; i++) {
                    const __m256 q = _mm256_broadcast_ss(qp + (uint64_t)i * dim + m);
                    _Pragma("GCC unroll 2")
                    for (uint32_t s = 0; s < NS; s++)
                        acc[s * NQ + i] = _mm256_fmadd_ps(wv[s], q, acc[s * NQ + i]);
                }
            }
        }
    }
}

/* dot_lanes' sums of a run that it does not take as lanes, for one vector (its values at
 * x[a..b)): 8 positions at a time, reduced and added to its rest[0..NQ). */
__attribute__((always_inline)) AVX2_FN static inline void
rest_range8(float *rest, const uint32_t NQ, const float *Q, uint32_t qstride, const float *x,
            uint32_t a, uint32_t b) {
    __m256 h[8];
    TT_UNROLL_NQ
    for (uint32_t i = 0; i < NQ; i++)
        h[i] = _mm256_setzero_ps();
    fma_range8(h, NQ, Q, qstride, x, a, b);
    TT_UNROLL_NQ
    for (uint32_t i = 0; i < NQ; i++)
        rest[i] += tt_hsum8(h[i]);
}

/* dot_lanes' final sums: each vector's lane of the accumulators plus its rest. */
__attribute__((always_inline)) AVX2_FN static inline void
lanes_out(const __m256 *acc, const uint32_t NS, const uint32_t NQ, const float *rest, float *out) {
    float lanes[8][16];
    TT_UNROLL_NQ
    for (uint32_t i = 0; i < NQ; i++)
        _Pragma("GCC unroll 2")
        for (uint32_t s = 0; s < NS; s++)
            _mm256_storeu_ps(lanes[i] + 8 * s, acc[s * NQ + i]);
    for (uint32_t v = 0; v < 8 * NS; v++)
        for (uint32_t i = 0; i < NQ; i++)
            out[v * NQ + i] = lanes[i][v] + rest[v * NQ + i];
}

/* 8 * NS vectors at p against NQ query rows (NS * NQ <= 8): out[v * NQ + i]. Runs of
 * other widths are decoded one vector at a time into x, as in dot_block8. */
__attribute__((always_inline)) AVX2_FN static inline void
dot_lanes(const tt_resdec *d, const uint8_t *p, const float *Q, const uint32_t NS,
          const uint32_t NQ, const float *z, float *x, float *out) {
    const uint32_t dim = d->dim, NV = 8 * NS;
    const uint64_t bpv = d->bytes_per_vec;
    __m256 acc[8];
    _Pragma("GCC unroll 8")
    for (uint32_t a = 0; a < NS * NQ; a++)
        acc[a] = _mm256_setzero_ps();
    float rest[16 * 8];
    for (uint32_t v = 0; v < NV; v++)
        loose_dots(d, p + (uint64_t)v * bpv, Q, dim, NQ, z, rest + v * NQ);
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        if (run->w == 2) {
            lanes_run(run, p, bpv, Q, dim, NS, NQ, 2, acc);
            continue;
        }
        if (run->w == 1) {
            lanes_run(run, p, bpv, Q, dim, NS, NQ, 1, acc);
            continue;
        }
        const uint32_t n = run_positions(run);
        for (uint32_t v = 0; v < NV; v++) {
            decode_run(d, run, p + (uint64_t)v * bpv + run->byte0, NULL, x + run->k0);
            rest_range8(rest + v * NQ, NQ, Q, dim, x, run->k0, run->k0 + n);
        }
    }
    lanes_out(acc, NS, NQ, rest, out);
}

AVX2_FN static void dot_lanes16x4(const tt_resdec *d, const uint8_t *p, const float *Q,
                                  const float *z, float *x, float *out) {
    dot_lanes(d, p, Q, 2, 4, z, x, out);
}

AVX2_FN static void dot_lanes8x4(const tt_resdec *d, const uint8_t *p, const float *Q,
                                 const float *z, float *x, float *out) {
    dot_lanes(d, p, Q, 1, 4, z, x, out);
}

AVX2_FN static void dot_lanes8x8(const tt_resdec *d, const uint8_t *p, const float *Q,
                                 const float *z, float *x, float *out) {
    dot_lanes(d, p, Q, 1, 8, z, x, out);
}

AVX2_FN static void dot_avx2(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                             const float *Q, uint32_t nq, float *x, float *out) {
    const uint64_t bpv = d->bytes_per_vec;
    uint64_t v = 0;
    float z[8];
    zero_dots(d, Q, d->dim, nq, z);
    if (!d->shared && d->lanes) {
        if (nq == 4)
            for (; v + 16 <= n; v += 16)
                dot_lanes16x4(d, packed + v * bpv, Q, z, x, out + v * 4);
        for (; v + 8 <= n; v += 8) {
            if (nq == 4)
                dot_lanes8x4(d, packed + v * bpv, Q, z, x, out + v * 4);
            else
                dot_lanes8x8(d, packed + v * bpv, Q, z, x, out + v * 8);
        }
    }
    if (nq == 4) {
        for (; v + 2 <= n; v += 2)
            dot_block8(d, packed + v * bpv, Q, 2, 4, z, x, out + v * 4);
        for (; v < n; v++)
            dot_block8(d, packed + v * bpv, Q, 1, 4, z, x, out + v * 4);
    } else {
        for (; v < n; v++)
            dot_block8(d, packed + v * bpv, Q, 1, 8, z, x, out + v * 8);
    }
}

/* x[m] = position m of the 8 rows x[0..8) held (8 positions each). */
__attribute__((always_inline)) AVX2_FN static inline void transpose8x8(__m256 *x) {
    __m256 t[8], u[8];
    for (uint32_t v = 0; v < 8; v += 2) {
        t[v] = _mm256_unpacklo_ps(x[v], x[v + 1]);
        t[v + 1] = _mm256_unpackhi_ps(x[v], x[v + 1]);
    }
    for (uint32_t h = 0; h < 8; h += 4) {
        u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xee);
        u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xee);
    }
    for (uint32_t m = 0; m < 4; m++) {
        x[m] = _mm256_permute2f128_ps(u[m], u[m + 4], 0x20);
        x[m + 4] = _mm256_permute2f128_ps(u[m], u[m + 4], 0x31);
    }
}

/* tt_resdec_to_lanes: 8 x 8 blocks of the rows transposed, the last positions one by one. */
AVX2_FN static void to_lanes_avx2(const float *X, uint32_t stride, uint32_t dim, uint64_t n,
                                  float *L) {
    for (uint64_t b = 0; b + 8 <= n; b += 8) {
        const float *x0 = X + b * stride;
        float *l0 = L + b * stride;
        uint32_t k = 0;
        for (; k + 8 <= dim; k += 8) {
            __m256 x[8];
            for (uint32_t v = 0; v < 8; v++)
                x[v] = _mm256_loadu_ps(x0 + (uint64_t)v * stride + k);
            transpose8x8(x);
            for (uint32_t m = 0; m < 8; m++)
                _mm256_storeu_ps(l0 + (uint64_t)(k + m) * 8, x[m]);
        }
        for (; k < dim; k++)
            for (uint32_t v = 0; v < 8; v++)
                l0[(uint64_t)k * 8 + v] = x0[(uint64_t)v * stride + k];
    }
}

/* dot_avx2's sums from decoded rows X (row v's position k at X[v * stride + k], query
 * row i's at Q[i * stride + k]) and their copy by lanes L (tt_resdec_to_lanes), for the
 * one-pass exhaustive batch. The vectors that it takes as lanes (8 * NS of them, in
 * whole blocks of 8, where d->lanes) sum their 1- and 2-bit runs' products one position
 * at a time, a vector a lane (from L: one load a position for 8 vectors), the other
 * runs 8 positions at a time from the run's first (fma_range8, as dot_lanes does), the
 * loose positions first; the same floats. */
__attribute__((always_inline)) AVX2_FN static inline void
rows_lanes(const tt_resdec *d, const float *X, const float *L, uint32_t stride, const uint8_t *p,
           const float *Q, const uint32_t NS, const uint32_t NQ, const float *z, float *out) {
    const uint32_t NV = 8 * NS;
    const uint64_t bpv = d->bytes_per_vec;
    __m256 acc[8];
    _Pragma("GCC unroll 8")
    for (uint32_t a = 0; a < NS * NQ; a++)
        acc[a] = _mm256_setzero_ps();
    float rest[16 * 8];
    for (uint32_t v = 0; v < NV; v++)
        loose_dots(d, p + v * bpv, Q, stride, NQ, z, rest + v * NQ);
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        const uint32_t a = run->k0, b = a + run_positions(run);
        if (run->w == 1 || run->w == 2) {
            /* NS * NQ registers of sums, each one FMA after another (blocks of 16
             * vectors for 4 query rows, as dot_avx2 takes them: 8 chains) */
            for (uint32_t k = a; k < b; k++) {
                __m256 x[2];
                _Pragma("GCC unroll 2")
                for (uint32_t s = 0; s < NS; s++)
                    x[s] = _mm256_loadu_ps(L + (uint64_t)8 * s * stride + (uint64_t)k * 8);
                TT_UNROLL_NQ
                for (uint32_t i = 0; i < NQ; i++) {
                    const __m256 q = _mm256_broadcast_ss(Q + (uint64_t)i * stride + k);
                    _Pragma("GCC unroll 2")
                    for (uint32_t s = 0; s < NS; s++)
                        acc[s * NQ + i] = _mm256_fmadd_ps(x[s], q, acc[s * NQ + i]);
                }
            }
            continue;
        }
        for (uint32_t v = 0; v < NV; v++)
            rest_range8(rest + v * NQ, NQ, Q, stride, X + (uint64_t)v * stride, a, b);
    }
    lanes_out(acc, NS, NQ, rest, out);
}

/* dot_block8's sums for one vector from its decoded row X. */
__attribute__((always_inline)) AVX2_FN static inline void
rows_block8(const tt_resdec *d, const float *X, const uint8_t *p, const float *Q,
            uint32_t stride, const uint32_t NQ, const float *z, float *out) {
    __m256 acc[8];
    TT_UNROLL_NQ
    for (uint32_t i = 0; i < NQ; i++)
        acc[i] = _mm256_setzero_ps();
    for (uint32_t r = 0; r < (d->shared ? 1 : d->nruns); r++) {
        const uint32_t a = d->shared ? 0 : d->runs[r].k0,
                       b = d->shared ? d->dim : a + run_positions(&d->runs[r]);
        fma_range8(acc, NQ, Q, stride, X, a, b);
    }
    block8_out(d, p, Q, stride, NQ, z, acc, out);
}

AVX2_FN static void rows_lanes16x4(const tt_resdec *d, const float *X, const float *L,
                                   uint32_t stride, const uint8_t *p, const float *Q,
                                   const float *z, float *out) {
    rows_lanes(d, X, L, stride, p, Q, 2, 4, z, out);
}

AVX2_FN static void rows_lanes8x4(const tt_resdec *d, const float *X, const float *L,
                                  uint32_t stride, const uint8_t *p, const float *Q,
                                  const float *z, float *out) {
    rows_lanes(d, X, L, stride, p, Q, 1, 4, z, out);
}

AVX2_FN static void rows_lanes8x8(const tt_resdec *d, const float *X, const float *L,
                                  uint32_t stride, const uint8_t *p, const float *Q,
                                  const float *z, float *out) {
    rows_lanes(d, X, L, stride, p, Q, 1, 8, z, out);
}

AVX2_FN static void dot_rows_avx2(const tt_resdec *d, const float *X, const float *L,
                                  uint32_t stride, const uint8_t *packed, uint64_t n,
                                  const float *Q, uint32_t nq, float *out) {
    const uint64_t bpv = d->bytes_per_vec, nl = !d->shared && d->lanes ? n / 8 * 8 : 0;
    uint64_t v = 0;
    float z[8];
    zero_dots(d, Q, stride, nq, z);
    for (; nq == 4 && v + 16 <= nl; v += 16)
        rows_lanes16x4(d, X + v * stride, L + v * stride, stride, packed + v * bpv, Q, z,
                       out + v * 4);
    for (; v < nl; v += 8) {
        if (nq == 4)
            rows_lanes8x4(d, X + v * stride, L + v * stride, stride, packed + v * bpv, Q, z,
                          out + v * 4);
        else
            rows_lanes8x8(d, X + v * stride, L + v * stride, stride, packed + v * bpv, Q, z,
                          out + v * 8);
    }
    for (; v < n; v++) {
        if (nq == 4)
            rows_block8(d, X + v * stride, packed + v * bpv, Q, stride, 4, z, out + v * 4);
        else
            rows_block8(d, X + v * stride, packed + v * bpv, Q, stride, 8, z, out + v * 8);
    }
}
#endif

bool tt_resdec_dot_ok(const tt_resdec *d, uint32_t nqp) {
    return (d->avx512 || d->avx2) && (nqp == 4 || nqp == 8);
}

void tt_resdec_dot(const tt_resdec *d, const uint8_t *packed, uint64_t n, const float *Qp,
                   uint32_t nqp, float *x, float *out) {
    if (!tt_resdec_dot_ok(d, nqp))
        return;
#ifdef TT_AVX512
    if (d->avx512) {
        dot_avx512(d, packed, n, Qp, nqp, x, out);
        return;
    }
#endif
#ifdef TT_AVX2
    dot_avx2(d, packed, n, Qp, nqp, x, out);
#else
    (void)packed, (void)n, (void)Qp, (void)x, (void)out;
#endif
}

bool tt_resdec_dot_rows_ok(const tt_resdec *d, uint32_t nqp) {
    return tt_resdec_dot_ok(d, nqp);
}

void tt_resdec_rows_layout(const tt_resdec *d, uint32_t *stride, uint32_t *shift) {
    uint32_t k0 = 0, most = 0;
    for (uint32_t r = 0; r < d->nruns && !d->shared; r++)
        if (run_positions(&d->runs[r]) > most) {
            most = run_positions(&d->runs[r]);
            k0 = d->runs[r].k0;
        }
    *shift = (16 - k0 % 16) % 16;
    *stride = (d->dim + 15) / 16 * 16 + 16;
}

bool tt_resdec_rows_lanes(const tt_resdec *d) {
    return !d->avx512 && d->avx2 && d->lanes && !d->shared;
}

void tt_resdec_to_lanes(const tt_resdec *d, const float *rows, uint32_t stride, uint64_t n,
                        float *lanes) {
    if (!tt_resdec_rows_lanes(d))
        return;
#ifdef TT_AVX2
    to_lanes_avx2(rows, stride, d->dim, n, lanes);
#else
    (void)rows, (void)stride, (void)n, (void)lanes;
#endif
}

void tt_resdec_dot_rows(const tt_resdec *d, const float *rows, const float *lanes,
                        uint32_t stride, const uint8_t *packed, uint64_t n, const float *Qs,
                        uint32_t nqp, float *out) {
    if (!tt_resdec_dot_rows_ok(d, nqp))
        return;
#ifdef TT_AVX512
    if (d->avx512) {
        dot_rows_avx512(d, rows, stride, packed, n, Qs, nqp, out);
        return;
    }
#endif
#ifdef TT_AVX2
    dot_rows_avx2(d, rows, lanes, stride, packed, n, Qs, nqp, out);
#else
    (void)rows, (void)lanes, (void)stride, (void)packed, (void)n, (void)Qs, (void)out;
#endif
}

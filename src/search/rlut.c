/* Residual lookup tables: approximate <q, r> of packed residuals without decoding them
 * (search/decode.h, tt_reslut). A byte of 2-bit codes holds 4 positions, two per
 * nibble; the 16 values a nibble can take against query row i are one table, and 16
 * vectors' bytes at one position, transposed into one register, are looked up in it
 * by one vpshufb: 4 positions of 16 vectors per instruction, where the float kernel
 * (decode.c, lanes_run) spends a multiply-add per position and query row for 8
 * vectors. Entries are 8 bits on one step per query row, summed in 16-bit lanes (two
 * vectors a lane, the odd one also apart, as in FAISS's fast-scan) and moved to 32 bits
 * every 256 positions, before a lane could overflow. */
#include "search/decode.h"

#include "common/simd.h"

#include <math.h>
#include <stdlib.h>

/* Byte positions summed in 16-bit lanes before they move to 32 bits: 256 * 255 fits. */
#define LANE_FLUSH 256u
/* The float byte tables of whole 4- and 8-bit bytes (the adaptive codec's outlier
 * dimensions) at most this size; beyond it those runs are decoded as before. */
#define RESLUT_BYTE_TABLES ((uint64_t)1 << 20)

static bool covered(const tt_resdec_run *r) {
    return r->w == 1 || r->w == 2;
}

/* Runs whose whole bytes take float byte tables: one or two codes a byte. */
static bool byte_tabled(const tt_resdec_run *r) {
    return r->w == 4 || r->w == 8;
}

int tt_reslut_init(tt_reslut *L, const tt_resdec *d) {
    memset(L, 0, sizeof *L);
    if (d->shared)
        return TT_OK;
    uint32_t npos = 0;
    for (uint32_t r = 0; r < d->nruns; r++)
        if (covered(&d->runs[r]))
            npos += d->runs[r].nbytes;
    if (!npos)
        return TT_OK;
    if (!(L->src = tt_alloc(npos, sizeof *L->src, "residual lookup tables")) ||
        /* an odd npos: the pair loop reads a last position of zeros */
        !(L->buf = tt_calloc((uint64_t)(npos + 1) / 2 * 32, 1, "residual lookup tables")) ||
        !(L->zero = tt_calloc(d->bytes_per_vec, 1, "residual lookup tables")) ||
        !(L->wlo = tt_alloc(2 * (uint64_t)d->dim, sizeof *L->wlo, "residual lookup tables")) ||
        !(L->ibuf = tt_alloc((uint64_t)npos * 32, 1, "residual lookup tables")) ||
        !(L->pidx = tt_alloc((uint64_t)(npos + 1) / 2 * 64, 1, "residual lookup tables"))) {
        tt_reslut_free(L);
        return TT_ENOMEM;
    }
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        if (!covered(run))
            continue;
        for (uint32_t b = 0; b < run->nbytes; b++)
            L->src[L->npos++] = run->byte0 + b;
        for (uint32_t j = 0; j < run->nbytes * run->pb; j++) {
            const float *w = run->weights + (uint64_t)j * run->nb;
            float lo = w[0], hi = w[0];
            for (uint32_t c = 1; c < run->nb; c++) {
                lo = w[c] < lo ? w[c] : lo;
                hi = w[c] > hi ? w[c] : hi;
            }
            L->wlo[run->k0 + j] = lo;
            L->wlo[d->dim + run->k0 + j] = hi;
        }
    }
    if (d->nloose &&
        !(L->loose = tt_alloc(d->nloose, sizeof *L->loose, "residual lookup tables"))) {
        tt_reslut_free(L);
        return TT_ENOMEM;
    }
    for (uint32_t t = 0; t < d->nloose; t++)
        if (d->codec->bits[d->loose[t]])
            L->loose[L->nloose++] = d->loose[t];
    uint32_t nb = 0;
    for (uint32_t r = 0; r < d->nruns; r++)
        nb += byte_tabled(&d->runs[r]) ? d->runs[r].nbytes : 0;
    if (nb && !(L->bsrc = tt_alloc(nb, sizeof *L->bsrc, "residual lookup tables"))) {
        tt_reslut_free(L);
        return TT_ENOMEM;
    }
    for (uint32_t r = 0; r < d->nruns; r++)
        for (uint32_t b = 0; byte_tabled(&d->runs[r]) && b < d->runs[r].nbytes; b++)
            L->bsrc[L->nbpos++] = d->runs[r].byte0 + b;
#ifdef TT_AVX2
    L->avx2 = tt_cpu_avx2();
    L->avx512 = L->avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    L->vbmi = L->avx512 && __builtin_cpu_supports("avx512vbmi") &&
              __builtin_cpu_supports("avx512vnni");
#endif
    L->npair = (L->npos + 1) / 2;
    return TT_OK;
}

void tt_reslut_free(tt_reslut *L) {
    if (!L)
        return;
    free(L->src);
    free(L->tab);
    free(L->scale);
    free(L->bias);
    free(L->buf);
    free(L->zero);
    free(L->wlo);
    free(L->ibuf);
    free(L->ptab);
    free(L->pidx);
    free(L->loose);
    free(L->bsrc);
    free(L->btab);
    memset(L, 0, sizeof *L);
}

/* The 16 entries of one nibble's table, rounded to bytes: e[x] = (A[x >> 2] + B[x & 3]),
 * already scaled to steps (A: the nibble's first half of positions, B: its second). */
static inline void nibble_bytes(const float *A, const float *B, uint8_t *e) {
#ifdef TT_SSE2
    const __m128 b = _mm_loadu_ps(B);
    __m128i r[4];
    for (uint32_t a = 0; a < 4; a++) /* round to nearest even, as lrintf */
        r[a] = _mm_cvtps_epi32(_mm_add_ps(_mm_set1_ps(A[a]), b));
    /* both packs saturate: a sum a hair above 255 (float rounding) stays 255, below 0 0 */
    _mm_storeu_si128((__m128i *)e, _mm_packus_epi16(_mm_packs_epi32(r[0], r[1]),
                                                    _mm_packs_epi32(r[2], r[3])));
#else
    for (uint32_t x = 0; x < 16; x++) {
        const long y = lrintf(A[x >> 2] + B[x & 3]);
        e[x] = (uint8_t)(y < 0 ? 0 : y > 255 ? 255 : y);
    }
#endif
}

/* A position's 2^w values q w_k(c) minus their minimum, in steps (inv: 1 / step; wlo,
 * whi: each position's least and greatest weight, whose products with q bound the
 * others'). */
static inline void position_values(const tt_resdec_run *run, const float *q, uint32_t j,
                                   const float *wlo, const float *whi, float inv, float *v) {
    const uint32_t k = run->k0 + j, nb = run->nb;
    const float *w = run->weights + (uint64_t)j * nb, qk = q[k];
    const float a = qk * wlo[k], b = qk * whi[k], mn = a < b ? a : b;
    for (uint32_t c = 0; c < nb; c++)
        v[c] = (qk * w[c] - mn) * inv;
}

/* row_tables' first pass over a run's positions from j0 (a nibble's first): each
 * nibble's range (the sum of its positions' spans |q[k]| (max_c w - min_c w)) into
 * *range's maximum, each position's least value q[k] w into *lo_sum. */
static void spans_portable(const tt_resdec_run *run, const float *q, const float *wlo,
                           const float *whi, uint32_t j0, float *range, double *lo_sum) {
    const uint32_t half = run->pb / 2;
    for (uint32_t j = j0; j < run->nbytes * run->pb; j += half) {
        float span = 0;
        for (uint32_t u = 0; u < half; u++) {
            const uint32_t k = run->k0 + j + u;
            const float a = q[k] * wlo[k], b = q[k] * whi[k];
            span += fabsf(b - a);
            *lo_sum += a < b ? a : b;
        }
        *range = *range > span ? *range : span;
    }
}

#ifdef TT_AVX2
/* row_tables' loops for a run of 2-bit codes, a byte (4 positions) at a time: the
 * nibble spans (pass 1, 8 positions at a time; the rest by spans_portable) and the
 * tables (pass 2), as in the portable loops but with the minima summed in another
 * order. */
AVX2_FN static void spans2_avx2(const tt_resdec_run *run, const float *q, const float *wlo,
                                const float *whi, float *range, double *lo_sum) {
    const uint32_t n = run->nbytes * 4, k0 = run->k0;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 rmax = _mm256_setzero_ps(), lo = _mm256_setzero_ps();
    uint32_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 qv = _mm256_loadu_ps(q + k0 + j);
        const __m256 a = _mm256_mul_ps(qv, _mm256_loadu_ps(wlo + k0 + j)),
                     b = _mm256_mul_ps(qv, _mm256_loadu_ps(whi + k0 + j));
        lo = _mm256_add_ps(lo, _mm256_min_ps(a, b));
        const __m256 sp = _mm256_andnot_ps(sign, _mm256_sub_ps(b, a));
        rmax = _mm256_max_ps(rmax, _mm256_hadd_ps(sp, sp)); /* nibble = 2 positions */
    }
    float r8[8], l8[8];
    _mm256_storeu_ps(r8, rmax);
    _mm256_storeu_ps(l8, lo);
    for (uint32_t i = 0; i < 8; i++) {
        *range = *range > r8[i] ? *range : r8[i];
        *lo_sum += l8[i];
    }
    spans_portable(run, q, wlo, whi, j, range, lo_sum);
}

/* The 8 entries sel picks from V's first position plus B, rounded to integers. */
AVX2_FN static inline __m256i entries8(__m256 V, __m256i sel, __m256 B) {
    return _mm256_cvtps_epi32(_mm256_add_ps(_mm256_permutevar8x32_ps(V, sel), B));
}

AVX2_FN static void tables2_avx2(const tt_resdec_run *run, const float *q, const float *wlo,
                                 const float *whi, float inv, uint8_t *t) {
    const uint32_t k0 = run->k0;
    /* lanes 0-3 from element 0 and 4-7 from 1; from 2 and 3; elements 4-7 twice */
    const __m256i p01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                  p23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                  p4567 = _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7),
                  order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256 iv = _mm256_set1_ps(inv);
    for (uint32_t b = 0; b < run->nbytes; b++) {
        const uint32_t j = 4 * b, k = k0 + j;
        const __m128 q4 = _mm_loadu_ps(q + k);
        const __m128 mn4 = _mm_min_ps(_mm_mul_ps(q4, _mm_loadu_ps(wlo + k)),
                                      _mm_mul_ps(q4, _mm_loadu_ps(whi + k)));
        const __m256 qq = _mm256_castps128_ps256(q4), mm = _mm256_castps128_ps256(mn4);
        const float *w = run->weights + (uint64_t)j * 4;
        /* V01: positions j, j+1's four values each; V23: j+2, j+3's */
        const __m256 V01 = _mm256_mul_ps(
            _mm256_sub_ps(_mm256_mul_ps(_mm256_permutevar8x32_ps(qq, p01), _mm256_loadu_ps(w)),
                          _mm256_permutevar8x32_ps(mm, p01)),
            iv);
        const __m256 V23 = _mm256_mul_ps(
            _mm256_sub_ps(
                _mm256_mul_ps(_mm256_permutevar8x32_ps(qq, p23), _mm256_loadu_ps(w + 8)),
                _mm256_permutevar8x32_ps(mm, p23)),
            iv);
        /* entries x = 4 c0 + c1: E0 x < 8, E1 x >= 8 (high nibble), F0, F1 (low) */
        const __m256 B01 = _mm256_permutevar8x32_ps(V01, p4567),
                     B23 = _mm256_permutevar8x32_ps(V23, p4567);
        const __m256i E0 = entries8(V01, p01, B01), E1 = entries8(V01, p23, B01),
                      F0 = entries8(V23, p01, B23), F1 = entries8(V23, p23, B23);
        /* in-lane packs leave 4-byte groups E0 0-3, E1 0-3, F0 0-3, F1 0-3, E0 4-7, ... */
        const __m256i x =
            _mm256_packus_epi16(_mm256_packs_epi32(E0, E1), _mm256_packs_epi32(F0, F1));
        _mm256_storeu_si256((__m256i *)(t + (uint64_t)b * 128),
                            _mm256_permutevar8x32_epi32(x, order));
    }
}
#endif

/* Query row q's tables (rows 4g + i of the layout: t at row i's first table, stride
 * 128 bytes a position); returns the row's step and sets *bias. Each position's values
 * q[k] w_k(c) are taken relative to their minimum, so that a table's entries are sums
 * of non-negative parts; a table's range is the sum of its positions' spans |q[k]|
 * (max_c w - min_c w), and the step is the largest range over 255. */
static float row_tables(const tt_reslut *L, const tt_resdec *d, const float *q, uint8_t *t,
                        double *bias) {
    const float *wlo = L->wlo, *whi = L->wlo + d->dim;
    float range = 0;
    double lo_sum = 0;
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        if (!covered(run))
            continue;
#ifdef TT_AVX2
        if (L->avx2 && run->w == 2) {
            spans2_avx2(run, q, wlo, whi, &range, &lo_sum);
            continue;
        }
#endif
        spans_portable(run, q, wlo, whi, 0, &range, &lo_sum);
    }
    const float step = range / 255.0f, inv = step > 0 ? 1.0f / step : 0.0f;
    uint32_t p = 0;
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        if (!covered(run))
            continue;
#ifdef TT_AVX2
        if (L->avx2 && run->w == 2) {
            tables2_avx2(run, q, wlo, whi, inv, t + (uint64_t)p * 128);
            p += run->nbytes;
            continue;
        }
#endif
        for (uint32_t b = 0; b < run->nbytes; b++, p++)
            for (uint32_t h = 0; h < 2; h++) {
                const uint32_t j = b * run->pb + h * (run->pb / 2);
                float A[4], B[4];
                if (run->w == 2) { /* a position each */
                    position_values(run, q, j, wlo, whi, inv, A);
                    position_values(run, q, j + 1, wlo, whi, inv, B);
                } else { /* two 1-bit positions each, the first the higher bit */
                    float v[4][2];
                    for (uint32_t u = 0; u < 4; u++)
                        position_values(run, q, j + u, wlo, whi, inv, v[u]);
                    for (uint32_t c = 0; c < 4; c++) {
                        A[c] = v[0][c >> 1] + v[1][c & 1];
                        B[c] = v[2][c >> 1] + v[3][c & 1];
                    }
                }
                nibble_bytes(A, B, t + (uint64_t)p * 128 + h * 16);
            }
    }
    *bias = lo_sum;
    return step;
}

/* The float byte tables of the whole bytes of 4- and 8-bit runs for query rows Qp, where
 * they fit in RESLUT_BYTE_TABLES: an entry is the row's products with the one or two
 * values the byte stores (so a vector's 4 outlier dimensions cost 4 additions a query
 * row, not a decode and 4 multiply-adds); with the other positions, whether a rest pass
 * is left (L->rest). */
static int byte_tables(tt_reslut *L, const tt_resdec *d, const float *Qp, uint32_t nqp) {
    L->bon = L->nbpos && (uint64_t)L->nbpos * 256 * nqp * sizeof(float) <= RESLUT_BYTE_TABLES;
    L->rest = L->nloose > 0;
    for (uint32_t r = 0; r < d->nruns; r++)
        L->rest = L->rest || !(covered(&d->runs[r]) || (L->bon && byte_tabled(&d->runs[r])));
    if (!L->bon)
        return TT_OK;
    if (nqp > L->cap_bq) {
        free(L->btab);
        L->cap_bq = 0;
        if (!(L->btab = tt_alloc((uint64_t)L->nbpos * 256 * nqp, sizeof *L->btab,
                                 "residual lookup tables"))) {
            L->bon = false;
            return TT_ENOMEM;
        }
        L->cap_bq = nqp;
    }
    uint32_t p = 0;
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        for (uint32_t b = 0; byte_tabled(run) && b < run->nbytes; b++, p++)
            for (uint32_t x = 0; x < 256; x++) {
                float *e = L->btab + ((uint64_t)p * 256 + x) * nqp;
                for (uint32_t i = 0; i < nqp; i++) {
                    const float *q = Qp + (uint64_t)i * d->dim + run->k0 + b * run->pb;
                    float s = 0;
                    for (uint32_t t = 0; t < run->pb; t++)
                        s += q[t] * tt_resdec_run_weight(run, b, x, t);
                    e[i] = s;
                }
            }
    }
    return TT_OK;
}

/* out[v * nqp + i] += the byte tables' entries of vector v's bytes (nqp a multiple of 4;
 * every lane adds in the same order, so the SSE and the portable loop agree). */
static void byte_dots(const tt_reslut *L, const uint8_t *packed, uint64_t n, uint64_t bpv,
                      float *out) {
    const uint32_t nqp = L->nqp;
    for (uint64_t v = 0; v < n; v++) {
        const uint8_t *p = packed + v * bpv;
        for (uint32_t i = 0; i < nqp; i += 4) {
            float *o = out + v * nqp + i;
#ifdef TT_SSE2
            __m128 acc = _mm_loadu_ps(o);
            for (uint32_t b = 0; b < L->nbpos; b++)
                acc = _mm_add_ps(acc, _mm_loadu_ps(L->btab +
                                                   ((uint64_t)b * 256 + p[L->bsrc[b]]) * nqp + i));
            _mm_storeu_ps(o, acc);
#else
            for (uint32_t b = 0; b < L->nbpos; b++) {
                const float *e = L->btab + ((uint64_t)b * 256 + p[L->bsrc[b]]) * nqp + i;
                for (uint32_t u = 0; u < 4; u++)
                    o[u] += e[u];
            }
#endif
        }
    }
}

int tt_reslut_set(tt_reslut *L, const tt_resdec *d, const float *Qp, uint32_t nqp) {
    L->nqp = nqp;
    if (!L->npos)
        return TT_OK;
    if (nqp % 4)
        return tt_err(TT_EINVAL, "residual lookup tables: %u query rows, not a multiple of 4",
                      nqp);
    if (nqp > L->cap_nqp) {
        free(L->tab);
        free(L->ptab);
        free(L->scale);
        free(L->bias);
        L->tab = L->ptab = NULL;
        L->scale = L->bias = NULL;
        L->cap_nqp = 0;
        if (!(L->tab = tt_alloc((uint64_t)nqp * L->npos, 32, "residual lookup tables")) ||
            (L->vbmi &&
             !(L->ptab = tt_alloc((uint64_t)nqp * L->npair, 64, "residual lookup tables"))) ||
            !(L->scale = tt_alloc(nqp, sizeof *L->scale, "residual lookup tables")) ||
            !(L->bias = tt_alloc(nqp, sizeof *L->bias, "residual lookup tables")))
            return TT_ENOMEM;
        L->cap_nqp = nqp;
    }
    for (uint32_t i = 0; i < nqp; i++) {
        double bias;
        uint8_t *t = L->tab + ((uint64_t)(i / 4) * L->npos * 4 + i % 4) * 32;
        const float *q = Qp + (uint64_t)i * d->dim;
        L->scale[i] = row_tables(L, d, q, t, &bias);
        for (uint32_t u = 0; u < d->nloose; u++) { /* 0-bit positions: one value each */
            const uint32_t k = d->loose[u];
            if (!d->codec->bits[k])
                bias += (double)q[k] * d->codec->weights[d->codec->woff[k]];
        }
        L->bias[i] = (float)bias;
        /* the same tables two positions a 64-byte row, where the VBMI loop reads them */
        static const uint8_t none[32];
        for (uint32_t p = 0; tt_reslut_vbmi_on(L) && p < 2 * L->npair; p++)
            memcpy(L->ptab + ((uint64_t)(p / 2) * nqp + i) * 64 + p % 2 * 32,
                   p < L->npos ? t + (uint64_t)p * 128 : none, 32);
    }
    return byte_tables(L, d, Qp, nqp);
}

/* t[p * 16 + v] = rows[v][off + p] for p < 16, v < 16. */
static void transpose16(const uint8_t *const *rows, uint32_t off, uint8_t *t) {
#ifdef TT_SSE2
    __m128i a[16], s1[16], s2[16], s3[16];
    _Pragma("GCC unroll 16")
    for (uint32_t v = 0; v < 16; v++)
        a[v] = _mm_loadu_si128((const __m128i *)(rows[v] + off));
    /* s1[2g + H]: rows 2g, 2g+1 interleaved, positions 8H..8H+7 */
    _Pragma("GCC unroll 8")
    for (uint32_t g = 0; g < 8; g++) {
        s1[2 * g] = _mm_unpacklo_epi8(a[2 * g], a[2 * g + 1]);
        s1[2 * g + 1] = _mm_unpackhi_epi8(a[2 * g], a[2 * g + 1]);
    }
    /* s2[4h + Q]: rows 4h..4h+3, positions 4Q..4Q+3 */
    _Pragma("GCC unroll 4")
    for (uint32_t h = 0; h < 4; h++)
        _Pragma("GCC unroll 2")
        for (uint32_t H = 0; H < 2; H++) {
            s2[4 * h + 2 * H] = _mm_unpacklo_epi16(s1[4 * h + H], s1[4 * h + 2 + H]);
            s2[4 * h + 2 * H + 1] = _mm_unpackhi_epi16(s1[4 * h + H], s1[4 * h + 2 + H]);
        }
    /* s3[8m + E]: rows 8m..8m+7, positions 2E, 2E+1 */
    _Pragma("GCC unroll 2")
    for (uint32_t m = 0; m < 2; m++)
        _Pragma("GCC unroll 4")
        for (uint32_t Q = 0; Q < 4; Q++) {
            s3[8 * m + 2 * Q] = _mm_unpacklo_epi32(s2[8 * m + Q], s2[8 * m + 4 + Q]);
            s3[8 * m + 2 * Q + 1] = _mm_unpackhi_epi32(s2[8 * m + Q], s2[8 * m + 4 + Q]);
        }
    _Pragma("GCC unroll 8")
    for (uint32_t E = 0; E < 8; E++) {
        _mm_storeu_si128((__m128i *)(t + 32 * E), _mm_unpacklo_epi64(s3[E], s3[8 + E]));
        _mm_storeu_si128((__m128i *)(t + 32 * E + 16), _mm_unpackhi_epi64(s3[E], s3[8 + E]));
    }
#else
    for (uint32_t p = 0; p < 16; p++)
        for (uint32_t v = 0; v < 16; v++)
            t[p * 16 + v] = rows[v][off + p];
#endif
}

/* L->buf[p * 16 + v] = covered byte p of rows[v]. */
static void gather(const tt_reslut *L, const tt_resdec *d, const uint8_t *const *rows) {
    uint32_t p = 0;
    for (uint32_t r = 0; r < d->nruns; r++) {
        const tt_resdec_run *run = &d->runs[r];
        if (!covered(run))
            continue;
        uint32_t b = 0;
        for (; b + 16 <= run->nbytes; b += 16, p += 16)
            transpose16(rows, run->byte0 + b, L->buf + (uint64_t)p * 16);
        for (; b < run->nbytes; b++, p++)
            for (uint32_t v = 0; v < 16; v++)
                L->buf[(uint64_t)p * 16 + v] = rows[v][run->byte0 + b];
    }
}

/* sum[v * 4 + i]: the table entries of the block's vector v for query row 4g + i. */
static void sums_portable(const tt_reslut *L, uint32_t g, int32_t *sum) {
    const uint8_t *tab = L->tab + (uint64_t)g * L->npos * 128;
    for (uint32_t v = 0; v < 16; v++)
        for (uint32_t i = 0; i < 4; i++) {
            int32_t s = 0;
            for (uint32_t p = 0; p < L->npos; p++) {
                const uint8_t x = L->buf[(uint64_t)p * 16 + v];
                const uint8_t *t = tab + (uint64_t)p * 128 + i * 32;
                s += t[x >> 4] + t[16 + (x & 15)];
            }
            sum[v * 4 + i] = s;
        }
}

#ifdef TT_AVX2
/* L->ibuf[p * 32 ..]: position p's high nibbles of the 16 vectors, then their low
 * nibbles (the shuffle indices of sums_avx2), for queries of more than one group of 4
 * rows, so that each group does not split them again. */
AVX2_FN static void split_nibbles_avx2(const tt_reslut *L) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (uint32_t p = 0; p < L->npos; p++) {
        const __m128i x = _mm_loadu_si128((const __m128i *)(L->buf + (uint64_t)p * 16));
        _mm_storeu_si128((__m128i *)(L->ibuf + (uint64_t)p * 32),
                         _mm_and_si128(_mm_srli_epi16(x, 4), m4));
        _mm_storeu_si128((__m128i *)(L->ibuf + (uint64_t)p * 32 + 16), _mm_and_si128(x, m4));
    }
}

/* Adds one query row's 16-bit lane sums (a0: two vectors a lane, a1: the odd ones) to
 * its 32-bit sums of the even (se) and the odd (so) vectors. */
__attribute__((always_inline)) AVX2_FN static inline void fold_lanes(__m256i a0, __m256i a1,
                                                                     __m256i *se, __m256i *so) {
    const __m256i ev = _mm256_sub_epi16(a0, _mm256_slli_epi16(a1, 8));
    /* halves: the high nibbles' sums and the low nibbles' */
    const __m256i e0 = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(ev)),
                  e1 = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(ev, 1)),
                  o0 = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(a1)),
                  o1 = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(a1, 1));
    *se = _mm256_add_epi32(*se, _mm256_add_epi32(e0, e1));
    *so = _mm256_add_epi32(*so, _mm256_add_epi32(o0, o1));
}

/* sum[v * 4 + i] from the four rows' even and odd vectors' sums. */
__attribute__((always_inline)) AVX2_FN static inline void store_sums(const __m256i *se,
                                                                     const __m256i *so,
                                                                     int32_t *sum) {
    for (uint32_t i = 0; i < 4; i++) {
        int32_t e[8], o[8];
        _mm256_storeu_si256((__m256i *)e, se[i]);
        _mm256_storeu_si256((__m256i *)o, so[i]);
        for (uint32_t m = 0; m < 8; m++) {
            sum[(2 * m) * 4 + i] = e[m];
            sum[(2 * m + 1) * 4 + i] = o[m];
        }
    }
}

/* Position p's shuffle indices: the 16 vectors' high nibbles, then their low nibbles
 * (pre: already split into L->ibuf by split_nibbles_avx2). */
__attribute__((always_inline)) AVX2_FN static inline __m256i nibble_index(const tt_reslut *L,
                                                                          uint32_t p,
                                                                          const bool pre) {
    if (pre)
        return _mm256_loadu_si256((const __m256i *)(L->ibuf + (uint64_t)p * 32));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i x = _mm_loadu_si128((const __m128i *)(L->buf + (uint64_t)p * 16));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), m4), lo = _mm_and_si128(x, m4);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(hi), lo, 1);
}

/* pre: the indices are in L->ibuf (split_nibbles_avx2), else split from L->buf here. */
__attribute__((always_inline)) AVX2_FN static inline void
sums_avx2_from(const tt_reslut *L, uint32_t g, int32_t *sum, const bool pre) {
    const uint8_t *tab = L->tab + (uint64_t)g * L->npos * 128;
    __m256i se[4], so[4]; /* 32-bit sums of the even and the odd vectors */
    for (uint32_t i = 0; i < 4; i++)
        se[i] = so[i] = _mm256_setzero_si256();
    for (uint32_t p0 = 0; p0 < L->npos; p0 += LANE_FLUSH) {
        const uint32_t pe = TT_MIN(L->npos, p0 + LANE_FLUSH);
        /* a0: a lane's two vectors as one 16-bit number (mod 2^16); a1: the odd one */
        __m256i a0[4], a1[4];
        for (uint32_t i = 0; i < 4; i++)
            a0[i] = a1[i] = _mm256_setzero_si256();
        for (uint32_t p = p0; p < pe; p++) {
            const __m256i idx = nibble_index(L, p, pre);
            const uint8_t *t = tab + (uint64_t)p * 128;
            _Pragma("GCC unroll 4")
            for (uint32_t i = 0; i < 4; i++) {
                const __m256i r = _mm256_shuffle_epi8(
                    _mm256_loadu_si256((const __m256i *)(t + 32 * i)), idx);
                a0[i] = _mm256_add_epi16(a0[i], r);
                a1[i] = _mm256_add_epi16(a1[i], _mm256_srli_epi16(r, 8));
            }
        }
        for (uint32_t i = 0; i < 4; i++)
            fold_lanes(a0[i], a1[i], &se[i], &so[i]);
    }
    store_sums(se, so, sum);
}

AVX2_FN static void sums_avx2(const tt_reslut *L, uint32_t g, int32_t *sum) {
    sums_avx2_from(L, g, sum, false);
}

AVX2_FN static void sums_avx2_pre(const tt_reslut *L, uint32_t g, int32_t *sum) {
    sums_avx2_from(L, g, sum, true);
}

#define AVX512BW_FN __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))
/* sums_avx2_from with two query rows a register: the indices in both halves, rows 2h
 * and 2h + 1's tables side by side (64 bytes, as they are laid out), so that one
 * shuffle looks up both. The same integer sums (the lanes add in the same order). */
__attribute__((always_inline)) AVX512BW_FN static inline void
sums_avx512_from(const tt_reslut *L, uint32_t g, int32_t *sum, const bool pre) {
    const uint8_t *tab = L->tab + (uint64_t)g * L->npos * 128;
    __m256i se[4], so[4];
    for (uint32_t i = 0; i < 4; i++)
        se[i] = so[i] = _mm256_setzero_si256();
    for (uint32_t p0 = 0; p0 < L->npos; p0 += LANE_FLUSH) {
        const uint32_t pe = TT_MIN(L->npos, p0 + LANE_FLUSH);
        __m512i a0[2], a1[2]; /* rows 2h (low half) and 2h + 1 (high half) */
        for (uint32_t h = 0; h < 2; h++)
            a0[h] = a1[h] = _mm512_setzero_si512();
        for (uint32_t p = p0; p < pe; p++) {
            const __m512i idx = _mm512_broadcast_i64x4(nibble_index(L, p, pre));
            const uint8_t *t = tab + (uint64_t)p * 128;
            _Pragma("GCC unroll 2")
            for (uint32_t h = 0; h < 2; h++) {
                const __m512i r = _mm512_shuffle_epi8(_mm512_loadu_si512(t + 64 * h), idx);
                a0[h] = _mm512_add_epi16(a0[h], r);
                a1[h] = _mm512_add_epi16(a1[h], _mm512_srli_epi16(r, 8));
            }
        }
        for (uint32_t h = 0; h < 2; h++) {
            fold_lanes(_mm512_castsi512_si256(a0[h]), _mm512_castsi512_si256(a1[h]),
                       &se[2 * h], &so[2 * h]);
            fold_lanes(_mm512_extracti64x4_epi64(a0[h], 1), _mm512_extracti64x4_epi64(a1[h], 1),
                       &se[2 * h + 1], &so[2 * h + 1]);
        }
    }
    store_sums(se, so, sum);
}

AVX512BW_FN static void sums_avx512(const tt_reslut *L, uint32_t g, int32_t *sum) {
    sums_avx512_from(L, g, sum, false);
}

AVX512BW_FN static void sums_avx512_pre(const tt_reslut *L, uint32_t g, int32_t *sum) {
    sums_avx512_from(L, g, sum, true);
}

/* Two positions of one query row a register (AVX-512 VBMI + VNNI: Ice Lake and later,
 * Zen 4). The row's four nibble tables of positions 2j, 2j + 1 fill 64 bytes (ptab);
 * one vpermb looks up the four nibbles of each of the 16 vectors (index 16 t + nibble
 * for table t), laid out four bytes a vector, and one vpdpbusd adds those four bytes
 * into the vector's 32-bit sum. Two instructions for 64 entries, where the AVX-512BW
 * loop spends a shuffle and three additions on them and folds 16-bit lanes; a row's
 * sums come out one register per row (a lane per vector), transposed into out. The same
 * integer sums, so the same floats. The transposition costs a block the same for any
 * number of rows and positions: tt_reslut_vbmi_on says where the loop pays. */
#define VBMI_FN __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vnni,avx2,fma,f16c")))

/* The permute indices of positions 2j, 2j + 1 of a block (transposed into L->buf): byte
 * 4 v + t is vector v's nibble t (high, low, high, low) as an index into a row's 64
 * bytes of ptab, 16 t + the nibble. */
__attribute__((always_inline)) VBMI_FN static inline __m512i pair_index(const tt_reslut *L,
                                                                        uint32_t j) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    /* from [high nibbles of 2j, of 2j + 1 | low nibbles of 2j, of 2j + 1], 16 vectors each */
    const __m512i order = _mm512_set_epi8(
        63, 31, 47, 15, 62, 30, 46, 14, 61, 29, 45, 13, 60, 28, 44, 12, 59, 27, 43, 11, 58, 26,
        42, 10, 57, 25, 41, 9, 56, 24, 40, 8, 55, 23, 39, 7, 54, 22, 38, 6, 53, 21, 37, 5, 52, 20,
        36, 4, 51, 19, 35, 3, 50, 18, 34, 2, 49, 17, 33, 1, 48, 16, 32, 0);
    const __m512i off = _mm512_set1_epi32(0x30201000);
    const __m256i x = _mm256_loadu_si256((const __m256i *)(L->buf + (uint64_t)j * 32));
    const __m512i y =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(_mm256_srli_epi16(x, 4), m4)),
                           _mm256_and_si256(x, m4), 1);
    return _mm512_or_si512(_mm512_permutexvar_epi8(order, y), off);
}

/* f[r][v] -> f[v][r] for 16 registers of 16 floats. */
__attribute__((always_inline)) VBMI_FN static inline void transpose16_ps(__m512 *f) {
    __m512 t[16];
    for (uint32_t i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(f[i], f[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(f[i], f[i + 1]);
    }
    /* f[4b + c], lane l: rows 4b..4b+3 of column 4l + c */
    for (uint32_t b = 0; b < 16; b += 4) {
        f[b] = _mm512_shuffle_ps(t[b], t[b + 2], 0x44);
        f[b + 1] = _mm512_shuffle_ps(t[b], t[b + 2], 0xee);
        f[b + 2] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0x44);
        f[b + 3] = _mm512_shuffle_ps(t[b + 1], t[b + 3], 0xee);
    }
    for (uint32_t c = 0; c < 4; c++) {
        t[c] = _mm512_shuffle_f32x4(f[c], f[4 + c], 0x88);
        t[4 + c] = _mm512_shuffle_f32x4(f[c], f[4 + c], 0xdd);
        t[8 + c] = _mm512_shuffle_f32x4(f[8 + c], f[12 + c], 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(f[8 + c], f[12 + c], 0xdd);
    }
    for (uint32_t c = 0; c < 8; c++) {
        f[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
        f[8 + c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
    }
}

/* Rows r0 .. r0 + R of a block of nv vectors: out[v * nqp + r0 + r] += scale * sum +
 * bias, as the other loops add them. */
__attribute__((always_inline)) VBMI_FN static inline void
sums_vbmi_rows(const tt_reslut *L, uint32_t r0, const uint32_t R, uint32_t nv, float *out,
               const bool once) {
    const uint32_t nqp = L->nqp;
    const __m512i ones = _mm512_set1_epi8(1);
    /* With fewer than 16 rows each row keeps 16 / R sums (pairs j, j + 1, ... apart),
     * so that 16 vpdpbusd are in flight, not one row's chain of them. */
    const uint32_t C = 16 / R;
    __m512i acc[16];
    for (uint32_t r = 0; r < 16; r++)
        acc[r] = _mm512_setzero_si512();
    for (uint32_t j = 0; j < L->npair; j += C) {
        _Pragma("GCC unroll 4")
        for (uint32_t c = 0; c < C; c++) {
            if (j + c == L->npair) /* the last pairs: fewer than C */
                break;
            const __m512i idx = once ? pair_index(L, j + c)
                                     : _mm512_loadu_si512(L->pidx + (uint64_t)(j + c) * 64);
            const uint8_t *t = L->ptab + ((uint64_t)(j + c) * nqp + r0) * 64;
            _Pragma("GCC unroll 16")
            for (uint32_t r = 0; r < R; r++)
                acc[c * R + r] = _mm512_dpbusd_epi32(
                    acc[c * R + r],
                    _mm512_permutexvar_epi8(idx, _mm512_loadu_si512(t + 64 * r)), ones);
        }
    }
    for (uint32_t c = 1; c < C; c++)
        for (uint32_t r = 0; r < R; r++)
            acc[r] = _mm512_add_epi32(acc[r], acc[c * R + r]);
    __m512 f[16];
    for (uint32_t r = 0; r < 16; r++)
        f[r] = r < R ? _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(L->scale[r0 + r]),
                                                   _mm512_cvtepi32_ps(acc[r])),
                                     _mm512_set1_ps(L->bias[r0 + r]))
                     : _mm512_setzero_ps();
    transpose16_ps(f);
    const __mmask16 m = (__mmask16)((1u << R) - 1);
    for (uint32_t v = 0; v < nv; v++) {
        float *o = out + (uint64_t)v * nqp + r0;
        _mm512_mask_storeu_ps(o, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, o), f[v]));
    }
}

/* A block of nv vectors (transposed into L->buf) for every query row: the indices made
 * once into L->pidx where more than one pass over the positions reads them, else in the
 * pass (at 3584-d, 28 KiB written and read again a block, beside 114 KiB of tables for 4
 * rows, where both come from L2). */
VBMI_FN static void sums_vbmi(const tt_reslut *L, uint32_t nv, float *out) {
    const uint32_t nqp = L->nqp;
    if (nqp == 4) {
        sums_vbmi_rows(L, 0, 4, nv, out, true);
        return;
    }
    if (nqp == 8) {
        sums_vbmi_rows(L, 0, 8, nv, out, true);
        return;
    }
    if (nqp == 16) {
        sums_vbmi_rows(L, 0, 16, nv, out, true);
        return;
    }
    for (uint32_t j = 0; j < L->npair; j++)
        _mm512_storeu_si512(L->pidx + (uint64_t)j * 64, pair_index(L, j));
    uint32_t r0 = 0;
    for (; r0 + 16 <= nqp; r0 += 16)
        sums_vbmi_rows(L, r0, 16, nv, out, false);
    if (r0 + 8 <= nqp) {
        sums_vbmi_rows(L, r0, 8, nv, out, false);
        r0 += 8;
    }
    if (r0 < nqp)
        sums_vbmi_rows(L, r0, 4, nv, out, false);
}
#endif

void tt_reslut_dot(const tt_reslut *L, const tt_resdec *d, const uint8_t *packed, uint64_t n,
                   const float *Qp, float *x, float *out) {
    const uint32_t nqp = L->nqp;
    const uint64_t bpv = d->bytes_per_vec;
    if (!L->npos) { /* no tables: every position exact */
        tt_resdec_dot_rest(d, d->loose, d->nloose, 0, packed, n, Qp, nqp, x, out);
        return;
    }
    if (!L->rest)
        memset(out, 0, n * nqp * sizeof *out);
    else
        tt_resdec_dot_rest(d, L->loose, L->nloose, L->bon ? 1u << 4 | 1u << 8 : 0, packed, n,
                           Qp, nqp, x, out);
    if (L->bon)
        byte_dots(L, packed, n, bpv, out);
    int32_t sum[16 * 4];
    const uint8_t *rows[16];
    for (uint64_t v0 = 0; v0 < n; v0 += 16) {
        const uint32_t nv = (uint32_t)TT_MIN(16, n - v0);
        for (uint32_t v = 0; v < 16; v++)
            rows[v] = v < nv ? packed + (v0 + v) * bpv : L->zero;
        gather(L, d, rows);
#ifdef TT_AVX2
        if (tt_reslut_vbmi_on(L)) {
            sums_vbmi(L, nv, out + v0 * nqp);
            continue;
        }
        const bool pre = L->avx2 && nqp > 4;
        if (pre)
            split_nibbles_avx2(L);
#endif
        for (uint32_t g = 0; g < nqp / 4; g++) {
#ifdef TT_AVX2
            if (L->avx2 && L->avx512 && pre)
                sums_avx512_pre(L, g, sum);
            else if (L->avx2 && L->avx512)
                sums_avx512(L, g, sum);
            else if (pre)
                sums_avx2_pre(L, g, sum);
            else if (L->avx2)
                sums_avx2(L, g, sum);
            else
#endif
                sums_portable(L, g, sum);
            const uint32_t r = 4 * g;
            for (uint32_t v = 0; v < nv; v++) {
                float *o = out + (v0 + v) * nqp + r;
#ifdef TT_SSE2
                const __m128 y = _mm_cvtepi32_ps(_mm_loadu_si128((const __m128i *)(sum + v * 4)));
                _mm_storeu_ps(o, _mm_add_ps(_mm_loadu_ps(o),
                                            _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(L->scale + r), y),
                                                       _mm_loadu_ps(L->bias + r))));
#else
                for (uint32_t i = 0; i < 4; i++)
                    o[i] += L->scale[r + i] * (float)sum[v * 4 + i] + L->bias[r + i];
#endif
            }
        }
    }
}

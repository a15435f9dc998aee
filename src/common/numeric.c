/* Numbers: half-precision conversion and checks over rows of vectors. */
#include "common/common.h"
#include "common/simd.h"

#include <math.h>

/* binary16 -> binary32 without a call, a loop or a branch, after F. Giesen, "half
 * to float done quick" (2012, variant 5): move exponent and mantissa into place and
 * rebias by 112; Inf/NaN get another 112 (exponent 255, payload kept); subnormals
 * are renormalised by one exact float subtraction, 2^-14 * (1 + m/1024) - 2^-14.
 * Both candidates are computed and selected with masks, so the blocked loop below
 * vectorises at -O2, and no float operand is ever subnormal (correct under DAZ/FTZ).
 * Bit-identical to tt_f16_to_f32 for all 65536 inputs (tests/test_npy.c). */
static inline float f16_to_f32_inline(uint16_t h) {
    const uint32_t rebias = (uint32_t)(127 - 15) << 23, magic_bits = (uint32_t)113 << 23;
    uint32_t o = (uint32_t)(h & 0x7fff) << 13;
    uint32_t exp = o & 0x0f800000u;
    uint32_t is_infnan = 0u - (uint32_t)(exp == 0x0f800000u);
    uint32_t is_sub = 0u - (uint32_t)(exp == 0);
    uint32_t normal = o + rebias + (is_infnan & rebias);
    uint32_t sub = normal + (1u << 23);
    float fs, magic;
    memcpy(&fs, &sub, 4);
    memcpy(&magic, &magic_bits, 4);
    fs -= magic;
    memcpy(&sub, &fs, 4);
    o = (sub & is_sub) | (normal & ~is_sub) | ((uint32_t)(h & 0x8000) << 16);
    float r;
    memcpy(&r, &o, 4);
    return r;
}

/* Fixed-length inner blocks let gcc's cheap -O2 vectoriser handle the loop. */
void tt_f16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t j = 0; j < 16; j++)
            dst[i + j] = f16_to_f32_inline(src[i + j]);
    for (; i < n; i++)
        dst[i] = f16_to_f32_inline(src[i]);
}

/* IEEE 754 binary16 <-> binary32, round-to-nearest-even, with subnormals,
 * infinities and NaN. */
float tt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t tt_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t exp = (int32_t)((u >> 23) & 0xff);
    uint32_t man = u & 0x7fffff;
    if (exp == 255) /* Inf / NaN */
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++; /* may carry into the exponent, which is the right result */
    return (uint16_t)half;
}

/* Floats below this in magnitude round to a finite float16 (at most 65504); 65520,
 * the midpoint between 65504 and 65536, rounds to even: infinity. */
#define F16_ROUNDS_FINITE 65520.0f

bool tt_f16_round_n(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(x[i]) < F16_ROUNDS_FINITE)) /* also NaN */
            return false;
    for (size_t i = 0; i < n; i++)
        x[i] = tt_f16_to_f32(tt_f32_to_f16(x[i]));
    return true;
}

#ifdef TT_AVX2
/* 8 values at a time through F16C's conversions (the same rounding); the tail and CPUs
 * without them take the portable loop. Returns the values done, or SIZE_MAX at an
 * inexact one. */
AVX2_FN static size_t f16_exact_avx2(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(src + i);
        const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        const __m256 back = _mm256_cvtph_ps(h);
        /* bit for bit, so that -0 and NaN payloads count as they are */
        const __m256i eq = _mm256_cmpeq_epi32(_mm256_castps_si256(x), _mm256_castps_si256(back));
        if (_mm256_movemask_epi8(eq) != -1)
            return SIZE_MAX;
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    return i;
}
#endif

bool tt_f16_from_f32_exact_n(uint16_t *restrict dst, const float *restrict src, size_t n) {
    size_t i = 0;
#ifdef TT_AVX2
    if (tt_cpu_avx2() && (i = f16_exact_avx2(dst, src, n)) == SIZE_MAX)
        return false;
#endif
    for (; i < n; i++) {
        const uint16_t h = tt_f32_to_f16(src[i]);
        const float back = tt_f16_to_f32(h);
        if (memcmp(&back, &src[i], sizeof back))
            return false;
        dst[i] = h;
    }
    return true;
}

int64_t tt_normalize_rows(float *x, uint64_t n, uint32_t dim) {
    int64_t zero = -1;
    for (uint64_t i = 0; i < n; i++) {
        float *r = x + i * dim;
        double s = 0;
        for (uint32_t j = 0; j < dim; j++)
            s += (double)r[j] * r[j];
        if (s == 0) {
            if (zero < 0)
                zero = (int64_t)i;
            continue;
        }
        float inv = (float)(1.0 / sqrt(s));
        for (uint32_t j = 0; j < dim; j++)
            r[j] *= inv;
    }
    return zero;
}

/* A value is NaN or Inf when its exponent bits are all ones: the largest exponent field
 * of a row tells, from four independent maxima (integer operations, no chain of float
 * additions: opening a 3584-d index checks 29 million centroid values). */
int64_t tt_find_nonfinite(const float *x, uint64_t n, uint32_t dim) {
    const uint32_t E = 0x7f800000u;
    for (uint64_t i = 0; i < n; i++) {
        const float *r = x + i * dim;
        uint32_t m[4] = {0, 0, 0, 0}, j = 0;
        for (; j + 4 <= dim; j += 4)
            for (int t = 0; t < 4; t++) {
                uint32_t u;
                memcpy(&u, r + j + t, sizeof u);
                m[t] = TT_MAX(m[t], u & E);
            }
        for (; j < dim; j++) {
            uint32_t u;
            memcpy(&u, r + j, sizeof u);
            m[0] = TT_MAX(m[0], u & E);
        }
        if (TT_MAX(TT_MAX(m[0], m[1]), TT_MAX(m[2], m[3])) == E)
            return (int64_t)i;
    }
    return -1;
}

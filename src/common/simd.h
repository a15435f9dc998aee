/* Compile-time SIMD availability for the kernels that pick a vector path at run time.
 * TT_SSE2: SSE2 intrinsics (baseline on x86-64); elsewhere scalar loops compute the same
 * values. TT_AVX512: AVX-512 code may be compiled (functions marked AVX512_FN); callers
 * check __builtin_cpu_supports("avx512f") before running it; TT_AVX2 likewise for AVX2. */
#ifndef TT_SIMD_H
#define TT_SIMD_H

#if defined(__SSE2__)
#include <emmintrin.h>
#define TT_SSE2 1
#endif
/* Where the CPU has AVX-512 (checked at run time), the centroid stages' row loops use
 * it instead: a row of 32 scores is two registers. Maxima and comparisons are exact, so
 * both versions return the same floats (tests/test_search.c runs both). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define TT_AVX512 1
#define AVX512_FN __attribute__((target("avx512f")))
/* The AVX-512 loops keep a row in at most four registers. */
#define AVX512_MAX_NQP 64u
/* AVX2 + FMA code for CPUs without AVX-512 (Zen 2/3, most Intel client CPUs): functions
 * marked AVX2_FN; callers check tt_cpu_avx2() before running it. Every such CPU also
 * has F16C (float16 loads), which the kernels may use. */
#define TT_AVX2 1
#define AVX2_FN __attribute__((target("avx2,fma,f16c")))
static inline int tt_cpu_avx2(void) {
    __builtin_cpu_init();
    /* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not
     * know the name. */
    unsigned a, b, c, d;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
/* The sum of a register's 8 floats, in one order (halves, then pairs, then the last
 * two), so that every kernel rounds it alike; AVX alone, so AVX2 and AVX-512 code can
 * inline it. */
__attribute__((target("avx"))) static inline float tt_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}
#endif

#endif

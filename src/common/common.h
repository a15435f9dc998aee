/* The base every part of the library stands on: errors, little-endian access, checked
 * arithmetic, memory, half precision, random numbers, threads and growable strings.
 * Nothing here is exported; nothing here includes another part of the library. */
#ifndef TT_COMMON_H
#define TT_COMMON_H

#include "tartan.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define TT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define TT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define TT_PRINTF(a, b)
#define TT_UNLIKELY(x) (x)
#endif

#define TT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ------------------------------------------------------------ errors */

/* Records `status` and a printf-style message in the thread-local error slot and
 * returns status, so callers write `return tt_err(TT_EIO, "%s: ...", path);`. */
int tt_err(int status, const char *fmt, ...) TT_PRINTF(2, 3);
/* Like tt_err, appending ": strerror(errno_value)". Maps ENOSPC/EFBIG to TT_ENOSPC
 * and ENOENT to TT_ENOTFOUND when status is TT_EIO. */
int tt_err_errno(int status, int errno_value, const char *fmt, ...) TT_PRINTF(3, 4);
/* Prefixes the current thread-local message with "prefix: " (keeps the status). */
int tt_err_prefix(int status, const char *fmt, ...) TT_PRINTF(2, 3);
void tt_err_clear(void);

/* ------------------------------------------------- little-endian I/O */

static inline uint16_t tt_rd16(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint16_t)(b[0] | (b[1] << 8));
}
static inline uint32_t tt_rd32(const void *p) {
    const uint8_t *b = (const uint8_t *)p;
    return (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
}
static inline uint64_t tt_rd64(const void *p) {
    return (uint64_t)tt_rd32(p) | ((uint64_t)tt_rd32((const uint8_t *)p + 4) << 32);
}
static inline void tt_wr16(void *p, uint16_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8);
}
static inline void tt_wr32(void *p, uint32_t v) {
    uint8_t *b = (uint8_t *)p;
    b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); b[2] = (uint8_t)(v >> 16); b[3] = (uint8_t)(v >> 24);
}
static inline void tt_wr64(void *p, uint64_t v) {
    tt_wr32(p, (uint32_t)v);
    tt_wr32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}
static inline float tt_rdf32(const void *p) {
    uint32_t u = tt_rd32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void tt_wrf32(void *p, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    tt_wr32(p, u);
}

/* The on-disk arrays of float32/uint32 are read in place through mmap; that is only
 * correct on a little-endian host, which tt_index_open checks. */
static inline bool tt_host_is_le(void) {
    const uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ------------------------------------------------- checked arithmetic */

/* Return false on overflow. */
static inline bool tt_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool tt_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* malloc/calloc of n*size bytes with overflow check; set TT_ENOMEM on failure
 * with `what` in the message. */
void *tt_alloc(uint64_t n, uint64_t size, const char *what);
void *tt_calloc(uint64_t n, uint64_t size, const char *what);
/* Grows *p (an array of *cap elements of elem bytes) to hold at least n elements,
 * by at least half again; TT_ENOMEM with `what` in the message on failure (the old
 * array is kept). */
int tt_grow(void **p, size_t *cap, size_t n, size_t elem, const char *what);
/* 64-byte aligned allocation (free with free()). */
void *tt_alloc_aligned(uint64_t n, uint64_t size, uint64_t align, const char *what);

/* Index of the last element <= v in a[0..n) (ascending, a[0] <= v, n >= 1): the
 * document holding vector v, given the documents' first vectors. */
static inline uint64_t tt_find_le(const uint64_t *a, uint64_t n, uint64_t v) {
    uint64_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* ---------------------------------------------------- half precision */

float tt_f16_to_f32(uint16_t h);
/* dst[i] = tt_f16_to_f32(src[i]) for i < n, bit for bit, in a loop that vectorises
 * (numeric.c; host-order values). */
void tt_f16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n);
uint16_t tt_f32_to_f16(float f);
/* Rounds x[0..n) to their nearest float16 values (ties to even), in place, when every
 * one is finite and within float16's range; returns whether it did (else x is
 * unchanged). */
bool tt_f16_round_n(float *x, size_t n);
/* dst[i] = the float16 of src[i] for i < n when every src[i] is exactly a float16
 * value; false at the first that is not (dst then partly written). */
bool tt_f16_from_f32_exact_n(uint16_t *restrict dst, const float *restrict src, size_t n);
static inline float tt_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------ miscellaneous */

double tt_now(void);            /* monotonic seconds */
/* CPU seconds of the calling thread (user + system), or tt_now() where the clock is
 * missing: what a measurement compares on a machine other processes load. */
double tt_thread_cpu_now(void);
int tt_default_threads(void);   /* online CPUs, at least 1 */
/* L2-normalises n rows of dim floats in place. Returns the index of the first
 * all-zero row, or -1 if none. */
int64_t tt_normalize_rows(float *x, uint64_t n, uint32_t dim);
/* Index of the first row containing NaN/Inf, or -1. */
int64_t tt_find_nonfinite(const float *x, uint64_t n, uint32_t dim);

/* splitmix64-seeded xoshiro256** generator: reproducible across platforms. */
typedef struct tt_rng { uint64_t s[4]; } tt_rng;
void tt_rng_seed(tt_rng *r, uint64_t seed);
uint64_t tt_rng_next(tt_rng *r);
/* Uniform in [0, n) without modulo bias. */
uint64_t tt_rng_below(tt_rng *r, uint64_t n);
double tt_rng_uniform(tt_rng *r);   /* [0, 1) */

/* Runs fn(arg, t, nthreads) on nthreads threads (t = 0..nthreads-1; thread 0 is the
 * caller) and waits for all. A share whose thread cannot be started runs on the
 * caller afterwards, so every t runs exactly once; always returns TT_OK. */
typedef void (*tt_parallel_fn)(void *arg, int t, int nthreads);
int tt_parallel(int nthreads, tt_parallel_fn fn, void *arg);

/* ------------------------------------------------------------ text (text.c) */

/* Offset of the first byte of s[0..n) that does not start a well-formed UTF-8
 * sequence, or SIZE_MAX if all of it is valid. */
size_t tt_utf8_invalid_at(const char *s, size_t n);
/* Why id[0..len) cannot be a document or query id, or NULL if it can: ids are 1..max
 * bytes of UTF-8 without whitespace or control characters, because TREC runs and qrels
 * separate their fields with whitespace (an id with a space shifts every later field). */
const char *tt_id_problem(const char *id, size_t len, size_t max);

/* ------------------------------------------------------------ strings */

/* A growable byte string (not NUL-terminated unless tt_sbuf_cstr is called). */
typedef struct tt_sbuf {
    char *p;
    size_t len, cap;
} tt_sbuf;

/* Ensures room for `extra` more bytes. TT_ENOMEM on failure. */
int tt_sbuf_reserve(tt_sbuf *b, size_t extra);
int tt_sbuf_append(tt_sbuf *b, const void *data, size_t n);
/* NUL-terminates (not counted in len) and returns b->p. NULL on allocation failure. */
const char *tt_sbuf_cstr(tt_sbuf *b);
void tt_sbuf_free(tt_sbuf *b);

#endif

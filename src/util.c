/* Allocation, half-precision conversion, RNG, threads, row helpers. */
#include "internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void *tt_alloc(uint64_t n, uint64_t size, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size %llu x %llu overflows", what, (unsigned long long)n,
               (unsigned long long)size);
        return NULL;
    }
    void *p = malloc(bytes ? (size_t)bytes : 1);
    if (!p)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
}

void *tt_calloc(uint64_t n, uint64_t size, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size %llu x %llu overflows", what, (unsigned long long)n,
               (unsigned long long)size);
        return NULL;
    }
    void *p = calloc(bytes ? (size_t)bytes : 1, 1);
    if (!p)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
}

int tt_grow(void **p, size_t *cap, size_t n, size_t elem, const char *what) {
    if (n <= *cap)
        return TT_OK;
    size_t nc = TT_MAX(n, *cap + *cap / 2);
    uint64_t bytes;
    if (!tt_mul_ok(nc, elem, &bytes) || bytes > SIZE_MAX)
        return tt_err(TT_ENOMEM, "%s: size overflows", what);
    void *q = realloc(*p, (size_t)bytes);
    if (!q)
        return tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what,
                      (unsigned long long)bytes);
    *p = q;
    *cap = nc;
    return TT_OK;
}

void *tt_alloc_aligned(uint64_t n, uint64_t size, uint64_t align, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || !tt_add_ok(bytes, align, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size overflows", what);
        return NULL;
    }
    bytes = (bytes / align) * align; /* aligned_alloc wants a multiple of align */
    if (bytes == 0)
        bytes = align;
    void *p = aligned_alloc((size_t)align, (size_t)bytes);
    if (!p)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return p;
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

double tt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tt_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)TT_MIN(n, 256);
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

int64_t tt_find_nonfinite(const float *x, uint64_t n, uint32_t dim) {
    for (uint64_t i = 0; i < n; i++) {
        const float *r = x + i * dim;
        float acc = 0;
        for (uint32_t j = 0; j < dim; j++)
            acc += r[j] * 0.0f; /* NaN or Inf makes acc NaN */
        if (acc != acc)
            return (int64_t)i;
    }
    return -1;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tt_rng_seed(tt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tt_rng_next(tt_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t tt_rng_below(tt_rng *r, uint64_t n) {
    if (n <= 1)
        return 0;
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = tt_rng_next(r);
    while (x >= limit);
    return x % n;
}

double tt_rng_uniform(tt_rng *r) { return (double)(tt_rng_next(r) >> 11) * 0x1.0p-53; }

typedef struct par_job {
    tt_parallel_fn fn;
    void *arg;
    int t, n;
} par_job;

static void *par_main(void *p) {
    par_job *j = (par_job *)p;
    j->fn(j->arg, j->t, j->n);
    return NULL;
}

int tt_parallel(int nthreads, tt_parallel_fn fn, void *arg) {
    if (nthreads <= 1) {
        fn(arg, 0, 1);
        return TT_OK;
    }
    pthread_t tid[256];
    par_job job[256];
    int started[256] = {0};
    int status = TT_OK;
    if (nthreads > 256)
        nthreads = 256;
    for (int t = 1; t < nthreads; t++) {
        job[t] = (par_job){fn, arg, t, nthreads};
        if (pthread_create(&tid[t], NULL, par_main, &job[t]) == 0)
            started[t] = 1;
    }
    fn(arg, 0, nthreads);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            fn(arg, t, nthreads); /* could not start a thread: do its share here */
    }
    return status;
}

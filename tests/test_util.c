/* Unit tests of the shared helpers (src/util.c, src/error.c, src/internal.h):
 * half precision, bfloat16, the RNG, row helpers, tt_parallel and error messages. */
#include "testutil.h"

#include <errno.h>
#include <float.h>
#include <pthread.h>

/* ck_assert marks a point (a pipe write) even when it passes: too slow for loops over
 * all 65536 halfs, so hot loops use this instead. */
#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond))                                                                           \
            ck_abort_msg(__VA_ARGS__);                                                         \
    } while (0)

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* binary16 value by definition (IEEE 754-2008 3.4), computed in double. */
static double f16_reference(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v;
    if (exp == 0)
        v = ldexp(man, -24);
    else if (exp == 31)
        v = man ? NAN : INFINITY;
    else
        v = ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

START_TEST(f16_exhaustive_round_trip) {
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = tt_f16_to_f32(h);
        double ref = f16_reference(h);
        CHECK(!!signbit(f) == (h >> 15), "0x%04x: wrong sign", i); /* also -0 */
        if (f16_is_nan(h)) {
            CHECK(isnan(f), "0x%04x should be NaN", i);
            uint16_t back = tt_f32_to_f16(f);
            CHECK(f16_is_nan(back) && (back & 0x8000) == (h & 0x8000),
                  "NaN 0x%04x came back as 0x%04x", i, back);
            continue;
        }
        CHECK((double)f == ref, "0x%04x -> %.9g, expected %.9g", i, f, ref);
        uint16_t back = tt_f32_to_f16(f);
        CHECK(back == h, "0x%04x -> %g -> 0x%04x", i, f, back);
    }
}
END_TEST

/* Round to nearest, ties to even: every midpoint between consecutive finite halfs
 * goes to the one with an even mantissa, and the floats just beside the midpoint
 * go to the nearer neighbour. Midpoints need 12 significant bits, so they are
 * exact in float. */
START_TEST(f16_rounding_ties_to_even) {
    for (uint32_t h = 0; h < 0x7bff; h++) {
        for (int neg = 0; neg <= 1; neg++) {
            uint16_t lo = (uint16_t)(h | (neg ? 0x8000 : 0)), hi = (uint16_t)(lo + 1);
            double a = f16_reference(lo), b = f16_reference(hi);
            float mid = (float)((a + b) / 2);
            CHECK((double)mid == (a + b) / 2, "midpoint of 0x%04x not exact", lo);
            uint16_t even = (lo & 1) ? hi : lo;
            CHECK(tt_f32_to_f16(mid) == even, "tie %.9g -> 0x%04x, expected 0x%04x", mid,
                  tt_f32_to_f16(mid), even);
            float toward_b = nextafterf(mid, (float)b * 2), toward_a = nextafterf(mid, (float)a);
            CHECK(tt_f32_to_f16(toward_b) == hi, "just above the tie after 0x%04x", lo);
            CHECK(tt_f32_to_f16(toward_a) == lo, "just below the tie after 0x%04x", lo);
        }
    }
    /* the largest finite half is 65504; the tie with 65536 rounds up to infinity */
    ck_assert_int_eq(tt_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_int_eq(tt_f32_to_f16(65519.99f), 0x7bff);
    ck_assert_int_eq(tt_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_int_eq(tt_f32_to_f16(1e30f), 0x7c00);
    ck_assert_int_eq(tt_f32_to_f16(-1e30f), 0xfc00);
    ck_assert_int_eq(tt_f32_to_f16(INFINITY), 0x7c00);
    /* below half the smallest subnormal (2^-24): zero; exactly half: tie to 0 */
    ck_assert_int_eq(tt_f32_to_f16(ldexpf(1, -25)), 0x0000);
    ck_assert_int_eq(tt_f32_to_f16(ldexpf(1, -26)), 0x0000);
    ck_assert_int_eq(tt_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 0x0001);
    ck_assert_int_eq(tt_f32_to_f16(-ldexpf(1, -30)), 0x8000);
    ck_assert_int_eq(tt_f32_to_f16(-0.0f), 0x8000);
    ck_assert_int_eq(tt_f32_to_f16(FLT_MIN), 0x0000);
}
END_TEST

START_TEST(bf16_values) {
    for (uint32_t i = 0; i < 65536; i++) {
        float f = tt_bf16_to_f32((uint16_t)i);
        CHECK(f32_bits(f) == i << 16, "bf16 0x%04x", i);
    }
    ck_assert(tt_bf16_to_f32(0x3f80) == 1.0f);
    ck_assert(tt_bf16_to_f32(0xc000) == -2.0f);
    ck_assert(tt_bf16_to_f32(0x3e20) == 0.15625f);
    ck_assert(isinf(tt_bf16_to_f32(0x7f80)));
    ck_assert(isnan(tt_bf16_to_f32(0x7fc0)));
}
END_TEST

START_TEST(little_endian_helpers) {
    uint8_t b[8];
    tt_wr16(b, 0x1234);
    ck_assert(b[0] == 0x34 && b[1] == 0x12);
    ck_assert_uint_eq(tt_rd16(b), 0x1234);
    tt_wr32(b, 0xa1b2c3d4u);
    ck_assert(b[0] == 0xd4 && b[3] == 0xa1);
    ck_assert_uint_eq(tt_rd32(b), 0xa1b2c3d4u);
    tt_wr64(b, 0x0102030405060708ull);
    ck_assert(b[0] == 0x08 && b[7] == 0x01);
    ck_assert(tt_rd64(b) == 0x0102030405060708ull);
    tt_wrf32(b, -1.5f);
    ck_assert(tt_rdf32(b) == -1.5f);
    ck_assert_uint_eq(tt_rd32(b), f32_bits(-1.5f));
    uint64_t out;
    ck_assert(tt_mul_ok(1ull << 32, 1ull << 31, &out) && out == 1ull << 63);
    ck_assert(!tt_mul_ok(1ull << 32, 1ull << 32, &out));
    ck_assert(!tt_add_ok(UINT64_MAX, 1, &out));
    ck_assert(tt_add_ok(UINT64_MAX - 1, 1, &out) && out == UINT64_MAX);
}
END_TEST

START_TEST(alloc_checks) {
    tt_err_clear();
    ck_assert_ptr_null(tt_alloc(UINT64_MAX / 2, 4, "big thing"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "big thing"));
    ck_assert_ptr_null(tt_calloc(1ull << 40, 1ull << 40, "huge"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "huge"));
    uint8_t *p = tt_calloc(100, 3, "small");
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 300; i++)
        ck_assert_int_eq(p[i], 0);
    free(p);
    float *a = tt_alloc_aligned(17, 4, 64, "aligned");
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq((uintptr_t)a % 64, 0);
    for (int i = 0; i < 17; i++) /* all 68 bytes are usable */
        a[i] = (float)i;
    free(a);
}
END_TEST

/* Reference outputs from an independent Python implementation of splitmix64 seeding
 * (Steele et al. 2014) and xoshiro256** (Blackman & Vigna 2018). */
START_TEST(rng_determinism) {
    static const uint64_t seed42[4] = {0x15780b2e0c2ec716ull, 0x6104d9866d113a7eull,
                                       0xae17533239e499a1ull, 0xecb8ad4703b360a1ull};
    static const uint64_t seed0[4] = {0x99ec5f36cb75f2b4ull, 0xbf6e1f784956452aull,
                                      0x1a5f849d4933e6e0ull, 0x6aa594f1262d2d2cull};
    tt_rng a, b;
    tt_rng_seed(&a, 42);
    for (int i = 0; i < 4; i++)
        ck_assert(tt_rng_next(&a) == seed42[i]);
    tt_rng_seed(&a, 0);
    for (int i = 0; i < 4; i++)
        ck_assert(tt_rng_next(&a) == seed0[i]);
    tt_rng_seed(&a, 7);
    tt_rng_seed(&b, 7);
    for (int i = 0; i < 1000; i++)
        CHECK(tt_rng_next(&a) == tt_rng_next(&b), "draw %d differs", i);
    tt_rng_seed(&b, 8);
    int same = 0;
    for (int i = 0; i < 1000; i++)
        same += tt_rng_next(&a) == tt_rng_next(&b);
    ck_assert_int_eq(same, 0);
}
END_TEST

START_TEST(rng_below_and_uniform) {
    tt_rng r;
    tt_rng_seed(&r, 1);
    ck_assert(tt_rng_below(&r, 0) == 0);
    ck_assert(tt_rng_below(&r, 1) == 0);
    const uint64_t ns[] = {2, 3, 7, 1000, (1ull << 63) + 1, UINT64_MAX};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++)
        for (int i = 0; i < 2000; i++)
            CHECK(tt_rng_below(&r, ns[k]) < ns[k], "tt_rng_below(%llu) out of range",
                  (unsigned long long)ns[k]);
    /* n = 2^63 + 1 rejects almost half the raw draws: the values must still be
     * uniform, about half of them in the upper half [2^62, n) (sd 22 of 2000) */
    int upper = 0;
    for (int i = 0; i < 2000; i++)
        upper += tt_rng_below(&r, (1ull << 63) + 1) >= (1ull << 62);
    ck_assert_msg(upper > 850 && upper < 1150, "%d of 2000 in the upper half", upper);
    /* uniform over 6 buckets: 60000 draws, each count within 5 sigma of 10000 */
    int count[6] = {0};
    for (int i = 0; i < 60000; i++)
        count[tt_rng_below(&r, 6)]++;
    for (int k = 0; k < 6; k++)
        ck_assert_msg(abs(count[k] - 10000) < 5 * 92, "bucket %d has %d", k, count[k]);
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = tt_rng_uniform(&r);
        CHECK(u >= 0 && u < 1, "uniform draw %g", u);
        sum += u;
    }
    ck_assert(fabs(sum / 100000 - 0.5) < 5 * 0.2887 / sqrt(100000));
}
END_TEST

START_TEST(normalize_rows) {
    float x[4 * 3] = {3, 4, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0};
    ck_assert_int_eq(tt_normalize_rows(x, 4, 3), 1);
    ck_assert(fabsf(x[0] - 0.6f) < 1e-7f && fabsf(x[1] - 0.8f) < 1e-7f && x[2] == 0);
    ck_assert(x[3] == 0 && x[4] == 0 && x[5] == 0); /* the zero row stays zero */
    for (int j = 6; j < 9; j++)
        ck_assert(fabsf(x[j] - 1 / sqrtf(3)) < 1e-7f);
    ck_assert(x[9] == 0 && x[10] == 0 && x[11] == 0);
    float y[2 * 5];
    for (int i = 0; i < 10; i++)
        y[i] = (float)(i + 1) * (i % 2 ? -1.0f : 1.0f);
    ck_assert_int_eq(tt_normalize_rows(y, 2, 5), -1);
    for (int r = 0; r < 2; r++) {
        double s = 0;
        for (int j = 0; j < 5; j++)
            s += (double)y[r * 5 + j] * y[r * 5 + j];
        ck_assert(fabs(s - 1) < 1e-6);
    }
    ck_assert_int_eq(tt_normalize_rows(y, 0, 5), -1);
}
END_TEST

START_TEST(find_nonfinite) {
    float x[4 * 3] = {1, 2, 3, FLT_MAX, -FLT_MAX, 0, 1, 1, 1, 0, 0, 0};
    ck_assert_int_eq(tt_find_nonfinite(x, 4, 3), -1);
    x[8] = NAN;
    ck_assert_int_eq(tt_find_nonfinite(x, 4, 3), 2);
    x[4] = INFINITY;
    ck_assert_int_eq(tt_find_nonfinite(x, 4, 3), 1);
    x[4] = 0;
    x[8] = 1;
    x[11] = -INFINITY;
    ck_assert_int_eq(tt_find_nonfinite(x, 4, 3), 3);
    ck_assert_int_eq(tt_find_nonfinite(x, 3, 3), -1);
    /* every position of rows longer than the four-way loop, and its tail */
    float y[2 * 11];
    for (uint32_t p = 0; p < 11; p++)
        for (int kind = 0; kind < 3; kind++) {
            for (uint32_t j = 0; j < 22; j++)
                y[j] = j % 3 ? FLT_MAX : j % 2 ? -FLT_MIN / 4 : -0.0f; /* largest, subnormal */
            ck_assert_int_eq(tt_find_nonfinite(y, 2, 11), -1);
            y[11 + p] = kind == 0 ? NAN : kind == 1 ? INFINITY : -INFINITY;
            ck_assert_int_eq(tt_find_nonfinite(y, 2, 11), 1);
            ck_assert_int_eq(tt_find_nonfinite(y, 1, 11), -1);
        }
}
END_TEST

typedef struct par_state {
    int calls[64];
    int seen_n[64];
    pthread_t self[64];
} par_state;

static void par_fn(void *arg, int t, int n) {
    par_state *s = arg;
    s->calls[t]++; /* each t owns its own slot */
    s->seen_n[t] = n;
    s->self[t] = pthread_self();
}

START_TEST(parallel_runs_each_t_once) {
    const int ns[] = {1, 2, 3, 8, 33};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        par_state s;
        memset(&s, 0, sizeof s);
        ck_assert_int_eq(tt_parallel(ns[k], par_fn, &s), TT_OK);
        for (int t = 0; t < 64; t++) {
            ck_assert_int_eq(s.calls[t], t < ns[k] ? 1 : 0);
            if (t < ns[k])
                ck_assert_int_eq(s.seen_n[t], ns[k]);
        }
        ck_assert(pthread_equal(s.self[0], pthread_self())); /* thread 0 is the caller */
    }
    par_state s;
    memset(&s, 0, sizeof s);
    ck_assert_int_eq(tt_parallel(0, par_fn, &s), TT_OK); /* <= 1: run once inline */
    ck_assert_int_eq(s.calls[0], 1);
    ck_assert_int_eq(s.seen_n[0], 1);
}
END_TEST

static void err_in_thread(void *arg, int t, int n) {
    char *seen = arg;
    if (t == 1)
        tt_err(TT_EIO, "thread one failed");
    else
        snprintf(seen, 64, "%s", tt_last_error());
    (void)n;
}

START_TEST(error_messages) {
    tt_err_clear();
    ck_assert_str_eq(tt_last_error(), "");
    ck_assert_int_eq(tt_err(TT_ECORRUPT, "%s: bad %d", "file.bin", 7), TT_ECORRUPT);
    ck_assert_str_eq(tt_last_error(), "file.bin: bad 7");

    ck_assert_int_eq(tt_err_errno(TT_EIO, ENOENT, "%s: cannot open", "x.npy"), TT_ENOTFOUND);
    char want[256];
    snprintf(want, sizeof want, "x.npy: cannot open: %s", strerror(ENOENT));
    ck_assert_str_eq(tt_last_error(), want);
    ck_assert_int_eq(tt_err_errno(TT_EIO, ENOSPC, "w"), TT_ENOSPC);
    ck_assert_int_eq(tt_err_errno(TT_EIO, EFBIG, "w"), TT_ENOSPC);
    ck_assert_int_eq(tt_err_errno(TT_EIO, ENOMEM, "w"), TT_ENOMEM);
    ck_assert_int_eq(tt_err_errno(TT_EIO, EACCES, "w"), TT_EIO);
    ck_assert_int_eq(tt_err_errno(TT_EFORMAT, ENOENT, "w"), TT_EFORMAT); /* only EIO maps */

    tt_err(TT_EDIM, "inner problem");
    ck_assert_int_eq(tt_err_prefix(TT_EDIM, "outer %d", 2), TT_EDIM);
    ck_assert_str_eq(tt_last_error(), "outer 2: inner problem");
    tt_err_clear();
    tt_err_prefix(TT_EVALUE, "ctx");
    ck_assert_str_eq(tt_last_error(), "ctx: invalid values");

    /* overlong messages are truncated, never overflow */
    char big[3000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    tt_err(TT_EIO, "%s", big);
    ck_assert_uint_lt(strlen(tt_last_error()), 1024);
    ck_assert_uint_gt(strlen(tt_last_error()), 1000);
    tt_err_prefix(TT_EIO, "%s", big);
    ck_assert_uint_lt(strlen(tt_last_error()), 1024);

    /* the message is per thread */
    char seen[64] = "";
    tt_err(TT_EINVAL, "main thread");
    tt_parallel(2, err_in_thread, seen);
    ck_assert_str_eq(seen, "main thread");
    ck_assert_str_eq(tt_last_error(), "main thread");
}
END_TEST

START_TEST(strerror_every_status) {
    const char *msg[32];
    for (int s = 0; s >= TT_ECANCELED; s--) {
        msg[-s] = tt_strerror(s);
        ck_assert_ptr_nonnull(msg[-s]);
        ck_assert_uint_gt(strlen(msg[-s]), 3);
        ck_assert_msg(strcmp(msg[-s], tt_strerror(-999)) != 0, "status %d has no text", s);
        for (int o = 0; o < -s; o++)
            ck_assert_msg(strcmp(msg[o], msg[-s]) != 0, "statuses %d and %d share a text", -o, s);
    }
    ck_assert_ptr_nonnull(tt_strerror(1));
    ck_assert_ptr_nonnull(tt_strerror(TT_ECANCELED - 1));
    ck_assert_str_eq(tt_strerror(TT_ECANCELED - 1), tt_strerror(12345));
    ck_assert_uint_eq(tt_version_number(), TT_VERSION_NUMBER);
    ck_assert_str_eq(tt_version_string(), TT_VERSION_STRING);
}
END_TEST

START_TEST(misc_helpers) {
    ck_assert_int_ge(tt_default_threads(), 1);
    double t0 = tt_now();
    usleep(2000);
    double t1 = tt_now();
    ck_assert(t1 - t0 >= 0.0015 && t1 - t0 < 5);
    ck_assert(tt_host_is_le() == (tt_rd16(&(uint16_t){1}) == 1));
    ck_assert(bits_f32(f32_bits(3.25f)) == 3.25f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("util");
    TCase *half = tcase_create("half"), *rng = tcase_create("rng"), *rows = tcase_create("rows"),
          *par = tcase_create("parallel"), *err = tcase_create("errors");
    tcase_add_test(half, f16_exhaustive_round_trip);
    tcase_add_test(half, f16_rounding_ties_to_even);
    tcase_add_test(half, bf16_values);
    tcase_add_test(half, little_endian_helpers);
    tcase_add_test(rng, rng_determinism);
    tcase_add_test(rng, rng_below_and_uniform);
    tcase_add_test(rows, alloc_checks);
    tcase_add_test(rows, normalize_rows);
    tcase_add_test(rows, find_nonfinite);
    tcase_add_test(par, parallel_runs_each_t_once);
    tcase_add_test(err, error_messages);
    tcase_add_test(err, strerror_every_status);
    tcase_add_test(err, misc_helpers);
    TCase *all[] = {half, rng, rows, par, err};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        tcase_set_timeout(all[i], 60);
        suite_add_tcase(s, all[i]);
    }
    return tu_run(s);
}

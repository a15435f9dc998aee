/* Tests of the residual codec: exact quantiles by selection, the ColBERTv2 tables,
 * bucket convention, MSB-first packing, decode, and the per-query lookup tables. */
#include "testutil.h"

#include "quant/codec.h"

/* ------------------------------------------------------------ helpers */

/* Assertion for inner loops: each passing ck_assert records a mark point through
 * Check's pipe, which dominates the run time when called millions of times. */
#define CHECK(cond) \
    do { \
        if (!(cond)) \
            ck_abort_msg("assertion failed: %s", #cond); \
    } while (0)

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* numpy 'linear' quantile of an already sorted array: the reference. */
static float ref_quantile_sorted(const float *s, uint64_t n, double q) {
    double pos = q * (double)(n - 1);
    double f = floor(pos);
    uint64_t lo = (uint64_t)f, hi = lo + 1 < n ? lo + 1 : lo;
    double a = s[lo], b = s[hi];
    return (float)(a + (pos - f) * (b - a));
}

static double gauss(tt_rng *r) {
    double u1 = tt_rng_uniform(r) + 1e-300, u2 = tt_rng_uniform(r);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

/* Bucket by definition: number of cutoffs strictly below x. */
static uint32_t ref_bucket(const tt_codec *c, uint32_t d, float x) {
    uint32_t nc = c->nbuckets - 1, k = 0;
    const float *t = c->cutoffs + (c->ntables == 1 ? 0 : (size_t)d * nc);
    for (uint32_t i = 0; i < nc; i++)
        k += x > t[i];
    return k;
}

/* numpy.packbits of the bits of each code written MSB first (np.unpackbits of the
 * uint8 codes, last nbits columns, flattened): an independent bit-by-bit packer. */
static void ref_pack(const uint32_t *codes, uint32_t dim, uint32_t nbits, uint8_t *out) {
    uint32_t nbytes = (dim * nbits + 7) / 8;
    memset(out, 0, nbytes);
    uint32_t bit = 0;
    for (uint32_t d = 0; d < dim; d++)
        for (int k = (int)nbits - 1; k >= 0; k--, bit++)
            if ((codes[d] >> k) & 1)
                out[bit / 8] |= (uint8_t)(0x80 >> (bit % 8));
}

/* A shared codec whose cutoffs are k+0.5 (k = 0..nb-2), so value v encodes to code v,
 * and whose weights are 10*k. */
static void identity_codec(tt_codec *c, uint32_t dim, uint32_t nbits) {
    uint32_t nb = 1u << nbits;
    float cut[15], w[16];
    for (uint32_t k = 0; k < nb; k++) {
        w[k] = 10.0f * (float)k;
        if (k + 1 < nb)
            cut[k] = (float)k + 0.5f;
    }
    ck_assert_int_eq(tt_codec_init(c, dim, nbits, 1, cut, w), TT_OK);
}

/* --------------------------------------------------------- quantiles */

static void fill_pattern(float *x, uint64_t n, int pattern, tt_rng *r) {
    for (uint64_t i = 0; i < n; i++) {
        switch (pattern) {
        case 0: x[i] = (float)gauss(r); break;                        /* random */
        case 1: x[i] = (float)tt_rng_below(r, 5); break;              /* many duplicates */
        case 2: x[i] = (float)i; break;                               /* ascending */
        case 3: x[i] = (float)(n - i); break;                         /* descending */
        case 4: x[i] = 3.0f; break;                                   /* all equal */
        case 5: x[i] = (float)(i < n / 2 ? i : n - i); break;         /* organ pipe */
        case 6: x[i] = (float)(i % 7) - (float)(i % 3) * 0.25f; break; /* sawtooth */
        default: x[i] = (float)(i & 1 ? -1.0 : 1.0) * (float)i; break; /* alternating */
        }
    }
}

START_TEST(quantile_matches_sorting) {
    static const uint64_t sizes[] = {1, 2, 3, 4, 5, 15, 16, 17, 31, 100, 1000, 1023, 1024, 4097,
                                     30011};
    static const double qs[] = {0.0, 1e-9, 0.0625, 0.1, 0.25, 1.0 / 3, 0.5, 0.6875, 0.75,
                                0.90625, 0.999, 1.0};
    tt_rng r;
    tt_rng_seed(&r, 7);
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint64_t n = sizes[si];
        float *x = malloc(n * sizeof *x), *s = malloc(n * sizeof *s), *w = malloc(n * sizeof *w);
        for (int pat = 0; pat < 8; pat++) {
            fill_pattern(x, n, pat, &r);
            memcpy(s, x, n * sizeof *s);
            qsort(s, n, sizeof *s, cmp_float);
            for (size_t qi = 0; qi < sizeof qs / sizeof qs[0]; qi++) {
                memcpy(w, x, n * sizeof *w);
                float got = tt_quantile(w, n, qs[qi]);
                float want = ref_quantile_sorted(s, n, qs[qi]);
                if (got != want)
                    ck_abort_msg("n=%llu pattern=%d q=%g: %.9g != %.9g", (unsigned long long)n,
                                 pat, qs[qi], got, want);
                if (qi == 6) { /* selection only reorders */
                    qsort(w, n, sizeof *w, cmp_float);
                    CHECK(memcmp(w, s, n * sizeof *w) == 0);
                }
            }
        }
        free(x);
        free(s);
        free(w);
    }
}
END_TEST

START_TEST(quantile_small_and_clamped) {
    float one[1] = {4.5f};
    ck_assert(tt_quantile(one, 1, 0.0) == 4.5f);
    ck_assert(tt_quantile(one, 1, 0.5) == 4.5f);
    ck_assert(tt_quantile(one, 1, 1.0) == 4.5f);
    float two[2] = {3.0f, 1.0f};
    ck_assert(tt_quantile(two, 2, 0.0) == 1.0f);
    two[0] = 3.0f, two[1] = 1.0f;
    ck_assert(tt_quantile(two, 2, 1.0) == 3.0f);
    two[0] = 3.0f, two[1] = 1.0f;
    ck_assert(tt_quantile(two, 2, 0.25) == 1.5f); /* 1 + 0.25*(3-1) */
    float five[5] = {5, 1, 4, 2, 3};
    ck_assert(tt_quantile(five, 5, -1.0) == 1.0f); /* clamped */
    ck_assert(tt_quantile(five, 5, 2.0) == 5.0f);
    ck_assert(isnan(tt_quantile(five, 0, 0.5)));
}
END_TEST

/* Beyond torch.quantile's 2^24-element limit: a shuffled array with known order
 * statistics (value floor(k/2) at sorted position k; all exactly representable). */
START_TEST(quantile_no_size_ceiling) {
    uint64_t n = (1ull << 24) + (1ull << 20);
    float *x = malloc(n * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)(i / 2);
    tt_rng r;
    tt_rng_seed(&r, 11);
    for (uint64_t i = n - 1; i > 0; i--) {
        uint64_t j = tt_rng_below(&r, i + 1);
        float t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
    static const double qs[] = {0.0, 0.0625, 0.5, 0.90625, 1.0};
    for (size_t qi = 0; qi < 5; qi++) {
        double pos = qs[qi] * (double)(n - 1), f = floor(pos);
        uint64_t lo = (uint64_t)f, hi = lo + 1 < n ? lo + 1 : lo;
        double a = (double)(lo / 2), b = (double)(hi / 2);
        float want = (float)(a + (pos - f) * (b - a));
        float got = tt_quantile(x, n, qs[qi]);
        ck_assert_msg(got == want, "q=%g: %.9g != %.9g", qs[qi], got, want);
    }
    free(x);
}
END_TEST

/* ----------------------------------------------------------- training */

START_TEST(train_tables_are_exact_quantiles) {
    const uint64_t n = 3001;
    const uint32_t dim = 70; /* more than one 64-column training block */
    tt_rng r;
    tt_rng_seed(&r, 3);
    float *x = malloc(n * dim * sizeof *x);
    float *all = malloc(n * dim * sizeof *all), *cols = malloc(n * dim * sizeof *cols);
    for (uint64_t i = 0; i < n * dim; i++)
        x[i] = (float)(gauss(&r) * (1 + (i % dim) * 0.1)) + (i % 97 == 0 ? 3.0f : 0.0f);
    /* references: every value sorted, and each dimension's values sorted */
    memcpy(all, x, n * dim * sizeof *all);
    qsort(all, n * dim, sizeof *all, cmp_float);
    for (uint32_t t = 0; t < dim; t++) {
        for (uint64_t i = 0; i < n; i++)
            cols[t * n + i] = x[i * dim + t];
        qsort(cols + t * n, n, sizeof *cols, cmp_float);
    }
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        uint32_t nb = 1u << nbits;
        for (int per_dim = 0; per_dim <= 1; per_dim++) {
            tt_codec c;
            ck_assert_int_eq(tt_codec_train(&c, x, n, dim, nbits, per_dim), TT_OK);
            ck_assert_uint_eq(c.nbuckets, nb);
            ck_assert_uint_eq(c.ntables, per_dim ? dim : 1);
            ck_assert_uint_eq(c.bytes_per_vec, (dim * (uint32_t)nbits + 7) / 8);
            for (uint32_t t = 0; t < c.ntables; t++) {
                uint64_t m = per_dim ? n : n * dim;
                const float *col = per_dim ? cols + t * n : all;
                for (uint32_t i = 1; i < nb; i++)
                    CHECK(c.cutoffs[t * (nb - 1) + i - 1] ==
                              ref_quantile_sorted(col, m, (double)i / nb));
                for (uint32_t i = 0; i < nb; i++)
                    CHECK(c.weights[t * nb + i] ==
                              ref_quantile_sorted(col, m, (i + 0.5) / nb));
            }
            tt_codec_free(&c);
        }
    }
    free(x);
    free(all);
    free(cols);
}
END_TEST

START_TEST(train_and_init_errors) {
    tt_codec c;
    float x[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    ck_assert_int_eq(tt_codec_train(&c, x, 2, 4, 3, 0), TT_EINVAL);
    ck_assert_ptr_null(c.cutoffs);
    ck_assert_int_eq(tt_codec_train(&c, x, 0, 4, 2, 0), TT_EINVAL);
    ck_assert_int_eq(tt_codec_train(&c, x, 2, 0, 2, 0), TT_EINVAL);
    ck_assert_int_eq(tt_codec_train(&c, x, UINT64_MAX / 2, 4, 2, 0), TT_ENOMEM);
    x[5] = NAN;
    ck_assert_int_eq(tt_codec_train(&c, x, 2, 4, 2, 1), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "residual 1"));

    float cut[3] = {-1, 0, 1}, w[4] = {-2, -0.5f, 0.5f, 2};
    ck_assert_int_eq(tt_codec_init(&c, 4, 2, 2, cut, w), TT_EINVAL); /* ntables not 1/dim */
    ck_assert_int_eq(tt_codec_init(&c, 4, 8, 1, cut, w), TT_EINVAL);
    float desc[3] = {0, -1, 1};
    ck_assert_int_eq(tt_codec_init(&c, 4, 2, 1, desc, w), TT_ECORRUPT);
    float nanw[4] = {-2, NAN, 0.5f, 2};
    ck_assert_int_eq(tt_codec_init(&c, 4, 2, 1, cut, nanw), TT_ECORRUPT);
    ck_assert_int_eq(tt_codec_init(&c, 4, 2, 1, cut, w), TT_OK);
    tt_codec_free(&c);
    tt_codec_free(&c); /* idempotent */
    tt_codec_free(NULL);
}
END_TEST

/* ------------------------------------------------ bucket rule and layout */

/* cutoffs {-1, 0, 1}: a value equal to a cutoff goes to the lower bucket
 * (torch.bucketize, right=False); NaN to bucket 0. Codes 0,0,1,1 | 2,2,3,0. */
START_TEST(bucket_convention) {
    tt_codec c;
    float cut[3] = {-1, 0, 1}, w[4] = {-2, -0.5f, 0.5f, 2};
    ck_assert_int_eq(tt_codec_init(&c, 8, 2, 1, cut, w), TT_OK);
    float r[8] = {-2, -1, -0.5f, 0, 0.5f, 1, 2, NAN};
    uint8_t p[2];
    tt_codec_encode(&c, r, p);
    ck_assert_uint_eq(p[0], 0x05); /* 00 00 01 01 */
    ck_assert_uint_eq(p[1], 0xAC); /* 10 10 11 00 */
    float out[8];
    tt_codec_decode(&c, p, out);
    static const float want[8] = {-2, -2, -0.5f, -0.5f, 0.5f, 0.5f, 2, -2};
    for (int i = 0; i < 8; i++)
        ck_assert(out[i] == want[i]);
    tt_codec_free(&c);
}
END_TEST

/* Hand-made examples of the MSB-first layout, byte values worked out by hand from
 * the numpy.packbits rule (first bit -> most significant bit of byte 0). */
START_TEST(packing_layout_by_hand) {
    struct { uint32_t nbits, dim; float codes[12]; uint8_t bytes[4]; } ex[] = {
        /* 1 bit: 1011 0010 | 11 + six zero bits */
        {1, 10, {1, 0, 1, 1, 0, 0, 1, 0, 1, 1}, {0xB2, 0xC0}},
        /* 2 bits: 00 01 10 11 | 11 10 01 00 */
        {2, 8, {0, 1, 2, 3, 3, 2, 1, 0}, {0x1B, 0xE4}},
        /* 2 bits, dim 5: 01 11 00 10 | 11 + six zero bits */
        {2, 5, {1, 3, 0, 2, 3}, {0x72, 0xC0}},
        /* 4 bits: 0001 1111 | 0111 + four zero bits */
        {4, 3, {1, 15, 7}, {0x1F, 0x70}},
        /* 4 bits: 1010 0101 | 0000 1100 */
        {4, 4, {10, 5, 0, 12}, {0xA5, 0x0C}},
    };
    for (size_t e = 0; e < sizeof ex / sizeof ex[0]; e++) {
        tt_codec c;
        identity_codec(&c, ex[e].dim, ex[e].nbits);
        ck_assert_uint_eq(c.bytes_per_vec, 2);
        uint8_t p[2] = {0x55, 0x55};
        tt_codec_encode(&c, ex[e].codes, p);
        ck_assert_msg(p[0] == ex[e].bytes[0] && p[1] == ex[e].bytes[1],
                      "example %zu: got %02x %02x", e, p[0], p[1]);
        float out[12];
        tt_codec_decode(&c, p, out);
        for (uint32_t d = 0; d < ex[e].dim; d++)
            ck_assert(out[d] == 10.0f * ex[e].codes[d]);
        tt_codec_free(&c);
    }
}
END_TEST

/* Random codes for many dims: encode equals the bit-by-bit numpy.packbits packer. */
START_TEST(packing_matches_bitwise_packer) {
    static const uint32_t dims[] = {1, 2, 3, 7, 8, 9, 63, 64, 65, 127, 128, 129, 300};
    tt_rng r;
    tt_rng_seed(&r, 5);
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
            uint32_t dim = dims[di];
            tt_codec c;
            identity_codec(&c, dim, (uint32_t)nbits);
            float v[300];
            uint32_t codes[300];
            uint8_t got[160], want[160];
            for (int rep = 0; rep < 20; rep++) {
                for (uint32_t d = 0; d < dim; d++) {
                    codes[d] = (uint32_t)tt_rng_below(&r, c.nbuckets);
                    v[d] = (float)codes[d];
                }
                tt_codec_encode(&c, v, got);
                ref_pack(codes, dim, (uint32_t)nbits, want);
                CHECK(memcmp(got, want, c.bytes_per_vec) == 0);
            }
            tt_codec_free(&c);
        }
    }
}
END_TEST

/* decode(encode(x)) = weight of x's bucket under the reference bucket rule. */
START_TEST(decode_is_bucket_weight) {
    const uint64_t n = 2000;
    const uint32_t dim = 131;
    tt_rng r;
    tt_rng_seed(&r, 9);
    float *x = malloc(n * dim * sizeof *x);
    for (uint64_t i = 0; i < n * dim; i++)
        x[i] = (float)gauss(&r) * (i % dim == 5 ? 20.0f : 1.0f);
    /* include values equal to cutoffs: rounded data has many exact ties */
    for (uint64_t i = 0; i < n * dim; i += 3)
        x[i] = roundf(x[i] * 4) / 4;
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        for (int per_dim = 0; per_dim <= 1; per_dim++) {
            tt_codec c;
            ck_assert_int_eq(tt_codec_train(&c, x, n, dim, nbits, per_dim), TT_OK);
            uint8_t p[131];
            float out[131];
            for (uint64_t i = 0; i < n; i++) {
                tt_codec_encode(&c, x + i * dim, p);
                tt_codec_decode(&c, p, out);
                for (uint32_t d = 0; d < dim; d++) {
                    uint32_t k = ref_bucket(&c, d, x[i * dim + d]);
                    float w = c.weights[(c.ntables == 1 ? 0 : d * c.nbuckets) + k];
                    CHECK(out[d] == w);
                }
            }
            tt_codec_free(&c);
        }
    }
    free(x);
}
END_TEST

/* A per-dim codec whose struct was filled by hand (no transposed cutoff copy) encodes
 * exactly like one from tt_codec_init. */
START_TEST(hand_filled_codec_encodes_the_same) {
    const uint32_t dim = 77;
    const uint64_t n = 300;
    tt_rng r;
    tt_rng_seed(&r, 13);
    float *x = malloc(n * dim * sizeof *x);
    for (uint64_t i = 0; i < n * dim; i++)
        x[i] = (float)gauss(&r);
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        tt_codec c;
        ck_assert_int_eq(tt_codec_train(&c, x, n, dim, nbits, 1), TT_OK);
        ck_assert_ptr_nonnull(c.cutoffs_t);
        tt_codec h = c;
        h.cutoffs_t = NULL;
        uint8_t a[40], b[40];
        for (uint64_t i = 0; i < n; i++) {
            tt_codec_encode(&c, x + i * dim, a);
            tt_codec_encode(&h, x + i * dim, b);
            CHECK(memcmp(a, b, c.bytes_per_vec) == 0);
        }
        tt_codec_free(&c);
    }
    free(x);
}
END_TEST

/* ------------------------------------------------------ quantization error */

static double phi(double x) { return exp(-0.5 * x * x) / sqrt(2 * M_PI); }
static double Phi(double x) { return 0.5 * erfc(-x / sqrt(2)); }
static double Phi_inv(double p) {
    double lo = -40, hi = 40;
    for (int i = 0; i < 200; i++) {
        double mid = 0.5 * (lo + hi);
        if (Phi(mid) < p)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

/* MSE of the ColBERTv2 quantile quantizer on N(0,1): buckets [c_i, c_{i+1}) with
 * c_i = Phi^-1(i/nb), reconstruction w_i = Phi^-1((i+0.5)/nb); per bucket
 * E[(x-w)^2] = M2 - 2 w M1 + w^2 M0 with M0 = Phi(b)-Phi(a), M1 = phi(a)-phi(b),
 * M2 = M0 + a phi(a) - b phi(b). */
static double gaussian_quantile_mse(uint32_t nb) {
    double mse = 0;
    for (uint32_t i = 0; i < nb; i++) {
        double a = i == 0 ? -40 : Phi_inv((double)i / nb);
        double b = i + 1 == nb ? 40 : Phi_inv((double)(i + 1) / nb);
        double w = Phi_inv((i + 0.5) / nb);
        double m0 = Phi(b) - Phi(a), m1 = phi(a) - phi(b), m2 = m0 + a * phi(a) - b * phi(b);
        mse += m2 - 2 * w * m1 + w * w * m0;
    }
    return mse;
}

static double codec_mse(const tt_codec *c, const float *x, uint64_t n) {
    float *out = malloc(c->dim * sizeof *out);
    uint8_t *p = malloc(c->bytes_per_vec);
    double s = 0;
    for (uint64_t i = 0; i < n; i++) {
        tt_codec_encode(c, x + i * c->dim, p);
        tt_codec_decode(c, p, out);
        for (uint32_t d = 0; d < c->dim; d++) {
            double e = (double)out[d] - x[i * c->dim + d];
            s += e * e;
        }
    }
    free(out);
    free(p);
    return s / ((double)n * c->dim);
}

START_TEST(gaussian_mse_matches_theory) {
    const uint64_t n = 4000, ntest = 2000;
    const uint32_t dim = 64;
    const double sigma = 0.05; /* residual scale of normalised ColBERT vectors */
    tt_rng r;
    tt_rng_seed(&r, 21);
    float *x = malloc((n + ntest) * dim * sizeof *x);
    for (uint64_t i = 0; i < (n + ntest) * dim; i++)
        x[i] = (float)(sigma * gauss(&r));
    double prev = INFINITY;
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        double theory = gaussian_quantile_mse(1u << nbits) * sigma * sigma;
        tt_codec c;
        ck_assert_int_eq(tt_codec_train(&c, x, n, dim, nbits, 0), TT_OK);
        double mse = codec_mse(&c, x + n * dim, ntest);
        /* 128k test values: the empirical MSE is within a few percent of theory */
        ck_assert_msg(fabs(mse - theory) < 0.05 * theory, "nbits=%d: mse %g, theory %g", nbits,
                      mse, theory);
        ck_assert(mse < prev);
        prev = mse;
        tt_codec_free(&c);
    }
    /* the theory itself: 0.3786, 0.1468, 0.0236 sigma^2 for 1, 2, 4 bits; above the
     * Lloyd-Max optima 0.3634, 0.1175, 0.0095 (the open-ended outer buckets of a
     * quantile quantizer cost most at 4 bits) */
    ck_assert(gaussian_quantile_mse(2) > 0.3634 && gaussian_quantile_mse(2) < 0.40);
    ck_assert(gaussian_quantile_mse(4) > 0.1175 && gaussian_quantile_mse(4) < 0.16);
    ck_assert(gaussian_quantile_mse(16) > 0.0095 && gaussian_quantile_mse(16) < 0.03);
    free(x);
}
END_TEST

/* Residuals with a few high-variance dimensions (LLM hidden states): one shared table
 * spends its outer buckets on the outliers and leaves them badly quantized, while
 * per-dimension tables scale to each. Without outliers both are equally good. */
START_TEST(per_dim_beats_shared_on_outliers) {
    const uint64_t n = 6000, ntest = 1000;
    const uint32_t dim = 64;
    tt_rng r;
    tt_rng_seed(&r, 33);
    float *x = malloc((n + ntest) * dim * sizeof *x);
    for (int outliers = 0; outliers <= 1; outliers++) {
        for (uint64_t i = 0; i < (n + ntest) * dim; i++) {
            uint32_t d = (uint32_t)(i % dim);
            double scale = outliers && d % 16 == 3 ? 30.0 : 1.0;
            x[i] = (float)(scale * gauss(&r));
        }
        tt_codec sh, pd;
        ck_assert_int_eq(tt_codec_train(&sh, x, n, dim, 2, 0), TT_OK);
        ck_assert_int_eq(tt_codec_train(&pd, x, n, dim, 2, 1), TT_OK);
        double mse_sh = codec_mse(&sh, x + n * dim, ntest);
        double mse_pd = codec_mse(&pd, x + n * dim, ntest);
        if (outliers) {
            /* per-dim: every dimension gets the Gaussian 2-bit error 0.1468 sigma_d^2,
             * i.e. 0.1468*(60 + 4*900)/64 = 8.39 on average; shared: the outlier dims
             * land in the outer buckets (reconstructed near +-1.2) with error ~ their
             * variance, about 4*900/64 = 56 */
            double theory = gaussian_quantile_mse(4) * (60 + 4 * 900.0) / 64;
            ck_assert_msg(fabs(mse_pd - theory) < 0.1 * theory, "per-dim %g theory %g", mse_pd,
                          theory);
            ck_assert_msg(mse_pd < 0.25 * mse_sh, "per-dim %g shared %g", mse_pd, mse_sh);
        } else {
            ck_assert_msg(fabs(mse_pd - mse_sh) < 0.05 * mse_sh, "per-dim %g shared %g", mse_pd,
                          mse_sh);
        }
        tt_codec_free(&sh);
        tt_codec_free(&pd);
    }
    free(x);
}
END_TEST

/* ---------------------------------------------------------------- LUT */

START_TEST(lut_dot_equals_decoded_dot) {
    static const uint32_t dims[] = {8, 13, 128, 200, 3584};
    tt_rng r;
    tt_rng_seed(&r, 77);
    const uint64_t n = 200;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        uint32_t dim = dims[di];
        float *x = malloc(n * dim * sizeof *x), *q = malloc(dim * sizeof *q);
        float *out = malloc(dim * sizeof *out);
        for (uint64_t i = 0; i < n * dim; i++)
            x[i] = (float)gauss(&r) * (i % dim == 1 ? 10.0f : 1.0f);
        for (int nbits = 1; nbits <= 4; nbits *= 2) {
            for (int per_dim = 0; per_dim <= 1; per_dim++) {
                tt_codec c;
                ck_assert_int_eq(tt_codec_train(&c, x, n, dim, nbits, per_dim), TT_OK);
                float *lut = malloc((size_t)c.bytes_per_vec * 256 * sizeof *lut);
                uint8_t *p = malloc(c.bytes_per_vec);
                for (int rep = 0; rep < 8; rep++) {
                    for (uint32_t d = 0; d < dim; d++)
                        q[d] = (float)gauss(&r);
                    tt_codec_build_lut(&c, q, lut);
                    /* random bytes too: trailing bits beyond dim must be ignored */
                    for (int k = 0; k < 2; k++) {
                        if (k == 0) {
                            tt_codec_encode(&c, x + (uint64_t)rep * dim, p);
                        } else {
                            for (uint32_t b = 0; b < c.bytes_per_vec; b++)
                                p[b] = (uint8_t)tt_rng_below(&r, 256);
                        }
                        tt_codec_decode(&c, p, out);
                        double ref = 0, mag = 0;
                        for (uint32_t d = 0; d < dim; d++) {
                            ref += (double)q[d] * out[d];
                            mag += fabs((double)q[d] * out[d]);
                        }
                        float s = tt_codec_dot_lut(lut, p, c.bytes_per_vec);
                        float ss = tt_codec_dot_lut_scalar(lut, p, c.bytes_per_vec);
                        float sa = tt_codec_dot_lut_avx2(lut, p, c.bytes_per_vec);
                        /* float sums of <= 3584 terms: relative to the sum of |terms| */
                        double tol = 1e-4 * mag + 1e-30;
                        if (!(fabs(s - ref) <= tol))
                            ck_abort_msg("dim %u nbits %d: %g vs %g", dim, nbits, s, ref);
                        CHECK(fabs(ss - ref) <= tol);
                        CHECK(fabs(sa - ref) <= tol);
                        if (!tt_codec_have_avx2()) /* then it is the scalar code */
                            CHECK(sa == ss);
                    }
                }
                free(lut);
                free(p);
                tt_codec_free(&c);
            }
        }
        free(x);
        free(q);
        free(out);
    }
}
END_TEST

/* The LUT entry of a byte is the sum over the dims it holds, term by term. */
START_TEST(lut_entries_by_definition) {
    tt_codec c;
    float cut[3] = {-1, 0, 1}, w[4] = {-3, -1, 1, 3};
    ck_assert_int_eq(tt_codec_init(&c, 5, 2, 1, cut, w), TT_OK); /* 2 bytes, 3 unused dims */
    float q[5] = {1, 2, 4, 8, 16};
    float lut[512];
    tt_codec_build_lut(&c, q, lut);
    for (uint32_t v = 0; v < 256; v++) {
        float want0 = 1 * w[v >> 6] + 2 * w[(v >> 4) & 3] + 4 * w[(v >> 2) & 3] + 8 * w[v & 3];
        CHECK(lut[v] == want0);
        CHECK(lut[256 + v] == 16 * w[v >> 6]);
    }
    tt_codec_free(&c);
}
END_TEST

/* ------------------------------------------------------ adaptive, Lloyd-Max */

static tt_codec train_kind(const float *x, uint64_t n, uint32_t dim, int kind, int nbits,
                           int rounds, const float *imp) {
    tt_codec c;
    tt_codec_params p = {.kind = kind, .nbits = nbits, .lloyd_rounds = rounds, .importance = imp};
    int st = tt_codec_train_ex(&c, x, n, dim, &p);
    ck_assert_msg(st == TT_OK, "%s", tt_last_error());
    return c;
}

/* Squared error over x (input order) through the codec's positions, each dimension
 * weighted by imp (NULL: 1). */
static double weighted_error(const tt_codec *c, const float *x, uint64_t n, const float *imp) {
    float *rp = malloc(2 * c->dim * sizeof *rp), *out = rp + c->dim;
    uint8_t *p = malloc(c->bytes_per_vec);
    double s = 0;
    for (uint64_t i = 0; i < n; i++) {
        tt_codec_to_positions(c, x + i * c->dim, rp);
        tt_codec_encode(c, rp, p);
        tt_codec_decode(c, p, out);
        for (uint32_t k = 0; k < c->dim; k++) {
            double e = (double)out[k] - rp[k];
            s += (imp ? imp[c->perm ? c->perm[k] : k] : 1.0) * e * e;
        }
    }
    free(rp);
    free(p);
    return s;
}

/* Debiased weights: for every codec kind and width, on the training values themselves,
 * sum_i x_ij * decode(x_i)_j equals sum_i x_ij^2 in every dimension (the scaling's
 * definition), where the plain Lloyd-Max weights fall short of it; cutoffs and codes
 * are those of the plain codec, weights are the plain ones times one factor >= 1 per
 * table, ascending still; tt_codec_debias on the plain codec gives the debiased one's
 * tables exactly (per-dim and adaptive, 0-bit and 8-bit positions included). */
START_TEST(debias_makes_self_products_unbiased) {
    const uint64_t n = 2000;
    const uint32_t dim = 16;
    tt_rng r;
    tt_rng_seed(&r, 11);
    float *x = malloc(n * dim * sizeof *x);
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++) /* a few wide dimensions for the adaptive one */
            x[i * dim + j] = (float)((j < 2 ? 1.0 : 0.05) * gauss(&r));
    float imp[16];
    for (uint32_t j = 0; j < dim; j++)
        imp[j] = j < 2 ? 50.0f : 1.0f;
    const int kinds[3] = {TT_CODEC_SHARED, TT_CODEC_PER_DIM, TT_CODEC_ADAPTIVE};
    float *rp = malloc(2 * dim * sizeof *rp), *out = rp + dim;
    uint8_t *pk = malloc(dim), *pk0 = malloc(dim);
    for (int ki = 0; ki < 3; ki++)
        for (int nbits = 1; nbits <= 4; nbits *= 2) {
            tt_codec c0, c1;
            tt_codec_params p = {.kind = kinds[ki], .nbits = nbits, .lloyd_rounds = 25,
                                 .importance = imp};
            ck_assert_int_eq(tt_codec_train_ex(&c0, x, n, dim, &p), TT_OK);
            p.debias = 1;
            ck_assert_int_eq(tt_codec_train_ex(&c1, x, n, dim, &p), TT_OK);
            ck_assert_uint_eq(c0.bytes_per_vec, c1.bytes_per_vec);
            double sxw0[16] = {0}, sxw1[16] = {0}, sxx[16] = {0};
            for (uint64_t i = 0; i < n; i++) {
                tt_codec_to_positions(&c1, x + i * dim, rp);
                tt_codec_encode(&c0, rp, pk0);
                tt_codec_encode(&c1, rp, pk);
                ck_assert_mem_eq(pk, pk0, c1.bytes_per_vec); /* same cutoffs, same codes */
                tt_codec_decode(&c1, pk, out);
                for (uint32_t k = 0; k < dim; k++) {
                    sxw1[k] += (double)rp[k] * out[k];
                    sxx[k] += (double)rp[k] * rp[k];
                }
                tt_codec_decode(&c0, pk, out);
                for (uint32_t k = 0; k < dim; k++)
                    sxw0[k] += (double)rp[k] * out[k];
            }
            double all0 = 0, all1 = 0, allx = 0;
            for (uint32_t k = 0; k < dim; k++) {
                all0 += sxw0[k], all1 += sxw1[k], allx += sxx[k];
                if (kinds[ki] == TT_CODEC_SHARED || (c1.bits && c1.bits[k] == 0))
                    continue; /* one table for all dimensions; a 0-bit constant */
                ck_assert_msg(fabs(sxw1[k] - sxx[k]) <= 1e-4 * sxx[k],
                              "kind %d nbits %d position %u: %g vs %g", kinds[ki], nbits, k,
                              sxw1[k], sxx[k]);
                ck_assert_msg(sxw0[k] < sxx[k], "plain weights do not shrink (%u)", k);
            }
            if (kinds[ki] == TT_CODEC_SHARED)
                ck_assert_msg(fabs(all1 - allx) <= 1e-4 * allx, "shared: %g vs %g", all1, allx);
            ck_assert(all0 < allx);
            /* weights: scaled by one factor >= 1 per table, still ascending */
            for (uint64_t t = 0; t < c1.nweights; t++) {
                ck_assert(isfinite(c1.weights[t]));
                if (fabs(c0.weights[t]) > 1e-6)
                    ck_assert(c1.weights[t] / c0.weights[t] >= 1.0 - 1e-6);
            }
            /* the plain codec debiased after training: the debiased one, float for float
             * (what `--debias auto` does when it finds no 8-bit position) */
            if (kinds[ki] == TT_CODEC_SHARED) {
                ck_assert_int_eq(tt_codec_debias(&c0, x, n), TT_EINVAL);
            } else {
                ck_assert_int_eq(tt_codec_debias(&c0, x, n), TT_OK);
                ck_assert_mem_eq(c0.weights, c1.weights, c1.nweights * sizeof *c1.weights);
                ck_assert_mem_eq(c0.cutoffs, c1.cutoffs, c1.ncutoffs * sizeof *c1.cutoffs);
            }
            tt_codec_free(&c0);
            tt_codec_free(&c1);
        }
    free(rp);
    free(pk);
    free(pk0);
    free(x);
}
END_TEST

/* Isotropic residuals: the allocation is uniform (today's per-dim codec, identity
 * order). Outlier dimensions (large spread, large importance): they get the 8 bits and
 * the first positions, in dimension order. Either way the widths add up to exactly
 * nbits * dim. */
/* Per-vector residual scales (debias 2): the 8-bit positions come first and are left
 * alone; over the rest the scaled decode keeps the vector's own inner product
 * (<s d_R, r_R> = |r_R|^2) unless the cap 2 |r_R| / |d_R| binds, which it does for a
 * residual far smaller than its decode (or one whose decode is far from it in angle:
 * cos(r_R, d_R) < 1/2); a residual with <r_R, d_R> <= 0 gets 0. (The scale is not the
 * one of least squared error, rd / dd: it lengthens the decode, |s d_R| = |r_R| / cos.)
 * tt_codec_scale multiplies exactly the positions after the 8-bit ones. */
START_TEST(vector_scale_by_definition) {
    const uint64_t n = 1500;
    const uint32_t dim = 48;
    tt_rng r;
    tt_rng_seed(&r, 23);
    float *x = malloc(n * dim * sizeof *x), imp[48];
    for (uint32_t j = 0; j < dim; j++)
        imp[j] = j < 3 ? 40.0f : 1.0f;
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++) /* 3 outlier dimensions: 8 bits each */
            x[i * dim + j] = (float)(gauss(&r) * (j < 3 ? 3.0 : 0.1));
    for (int nbits = 1; nbits <= 2; nbits++) {
        tt_codec c = train_kind(x, n, dim, TT_CODEC_ADAPTIVE, nbits, 25, imp);
        const uint32_t k0 = tt_codec_n8(&c);
        uint32_t n8 = 0;
        for (uint32_t k = 0; k < dim; k++)
            n8 += c.bits[k] == 8;
        ck_assert_uint_eq(k0, n8);
        ck_assert_uint_eq(k0, 3);
        float rp[48], d[48], e[48];
        uint8_t p[48];
        uint32_t capped = 0;
        for (uint64_t i = 0; i < n; i++) {
            tt_codec_to_positions(&c, x + i * dim, rp);
            tt_codec_encode(&c, rp, p);
            tt_codec_decode(&c, p, d);
            const float s = tt_codec_vector_scale(&c, rp, d);
            double rr = 0, rd = 0, dd = 0;
            for (uint32_t k = k0; k < dim; k++) {
                rr += (double)rp[k] * rp[k];
                rd += (double)rp[k] * d[k];
                dd += (double)d[k] * d[k];
            }
            ck_assert(rd > 0);
            const double cap = 2 * sqrt(rr / dd);
            ck_assert_msg(s > 0 && s <= cap * (1 + 1e-6), "vector %llu: s %g, cap %g",
                          (unsigned long long)i, (double)s, cap);
            if (s < cap * (1 - 1e-6))
                ck_assert_double_eq_tol(s * rd, rr, 1e-5 * rr);
            else
                capped++;
            /* the 8-bit positions do not enter it */
            float moved[48];
            memcpy(moved, rp, sizeof moved);
            moved[0] += 1.0f;
            ck_assert_float_eq(tt_codec_vector_scale(&c, moved, d), s);
            memcpy(e, d, sizeof e);
            tt_codec_scale(&c, s, e);
            for (uint32_t k = 0; k < dim; k++)
                ck_assert_float_eq(e[k], k < k0 ? d[k] : d[k] * s);
        }
        /* 1 bit leaves 21 of these 45 positions at 0 bits: 7% of them are capped */
        ck_assert_msg(capped < n / (nbits == 1 ? 10 : 100), "%d bits: %u capped", nbits,
                      capped);
        /* a residual far smaller than its decode: the cap binds (5 is not an 8-bit
         * position; the tiny value keeps the bucket zero has) */
        memset(rp, 0, sizeof rp);
        tt_codec_encode(&c, rp, p);
        tt_codec_decode(&c, p, d);
        ck_assert_float_ne(d[5], 0.0f);
        rp[5] = d[5] > 0 ? 1e-4f : -1e-4f;
        tt_codec_encode(&c, rp, p);
        tt_codec_decode(&c, p, d);
        double dd = 0;
        for (uint32_t k = k0; k < dim; k++)
            dd += (double)d[k] * d[k];
        const float s = tt_codec_vector_scale(&c, rp, d);
        ck_assert_double_eq_tol(s, 2 * 1e-4 / sqrt(dd), 1e-3 * s);
        ck_assert_double_lt(s, 1e-8 / (1e-4 * fabs(d[5]))); /* below rr / rd */
        /* no alignment at all: 0 */
        memset(rp, 0, sizeof rp);
        ck_assert_float_eq(tt_codec_vector_scale(&c, rp, d), 0.0f);
        for (uint32_t k = k0; k < dim; k++)
            rp[k] = -d[k];
        ck_assert_float_eq(tt_codec_vector_scale(&c, rp, d), 0.0f);
        tt_codec_free(&c);
    }
    free(x);
}
END_TEST

START_TEST(adaptive_allocation) {
    const uint64_t n = 3000;
    const uint32_t dim = 64;
    tt_rng r;
    tt_rng_seed(&r, 5);
    float *x = malloc(n * dim * sizeof *x), imp[64];
    for (uint64_t i = 0; i < n * dim; i++)
        x[i] = (float)(0.05 * gauss(&r));
    for (int nbits = 1; nbits <= 4; nbits++) {
        tt_codec c = train_kind(x, n, dim, TT_CODEC_ADAPTIVE, nbits, 25, NULL);
        ck_assert_int_eq(c.kind, TT_CODEC_ADAPTIVE);
        ck_assert_ptr_null(c.perm);
        for (uint32_t k = 0; k < dim; k++)
            ck_assert_uint_eq(c.bits[k], (unsigned)nbits);
        ck_assert_uint_eq(c.bytes_per_vec, dim * (unsigned)nbits / 8);
        tt_codec_free(&c);
    }
    const uint32_t out[4] = {3, 17, 40, 41};
    for (uint32_t j = 0; j < dim; j++)
        imp[j] = 1.0f;
    for (int k = 0; k < 4; k++) {
        imp[out[k]] = 300.0f;
        for (uint64_t i = 0; i < n; i++)
            x[i * dim + out[k]] = (float)(2.0 * gauss(&r));
    }
    for (int nbits = 1; nbits <= 4; nbits++) {
        tt_codec c = train_kind(x, n, dim, TT_CODEC_ADAPTIVE, nbits, 25, imp);
        ck_assert_ptr_nonnull(c.perm);
        uint64_t sum = 0;
        for (uint32_t k = 0; k < dim; k++) {
            sum += c.bits[k];
            if (k > 0)
                ck_assert_uint_le(c.bits[k], c.bits[k - 1]);
        }
        ck_assert_uint_eq(sum, (uint64_t)nbits * dim);
        ck_assert_uint_eq(c.bytes_per_vec, ((uint64_t)nbits * dim + 7) / 8);
        for (int k = 0; k < 4; k++) {
            ck_assert_uint_eq(c.perm[k], out[k]);
            ck_assert_uint_eq(c.bits[k], 8);
        }
        for (uint32_t k = 4; k < dim; k++)
            ck_assert_uint_lt(c.bits[k], 8);
        /* it beats the uniform per-dim codec on the weighted error it optimises (at 3
         * bits, which per-dim tables do not have: per-dim at 2, and adaptive at 2
         * errs more than at 3) */
        tt_codec u = train_kind(x, n, dim, TT_CODEC_PER_DIM, nbits == 3 ? 2 : nbits, 25, NULL);
        double ea = weighted_error(&c, x, n, imp), eu = weighted_error(&u, x, n, imp);
        ck_assert_msg(ea < 0.5 * eu, "nbits %d: adaptive %g, per-dim %g", nbits, ea, eu);
        if (nbits == 3) {
            tt_codec a2 = train_kind(x, n, dim, TT_CODEC_ADAPTIVE, 2, 25, imp);
            tt_codec a4 = train_kind(x, n, dim, TT_CODEC_ADAPTIVE, 4, 25, imp);
            double e2 = weighted_error(&a2, x, n, imp), e4 = weighted_error(&a4, x, n, imp);
            ck_assert_msg(e4 < ea && ea < e2, "adaptive 2/3/4 bits: %g %g %g", e2, ea, e4);
            tt_codec_free(&a2);
            tt_codec_free(&a4);
        }
        tt_codec_free(&u);
        tt_codec_free(&c);
    }
    /* Random spreads and importances: the total is always exact, and the result is
     * deterministic. */
    for (int t = 0; t < 20; t++) {
        uint32_t d = 5 + (uint32_t)tt_rng_below(&r, 60);
        for (uint32_t j = 0; j < d; j++) {
            double sc = exp(4 * (tt_rng_uniform(&r) - 0.5));
            imp[j] = (float)exp(6 * (tt_rng_uniform(&r) - 0.5));
            for (uint64_t i = 0; i < 500; i++)
                x[i * d + j] = (float)(sc * gauss(&r));
        }
        int nbits = 1 + t % 4;
        tt_codec c = train_kind(x, 500, d, TT_CODEC_ADAPTIVE, nbits, t % 2 ? 25 : 0, imp);
        tt_codec c2 = train_kind(x, 500, d, TT_CODEC_ADAPTIVE, nbits, t % 2 ? 25 : 0, imp);
        uint64_t sum = 0;
        for (uint32_t k = 0; k < d; k++)
            sum += c.bits[k];
        ck_assert_msg(sum == (uint64_t)nbits * d, "dim %u nbits %d: %llu bits", d, nbits,
                      (unsigned long long)sum);
        ck_assert_mem_eq(c.bits, c2.bits, d);
        ck_assert_mem_eq(c.weights, c2.weights, c.nweights * sizeof(float));
        tt_codec_free(&c);
        tt_codec_free(&c2);
    }
    free(x);
}
END_TEST

/* Lloyd-Max refinement never raises the error on the values the tables are trained on
 * (tartan's held-out residuals), for every kind, width and distribution; on a Gaussian
 * it reaches the Lloyd-Max optimum (Max 1960: 0.3634, 0.1175, 0.0095 sigma^2; 4 bits
 * needs about 100 rounds from the quantile start, 1 and 2 bits under 25). */
START_TEST(lloyd_max_never_increases_error) {
    const uint64_t n = 4000;
    const uint32_t dim = 16;
    tt_rng r;
    tt_rng_seed(&r, 8);
    float *x = malloc(n * dim * sizeof *x);
    for (int dist = 0; dist < 4; dist++) {
        for (uint64_t i = 0; i < n; i++)
            for (uint32_t j = 0; j < dim; j++) {
                double g = gauss(&r), u = tt_rng_uniform(&r);
                double v = dist == 0 ? g                                     /* Gaussian */
                           : dist == 1 ? (u < 0.5 ? 1 : -1) * log(1e-12 + tt_rng_uniform(&r)) /* Laplace */
                           : dist == 2 ? (u < 0.3 ? -2 : 1) + 0.2 * g        /* bimodal */
                                       : floor(3 * g) / 3;                   /* ties */
                x[i * dim + j] = (float)(v * (1 + j % 3));
            }
        const int kinds[3] = {TT_CODEC_SHARED, TT_CODEC_PER_DIM, TT_CODEC_ADAPTIVE};
        for (int ki = 0; ki < 3; ki++)
            for (int nbits = 1; nbits <= 4; nbits++) {
                if (nbits == 3 && kinds[ki] != TT_CODEC_ADAPTIVE)
                    continue;
                tt_codec q = train_kind(x, n, dim, kinds[ki], nbits, 0, NULL);
                tt_codec l = train_kind(x, n, dim, kinds[ki], nbits, 100, NULL);
                double eq = weighted_error(&q, x, n, NULL), el = weighted_error(&l, x, n, NULL);
                ck_assert_msg(el <= eq * (1 + 1e-9), "dist %d kind %d nbits %d: %g > %g", dist,
                              kinds[ki], nbits, el, eq);
                if (dist == 0 && kinds[ki] == TT_CODEC_PER_DIM) {
                    const double opt[5] = {0, 0.3634, 0.1175, 0, 0.0095};
                    double var = 0;
                    for (uint32_t j = 0; j < dim; j++)
                        var += (1 + j % 3) * (1 + j % 3);
                    double rel = el / ((double)n * var) / opt[nbits];
                    ck_assert_msg(rel > 0.97 && rel < 1.06, "nbits %d: %.4f of the optimum", nbits, rel);
                }
                tt_codec_free(&q);
                tt_codec_free(&l);
            }
    }
    free(x);
}
END_TEST

/* Encoding puts the bucket of each position (by definition) at its bit offset; the LUT
 * dot equals the decoded dot; a clone encodes alike; stored tables are checked. */
START_TEST(adaptive_encode_lut_and_init) {
    const uint64_t n = 800;
    const uint32_t dim = 40;
    tt_rng r;
    tt_rng_seed(&r, 11);
    float *x = malloc(n * dim * sizeof *x), imp[40];
    for (uint32_t j = 0; j < dim; j++)
        imp[j] = (float)exp(5 * (tt_rng_uniform(&r) - 0.5));
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++)
            x[i * dim + j] = (float)(gauss(&r) * (j % 7 == 0 ? 10 : 1) * (j % 3 == 0 ? 0.01 : 1));
    tt_codec c, cl;
    /* 3 bits (an average over mixed widths), then 2, which c keeps for the
     * checks of stored tables below. */
    for (int nbits = 3; nbits >= 2; nbits--) {
        c = train_kind(x, n, dim, TT_CODEC_ADAPTIVE, nbits, 25, imp);
        ck_assert_uint_eq(c.bytes_per_vec, ((uint64_t)nbits * dim + 7) / 8);
        ck_assert_int_eq(tt_codec_clone(&cl, &c), TT_OK);
        float rp[40], q[40], out[40];
        uint8_t p[40], p2[40];
        float *lut = malloc((size_t)c.bytes_per_vec * 256 * sizeof *lut);
        for (uint32_t k = 0; k < dim; k++)
            q[k] = (float)gauss(&r);
        tt_codec_build_lut(&c, q, lut);
        /* 3-bit codes straddle bytes: there is no per-byte table for them (NaN) */
        uint32_t n3 = 0;
        for (uint32_t k = 0; k < dim; k++)
            n3 += c.bits[k] == 3;
        ck_assert_msg(nbits != 3 || n3 > 0, "no 3-bit position at 3 bits");
        ck_assert(tt_codec_lut_ok(&c) == (n3 == 0));
        if (n3)
            ck_assert(isnan(lut[0]) && isnan(lut[c.bytes_per_vec * 256 - 1]));
        for (uint64_t i = 0; i < n; i++) {
            tt_codec_to_positions(&c, x + i * dim, rp);
            tt_codec_encode(&c, rp, p);
            tt_codec_encode(&cl, rp, p2);
            ck_assert_mem_eq(p, p2, c.bytes_per_vec);
            for (uint32_t k = 0; k < dim; k++) {
                uint32_t nb = 1u << c.bits[k], want = 0;
                for (uint32_t b = 0; b + 1 < nb; b++)
                    want += rp[k] > c.cutoffs[c.coff[k] + b];
                CHECK(tt_codec_code(&c, p, k) == want);
            }
            tt_codec_decode(&c, p, out);
            double dot = 0;
            for (uint32_t k = 0; k < dim; k++)
                dot += (double)q[k] * out[k];
            float l = tt_codec_dot_lut(lut, p, c.bytes_per_vec);
            CHECK(n3 || fabs(l - dot) < 1e-4 * (1 + fabs(dot)));
            /* back to the input order */
            float back[40];
            tt_codec_to_input(&c, rp, back);
            CHECK(memcmp(back, x + i * dim, sizeof back) == 0);
        }
        free(lut);
        tt_codec_free(&cl);
        if (nbits == 3)
            tt_codec_free(&c);
    }
    /* Stored tables: widths, order, budget, permutation and values are checked. */
    uint8_t bits[4] = {4, 2, 1, 1};
    uint32_t perm[4] = {2, 0, 3, 1};
    float cut[15 + 3 + 1 + 1], w[16 + 4 + 2 + 2];
    for (int i = 0; i < 20; i++)
        cut[i] = (float)i;
    for (int i = 0; i < 24; i++)
        w[i] = (float)i;
    cut[15] = 0; /* table 1 starts over: fine */
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, bits, perm, cut, w), TT_OK);
    {   /* without 3-bit widths the per-byte table is defined: LUT dot == decoded dot */
        float q4[4] = {0.5f, -2, 3, 1.25f}, lut4[256], o4[4];
        ck_assert(tt_codec_lut_ok(&cl));
        tt_codec_build_lut(&cl, q4, lut4);
        for (uint32_t v = 0; v < 256; v++) {
            uint8_t pv = (uint8_t)v;
            tt_codec_decode(&cl, &pv, o4);
            float want = q4[0] * o4[0] + q4[1] * o4[1] + q4[2] * o4[2] + q4[3] * o4[3];
            CHECK(fabsf(tt_codec_dot_lut(lut4, &pv, 1) - want) < 1e-4f * (1 + fabsf(want)));
        }
    }
    tt_codec_free(&cl);
    uint8_t b5[4] = {5, 1, 1, 1}, up[4] = {1, 2, 2, 2}, big[4] = {8, 1, 0, 0};
    uint32_t dup[4] = {0, 1, 1, 3}, out_of[4] = {0, 1, 2, 4};
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, b5, perm, cut, w), TT_ECORRUPT);
    /* a 3-bit width (its 7 cutoffs and 8 weights come first) */
    uint8_t b3[4] = {3, 3, 1, 1};
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, b3, perm, cut, w), TT_OK);
    ck_assert_uint_eq(cl.bytes_per_vec, 1);
    ck_assert_uint_eq(cl.bitoff[1], 3);
    tt_codec_free(&cl);
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, up, perm, cut, w), TT_ECORRUPT);
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, big, perm, cut, w), TT_ECORRUPT);
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, bits, dup, cut, w), TT_ECORRUPT);
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, bits, out_of, cut, w), TT_ECORRUPT);
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 5, bits, perm, cut, w), TT_EINVAL);
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 0, bits, perm, cut, w), TT_EINVAL);
    /* 3 bits on average: an adaptive budget, here from widths 4, 2, 1, 1 */
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 3, bits, perm, cut, w), TT_OK);
    ck_assert_uint_eq(cl.bytes_per_vec, 2);
    tt_codec_free(&cl);
    cut[3] = -1; /* descending within table 0 */
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, bits, perm, cut, w), TT_ECORRUPT);
    cut[3] = 3;
    w[20] = NAN;
    ck_assert_int_eq(tt_codec_init_adaptive(&cl, 4, 2, bits, perm, cut, w), TT_ECORRUPT);
    ck_assert_ptr_null(cl.weights);
    tt_codec_free(&c);
    free(x);
}
END_TEST

int main(void) {
    Suite *s = suite_create("codec");
    TCase *tq = tcase_create("quantile");
    tcase_add_test(tq, quantile_matches_sorting);
    tcase_add_test(tq, quantile_small_and_clamped);
    tcase_add_test(tq, quantile_no_size_ceiling);
    tcase_set_timeout(tq, 120);
    suite_add_tcase(s, tq);
    TCase *tc = tcase_create("codec");
    tcase_add_test(tc, train_tables_are_exact_quantiles);
    tcase_add_test(tc, train_and_init_errors);
    tcase_add_test(tc, bucket_convention);
    tcase_add_test(tc, packing_layout_by_hand);
    tcase_add_test(tc, packing_matches_bitwise_packer);
    tcase_add_test(tc, decode_is_bucket_weight);
    tcase_add_test(tc, hand_filled_codec_encodes_the_same);
    tcase_add_test(tc, gaussian_mse_matches_theory);
    tcase_add_test(tc, per_dim_beats_shared_on_outliers);
    tcase_add_test(tc, lut_dot_equals_decoded_dot);
    tcase_add_test(tc, lut_entries_by_definition);
    tcase_add_test(tc, adaptive_allocation);
    tcase_add_test(tc, debias_makes_self_products_unbiased);
    tcase_add_test(tc, lloyd_max_never_increases_error);
    tcase_add_test(tc, adaptive_encode_lut_and_init);
    tcase_add_test(tc, vector_scale_by_definition);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* Search: the residual fetcher, the scoring kernels, and PLAID search on built indexes
 * (planted documents, recall against exhaustive, io paths, batch == serial, bad input). */
#include "testutil.h"

#include "quant/cscore.h"
#include "input/input.h"
#include "search/search.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* ------------------------------------------------------------ fetcher */

#define F_BASE 64u

static uint8_t pat(uint64_t i) { return (uint8_t)((i * 2654435761u) >> 13); }

/* A temporary file of `size` pattern bytes; returns its path (malloc'd). */
static char *pattern_file(uint64_t size, char **dir_out) {
    char *dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    char *path = malloc(strlen(dir) + 16);
    sprintf(path, "%s/res.bin", dir);
    uint8_t *b = malloc(size);
    for (uint64_t i = 0; i < size; i++)
        b[i] = pat(i);
    ck_assert_int_eq(tu_write_file(path, b, size), 0);
    free(b);
    *dir_out = dir;
    return path;
}

/* Reads n random ranges (some overlapping, unsorted, some long) through one fetcher
 * configuration and checks every byte. */
static void check_ranges(const tt_fetch_config *cfg, uint64_t size, int expect_mode,
                         uint64_t seed) {
    tt_fetcher *f = NULL;
    char note[160];
    ck_assert_int_eq(tt_fetcher_new(&f, cfg, note, sizeof note), TT_OK);
    if (expect_mode)
        ck_assert_int_eq(tt_fetcher_mode(f), expect_mode);
    tt_rng r;
    tt_rng_seed(&r, seed);
    const uint64_t payload = size - F_BASE;
    for (int round = 0; round < 3; round++) {
        size_t n = 300 + 100 * (size_t)round;
        uint64_t *off = malloc(n * sizeof *off), *len = malloc(n * sizeof *len);
        const uint8_t **ptr = malloc(n * sizeof *ptr);
        for (size_t i = 0; i < n; i++) {
            uint64_t l = 1 + tt_rng_below(&r, i % 50 == 0 ? 300000 : 5000);
            if (l > payload)
                l = payload;
            off[i] = tt_rng_below(&r, payload - l + 1);
            len[i] = l;
            if (i % 37 == 0) { /* the very end of the file */
                off[i] = payload - l;
            }
            if (i % 41 == 1 && i > 1) { /* adjacent to the previous range */
                off[i] = TT_MIN(off[i - 1] + len[i - 1], payload - l);
            }
        }
        /* Round 0 in one call; rounds 1-2 started, then waited for a few ranges at a time
         * (each range checked as soon as a wait covers it), round 2 after a started read
         * that nobody waited for. */
        if (round == 0) {
            ck_assert_int_eq(tt_fetcher_read(f, n, off, len, ptr), TT_OK);
        } else {
            if (round == 2)
                ck_assert_int_eq(tt_fetcher_start(f, n / 2, off + n / 2, len + n / 2, ptr),
                                 TT_OK);
            ck_assert_int_eq(tt_fetcher_start(f, n, off, len, ptr), TT_OK);
        }
        for (size_t i = 0, upto = 0; i < n; i++) {
            if (round > 0 && i == upto) {
                upto = TT_MIN(n, upto + 1 + tt_rng_below(&r, 20));
                ck_assert_int_eq(tt_fetcher_wait(f, upto - 1), TT_OK);
            }
            for (uint64_t b = 0; b < len[i]; b++)
                if (ptr[i][b] != pat(F_BASE + off[i] + b))
                    ck_abort_msg("round %d: range %zu (%llu+%llu) byte %llu differs", round, i,
                                 (unsigned long long)off[i], (unsigned long long)len[i],
                                 (unsigned long long)b);
        }
        /* Everything arrived: more waits return at once. */
        ck_assert_int_eq(tt_fetcher_wait(f, n - 1), TT_OK);
        ck_assert_int_eq(tt_fetcher_wait(f, SIZE_MAX), TT_OK);
        free(off);
        free(len);
        free(ptr);
    }
    tt_fetch_stats s;
    tt_fetcher_stats(f, &s);
    ck_assert_uint_eq(s.calls, 4);
    ck_assert_uint_eq(s.ranges, 300 + 400 + 250 + 500);
    ck_assert_uint_gt(s.bytes, 0);
    if (tt_fetcher_mode(f) == TT_FETCH_MMAP)
        ck_assert_uint_eq(s.reads, 0);
    else
        ck_assert_uint_gt(s.reads, 0);
    tt_fetcher_free(f);
}

START_TEST(fetch_paths_agree) {
    char *dir;
    const uint64_t size = 3 * 1024 * 1024 + 1234; /* not a multiple of 4096 */
    char *path = pattern_file(size, &dir);
    int fd = open(path, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(map, MAP_FAILED);
    tt_fetch_config cfg = {.mode = TT_FETCH_URING, .fd = fd, .fd_direct = -1, .path = path,
                           .file_size = size, .base = F_BASE, .queue_depth = 8,
                           .max_read = 64 * 1024};
    check_ranges(&cfg, size, TT_FETCH_URING, 1);
    cfg.mode = TT_FETCH_PREAD;
    check_ranges(&cfg, size, TT_FETCH_PREAD, 2);
    cfg.mode = TT_FETCH_MMAP;
    cfg.map = (const uint8_t *)map + F_BASE;
    check_ranges(&cfg, size, TT_FETCH_MMAP, 3);
    cfg.map = NULL;
    int dfd = open(path, O_RDONLY | O_DIRECT);
    if (dfd >= 0) {
        cfg.fd_direct = dfd;
        cfg.mode = TT_FETCH_URING;
        check_ranges(&cfg, size, TT_FETCH_URING, 4);
        cfg.mode = TT_FETCH_PREAD;
        check_ranges(&cfg, size, TT_FETCH_PREAD, 5);
        close(dfd);
    } else {
        fprintf(stderr, "O_DIRECT not supported here (%s): direct reads not tested\n",
                strerror(errno));
    }
    munmap(map, size);
    close(fd);
    tu_rmrf(dir);
    free(dir);
    free(path);
}
END_TEST

/* O_DIRECT: ranges sharing a 4 KiB block are read once, every read is aligned, and the
 * byte count is whole blocks (except at the end of the file). */
START_TEST(fetch_direct_alignment) {
    char *dir;
    const uint64_t size = 1024 * 1024 + 100;
    char *path = pattern_file(size, &dir);
    int fd = open(path, O_RDONLY), dfd = open(path, O_RDONLY | O_DIRECT);
    ck_assert_int_ge(fd, 0);
    if (dfd < 0) {
        fprintf(stderr, "O_DIRECT not supported here: skipped\n");
        close(fd);
        goto out;
    }
    tt_fetch_config cfg = {.mode = TT_FETCH_URING, .fd = fd, .fd_direct = dfd, .path = path,
                           .file_size = size, .base = F_BASE, .queue_depth = 4};
    tt_fetcher *f;
    ck_assert_int_eq(tt_fetcher_new(&f, &cfg, NULL, 0), TT_OK);
    /* Three ranges inside block 1 of the file, one crossing blocks 3-4. */
    uint64_t off[4] = {4096 - F_BASE + 10, 4096 - F_BASE + 100, 4096 - F_BASE + 3000,
                       4 * 4096 - F_BASE - 5};
    uint64_t len[4] = {50, 7, 1000, 10};
    const uint8_t *ptr[4];
    ck_assert_int_eq(tt_fetcher_read(f, 4, off, len, ptr), TT_OK);
    for (int i = 0; i < 4; i++)
        for (uint64_t b = 0; b < len[i]; b++)
            ck_assert_uint_eq(ptr[i][b], pat(F_BASE + off[i] + b));
    tt_fetch_stats s;
    tt_fetcher_stats(f, &s);
    ck_assert_uint_eq(s.bytes, 3 * 4096); /* blocks 1, 3, 4 */
    ck_assert_uint_eq(s.reads, 2);        /* block 1; blocks 3-4 */
    /* The last bytes of a file whose size is not block-aligned. */
    uint64_t o2 = size - F_BASE - 30, l2 = 30;
    ck_assert_int_eq(tt_fetcher_read(f, 1, &o2, &l2, ptr), TT_OK);
    for (uint64_t b = 0; b < l2; b++)
        ck_assert_uint_eq(ptr[0][b], pat(F_BASE + o2 + b));
    tt_fetcher_free(f);
    close(dfd);
    close(fd);
out:
    tu_rmrf(dir);
    free(dir);
    free(path);
}
END_TEST

START_TEST(fetch_errors) {
    char *dir;
    const uint64_t size = 100000;
    char *path = pattern_file(size, &dir);
    int fd = open(path, O_RDONLY);
    /* The fetcher believes the file is longer than it is (truncated after open). */
    tt_fetch_config cfg = {.mode = TT_FETCH_URING, .fd = fd, .fd_direct = -1, .path = path,
                           .file_size = size + 5000, .base = F_BASE, .queue_depth = 4};
    for (int mode = TT_FETCH_URING; mode <= TT_FETCH_PREAD; mode += 2) {
        cfg.mode = mode;
        tt_fetcher *f;
        ck_assert_int_eq(tt_fetcher_new(&f, &cfg, NULL, 0), TT_OK);
        uint64_t off = size - F_BASE - 10, len = 1000;
        const uint8_t *p;
        ck_assert_int_eq(tt_fetcher_read(f, 1, &off, &len, &p), TT_ECORRUPT);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "res.bin"));
        /* The same, started: a range before the truncated one arrives, the wait that
         * reaches the truncated one fails, and a later wait says so again. */
        uint64_t offs[2] = {5, size - F_BASE - 10}, lens[2] = {10, 1000};
        const uint8_t *ps[2];
        ck_assert_int_eq(tt_fetcher_start(f, 2, offs, lens, ps), TT_OK);
        ck_assert_int_eq(tt_fetcher_wait(f, 0), TT_OK);
        ck_assert_uint_eq(ps[0][0], pat(F_BASE + 5));
        ck_assert_int_eq(tt_fetcher_wait(f, 1), TT_ECORRUPT);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "res.bin"));
        ck_assert_int_eq(tt_fetcher_wait(f, 1), TT_ECORRUPT);
        /* A range past the end of the payload is refused before any read. */
        off = size + 5000;
        len = 1;
        ck_assert_int_eq(tt_fetcher_read(f, 1, &off, &len, &p), TT_ECORRUPT);
        /* ... and, started, a later wait says so again */
        ck_assert_int_eq(tt_fetcher_start(f, 1, &off, &len, &p), TT_ECORRUPT);
        ck_assert_int_eq(tt_fetcher_wait(f, 0), TT_ECORRUPT);
        /* Still usable afterwards. */
        off = 5;
        len = 10;
        ck_assert_int_eq(tt_fetcher_read(f, 1, &off, &len, &p), TT_OK);
        ck_assert_uint_eq(p[0], pat(F_BASE + 5));
        tt_fetcher_free(f);
    }
    /* Invalid configurations. */
    tt_fetcher *f = NULL;
    cfg.mode = TT_FETCH_MMAP;
    ck_assert_int_eq(tt_fetcher_new(&f, &cfg, NULL, 0), TT_EINVAL);
    cfg.mode = 42;
    ck_assert_int_eq(tt_fetcher_new(&f, &cfg, NULL, 0), TT_EINVAL);
    close(fd);
    tu_rmrf(dir);
    free(dir);
    free(path);
}
END_TEST

/* ------------------------------------------------------------ kernels */

/* A codec with random ascending cutoffs and random weights. */
static void random_codec(tt_codec *c, uint32_t dim, uint32_t nbits, int per_dim, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    uint32_t nt = per_dim ? dim : 1, nb = 1u << nbits;
    float *cut = malloc((size_t)nt * (nb - 1) * sizeof *cut + 4);
    float *w = malloc((size_t)nt * nb * sizeof *w);
    for (uint32_t t = 0; t < nt; t++) {
        float x = -0.2f;
        for (uint32_t b = 0; b + 1 < nb; b++) {
            x += 0.01f + 0.1f * (float)tt_rng_uniform(&r);
            cut[t * (nb - 1) + b] = x;
        }
        for (uint32_t b = 0; b < nb; b++)
            w[t * nb + b] = (float)(tt_rng_uniform(&r) - 0.5);
    }
    ck_assert_int_eq(tt_codec_init(c, dim, nbits, nt, cut, w), TT_OK);
    free(cut);
    free(w);
}

/* The decoder's paths with centroids added: out from the fastest the CPU has, o2 from
 * the portable loop; the AVX2 loop (where the CPU has it; on an AVX-512 CPU with
 * AVX-512 turned off) and the AVX-512 one must write the portable loop's floats. */
static void decode_add_paths(tt_resdec *d, const uint8_t *packed, uint32_t n, const float *C,
                             const uint32_t *codes, float *out, float *o2) {
    const int a512 = d->avx512, a2 = d->avx2;
    const size_t bytes = (size_t)n * d->dim * sizeof *out;
    d->avx512 = d->avx2 = 0;
    tt_resdec_decode_add(d, packed, n, C, codes, o2);
    if (a2) {
        d->avx2 = 1;
        tt_resdec_decode_add(d, packed, n, C, codes, out);
        ck_assert_mem_eq(out, o2, bytes);
    }
    d->avx512 = a512;
    tt_resdec_decode_add(d, packed, n, C, codes, out);
    ck_assert_mem_eq(out, o2, bytes);
    /* From float16 rows (an index's centroids16), on every path: the floats of the
     * float32 rows they hold exactly. */
    uint32_t K = 0;
    for (uint32_t v = 0; v < n; v++)
        K = TT_MAX(K, codes[v] + 1);
    const size_t kd = (size_t)K * d->dim;
    float *Cr = malloc(kd * sizeof *Cr);
    uint16_t *H = malloc(kd * sizeof *H);
    memcpy(Cr, C, kd * sizeof *Cr);
    ck_assert(tt_f16_round_n(Cr, kd));
    ck_assert(tt_f16_from_f32_exact_n(H, Cr, kd));
    float *o3 = malloc(bytes), *o4 = malloc(bytes);
    tt_resdec_decode_add(d, packed, n, Cr, codes, o3);
    for (int path = 0; path < 3; path++) {
        d->avx512 = path == 2 ? a512 : 0;
        d->avx2 = path >= 1 ? a2 : 0;
        memset(o4, 0, bytes);
        tt_resdec_decode_add16(d, packed, n, H, codes, o4);
        ck_assert_mem_eq(o4, o3, bytes);
    }
    /* With per-vector residual scales (debias 2), from float16 rows, float32 rows or
     * none, on every path: c + r before k0, fmaf(s, r, c) from k0 on, bit for bit. */
    uint16_t *sc = malloc(n * sizeof *sc);
    for (uint32_t v = 0; v < n; v++) /* a zero scale among them */
        sc[v] = tt_f32_to_f16(v == 1 ? 0.0f : 0.5f + 0.37f * (float)v);
    d->avx512 = d->avx2 = 0;
    tt_resdec_decode(d, packed, n, o3); /* the residuals */
    for (uint32_t k0 = 0; k0 <= TT_MIN(3u, d->dim); k0 += 3)
        for (int from = 0; from < 3; from++) {
            for (int path = 0; path < 3; path++) {
                d->avx512 = path == 2 ? a512 : 0;
                d->avx2 = path >= 1 ? a2 : 0;
                memset(o4, 0, bytes);
                tt_resdec_decode_scaled(d, packed, n, from == 1 ? Cr : NULL, from == 0 ? H : NULL,
                                        codes, k0, sc, o4);
                for (uint32_t v = 0; v < n; v++)
                    for (uint32_t k = 0; k < d->dim; k++) {
                        const float c = from == 2 ? 0.0f : Cr[(size_t)codes[v] * d->dim + k];
                        const float r = o3[(size_t)v * d->dim + k];
                        const float want = k < k0 ? c + r : fmaf(tt_f16_to_f32(sc[v]), r, c);
                        ck_assert_msg(o4[(size_t)v * d->dim + k] == want,
                                      "path %d, from %d, k0 %u: vector %u position %u", path,
                                      from, k0, v, k);
                    }
            }
        }
    free(sc);
    d->avx512 = a512;
    d->avx2 = a2;
    free(Cr);
    free(H);
    free(o3);
    free(o4);
}

START_TEST(resdec_matches_layout) {
    /* 600 and 3584: per-dimension codecs without expanded tables at 2 and 4 bits (the
     * AVX-512 or AVX2 path where the CPU has it, 600 with a tail of 8 dimensions). */
    const uint32_t dims[] = {128, 36, 7, 600, 3584};
    const uint32_t nbits[] = {1, 2, 4};
    for (int di = 0; di < 5; di++)
        for (int bi = 0; bi < 3; bi++)
            for (int pd = 0; pd < 2; pd++) {
                uint32_t dim = dims[di], nb = nbits[bi];
                tt_codec c;
                random_codec(&c, dim, nb, pd, 7 + (uint64_t)di * 10 + bi);
                tt_resdec d;
                ck_assert_int_eq(tt_resdec_init(&d, &c), TT_OK);
                tt_rng r;
                tt_rng_seed(&r, 99);
                const uint32_t n = 5;
                uint8_t *packed = malloc((size_t)n * c.bytes_per_vec);
                for (uint32_t i = 0; i < n * c.bytes_per_vec; i++)
                    packed[i] = (uint8_t)tt_rng_next(&r);
                float *out = malloc((size_t)n * dim * sizeof *out);
                float *ref = malloc((size_t)dim * sizeof *ref);
                tt_resdec_decode(&d, packed, n, out);
                for (uint32_t v = 0; v < n; v++) {
                    /* MSB-first fields, as documented in codec.h. */
                    for (uint32_t j = 0; j < dim; j++) {
                        uint32_t bit = j * nb, byte = packed[v * c.bytes_per_vec + bit / 8];
                        uint32_t bucket = (byte >> (8 - nb - bit % 8)) & ((1u << nb) - 1);
                        ck_assert_float_eq(out[(size_t)v * dim + j],
                                           c.weights[(pd ? j : 0) * (1u << nb) + bucket]);
                    }
                    /* And the codec's own decoder agrees (for valid trailing bits). */
                    tt_codec_decode(&c, packed + v * c.bytes_per_vec, ref);
                    if ((dim * nb) % 8 == 0)
                        for (uint32_t j = 0; j < dim; j++)
                            ck_assert_float_eq(out[(size_t)v * dim + j], ref[j]);
                }
                /* With centroids added: the AVX-512 path and the portable loop write
                 * the same floats. */
                const uint32_t K = 3, codes[5] = {2, 0, 1, 2, 1};
                float *C = malloc((size_t)K * dim * sizeof *C);
                for (uint32_t i = 0; i < K * dim; i++)
                    C[i] = (float)(tt_rng_uniform(&r) - 0.5);
                float *o2 = malloc((size_t)n * dim * sizeof *o2);
                decode_add_paths(&d, packed, n, C, codes, out, o2);
                for (uint32_t v = 0; v < n; v++)
                    for (uint32_t j = 0; j < dim; j++) {
                        uint32_t bit = j * nb, byte = packed[v * c.bytes_per_vec + bit / 8];
                        uint32_t bucket = (byte >> (8 - nb - bit % 8)) & ((1u << nb) - 1);
                        ck_assert_float_eq(o2[(size_t)v * dim + j],
                                           C[(size_t)codes[v] * dim + j] +
                                               c.weights[(pd ? j : 0) * (1u << nb) + bucket]);
                    }
                free(C);
                free(o2);
                free(packed);
                free(out);
                free(ref);
                tt_resdec_free(&d);
                tt_codec_free(&c);
            }
}
END_TEST

/* Assertion for inner loops (each passing ck_assert costs a round trip to Check). */
#define CHECK(cond) \
    do { \
        if (!(cond)) \
            ck_abort_msg("assertion failed: %s", #cond); \
    } while (0)

/* An adaptive codec with the given width counts (8, 4, 3, 2, 1, 0 bits), a random
 * permutation and random ascending tables. */
static void random_adaptive(tt_codec *c, const uint32_t cnt[6], uint32_t nbits, uint64_t seed) {
    static const uint32_t wid[6] = {8, 4, 3, 2, 1, 0};
    tt_rng r;
    tt_rng_seed(&r, seed);
    uint32_t dim = 0;
    for (int i = 0; i < 6; i++)
        dim += cnt[i];
    uint8_t *bits = malloc(dim);
    uint32_t *perm = malloc(dim * sizeof *perm);
    float *cut = malloc((size_t)dim * 255 * sizeof *cut + 4), *w = malloc((size_t)dim * 256 * sizeof *w);
    uint32_t k = 0;
    uint64_t nc = 0, nw = 0;
    for (int i = 0; i < 6; i++)
        for (uint32_t j = 0; j < cnt[i]; j++, k++) {
            bits[k] = (uint8_t)wid[i];
            uint32_t nb = 1u << wid[i];
            float x = -0.3f;
            for (uint32_t b = 0; b + 1 < nb; b++) {
                x += 0.001f + 0.01f * (float)tt_rng_uniform(&r);
                cut[nc++] = x;
            }
            for (uint32_t b = 0; b < nb; b++)
                w[nw++] = (float)(tt_rng_uniform(&r) - 0.5);
        }
    for (uint32_t i = 0; i < dim; i++)
        perm[i] = i;
    for (uint32_t i = dim; i > 1; i--) {
        uint32_t j = (uint32_t)tt_rng_below(&r, i), t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    ck_assert_msg(tt_codec_init_adaptive(c, dim, nbits, bits, perm, cut, w) == TT_OK, "%s",
                  tt_last_error());
    free(bits);
    free(perm);
    free(cut);
    free(w);
}

/* random_adaptive with the smallest average width that holds the layout's bits. */
static void layout_codec(tt_codec *c, const uint32_t cnt[6], uint64_t seed) {
    uint64_t bitsum = 8ull * cnt[0] + 4 * cnt[1] + 3 * cnt[2] + 2 * cnt[3] + cnt[4];
    uint32_t dim = cnt[0] + cnt[1] + cnt[2] + cnt[3] + cnt[4] + cnt[5];
    uint32_t nbits = bitsum <= dim ? 1 : bitsum <= 2ull * dim ? 2 : bitsum <= 3ull * dim ? 3 : 4;
    random_adaptive(c, cnt, nbits, seed);
}

/* Every width, runs that share bytes with the next width (odd counts), runs long
 * enough for the AVX-512 loop and for and against the expanded tables: the decoder
 * writes the scalar definition's values, with and without centroids, and its AVX-512
 * and portable loops write the same floats. */
START_TEST(resdec_adaptive_matches_definition) {
    const uint32_t layouts[][6] = {
        {4, 0, 0, 996, 24, 0},   /* the LLM allocation at 1024-d, 2 bits */
        {3, 1, 0, 5, 3, 4},      /* every width but 3, mixed bytes at each boundary */
        {0, 0, 0, 60, 8, 0},     /* 2 + 1 bits with expanded tables */
        {1, 3, 0, 700, 17, 9},   /* long 2-bit run, AVX-512 and a tail, 0-bit positions */
        {0, 200, 0, 0, 0, 0},    /* 4 bits only */
        {2, 0, 0, 0, 3000, 2},   /* 1 bit beyond the expanded-table budget */
        {4, 500, 0, 511, 9, 0},  /* 3 bits on average from 4- and 2-bit runs */
        {4, 0, 1013, 3, 4, 0},   /* a 3-bit budget at 1024-d with the 3-bit width */
        {3, 1, 37, 5, 3, 4},     /* 3-bit run starting mid-byte, ending mid-group */
        {0, 0, 45, 0, 0, 0},     /* 3 bits only: 2 groups of 16, a group, a tail */
        {1, 0, 5, 1, 0, 0},      /* fewer 3-bit codes than a group */
        {0, 1, 16, 0, 7, 1},     /* 3-bit run from a nibble, exactly one AVX-512 step */
    };
    for (size_t li = 0; li < sizeof layouts / sizeof layouts[0]; li++) {
        tt_codec c;
        layout_codec(&c, layouts[li], 300 + li);
        const uint32_t dim = c.dim;
        tt_resdec d;
        ck_assert_int_eq(tt_resdec_init(&d, &c), TT_OK);
        tt_rng r;
        tt_rng_seed(&r, 301 + li);
        const uint32_t n = 4, K = 3, codes[4] = {2, 0, 1, 2};
        uint8_t *packed = malloc((size_t)n * c.bytes_per_vec);
        for (uint32_t i = 0; i < n * c.bytes_per_vec; i++)
            packed[i] = (uint8_t)tt_rng_next(&r);
        float *out = malloc((size_t)n * dim * sizeof *out), *o2 = malloc((size_t)n * dim * sizeof *o2);
        float *ref = malloc((size_t)dim * sizeof *ref);
        float *C = malloc((size_t)K * dim * sizeof *C);
        for (uint32_t i = 0; i < K * dim; i++)
            C[i] = (float)(tt_rng_uniform(&r) - 0.5);
        tt_resdec_decode(&d, packed, n, out);
        for (uint32_t v = 0; v < n; v++) {
            const uint8_t *p = packed + (size_t)v * c.bytes_per_vec;
            tt_codec_decode(&c, p, ref);
            for (uint32_t k = 0; k < dim; k++) {
                /* the definition, bit by bit */
                uint32_t off = 0;
                for (uint32_t i = 0; i < k; i++)
                    off += c.bits[i];
                uint32_t code = 0;
                for (uint32_t b = 0; b < c.bits[k]; b++, off++)
                    code = code << 1 | ((p[off / 8] >> (7 - off % 8)) & 1);
                float want = c.weights[c.woff[k] + code];
                CHECK(out[(size_t)v * dim + k] == want);
                CHECK(ref[k] == want);
            }
        }
        decode_add_paths(&d, packed, n, C, codes, out, o2);
        for (uint32_t v = 0; v < n; v++)
            for (uint32_t k = 0; k < dim; k++)
                CHECK(o2[(size_t)v * dim + k] ==
                      C[(size_t)codes[v] * dim + k] +
                          tt_codec_value(&c, packed + (size_t)v * c.bytes_per_vec, k));
        free(packed);
        free(out);
        free(o2);
        free(ref);
        free(C);
        tt_resdec_free(&d);
        tt_codec_free(&c);
    }
}
END_TEST

/* The fused decode-and-multiply kernel of stage 4 (tt_resdec_dot: AVX-512, and its
 * AVX2 twin) gives the inner products of the decoder's own floats with the query rows,
 * within float rounding: every adaptive layout above (every width, runs sharing bytes,
 * 0-bit and loose positions, 3-bit runs from mid-byte, expanded tables or not),
 * per-dimension and shared codecs with tails, 4 and 8 query rows, a number of vectors
 * that leaves a partial block (27: AVX2 takes blocks of 16 and 8 vectors a vector per
 * lane, then 2 or 1; and again with the lanes off). Where it cannot run (neither
 * AVX-512 nor AVX2, other query sizes) it says so. On every one of those paths,
 * tt_resdec_dot_rows gives its floats bit for bit from the decoded rows (laid out by
 * tt_resdec_rows_layout; AVX-512 in panels of 16 vectors, AVX2 a vector a lane for the
 * whole blocks of 8 and one at a time after them: 27 leaves a partial panel and 3
 * vectors past the blocks); where tt_resdec_dot cannot run, neither can it. */
START_TEST(resdec_dot_matches_decode) {
    const uint32_t layouts[][6] = {
        {4, 0, 0, 996, 24, 0},  {3, 1, 0, 5, 3, 4},     {0, 0, 0, 60, 8, 0},
        {1, 3, 0, 700, 17, 9},  {0, 200, 0, 0, 0, 0},   {2, 0, 0, 0, 3000, 2},
        {4, 500, 0, 511, 9, 0}, {4, 0, 1013, 3, 4, 0},  {0, 1, 16, 0, 7, 1},
        {3, 1, 37, 5, 3, 4},    {0, 0, 45, 0, 0, 0},
    };
    const size_t nlay = sizeof layouts / sizeof layouts[0];
    /* then per-dimension (shared: odd entries) codecs: dims 600 and 3584 at 1-2 bits
     * take the AVX-512 bucket loop, 36 at 4 bits the expanded tables */
    const uint32_t pdims[] = {600, 3584, 36, 600}, pbits[] = {2, 1, 4, 1};
    for (size_t li = 0; li < nlay + 8; li++) {
        tt_codec c;
        if (li < nlay) {
            layout_codec(&c, layouts[li], 900 + li);
        } else {
            size_t e = li - nlay;
            random_codec(&c, pdims[e / 2], pbits[e / 2], (int)(e % 2 == 0), 950 + li);
        }
        const uint32_t dim = c.dim, n = 27;
        tt_resdec d;
        ck_assert_int_eq(tt_resdec_init(&d, &c), TT_OK);
        tt_rng r;
        tt_rng_seed(&r, 960 + li);
        uint8_t *packed = malloc((size_t)n * c.bytes_per_vec);
        for (uint32_t i = 0; i < n * c.bytes_per_vec; i++)
            packed[i] = (uint8_t)tt_rng_next(&r);
        float *Q = malloc((size_t)8 * dim * sizeof *Q), *x = malloc((size_t)dim * sizeof *x);
        float *R = malloc((size_t)n * dim * sizeof *R), out[27 * 8];
        for (uint32_t i = 0; i < 8 * dim; i++)
            Q[i] = (float)(tt_rng_uniform(&r) - 0.5);
        tt_resdec_decode(&d, packed, n, R);
        const int a512 = d.avx512, lanes = d.lanes;
        /* paths 0-1: AVX-512 with 4 and 8 query rows (where the CPU has it), 2-3: AVX2,
         * 4-5: AVX2 without the lanes */
        for (uint32_t path = 0; path < 6; path++) {
            const uint32_t nqp = path % 2 ? 8 : 4;
            d.avx512 = path < 2 ? a512 : 0;
            d.lanes = path < 4 ? lanes : 0;
            if (path < 2 && !a512)
                continue;
            if (!tt_resdec_dot_ok(&d, nqp)) {
                ck_assert_int_eq(d.avx512 || d.avx2, 0);
                continue;
            }
            memset(out, 0, sizeof out);
            tt_resdec_dot(&d, packed, n, Q, nqp, x, out);
            ck_assert(tt_resdec_dot_rows_ok(&d, nqp));
            {
                uint32_t stride, shift;
                tt_resdec_rows_layout(&d, &stride, &shift);
                ck_assert(stride % 16 == 0 && shift < 16 && stride >= dim + shift);
                const size_t bytes = ((size_t)n * stride * sizeof(float) + 63) / 64 * 64;
                float *Rs = aligned_alloc(64, bytes), *Qs = aligned_alloc(64, bytes), rout[27 * 8];
                memset(Rs, 0, bytes);
                memset(Qs, 0, bytes);
                for (uint32_t v = 0; v < n; v++)
                    memcpy(Rs + (size_t)v * stride + shift, R + (size_t)v * dim, dim * sizeof *R);
                for (uint32_t i = 0; i < nqp; i++)
                    memcpy(Qs + (size_t)i * stride + shift, Q + (size_t)i * dim, dim * sizeof *Q);
                float *Ls = aligned_alloc(64, bytes);
                memset(Ls, 0xff, bytes); /* NaN where the copy by lanes leaves it */
                tt_resdec_to_lanes(&d, Rs + shift, stride, n, Ls);
                tt_resdec_dot_rows(&d, Rs + shift, tt_resdec_rows_lanes(&d) ? Ls : NULL, stride,
                                   packed, n, Qs + shift, nqp, rout);
                ck_assert(tt_resdec_rows_lanes(&d) == (path >= 2 && path < 4 && !d.shared));
                for (uint32_t t = 0; t < n * nqp; t++)
                    ck_assert_msg(memcmp(&rout[t], &out[t], sizeof *out) == 0,
                                  "layout %zu nqp %u vector %u row %u: rows %.9g, packed %.9g", li,
                                  nqp, t / nqp, t % nqp, rout[t], out[t]);
                free(Rs);
                free(Qs);
                free(Ls);
            }
            for (uint32_t v = 0; v < n; v++)
                for (uint32_t i = 0; i < nqp; i++) {
                    double want = 0, mag = 0;
                    for (uint32_t k = 0; k < dim; k++) {
                        double t = (double)Q[(size_t)i * dim + k] * R[(size_t)v * dim + k];
                        want += t;
                        mag += fabs(t);
                    }
                    ck_assert_msg(fabs(out[v * nqp + i] - want) <= 1e-6 * (mag + 1e-3),
                                  "layout %zu nqp %u %s vector %u row %u: %.9g, decoded %.9g",
                                  li, nqp, d.avx512 ? "AVX-512" : d.lanes ? "AVX2 lanes" : "AVX2", v, i,
                                  out[v * nqp + i], want);
                }
        }
        const int a2 = d.avx2;
        d.avx512 = d.avx2 = 0;
        ck_assert(!tt_resdec_dot_ok(&d, 4) && !tt_resdec_dot_ok(&d, 8));
        ck_assert(!tt_resdec_dot_rows_ok(&d, 4) && !tt_resdec_dot_rows_ok(&d, 8));
        d.avx512 = a512;
        d.avx2 = a2;
        ck_assert(!tt_resdec_dot_ok(&d, 16) && !tt_resdec_dot_ok(&d, 12));
        free(packed);
        free(Q);
        free(x);
        free(R);
        tt_resdec_free(&d);
        tt_codec_free(&c);
    }
}
END_TEST

/* The residual lookup tables (tt_reslut): the AVX2 and the portable loop give the same
 * floats; each product is within the tables' rounding bound (npos steps) of the
 * decoder's own floats, and their root-mean-square error is that of independent
 * roundings (2 npos entries of variance step^2 / 12), not more; the layouts of
 * resdec_dot_matches_decode (runs of other widths, loose positions: exact), 4, 8, 16
 * and 28 query rows (the VBMI loop's rows in one pass of 4, 8 or 16, or 16, 8 and 4 at a
 * time), 27 vectors (a partial block of 16). Shared codecs have no tables. */
START_TEST(reslut_matches_decode) {
    const uint32_t layouts[][6] = {
        {4, 0, 0, 996, 24, 0}, {3, 1, 0, 5, 3, 4},    {0, 0, 0, 60, 8, 0},
        {1, 3, 0, 700, 17, 9}, {2, 0, 0, 0, 3000, 2}, {0, 1, 16, 0, 7, 1},
        {0, 0, 0, 4, 0, 0},
    };
    const size_t nlay = sizeof layouts / sizeof layouts[0];
    const uint32_t pdims[] = {3584, 600, 600, 600}, pbits[] = {2, 1, 2, 2};
    for (size_t li = 0; li < nlay + 4; li++) {
        tt_codec c;
        if (li < nlay) {
            layout_codec(&c, layouts[li], 1900 + li);
        } else {
            size_t e = li - nlay;
            random_codec(&c, pdims[e], pbits[e], e < 3, 1950 + li);
        }
        const uint32_t dim = c.dim, n = 27;
        tt_resdec d;
        tt_reslut L;
        ck_assert_int_eq(tt_resdec_init(&d, &c), TT_OK);
        ck_assert_int_eq(tt_reslut_init(&L, &d), TT_OK);
        if (d.shared) {
            ck_assert_uint_eq(L.npos, 0);
            tt_resdec_free(&d);
            tt_codec_free(&c);
            continue;
        }
        /* every layout but the second and the sixth has whole bytes of 1-2-bit codes */
        ck_assert_msg(li == 1 || li == 5 || L.npos > 0, "layout %zu: no tables", li);
        tt_rng r;
        tt_rng_seed(&r, 1960 + li);
        uint8_t *packed = malloc((size_t)n * c.bytes_per_vec);
        for (uint32_t i = 0; i < n * c.bytes_per_vec; i++)
            packed[i] = (uint8_t)tt_rng_next(&r);
        float *Q = malloc((size_t)28 * dim * sizeof *Q), *x = malloc((size_t)dim * sizeof *x);
        float *R = malloc((size_t)n * dim * sizeof *R), out[27 * 28], o2[27 * 28];
        for (uint32_t i = 0; i < 28 * dim; i++)
            Q[i] = (float)(tt_rng_uniform(&r) - 0.5);
        /* Vectors 0 and 1 take row 0's largest entry at every position: the sums that
         * would overflow 16-bit lanes summed too long. */
        ck_assert_int_eq(tt_reslut_set(&L, &d, Q, 4), TT_OK);
        for (uint32_t p = 0; p < L.npos; p++) {
            const uint8_t *t = L.tab + (size_t)p * 128;
            uint32_t hi = 0, lo = 0;
            for (uint32_t e = 1; e < 16; e++) {
                hi = t[e] > t[hi] ? e : hi;
                lo = t[16 + e] > t[16 + lo] ? e : lo;
            }
            packed[L.src[p]] = packed[c.bytes_per_vec + L.src[p]] = (uint8_t)(hi << 4 | lo);
        }
        tt_resdec_decode(&d, packed, n, R);
        const int a2 = L.avx2;
        for (uint32_t nqp = 4; nqp <= 28; nqp += nqp == 4 ? 4 : nqp == 8 ? 8 : 12) {
            /* the tables from the portable and the AVX2 loops: the same bytes and steps */
            const size_t tb = (size_t)nqp * L.npos * 32;
            L.avx2 = 0;
            ck_assert_int_eq(tt_reslut_set(&L, &d, Q, nqp), TT_OK);
            uint8_t *tab0 = malloc(tb + 1);
            float step0[28];
            if (L.npos) {
                memcpy(tab0, L.tab, tb);
                memcpy(step0, L.scale, nqp * sizeof *step0);
            }
            L.avx2 = a2;
            ck_assert_int_eq(tt_reslut_set(&L, &d, Q, nqp), TT_OK);
            if (L.npos) {
                ck_assert_mem_eq(L.tab, tab0, tb);
                ck_assert_mem_eq(L.scale, step0, nqp * sizeof *step0);
            }
            free(tab0);
            L.avx2 = 0;
            tt_reslut_dot(&L, &d, packed, n, Q, x, o2);
            L.avx2 = a2;
            /* the AVX2 sums, then the AVX-512BW ones and the VBMI ones (where the CPU has
             * them): the same floats as the portable loop's */
            const int a512 = L.avx512, vbmi = L.vbmi;
            L.avx512 = L.vbmi = 0;
            tt_reslut_dot(&L, &d, packed, n, Q, x, out);
            ck_assert_mem_eq(out, o2, (size_t)n * nqp * sizeof *out);
            L.avx512 = a512;
            tt_reslut_dot(&L, &d, packed, n, Q, x, out);
            ck_assert_mem_eq(out, o2, (size_t)n * nqp * sizeof *out);
            L.vbmi = vbmi;
            tt_reslut_dot(&L, &d, packed, n, Q, x, out);
            ck_assert_mem_eq(out, o2, (size_t)n * nqp * sizeof *out);
            /* Whole bytes of 4- and 8-bit codes through float byte tables (layouts 0
             * and 3 have some beside 1-2-bit bytes): the decoded products, up to float
             * rounding. */
            ck_assert(L.bon || (li != 0 && li != 3));
            if (L.bon) {
                L.bon = false;
                L.rest = true;
                tt_reslut_dot(&L, &d, packed, n, Q, x, o2);
                L.bon = true;
                for (uint32_t e = 0; e < n * nqp; e++)
                    ck_assert_msg(fabsf(out[e] - o2[e]) <= 1e-5f * (fabsf(o2[e]) + 1),
                                  "layout %zu: byte tables %.9g, decoded %.9g", li, out[e],
                                  o2[e]);
            }
            for (uint32_t i = 0; i < nqp; i++) {
                const double step = L.npos ? L.scale[i] : 0;
                double se = 0;
                for (uint32_t v = 0; v < n; v++) {
                    double want = 0, mag = 0;
                    for (uint32_t k = 0; k < dim; k++) {
                        double t = (double)Q[(size_t)i * dim + k] * R[(size_t)v * dim + k];
                        want += t;
                        mag += fabs(t);
                    }
                    const double err = out[v * nqp + i] - want;
                    ck_assert_msg(fabs(err) <= L.npos * step + 1e-5 * (mag + 1e-3),
                                  "layout %zu nqp %u vector %u row %u: %.9g, decoded %.9g "
                                  "(step %g, %u positions)",
                                  li, nqp, v, i, out[v * nqp + i], want, step, L.npos);
                    se += err * err;
                }
                const double rms = sqrt(se / n), sd = step * sqrt(2.0 * L.npos / 12.0);
                ck_assert_msg(rms <= 2 * sd + 1e-5, "layout %zu nqp %u row %u: rms error %g, "
                              "rounding alone %g", li, nqp, i, rms, sd);
            }
        }
        free(packed);
        free(Q);
        free(x);
        free(R);
        tt_reslut_free(&L);
        tt_resdec_free(&d);
        tt_codec_free(&c);
    }
}
END_TEST

/* The split's centroid part, both paths, from float32 and from float16 rows, against
 * the double-precision definition: dims with and without a tail of 8 and of 16, odd
 * and even code counts, a repeated code, 4 and 8 query rows; rows of CS not listed
 * stay untouched; on AVX2 the float16 rows give the float32 rows' sums bit for bit. */
START_TEST(centroid_dots_match_definition) {
    const uint32_t dims[] = {3584, 1024, 100, 9, 3}, K = 40;
    const uint32_t codes[] = {7, 3, 39, 0, 3, 22, 11, 5, 30};
    const int cpu_avx2 =
#ifdef TT_AVX2
        tt_cpu_avx2();
#else
        0;
#endif
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const uint32_t dim = dims[di];
        tt_rng r;
        tt_rng_seed(&r, 70 + di);
        float *C = malloc((size_t)K * dim * sizeof *C), *Q = malloc((size_t)8 * dim * sizeof *Q);
        float *CS = malloc((size_t)K * 8 * sizeof *CS), *CS32 = malloc((size_t)K * 8 * sizeof *CS);
        uint16_t *H = malloc((size_t)K * dim * sizeof *H);
        for (uint64_t i = 0; i < (uint64_t)K * dim; i++)
            C[i] = (float)(tt_rng_uniform(&r) - 0.5);
        for (uint64_t i = 0; i < 8ull * dim; i++)
            Q[i] = (float)(tt_rng_uniform(&r) - 0.5);
        /* float16-exact rows, so that the float16 path (half) has the same definition */
        ck_assert(tt_f16_round_n(C, (size_t)K * dim));
        ck_assert(tt_f16_from_f32_exact_n(H, C, (size_t)K * dim));
        for (uint32_t nqp = 4; nqp <= 8; nqp += 4)
            for (uint64_t n = 0; n <= sizeof codes / sizeof codes[0]; n++)
                for (int path = 0; path < 2 * (cpu_avx2 + 1); path++) {
                    const int avx2 = path / 2, half = path % 2;
                    for (uint32_t i = 0; i < K * nqp; i++)
                        CS[i] = -7.0f;
                    tt_centroid_dots(Q, nqp, dim, half ? NULL : C, half ? H : NULL, codes, n, CS,
                                     avx2);
                    /* AVX2 reads float16 into the same floats: the same sums */
                    if (avx2 && half)
                        ck_assert_mem_eq(CS, CS32, (size_t)K * nqp * sizeof *CS);
                    else if (avx2)
                        memcpy(CS32, CS, (size_t)K * nqp * sizeof *CS);
                    for (uint32_t k = 0; k < K; k++) {
                        bool listed = false;
                        for (uint64_t t = 0; t < n; t++)
                            listed |= codes[t] == k;
                        for (uint32_t i = 0; i < nqp; i++) {
                            const float *q = Q + (uint64_t)i * dim, *ck = C + (uint64_t)k * dim;
                            double want = -7.0;
                            if (listed) {
                                want = 0;
                                for (uint32_t j = 0; j < dim; j++)
                                    want += (double)q[j] * ck[j];
                            }
                            ck_assert_msg(fabs(CS[k * nqp + i] - want) <= 1e-5 * (1 + sqrt(dim)),
                                          "dim %u nqp %u n %llu avx2 %d half %d: centroid %u "
                                          "row %u: %g, want %g",
                                          dim, nqp, (unsigned long long)n, avx2, half, k, i,
                                          (double)CS[k * nqp + i], want);
                        }
                    }
                }
        free(C);
        free(Q);
        free(CS);
        free(CS32);
        free(H);
    }
}
END_TEST

/* The top-k order of qsort with a comparison function, as the sorts replaced it. */
static int ref_hit_cmp(const void *a, const void *b) {
    const tt_hit *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return (x->doc > y->doc) - (x->doc < y->doc);
}

static int doc_cmp(const void *a, const void *b) {
    const tt_hit *x = a, *y = b;
    return (x->doc > y->doc) - (x->doc < y->doc);
}

/* Field by field (tt_hit has padding). */
static bool same_hits(const tt_hit *a, const tt_hit *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i].doc != b[i].doc || a[i].score != b[i].score)
            return false;
    return true;
}

/* tt_hits_sort gives qsort's order; tt_hits_best puts the m best first in that order and
 * keeps every hit: on random scores with many ties, sorted and reversed inputs, sizes
 * around the insertion-sort cutoff and partition sizes. */
START_TEST(hits_sort_and_best) {
    tt_rng r;
    tt_rng_seed(&r, 11);
    const size_t ns[] = {0, 1, 2, 3, 16, 17, 33, 100, 1000, 4096};
    tt_hit *h = malloc(4096 * sizeof *h), *ref = malloc(4096 * sizeof *ref),
           *b = malloc(4096 * sizeof *b), *rest = malloc(4096 * sizeof *rest);
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const size_t n = ns[t];
        for (int kind = 0; kind < 4; kind++) {
            for (size_t i = 0; i < n; i++) {
                float s = kind == 0   ? (float)tt_rng_below(&r, 20) /* ties */
                          : kind == 1 ? (float)tt_rng_uniform(&r)
                          : kind == 2 ? (float)i                      /* worst first */
                                      : -(float)i;                    /* best first */
                h[i] = (tt_hit){.doc = (uint64_t)(n - i) * 7 % 10007, .score = s};
            }
            memcpy(ref, h, n * sizeof *h);
            qsort(ref, n, sizeof *ref, ref_hit_cmp);
            memcpy(b, h, n * sizeof *h);
            tt_hits_sort(b, n);
            ck_assert(same_hits(b, ref, n));
            const size_t ms[] = {0, 1, 10, n / 2, n ? n - 1 : 0, n, n + 5};
            for (size_t u = 0; u < sizeof ms / sizeof ms[0]; u++) {
                const size_t m = ms[u], mm = TT_MIN(m, n);
                memcpy(b, h, n * sizeof *h);
                tt_hits_best(b, n, m);
                ck_assert_msg(same_hits(b, ref, mm), "n %zu kind %d m %zu", n, kind, m);
                /* the rest: the other hits, each once */
                memcpy(rest, b + mm, (n - mm) * sizeof *b);
                qsort(rest, n - mm, sizeof *rest, doc_cmp);
                memcpy(b, ref + mm, (n - mm) * sizeof *b);
                qsort(b, n - mm, sizeof *b, doc_cmp);
                ck_assert(same_hits(rest, b, n - mm));
            }
        }
    }
    free(h);
    free(ref);
    free(b);
    free(rest);
}
END_TEST

START_TEST(topk_deterministic) {
    tt_rng r;
    tt_rng_seed(&r, 5);
    const uint32_t n = 2000;
    float *sc = malloc(n * sizeof *sc);
    for (uint32_t i = 0; i < n; i++)
        sc[i] = (float)tt_rng_below(&r, 50); /* many ties */
    const uint32_t ks[] = {1, 7, 100, 2000, 3000};
    for (int t = 0; t < 5; t++) {
        uint32_t k = ks[t];
        tt_topk a = {0}, b = {0};
        ck_assert_int_eq(tt_topk_reset(&a, k), TT_OK);
        ck_assert_int_eq(tt_topk_reset(&b, k), TT_OK);
        for (uint32_t i = 0; i < n; i++)
            tt_topk_push(&a, i, sc[i]);
        for (uint32_t i = n; i-- > 0;)
            tt_topk_push(&b, i, sc[i]);
        uint32_t na = tt_topk_finish(&a), nb = tt_topk_finish(&b);
        ck_assert_uint_eq(na, TT_MIN(k, n));
        ck_assert_uint_eq(na, nb);
        /* Expected: by score descending, then doc ascending (brute force). */
        uint32_t pos = 0;
        for (int s = 49; s >= 0 && pos < na; s--)
            for (uint32_t i = 0; i < n && pos < na; i++)
                if (sc[i] == (float)s) {
                    ck_assert_uint_eq(a.h[pos].doc, i);
                    ck_assert_uint_eq(b.h[pos].doc, i);
                    ck_assert_float_eq(a.h[pos].score, (float)s);
                    pos++;
                }
        tt_topk_free(&a);
        tt_topk_free(&b);
    }
    free(sc);
}
END_TEST

/* tt_maxsim_group equals the scalar double reference on random data. */
START_TEST(maxsim_group_matches_reference) {
    const uint32_t dims[] = {128, 96};
    for (int di = 0; di < 2; di++) {
        const uint32_t dim = dims[di], nq = 9, K = 20, ndocs = 13;
        tt_codec c;
        random_codec(&c, dim, 2, di, 11);
        tt_resdec d;
        ck_assert_int_eq(tt_resdec_init(&d, &c), TT_OK);
        tt_rng r;
        tt_rng_seed(&r, 123);
        float *Q = malloc((size_t)nq * dim * sizeof *Q);
        float *C = malloc((size_t)K * dim * sizeof *C);
        for (uint32_t i = 0; i < nq * dim; i++)
            Q[i] = (float)(tt_rng_uniform(&r) - 0.5);
        for (uint32_t i = 0; i < K * dim; i++)
            C[i] = (float)(tt_rng_uniform(&r) - 0.5);
        /* Padded query (rows nq..nqp zero). */
        const uint32_t nqp = tt_qpad(nq);
        ck_assert_uint_eq(nqp % TT_QB, 0);
        float *Qp = calloc((size_t)nqp * dim, sizeof *Qp);
        memcpy(Qp, Q, (size_t)nq * dim * sizeof *Q);
        uint32_t lens[13], total = 0;
        for (uint32_t t = 0; t < ndocs; t++) {
            lens[t] = 1 + (uint32_t)tt_rng_below(&r, 12);
            total += lens[t];
        }
        uint32_t *codes = malloc(total * sizeof *codes);
        uint8_t *packed = malloc((size_t)total * c.bytes_per_vec);
        for (uint32_t v = 0; v < total; v++)
            codes[v] = (uint32_t)tt_rng_below(&r, K);
        for (uint32_t b = 0; b < total * c.bytes_per_vec; b++)
            packed[b] = (uint8_t)tt_rng_next(&r);
        float *R = calloc(tt_maxsim_rows(total) * dim, sizeof *R);
        float *QR = malloc(tt_maxsim_rows(total) * nqp * sizeof *QR);
        float scores[13];
        tt_resdec_decode_add(&d, packed, total, C, codes, R);
        /* by sgemm, and by the own products where the CPU has them (nq 9: padded to 12
         * columns, so the own kernel's masked register is exercised too) */
        float *Qt = malloc((size_t)nqp * dim * sizeof *Qt);
        tt_maxsim_transpose(Qp, nqp, dim, Qt);
        for (int own = 0; own < 2; own++) {
#ifdef TT_AVX512
            if (own && !__builtin_cpu_supports("avx512f"))
                continue;
#else
            if (own)
                continue;
#endif
            tt_maxsim_group(Qp, own ? Qt : NULL, nq, nqp, dim, R, lens, ndocs, QR, scores);
            uint32_t v = 0;
            for (uint32_t t = 0; t < ndocs; t++) {
                double ref = tt_maxsim_reference(Q, nq, dim, C, &c, codes + v,
                                                 packed + (size_t)v * c.bytes_per_vec, lens[t]);
                ck_assert_double_eq_tol(scores[t], ref, 1e-4 * (1 + fabs(ref)));
                v += lens[t];
            }
        }
        free(Qt);
        free(Q);
        free(Qp);
        free(C);
        free(codes);
        free(packed);
        free(R);
        free(QR);
        tt_resdec_free(&d);
        tt_codec_free(&c);
    }
}
END_TEST

/* The own MaxSim products: the AVX-512 kernel writes the portable fmaf loop's floats,
 * for 1 to 4 registers of query columns (the last one masked or whole) and dimensions
 * that are not multiples of anything; a row's products do not depend on the rows or
 * columns computed with it; and they are the double products up to rounding. Fails
 * with the multiply-adds taken in another order or a mask one lane short (checked). */
/* P[j * nqp + i] = <R_j, Qp_i> within float rounding of a double reference. */
static void assert_products_near(const float *Qp, uint32_t nqp, uint32_t dim, const float *R,
                                 uint32_t nrows, const float *P) {
    for (uint32_t j = 0; j < nrows; j++)
        for (uint32_t i = 0; i < nqp; i++) {
            double want = 0, mag = 0;
            for (uint32_t k = 0; k < dim; k++) {
                want += (double)R[(size_t)j * dim + k] * Qp[(size_t)i * dim + k];
                mag += fabs((double)R[(size_t)j * dim + k] * Qp[(size_t)i * dim + k]);
            }
            ck_assert_double_eq_tol(P[(size_t)j * nqp + i], want, 1e-6 * (mag + 1));
        }
}

START_TEST(maxsim_products_own) {
    const uint32_t nqps[] = {4, 12, 16, 20, 32, 36, 48, 64}, dims[] = {1, 7, 128, 131};
    tt_rng r;
    tt_rng_seed(&r, 77);
    for (size_t a = 0; a < sizeof nqps / sizeof *nqps; a++)
        for (size_t b = 0; b < sizeof dims / sizeof *dims; b++) {
            const uint32_t nqp = nqps[a], dim = dims[b], nrows = 24;
            float *Qp = malloc((size_t)nqp * dim * sizeof *Qp);
            float *Qt = malloc((size_t)nqp * dim * sizeof *Qt);
            float *R = malloc((size_t)nrows * dim * sizeof *R);
            float *P = malloc((size_t)nrows * nqp * sizeof *P);
            float *A = malloc((size_t)nrows * nqp * sizeof *A);
            for (uint32_t i = 0; i < nqp * dim; i++)
                Qp[i] = (float)(tt_rng_uniform(&r) - 0.5);
            for (uint32_t i = 0; i < nrows * dim; i++)
                R[i] = (float)(tt_rng_uniform(&r) - 0.5) * 3;
            tt_maxsim_transpose(Qp, nqp, dim, Qt);
            for (uint32_t k = 0; k < dim; k++)
                ck_assert(Qt[(size_t)k * nqp + nqp - 1] == Qp[(size_t)(nqp - 1) * dim + k]);
            tt_maxsim_products_portable(Qt, nqp, dim, R, nrows, P);
            assert_products_near(Qp, nqp, dim, R, nrows, P);
#ifdef TT_AVX512
            if (__builtin_cpu_supports("avx512f")) {
                tt_maxsim_products_avx512(Qt, nqp, dim, R, nrows, A);
                ck_assert_mem_eq(A, P, (size_t)nrows * nqp * sizeof *A);
                /* rows 8..16 alone: the same floats */
                tt_maxsim_products_avx512(Qt, nqp, dim, R + 8 * (size_t)dim, 8, A);
                ck_assert_mem_eq(A, P + 8 * (size_t)nqp, (size_t)8 * nqp * sizeof *A);
            }
#endif
            free(Qp);
            free(Qt);
            free(R);
            free(P);
            free(A);
        }
}
END_TEST

/* The products for a few query rows (tt_maxsim_rowdot): the portable loop within float
 * rounding of a double reference, and the AVX-512 kernel bit for bit the portable loop,
 * for every width it takes (the padded 4, 8, 12 and the others one by one), dimensions
 * with and without a partial last block of 16 (1, 7, 16, 131, 1000, 3584: 1000 in chunks
 * of 512 with a partial last one), signed zeros among the values, and rows 4..8 alone
 * giving the same floats as in the whole. */
START_TEST(maxsim_rowdot_own) {
    const uint32_t nqps[] = {1, 3, 4, 5, 8, 11, 12}, dims[] = {1, 7, 16, 131, 1000, 3584};
    tt_rng r;
    tt_rng_seed(&r, 79);
    ck_assert(!tt_maxsim_rowdot(0) && !tt_maxsim_rowdot(TT_MAXSIM_ROWDOT_MAX_NQP + 1));
    for (size_t a = 0; a < sizeof nqps / sizeof *nqps; a++)
        for (size_t b = 0; b < sizeof dims / sizeof *dims; b++) {
            const uint32_t nqp = nqps[a], dim = dims[b], nrows = 16;
            float *Qp = malloc((size_t)nqp * dim * sizeof *Qp);
            float *R = malloc((size_t)nrows * dim * sizeof *R);
            float *P = malloc((size_t)nrows * nqp * sizeof *P);
            float *A = malloc((size_t)nrows * nqp * sizeof *A);
            for (uint32_t i = 0; i < nqp * dim; i++)
                Qp[i] = i % 29 == 3 ? -0.0f : (float)(tt_rng_uniform(&r) - 0.5);
            for (uint32_t i = 0; i < nrows * dim; i++)
                R[i] = i % 31 == 5 ? -0.0f : (float)(tt_rng_uniform(&r) - 0.5) * 3;
            tt_maxsim_rowdot_portable(Qp, nqp, dim, R, nrows, P);
            assert_products_near(Qp, nqp, dim, R, nrows, P);
#ifdef TT_AVX512
            if (tt_maxsim_rowdot(nqp)) {
                tt_maxsim_rowdot_avx512(Qp, nqp, dim, R, nrows, A);
                ck_assert_msg(!memcmp(A, P, (size_t)nrows * nqp * sizeof *A), "nqp %u dim %u",
                              nqp, dim);
                tt_maxsim_rowdot_avx512(Qp, nqp, dim, R + 4 * (size_t)dim, 4, A);
                ck_assert_mem_eq(A, P + 4 * (size_t)nqp, (size_t)4 * nqp * sizeof *A);
            }
#endif
            free(Qp);
            free(R);
            free(P);
            free(A);
        }
}
END_TEST

/* tt_cq_quantize_row's AVX2 loops give the portable loops' bytes and maximum: rows of
 * every length up to 3 blocks of 8 and a 3584-d one, with values on rounding ties
 * (x / m * 127 = k + 1/2, which lrintf and cvtps both round to even), non-finite values
 * (which count as 0 and never as the maximum), all-zero rows and signed zeros. Fails
 * if the AVX2 loop truncates instead of rounding, or lets an Inf be the maximum. */
START_TEST(cq_quantize_row_simd) {
    if (!tt_cq_simd_ok())
        return; /* nothing to compare on this CPU */
    tt_rng r;
    tt_rng_seed(&r, 77);
    float x[3584];
    int8_t a[3584], b[3584];
    for (uint32_t n = 0; n <= 3584; n = n < 25 ? n + 1 : n < 3584 ? 3584 : n + 1) {
        for (int kind = 0; kind < 5; kind++) {
            for (uint32_t j = 0; j < n; j++) {
                float v = (float)(tt_rng_uniform(&r) * 2 - 1);
                if (kind == 1) /* ties: m = 127 after the first value, k + 1/2 steps */
                    v = j == 0 ? 127.0f : (float)((int)(tt_rng_uniform(&r) * 254) - 127) + 0.5f;
                if (kind == 2 && j % 7 == 3)
                    v = j % 3 ? NAN : j % 2 ? INFINITY : -INFINITY;
                if (kind == 3)
                    v = j % 2 ? 0.0f : -0.0f;
                if (kind == 4 && j % 5 == 1) /* a huge finite value beside tiny ones */
                    v = j == 1 ? FLT_MAX : 1e-30f;
                x[j] = v;
            }
            float ma = -1, mb = -2;
            memset(a, 0x55, sizeof a);
            memset(b, 0x66, sizeof b);
            tt_cq_quantize_row(x, n, 127.0f, false, a, &ma);
            tt_cq_quantize_row(x, n, 127.0f, true, b, &mb);
            ck_assert_msg(ma == mb, "n %u kind %d: max %g vs %g", n, kind, ma, mb);
            ck_assert_msg(isfinite(ma), "n %u kind %d: a non-finite maximum", n, kind);
            ck_assert_msg(memcmp(a, b, n) == 0, "n %u kind %d: bytes differ", n, kind);
            if (kind == 1 && n > 1) /* the portable rounding of a tie is to even */
                for (uint32_t j = 1; j < n; j++)
                    ck_assert_int_eq(a[j] % 2, 0);
        }
    }
}
END_TEST

/* Stage-1 scores St of a tt_cq against references computed here from the definition
 * (cscore.h), not from the table, so that a kernel or a table that is wrong is caught:
 * - int8 kernels: St[k, i] must equal (float)(sum_d q8 * c8) * (cscale * qscale) bit for
 *   bit, with q8, c8 and the scales quantised here as tt_cq_init / tt_cq_query define them;
 *   and |St - <q, c>| must stay within the rounding bound of int8 quantisation:
 *   each value is off by at most half a step, so the dot product is off by at most
 *   (sc * |q|_1 + sq * |c|_1) / 2 + dim * sq * sc / 4 (plus float rounding);
 * - TT_CQ_F32 (sgemm): |St - <q, c>| within the float32 rounding bound.
 * Returns the number of entries that fail. */
static int8_t cq_q8(float x, float m, float qmax) {
    float v = m > 0 && isfinite(x) ? x / m * qmax : 0.0f;
    long r = lrintf(v);
    return (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
}

static float cq_maxabs(const float *x, uint32_t n) {
    float m = 0;
    for (uint32_t j = 0; j < n; j++)
        if (isfinite(x[j]) && fabsf(x[j]) > m)
            m = fabsf(x[j]);
    return m;
}

static uint64_t cq_mismatches(int kernel, float cmax, const float *C, uint32_t K, uint32_t dim,
                              const float *Q, uint32_t nq, uint32_t nqp, const float *St) {
    uint64_t bad = 0;
    for (uint32_t k = 0; k < K; k++) {
        const float *c = C + (size_t)k * dim, cm = cq_maxabs(c, dim), sc = cm / cmax;
        for (uint32_t i = 0; i < nqp; i++) {
            const float got = St[(size_t)k * nqp + i];
            if (i >= nq) { /* padding rows score 0 */
                bad += got != 0.0f;
                continue;
            }
            const float *x = Q + (size_t)i * dim, qm = cq_maxabs(x, dim), sq = qm / 127.0f;
            double dot = 0, l1q = 0, l1c = 0, nn = 0;
            int32_t dot8 = 0;
            for (uint32_t j = 0; j < dim; j++) {
                dot += (double)c[j] * x[j];
                l1q += fabs(x[j]);
                l1c += fabs(c[j]);
                nn += fabs((double)c[j] * x[j]);
                dot8 += (int32_t)cq_q8(x[j], qm, 127.0f) * cq_q8(c[j], cm, cmax);
            }
            /* float32 sums of dim products: |error| <= ~dim * 2^-24 * sum |c_j x_j| */
            const double fl = 1.01 * (dim + 2) * ldexp(1.0, -24) * nn + 1e-30;
            if (kernel == TT_CQ_F32) {
                bad += !(fabs(got - dot) <= fl);
                continue;
            }
            bad += memcmp(&got, &(float){(float)dot8 * (sc * sq)}, sizeof got) != 0;
            const double bound = (sc * l1q + sq * l1c) / 2 + dim * (double)sq * sc / 4;
            bad += !(fabs(got - dot) <= 1.001 * bound + fl);
        }
    }
    return bad;
}

/* Columns i < nqp of St (K rows) whose t->best[i] is not the column's maximum or
 * t->arg[i] not the lowest row holding it, plus rows k whose t->reach[k] is not whether
 * one of the first nq columns reaches t->thr. */
static uint32_t cq_top1_mismatches(const float *St, uint32_t K, uint32_t nq, uint32_t nqp,
                                   const tt_cq_top1 *t) {
    uint32_t bad = 0;
    for (uint32_t i = 0; i < nqp; i++) {
        uint32_t at = 0;
        for (uint32_t k = 1; k < K; k++)
            if (St[(size_t)k * nqp + i] > St[(size_t)at * nqp + i])
                at = k;
        bad += t->arg[i] != at ||
               memcmp(&t->best[i], &St[(size_t)at * nqp + i], sizeof *t->best) != 0;
    }
    for (uint32_t k = 0; k < K; k++) {
        bool r = false;
        for (uint32_t i = 0; i < nq; i++)
            r |= St[(size_t)k * nqp + i] >= t->thr;
        bad += t->reach[k] != r;
    }
    return bad;
}

/* The best int8 kernel this CPU has. */
static int cq_best_int8(void) {
    int best = TT_CQ_PORTABLE;
    while (best < TT_CQ_VNNI && tt_cq_kernel_ok(best + 1))
        best++;
    return best;
}

/* Stage-1 centroid scores: every int8 kernel the CPU has (AVX-512 VNNI, AVX2, SSE2)
 * equals the portable loop bit for bit, every kernel and the float32 sgemm path match
 * the references of cq_mismatches, for dimensions that are and are not multiples of 4,
 * partial centroid blocks and every query-vector count around the kernels' block
 * sizes; the column maxima and the rows reaching a threshold that the VNNI kernels
 * keep as they score (equal centroid rows give ties: the lowest row) equal a scan of
 * the portable loop's scores. */
START_TEST(cq_kernels_agree) {
    const uint32_t dims[] = {128, 130, 3584}, Ks[] = {1, 15, 16, 17, 100};
    const uint32_t nqs[] = {1, 3, 4, 5, 8, 9, 16, 17, 32, 33, 40};
    float cbest[48];
    uint32_t carg[48];
    uint8_t creach[100];
    tt_rng r;
    tt_rng_seed(&r, 2024);
    for (size_t di = 0; di < 3; di++) {
        const uint32_t dim = dims[di];
        for (size_t ki = 0; ki < 5; ki++) {
            const uint32_t K = Ks[ki];
            float *C = malloc((size_t)K * dim * sizeof *C);
            for (uint32_t k = 0; k < K; k++) {
                double ss = 0;
                for (uint32_t j = 0; j < dim; j++) {
                    float x = (float)(tt_rng_uniform(&r) - 0.5);
                    if (j % 61 == 7) /* an outlier dimension */
                        x *= 8;
                    C[(size_t)k * dim + j] = x;
                    ss += (double)x * x;
                }
                for (uint32_t j = 0; j < dim; j++)
                    C[(size_t)k * dim + j] /= (float)sqrt(ss);
            }
            if (K == 15)
                C[3] = 0; /* and a zero centroid */
            if (K == 100) {
                /* equal rows, in one block and across blocks: ties for the column maxima */
                memcpy(C + (size_t)21 * dim, C + (size_t)20 * dim, dim * sizeof *C);
                memcpy(C + (size_t)90 * dim, C + (size_t)10 * dim, dim * sizeof *C);
                memcpy(C + (size_t)47 * dim, C + (size_t)33 * dim, dim * sizeof *C);
            }
            tt_cq q, qf;
            ck_assert_int_eq(tt_cq_init_kernel(&q, C, K, dim, TT_CQ_PORTABLE), TT_OK);
            ck_assert_int_eq(tt_cq_init_kernel(&qf, C, K, dim, TT_CQ_F32), TT_OK);
            ck_assert_ptr_null(qf.data);
            ck_assert_uint_eq(tt_cq_bytes(&qf), 0);
            const int best = cq_best_int8();
            for (size_t ni = 0; ni < sizeof nqs / sizeof nqs[0]; ni++) {
                const uint32_t nq = nqs[ni], nqp = tt_qpad(nq);
                float *Q = calloc((size_t)nqp * dim, sizeof *Q);
                for (uint32_t i = 0; i < nq * dim; i++)
                    Q[i] = (float)(tt_rng_uniform(&r) - 0.5) / (float)sqrt(dim / 12.0);
                if (nq == 5)
                    memset(Q, 0, dim * sizeof *Q); /* a zero query vector */
                uint8_t *qp = aligned_alloc(64, tt_cq_qpack_bytes(&q, nqp) + 64);
                float *qs = malloc(nqp * sizeof *qs);
                float *S1 = malloc((size_t)K * nqp * sizeof *S1);
                float *S2 = malloc((size_t)K * nqp * sizeof *S2);
                tt_cq_query(&q, Q, nq, nqp, qp, qs);
                tt_cq_scores_portable(&q, qp, qs, nqp, S2);
                ck_assert_uint_eq(cq_mismatches(TT_CQ_PORTABLE, q.cmax, C, K, dim, Q, nq, nqp, S2),
                                  0);
                /* every int8 kernel this CPU has, down to the portable loop */
                for (int kern = best; kern >= TT_CQ_PORTABLE; kern--) {
                    q.kernel = kern;
                    memset(S1, 0xff, (size_t)K * nqp * sizeof *S1);
                    tt_cq_scores(&q, qp, qs, nqp, S1);
                    ck_assert_msg(!memcmp(S1, S2, (size_t)K * nqp * sizeof *S1),
                                  "kernel %d differs from the portable loop (K %u dim %u nq %u)",
                                  kern, K, dim, nq);
                    memset(S1, 0xff, (size_t)K * nqp * sizeof *S1);
                    tt_cq_centroid_scores(&q, Q, nq, nqp, qp, qs, S1);
                    ck_assert(!memcmp(S1, S2, (size_t)K * nqp * sizeof *S1));
                    /* the column maxima the VNNI kernels keep as they score */
                    memset(S1, 0xff, (size_t)K * nqp * sizeof *S1);
                    const tt_cq_top1 top = {cbest, carg, creach, 0.01f * (float)(nq % 3)};
                    const bool kept = tt_cq_centroid_scores_top1(&q, Q, nq, nqp, qp, qs, S1, &top);
                    ck_assert(!memcmp(S1, S2, (size_t)K * nqp * sizeof *S1));
                    ck_assert_int_eq(kept, kern == TT_CQ_VNNI);
                    if (kept)
                        ck_assert_uint_eq(cq_top1_mismatches(S2, K, nq, nqp, &top), 0);
                }
                memset(S1, 0xff, (size_t)K * nqp * sizeof *S1);
                tt_cq_centroid_scores(&qf, Q, nq, nqp, qp, qs, S1);
                ck_assert_uint_eq(cq_mismatches(TT_CQ_F32, 127, C, K, dim, Q, nq, nqp, S1), 0);
                free(Q);
                free(qp);
                free(qs);
                free(S1);
                free(S2);
            }
            tt_cq_free(&qf);
            tt_cq_free(&q);
            free(C);
        }
    }
    /* Past 66,000 dimensions the centroids get fewer levels so that no 32-bit sum can
     * overflow (UBSan would flag the portable loop): still exact between kernels. */
    const uint32_t dim = 300000, K = 17;
    float *C = malloc((size_t)K * dim * sizeof *C), *Q = malloc((size_t)9 * dim * sizeof *Q);
    for (size_t i = 0; i < (size_t)K * dim; i++)
        C[i] = 1.0f / 550; /* all at the maximum: the largest possible sums */
    for (size_t i = 0; i < (size_t)9 * dim; i++)
        Q[i] = i % 2 ? 1.0f / 550 : -1.0f / 550;
    tt_cq q;
    ck_assert_int_eq(tt_cq_init_kernel(&q, C, K, dim, cq_best_int8()), TT_OK);
    ck_assert(q.cmax < 127 && q.cmax >= 1);
    const uint32_t nqp = tt_qpad(9);
    uint8_t *qp = aligned_alloc(64, tt_cq_qpack_bytes(&q, nqp) + 64);
    float qs[16], *S1 = malloc((size_t)K * nqp * sizeof *S1), *S2 = malloc((size_t)K * nqp * 4);
    tt_cq_query(&q, Q, 9, nqp, qp, qs);
    tt_cq_scores_portable(&q, qp, qs, nqp, S2);
    for (int kern = q.kernel; kern >= TT_CQ_PORTABLE; kern--) {
        q.kernel = kern;
        tt_cq_scores(&q, qp, qs, nqp, S1);
        ck_assert_mem_eq(S1, S2, (size_t)K * nqp * sizeof *S1);
    }
    for (uint32_t k = 0; k < K; k++) /* q_i . c_k = 0 (alternating signs) */
        for (uint32_t i = 0; i < 9; i++)
            ck_assert_double_eq_tol(S1[(size_t)k * nqp + i], 0.0, 1e-3);
    tt_cq_free(&q);
    free(C);
    free(Q);
    free(qp);
    free(S1);
    free(S2);
}
END_TEST

/* cq_mismatches has teeth: with one int8 value of one centroid off by one step, or one
 * centroid scale off by 0.1 %, every int8 kernel's scores fail it; so does the float32
 * path given centroids with one value off by 0.05. nq 3 and 9 reach both tile shapes
 * (centroids in the lanes for nqp <= 8, query vectors in the lanes above). */
START_TEST(cq_check_catches_broken) {
    const uint32_t K = 40, dim = 130, nq = _i ? 3 : 9, nqp = tt_qpad(nq);
    tt_rng r;
    tt_rng_seed(&r, 77);
    float *C = malloc((size_t)K * dim * sizeof *C), *C2 = malloc((size_t)K * dim * sizeof *C2);
    float *Q = calloc((size_t)nqp * dim, sizeof *Q), *S = malloc((size_t)K * nqp * sizeof *S);
    for (uint32_t i = 0; i < K * dim; i++)
        C[i] = (float)(tt_rng_uniform(&r) - 0.5);
    for (uint32_t i = 0; i < nq * dim; i++)
        Q[i] = (float)(tt_rng_uniform(&r) - 0.5);
    tt_normalize_rows(C, K, dim);
    tt_normalize_rows(Q, nq, dim);
    tt_cq q;
    uint8_t *qp = NULL;
    float qs[16];
    for (int kern = TT_CQ_F32; kern <= TT_CQ_VNNI; kern++) {
        if (!tt_cq_kernel_ok(kern))
            continue;
        for (int broken = 0; broken < (kern == TT_CQ_F32 ? 2 : 3); broken++) {
            memcpy(C2, C, (size_t)K * dim * sizeof *C);
            if (kern == TT_CQ_F32 && broken)
                C2[5 * dim + 3] += 0.05f;
            ck_assert_int_eq(tt_cq_init_kernel(&q, C2, K, dim, kern), TT_OK);
            if (!qp)
                qp = aligned_alloc(64, tt_cq_qpack_bytes(&q, nqp) + 64);
            if (kern != TT_CQ_F32 && broken == 1) {
                /* centroid 5, dimension 3: block 0, group 0, lane 5, byte 3 */
                int8_t *v = (int8_t *)q.data + 5 * 4 + 3;
                *v = (int8_t)(*v > 0 ? *v - 1 : *v + 1);
            }
            if (broken == 2)
                q.scale[7] *= 1.001f;
            tt_cq_centroid_scores(&q, Q, nq, nqp, qp, qs, S);
            uint64_t bad = cq_mismatches(kern, kern == TT_CQ_F32 ? 127 : q.cmax, C, K, dim, Q,
                                         nq, nqp, S);
            ck_assert_msg(broken ? bad > 0 : bad == 0, "kernel %d, broken %d: %llu mismatches",
                          kern, broken, (unsigned long long)bad);
            tt_cq_free(&q);
        }
    }
    free(qp);
    free(C);
    free(C2);
    free(Q);
    free(S);
}
END_TEST

/* Row-major int8 centroids (tt_crows, quant/crows.c), the AVX2 kernel and the portable
 * loop, against the reference of cq_mismatches (the int8 values and steps quantised
 * here; St bit for bit, and within the int8 rounding bound of <q, c>): dims that are and
 * are not multiples of 32, 4 and 8 query rows (some of them padding), an odd number of
 * codes in no order, and nothing written for codes not asked. A table with one byte off
 * (broken 1) or one step off (broken 2) fails it in both kernels; so did, checked by
 * hand, the kernel with its fourth query row reading the third's bytes. */
START_TEST(crows_kernels_agree) {
    const uint32_t K = 37, dims[] = {100, 130, 513, 1024};
    tt_rng r;
    tt_rng_seed(&r, 91);
    for (uint32_t di = 0; di < 4; di++) {
        const uint32_t dim = dims[di];
        float *C = malloc((size_t)K * dim * sizeof *C);
        for (uint32_t i = 0; i < K * dim; i++)
            C[i] = (float)(tt_rng_uniform(&r) - 0.5);
        tt_normalize_rows(C, K, dim);
        for (uint32_t nqp = 4; nqp <= 8; nqp += 4) {
            const uint32_t nq = nqp - 1;
            float *Q = calloc((size_t)nqp * dim, sizeof *Q);
            for (uint32_t i = 0; i < nq * dim; i++)
                Q[i] = (float)(tt_rng_uniform(&r) - 0.5);
            tt_normalize_rows(Q, nq, dim);
            uint32_t codes[K], n = 0;
            for (uint32_t t = 0; t < K; t++) /* every third code, in a scrambled order */
                if ((t * 7 + 3) % K % 3 == 0)
                    codes[n++] = (t * 7 + 3) % K;
            ck_assert_uint_eq(n % 2, 1);
            for (int broken = 0; broken < 3; broken++) {
                tt_crows rows;
                ck_assert_int_eq(tt_crows_init(&rows, C, K, dim), TT_OK);
                ck_assert_uint_eq(rows.stride % 32, 0);
                if (broken == 1) { /* centroid codes[1], dimension 7 */
                    int8_t *v = rows.data + (size_t)codes[1] * rows.stride + 7;
                    *v = (int8_t)(*v > 0 ? *v - 1 : *v + 1);
                }
                if (broken == 2)
                    rows.scale[codes[2]] *= 1.001f;
                int8_t *q8 = aligned_alloc(64, (size_t)nqp * rows.stride);
                int8_t *qa = aligned_alloc(64, (size_t)nqp * rows.stride);
                float qs[8], qv[8];
                ck_assert_int_eq(tt_crows_query(&rows, Q, nqp, q8, qa, qs, qv), TT_OK);
                ck_assert_uint_eq(rows.nhead, 0); /* isotropic: no head dimensions */
                for (int avx2 = 0; avx2 < 2; avx2++) {
                    if (avx2 && !tt_cq_simd_ok())
                        continue;
                    float *CS = malloc((size_t)K * nqp * sizeof *CS), *Sub = calloc(
                        (size_t)n * nqp, sizeof *Sub);
                    for (uint32_t i = 0; i < K * nqp; i++)
                        CS[i] = NAN;
                    tt_crows_dots(&rows, Q, q8, qa, qs, nqp, codes, n, CS, avx2);
                    float *Cs = malloc((size_t)n * dim * sizeof *Cs);
                    for (uint32_t t = 0; t < n; t++) {
                        memcpy(Cs + (size_t)t * dim, C + (size_t)codes[t] * dim,
                               dim * sizeof *C);
                        memcpy(Sub + (size_t)t * nqp, CS + (size_t)codes[t] * nqp,
                               nqp * sizeof *CS);
                    }
                    uint64_t bad = cq_mismatches(TT_CQ_PORTABLE, 127.0f, Cs, n, dim, Q, nq,
                                                 nqp, Sub), stray = 0;
                    for (uint32_t k = 0; k < K; k++) {
                        bool asked = false;
                        for (uint32_t t = 0; t < n; t++)
                            asked |= codes[t] == k;
                        for (uint32_t i = 0; !asked && i < nqp; i++)
                            stray += !isnan(CS[(size_t)k * nqp + i]);
                    }
                    ck_assert_msg(broken ? bad > 0 : bad == 0,
                                  "dim %u, nqp %u, avx2 %d, broken %d: %llu mismatches", dim,
                                  nqp, avx2, broken, (unsigned long long)bad);
                    ck_assert_uint_eq(stray, 0);
                    free(Cs);
                    free(CS);
                    free(Sub);
                }
                free(q8);
                free(qa);
                tt_crows_free(&rows);
            }
            free(Q);
        }
        free(C);
    }
}
END_TEST

/* Head dimensions of tt_crows: two dimensions with a large offset shared by every
 * centroid (LLM hidden states' massive activations) are found, kept in float and left
 * out of the int8 rows; the kernels agree bit for bit; every score is within the int8
 * rounding bound of the other dimensions (plus float rounding), and the largest error
 * is under half of what rows rounded whole (the offsets setting every step) make. */
START_TEST(crows_head_dims) {
    const uint32_t K = 40, dim = 600, nq = 4, heads[2] = {5, 300};
    tt_rng r;
    tt_rng_seed(&r, 93);
    float *C = malloc((size_t)K * dim * sizeof *C), *Q = malloc((size_t)nq * dim * sizeof *Q);
    for (uint32_t i = 0; i < K * dim; i++)
        C[i] = (float)(tt_rng_uniform(&r) - 0.5) * 0.1f;
    for (uint32_t i = 0; i < nq * dim; i++)
        Q[i] = (float)(tt_rng_uniform(&r) - 0.5) * 0.1f;
    for (uint32_t k = 0; k < K; k++) {
        C[(size_t)k * dim + heads[0]] += 2.0f;
        C[(size_t)k * dim + heads[1]] -= 1.5f;
    }
    for (uint32_t i = 0; i < nq; i++)
        Q[(size_t)i * dim + heads[0]] += 1.0f;
    tt_crows rows;
    ck_assert_int_eq(tt_crows_init(&rows, C, K, dim), TT_OK);
    ck_assert_uint_eq(rows.nhead, 2);
    ck_assert_uint_eq(rows.head[0], heads[0]);
    ck_assert_uint_eq(rows.head[1], heads[1]);
    int8_t *q8 = aligned_alloc(64, (size_t)nq * rows.stride);
    int8_t *qa = aligned_alloc(64, (size_t)nq * rows.stride);
    float qs[4], qv[4], *S[2];
    ck_assert_int_eq(tt_crows_query(&rows, Q, nq, q8, qa, qs, qv), TT_OK);
    uint32_t codes[K];
    for (uint32_t k = 0; k < K; k++)
        codes[k] = K - 1 - k;
    for (int avx2 = 0; avx2 < 2; avx2++) {
        S[avx2] = malloc((size_t)K * nq * sizeof *S[avx2]);
        tt_crows_dots(&rows, Q, q8, qa, qs, nq, codes, K, S[avx2], avx2 && tt_cq_simd_ok());
    }
    ck_assert_mem_eq(S[0], S[1], (size_t)K * nq * sizeof *S[0]);
    double worst = 0, worst_whole = 0;
    for (uint32_t k = 0; k < K; k++)
        for (uint32_t i = 0; i < nq; i++) {
            const float *c = C + (size_t)k * dim, *x = Q + (size_t)i * dim;
            float cmt = 0, qmt = 0; /* steps without the head dimensions, and whole */
            for (uint32_t j = 0; j < dim; j++)
                if (j != heads[0] && j != heads[1]) {
                    cmt = fmaxf(cmt, fabsf(c[j]));
                    qmt = fmaxf(qmt, fabsf(x[j]));
                }
            const float cmw = cq_maxabs(c, dim), qmw = cq_maxabs(x, dim);
            double dot = 0, l1q = 0, l1c = 0, nn = 0;
            int32_t whole = 0;
            for (uint32_t j = 0; j < dim; j++) {
                dot += (double)c[j] * x[j];
                nn += fabs((double)c[j] * x[j]);
                whole += (int32_t)cq_q8(x[j], qmw, 127.0f) * cq_q8(c[j], cmw, 127.0f);
                if (j != heads[0] && j != heads[1]) {
                    l1q += fabs(x[j]);
                    l1c += fabs(c[j]);
                }
            }
            const double sc = cmt / 127.0, sq = qmt / 127.0;
            const double bound = (sc * l1q + sq * l1c) / 2 + (dim - 2) * sq * sc / 4 +
                                 1.01 * (dim + 4) * ldexp(1.0, -24) * nn;
            const double err = fabs(S[0][(size_t)k * nq + i] - dot);
            ck_assert_msg(err <= 1.001 * bound, "centroid %u row %u: error %g, bound %g", k,
                          i, err, bound);
            worst = fmax(worst, err);
            worst_whole = fmax(worst_whole,
                               fabs((double)whole * (cmw / 127.0) * (qmw / 127.0) - dot));
            ck_assert(qv[i] > 0);
        }
    ck_assert_msg(worst < 0.5 * worst_whole, "largest error %g, rows rounded whole %g", worst,
                  worst_whole);
    free(S[0]);
    free(S[1]);
    free(q8);
    free(qa);
    tt_crows_free(&rows);
    free(C);
    free(Q);
}
END_TEST

/* Two-level centroid scores (quant/cgroup.c): the groups are deterministic and valid;
 * on a grouped table, probe 0 gives every centroid the ungrouped table's score bit for
 * bit, and probe p gives the centroids of each query vector's p best groups their own
 * score and every other centroid its group's, against a reference made here: the
 * groups' mean centroids averaged in this test (members in id order, then scaled),
 * their own ungrouped table, the best groups chosen here (ties: the lower group). Each
 * int8 kernel the CPU has. Bad groups are refused. A table whose imputed rows take the
 * wrong group, or a group's own rows scattered to the wrong centroids, fails it (both
 * checked by breaking cgroup.c by hand). */
START_TEST(cq_groups) {
    const uint32_t K = 1100, dim = 72;
    float *C = malloc((size_t)K * dim * sizeof *C);
    tu_clustered(C, K, dim, 40, 0.5f, 91, NULL);
    tt_normalize_rows(C, K, dim);
    uint32_t *g1 = malloc(K * sizeof *g1), *g2 = malloc(K * sizeof *g2), G1, G2;
    ck_assert_int_eq(tt_cq_train_groups(C, K, dim, 5, 1, g1, &G1), TT_OK);
    ck_assert_int_eq(tt_cq_train_groups(C, K, dim, 5, 2, g2, &G2), TT_OK);
    ck_assert_uint_eq(G1, G2);
    ck_assert_mem_eq(g1, g2, K * sizeof *g1); /* any thread count */
    ck_assert(G1 >= 2 && G1 <= 17); /* max(16, 1100 / 64) groups, empty ones dropped */
    uint32_t *size = calloc(G1, sizeof *size), next = 0;
    for (uint32_t k = 0; k < K; k++) {
        ck_assert_uint_lt(g1[k], G1);
        ck_assert_uint_le(g1[k], next); /* numbered by their first member */
        if (g1[k] == next)
            next++;
        size[g1[k]]++;
    }
    ck_assert_uint_eq(next, G1);
    ck_assert_int_eq(tt_cq_train_groups(C, 1000, dim, 5, 1, g2, &G2), TT_EINVAL); /* < 1024 */
    /* the reference's group centres: members summed in id order, times 1 / size */
    float *mu = calloc((size_t)G1 * dim, sizeof *mu);
    for (uint32_t k = 0; k < K; k++)
        for (uint32_t d = 0; d < dim; d++)
            mu[(size_t)g1[k] * dim + d] += C[(size_t)k * dim + d];
    for (uint32_t g = 0; g < G1; g++)
        for (uint32_t d = 0; d < dim; d++)
            mu[(size_t)g * dim + d] *= 1.0f / (float)size[g];
    const uint32_t nqs[] = {1, 4, 9};
    tt_rng r;
    tt_rng_seed(&r, 17);
    for (int kern = TT_CQ_PORTABLE; kern <= TT_CQ_VNNI; kern++) {
        if (!tt_cq_kernel_ok(kern))
            continue;
        tt_cq plain, grouped, centres;
        ck_assert_int_eq(tt_cq_init_kernel(&plain, C, K, dim, kern), TT_OK);
        ck_assert_int_eq(tt_cq_init_grouped(&grouped, C, K, dim, kern, g1, G1), TT_OK);
        ck_assert_int_eq(tt_cq_init_kernel(&centres, mu, G1, dim, kern), TT_OK);
        ck_assert_uint_eq(grouped.ngroups, G1);
        ck_assert_uint_eq(grouped.ncent, K);
        for (size_t ni = 0; ni < 3; ni++) {
            const uint32_t nq = nqs[ni], nqp = tt_qpad(nq);
            float *Q = calloc((size_t)nqp * dim, sizeof *Q);
            for (uint32_t i = 0; i < nq; i++) {
                const float *src = C + (size_t)tt_rng_below(&r, K) * dim;
                for (uint32_t d = 0; d < dim; d++)
                    Q[(size_t)i * dim + d] = src[d] + 0.3f * (float)(tt_rng_uniform(&r) - 0.5);
            }
            uint8_t *qp = aligned_alloc(64, tt_cq_qpack_bytes(&plain, nqp) + 64);
            float qs[64];
            void *work = aligned_alloc(64, tt_cq_group_work_bytes(&grouped, nqp) + 64);
            float *S0 = malloc((size_t)K * nqp * sizeof *S0), *S = malloc((size_t)K * nqp * 4);
            float *Sg = malloc((size_t)G1 * nqp * sizeof *Sg), *want = malloc((size_t)K * nqp * 4);
            tt_cq_centroid_scores(&plain, Q, nq, nqp, qp, qs, S0);
            tt_cq_centroid_scores(&centres, Q, nq, nqp, qp, qs, Sg);
            memset(S, 0xff, (size_t)K * nqp * sizeof *S);
            ck_assert_uint_eq(tt_cq_group_scores(&grouped, Q, nq, nqp, 0, qp, qs, work, S), K);
            ck_assert_mem_eq(S, S0, (size_t)K * nqp * sizeof *S);
            memset(S, 0xff, (size_t)K * nqp * sizeof *S);
            ck_assert_uint_eq(tt_cq_group_scores(&grouped, Q, nq, nqp, G1, qp, qs, work, S), K);
            ck_assert_mem_eq(S, S0, (size_t)K * nqp * sizeof *S);
            /* an ungrouped table scores every centroid whatever the probe */
            memset(S, 0xff, (size_t)K * nqp * sizeof *S);
            ck_assert_uint_eq(tt_cq_group_scores(&plain, Q, nq, nqp, 2, qp, qs, work, S), K);
            ck_assert_mem_eq(S, S0, (size_t)K * nqp * sizeof *S);
            for (uint32_t probe = 1; probe <= 3; probe++) {
                uint8_t on[64] = {0};
                for (uint32_t i = 0; i < nq; i++)
                    for (uint32_t t = 0; t < probe; t++) { /* the t-th best, lower id on ties */
                        uint32_t best = 0;
                        bool found = false;
                        for (uint32_t g = 0; g < G1 && g < 64; g++) {
                            if (on[g] & 2)
                                continue;
                            if (!found || Sg[(size_t)g * nqp + i] > Sg[(size_t)best * nqp + i])
                                best = g;
                            found = true;
                        }
                        ck_assert(found);
                        on[best] |= 3;
                        for (uint32_t g = 0; g < G1; g++)
                            on[g] = (uint8_t)(on[g] & (t + 1 < probe ? 3 : 1));
                    }
                uint32_t own = 0;
                for (uint32_t k = 0; k < K; k++) {
                    const float *src = on[g1[k]] ? S0 + (size_t)k * nqp : Sg + (size_t)g1[k] * nqp;
                    memcpy(want + (size_t)k * nqp, src, nqp * sizeof *want);
                    own += on[g1[k]];
                }
                memset(S, 0xff, (size_t)K * nqp * sizeof *S);
                ck_assert_uint_eq(tt_cq_group_scores(&grouped, Q, nq, nqp, probe, qp, qs, work, S),
                                  own);
                ck_assert_msg(!memcmp(S, want, (size_t)K * nqp * sizeof *S),
                              "kernel %d nq %u probe %u: scores differ from the reference",
                              kern, nq, probe);
                ck_assert_uint_lt(own, K);
            }
            free(Q);
            free(qp);
            free(work);
            free(S0);
            free(S);
            free(Sg);
            free(want);
        }
        tt_cq_free(&plain);
        tt_cq_free(&grouped);
        tt_cq_free(&centres);
    }
    /* refused: a group out of range, a group without members */
    tt_cq q;
    memcpy(g2, g1, K * sizeof *g2);
    g2[7] = G1;
    ck_assert_int_eq(tt_cq_init_grouped(&q, C, K, dim, TT_CQ_PORTABLE, g2, G1), TT_EINVAL);
    ck_assert_int_eq(tt_cq_init_grouped(&q, C, K, dim, TT_CQ_PORTABLE, g1, G1 + 1), TT_EINVAL);
    /* TT_CQ_F32 has no int8 rows to group: an ungrouped table */
    ck_assert_int_eq(tt_cq_init_grouped(&q, C, K, dim, TT_CQ_F32, g1, G1), TT_OK);
    ck_assert_uint_eq(q.ngroups, 0);
    tt_cq_free(&q);
    free(C);
    free(g1);
    free(g2);
    free(size);
    free(mu);
}
END_TEST

START_TEST(defaults_by_k) {
    tt_search_options o;
    /* Default pruning is relative (scale-free); the absolute thresholds stay ColBERTv2's. */
    tt_search_options_resolve(NULL, 10, &o);
    ck_assert_int_eq(o.nprobe, 1);
    ck_assert_int_eq(o.pruning, TT_PRUNE_RELATIVE);
    ck_assert_float_eq(o.prune_ratio, 0.5f);
    ck_assert(isnan(o.threshold));
    ck_assert_uint_eq(o.ndocs, 256);
    tt_search_options in;
    tt_search_options_init(&in);
    in.pruning = TT_PRUNE_ABSOLUTE;
    tt_search_options_resolve(&in, 10, &o);
    ck_assert_int_eq(o.pruning, TT_PRUNE_ABSOLUTE);
    ck_assert_float_eq(o.threshold, 0.5f);
    tt_search_options_resolve(&in, 100, &o);
    ck_assert_int_eq(o.nprobe, 2);
    ck_assert_float_eq(o.threshold, 0.45f);
    ck_assert_uint_eq(o.ndocs, 1024);
    tt_search_options_resolve(&in, 101, &o);
    ck_assert_int_eq(o.nprobe, 4);
    ck_assert_float_eq(o.threshold, 0.4f);
    ck_assert_uint_eq(o.ndocs, 4096);
    tt_search_options_resolve(NULL, 5000, &o);
    ck_assert_uint_eq(o.ndocs, 20000);
    /* An explicit threshold means what it always meant: the absolute rule. */
    tt_search_options_init(&in);
    in.nprobe = 3;
    in.threshold = 0.1f;
    in.ndocs = 77;
    tt_search_options_resolve(&in, 10, &o);
    ck_assert_int_eq(o.nprobe, 3);
    ck_assert_int_eq(o.pruning, TT_PRUNE_ABSOLUTE);
    ck_assert_float_eq(o.threshold, 0.1f);
    ck_assert_uint_eq(o.ndocs, 77);
    tt_search_options_resolve(&o, 10, &o); /* resolving is idempotent */
    ck_assert_int_eq(o.pruning, TT_PRUNE_ABSOLUTE);
    ck_assert_float_eq(o.threshold, 0.1f);
    tt_search_options_init(&in);
    in.prune_ratio = 0.8f;
    tt_search_options_resolve(&in, 10, &o);
    ck_assert_int_eq(o.pruning, TT_PRUNE_RELATIVE);
    ck_assert_float_eq(o.prune_ratio, 0.8f);
    ck_assert_int_eq(tt_search_options_check(&in), TT_OK);
    in.prune_ratio = 1.5f;
    ck_assert_int_eq(tt_search_options_check(&in), TT_EINVAL);
    in.prune_ratio = NAN;
    in.pruning = 7;
    ck_assert_int_eq(tt_search_options_check(&in), TT_EINVAL);
    in.pruning = TT_PRUNE_AUTO;
    in.rerank = 5;
    ck_assert_int_eq(tt_search_options_check(&in), TT_EINVAL);
    in.rerank = TT_RERANK_ADAPTIVE;
    /* A caller built before pruning existed: what lies past its struct_size is not
     * read, and it gets the relative default. */
    in.struct_size = (uint32_t)offsetof(tt_search_options, pruning);
    in.prune_ratio = 9;
    ck_assert_int_eq(tt_search_options_check(&in), TT_OK);
    tt_search_options_resolve(&in, 10, &o);
    ck_assert_int_eq(o.pruning, TT_PRUNE_RELATIVE);
    ck_assert_float_eq(o.prune_ratio, 0.5f);
}
END_TEST

/* ---------------------------------------------------- on built indexes */

typedef struct corpus {
    uint32_t dim;
    uint64_t ndocs, nvec;
    float *x;
    uint32_t *lens;
    uint64_t *vec0;
} corpus;

static char *g_tmp;              /* scratch directory of the whole run */
static char g_idx[4200];         /* synthetic index, with f16 originals */
static char g_idx_plain[4200];   /* small synthetic index without originals */
static char g_idx_ad[4200];      /* adaptive codec over vectors with outlier dimensions */
static char g_idx_vs[4200];      /* the same with one residual scale per vector (debias 2) */
static int g_build_debias = TT_DEBIAS_TABLE; /* build_from's debias */
static char g_idx_ad3[4200];     /* the same with 3 outliers: a 3-byte residual sketch */
static char g_idx_hv[4200];      /* 512-d with outliers, adaptive, scales (debias 2) */
static char g_idx_hp[4200];      /* the same vectors, per-dimension tables */
static corpus g_c, g_ca, g_ca3, g_ch;
static float *g_gq;              /* G_GROUPS group queries of 32 vectors */
#define G_GROUPS 40

static void make_corpus(corpus *c, uint64_t ndocs, uint32_t dim, uint32_t minlen,
                        uint32_t maxlen, uint32_t nclusters, float noise, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    c->dim = dim;
    c->ndocs = ndocs;
    c->lens = malloc(ndocs * sizeof *c->lens);
    c->vec0 = malloc((ndocs + 1) * sizeof *c->vec0);
    c->nvec = 0;
    for (uint64_t d = 0; d < ndocs; d++) {
        c->vec0[d] = c->nvec;
        c->lens[d] = minlen + (uint32_t)tt_rng_below(&r, maxlen - minlen + 1);
        c->nvec += c->lens[d];
    }
    c->vec0[ndocs] = c->nvec;
    c->x = malloc(c->nvec * dim * sizeof *c->x);
    tu_clustered(c->x, c->nvec, dim, nclusters, noise, seed + 1, NULL);
}

/* Relevance structure for recall tests: G groups, each with a query of nq vectors
 * (noisy copies of random corpus vectors) and 10 documents (g, g+G, ..., g+9G) that
 * contain noisy copies of between a quarter and all of the query's vectors. The
 * exhaustive top 10 of a group's query is then mostly its 10 documents, well separated
 * from the rest, as with relevant documents of a real query. Returns G*nq*dim floats. */
static float *plant_groups(corpus *c, uint32_t G, uint32_t nq, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    const uint32_t dim = c->dim;
    float *gq = malloc((size_t)G * nq * dim * sizeof *gq);
    for (uint32_t i = 0; i < G * nq; i++) {
        const float *src = c->x + tt_rng_below(&r, c->nvec) * dim;
        for (uint32_t j = 0; j < dim; j++)
            gq[(size_t)i * dim + j] = src[j] + 0.05f * (float)(tt_rng_uniform(&r) - 0.5);
    }
    tt_normalize_rows(gq, (uint64_t)G * nq, dim);
    for (uint32_t g = 0; g < G; g++)
        for (uint32_t t = 0; t < 10; t++) {
            uint64_t d = g + (uint64_t)t * G;
            uint32_t m = nq / 4 + (uint32_t)tt_rng_below(&r, nq - nq / 4 + 1);
            m = TT_MIN(m, c->lens[d]);
            float noise = 0.02f + 0.01f * (float)t;
            for (uint32_t j = 0; j < m; j++) {
                const float *src = gq + ((size_t)g * nq + tt_rng_below(&r, nq)) * dim;
                float *dst = c->x + (c->vec0[d] + j) * dim;
                for (uint32_t e = 0; e < dim; e++) {
                    double u1 = tt_rng_uniform(&r) + 1e-12, u2 = tt_rng_uniform(&r);
                    dst[e] = src[e] + noise * (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
                }
            }
            tt_normalize_rows(c->x + c->vec0[d] * dim, m, dim);
        }
    return gq;
}

static void free_corpus(corpus *c) {
    free(c->x);
    free(c->lens);
    free(c->vec0);
    memset(c, 0, sizeof *c);
}

/* Writes dir/vecs.npy, dir/lens.npy, dir/ids.txt ("doc<row>") and builds dir/<name>. */
static int build_from(const corpus *c, const char *dir, const char *name, int keep,
                      uint32_t ncent, int codec, char *out, size_t outlen) {
    char vp[4200], lp[4200], ip[4200];
    snprintf(vp, sizeof vp, "%s/%s.vecs.npy", dir, name);
    snprintf(lp, sizeof lp, "%s/%s.lens.npy", dir, name);
    snprintf(ip, sizeof ip, "%s/%s.ids.txt", dir, name);
    snprintf(out, outlen, "%s/%s", dir, name);
    int st;
    if ((st = tu_write_npy(vp, TT_DT_F32, c->dim, c->x, c->nvec)))
        return st;
    int64_t *l = malloc(c->ndocs * sizeof *l);
    for (uint64_t d = 0; d < c->ndocs; d++)
        l[d] = c->lens[d];
    st = tu_write_npy(lp, TT_DT_I64, 0, l, c->ndocs);
    free(l);
    if (st)
        return st;
    FILE *f = fopen(ip, "w");
    for (uint64_t d = 0; d < c->ndocs; d++)
        fprintf(f, "doc%llu\n", (unsigned long long)d);
    fclose(f);
    const char *vps[1] = {vp}, *lps[1] = {lp};
    tt_input *in;
    if ((st = tt_input_open(&in, 1, vps, lps, ip, NULL)))
        return st;
    tt_build_options o;
    tt_build_options_init(&o);
    o.threads = 2;
    o.keep_originals = keep;
    o.num_centroids = ncent;
    o.codec_tables = codec;
    o.debias = g_build_debias;
    st = tt_build(out, in, &o, NULL);
    tt_input_free(in);
    return st;
}

/* PLAID stage 1 of query Q (nq vectors, sum scores) with resolved options r over every
 * live document (no filter): returns the candidates (ctx->cand). */
static size_t run_stage1(const tt_index *idx, tt_search_ctx *ctx, const float *Q, uint32_t nq,
                         const tt_search_options *r) {
    ck_assert_int_eq(tt_ctx_set_query(ctx, Q, nq, TT_SCORE_SUM), TT_OK);
    ctx->filter = NULL;
    ctx->direct = false;
    ctx->allowed = idx->num_live;
    size_t n;
    ck_assert_int_eq(tt_plaid_stage1(ctx, r, &n), TT_OK);
    return n;
}

/* nq query vectors near document d's vectors (noise per dimension, normalised). */
static float *query_near(const corpus *c, uint64_t d, uint32_t nq, float noise, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    float *q = malloc((size_t)nq * c->dim * sizeof *q);
    for (uint32_t i = 0; i < nq; i++) {
        const float *src = c->x + (c->vec0[d] + i % c->lens[d]) * c->dim;
        for (uint32_t j = 0; j < c->dim; j++) {
            double u1 = tt_rng_uniform(&r) + 1e-12, u2 = tt_rng_uniform(&r);
            q[i * c->dim + j] = src[j] + noise * (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
        }
    }
    tt_normalize_rows(q, nq, c->dim);
    return q;
}

/* Field-wise (tt_hit has padding bytes). */
static bool hits_equal(const tt_hit *a, const tt_hit *b, uint32_t n) {
    for (uint32_t i = 0; i < n; i++)
        if (a[i].doc != b[i].doc || memcmp(&a[i].score, &b[i].score, sizeof a[i].score) != 0)
            return false;
    return true;
}

static tt_index *open_idx(const char *dir, int io, int direct) {
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = io;
    oo.direct = direct;
    tt_index *idx = NULL;
    int st = tt_index_open(&idx, dir, &oo);
    ck_assert_msg(st == TT_OK, "open %s: %s", dir, tt_last_error());
    return idx;
}

static void run(tt_index *idx, tt_search_ctx *ctx, const float *Q, uint32_t nq, uint32_t k,
                int mode, tt_hit *hits, uint32_t *n) {
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = mode;
    int st = tt_search(idx, ctx, Q, nq, k, &o, hits, n);
    ck_assert_msg(st == TT_OK, "search: %s", tt_last_error());
}

START_TEST(planted_ranks_first) {
    tt_index *idx = open_idx(g_idx, TT_IO_AUTO, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    tt_hit hits[10];
    uint32_t n;
    for (int t = 0; t < 20; t++) {
        uint64_t d = (uint64_t)t * 97 % g_c.ndocs;
        float *Q = query_near(&g_c, d, 32, 0.03f, 1000 + (uint64_t)t);
        for (int mode = TT_MODE_PLAID; mode <= TT_MODE_EXACT; mode++) {
            run(idx, ctx, Q, 32, 10, mode, hits, &n);
            ck_assert_uint_eq(n, 10);
            ck_assert_msg(hits[0].doc == d, "mode %d query %d: doc %llu first, planted %llu",
                          mode, t, (unsigned long long)hits[0].doc, (unsigned long long)d);
            for (uint32_t i = 1; i < n; i++)
                ck_assert(hits[i - 1].score > hits[i].score ||
                          (hits[i - 1].score == hits[i].score && hits[i - 1].doc < hits[i].doc));
        }
        free(Q);
    }
    size_t len;
    const char *id = tt_index_doc_id(idx, 97, &len);
    ck_assert_int_eq((int)len, 5);
    ck_assert_int_eq(memcmp(id, "doc97", 5), 0);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Default PLAID against exhaustive search, with stage 1 on this CPU's int8 kernel and on
 * the float32 sgemm (CPUs without a vector int8 kernel): every hit has its exhaustive
 * score (stage 4 is exact either way) and recall@10 reaches 0.95 on both paths. */
START_TEST(recall_vs_exhaustive) {
    tt_index *idx = open_idx(g_idx, TT_IO_AUTO, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const uint32_t k = 10, nqry = G_GROUPS;
    const int paths[2] = {idx->cq.kernel, TT_CQ_F32};
    uint64_t all = g_c.ndocs;
    tt_hit *ex = malloc(all * sizeof *ex), hits[2][10];
    float *score_of = malloc(all * sizeof *score_of);
    uint32_t n, ne, found[2] = {0, 0}, same = 0, shared = 0;
    for (uint32_t t = 0; t < nqry; t++) {
        const float *Q = g_gq + (size_t)t * 32 * g_c.dim;
        run(idx, ctx, Q, 32, (uint32_t)all, TT_MODE_EXHAUSTIVE, ex, &ne);
        ck_assert_uint_eq(ne, all);
        for (uint32_t i = 0; i < ne; i++)
            score_of[ex[i].doc] = ex[i].score;
        for (int p = 0; p < 2; p++) {
            ck_assert_int_eq(tt_index_use_cq_kernel(idx, paths[p]), TT_OK);
            run(idx, ctx, Q, 32, k, TT_MODE_PLAID, hits[p], &n);
            ck_assert_uint_eq(n, k);
            for (uint32_t i = 0; i < n; i++) {
                float e = score_of[hits[p][i].doc];
                ck_assert_msg(fabsf(hits[p][i].score - e) <= 1e-5f * (1 + fabsf(e)),
                              "kernel %d, doc %llu: plaid %.9g exhaustive %.9g", paths[p],
                              (unsigned long long)hits[p][i].doc, hits[p][i].score, e);
                for (uint32_t j = 0; j < k; j++)
                    found[p] += hits[p][i].doc == ex[j].doc;
            }
        }
        same += hits_equal(hits[0], hits[1], k);
        for (uint32_t i = 0; i < k; i++)
            for (uint32_t j = 0; j < k; j++)
                shared += hits[0][i].doc == hits[1][j].doc;
    }
    double recall = (double)found[0] / (nqry * k), recall32 = (double)found[1] / (nqry * k);
    fprintf(stderr,
            "synthetic recall@10 (default PLAID vs exhaustive): %.4f (float32 stage 1: %.4f; "
            "same top 10 on %u of %u queries, %.4f of the hits shared)\n",
            recall, recall32, same, nqry, (double)shared / (nqry * k));
    ck_assert_double_ge(recall, 0.95);
    ck_assert_double_ge(recall32, 0.95);
    tt_search_stats s;
    ck_assert_int_eq(tt_search_ctx_stats(ctx, &s), TT_OK);
    ck_assert_uint_eq(s.queries, 3 * nqry);
    ck_assert_uint_gt(s.candidates, 0);
    ck_assert_uint_gt(s.bytes_read, 0);
    free(ex);
    free(score_of);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* The default (relative) pruning does not depend on the scale of the scores: the same
 * queries scaled by 1/64 (exact in float32, and in the int8 centroid scores, whose
 * per-vector scale absorbs it) return the same documents with scores scaled by 1/64.
 * ColBERTv2's absolute threshold 0.5, the old default, prunes every centroid of the
 * scaled queries and changes their results: the check that this test would fail on
 * the old rule. */
START_TEST(pruning_scale_free) {
    tt_index *idx = open_idx(g_idx, TT_IO_AUTO, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const size_t qn = (size_t)32 * g_c.dim;
    float *Qs = malloc(qn * sizeof *Qs);
    tt_hit a[10], b[10];
    uint32_t na, nb, abs_differ = 0;
    for (uint32_t t = 0; t < G_GROUPS; t++) {
        const float *Q = g_gq + t * qn;
        for (size_t j = 0; j < qn; j++)
            Qs[j] = Q[j] / 64;
        for (int pruning = TT_PRUNE_AUTO; pruning <= TT_PRUNE_ABSOLUTE; pruning++) {
            tt_search_options o;
            tt_search_options_init(&o);
            o.pruning = pruning;
            ck_assert_int_eq(tt_search(idx, ctx, Q, 32, 10, &o, a, &na), TT_OK);
            ck_assert_int_eq(tt_search(idx, ctx, Qs, 32, 10, &o, b, &nb), TT_OK);
            ck_assert_uint_eq(na, nb);
            bool same = true;
            for (uint32_t i = 0; i < na; i++)
                same = same && a[i].doc == b[i].doc && a[i].score / 64 == b[i].score;
            if (pruning == TT_PRUNE_AUTO)
                ck_assert_msg(same, "query %u: relative pruning changed with the scale", t);
            else
                abs_differ += !same;
        }
    }
    ck_assert_uint_gt(abs_differ, 0);
    free(Qs);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Adaptive stage-4 depth: on noisy queries (centroid-only scores far from the
 * decompressed ones) it scores more than ColBERTv2's fixed max(ndocs/4, k) documents,
 * never more than ndocs, and finds at least as many of the exhaustive top 10; the
 * fixed depth (the old behaviour) scores exactly ndocs/4 per query. */
START_TEST(rerank_adaptive_depth) {
    tt_index *idx = open_idx(g_idx, TT_IO_AUTO, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    tt_hit ex[10], hits[10];
    uint32_t n, ne, found[2] = {0, 0};
    uint64_t scored[2] = {0, 0}, maxq[2] = {0, 0};
    const int nqry = 20;
    for (int t = 0; t < nqry; t++) {
        float *Q = query_near(&g_c, (uint64_t)t * 89 % g_c.ndocs, 32, 0.6f, 500 + (uint64_t)t);
        run(idx, ctx, Q, 32, 10, TT_MODE_EXHAUSTIVE, ex, &ne);
        for (int r = 0; r < 2; r++) {
            tt_search_options o;
            tt_search_options_init(&o);
            o.ndocs = 128;
            o.rerank = r ? TT_RERANK_FIXED : TT_RERANK_ADAPTIVE;
            tt_search_ctx_reset_stats(ctx);
            ck_assert_int_eq(tt_search(idx, ctx, Q, 32, 10, &o, hits, &n), TT_OK);
            tt_search_stats s;
            ck_assert_int_eq(tt_search_ctx_stats(ctx, &s), TT_OK);
            ck_assert_uint_le(s.scored_docs, 128);
            scored[r] += s.scored_docs;
            maxq[r] = TT_MAX(maxq[r], s.scored_docs);
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t j = 0; j < ne; j++)
                    found[r] += hits[i].doc == ex[j].doc;
        }
        free(Q);
    }
    fprintf(stderr, "noisy queries: adaptive depth %.1f docs/query, recall %.3f; fixed %.1f, "
            "%.3f\n", (double)scored[0] / nqry, found[0] / (10.0 * nqry),
            (double)scored[1] / nqry, found[1] / (10.0 * nqry));
    ck_assert_uint_eq(maxq[1], 32);
    ck_assert_uint_gt(maxq[0], 32);
    ck_assert_uint_ge(found[0], found[1]);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Scores equal the scalar reference computed from the index's own arrays. */
/* Exhaustive scores are the scalar reference's over the stored (position-ordered)
 * centroids and residuals with the query in position order; exact scores are MaxSim
 * over the input vectors with the query as given: together they check that an adaptive
 * codec's permutation is applied to the query and to everything stored. */
static void check_scores(const char *dir, const corpus *c, uint64_t near_doc) {
    tt_index *idx = open_idx(dir, TT_IO_MMAP, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    float *Q = query_near(c, near_doc, 32, 0.2f, 77);
    float *Qpos = malloc((size_t)32 * c->dim * sizeof *Qpos);
    for (uint32_t a = 0; a < 32; a++)
        tt_codec_to_positions(&idx->codec, Q + a * c->dim, Qpos + a * c->dim);
    tt_hit hits[20];
    uint32_t n;
    for (int mean = 0; mean < 2; mean++) {
        tt_search_options o;
        tt_search_options_init(&o);
        o.mode = TT_MODE_EXHAUSTIVE;
        o.score = mean ? TT_SCORE_MEAN : TT_SCORE_SUM;
        ck_assert_int_eq(tt_search(idx, ctx, Q, 32, 20, &o, hits, &n), TT_OK);
        ck_assert_uint_eq(n, 20);
        for (uint32_t i = 0; i < n; i++) {
            uint64_t d = hits[i].doc, v0 = idx->doc_vec0[d];
            uint32_t codes[256];
            for (uint32_t j = 0; j < idx->doclens[d]; j++)
                codes[j] = tt_index_code(idx, v0 + j);
            double ref = tt_maxsim_reference(Qpos, 32, idx->dim, idx->centroids, &idx->codec,
                                             codes, idx->seg[0].res_map + v0 * idx->res_bytes,
                                             idx->doclens[d]);
            if (mean)
                ref /= 32;
            ck_assert_double_eq_tol(hits[i].score, ref, 1e-4 * (1 + fabs(ref)));
        }
    }
    /* Exact mode: MaxSim over the originals (float16 of the normalised vectors). */
    ck_assert_int_eq(tt_search(idx, ctx, Q, 32, 20, NULL, hits, &n), TT_OK);
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = TT_MODE_EXACT;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 32, 5, &o, hits, &n), TT_OK);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t d = hits[i].doc;
        double ref = 0;
        for (uint32_t a = 0; a < 32; a++) {
            double best = -INFINITY;
            for (uint64_t v = c->vec0[d]; v < c->vec0[d + 1]; v++) {
                double s = 0;
                for (uint32_t j = 0; j < c->dim; j++)
                    s += (double)Q[a * c->dim + j] * c->x[v * c->dim + j];
                best = s > best ? s : best;
            }
            ref += best;
        }
        ck_assert_double_eq_tol(hits[i].score, ref, 2e-3 * (1 + fabs(ref)));
    }
    free(Q);
    free(Qpos);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}

START_TEST(scores_match_reference) {
    check_scores(g_idx, &g_c, 5);
}
END_TEST

START_TEST(adaptive_scores_match_reference) {
    tt_index *idx = open_idx(g_idx_ad, TT_IO_MMAP, 0);
    /* the outlier dimensions got 8 bits, at the first positions */
    ck_assert_uint_eq(idx->codec.kind, TT_CODEC_ADAPTIVE);
    ck_assert_ptr_nonnull(idx->codec.perm);
    for (uint32_t k = 0; k < 4; k++) {
        ck_assert_uint_eq(idx->codec.bits[k], 8);
        ck_assert_uint_eq(idx->codec.perm[k], 5 + 16 * k);
    }
    uint64_t sum = 0;
    for (uint32_t k = 0; k < idx->dim; k++)
        sum += idx->codec.bits[k];
    ck_assert_uint_eq(sum, 2ull * idx->dim);
    tt_index_close(idx);
    check_scores(g_idx_ad, &g_ca, 7);
}
END_TEST

/* MaxSim of query rows Qpos (nq x dim, position order) with document d of an index with
 * per-vector residual scales, from the definition: c + r^ with the positions from
 * vscale_k0 on times the vector's scale. */
static double vscale_reference(const tt_index *idx, const float *Qpos, uint32_t nq, uint64_t d) {
    const uint32_t dim = idx->dim;
    double total = 0;
    for (uint32_t a = 0; a < nq; a++) {
        double best = -INFINITY;
        for (uint64_t v = idx->doc_vec0[d]; v < idx->doc_vec0[d + 1]; v++) {
            const uint8_t *p = idx->seg[0].res_map + v * idx->res_bytes;
            const float *c = idx->centroids + (uint64_t)tt_index_code(idx, v) * dim;
            const double sv = tt_f16_to_f32(idx->vscale[v]);
            double x = 0;
            for (uint32_t k = 0; k < dim; k++) {
                const double r = tt_codec_value(&idx->codec, p, k) * (k >= idx->vscale_k0 ? sv : 1);
                x += (double)Qpos[(size_t)a * dim + k] * (c[k] + r);
            }
            best = x > best ? x : best;
        }
        total += best;
    }
    return total;
}

/* Per-vector residual scales (debias 2): every scale is finite and >= 0, most are
 * positive (that they are the encoder's: test_build); exhaustive search and PLAID (stage 4 split or not, through the lookup tables or
 * not) return scores equal to the definition's, for 4- and 32-vector queries. */
START_TEST(vscale_scores_match_reference) {
    tt_index *idx = open_idx(g_idx_vs, TT_IO_MMAP, 0);
    ck_assert_ptr_nonnull(idx->vscale);
    ck_assert_uint_eq(idx->vscale_k0, 4);
    uint32_t positive = 0;
    for (uint64_t v = 0; v < idx->num_vectors; v++) {
        const float x = tt_f16_to_f32(idx->vscale[v]);
        ck_assert(x >= 0 && x < 100);
        positive += x > 0;
    }
    ck_assert_uint_gt(positive, idx->num_vectors / 2);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const uint32_t dim = idx->dim;
    for (int t = 0; t < 10; t++) {
        const uint32_t nq = t % 2 ? 32 : 4;
        float *Q = query_near(&g_ca, (uint64_t)t * 11 % g_ca.ndocs, nq, 0.3f, 300 + t);
        float *Qpos = malloc((size_t)nq * dim * sizeof *Qpos);
        for (uint32_t a = 0; a < nq; a++)
            tt_codec_to_positions(&idx->codec, Q + a * dim, Qpos + a * dim);
        tt_search_options o;
        tt_search_options_init(&o);
        if (t < 2)
            o.mode = TT_MODE_EXHAUSTIVE;
        tt_search_ctx_use_split(ctx, t / 2 % 2 ? TT_SPLIT_ON : TT_SPLIT_OFF);
        tt_search_ctx_use_lut(ctx, t / 4 % 2 == 0);
        tt_hit hits[10];
        uint32_t n;
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, 10, &o, hits, &n), TT_OK);
        ck_assert_uint_eq(n, 10);
        for (uint32_t h = 0; h < n; h++) {
            const double ref = vscale_reference(idx, Qpos, nq, hits[h].doc);
            ck_assert_msg(fabs(hits[h].score - ref) <= 1e-4 * (1 + fabs(ref)),
                          "t %d, nq %u, rank %u: %.7g vs %.7g", t, nq, h, hits[h].score, ref);
        }
        free(Q);
        free(Qpos);
    }
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* The residual sketch in PLAID's centroid stages (doc/search.md, "Residual sketch"):
 * every document a candidate (nprobe = K), the stage-3 score of each equals
 * sum_i max_j (St[code_j, i] + sum over the 8-bit positions p of q_i[p] * value(p)),
 * the values decoded from the residual file itself (not from sketch.tt), and without
 * the sketch sum_i max_j St[code_j, i]. A table built for the wrong positions or
 * bytes, or a sketch.tt that is not the residuals' prefix, fails it. */
START_TEST(sketch_stage_scores_match_definition) {
    tt_index *idx = open_idx(g_idx_ad, TT_IO_MMAP, 0);
    ck_assert_uint_eq(idx->sketch_bytes, 4);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const uint32_t nq = 4, dim = idx->dim;
    float *Q = query_near(&g_ca, 7, nq, 0.3f, 91);
    float *Qpos = malloc((size_t)nq * dim * sizeof *Qpos);
    for (uint32_t a = 0; a < nq; a++)
        tt_codec_to_positions(&idx->codec, Q + a * dim, Qpos + a * dim);
    for (int sketch = 0; sketch < 2; sketch++) {
        tt_search_options o, r;
        tt_search_options_init(&o);
        o.nprobe = (int)idx->num_centroids;
        o.sketch = sketch;
        tt_search_options_resolve(&o, 10, &r);
        const size_t n = run_stage1(idx, ctx, Q, nq, &r);
        ck_assert_uint_eq(n, idx->num_live); /* every document a candidate */
        ck_assert_int_eq(ctx->use_sketch, sketch);
        ck_assert_int_eq(tt_topk_reset(&ctx->top, (uint32_t)n), TT_OK);
        tt_plaid_interaction(ctx, ctx->cand, n, NULL);
        uint32_t got = tt_topk_finish(&ctx->top);
        ck_assert_uint_eq(got, n);
        const uint32_t nqp = ctx->nqp;
        for (uint32_t h = 0; h < got; h++) {
            uint64_t d = ctx->top.h[h].doc, v0 = idx->doc_vec0[d];
            double ref = 0;
            for (uint32_t i = 0; i < nq; i++) {
                double best = -INFINITY;
                for (uint32_t j = 0; j < idx->doclens[d]; j++) {
                    const uint8_t *packed = idx->seg[0].res_map + (v0 + j) * idx->res_bytes;
                    double s = ctx->St[(uint64_t)tt_index_code(idx, v0 + j) * nqp + i];
                    for (uint32_t p = 0; sketch && p < 4; p++)
                        s += (double)Qpos[i * dim + p] * tt_codec_value(&idx->codec, packed, p);
                    best = s > best ? s : best;
                }
                ref += best;
            }
            ck_assert_double_eq_tol(ctx->top.h[h].score, ref, 1e-4 * (1 + fabs(ref)));
        }
    }
    free(Q);
    free(Qpos);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* The residual paths give identical results: io_uring, io_uring + O_DIRECT, mmap. */
START_TEST(io_paths_identical) {
    tt_index *a = open_idx(g_idx, TT_IO_URING, 0), *b = open_idx(g_idx, TT_IO_MMAP, 0);
    tt_index *c = open_idx(g_idx, TT_IO_URING, 1);
    tt_index_info ia, ib;
    tt_index_get_info(a, &ia);
    tt_index_get_info(b, &ib);
    ck_assert_int_eq(ib.io, TT_IO_MMAP);
    if (ia.io != TT_IO_URING)
        fprintf(stderr, "io_uring unavailable here: comparing mmap with its fallback\n");
    tt_search_ctx *ca, *cb, *cc;
    ck_assert_int_eq(tt_search_ctx_new(a, &ca), TT_OK);
    ck_assert_int_eq(tt_search_ctx_new(b, &cb), TT_OK);
    ck_assert_int_eq(tt_search_ctx_new(c, &cc), TT_OK);
    tt_hit ha[100], hb[100], hc[100];
    uint32_t na, nb, nc;
    for (int t = 0; t < 10; t++) {
        float *Q = query_near(&g_c, (uint64_t)t * 11, 32, 0.2f, 300 + (uint64_t)t);
        for (int mode = TT_MODE_PLAID; mode <= TT_MODE_EXHAUSTIVE; mode++) {
            uint32_t k = t % 2 ? 100 : 10;
            run(a, ca, Q, 32, k, mode, ha, &na);
            run(b, cb, Q, 32, k, mode, hb, &nb);
            run(c, cc, Q, 32, k, mode, hc, &nc);
            ck_assert_uint_eq(na, nb);
            ck_assert_uint_eq(na, nc);
            ck_assert(hits_equal(ha, hb, na));
            ck_assert(hits_equal(ha, hc, na));
        }
        free(Q);
    }
    tt_search_stats sa, sb;
    tt_search_ctx_stats(ca, &sa);
    tt_search_ctx_stats(cb, &sb);
    ck_assert_int_eq(sb.io, TT_IO_MMAP);
    ck_assert_uint_eq(sb.reads, 0);
    if (sa.io == TT_IO_URING) {
        ck_assert_uint_gt(sa.reads, 0);
        ck_assert_uint_eq(sa.bytes_read, sb.bytes_read); /* the same ranges, read once */
    }
    tt_search_ctx_reset_stats(ca);
    tt_search_ctx_stats(ca, &sa);
    ck_assert_uint_eq(sa.queries, 0);
    ck_assert_uint_eq(sa.bytes_read, 0);
    tt_search_ctx_free(ca);
    tt_search_ctx_free(cb);
    tt_search_ctx_free(cc);
    tt_index_close(a);
    tt_index_close(b);
    tt_index_close(c);
}
END_TEST

/* A batch over two threads returns exactly the serial results. */
START_TEST(batch_equals_serial) {
    tt_index *idx = open_idx(g_idx, TT_IO_AUTO, 0);
    const uint64_t nqry = 24;
    const uint32_t k = 10, dim = g_c.dim;
    float *Q = malloc(nqry * 32 * dim * sizeof *Q);
    uint64_t offs[24];
    uint32_t lens[24];
    uint64_t row = 0;
    for (uint64_t t = 0; t < nqry; t++) {
        lens[t] = 8 + (uint32_t)(t % 25);
        float *q = query_near(&g_c, t * 29 % g_c.ndocs, lens[t], 0.2f, 900 + t);
        memcpy(Q + row * dim, q, (size_t)lens[t] * dim * sizeof *Q);
        free(q);
        offs[t] = row;
        row += lens[t];
    }
    tt_hit *hb = malloc(nqry * k * sizeof *hb), *hs = calloc(nqry * k, sizeof *hs);
    uint32_t nb[24], ns[24];
    double secs[24];
    for (int mode = TT_MODE_PLAID; mode <= TT_MODE_EXACT; mode++) {
        tt_search_options o;
        tt_search_options_init(&o);
        o.mode = mode;
        memset(hb, 0, nqry * k * sizeof *hb);
        ck_assert_int_eq(tt_search_batch(idx, Q, offs, lens, nqry, k, &o, 2, hb, nb, secs),
                         TT_OK);
        tt_search_ctx *ctx;
        ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
        for (uint64_t t = 0; t < nqry; t++) {
            ck_assert_int_eq(tt_search(idx, ctx, Q + offs[t] * dim, lens[t], k, &o, hs + t * k,
                                       &ns[t]), TT_OK);
            ck_assert_uint_eq(nb[t], ns[t]);
            ck_assert(hits_equal(hb + t * k, hs + t * k, ns[t]));
            ck_assert(secs[t] > 0);
        }
        tt_search_ctx_free(ctx);
    }
    /* A bad query in a batch: the error names it. */
    Q[offs[7] * dim + 3] = NAN;
    ck_assert_int_eq(tt_search_batch(idx, Q, offs, lens, nqry, k, NULL, 2, hb, nb, NULL),
                     TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "query 7"));
    free(Q);
    free(hb);
    free(hs);
    tt_index_close(idx);
}
END_TEST

/* Exhaustive and exact search of a batch without per-query times is one pass over the
 * index for every query (scan_batch.c): bit for bit what the queries return one by one,
 * for query lengths that pad and do not, sum and mean scores, k beyond the documents,
 * with and without a filter, on 1-3 threads, on the 128-d per-dimension index, the
 * adaptive 64-d one and two 512-d ones (_i 2-3: adaptive with scales, per-dimension),
 * where queries of 4 and 8 padded rows score centroids and residuals apart on AVX-512 or
 * AVX2 (the batch from rows decoded once, one by one from the packed bytes), in batches
 * that mix them with longer queries; it stops when cancelled, and exact mode needs the
 * originals. */
START_TEST(exhaustive_batch_equals_serial) {
    const corpus *c = _i == 0 ? &g_c : _i == 1 ? &g_ca : &g_ch;
    tt_index *idx = open_idx((const char *[]){g_idx, g_idx_ad, g_idx_hv, g_idx_hp}[_i],
                             TT_IO_AUTO, 0);
    const uint64_t nqry = 9;
    const uint32_t dim = c->dim, kbig = (uint32_t)idx->num_docs + 5;
    ck_assert((idx->vscale != NULL) == (_i == 2)); /* the scaled products covered too */
    float *Q = malloc(nqry * 40 * dim * sizeof *Q);
    uint64_t offs[9], row = 0;
    uint32_t lens[9];
    for (uint64_t t = 0; t < nqry; t++) {
        lens[t] = (uint32_t[]){1, 4, 7, 32, 40, 3, 16, 9, 2}[t];
        float *q = query_near(c, t * 31 % c->ndocs, lens[t], 0.3f, 700 + t);
        memcpy(Q + row * dim, q, (size_t)lens[t] * dim * sizeof *Q);
        free(q);
        offs[t] = row;
        row += lens[t];
    }
    tt_hit *hb = malloc(nqry * kbig * sizeof *hb), *hs = malloc(kbig * sizeof *hs);
    uint32_t nb[9], ns;
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    for (int v = 0; v < 12; v++) {
        if (_i >= 2 && v != 0 && v != 3 && v != 4 && v != 7)
            continue; /* 512-d: one of each k, thread count, mode and score (time) */
        const uint32_t k = v % 2 ? kbig : 10;
        const int threads = 1 + v % 6 / 2;
        tt_search_options o;
        tt_search_options_init(&o);
        o.mode = v < 6 ? TT_MODE_EXHAUSTIVE : TT_MODE_EXACT;
        o.score = v % 6 == 1 || v % 6 == 4 ? TT_SCORE_MEAN : TT_SCORE_SUM;
        ck_assert_msg(tt_search_batch(idx, Q, offs, lens, nqry, k, &o, threads, hb, nb, NULL) ==
                          TT_OK, "%s", tt_last_error());
        for (uint64_t t = 0; t < nqry; t++) {
            ck_assert_int_eq(tt_search(idx, ctx, Q + offs[t] * dim, lens[t], k, &o, hs, &ns),
                             TT_OK);
            ck_assert_uint_eq(nb[t], ns);
            ck_assert_uint_eq(ns, TT_MIN(k, (uint32_t)idx->num_live));
            ck_assert_msg(hits_equal(hb + t * k, hs, ns), "variant %d query %llu", v,
                          (unsigned long long)t);
        }
    }
    /* With a filter (one for every query): only the allowed documents, in the same
     * groups as query by query (a dense and a sparse filter; both modes). */
    for (int f = 0; f < 2; f++) {
        tt_filter *flt;
        ck_assert_int_eq(tt_filter_new(&flt, idx->num_docs), TT_OK);
        uint64_t allowed = 0;
        for (uint64_t d = 0; d < idx->num_docs; d++)
            if (f == 0 ? d * 7 % 3 != 0 : d % 10 == 3) {
                ck_assert_int_eq(tt_filter_add(flt, d), TT_OK);
                allowed++;
            }
        for (int v = 0; v < (_i >= 2 ? 2 : 4); v++) {
            const uint32_t k = v % 2 ? kbig : 10;
            tt_search_options o;
            tt_search_options_init(&o);
            o.mode = v < 2 ? TT_MODE_EXHAUSTIVE : TT_MODE_EXACT;
            o.filter = flt;
            ck_assert_msg(tt_search_batch(idx, Q, offs, lens, nqry, k, &o, 2, hb, nb, NULL) ==
                              TT_OK, "%s", tt_last_error());
            for (uint64_t t = 0; t < nqry; t++) {
                ck_assert_int_eq(tt_search(idx, ctx, Q + offs[t] * dim, lens[t], k, &o, hs, &ns),
                                 TT_OK);
                ck_assert_uint_eq(nb[t], ns);
                ck_assert_uint_eq(ns, TT_MIN((uint64_t)k, allowed));
                for (uint32_t i = 0; i < ns; i++)
                    ck_assert(tt_filter_has(flt, hs[i].doc));
                ck_assert_msg(hits_equal(hb + t * k, hs, ns), "filter %d variant %d query %llu",
                              f, v, (unsigned long long)t);
            }
        }
        tt_filter_free(flt);
    }
    {   /* a filter over other rows */
        tt_filter *flt;
        ck_assert_int_eq(tt_filter_new(&flt, idx->num_docs + 1), TT_OK);
        tt_search_options o;
        tt_search_options_init(&o);
        o.mode = TT_MODE_EXHAUSTIVE;
        o.filter = flt;
        ck_assert_int_eq(tt_search_batch(idx, Q, offs, lens, nqry, 10, &o, 2, hb, nb, NULL),
                         TT_EINVAL);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "rows"));
        tt_filter_free(flt);
    }
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = TT_MODE_EXHAUSTIVE;
    if (_i == 0) {
        /* More queries than one pass holds (tops of 2 threads x 2,000 hits each: 64 MiB
         * is about 1,000 of them): two passes, the same results. */
        const uint64_t nmany = 1100;
        uint64_t *mo = malloc(nmany * sizeof *mo);
        uint32_t *ml = malloc(nmany * sizeof *ml), *mn = malloc(nmany * sizeof *mn);
        tt_hit *mh = malloc(nmany * kbig * sizeof *mh);
        for (uint64_t t = 0; t < nmany; t++) {
            mo[t] = t % row;
            ml[t] = 1;
        }
        ck_assert_msg(tt_search_batch(idx, Q, mo, ml, nmany, kbig, &o, 2, mh, mn, NULL) ==
                          TT_OK, "%s", tt_last_error());
        for (uint64_t t = 0; t < nmany; t += 7) {
            ck_assert_int_eq(tt_search(idx, ctx, Q + mo[t] * dim, 1, kbig, &o, hs, &ns), TT_OK);
            ck_assert_uint_eq(mn[t], ns);
            ck_assert_msg(hits_equal(mh + t * kbig, hs, ns), "many: query %llu",
                          (unsigned long long)t);
        }
        free(mo);
        free(ml);
        free(mn);
        free(mh);
    }
    Q[(offs[5] + 1) * dim + 2] = NAN;
    ck_assert_int_eq(tt_search_batch(idx, Q, offs, lens, nqry, 10, &o, 2, hb, nb, NULL),
                     TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "query 5"));
    Q[(offs[5] + 1) * dim + 2] = 0;
    if (_i == 0) { /* (the queries are 128-d, as that index's) */
        tt_index *plain = open_idx(g_idx_plain, TT_IO_MMAP, 0);
        o.mode = TT_MODE_EXACT;
        ck_assert_int_eq(tt_search_batch(plain, Q, offs, lens, nqry, 10, &o, 2, hb, nb, NULL),
                         TT_EUNSUPPORTED);
        tt_index_close(plain);
    }
    if (_i >= 2 && tt_scan_splits(idx, &ctx->dec, 4)) {
        /* The split scan scores a document as stage 4's split with the fused kernel does
         * (every document a candidate, no lookup pass): the same floats. */
        for (uint64_t t = 0; t < nqry; t++) {
            if (tt_qpad(lens[t]) > 8)
                continue;
            o.mode = TT_MODE_EXHAUSTIVE;
            ck_assert_int_eq(tt_search(idx, ctx, Q + offs[t] * dim, lens[t], kbig, &o, hb, &nb[0]),
                             TT_OK);
            tt_search_options po;
            tt_search_options_init(&po);
            po.nprobe = (uint32_t)idx->num_centroids;
            po.ndocs = 4 * kbig;
            po.rerank = TT_RERANK_FIXED;
            tt_search_ctx_use_split(ctx, TT_SPLIT_ON);
            tt_search_ctx_use_lut(ctx, false);
            ck_assert_int_eq(tt_search(idx, ctx, Q + offs[t] * dim, lens[t], 10, &po, hs, &ns),
                             TT_OK);
            tt_search_ctx_use_split(ctx, TT_SPLIT_AUTO);
            tt_search_ctx_use_lut(ctx, true);
            ck_assert_uint_eq(ns, 10);
            for (uint32_t i = 0; i < ns; i++) {
                uint32_t e = 0;
                while (e < nb[0] && hb[e].doc != hs[i].doc)
                    e++;
                ck_assert(e < nb[0]);
                ck_assert_msg(memcmp(&hb[e].score, &hs[i].score, sizeof hs[i].score) == 0,
                              "query %llu doc %llu: exhaustive %.9g, stage 4 %.9g",
                              (unsigned long long)t, (unsigned long long)hs[i].doc,
                              hb[e].score, hs[i].score);
            }
        }
    }
    if (_i >= 2 && ctx->dec.avx2) {
        /* As on a CPU without AVX-512: the AVX2 kernels split too, and the batch (from
         * the rows and their copy by lanes) gives what the queries give one by one. */
        idx->no_avx512 = 1;
        tt_search_ctx *c2;
        ck_assert_int_eq(tt_search_ctx_new(idx, &c2), TT_OK);
        ck_assert(!c2->dec.avx512 && tt_scan_splits(idx, &c2->dec, 4) &&
                  tt_resdec_rows_lanes(&c2->dec));
        o.mode = TT_MODE_EXHAUSTIVE;
        ck_assert_msg(tt_search_batch(idx, Q, offs, lens, nqry, 10, &o, 2, hb, nb, NULL) ==
                          TT_OK, "%s", tt_last_error());
        for (uint64_t t = 0; t < nqry; t++) {
            ck_assert_int_eq(tt_search(idx, c2, Q + offs[t] * dim, lens[t], 10, &o, hs, &ns),
                             TT_OK);
            ck_assert_uint_eq(nb[t], ns);
            ck_assert_msg(hits_equal(hb + t * 10, hs, ns), "AVX2: query %llu",
                          (unsigned long long)t);
        }
        tt_search_ctx_free(c2);
        idx->no_avx512 = 0;
    }
    volatile int cancel = 1;
    ck_assert_int_eq(tt_scan_batch(idx, NULL, Q, offs, lens, nqry, 10, TT_MODE_EXHAUSTIVE,
                                   TT_SCORE_SUM, 2, &cancel, hb,
                                   nb),
                     TT_ECANCELED);
    tt_search_ctx_free(ctx);
    free(Q);
    free(hb);
    free(hs);
    tt_index_close(idx);
}
END_TEST

/* A float16 original damaged into a NaN (the originals are not checksummed at open):
 * exact search names the file and the document, one by one and in one pass. */
START_TEST(damaged_originals) {
    char *dir = tu_tmpdir(), idxdir[4200], path[4300];
    corpus head = g_c;
    head.ndocs = 300;
    head.nvec = g_c.vec0[300];
    ck_assert_int_eq(build_from(&head, dir, "orig", TT_KEEP_F16, 64, TT_CODEC_PER_DIM, idxdir,
                                sizeof idxdir),
                     TT_OK);
    snprintf(path, sizeof path, "%s/" TT_F_ORIGINALS, idxdir);
    const uint8_t nan16[2] = {0x00, 0x7e};
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    off_t at = TT_HEADER_SIZE + 2 * (off_t)((g_c.vec0[5] + 1) * g_c.dim + 3);
    ck_assert_int_eq(pwrite(fd, nan16, 2, at), 2);
    close(fd);
    tt_index *idx = open_idx(idxdir, TT_IO_MMAP, 0);
    float *Q = query_near(&g_c, 7, 8, 0.2f, 77);
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = TT_MODE_EXACT;
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    tt_hit hits[3 * 10];
    uint32_t n[3];
    ck_assert_int_eq(tt_search(idx, ctx, Q, 8, 10, &o, hits, n), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_ORIGINALS));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "document 5"));
    const uint64_t offs[3] = {0, 2, 5};
    const uint32_t lens[3] = {2, 3, 3};
    ck_assert_int_eq(tt_search_batch(idx, Q, offs, lens, 3, 10, &o, 2, hits, n, NULL),
                     TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_ORIGINALS));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "document 5"));
    tt_search_ctx_free(ctx);
    free(Q);
    tt_index_close(idx);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The AVX-512 row loops of the centroid stages return exactly what the SSE2 loops do,
 * for the nprobe == 1 scan and the general one, sum and mean scores. */
START_TEST(avx512_loops_agree) {
    tt_index *idx = open_idx(g_idx, TT_IO_MMAP, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const uint32_t qlens[] = {32, 4, 7, 40, 64, 80};
    tt_hit h1[100], h2[100];
    uint32_t n1, n2;
    for (int t = 0; t < 12; t++) {
        uint32_t nq = qlens[t % 6], k = t % 2 ? 100 : 10;
        float *Q = query_near(&g_c, (uint64_t)t * 37 % g_c.ndocs, nq, 0.3f, 500 + t);
        tt_search_options o;
        tt_search_options_init(&o);
        o.score = t % 3 == 2 ? TT_SCORE_MEAN : TT_SCORE_SUM;
        tt_search_ctx_use_avx512(ctx, 1);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h1, &n1), TT_OK);
        tt_search_ctx_use_avx512(ctx, 0);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h2, &n2), TT_OK);
        ck_assert_uint_eq(n1, n2);
        ck_assert(hits_equal(h1, h2, n1));
        free(Q);
    }
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Stage 1 with nprobe 1 and the relative rule: each query vector's best centroid and
 * the pruning mask (keep[k] = St[k, i] >= top_i - (1 - ratio) |top_i| for some i < nq),
 * whether stage 1's kernel kept them as it scored (the VNNI kernel; the mask at ratio 0)
 * or passes over St made them (the AVX-512 or SSE2 scan, the relative rule's pass),
 * equal a reference computed here from St, for query lengths that fill one to four
 * registers of a row (and partial ones) and ratios that keep every centroid, many or
 * few. */
START_TEST(relative_mask_agrees) {
    tt_index *idx = open_idx(g_idx, TT_IO_MMAP, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const uint32_t K = idx->num_centroids, qlens[] = {32, 4, 7, 17, 40, 64};
    const float ratios[] = {0, 0.5f, 0.9f};
    for (int t = 0; t < 3 * 36; t++) {
        /* stage 1's kernels: VNNI keeps the probes (and at ratio 0 the mask) as it
         * scores, AVX2 and SSE2 leave them to the passes */
        const int kern = t / 36 == 0 ? TT_CQ_VNNI : t / 36 == 1 ? TT_CQ_AVX2 : TT_CQ_SSE2;
        if (!tt_cq_kernel_ok(kern))
            continue;
        if (t % 36 == 0)
            ck_assert_int_eq(tt_index_use_cq_kernel(idx, kern), TT_OK);
        const uint32_t nq = qlens[t % 6];
        const float ratio = ratios[t / 6 % 3];
        float *Q = query_near(&g_c, (uint64_t)t * 29 % g_c.ndocs, nq, 0.3f, 900 + t);
        tt_search_options o, r;
        tt_search_options_init(&o);
        o.nprobe = 1;
        o.pruning = TT_PRUNE_RELATIVE;
        o.prune_ratio = ratio;
        o.ndocs = 10; /* nprobe 1 finds that many: stage 1 does not double it */
        tt_search_options_resolve(&o, 10, &r);
        tt_search_ctx_use_avx512(ctx, t % 36 < 18);
        run_stage1(idx, ctx, Q, nq, &r);
        const uint32_t nqp = ctx->nqp;
        float th[64];
        for (uint32_t i = 0; i < nq; i++) {
            uint32_t at = 0;
            for (uint32_t k = 1; k < K; k++)
                if (ctx->St[(size_t)k * nqp + i] > ctx->St[(size_t)at * nqp + i])
                    at = k;
            ck_assert_msg(ctx->probe[i] == at, "kernel %d, nq %u, ratio %g, avx512 %d: query "
                          "vector %u: centroid %u, not %u", kern, nq, (double)ratio, t % 36 < 18,
                          i, ctx->probe[i], at);
            ck_assert(ctx->probe_s[i] == ctx->St[(size_t)at * nqp + i]);
            th[i] = ctx->probe_s[i] - (1 - ratio) * fabsf(ctx->probe_s[i]);
        }
        uint32_t kept = 0;
        for (uint32_t k = 0; k < K; k++) {
            bool want = false;
            for (uint32_t i = 0; i < nq; i++)
                want |= ctx->St[(size_t)k * nqp + i] >= th[i];
            ck_assert_msg(ctx->keep[k] == want, "kernel %d, nq %u, ratio %g, avx512 %d: "
                          "centroid %u: %d", kern, nq, (double)ratio, t % 36 < 18, k,
                          ctx->keep[k]);
            kept += want;
        }
        if (ratio > 0.8f) /* the mask decides something */
            ck_assert(kept > 0 && kept < K);
        free(Q);
    }
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Stage 4 with the centroids scored apart (tt_search_ctx_use_split: on, with the
 * fused kernel for 4 and 8 query rows where the CPU has AVX-512 and with decoded rows
 * otherwise) returns the hits of the unsplit stage 4 with their scores to float rounding,
 * on the 128-d index and the adaptive 64-d one, for query lengths in and out of the
 * fused kernel's sizes, sum and mean, deep and shallow. */
START_TEST(split_stage4_agrees) {
    const corpus *c = _i ? &g_ca : &g_c;
    tt_index *idx = open_idx(_i ? g_idx_ad : g_idx, TT_IO_MMAP, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const uint32_t qlens[] = {4, 8, 3, 7, 1, 32};
    tt_hit h1[100], h2[100];
    uint32_t n1, n2;
    for (int t = 0; t < 24; t++) {
        const uint32_t nq = qlens[t % 6], k = t % 2 ? 100 : 10;
        float *Q = query_near(c, (uint64_t)t * 41 % c->ndocs, nq, 0.3f, 800 + t);
        tt_search_options o;
        tt_search_options_init(&o);
        o.score = t % 3 == 2 ? TT_SCORE_MEAN : TT_SCORE_SUM;
        o.ndocs = t % 4 < 2 ? 0 : 1024;
        /* the fused kernel on AVX-512, then on AVX2, then the unfused split */
        ctx->dec.avx512 = t < 8 ? ctx->dec.avx512 : 0;
        ctx->dec.avx2 = t < 16 ? ctx->dec.avx2 : 0;
        tt_search_ctx_use_lut(ctx, false); /* lut_stage4_agrees compares them */
        tt_search_ctx_use_split(ctx, TT_SPLIT_OFF);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h1, &n1), TT_OK);
        tt_search_ctx_use_split(ctx, TT_SPLIT_ON);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h2, &n2), TT_OK);
        ck_assert_uint_eq(n1, n2);
        /* the same documents; ties within rounding may swap places */
        for (uint32_t i = 0; i < n1; i++) {
            uint32_t j = 0;
            while (j < n2 && h2[j].doc != h1[i].doc)
                j++;
            if (j == n2) { /* only a document tied with the k-th may be another */
                ck_assert_float_eq_tol(h1[i].score, h2[n2 - 1].score,
                                       1e-5f * (1 + fabsf(h1[i].score)));
                continue;
            }
            ck_assert_msg(fabsf(h1[i].score - h2[j].score) <= 1e-5f * (1 + fabsf(h1[i].score)),
                          "query %d doc %llu: unsplit %.9g split %.9g", t,
                          (unsigned long long)h1[i].doc, h1[i].score, h2[j].score);
        }
        free(Q);
    }
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Stage 4 through the residual lookup tables, with the split's fused kernel (_i < 2;
 * _i >= 4: the lookup pass's <q, C[c]> from the index's int8 rows) and without the
 * split (<q, C[c]> from stage 1's int8 scores): the same hits with
 * the same floats as without them (the documents returned are scored exactly), while
 * only some of the documents are scored exactly; query lengths 4 and 7 (and 16 and 32
 * without the split), k 10 and 100, sum and mean; on both test indexes (per-dimension
 * and adaptive codecs). With a fixed stage-4 depth: the adaptive depth estimates the centroid
 * stages' error from stage 4's scores, approximate for the documents not scored again,
 * so its cut may move by a document at the margin. */
START_TEST(lut_stage4_agrees) {
    const int ad = _i % 2, plain = _i / 2 == 1, rows = _i / 2 == 2;
    const corpus *c = ad ? &g_ca : &g_c;
    tt_index *idx = open_idx(ad ? g_idx_ad : g_idx, TT_IO_MMAP, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    if (!tt_resdec_dot_ok(&ctx->dec, 4) || !ctx->lut.npos) { /* no AVX2: nothing to compare */
        tt_search_ctx_free(ctx);
        tt_index_close(idx);
        return;
    }
    tt_search_ctx_use_split(ctx, plain ? TT_SPLIT_OFF : TT_SPLIT_ON);
    /* the split's lookup pass from the int8 rows (which open makes at 512-d and more) */
    if (rows)
        ck_assert_int_eq(tt_index_make_crows(idx), TT_OK);
    tt_search_ctx_use_crows(ctx, rows);
    tt_hit h1[100], h2[100];
    uint32_t n1, n2;
    uint64_t scored = 0, rescored = 0;
    const uint32_t qlens[] = {4, 4, 7, 7, 16, 16, 32, 32};
    for (int t = 0; t < 16; t++) {
        const uint32_t nq = qlens[t % (plain ? 8 : 4)], k = t % 2 ? 100 : 10;
        float *Q = query_near(c, (uint64_t)t * 53 % c->ndocs, nq, 0.3f, 900 + t);
        tt_search_options o;
        tt_search_options_init(&o);
        o.score = t % 3 == 2 ? TT_SCORE_MEAN : TT_SCORE_SUM;
        o.ndocs = t % 8 < 4 ? 0 : 1024;
        o.rerank = TT_RERANK_FIXED;
        tt_search_ctx_use_lut(ctx, false);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h1, &n1), TT_OK);
        tt_search_stats s0, s1;
        tt_search_ctx_stats(ctx, &s0);
        ck_assert(tt_search_ctx_use_lut(ctx, true) == false);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h2, &n2), TT_OK);
        tt_search_ctx_stats(ctx, &s1);
        scored += s1.scored_docs - s0.scored_docs;
        rescored += s1.rescored_docs - s0.rescored_docs;
        ck_assert_uint_eq(n1, n2);
        /* unsplit, a document scored alone takes another sgemm shape than in a group:
         * the same scores up to float rounding, and near-ties may swap */
        const float tol = plain ? 1e-5f : 0.0f;
        for (uint32_t i = 0; i < n1; i++)
            ck_assert_msg((h1[i].doc == h2[i].doc || plain) &&
                              fabsf(h1[i].score - h2[i].score) <= tol * (1 + fabsf(h1[i].score)),
                          "query %d hit %u: without tables %llu %.9g, with %llu %.9g", t, i,
                          (unsigned long long)h1[i].doc, h1[i].score,
                          (unsigned long long)h2[i].doc, h2[i].score);
        free(Q);
    }
    ck_assert_uint_gt(rescored, 0);
    ck_assert_uint_lt(rescored, scored);
    ck_assert(rows ? ctx->cfa_nqp > 0 : ctx->cfa_nqp == 0); /* the rows were (not) used */
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* The centroid stages' scores of every document (nprobe = K, every live document a
 * candidate, no pruning mask) with the AVX-512 row loop on or off, sorted into out
 * (n of them, c->top's order). */
static uint32_t stage_scores(tt_index *idx, tt_search_ctx *ctx, const float *Q, uint32_t nq,
                             int avx512, int sketch, const uint8_t *keep, tt_hit *out) {
    tt_search_options o, r;
    tt_search_options_init(&o);
    o.nprobe = (int)idx->num_centroids;
    o.sketch = sketch;
    tt_search_options_resolve(&o, 10, &r);
    tt_search_ctx_use_avx512(ctx, avx512);
    const size_t n = run_stage1(idx, ctx, Q, nq, &r);
    ck_assert_int_eq(ctx->use_sketch, sketch);
    ck_assert_int_eq(tt_topk_reset(&ctx->top, (uint32_t)n), TT_OK);
    tt_plaid_interaction(ctx, ctx->cand, n, keep);
    uint32_t got = tt_topk_finish(&ctx->top);
    memcpy(out, ctx->top.h, got * sizeof *out);
    return got;
}

/* The vector row loops of stages 2-3 (codes_max, with the residual sketch and without:
 * the 128-bit ones for 4-vector queries, the AVX-512 ones) return the same bits as the
 * general loop for every document, with and without a pruning mask, for query lengths
 * that take the 128-bit path (nqp 4) and fill one to four 512-bit registers of a row
 * (and partial ones). */
START_TEST(sketch_avx512_agrees) {
    /* _i 0: a 4-byte sketch (the 128-bit loops' case); 1: 3 bytes (the general one) */
    const corpus *ca = _i ? &g_ca3 : &g_ca;
    tt_index *idx = open_idx(_i ? g_idx_ad3 : g_idx_ad, TT_IO_MMAP, 0);
    ck_assert_uint_eq(idx->sketch_bytes, _i ? 3 : 4);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    tt_search_ctx_use_avx512(ctx, 1);
    if (!ctx->avx512)
        fprintf(stderr, "no AVX-512 here: only the 128-bit row loops (nq <= 4) are compared "
                        "with the general loop\n");
    const uint32_t qlens[] = {4, 1, 13, 17, 32, 40, 64};
    const uint64_t nd = idx->num_live;
    tt_hit *h1 = malloc(nd * sizeof *h1), *h2 = malloc(nd * sizeof *h2);
    uint8_t *keep = malloc(idx->num_centroids);
    for (uint32_t k = 0; k < idx->num_centroids; k++)
        keep[k] = k % 3 != 0;
    for (int t = 0; t < 14; t++) {
        const uint32_t nq = qlens[t % 7];
        const uint8_t *kp = t >= 7 ? keep : NULL;
        float *Q = query_near(ca, (uint64_t)t * 13 % ca->ndocs, nq, 0.3f, 700 + t);
        for (int sk = 1; sk >= 0; sk--) { /* and the centroid-only row loops */
            uint32_t n1 = stage_scores(idx, ctx, Q, nq, 1, sk, kp, h1);
            uint32_t n2 = stage_scores(idx, ctx, Q, nq, 0, sk, kp, h2);
            ck_assert_uint_eq(n1, nd);
            ck_assert_uint_eq(n1, n2);
            for (uint32_t h = 0; h < n1; h++)
                ck_assert_msg(h1[h].doc == h2[h].doc && h1[h].score == h2[h].score,
                              "sketch %d, nq %u, rank %u: doc %llu %.9g vs doc %llu %.9g", sk,
                              nq, h, (unsigned long long)h1[h].doc, h1[h].score,
                              (unsigned long long)h2[h].doc, h2[h].score);
        }
        free(Q);
    }
    free(keep);
    free(h1);
    free(h2);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

/* Stage 1 through every int8 kernel this CPU has: they return the same bits, so the same
 * hits. (The float32 sgemm path's scores differ by the quantisation error, so its
 * candidates, and sometimes its hits, differ: recall_vs_exhaustive checks that path.) */
START_TEST(cq_kernels_same_hits) {
    tt_index *idx = open_idx(g_idx, TT_IO_MMAP, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    const int best = idx->cq.kernel;
    const uint32_t qlens[] = {32, 4, 7, 40};
    tt_hit h1[100], h2[100];
    uint32_t n1, n2;
    for (int t = 0; t < 8; t++) {
        uint32_t nq = qlens[t % 4], k = t % 2 ? 100 : 10;
        float *Q = query_near(&g_c, (uint64_t)t * 53 % g_c.ndocs, nq, 0.3f, 900 + t);
        tt_search_options o;
        tt_search_options_init(&o);
        o.score = t % 3 == 2 ? TT_SCORE_MEAN : TT_SCORE_SUM;
        ck_assert_int_eq(tt_index_use_cq_kernel(idx, best), TT_OK);
        ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h1, &n1), TT_OK);
        for (int kern = TT_CQ_PORTABLE; kern < best; kern++) {
            if (!tt_cq_kernel_ok(kern))
                continue;
            ck_assert_int_eq(tt_index_use_cq_kernel(idx, kern), TT_OK);
            ck_assert_int_eq(idx->cq.kernel, kern);
            ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &o, h2, &n2), TT_OK);
            ck_assert_uint_eq(n1, n2);
            ck_assert_msg(hits_equal(h1, h2, n1), "kernel %d, query %d", kern, t);
        }
        free(Q);
    }
    const int had = idx->cq.kernel;
    ck_assert_int_eq(tt_index_use_cq_kernel(idx, 99), TT_EINVAL);
    ck_assert_int_eq(idx->cq.kernel, had); /* unchanged on failure */
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

START_TEST(bad_input) {
    tt_index *idx = open_idx(g_idx_plain, TT_IO_AUTO, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    float *Q = query_near(&g_c, 3, 4, 0.1f, 1);
    tt_hit hits[4];
    uint32_t n = 99;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 0, NULL, hits, &n), TT_EINVAL);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(tt_search(idx, ctx, Q, 0, 4, NULL, hits, &n), TT_EINVAL);
    ck_assert_int_eq(tt_search(idx, ctx, NULL, 4, 4, NULL, hits, &n), TT_EINVAL);
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = TT_MODE_EXACT;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "original"));
    o.mode = 7;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_EINVAL);
    tt_search_options_init(&o);
    o.threshold = INFINITY;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_EINVAL);
    /* Options no search can make sense of (issue B12): a negative nprobe, a struct_size
     * of another version; and ndocs below k still returns k hits. */
    tt_search_options_init(&o);
    o.nprobe = -3;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "nprobe"));
    tt_search_options_init(&o);
    o.struct_size = 3;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "struct_size"));
    o.struct_size = sizeof o + 8;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_EINVAL);
    ck_assert_int_eq(tt_search_batch(idx, Q, (const uint64_t[]){0}, (const uint32_t[]){4}, 1, 4,
                                     &o, 1, hits, &n, NULL), TT_EINVAL);
    tt_search_options_init(&o);
    o.ndocs = 2;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, &o, hits, &n), TT_OK);
    ck_assert_uint_eq(n, 4);
    tt_search_options eff;
    tt_search_options_resolve(&o, 4, &eff);
    ck_assert_uint_eq(eff.ndocs, 4);
    Q[2 * g_c.dim + 5] = NAN;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, 4, NULL, hits, &n), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "vector 2"));
    /* k above the number of documents returns every document. */
    Q[2 * g_c.dim + 5] = 0;
    tt_hit *all = malloc((idx->num_docs + 5) * sizeof *all);
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, (uint32_t)idx->num_docs + 5, NULL, all, &n),
                     TT_OK);
    ck_assert_uint_le(n, idx->num_docs);
    tt_search_options_init(&o);
    o.mode = TT_MODE_EXHAUSTIVE;
    ck_assert_int_eq(tt_search(idx, ctx, Q, 4, (uint32_t)idx->num_docs + 5, &o, all, &n),
                     TT_OK);
    ck_assert_uint_eq(n, idx->num_docs);
    free(all);
    /* A context of another index. */
    tt_index *other = open_idx(g_idx_plain, TT_IO_MMAP, 0);
    ck_assert_int_eq(tt_search(other, ctx, Q, 4, 4, NULL, hits, &n), TT_EINVAL);
    tt_index_close(other);
    free(Q);
    tt_search_ctx_free(ctx);
    tt_search_ctx_free(NULL);

    /* Query files: dimension mismatch, NaN, inconsistent qlens / ids. */
    char qp[4200], lp[4200], ip[4200];
    snprintf(qp, sizeof qp, "%s/q.npy", g_tmp);
    snprintf(lp, sizeof lp, "%s/ql.npy", g_tmp);
    snprintf(ip, sizeof ip, "%s/qids.txt", g_tmp);
    float *qv = calloc(6 * 64, sizeof *qv);
    for (int i = 0; i < 6; i++)
        qv[i * 64 + i] = 1;
    ck_assert_int_eq(tu_write_npy(qp, TT_DT_F32, 64, qv, 6), TT_OK);
    int64_t ql[3] = {1, 2, 3};
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, ql, 3), TT_OK);
    ck_assert_int_eq(tu_write_file(ip, "a\nb\nc\n", 6), 0);
    tt_queries *qs;
    ck_assert_int_eq(tt_queries_load(&qs, qp, NULL, NULL), TT_EDIM); /* 2-D needs qlens */
    ck_assert_int_eq(tt_queries_load(&qs, qp, lp, ip), TT_OK);
    ck_assert_uint_eq(qs->num_queries, 3);
    ck_assert_uint_eq(qs->lens[2], 3);
    ck_assert_uint_eq(qs->offsets[2], 3);
    ck_assert_str_eq(qs->ids[1], "b");
    ck_assert_int_eq(tt_queries_check(qs, idx), TT_EDIM);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "q.npy"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "64"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "128"));
    tt_queries_free(qs);
    ck_assert_int_eq(tu_write_file(ip, "a\nb\n", 4), 0);
    ck_assert_int_eq(tt_queries_load(&qs, qp, lp, ip), TT_EDIM);
    ql[2] = 4;
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, ql, 3), TT_OK);
    ck_assert_int_eq(tt_queries_load(&qs, qp, lp, NULL), TT_EDIM);
    qv[4 * 64 + 7] = NAN;
    ck_assert_int_eq(tu_write_npy(qp, TT_DT_F32, 64, qv, 6), TT_OK);
    ql[2] = 3;
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, ql, 3), TT_OK);
    ck_assert_int_eq(tt_queries_load(&qs, qp, lp, NULL), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "query 2"));
    ck_assert_int_eq(tt_queries_load(&qs, "/nonexistent/q.npy", NULL, NULL), TT_ENOTFOUND);
    free(qv);
    tt_index_close(idx);
}
END_TEST

/* io_uring refused by seccomp (as in many containers): the index falls back to mmap with
 * a note, a fetcher asked for io_uring falls back to pread, and results do not change. */
static int seccomp_child(const tt_hit *want, uint32_t nwant, const float *Q) {
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        return 77; /* cannot install the filter here */
    tt_open_options oo;
    tt_open_options_init(&oo);
    tt_index *idx;
    if (tt_index_open(&idx, g_idx, &oo))
        return 10;
    tt_index_info info;
    tt_index_get_info(idx, &info);
    if (info.io != TT_IO_MMAP || !strstr(idx->io_note, "io_uring"))
        return 11;
    tt_search_ctx *ctx;
    tt_search_stats ss;
    if (tt_search_ctx_new(idx, &ctx) || tt_search_ctx_stats(ctx, &ss) || ss.io != TT_IO_MMAP ||
        !strstr(ss.io_note, "io_uring"))
        return 12;
    tt_hit hits[10];
    uint32_t n;
    if (tt_search(idx, ctx, Q, 32, 10, NULL, hits, &n) || !hits_equal(hits, want, nwant) ||
        n != nwant)
        return 13;
    /* A fetcher asked for io_uring without a mapping reads with pread. */
    tt_fetch_config fc = {.mode = TT_FETCH_URING, .fd = idx->seg[0].f_residuals.fd,
                          .fd_direct = -1, .path = "r", .file_size = idx->seg[0].f_residuals.size,
                          .base = TT_HEADER_SIZE};
    tt_fetcher *f;
    char note[160];
    if (tt_fetcher_new(&f, &fc, note, sizeof note) || tt_fetcher_mode(f) != TT_FETCH_PREAD ||
        !strstr(note, "io_uring"))
        return 14;
    uint64_t off = 0, len = idx->res_bytes;
    const uint8_t *p;
    if (tt_fetcher_read(f, 1, &off, &len, &p) || memcmp(p, idx->seg[0].res_map, len))
        return 15;
    tt_fetcher_free(f);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
    return 0;
}

START_TEST(io_uring_refused) {
    tt_index *idx = open_idx(g_idx, TT_IO_AUTO, 0);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    float *Q = query_near(&g_c, 17, 32, 0.2f, 4242);
    tt_hit want[10];
    uint32_t n;
    run(idx, ctx, Q, 32, 10, TT_MODE_PLAID, want, &n);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(seccomp_child(want, n, Q));
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        fprintf(stderr, "seccomp unavailable: io_uring refusal not tested\n");
    else
        ck_assert_msg(WEXITSTATUS(status) == 0, "fallback check %d failed",
                      WEXITSTATUS(status));
    free(Q);
}
END_TEST

/* Real ColBERTv2 vectors (35 NanoFiQA documents, 5 queries of 32 tokens). */
START_TEST(nanofiqa) {
    const char *data = tu_data_dir();
    if (!data) {
        fprintf(stderr, "no test data: nanofiqa skipped\n");
        return;
    }
    char base[4200], vp[4300], lp[4300], ip[4300], qp[4300], qi[4300], out[4300];
    snprintf(base, sizeof base, "%s/emb/colbertv2_nanofiqa", data);
    snprintf(vp, sizeof vp, "%s/doc_token_embeddings.npy", base);
    snprintf(lp, sizeof lp, "%s/doclens.npy", base);
    snprintf(ip, sizeof ip, "%s/doc_ids.txt", base);
    snprintf(qp, sizeof qp, "%s/query_token_embeddings.npy", base);
    snprintf(qi, sizeof qi, "%s/query_ids.txt", base);
    snprintf(out, sizeof out, "%s/nanofiqa.idx", g_tmp);
    struct stat sb;
    if (stat(vp, &sb) != 0) {
        fprintf(stderr, "%s absent: nanofiqa skipped\n", vp);
        return;
    }
    const char *vps[1] = {vp}, *lps[1] = {lp};
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, vps, lps, ip, NULL), TT_OK);
    tt_build_options bo;
    tt_build_options_init(&bo);
    bo.threads = 2;
    bo.keep_originals = TT_KEEP_F16;
    ck_assert_msg(tt_build(out, in, &bo, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    tt_queries *qs;
    ck_assert_msg(tt_queries_load(&qs, qp, NULL, qi) == TT_OK, "%s", tt_last_error());
    ck_assert_uint_eq(qs->num_queries, 5);
    ck_assert_uint_eq(qs->lens[0], 32);
    tt_index *idx = open_idx(out, TT_IO_AUTO, 0);
    ck_assert_int_eq(tt_queries_check(qs, idx), TT_OK);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    tt_hit hp[10], he[10], hx[10];
    uint32_t np, ne, nx, found = 0;
    double exact_agree = 0;
    for (uint64_t q = 0; q < qs->num_queries; q++) {
        const float *Q = qs->vectors + qs->offsets[q] * qs->dim;
        run(idx, ctx, Q, qs->lens[q], 10, TT_MODE_PLAID, hp, &np);
        run(idx, ctx, Q, qs->lens[q], 10, TT_MODE_EXHAUSTIVE, he, &ne);
        run(idx, ctx, Q, qs->lens[q], 10, TT_MODE_EXACT, hx, &nx);
        ck_assert_uint_eq(np, 10);
        for (uint32_t i = 0; i < np; i++)
            for (uint32_t j = 0; j < ne; j++)
                if (hp[i].doc == he[j].doc) {
                    found++;
                    ck_assert_float_eq_tol(hp[i].score, he[j].score, 1e-4f * he[j].score);
                }
        exact_agree += hx[0].doc == he[0].doc;
    }
    double recall = found / 50.0;
    fprintf(stderr, "nanofiqa recall@10 (default PLAID vs exhaustive): %.3f; top-1 compressed "
            "== exact for %.0f of 5 queries\n", recall, exact_agree);
    ck_assert_double_ge(recall, 0.95);
    tt_queries_free(qs);
    tt_search_ctx_free(ctx);
    tt_index_close(idx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("search");
    TCase *tc = tcase_create("fetch");
    tcase_add_test(tc, fetch_paths_agree);
    tcase_add_test(tc, fetch_direct_alignment);
    tcase_add_test(tc, fetch_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("kernels");
    tcase_add_test(tc, resdec_matches_layout);
    tcase_add_test(tc, resdec_adaptive_matches_definition);
    tcase_add_test(tc, resdec_dot_matches_decode);
    tcase_add_test(tc, reslut_matches_decode);
    tcase_add_test(tc, maxsim_products_own);
    tcase_add_test(tc, maxsim_rowdot_own);
    tcase_add_test(tc, centroid_dots_match_definition);
    tcase_add_test(tc, topk_deterministic);
    tcase_add_test(tc, hits_sort_and_best);
    tcase_add_test(tc, maxsim_group_matches_reference);
    tcase_add_test(tc, defaults_by_k);
    tcase_add_test(tc, cq_kernels_agree);
    tcase_add_test(tc, cq_quantize_row_simd);
    tcase_add_test(tc, cq_groups);
    tcase_add_loop_test(tc, cq_check_catches_broken, 0, 2);
    tcase_add_test(tc, crows_kernels_agree);
    tcase_add_test(tc, crows_head_dims);
    suite_add_tcase(s, tc);

    /* The indexes are built once, before the test processes fork. */
    tt_blas_set_threads(1);
    g_tmp = tu_tmpdir();
    if (!g_tmp)
        return EXIT_FAILURE;
    make_corpus(&g_c, 2000, 128, 4, 30, 400, 0.12f, 42);
    g_gq = plant_groups(&g_c, G_GROUPS, 32, 43);
    corpus head = g_c; /* the first 300 documents */
    head.ndocs = 300;
    head.nvec = g_c.vec0[300];
    /* LLM-like: 4 dimensions with a large shared offset and spread hold most of the
     * energy, so the adaptive codec gives them 8 bits and reorders the positions. */
    make_corpus(&g_ca, 400, 64, 4, 20, 80, 0.12f, 44);
    make_corpus(&g_ca3, 200, 64, 4, 20, 80, 0.12f, 46);
    for (int c = 0; c < 2; c++) {
        corpus *ca = c ? &g_ca3 : &g_ca;
        const uint32_t outliers = c ? 3 : 4;
        tt_rng r;
        tt_rng_seed(&r, 45);
        for (uint64_t v = 0; v < ca->nvec; v++)
            for (uint32_t k = 0; k < outliers; k++)
                ca->x[v * 64 + 5 + 16 * k] += (k & 1 ? -1.0f : 1.0f) *
                                              (float)(1.5 + 0.5 * (tt_rng_uniform(&r) - 0.5));
        tt_normalize_rows(ca->x, ca->nvec, 64);
    }
    int bst = build_from(&g_c, g_tmp, "idx", TT_KEEP_F16, 1024, TT_CODEC_PER_DIM, g_idx,
                         sizeof g_idx) ||
              build_from(&head, g_tmp, "plain", TT_KEEP_NONE, 64, TT_CODEC_PER_DIM, g_idx_plain,
                         sizeof g_idx_plain) ||
              build_from(&g_ca, g_tmp, "adaptive", TT_KEEP_F16, 64, TT_CODEC_ADAPTIVE, g_idx_ad,
                         sizeof g_idx_ad) ||
              build_from(&g_ca3, g_tmp, "adaptive3", TT_KEEP_NONE, 32, TT_CODEC_ADAPTIVE,
                         g_idx_ad3, sizeof g_idx_ad3);
    /* 512-d, 4 outlier dimensions: the exhaustive scan splits from 512 dimensions on. */
    make_corpus(&g_ch, 160, 512, 2, 12, 40, 0.12f, 47);
    {
        tt_rng r;
        tt_rng_seed(&r, 48);
        for (uint64_t v = 0; v < g_ch.nvec; v++)
            for (uint32_t k = 0; k < 4; k++)
                g_ch.x[v * 512 + 5 + 128 * k] += (k & 1 ? -1.0f : 1.0f) *
                                                 (float)(1.5 + 0.5 * (tt_rng_uniform(&r) - 0.5));
        tt_normalize_rows(g_ch.x, g_ch.nvec, 512);
    }
    bst = bst || build_from(&g_ch, g_tmp, "hd_perdim", TT_KEEP_F16, 32, TT_CODEC_PER_DIM,
                            g_idx_hp, sizeof g_idx_hp);
    g_build_debias = TT_DEBIAS_VECTOR; /* g_idx_vs: one residual scale per vector */
    bst = bst || build_from(&g_ca, g_tmp, "vscale", TT_KEEP_NONE, 64, TT_CODEC_ADAPTIVE,
                            g_idx_vs, sizeof g_idx_vs) ||
          build_from(&g_ch, g_tmp, "hd_vscale", TT_KEEP_F16, 32, TT_CODEC_ADAPTIVE, g_idx_hv,
                     sizeof g_idx_hv);
    g_build_debias = TT_DEBIAS_TABLE;
    if (bst) {
        fprintf(stderr, "building the test index failed: %s\n", tt_last_error());
        tu_rmrf(g_tmp);
        return EXIT_FAILURE;
    }
    tc = tcase_create("index");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, planted_ranks_first);
    tcase_add_test(tc, recall_vs_exhaustive);
    tcase_add_loop_test(tc, split_stage4_agrees, 0, 2);
    tcase_add_loop_test(tc, lut_stage4_agrees, 0, 6);
    tcase_add_test(tc, vscale_scores_match_reference);
    tcase_add_test(tc, pruning_scale_free);
    tcase_add_test(tc, rerank_adaptive_depth);
    tcase_add_test(tc, scores_match_reference);
    tcase_add_test(tc, adaptive_scores_match_reference);
    tcase_add_test(tc, sketch_stage_scores_match_definition);
    tcase_add_test(tc, io_paths_identical);
    tcase_add_test(tc, batch_equals_serial);
    tcase_add_loop_test(tc, exhaustive_batch_equals_serial, 0, 4);
    tcase_add_test(tc, damaged_originals);
    tcase_add_test(tc, avx512_loops_agree);
    tcase_add_test(tc, relative_mask_agrees);
    tcase_add_loop_test(tc, sketch_avx512_agrees, 0, 2);
    tcase_add_test(tc, cq_kernels_same_hits);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, io_uring_refused);
    tcase_add_test(tc, nanofiqa);
    suite_add_tcase(s, tc);
    int rc = tu_run(s);
    tu_rmrf(g_tmp);
    free(g_tmp);
    free_corpus(&g_c);
    free_corpus(&g_ca);
    free_corpus(&g_ca3);
    free_corpus(&g_ch);
    free(g_gq);
    return rc;
}

/* Unit tests of the vector readers and writer (src/npy.c) and the corpus
 * (src/input.c). The seed corpus tests/files/{good,bad,unsupported} is made by
 * tests/files/make_files.py; every vector file in it that opens holds the 6 x 4
 * matrix X[i][j] = (4*i + j - 11) / 8 and the doclens [2, 1, 3]. */
#include "testutil.h"

#include "input/input.h"

#include <fcntl.h>
#include <float.h>

/* ----------------------------------------------------------- helpers */

/* Path of a corpus file, valid until the program exits (one slot per name). */
static const char *F(const char *rel) {
    static char pool[160][512];
    static char names[160][64];
    static unsigned k;
    const char *src = getenv("TT_SRCDIR");
    for (unsigned i = 0; i < k; i++)
        if (strcmp(names[i], rel) == 0)
            return pool[i];
    ck_assert_msg(k < 160 && strlen(rel) < sizeof names[0], "F(): path pool exhausted");
    snprintf(names[k], sizeof names[0], "%s", rel);
    snprintf(pool[k], sizeof pool[0], "%s/tests/files/%s", src ? src : ".", rel);
    return pool[k++];
}

/* ck_assert marks a point (a pipe write) even when it passes: hot loops use this. */
#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (!(cond))                                                                           \
            ck_abort_msg(__VA_ARGS__);                                                         \
    } while (0)

static float X(uint64_t i, uint32_t j) { return (float)(4 * (int)i + (int)j - 11) / 8; }

#define ASSERT_ERR(expr, status, needle)                                                       \
    do {                                                                                       \
        tt_err_clear();                                                                        \
        int rc_ = (expr);                                                                      \
        ck_assert_msg(rc_ == (status), "%s: got %d (%s), want %d; message: %s", #expr, rc_,    \
                      tt_strerror(rc_), (int)(status), tt_last_error());                       \
        ck_assert_msg(strstr(tt_last_error(), (needle)) != NULL,                               \
                      "%s: message '%s' lacks '%s'", #expr, tt_last_error(), (needle));        \
    } while (0)

/* Builds a .npy image: preamble of version major.0 and the header text as is. */
static size_t mk_npy(uint8_t *buf, size_t cap, int major, const char *text) {
    size_t tl = strlen(text), pre = major == 1 ? 10 : 12;
    ck_assert_uint_le(pre + tl, cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    if (major == 1)
        tt_wr16(buf + 8, (uint16_t)tl);
    else
        tt_wr32(buf + 8, (uint32_t)tl);
    memcpy(buf + pre, text, tl);
    return pre + tl;
}

/* Parses a header text given as a string (copied to an exactly sized heap buffer so
 * that any read past the end trips ASan). */
static int parse_text(int major, const char *text, int bf16, tt_npy_header *h) {
    uint8_t tmp[4096];
    size_t n = mk_npy(tmp, sizeof tmp, major, text);
    uint8_t *b = malloc(n);
    memcpy(b, tmp, n);
    int rc = tt_npy_parse_header(b, n, "mem.npy", bf16, h);
    free(b);
    return rc;
}

static void write_npy(const char *path, int major, const char *text, const void *data,
                      size_t n) {
    uint8_t hdr[4096];
    size_t hl = mk_npy(hdr, sizeof hdr, major, text);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(hdr, 1, hl, f), hl);
    if (n)
        ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    uint8_t *b = malloc(1 << 20);
    *n = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

static void check_X(const float *v, uint64_t row0, uint64_t n, uint32_t dim) {
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++)
            CHECK(v[i * dim + j] == X(row0 + i, j), "row %llu col %u: %g != %g",
                  (unsigned long long)(row0 + i), j, v[i * dim + j], X(row0 + i, j));
}

/* ---------------------------------------------------------- parser */

START_TEST(parse_good_headers) {
    tt_npy_header h;
    const char *std = "{'descr': '<f4', 'fortran_order': False, 'shape': (4430, 128), }"
                      "          \n";
    for (int major = 1; major <= 3; major++) {
        ck_assert_int_eq(parse_text(major, std, 0, &h), TT_OK);
        ck_assert_int_eq(h.major, major);
        ck_assert_int_eq(h.minor, 0);
        ck_assert_int_eq(h.dtype, TT_DT_F32);
        ck_assert_uint_eq(h.elem_size, 4);
        ck_assert_int_eq(h.ndim, 2);
        ck_assert(h.shape[0] == 4430 && h.shape[1] == 128 && h.shape[2] == 1);
        ck_assert_uint_eq(h.data_offset, (major == 1 ? 10 : 12) + strlen(std));
    }
    struct {
        const char *text;
        int bf16;
        tt_dtype dt;
        uint32_t es;
        int ndim;
        uint64_t s0, s1, s2;
    } ok[] = {
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", 0, TT_DT_F32, 4, 1, 5, 1, 1},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 0, TT_DT_F32, 4, 0, 1, 1, 1},
        {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3, 4), }", 0, TT_DT_F16, 2, 3, 2,
         3, 4},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (7, 3), }", 1, TT_DT_BF16, 2, 2, 7,
         3, 1},
        {"{'descr': '<u2', 'fortran_order': False, 'shape': (7, 3), }", 0, TT_DT_U16, 2, 2, 7, 3,
         1},
        {"{'descr': '<i4', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_I32, 4, 1, 9, 1,
         1},
        {"{'descr': '<i8', 'fortran_order': False, 'shape': (0,), }", 0, TT_DT_I64, 8, 1, 0, 1,
         1},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (7, 3), }", 1, TT_DT_F64, 8, 2, 7,
         3, 1},
        /* the 1-byte types as NumPy writes them ('|') and as '<' may name them */
        {"{'descr': '|i1', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_I8, 1, 1, 9, 1,
         1},
        {"{'descr': '<i1', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_I8, 1, 1, 9, 1,
         1},
        {"{'descr': '|u1', 'fortran_order': False, 'shape': (9,), }", 1, TT_DT_U8, 1, 1, 9, 1,
         1},
        {"{'descr': '<u1', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_U8, 1, 1, 9, 1,
         1},
        {"{'descr': '<i2', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_I16, 2, 1, 9, 1,
         1},
        {"{'descr': '<u4', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_U32, 4, 1, 9, 1,
         1},
        {"{'descr': '<u8', 'fortran_order': False, 'shape': (9,), }", 0, TT_DT_U64, 8, 1, 9, 1,
         1},
        /* keys in any order, double quotes, odd spacing, no trailing comma */
        {"  {\"shape\":(7 ,3) ,'fortran_order' :False,\t\"descr\" : '<f4'}\n", 0, TT_DT_F32, 4, 2,
         7, 3, 1},
        {"{'shape': ( 7 , 3 , ), 'descr': '<f4', 'fortran_order': False}", 0, TT_DT_F32, 4, 2, 7,
         3, 1},
        /* Python 2 long suffixes */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (7L, 3L), }", 0, TT_DT_F32, 4, 2, 7,
         3, 1},
        /* Fortran order is the same layout when at most one dimension exceeds 1 */
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (1, 5), }", 0, TT_DT_F32, 4, 2, 1, 5,
         1},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (5,), }", 0, TT_DT_F32, 4, 1, 5, 1, 1},
        /* large but addressable */
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2147483648, 1048576), }", 0,
         TT_DT_F32, 4, 2, 2147483648ull, 1048576, 1},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int rc = parse_text(1 + (int)(i % 3), ok[i].text, ok[i].bf16, &h);
        ck_assert_msg(rc == TT_OK, "case %zu (%s): %s", i, ok[i].text, tt_last_error());
        ck_assert_int_eq(h.dtype, ok[i].dt);
        ck_assert_uint_eq(h.elem_size, ok[i].es);
        ck_assert_int_eq(h.ndim, ok[i].ndim);
        ck_assert_msg(h.shape[0] == ok[i].s0 && h.shape[1] == ok[i].s1 && h.shape[2] == ok[i].s2,
                      "case %zu: shape %llu %llu %llu", i, (unsigned long long)h.shape[0],
                      (unsigned long long)h.shape[1], (unsigned long long)h.shape[2]);
    }
    /* the header text may be UTF-8 in 3.0 (only inside strings we do not use) */
    ck_assert_int_eq(parse_text(3, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
                                0, &h), TT_OK);
}
END_TEST

START_TEST(parse_malformed_headers) {
    tt_npy_header h;
    struct {
        const char *text;
        const char *needle;
    } bad[] = {
        {"", "expected '{'"},
        {"     \n", "expected '{'"},
        {"[('descr', '<f4')]", "not a dict"},
        {"'descr': '<f4'", "not a dict"},
        {"{'fortran_order': False, 'shape': (3,), }", "missing key 'descr'"},
        {"{'descr': '<f4', 'shape': (3,), }", "missing key 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False, }", "missing key 'shape'"},
        {"{}", "missing key"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", "duplicate"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (3,)}", "duplicate"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", "unexpected key"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': '3,4'}", "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [3, 4]}", "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 4)}", "negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, -4)}", "negative"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (5)}", "trailing comma"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,,)}", "non-negative integer"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3.5,)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (0x10,)}", "expected ',' or ')'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
         "overflows 64 bits"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}",
         "overflows"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
         "overflows"},
        {"{'descr': '<i8', 'fortran_order': False, 'shape': (1152921504606846976,)}",
         "overflows"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296)}",
         "overflows"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "True or False"},
        {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (3,)}", "True or False"},
        {"{'descr': '<f4', 'fortran_order': false, 'shape': (3,)}", "True or False"},
        {"{'descr': <f4, 'fortran_order': False, 'shape': (3,)}", "quoted string"},
        {"{'descr': '<f4, 'fortran_order': False, 'shape': (3,)}", "expected ',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "expected ',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ", "quoted string"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", "expected ',' or '}'"},
        {"{'descr' '<f4', 'fortran_order': False, 'shape': (3,)}", "expected ':'"},
        {"{,}", "quoted string"},
        {"{'descr': '<f4',, 'fortran_order': False, 'shape': (3,)}", "quoted string"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", "after the dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}}", "after the dict"},
        {"{'descr': '<\\x66', 'fortran_order': False, 'shape': (3,)}", "escape"},
        {"{'descr': '<f4", "unterminated"},
        {"{'descr': '<f4\n', 'fortran_order': False, 'shape': (3,)}", "unterminated"},
        {"{'descr", "unterminated"},
        {"{'a_very_long_key_that_does_not_fit_in_the_buffer': 1}", "unexpected key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tt_err_clear();
        int rc = parse_text(1 + (int)(i % 3), bad[i].text, 0, &h);
        ck_assert_msg(rc == TT_EFORMAT, "case %zu (%s): got %d: %s", i, bad[i].text, rc,
                      tt_last_error());
        ck_assert_msg(strstr(tt_last_error(), "mem.npy") != NULL, "%s", tt_last_error());
        ck_assert_msg(strstr(tt_last_error(), bad[i].needle) != NULL,
                      "case %zu (%s): message '%s' lacks '%s'", i, bad[i].text, tt_last_error(),
                      bad[i].needle);
    }

    /* preamble problems */
    uint8_t b[256];
    size_t n = mk_npy(b, sizeof b, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}");
    ASSERT_ERR(tt_npy_parse_header(b, 0, "p.npy", 0, &h), TT_EFORMAT, "p.npy: not a .npy file");
    ASSERT_ERR(tt_npy_parse_header(b, 5, "p.npy", 0, &h), TT_EFORMAT, "bad magic");
    ASSERT_ERR(tt_npy_parse_header(b, 7, "p.npy", 0, &h), TT_EFORMAT, "truncated");
    ASSERT_ERR(tt_npy_parse_header(b, 9, "p.npy", 0, &h), TT_EFORMAT, "truncated");
    ASSERT_ERR(tt_npy_parse_header(b, n - 1, "p.npy", 0, &h), TT_EFORMAT, "extends beyond");
    ck_assert_int_eq(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_OK);
    b[1] = 'n';
    ASSERT_ERR(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_EFORMAT, "bad magic");
    b[1] = 'N';
    b[6] = 4;
    ASSERT_ERR(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_EVERSION, "p.npy: .npy format "
               "version 4.0");
    b[6] = 0;
    ASSERT_ERR(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_EVERSION, "0.0");
    b[6] = 1;
    b[7] = 1;
    ASSERT_ERR(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_EVERSION, "1.1");
    b[7] = 0;
    tt_wr16(b + 8, 0xffff);
    ASSERT_ERR(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_EFORMAT, "extends beyond");
    n = mk_npy(b, sizeof b, 2, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}");
    ASSERT_ERR(tt_npy_parse_header(b, 11, "p.npy", 0, &h), TT_EFORMAT, "truncated");
    tt_wr32(b + 8, 0xffffffffu);
    ASSERT_ERR(tt_npy_parse_header(b, n, "p.npy", 0, &h), TT_EFORMAT, "extends beyond");
    ASSERT_ERR(tt_npy_parse_header(NULL, 10, "p.npy", 0, &h), TT_EINVAL, "p.npy");
}
END_TEST

START_TEST(parse_unsupported_headers) {
    tt_npy_header h;
    struct {
        const char *text;
        const char *needle;
    } uns[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4)}", "big-endian"},
        {"{'descr': '>i8', 'fortran_order': False, 'shape': (3,)}", "big-endian"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (3, 4)}",
         "dtype '<c8' (complex64) is not supported (vectors: float32, float16, float64"},
        {"{'descr': '|b1', 'fortran_order': False, 'shape': (3, 4)}", "'|b1' (bool)"},
        {"{'descr': '<f16', 'fortran_order': False, 'shape': (3, 4)}", "'<f16' (float128)"},
        {"{'descr': '=f4', 'fortran_order': False, 'shape': (3, 4)}", "'=f4' has native byte order"},
        {"{'descr': '<U10', 'fortran_order': False, 'shape': (3,)}", "'<U10' (unicode string)"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (3,)}", "'|O' (Python objects)"},
        {"{'descr': 'f4', 'fortran_order': False, 'shape': (3,)}", "dtype 'f4' is not"},
        {"{'descr': '<f4 and then a lot more text, longer than the buffer', "
         "'fortran_order': False, 'shape': (3,)}",
         "too long"},
        {"{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (3,)}",
         "structured"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4)}", "Fortran"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 1, 4)}", "Fortran"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3, 4)}", "4-D"},
    };
    for (size_t i = 0; i < sizeof uns / sizeof uns[0]; i++) {
        tt_err_clear();
        int rc = parse_text(1 + (int)(i % 3), uns[i].text, 0, &h);
        ck_assert_msg(rc == TT_EUNSUPPORTED, "case %zu (%s): got %d: %s", i, uns[i].text, rc,
                      tt_last_error());
        ck_assert_msg(strstr(tt_last_error(), "mem.npy") != NULL, "%s", tt_last_error());
        ck_assert_msg(strstr(tt_last_error(), uns[i].needle) != NULL,
                      "case %zu: message '%s' lacks '%s'", i, tt_last_error(), uns[i].needle);
    }
}
END_TEST

static void check_header_invariants(int rc, const tt_npy_header *h, size_t len) {
    CHECK(rc == TT_OK || rc == TT_EFORMAT || rc == TT_EUNSUPPORTED || rc == TT_EVERSION,
          "status %d", rc);
    if (rc != TT_OK)
        return;
    CHECK(h->ndim >= 0 && h->ndim <= 3, "ndim %d", h->ndim);
    CHECK(h->data_offset <= len, "data_offset beyond the buffer");
    CHECK(h->elem_size == 1 || h->elem_size == 2 || h->elem_size == 4 || h->elem_size == 8,
          "elem_size");
    uint64_t bytes = h->elem_size;
    for (int i = 0; i < 3; i++)
        CHECK(tt_mul_ok(bytes, h->shape[i] ? h->shape[i] : 1, &bytes), "shape overflows");
}

/* Hostile bytes: every truncation, single-byte substitutions at every position and
 * random buffers. Each case is parsed from an exactly sized heap copy, so ASan
 * reports any read out of bounds. */
START_TEST(parse_hostile_bytes) {
    tt_npy_header h;
    uint8_t src[512];
    const char *text = "{\"descr\": '<f4', 'fortran_order': False, 'shape': (4430L, 128,), }  \n";
    size_t n = mk_npy(src, sizeof src, 1, text);
    for (size_t len = 0; len <= n; len++) {
        uint8_t *b = malloc(len ? len : 1);
        memcpy(b, src, len);
        int rc = tt_npy_parse_header(b, len, "t.npy", 0, &h);
        check_header_invariants(rc, &h, len);
        CHECK(rc == (len == n ? TT_OK : TT_EFORMAT), "truncated to %zu: %d", len, rc);
        free(b);
    }
    static const uint8_t subst[] = {0, '\'', '"', '(', ')', ',', ':', '{', '}', ' ', '9', '-',
                                    'L', '\\', '\n', 0x80, 0xff};
    for (size_t pos = 0; pos < n; pos++) {
        for (size_t k = 0; k < sizeof subst; k++) {
            uint8_t *b = malloc(n);
            memcpy(b, src, n);
            b[pos] = subst[k];
            int rc = tt_npy_parse_header(b, n, "t.npy", 1, &h);
            check_header_invariants(rc, &h, n);
            free(b);
        }
    }
    static const char alphabet[] = "{}()'\":, 0123456789Lshapedcrfortn_TrueFalse<f4|i8\n";
    tt_rng r;
    tt_rng_seed(&r, 99);
    for (int it = 0; it < 20000; it++) {
        size_t len = (size_t)tt_rng_below(&r, 120);
        uint8_t *b = malloc(len ? len : 1);
        if (len >= 12 && tt_rng_below(&r, 2)) {
            memcpy(b, src, 12); /* valid preamble, random header length and text */
            b[6] = (uint8_t)(1 + tt_rng_below(&r, 3));
            tt_wr16(b + 8, (uint16_t)tt_rng_below(&r, len));
            for (size_t i = 12; i < len; i++)
                b[i] = (uint8_t)alphabet[tt_rng_below(&r, sizeof alphabet - 1)];
        } else {
            for (size_t i = 0; i < len; i++)
                b[i] = (uint8_t)tt_rng_next(&r);
        }
        int rc = tt_npy_parse_header(b, len, "t.npy", 0, &h);
        check_header_invariants(rc, &h, len);
        free(b);
    }
}
END_TEST

/* --------------------------------------------------------- the corpus */

START_TEST(corpus_good_vector_files) {
    static const struct {
        const char *rel;
        int bf16;
        tt_dtype dt;
        int kind;
    } good[] = {
        {"good/vec_f32_v1.npy", 0, TT_DT_F32, TT_VF_NPY},
        {"good/vec_f32_v2.npy", 0, TT_DT_F32, TT_VF_NPY},
        {"good/vec_f32_v3.npy", 0, TT_DT_F32, TT_VF_NPY},
        {"good/vec_f16.npy", 0, TT_DT_F16, TT_VF_NPY},
        {"good/vec_bf16.npy", 1, TT_DT_BF16, TT_VF_NPY},
        {"good/vec_f64.npy", 0, TT_DT_F64, TT_VF_NPY},
        {"good/vec_f64.npy", 1, TT_DT_F64, TT_VF_NPY},
        {"good/vec.fvecs", 0, TT_DT_F32, TT_VF_FVECS},
        {"good/vec_spacing.npy", 0, TT_DT_F32, TT_VF_NPY},
        {"good/vec_spacing_v2.npy", 0, TT_DT_F32, TT_VF_NPY},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        tt_vecfile vf;
        const char *p = F(good[i].rel);
        int rc = tt_vecfile_open(&vf, p, good[i].bf16);
        ck_assert_msg(rc == TT_OK, "%s: %s", p, tt_last_error());
        ck_assert_int_eq(vf.kind, good[i].kind);
        ck_assert_int_eq(vf.dtype, good[i].dt);
        ck_assert_uint_eq(vf.rows, 6);
        ck_assert_uint_eq(vf.dim, 4);
        float v[24];
        memset(v, 0xff, sizeof v);
        ck_assert_int_eq(tt_vecfile_read(&vf, 0, 6, v), TT_OK);
        check_X(v, 0, 6, 4);
        /* every sub-range */
        for (uint64_t r0 = 0; r0 <= 6; r0++)
            for (uint64_t m = 0; r0 + m <= 6; m++) {
                float w[24];
                CHECK(tt_vecfile_read(&vf, r0, m, w) == TT_OK, "%s", tt_last_error());
                check_X(w, r0, m, 4);
            }
        ASSERT_ERR(tt_vecfile_read(&vf, 5, 2, v), TT_EINVAL, "out of range");
        ASSERT_ERR(tt_vecfile_read(&vf, 7, 0, v), TT_EINVAL, p);
        ASSERT_ERR(tt_vecfile_read(&vf, UINT64_MAX, 2, v), TT_EINVAL, p);
        tt_vecfile_close(&vf);
        ck_assert_ptr_null(vf.path);
        tt_vecfile_close(&vf); /* twice is harmless */
    }
}
END_TEST

START_TEST(corpus_bad_vector_files) {
    static const struct {
        const char *rel;
        int bf16;
        int status;
        const char *needle;
    } bad[] = {
        {"bad/magic.npy", 0, TT_EFORMAT, "bad magic"},
        {"bad/version.npy", 0, TT_EVERSION, "version 4.0"},
        {"bad/trunc_preamble.npy", 0, TT_EFORMAT, "truncated"},
        {"bad/trunc_header.npy", 0, TT_EFORMAT, "extends beyond the end of the file (40 bytes)"},
        {"bad/trunc_data.npy", 0, TT_EFORMAT, "truncated: expected 224 bytes, file has 219"},
        {"bad/hlen.npy", 0, TT_EFORMAT, "extends beyond"},
        {"bad/missing_shape.npy", 0, TT_EFORMAT, "missing key 'shape'"},
        {"bad/missing_descr.npy", 0, TT_EFORMAT, "missing key 'descr'"},
        {"bad/shape_str.npy", 0, TT_EFORMAT, "not a tuple"},
        {"bad/shape_negative.npy", 0, TT_EFORMAT, "negative"},
        {"bad/shape_overflow.npy", 0, TT_EFORMAT, "overflows"},
        {"bad/shape_huge_digit.npy", 0, TT_EFORMAT, "overflows"},
        {"bad/shape_not_tuple.npy", 0, TT_EFORMAT, "not a tuple"},
        {"bad/shape_unclosed.npy", 0, TT_EFORMAT, "malformed"},
        {"bad/nondict.npy", 0, TT_EFORMAT, "not a dict"},
        {"bad/dup_key.npy", 0, TT_EFORMAT, "duplicate"},
        {"bad/unknown_key.npy", 0, TT_EFORMAT, "unexpected key 'x'"},
        {"bad/trailing.npy", 0, TT_EFORMAT, "after the dict"},
        {"bad/fortran_value.npy", 0, TT_EFORMAT, "True or False"},
        {"bad/unterminated.npy", 0, TT_EFORMAT, "malformed"},
        {"bad/vec_1d.npy", 0, TT_EFORMAT,
         "expected a 2-D array [num_vectors, dim], got shape (24,)"},
        {"bad/vec_3d.npy", 0, TT_EFORMAT, "got shape (2, 3, 4)"},
        {"bad/vec_rows0.npy", 0, TT_EFORMAT, "empty array of shape (0, 4)"},
        {"bad/vec_dim0.npy", 0, TT_EFORMAT, "empty array of shape (6, 0)"},
        {"bad/size.fvecs", 0, TT_EFORMAT, "not a multiple of the .fvecs record size 20"},
        {"bad/dim0.fvecs", 0, TT_EFORMAT, "dimension 0"},
        {"good/scalar.npy", 0, TT_EFORMAT, "got shape ()"},
        {"good/doclens_i64.npy", 0, TT_EFORMAT, "got shape (3,)"},
        {"good/queries_3d.npy", 0, TT_EFORMAT, "got shape (2, 3, 4)"},
        {"good/fortran_1d.npy", 0, TT_EFORMAT, "got shape (24,)"},
        {"good/ids.txt", 0, TT_EFORMAT, "bad magic"},
        {"unsupported/big_endian.npy", 0, TT_EUNSUPPORTED, "big-endian dtype '>f4'"},
        {"unsupported/fortran.npy", 0, TT_EUNSUPPORTED, "Fortran"},
        {"unsupported/u1.npy", 0, TT_EUNSUPPORTED, "dtype '|u1' (uint8) is not supported for "
         "vectors (supported: float32, float16, float64; uint16 as bfloat16 with --bf16"},
        {"unsupported/c8.npy", 0, TT_EUNSUPPORTED, "dtype '<c8' (complex64) is not supported "
         "for vectors"},
        {"unsupported/i4.npy", 0, TT_EUNSUPPORTED, "dtype '<i4' (int32) is not supported for "
         "vectors"},
        {"unsupported/structured.npy", 0, TT_EUNSUPPORTED, "structured"},
        {"unsupported/4d.npy", 0, TT_EUNSUPPORTED, "4-D"},
        {"good/vec_bf16.npy", 0, TT_EUNSUPPORTED, "bf16_from_uint16"},
        {"good/vec_bf16.npy", 0, TT_EUNSUPPORTED, "dtype '<u2' (uint16) is not supported for "
         "vectors"},
        {"no/such/file.npy", 0, TT_ENOTFOUND, "cannot open"},
        {"bad", 0, TT_EFORMAT, "not a regular file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tt_vecfile vf;
        const char *p = F(bad[i].rel);
        ASSERT_ERR(tt_vecfile_open(&vf, p, bad[i].bf16), bad[i].status, p);
        ck_assert_msg(strstr(tt_last_error(), bad[i].needle) != NULL, "%s: '%s' lacks '%s'",
                      bad[i].rel, tt_last_error(), bad[i].needle);
        ck_assert_ptr_null(vf.path);
        ck_assert_int_eq(vf.fd, -1);
    }
    /* fvecs records are checked as they are read */
    tt_vecfile vf;
    const char *p = F("bad/prefix.fvecs");
    ck_assert_int_eq(tt_vecfile_open(&vf, p, 0), TT_OK);
    ck_assert_uint_eq(vf.rows, 6);
    float v[24];
    ck_assert_int_eq(tt_vecfile_read(&vf, 0, 3, v), TT_OK);
    check_X(v, 0, 3, 4);
    ck_assert_int_eq(tt_vecfile_read(&vf, 4, 2, v), TT_OK);
    check_X(v, 4, 2, 4);
    ASSERT_ERR(tt_vecfile_read(&vf, 0, 6, v), TT_EFORMAT, "record 3 has dimension 5, expected 4");
    ck_assert_ptr_nonnull(strstr(tt_last_error(), p));
    tt_vecfile_close(&vf);
}
END_TEST

/* Every corpus .npy header through the raw parser, exactly sized. */
START_TEST(corpus_headers_parse) {
    static const struct {
        const char *rel;
        int status;
        int ndim;
    } all[] = {
        {"good/vec_f32_v1.npy", TT_OK, 2},   {"good/vec_f32_v3.npy", TT_OK, 2},
        {"good/scalar.npy", TT_OK, 0},       {"good/fortran_1d.npy", TT_OK, 1},
        {"good/queries_3d.npy", TT_OK, 3},   {"good/doclens_col.npy", TT_OK, 2},
        {"bad/vec_1d.npy", TT_OK, 1},        {"bad/trunc_data.npy", TT_OK, 2},
        {"bad/hlen.npy", TT_EFORMAT, 0},     {"bad/nondict.npy", TT_EFORMAT, 0},
        {"bad/version.npy", TT_EVERSION, 0}, {"unsupported/fortran.npy", TT_EUNSUPPORTED, 0},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        size_t n;
        uint8_t *b = slurp(F(all[i].rel), &n);
        uint8_t *e = malloc(n);
        memcpy(e, b, n);
        tt_npy_header h;
        int rc = tt_npy_parse_header(e, n, all[i].rel, 0, &h);
        ck_assert_msg(rc == all[i].status, "%s: %d %s", all[i].rel, rc, tt_last_error());
        if (rc == TT_OK)
            ck_assert_int_eq(h.ndim, all[i].ndim);
        free(e);
        free(b);
    }
}
END_TEST

/* f16 and bf16 conversion through the reader, over all 65536 bit patterns, read in
 * ranges that start and end at odd places (the widening is done in place). */
START_TEST(half_conversion_through_reader) {
    char *dir = tu_tmpdir();
    char p16[4200], pb16[4200];
    snprintf(p16, sizeof p16, "%s/all_f16.npy", dir);
    snprintf(pb16, sizeof pb16, "%s/all_bf16.npy", dir);
    uint8_t *raw = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++)
        tt_wr16(raw + 2 * i, (uint16_t)i);
    write_npy(p16, 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (1024, 64), }\n", raw,
              65536 * 2);
    write_npy(pb16, 2, "{'descr': '<u2', 'fortran_order': False, 'shape': (1024, 64), }\n", raw,
              65536 * 2);
    float *v = malloc(65536 * sizeof *v);
    for (int which = 0; which < 2; which++) {
        tt_vecfile vf;
        ck_assert_int_eq(tt_vecfile_open(&vf, which ? pb16 : p16, which), TT_OK);
        ck_assert_int_eq(vf.dtype, which ? TT_DT_BF16 : TT_DT_F16);
        const uint64_t cuts[][2] = {{0, 1024}, {3, 77}, {1000, 24}, {511, 1}, {0, 33}};
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            uint64_t r0 = cuts[c][0], m = cuts[c][1];
            ck_assert_int_eq(tt_vecfile_read(&vf, r0, m, v), TT_OK);
            for (uint64_t k = 0; k < m * 64; k++) {
                uint16_t hb = (uint16_t)(r0 * 64 + k);
                float want = which ? tt_bf16_to_f32(hb) : tt_f16_to_f32(hb);
                uint32_t a, b;
                memcpy(&a, &v[k], 4);
                memcpy(&b, &want, 4);
                CHECK(a == b, "0x%04x: 0x%08x != 0x%08x", hb, a, b);
            }
        }
        tt_vecfile_close(&vf);
    }
    /* a few values by definition */
    tt_vecfile vf;
    ck_assert_int_eq(tt_vecfile_open(&vf, p16, 0), TT_OK);
    ck_assert_int_eq(tt_vecfile_read(&vf, 0, 1024, v), TT_OK);
    ck_assert(v[0x3c00] == 1.0f && v[0xc000] == -2.0f && v[0x7bff] == 65504.0f);
    ck_assert(v[0x0001] == ldexpf(1, -24) && v[0x0400] == ldexpf(1, -14));
    ck_assert(isinf(v[0x7c00]) && isnan(v[0x7e00]) && signbit(v[0x8000]) && v[0x8000] == 0);
    tt_vecfile_close(&vf);
    ck_assert_int_eq(tt_vecfile_open(&vf, pb16, 1), TT_OK);
    ck_assert_int_eq(tt_vecfile_read(&vf, 0, 1024, v), TT_OK);
    ck_assert(v[0x3f80] == 1.0f && v[0xc000] == -2.0f && v[0x3e20] == 0.15625f);
    tt_vecfile_close(&vf);
    /* tt_f16_to_f32_n (what the exact search converts rows with) directly, from an odd
     * start and over a length that is not a multiple of its blocks. */
    uint16_t *h = malloc(65536 * sizeof *h);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    tt_f16_to_f32_n(v, h + 1, 65535);
    for (uint32_t i = 1; i < 65536; i++) {
        float want = tt_f16_to_f32((uint16_t)i);
        uint32_t a, b;
        memcpy(&a, &v[i - 1], 4);
        memcpy(&b, &want, 4);
        CHECK(a == b, "0x%04x: 0x%08x != 0x%08x", i, a, b);
    }
    free(h);
    free(v);
    free(raw);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Rounding to float16 and the exactness check behind an index's float16 centroids:
 * every finite float16 value converts back to itself (the AVX2 blocks and the portable
 * tail alike); one inexact value anywhere (first, in a block, in the tail) makes the
 * check fail; rounding is to nearest, ties to even, subnormals included, and refuses
 * (leaving the values alone) where one is beyond float16's range, infinite or NaN. */
START_TEST(half_rounding_and_exactness) {
    uint16_t *h = malloc(65536 * sizeof *h), *back = malloc(65536 * sizeof *back);
    float *f = malloc(65536 * sizeof *f);
    size_t n = 0;
    for (uint32_t i = 0; i < 65536; i++)
        if (((i >> 10) & 0x1f) != 0x1f) { /* finite */
            h[n] = (uint16_t)i;
            f[n++] = tt_f16_to_f32((uint16_t)i);
        }
    ck_assert_uint_eq(n, 63488);
    ck_assert(tt_f16_from_f32_exact_n(back, f, n));
    ck_assert_mem_eq(back, h, n * sizeof *h);
    const size_t at[] = {0, 5, 8, 15, n - 1};
    for (size_t t = 0; t < sizeof at / sizeof at[0]; t++) {
        const float keep = f[at[t]];
        f[at[t]] = 1.0f + ldexpf(1, -12); /* between 1 and the next float16, 1 + 2^-10 */
        ck_assert_msg(!tt_f16_from_f32_exact_n(back, f, n), "inexact value at %zu", at[t]);
        f[at[t]] = keep;
    }
    /* rounding: ties to even, the largest finite value, subnormals */
    float x[] = {1.0f + ldexpf(1, -11), 1.0f + 3 * ldexpf(1, -11), 65519.0f, -65519.0f,
                 2e-8f, 9e-8f, -0.0f, 0.1f, 1.0f + ldexpf(1, -12)};
    const float want[] = {1.0f, 1.0f + ldexpf(1, -9), 65504.0f, -65504.0f, 0.0f,
                          ldexpf(1, -24) * 2, -0.0f, tt_f16_to_f32(tt_f32_to_f16(0.1f)), 1.0f};
    const size_t nx = sizeof x / sizeof x[0];
    ck_assert(!tt_f16_from_f32_exact_n(back, x, nx));
    ck_assert(tt_f16_round_n(x, nx));
    for (size_t i = 0; i < nx; i++)
        CHECK(x[i] == want[i] && signbit(x[i]) == signbit(want[i]), "%zu: %g, want %g", i,
              (double)x[i], (double)want[i]);
    ck_assert(tt_f16_from_f32_exact_n(back, x, nx));
    const float bad[] = {65520.0f, -1e6f, INFINITY, NAN};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        float y[3] = {0.1f, bad[b], 0.2f};
        ck_assert(!tt_f16_round_n(y, 3));
        ck_assert(y[0] == 0.1f && y[2] == 0.2f); /* left alone */
    }
    free(h);
    free(back);
    free(f);
}
END_TEST

typedef struct par_read {
    const tt_vecfile *vf;
    int bad;
} par_read;

static void par_read_fn(void *arg, int t, int n) {
    par_read *pr = arg;
    float v[24];
    for (int it = 0; it < 2000; it++) {
        uint64_t r0 = (uint64_t)(it + t) % 6, m = 6 - r0;
        if (tt_vecfile_read(pr->vf, r0, m, v) != TT_OK) {
            __atomic_fetch_add(&pr->bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        for (uint64_t i = 0; i < m * 4; i++)
            if (v[i] != X(r0 + i / 4, (uint32_t)(i % 4)))
                __atomic_fetch_add(&pr->bad, 1, __ATOMIC_RELAXED);
    }
    (void)n;
}

START_TEST(concurrent_reads) {
    const char *files[] = {"good/vec_f16.npy", "good/vec.fvecs", "good/vec_f32_v2.npy"};
    for (size_t i = 0; i < 3; i++) {
        tt_vecfile vf;
        ck_assert_int_eq(tt_vecfile_open(&vf, F(files[i]), 0), TT_OK);
        par_read pr = {&vf, 0};
        ck_assert_int_eq(tt_parallel(4, par_read_fn, &pr), TT_OK);
        ck_assert_int_eq(pr.bad, 0);
        tt_vecfile_close(&vf);
    }
}
END_TEST

/* -------------------------------------------------- small whole arrays */

START_TEST(read_ints_and_floats) {
    const char *okf[] = {"good/doclens_i64.npy", "good/doclens_i32.npy", "good/doclens_col.npy",
                         "good/doclens_i8.npy",  "good/doclens_u8.npy",  "good/doclens_i16.npy",
                         "good/doclens_u16.npy", "good/doclens_u32.npy", "good/doclens_u64.npy"};
    for (size_t i = 0; i < sizeof okf / sizeof okf[0]; i++) {
        int64_t *v;
        uint64_t n;
        ck_assert_msg(tt_npy_read_ints(F(okf[i]), &v, &n) == TT_OK, "%s", tt_last_error());
        ck_assert_uint_eq(n, 3);
        ck_assert(v[0] == 2 && v[1] == 1 && v[2] == 3);
        free(v);
    }
    int64_t *v = (int64_t *)1;
    uint64_t n = 7;
    const char *p = F("bad/doclens_2col.npy");
    ASSERT_ERR(tt_npy_read_ints(p, &v, &n), TT_EFORMAT, "expected a 1-D integer array, got "
               "shape (2, 2)");
    ck_assert_ptr_nonnull(strstr(tt_last_error(), p));
    ck_assert_ptr_null(v);
    ck_assert_uint_eq(n, 0);
    p = F("unsupported/doclens_f4.npy");
    ASSERT_ERR(tt_npy_read_ints(p, &v, &n), TT_EUNSUPPORTED, p);
    p = F("good/vec_f32_v1.npy");
    ASSERT_ERR(tt_npy_read_ints(p, &v, &n), TT_EUNSUPPORTED, "dtype '<f4' (float32) is not an "
               "integer array (supported: int8, int16, int32, int64 and their unsigned forms)");
    p = F("bad/trunc_data.npy");
    ASSERT_ERR(tt_npy_read_ints(p, &v, &n), TT_EFORMAT, "truncated");
    p = F("no_such.npy");
    ASSERT_ERR(tt_npy_read_ints(p, &v, &n), TT_ENOTFOUND, p);

    /* uint16 is zero-extended, int32 sign-extended, int64 kept */
    char *dir = tu_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/u2.npy", dir);
    uint8_t raw[16];
    tt_wr16(raw, 65535);
    tt_wr16(raw + 2, 7);
    write_npy(path, 1, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", raw, 4);
    ck_assert_int_eq(tt_npy_read_ints(path, &v, &n), TT_OK);
    ck_assert(n == 2 && v[0] == 65535 && v[1] == 7);
    free(v);
    tt_wr32(raw, (uint32_t)-5);
    write_npy(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }", raw, 4);
    ck_assert_int_eq(tt_npy_read_ints(path, &v, &n), TT_OK);
    ck_assert(n == 1 && v[0] == -5);
    free(v);
    tt_wr64(raw, (uint64_t)INT64_MIN);
    tt_wr64(raw + 8, (uint64_t)INT64_MAX);
    write_npy(path, 3, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", raw, 16);
    ck_assert_int_eq(tt_npy_read_ints(path, &v, &n), TT_OK);
    ck_assert(n == 2 && v[0] == INT64_MIN && v[1] == INT64_MAX);
    free(v);
    write_npy(path, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (0,), }", raw, 0);
    ck_assert_int_eq(tt_npy_read_ints(path, &v, &n), TT_OK);
    ck_assert_uint_eq(n, 0);
    free(v);

    /* floats: any ndim <= 3, f32 or f16 */
    float *f;
    tt_npy_header h;
    ck_assert_int_eq(tt_npy_read_floats(F("good/queries_3d.npy"), &f, &h), TT_OK);
    ck_assert(h.ndim == 3 && h.shape[0] == 2 && h.shape[1] == 3 && h.shape[2] == 4);
    check_X(f, 0, 6, 4);
    free(f);
    ck_assert_int_eq(tt_npy_read_floats(F("good/vec_f16.npy"), &f, &h), TT_OK);
    ck_assert(h.ndim == 2 && h.shape[0] == 6 && h.shape[1] == 4 && h.dtype == TT_DT_F16);
    check_X(f, 0, 6, 4);
    free(f);
    ck_assert_int_eq(tt_npy_read_floats(F("good/fortran_1d.npy"), &f, &h), TT_OK);
    ck_assert(h.ndim == 1 && h.shape[0] == 24);
    check_X(f, 0, 6, 4);
    free(f);
    p = F("good/scalar.npy");
    ASSERT_ERR(tt_npy_read_floats(p, &f, &h), TT_EFORMAT, "got shape ()");
    p = F("good/doclens_i64.npy");
    ASSERT_ERR(tt_npy_read_floats(p, &f, &h), TT_EUNSUPPORTED, p);
    p = F("good/vec_bf16.npy");
    ASSERT_ERR(tt_npy_read_floats(p, &f, &h), TT_EUNSUPPORTED, "uint16");
    ASSERT_ERR(tt_npy_read_floats(p, &f, &h), TT_EUNSUPPORTED, "is not a float array "
               "(supported: float32, float16, float64)");
    p = F("unsupported/big_endian.npy");
    ASSERT_ERR(tt_npy_read_floats(p, &f, &h), TT_EUNSUPPORTED, "big-endian");
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The part of a refusal after "supported:" (or the whole message without one). */
static const char *supported_part(void) {
    const char *m = tt_last_error(), *s = strstr(m, "supported:");
    return s ? s : m;
}

/* Every integer dtype NumPy writes is read as an integer array, with its sign; the
 * float dtypes are read as vectors, float64 narrowed to float32; each refusal lists
 * the dtypes of its use and none of another's. */
START_TEST(numpy_dtypes) {
    char *dir = tu_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/a.npy", dir);
    int64_t *v;
    uint64_t n;
    uint8_t raw[64];
    static const struct {
        const char *descr;
        uint32_t size;
        uint64_t bits[2]; /* two elements, little-endian bit patterns */
        int64_t want[2];
    } ints[] = {
        {"|i1", 1, {0x80, 0x7f}, {-128, 127}},
        {"<i1", 1, {0xff, 3}, {-1, 3}},
        {"|u1", 1, {0xff, 0}, {255, 0}},
        {"<u1", 1, {0x80, 1}, {128, 1}},
        {"<i2", 2, {0x8000, 0x7fff}, {-32768, 32767}},
        {"<u2", 2, {0xffff, 0x8000}, {65535, 32768}},
        {"<i4", 4, {0x80000000u, 5}, {INT32_MIN, 5}},
        {"<u4", 4, {0xffffffffu, 0x80000000u}, {4294967295ll, 2147483648ll}},
        {"<i8", 8, {0x8000000000000000ull, 1}, {INT64_MIN, 1}},
        {"<u8", 8, {0x7fffffffffffffffull, 0}, {INT64_MAX, 0}},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': False, 'shape': (2,), }",
                 ints[i].descr);
        for (int k = 0; k < 2; k++)
            for (uint32_t b = 0; b < ints[i].size; b++)
                raw[k * ints[i].size + b] = (uint8_t)(ints[i].bits[k] >> (8 * b));
        write_npy(path, 1 + (int)(i % 3), text, raw, 2 * ints[i].size);
        ck_assert_msg(tt_npy_read_ints(path, &v, &n) == TT_OK, "%s: %s", ints[i].descr,
                      tt_last_error());
        ck_assert_msg(n == 2 && v[0] == ints[i].want[0] && v[1] == ints[i].want[1],
                      "%s: %lld %lld", ints[i].descr, (long long)v[0], (long long)v[1]);
        free(v);
    }
    /* uint64 beyond int64 is refused, naming the file and the element */
    tt_wr64(raw, 7);
    tt_wr64(raw + 8, (uint64_t)INT64_MAX + 1);
    write_npy(path, 1, "{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", raw, 16);
    v = (int64_t *)1;
    ASSERT_ERR(tt_npy_read_ints(path, &v, &n), TT_EVALUE, "element 1 is 9223372036854775808, "
               "above INT64_MAX");
    ck_assert_ptr_nonnull(strstr(tt_last_error(), path));
    ck_assert_ptr_null(v);
    ck_assert_uint_eq(n, 0);

    /* refusals list their own use's dtypes only */
    const char *floats[] = {"good/vec_f32_v1.npy", "good/vec_f16.npy", "good/vec_f64.npy",
                            "unsupported/doclens_f4.npy", "unsupported/c8.npy"};
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        const char *p = F(floats[i]);
        ASSERT_ERR(tt_npy_read_ints(p, &v, &n), TT_EUNSUPPORTED, "is not an integer array");
        ck_assert_ptr_nonnull(strstr(tt_last_error(), p));
        ck_assert_msg(!strstr(supported_part(), "float"), "%s", tt_last_error());
    }
    ASSERT_ERR(tt_npy_read_ints(F("unsupported/c8.npy"), &v, &n), TT_EUNSUPPORTED,
               "dtype '<c8' (complex64) is not an integer array");
    const char *nonvec[] = {"unsupported/u1.npy", "unsupported/i4.npy", "unsupported/c8.npy",
                            "good/vec_bf16.npy"};
    for (size_t i = 0; i < sizeof nonvec / sizeof nonvec[0]; i++) {
        tt_vecfile vf;
        const char *p = F(nonvec[i]);
        ASSERT_ERR(tt_vecfile_open(&vf, p, 0), TT_EUNSUPPORTED, "is not supported for vectors "
                   "(supported: float32, float16, float64; uint16 as bfloat16 with --bf16");
        ck_assert_ptr_nonnull(strstr(tt_last_error(), p));
        const char *sp = supported_part();
        ck_assert_msg(!strstr(sp, "int8") && !strstr(sp, "int32") && !strstr(sp, "int64") &&
                      !strstr(sp, "unsigned"), "%s", tt_last_error());
    }
    /* an integer array as vectors, in words and as NumPy spells it */
    write_npy(path, 1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), }", raw, 16);
    tt_vecfile vf;
    ASSERT_ERR(tt_vecfile_open(&vf, path, 1), TT_EUNSUPPORTED, "dtype '<i8' (int64) is not "
               "supported for vectors");
    float *f;
    tt_npy_header h;
    ASSERT_ERR(tt_npy_read_floats(path, &f, &h), TT_EUNSUPPORTED, "dtype '<i8' (int64) is not a "
               "float array (supported: float32, float16, float64)");
    ck_assert_ptr_null(f);

    /* float64: IEEE narrowing, through the chunked reader (several 1 MiB buffers,
     * ranges that start and end inside one) and the whole-array reader */
    const uint32_t dim = 300;
    const uint64_t rows = 1024, cnt = rows * dim;
    double *d = malloc(cnt * sizeof *d);
    uint8_t *bytes = malloc(cnt * 8);
    for (uint64_t i = 0; i < cnt; i++)
        d[i] = ((double)(i % 1000) - 500.3) / 7.0 * (1 + 1e-12 * (double)i);
    const double below_mid = (double)FLT_MAX + ldexp(1, 103) * 0.99; /* rounds to FLT_MAX */
    const double specials[] = {1e300, -1e300, NAN, 1e-50, -0.0, (double)FLT_MAX, below_mid,
                               (double)FLT_MAX + ldexp(1, 103), 0.1, INFINITY};
    const size_t nsp = sizeof specials / sizeof specials[0];
    for (size_t k = 0; k < nsp; k++)
        d[131071 + k * 17000] = specials[k]; /* straddles the chunk boundaries */
    for (uint64_t i = 0; i < cnt; i++) {
        uint64_t u;
        memcpy(&u, &d[i], 8);
        tt_wr64(bytes + 8 * i, u);
    }
    write_npy(path, 2, "{'descr': '<f8', 'fortran_order': False, 'shape': (1024, 300), }", bytes,
              cnt * 8);
    float *out = malloc(cnt * sizeof *out);
    ck_assert_int_eq(tt_vecfile_open(&vf, path, 0), TT_OK);
    ck_assert(vf.dtype == TT_DT_F64 && vf.rows == rows && vf.dim == dim && vf.row_bytes == 2400);
    const uint64_t cuts[][2] = {{3, 777}, {436, 1}, {1000, 24}, {0, 437}, {0, 1024}};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        uint64_t r0 = cuts[c][0], m = cuts[c][1];
        ck_assert_int_eq(tt_vecfile_read(&vf, r0, m, out), TT_OK);
        for (uint64_t i = 0; i < m * dim; i++) {
            float want = (float)d[r0 * dim + i];
            CHECK(memcmp(&out[i], &want, 4) == 0 || (isnan(want) && isnan(out[i])),
                  "element %llu: %g != %g", (unsigned long long)(r0 * dim + i), out[i], want);
        }
    }
    tt_vecfile_close(&vf);
    ck_assert_int_eq(tt_npy_read_floats(path, &f, &h), TT_OK);
    ck_assert(h.dtype == TT_DT_F64 && h.ndim == 2 && h.shape[0] == rows && h.shape[1] == dim);
    ck_assert_int_eq(memcmp(f, out, cnt * sizeof *f), 0); /* the last cut was the whole file */
    const float *sp = f + 131071;
    ck_assert(isinf(sp[0]) && sp[0] > 0 && isinf(sp[17000]) && sp[17000] < 0);
    ck_assert(isnan(sp[34000]) && sp[51000] == 0 && signbit(sp[68000]));
    ck_assert(sp[85000] == FLT_MAX && sp[102000] == FLT_MAX && isinf(sp[119000]));
    ck_assert(sp[136000] == 0.1f && isinf(sp[153000]));
    free(f);
    ck_assert_int_eq(tt_npy_read_floats(F("good/vec_f64.npy"), &f, &h), TT_OK);
    check_X(f, 0, 6, 4);
    free(f);

    /* float64 queries beyond float32 are refused by the NaN/Inf check, which names the
     * query and the vector; any integer dtype gives the query lengths */
    char qpath[4200], lpath[4200];
    snprintf(qpath, sizeof qpath, "%s/q.npy", dir);
    snprintf(lpath, sizeof lpath, "%s/ql.npy", dir);
    for (uint64_t i = 0; i < 24; i++) {
        uint64_t u;
        double x = X(i / 4, (uint32_t)(i % 4));
        memcpy(&u, &x, 8);
        tt_wr64(bytes + 8 * i, u);
    }
    write_npy(qpath, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6, 4), }", bytes,
              24 * 8);
    const uint8_t ql[3] = {2, 1, 3};
    write_npy(lpath, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", ql, 3);
    tt_queries *q;
    ck_assert_msg(tt_queries_load(&q, qpath, lpath, NULL) == TT_OK, "%s", tt_last_error());
    ck_assert(q->num_queries == 3 && q->dim == 4 && q->lens[2] == 3 && q->offsets[2] == 3);
    check_X(q->vectors, 0, 6, 4);
    tt_queries_free(q);
    double big = 1e300;
    uint64_t u;
    memcpy(&u, &big, 8);
    tt_wr64(bytes + 8 * (4 * 4 + 1), u); /* row 4: query 2, its vector 1 */
    write_npy(qpath, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (6, 4), }", bytes,
              24 * 8);
    ASSERT_ERR(tt_queries_load(&q, qpath, lpath, NULL), TT_EVALUE, "query 2 (id 2), vector 1 "
               "has a NaN or infinite value");
    ck_assert_ptr_nonnull(strstr(tt_last_error(), qpath));
    free(out);
    free(bytes);
    free(d);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------- writer */

START_TEST(writer_round_trip) {
    char *dir = tu_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/w.npy", dir);
    tt_npy_writer w;
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = X((uint64_t)i / 4, (uint32_t)(i % 4));

    /* float32, rows appended in two batches */
    ck_assert_int_eq(tt_npy_writer_open(&w, path, TT_DT_F32, 4), TT_OK);
    ck_assert_int_eq((10 + w.header_len) % 64, 0);
    ck_assert_int_eq(tt_npy_writer_append(&w, x, 2), TT_OK);
    ck_assert_int_eq(tt_npy_writer_append(&w, x + 8, 4), TT_OK);
    ck_assert_int_eq(tt_npy_writer_append(&w, NULL, 0), TT_OK);
    uint64_t hl = w.header_len;
    ck_assert_int_eq(tt_npy_writer_close(&w), TT_OK);
    tt_npy_writer_abort(&w); /* after a close: nothing to do, the file stays */
    tt_vecfile vf;
    ck_assert_int_eq(tt_vecfile_open(&vf, path, 0), TT_OK);
    ck_assert(vf.rows == 6 && vf.dim == 4 && vf.data_offset == 10 + hl);
    float v[24];
    ck_assert_int_eq(tt_vecfile_read(&vf, 0, 6, v), TT_OK);
    check_X(v, 0, 6, 4);
    tt_vecfile_close(&vf);

    /* float16: values go through round-to-nearest-even */
    float y[3] = {0.1f, -3.14159f, 70000.0f};
    ck_assert_int_eq(tt_npy_writer_open(&w, path, TT_DT_F16, 3), TT_OK);
    ck_assert_int_eq(tt_npy_writer_append(&w, y, 1), TT_OK);
    ck_assert_int_eq(tt_npy_writer_close(&w), TT_OK);
    tt_npy_header h;
    float *f;
    ck_assert_int_eq(tt_npy_read_floats(path, &f, &h), TT_OK);
    ck_assert(h.dtype == TT_DT_F16 && h.ndim == 2 && h.shape[0] == 1 && h.shape[1] == 3);
    for (int j = 0; j < 3; j++)
        ck_assert(f[j] == tt_f16_to_f32(tt_f32_to_f16(y[j])));
    ck_assert(isinf(f[2]));
    free(f);

    /* int32 and int64 1-D */
    int64_t iv[4] = {5, -7, INT32_MAX, INT32_MIN};
    for (int dt = 0; dt < 2; dt++) {
        ck_assert_int_eq(tt_npy_writer_open(&w, path, dt ? TT_DT_I64 : TT_DT_I32, 0), TT_OK);
        ck_assert_int_eq(tt_npy_writer_append(&w, iv, 4), TT_OK);
        ck_assert_int_eq(tt_npy_writer_close(&w), TT_OK);
        int64_t *r;
        uint64_t n;
        ck_assert_int_eq(tt_npy_read_ints(path, &r, &n), TT_OK);
        ck_assert_uint_eq(n, 4);
        for (int i = 0; i < 4; i++)
            ck_assert(r[i] == iv[i]);
        free(r);
    }
    int64_t too_big = (int64_t)INT32_MAX + 1;
    ck_assert_int_eq(tt_npy_writer_open(&w, path, TT_DT_I32, 0), TT_OK);
    ASSERT_ERR(tt_npy_writer_append(&w, &too_big, 1), TT_EVALUE, "does not fit int32");
    tt_npy_writer_abort(&w);
    ck_assert_int_ne(access(path, F_OK), 0); /* abort removed it */

    /* zero rows, and the widest row count still fits the reserved header */
    ck_assert_int_eq(tt_npy_writer_open(&w, path, TT_DT_F32, 128), TT_OK);
    ck_assert_int_eq(tt_npy_writer_close(&w), TT_OK);
    size_t n;
    uint8_t *b = slurp(path, &n);
    ck_assert_int_eq(tt_npy_parse_header(b, n, path, 0, &h), TT_OK);
    ck_assert(h.ndim == 2 && h.shape[0] == 0 && h.shape[1] == 128 && h.data_offset == n);
    ck_assert_int_eq(n % 64, 0);
    free(b);
    ck_assert_int_eq(tt_npy_writer_open(&w, path, TT_DT_F16, 0), TT_OK);
    hl = w.header_len;
    w.rows = UINT64_MAX; /* as if that many rows had been appended */
    ck_assert_int_eq(tt_npy_writer_close(&w), TT_OK);
    b = slurp(path, &n);
    ck_assert_uint_eq(n, 10 + hl);
    ck_assert_uint_eq(tt_rd16(b + 8), hl);
    ck_assert(memmem(b, n, "(18446744073709551615,)", 23) != NULL);
    ck_assert_int_eq(b[n - 1], '\n');
    free(b);

    ASSERT_ERR(tt_npy_writer_open(&w, path, TT_DT_BF16, 4), TT_EINVAL, path);
    snprintf(path, sizeof path, "%s/no/such/dir/w.npy", dir);
    ASSERT_ERR(tt_npy_writer_open(&w, path, TT_DT_F32, 4), TT_ENOTFOUND, path);
    ASSERT_ERR(tt_npy_writer_append(&w, x, 1), TT_EINVAL, "not open");
    tt_npy_writer_abort(&w);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------- corpus */

static void check_input_failure(size_t nf, const char *const *vp, const char *const *dp,
                                const char *ids, int status, const char *n1, const char *n2) {
    tt_input *in = (tt_input *)1;
    tt_input_options o;
    tt_input_options_init(&o);
    tt_err_clear();
    int rc = tt_input_open(&in, nf, vp, dp, ids, &o);
    ck_assert_msg(rc == status, "got %d (%s), want %d: %s", rc, tt_strerror(rc), status,
                  tt_last_error());
    ck_assert_ptr_null(in);
    ck_assert_msg(strstr(tt_last_error(), n1) != NULL, "'%s' lacks '%s'", tt_last_error(), n1);
    if (n2)
        ck_assert_msg(strstr(tt_last_error(), n2) != NULL, "'%s' lacks '%s'", tt_last_error(),
                      n2);
}

START_TEST(input_multiple_pairs) {
    const char *vp[3] = {F("good/vec_f32_v1.npy"), F("good/vec.fvecs"), F("good/vec_f16.npy")};
    const char *dp[3] = {F("good/doclens_i64.npy"), F("good/doclens_i32.npy"),
                         F("good/doclens_col.npy")};
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 3, vp, dp, NULL, NULL), TT_OK);
    ck_assert_uint_eq(tt_input_dim(in), 4);
    ck_assert_uint_eq(tt_input_num_docs(in), 9);
    ck_assert_uint_eq(tt_input_num_vectors(in), 18);
    const uint32_t lens[9] = {2, 1, 3, 2, 1, 3, 2, 1, 3};
    for (int d = 0; d < 9; d++) {
        ck_assert_uint_eq(in->doclens[d], lens[d]);
        ck_assert_uint_eq(in->doc_vec0[d + 1] - in->doc_vec0[d], lens[d]);
    }
    ck_assert_uint_eq(in->doc_vec0[9], 18);
    for (int f = 0; f <= 3; f++) {
        ck_assert_uint_eq(in->file_vec0[f], 6 * (uint64_t)f);
        ck_assert_uint_eq(in->file_doc0[f], 3 * (uint64_t)f);
    }
    ck_assert_ptr_null(in->ids_blob);
    float v[18 * 4];
    ck_assert_int_eq(tt_input_read(in, 0, 18, v), TT_OK);
    for (int r = 0; r < 18; r++)
        check_X(v + r * 4, (uint64_t)r % 6, 1, 4);
    /* every range, including those spanning two and three files */
    for (uint64_t v0 = 0; v0 <= 18; v0++)
        for (uint64_t m = 0; v0 + m <= 18; m++) {
            float w[18 * 4];
            CHECK(tt_input_read(in, v0, m, w) == TT_OK, "%s", tt_last_error());
            CHECK(memcmp(w, v + v0 * 4, m * 4 * sizeof(float)) == 0, "range %llu+%llu",
                  (unsigned long long)v0, (unsigned long long)m);
        }
    ASSERT_ERR(tt_input_read(in, 10, 9, v), TT_EINVAL, "out of range");
    ASSERT_ERR(tt_input_read(in, 19, 0, v), TT_EINVAL, "out of range");
    tt_input_free(in);
    tt_input_free(NULL);
    ck_assert_uint_eq(tt_input_dim(NULL), 0);
    ck_assert_uint_eq(tt_input_num_docs(NULL), 0);
    ck_assert_uint_eq(tt_input_num_vectors(NULL), 0);

    /* float64 vectors and doclens of the smaller integer types */
    {
        const char *v64[2] = {F("good/vec_f64.npy"), F("good/vec_f32_v2.npy")};
        const char *d8[2] = {F("good/doclens_u8.npy"), F("good/doclens_i16.npy")};
        ck_assert_msg(tt_input_open(&in, 2, v64, d8, NULL, NULL) == TT_OK, "%s", tt_last_error());
        ck_assert_uint_eq(tt_input_num_docs(in), 6);
        ck_assert_int_eq(tt_input_read(in, 0, 12, v), TT_OK);
        check_X(v, 0, 6, 4);
        check_X(v + 24, 0, 6, 4);
        tt_input_free(in);
    }

    /* bfloat16 needs the flag */
    const char *bv[1] = {F("good/vec_bf16.npy")};
    tt_input_options o;
    tt_input_options_init(&o);
    ck_assert_uint_eq(o.struct_size, sizeof o);
    ck_assert_int_eq(o.bf16_from_uint16, 0);
    ASSERT_ERR(tt_input_open(&in, 1, bv, dp, NULL, &o), TT_EUNSUPPORTED, bv[0]);
    o.bf16_from_uint16 = 1;
    ck_assert_int_eq(tt_input_open(&in, 1, bv, dp, NULL, &o), TT_OK);
    ck_assert_int_eq(tt_input_read(in, 0, 6, v), TT_OK);
    check_X(v, 0, 6, 4);
    tt_input_free(in);
}
END_TEST

START_TEST(input_ids) {
    const char *vp[2] = {F("good/vec_f32_v1.npy"), F("good/vec_spacing.npy")};
    const char *dp[2] = {F("good/doclens_i64.npy"), F("good/doclens_i32.npy")};
    const char *idf[2] = {F("good/ids.txt"), F("good/ids_crlf.txt")};
    for (int k = 0; k < 2; k++) {
        tt_input *in;
        ck_assert_msg(tt_input_open(&in, 2, vp, dp, idf[k], NULL) == TT_OK, "%s",
                      tt_last_error());
        ck_assert_uint_eq(tt_input_num_docs(in), 6);
        ck_assert_ptr_nonnull(in->ids_blob);
        ck_assert_str_eq(in->ids_path, idf[k]);
        for (int d = 0; d < 6; d++) {
            char want[16];
            snprintf(want, sizeof want, "doc-%d", d);
            const char *id = in->ids_blob + in->id_off[d];
            size_t len = in->id_off[d + 1] - 1 - in->id_off[d];
            ck_assert_uint_eq(len, strlen(want));
            ck_assert(memcmp(id, want, len) == 0);
            ck_assert_str_eq(id, want); /* also NUL-terminated */
        }
        tt_input_free(in);
    }
    /* a UTF-8 byte-order mark, a missing final newline, blank lines at the end are fine */
    char *dir = tu_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/ids.txt", dir);
    const char text[] = "\xef\xbb\xbf" "a\nbb\r\nc-c\nd\n\xc3\xa9\nf\n\n";
    ck_assert_int_eq(tu_write_file(path, text, sizeof text - 1), 0);
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 2, vp, dp, path, NULL), TT_OK);
    const char *want[6] = {"a", "bb", "c-c", "d", "\xc3\xa9", "f"}; /* and a blank last line */
    for (int d = 0; d < 6; d++)
        ck_assert_str_eq(in->ids_blob + in->id_off[d], want[d]);
    tt_input_free(in);
    /* an id of exactly 1024 bytes is allowed, 1025 is not (tested with the corpus) */
    char *big = malloc(6 * 1030);
    size_t o = 0;
    for (int d = 0; d < 6; d++) {
        memset(big + o, 'a' + d, 1024);
        o += 1024;
        big[o++] = '\n';
    }
    ck_assert_int_eq(tu_write_file(path, big, o), 0);
    ck_assert_int_eq(tt_input_open(&in, 2, vp, dp, path, NULL), TT_OK);
    ck_assert_uint_eq(in->id_off[6] - in->id_off[5], 1025);
    tt_input_free(in);
    static const char with_nul[] = "a\nb\0x\nc\nd\ne\nf\n";
    ck_assert_int_eq(tu_write_file(path, with_nul, sizeof with_nul - 1), 0);
    check_input_failure(2, vp, dp, path, TT_EPARSE, path, ":2: id contains a control character");
    ck_assert_int_eq(tu_write_file(path, "", 0), 0);
    check_input_failure(2, vp, dp, path, TT_EDIM, path, "has 0 ids but the corpus has 6");
    free(big);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(input_errors) {
    const char *v1 = F("good/vec_f32_v1.npy"), *d1 = F("good/doclens_i64.npy");
    const char *v2 = F("good/vec.fvecs"), *d2 = F("good/doclens_i32.npy");
    const char *p, *q;
    {
        const char *vp[2] = {v1, p = F("bad/vec_dim8.npy")}, *dp[2] = {d1, d2};
        check_input_failure(2, vp, dp, NULL, TT_EDIM, p, v1);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "has dim 8 but"));
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "has dim 4"));
    }
    {
        const char *vp[2] = {v1, v2}, *dp[2] = {d1, p = F("bad/doclens_sum.npy")};
        check_input_failure(2, vp, dp, NULL, TT_EDIM, p, v2);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "sum to 5 vectors"));
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "has 6 vectors"));
    }
    {
        const char *vp[1] = {v1}, *dp[1] = {p = F("bad/doclens_zero.npy")};
        check_input_failure(1, vp, dp, NULL, TT_EVALUE, p, "document 1 has length 0");
    }
    {
        const char *vp[2] = {v1, v2}, *dp[2] = {d1, p = F("bad/doclens_negative.npy")};
        check_input_failure(2, vp, dp, NULL, TT_EVALUE, p, "document 1 has length -1");
    }
    {
        const char *vp[1] = {v1}, *dp[1] = {p = F("bad/doclens_big.npy")};
        check_input_failure(1, vp, dp, NULL, TT_EVALUE, p, "document 1 has length 2147483649");
    }
    {
        const char *vp[1] = {v1}, *dp[1] = {p = F("bad/doclens_2col.npy")};
        check_input_failure(1, vp, dp, NULL, TT_EFORMAT, p, "1-D");
    }
    {
        const char *vp[1] = {v1}, *dp[1] = {p = F("unsupported/doclens_f4.npy")};
        check_input_failure(1, vp, dp, NULL, TT_EUNSUPPORTED, p, "float32");
    }
    {
        const char *vp[1] = {v1}, *dp[1] = {p = F("missing_doclens.npy")};
        check_input_failure(1, vp, dp, NULL, TT_ENOTFOUND, p, NULL);
    }
    {
        const char *vp[2] = {v1, p = F("missing.npy")}, *dp[2] = {d1, d2};
        check_input_failure(2, vp, dp, NULL, TT_ENOTFOUND, p, NULL);
    }
    const struct {
        const char *rel;
        int status;
        const char *needle;
    } vbad[] = {
        {"bad/vec_1d.npy", TT_EFORMAT, "expected a 2-D array"},
        {"bad/vec_3d.npy", TT_EFORMAT, "expected a 2-D array"},
        {"bad/trunc_data.npy", TT_EFORMAT, "truncated"},
        {"unsupported/big_endian.npy", TT_EUNSUPPORTED, "big-endian"},
        {"unsupported/fortran.npy", TT_EUNSUPPORTED, "Fortran"},
        {"bad/size.fvecs", TT_EFORMAT, "record size"},
    };
    for (size_t i = 0; i < sizeof vbad / sizeof vbad[0]; i++) {
        const char *vp[2] = {v1, p = F(vbad[i].rel)}, *dp[2] = {d1, d2};
        check_input_failure(2, vp, dp, NULL, vbad[i].status, p, vbad[i].needle);
    }
    {
        const char *vp[2] = {v1, v2}, *dp[2] = {d1, d2};
        const struct {
            const char *rel;
            int status;
            const char *needle;
        } ibad[] = {
            {"bad/ids_empty_line.txt", TT_EPARSE, ":3: empty id"},
            {"bad/ids_long.txt", TT_EPARSE, ":2: id too long (ids are 1..1024 bytes)"},
            {"bad/ids_short.txt", TT_EDIM, "has 5 ids but the corpus has 6 documents"},
            {"bad/ids_extra.txt", TT_EDIM, "has 9 ids"},
            {"no_ids.txt", TT_ENOTFOUND, "cannot open"},
            {"good", TT_EFORMAT, "not a regular file"},
        };
        for (size_t i = 0; i < sizeof ibad / sizeof ibad[0]; i++) {
            q = F(ibad[i].rel);
            check_input_failure(2, vp, dp, q, ibad[i].status, q, ibad[i].needle);
        }
    }
    /* argument errors */
    tt_input *in = NULL;
    const char *vp[1] = {v1}, *dp[1] = {d1}, *np[1] = {NULL};
    ASSERT_ERR(tt_input_open(NULL, 1, vp, dp, NULL, NULL), TT_EINVAL, "tt_input_open");
    ASSERT_ERR(tt_input_open(&in, 0, vp, dp, NULL, NULL), TT_EINVAL, "no input files");
    ASSERT_ERR(tt_input_open(&in, 1, NULL, dp, NULL, NULL), TT_EINVAL, "no input files");
    ASSERT_ERR(tt_input_open(&in, 1, vp, np, NULL, NULL), TT_EINVAL, "NULL path");
    tt_input_options o;
    memset(&o, 0, sizeof o);
    ASSERT_ERR(tt_input_open(&in, 1, vp, dp, NULL, &o), TT_EINVAL, "tt_input_options_init");
    ck_assert_ptr_null(in);
}
END_TEST

/* The real ColBERTv2 embeddings of ../shared/data (skipped when absent). */
START_TEST(real_colbert_embeddings) {
    const char *data = tu_data_dir();
    if (!data) {
        fprintf(stderr, "real_colbert_embeddings: no shared data, skipped\n");
        return;
    }
    char vpath[4200], dpath[4200], ipath[4200], qpath[4200];
    snprintf(vpath, sizeof vpath, "%s/emb/colbertv2_nanofiqa/doc_token_embeddings.npy", data);
    snprintf(dpath, sizeof dpath, "%s/emb/colbertv2_nanofiqa/doclens.npy", data);
    snprintf(ipath, sizeof ipath, "%s/emb/colbertv2_nanofiqa/doc_ids.txt", data);
    snprintf(qpath, sizeof qpath, "%s/emb/colbertv2_nanofiqa/query_token_embeddings.npy", data);
    const char *vp[1] = {vpath}, *dp[1] = {dpath};
    tt_input *in;
    ck_assert_msg(tt_input_open(&in, 1, vp, dp, ipath, NULL) == TT_OK, "%s", tt_last_error());
    ck_assert_uint_eq(tt_input_dim(in), 128);
    ck_assert_uint_eq(tt_input_num_vectors(in), 4430);
    ck_assert_uint_eq(tt_input_num_docs(in), 35);
    uint64_t sum = 0;
    for (uint64_t d = 0; d < 35; d++) {
        ck_assert_uint_gt(in->doclens[d], 0);
        sum += in->doclens[d];
        ck_assert_uint_gt(in->id_off[d + 1] - in->id_off[d], 1);
    }
    ck_assert_uint_eq(sum, 4430);
    ck_assert_uint_eq(in->doc_vec0[35], 4430);

    float *all = malloc(4430 * 128 * sizeof *all), *chunk = malloc(1000 * 128 * sizeof *chunk);
    ck_assert_int_eq(tt_input_read(in, 0, 4430, all), TT_OK);
    ck_assert_int_eq(tt_find_nonfinite(all, 4430, 128), -1);
    for (uint64_t v0 = 0; v0 < 4430; v0 += 1000) {
        uint64_t m = TT_MIN(1000, 4430 - v0);
        ck_assert_int_eq(tt_input_read(in, v0, m, chunk), TT_OK);
        ck_assert(memcmp(chunk, all + v0 * 128, m * 128 * sizeof(float)) == 0);
    }
    double worst = 0;
    for (uint64_t r = 0; r < 4430; r++) {
        double s = 0;
        for (int j = 0; j < 128; j++)
            s += (double)all[r * 128 + j] * all[r * 128 + j];
        worst = fmax(worst, fabs(sqrt(s) - 1));
    }
    ck_assert_msg(worst < 1e-3, "a row has norm off 1 by %g", worst);
    tt_input_free(in);

    /* the same data through the .npy writer (f32) round-trips bit for bit */
    char *dir = tu_tmpdir(), wpath[4200];
    snprintf(wpath, sizeof wpath, "%s/copy.npy", dir);
    tt_npy_writer w;
    ck_assert_int_eq(tt_npy_writer_open(&w, wpath, TT_DT_F32, 128), TT_OK);
    ck_assert_int_eq(tt_npy_writer_append(&w, all, 4430), TT_OK);
    ck_assert_int_eq(tt_npy_writer_close(&w), TT_OK);
    tt_vecfile vf;
    ck_assert_int_eq(tt_vecfile_open(&vf, wpath, 0), TT_OK);
    ck_assert(vf.rows == 4430 && vf.dim == 128);
    float *back = malloc(4430 * 128 * sizeof *back);
    ck_assert_int_eq(tt_vecfile_read(&vf, 0, 4430, back), TT_OK);
    ck_assert(memcmp(back, all, 4430 * 128 * sizeof(float)) == 0);
    tt_vecfile_close(&vf);
    free(back);
    tu_rmrf(dir);
    free(dir);

    float *q;
    tt_npy_header h;
    ck_assert_int_eq(tt_npy_read_floats(qpath, &q, &h), TT_OK);
    ck_assert(h.ndim == 3 && h.shape[0] == 5 && h.shape[1] == 32 && h.shape[2] == 128);
    ck_assert_int_eq(tt_find_nonfinite(q, 5 * 32, 128), -1);
    free(q);
    free(all);
    free(chunk);
}
END_TEST

int main(void) {
    Suite *s = suite_create("npy");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, parse_good_headers);
    tcase_add_test(tc, parse_malformed_headers);
    tcase_add_test(tc, parse_unsupported_headers);
    tcase_add_test(tc, parse_hostile_bytes);
    tcase_add_test(tc, corpus_good_vector_files);
    tcase_add_test(tc, corpus_bad_vector_files);
    tcase_add_test(tc, corpus_headers_parse);
    tcase_add_test(tc, half_conversion_through_reader);
    tcase_add_test(tc, half_rounding_and_exactness);
    tcase_add_test(tc, concurrent_reads);
    tcase_add_test(tc, read_ints_and_floats);
    tcase_add_test(tc, numpy_dtypes);
    tcase_add_test(tc, writer_round_trip);
    tcase_add_test(tc, input_multiple_pairs);
    tcase_add_test(tc, input_ids);
    tcase_add_test(tc, input_errors);
    tcase_add_test(tc, real_colbert_embeddings);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

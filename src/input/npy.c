/* NumPy .npy and .fvecs vector readers, and a streaming .npy writer.
 *
 * The .npy format (numpy/lib/format.py, NEP 1): the magic "\x93NUMPY", a major and a
 * minor version byte, a little-endian header length (uint16 in 1.0, uint32 in 2.0 and
 * 3.0), then the header: a Python dict literal with the keys 'descr', 'fortran_order'
 * and 'shape', padded with spaces and ended by '\n' (latin-1 text in 1.0/2.0, UTF-8 in
 * 3.0). The raw array follows. The header is untrusted input: the parser below walks
 * it with explicit bounds and never relies on NUL termination.
 *
 * .fvecs (the TEXMEX / FAISS benchmark format): each record is an int32 dimension
 * followed by that many float32 values; all records have the same dimension. */
#include "input/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* numpy refuses headers over 10000 bytes unless told otherwise; be a little more
 * tolerant but never allocate an absurd amount for a header. */
#define NPY_MAX_HEADER (1u << 20)
#define NPY_MAX_NDIM 32     /* numpy allows 64; anything past 3 is refused anyway */
#define VEC_MAX_DIM (1u << 20)
#define DESCR_MAX 32

/* ------------------------------------------------------------- file helpers */

/* Reads exactly n bytes at off. A short file is TT_EFORMAT (it was validated to be
 * long enough, so it shrank or lied), a failed read TT_EIO. */
static int pread_full(int fd, void *buf, uint64_t n, uint64_t off, const char *path) {
    uint8_t *p = (uint8_t *)buf;
    while (n > 0) {
        size_t want = n > (1u << 30) ? (size_t)1 << 30 : (size_t)n;
        ssize_t r = pread(fd, p, want, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return tt_err_errno(TT_EIO, errno, "%s: read of %zu bytes at offset %llu failed",
                                path, want, (unsigned long long)off);
        }
        if (r == 0)
            return tt_err(TT_EFORMAT, "%s: unexpected end of file at offset %llu", path,
                          (unsigned long long)off);
        p += r;
        n -= (uint64_t)r;
        off += (uint64_t)r;
    }
    return TT_OK;
}

static int write_full(int fd, const void *buf, size_t n, const char *path) {
    const uint8_t *p = (const uint8_t *)buf;
    while (n > 0) {
        ssize_t r = write(fd, p, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return tt_err_errno(TT_EIO, errno, "%s: write failed", path);
        }
        p += r;
        n -= (size_t)r;
    }
    return TT_OK;
}

static int pwrite_full(int fd, const void *buf, size_t n, uint64_t off, const char *path) {
    const uint8_t *p = (const uint8_t *)buf;
    while (n > 0) {
        ssize_t r = pwrite(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return tt_err_errno(TT_EIO, errno, "%s: write failed", path);
        }
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return TT_OK;
}

/* Opens path read-only and returns its size; only regular files can be pread. */
static int open_regular(const char *path, int *fd_out, uint64_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open", path);
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tt_err_errno(TT_EIO, e, "%s: cannot stat", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tt_err(TT_EFORMAT, "%s: not a regular file", path);
    }
    *fd_out = fd;
    *size = (uint64_t)st.st_size;
    return TT_OK;
}

/* ------------------------------------------------------------ f16 / bf16 */

/* Fixed-length inner blocks let gcc's cheap -O2 vectoriser handle these loops. */
static void convert_u16(float *restrict dst, const uint16_t *restrict src, size_t n, tt_dtype dt) {
    size_t i = 0;
    if (dt == TT_DT_BF16) {
        for (; i + 16 <= n; i += 16)
            for (size_t j = 0; j < 16; j++)
                dst[i + j] = tt_bf16_to_f32(src[i + j]);
        for (; i < n; i++)
            dst[i] = tt_bf16_to_f32(src[i]);
    } else {
        tt_f16_to_f32_n(dst, src, n);
    }
}

/* Converts n little-endian 16-bit values that sit in the upper half of the
 * 4n-byte buffer `out` (at byte 2n) into floats over the whole buffer. Walking
 * forward, block [i, i+B) writes bytes [4i, 4i+4B), which ends at or before
 * 2n+2i+2B, the start of the next unread block, because i+B <= n; each block is
 * copied out before it is overwritten. */
static void widen_in_place(float *out, uint64_t n, tt_dtype dt) {
    enum { B = 2048 };
    uint16_t tmp[B];
    const uint8_t *src = (const uint8_t *)out + 2 * n;
    bool le = tt_host_is_le();
    for (uint64_t i = 0; i < n; i += B) {
        size_t m = (size_t)TT_MIN((uint64_t)B, n - i);
        memcpy(tmp, src + 2 * i, 2 * m);
        if (!le)
            for (size_t j = 0; j < m; j++)
                tmp[j] = tt_rd16(&tmp[j]);
        convert_u16(out + i, tmp, m, dt);
    }
}

/* float32 little-endian bytes -> host floats, in place. */
static void f32_from_le(float *x, uint64_t n) {
    if (tt_host_is_le())
        return;
    for (uint64_t i = 0; i < n; i++)
        x[i] = tt_rdf32(&x[i]);
}

/* n little-endian float64 values -> float32. The narrowing follows IEEE 754 (C11
 * Annex F, which gcc and clang implement on every target tartan builds for): a value
 * beyond float32's range rounds to +-inf instead of being undefined, so an absurd
 * input is not silently clamped; the build's and the queries' NaN/Inf checks
 * refuse it and name the vector. */
static void narrow_f64(float *restrict dst, const uint8_t *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint64_t u = tt_rd64(src + 8 * i);
        double d;
        memcpy(&d, &u, 8);
        dst[i] = (float)d;
    }
}

/* ------------------------------------------------------- header parsing */

typedef struct hparse {
    const char *start, *p, *end;
    const char *path;
} hparse;

static int hbad(const hparse *s, const char *what) {
    return tt_err(TT_EFORMAT, "%s: malformed .npy header: %s at byte %lld of the header",
                  s->path, what, (long long)(s->p - s->start));
}

static void skip_ws(hparse *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

/* Header text is untrusted: make it printable before it goes into a message. */
static void printable(char *t) {
    for (; *t; t++)
        if ((unsigned char)*t < 0x20 || (unsigned char)*t >= 0x7f)
            *t = '?';
}

static bool peek(const hparse *s, char c) { return s->p < s->end && *s->p == c; }

/* A Python string literal in single or double quotes, without escapes. Copies at
 * most cap-1 bytes into buf (NUL-terminated) and sets *truncated if it was longer. */
static int parse_str(hparse *s, char *buf, size_t cap, bool *truncated) {
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
        return hbad(s, "expected a quoted string");
    char q = *s->p++;
    size_t n = 0;
    *truncated = false;
    while (s->p < s->end && *s->p != q) {
        char c = *s->p;
        if (c == '\\')
            return hbad(s, "escape sequences are not supported in strings");
        if (c == '\n' || c == '\0')
            return hbad(s, "unterminated string");
        if (n + 1 < cap)
            buf[n++] = c;
        else
            *truncated = true;
        s->p++;
    }
    if (s->p >= s->end)
        return hbad(s, "unterminated string");
    s->p++;
    buf[n] = '\0';
    return TT_OK;
}

static bool match_word(hparse *s, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0)
        return false;
    /* the word must not continue ("Falsey") */
    const char *after = s->p + n;
    if (after < s->end && (*after == '_' || (*after >= 'a' && *after <= 'z') ||
                           (*after >= 'A' && *after <= 'Z') || (*after >= '0' && *after <= '9')))
        return false;
    s->p = after;
    return true;
}

/* A shape tuple: "()", "(5,)", "(4430, 128)", "(2, 3, 4,)"; Python-2 headers may
 * carry an 'L' suffix on each integer. A one-element tuple needs its trailing comma
 * ("(5)" is an int in Python, which numpy rejects too). */
static int parse_shape(hparse *s, uint64_t *dims, int *ndim) {
    if (!peek(s, '('))
        return hbad(s, "'shape' is not a tuple");
    s->p++;
    int n = 0;
    bool comma_after_last = false;
    for (;;) {
        skip_ws(s);
        if (peek(s, ')'))
            break;
        if (n > 0 && !comma_after_last)
            return hbad(s, "expected ',' or ')' in 'shape'");
        if (peek(s, '-'))
            return hbad(s, "negative dimension in 'shape'");
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return hbad(s, "expected a non-negative integer in 'shape'");
        uint64_t v = 0;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            unsigned d = (unsigned)(*s->p - '0');
            if (v > (UINT64_MAX - d) / 10)
                return hbad(s, "dimension in 'shape' overflows 64 bits");
            v = v * 10 + d;
            s->p++;
        }
        if (peek(s, 'L') || peek(s, 'l'))
            s->p++;
        if (n >= NPY_MAX_NDIM)
            return hbad(s, "too many dimensions in 'shape'");
        dims[n++] = v;
        skip_ws(s);
        comma_after_last = peek(s, ',');
        if (comma_after_last)
            s->p++;
        else if (!peek(s, ')'))
            return hbad(s, "expected ',' or ')' in 'shape'");
    }
    if (n == 1 && !comma_after_last)
        return hbad(s, "'shape' (n) is not a tuple (a 1-tuple needs a trailing comma)");
    s->p++; /* ')' */
    *ndim = n;
    return TT_OK;
}

/* Sets *pre (bytes before the header text) and *hlen (header text length) after
 * checking the magic and the version. */
static int npy_preamble(const uint8_t *buf, size_t len, const char *path, int *major, int *minor,
                        uint64_t *pre, uint64_t *hlen) {
    if (len < NPY_MAGIC_LEN || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return tt_err(TT_EFORMAT, "%s: not a .npy file (bad magic)", path);
    if (len < 8)
        return tt_err(TT_EFORMAT, "%s: truncated .npy preamble (%zu bytes)", path, len);
    *major = buf[6];
    *minor = buf[7];
    if (*major < 1 || *major > 3 || *minor != 0)
        return tt_err(TT_EVERSION, "%s: .npy format version %d.%d is not supported "
                      "(1.0, 2.0 and 3.0 are)", path, *major, *minor);
    *pre = *major == 1 ? 10 : 12;
    if (len < *pre)
        return tt_err(TT_EFORMAT, "%s: truncated .npy preamble (%zu bytes)", path, len);
    *hlen = *major == 1 ? tt_rd16(buf + 8) : tt_rd32(buf + 8);
    return TT_OK;
}

static void shape_str(const tt_npy_header *h, char *buf, size_t cap) {
    int k = snprintf(buf, cap, "(");
    for (int i = 0; i < h->ndim && k > 0 && (size_t)k < cap; i++)
        k += snprintf(buf + k, cap - (size_t)k, "%s%llu", i ? ", " : "",
                      (unsigned long long)h->shape[i]);
    if (k > 0 && (size_t)k < cap)
        snprintf(buf + k, cap - (size_t)k, h->ndim == 1 ? ",)" : ")");
}

static const char *dtype_name(tt_dtype dt) {
    switch (dt) {
    case TT_DT_F32: return "float32";
    case TT_DT_F16: return "float16";
    case TT_DT_BF16: return "bfloat16";
    case TT_DT_I32: return "int32";
    case TT_DT_I64: return "int64";
    case TT_DT_U16: return "uint16";
    case TT_DT_F64: return "float64";
    case TT_DT_I8: return "int8";
    case TT_DT_U8: return "uint8";
    case TT_DT_I16: return "int16";
    case TT_DT_U32: return "uint32";
    case TT_DT_U64: return "uint64";
    }
    return "?";
}

/* The dtypes the parser knows, as NumPy writes them: '|' ("not applicable") for the
 * 1-byte types, which a hand-written '<' may also name; little-endian only. The first
 * entry of a dtype is the spelling messages show. */
static const struct {
    const char *descr;
    tt_dtype dt;
    uint32_t size;
} known_dtypes[] = {
    {"<f4", TT_DT_F32, 4}, {"<f2", TT_DT_F16, 2}, {"<f8", TT_DT_F64, 8},
    {"|i1", TT_DT_I8, 1},  {"<i1", TT_DT_I8, 1},  {"|u1", TT_DT_U8, 1},
    {"<u1", TT_DT_U8, 1},  {"<i2", TT_DT_I16, 2}, {"<u2", TT_DT_U16, 2},
    {"<i4", TT_DT_I32, 4}, {"<u4", TT_DT_U32, 4}, {"<i8", TT_DT_I64, 8},
    {"<u8", TT_DT_U64, 8},
};

static const char *dtype_descr(tt_dtype dt) {
    if (dt == TT_DT_BF16)
        dt = TT_DT_U16;
    for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; i++)
        if (known_dtypes[i].dt == dt)
            return known_dtypes[i].descr;
    return "?";
}

/* What a reader wants an array for; each use has its own list of dtypes, and a
 * refusal names that list, never another use's. */
typedef enum npy_use {
    USE_ANY,     /* tt_npy_parse_header alone: any dtype of tt_dtype */
    USE_VECTORS, /* tt_vecfile_open */
    USE_FLOATS,  /* tt_npy_read_floats (queries) */
    USE_INTS     /* tt_npy_read_ints (doclens, qlens) */
} npy_use;

/* A descr the parser does not read, in NumPy's words where its kind letter says
 * (typestr: byte order, kind, size in bytes), so "'<c8'" comes with "complex64". */
static void descr_words(const char *descr, char *buf, size_t cap) {
    buf[0] = '\0';
    if (!descr[0] || !descr[1])
        return;
    const char *digits = descr + 2;
    char *end;
    long size = strtol(digits, &end, 10);
    bool sized = end != digits && *end == '\0' && size > 0 && size <= 64;
    switch (descr[1]) {
    case 'b': snprintf(buf, cap, "bool"); break;
    case 'i': if (sized) snprintf(buf, cap, "int%ld", 8 * size); break;
    case 'u': if (sized) snprintf(buf, cap, "uint%ld", 8 * size); break;
    case 'f': if (sized) snprintf(buf, cap, "float%ld", 8 * size); break;
    case 'c': if (sized) snprintf(buf, cap, "complex%ld", 8 * size); break;
    case 'U': snprintf(buf, cap, "unicode string"); break;
    case 'S': snprintf(buf, cap, "byte string"); break;
    case 'O': snprintf(buf, cap, "Python objects"); break;
    case 'M': snprintf(buf, cap, "datetime64"); break;
    case 'm': snprintf(buf, cap, "timedelta64"); break;
    case 'V': snprintf(buf, cap, "raw bytes"); break;
    default: break;
    }
}

/* The refusal of a dtype for a use: NumPy's descr (NULL: too long to show), the type
 * in words ("" when unknown), and the dtypes that use takes, in words. */
static int dtype_refused(const char *path, const char *descr, const char *words, npy_use use) {
    char what[96];
    if (!descr)
        snprintf(what, sizeof what, "dtype (descr too long to show)");
    else if (words[0])
        snprintf(what, sizeof what, "dtype '%s' (%s)", descr, words);
    else
        snprintf(what, sizeof what, "dtype '%s'", descr);
    switch (use) {
    case USE_VECTORS:
        return tt_err(TT_EUNSUPPORTED, "%s: %s is not supported for vectors (supported: "
                      "float32, float16, float64; uint16 as bfloat16 with --bf16 / "
                      "bf16_from_uint16)", path, what);
    case USE_FLOATS:
        return tt_err(TT_EUNSUPPORTED, "%s: %s is not a float array (supported: float32, "
                      "float16, float64)", path, what);
    case USE_INTS:
        return tt_err(TT_EUNSUPPORTED, "%s: %s is not an integer array (supported: int8, "
                      "int16, int32, int64 and their unsigned forms)", path, what);
    case USE_ANY:
        break;
    }
    return tt_err(TT_EUNSUPPORTED, "%s: %s is not supported (vectors: float32, float16, "
                  "float64, uint16 as bfloat16; integer arrays: int8, int16, int32, int64 "
                  "and their unsigned forms)", path, what);
}

/* The refusal of a dtype the parser read but the use does not take. */
static int dtype_wrong(const char *path, tt_dtype dt, npy_use use) {
    return dtype_refused(path, dtype_descr(dt), dtype_name(dt), use);
}

static int parse_header(const uint8_t *buf, size_t len, const char *path, int bf16_from_uint16,
                        npy_use use, tt_npy_header *h) {
    int major, minor, rc;
    uint64_t pre, hlen;
    if (!path)
        path = "(buffer)";
    if (!buf || !h)
        return tt_err(TT_EINVAL, "%s: tt_npy_parse_header: NULL argument", path);
    memset(h, 0, sizeof *h);
    if ((rc = npy_preamble(buf, len, path, &major, &minor, &pre, &hlen)) != TT_OK)
        return rc;
    if (hlen > len - pre)
        return tt_err(TT_EFORMAT, "%s: .npy header length %llu extends beyond the %llu bytes "
                      "available", path, (unsigned long long)hlen,
                      (unsigned long long)(len - pre));

    hparse s = {(const char *)buf + pre, (const char *)buf + pre, (const char *)buf + pre + hlen,
                path};
    char descr[DESCR_MAX];
    bool have_descr = false, have_fortran = false, have_shape = false, fortran = false;
    bool descr_long = false;
    uint64_t dims[NPY_MAX_NDIM];
    int ndim = 0;

    skip_ws(&s);
    if (!peek(&s, '{'))
        return hbad(&s, "expected '{' (the header is not a dict)");
    s.p++;
    for (;;) {
        char key[32];
        bool trunc;
        skip_ws(&s);
        if (peek(&s, '}'))
            break;
        if ((rc = parse_str(&s, key, sizeof key, &trunc)) != TT_OK)
            return rc;
        skip_ws(&s);
        if (!peek(&s, ':'))
            return hbad(&s, "expected ':' after a key");
        s.p++;
        skip_ws(&s);
        if (!trunc && strcmp(key, "descr") == 0) {
            if (have_descr)
                return hbad(&s, "duplicate key 'descr'");
            if (peek(&s, '['))
                return tt_err(TT_EUNSUPPORTED, "%s: structured dtypes are not supported", path);
            if ((rc = parse_str(&s, descr, sizeof descr, &descr_long)) != TT_OK)
                return rc;
            have_descr = true;
        } else if (!trunc && strcmp(key, "fortran_order") == 0) {
            if (have_fortran)
                return hbad(&s, "duplicate key 'fortran_order'");
            if (match_word(&s, "True"))
                fortran = true;
            else if (match_word(&s, "False"))
                fortran = false;
            else
                return hbad(&s, "'fortran_order' is not True or False");
            have_fortran = true;
        } else if (!trunc && strcmp(key, "shape") == 0) {
            if (have_shape)
                return hbad(&s, "duplicate key 'shape'");
            if ((rc = parse_shape(&s, dims, &ndim)) != TT_OK)
                return rc;
            have_shape = true;
        } else {
            printable(key);
            return tt_err(TT_EFORMAT, "%s: malformed .npy header: unexpected key '%s%s'", path,
                          key, trunc ? "..." : "");
        }
        skip_ws(&s);
        if (peek(&s, ','))
            s.p++;
        else if (!peek(&s, '}'))
            return hbad(&s, "expected ',' or '}' after a value");
    }
    s.p++; /* '}' */
    skip_ws(&s);
    if (s.p != s.end)
        return hbad(&s, "unexpected bytes after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return tt_err(TT_EFORMAT, "%s: malformed .npy header: missing key '%s'", path,
                      !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");

    printable(descr);
    h->dtype = 0;
    for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; i++) {
        if (!descr_long && strcmp(descr, known_dtypes[i].descr) == 0) {
            h->dtype = known_dtypes[i].dt;
            h->elem_size = known_dtypes[i].size;
        }
    }
    if (h->dtype == 0) {
        if (!descr_long && descr[0] == '>')
            return tt_err(TT_EUNSUPPORTED, "%s: big-endian dtype '%s' is not supported "
                          "(convert with arr.astype(arr.dtype.newbyteorder('<')))", path, descr);
        /* NumPy never writes '=' to a file: the reader could not tell which host it meant */
        if (!descr_long && descr[0] == '=')
            return tt_err(TT_EUNSUPPORTED, "%s: dtype '%s' has native byte order, which a "
                          "file cannot carry (save little-endian: '<%s')", path, descr,
                          descr + 1);
        char words[32];
        descr_words(descr_long ? "" : descr, words, sizeof words);
        return dtype_refused(path, descr_long ? NULL : descr, words, use);
    }
    if (h->dtype == TT_DT_U16 && bf16_from_uint16)
        h->dtype = TT_DT_BF16;

    /* Every element count must fit in a file offset: product of the dimensions
     * (zeros counted as ones, so a zero cannot hide an overflowing neighbour) times
     * the element size, plus the header, at most INT64_MAX. */
    uint64_t bytes = h->elem_size;
    for (int i = 0; i < ndim; i++) {
        if (!tt_mul_ok(bytes, dims[i] ? dims[i] : 1, &bytes) || bytes > (uint64_t)INT64_MAX)
            return tt_err(TT_EFORMAT, "%s: malformed .npy header: shape overflows the "
                          "addressable size", path);
    }
    if (bytes > (uint64_t)INT64_MAX - (pre + hlen))
        return tt_err(TT_EFORMAT, "%s: malformed .npy header: shape overflows the "
                      "addressable size", path);
    if (ndim > 3)
        return tt_err(TT_EUNSUPPORTED, "%s: %d-D arrays are not supported (at most 3-D)", path,
                      ndim);
    /* Fortran order is the same byte layout when at most one dimension exceeds 1
     * (numpy itself writes such arrays either way). */
    int big = 0;
    for (int i = 0; i < ndim; i++)
        big += dims[i] > 1;
    if (fortran && big > 1)
        return tt_err(TT_EUNSUPPORTED, "%s: Fortran-order arrays are not supported "
                      "(save np.ascontiguousarray(arr))", path);

    h->major = major;
    h->minor = minor;
    h->ndim = ndim;
    for (int i = 0; i < 3; i++)
        h->shape[i] = i < ndim ? dims[i] : 1;
    h->data_offset = pre + hlen;
    return TT_OK;
}

int tt_npy_parse_header(const uint8_t *buf, size_t len, const char *path, int bf16_from_uint16,
                        tt_npy_header *h) {
    return parse_header(buf, len, path, bf16_from_uint16, USE_ANY, h);
}

/* Reads and parses the header of an open .npy file of `size` bytes read for `use`. */
static int read_header(int fd, const char *path, uint64_t size, int bf16, npy_use use,
                       tt_npy_header *h) {
    uint8_t small[4096];
    uint8_t *big = NULL;
    size_t n = (size_t)TT_MIN(size, (uint64_t)sizeof small);
    int major, minor, rc;
    uint64_t pre, hlen;
    if ((rc = pread_full(fd, small, n, 0, path)) != TT_OK)
        return rc;
    if ((rc = npy_preamble(small, n, path, &major, &minor, &pre, &hlen)) != TT_OK)
        return rc;
    if (pre + hlen <= n)
        return parse_header(small, n, path, bf16, use, h);
    if (pre + hlen > size)
        return tt_err(TT_EFORMAT, "%s: .npy header length %llu extends beyond the end of the "
                      "file (%llu bytes)", path, (unsigned long long)hlen,
                      (unsigned long long)size);
    if (hlen > NPY_MAX_HEADER)
        return tt_err(TT_EFORMAT, "%s: .npy header length %llu is implausibly large", path,
                      (unsigned long long)hlen);
    if (!(big = tt_alloc(pre + hlen, 1, path)))
        return TT_ENOMEM;
    rc = pread_full(fd, big, pre + hlen, 0, path);
    if (rc == TT_OK)
        rc = parse_header(big, (size_t)(pre + hlen), path, bf16, use, h);
    free(big);
    return rc;
}

static uint64_t npy_count(const tt_npy_header *h) {
    uint64_t c = 1;
    for (int i = 0; i < h->ndim; i++)
        c *= h->shape[i]; /* cannot overflow: checked by the parser */
    return c;
}

static int check_size(const tt_npy_header *h, uint64_t size, const char *path) {
    uint64_t need = h->data_offset + npy_count(h) * h->elem_size;
    if (size < need)
        return tt_err(TT_EFORMAT, "%s: truncated: expected %llu bytes, file has %llu", path,
                      (unsigned long long)need, (unsigned long long)size);
    return TT_OK;
}

/* --------------------------------------------------------- vector files */

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcasecmp(s + n - m, suf) == 0;
}

static int open_npy_vectors(tt_vecfile *vf, uint64_t size, int bf16) {
    tt_npy_header h;
    char sh[128];
    int rc = read_header(vf->fd, vf->path, size, bf16, USE_VECTORS, &h);
    if (rc != TT_OK)
        return rc;
    shape_str(&h, sh, sizeof sh);
    if (h.ndim != 2)
        return tt_err(TT_EFORMAT, "%s: expected a 2-D array [num_vectors, dim], got shape %s",
                      vf->path, sh);
    /* uint16 without the flag is refused here too: the list names the flag */
    if (h.dtype != TT_DT_F32 && h.dtype != TT_DT_F16 && h.dtype != TT_DT_BF16 &&
        h.dtype != TT_DT_F64)
        return dtype_wrong(vf->path, h.dtype, USE_VECTORS);
    if (h.shape[0] == 0 || h.shape[1] == 0)
        return tt_err(TT_EFORMAT, "%s: empty array of shape %s", vf->path, sh);
    if (h.shape[1] > VEC_MAX_DIM)
        return tt_err(TT_EUNSUPPORTED, "%s: dimension %llu exceeds the maximum %u", vf->path,
                      (unsigned long long)h.shape[1], VEC_MAX_DIM);
    if ((rc = check_size(&h, size, vf->path)) != TT_OK)
        return rc;
    vf->kind = TT_VF_NPY;
    vf->dtype = h.dtype;
    vf->rows = h.shape[0];
    vf->dim = (uint32_t)h.shape[1];
    vf->data_offset = h.data_offset;
    vf->row_bytes = (uint64_t)vf->dim * h.elem_size;
    return TT_OK;
}

static int open_fvecs(tt_vecfile *vf, uint64_t size) {
    uint8_t b[4];
    int rc;
    if (size < 4)
        return tt_err(TT_EFORMAT, "%s: %llu bytes is too short for an .fvecs record", vf->path,
                      (unsigned long long)size);
    if ((rc = pread_full(vf->fd, b, 4, 0, vf->path)) != TT_OK)
        return rc;
    int32_t d = (int32_t)tt_rd32(b);
    if (d <= 0 || (uint32_t)d > VEC_MAX_DIM)
        return tt_err(TT_EFORMAT, "%s: first .fvecs record has dimension %d", vf->path, (int)d);
    uint64_t rec = 4 + 4 * (uint64_t)d;
    if (size % rec != 0)
        return tt_err(TT_EFORMAT, "%s: size %llu is not a multiple of the .fvecs record size "
                      "%llu (4 + 4 * dim %d): truncated or mixed dimensions", vf->path,
                      (unsigned long long)size, (unsigned long long)rec, (int)d);
    vf->kind = TT_VF_FVECS;
    vf->dtype = TT_DT_F32;
    vf->rows = size / rec;
    vf->dim = (uint32_t)d;
    vf->data_offset = 0;
    vf->row_bytes = rec;
    return TT_OK;
}

int tt_vecfile_open(tt_vecfile *vf, const char *path, int bf16_from_uint16) {
    uint64_t size = 0;
    int rc;
    if (!vf)
        return tt_err(TT_EINVAL, "tt_vecfile_open: NULL handle");
    memset(vf, 0, sizeof *vf);
    vf->fd = -1;
    if (!path)
        return tt_err(TT_EINVAL, "tt_vecfile_open: NULL path");
    if (!(vf->path = strdup(path)))
        return tt_err(TT_ENOMEM, "%s: out of memory", path);
    if ((rc = open_regular(path, &vf->fd, &size)) != TT_OK)
        goto fail;
    if (has_suffix(path, ".fvecs"))
        rc = open_fvecs(vf, size);
    else
        rc = open_npy_vectors(vf, size, bf16_from_uint16);
    if (rc != TT_OK)
        goto fail;
    return TT_OK;
fail:
    tt_vecfile_close(vf);
    return rc;
}

static int read_fvecs(const tt_vecfile *vf, uint64_t row0, uint64_t n, float *out) {
    uint64_t rec = vf->row_bytes;
    uint64_t chunk = TT_MAX((uint64_t)1, ((uint64_t)1 << 20) / rec);
    chunk = TT_MIN(chunk, n);
    uint8_t *buf = tt_alloc(chunk, rec, vf->path);
    int rc = TT_OK;
    if (!buf)
        return TT_ENOMEM;
    for (uint64_t r = 0; r < n; r += chunk) {
        uint64_t m = TT_MIN(chunk, n - r);
        if ((rc = pread_full(vf->fd, buf, m * rec, (row0 + r) * rec, vf->path)) != TT_OK)
            goto done;
        for (uint64_t i = 0; i < m; i++) {
            const uint8_t *p = buf + i * rec;
            uint32_t d = tt_rd32(p);
            if (d != vf->dim) {
                rc = tt_err(TT_EFORMAT, "%s: .fvecs record %llu has dimension %d, expected %u",
                            vf->path, (unsigned long long)(row0 + r + i), (int)(int32_t)d,
                            vf->dim);
                goto done;
            }
            float *o = out + (r + i) * vf->dim;
            memcpy(o, p + 4, 4 * (size_t)vf->dim);
            f32_from_le(o, vf->dim);
        }
    }
done:
    free(buf);
    return rc;
}

/* float64 data is twice the size of the floats it becomes, so it cannot be
 * narrowed in place inside out as the 16-bit types are widened: it goes through a
 * bounded buffer (1 MiB, as the .fvecs reader's), a read per buffer. */
static int read_f64(const tt_vecfile *vf, uint64_t off, uint64_t count, float *out) {
    uint64_t chunk = TT_MIN(((uint64_t)1 << 20) / 8, count);
    uint8_t *buf = tt_alloc(chunk, 8, vf->path);
    int rc = TT_OK;
    if (!buf)
        return TT_ENOMEM;
    for (uint64_t i = 0; i < count && rc == TT_OK; i += chunk) {
        uint64_t m = TT_MIN(chunk, count - i);
        if ((rc = pread_full(vf->fd, buf, m * 8, off + 8 * i, vf->path)) == TT_OK)
            narrow_f64(out + i, buf, (size_t)m);
    }
    free(buf);
    return rc;
}

int tt_vecfile_read(const tt_vecfile *vf, uint64_t row0, uint64_t n, float *out) {
    int rc;
    if (!vf || vf->fd < 0 || (!out && n))
        return tt_err(TT_EINVAL, "tt_vecfile_read: NULL or closed argument");
    if (row0 > vf->rows || n > vf->rows - row0)
        return tt_err(TT_EINVAL, "%s: rows [%llu, %llu) out of range (file has %llu rows)",
                      vf->path, (unsigned long long)row0, (unsigned long long)(row0 + n),
                      (unsigned long long)vf->rows);
    if (n == 0)
        return TT_OK;
    if (vf->kind == TT_VF_FVECS)
        return read_fvecs(vf, row0, n, out);
    uint64_t count = n * vf->dim;
    uint64_t off = vf->data_offset + row0 * vf->row_bytes;
    if (vf->dtype == TT_DT_F32) {
        if ((rc = pread_full(vf->fd, out, count * 4, off, vf->path)) != TT_OK)
            return rc;
        f32_from_le(out, count);
        return TT_OK;
    }
    if (vf->dtype == TT_DT_F64)
        return read_f64(vf, off, count, out);
    /* 16-bit data: one read into the upper half of out, then widen in place. */
    if ((rc = pread_full(vf->fd, (uint8_t *)out + 2 * count, count * 2, off, vf->path)) != TT_OK)
        return rc;
    widen_in_place(out, count, vf->dtype);
    return TT_OK;
}

void tt_vecfile_close(tt_vecfile *vf) {
    if (!vf)
        return;
    if (vf->path && vf->fd >= 0)
        close(vf->fd);
    free(vf->path);
    memset(vf, 0, sizeof *vf);
    vf->fd = -1;
}

/* ---------------------------------------------------- small whole arrays */

/* Reads a whole .npy file read for `use`: header into *h, raw data into a new buffer. */
static int read_whole(const char *path, npy_use use, tt_npy_header *h, uint8_t **data) {
    int fd = -1, rc;
    uint64_t size;
    *data = NULL;
    if (!path)
        return tt_err(TT_EINVAL, "NULL .npy path");
    if ((rc = open_regular(path, &fd, &size)) != TT_OK)
        return rc;
    if ((rc = read_header(fd, path, size, 0, use, h)) != TT_OK)
        goto done;
    if ((rc = check_size(h, size, path)) != TT_OK)
        goto done;
    uint64_t bytes = npy_count(h) * h->elem_size;
    if (!(*data = tt_alloc(bytes ? bytes : 1, 1, path))) {
        rc = TT_ENOMEM;
        goto done;
    }
    if ((rc = pread_full(fd, *data, bytes, h->data_offset, path)) != TT_OK) {
        free(*data);
        *data = NULL;
    }
done:
    close(fd);
    return rc;
}

int tt_npy_read_ints(const char *path, int64_t **out, uint64_t *n) {
    tt_npy_header h;
    uint8_t *raw = NULL;
    int64_t *v = NULL;
    char sh[128];
    int rc;
    if (!out || !n)
        return tt_err(TT_EINVAL, "tt_npy_read_ints: NULL argument");
    *out = NULL;
    *n = 0;
    if ((rc = read_whole(path, USE_INTS, &h, &raw)) != TT_OK)
        return rc;
    shape_str(&h, sh, sizeof sh);
    switch (h.dtype) {
    case TT_DT_I8: case TT_DT_U8: case TT_DT_I16: case TT_DT_U16:
    case TT_DT_I32: case TT_DT_U32: case TT_DT_I64: case TT_DT_U64:
        break;
    default:
        rc = dtype_wrong(path, h.dtype, USE_INTS);
        goto done;
    }
    if (!(h.ndim == 1 || (h.ndim == 2 && h.shape[1] == 1))) {
        rc = tt_err(TT_EFORMAT, "%s: expected a 1-D integer array, got shape %s", path, sh);
        goto done;
    }
    uint64_t cnt = h.shape[0];
    if (!(v = tt_alloc(cnt ? cnt : 1, sizeof *v, path))) {
        rc = TT_ENOMEM;
        goto done;
    }
    /* signed types are sign-extended, unsigned ones zero-extended */
    for (uint64_t i = 0; i < cnt; i++) {
        const uint8_t *p = raw + (uint64_t)h.elem_size * i;
        switch (h.dtype) {
        case TT_DT_I8: v[i] = (int8_t)p[0]; break;
        case TT_DT_U8: v[i] = p[0]; break;
        case TT_DT_I16: v[i] = (int16_t)tt_rd16(p); break;
        case TT_DT_U16: v[i] = tt_rd16(p); break;
        case TT_DT_I32: v[i] = (int32_t)tt_rd32(p); break;
        case TT_DT_U32: v[i] = tt_rd32(p); break;
        case TT_DT_I64: v[i] = (int64_t)tt_rd64(p); break;
        default: {
            uint64_t u = tt_rd64(p);
            if (u > (uint64_t)INT64_MAX) {
                rc = tt_err(TT_EVALUE, "%s: element %llu is %llu, above INT64_MAX (%lld), the "
                            "largest integer tartan reads", path, (unsigned long long)i,
                            (unsigned long long)u, (long long)INT64_MAX);
                free(v);
                goto done;
            }
            v[i] = (int64_t)u;
            break;
        }
        }
    }
    *out = v;
    *n = cnt;
done:
    free(raw);
    return rc;
}

int tt_npy_read_floats(const char *path, float **out, tt_npy_header *h) {
    uint8_t *raw = NULL;
    float *v = NULL;
    char sh[128];
    int rc;
    if (!out || !h)
        return tt_err(TT_EINVAL, "tt_npy_read_floats: NULL argument");
    *out = NULL;
    if ((rc = read_whole(path, USE_FLOATS, h, &raw)) != TT_OK)
        return rc;
    if (h->dtype != TT_DT_F32 && h->dtype != TT_DT_F16 && h->dtype != TT_DT_F64) {
        rc = dtype_wrong(path, h->dtype, USE_FLOATS);
        goto done;
    }
    if (h->ndim < 1) {
        shape_str(h, sh, sizeof sh);
        rc = tt_err(TT_EFORMAT, "%s: expected an array, got shape %s", path, sh);
        goto done;
    }
    uint64_t cnt = npy_count(h);
    if (!(v = tt_alloc(cnt ? cnt : 1, sizeof *v, path))) {
        rc = TT_ENOMEM;
        goto done;
    }
    if (h->dtype == TT_DT_F32) {
        memcpy(v, raw, cnt * 4);
        f32_from_le(v, cnt);
    } else if (h->dtype == TT_DT_F64) {
        narrow_f64(v, raw, (size_t)cnt);
    } else {
        for (uint64_t i = 0; i < cnt; i++)
            v[i] = tt_f16_to_f32(tt_rd16(raw + 2 * i));
    }
    *out = v;
done:
    free(raw);
    return rc;
}

/* ------------------------------------------------------------- writer */

static const char *writer_descr(tt_dtype dt, uint32_t *size) {
    switch (dt) {
    case TT_DT_F32: *size = 4; return "<f4";
    case TT_DT_F16: *size = 2; return "<f2";
    case TT_DT_I32: *size = 4; return "<i4";
    case TT_DT_I64: *size = 8; return "<i8";
    default: *size = 0; return NULL;
    }
}

/* Formats the 1.0 header for `rows` into buf. With hlen == 0, returns the padded
 * length numpy would choose for the widest row count (20 digits), so the header
 * never has to move; otherwise pads to exactly hlen. The preamble plus header is a
 * multiple of 64 bytes, as numpy writes it (format.py, ARRAY_ALIGN). */
static size_t writer_header(char *buf, size_t cap, const tt_npy_writer *w, uint64_t rows,
                            size_t hlen) {
    uint32_t es = 0;
    char dict[160];
    const char *descr = writer_descr(w->dtype, &es);
    int k;
    if (w->cols == 0)
        k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                     "'shape': (%llu,), }", descr, (unsigned long long)rows);
    else
        k = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                     "'shape': (%llu, %u), }", descr, (unsigned long long)rows, w->cols);
    size_t dl = (size_t)k;
    if (hlen == 0)
        hlen = ((10 + dl + 1 + 63) / 64) * 64 - 10;
    if (10 + hlen > cap || dl + 1 > hlen)
        return 0;
    memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
    buf[6] = 1;
    buf[7] = 0;
    tt_wr16(buf + 8, (uint16_t)hlen);
    memcpy(buf + 10, dict, dl);
    memset(buf + 10 + dl, ' ', hlen - dl - 1);
    buf[10 + hlen - 1] = '\n';
    return 10 + hlen;
}

int tt_npy_writer_open(tt_npy_writer *w, const char *path, tt_dtype dtype, uint32_t cols) {
    char hdr[256];
    uint32_t es = 0;
    int rc;
    if (!w)
        return tt_err(TT_EINVAL, "tt_npy_writer_open: NULL writer");
    memset(w, 0, sizeof *w);
    w->fd = -1;
    if (!path)
        return tt_err(TT_EINVAL, "tt_npy_writer_open: NULL path");
    if (!writer_descr(dtype, &es))
        return tt_err(TT_EINVAL, "%s: the .npy writer does not support dtype %s", path,
                      dtype_name(dtype));
    w->dtype = dtype;
    w->cols = cols;
    /* size the header for the widest row count, then write it with 0 rows */
    size_t full = writer_header(hdr, sizeof hdr, w, UINT64_MAX, 0);
    w->header_len = full - 10;
    writer_header(hdr, sizeof hdr, w, 0, (size_t)w->header_len);
    if (!(w->path = strdup(path)))
        return tt_err(TT_ENOMEM, "%s: out of memory", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        rc = tt_err_errno(TT_EIO, errno, "%s: cannot create", path);
        free(w->path);
        w->path = NULL;
        return rc;
    }
    if ((rc = write_full(w->fd, hdr, full, path)) != TT_OK) {
        tt_npy_writer_abort(w);
        return rc;
    }
    return TT_OK;
}

int tt_npy_writer_append(tt_npy_writer *w, const void *data, uint64_t n) {
    uint32_t es = 0;
    uint64_t elems, total;
    if (!w || !w->path || w->fd < 0)
        return tt_err(TT_EINVAL, "tt_npy_writer_append: writer is not open");
    if (n == 0)
        return TT_OK;
    if (!data)
        return tt_err(TT_EINVAL, "%s: tt_npy_writer_append: NULL data", w->path);
    writer_descr(w->dtype, &es);
    uint64_t per_row = w->cols ? w->cols : 1;
    if (!tt_mul_ok(n, per_row, &elems) || !tt_add_ok(w->rows, n, &total) ||
        !tt_mul_ok(total, per_row * es, &total) || total > (uint64_t)INT64_MAX / 2)
        return tt_err(TT_ENOMEM, "%s: array size overflows", w->path);
    if (w->dtype == TT_DT_F32 && tt_host_is_le()) {
        const uint8_t *p = (const uint8_t *)data;
        uint64_t bytes = elems * 4;
        while (bytes > 0) {
            size_t m = (size_t)TT_MIN(bytes, (uint64_t)1 << 30);
            int rc = write_full(w->fd, p, m, w->path);
            if (rc != TT_OK)
                return rc;
            p += m;
            bytes -= m;
        }
        w->rows += n;
        return TT_OK;
    }
    enum { B = 4096 };
    uint8_t buf[B * 8];
    const float *f = (const float *)data;
    const int64_t *iv = (const int64_t *)data;
    for (uint64_t i = 0; i < elems; i += B) {
        size_t m = (size_t)TT_MIN((uint64_t)B, elems - i);
        for (size_t j = 0; j < m; j++) {
            uint64_t e = i + j;
            switch (w->dtype) {
            case TT_DT_F32: tt_wrf32(buf + 4 * j, f[e]); break;
            case TT_DT_F16: tt_wr16(buf + 2 * j, tt_f32_to_f16(f[e])); break;
            case TT_DT_I64: tt_wr64(buf + 8 * j, (uint64_t)iv[e]); break;
            default:
                if (iv[e] < INT32_MIN || iv[e] > INT32_MAX)
                    return tt_err(TT_EVALUE, "%s: value %lld at element %llu does not fit "
                                  "int32", w->path, (long long)iv[e], (unsigned long long)e);
                tt_wr32(buf + 4 * j, (uint32_t)(int32_t)iv[e]);
                break;
            }
        }
        int rc = write_full(w->fd, buf, m * es, w->path);
        if (rc != TT_OK)
            return rc;
    }
    w->rows += n;
    return TT_OK;
}

int tt_npy_writer_close(tt_npy_writer *w) {
    char hdr[256];
    int rc;
    if (!w || !w->path || w->fd < 0)
        return tt_err(TT_EINVAL, "tt_npy_writer_close: writer is not open");
    size_t len = writer_header(hdr, sizeof hdr, w, w->rows, (size_t)w->header_len);
    if (len == 0) {
        rc = tt_err(TT_EINVAL, "%s: .npy header does not fit", w->path);
        goto fail;
    }
    if ((rc = pwrite_full(w->fd, hdr, len, 0, w->path)) != TT_OK)
        goto fail;
    if (fsync(w->fd) != 0) {
        rc = tt_err_errno(TT_EIO, errno, "%s: fsync failed", w->path);
        goto fail;
    }
    if (close(w->fd) != 0) {
        w->fd = -1;
        rc = tt_err_errno(TT_EIO, errno, "%s: close failed", w->path);
        goto fail;
    }
    w->fd = -1;
    free(w->path);
    w->path = NULL;
    return TT_OK;
fail:
    tt_npy_writer_abort(w);
    return rc;
}

void tt_npy_writer_abort(tt_npy_writer *w) {
    if (!w || !w->path)
        return;
    if (w->fd >= 0)
        close(w->fd);
    unlink(w->path);
    free(w->path);
    w->path = NULL;
    w->fd = -1;
}

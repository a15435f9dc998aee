/* Readers for vector inputs: NumPy .npy (1.0/2.0/3.0) and .fvecs, plus a streaming
 * .npy writer. Every function reports errors through tt_err with the file name. */
#ifndef TT_NPY_H
#define TT_NPY_H

#include "common/common.h"

typedef enum tt_dtype {
    TT_DT_F32 = 1, /* '<f4' */
    TT_DT_F16,     /* '<f2' */
    TT_DT_BF16,    /* '<u2' read as bfloat16 (explicit flag) */
    TT_DT_I32,     /* '<i4' */
    TT_DT_I64,     /* '<i8' */
    TT_DT_U16,     /* '<u2' when not read as bfloat16 (only accepted as ints) */
    TT_DT_F64,     /* '<f8' (vectors and queries, narrowed to float32 on read) */
    TT_DT_I8,      /* '|i1' (also '<i1'); this and the rest are only accepted as ints */
    TT_DT_U8,      /* '|u1' (also '<u1') */
    TT_DT_I16,     /* '<i2' */
    TT_DT_U32,     /* '<u4' */
    TT_DT_U64      /* '<u8' */
} tt_dtype;

/* A parsed .npy header. ndim <= 3; shape[i] for i >= ndim is 1. */
typedef struct tt_npy_header {
    int major, minor;
    tt_dtype dtype;
    uint32_t elem_size;    /* 1, 2, 4 or 8 */
    int ndim;
    uint64_t shape[3];
    uint64_t data_offset;  /* bytes from the start of the file to the array data */
} tt_npy_header;

/* Parses the header at the start of buf (len bytes: the first bytes of the file; the
 * whole header must be inside them). Safe on arbitrary bytes: never reads outside
 * buf[0, len) and needs no NUL terminator. The dict may list 'descr', 'fortran_order'
 * and 'shape' in any order, with any spacing, single or double quotes, a trailing
 * comma and Python-2 'L' suffixes; other or duplicate keys are malformed.
 * bf16_from_uint16 maps '<u2' to TT_DT_BF16 rather than TT_DT_U16.
 * Errors: TT_EFORMAT (bad magic, truncated, malformed dict, negative dimension, shape
 * whose byte size overflows int64), TT_EVERSION (not 1.0/2.0/3.0), TT_EUNSUPPORTED
 * (big-endian, dtypes other than those of tt_dtype, structured dtypes, ndim > 3,
 * Fortran order with more than one dimension > 1). Which dtypes suit which use is
 * the readers' business below, not the parser's. `path` (may be NULL) is only used in
 * messages. data_offset <= len on success; trailing bytes after the data are allowed. */
int tt_npy_parse_header(const uint8_t *buf, size_t len, const char *path, int bf16_from_uint16,
                        tt_npy_header *h);

enum { TT_VF_NPY = 1, TT_VF_FVECS = 2 };

/* An open 2-D vector file read row by row with pread (thread-safe for reads). */
typedef struct tt_vecfile {
    char *path;
    int fd;
    int kind;            /* TT_VF_NPY or TT_VF_FVECS */
    tt_dtype dtype;      /* F32, F16, BF16 or F64 */
    uint64_t rows;
    uint32_t dim;
    uint64_t data_offset;
    uint64_t row_bytes;  /* bytes per row on disk (fvecs: 4 + 4*dim) */
} tt_vecfile;

/* Opens path as .fvecs (by extension ".fvecs", any case) or else as .npy; checks that
 * the file size holds all rows (truncation -> TT_EFORMAT "truncated: expected N bytes,
 * file has M"). A 1-D or 3-D array is TT_EFORMAT ("expected a 2-D array [num_vectors,
 * dim], got shape (...)"), as are zero rows or dim 0 and an .fvecs size that is not a
 * multiple of its first record. dim > 2^20 and dtypes other than float32, float16,
 * float64 and (with bf16_from_uint16) uint16 as bfloat16 are TT_EUNSUPPORTED, with a
 * message listing those; a missing file TT_ENOTFOUND. On failure *vf is left closed (tt_vecfile_close is a
 * no-op on it). */
int tt_vecfile_open(tt_vecfile *vf, const char *path, int bf16_from_uint16);
/* Reads rows [row0, row0+n) converted to float32 into out (n*dim floats); float64
 * values beyond float32's range become +-inf (IEEE rounding), for the callers' NaN/Inf
 * checks to name. For fvecs, checks each row's dim prefix. Uses pread only: any number of threads may read one
 * open file at once. Errors: TT_EINVAL (range beyond rows), TT_EIO, TT_EFORMAT (short
 * read / bad prefix). */
int tt_vecfile_read(const tt_vecfile *vf, uint64_t row0, uint64_t n, float *out);
void tt_vecfile_close(tt_vecfile *vf);

/* Reads a 1-D (or [n,1] 2-D) integer .npy (int8/16/32/64 or uint8/16/32/64) into a new
 * array of int64 (*out, free() it) with *n elements (may be 0). Other shapes:
 * TT_EFORMAT; other dtypes: TT_EUNSUPPORTED (the message lists the integer dtypes); a
 * uint64 value above INT64_MAX: TT_EVALUE. On failure *out is NULL and *n 0. */
int tt_npy_read_ints(const char *path, int64_t **out, uint64_t *n);

/* Reads a whole small float32/float16/float64 .npy (1 <= ndim <= 3) into float32
 * (free() it; float64 beyond float32's range becomes +-inf); *h receives the header
 * (shape). A 0-d array is TT_EFORMAT, other dtypes TT_EUNSUPPORTED. */
int tt_npy_read_floats(const char *path, float **out, tt_npy_header *h);

/* Streaming .npy (format 1.0) writer whose first dimension grows as rows are
 * appended; the header is rewritten with the final shape by tt_npy_writer_close.
 * dtype: TT_DT_F32, TT_DT_F16, TT_DT_I32 or TT_DT_I64. cols == 0 writes a 1-D array.
 * The file is written to path directly; callers that need atomicity write aside. */
typedef struct tt_npy_writer {
    char *path;
    int fd;
    tt_dtype dtype;
    uint32_t cols;
    uint64_t rows;
    uint64_t header_len;
} tt_npy_writer;

int tt_npy_writer_open(tt_npy_writer *w, const char *path, tt_dtype dtype, uint32_t cols);
/* Appends n rows. For float dtypes data is float32 (converted to f16 if needed); for
 * int dtypes data is int64. */
int tt_npy_writer_append(tt_npy_writer *w, const void *data, uint64_t n);
/* Patches the header with the row count, fsyncs and closes. On failure the file is
 * removed (as by tt_npy_writer_abort). The header reserves room for a 20-digit row
 * count, and preamble + header is a multiple of 64 bytes as numpy writes it. */
int tt_npy_writer_close(tt_npy_writer *w);
/* Closes and removes the file (after an error). A no-op on a closed writer. */
void tt_npy_writer_abort(tt_npy_writer *w);

#endif

/* Text records (id + text) from BEIR .jsonl or TSV files, as doc/encoder-protocol.md
 * section 6 defines, and the JSON member extractor they are parsed with. */
#ifndef TT_INPUT_RECORDS_H
#define TT_INPUT_RECORDS_H

#include "common/common.h"

/* Record limits (doc/encoder-protocol.md sections 2-4). */
#define TT_ENC_MAX_ID 4096u                  /* bytes of a record id */
#define TT_ENC_MAX_TEXT (64u << 20)          /* bytes of a record text */

/* ---------------------------------------------------------------- JSON */

/* Status of a JSON field after tt_json_fields. */
enum { TT_JSON_ABSENT = 0, TT_JSON_STRING = 1, TT_JSON_NUMBER = 2, TT_JSON_OTHER = 3 };

/* Parses one JSON object s[0..n) (surrounding whitespace allowed, nothing else) and
 * extracts the top-level members named keys[0..nkeys): a string value is decoded
 * (every escape, \uXXXX surrogate pairs to UTF-8, lone surrogates to U+FFFD) into
 * vals[i]; a number is copied as written; kinds[i] receives TT_JSON_*. A repeated key
 * keeps its last value. Nested objects and arrays are skipped (depth <= 256).
 * Returns TT_OK, or TT_EPARSE with *err_col (0-based byte offset) and *err_what (a
 * static string) describing the first syntax error; TT_ENOMEM. Does not set tt_err. */
int tt_json_fields(const char *s, size_t n, size_t nkeys, const char *const *keys,
                   tt_sbuf *vals, int *kinds, size_t *err_col, const char **err_what);

/* Literal kinds tt_json_members reports beside TT_JSON_STRING and TT_JSON_NUMBER
 * (TT_JSON_OTHER is then a nested object or array). */
enum { TT_JSON_TRUE = 4, TT_JSON_FALSE = 5, TT_JSON_NULL = 6 };

/* Receives one top-level member: its decoded name (len bytes, NUL-terminated), the kind
 * of its value, and for a string the decoded text, for a number its text as written
 * (val NUL-terminated, vlen bytes; "" otherwise). Returns TT_OK or an error to stop. */
typedef int (*tt_json_member_fn)(void *user, const char *name, size_t len, int kind,
                                 const char *val, size_t vlen);
/* Parses one JSON object s[0..n) as tt_json_fields does and hands every top-level
 * member to fn in order (nested values are validated and reported as TT_JSON_OTHER).
 * Returns TT_OK, fn's error, or TT_EPARSE with *err_col / *err_what set (tt_err not
 * set); TT_ENOMEM. */
int tt_json_members(const char *s, size_t n, tt_json_member_fn fn, void *user, size_t *err_col,
                    const char **err_what);

/* ------------------------------------------------------------- records */

/* A streaming reader of records (id + text) from a BEIR .jsonl or a TSV file, as
 * doc/encoder-protocol.md section 6 defines; texts are assembled for `mode`
 * (TT_ENC_PASSAGE prepends a non-empty title). Bounded memory: one line at a time. */
typedef struct tt_records tt_records;

/* format: TT_REC_AUTO, TT_REC_JSONL or TT_REC_TSV. Errors: TT_ENOTFOUND, TT_EIO,
 * TT_EINVAL (bad format/mode), TT_ENOMEM. */
int tt_records_open(tt_records **out, const char *path, int format, int mode);
/* Next record (pointers valid until the next call): 1, 0 at end of file, or
 * TT_EPARSE / TT_EIO / TT_ENOMEM with a message naming path:line. */
int tt_records_next(tt_records *r, tt_record *rec);
int tt_records_format(const tt_records *r);    /* the resolved TT_REC_JSONL / TT_REC_TSV */
uint64_t tt_records_line(const tt_records *r); /* 1-based line of the last record */
void tt_records_close(tt_records *r);
/* Counts the records in a file without decoding them (non-blank lines, minus a TSV
 * header): the progress total. Returns 0 when the file cannot be read. */
uint64_t tt_records_count(const char *path, int format);

/* Checks an id: 1..TT_ENC_MAX_ID bytes of UTF-8 without whitespace or control
 * characters (tt_id_problem). Returns NULL if fine, else a static description. */
const char *tt_record_id_problem(const char *id, size_t len);

#endif

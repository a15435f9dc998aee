/* Document metadata and filters (doc/metadata.md): the per-generation SQLite database
 * of an index (metadata.tt: a tartan file whose payload is an SQLite database image,
 * opened in memory with sqlite3_deserialize, read-only), the writer that makes the next
 * generation's copy of it (write.c: JSON Lines in, rows added, deleted, renumbered),
 * the read-only connection and the --where evaluator (read.c), and the set of allowed
 * rows search takes (filter.c, the public tt_filter). */
#ifndef TT_META_H
#define TT_META_H

#include "common/common.h"
#include "io/file.h"

#include <sqlite3.h>

#define TT_F_METADATA "metadata.tt"
#define TT_METADATA_KIND "MDAT"

/* The set of allowed rows: num_rows bits, set bits allowed. */
struct tt_filter {
    uint64_t num_rows;
    uint64_t *bits;  /* (num_rows + 63) / 64 words, bits past num_rows zero */
};

static inline bool tt_filter_bit(const tt_filter *f, uint64_t row) {
    return row < f->num_rows && (f->bits[row >> 6] >> (row & 63) & 1);
}

/* ------------------------------------------------------------- write.c */

typedef struct tt_mdb_col {
    char *name;
    char type[8];            /* "null", "integer", "real", "text", "boolean" */
    sqlite3_stmt *update;    /* UPDATE meta SET "name" = ?1 WHERE row = ?2 */
} tt_mdb_col;

/* A metadata database being made for the next generation, in memory. */
typedef struct tt_mdb {
    sqlite3 *db;
    tt_mdb_col *col;
    size_t ncol, col_cap;
    sqlite3_stmt *insert;    /* INSERT INTO meta(row) VALUES (?1) */
    bool in_txn;
} tt_mdb;

/* An empty database: table meta(row INTEGER PRIMARY KEY) and tartan_columns. */
int tt_mdb_create(tt_mdb *m);
/* A writable copy of the database at dir/name, checked against the manifest's size and
 * payload hash (the published file itself is never written). */
int tt_mdb_load(tt_mdb *m, const char *dir, const char *name, uint64_t size, uint64_t hash);
/* dst: a new database holding src's rows [row0, row0 + n), renumbered from 0, with all
 * of src's columns (even those only other rows use): a shard's part of a build's
 * metadata (tt_mdb_append into a new database; src unchanged). */
int tt_mdb_slice(tt_mdb *src, uint64_t row0, uint64_t n, tt_mdb *dst);
/* Appends src's rows [r0, r0 + n) (each present) to dst as rows row0, row0 + 1, ...,
 * with their values by column name: columns dst lacks are added, types combine as the
 * JSON reader's (null takes the other; integer and real make real), other mixes are
 * TT_EUNSUPPORTED. src NULL: rows of NULLs. (Resharding: a new shard's rows from the
 * source's parts.) */
int tt_mdb_append(tt_mdb *dst, tt_mdb *src, uint64_t r0, uint64_t n, uint64_t row0);
/* Rows row0 .. row0 + n with every column NULL. */
int tt_mdb_insert_null(tt_mdb *m, uint64_t row0, uint64_t n);
/* Rows row0 .. row0 + ndocs from the JSON Lines file `path`: one object per document,
 * in document order, or keyed by a string member "id" (when the first object has one)
 * naming each document once by its id (ids: NUL-terminated at id_off, NULL for the row
 * numbers 0..ndocs-1 as text). Errors name path:line (TT_EPARSE, TT_EVALUE, TT_EDIM). */
int tt_mdb_read_jsonl(tt_mdb *m, const char *path, uint64_t row0, uint64_t ndocs,
                      const char *ids_blob, const uint64_t *id_off);
/* Removes rows (any order; each present). */
int tt_mdb_delete(tt_mdb *m, const uint64_t *rows, size_t n);
/* Renumbers the rows 0, 1, ... in their order (a compaction). */
int tt_mdb_renumber(tt_mdb *m);
/* Number of rows. */
int tt_mdb_count(tt_mdb *m, uint64_t *n);
/* Writes the database as dir/name (kind MDAT, a = rows, b = columns), fsynced; fills
 * the manifest entry *e. */
int tt_mdb_write(tt_mdb *m, const char *dir, const char *name, tt_manifest_entry *e);
void tt_mdb_free(tt_mdb *m);

/* -------------------------------------------------------------- read.c */

/* A read-only connection to the database image payload[0..n) (a mapping that outlives
 * it): deserialized in place, never written; extensions, ATTACH and writes disabled. */
int tt_mdb_open_ro(sqlite3 **db, const uint8_t *payload, uint64_t n, const char *path);
/* PRAGMA integrity_check, the tables, and that meta holds exactly the rows for which
 * live(user, row) holds, each < num_rows. */
int tt_mdb_verify(const uint8_t *payload, uint64_t n, const char *path, uint64_t num_rows,
                  uint64_t live_rows, bool (*live)(const void *user, uint64_t row),
                  const void *user);
/* The allowed rows of `expr` (an SQL expression over the columns), as
 * SELECT row FROM meta WHERE (expr): one statement, read-only (an authorizer allows only
 * reads and functions), bounded in steps. Rows >= num_rows are TT_ECORRUPT. */
int tt_mdb_where(sqlite3 *db, const char *path, const char *expr, uint64_t num_rows,
                 tt_filter **out);
/* The columns as tartan_columns lists them (name, type), in order. */
int tt_mdb_columns(sqlite3 *db, const char *path, char ***names, char ***types, size_t *n);
/* Row `row` as a JSON object (malloc'd), or "null" when the row has none. */
int tt_mdb_row_json(sqlite3 *db, const char *path, uint64_t row, char **json);

/* ------------------------------------------------------------ filter.c */

int tt_filter_alloc(tt_filter **out, uint64_t num_rows);

#endif

/* The metadata database of the next generation, made in memory: created empty or
 * copied from the current generation's file, changed (JSON Lines rows added, rows
 * deleted or renumbered) and written as a new tartan file, which the change publishes
 * with its manifest. A published file is never written again. */
#include "meta/meta.h"

#include "common/strtab.h"
#include "input/records.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_COLUMNS 1000      /* below SQLite's default SQLITE_MAX_COLUMN (2000) */
#define MAX_NAME 256          /* bytes of a column name */

static int sql_err(sqlite3 *db, int st, const char *what) {
    return tt_err(st, "metadata: %s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

static int exec(tt_mdb *m, const char *sql) {
    char *msg = NULL;
    if (sqlite3_exec(m->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int st = tt_err(TT_EIO, "metadata: %s: %s", sql, msg ? msg : sqlite3_errmsg(m->db));
        sqlite3_free(msg);
        return st;
    }
    return TT_OK;
}

static int begin(tt_mdb *m) {
    if (m->in_txn)
        return TT_OK;
    int st = exec(m, "BEGIN");
    m->in_txn = !st;
    return st;
}

/* A quoted SQL identifier ("a""b") into buf of at least 2 * MAX_NAME + 3 bytes. */
static void quote_ident(char *buf, const char *name) {
    char *p = buf;
    *p++ = '"';
    for (const char *s = name; *s; s++) {
        if (*s == '"')
            *p++ = '"';
        *p++ = *s;
    }
    *p++ = '"';
    *p = 0;
}

static int connect(tt_mdb *m) {
    memset(m, 0, sizeof *m);
    if (sqlite3_open_v2(":memory:", &m->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                        NULL) != SQLITE_OK) {
        int st = sql_err(m->db, TT_ENOMEM, "cannot open an in-memory database");
        sqlite3_close(m->db);
        m->db = NULL;
        return st;
    }
    sqlite3_db_config(m->db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)NULL);
    sqlite3_limit(m->db, SQLITE_LIMIT_ATTACHED, 0);
    return TT_OK;
}

static int prepare_insert(tt_mdb *m) {
    if (sqlite3_prepare_v2(m->db, "INSERT INTO meta(row) VALUES (?1)", -1, &m->insert, NULL))
        return sql_err(m->db, TT_ECORRUPT, "table meta");
    return TT_OK;
}

static int add_col(tt_mdb *m, const char *name, const char *type) {
    int st = tt_grow((void **)&m->col, &m->col_cap, m->ncol + 1, sizeof *m->col, "metadata");
    if (st)
        return st;
    tt_mdb_col *c = &m->col[m->ncol];
    memset(c, 0, sizeof *c);
    if (!(c->name = strdup(name)))
        return tt_err(TT_ENOMEM, "metadata: out of memory");
    snprintf(c->type, sizeof c->type, "%s", type);
    m->ncol++;
    char q[2 * MAX_NAME + 3], sql[2 * MAX_NAME + 64];
    quote_ident(q, name);
    snprintf(sql, sizeof sql, "UPDATE meta SET %s = ?1 WHERE row = ?2", q);
    if (sqlite3_prepare_v2(m->db, sql, -1, &c->update, NULL))
        return sql_err(m->db, TT_ECORRUPT, "a column");
    return TT_OK;
}

int tt_mdb_create(tt_mdb *m) {
    int st = connect(m);
    if (st)
        return st;
    if ((st = exec(m, "CREATE TABLE meta(row INTEGER PRIMARY KEY);"
                      "CREATE TABLE tartan_columns(pos INTEGER PRIMARY KEY, "
                      "name TEXT NOT NULL UNIQUE COLLATE NOCASE, type TEXT NOT NULL)")) ||
        (st = prepare_insert(m)))
        tt_mdb_free(m);
    return st;
}

/* m (connected) takes the database image buf[0..n) (sqlite3_malloc'd; freed by SQLite
 * whatever happens) as its own, writable, with its columns. Frees m on failure. */
static int adopt_image(tt_mdb *m, unsigned char *buf, uint64_t n, const char *path) {
    int st = TT_OK;
    if (sqlite3_deserialize(m->db, "main", buf, (sqlite3_int64)n, (sqlite3_int64)n,
                            SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE)) {
        st = tt_err(TT_ECORRUPT, "%s: not a metadata database: %s", path,
                    sqlite3_errmsg(m->db));
        goto fail;
    }
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(m->db, "SELECT name, type FROM tartan_columns ORDER BY pos", -1, &q,
                           NULL)) {
        st = tt_err(TT_ECORRUPT, "%s: not a metadata database: %s", path,
                    sqlite3_errmsg(m->db));
        goto fail;
    }
    int rc;
    while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW)
        st = add_col(m, (const char *)sqlite3_column_text(q, 0),
                     (const char *)sqlite3_column_text(q, 1));
    sqlite3_finalize(q);
    if (!st)
        st = prepare_insert(m);
    if (!st)
        return TT_OK;
fail:
    tt_mdb_free(m);
    return st;
}

int tt_mdb_load(tt_mdb *m, const char *dir, const char *name, uint64_t size, uint64_t hash) {
    tt_fmap f;
    int st = tt_fmap_open(&f, dir, name, TT_METADATA_KIND, TT_MAP_WHOLE);
    if (st)
        return st;
    if (f.size != size || f.h.payload_hash != hash)
        st = tt_err(TT_ECORRUPT, "%s: does not match the manifest", f.path);
    if (!st)
        st = tt_fmap_check_payload(&f, NULL, NULL);
    if (!st)
        st = connect(m);
    if (st) {
        tt_fmap_close(&f);
        return st;
    }
    uint64_t n = f.h.payload_bytes;
    unsigned char *buf = sqlite3_malloc64(n ? n : 1);
    if (!buf) {
        tt_fmap_close(&f);
        tt_mdb_free(m);
        return tt_err(TT_ENOMEM, "%s: out of memory", name);
    }
    memcpy(buf, f.payload, (size_t)n);
    st = adopt_image(m, buf, n, f.path);
    tt_fmap_close(&f);
    return st;
}

int tt_mdb_slice(tt_mdb *src, uint64_t row0, uint64_t n, tt_mdb *dst) {
    /* only the slice's rows are read and written: S shards cost one pass over the
     * rows, not S copies of the whole database */
    int st = tt_mdb_create(dst);
    if (st)
        return st;
    if ((st = tt_mdb_append(dst, src, row0, n, 0)))
        tt_mdb_free(dst);
    return st;
}

static int insert_row(tt_mdb *m, uint64_t row, const char *path, uint64_t line) {
    sqlite3_reset(m->insert);
    sqlite3_bind_int64(m->insert, 1, (sqlite3_int64)row);
    if (sqlite3_step(m->insert) != SQLITE_DONE)
        return line ? tt_err(TT_EINVAL, "%s:%llu: %s", path, (unsigned long long)line,
                             sqlite3_errmsg(m->db))
                    : sql_err(m->db, TT_EIO, "insert");
    return TT_OK;
}

int tt_mdb_insert_null(tt_mdb *m, uint64_t row0, uint64_t n) {
    int st = begin(m);
    for (uint64_t r = 0; r < n && !st; r++)
        st = insert_row(m, row0 + r, NULL, 0);
    return st;
}

/* ---------------------------------------------------------- JSON Lines */

typedef struct jl {
    tt_mdb *m;
    const char *path;
    uint64_t line, row;
    int st;
} jl;

static const char *kind_type(int kind, const char *val) {
    switch (kind) {
    case TT_JSON_STRING: return "text";
    case TT_JSON_TRUE:
    case TT_JSON_FALSE: return "boolean";
    case TT_JSON_NULL: return "null";
    case TT_JSON_NUMBER: {
        if (strpbrk(val, ".eE"))
            return "real";
        errno = 0;
        char *end;
        (void)strtoll(val, &end, 10);
        return errno == ERANGE ? "real" : "integer";
    }
    default: return NULL;
    }
}

/* The column named name (case-insensitively), or m->ncol. */
static size_t find_col(const tt_mdb *m, const char *name) {
    size_t c = 0;
    while (c < m->ncol && sqlite3_stricmp(m->col[c].name, name))
        c++;
    return c;
}

/* A new column `name` of `type` at the end of meta, listed in tartan_columns. */
static int create_col(tt_mdb *m, const char *name, const char *type) {
    char q[2 * MAX_NAME + 3], sql[2 * MAX_NAME + 64];
    quote_ident(q, name);
    snprintf(sql, sizeof sql, "ALTER TABLE meta ADD COLUMN %s", q);
    int st = exec(m, sql);
    if (st)
        return st;
    sqlite3_stmt *ins;
    if (sqlite3_prepare_v2(m->db, "INSERT INTO tartan_columns(pos, name, type) "
                                  "VALUES (?1, ?2, ?3)", -1, &ins, NULL))
        return sql_err(m->db, TT_EIO, "tartan_columns");
    sqlite3_bind_int64(ins, 1, (sqlite3_int64)m->ncol);
    sqlite3_bind_text(ins, 2, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(ins, 3, type, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(ins);
    sqlite3_finalize(ins);
    if (rc != SQLITE_DONE)
        return sql_err(m->db, TT_EIO, "tartan_columns");
    return add_col(m, name, type);
}

/* Column c's type becomes t (in tartan_columns and m). */
static int set_col_type(tt_mdb *m, size_t c, const char *t) {
    sqlite3_stmt *up;
    if (sqlite3_prepare_v2(m->db, "UPDATE tartan_columns SET type = ?1 WHERE pos = ?2", -1, &up,
                           NULL))
        return sql_err(m->db, TT_EIO, "tartan_columns");
    sqlite3_bind_text(up, 1, t, -1, SQLITE_STATIC);
    sqlite3_bind_int64(up, 2, (sqlite3_int64)c);
    int rc = sqlite3_step(up);
    sqlite3_finalize(up);
    if (rc != SQLITE_DONE)
        return sql_err(m->db, TT_EIO, "tartan_columns");
    snprintf(m->col[c].type, sizeof m->col[c].type, "%s", t);
    return TT_OK;
}

static int member(void *user, const char *name, size_t len, int kind, const char *val,
                  size_t vlen) {
    jl *j = user;
    tt_mdb *m = j->m;
    int st;
    if (len == 0 || len > MAX_NAME || strlen(name) != len)
        return tt_err(TT_EVALUE, "%s:%llu: a member name must be 1..%d bytes without NUL",
                      j->path, (unsigned long long)j->line, MAX_NAME);
    if (!sqlite3_stricmp(name, "row"))
        return tt_err(TT_EVALUE, "%s:%llu: the member name 'row' is reserved (the document's "
                      "row in the index)", j->path, (unsigned long long)j->line);
    if (tt_utf8_invalid_at(name, len) != SIZE_MAX)
        return tt_err(TT_EVALUE, "%s:%llu: member name is not valid UTF-8", j->path,
                      (unsigned long long)j->line);
    const char *type = kind_type(kind, val);
    if (!type)
        return tt_err(TT_EVALUE, "%s:%llu: member '%s' is an object or an array; metadata "
                      "values are strings, numbers, booleans or null", j->path,
                      (unsigned long long)j->line, name);
    size_t c = find_col(m, name);
    if (c == m->ncol) {
        if (m->ncol >= MAX_COLUMNS)
            return tt_err(TT_EVALUE, "%s:%llu: more than %d metadata columns", j->path,
                          (unsigned long long)j->line, MAX_COLUMNS);
        if ((st = create_col(m, name, type)))
            return st;
    }
    tt_mdb_col *col = &m->col[c];
    if (strcmp(type, "null") && strcmp(type, col->type)) {
        const char *t = NULL;
        if (!strcmp(col->type, "null"))
            t = type;
        else if ((!strcmp(col->type, "integer") && !strcmp(type, "real")))
            t = "real"; /* numbers mix: the column becomes real */
        else if (!strcmp(col->type, "real") && !strcmp(type, "integer"))
            t = NULL, type = "real";
        else
            return tt_err(TT_EVALUE, "%s:%llu: member '%s' is %s %s, but column '%s' holds "
                          "%s values (mixed types are refused)", j->path,
                          (unsigned long long)j->line, name,
                          !strcmp(type, "integer") ? "an" : "a", type, col->name, col->type);
        if (t && (st = set_col_type(m, c, t)))
            return st;
    }
    sqlite3_stmt *u = col->update;
    sqlite3_reset(u);
    switch (kind) {
    case TT_JSON_STRING:
        sqlite3_bind_text64(u, 1, val, vlen, SQLITE_TRANSIENT, SQLITE_UTF8);
        break;
    case TT_JSON_TRUE:
    case TT_JSON_FALSE:
        sqlite3_bind_int64(u, 1, kind == TT_JSON_TRUE);
        break;
    case TT_JSON_NULL:
        sqlite3_bind_null(u, 1);
        break;
    default:
        if (!strcmp(kind_type(kind, val), "integer") && strcmp(col->type, "real"))
            sqlite3_bind_int64(u, 1, strtoll(val, NULL, 10));
        else
            sqlite3_bind_double(u, 1, strtod(val, NULL));
        break;
    }
    sqlite3_bind_int64(u, 2, (sqlite3_int64)j->row);
    if (sqlite3_step(u) != SQLITE_DONE)
        return sql_err(m->db, TT_EIO, "update");
    return TT_OK;
}

/* Existing rows of a column that became real hold integers: make them real. */
static int fix_reals(tt_mdb *m) {
    for (size_t c = 0; c < m->ncol; c++) {
        if (strcmp(m->col[c].type, "real"))
            continue;
        /* Three quoted names of up to 2 * MAX_NAME + 2 bytes each and the text. */
        char q[2 * MAX_NAME + 3], sql[3 * (2 * MAX_NAME + 3) + 96];
        quote_ident(q, m->col[c].name);
        snprintf(sql, sizeof sql, "UPDATE meta SET %s = CAST(%s AS REAL) WHERE typeof(%s) = "
                 "'integer'", q, q, q);
        int st = exec(m, sql);
        if (st)
            return st;
    }
    return TT_OK;
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return false;
    return true;
}

int tt_mdb_read_jsonl(tt_mdb *m, const char *path, uint64_t row0, uint64_t ndocs,
                      const char *ids_blob, const uint64_t *id_off) {
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return tt_err_errno(errno == ENOENT ? TT_ENOTFOUND : TT_EIO, errno, "%s", path);
    tt_strtab ids;
    memset(&ids, 0, sizeof ids);
    uint8_t *seen = NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint64_t lineno = 0, objects = 0;
    int keyed = -1, st = begin(m);
    tt_sbuf idv = {0};
    jl j = {m, path, 0, 0, TT_OK};
    while (!st && (len = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        if (blank(line, (size_t)len))
            continue;
        if (memchr(line, 0, (size_t)len)) {
            st = tt_err(TT_EPARSE, "%s:%llu: a NUL byte", path, (unsigned long long)lineno);
            break;
        }
        size_t col = 0;
        const char *what = NULL;
        static const char *const idkey[] = {"id"};
        int idkind = 0;
        st = tt_json_fields(line, (size_t)len, 1, idkey, &idv, &idkind, &col, &what);
        if (st) {
            st = st == TT_EPARSE ? tt_err(TT_EPARSE, "%s:%llu:%zu: invalid JSON: %s", path,
                                          (unsigned long long)lineno, col + 1,
                                          what ? what : "syntax error")
                                 : st;
            break;
        }
        if (keyed < 0) {
            keyed = idkind == TT_JSON_STRING;
            if (keyed) {
                if (!(seen = tt_calloc(ndocs ? ndocs : 1, 1, "metadata")))
                    st = TT_ENOMEM;
                for (uint64_t d = 0; d < ndocs && !st; d++) {
                    char num[24];
                    const char *s = num;
                    size_t n;
                    if (ids_blob) {
                        s = ids_blob + id_off[d];
                        n = (size_t)(id_off[d + 1] - id_off[d] - 1);
                    } else {
                        n = (size_t)snprintf(num, sizeof num, "%llu", (unsigned long long)d);
                    }
                    uint32_t id;
                    st = tt_st_intern(&ids, s, n, &id, NULL);
                }
                if (st)
                    break;
            }
        }
        if (keyed) {
            if (idkind != TT_JSON_STRING) {
                st = tt_err(TT_EPARSE, "%s:%llu: no string member \"id\" (the file is keyed by "
                            "id: its first object has one)", path, (unsigned long long)lineno);
                break;
            }
            uint32_t d = tt_st_find(&ids, idv.p ? idv.p : "", idv.len);
            if (d == TT_ST_NONE || d >= ndocs) {
                st = tt_err(TT_EVALUE, "%s:%llu: id '%.*s' is not one of the %llu documents",
                            path, (unsigned long long)lineno, (int)TT_MIN(idv.len, 200),
                            idv.p ? idv.p : "", (unsigned long long)ndocs);
                break;
            }
            if (seen[d]) {
                st = tt_err(TT_EVALUE, "%s:%llu: id '%.*s' has metadata on an earlier line",
                            path, (unsigned long long)lineno, (int)TT_MIN(idv.len, 200),
                            idv.p);
                break;
            }
            seen[d] = 1;
            j.row = row0 + d;
        } else {
            if (objects >= ndocs) {
                st = tt_err(TT_EDIM, "%s:%llu: more lines than the %llu documents", path,
                            (unsigned long long)lineno, (unsigned long long)ndocs);
                break;
            }
            j.row = row0 + objects;
        }
        objects++;
        j.line = lineno;
        if ((st = insert_row(m, j.row, path, lineno)))
            break;
        st = tt_json_members(line, (size_t)len, member, &j, &col, &what);
        if (st == TT_EPARSE && what)
            st = tt_err(TT_EPARSE, "%s:%llu:%zu: invalid JSON: %s", path,
                        (unsigned long long)lineno, col + 1, what);
    }
    if (!st && ferror(fp))
        st = tt_err_errno(TT_EIO, errno, "%s", path);
    if (!st && objects < ndocs) {
        if (keyed == 1) {
            uint64_t d = 0;
            while (d < ndocs && seen[d])
                d++;
            st = tt_err(TT_EDIM, "%s: %llu of the %llu documents have no line (the first: "
                        "'%s')", path, (unsigned long long)(ndocs - objects),
                        (unsigned long long)ndocs, tt_st_str(&ids, (uint32_t)d));
        } else {
            st = tt_err(TT_EDIM, "%s: %llu lines for %llu documents (one JSON object per "
                        "document, in document order, or keyed by \"id\")", path,
                        (unsigned long long)objects, (unsigned long long)ndocs);
        }
    }
    if (!st)
        st = fix_reals(m);
    free(line);
    free(seen);
    tt_sbuf_free(&idv);
    tt_st_free(&ids);
    fclose(fp);
    return st;
}

/* ------------------------------------------------------ deletions, compaction */

int tt_mdb_delete(tt_mdb *m, const uint64_t *rows, size_t n) {
    int st = begin(m);
    if (st)
        return st;
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(m->db, "DELETE FROM meta WHERE row = ?1", -1, &q, NULL))
        return sql_err(m->db, TT_EIO, "delete");
    for (size_t i = 0; i < n && !st; i++) {
        sqlite3_reset(q);
        sqlite3_bind_int64(q, 1, (sqlite3_int64)rows[i]);
        if (sqlite3_step(q) != SQLITE_DONE)
            st = sql_err(m->db, TT_EIO, "delete");
        else if (sqlite3_changes(m->db) != 1)
            st = tt_err(TT_ECORRUPT, "metadata: row %llu to delete is not in the database",
                        (unsigned long long)rows[i]);
    }
    sqlite3_finalize(q);
    return st;
}

int tt_mdb_renumber(tt_mdb *m) {
    int st = begin(m);
    if (st)
        return st;
    /* Ascending: row r moves to its rank i <= r, which no row holds any more. */
    sqlite3_stmt *sel, *up;
    if (sqlite3_prepare_v2(m->db, "SELECT row FROM meta ORDER BY row", -1, &sel, NULL))
        return sql_err(m->db, TT_EIO, "renumber");
    if (sqlite3_prepare_v2(m->db, "UPDATE meta SET row = ?1 WHERE row = ?2", -1, &up, NULL)) {
        sqlite3_finalize(sel);
        return sql_err(m->db, TT_EIO, "renumber");
    }
    uint64_t *rows = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while (!st && (rc = sqlite3_step(sel)) == SQLITE_ROW) {
        if ((st = tt_grow((void **)&rows, &cap, n + 1, sizeof *rows, "metadata")))
            break;
        rows[n++] = (uint64_t)sqlite3_column_int64(sel, 0);
    }
    sqlite3_finalize(sel);
    for (size_t i = 0; i < n && !st; i++) {
        if (rows[i] == i)
            continue;
        sqlite3_reset(up);
        sqlite3_bind_int64(up, 1, (sqlite3_int64)i);
        sqlite3_bind_int64(up, 2, (sqlite3_int64)rows[i]);
        if (sqlite3_step(up) != SQLITE_DONE)
            st = sql_err(m->db, TT_EIO, "renumber");
    }
    sqlite3_finalize(up);
    free(rows);
    return st;
}

int tt_mdb_count(tt_mdb *m, uint64_t *n) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(m->db, "SELECT count(*) FROM meta", -1, &q, NULL))
        return sql_err(m->db, TT_EIO, "count");
    int rc = sqlite3_step(q);
    *n = rc == SQLITE_ROW ? (uint64_t)sqlite3_column_int64(q, 0) : 0;
    sqlite3_finalize(q);
    return rc == SQLITE_ROW ? TT_OK : sql_err(m->db, TT_EIO, "count");
}

int tt_mdb_write(tt_mdb *m, const char *dir, const char *name, tt_manifest_entry *e) {
    int st;
    if (m->in_txn) {
        if ((st = exec(m, "COMMIT")))
            return st;
        m->in_txn = false;
    }
    uint64_t rows;
    if ((st = tt_mdb_count(m, &rows)))
        return st;
    sqlite3_int64 size = 0;
    unsigned char *img = sqlite3_serialize(m->db, "main", &size, 0);
    if (!img)
        return tt_err(TT_ENOMEM, "metadata: cannot serialize the database (out of memory)");
    tt_fwriter w;
    uint64_t fsize = 0;
    if (!(st = tt_fw_open(&w, dir, name, TT_METADATA_KIND))) {
        if (!(st = tt_fw_write(&w, img, (size_t)size)))
            st = tt_fw_finish(&w, rows, m->ncol, 0, &fsize);
        if (!st) {
            memset(e, 0, sizeof *e);
            snprintf(e->name, sizeof e->name, "%s", name);
            memcpy(e->kind, TT_METADATA_KIND, 4);
            e->size = fsize;
            e->payload_hash = w.h.payload_hash;
        }
        tt_fw_abort(&w);
    }
    sqlite3_free(img);
    return st;
}

/* dst's column `name` of src's type, created if missing; the types combine as the
 * JSON reader's do (null takes the other; integer and real make real); others refuse. */
static int merge_col(tt_mdb *dst, const char *name, const char *type, size_t *out) {
    size_t c = find_col(dst, name);
    *out = c;
    if (c == dst->ncol) {
        if (dst->ncol >= MAX_COLUMNS)
            return tt_err(TT_EVALUE, "metadata: more than %d columns", MAX_COLUMNS);
        return create_col(dst, name, type);
    }
    const char *have = dst->col[c].type, *t = NULL;
    if (!strcmp(type, have) || !strcmp(type, "null"))
        return TT_OK;
    if (!strcmp(have, "null"))
        t = type;
    else if ((!strcmp(have, "integer") && !strcmp(type, "real")) ||
             (!strcmp(have, "real") && !strcmp(type, "integer")))
        t = "real";
    else
        return tt_err(TT_EUNSUPPORTED, "metadata: column '%s' holds %s values in one part and "
                      "%s values in another: they cannot be merged", name, have, type);
    if (!strcmp(t, have))
        return TT_OK;
    int st = set_col_type(dst, c, t);
    return st ? st : fix_reals(dst);
}

int tt_mdb_append(tt_mdb *dst, tt_mdb *src, uint64_t r0, uint64_t n, uint64_t row0) {
    int st = begin(dst);
    if (st)
        return st;
    if (!src)
        return tt_mdb_insert_null(dst, row0, n);
    size_t *map = calloc(src->ncol ? src->ncol : 1, sizeof *map);
    if (!map)
        return tt_err(TT_ENOMEM, "metadata: out of memory");
    for (size_t c = 0; c < src->ncol && !st; c++)
        st = merge_col(dst, src->col[c].name, src->col[c].type, &map[c]);
    /* SELECT row, "c0", "c1", ... FROM meta WHERE row >= ?1 AND row < ?2 ORDER BY row */
    size_t cap = 96 + src->ncol * (2 * MAX_NAME + 4);
    char *sql = st ? NULL : malloc(cap);
    if (!st && !sql)
        st = tt_err(TT_ENOMEM, "metadata: out of memory");
    sqlite3_stmt *q = NULL;
    if (!st) {
        size_t len = (size_t)snprintf(sql, cap, "SELECT row");
        for (size_t c = 0; c < src->ncol; c++) {
            char qn[2 * MAX_NAME + 3];
            quote_ident(qn, src->col[c].name);
            len += (size_t)snprintf(sql + len, cap - len, ", %s", qn);
        }
        snprintf(sql + len, cap - len, " FROM meta WHERE row >= ?1 AND row < ?2 ORDER BY row");
        if (sqlite3_prepare_v2(src->db, sql, -1, &q, NULL))
            st = sql_err(src->db, TT_EIO, "a copy of rows");
    }
    uint64_t got = 0;
    if (!st) {
        sqlite3_bind_int64(q, 1, (sqlite3_int64)r0);
        sqlite3_bind_int64(q, 2, (sqlite3_int64)(r0 + n));
        int rc;
        while (!st && (rc = sqlite3_step(q)) == SQLITE_ROW) {
            const uint64_t row = row0 + got++;
            if ((st = insert_row(dst, row, NULL, 0)))
                break;
            for (size_t c = 0; c < src->ncol && !st; c++) {
                sqlite3_stmt *u = dst->col[map[c]].update;
                sqlite3_reset(u);
                sqlite3_bind_value(u, 1, sqlite3_column_value(q, (int)c + 1));
                sqlite3_bind_int64(u, 2, (sqlite3_int64)row);
                if (sqlite3_step(u) != SQLITE_DONE)
                    st = sql_err(dst->db, TT_EIO, "update");
            }
        }
        if (!st && got != n)
            st = tt_err(TT_ECORRUPT, "metadata: %llu rows from row %llu, but %llu are there",
                        (unsigned long long)n, (unsigned long long)r0, (unsigned long long)got);
    }
    sqlite3_finalize(q);
    free(sql);
    free(map);
    if (!st)
        st = fix_reals(dst);
    return st;
}

void tt_mdb_free(tt_mdb *m) {
    for (size_t c = 0; c < m->ncol; c++) {
        sqlite3_finalize(m->col[c].update);
        free(m->col[c].name);
    }
    free(m->col);
    sqlite3_finalize(m->insert);
    if (m->db)
        sqlite3_close(m->db);
    memset(m, 0, sizeof *m);
}

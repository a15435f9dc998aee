/* Reading the metadata database of an open index: a read-only in-memory connection
 * over the file's mapping, the --where evaluator (the one place user SQL runs, so it
 * is fenced: one statement, an authorizer that allows reads and functions only, no
 * ATTACH, no extensions, a bound on the work), the columns and a row as JSON. */
#include "meta/meta.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int tt_mdb_open_ro(sqlite3 **out, const uint8_t *payload, uint64_t n, const char *path) {
    sqlite3 *db = NULL;
    *out = NULL;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        sqlite3_close(db);
        return tt_err(TT_ENOMEM, "%s: cannot open the metadata database", path);
    }
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, (int *)NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, (int *)NULL);
    sqlite3_db_config(db, SQLITE_DBCONFIG_ENABLE_VIEW, 0, (int *)NULL);
    sqlite3_limit(db, SQLITE_LIMIT_ATTACHED, 0);
    sqlite3_limit(db, SQLITE_LIMIT_SQL_LENGTH, 1 << 20);
    sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 1 << 26);
    /* In place and read-only: the image is the file's mapping, never copied nor
     * written (no FREEONCLOSE, no RESIZEABLE). */
    if (sqlite3_deserialize(db, "main", (unsigned char *)(uintptr_t)payload, (sqlite3_int64)n,
                            (sqlite3_int64)n, SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
        int st = tt_err(TT_ECORRUPT, "%s: not a metadata database: %s", path,
                        sqlite3_errmsg(db));
        sqlite3_close(db);
        return st;
    }
    *out = db;
    return TT_OK;
}

int tt_mdb_columns(sqlite3 *db, const char *path, char ***names, char ***types, size_t *n) {
    sqlite3_stmt *q;
    *names = *types = NULL;
    *n = 0;
    if (sqlite3_prepare_v2(db, "SELECT name, type FROM tartan_columns ORDER BY pos", -1, &q,
                           NULL))
        return tt_err(TT_ECORRUPT, "%s: not a metadata database: %s", path, sqlite3_errmsg(db));
    size_t cap = 0, cap2 = 0;
    int st = TT_OK, rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if ((st = tt_grow((void **)names, &cap, *n + 1, sizeof **names, "columns")) ||
            (st = tt_grow((void **)types, &cap2, *n + 1, sizeof **types, "columns")))
            break;
        const char *a = (const char *)sqlite3_column_text(q, 0);
        const char *b = (const char *)sqlite3_column_text(q, 1);
        (*names)[*n] = strdup(a ? a : "");
        (*types)[*n] = strdup(b ? b : "");
        (*n)++;
        if (!(*names)[*n - 1] || !(*types)[*n - 1]) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", path);
            break;
        }
    }
    if (!st && rc != SQLITE_DONE && rc != SQLITE_ROW)
        st = tt_err(TT_ECORRUPT, "%s: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(q);
    if (st) {
        for (size_t i = 0; i < *n; i++) {
            free((*names)[i]);
            free((*types)[i]);
        }
        free(*names);
        free(*types);
        *names = *types = NULL;
        *n = 0;
    }
    return st;
}

/* ------------------------------------------------------------------ where */

/* Reads and functions only: no writes, no pragmas, no ATTACH, no transactions, no
 * recursive CTEs (unbounded work), and never load_extension. */
static int authorize(void *user, int action, const char *a3, const char *a4, const char *db,
                     const char *trigger) {
    (void)user;
    (void)a3;
    (void)db;
    (void)trigger;
    switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
        return SQLITE_OK;
    case SQLITE_FUNCTION:
        return a4 && !sqlite3_stricmp(a4, "load_extension") ? SQLITE_DENY : SQLITE_OK;
    default:
        return SQLITE_DENY;
    }
}

typedef struct budget {
    uint64_t ticks, max;
} budget;

static int progress(void *user) {
    budget *b = user;
    return ++b->ticks > b->max; /* non-zero interrupts the statement */
}

int tt_mdb_where(sqlite3 *db, const char *path, const char *expr, uint64_t num_rows,
                 tt_filter **out) {
    *out = NULL;
    if (!expr)
        return tt_err(TT_EINVAL, "filter: no expression");
    size_t len = strlen(expr);
    size_t i = 0;
    while (i < len && (expr[i] == ' ' || expr[i] == '\t' || expr[i] == '\n' || expr[i] == '\r'))
        i++;
    if (i == len)
        return tt_err(TT_EINVAL, "filter: empty expression");
    if (len > (1u << 16))
        return tt_err(TT_EINVAL, "filter: the expression is longer than 64 KiB");
    const char *head = "SELECT row FROM meta WHERE (";
    char *sql = malloc(strlen(head) + len + 3);
    if (!sql)
        return tt_err(TT_ENOMEM, "filter: out of memory");
    sprintf(sql, "%s%s\n)", head, expr);
    sqlite3_stmt *q = NULL;
    const char *tail = NULL;
    int st = TT_OK;
    sqlite3_set_authorizer(db, authorize, NULL);
    int rc = sqlite3_prepare_v3(db, sql, -1, 0, &q, &tail);
    sqlite3_set_authorizer(db, NULL, NULL);
    if (rc != SQLITE_OK || !q) {
        st = tt_err(TT_EINVAL, "filter '%s': %s", expr,
                    rc == SQLITE_AUTH ? "refused: a filter may only read the metadata"
                                      : sqlite3_errmsg(db));
        goto done;
    }
    for (const char *t = tail; t && *t; t++)
        if (*t != ' ' && *t != '\t' && *t != '\n' && *t != '\r' && *t != ';') {
            st = tt_err(TT_EINVAL, "filter '%s': refused: more than one SQL statement", expr);
            goto done;
        }
    if (!sqlite3_stmt_readonly(q) || sqlite3_column_count(q) != 1) {
        st = tt_err(TT_EINVAL, "filter '%s': refused: a filter may only read the metadata",
                    expr);
        goto done;
    }
    if ((st = tt_filter_alloc(out, num_rows)))
        goto done;
    budget b = {0, 1000 + num_rows / 4};  /* a tick per 1000 VM steps: ~250 steps a row */
    sqlite3_progress_handler(db, 1000, progress, &b);
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (sqlite3_column_type(q, 0) != SQLITE_INTEGER) {
            st = tt_err(TT_EINVAL, "filter '%s': refused: it selects something other than "
                        "rows", expr);
            break;
        }
        sqlite3_int64 r = sqlite3_column_int64(q, 0);
        if (r < 0 || (uint64_t)r >= num_rows) {
            st = tt_err(TT_ECORRUPT, "%s: row %lld is not a row of the index", path,
                        (long long)r);
            break;
        }
        (*out)->bits[(uint64_t)r >> 6] |= 1ull << ((uint64_t)r & 63);
    }
    sqlite3_progress_handler(db, 0, NULL, NULL);
    if (!st && rc != SQLITE_DONE)
        st = tt_err(TT_EINVAL, "filter '%s': %s", expr,
                    rc == SQLITE_INTERRUPT ? "stopped: it takes too much work per document"
                                           : sqlite3_errmsg(db));
done:
    if (st) {
        tt_filter_free(*out);
        *out = NULL;
    }
    sqlite3_finalize(q);
    free(sql);
    return st;
}

/* ------------------------------------------------------------- row as JSON */

/* A finite REAL as JSON that reads back as the same double and as a real: the shortest
 * of 15..17 significant digits that round-trips, with ".0" when it would otherwise
 * read as an integer (1.0 is "1.0", not "1"). Returns the length written to buf. */
static size_t json_real(char *buf, size_t cap, double v) {
    int n = 0;
    for (int digits = 15; digits <= 17; digits++) {
        n = snprintf(buf, cap, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (n > 0 && (size_t)n + 2 < cap && !strpbrk(buf, ".eEn")) {
        memcpy(buf + n, ".0", 3);
        n += 2;
    }
    return n > 0 ? (size_t)n : 0;
}

static int json_str(tt_sbuf *b, const char *s, size_t n) {
    int st = tt_sbuf_append(b, "\"", 1);
    for (size_t i = 0; i < n && !st; i++) {
        unsigned char ch = (unsigned char)s[i];
        char esc[8];
        if (ch == '"' || ch == '\\') {
            esc[0] = '\\';
            esc[1] = (char)ch;
            st = tt_sbuf_append(b, esc, 2);
        } else if (ch < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", ch);
            st = tt_sbuf_append(b, esc, 6);
        } else {
            st = tt_sbuf_append(b, s + i, 1);
        }
    }
    return st ? st : tt_sbuf_append(b, "\"", 1);
}

int tt_mdb_row_json(sqlite3 *db, const char *path, uint64_t row, char **json) {
    *json = NULL;
    char **names = NULL, **types = NULL;
    size_t nc = 0;
    int st = tt_mdb_columns(db, path, &names, &types, &nc);
    if (st)
        return st;
    sqlite3_stmt *q = NULL;
    tt_sbuf b = {0};
    if (sqlite3_prepare_v2(db, "SELECT * FROM meta WHERE row = ?1", -1, &q, NULL)) {
        st = tt_err(TT_ECORRUPT, "%s: %s", path, sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_bind_int64(q, 1, (sqlite3_int64)row);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
        st = tt_sbuf_append(&b, "null", 4);
    } else if (rc != SQLITE_ROW) {
        st = tt_err(TT_ECORRUPT, "%s: %s", path, sqlite3_errmsg(db));
    } else {
        st = tt_sbuf_append(&b, "{", 1);
        int ncols = sqlite3_column_count(q), first = 1;
        for (int c = 0; c < ncols && !st; c++) {
            const char *name = sqlite3_column_name(q, c);
            if (!name || !strcmp(name, "row"))
                continue;
            const char *type = "";
            for (size_t k = 0; k < nc; k++)
                if (!sqlite3_stricmp(names[k], name))
                    type = types[k];
            if (!first)
                st = tt_sbuf_append(&b, ",", 1);
            first = 0;
            if (!st)
                st = json_str(&b, name, strlen(name));
            if (!st)
                st = tt_sbuf_append(&b, ":", 1);
            if (st)
                break;
            char num[40];
            switch (sqlite3_column_type(q, c)) {
            case SQLITE_INTEGER: {
                sqlite3_int64 v = sqlite3_column_int64(q, c);
                if (!strcmp(type, "boolean"))
                    st = tt_sbuf_append(&b, v ? "true" : "false", v ? 4 : 5);
                else
                    st = tt_sbuf_append(&b, num, (size_t)snprintf(num, sizeof num, "%lld",
                                                                  (long long)v));
                break;
            }
            case SQLITE_FLOAT: {
                double v = sqlite3_column_double(q, c);
                if (!isfinite(v))
                    st = tt_sbuf_append(&b, "null", 4);
                else
                    st = tt_sbuf_append(&b, num, json_real(num, sizeof num, v));
                break;
            }
            case SQLITE_TEXT:
                st = json_str(&b, (const char *)sqlite3_column_text(q, c),
                              (size_t)sqlite3_column_bytes(q, c));
                break;
            default:
                st = tt_sbuf_append(&b, "null", 4);
                break;
            }
        }
        if (!st)
            st = tt_sbuf_append(&b, "}", 1);
    }
    if (!st && !tt_sbuf_cstr(&b))
        st = tt_err(TT_ENOMEM, "metadata: out of memory");
    if (!st) {
        *json = b.p;
        b.p = NULL;
    }
done:
    sqlite3_finalize(q);
    tt_sbuf_free(&b);
    for (size_t k = 0; k < nc; k++) {
        free(names[k]);
        free(types[k]);
    }
    free(names);
    free(types);
    return st;
}

/* ------------------------------------------------------------------ verify */

int tt_mdb_verify(const uint8_t *payload, uint64_t n, const char *path, uint64_t num_rows,
                  uint64_t live_rows, bool (*live)(const void *user, uint64_t row),
                  const void *user) {
    sqlite3 *db;
    int st = tt_mdb_open_ro(&db, payload, n, path);
    if (st)
        return st;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &q, NULL) ||
        sqlite3_step(q) != SQLITE_ROW ||
        strcmp((const char *)sqlite3_column_text(q, 0), "ok")) {
        st = tt_err(TT_ECORRUPT, "%s: the metadata database fails its integrity check: %s",
                    path, q && sqlite3_column_text(q, 0) ? (const char *)sqlite3_column_text(q, 0)
                                                         : sqlite3_errmsg(db));
        goto done;
    }
    sqlite3_finalize(q);
    q = NULL;
    char **names, **types;
    size_t nc;
    if ((st = tt_mdb_columns(db, path, &names, &types, &nc)))
        goto done;
    for (size_t k = 0; k < nc; k++) {
        free(names[k]);
        free(types[k]);
    }
    free(names);
    free(types);
    if (sqlite3_prepare_v2(db, "SELECT row FROM meta ORDER BY row", -1, &q, NULL)) {
        st = tt_err(TT_ECORRUPT, "%s: no table meta: %s", path, sqlite3_errmsg(db));
        goto done;
    }
    uint64_t count = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        sqlite3_int64 r = sqlite3_column_int64(q, 0);
        if (r < 0 || (uint64_t)r >= num_rows || !live(user, (uint64_t)r)) {
            st = tt_err(TT_ECORRUPT, "%s: metadata row %lld is no live document of the index",
                        path, (long long)r);
            goto done;
        }
        count++;
    }
    if (rc != SQLITE_DONE)
        st = tt_err(TT_ECORRUPT, "%s: %s", path, sqlite3_errmsg(db));
    else if (count != live_rows)
        st = tt_err(TT_ECORRUPT, "%s: %llu metadata rows for %llu live documents", path,
                    (unsigned long long)count, (unsigned long long)live_rows);
done:
    sqlite3_finalize(q);
    sqlite3_close(db);
    return st;
}

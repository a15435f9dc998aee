/* The metadata of an open index as the public API shows it (include/tartan.h,
 * "Metadata and filters"): a read-only connection per caller over the generation's
 * metadata.tt, filters from SQL or from external ids, a row as JSON. */
#include "index/index.h"

#include "common/strtab.h"

#include <stdlib.h>

struct tt_metadata {
    const tt_index *idx;
    sqlite3 *db;
    char **names, **types;
    size_t ncol;
};

int tt_metadata_open(const tt_index *idx, tt_metadata **out) {
    if (!idx || !out)
        return tt_err(TT_EINVAL, "tt_metadata_open: NULL argument");
    *out = NULL;
    if (!idx->f_metadata.base)
        return tt_err(TT_ENOTFOUND, "%s: the index has no metadata (build or add with "
                      "--metadata)", idx->dir);
    tt_metadata *m = tt_calloc(1, sizeof *m, "metadata");
    if (!m)
        return TT_ENOMEM;
    m->idx = idx;
    int st = tt_mdb_open_ro(&m->db, idx->f_metadata.payload, idx->f_metadata.h.payload_bytes,
                            idx->f_metadata.path);
    if (!st)
        st = tt_mdb_columns(m->db, idx->f_metadata.path, &m->names, &m->types, &m->ncol);
    if (st) {
        tt_metadata_close(m);
        return st;
    }
    *out = m;
    return TT_OK;
}

void tt_metadata_close(tt_metadata *m) {
    if (!m)
        return;
    for (size_t i = 0; i < m->ncol; i++) {
        free(m->names[i]);
        free(m->types[i]);
    }
    free(m->names);
    free(m->types);
    if (m->db)
        sqlite3_close(m->db);
    free(m);
}

size_t tt_metadata_num_columns(const tt_metadata *m) {
    return m ? m->ncol : 0;
}

const char *tt_metadata_column(const tt_metadata *m, size_t i, const char **type) {
    if (!m || i >= m->ncol) {
        if (type)
            *type = NULL;
        return NULL;
    }
    if (type)
        *type = m->types[i];
    return m->names[i];
}

int tt_metadata_where(tt_metadata *m, const char *expr, tt_filter **out) {
    if (!m || !expr || !out)
        return tt_err(TT_EINVAL, "tt_metadata_where: NULL argument");
    tt_err_clear();
    return tt_mdb_where(m->db, m->idx->f_metadata.path, expr, m->idx->num_docs, out);
}

int tt_metadata_json(tt_metadata *m, uint64_t row, char **json) {
    if (!m || !json)
        return tt_err(TT_EINVAL, "tt_metadata_json: NULL argument");
    if (row >= m->idx->num_docs)
        return tt_err(TT_EINVAL, "tt_metadata_json: row %llu is not a row of the index",
                      (unsigned long long)row);
    return tt_mdb_row_json(m->db, m->idx->f_metadata.path, row, json);
}

void tt_free(void *p) {
    free(p);
}

int tt_filter_from_ids(const tt_index *idx, const char *const *ids, size_t n, tt_filter **out,
                       uint64_t *unknown) {
    if (!idx || (!ids && n) || !out)
        return tt_err(TT_EINVAL, "tt_filter_from_ids: NULL argument");
    *out = NULL;
    if (unknown)
        *unknown = 0;
    tt_strtab want;
    memset(&want, 0, sizeof want);
    uint8_t *found = NULL;
    int st = TT_OK;
    for (size_t i = 0; i < n && !st; i++) {
        if (!ids[i]) {
            st = tt_err(TT_EINVAL, "tt_filter_from_ids: id %zu is NULL", i);
            break;
        }
        uint32_t k;
        st = tt_st_intern(&want, ids[i], strlen(ids[i]), &k, NULL);
    }
    if (!st && !(found = tt_calloc(want.n ? want.n : 1, 1, "filter")))
        st = TT_ENOMEM;
    if (!st)
        st = tt_filter_alloc(out, idx->num_docs);
    /* One pass over the rows (ids are unique among live documents; a deleted row may
     * share its id with a live one, and is not allowed anyway). */
    for (uint64_t d = 0; d < idx->num_docs && !st && want.n; d++) {
        if (tt_index_deleted(idx, d))
            continue;
        size_t len;
        const char *id = tt_index_doc_id(idx, d, &len);
        uint32_t k = tt_st_find(&want, id, len);
        if (k == TT_ST_NONE)
            continue;
        found[k] = 1;
        (*out)->bits[d >> 6] |= 1ull << (d & 63);
    }
    if (!st && unknown)
        for (uint32_t k = 0; k < want.n; k++)
            *unknown += !found[k];
    if (st) {
        tt_filter_free(*out);
        *out = NULL;
    }
    free(found);
    tt_st_free(&want);
    return st;
}

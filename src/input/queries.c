/* Query vectors from NumPy files (tt_queries of tartan.h): a 3-D padded array, or a
 * 2-D array with per-query lengths, plus optional query ids. */
#include "input/npy.h"

#include "common/strtab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

void tt_queries_free(tt_queries *q) {
    if (!q)
        return;
    if (q->ids)
        for (uint64_t i = 0; i < q->num_queries; i++)
            free(q->ids[i]);
    free(q->ids);
    free(q->vectors);
    free(q->offsets);
    free(q->lens);
    free(q->path);
    free(q);
}

/* One id per line (trailing CR stripped); the count must equal the queries. */
/* One id per line (trailing CR stripped); the count must equal the queries. Blank lines
 * at the end of the file are not ids; ids follow tt_id_problem and are distinct. */
static int read_ids(tt_queries *q, const char *path) {
    int st = TT_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open query ids", path);
    char *line = NULL;
    size_t cap = 0;
    uint64_t n = 0, lineno = 0, blank = 0; /* blank: the first blank line not yet followed */
    ssize_t len;
    tt_strtab seen;
    memset(&seen, 0, sizeof seen);
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0) {
            if (!blank)
                blank = lineno;
            continue;
        }
        if (blank) {
            st = tt_err(TT_EPARSE, "%s:%llu: empty query id", path, (unsigned long long)blank);
            goto done;
        }
        if (n >= q->num_queries) {
            n++;
            continue;  /* count them all for the message */
        }
        const char *bad = tt_id_problem(line, (size_t)len, 4096);
        uint32_t first;
        bool added = true;
        if (bad || (st = tt_st_intern(&seen, line, (size_t)len, &first, &added)) || !added) {
            if (bad)
                st = tt_err(TT_EPARSE, "%s:%llu: %s", path, (unsigned long long)lineno, bad);
            else if (!added)
                st = tt_err(TT_EPARSE, "%s:%llu: duplicate query id '%.200s' (also query %u)",
                            path, (unsigned long long)lineno, line, first + 1);
            goto done;
        }
        if (!(q->ids[n] = strdup(line))) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        n++;
    }
    if (ferror(f)) {
        st = tt_err_errno(TT_EIO, errno, "%s: read error", path);
        goto done;
    }
    if (n != q->num_queries)
        st = tt_err(TT_EDIM, "%s: %llu query ids for %llu queries in %s", path,
                    (unsigned long long)n, (unsigned long long)q->num_queries, q->path);
done:
    tt_st_free(&seen);
    free(line);
    fclose(f);
    return st;
}

int tt_queries_load(tt_queries **out, const char *path, const char *qlens_path,
                    const char *ids_path) {
    int st = TT_OK;
    int64_t *ql = NULL;
    uint64_t nql = 0;
    if (!out || !path)
        return tt_err(TT_EINVAL, "tt_queries_load: NULL argument");
    *out = NULL;
    tt_queries *q = tt_calloc(1, sizeof *q, "queries");
    if (!q)
        return TT_ENOMEM;
    if (!(q->path = strdup(path))) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    tt_npy_header h;
    if ((st = tt_npy_read_floats(path, &q->vectors, &h)))
        goto fail;
    if (qlens_path && (st = tt_npy_read_ints(qlens_path, &ql, &nql)))
        goto fail;
    uint64_t kq = 0;
    if (h.ndim == 3) {
        q->num_queries = h.shape[0];
        kq = h.shape[1];
        q->dim = (uint32_t)h.shape[2];
        q->num_vectors = h.shape[0] * h.shape[1];
        if (ql && nql != q->num_queries) {
            st = tt_err(TT_EDIM, "%s: %llu query lengths for the %llu queries of %s", qlens_path,
                        (unsigned long long)nql, (unsigned long long)q->num_queries, path);
            goto fail;
        }
    } else if (h.ndim == 2) {
        if (!ql) {
            st = tt_err(TT_EDIM, "%s: a 2-D query array [num_vectors, dim] needs a qlens file "
                        "with the vectors of each query", path);
            goto fail;
        }
        q->num_queries = nql;
        q->dim = (uint32_t)h.shape[1];
        q->num_vectors = h.shape[0];
    } else {
        st = tt_err(TT_EFORMAT, "%s: expected queries as [num_queries, Kq, dim] or "
                    "[num_vectors, dim] (with qlens), got a %d-D array", path, h.ndim);
        goto fail;
    }
    if (q->dim == 0 || (h.ndim == 3 && kq == 0) || h.shape[h.ndim - 1] > UINT32_MAX) {
        st = tt_err(TT_EDIM, "%s: empty query vectors (shape has a 0)", path);
        goto fail;
    }
    uint64_t nq = q->num_queries;
    q->offsets = tt_alloc(nq ? nq : 1, sizeof *q->offsets, "queries");
    q->lens = tt_alloc(nq ? nq : 1, sizeof *q->lens, "queries");
    q->ids = tt_calloc(nq ? nq : 1, sizeof *q->ids, "queries");
    if (!q->offsets || !q->lens || !q->ids) {
        st = TT_ENOMEM;
        goto fail;
    }
    uint64_t row = 0;
    for (uint64_t i = 0; i < nq; i++) {
        uint64_t len = kq;
        if (ql) {
            if (ql[i] < 1 || (h.ndim == 3 && (uint64_t)ql[i] > kq) || ql[i] > UINT32_MAX) {
                st = tt_err(TT_EDIM, "%s: query %llu has length %lld (must be 1..%llu)",
                            qlens_path, (unsigned long long)i, (long long)ql[i],
                            (unsigned long long)(h.ndim == 3 ? kq : UINT32_MAX));
                goto fail;
            }
            len = (uint64_t)ql[i];
        }
        q->offsets[i] = h.ndim == 3 ? i * kq : row;
        q->lens[i] = (uint32_t)len;
        row += len;
    }
    if (h.ndim == 2 && row != q->num_vectors) {
        st = tt_err(TT_EDIM, "%s: query lengths add up to %llu vectors but %s has %llu",
                    qlens_path, (unsigned long long)row, path,
                    (unsigned long long)q->num_vectors);
        goto fail;
    }
    if (ids_path) {
        if ((st = read_ids(q, ids_path)))
            goto fail;
    } else {
        for (uint64_t i = 0; i < nq; i++) {
            char buf[24];
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)i);
            if (!(q->ids[i] = strdup(buf))) {
                st = tt_err(TT_ENOMEM, "%s: out of memory", path);
                goto fail;
            }
        }
    }
    for (uint64_t i = 0; i < nq; i++) {
        int64_t bad = tt_find_nonfinite(q->vectors + q->offsets[i] * q->dim, q->lens[i], q->dim);
        if (bad >= 0) {
            st = tt_err(TT_EVALUE, "%s: query %llu (id %s), vector %lld has a NaN or infinite "
                        "value", path, (unsigned long long)i, q->ids[i], (long long)bad);
            goto fail;
        }
    }
    free(ql);
    *out = q;
    return TT_OK;
fail:
    free(ql);
    tt_queries_free(q);
    return st;
}

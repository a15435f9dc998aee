/* The corpus: (vector file, doclens file) pairs concatenated in order, plus an
 * optional file of external document ids. Opening validates every header and the
 * doclens against the vector counts; vectors themselves are read later, in chunks,
 * by tt_input_read. */
#include "input/input.h"

#include "common/strtab.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TT_ID_MAX 1024                  /* longest external id, bytes */
#define TT_DOCLEN_MAX ((int64_t)1 << 31)

void tt_input_options_init(tt_input_options *opt) {
    if (!opt)
        return;
    memset(opt, 0, sizeof *opt);
    opt->struct_size = (uint32_t)sizeof *opt;
    opt->bf16_from_uint16 = 0;
}

void tt_input_free(tt_input *in) {
    if (!in)
        return;
    if (in->files)
        for (size_t i = 0; i < in->nfiles; i++)
            tt_vecfile_close(&in->files[i]);
    free(in->files);
    free(in->file_vec0);
    free(in->file_doc0);
    free(in->doclens);
    free(in->doc_vec0);
    free(in->ids_blob);
    free(in->id_off);
    free(in->ids_path);
    tt_input_mem_free(in->mem);
    free(in);
}

uint32_t tt_input_dim(const tt_input *in) { return in ? in->dim : 0; }
uint64_t tt_input_num_docs(const tt_input *in) { return in ? in->num_docs : 0; }
uint64_t tt_input_num_vectors(const tt_input *in) { return in ? in->num_vectors : 0; }

/* Appends the doclens of pair i to in->doclens, checking each length and that
 * they sum to the vector file's row count. */
static int add_doclens(tt_input *in, size_t i, const char *path) {
    int64_t *v = NULL;
    uint64_t n = 0, sum = 0;
    const tt_vecfile *vf = &in->files[i];
    int rc = tt_npy_read_ints(path, &v, &n);
    if (rc != TT_OK)
        return rc;
    for (uint64_t j = 0; j < n; j++) {
        if (v[j] <= 0) {
            rc = tt_err(TT_EVALUE, "%s: document %llu has length %lld", path,
                        (unsigned long long)j, (long long)v[j]);
            goto done;
        }
        if (v[j] > TT_DOCLEN_MAX) {
            rc = tt_err(TT_EVALUE, "%s: document %llu has length %lld (more than 2^31 vectors)",
                        path, (unsigned long long)j, (long long)v[j]);
            goto done;
        }
        if (!tt_add_ok(sum, (uint64_t)v[j], &sum)) {
            rc = tt_err(TT_EVALUE, "%s: the document lengths overflow 64 bits", path);
            goto done;
        }
    }
    if (sum != vf->rows) {
        rc = tt_err(TT_EDIM, "%s: doclens sum to %llu vectors (%llu documents) but %s has "
                    "%llu vectors", path, (unsigned long long)sum, (unsigned long long)n,
                    vf->path, (unsigned long long)vf->rows);
        goto done;
    }
    uint64_t total;
    if (!tt_add_ok(in->num_docs, n, &total) || total > SIZE_MAX / sizeof(uint32_t)) {
        rc = tt_err(TT_ENOMEM, "%s: too many documents", path);
        goto done;
    }
    uint32_t *grown = realloc(in->doclens, (size_t)(total ? total : 1) * sizeof *grown);
    if (!grown) {
        rc = tt_err(TT_ENOMEM, "%s: cannot allocate doclens for %llu documents", path,
                    (unsigned long long)total);
        goto done;
    }
    in->doclens = grown;
    for (uint64_t j = 0; j < n; j++)
        in->doclens[in->num_docs + j] = (uint32_t)v[j];
    in->num_docs = total;
done:
    free(v);
    return rc;
}

/* Reads the whole ids file into in->ids_blob and splits it into lines, rewritten in
 * place as NUL-terminated ids: line i is [id_off[i], id_off[i+1] - 1). A trailing
 * '\r' (CRLF files) and a leading UTF-8 byte-order mark are dropped. */
static int read_ids(tt_input *in, const char *path) {
    int fd = -1, rc = TT_OK;
    tt_strtab seen;
    memset(&seen, 0, sizeof seen);
    struct stat st;
    uint64_t lines = 0;
    if (!(in->ids_path = strdup(path)))
        return tt_err(TT_ENOMEM, "%s: out of memory", path);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open", path);
    if (fstat(fd, &st) != 0) {
        rc = tt_err_errno(TT_EIO, errno, "%s: cannot stat", path);
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = tt_err(TT_EFORMAT, "%s: not a regular file", path);
        goto done;
    }
    uint64_t size = (uint64_t)st.st_size;
    char *b = in->ids_blob = tt_alloc(size + 1, 1, path);
    if (!b) {
        rc = TT_ENOMEM;
        goto done;
    }
    for (uint64_t got = 0; got < size;) {
        ssize_t r = read(fd, b + got, (size_t)TT_MIN(size - got, (uint64_t)1 << 30));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = tt_err_errno(TT_EIO, errno, "%s: read failed", path);
            goto done;
        }
        if (r == 0) {
            size = got; /* shrank while reading: use what is there */
            break;
        }
        got += (uint64_t)r;
    }
    if (!(in->id_off = tt_alloc(in->num_docs + 1, sizeof *in->id_off, path))) {
        rc = TT_ENOMEM;
        goto done;
    }
    uint64_t rd = 0, wr = 0;
    if (size >= 3 && memcmp(b, "\xef\xbb\xbf", 3) == 0)
        rd = 3;
    in->id_off[0] = 0;
    /* Line ends at the very end of the file (an editor's extra blank line) end the last
     * id; they are not ids. */
    while (size > rd && (b[size - 1] == '\n' || b[size - 1] == '\r'))
        size--;
    while (rd < size) {
        const char *nl = memchr(b + rd, '\n', (size_t)(size - rd));
        uint64_t end = nl ? (uint64_t)(nl - b) : size, len = end - rd;
        lines++;
        if (len > 0 && b[end - 1] == '\r')
            len--;
        const char *bad = tt_id_problem(b + rd, (size_t)len, TT_ID_MAX);
        if (bad) {
            rc = tt_err(TT_EPARSE, "%s:%llu: %s (ids are 1..%d bytes)", path,
                        (unsigned long long)lines, bad, TT_ID_MAX);
            goto done;
        }
        if (lines > in->num_docs) {
            /* count the remaining lines for the message, without storing them */
            if (end + 1 < size)
                lines++;
            for (uint64_t k = end + 1; k + 1 < size; k++)
                lines += b[k] == '\n';
            break;
        }
        /* Ids name documents in runs: a repeated one would make results ambiguous. */
        uint32_t first;
        bool added;
        if ((rc = tt_st_intern(&seen, b + rd, (size_t)len, &first, &added)))
            goto done;
        if (!added) {
            rc = tt_err(TT_EPARSE, "%s:%llu: duplicate id '%.*s' (also on line %u)", path,
                        (unsigned long long)lines, (int)TT_MIN(len, 200), b + rd, first + 1);
            goto done;
        }
        memmove(b + wr, b + rd, (size_t)len);
        wr += len;
        b[wr++] = '\0';
        in->id_off[lines] = wr;
        rd = end + 1;
    }
    if (lines != in->num_docs)
        rc = tt_err(TT_EDIM, "%s has %llu ids but the corpus has %llu documents", path,
                    (unsigned long long)lines, (unsigned long long)in->num_docs);
done:
    tt_st_free(&seen);
    close(fd);
    return rc;
}

int tt_input_open(tt_input **out, size_t nfiles, const char *const *vector_paths,
                  const char *const *doclens_paths, const char *ids_path,
                  const tt_input_options *opt) {
    tt_input_options defaults;
    tt_input *in = NULL;
    int rc = TT_OK;
    if (!out)
        return tt_err(TT_EINVAL, "tt_input_open: NULL output handle");
    *out = NULL;
    if (nfiles == 0 || !vector_paths || !doclens_paths)
        return tt_err(TT_EINVAL, "tt_input_open: no input files");
    for (size_t i = 0; i < nfiles; i++)
        if (!vector_paths[i] || !doclens_paths[i])
            return tt_err(TT_EINVAL, "tt_input_open: input pair %zu has a NULL path", i);
    if (!opt) {
        tt_input_options_init(&defaults);
        opt = &defaults;
    } else if (opt->struct_size < sizeof(uint32_t) + sizeof(int)) {
        return tt_err(TT_EINVAL, "tt_input_open: options not initialised "
                      "(call tt_input_options_init)");
    }

    if (!(in = tt_calloc(1, sizeof *in, "input")))
        return TT_ENOMEM;
    if (!(in->files = tt_calloc(nfiles, sizeof *in->files, "input files")) ||
        !(in->file_vec0 = tt_calloc(nfiles + 1, sizeof *in->file_vec0, "input files")) ||
        !(in->file_doc0 = tt_calloc(nfiles + 1, sizeof *in->file_doc0, "input files"))) {
        rc = TT_ENOMEM;
        goto fail;
    }
    for (size_t i = 0; i < nfiles; i++)
        in->files[i].fd = -1;
    in->nfiles = nfiles;

    for (size_t i = 0; i < nfiles; i++) {
        tt_vecfile *vf = &in->files[i];
        if ((rc = tt_vecfile_open(vf, vector_paths[i], opt->bf16_from_uint16)) != TT_OK)
            goto fail;
        if (i == 0) {
            in->dim = vf->dim;
        } else if (vf->dim != in->dim) {
            rc = tt_err(TT_EDIM, "%s has dim %u but %s has dim %u", vf->path, vf->dim,
                        in->files[0].path, in->dim);
            goto fail;
        }
        if ((rc = add_doclens(in, i, doclens_paths[i])) != TT_OK)
            goto fail;
        in->file_vec0[i + 1] = in->file_vec0[i] + vf->rows;
        in->file_doc0[i + 1] = in->num_docs;
    }
    in->num_vectors = in->file_vec0[nfiles];

    if (!(in->doc_vec0 = tt_alloc(in->num_docs + 1, sizeof *in->doc_vec0, "document offsets"))) {
        rc = TT_ENOMEM;
        goto fail;
    }
    in->doc_vec0[0] = 0;
    for (uint64_t d = 0; d < in->num_docs; d++)
        in->doc_vec0[d + 1] = in->doc_vec0[d] + in->doclens[d];

    if (ids_path && (rc = read_ids(in, ids_path)) != TT_OK)
        goto fail;
    *out = in;
    return TT_OK;
fail:
    tt_input_free(in);
    return rc;
}

int tt_input_read(const tt_input *in, uint64_t v0, uint64_t n, float *out) {
    if (!in || (!out && n))
        return tt_err(TT_EINVAL, "tt_input_read: NULL argument");
    if (v0 > in->num_vectors || n > in->num_vectors - v0)
        return tt_err(TT_EINVAL, "input: vectors [%llu, %llu) out of range (%llu vectors)",
                      (unsigned long long)v0, (unsigned long long)(v0 + n),
                      (unsigned long long)in->num_vectors);
    if (n == 0)
        return TT_OK;
    if (in->read_fn)
        return in->read_fn(in->read_user, v0, n, out);
    /* from the file holding v0 on */
    for (size_t f = (size_t)tt_find_le(in->file_vec0, in->nfiles, v0); n > 0; f++) {
        uint64_t row = v0 - in->file_vec0[f];
        uint64_t m = TT_MIN(n, in->files[f].rows - row);
        int rc = tt_vecfile_read(&in->files[f], row, m, out);
        if (rc != TT_OK)
            return rc;
        out += m * in->dim;
        v0 += m;
        n -= m;
    }
    return TT_OK;
}

void tt_input_locate(const tt_input *in, uint64_t v, const char **path, uint64_t *row,
                     uint64_t *doc) {
    size_t f = in->nfiles ? (size_t)tt_find_le(in->file_vec0, in->nfiles, v) : 0;
    *path = in->nfiles ? in->files[f].path : in->source;
    *row = in->nfiles ? v - in->file_vec0[f] : v;
    *doc = tt_find_le(in->doc_vec0, in->num_docs, v);
}

/* A corpus held in the caller's memory (tt_input_from_memory): blocks of float32 or
 * float16 rows, read in place by tt_input_read, never copied as a whole. Front ends
 * (the Python binding) hand over their arrays this way: a list of per-document arrays
 * builds without being concatenated first. */
#include "input/input.h"

#include "common/strtab.h"

#include <stdlib.h>

#define TT_ID_MAX 1024                  /* longest external id, bytes (as input.c) */
#define TT_DOCLEN_MAX ((int64_t)1 << 31)

struct tt_input_mem {
    int dtype;
    size_t nblocks;
    const void **blocks;
    uint64_t *block_vec0; /* nblocks+1: first global vector of each block */
    char *name;
};

void tt_input_mem_free(tt_input_mem *m) {
    if (!m)
        return;
    free(m->blocks);
    free(m->block_vec0);
    free(m->name);
    free(m);
}

static int mem_read(void *user, uint64_t v0, uint64_t n, float *out) {
    const tt_input *in = user;
    const tt_input_mem *m = in->mem;
    uint32_t dim = in->dim;
    for (size_t b = (size_t)tt_find_le(m->block_vec0, m->nblocks, v0); n > 0; b++) {
        uint64_t row = v0 - m->block_vec0[b];
        uint64_t k = TT_MIN(n, m->block_vec0[b + 1] - m->block_vec0[b] - row);
        size_t cnt = (size_t)(k * dim);
        if (m->dtype == TT_DTYPE_F32) {
            memcpy(out, (const float *)m->blocks[b] + row * dim, cnt * sizeof(float));
        } else {
            const uint16_t *src = (const uint16_t *)m->blocks[b] + row * dim;
            for (size_t i = 0; i < cnt; i++)
                out[i] = tt_f16_to_f32(src[i]);
        }
        out += cnt;
        v0 += k;
        n -= k;
    }
    return TT_OK;
}

/* The ids as input.c lays them out (ids_blob/id_off), with the same checks. */
static int copy_ids(tt_input *in, const char *const *ids) {
    int rc = TT_OK;
    tt_strtab seen;
    memset(&seen, 0, sizeof seen);
    uint64_t bytes = 0;
    for (uint64_t d = 0; d < in->num_docs; d++) {
        if (!ids[d])
            return tt_err(TT_EINVAL, "%s: id of document %llu is NULL", in->source,
                          (unsigned long long)d);
        bytes += strlen(ids[d]) + 1;
    }
    if (!(in->ids_blob = tt_alloc(bytes ? bytes : 1, 1, "ids")) ||
        !(in->id_off = tt_alloc(in->num_docs + 1, sizeof *in->id_off, "ids")))
        return TT_ENOMEM;
    uint64_t pos = 0;
    in->id_off[0] = 0;
    for (uint64_t d = 0; d < in->num_docs; d++) {
        size_t len = strlen(ids[d]);
        const char *bad = tt_id_problem(ids[d], len, TT_ID_MAX);
        if (bad) {
            rc = tt_err(TT_EPARSE, "%s: id of document %llu: %s (ids are 1..%d bytes)",
                        in->source, (unsigned long long)d, bad, TT_ID_MAX);
            goto done;
        }
        uint32_t first;
        bool added;
        if ((rc = tt_st_intern(&seen, ids[d], len, &first, &added)))
            goto done;
        if (!added) {
            rc = tt_err(TT_EPARSE, "%s: duplicate id '%.*s' (documents %u and %llu)",
                        in->source, (int)TT_MIN(len, 200), ids[d], first,
                        (unsigned long long)d);
            goto done;
        }
        memcpy(in->ids_blob + pos, ids[d], len + 1);
        pos += len + 1;
        in->id_off[d + 1] = pos;
    }
done:
    tt_st_free(&seen);
    return rc;
}

int tt_input_from_memory(tt_input **out, uint32_t dim, int dtype, size_t nblocks,
                         const void *const *blocks, const uint64_t *block_rows,
                         const int64_t *doclens, uint64_t num_docs, const char *const *ids,
                         const char *name) {
    tt_input *in = NULL;
    tt_input_mem *m = NULL;
    int rc = TT_OK;
    if (!out)
        return tt_err(TT_EINVAL, "tt_input_from_memory: NULL output handle");
    *out = NULL;
    if (!name)
        name = "memory";
    if (dtype != TT_DTYPE_F32 && dtype != TT_DTYPE_F16)
        return tt_err(TT_EUNSUPPORTED, "%s: dtype %d is neither TT_DTYPE_F32 nor TT_DTYPE_F16",
                      name, dtype);
    if (dim == 0)
        return tt_err(TT_EDIM, "%s: dimension 0", name);
    if (nblocks == 0 || !blocks || !block_rows)
        return tt_err(TT_EINVAL, "%s: no vectors", name);
    if (doclens && num_docs == 0)
        return tt_err(TT_EVALUE, "%s: no documents", name);

    if (!(in = tt_calloc(1, sizeof *in, "input")) ||
        !(in->mem = m = tt_calloc(1, sizeof *m, "input")) ||
        !(m->blocks = tt_alloc(nblocks, sizeof *m->blocks, "input blocks")) ||
        !(m->block_vec0 = tt_alloc(nblocks + 1, sizeof *m->block_vec0, "input blocks")) ||
        !(m->name = strdup(name))) {
        rc = tt_err(TT_ENOMEM, "%s: out of memory", name);
        goto fail;
    }
    m->dtype = dtype;
    m->nblocks = nblocks;
    in->dim = dim;
    in->source = m->name;
    m->block_vec0[0] = 0;
    for (size_t b = 0; b < nblocks; b++) {
        if (block_rows[b] == 0 && !doclens) {
            rc = tt_err(TT_EVALUE, "%s: document %zu has no vectors", name, b);
            goto fail;
        }
        if (block_rows[b] && !blocks[b]) {
            rc = tt_err(TT_EINVAL, "%s: block %zu is NULL", name, b);
            goto fail;
        }
        uint64_t bytes;
        if (!tt_mul_ok(block_rows[b], dim, &bytes) ||
            !tt_add_ok(m->block_vec0[b], block_rows[b], &m->block_vec0[b + 1])) {
            rc = tt_err(TT_ENOMEM, "%s: block %zu: size overflows", name, b);
            goto fail;
        }
        m->blocks[b] = blocks[b];
    }
    in->num_vectors = m->block_vec0[nblocks];
    if (in->num_vectors == 0) {
        rc = tt_err(TT_EVALUE, "%s: no vectors", name);
        goto fail;
    }
    if (!doclens)
        num_docs = nblocks;
    if (num_docs > SIZE_MAX / sizeof(uint64_t) - 1 ||
        !(in->doclens = tt_alloc(num_docs, sizeof *in->doclens, "doclens")) ||
        !(in->doc_vec0 = tt_alloc(num_docs + 1, sizeof *in->doc_vec0, "document offsets"))) {
        rc = tt_err(TT_ENOMEM, "%s: cannot allocate %llu document lengths", name,
                    (unsigned long long)num_docs);
        goto fail;
    }
    in->num_docs = num_docs;
    in->doc_vec0[0] = 0;
    for (uint64_t d = 0; d < num_docs; d++) {
        int64_t len = doclens ? doclens[d] : (int64_t)block_rows[d];
        if (len <= 0 || len > TT_DOCLEN_MAX) {
            rc = tt_err(TT_EVALUE, "%s: document %llu has length %lld", name,
                        (unsigned long long)d, (long long)len);
            goto fail;
        }
        in->doclens[d] = (uint32_t)len;
        if (!tt_add_ok(in->doc_vec0[d], (uint64_t)len, &in->doc_vec0[d + 1])) {
            rc = tt_err(TT_EVALUE, "%s: the document lengths overflow 64 bits", name);
            goto fail;
        }
    }
    if (in->doc_vec0[num_docs] != in->num_vectors) {
        rc = tt_err(TT_EDIM, "%s: doclens sum to %llu vectors (%llu documents) but there are "
                    "%llu vectors", name, (unsigned long long)in->doc_vec0[num_docs],
                    (unsigned long long)num_docs, (unsigned long long)in->num_vectors);
        goto fail;
    }
    if (ids && (rc = copy_ids(in, ids)) != TT_OK)
        goto fail;
    in->read_fn = mem_read;
    in->read_user = in;
    *out = in;
    return TT_OK;
fail:
    tt_input_free(in);
    return rc;
}

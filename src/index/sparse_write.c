/* A segment's sparse.tt (src/sparse/) written by a build or an add beside its other
 * files: the sparse vectors of the input's documents, record i for document i. */
#include "index/build.h"

#include <stdlib.h>

int tt_build_check_sparse(const tt_sparse_set *set, const tt_input *in, bool check_ids) {
    if (set->n != in->num_docs)
        return tt_err(TT_EDIM, "the sparse vectors hold %llu records for %llu documents",
                      (unsigned long long)set->n, (unsigned long long)in->num_docs);
    if (!check_ids || !in->ids_blob)
        return TT_OK;
    for (uint64_t d = 0; d < in->num_docs; d++) {
        const char *id = in->ids_blob + in->id_off[d];
        size_t len = (size_t)(in->id_off[d + 1] - in->id_off[d] - 1);
        if (tt_st_len(&set->ids, (uint32_t)d) != len ||
            memcmp(tt_st_str(&set->ids, (uint32_t)d), id, len))
            return tt_err(TT_EVALUE, "sparse record %llu has id '%s' where document %llu has "
                          "'%s' (the sparse records must follow the documents' order)",
                          (unsigned long long)d + 1, tt_st_str(&set->ids, (uint32_t)d),
                          (unsigned long long)d + 1, id);
    }
    return TT_OK;
}

int tt_build_write_sparse(builder *b, const tt_sparse_set *set) {
    return tt_build_write_sparse_range(b, set, 0, set->n);
}

/* sparse.tt of records [r0, r0 + n) of set, quantized as tt_sparse_payload_fixed. */
static int write_sparse(builder *b, const tt_sparse_set *set, uint64_t r0, uint64_t n,
                        bool global_scale, const float *fixed) {
    uint8_t *p = NULL;
    uint64_t len, a, bb, c;
    int st = tt_sparse_payload_fixed(set, r0, n, global_scale, fixed, &p, &len, &a, &bb, &c);
    if (!st)
        st = tt_build_write_small(b, TT_F_SPARSE, "SPRS", p, (size_t)len, a, bb, c);
    free(p);
    return st;
}

int tt_build_write_sparse_range(builder *b, const tt_sparse_set *set, uint64_t r0, uint64_t n) {
    return write_sparse(b, set, r0, n, n != set->n, NULL);
}

int tt_build_write_sparse_fixed(builder *b, const tt_sparse_set *set, uint64_t r0, uint64_t n,
                                const float *fixed) {
    return write_sparse(b, set, r0, n, true, fixed);
}

int tt_build_write_vocab(builder *b, const tt_sparse_set *set) {
    if (!set->vocab_size)
        return TT_OK;
    uint8_t *p = NULL;
    uint64_t len, a, bb;
    int st = tt_sparse_vocab_payload(&set->vocab, &p, &len, &a, &bb);
    if (!st)
        st = tt_build_write_small(b, TT_F_VOCAB, TT_VOCAB_KIND, p, (size_t)len, a, bb, 0);
    free(p);
    return st;
}

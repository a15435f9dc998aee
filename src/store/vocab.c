/* The stored vocabulary (vocab.tt) on an add: the documents' term ids must be those of
 * the index's vocabulary. A set that brings its own vocabulary must bring the same one
 * (term for term); a set without one must keep its ids below the stored size. The
 * generation keeps its vocab.tt (the next manifest carries it; compact.c keeps it). */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

int tt_store_vocab_load(tt_store *s, tt_strtab *v, bool *have) {
    const tt_manifest_entry *e = NULL;
    memset(v, 0, sizeof *v);
    *have = false;
    for (uint32_t i = 0; i < s->man.n && !e; i++)
        if (!memcmp(s->man.e[i].kind, TT_VOCAB_KIND, 4))
            e = &s->man.e[i];
    if (!e)
        return TT_OK;
    tt_fmap f = {.fd = -1};
    int st = tt_fmap_open(&f, s->dir, e->name, TT_VOCAB_KIND, TT_MAP_WHOLE);
    if (!st && (f.size != e->size || f.h.payload_hash != e->payload_hash))
        st = tt_err(TT_ECORRUPT, "%s: does not match the manifest", f.path);
    if (!st)
        st = tt_fmap_check_payload(&f, NULL, NULL);
    if (!st)
        st = tt_sparse_vocab_read(v, f.payload, f.h.payload_bytes, f.h.a, f.h.b, f.h.c, f.path);
    tt_fmap_close(&f);
    *have = st == TT_OK;
    return st;
}

int tt_store_check_vocab(tt_store *s, const tt_sparse_set *set) {
    tt_strtab v;
    bool have;
    int st = tt_store_vocab_load(s, &v, &have);
    if (st)
        return st;
    if (!have) {
        if (set->vocab_size)
            return tt_err(TT_EINVAL, "the index %s was built without a vocabulary (its term "
                          "ids are not tied to one): add the documents without --vocab, as "
                          "term ids", s->dir);
        return TT_OK;
    }
    if (set->vocab_size) {
        char why[300];
        if (tt_sparse_vocab_compare(&set->vocab, &v, why, sizeof why))
            st = tt_err(TT_EVALUE, "the vocabulary of the documents to add is not the one "
                        "stored in the index %s (%s): the term ids would mean other terms; "
                        "add with the index's vocabulary, or without --vocab", s->dir, why);
    } else {
        for (uint32_t t = 0; t < set->terms.n && !st; t++) {
            uint32_t id = tt_sparse_key_id(tt_st_str(&set->terms, t));
            if (id >= v.n)
                st = tt_err(TT_EVALUE, "term id %u of the documents to add is past the "
                            "vocabulary stored in the index %s (%u terms, ids 0..%u)", id,
                            s->dir, v.n, v.n - 1);
        }
    }
    tt_st_free(&v);
    return st;
}

/* Queries and documents read against an index's stored vocabulary (vocab.tt): JSON
 * Lines whose string terms map to ids through it, and texts tokenized into words that
 * become ids (doc/search.md, "Integer term ids"). */
#include "search/search.h"

#include <stdlib.h>

uint64_t tt_index_vocab_size(const tt_index *idx) { return idx ? idx->vocab.n : 0; }

const char *tt_index_vocab_term(const tt_index *idx, uint64_t id) {
    return idx && id < idx->vocab.n ? tt_st_str(&idx->vocab, (uint32_t)id) : NULL;
}

int tt_sparse_set_load_jsonl_index(tt_sparse_set **out, const char *path, const char *vocab,
                                   const tt_index *idx) {
    if (!idx || !idx->vocab.n)
        return tt_sparse_set_load_jsonl_vocab(out, path, vocab);
    return tt_sparse_set_load_jsonl_stored(out, path, vocab, &idx->vocab, idx->f_vocab.path);
}

int tt_sparse_set_load_text_index(tt_sparse_set **out, const char *path, int query,
                                  const tt_index *idx) {
    if (!out || !path)
        return tt_err(TT_EINVAL, "tt_sparse_set_load_text: NULL argument");
    if (!idx || !idx->vocab.n)
        return tt_sparse_set_load_text(out, path, query);
    *out = NULL;
    tt_sparse_set *words = NULL;
    int st = tt_sparse_set_load_text(&words, path, query);
    if (!st)
        st = tt_sparse_set_to_ids(words, &idx->vocab, out);
    tt_sparse_set_free(words);
    return st;
}

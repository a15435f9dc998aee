/* The sparse vectors of `tartan build` and `tartan add`: BM25 counts of the documents'
 * texts (--bm25, with --corpus or --text), or precomputed weights (--sparse FILE). */
#include "cli.h"

#include <string.h>

int cli_sparse_load_for(const char *cmd, int bm25, const char *text, const char *sparse,
                        const char *corpus, const char *vocab, const char *index_dir,
                        tt_sparse_set **out) {
    *out = NULL;
    if (vocab && !sparse)
        return cli_usage_error(cmd, "--vocab goes with --sparse (term ids)");
    if (!bm25 && !sparse) {
        if (text)
            return cli_usage_error(cmd, "--text goes with --bm25");
        return CLI_OK;
    }
    if (bm25 && sparse)
        return cli_usage_error(cmd, "--bm25 and --sparse exclude each other");
    if (sparse && text)
        return cli_usage_error(cmd, "--text goes with --bm25, not --sparse");
    if (bm25 && !text)
        text = corpus;
    if (bm25 && !text)
        return cli_usage_error(cmd, "--bm25 needs the documents' texts: --text FILE (BEIR "
                               "corpus.jsonl or TSV, in the order of the vectors), or "
                               "--encoder with --corpus");
    /* An index with a stored vocabulary reads string terms through it (an index that
     * does not open is left to the command itself to report). */
    tt_index *idx = NULL;
    if (sparse && index_dir) {
        tt_open_options oo;
        tt_open_options_init(&oo);
        oo.io = TT_IO_MMAP;
        if (tt_index_open(&idx, index_dir, &oo) != TT_OK)
            idx = NULL;
    }
    int st = bm25 ? tt_sparse_set_load_text(out, text, 0)
                  : tt_sparse_set_load_jsonl_index(out, sparse, vocab, idx);
    tt_index_close(idx);
    return st ? cli_fail(cmd, st) : CLI_OK;
}

int cli_sparse_load(const char *cmd, int bm25, const char *text, const char *sparse,
                    const char *corpus, const char *vocab, tt_sparse_set **out) {
    return cli_sparse_load_for(cmd, bm25, text, sparse, corpus, vocab, NULL, out);
}

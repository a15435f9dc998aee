/* Fuzz target: the sparse postings reader (sparse.tt, src/sparse/read.c) and the JSON
 * Lines sparse vector parser (src/sparse/load.c).
 *
 *   byte 0 & 3 == 2: the rest is a vocab.tt file (kind VOCB, src/sparse/vocab.c), its
 *          header decoded as for sparse.tt; if the payload validates, every term must
 *          be found under its id, and writing the table again must give the same
 *          payload back.
 *   byte 0 & 3 == 0: the rest is a sparse.tt file. Its header must pass tt_header_decode
 *          (magic, header checksum, version, kind SPRS) and give the file's size; the
 *          payload checksum is not required, as an attacker recomputes it. If the
 *          payload validates, every term is searched alone and all terms together by
 *          MaxScore and by the brute force, which must agree exactly.
 *   byte 0 odd:  the rest is JSON Lines {"id", "terms"} (or "term_ids") input; on
 *          success every record must hold distinct terms with positive finite values.
 *          With byte 0 & 3 == 3 the rest is a vocabulary, a form feed (\f), then the
 *          JSON Lines: every term id of a record must then be below the vocabulary's
 *          size, and a kind-3 set's terms are 4-byte ids.
 *
 * Seeds: tests/fuzz/corpus/sparse (sparse.tt files of a BM25 and a weighted index, a
 * vocab.tt, and JSON Lines files). */
#include "fuzz.h"
#include "io/file.h"
#include "sparse/sparse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

static void search_all(const tt_sparse_seg *s) {
    uint32_t nt = (uint32_t)TT_MIN(s->T, 16);
    tt_sparse_term *t = calloc(nt ? nt : 1, sizeof *t);
    if (!t)
        abort();
    double total = 0;
    for (uint64_t d = 0; d < s->D; d++)
        total += tt_sparse_seg_len(s, d);
    tt_sparse_scoring sc = {.kind = s->kind, .k1 = 0.9, .b = 0.4,
                            .avgdl = s->D && total > 0 ? total / (double)s->D : 1};
    for (uint32_t i = 0; i < nt; i++)
        t[i] = (tt_sparse_term){.qi = i, .factor = 1.0 + i,
                                .first = tt_sparse_seg_first_block(s, i),
                                .df = tt_sparse_seg_df(s, i)};
    for (uint32_t n = 1; n <= nt; n = n < nt ? nt : nt + 1) {
        tt_sparse_heap a, b;
        if (tt_sparse_heap_init(&a, 7) || tt_sparse_heap_init(&b, 7))
            abort();
        if (tt_sparse_seg_topk(s, &sc, t + (nt - n), n, nt, NULL, NULL, 0, &a, NULL) ||
            tt_sparse_seg_brute(s, &sc, t + (nt - n), n, nt, NULL, NULL, 0, &b))
            abort();
        tt_sparse_heap_sort(&a);
        tt_sparse_heap_sort(&b);
        if (a.n != b.n)
            abort();
        for (uint32_t i = 0; i < a.n; i++)
            if (a.row[i] != b.row[i] || a.score[i] != b.score[i])
                abort();
        tt_sparse_heap_free(&a);
        tt_sparse_heap_free(&b);
        if (n == nt)
            break;
    }
    /* every term can be found by its own bytes */
    for (uint64_t i = 0; i < s->T && i < 64; i++) {
        uint64_t o0 = tt_rd64(s->term_off + 8 * i), o1 = tt_rd64(s->term_off + 8 * (i + 1));
        if (tt_sparse_seg_find(s, s->blob + o0, (size_t)(o1 - o0)) != (int64_t)i)
            abort();
    }
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if ((data[0] & 3) == 2) {
        tt_header h;
        if (n < TT_HEADER_SIZE || tt_header_decode(p, "fuzz", TT_VOCAB_KIND, &h) != TT_OK)
            return 0;
        if (h.payload_bytes != n - TT_HEADER_SIZE)
            return 0;
        uint8_t *pl = malloc(n - TT_HEADER_SIZE + 1);
        if (!pl)
            abort();
        memcpy(pl, p + TT_HEADER_SIZE, n - TT_HEADER_SIZE);
        tt_strtab v;
        if (tt_sparse_vocab_read(&v, pl, h.payload_bytes, h.a, h.b, h.c, "fuzz") == TT_OK) {
            if (v.n != h.a)
                abort();
            for (uint32_t i = 0; i < v.n; i++)
                if (tt_st_find(&v, tt_st_str(&v, i), tt_st_len(&v, i)) != i)
                    abort();
            uint8_t *again;
            uint64_t len, a, b;
            if (tt_sparse_vocab_payload(&v, &again, &len, &a, &b))
                abort();
            if (len != h.payload_bytes || a != h.a || b != h.b || memcmp(again, pl, len))
                abort();
            free(again);
            tt_st_free(&v);
        }
        free(pl);
        return 0;
    }
    if ((data[0] & 1) == 0) {
        tt_header h;
        if (n < TT_HEADER_SIZE || tt_header_decode(p, "fuzz", "SPRS", &h) != TT_OK)
            return 0;
        if (h.payload_bytes != n - TT_HEADER_SIZE)
            return 0;
        /* the payload in its own allocation, so ASan sees reads past its end */
        uint8_t *pl = malloc(n - TT_HEADER_SIZE + 1);
        if (!pl)
            abort();
        memcpy(pl, p + TT_HEADER_SIZE, n - TT_HEADER_SIZE);
        tt_sparse_seg s;
        if (tt_sparse_seg_parse(&s, pl, h.payload_bytes, h.a, h.b, h.c, "fuzz") == TT_OK)
            search_all(&s);
        free(pl);
        return 0;
    }
    tt_sparse_set *s;
    const bool vocab = (data[0] & 3) == 3;
    if (tt_sparse_set_new(&s, vocab ? TT_SPARSE_KIND_IDS : TT_SPARSE_KIND_WEIGHTS))
        abort();
    if (vocab) { /* the vocabulary up to the first form feed */
        const uint8_t *ff = memchr(p, '\f', n);
        if (!ff) {
            tt_sparse_set_free(s);
            return 0;
        }
        size_t vn = (size_t)(ff - p);
        char *v = malloc(vn + 1);
        if (!v)
            abort();
        memcpy(v, p, vn);
        int st = tt_sparse_vocab_parse(s, v, vn, "fuzz");
        free(v);
        if (st) {
            tt_sparse_set_free(s);
            return 0;
        }
        n -= vn + 1;
        p = ff + 1;
    }
    char *text = malloc(n + 1);
    if (!text)
        abort();
    memcpy(text, p, n);
    if (tt_sparse_set_parse_jsonl(s, text, n, "fuzz") == TT_OK) {
        for (uint64_t e = 0; s->kind == TT_SPARSE_KIND_IDS && e < s->nent; e++) {
            if (tt_st_len(&s->terms, s->term[e]) != TT_SPARSE_ID_BYTES)
                abort();
            if (s->vocab_size &&
                tt_sparse_key_id(tt_st_str(&s->terms, s->term[e])) >= s->vocab_size)
                abort();
        }
        for (uint64_t r = 0; r < s->n; r++)
            for (uint64_t e = s->off[r]; e < s->off[r + 1]; e++) {
                if (!(s->value[e] > 0) || !isfinite(s->value[e]))
                    abort();
                if (e > s->off[r] && s->term[e] <= s->term[e - 1])
                    abort();
            }
    }
    free(text);
    tt_sparse_set_free(s);
    return 0;
}

/* The sparse room: sparse vectors (term -> weight) of documents and queries, the
 * tokenizer BM25 uses, the per-segment inverted index file sparse.tt (doc/format.md,
 * "Sparse postings"), and exact top-k over it by block-max MaxScore.
 *
 * Files: set.c (tt_sparse_set: sparse vectors in memory, from text or JSON Lines),
 * write.c (a segment's sparse.tt from a set), read.c (validating a sparse.tt payload),
 * topk.c (cursors over the block lists, MaxScore, and the brute-force reference).
 * Depends on common/ and input/ only; index/ opens a segment's sparse.tt with it. */
#ifndef TT_SPARSE_H
#define TT_SPARSE_H

#include "common/common.h"
#include "common/strtab.h"

#define TT_SPARSE_BLOCK 128u          /* postings per block */
#define TT_SPARSE_MAX_TERM 256u       /* bytes of a term */
#define TT_SPARSE_KIND_BM25 1u        /* values are term frequencies (capped at 255) */
#define TT_SPARSE_KIND_WEIGHTS 2u     /* values are 8-bit quantized weights, per-term scale */
#define TT_SPARSE_KIND_IDS 3u         /* as WEIGHTS, terms are integer ids: each term is its
                                       * id as 4 bytes big-endian (bytewise order = numeric) */
#define TT_SPARSE_ID_BYTES 4u

/* Sparse vectors of a sequence of records (documents or queries), in memory. Entries of
 * record r are [off[r], off[r+1]): distinct term ids with positive finite values. */
struct tt_sparse_set {
    int kind;                  /* TT_SPARSE_KIND_BM25 (values: counts) or _WEIGHTS */
    uint64_t n;                /* records */
    tt_strtab terms;           /* the term strings */
    uint64_t *off;             /* n + 1 */
    uint32_t *term;            /* per entry */
    float *value;              /* per entry */
    uint32_t *len;             /* n: tokens of the record (BM25) or its number of terms */
    tt_strtab ids;             /* record ids, index = record number (distinct) */
    uint64_t nent, cap_ent, cap_rec;
    /* kind IDS with a vocabulary (tt_sparse_set_load_jsonl_vocab): its terms, id = entry
     * number; ids must be below vocab_size; string terms are mapped through it. */
    tt_strtab vocab;
    uint64_t vocab_size;       /* 0: no vocabulary (any 32-bit id) */
};

/* An empty set of the given kind. */
int tt_sparse_set_new(tt_sparse_set **out, int kind);
/* Appends one record: nt (term, value) pairs (terms need not be distinct: values of a
 * repeated term add up) and its length. Values must be finite and >= 0 (zeros are
 * dropped); terms 1..TT_SPARSE_MAX_TERM bytes. Errors name `where`. */
int tt_sparse_set_append(tt_sparse_set *s, const char *id, size_t id_len, uint32_t nt,
                         const char *const *terms, const size_t *term_lens,
                         const float *values, uint32_t len, const char *where);
/* Tokenizes text (lowercase ASCII alphanumeric runs; every other byte separates) and
 * appends the record with its token counts (BM25 kind). */
/* Kind IDS: appends one record of nt (term id, value) pairs (as tt_sparse_set_append;
 * ids below the vocabulary's size when the set has one). */
int tt_sparse_set_append_ids(tt_sparse_set *s, const char *id, size_t id_len, uint32_t nt,
                             const uint32_t *tids, const float *values, const char *where);
/* The id of term id in a kind IDS set (its 4-byte key). */
static inline uint32_t tt_sparse_key_id(const char *key) {
    const unsigned char *k = (const unsigned char *)key;
    return (uint32_t)k[0] << 24 | (uint32_t)k[1] << 16 | (uint32_t)k[2] << 8 | k[3];
}
int tt_sparse_set_append_text(tt_sparse_set *s, const char *id, size_t id_len,
                              const char *text, size_t n, const char *where);

/* Parses JSON Lines sparse vectors data[0..n) (tt_sparse_set_load_jsonl's format) into
 * s; errors name path:line. */
int tt_sparse_set_parse_jsonl(tt_sparse_set *s, const char *data, size_t n, const char *path);
/* Reads a vocabulary (one term per line, id = line number - 1; distinct non-empty UTF-8
 * terms of at most TT_SPARSE_MAX_TERM bytes) into s's vocab and vocab_size. */
int tt_sparse_vocab_parse(tt_sparse_set *s, const char *data, size_t n, const char *path);

/* The tokenizer: calls fn for each token of text[0..n) (lowercased into a buffer of
 * TT_SPARSE_MAX_TERM bytes; longer tokens are cut). Returns the number of tokens. */
typedef int (*tt_token_fn)(void *user, const char *tok, size_t len);
int tt_sparse_tokenize(const char *text, size_t n, tt_token_fn fn, void *user, uint64_t *ntok);

/* ------------------------------------------------------------- vocab.tt */

/* vocab.tt (vocab.c; doc/format.md, "Stored vocabulary"): an index's vocabulary of term
 * ids, kind VOCB, a = V terms, b = L term bytes, c = 0; payload u64 term_off[V+1] then
 * the L term bytes; term i (its id) is blob[term_off[i] .. term_off[i+1]). */
#define TT_F_VOCAB "vocab.tt"
#define TT_VOCAB_KIND "VOCB"
/* The payload of v (one allocation, *out; free it) and header fields a, b. */
int tt_sparse_vocab_payload(const tt_strtab *v, uint8_t **out, uint64_t *len, uint64_t *a,
                            uint64_t *b);
/* Validates a vocab.tt payload completely (offsets, 1..256-byte UTF-8 terms without NUL,
 * all distinct) and interns its terms into v in id order (v zeroed first; freed on
 * error). TT_ECORRUPT naming path. */
int tt_sparse_vocab_read(tt_strtab *v, const uint8_t *payload, uint64_t len, uint64_t a,
                         uint64_t b, uint64_t c, const char *path);
/* 0 when x and y hold the same terms in the same order, else 1 with the first
 * difference described in why[0..n). */
int tt_sparse_vocab_compare(const tt_strtab *x, const tt_strtab *y, char *why, size_t n);
/* s's vocabulary (vocab, vocab_size) replaced by a copy of v. */
int tt_sparse_vocab_copy(tt_sparse_set *s, const tt_strtab *v);
/* A kind-IDS set (with v as its vocabulary) of in's records (string terms, BM25 counts
 * or weights): each term looked up in v, terms v lacks dropped (they match no
 * document), values kept. */
int tt_sparse_set_to_ids(const tt_sparse_set *in, const tt_strtab *v, tt_sparse_set **out);
/* tt_sparse_set_load_jsonl_vocab with an index's stored vocabulary (stored, NULL or
 * empty: none; stored_path names it in errors): without a vocabulary file the stored
 * one maps string terms and bounds the ids; with one, it must equal the stored one. */
int tt_sparse_set_load_jsonl_stored(tt_sparse_set **out, const char *path, const char *vocab,
                                    const tt_strtab *stored, const char *stored_path);

/* ------------------------------------------------------------- sparse.tt */

/* A validated sparse.tt payload (read.c), read in place. D documents (local rows),
 * T terms sorted bytewise, NB blocks of up to TT_SPARSE_BLOCK postings. */
typedef struct tt_sparse_seg {
    uint64_t D, T, NB;
    uint32_t kind;
    uint64_t total_len;        /* sum of the documents' lengths */
    const uint8_t *lens;       /* u32[D] */
    const uint8_t *term_off;   /* u64[T+1] into blob */
    const char *blob;
    const uint8_t *tterm;      /* T entries of 16 bytes: u32 df, f32 scale, u64 first block */
    const uint8_t *blocks;     /* NB entries of 24 bytes: u64 data offset, u32 last doc,
                                * u32 min length, u32 max value, u32 0 */
    const uint8_t *data;
    uint64_t data_bytes;
} tt_sparse_seg;

#define TT_SPARSE_TERM_BYTES 16u
#define TT_SPARSE_BLOCK_BYTES 24u
#define TT_SPARSE_DIR_BYTES 32u

/* Validates the payload (len bytes; header fields a = D, b = T, c = kind) completely:
 * section sizes, term order, block tables, and every block's decoding. TT_ECORRUPT
 * naming path on any inconsistency. */
int tt_sparse_seg_parse(tt_sparse_seg *s, const uint8_t *payload, uint64_t len, uint64_t a,
                        uint64_t b, uint64_t c, const char *path);
/* Term number of t[0..n) or -1. */
int64_t tt_sparse_seg_find(const tt_sparse_seg *s, const char *t, size_t n);
static inline uint32_t tt_sparse_seg_df(const tt_sparse_seg *s, uint64_t t) {
    return tt_rd32(s->tterm + TT_SPARSE_TERM_BYTES * t);
}
static inline float tt_sparse_seg_scale(const tt_sparse_seg *s, uint64_t t) {
    return tt_rdf32(s->tterm + TT_SPARSE_TERM_BYTES * t + 4);
}
static inline uint64_t tt_sparse_seg_first_block(const tt_sparse_seg *s, uint64_t t) {
    return tt_rd64(s->tterm + TT_SPARSE_TERM_BYTES * t + 8);
}
static inline uint32_t tt_sparse_seg_len(const tt_sparse_seg *s, uint64_t d) {
    return tt_rd32(s->lens + 4 * d);
}
/* Decodes block `blk` (of a term whose postings start at block `first` and number df)
 * into docs/vals (TT_SPARSE_BLOCK each); returns its postings. The payload must have
 * been validated. */
uint32_t tt_sparse_block_decode(const tt_sparse_seg *s, uint64_t first, uint32_t df, uint64_t blk,
                                uint32_t *docs, uint8_t *vals);

/* The payload of sparse.tt for records [r0, r0 + n) of set (write.c), in one allocation
 * (*out, *len; free it), with the header fields a, b, c. Weights are quantized per term
 * to 1..255 with scale = max weight / 255; BM25 counts are capped at 255. */
int tt_sparse_payload(const tt_sparse_set *set, uint64_t r0, uint64_t n, uint8_t **out,
                      uint64_t *len, uint64_t *a, uint64_t *b, uint64_t *c);
/* The same with, when global_scale, each term's scale taken over all of set's records
 * (not only [r0, r0 + n)): a shard's file then quantizes every weight exactly as the
 * unsharded index's one segment does. */
int tt_sparse_payload_scaled(const tt_sparse_set *set, uint64_t r0, uint64_t n,
                             bool global_scale, uint8_t **out, uint64_t *len, uint64_t *a,
                             uint64_t *b, uint64_t *c);
/* The same with, where fixed (may be NULL; one entry per term of set) holds a scale
 * (> 0), that scale for the term instead of its largest weight / 255: weights that
 * were quantized with it (q * scale, dequantized) come back as the same q, so a
 * reshard keeps every posting's value and scale exactly. Terms without one (0, or < 0:
 * the sources disagree) are scaled as tt_sparse_payload_scaled does. */
int tt_sparse_payload_fixed(const tt_sparse_set *set, uint64_t r0, uint64_t n,
                            bool global_scale, const float *fixed, uint8_t **out,
                            uint64_t *len, uint64_t *a, uint64_t *b, uint64_t *c);
/* Appends the documents of seg whose local rows are not marked in dead (a bitmap of
 * seg->D bits, or NULL) to set (same kind), with ids from id(user, row): what
 * a compaction merges. Weights come back dequantized (q * scale). */
typedef const char *(*tt_sparse_id_fn)(void *user, uint64_t row, size_t *len);
int tt_sparse_seg_extract(const tt_sparse_seg *seg, const uint64_t *dead, tt_sparse_id_fn id,
                          void *user, tt_sparse_set *set);

/* -------------------------------------------------------------- scoring */

/* Scoring parameters of one query over one index snapshot. */
typedef struct tt_sparse_scoring {
    uint32_t kind;
    double k1, b, avgdl;       /* BM25 */
} tt_sparse_scoring;

/* One query term's list in one segment, with its query-side factor: BM25 qw * idf,
 * weights qw * scale. */
typedef struct tt_sparse_term {
    uint32_t qi;               /* the query term's position (scores add up in this order) */
    double factor;
    uint64_t first;            /* first block */
    uint32_t df;
} tt_sparse_term;

/* BM25's mean document length: total_len over live documents (1 with none, or with
 * every live document empty), for one index or summed over shards alike. */
static inline double tt_bm25_avgdl(uint64_t live, uint64_t total_len) {
    const double a = live ? (double)total_len / (double)live : 1.0;
    return a > 0 ? a : 1.0;
}

/* Contribution of a posting (value v, document length dl). */
static inline double tt_sparse_contrib(const tt_sparse_scoring *sc, double factor, uint32_t v,
                                       uint32_t dl) {
    if (sc->kind == TT_SPARSE_KIND_BM25) {
        double tf = (double)v;
        double norm = sc->k1 * (1.0 - sc->b + sc->b * (double)dl / sc->avgdl);
        return factor * tf * (sc->k1 + 1.0) / (tf + norm);
    }
    return factor * (double)v;
}

/* The top-k collector shared by the exact search and the brute force: best score first,
 * ties by lower row. */
typedef struct tt_sparse_heap {
    uint32_t k, n;
    double *score;
    uint64_t *row;
} tt_sparse_heap;
int tt_sparse_heap_init(tt_sparse_heap *h, uint32_t k);
void tt_sparse_heap_free(tt_sparse_heap *h);
/* Offers (score, row); keeps the k best. */
void tt_sparse_heap_push(tt_sparse_heap *h, double score, uint64_t row);
/* The score a new document must beat (strictly, rows coming in ascending order), or
 * -inf while the heap is not full. */
double tt_sparse_heap_threshold(const tt_sparse_heap *h);
/* Sorts the kept hits best first (score descending, row ascending). */
void tt_sparse_heap_sort(tt_sparse_heap *h);

/* Counters of one search. */
typedef struct tt_sparse_counts {
    uint64_t postings_decoded, docs_scored, blocks_skipped;
} tt_sparse_counts;

/* Scores the nt lists of one segment (rows doc0 + local) into h by block-max MaxScore:
 * exactly the hits tt_sparse_brute gives. dead: the deleted rows (a bitmap over the
 * index's rows, doc0 + local) or NULL; allow: the rows a filter allows (same indexing)
 * or NULL (all): a dead or disallowed document is never scored nor offered to h.
 * nq: the query's number of terms (qi < nq). */
int tt_sparse_seg_topk(const tt_sparse_seg *s, const tt_sparse_scoring *sc,
                       const tt_sparse_term *t, uint32_t nt, uint32_t nq, const uint64_t *dead,
                       const uint64_t *allow, uint64_t doc0, tt_sparse_heap *h,
                       tt_sparse_counts *cnt);
/* The reference: every posting of every list scored, summed per document in query term
 * order, offered to h in row order (dead and allow as above). */
int tt_sparse_seg_brute(const tt_sparse_seg *s, const tt_sparse_scoring *sc,
                        const tt_sparse_term *t, uint32_t nt, uint32_t nq, const uint64_t *dead,
                        const uint64_t *allow, uint64_t doc0, tt_sparse_heap *h);

static inline bool tt_bit_get(const uint64_t *bits, uint64_t i) {
    return bits && (bits[i >> 6] >> (i & 63) & 1);
}

#endif

/* Sparse postings, sparse search and fusion (src/sparse/, src/search/sparse_search.c):
 * block-max MaxScore against the brute force on random data with skewed lists and many
 * ties; the file's validation; BM25 through add, delete and compact against a fresh
 * build of the live documents; fusion on hand-worked cases; bad input. */
#include "testutil.h"

#include "index/index.h"
#include "sparse/sparse.h"

#include <dirent.h>
#include <stddef.h>

#define DIM 8

/* A random set: terms "t<i>" drawn with Zipf-like skew (term i with weight 1/(i+1)), so
 * a few lists are long and most short; values small integers (BM25: counts; weights:
 * a few distinct values, so quantized scores tie often). */
static tt_sparse_set *random_set(int kind, uint64_t ndocs, uint32_t vocab, uint64_t seed,
                                 const char *id_prefix) {
    tt_sparse_set *s;
    ck_assert_int_eq(tt_sparse_set_new(&s, kind), TT_OK);
    tt_rng r;
    tt_rng_seed(&r, seed);
    double H = 0;
    for (uint32_t i = 0; i < vocab; i++)
        H += 1.0 / (i + 1);
    char names[64][16];
    const char *tp[64];
    size_t tl[64];
    float w[64];
    for (uint64_t d = 0; d < ndocs; d++) {
        uint32_t nt = (uint32_t)tt_rng_below(&r, 40);
        for (uint32_t j = 0; j < nt; j++) {
            double u = tt_rng_uniform(&r) * H, acc = 0;
            uint32_t t = 0;
            while (t + 1 < vocab && (acc += 1.0 / (t + 1)) < u)
                t++;
            snprintf(names[j], sizeof names[j], "t%u", t);
            tp[j] = names[j];
            tl[j] = strlen(names[j]);
            w[j] = kind == TT_SPARSE_KIND_BM25 ? (float)(1 + tt_rng_below(&r, 3))
                                               : (float)(1 + tt_rng_below(&r, 4)) * 0.25f;
        }
        char id[32];
        snprintf(id, sizeof id, "%s%llu", id_prefix, (unsigned long long)d);
        uint32_t len = kind == TT_SPARSE_KIND_BM25 ? nt * 2 + (uint32_t)tt_rng_below(&r, 50) : 0;
        ck_assert_msg(tt_sparse_set_append(s, id, strlen(id), nt, tp, tl, w, len, "test") == TT_OK,
                      "%s", tt_last_error());
    }
    return s;
}

static tt_sparse_set *random_queries(uint32_t n, uint32_t vocab, uint64_t seed) {
    tt_sparse_set *s;
    ck_assert_int_eq(tt_sparse_set_new(&s, TT_SPARSE_KIND_WEIGHTS), TT_OK);
    tt_rng r;
    tt_rng_seed(&r, seed);
    char names[64][16];
    const char *tp[64];
    size_t tl[64];
    float w[64];
    for (uint32_t q = 0; q < n; q++) {
        uint32_t nt = 1 + (uint32_t)tt_rng_below(&r, 12);
        for (uint32_t j = 0; j < nt; j++) {
            /* common and rare terms, and some no document has */
            uint32_t t = (uint32_t)tt_rng_below(&r, vocab + vocab / 8);
            snprintf(names[j], sizeof names[j], "t%u", t);
            tp[j] = names[j];
            tl[j] = strlen(names[j]);
            w[j] = (float)(1 + tt_rng_below(&r, 3)) * 0.5f;
        }
        char id[16];
        snprintf(id, sizeof id, "q%u", q);
        ck_assert_int_eq(tt_sparse_set_append(s, id, strlen(id), nt, tp, tl, w, 0, "q"), TT_OK);
    }
    return s;
}

/* Builds the segment's postings in memory and checks every query and k in MaxScore
 * against the brute force: the same rows, the same scores bit for bit. */
START_TEST(topk_equals_brute_force) {
    const int kind = _i & 1 ? TT_SPARSE_KIND_WEIGHTS : TT_SPARSE_KIND_BM25;
    const uint64_t D = 3000;
    const uint32_t V = 400;
    tt_sparse_set *docs = random_set(kind, D, V, 1000 + (uint64_t)_i, "d");
    tt_sparse_set *qs = random_queries(40, V, 77 + (uint64_t)_i);
    uint8_t *p;
    uint64_t len, a, b, c;
    ck_assert_int_eq(tt_sparse_payload(docs, 0, D, &p, &len, &a, &b, &c), TT_OK);
    tt_sparse_seg seg;
    ck_assert_msg(tt_sparse_seg_parse(&seg, p, len, a, b, c, "mem") == TT_OK, "%s", tt_last_error());
    ck_assert_uint_eq(seg.D, D);
    /* deleted rows: none, or every 7th */
    uint64_t *dead = calloc(D / 64 + 1, 8);
    for (uint64_t d = 0; d < D; d += 7)
        dead[d >> 6] |= 1ull << (d & 63);
    /* filters: about 3% and about 50% of the rows allowed, at random */
    uint64_t *allow3 = calloc(D / 64 + 1, 8), *allow50 = calloc(D / 64 + 1, 8);
    tt_rng fr;
    tt_rng_seed(&fr, 99 + (uint64_t)_i);
    for (uint64_t d = 0; d < D; d++) {
        uint64_t x = tt_rng_below(&fr, 100);
        if (x < 3)
            allow3[d >> 6] |= 1ull << (d & 63);
        if (x < 50)
            allow50[d >> 6] |= 1ull << (d & 63);
    }
    tt_sparse_heap all;
    ck_assert_int_eq(tt_sparse_heap_init(&all, (uint32_t)D), TT_OK);
    double total = 0;
    for (uint64_t d = 0; d < D; d++)
        total += tt_sparse_seg_len(&seg, d);
    tt_sparse_scoring sc = {.kind = (uint32_t)kind, .k1 = 0.9, .b = 0.4, .avgdl = total / (double)D};
    static const uint32_t ks[] = {1, 3, 10, 100, 1000, 5000};
    tt_sparse_term terms[64];
    uint64_t decoded = 0, brute_postings = 0;
    for (uint64_t q = 0; q < qs->n; q++) {
        uint32_t nq = (uint32_t)(qs->off[q + 1] - qs->off[q]), nt = 0;
        for (uint32_t i = 0; i < nq; i++) {
            uint32_t t = qs->term[qs->off[q] + i];
            int64_t id = tt_sparse_seg_find(&seg, tt_st_str(&qs->terms, t), tt_st_len(&qs->terms, t));
            if (id < 0)
                continue;
            double f = qs->value[qs->off[q] + i] *
                       (kind == TT_SPARSE_KIND_BM25 ? 1.0 + 0.1 * i
                                                    : (double)tt_sparse_seg_scale(&seg, (uint64_t)id));
            terms[nt++] = (tt_sparse_term){.qi = i, .factor = f,
                                           .first = tt_sparse_seg_first_block(&seg, (uint64_t)id),
                                           .df = tt_sparse_seg_df(&seg, (uint64_t)id)};
            brute_postings += tt_sparse_seg_df(&seg, (uint64_t)id);
        }
        /* every document's score, for the filtered cases' reference */
        all.n = 0;
        ck_assert_int_eq(tt_sparse_seg_brute(&seg, &sc, terms, nt, nq, NULL, NULL, 0, &all),
                         TT_OK);
        tt_sparse_heap_sort(&all);
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
            /* 0: all rows; 1: deletions; 2: a 3% filter; 3: a 50% filter and deletions */
            for (int del = 0; del < 4; del++) {
                tt_sparse_heap h1, h2;
                tt_sparse_counts cnt = {0};
                ck_assert_int_eq(tt_sparse_heap_init(&h1, ks[ki]), TT_OK);
                ck_assert_int_eq(tt_sparse_heap_init(&h2, ks[ki]), TT_OK);
                const uint64_t doc0 = 0;
                const uint64_t *dd = del & 1 ? dead : NULL;
                const uint64_t *allow = del == 2 ? allow3 : del == 3 ? allow50 : NULL;
                ck_assert_int_eq(tt_sparse_seg_topk(&seg, &sc, terms, nt, nq, dd, allow, doc0,
                                                    &h1, &cnt), TT_OK);
                if (!allow) {
                    ck_assert_int_eq(tt_sparse_seg_brute(&seg, &sc, terms, nt, nq, dd, NULL,
                                                         doc0, &h2), TT_OK);
                } else {
                    /* the unfiltered ranking, keeping the allowed live rows */
                    for (uint32_t i = 0; i < all.n && h2.n < ks[ki]; i++) {
                        uint64_t r = all.row[i];
                        if (!tt_bit_get(dd, r) && tt_bit_get(allow, r)) {
                            h2.score[h2.n] = all.score[i];
                            h2.row[h2.n++] = r;
                        }
                    }
                }
                decoded += cnt.postings_decoded;
                if (allow) { /* MaxScore scores no document outside the filter */
                    uint64_t na = 0;
                    for (uint64_t w = 0; w <= D / 64; w++)
                        na += (uint64_t)__builtin_popcountll(allow[w]);
                    ck_assert_uint_le(cnt.docs_scored, na);
                }
                tt_sparse_heap_sort(&h1);
                if (!allow)
                    tt_sparse_heap_sort(&h2);
                ck_assert_uint_eq(h1.n, h2.n);
                for (uint32_t i = 0; i < h1.n; i++) {
                    ck_assert_msg(h1.row[i] == h2.row[i] && h1.score[i] == h2.score[i],
                                  "query %llu k %u rank %u: maxscore row %llu %.17g, brute row "
                                  "%llu %.17g", (unsigned long long)q, ks[ki], i,
                                  (unsigned long long)h1.row[i], h1.score[i],
                                  (unsigned long long)h2.row[i], h2.score[i]);
                    ck_assert(!dd || !(dead[h1.row[i] >> 6] >> (h1.row[i] & 63) & 1));
                    ck_assert(!allow || tt_bit_get(allow, h1.row[i]));
                    if (i > 0)
                        ck_assert(h1.score[i - 1] > h1.score[i] ||
                                  (h1.score[i - 1] == h1.score[i] && h1.row[i - 1] < h1.row[i]));
                }
                tt_sparse_heap_free(&h1);
                tt_sparse_heap_free(&h2);
            }
    }
    /* skipping happened: MaxScore decoded fewer postings than the lists hold */
    ck_assert_msg(decoded < brute_postings * 24, "decoded %llu of %llu",
                  (unsigned long long)decoded, (unsigned long long)brute_postings * 24);
    tt_sparse_heap_free(&all);
    free(allow3);
    free(allow50);
    free(dead);
    free(p);
    tt_sparse_set_free(docs);
    tt_sparse_set_free(qs);
}
END_TEST

/* Every single-byte change to a valid payload either still parses or is refused with
 * TT_ECORRUPT, never read out of bounds (ASan watches). */
START_TEST(parse_refuses_damage) {
    tt_sparse_set *docs = random_set(TT_SPARSE_KIND_WEIGHTS, 300, 50, 5, "d");
    uint8_t *p;
    uint64_t len, a, b, c;
    ck_assert_int_eq(tt_sparse_payload(docs, 0, 300, &p, &len, &a, &b, &c), TT_OK);
    tt_sparse_seg seg;
    ck_assert_int_eq(tt_sparse_seg_parse(&seg, p, len, a, b, c, "mem"), TT_OK);
    ck_assert_int_eq(tt_sparse_seg_parse(&seg, p, len - 1, a, b, c, "mem"), TT_ECORRUPT);
    ck_assert_int_eq(tt_sparse_seg_parse(&seg, p, len, a + 1, b, c, "mem"), TT_ECORRUPT);
    ck_assert_int_eq(tt_sparse_seg_parse(&seg, p, len, a, b, 3, "mem"), TT_ECORRUPT);
    uint8_t *q = malloc(len);
    int refused = 0;
    for (uint64_t i = 0; i < len; i += 3) {
        memcpy(q, p, len);
        q[i] ^= 0x5a;
        int st = tt_sparse_seg_parse(&seg, q, len, a, b, c, "mem");
        ck_assert(st == TT_OK || st == TT_ECORRUPT);
        refused += st != TT_OK;
    }
    ck_assert_int_gt(refused, 0);
    free(q);
    free(p);
    tt_sparse_set_free(docs);
}
END_TEST

/* ------------------------------------------------------- through an index */

static tt_input *vectors_for(const char *dir, const char *name, uint64_t ndocs, uint64_t seed,
                             const char *id_prefix) {
    char v[600], l[600], i[600];
    snprintf(v, sizeof v, "%s/%s.vectors.npy", dir, name);
    snprintf(l, sizeof l, "%s/%s.doclens.npy", dir, name);
    snprintf(i, sizeof i, "%s/%s.ids.txt", dir, name);
    int64_t *lens = malloc(ndocs * sizeof *lens);
    uint64_t nv = 0;
    for (uint64_t d = 0; d < ndocs; d++)
        nv += (uint64_t)(lens[d] = 2 + (int64_t)(d % 3));
    float *x = malloc(nv * DIM * sizeof *x);
    tu_clustered(x, nv, DIM, 8, 0.3f, seed, NULL);
    ck_assert_int_eq(tu_write_npy(v, TT_DT_F32, DIM, x, nv), TT_OK);
    ck_assert_int_eq(tu_write_npy(l, TT_DT_I64, 0, lens, ndocs), TT_OK);
    FILE *f = fopen(i, "w");
    for (uint64_t d = 0; d < ndocs; d++)
        fprintf(f, "%s%llu\n", id_prefix, (unsigned long long)d);
    fclose(f);
    const char *vp[] = {v}, *lp[] = {l};
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, i, NULL), TT_OK);
    free(lens);
    free(x);
    return in;
}

/* A sparse set holding records [r0, r1) of src, ids kept (what a file of those
 * documents would give). */
static tt_sparse_set *subset(const tt_sparse_set *src, const uint8_t *keep, uint64_t r0,
                             uint64_t r1) {
    tt_sparse_set *s;
    ck_assert_int_eq(tt_sparse_set_new(&s, src->kind), TT_OK);
    const char *tp[256];
    size_t tl[256];
    for (uint64_t r = r0; r < r1; r++) {
        if (keep && !keep[r])
            continue;
        uint64_t e0 = src->off[r], n = src->off[r + 1] - e0;
        ck_assert_uint_le(n, 256);
        for (uint64_t j = 0; j < n; j++) {
            tp[j] = tt_st_str(&src->terms, src->term[e0 + j]);
            tl[j] = tt_st_len(&src->terms, src->term[e0 + j]);
        }
        const char *id = tt_st_str(&src->ids, (uint32_t)r);
        ck_assert_int_eq(tt_sparse_set_append(s, id, strlen(id), (uint32_t)n, tp, tl,
                                              src->value + e0, src->len[r], "subset"), TT_OK);
    }
    return s;
}

/* Every query: the same ids with the same scores in both indexes (and MaxScore equal to
 * the brute force in each). */
static void assert_same_sparse(const char *live, const char *ref, const tt_sparse_set *qs,
                               const char *when) {
    tt_index *a, *b;
    ck_assert_msg(tt_index_open(&a, live, NULL) == TT_OK, "%s: %s", when, tt_last_error());
    ck_assert_int_eq(tt_index_open(&b, ref, NULL), TT_OK);
    ck_assert_int_eq(tt_index_sparse_kind(a), TT_SPARSE_BM25);
    tt_sparse_options so, bf;
    tt_sparse_options_init(&so);
    tt_sparse_options_init(&bf);
    bf.brute_force = 1;
    tt_hit ha[50], hb[50], hc[50];
    uint32_t na, nb, nc;
    for (uint64_t q = 0; q < qs->n; q++) {
        ck_assert_int_eq(tt_sparse_search(a, qs, q, 50, &so, ha, &na), TT_OK);
        ck_assert_int_eq(tt_sparse_search(b, qs, q, 50, &so, hb, &nb), TT_OK);
        ck_assert_int_eq(tt_sparse_search(a, qs, q, 50, &bf, hc, &nc), TT_OK);
        ck_assert_msg(na == nb && na == nc, "%s: query %llu: %u / %u / %u hits", when,
                      (unsigned long long)q, na, nb, nc);
        for (uint32_t i = 0; i < na; i++) {
            size_t la, lb;
            const char *ia = tt_index_doc_id(a, ha[i].doc, &la);
            const char *ib = tt_index_doc_id(b, hb[i].doc, &lb);
            ck_assert_msg(la == lb && !memcmp(ia, ib, la) && ha[i].score == hb[i].score,
                          "%s: query %llu rank %u: %.*s %.9g vs %.*s %.9g", when,
                          (unsigned long long)q, i, (int)la, ia, (double)ha[i].score, (int)lb,
                          ib, (double)hb[i].score);
            ck_assert(ha[i].doc == hc[i].doc && ha[i].score == hc[i].score);
        }
    }
    tt_index_close(a);
    tt_index_close(b);
}

START_TEST(bm25_through_add_delete_compact) {
    char *dir = tu_tmpdir();
    char live[600], ref[600];
    snprintf(live, sizeof live, "%s/live", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    const uint64_t n1 = 300, n2 = 200;
    /* one collection of n1 + n2 documents: ids d0.., the first n1 built, the rest added */
    tt_sparse_set *all = random_set(TT_SPARSE_KIND_BM25, n1 + n2, 120, 9, "d");
    tt_sparse_set *qs = random_queries(25, 120, 10);
    tt_input *in_all = vectors_for(dir, "all", n1 + n2, 3, "d");
    tt_input *in1 = vectors_for(dir, "one", n1, 3, "d");
    /* the second part's vectors: the same as the whole's rows n1.. is not needed, since
     * only sparse results are compared; its ids must be d<n1>.. */
    char v[600], l[600], i[600];
    snprintf(v, sizeof v, "%s/two.vectors.npy", dir);
    snprintf(l, sizeof l, "%s/two.doclens.npy", dir);
    snprintf(i, sizeof i, "%s/two.ids.txt", dir);
    tt_input *tmp = vectors_for(dir, "two", n2, 4, "x");
    tt_input_free(tmp);
    FILE *f = fopen(i, "w");
    for (uint64_t d = n1; d < n1 + n2; d++)
        fprintf(f, "d%llu\n", (unsigned long long)d);
    fclose(f);
    const char *vp[] = {v}, *lp[] = {l};
    tt_input *in2;
    ck_assert_int_eq(tt_input_open(&in2, 1, vp, lp, i, NULL), TT_OK);

    tt_build_options o;
    tt_build_options_init(&o);
    o.threads = 2;
    o.memory_bytes = 128ull << 20;
    o.num_centroids = 8;
    tt_sparse_set *s1 = subset(all, NULL, 0, n1), *s2 = subset(all, NULL, n1, n1 + n2);
    o.sparse = s1;
    ck_assert_msg(tt_build(live, in1, &o, NULL) == TT_OK, "%s", tt_last_error());
    /* add without sparse vectors: refused, the index as it was */
    tt_change_options co;
    tt_change_options_init(&co);
    ck_assert_int_eq(tt_index_add(live, in2, &co, NULL), TT_EINVAL);
    /* a set of another length: refused */
    co.sparse = s1;
    ck_assert_int_eq(tt_index_add(live, in2, &co, NULL), TT_EDIM);
    co.sparse = s2;
    ck_assert_msg(tt_index_add(live, in2, &co, NULL) == TT_OK, "%s", tt_last_error());
    o.sparse = all;
    ck_assert_int_eq(tt_build(ref, in_all, &o, NULL), TT_OK);
    assert_same_sparse(live, ref, qs, "after add");

    /* delete every 5th document (both parts); the reference is built from the rest */
    uint8_t *keep = malloc(n1 + n2);
    const char *del[200];
    char names[200][16];
    size_t nd = 0;
    for (uint64_t d = 0; d < n1 + n2; d++) {
        keep[d] = d % 5 != 2;
        if (!keep[d]) {
            snprintf(names[nd], sizeof names[nd], "d%llu", (unsigned long long)d);
            del[nd] = names[nd];
            nd++;
        }
    }
    co.sparse = NULL;
    ck_assert_int_eq(tt_index_delete(live, del, nd, &co, NULL), TT_OK);
    tt_sparse_set *kept = subset(all, keep, 0, n1 + n2);
    /* the reference's dense vectors: any with the kept ids */
    snprintf(v, sizeof v, "%s/kept", dir);
    tt_input *in_kept = vectors_for(dir, "kept", kept->n, 5, "tmp");
    tt_input_free(in_kept);
    snprintf(i, sizeof i, "%s/kept.ids.txt", dir);
    f = fopen(i, "w");
    for (uint64_t r = 0; r < kept->n; r++)
        fprintf(f, "%s\n", tt_st_str(&kept->ids, (uint32_t)r));
    fclose(f);
    char v2[600], l2[600];
    snprintf(v2, sizeof v2, "%s/kept.vectors.npy", dir);
    snprintf(l2, sizeof l2, "%s/kept.doclens.npy", dir);
    const char *vp2[] = {v2}, *lp2[] = {l2};
    ck_assert_int_eq(tt_input_open(&in_kept, 1, vp2, lp2, i, NULL), TT_OK);
    o.sparse = kept;
    o.force = 1;
    ck_assert_int_eq(tt_build(ref, in_kept, &o, NULL), TT_OK);
    assert_same_sparse(live, ref, qs, "after delete");
    ck_assert_int_eq(tt_index_compact(live, NULL, NULL), TT_OK);
    assert_same_sparse(live, ref, qs, "after compact");
    ck_assert_int_eq(tt_index_verify(live, NULL, NULL), TT_OK);
    /* compacted: the same rows, so the same sparse.tt as the fresh build */
    tt_index *a, *b;
    ck_assert_int_eq(tt_index_open(&a, live, NULL), TT_OK);
    ck_assert_int_eq(tt_index_open(&b, ref, NULL), TT_OK);
    ck_assert_uint_eq(a->seg[0].f_sparse.h.payload_bytes, b->seg[0].f_sparse.h.payload_bytes);
    ck_assert(!memcmp(a->seg[0].f_sparse.payload, b->seg[0].f_sparse.payload,
                      a->seg[0].f_sparse.h.payload_bytes));
    tt_index_close(a);
    tt_index_close(b);

    free(keep);
    tt_sparse_set_free(all);
    tt_sparse_set_free(qs);
    tt_sparse_set_free(s1);
    tt_sparse_set_free(s2);
    tt_sparse_set_free(kept);
    tt_input_free(in_all);
    tt_input_free(in1);
    tt_input_free(in2);
    tt_input_free(in_kept);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Sizes of the files of dir whose names contain `part` (NULL: all but the originals and
 * the writer's lock): the model of tt_index_info's byte counts. */
static uint64_t dir_bytes(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    uint64_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char p[1200];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (stat(p, &sb) || !S_ISREG(sb.st_mode))
            continue;
        if (part ? strstr(e->d_name, part) != NULL
                 : !strstr(e->d_name, "originals") && strcmp(e->d_name, "LOCK"))
            n += (uint64_t)sb.st_size;
    }
    closedir(d);
    return n;
}

/* The allowed live rows in the order of an unfiltered ranking, at most k: the model of a
 * filtered search (the filter's code not involved). */
static uint32_t keep_allowed(const tt_index *x, const tt_hit *all, uint32_t nall,
                             const uint8_t *allowed, uint32_t k, tt_hit *out) {
    uint32_t m = 0;
    for (uint32_t i = 0; i < nall && m < k; i++)
        if (allowed[all[i].doc] && !tt_index_deleted(x, all[i].doc))
            out[m++] = all[i];
    return m;
}

/* Filters in sparse search (MaxScore and brute force) and in hybrid search, at
 * selectivities 0.2% to 100% with deletions, against the unfiltered rankings restricted
 * to the allowed rows; the filter made by --where over the build's metadata. And
 * tt_index_info counts sparse.tt and metadata.tt in bytes_index. */
START_TEST(filtered_sparse_and_hybrid) {
    char *dir = tu_tmpdir();
    char idxdir[600], meta[600];
    snprintf(idxdir, sizeof idxdir, "%s/idx", dir);
    snprintf(meta, sizeof meta, "%s/meta.jsonl", dir);
    const uint64_t N = 1000;
    tt_sparse_set *docs = random_set(TT_SPARSE_KIND_BM25, N, 150, 21, "d");
    tt_sparse_set *qs = random_queries(15, 150, 22);
    tt_input *in = vectors_for(dir, "v", N, 23, "d");
    int *bucket = malloc(N * sizeof *bucket);
    tt_rng r;
    tt_rng_seed(&r, 24);
    FILE *f = fopen(meta, "w");
    for (uint64_t d = 0; d < N; d++) {
        bucket[d] = (int)tt_rng_below(&r, 1000);
        fprintf(f, "{\"bucket\": %d}\n", bucket[d]);
    }
    fclose(f);
    tt_build_options o;
    tt_build_options_init(&o);
    o.threads = 2;
    o.memory_bytes = 128ull << 20;
    o.num_centroids = 16;
    o.sparse = docs;
    o.metadata = meta;
    ck_assert_msg(tt_build(idxdir, in, &o, NULL) == TT_OK, "%s", tt_last_error());

    /* bytes_index: every file of the generation but the originals */
    tt_index *x;
    ck_assert_int_eq(tt_index_open(&x, idxdir, NULL), TT_OK);
    tt_index_info info;
    ck_assert_int_eq(tt_index_get_info(x, &info), TT_OK);
    ck_assert_uint_gt(info.bytes_sparse, 0);
    ck_assert_uint_gt(info.bytes_metadata, 0);
    ck_assert_uint_eq(info.bytes_sparse, dir_bytes(idxdir, "sparse"));
    ck_assert_uint_eq(info.bytes_metadata, dir_bytes(idxdir, "metadata"));
    ck_assert_uint_eq(info.bytes_tune, 0);
    ck_assert_uint_eq(info.bytes_index, dir_bytes(idxdir, NULL));
    tt_sparse_info spi;
    ck_assert_int_eq(tt_index_sparse_info(x, &spi), TT_OK);
    ck_assert_uint_eq(spi.bytes, info.bytes_sparse);
    /* the compression ratios stay the dense part's */
    ck_assert_double_eq_tol(info.ratio_f16, (double)info.bytes_f16 /
                            (double)(info.bytes_index - info.bytes_sparse - info.bytes_metadata),
                            1e-9);
    tt_index_close(x);

    /* delete every 9th document: filters and deletions together */
    const char *del[120];
    char names[120][16];
    size_t nd = 0;
    for (uint64_t d = 4; d < N; d += 9) {
        snprintf(names[nd], sizeof names[nd], "d%llu", (unsigned long long)d);
        del[nd] = names[nd];
        nd++;
    }
    ck_assert_int_eq(tt_index_delete(idxdir, del, nd, NULL, NULL), TT_OK);
    ck_assert_int_eq(tt_index_open(&x, idxdir, NULL), TT_OK);
    tt_metadata *md;
    ck_assert_int_eq(tt_metadata_open(x, &md), TT_OK);

    /* the unfiltered rankings of every query: sparse (all hits) and dense exhaustive */
    const uint32_t all = (uint32_t)N, k = 10, depth = 40;
    tt_hit *sall = malloc(qs->n * all * sizeof *sall), *dall = malloc(qs->n * all * sizeof *dall);
    uint32_t *nsall = malloc(qs->n * sizeof *nsall), *ndall = malloc(qs->n * sizeof *ndall);
    /* the dense queries: 3 vectors each; query q is sparse record q */
    const uint32_t qlen = 3;
    float *Q = malloc(qs->n * qlen * DIM * sizeof *Q);
    tu_clustered(Q, qs->n * qlen, DIM, 8, 0.3f, 25, NULL);
    uint64_t *qoffs = malloc(qs->n * sizeof *qoffs);
    uint32_t *qlens = malloc(qs->n * sizeof *qlens);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(x, &ctx), TT_OK);
    tt_search_options dso;
    tt_search_options_init(&dso);
    dso.mode = TT_MODE_EXHAUSTIVE;
    for (uint64_t q = 0; q < qs->n; q++) {
        qoffs[q] = q * qlen;
        qlens[q] = qlen;
        ck_assert_int_eq(tt_sparse_search(x, qs, q, all, NULL, sall + q * all, &nsall[q]), TT_OK);
        ck_assert_int_eq(tt_search(x, ctx, Q + q * qlen * DIM, qlen, all, &dso, dall + q * all,
                                   &ndall[q]), TT_OK);
    }
    uint8_t *allowed = malloc(N);
    tt_fusion_options fo;
    tt_fusion_options_init(&fo);
    fo.depth = depth;
    const int cuts[] = {2, 10, 100, 500, 1000}; /* 0.2% .. 100% */
    tt_hit got[10], want[10], a[40], b[40], *hy = malloc(qs->n * k * sizeof *hy);
    uint32_t *nhy = malloc(qs->n * sizeof *nhy);
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        char expr[64];
        snprintf(expr, sizeof expr, "bucket < %d", cuts[c]);
        tt_filter *flt;
        ck_assert_int_eq(tt_metadata_where(md, expr, &flt), TT_OK);
        for (uint64_t d = 0; d < N; d++)
            allowed[d] = bucket[d] < cuts[c];
        for (int bf = 0; bf < 2; bf++) {
            tt_sparse_options so;
            tt_sparse_options_init(&so);
            so.brute_force = bf;
            so.filter = flt;
            for (uint64_t q = 0; q < qs->n; q++) {
                uint32_t n, m = keep_allowed(x, sall + q * all, nsall[q], allowed, k, want);
                ck_assert_int_eq(tt_sparse_search(x, qs, q, k, &so, got, &n), TT_OK);
                ck_assert_msg(n == m, "cut %d query %llu: %u hits, want %u", cuts[c],
                              (unsigned long long)q, n, m);
                for (uint32_t i = 0; i < n; i++)
                    ck_assert_msg(got[i].doc == want[i].doc && got[i].score == want[i].score,
                                  "cut %d query %llu rank %u: row %llu %.9g, want %llu %.9g",
                                  cuts[c], (unsigned long long)q, i,
                                  (unsigned long long)got[i].doc, (double)got[i].score,
                                  (unsigned long long)want[i].doc, (double)want[i].score);
            }
        }
        /* hybrid: the filter given with the dense options, then with the sparse ones;
         * the model fuses the two restricted rankings */
        for (int side = 0; side < 2; side++) {
            tt_search_options ho = dso;
            tt_sparse_options so;
            tt_sparse_options_init(&so);
            if (side)
                so.filter = flt;
            else
                ho.filter = flt;
            ck_assert_msg(tt_hybrid_search_batch(x, Q, qoffs, qlens, &ho, qs, NULL, &so, &fo,
                                                 qs->n, k, 2, hy, nhy, NULL) == TT_OK, "%s",
                          tt_last_error());
            for (uint64_t q = 0; q < qs->n; q++) {
                uint32_t na = keep_allowed(x, dall + q * all, ndall[q], allowed, depth, a);
                uint32_t nb = keep_allowed(x, sall + q * all, nsall[q], allowed, depth, b), n;
                ck_assert_int_eq(tt_fuse(a, na, b, nb, &fo, k, want, &n), TT_OK);
                ck_assert_uint_eq(nhy[q], n);
                for (uint32_t i = 0; i < n; i++) {
                    ck_assert(allowed[hy[q * k + i].doc]);
                    ck_assert_msg(hy[q * k + i].doc == want[i].doc &&
                                  fabsf(hy[q * k + i].score - want[i].score) <= 1e-5f,
                                  "hybrid cut %d query %llu rank %u: row %llu, want %llu",
                                  cuts[c], (unsigned long long)q, i,
                                  (unsigned long long)hy[q * k + i].doc,
                                  (unsigned long long)want[i].doc);
                }
            }
        }
        /* two different filters: refused */
        tt_filter *other;
        ck_assert_int_eq(tt_filter_new(&other, N), TT_OK);
        tt_search_options ho = dso;
        tt_sparse_options so;
        tt_sparse_options_init(&so);
        ho.filter = flt;
        so.filter = other;
        ck_assert_int_eq(tt_hybrid_search_batch(x, Q, qoffs, qlens, &ho, qs, NULL, &so, &fo,
                                                qs->n, k, 1, hy, nhy, NULL), TT_EINVAL);
        tt_filter_free(other);
        tt_filter_free(flt);
    }
    /* a filter over another number of rows: refused */
    tt_filter *wrong;
    ck_assert_int_eq(tt_filter_new(&wrong, N + 1), TT_OK);
    tt_sparse_options so;
    tt_sparse_options_init(&so);
    so.filter = wrong;
    uint32_t n;
    ck_assert_int_eq(tt_sparse_search(x, qs, 0, k, &so, got, &n), TT_EINVAL);
    tt_filter_free(wrong);
    /* a caller built before the filter existed (the shorter struct): no filter */
    so.filter = (const tt_filter *)(uintptr_t)1; /* past its struct_size: never read */
    so.struct_size = (uint32_t)offsetof(tt_sparse_options, filter);
    ck_assert_int_eq(tt_sparse_search(x, qs, 0, k, &so, got, &n), TT_OK);
    ck_assert_uint_eq(n, TT_MIN(k, nsall[0]));
    for (uint32_t i = 0; i < n; i++)
        ck_assert_uint_eq(got[i].doc, sall[i].doc);
    /* ... and in a hybrid search its sparse list takes the dense options' filter */
    tt_filter *one;
    ck_assert_int_eq(tt_metadata_where(md, "bucket < 10", &one), TT_OK);
    for (uint64_t d = 0; d < N; d++)
        allowed[d] = bucket[d] < 10;
    tt_search_options ho = dso;
    ho.filter = one;
    ck_assert_int_eq(tt_hybrid_search_batch(x, Q, qoffs, qlens, &ho, qs, NULL, &so, &fo,
                                            qs->n, k, 1, hy, nhy, NULL), TT_OK);
    for (uint64_t q = 0; q < qs->n; q++)
        for (uint32_t i = 0; i < nhy[q]; i++)
            ck_assert(allowed[hy[q * k + i].doc]);
    tt_filter_free(one);

    tt_search_ctx_free(ctx);
    tt_metadata_close(md);
    tt_index_close(x);
    free(hy);
    free(nhy);
    free(allowed);
    free(Q);
    free(qoffs);
    free(qlens);
    free(sall);
    free(dall);
    free(nsall);
    free(ndall);
    free(bucket);
    tt_input_free(in);
    tt_sparse_set_free(docs);
    tt_sparse_set_free(qs);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* BM25 by hand: two documents, one query term. */
START_TEST(bm25_hand_worked) {
    char *dir = tu_tmpdir();
    char corpus[600], idx[600];
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    snprintf(idx, sizeof idx, "%s/idx", dir);
    const char *text = "{\"_id\": \"a\", \"title\": \"Cats\", \"text\": \"cats and dogs\"}\n"
                       "{\"_id\": \"b\", \"text\": \"dogs, DOGS; dogs-2\"}\n"
                       "{\"_id\": \"c\", \"text\": \"birds\"}\n";
    ck_assert_int_eq(tu_write_file(corpus, text, strlen(text)), 0);
    tt_sparse_set *docs;
    ck_assert_int_eq(tt_sparse_set_load_text(&docs, corpus, 0), TT_OK);
    ck_assert_uint_eq(docs->n, 3);
    ck_assert_uint_eq(docs->len[0], 4); /* cats cats and dogs */
    ck_assert_uint_eq(docs->len[1], 4); /* dogs dogs dogs 2 */
    tt_input *in = vectors_for(dir, "v", 3, 1, "x");
    tt_input_free(in);
    char i[600], v[600], l[600];
    snprintf(i, sizeof i, "%s/v.ids.txt", dir);
    ck_assert_int_eq(tu_write_file(i, "a\nb\nc\n", 6), 0);
    snprintf(v, sizeof v, "%s/v.vectors.npy", dir);
    snprintf(l, sizeof l, "%s/v.doclens.npy", dir);
    const char *vp[] = {v}, *lp[] = {l};
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, i, NULL), TT_OK);
    tt_build_options o;
    tt_build_options_init(&o);
    o.threads = 1;
    o.memory_bytes = 128ull << 20;
    o.num_centroids = 2;
    o.sparse = docs;
    ck_assert_int_eq(tt_build(idx, in, &o, NULL), TT_OK);
    tt_index *x;
    ck_assert_int_eq(tt_index_open(&x, idx, NULL), TT_OK);
    char qf[600];
    snprintf(qf, sizeof qf, "%s/q.tsv", dir);
    ck_assert_int_eq(tu_write_file(qf, "q1\tDogs\nq2\tfish\n", 16), 0);
    tt_sparse_set *qs;
    ck_assert_int_eq(tt_sparse_set_load_text(&qs, qf, 1), TT_OK);
    tt_hit h[5];
    uint32_t n;
    ck_assert_int_eq(tt_sparse_search(x, qs, 0, 5, NULL, h, &n), TT_OK);
    ck_assert_uint_eq(n, 2);
    /* N = 3, df = 2, avgdl = (4 + 4 + 1) / 3 = 3 */
    double idf = log(1 + (3 - 2 + 0.5) / (2 + 0.5));
    double nb = 0.9 * (1 - 0.4 + 0.4 * 4 / 3.0);
    double sb = idf * 3 * 1.9 / (3 + nb), sa = idf * 1 * 1.9 / (1 + nb);
    ck_assert_uint_eq(h[0].doc, 1);
    ck_assert_uint_eq(h[1].doc, 0);
    ck_assert_float_eq_tol(h[0].score, sb, 1e-6);
    ck_assert_float_eq_tol(h[1].score, sa, 1e-6);
    /* a query with no known term: no hits, no error */
    ck_assert_int_eq(tt_sparse_search(x, qs, 1, 5, NULL, h, &n), TT_OK);
    ck_assert_uint_eq(n, 0);
    tt_index_close(x);
    tt_sparse_set_free(docs);
    tt_sparse_set_free(qs);
    tt_input_free(in);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* ------------------------------------------------------------------ fusion */

START_TEST(fusion_hand_worked) {
    tt_fusion_options fo;
    tt_fusion_options_init(&fo);
    tt_hit out[10];
    uint32_t n;
    /* dense: 1 (10), 2 (6), 3 (2); sparse: 3 (5), 4 (3), 1 (1) */
    tt_hit a[] = {{1, 10}, {2, 6}, {3, 2}}, b[] = {{3, 5}, {4, 3}, {1, 1}};
    ck_assert_int_eq(tt_fuse(a, 3, b, 3, &fo, 10, out, &n), TT_OK);
    ck_assert_uint_eq(n, 4);
    /* a': 1, .5, 0; b': 1, .5, 0 -> 1: .5, 2: .25, 3: .5, 4: .25; ties by row */
    ck_assert_uint_eq(out[0].doc, 1);
    ck_assert_uint_eq(out[1].doc, 3);
    ck_assert_uint_eq(out[2].doc, 2);
    ck_assert_uint_eq(out[3].doc, 4);
    ck_assert_float_eq(out[0].score, 0.5f);
    ck_assert_float_eq(out[2].score, 0.25f);
    /* alpha 0.75 */
    fo.alpha = 0.75;
    ck_assert_int_eq(tt_fuse(a, 3, b, 3, &fo, 2, out, &n), TT_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_uint_eq(out[0].doc, 1); /* .75 */
    ck_assert_uint_eq(out[1].doc, 2); /* .375 vs 3: .25 */
    ck_assert_float_eq(out[1].score, 0.375f);
    /* a constant list (min = max): every document 1 */
    fo.alpha = 0.5;
    tt_hit c[] = {{7, 4}, {8, 4}};
    ck_assert_int_eq(tt_fuse(c, 2, b, 3, &fo, 10, out, &n), TT_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert_uint_eq(out[0].doc, 3); /* 0 + .5 * 1 = .5; 7, 8: .5 too: row 3 first */
    ck_assert_uint_eq(out[1].doc, 7);
    ck_assert_uint_eq(out[2].doc, 8);
    ck_assert_float_eq(out[1].score, 0.5f);
    ck_assert_uint_eq(out[3].doc, 4);
    ck_assert_float_eq(out[3].score, 0.25f);
    /* an empty second list: the first alone, scaled by alpha */
    ck_assert_int_eq(tt_fuse(a, 3, NULL, 0, &fo, 10, out, &n), TT_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_float_eq(out[0].score, 0.5f);
    /* depth: only the top 2 of each list; normalised within them */
    fo.depth = 2;
    ck_assert_int_eq(tt_fuse(a, 3, b, 3, &fo, 10, out, &n), TT_OK);
    ck_assert_uint_eq(n, 4); /* 1, 2 from a; 3, 4 from b */
    ck_assert_uint_eq(out[0].doc, 1);
    ck_assert_uint_eq(out[1].doc, 3);
    ck_assert_float_eq(out[2].score, 0.0f);
    /* RRF: 1/(60 + rank) summed */
    fo.depth = 1000;
    fo.method = TT_FUSION_RRF;
    ck_assert_int_eq(tt_fuse(a, 3, b, 3, &fo, 10, out, &n), TT_OK);
    ck_assert_uint_eq(out[0].doc, 1); /* 1/61 + 1/63 */
    ck_assert_uint_eq(out[1].doc, 3); /* 1/63 + 1/61: equal, row 3 after 1 */
    ck_assert_float_eq_tol(out[0].score, 1.0 / 61 + 1.0 / 63, 1e-7);
    ck_assert_uint_eq(out[2].doc, 2); /* 1/62 vs 4: 1/62: tie, row 2 first */
    ck_assert_uint_eq(out[3].doc, 4);
    /* bad options */
    fo.alpha = 1.5;
    ck_assert_int_eq(tt_fuse(a, 3, b, 3, &fo, 10, out, &n), TT_EINVAL);
    fo.alpha = 0.5;
    tt_hit bad[] = {{1, NAN}};
    ck_assert_int_eq(tt_fuse(bad, 1, b, 3, &fo, 10, out, &n), TT_EVALUE);
}
END_TEST

/* ------------------------------------------------------------- bad input */

static int load_jsonl_text(const char *dir, const char *text, tt_sparse_set **s) {
    char p[600];
    snprintf(p, sizeof p, "%s/s.jsonl", dir);
    ck_assert_int_eq(tu_write_file(p, text, strlen(text)), 0);
    return tt_sparse_set_load_jsonl(s, p);
}

START_TEST(jsonl_input) {
    char *dir = tu_tmpdir();
    tt_sparse_set *s = NULL;
    ck_assert_int_eq(load_jsonl_text(dir, "{\"id\": \"a\", \"terms\": {\"x\": 1.5, \"y\": 0, "
                                          "\"x\": 0.5, \"caf\\u00e9\": 2}, \"other\": [1, {}]}\n\n"
                                          "{\"terms\": {}, \"_id\": \"b\"}\n", &s), TT_OK);
    ck_assert_uint_eq(s->n, 2);
    ck_assert_uint_eq(s->off[1], 2); /* x (2.0 = 1.5 + 0.5) and café; y's 0 dropped */
    ck_assert_uint_eq(s->off[2], 2);
    tt_sparse_set_free(s);
    static const struct {
        const char *text;
        int st;
    } bad[] = {
        {"{\"id\": \"a\", \"terms\": {\"x\": NaN}}\n", TT_EPARSE},
        {"{\"id\": \"a\", \"terms\": {\"x\": -Infinity}}\n", TT_EPARSE},
        {"{\"id\": \"a\", \"terms\": {\"x\": 1e999}}\n", TT_EVALUE},
        {"{\"id\": \"a\", \"terms\": {\"x\": -1}}\n", TT_EVALUE},
        {"{\"id\": \"a\", \"terms\": {\"x\": 3e38, \"x\": 3e38}}\n", TT_EVALUE},
        {"{\"id\": \"a\", \"terms\": {\"\": 1}}\n", TT_EVALUE},
        {"{\"id\": \"a\", \"terms\": [1]}\n", TT_EPARSE},
        {"{\"id\": \"a\"}\n", TT_EPARSE},
        {"{\"id\": \"a\", \"terms\": {}}\n{\"id\": \"a\", \"terms\": {}}\n", TT_EVALUE},
        {"{\"id\": \"a b\", \"terms\": {}}\n", TT_EVALUE},
        {"{\"id\": \"a\", \"terms\": {\"x\": 1}", TT_EPARSE},
        {"\n\n", TT_EFORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        int st = load_jsonl_text(dir, bad[i].text, &s);
        ck_assert_msg(st == bad[i].st, "case %zu: %d (%s)", i, st, tt_last_error());
        ck_assert_ptr_null(s);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "s.jsonl"));
    }
    /* a corpus without text cannot give BM25 counts */
    char p[600];
    snprintf(p, sizeof p, "%s/c.jsonl", dir);
    const char *notext = "{\"_id\": \"a\", \"title\": \"t\"}\n";
    ck_assert_int_eq(tu_write_file(p, notext, strlen(notext)), 0);
    ck_assert_int_eq(tt_sparse_set_load_text(&s, p, 0), TT_EPARSE);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Integer term ids (kind IDS): MaxScore equals the brute force on skewed ids (0 and
 * 2^32-1 included), the payload holds 4-byte big-endian terms in numeric order, a
 * payload of string terms is refused as kind 3, and the vocabulary bounds and maps. */
START_TEST(term_ids) {
    tt_sparse_set *docs, *qs;
    ck_assert_int_eq(tt_sparse_set_new(&docs, TT_SPARSE_KIND_IDS), TT_OK);
    ck_assert_int_eq(tt_sparse_set_new(&qs, TT_SPARSE_KIND_IDS), TT_OK);
    tt_rng r;
    tt_rng_seed(&r, 9);
    const uint64_t D = 2000;
    uint32_t ids[32];
    float w[32];
    for (uint64_t d = 0; d < D; d++) {
        uint32_t nt = (uint32_t)tt_rng_below(&r, 30);
        for (uint32_t j = 0; j < nt; j++) {
            uint64_t u = tt_rng_below(&r, 1000);
            ids[j] = u < 5 ? UINT32_MAX - (uint32_t)u : (uint32_t)(u * u / 1000); /* skewed */
            w[j] = (float)(1 + tt_rng_below(&r, 4)) * 0.3f;
        }
        char id[32];
        snprintf(id, sizeof id, "d%llu", (unsigned long long)d);
        ck_assert_msg(tt_sparse_set_append_ids(docs, id, strlen(id), nt, ids, w, "t") == TT_OK,
                      "%s", tt_last_error());
    }
    for (uint32_t q = 0; q < 30; q++) {
        uint32_t nt = 1 + (uint32_t)tt_rng_below(&r, 8);
        for (uint32_t j = 0; j < nt; j++) {
            ids[j] = q == 0 && j == 0 ? UINT32_MAX : (uint32_t)tt_rng_below(&r, 1100);
            w[j] = 1.0f + (float)j;
        }
        char id[16];
        snprintf(id, sizeof id, "q%u", q);
        ck_assert_int_eq(tt_sparse_set_append_ids(qs, id, strlen(id), nt, ids, w, "q"), TT_OK);
    }
    uint8_t *p;
    uint64_t len, a, b, c;
    ck_assert_int_eq(tt_sparse_payload(docs, 0, D, &p, &len, &a, &b, &c), TT_OK);
    ck_assert_uint_eq(c, TT_SPARSE_KIND_IDS);
    tt_sparse_seg seg;
    ck_assert_msg(tt_sparse_seg_parse(&seg, p, len, a, b, c, "mem") == TT_OK, "%s", tt_last_error());
    ck_assert_uint_eq(tt_rd64(seg.term_off + 8 * seg.T), 4 * seg.T);
    for (uint64_t t = 1; t < seg.T; t++) /* big-endian ids: numeric order */
        ck_assert_uint_lt(tt_sparse_key_id(seg.blob + 4 * (t - 1)), tt_sparse_key_id(seg.blob + 4 * t));
    ck_assert_uint_eq(tt_sparse_key_id(seg.blob + 4 * (seg.T - 1)), UINT32_MAX);
    tt_sparse_scoring sc = {.kind = TT_SPARSE_KIND_IDS};
    tt_sparse_term terms[32];
    for (uint64_t q = 0; q < qs->n; q++) {
        uint32_t nq = (uint32_t)(qs->off[q + 1] - qs->off[q]), nt = 0;
        for (uint32_t i = 0; i < nq; i++) {
            uint32_t t = qs->term[qs->off[q] + i];
            int64_t id = tt_sparse_seg_find(&seg, tt_st_str(&qs->terms, t), tt_st_len(&qs->terms, t));
            if (id < 0)
                continue;
            terms[nt++] = (tt_sparse_term){.qi = i,
                                           .factor = qs->value[qs->off[q] + i] *
                                                     (double)tt_sparse_seg_scale(&seg, (uint64_t)id),
                                           .first = tt_sparse_seg_first_block(&seg, (uint64_t)id),
                                           .df = tt_sparse_seg_df(&seg, (uint64_t)id)};
        }
        if (q == 0)
            ck_assert_uint_gt(nt, 0); /* id 2^32-1 is found */
        tt_sparse_heap h1, h2;
        ck_assert_int_eq(tt_sparse_heap_init(&h1, 10), TT_OK);
        ck_assert_int_eq(tt_sparse_heap_init(&h2, 10), TT_OK);
        ck_assert_int_eq(tt_sparse_seg_topk(&seg, &sc, terms, nt, nq, NULL, NULL, 0, &h1, NULL), TT_OK);
        ck_assert_int_eq(tt_sparse_seg_brute(&seg, &sc, terms, nt, nq, NULL, NULL, 0, &h2), TT_OK);
        tt_sparse_heap_sort(&h1);
        tt_sparse_heap_sort(&h2);
        ck_assert_uint_eq(h1.n, h2.n);
        for (uint32_t i = 0; i < h1.n; i++)
            ck_assert(h1.row[i] == h2.row[i] && h1.score[i] == h2.score[i]);
        tt_sparse_heap_free(&h1);
        tt_sparse_heap_free(&h2);
    }
    free(p);
    /* string terms (not 4 bytes) claimed as kind 3 are refused; an unknown kind too */
    tt_sparse_set *str = random_set(TT_SPARSE_KIND_WEIGHTS, 50, 20, 3, "d");
    ck_assert_int_eq(tt_sparse_payload(str, 0, 50, &p, &len, &a, &b, &c), TT_OK);
    ck_assert_int_eq(tt_sparse_seg_parse(&seg, p, len, a, b, TT_SPARSE_KIND_IDS, "mem"), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "not 4 bytes"));
    ck_assert_int_eq(tt_sparse_seg_parse(&seg, p, len, a, b, 4, "mem"), TT_ECORRUPT);
    free(p);
    tt_sparse_set_free(str);
    tt_sparse_set_free(docs);
    tt_sparse_set_free(qs);

    /* the vocabulary: ids bounded, string terms mapped, bad lines refused */
    char *dir = tu_tmpdir();
    char vp[600], jp[600];
    snprintf(vp, sizeof vp, "%s/vocab.txt", dir);
    snprintf(jp, sizeof jp, "%s/s.jsonl", dir);
    const char *voc = "[PAD]\nthe\ncancer\r\ncell\n";
    ck_assert_int_eq(tu_write_file(vp, voc, strlen(voc)), 0);
    const char *ok = "{\"id\": \"a\", \"term_ids\": {\"3\": 1.5, \"0\": 0.5}}\n"
                     "{\"id\": \"b\", \"terms\": {\"cancer\": 2, \"cell\": 1}}\n";
    ck_assert_int_eq(tu_write_file(jp, ok, strlen(ok)), 0);
    tt_sparse_set *s = NULL;
    ck_assert_msg(tt_sparse_set_load_jsonl_vocab(&s, jp, vp) == TT_OK, "%s", tt_last_error());
    ck_assert_int_eq(tt_sparse_set_kind(s), TT_SPARSE_TERM_IDS);
    ck_assert_uint_eq(s->vocab_size, 4);
    ck_assert_uint_eq(s->n, 2);
    ck_assert_uint_eq(s->off[2] - s->off[1], 2);
    uint32_t got[2];
    for (int i = 0; i < 2; i++)
        got[i] = tt_sparse_key_id(tt_st_str(&s->terms, s->term[s->off[1] + (uint64_t)i]));
    ck_assert(got[0] + got[1] == 5 && (got[0] == 2 || got[0] == 3)); /* cancer 2, cell 3 */
    tt_sparse_set_free(s);
    /* without the vocabulary: ids, then the string record is refused */
    ck_assert_int_eq(tt_sparse_set_load_jsonl(&s, jp), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "s.jsonl:2"));
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"{\"id\": \"a\", \"term_ids\": {\"4\": 1}}\n", "term id 4 is past the vocabulary (4 terms"},
        {"{\"id\": \"a\", \"terms\": {\"dog\": 1}}\n", "term 'dog' is not in the vocabulary"},
        {"{\"id\": \"a\", \"term_ids\": {\"1\": 1}, \"terms\": {}}\n", "more than one of"},
        {"{\"id\": \"a\", \"term_ids\": {\"+1\": 1}}\n", "not a decimal integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tu_write_file(jp, bad[i].text, strlen(bad[i].text)), 0);
        s = NULL;
        ck_assert_int_ne(tt_sparse_set_load_jsonl_vocab(&s, jp, vp), TT_OK);
        ck_assert_ptr_null(s);
        ck_assert_msg(strstr(tt_last_error(), bad[i].msg), "case %zu: %s", i, tt_last_error());
    }
    static const char *const badv[] = {"a\nb\na\n", "a\n\nb\n", ""};
    for (size_t i = 0; i < 3; i++) {
        ck_assert_int_eq(tu_write_file(vp, badv[i], strlen(badv[i])), 0);
        ck_assert_int_ne(tt_sparse_set_load_jsonl_vocab(&s, jp, vp), TT_OK);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "vocab.txt"));
    }
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The stored vocabulary (vocab.tt; src/sparse/vocab.c, store/vocab.c): the payload
 * written and read back, damage refused, words mapped to ids by hand, and through an
 * index: stored by the build, tt_index_add's checks, kept by a compaction. */
static tt_sparse_set *ids_with_vocab(const char *vocab, uint64_t n, uint64_t r0, uint32_t maxid) {
    tt_sparse_set *s;
    ck_assert_int_eq(tt_sparse_set_new(&s, TT_SPARSE_KIND_IDS), TT_OK);
    if (vocab)
        ck_assert_int_eq(tt_sparse_vocab_parse(s, vocab, strlen(vocab), "v"), TT_OK);
    for (uint64_t d = r0; d < r0 + n; d++) {
        uint32_t ids[2] = {(uint32_t)(d % 3), (uint32_t)(d % maxid)};
        float w[2] = {1.0f, 0.5f};
        char id[32];
        snprintf(id, sizeof id, "d%llu", (unsigned long long)d);
        ck_assert_msg(tt_sparse_set_append_ids(s, id, strlen(id), 2, ids, w, "t") == TT_OK, "%s",
                      tt_last_error());
    }
    return s;
}

START_TEST(stored_vocabulary) {
    const char *voc = "alpha\nb\ncharlie\nd\n";
    tt_sparse_set *s = ids_with_vocab(voc, 1, 0, 4);
    uint8_t *p;
    uint64_t len, a, b;
    ck_assert_int_eq(tt_sparse_vocab_payload(&s->vocab, &p, &len, &a, &b), TT_OK);
    /* 4 terms, 5 offsets, the 14 bytes "alphabcharlied" */
    ck_assert_uint_eq(a, 4);
    ck_assert_uint_eq(b, 14);
    ck_assert_uint_eq(len, 8 * 5 + 14);
    ck_assert(!memcmp(p + 40, "alphabcharlied", 14));
    ck_assert_uint_eq(tt_rd64(p + 8 * 2), 6);
    tt_strtab v;
    ck_assert_int_eq(tt_sparse_vocab_read(&v, p, len, a, b, 0, "m"), TT_OK);
    char why[200];
    ck_assert_int_eq(tt_sparse_vocab_compare(&v, &s->vocab, why, sizeof why), 0);
    ck_assert_str_eq(tt_st_str(&v, 2), "charlie");
    tt_st_free(&v);
    /* damage: c, counts, sizes, offsets, an empty, repeated or NUL-holding term */
    ck_assert_int_eq(tt_sparse_vocab_read(&v, p, len, a, b, 1, "m"), TT_ECORRUPT);
    ck_assert_int_eq(tt_sparse_vocab_read(&v, p, len, 0, b, 0, "m"), TT_ECORRUPT);
    ck_assert_int_eq(tt_sparse_vocab_read(&v, p, len - 1, a, b, 0, "m"), TT_ECORRUPT);
    ck_assert_int_eq(tt_sparse_vocab_read(&v, p, len, a, b - 1, 0, "m"), TT_ECORRUPT);
    uint8_t *q = malloc(len);
    memcpy(q, p, len);
    tt_wr64(q + 8, 7); /* offsets 0, 7, 6: decreasing */
    ck_assert_int_eq(tt_sparse_vocab_read(&v, q, len, a, b, 0, "m"), TT_ECORRUPT);
    memcpy(q, p, len);
    tt_wr64(q + 8, 0); /* term 0 empty */
    ck_assert_int_eq(tt_sparse_vocab_read(&v, q, len, a, b, 0, "m"), TT_ECORRUPT);
    memcpy(q, p, len);
    q[40 + 13] = 'b'; /* term 3 "d" becomes "b", term 1's */
    ck_assert_int_eq(tt_sparse_vocab_read(&v, q, len, a, b, 0, "m"), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "repeats"));
    memcpy(q, p, len);
    q[41] = 0; /* a NUL in "alpha" */
    ck_assert_int_eq(tt_sparse_vocab_read(&v, q, len, a, b, 0, "m"), TT_ECORRUPT);
    free(q);
    free(p);
    /* words to ids by hand: "b b zz alpha" -> {0: 1, 1: 2}, zz dropped; "zz" alone: none */
    tt_sparse_set *words, *ids;
    ck_assert_int_eq(tt_sparse_set_new(&words, TT_SPARSE_KIND_BM25), TT_OK);
    ck_assert_int_eq(tt_sparse_set_append_text(words, "q1", 2, "B b zz ALPHA", 12, "t"), TT_OK);
    ck_assert_int_eq(tt_sparse_set_append_text(words, "q2", 2, "zz", 2, "t"), TT_OK);
    ck_assert_int_eq(tt_sparse_set_to_ids(words, &s->vocab, &ids), TT_OK);
    ck_assert_uint_eq(ids->n, 2);
    ck_assert_uint_eq(ids->off[1], 2);
    ck_assert_uint_eq(ids->off[2], 2);
    for (int e = 0; e < 2; e++) { /* entries in the set's term order: b first */
        uint32_t id = tt_sparse_key_id(tt_st_str(&ids->terms, ids->term[e]));
        ck_assert(id <= 1);
        ck_assert(ids->value[e] == (id == 0 ? 1.0f : 2.0f));
        ck_assert(e == 0 || id != tt_sparse_key_id(tt_st_str(&ids->terms, ids->term[0])));
    }
    ck_assert_uint_eq(ids->vocab_size, 4);
    tt_sparse_set_free(words);
    tt_sparse_set_free(ids);
    tt_sparse_set_free(s);

    /* through an index */
    char *dir = tu_tmpdir();
    char idx[600];
    snprintf(idx, sizeof idx, "%s/v", dir);
    tt_input *in1 = vectors_for(dir, "one", 40, 3, "d");
    tt_sparse_set *s1 = ids_with_vocab(voc, 40, 0, 4);
    tt_build_options o;
    tt_build_options_init(&o);
    o.threads = 2;
    o.memory_bytes = 128ull << 20;
    o.num_centroids = 8;
    o.sparse = s1;
    ck_assert_msg(tt_build(idx, in1, &o, NULL) == TT_OK, "%s", tt_last_error());
    tt_index *x;
    ck_assert_int_eq(tt_index_open(&x, idx, NULL), TT_OK);
    ck_assert_uint_eq(tt_index_vocab_size(x), 4);
    ck_assert_str_eq(tt_index_vocab_term(x, 3), "d");
    ck_assert_ptr_null(tt_index_vocab_term(x, 4));
    tt_index_close(x);
    /* adds: the documents d40.. (vectors with those ids) */
    char i2[600];
    tt_input *tmp = vectors_for(dir, "two", 10, 4, "d");
    tt_input_free(tmp);
    snprintf(i2, sizeof i2, "%s/two.ids.txt", dir);
    FILE *f = fopen(i2, "w");
    for (int d = 40; d < 50; d++)
        fprintf(f, "d%d\n", d);
    fclose(f);
    char v2[600], l2[600];
    snprintf(v2, sizeof v2, "%s/two.vectors.npy", dir);
    snprintf(l2, sizeof l2, "%s/two.doclens.npy", dir);
    const char *vp[] = {v2}, *lp[] = {l2};
    tt_input *in2;
    ck_assert_int_eq(tt_input_open(&in2, 1, vp, lp, i2, NULL), TT_OK);
    tt_change_options co;
    tt_change_options_init(&co);
    tt_sparse_set *other = ids_with_vocab("alpha\nb\ncharlie\ne\n", 10, 40, 4);
    co.sparse = other;
    ck_assert_int_eq(tt_index_add(idx, in2, &co, NULL), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "term id 3 is 'e' in one and 'd' in the other"));
    tt_sparse_set *past = ids_with_vocab(NULL, 10, 40, 5); /* ids up to 4: past 4 terms */
    co.sparse = past;
    ck_assert_int_eq(tt_index_add(idx, in2, &co, NULL), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "term id 4 of the documents to add is past"));
    tt_sparse_set *fine = ids_with_vocab(NULL, 10, 40, 4); /* no vocabulary, ids below 4 */
    co.sparse = fine;
    ck_assert_msg(tt_index_add(idx, in2, &co, NULL) == TT_OK, "%s", tt_last_error());
    ck_assert_msg(tt_index_compact(idx, NULL, NULL) == TT_OK, "%s", tt_last_error());
    ck_assert_int_eq(tt_index_open(&x, idx, NULL), TT_OK);
    ck_assert_uint_eq(tt_index_vocab_size(x), 4);
    ck_assert_uint_eq(x->num_docs, 50);
    tt_index_close(x);
    tt_sparse_set_free(s1);
    tt_sparse_set_free(other);
    tt_sparse_set_free(past);
    tt_sparse_set_free(fine);
    tt_input_free(in1);
    tt_input_free(in2);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Reshard's quantization (tt_sparse_payload_fixed): a segment of real-valued weights,
 * some documents deleted (among them the holder of each of several terms' largest
 * weight), its live documents extracted and a range of them written with the source's
 * scales: every term keeps its scale bit for bit and every posting its 8-bit value
 * (checked against the source file's own lists); scaled by the largest live weight
 * instead (tt_sparse_payload_scaled), some scale changes. */
static const char *row_id(void *user, uint64_t row, size_t *len) {
    char *buf = user;
    *len = (size_t)snprintf(buf, 32, "r%llu", (unsigned long long)row);
    return buf;
}

START_TEST(fixed_scales_keep_values) {
    enum { D = 600, V = 40 };
    tt_sparse_set *src;
    ck_assert_int_eq(tt_sparse_set_new(&src, TT_SPARSE_KIND_WEIGHTS), TT_OK);
    tt_rng r;
    tt_rng_seed(&r, 77);
    char names[16][16];
    const char *tp[16];
    size_t tl[16];
    float w[16];
    for (uint64_t d = 0; d < D; d++) {
        uint32_t nt = 1 + (uint32_t)tt_rng_below(&r, 12);
        for (uint32_t j = 0; j < nt; j++) {
            snprintf(names[j], sizeof names[j], "t%u", (unsigned)tt_rng_below(&r, V));
            tp[j] = names[j];
            tl[j] = strlen(names[j]);
            w[j] = (float)(0.01 + 7.3 * tt_rng_uniform(&r));
        }
        char id[32];
        snprintf(id, sizeof id, "d%llu", (unsigned long long)d);
        ck_assert_int_eq(tt_sparse_set_append(src, id, strlen(id), nt, tp, tl, w, 0, "t"), TT_OK);
    }
    uint8_t *p;
    uint64_t len, a, b, c;
    ck_assert_int_eq(tt_sparse_payload(src, 0, D, &p, &len, &a, &b, &c), TT_OK);
    tt_sparse_seg sg;
    ck_assert_int_eq(tt_sparse_seg_parse(&sg, p, len, a, b, c, "src"), TT_OK);
    /* dead: every 7th row, and the holder of the largest weight of terms t0..t9 */
    uint64_t dead[D / 64 + 1] = {0};
    for (uint64_t d = 0; d < D; d += 7)
        dead[d >> 6] |= 1ull << (d & 63);
    uint32_t docs[TT_SPARSE_BLOCK];
    uint8_t vals[TT_SPARSE_BLOCK];
    for (uint64_t t = 0; t < sg.T; t++) {
        uint64_t o0 = tt_rd64(sg.term_off + 8 * t);
        if (tt_rd64(sg.term_off + 8 * (t + 1)) - o0 != 2) /* "t0".."t9" */
            continue;
        uint32_t df = tt_sparse_seg_df(&sg, t);
        uint64_t first = tt_sparse_seg_first_block(&sg, t);
        for (uint64_t j = 0; j * TT_SPARSE_BLOCK < df; j++) {
            uint32_t n = tt_sparse_block_decode(&sg, first, df, first + j, docs, vals);
            for (uint32_t i = 0; i < n; i++)
                if (vals[i] == 255)
                    dead[docs[i] >> 6] |= 1ull << (docs[i] & 63);
        }
    }
    uint64_t live[D], nlive = 0;
    for (uint64_t d = 0; d < D; d++)
        if (!tt_bit_get(dead, d))
            live[nlive++] = d;
    tt_sparse_set *ex;
    ck_assert_int_eq(tt_sparse_set_new(&ex, TT_SPARSE_KIND_WEIGHTS), TT_OK);
    char buf[32];
    ck_assert_int_eq(tt_sparse_seg_extract(&sg, dead, row_id, buf, ex), TT_OK);
    ck_assert_uint_eq(ex->n, nlive);
    float *fixed = calloc(ex->terms.n, sizeof *fixed);
    ck_assert_ptr_nonnull(fixed);
    for (uint32_t i = 0; i < ex->terms.n; i++) {
        int64_t t = tt_sparse_seg_find(&sg, tt_st_str(&ex->terms, i), tt_st_len(&ex->terms, i));
        ck_assert(t >= 0);
        fixed[i] = tt_sparse_seg_scale(&sg, (uint64_t)t);
    }
    const uint64_t r0 = 100, n = nlive - 150; /* a new shard's range of the live documents */
    uint8_t *q, *g;
    uint64_t qlen, glen, qa, qb, qc;
    ck_assert_int_eq(tt_sparse_payload_fixed(ex, r0, n, true, fixed, &q, &qlen, &qa, &qb, &qc),
                     TT_OK);
    tt_sparse_seg ns;
    ck_assert_int_eq(tt_sparse_seg_parse(&ns, q, qlen, qa, qb, qc, "new"), TT_OK);
    uint32_t docs2[TT_SPARSE_BLOCK];
    uint8_t vals2[TT_SPARSE_BLOCK];
    uint64_t checked = 0;
    for (uint64_t t2 = 0; t2 < ns.T; t2++) {
        uint64_t o0 = tt_rd64(ns.term_off + 8 * t2), o1 = tt_rd64(ns.term_off + 8 * (t2 + 1));
        int64_t t = tt_sparse_seg_find(&sg, ns.blob + o0, (size_t)(o1 - o0));
        ck_assert(t >= 0);
        float s1 = tt_sparse_seg_scale(&sg, (uint64_t)t), s2 = tt_sparse_seg_scale(&ns, t2);
        ck_assert_msg(memcmp(&s1, &s2, 4) == 0, "term %.*s: scale %.9g, was %.9g",
                      (int)(o1 - o0), ns.blob + o0, s2, s1);
        /* the source list, live rows within the range, renumbered = the new list */
        uint32_t df = tt_sparse_seg_df(&sg, (uint64_t)t), df2 = tt_sparse_seg_df(&ns, t2);
        uint64_t f1 = tt_sparse_seg_first_block(&sg, (uint64_t)t);
        uint64_t f2 = tt_sparse_seg_first_block(&ns, t2);
        uint64_t k2 = 0, m2 = 0, lo = 0;
        for (uint64_t j = 0; j * TT_SPARSE_BLOCK < df; j++) {
            uint32_t m = tt_sparse_block_decode(&sg, f1, df, f1 + j, docs, vals);
            for (uint32_t i = 0; i < m; i++) {
                if (tt_bit_get(dead, docs[i]))
                    continue;
                while (live[lo] < docs[i])
                    lo++;
                if (lo < r0 || lo >= r0 + n)
                    continue;
                if (k2 == m2) { /* next block of the new list */
                    ck_assert_uint_lt(k2, df2);
                    m2 = k2 + tt_sparse_block_decode(&ns, f2, df2, f2 + k2 / TT_SPARSE_BLOCK,
                                                     docs2, vals2);
                }
                ck_assert_uint_eq(docs2[k2 % TT_SPARSE_BLOCK], lo - r0);
                ck_assert_uint_eq(vals2[k2 % TT_SPARSE_BLOCK], vals[i]);
                k2++;
                checked++;
            }
        }
        ck_assert_uint_eq(k2, df2);
    }
    ck_assert_uint_gt(checked, 1000);
    /* the largest live weight's scale differs for some term */
    ck_assert_int_eq(tt_sparse_payload_scaled(ex, r0, n, true, &g, &glen, &qa, &qb, &qc), TT_OK);
    ck_assert_int_eq(tt_sparse_seg_parse(&ns, g, glen, qa, qb, qc, "max"), TT_OK);
    uint32_t changed = 0;
    for (uint64_t t2 = 0; t2 < ns.T; t2++) {
        uint64_t o0 = tt_rd64(ns.term_off + 8 * t2), o1 = tt_rd64(ns.term_off + 8 * (t2 + 1));
        int64_t t = tt_sparse_seg_find(&sg, ns.blob + o0, (size_t)(o1 - o0));
        changed += tt_sparse_seg_scale(&sg, (uint64_t)t) != tt_sparse_seg_scale(&ns, t2);
    }
    ck_assert_uint_ge(changed, 5);
    free(g);
    free(q);
    free(fixed);
    free(p);
    tt_sparse_set_free(ex);
    tt_sparse_set_free(src);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sparse");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, topk_equals_brute_force, 0, 4);
    tcase_add_test(tc, parse_refuses_damage);
    tcase_add_test(tc, bm25_hand_worked);
    tcase_add_test(tc, bm25_through_add_delete_compact);
    tcase_add_test(tc, fusion_hand_worked);
    tcase_add_test(tc, jsonl_input);
    tcase_add_test(tc, term_ids);
    tcase_add_test(tc, stored_vocabulary);
    tcase_add_test(tc, filtered_sparse_and_hybrid);
    tcase_add_test(tc, fixed_scales_keep_values);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

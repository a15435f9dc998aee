/* Sharded indexes (src/index/shards.c, src/shard/): tt_hits_merge against a sort of
 * the concatenated lists (random lists with many tied scores); the SHARDS file's round
 * trip and each of its checks; and, through the library, a sharded build's search
 * equal to the unsharded index's in exhaustive mode, opened whole and rank by rank
 * (the rank lists merged with tt_hits_merge, as tartan-mpi does); and sparse and hybrid
 * search split over simulated processes (tt_sharded_sparse_stats summed,
 * tt_sharded_sparse_search_stats, lists merged by exact score) equal to one process. */
#include "testutil.h"
#include "index/shards.h"
#include "io/dir.h"
#include "io/file.h"
#include "sparse/sparse.h"

static int hit_cmp(const void *a, const void *b) {
    const tt_hit *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

START_TEST(merge_equals_sort) {
    tt_rng r;
    tt_rng_seed(&r, 3);
    for (int trial = 0; trial < 300; trial++) {
        uint32_t nl = 1 + (uint32_t)tt_rng_below(&r, 9), k = 1 + (uint32_t)tt_rng_below(&r, 20);
        tt_hit *all = malloc(9 * 25 * sizeof *all), lists[9][25], out[25];
        const tt_hit *lp[9];
        uint32_t counts[9], n = 0;
        uint64_t doc = 0;
        for (uint32_t l = 0; l < nl; l++) {
            counts[l] = (uint32_t)tt_rng_below(&r, 26) % (k + 1);
            for (uint32_t i = 0; i < counts[l]; i++) {
                /* few distinct scores: ties between lists are the common case */
                lists[l][i] = (tt_hit){doc += 1 + tt_rng_below(&r, 3),
                                       (float)tt_rng_below(&r, 4) * 0.5f};
            }
            qsort(lists[l], counts[l], sizeof(tt_hit), hit_cmp);
            memcpy(all + n, lists[l], counts[l] * sizeof(tt_hit));
            n += counts[l];
            lp[l] = lists[l];
        }
        qsort(all, n, sizeof *all, hit_cmp);
        uint32_t m = tt_hits_merge(lp, counts, nl, k, out);
        ck_assert_uint_eq(m, n < k ? n : k);
        for (uint32_t i = 0; i < m; i++) {
            ck_assert_uint_eq(out[i].doc, all[i].doc);
            ck_assert(out[i].score == all[i].score);
        }
        free(all);
    }
}
END_TEST

static void entry(tt_shard_entry *e, uint32_t s, uint64_t docs, uint64_t vecs) {
    memset(e, 0, sizeof *e);
    tt_shard_name(s, e->name);
    e->num_docs = docs;
    e->num_vectors = vecs;
    e->centroids_hash = 11;
    e->codec_hash = 22;
}

/* Writes f to dir/SHARDS (replacing it) and reads it back: the status. */
static int round_trip(const char *dir, const tt_shards_file *f, tt_shards_file *back) {
    char *p = tt_path_join(dir, TT_F_SHARDS);
    unlink(p);
    free(p);
    ck_assert_int_eq(tt_shards_write(dir, f, NULL), TT_OK);
    return tt_shards_read(dir, back);
}

START_TEST(shards_file_checks) {
    char *dir = tu_tmpdir();
    tt_shard_entry e[3];
    entry(&e[0], 0, 5, 9);
    entry(&e[1], 1, 7, 7);
    entry(&e[2], 2, 1, 30);
    tt_shards_file f = {.n = 3, .e = e}, b;
    ck_assert_int_eq(round_trip(dir, &f, &b), TT_OK);
    ck_assert_uint_eq(b.n, 3);
    ck_assert_uint_eq(b.num_docs, 13);
    ck_assert_uint_eq(b.num_vectors, 46);
    ck_assert_str_eq(b.e[2].name, "shard-0002");
    ck_assert_uint_eq(b.e[1].num_docs, 7);
    tt_shards_file_free(&b);
    /* a name that is not its position (a path, another shard) */
    snprintf(e[1].name, sizeof e[1].name, "../x");
    ck_assert_int_eq(round_trip(dir, &f, &b), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "expected shard-0001"));
    tt_shard_name(1, e[1].name);
    /* another codebook */
    e[2].codec_hash = 23;
    ck_assert_int_eq(round_trip(dir, &f, &b), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "another codebook"));
    e[2].codec_hash = 22;
    /* an empty shard, fewer vectors than documents */
    e[0].num_docs = 0;
    ck_assert_int_eq(round_trip(dir, &f, &b), TT_ECORRUPT);
    e[0].num_docs = 10;
    ck_assert_int_eq(round_trip(dir, &f, &b), TT_ECORRUPT);
    e[0].num_docs = 5;
    /* a flipped byte: the checksum */
    ck_assert_int_eq(round_trip(dir, &f, &b), TT_OK);
    tt_shards_file_free(&b);
    char *p = tt_path_join(dir, TT_F_SHARDS);
    FILE *fp = fopen(p, "r+b");
    fseek(fp, 64 + 40, SEEK_SET);
    fputc(0x7f, fp);
    fclose(fp);
    ck_assert_int_eq(tt_shards_read(dir, &b), TT_ECORRUPT);
    free(p);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

enum { DIM = 24, NDOCS = 90 };

START_TEST(sharded_search_equals_unsharded) {
    char *dir = tu_tmpdir(), vp[512], lp[512], one[512], sh[512];
    snprintf(vp, sizeof vp, "%s/v.npy", dir);
    snprintf(lp, sizeof lp, "%s/l.npy", dir);
    snprintf(one, sizeof one, "%s/one", dir);
    snprintf(sh, sizeof sh, "%s/sh", dir);
    int64_t lens[NDOCS];
    uint64_t nv = 0;
    for (int d = 0; d < NDOCS; d++)
        nv += (uint64_t)(lens[d] = 1 + d % 7);
    float *x = malloc(nv * DIM * sizeof *x);
    tu_clustered(x, nv, DIM, 6, 0.3f, 5, NULL);
    ck_assert_int_eq(tu_write_npy(vp, TT_DT_F32, DIM, x, nv), TT_OK);
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, lens, NDOCS), TT_OK);
    const char *vpp = vp, *lpp = lp;
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, &vpp, &lpp, NULL, NULL), TT_OK);
    tt_build_options o;
    tt_build_options_init(&o);
    o.num_centroids = 8;
    o.threads = 1;
    o.memory_bytes = 64ull << 20;
    ck_assert_int_eq(tt_build(one, in, &o, NULL), TT_OK);
    o.shards = 4;
    ck_assert_int_eq(tt_build(sh, in, &o, NULL), TT_OK);
    tt_input_free(in);

    tt_open_options oo;
    tt_open_options_init(&oo);
    tt_index *idx;
    tt_sharded *all;
    ck_assert_int_eq(tt_index_open(&idx, one, &oo), TT_OK);
    ck_assert_int_eq(tt_sharded_open(&all, sh, &oo, 0, 1), TT_OK);
    ck_assert_uint_eq(tt_sharded_num_shards(all), 4);
    ck_assert_uint_eq(tt_sharded_num_docs(all), NDOCS);
    enum { NQ = 6, K = 12, QL = 3 };
    uint64_t qoffs[NQ];
    uint32_t qlens[NQ], n1[NQ], n2[NQ], nr[3][NQ];
    for (int q = 0; q < NQ; q++) {
        qoffs[q] = (uint64_t)q * 11;
        qlens[q] = QL;
    }
    tt_hit h1[NQ * K], h2[NQ * K], hr[3][NQ * K], hm[K];
    tt_search_options so;
    tt_search_options_init(&so);
    so.mode = TT_MODE_EXHAUSTIVE;
    ck_assert_int_eq(tt_search_batch(idx, x, qoffs, qlens, NQ, K, &so, 1, h1, n1, NULL), TT_OK);
    ck_assert_int_eq(tt_sharded_search_batch(all, x, qoffs, qlens, NQ, K, &so, 2, h2, n2, NULL),
                     TT_OK);
    /* three "ranks": shards 0 and 3, 1, 2 */
    tt_sharded *rk[3];
    for (uint32_t r = 0; r < 3; r++) {
        ck_assert_int_eq(tt_sharded_open(&rk[r], sh, &oo, r, 3), TT_OK);
        ck_assert_uint_eq(tt_sharded_num_open(rk[r]), r == 0 ? 2 : 1);
        ck_assert_int_eq(tt_sharded_search_batch(rk[r], x, qoffs, qlens, NQ, K, &so, 1, hr[r],
                                                 nr[r], NULL), TT_OK);
    }
    for (int q = 0; q < NQ; q++) {
        ck_assert_uint_eq(n1[q], K);
        ck_assert_uint_eq(n2[q], K);
        uint32_t c[3];
        const tt_hit *l[3];
        for (int r = 0; r < 3; r++) {
            l[r] = hr[r] + q * K;
            c[r] = nr[r][q];
        }
        uint32_t m = tt_hits_merge(l, c, 3, K, hm);
        ck_assert_uint_eq(m, K);
        for (int i = 0; i < K; i++) {
            ck_assert_uint_eq(h2[q * K + i].doc, h1[q * K + i].doc);
            ck_assert(h2[q * K + i].score == h1[q * K + i].score);
            ck_assert_uint_eq(hm[i].doc, h1[q * K + i].doc);
            ck_assert(hm[i].score == h1[q * K + i].score);
            size_t a, b;
            const char *ia = tt_index_doc_id(idx, h1[q * K + i].doc, &a);
            const char *ib = tt_sharded_doc_id(all, h2[q * K + i].doc, &b);
            ck_assert_uint_eq(a, b);
            ck_assert(!memcmp(ia, ib, a));
        }
    }
    /* many queries and a k beyond the documents: the sharded search works in chunks of
     * queries (64 here); still the unsharded result */
    {
        enum { MQ = 150, BK = 20000 };
        uint64_t mo[MQ];
        uint32_t ml[MQ], a[MQ], b[MQ];
        for (int q = 0; q < MQ; q++) {
            mo[q] = (uint64_t)(q * 3) % (nv - 2);
            ml[q] = 2;
        }
        tt_hit *ha = malloc((size_t)MQ * BK * sizeof *ha), *hb = malloc((size_t)MQ * BK * sizeof *hb);
        ck_assert_int_eq(tt_search_batch(idx, x, mo, ml, MQ, BK, &so, 1, ha, a, NULL), TT_OK);
        ck_assert_int_eq(tt_sharded_search_batch(all, x, mo, ml, MQ, BK, &so, 1, hb, b, NULL), TT_OK);
        for (int q = 0; q < MQ; q++) {
            ck_assert_uint_eq(a[q], NDOCS);
            ck_assert_uint_eq(b[q], NDOCS);
            for (int i = 0; i < NDOCS; i++) {
                ck_assert_uint_eq(hb[(size_t)q * BK + i].doc, ha[(size_t)q * BK + i].doc);
                ck_assert(hb[(size_t)q * BK + i].score == ha[(size_t)q * BK + i].score);
            }
        }
        free(ha);
        free(hb);
    }
    /* a filter over the global rows (every third): each shard searches its part; the
     * unsharded filtered search's hits, and a rank's hits are allowed rows only */
    {
        tt_filter *f = NULL, *wrong = NULL;
        ck_assert_int_eq(tt_filter_new(&f, NDOCS), TT_OK);
        for (uint64_t r = 0; r < NDOCS; r += 3)
            ck_assert_int_eq(tt_filter_add(f, r), TT_OK);
        tt_search_options fo = so;
        fo.filter = f;
        ck_assert_int_eq(tt_search_batch(idx, x, qoffs, qlens, NQ, K, &fo, 1, h1, n1, NULL),
                         TT_OK);
        ck_assert_int_eq(tt_sharded_search_batch(all, x, qoffs, qlens, NQ, K, &fo, 1, h2, n2,
                                                 NULL), TT_OK);
        ck_assert_int_eq(tt_sharded_search_batch(rk[0], x, qoffs, qlens, NQ, K, &fo, 1, hr[0],
                                                 nr[0], NULL), TT_OK);
        for (int q = 0; q < NQ; q++) {
            ck_assert_uint_eq(n1[q], K);
            ck_assert_uint_eq(n2[q], n1[q]);
            for (uint32_t i = 0; i < n1[q]; i++) {
                ck_assert_uint_eq(h2[q * K + i].doc % 3, 0);
                ck_assert_uint_eq(h2[q * K + i].doc, h1[q * K + i].doc);
                ck_assert(h2[q * K + i].score == h1[q * K + i].score);
            }
            for (uint32_t i = 0; i < nr[0][q]; i++) {
                uint64_t d = hr[0][q * K + i].doc;
                ck_assert_uint_eq(d % 3, 0);
                ck_assert(d < NDOCS / 4 || d >= NDOCS * 3 / 4); /* shards 0 and 3 */
            }
        }
        ck_assert_int_eq(tt_filter_new(&wrong, NDOCS - 1), TT_OK);
        fo.filter = wrong;
        ck_assert_int_eq(tt_sharded_search_batch(all, x, qoffs, qlens, NQ, K, &fo, 1, h2, n2,
                                                 NULL), TT_EINVAL);
        tt_filter_free(f);
        tt_filter_free(wrong);
    }
    /* a row in a shard this rank did not open has no id here */
    ck_assert_ptr_null(tt_sharded_doc_id(rk[1], 0, &(size_t){0}));
    for (int r = 0; r < 3; r++)
        tt_sharded_close(rk[r]);
    tt_sharded_close(all);
    tt_index_close(idx);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* ------------------------------- sparse and hybrid search split over processes */

/* A hit with its exact double score, and the order every merge uses. */
typedef struct dhit {
    uint64_t doc;
    double score;
} dhit;

static int dhit_cmp(const void *a, const void *b) {
    const dhit *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

/* Merges query q's lists of nr processes (hits and exact scores, k per query) as
 * tartan-mpi does: by (higher double score, lower row), cut to k; float scores. */
static uint32_t merge_procs(int nr, tt_hit *const *h, double *const *s, uint32_t *const *n,
                            int q, uint32_t k, tt_hit *out) {
    dhit all[4 * 64];
    uint32_t m = 0;
    for (int r = 0; r < nr; r++)
        for (uint32_t i = 0; i < n[r][q]; i++) {
            ck_assert(i == 0 || s[r][q * k + i] <= s[r][q * k + i - 1]);
            ck_assert(h[r][q * k + i].score == (float)s[r][q * k + i]);
            all[m++] = (dhit){h[r][q * k + i].doc, s[r][q * k + i]};
        }
    qsort(all, m, sizeof *all, dhit_cmp);
    if (m > k)
        m = k;
    for (uint32_t i = 0; i < m; i++)
        out[i] = (tt_hit){all[i].doc, (float)all[i].score};
    return m;
}

enum { SP_DOCS = 120, SP_DIM = 16, SP_NQ = 8, SP_K = 7, SP_DEPTH = 20, SP_W = 12 };

START_TEST(sparse_split_over_processes) {
    static const char *const words[SP_W] = {"ant", "bee",  "cat",  "dog", "eel",  "fox",
                                            "gnu", "hen",  "ibis", "jay", "kiwi", "lynx"};
    char *dir = tu_tmpdir(), cp[512], vp[512], lp[512], qp[512], one[512], sh[512], nosp[512];
    snprintf(cp, sizeof cp, "%s/corpus.jsonl", dir);
    snprintf(vp, sizeof vp, "%s/v.npy", dir);
    snprintf(lp, sizeof lp, "%s/l.npy", dir);
    snprintf(qp, sizeof qp, "%s/q.tsv", dir);
    snprintf(one, sizeof one, "%s/one", dir);
    snprintf(sh, sizeof sh, "%s/sh", dir);
    snprintf(nosp, sizeof nosp, "%s/nosp", dir);
    /* documents of skewed words (low words common), every tenth a copy of the one
     * before it (equal scores: the row breaks the tie); counts kept for the model */
    static uint32_t cnt[SP_DOCS][SP_W];
    memset(cnt, 0, sizeof cnt);
    uint64_t total_len = 0;
    tt_rng rng;
    tt_rng_seed(&rng, 17);
    FILE *fp = fopen(cp, "w");
    ck_assert_ptr_nonnull(fp);
    for (int d = 0; d < SP_DOCS; d++) {
        if (d % 10 == 9)
            memcpy(cnt[d], cnt[d - 1], sizeof cnt[d]);
        else
            for (uint32_t i = 0, n = 1 + (uint32_t)tt_rng_below(&rng, 9); i < n; i++) {
                uint64_t a = tt_rng_below(&rng, SP_W), b = tt_rng_below(&rng, SP_W);
                cnt[d][a * b / SP_W]++;
            }
        fprintf(fp, "{\"_id\": \"d%d\", \"text\": \"", d);
        for (int w = 0; w < SP_W; w++)
            for (uint32_t c = 0; c < cnt[d][w]; c++, total_len++)
                fprintf(fp, "%s ", words[w]);
        fprintf(fp, "\"}\n");
    }
    fclose(fp);
    const char *qtext = "q0\tant\nq1\tbee cat\nq2\tlynx kiwi ant\nq3\tzzz\nq4\tdog dog eel\n"
                        "q5\tfox gnu hen ibis\nq6\tjay\nq7\tcat ant bee\n";
    ck_assert_int_eq(tu_write_file(qp, qtext, strlen(qtext)), 0);
    int64_t lens[SP_DOCS];
    uint64_t nv = 0;
    for (int d = 0; d < SP_DOCS; d++)
        nv += (uint64_t)(lens[d] = 1 + d % 5);
    float *x = malloc(nv * SP_DIM * sizeof *x);
    tu_clustered(x, nv, SP_DIM, 5, 0.3f, 9, NULL);
    ck_assert_int_eq(tu_write_npy(vp, TT_DT_F32, SP_DIM, x, nv), TT_OK);
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, lens, SP_DOCS), TT_OK);
    tt_sparse_set *docs, *sq;
    ck_assert_int_eq(tt_sparse_set_load_text(&docs, cp, 0), TT_OK);
    ck_assert_int_eq(tt_sparse_set_load_text(&sq, qp, 1), TT_OK);
    ck_assert_uint_eq(tt_sparse_set_size(sq), SP_NQ);
    const char *vpp = vp, *lpp = lp;
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, &vpp, &lpp, NULL, NULL), TT_OK);
    tt_build_options o;
    tt_build_options_init(&o);
    o.num_centroids = 6;
    o.threads = 1;
    o.memory_bytes = 64ull << 20;
    o.sparse = docs;
    ck_assert_int_eq(tt_build(one, in, &o, NULL), TT_OK);
    o.shards = 3;
    ck_assert_int_eq(tt_build(sh, in, &o, NULL), TT_OK);
    o.sparse = NULL;
    o.shards = 2;
    ck_assert_int_eq(tt_build(nosp, in, &o, NULL), TT_OK);
    tt_input_free(in);

    tt_index *idx;
    tt_sharded *all;
    ck_assert_int_eq(tt_index_open(&idx, one, NULL), TT_OK);
    ck_assert_int_eq(tt_sharded_open(&all, sh, NULL, 0, 1), TT_OK);
    ck_assert_uint_eq(tt_sharded_num_shards(all), 3);

    /* the statistics of every shard against the model: N, summed lengths, df by term */
    const uint64_t E = tt_sparse_set_num_entries(sq);
    ck_assert_uint_eq(E, sq->off[sq->n]);
    ck_assert_uint_eq(E, 1 + 2 + 3 + 1 + 2 + 4 + 1 + 3); /* distinct terms per query */
    ck_assert_uint_eq(tt_sparse_set_num_entries(NULL), 0);
    uint64_t N, T, df[32], dfsum[32];
    ck_assert_int_eq(tt_sharded_sparse_stats(all, sq, &N, &T, df), TT_OK);
    ck_assert_uint_eq(N, SP_DOCS);
    ck_assert_uint_eq(T, total_len);
    for (uint64_t e = 0; e < E; e++) {
        const char *t = tt_st_str(&sq->terms, sq->term[e]);
        uint64_t want = 0;
        for (int w = 0; w < SP_W; w++)
            if (!strcmp(t, words[w]))
                for (int d = 0; d < SP_DOCS; d++)
                    want += cnt[d][w] > 0;
        ck_assert_uint_eq(df[e], want);
    }

    /* the one-process sparse results, which are the unsharded index's */
    tt_hit ref[SP_NQ * SP_K], one_h[SP_NQ * SP_K];
    uint32_t nref[SP_NQ], none[SP_NQ];
    ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, NULL, NULL, NULL, NULL, sq, NULL, NULL,
                                                    NULL, SP_NQ, SP_K, 2, ref, nref, NULL),
                     TT_OK);
    ck_assert_int_eq(tt_hybrid_search_batch(idx, NULL, NULL, NULL, NULL, sq, NULL, NULL, NULL,
                                            SP_NQ, SP_K, 1, one_h, none, NULL),
                     TT_OK);
    /* the whole-index call's own edges: no query writes nothing (not even seconds),
     * k 0 and missing arguments are refused */
    {
        double secs[2] = {-1, -1};
        ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, NULL, NULL, NULL, NULL, sq, NULL,
                                                        NULL, NULL, 0, SP_K, 1, NULL, NULL, secs),
                         TT_OK);
        ck_assert(secs[0] == -1 && secs[1] == -1);
        tt_hit h1[SP_K];
        uint32_t n1;
        ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, NULL, NULL, NULL, NULL, sq, NULL,
                                                        NULL, NULL, 1, 0, 1, h1, &n1, NULL),
                         TT_EINVAL);
        ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, NULL, NULL, NULL, NULL, NULL, NULL,
                                                        NULL, NULL, 1, SP_K, 1, h1, &n1, NULL),
                         TT_EINVAL);
        ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, NULL, NULL, NULL, NULL, sq, NULL,
                                                        NULL, NULL, 1, SP_K, 1, NULL, NULL, NULL),
                         TT_EINVAL);
    }
    for (int q = 0; q < SP_NQ; q++) {
        if (q == 3) /* zzz: no term of the index */
            ck_assert_uint_eq(nref[q], 0);
        else
            ck_assert_uint_gt(nref[q], 0);
        ck_assert_uint_eq(none[q], nref[q]);
        for (uint32_t i = 0; i < nref[q]; i++) {
            ck_assert_uint_eq(ref[q * SP_K + i].doc, one_h[q * SP_K + i].doc);
            ck_assert(ref[q * SP_K + i].score == one_h[q * SP_K + i].score);
        }
    }

    /* a plain index opened as one shard, split over 2 processes (the second opens
     * nothing): the plain index's own sparse search */
    {
        tt_sharded *p0, *p1;
        tt_hit ph[SP_NQ * SP_K];
        double ps[SP_NQ * SP_K];
        uint32_t pn[SP_NQ];
        uint64_t a0, b0, a1, b1, d0[32], d1[32];
        ck_assert_int_eq(tt_sharded_open(&p0, one, NULL, 0, 2), TT_OK);
        ck_assert_int_eq(tt_sharded_open(&p1, one, NULL, 1, 2), TT_OK);
        ck_assert_uint_eq(tt_sharded_num_open(p1), 0);
        ck_assert_int_eq(tt_sharded_sparse_stats(p0, sq, &a0, &b0, d0), TT_OK);
        ck_assert_int_eq(tt_sharded_sparse_stats(p1, sq, &a1, &b1, d1), TT_OK);
        ck_assert_uint_eq(a0 + a1, N);
        ck_assert_uint_eq(b0 + b1, T);
        for (uint64_t e = 0; e < E; e++) {
            ck_assert_uint_eq(d1[e], 0);
            ck_assert_uint_eq(d0[e], df[e]);
        }
        ck_assert_int_eq(tt_sharded_sparse_search_stats(p1, sq, NULL, SP_NQ, SP_K, NULL, N, T,
                                                        df, 1, ph, ps, pn), TT_OK);
        for (int q = 0; q < SP_NQ; q++)
            ck_assert_uint_eq(pn[q], 0);
        ck_assert_int_eq(tt_sharded_sparse_search_stats(p0, sq, NULL, SP_NQ, SP_K, NULL, N, T,
                                                        df, 1, ph, ps, pn), TT_OK);
        for (int q = 0; q < SP_NQ; q++) {
            ck_assert_uint_eq(pn[q], none[q]);
            for (uint32_t i = 0; i < pn[q]; i++) {
                ck_assert_uint_eq(ph[q * SP_K + i].doc, one_h[q * SP_K + i].doc);
                ck_assert(ph[q * SP_K + i].score == one_h[q * SP_K + i].score);
            }
        }
        tt_sharded_close(p0);
        tt_sharded_close(p1);
    }

    /* the dense part of a hybrid search: exhaustive; query q's vectors from row 7q */
    uint64_t qoffs[SP_NQ], sof[SP_NQ];
    uint32_t qlens[SP_NQ];
    for (int q = 0; q < SP_NQ; q++) {
        qoffs[q] = (uint64_t)q * 7;
        qlens[q] = 3;
        sof[q] = q == 5 ? UINT64_MAX : (uint64_t)(SP_NQ - 1 - q); /* q5: no sparse query */
    }
    tt_search_options dso;
    tt_search_options_init(&dso);
    dso.mode = TT_MODE_EXHAUSTIVE;
    tt_fusion_options fo;
    tt_fusion_options_init(&fo);
    fo.depth = SP_DEPTH;
    fo.alpha = 0.3;
    tt_hit href[SP_NQ * SP_K];
    uint32_t nhref[SP_NQ];
    ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, x, qoffs, qlens, &dso, sq, sof, NULL,
                                                    &fo, SP_NQ, SP_K, 1, href, nhref, NULL),
                     TT_OK);
    /* a filter over the global rows: every other row */
    tt_filter *f = NULL;
    ck_assert_int_eq(tt_filter_new(&f, SP_DOCS), TT_OK);
    for (uint64_t r = 0; r < SP_DOCS; r += 2)
        ck_assert_int_eq(tt_filter_add(f, r), TT_OK);
    tt_sparse_options spf;
    tt_sparse_options_init(&spf);
    spf.filter = f;
    tt_hit fref[SP_NQ * SP_K];
    uint32_t nfref[SP_NQ];
    ck_assert_int_eq(tt_sharded_hybrid_search_batch(all, NULL, NULL, NULL, NULL, sq, NULL, &spf,
                                                    NULL, SP_NQ, SP_K, 1, fref, nfref, NULL),
                     TT_OK);

    for (uint32_t R = 2; R <= 4; R++) { /* 4 processes: the last opens no shard */
        tt_sharded *rk[4];
        static tt_hit h[4][SP_NQ * SP_DEPTH], dh[4][SP_NQ * SP_DEPTH];
        static double s[4][SP_NQ * SP_DEPTH];
        static uint32_t n[4][SP_NQ], dn[4][SP_NQ];
        tt_hit *hp[4];
        double *sp[4];
        uint32_t *np[4];
        uint64_t Ns = 0, Ts = 0;
        memset(dfsum, 0, sizeof dfsum);
        for (uint32_t r = 0; r < R; r++) {
            ck_assert_int_eq(tt_sharded_open(&rk[r], sh, NULL, r, R), TT_OK);
            ck_assert_uint_eq(tt_sharded_num_open(rk[r]), r < 3 ? (3 - r + R - 1) / R : 0);
            uint64_t a, b;
            ck_assert_int_eq(tt_sharded_sparse_stats(rk[r], sq, &a, &b, df), TT_OK);
            Ns += a;
            Ts += b;
            for (uint64_t e = 0; e < E; e++)
                dfsum[e] += df[e];
            if (r == 3)
                ck_assert_uint_eq(a, 0);
            hp[r] = h[r];
            sp[r] = s[r];
            np[r] = n[r];
        }
        ck_assert_uint_eq(Ns, N);
        ck_assert_uint_eq(Ts, T);
        ck_assert_int_eq(tt_sharded_sparse_stats(all, sq, &N, &T, df), TT_OK);
        for (uint64_t e = 0; e < E; e++)
            ck_assert_uint_eq(dfsum[e], df[e]);
        /* sparse: each process's shards with the summed statistics, merged */
        for (uint32_t r = 0; r < R; r++)
            ck_assert_int_eq(tt_sharded_sparse_search_stats(rk[r], sq, NULL, SP_NQ, SP_K, NULL,
                                                            Ns, Ts, dfsum, 1, h[r], s[r], n[r]),
                             TT_OK);
        for (int q = 0; q < SP_NQ; q++) {
            tt_hit m[SP_K];
            dhit all_[4 * SP_K];
            uint32_t c = 0;
            for (uint32_t r = 0; r < R; r++)
                for (uint32_t i = 0; i < n[r][q]; i++) {
                    ck_assert(h[r][q * SP_K + i].score == (float)s[r][q * SP_K + i]);
                    ck_assert_ptr_nonnull(tt_sharded_doc_id(rk[r], h[r][q * SP_K + i].doc,
                                                            &(size_t){0}));
                    all_[c++] = (dhit){h[r][q * SP_K + i].doc, s[r][q * SP_K + i]};
                }
            qsort(all_, c, sizeof *all_, dhit_cmp);
            uint32_t nm = c < SP_K ? c : SP_K;
            for (uint32_t i = 0; i < nm; i++)
                m[i] = (tt_hit){all_[i].doc, (float)all_[i].score};
            ck_assert_uint_eq(nm, nref[q]);
            for (uint32_t i = 0; i < nm; i++) {
                ck_assert_uint_eq(m[i].doc, ref[q * SP_K + i].doc);
                ck_assert(m[i].score == ref[q * SP_K + i].score);
            }
        }
        /* the filter: each process's part of it */
        for (uint32_t r = 0; r < R; r++)
            ck_assert_int_eq(tt_sharded_sparse_search_stats(rk[r], sq, NULL, SP_NQ, SP_K, &spf,
                                                            Ns, Ts, dfsum, 1, h[r], s[r], n[r]),
                             TT_OK);
        for (int q = 0; q < SP_NQ; q++) {
            tt_hit m[SP_K];
            uint32_t nm = merge_procs((int)R, hp, sp, np, q, SP_K, m);
            ck_assert_uint_eq(nm, nfref[q]);
            for (uint32_t i = 0; i < nm; i++) {
                ck_assert_uint_eq(m[i].doc % 2, 0);
                ck_assert_uint_eq(m[i].doc, fref[q * SP_K + i].doc);
                ck_assert(m[i].score == fref[q * SP_K + i].score);
            }
        }
        /* hybrid: the dense lists to the fusion depth merged (tt_hits_merge), the sparse
         * ones likewise (sparse_of as given), fused: the one-process hybrid result */
        for (uint32_t r = 0; r < R; r++) {
            ck_assert_int_eq(tt_sharded_sparse_search_stats(rk[r], sq, sof, SP_NQ, SP_DEPTH,
                                                            NULL, Ns, Ts, dfsum, 1, h[r], s[r],
                                                            n[r]),
                             TT_OK);
            if (tt_sharded_num_open(rk[r]))
                ck_assert_int_eq(tt_sharded_search_batch(rk[r], x, qoffs, qlens, SP_NQ,
                                                         SP_DEPTH, &dso, 1, dh[r], dn[r], NULL),
                                 TT_OK);
            else
                memset(dn[r], 0, sizeof dn[r]);
        }
        for (int q = 0; q < SP_NQ; q++) {
            tt_hit dm[SP_DEPTH], sm[SP_DEPTH], out[SP_K];
            const tt_hit *l[4];
            uint32_t c[4], nout;
            for (uint32_t r = 0; r < R; r++) {
                l[r] = dh[r] + q * SP_DEPTH;
                c[r] = dn[r][q];
            }
            uint32_t nd = tt_hits_merge(l, c, R, SP_DEPTH, dm);
            uint32_t ns = merge_procs((int)R, hp, sp, np, q, SP_DEPTH, sm);
            if (q == 5)
                ck_assert_uint_eq(ns, 0);
            ck_assert_int_eq(tt_fuse(dm, nd, sm, ns, &fo, SP_K, out, &nout), TT_OK);
            ck_assert_uint_eq(nout, nhref[q]);
            ck_assert_uint_eq(nout, SP_K);
            for (uint32_t i = 0; i < nout; i++) {
                ck_assert_uint_eq(out[i].doc, href[q * SP_K + i].doc);
                ck_assert(out[i].score == href[q * SP_K + i].score);
            }
        }
        for (uint32_t r = 0; r < R; r++)
            tt_sharded_close(rk[r]);
    }

    /* bad calls */
    tt_hit bh[SP_NQ * SP_K];
    double bs[SP_NQ * SP_K];
    uint32_t bn[SP_NQ];
    uint64_t a, b;
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, 0, SP_K, NULL, N, T, df, 1,
                                                    NULL, NULL, NULL), TT_OK); /* no query */
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, SP_NQ, 0, NULL, N, T, df, 1,
                                                    bh, bs, bn), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "k must be"));
    ck_assert_int_eq(tt_sharded_sparse_search_stats(NULL, sq, NULL, SP_NQ, SP_K, NULL, N, T, df,
                                                    1, bh, bs, bn), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, NULL, NULL, SP_NQ, SP_K, NULL, N, T, df,
                                                    1, bh, bs, bn), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, SP_NQ, SP_K, NULL, N, T, NULL,
                                                    1, bh, bs, bn), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, SP_NQ, SP_K, NULL, N, T, df,
                                                    1, NULL, bs, bn), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, SP_NQ, SP_K, NULL, N, T, df,
                                                    1, bh, bs, NULL), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, SP_NQ + 1, SP_K, NULL, N, T,
                                                    df, 1, bh, bs, bn), TT_EDIM);
    uint64_t past[1] = {SP_NQ};
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, past, 1, SP_K, NULL, N, T, df, 1,
                                                    bh, bs, bn), TT_EINVAL);
    tt_filter *wrong = NULL;
    ck_assert_int_eq(tt_filter_new(&wrong, SP_DOCS + 1), TT_OK);
    spf.filter = wrong;
    ck_assert_int_eq(tt_sharded_sparse_search_stats(all, sq, NULL, SP_NQ, SP_K, &spf, N, T, df,
                                                    1, bh, bs, bn), TT_EINVAL);
    tt_filter_free(wrong);
    ck_assert_int_eq(tt_sharded_sparse_stats(NULL, sq, &a, &b, df), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_stats(all, NULL, &a, &b, df), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_stats(all, sq, NULL, &b, df), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_stats(all, sq, &a, NULL, df), TT_EINVAL);
    ck_assert_int_eq(tt_sharded_sparse_stats(all, sq, &a, &b, NULL), TT_EINVAL);
    /* an index without sparse postings: named, refused by both */
    tt_sharded *ns;
    ck_assert_int_eq(tt_sharded_open(&ns, nosp, NULL, 1, 2), TT_OK);
    ck_assert_int_eq(tt_sharded_sparse_stats(ns, sq, &a, &b, df), TT_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "shard-0001: the shard has no sparse postings"));
    ck_assert_int_eq(tt_sharded_sparse_search_stats(ns, sq, NULL, SP_NQ, SP_K, NULL, N, T, df, 1,
                                                    bh, bs, bn), TT_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "no sparse postings"));
    tt_sharded_close(ns);

    tt_filter_free(f);
    tt_sharded_close(all);
    tt_index_close(idx);
    tt_sparse_set_free(docs);
    tt_sparse_set_free(sq);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, merge_equals_sort);
    tcase_add_test(tc, shards_file_checks);
    tcase_add_test(tc, sharded_search_equals_unsharded);
    tcase_add_test(tc, sparse_split_over_processes);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

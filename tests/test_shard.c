/* Sharded indexes (src/index/shards.c, src/shard/): tt_hits_merge against a sort of
 * the concatenated lists (random lists with many tied scores); the SHARDS file's round
 * trip and each of its checks; and, through the library, a sharded build's search
 * equal to the unsharded index's in exhaustive mode, opened whole and rank by rank
 * (the rank lists merged with tt_hits_merge, as tartan-mpi does). */
#include "testutil.h"
#include "index/shards.h"
#include "io/dir.h"
#include "io/file.h"

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

int main(void) {
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, merge_equals_sort);
    tcase_add_test(tc, shards_file_checks);
    tcase_add_test(tc, sharded_search_equals_unsharded);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

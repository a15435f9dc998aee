/* Metadata and filters (src/meta/, src/index/metadata.c, the filter in src/search/):
 * --where against a model of the metadata, filtered search in every mode and both PLAID
 * plans against brute force over the allowed documents at several selectivities, id
 * filters, metadata after add / upsert / delete / compact, bad metadata files, and SQL
 * that tries to write or reach a file. */
#include "testutil.h"

#include "index/index.h"

#define DIM 16u
#define NDOCS 1500u
#define NQ 12u
#define QLEN 4u

typedef struct corpus {
    uint64_t ndocs, nvecs;
    float *v;
    int64_t *lens;
    int *bucket;     /* the metadata model: bucket in [0, 1000) */
} corpus;

static void make_corpus(corpus *c, uint64_t ndocs, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    c->ndocs = ndocs;
    c->lens = malloc(ndocs * sizeof *c->lens);
    c->bucket = malloc(ndocs * sizeof *c->bucket);
    c->nvecs = 0;
    for (uint64_t d = 0; d < ndocs; d++) {
        c->lens[d] = 3 + (int64_t)tt_rng_below(&r, 8);
        c->nvecs += (uint64_t)c->lens[d];
        c->bucket[d] = (int)tt_rng_below(&r, 1000);
    }
    c->v = malloc(c->nvecs * DIM * sizeof *c->v);
    tu_clustered(c->v, c->nvecs, DIM, 40, 0.12f, seed + 1, NULL);
}

static void free_corpus(corpus *c) {
    free(c->v);
    free(c->lens);
    free(c->bucket);
}

static void write_text(const char *path, const char *text) {
    ck_assert_int_eq(tu_write_file(path, text, strlen(text)), 0);
}

/* Vectors, lengths and ids "d<row>" under prefix; metadata lines {"bucket", "tag",
 * "half"} in document order. */
static tt_input *corpus_input(const corpus *c, const char *prefix, const char *meta_path) {
    char v[600], l[600], i[600];
    snprintf(v, sizeof v, "%s.vectors.npy", prefix);
    snprintf(l, sizeof l, "%s.doclens.npy", prefix);
    snprintf(i, sizeof i, "%s.ids.txt", prefix);
    ck_assert_int_eq(tu_write_npy(v, TT_DT_F32, DIM, c->v, c->nvecs), TT_OK);
    ck_assert_int_eq(tu_write_npy(l, TT_DT_I64, 0, c->lens, c->ndocs), TT_OK);
    FILE *f = fopen(i, "w");
    for (uint64_t d = 0; d < c->ndocs; d++)
        fprintf(f, "d%llu\n", (unsigned long long)d);
    fclose(f);
    if (meta_path) {
        f = fopen(meta_path, "w");
        for (uint64_t d = 0; d < c->ndocs; d++)
            fprintf(f, "{\"bucket\": %d, \"tag\": \"t%d\", \"half\": %s, \"x\": %s}\n",
                    c->bucket[d], c->bucket[d] % 7, c->bucket[d] < 500 ? "true" : "false",
                    d % 3 ? "1.5" : "null");
        fclose(f);
    }
    const char *vp[] = {v}, *lp[] = {l};
    tt_input *in = NULL;
    ck_assert_msg(tt_input_open(&in, 1, vp, lp, i, NULL) == TT_OK, "%s", tt_last_error());
    return in;
}

static void opts(tt_build_options *o, const char *meta) {
    tt_build_options_init(o);
    o->threads = 2;
    o->memory_bytes = 128ull << 20;
    o->num_centroids = 64;
    o->keep_originals = TT_KEEP_F16;
    o->metadata = meta;
}

static uint64_t file_hash(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    uint64_t h = 1469598103934665603ull;
    int ch;
    while ((ch = fgetc(f)) != EOF)
        h = (h ^ (uint64_t)ch) * 1099511628211ull;
    fclose(f);
    return h;
}

/* Reference: the top min(k, allowed) of an unfiltered search of every document in mode
 * `mode`, keeping the allowed ones (the filter's code is not involved). */
static uint32_t reference(const tt_index *idx, tt_search_ctx *ctx, const float *q, int mode,
                          const uint8_t *allowed, uint32_t k, tt_hit *out) {
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = mode;
    uint32_t n = 0, all = (uint32_t)idx->num_docs;
    tt_hit *h = malloc(all * sizeof *h);
    ck_assert_int_eq(tt_search(idx, ctx, q, QLEN, all, &o, h, &n), TT_OK);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n && m < k; i++)
        if (allowed[h[i].doc])
            out[m++] = h[i];
    free(h);
    return m;
}

/* tt_filter_intersect against a hand-worked pair: rows over two 64-bit words and a
 * tail, and its refusals. */
START_TEST(filter_intersect_by_hand) {
    tt_filter *a, *b, *c;
    ck_assert_int_eq(tt_filter_new(&a, 130), TT_OK);
    ck_assert_int_eq(tt_filter_new(&b, 130), TT_OK);
    ck_assert_int_eq(tt_filter_new(&c, 129), TT_OK);
    const uint64_t ra[] = {0, 5, 63, 64, 100, 129}, rb[] = {5, 64, 65, 128, 129};
    for (size_t i = 0; i < sizeof ra / sizeof ra[0]; i++)
        ck_assert_int_eq(tt_filter_add(a, ra[i]), TT_OK);
    for (size_t i = 0; i < sizeof rb / sizeof rb[0]; i++)
        ck_assert_int_eq(tt_filter_add(b, rb[i]), TT_OK);
    ck_assert_int_eq(tt_filter_intersect(a, b), TT_OK);
    ck_assert_uint_eq(tt_filter_count(a), 3); /* 5, 64, 129 */
    for (uint64_t r = 0; r < 130; r++)
        ck_assert_int_eq(tt_filter_has(a, r), r == 5 || r == 64 || r == 129);
    ck_assert_uint_eq(tt_filter_count(b), 5); /* src unchanged */
    ck_assert_int_eq(tt_filter_intersect(a, c), TT_EINVAL);
    ck_assert_uint_eq(tt_filter_count(a), 3);
    ck_assert_int_eq(tt_filter_intersect(NULL, b), TT_EINVAL);
    ck_assert_int_eq(tt_filter_intersect(a, NULL), TT_EINVAL);
    tt_filter_free(a);
    tt_filter_free(b);
    tt_filter_free(c);
}
END_TEST

START_TEST(where_and_filtered_search_match_brute_force) {
    char *dir = tu_tmpdir();
    char prefix[600], meta[600], idxdir[600];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(meta, sizeof meta, "%s/meta.jsonl", dir);
    snprintf(idxdir, sizeof idxdir, "%s/idx", dir);
    corpus c;
    make_corpus(&c, NDOCS, 11);
    tt_input *in = corpus_input(&c, prefix, meta);
    tt_build_options o;
    opts(&o, meta);
    ck_assert_msg(tt_build(idxdir, in, &o, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    ck_assert_msg(tt_index_verify(idxdir, NULL, NULL) == TT_OK, "%s", tt_last_error());

    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, idxdir, NULL), TT_OK);
    tt_metadata *md;
    ck_assert_int_eq(tt_metadata_open(idx, &md), TT_OK);
    ck_assert_uint_eq(tt_metadata_num_columns(md), 4);
    const char *type;
    ck_assert_str_eq(tt_metadata_column(md, 0, &type), "bucket");
    ck_assert_str_eq(type, "integer");
    ck_assert_str_eq(tt_metadata_column(md, 2, &type), "half");
    ck_assert_str_eq(type, "boolean");
    ck_assert_str_eq(tt_metadata_column(md, 3, &type), "x");
    ck_assert_str_eq(type, "real");
    char *js;
    ck_assert_int_eq(tt_metadata_json(md, 4, &js), TT_OK);
    char want[200];
    snprintf(want, sizeof want, "{\"bucket\":%d,\"tag\":\"t%d\",\"half\":%s,\"x\":1.5}",
             c.bucket[4], c.bucket[4] % 7, c.bucket[4] < 500 ? "true" : "false");
    ck_assert_str_eq(js, want);
    tt_free(js);

    float *Q = malloc(NQ * QLEN * DIM * sizeof *Q);
    /* The seed of the corpus: the queries are its first vectors (near their documents). */
    tu_clustered(Q, NQ * QLEN, DIM, 40, 0.12f, 12, NULL);
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    uint8_t *allowed = malloc(NDOCS);
    const int cuts[] = {1, 5, 20, 100, 500, 1000}; /* selectivity 0.1% .. 100% */
    const uint32_t k = 10;
    tt_hit ref[10], got[10];
    for (size_t s = 0; s < sizeof cuts / sizeof cuts[0]; s++) {
        char expr[64];
        snprintf(expr, sizeof expr, "bucket < %d AND half IN (0, 1)", cuts[s]);
        tt_filter *f;
        ck_assert_msg(tt_metadata_where(md, expr, &f) == TT_OK, "%s", tt_last_error());
        uint64_t nallowed = 0;
        for (uint64_t d = 0; d < NDOCS; d++) {
            allowed[d] = c.bucket[d] < cuts[s];
            nallowed += allowed[d];
            ck_assert_int_eq(tt_filter_has(f, d), allowed[d]);
        }
        ck_assert_uint_eq(tt_filter_count(f), nallowed);
        uint32_t want_n = (uint32_t)TT_MIN((uint64_t)k, nallowed);
        for (int mode = 0; mode < 3; mode++) {
            for (int plan = 0; plan < (mode == TT_MODE_PLAID ? 2 : 1); plan++) {
                double recall = 0;
                for (uint32_t q = 0; q < NQ; q++) {
                    const float *qv = Q + (size_t)q * QLEN * DIM;
                    tt_search_options so;
                    tt_search_options_init(&so);
                    so.mode = mode;
                    so.filter = f;
                    so.filter_direct_max = plan ? 1 : UINT64_MAX; /* IVF plan / direct */
                    uint32_t n, rn;
                    ck_assert_int_eq(tt_search(idx, ctx, qv, QLEN, k, &so, got, &n), TT_OK);
                    ck_assert_uint_eq(n, want_n);
                    for (uint32_t i = 0; i < n; i++)
                        ck_assert(allowed[got[i].doc]);
                    int refmode = mode == TT_MODE_PLAID ? TT_MODE_EXHAUSTIVE : mode;
                    rn = reference(idx, ctx, qv, refmode, allowed, k, ref);
                    ck_assert_uint_eq(rn, want_n);
                    uint32_t hit = 0;
                    for (uint32_t i = 0; i < n; i++)
                        for (uint32_t j = 0; j < rn; j++)
                            hit += got[i].doc == ref[j].doc;
                    /* PLAID's scan plan: up to max(ndocs / 4, k) allowed documents
                     * (64 at the k = 10 defaults) are all scored, so the result is the
                     * exhaustive one. */
                    bool scan = mode == TT_MODE_PLAID && plan == 0 && nallowed <= 64;
                    if (mode != TT_MODE_PLAID || scan) {
                        /* Exhaustive and exact honour the filter exactly. */
                        for (uint32_t i = 0; i < n; i++)
                            ck_assert_msg(fabsf(got[i].score - ref[i].score) <= 1e-4f,
                                          "mode %d cut %d query %u rank %u: %g vs %g", mode,
                                          cuts[s], q, i, got[i].score, ref[i].score);
                    }
                    recall += rn ? (double)hit / rn : 1;
                }
                recall /= NQ;
                if (getenv("TT_META_VERBOSE"))
                    fprintf(stderr, "mode %d plan %d cut %d recall %.3f\n", mode, plan, cuts[s],
                            recall);
                else
                ck_assert_msg(recall >= (mode == TT_MODE_PLAID ? 0.95 : 0.999),
                              "mode %d plan %d selectivity %d/1000: recall %.3f", mode, plan,
                              cuts[s], recall);
            }
        }
        tt_filter_free(f);
    }
    /* Matching nothing: zero hits, not an error. */
    tt_filter *none;
    ck_assert_int_eq(tt_metadata_where(md, "bucket < 0", &none), TT_OK);
    ck_assert_uint_eq(tt_filter_count(none), 0);
    tt_search_options so;
    tt_search_options_init(&so);
    so.filter = none;
    uint32_t n = 99;
    ck_assert_int_eq(tt_search(idx, ctx, Q, QLEN, k, &so, got, &n), TT_OK);
    ck_assert_uint_eq(n, 0);
    tt_filter_free(none);
    /* A filter of another size is refused. */
    tt_filter *wrong;
    ck_assert_int_eq(tt_filter_new(&wrong, NDOCS + 1), TT_OK);
    so.filter = wrong;
    ck_assert_int_eq(tt_search(idx, ctx, Q, QLEN, k, &so, got, &n), TT_EINVAL);
    tt_filter_free(wrong);

    /* Ids: found ones allowed, unknown ones counted (each once). */
    const char *ids[] = {"d3", "d7", "nope", "d3", "also-not"};
    tt_filter *fi;
    uint64_t unknown;
    ck_assert_int_eq(tt_filter_from_ids(idx, ids, 5, &fi, &unknown), TT_OK);
    ck_assert_uint_eq(unknown, 2);
    ck_assert_uint_eq(tt_filter_count(fi), 2);
    ck_assert(tt_filter_has(fi, 3) && tt_filter_has(fi, 7));
    tt_filter_free(fi);

    /* Bad SQL: unknown column, syntax, and everything that would write or reach a file;
     * the database file is the same afterwards and no file appears. */
    char dbpath[700];
    snprintf(dbpath, sizeof dbpath, "%s/metadata.tt", idxdir);
    uint64_t before = file_hash(dbpath);
    char att[800];
    snprintf(att, sizeof att, "1) UNION SELECT 1 FROM (SELECT 1); ATTACH '%s/evil.db' AS e; --",
             dir);
    const char *bad[] = {"yeer > 3", "bucket >", "1); DROP TABLE meta; --",
                         "1); DELETE FROM meta; --", att,
                         "load_extension('/tmp/x')", "(SELECT 1 FROM pragma_table_info('meta'))",
                         "1); PRAGMA user_version = 5; --",
                         "(WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) "
                         "SELECT count(*) FROM r)", "", "1; SELECT 2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tt_filter *f = NULL;
        ck_assert_msg(tt_metadata_where(md, bad[i], &f) == TT_EINVAL, "accepted: %s", bad[i]);
        ck_assert_ptr_null(f);
    }
    ck_assert(strstr((tt_metadata_where(md, "yeer > 3", &fi), tt_last_error()),
                     "no such column: yeer"));
    ck_assert_uint_eq(file_hash(dbpath), before);
    snprintf(att, sizeof att, "%s/evil.db", dir);
    ck_assert_int_ne(access(att, F_OK), 0);
    ck_assert_int_eq(tt_index_verify(idxdir, NULL, NULL), TT_OK);

    free(allowed);
    free(Q);
    tt_search_ctx_free(ctx);
    tt_metadata_close(md);
    tt_index_close(idx);
    free_corpus(&c);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Every live row's metadata is its document's: bucket by the model, by id. */
static void assert_rows(const char *idxdir, const int *bucket_of_id, uint64_t nids) {
    ck_assert_msg(tt_index_verify(idxdir, NULL, NULL) == TT_OK, "%s", tt_last_error());
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, idxdir, NULL), TT_OK);
    tt_metadata *md;
    ck_assert_int_eq(tt_metadata_open(idx, &md), TT_OK);
    for (uint64_t d = 0; d < idx->num_docs; d++) {
        char *js;
        ck_assert_int_eq(tt_metadata_json(md, d, &js), TT_OK);
        if (tt_index_deleted(idx, d)) {
            ck_assert_str_eq(js, "null");
        } else {
            size_t len;
            const char *id = tt_index_doc_id(idx, d, &len);
            unsigned long long k = strtoull(id + 1, NULL, 10);
            ck_assert_uint_lt(k, nids);
            char want[64];
            if (bucket_of_id[k] < 0)
                snprintf(want, sizeof want, "\"bucket\":null");
            else
                snprintf(want, sizeof want, "\"bucket\":%d", bucket_of_id[k]);
            ck_assert_msg(strstr(js, want), "row %llu (%.*s): %s, want %s",
                          (unsigned long long)d, (int)len, id, js, want);
        }
        tt_free(js);
    }
    tt_metadata_close(md);
    tt_index_close(idx);
}

START_TEST(metadata_follows_changes) {
    char *dir = tu_tmpdir();
    char prefix[600], meta[600], idxdir[600], p2[600], m2[600];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(meta, sizeof meta, "%s/meta.jsonl", dir);
    snprintf(idxdir, sizeof idxdir, "%s/idx", dir);
    corpus c;
    make_corpus(&c, 300, 21);
    int model[400];
    for (int i = 0; i < 300; i++)
        model[i] = c.bucket[i];
    tt_input *in = corpus_input(&c, prefix, meta);
    tt_build_options o;
    opts(&o, meta);
    ck_assert_msg(tt_build(idxdir, in, &o, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    assert_rows(idxdir, model, 300);

    /* Add 50 documents d300..d349, metadata keyed by id in reverse order. */
    corpus a;
    make_corpus(&a, 50, 22);
    snprintf(p2, sizeof p2, "%s/a", dir);
    in = corpus_input(&a, p2, NULL);
    tt_input_free(in);
    char ids[600]; /* the ids: d300.. */
    snprintf(ids, sizeof ids, "%s/a.ids.txt", dir);
    FILE *f = fopen(ids, "w");
    for (int i = 0; i < 50; i++)
        fprintf(f, "d%d\n", 300 + i);
    fclose(f);
    snprintf(m2, sizeof m2, "%s/a.jsonl", dir);
    f = fopen(m2, "w");
    for (int i = 49; i >= 0; i--) {
        fprintf(f, "{\"id\": \"d%d\", \"bucket\": %d}\n", 300 + i, 2000 + i);
        model[300 + i] = 2000 + i;
    }
    fclose(f);
    char v[700], l[700];
    snprintf(v, sizeof v, "%s.vectors.npy", p2);
    snprintf(l, sizeof l, "%s.doclens.npy", p2);
    const char *vp[] = {v}, *lp[] = {l};
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, ids, NULL), TT_OK);
    tt_change_options co;
    tt_change_options_init(&co);
    co.threads = 2;
    co.metadata = m2;
    ck_assert_msg(tt_index_add(idxdir, in, &co, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    assert_rows(idxdir, model, 350);

    /* Upsert d5..d9 without metadata: their rows are replaced by rows of nulls. */
    f = fopen(ids, "w");
    for (int i = 0; i < 50; i++)
        fprintf(f, "d%d\n", i < 5 ? 5 + i : 350 + i);
    fclose(f);
    for (int i = 0; i < 50; i++)
        model[i < 5 ? 5 + i : 350 + i] = -1;
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, ids, NULL), TT_OK);
    co.metadata = NULL;
    co.upsert = 1;
    ck_assert_msg(tt_index_add(idxdir, in, &co, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    assert_rows(idxdir, model, 400);

    /* Delete, then compact: rows removed, then renumbered with their documents. */
    const char *del[] = {"d0", "d1", "d100", "d301", "d360"};
    tt_change_options_init(&co);
    ck_assert_msg(tt_index_delete(idxdir, del, 5, &co, NULL) == TT_OK, "%s", tt_last_error());
    assert_rows(idxdir, model, 400);
    ck_assert_msg(tt_index_compact(idxdir, &co, NULL) == TT_OK, "%s", tt_last_error());
    assert_rows(idxdir, model, 400);
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, idxdir, NULL), TT_OK);
    ck_assert_uint_eq(idx->num_docs, 390); /* 400 rows, 5 replaced, 5 deleted */
    tt_metadata *md;
    ck_assert_int_eq(tt_metadata_open(idx, &md), TT_OK);
    tt_filter *fl;
    ck_assert_int_eq(tt_metadata_where(md, "bucket >= 2000", &fl), TT_OK);
    ck_assert_uint_eq(tt_filter_count(fl), 49); /* d300..d349 less d301 */
    tt_filter_free(fl);
    tt_metadata_close(md);
    tt_index_close(idx);

    free_corpus(&a);
    free_corpus(&c);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* A bad metadata file fails the build naming file and line, and leaves nothing. */
START_TEST(bad_metadata_files) {
    char *dir = tu_tmpdir();
    char prefix[600], meta[600], idxdir[600];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(meta, sizeof meta, "%s/m.jsonl", dir);
    snprintf(idxdir, sizeof idxdir, "%s/idx", dir);
    corpus c;
    make_corpus(&c, 3, 31);
    tt_input *in = corpus_input(&c, prefix, NULL);
    struct {
        const char *text, *msg;
        int st;
    } cases[] = {
        {"{\"a\": 1}\n{\"a\": 2}\n", "2 lines for 3 documents", TT_EDIM},
        {"{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3}\n{\"a\": 4}\n", "m.jsonl:4: more lines", TT_EDIM},
        {"{\"a\": 1}\n{\"a\": 2,}\n{\"a\": 3}\n", "m.jsonl:2:", TT_EPARSE},
        {"{\"a\": 1}\n{\"a\": \"x\"}\n{\"a\": 3}\n", "m.jsonl:2: member 'a' is a text", TT_EVALUE},
        {"{\"a\": 1}\n{\"row\": 2}\n{\"a\": 3}\n", "m.jsonl:2: the member name 'row'", TT_EVALUE},
        {"{\"a\": [1]}\n{}\n{}\n", "m.jsonl:1: member 'a' is an object", TT_EVALUE},
        {"{\"id\": \"d0\"}\n{\"id\": \"d9\"}\n", "m.jsonl:2: id 'd9' is not one", TT_EVALUE},
        {"{\"id\": \"d0\"}\n{\"id\": \"d0\"}\n", "m.jsonl:2: id 'd0' has metadata", TT_EVALUE},
        {"{\"id\": \"d0\"}\n{\"id\": \"d2\"}\n", "1 of the 3 documents have no line (the first: 'd1')",
         TT_EDIM},
    };
    tt_build_options o;
    opts(&o, meta);
    o.num_centroids = 2;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(meta, cases[i].text);
        int st = tt_build(idxdir, in, &o, NULL);
        ck_assert_msg(st == cases[i].st && strstr(tt_last_error(), cases[i].msg),
                      "case %zu: %d %s", i, st, tt_last_error());
        ck_assert_int_ne(access(idxdir, F_OK), 0);
    }
    /* Integers and reals mix into a real column; nulls fit anything. */
    write_text(meta, "{\"a\": 1, \"b\": null}\n{\"a\": 0.1, \"b\": null}\n\n{\"a\": null, \"b\": \"s\"}\n");
    ck_assert_msg(tt_build(idxdir, in, &o, NULL) == TT_OK, "%s", tt_last_error());
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, idxdir, NULL), TT_OK);
    tt_metadata *md;
    ck_assert_int_eq(tt_metadata_open(idx, &md), TT_OK);
    const char *type;
    tt_metadata_column(md, 0, &type);
    ck_assert_str_eq(type, "real");
    tt_metadata_column(md, 1, &type);
    ck_assert_str_eq(type, "text");
    char *js;
    ck_assert_int_eq(tt_metadata_json(md, 0, &js), TT_OK);
    /* A real reads back as a real (1.0, not 1) and as the same double, in the fewest
     * digits that do it (0.1, not 0.10000000000000001). */
    ck_assert_str_eq(js, "{\"a\":1.0,\"b\":null}");
    tt_free(js);
    ck_assert_int_eq(tt_metadata_json(md, 1, &js), TT_OK);
    ck_assert_str_eq(js, "{\"a\":0.1,\"b\":null}");
    tt_free(js);
    tt_metadata_close(md);
    tt_index_close(idx);
    tt_input_free(in);
    free_corpus(&c);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The bitmap by hand: bounds, counts, membership. */
START_TEST(filter_api) {
    tt_filter *f;
    ck_assert_int_eq(tt_filter_new(&f, 130), TT_OK);
    ck_assert_uint_eq(tt_filter_num_rows(f), 130);
    ck_assert_uint_eq(tt_filter_count(f), 0);
    ck_assert_int_eq(tt_filter_add(f, 0), TT_OK);
    ck_assert_int_eq(tt_filter_add(f, 64), TT_OK);
    ck_assert_int_eq(tt_filter_add(f, 129), TT_OK);
    ck_assert_int_eq(tt_filter_add(f, 129), TT_OK); /* twice: once */
    ck_assert_int_eq(tt_filter_add(f, 130), TT_EINVAL);
    ck_assert_uint_eq(tt_filter_count(f), 3);
    ck_assert(tt_filter_has(f, 64) && !tt_filter_has(f, 63) && !tt_filter_has(f, 130));
    ck_assert(!tt_filter_has(NULL, 0));
    ck_assert_int_eq(tt_filter_add(NULL, 0), TT_EINVAL);
    tt_filter_free(f);
    tt_filter_free(NULL);
    ck_assert_int_eq(tt_filter_new(&f, 0), TT_OK);
    ck_assert_uint_eq(tt_filter_count(f), 0);
    tt_filter_free(f);
}
END_TEST

int main(void) {
    Suite *s = suite_create("meta");
    TCase *tc = tcase_create("meta");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, filter_intersect_by_hand);
    tcase_add_test(tc, filter_api);
    tcase_add_test(tc, where_and_filtered_search_match_brute_force);
    tcase_add_test(tc, metadata_follows_changes);
    tcase_add_test(tc, bad_metadata_files);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

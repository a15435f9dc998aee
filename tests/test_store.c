/* The living index (src/store/): random add / upsert / delete / compact sequences checked
 * against a model after every step (search in every mode and I/O path equals a fresh
 * build over the model's live documents with the same codebook; a compaction writes the
 * same files as that build), without and with token pooling, ids stable across deletes,
 * pooled adds with each factor and what compaction keeps of them, bad changes that leave
 * the index as it was, the writer lock, and format-1 indexes. */
#include "testutil.h"

#include "index/index.h"
#include "io/dir.h"
#include "io/file.h"
#include "input/input.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>

#define DIM 16u

/* The model: every document ever added (vectors kept), and which are live, in the
 * index's row order. */
typedef struct mdoc {
    char id[48];
    uint32_t len;
    float *v;      /* len * DIM */
    bool live;
} mdoc;

typedef struct model {
    mdoc *d;
    size_t n, cap;
    uint64_t next_auto;
} model;

static void model_push(model *m, const char *id, uint32_t len, const float *v) {
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->d = realloc(m->d, m->cap * sizeof *m->d);
    }
    mdoc *x = &m->d[m->n++];
    snprintf(x->id, sizeof x->id, "%s", id);
    x->len = len;
    x->v = malloc((size_t)len * DIM * sizeof *x->v);
    memcpy(x->v, v, (size_t)len * DIM * sizeof *x->v);
    x->live = true;
}

static mdoc *model_find_live(model *m, const char *id) {
    for (size_t i = 0; i < m->n; i++)
        if (m->d[i].live && !strcmp(m->d[i].id, id))
            return &m->d[i];
    return NULL;
}

static bool model_ever(const model *m, const char *id) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->d[i].id, id))
            return true;
    return false;
}

static void model_free(model *m) {
    for (size_t i = 0; i < m->n; i++)
        free(m->d[i].v);
    free(m->d);
}

/* A batch of new documents: vectors clustered like the base collection. */
typedef struct batch {
    uint64_t ndocs, nvecs;
    float *v;
    int64_t *lens;
    char (*ids)[48]; /* room for any "s<int>-<u64>" */
} batch;

static void make_batch(batch *b, uint64_t ndocs, uint64_t seed) {
    tt_rng r;
    tt_rng_seed(&r, seed);
    b->ndocs = ndocs;
    b->lens = malloc(ndocs * sizeof *b->lens);
    b->ids = calloc(ndocs, sizeof *b->ids);
    b->nvecs = 0;
    for (uint64_t d = 0; d < ndocs; d++) {
        b->lens[d] = 2 + (int64_t)tt_rng_below(&r, 7);
        b->nvecs += (uint64_t)b->lens[d];
    }
    b->v = malloc(b->nvecs * DIM * sizeof *b->v);
    tu_clustered(b->v, b->nvecs, DIM, 12, 0.3f, 1000 + seed / 7, NULL);
    /* Two dimensions with a large shared offset (LLM-like): an adaptive codec gives
     * them most bits and reorders the positions. */
    for (uint64_t i = 0; i < b->nvecs; i++) {
        b->v[i * DIM + 3] += 2.0f + 0.3f * (float)tt_rng_uniform(&r);
        b->v[i * DIM + 11] -= 2.0f + 0.3f * (float)tt_rng_uniform(&r);
    }
}

static void free_batch(batch *b) {
    free(b->v);
    free(b->lens);
    free(b->ids);
}

/* Build options for the small test indexes: 2 threads, 128 MiB, K centroids (0: the
 * default), float16 originals kept or not. */
static void small_options(tt_build_options *o, uint32_t K, bool keep_originals) {
    tt_build_options_init(o);
    o->threads = 2;
    o->memory_bytes = 128ull << 20;
    o->num_centroids = K;
    o->keep_originals = keep_originals ? TT_KEEP_F16 : TT_KEEP_NONE;
}

/* Writes the batch's files under prefix; ids file only if with_ids. */
static tt_input *batch_input(const batch *b, const char *prefix, bool with_ids) {
    char v[600], l[600], i[600];
    snprintf(v, sizeof v, "%s.vectors.npy", prefix);
    snprintf(l, sizeof l, "%s.doclens.npy", prefix);
    snprintf(i, sizeof i, "%s.ids.txt", prefix);
    ck_assert_int_eq(tu_write_npy(v, TT_DT_F32, DIM, b->v, b->nvecs), TT_OK);
    ck_assert_int_eq(tu_write_npy(l, TT_DT_I64, 0, b->lens, b->ndocs), TT_OK);
    if (with_ids) {
        FILE *f = fopen(i, "w");
        for (uint64_t d = 0; d < b->ndocs; d++)
            fprintf(f, "%s\n", b->ids[d]);
        fclose(f);
    }
    const char *vp[] = {v}, *lp[] = {l};
    tt_input *in = NULL;
    ck_assert_msg(tt_input_open(&in, 1, vp, lp, with_ids ? i : NULL, NULL) == TT_OK, "%s",
                  tt_last_error());
    return in;
}

/* Builds the model's live documents, in order, with the codebook of `codebook`, pooled
 * with pool_factor. */
static void build_reference(const model *m, const char *dir, const char *out,
                            const char *codebook, int pool_factor) {
    batch b;
    memset(&b, 0, sizeof b);
    for (size_t i = 0; i < m->n; i++)
        if (m->d[i].live) {
            b.ndocs++;
            b.nvecs += m->d[i].len;
        }
    b.v = malloc((b.nvecs ? b.nvecs : 1) * DIM * sizeof *b.v);
    b.lens = malloc((b.ndocs ? b.ndocs : 1) * sizeof *b.lens);
    b.ids = calloc(b.ndocs ? b.ndocs : 1, sizeof *b.ids);
    uint64_t d = 0, v = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (!m->d[i].live)
            continue;
        memcpy(b.v + v * DIM, m->d[i].v, (size_t)m->d[i].len * DIM * sizeof *b.v);
        b.lens[d] = m->d[i].len;
        snprintf(b.ids[d], sizeof b.ids[d], "%s", m->d[i].id);
        v += m->d[i].len;
        d++;
    }
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/ref", dir);
    tt_input *in = batch_input(&b, prefix, true);
    tt_build_options o;
    small_options(&o, 0, true);
    o.codebook = codebook;
    o.pool_factor = pool_factor;
    tu_rmrf(out);
    ck_assert_msg(tt_build(out, in, &o, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    free_batch(&b);
}

/* Searches both indexes with the same queries in every mode and I/O path: the same
 * external ids in the same order with the same scores, bit for bit. */
static void assert_same_results(const char *live_dir, const char *ref_dir, const float *Q,
                                uint32_t nqv, uint32_t nq, const char *when) {
    static const int modes[] = {TT_MODE_PLAID, TT_MODE_EXHAUSTIVE, TT_MODE_EXACT};
    static const int ios[] = {TT_IO_URING, TT_IO_MMAP};
    for (size_t io = 0; io < 2; io++) {
        tt_open_options oo;
        tt_open_options_init(&oo);
        oo.io = ios[io];
        tt_index *a, *b;
        ck_assert_msg(tt_index_open(&a, live_dir, &oo) == TT_OK, "%s: %s", when, tt_last_error());
        ck_assert_int_eq(tt_index_open(&b, ref_dir, &oo), TT_OK);
        tt_search_ctx *ca, *cb;
        ck_assert_int_eq(tt_search_ctx_new(a, &ca), TT_OK);
        ck_assert_int_eq(tt_search_ctx_new(b, &cb), TT_OK);
        for (size_t mo = 0; mo < 3; mo++) {
            for (uint32_t q = 0; q < nq; q++) {
                tt_search_options so;
                tt_search_options_init(&so);
                so.mode = modes[mo];
                so.ndocs = 8; /* PLAID's stages really prune at this size */
                tt_hit ha[10], hb[10];
                uint32_t na, nb;
                const float *qv = Q + (uint64_t)q * nqv * DIM;
                ck_assert_msg(tt_search(a, ca, qv, nqv, 10, &so, ha, &na) == TT_OK, "%s: %s",
                              when, tt_last_error());
                ck_assert_int_eq(tt_search(b, cb, qv, nqv, 10, &so, hb, &nb), TT_OK);
                ck_assert_msg(na == nb, "%s: mode %d io %d query %u: %u hits, reference %u",
                              when, modes[mo], ios[io], q, na, nb);
                for (uint32_t i = 0; i < na; i++) {
                    size_t la, lb;
                    const char *ia = tt_index_doc_id(a, ha[i].doc, &la);
                    const char *ib = tt_index_doc_id(b, hb[i].doc, &lb);
                    ck_assert_msg(la == lb && !memcmp(ia, ib, la) && ha[i].score == hb[i].score,
                                  "%s: mode %d io %d query %u rank %u: %.*s %.9g vs %.*s %.9g",
                                  when, modes[mo], ios[io], q, i, (int)la, ia, ha[i].score,
                                  (int)lb, ib, hb[i].score);
                    ck_assert(!tt_index_deleted(a, ha[i].doc));
                }
            }
        }
        /* Exhaustive and exact search of all the queries in one pass over the segments
         * (a batch without times): what they return one by one, deleted rows skipped. */
        uint64_t offs[16];
        uint32_t lens[16];
        ck_assert_uint_le(nq, 16);
        for (uint32_t q = 0; q < nq; q++) {
            offs[q] = (uint64_t)q * nqv;
            lens[q] = nqv;
        }
        for (int mo = TT_MODE_EXHAUSTIVE; mo <= TT_MODE_EXACT; mo++) {
            tt_search_options so;
            tt_search_options_init(&so);
            so.mode = mo;
            tt_hit hb[16 * 10], hs[10];
            uint32_t nb[16], ns;
            ck_assert_msg(tt_search_batch(a, Q, offs, lens, nq, 10, &so, 2, hb, nb, NULL) ==
                              TT_OK, "%s: %s", when, tt_last_error());
            for (uint32_t q = 0; q < nq; q++) {
                ck_assert_int_eq(tt_search(a, ca, Q + offs[q] * DIM, nqv, 10, &so, hs, &ns),
                                 TT_OK);
                ck_assert_uint_eq(nb[q], ns);
                for (uint32_t i = 0; i < ns; i++)
                    ck_assert_msg(hb[q * 10 + i].doc == hs[i].doc &&
                                      hb[q * 10 + i].score == hs[i].score,
                                  "%s: batched mode %d, query %u rank %u", when, mo, q, i);
            }
        }
        tt_search_ctx_free(ca);
        tt_search_ctx_free(cb);
        tt_index_close(a);
        tt_index_close(b);
    }
}

/* After a compaction: the segment files hold what the reference build's do (with the
 * lengths before pooling when pooled, the residual scales when it has them). */
static void assert_same_files(const char *live_dir, const char *ref_dir, bool pooled,
                              bool vscale) {
    static const char *const kinds[] = {"CODE", "RESI", "IVF_", "DOCL", "IDS_", "IDMP", "ORIG",
                                        "INLN", "VSCL"};
    tt_manifest a, b;
    ck_assert_int_eq(tt_manifest_read(live_dir, &a), TT_OK);
    ck_assert_int_eq(tt_manifest_read(ref_dir, &b), TT_OK);
    ck_assert_uint_eq(a.nseg, 1);
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        if ((!pooled && !strcmp(kinds[k], "INLN")) || (!vscale && !strcmp(kinds[k], "VSCL")))
            continue;
        const tt_manifest_entry *x = NULL, *y = NULL;
        for (uint32_t i = 0; i < a.n; i++)
            if (!memcmp(a.e[i].kind, kinds[k], 4))
                x = &a.e[i];
        for (uint32_t i = 0; i < b.n; i++)
            if (!memcmp(b.e[i].kind, kinds[k], 4))
                y = &b.e[i];
        ck_assert_msg(x && y, "%s missing", kinds[k]);
        ck_assert_msg(x->size == y->size && x->payload_hash == y->payload_hash,
                      "%s: %s differs from the fresh build's %s", kinds[k], x->name, y->name);
    }
    tt_manifest_free(&a);
    tt_manifest_free(&b);
}

/* No file of a generation that is not current, no lock, nothing else. */
static void assert_clean(const char *dir) {
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(dir, &m), TT_OK);
    DIR *d = opendir(dir);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
            !strcmp(de->d_name, TT_F_MANIFEST))
            continue;
        ck_assert_msg(tt_manifest_find(&m, de->d_name) != NULL, "%s/%s is left over", dir,
                      de->d_name);
    }
    closedir(d);
    tt_manifest_free(&m);
}

/* _i: bit 0 the codec kind (per-dim, adaptive), bit 1 the pool factor minus 1 of the
 * build (and so of every add); 4: adaptive with one residual scale per vector (debias
 * 2), which every add, compaction and reference build carries. */
START_TEST(random_changes_match_model) {
    char *dir = tu_tmpdir(), base[600], live[600], ref[600], cb[600], prefix[600];
    snprintf(base, sizeof base, "%s/base", dir);
    snprintf(live, sizeof live, "%s/live", dir);
    snprintf(ref, sizeof ref, "%s/ref-index", dir);
    snprintf(cb, sizeof cb, "%s/codebook", dir);
    model m = {0};
    batch b0;
    make_batch(&b0, 120, 1);
    for (uint64_t d = 0; d < b0.ndocs; d++)
        snprintf(b0.ids[d], sizeof b0.ids[d], "doc%llu", (unsigned long long)d);
    tt_input *in = batch_input(&b0, base, true);
    tt_build_options o;
    small_options(&o, 16, true);
    const bool vscale = _i == 4, adaptive = (_i & 1) || vscale;
    const int pool = 1 + (_i >> 1 & 1);
    o.codec_tables = adaptive ? TT_CODEC_ADAPTIVE : TT_CODEC_PER_DIM;
    if (vscale)
        o.debias = TT_DEBIAS_VECTOR;
    o.pool_factor = pool;
    ck_assert_int_eq(tt_build(live, in, &o, NULL), TT_OK);
    ck_assert_int_eq(tt_build(cb, in, &o, NULL), TT_OK); /* the same codebook, kept apart */
    if (adaptive) {
        tt_index *ci;
        ck_assert_int_eq(tt_index_open(&ci, cb, NULL), TT_OK);
        ck_assert_ptr_nonnull(ci->codec.perm);
        tt_index_close(ci);
    }
    tt_input_free(in);
    uint64_t v = 0;
    for (uint64_t d = 0; d < b0.ndocs; d++) {
        model_push(&m, b0.ids[d], (uint32_t)b0.lens[d], b0.v + v * DIM);
        v += (uint64_t)b0.lens[d];
    }
    m.next_auto = b0.ndocs;
    free_batch(&b0);

    const uint32_t nq = 6, nqv = 3;
    float *Q = malloc((size_t)nq * nqv * DIM * sizeof *Q);
    tu_clustered(Q, nq * nqv, DIM, 12, 0.2f, 1000, NULL);

    tt_rng r;
    tt_rng_seed(&r, 2026);
    tt_change_options co;
    tt_change_options_init(&co);
    co.threads = 2;
    co.memory_bytes = 128ull << 20;
    for (int step = 0; step < 14; step++) {
        uint64_t op = tt_rng_below(&r, 10);
        /* every kind of change at least once, whatever the draws */
        op = step == 2 ? 2 : step == 4 ? 3 : step == 6 ? 8 : step == 7 ? 5 : op;
        char when[64];
        tt_change_stats cs;
        if (op < 4) { /* add: new ids, auto ids, or an upsert of some existing ones */
            batch b;
            make_batch(&b, 5 + tt_rng_below(&r, 20), 100 + (uint64_t)step);
            bool auto_ids = op == 3, upsert = op == 2;
            for (uint64_t d = 0; d < b.ndocs; d++) {
                if (upsert && d % 3 == 0) { /* an existing live id */
                    size_t k;
                    do
                        k = (size_t)tt_rng_below(&r, m.n);
                    while (!m.d[k].live);
                    snprintf(b.ids[d], sizeof b.ids[d], "%s", m.d[k].id);
                    bool dup = false;
                    for (uint64_t e = 0; e < d; e++)
                        dup = dup || !strcmp(b.ids[e], b.ids[d]);
                    if (!dup)
                        continue;
                }
                snprintf(b.ids[d], sizeof b.ids[d], "s%d-%llu", step, (unsigned long long)d);
            }
            snprintf(prefix, sizeof prefix, "%s/add%d", dir, step);
            in = batch_input(&b, prefix, !auto_ids);
            co.upsert = upsert;
            ck_assert_msg(tt_index_add(live, in, &co, &cs) == TT_OK, "step %d: %s", step,
                          tt_last_error());
            co.upsert = 0;
            uint64_t vv = 0;
            for (uint64_t d = 0; d < b.ndocs; d++) {
                char id[32];
                if (auto_ids) { /* what the index must have chosen */
                    do
                        snprintf(id, sizeof id, "%llu", (unsigned long long)m.next_auto++);
                    while (model_ever(&m, id));
                } else {
                    snprintf(id, sizeof id, "%s", b.ids[d]);
                    mdoc *old = model_find_live(&m, id);
                    if (old)
                        old->live = false;
                }
                model_push(&m, id, (uint32_t)b.lens[d], b.v + vv * DIM);
                vv += (uint64_t)b.lens[d];
            }
            ck_assert_uint_eq(cs.added, b.ndocs);
            tt_input_free(in);
            free_batch(&b);
            snprintf(when, sizeof when, "step %d (add%s)", step,
                     upsert ? ", upsert" : auto_ids ? ", auto ids" : "");
        } else if (op < 8) { /* delete some live ids and an unknown one */
            const char *ids[12];
            size_t n = 0;
            for (int k = 0; k < 10; k++) {
                size_t i = (size_t)tt_rng_below(&r, m.n);
                if (m.d[i].live) {
                    ids[n++] = m.d[i].id;
                    m.d[i].live = false;
                }
            }
            ids[n++] = "no-such-id";
            ck_assert_int_eq(tt_index_delete(live, ids, n, &co, &cs), TT_OK);
            ck_assert_uint_eq(cs.unknown, 1);
            snprintf(when, sizeof when, "step %d (delete)", step);
        } else { /* compact */
            ck_assert_msg(tt_index_compact(live, &co, &cs) == TT_OK, "%s", tt_last_error());
            ck_assert_uint_eq(cs.segments, 1);
            snprintf(when, sizeof when, "step %d (compact)", step);
        }
        build_reference(&m, dir, ref, cb, pool);
        assert_same_results(live, ref, Q, nqv, nq, when);
        if (op >= 8)
            assert_same_files(live, ref, pool > 1, vscale);
        ck_assert_msg(tt_index_verify(live, NULL, NULL) == TT_OK, "%s: %s", when,
                      tt_last_error());
        assert_clean(live);
        /* ids of live documents are where they were, deleted ones gone */
        tt_index *idx;
        ck_assert_int_eq(tt_index_open(&idx, live, NULL), TT_OK);
        uint64_t live_docs = 0;
        for (size_t i = 0; i < m.n; i++)
            live_docs += m.d[i].live;
        ck_assert_uint_eq(idx->num_live, live_docs);
        ck_assert_uint_eq(idx->info.pool_factor, pool);
        ck_assert_int_eq(idx->info.debias, vscale ? TT_DEBIAS_VECTOR : TT_DEBIAS_TABLE);
        ck_assert(vscale == (idx->vscale != NULL));
        tt_index_close(idx);
    }
    free(Q);
    model_free(&m);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Adds to a pooled index pool with its factor unless told otherwise, each segment keeps
 * its documents' lengths before pooling (or none when not pooled), and compactions, with
 * and without retraining, keep the pooled vectors and the counts of the live documents. */
static uint64_t pooled_len(const batch *b, uint32_t factor, uint64_t *input) {
    uint64_t v = 0;
    *input = 0;
    for (uint64_t d = 0; d < b->ndocs; d++) {
        uint64_t k = (uint64_t)b->lens[d] / factor;
        v += k ? k : 1;
        *input += (uint64_t)b->lens[d];
    }
    return v;
}

static void assert_counts(const char *dir, uint32_t factor, uint64_t vectors, uint64_t input) {
    tt_index *x;
    ck_assert_int_eq(tt_index_open(&x, dir, NULL), TT_OK);
    tt_index_info info;
    tt_index_get_info(x, &info);
    ck_assert_uint_eq(info.pool_factor, factor);
    ck_assert_uint_eq(info.num_vectors, vectors);
    ck_assert_uint_eq(info.input_vectors, input);
    tt_index_close(x);
    ck_assert_msg(tt_index_verify(dir, NULL, NULL) == TT_OK, "%s", tt_last_error());
}

START_TEST(pooled_adds_and_compaction) {
    char *dir = tu_tmpdir(), idx[600], prefix[600];
    snprintf(idx, sizeof idx, "%s/idx", dir);
    batch b[4];
    uint64_t vec = 0, inp = 0, in_v;
    tt_build_options o;
    small_options(&o, 8, true);
    o.pool_factor = 2;
    tt_change_options co;
    tt_change_options_init(&co);
    co.memory_bytes = 128ull << 20;
    /* the build (factor 2), then adds with the index's factor, 1 (none) and 3 */
    const int factors[4] = {2, 0, 1, 3};
    for (int i = 0; i < 4; i++) {
        make_batch(&b[i], 30, 40 + (uint64_t)i);
        snprintf(prefix, sizeof prefix, "%s/b%d", dir, i);
        tt_input *in = batch_input(&b[i], prefix, false);
        tt_change_stats cs;
        co.pool_factor = factors[i];
        if (i == 0)
            ck_assert_int_eq(tt_build(idx, in, &o, NULL), TT_OK);
        else
            ck_assert_msg(tt_index_add(idx, in, &co, &cs) == TT_OK, "%s", tt_last_error());
        tt_input_free(in);
        vec += pooled_len(&b[i], factors[i] ? (uint32_t)factors[i] : 2, &in_v);
        inp += in_v;
        assert_counts(idx, 2, vec, inp);
    }
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(idx, &m), TT_OK);
    ck_assert_ptr_nonnull(tt_manifest_find(&m, TT_F_INLENS));
    ck_assert_ptr_nonnull(tt_manifest_find(&m, "g000002.inlens.tt"));
    ck_assert_ptr_null(tt_manifest_find(&m, "g000003.inlens.tt")); /* factor 1: not pooled */
    ck_assert_ptr_nonnull(tt_manifest_find(&m, "g000004.inlens.tt"));
    tt_manifest_free(&m);
    /* the first document of each segment deleted (row numbers are their ids) */
    const char *del[] = {"0", "30", "60", "90"};
    tt_change_stats cs;
    co.pool_factor = 0;
    ck_assert_int_eq(tt_index_delete(idx, del, 4, &co, &cs), TT_OK);
    ck_assert_uint_eq(cs.deleted, 4);
    assert_counts(idx, 2, vec, inp); /* deleted rows still count until compacted */
    const uint32_t f_used[4] = {2, 2, 1, 3};
    for (int i = 0; i < 4; i++) {
        uint64_t k = (uint64_t)b[i].lens[0] / f_used[i];
        vec -= k ? k : 1;
        inp -= (uint64_t)b[i].lens[0];
    }
    ck_assert_int_eq(tt_index_compact(idx, &co, &cs), TT_OK);
    assert_counts(idx, 2, vec, inp);
    co.retrain = 1; /* re-encodes the pooled vectors: pools nothing again */
    ck_assert_int_eq(tt_index_compact(idx, &co, &cs), TT_OK);
    assert_counts(idx, 2, vec, inp);
    co.retrain = 0;
    /* and the index's factor still applies to the next add */
    snprintf(prefix, sizeof prefix, "%s/b4", dir);
    batch extra;
    make_batch(&extra, 10, 50);
    tt_input *in = batch_input(&extra, prefix, false);
    ck_assert_int_eq(tt_index_add(idx, in, &co, &cs), TT_OK);
    tt_input_free(in);
    vec += pooled_len(&extra, 2, &in_v);
    inp += in_v;
    assert_counts(idx, 2, vec, inp);
    /* a negative factor is refused */
    co.pool_factor = -1;
    ck_assert_int_eq(tt_index_compact(idx, &co, &cs), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "pool factor"));
    free_batch(&extra);
    for (int i = 0; i < 4; i++)
        free_batch(&b[i]);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* An index dir/idx of a batch of ndocs documents with ids d0, d1, ... (made from the
 * arrays at prefix = dir/base); returns the batch's input. */
static tt_input *build_with_ids(const char *dir, char *idx, char *prefix, batch *b,
                                uint64_t ndocs, int seed) {
    snprintf(idx, 600, "%s/idx", dir);
    make_batch(b, ndocs, seed);
    for (uint64_t d = 0; d < b->ndocs; d++)
        snprintf(b->ids[d], sizeof b->ids[d], "d%llu", (unsigned long long)d);
    snprintf(prefix, 600, "%s/base", dir);
    tt_input *in = batch_input(b, prefix, true);
    tt_build_options o;
    small_options(&o, 8, false);
    ck_assert_int_eq(tt_build(idx, in, &o, NULL), TT_OK);
    return in;
}

/* Changes that fail leave the index as it was: same generation, verifies, no file left. */
START_TEST(failed_changes_leave_nothing) {
    char *dir = tu_tmpdir(), idx[600], prefix[600];
    batch b;
    tt_input *in = build_with_ids(dir, idx, prefix, &b, 40, 3);
    tt_manifest before;
    ck_assert_int_eq(tt_manifest_read(idx, &before), TT_OK);

    /* an id already there, without upsert */
    tt_change_stats cs;
    ck_assert_int_eq(tt_index_add(idx, in, NULL, &cs), TT_EEXIST);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "'d0'"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "upsert"));
    tt_input_free(in);
    /* another dimension */
    float *w = calloc(4 * 8, sizeof *w);
    for (int i = 0; i < 4; i++)
        w[i * 8 + i] = 1;
    int64_t lens[2] = {2, 2};
    char v[700], l[700];
    snprintf(v, sizeof v, "%s/w.vectors.npy", dir);
    snprintf(l, sizeof l, "%s/w.doclens.npy", dir);
    ck_assert_int_eq(tu_write_npy(v, TT_DT_F32, 8, w, 4), TT_OK);
    ck_assert_int_eq(tu_write_npy(l, TT_DT_I64, 0, lens, 2), TT_OK);
    const char *vp[] = {v}, *lp[] = {l};
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, NULL, NULL), TT_OK);
    ck_assert_int_eq(tt_index_add(idx, in, NULL, &cs), TT_EDIM);
    tt_input_free(in);
    free(w);
    /* a NaN vector, found in the middle of the encode pass */
    b.v[(b.nvecs - 3) * DIM + 1] = NAN;
    for (uint64_t d = 0; d < b.ndocs; d++)
        snprintf(b.ids[d], sizeof b.ids[d], "n%llu", (unsigned long long)d);
    snprintf(prefix, sizeof prefix, "%s/nan", dir);
    in = batch_input(&b, prefix, true);
    ck_assert_int_eq(tt_index_add(idx, in, NULL, &cs), TT_EVALUE);
    tt_input_free(in);
    /* strict delete of an unknown id; an empty delete changes nothing */
    const char *ids[] = {"d1", "nope"};
    tt_change_options co;
    tt_change_options_init(&co);
    co.strict = 1;
    ck_assert_int_eq(tt_index_delete(idx, ids, 2, &co, &cs), TT_ENOTFOUND);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "nope"));
    ck_assert_int_eq(tt_index_delete(idx, ids + 1, 1, NULL, &cs), TT_OK);
    ck_assert_uint_eq(cs.unknown, 1);
    ck_assert_uint_eq(cs.generation, 1);
    /* options of another version */
    co.struct_size = 3;
    ck_assert_int_eq(tt_index_compact(idx, &co, &cs), TT_EINVAL);
    /* nothing changed */
    tt_manifest after;
    ck_assert_int_eq(tt_manifest_read(idx, &after), TT_OK);
    ck_assert_uint_eq(after.generation, before.generation);
    ck_assert_uint_eq(after.n, before.n);
    ck_assert_int_eq(tt_index_verify(idx, NULL, NULL), TT_OK);
    assert_clean(idx);
    tt_manifest_free(&before);
    tt_manifest_free(&after);
    /* a missing index */
    snprintf(prefix, sizeof prefix, "%s/none", dir);
    ck_assert_int_eq(tt_index_compact(prefix, NULL, &cs), TT_ENOTFOUND);
    /* an index that lost a file: no change builds on it */
    char lost[700];
    snprintf(lost, sizeof lost, "%s/ivf.tt", idx);
    ck_assert_int_eq(unlink(lost), 0);
    ck_assert_int_eq(tt_index_delete(idx, ids, 1, NULL, &cs), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "ivf.tt: named by the manifest but missing"));
    free_batch(&b);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* An open that fails on a segment before the last closes only the descriptors it opened:
 * the later segments' were calloc's 0 and tt_index_close closed descriptor 0 (standard
 * input, or whatever another thread held as 0 by then: Check's message file in one flaky
 * run of the TSan stage). Descriptor 0 is a file of the test's here; it must survive. */
START_TEST(failed_open_closes_only_its_own) {
    char *dir = tu_tmpdir(), idx[600], prefix[600];
    batch b;
    tt_input *in = build_with_ids(dir, idx, prefix, &b, 30, 5);
    tt_input_free(in);
    tt_change_options co;
    tt_change_options_init(&co);
    co.upsert = 1; /* the same ids again: two more segments */
    for (int i = 0; i < 2; i++) {
        in = batch_input(&b, prefix, true);
        ck_assert_int_eq(tt_index_add(idx, in, &co, NULL), TT_OK);
        tt_input_free(in);
    }
    char lost[700];
    snprintf(lost, sizeof lost, "%s/codes.tt", idx); /* the first segment's */
    ck_assert_int_eq(unlink(lost), 0);
    int saved = dup(0);
    ck_assert_int_ge(saved, 0);
    close(0);
    ck_assert_int_eq(open("/dev/null", O_RDONLY), 0);
    tt_index *x = NULL;
    for (int i = 0; i < 3; i++) { /* a stray close would free 0 for the next open's file */
        ck_assert_int_ne(tt_index_open(&x, idx, NULL), TT_OK);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "codes.tt"));
        ck_assert_msg(fcntl(0, F_GETFD) != -1, "descriptor 0 closed by a failed open");
    }
    ck_assert_int_eq(dup2(saved, 0), 0);
    close(saved);
    free_batch(&b);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* A retrain from decompressed vectors keeps the build's held-out error as the drift
 * baseline (its own, on vectors already quantized once, would be far too low). */
START_TEST(retrain_without_originals_keeps_baseline) {
    char *dir = tu_tmpdir(), idx[600], prefix[600];
    snprintf(idx, sizeof idx, "%s/idx", dir);
    batch b;
    make_batch(&b, 60, 3);
    snprintf(prefix, sizeof prefix, "%s/base", dir);
    tt_input *in = batch_input(&b, prefix, false);
    tt_build_options o;
    small_options(&o, 8, false);
    tt_build_stats bs;
    ck_assert_int_eq(tt_build(idx, in, &o, &bs), TT_OK);
    tt_input_free(in);
    tt_change_options co;
    tt_change_options_init(&co);
    co.retrain = 1;
    tt_change_stats cs;
    ck_assert_int_eq(tt_index_compact(idx, &co, &cs), TT_OK);
    tt_index *ix;
    ck_assert_int_eq(tt_index_open(&ix, idx, NULL), TT_OK);
    tt_index_info info;
    tt_index_get_info(ix, &info);
    ck_assert_double_eq_tol(info.heldout_mse, bs.heldout_mse, 1e-8 * bs.heldout_mse);
    tt_index_close(ix);
    free_batch(&b);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* One writer: a second one meets the lock and is told who holds it. */
START_TEST(one_writer_at_a_time) {
    char *dir = tu_tmpdir(), idx[600], prefix[600];
    snprintf(idx, sizeof idx, "%s/idx", dir);
    batch b;
    make_batch(&b, 30, 4);
    snprintf(prefix, sizeof prefix, "%s/base", dir);
    tt_input *in = batch_input(&b, prefix, false);
    tt_build_options o;
    small_options(&o, 8, false);
    ck_assert_int_eq(tt_build(idx, in, &o, NULL), TT_OK);
    int dfd = open(idx, O_RDONLY | O_DIRECTORY);
    tt_lock lk;
    ck_assert_int_eq(tt_lock_acquire(&lk, dfd, TT_F_LOCK, idx, "modified"), TT_OK);
    tt_change_stats cs;
    char want[64];
    snprintf(want, sizeof want, "being modified by pid %ld", (long)getpid());
    ck_assert_int_eq(tt_index_add(idx, in, NULL, &cs), TT_EBUSY);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), want));
    ck_assert_int_eq(tt_index_compact(idx, NULL, &cs), TT_EBUSY);
    /* a --force build over it waits for no one either */
    o.force = 1;
    ck_assert_int_eq(tt_build(idx, in, &o, NULL), TT_EBUSY);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), want));
    tt_lock_release(&lk);
    close(dfd);
    ck_assert_int_eq(tt_index_add(idx, in, NULL, &cs), TT_OK); /* auto ids: no clash */
    ck_assert_uint_eq(cs.generation, 2);
    ck_assert_int_eq(tt_build(idx, in, &o, NULL), TT_OK); /* replaces it, lock and all */
    assert_clean(idx);
    tt_input_free(in);
    free_batch(&b);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* A format-1 index (made by tartan 0.1.0) opens, searches as it did, and converts on
 * its first change without renaming its files. */
START_TEST(format1_index) {
    char *dir = tu_tmpdir(), idx[600], cmd[1400], prefix[600];
    const char *src = getenv("TT_SRCDIR");
    snprintf(idx, sizeof idx, "%s/v1", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s/tests/files/index_v1' '%s'", src ? src : ".", idx);
    ck_assert_int_eq(system(cmd), 0);
    tt_index *x;
    ck_assert_int_eq(tt_index_open(&x, idx, NULL), TT_OK);
    tt_index_info info;
    tt_index_get_info(x, &info);
    ck_assert_uint_eq(info.format_version, 1);
    ck_assert_uint_eq(info.num_segments, 1);
    ck_assert_uint_eq(info.pool_factor, 1); /* before pooling existed: not pooled */
    ck_assert_uint_eq(info.input_vectors, info.num_vectors);
    ck_assert_uint_eq(info.num_docs, 60);
    /* the run tartan 0.1.0 wrote, query by query */
    char qp[700];
    snprintf(qp, sizeof qp, "%s/tests/files/index_v1_queries.npy", src ? src : ".");
    tt_queries *qs;
    ck_assert_int_eq(tt_queries_load(&qs, qp, NULL, NULL), TT_OK);
    snprintf(qp, sizeof qp, "%s/tests/files/index_v1_exhaustive.run", src ? src : ".");
    FILE *f = fopen(qp, "r");
    ck_assert_ptr_nonnull(f);
    tt_search_ctx *c;
    ck_assert_int_eq(tt_search_ctx_new(x, &c), TT_OK);
    tt_search_options so;
    tt_search_options_init(&so);
    so.mode = TT_MODE_EXHAUSTIVE;
    for (uint64_t q = 0; q < qs->num_queries; q++) {
        tt_hit h[5];
        uint32_t n;
        ck_assert_int_eq(tt_search(x, c, qs->vectors + qs->offsets[q] * qs->dim, qs->lens[q], 5,
                                   &so, h, &n), TT_OK);
        for (uint32_t i = 0; i < n; i++) {
            char qid[32], did[64];
            unsigned rank;
            double score;
            ck_assert_int_eq(fscanf(f, "%31s Q0 %63s %u %lf %*s", qid, did, &rank, &score), 4);
            size_t len;
            const char *id = tt_index_doc_id(x, h[i].doc, &len);
            ck_assert(len == strlen(did) && !memcmp(id, did, len));
            ck_assert_double_eq_tol(h[i].score, score, 1e-6);
        }
    }
    fclose(f);
    tt_search_ctx_free(c);
    tt_queries_free(qs);
    tt_index_close(x);
    /* the first change writes a version-2 manifest naming the old files */
    batch b;
    make_batch(&b, 10, 5);
    snprintf(prefix, sizeof prefix, "%s/add", dir);
    tt_input *in = batch_input(&b, prefix, false);
    tt_change_stats cs;
    ck_assert_msg(tt_index_add(idx, in, NULL, &cs) == TT_OK, "%s", tt_last_error());
    ck_assert_uint_eq(cs.live_docs, 70);
    const char *del[] = {"doc3", "60"};
    ck_assert_int_eq(tt_index_delete(idx, del, 2, NULL, &cs), TT_OK);
    ck_assert_uint_eq(cs.deleted, 2);
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(idx, &m), TT_OK);
    ck_assert_uint_eq(m.version, 2);
    ck_assert_ptr_nonnull(tt_manifest_find(&m, "residuals.tt"));
    tt_manifest_free(&m);
    ck_assert_int_eq(tt_index_verify(idx, NULL, NULL), TT_OK);
    ck_assert_int_eq(tt_index_compact(idx, NULL, &cs), TT_OK);
    ck_assert_uint_eq(cs.live_docs, 68);
    ck_assert_int_eq(tt_index_verify(idx, NULL, NULL), TT_OK);
    assert_clean(idx);
    tt_input_free(in);
    free_batch(&b);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, random_changes_match_model, 0, 5);
    tcase_add_test(tc, retrain_without_originals_keeps_baseline);
    tcase_add_test(tc, pooled_adds_and_compaction);
    tcase_add_test(tc, failed_changes_leave_nothing);
    tcase_add_test(tc, failed_open_closes_only_its_own);
    tcase_add_test(tc, one_writer_at_a_time);
    tcase_add_test(tc, format1_index);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

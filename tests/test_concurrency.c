/* Concurrency: many threads searching one open index (each with its own context, in
 * every mode and I/O path, in different query orders) and tt_search_batch on many
 * threads return exactly -- bit for bit -- the hits of one thread searching serially;
 * threads that open, search and close the same index at once do too. CI also runs
 * this program under ThreadSanitizer (tools/run-tests.sh, stage tsan). Several
 * processes on the same files: tests/concurrency.sh. */
#include "testutil.h"

#include "input/input.h"

#include "index/index.h"

#include <pthread.h>
#include <stdatomic.h>

enum { DIM = 32, NDOCS = 600, NQ = 20, QLEN = 4, K = 10, NTHREADS = 4, ROUNDS = 1 };
#define NMODES 3
#define NIO 2

static char *dir, *index_dir;
static float *queries;                      /* NQ * QLEN * DIM */
static tt_hit ref[NIO][NMODES][NQ][K];      /* serial results */
static uint32_t ref_n[NIO][NMODES][NQ];
static const int ios[NIO] = {TT_IO_MMAP, TT_IO_URING};

static void opts_for(int mode, tt_search_options *so) {
    tt_search_options_init(so);
    so->mode = mode;
    if (mode == TT_MODE_PLAID) { /* small ndocs: pruning stages really select */
        so->nprobe = 2;
        so->ndocs = 64;
    }
}

/* Builds one index (ids, float16 originals) from clustered vectors and the queries
 * (noisy copies of document vectors), then the serial reference of every mode. */
static void setup(void) {
    tt_blas_set_threads(1); /* search threads only: an uninstrumented BLAS pool confuses TSan */
    dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    char vp[512], lp[512], ip[512];
    snprintf(vp, sizeof vp, "%s/v.npy", dir);
    snprintf(lp, sizeof lp, "%s/l.npy", dir);
    snprintf(ip, sizeof ip, "%s/ids.txt", dir);
    index_dir = malloc(strlen(dir) + 8);
    sprintf(index_dir, "%s/idx", dir);
    tt_rng r;
    tt_rng_seed(&r, 11);
    int64_t lens[NDOCS];
    uint64_t nv = 0;
    for (int d = 0; d < NDOCS; d++)
        nv += (uint64_t)(lens[d] = 4 + (int64_t)tt_rng_below(&r, 9));
    float *x = malloc(nv * DIM * sizeof *x);
    tu_clustered(x, nv, DIM, 24, 0.3f, 5, NULL);
    ck_assert_int_eq(tu_write_npy(vp, TT_DT_F32, DIM, x, nv), TT_OK);
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, lens, NDOCS), TT_OK);
    FILE *f = fopen(ip, "w");
    for (int d = 0; d < NDOCS; d++)
        fprintf(f, "d%d\n", d);
    fclose(f);
    const char *vpp = vp, *lpp = lp;
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, &vpp, &lpp, ip, NULL), TT_OK);
    tt_build_options o;
    tt_build_options_init(&o);
    o.num_centroids = 64;
    o.threads = 2;
    o.keep_originals = TT_KEEP_F16;
    ck_assert_msg(tt_build(index_dir, in, &o, NULL) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);

    queries = malloc((size_t)NQ * QLEN * DIM * sizeof *queries);
    for (int q = 0; q < NQ; q++) {
        uint64_t v0 = tt_rng_below(&r, nv - QLEN);
        for (int i = 0; i < QLEN * DIM; i++)
            queries[(size_t)q * QLEN * DIM + i] =
                x[v0 * DIM + i] + 0.05f * (float)(tt_rng_uniform(&r) - 0.5);
    }
    free(x);

    for (int io = 0; io < NIO; io++) {
        tt_open_options oo;
        tt_open_options_init(&oo);
        oo.io = ios[io];
        tt_index *idx;
        ck_assert_msg(tt_index_open(&idx, index_dir, &oo) == TT_OK, "%s", tt_last_error());
        tt_search_ctx *ctx;
        ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
        for (int m = 0; m < NMODES; m++) {
            tt_search_options so;
            opts_for(m, &so);
            for (int q = 0; q < NQ; q++) {
                ck_assert_msg(tt_search(idx, ctx, queries + (size_t)q * QLEN * DIM, QLEN, K, &so,
                                        ref[io][m][q], &ref_n[io][m][q]) == TT_OK,
                              "%s", tt_last_error());
                ck_assert_uint_eq(ref_n[io][m][q], K);
            }
        }
        tt_search_ctx_free(ctx);
        tt_index_close(idx);
    }
}

static void teardown(void) {
    tu_rmrf(dir);
    free(dir);
    free(index_dir);
    free(queries);
}

/* Exact equality: same documents, same float bits, same order. */
static int same_hits(const tt_hit *a, uint32_t na, const tt_hit *b, uint32_t nb) {
    if (na != nb)
        return 0;
    for (uint32_t i = 0; i < na; i++)
        if (a[i].doc != b[i].doc || memcmp(&a[i].score, &b[i].score, sizeof a[i].score))
            return 0;
    return 1;
}

typedef struct worker {
    const tt_index *idx;  /* shared index, or NULL: open our own */
    int io, t;
    int mismatches, errors;
    char msg[256];
} worker;

/* Every mode, every query, ROUNDS times, starting at a different query per thread. */
static void search_all(worker *w, const tt_index *idx, tt_search_ctx *ctx) {
    for (int round = 0; round < ROUNDS; round++)
        for (int m = 0; m < NMODES; m++) {
            tt_search_options so;
            opts_for((m + w->t) % NMODES, &so);
            int mode = so.mode;
            for (int j = 0; j < NQ; j++) {
                int q = (j * 7 + w->t * 5 + round) % NQ;
                tt_hit h[K];
                uint32_t n;
                if (tt_search(idx, ctx, queries + (size_t)q * QLEN * DIM, QLEN, K, &so, h, &n)) {
                    if (!w->errors++)
                        snprintf(w->msg, sizeof w->msg, "%s", tt_last_error());
                } else if (!same_hits(h, n, ref[w->io][mode][q], ref_n[w->io][mode][q])) {
                    w->mismatches++;
                }
            }
        }
}

static void *worker_main(void *p) {
    worker *w = p;
    tt_index *own = NULL;
    const tt_index *idx = w->idx;
    if (!idx) {
        tt_open_options oo;
        tt_open_options_init(&oo);
        oo.io = ios[w->io];
        if (tt_index_open(&own, index_dir, &oo)) {
            w->errors++;
            snprintf(w->msg, sizeof w->msg, "open: %s", tt_last_error());
            return NULL;
        }
        idx = own;
    }
    tt_search_ctx *ctx;
    if (tt_search_ctx_new(idx, &ctx)) {
        w->errors++;
        snprintf(w->msg, sizeof w->msg, "ctx: %s", tt_last_error());
    } else {
        search_all(w, idx, ctx);
        tt_search_ctx_free(ctx);
    }
    tt_index_close(own);
    return NULL;
}

static void run_threads(int io, const tt_index *shared) {
    pthread_t th[NTHREADS];
    worker w[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].idx = shared;
        w[t].io = io;
        w[t].t = t;
        ck_assert_int_eq(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < NTHREADS; t++) {
        ck_assert_msg(w[t].errors == 0, "thread %d: %d errors: %s", t, w[t].errors, w[t].msg);
        ck_assert_msg(w[t].mismatches == 0, "thread %d: %d searches differ from the serial ones",
                      t, w[t].mismatches);
    }
}

START_TEST(test_threads_share_index) {
    /* _i: the I/O path (mmap, io_uring: each context then has its own ring) */
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = ios[_i];
    tt_index *idx;
    ck_assert_msg(tt_index_open(&idx, index_dir, &oo) == TT_OK, "%s", tt_last_error());
    run_threads(_i, idx);
    tt_index_close(idx);
}
END_TEST

START_TEST(test_threads_open_their_own) {
#ifdef __SANITIZE_THREAD__
    /* Under ThreadSanitizer with mmap only: a thread's io_uring ring (mapped by liburing's
     * own system calls, which TSan does not see) can land where another thread has just
     * unmapped its index's files, and TSan reports a race that is none (snap_opener). The
     * io_uring path is run here by the plain and ASan builds. */
    if (ios[_i] == TT_IO_URING)
        return;
#endif
    run_threads(_i, NULL);
}
END_TEST

START_TEST(test_batch_equals_serial) {
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = ios[_i];
    tt_index *idx;
    ck_assert_msg(tt_index_open(&idx, index_dir, &oo) == TT_OK, "%s", tt_last_error());
    uint64_t offs[NQ];
    uint32_t lens[NQ], nh[NQ];
    for (int q = 0; q < NQ; q++) {
        offs[q] = (uint64_t)q * QLEN;
        lens[q] = QLEN;
    }
    tt_hit *hits = malloc((size_t)NQ * K * sizeof *hits);
    double secs[NQ];
    for (int m = 0; m < NMODES; m++) {
        tt_search_options so;
        opts_for(m, &so);
        for (int threads = 1; threads <= 5; threads += 2) {
            ck_assert_msg(tt_search_batch(idx, queries, offs, lens, NQ, K, &so, threads, hits, nh,
                                          secs) == TT_OK, "%s", tt_last_error());
            for (int q = 0; q < NQ; q++) {
                ck_assert_msg(same_hits(hits + (size_t)q * K, nh[q], ref[_i][m][q],
                                        ref_n[_i][m][q]),
                              "mode %d, %d threads: query %d differs from serial", m, threads, q);
                ck_assert(secs[q] >= 0);
            }
        }
    }
    free(hits);
    tt_index_close(idx);
}
END_TEST

/* Snapshots: threads searching an index opened before a writer thread adds, deletes and
 * compacts get the results of the generation they opened, bit for bit, all along; a
 * thread opening the index over and over meanwhile always opens some generation whole
 * (an open that meets files removed by a publish starts again). */
typedef struct snap {
    const tt_index *idx;
    tt_search_ctx *ctx;        /* made before the writer starts (see snap_opener) */
    int io;
    tt_hit (*want)[NQ][K];     /* [mode][query]: the snapshot's results */
    uint32_t (*nwant)[NQ];
    atomic_int *stop;
    int mismatches, errors, rounds;
    char msg[256];
} snap;

static void *snap_reader(void *p) {
    snap *w = p;
    tt_search_ctx *ctx = w->ctx;
    while (!atomic_load(w->stop) || w->rounds < 2) {
        for (int m = 0; m < NMODES; m++)
            for (int q = 0; q < NQ; q++) {
                tt_search_options so;
                opts_for(m, &so);
                tt_hit h[K];
                uint32_t n;
                if (tt_search(w->idx, ctx, queries + (size_t)q * QLEN * DIM, QLEN, K, &so, h, &n)) {
                    w->errors++;
                    snprintf(w->msg, sizeof w->msg, "%s", tt_last_error());
                } else if (!same_hits(h, n, w->want[m][q], w->nwant[m][q])) {
                    w->mismatches++;
                }
            }
        w->rounds++;
    }
    return NULL;
}

/* Opens with mmap: an io_uring ring is mapped by liburing's own system calls, which
 * ThreadSanitizer does not see, so a ring landing where the writer thread just unmapped
 * a file would be reported as a race that is none. */
static void *snap_opener(void *p) {
    snap *w = p;
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = TT_IO_MMAP;
    while (!atomic_load(w->stop) || w->rounds < 2) {
        tt_index *idx;
        if (tt_index_open(&idx, index_dir, &oo)) {
            w->errors++;
            snprintf(w->msg, sizeof w->msg, "%s", tt_last_error());
            break;
        }
        tt_hit h[K];
        uint32_t n;
        tt_search_ctx *ctx;
        if (tt_search_ctx_new(idx, &ctx) || tt_search(idx, ctx, queries, QLEN, K, NULL, h, &n) ||
            n != K)
            w->errors++;
        tt_search_ctx_free(ctx);
        tt_index_close(idx);
        w->rounds++;
    }
    return NULL;
}

START_TEST(test_snapshot_while_writing) {
    const int io = _i;
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = ios[io];
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, index_dir, &oo), TT_OK);
    /* What this snapshot answers (each loop run starts from the index the last left). */
    static tt_hit want[NMODES][NQ][K];
    static uint32_t nwant[NMODES][NQ];
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    for (int m = 0; m < NMODES; m++)
        for (int q = 0; q < NQ; q++) {
            tt_search_options so;
            opts_for(m, &so);
            ck_assert_int_eq(tt_search(idx, ctx, queries + (size_t)q * QLEN * DIM, QLEN, K, &so,
                                       want[m][q], &nwant[m][q]), TT_OK);
        }
    tt_search_ctx_free(ctx);
    uint64_t live0 = idx->num_live;
    atomic_int stop;
    atomic_init(&stop, 0);
    snap readers[2], opener = {.io = io, .stop = &stop};
    pthread_t tid[3];
    for (int t = 0; t < 2; t++) {
        readers[t] = (snap){.idx = idx, .io = io, .stop = &stop, .want = want, .nwant = nwant};
        ck_assert_int_eq(tt_search_ctx_new(idx, &readers[t].ctx), TT_OK);
        ck_assert_int_eq(pthread_create(&tid[t], NULL, snap_reader, &readers[t]), 0);
    }
    ck_assert_int_eq(pthread_create(&tid[2], NULL, snap_opener, &opener), 0);

    /* The writer: 40 new documents (copies of queries, so they rank), a delete, a
     * compaction. */
    char vp[600], lp[600];
    snprintf(vp, sizeof vp, "%s/add%d.npy", dir, io);
    snprintf(lp, sizeof lp, "%s/addl%d.npy", dir, io);
    int64_t lens[NQ];
    for (int q = 0; q < NQ; q++)
        lens[q] = QLEN;
    ck_assert_int_eq(tu_write_npy(vp, TT_DT_F32, DIM, queries, (uint64_t)NQ * QLEN), TT_OK);
    ck_assert_int_eq(tu_write_npy(lp, TT_DT_I64, 0, lens, NQ), TT_OK);
    const char *vpp = vp, *lpp = lp;
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, &vpp, &lpp, NULL, NULL), TT_OK);
    tt_change_options co;
    tt_change_options_init(&co);
    co.threads = 1;
    co.memory_bytes = 128ull << 20;
    tt_change_stats cs;
    ck_assert_msg(tt_index_add(index_dir, in, &co, &cs) == TT_OK, "%s", tt_last_error());
    ck_assert_msg(tt_index_add(index_dir, in, &co, &cs) == TT_OK, "%s", tt_last_error());
    const char *del[] = {"d1", "d2", "d3"};
    ck_assert_int_eq(tt_index_delete(index_dir, del, 3, &co, &cs), TT_OK);
    ck_assert_msg(tt_index_compact(index_dir, &co, &cs) == TT_OK, "%s", tt_last_error());
    tt_input_free(in);
    atomic_store(&stop, 1);
    for (int t = 0; t < 3; t++)
        pthread_join(tid[t], NULL);
    for (int t = 0; t < 2; t++) {
        ck_assert_msg(readers[t].errors == 0, "reader %d: %s", t, readers[t].msg);
        ck_assert_msg(readers[t].mismatches == 0, "reader %d: %d results not of its snapshot", t,
                      readers[t].mismatches);
        tt_search_ctx_free(readers[t].ctx);
    }
    ck_assert_msg(opener.errors == 0, "opener: %s", opener.msg);
    tt_index_close(idx);
    /* Reopened: the new generation. */
    ck_assert_int_eq(tt_index_open(&idx, index_dir, &oo), TT_OK);
    ck_assert_uint_eq(idx->num_live, live0 + 2 * NQ - (io == 0 ? 3 : 0)); /* d1-d3 once */
    ck_assert_uint_eq(idx->nseg, 1);
    tt_index_close(idx);
}
END_TEST

/* The two I/O paths read the same bytes: their results agree too. */
START_TEST(test_io_paths_agree) {
    for (int m = 0; m < NMODES; m++)
        for (int q = 0; q < NQ; q++)
            ck_assert_msg(same_hits(ref[0][m][q], ref_n[0][m][q], ref[1][m][q], ref_n[1][m][q]),
                          "mode %d query %d: mmap and io_uring differ", m, q);
}
END_TEST

int main(void) {
    Suite *s = suite_create("concurrency");
    TCase *tc = tcase_create("threads");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_io_paths_agree);
    tcase_add_loop_test(tc, test_threads_share_index, 0, NIO);
    tcase_add_loop_test(tc, test_threads_open_their_own, 0, NIO);
    tcase_add_loop_test(tc, test_batch_equals_serial, 0, NIO);
    suite_add_tcase(s, tc);
    /* Last, with a fixture of its own: it changes the index. */
    TCase *tw = tcase_create("snapshots");
    tcase_add_unchecked_fixture(tw, setup, teardown);
    tcase_set_timeout(tw, 300);
    tcase_add_loop_test(tw, test_snapshot_while_writing, 0, NIO);
    suite_add_tcase(s, tw);
    return tu_run(s);
}

/* k-means training and nearest-centroid assignment (src/kmeans.c). */
#include "testutil.h"

#include "quant/kmeans.h"

#include <pthread.h>

/* Squared L2 distance in double. */
static double dist2(const float *a, const float *b, uint32_t dim) {
    double s = 0;
    for (uint32_t d = 0; d < dim; d++) {
        double t = (double)a[d] - b[d];
        s += t * t;
    }
    return s;
}

/* x.c - |c|^2/2 in double: the score the assigners maximise. */
static double score(const float *x, const float *c, uint32_t dim) {
    double dot = 0, nn = 0;
    for (uint32_t d = 0; d < dim; d++) {
        dot += x ? (double)x[d] * c[d] : 0; /* x = NULL: -|c|^2/2 */
        nn += (double)c[d] * c[d];
    }
    return dot - 0.5 * nn;
}

/* The reference: argmax of the score in double, first index on ties. */
static void naive_assign(const float *x, uint64_t n, const float *c, uint32_t k, uint32_t dim,
                         uint32_t *ids) {
    for (uint64_t i = 0; i < n; i++) {
        double best = -INFINITY;
        for (uint32_t j = 0; j < k; j++) {
            double s = score(x + i * dim, c + (size_t)j * dim, dim);
            if (s > best) {
                best = s;
                ids[i] = j;
            }
        }
    }
}

static uint32_t *assign_with(const float *c, uint32_t k, uint32_t dim, int method, const float *x,
                             uint64_t n, int threads) {
    tt_assigner *a = NULL;
    ck_assert_int_eq(tt_assigner_new(c, k, dim, method, 7, threads, &a), TT_OK);
    uint32_t *ids = malloc(n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(tt_assign(a, x, n, ids, threads), TT_OK);
    tt_assigner_free(a);
    return ids;
}

/* Checks that the k = nclusters centroids recover the planted clusters: each true
 * cluster sends > 99% of its vectors to one centroid, no two clusters share that
 * centroid, and purity (vectors in their centroid's majority cluster) > 0.99. */
static void check_recovered(const float *x, uint64_t n, const uint32_t *labels, uint32_t nc,
                            const float *c, uint32_t dim) {
    uint32_t *ids = assign_with(c, nc, dim, TT_ASSIGN_EXACT, x, n, 1);
    uint64_t *conf = calloc((size_t)nc * nc, sizeof *conf); /* [true][centroid] */
    uint64_t *size = calloc(nc, sizeof *size);
    uint32_t *major = calloc(nc, sizeof *major);
    ck_assert(conf && size && major);
    for (uint64_t i = 0; i < n; i++) {
        conf[(size_t)labels[i] * nc + ids[i]]++;
        size[labels[i]]++;
    }
    for (uint32_t t = 0; t < nc; t++) {
        uint64_t best = 0;
        for (uint32_t j = 0; j < nc; j++)
            if (conf[(size_t)t * nc + j] > best) {
                best = conf[(size_t)t * nc + j];
                major[t] = j;
            }
        ck_assert_msg(best > 0.99 * (double)size[t], "cluster %u split: %llu of %llu", t,
                      (unsigned long long)best, (unsigned long long)size[t]);
        for (uint32_t u = 0; u < t; u++)
            ck_assert_msg(major[u] != major[t], "clusters %u and %u share centroid %u", u, t,
                          major[t]);
    }
    uint64_t pure = 0;
    for (uint32_t j = 0; j < nc; j++) {
        uint64_t best = 0;
        for (uint32_t t = 0; t < nc; t++)
            best = TT_MAX(best, conf[(size_t)t * nc + j]);
        pure += best;
    }
    ck_assert_msg((double)pure / (double)n > 0.99, "purity %.4f", (double)pure / (double)n);
    free(ids);
    free(conf);
    free(size);
    free(major);
}

START_TEST(planted_clusters) {
    const uint32_t nc = 16, dim = 64;
    const uint64_t n = 4096;
    float *x = malloc(n * dim * sizeof *x), *c = malloc((size_t)nc * dim * sizeof *c);
    uint32_t *labels = malloc(n * sizeof *labels);
    ck_assert(x && c && labels);
    for (uint64_t seed = 1; seed <= 3; seed++) {
        tu_clustered(x, n, dim, nc, 0.02f, 100 + seed, labels);
        for (int sph = 0; sph <= 1; sph++) {
            tt_kmeans_params p = {.k = nc, .dim = dim, .iters = 10, .seed = seed, .threads = 2,
                                  .spherical = sph};
            ck_assert_int_eq(tt_kmeans_train(x, n, &p, c), TT_OK);
            if (sph) /* spherical centroids are unit length */
                for (uint32_t j = 0; j < nc; j++)
                    ck_assert_double_eq_tol(sqrt(-2 * score(NULL, c + j * dim, dim)), 1.0,
                                            1e-5);
            check_recovered(x, n, labels, nc, c, dim);
        }
    }
    free(x);
    free(c);
    free(labels);
}
END_TEST

static int nprog;
static uint64_t last_done, last_total;
static void on_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    ck_assert_str_eq(phase, "kmeans");
    ck_assert_ptr_eq(user, &nprog);
    ck_assert_uint_eq(done, last_done + 1);
    nprog++;
    last_done = done;
    last_total = total;
}

/* Same seed and thread count: bitwise identical centroids. The blocks of the sgemm and
 * the order of the sums do not depend on the thread count, so other thread counts
 * give the same bits too; and the clustering stays good. Both seeding paths: greedy
 * k-means++ (k <= 256) and random (k > 256). */
START_TEST(determinism) {
    const uint32_t dim = 32;
    const uint64_t n = 6000;
    const uint32_t ks[2] = {16, 300};
    float *x = malloc(n * dim * sizeof *x);
    uint32_t *labels = malloc(n * sizeof *labels);
    ck_assert(x && labels);
    for (int v = 0; v < 2; v++) {
        uint32_t k = ks[v];
        tu_clustered(x, n, dim, 16, 0.02f, 5 + (uint64_t)v, labels);
        size_t cb = (size_t)k * dim * sizeof(float);
        float *c1 = malloc(cb), *c2 = malloc(cb), *c3 = malloc(cb);
        ck_assert(c1 && c2 && c3);
        tt_kmeans_params p = {.k = k, .dim = dim, .iters = 8, .seed = 11, .threads = 2,
                              .spherical = 1, .progress = on_progress, .progress_user = &nprog};
        nprog = 0;
        last_done = 0;
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c1), TT_OK);
        ck_assert_int_eq(nprog, 8);
        ck_assert_uint_eq(last_total, 8);
        p.progress = NULL;
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c2), TT_OK);
        ck_assert(memcmp(c1, c2, cb) == 0);
        for (int threads = 1; threads <= 3; threads += 2) {
            p.threads = threads;
            ck_assert_int_eq(tt_kmeans_train(x, n, &p, c3), TT_OK);
            ck_assert_msg(memcmp(c1, c3, cb) == 0, "k=%u: %d threads differ", k, threads);
            if (k == 16)
                check_recovered(x, n, labels, 16, c3, dim);
        }
        p.threads = 2;
        p.seed = 12;
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c3), TT_OK);
        ck_assert(memcmp(c1, c3, cb) != 0);
        if (k == 300) { /* a finer clustering: every vector close to its centroid */
            uint32_t *ids = assign_with(c1, k, dim, TT_ASSIGN_EXACT, x, n, 2);
            double mse = 0;
            for (uint64_t i = 0; i < n; i++)
                mse += dist2(x + i * dim, c1 + (size_t)ids[i] * dim, dim);
            mse /= (double)n;
            /* the planted noise alone: 32 dims x 0.02^2 before normalisation */
            ck_assert_msg(mse < 32 * 0.02 * 0.02, "mse %g", mse);
            free(ids);
        }
        free(c1);
        free(c2);
        free(c3);
    }
    free(x);
    free(labels);
}
END_TEST

static void check_finite(const float *c, uint64_t cnt) {
    for (uint64_t i = 0; i < cnt; i++)
        ck_assert_msg(isfinite(c[i]), "centroid value %llu is %g", (unsigned long long)i, c[i]);
}

/* Duplicated points and k close to n force empty clusters, which must be re-seeded
 * by splitting: centroids stay finite and every distinct point ends up with a
 * centroid of its own (distance ~0), on both seeding paths. */
/* Exact sums (tt_fix_add): the same integers whatever the order and split of the
 * values, and their value within rounding of the double sum. */
START_TEST(fixed_point_sums) {
    enum { N = 5000 };
    static double v[N];
    tt_rng rng;
    tt_rng_seed(&rng, 3);
    double m = 0, ref = 0;
    for (int i = 0; i < N; i++) {
        v[i] = (tt_rng_uniform(&rng) - 0.5) * (i % 7 == 0 ? 1e-6 : 3.0);
        m = fmax(m, fabs(v[i]));
        ref += v[i];
    }
    const double scale = tt_fix_scale(tt_fix_exponent(m));
    int64_t fwd[2] = {0, 0}, back[2] = {0, 0}, a[2] = {0, 0}, b[2] = {0, 0};
    for (int i = 0; i < N; i++)
        tt_fix_add(fwd, v[i], scale);
    for (int i = N - 1; i >= 0; i--)
        tt_fix_add(back, v[i], scale);
    for (int i = 0; i < N; i++) /* two parts, interleaved, summed after */
        tt_fix_add(i % 3 ? a : b, v[i], scale);
    ck_assert(fwd[0] == back[0] && fwd[1] == back[1]);
    ck_assert(fwd[0] * 4294967296.0 + (double)fwd[1] ==
              (a[0] + b[0]) * 4294967296.0 + (double)(a[1] + b[1]));
    ck_assert_double_eq_tol(tt_fix_value(fwd, scale), ref, 1e-9);
    int64_t one[2] = {0, 0}; /* a single value comes back exactly */
    tt_fix_add(one, -0.3125, tt_fix_scale(tt_fix_exponent(0.3125)));
    ck_assert(tt_fix_value(one, tt_fix_scale(tt_fix_exponent(0.3125))) == -0.3125);
}
END_TEST

/* A fake group of in-process members for distributed training: each member is a
 * thread, and the reduce meets them at a barrier and combines every member's buffer in
 * member order (as MPI_Allreduce would, whatever its order: the values are integers). */
enum { FG_MAX = 4 };
typedef struct fake_group {
    int size;
    pthread_barrier_t bar;
    int64_t *slot[FG_MAX];
    int64_t calls;
} fake_group;

typedef struct fake_member {
    fake_group *g;
    int rank;
    const float *x;
    uint64_t n;
    tt_kmeans_part part;
    tt_kmeans_params p;
    float *c;
    int status;
} fake_member;

static int fake_reduce(void *user, int64_t *buf, size_t n, int op) {
    fake_member *m = user;
    fake_group *g = m->g;
    int64_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    ck_assert_ptr_nonnull(tmp);
    g->slot[m->rank] = buf;
    pthread_barrier_wait(&g->bar);
    for (size_t i = 0; i < n; i++) {
        int64_t v = g->slot[0][i];
        for (int r = 1; r < g->size; r++)
            v = op == TT_REDUCE_MAX ? (g->slot[r][i] > v ? g->slot[r][i] : v)
                                    : v + g->slot[r][i];
        tmp[i] = v;
    }
    if (m->rank == 0)
        g->calls++;
    pthread_barrier_wait(&g->bar); /* everyone has read every buffer */
    memcpy(buf, tmp, n * sizeof *tmp);
    free(tmp);
    return 0;
}

static void *fake_run(void *arg) {
    fake_member *m = arg;
    m->status = tt_kmeans_train(m->x, m->n, &m->p, m->c);
    return NULL;
}

/* Trains k centroids on x (n rows) cut at the bounds b[0..parts]; returns each
 * member's status in st and its centroids in c[r]. */
static void fake_train(const float *x, uint32_t dim, const uint64_t *b, int parts,
                       const tt_kmeans_params *p, const volatile int *cancel_of_1,
                       float **c, int *st, int64_t *calls) {
    fake_group g = {.size = parts};
    fake_member m[FG_MAX];
    pthread_t th[FG_MAX];
    ck_assert_int_eq(pthread_barrier_init(&g.bar, NULL, (unsigned)parts), 0);
    for (int r = 0; r < parts; r++) {
        m[r] = (fake_member){.g = &g, .rank = r, .x = x + b[r] * dim, .n = b[r + 1] - b[r],
                             .c = c[r]};
        m[r].part = (tt_kmeans_part){.first = b[r], .total = b[parts], .reduce = fake_reduce,
                                     .user = &m[r], .rank = (uint32_t)r,
                                     .size = (uint32_t)parts};
        m[r].p = *p;
        m[r].p.part = &m[r].part;
        if (r == 1 && cancel_of_1)
            m[r].p.cancel = cancel_of_1;
        ck_assert_int_eq(pthread_create(&th[r], NULL, fake_run, &m[r]), 0);
    }
    for (int r = 0; r < parts; r++) {
        pthread_join(th[r], NULL);
        st[r] = m[r].status;
    }
    pthread_barrier_destroy(&g.bar);
    *calls = g.calls;
}

/* Distributed training over 3 parts (and over 1) gives the one-process centroids, bit
 * for bit, for both seeding paths; a part with no rows is fine; a part that fails
 * fails every part. */
START_TEST(distributed_parts) {
    const uint32_t dim = 24;
    const uint64_t n = 3000;
    float *x = malloc(n * dim * sizeof *x);
    uint32_t *labels = malloc(n * sizeof *labels);
    ck_assert(x && labels);
    tu_clustered(x, n, dim, 12, 0.05f, 9, labels);
    const uint32_t ks[2] = {12, 280};
    for (int v = 0; v < 2; v++) {
        const uint32_t k = ks[v];
        size_t cb = (size_t)k * dim * sizeof(float);
        float *ref = malloc(cb), *c[3] = {malloc(cb), malloc(cb), malloc(cb)};
        ck_assert(ref && c[0] && c[1] && c[2]);
        tt_kmeans_params p = {.k = k, .dim = dim, .iters = 6, .seed = 21, .threads = 2,
                              .spherical = v == 0};
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, ref), TT_OK);
        p.threads = 1;
        int st[3];
        int64_t calls;
        const uint64_t three[4] = {0, 1024, 2048, n}, empty[4] = {0, 1280, 1280, n},
                       whole[2] = {0, n};
        const uint64_t *splits[3] = {three, empty, whole};
        const int parts[3] = {3, 3, 1};
        for (int s = 0; s < 3; s++) {
            fake_train(x, dim, splits[s], parts[s], &p, NULL, c, st, &calls);
            for (int r = 0; r < parts[s]; r++) {
                ck_assert_int_eq(st[r], TT_OK);
                ck_assert_msg(memcmp(ref, c[r], cb) == 0, "k=%u split %d: part %d differs", k,
                              s, r);
            }
            ck_assert_int_ge(calls, p.iters); /* at least one reduce per iteration */
        }
        static volatile int cancelled = 1;
        fake_train(x, dim, three, 3, &p, &cancelled, c, st, &calls);
        ck_assert_int_eq(st[1], TT_ECANCELED);
        ck_assert_int_eq(st[0], TT_EIO);
        ck_assert_int_eq(st[2], TT_EIO);
        free(ref);
        for (int r = 0; r < 3; r++)
            free(c[r]);
    }
    /* hierarchical training without the part's rank and size is refused */
    tt_kmeans_part part = {.first = 0, .total = n, .reduce = fake_reduce};
    tt_kmeans_params p = {.k = 16, .dim = dim, .iters = 2, .method = TT_KMEANS_HIER,
                          .part = &part};
    float *c = malloc((size_t)16 * dim * sizeof *c);
    ck_assert_int_eq(tt_kmeans_train(x, n, &p, c), TT_EINVAL);
    free(c);
    free(x);
    free(labels);
}
END_TEST

/* Distributed hierarchical training (coarse k-means over the parts, each fine k-means
 * on one member, refine over the parts) gives the one-process centroids, bit for bit:
 * forced (k = 90, 3 coarse clusters over 1..4 parts of a clustered set, with and
 * without refinement, spherical or not) and by default from TT_KMEANS_HIER_MIN_K; a
 * part with no rows is fine; a cancelled part fails every part. */
START_TEST(distributed_hier) {
    const uint32_t dim = 8;
    const uint64_t n = 9000;
    float *x = malloc(n * dim * sizeof *x);
    uint32_t *labels = malloc(n * sizeof *labels);
    ck_assert(x && labels);
    tu_clustered(x, n, dim, 40, 0.08f, 5, labels);
    const uint64_t A = TT_KMEANS_PART_ROWS;
    const uint64_t two[3] = {0, 2 * A, n}, three[4] = {0, A, 3 * A, n},
                   empty[5] = {0, A, A, 4 * A, n}, whole[2] = {0, n};
    const uint64_t *splits[4] = {two, three, empty, whole};
    const int parts[4] = {2, 3, 4, 1};
    const struct { uint32_t k; int method, refine, spherical; } cases[3] = {
        {90, TT_KMEANS_HIER, 0, 1}, {90, TT_KMEANS_HIER, -1, 0},
        {TT_KMEANS_HIER_MIN_K, TT_KMEANS_AUTO, 1, 1}};
    for (int v = 0; v < 3; v++) {
        const uint32_t k = cases[v].k;
        size_t cb = (size_t)k * dim * sizeof(float);
        float *ref = malloc(cb), *c[4] = {malloc(cb), malloc(cb), malloc(cb), malloc(cb)};
        ck_assert(ref && c[0] && c[1] && c[2] && c[3]);
        tt_kmeans_params p = {.k = k, .dim = dim, .iters = 4, .seed = 33, .threads = 2,
                              .spherical = cases[v].spherical, .method = cases[v].method,
                              .refine = cases[v].refine};
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, ref), TT_OK);
        int st[4];
        int64_t calls;
        for (int s = 0; s < 4; s++) {
            p.threads = 1 + s % 2;
            fake_train(x, dim, splits[s], parts[s], &p, NULL, c, st, &calls);
            for (int r = 0; r < parts[s]; r++) {
                ck_assert_int_eq(st[r], TT_OK);
                ck_assert_msg(memcmp(ref, c[r], cb) == 0, "k=%u case %d split %d: part %d "
                              "differs", k, v, s, r);
            }
            ck_assert_int_ge(calls, p.iters); /* the coarse iterations at least */
        }
        static volatile int cancelled = 1;
        fake_train(x, dim, three, 3, &p, &cancelled, c, st, &calls);
        ck_assert_int_eq(st[1], TT_ECANCELED);
        ck_assert_int_eq(st[0], TT_EIO);
        ck_assert_int_eq(st[2], TT_EIO);
        free(ref);
        for (int r = 0; r < 4; r++)
            free(c[r]);
    }
    free(x);
    free(labels);
}
END_TEST

START_TEST(empty_clusters) {
    const uint32_t dim = 32;
    const struct { uint32_t distinct, copies, k; } cases[3] = {{64, 4, 128}, {100, 4, 300},
                                                              {1, 4, 2}};
    for (int ci = 0; ci < 3; ci++) {
        uint64_t n = (uint64_t)cases[ci].distinct * cases[ci].copies;
        uint32_t k = cases[ci].k;
        float *u = malloc((size_t)cases[ci].distinct * dim * sizeof *u);
        float *x = malloc(n * dim * sizeof *x), *c = malloc((size_t)k * dim * sizeof *c);
        ck_assert(u && x && c);
        tu_clustered(u, cases[ci].distinct, dim, cases[ci].distinct, 0.1f, 77, NULL);
        for (uint64_t i = 0; i < n; i++) /* interleaved copies */
            memcpy(x + i * dim, u + (i % cases[ci].distinct) * dim, dim * sizeof *x);
        tt_kmeans_params p = {.k = k, .dim = dim, .iters = 15, .seed = 3, .threads = 2,
                              .spherical = 1};
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c), TT_OK);
        check_finite(c, (uint64_t)k * dim);
        uint32_t *ids = assign_with(c, k, dim, TT_ASSIGN_EXACT, x, n, 1);
        for (uint64_t i = 0; i < n; i++)
            ck_assert_msg(dist2(x + i * dim, c + (size_t)ids[i] * dim, dim) < 1e-5,
                          "case %d: vector %llu is %g from its centroid", ci,
                          (unsigned long long)i,
                          dist2(x + i * dim, c + (size_t)ids[i] * dim, dim));
        free(ids);
        free(u);
        free(x);
        free(c);
    }
    /* k == n with distinct points: every point is its own centroid */
    const uint64_t n = 400;
    float *x = malloc(n * dim * sizeof *x), *c = malloc(n * dim * sizeof *c);
    ck_assert(x && c);
    tu_clustered(x, n, dim, 8, 0.05f, 9, NULL);
    tt_kmeans_params p = {.k = (uint32_t)n, .dim = dim, .iters = 5, .seed = 1, .threads = 2};
    ck_assert_int_eq(tt_kmeans_train(x, n, &p, c), TT_OK);
    uint32_t *ids = assign_with(c, (uint32_t)n, dim, TT_ASSIGN_EXACT, x, n, 2);
    for (uint64_t i = 0; i < n; i++)
        ck_assert(dist2(x + i * dim, c + (size_t)ids[i] * dim, dim) == 0);
    free(ids);
    free(x);
    free(c);
}
END_TEST

/* The exact assigner agrees with the double-precision argmax on random data; where
 * they differ the float scores are within rounding of a tie. Sizes are not multiples
 * of the 256-row / 1024-centroid blocks, and k = 5, 13 exercise the scalar and tail
 * paths of the vector argmax. The result does not depend on the thread count. */
START_TEST(exact_matches_naive) {
    const uint32_t dim = 40;
    const uint64_t n = 3000;
    const uint32_t ks[4] = {1500, 5, 13, 1024};
    float *x = malloc(n * dim * sizeof *x), *c = malloc((size_t)1500 * dim * sizeof *c);
    uint32_t *ref = malloc(n * sizeof *ref);
    ck_assert(x && c && ref);
    tt_rng r;
    tt_rng_seed(&r, 2024);
    for (uint64_t i = 0; i < n * dim; i++)
        x[i] = (float)(tt_rng_uniform(&r) * 2 - 1);
    for (uint64_t i = 0; i < (uint64_t)1500 * dim; i++)
        c[i] = (float)(tt_rng_uniform(&r) * 2 - 1);
    for (int v = 0; v < 4; v++) {
        uint32_t k = ks[v];
        naive_assign(x, n, c, k, dim, ref);
        uint32_t *ids = assign_with(c, k, dim, TT_ASSIGN_EXACT, x, n, 2);
        uint32_t *ids3 = assign_with(c, k, dim, TT_ASSIGN_EXACT, x, n, 3);
        ck_assert(memcmp(ids, ids3, n * sizeof *ids) == 0);
        uint64_t same = 0;
        for (uint64_t i = 0; i < n; i++) {
            ck_assert_uint_lt(ids[i], k);
            if (ids[i] == ref[i]) {
                same++;
                continue;
            }
            double sr = score(x + i * dim, c + (size_t)ref[i] * dim, dim);
            double sa = score(x + i * dim, c + (size_t)ids[i] * dim, dim);
            ck_assert_msg(sr - sa < 1e-5 * (1 + fabs(sr)), "k=%u vector %llu: %u (%.9g) vs %u "
                          "(%.9g)", k, (unsigned long long)i, ids[i], sa, ref[i], sr);
        }
        ck_assert_msg((double)same / (double)n > 0.999, "k=%u: %llu of %llu equal", k,
                      (unsigned long long)same, (unsigned long long)n);
        free(ids);
        free(ids3);
    }
    free(x);
    free(c);
    free(ref);
}
END_TEST

/* Duplicate centroids: the lowest index wins, in the vector lanes and across blocks. */
START_TEST(ties_lowest_index) {
    const uint32_t dim = 16, k = 1100;
    float *c = malloc((size_t)k * dim * sizeof *c);
    ck_assert(c);
    tu_clustered(c, k, dim, k, 0.1f, 4, NULL);
    /* pairs (lo, hi) of equal centroids, placed in: the same lane of the 2 x 4-lane
     * argmax, other lanes, the same 8-group, other 1024-centroid blocks, the scalar
     * tail of the second block (1100 = 1024 + 9 * 8 + 4) */
    enum { NP = 6 };
    const uint32_t pairs[NP][2] = {{5, 21}, {6, 9}, {30, 39}, {2, 3}, {100, 1090}, {1050, 1098}};
    for (int q = 0; q < NP; q++)
        memcpy(c + pairs[q][1] * dim, c + pairs[q][0] * dim, dim * sizeof *c);
    float x[NP * 16];
    for (int q = 0; q < NP; q++)
        memcpy(x + q * dim, c + pairs[q][0] * dim, dim * sizeof *c);
    uint32_t *ids = assign_with(c, k, dim, TT_ASSIGN_EXACT, x, NP, 1);
    for (int q = 0; q < NP; q++)
        ck_assert_uint_eq(ids[q], pairs[q][0]);
    free(ids);
    tt_assigner *a = NULL; /* k < 4096: force groups to test the two-level scan */
    ck_assert_int_eq(tt_assigner_new_groups(c, k, dim, 33, 1, 2, &a), TT_OK);
    ck_assert_uint_gt(tt_assigner_groups(a), 16);
    ids = malloc(NP * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    ck_assert_int_eq(tt_assign(a, x, NP, ids, 1), TT_OK);
    for (int q = 0; q < NP; q++)
        ck_assert_uint_eq(ids[q], pairs[q][0]);
    tt_assigner_free(a);
    free(ids);
    free(c);
}
END_TEST

/* Two-level assignment against exact, K = 4096 centroids trained on clustered data,
 * fresh vectors from the same distribution: >= 98% agreement at the default probe,
 * >= 99.9% when every group is scanned. Below 4096 centroids it is exact. */
START_TEST(two_level_agreement) {
    const uint32_t dim = 64, K = 4096;
    const uint64_t ntrain = 32768, n = 16384;
    float *xt = malloc(ntrain * dim * sizeof *xt), *x = malloc(n * dim * sizeof *x);
    float *c = malloc((size_t)K * dim * sizeof *c);
    ck_assert(xt && x && c);
    /* the same cluster centres (seed), different noise draws: train on the first part */
    float *all = malloc((ntrain + n) * dim * sizeof *all);
    ck_assert(all);
    tu_clustered(all, ntrain + n, dim, 512, 0.06f, 31, NULL);
    memcpy(xt, all, ntrain * dim * sizeof *xt);
    memcpy(x, all + ntrain * dim, n * dim * sizeof *x);
    free(all);
    tt_kmeans_params p = {.k = K, .dim = dim, .iters = 4, .seed = 5, .threads = 2,
                          .spherical = 1};
    ck_assert_int_eq(tt_kmeans_train(xt, ntrain, &p, c), TT_OK);

    uint32_t *ex = assign_with(c, K, dim, TT_ASSIGN_EXACT, x, n, 2);
    tt_assigner *a = NULL;
    ck_assert_int_eq(tt_assigner_new(c, K, dim, TT_ASSIGN_TWO_LEVEL, 7, 2, &a), TT_OK);
    uint32_t g = tt_assigner_groups(a);
    ck_assert_uint_gt(g, 32);
    ck_assert_uint_le(g, 64); /* max(sqrt(4096), 4096/64), empty groups dropped */
    ck_assert_uint_eq(tt_assigner_probe(a), TT_MAX((g + 7) / 8, 4u));
    uint32_t *tw = malloc(n * sizeof *tw), *tw1 = malloc(n * sizeof *tw1);
    ck_assert(tw && tw1);
    ck_assert_int_eq(tt_assign(a, x, n, tw, 2), TT_OK);
    ck_assert_int_eq(tt_assign(a, x, n, tw1, 1), TT_OK);
    ck_assert(memcmp(tw, tw1, n * sizeof *tw) == 0);
    uint64_t same = 0;
    for (uint64_t i = 0; i < n; i++)
        same += tw[i] == ex[i];
    ck_assert_msg((double)same / (double)n >= 0.98, "agreement %.4f at probe %u of %u",
                  (double)same / (double)n, tt_assigner_probe(a), g);

    ck_assert_int_eq(tt_assigner_set_probe(a, 0), TT_EINVAL);
    ck_assert_int_eq(tt_assigner_set_probe(a, 100000), TT_OK);
    ck_assert_uint_eq(tt_assigner_probe(a), g);
    ck_assert_int_eq(tt_assign(a, x, n, tw, 2), TT_OK);
    same = 0;
    for (uint64_t i = 0; i < n; i++)
        same += tw[i] == ex[i];
    ck_assert_msg((double)same / (double)n >= 0.999, "full probe agreement %.4f",
                  (double)same / (double)n);
    tt_assigner_free(a);

    /* fallback: fewer than 4096 centroids -> no groups, same ids as exact */
    ck_assert_int_eq(tt_assigner_new(c, 4095, dim, TT_ASSIGN_TWO_LEVEL, 7, 2, &a), TT_OK);
    ck_assert_uint_eq(tt_assigner_groups(a), 0);
    ck_assert_int_eq(tt_assign(a, x, n, tw, 2), TT_OK);
    tt_assigner_free(a);
    uint32_t *ex1000 = assign_with(c, 4095, dim, TT_ASSIGN_EXACT, x, n, 2);
    ck_assert(memcmp(tw, ex1000, n * sizeof *tw) == 0);
    /* explicit groups: 0 is exact, more groups than centroids is invalid */
    ck_assert_int_eq(tt_assigner_new_groups(c, K, dim, 0, 7, 2, &a), TT_OK);
    ck_assert_uint_eq(tt_assigner_groups(a), 0);
    tt_assigner_free(a);
    ck_assert_int_eq(tt_assigner_new_groups(c, 8, dim, 9, 7, 2, &a), TT_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(tt_assigner_new(c, K, dim, TT_ASSIGN_EXACT, 7, 2, &a), TT_OK);
    ck_assert_uint_eq(tt_assigner_groups(a), 0);
    ck_assert_uint_eq(tt_assigner_probe(a), 0);
    tt_assigner_free(a);

    free(ex1000);
    free(ex);
    free(tw);
    free(tw1);
    free(xt);
    free(x);
    free(c);
}
END_TEST

/* (centroid, label) order for the purity count of hierarchical training. */
static int cmp_pair(const void *a, const void *b) {
    const uint32_t *u = a, *v = b;
    if (u[0] != v[0])
        return u[0] < v[0] ? -1 : 1;
    return (u[1] > v[1]) - (u[1] < v[1]);
}

/* Fraction of the n vectors whose label is the majority label of their centroid. */
static double purity(const uint32_t *ids, const uint32_t *labels, uint64_t n) {
    uint32_t *pr = malloc(n * 2 * sizeof *pr);
    ck_assert_ptr_nonnull(pr);
    for (uint64_t i = 0; i < n; i++) {
        pr[2 * i] = ids[i];
        pr[2 * i + 1] = labels[i];
    }
    qsort(pr, n, 2 * sizeof *pr, cmp_pair);
    uint64_t pure = 0, best = 0, run = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (i > 0 && pr[2 * i] == pr[2 * i - 2] && pr[2 * i + 1] == pr[2 * i - 1])
            run++;
        else
            run = 1;
        if (i > 0 && pr[2 * i] != pr[2 * i - 2]) { /* new centroid: bank the last one */
            pure += best;
            best = 0;
        }
        best = TT_MAX(best, run);
    }
    pure += best;
    free(pr);
    return (double)pure / (double)n;
}

static uint64_t hprog_done, hprog_total;
static int hprog_calls;
static void on_hier_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    ck_assert_str_eq(phase, "kmeans");
    ck_assert_ptr_eq(user, &hprog_calls);
    ck_assert_uint_ge(done, hprog_done); /* monotone */
    ck_assert_uint_le(done, total);
    hprog_done = done;
    hprog_total = total;
    hprog_calls++;
}

/* Hierarchical training (the default from k = 4096) on 1024 planted clusters at
 * k = 4096: no centroid mixes planted clusters (purity > 0.99), every vector is about
 * as close to its centroid as the planted noise allows, the objective is within 2 %
 * of flat Lloyd's, the centroids are finite and unit length, and the result is the same
 * bits for 1, 2 and 3 threads. Progress runs to iters + sqrt(k) + refine. */
START_TEST(hier_planted) {
    const uint32_t dim = 32, k = 4096, nc = 1024;
    const uint64_t n = 16384;
    const size_t cb = (size_t)k * dim * sizeof(float);
    float *x = malloc(n * dim * sizeof *x), *c = malloc(cb), *c2 = malloc(cb);
    float *cf = malloc(cb);
    uint32_t *labels = malloc(n * sizeof *labels);
    ck_assert(x && c && c2 && cf && labels);
    tu_clustered(x, n, dim, nc, 0.02f, 404, labels);
    tt_kmeans_params p = {.k = k, .dim = dim, .iters = 4, .seed = 9, .threads = 2,
                          .spherical = 1, .progress = on_hier_progress,
                          .progress_user = &hprog_calls};
    ck_assert_int_eq(tt_kmeans_train(x, n, &p, c), TT_OK);
    ck_assert_uint_eq(hprog_total, 4 + 64 + TT_KMEANS_DEFAULT_REFINE);
    ck_assert_uint_eq(hprog_done, hprog_total);
    check_finite(c, (uint64_t)k * dim);
    for (uint32_t j = 0; j < k; j++)
        ck_assert_double_eq_tol(sqrt(-2 * score(NULL, c + (size_t)j * dim, dim)), 1.0, 1e-5);
    p.progress = NULL;
    for (int threads = 1; threads <= 3; threads += 2) {
        p.threads = threads;
        p.method = threads == 3 ? TT_KMEANS_HIER : TT_KMEANS_AUTO; /* same at this k */
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c2), TT_OK);
        ck_assert_msg(memcmp(c, c2, cb) == 0, "hierarchical: %d threads differ", threads);
    }
    p.refine = -1; /* no refinement: a different result */
    ck_assert_int_eq(tt_kmeans_train(x, n, &p, c2), TT_OK);
    ck_assert(memcmp(c, c2, cb) != 0);

    uint32_t *ids = assign_with(c, k, dim, TT_ASSIGN_EXACT, x, n, 2);
    double pur = purity(ids, labels, n);
    ck_assert_msg(pur > 0.99, "purity %.4f", pur);
    double mse = 0;
    for (uint64_t i = 0; i < n; i++)
        mse += dist2(x + i * dim, c + (size_t)ids[i] * dim, dim);
    mse /= (double)n;
    ck_assert_msg(mse < dim * 0.02 * 0.02, "hierarchical mse %g", mse);

    p.method = TT_KMEANS_FLAT;
    p.refine = 0;
    ck_assert_int_eq(tt_kmeans_train(x, n, &p, cf), TT_OK);
    uint32_t *idf = assign_with(cf, k, dim, TT_ASSIGN_EXACT, x, n, 2);
    double mf = 0;
    for (uint64_t i = 0; i < n; i++)
        mf += dist2(x + i * dim, cf + (size_t)idf[i] * dim, dim);
    mf /= (double)n;
    /* the objective the index uses, mean max x.c, is 1 - mse/2 for unit vectors */
    ck_assert_msg(1 - mse / 2 > 0.98 * (1 - mf / 2), "hierarchical mse %g, flat %g", mse, mf);
    free(ids);
    free(idf);
    free(x);
    free(c);
    free(c2);
    free(cf);
    free(labels);
}
END_TEST

/* Hierarchical training forced at small k on lopsided data: one dense cluster holding
 * 80 % of the vectors and 200 scattered points, k = n and k = n/2. Sub-cluster sizes
 * must sum to exactly k with 1 <= k_c <= n_c (an overrun would write past the
 * centroids, an underrun leave centroids unset, k_c > n_c fail): with k = n every
 * (distinct) point is its own centroid; with k = n/2 all centroids are finite and unit
 * length. Deterministic across thread counts. */
START_TEST(hier_sizes) {
    const uint32_t dim = 16;
    const uint64_t n = 1000;
    float *x = malloc(n * dim * sizeof *x), *c = malloc(n * dim * sizeof *c);
    float *c2 = malloc(n * dim * sizeof *c2);
    ck_assert(x && c && c2);
    tu_clustered(x, 800, dim, 1, 0.05f, 21, NULL);           /* dense: 800 */
    tu_clustered(x + 800 * dim, 200, dim, 200, 0.05f, 22, NULL); /* 200 scattered */
    for (int v = 0; v < 2; v++) {
        uint32_t k = v == 0 ? (uint32_t)n : (uint32_t)n / 2;
        tt_kmeans_params p = {.k = k, .dim = dim, .iters = 3, .seed = 2, .threads = 2,
                              .spherical = 1, .method = TT_KMEANS_HIER};
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c), TT_OK);
        check_finite(c, (uint64_t)k * dim);
        p.threads = 1;
        ck_assert_int_eq(tt_kmeans_train(x, n, &p, c2), TT_OK);
        ck_assert(memcmp(c, c2, (size_t)k * dim * sizeof *c) == 0);
        for (uint32_t j = 0; j < k; j++)
            ck_assert_double_eq_tol(sqrt(-2 * score(NULL, c + (size_t)j * dim, dim)), 1.0,
                                    1e-5);
        if (v == 0) {
            uint32_t *ids = assign_with(c, k, dim, TT_ASSIGN_EXACT, x, n, 2);
            for (uint64_t i = 0; i < n; i++) {
                double d = dist2(x + i * dim, c + (size_t)ids[i] * dim, dim);
                ck_assert_msg(d < 1e-10, "k = n: vector %llu at %g", (unsigned long long)i, d);
            }
            free(ids);
        }
    }
    free(x);
    free(c);
    free(c2);
}
END_TEST

START_TEST(invalid_args) {
    float x[64] = {0}, c[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i;
    tt_kmeans_params p = {.k = 0, .dim = 4, .iters = 3, .seed = 1, .threads = 1};
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, c), TT_EINVAL);
    ck_assert_str_ne(tt_last_error(), "");
    p.k = 17; /* n < k */
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, c), TT_EINVAL);
    p.k = 4;
    p.dim = 0;
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, c), TT_EINVAL);
    p.dim = 4;
    p.iters = -1;
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, c), TT_EINVAL);
    p.iters = 3;
    ck_assert_int_eq(tt_kmeans_train(NULL, 16, &p, c), TT_EINVAL);
    ck_assert_int_eq(tt_kmeans_train(x, 16, NULL, c), TT_EINVAL);
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, NULL), TT_EINVAL);
    p.method = 3;
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, c), TT_EINVAL);
    p.method = TT_KMEANS_AUTO;
    ck_assert_int_eq(tt_kmeans_train(x, 16, &p, c), TT_OK); /* and the valid call works */
    check_finite(c, 16);

    tt_assigner *a = (tt_assigner *)&p; /* must be reset to NULL on failure */
    ck_assert_int_eq(tt_assigner_new(c, 0, 4, TT_ASSIGN_EXACT, 1, 1, &a), TT_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(tt_assigner_new(c, 4, 0, TT_ASSIGN_EXACT, 1, 1, &a), TT_EINVAL);
    ck_assert_int_eq(tt_assigner_new(NULL, 4, 4, TT_ASSIGN_EXACT, 1, 1, &a), TT_EINVAL);
    ck_assert_int_eq(tt_assigner_new(c, 4, 4, 7, 1, 1, &a), TT_EINVAL);
    ck_assert_int_eq(tt_assigner_new(c, 4, 4, TT_ASSIGN_EXACT, 1, 1, NULL), TT_EINVAL);
    ck_assert_int_eq(tt_assigner_new(c, 4, 4, TT_ASSIGN_EXACT, 1, 1, &a), TT_OK);
    uint32_t ids[16];
    ck_assert_int_eq(tt_assign(a, NULL, 16, ids, 1), TT_EINVAL);
    ck_assert_int_eq(tt_assign(a, x, 16, NULL, 1), TT_EINVAL);
    ck_assert_int_eq(tt_assign(NULL, x, 16, ids, 1), TT_EINVAL);
    ck_assert_int_eq(tt_assign(a, x, 0, ids, 1), TT_OK);
    ck_assert_int_eq(tt_assign(a, x, 16, ids, 0), TT_OK); /* 0 threads: online CPUs */
    for (int i = 0; i < 16; i++)
        ck_assert_uint_lt(ids[i], 4);
    tt_assigner_free(a);
    tt_assigner_free(NULL);
}
END_TEST

int main(void) {
    Suite *s = suite_create("kmeans");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, planted_clusters);
    tcase_add_test(tc, determinism);
    tcase_add_test(tc, fixed_point_sums);
    tcase_add_test(tc, distributed_parts);
    tcase_add_test(tc, distributed_hier);
    tcase_add_test(tc, empty_clusters);
    tcase_add_test(tc, exact_matches_naive);
    tcase_add_test(tc, ties_lowest_index);
    tcase_add_test(tc, two_level_agreement);
    tcase_add_test(tc, hier_planted);
    tcase_add_test(tc, hier_sizes);
    tcase_add_test(tc, invalid_args);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

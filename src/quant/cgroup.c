/* Two-level centroid scores: groups of centroids, scored through their mean centroid
 * until a query vector ranks the group among its best (doc/search.md, "Centroid
 * groups"; declared in quant/cscore.h).
 *
 * Why: at 3584-d, PLAID's stage 1 reads the whole int8 table (8192 x 3584 = 29 MiB) for
 * every query, about half the time of a 4-vector query, to find each query vector's
 * best centroids and to give stages 2-3 a score for every code of the candidates. The
 * best centroids lie in the best groups, and a document vector's code outside them
 * matters to stages 2-3 only through a score that is low either way; its group's score
 * is that score's average over the group (WARP's missing-similarity imputation, with
 * the group's score for the missing one). How many groups a query needs is measured,
 * not assumed: the calibration (src/tune/) stores it per parameter set, and keeps
 * the groups only when some set gains from them. */
#include "quant/cscore.h"
#include "quant/kmeans.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

/* Renumbers groups by their first member (in centroid order), dropping empty ones. */
static int renumber(uint32_t *group_of, uint32_t K, uint32_t G, uint32_t *ngroups) {
    uint32_t *map = tt_alloc(G, sizeof *map, "centroid groups");
    if (!map)
        return TT_ENOMEM;
    for (uint32_t g = 0; g < G; g++)
        map[g] = UINT32_MAX;
    uint32_t next = 0;
    for (uint32_t k = 0; k < K; k++) {
        uint32_t g = group_of[k];
        if (map[g] == UINT32_MAX)
            map[g] = next++;
        group_of[k] = map[g];
    }
    free(map);
    *ngroups = next;
    return TT_OK;
}

int tt_cq_train_groups(const float *centroids, uint32_t K, uint32_t dim, uint64_t seed,
                       int threads, uint32_t *group_of, uint32_t *ngroups) {
    if (!centroids || !group_of || !ngroups || dim == 0)
        return tt_err(TT_EINVAL, "centroid groups: NULL argument or zero dimension");
    if (K < TT_CQ_GROUP_MIN_K)
        return tt_err(TT_EINVAL, "centroid groups: %u centroids (at least %u)", K,
                      TT_CQ_GROUP_MIN_K);
    const uint32_t G = TT_MAX(16u, K / TT_CQ_GROUP_SIZE);
    /* A sample of every (K / n)-th centroid: the groups need the centroids' layout, not
     * every one of them. */
    const uint32_t n = TT_MIN(K, TT_CQ_GROUP_SAMPLE);
    float *sample = NULL, *mu = tt_alloc((uint64_t)G * dim, sizeof *mu, "centroid groups");
    tt_assigner *a = NULL;
    int st = mu ? TT_OK : TT_ENOMEM;
    if (!st && n < K) {
        if (!(sample = tt_alloc((uint64_t)n * dim, sizeof *sample, "centroid groups")))
            st = TT_ENOMEM;
        for (uint32_t i = 0; !st && i < n; i++)
            memcpy(sample + (uint64_t)i * dim,
                   centroids + (uint64_t)i * K / n * dim, (size_t)dim * sizeof *sample);
    }
    tt_kmeans_params kp;
    memset(&kp, 0, sizeof kp);
    kp.k = G;
    kp.dim = dim;
    kp.iters = 10;
    kp.seed = seed;
    kp.threads = threads;
    if (!st)
        st = tt_kmeans_train(sample ? sample : centroids, n, &kp, mu);
    if (!st)
        st = tt_assigner_new(mu, G, dim, TT_ASSIGN_EXACT, seed, threads, &a);
    if (!st)
        st = tt_assign(a, centroids, K, group_of, threads);
    if (!st)
        st = renumber(group_of, K, G, ngroups);
    tt_assigner_free(a);
    free(sample);
    free(mu);
    return st;
}

int tt_cq_init_grouped(tt_cq *q, const float *centroids, uint32_t K, uint32_t dim, int kernel,
                       const uint32_t *group_of, uint32_t ngroups) {
    if (kernel == TT_CQ_F32 || ngroups == 0 || !group_of)
        return tt_cq_init_kernel(q, centroids, K, dim, kernel);
    memset(q, 0, sizeof *q);
    const uint32_t G = ngroups;
    uint32_t *gblk = tt_calloc((size_t)G + 1, sizeof *gblk, "centroid groups");
    uint32_t *fill = tt_calloc(G, sizeof *fill, "centroid groups");
    float *mu = tt_calloc((uint64_t)G * dim, sizeof *mu, "centroid groups");
    uint32_t *row_id = NULL;
    tt_cq *centres = tt_calloc(1, sizeof *centres, "centroid groups");
    int st = gblk && fill && mu && centres ? TT_OK : TT_ENOMEM;
    /* sizes (in fill), then each group's first block */
    for (uint32_t k = 0; !st && k < K; k++) {
        if (group_of[k] >= G)
            st = TT_EINVAL;
        else
            fill[group_of[k]]++;
    }
    uint64_t blocks = 0, max_blk = 0;
    for (uint32_t g = 0; !st && g < G; g++) {
        if (fill[g] == 0) {
            st = TT_EINVAL;
            break;
        }
        gblk[g] = (uint32_t)TT_MIN(blocks, (uint64_t)UINT32_MAX);
        const uint64_t b = (fill[g] + TT_CQ_LANES - 1) / TT_CQ_LANES;
        blocks += b;
        max_blk = TT_MAX(max_blk, b);
    }
    if (!st && blocks * TT_CQ_LANES > UINT32_MAX)
        st = TT_EINVAL;
    if (!st) {
        gblk[G] = (uint32_t)blocks;
        if (!(row_id = tt_alloc(blocks * TT_CQ_LANES, sizeof *row_id, "centroid groups")))
            st = TT_ENOMEM;
    }
    if (!st) {
        for (uint64_t r = 0; r < blocks * TT_CQ_LANES; r++)
            row_id[r] = UINT32_MAX;
        memset(fill, 0, (size_t)G * sizeof *fill);
        for (uint32_t k = 0; k < K; k++) {
            const uint32_t g = group_of[k];
            row_id[(uint64_t)gblk[g] * TT_CQ_LANES + fill[g]++] = k;
            /* a * x + y with a = 1 is x + y exactly: the loop's sums, vectorized */
            cblas_saxpy((int)dim, 1.0f, centroids + (uint64_t)k * dim, 1,
                        mu + (uint64_t)g * dim, 1);
        }
        for (uint32_t g = 0; g < G; g++) {
            const float inv = 1.0f / (float)fill[g];
            for (uint32_t d = 0; d < dim; d++)
                mu[(uint64_t)g * dim + d] *= inv;
        }
        st = tt_cq_init_kernel(centres, mu, G, dim, kernel);
        centres->f32 = NULL; /* mu is freed below; an int8 table does not read it */
    }
    if (!st)
        st = tt_cq_init_rows(q, centroids, K, dim, kernel,
                             (uint32_t)(blocks * TT_CQ_LANES), row_id);
    free(fill);
    free(mu);
    if (st) {
        free(gblk);
        free(row_id);
        if (centres)
            tt_cq_free(centres);
        free(centres);
        return st;
    }
    q->ngroups = G;
    q->ncent = K;
    q->gblk = gblk;
    q->row_id = row_id;
    q->max_gblk = (uint32_t)max_blk;
    q->centres = centres;
    return TT_OK;
}

static size_t al64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Blocks scored per kernel call: neighbouring groups that are all scored go to the
 * kernel together, up to this many blocks or one group (stage 1 of the 3584-d
 * benchmark with 4 groups per query vector: 0.75 against 0.81 ms with one call per
 * group; with every group scored the grouped table costs about 8% more than the
 * ungrouped one either way, its padding rows: each group is rounded up to whole
 * blocks of 16). */
#define RUN_BLOCKS 64u

static uint32_t run_blocks(const tt_cq *q) {
    return TT_MAX(q->max_gblk, RUN_BLOCKS);
}

size_t tt_cq_group_work_bytes(const tt_cq *q, uint32_t nqp) {
    if (!q->ngroups)
        return 64;
    const size_t G = q->ngroups;
    return al64(G * nqp * sizeof(float)) +
           al64((size_t)run_blocks(q) * TT_CQ_LANES * nqp * sizeof(float)) +
           al64(G * sizeof(float)) + al64(G * sizeof(uint32_t)) + al64(G);
}

/* Scores the blocks [b0, b1) (whole groups) into rows, and copies each centroid's row
 * to St; returns the centroids. */
static uint32_t score_run(const tt_cq *q, const uint8_t *qpack, const float *qscale,
                          uint32_t nqp, uint32_t b0, uint32_t b1, float *rows, float *St) {
    tt_cq v = *q; /* the blocks as a table of their own */
    const uint64_t r0 = (uint64_t)b0 * TT_CQ_LANES, r1 = (uint64_t)b1 * TT_CQ_LANES;
    v.data = q->data + (size_t)b0 * q->nd4 * 64;
    v.scale = q->scale + r0;
    v.csum = q->csum + r0;
    v.K = (uint32_t)(r1 - r0);
    v.nblk = b1 - b0;
    tt_cq_scores(&v, qpack, qscale, nqp, rows);
    uint32_t n = 0;
    for (uint64_t r = r0; r < r1; r++)
        if (q->row_id[r] != UINT32_MAX) {
            memcpy(St + (size_t)q->row_id[r] * nqp, rows + (size_t)(r - r0) * nqp,
                   (size_t)nqp * sizeof *St);
            n++;
        }
    return n;
}

/* The `probe` best groups of query vector i by gs (ties: the lower group), marked in on. */
static void mark_best(const float *gs, uint32_t G, uint32_t nqp, uint32_t i, uint32_t probe,
                      float *ps, uint32_t *pg, uint8_t *on) {
    uint32_t n = 0;
    for (uint32_t g = 0; g < G; g++) {
        const float x = gs[(size_t)g * nqp + i];
        if (n == probe && !(x > ps[n - 1]))
            continue;
        uint32_t r = n < probe ? n++ : n - 1;
        while (r > 0 && x > ps[r - 1]) {
            ps[r] = ps[r - 1];
            pg[r] = pg[r - 1];
            r--;
        }
        ps[r] = x;
        pg[r] = g;
    }
    for (uint32_t t = 0; t < n; t++)
        on[pg[t]] = 1;
}

uint32_t tt_cq_group_scores(const tt_cq *q, const float *Q, uint32_t nq, uint32_t nqp,
                            uint32_t probe, uint8_t *qpack, float *qscale, void *work,
                            float *St) {
    if (!q->ngroups) {
        tt_cq_centroid_scores(q, Q, nq, nqp, qpack, qscale, St);
        return q->K;
    }
    const uint32_t G = q->ngroups;
    char *w = work;
    float *gs = (float *)w;
    w += al64((size_t)G * nqp * sizeof(float));
    float *rows = (float *)w;
    w += al64((size_t)run_blocks(q) * TT_CQ_LANES * nqp * sizeof(float));
    float *ps = (float *)w;
    w += al64(G * sizeof(float));
    uint32_t *pg = (uint32_t *)w;
    w += al64(G * sizeof(uint32_t));
    uint8_t *on = (uint8_t *)w;
    /* The groups' mean centroids have the table's dimension: one packed query serves
     * both tables. */
    tt_cq_query(q, Q, nq, nqp, qpack, qscale);
    const bool all = probe == 0 || probe >= G;
    if (!all) {
        tt_cq_scores(q->centres, qpack, qscale, nqp, gs);
        memset(on, 0, G);
        for (uint32_t i = 0; i < nq; i++)
            mark_best(gs, G, nqp, i, probe, ps, pg, on);
    }
    const size_t rb = (size_t)nqp * sizeof(float);
    const uint32_t cap = run_blocks(q);
    uint32_t scored = 0;
    for (uint32_t g = 0; g < G;) {
        if (all || on[g]) {
            /* this group and the scored ones after it, up to cap blocks */
            uint32_t e = g + 1;
            while (e < G && (all || on[e]) && q->gblk[e + 1] - q->gblk[g] <= cap)
                e++;
            scored += score_run(q, qpack, qscale, nqp, q->gblk[g], q->gblk[e], rows, St);
            g = e;
            continue;
        }
        const float *src = gs + (size_t)g * nqp;
        for (uint64_t r = (uint64_t)q->gblk[g] * TT_CQ_LANES;
             r < (uint64_t)q->gblk[g + 1] * TT_CQ_LANES && q->row_id[r] != UINT32_MAX; r++)
            memcpy(St + (size_t)q->row_id[r] * nqp, src, rb);
        g++;
    }
    return scored;
}

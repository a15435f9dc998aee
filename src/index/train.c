/* Index build, training: the sample (ColBERTv2's document sample), k-means, the
 * nearest-centroid assigner and the residual codec with its measured error. */
#include "index/build.h"

#include <math.h>
#include <stdlib.h>

static uint32_t default_centroids(uint64_t n) {
    /* ColBERTv2: 2^floor(log2(16 * sqrt(num_embeddings))). */
    double k = floor(log2(16.0 * sqrt((double)n)));
    if (k < 0)
        k = 0;
    if (k > 24)
        k = 24;
    return (uint32_t)1 << (uint32_t)k;
}

/* The training plan: the sampled documents (Knuth's selection sampling: one ordered
 * pass, O(1) memory, so the sample is read in file order), every 20th of them held out
 * for the codec (when there are >= 20), the training and held-out vector counts and
 * the number of centroids. A function of the input's lengths and the options alone,
 * so every process of a group build computes the same plan. */
typedef struct plan {
    uint64_t *docs, ndocs, ntrain, nheld;
} plan;

static bool is_held(const plan *pl, uint64_t i) { return pl->ndocs >= 20 && i % 20 == 19; }

static int make_plan(builder *b, plan *pl) {
    const tt_build_options *o = b->o;
    const tt_input *in = b->in;
    uint64_t D = in->num_docs, N = in->num_vectors;
    memset(pl, 0, sizeof *pl);
    b->K = o->num_centroids ? o->num_centroids : default_centroids(N);
    /* Documents: 1 + f*sqrt(120*D) (ColBERTv2), grown until there are at least
     * min_train_per_centroid vectors per centroid (few-vectors-per-doc encoders). */
    double want_docs = 1.0 + o->sample_factor * sqrt(120.0 * (double)D);
    double avg = (double)N / (double)D;
    double want_vecs = TT_MAX(want_docs * avg, (double)o->min_train_per_centroid * b->K * 1.05);
    if (o->max_train_per_centroid && want_vecs > (double)o->max_train_per_centroid * b->K)
        want_vecs = (double)o->max_train_per_centroid * b->K;
    /* Memory: the sample plus k-means work space must fit in half of the budget. */
    double cap_vecs = (double)o->memory_bytes * 0.5 / ((double)b->dim * 4.0 + 64.0);
    if (want_vecs > cap_vecs)
        want_vecs = cap_vecs;
    uint64_t ndocs = (uint64_t)ceil(want_vecs / avg);
    if (ndocs > D)
        ndocs = D;
    if (ndocs < 1)
        ndocs = 1;
    pl->docs = tt_alloc(ndocs, sizeof *pl->docs, "training sample");
    if (!pl->docs)
        return TT_ENOMEM;
    tt_rng rng;
    tt_rng_seed(&rng, o->seed);
    uint64_t chosen = 0;
    for (uint64_t d = 0; d < D && chosen < ndocs; d++)
        if ((double)(D - d) * tt_rng_uniform(&rng) < (double)(ndocs - chosen))
            pl->docs[chosen++] = d;
    pl->ndocs = chosen;
    for (uint64_t i = 0; i < pl->ndocs; i++) {
        if (is_held(pl, i))
            pl->nheld += in->doclens[pl->docs[i]];
        else
            pl->ntrain += in->doclens[pl->docs[i]];
    }
    if (b->K > pl->ntrain) {
        if (o->num_centroids)
            return tt_err(TT_EINVAL,
                          "%u centroids requested but only %llu training vectors fit (corpus "
                          "or --memory too small)",
                          b->K, (unsigned long long)pl->ntrain);
        b->K = default_centroids(pl->ntrain) > pl->ntrain ? (uint32_t)pl->ntrain
                                                          : default_centroids(pl->ntrain);
        while (b->K > pl->ntrain)
            b->K >>= 1;
    }
    return TT_OK;
}

/* Distributed: the processes of the group agree on a status (the sum of their failure
 * flags through the reduce); one that failed keeps its error, the others get TT_EIO. */
static int agree(const tt_build_group *g, int st) {
    if (!g)
        return st;
    int64_t flag = st != 0;
    if (g->reduce(g->user, &flag, 1, TT_REDUCE_SUM))
        return st ? st : tt_err(TT_EIO, "training: the group's reduce failed");
    if (st)
        return st;
    return flag ? tt_err(TT_EIO, "training: another process of the build failed") : TT_OK;
}

/* Reads rows [r0, r1) of the training vectors (the training documents' vectors laid end
 * to end), and the held-out vectors after them when `held`, into x. A document cut by
 * r0 or r1 is read whole into `scratch` and its rows in range copied. */
static int read_sample(builder *b, const plan *pl, uint64_t r0, uint64_t r1, bool held,
                       float *x, float *scratch) {
    const tt_input *in = b->in;
    const uint32_t dim = b->dim;
    uint64_t row = 0, nheld = 0;
    int st = TT_OK;
    for (int pass = 0; pass < (held ? 2 : 1); pass++) {
        for (uint64_t i = 0; i < pl->ndocs; i++) {
            if (is_held(pl, i) != (pass == 1))
                continue;
            uint64_t d = pl->docs[i], v0 = in->doc_vec0[d], n = in->doclens[d];
            if (pass == 0) {
                uint64_t lo = TT_MAX(row, r0), hi = TT_MIN(row + n, r1);
                if (lo < hi) {
                    float *dst = x + (lo - r0) * dim;
                    if (lo == row && hi == row + n) {
                        if ((st = tt_input_read(in, v0, n, dst)) ||
                            (st = tt_build_prepare_vectors(b, dst, v0, n)))
                            return st;
                    } else {
                        if ((st = tt_input_read(in, v0, n, scratch)) ||
                            (st = tt_build_prepare_vectors(b, scratch, v0, n)))
                            return st;
                        memcpy(dst, scratch + (lo - row) * dim, (hi - lo) * dim * sizeof(float));
                    }
                }
                row += n;
            } else {
                float *dst = x + (r1 - r0 + nheld) * dim;
                if ((st = tt_input_read(in, v0, n, dst)) ||
                    (st = tt_build_prepare_vectors(b, dst, v0, n)))
                    return st;
                nheld += n;
            }
            if ((st = tt_build_progress(b, "sample", i + 1 + (uint64_t)pass * pl->ndocs,
                                        2 * pl->ndocs)))
                return st;
        }
    }
    return st;
}

/* The adaptive codec's dimension weights: the mean square of each dimension over the
 * n training rows x (of ntrain in the whole), summed exactly (tt_fix_add), so a group's
 * processes, each with its rows, get the weights of one process. */
static int dim_weights(const float *x, uint64_t n, uint64_t ntrain, uint32_t dim,
                       const tt_build_group *g, float *importance) {
    int64_t *acc = tt_calloc(2 * (uint64_t)dim + 1, sizeof *acc, "dimension weights");
    int st = acc ? TT_OK : TT_ENOMEM;
    double m = 0;
    for (uint64_t i = 0; i < n * dim && acc; i++)
        m = TT_MAX(m, (double)x[i] * x[i]);
    int64_t e = tt_fix_exponent(m);
    if ((st = agree(g, st))) {
        free(acc);
        return st;
    }
    if (g && g->reduce(g->user, &e, 1, TT_REDUCE_MAX)) {
        free(acc);
        return tt_err(TT_EIO, "training: the group's reduce failed");
    }
    const double scale = tt_fix_scale((int)e);
    for (uint64_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < dim; j++)
            tt_fix_add(acc + 2 * (size_t)j, (double)x[i * dim + j] * x[i * dim + j], scale);
    if (g && g->reduce(g->user, acc, 2 * (size_t)dim, TT_REDUCE_SUM)) {
        free(acc);
        return tt_err(TT_EIO, "training: the group's reduce failed");
    }
    for (uint32_t j = 0; j < dim; j++)
        importance[j] = (float)(tt_fix_value(acc + 2 * (size_t)j, scale) / (double)ntrain);
    free(acc);
    return TT_OK;
}

/* The training, alone (g NULL) or as one process of a group whose plan allows it
 * (tt_build_train_group): process r reads and assigns rows [r0, r1) of the training
 * vectors, cut at multiples of TT_KMEANS_PART_ROWS, and k-means and the dimension
 * weights are summed over the group; rank 0 alone reads the held-out vectors and
 * trains the codec. */
static int train(builder *b, plan *pl, const tt_build_group *g) {
    const tt_build_options *o = b->o;
    const uint32_t dim = b->dim;
    const bool root = !g || g->rank == 0;
    int st = TT_OK;
    float *x = NULL, *held = NULL, *scratch = NULL;
    double t0 = tt_now();
    uint64_t ntrain = pl->ntrain, nheld = pl->nheld, r0 = 0, r1 = ntrain;
    if (g) {
        const uint64_t A = TT_KMEANS_PART_ROWS;
        r0 = ntrain * g->rank / g->size / A * A;
        r1 = g->rank + 1 == g->size ? ntrain : ntrain * (g->rank + 1) / g->size / A * A;
    }
    const uint64_t nloc = r1 - r0;
    uint64_t maxlen = 0;
    for (uint64_t i = 0; i < pl->ndocs; i++)
        maxlen = TT_MAX(maxlen, (uint64_t)b->in->doclens[pl->docs[i]]);
    x = tt_alloc(TT_MAX(nloc + (root ? nheld : 0), (uint64_t)1), (uint64_t)dim * sizeof(float),
                 "training sample");
    scratch = g ? tt_alloc(TT_MAX(maxlen, (uint64_t)1), (uint64_t)dim * sizeof(float),
                           "training sample")
                : NULL;
    if (!x || (g && !scratch))
        st = TT_ENOMEM;
    /* Read: training rows first, held-out rows (every 20th document) after. */
    if (!st)
        st = read_sample(b, pl, r0, r1, root && pl->ndocs >= 20, x, scratch);
    if ((st = agree(g, st)))
        goto done;
    if (nheld == 0) { /* tiny corpus (alone only): the codec learns from the training vectors */
        held = x;
        nheld = ntrain;
    } else {
        held = x + nloc * dim;
    }

    b->centroids = tt_alloc((uint64_t)b->K, (uint64_t)dim * sizeof(float), "centroids");
    tt_kmeans_part part = {.first = r0, .total = ntrain, .reduce = g ? g->reduce : NULL,
                           .user = g ? g->user : NULL, .rank = g ? g->rank : 0,
                           .size = g ? g->size : 0};
    tt_kmeans_params kp = {.k = b->K, .dim = dim, .iters = o->kmeans_iters, .seed = o->seed,
                           .threads = b->threads, .spherical = o->normalize,
                           .progress = o->progress, .progress_user = o->progress_user,
                           .cancel = o->cancel, .part = g ? &part : NULL};
    if ((st = agree(g, b->centroids ? TT_OK : TT_ENOMEM)) ||
        (st = tt_kmeans_train(x, nloc, &kp, b->centroids)))
        goto done;
    /* Centroids at float16 precision (as PLAID keeps them), before anything is assigned
     * to them or quantized against them: the residuals take up the rounding, and search
     * keeps and reads the centroids as float16, the same floats in half the bytes
     * (doc/format.md). Not where a value is beyond float16's range. */
    (void)tt_f16_round_n(b->centroids, (size_t)b->K * dim);
    /* The adaptive codec weighs each dimension by its mean square over the training
     * documents: where vectors, and so queries, put their energy. */
    float *importance = NULL;
    if (o->codec_tables == TT_CODEC_ADAPTIVE) {
        importance = tt_alloc(dim, sizeof *importance, "dimension weights");
        st = agree(g, importance ? TT_OK : TT_ENOMEM);
        if (!st)
            st = dim_weights(x, nloc, ntrain, dim, g, importance);
        if (st) {
            free(importance);
            goto done;
        }
    }
    if (!root) { /* rank 0 trains the codec and writes the codebook the others load */
        free(importance);
        free(b->centroids);
        b->centroids = NULL;
        goto done;
    }
    if ((st = tt_build_make_assigner(b))) {
        free(importance);
        goto done;
    }

    /* Codec: quantiles of held-out residuals (ColBERTv2 ResidualCodec). */
    uint32_t *ids = tt_alloc(nheld, sizeof *ids, "held-out assignment");
    if (!ids) {
        free(importance);
        st = TT_ENOMEM;
        goto done;
    }
    float *res = held == x ? tt_alloc(nheld, (uint64_t)b->dim * sizeof(float), "residuals")
                           : held; /* held-out vectors are not needed after this: in place */
    if (!res || (st = tt_assign(b->assigner, held, nheld, ids, b->threads))) {
        if (!res)
            st = TT_ENOMEM;
        free(ids);
        free(importance);
        if (res != held)
            free(res);
        goto done;
    }
    for (uint64_t i = 0; i < nheld; i++) {
        const float *c = b->centroids + (uint64_t)ids[i] * b->dim;
        for (uint32_t j = 0; j < b->dim; j++)
            res[i * b->dim + j] = held[i * b->dim + j] - c[j];
    }
    free(ids);
    st = tt_build_progress(b, "codec", 0, 1);
    if (!st) {
        /* TT_DEBIAS_AUTO: one scale per vector where the adaptive codec gives some
         * positions 8 bits (outlier dimensions), else debiased tables; the adaptive
         * tables are trained without debiasing first and, for the latter, debiased
         * after (the same tables as training with it: debiasing never moves a cutoff). */
        if (b->debias == TT_DEBIAS_AUTO && o->codec_tables != TT_CODEC_ADAPTIVE)
            b->debias = TT_DEBIAS_TABLE;
        tt_codec_params cp = {.kind = o->codec_tables, .nbits = (int)b->nbits,
                              .lloyd_rounds = o->lloyd_max_rounds, .importance = importance,
                              .debias = b->debias == TT_DEBIAS_TABLE};
        st = tt_codec_train_ex(&b->codec, res, nheld, b->dim, &cp);
        if (!st && b->debias == TT_DEBIAS_AUTO) {
            b->debias = tt_codec_n8(&b->codec) > 0 ? TT_DEBIAS_VECTOR : TT_DEBIAS_TABLE;
            if (b->debias == TT_DEBIAS_TABLE)
                st = tt_codec_debias(&b->codec, res, nheld);
        }
    }
    free(importance);
    if (!st) { /* measured reconstruction error, reported by tt_index_get_info */
        uint8_t *packed = malloc(b->codec.bytes_per_vec);
        float *rp = malloc((size_t)b->dim * 2 * sizeof *rp), *dec = rp ? rp + b->dim : NULL;
        double se = 0;
        if (!packed || !rp) {
            st = tt_err(TT_ENOMEM, "codec: out of memory");
        } else {
            for (uint64_t i = 0; i < nheld; i++) {
                tt_codec_to_positions(&b->codec, res + i * b->dim, rp);
                tt_codec_encode(&b->codec, rp, packed);
                tt_codec_decode(&b->codec, packed, dec);
                for (uint32_t j = 0; j < b->dim; j++) {
                    double e = (double)dec[j] - rp[j];
                    se += e * e;
                }
            }
            b->st.heldout_mse = se / ((double)nheld * b->dim);
        }
        free(packed);
        free(rp);
    }
    if (res != held)
        free(res);
    if (st || (st = tt_build_progress(b, "codec", 1, 1)))
        goto done;
    b->st.train_vectors = ntrain;
    b->st.heldout_vectors = nheld;
    b->st.num_centroids = b->K;
done:
    free(x);
    free(scratch);
    b->st.seconds_train = tt_now() - t0;
    return st;
}

int tt_build_train(builder *b) {
    plan pl;
    int st = make_plan(b, &pl);
    if (!st)
        st = train(b, &pl, NULL);
    free(pl.docs);
    return st;
}

int tt_build_train_group(builder *b, int st) {
    const tt_build_group *g = b->o->group;
    plan pl;
    memset(&pl, 0, sizeof pl);
    if (!g->reduce) /* no reduce: rank 0 trains alone */
        return st || g->rank ? st : tt_build_train(b);
    if ((st = agree(g, st)))
        return st;
    st = agree(g, make_plan(b, &pl));
    /* Distributed where the plan allows (every process decides alike): held-out
     * documents for the codec; else rank 0 trains alone. k-means, flat or hierarchical,
     * runs on every process. */
    if (!st && pl.ndocs >= 20 && pl.nheld > 0)
        st = train(b, &pl, g);
    else if (!st && g->rank == 0)
        st = train(b, &pl, NULL);
    free(pl.docs);
    return st;
}

int tt_build_make_assigner(builder *b) {
    return tt_assigner_new(b->centroids, b->K, b->dim, b->o->assign, b->o->seed, b->threads,
                           &b->assigner);
}

int tt_build_codebook_from(builder *b, const tt_index *src) {
    b->K = src->num_centroids;
    b->nbits = src->nbits;
    b->centroids = tt_alloc((uint64_t)b->K, (uint64_t)b->dim * sizeof(float), "centroids");
    if (!b->centroids)
        return TT_ENOMEM;
    /* The builder works in the input's dimension order; the index stores its centroids
     * in the codec's position order. */
    for (uint64_t k = 0; k < b->K; k++)
        tt_codec_to_input(&src->codec, src->centroids + k * b->dim, b->centroids + k * b->dim);
    int st = tt_codec_clone(&b->codec, &src->codec);
    if (st)
        return st;
    /* The codebook's own figures: what it was trained on, its held-out error (the
     * baseline of drift). */
    b->st.num_centroids = b->K;
    b->st.train_vectors = src->info.train_vectors;
    b->st.heldout_vectors = src->info.heldout_vectors;
    b->st.heldout_mse = src->info.heldout_mse;
    b->debias = (int)src->info.debias;
    return tt_build_make_assigner(b);
}

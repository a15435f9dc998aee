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

/* Chooses the training documents (Knuth's selection sampling: one ordered pass, O(1)
 * memory, so the sample is read in file order), reads and prepares their vectors,
 * and splits off every 20th sampled document as held-out data for the codec. */
int tt_build_train(builder *b) {
    const tt_build_options *o = b->o;
    tt_input *in = b->in;
    uint64_t D = in->num_docs, N = in->num_vectors;
    int st = TT_OK;
    float *x = NULL, *held = NULL;
    uint64_t *docs = NULL;
    double t0 = tt_now();

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

    docs = tt_alloc(ndocs, sizeof *docs, "training sample");
    if (!docs)
        return TT_ENOMEM;
    tt_rng rng;
    tt_rng_seed(&rng, o->seed);
    uint64_t chosen = 0, nvec = 0;
    for (uint64_t d = 0; d < D && chosen < ndocs; d++) {
        if ((double)(D - d) * tt_rng_uniform(&rng) < (double)(ndocs - chosen)) {
            docs[chosen++] = d;
            nvec += in->doclens[d];
        }
    }
    ndocs = chosen;
    x = tt_alloc(nvec, (uint64_t)b->dim * sizeof(float), "training sample");
    if (!x) {
        st = TT_ENOMEM;
        goto done;
    }
    /* Read: training docs first, held-out docs (every 20th, if there are >= 20) after. */
    uint64_t ntrain = 0, nheld = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t i = 0; i < ndocs; i++) {
            bool is_held = ndocs >= 20 && i % 20 == 19;
            if (is_held != (pass == 1))
                continue;
            uint64_t d = docs[i], v0 = in->doc_vec0[d], n = in->doclens[d];
            float *dst = x + (ntrain + nheld) * b->dim;
            if ((st = tt_input_read(in, v0, n, dst)) || (st = tt_build_prepare_vectors(b, dst, v0, n)))
                goto done;
            if (pass == 0)
                ntrain += n;
            else
                nheld += n;
            if ((st = tt_build_progress(b, "sample", i + 1 + pass * ndocs, 2 * ndocs)))
                goto done;
        }
    }
    if (nheld == 0) { /* tiny corpus: the codec learns from the training vectors */
        held = x;
        nheld = ntrain;
    } else {
        held = x + ntrain * b->dim;
    }
    if (b->K > ntrain) {
        if (o->num_centroids) {
            st = tt_err(TT_EINVAL,
                        "%u centroids requested but only %llu training vectors fit (corpus or "
                        "--memory too small)",
                        b->K, (unsigned long long)ntrain);
            goto done;
        }
        b->K = default_centroids(ntrain) > ntrain ? (uint32_t)ntrain : default_centroids(ntrain);
        while (b->K > ntrain)
            b->K >>= 1;
    }

    b->centroids = tt_alloc((uint64_t)b->K, (uint64_t)b->dim * sizeof(float), "centroids");
    if (!b->centroids) {
        st = TT_ENOMEM;
        goto done;
    }
    tt_kmeans_params kp = {.k = b->K, .dim = b->dim, .iters = o->kmeans_iters, .seed = o->seed,
                           .threads = b->threads, .spherical = o->normalize,
                           .progress = o->progress, .progress_user = o->progress_user,
                           .cancel = o->cancel};
    if ((st = tt_kmeans_train(x, ntrain, &kp, b->centroids)))
        goto done;
    if ((st = tt_build_make_assigner(b)))
        goto done;

    /* Codec: quantiles of held-out residuals (ColBERTv2 ResidualCodec). */
    uint32_t *ids = tt_alloc(nheld, sizeof *ids, "held-out assignment");
    if (!ids) {
        st = TT_ENOMEM;
        goto done;
    }
    float *res = held == x ? tt_alloc(nheld, (uint64_t)b->dim * sizeof(float), "residuals")
                           : held; /* held-out vectors are not needed after this: in place */
    if (!res || (st = tt_assign(b->assigner, held, nheld, ids, b->threads))) {
        if (!res)
            st = TT_ENOMEM;
        free(ids);
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
    /* The adaptive codec weighs each dimension by its mean square over the training
     * documents: where vectors, and so queries, put their energy. */
    float *importance = NULL;
    if (!st && o->codec_tables == TT_CODEC_ADAPTIVE) {
        double *acc = tt_calloc(b->dim, sizeof *acc, "dimension weights");
        importance = tt_alloc(b->dim, sizeof *importance, "dimension weights");
        if (!acc || !importance) {
            st = TT_ENOMEM;
        } else {
            for (uint64_t i = 0; i < ntrain; i++)
                for (uint32_t j = 0; j < b->dim; j++)
                    acc[j] += (double)x[i * b->dim + j] * x[i * b->dim + j];
            for (uint32_t j = 0; j < b->dim; j++)
                importance[j] = (float)(acc[j] / (double)ntrain);
        }
        free(acc);
    }
    if (!st) {
        tt_codec_params cp = {.kind = o->codec_tables, .nbits = (int)b->nbits,
                              .lloyd_rounds = o->lloyd_max_rounds, .importance = importance,
                              .debias = o->debias ? 1 : 0};
        st = tt_codec_train_ex(&b->codec, res, nheld, b->dim, &cp);
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
    free(docs);
    free(x);
    b->st.seconds_train = tt_now() - t0;
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
    return tt_build_make_assigner(b);
}

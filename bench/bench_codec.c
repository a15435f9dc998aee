/* bench_codec: one shared quantile table (ColBERTv2) vs one table per dimension, at
 * 1, 2 and 4 bits, on
 *   (a) real ColBERTv2 token vectors (emb/colbertv2_nanofiqa of the shared test data),
 *   (b) synthetic "LLM hidden state" vectors: 3584-d with a few outlier dimensions of
 *       20-50x larger scale,
 * plus the speed of encode / decode / LUT build / LUT dot (scalar and AVX2).
 *
 * Residuals are taken to the nearest of K spherical k-means centroids (tt_kmeans_train,
 * 10 Lloyd iterations; exact assignment with tt_assign). The codec is trained
 * on a random half of the vectors (held-out) and the reconstruction error measured on
 * the other half; MaxSim scores use every vector compressed, as an index would.
 *
 * Usage: bench_codec [--data DIR] [--n N] [--dim D] [--outliers K] [--seed S]
 *                    [--skip-real] [--skip-synthetic] [--skip-speed]
 * DIR defaults to $TT_DATA or ../shared/data. Prints Markdown tables. */
#include "common/common.h"
#include "quant/codec.h"
#include "quant/kmeans.h"
#include "input/input.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void die(const char *what) {
    fprintf(stderr, "bench_codec: %s: %s\n", what, tt_last_error());
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_codec: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static double gauss(tt_rng *r) {
    double u1 = tt_rng_uniform(r) + 1e-300, u2 = tt_rng_uniform(r);
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

/* ------------------------------------------------------------------ k-means */

/* Centroids by the library's spherical k-means (tt_kmeans_train, 10 Lloyd iterations,
 * one thread) and exact nearest-centroid ids (tt_assign, TT_ASSIGN_EXACT). */
static void centroids_and_ids(const float *x, uint64_t n, uint32_t dim, uint32_t K,
                              uint64_t seed, float *C, uint32_t *ids) {
    tt_kmeans_params p;
    memset(&p, 0, sizeof p);
    p.k = K;
    p.dim = dim;
    p.iters = 10;
    p.seed = seed;
    p.threads = 1;
    p.spherical = 1;
    if (tt_kmeans_train(x, n, &p, C) != TT_OK)
        die("tt_kmeans_train");
    tt_assigner *a = NULL;
    if (tt_assigner_new(C, K, dim, TT_ASSIGN_EXACT, seed, 1, &a) != TT_OK ||
        tt_assign(a, x, n, ids, 1) != TT_OK)
        die("tt_assign");
    tt_assigner_free(a);
}

/* ----------------------------------------------------------- evaluation */

/* A dataset: n unit vectors x, grouped into documents by doc0 (ndocs+1 offsets), and
 * in-distribution query vectors Q grouped into queries by q0 (nq+1 offsets). */
typedef struct dataset {
    const char *name;
    uint32_t dim;
    uint64_t n;
    float *x;
    uint64_t ndocs, *doc0;
    uint64_t nq, *q0;
    float *Q;
    uint32_t K;          /* centroids */
} dataset;

typedef struct result {
    double sqerr;        /* mean ||v - v_hat||^2 over evaluation vectors */
    double err_iso;      /* mean |<q, v - v_hat>|, random isotropic unit q */
    double err_q;        /* mean |<q, v - v_hat>|, in-distribution query vectors q */
    double maxsim_err;   /* mean |S - S_hat| / query length */
    double maxsim_bias;  /* mean (S_hat - S) / query length */
    double pair_agree;   /* fraction of doc pairs per query ordered as by exact MaxSim */
    double top10;        /* overlap of the top-10 documents with exact MaxSim */
} result;

/* MaxSim of every query against every document, from vectors V (n x dim). */
static void maxsim_all(const dataset *ds, const float *V, double *S) {
    uint64_t nqv = ds->q0[ds->nq];
    const uint64_t blk = 1024;
    float *P = xmalloc(nqv * blk * sizeof *P);
    float *best = xmalloc(nqv * ds->ndocs * sizeof *best);
    for (uint64_t i = 0; i < nqv * ds->ndocs; i++)
        best[i] = -INFINITY;
    uint64_t doc = 0;
    for (uint64_t v0 = 0; v0 < ds->n; v0 += blk) {
        uint64_t m = TT_MIN(blk, ds->n - v0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nqv, (int)m, (int)ds->dim, 1.0f,
                    ds->Q, (int)ds->dim, V + v0 * ds->dim, (int)ds->dim, 0.0f, P, (int)m);
        for (uint64_t j = 0; j < m; j++) {
            uint64_t v = v0 + j;
            while (v >= ds->doc0[doc + 1])
                doc++;
            for (uint64_t t = 0; t < nqv; t++) {
                float s = P[t * m + j];
                if (s > best[t * ds->ndocs + doc])
                    best[t * ds->ndocs + doc] = s;
            }
        }
    }
    for (uint64_t q = 0; q < ds->nq; q++)
        for (uint64_t d = 0; d < ds->ndocs; d++) {
            double s = 0;
            for (uint64_t t = ds->q0[q]; t < ds->q0[q + 1]; t++)
                s += best[t * ds->ndocs + d];
            S[q * ds->ndocs + d] = s;
        }
    free(P);
    free(best);
}

static int cmp_desc(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return (x < y) - (x > y);
}

static void ranking_agreement(const dataset *ds, const double *S, const double *Sh, result *res) {
    uint64_t agree = 0, pairs = 0, top = 0, topn = 0;
    double *tmp = xmalloc(ds->ndocs * 2 * sizeof *tmp);
    for (uint64_t q = 0; q < ds->nq; q++) {
        const double *a = S + q * ds->ndocs, *b = Sh + q * ds->ndocs;
        for (uint64_t i = 0; i < ds->ndocs; i++)
            for (uint64_t j = i + 1; j < ds->ndocs; j++, pairs++)
                agree += (a[i] > a[j]) == (b[i] > b[j]);
        uint64_t k = TT_MIN(10, ds->ndocs);
        for (uint64_t i = 0; i < ds->ndocs; i++) {
            tmp[2 * i] = a[i];
            tmp[2 * i + 1] = (double)i;
        }
        qsort(tmp, ds->ndocs, 2 * sizeof *tmp, cmp_desc);
        double thr_a = tmp[2 * (k - 1)];
        for (uint64_t i = 0; i < ds->ndocs; i++) {
            tmp[2 * i] = b[i];
            tmp[2 * i + 1] = (double)i;
        }
        qsort(tmp, ds->ndocs, 2 * sizeof *tmp, cmp_desc);
        for (uint64_t i = 0; i < k; i++)
            top += a[(uint64_t)tmp[2 * i + 1]] >= thr_a;
        topn += k;
    }
    res->pair_agree = (double)agree / (double)pairs;
    res->top10 = (double)top / (double)topn;
    free(tmp);
}

/* Evaluates one codec (c == NULL: centroid only) on ds: reconstruction errors on the
 * evaluation vectors (eval[i] != 0), MaxSim over all vectors. */
static void evaluate(const dataset *ds, const float *C, const uint32_t *ids, const uint8_t *eval,
                     const tt_codec *c, const float *Qiso, uint32_t niso, const double *Sexact,
                     result *res) {
    uint32_t dim = ds->dim;
    uint64_t nqv = ds->q0[ds->nq];
    float *Vh = xmalloc(ds->n * dim * sizeof *Vh), *e = xmalloc(dim * sizeof *e);
    float *r = xmalloc(dim * sizeof *r), *rh = xmalloc(dim * sizeof *rh);
    float *pi = xmalloc(niso * sizeof *pi), *pq = xmalloc(nqv * sizeof *pq);
    uint8_t *p = xmalloc(c ? c->bytes_per_vec : 1);
    double se = 0, ei = 0, eq = 0;
    uint64_t ne = 0;
    for (uint64_t i = 0; i < ds->n; i++) {
        const float *v = ds->x + i * dim, *cv = C + (size_t)ids[i] * dim;
        for (uint32_t d = 0; d < dim; d++)
            r[d] = v[d] - cv[d];
        if (c) {
            tt_codec_encode(c, r, p);
            tt_codec_decode(c, p, rh);
        } else {
            memset(rh, 0, dim * sizeof *rh);
        }
        for (uint32_t d = 0; d < dim; d++) {
            Vh[i * dim + d] = cv[d] + rh[d];
            e[d] = r[d] - rh[d];
        }
        if (!eval[i])
            continue;
        ne++;
        for (uint32_t d = 0; d < dim; d++)
            se += (double)e[d] * e[d];
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)niso, (int)dim, 1.0f, Qiso, (int)dim, e, 1,
                    0.0f, pi, 1);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nqv, (int)dim, 1.0f, ds->Q, (int)dim, e, 1,
                    0.0f, pq, 1);
        for (uint32_t t = 0; t < niso; t++)
            ei += fabs(pi[t]);
        for (uint64_t t = 0; t < nqv; t++)
            eq += fabs(pq[t]);
    }
    res->sqerr = se / (double)ne;
    res->err_iso = ei / ((double)ne * niso);
    res->err_q = eq / ((double)ne * (double)nqv);
    double *Sh = xmalloc(ds->nq * ds->ndocs * sizeof *Sh);
    maxsim_all(ds, Vh, Sh);
    double me = 0, mb = 0;
    for (uint64_t q = 0; q < ds->nq; q++)
        for (uint64_t d = 0; d < ds->ndocs; d++) {
            double diff = (Sh[q * ds->ndocs + d] - Sexact[q * ds->ndocs + d]) /
                          (double)(ds->q0[q + 1] - ds->q0[q]);
            me += fabs(diff);
            mb += diff;
        }
    res->maxsim_err = me / (double)(ds->nq * ds->ndocs);
    res->maxsim_bias = mb / (double)(ds->nq * ds->ndocs);
    ranking_agreement(ds, Sexact, Sh, res);
    free(Vh);
    free(e);
    free(r);
    free(rh);
    free(pi);
    free(pq);
    free(p);
    free(Sh);
}

static void run_dataset(const dataset *ds, uint64_t seed) {
    uint32_t dim = ds->dim, K = ds->K;
    double t0 = tt_now();
    float *C = xmalloc((size_t)K * dim * sizeof *C);
    uint32_t *ids = xmalloc(ds->n * sizeof *ids);
    centroids_and_ids(ds->x, ds->n, dim, K, seed, C, ids);
    double t_km = tt_now() - t0;

    /* random half held out for the codec, the other half for the error measurements */
    tt_rng r;
    tt_rng_seed(&r, seed + 1);
    uint8_t *eval = xmalloc(ds->n);
    uint64_t nheld = 0;
    for (uint64_t i = 0; i < ds->n; i++) {
        eval[i] = (uint8_t)(tt_rng_uniform(&r) >= 0.5);
        nheld += !eval[i];
    }
    float *held = xmalloc(nheld * dim * sizeof *held);
    double res_energy = 0;
    for (uint64_t i = 0, h = 0; i < ds->n; i++) {
        if (eval[i])
            continue;
        for (uint32_t d = 0; d < dim; d++) {
            float v = ds->x[i * dim + d] - C[(size_t)ids[i] * dim + d];
            held[h * dim + d] = v;
            res_energy += (double)v * v;
        }
        h++;
    }
    const uint32_t niso = 32;
    float *Qiso = xmalloc(niso * dim * sizeof *Qiso);
    for (uint64_t i = 0; i < (uint64_t)niso * dim; i++)
        Qiso[i] = (float)gauss(&r);
    tt_normalize_rows(Qiso, niso, dim);
    double *Sexact = xmalloc(ds->nq * ds->ndocs * sizeof *Sexact);
    maxsim_all(ds, ds->x, Sexact);

    printf("\n### %s\n\n", ds->name);
    printf("%llu vectors x %u dims, %llu docs, %llu queries (%llu query vectors); k-means K=%u "
           "(10 Lloyd iterations, %.1f s); codec trained on %llu held-out vectors (%llu values), "
           "errors on the other %llu; mean held-out ||r||^2 = %.4f.\n\n",
           (unsigned long long)ds->n, dim, (unsigned long long)ds->ndocs,
           (unsigned long long)ds->nq, (unsigned long long)ds->q0[ds->nq], K, t_km,
           (unsigned long long)nheld, (unsigned long long)(nheld * dim),
           (unsigned long long)(ds->n - nheld),
           res_energy / (double)nheld);
    printf("| nbits | tables | train s | mean sq. err | err iso q | err in-dist q | MaxSim err "
           "/ q-token | MaxSim bias / q-token | pair order agree | top-10 overlap |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    result res;
    evaluate(ds, C, ids, eval, NULL, Qiso, niso, Sexact, &res);
    printf("| 0 | centroid only | - | %.5f | %.5f | %.5f | %.5f | %+.5f | %.4f | %.3f |\n",
           res.sqerr, res.err_iso, res.err_q, res.maxsim_err, res.maxsim_bias, res.pair_agree,
           res.top10);
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        for (int per_dim = 0; per_dim <= 1; per_dim++) {
            tt_codec c;
            double t1 = tt_now();
            if (tt_codec_train(&c, held, nheld, dim, nbits, per_dim) != TT_OK)
                die("tt_codec_train");
            double tt = tt_now() - t1;
            evaluate(ds, C, ids, eval, &c, Qiso, niso, Sexact, &res);
            printf("| %d | %s | %.2f | %.5f | %.5f | %.5f | %.5f | %+.5f | %.4f | %.3f |\n",
                   nbits, per_dim ? "per-dim" : "shared", tt, res.sqerr, res.err_iso, res.err_q,
                   res.maxsim_err, res.maxsim_bias, res.pair_agree, res.top10);
            fflush(stdout);
            tt_codec_free(&c);
        }
    }
    free(C);
    free(ids);
    free(eval);
    free(held);
    free(Qiso);
    free(Sexact);
}

/* --------------------------------------------------------------- datasets */

static int load_real(const char *data, dataset *ds) {
    char path[4096];
    tt_npy_header h;
    int64_t *dl = NULL;
    uint64_t nd = 0;
    memset(ds, 0, sizeof *ds);
    snprintf(path, sizeof path, "%s/emb/colbertv2_nanofiqa/doc_token_embeddings.npy", data);
    if (tt_npy_read_floats(path, &ds->x, &h) != TT_OK)
        return -1;
    ds->n = h.shape[0];
    ds->dim = (uint32_t)h.shape[1];
    snprintf(path, sizeof path, "%s/emb/colbertv2_nanofiqa/doclens.npy", data);
    if (tt_npy_read_ints(path, &dl, &nd) != TT_OK)
        return -1;
    ds->ndocs = nd;
    ds->doc0 = xmalloc((nd + 1) * sizeof *ds->doc0);
    ds->doc0[0] = 0;
    for (uint64_t i = 0; i < nd; i++)
        ds->doc0[i + 1] = ds->doc0[i] + (uint64_t)dl[i];
    free(dl);
    if (ds->doc0[nd] != ds->n) {
        fprintf(stderr, "bench_codec: doclens do not sum to the vector count\n");
        exit(1);
    }
    snprintf(path, sizeof path, "%s/emb/colbertv2_nanofiqa/query_token_embeddings.npy", data);
    if (tt_npy_read_floats(path, &ds->Q, &h) != TT_OK)
        return -1;
    ds->nq = h.shape[0];
    ds->q0 = xmalloc((ds->nq + 1) * sizeof *ds->q0);
    for (uint64_t q = 0; q <= ds->nq; q++)
        ds->q0[q] = q * h.shape[1];
    return 0;
}

/* Synthetic hidden states: nclusters centres c_k[d] = s_d * N(0,1) and vectors
 * v = c_k + s_d * N(0,1), L2-normalised, where s_d = 1 except for `outliers` dimensions
 * spread over the vector with s_d from 20 to 50. Documents and queries are runs of
 * 8 vectors (DiffRetriever-style fixed-length bags); queries are fresh vectors. */
static void make_synthetic(dataset *ds, uint64_t n, uint32_t dim, uint32_t outliers,
                           uint64_t seed) {
    const uint32_t nclusters = 64, per = 8, nq = 32;
    memset(ds, 0, sizeof *ds);
    ds->dim = dim;
    ds->n = n / per * per;
    tt_rng r;
    tt_rng_seed(&r, seed);
    float *s = xmalloc(dim * sizeof *s), *cen = xmalloc((size_t)nclusters * dim * sizeof *cen);
    for (uint32_t d = 0; d < dim; d++)
        s[d] = 1.0f;
    for (uint32_t i = 0; i < outliers; i++)
        s[(uint32_t)(((uint64_t)i * 449 + 17) % dim)] =
            outliers > 1 ? 20.0f + 30.0f * (float)i / (float)(outliers - 1) : 35.0f;
    for (uint64_t i = 0; i < (uint64_t)nclusters * dim; i++)
        cen[i] = s[i % dim] * (float)gauss(&r);
    uint64_t total = ds->n + (uint64_t)nq * per;
    float *all = xmalloc(total * dim * sizeof *all);
    for (uint64_t i = 0; i < total; i++) {
        uint32_t k = (uint32_t)tt_rng_below(&r, nclusters);
        for (uint32_t d = 0; d < dim; d++)
            all[i * dim + d] = cen[(size_t)k * dim + d] + s[d] * (float)gauss(&r);
    }
    tt_normalize_rows(all, total, dim);
    ds->x = all;
    ds->Q = all + ds->n * dim;
    ds->ndocs = ds->n / per;
    ds->doc0 = xmalloc((ds->ndocs + 1) * sizeof *ds->doc0);
    for (uint64_t i = 0; i <= ds->ndocs; i++)
        ds->doc0[i] = i * per;
    ds->nq = nq;
    ds->q0 = xmalloc((nq + 1) * sizeof *ds->q0);
    for (uint64_t i = 0; i <= nq; i++)
        ds->q0[i] = i * per;
    ds->K = nclusters;
    free(s);
    free(cen);
}

/* ------------------------------------------------------------------ speed */

/* CPU time of the calling thread: the machine is shared, and wall time counts the
 * time other processes hold the core. */
static double thread_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of `reps` timings of body, in thread CPU seconds (the least disturbed run). */
#define BEST_OF(reps, out, body)                                                         \
    do {                                                                                 \
        double best_ = INFINITY;                                                         \
        for (int rep_ = 0; rep_ < (reps); rep_++) {                                      \
            double t0_ = thread_seconds();                                               \
            body;                                                                        \
            double dt_ = thread_seconds() - t0_;                                         \
            best_ = dt_ < best_ ? dt_ : best_;                                           \
        }                                                                                \
        (out) = best_;                                                                   \
    } while (0)

static void speed(uint32_t dim, uint64_t seed) {
    const uint64_t n = dim >= 1024 ? 1000 : 20000;
    const int reps = 15;
    tt_rng r;
    tt_rng_seed(&r, seed);
    float *x = xmalloc(n * dim * sizeof *x), *out = xmalloc(dim * sizeof *out);
    float *q = xmalloc(dim * sizeof *q);
    for (uint64_t i = 0; i < n * dim; i++)
        x[i] = 0.05f * (float)gauss(&r);
    for (uint32_t d = 0; d < dim; d++)
        q[d] = (float)gauss(&r);
    for (int nbits = 1; nbits <= 4; nbits *= 2) {
        for (int per_dim = 0; per_dim <= 1; per_dim++) {
            tt_codec c;
            if (tt_codec_train(&c, x, TT_MIN(n, 2000), dim, nbits, per_dim) != TT_OK)
                die("tt_codec_train");
            uint32_t bpv = c.bytes_per_vec;
            uint8_t *P = xmalloc(n * bpv);
            float *lut = xmalloc((size_t)bpv * 256 * sizeof *lut);
            volatile float sink = 0;
            double t_enc, t_dec, t_dd, t_lut, t_sc, t_av;
            BEST_OF(reps, t_enc, for (uint64_t i = 0; i < n; i++)
                                     tt_codec_encode(&c, x + i * dim, P + i * bpv));
            BEST_OF(reps, t_dec, for (uint64_t i = 0; i < n; i++) {
                tt_codec_decode(&c, P + i * bpv, out);
                sink += out[i % dim];
            });
            /* decode + dot: the baseline the LUT replaces */
            BEST_OF(reps, t_dd, for (uint64_t i = 0; i < n; i++) {
                tt_codec_decode(&c, P + i * bpv, out);
                sink += cblas_sdot((int)dim, q, 1, out, 1);
            });
            BEST_OF(reps, t_lut, for (int k = 0; k < 20; k++) tt_codec_build_lut(&c, q, lut));
            tt_codec_build_lut(&c, q, lut);
            BEST_OF(reps, t_sc, for (uint64_t i = 0; i < n; i++)
                                    sink += tt_codec_dot_lut_scalar(lut, P + i * bpv, bpv));
            BEST_OF(reps, t_av, for (uint64_t i = 0; i < n; i++)
                                    sink += tt_codec_dot_lut_avx2(lut, P + i * bpv, bpv));
            (void)sink;
            printf("| %u | %d | %s | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f%s |\n", dim, nbits,
                   per_dim ? "per-dim" : "shared", t_enc / (double)n * 1e9,
                   t_dec / (double)n * 1e9, t_dd / (double)n * 1e9, t_lut / 20 * 1e6,
                   t_sc / (double)n * 1e9, t_av / (double)n * 1e9,
                   tt_codec_have_avx2() ? "" : " (no AVX2)");
            fflush(stdout);
            free(P);
            free(lut);
            tt_codec_free(&c);
        }
    }
    free(x);
    free(out);
    free(q);
}

int main(int argc, char **argv) {
    const char *data = getenv("TT_DATA");
    uint64_t n = 12000, seed = 42;
    uint32_t dim = 3584, outliers = 8;
    int skip_real = 0, skip_syn = 0, skip_speed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc)
            data = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc)
            dim = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--outliers") && i + 1 < argc)
            outliers = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--skip-real"))
            skip_real = 1;
        else if (!strcmp(argv[i], "--skip-synthetic"))
            skip_syn = 1;
        else if (!strcmp(argv[i], "--skip-speed"))
            skip_speed = 1;
        else {
            fprintf(stderr, "usage: %s [--data DIR] [--n N] [--dim D] [--outliers K] "
                    "[--seed S] [--skip-real] [--skip-synthetic] [--skip-speed]\n", argv[0]);
            return 2;
        }
    }
    if (!data || !*data)
        data = "../shared/data";
    if (n < 64 || dim < 8 || outliers > dim) {
        fprintf(stderr, "bench_codec: need --n >= 64, --dim >= 8, --outliers <= dim\n");
        return 2;
    }
    printf("bench_codec: seed %llu, AVX2 %s\n", (unsigned long long)seed,
           tt_codec_have_avx2() ? "yes" : "no");
    dataset ds;
    if (!skip_real) {
        if (load_real(data, &ds) != 0) {
            fprintf(stderr, "bench_codec: skipping the ColBERTv2 data: %s\n", tt_last_error());
        } else {
            uint32_t Ks[2] = {64, 256};
            char name[128];
            for (int k = 0; k < 2; k++) {
                ds.K = Ks[k];
                snprintf(name, sizeof name, "ColBERTv2 NanoFiQA token vectors, K=%u", Ks[k]);
                ds.name = name;
                run_dataset(&ds, seed);
            }
            free(ds.x);
            free(ds.Q);
            free(ds.doc0);
            free(ds.q0);
        }
    }
    if (!skip_syn) {
        char name[160];
        make_synthetic(&ds, n, dim, outliers, seed);
        snprintf(name, sizeof name, "synthetic %u-d hidden states, %u outlier dims%s", dim,
                 outliers, outliers ? " (x20..x50)" : "");
        ds.name = name;
        run_dataset(&ds, seed);
        free(ds.x); /* Q points into x */
        free(ds.doc0);
        free(ds.q0);
    }
    if (!skip_speed) {
        printf("\n### speed (one thread, best of 15 in thread CPU time; ns per vector, "
               "LUT build in us per query vector)\n\n");
        printf("| dim | nbits | tables | encode | decode | decode+dot | LUT build us | LUT dot "
               "scalar | LUT dot AVX2 |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
        speed(128, seed);
        speed(3584, seed);
    }
    return 0;
}

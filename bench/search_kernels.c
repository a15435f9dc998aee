/* Stage-4 kernel choice: decompressed MaxSim of n documents by
 *   (a) decode the packed residuals to floats, adding their centroid rows, + one sgemm
 *       (C + R)·Qᵀ per group (src/search/score.c), or
 *   (b) per-query-vector lookup tables over the packed bytes (tt_codec_build_lut +
 *       tt_codec_dot_lut, no floats materialised) plus precomputed centroid scores St,
 * both taking the per-query-vector maxima. Reports
 * thread CPU time per call (median of reps) and the largest score difference.
 *
 * Build (from a configured build directory B):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -include B/config.h -I include -I src \
 *       bench/search_kernels.c B/.libs/libtartan-internal.a -lopenblas -luring -lxxhash \
 *       -lm -lpthread -o search_kernels
 * Usage: search_kernels DIM NQ DOCLEN NDOCS [NBITS] [REPS] [per-dim|adaptive]
 * (adaptive: trained with 4 outlier dimensions, which take 8 bits each, so that the
 * decoder runs its 8-, 2- and 1-bit runs as on LLM hidden states) */
#include "search/search.h"
#include "benchutil.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s DIM NQ DOCLEN NDOCS [NBITS] [REPS] [per-dim|adaptive]\n",
                argv[0]);
        return 2;
    }
    const uint32_t dim = (uint32_t)atoi(argv[1]), nq = (uint32_t)atoi(argv[2]);
    const uint32_t doclen = (uint32_t)atoi(argv[3]), ndocs = (uint32_t)atoi(argv[4]);
    const uint32_t nbits = argc > 5 ? (uint32_t)atoi(argv[5]) : 2;
    const int reps = argc > 6 ? atoi(argv[6]) : 21;
    const int adaptive = argc > 7 && !strcmp(argv[7], "adaptive");
    const uint32_t K = 1024, nqp = tt_qpad(nq), nvec = doclen * ndocs;
    tt_rng r;
    tt_rng_seed(&r, 7);

    /* A per-dimension codec trained on Gaussian residuals (adaptive: 4 of them 20x wider
     * and weighted 1000x). */
    float *train = malloc((size_t)4096 * dim * sizeof *train), *imp = malloc(dim * sizeof *imp);
    for (uint32_t j = 0; j < dim; j++)
        imp[j] = adaptive && j % (dim / 4) == 0 ? 1000.0f : 1.0f;
    for (size_t i = 0; i < (size_t)4096 * dim; i++)
        train[i] = 0.05f * bench_gauss(&r) * (imp[i % dim] > 1 ? 20.0f : 1.0f);
    tt_codec c;
    tt_codec_params cp = {.kind = adaptive ? TT_CODEC_ADAPTIVE : TT_CODEC_PER_DIM,
                          .nbits = (int)nbits, .lloyd_rounds = 25, .importance = imp};
    if (tt_codec_train_ex(&c, train, 4096, dim, &cp)) {
        fprintf(stderr, "codec: %s\n", tt_last_error());
        return 1;
    }
    free(train);
    free(imp);
    tt_resdec dec;
    tt_resdec_init(&dec, &c);
    float *Qp = calloc((size_t)nqp * dim, sizeof *Qp);
    for (size_t i = 0; i < (size_t)nq * dim; i++)
        Qp[i] = bench_gauss(&r);
    tt_normalize_rows(Qp, nq, dim);
    /* Centroids, and their exact scores St for the lookup-table path (which thus gets
     * the centroid part for free; the decode path adds the centroid rows, as src/search/decode.c). */
    float *C = malloc((size_t)K * dim * sizeof *C);
    for (size_t i = 0; i < (size_t)K * dim; i++)
        C[i] = bench_gauss(&r);
    tt_normalize_rows(C, K, dim);
    float *St = calloc((size_t)K * nqp, sizeof *St);
    for (uint32_t k = 0; k < K; k++)
        for (uint32_t i = 0; i < nq; i++) {
            double dot = 0;
            for (uint32_t j = 0; j < dim; j++)
                dot += (double)C[(size_t)k * dim + j] * Qp[(size_t)i * dim + j];
            St[(size_t)k * nqp + i] = (float)dot;
        }
    uint8_t *packed = malloc((size_t)nvec * c.bytes_per_vec);
    for (size_t i = 0; i < (size_t)nvec * c.bytes_per_vec; i++)
        packed[i] = (uint8_t)tt_rng_next(&r);
    uint32_t *codes = malloc(nvec * sizeof *codes), *lens = malloc(ndocs * sizeof *lens);
    for (uint32_t v = 0; v < nvec; v++)
        codes[v] = (uint32_t)tt_rng_below(&r, K);
    for (uint32_t d = 0; d < ndocs; d++)
        lens[d] = doclen;
    float *R = calloc(tt_maxsim_rows(nvec) * dim, sizeof *R);
    float *QR = malloc(tt_maxsim_rows(nvec) * nqp * sizeof *QR);
    float *sa = malloc(ndocs * sizeof *sa), *sb = malloc(ndocs * sizeof *sb);
    float *lut = malloc((size_t)nq * c.bytes_per_vec * 256 * sizeof *lut);
    float *m = malloc(nq * sizeof *m);
    double *ta = malloc(reps * sizeof *ta), *tb = malloc(reps * sizeof *tb);

    for (int rep = 0; rep < reps; rep++) {
        /* In groups of at most 2^18 decoded floats (at least one document), as src/search/score.c. */
        double t0 = bench_cpu_now();
        const uint32_t gdocs = TT_MAX(1u, (1u << 18) / dim / doclen);
        for (uint32_t d0 = 0; d0 < ndocs; d0 += gdocs) {
            uint32_t g = TT_MIN(gdocs, ndocs - d0);
            size_t v0 = (size_t)d0 * doclen;
            tt_resdec_decode_add(&dec, packed + v0 * c.bytes_per_vec, (uint64_t)g * doclen, C,
                                 codes + v0, R);
            tt_maxsim_group(Qp, NULL, nq, nqp, dim, R, lens, g, QR, sa + d0);
        }
        ta[rep] = bench_cpu_now() - t0;

        t0 = bench_cpu_now();
        for (uint32_t i = 0; i < nq; i++)
            tt_codec_build_lut(&c, Qp + (size_t)i * dim, lut + (size_t)i * c.bytes_per_vec * 256);
        for (uint32_t d = 0; d < ndocs; d++) {
            for (uint32_t i = 0; i < nq; i++)
                m[i] = -INFINITY;
            for (uint32_t j = 0; j < doclen; j++) {
                uint32_t v = d * doclen + j;
                const float *s = St + (size_t)codes[v] * nqp;
                const uint8_t *p = packed + (size_t)v * c.bytes_per_vec;
                for (uint32_t i = 0; i < nq; i++) {
                    float y = s[i] + tt_codec_dot_lut(lut + (size_t)i * c.bytes_per_vec * 256, p,
                                                      c.bytes_per_vec);
                    m[i] = y > m[i] ? y : m[i];
                }
            }
            float sum = 0;
            for (uint32_t i = 0; i < nq; i++)
                sum += m[i];
            sb[d] = sum;
        }
        tb[rep] = bench_cpu_now() - t0;
    }
    double maxdiff = 0;
    for (uint32_t d = 0; d < ndocs; d++)
        maxdiff = fmax(maxdiff, fabs((double)sa[d] - sb[d]) / (1 + fabs((double)sa[d])));
    qsort(ta, reps, sizeof *ta, bench_dcmp);
    qsort(tb, reps, sizeof *tb, bench_dcmp);
    printf("dim %u nq %u nbits %u %s: %u docs x %u vectors: decode+sgemm %.3f ms, "
           "lut %.3f ms (lut/decode %.2fx); max rel. score difference %.2g\n",
           dim, nq, nbits, adaptive ? "adaptive" : "per-dim", ndocs, doclen,
           1e3 * ta[reps / 2], 1e3 * tb[reps / 2],
           tb[reps / 2] / ta[reps / 2], maxdiff);
    tt_resdec_free(&dec);
    tt_codec_free(&c);
    free(Qp);
    free(St);
    free(C);
    free(packed);
    free(codes);
    free(lens);
    free(R);
    free(QR);
    free(sa);
    free(sb);
    free(lut);
    free(m);
    free(ta);
    free(tb);
    return 0;
}

/* Stage 4's lookup-table pass alone (tt_reslut_dot, src/search/rlut.c): the approximate
 * <q, r> of one document of DOCLEN packed 2-bit residuals of DIM dimensions (a
 * per-dimension codec) against NQP query rows, by each of the loops this CPU has: AVX2,
 * AVX-512BW (two query rows a register), VBMI + VNNI (two positions a register; where
 * tt_reslut_vbmi_on says search uses it). Prints the
 * median thread CPU time of a document over REPS rounds of DOCS documents, each loop's
 * rounds alternated, and checks that every loop wrote the same floats.
 *
 * Built with the rest (B/bench/bench_reslut); usage: bench_reslut DIM NQP DOCLEN [REPS] */
#include "search/decode.h"
#include "benchutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DOCS = 64, PATHS = 3 };

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s DIM NQP DOCLEN [REPS]\n", argv[0]);
        return 2;
    }
    const uint32_t dim = (uint32_t)atoi(argv[1]), nqp = (uint32_t)atoi(argv[2]);
    const uint32_t len = (uint32_t)atoi(argv[3]);
    const int reps = argc > 4 ? atoi(argv[4]) : 101;
    if (dim < 4 || nqp == 0 || nqp % 4 || len == 0 || reps <= 0) {
        fprintf(stderr, "DIM >= 4, NQP a multiple of 4, DOCLEN and REPS > 0\n");
        return 2;
    }
    tt_rng r;
    tt_rng_seed(&r, 7);
    /* a per-dimension 2-bit codec: 3 cut points and 4 weights a dimension */
    float *cut = malloc((size_t)dim * 3 * sizeof *cut), *w = malloc((size_t)dim * 4 * sizeof *w);
    for (uint32_t k = 0; k < dim; k++)
        for (uint32_t b = 0; b < 4; b++) {
            if (b < 3)
                cut[k * 3 + b] = -0.1f + 0.1f * (float)b;
            w[k * 4 + b] = 0.05f * bench_gauss(&r);
        }
    tt_codec c;
    tt_resdec d;
    tt_reslut L;
    if (tt_codec_init(&c, dim, 2, dim, cut, w) || tt_resdec_init(&d, &c) ||
        tt_reslut_init(&L, &d) || !L.npos) {
        fprintf(stderr, "no lookup tables: %s\n", tt_last_error());
        return 1;
    }
    const size_t bpv = c.bytes_per_vec, per_doc = (size_t)len * bpv;
    uint8_t *packed = malloc(DOCS * per_doc);
    float *Q = malloc((size_t)nqp * dim * sizeof *Q), *x = malloc((size_t)dim * sizeof *x);
    float *out[PATHS];
    for (size_t i = 0; i < DOCS * per_doc; i++)
        packed[i] = (uint8_t)tt_rng_next(&r);
    for (size_t i = 0; i < (size_t)nqp * dim; i++)
        Q[i] = bench_gauss(&r);
    if (tt_reslut_set(&L, &d, Q, nqp)) {
        fprintf(stderr, "%s\n", tt_last_error());
        return 1;
    }
    const char *name[PATHS] = {"AVX2", "AVX-512BW", "VBMI"};
    const int has[PATHS] = {L.avx2, L.avx512, tt_reslut_vbmi_on(&L)};
    double *t[PATHS];
    for (int p = 0; p < PATHS; p++) {
        out[p] = malloc((size_t)DOCS * len * nqp * sizeof *out[p]);
        t[p] = malloc(reps * sizeof *t[p]);
    }
    for (int k = 0; k < reps; k++)
        for (int p = 0; p < PATHS && has[p]; p++) {
            L.avx512 = p >= 1;
            L.vbmi = p >= 2;
            const double t0 = bench_cpu_now();
            for (int doc = 0; doc < DOCS; doc++)
                tt_reslut_dot(&L, &d, packed + doc * per_doc, len, Q, x,
                              out[p] + (size_t)doc * len * nqp);
            t[p][k] = (bench_cpu_now() - t0) / DOCS;
        }
    printf("dim %u, nqp %u, doclen %u:", dim, nqp, len);
    for (int p = 0; p < PATHS && has[p]; p++) {
        qsort(t[p], reps, sizeof *t[p], bench_dcmp);
        const int same = !memcmp(out[p], out[0], (size_t)DOCS * len * nqp * sizeof *out[p]);
        printf(" %s %.2f us%s (%.2fx)", name[p], t[p][reps / 2] * 1e6, same ? "" : " DIFFERENT",
               t[0][reps / 2] / t[p][reps / 2]);
        if (!same)
            return 1;
    }
    printf("\n");
    return 0;
}

/* tartan-synth: makes a synthetic multi-vector collection with known answers, for the
 * demo, the tests and the benchmarks. Documents draw their vectors around a few
 * "topic" centres; each query is built from a target document's vectors plus noise,
 * and the qrels name that document. With --outliers N, N dimensions behave like the
 * "massive activations" of LLM hidden states (Sun et al., "Massive Activations in
 * Large Language Models", 2024): before normalisation they carry an offset shared by
 * every vector (--outlier-offset, in units of the other dimensions' spread) plus noise
 * 20x the other dimensions' spread (--outlier-spread), so that a handful of dimensions
 * hold most of each document vector's energy; query vectors give them the share
 * --outlier-query of theirs (queries of such encoders weigh them less).
 * Output (PREFIX.*): vectors.npy [N, dim] (float32
 * or float16), doclens.npy (int64), ids.txt, queries.npy [Q, Kq, dim] float32,
 * qids.txt, qrels.tsv. Written in chunks, so corpora larger than RAM are fine. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }
static float gauss(void) {
    double u1 = unif() + 1e-300, u2 = unif();
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}
static void normalize(float *x, uint32_t d) {
    double s = 0;
    for (uint32_t j = 0; j < d; j++)
        s += (double)x[j] * x[j];
    float inv = s > 0 ? (float)(1 / sqrt(s)) : 0;
    for (uint32_t j = 0; j < d; j++)
        x[j] *= inv;
}

static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    uint32_t man = u & 0x7fffff;
    if (e <= 0) { /* tiny values: flush to signed zero (inputs are unit vectors) */
        return (uint16_t)sign;
    }
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++;
    return (uint16_t)h;
}

/* .npy v1.0 header padded to 128 bytes, shape rewritten at the end. */
static int npy_header(FILE *f, const char *descr, const uint64_t *shape, int ndim) {
    char dict[128], sh[96];
    if (ndim == 1)
        snprintf(sh, sizeof sh, "(%llu,)", (unsigned long long)shape[0]);
    else if (ndim == 2)
        snprintf(sh, sizeof sh, "(%llu, %llu)", (unsigned long long)shape[0],
                 (unsigned long long)shape[1]);
    else
        snprintf(sh, sizeof sh, "(%llu, %llu, %llu)", (unsigned long long)shape[0],
                 (unsigned long long)shape[1], (unsigned long long)shape[2]);
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                     descr, sh);
    if (n < 0 || n > 117)
        return -1;
    memset(dict + n, ' ', (size_t)(117 - n));
    dict[117] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
    rewind(f);
    return fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, 118, f) == 118 ? 0 : -1;
}

static FILE *open_out(const char *prefix, const char *suffix) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%s", prefix, suffix);
    FILE *f = fopen(path, "wb");
    if (!f)
        fprintf(stderr, "tartan-synth: cannot create %s: %s\n", path, strerror(errno));
    return f;
}

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan-synth --out PREFIX [--docs N] [--doclen L | --doclen MIN-MAX] [--dim D]\n"
        "                    [--topics T] [--noise S] [--queries Q] [--qlen K] [--qnoise S]\n"
        "                    [--seed S] [--f16] [--outliers N] [--outlier-offset O]\n"
        "                    [--outlier-spread S] [--outlier-query F]\n");
}

int main(int argc, char **argv) {
    static const struct option lo[] = {
        {"out", 1, 0, 'o'}, {"docs", 1, 0, 'n'}, {"doclen", 1, 0, 'l'}, {"dim", 1, 0, 'd'},
        {"topics", 1, 0, 't'}, {"noise", 1, 0, 's'}, {"queries", 1, 0, 'q'}, {"qlen", 1, 0, 'k'},
        {"qnoise", 1, 0, 'Q'}, {"seed", 1, 0, 'S'}, {"f16", 0, 0, 'F'}, {"help", 0, 0, 'h'},
        {"outliers", 1, 0, 'O'}, {"outlier-offset", 1, 0, 'A'}, {"outlier-spread", 1, 0, 'B'},
        {"outlier-query", 1, 0, 'C'}, {0, 0, 0, 0}};
    const char *prefix = NULL;
    uint64_t ndocs = 1000, nq = 100, seed = 1;
    uint32_t dim = 128, lmin = 32, lmax = 32, topics = 0, qlen = 32;
    float noise = 0.6f, qnoise = 0.3f;
    /* Defaults: 4 dims of 1024 then hold ~93% of a document vector's energy and 57% of
     * a query vector's, as measured on LLM hidden states. */
    uint32_t noutliers = 0;
    float ooffset = 55.0f, ospread = 20.0f, oquery = 0.57f;
    int f16 = 0, c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'o': prefix = optarg; break;
        case 'n': ndocs = strtoull(optarg, NULL, 10); break;
        case 'l':
            if (sscanf(optarg, "%u-%u", &lmin, &lmax) != 2)
                lmin = lmax = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'd': dim = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 't': topics = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 's': noise = strtof(optarg, NULL); break;
        case 'q': nq = strtoull(optarg, NULL, 10); break;
        case 'k': qlen = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'Q': qnoise = strtof(optarg, NULL); break;
        case 'S': seed = strtoull(optarg, NULL, 10); break;
        case 'F': f16 = 1; break;
        case 'O': noutliers = (uint32_t)strtoul(optarg, NULL, 10); break;
        case 'A': ooffset = strtof(optarg, NULL); break;
        case 'B': ospread = strtof(optarg, NULL); break;
        case 'C': oquery = strtof(optarg, NULL); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!prefix || !ndocs || !dim || !lmin || lmax < lmin || nq > ndocs || !qlen ||
        noutliers >= dim || !(oquery >= 0 && oquery < 1)) {
        usage(stderr);
        return 2;
    }
    if (!topics)
        topics = (uint32_t)fmax(16, sqrt((double)ndocs) * 4);
    rng_state = seed;
    float *centres = malloc((size_t)topics * dim * sizeof *centres);
    uint32_t *lens = malloc(ndocs * sizeof *lens);
    float *buf = malloc((size_t)lmax * dim * sizeof *buf);
    uint16_t *hbuf = malloc((size_t)lmax * dim * sizeof *hbuf);
    if (!centres || !lens || !buf || !hbuf) {
        fprintf(stderr, "tartan-synth: out of memory\n");
        return 1;
    }
    for (uint64_t i = 0; i < (uint64_t)topics * dim; i++)
        centres[i] = gauss();
    for (uint32_t t = 0; t < topics; t++)
        normalize(centres + (uint64_t)t * dim, dim);
    /* Outlier dimensions: spread over the vector (every dim/noutliers-th, from a
     * seeded start), each with a sign for its shared offset. The unit of both offset
     * and spread is the other dimensions' standard deviation (centre plus noise). */
    uint32_t *odim = malloc((noutliers ? noutliers : 1) * sizeof *odim);
    float *osign = malloc((noutliers ? noutliers : 1) * sizeof *osign);
    if (!odim || !osign) {
        fprintf(stderr, "tartan-synth: out of memory\n");
        return 1;
    }
    const float unit = sqrtf((1.0f + 16.0f * noise * noise) / (float)dim);
    uint32_t ostart = noutliers ? (uint32_t)(rnd() % (dim / noutliers)) : 0;
    for (uint32_t k = 0; k < noutliers; k++) {
        odim[k] = ostart + k * (dim / noutliers);
        osign[k] = rnd() & 1 ? 1.0f : -1.0f;
    }
    uint64_t total = 0;
    for (uint64_t d = 0; d < ndocs; d++) {
        lens[d] = lmin + (uint32_t)(rnd() % (lmax - lmin + 1));
        total += lens[d];
    }
    /* Query targets: nq distinct documents spread over the corpus. */
    uint64_t *target = malloc(nq * sizeof *target);
    float *queries = malloc(nq * qlen * dim * sizeof *queries);
    if (!target || !queries) {
        fprintf(stderr, "tartan-synth: out of memory\n");
        return 1;
    }
    for (uint64_t q = 0; q < nq; q++)
        target[q] = q * (ndocs / nq) + rnd() % (ndocs / nq);

    FILE *fv = open_out(prefix, "vectors.npy"), *fl = open_out(prefix, "doclens.npy"),
         *fi = open_out(prefix, "ids.txt");
    if (!fv || !fl || !fi)
        return 1;
    uint64_t shape[3] = {total, dim, 0};
    if (npy_header(fv, f16 ? "<f2" : "<f4", shape, 2))
        goto io_fail;
    uint64_t q = 0, esz = f16 ? 2 : 4;
    for (uint64_t d = 0; d < ndocs; d++) {
        /* Each document mixes three topics with its own offset direction. */
        uint32_t t[3] = {(uint32_t)(rnd() % topics), (uint32_t)(rnd() % topics),
                         (uint32_t)(rnd() % topics)};
        for (uint32_t i = 0; i < lens[d]; i++) {
            const float *cen = centres + (uint64_t)t[rnd() % 3] * dim;
            float *v = buf + (uint64_t)i * dim;
            for (uint32_t j = 0; j < dim; j++)
                v[j] = cen[j] + noise * gauss() / sqrtf((float)dim) * 4.0f;
            for (uint32_t k = 0; k < noutliers; k++)
                v[odim[k]] = unit * (osign[k] * ooffset + ospread * gauss());
            normalize(v, dim);
        }
        while (q < nq && target[q] == d) {
            for (uint32_t i = 0; i < qlen; i++) {
                const float *src = buf + (uint64_t)(rnd() % lens[d]) * dim;
                float *v = queries + (q * qlen + i) * dim;
                for (uint32_t j = 0; j < dim; j++)
                    v[j] = src[j] + qnoise * gauss() / sqrtf((float)dim) * 4.0f;
                if (noutliers) {
                    /* The outlier dims take the document vector's direction on them
                     * and the share oquery of the query vector's energy. */
                    double rest = 0, out = 0;
                    for (uint32_t k = 0; k < noutliers; k++) {
                        out += (double)src[odim[k]] * src[odim[k]];
                        v[odim[k]] = 0;
                    }
                    for (uint32_t j = 0; j < dim; j++)
                        rest += (double)v[j] * v[j];
                    double f = out > 0 ? sqrt(oquery / (1 - oquery) * rest / out) : 0;
                    for (uint32_t k = 0; k < noutliers; k++)
                        v[odim[k]] = (float)(src[odim[k]] * f);
                }
                normalize(v, dim);
            }
            q++;
        }
        if (f16) {
            for (uint64_t i = 0; i < (uint64_t)lens[d] * dim; i++)
                hbuf[i] = f32_to_f16(buf[i]);
            if (fwrite(hbuf, esz, (size_t)lens[d] * dim, fv) != (size_t)lens[d] * dim)
                goto io_fail;
        } else if (fwrite(buf, esz, (size_t)lens[d] * dim, fv) != (size_t)lens[d] * dim) {
            goto io_fail;
        }
        fprintf(fi, "doc%llu\n", (unsigned long long)d);
    }
    uint64_t lshape[1] = {ndocs};
    if (npy_header(fl, "<i8", lshape, 1))
        goto io_fail;
    for (uint64_t d = 0; d < ndocs; d++) {
        int64_t v = lens[d];
        if (fwrite(&v, 8, 1, fl) != 1)
            goto io_fail;
    }
    FILE *fq = open_out(prefix, "queries.npy"), *fqi = open_out(prefix, "qids.txt"),
         *fr = open_out(prefix, "qrels.tsv");
    if (!fq || !fqi || !fr)
        return 1;
    uint64_t qshape[3] = {nq, qlen, dim};
    if (npy_header(fq, "<f4", qshape, 3) ||
        fwrite(queries, sizeof *queries, nq * qlen * dim, fq) != nq * qlen * dim)
        goto io_fail;
    fprintf(fr, "query-id\tcorpus-id\tscore\n");
    for (uint64_t i = 0; i < nq; i++) {
        fprintf(fqi, "q%llu\n", (unsigned long long)i);
        fprintf(fr, "q%llu\tdoc%llu\t1\n", (unsigned long long)i, (unsigned long long)target[i]);
    }
    if (fclose(fv) || fclose(fl) || fclose(fi) || fclose(fq) || fclose(fqi) || fclose(fr))
        goto io_fail;
    fprintf(stderr, "tartan-synth: %llu docs, %llu vectors x %u, %llu queries x %u -> %s.*\n",
            (unsigned long long)ndocs, (unsigned long long)total, dim, (unsigned long long)nq,
            qlen, prefix);
    free(centres); free(lens); free(buf); free(hbuf); free(target); free(queries);
    free(odim); free(osign);
    return 0;
io_fail:
    fprintf(stderr, "tartan-synth: write failed under %s: %s\n", prefix, strerror(errno));
    return 1;
}

/* Token pooling as an input transform (doc/pooling.md): a tt_input whose documents are
 * another input's, each pooled (quant/pool.h) as it is read. Its document lengths are
 * known before anything reads it: from the source's alone (max(1, floor(n / factor)))
 * with a factor; with one cut for the whole collection, from a first pass over the
 * documents' dendrograms (the cut's height, unless given) and a second (each document's
 * share of it). So everything downstream
 * (sampling, k-means, the codec, the encode pass, kept originals, the IVF) sees the
 * pooled documents without knowing they were pooled, and no vector is held longer than
 * the batch of whole documents being read. Source vectors are validated and normalised
 * here, as the build does its input's, so that a NaN or an all-zero vector is reported
 * at its own file, row and document, not hidden in a mean. */
#include "index/build.h"
#include "quant/pool.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tt_pooled {
    tt_input in;             /* what the build reads */
    tt_input *src;
    uint32_t factor, dim, max_n;
    double threshold;        /* the global cut's height (NaN: per-document factor) */
    int normalize;
    int nwork;               /* work spaces: documents pooled at once */
    tt_pool_work *work;
    double *heights;         /* per work space, max_n: a document's merge heights */
    uint64_t *hist;          /* HIST_BUCKETS: merge heights counted (atomically) */
    float *cut;              /* per work space, max_n * dim: a document the request cuts */
    float *buf;              /* source vectors of a batch of whole documents */
    uint64_t buf_vectors;
    char source[512];        /* names the pooled input in messages */
};

/* One batch: source documents [d0, d1), their vectors in buf, pooled into the request's
 * range [v0, v0 + n) of pooled vectors at out. */
typedef struct pool_job {
    tt_pooled *p;
    uint64_t d0, d1, v0, n;
    float *out;
} pool_job;

static void pool_worker(void *arg, int t, int nt) {
    pool_job *j = arg;
    tt_pooled *p = j->p;
    const uint32_t dim = p->dim;
    const uint64_t base = p->src->doc_vec0[j->d0];
    tt_pool_work *w = &p->work[t];
    float *cut = p->cut + (uint64_t)t * p->max_n * dim;
    /* Documents t, t + nt, ...: neighbours have unrelated lengths, so this balances. */
    for (uint64_t d = j->d0 + (uint64_t)t; d < j->d1; d += (uint64_t)nt) {
        const float *x = p->buf + (p->src->doc_vec0[d] - base) * dim;
        uint64_t first = p->in.doc_vec0[d], len = p->in.doclens[d];
        uint64_t lo = TT_MAX(first, j->v0), hi = TT_MIN(first + len, j->v0 + j->n);
        if (lo >= hi)
            continue;
        float *dst = j->out + (lo - j->v0) * dim;
        if (lo == first && hi == first + len) {
            tt_pool_ward_k(w, x, p->src->doclens[d], (uint32_t)len, dst, NULL);
        } else { /* the request starts or ends inside this document */
            tt_pool_ward_k(w, x, p->src->doclens[d], (uint32_t)len, cut, NULL);
            memcpy(dst, cut + (lo - first) * dim, (size_t)((hi - lo) * dim) * sizeof *dst);
        }
    }
}

/* Source documents [d, *e) into buf: whole ones before dend, as many as the buffer holds
 * (at least one), validated and normalised as the build prepares its input. */
static int read_docs(tt_pooled *p, uint64_t d, uint64_t dend, uint64_t *e) {
    const tt_input *src = p->src;
    uint64_t x = d, tot = 0;
    while (x < dend && (x == d || tot + src->doclens[x] <= p->buf_vectors))
        tot += src->doclens[x++];
    *e = x;
    const uint64_t s0 = src->doc_vec0[d];
    int st = tt_input_read(src, s0, tot, p->buf);
    return st ? st : tt_prepare_vectors(src, p->dim, p->normalize, 0, p->buf, s0, tot);
}

static int read_pooled(void *user, uint64_t v0, uint64_t n, float *out) {
    tt_pooled *p = user;
    const uint64_t D = p->in.num_docs, end = v0 + n;
    int st;
    uint64_t d = tt_find_le(p->in.doc_vec0, D, v0), dend = d;
    while (dend < D && p->in.doc_vec0[dend] < end) /* the documents the request touches */
        dend++;
    while (d < dend) {
        uint64_t e;
        if ((st = read_docs(p, d, dend, &e)))
            return st;
        pool_job job = {p, d, e, v0, n, out};
        int nt = (int)TT_MIN((uint64_t)p->nwork, e - d);
        tt_parallel(nt, pool_worker, &job);
        d = e;
    }
    return TT_OK;
}

/* Merge heights are counted by the top HIST_SHIFT-less bits of their (non-negative)
 * double: 11 exponent bits and 8 of the mantissa, buckets 0.4% wide. */
#define HIST_SHIFT 44
#define HIST_BUCKETS ((size_t)1 << (63 - HIST_SHIFT))

/* One pass of the global cut over source documents [d0, d1) in buf: their merge
 * heights counted (pass 1) or their pooled lengths at the threshold (pass 2). */
typedef struct cut_job {
    tt_pooled *p;
    uint64_t d0, d1;
    int pass;
} cut_job;

static void cut_worker(void *arg, int t, int nt) {
    cut_job *j = arg;
    tt_pooled *p = j->p;
    const uint64_t base = p->src->doc_vec0[j->d0];
    double *h = p->heights + (uint64_t)t * p->max_n;
    for (uint64_t d = j->d0 + (uint64_t)t; d < j->d1; d += (uint64_t)nt) {
        const uint32_t n = p->src->doclens[d];
        const float *x = p->buf + (p->src->doc_vec0[d] - base) * p->dim;
        uint32_t m = tt_pool_heights(&p->work[t], x, n, h);
        if (j->pass == 1) {
            for (uint32_t i = 0; i < m; i++) {
                uint64_t bits;
                memcpy(&bits, &h[i], sizeof bits);
                __atomic_fetch_add(&p->hist[bits >> HIST_SHIFT], 1, __ATOMIC_RELAXED);
            }
        } else {
            p->in.doclens[d] = n ? tt_pool_cut_len(h, n, p->threshold) : 0;
        }
    }
}

/* Reads every source document once, in batches of whole documents, for a cut pass. */
static int cut_pass(tt_pooled *p, int pass, const tt_pool_spec *spec) {
    const tt_input *src = p->src;
    const uint64_t D = src->num_docs;
    const char *phase = pass == 1 ? "pool heights" : "pool lengths";
    int st;
    for (uint64_t d = 0; d < D;) {
        if (spec->progress)
            spec->progress(spec->progress_user, phase, d, D);
        if (spec->cancel && *spec->cancel)
            return tt_err(TT_ECANCELED, "token pooling: cancelled");
        uint64_t e;
        if ((st = read_docs(p, d, D, &e)))
            return st;
        cut_job job = {p, d, e, pass};
        tt_parallel((int)TT_MIN((uint64_t)p->nwork, e - d), cut_worker, &job);
        d = e;
    }
    if (spec->progress)
        spec->progress(spec->progress_user, phase, D, D);
    return TT_OK;
}

/* The global cut's height: the merges are counted by height (pass 1) and the threshold
 * is the edge of the bucket that brings the applied merges closest to the number that
 * leaves 1/global of the vectors (every document keeping at least one). */
static int cut_threshold(tt_pooled *p, const tt_pool_spec *spec) {
    int st;
    if (!(p->hist = tt_calloc(HIST_BUCKETS, sizeof *p->hist, "token pooling height counts")))
        return TT_ENOMEM;
    if ((st = cut_pass(p, 1, spec)))
        return st;
    const uint64_t N = p->src->num_vectors;
    uint64_t nonempty = 0;
    for (uint64_t d = 0; d < p->src->num_docs; d++)
        nonempty += p->src->doclens[d] > 0;
    uint64_t keep = (uint64_t)llround((double)N / spec->global);
    keep = TT_MAX(keep, nonempty);
    const uint64_t want = N - keep; /* merges to apply */
    uint64_t cum = 0, prev = 0;
    size_t b = 0;
    for (; b < HIST_BUCKETS; b++) {
        prev = cum;
        cum += p->hist[b];
        if (cum >= want)
            break;
    }
    if (b == HIST_BUCKETS) { /* not reachable (want <= the merges there are); stay total */
        p->threshold = DBL_MAX;
    } else {
        if (b > 0 && want - prev < cum - want) /* the lower edge is closer */
            b--;
        const uint64_t bits = ((uint64_t)(b + 1) << HIST_SHIFT) - 1; /* the bucket's top */
        memcpy(&p->threshold, &bits, sizeof bits);
    }
    free(p->hist);
    p->hist = NULL;
    return TT_OK;
}

int tt_pooled_open(tt_pooled **out, tt_input *src, const tt_pool_spec *spec) {
    tt_pooled *p;
    int st = TT_OK;
    *out = NULL;
    const uint32_t factor = spec->factor;
    const double global = spec->global, threshold = spec->threshold;
    const int normalize = spec->normalize, threads = spec->threads;
    const uint64_t memory_bytes = spec->memory_bytes;
    const bool cut = factor < 2;
    if (cut && !(global > 1) && !(threshold >= 0))
        return tt_err(TT_EINVAL, "token pooling: factor %u (1 does not pool) and no global "
                      "cut", factor);
    if (cut && !(threshold >= 0) && !(global <= 1e6))
        return tt_err(TT_EINVAL, "token pooling: global factor %g is not in (1, 1e6]", global);
    if (!(p = tt_calloc(1, sizeof *p, "pooled input")))
        return TT_ENOMEM;
    p->threshold = cut ? threshold : NAN;
    const uint64_t D = src->num_docs;
    p->src = src;
    p->factor = factor;
    p->dim = src->dim;
    p->normalize = normalize;
    tt_input *in = &p->in;
    in->dim = src->dim;
    in->num_docs = D;
    in->doclens = tt_alloc(D ? D : 1, sizeof *in->doclens, "pooled document lengths");
    in->doc_vec0 = tt_alloc(D + 1, sizeof *in->doc_vec0, "pooled document lengths");
    if (!in->doclens || !in->doc_vec0) {
        st = TT_ENOMEM;
        goto fail;
    }
    uint64_t longest = 0;
    in->doc_vec0[0] = 0;
    for (uint64_t d = 0; d < D; d++) {
        uint32_t len = src->doclens[d];
        if (len > p->max_n) {
            p->max_n = len;
            longest = d;
        }
        in->doclens[d] = cut ? len : tt_pool_len(len, factor);
    }
    if (p->max_n == 0) /* no documents: nothing will be read */
        p->max_n = 1;
    in->ids_blob = src->ids_blob; /* lent: the source's */
    in->id_off = src->id_off;
    in->ids_path = src->ids_path;
    in->input_lens = src->doclens;
    in->input_vectors = src->num_vectors;
    in->read_fn = read_pooled;
    in->read_user = p;
    const char *name = src->nfiles ? src->files[0].path : src->source ? src->source : "input";
    if (cut)
        snprintf(p->source, sizeof p->source, "%s (pooled by one cut)", name);
    else
        snprintf(p->source, sizeof p->source, "%s (pooled by %u)", name, factor);
    in->source = p->source;

    /* Memory: a quarter of the budget (the build's other phases use the rest) holds one
     * work space per thread, at least one, and a buffer of at least the longest
     * document (a global cut adds a document's heights per work space and, while the
     * height is found, a 4 MiB count of them). A document too long for that is refused
     * before any work. */
    const uint64_t budget = memory_bytes / 4, vec_bytes = (uint64_t)p->dim * sizeof(float);
    /* (lengths < 2^31 and dim <= 2^20: a document's bytes fit in 64 bits) */
    const uint64_t ws = tt_pool_work_bytes(p->max_n, p->dim), doc_bytes = p->max_n * vec_bytes;
    if (ws > budget || 2 * doc_bytes > budget - ws) {
        const char *path;
        uint64_t row, doc;
        tt_input_locate(src, src->doc_vec0[longest], &path, &row, &doc);
        st = tt_err(TT_ENOMEM, "%s: document %llu has %u vectors; pooling it needs %.0f MiB, "
                    "more than a quarter of the memory budget (%.0f MiB): raise the budget "
                    "(--memory) or split the document", path, (unsigned long long)doc,
                    p->max_n, ((double)ws + 2.0 * (double)doc_bytes) / 1048576.0,
                    (double)memory_bytes / 1048576.0);
        goto fail;
    }
    uint64_t per = ws + doc_bytes, left = budget - doc_bytes;
    p->nwork = (int)TT_MAX((uint64_t)1, TT_MIN((uint64_t)(threads > 0 ? threads : 1), left / per));
    left -= (uint64_t)p->nwork * per;
    p->buf_vectors = TT_MAX((uint64_t)p->max_n, TT_MIN((uint64_t)1 << 16, left / vec_bytes));
    if (!(p->work = tt_calloc((uint64_t)p->nwork, sizeof *p->work, "pooling work spaces")) ||
        !(p->cut = tt_alloc((uint64_t)p->nwork * p->max_n, vec_bytes, "pooling work spaces")) ||
        !(p->buf = tt_alloc(p->buf_vectors, vec_bytes, "pooling buffer"))) {
        st = TT_ENOMEM;
        goto fail;
    }
    for (int t = 0; t < p->nwork; t++)
        if ((st = tt_pool_work_init(&p->work[t], p->max_n, p->dim)))
            goto fail;
    if (cut) {
        if (!(p->heights = tt_alloc((uint64_t)p->nwork * p->max_n, sizeof *p->heights,
                                    "token pooling heights"))) {
            st = TT_ENOMEM;
            goto fail;
        }
        if ((!(threshold >= 0) && (st = cut_threshold(p, spec))) ||
            (st = cut_pass(p, 2, spec)))
            goto fail;
    }
    for (uint64_t d = 0; d < D; d++)
        in->doc_vec0[d + 1] = in->doc_vec0[d] + in->doclens[d];
    in->num_vectors = in->doc_vec0[D];
    *out = p;
    return TT_OK;
fail:
    tt_pooled_free(p);
    return st;
}

tt_input *tt_pooled_input(tt_pooled *p) { return &p->in; }

double tt_pooled_threshold(const tt_pooled *p) { return p->threshold; }

void tt_pooled_free(tt_pooled *p) {
    if (!p)
        return;
    for (int t = 0; p->work && t < p->nwork; t++)
        tt_pool_work_free(&p->work[t]);
    free(p->work);
    free(p->heights);
    free(p->hist);
    free(p->cut);
    free(p->buf);
    free(p->in.doclens);
    free(p->in.doc_vec0);
    free(p);
}

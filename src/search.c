/* PLAID search over the compressed index (Santhanam, Khattab, Potts, Zaharia, "PLAID:
 * An Efficient Engine for Late Interaction Retrieval", CIKM 2022), plus the reference
 * modes that measure what it loses.
 *
 *   stage 1  St ~ C·Qᵀ from int8 centroids and query (src/cscore.c); the nprobe best
 *            centroids of every query vector; candidates = union of their IVF lists.
 *   stage 2  centroid interaction with pruning: score(d) = sum_i max over the codes c of
 *            d whose best query score max_i St[c, i] >= threshold of St[c, i];
 *            keep the ndocs best.
 *   stage 3  the same without pruning; keep max(ndocs/4, k).
 *   stage 4  read those documents' packed residuals (one range per document) and score
 *            decompressed MaxSim: sum_i max_j <q_i, c_j + r_j>; keep k.
 *
 * Stages 1-3 only rank, so their centroid scores come from exact integer dot products
 * of int8 copies (4x the multiply rate of float32 with AVX-512 VNNI, and no per-call
 * packing of the centroid matrix). Stage 4 does not use them: it decodes each residual,
 * adds its float32 centroid and multiplies the group with Q (one sgemm per group of
 * documents). The exhaustive mode runs the same stage-4 kernel over every document,
 * streaming the residual file in large sequential reads, so the default mode's scores
 * of the documents it returns equal the exhaustive scores up to float rounding. The
 * exact mode scores every document with the kept float16 originals.
 *
 * Like ColBERTv2's CPU path (filter_pids.cpp), the stage-2 maxima start at -9999, so a
 * document none of whose centroids survives pruning ranks last. Unlike ColBERTv2, the
 * decompressed vectors c + r are not re-normalised before scoring: <q, c + r> stays
 * exact arithmetic on what the index stores, and the reference modes score the same
 * quantity. */
#include "search.h"

#include "cscore.h"
#include "npy.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* The hot loops over score rows use SSE2 (baseline on x86-64) four lanes at a time;
 * elsewhere a scalar version computes the same maxima. Rows have nqp = tt_qpad(nq)
 * floats, a multiple of 4. */
#if defined(__SSE2__)
#include <emmintrin.h>
#define TT_SSE2 1
#endif
/* Where the CPU has AVX-512 (checked at run time), the centroid stages' row loops use
 * it instead: a row of 32 scores is two registers. Maxima and comparisons are exact, so
 * both versions return the same floats (tests/test_search.c runs both). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TT_AVX512 1
#define AVX512_FN __attribute__((target("avx512f")))
/* The AVX-512 loops keep a row in at most four registers. */
#define AVX512_MAX_NQP 64u
#endif

/* Floats of decoded rows per MaxSim group (1 MiB: stays in L2 between the decode and
 * the sgemm that reads it). */
#define GROUP_FLOATS (1u << 18)
/* Largest per-byte-position decode table (per-dimension codecs): 512 KiB, so that it
 * stays in L2 (dim <= 512 at any nbits). */
#define RESDEC_TABLE_BYTES (512u << 10)
/* Residual bytes per chunk of an exhaustive scan. */
#define SCAN_BYTES (8u << 20)
/* Initial per-query-vector maximum of the centroid stages (ColBERTv2 filter_pids). */
#define STAGE2_FLOOR (-9999.0f)

/* OpenBLAS's thread control, if the BLAS linked is OpenBLAS (weak: others lack it). */
extern void openblas_set_num_threads(int) __attribute__((weak));

int tt_blas_set_threads(int n) {
    if (n < 1)
        return tt_err(TT_EINVAL, "tt_blas_set_threads: %d threads", n);
    if (!openblas_set_num_threads)
        return tt_err(TT_EUNSUPPORTED, "tt_blas_set_threads: the BLAS library has no thread "
                      "control");
    openblas_set_num_threads(n);
    return TT_OK;
}

/* ---------------------------------------------------------------- options */

void tt_search_options_init(tt_search_options *opt) {
    if (!opt)
        return;
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->mode = TT_MODE_PLAID;
    opt->nprobe = 0;
    opt->threshold = NAN;
    opt->ndocs = 0;
    opt->score = TT_SCORE_SUM;
}

void tt_search_defaults_for_k(uint32_t k, int *nprobe, float *threshold, uint32_t *ndocs) {
    if (k <= 10) {
        *nprobe = 1;
        *threshold = 0.5f;
        *ndocs = 256;
    } else if (k <= 100) {
        *nprobe = 2;
        *threshold = 0.45f;
        *ndocs = 1024;
    } else {
        *nprobe = 4;
        *threshold = 0.4f;
        *ndocs = k > 1024 ? (k > UINT32_MAX / 4 ? UINT32_MAX : 4 * k) : 4096;
    }
}

void tt_search_options_resolve(const tt_search_options *opt, uint32_t k,
                               tt_search_options *out) {
    tt_search_options o;
    tt_search_options_init(&o);
    /* Callers built against an older, shorter struct pass their struct_size. */
    if (opt && opt->struct_size > sizeof(uint32_t))
        memcpy(&o, opt, TT_MIN((size_t)opt->struct_size, sizeof o));
    o.struct_size = sizeof o;
    int np;
    float th;
    uint32_t nd;
    tt_search_defaults_for_k(k, &np, &th, &nd);
    if (o.nprobe <= 0)
        o.nprobe = np;
    if (isnan(o.threshold))
        o.threshold = th;
    if (o.ndocs == 0)
        o.ndocs = nd;
    *out = o;
}

/* ------------------------------------------------------- residual decoder */

int tt_resdec_init(tt_resdec *d, const tt_codec *c) {
    memset(d, 0, sizeof *d);
    if (c->nbits != 1 && c->nbits != 2 && c->nbits != 4)
        return tt_err(TT_EINVAL, "residual decoder: nbits %u not in {1, 2, 4}", c->nbits);
    d->dim = c->dim;
    d->nbits = c->nbits;
    d->bytes_per_vec = c->bytes_per_vec;
    d->per_byte = 8 / c->nbits;
    d->nbuckets = 1u << c->nbits;
    d->shared = c->ntables == 1;
    d->weights = c->weights;
    const uint32_t pb = d->per_byte, mask = d->nbuckets - 1;
    if (d->shared) {
        d->tab = tt_alloc(256 * pb, sizeof *d->tab, "residual decode table");
        if (!d->tab)
            return TT_ENOMEM;
        for (uint32_t x = 0; x < 256; x++)
            for (uint32_t t = 0; t < pb; t++)
                d->tab[x * pb + t] = c->weights[(x >> (8 - c->nbits * (t + 1))) & mask];
    } else if ((uint64_t)d->bytes_per_vec * 256 * pb * sizeof(float) <= RESDEC_TABLE_BYTES) {
        /* Per-dimension tables, small enough to expand per byte position: decoding is
         * then one table row copy per byte, as with a shared table. */
        d->ptab = tt_alloc((uint64_t)d->bytes_per_vec * 256 * pb, sizeof *d->ptab,
                           "residual decode table");
        if (!d->ptab)
            return TT_ENOMEM;
        for (uint32_t b = 0; b < d->bytes_per_vec; b++)
            for (uint32_t x = 0; x < 256; x++)
                for (uint32_t t = 0; t < pb; t++) {
                    uint32_t j = b * pb + t;
                    d->ptab[((uint64_t)b * 256 + x) * pb + t] =
                        j < d->dim ? c->weights[(uint64_t)j * d->nbuckets +
                                                ((x >> (8 - c->nbits * (t + 1))) & mask)]
                                   : 0.0f;
                }
    } else {
        d->bucket = tt_alloc(256 * pb, 1, "residual decode table");
        if (!d->bucket)
            return TT_ENOMEM;
        for (uint32_t x = 0; x < 256; x++)
            for (uint32_t t = 0; t < pb; t++)
                d->bucket[x * pb + t] = (uint8_t)((x >> (8 - c->nbits * (t + 1))) & mask);
#ifdef TT_AVX512
        __builtin_cpu_init();
        d->avx512 = __builtin_cpu_supports("avx512f");
#endif
    }
    return TT_OK;
}

void tt_resdec_free(tt_resdec *d) {
    if (!d)
        return;
    free(d->tab);
    free(d->ptab);
    free(d->bucket);
    memset(d, 0, sizeof *d);
}

/* Asks for the start of a row of n floats (at most 512 bytes: the hardware prefetcher
 * follows a longer one). */
static inline void prefetch_row(const float *row, uint32_t n) {
    for (uint32_t j = 0; j < n && j < 128; j += 16)
        __builtin_prefetch(row + j);
}

/* o[j] = c[j] + r[j] for j < n (n a small constant where it is inlined). */
static inline void add_floats(float *o, const float *c, const float *r, uint32_t n) {
    uint32_t j = 0;
#ifdef TT_SSE2
    for (; j + 4 <= n; j += 4)
        _mm_storeu_ps(o + j, _mm_add_ps(_mm_loadu_ps(c + j), _mm_loadu_ps(r + j)));
#endif
    for (; j < n; j++)
        o[j] = c[j] + r[j];
}

/* Writes the table row of each byte (per_byte floats, a constant size per case so that
 * the loops compile to single vector moves), plus the centroid row c if there is one. */
#define DECODE_ROWS(PB, ROW)                                                                \
    if (c) {                                                                                \
        for (uint32_t b = 0; b < full; b++) {                                               \
            add_floats(o + b * (PB), c + b * (PB), (ROW), (PB));                            \
        }                                                                                   \
    } else {                                                                                \
        for (uint32_t b = 0; b < full; b++)                                                 \
            memcpy(o + b * (PB), (ROW), (PB) * sizeof(float));                              \
    }

#ifdef TT_AVX512
/* Per-dimension weights without expanded tables (dim > 512 at 2 bits), 1- and 2-bit
 * codes: 16 dimensions (2 * nbits bytes, byte-aligned) at a time. Lane j's bucket is a
 * shift of the chunk read as a little-endian word (fields are MSB-first), and its
 * weight weights[(d0 + j) * nbuckets + bucket] one of the chunk's 16 * nbuckets
 * consecutive weights (32 or 64 floats), picked with vpermi2ps; then the centroid is
 * added, as in the scalar loop, so both write the same floats. Returns the dimensions
 * done (a multiple of 16). */
AVX512_FN static uint32_t decode_bucket_avx512(const tt_resdec *d, const uint8_t *p,
                                               const float *c, float *o) {
    const uint32_t nbits = d->nbits, nb = d->nbuckets, full = d->dim / 16 * 16;
    if (nbits > 2)
        return 0;
    int32_t sh[16], lane[16];
    for (uint32_t j = 0; j < 16; j++) {
        uint32_t bit = j * nbits;
        sh[j] = (int32_t)(8 * (bit / 8) + (8 - nbits - bit % 8));
        lane[j] = (int32_t)(j * nb);
    }
    const __m512i shv = _mm512_loadu_si512(sh), lanev = _mm512_loadu_si512(lane);
    const __m512i mask = _mm512_set1_epi32((int)nb - 1), bit5 = _mm512_set1_epi32(32);
    for (uint32_t d0 = 0; d0 < full; d0 += 16) {
        uint32_t w;
        if (nbits == 2) {
            memcpy(&w, p + d0 / 4, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + d0 / 8, 2);
            w = h;
        }
        const __m512i idx = _mm512_add_epi32(
            lanev, _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w), shv), mask));
        const float *t = d->weights + (uint64_t)d0 * nb;
        __m512 r = _mm512_permutex2var_ps(_mm512_loadu_ps(t), idx, _mm512_loadu_ps(t + 16));
        if (nb == 4) {
            __m512 hi =
                _mm512_permutex2var_ps(_mm512_loadu_ps(t + 32), idx, _mm512_loadu_ps(t + 48));
            r = _mm512_mask_blend_ps(_mm512_test_epi32_mask(idx, bit5), r, hi);
        }
        if (c)
            r = _mm512_add_ps(_mm512_loadu_ps(c + d0), r);
        _mm512_storeu_ps(o + d0, r);
    }
    return full;
}
#endif

void tt_resdec_decode_add(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                          const float *centroids, const uint32_t *codes, float *out) {
    const uint32_t dim = d->dim, pb = d->per_byte, nb = d->nbuckets;
    const uint32_t full = dim / pb, rem = dim % pb;
    for (uint64_t v = 0; v < n; v++) {
        const uint8_t *p = packed + v * d->bytes_per_vec;
        const float *c = centroids ? centroids + (uint64_t)codes[v] * dim : NULL;
        float *o = out + v * dim;
        /* Centroid rows are random reads: ask for the one four vectors ahead. */
        if (c && v + 4 < n)
            prefetch_row(centroids + (uint64_t)codes[v + 4] * dim, dim);
        if (d->shared || d->ptab) {
            /* Shared: one table for every byte; else one per byte position. */
            const float *t = d->shared ? d->tab : d->ptab;
            const uint64_t step = d->shared ? 0 : 256;
            switch (pb) {
            case 2: DECODE_ROWS(2, t + (b * step + p[b]) * 2) break;
            case 4: DECODE_ROWS(4, t + (b * step + p[b]) * 4) break;
            default: DECODE_ROWS(8, t + (b * step + p[b]) * 8) break;
            }
            if (rem) {
                const float *r = t + ((uint64_t)full * step + p[full]) * pb;
                for (uint32_t j = 0; j < rem; j++)
                    o[full * pb + j] = (c ? c[full * pb + j] : 0.0f) + r[j];
            }
        } else {
            uint32_t b0 = 0;
#ifdef TT_AVX512
            if (d->avx512)
                b0 = decode_bucket_avx512(d, p, c, o) / pb;
#endif
            for (uint32_t b = b0; b < full; b++) {
                const uint8_t *bk = d->bucket + p[b] * pb;
                const float *w = d->weights + (uint64_t)b * pb * nb;
                for (uint32_t j = 0; j < pb; j++)
                    o[b * pb + j] = (c ? c[b * pb + j] : 0.0f) + w[j * nb + bk[j]];
            }
            if (rem) {
                const uint8_t *bk = d->bucket + p[full] * pb;
                const float *w = d->weights + (uint64_t)full * pb * nb;
                for (uint32_t j = 0; j < rem; j++)
                    o[full * pb + j] = (c ? c[full * pb + j] : 0.0f) + w[j * nb + bk[j]];
            }
        }
    }
}

void tt_resdec_decode(const tt_resdec *d, const uint8_t *packed, uint64_t n, float *out) {
    tt_resdec_decode_add(d, packed, n, NULL, NULL, out);
}

/* ------------------------------------------------------------------ top-k */

static inline bool hit_better(float s1, uint64_t d1, float s2, uint64_t d2) {
    return s1 > s2 || (s1 == s2 && d1 < d2);
}

int tt_topk_reset(tt_topk *t, uint32_t k) {
    if (k > t->cap) {
        tt_hit *h = realloc(t->h, (size_t)k * sizeof *h);
        if (!h)
            return tt_err(TT_ENOMEM, "top-k heap of %u: out of memory", k);
        t->h = h;
        t->cap = k;
    }
    t->k = k;
    t->n = 0;
    return TT_OK;
}

/* Min-heap on "better": h[0] is the worst kept hit. */
void tt_topk_push(tt_topk *t, uint64_t doc, float score) {
    tt_hit *h = t->h;
    if (t->n < t->k) {
        uint32_t i = t->n++;
        while (i > 0) {
            uint32_t p = (i - 1) / 2;
            if (!hit_better(h[p].score, h[p].doc, score, doc))
                break;
            h[i] = h[p];
            i = p;
        }
        h[i] = (tt_hit){doc, score};
        return;
    }
    if (t->k == 0 || !hit_better(score, doc, h[0].score, h[0].doc))
        return;
    uint32_t i = 0, n = t->n;
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, w = i;
        float ws = score;
        uint64_t wd = doc;
        if (l < n && hit_better(ws, wd, h[l].score, h[l].doc)) {
            w = l;
            ws = h[l].score;
            wd = h[l].doc;
        }
        if (r < n && hit_better(ws, wd, h[r].score, h[r].doc))
            w = r;
        if (w == i)
            break;
        h[i] = h[w];
        i = w;
    }
    h[i] = (tt_hit){doc, score};
}

static int hit_cmp(const void *a, const void *b) {
    const tt_hit *x = a, *y = b;
    if (hit_better(x->score, x->doc, y->score, y->doc))
        return -1;
    return hit_better(y->score, y->doc, x->score, x->doc) ? 1 : 0;
}

uint32_t tt_topk_finish(tt_topk *t) {
    qsort(t->h, t->n, sizeof *t->h, hit_cmp);
    return t->n;
}

void tt_topk_free(tt_topk *t) {
    if (!t)
        return;
    free(t->h);
    memset(t, 0, sizeof *t);
}

/* ---------------------------------------------------------------- kernels */

/* m[i] = max(m[i], x[i]) for a row of nqp scores (nqp a multiple of 4). */
static inline void max_into(float *m, const float *x, uint32_t nqp) {
#ifdef TT_SSE2
    for (uint32_t i = 0; i < nqp; i += 4)
        _mm_storeu_ps(m + i, _mm_max_ps(_mm_loadu_ps(x + i), _mm_loadu_ps(m + i)));
#else
    for (uint32_t i = 0; i < nqp; i++)
        m[i] = x[i] > m[i] ? x[i] : m[i];
#endif
}

/* Running maxima over the rows of one document, left in its first row of QR:
 * m[i] = max_j QR[j, i]. */
static void maxsim_rows(float *QR, uint32_t len, uint32_t nqp) {
    for (uint32_t j = 1; j < len; j++)
        max_into(QR, QR + (uint64_t)j * nqp, nqp);
}

void tt_maxsim_group(const float *Qp, uint32_t nq, uint32_t nqp, uint32_t dim, const float *R,
                     const uint32_t *doclens, uint32_t ndocs, float *QR, float *scores) {
    uint64_t nvec = 0;
    for (uint32_t d = 0; d < ndocs; d++)
        nvec += doclens[d];
    if (nvec == 0)
        return;
    /* QR[j, i] = <v_j, q_i>. */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nvec, (int)nqp, (int)dim, 1.0f, R,
                (int)dim, Qp, (int)dim, 0.0f, QR, (int)nqp);
    uint64_t v = 0;
    for (uint32_t d = 0; d < ndocs; d++) {
        /* The document's first row of QR becomes its running maximum. */
        float *m = QR + v * nqp;
        maxsim_rows(m, doclens[d], nqp);
        float sum = 0;
        for (uint32_t i = 0; i < nq; i++)
            sum += m[i];
        scores[d] = sum;
        v += doclens[d];
    }
}


double tt_maxsim_reference(const float *Q, uint32_t nq, uint32_t dim, const float *centroids,
                           const tt_codec *c, const uint32_t *codes, const uint8_t *packed,
                           uint32_t doclen) {
    const uint32_t nb = 1u << c->nbits, mask = nb - 1;
    double total = 0;
    for (uint32_t i = 0; i < nq; i++) {
        double best = -INFINITY;
        for (uint32_t j = 0; j < doclen; j++) {
            const uint8_t *p = packed + (uint64_t)j * c->bytes_per_vec;
            const float *cen = centroids + (uint64_t)codes[j] * dim;
            double s = 0;
            for (uint32_t k = 0; k < dim; k++) {
                uint32_t bit = k * c->nbits;
                uint32_t bucket = (p[bit / 8] >> (8 - c->nbits - bit % 8)) & mask;
                double w = c->weights[(c->ntables == 1 ? 0 : k) * nb + bucket];
                s += (double)Q[(uint64_t)i * dim + k] * ((double)cen[k] + w);
            }
            if (s > best)
                best = s;
        }
        total += best;
    }
    return total;
}

/* --------------------------------------------------------------- context */

struct tt_search_ctx {
    const tt_index *idx;
    tt_fetcher *fetch;
    tt_resdec dec;
    /* Per query (sized for nqp_cap padded query vectors). */
    uint32_t nqp_cap;
    uint32_t nq, nqp;      /* the current query: vectors and padded row stride */
    float scale;           /* 1 (sum) or 1/nq (mean) */
    float *Qp;             /* nqp_cap * dim: the query, zero-padded */
    uint8_t *qpack;        /* the query in int8 (tt_cq_query) */
    float *qscale;         /* nqp_cap int8 scales */
    float *St;             /* num_centroids * nqp_cap: int8 centroid scores, centroid-major */
    float *m;              /* nqp_cap running maxima */
    float *probe_s;        /* nq * nprobe best centroid scores of stage 1 */
    uint32_t *probe;
    size_t probe_cap, probe_s_cap;
    /* Per index. */
    uint8_t *keep;         /* num_centroids: survives stage-2 pruning */
    uint8_t *cell_seen;    /* num_centroids: probed in stage 1 (all zero between calls) */
    uint32_t *cells;       /* the distinct probed centroids */
    uint64_t *bits;        /* candidate bitmap, num_docs bits, all zero between queries */
    uint64_t *cand;        /* candidate documents, ascending */
    size_t cand_cap;
    uint64_t *list;        /* documents passed between stages */
    size_t list_cap;
    tt_topk top;
    uint64_t *roff, *rlen; /* residual ranges of stage 4 / a scan chunk */
    const uint8_t **rptr;
    size_t r_cap;
    uint64_t rows_cap;     /* decoded rows per MaxSim group */
    float *R;              /* rows_cap * dim */
    float *QR;             /* rows_cap * nqp_cap */
    uint32_t *gcodes;      /* rows_cap: the codes of one document */
    uint32_t *glens;       /* rows_cap (a group holds at most rows_cap documents) */
    uint64_t *gdocs;
    float *gscores;
    int avx512;            /* the AVX-512 row loops are used */
    tt_search_stats st;
};


int tt_search_ctx_new(const tt_index *idx, tt_search_ctx **out) {
    int st = TT_OK;
    if (!out)
        return tt_err(TT_EINVAL, "tt_search_ctx_new: NULL output");
    *out = NULL;
    if (!idx)
        return tt_err(TT_EINVAL, "tt_search_ctx_new: NULL index");
    tt_search_ctx *c = tt_calloc(1, sizeof *c, "search context");
    if (!c)
        return TT_ENOMEM;
    c->idx = idx;
#ifdef TT_AVX512
    __builtin_cpu_init();
    c->avx512 = __builtin_cpu_supports("avx512f");
#endif
    const uint64_t K = idx->num_centroids, D = idx->num_docs;
    if ((st = tt_resdec_init(&c->dec, &idx->codec)))
        goto fail;
    c->keep = tt_calloc(K ? K : 1, 1, "search context");
    c->cell_seen = tt_calloc(K ? K : 1, 1, "search context");
    c->cells = tt_alloc(K ? K : 1, sizeof *c->cells, "search context");
    c->bits = tt_calloc((D + 63) / 64 + 1, sizeof *c->bits, "search context");
    c->rows_cap = TT_MAX((uint64_t)idx->max_doclen, GROUP_FLOATS / TT_MAX(idx->dim, 1u));
    c->R = tt_alloc_aligned(c->rows_cap * idx->dim, sizeof *c->R, 64, "search context");
    c->gcodes = tt_alloc(c->rows_cap, sizeof *c->gcodes, "search context");
    c->glens = tt_alloc(c->rows_cap, sizeof *c->glens, "search context");
    c->gdocs = tt_alloc(c->rows_cap, sizeof *c->gdocs, "search context");
    c->gscores = tt_alloc(c->rows_cap, sizeof *c->gscores, "search context");
    if (!c->keep || !c->cell_seen || !c->cells || !c->bits || !c->R || !c->gcodes ||
        !c->glens || !c->gdocs || !c->gscores) {
        st = TT_ENOMEM;
        goto fail;
    }
    tt_fetch_config fc = {
        .mode = idx->io == TT_IO_URING ? TT_FETCH_URING : TT_FETCH_MMAP,
        .fd = idx->f_residuals.fd,
        .fd_direct = idx->direct ? idx->res_fd_direct : -1,
        .path = idx->f_residuals.path,
        .file_size = idx->f_residuals.size,
        .base = TT_HEADER_SIZE,
        .map = idx->res_map,
        .queue_depth = idx->queue_depth,
    };
    if ((st = tt_fetcher_new(&c->fetch, &fc, c->st.io_note, sizeof c->st.io_note)))
        goto fail;
    switch (tt_fetcher_mode(c->fetch)) {
    case TT_FETCH_URING: c->st.io = TT_IO_URING; break;
    case TT_FETCH_MMAP: c->st.io = TT_IO_MMAP; break;
    default: c->st.io = TT_IO_PREAD; break;
    }
    if (!c->st.io_note[0] && idx->io_note[0])
        snprintf(c->st.io_note, sizeof c->st.io_note, "%s", idx->io_note);
    *out = c;
    return TT_OK;
fail:
    tt_search_ctx_free(c);
    return st;
}

/* Frees the buffers sized by the query length (nqp_cap). */
static void free_query_buffers(tt_search_ctx *c) {
    free(c->Qp);
    free(c->qpack);
    free(c->qscale);
    free(c->St);
    free(c->m);
    free(c->QR);
    c->Qp = c->St = c->m = c->QR = c->qscale = NULL;
    c->qpack = NULL;
    c->nqp_cap = 0;
}

void tt_search_ctx_free(tt_search_ctx *c) {
    if (!c)
        return;
    tt_fetcher_free(c->fetch);
    tt_resdec_free(&c->dec);
    free_query_buffers(c);
    free(c->probe_s);
    free(c->probe);
    free(c->keep);
    free(c->cell_seen);
    free(c->cells);
    free(c->bits);
    free(c->cand);
    free(c->list);
    tt_topk_free(&c->top);
    free(c->roff);
    free(c->rlen);
    free(c->rptr);
    free(c->R);
    free(c->gcodes);
    free(c->glens);
    free(c->gdocs);
    free(c->gscores);
    free(c);
}

int tt_search_ctx_use_avx512(tt_search_ctx *ctx, int on) {
    int had = ctx->avx512;
#ifdef TT_AVX512
    ctx->avx512 = on && __builtin_cpu_supports("avx512f");
#else
    (void)on;
#endif
    return had;
}

int tt_search_ctx_stats(const tt_search_ctx *ctx, tt_search_stats *out) {
    if (!ctx || !out)
        return tt_err(TT_EINVAL, "tt_search_ctx_stats: NULL argument");
    *out = ctx->st;
    tt_fetch_stats fs;
    tt_fetcher_stats(ctx->fetch, &fs);
    out->bytes_read = fs.bytes;
    out->reads = fs.reads;
    return TT_OK;
}

void tt_search_ctx_reset_stats(tt_search_ctx *ctx) {
    if (!ctx)
        return;
    int io = ctx->st.io;
    char note[sizeof ctx->st.io_note];
    memcpy(note, ctx->st.io_note, sizeof note);
    memset(&ctx->st, 0, sizeof ctx->st);
    ctx->st.io = io;
    memcpy(ctx->st.io_note, note, sizeof note);
    tt_fetcher_stats_reset(ctx->fetch);
}

/* Takes the query: copies it zero-padded to nqp rows and sizes the per-query buffers. */
static int ctx_set_query(tt_search_ctx *c, const float *Q, uint32_t nq, int score) {
    const tt_index *idx = c->idx;
    const uint32_t nqp = tt_qpad(nq), dim = idx->dim;
    if (nqp > c->nqp_cap) {
        /* Replaced, not grown: their contents do not outlive a query. On failure the
         * context holds none and the next query allocates again. */
        free_query_buffers(c);
        c->Qp = tt_alloc_aligned((uint64_t)nqp * dim, sizeof *c->Qp, 64, "query");
        c->St = tt_alloc_aligned((uint64_t)idx->num_centroids * nqp, sizeof *c->St, 64,
                                 "centroid scores");
        c->m = tt_alloc(nqp, sizeof *c->m, "search context");
        c->QR = tt_alloc_aligned(c->rows_cap * nqp, sizeof *c->QR, 64, "search context");
        c->qpack = tt_alloc_aligned(tt_cq_qpack_bytes(&idx->cq, nqp), 1, 64, "query");
        c->qscale = tt_alloc(nqp, sizeof *c->qscale, "query");
        if (!c->Qp || !c->St || !c->m || !c->QR || !c->qpack || !c->qscale) {
            free_query_buffers(c);
            return TT_ENOMEM;
        }
        c->nqp_cap = nqp;
    }
    memcpy(c->Qp, Q, (size_t)nq * dim * sizeof *Q);
    memset(c->Qp + (size_t)nq * dim, 0, (size_t)(nqp - nq) * dim * sizeof *Q);
    c->nq = nq;
    c->nqp = nqp;
    c->scale = score == TT_SCORE_MEAN ? 1.0f / (float)nq : 1.0f;
    return TT_OK;
}

/* St ~ C·Qᵀ: the int8 centroid scores of every query vector (src/cscore.c). */
static void centroid_scores(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    tt_cq_query(&idx->cq, c->Qp, c->nq, c->nqp, c->qpack, c->qscale);
    tt_cq_scores(&idx->cq, c->qpack, c->qscale, c->nqp, c->St);
}

/* ---------------------------------------------------------------- stages */

/* Inserts centroid k with score x into a sorted list of nprobe (scores ps, ids pc) that
 * it beats the last of; returns the new last score. Equal scores keep the earlier
 * (lower) id first. */
static inline float probe_insert(float *ps, uint32_t *pc, uint32_t nprobe, float x, uint32_t k) {
    uint32_t r = nprobe - 1;
    while (r > 0 && x > ps[r - 1]) {
        ps[r] = ps[r - 1];
        pc[r] = pc[r - 1];
        r--;
    }
    ps[r] = x;
    pc[r] = k;
    return ps[nprobe - 1];
}

#ifdef TT_SSE2
/* The best of a row's first nq scores, given the lane maxima over all nqp of them: the
 * padding rows (scores 0) must not count. */
static inline float row_max_sse(__m128 lanes, const float *row, uint32_t nq, uint32_t nqp) {
    float m = -INFINITY;
    if (nq == nqp) {
        float t[4];
        _mm_storeu_ps(t, lanes);
        m = TT_MAX(TT_MAX(t[0], t[1]), TT_MAX(t[2], t[3]));
    } else {
        for (uint32_t i = 0; i < nq; i++)
            m = row[i] > m ? row[i] : m;
    }
    return m;
}
#endif

/* Best query score of every centroid (the pruning mask: a centroid survives if it
 * reaches the threshold) and, for nprobe == 1, every query vector's best centroid
 * (ties: the lower id). best and arg have nqp entries. */
static void scan_top1(const float *St, uint32_t K, uint32_t nq, uint32_t nqp, float threshold,
                      uint8_t *keep, float *best, uint32_t *arg) {
    for (uint32_t i = 0; i < nqp; i++) {
        best[i] = -INFINITY;
        arg[i] = UINT32_MAX;
    }
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        float m = -INFINITY;
#ifdef TT_SSE2
        const __m128i kv = _mm_set1_epi32((int)k);
        __m128 mx = _mm_set1_ps(-INFINITY);
        for (uint32_t i = 0; i < nqp; i += 4) {
            __m128 x = _mm_loadu_ps(row + i), b = _mm_loadu_ps(best + i);
            __m128i up = _mm_castps_si128(_mm_cmpgt_ps(x, b));
            __m128i a = _mm_loadu_si128((const __m128i *)(arg + i));
            _mm_storeu_ps(best + i, _mm_max_ps(x, b));
            _mm_storeu_si128((__m128i *)(arg + i),
                             _mm_or_si128(_mm_and_si128(up, kv), _mm_andnot_si128(up, a)));
            mx = _mm_max_ps(x, mx);
        }
        m = row_max_sse(mx, row, nq, nqp);
#else
        for (uint32_t i = 0; i < nqp; i++) {
            if (row[i] > best[i]) {
                best[i] = row[i];
                arg[i] = k;
            }
            if (i < nq)
                m = row[i] > m ? row[i] : m;
        }
#endif
        keep[k] = m >= threshold;
    }
}

#ifdef TT_AVX512
/* scan_top1 for nqp <= AVX512_MAX_NQP. */
AVX512_FN static void scan_top1_avx512(const float *St, uint32_t K, uint32_t nq, uint32_t nqp,
                                       float threshold, uint8_t *keep, float *best,
                                       uint32_t *arg) {
    const uint32_t nv = (nqp + 15) / 16;
    __m512 b[4];
    __m512i a[4];
    __mmask16 mp[4], mq[4];
    for (uint32_t r = 0; r < 4; r++) {
        b[r] = _mm512_set1_ps(-INFINITY);
        a[r] = _mm512_set1_epi32(-1);
        mp[r] = tt_lanes16(nqp, r);
        mq[r] = tt_lanes16(nq, r);
    }
    const __m512 thr = _mm512_set1_ps(threshold), ninf = _mm512_set1_ps(-INFINITY);
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        const __m512i kv = _mm512_set1_epi32((int)k);
        __mmask16 hit = 0;
        for (uint32_t r = 0; r < nv; r++) {
            __m512 x = _mm512_mask_loadu_ps(ninf, mp[r], row + 16 * r);
            __mmask16 up = _mm512_cmp_ps_mask(x, b[r], _CMP_GT_OQ);
            b[r] = _mm512_mask_mov_ps(b[r], up, x);
            a[r] = _mm512_mask_mov_epi32(a[r], up, kv);
            /* The best score reaches the threshold iff one of them does. */
            hit |= _mm512_mask_cmp_ps_mask(mq[r], x, thr, _CMP_GE_OQ);
        }
        keep[k] = hit != 0;
    }
    for (uint32_t r = 0; r < nv; r++) {
        _mm512_mask_storeu_ps(best + 16 * r, mp[r], b[r]);
        _mm512_mask_storeu_epi32(arg + 16 * r, mp[r], a[r]);
    }
}

/* scan_topn for nqp <= AVX512_MAX_NQP. */
AVX512_FN static void scan_topn_avx512(const float *St, uint32_t K, uint32_t nq, uint32_t nqp,
                                       uint32_t nprobe, const float *threshold, uint8_t *keep,
                                       float *probe_s, uint32_t *probe) {
    const uint32_t nv = (nqp + 15) / 16;
    __m512 worst[4];
    __mmask16 mq[4];
    for (uint32_t r = 0; r < 4; r++) {
        worst[r] = _mm512_set1_ps(-INFINITY);
        mq[r] = tt_lanes16(nq, r);
    }
    const __m512 thr = _mm512_set1_ps(threshold ? *threshold : 0.0f);
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        __mmask16 hit = 0;
        for (uint32_t r = 0; r < nv; r++) {
            __m512 x = _mm512_maskz_loadu_ps(mq[r], row + 16 * r);
            __mmask16 gt = _mm512_mask_cmp_ps_mask(mq[r], x, worst[r], _CMP_GT_OQ);
            hit |= _mm512_mask_cmp_ps_mask(mq[r], x, thr, _CMP_GE_OQ);
            if (!gt)
                continue;
            float w[16];
            _mm512_storeu_ps(w, worst[r]);
            for (uint32_t bits = gt; bits; bits &= bits - 1) {
                uint32_t l = (uint32_t)__builtin_ctz(bits), i = 16 * r + l;
                w[l] = probe_insert(probe_s + (size_t)i * nprobe, probe + (size_t)i * nprobe,
                                    nprobe, row[i], k);
            }
            worst[r] = _mm512_loadu_ps(w);
        }
        if (threshold)
            keep[k] = hit != 0;
    }
}

/* codes_max for nqp <= AVX512_MAX_NQP. */
AVX512_FN static void codes_max_avx512(float *m, const float *St, uint32_t nqp,
                                       const tt_index *idx, uint64_t d, const uint8_t *keep) {
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    const uint32_t nv = (nqp + 15) / 16;
    __m512 acc[4];
    __mmask16 mp[4];
    for (uint32_t r = 0; r < 4; r++) {
        acc[r] = _mm512_set1_ps(STAGE2_FLOOR);
        mp[r] = tt_lanes16(nqp, r);
    }
    for (uint64_t v = v0; v < v1; v++) {
        uint32_t k = tt_index_code(idx, v);
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * nqp);
        if (keep && !keep[k])
            continue;
        const float *s = St + (uint64_t)k * nqp;
        acc[0] = _mm512_max_ps(acc[0], _mm512_maskz_loadu_ps(mp[0], s));
        for (uint32_t r = 1; r < nv; r++)
            acc[r] = _mm512_max_ps(acc[r], _mm512_maskz_loadu_ps(mp[r], s + 16 * r));
    }
    for (uint32_t r = 0; r < nv; r++)
        _mm512_mask_storeu_ps(m + 16 * r, mp[r], acc[r]);
}
#endif

/* The nprobe best centroids of every query vector (lists sorted, ties: lower id) and,
 * with threshold, the pruning mask. probe_s/probe have nq * nprobe entries, already
 * -inf / UINT32_MAX; scratch has nqp floats. */
static void scan_topn(const float *St, uint32_t K, uint32_t nq, uint32_t nqp, uint32_t nprobe,
                      const float *threshold, uint8_t *keep, float *probe_s, uint32_t *probe,
                      float *scratch) {
    /* worst[i]: the score a centroid must beat to enter query vector i's list
     * (padding lanes never enter: +inf). A vector test skips most rows. */
    float *worst = scratch;
    for (uint32_t i = 0; i < nqp; i++)
        worst[i] = i < nq ? -INFINITY : INFINITY;
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        float mx = -INFINITY;
#ifdef TT_SSE2
        __m128 any = _mm_setzero_ps(), vmx = _mm_set1_ps(-INFINITY);
        for (uint32_t i = 0; i < nqp; i += 4) {
            __m128 x = _mm_loadu_ps(row + i);
            any = _mm_or_ps(any, _mm_cmpgt_ps(x, _mm_loadu_ps(worst + i)));
            vmx = _mm_max_ps(x, vmx);
        }
        bool enter = _mm_movemask_ps(any) != 0;
        mx = row_max_sse(vmx, row, nq, nqp);
#else
        bool enter = true;
        for (uint32_t i = 0; i < nq; i++)
            mx = row[i] > mx ? row[i] : mx;
#endif
        for (uint32_t i = 0; enter && i < nq; i++)
            if (row[i] > worst[i])
                worst[i] = probe_insert(probe_s + (size_t)i * nprobe, probe + (size_t)i * nprobe,
                                        nprobe, row[i], k);
        if (threshold)
            keep[k] = mx >= *threshold;
    }
}

/* One pass over St: with threshold, the pruning mask; and a sorted list of the nprobe
 * best centroids of every query vector (ties: lower id); then the distinct probed
 * centroids in c->cells. */
static int stage1_select(tt_search_ctx *c, uint32_t nprobe, const float *threshold,
                         uint32_t *ncells_out) {
    const uint32_t K = c->idx->num_centroids, nq = c->nq, nqp = c->nqp;
    int st;
    size_t np = (size_t)nq * nprobe, cap = TT_MAX(np, (size_t)nqp);
    if ((st = tt_grow((void **)&c->probe, &c->probe_cap, cap, sizeof *c->probe, "probes")) ||
        (st = tt_grow((void **)&c->probe_s, &c->probe_s_cap, cap, sizeof *c->probe_s,
                       "probes")))
        return st;
    if (nprobe == 1 && threshold) {
#ifdef TT_AVX512
        if (c->avx512 && nqp <= AVX512_MAX_NQP)
            scan_top1_avx512(c->St, K, nq, nqp, *threshold, c->keep, c->probe_s, c->probe);
        else
#endif
            scan_top1(c->St, K, nq, nqp, *threshold, c->keep, c->probe_s, c->probe);
    } else {
        for (size_t r = 0; r < np; r++) {
            c->probe_s[r] = -INFINITY;
            c->probe[r] = UINT32_MAX;
        }
#ifdef TT_AVX512
        if (c->avx512 && nqp <= AVX512_MAX_NQP)
            scan_topn_avx512(c->St, K, nq, nqp, nprobe, threshold, c->keep, c->probe_s, c->probe);
        else
#endif
            scan_topn(c->St, K, nq, nqp, nprobe, threshold, c->keep, c->probe_s, c->probe,
                      c->m);
    }
    uint32_t ncells = 0;
    for (size_t r = 0; r < np; r++) {
        uint32_t k = c->probe[r];
        if (k != UINT32_MAX && !c->cell_seen[k]) {
            c->cell_seen[k] = 1;
            c->cells[ncells++] = k;
        }
    }
    for (uint32_t t = 0; t < ncells; t++)
        c->cell_seen[c->cells[t]] = 0;
    *ncells_out = ncells;
    return TT_OK;
}

/* Candidates: the union of the probed IVF lists, gathered in a bitmap and read back in
 * ascending order (which also clears the bitmap for the next query). */
static int stage1_union(tt_search_ctx *c, uint32_t ncells, size_t *ncand_out) {
    const tt_index *idx = c->idx;
    uint64_t wlo = UINT64_MAX, whi = 0, total = 0;
    int st;
    for (uint32_t t = 0; t < ncells; t++) {
        uint32_t k = c->cells[t];
        const uint8_t *p = idx->ivf_data + idx->ivf_off[k];
        const uint8_t *end = idx->ivf_data + idx->ivf_off[k + 1];
        uint64_t doc = 0, delta;
        for (uint32_t e = 0; e < idx->ivf_len[k]; e++) {
            if (!tt_varint_get(&p, end, &delta) || !tt_add_ok(doc, delta, &doc) ||
                doc >= idx->num_docs) {
                for (uint64_t w = wlo; wlo != UINT64_MAX && w <= whi; w++)
                    c->bits[w] = 0;
                return tt_err(TT_ECORRUPT, "%s: IVF list of centroid %u is damaged",
                              idx->f_ivf.path, k);
            }
            uint64_t w = doc >> 6;
            c->bits[w] |= 1ull << (doc & 63);
            wlo = w < wlo ? w : wlo;
            whi = w > whi ? w : whi;
        }
        total += idx->ivf_len[k];
    }
    size_t n = 0;
    if (total > 0) {
        if ((st = tt_grow((void **)&c->cand, &c->cand_cap,
                           (size_t)TT_MIN(total, idx->num_docs), sizeof *c->cand, "candidates")))
            return st;
        for (uint64_t w = wlo; w <= whi; w++) {
            uint64_t x = c->bits[w];
            c->bits[w] = 0;
            while (x) {
                c->cand[n++] = (w << 6) | (uint64_t)__builtin_ctzll(x);
                x &= x - 1;
            }
        }
    }
    *ncand_out = n;
    return TT_OK;
}

/* PLAID stage 1: St = C·Qᵀ, the pruning mask and the candidate documents.
 * When the nprobe lists hold fewer than min_cand documents (small collections, where a
 * list holds a handful of documents), nprobe doubles until they do or every centroid
 * is probed: stage 2 has room for min_cand = ndocs documents, and filling it costs
 * little. On collections large enough for PLAID's defaults this never triggers. */
static int stage1(tt_search_ctx *c, uint32_t nprobe, float threshold, size_t min_cand,
                  size_t *ncand_out) {
    const tt_index *idx = c->idx;
    const uint32_t K = idx->num_centroids;
    int st;
    uint32_t ncells;
    centroid_scores(c);
    nprobe = TT_MIN(nprobe, K);
    if ((st = stage1_select(c, nprobe, &threshold, &ncells)) ||
        (st = stage1_union(c, ncells, ncand_out)))
        return st;
    while (*ncand_out < min_cand && *ncand_out < idx->num_docs && nprobe < K) {
        nprobe = nprobe > K / 2 ? K : 2 * nprobe;
        if ((st = stage1_select(c, nprobe, NULL, &ncells)) ||
            (st = stage1_union(c, ncells, ncand_out)))
            return st;
    }
    return TT_OK;
}

/* Maximum of the St rows of a document's codes (only those with keep[code], if keep),
 * starting from STAGE2_FLOOR. */
static void codes_max(float *m, const float *St, uint32_t nqp, const tt_index *idx, uint64_t d,
                      const uint8_t *keep) {
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    for (uint32_t i = 0; i < nqp; i++)
        m[i] = STAGE2_FLOOR;
    for (uint64_t v = v0; v < v1; v++) {
        uint32_t k = tt_index_code(idx, v);
        /* St rows are random accesses: ask for a row a few codes ahead. */
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * nqp);
        if (keep && !keep[k])
            continue;
        max_into(m, St + (uint64_t)k * nqp, nqp);
    }
}

/* PLAID stages 2 and 3: approximate score from the centroid scores alone; with keep,
 * only centroids that survived pruning count. Pushes every document into c->top. */
static void centroid_interaction(tt_search_ctx *c, const uint64_t *docs, size_t n,
                                 const uint8_t *keep) {
    const tt_index *idx = c->idx;
    float *m = c->m;
    for (size_t t = 0; t < n; t++) {
        uint64_t d = docs[t];
        /* The documents are scattered: ask for the offsets two documents ahead and the
         * codes one document ahead. */
        if (t + 2 < n)
            __builtin_prefetch(idx->doc_vec0 + docs[t + 2]);
        if (t + 1 < n)
            __builtin_prefetch(idx->codes + idx->doc_vec0[docs[t + 1]] * idx->code_bytes);
#ifdef TT_AVX512
        if (c->avx512 && c->nqp <= AVX512_MAX_NQP)
            codes_max_avx512(m, c->St, c->nqp, idx, d, keep);
        else
#endif
            codes_max(m, c->St, c->nqp, idx, d, keep);
        float sum = 0;
        for (uint32_t i = 0; i < c->nq; i++)
            sum += m[i];
        tt_topk_push(&c->top, d, sum);
    }
}

/* Scores one group of decoded documents and pushes them into c->top. */
static void flush_group(tt_search_ctx *c, uint32_t ndocs) {
    const tt_index *idx = c->idx;
    tt_maxsim_group(c->Qp, c->nq, c->nqp, idx->dim, c->R, c->glens, ndocs, c->QR, c->gscores);
    for (uint32_t d = 0; d < ndocs; d++)
        tt_topk_push(&c->top, c->gdocs[d], c->gscores[d] * c->scale);
}

/* Decompressed MaxSim of n documents whose packed residuals are at ptr[t]; docs NULL
 * means the consecutive documents first, first+1, ... */
static void score_decompressed(tt_search_ctx *c, const uint64_t *docs, uint64_t first, size_t n,
                               const uint8_t *const *ptr) {
    const tt_index *idx = c->idx;
    const uint32_t dim = idx->dim;
    uint64_t rows = 0;
    uint32_t g = 0;
    for (size_t t = 0; t < n; t++) {
        uint64_t d = docs ? docs[t] : first + t;
        uint32_t len = idx->doclens[d];
        if (rows + len > c->rows_cap) {
            flush_group(c, g);
            rows = 0;
            g = 0;
        }
        uint64_t v0 = idx->doc_vec0[d];
        for (uint32_t j = 0; j < len; j++)
            c->gcodes[j] = tt_index_code(idx, v0 + j);
        tt_resdec_decode_add(&c->dec, ptr[t], len, idx->centroids, c->gcodes, c->R + rows * dim);
        c->glens[g] = len;
        c->gdocs[g] = d;
        g++;
        rows += len;
    }
    if (g)
        flush_group(c, g);
    c->st.scored_docs += n;
}

static int reserve_ranges(tt_search_ctx *c, size_t n) {
    size_t cap = c->r_cap, cap2 = c->r_cap, cap3 = c->r_cap;
    int st;
    if ((st = tt_grow((void **)&c->roff, &cap, n, sizeof *c->roff, "residual ranges")) ||
        (st = tt_grow((void **)&c->rlen, &cap2, n, sizeof *c->rlen, "residual ranges")) ||
        (st = tt_grow((void **)&c->rptr, &cap3, n, sizeof *c->rptr, "residual ranges")))
        return st;
    c->r_cap = cap;
    return TT_OK;
}

/* PLAID stage 4: fetch the residuals of docs[0..n) and score them. */
static int stage4(tt_search_ctx *c, const uint64_t *docs, size_t n) {
    const tt_index *idx = c->idx;
    const uint64_t rb = idx->res_bytes;
    int st;
    if ((st = reserve_ranges(c, n)))
        return st;
    for (size_t t = 0; t < n; t++) {
        c->roff[t] = idx->doc_vec0[docs[t]] * rb;
        c->rlen[t] = (uint64_t)idx->doclens[docs[t]] * rb;
    }
    double t0 = tt_now();
    if ((st = tt_fetcher_read(c->fetch, n, c->roff, c->rlen, c->rptr)))
        return st;
    c->st.seconds_fetch += tt_now() - t0;
    score_decompressed(c, docs, 0, n, c->rptr);
    return TT_OK;
}

/* Exhaustive decompressed MaxSim: the residual file in sequential chunks. */
static int scan_decompressed(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint64_t rb = idx->res_bytes, D = idx->num_docs;
    int st;
    uint64_t d0 = 0;
    while (d0 < D) {
        uint64_t d1 = d0 + 1;
        while (d1 < D && (idx->doc_vec0[d1 + 1] - idx->doc_vec0[d0]) * rb <= SCAN_BYTES)
            d1++;
        uint64_t off = idx->doc_vec0[d0] * rb, len = (idx->doc_vec0[d1] - idx->doc_vec0[d0]) * rb;
        const uint8_t *base;
        double t0 = tt_now();
        if ((st = tt_fetcher_read(c->fetch, 1, &off, &len, &base)))
            return st;
        c->st.seconds_fetch += tt_now() - t0;
        if ((st = reserve_ranges(c, (size_t)(d1 - d0))))
            return st;
        for (uint64_t d = d0; d < d1; d++)
            c->rptr[d - d0] = base + (idx->doc_vec0[d] - idx->doc_vec0[d0]) * rb;
        score_decompressed(c, NULL, d0, (size_t)(d1 - d0), c->rptr);
        d0 = d1;
    }
    return TT_OK;
}

/* Exact MaxSim over the kept float16 originals of every document. */
static void scan_exact(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint32_t dim = idx->dim;
    uint64_t rows = 0;
    uint32_t g = 0;
    for (uint64_t d = 0; d < idx->num_docs; d++) {
        uint32_t len = idx->doclens[d];
        if (rows + len > c->rows_cap) {
            flush_group(c, g);
            rows = 0;
            g = 0;
        }
        const uint16_t *src = idx->originals + idx->doc_vec0[d] * dim;
        float *dst = c->R + rows * dim;
        for (uint64_t e = 0; e < (uint64_t)len * dim; e++)
            dst[e] = tt_f16_to_f32(src[e]);
        c->glens[g] = len;
        c->gdocs[g] = d;
        g++;
        rows += len;
    }
    if (g)
        flush_group(c, g);
    c->st.scored_docs += idx->num_docs;
}

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int check_options(const tt_index *idx, const tt_search_options *o) {
    if (o->mode != TT_MODE_PLAID && o->mode != TT_MODE_EXHAUSTIVE && o->mode != TT_MODE_EXACT)
        return tt_err(TT_EINVAL, "search: unknown mode %d", o->mode);
    if (o->score != TT_SCORE_SUM && o->score != TT_SCORE_MEAN)
        return tt_err(TT_EINVAL, "search: unknown score reduction %d", o->score);
    if (o->nprobe < 1)
        return tt_err(TT_EINVAL, "search: nprobe %d must be at least 1", o->nprobe);
    if (!isfinite(o->threshold))
        return tt_err(TT_EINVAL, "search: the centroid score threshold must be finite");
    if (o->ndocs < 1)
        return tt_err(TT_EINVAL, "search: ndocs must be at least 1");
    if (o->mode == TT_MODE_EXACT && !idx->originals)
        return tt_err(TT_EUNSUPPORTED,
                      "%s: exact mode needs the original vectors, which this index did not keep "
                      "(build with keep_originals)", idx->dir);
    return TT_OK;
}

/* Keeps the documents of c->top as the next stage's list. */
static int top_to_list(tt_search_ctx *c, size_t *n) {
    int st;
    *n = c->top.n;
    if ((st = tt_grow((void **)&c->list, &c->list_cap, *n, sizeof *c->list, "candidates")))
        return st;
    for (size_t t = 0; t < *n; t++)
        c->list[t] = c->top.h[t].doc;
    return TT_OK;
}

int tt_search(const tt_index *idx, tt_search_ctx *ctx, const float *Q, uint32_t nq, uint32_t k,
              const tt_search_options *opt, tt_hit *hits, uint32_t *nhits) {
    int st;
    if (nhits)
        *nhits = 0;
    if (!idx || !ctx || !Q || !hits || !nhits)
        return tt_err(TT_EINVAL, "tt_search: NULL argument");
    if (ctx->idx != idx)
        return tt_err(TT_EINVAL, "tt_search: the context belongs to another index");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_search: k must be at least 1");
    if (nq == 0)
        return tt_err(TT_EINVAL, "tt_search: a query needs at least one vector");
    int64_t bad = tt_find_nonfinite(Q, nq, idx->dim);
    if (bad >= 0)
        return tt_err(TT_EVALUE, "tt_search: query vector %lld has a NaN or infinite value",
                      (long long)bad);
    tt_search_options o;
    tt_search_options_resolve(opt, k, &o);
    if ((st = check_options(idx, &o)) || (st = ctx_set_query(ctx, Q, nq, o.score)))
        return st;
    uint32_t kk = (uint64_t)k > idx->num_docs ? (uint32_t)idx->num_docs : k;
    ctx->st.queries++;
    double t0 = tt_now(), t1;

    if (o.mode == TT_MODE_EXACT) {
        if ((st = tt_topk_reset(&ctx->top, kk)))
            return st;
        scan_exact(ctx);
        ctx->st.seconds[3] += tt_now() - t0;
        goto done;
    }
    if (o.mode == TT_MODE_EXHAUSTIVE) {
        t1 = t0;
        if ((st = tt_topk_reset(&ctx->top, kk)) || (st = scan_decompressed(ctx)))
            return st;
        ctx->st.seconds[3] += tt_now() - t1;
        goto done;
    }

    /* PLAID. */
    size_t n = 0;
    if ((st = stage1(ctx, (uint32_t)o.nprobe, o.threshold, o.ndocs, &n)))
        return st;
    ctx->st.candidates += n;
    t1 = tt_now();
    ctx->st.seconds[0] += t1 - t0;
    const uint64_t *docs = ctx->cand;
    /* Stage 2: pruned centroid interaction, skipped when every candidate is kept. */
    if (n > o.ndocs) {
        if ((st = tt_topk_reset(&ctx->top, o.ndocs)))
            return st;
        centroid_interaction(ctx, docs, n, ctx->keep);
        ctx->st.stage2_docs += n;
        if ((st = top_to_list(ctx, &n)))
            return st;
        docs = ctx->list;
    }
    t0 = tt_now();
    ctx->st.seconds[1] += t0 - t1;
    /* Stage 3: full centroid interaction. */
    uint32_t n3 = TT_MAX(o.ndocs / 4, kk);
    if (n > n3) {
        if ((st = tt_topk_reset(&ctx->top, n3)))
            return st;
        centroid_interaction(ctx, docs, n, NULL);
        ctx->st.stage3_docs += n;
        if ((st = top_to_list(ctx, &n)))
            return st;
        docs = ctx->list;
    }
    t1 = tt_now();
    ctx->st.seconds[2] += t1 - t0;
    /* Stage 4 in document order: the fetcher then reads ascending offsets and the
     * groups (hence the float rounding of their sgemm) do not depend on heap order. */
    if (docs == ctx->list && n > 1)
        qsort(ctx->list, n, sizeof *ctx->list, u64_cmp);
    if ((st = tt_topk_reset(&ctx->top, kk)) || (st = stage4(ctx, docs, n)))
        return st;
    ctx->st.seconds[3] += tt_now() - t1;

done:;
    uint32_t got = tt_topk_finish(&ctx->top);
    memcpy(hits, ctx->top.h, (size_t)got * sizeof *hits);
    *nhits = got;
    return TT_OK;
}

/* ----------------------------------------------------------------- batch */

typedef struct batch_job {
    const tt_index *idx;
    const float *Q;
    const uint64_t *qoffs;
    const uint32_t *qlens;
    uint64_t nqueries;
    uint32_t k;
    const tt_search_options *opt;
    tt_hit *hits;
    uint32_t *nhits;
    double *seconds;
    atomic_uint_fast64_t next;   /* next query to take */
    atomic_int failed;
    pthread_mutex_t mu;          /* guards the first error below */
    int status;
    char msg[1024];
} batch_job;

static void batch_fail(batch_job *j, int st, uint64_t q) {
    pthread_mutex_lock(&j->mu);
    if (j->status == TT_OK) {
        j->status = st;
        if (q == UINT64_MAX)
            snprintf(j->msg, sizeof j->msg, "%s", tt_last_error());
        else
            snprintf(j->msg, sizeof j->msg, "query %llu: %s", (unsigned long long)q,
                     tt_last_error());
    }
    pthread_mutex_unlock(&j->mu);
    atomic_store(&j->failed, 1);
}

/* Each thread owns a search context and takes queries from a shared counter, so the
 * work balances itself; every query's result depends on the query alone. */
static void batch_worker(void *arg, int t, int nthreads) {
    (void)t;
    (void)nthreads;
    batch_job *j = arg;
    tt_search_ctx *ctx = NULL;
    int st = tt_search_ctx_new(j->idx, &ctx);
    if (st) {
        batch_fail(j, st, UINT64_MAX);
        return;
    }
    const uint64_t dim = j->idx->dim;
    while (!atomic_load(&j->failed)) {
        uint64_t q = atomic_fetch_add(&j->next, 1);
        if (q >= j->nqueries)
            break;
        double t0 = tt_now();
        st = tt_search(j->idx, ctx, j->Q + j->qoffs[q] * dim, j->qlens[q], j->k, j->opt,
                       j->hits + q * j->k, &j->nhits[q]);
        if (j->seconds)
            j->seconds[q] = tt_now() - t0;
        if (st) {
            batch_fail(j, st, q);
            break;
        }
    }
    tt_search_ctx_free(ctx);
}

int tt_search_batch(const tt_index *idx, const float *Q, const uint64_t *qoffs,
                    const uint32_t *qlens, uint64_t nqueries, uint32_t k,
                    const tt_search_options *opt, int threads, tt_hit *hits, uint32_t *nhits,
                    double *seconds) {
    if (!idx || (nqueries && (!Q || !qoffs || !qlens || !hits || !nhits)))
        return tt_err(TT_EINVAL, "tt_search_batch: NULL argument");
    if (k == 0)
        return tt_err(TT_EINVAL, "tt_search_batch: k must be at least 1");
    if (nqueries == 0)
        return TT_OK;
    if (threads <= 0)
        threads = tt_default_threads();
    if ((uint64_t)threads > nqueries)
        threads = (int)nqueries;
    for (uint64_t q = 0; q < nqueries; q++)
        nhits[q] = 0;
    batch_job j = {.idx = idx, .Q = Q, .qoffs = qoffs, .qlens = qlens, .nqueries = nqueries,
                   .k = k, .opt = opt, .hits = hits, .nhits = nhits, .seconds = seconds,
                   .status = TT_OK};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.mu, NULL);
    tt_parallel(threads, batch_worker, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.status != TT_OK)
        return tt_err(j.status, "%s", j.msg);
    return TT_OK;
}

/* --------------------------------------------------------------- queries */

void tt_queries_free(tt_queries *q) {
    if (!q)
        return;
    if (q->ids)
        for (uint64_t i = 0; i < q->num_queries; i++)
            free(q->ids[i]);
    free(q->ids);
    free(q->vectors);
    free(q->offsets);
    free(q->lens);
    free(q->path);
    free(q);
}

/* One id per line (trailing CR stripped); the count must equal the queries. */
static int read_ids(tt_queries *q, const char *path) {
    int st = TT_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open query ids", path);
    char *line = NULL;
    size_t cap = 0;
    uint64_t n = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (n >= q->num_queries) {
            n++;
            continue;  /* count them all for the message */
        }
        if (len == 0) {
            st = tt_err(TT_EPARSE, "%s:%llu: empty query id", path, (unsigned long long)n + 1);
            goto done;
        }
        if (!(q->ids[n] = strdup(line))) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        n++;
    }
    if (ferror(f)) {
        st = tt_err_errno(TT_EIO, errno, "%s: read error", path);
        goto done;
    }
    if (n != q->num_queries)
        st = tt_err(TT_EDIM, "%s: %llu query ids for %llu queries in %s", path,
                    (unsigned long long)n, (unsigned long long)q->num_queries, q->path);
done:
    free(line);
    fclose(f);
    return st;
}

int tt_queries_load(tt_queries **out, const char *path, const char *qlens_path,
                    const char *ids_path) {
    int st = TT_OK;
    int64_t *ql = NULL;
    uint64_t nql = 0;
    if (!out || !path)
        return tt_err(TT_EINVAL, "tt_queries_load: NULL argument");
    *out = NULL;
    tt_queries *q = tt_calloc(1, sizeof *q, "queries");
    if (!q)
        return TT_ENOMEM;
    if (!(q->path = strdup(path))) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    tt_npy_header h;
    if ((st = tt_npy_read_floats(path, &q->vectors, &h)))
        goto fail;
    if (qlens_path && (st = tt_npy_read_ints(qlens_path, &ql, &nql)))
        goto fail;
    uint64_t kq = 0;
    if (h.ndim == 3) {
        q->num_queries = h.shape[0];
        kq = h.shape[1];
        q->dim = (uint32_t)h.shape[2];
        q->num_vectors = h.shape[0] * h.shape[1];
        if (ql && nql != q->num_queries) {
            st = tt_err(TT_EDIM, "%s: %llu query lengths for the %llu queries of %s", qlens_path,
                        (unsigned long long)nql, (unsigned long long)q->num_queries, path);
            goto fail;
        }
    } else if (h.ndim == 2) {
        if (!ql) {
            st = tt_err(TT_EDIM, "%s: a 2-D query array [num_vectors, dim] needs a qlens file "
                        "with the vectors of each query", path);
            goto fail;
        }
        q->num_queries = nql;
        q->dim = (uint32_t)h.shape[1];
        q->num_vectors = h.shape[0];
    } else {
        st = tt_err(TT_EFORMAT, "%s: expected queries as [num_queries, Kq, dim] or "
                    "[num_vectors, dim] (with qlens), got a %d-D array", path, h.ndim);
        goto fail;
    }
    if (q->dim == 0 || (h.ndim == 3 && kq == 0) || h.shape[h.ndim - 1] > UINT32_MAX) {
        st = tt_err(TT_EDIM, "%s: empty query vectors (shape has a 0)", path);
        goto fail;
    }
    uint64_t nq = q->num_queries;
    q->offsets = tt_alloc(nq ? nq : 1, sizeof *q->offsets, "queries");
    q->lens = tt_alloc(nq ? nq : 1, sizeof *q->lens, "queries");
    q->ids = tt_calloc(nq ? nq : 1, sizeof *q->ids, "queries");
    if (!q->offsets || !q->lens || !q->ids) {
        st = TT_ENOMEM;
        goto fail;
    }
    uint64_t row = 0;
    for (uint64_t i = 0; i < nq; i++) {
        uint64_t len = kq;
        if (ql) {
            if (ql[i] < 1 || (h.ndim == 3 && (uint64_t)ql[i] > kq) || ql[i] > UINT32_MAX) {
                st = tt_err(TT_EDIM, "%s: query %llu has length %lld (must be 1..%llu)",
                            qlens_path, (unsigned long long)i, (long long)ql[i],
                            (unsigned long long)(h.ndim == 3 ? kq : UINT32_MAX));
                goto fail;
            }
            len = (uint64_t)ql[i];
        }
        q->offsets[i] = h.ndim == 3 ? i * kq : row;
        q->lens[i] = (uint32_t)len;
        row += len;
    }
    if (h.ndim == 2 && row != q->num_vectors) {
        st = tt_err(TT_EDIM, "%s: query lengths add up to %llu vectors but %s has %llu",
                    qlens_path, (unsigned long long)row, path,
                    (unsigned long long)q->num_vectors);
        goto fail;
    }
    if (ids_path) {
        if ((st = read_ids(q, ids_path)))
            goto fail;
    } else {
        for (uint64_t i = 0; i < nq; i++) {
            char buf[24];
            snprintf(buf, sizeof buf, "%llu", (unsigned long long)i);
            if (!(q->ids[i] = strdup(buf))) {
                st = tt_err(TT_ENOMEM, "%s: out of memory", path);
                goto fail;
            }
        }
    }
    for (uint64_t i = 0; i < nq; i++) {
        int64_t bad = tt_find_nonfinite(q->vectors + q->offsets[i] * q->dim, q->lens[i], q->dim);
        if (bad >= 0) {
            st = tt_err(TT_EVALUE, "%s: query %llu (id %s), vector %lld has a NaN or infinite "
                        "value", path, (unsigned long long)i, q->ids[i], (long long)bad);
            goto fail;
        }
    }
    free(ql);
    *out = q;
    return TT_OK;
fail:
    free(ql);
    tt_queries_free(q);
    return st;
}

int tt_queries_check(const tt_queries *q, const tt_index *idx) {
    if (!q || !idx)
        return tt_err(TT_EINVAL, "tt_queries_check: NULL argument");
    if (q->dim != idx->dim)
        return tt_err(TT_EDIM, "%s: query vectors have dimension %u but the index %s has %u",
                      q->path, q->dim, idx->dir, idx->dim);
    return TT_OK;
}

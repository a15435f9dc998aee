/* Calibration queries, their exhaustive reference, and the grid search over PLAID's
 * parameters (doc/search.md, "Calibrated defaults").
 *
 * Why measure instead of using ColBERTv2's table: the table was tuned on 128-d ColBERT
 * vectors. On 3584-d hidden states with 4-vector queries, or noisy 128-d collections,
 * the same nprobe and ndocs find half of exhaustive search's top 10 (doc/benchmarks.md).
 * Recall against exhaustive search is what PLAID's approximations cost, and it can be
 * measured on the index itself: with the user's queries, or with pseudo-queries made
 * from its documents. The grid (nprobe x ndocs) is searched as a staircase: recall
 * grows with both, so the smallest ndocs that reaches the target with nprobe p is an
 * upper bound for 2p, and each nprobe costs a measurement or two; the search stops
 * when more probes cost more than the cheapest set found, or stop adding recall. */
#include "common/first_err.h"
#include "tune/tune.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

static const int NPROBES[] = {1, 2, 4, 8, 16, 32};
/* Pseudo-queries by query length (doc/benchmarks.md, "Pseudo-query calibration
 * transfer", measured on scifact and the DiffRetriever shape): long ones (ColBERT's 32
 * vectors) take half their vectors from other documents than their source; short ones
 * (at most PSEUDO_SHORT vectors, the DiffRetriever shape's 4) all from their source.
 * With 4 vectors a vector from another document is a quarter of the score: such
 * queries had no clear answer and predicted 0.62-0.78 recall where real queries got
 * 0.88-0.95 with the same sets. Noise of relative norm 0.5 for both: 1.0 on long ones
 * predicted scifact's recall more closely but chose the same sets there, and sets
 * twice as dear at the same recall on the ColBERT-shape collections of 20k and 300k
 * documents ("Side by side with the PLAID reference"). */
#define PSEUDO_SHORT 8
#define PSEUDO_OTHER_LONG 0.5
#define PSEUDO_OTHER_SHORT 0.0
#define PSEUDO_NOISE 0.5f
/* Short pseudo-queries on an index with a residual sketch (the adaptive codec found
 * massive-activation dimensions: LLM hidden states) take more noise. Documents put most
 * of their energy on those dimensions; an LLM encoder's queries put less (the issue's
 * measurement: 57% against 93%), so real queries lean on the other dimensions, where
 * centroids rank worst, and pseudo-queries made from documents are easier than they
 * are: on the LLM-like collection, 4-vector pseudo-queries at noise 0.5 predicted 0.97
 * for a set that real queries got 0.91 with. At 0.75 the calibrated search reaches the
 * target with real queries there (doc/benchmarks.md, *Short pseudo-queries on indexes
 * with massive activations*). Not for the DiffRetriever shape without those
 * dimensions, whose pseudo-queries at 0.5 are already pessimistic (0.75 made its
 * search 30% slower for no recall). */
#define PSEUDO_NOISE_SKETCHED_SHORT 0.75f
/* Largest share of a pseudo-query vector's energy left on the residual sketch's
 * positions (the massive activations; 1: as the document has them). Damping them
 * (as queries of LLM encoders weigh them less) made the DiffRetriever shape's
 * predictions worse (doc/benchmarks.md), so the default keeps them. */
#define PSEUDO_OUTLIER_SHARE 1.0
/* The grid's ndocs: 64, 128, ... 8192 (NDOCS_MAX of them). */
#define NDOCS_MIN 64u
#define NDOCS_TOP 8192u
#define NDOCS_MAX 8
/* The relative pruning the grid measures: ratio 0, which keeps every centroid that
 * scores at least 0 for some query vector (nearly all of them). Stage 2 costs the same
 * either way here (it visits every code of every candidate and only skips the pruned
 * ones' maxima), while pruning at 0.5 drops the contributions that rank a noisy
 * collection's documents: at the same ndocs, ratio 0 finds as much or more of
 * exhaustive search's top 10 on every collection measured (0.955 against 0.788 on the
 * 300k ColBERT shape at ndocs 256; 0.994 against 0.950 on 20k at ndocs 128; scifact
 * and the DiffRetriever shape within 0.001 or better), so the calibration reaches its
 * target at a smaller ndocs (doc/benchmarks.md, *Stage-2 pruning and imputation*). */
#define PRUNE_RATIO 0.0f
/* The adaptive stage-4 depth's margin (doc/search.md, "Stage-4 depth"): when the
 * centroid-only scores of stage 3 misrank, no ndocs helps unless stage 4 goes deeper. */
static const float MARGINS[] = {1.0f, 2.0f, 4.0f};
/* Exhaustive search competes once a set's candidates are 1/EXHAUSTIVE_SHARE of the live
 * documents: its cost is measured then (once), from there on no set dearer than it
 * (scan_cheaper) is measured, and the calibration chooses it when it costs no more
 * than every set reaching the target. On a small noisy index PLAID needed ndocs 8192
 * of 9,000 documents for recall 0.95, as slow per query as the scan and 1.7x slower
 * than a batch's one pass, and measuring the deep sets took 37x the build
 * (doc/benchmarks.md, *Exhaustive search as a calibrated choice*); on large indexes
 * the grid never gets there. */
#define EXHAUSTIVE_SHARE 16
#define SCAN_TIE 0.1
/* Screening: with at least SCREEN_MIN_QUERIES calibration queries, a set is measured on
 * the first SCREEN_QUERIES first and on the rest only when their recall is at least the
 * target minus SCREEN_SLACK. Most sets of the grid miss the target by far more; on
 * 16 queries the mean recall@10 errs by about 0.05 (per-query spread 0.2-0.3), so a
 * set that reaches the target is rarely rejected, and one that is costs a deeper set,
 * not recall. The whole calibration of a 9,000-document noisy index took 66 s, mostly
 * measuring sets far below the target (doc/benchmarks.md, *Exhaustive search as a
 * calibrated choice*). */
#define SCREEN_QUERIES 16u
#define SCREEN_MIN_QUERIES 48u
#define SCREEN_SLACK 0.15

static void calib_zero(tt_calib *c, const tt_index *idx, int cost) {
    memset(c, 0, sizeof *c);
    c->idx = idx;
    c->cost = cost;
    c->threads = 1;
    uint64_t live_vecs = 0;
    for (uint64_t d = 0; d < idx->num_docs; d++)
        if (!tt_index_deleted(idx, d))
            live_vecs += idx->doclens[d];
    c->avg_doclen = idx->num_live ? (double)live_vecs / (double)idx->num_live : 1;
}

static int calib_buffers(tt_calib *c) {
    int st;
    if ((st = tt_search_ctx_new(c->idx, &c->ctx)))
        return st;
    c->truth = tt_alloc(c->nq, TT_CALIB_DEPTH * sizeof *c->truth, "calibration reference");
    c->ntruth = tt_alloc(c->nq, sizeof *c->ntruth, "calibration reference");
    c->hits = tt_alloc(TT_CALIB_DEPTH, sizeof *c->hits, "calibration hits");
    c->qrecall = tt_alloc(c->nq, sizeof *c->qrecall, "calibration recall");
    c->qfirst = tt_alloc(c->nq, sizeof *c->qfirst, "calibration recall");
    return c->truth && c->ntruth && c->hits && c->qrecall && c->qfirst ? TT_OK : TT_ENOMEM;
}

int tt_calib_init(tt_calib *c, const tt_index *idx, const float *Q, const uint64_t *qoffs,
                  const uint32_t *qlens, uint64_t nq, int cost) {
    calib_zero(c, idx, cost);
    if (!Q || !qoffs || !qlens || nq == 0)
        return tt_err(TT_EINVAL, "calibration: no queries");
    int st = tt_queries_valid(idx, Q, qoffs, qlens, nq, "calibration");
    if (st)
        return st;
    c->Q = Q;
    c->qoffs = qoffs;
    c->qlens = qlens;
    c->nq = nq;
    return calib_buffers(c);
}

/* A standard normal deviate (Box-Muller; one of the pair is enough here). */
static double gauss(tt_rng *r) {
    double u = tt_rng_uniform(r), v = tt_rng_uniform(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * 3.14159265358979323846 * v);
}

int tt_calib_init_pseudo(tt_calib *c, const tt_index *idx, uint32_t n, uint32_t qlen,
                         float noise, uint64_t seed, int cost, uint32_t *qlen_used) {
    return tt_calib_init_pseudo_mix(c, idx, n, qlen, noise, -1, -1, seed, cost, qlen_used);
}

/* Scales the first sb positions of x (dim floats, the codec's position order: the
 * sketched positions, where the adaptive codec put the massive activations) so that
 * they hold at most the share `share` of its energy; the other positions unchanged. */
static void damp_sketched(float *x, uint32_t dim, uint32_t sb, double share) {
    double out = 0, rest = 0;
    for (uint32_t p = 0; p < dim; p++)
        *(p < sb ? &out : &rest) += (double)x[p] * x[p];
    if (out <= 0 || out <= share / (1 - share) * rest)
        return;
    double f = sqrt(share / (1 - share) * rest / out);
    for (uint32_t p = 0; p < sb; p++)
        x[p] = (float)(x[p] * f);
}

int tt_calib_init_pseudo_mix(tt_calib *c, const tt_index *idx, uint32_t n, uint32_t qlen,
                             float noise, double other_share, double outlier_share,
                             uint64_t seed, int cost, uint32_t *qlen_used) {
    calib_zero(c, idx, cost);
    if (outlier_share < 0)
        outlier_share = PSEUDO_OUTLIER_SHARE;
    const uint32_t dim = idx->dim;
    if (idx->num_live == 0)
        return tt_err(TT_EINVAL, "%s: no live documents to calibrate on", idx->dir);
    if (n == 0)
        return tt_err(TT_EINVAL, "calibration: zero pseudo-queries");
    /* The query shape the index implies: DiffRetriever-style encoders write a fixed
     * few (4-16) vectors per passage of LLM hidden states and ask with 4; ColBERT
     * writes one per token and asks with 32. */
    if (qlen == 0)
        qlen = idx->max_doclen <= 16 && dim >= 1024 ? 4 : 32;
    if (qlen_used)
        *qlen_used = qlen;
    const bool short_q = qlen <= PSEUDO_SHORT;
    if (other_share < 0)
        other_share = short_q ? PSEUDO_OTHER_SHORT : PSEUDO_OTHER_LONG;
    if (isnan(noise))
        noise = short_q && idx->sketch_bytes ? PSEUDO_NOISE_SKETCHED_SHORT : PSEUDO_NOISE;
    c->noise = noise;
    c->pseudo_len = qlen;
    c->other_share = other_share;
    c->outlier_share = outlier_share;
    c->nq = n;
    int st;
    if (!(c->Q_own = tt_alloc((uint64_t)n * qlen, (uint64_t)dim * sizeof(float), "pseudo-queries")) ||
        !(c->qoffs_own = tt_alloc(n, sizeof *c->qoffs_own, "pseudo-queries")) ||
        !(c->qlens_own = tt_alloc(n, sizeof *c->qlens_own, "pseudo-queries")))
        return TT_ENOMEM;
    c->Q = c->Q_own;
    c->qoffs = c->qoffs_own;
    c->qlens = c->qlens_own;
    if ((st = calib_buffers(c)))
        return st;
    float *doc = tt_alloc(idx->max_doclen, (uint64_t)dim * sizeof(float), "pseudo-queries");
    float *other = tt_alloc(idx->max_doclen, (uint64_t)dim * sizeof(float), "pseudo-queries");
    float *in = tt_alloc(dim, sizeof(float), "pseudo-queries");
    float *damped = tt_alloc(dim, sizeof(float), "pseudo-queries");
    uint32_t *pick = tt_alloc(idx->max_doclen, sizeof *pick, "pseudo-queries");
    if (!doc || !other || !in || !damped || !pick) {
        st = TT_ENOMEM;
        goto done;
    }
    tt_rng r;
    tt_rng_seed(&r, seed);
    for (uint32_t q = 0; q < n; q++) {
        /* A random live document (rejection: deleted rows are a minority until
         * compaction, and the search below is bounded by their share). */
        uint64_t d;
        do
            d = tt_rng_below(&r, idx->num_docs);
        while (tt_index_deleted(idx, d));
        uint32_t len = idx->doclens[d];
        if ((st = tt_score_doc_vectors(c->ctx, d, doc)))
            goto done;
        /* qlen of its vectors: a random subset, or all of them and random repeats. */
        for (uint32_t j = 0; j < len; j++)
            pick[j] = j;
        for (uint32_t j = 0; j + 1 < len; j++) {
            uint32_t t = j + (uint32_t)tt_rng_below(&r, len - j);
            uint32_t x = pick[j];
            pick[j] = pick[t];
            pick[t] = x;
        }
        c->qoffs_own[q] = (uint64_t)q * qlen;
        c->qlens_own[q] = qlen;
        for (uint32_t i = 0; i < qlen; i++) {
            uint32_t j = i < len ? pick[i] : (uint32_t)tt_rng_below(&r, len);
            float *out = c->Q_own + ((uint64_t)q * qlen + i) * dim;
            const float *src = doc + (uint64_t)j * dim;
            /* Real queries match more than one document: long ones take half their
             * vectors from other random documents (measured on scifact: from the
             * source document alone, pseudo-queries were easier than the real ones
             * and calibrated too cheap a search; doc/benchmarks.md, "Calibrated
             * defaults"); short ones none (see PSEUDO_SHORT). */
            if (tt_rng_uniform(&r) < other_share) {
                uint64_t o;
                do
                    o = tt_rng_below(&r, idx->num_docs);
                while (tt_index_deleted(idx, o));
                if ((st = tt_score_doc_vectors(c->ctx, o, other)))
                    goto done;
                src = other + tt_rng_below(&r, idx->doclens[o]) * dim;
            }
            if (idx->sketch_bytes && outlier_share < 1) {
                memcpy(damped, src, (size_t)dim * sizeof *damped);
                damp_sketched(damped, dim, idx->sketch_bytes, outlier_share);
                src = damped;
            }
            tt_codec_to_input(&idx->codec, src, in);
            double norm = 0;
            for (uint32_t t = 0; t < dim; t++)
                norm += (double)in[t] * in[t];
            /* Noise of expected norm noise * |x|. */
            double sd = noise * sqrt(norm / dim);
            for (uint32_t t = 0; t < dim; t++)
                out[t] = (float)(in[t] + sd * gauss(&r));
            if (idx->normalized)
                tt_normalize_rows(out, 1, dim);
        }
    }
    st = TT_OK;
done:
    free(doc);
    free(other);
    free(in);
    free(damped);
    free(pick);
    return st;
}

void tt_calib_free(tt_calib *c) {
    tt_search_ctx_free(c->ctx);
    for (int t = 0; t < c->ntctx; t++)
        tt_search_ctx_free(c->tctx[t]);
    free(c->tctx);
    free(c->thits);
    free(c->qrecall);
    free(c->qfirst);
    free(c->Q_own);
    free(c->qoffs_own);
    free(c->qlens_own);
    free(c->truth);
    free(c->ntruth);
    free(c->hits);
    memset(c, 0, sizeof *c);
}

/* One pass over the index for all the queries (src/search/scan_batch.c): the same top
 * as exhaustive search query by query, for a fraction of the decoding. */
int tt_calib_truth(tt_calib *c, int threads) {
    tt_search_options o;
    tt_search_options_init(&o);
    return tt_scan_batch(c->idx, NULL, c->Q, c->qoffs, c->qlens, c->nq, TT_CALIB_DEPTH,
                         TT_MODE_EXHAUSTIVE, o.score, threads, c->cancel, c->truth, c->ntruth);
}

/* Share of the reference's top min(k, n) among the hits. */
static double overlap(const tt_hit *truth, uint32_t ntruth, const tt_hit *hits, uint32_t nhits,
                      uint32_t k) {
    uint32_t want = TT_MIN(k, ntruth), got = 0;
    if (want == 0)
        return 1;
    for (uint32_t i = 0; i < want; i++)
        for (uint32_t j = 0; j < nhits && j < k; j++)
            if (hits[j].doc == truth[i].doc) {
                got++;
                break;
            }
    return (double)got / want;
}

/* Whether the reference's first document is among the first k hits (no reference: yes). */
static bool first_kept(const tt_hit *truth, uint32_t ntruth, const tt_hit *hits, uint32_t nhits,
                       uint32_t k) {
    if (ntruth == 0)
        return true;
    for (uint32_t j = 0; j < nhits && j < k; j++)
        if (hits[j].doc == truth[0].doc)
            return true;
    return false;
}

/* Measuring thread t's search context: the calibration's own for the first. */
static tt_search_ctx *calib_ctx(const tt_calib *c, int t) {
    return t ? c->tctx[t - 1] : c->ctx;
}

/* The measuring threads' job: queries taken from a shared counter. */
typedef struct measure_job {
    tt_calib *c;
    const tt_search_options *o;
    uint32_t k;
    uint64_t nq; /* the queries from .next's start up to nq - 1 */
    atomic_uint_fast64_t next;
    double cpu[TT_CALIB_THREADS_MAX];
    tt_first_err err;
} measure_job;

static void measure_worker(void *arg, int t, int nthreads) {
    (void)nthreads;
    measure_job *j = arg;
    tt_calib *c = j->c;
    const tt_index *idx = c->idx;
    tt_search_ctx *ctx = calib_ctx(c, t);
    tt_hit *hits = t ? c->thits + (uint64_t)(t - 1) * TT_CALIB_DEPTH : c->hits;
    /* The thread's CPU time, not the wall clock: on a busy machine (the one a build
     * often runs on) the wall clock measures the other processes too, and the choice
     * among the sets would follow their load. Residual reads are served from the page
     * cache after the reference scan, in this thread (io_uring completes buffered
     * reads of cached pages inline), so their copying is counted. */
    const double t0 = tt_thread_cpu_now();
    while (!tt_first_err_failed(&j->err)) {
        uint64_t q = atomic_fetch_add(&j->next, 1);
        if (q >= j->nq)
            break;
        int st;
        uint32_t nh;
        if (c->cancel && *c->cancel)
            st = tt_err(TT_ECANCELED, "%s: calibration cancelled", idx->dir);
        else
            st = tt_search(idx, ctx, c->Q + c->qoffs[q] * idx->dim, c->qlens[q], j->k, j->o,
                           hits, &nh);
        if (st) {
            tt_first_err_set(&j->err, st, UINT64_MAX);
            break;
        }
        c->qrecall[q] = overlap(c->truth + q * TT_CALIB_DEPTH, c->ntruth[q], hits, nh, j->k);
        c->qfirst[q] = first_kept(c->truth + q * TT_CALIB_DEPTH, c->ntruth[q], hits, nh, j->k);
    }
    j->cpu[t] = tt_thread_cpu_now() - t0;
}

/* The other measuring threads' contexts and hits, made on first use. */
static int measure_threads(tt_calib *c, int *threads) {
    int n = (int)TT_MIN((uint64_t)TT_MAX(c->threads, 1), TT_MIN(c->nq, TT_CALIB_THREADS_MAX));
    if (n > 1 && !c->tctx) {
        c->tctx = tt_calloc((size_t)n - 1, sizeof *c->tctx, "calibration threads");
        c->thits = tt_alloc((uint64_t)(n - 1) * TT_CALIB_DEPTH, sizeof *c->thits,
                            "calibration threads");
        if (!c->tctx || !c->thits)
            return TT_ENOMEM;
        for (; c->ntctx < n - 1; c->ntctx++) {
            int st = tt_search_ctx_new(c->idx, &c->tctx[c->ntctx]);
            if (st)
                return st;
        }
    }
    *threads = TT_MIN(n, c->ntctx + 1);
    return TT_OK;
}

/* Searches calibration queries q0 to nq - 1 with o on the measuring threads: their CPU
 * seconds added to *secs, their contexts' counters to *ss, each query's recall into
 * c->qrecall and c->qfirst. */
static int run_queries(tt_calib *c, const tt_search_options *o, uint32_t k, uint64_t q0,
                       uint64_t nq, double *secs, tt_search_stats *ss) {
    int threads, st;
    if ((st = measure_threads(c, &threads)))
        return st;
    for (int i = 0; i < threads; i++)
        tt_search_ctx_reset_stats(calib_ctx(c, i));
    measure_job j = {.c = c, .o = o, .k = k, .nq = nq};
    atomic_init(&j.next, q0);
    tt_first_err_init(&j.err);
    tt_parallel(threads, measure_worker, &j);
    if ((st = tt_first_err_end(&j.err)))
        return st;
    for (int i = 0; i < threads; i++) {
        tt_search_stats s2;
        tt_search_ctx_stats(calib_ctx(c, i), &s2);
        *secs += j.cpu[i];
        ss->candidates += s2.candidates;
        ss->stage2_docs += s2.stage2_docs;
        ss->stage3_docs += s2.stage3_docs;
        ss->scored_docs += s2.scored_docs;
        ss->centroids_scored += s2.centroids_scored;
        ss->rescored_docs += s2.rescored_docs;
        for (int x = 0; x < 4; x++)
            ss->seconds[x] += s2.seconds[x];
    }
    return TT_OK;
}

/* The calibration queries' mean length. */
static double mean_qlen(const tt_calib *c) {
    double nqv = 0;
    for (uint64_t q = 0; q < c->nq; q++)
        nqv += c->qlens[q];
    return nqv / (double)c->nq;
}

/* The search options of calibrated set s, with `groups` centroid groups: PLAID with
 * relative pruning, nothing taken from the index's own calibration. */
static void set_options(tt_search_options *o, const tt_tuned *s, uint32_t groups) {
    tt_search_options_init(o);
    o->nprobe = s->nprobe;
    o->ndocs = s->ndocs;
    o->pruning = TT_PRUNE_RELATIVE;
    o->prune_ratio = s->prune_ratio;
    o->rerank_margin = s->rerank_margin;
    o->sketch = s->sketch;
    o->tuned = 0;
    o->centroid_groups = (int)groups;
}

/* tt_calib_measure, screened: with `screen` >= 0 and enough queries, the first
 * SCREEN_QUERIES first, and the rest only when their recall reaches `screen`; *partial
 * is set when the rest were not measured (the figures are the first queries'). */
static int measure_screened(tt_calib *c, uint32_t k, int nprobe, uint32_t ndocs, float ratio,
                            float margin, int sketch, double screen, tt_tuned *t,
                            double *cost, bool *partial) {
    const tt_index *idx = c->idx;
    memset(t, 0, sizeof *t);
    t->k = k;
    t->nprobe = nprobe;
    t->ndocs = ndocs;
    t->prune_ratio = ratio;
    t->rerank_margin = margin;
    t->sketch = sketch;
    t->centroid_groups = c->cgroups;
    tt_search_options o;
    set_options(&o, t, c->cgroups);
    double secs = 0;
    tt_search_stats ss = {0};
    const bool screening = screen >= 0 && c->nq >= SCREEN_MIN_QUERIES;
    uint64_t nq = screening ? SCREEN_QUERIES : c->nq;
    int st = run_queries(c, &o, k, 0, nq, &secs, &ss);
    if (st)
        return st;
    /* Summed in query order: the same figure on any number of threads. */
    double recall = 0, first = 0;
    for (uint64_t q = 0; q < nq; q++) {
        recall += c->qrecall[q];
        first += c->qfirst[q];
    }
    *partial = screening && recall < screen * (double)nq;
    if (screening && !*partial) { /* the rest of the queries, added to the first's */
        if ((st = run_queries(c, &o, k, nq, c->nq, &secs, &ss)))
            return st;
        for (uint64_t q = nq; q < c->nq; q++) {
            recall += c->qrecall[q];
            first += c->qfirst[q];
        }
        nq = c->nq;
    }
    t->recall = recall / (double)nq;
    t->first = first / (double)nq;
    t->ms = 1e3 * secs / (double)nq;
    c->scored = (double)ss.centroids_scored / (double)nq;
    c->measured++;
    if (c->cost == TT_TUNE_COST_WORK) {
        /* The work a search did, in rough units of one multiply-add: stage 1 reads the
         * probed lists (a candidate each), stages 2-3 take a maximum per document
         * vector and query vector, stage 4 decodes a document's vectors and multiplies
         * them with the query. Counts, not times: the same on every run. */
        double nqv = mean_qlen(c), dl = c->avg_doclen, dim = idx->dim;
        double w = (double)ss.candidates + (double)(ss.stage2_docs + ss.stage3_docs) * dl * nqv +
                   (double)ss.scored_docs * dl * dim * (1.0 + nqv);
        *cost = w / (double)nq;
        /* stage 1's int8 rows, as measure_groups counts them */
        const double w1 = (double)ss.centroids_scored * dim * nqv / 4;
        c->stage1_share = w + w1 > 0 ? w1 / (w + w1) : 0;
    } else {
        *cost = t->ms;
        const double all = ss.seconds[0] + ss.seconds[1] + ss.seconds[2] + ss.seconds[3];
        c->stage1_share = all > 0 ? ss.seconds[0] / all : 0;
    }
    return TT_OK;
}

int tt_calib_measure(tt_calib *c, uint32_t k, int nprobe, uint32_t ndocs, float ratio,
                     float margin, int sketch, tt_tuned *t, double *cost) {
    bool partial;
    return measure_screened(c, k, nprobe, ndocs, ratio, margin, sketch, -1, t, cost, &partial);
}

int tt_calib_measure_exhaustive(tt_calib *c) {
    if (c->ex_measured)
        return TT_OK;
    tt_search_options o;
    tt_search_options_init(&o);
    o.mode = TT_MODE_EXHAUSTIVE;
    o.tuned = 0;
    const uint64_t nq = TT_MIN(c->nq, (uint64_t)TT_CALIB_EX_QUERIES);
    double secs = 0;
    tt_search_stats ss = {0};
    int st = run_queries(c, &o, 10, 0, nq, &secs, &ss);
    if (st)
        return st;
    c->ex_ms = 1e3 * secs / (double)nq;
    /* The work count of stage 4 for every live vector (the scan decodes each once). */
    c->ex_cost = c->cost == TT_TUNE_COST_WORK
                     ? c->avg_doclen * (double)c->idx->num_live * c->idx->dim * (1.0 + mean_qlen(c))
                     : c->ex_ms;
    c->ex_measured = 1;
    return TT_OK;
}

/* Exhaustive search is measured and cheaper than `cost`, or within SCAN_TIE of it: a
 * set that costs about as much as the scan gains nothing over its exact ranking, and
 * per-query CPU times of the same set vary by 10-20% from run to run on a 2-core
 * machine (doc/benchmarks.md, *Exhaustive search as a calibrated choice*). */
static bool scan_cheaper(const tt_calib *c, double cost) {
    return c->ex_measured && c->ex_cost < cost * (1 + SCAN_TIE);
}

/* A set reaches the target when the one-sided 95% lower confidence bound of its recall
 * does, the recall taken as a proportion of the nq * k exhaustive hits (a binomial
 * bound: r - 1.645 sqrt(r (1 - r) / (nq k))). The cheapest set whose mean merely reached
 * it sat at the target by construction, so real queries landed under it about half the
 * time: on the DiffRetriever shape of the issue's own collection 0.958 on 64
 * pseudo-queries, 0.945 on the real ones (doc/benchmarks.md, *Calibration with a
 * confidence bound*). A recall of 1 needs no margin. */
#define REACH_Z 1.645

bool tt_calib_reaches(const tt_calib *c, uint32_t k, double recall, double target) {
    const double n = (double)c->nq * k;
    const double r = recall < 0 ? 0 : recall > 1 ? 1 : recall;
    return n > 0 && r - REACH_Z * sqrt(r * (1 - r) / n) >= target;
}

/* Recall counts every one of the top k alike, and PLAID's misses need not be spread
 * alike: where documents differ from their neighbours mostly in their residuals, the
 * centroid stages rank the one that matches a query best no higher than the rest, and
 * a set can reach recall@10 0.97 while losing exhaustive search's first document for a
 * fifth of the queries (the DiffRetriever shape with outlier dimensions: MRR@10 0.59
 * against exhaustive search's 0.83; doc/benchmarks.md, *Keeping exhaustive search's
 * first document*). So a set must also keep that document for the target's share of
 * the queries: the mean, not a bound, as nq queries (64) are too few for one. */
bool tt_calib_set_reaches(const tt_calib *c, const tt_tuned *t, double target) {
    return tt_calib_reaches(c, t->k, t->recall, target) && (t->first < 0 || t->first >= target);
}

/* One measured point of the grid. */
typedef struct point {
    tt_tuned t;
    double cost;
    bool ok;      /* reached the target */
    bool partial; /* screened out: measured on the first queries only */
} point;

static int measure(tt_calib *c, uint32_t k, int np, uint32_t nd, float margin, int sketch,
                   double target, point *p) {
    int st;
    if ((uint64_t)nd * EXHAUSTIVE_SHARE >= c->idx->num_live &&
        (st = tt_calib_measure_exhaustive(c)))
        return st;
    st = measure_screened(c, k, np, nd, PRUNE_RATIO, margin, sketch, target - SCREEN_SLACK,
                          &p->t, &p->cost, &p->partial);
    p->ok = !p->partial && tt_calib_set_reaches(c, &p->t, target);
    p->t.reached = p->ok;
    if (!st && p->ok && c->nreached < TT_CALIB_REACHED_MAX) {
        c->reached[c->nreached] = p->t;
        c->reached_cost[c->nreached++] = p->cost;
    }
    return st;
}

/* The ndocs of the grid, into nds (NDOCS_MAX entries): from k (fewer is k anyway),
 * NDOCS_MIN doubling to NDOCS_TOP, up to the first that keeps every live document (more
 * changes nothing). Returns the count. */
static size_t ndocs_grid(uint32_t k, uint64_t live, uint32_t *nds) {
    size_t nn = 0;
    for (uint32_t nd = NDOCS_MIN; nd <= NDOCS_TOP; nd *= 2) {
        if (nd < k)
            continue;
        nds[nn++] = nd;
        if (nd >= live)
            break;
    }
    if (nn == 0)
        nds[nn++] = k;
    return nn;
}

/* The staircase over (nprobe, ndocs) for one stage-4 margin, from ndocs nd_min up (the
 * grid's largest when it is below nd_min): *best the cheapest set reaching the target
 * (best->ok false if none), *top the best recall seen. */
static int staircase(tt_calib *c, uint32_t k, double target, float margin, int sketch,
                     uint32_t nd_min, point *best_out, point *top_out) {
    const tt_index *idx = c->idx;
    uint32_t grid[NDOCS_MAX];
    const size_t ng = ndocs_grid(k, idx->num_live, grid);
    size_t skip = 0;
    while (skip + 1 < ng && grid[skip] < nd_min)
        skip++;
    const uint32_t *nds = grid + skip;
    const size_t nn = ng - skip;
    point best = {.ok = false}, top = {.t.recall = -1};
    double prev_top = -1;
    int upper = -1; /* index into nds of the smallest ndocs that reached the target with
                     * the previous nprobe: with more probes it still should */
    for (size_t p = 0; p < sizeof NPROBES / sizeof NPROBES[0]; p++) {
        int np = NPROBES[p];
        bool all = (uint32_t)np >= idx->num_centroids;
        if (all)
            np = (int)idx->num_centroids;
        point here = {.ok = false}, at;
        double here_top = -1;
        int st;
        if (upper >= 0) {
            /* Down the staircase: the smallest ndocs that still reaches the target. */
            int n = upper;
            if ((st = measure(c, k, np, nds[n], margin, sketch, target, &at)))
                return st;
            here_top = at.t.recall;
            if (at.ok) {
                here = at;
                while (--n >= 0) {
                    if ((st = measure(c, k, np, nds[n], margin, sketch, target, &at)))
                        return st;
                    if (!at.ok)
                        break;
                    here = at;
                    upper = n;
                }
            } else {
                upper = -1; /* measured noise: search upwards as below */
            }
        }
        bool scan_won = false; /* exhaustive search was cheaper from this nprobe's first set */
        if (!here.ok) {
            const size_t n0 = upper >= 0 ? (size_t)upper + 1 : 0;
            for (size_t n = n0; n < nn; n++) {
                if ((st = measure(c, k, np, nds[n], margin, sketch, target, &at)))
                    return st;
                here_top = TT_MAX(here_top, at.t.recall);
                if (at.t.recall > top.t.recall)
                    top = at;
                if (at.ok) {
                    here = at;
                    upper = (int)n;
                    break;
                }
                if (best.ok && at.cost > best.cost)
                    break; /* dearer than a set that reaches the target already */
                if (scan_cheaper(c, at.cost)) {
                    scan_won = n == n0;
                    break; /* dearer than exhaustive search, which reaches any target */
                }
            }
        }
        if (scan_won && !here.ok)
            break; /* more probes cost more from here on */
        if (here.t.recall > top.t.recall)
            top = here;
        if (here.ok && (!best.ok || here.cost < best.cost))
            best = here;
        else if (here.ok && best.ok && here.cost > best.cost)
            break; /* past the cheapest point: more probes cost more from here on */
        /* At the grid's smallest ndocs and still dearer than exhaustive search: more
         * probes cannot go shallower. */
        if (here.ok && upper == 0 && scan_cheaper(c, here.cost))
            break;
        /* Nothing reached yet and more probes stopped helping. */
        if (!best.ok && here_top >= 0 && here_top < prev_top + 0.005)
            break;
        prev_top = TT_MAX(prev_top, here_top);
        if (all)
            break;
    }
    *best_out = best;
    *top_out = top;
    return TT_OK;
}

/* Keeps in *best the cheaper of *best and b that reach the target, in *top the better
 * recall of *top and t. */
static void keep_better(point *best, point *top, const point *b, const point *t) {
    if (b->ok && (!best->ok || b->cost < best->cost))
        *best = *b;
    if (t->t.recall > top->t.recall)
        *top = *t;
}

/* Near-ties: sets that reached the target at a measured cost within TIE_SHARE of the
 * cheapest's are measured again, TIE_ROUNDS times each on the first TIE_QUERIES
 * queries, the rounds interleaved (each round measures every one of them, in an order
 * rotated from round to round), and compared by the median of those measurements (the
 * same queries for each set: their costs compare, and they cost a half of the 64
 * pseudo-queries, a quarter of the 128 short ones, to measure). One measurement per set
 * made the choice among sets of similar cost follow the machine's speed at the moment
 * each was measured, which drifts by 10-40% over minutes on a shared 2-core machine:
 * five calibrations of one index chose four different sets, whose real queries got
 * recall@10 0.912 to 0.964 (doc/benchmarks.md, *Near-ties measured again*). At most
 * TIE_MAX sets, the cheapest first. Time only: the work count (--cost work) is the same
 * on every run. */
#define TIE_SHARE 0.3
#define TIE_ROUNDS 3
#define TIE_MAX 3
#define TIE_QUERIES 32

static bool same_set(const tt_tuned *a, const tt_tuned *b) {
    return a->nprobe == b->nprobe && a->ndocs == b->ndocs && a->prune_ratio == b->prune_ratio &&
           a->rerank_margin == b->rerank_margin && a->sketch == b->sketch;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int settle_ties(tt_calib *c, point *best) {
    c->ties = 0;
    if (c->cost != TT_TUNE_COST_TIME || !best->ok)
        return TT_OK;
    double cheapest = best->cost;
    for (int i = 0; i < c->nreached; i++)
        cheapest = fmin(cheapest, c->reached_cost[i]);
    /* The cheapest sets within TIE_SHARE of the cheapest, each once. */
    point tie[TIE_MAX];
    int n = 0;
    for (int pass = 0; pass < TIE_MAX; pass++) {
        int pick = -1;
        for (int i = 0; i < c->nreached; i++) {
            if (c->reached_cost[i] > cheapest * (1 + TIE_SHARE))
                continue;
            bool seen = false;
            for (int j = 0; j < n && !seen; j++)
                seen = same_set(&tie[j].t, &c->reached[i]);
            if (!seen && (pick < 0 || c->reached_cost[i] < c->reached_cost[pick]))
                pick = i;
        }
        if (pick < 0)
            break;
        tie[n].t = c->reached[pick];
        tie[n].cost = c->reached_cost[pick];
        tie[n].ok = true;
        tie[n].partial = false;
        n++;
    }
    if (n < 2)
        return TT_OK;
    c->ties = n;
    const uint64_t nq = TT_MIN(c->nq, (uint64_t)TIE_QUERIES);
    double costs[TIE_MAX][TIE_ROUNDS];
    for (int r = 0; r < TIE_ROUNDS; r++)
        for (int j = 0; j < n; j++) {
            const int i = (j + r) % n;
            tt_search_options o;
            set_options(&o, &tie[i].t, c->cgroups);
            double secs = 0;
            tt_search_stats ss = {0};
            int st = run_queries(c, &o, tie[i].t.k, 0, nq, &secs, &ss);
            if (st)
                return st;
            costs[i][r] = 1e3 * secs / (double)nq;
            c->measured++;
        }
    int win = -1;
    double win_cost = 0;
    for (int i = 0; i < n; i++) {
        qsort(costs[i], TIE_ROUNDS, sizeof costs[i][0], cmp_double);
        const double med = costs[i][TIE_ROUNDS / 2];
        if (win < 0 || med < win_cost) {
            win = i;
            win_cost = med;
        }
    }
    /* Its figures (recall, cost) stay those measured on every query. */
    *best = tie[win];
    return TT_OK;
}

/* The calibration's choice: the cheapest set reaching the target, else the best recall
 * (measured on every query if it was screened out); exhaustive search instead (with
 * that set's PLAID parameters kept) when it was measured and is cheaper, or nothing
 * reached the target. */
static int choose(tt_calib *c, point *best, point *top, tt_tuned *out) {
    int st = settle_ties(c, best);
    if (st)
        return st;
    if (!best->ok && top->partial) {
        const tt_tuned t = top->t;
        st = tt_calib_measure(c, t.k, t.nprobe, t.ndocs, t.prune_ratio, t.rerank_margin,
                              t.sketch, &top->t, &top->cost);
        if (st)
            return st;
        top->partial = false;
    }
    *out = best->ok ? best->t : top->t;
    if (c->ex_measured && (!best->ok || scan_cheaper(c, best->cost))) {
        out->exhaustive = 1;
        out->exhaustive_ms = c->ex_ms;
    }
    return TT_OK;
}

int tt_calib_search_like(tt_calib *c, const tt_tuned *like, double target, tt_tuned *out) {
    point best, top;
    c->nreached = 0;
    int st = staircase(c, like->k, target, like->rerank_margin, like->sketch, like->ndocs,
                       &best, &top);
    if (st)
        return st;
    return choose(c, &best, &top, out);
}

int tt_calib_search(tt_calib *c, uint32_t k, double target, tt_tuned *out) {
    point best = {.ok = false}, top = {.t.recall = -1};
    c->nreached = 0;
    for (size_t m = 0; m < sizeof MARGINS / sizeof MARGINS[0]; m++) {
        point b, t;
        int st = staircase(c, k, target, MARGINS[m], 1, 0, &b, &t);
        if (st)
            return st;
        keep_better(&best, &top, &b, &t);
    }
    /* With a residual sketch, the same staircase without it at the margin chosen: the
     * sketch's partial <q, r> can mislead where the sketched positions do not carry
     * most of the score's variance (doc/search.md, "Residual sketch"), and the
     * measurement, not a rule, decides. */
    if (c->idx->sketch_bytes) {
        float margin = best.ok ? best.t.rerank_margin : top.t.rerank_margin;
        point b, t;
        int st = staircase(c, k, target, margin, 0, 0, &b, &t);
        if (st)
            return st;
        keep_better(&best, &top, &b, &t);
    }
    /* With a residual sketch, also every live document as a candidate (nprobe = K):
     * stage 1's lists are chosen by centroid scores alone, which is what the sketch
     * corrects in stages 2-3; scanning the codes and sketch of every vector is linear
     * in the collection but far cheaper than scoring the residuals, and the measured
     * cost decides. */
    if (c->idx->sketch_bytes) {
        const uint32_t K = c->idx->num_centroids;
        float margin = best.ok ? best.t.rerank_margin : top.t.rerank_margin;
        uint32_t nds[NDOCS_MAX];
        const size_t nn = ndocs_grid(k, c->idx->num_live, nds);
        for (size_t n = 0; n < nn; n++) {
            point at;
            int st = measure(c, k, (int)K, nds[n], margin, 1, target, &at);
            if (st)
                return st;
            bool dearer = (best.ok && at.cost > best.cost) || scan_cheaper(c, at.cost);
            keep_better(&best, &top, &at, &at);
            if (at.ok || dearer)
                break;
        }
    }
    /* Past the grid's ceiling, where nothing reached the target and the best recall
     * came at the ceiling: that set with ndocs doubled until it reaches the target,
     * keeps every live document, or stops gaining (less than 0.005 a step in recall and
     * in the share of first documents kept). One column, not the grid: on 50k
     * documents of 16 x 3584-d the target needs 16,384 (0.952 against 0.940 at 8192,
     * doc/benchmarks.md, *No search flags at 3584-d, 50k documents*), and one set at
     * that depth costs about 11 s of pseudo-queries; the whole grid carried past 8192
     * ran for over 25 minutes. Not when exhaustive search is cheaper already. */
    if (!best.ok && top.t.ndocs >= NDOCS_TOP && top.t.ndocs < c->idx->num_live &&
        !scan_cheaper(c, top.cost)) {
        const tt_tuned base = top.t;
        double prev = base.recall, prev_first = base.first;
        for (uint64_t nd = (uint64_t)base.ndocs * 2; nd <= UINT32_MAX; nd *= 2) {
            point at;
            int st = measure(c, k, base.nprobe, (uint32_t)nd, base.rerank_margin, base.sketch,
                             target, &at);
            if (st)
                return st;
            keep_better(&best, &top, &at, &at);
            if (at.ok || (at.t.recall < prev + 0.005 && at.t.first < prev_first + 0.005) ||
                nd >= c->idx->num_live || scan_cheaper(c, at.cost))
                break;
            prev = at.t.recall;
            prev_first = at.t.first;
        }
    }
    /* Between the grid's steps, which double ndocs: the cheapest set with 3/4 of its
     * ndocs, kept where it still reaches the target for less. One measurement; on 100k
     * documents of 30 x 128-d the grid's 256 gave recall@10 0.994 on real queries where
     * 192 gives 0.980 for a fifth less of stage 4 (doc/benchmarks.md, *Between the
     * grid's steps*). */
    if (best.ok) {
        const uint32_t nd = best.t.ndocs / 4 * 3;
        if (nd >= k && nd < best.t.ndocs) {
            point at;
            int st = measure(c, k, best.t.nprobe, nd, best.t.rerank_margin, best.t.sketch,
                             target, &at);
            if (st)
                return st;
            keep_better(&best, &top, &at, &at);
        }
    }
    return choose(c, &best, &top, out);
}

/* A set's cost with c->cgroups: the comparison key, plus under TT_TUNE_COST_WORK stage
 * 1's int8 rows (a quarter of a float multiply-add each per query vector), which the
 * work count otherwise leaves out as the same for every set. */
static int measure_groups(tt_calib *c, const tt_tuned *s, tt_tuned *t, double *cost) {
    int st = tt_calib_measure(c, s->k, s->nprobe, s->ndocs, s->prune_ratio, s->rerank_margin,
                              s->sketch, t, cost);
    if (!st && c->cost == TT_TUNE_COST_WORK)
        *cost += (c->scored + (c->cgroups ? c->idx->cq.ngroups : 0)) * c->idx->dim *
                 mean_qlen(c) / 4;
    return st;
}

/* Centroid groups are kept for a set only when they save at least this share of its
 * cost: where stage 1 is a small part of a query (128-d, or 1024-d with 4096
 * centroids), the sets with and without groups measured within the spread of CPU
 * times from run to run, and a choice made by that spread would trade recall (0.994 to
 * 0.992 on the 20k ColBERT-shape collection) for nothing. */
#define GROUP_GAIN 0.1
/* ... and only when stage 1 then scores at most this share of the centroids: the
 * saving is the table not read. On the LLM-like collection (4096 centroids, every
 * document a candidate) 32 groups of 64 per query vector scored 3,824 centroids, and a
 * 10% gain in the calibration's CPU times was the spread of the measurements (stage 1
 * measured 0.50 against 0.41 ms without groups, doc/benchmarks.md). */
#define GROUP_MAX_SHARE 0.5

/* c's reference: set s's own top k of every query, every centroid scored. */
static int truth_of_set(tt_calib *c, const tt_tuned *s) {
    tt_search_options o;
    set_options(&o, s, 0);
    for (uint64_t q = 0; q < c->nq; q++) {
        int st = tt_search(c->idx, c->ctx, c->Q + c->qoffs[q] * c->idx->dim, c->qlens[q], s->k,
                           &o, c->truth + q * TT_CALIB_DEPTH, &c->ntruth[q]);
        if (st)
            return st;
    }
    return TT_OK;
}

/* Groups on set v: the first number of groups per query vector (1, 2, 4... below G)
 * with which v reaches the target on c (with tw, the harder twins of c's pseudo-queries,
 * its recall also counts what the groups lose on them against v's own results) makes
 * *out (v with those groups and their figures), if v then costs less than `limit` (< 0:
 * its own cost without groups, less GROUP_GAIN), its recall is at least min_recall and
 * stage 1 scores at most GROUP_MAX_SHARE of the centroids. *v_cost: v's cost without
 * groups. */
static int groups_for(tt_calib *c, tt_calib *tw, const tt_tuned *v, uint32_t G, double target,
                      double limit, double min_recall, tt_tuned *out, bool *found,
                      double *v_cost) {
    tt_tuned base, at, agree;
    double base_cost, cost, unused;
    int st;
    *found = false;
    c->cgroups = 0;
    if ((st = measure_groups(c, v, &base, &base_cost)) || (tw && (st = truth_of_set(tw, v))))
        return st;
    *v_cost = base_cost;
    if (limit < 0)
        limit = base_cost * (1 - GROUP_GAIN);
    for (uint32_t p = 1; p < G && !st; p *= 2) {
        c->cgroups = p;
        if ((st = measure_groups(c, v, &at, &cost)))
            break;
        double recall = at.recall;
        if (tw) {
            /* what the groups lose on the harder twins, against the set itself */
            tw->cgroups = p;
            st = tt_calib_measure(tw, v->k, v->nprobe, v->ndocs, v->prune_ratio,
                                  v->rerank_margin, v->sketch, &agree, &unused);
            tw->cgroups = 0;
            if (st)
                break;
            recall = TT_MIN(recall, base.recall - (1 - agree.recall));
        }
        at.recall = recall;
        if (!tt_calib_set_reaches(c, &at, target) || recall < min_recall)
            continue;
        /* the first number that reaches the target: more groups only cost more */
        if (cost < limit && c->scored <= GROUP_MAX_SHARE * c->idx->num_centroids) {
            at.reached = 1;
            *out = at;
            *found = true;
        }
        break;
    }
    c->cgroups = 0;
    return st;
}

/* The groups per query vector set s needs on calibration c (its twin tw of harder
 * pseudo-queries, or NULL with the caller's queries), if fewer than G make it cheaper:
 * *s takes them and their figures on c. Where no number of groups keeps s itself at the
 * target, s with twice its ndocs is tried with groups too, and taken when it then costs
 * less than s without them and loses no recall against s: the documents a query loses
 * to the imputed scores of the groups not scored lie just past the stage-3 cut, and a
 * deeper cut finds them for less than stage 1 saves. (No GROUP_GAIN there: that guards
 * against trading recall for a saving within the spread of the times, and this set
 * trades none.) On 50k documents of 16 x 3584-d (doc/benchmarks.md, *Centroid groups
 * with a deeper set*) nprobe 2, ndocs 256 lost 0.058 on the twins with 4 groups and got
 * none, while ndocs 512 with 4 groups gave the real queries recall 0.998 at p50 4-5 ms,
 * against 0.954 at 6 ms without groups. */
static int set_groups(tt_calib *c, tt_calib *tw, tt_tuned *s, uint32_t G, double target,
                      bool *used) {
    tt_tuned with;
    bool found;
    double s_cost, unused;
    int st = groups_for(c, tw, s, G, target, -1, -1, &with, &found, &s_cost);
    if (!st && !found && s->ndocs <= UINT32_MAX / 2 && s->ndocs < c->idx->num_live) {
        tt_tuned deeper = *s;
        deeper.ndocs = s->ndocs * 2;
        st = groups_for(c, tw, &deeper, G, target, s_cost, s->recall, &with, &found, &unused);
    }
    if (!st && found) {
        *s = with;
        *used = true;
    }
    return st;
}

int tt_calib_groups(tt_index *idx, tt_calib *const *cs, tt_tuned *const *sets, int n,
                    double target, uint64_t seed, int threads, uint32_t **group_of,
                    uint32_t *ngroups) {
    const uint32_t K = idx->num_centroids;
    *group_of = NULL;
    *ngroups = 0;
    if (K < TT_CQ_GROUP_MIN_K || idx->cq.kernel == TT_CQ_F32)
        return TT_OK;
    uint32_t *g = NULL, G = 0;
    bool used = false;
    tt_calib tw;
    memset(&tw, 0, sizeof tw);
    const tt_calib *twin_of = NULL;
    int st = TT_OK;
    for (int i = 0; !st && i < n; i++) {
        tt_calib *c = cs[i];
        tt_tuned *s = sets[i];
        if (s->exhaustive || !s->reached)
            continue; /* groups only lose recall: a set short of the target keeps its own */
        if (!g) {
            /* Groups save at most stage 1's share of a query: where that is below the
             * gain asked for (128-d: 1 MiB of int8; every document a candidate: stage 4
             * dominates), the groups are not made nor measured. */
            tt_tuned base;
            double cost;
            c->cgroups = 0;
            if ((st = measure_groups(c, s, &base, &cost)))
                break;
            if (c->stage1_share < GROUP_GAIN)
                continue;
            if (!(g = tt_alloc(K, sizeof *g, "centroid groups")))
                st = TT_ENOMEM;
            if (!st)
                st = tt_cq_train_groups(idx->centroids, K, idx->dim, seed, threads, g, &G);
            if (!st)
                st = tt_index_set_centroid_groups(idx, g, G);
            if (st)
                break;
        }
        if (c->pseudo_len && twin_of != c) {
            tt_calib_free(&tw);
            twin_of = c;
            st = tt_calib_init_pseudo_mix(&tw, idx, (uint32_t)c->nq, c->pseudo_len,
                                          (float)(TT_CALIB_GROUP_NOISE_MUL * c->noise),
                                          c->other_share, c->outlier_share,
                                          seed + 7 + (uint64_t)i, c->cost, NULL);
            tw.threads = c->threads;
            tw.cancel = c->cancel;
        }
        if (!st)
            st = set_groups(c, c->pseudo_len ? &tw : NULL, s, G, target, &used);
    }
    tt_calib_free(&tw);
    if (!st && used) {
        *group_of = g;
        *ngroups = G;
        return TT_OK;
    }
    free(g);
    int st2 = g ? tt_index_set_centroid_groups(idx, NULL, 0) : TT_OK;
    return st ? st : st2;
}

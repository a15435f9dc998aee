/* Calibration of PLAID's parameters (doc/search.md, "Calibrated defaults"): calibrate.c
 * makes or takes the calibration queries, finds their exact top 100 by exhaustive
 * search and measures parameter sets against it; tune.c is tt_index_tune, the change
 * that publishes what was chosen as the generation's tune.tt. */
#ifndef TT_TUNE_H
#define TT_TUNE_H

#include "search/search.h"

/* Depth of the exhaustive reference: recall is measured at k = 10 and k = 100. */
#define TT_CALIB_DEPTH 100
/* Most threads a measurement uses. */
#define TT_CALIB_THREADS_MAX 64
/* Most sets reaching the target that one search remembers. */
#define TT_CALIB_REACHED_MAX 64

typedef struct tt_calib {
    const tt_index *idx;
    uint64_t nq;               /* queries */
    const float *Q;            /* query i: qlens[i] vectors at Q + qoffs[i] * dim */
    const uint64_t *qoffs;
    const uint32_t *qlens;
    float *Q_own;              /* pseudo-queries: the memory behind Q, qoffs, qlens */
    uint64_t *qoffs_own;
    uint32_t *qlens_own;
    tt_hit *truth;             /* nq * TT_CALIB_DEPTH: exhaustive top, best first */
    uint32_t *ntruth;          /* nq */
    tt_search_ctx *ctx;        /* the first measuring thread's (and the pseudo-queries') */
    tt_hit *hits;              /* TT_CALIB_DEPTH */
    int threads;               /* measuring threads (1 after init; the caller may raise it) */
    tt_search_ctx **tctx;      /* threads - 1: the other measuring threads' contexts */
    tt_hit *thits;             /* (threads - 1) * TT_CALIB_DEPTH */
    int ntctx;                 /* contexts made so far */
    double *qrecall;           /* nq: each query's recall in the last measurement */
    unsigned char *qfirst;     /* nq: 1 where the last measurement kept the query's first
                                * document by exhaustive search in its top k */
    double avg_doclen;
    float noise;               /* pseudo-queries: the relative noise used */
    uint32_t pseudo_len;       /* pseudo-queries: their length (0: the caller's queries) */
    double other_share, outlier_share; /* pseudo-queries: the shares used */
    int cost;                  /* TT_TUNE_COST_* */
    uint64_t measured;         /* parameter sets measured */
    const volatile int *cancel;
    /* Exhaustive search's cost, measured once the grid goes deep enough for a scan to
     * compete (calibrate.c, EXHAUSTIVE_SHARE); ex_measured 0 until then. */
    int ex_measured;
    double ex_ms, ex_cost;     /* CPU ms per query; the comparison key, as *cost */
    /* Centroid groups (tt_calib_groups): the measurements' centroid_groups (0: every
     * centroid scored), and the last measurement's centroids scored per query. */
    uint32_t cgroups;
    double scored;
    double stage1_share;       /* the last measurement's share of stage 1 in its cost */
    /* The sets of the current search that reached the target, with their cost (the
     * near-ties among them are measured again before the choice: calibrate.c). */
    tt_tuned reached[TT_CALIB_REACHED_MAX];
    double reached_cost[TT_CALIB_REACHED_MAX];
    int nreached;
    int ties;                  /* the last search's near-ties measured again (0 or 2+) */
} tt_calib;

/* Starts a calibration of idx (borrowed) with the caller's queries (borrowed; checked:
 * dimension by the caller, values here). */
int tt_calib_init(tt_calib *c, const tt_index *idx, const float *Q, const uint64_t *qoffs,
                  const uint32_t *qlens, uint64_t nq, int cost);
/* ... or with n pseudo-queries of qlen vectors each (qlen 0: by the index's shape), made
 * from random live documents' decompressed vectors moved by relative Gaussian noise
 * (NaN: by the query length, calibrate.c; c->noise receives the value used).
 * *qlen_used receives the length used. Deterministic for a seed. */
int tt_calib_init_pseudo(tt_calib *c, const tt_index *idx, uint32_t n, uint32_t qlen,
                         float noise, uint64_t seed, int cost, uint32_t *qlen_used);
/* The same with the share other_share of a pseudo-query's vectors taken from other
 * random documents than its source, and at most the share outlier_share of each
 * vector's energy on the residual sketch's positions (indexes with a sketch; 1: as in
 * the document); negative: the defaults by query length (calibrate.c). */
int tt_calib_init_pseudo_mix(tt_calib *c, const tt_index *idx, uint32_t n, uint32_t qlen,
                             float noise, double other_share, double outlier_share,
                             uint64_t seed, int cost, uint32_t *qlen_used);
void tt_calib_free(tt_calib *c);
/* The exhaustive top TT_CALIB_DEPTH of every query, on `threads` threads. */
int tt_calib_truth(tt_calib *c, int threads);
/* Recall@k against the truth and the cost of one parameter set over every query
 * (sketch: the search option, 0 or 1): t->recall, t->first and t->ms filled, *cost the
 * comparison key (ms, or the work count). The queries are spread over c->threads
 * threads, each timing its own CPU: ms is their CPU time per query, the recall and
 * work counts do not depend on the threads. */
int tt_calib_measure(tt_calib *c, uint32_t k, int nprobe, uint32_t ndocs, float ratio,
                     float margin, int sketch, tt_tuned *t, double *cost);
/* Whether a recall@k measured on c's queries reaches the target: its one-sided 95%
 * lower confidence bound (binomial, over the nq * k exhaustive hits) does. */
bool tt_calib_reaches(const tt_calib *c, uint32_t k, double recall, double target);
/* Whether a measured set t reaches the target: its recall does (tt_calib_reaches) and
 * it keeps exhaustive search's first document of at least the share `target` of the
 * queries (t->first; not measured, -1: recall alone). */
bool tt_calib_set_reaches(const tt_calib *c, const tt_tuned *t, double target);
/* Exhaustive search's cost on c's queries (at most TT_CALIB_EX_QUERIES of them: a scan
 * costs the same for any query of a length) into c->ex_ms and c->ex_cost, once. */
int tt_calib_measure_exhaustive(tt_calib *c);
#define TT_CALIB_EX_QUERIES 16
/* The grid search for one k: the cheapest set reaching `target`, else the best recall;
 * out->exhaustive set when exhaustive search was measured cheaper than that set (or no
 * set reached the target and exhaustive search was measured). */
int tt_calib_search(tt_calib *c, uint32_t k, double target, tt_tuned *out);
/* A smaller search for like->k: the (nprobe, ndocs) staircase at like's stage-4 margin
 * and sketch setting only, from like's ndocs up (the full search also tries every
 * margin, the sketch off, every document as a candidate, and smaller ndocs). For
 * queries that need at least like's depth: like measured on longer queries. */
int tt_calib_search_like(tt_calib *c, const tt_tuned *like, double target, tt_tuned *out);
/* Centroid groups for the chosen sets (doc/search.md, "Centroid groups"): groups the
 * index's centroids (tt_cq_train_groups, seed), regroups its table and measures each
 * PLAID set of sets[0..n) (cs[i] its calibration) with 1, 2, 4, ... groups per query
 * vector until one reaches the target; a set that is then cheaper than with every
 * centroid takes that number (and its figures). A set that no number keeps at the
 * target may instead become the same set with twice its ndocs and groups, when that
 * reaches the target, keeps the set's recall and costs less than the set without
 * groups (calibrate.c, set_groups). *group_of (allocated) and *ngroups
 * receive the groups when some set took them; otherwise NULL and 0, and the index's
 * table is ungrouped again. Nothing for indexes of fewer than TT_CQ_GROUP_MIN_K
 * centroids or without an int8 table, nor (no groups made) where stage 1 is too small
 * a share of every set's cost for groups to save what they must. */
int tt_calib_groups(tt_index *idx, tt_calib *const *cs, tt_tuned *const *sets, int n,
                    double target, uint64_t seed, int threads, uint32_t **group_of,
                    uint32_t *ngroups);
/* The number of groups a set needs is checked on harder queries than the calibration's
 * when those are pseudo-queries: twins made the same way with GROUP_NOISE_MUL times
 * their noise, whose reference is the set's own search with every centroid scored (no
 * exhaustive scan): a pseudo-query lies close to its source document's vectors, so
 * one group held what it needed where real queries needed several (doc/benchmarks.md,
 * "Centroid groups"). */
#define TT_CALIB_GROUP_NOISE_MUL 2.0

#endif

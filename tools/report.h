/* tartan report: the numbers of a storage-vs-effectiveness report and the writers of
 * its four forms (Markdown, CSV, JSON, SVG). Plain data without library handles, so
 * the writers can be tested on hand-made reports (tests/test_report.c). The columns
 * are defined in doc/report.md. */
#ifndef TT_REPORT_H
#define TT_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tartan.h"

enum { RP_MAX_METRICS = 16 };

/* Significance level of the paired t-test marker (dagger). */
#define RP_ALPHA 0.05

/* A variant name (doc/report.md): "original" (or "exact"), or "<n>bit" with n in
 * {1, 2, 3, 4} (3: adaptive codec only), then optionally the codec, "-perdim"
 * (per-dimension tables), "-shared" (one table for every dimension, as ColBERTv2) or
 * "-adaptive" (bits allocated per dimension), then optionally the debiasing, "-table"
 * (each table's weights scaled), "-vector" (one scale per vector; adaptive codec only)
 * or "-nodebias", then optionally "-pool<F>" (token pooling with factor F, 2..64).
 * Without a codec or debiasing the variant uses tartan's defaults (the adaptive codec;
 * TT_DEBIAS_AUTO), and its canonical name leaves them out. */
typedef struct rp_variant {
    char name[32];          /* canonical name, e.g. "2bit-shared", "2bit-adaptive-pool2" */
    bool original;          /* uncompressed float16 vectors, exact MaxSim */
    int nbits;              /* 0 for the original */
    int codec;              /* TT_CODEC_PER_DIM, TT_CODEC_SHARED or TT_CODEC_ADAPTIVE */
    int debias;             /* tt_debias (TT_DEBIAS_AUTO: the build's default) */
    int debias_used;        /* result: what the variant's index has (auto resolved) */
    int pool;               /* token pooling factor of the documents (1: none) */
    double gpool;           /* pooling by one cut keeping ~1/gpool of the vectors (0: none;
                               "-gpool2.5") */
    /* results */
    double value[RP_MAX_METRICS]; /* mean of each metric over the evaluated queries */
    double p[RP_MAX_METRICS];     /* paired t-test p against the original; NaN: none */
    uint64_t bytes;         /* storage: index bytes without kept originals; original:
                               the float16 vectors, num_vectors * dim * 2 */
    double bits_per_dim;    /* bytes * 8 / (num_vectors * dim) */
    double recall;          /* mean top-k overlap with the original's exact ranking */
    double latency_p50;     /* seconds, one thread */
    uint64_t latency_queries; /* queries the latency is the median of */
    double build_seconds;   /* of the index this variant searched */
    bool reused;            /* the index was found already built */
    const char *index_dir;  /* where that index is (not owned) */
    const char *run_path;   /* the variant's TREC run, relative to the report dir */
    /* With sparse postings (rp_report.hybrid): the same queries through the variant's
     * index in --mode sparse (S) and hybrid (H, its dense part as above, fused). */
    double s_value[RP_MAX_METRICS], h_value[RP_MAX_METRICS]; /* means */
    double s_p[RP_MAX_METRICS], h_p[RP_MAX_METRICS]; /* paired t-test p against this
                                                      * variant's dense (D) values; NaN: none */
    const char *sparse_run_path, *hybrid_run_path; /* relative to the report dir */
    double s_latency_p50, h_latency_p50; /* seconds per query, as latency_p50 (a hybrid
                                          * query runs its two parts on two threads) */
} rp_variant;

typedef struct rp_report {
    /* provenance (strings not owned; may be NULL where marked) */
    const char *command;    /* the command line, shell-quoted */
    const char *created;    /* ISO 8601 UTC */
    const char *version;    /* tartan version */
    const char *vectors, *doclens, *ids /* NULL */, *queries, *qrels;
    /* with an encoder (else all NULL): its command, self-description and text inputs */
    const char *encoder, *encoder_description, *corpus_text, *query_text;
    /* collection */
    uint64_t num_docs, num_vectors;
    uint32_t dim;
    uint64_t num_queries;   /* queries searched */
    size_t eval_queries;    /* queries every mean and t-test is over */
    size_t missing;         /* qrels queries without query vectors (scored 0) */
    size_t unjudged;        /* searched queries without judgements (not evaluated) */
    /* search settings (PLAID parameters as resolved for k) */
    uint32_t k;
    bool score_mean;
    int nprobe;
    double threshold;       /* NaN: relative pruning with prune_ratio */
    double prune_ratio;
    uint32_t ndocs;
    int threads;
    /* sparse and hybrid columns (D / S / H), with --bm25 or --sparse */
    bool hybrid;
    const char *sparse_kind;    /* "bm25", "weights" or "encoder" (its sparse parts) */
    const char *sparse_docs;    /* the documents' texts (BM25) or sparse JSON Lines */
    const char *sparse_queries; /* the query texts (BM25) or sparse JSON Lines */
    int fusion;                 /* TT_FUSION_MINMAX or TT_FUSION_RRF */
    uint32_t fusion_depth;
    double fusion_alpha;
    size_t no_sparse;           /* searched queries without a sparse query (S: no hits) */
    /* metrics: names as tt_metric_name writes them; metric 0 is the primary one */
    size_t nmetrics;
    char metric[RP_MAX_METRICS][32];
    /* variants; variants[0] is the original (the reference of p-values and recall) */
    size_t nvariants;
    rp_variant *variants;
} rp_report;

/* Parses one variant name into v (name, original, nbits, codec, pool; results zeroed).
 * Returns false for an unknown name. */
bool rp_parse_variant(const char *s, rp_variant *v);
/* Human description: "original (float16)", "2-bit (per-dim tables)", "2-bit (adaptive
 * bits, pool 2)"... */
const char *rp_variant_label(const rp_variant *v, char *buf, size_t len);
/* "per-dim", "shared" or "adaptive" (the CSV/JSON codec_tables value). */
const char *rp_codec_name(int codec);

/* Each writer returns 0, or -1 when a write to f failed (ferror). */
int rp_write_markdown(FILE *f, const rp_report *r);
int rp_write_csv(FILE *f, const rp_report *r);
int rp_write_json(FILE *f, const rp_report *r);
int rp_write_svg(FILE *f, const rp_report *r);

/* Bytes in binary units with at most 3 significant digits and no trailing zeros
 * ("512 KiB", "1.5 MiB", "384 B"), for axis labels and table cells. */
const char *rp_human_bytes(double bytes, char *buf, size_t len);

/* Log-scale axis over [lo, hi] bytes (0 < lo <= hi): widens it to powers of two and
 * writes its ticks (powers of two, every step-th if there are many, plus 1.5 x 2^e
 * between them if there are few) in increasing order. Returns the tick count
 * (<= max); *axis_lo / *axis_hi receive the axis ends. */
size_t rp_log_ticks(double lo, double hi, double *ticks, size_t max, double *axis_lo,
                    double *axis_hi);
/* Linear axis with 1-2-5 steps covering [lo, hi] (widened when lo == hi), at most
 * about 6 ticks. Returns the tick count; *axis_lo / *axis_hi receive the ends. */
size_t rp_lin_ticks(double lo, double hi, double *ticks, size_t max, double *axis_lo,
                    double *axis_hi);

#endif

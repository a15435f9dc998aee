/* tartan report: the four output forms of a report (doc/report.md). Markdown for
 * papers (DiffRetriever's Table 8 layout: "original -> compressed" per cell, a dagger
 * where the paired t-test rejects equality at p < 0.05), CSV and JSON for programs,
 * and a hand-written SVG scatter plot of storage (log scale) against the primary
 * metric that any browser opens. */
#include "cli.h"
#include "report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const DAGGER = "\xe2\x80\xa0"; /* U+2020 */
static const char *const ARROW = "\xe2\x86\x92";  /* U+2192 */
static const char *const TIMES = "\xc3\x97";      /* U+00D7 */
static const char *const DDAGGER = "\xe2\x80\xa1"; /* U+2021: S or H against D */

/* ------------------------------------------------------------------ variants */

static int default_codec(void) {
    tt_build_options o;
    tt_build_options_init(&o);
    return o.codec_tables;
}

static const char *codec_suffix(int codec) {
    return codec == TT_CODEC_SHARED ? "-shared" : codec == TT_CODEC_ADAPTIVE ? "-adaptive"
                                                                            : "-perdim";
}

typedef struct name_value {
    const char *name;
    int value;
} name_value;

/* If *rest starts with one of the names (NULL-terminated table) followed by its end or
 * '-': that name's value into *out, and *rest past it. */
static void take_suffix(const char **rest, const name_value *t, int *out) {
    for (; t->name; t++) {
        size_t n = strlen(t->name);
        if (!strncmp(*rest, t->name, n) && ((*rest)[n] == '\0' || (*rest)[n] == '-')) {
            *out = t->value;
            *rest += n;
            return;
        }
    }
}

bool rp_parse_variant(const char *s, rp_variant *v) {
    memset(v, 0, sizeof *v);
    v->pool = 1;
    v->debias = TT_DEBIAS_AUTO;
    if (!strcmp(s, "original") || !strcmp(s, "exact")) {
        v->original = true;
        snprintf(v->name, sizeof v->name, "original");
    } else {
        if (s[0] < '1' || s[0] > '4' || strncmp(s + 1, "bit", 3))
            return false;
        v->nbits = s[0] - '0';
        const char *rest = s + 4;
        static const name_value codecs[] = {
            {"-shared", TT_CODEC_SHARED}, {"-adaptive", TT_CODEC_ADAPTIVE},
            {"-perdim", TT_CODEC_PER_DIM}, {"-per-dim", TT_CODEC_PER_DIM}, {NULL, 0}};
        static const name_value debiases[] = {
            {"-table", TT_DEBIAS_TABLE}, {"-vector", TT_DEBIAS_VECTOR},
            {"-nodebias", TT_DEBIAS_NONE}, {NULL, 0}};
        v->codec = default_codec();
        take_suffix(&rest, codecs, &v->codec);
        take_suffix(&rest, debiases, &v->debias);
        if (v->debias == TT_DEBIAS_VECTOR && v->codec != TT_CODEC_ADAPTIVE)
            return false; /* per-vector scales exist for the adaptive codec only */
        if (!strncmp(rest, "-pool", 5)) {
            const char *d = rest + 5;
            int f = 0;
            for (; *d >= '0' && *d <= '9' && f <= 64; d++)
                f = f * 10 + (*d - '0');
            if (d == rest + 5 || *d || f < 1 || f > 64 || rest[5] == '0')
                return false;
            v->pool = f;
            rest = d;
        } else if (!strncmp(rest, "-gpool", 6)) {
            /* F > 1 in plain decimal (digits, at most one point): "-gpool2.5" */
            const char *d = rest + 6;
            int digits = 0, points = 0;
            for (; (*d >= '0' && *d <= '9') || *d == '.'; d++)
                *d == '.' ? points++ : digits++;
            char num[16];
            if (!digits || points > 1 || *d || d - (rest + 6) >= (long)sizeof num)
                return false;
            memcpy(num, rest + 6, (size_t)(d - (rest + 6)));
            num[d - (rest + 6)] = '\0';
            v->gpool = strtod(num, NULL);
            if (!(v->gpool > 1 && v->gpool <= 64))
                return false;
            rest = d;
        }
        if (*rest)
            return false;
        if (v->nbits == 3 && v->codec != TT_CODEC_ADAPTIVE)
            return false; /* 3 bits exist only as the adaptive codec's average */
        char pool[24] = "";
        if (v->pool > 1)
            snprintf(pool, sizeof pool, "-pool%d", v->pool);
        else if (v->gpool > 0)
            snprintf(pool, sizeof pool, "-gpool%g", v->gpool);
        static const char *const debias_suffix[] = {"-nodebias", "-table", "-vector"};
        snprintf(v->name, sizeof v->name, "%dbit%s%s%s", v->nbits,
                 v->codec == default_codec() ? "" : codec_suffix(v->codec),
                 v->debias == TT_DEBIAS_AUTO ? "" : debias_suffix[v->debias], pool);
    }
    for (size_t m = 0; m < RP_MAX_METRICS; m++)
        v->p[m] = v->s_value[m] = v->h_value[m] = v->s_p[m] = v->h_p[m] = NAN;
    v->recall = NAN;
    v->latency_p50 = v->s_latency_p50 = v->h_latency_p50 = NAN;
    v->build_seconds = NAN;
    return true;
}

const char *rp_codec_name(int codec) {
    return codec == TT_CODEC_SHARED ? "shared" : codec == TT_CODEC_ADAPTIVE ? "adaptive"
                                                                           : "per-dim";
}

const char *rp_variant_label(const rp_variant *v, char *buf, size_t len) {
    static const char *const what[] = {"shared table", "per-dim tables", "adaptive bits"};
    static const char *const how[] = {", weights as trained", ", table scales",
                                      ", vector scales"};
    const char *d = v->debias == TT_DEBIAS_AUTO ? "" : how[v->debias];
    if (v->original)
        snprintf(buf, len, "original (float16)");
    else if (v->pool > 1)
        snprintf(buf, len, "%d-bit (%s%s, pool %d)", v->nbits, what[v->codec], d, v->pool);
    else if (v->gpool > 0)
        snprintf(buf, len, "%d-bit (%s%s, one-cut pool %g)", v->nbits, what[v->codec], d,
                 v->gpool);
    else
        snprintf(buf, len, "%d-bit (%s%s)", v->nbits, what[v->codec], d);
    return buf;
}

/* The debiasing the variant's index has, as `tartan info --json` names it ("" for the
 * original and for a value this tartan does not know). */
static const char *debias_name(const rp_variant *v) {
    static const char *const names[] = {"none", "table", "vector"};
    return v->original || v->debias_used < 0 || v->debias_used > 2 ? "" : names[v->debias_used];
}

static double ratio_of(const rp_report *r, const rp_variant *v) {
    const rp_variant *o = &r->variants[0];
    return v->bytes ? (double)o->bytes / (double)v->bytes : NAN;
}

/* --------------------------------------------------------------- formatting */

const char *rp_human_bytes(double bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) {
        bytes /= 1024;
        u++;
    }
    if (u == 0) {
        snprintf(buf, len, "%.0f B", bytes);
        return buf;
    }
    char num[32];
    snprintf(num, sizeof num, "%.*f", bytes >= 100 ? 0 : bytes >= 10 ? 1 : 2, bytes);
    char *dot = strchr(num, '.');
    if (dot) { /* drop trailing zeros: "1.50" -> "1.5", "2.00" -> "2" */
        char *end = num + strlen(num) - 1;
        while (end > dot && *end == '0')
            *end-- = '\0';
        if (end == dot)
            *end = '\0';
    }
    snprintf(buf, len, "%s %s", num, units[u]);
    return buf;
}

static void human_seconds(double s, char *buf, size_t len) {
    if (!isfinite(s))
        snprintf(buf, len, "n/a");
    else if (s < 1e-3)
        snprintf(buf, len, "%.1f µs", s * 1e6);
    else if (s < 1)
        snprintf(buf, len, "%.2f ms", s * 1e3);
    else if (s < 600)
        snprintf(buf, len, "%.2f s", s);
    else
        snprintf(buf, len, "%.1f min", s / 60);
}

/* ---------------------------------------------------------------- Markdown */

/* Markdown table cells must not contain '|' or newlines (paths can). */
static void md_text(FILE *f, const char *s) {
    for (; *s; s++)
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
}

int rp_write_markdown(FILE *f, const rp_report *r) {
    const rp_variant *o = &r->variants[0];
    char h1[96], h2[32], lab[64];
    fprintf(f, "# Storage vs effectiveness\n\n");
    fprintf(f, "%llu documents, %llu vectors %s %u dimensions (`", (unsigned long long)r->num_docs,
            (unsigned long long)r->num_vectors, TIMES, r->dim);
    md_text(f, r->corpus_text ? r->corpus_text : r->vectors);
    fprintf(f, "`); %llu queries searched (`", (unsigned long long)r->num_queries);
    md_text(f, r->query_text ? r->query_text : r->queries);
    fprintf(f, "`), %zu evaluated against `", r->eval_queries);
    md_text(f, r->qrels);
    char prune[64];
    if (isnan(r->threshold))
        snprintf(prune, sizeof prune, "relative pruning ratio %g", r->prune_ratio);
    else
        snprintf(prune, sizeof prune, "threshold %g", r->threshold);
    fprintf(f, "`. Top %u per query, %s of MaxSim over query vectors; compressed variants are "
            "searched with PLAID (nprobe %d, %s, ndocs %u), the original with exact "
            "MaxSim over every document.\n\n",
            r->k, r->score_mean ? "mean" : "sum", r->nprobe, prune, r->ndocs);
    if (r->encoder) {
        fputs("Vectors made by the encoder `", f);
        md_text(f, r->encoder);
        fputs("`", f);
        if (r->encoder_description && *r->encoder_description) {
            fputs(": ", f);
            md_text(f, r->encoder_description);
        }
        fputs(".\n\n", f);
    }

    /* The main table. */
    fprintf(f, "| Variant |");
    for (size_t m = 0; m < r->nmetrics; m++)
        if (r->hybrid)
            fprintf(f, " %s D | %s S | %s H |", r->metric[m], r->metric[m], r->metric[m]);
        else
            fprintf(f, " %s |", r->metric[m]);
    fprintf(f, " Storage | Ratio | Bits/dim | Recall@%u vs exact | Latency p50%s | Build |\n",
            r->k, r->hybrid ? " D / S / H" : "");
    fprintf(f, "|---|");
    for (size_t m = 0; m < r->nmetrics * (r->hybrid ? 3 : 1); m++)
        fprintf(f, "---:|");
    fprintf(f, "---:|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < r->nvariants; i++) {
        const rp_variant *v = &r->variants[i];
        fprintf(f, "| %s |", rp_variant_label(v, lab, sizeof lab));
        for (size_t m = 0; m < r->nmetrics; m++) {
            if (v->original)
                fprintf(f, " %.4f |", v->value[m]);
            else
                fprintf(f, " %.4f %s %.4f%s |", o->value[m], ARROW, v->value[m],
                        isfinite(v->p[m]) && v->p[m] < RP_ALPHA ? DAGGER : "");
            if (r->hybrid)
                fprintf(f, " %.4f%s | %.4f%s |", v->s_value[m],
                        isfinite(v->s_p[m]) && v->s_p[m] < RP_ALPHA ? DDAGGER : "",
                        v->h_value[m], isfinite(v->h_p[m]) && v->h_p[m] < RP_ALPHA ? DDAGGER : "");
        }
        if (v->original)
            fprintf(f, " %s |", rp_human_bytes((double)v->bytes, h1, sizeof h1));
        else
            fprintf(f, " %s %s %s |", rp_human_bytes((double)o->bytes, h1, sizeof h1), ARROW,
                    rp_human_bytes((double)v->bytes, h2, sizeof h2));
        fprintf(f, " %.2f%s | %.2f |", ratio_of(r, v), TIMES, v->bits_per_dim);
        if (isfinite(v->recall))
            fprintf(f, " %.4f |", v->recall);
        else
            fprintf(f, " n/a |");
        human_seconds(v->latency_p50, h1, sizeof h1);
        if (r->hybrid) { /* D / S / H */
            char hs[32], hh[32];
            human_seconds(v->s_latency_p50, hs, sizeof hs);
            human_seconds(v->h_latency_p50, hh, sizeof hh);
            size_t n = strlen(h1);
            snprintf(h1 + n, sizeof h1 - n, " / %s / %s", hs, hh);
        }
        if (isfinite(v->build_seconds))
            fprintf(f, " %s | %.2f s |\n", h1, v->build_seconds);
        else
            fprintf(f, " %s | n/a |\n", h1);
    }
    fprintf(f, "\n%s: the two-sided paired t-test of the per-query values against the original "
            "rejects equal means at p < %.2f (%zu queries; p-values below).\n\n",
            DAGGER, RP_ALPHA, r->eval_queries);
    if (r->hybrid) {
        fprintf(f, "D: dense (the variant's own search, as above); S: sparse (");
        if (!strcmp(r->sparse_kind, "bm25"))
            fprintf(f, "BM25, k1 0.9, b 0.4, of `");
        else if (!strcmp(r->sparse_kind, "encoder"))
            fprintf(f, "the encoder's own sparse vectors, 8-bit quantized, of `");
        else
            fprintf(f, "precomputed weights, 8-bit quantized, of `");
        md_text(f, r->sparse_docs);
        fprintf(f, "`, queries `");
        md_text(f, r->sparse_queries);
        fprintf(f, "`; the same postings in every variant's index); H: hybrid, D and S fused ");
        if (r->fusion == TT_FUSION_RRF)
            fprintf(f, "by reciprocal rank (k 60)");
        else
            fprintf(f, "by min-max (%g %s D' + %g %s S', each list min-max normalised)",
                    r->fusion_alpha, TIMES, 1 - r->fusion_alpha, TIMES);
        fprintf(f, " over each list's top %u. %s: the paired t-test of S or H against the same "
                "row's D rejects equal means at p < %.2f.", r->fusion_depth, DDAGGER, RP_ALPHA);
        if (r->no_sparse)
            fprintf(f, " %zu searched queries have no sparse query: S returns nothing for them "
                    "and H their dense list.", r->no_sparse);
        fprintf(f, "\n\n");
    }

    /* p-values, one column per metric. */
    if (r->nvariants > 1) {
        fprintf(f, "Paired t-test p-values against the original:\n\n| Variant |");
        for (size_t m = 0; m < r->nmetrics; m++)
            fprintf(f, " %s |", r->metric[m]);
        fprintf(f, "\n|---|");
        for (size_t m = 0; m < r->nmetrics; m++)
            fprintf(f, "---:|");
        fprintf(f, "\n");
        for (size_t i = 1; i < r->nvariants; i++) {
            const rp_variant *v = &r->variants[i];
            fprintf(f, "| %s |", rp_variant_label(v, lab, sizeof lab));
            for (size_t m = 0; m < r->nmetrics; m++) {
                if (!isfinite(v->p[m]))
                    fprintf(f, " n/a |");
                else if (v->p[m] < 1e-4)
                    fprintf(f, " %.1e%s |", v->p[m], v->p[m] < RP_ALPHA ? DAGGER : "");
                else
                    fprintf(f, " %.4f%s |", v->p[m], v->p[m] < RP_ALPHA ? DAGGER : "");
            }
            fprintf(f, "\n");
        }
        fprintf(f, "\n");
    }
    if (r->hybrid) {
        fprintf(f, "Paired t-test p-values of sparse (S) and hybrid (H) against the same "
                "variant's dense (D):\n\n| Variant |");
        for (size_t m = 0; m < r->nmetrics; m++)
            fprintf(f, " %s S | %s H |", r->metric[m], r->metric[m]);
        fprintf(f, "\n|---|");
        for (size_t m = 0; m < 2 * r->nmetrics; m++)
            fprintf(f, "---:|");
        fprintf(f, "\n");
        for (size_t i = 0; i < r->nvariants; i++) {
            const rp_variant *v = &r->variants[i];
            fprintf(f, "| %s |", rp_variant_label(v, lab, sizeof lab));
            for (size_t m = 0; m < 2 * r->nmetrics; m++) {
                double p = m % 2 ? v->h_p[m / 2] : v->s_p[m / 2];
                if (!isfinite(p))
                    fprintf(f, " n/a |");
                else if (p < 1e-4)
                    fprintf(f, " %.1e%s |", p, p < RP_ALPHA ? DDAGGER : "");
                else
                    fprintf(f, " %.4f%s |", p, p < RP_ALPHA ? DDAGGER : "");
            }
            fprintf(f, "\n");
        }
        fprintf(f, "\n");
    }

    fprintf(f, "Columns (doc/report.md): metrics are means over the %zu evaluated queries "
            "(trec_eval definitions; judged queries without query vectors count 0). Storage of "
            "the original is its float16 vectors (vectors %s dim %s 2 bytes); of a compressed "
            "variant, every file of its index (centroids, codec, codes, residuals, IVF, doclens, "
            "ids, metadata). Ratio = original storage / variant storage. Bits/dim = storage %s 8 "
            "/ (vectors %s dim). Recall@%u vs exact: share of the original's exact top %u that "
            "the variant also returns, averaged over the searched queries. Latency: median "
            "seconds per query on one thread (%llu queries). Build: wall time of the index "
            "build.\n\n",
            r->eval_queries, TIMES, TIMES, TIMES, TIMES, r->k, r->k,
            (unsigned long long)(r->nvariants ? r->variants[0].latency_queries : 0));
    if (r->missing)
        fprintf(f, "Note: %zu judged queries have no query vectors and count 0 in every variant."
                "\n\n", r->missing);
    if (r->unjudged)
        fprintf(f, "Note: %zu searched queries have no judgements and are not evaluated.\n\n",
                r->unjudged);
    fprintf(f, "Made by tartan %s on %s with:\n\n```\n%s\n```\n", r->version ? r->version : "?",
            r->created ? r->created : "?", r->command ? r->command : "tartan report");
    return ferror(f) ? -1 : 0;
}

/* --------------------------------------------------------------------- CSV */

static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* x with `digits` decimals (%.*f), or significant digits (%.*g) when digits < 0;
 * nothing for a missing (non-finite) value. */
static void put_num(FILE *f, int digits, double x) {
    if (digits >= 0)
        fprintf(f, "%.*f", digits, x);
    else
        fprintf(f, "%.*g", -digits, x);
}

static void csv_num(FILE *f, int digits, double x) {
    fputc(',', f);
    if (isfinite(x))
        put_num(f, digits, x);
}

int rp_write_csv(FILE *f, const rp_report *r) {
    char lab[64];
    fputs("variant,label,nbits,codec_tables,debias,pool_factor,search", f);
    for (size_t m = 0; m < r->nmetrics; m++)
        fprintf(f, ",%s,%s_original,%s_p", r->metric[m], r->metric[m], r->metric[m]);
    for (size_t m = 0; r->hybrid && m < r->nmetrics; m++)
        fprintf(f, ",%s_S,%s_S_p,%s_H,%s_H_p", r->metric[m], r->metric[m], r->metric[m],
                r->metric[m]);
    if (r->hybrid)
        fputs(",latency_p50_ms_S,latency_p50_ms_H", f);
    fprintf(f, ",storage_bytes,original_bytes,ratio,bits_per_dim,recall@%u_vs_exact,"
            "latency_p50_ms,latency_queries,build_seconds,reused,index,run%s\n", r->k,
            r->hybrid ? ",sparse_run,hybrid_run" : "");
    const rp_variant *o = &r->variants[0];
    for (size_t i = 0; i < r->nvariants; i++) {
        const rp_variant *v = &r->variants[i];
        csv_field(f, v->name);
        fputc(',', f);
        csv_field(f, rp_variant_label(v, lab, sizeof lab));
        fprintf(f, ",%d,%s,%s,%d,%s", v->nbits, v->original ? "" : rp_codec_name(v->codec),
                debias_name(v), v->pool, v->original ? "exact" : "plaid");
        for (size_t m = 0; m < r->nmetrics; m++) {
            csv_num(f, 6, v->value[m]);
            csv_num(f, 6, o->value[m]);
            csv_num(f, -6, v->p[m]);
        }
        for (size_t m = 0; r->hybrid && m < r->nmetrics; m++) {
            csv_num(f, 6, v->s_value[m]);
            csv_num(f, -6, v->s_p[m]);
            csv_num(f, 6, v->h_value[m]);
            csv_num(f, -6, v->h_p[m]);
        }
        if (r->hybrid) {
            csv_num(f, 4, v->s_latency_p50 * 1e3);
            csv_num(f, 4, v->h_latency_p50 * 1e3);
        }
        fprintf(f, ",%llu,%llu", (unsigned long long)v->bytes, (unsigned long long)o->bytes);
        csv_num(f, 4, ratio_of(r, v));
        csv_num(f, 4, v->bits_per_dim);
        csv_num(f, 6, v->recall);
        csv_num(f, 4, v->latency_p50 * 1e3);
        fprintf(f, ",%llu", (unsigned long long)v->latency_queries);
        csv_num(f, 3, v->build_seconds);
        fprintf(f, ",%s,", v->reused ? "true" : "false");
        csv_field(f, v->index_dir ? v->index_dir : "");
        fputc(',', f);
        csv_field(f, v->run_path ? v->run_path : "");
        if (r->hybrid) {
            fputc(',', f);
            csv_field(f, v->sparse_run_path ? v->sparse_run_path : "");
            fputc(',', f);
            csv_field(f, v->hybrid_run_path ? v->hybrid_run_path : "");
        }
        fputc('\n', f);
    }
    return ferror(f) ? -1 : 0;
}

/* -------------------------------------------------------------------- JSON */

static void json_str(FILE *f, const char *s) {
    if (!s)
        fputs("null", f);
    else
        cli_json_string(f, s);
}

static void json_num(FILE *f, int digits, double x) {
    if (isfinite(x))
        put_num(f, digits, x);
    else
        fputs("null", f);
}

int rp_write_json(FILE *f, const rp_report *r) {
    char lab[64];
    fputs("{\n  \"tartan_version\": ", f);
    json_str(f, r->version);
    fputs(",\n  \"created\": ", f);
    json_str(f, r->created);
    fputs(",\n  \"command\": ", f);
    json_str(f, r->command);
    fputs(",\n  \"inputs\": {\"vectors\": ", f);
    json_str(f, r->vectors);
    fputs(", \"doclens\": ", f);
    json_str(f, r->doclens);
    fputs(", \"ids\": ", f);
    json_str(f, r->ids);
    fputs(", \"queries\": ", f);
    json_str(f, r->queries);
    fputs(", \"qrels\": ", f);
    json_str(f, r->qrels);
    fputs(",\n             \"encoder\": ", f);
    json_str(f, r->encoder);
    fputs(", \"encoder_description\": ", f);
    json_str(f, r->encoder_description);
    fputs(", \"corpus_text\": ", f);
    json_str(f, r->corpus_text);
    fputs(", \"query_text\": ", f);
    json_str(f, r->query_text);
    fprintf(f, "},\n  \"collection\": {\"documents\": %llu, \"vectors\": %llu, \"dim\": %u},\n",
            (unsigned long long)r->num_docs, (unsigned long long)r->num_vectors, r->dim);
    fprintf(f, "  \"queries\": {\"searched\": %llu, \"evaluated\": %zu, "
            "\"judged_without_vectors\": %zu, \"unjudged\": %zu},\n",
            (unsigned long long)r->num_queries, r->eval_queries, r->missing, r->unjudged);
    /* JSON has no NaN: relative pruning writes threshold null and its prune_ratio. */
    char prune[80];
    if (isnan(r->threshold))
        snprintf(prune, sizeof prune, "\"threshold\": null, \"prune_ratio\": %g", r->prune_ratio);
    else
        snprintf(prune, sizeof prune, "\"threshold\": %g", r->threshold);
    fprintf(f, "  \"search\": {\"k\": %u, \"score\": \"%s\", \"nprobe\": %d, %s, "
            "\"ndocs\": %u, \"threads\": %d},\n", r->k, r->score_mean ? "mean" : "sum", r->nprobe,
            prune, r->ndocs, r->threads);
    fputs("  \"metrics\": [", f);
    for (size_t m = 0; m < r->nmetrics; m++) {
        fputs(m ? ", " : "", f);
        json_str(f, r->metric[m]);
    }
    fprintf(f, "],\n  \"alpha\": %g,\n", RP_ALPHA);
    if (r->hybrid) {
        fputs("  \"sparse\": {\"kind\": ", f);
        json_str(f, r->sparse_kind);
        fputs(", \"documents\": ", f);
        json_str(f, r->sparse_docs);
        fputs(", \"queries\": ", f);
        json_str(f, r->sparse_queries);
        fprintf(f, ", \"queries_without_sparse\": %zu},\n", r->no_sparse);
        fprintf(f, "  \"fusion\": {\"method\": \"%s\", \"depth\": %u, \"alpha\": %g, "
                "\"rrf_k\": 60},\n", r->fusion == TT_FUSION_RRF ? "rrf" : "minmax",
                r->fusion_depth, r->fusion_alpha);
    }
    fputs("  \"variants\": [\n", f);
    for (size_t i = 0; i < r->nvariants; i++) {
        const rp_variant *v = &r->variants[i];
        fputs("    {\"name\": ", f);
        json_str(f, v->name);
        fputs(", \"label\": ", f);
        json_str(f, rp_variant_label(v, lab, sizeof lab));
        fprintf(f, ", \"original\": %s, \"nbits\": %d, \"codec_tables\": ",
                v->original ? "true" : "false", v->nbits);
        if (v->original)
            fputs("null", f);
        else
            json_str(f, rp_codec_name(v->codec));
        fputs(", \"debias\": ", f);
        if (*debias_name(v))
            json_str(f, debias_name(v));
        else
            fputs("null", f);
        fprintf(f, ", \"pool_factor\": %d, \"pool_global\": %g, \"search\": \"%s\",\n",
                v->pool, v->gpool, v->original ? "exact" : "plaid");
        const char *sep[] = {"metrics", "original_metrics", "p_values"};
        for (int part = 0; part < 3; part++) {
            fprintf(f, "     \"%s\": {", sep[part]);
            for (size_t m = 0; m < r->nmetrics; m++) {
                fputs(m ? ", " : "", f);
                json_str(f, r->metric[m]);
                fputs(": ", f);
                if (part == 0)
                    json_num(f, 6, v->value[m]);
                else if (part == 1)
                    json_num(f, 6, r->variants[0].value[m]);
                else
                    json_num(f, -6, v->p[m]);
            }
            fputs("},\n", f);
        }
        fputs("     \"significant\": {", f);
        for (size_t m = 0; m < r->nmetrics; m++) {
            fputs(m ? ", " : "", f);
            json_str(f, r->metric[m]);
            fprintf(f, ": %s", isfinite(v->p[m]) && v->p[m] < RP_ALPHA ? "true" : "false");
        }
        fprintf(f, "},\n     \"storage_bytes\": %llu, \"original_bytes\": %llu, \"ratio\": ",
                (unsigned long long)v->bytes, (unsigned long long)r->variants[0].bytes);
        json_num(f, 4, ratio_of(r, v));
        fputs(", \"bits_per_dim\": ", f);
        json_num(f, 4, v->bits_per_dim);
        fputs(",\n     \"recall_vs_exact\": ", f);
        json_num(f, 6, v->recall);
        fputs(", \"latency_p50_ms\": ", f);
        json_num(f, 4, v->latency_p50 * 1e3);
        fprintf(f, ", \"latency_queries\": %llu, \"build_seconds\": ",
                (unsigned long long)v->latency_queries);
        json_num(f, 3, v->build_seconds);
        fprintf(f, ", \"reused\": %s,\n     \"index\": ", v->reused ? "true" : "false");
        json_str(f, v->index_dir);
        fputs(", \"run\": ", f);
        json_str(f, v->run_path);
        for (int part = 0; r->hybrid && part < 2; part++) {
            const double *val = part ? v->h_value : v->s_value, *p = part ? v->h_p : v->s_p;
            fprintf(f, ",\n     \"%s\": {\"metrics\": {", part ? "hybrid" : "sparse");
            for (size_t m = 0; m < r->nmetrics; m++) {
                fputs(m ? ", " : "", f);
                json_str(f, r->metric[m]);
                fputs(": ", f);
                json_num(f, 6, val[m]);
            }
            fputs("}, \"p_values_vs_dense\": {", f);
            for (size_t m = 0; m < r->nmetrics; m++) {
                fputs(m ? ", " : "", f);
                json_str(f, r->metric[m]);
                fputs(": ", f);
                json_num(f, -6, p[m]);
            }
            fputs("}, \"significant_vs_dense\": {", f);
            for (size_t m = 0; m < r->nmetrics; m++) {
                fputs(m ? ", " : "", f);
                json_str(f, r->metric[m]);
                fprintf(f, ": %s", isfinite(p[m]) && p[m] < RP_ALPHA ? "true" : "false");
            }
            fputs("}, \"latency_p50_ms\": ", f);
            json_num(f, 4, (part ? v->h_latency_p50 : v->s_latency_p50) * 1e3);
            fputs(", \"run\": ", f);
            json_str(f, part ? v->hybrid_run_path : v->sparse_run_path);
            fputs("}", f);
        }
        fprintf(f, "}%s\n", i + 1 < r->nvariants ? "," : "");
    }
    fputs("  ]\n}\n", f);
    return ferror(f) ? -1 : 0;
}

/* --------------------------------------------------------------------- axes */

size_t rp_log_ticks(double lo, double hi, double *ticks, size_t max, double *axis_lo,
                    double *axis_hi) {
    /* Powers of two make exact binary-unit labels (256 KiB, 512 KiB, 1 MiB). The axis
     * ends at a power of two at least 0.15 octave beyond the data, so no point sits on
     * the frame. */
    int e_lo = (int)floor(log2(lo) - 0.15), e_hi = (int)ceil(log2(hi) + 0.15);
    int octaves = e_hi - e_lo;
    int step = (octaves + 6) / 7; /* at most about 8 ticks */
    if (step < 1)
        step = 1;
    e_lo -= ((e_lo % step) + step) % step; /* ticks at multiples of step: 2^0, 2^10, ... */
    while ((e_hi - e_lo) % step)
        e_hi++;
    size_t n = 0;
    for (int e = e_lo; e <= e_hi && n < max; e += step) {
        ticks[n++] = ldexp(1.0, e);
        /* Few octaves: 1.5 x 2^e between the powers (384 KiB, 768 KiB, 1.5 MiB). */
        if (e_hi - e_lo <= 3 && e < e_hi && n < max)
            ticks[n++] = 1.5 * ldexp(1.0, e);
    }
    *axis_lo = ldexp(1.0, e_lo);
    *axis_hi = ldexp(1.0, e_hi);
    return n;
}

size_t rp_lin_ticks(double lo, double hi, double *ticks, size_t max, double *axis_lo,
                    double *axis_hi) {
    if (hi - lo < 1e-9) {
        lo -= 0.05;
        hi += 0.05;
    }
    double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), step;
    double frac = raw / mag;
    frac *= 1 - 1e-9; /* 0.05 / 5 is 0.010000000000000009: still a step of 0.01 */
    step = (frac <= 1 ? 1 : frac <= 2 ? 2 : frac <= 5 ? 5 : 10) * mag;
    double a = floor(lo / step + 1e-9) * step, b = ceil(hi / step - 1e-9) * step;
    size_t n = 0;
    for (long i = 0; n < max; i++) {
        double t = a + (double)i * step;
        if (t > b + step * 1e-6)
            break;
        ticks[n++] = fabs(t) < step * 1e-9 ? 0.0 : t;
    }
    *axis_lo = a;
    *axis_hi = b;
    return n;
}

/* ---------------------------------------------------------------------- SVG */

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t' || *s == '\n')
                fputc(*s, f);
        }
    }
}

typedef struct box {
    double x0, y0, x1, y1;
} box;

static double overlap(box a, box b) {
    double w = fmin(a.x1, b.x1) - fmax(a.x0, b.x0), h = fmin(a.y1, b.y1) - fmax(a.y0, b.y0);
    return w > 0 && h > 0 ? w * h : 0;
}

enum { SVG_W = 860, SVG_H = 600, PX0 = 90, PX1 = 820, PY0 = 100, PY1 = 510 };
#define CHAR_W 7.4 /* generous average advance of a 13 px sans-serif glyph */

/* Where to put each point's label: the first of the candidate spots (right, left,
 * centred; above, then below; then rings further out, drawn with a leader line) whose
 * box overlaps no label placed before, no point, and stays inside the plot; else the
 * candidate with the least overlap. */
static void place_labels(const double *px, const double *py, const char *const *text, size_t n,
                         double *lx, double *ly, int *anchor, bool *leader) {
    enum { RINGS = 5, NCAND = RINGS * 6 };
    struct { double dx, dy; int anchor; } cand[NCAND];
    for (int r = 0; r < RINGS; r++)
        for (int side = 0; side < 2; side++) {
            double dy = side == 0 ? -8 - 16.0 * r : 17 + 16.0 * r;
            int c0 = r * 6 + side * 3;
            cand[c0 + 0].dx = 12 + 4.0 * r, cand[c0 + 0].dy = dy, cand[c0 + 0].anchor = 0;
            cand[c0 + 1].dx = -12 - 4.0 * r, cand[c0 + 1].dy = dy, cand[c0 + 1].anchor = 2;
            cand[c0 + 2].dx = 0, cand[c0 + 2].dy = dy + (side ? 6 : -5), cand[c0 + 2].anchor = 1;
        }
    box *placed = calloc(n ? n : 1, sizeof *placed);
    for (size_t i = 0; i < n; i++) {
        double w = CHAR_W * (double)strlen(text[i]), best = INFINITY;
        size_t bc = 0;
        box bb = {0, 0, 0, 0};
        for (size_t c = 0; c < NCAND; c++) {
            double x = px[i] + cand[c].dx, y = py[i] + cand[c].dy;
            double x0 = cand[c].anchor == 0 ? x : cand[c].anchor == 1 ? x - w / 2 : x - w;
            box b = {x0 - 2, y - 12, x0 + w + 2, y + 4};
            double cost = 0;
            for (size_t j = 0; j < i && placed; j++)
                cost += overlap(b, placed[j]);
            for (size_t j = 0; j < n; j++)
                cost += overlap(b, (box){px[j] - 9, py[j] - 9, px[j] + 9, py[j] + 9});
            if (b.x0 < PX0 || b.x1 > PX1 || b.y0 < PY0 || b.y1 > PY1)
                cost += 1000;
            cost += (double)c * 1e-3; /* prefer earlier (closer) spots on ties */
            if (cost < best) {
                best = cost;
                bc = c;
                bb = b;
            }
        }
        if (placed)
            placed[i] = bb;
        lx[i] = px[i] + cand[bc].dx;
        ly[i] = py[i] + cand[bc].dy;
        anchor[i] = cand[bc].anchor;
        leader[i] = bc >= 6;
    }
    free(placed);
}

/* Series of the plot: 0 the original, then one per codec (per-dim, shared, adaptive),
 * with a marker shape and colour each; token-pooled variants are drawn hollow. */
enum { SERIES = 4 };
static const char *const series_colour[SERIES] = {"#222", "#1864ab", "#d9480f", "#2b8a3e"};
static const char *const series_legend[SERIES] = {
    "original (float16, exact MaxSim)", "per-dimension codec tables",
    "one shared codec table (ColBERTv2)", "adaptive bits per dimension"};

static int series_of(const rp_variant *v) {
    if (v->original)
        return 0;
    return v->codec == TT_CODEC_SHARED ? 2 : v->codec == TT_CODEC_ADAPTIVE ? 3 : 1;
}

/* One marker centred on (x, y); cls is "point" (one per variant) or "legend-mark". */
static void svg_shape(FILE *f, const char *cls, const char *variant, int series, bool hollow,
                      double x, double y) {
    const char *c = series_colour[series];
    fprintf(f, "<%s class=\"%s\"", series == 1 ? "circle" : series == 2 ? "rect" : "path", cls);
    if (variant)
        fprintf(f, " data-variant=\"%s\"", variant);
    if (series == 0)
        fprintf(f, " d=\"M%.1f %.1fl7 7l-7 7l-7 -7z\"", x, y - 7);
    else if (series == 1)
        fprintf(f, " cx=\"%.1f\" cy=\"%.1f\" r=\"5.5\"", x, y);
    else if (series == 2)
        fprintf(f, " x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\"", x - 5, y - 5);
    else
        fprintf(f, " d=\"M%.1f %.1fl6.5 11h-13z\"", x, y - 6.5);
    if (hollow)
        fprintf(f, " fill=\"#fff\" stroke=\"%s\" stroke-width=\"2\"/>", c);
    else
        fprintf(f, " fill=\"%s\"/>", c);
}

/* The sparse (m 0: a cross) or hybrid (m 1: a plus) marker centred on (x, y); cls is
 * "point-s", "point-h" or "legend-mark". */
static void svg_sh_marker(FILE *f, const char *cls, const char *variant, int m,
                          const char *colour, double x, double y) {
    fprintf(f, "<path class=\"%s\"", cls);
    if (variant)
        fprintf(f, " data-variant=\"%s\"", variant);
    if (m == 0)
        fprintf(f, " d=\"M%.1f %.1fl10 10m0 -10l-10 10\"", x - 5, y - 5);
    else
        fprintf(f, " d=\"M%.1f %.1fh12m-6 -6v12\"", x - 6, y);
    fprintf(f, " fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\"/>", colour);
}

static void svg_marker(FILE *f, const rp_variant *v, double x, double y) {
    svg_shape(f, "point", v->name, series_of(v), v->pool > 1 || v->gpool > 0, x, y);
}

int rp_write_svg(FILE *f, const rp_report *r) {
    const size_t n = r->nvariants;
    double bmin = INFINITY, bmax = 0, vmin = INFINITY, vmax = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        double b = r->variants[i].bytes ? (double)r->variants[i].bytes : 1;
        bmin = fmin(bmin, b);
        bmax = fmax(bmax, b);
        vmin = fmin(vmin, r->variants[i].value[0]);
        vmax = fmax(vmax, r->variants[i].value[0]);
        if (r->hybrid) { /* the sparse (S) and hybrid (H) values share the axis */
            vmin = fmin(vmin, fmin(r->variants[i].s_value[0], r->variants[i].h_value[0]));
            vmax = fmax(vmax, fmax(r->variants[i].s_value[0], r->variants[i].h_value[0]));
        }
    }
    if (n == 0)
        bmin = bmax = 1, vmin = vmax = 0;
    double xt[32], yt[32], xa, xb, ya, yb;
    size_t nxt = rp_log_ticks(bmin, bmax, xt, 32, &xa, &xb);
    /* Effectiveness axis: 8% of the spread beyond the data, inside [0, 1]. */
    double pad = vmax - vmin < 1e-9 ? 0.05 : (vmax - vmin) * 0.08;
    double lo = vmin - pad, hi = vmax + pad;
    if (vmin >= 0)
        lo = fmax(lo, 0);
    if (vmax <= 1)
        hi = fmin(hi, 1);
    size_t nyt = rp_lin_ticks(lo, hi, yt, 32, &ya, &yb);
    double ystep = nyt > 1 ? yt[1] - yt[0] : 0.1;
    int ydec = ystep >= 1 ? 0 : (int)ceil(-log10(ystep) - 1e-9);
    double lxa = log2(xa), lxb = log2(xb);
#define XP(b) (PX0 + (log2(b) - lxa) / (lxb - lxa) * (PX1 - PX0))
/* 16 px inside the frame at both ends, so points at the axis ends stay clear of it. */
#define YP(v) (PY1 - 16 - ((v) - ya) / (yb - ya) * (PY1 - PY0 - 32))

    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"Helvetica, Arial, sans-serif\">\n",
            SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", SVG_W, SVG_H);
    fprintf(f, "<text x=\"%d\" y=\"30\" font-size=\"18\" font-weight=\"bold\">Storage vs ",
            PX0);
    xml_text(f, r->metric[0]);
    if (r->hybrid)
        fputs(": dense (D), sparse (S) and hybrid (H)", f);
    fprintf(f, "</text>\n<text x=\"%d\" y=\"50\" font-size=\"12\" fill=\"#555\">%llu documents, "
            "%llu vectors %s %u dims; %zu evaluated queries; top %u, %s MaxSim</text>\n",
            PX0, (unsigned long long)r->num_docs, (unsigned long long)r->num_vectors, TIMES, r->dim,
            r->eval_queries, r->k, r->score_mean ? "mean" : "sum");

    /* Legend (only the series present), above the plot. */
    bool has[SERIES] = {false}, pooled = false;
    for (size_t i = 0; i < n; i++) {
        has[series_of(&r->variants[i])] = true;
        pooled |= r->variants[i].pool > 1 || r->variants[i].gpool > 0;
    }
    double lx = PX0;
    for (int s = 0; s <= SERIES; s++) {
        if (s < SERIES ? !has[s] : !pooled)
            continue;
        const char *text = s < SERIES ? series_legend[s] : "hollow: token-pooled";
        fputs("<g class=\"legend\">", f);
        /* Legend markers use class "legend-mark" so that class="point" counts variants. */
        if (s < SERIES)
            svg_shape(f, "legend-mark", NULL, s, false, lx + 6, 72);
        fprintf(f, "<text x=\"%.1f\" y=\"76\" font-size=\"12\">%s</text></g>\n",
                s < SERIES ? lx + 18 : lx, text);
        lx += (s < SERIES ? 18 : 0) + CHAR_W * 0.93 * (double)strlen(text) + 24;
    }
    if (r->hybrid) { /* the S and H markers, in a second legend row */
        static const char *const sh_legend[2] = {"S: sparse", "H: hybrid (fused)"};
        double hx = PX0;
        for (int m = 0; m < 2; m++) {
            fputs("<g class=\"legend\">", f);
            svg_sh_marker(f, "legend-mark", NULL, m, "#222", hx + 6, 90);
            fprintf(f, "<text x=\"%.1f\" y=\"94\" font-size=\"12\">%s</text></g>\n", hx + 18,
                    sh_legend[m]);
            hx += 18 + CHAR_W * 0.93 * (double)strlen(sh_legend[m]) + 24;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"94\" font-size=\"12\" fill=\"#555\">(D: the codec's "
                "marker; S and H at the same storage, joined to D)</text>\n", hx);
    }

    /* Grid, ticks and tick labels. */
    fputs("<g stroke=\"#e5e5e5\" stroke-width=\"1\">\n", f);
    for (size_t t = 0; t < nxt; t++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n", XP(xt[t]), PY0,
                XP(xt[t]), PY1);
    for (size_t t = 0; t < nyt; t++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\"/>\n", PX0, YP(yt[t]), PX1,
                YP(yt[t]));
    fputs("</g>\n", f);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#333\"/>\n",
            PX0, PY0, PX1 - PX0, PY1 - PY0);
    fputs("<g font-size=\"12\" fill=\"#333\">\n", f);
    for (size_t t = 0; t < nxt; t++) {
        char hb[32];
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>"
                "<text class=\"xtick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                XP(xt[t]), PY1, XP(xt[t]), PY1 + 5, XP(xt[t]), PY1 + 20,
                rp_human_bytes(xt[t], hb, sizeof hb));
    }
    for (size_t t = 0; t < nyt; t++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>"
                "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n",
                PX0 - 5, YP(yt[t]), PX0, YP(yt[t]), PX0 - 9, YP(yt[t]) + 4, ydec, yt[t]);
    fputs("</g>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"14\" text-anchor=\"middle\">storage on disk "
            "(log scale): index files; original: float16 vectors</text>\n",
            (PX0 + PX1) / 2, PY1 + 50);
    fprintf(f, "<text transform=\"translate(%d %d) rotate(-90)\" font-size=\"14\" "
            "text-anchor=\"middle\">", 28, (PY0 + PY1) / 2);
    xml_text(f, r->metric[0]);
    fprintf(f, " (mean over %zu queries)</text>\n", r->eval_queries);

    /* Points: positions, series lines (by storage), markers, labels. */
    double *px = calloc(n ? n : 1, sizeof *px), *py = calloc(n ? n : 1, sizeof *py);
    double *tx = calloc(n ? n : 1, sizeof *tx), *ty = calloc(n ? n : 1, sizeof *ty);
    int *anc = calloc(n ? n : 1, sizeof *anc);
    bool *lead = calloc(n ? n : 1, sizeof *lead);
    const char **text = calloc(n ? n : 1, sizeof *text);
    if (!px || !py || !tx || !ty || !anc || !lead || !text) {
        free(px), free(py), free(tx), free(ty), free(anc), free(lead), free(text);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const rp_variant *v = &r->variants[i];
        px[i] = XP(v->bytes ? (double)v->bytes : 1);
        py[i] = YP(v->value[0]);
        text[i] = v->name;
    }
    for (int s = 2; s < 2 * SERIES; s++) {
        /* Connect a series' points (pooled and not apart) in storage order (insertion
         * sort on indexes). */
        size_t idx[64], m = 0;
        for (size_t i = 0; i < n && m < 64; i++) {
            const rp_variant *v = &r->variants[i];
            if (2 * series_of(v) + (v->pool > 1 || v->gpool > 0) != s)
                continue;
            size_t j = m++;
            while (j > 0 && r->variants[idx[j - 1]].bytes > v->bytes) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = i;
        }
        if (m < 2)
            continue;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"%s\" points=\"", series_colour[s / 2],
                s % 2 ? "1 3" : "4 3");
        for (size_t j = 0; j < m; j++)
            fprintf(f, "%s%.1f,%.1f", j ? " " : "", px[idx[j]], py[idx[j]]);
        fputs("\"/>\n", f);
    }
    if (n > 0 && r->variants[0].original) /* the original's level, for reading drops */
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#888\" "
                "stroke-width=\"1\" stroke-dasharray=\"2 4\"/>\n", PX0, py[0], PX1, py[0]);
    /* Sparse (S, a cross) and hybrid (H, a plus) of each variant at its storage, joined
     * to its dense point by a thin line, in the variant's series colour. */
    for (size_t i = 0; i < n && r->hybrid; i++) {
        const rp_variant *v = &r->variants[i];
        const char *c = series_colour[series_of(v)];
        double ys = YP(v->s_value[0]), yh = YP(v->h_value[0]);
        double y0 = fmin(py[i], fmin(ys, yh)), y1 = fmax(py[i], fmax(ys, yh));
        fprintf(f, "<g><line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"1\" stroke-opacity=\"0.5\"/>", px[i], y0, px[i], y1, c);
        fprintf(f, "<title>%s: %s D %.4f, S %.4f, H %.4f</title>", v->name, r->metric[0],
                v->value[0], v->s_value[0], v->h_value[0]);
        svg_sh_marker(f, "point-s", v->name, 0, c, px[i], ys);
        svg_sh_marker(f, "point-h", v->name, 1, c, px[i], yh);
        fputs("</g>\n", f);
    }
    place_labels(px, py, text, n, tx, ty, anc, lead);
    static const char *const anchors[] = {"start", "middle", "end"};
    for (size_t i = 0; i < n; i++) {
        const rp_variant *v = &r->variants[i];
        char hb[32], lab[64];
        fputs("<g>", f);
        fprintf(f, "<title>%s: %s %.4f, %s (%.2f%s smaller than float16)</title>",
                rp_variant_label(v, lab, sizeof lab), r->metric[0], v->value[0],
                rp_human_bytes((double)v->bytes, hb, sizeof hb), ratio_of(r, v), TIMES);
        if (lead[i]) /* to the label's top edge if below the point, else its baseline */
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#999\"/>",
                    px[i], py[i], tx[i], ty[i] > py[i] ? ty[i] - 12 : ty[i] + 3);
        svg_marker(f, v, px[i], py[i]);
        fprintf(f, "<text class=\"label\" x=\"%.1f\" y=\"%.1f\" font-size=\"13\" "
                "text-anchor=\"%s\">", tx[i], ty[i], anchors[anc[i]]);
        xml_text(f, v->name);
        fputs("</text></g>\n", f);
    }
    fputs("</svg>\n", f);
#undef XP
#undef YP
    free(px), free(py), free(tx), free(ty), free(anc), free(lead), free(text);
    return ferror(f) ? -1 : 0;
}

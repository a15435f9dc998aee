/* tartan info: what an index holds and what it costs, on disk and in memory. */
#include "cli.h"

#include <string.h>

static const char *assign_name(int a) { return a == TT_ASSIGN_EXACT ? "exact" : "two-level"; }

static const char *codec_name(int c) {
    return c == TT_CODEC_ADAPTIVE ? "adaptive" : c == TT_CODEC_PER_DIM ? "per-dim" : "shared";
}
/* The input's vectors (before token pooling) as float16: what the index replaces. */
static uint64_t input_f16(const tt_index_info *in) { return in->input_vectors * in->dim * 2; }
/* The dense part of the index (what the compression ratios are of): bytes_index without
 * the sparse postings, the metadata database and the calibration. */
static uint64_t dense_bytes(const tt_index_info *in) {
    return in->bytes_index - in->bytes_sparse - in->bytes_metadata - in->bytes_tune;
}

/* "table", "vector" or "none" (tt_debias; the names `--debias` and report.json use). */
static const char *debias_json(int debias) {
    return debias == TT_DEBIAS_TABLE    ? "\"table\""
           : debias == TT_DEBIAS_VECTOR ? "\"vector\""
                                        : "\"none\"";
}

/* A set's share of first documents kept, as JSON: null where tune.tt predates it. */
static const char *first_json(const tt_tuned *t, char *buf) {
    if (t->first < 0)
        return "null";
    snprintf(buf, 16, "%.4f", t->first);
    return buf;
}

static void print_json(const char *dir, const tt_index *idx, const tt_index_info *in) {
    printf("{\n  \"path\": ");
    cli_json_string(stdout, dir);
    printf(",\n  \"format_version\": %u,\n  \"tartan_version\": ", in->format_version);
    cli_json_string(stdout, in->tartan_version);
    printf(",\n  \"created\": ");
    cli_json_string(stdout, in->created);
    printf(",\n  \"num_docs\": %llu,\n  \"num_vectors\": %llu,\n  \"dim\": %u,\n"
           "  \"nbits\": %u,\n  \"num_centroids\": %u,\n  \"normalized\": %s,\n"
           "  \"codec_tables\": \"%s\",\n  \"lloyd_max_rounds\": %d,\n  \"debias\": %s,\n"
           "  \"dims_by_width\": {\"0\": %u, \"1\": %u, \"2\": %u, \"3\": %u, \"4\": %u, "
           "\"8\": %u},\n"
           "  \"has_ids\": %s,\n  \"keep_originals\": %s,\n"
           "  \"pool_factor\": %u,\n  \"pool_global\": %.17g,\n  \"pool_threshold\": %.17g,\n"
           "  \"input_vectors\": %llu,\n  \"sketch_bytes\": %u,\n",
           (unsigned long long)in->num_docs, (unsigned long long)in->num_vectors, in->dim,
           in->nbits, in->num_centroids, in->normalized ? "true" : "false",
           codec_name(in->codec_tables), in->lloyd_max_rounds, debias_json(in->debias),
           in->dims_by_width[0],
           in->dims_by_width[1], in->dims_by_width[2], in->dims_by_width[3], in->dims_by_width[4],
           in->dims_by_width[8], in->has_ids ? "true" : "false",
           in->keep_originals ? "\"f16\"" : "null", in->pool_factor, in->pool_global,
           in->pool_threshold, (unsigned long long)in->input_vectors, in->sketch_bytes);
    printf("  \"bytes\": {\"meta\": %llu, \"centroids\": %llu, \"codec\": %llu, \"doclens\": %llu, "
           "\"codes\": %llu, \"residuals\": %llu, \"ivf\": %llu, \"ids\": %llu, \"manifest\": %llu, "
           "\"sketch\": %llu, \"vscale\": %llu, \"sparse\": %llu, \"metadata\": %llu, "
           "\"tune\": %llu, \"index\": %llu, \"originals\": %llu},\n",
           (unsigned long long)in->bytes_meta, (unsigned long long)in->bytes_centroids,
           (unsigned long long)in->bytes_codec, (unsigned long long)in->bytes_doclens,
           (unsigned long long)in->bytes_codes, (unsigned long long)in->bytes_residuals,
           (unsigned long long)in->bytes_ivf, (unsigned long long)in->bytes_ids,
           (unsigned long long)in->bytes_manifest, (unsigned long long)in->bytes_sketch,
           (unsigned long long)in->bytes_vscale, (unsigned long long)in->bytes_sparse,
           (unsigned long long)in->bytes_metadata, (unsigned long long)in->bytes_tune,
           (unsigned long long)in->bytes_index, (unsigned long long)in->bytes_originals);
    printf("  \"bits_per_dim\": %.4f,\n  \"uncompressed_f16_bytes\": %llu,\n"
           "  \"uncompressed_f32_bytes\": %llu,\n  \"ratio_f16\": %.3f,\n  \"ratio_f32\": %.3f,\n"
           "  \"input_f16_bytes\": %llu,\n  \"ratio_input_f16\": %.3f,\n"
           "  \"resident_bytes\": %llu,\n",
           in->bits_per_dim, (unsigned long long)in->bytes_f16, (unsigned long long)in->bytes_f32,
           in->ratio_f16, in->ratio_f32, (unsigned long long)input_f16(in),
           (double)input_f16(in) / (double)dense_bytes(in), (unsigned long long)in->resident_bytes);
    printf("  \"build\": {\"seed\": %llu, \"sample_factor\": %g, \"train_vectors\": %llu, "
           "\"heldout_vectors\": %llu, \"kmeans_iters\": %u, \"threads\": %u, \"assign\": \"%s\", "
           "\"seconds\": %.3f, \"heldout_mse\": %.6g},\n  \"encoder\": ",
           (unsigned long long)in->seed, in->sample_factor, (unsigned long long)in->train_vectors,
           (unsigned long long)in->heldout_vectors, in->kmeans_iters, in->threads,
           assign_name(in->assign), in->build_seconds, in->heldout_mse);
    cli_json_string(stdout, in->encoder);
    tt_sparse_info spi;
    if (tt_index_sparse_info(idx, &spi) != TT_OK)
        memset(&spi, 0, sizeof spi);
    printf(",\n  \"sparse\": {\"kind\": %s, \"bytes\": %llu, \"terms\": %llu, \"postings\": %llu, "
           "\"avgdl\": %.6g}",
           spi.kind == TT_SPARSE_BM25 ? "\"bm25\"" : spi.kind == TT_SPARSE_TERM_IDS ? "\"term_ids\""
           : spi.kind ? "\"weights\"" : "null",
           (unsigned long long)spi.bytes, (unsigned long long)spi.terms,
           (unsigned long long)spi.postings, spi.avgdl);
    printf(",\n  \"generation\": %llu,\n  \"live_docs\": %llu,\n  \"deleted_docs\": %llu,\n"
           "  \"drift\": {\"added_vectors\": %llu, \"added_mse\": %.6g, \"ratio\": %.4f, "
           "\"retrain_advised\": %s},\n  \"segments\": [",
           (unsigned long long)in->generation,
           (unsigned long long)(in->num_docs - in->num_deleted),
           (unsigned long long)in->num_deleted, (unsigned long long)in->added_vectors,
           in->added_mse, in->drift, in->retrain_advised ? "true" : "false");
    for (uint32_t i = 0; i < in->num_segments; i++) {
        tt_segment_info si;
        tt_index_segment_info(idx, i, &si);
        printf("%s\n    {\"id\": %llu, \"first_doc\": %llu, \"docs\": %llu, \"vectors\": %llu, "
               "\"deleted\": %llu, \"bytes\": %llu, \"added_mse\": %.6g}", i ? "," : "",
               (unsigned long long)si.id, (unsigned long long)si.first_doc,
               (unsigned long long)si.num_docs, (unsigned long long)si.num_vectors,
               (unsigned long long)si.num_deleted, (unsigned long long)si.bytes, si.added_mse);
    }
    printf("\n  ],\n  \"metadata\": ");
    tt_metadata *md = NULL;
    if (tt_metadata_open(idx, &md) != TT_OK) {
        printf("null");
    } else {
        printf("[");
        for (size_t i = 0; i < tt_metadata_num_columns(md); i++) {
            const char *type, *name = tt_metadata_column(md, i, &type);
            printf("%s{\"name\": ", i ? ", " : "");
            cli_json_string(stdout, name);
            printf(", \"type\": ");
            cli_json_string(stdout, type);
            printf("}");
        }
        printf("]");
    }
    tt_metadata_close(md);
    printf(",\n  \"calibration\": ");
    tt_tune_info t;
    tt_index_tuned(idx, &t);
    if (!t.tuned) {
        printf("null\n}\n");
        return;
    }
    printf("{\"target\": %.4f, \"source\": \"%s\", \"queries\": %u, \"query_len\": %u, "
           "\"live_docs\": %llu, \"generation\": %llu, \"cost\": \"%s\"",
           t.target, t.pseudo ? "pseudo" : "queries", t.num_queries, t.query_len,
           (unsigned long long)t.live_docs, (unsigned long long)t.generation,
           t.cost == TT_TUNE_COST_WORK ? "work" : "time");
    const tt_tuned *sets[4] = {&t.k10, &t.k100, &t.k10_short, &t.k100_short};
    char fj[4][16];
    if (t.short_len)
        printf(", \"short_len\": %u", t.short_len);
    printf(", \"centroid_groups\": %u", t.centroid_groups);
    for (int i = 0; i < (t.short_len ? 4 : 2); i++)
        printf(",\n    \"k%u%s\": {\"nprobe\": %d, \"ndocs\": %u, \"prune_ratio\": %.4f, "
               "\"rerank_margin\": %.4f, \"sketch\": %s, \"recall\": %.4f, \"first\": %s, "
               "\"ms\": %.4f, \"reached\": %s, \"exhaustive\": %s, \"exhaustive_ms\": %.4f, "
               "\"centroid_groups\": %u}",
               sets[i]->k, i >= 2 ? "_short" : "", sets[i]->nprobe, sets[i]->ndocs,
               (double)sets[i]->prune_ratio, (double)sets[i]->rerank_margin,
               sets[i]->sketch ? "true" : "false", sets[i]->recall, first_json(sets[i], fj[i]),
               sets[i]->ms,
               sets[i]->reached ? "true" : "false", sets[i]->exhaustive ? "true" : "false",
               sets[i]->exhaustive_ms, sets[i]->centroid_groups);
    printf("}\n}\n");
}

/* The metadata columns (tartan search --where). */
static void print_metadata(const tt_index *idx) {
    tt_metadata *md = NULL;
    if (tt_metadata_open(idx, &md) != TT_OK) {
        printf("metadata     none\n");
        return;
    }
    size_t n = tt_metadata_num_columns(md);
    printf("metadata     %zu column%s (SQLite; tartan search --where)%s", n, n == 1 ? "" : "s",
           n ? ":" : "");
    for (size_t i = 0; i < n; i++) {
        const char *type, *name = tt_metadata_column(md, i, &type);
        printf("%s%s %s", i ? ", " : " ", name, type);
    }
    printf("\n");
    tt_metadata_close(md);
}

static void row(const char *name, uint64_t bytes, uint64_t total) {
    char h[32];
    printf("  %-12s %12s  %5.1f%%\n", name, cli_human_bytes(bytes, h, sizeof h),
           total ? 100.0 * (double)bytes / (double)total : 0.0);
}

static void print_text(const char *dir, const tt_index *idx, const tt_index_info *in) {
    char h1[32], h2[32], h3[32];
    printf("index        %s (format %u, generation %llu, tartan %s, created %s)\n", dir,
           in->format_version, (unsigned long long)in->generation, in->tartan_version,
           in->created);
    printf("documents    %llu", (unsigned long long)(in->num_docs - in->num_deleted));
    if (in->num_deleted)
        printf(" live, %llu deleted (kept until tartan compact)",
               (unsigned long long)in->num_deleted);
    printf("\nvectors      %llu (%.1f per document)\ndim          %u%s\n",
           (unsigned long long)in->num_vectors,
           (double)in->num_vectors / (double)in->num_docs, in->dim,
           in->normalized ? " (L2-normalised)" : " (raw)");
    printf("centroids    %u\n", in->num_centroids);
    if (in->codec_tables == TT_CODEC_ADAPTIVE) {
        printf("residuals    %u bits per dimension on average, adaptive widths:", in->nbits);
        const char *sep = " ";
        for (int w = 8; w >= 0; w--)
            if (in->dims_by_width[w]) {
                printf("%s%u dims at %d bit%s", sep, in->dims_by_width[w], w, w == 1 ? "" : "s");
                sep = ", ";
            }
        printf("\n");
    } else {
        printf("residuals    %u bits per dimension, %s bucket tables\n", in->nbits,
               in->codec_tables == TT_CODEC_PER_DIM ? "per-dimension" : "shared");
    }
    char tables[64] = "quantile tables";
    if (in->lloyd_max_rounds)
        snprintf(tables, sizeof tables, "tables refined by up to %d Lloyd-Max rounds",
                 in->lloyd_max_rounds);
    printf("             %s%s\n", tables,
           in->debias == TT_DEBIAS_TABLE    ? ", weights debiased"
           : in->debias == TT_DEBIAS_VECTOR ? ", one residual scale per vector (2 bytes)"
                                            : "");
    if (in->sketch_bytes)
        printf("sketch       %u bytes per vector (the 8-bit positions' codes) in RAM for "
               "PLAID's centroid stages\n", in->sketch_bytes);
    if (in->pool_global > 0)
        printf("pooling      one cut at height %.6g (asked: 1/%g of the vectors; tartan add "
               "cuts at it): %llu vectors before, %llu after (%.2fx fewer)\n",
               in->pool_threshold, in->pool_global, (unsigned long long)in->input_vectors,
               (unsigned long long)in->num_vectors,
               (double)in->input_vectors / (double)in->num_vectors);
    else if (in->pool_factor > 1 || in->input_vectors != in->num_vectors)
        printf("pooling      factor %u (tartan add's default): %llu vectors before, %llu after "
               "(%.2fx fewer)\n", in->pool_factor, (unsigned long long)in->input_vectors,
               (unsigned long long)in->num_vectors,
               (double)in->input_vectors / (double)in->num_vectors);
    else
        printf("pooling      none (factor 1)\n");
    tt_sparse_info spi;
    if (tt_index_sparse_info(idx, &spi) == TT_OK && spi.kind) {
        char h[32];
        printf("sparse       %s postings: %llu terms, %llu postings, %s (doc/search.md, "
               "\"Hybrid retrieval\")\n", spi.kind == TT_SPARSE_BM25 ? "BM25"
               : spi.kind == TT_SPARSE_TERM_IDS ? "weighted (integer term ids)" : "weighted",
               (unsigned long long)spi.terms, (unsigned long long)spi.postings,
               cli_human_bytes(spi.bytes, h, sizeof h));
    } else {
        printf("sparse       none\n");
    }
    printf("ids          %s\nencoder      %s\n", in->has_ids ? "external" : "row numbers",
           in->encoder[0] ? in->encoder : "(not described)");
    printf("\nbytes on disk\n");
    row("residuals", in->bytes_residuals, in->bytes_index);
    row("codes", in->bytes_codes, in->bytes_index);
    if (in->bytes_sketch)
        row("sketch", in->bytes_sketch, in->bytes_index);
    if (in->bytes_vscale)
        row("scales", in->bytes_vscale, in->bytes_index);
    row("ivf", in->bytes_ivf, in->bytes_index);
    row("centroids", in->bytes_centroids, in->bytes_index);
    row("doclens", in->bytes_doclens, in->bytes_index);
    row("ids", in->bytes_ids + in->bytes_idmap, in->bytes_index);
    if (in->bytes_tombs)
        row("deletions", in->bytes_tombs, in->bytes_index);
    row("codec", in->bytes_codec, in->bytes_index);
    row("meta", in->bytes_meta + in->bytes_manifest, in->bytes_index);
    if (in->bytes_sparse)
        row("sparse", in->bytes_sparse, in->bytes_index);
    if (in->bytes_metadata)
        row("metadata", in->bytes_metadata, in->bytes_index);
    if (in->bytes_tune)
        row("tune", in->bytes_tune, in->bytes_index);
    row("index", in->bytes_index, in->bytes_index);
    if (in->bytes_originals)
        printf("  %-12s %12s  (kept originals, float16; not counted above)\n", "originals",
               cli_human_bytes(in->bytes_originals, h1, sizeof h1));
    printf("\ncompression  %.3f bits per dimension; %.2fx smaller than float16 (%s), "
           "%.2fx than float32 (%s)\n",
           in->bits_per_dim, in->ratio_f16, cli_human_bytes(in->bytes_f16, h1, sizeof h1),
           in->ratio_f32, cli_human_bytes(in->bytes_f32, h2, sizeof h2));
    if (dense_bytes(in) != in->bytes_index)
        printf("             (of the dense part, %s: sparse postings, metadata and "
               "calibration not counted)\n", cli_human_bytes(dense_bytes(in), h3, sizeof h3));
    if (in->input_vectors != in->num_vectors)
        printf("             %.2fx smaller than the float16 vectors before pooling (%s)\n",
               (double)input_f16(in) / (double)dense_bytes(in),
               cli_human_bytes(input_f16(in), h1, sizeof h1));
    printf("search RAM   %s resident (everything but residuals%s); residuals are read per query\n",
           cli_human_bytes(in->resident_bytes, h3, sizeof h3),
           in->bytes_originals ? " and originals" : "");
    printf("\nbuild        seed %llu, sample factor %g, %llu training + %llu held-out vectors,\n"
           "             %u k-means iterations, %s assignment, %u threads, %.2f s,\n"
           "             held-out residual MSE %.3g\n",
           (unsigned long long)in->seed, in->sample_factor, (unsigned long long)in->train_vectors,
           (unsigned long long)in->heldout_vectors, in->kmeans_iters, assign_name(in->assign),
           in->threads, in->build_seconds, in->heldout_mse);
    printf("\nsegments     %u\n", in->num_segments);
    for (uint32_t i = 0; i < in->num_segments; i++) {
        tt_segment_info si;
        tt_index_segment_info(idx, i, &si);
        printf("  %-10s %9llu documents %10llu vectors  %s", si.id ? "" : "build",
               (unsigned long long)si.num_docs, (unsigned long long)si.num_vectors,
               cli_human_bytes(si.bytes, h1, sizeof h1));
        if (si.id)
            printf("  (generation %llu)", (unsigned long long)si.id);
        if (si.num_deleted)
            printf(", %llu deleted", (unsigned long long)si.num_deleted);
        if (si.added_vectors)
            printf(", residual MSE %.3g", si.added_mse);
        printf("\n");
    }
    tt_tune_info t;
    tt_index_tuned(idx, &t);
    if (t.tuned) {
        printf("search       calibrated on %u %s at %llu live documents (generation %llu), "
               "target recall %.2f:\n", t.num_queries, t.pseudo ? "pseudo-queries" : "queries",
               (unsigned long long)t.live_docs, (unsigned long long)t.generation, t.target);
        const tt_tuned *sets[4] = {&t.k10, &t.k100, &t.k10_short, &t.k100_short};
        for (int i = 0; i < (t.short_len ? 4 : 2); i++) {
            if (i == 2)
                printf("             queries of at most %u vectors (pseudo-queries of %u):\n",
                       2 * t.short_len, t.short_len);
            if (sets[i]->exhaustive)
                printf("             k<=%-3u exhaustive (%.3f ms per query; PLAID's best: "
                       "nprobe %d, ndocs %u, recall@%u %.3f, %.3f ms)\n", sets[i]->k,
                       sets[i]->exhaustive_ms, sets[i]->nprobe, sets[i]->ndocs, sets[i]->k,
                       sets[i]->recall, sets[i]->ms);
            else {
                char groups[48] = "";
                if (sets[i]->centroid_groups)
                    snprintf(groups, sizeof groups, ", centroid groups %u",
                             sets[i]->centroid_groups);
                char first[48];
                printf("             k<=%-3u nprobe %d, ndocs %u, prune ratio %.2f, rerank "
                       "margin %.0f%s%s: recall@%u %.3f%s%s\n", sets[i]->k, sets[i]->nprobe,
                       sets[i]->ndocs, (double)sets[i]->prune_ratio,
                       (double)sets[i]->rerank_margin, sets[i]->sketch ? "" : ", no sketch",
                       groups, sets[i]->k, sets[i]->recall,
                       cli_first_kept(sets[i], first, sizeof first),
                       sets[i]->reached ? "" : " (target not reached)");
            }
        }
        if (t.centroid_groups)
            printf("             the centroids in %u groups (doc/search.md, Centroid groups)\n",
                   t.centroid_groups);
    } else {
        printf("search       not calibrated: ColBERTv2's defaults by k (tartan tune)\n");
    }
    print_metadata(idx);
    if (in->added_vectors) {
        printf("drift        added vectors compress with residual MSE %.3g, %.2fx the build's "
               "%.3g\n", in->added_mse, in->drift, in->heldout_mse);
        if (in->retrain_advised)
            printf("             that is %.0f%% worse: consider tartan compact --retrain "
                   "(doc/format.md, \"Drift\")\n", 100.0 * (in->drift - 1));
    }
}

/* A sharded index: its shards, their documents and global rows (tartan info on a shard
 * describes it in full). */
static int info_sharded(const char *dir, int json) {
    tt_open_options o;
    tt_open_options_init(&o);
    o.io = TT_IO_MMAP;
    tt_sharded *sh;
    int st = tt_sharded_open(&sh, dir, &o, 0, 1);
    if (st)
        return cli_fail("info", st);
    const uint32_t n = tt_sharded_num_shards(sh);
    if (json) {
        printf("{\"index\": ");
        cli_json_string(stdout, dir);
        printf(", \"sharded\": true, \"num_shards\": %u, \"num_docs\": %llu, \"shards\": [", n,
               (unsigned long long)tt_sharded_num_docs(sh));
    } else {
        printf("index        %s (sharded: %u shards sharing one codebook; `tartan info "
               "%s/shard-0000` describes one)\ndocuments    %llu\n", dir, n, dir,
               (unsigned long long)tt_sharded_num_docs(sh));
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t num = 0;
        uint64_t first = 0;
        const tt_index *idx = tt_sharded_shard(sh, i, &num, &first);
        tt_index_info in;
        tt_index_get_info(idx, &in);
        if (json)
            printf("%s{\"name\": \"shard-%04u\", \"first_row\": %llu, \"num_docs\": %llu, "
                   "\"num_vectors\": %llu}", i ? ", " : "", num, (unsigned long long)first,
                   (unsigned long long)in.num_docs, (unsigned long long)in.num_vectors);
        else
            printf("shard-%04u   rows %llu..%llu: %llu documents, %llu vectors\n", num,
                   (unsigned long long)first, (unsigned long long)(first + in.num_docs - 1),
                   (unsigned long long)in.num_docs, (unsigned long long)in.num_vectors);
    }
    if (json)
        printf("]}\n");
    tt_sharded_close(sh);
    return CLI_OK;
}

int cmd_info(int argc, char **argv) {
    const char *dir = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: tartan info [--json] DIR\n\nCounts, dimensions, bytes by component, "
                   "bits per dimension, compression against\nfloat16/float32, the memory search "
                   "keeps resident, build parameters, encoder,\ntoken pooling (vectors before "
                   "and after), segments, drift and the search calibration.\n");
            return CLI_OK;
        } else if (argv[i][0] == '-' || dir) {
            return cli_usage_error("info", "unexpected argument '%s'", argv[i]);
        } else {
            dir = argv[i];
        }
    }
    if (!dir)
        return cli_usage_error("info", "expected an index directory");
    if (tt_index_is_sharded(dir))
        return info_sharded(dir, json);
    tt_open_options o;
    tt_open_options_init(&o);
    o.io = TT_IO_MMAP;
    tt_index *idx;
    int st = tt_index_open(&idx, dir, &o);
    if (st)
        return cli_fail("info", st);
    tt_index_info in;
    tt_index_get_info(idx, &in);
    if (json)
        print_json(dir, idx, &in);
    else
        print_text(dir, idx, &in);
    tt_index_close(idx);
    return CLI_OK;
}

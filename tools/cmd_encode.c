/* tartan encode: runs an external encoder (doc/encoder-protocol.md) over a BEIR
 * .jsonl or TSV file and writes .npy vectors + doclens + ids for tartan build/search. */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char *const CMD = "encode";

static void usage(FILE *f) {
    fprintf(f,
            "usage: tartan encode --encoder CMD --input FILE --mode passage|query --out PREFIX\n"
            "                     [options]\n"
            "\n"
            "Starts the encoder program CMD with '--mode passage|query' appended (split into\n"
            "words without a shell; quotes as in sh), streams the records of FILE to it and\n"
            "writes:\n"
            "  PREFIX.vectors.npy   float32 [total_vectors, dim], records in input order\n"
            "  PREFIX.doclens.npy   int64 [records]: vectors per record\n"
            "  PREFIX.ids.txt       record ids, one per line\n"
            "  PREFIX.encoder.txt   the encoder's self-description\n"
            "The files appear only when the whole run succeeded. Input: BEIR corpus.jsonl /\n"
            "queries.jsonl (_id, title, text; passages are title + \" \" + text) or TSV\n"
            "(id<TAB>text[<TAB>title]). The protocol is in doc/encoder-protocol.md.\n"
            "\n"
            "options:\n"
            "  -e, --encoder CMD          encoder command, e.g. 'tartan-hash-encoder --dim 128'\n"
            "  -i, --input FILE           records to encode\n"
            "  -m, --mode passage|query   what the records are\n"
            "  -o, --out PREFIX           output path prefix\n"
            "      --format jsonl|tsv     input format (default: by extension, else content)\n"
            "      --timeout S            kill the encoder after S seconds without progress\n"
            "                             (default 300)\n"
            "      --startup-timeout S    seconds allowed for loading its model (default 600)\n"
            "      --dim D                fail unless the encoder produces D-dim vectors\n"
            "  -f, --force                replace existing outputs\n"
            "  -v, --verbose              echo the encoder's stderr as it runs\n"
            "  -h, --help                 this help\n"
            "\n"
            "Example:\n"
            "  tartan encode --encoder 'tartan-hash-encoder --kind token' \\\n"
            "      --input scifact/corpus.jsonl --mode passage --out scifact-hash\n"
            "\n"
            "Exit status: 0 success, 1 error (the encoder's stderr tail is shown), 2 usage.\n");
}

static void echo_stderr(void *user, const char *data, size_t len) {
    (void)user;
    fwrite(data, 1, len, stderr);
}

static bool parse_seconds(const char *s, uint32_t *ms) {
    double v;
    if (!cli_parse_double(s, &v) || v <= 0 || v > 4e6)
        return false;
    *ms = (uint32_t)(v * 1000 + 0.5);
    if (*ms == 0)
        *ms = 1;
    return true;
}

int cmd_encode(int argc, char **argv) {
    enum { OPT_FORMAT = 256, OPT_TIMEOUT, OPT_STARTUP, OPT_DIM };
    static const struct option longopts[] = {
        {"encoder", required_argument, NULL, 'e'},
        {"input", required_argument, NULL, 'i'},
        {"mode", required_argument, NULL, 'm'},
        {"out", required_argument, NULL, 'o'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"startup-timeout", required_argument, NULL, OPT_STARTUP},
        {"dim", required_argument, NULL, OPT_DIM},
        {"force", no_argument, NULL, 'f'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *encoder = NULL, *input = NULL, *mode_arg = NULL, *out = NULL;
    tt_encoder_options opt;
    tt_encoder_options_init(&opt);
    bool verbose = false;
    uint64_t u;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":e:i:m:o:fvh", longopts, NULL)) != -1) {
        switch (c) {
        case 'e': encoder = optarg; break;
        case 'i': input = optarg; break;
        case 'm': mode_arg = optarg; break;
        case 'o': out = optarg; break;
        case 'f': opt.force = 1; break;
        case 'v': verbose = true; break;
        case OPT_FORMAT:
            if (!strcmp(optarg, "jsonl"))
                opt.input_format = TT_REC_JSONL;
            else if (!strcmp(optarg, "tsv"))
                opt.input_format = TT_REC_TSV;
            else
                return cli_usage_error(CMD, "--format: expected jsonl or tsv, got '%s'", optarg);
            break;
        case OPT_TIMEOUT:
            if (!parse_seconds(optarg, &opt.timeout_ms))
                return cli_usage_error(CMD, "--timeout: expected seconds > 0, got '%s'", optarg);
            break;
        case OPT_STARTUP:
            if (!parse_seconds(optarg, &opt.startup_timeout_ms))
                return cli_usage_error(CMD, "--startup-timeout: expected seconds > 0, got '%s'",
                                       optarg);
            break;
        case OPT_DIM:
            if (!cli_parse_u64(optarg, &u) || u == 0 || u > 65536)
                return cli_usage_error(CMD, "--dim: expected 1..65536, got '%s'", optarg);
            opt.expected_dim = (uint32_t)u;
            break;
        case 'h': usage(stdout); return CLI_OK;
        case ':': return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
        default: return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (!encoder || !input || !mode_arg || !out || !*out)
        return cli_usage_error(CMD, "--encoder, --input, --mode and --out are required");
    int mode;
    if (!strcmp(mode_arg, "passage"))
        mode = TT_ENC_PASSAGE;
    else if (!strcmp(mode_arg, "query"))
        mode = TT_ENC_QUERY;
    else
        return cli_usage_error(CMD, "--mode: expected passage or query, got '%s'", mode_arg);

    cli_progress_state ps;
    cli_progress_init(&ps);
    opt.progress = cli_progress;
    opt.progress_user = &ps;
    if (verbose)
        opt.stderr_fn = echo_stderr;
    /* An interrupt kills the encoder; the library removes its temporary files. */
    cli_signals_install(true);
    opt.cancel = (const volatile int *)&cli_cancel;
    tt_encode_stats stats;
    int st = tt_encode_to_npy(encoder, input, mode, out, &opt, &stats);
    cli_progress_done(&ps);
    cli_die_if_cancelled(CMD, st == TT_OK, "nothing was written");
    if (st) {
        cli_fail(CMD, st);
        if (!verbose)
            fprintf(stderr, "(--verbose echoes the encoder's whole stderr)\n");
        return CLI_FAIL;
    }
    double rate = stats.seconds > 0 ? (double)stats.records / stats.seconds : 0;
    printf("encoded %llu records into %llu vectors of dim %u (%.2f per record) in %.2f s "
           "(%.0f records/s)\n",
           (unsigned long long)stats.records, (unsigned long long)stats.vectors, stats.dim,
           stats.records ? (double)stats.vectors / (double)stats.records : 0.0, stats.seconds,
           rate);
    printf("encoder: %s\n", stats.description);
    printf("wrote %s.vectors.npy %s.doclens.npy %s.ids.txt %s.encoder.txt\n", out, out, out, out);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tartan encode: error: cannot write the output\n");
        return CLI_FAIL;
    }
    return CLI_OK;
}

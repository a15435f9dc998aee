/* tartan: command-line front end. Each command is a small file over the public API. */
#include "cli.h"

#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"build", cmd_build, "build a compressed index from vector files or an encoder"},
    {"add", cmd_add, "add documents to an index (a new segment; no retraining)"},
    {"delete", cmd_delete, "delete documents from an index by id"},
    {"compact", cmd_compact, "merge an index's segments, drop deleted documents"},
    {"reshard", cmd_reshard, "re-partition an index into S shards without re-encoding"},
    {"tune", cmd_tune, "calibrate search parameters on an index; store them in it"},
    {"info", cmd_info, "describe an index: counts, sizes, compression, parameters"},
    {"verify", cmd_verify, "re-check every checksum and invariant of an index"},
    {"search", cmd_search, "search an index with query vectors; write a TREC run"},
    {"eval", cmd_eval, "evaluate a run against qrels (MRR, nDCG, recall, MAP)"},
    {"report", cmd_report, "storage-vs-effectiveness report over index variants"},
    {"encode", cmd_encode, "run an encoder over a collection; write .npy vectors"},
    {"serve", cmd_serve, "serve searches, adds and deletes over HTTP/JSON"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: tartan <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'tartan <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        const char *core = cli_blas_core(), *better = cli_blas_better_core();
        printf("tartan %s (library %s)\n", TT_VERSION_STRING, tt_version_string());
        if (core)
            printf("OpenBLAS kernels: %s%s%s\n", core,
                   better ? "; this CPU can run " : "", better ? better : "");
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) {
            cli_blas_hint();
            return commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "tartan: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}

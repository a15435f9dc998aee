/* tartan compact: every segment merged into one, deleted documents dropped, the IVF
 * rebuilt; with --retrain, a new codebook first. */
#include "cli.h"

#include <getopt.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan compact --index DIR [--retrain] [--threads T] [--memory SIZE]\n"
        "\n"
        "Merges the index's segments into one and drops deleted documents, as the next\n"
        "generation; the documents keep their ids and their encoding (the result is what\n"
        "a build over them with this index's centroids and codec writes).\n"
        "\n"
        "  --index DIR     the index\n"
        "  --retrain       train new centroids and a new codec on a sample of the live\n"
        "                  documents (their kept originals, else their decompressed\n"
        "                  vectors) and re-encode them: when tartan info reports drift\n"
        "  --threads T     worker threads (default: all CPUs)\n"
        "  --memory SIZE   working-memory budget (default 2G)\n");
}

int cmd_compact(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},   {"retrain", no_argument, 0, 'r'},
        {"threads", required_argument, 0, 't'}, {"memory", required_argument, 0, 'm'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *index = NULL;
    tt_change_options o;
    tt_change_options_init(&o);
    int c, rc_arg;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'r': o.retrain = 1; break;
        case 't':
            if ((rc_arg = cli_threads_arg("compact", optarg, &o.threads)))
                return rc_arg;
            break;
        case 'm':
            if ((rc_arg = cli_memory_arg("compact", optarg, &o.memory_bytes)))
                return rc_arg;
            break;
        case 'h': usage(stdout); return CLI_OK;
        default: usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("compact", "unexpected argument '%s'", argv[optind]);
    if (!index || !*index)
        return cli_usage_error("compact", "--index is required");
    if (o.retrain) {
        tt_index *idx = NULL;
        tt_index_info info;
        if (tt_index_open(&idx, index, NULL) == TT_OK && tt_index_get_info(idx, &info) == TT_OK &&
            !info.keep_originals)
            fprintf(stderr, "tartan compact: warning: %s keeps no original vectors: the new "
                    "codebook is trained on, and every document re-encoded from, decompressed "
                    "vectors, which are then quantized a second time and lose effectiveness "
                    "(doc/benchmarks.md, \"Living index\"); a build from the original vectors "
                    "does not\n", index);
        tt_index_close(idx);
    }
    cli_signals_install(true);
    o.cancel = (const volatile int *)&cli_cancel;
    cli_progress_state ps;
    cli_progress_init(&ps);
    o.progress = cli_progress;
    o.progress_user = &ps;
    tt_change_stats cs;
    int st = tt_index_compact(index, &o, &cs);
    cli_progress_done(&ps);
    cli_die_if_cancelled("compact", st == TT_OK, "the index is as it was");
    if (st)
        return cli_fail("compact", st);
    printf("compacted %s%s in %.2f s: generation %llu, %llu documents in one segment (%llu "
           "deleted documents dropped)\n", index, o.retrain ? " with a new codebook" : "",
           cs.seconds, (unsigned long long)cs.generation, (unsigned long long)cs.live_docs,
           (unsigned long long)cs.deleted);
    return CLI_OK;
}

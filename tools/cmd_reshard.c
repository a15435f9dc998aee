/* tartan reshard: a sharded (or plain) index re-partitioned into S shards without
 * re-encoding (tt_index_reshard; doc/scale.md). */
#include "cli.h"

#include <getopt.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan reshard --index DIR --shards S --out NEW [--force] [--threads T]\n"
        "                      [--memory SIZE]\n"
        "\n"
        "Writes the live documents of DIR (a sharded index, or a plain one) as S shards\n"
        "of consecutive documents in NEW, with DIR's centroids and codec: codes and\n"
        "residuals are copied, not re-encoded. S = 1 writes a plain index. DIR is only\n"
        "read; NEW is published atomically, as tartan build publishes.\n"
        "\n"
        "  --index DIR     the source index\n"
        "  --shards S      shards of the new index (1..4096)\n"
        "  --out NEW       the new index (must not exist, unless --force)\n"
        "  --force         replace an existing index at NEW (only tartan's own files)\n"
        "  --threads T     worker threads (default: all CPUs)\n"
        "  --memory SIZE   working-memory budget (default 2G)\n");
}

int cmd_reshard(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'},   {"shards", required_argument, 0, 's'},
        {"out", required_argument, 0, 'o'},     {"force", no_argument, 0, 'f'},
        {"threads", required_argument, 0, 't'}, {"memory", required_argument, 0, 'm'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *index = NULL, *out = NULL;
    uint64_t shards = 0;
    tt_reshard_options o;
    tt_reshard_options_init(&o);
    int c, rc_arg;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'o': out = optarg; break;
        case 'f': o.force = 1; break;
        case 's':
            if (!cli_parse_u64(optarg, &shards) || shards < 1 || shards > 4096)
                return cli_usage_error("reshard", "--shards must be 1..4096");
            break;
        case 't':
            if ((rc_arg = cli_threads_arg("reshard", optarg, &o.threads)))
                return rc_arg;
            break;
        case 'm':
            if ((rc_arg = cli_memory_arg("reshard", optarg, &o.memory_bytes)))
                return rc_arg;
            break;
        case 'h': usage(stdout); return CLI_OK;
        default: usage(stderr); return CLI_USAGE;
        }
    }
    if (optind < argc)
        return cli_usage_error("reshard", "unexpected argument '%s'", argv[optind]);
    if (!index || !*index || !out || !*out || !shards)
        return cli_usage_error("reshard", "--index, --shards and --out are required");
    cli_signals_install(true);
    o.cancel = (const volatile int *)&cli_cancel;
    cli_progress_state ps;
    cli_progress_init(&ps);
    o.progress = cli_progress;
    o.progress_user = &ps;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = tt_index_reshard(index, (uint32_t)shards, out, &o);
    cli_progress_done(&ps);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cli_die_if_cancelled("reshard", st == TT_OK, "nothing was published");
    if (st)
        return cli_fail("reshard", st);
    printf("resharded %s into %llu shard%s at %s in %.2f s\n", index,
           (unsigned long long)shards, shards == 1 ? " (a plain index)" : "s", out,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return CLI_OK;
}

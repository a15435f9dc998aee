/* tartan delete: documents marked deleted, by id; nothing else of the index changes
 * until tartan compact. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: tartan delete --index DIR (--ids FILE | --id ID [--id ID...]) [--strict]\n"
        "\n"
        "Deletes documents by external id: search stops returning them at once (in\n"
        "searches that open the index from now on); their space is freed by tartan\n"
        "compact. No document is renumbered. The work grows with the ids given, not\n"
        "with the index.\n"
        "\n"
        "  --index DIR    the index\n"
        "  --ids FILE     ids to delete, one per line\n"
        "  --id ID        one id to delete (repeatable)\n"
        "  --strict       an id that is not in the index is an error (nothing is deleted);\n"
        "                 by default such ids are counted and reported\n");
}

int cmd_delete(int argc, char **argv) {
    static const struct option longopts[] = {
        {"index", required_argument, 0, 'x'}, {"ids", required_argument, 0, 'i'},
        {"id", required_argument, 0, 'd'},    {"strict", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *index = NULL, *file = NULL;
    tt_change_options o;
    tt_change_options_init(&o);
    char **ids = NULL;
    size_t n = 0, cap = 0;
    int c, rc = CLI_FAIL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x': index = optarg; break;
        case 'i': file = optarg; break;
        case 's': o.strict = 1; break;
        case 'd':
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 16;
                char **l = realloc(ids, nc * sizeof *l);
                if (!l)
                    goto oom;
                ids = l;
                cap = nc;
            }
            if (!(ids[n] = strdup(optarg)))
                goto oom;
            n++;
            break;
        case 'h': usage(stdout); rc = CLI_OK; goto done;
        default: usage(stderr); rc = CLI_USAGE; goto done;
        }
    }
    if (optind < argc) {
        rc = cli_usage_error("delete", "unexpected argument '%s'", argv[optind]);
        goto done;
    }
    if (!index || !*index || (!file && n == 0)) {
        rc = cli_usage_error("delete", "--index and --ids FILE or --id ID are required");
        goto done;
    }
    if (file && (rc = cli_read_lines("tartan delete", file, &ids, &n, &cap)) != CLI_OK)
        goto done;
    cli_signals_install(true);
    o.cancel = (const volatile int *)&cli_cancel;
    tt_change_stats cs;
    int st = tt_index_delete(index, (const char *const *)ids, n, &o, &cs);
    if (st) {
        rc = st == TT_ECANCELED ? CLI_FAIL : cli_fail("delete", st);
        goto done;
    }
    printf("deleted %llu documents from %s", (unsigned long long)cs.deleted, index);
    if (cs.unknown)
        printf(" (%llu of the ids are not in the index)", (unsigned long long)cs.unknown);
    printf(": generation %llu, %llu live documents in %llu segments\n",
           (unsigned long long)cs.generation, (unsigned long long)cs.live_docs,
           (unsigned long long)cs.segments);
    rc = CLI_OK;
    goto done;
oom:
    fprintf(stderr, "tartan delete: error: out of memory\n");
    rc = CLI_FAIL;
done:
    cli_free_ids(ids, n);
    cli_die_if_cancelled("delete", rc == CLI_OK, "nothing was deleted");
    return rc;
}

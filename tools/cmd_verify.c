/* tartan verify: re-check every checksum and structural invariant of an index. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

/* A sharded index: SHARDS and every shard against it (tt_sharded_open), then each shard
 * as an index of its own. */
static int verify_sharded(const char *dir) {
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = TT_IO_MMAP;
    tt_sharded *sh = NULL;
    int st = tt_sharded_open(&sh, dir, &oo, 0, 1);
    if (st)
        return cli_fail("verify", st);
    const uint32_t n = tt_sharded_num_shards(sh);
    for (uint32_t i = 0; i < n && !st; i++) {
        uint32_t num = 0;
        tt_sharded_shard(sh, i, &num, NULL);
        char *p = malloc(strlen(dir) + 32);
        if (!p) {
            fprintf(stderr, "tartan verify: out of memory\n");
            tt_sharded_close(sh);
            return CLI_FAIL;
        }
        sprintf(p, "%s/shard-%04u", dir, num);
        cli_progress_state ps;
        cli_progress_init(&ps);
        st = tt_index_verify(p, cli_progress, &ps);
        cli_progress_done(&ps);
        free(p);
    }
    tt_sharded_close(sh);
    if (st)
        return cli_fail("verify", st);
    printf("%s: OK (SHARDS and all %u shards: every checksum and invariant holds)\n", dir, n);
    return CLI_OK;
}

int cmd_verify(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: tartan verify DIR\n\nRe-reads every file of the index, checks headers, "
               "sizes and xxHash checksums against\nthe manifest, then every structural "
               "invariant. Exit 0 if intact, 1 with the damaged file named.\n");
        return CLI_OK;
    }
    if (argc != 2)
        return cli_usage_error("verify", "expected one index directory");
    if (tt_index_is_sharded(argv[1]))
        return verify_sharded(argv[1]);
    cli_progress_state ps;
    cli_progress_init(&ps);
    int st = tt_index_verify(argv[1], cli_progress, &ps);
    cli_progress_done(&ps);
    if (st)
        return cli_fail("verify", st);
    printf("%s: OK (all checksums and invariants hold)\n", argv[1]);
    return CLI_OK;
}

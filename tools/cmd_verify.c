/* tartan verify: re-check every checksum and structural invariant of an index. */
#include "cli.h"

#include <string.h>

int cmd_verify(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: tartan verify DIR\n\nRe-reads every file of the index, checks headers, "
               "sizes and xxHash checksums against\nthe manifest, then every structural "
               "invariant. Exit 0 if intact, 1 with the damaged file named.\n");
        return CLI_OK;
    }
    if (argc != 2)
        return cli_usage_error("verify", "expected one index directory");
    cli_progress_state ps;
    cli_progress_init(&ps);
    int st = tt_index_verify(argv[1], cli_progress, &ps);
    cli_progress_done(&ps);
    if (st)
        return cli_fail("verify", st);
    printf("%s: OK (all checksums and invariants hold)\n", argv[1]);
    return CLI_OK;
}

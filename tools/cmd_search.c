#include "cli.h"
int cmd_search(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan search: not available in this build\n");
    return CLI_FAIL;
}

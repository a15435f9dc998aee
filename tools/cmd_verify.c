#include "cli.h"
int cmd_verify(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan verify: not available in this build\n");
    return CLI_FAIL;
}

#include "cli.h"
int cmd_build(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan build: not available in this build\n");
    return CLI_FAIL;
}

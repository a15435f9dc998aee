#include "cli.h"
int cmd_encode(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan encode: not available in this build\n");
    return CLI_FAIL;
}

#include "cli.h"
int cmd_info(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan info: not available in this build\n");
    return CLI_FAIL;
}

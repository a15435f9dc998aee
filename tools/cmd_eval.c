#include "cli.h"
int cmd_eval(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan eval: not available in this build\n");
    return CLI_FAIL;
}

#include "cli.h"
int cmd_report(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "tartan report: not available in this build\n");
    return CLI_FAIL;
}

/* tartan-mpi build: not yet (see doc/scale.md). */
#include "mpi_common.h"

int mpi_cmd_build(int argc, char **argv) {
    (void)argc;
    (void)argv;
    if (mpi_rank == 0)
        fprintf(stderr, "tartan-mpi build: not implemented yet; build with tartan build --shards\n");
    return CLI_FAIL;
}

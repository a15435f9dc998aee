/* tartan-mpi build: `tartan build ... --shards S` by R ranks together
 * (tt_build_options.group): rank 0 checks and locks OUT and trains the codebook; rank r
 * reads and encodes the documents of shards r, r + R, ... (disjoint slices of the
 * input); rank 0 publishes once every rank succeeded. The sync points of the library
 * are an MPI_Allreduce of the ranks' statuses and an MPI_Bcast from rank 0. Every rank
 * needs the input files and OUT's parent on a file system they all see. */
#include "mpi_common.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned long long nsync;

static int mpi_sync(void *user, int status, void *buf, size_t bytes) {
    (void)user;
    /* Sync points 0 (OUT checked), 1 (codebook trained), 2 (every rank's shards
     * written) come before the publish; 3 follows it (not a point of failure). */
    int f = nsync < 3 ? mpi_fault("build", nsync) : 0;
    nsync++;
    if (f == 2)
        _exit(3); /* a crash: mpirun ends the job */
    if (f == 1) {
        fprintf(stderr, "tartan-mpi build: rank %d: error: injected failure (TARTAN_MPI_FAULT) "
                "at sync point %llu\n", mpi_rank, nsync - 1);
        if (!status)
            status = TT_EIO;
    }
    int mine = status != 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (bytes)
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    return any;
}

int mpi_cmd_build(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (mpi_rank == 0) {
                printf("usage: mpirun -n R tartan-mpi build --vectors V.npy --doclens L.npy "
                       "--out DIR --shards S [tartan build options]\n\n"
                       "A sharded index built by R ranks: rank 0 trains the codebook, rank r\n"
                       "encodes shards r, r+R, ...; rank 0 publishes DIR once every rank\n"
                       "succeeded (the same files as `tartan build --shards S`). Options as\n"
                       "tartan build (--encoder is not supported).\n");
            }
            return CLI_OK;
        }
    tt_build_group g = {.rank = (uint32_t)mpi_rank, .size = (uint32_t)mpi_size,
                        .sync = mpi_sync, .user = NULL};
    int rc = cmd_build_group(argc, argv, &g);
    if (rc != CLI_OK)
        fprintf(stderr, "tartan-mpi build: rank %d failed%s\n", mpi_rank,
                mpi_rank == 0 ? "; nothing was published" : "");
    return rc;
}

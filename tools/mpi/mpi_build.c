/* tartan-mpi build: `tartan build ... --shards S` by R ranks together
 * (tt_build_options.group): rank 0 checks and locks OUT; every rank reads its slice of
 * the training sample and k-means sums the ranks' partial sums with MPI_Allreduce
 * (mpi_reduce; the centroids of one process, bit for bit); rank 0 trains the codec; rank r
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

/* The library's reduce for distributed k-means: an in-place MPI_Allreduce of int64
 * words (sum or max), in pieces that fit an int count. */
static unsigned long long nreduce, reduce_words;
static double reduce_seconds;

static int mpi_reduce(void *user, int64_t *buf, size_t n, int op) {
    (void)user;
    mpi_fault("kmeans", nreduce); /* dies or is killed here when asked */
    double t0 = MPI_Wtime();
    nreduce++;
    reduce_words += n;
    const size_t piece = (size_t)1 << 26;
    for (size_t i = 0; i < n; i += piece) {
        int c = (int)(n - i < piece ? n - i : piece);
        if (MPI_Allreduce(MPI_IN_PLACE, buf + i, c, MPI_INT64_T,
                          op == TT_REDUCE_MAX ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            return -1;
    }
    reduce_seconds += MPI_Wtime() - t0;
    return 0;
}

int mpi_cmd_build(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            if (mpi_rank == 0) {
                printf("usage: mpirun -n R tartan-mpi build --vectors V.npy --doclens L.npy "
                       "--out DIR --shards S [tartan build options]\n\n"
                       "A sharded index built by R ranks: k-means runs on every rank (each\n"
                       "assigns its slice of the sample; MPI_Allreduce of the sums), rank r\n"
                       "encodes shards r, r+R, ...; rank 0 publishes DIR once every rank\n"
                       "succeeded (the same files as `tartan build --shards S`). Options as\n"
                       "tartan build (--encoder is not supported).\n");
            }
            return CLI_OK;
        }
    tt_build_group g = {.rank = (uint32_t)mpi_rank, .size = (uint32_t)mpi_size,
                        .sync = mpi_sync, .user = NULL, .reduce = mpi_reduce};
    double t0 = MPI_Wtime();
    int rc = cmd_build_group(argc, argv, &g);
    /* The training's share of the exchange: more than the two status agreements means
     * k-means ran on every rank (else rank 0 trained alone: a sample of under 20
     * documents). */
    if (rc == CLI_OK && mpi_rank == 0)
        fprintf(stderr, "tartan-mpi build: %s; %llu reduces (MPI_Allreduce) of %.1f MiB in "
                "all, %.3f s in them on rank 0; build %.3f s\n",
                nreduce > 2 ? "k-means distributed over every rank" : "k-means on rank 0 alone",
                nreduce, (double)reduce_words * 8.0 / 1048576.0, reduce_seconds,
                MPI_Wtime() - t0);
    if (rc != CLI_OK)
        fprintf(stderr, "tartan-mpi build: rank %d failed%s\n", mpi_rank,
                mpi_rank == 0 ? "; nothing was published" : "");
    return rc;
}

/* tartan-mpi: `mpirun -n R tartan-mpi search|build ...`. Every rank runs the same
 * command line; rank 0 writes what is published (the run, the index). */
#include "mpi_common.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int mpi_rank, mpi_size;

int mpi_fault(const char *what, uint64_t n) {
    const char *f = getenv("TARTAN_MPI_FAULT");
    if (!f)
        return 0;
    size_t wl = strlen(what);
    const char *kind = NULL;
    int res = 0;
    if (!strncmp(f, what, wl) && !strncmp(f + wl, "-error:", 7)) {
        kind = f + wl + 7;
        res = 1;
    } else if (!strncmp(f, what, wl) && !strncmp(f + wl, "-die:", 5)) {
        kind = f + wl + 5;
        res = 2;
    } else if (!strncmp(f, what, wl) && !strncmp(f + wl, "-kill:", 6)) {
        kind = f + wl + 6;
        res = 3;
    }
    if (!kind)
        return 0;
    char *e;
    unsigned long r = strtoul(kind, &e, 10);
    if (r != (unsigned long)mpi_rank)
        return 0;
    if (*e == ':' && strtoull(e + 1, NULL, 10) != n)
        return 0;
    if (res == 2)
        _exit(3);
    if (res == 3)
        raise(SIGKILL);
    return res;
}

_Noreturn void mpi_fail_all(int code) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code);
}

static void usage(FILE *f) {
    fprintf(f, "usage: mpirun -n R tartan-mpi search --index DIR --queries Q.npy --out RUN [options]\n"
               "       mpirun -n R tartan-mpi build --vectors V.npy --doclens L.npy --out DIR "
               "--shards S [options]\n"
               "\n"
               "Sharded search and build over MPI (doc/scale.md). Every rank runs the same\n"
               "command; `tartan-mpi search --help` and `tartan-mpi build --help` list the\n"
               "options.\n");
}

int main(int argc, char **argv) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    int rc;
    if (argc < 2) {
        if (mpi_rank == 0)
            usage(stderr);
        rc = CLI_USAGE;
    } else if (!strcmp(argv[1], "search")) {
        rc = mpi_cmd_search(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "build")) {
        rc = mpi_cmd_build(argc - 1, argv + 1);
    } else if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        if (mpi_rank == 0)
            usage(stdout);
        rc = CLI_OK;
    } else {
        if (mpi_rank == 0)
            fprintf(stderr, "tartan-mpi: unknown command '%s'\n", argv[1]);
        rc = CLI_USAGE;
    }
    MPI_Finalize();
    return rc;
}

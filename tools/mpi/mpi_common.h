/* tartan-mpi: the sharded build and search of tartan over MPI (doc/scale.md). A front
 * end like tools/: it uses only include/tartan.h (and tools/cli.h); the library knows
 * nothing of MPI. */
#ifndef TARTAN_MPI_COMMON_H
#define TARTAN_MPI_COMMON_H

#include "../cli.h"

#include <mpi.h>

extern int mpi_rank, mpi_size;

int mpi_cmd_search(int argc, char **argv);
int mpi_cmd_build(int argc, char **argv);

/* Fault injection for the tests, read here (never by the library): TARTAN_MPI_FAULT =
 * "WHAT:RANK:N" makes rank RANK, at step N of WHAT, fail: WHAT is search-error (the
 * rank reports an error for batch N), search-die (the rank exits at once before batch
 * N, as a crash would), build-error or build-die (N: at the library's sync point N),
 * kmeans-die or kmeans-kill (at the build's reduce N, i.e. mid-k-means: the rank exits
 * or is killed by SIGKILL, as the OOM killer would). WHAT-kill: also for search and
 * build. Dies (_exit(3), as a crash: mpirun ends the job) or kills itself (SIGKILL)
 * here; returns 1 (report an error) or 0. */
int mpi_fault(const char *what, uint64_t n);

/* Ends every rank after rank 0 reported a failure. */
_Noreturn void mpi_fail_all(int code);

#endif

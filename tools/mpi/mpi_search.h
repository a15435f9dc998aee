/* tartan-mpi search: what the dense search (mpi_search.c) and the sparse and hybrid
 * search (mpi_sparse.c) share: the parsed command line, message packing and the run's
 * publication. */
#ifndef TARTAN_MPI_SEARCH_H
#define TARTAN_MPI_SEARCH_H

#include "mpi_common.h"

/* What is retrieved: --mode plaid|exhaustive|exact (dense), sparse or hybrid. */
enum { MPI_DENSE = 0, MPI_SPARSE = 1, MPI_HYBRID = 2 };

typedef struct mpi_search_args {
    const char *index, *queries, *qlens, *qids, *out, *tag;
    const char *where, *filter_ids;
    uint64_t k, batch;
    int threads;
    tt_search_options so;
    tt_open_options oo;
    /* sparse and hybrid (as tartan search) */
    int retriever;
    const char *sparse_queries, *query_text, *vocab;
    tt_sparse_options spo;
    tt_fusion_options fo;
} mpi_search_args;

/* A growing message or run. */
typedef struct mpi_buf {
    char *p;
    size_t n, cap;
} mpi_buf;

double mpi_now(void);
/* Appends n bytes; -1 when out of memory. */
int mpi_put(mpi_buf *b, const void *x, size_t n);
/* Rank 0: one TREC run line (rank from 1, the score as float); out of memory ends
 * every rank (mpi_fail_all). */
void mpi_put_run_line(mpi_buf *lines, const char *qid, const char *id, size_t idlen,
                      uint32_t rank, float score, const char *tag);
/* Rank 0: the next message of rank r with tag (NUL-terminated after its len bytes;
 * free it); out of memory ends every rank. */
char *mpi_recv(int r, int tag, int *len);
/* A rank's reply to rank 0 for a batch of m queries, sent without waiting (*req): the
 * results packed into o (pe: the packing's status, -1 out of memory), or with st set,
 * the error (injected: TARTAN_MPI_FAULT's, else tt_last_error()). Out of memory ends
 * every rank. */
void mpi_reply(mpi_buf *o, int st, bool injected, uint32_t m, int pe, int tag,
               MPI_Request *req);
/* Rank 0: writes the lines to RUN aside and renames it; -1 (said) on failure. */
int mpi_write_run(const char *out, const mpi_buf *lines);

/* The filter of --where / --filter-ids over this rank's shards, at the global rows
 * (tools/shard_filter.c; its errors printed at once): TT_OK, or TT_EINVAL (said). Sets
 * a->so.filter and a->spo.filter. */
int mpi_open_filter(mpi_search_args *a, const tt_sharded *sh, cli_smeta **md,
                    tt_filter **filter, size_t *nids, uint64_t *found);
/* Rank 0 prints the filter's totals over every rank's shards (a collective: every rank
 * calls it when a filter was asked for). */
void mpi_filter_totals(const mpi_search_args *a, const tt_filter *filter, size_t nids,
                       uint64_t found);
/* After a failure somewhere (every rank calls it): each failing rank's message err,
 * in rank order. */
void mpi_say_errors(bool failed, const char *err);

/* --mode sparse|hybrid, after parsing: CLI_OK, CLI_FAIL. */
int mpi_search_sparse(mpi_search_args *a);

#endif

/* The first error of work spread over threads (tt_parallel): the first failure's status
 * and message are kept, and the other threads see `failed` and stop taking work. The
 * functions are in parallel.c. */
#ifndef TT_FIRST_ERR_H
#define TT_FIRST_ERR_H

#include "common/common.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct tt_first_err {
    atomic_int failed;
    pthread_mutex_t mu;          /* guards status and msg */
    int status;
    char msg[1024];
} tt_first_err;

void tt_first_err_init(tt_first_err *e);
/* Keeps st and tt_last_error(), prefixed "query Q: " (q = UINT64_MAX: no prefix), unless
 * an error is kept already; sets failed. */
void tt_first_err_set(tt_first_err *e, int st, uint64_t q);
static inline bool tt_first_err_failed(tt_first_err *e) { return atomic_load(&e->failed); }
/* Destroys e: TT_OK, or the kept status with its message made the thread's (tt_err). */
int tt_first_err_end(tt_first_err *e);

#endif

/* Threads: the clock, the CPU count, a fork-join helper, and BLAS's own threads. */
#include "common/common.h"
#include "common/first_err.h"

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

double tt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double tt_thread_cpu_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return tt_now();
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int tt_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)TT_MIN(n, 256);
}

typedef struct par_job {
    tt_parallel_fn fn;
    void *arg;
    int t, n;
} par_job;

static void *par_main(void *p) {
    par_job *j = (par_job *)p;
    j->fn(j->arg, j->t, j->n);
    return NULL;
}

int tt_parallel(int nthreads, tt_parallel_fn fn, void *arg) {
    if (nthreads <= 1) {
        fn(arg, 0, 1);
        return TT_OK;
    }
    pthread_t tid[256];
    par_job job[256];
    int started[256] = {0};
    int status = TT_OK;
    if (nthreads > 256)
        nthreads = 256;
    for (int t = 1; t < nthreads; t++) {
        job[t] = (par_job){fn, arg, t, nthreads};
        if (pthread_create(&tid[t], NULL, par_main, &job[t]) == 0)
            started[t] = 1;
    }
    fn(arg, 0, nthreads);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else
            fn(arg, t, nthreads); /* could not start a thread: do its share here */
    }
    return status;
}

/* OpenBLAS's thread control, if the BLAS linked is OpenBLAS (weak: others lack it). */
extern void openblas_set_num_threads(int) __attribute__((weak));

int tt_blas_set_threads(int n) {
    if (n < 1)
        return tt_err(TT_EINVAL, "tt_blas_set_threads: %d threads", n);
    if (!openblas_set_num_threads)
        return tt_err(TT_EUNSUPPORTED, "tt_blas_set_threads: the BLAS library has no thread "
                      "control");
    openblas_set_num_threads(n);
    return TT_OK;
}

void tt_first_err_init(tt_first_err *e) {
    atomic_init(&e->failed, 0);
    pthread_mutex_init(&e->mu, NULL);
    e->status = TT_OK;
    e->msg[0] = '\0';
}

void tt_first_err_set(tt_first_err *e, int st, uint64_t q) {
    pthread_mutex_lock(&e->mu);
    if (e->status == TT_OK) {
        e->status = st;
        if (q == UINT64_MAX)
            snprintf(e->msg, sizeof e->msg, "%s", tt_last_error());
        else
            snprintf(e->msg, sizeof e->msg, "query %llu: %s", (unsigned long long)q,
                     tt_last_error());
    }
    pthread_mutex_unlock(&e->mu);
    atomic_store(&e->failed, 1);
}

int tt_first_err_end(tt_first_err *e) {
    pthread_mutex_destroy(&e->mu);
    return e->status != TT_OK ? tt_err(e->status, "%s", e->msg) : TT_OK;
}

/* Small helpers shared by the benchmark programs (timing, sorting, random data). */
#ifndef TT_BENCHUTIL_H
#define TT_BENCHUTIL_H

#include "common/common.h"

#include <math.h>
#include <time.h>

/* Seconds of CPU time of the calling thread. */
static inline double bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Seconds of wall time (monotonic). */
static inline double bench_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort comparator for doubles, ascending. */
static inline int bench_dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A standard normal sample (Box-Muller). */
static inline float bench_gauss(tt_rng *r) {
    double u1 = tt_rng_uniform(r) + 1e-300, u2 = tt_rng_uniform(r);
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif

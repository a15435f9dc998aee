/* tartan serve: request counters and latency histograms per endpoint (lock-free
 * atomics, updated as each request completes); the Prometheus text rendering of them
 * is in api.c's /metrics handler. */
#include "serve.h"

#include <time.h>

/* Upper bounds of the latency buckets, seconds (Prometheus "le"). */
const double srv_lat_bounds[SRV_LAT_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                5,      10};

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void srv_metrics_observe(srv_metrics *m, int ep, int status, double seconds) {
    if (ep < 0 || ep >= SRV_EP_COUNT)
        ep = SRV_EP_NONE;
    int cls = status / 100;
    if (cls < 1 || cls > 5)
        cls = 5;
    atomic_fetch_add(&m->requests[ep][cls], 1);
    int b = 0;
    while (b < SRV_LAT_BUCKETS && seconds > srv_lat_bounds[b])
        b++;
    atomic_fetch_add(&m->lat_bucket[ep][b], 1); /* cumulated when rendered */
    atomic_fetch_add(&m->lat_sum_us[ep], (uint64_t)(seconds * 1e6));
}

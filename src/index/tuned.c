/* tune.tt: the calibrated search parameters of a generation (doc/format.md, "tune.tt";
 * doc/search.md, "Calibrated defaults"). Text, "key=value" lines like meta.tt, so that
 * a reader can see what was measured. src/tune/ measures and writes them; the index
 * reads them at open and search uses them (tt_search_options_resolve_index). */
#include "index/index.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sets' keys, in tt_tune_info's order (k10, k100, k10_short, k100_short). */
static const char *const SET_KEYS[4] = {"k10", "k100", "k10_short", "k100_short"};

/* " sketch 0" only when the calibration turned the sketch off: a set without it reads
 * as before sketches existed (on). */
static int fmt_set(char *buf, size_t cap, const tt_tuned *t) {
    return snprintf(buf, cap, "nprobe %d ndocs %u prune_ratio %.4f margin %.4f recall %.4f ms %.4f "
                    "reached %d%s", t->nprobe, t->ndocs, (double)t->prune_ratio,
                    (double)t->rerank_margin, t->recall, t->ms, t->reached,
                    t->sketch ? "" : " sketch 0");
}

/* The text without the centroid groups' line. */
static int format_sets(const tt_tune_info *t, char *buf, size_t cap) {
    char a[160], b[160];
    fmt_set(a, sizeof a, &t->k10);
    fmt_set(b, sizeof b, &t->k100);
    int n = snprintf(buf, cap,
                     "target=%.4f\nsource=%s\nnum_queries=%u\nquery_len=%u\nnoise=%.4f\n"
                     "seed=%llu\nlive_docs=%llu\ngeneration=%llu\ncost=%s\nk10=%s\nk100=%s\n",
                     t->target, t->pseudo ? "pseudo" : "queries", t->num_queries, t->query_len,
                     t->noise, (unsigned long long)t->seed, (unsigned long long)t->live_docs,
                     (unsigned long long)t->generation,
                     t->cost == TT_TUNE_COST_WORK ? "work" : "time", a, b);
    if (n >= 0 && (size_t)n < cap && t->short_len) {
        fmt_set(a, sizeof a, &t->k10_short);
        fmt_set(b, sizeof b, &t->k100_short);
        n += snprintf(buf + n, cap - (size_t)n, "short_len=%u\nk10_short=%s\nk100_short=%s\n",
                      t->short_len, a, b);
    }
    /* Exhaustive search chosen for a set, centroid groups, or the share of first
     * documents kept: their own keys, which a reader that predates them ignores (the
     * set's PLAID parameters then serve every search, scoring every centroid, as they
     * did). */
    const tt_tuned *sets[4] = {&t->k10, &t->k100, &t->k10_short, &t->k100_short};
    for (int i = 0; i < (t->short_len ? 4 : 2) && n >= 0 && (size_t)n < cap; i++) {
        if (sets[i]->first >= 0)
            n += snprintf(buf + n, cap - (size_t)n, "%s_first=%.4f\n", SET_KEYS[i],
                          sets[i]->first);
        if (sets[i]->exhaustive && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "%s_exhaustive=%.4f\n", SET_KEYS[i],
                          sets[i]->exhaustive_ms);
        if (t->centroid_groups && sets[i]->centroid_groups && n >= 0 && (size_t)n < cap)
            n += snprintf(buf + n, cap - (size_t)n, "%s_groups=%u\n", SET_KEYS[i],
                          sets[i]->centroid_groups);
    }
    if (n >= 0 && (size_t)n < cap && t->centroid_groups)
        n += snprintf(buf + n, cap - (size_t)n, "centroid_groups=%u\n", t->centroid_groups);
    if (n < 0 || (size_t)n >= cap)
        return tt_err(TT_ENOMEM, "tune.tt: the text does not fit in %zu bytes", cap);
    return n;
}

int tt_tune_format(const tt_tune_info *t, const uint32_t *group_of, uint32_t K, char **out,
                   size_t *len) {
    *out = NULL;
    *len = 0;
    if (t->centroid_groups && !group_of)
        return tt_err(TT_EINVAL, "tune.tt: centroid groups without their members");
    /* the group of every centroid: at most 10 digits and a separator each */
    const size_t cap = 2048 + (t->centroid_groups ? 32 + 11 * (size_t)K : 0);
    char *buf = tt_alloc(cap, 1, "tune.tt");
    if (!buf)
        return TT_ENOMEM;
    int n = format_sets(t, buf, cap);
    if (n < 0) {
        free(buf);
        return n;
    }
    size_t at = (size_t)n;
    if (t->centroid_groups) {
        at += (size_t)snprintf(buf + at, cap - at, "centroid_group_of=");
        for (uint32_t k = 0; k < K; k++)
            at += (size_t)snprintf(buf + at, cap - at, k ? " %u" : "%u", group_of[k]);
        buf[at++] = '\n';
        buf[at] = '\0'; /* text: the caller may read it as a string */
    }
    *out = buf;
    *len = at;
    return TT_OK;
}

static int bad(const char *path, const char *key) {
    return tt_err(TT_ECORRUPT, "%s: missing or bad value for '%s'", path, key);
}

static bool get_u64(const tt_fmap *m, const char *key, uint64_t *out) {
    char v[64], *e;
    if (!tt_meta_get(m, key, v, sizeof v))
        return false;
    errno = 0;
    unsigned long long x = strtoull(v, &e, 10);
    if (errno || e == v || *e)
        return false;
    *out = x;
    return true;
}

static bool get_double(const tt_fmap *m, const char *key, double lo, double hi, double *out) {
    char v[64], *e;
    if (!tt_meta_get(m, key, v, sizeof v))
        return false;
    double x = strtod(v, &e);
    if (e == v || *e || !(x >= lo && x <= hi))
        return false;
    *out = x;
    return true;
}

/* "nprobe N ndocs N prune_ratio F margin F recall F ms F reached 0|1[ sketch 0|1]" */
static bool get_set(const tt_fmap *m, const char *key, uint32_t k, uint32_t num_centroids,
                    tt_tuned *t) {
    char v[320];
    if (!tt_meta_get(m, key, v, sizeof v))
        return false;
    int np, reached, used = 0;
    unsigned nd;
    double ratio, margin, recall, ms;
    if (sscanf(v, "nprobe %d ndocs %u prune_ratio %lf margin %lf recall %lf ms %lf reached %d%n",
               &np, &nd, &ratio, &margin, &recall, &ms, &reached, &used) != 7)
        return false;
    int sketch = 1, more = 0;
    if (v[used] != '\0' &&
        (sscanf(v + used, " sketch %d%n", &sketch, &more) != 1 || v[used + more] != '\0' ||
         (sketch != 0 && sketch != 1)))
        return false;
    if (np < 1 || (uint32_t)np > num_centroids || nd < 1 || !(ratio >= 0 && ratio <= 1) ||
        !(margin >= 0 && margin <= 1e3) ||
        !(recall >= 0 && recall <= 1) || !(ms >= 0 && ms < 1e9) || (reached != 0 && reached != 1))
        return false;
    t->k = k;
    t->nprobe = np;
    t->ndocs = nd;
    t->prune_ratio = (float)ratio;
    t->rerank_margin = (float)margin;
    t->recall = recall;
    t->ms = ms;
    t->reached = reached;
    t->sketch = sketch;
    t->first = -1; /* unless its own key follows */
    return true;
}

/* centroid_group_of: num_centroids decimal group ids below G, separated by single
 * spaces, read in place from the mapped text (no copy of a line of K numbers). */
static bool get_groups(const tt_fmap *m, uint32_t num_centroids, uint32_t G, uint32_t *out) {
    const char *key = "centroid_group_of=";
    const size_t kl = strlen(key);
    const char *p = (const char *)m->payload, *end = p + m->h.payload_bytes;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > kl && !memcmp(p, key, kl)) {
            p += kl;
            for (uint32_t k = 0; k < num_centroids; k++) {
                if (k && (p >= le || *p++ != ' '))
                    return false;
                uint64_t x = 0;
                const char *d0 = p;
                while (p < le && *p >= '0' && *p <= '9' && p - d0 < 10)
                    x = 10 * x + (uint64_t)(*p++ - '0');
                if (p == d0 || x >= G)
                    return false;
                out[k] = (uint32_t)x;
            }
            return p == le;
        }
        p = le + 1;
    }
    return false;
}

int tt_tune_parse(const tt_fmap *m, uint32_t num_centroids, tt_tune_info *t,
                  uint32_t **group_of) {
    memset(t, 0, sizeof *t);
    *group_of = NULL;
    char v[32];
    uint64_t x;
    if (!get_double(m, "target", 0, 1, &t->target))
        return bad(m->path, "target");
    if (!tt_meta_get(m, "source", v, sizeof v) ||
        (strcmp(v, "pseudo") != 0 && strcmp(v, "queries") != 0))
        return bad(m->path, "source");
    t->pseudo = !strcmp(v, "pseudo");
    if (!get_u64(m, "num_queries", &x) || x == 0 || x > UINT32_MAX)
        return bad(m->path, "num_queries");
    t->num_queries = (uint32_t)x;
    if (!get_u64(m, "query_len", &x) || x > UINT32_MAX)
        return bad(m->path, "query_len");
    t->query_len = (uint32_t)x;
    if (!get_double(m, "noise", 0, 100, &t->noise))
        return bad(m->path, "noise");
    if (!get_u64(m, "seed", &t->seed))
        return bad(m->path, "seed");
    if (!get_u64(m, "live_docs", &t->live_docs))
        return bad(m->path, "live_docs");
    if (!get_u64(m, "generation", &t->generation))
        return bad(m->path, "generation");
    if (!tt_meta_get(m, "cost", v, sizeof v) || (strcmp(v, "time") != 0 && strcmp(v, "work") != 0))
        return bad(m->path, "cost");
    t->cost = !strcmp(v, "work") ? TT_TUNE_COST_WORK : TT_TUNE_COST_TIME;
    if (!get_set(m, "k10", 10, num_centroids, &t->k10))
        return bad(m->path, "k10");
    if (!get_set(m, "k100", 100, num_centroids, &t->k100))
        return bad(m->path, "k100");
    t->k10_short.first = t->k100_short.first = -1;
    /* optional (written since the short-query sets): short_len with both of its sets */
    if (tt_meta_get(m, "short_len", v, sizeof v)) {
        if (!get_u64(m, "short_len", &x) || x == 0 || x > 1024)
            return bad(m->path, "short_len");
        t->short_len = (uint32_t)x;
        if (!get_set(m, "k10_short", 10, num_centroids, &t->k10_short))
            return bad(m->path, "k10_short");
        if (!get_set(m, "k100_short", 100, num_centroids, &t->k100_short))
            return bad(m->path, "k100_short");
    }
    /* optional: `<set>_exhaustive=<ms>`, exhaustive search chosen for that set, and
     * `<set>_first=<share>`, the share of exhaustive search's first documents it kept */
    tt_tuned *sets[4] = {&t->k10, &t->k100, &t->k10_short, &t->k100_short};
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_first", SET_KEYS[i]);
        if (tt_meta_get(m, key, v, sizeof v) &&
            ((i >= 2 && !t->short_len) || !get_double(m, key, 0, 1, &sets[i]->first)))
            return bad(m->path, key);
        snprintf(key, sizeof key, "%s_exhaustive", SET_KEYS[i]);
        if (!tt_meta_get(m, key, v, sizeof v))
            continue;
        if ((i >= 2 && !t->short_len) || !get_double(m, key, 0, 1e9, &sets[i]->exhaustive_ms))
            return bad(m->path, key);
        sets[i]->exhaustive = 1;
    }
    /* optional: centroid groups (their count, every centroid's group, and each set's
     * groups per query vector) */
    if (tt_meta_get(m, "centroid_groups", v, sizeof v)) {
        if (!get_u64(m, "centroid_groups", &x) || x == 0 || x > num_centroids)
            return bad(m->path, "centroid_groups");
        t->centroid_groups = (uint32_t)x;
        if (!(*group_of = tt_alloc(num_centroids, sizeof **group_of, "tune.tt")))
            return TT_ENOMEM;
        if (!get_groups(m, num_centroids, t->centroid_groups, *group_of)) {
            free(*group_of);
            *group_of = NULL;
            return bad(m->path, "centroid_group_of");
        }
    }
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_groups", SET_KEYS[i]);
        if (!tt_meta_get(m, key, v, sizeof v))
            continue;
        if ((i >= 2 && !t->short_len) || !t->centroid_groups || !get_u64(m, key, &x) ||
            x == 0 || x > t->centroid_groups) {
            free(*group_of);
            *group_of = NULL;
            return bad(m->path, key);
        }
        sets[i]->centroid_groups = (uint32_t)x;
    }
    t->tuned = 1;
    return TT_OK;
}

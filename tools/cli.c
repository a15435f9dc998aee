/* Shared helpers of the command-line tool: errors, option values, progress. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

unsigned cli_umask(void) {
    mode_t m = umask(0);
    umask(m);
    return (unsigned)m;
}

int cli_fail(const char *cmd, int status) {
    const char *msg = tt_last_error();
    fprintf(stderr, "tartan %s: error: %s\n", cmd, (msg && *msg) ? msg : tt_strerror(status));
    return CLI_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "tartan %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(see 'tartan %s --help')\n", cmd);
    return CLI_USAGE;
}

bool cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || !isdigit((unsigned char)*s))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

bool cli_parse_double(const char *s, double *out) {
    if (!s || !*s)
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v))
        return false;
    *out = v;
    return true;
}

int cli_threads_arg(const char *cmd, const char *arg, int *out) {
    uint64_t u;
    if (!cli_parse_u64(arg, &u) || u > 1024)
        return cli_usage_error(cmd, "--threads must be 0..1024 (got '%s')", arg);
    *out = (int)u;
    return CLI_OK;
}

int cli_pool_factor_arg(const char *cmd, const char *arg, int *out) {
    uint64_t u;
    if (!cli_parse_u64(arg, &u) || u == 0 || u > INT32_MAX)
        return cli_usage_error(cmd, "--pool-factor must be a whole number >= 1 (1: no "
                               "pooling; got '%s')", arg);
    *out = (int)u;
    return CLI_OK;
}

int cli_memory_arg(const char *cmd, const char *arg, uint64_t *out) {
    if (!cli_parse_size(arg, out))
        return cli_usage_error(cmd, "--memory: bad size '%s'", arg);
    if (*out < (64ull << 20))
        return cli_usage_error(cmd, "--memory must be at least 64M (got %s)", arg);
    return CLI_OK;
}

bool cli_parse_size(const char *s, uint64_t *out) {
    if (!s || !*s)
        return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return false;
    double mul = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mul = 1024.0; end++; break;
    case 'M': mul = 1024.0 * 1024; end++; break;
    case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: return false;
    }
    if (*end == 'i' || *end == 'I')
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end)
        return false;
    double bytes = v * mul;
    if (bytes > 1.8e19)
        return false;
    *out = (uint64_t)bytes;
    return true;
}

char **cli_split_commas(const char *s, size_t *n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    char **list = calloc(cap + 1, sizeof *list);
    if (!list)
        return NULL;
    size_t k = 0;
    const char *start = s;
    for (;;) {
        const char *comma = strchr(start, ',');
        size_t len = comma ? (size_t)(comma - start) : strlen(start);
        if (len) {
            list[k] = strndup(start, len);
            if (!list[k]) {
                cli_free_list(list);
                return NULL;
            }
            k++;
        }
        if (!comma)
            break;
        start = comma + 1;
    }
    *n = k;
    return list;
}

void cli_free_list(char **list) {
    if (!list)
        return;
    for (char **p = list; *p; p++)
        free(*p);
    free(list);
}

const char *cli_first_kept(const tt_tuned *t, char *buf, size_t len) {
    if (t->first >= 0)
        snprintf(buf, len, ", first kept %.3f", t->first);
    else if (len)
        buf[0] = '\0';
    return buf;
}

const char *cli_exhaustive_why(const tt_tuned *t) {
    return t->reached ? "is cheaper" : "ranks exactly where no PLAID set reached the target";
}

const char *cli_human_bytes(uint64_t bytes, char *buf, size_t len) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

static double mono_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress_state *s) {
    memset(s, 0, sizeof *s);
    s->tty = isatty(STDERR_FILENO) == 1;
    s->start = mono_now();
}

void cli_progress(void *user, const char *phase, uint64_t done, uint64_t total) {
    cli_progress_state *s = user;
    if (!s || !s->tty)
        return;
    double now = mono_now();
    bool new_phase = strncmp(s->phase, phase, sizeof s->phase - 1) != 0;
    if (!new_phase && now - s->last < 0.1 && done != total)
        return;
    s->last = now;
    snprintf(s->phase, sizeof s->phase, "%s", phase);
    if (total)
        fprintf(stderr, "\r\033[K%-10s %5.1f%%  %llu/%llu  %.1fs", phase, 100.0 * (double)done / (double)total,
                (unsigned long long)done, (unsigned long long)total, now - s->start);
    else
        fprintf(stderr, "\r\033[K%-10s %llu  %.1fs", phase, (unsigned long long)done, now - s->start);
    fflush(stderr);
}

void cli_progress_done(cli_progress_state *s) {
    if (s && s->tty) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

void cli_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

int cli_read_lines(const char *who, const char *path, char ***list, size_t *n, size_t *cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: error: %s: %s\n", who, path, strerror(errno));
        return CLI_FAIL;
    }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int rc = CLI_OK;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        if (*n == *cap) {
            size_t nc = *cap ? 2 * *cap : 1024;
            char **l = realloc(*list, nc * sizeof *l);
            if (!l) {
                rc = CLI_FAIL;
                break;
            }
            *list = l;
            *cap = nc;
        }
        if (!((*list)[*n] = strdup(line))) {
            rc = CLI_FAIL;
            break;
        }
        (*n)++;
    }
    if (rc == CLI_OK && ferror(f)) {
        fprintf(stderr, "%s: error: %s: %s\n", who, path, strerror(errno));
        rc = CLI_FAIL;
    } else if (rc != CLI_OK) {
        fprintf(stderr, "%s: error: out of memory reading %s\n", who, path);
    }
    free(line);
    fclose(f);
    return rc;
}

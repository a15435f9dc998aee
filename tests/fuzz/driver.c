/* Replays fuzz inputs through a target's entry point without libFuzzer:
 *   replay-TARGET FILE_OR_DIR...
 * Every regular file (directories: their files, in name order) is one input. Built by
 * `make check` with the ordinary compiler flags (and under --enable-sanitizers with
 * ASan + UBSan), so the seed corpora and every crash ever found stay regression
 * tests. Exits 0 after the last input; a bug shows as a sanitizer report or a crash. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static unsigned long ninputs;

static int run_file(const char *path) {
    size_t n = 0;
    uint8_t *data = fz_read(path, &n);
    if (!data) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        return 1;
    }
    if (getenv("TT_REPLAY_VERBOSE"))
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(data, n);
    free(data);
    ninputs++;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: cannot open %s\n", dir);
        return 1;
    }
    size_t n = 0, cap = 64;
    char **names = malloc(cap * sizeof *names);
    struct dirent *de;
    while (names && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **nn = realloc(names, (cap *= 2) * sizeof *names);
            if (!nn)
                break;
            names = nn;
        }
        names[n++] = strdup(de->d_name);
    }
    closedir(d);
    if (!names)
        return 1;
    qsort(names, n, sizeof *names, by_name);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            rc |= run_file(p);
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s does not exist\n", argv[i]);
            rc = 1;
        } else if (S_ISDIR(sb.st_mode)) {
            rc |= run_dir(argv[i]);
        } else {
            rc |= run_file(argv[i]);
        }
    }
    printf("replayed %lu inputs\n", ninputs);
    return rc;
}

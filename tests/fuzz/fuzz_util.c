/* Scratch-file helpers shared by the fuzz targets (see fuzz.h). */
#include "fuzz.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char scratch[256];

static void cleanup(void) {
    if (scratch[0])
        fz_rmdir(scratch);
}

void fz_rmdir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        struct stat sb;
        if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            fz_rmdir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

int fz_count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

const char *fz_dir(void) {
    if (scratch[0])
        return scratch;
    struct stat sb;
    bool shm = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0;
    const char *base = shm ? "/dev/shm" : "/tmp";
    snprintf(scratch, sizeof scratch, "%s/tartan-fuzz-XXXXXX", base);
    if (!mkdtemp(scratch)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(cleanup);
    return scratch;
}

const char *fz_write(const char *name, const void *data, size_t size) {
    static char paths[8][512];
    static char names[8][64];
    int slot = -1;
    for (int i = 0; i < 8 && slot < 0; i++)
        if (!strcmp(names[i], name) || !names[i][0])
            slot = i;
    if (slot < 0)
        abort();
    snprintf(names[slot], sizeof names[slot], "%s", name);
    snprintf(paths[slot], sizeof paths[slot], "%s/%s", fz_dir(), name);
    FILE *f = fopen(paths[slot], "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(paths[slot]);
        abort();
    }
    return paths[slot];
}

uint8_t *fz_read(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *b = malloc(cap);
    for (;;) {
        if (!b)
            break;
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        uint8_t *nb = realloc(b, cap *= 2);
        if (!nb) {
            free(b);
            b = NULL;
        } else {
            b = nb;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(b);
        return NULL;
    }
    *size = n;
    return b;
}

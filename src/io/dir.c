/* Directories: paths, fsync, and removal of what tartan wrote. */
#include "io/dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

char *tt_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) {
        tt_err(TT_ENOMEM, "path %s/%s: out of memory", dir, name);
        return NULL;
    }
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

int tt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open directory", dir);
    int st = TT_OK;
    if (fsync(fd) != 0)
        st = tt_err_errno(TT_EIO, errno, "%s: fsync of directory failed", dir);
    close(fd);
    return st;
}

int tt_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? TT_OK : tt_err_errno(TT_EIO, errno, "%s: cannot open", dir);
    struct dirent *de;
    int st = TT_OK;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = tt_path_join(dir, de->d_name);
        if (!p) {
            st = TT_ENOMEM;
            break;
        }
        if (unlink(p) != 0 && st == TT_OK)
            st = tt_err_errno(TT_EIO, errno, "%s: cannot remove", p);
        free(p);
    }
    closedir(d);
    if (rmdir(dir) != 0 && st == TT_OK)
        st = tt_err_errno(TT_EIO, errno, "%s: cannot remove directory", dir);
    return st;
}

/* Index build, publishing: the finished temporary directory moved into place. */
#include "index/build.h"

#include "io/dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/fs.h>
#include <sys/syscall.h>
#endif

bool tt_build_is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static char *parent_dir(const char *path) {
    char *p = strdup(path);
    if (!p)
        return NULL;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    char *slash = strrchr(p, '/');
    if (!slash) {
        strcpy(p, ".");
    } else if (slash == p) {
        p[1] = '\0';
    } else {
        *slash = '\0';
    }
    return p;
}

/* Moves the finished temporary directory into place. With an index already at out,
 * the two directories are exchanged atomically (renameat2 RENAME_EXCHANGE) and the
 * old one removed, so at every instant `out` holds a complete index. */
int tt_build_publish(builder *b) {
    int st;
    char *parent = parent_dir(b->out);
    if (!parent)
        return tt_err(TT_ENOMEM, "%s: out of memory", b->out);
    if (!tt_build_is_dir(b->out)) {
        if (rename(b->tmp, b->out) != 0) {
            st = tt_err_errno(TT_EIO, errno, "%s: cannot publish the index", b->out);
            goto done;
        }
    } else {
        bool swapped = false;
#if defined(__linux__) && defined(SYS_renameat2) && defined(RENAME_EXCHANGE)
        swapped = syscall(SYS_renameat2, AT_FDCWD, b->tmp, AT_FDCWD, b->out, RENAME_EXCHANGE) == 0;
#endif
        if (!swapped) { /* two renames: a crash between them leaves no index, never a mix */
            size_t n = strlen(b->tmp) + 8;
            char *old = malloc(n);
            if (!old) {
                st = tt_err(TT_ENOMEM, "%s: out of memory", b->out);
                goto done;
            }
            snprintf(old, n, "%s.old", b->tmp);
            if (rename(b->out, old) != 0) {
                st = tt_err_errno(TT_EIO, errno, "%s: cannot move the old index aside", b->out);
                free(old);
                goto done;
            }
            if (rename(b->tmp, b->out) != 0) {
                st = tt_err_errno(TT_EIO, errno, "%s: cannot publish the index", b->out);
                if (rename(old, b->out) != 0) { /* put the old index back */
                }
                free(old);
                goto done;
            }
            tt_remove_dir(old);
            free(old);
        } else {
            tt_remove_dir(b->tmp); /* now holds the previous index */
        }
    }
    free(b->tmp);
    b->tmp = NULL; /* nothing left to clean up */
    st = tt_fsync_dir(parent);
done:
    free(parent);
    return st;
}

/* An existing directory may be replaced only if it is a tartan index (has a
 * MANIFEST) or empty: --force must never delete unrelated data. */
int tt_build_check_replaceable(const char *out) {
    char *m = tt_path_join(out, TT_F_MANIFEST);
    if (!m)
        return TT_ENOMEM;
    struct stat sb;
    int st = TT_OK;
    if (stat(m, &sb) != 0 && rmdir(out) != 0 && errno != ENOENT)
        st = tt_err(TT_EEXIST, "%s: exists and is not a tartan index; refusing to replace it",
                    out);
    free(m);
    return st;
}

/* A build killed by SIGKILL cannot remove its directory OUT.tmp-PID-RANDOM. The next
 * build into OUT removes those whose process no longer exists (kill(pid, 0) fails with
 * ESRCH); a live pid, or one this process may not signal, is left alone, so builds
 * running beside this one keep theirs. Best effort: a directory that cannot be removed
 * stays (and the error is not this build's). Caveat: pids are per host and per pid
 * namespace, so builds into one shared directory from several hosts or containers must
 * not race. */
void tt_build_remove_stale(const char *out_dir, size_t n) {
    char *copy = strndup(out_dir, n);
    if (!copy)
        return;
    char *slash = strrchr(copy, '/');
    const char *parent = ".", *base = copy;
    if (slash) {
        base = slash + 1;
        *slash = 0;
        parent = slash == copy ? "/" : copy;
    }
    DIR *d = opendir(parent);
    if (!d) {
        free(copy);
        return;
    }
    const size_t bl = strlen(base);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (strncmp(nm, base, bl) != 0 || strncmp(nm + bl, ".tmp-", 5) != 0)
            continue;
        const char *num = nm + bl + 5;
        char *end;
        errno = 0;
        long pid = strtol(num, &end, 10);
        if (end == num || *end != '-' || errno || pid <= 0 || pid == (long)getpid() ||
            strlen(end + 1) != 6 || strspn(end + 1, "0123456789abcdef") != 6)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char *p = tt_path_join(parent, nm);
        if (p)
            (void)tt_remove_dir(p);
        free(p);
    }
    closedir(d);
    free(copy);
}

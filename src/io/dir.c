/* Directories: output paths, locks, publication and removal of what tartan wrote
 * (the rules are in io/dir.h). Every removal is relative to an open directory
 * descriptor with AT_SYMLINK_NOFOLLOW checks, so a symbolic link planted anywhere
 * tartan cleans up is left alone rather than followed. */
#include "io/dir.h"
#include "io/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
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

int tt_fsync_dirfd(int dfd, const char *what) {
    if (fsync(dfd) != 0)
        return tt_err_errno(TT_EIO, errno, "%s: fsync of directory failed", what);
    return TT_OK;
}

int tt_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open directory", dir);
    int st = tt_fsync_dirfd(fd, dir);
    close(fd);
    return st;
}

DIR *tt_dir_list(int dfd) {
    int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0)
        close(fd);
    return d;
}

/* Index files are "<kind>.tt" (a build's segment and the shared files) or
 * "g<generation>.<kind>.tt" (written by a later generation: an add, a delete, a
 * compaction), plus MANIFEST, its temporary and LOCK. */
static const char *const index_kinds[] = {"meta", "centroids", "codec", "doclens", "codes",
                                          "residuals", "ivf", "ids", "idmap", "originals",
                                          "tombs", "inlens", "tune", "sparse", "metadata",
                                          "sketch", "vocab", "vscale"};

bool tt_is_index_file(const char *name) {
    if (!strcmp(name, "MANIFEST") || !strcmp(name, "MANIFEST.tmp") || !strcmp(name, "LOCK"))
        return true;
    const char *p = name;
    if (p[0] == 'g' && p[1] >= '0' && p[1] <= '9') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
        if (*p++ != '.')
            return false;
    }
    size_t n = strlen(p);
    if (n < 4 || strcmp(p + n - 3, ".tt"))
        return false;
    for (size_t i = 0; i < sizeof index_kinds / sizeof index_kinds[0]; i++)
        if (strlen(index_kinds[i]) == n - 3 && !memcmp(p, index_kinds[i], n - 3))
            return true;
    return false;
}

/* ------------------------------------------------------------ output paths */

/* Splits p (trailing slashes already removed) into a malloc'd parent and base. */
static int split_path(const char *p, char **parent, char **base) {
    const char *slash = strrchr(p, '/');
    if (!slash) {
        *parent = strdup(".");
        *base = strdup(p);
    } else {
        *parent = slash == p ? strdup("/") : strndup(p, (size_t)(slash - p));
        *base = strdup(slash + 1);
    }
    if (!*parent || !*base) {
        free(*parent);
        free(*base);
        *parent = *base = NULL;
        return tt_err(TT_ENOMEM, "%s: out of memory", p);
    }
    return TT_OK;
}

int tt_outpath_open(tt_outpath *o, const char *path) {
    memset(o, 0, sizeof *o);
    o->pfd = -1;
    if (!path || !*path)
        return tt_err(TT_EINVAL, "the output path is empty");
    char *cur = strdup(path);
    if (!cur)
        return tt_err(TT_ENOMEM, "%s: out of memory", path);
    int st = TT_OK;
    for (int hops = 0;; hops++) {
        size_t n = strlen(cur);
        while (n > 1 && cur[n - 1] == '/')
            cur[--n] = '\0';
        free(o->parent);
        free(o->base);
        if ((st = split_path(cur, &o->parent, &o->base)))
            goto fail;
        if (!*o->base || !strcmp(o->base, ".") || !strcmp(o->base, "..")) {
            st = tt_err(TT_EINVAL, "%s: not a name for a new directory", path);
            goto fail;
        }
        if (o->pfd >= 0)
            close(o->pfd);
        o->pfd = open(o->parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (o->pfd < 0) {
            st = tt_err_errno(TT_EIO, errno, "%s: cannot open the directory that is to hold %s",
                              o->parent, o->base);
            goto fail;
        }
        char target[PATH_MAX];
        ssize_t len = readlinkat(o->pfd, o->base, target, sizeof target - 1);
        if (len < 0)
            break; /* not a link (or absent): this is the output */
        if (hops >= 40) {
            st = tt_err(TT_EINVAL, "%s: too many levels of symbolic links", path);
            goto fail;
        }
        target[len] = '\0';
        /* A relative target is relative to the link's directory. */
        char *next = target[0] == '/' || !strcmp(o->parent, ".")
                         ? strdup(target)
                         : tt_path_join(o->parent, target);
        if (!next) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        free(cur);
        cur = next;
    }
    o->path = !strcmp(o->parent, ".") ? strdup(o->base) : tt_path_join(o->parent, o->base);
    if (!o->path) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    free(cur);
    return TT_OK;
fail:
    free(cur);
    tt_outpath_close(o);
    return st;
}

void tt_outpath_close(tt_outpath *o) {
    if (o->pfd >= 0)
        close(o->pfd);
    free(o->path);
    free(o->parent);
    free(o->base);
    memset(o, 0, sizeof *o);
    o->pfd = -1;
}

/* ------------------------------------------------------------------- locks */

#define LOCK_MAGIC "tartan lock, pid "

/* A lock file is ours if it is empty (created, not yet written) or says LOCK_MAGIC. */
static bool lock_file_ours(int fd, long *pid) {
    char buf[64];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    *pid = 0;
    if (n == 0)
        return true;
    if (n < 0 || (size_t)n < sizeof LOCK_MAGIC - 1 || memcmp(buf, LOCK_MAGIC, sizeof LOCK_MAGIC - 1))
        return false;
    buf[n] = '\0';
    *pid = strtol(buf + sizeof LOCK_MAGIC - 1, NULL, 10);
    return true;
}

int tt_lock_acquire(tt_lock *l, int dfd, const char *name, const char *what, const char *doing) {
    l->fd = -1;
    l->dfd = dfd;
    l->name = NULL;
    for (int attempt = 0; attempt < 100; attempt++) {
        int fd = openat(dfd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            return tt_err_errno(TT_EIO, errno, "%s: cannot create the lock file %s", what, name);
        struct stat a, b;
        long pid;
        if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode) || !lock_file_ours(fd, &pid)) {
            close(fd);
            return tt_err(TT_EEXIST, "%s: %s exists and is not a tartan lock file; refusing to "
                          "touch it", what, name);
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            lock_file_ours(fd, &pid);
            close(fd);
            if (e == EWOULDBLOCK) {
                if (pid > 0)
                    return tt_err(TT_EBUSY, "%s: being %s by pid %ld", what, doing, pid);
                return tt_err(TT_EBUSY, "%s: being %s by another process", what, doing);
            }
            return tt_err_errno(TT_EIO, e, "%s: cannot lock %s", what, name);
        }
        /* The holder before us may have removed the file after we opened it: then our
         * lock is on an unlinked file and another process may lock a new one. Retry. */
        if (fstatat(dfd, name, &b, AT_SYMLINK_NOFOLLOW) != 0 || a.st_ino != b.st_ino ||
            a.st_dev != b.st_dev) {
            close(fd);
            continue;
        }
        char text[64];
        int n = snprintf(text, sizeof text, LOCK_MAGIC "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n) {
            int e = errno;
            close(fd);
            return tt_err_errno(TT_EIO, e, "%s: cannot write the lock file %s", what, name);
        }
        if (!(l->name = strdup(name))) {
            close(fd);
            return tt_err(TT_ENOMEM, "%s: out of memory", what);
        }
        l->fd = fd;
        return TT_OK;
    }
    return tt_err(TT_EBUSY, "%s: the lock file %s keeps being replaced", what, name);
}

void tt_lock_release(tt_lock *l) {
    if (l->fd >= 0) {
        (void)unlinkat(l->dfd, l->name, 0); /* while held: no one can be waiting on it */
        close(l->fd);
    }
    free(l->name);
    l->name = NULL;
    l->fd = -1;
}

/* ----------------------------------------------------------------- removal */

/* Appends name (with '/' if dir) to the comma-separated list in buf. */
static void list_add(char *buf, size_t cap, size_t *count, const char *name, bool dir) {
    size_t used = strlen(buf);
    if (used + 8 < cap) {
        if (*count >= 8) {
            if (*count == 8)
                snprintf(buf + used, cap - used, ", ...");
        } else {
            snprintf(buf + used, cap - used, "%s%s%s", *count ? ", " : "", name, dir ? "/" : "");
        }
    }
    (*count)++;
}

/* The manifest of the index at path, for tt_index_owns: a missing or unreadable one
 * lists nothing (then only tartan's magic vouches for a file). The thread-local
 * message is left as it was: a caller may be cleaning up after its own error. */
static void read_listed(const char *path, tt_manifest *m) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", tt_last_error());
    if (!path || tt_manifest_read(path, m) != TT_OK)
        memset(m, 0, sizeof *m);
    tt_err(TT_OK, "%s", saved);
}

bool tt_index_owns(int dfd, const char *name, const tt_manifest *listed) {
    struct stat sb;
    if (!tt_is_index_file(name) || fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(sb.st_mode))
        return false;
    return (listed && tt_manifest_find(listed, name)) || tt_written_by_tartan(dfd, name);
}

/* Whether the open file fd starts with tartan's magic. */
static bool starts_with_magic(int fd) {
    char head[4];
    return pread(fd, head, 4, 0) == 4 && !memcmp(head, TT_MAGIC, 4);
}

/* Whether name in dfd is a file of the index's data: index-named (not MANIFEST,
 * MANIFEST.tmp or LOCK), a regular file of at least a header that starts with the
 * magic. An empty file or a LOCK proves nothing (anyone can `touch` one). */
static bool holds_index_data(int dfd, const char *name) {
    if (!tt_is_index_file(name) || !strcmp(name, TT_F_MANIFEST) ||
        !strcmp(name, "MANIFEST.tmp") || !strcmp(name, TT_F_LOCK))
        return false;
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat sb;
    bool ours = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size >= TT_HEADER_SIZE &&
                starts_with_magic(fd);
    close(fd);
    return ours;
}

/* Whether the directory fd holds a file of index data (holds_index_data): then it is
 * an index, and a MANIFEST in it that does not read is that index's, damaged (nobody
 * else's file can sit at that name in an index directory: the index would be reading
 * it as its manifest). */
static bool holds_index_files(int fd) {
    DIR *d = tt_dir_list(fd);
    if (!d)
        return false;
    bool any = false;
    struct dirent *de;
    while (!any && (de = readdir(d)))
        any = holds_index_data(fd, de->d_name);
    closedir(d);
    return any;
}

/* tt_index_owns, and a damaged MANIFEST of an index directory (holds_index_files). */
static bool dir_owns(int fd, const char *name, const tt_manifest *listed, bool indexdir) {
    if (tt_index_owns(fd, name, listed))
        return true;
    struct stat sb;
    return indexdir && !strcmp(name, TT_F_MANIFEST) &&
           fstatat(fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
}

size_t tt_foreign_entries(int fd, const char *path, char *buf, size_t cap) {
    size_t count = 0;
    if (cap)
        buf[0] = '\0';
    DIR *d = tt_dir_list(fd);
    if (!d)
        return 0;
    tt_manifest listed;
    read_listed(path, &listed);
    const bool indexdir = holds_index_files(fd);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat sb;
        bool isdir = fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
                     S_ISDIR(sb.st_mode);
        if (!dir_owns(fd, de->d_name, &listed, indexdir))
            list_add(buf, cap, &count, de->d_name, isdir);
    }
    closedir(d);
    tt_manifest_free(&listed);
    return count;
}

bool tt_written_by_tartan(int dfd, const char *name) {
    int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) /* out of descriptors: the name is all there is to go by */
        return errno == EMFILE || errno == ENFILE;
    struct stat sb;
    bool ours = false;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        long pid;
        ours = sb.st_size == 0 ||
               (!strcmp(name, TT_F_LOCK) ? lock_file_ours(fd, &pid) : starts_with_magic(fd));
    }
    close(fd);
    return ours;
}

int tt_remove_ours_fd(int fd, int dfd, const char *name, const char *path) {
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return tt_err_errno(TT_EIO, e, "%s: cannot read", path);
    }
    int st = TT_OK;
    char left[512] = "";
    size_t nleft = 0;
    tt_manifest listed;
    read_listed(path, &listed);
    const bool indexdir = holds_index_files(fd);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        struct stat sb;
        bool got = fstatat(fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
        if (dir_owns(fd, de->d_name, &listed, indexdir)) {
            if (unlinkat(fd, de->d_name, 0) != 0 && st == TT_OK)
                st = tt_err_errno(TT_EIO, errno, "%s/%s: cannot remove", path, de->d_name);
        } else {
            list_add(left, sizeof left, &nleft, de->d_name, got && S_ISDIR(sb.st_mode));
        }
    }
    closedir(d);
    tt_manifest_free(&listed);
    if (st)
        return st;
    if (nleft)
        return tt_err(TT_EEXIST, "%s: holds files tartan did not write (%s); left as is", path,
                      left);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
        return tt_err_errno(TT_EIO, errno, "%s: cannot remove directory", path);
    return TT_OK;
}

int tt_remove_ours(int dfd, const char *name, const char *path) {
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return TT_OK;
        if (errno == ENOTDIR || errno == ELOOP)
            return tt_err(TT_EEXIST, "%s: not a directory tartan made; left as is", path);
        return tt_err_errno(TT_EIO, errno, "%s: cannot open", path);
    }
    return tt_remove_ours_fd(fd, dfd, name, path);
}

/* ---------------------------------------------------------------- renaming */

int tt_rename_at(int dfd, const char *from, const char *to, int how, const char *what) {
#if defined(RENAME_NOREPLACE) && defined(RENAME_EXCHANGE)
    unsigned flags = how == TT_RENAME_EXCHANGE ? RENAME_EXCHANGE : RENAME_NOREPLACE;
    if (renameat2(dfd, from, dfd, to, flags) == 0)
        return TT_OK;
    if (errno == EEXIST || errno == ENOTEMPTY)
        return tt_err(TT_EEXIST, "%s: already exists", what);
    if (errno != EINVAL && errno != ENOSYS)
        return tt_err_errno(TT_EIO, errno, "%s: cannot rename %s", what, from);
#endif
    /* File systems without renameat2 flags. */
    if (how == TT_RENAME_EXCHANGE)
        return tt_err(TT_EUNSUPPORTED, "%s: the file system cannot exchange two directories",
                      what);
    struct stat sb;
    if (fstatat(dfd, to, &sb, AT_SYMLINK_NOFOLLOW) == 0)
        return tt_err(TT_EEXIST, "%s: already exists", what);
    if (renameat(dfd, from, dfd, to) != 0)
        return tt_err_errno(TT_EIO, errno, "%s: cannot rename %s", what, from);
    return TT_OK;
}

/* Index build, the output directory: checked before any work, locked for the whole
 * build, the finished temporary directory published into place, leftovers of killed
 * builds removed. The rules (io/dir.h, doc/format.md "Publishing and removal"):
 *
 *  - OUT that is a symbolic link means the directory it points to (resolved once);
 *  - OUT.lock, beside OUT, is held with flock from start to end: a second build into
 *    OUT fails at once with "being built by pid N";
 *  - without force OUT must not exist, and the publish is a rename with
 *    RENAME_NOREPLACE, so a directory that appeared meanwhile is never replaced;
 *  - with force an existing OUT is replaced only if it holds nothing but a tartan index
 *    (checked at the start and again at publish), by RENAME_EXCHANGE; the previous
 *    index's files are then removed by name, and anything else is reported, not
 *    deleted;
 *  - OUT.tmp-PID-RANDOM directories left by killed builds are removed by the next build
 *    (which holds the lock, so none of them is live), but only their index files. */
#include "index/build.h"
#include "io/dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Entries of directory fd other than . and .. */
static size_t count_entries(int fd) {
    DIR *d = tt_dir_list(fd);
    size_t n = 0;
    if (!d)
        return 1; /* unreadable: do not treat it as empty */
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Checks what is at OUT now. *replace: an index (or empty directory) to exchange with. */
static int check_target(builder *b, bool *replace) {
    const tt_outpath *op = &b->op;
    struct stat sb;
    *replace = false;
    if (fstatat(op->pfd, op->base, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT)
            return TT_OK;
        return tt_err_errno(TT_EIO, errno, "%s: cannot inspect", op->path);
    }
    if (S_ISLNK(sb.st_mode))
        return tt_err(TT_EEXIST, "%s: became a symbolic link during the build; left as is",
                      op->path);
    if (!S_ISDIR(sb.st_mode))
        return tt_err(TT_EEXIST, "%s: exists and is not a directory", op->path);
    if (!b->o->force)
        return tt_err(TT_EEXIST, "%s: already exists (use --force to replace it)", op->path);
    int fd = openat(op->pfd, op->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return tt_err_errno(TT_EIO, errno, "%s: cannot open", op->path);
    char foreign[512];
    size_t nforeign = tt_foreign_entries(fd, op->path, foreign, sizeof foreign);
    struct stat ms;
    bool is_index = fstatat(fd, TT_F_MANIFEST, &ms, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(ms.st_mode);
    int st = TT_OK;
    if (!is_index && count_entries(fd) > 0)
        st = tt_err(TT_EEXIST, "%s: exists and is not a tartan index; refusing to replace it",
                    op->path);
    else if (nforeign)
        st = tt_err(TT_EEXIST, "%s: holds files that are not part of the index (%s); --force "
                    "replaces only a directory that holds nothing but an index: move them "
                    "elsewhere first", op->path, foreign);
    else if (faccessat(op->pfd, op->base, W_OK | X_OK, AT_EACCESS) != 0)
        st = tt_err_errno(TT_EIO, errno, "%s: the index cannot be replaced: its directory is "
                          "not writable", op->path);
    close(fd);
    if (!st)
        *replace = true; /* an index, or an empty directory */
    return st;
}

/* A name OUT.tmp-PID-RANDOM (RANDOM: 6 hex digits) of a build into OUT. */
static bool is_build_temp(const char *name, const char *base) {
    size_t bl = strlen(base);
    if (strncmp(name, base, bl) != 0 || strncmp(name + bl, ".tmp-", 5) != 0)
        return false;
    const char *p = name + bl + 5;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || p[digits] != '-')
        return false;
    p += digits + 1;
    return strlen(p) == 6 && strspn(p, "0123456789abcdef") == 6;
}

/* Removes the temporary directories of killed builds into OUT. The caller holds OUT's
 * lock, so no build that made one of them still runs. Best effort: a directory holding
 * anything tartan did not write stays as it is. */
static void remove_stale(builder *b) {
    DIR *d = tt_dir_list(b->op.pfd);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_build_temp(de->d_name, b->op.base))
            continue;
        char *p = tt_path_join(b->op.parent, de->d_name);
        if (p)
            tt_shards_remove_stale(b->op.pfd, de->d_name, p); /* a sharded build's */
        if (p)
            (void)tt_remove_ours(b->op.pfd, de->d_name, p);
        free(p);
    }
    closedir(d);
    tt_err_clear();
}

int tt_build_prepare_output(builder *b, const char *out_dir) {
    int st;
    if ((st = tt_outpath_open(&b->op, out_dir)))
        return st;
    size_t n = strlen(b->op.base) + 16;
    char *lockname = malloc(n);
    if (!lockname)
        return tt_err(TT_ENOMEM, "%s: out of memory", out_dir);
    snprintf(lockname, n, "%s.lock", b->op.base);
    st = tt_lock_acquire(&b->lock, b->op.pfd, lockname, b->op.path, "built");
    free(lockname);
    if (st)
        return st;
    bool replace;
    if ((st = check_target(b, &replace)))
        return st;
    remove_stale(b);
    tt_rng r;
    tt_rng_seed(&r, (uint64_t)getpid() ^ (uint64_t)(tt_now() * 1e9));
    for (int attempt = 0; attempt < 16; attempt++) {
        char name[64];
        snprintf(name, sizeof name, ".tmp-%d-%06llx", (int)getpid(),
                 (unsigned long long)(tt_rng_next(&r) & 0xffffff));
        n = strlen(b->op.base) + strlen(name) + 1;
        free(b->tmp_name);
        if (!(b->tmp_name = malloc(n)))
            return tt_err(TT_ENOMEM, "%s: out of memory", out_dir);
        snprintf(b->tmp_name, n, "%s%s", b->op.base, name);
        if (mkdirat(b->op.pfd, b->tmp_name, 0755) == 0)
            break;
        if (errno != EEXIST || attempt == 15)
            return tt_err_errno(TT_EIO, errno, "%s: cannot create the build directory %s in %s",
                                b->op.path, b->tmp_name, b->op.parent);
    }
    b->tmp_fd = openat(b->op.pfd, b->tmp_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (b->tmp_fd < 0 || !(b->tmp = tt_path_join(b->op.parent, b->tmp_name))) {
        st = b->tmp_fd < 0 ? tt_err_errno(TT_EIO, errno, "%s: cannot open the build directory "
                                          "%s", b->op.path, b->tmp_name)
                           : TT_ENOMEM;
        (void)unlinkat(b->op.pfd, b->tmp_name, AT_REMOVEDIR);
        free(b->tmp_name);
        b->tmp_name = NULL;
        return st;
    }
    return TT_OK;
}

/* Replaces OUT by exchanging the two directories; without an atomic exchange, by two
 * renames through a second temporary name (a crash between them leaves no index at
 * OUT, never a mix). Then removes the previous index's files. */
static int replace_index(builder *b) {
    const tt_outpath *op = &b->op;
    char old[256];
    snprintf(old, sizeof old, "%s", b->tmp_name);
    int st = tt_rename_at(op->pfd, b->tmp_name, op->base, TT_RENAME_EXCHANGE, op->path);
    if (st == TT_EUNSUPPORTED) {
        tt_err_clear();
        snprintf(old, sizeof old, "%.128s.tmp-%d-%06x", op->base, (int)getpid(),
                 (unsigned)(tt_now() * 1e6) & 0xffffff);
        if ((st = tt_rename_at(op->pfd, op->base, old, TT_RENAME_NOREPLACE, op->path)))
            return st;
        if ((st = tt_rename_at(op->pfd, b->tmp_name, op->base, TT_RENAME_NOREPLACE, op->path))) {
            (void)renameat(op->pfd, old, op->pfd, op->base); /* put the old index back */
            return st;
        }
    } else if (st) {
        return st;
    }
    /* The new index is in place; `old` holds the previous one. */
    close(b->tmp_fd);
    b->tmp_fd = -1;
    free(b->tmp);
    free(b->tmp_name);
    b->tmp = b->tmp_name = NULL;
    char *p = tt_path_join(op->parent, old);
    if (!p)
        return TT_ENOMEM;
    st = tt_remove_ours(op->pfd, old, p);
    free(p);
    if (st)
        st = tt_err_prefix(st, "%s: the index was replaced, but removing the previous one "
                           "failed", op->path);
    return st;
}

int tt_build_publish(builder *b) {
    const tt_outpath *op = &b->op;
    bool replace;
    int st;
    /* What is at OUT now, not what was there at the start. */
    if ((st = check_target(b, &replace)))
        return st;
    if (replace) {
        /* The index being replaced may be changing (tartan add, delete, compact): take
         * its own lock for the exchange, so that no change lands in it meanwhile. */
        tt_lock ilock = {.fd = -1};
        int ofd = openat(op->pfd, op->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (ofd < 0)
            return tt_err_errno(TT_EIO, errno, "%s: cannot open", op->path);
        if ((st = tt_lock_acquire(&ilock, ofd, TT_F_LOCK, op->path, "modified"))) {
            close(ofd);
            return st;
        }
        st = replace_index(b);
        tt_lock_release(&ilock); /* its file went with the old index */
        close(ofd);
        if (st && b->tmp)
            return st; /* nothing was published */
    } else {
        st = tt_rename_at(op->pfd, b->tmp_name, op->base, TT_RENAME_NOREPLACE, op->path);
        if (st == TT_EEXIST)
            return tt_err(TT_EEXIST, "%s: appeared during the build; left as is, and the new "
                          "index was not published", op->path);
        if (st)
            return st;
        close(b->tmp_fd);
        b->tmp_fd = -1;
        free(b->tmp);
        free(b->tmp_name);
        b->tmp = b->tmp_name = NULL;
    }
    int st2 = tt_fsync_dirfd(op->pfd, op->parent);
    return st ? st : st2;
}

void tt_build_discard(builder *b, int status) {
    if (b->tmp_name && b->tmp_fd >= 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tt_last_error());
        /* Through the descriptor held since creation: this works even when the build
         * failed for want of descriptors. */
        (void)tt_remove_ours_fd(b->tmp_fd, b->op.pfd, b->tmp_name, b->tmp);
        b->tmp_fd = -1;
        tt_err_clear();
        if (status)
            tt_err(status, "%s", msg); /* the build's own error, not the cleanup's */
    }
    if (b->tmp_fd >= 0)
        close(b->tmp_fd);
    b->tmp_fd = -1;
    free(b->tmp);
    free(b->tmp_name);
    b->tmp = b->tmp_name = NULL;
    tt_lock_release(&b->lock);
    tt_outpath_close(&b->op);
}

/* Directories: output paths, locks, publication and removal of what tartan wrote.
 *
 * The rules every writer follows (doc/format.md, "Publishing and removal"):
 *  - an output path that is a symbolic link means the directory it points to; it is
 *    resolved once, and from then on everything is done relative to an open descriptor
 *    of the parent directory, so nothing is ever deleted through a symbolic link;
 *  - one writer per output at a time, by an advisory lock (flock) on a small lock file;
 *  - only files tartan writes are ever removed: regular files (never through a link)
 *    under an index file's name (a fixed set, tt_is_index_file) that start with
 *    tartan's magic or that the index's manifest lists, and a directory only once it
 *    is empty. */
#ifndef TT_IO_DIR_H
#define TT_IO_DIR_H

#include "common/common.h"
#include "io/file.h"

#include <dirent.h>

/* Path helpers: malloc'd "dir/name". */
char *tt_path_join(const char *dir, const char *name);
int tt_fsync_dir(const char *dir);
/* fsync of an open directory; `what` names it in the message. */
int tt_fsync_dirfd(int dfd, const char *what);

/* A listing of the directory open as dfd (a descriptor of its own: dfd stays as it
 * is), or NULL. Close it with closedir. */
DIR *tt_dir_list(int dfd);

/* True for the names of the files tartan writes into an index directory: the index
 * files of every generation ("<kind>.tt", "g<N>.<kind>.tt"), MANIFEST, its temporary,
 * LOCK. */
bool tt_is_index_file(const char *name);

/* An output directory about to be written: `path` with a symbolic link in its last
 * component followed (to any depth), split into its parent (held open) and name. */
typedef struct tt_outpath {
    char *path;    /* the resolved output */
    char *parent;  /* its parent directory ("." for a bare name) */
    char *base;    /* its last component */
    int pfd;       /* the parent, O_DIRECTORY */
} tt_outpath;

/* Resolves and opens. Errors: TT_EINVAL (empty, "/", "." or ".." as the last component),
 * TT_ENOTFOUND / TT_EIO naming the parent that is missing or not a directory,
 * TT_EINVAL for a symbolic link loop. */
int tt_outpath_open(tt_outpath *o, const char *path);
void tt_outpath_close(tt_outpath *o);

/* An advisory lock: the file `name` in directory dfd, held with flock while the lock
 * lives; it records the holder's pid. tt_lock_acquire fails at once, with TT_EBUSY and
 * "<what>: being <doing> by pid N", when another process holds it. A lock file left by
 * a killed process is simply taken over (flock dies with its holder). A file of that
 * name that is not a tartan lock file is refused (TT_EEXIST), never overwritten. */
typedef struct tt_lock {
    int fd, dfd;
    char *name;
} tt_lock;

int tt_lock_acquire(tt_lock *l, int dfd, const char *name, const char *what, const char *doing);
/* Removes the lock file (while still holding it) and releases it. Accepts a lock that
 * was never acquired (fd -1). */
void tt_lock_release(tt_lock *l);

/* Whether the entry `name` of dfd holds what tartan writes: a regular file (a link is
 * not followed) that starts with tartan's magic (every file tt_fw_open creates does,
 * from its first write), or, named LOCK, a tartan lock file, or is empty (a writer
 * killed between creating it and its first write: nothing in it to lose). A file of
 * the same name that someone else wrote is not. When no descriptor is left to look
 * (EMFILE, ENFILE), the caller's name rule has to do. */
bool tt_written_by_tartan(int dfd, const char *name);

/* Whether entry `name` of dfd is the index's own, for removal: a regular file (a link
 * is not followed) named as an index file (tt_is_index_file) that tartan wrote
 * (tt_written_by_tartan) or that `listed` (the directory's manifest, or NULL) names. A
 * listed file whose header was overwritten is still the index's (--force is how a
 * broken index is rebuilt); an unlisted file under an index file's name that does not
 * start with tartan's magic is someone else's. */
bool tt_index_owns(int dfd, const char *name, const tt_manifest *listed);

/* Removes directory `name` of dfd if it is a real directory (not a link): first its
 * files that tt_index_owns (judged against the manifest at `path`, if it has a readable
 * one), then the directory itself. Anything else in it is left, and so is the
 * directory: then TT_EEXIST with a message listing what remains. `path` names the
 * directory in messages. A missing directory is TT_OK. */
int tt_remove_ours(int dfd, const char *name, const char *path);
/* The same with fd, the directory already open (taken over and closed); when the
 * process has run out of descriptors the manifest cannot be read and the names alone
 * decide (tt_written_by_tartan). */
int tt_remove_ours_fd(int fd, int dfd, const char *name, const char *path);

/* Lists the entries of directory fd (whose path is `path`) that are not the index's own
 * (tt_index_owns, against the manifest at path), comma-separated into buf
 * (subdirectories get a trailing '/'); returns their count. */
size_t tt_foreign_entries(int fd, const char *path, char *buf, size_t cap);

/* Renames entry `from` of dfd to `to` of dfd: noreplace fails with TT_EEXIST when `to`
 * exists (RENAME_NOREPLACE); exchange swaps two existing entries atomically
 * (RENAME_EXCHANGE). Where the file system lacks them: noreplace checks first (a
 * narrow race remains), exchange fails with TT_EUNSUPPORTED. */
enum { TT_RENAME_NOREPLACE = 1, TT_RENAME_EXCHANGE = 2 };
int tt_rename_at(int dfd, const char *from, const char *to, int how, const char *what);

#endif

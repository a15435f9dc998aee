/* An LD_PRELOAD library that makes system calls fail on demand, for the crash-safety
 * and resource-limit tests (tests/crash_safety.sh, tests/store_crash.sh,
 * tests/resource_limits.sh). Only this test helper reads the environment; the library
 * under test never does.
 *
 *   TT_FAIL_WRITE_AFTER=N   the (N+1)-th write/pwrite to a regular file fails, and
 *                           every later one too (a disk that filled up and stays full)
 *   TT_FAIL_PATH=TEXT       only writes/fsyncs to files whose path contains TEXT count
 *                           and fail (default: every regular file; the CLI's own
 *                           stdout/stderr redirected to files must usually be spared)
 *   TT_FAIL_ERRNO=NAME      errno of the failures: EIO (default), ENOSPC, EFBIG, EDQUOT
 *   TT_FAIL_FSYNC=1         fsync and fdatasync of regular files fail
 *   TT_FAIL_DIRSYNC=1       fsync and fdatasync of directories fail (e.g. the fsync of
 *                           an index directory after a manifest was renamed into it)
 *   TT_FAIL_RENAME=1        rename, renameat and renameat2 fail
 *   TT_FAIL_URING=1         io_uring_queue_init* return -ENOSYS (a kernel without
 *                           io_uring, or a seccomp filter that refuses it)
 *   TT_FAIL_LOG=1           say on stderr when a failure is injected
 *
 * Delays, to make races deterministic (tests/out_safety.sh): the call sleeps first,
 * then does its work. A signal that arrives during the sleep ends the sleep early.
 *
 *   TT_DELAY_RENAME_MS=N    sleep N ms at the start of every rename, renameat and
 *                           renameat2 (glibc's; a raw syscall(SYS_renameat2) is not seen)
 *   TT_DELAY_PREAD_MS=N     sleep N ms at the start of every pread and pread64 (a
 *                           build reads its vectors with pread: a slow disk)
 *   TT_DELAY_FSYNC_MS=N     sleep N ms at the start of every fsync and fdatasync of a
 *                           regular file whose path contains TT_FAIL_PATH (when set)
 *   TT_DELAY_DIRSYNC_MS=N   sleep N ms at the start of every fsync and fdatasync of a
 *                           directory (a change of an index fsyncs its directory right
 *                           after renaming MANIFEST into place: a window between the
 *                           publication and the removal of the files it replaced)
 *
 * Under AddressSanitizer, run with ASAN_OPTIONS=verify_asan_link_order=0. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

struct io_uring;
struct io_uring_params;

/* Exported interposers need prototypes under -Wmissing-prototypes. */
ssize_t write(int fd, const void *buf, size_t n);
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off);
int fsync(int fd);
int fdatasync(int fd);
int rename(const char *from, const char *to);
int renameat(int fromfd, const char *from, int tofd, const char *to);
int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags);
ssize_t pread(int fd, void *buf, size_t n, off_t off);
ssize_t pread64(int fd, void *buf, size_t n, off_t off);
int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags);
int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                               struct io_uring_params *p);

static atomic_long writes_left = -2; /* -2: not read yet, -1: never fail */

static void *next(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        static const char msg[] = "faultinject: symbol not found\n";
        ssize_t r = syscall(1 /* SYS_write */, 2, msg, sizeof msg - 1);
        (void)r;
        abort();
    }
    return f;
}

static int fail_errno(void) {
    const char *e = getenv("TT_FAIL_ERRNO");
    if (!e || !strcmp(e, "EIO"))
        return EIO;
    if (!strcmp(e, "ENOSPC"))
        return ENOSPC;
    if (!strcmp(e, "EFBIG"))
        return EFBIG;
    if (!strcmp(e, "EDQUOT"))
        return EDQUOT;
    return EIO;
}

static void note(const char *what) {
    if (getenv("TT_FAIL_LOG"))
        fprintf(stderr, "faultinject: failing %s\n", what);
}

/* True if fd is a regular file whose path contains TT_FAIL_PATH (when set). */
static int regular(int fd) {
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return 0;
    const char *want = getenv("TT_FAIL_PATH");
    if (!want || !*want)
        return 1;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0)
        return 0;
    path[n] = '\0';
    return strstr(path, want) != NULL;
}

/* True if this write must fail. */
static int write_fails(int fd) {
    long left = atomic_load(&writes_left);
    if (left == -2) {
        const char *s = getenv("TT_FAIL_WRITE_AFTER");
        left = s && *s ? strtol(s, NULL, 10) : -1;
        atomic_store(&writes_left, left);
    }
    if (left < 0 || !regular(fd))
        return 0;
    if (left == 0) {
        note("write");
        errno = fail_errno();
        return 1;
    }
    atomic_fetch_sub(&writes_left, 1);
    return 0;
}

ssize_t write(int fd, const void *buf, size_t n) {
    static ssize_t (*real)(int, const void *, size_t);
    if (!real)
        real = (ssize_t (*)(int, const void *, size_t))next("write");
    if (write_fails(fd))
        return -1;
    return real(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, const void *, size_t, off_t);
    if (!real)
        real = (ssize_t (*)(int, const void *, size_t, off_t))next("pwrite");
    if (write_fails(fd))
        return -1;
    return real(fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) {
    return pwrite(fd, buf, n, off);
}

static void delay(const char *var);

static int is_dir(int fd) {
    struct stat sb;
    return fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int sync_fails(int fd) {
    const char *s = getenv("TT_DELAY_FSYNC_MS");
    if (s && *s && regular(fd))
        delay("TT_DELAY_FSYNC_MS");
    s = getenv("TT_FAIL_FSYNC");
    if (s && *s == '1' && regular(fd)) {
        note("fsync");
        errno = fail_errno();
        return 1;
    }
    s = getenv("TT_DELAY_DIRSYNC_MS");
    if (s && *s && is_dir(fd))
        delay("TT_DELAY_DIRSYNC_MS");
    s = getenv("TT_FAIL_DIRSYNC");
    if (s && *s == '1' && is_dir(fd)) {
        note("fsync of a directory");
        errno = fail_errno();
        return 1;
    }
    return 0;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))next("fsync");
    return sync_fails(fd) ? -1 : real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))next("fdatasync");
    return sync_fails(fd) ? -1 : real(fd);
}

/* Sleeps the number of milliseconds in the environment variable var, if set; errno is
 * kept, and a signal ends the sleep early (the caller then goes on with its work). */
static void delay(const char *var) {
    const char *s = getenv(var);
    long ms = s && *s ? strtol(s, NULL, 10) : 0;
    if (ms <= 0)
        return;
    int saved = errno;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    (void)nanosleep(&ts, NULL);
    errno = saved;
}

static int rename_fails(void) {
    const char *s = getenv("TT_FAIL_RENAME");
    if (s && *s == '1') {
        note("rename");
        errno = fail_errno();
        return 1;
    }
    return 0;
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))next("rename");
    delay("TT_DELAY_RENAME_MS");
    if (rename_fails())
        return -1;
    return real(from, to);
}

int renameat(int fromfd, const char *from, int tofd, const char *to) {
    static int (*real)(int, const char *, int, const char *);
    if (!real)
        real = (int (*)(int, const char *, int, const char *))next("renameat");
    delay("TT_DELAY_RENAME_MS");
    if (rename_fails())
        return -1;
    return real(fromfd, from, tofd, to);
}

int renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (!real)
        real = (int (*)(int, const char *, int, const char *, unsigned int))next("renameat2");
    delay("TT_DELAY_RENAME_MS");
    if (rename_fails())
        return -1;
    return real(fromfd, from, tofd, to, flags);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    static ssize_t (*real)(int, void *, size_t, off_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t, off_t))next("pread");
    delay("TT_DELAY_PREAD_MS");
    return real(fd, buf, n, off);
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off) {
    return pread(fd, buf, n, off);
}

static int uring_fails(void) {
    const char *s = getenv("TT_FAIL_URING");
    if (s && *s == '1') {
        note("io_uring setup");
        return 1;
    }
    return 0;
}

int io_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags) {
    if (uring_fails())
        return -ENOSYS;
    int (*real)(unsigned, struct io_uring *, unsigned) =
        (int (*)(unsigned, struct io_uring *, unsigned))next("io_uring_queue_init");
    return real(entries, ring, flags);
}

int io_uring_queue_init_params(unsigned entries, struct io_uring *ring,
                               struct io_uring_params *p) {
    if (uring_fails())
        return -ENOSYS;
    int (*real)(unsigned, struct io_uring *, struct io_uring_params *) =
        (int (*)(unsigned, struct io_uring *, struct io_uring_params *))next(
            "io_uring_queue_init_params");
    return real(entries, ring, p);
}

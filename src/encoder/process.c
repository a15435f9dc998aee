/* External encoders: the child process and its pipes (doc/encoder-protocol.md).
 *
 * One encoder process per session. The calling thread runs a single poll() loop that
 * writes framed records to the encoder's stdin, reads framed replies from its stdout
 * and captures its stderr, so neither side can deadlock on a full pipe and the pipes
 * provide the back-pressure (section 5 of the protocol). The child is started with
 * posix_spawnp in its own process group; every exit path kills (SIGKILL to the group)
 * and reaps it. SIGPIPE is blocked only around our own write() calls, and a SIGPIPE we
 * caused is consumed with sigtimedwait before the mask is restored, so the process-wide
 * disposition is never touched. */
#include "encoder/encoder.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READ_CHUNK (64u << 10)
#define MSG_TAIL 420            /* stderr bytes quoted in an error message */

void tt_enc_close_fd(int *fd) {
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void keep_stderr(tt_encoder *e, const char *buf, size_t n) {
    const size_t cap = TT_ENC_STDERR_KEEP;
    if (n >= cap) {
        memcpy(e->err, buf + n - cap, cap);
        e->err_len = cap;
    } else {
        if (e->err_len + n > cap) {
            size_t drop = e->err_len + n - cap;
            memmove(e->err, e->err + drop, e->err_len - drop);
            e->err_len -= drop;
        }
        memcpy(e->err + e->err_len, buf, n);
        e->err_len += n;
    }
    e->err[e->err_len] = '\0';
}

/* Reads what stderr has now (bounded, so a chatty encoder cannot starve the loop). */
void tt_enc_drain_stderr(tt_encoder *e) {
    char buf[4096];
    for (int k = 0; k < 16 && e->fd_err >= 0; k++) {
        ssize_t r = read(e->fd_err, buf, sizeof buf);
        if (r > 0) {
            keep_stderr(e, buf, (size_t)r);
            if (e->opt.stderr_fn)
                e->opt.stderr_fn(e->opt.stderr_user, buf, (size_t)r);
        } else if (r == 0) {
            tt_enc_close_fd(&e->fd_err);
        } else if (errno != EINTR) {
            return; /* EAGAIN: nothing more now */
        }
    }
}

void tt_enc_kill_group(tt_encoder *e) {
    if (e->pid > 0) {
        kill(-e->pid, SIGKILL); /* the encoder leads its own process group */
        kill(e->pid, SIGKILL);
        e->killed = true;
    }
}

/* Waits up to wait_s for the child to exit (draining stderr meanwhile so it cannot
 * block on a full stderr pipe), then kills its group. Always reaps. */
void tt_enc_reap(tt_encoder *e, double wait_s) {
    double t0 = tt_now();
    while (e->pid > 0) {
        int status;
        pid_t r = waitpid(e->pid, &status, e->killed ? 0 : WNOHANG);
        if (r == e->pid) {
            e->wstatus = status;
            e->pid = 0;
            e->reaped = true;
            break;
        }
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) { /* ECHILD: someone else reaped it (SIGCHLD ignored) */
            e->pid = 0;
            e->reaped = true;
            e->wait_unknown = true;
            break;
        }
        if (tt_now() - t0 >= wait_s) {
            tt_enc_kill_group(e);
            continue;
        }
        if (e->fd_err >= 0) {
            struct pollfd p = {e->fd_err, POLLIN, 0};
            if (poll(&p, 1, 5) > 0)
                tt_enc_drain_stderr(e);
        } else {
            struct timespec ts = {0, 5000000};
            nanosleep(&ts, NULL);
        }
    }
    /* The child is gone; whatever it wrote to stderr is in the pipe (unless a
     * grandchild keeps it open: then we take what is there now). */
    tt_enc_drain_stderr(e);
}

void tt_enc_describe_exit(const tt_encoder *e, char *buf, size_t n) {
    if (e->killed) /* only reached when stdout closed and no exit followed */
        snprintf(buf, n, "closed its stdout but did not exit (killed by tartan)");
    else if (e->wait_unknown)
        snprintf(buf, n, "ended (exit status unavailable)");
    else if (WIFEXITED(e->wstatus))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(e->wstatus));
    else if (WIFSIGNALED(e->wstatus))
        snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(e->wstatus),
                 strsignal(WTERMSIG(e->wstatus)));
    else
        snprintf(buf, n, "ended");
}

/* Records a failure: kills and reaps the encoder if it still runs, then sets the
 * message "encoder 'CMD': <what>" followed by the tail of its stderr. */
int tt_enc_fail(tt_encoder *e, int status, const char *fmt, ...) TT_PRINTF(3, 4);
int tt_enc_fail(tt_encoder *e, int status, const char *fmt, ...) {
    char head[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (e->pid > 0) {
        tt_enc_kill_group(e);
        tt_enc_reap(e, 0);
    }
    tt_enc_close_fd(&e->fd_in);
    tt_enc_close_fd(&e->fd_out);
    /* Quote the last lines of stderr, from a line start when possible. */
    size_t n = e->err_len, start = n > MSG_TAIL ? n - MSG_TAIL : 0;
    while (n > start && (e->err[n - 1] == '\n' || e->err[n - 1] == '\r' || e->err[n - 1] == ' '))
        n--;
    if (start > 0) {
        const char *nl = memchr(e->err + start, '\n', n - start);
        if (nl && (size_t)(nl - e->err) < start + MSG_TAIL / 2)
            start = (size_t)(nl - e->err) + 1;
    }
    if (n <= start)
        return tt_err(status, "encoder '%s': %s (its stderr is empty)", e->name, head);
    return tt_err(status, "encoder '%s': %s; its stderr ends with:\n%s%.*s", e->name, head,
                  start > 0 ? "..." : "", (int)(n - start), e->err + start);
}

/* Moves fd above 2 so that dup2 onto 0/1/2 in the child always clears CLOEXEC. */
static int fd_above_stdio(int *fd) {
    if (*fd > 2)
        return 0;
    int nfd = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
    if (nfd < 0)
        return -1;
    close(*fd);
    *fd = nfd;
    return 0;
}

static int set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

int tt_enc_spawn(tt_encoder *e, const char *const *argv) {
    int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1};
    char **full = NULL;
    int st = TT_OK;
    bool fa_ok = false, attr_ok = false;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    size_t argc = 0;
    while (argv[argc])
        argc++;
    full = calloc(argc + 3, sizeof *full);
    if (!full) {
        st = tt_err(TT_ENOMEM, "encoder '%s': cannot allocate", e->name);
        goto done;
    }
    for (size_t i = 0; i < argc; i++)
        full[i] = (char *)argv[i];
    full[argc] = (char *)"--mode";
    full[argc + 1] = (char *)(e->mode == TT_ENC_QUERY ? "query" : "passage");
    if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC) ||
        fd_above_stdio(&pin[0]) || fd_above_stdio(&pout[1]) || fd_above_stdio(&perr[1])) {
        st = tt_err_errno(TT_EIO, errno, "encoder '%s': cannot create pipes", e->name);
        goto done;
    }
#ifdef F_SETPIPE_SZ
    /* Larger pipes mean fewer wake-ups for big replies (DiffRetriever: 16 x 3584 floats);
     * the default 64 KiB still works, so failure is ignored. */
    (void)fcntl(pout[0], F_SETPIPE_SZ, 1 << 20);
    (void)fcntl(pin[1], F_SETPIPE_SZ, 1 << 20);
#endif
    int rc;
    if ((rc = posix_spawn_file_actions_init(&fa))) {
        st = tt_err_errno(TT_ENOMEM, rc, "encoder '%s': spawn setup", e->name);
        goto done;
    }
    fa_ok = true;
    if ((rc = posix_spawnattr_init(&attr))) {
        st = tt_err_errno(TT_ENOMEM, rc, "encoder '%s': spawn setup", e->name);
        goto done;
    }
    attr_ok = true;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    if ((rc = posix_spawn_file_actions_adddup2(&fa, pin[0], 0)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, pout[1], 1)) ||
        (rc = posix_spawn_file_actions_adddup2(&fa, perr[1], 2)) ||
        (rc = posix_spawnattr_setsigmask(&attr, &none)) ||
        (rc = posix_spawnattr_setsigdefault(&attr, &defaults)) ||
        (rc = posix_spawnattr_setpgroup(&attr, 0)) ||
        (rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                  POSIX_SPAWN_SETPGROUP))) {
        st = tt_err_errno(TT_EIO, rc, "encoder '%s': spawn setup", e->name);
        goto done;
    }
    pid_t pid;
    rc = posix_spawnp(&pid, full[0], &fa, &attr, full, environ);
    if (rc == ENOENT || rc == ENOTDIR) {
        st = tt_err(TT_ENOTFOUND, "encoder '%s': %s: %s", e->name, full[0],
                    strchr(full[0], '/') ? "no such file" : "command not found in PATH");
        goto done;
    }
    if (rc == EACCES || rc == ENOEXEC || rc == EISDIR) {
        st = tt_err_errno(TT_EENCODER, rc, "encoder '%s': cannot execute %s", e->name, full[0]);
        goto done;
    }
    if (rc) {
        st = tt_err_errno(TT_EIO, rc, "encoder '%s': cannot start %s", e->name, full[0]);
        goto done;
    }
    e->pid = pid;
    e->fd_in = pin[1];
    e->fd_out = pout[0];
    e->fd_err = perr[0];
    pin[1] = pout[0] = perr[0] = -1;
    if (set_nonblock(e->fd_in) || set_nonblock(e->fd_out) || set_nonblock(e->fd_err))
        st = tt_err_errno(TT_EIO, errno, "encoder '%s': fcntl", e->name);
done:
    for (int k = 0; k < 2; k++) {
        tt_enc_close_fd(&pin[k]);
        tt_enc_close_fd(&pout[k]);
        tt_enc_close_fd(&perr[k]);
    }
    if (fa_ok)
        posix_spawn_file_actions_destroy(&fa);
    if (attr_ok)
        posix_spawnattr_destroy(&attr);
    free(full);
    return st;
}

/* write() with SIGPIPE blocked for this thread only. A SIGPIPE raised by this write
 * (EPIPE) is consumed before the old mask returns, unless one was already pending. */
ssize_t tt_enc_write(int fd, const void *buf, size_t n, int *err) {
    sigset_t pipe_set, old, pending;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE) == 1;
    ssize_t w = write(fd, buf, n);
    *err = w < 0 ? errno : 0;
    if (w < 0 && *err == EPIPE && !was_pending) {
        const struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return w;
}

/* Makes room for `need` unparsed bytes plus a read chunk in rbuf. */
static int rbuf_room(tt_encoder *e, size_t need) {
    size_t have = e->rend - e->rstart;
    if (e->rstart > 0 && (e->rcap - e->rend < READ_CHUNK || e->rcap - e->rstart < need)) {
        memmove(e->rbuf, e->rbuf + e->rstart, have);
        e->rstart = 0;
        e->rend = have;
    }
    size_t want = TT_MAX(need, have) + READ_CHUNK;
    if (e->rcap >= want)
        return TT_OK;
    uint8_t *p = realloc(e->rbuf, want);
    if (!p)
        return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate a %zu-byte reply buffer",
                      e->name, want);
    e->rbuf = p;
    e->rcap = want;
    return TT_OK;
}

/* One read from stdout: >0 bytes read, 0 at EOF, -1 nothing now, or an error status
 * (< -1 never collides: statuses are <= -1 but returned separately via *st). */
int tt_enc_read_stdout(tt_encoder *e, size_t need, int *st) {
    *st = rbuf_room(e, need);
    if (*st)
        return -1;
    for (;;) {
        ssize_t r = read(e->fd_out, e->rbuf + e->rend, e->rcap - e->rend);
        if (r > 0) {
            e->rend += (size_t)r;
            return 1;
        }
        if (r == 0)
            return 0;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -1;
        *st = tt_err_errno(TT_EIO, errno, "encoder '%s': reading its output", e->name);
        return -1;
    }
}

int tt_enc_ms_left(double deadline) {
    double left = deadline - tt_now();
    if (left <= 0)
        return 0;
    return left > 3600 ? 3600000 : (int)(left * 1000) + 1;
}

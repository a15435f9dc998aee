/* Signals of the command-line tool: interruption (SIGINT, SIGTERM, SIGHUP) that leaves
 * no temporary file or directory behind, and SIGBUS from an index file that shrank
 * under a mapping, reported as an error naming the file instead of a crash. */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(sizeof(sig_atomic_t) == sizeof(int), "cancel flags are ints");

volatile sig_atomic_t cli_cancel;
static volatile sig_atomic_t cooperative;
static char cleanup_path[4096];
static const char *bus_cmd = "";
static const tt_index *bus_index;

static void die_of(int sig) {
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The thread that installed the handlers: the one that blocks these signals around
 * making, registering and renaming a temporary file. */
static pthread_t main_thread;

static void on_interrupt(int sig) {
    /* A process-directed signal may land on any thread that does not block it:
     * OpenBLAS's pool and the library's workers do not (sigprocmask blocks only the
     * calling thread). Handled there, it could find the main thread between mkstemp
     * and registering the file, and leave it behind (tests/out_safety.sh A6b saw
     * RUN.tmp-XXXXXX left once in a fresh-clone run). The main thread takes it, once
     * the window is closed. pthread_kill and pthread_self are async-signal-safe. */
    if (!pthread_equal(pthread_self(), main_thread)) {
        (void)pthread_kill(main_thread, sig);
        return;
    }
    if (cleanup_path[0])
        (void)unlink(cleanup_path);
    if (cooperative && !cli_cancel) {
        cli_cancel = sig; /* the library stops at its next check and cleans up */
        return;
    }
    die_of(sig);
}

void cli_signals_install(bool coop) {
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    cooperative = coop;
    main_thread = pthread_self();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESTART; /* reads and writes resume; poll() returns EINTR */
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        /* A signal ignored on entry (nohup, background jobs of a non-interactive shell)
         * stays ignored. */
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(sigs[i], &sa, NULL);
    }
}

static void block_interrupts(int how) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigprocmask(how, &set, NULL);
}

void cli_cleanup_file(const char *path) {
    block_interrupts(SIG_BLOCK);
    snprintf(cleanup_path, sizeof cleanup_path, "%s", path ? path : "");
    block_interrupts(SIG_UNBLOCK);
}

int cli_mkstemp_cleanup(char *tmpl) {
    block_interrupts(SIG_BLOCK);
    int fd = mkstemp(tmpl), err = errno;
    if (fd >= 0)
        snprintf(cleanup_path, sizeof cleanup_path, "%s", tmpl);
    block_interrupts(SIG_UNBLOCK);
    errno = err;
    return fd;
}

int cli_rename_published(const char *tmp, const char *path) {
    block_interrupts(SIG_BLOCK);
    int rc = rename(tmp, path);
    cleanup_path[0] = '\0';
    block_interrupts(SIG_UNBLOCK);
    return rc;
}

void cli_die_if_cancelled(const char *cmd, bool completed, const char *what) {
    if (!cli_cancel)
        return;
    if (completed) {
        /* Too late to stop: saying "nothing changed" now would be a lie. */
        fprintf(stderr, "tartan %s: %s arrived after the work was complete; it stands\n", cmd,
                strsignal(cli_cancel));
        return;
    }
    fprintf(stderr, "tartan %s: interrupted by %s; %s\n", cmd, strsignal(cli_cancel), what);
    die_of(cli_cancel);
}

static void put(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void on_bus(int sig, siginfo_t *si, void *ctx) {
    (void)ctx;
    const char *file = bus_index ? tt_index_file_at(bus_index, si->si_addr) : NULL;
    put("tartan ");
    put(bus_cmd);
    put(": error: ");
    put(file ? file : "an index file");
    put(": the file shrank while it was being read (SIGBUS); an index must not be modified "
        "while it is in use\n");
    if (cleanup_path[0])
        (void)unlink(cleanup_path);
    (void)sig;
    _exit(CLI_FAIL);
}

void cli_sigbus_install(const char *cmd, const tt_index *idx) {
    bus_cmd = cmd;
    bus_index = idx;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_bus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

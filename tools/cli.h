/* Shared helpers of the tartan command-line tool. Tools use only the public header. */
#ifndef TT_CLI_H
#define TT_CLI_H

#include "tartan.h"

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: 0 success, 1 failure (error printed), 2 usage error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

int cmd_build(int argc, char **argv);
/* tartan build as one member of a group building one sharded index (tartan-mpi build;
 * tt_build_options.group); group NULL is cmd_build. */
int cmd_build_group(int argc, char **argv, const tt_build_group *group);
int cmd_info(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_encode(int argc, char **argv);
int cmd_add(int argc, char **argv);
int cmd_delete(int argc, char **argv);
int cmd_compact(int argc, char **argv);
int cmd_reshard(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_serve(int argc, char **argv);
/* tt_index_tune with the terminal's progress and the cooperative interrupt, and a summary
 * on stderr (cmd_tune.c; tartan tune, build, add). */
int cli_tune_index(const char *cmd, const char *index, tt_tune_options *o);

/* OpenBLAS's kernels (blas_hint.c): the core it chose (NULL: not OpenBLAS), the core it
 * should take on this CPU where it took an older one (NULL: none), and a one-line note
 * saying so on stderr when that is a terminal and OPENBLAS_CORETYPE is not set. */
const char *cli_blas_core(void);
const char *cli_blas_better_core(void);
void cli_blas_hint(void);
void cli_print_tune(FILE *f, const char *cmd, const tt_tune_info *t, bool published);

/* Filters over a sharded (or plain: one shard) index, tools/shard_filter.c: `who`
 * prefixes the messages ("WHO: error: ..."); each returns 0, or -1 with the error
 * printed. cli_smeta: the metadata of every open shard (tt_metadata_open each). */
typedef struct cli_smeta cli_smeta;
int cli_smeta_open(const char *who, const tt_sharded *sh, cli_smeta **out);
void cli_smeta_close(cli_smeta *m);
/* tt_metadata_json of a global row of an open shard (a tt status). */
int cli_smeta_json(cli_smeta *m, uint64_t row, char **json);
/* The allowed global rows of --where (over md's shards; md NULL when where is) and/or
 * --filter-ids (a file of ids, one a line; with both: allowed by both) over the open
 * shards; *nids: the ids read, *found: those naming a live document of the open
 * shards. */
int cli_shard_filter(const char *who, const tt_sharded *sh, cli_smeta *md, const char *where,
                     const char *ids_path, tt_filter **out, size_t *nids, uint64_t *found);
/* Appends the lines of path (trailing CR and LF dropped, blank lines skipped) to *list,
 * which holds *n of room for *cap (grown by realloc). CLI_OK, or CLI_FAIL said as
 * "who: error: ..."; the lines read stay in the list either way (cli_free_ids). */
int cli_read_lines(const char *who, const char *path, char ***list, size_t *n, size_t *cap);
void cli_free_ids(char **ids, size_t n);

/* Prints "tartan <cmd>: error: <tt_last_error() or tt_strerror(status)>" to stderr
 * and returns CLI_FAIL. */
int cli_fail(const char *cmd, int status);
/* Prints "tartan <cmd>: <printf message>" and a hint to run --help; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses "123", "512M", "2G", "1.5GiB"... into bytes; false if malformed. */
bool cli_parse_size(const char *s, uint64_t *out);
/* Parses a whole non-negative integer / a finite double; false if malformed. */
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_double(const char *s, double *out);
/* The values of --threads (0..1024; 0: every CPU) and --memory (a size, at least 64M):
 * CLI_OK, or CLI_USAGE after printing the usage error for cmd. */
int cli_threads_arg(const char *cmd, const char *arg, int *out);
int cli_memory_arg(const char *cmd, const char *arg, uint64_t *out);
/* --pool-factor: a whole number >= 1 (CLI_USAGE otherwise, as above). */
int cli_pool_factor_arg(const char *cmd, const char *arg, int *out);
/* Splits a comma-separated list into a NULL-terminated malloc'd array of malloc'd
 * strings (free with cli_free_list); *n receives the count. */
char **cli_split_commas(const char *s, size_t *n);
void cli_free_list(char **list);
/* Formats bytes in human units ("1.23 GiB") into buf. */
const char *cli_human_bytes(uint64_t bytes, char *buf, size_t len);
/* ", first kept 0.984" for a calibrated set that measured its share of exhaustive
 * search's first documents (tt_tuned.first), else "": into buf. */
const char *cli_first_kept(const tt_tuned *t, char *buf, size_t len);
/* Why the calibration chose exhaustive search for a set (tt_tuned.exhaustive): "is
 * cheaper" (or costs at most 10% more) than the set, which reached the target, or
 * "ranks exactly where no PLAID set reached the target" (whatever it costs). */
const char *cli_exhaustive_why(const tt_tuned *t);

/* The process's umask (for files made with mkstemp, which creates them 0600). */
unsigned cli_umask(void);

/* Writes s as a JSON string literal (quotes, escapes, control characters). */
void cli_json_string(FILE *f, const char *s);

/* Progress display on stderr, only when stderr is a terminal (quiet otherwise).
 * Use cli_progress as the tt_progress_fn with a cli_progress_state as user. */
typedef struct cli_progress_state {
    bool tty;
    double last, start;
    char phase[32];
} cli_progress_state;
void cli_progress_init(cli_progress_state *s);
void cli_progress(void *user, const char *phase, uint64_t done, uint64_t total);
void cli_progress_done(cli_progress_state *s); /* clears the progress line */

/* Texts encoded into a spool directory beside an output (tools/spool.c). */
typedef struct cli_spool {
    char dir[4200];
    tt_input *in;              /* the encoded corpus, open */
    char description[1024];    /* the encoder's */
    tt_sparse_set *sparse;     /* the encoder's sparse vectors (protocol 2), or NULL */
} cli_spool;
/* Prints its own errors; returns CLI_OK or CLI_FAIL (the spool may exist either way:
 * cli_spool_remove it). */
int cli_spool_encode(const char *cmd, const char *encoder, const char *corpus,
                     uint32_t timeout_ms, const char *beside, cli_spool *sp);
void cli_spool_remove(cli_spool *sp);

/* Signals (tools/signals.c). cli_signals_install(true): the first SIGINT, SIGTERM or
 * SIGHUP sets cli_cancel to its number, which the library polls through the options'
 * cancel flag ((const volatile int *)&cli_cancel) and answers with TT_ECANCELED after
 * removing its temporary files; a second signal kills at once. With false (commands
 * that cannot poll), the first signal kills at once. Either way the file registered
 * with cli_cleanup_file (NULL: none) is unlinked first. Call it from the thread that
 * makes the temporary files: the handlers pass a signal that lands on another thread
 * to it. */
extern volatile sig_atomic_t cli_cancel;
void cli_signals_install(bool cooperative);
void cli_cleanup_file(const char *path);
/* mkstemp(tmpl) and, when it succeeds, cli_cleanup_file(tmpl), with the signals
 * blocked between them: a signal then finds no file or a registered one. */
int cli_mkstemp_cleanup(char *tmpl);
/* rename(tmp, path) with the signals blocked, clearing the cleanup file: a signal then
 * finds either the temporary (and removes it) or the published file (and keeps it). */
int cli_rename_published(const char *tmp, const char *path);
/* After a library call, if a signal came: unless the call completed, prints
 * "interrupted by SIG...; <what>" and dies of the signal (so the exit status says
 * which). A call that completed anyway (the signal came after its last cancellation
 * point) stands: a note says so and it returns. */
void cli_die_if_cancelled(const char *cmd, bool completed, const char *what);
/* SIGBUS (a mapped index file that shrank): prints an error naming the file of idx at
 * the faulting address, removes the cleanup file and exits 1. */
void cli_sigbus_install(const char *cmd, const tt_index *idx);

/* sparse_input.c: the sparse vectors of build and add (--bm25 [--text F] | --sparse F;
 * corpus: the --corpus texts, used by --bm25 without --text). *out stays NULL when none
 * is asked for. Returns CLI_OK or the exit code (message printed). */
int cli_sparse_load(const char *cmd, int bm25, const char *text, const char *sparse,
                    const char *corpus, const char *vocab, tt_sparse_set **out);
/* The same for documents added to index_dir: --sparse without --vocab reads string
 * terms through the index's stored vocabulary (tt_sparse_set_load_jsonl_index) when it
 * has one. */
int cli_sparse_load_for(const char *cmd, int bm25, const char *text, const char *sparse,
                        const char *corpus, const char *vocab, const char *index_dir,
                        tt_sparse_set **out);

#endif

/* External encoders (doc/encoder-protocol.md): the session shared by the files of
 * src/encoder/ — command.c (the no-shell command splitter), process.c (the child process
 * and its pipes), session.c (start, handshake, free), protocol.c (the framed run) and
 * to_npy.c (tt_encode_to_npy). */
#ifndef TT_ENCODER_H
#define TT_ENCODER_H

#include "input/records.h"

#include <stdbool.h>
#include <sys/types.h>

/* Protocol limits (doc/encoder-protocol.md sections 2-4); the record limits are in
 * input/records.h. */
#define TT_ENC_MAX_HELLO 4096u               /* bytes of the hello line, with '\n' */
#define TT_ENC_MAX_DIM 65536u
#define TT_ENC_MAX_VECTORS (1u << 20)        /* vectors in one reply */
#define TT_ENC_MAX_REPLY_DATA (1ull << 30)   /* bytes of vector data in one reply */
#define TT_ENC_STDERR_KEEP 4096u             /* stderr bytes kept for messages */
#define TT_ENC_MAX_TERMS 65536u              /* terms in one sparse part (protocol 2) */
#define TT_ENC_MAX_TERM 256u                 /* bytes of a term */

struct tt_encoder {
    char *name;                 /* the command, for messages */
    pid_t pid;                  /* > 0 while not reaped */
    int fd_in, fd_out, fd_err;  /* our ends; -1 once closed */
    int mode;
    tt_encoder_options opt;
    /* from the hello line */
    uint32_t dim, max_vectors;
    int dtype;
    uint32_t elem;              /* bytes per value on the wire */
    char *description;
    uint32_t version;           /* 1, or 2: every reply carries a sparse part */
    tt_sparse_sink_fn sparse_sink;
    void *sparse_user;
    const char **tptr;          /* one sparse part, parsed: term pointers, lengths, weights */
    size_t *tlen;
    float *tw;
    size_t tcap;
    /* stdout bytes not yet parsed: rbuf[rstart, rend) */
    uint8_t *rbuf;
    size_t rcap, rstart, rend;
    /* requests not yet written: wbuf[wpos, wlen) */
    uint8_t *wbuf;
    size_t wcap, wpos, wlen;
    /* FIFO of the ids of records sent and not yet answered */
    char **qid;
    size_t *qlen;
    size_t qcap, qhead, qcount;
    uint64_t sent, answered, total, done_count;
    float *vecs;                /* one reply converted to float32 */
    size_t vecs_cap;
    /* the last TT_ENC_STDERR_KEEP bytes of stderr, kept NUL-terminated */
    char err[TT_ENC_STDERR_KEEP + 1];
    size_t err_len;
    bool ran;
    bool reaped, killed, wait_unknown;
    int wstatus;
};

/* process.c */
int tt_enc_spawn(tt_encoder *e, const char *const *argv);
void tt_enc_close_fd(int *fd);
void tt_enc_drain_stderr(tt_encoder *e);
void tt_enc_kill_group(tt_encoder *e);
/* Waits up to wait_s seconds for the encoder to exit, then kills and reaps it. */
void tt_enc_reap(tt_encoder *e, double wait_s);
void tt_enc_describe_exit(const tt_encoder *e, char *buf, size_t n);
/* Records status and a message that ends with the encoder's stderr tail. */
int tt_enc_fail(tt_encoder *e, int status, const char *fmt, ...) TT_PRINTF(3, 4);
ssize_t tt_enc_write(int fd, const void *buf, size_t n, int *err);
/* Reads from the encoder's stdout until `need` bytes are buffered (or what is there). */
int tt_enc_read_stdout(tt_encoder *e, size_t need, int *st);
int tt_enc_ms_left(double deadline);
void tt_enc_show_bytes(const uint8_t *p, size_t n, char *buf, size_t cap);
/* session.c */
int tt_enc_check_start_args(const void *cmd, int mode);
int tt_enc_start(tt_encoder *e, const char *const *argv, int mode, const tt_encoder_options *opt);

/* ------------------------------------------------------ command line */

/* Splits a command string into words (doc/encoder-protocol.md section 1: blanks
 * separate, '...' literal, "..." with \" and \\, \c outside quotes; no expansion).
 * *argv is a malloc'd NULL-terminated array of malloc'd words (free with
 * tt_argv_free), *argc its length. Errors: TT_EINVAL (unterminated quote, trailing
 * backslash, no words), TT_ENOMEM. */
int tt_split_command(const char *cmd, char ***argv, size_t *argc);
void tt_argv_free(char **argv);

#endif

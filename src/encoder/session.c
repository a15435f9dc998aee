/* External encoders: options, the session's accessors, start with the hello handshake
 * (doc/encoder-protocol.md section 2), and free. */
#include "encoder/encoder.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static const char HELLO_MAGIC[] = "TARTAN-ENCODER ";

void tt_encoder_options_init(tt_encoder_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
    opt->timeout_ms = 300000;
    opt->startup_timeout_ms = 600000;
    opt->input_format = TT_REC_AUTO;
}

uint32_t tt_encoder_dim(const tt_encoder *enc) { return enc->dim; }
int tt_encoder_dtype(const tt_encoder *enc) { return enc->dtype; }
int tt_encoder_sparse(const tt_encoder *enc) { return enc && enc->version >= 2; }
void tt_encoder_set_sparse_sink(tt_encoder *enc, tt_sparse_sink_fn fn, void *user) {
    if (enc) {
        enc->sparse_sink = fn;
        enc->sparse_user = user;
    }
}
uint32_t tt_encoder_max_vectors(const tt_encoder *enc) { return enc->max_vectors; }
const char *tt_encoder_description(const tt_encoder *enc) { return enc->description; }

const char *tt_encoder_stderr_tail(const tt_encoder *enc) { return enc->err; }

/* A printable rendering of up to 16 bytes of unexpected output, for messages. */
void tt_enc_show_bytes(const uint8_t *p, size_t n, char *buf, size_t cap) {
    bool text = true;
    n = TT_MIN(n, 16);
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] >= 0x7f)
            text = p[i] == '\n' || p[i] == '\t' ? text : false;
    size_t k = 0;
    buf[0] = '\0';
    if (text) {
        buf[k++] = '"';
        for (size_t i = 0; i < n && k + 4 < cap; i++) {
            if (p[i] == '\n' || p[i] == '\t') {
                buf[k++] = '\\';
                buf[k++] = p[i] == '\n' ? 'n' : 't';
            } else {
                buf[k++] = (char)p[i];
            }
        }
        buf[k++] = '"';
        buf[k] = '\0';
    } else {
        for (size_t i = 0; i < n && k + 4 < cap; i++)
            k += (size_t)snprintf(buf + k, cap - k, "%s%02x", i ? " " : "", p[i]);
    }
}

static bool parse_u32(const char **p, uint32_t max, uint32_t *out) {
    const char *s = *p;
    uint64_t v = 0;
    if (!is_digit(*s))
        return false;
    while (is_digit(*s)) {
        v = v * 10 + (uint64_t)(*s - '0');
        if (v > max)
            return false;
        s++;
    }
    *p = s;
    *out = (uint32_t)v;
    return true;
}

/* The hello line (protocol section 2), without its '\n'. */
static int parse_hello(tt_encoder *e, char *line, size_t n) {
    if (n && line[n - 1] == '\r')
        line[--n] = '\0';
    const char *p = line + sizeof HELLO_MAGIC - 1;
    uint32_t version, dim, maxv;
    if (!parse_u32(&p, 1000000, &version) || *p != ' ')
        return tt_enc_fail(e, TT_EENCODER, "malformed hello line '%.200s'", line);
    if (version != 1 && version != 2)
        return tt_enc_fail(e, TT_EVERSION, "speaks protocol version %u; this tartan speaks 1 "
                        "and 2", version);
    e->version = version;
    p++;
    if (!parse_u32(&p, TT_ENC_MAX_DIM, &dim) || dim == 0 || *p != ' ')
        return tt_enc_fail(e, TT_EENCODER, "hello line '%.200s': dim must be 1..%u", line,
                        TT_ENC_MAX_DIM);
    p++;
    int dtype = !strncmp(p, "f32 ", 4) ? TT_ENC_F32 : !strncmp(p, "f16 ", 4) ? TT_ENC_F16 : 0;
    if (!dtype)
        return tt_enc_fail(e, TT_EENCODER, "hello line '%.200s': dtype must be f32 or f16", line);
    p += 4;
    if (!parse_u32(&p, TT_ENC_MAX_VECTORS, &maxv) || (*p != ' ' && *p != '\0'))
        return tt_enc_fail(e, TT_EENCODER, "hello line '%.200s': max_vectors must be 0..%u", line,
                        TT_ENC_MAX_VECTORS);
    if (*p == ' ')
        p++;
    for (const char *q = p; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            return tt_enc_fail(e, TT_EENCODER, "hello line: control character in the description");
    if (e->opt.expected_dim && dim != e->opt.expected_dim)
        return tt_enc_fail(e, TT_EDIM, "produces %u-dimensional vectors but %u are required",
                        dim, e->opt.expected_dim);
    e->description = strdup(p);
    if (!e->description)
        return tt_enc_fail(e, TT_ENOMEM, "cannot allocate the description");
    e->dim = dim;
    e->dtype = dtype;
    e->elem = dtype == TT_ENC_F32 ? 4 : 2;
    e->max_vectors = maxv;
    return TT_OK;
}

/* Reads the hello line within the startup timeout (protocol section 2). */
static int read_hello(tt_encoder *e) {
    double deadline = tt_now() + e->opt.startup_timeout_ms / 1000.0;
    const size_t magic_len = sizeof HELLO_MAGIC - 1;
    for (;;) {
        size_t have = e->rend - e->rstart;
        const uint8_t *p = e->rbuf ? e->rbuf + e->rstart : NULL;
        if (have && memcmp(p, HELLO_MAGIC, TT_MIN(have, magic_len))) {
            char shown[80];
            tt_enc_show_bytes(p, have, shown, sizeof shown);
            return tt_enc_fail(e, TT_EENCODER,
                            "expected the hello line 'TARTAN-ENCODER 1 ...' on stdout but got "
                            "%s (does it print to stdout?)", shown);
        }
        const uint8_t *nl = have ? memchr(p, '\n', have) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - p);
            char line[TT_ENC_MAX_HELLO + 1];
            memcpy(line, p, n);
            line[n] = '\0';
            e->rstart += n + 1;
            return parse_hello(e, line, n);
        }
        if (have >= TT_ENC_MAX_HELLO)
            return tt_enc_fail(e, TT_EENCODER, "hello line longer than %u bytes", TT_ENC_MAX_HELLO);
        if (e->opt.cancel && *e->opt.cancel)
            return tt_enc_fail(e, TT_ECANCELED, "cancelled while waiting for the hello line");
        struct pollfd pf[2] = {{e->fd_out, POLLIN, 0}, {e->fd_err, POLLIN, 0}};
        int nfd = e->fd_err >= 0 ? 2 : 1;
        int ms = tt_enc_ms_left(deadline);
        if (ms == 0)
            return tt_enc_fail(e, TT_ETIMEOUT, "no hello line within %.1f s (startup timeout; "
                            "killed)", e->opt.startup_timeout_ms / 1000.0);
        int pr = poll(pf, (nfds_t)nfd, ms);
        if (pr < 0 && errno != EINTR)
            return tt_enc_fail(e, TT_EIO, "poll: %s", strerror(errno));
        if (pr <= 0)
            continue;
        if (nfd == 2 && pf[1].revents)
            tt_enc_drain_stderr(e);
        if (pf[0].revents) {
            int st;
            int r = tt_enc_read_stdout(e, 0, &st);
            if (st)
                return tt_enc_fail(e, st, "reading the hello line");
            if (r == 0) {
                tt_enc_reap(e, TT_MIN(10.0, e->opt.timeout_ms / 1000.0));
                char how[96];
                tt_enc_describe_exit(e, how, sizeof how);
                bool nf = e->reaped && !e->killed && !e->wait_unknown &&
                          WIFEXITED(e->wstatus) && WEXITSTATUS(e->wstatus) == 127;
                return tt_enc_fail(e, nf ? TT_ENOTFOUND : TT_EENCODER, "%s before its hello line%s",
                                how, nf ? " (127: command not found?)" : "");
            }
        }
    }
}

int tt_enc_start(tt_encoder *e, const char *const *argv, int mode,
                          const tt_encoder_options *opt) {
    e->fd_in = e->fd_out = e->fd_err = -1;
    tt_encoder_options_init(&e->opt);
    if (opt) {
        size_t n = opt->struct_size && opt->struct_size < sizeof *opt ? opt->struct_size
                                                                      : sizeof *opt;
        memcpy(&e->opt, opt, n);
        e->opt.struct_size = sizeof e->opt;
    }
    if (e->opt.timeout_ms == 0)
        e->opt.timeout_ms = 300000;
    if (e->opt.startup_timeout_ms == 0)
        e->opt.startup_timeout_ms = 600000;
    e->mode = mode;
    /* The command as the user would read it, for messages. */
    tt_sbuf nm = {0};
    for (size_t i = 0; argv[i]; i++) {
        if ((i && tt_sbuf_append(&nm, " ", 1)) || tt_sbuf_append(&nm, argv[i], strlen(argv[i]))) {
            tt_sbuf_free(&nm);
            return tt_err(TT_ENOMEM, "encoder: cannot allocate");
        }
    }
    if (nm.len > 160) {
        nm.len = 157;
        tt_sbuf_append(&nm, "...", 3);
    }
    if (!tt_sbuf_cstr(&nm)) {
        tt_sbuf_free(&nm);
        return tt_err(TT_ENOMEM, "encoder: cannot allocate");
    }
    e->name = nm.p;
    int st = tt_enc_spawn(e, argv);
    if (st)
        return st;
    return read_hello(e);
}

int tt_enc_check_start_args(const void *cmd, int mode) {
    if (!cmd)
        return tt_err(TT_EINVAL, "encoder: no command given");
    if (mode != TT_ENC_PASSAGE && mode != TT_ENC_QUERY)
        return tt_err(TT_EINVAL, "encoder: mode must be TT_ENC_PASSAGE or TT_ENC_QUERY, not %d",
                      mode);
    return TT_OK;
}

int tt_encoder_start_argv(tt_encoder **out, const char *const *argv, int mode,
                          const tt_encoder_options *opt) {
    if (!out)
        return tt_err(TT_EINVAL, "encoder: out is NULL");
    *out = NULL;
    int st = tt_enc_check_start_args(argv, mode);
    if (st)
        return st;
    if (!argv[0] || !argv[0][0])
        return tt_err(TT_EINVAL, "encoder: empty command");
    tt_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return tt_err(TT_ENOMEM, "encoder: cannot allocate a session");
    st = tt_enc_start(e, argv, mode, opt);
    if (st) {
        tt_encoder_free(e); /* keeps the message: free never sets errors */
        return st;
    }
    *out = e;
    return TT_OK;
}

int tt_encoder_start(tt_encoder **out, const char *command, int mode,
                     const tt_encoder_options *opt) {
    if (!out)
        return tt_err(TT_EINVAL, "encoder: out is NULL");
    *out = NULL;
    int st = tt_enc_check_start_args(command, mode);
    if (st)
        return st;
    char **argv;
    if ((st = tt_split_command(command, &argv, NULL)))
        return st;
    st = tt_encoder_start_argv(out, (const char *const *)argv, mode, opt);
    tt_argv_free(argv);
    return st;
}

void tt_encoder_free(tt_encoder *e) {
    if (!e)
        return;
    tt_enc_close_fd(&e->fd_in);
    tt_enc_close_fd(&e->fd_out);
    if (e->pid > 0) {
        tt_enc_kill_group(e);
        tt_enc_reap(e, 0);
    }
    tt_enc_close_fd(&e->fd_err);
    for (size_t i = 0; i < e->qcount; i++)
        free(e->qid[(e->qhead + i) % e->qcap]);
    free(e->qid);
    free(e->qlen);
    free(e->name);
    free(e->description);
    free(e->rbuf);
    free(e->wbuf);
    free(e->vecs);
    free(e->tptr);
    free(e->tlen);
    free(e->tw);
    free(e);
}

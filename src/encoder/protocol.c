/* External encoders: the run. Framed requests out, framed replies in, one poll() loop
 * (doc/encoder-protocol.md sections 3-5). */
#include "encoder/encoder.h"

#include <math.h>

#include "common/strtab.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WBUF_LOW (512u << 10)   /* top up the request buffer below this many bytes */

static const uint8_t TAG_VECS[4] = {'V', 'E', 'C', 'S'};
static const uint8_t TAG_DONE[4] = {'D', 'O', 'N', 'E'};
static const uint8_t TAG_SPRS[4] = {'S', 'P', 'R', 'S'};

/* Protocol 2: the sparse part that follows each reply's vectors, at p (have bytes).
 * Returns 1 with *len its size and the terms parsed into e->tptr/tlen/tw (*nt of them),
 * 0 if more bytes are needed (*len: at least how many), or a negative status. */
static int parse_sparse(tt_encoder *e, const uint8_t *p, size_t have, size_t *len,
                        uint32_t *nt, const char *id) {
    *len = 8;
    if (have < 8)
        return 0;
    if (memcmp(p, TAG_SPRS, 4)) {
        char shown[80];
        tt_enc_show_bytes(p, have, shown, sizeof shown);
        return tt_enc_fail(e, TT_EENCODER, "record #%llu '%.100s': protocol 2 expects the sparse "
                           "part \"SPRS\" after the vectors but got %s",
                           (unsigned long long)e->answered + 1, id, shown);
    }
    uint32_t n = tt_rd32(p + 4);
    if (n > TT_ENC_MAX_TERMS)
        return tt_enc_fail(e, TT_EENCODER, "record #%llu '%.100s': %u sparse terms is more than "
                           "%u", (unsigned long long)e->answered + 1, id, n, TT_ENC_MAX_TERMS);
    if (n > e->tcap) {
        size_t cap = TT_MAX((size_t)n, 2 * e->tcap);
        const char **tp = realloc(e->tptr, cap * sizeof *tp);
        if (tp)
            e->tptr = tp;
        size_t *tl = realloc(e->tlen, cap * sizeof *tl);
        if (tl)
            e->tlen = tl;
        float *tw = realloc(e->tw, cap * sizeof *tw);
        if (tw)
            e->tw = tw;
        if (!tp || !tl || !tw)
            return tt_enc_fail(e, TT_ENOMEM, "cannot allocate %u sparse terms", n);
        e->tcap = cap;
    }
    size_t off = 8;
    for (uint32_t i = 0; i < n; i++) {
        *len = off + 4;
        if (have < *len)
            return 0;
        uint32_t tl = tt_rd32(p + off);
        if (tl == 0 || tl > TT_ENC_MAX_TERM)
            return tt_enc_fail(e, TT_EVALUE, "record #%llu '%.100s': sparse term %u has length %u "
                               "(1..%u)", (unsigned long long)e->answered + 1, id, i + 1, tl,
                               TT_ENC_MAX_TERM);
        *len = off + 4 + tl + 4;
        if (have < *len)
            return 0;
        e->tptr[i] = (const char *)p + off + 4;
        e->tlen[i] = tl;
        e->tw[i] = tt_rdf32(p + off + 4 + tl);
        if (!isfinite(e->tw[i]) || e->tw[i] < 0)
            return tt_enc_fail(e, TT_EVALUE, "record #%llu '%.100s': sparse term '%.*s' has weight "
                               "%g (weights must be finite and >= 0)",
                               (unsigned long long)e->answered + 1, id, (int)tl,
                               e->tptr[i], (double)e->tw[i]);
        off = *len;
    }
    *len = off;
    *nt = n;
    return 1;
}

/* ------------------------------------------------------------- the run */

static int queue_push(tt_encoder *e, const char *id, size_t len) {
    if (e->qcount == e->qcap) {
        size_t ncap = e->qcap ? e->qcap * 2 : 256;
        char **nid = malloc(ncap * sizeof *nid);
        size_t *nlen = malloc(ncap * sizeof *nlen);
        if (!nid || !nlen) {
            free(nid);
            free(nlen);
            return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate the pending-id queue",
                          e->name);
        }
        for (size_t i = 0; i < e->qcount; i++) {
            nid[i] = e->qid[(e->qhead + i) % e->qcap];
            nlen[i] = e->qlen[(e->qhead + i) % e->qcap];
        }
        free(e->qid);
        free(e->qlen);
        e->qid = nid;
        e->qlen = nlen;
        e->qcap = ncap;
        e->qhead = 0;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate", e->name);
    memcpy(copy, id, len);
    copy[len] = '\0';
    size_t slot = (e->qhead + e->qcount) % e->qcap;
    e->qid[slot] = copy;
    e->qlen[slot] = len;
    e->qcount++;
    return TT_OK;
}

static void queue_pop(tt_encoder *e) {
    free(e->qid[e->qhead]);
    e->qhead = (e->qhead + 1) % e->qcap;
    e->qcount--;
}

/* Appends one request frame (protocol section 3) to the write buffer. */
static int put_request(tt_encoder *e, const tt_record *rec) {
    size_t need = 8 + rec->id_len + rec->text_len;
    if (e->wpos > 0) { /* compact */
        memmove(e->wbuf, e->wbuf + e->wpos, e->wlen - e->wpos);
        e->wlen -= e->wpos;
        e->wpos = 0;
    }
    if (e->wcap - e->wlen < need) {
        size_t ncap = TT_MAX(e->wlen + need, (size_t)WBUF_LOW * 2);
        uint8_t *p = realloc(e->wbuf, ncap);
        if (!p)
            return tt_err(TT_ENOMEM, "encoder '%s': cannot allocate %zu bytes for requests",
                          e->name, ncap);
        e->wbuf = p;
        e->wcap = ncap;
    }
    uint8_t *w = e->wbuf + e->wlen;
    tt_wr32(w, (uint32_t)rec->id_len);
    memcpy(w + 4, rec->id, rec->id_len);
    tt_wr32(w + 4 + rec->id_len, (uint32_t)rec->text_len);
    if (rec->text_len)
        memcpy(w + 8 + rec->id_len, rec->text, rec->text_len);
    e->wlen += need;
    return TT_OK;
}

/* What tartan is waiting for, for messages. */
static void waiting_for(const tt_encoder *e, char *buf, size_t n) {
    if (e->qcount)
        snprintf(buf, n, "the reply to record #%llu '%.100s' (%llu of the %llu records sent "
                 "so far were answered)", (unsigned long long)e->answered + 1, e->qid[e->qhead],
                 (unsigned long long)e->answered, (unsigned long long)e->sent);
    else
        snprintf(buf, n, "the end marker (%llu records answered)",
                 (unsigned long long)e->answered);
}

/* Converts and checks one reply's values into e->vecs. */
static int convert(tt_encoder *e, const uint8_t *data, uint32_t n, const char *id) {
    uint64_t count = (uint64_t)n * e->dim;
    if (count > e->vecs_cap) {
        float *p = realloc(e->vecs, (size_t)count * sizeof *p);
        if (!p)
            return tt_enc_fail(e, TT_ENOMEM, "cannot allocate %llu floats for record '%.100s'",
                            (unsigned long long)count, id);
        e->vecs = p;
        e->vecs_cap = (size_t)count;
    }
    if (e->dtype == TT_ENC_F32) {
        if (tt_host_is_le())
            memcpy(e->vecs, data, (size_t)count * 4);
        else
            for (uint64_t i = 0; i < count; i++)
                e->vecs[i] = tt_rdf32(data + 4 * i);
    } else {
        for (uint64_t i = 0; i < count; i++)
            e->vecs[i] = tt_f16_to_f32(tt_rd16(data + 2 * i));
    }
    int64_t bad = n ? tt_find_nonfinite(e->vecs, n, e->dim) : -1;
    if (bad >= 0)
        return tt_enc_fail(e, TT_EVALUE, "record #%llu '%.100s': vector %lld of %u contains NaN "
                        "or Inf", (unsigned long long)e->answered + 1, id, (long long)bad + 1, n);
    return TT_OK;
}

/* Parses one frame from rbuf. Returns 1 if one was consumed, 0 if more bytes are needed
 * (*need: how many unparsed bytes the frame takes), or a negative status. */
static int parse_one(tt_encoder *e, tt_vectors_sink_fn sink, void *sink_user, bool *got_done,
                     size_t *need) {
    size_t have = e->rend - e->rstart;
    const uint8_t *p = e->rbuf + e->rstart;
    *need = 4;
    if (have < 4)
        return 0;
    if (!memcmp(p, TAG_DONE, 4)) {
        *need = 12;
        if (have < 12)
            return 0;
        e->done_count = tt_rd64(p + 4);
        e->rstart += 12;
        *got_done = true;
        return 1;
    }
    if (memcmp(p, TAG_VECS, 4)) {
        char shown[80], hint[160] = "";
        tt_enc_show_bytes(p, have, shown, sizeof shown);
        if (e->answered)
            snprintf(hint, sizeof hint, "; if the previous reply was not %u values of %s per "
                     "vector, the stream lost its framing", e->dim,
                     e->dtype == TT_ENC_F32 ? "f32" : "f16");
        return tt_enc_fail(e, TT_EENCODER, "garbage on stdout: expected a reply tag \"VECS\" or "
                        "\"DONE\" after %llu replies but got %s%s",
                        (unsigned long long)e->answered, shown, hint);
    }
    *need = 8;
    if (have < 8)
        return 0;
    uint32_t idlen = tt_rd32(p + 4);
    if (idlen == 0 || idlen > TT_ENC_MAX_ID)
        return tt_enc_fail(e, TT_EENCODER, "reply %llu: id length %u out of range 1..%u "
                        "(garbage on stdout?)", (unsigned long long)e->answered + 1, idlen,
                        TT_ENC_MAX_ID);
    *need = 12 + (size_t)idlen;
    if (have < *need)
        return 0;
    const char *rid = (const char *)p + 8;
    uint32_t n = tt_rd32(p + 8 + idlen);
    uint32_t limit = e->max_vectors ? e->max_vectors : TT_ENC_MAX_VECTORS;
    uint64_t bytes = (uint64_t)n * e->dim * e->elem;
    if (n > limit || bytes > TT_ENC_MAX_REPLY_DATA)
        return tt_enc_fail(e, TT_EENCODER, "reply %llu (id '%.*s'): %u vectors is more than %s %u "
                        "(garbage on stdout?)", (unsigned long long)e->answered + 1,
                        (int)TT_MIN(idlen, 100), rid, n,
                        e->max_vectors ? "its declared max_vectors" : "the protocol limit",
                        limit);
    *need += (size_t)bytes;
    if (have < *need)
        return 0;
    if (e->qcount == 0)
        return tt_enc_fail(e, TT_EENCODER, "too many replies: reply %llu (id '%.*s') but only "
                        "%llu records were sent, all answered", (unsigned long long)e->answered
                        + 1, (int)TT_MIN(idlen, 100), rid, (unsigned long long)e->sent);
    const char *want = e->qid[e->qhead];
    size_t wlen = e->qlen[e->qhead];
    if (wlen != idlen || memcmp(want, rid, idlen))
        return tt_enc_fail(e, TT_EENCODER, "replies out of order or missing: expected the reply to "
                        "record #%llu '%.100s' but got id '%.*s'",
                        (unsigned long long)e->answered + 1, want, (int)TT_MIN(idlen, 100), rid);
    uint32_t nt = 0;
    if (e->version >= 2) {
        size_t slen;
        int r = parse_sparse(e, p + *need, have - *need, &slen, &nt, want);
        if (r < 0)
            return r;
        if (r == 0) {
            *need += slen;
            return 0;
        }
        *need += slen;
    }
    int st = convert(e, p + 12 + idlen, n, want);
    if (st)
        return st;
    e->rstart += *need;
    st = sink(sink_user, e->answered, want, wlen, n, e->vecs);
    if (st >= 0 && e->sparse_sink)
        st = e->sparse_sink(e->sparse_user, e->answered, want, wlen, nt, e->tptr, e->tlen, e->tw);
    if (st < 0) {
        int keep = st;
        if (e->pid > 0) { /* the sink's own message stays */
            tt_enc_kill_group(e);
            tt_enc_reap(e, 0);
        }
        return keep;
    }
    queue_pop(e);
    e->answered++;
    if (e->opt.progress)
        e->opt.progress(e->opt.progress_user, "encode", e->answered, e->total);
    return 1;
}

/* After the end marker: the encoder must close stdout without more bytes and exit 0
 * within the timeout. */
static int finish(tt_encoder *e, bool src_done) {
    char what[256];
    if (!src_done || e->fd_in >= 0)
        return tt_enc_fail(e, TT_EENCODER, "sent its end marker after %llu replies, before tartan "
                        "finished sending records (%llu sent so far)",
                        (unsigned long long)e->answered, (unsigned long long)e->sent);
    if (e->qcount) {
        waiting_for(e, what, sizeof what);
        return tt_enc_fail(e, TT_EENCODER, "wrong record count: end marker while tartan waited "
                        "for %s", what);
    }
    if (e->done_count != e->answered)
        return tt_enc_fail(e, TT_EENCODER, "wrong record count: its end marker says %llu replies "
                        "but it wrote %llu", (unsigned long long)e->done_count,
                        (unsigned long long)e->answered);
    double timeout = e->opt.timeout_ms / 1000.0, deadline = tt_now() + timeout;
    for (;;) {
        if (e->rend > e->rstart) {
            char shown[80];
            tt_enc_show_bytes(e->rbuf + e->rstart, e->rend - e->rstart, shown, sizeof shown);
            return tt_enc_fail(e, TT_EENCODER, "trailing bytes after its end marker: %s", shown);
        }
        struct pollfd pf[2] = {{e->fd_out, POLLIN, 0}, {e->fd_err, POLLIN, 0}};
        int ms = tt_enc_ms_left(deadline);
        if (ms == 0)
            return tt_enc_fail(e, TT_ETIMEOUT, "did not close its output within %.1f s after its "
                            "end marker (killed)", timeout);
        int pr = poll(pf, e->fd_err >= 0 ? 2 : 1, ms);
        if (pr < 0 && errno != EINTR)
            return tt_enc_fail(e, TT_EIO, "poll: %s", strerror(errno));
        if (pr <= 0)
            continue;
        if (e->fd_err >= 0 && pf[1].revents)
            tt_enc_drain_stderr(e);
        if (pf[0].revents) {
            int st;
            int r = tt_enc_read_stdout(e, 0, &st);
            if (st)
                return tt_enc_fail(e, st, "reading its output");
            if (r == 0)
                break;
        }
    }
    tt_enc_close_fd(&e->fd_out);
    tt_enc_reap(e, TT_MAX(0.0, deadline - tt_now()));
    char how[96];
    tt_enc_describe_exit(e, how, sizeof how);
    if (e->killed)
        return tt_enc_fail(e, TT_ETIMEOUT, "did not exit within %.1f s after its end marker "
                        "(killed)", timeout);
    if (!e->wait_unknown && !(WIFEXITED(e->wstatus) && WEXITSTATUS(e->wstatus) == 0))
        return tt_enc_fail(e, TT_EENCODER, "%s after answering all %llu records", how,
                        (unsigned long long)e->answered);
    tt_enc_close_fd(&e->fd_err);
    return TT_OK;
}

int tt_encoder_run(tt_encoder *e, tt_record_source_fn source, void *source_user,
                   tt_vectors_sink_fn sink, void *sink_user) {
    if (!e || !source || !sink)
        return tt_err(TT_EINVAL, "tt_encoder_run: NULL argument");
    if (e->ran || e->pid <= 0)
        return tt_err(TT_EINVAL, "encoder '%s': a session runs once (start a new one)", e->name);
    e->ran = true;
    const double timeout = e->opt.timeout_ms / 1000.0;
    bool src_done = false, got_done = false;
    double last = tt_now();
    size_t need = 0;
    char what[256];
    while (!got_done) {
        if (e->opt.cancel && *e->opt.cancel)
            return tt_enc_fail(e, TT_ECANCELED, "cancelled after %llu of the records were "
                               "answered", (unsigned long long)e->answered);
        /* 1. Keep up to WBUF_LOW bytes of requests ready. Records are sent without
         * waiting for replies, so an encoder reading B records per batch never starves. */
        while (!src_done && e->fd_in >= 0 && e->wlen - e->wpos < WBUF_LOW) {
            tt_record rec;
            memset(&rec, 0, sizeof rec);
            int r = source(source_user, &rec);
            last = tt_now();
            if (r < 0) {
                int keep = r;
                tt_enc_kill_group(e);
                tt_enc_reap(e, 0);
                return keep;
            }
            if (r == 0) {
                src_done = true;
                break;
            }
            const char *bad = rec.id ? tt_record_id_problem(rec.id, rec.id_len) : "NULL id";
            if (bad || (!rec.text && rec.text_len) || rec.text_len > TT_ENC_MAX_TEXT)
                return tt_enc_fail(e, TT_EINVAL, "record #%llu: %s", (unsigned long long)e->sent + 1,
                                bad ? bad : "text NULL or longer than 64 MiB");
            int st = put_request(e, &rec);
            if (!st)
                st = queue_push(e, rec.id, rec.id_len);
            if (st)
                return tt_enc_fail(e, st, "queueing record #%llu", (unsigned long long)e->sent + 1);
            e->sent++;
        }
        if (src_done && e->fd_in >= 0 && e->wpos == e->wlen)
            tt_enc_close_fd(&e->fd_in); /* EOF at a record boundary: no more records */
        /* 2. Wait for any pipe, or for the no-progress timeout. */
        struct pollfd pf[3];
        int np = 0, iout = -1, iin = -1, ierr = -1;
        if (e->fd_out >= 0) {
            pf[np] = (struct pollfd){e->fd_out, POLLIN, 0};
            iout = np++;
        }
        if (e->fd_in >= 0 && e->wpos < e->wlen) {
            pf[np] = (struct pollfd){e->fd_in, POLLOUT, 0};
            iin = np++;
        }
        if (e->fd_err >= 0) {
            pf[np] = (struct pollfd){e->fd_err, POLLIN, 0};
            ierr = np++;
        }
        int ms = tt_enc_ms_left(last + timeout);
        if (ms == 0) {
            waiting_for(e, what, sizeof what);
            return tt_enc_fail(e, TT_ETIMEOUT, "no progress for %.1f s while tartan waited for %s "
                            "(killed)", timeout, what);
        }
        int pr = poll(pf, (nfds_t)np, ms);
        if (pr < 0 && errno != EINTR)
            return tt_enc_fail(e, TT_EIO, "poll: %s", strerror(errno));
        if (pr <= 0)
            continue;
        if (ierr >= 0 && pf[ierr].revents)
            tt_enc_drain_stderr(e);
        /* 3. Requests. */
        if (iin >= 0 && pf[iin].revents) {
            int err;
            ssize_t w = tt_enc_write(e->fd_in, e->wbuf + e->wpos, e->wlen - e->wpos, &err);
            if (w > 0) {
                e->wpos += (size_t)w;
                last = tt_now();
                if (e->wpos == e->wlen)
                    e->wpos = e->wlen = 0;
            } else if (w < 0 && err == EPIPE) {
                /* It closed stdin (or died): stop sending, read on to learn why. */
                tt_enc_close_fd(&e->fd_in);
                e->wpos = e->wlen = 0;
            } else if (w < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
                return tt_enc_fail(e, TT_EIO, "writing records: %s", strerror(err));
            }
        }
        /* 4. Replies. */
        if (iout >= 0 && pf[iout].revents) {
            int st;
            int r = tt_enc_read_stdout(e, need, &st);
            if (st)
                return tt_enc_fail(e, st, "reading its output");
            if (r > 0) {
                last = tt_now();
                for (;;) {
                    int k = parse_one(e, sink, sink_user, &got_done, &need);
                    if (k < 0)
                        return k;
                    if (k == 0 || got_done)
                        break;
                    last = tt_now();
                }
            } else if (r == 0) {
                /* stdout closed without the end marker: it died or quit. */
                tt_enc_close_fd(&e->fd_out);
                size_t partial = e->rend - e->rstart;
                waiting_for(e, what, sizeof what);
                tt_enc_reap(e, TT_MIN(10.0, timeout));
                char how[96], part[64] = "";
                tt_enc_describe_exit(e, how, sizeof how);
                if (partial)
                    snprintf(part, sizeof part, " (after %zu bytes of a partial reply)", partial);
                return tt_enc_fail(e, TT_EENCODER, "%s while tartan waited for %s%s", how, what,
                                part);
            }
        }
    }
    return finish(e, src_done);
}

/* ------------------------------------------------------------ files */

/* The records of a file (whose reader checks each id), each id seen only once: ids
 * name documents and queries in runs. Errors name the file and line. */
typedef struct file_source {
    tt_records *r;
    const char *path;
    tt_strtab seen;
} file_source;

static int records_source(void *user, tt_record *rec) {
    file_source *fs = user;
    int st = tt_records_next(fs->r, rec);
    if (st != 1)
        return st;
    unsigned long long line = (unsigned long long)tt_records_line(fs->r);
    uint32_t first;
    bool added;
    if ((st = tt_st_intern(&fs->seen, rec->id, rec->id_len, &first, &added)))
        return st;
    if (!added)
        return tt_err(TT_EPARSE, "%s:%llu: duplicate id '%.*s' (also record #%u)", fs->path,
                      line, (int)TT_MIN(rec->id_len, 200), rec->id, first + 1);
    return 1;
}

int tt_encoder_encode_file(tt_encoder *enc, const char *input_path, tt_vectors_sink_fn sink,
                           void *sink_user) {
    if (!enc || !input_path || !sink)
        return tt_err(TT_EINVAL, "tt_encoder_encode_file: NULL argument");
    tt_records *r = NULL;
    int st = tt_records_open(&r, input_path, enc->opt.input_format, enc->mode);
    if (st) {
        /* As after any failed run: the session is over and no process is left. */
        enc->ran = true;
        if (enc->pid > 0) {
            tt_enc_kill_group(enc);
            tt_enc_reap(enc, 0);
        }
        return st;
    }
    if (enc->opt.progress)
        enc->total = tt_records_count(input_path, enc->opt.input_format);
    file_source fs = {.r = r, .path = input_path};
    st = tt_encoder_run(enc, records_source, &fs, sink, sink_user);
    tt_st_free(&fs.seen);
    tt_records_close(r);
    return st;
}

/* tartan encode: an encoder's vectors for a record file written as .npy files, aside
 * and renamed on success. */
#include "encoder/encoder.h"

#include "input/npy.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

enum { OUT_VECTORS, OUT_DOCLENS, OUT_IDS, OUT_ENCODER, NOUT };
static const char *const out_suffix[NOUT] = {".vectors.npy", ".doclens.npy", ".ids.txt",
                                             ".encoder.txt"};

typedef struct npy_sink {
    tt_npy_writer vec, len;
    bool vec_open, len_open;
    FILE *ids;
    const char *ids_path;
    int64_t lens[4096];
    size_t nlens;
    uint64_t records, vectors;
} npy_sink;

static int flush_lens(npy_sink *s) {
    int st = tt_npy_writer_append(&s->len, s->lens, s->nlens);
    s->nlens = 0;
    return st;
}

static int npy_sink_fn(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                       const float *vectors) {
    npy_sink *s = user;
    if (n == 0)
        return tt_err(TT_EVALUE, "record #%llu '%.*s': the encoder gave 0 vectors; an indexed "
                      "document or query needs at least one", (unsigned long long)index + 1,
                      (int)TT_MIN(id_len, 100), id);
    int st = tt_npy_writer_append(&s->vec, vectors, n);
    if (st)
        return st;
    s->lens[s->nlens++] = n;
    if (s->nlens == sizeof s->lens / sizeof s->lens[0] && (st = flush_lens(s)))
        return st;
    if (fwrite(id, 1, id_len, s->ids) != id_len || putc('\n', s->ids) == EOF)
        return tt_err_errno(TT_EIO, errno, "%s: write failed", s->ids_path);
    s->records++;
    s->vectors += n;
    return TT_OK;
}

static int close_text(FILE **f, const char *path) {
    int st = TT_OK;
    if (fflush(*f) != 0 || fsync(fileno(*f)) != 0)
        st = tt_err_errno(TT_EIO, errno, "%s: write failed", path);
    if (fclose(*f) != 0 && !st)
        st = tt_err_errno(TT_EIO, errno, "%s: close failed", path);
    *f = NULL;
    return st;
}

/* fsync of the directory holding `path`, so the renames survive a crash. */
static int sync_dir_of(const char *path) {
    char *copy = strdup(path);
    if (!copy)
        return tt_err(TT_ENOMEM, "%s: out of memory", path);
    const char *dir = dirname(copy);
    int st = TT_OK, fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0)
        st = tt_err_errno(TT_EIO, errno, "%s: cannot sync the directory", dir);
    if (fd >= 0)
        close(fd);
    free(copy);
    return st;
}

/* Protocol 2: each record's sparse part appended to the caller's set. */
static int sparse_sink_fn(void *user, uint64_t index, const char *id, size_t id_len, uint32_t n,
                          const char *const *terms, const size_t *term_lens,
                          const float *weights) {
    (void)index;
    return tt_sparse_set_add(user, id, id_len, n, terms, term_lens, weights);
}

int tt_encode_to_npy(const char *command, const char *input_path, int mode,
                     const char *out_prefix, const tt_encoder_options *opt,
                     tt_encode_stats *stats) {
    char *final[NOUT] = {0}, *tmp[NOUT] = {0};
    npy_sink s;
    tt_encoder *e = NULL;
    FILE *desc = NULL;
    int st = TT_OK;
    double t0 = tt_now();
    memset(&s, 0, sizeof s);
    if (stats)
        memset(stats, 0, sizeof *stats);
    if (!command || !input_path || !out_prefix || !*out_prefix)
        return tt_err(TT_EINVAL, "tt_encode_to_npy: NULL or empty argument");
    tt_encoder_options o;
    tt_encoder_options_init(&o);
    if (opt)
        memcpy(&o, opt, opt->struct_size && opt->struct_size < sizeof o ? opt->struct_size
                                                                         : sizeof o);
    o.struct_size = sizeof o;
    for (int k = 0; k < NOUT; k++) {
        size_t L = strlen(out_prefix) + strlen(out_suffix[k]) + 32;
        final[k] = malloc(L);
        tmp[k] = malloc(L);
        if (!final[k] || !tmp[k]) {
            st = tt_err(TT_ENOMEM, "%s: out of memory", out_prefix);
            goto done;
        }
        snprintf(final[k], L, "%s%s", out_prefix, out_suffix[k]);
        /* Temporaries named by pid: concurrent runs into one prefix never share one. */
        snprintf(tmp[k], L, "%s%s.tmp-%ld", out_prefix, out_suffix[k], (long)getpid());
        struct stat sb;
        if (!o.force && stat(final[k], &sb) == 0) {
            st = tt_err(TT_EEXIST, "%s exists (force replaces it)", final[k]);
            goto done;
        }
    }
    /* Start the encoder first: its hello gives the dimension of the vectors file. */
    char **argv = NULL;
    if ((st = tt_split_command(command, &argv, NULL)))
        goto done;
    if ((st = tt_enc_check_start_args(argv, mode)) == TT_OK) {
        e = calloc(1, sizeof *e);
        st = e ? tt_enc_start(e, (const char *const *)argv, mode, &o)
               : tt_err(TT_ENOMEM, "encoder: cannot allocate a session");
    }
    tt_argv_free(argv);
    if (st)
        goto done;
    if ((st = tt_npy_writer_open(&s.vec, tmp[OUT_VECTORS], TT_DT_F32, e->dim)))
        goto done;
    s.vec_open = true;
    if ((st = tt_npy_writer_open(&s.len, tmp[OUT_DOCLENS], TT_DT_I64, 0)))
        goto done;
    s.len_open = true;
    s.ids_path = tmp[OUT_IDS];
    if (!(s.ids = fopen(tmp[OUT_IDS], "wb"))) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot create", tmp[OUT_IDS]);
        goto done;
    }
    if (o.sparse_out && tt_encoder_sparse(e))
        tt_encoder_set_sparse_sink(e, sparse_sink_fn, o.sparse_out);
    if ((st = tt_encoder_encode_file(e, input_path, npy_sink_fn, &s)))
        goto done;
    if (s.records == 0) {
        st = tt_err(TT_EVALUE, "%s: no records to encode", input_path);
        goto done;
    }
    if ((st = flush_lens(&s)))
        goto done;
    s.vec_open = false; /* close (fsync) aborts and removes the file on failure */
    if ((st = tt_npy_writer_close(&s.vec)))
        goto done;
    s.len_open = false;
    if ((st = tt_npy_writer_close(&s.len)))
        goto done;
    if ((st = close_text(&s.ids, tmp[OUT_IDS])))
        goto done;
    if (!(desc = fopen(tmp[OUT_ENCODER], "wb"))) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot create", tmp[OUT_ENCODER]);
        goto done;
    }
    if (fprintf(desc, "%s\n", e->description) < 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: write failed", tmp[OUT_ENCODER]);
        goto done;
    }
    if ((st = close_text(&desc, tmp[OUT_ENCODER])))
        goto done;
    /* Publish: the ids last, so a complete set of names is the sign of a finished run. */
    static const int order[NOUT] = {OUT_VECTORS, OUT_DOCLENS, OUT_ENCODER, OUT_IDS};
    for (int k = 0; k < NOUT; k++) {
        int j = order[k];
        if (rename(tmp[j], final[j]) != 0) {
            st = tt_err_errno(TT_EIO, errno, "%s: cannot rename to %s", tmp[j], final[j]);
            goto done;
        }
    }
    st = sync_dir_of(final[OUT_IDS]);
done:
    if (s.vec_open)
        tt_npy_writer_abort(&s.vec);
    if (s.len_open)
        tt_npy_writer_abort(&s.len);
    if (s.ids)
        fclose(s.ids);
    if (desc)
        fclose(desc);
    for (int k = 0; k < NOUT; k++) {
        if (st && tmp[k])
            unlink(tmp[k]); /* ENOENT when never created or already renamed: fine */
        free(tmp[k]);
        free(final[k]);
    }
    if (stats) {
        stats->records = s.records;
        stats->vectors = s.vectors;
        stats->seconds = tt_now() - t0;
        if (e) {
            stats->dim = e->dim;
            stats->dtype = e->dtype;
            snprintf(stats->description, sizeof stats->description, "%s",
                     e->description ? e->description : "");
            snprintf(stats->stderr_tail, sizeof stats->stderr_tail, "%s",
                     tt_encoder_stderr_tail(e));
        }
    }
    tt_encoder_free(e);
    return st;
}

/* Texts through an encoder into a spool of .npy files, opened as a build input: what
 * `tartan build --encoder` and `tartan add --encoder` index. The spool is a directory
 * made with mkdtemp beside the output (same file system), removed afterwards. */
#include "cli.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_spool_remove(cli_spool *sp) {
    tt_input_free(sp->in);
    sp->in = NULL;
    tt_sparse_set_free(sp->sparse);
    sp->sparse = NULL;
    if (!sp->dir[0])
        return;
    /* Only what tartan encode wrote there (all named "passages."), then the directory
     * if nothing else is left in it. */
    DIR *d = opendir(sp->dir);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d)))
            if (!strncmp(de->d_name, "passages.", 9))
                unlinkat(dirfd(d), de->d_name, 0);
        closedir(d);
    }
    rmdir(sp->dir);
    sp->dir[0] = '\0';
}

int cli_spool_encode(const char *cmd, const char *encoder, const char *corpus,
                     uint32_t timeout_ms, const char *beside, cli_spool *sp) {
    char prefix[4300], v[4400], l[4400], ids[4400];
    memset(sp, 0, sizeof *sp);
    snprintf(sp->dir, sizeof sp->dir, "%s.encode-XXXXXX", beside);
    if (!mkdtemp(sp->dir)) {
        fprintf(stderr, "tartan %s: error: %s: cannot create the encoder spool directory\n", cmd,
                sp->dir);
        sp->dir[0] = '\0';
        return CLI_FAIL;
    }
    snprintf(prefix, sizeof prefix, "%s/passages", sp->dir);
    tt_encoder_options eo;
    tt_encoder_options_init(&eo);
    eo.cancel = (const volatile int *)&cli_cancel;
    if (timeout_ms)
        eo.timeout_ms = timeout_ms;
    cli_progress_state ps;
    cli_progress_init(&ps);
    eo.progress = cli_progress;
    eo.progress_user = &ps;
    tt_encode_stats es;
    int st = tt_sparse_set_new_weights(&sp->sparse);
    if (st)
        return cli_fail(cmd, st);
    eo.sparse_out = sp->sparse;
    st = tt_encode_to_npy(encoder, corpus, TT_ENC_PASSAGE, prefix, &eo, &es);
    if (!st && tt_sparse_set_size(sp->sparse) == 0) { /* a protocol-1 encoder */
        tt_sparse_set_free(sp->sparse);
        sp->sparse = NULL;
    }
    cli_progress_done(&ps);
    if (st)
        return st == TT_ECANCELED ? CLI_FAIL : cli_fail(cmd, st);
    fprintf(stderr, "encoded %llu passages into %llu vectors x %u in %.1f s\n",
            (unsigned long long)es.records, (unsigned long long)es.vectors, es.dim, es.seconds);
    snprintf(sp->description, sizeof sp->description, "%s", es.description);
    snprintf(v, sizeof v, "%s.vectors.npy", prefix);
    snprintf(l, sizeof l, "%s.doclens.npy", prefix);
    snprintf(ids, sizeof ids, "%s.ids.txt", prefix);
    const char *vp[] = {v}, *lp[] = {l};
    if ((st = tt_input_open(&sp->in, 1, vp, lp, ids, NULL)))
        return cli_fail(cmd, st);
    return CLI_OK;
}

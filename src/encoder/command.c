/* Splitting an encoder command into words without a shell (doc/encoder-protocol.md
 * section 1). */
#include "encoder/encoder.h"

#include <stdlib.h>

void tt_argv_free(char **argv) {
    if (!argv)
        return;
    for (char **p = argv; *p; p++)
        free(*p);
    free(argv);
}

int tt_split_command(const char *cmd, char ***argv_out, size_t *argc_out) {
    *argv_out = NULL;
    if (argc_out)
        *argc_out = 0;
    if (!cmd)
        return tt_err(TT_EINVAL, "encoder command: NULL");
    size_t cap = 8, argc = 0;
    char **argv = calloc(cap + 1, sizeof *argv);
    tt_sbuf word = {0};
    int st = TT_OK;
    if (!argv)
        return tt_err(TT_ENOMEM, "encoder command: cannot allocate");
    const char *p = cmd;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        word.len = 0;
        bool any = false;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            any = true;
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q) {
                    st = tt_err(TT_EINVAL, "encoder command '%s': unterminated ' quote", cmd);
                    goto fail;
                }
                if ((st = tt_sbuf_append(&word, p + 1, (size_t)(q - p - 1))))
                    goto fail;
                p = q + 1;
            } else if (*p == '"') {
                p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                        p++;
                    if ((st = tt_sbuf_append(&word, p, 1)))
                        goto fail;
                    p++;
                }
                if (*p != '"') {
                    st = tt_err(TT_EINVAL, "encoder command '%s': unterminated \" quote", cmd);
                    goto fail;
                }
                p++;
            } else if (*p == '\\') {
                if (!p[1]) {
                    st = tt_err(TT_EINVAL, "encoder command '%s': trailing backslash", cmd);
                    goto fail;
                }
                if ((st = tt_sbuf_append(&word, p + 1, 1)))
                    goto fail;
                p += 2;
            } else {
                if ((st = tt_sbuf_append(&word, p, 1)))
                    goto fail;
                p++;
            }
        }
        if (!any)
            continue;
        if (argc == cap) {
            char **n2 = realloc(argv, (cap * 2 + 1) * sizeof *argv);
            if (!n2) {
                st = tt_err(TT_ENOMEM, "encoder command: cannot allocate");
                goto fail;
            }
            argv = n2;
            cap *= 2;
        }
        argv[argc] = malloc(word.len + 1);
        if (!argv[argc]) {
            st = tt_err(TT_ENOMEM, "encoder command: cannot allocate");
            goto fail;
        }
        if (word.len)
            memcpy(argv[argc], word.p, word.len);
        argv[argc][word.len] = '\0';
        argv[++argc] = NULL;
    }
    if (argc == 0) {
        st = tt_err(TT_EINVAL, "encoder command '%s': no program given", cmd);
        goto fail;
    }
    tt_sbuf_free(&word);
    *argv_out = argv;
    if (argc_out)
        *argc_out = argc;
    return TT_OK;
fail:
    tt_sbuf_free(&word);
    tt_argv_free(argv);
    return st;
}

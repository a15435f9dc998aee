/* Status codes, the thread-local error message and the version. */
#include "common/common.h"

#include <errno.h>
#include <stdio.h>

static _Thread_local char tt_errmsg[1024];

unsigned tt_version_number(void) { return TT_VERSION_NUMBER; }
const char *tt_version_string(void) { return TT_VERSION_STRING; }

const char *tt_strerror(int status) {
    switch (status) {
    case TT_OK: return "success";
    case TT_EINVAL: return "invalid argument";
    case TT_ENOMEM: return "out of memory";
    case TT_EIO: return "I/O error";
    case TT_EFORMAT: return "not a file of the expected format";
    case TT_EVERSION: return "unsupported format version";
    case TT_ECORRUPT: return "corrupt data (checksum or invariant)";
    case TT_EUNSUPPORTED: return "unsupported input";
    case TT_EEXIST: return "already exists";
    case TT_ENOSPC: return "no space left on device";
    case TT_EDIM: return "dimension or count mismatch";
    case TT_EVALUE: return "invalid values";
    case TT_EENCODER: return "encoder failed";
    case TT_ETIMEOUT: return "timed out";
    case TT_ENOTFOUND: return "not found";
    case TT_EPARSE: return "malformed input line";
    case TT_EBUSY: return "in use by another process";
    case TT_ECANCELED: return "cancelled";
    default: return "unknown error";
    }
}

const char *tt_last_error(void) { return tt_errmsg; }

void tt_err_clear(void) { tt_errmsg[0] = '\0'; }

int tt_err(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tt_errmsg, sizeof tt_errmsg, fmt, ap);
    va_end(ap);
    return status;
}

int tt_err_errno(int status, int errno_value, const char *fmt, ...) {
    char head[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (status == TT_EIO) {
        if (errno_value == ENOSPC || errno_value == EFBIG || errno_value == EDQUOT)
            status = TT_ENOSPC;
        else if (errno_value == ENOENT)
            status = TT_ENOTFOUND;
        else if (errno_value == ENOMEM)
            status = TT_ENOMEM;
    }
    snprintf(tt_errmsg, sizeof tt_errmsg, "%s: %s", head, strerror(errno_value));
    return status;
}

int tt_err_prefix(int status, const char *fmt, ...) {
    char head[512], old[sizeof tt_errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, tt_errmsg, sizeof old);
    const char *tail = old[0] ? old : tt_strerror(status);
    size_t hl = strlen(head);
    if (hl + 2 >= sizeof tt_errmsg)
        hl = sizeof tt_errmsg - 3;
    memcpy(tt_errmsg, head, hl);
    memcpy(tt_errmsg + hl, ": ", 2);
    size_t room = sizeof tt_errmsg - hl - 3, tl = strlen(tail);
    if (tl > room)
        tl = room;
    memcpy(tt_errmsg + hl + 2, tail, tl);
    tt_errmsg[hl + 2 + tl] = '\0';
    return status;
}

/* The manifest: the list of an index's files with their sizes and payload hashes,
 * published last with write-aside + fsync + rename (doc/format.md). */
#include "io/file.h"
#include "io/dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Manifest payload: u32 count, u32 reserved, then per entry 64 bytes:
 * name[32] NUL-padded, kind[4], reserved u32, size u64, payload hash u64, reserved u64. */
#define ENTRY_BYTES 64

int tt_manifest_publish(const char *dir, const tt_manifest *m) {
    tt_fwriter w;
    uint8_t head[8], e[ENTRY_BYTES];
    int st = tt_fw_open(&w, dir, TT_F_MANIFEST ".tmp", "MANI");
    if (st)
        return st;
    char *tmp = strdup(w.path), *final = tt_path_join(dir, TT_F_MANIFEST);
    if (!tmp || !final) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", dir);
        goto done;
    }
    tt_wr32(head, m->n);
    tt_wr32(head + 4, 0);
    if ((st = tt_fw_write(&w, head, sizeof head)))
        goto done;
    for (uint32_t i = 0; i < m->n; i++) {
        memset(e, 0, sizeof e);
        memcpy(e, m->e[i].name, strnlen(m->e[i].name, TT_MANIFEST_NAME_LEN - 1));
        memcpy(e + 32, m->e[i].kind, 4);
        tt_wr64(e + 40, m->e[i].size);
        tt_wr64(e + 48, m->e[i].payload_hash);
        if ((st = tt_fw_write(&w, e, sizeof e)))
            goto done;
    }
    if ((st = tt_fw_finish(&w, m->n, 0, 0, NULL)))
        goto done;
    if (rename(tmp, final) != 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot publish manifest", final);
        goto done;
    }
    st = tt_fsync_dir(dir);
done:
    tt_fw_abort(&w);
    free(tmp);
    free(final);
    return st;
}

int tt_manifest_read(const char *dir, tt_manifest *m) {
    tt_fmap f;
    memset(m, 0, sizeof *m);
    int st = tt_fmap_open(&f, dir, TT_F_MANIFEST, "MANI", TT_MAP_WHOLE);
    if (st)
        return st;
    if ((st = tt_fmap_check_payload(&f, NULL, NULL)))
        goto done;
    uint64_t n = f.h.a;
    if (n > sizeof m->e / sizeof m->e[0] || f.h.payload_bytes != 8 + n * ENTRY_BYTES ||
        tt_rd32(f.payload) != n) {
        st = tt_err(TT_ECORRUPT, "%s: malformed manifest (%llu entries)", f.path,
                    (unsigned long long)n);
        goto done;
    }
    m->n = (uint32_t)n;
    for (uint32_t i = 0; i < m->n; i++) {
        const uint8_t *e = f.payload + 8 + (uint64_t)i * ENTRY_BYTES;
        if (e[31] != 0 || e[0] == 0 || memchr(e, '/', 32)) {
            st = tt_err(TT_ECORRUPT, "%s: entry %u has a malformed file name", f.path, i);
            goto done;
        }
        memcpy(m->e[i].name, e, 32);
        memcpy(m->e[i].kind, e + 32, 4);
        m->e[i].size = tt_rd64(e + 40);
        m->e[i].payload_hash = tt_rd64(e + 48);
    }
done:
    tt_fmap_close(&f);
    return st;
}

const tt_manifest_entry *tt_manifest_find(const tt_manifest *m, const char *name) {
    for (uint32_t i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].name, name))
            return &m->e[i];
    return NULL;
}

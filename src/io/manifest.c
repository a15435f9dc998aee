/* The manifest: the files of an index generation with their sizes and payload hashes,
 * and its segments; published last with write-aside + fsync + rename (doc/format.md).
 *
 * Version 1 payload: u32 count, u32 0, then count file entries.
 * Version 2 payload: u32 files, u32 segments, u64 generation, u64 next_auto_id,
 * u64 0, then the file entries, then the segment entries. Both entries are 64 bytes:
 *   file:    name[32] NUL-padded, kind[4], u32 0, u64 size, u64 payload hash, u64 0
 *   segment: u64 id, prefix[16] NUL-padded, u64 docs, u64 vectors, u64 deleted,
 *            u64 added vectors, f64 added mse */
#include "io/file.h"
#include "io/dir.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ENTRY_BYTES 64
#define HEAD_V2 32
#define MAX_ENTRIES (1u << 20)

void tt_manifest_free(tt_manifest *m) {
    if (!m)
        return;
    free(m->e);
    free(m->seg);
    memset(m, 0, sizeof *m);
}

int tt_manifest_add(tt_manifest *m, const tt_manifest_entry *e) {
    size_t cap = m->cap;
    if (m->n >= MAX_ENTRIES)
        return tt_err(TT_EINVAL, "manifest: more than %u files", MAX_ENTRIES);
    int st = tt_grow((void **)&m->e, &cap, (size_t)m->n + 1, sizeof *m->e, "manifest");
    if (st)
        return st;
    m->cap = (uint32_t)cap;
    m->e[m->n++] = *e;
    return TT_OK;
}

int tt_manifest_add_segment(tt_manifest *m, const tt_manifest_segment *s) {
    size_t cap = m->seg_cap;
    if (m->nseg >= MAX_ENTRIES)
        return tt_err(TT_EINVAL, "manifest: more than %u segments", MAX_ENTRIES);
    int st = tt_grow((void **)&m->seg, &cap, (size_t)m->nseg + 1, sizeof *m->seg, "manifest");
    if (st)
        return st;
    m->seg_cap = (uint32_t)cap;
    m->seg[m->nseg++] = *s;
    return TT_OK;
}

int tt_manifest_copy(tt_manifest *dst, const tt_manifest *src) {
    memset(dst, 0, sizeof *dst);
    dst->version = src->version;
    dst->generation = src->generation;
    dst->next_auto_id = src->next_auto_id;
    int st = TT_OK;
    for (uint32_t i = 0; i < src->n && !st; i++)
        st = tt_manifest_add(dst, &src->e[i]);
    for (uint32_t i = 0; i < src->nseg && !st; i++)
        st = tt_manifest_add_segment(dst, &src->seg[i]);
    if (st)
        tt_manifest_free(dst);
    return st;
}

int tt_manifest_publish(const char *dir, const tt_manifest *m) {
    tt_fwriter w;
    uint8_t head[HEAD_V2], e[ENTRY_BYTES];
    int st = tt_fw_open(&w, dir, TT_F_MANIFEST ".tmp", "MANI");
    if (st)
        return st;
    w.h.version = 2;
    char *tmp = strdup(w.path), *final = tt_path_join(dir, TT_F_MANIFEST);
    if (!tmp || !final) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", dir);
        goto done;
    }
    memset(head, 0, sizeof head);
    tt_wr32(head, m->n);
    tt_wr32(head + 4, m->nseg);
    tt_wr64(head + 8, m->generation);
    tt_wr64(head + 16, m->next_auto_id);
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
    for (uint32_t i = 0; i < m->nseg; i++) {
        const tt_manifest_segment *s = &m->seg[i];
        uint64_t mse;
        memcpy(&mse, &s->added_mse, 8);
        memset(e, 0, sizeof e);
        tt_wr64(e, s->id);
        memcpy(e + 8, s->prefix, strnlen(s->prefix, TT_SEGMENT_PREFIX_LEN - 1));
        tt_wr64(e + 24, s->num_docs);
        tt_wr64(e + 32, s->num_vectors);
        tt_wr64(e + 40, s->num_deleted);
        tt_wr64(e + 48, s->added_vectors);
        tt_wr64(e + 56, mse);
        if ((st = tt_fw_write(&w, e, sizeof e)))
            goto done;
    }
    if ((st = tt_fw_finish(&w, m->n, m->nseg, m->generation, NULL)))
        goto done;
    if (rename(tmp, final) != 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot publish manifest", final);
        goto done;
    }
done:
    tt_fw_abort(&w);
    if (st && tmp)
        (void)unlink(tmp); /* ours: written just now, never published */
    free(tmp);
    free(final);
    return st;
}

/* A file name an index may hold: no '/', not empty, NUL-terminated within 32 bytes. */
static bool good_name(const uint8_t *e, size_t n) {
    return e[n - 1] == 0 && e[0] != 0 && !memchr(e, '/', n);
}

int tt_manifest_read(const char *dir, tt_manifest *m) {
    tt_fmap f;
    memset(m, 0, sizeof *m);
    int st = tt_fmap_open(&f, dir, TT_F_MANIFEST, "MANI", TT_MAP_WHOLE);
    if (st)
        return st;
    if ((st = tt_fmap_check_payload(&f, NULL, NULL)))
        goto done;
    uint64_t n = f.h.a, nseg = f.h.version == 2 ? f.h.b : 0;
    uint64_t head = f.h.version == 2 ? HEAD_V2 : 8;
    if (n > MAX_ENTRIES || nseg > MAX_ENTRIES ||
        f.h.payload_bytes != head + (n + nseg) * ENTRY_BYTES || tt_rd32(f.payload) != n ||
        (f.h.version == 2 && (tt_rd32(f.payload + 4) != nseg ||
                              tt_rd64(f.payload + 8) != f.h.c))) {
        st = tt_err(TT_ECORRUPT, "%s: malformed manifest (%llu files, %llu segments)", f.path,
                    (unsigned long long)n, (unsigned long long)nseg);
        goto done;
    }
    m->version = f.h.version;
    m->hash = f.h.payload_hash;
    if (f.h.version == 2) {
        m->generation = f.h.c;
        m->next_auto_id = tt_rd64(f.payload + 16);
    }
    for (uint64_t i = 0; i < n && !st; i++) {
        const uint8_t *e = f.payload + head + i * ENTRY_BYTES;
        if (!good_name(e, 32)) {
            st = tt_err(TT_ECORRUPT, "%s: entry %llu has a malformed file name", f.path,
                        (unsigned long long)i);
            break;
        }
        tt_manifest_entry x;
        memset(&x, 0, sizeof x);
        memcpy(x.name, e, 32);
        memcpy(x.kind, e + 32, 4);
        x.size = tt_rd64(e + 40);
        x.payload_hash = tt_rd64(e + 48);
        st = tt_manifest_add(m, &x);
    }
    for (uint64_t i = 0; i < nseg && !st; i++) {
        const uint8_t *e = f.payload + head + (n + i) * ENTRY_BYTES;
        tt_manifest_segment s;
        memset(&s, 0, sizeof s);
        s.id = tt_rd64(e);
        if (e[8 + 15] != 0 || memchr(e + 8, '/', 16)) {
            st = tt_err(TT_ECORRUPT, "%s: segment %llu has a malformed prefix", f.path,
                        (unsigned long long)i);
            break;
        }
        memcpy(s.prefix, e + 8, 16);
        s.num_docs = tt_rd64(e + 24);
        s.num_vectors = tt_rd64(e + 32);
        s.num_deleted = tt_rd64(e + 40);
        s.added_vectors = tt_rd64(e + 48);
        uint64_t mse = tt_rd64(e + 56);
        memcpy(&s.added_mse, &mse, 8);
        if (s.num_deleted > s.num_docs || s.num_vectors < s.num_docs || !isfinite(s.added_mse)) {
            st = tt_err(TT_ECORRUPT, "%s: segment %llu has inconsistent counts", f.path,
                        (unsigned long long)i);
            break;
        }
        st = tt_manifest_add_segment(m, &s);
    }
done:
    if (st)
        tt_manifest_free(m);
    tt_fmap_close(&f);
    return st;
}

const tt_manifest_entry *tt_manifest_find(const tt_manifest *m, const char *name) {
    for (uint32_t i = 0; i < m->n; i++)
        if (!strcmp(m->e[i].name, name))
            return &m->e[i];
    return NULL;
}

uint64_t tt_manifest_kind_hash(const tt_manifest *m, const char *kind) {
    for (uint32_t i = 0; i < m->n; i++)
        if (!memcmp(m->e[i].kind, kind, 4))
            return m->e[i].payload_hash;
    return 0;
}

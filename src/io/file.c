/* Index files: 64-byte headers, checksummed writers and validated read-only mappings.
 * The layout is documented in doc/format.md. */
#include "io/file.h"
#include "io/dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void tt_header_encode(const tt_header *h, uint8_t out[TT_HEADER_SIZE]) {
    memset(out, 0, TT_HEADER_SIZE);
    memcpy(out, TT_MAGIC, 4);
    memcpy(out + 4, h->kind, 4);
    tt_wr32(out + 8, h->version);
    tt_wr32(out + 12, h->flags);
    tt_wr64(out + 16, h->a);
    tt_wr64(out + 24, h->b);
    tt_wr64(out + 32, h->c);
    tt_wr64(out + 40, h->payload_bytes);
    tt_wr64(out + 48, h->payload_hash);
    tt_wr32(out + 60, XXH32(out, 60, 0));
}

int tt_header_decode(const uint8_t in[TT_HEADER_SIZE], const char *path, const char *expected_kind,
                     tt_header *h) {
    /* Order matters (xz): magic, then checksum, then version, so that a corrupt file
     * and a file from a newer tartan get different errors. */
    if (memcmp(in, TT_MAGIC, 4) != 0)
        return tt_err(TT_EFORMAT, "%s: not a tartan index file (bad magic)", path);
    if (XXH32(in, 60, 0) != tt_rd32(in + 60))
        return tt_err(TT_ECORRUPT, "%s: header checksum mismatch", path);
    memset(h, 0, sizeof *h);
    memcpy(h->kind, in + 4, 4);
    h->version = tt_rd32(in + 8);
    h->flags = tt_rd32(in + 12);
    h->a = tt_rd64(in + 16);
    h->b = tt_rd64(in + 24);
    h->c = tt_rd64(in + 32);
    h->payload_bytes = tt_rd64(in + 40);
    h->payload_hash = tt_rd64(in + 48);
    if (h->version < 1 || h->version > TT_FORMAT_VERSION)
        return tt_err(TT_EVERSION, "%s: format version %u, this tartan reads versions 1 to %u",
                      path, h->version, TT_FORMAT_VERSION);
    if (h->flags != 0)
        return tt_err(TT_EVERSION, "%s: unknown flags 0x%x", path, h->flags);
    if (expected_kind && memcmp(h->kind, expected_kind, 4) != 0)
        return tt_err(TT_EFORMAT, "%s: file kind '%.4s', expected '%.4s'", path, h->kind,
                      expected_kind);
    return TT_OK;
}

/* ---------------------------------------------------------------- writer */

static int write_all(int fd, const void *data, size_t n, uint64_t off, const char *path) {
    const uint8_t *p = data;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return tt_err_errno(TT_EIO, errno, "%s: write failed", path);
        }
        if (w == 0)
            return tt_err(TT_ENOSPC, "%s: write made no progress (disk full?)", path);
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return TT_OK;
}

int tt_fw_open(tt_fwriter *w, const char *dir, const char *name, const char *kind) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->path = tt_path_join(dir, name);
    if (!w->path)
        return TT_ENOMEM;
    memcpy(w->h.kind, kind, 4);
    w->h.version = TT_FILE_VERSION;
    w->buf_cap = 1 << 20;
    w->buf = malloc(w->buf_cap);
    w->xxh = XXH64_createState();
    if (!w->buf || !w->xxh) {
        tt_fw_abort(w);
        return tt_err(TT_ENOMEM, "%s: out of memory", name);
    }
    XXH64_reset(w->xxh, 0);
    w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int st = tt_err_errno(TT_EIO, errno, "%s: cannot create", w->path);
        tt_fw_abort(w);
        return st;
    }
    /* A placeholder until tt_fw_finish writes the header: the magic and the kind, the
     * rest (checksum included) zero, so that no reader accepts the file yet, while a
     * writer killed before finishing leaves a file recognisably tartan's
     * (tt_written_by_tartan), which the next writer may remove. */
    uint8_t ph[TT_HEADER_SIZE] = {0};
    memcpy(ph, TT_MAGIC, 4);
    memcpy(ph + 4, kind, 4);
    int st = write_all(w->fd, ph, sizeof ph, 0, w->path);
    if (st) {
        tt_fw_abort(w);
        return st;
    }
    return TT_OK;
}

static int fw_flush(tt_fwriter *w) {
    if (!w->buf_used)
        return TT_OK;
    int st = write_all(w->fd, w->buf, w->buf_used, TT_HEADER_SIZE + w->written - w->buf_used,
                       w->path);
    w->buf_used = 0;
    return st;
}

int tt_fw_write(tt_fwriter *w, const void *data, size_t n) {
    XXH64_update(w->xxh, data, n);
    const uint8_t *p = data;
    while (n) {
        size_t take = TT_MIN(n, w->buf_cap - w->buf_used);
        memcpy(w->buf + w->buf_used, p, take);
        w->buf_used += take;
        w->written += take;
        p += take;
        n -= take;
        if (w->buf_used == w->buf_cap) {
            int st = fw_flush(w);
            if (st)
                return st;
        }
    }
    return TT_OK;
}

int tt_fw_finish(tt_fwriter *w, uint64_t a, uint64_t b, uint64_t c, uint64_t *size_out) {
    int st = fw_flush(w);
    if (st)
        return st;
    w->h.a = a;
    w->h.b = b;
    w->h.c = c;
    w->h.payload_bytes = w->written;
    w->h.payload_hash = XXH64_digest(w->xxh);
    uint8_t hdr[TT_HEADER_SIZE];
    tt_header_encode(&w->h, hdr);
    st = write_all(w->fd, hdr, sizeof hdr, 0, w->path);
    if (st)
        return st;
    if (fsync(w->fd) != 0)
        return tt_err_errno(TT_EIO, errno, "%s: fsync failed", w->path);
    if (close(w->fd) != 0) {
        w->fd = -1;
        return tt_err_errno(TT_EIO, errno, "%s: close failed", w->path);
    }
    w->fd = -1;
    if (size_out)
        *size_out = TT_HEADER_SIZE + w->written;
    return TT_OK;
}

void tt_fw_abort(tt_fwriter *w) {
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    free(w->path);
    free(w->buf);
    if (w->xxh)
        XXH64_freeState(w->xxh);
    w->path = NULL;
    w->buf = NULL;
    w->xxh = NULL;
}

/* ---------------------------------------------------------------- reader */

static int read_exact(int fd, void *buf, size_t n, uint64_t off, const char *path) {
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return tt_err_errno(TT_EIO, errno, "%s: read failed", path);
        }
        if (r == 0)
            return tt_err(TT_EFORMAT, "%s: unexpected end of file", path);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return TT_OK;
}

/* Asks for huge pages over the whole 2 MiB pages inside [p, p + n). */
static void advise_huge(void *p, size_t n) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)p + huge - 1) & ~(huge - 1),
                    b = ((uintptr_t)p + n) & ~(huge - 1);
    if (b > a)
        (void)madvise((void *)a, (size_t)(b - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

int tt_fmap_open(tt_fmap *m, const char *dir, const char *name, const char *kind, int map) {
    memset(m, 0, sizeof *m);
    m->fd = -1;
    int st = TT_OK;
    m->path = tt_path_join(dir, name);
    if (!m->path)
        return TT_ENOMEM;
    m->fd = open(m->path, O_RDONLY | O_CLOEXEC);
    if (m->fd < 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot open", m->path);
        goto fail;
    }
    struct stat sb;
    if (fstat(m->fd, &sb) != 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot stat", m->path);
        goto fail;
    }
    m->size = (uint64_t)sb.st_size;
    if (m->size < TT_HEADER_SIZE) {
        st = tt_err(TT_EFORMAT, "%s: truncated (%llu bytes, shorter than the header)", m->path,
                    (unsigned long long)m->size);
        goto fail;
    }
    uint8_t hdr[TT_HEADER_SIZE];
    if ((st = read_exact(m->fd, hdr, sizeof hdr, 0, m->path)))
        goto fail;
    if ((st = tt_header_decode(hdr, m->path, kind, &m->h)))
        goto fail;
    if (m->h.payload_bytes != m->size - TT_HEADER_SIZE) {
        st = tt_err(TT_ECORRUPT, "%s: size %llu bytes, header says %llu (truncated or appended)",
                    m->path, (unsigned long long)m->size,
                    (unsigned long long)(m->h.payload_bytes + TT_HEADER_SIZE));
        goto fail;
    }
    if (map == TT_MAP_WHOLE) {
        void *p = mmap(NULL, (size_t)m->size, PROT_READ, MAP_SHARED, m->fd, 0);
        if (p == MAP_FAILED) {
            st = tt_err_errno(TT_EIO, errno, "%s: mmap failed", m->path);
            goto fail;
        }
        m->base = p;
        m->payload = m->base + TT_HEADER_SIZE;
    } else if (map == TT_MAP_COPY) {
        /* Anonymous pages, so that tt_fmap_close's munmap releases either kind. */
        void *p = mmap(NULL, (size_t)m->size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            st = tt_err(TT_ENOMEM, "%s: out of memory for its %llu bytes", m->path,
                        (unsigned long long)m->size);
            goto fail;
        }
        m->base = p;
        m->payload = m->base + TT_HEADER_SIZE;
        /* Huge pages where the kernel gives them on request (transparent huge pages
         * in "madvise" mode): a fault per 2 MiB instead of per 4 KiB keeps the copy as
         * cheap as the mapping was (opening a 3584-d index with 117 MiB of centroids:
         * 300-320 ms either way, 380-400 ms with 4 KiB pages). Advice only. */
        advise_huge(p, (size_t)m->size);
        if ((st = read_exact(m->fd, p, (size_t)m->size, 0, m->path)))
            goto fail;
        /* Read-only from here, as a mapping of the file would be (advice: a failure
         * leaves it writable, which nothing uses). */
        (void)mprotect(p, (size_t)m->size, PROT_READ);
        m->copied = 1;
    }
    return TT_OK;
fail:
    tt_fmap_close(m);
    return st;
}

int tt_fmap_own(tt_fmap *m) {
    if (m->copied || !m->base)
        return TT_OK;
    void *p = mmap(NULL, (size_t)m->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return tt_err(TT_ENOMEM, "%s: out of memory for its %llu bytes", m->path,
                      (unsigned long long)m->size);
    advise_huge(p, (size_t)m->size);
    memcpy(p, m->base, (size_t)m->size);
    (void)mprotect(p, (size_t)m->size, PROT_READ);
    munmap((void *)m->base, (size_t)m->size);
    m->base = p;
    m->payload = m->base + TT_HEADER_SIZE;
    m->copied = 1;
    return TT_OK;
}

int tt_fmap_check_payload(const tt_fmap *m, tt_progress_fn progress, void *user) {
    if (m->base && m->payload && !progress) {
        /* Mapped (the files search keeps resident): hash in place, no copy; the pages
         * it touches are the ones search reads next. */
        if (XXH64(m->payload, (size_t)m->h.payload_bytes, 0) != m->h.payload_hash)
            return tt_err(TT_ECORRUPT, "%s: data checksum mismatch (file is damaged)", m->path);
        return TT_OK;
    }
    XXH64_state_t *s = XXH64_createState();
    /* No bigger than the payload: most index files are small, and verify/open check
     * several of them (a 4 MiB buffer per small file dominated the fuzzer's time). */
    size_t cap = (size_t)TT_MAX(TT_MIN((uint64_t)4 << 20, m->h.payload_bytes), 1);
    uint8_t *buf = malloc(cap);
    int st = TT_OK;
    if (!s || !buf) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", m->path);
        goto done;
    }
    XXH64_reset(s, 0);
    for (uint64_t off = 0; off < m->h.payload_bytes;) {
        size_t n = (size_t)TT_MIN((uint64_t)cap, m->h.payload_bytes - off);
        if ((st = read_exact(m->fd, buf, n, TT_HEADER_SIZE + off, m->path)))
            goto done;
        XXH64_update(s, buf, n);
        off += n;
        if (progress)
            progress(user, "verify", off, m->h.payload_bytes);
    }
    if (XXH64_digest(s) != m->h.payload_hash)
        st = tt_err(TT_ECORRUPT, "%s: data checksum mismatch (file is damaged)", m->path);
done:
    free(buf);
    if (s)
        XXH64_freeState(s);
    return st;
}

void tt_fmap_close(tt_fmap *m) {
    if (m->base)
        munmap((void *)m->base, (size_t)m->size);
    if (m->fd >= 0)
        close(m->fd);
    free(m->path);
    memset(m, 0, sizeof *m);
    m->fd = -1;
}

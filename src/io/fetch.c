/* Residual fetching for search: the packed residuals of the documents that survive
 * PLAID's centroid stages are read per query, one doc-contiguous range each.
 *
 * With io_uring (Axboe, "Efficient IO with io_uring", 2019) the ranges become up to
 * queue_depth reads in flight from one thread, so a cold query costs about one device
 * latency per queue_depth documents instead of one per document (a page fault per
 * document with mmap). Ranges are sorted by offset and coalesced when they touch or
 * overlap; with O_DIRECT every read is widened to 4 KiB boundaries into a 4 KiB-aligned
 * buffer and ranges that share a block are read once. Short reads and -EAGAIN/-EINTR
 * completions are resubmitted for the rest. */
#include "io/fetch.h"

#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FETCH_ALIGN 4096u
#define FETCH_DEFAULT_QD 64
#define FETCH_DEFAULT_MAX_READ (1u << 20)
/* Mapped ranges at least this long get MADV_WILLNEED (exhaustive scan chunks). */
#define MMAP_WILLNEED_BYTES (256u << 10)

typedef struct fetch_rng {
    uint32_t file;
    uint64_t off, len;    /* file offset, bytes */
    size_t i;             /* position in the caller's arrays */
} fetch_rng;

/* One read request: a piece of a segment of the buffer. */
typedef struct fetch_piece {
    uint32_t file;
    uint64_t foff;        /* file offset */
    uint64_t len;         /* bytes requested */
    uint64_t need;        /* bytes that must arrive (len clamped at end of file) */
    uint64_t done;
    uint8_t *buf;
} fetch_piece;

struct tt_fetcher {
    tt_fetch_config cfg;
    tt_fetch_file *files;  /* cfg's files (one made from the single-file fields) */
    size_t nfiles;
    char *path;
    int mode;
    bool direct;
    bool ring_ok;
    bool ring_broken;      /* a submission failed: reads go through pread from then on */
    struct io_uring ring;
    uint8_t *buf;          /* FETCH_ALIGN-aligned */
    uint8_t *orphan;       /* buffer of a broken ring, freed only after the ring */
    uint64_t buf_cap;
    fetch_rng *rng;
    size_t rng_cap;
    fetch_piece *pc;
    size_t pc_cap;
    uint32_t *queue;       /* pieces waiting for (re)submission: a FIFO of pc indices */
    size_t queue_cap;
    /* The started read (tt_fetcher_start): npc pieces, of which [0, ready) have all
     * arrived; need[i]: the pieces ranges 0..i lie in; io_uring's FIFO and reads in
     * flight; its first error. pending until every piece arrived or it failed. */
    size_t npc, ready, nrange;
    size_t *need;
    size_t need_cap;
    size_t qhead, qtail, qlen, inflight;
    int status;
    bool pending;
    tt_fetch_stats st;
};

int tt_fetcher_new(tt_fetcher **out, const tt_fetch_config *cfg, char *note, size_t note_len) {
    int status = TT_OK;
    *out = NULL;
    if (note && note_len)
        note[0] = '\0';
    if (!cfg || (cfg->mode != TT_FETCH_URING && cfg->mode != TT_FETCH_MMAP &&
                 cfg->mode != TT_FETCH_PREAD))
        return tt_err(TT_EINVAL, "residual fetcher: invalid mode");
    tt_fetcher *f = tt_calloc(1, sizeof *f, "residual fetcher");
    if (!f)
        return TT_ENOMEM;
    f->cfg = *cfg;
    f->nfiles = cfg->nfiles ? cfg->nfiles : 1;
    if (!(f->files = tt_alloc(f->nfiles, sizeof *f->files, "residual fetcher"))) {
        free(f);
        return TT_ENOMEM;
    }
    if (cfg->nfiles)
        memcpy(f->files, cfg->files, cfg->nfiles * sizeof *f->files);
    else
        f->files[0] = (tt_fetch_file){cfg->fd, cfg->fd_direct, cfg->path, cfg->file_size,
                                      cfg->base, cfg->map, 0};
    bool all_direct = true, any_map = true;
    for (size_t i = 0; i < f->nfiles; i++) {
        const tt_fetch_file *x = &f->files[i];
        if ((cfg->mode == TT_FETCH_MMAP && !x->map) || (cfg->mode != TT_FETCH_MMAP && x->fd < 0) ||
            x->base > x->file_size ||
            (i && x->start != f->files[i - 1].start + f->files[i - 1].file_size -
                                  f->files[i - 1].base)) {
            tt_fetcher_free(f);
            return tt_err(TT_EINVAL, "residual fetcher: file %zu: no mapping, no descriptor, a "
                          "payload beyond the file, or not contiguous with the previous", i);
        }
        all_direct = all_direct && x->fd_direct >= 0;
        any_map = any_map && x->map;
    }
    if (f->cfg.queue_depth <= 0)
        f->cfg.queue_depth = FETCH_DEFAULT_QD;
    if (f->cfg.queue_depth > 4096)
        f->cfg.queue_depth = 4096;
    if (f->cfg.max_read == 0)
        f->cfg.max_read = FETCH_DEFAULT_MAX_READ;
    /* O_DIRECT pieces must stay block-aligned. */
    f->cfg.max_read = TT_MAX(FETCH_ALIGN, f->cfg.max_read / FETCH_ALIGN * FETCH_ALIGN);
    f->path = strdup(f->files[0].path ? f->files[0].path : "residuals");
    if (!f->path) {
        status = tt_err(TT_ENOMEM, "residual fetcher: out of memory");
        goto fail;
    }
    f->mode = cfg->mode;
    f->direct = cfg->mode != TT_FETCH_MMAP && all_direct;
    if (f->mode == TT_FETCH_URING) {
        int rc = io_uring_queue_init((unsigned)f->cfg.queue_depth, &f->ring, 0);
        if (rc < 0) {
            f->mode = any_map ? TT_FETCH_MMAP : TT_FETCH_PREAD;
            f->direct = f->mode == TT_FETCH_PREAD && all_direct;
            if (note)
                snprintf(note, note_len, "io_uring setup failed (%s); using %s", strerror(-rc),
                         f->mode == TT_FETCH_MMAP ? "mmap" : "pread");
        } else {
            f->ring_ok = true;
        }
    }
    *out = f;
    return TT_OK;
fail:
    tt_fetcher_free(f);
    return status;
}

static void abandon(tt_fetcher *f);

void tt_fetcher_free(tt_fetcher *f) {
    if (!f)
        return;
    abandon(f);
    if (f->ring_ok)
        io_uring_queue_exit(&f->ring);
    free(f->orphan);
    free(f->buf);
    free(f->rng);
    free(f->pc);
    free(f->queue);
    free(f->need);
    free(f->path);
    free(f->files);
    free(f);
}

int tt_fetcher_mode(const tt_fetcher *f) { return f->mode; }

void tt_fetcher_stats(const tt_fetcher *f, tt_fetch_stats *out) { *out = f->st; }
void tt_fetcher_stats_reset(tt_fetcher *f) { memset(&f->st, 0, sizeof f->st); }

static int rng_cmp(const void *a, const void *b) {
    const fetch_rng *x = a, *y = b;
    if (x->file != y->file)
        return x->file < y->file ? -1 : 1;
    if (x->off != y->off)
        return x->off < y->off ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

static int grow_buf(tt_fetcher *f, uint64_t need) {
    if (need <= f->buf_cap)
        return TT_OK;
    uint64_t nc = TT_MAX(need, f->buf_cap + f->buf_cap / 2);
    nc = (nc + FETCH_ALIGN - 1) / FETCH_ALIGN * FETCH_ALIGN;
    uint8_t *b = tt_alloc_aligned(nc, 1, FETCH_ALIGN, "residual read buffer");
    if (!b)
        return TT_ENOMEM;
    free(f->buf);
    f->buf = b;
    f->buf_cap = nc;
    return TT_OK;
}

static int piece_fd(const tt_fetcher *f, const fetch_piece *pc) {
    return f->direct ? f->files[pc->file].fd_direct : f->files[pc->file].fd;
}

static const char *piece_path(const tt_fetcher *f, const fetch_piece *pc) {
    return f->files[pc->file].path ? f->files[pc->file].path : f->path;
}

static bool piece_done(const fetch_piece *pc) { return pc->done >= pc->need; }

/* Reads one piece synchronously, for when io_uring is not available. */
static int read_piece(tt_fetcher *f, fetch_piece *pc) {
    int fd = piece_fd(f, pc);
    while (pc->done < pc->need) {
        ssize_t r = pread(fd, pc->buf + pc->done, (size_t)(pc->len - pc->done),
                          (off_t)(pc->foff + pc->done));
        f->st.reads++;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return tt_err_errno(TT_EIO, errno, "%s: read of %llu bytes at %llu",
                                piece_path(f, pc), (unsigned long long)(pc->len - pc->done),
                                (unsigned long long)(pc->foff + pc->done));
        }
        if (r == 0)
            return tt_err(TT_ECORRUPT, "%s: unexpected end of file at %llu (truncated?)",
                          piece_path(f, pc), (unsigned long long)(pc->foff + pc->done));
        pc->done += (uint64_t)r;
        f->st.bytes += (uint64_t)r;
        /* An O_DIRECT continuation must start on a block boundary again. */
        if (f->direct && pc->done < pc->need)
            pc->done = pc->done / FETCH_ALIGN * FETCH_ALIGN;
    }
    return TT_OK;
}

/* io_uring reads of the started pieces: keeps up to queue_depth of them in flight (the
 * FIFO f->queue holds those waiting for a first or another submission), submits, and
 * with `wait` waits for at least one completion; takes every completion there is, and
 * queues short reads and -EAGAIN/-EINTR completions again for the rest. A failed read
 * is kept in f->status (nothing more is submitted after it); TT_EIO is returned only
 * when the ring itself fails, which ends the started read: what is in flight is
 * unknown, so the ring, and the buffer it may still write into, are never used again. */
static int uring_pump(tt_fetcher *f, bool wait) {
    const size_t qd = (size_t)f->cfg.queue_depth, npc = f->npc;
    while (f->status == TT_OK && f->qlen > 0 && f->inflight < qd) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
        if (!sqe)
            break;
        uint32_t p = f->queue[f->qhead];
        f->qhead = (f->qhead + 1) % npc;
        f->qlen--;
        fetch_piece *pc = &f->pc[p];
        io_uring_prep_read(sqe, piece_fd(f, pc), pc->buf + pc->done,
                           (unsigned)(pc->len - pc->done), pc->foff + pc->done);
        io_uring_sqe_set_data64(sqe, p);
        f->inflight++;
        f->st.reads++;
    }
    if (f->inflight == 0)
        return TT_OK;
    int rc;
    do
        rc = wait ? io_uring_submit_and_wait(&f->ring, 1) : io_uring_submit(&f->ring);
    while (rc == -EINTR);
    if (rc < 0 && rc != -EAGAIN && rc != -EBUSY) {
        f->ring_broken = true;
        f->orphan = f->buf;
        f->buf = NULL;
        f->buf_cap = 0;
        f->inflight = 0;
        f->pending = false;
        return f->status = tt_err_errno(TT_EIO, -rc, "%s: io_uring submission", f->path);
    }
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&f->ring, head, cqe) {
        seen++;
        f->inflight--;
        uint32_t p = (uint32_t)io_uring_cqe_get_data64(cqe);
        fetch_piece *pc = &f->pc[p];
        int res = cqe->res;
        if (res == -EAGAIN || res == -EINTR) {
            f->queue[f->qtail] = p;
            f->qtail = (f->qtail + 1) % npc;
            f->qlen++;
            continue;
        }
        if (res < 0) {
            if (f->status == TT_OK)
                f->status = tt_err_errno(TT_EIO, -res, "%s: read of %llu bytes at %llu",
                                         piece_path(f, pc),
                                         (unsigned long long)(pc->len - pc->done),
                                         (unsigned long long)(pc->foff + pc->done));
            continue;
        }
        if (res == 0) {
            if (f->status == TT_OK)
                f->status = tt_err(TT_ECORRUPT, "%s: unexpected end of file at %llu (truncated?)",
                                   piece_path(f, pc), (unsigned long long)(pc->foff + pc->done));
            continue;
        }
        pc->done += (uint64_t)res;
        f->st.bytes += (uint64_t)res;
        if (piece_done(pc))
            continue;
        /* Short read: queue the rest (an O_DIRECT rest restarts on a block). */
        if (f->direct)
            pc->done = pc->done / FETCH_ALIGN * FETCH_ALIGN;
        f->queue[f->qtail] = p;
        f->qtail = (f->qtail + 1) % npc;
        f->qlen++;
    }
    io_uring_cq_advance(&f->ring, seen);
    if (seen == 0 && rc < 0) /* -EAGAIN/-EBUSY, nothing completed: the SQEs stay queued */
        usleep(50);
    return TT_OK;
}

/* The file whose payload holds range-space offset `off`: the last with start <= off. */
static uint32_t file_of(const tt_fetcher *f, uint64_t off) {
    size_t lo = 0, hi = f->nfiles;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->files[mid].start <= off)
            lo = mid;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

/* Ends a started read that was not waited for to its end: nothing more is submitted,
 * and what is in flight is waited for, since the kernel may still be writing into the
 * buffer (which the next read reuses, or tt_fetcher_free frees). */
static void abandon(tt_fetcher *f) {
    f->qlen = 0;
    while (f->pending && f->inflight > 0 && f->mode == TT_FETCH_URING && !f->ring_broken)
        (void)uring_pump(f, true);
    f->pending = false;
}

/* tt_fetcher_start on a fetcher with no started read. */
static int start_read(tt_fetcher *f, size_t n, const uint64_t *off, const uint64_t *len,
                      const uint8_t **ptr) {
    int status = TT_OK;
    f->st.calls++;
    f->st.ranges += n;
    if ((status = tt_grow((void **)&f->rng, &f->rng_cap, n, sizeof *f->rng, "fetch ranges")) ||
        (status = tt_grow((void **)&f->need, &f->need_cap, n, sizeof *f->need, "fetch ranges")))
        return status;
    bool sorted = true;
    for (size_t i = 0; i < n; i++) {
        uint32_t fi = file_of(f, off[i]);
        const tt_fetch_file *x = &f->files[fi];
        uint64_t end, payload = x->file_size - x->base;
        if (!tt_add_ok(off[i], len[i], &end) || off[i] < x->start || end - x->start > payload)
            return tt_err(TT_ECORRUPT, "%s: range %llu+%llu beyond the %llu payload bytes",
                          x->path ? x->path : f->path, (unsigned long long)(off[i] - x->start),
                          (unsigned long long)len[i], (unsigned long long)payload);
        f->rng[i] = (fetch_rng){fi, x->base + (off[i] - x->start), len[i], i};
        if (i && rng_cmp(&f->rng[i - 1], &f->rng[i]) > 0)
            sorted = false;
    }
    if (f->mode == TT_FETCH_MMAP) {
        /* A mapped page past a shrunk end of file faults (SIGBUS); catch the common case
         * (the file truncated before this call) here and say so. One fstat per file read. */
        for (size_t i = 0; i < n; i++) {
            const tt_fetch_file *x = &f->files[f->rng[i].file];
            struct stat sb;
            if ((i == 0 || f->rng[i].file != f->rng[i - 1].file) && x->fd >= 0 &&
                fstat(x->fd, &sb) == 0 && (uint64_t)sb.st_size < x->file_size)
                return tt_err(TT_ECORRUPT, "%s: the file shrank from %llu to %llu bytes while "
                              "open (an index must not be modified while it is in use)",
                              x->path ? x->path : f->path, (unsigned long long)x->file_size,
                              (unsigned long long)sb.st_size);
            ptr[i] = x->map + (f->rng[i].off - x->base);
            f->st.bytes += len[i];
            /* The mapping is MADV_RANDOM (no readahead): a long range, as in an
             * exhaustive scan, is asked for as a whole instead of page by page. */
            if (len[i] >= MMAP_WILLNEED_BYTES) {
                uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
                uintptr_t a = (uintptr_t)ptr[i] & ~(pg - 1);
                (void)madvise((void *)a, (size_t)((uintptr_t)ptr[i] + len[i] - a), MADV_WILLNEED);
            }
        }
        return TT_OK;
    }
    if (n == 0)
        return TT_OK;

    /* Sort by file and offset (skipped when already sorted, as in exhaustive scans). */
    if (!sorted)
        qsort(f->rng, n, sizeof *f->rng, rng_cmp);

    /* Pass 1: segments (contiguous extents of one file, each one buffer region) and the
     * buffer size. A segment grows while ranges of its file touch it and it stays within
     * max_read; a segment longer than max_read (one big range) is split into pieces. */
    const uint64_t a = f->direct ? FETCH_ALIGN : 1, maxr = f->cfg.max_read;
    uint64_t total = 0;
    size_t npc = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t seg_lo = 0, seg_hi = 0, boff = 0;
        uint32_t seg_file = 0;
        bool open = false;
        npc = 0;
        for (size_t r = 0; r <= n; r++) {
            uint64_t lo = 0, hi = 0;
            if (r < n) {
                lo = f->rng[r].off / a * a;
                hi = (f->rng[r].off + f->rng[r].len + a - 1) / a * a;
                if (open && f->rng[r].file == seg_file && lo <= seg_hi &&
                    TT_MAX(hi, seg_hi) - seg_lo <= maxr) {
                    seg_hi = TT_MAX(hi, seg_hi);
                    goto place;
                }
            }
            if (open) {  /* close the segment: emit its pieces */
                const uint64_t fsize = f->files[seg_file].file_size;
                for (uint64_t p = seg_lo; p < seg_hi; p += maxr) {
                    if (pass == 1) {
                        uint64_t l = TT_MIN(maxr, seg_hi - p);
                        uint64_t need = p + l <= fsize ? l : (p < fsize ? fsize - p : 0);
                        f->pc[npc] = (fetch_piece){seg_file, p, l, need, 0,
                                                   f->buf + boff + (p - seg_lo)};
                    }
                    npc++;
                }
                boff += seg_hi - seg_lo;
            }
            if (r == n)
                break;
            seg_lo = lo;
            seg_hi = hi;
            seg_file = f->rng[r].file;
            open = true;
        place:
            if (pass == 1) {
                ptr[f->rng[r].i] = f->buf + boff + (f->rng[r].off - seg_lo);
                /* The range's last byte is in piece npc + (that byte - seg_lo) / maxr: this
                 * segment's pieces are numbered from npc when it closes. */
                f->need[f->rng[r].i] =
                    f->rng[r].len ? npc + (f->rng[r].off + f->rng[r].len - 1 - seg_lo) / maxr + 1
                                  : 0;
            }
        }
        total = boff;
        if (pass == 0) {
            if ((status = grow_buf(f, total)) ||
                (status = tt_grow((void **)&f->pc, &f->pc_cap, npc, sizeof *f->pc, "fetch reads")))
                return status;
            if ((status = tt_grow((void **)&f->queue, &f->queue_cap, npc, sizeof *f->queue,
                               "fetch queue")))
                return status;
        }
    }
    /* need[i]: the pieces [0, need[i]) hold ranges 0..i (in the caller's order). */
    for (size_t i = 1; i < n; i++)
        f->need[i] = TT_MAX(f->need[i], f->need[i - 1]);
    f->npc = npc;
    f->nrange = n;
    if (npc == 0)
        return TT_OK;
    f->pending = true;
    if (f->mode != TT_FETCH_URING || f->ring_broken)
        return TT_OK; /* pread: the reads happen in tt_fetcher_wait */
    /* Pieces that lie wholly past the end of the file (O_DIRECT widening) need nothing:
     * they are done as they are and never submitted. */
    f->qhead = f->qtail = f->qlen = f->inflight = 0;
    for (size_t p = 0; p < npc; p++)
        if (!piece_done(&f->pc[p])) {
            f->queue[f->qtail] = (uint32_t)p;
            f->qtail = (f->qtail + 1) % npc;
            f->qlen++;
        }
    return uring_pump(f, false);
}

int tt_fetcher_start(tt_fetcher *f, size_t n, const uint64_t *off, const uint64_t *len,
                     const uint8_t **ptr) {
    abandon(f);
    f->status = TT_OK;
    f->npc = f->ready = f->nrange = 0;
    int st = start_read(f, n, off, len, ptr);
    if (st) /* refused ranges, no memory, a shrunk file: a later wait says so again */
        f->status = st;
    return st;
}

int tt_fetcher_wait(tt_fetcher *f, size_t i) {
    if (!f->pending)
        return f->status;
    const size_t want = i < f->nrange ? f->need[i] : f->npc;
    const bool uring = f->mode == TT_FETCH_URING && !f->ring_broken;
    while (f->status == TT_OK && f->ready < want) {
        if (!piece_done(&f->pc[f->ready])) {
            int st = uring ? uring_pump(f, true) : read_piece(f, &f->pc[f->ready]);
            if (st && f->status == TT_OK)
                f->status = st;
        }
        while (f->ready < f->npc && piece_done(&f->pc[f->ready]))
            f->ready++;
    }
    if (f->status != TT_OK) {
        /* A failed read: wait for every read still in flight, since the kernel is still
         * writing into the buffer, then end the started read. */
        while (uring && f->pending && f->inflight > 0)
            (void)uring_pump(f, true);
        f->pending = false;
        return f->status;
    }
    if (f->ready >= f->npc)
        f->pending = false;
    return TT_OK;
}

int tt_fetcher_read(tt_fetcher *f, size_t n, const uint64_t *off, const uint64_t *len,
                    const uint8_t **ptr) {
    int st = tt_fetcher_start(f, n, off, len, ptr);
    return st ? st : tt_fetcher_wait(f, SIZE_MAX);
}

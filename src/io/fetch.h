/* The residual fetcher: many byte ranges of one file per call (src/io/fetch.c). */
#ifndef TT_IO_FETCH_H
#define TT_IO_FETCH_H

#include "common/common.h"

/* A residual fetcher reads many byte ranges of one or several files per call (each range
 * within one file): with io_uring
 * (batched submissions, up to queue_depth reads in flight), with pread (used when a
 * ring cannot be set up and the file is not mapped), or by pointing into a mapping.
 * One fetcher belongs to one search context (one thread). */
enum { TT_FETCH_URING = 1, TT_FETCH_MMAP = 2, TT_FETCH_PREAD = 3 };

/* One file of a fetcher: its payload is bytes [start, start + file_size - base) of the
 * space the ranges are given in (several files laid end to end: an index's segments). */
typedef struct tt_fetch_file {
    int fd;                 /* buffered read-only descriptor (URING, PREAD) */
    int fd_direct;          /* O_DIRECT descriptor, or -1 for buffered reads */
    const char *path;       /* for messages (must outlive the fetcher) */
    uint64_t file_size;     /* bytes in the file */
    uint64_t base;          /* file offset of its payload */
    const uint8_t *map;     /* mapping of the payload (MMAP) */
    uint64_t start;         /* where its payload starts in the range space */
} tt_fetch_file;

typedef struct tt_fetch_config {
    int mode;               /* TT_FETCH_URING, _MMAP or _PREAD */
    /* The files, ascending by start, contiguous: nfiles of them at files; or, with
     * nfiles 0, the one file below (range offset 0 at its payload start). */
    size_t nfiles;
    const tt_fetch_file *files;
    int fd;                 /* buffered read-only descriptor (URING, PREAD) */
    int fd_direct;          /* O_DIRECT descriptor, or -1 for buffered reads */
    const char *path;       /* for messages */
    uint64_t file_size;     /* bytes in the file */
    uint64_t base;          /* file offset of range offset 0 (the payload start) */
    const uint8_t *map;     /* mapping of the payload (MMAP) */
    int queue_depth;        /* reads in flight (URING), default 64 */
    uint32_t max_read;      /* longest single read in bytes (default 1 MiB) */
} tt_fetch_config;

typedef struct tt_fetch_stats {
    uint64_t calls;         /* reads started (tt_fetcher_read, tt_fetcher_start) */
    uint64_t ranges;        /* ranges requested */
    uint64_t bytes;         /* bytes read from the file (MMAP: bytes of the ranges) */
    uint64_t reads;         /* read requests issued, resubmissions included (MMAP: 0) */
} tt_fetch_stats;

typedef struct tt_fetcher tt_fetcher;

/* Creates a fetcher. If cfg->mode is URING and a ring cannot be set up (ENOSYS,
 * EPERM under seccomp, ENOMEM...), falls back to MMAP when cfg->map is set, else to
 * PREAD, and writes the reason to note (may be NULL). Errors: TT_EINVAL, TT_ENOMEM. */
int tt_fetcher_new(tt_fetcher **out, const tt_fetch_config *cfg, char *note, size_t note_len);
void tt_fetcher_free(tt_fetcher *f);
int tt_fetcher_mode(const tt_fetcher *f);

/* Reads n ranges [off[i], off[i] + len[i]) (of the range space) and sets ptr[i] to
 * their bytes. Ranges may come in any order and may overlap; overlapping or adjacent
 * ones of one file (and, with O_DIRECT, ones sharing a 4 KiB block) are read once.
 * Pointers stay valid until the next call. A range past the end of its file, or
 * across two files, is TT_ECORRUPT; a failed read TT_EIO naming the file. */
int tt_fetcher_read(tt_fetcher *f, size_t n, const uint64_t *off, const uint64_t *len,
                    const uint8_t **ptr);
/* tt_fetcher_read in two steps, so that the caller can use the first ranges while the
 * others are still being read: tt_fetcher_start validates the ranges, sets ptr and (with
 * io_uring) submits the reads; tt_fetcher_wait(f, i) returns once ranges 0..i (in the
 * caller's order; i >= n: all of them) have arrived, reading them itself with pread.
 * Bytes of a range must not be read before a wait has covered it. The same errors as
 * tt_fetcher_read, from either call; after an error the started read is over (a later
 * wait returns the same error). A new start, or tt_fetcher_free, first ends a started
 * read that was not waited for to its end. */
int tt_fetcher_start(tt_fetcher *f, size_t n, const uint64_t *off, const uint64_t *len,
                     const uint8_t **ptr);
int tt_fetcher_wait(tt_fetcher *f, size_t i);
void tt_fetcher_stats(const tt_fetcher *f, tt_fetch_stats *out);
void tt_fetcher_stats_reset(tt_fetcher *f);

#endif

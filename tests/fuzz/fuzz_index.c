/* Fuzz target: every reader of an index directory (tt_index_open, tt_index_verify) and
 * a search over whatever opened. Two small valid indexes (external ids, float16
 * originals, the 2-bit adaptive codec; the second with one residual scale per vector,
 * vscale.tt) are built once at startup; each input says how to damage a copy of one:
 *
 *   byte 0  flags: 1 fix the payload size and hash in every file header, 2 fix every
 *           header checksum, 4 fix the MANIFEST (sizes, hashes, its own checksums),
 *           8 also run tt_index_verify, 16 open with TT_IO_AUTO (io_uring) instead of
 *           mmap, 32 search the index (every mode) when it opens, 64 start from the
 *           index with per-vector scales
 *   byte 1  bit 7 set: replace file (byte 1 & 15) % NFILES by the rest of the input;
 *           else the rest is a list of 12-byte edits {file u8, op u8, offset u16 LE,
 *           value u64 LE} applied in order (see apply_edit).
 *
 * The fix-ups matter: checksums stop accidents, not an attacker, who recomputes them.
 * With them the fuzzer gets past the checksums to the structural checks (counts,
 * offsets, IVF lists, ids, codes) and to what search does with a hostile index that
 * passed them. Every input must leave as many open descriptors and mappings as it
 * found. Seeds: tests/fuzz/corpus/index (written by this target when
 * TT_FUZZ_WRITE_SEEDS=DIR is set). */
#include "io/dir.h"
#include "io/file.h"
#include "fuzz.h"
#include "input/input.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define NFILES 11
static const char *const names[NFILES] = {
    TT_F_MANIFEST, TT_F_META, TT_F_CENTROIDS, TT_F_CODEC, TT_F_DOCLENS,
    TT_F_CODES,    TT_F_RESIDUALS, TT_F_IVF, TT_F_IDS, TT_F_ORIGINALS, TT_F_VSCALE};

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    int present;
} buf;

static buf base[2][NFILES], cur[NFILES]; /* base[1]: with vscale.tt */
static char work[600];
enum { DIM = 16, NDOCS = 48 };
static float query[4 * DIM];

static void die(const char *what) {
    fprintf(stderr, "fuzz_index: %s: %s\n", what, tt_last_error());
    abort();
}

static void buf_reserve(buf *b, size_t n) {
    if (n > b->cap) {
        uint8_t *q = realloc(b->p, n);
        if (!q)
            abort();
        b->p = q;
        b->cap = n;
    }
}

static void buf_set(buf *b, const uint8_t *p, size_t n) {
    buf_reserve(b, n);
    if (n)
        memcpy(b->p, p, n);
    b->n = n;
    b->present = 1;
}

static void buf_resize(buf *b, size_t n, uint8_t fill) {
    size_t old = b->n;
    buf_reserve(b, n);
    if (n > old)
        memset(b->p + old, fill, n - old);
    b->n = n;
}

/* Builds base index vs (1: per-vector scales) from a deterministic clustered corpus. */
static void build_base(int vs) {
    char vpath[700], lpath[700], ipath[700], out[700];
    snprintf(vpath, sizeof vpath, "%s/v.npy", fz_dir());
    snprintf(lpath, sizeof lpath, "%s/l.npy", fz_dir());
    snprintf(ipath, sizeof ipath, "%s/ids.txt", fz_dir());
    snprintf(out, sizeof out, "%s/base", fz_dir());
    tt_rng r;
    tt_rng_seed(&r, 7);
    int64_t lens[NDOCS];
    uint64_t nv = 0;
    for (int d = 0; d < NDOCS; d++)
        nv += (uint64_t)(lens[d] = 1 + (int64_t)tt_rng_below(&r, 6));
    float *x = malloc(nv * DIM * sizeof *x);
    if (!x)
        abort();
    for (uint64_t i = 0; i < nv * DIM; i++) /* 4 loose clusters, by document */
        x[i] = (float)(tt_rng_uniform(&r) - 0.5) + (float)((i / DIM) % 4 == i % 4);
    memcpy(query, x, sizeof query);
    tt_npy_writer w;
    if (tt_npy_writer_open(&w, vpath, TT_DT_F32, DIM) || tt_npy_writer_append(&w, x, nv) ||
        tt_npy_writer_close(&w) || tt_npy_writer_open(&w, lpath, TT_DT_I64, 0) ||
        tt_npy_writer_append(&w, lens, NDOCS) || tt_npy_writer_close(&w))
        die("writing the corpus");
    free(x);
    FILE *f = fopen(ipath, "w");
    if (!f)
        abort();
    for (int d = 0; d < NDOCS; d++)
        fprintf(f, "doc-%d\n", d * 7);
    fclose(f);
    const char *vp = vpath, *lp = lpath;
    tt_input *in;
    if (tt_input_open(&in, 1, &vp, &lp, ipath, NULL))
        die("tt_input_open");
    tt_build_options o;
    tt_build_options_init(&o);
    o.num_centroids = 8;
    o.threads = 1;
    o.memory_bytes = 64ull << 20;
    o.keep_originals = TT_KEEP_F16;
    o.kmeans_iters = 4;
    o.encoder = "fuzz";
    o.codec_tables = TT_CODEC_ADAPTIVE;
    o.debias = vs ? TT_DEBIAS_VECTOR : TT_DEBIAS_TABLE;
    if (tt_build(out, in, &o, NULL))
        die("tt_build");
    tt_input_free(in);
    for (int i = 0; i < NFILES; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", out, names[i]);
        size_t n;
        uint8_t *data = fz_read(p, &n);
        if (!data && (vs || strcmp(names[i], TT_F_VSCALE))) {
            fprintf(stderr, "fuzz_index: %s missing from the base index\n", p);
            abort();
        }
        if (data)
            buf_set(&base[vs][i], data, n);
        free(data);
    }
    fz_rmdir(out);
}

static void write_seeds(const char *dir) {
    mkdir(dir, 0755);
    size_t most = 14;
    for (int vs = 0; vs < 2; vs++)
        for (int i = 0; i < NFILES; i++)
            most = base[vs][i].n + 2 > most ? base[vs][i].n + 2 : most;
    uint8_t *s = malloc(most);
    char p[4096];
    if (!s)
        abort();
    /* the intact indexes, checked and searched */
    FILE *f;
    for (int vs = 0; vs < 2; vs++) {
        s[0] = (uint8_t)(0x07 | 0x08 | 0x20 | (vs ? 0x40 : 0));
        s[1] = 0;
        snprintf(p, sizeof p, "%s/intact%s", dir, vs ? "-vscale" : "");
        f = fopen(p, "wb");
        if (!f || fwrite(s, 1, 2, f) != 2 || fclose(f))
            abort();
    }
    /* each file in replace mode, so that mutations work on its bytes (the scales in
     * the index that has them) */
    for (int i = 0; i < NFILES; i++) {
        const buf *b = &base[i == NFILES - 1][i];
        s[0] = (uint8_t)(0x07 | 0x20 | (i == NFILES - 1 ? 0x40 : 0));
        s[1] = (uint8_t)(0x80 | i);
        memcpy(s + 2, b->p, b->n);
        snprintf(p, sizeof p, "%s/replace-%s", dir, names[i]);
        f = fopen(p, "wb");
        if (!f || fwrite(s, 1, 2 + b->n, f) != 2 + b->n || fclose(f))
            abort();
    }
    /* a few header-count edits (op 2: u64 at offset) with every fix-up */
    static const struct { uint8_t file; uint16_t off; uint64_t v; } edits[] = {
        {1, 16, 1}, {4, 16, 3}, {7, 16, 9}, {7, 24, 1000}, {8, 16, 47}, {6, 24, 3},
        {5, 64, 0xffff}, {7, 64, 0x7fffffff}, {3, 64, 0},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        s[0] = 0x07 | 0x20;
        s[1] = 1;
        s[2] = edits[i].file;
        s[3] = 2;
        tt_wr16(s + 4, edits[i].off);
        tt_wr64(s + 6, edits[i].v);
        snprintf(p, sizeof p, "%s/edit-%zu", dir, i);
        f = fopen(p, "wb");
        if (!f || fwrite(s, 1, 14, f) != 14 || fclose(f))
            abort();
    }
    free(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tt_blas_set_threads(1); /* one core per fuzzer process: idle BLAS threads spin */
    build_base(0);
    build_base(1);
    snprintf(work, sizeof work, "%s/idx", fz_dir());
    const char *seeds = getenv("TT_FUZZ_WRITE_SEEDS");
    if (seeds && *seeds) {
        write_seeds(seeds);
        printf("fuzz_index: seeds written to %s\n", seeds);
        exit(0);
    }
    return 0;
}

/* One edit. Offsets wrap modulo the file size, so every edit lands somewhere. */
static void apply_edit(const uint8_t *e) {
    buf *b = &cur[e[0] % NFILES];
    unsigned op = e[1] % 8;
    size_t off = tt_rd16(e + 2);
    uint64_t v = tt_rd64(e + 4);
    if (!b->present)
        return;
    if (op == 6) { /* delete the file */
        b->present = 0;
        return;
    }
    if (op == 3) { /* truncate */
        buf_resize(b, off % (b->n + 1), 0);
        return;
    }
    if (op == 4) { /* append (v & 255) + 1 bytes of value v >> 8 */
        buf_resize(b, b->n + (v & 255) + 1, (uint8_t)(v >> 8));
        return;
    }
    if (b->n == 0)
        return;
    off %= b->n;
    size_t room = b->n - off;
    uint8_t tmp[8];
    switch (op) {
    case 0: b->p[off] = (uint8_t)v; break;                 /* set a byte */
    case 1: b->p[off] ^= (uint8_t)(1u << (v & 7)); break;  /* flip a bit */
    case 2:                                                /* store a u64 */
        tt_wr64(tmp, v);
        memcpy(b->p + off, tmp, room < 8 ? room : 8);
        break;
    case 5:                                                /* store a u32 */
        tt_wr32(tmp, (uint32_t)v);
        memcpy(b->p + off, tmp, room < 4 ? room : 4);
        break;
    default:                                               /* add to a u32 */
        if (room >= 4)
            tt_wr32(b->p + off, tt_rd32(b->p + off) + (uint32_t)v);
        break;
    }
}

static void fix_payload(buf *b) {
    if (!b->present || b->n < TT_HEADER_SIZE)
        return;
    tt_wr64(b->p + 40, b->n - TT_HEADER_SIZE);
    tt_wr64(b->p + 48, XXH64(b->p + TT_HEADER_SIZE, b->n - TT_HEADER_SIZE, 0));
}

static void fix_header(buf *b) {
    if (b->present && b->n >= TT_HEADER_SIZE)
        tt_wr32(b->p + 60, XXH32(b->p, 60, 0));
}

/* Makes every manifest entry that names one of our files agree with it. */
static void fix_manifest(void) {
    buf *m = &cur[0];
    if (!m->present || m->n < TT_HEADER_SIZE + 8)
        return;
    uint64_t n = (m->n - TT_HEADER_SIZE - 8) / 64;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t *e = m->p + TT_HEADER_SIZE + 8 + 64 * i;
        for (int f = 1; f < NFILES; f++) {
            if (strncmp((const char *)e, names[f], 32) || !cur[f].present)
                continue;
            tt_wr64(e + 40, cur[f].n);
            if (cur[f].n >= TT_HEADER_SIZE)
                tt_wr64(e + 48, tt_rd64(cur[f].p + 48));
        }
    }
    fix_payload(m);
    fix_header(m);
}

static void write_index(void) {
    mkdir(work, 0755);
    for (int i = 0; i < NFILES; i++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", work, names[i]);
        unlink(p);
        if (!cur[i].present)
            continue;
        int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || (cur[i].n && write(fd, cur[i].p, cur[i].n) != (ssize_t)cur[i].n)) {
            perror(p);
            abort();
        }
        close(fd);
    }
}

/* Open descriptors of this process and its mappings of the index files: no path,
 * failing or not, may leak either. (Other mappings come and go with the allocators.) */
static void resources(int *fds, int *maps) {
    *fds = *maps = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    while (d && (de = readdir(d)))
        ++*fds;
    if (d)
        closedir(d);
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    while (f && fgets(line, sizeof line, f))
        *maps += strstr(line, work) != NULL;
    if (f)
        fclose(f);
}

/* What a caller does with an index that opened: every accessor must stay in bounds. */
static void use_index(const tt_index *idx, int search) {
    tt_index_info info;
    if (tt_index_get_info(idx, &info))
        abort();
    volatile unsigned sink = 0;
    for (uint64_t d = 0; d < info.num_docs && d < 4096; d++) {
        size_t len;
        const char *id = tt_index_doc_id(idx, d, &len);
        if (!id || len == 0)
            abort();
        for (size_t i = 0; i < len; i++)
            sink += (unsigned char)id[i];
    }
    (void)sink;
    if (!search || info.dim != DIM)
        return;
    tt_search_ctx *ctx;
    if (tt_search_ctx_new(idx, &ctx))
        return;
    tt_hit hits[8];
    uint32_t nh;
    for (int mode = TT_MODE_PLAID; mode <= TT_MODE_EXACT; mode++) {
        tt_search_options so;
        tt_search_options_init(&so);
        so.mode = mode;
        so.nprobe = 4;
        so.threshold = -1e30f; /* keep every centroid */
        so.ndocs = 8;          /* fewer than the candidates: stages 2 and 3 prune */
        if (tt_search(idx, ctx, query, 4, 8, &so, hits, &nh) == TT_OK) {
            if (nh > 8)
                abort();
            for (uint32_t i = 0; i < nh; i++)
                if (hits[i].doc >= info.num_docs)
                    abort();
        }
    }
    tt_search_ctx_free(ctx);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2)
        return 0;
    uint8_t flags = data[0];
    for (int i = 0; i < NFILES; i++) {
        const buf *b = &base[flags & 64 ? 1 : 0][i];
        buf_set(&cur[i], b->p, b->n);
        cur[i].present = b->present;
    }
    if (data[1] & 0x80) {
        buf_set(&cur[(data[1] & 15) % NFILES], data + 2, size - 2);
    } else {
        for (size_t off = 2; off + 12 <= size; off += 12)
            apply_edit(data + off);
    }
    for (int i = 1; i < NFILES; i++) {
        if (flags & 1)
            fix_payload(&cur[i]);
        if (flags & 2)
            fix_header(&cur[i]);
    }
    if (flags & 4)
        fix_manifest();
    write_index();

    int fds0, maps0, fds1, maps1;
    resources(&fds0, &maps0);
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = flags & 16 ? TT_IO_AUTO : TT_IO_MMAP;
    tt_index *idx = NULL;
    int st = tt_index_open(&idx, work, &oo);
    if (st == TT_OK) {
        use_index(idx, flags & 32);
        tt_index_close(idx);
    } else if (idx || !*tt_last_error()) {
        abort(); /* a failure leaves no handle and says why */
    }
    if (flags & 8) {
        int vst = tt_index_verify(work, NULL, NULL);
        /* verify checks everything open checks, and more */
        if (vst == TT_OK && st != TT_OK && !(flags & 16))
            abort();
    }
    resources(&fds1, &maps1);
    if (fds1 != fds0 || maps1 != maps0)
        abort(); /* a descriptor or a mapping outlived its index */
    return 0;
}

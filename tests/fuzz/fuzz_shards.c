/* Fuzz target: the SHARDS file of a sharded index (src/index/shards.c) and everything
 * tt_sharded_open does with it, then a search over whatever opened. A valid sharded
 * index of 3 shards is built once at startup; each input replaces its SHARDS:
 *
 *   byte 0  flags: 1 wrap the rest in a valid header (kind SHRD, a = entries, payload
 *           checksum and header checksum right); 2 with 1: b and c the sums of the
 *           entries' counts (else 0); 4 also open as rank 1 of 2
 *   rest    the payload (with flag 1) or the whole file
 *
 * The fix-ups get the fuzzer past the checksums to the structural checks (names,
 * counts, the shared codebook, the shards' own indexes). Every input must leave as
 * many open descriptors as it found. Seeds: tests/fuzz/corpus/shards (written by this
 * target when TT_FUZZ_WRITE_SEEDS=DIR is set). */
#include "fuzz.h"
#include "index/shards.h"
#include "input/npy.h"
#include "io/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

enum { DIM = 16, NDOCS = 30 };
static char dir[700];
static uint8_t *good;
static size_t good_n;
static float query[3 * DIM];

static void die(const char *what) {
    fprintf(stderr, "fuzz_shards: %s: %s\n", what, tt_last_error());
    abort();
}

static void build_base(void) {
    char vpath[800], lpath[800];
    snprintf(vpath, sizeof vpath, "%s/v.npy", fz_dir());
    snprintf(lpath, sizeof lpath, "%s/l.npy", fz_dir());
    snprintf(dir, sizeof dir, "%s/sh", fz_dir());
    int64_t lens[NDOCS];
    uint64_t nv = 0;
    for (int d = 0; d < NDOCS; d++)
        nv += (uint64_t)(lens[d] = 1 + d % 5);
    float *x = malloc(nv * DIM * sizeof *x);
    if (!x)
        abort();
    uint64_t s = 7;
    for (uint64_t i = 0; i < nv * DIM; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    for (int i = 0; i < 3 * DIM; i++)
        query[i] = x[i * 3];
    tt_npy_writer w;
    if (tt_npy_writer_open(&w, vpath, TT_DT_F32, DIM) || tt_npy_writer_append(&w, x, nv) ||
        tt_npy_writer_close(&w) || tt_npy_writer_open(&w, lpath, TT_DT_I64, 0) ||
        tt_npy_writer_append(&w, lens, NDOCS) || tt_npy_writer_close(&w))
        die("writing the corpus");
    free(x);
    const char *vp = vpath, *lp = lpath;
    tt_input *in;
    if (tt_input_open(&in, 1, &vp, &lp, NULL, NULL))
        die("tt_input_open");
    tt_build_options o;
    tt_build_options_init(&o);
    o.num_centroids = 4;
    o.threads = 1;
    o.memory_bytes = 64ull << 20;
    o.shards = 3;
    if (tt_build(dir, in, &o, NULL))
        die("tt_build");
    tt_input_free(in);
    char p[800];
    snprintf(p, sizeof p, "%s/%s", dir, TT_F_SHARDS);
    if (!(good = fz_read(p, &good_n)))
        die("reading SHARDS");
}

static void write_seeds(const char *out) {
    char p[1024];
    uint8_t *b = malloc(good_n + 1);
    if (!b)
        abort();
    b[0] = 0;
    memcpy(b + 1, good, good_n);
    snprintf(p, sizeof p, "%s/raw", out);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(b, 1, good_n + 1, f) != good_n + 1 || fclose(f))
        abort();
    b[TT_HEADER_SIZE - 1] = 1 | 2 | 4; /* the payload, wrapped */
    snprintf(p, sizeof p, "%s/wrapped", out);
    f = fopen(p, "wb");
    if (!f || fwrite(b + TT_HEADER_SIZE - 1, 1, good_n + 1 - TT_HEADER_SIZE, f) !=
                  good_n + 1 - TT_HEADER_SIZE ||
        fclose(f))
        abort();
    free(b);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    tt_blas_set_threads(1);
    build_base();
    const char *seeds = getenv("TT_FUZZ_WRITE_SEEDS");
    if (seeds && *seeds) {
        write_seeds(seeds);
        printf("fuzz_shards: seeds written to %s\n", seeds);
        exit(0);
    }
    return 0;
}

static void try_open(uint32_t rank, uint32_t nranks) {
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = TT_IO_MMAP;
    tt_sharded *sh = NULL;
    if (tt_sharded_open(&sh, dir, &oo, rank, nranks) != TT_OK)
        return;
    uint64_t qoff = 0;
    uint32_t qlen = 3, n = 0;
    tt_hit hits[5];
    tt_search_options so;
    tt_search_options_init(&so);
    so.mode = TT_MODE_EXHAUSTIVE;
    if (tt_sharded_num_open(sh) &&
        tt_sharded_search_batch(sh, query, &qoff, &qlen, 1, 5, &so, 1, hits, &n, NULL) == TT_OK)
        for (uint32_t i = 0; i < n; i++) {
            size_t len;
            if (!tt_sharded_doc_id(sh, hits[i].doc, &len))
                die("a hit without an id");
        }
    tt_sharded_close(sh);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const int fds = fz_count_fds();
    const uint8_t flags = data[0];
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    uint8_t *file = malloc(TT_HEADER_SIZE + n + 1);
    if (!file)
        abort();
    size_t fn;
    if (flags & 1) {
        tt_header h;
        memset(&h, 0, sizeof h);
        memcpy(h.kind, "SHRD", 4);
        h.version = TT_FILE_VERSION;
        h.a = n / TT_SHARD_ENTRY;
        for (size_t i = 0; (flags & 2) && i + TT_SHARD_ENTRY <= n; i += TT_SHARD_ENTRY) {
            h.b += tt_rd64(p + i + 32);
            h.c += tt_rd64(p + i + 40);
        }
        h.payload_bytes = n;
        h.payload_hash = XXH64(p, n, 0);
        tt_header_encode(&h, file);
        if (n)
            memcpy(file + TT_HEADER_SIZE, p, n);
        fn = TT_HEADER_SIZE + n;
    } else {
        if (n)
            memcpy(file, p, n);
        fn = n;
    }
    char path[800];
    snprintf(path, sizeof path, "%s/%s", dir, TT_F_SHARDS);
    FILE *f = fopen(path, "wb");
    if (!f || (fn && fwrite(file, 1, fn, f) != fn) || fclose(f))
        abort();
    free(file);
    try_open(0, 1);
    if (flags & 4)
        try_open(1, 2);
    if (fz_count_fds() != fds) {
        fprintf(stderr, "fuzz_shards: descriptors leaked (%d before, %d after)\n", fds,
                fz_count_fds());
        abort();
    }
    return 0;
}

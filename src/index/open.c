/* Opening, describing and verifying an index. Every count, offset and length read
 * from a file is checked against the file sizes before it is used, so a damaged or
 * hostile index gives an error naming the file, never an out-of-bounds read. */
#include "index/index.h"
#include "io/dir.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void tt_open_options_init(tt_open_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->io = TT_IO_AUTO;
    o->queue_depth = 64;
}

/* ------------------------------------------------------------------ meta */

/* Finds "key=" at the start of a line of the meta text and copies the value. */
static bool meta_get(const tt_fmap *m, const char *key, char *val, size_t cap) {
    const char *p = (const char *)m->payload, *end = p + m->h.payload_bytes;
    size_t kl = strlen(key);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > kl && !memcmp(p, key, kl) && p[kl] == '=') {
            size_t vl = (size_t)(le - p) - kl - 1;
            if (vl >= cap)
                vl = cap - 1;
            memcpy(val, p + kl + 1, vl);
            val[vl] = '\0';
            return true;
        }
        p = le + 1;
    }
    return false;
}

static int meta_u64(const tt_fmap *m, const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
    char v[64], *e;
    if (!meta_get(m, key, v, sizeof v))
        return tt_err(TT_ECORRUPT, "%s: missing '%s'", m->path, key);
    errno = 0;
    unsigned long long x = strtoull(v, &e, 10);
    if (errno || e == v || *e || x < lo || x > hi)
        return tt_err(TT_ECORRUPT, "%s: bad value '%s' for '%s'", m->path, v, key);
    *out = x;
    return TT_OK;
}

static double meta_double(const tt_fmap *m, const char *key) {
    char v[64];
    return meta_get(m, key, v, sizeof v) ? strtod(v, NULL) : 0.0;
}

/* -------------------------------------------------------------- checking */

static int expect(const tt_fmap *f, bool ok, const char *what) {
    return ok ? TT_OK : tt_err(TT_ECORRUPT, "%s: %s", f->path, what);
}

/* The payload must be exactly `bytes` long (header counts agree with the data). */
static int expect_size(const tt_fmap *f, uint64_t a, uint64_t b, uint64_t bytes) {
    if (f->h.a != a || f->h.b != b)
        return tt_err(TT_ECORRUPT, "%s: header counts (%" PRIu64 ", %" PRIu64
                      ") disagree with the index (%" PRIu64 ", %" PRIu64 ")",
                      f->path, f->h.a, f->h.b, a, b);
    if (f->h.payload_bytes != bytes)
        return tt_err(TT_ECORRUPT, "%s: %" PRIu64 " data bytes, expected %" PRIu64, f->path,
                      f->h.payload_bytes, bytes);
    return TT_OK;
}

/* Opens one file of the manifest. The resident ones (everything search keeps in memory:
 * all but the residuals and the originals) get their payload checksum verified before
 * anything in them is trusted: they are small next to the residuals, and a flipped
 * byte in them changes rankings without any other sign (doc/format.md). */
enum { RESIDENT = 1, STREAMED = 0 };
static int open_file(tt_index *idx, const tt_manifest *man, tt_fmap *f, const char *name,
                     const char *kind, int map, int resident) {
    const tt_manifest_entry *e = tt_manifest_find(man, name);
    if (!e)
        return tt_err(TT_ECORRUPT, "%s/%s: missing from the manifest", idx->dir, name);
    int st = tt_fmap_open(f, idx->dir, name, kind, map);
    if (st)
        return st;
    if (e->size != f->size || e->payload_hash != f->h.payload_hash)
        return tt_err(TT_ECORRUPT, "%s: does not match the manifest (replaced or changed after "
                      "the build)", f->path);
    if (resident && (st = tt_fmap_check_payload(f, NULL, NULL)))
        return st;
    return TT_OK;
}

static int load_meta(tt_index *idx) {
    const tt_fmap *m = &idx->f_meta;
    tt_index_info *in = &idx->info;
    uint64_t v;
    int st;
#define U64(key, lo, hi, dst)                                                                   \
    do {                                                                                        \
        if ((st = meta_u64(m, key, lo, hi, &v)))                                               \
            return st;                                                                          \
        dst = v;                                                                                \
    } while (0)
    U64("dim", 1, 1 << 20, idx->dim);
    U64("nbits", 1, 4, idx->nbits);
    U64("num_docs", 1, UINT64_MAX >> 8, idx->num_docs);
    U64("num_vectors", 1, UINT64_MAX >> 8, idx->num_vectors);
    U64("num_centroids", 1, 1 << 24, idx->num_centroids);
    U64("normalized", 0, 1, idx->normalized);
    U64("codec_tables", 0, 1, in->codec_tables);
    U64("keep_originals", 0, 1, in->keep_originals);
    U64("has_ids", 0, 1, in->has_ids);
    U64("seed", 0, UINT64_MAX, in->seed);
    U64("train_vectors", 0, UINT64_MAX, in->train_vectors);
    U64("heldout_vectors", 0, UINT64_MAX, in->heldout_vectors);
    U64("kmeans_iters", 0, 100000, in->kmeans_iters);
    U64("threads", 0, 100000, in->threads);
    U64("assign", 0, 1, in->assign);
#undef U64
    if (idx->nbits == 3)
        return tt_err(TT_ECORRUPT, "%s: nbits 3 is not a valid value", m->path);
    if (idx->num_vectors < idx->num_docs)
        return tt_err(TT_ECORRUPT, "%s: fewer vectors than documents", m->path);
    in->sample_factor = meta_double(m, "sample_factor");
    in->build_seconds = meta_double(m, "build_seconds");
    in->heldout_mse = meta_double(m, "heldout_mse");
    meta_get(m, "encoder", in->encoder, sizeof in->encoder);
    meta_get(m, "created", in->created, sizeof in->created);
    meta_get(m, "tartan_version", in->tartan_version, sizeof in->tartan_version);
    return TT_OK;
}

static int load_codec(tt_index *idx) {
    const tt_fmap *f = &idx->f_codec;
    uint64_t nt = f->h.c, nb = 1ull << idx->nbits;
    int st;
    if (f->h.a != idx->nbits || f->h.b != idx->dim || (nt != 1 && nt != idx->dim))
        return tt_err(TT_ECORRUPT, "%s: header disagrees with the index (nbits, dim, tables)",
                      f->path);
    if ((st = expect(f, f->h.payload_bytes == nt * (2 * nb - 1) * 4, "wrong size")))
        return st;
    const float *cut = (const float *)f->payload, *w = cut + nt * (nb - 1);
    for (uint64_t t = 0; t < nt; t++) {
        for (uint64_t i = 0; i < nb - 1; i++) {
            float c = cut[t * (nb - 1) + i];
            if (!isfinite(c) || (i && c < cut[t * (nb - 1) + i - 1]))
                return tt_err(TT_ECORRUPT, "%s: bucket cutoffs not finite and ascending", f->path);
        }
        for (uint64_t i = 0; i < nb; i++)
            if (!isfinite(w[t * nb + i]))
                return tt_err(TT_ECORRUPT, "%s: bucket weights not finite", f->path);
    }
    return tt_codec_init(&idx->codec, idx->dim, idx->nbits, (uint32_t)nt, cut, w);
}

static int load_doclens(tt_index *idx) {
    const tt_fmap *f = &idx->f_doclens;
    int st = expect_size(f, idx->num_docs, 0, idx->num_docs * 4);
    if (st)
        return st;
    idx->doclens = (const uint32_t *)f->payload;
    idx->doc_vec0 = tt_alloc(idx->num_docs + 1, sizeof *idx->doc_vec0, "document offsets");
    if (!idx->doc_vec0)
        return TT_ENOMEM;
    uint64_t v = 0;
    for (uint64_t d = 0; d < idx->num_docs; d++) {
        idx->doc_vec0[d] = v;
        uint32_t n = idx->doclens[d];
        if (n == 0)
            return tt_err(TT_ECORRUPT, "%s: document %" PRIu64 " has no vectors", f->path, d);
        if (n > idx->max_doclen)
            idx->max_doclen = n;
        v += n;
        if (v > idx->num_vectors)
            break;
    }
    idx->doc_vec0[idx->num_docs] = v;
    if (v != idx->num_vectors)
        return tt_err(TT_ECORRUPT, "%s: document lengths do not add up to %" PRIu64 " vectors",
                      f->path, idx->num_vectors);
    return TT_OK;
}

static int load_codes(tt_index *idx) {
    const tt_fmap *f = &idx->f_codes;
    idx->code_bytes = idx->num_centroids <= 65536 ? 2 : 4;
    uint64_t bytes;
    if (!tt_mul_ok(idx->num_vectors, idx->code_bytes, &bytes))
        return tt_err(TT_ECORRUPT, "%s: size overflows", f->path);
    int st = expect_size(f, idx->num_vectors, idx->code_bytes, bytes);
    if (st)
        return st;
    idx->codes = f->payload;
    /* Every code must name a centroid: search indexes score tables with them. */
    uint32_t K = idx->num_centroids;
    for (uint64_t v = 0; v < idx->num_vectors; v++)
        if (tt_index_code(idx, v) >= K)
            return tt_err(TT_ECORRUPT, "%s: vector %" PRIu64 " names centroid %u of %u", f->path,
                          v, tt_index_code(idx, v), K);
    return TT_OK;
}

static int load_ivf(tt_index *idx) {
    const tt_fmap *f = &idx->f_ivf;
    uint64_t K = idx->num_centroids, head = 8 * (K + 1) + 4 * K;
    if (f->h.a != K || f->h.payload_bytes < head || f->h.payload_bytes - head != f->h.c)
        return tt_err(TT_ECORRUPT, "%s: header disagrees with its size or the index", f->path);
    idx->ivf_off = (const uint64_t *)f->payload;
    idx->ivf_len = (const uint32_t *)(f->payload + 8 * (K + 1));
    idx->ivf_data = f->payload + head;
    idx->ivf_data_bytes = f->h.c;
    if (idx->ivf_off[0] != 0 || idx->ivf_off[K] != idx->ivf_data_bytes)
        return tt_err(TT_ECORRUPT, "%s: list offsets do not span the data", f->path);
    uint64_t entries = 0;
    for (uint64_t c = 0; c < K; c++) {
        /* Ascending and inside the data before any pointer is formed: the last offset
         * equals the data size, but a middle one may not yet be known to be below it
         * (found by fuzzing, tests/fuzz/regress/index). */
        if (idx->ivf_off[c + 1] < idx->ivf_off[c] || idx->ivf_off[c + 1] > idx->ivf_data_bytes)
            return tt_err(TT_ECORRUPT, "%s: list offsets not ascending within the data at "
                          "centroid %" PRIu64, f->path, c);
        /* Decode the list: it must hold exactly len ascending documents < num_docs. */
        const uint8_t *p = idx->ivf_data + idx->ivf_off[c], *end = idx->ivf_data + idx->ivf_off[c + 1];
        uint64_t doc = 0, delta;
        for (uint32_t i = 0; i < idx->ivf_len[c]; i++) {
            if (!tt_varint_get(&p, end, &delta) || (i && delta == 0) ||
                !tt_add_ok(doc, delta, &doc) || doc >= idx->num_docs)
                return tt_err(TT_ECORRUPT, "%s: list of centroid %" PRIu64 " is damaged",
                              f->path, c);
        }
        if (p != end)
            return tt_err(TT_ECORRUPT, "%s: list of centroid %" PRIu64 " has trailing bytes",
                          f->path, c);
        entries += idx->ivf_len[c];
    }
    return expect(f, entries == f->h.b, "entry count disagrees with the lists");
}

/* Ids "0", "1", ... for an index built without ids.tt: one allocation holding the
 * offsets and the digits, laid out as ids.tt's payload. */
static int make_row_ids(tt_index *idx) {
    uint64_t D = idx->num_docs, digits = 0, bytes;
    for (uint64_t lo = 0, hi = 10, w = 1; lo < D; lo = hi, hi *= 10, w++) /* w-digit rows */
        digits += w * (TT_MIN(hi, D) - lo);
    if (!tt_add_ok(8 * (D + 1), digits, &bytes))
        return tt_err(TT_ECORRUPT, "%s: document count overflows", idx->dir);
    uint8_t *mem = tt_alloc(bytes, 1, "document ids");
    if (!mem)
        return TT_ENOMEM;
    uint64_t *off = (uint64_t *)mem;
    char *data = (char *)mem + 8 * (D + 1);
    uint64_t pos = 0;
    for (uint64_t d = 0; d < D; d++) {
        off[d] = pos;
        char buf[24];
        int n = snprintf(buf, sizeof buf, "%" PRIu64, d);
        memcpy(data + pos, buf, (size_t)n);
        pos += (uint64_t)n;
    }
    off[D] = pos;
    idx->ids_made = mem;
    idx->id_off = off;
    idx->id_data = data;
    return TT_OK;
}

static int load_ids(tt_index *idx) {
    const tt_fmap *f = &idx->f_ids;
    uint64_t D = idx->num_docs, head = 8 * (D + 1);
    if (f->h.a != D || f->h.payload_bytes < head || f->h.payload_bytes - head != f->h.b)
        return tt_err(TT_ECORRUPT, "%s: header disagrees with its size or the index", f->path);
    idx->id_off = (const uint64_t *)f->payload;
    idx->id_data = (const char *)f->payload + head;
    if (idx->id_off[0] != 0 || idx->id_off[D] != f->h.b)
        return tt_err(TT_ECORRUPT, "%s: id offsets do not span the data", f->path);
    for (uint64_t d = 0; d < D; d++)
        if (idx->id_off[d + 1] <= idx->id_off[d])
            return tt_err(TT_ECORRUPT, "%s: id of document %" PRIu64 " is empty or misplaced",
                          f->path, d);
    return TT_OK;
}

/* Chooses the residual I/O path: io_uring when it can be set up here (it may be
 * compiled out of the kernel or refused by seccomp), else the mmap fallback. */
static int setup_io(tt_index *idx, const tt_open_options *o) {
    int want = o->io;
    idx->queue_depth = o->queue_depth > 0 ? TT_MIN(o->queue_depth, 4096) : 64;
    idx->res_fd_direct = -1;
    if (want != TT_IO_MMAP) {
        struct io_uring ring;
        int r = io_uring_queue_init(4, &ring, 0);
        if (r == 0) {
            io_uring_queue_exit(&ring);
            idx->io = TT_IO_URING;
        } else {
            snprintf(idx->io_note, sizeof idx->io_note,
                     "io_uring unavailable (%s); using mmap for residuals", strerror(-r));
            idx->io = TT_IO_MMAP;
        }
    } else {
        idx->io = TT_IO_MMAP;
    }
    if (idx->io == TT_IO_URING && o->direct) {
        idx->res_fd_direct = open(idx->f_residuals.path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (idx->res_fd_direct < 0)
            snprintf(idx->io_note, sizeof idx->io_note,
                     "O_DIRECT refused by the file system (%s); using buffered reads",
                     strerror(errno));
        else
            idx->direct = 1;
    }
    /* Search reads residuals at random, about a kilobyte per document: kernel readahead
     * (up to 128 KiB around each read or fault) would multiply the bytes read from the
     * device and evict useful pages. Exhaustive scans ask for their large ranges
     * explicitly (src/io/fetch.c). Advice only: failure changes nothing but speed. */
    (void)posix_fadvise(idx->f_residuals.fd, 0, 0, POSIX_FADV_RANDOM);
    if (idx->io == TT_IO_MMAP) {
        const tt_fmap *f = &idx->f_residuals;
        void *p = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (p == MAP_FAILED)
            return tt_err_errno(TT_EIO, errno, "%s: mmap failed", f->path);
        (void)madvise(p, (size_t)f->size, MADV_RANDOM);
        idx->f_residuals.base = p;
        idx->f_residuals.payload = idx->f_residuals.base + TT_HEADER_SIZE;
        idx->res_map = idx->f_residuals.payload;
    }
    idx->info.io = idx->io;
    return TT_OK;
}

static void fill_info(tt_index *idx, const tt_manifest *man) {
    tt_index_info *in = &idx->info;
    in->format_version = TT_FORMAT_VERSION;
    in->dim = idx->dim;
    in->nbits = idx->nbits;
    in->num_centroids = idx->num_centroids;
    in->num_docs = idx->num_docs;
    in->num_vectors = idx->num_vectors;
    in->normalized = idx->normalized;
    struct { const char *name; uint64_t *dst; } parts[] = {
        {TT_F_META, &in->bytes_meta},         {TT_F_CENTROIDS, &in->bytes_centroids},
        {TT_F_CODEC, &in->bytes_codec},       {TT_F_DOCLENS, &in->bytes_doclens},
        {TT_F_CODES, &in->bytes_codes},       {TT_F_RESIDUALS, &in->bytes_residuals},
        {TT_F_IVF, &in->bytes_ivf},           {TT_F_IDS, &in->bytes_ids},
        {TT_F_ORIGINALS, &in->bytes_originals},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const tt_manifest_entry *e = tt_manifest_find(man, parts[i].name);
        *parts[i].dst = e ? e->size : 0;
    }
    in->bytes_manifest = TT_HEADER_SIZE + 8 + 64ull * man->n;
    in->bytes_index = in->bytes_meta + in->bytes_centroids + in->bytes_codec + in->bytes_doclens +
                      in->bytes_codes + in->bytes_residuals + in->bytes_ivf + in->bytes_ids +
                      in->bytes_manifest;
    double values = (double)idx->num_vectors * idx->dim;
    in->bytes_f16 = idx->num_vectors * idx->dim * 2;
    in->bytes_f32 = idx->num_vectors * idx->dim * 4;
    in->bits_per_dim = 8.0 * (double)in->bytes_index / values;
    in->ratio_f16 = (double)in->bytes_f16 / (double)in->bytes_index;
    in->ratio_f32 = (double)in->bytes_f32 / (double)in->bytes_index;
    /* Search keeps everything in memory except the residuals and originals, plus the
     * document offsets and the int8 centroids made at open. */
    in->resident_bytes = in->bytes_index - in->bytes_residuals +
                         8 * (idx->num_docs + 1) + tt_cq_bytes(&idx->cq);
}

int tt_index_not_found(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return tt_err_errno(TT_ENOTFOUND, errno, "%s", dir);
    if (!S_ISDIR(sb.st_mode))
        return tt_err(TT_ENOTFOUND, "%s: Not a directory (an index is a directory)", dir);
    return tt_err(TT_ENOTFOUND, "%s: not a tartan index (no MANIFEST)", dir);
}

int tt_index_open(tt_index **out, const char *dir, const tt_open_options *opt) {
    tt_open_options defaults;
    tt_manifest man;
    int st;
    tt_err_clear();
    if (!out || !dir)
        return tt_err(TT_EINVAL, "tt_index_open: NULL argument");
    *out = NULL;
    if (!opt) {
        tt_open_options_init(&defaults);
        opt = &defaults;
    }
    if (!tt_host_is_le())
        return tt_err(TT_EUNSUPPORTED, "%s: indexes are read in place; this host is big-endian",
                      dir);
    tt_index *idx = calloc(1, sizeof *idx);
    if (!idx)
        return tt_err(TT_ENOMEM, "%s: out of memory", dir);
    tt_fmap *all[] = {&idx->f_meta, &idx->f_centroids, &idx->f_codec, &idx->f_doclens,
                      &idx->f_codes, &idx->f_residuals, &idx->f_ivf, &idx->f_ids,
                      &idx->f_originals};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        all[i]->fd = -1;
    idx->res_fd_direct = -1;
    idx->dir = strdup(dir);
    if (!idx->dir) {
        st = tt_err(TT_ENOMEM, "%s: out of memory", dir);
        goto fail;
    }
    if ((st = tt_manifest_read(dir, &man))) {
        if (st == TT_ENOTFOUND)
            st = tt_index_not_found(dir);
        goto fail;
    }
    if ((st = open_file(idx, &man, &idx->f_meta, TT_F_META, "META", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_meta(idx)))
        goto fail;
    uint64_t K = idx->num_centroids, dim = idx->dim, cbytes;
    if (!tt_mul_ok(K * dim, 4, &cbytes)) {
        st = tt_err(TT_ECORRUPT, "%s: centroid table size overflows", idx->f_meta.path);
        goto fail;
    }
    if ((st = open_file(idx, &man, &idx->f_centroids, TT_F_CENTROIDS, "CENT", TT_MAP_WHOLE, RESIDENT)) ||
        (st = expect_size(&idx->f_centroids, K, dim, cbytes)))
        goto fail;
    idx->centroids = (const float *)idx->f_centroids.payload;
    int64_t bad = tt_find_nonfinite(idx->centroids, K, idx->dim);
    if (bad >= 0) {
        st = tt_err(TT_ECORRUPT, "%s: centroid %lld has a NaN or infinite value",
                    idx->f_centroids.path, (long long)bad);
        goto fail;
    }
    if ((st = tt_cq_init(&idx->cq, idx->centroids, idx->num_centroids, idx->dim))) {
        st = tt_err(st, "%s: out of memory for the int8 centroids", dir);
        goto fail;
    }
    if ((st = open_file(idx, &man, &idx->f_codec, TT_F_CODEC, "CODC", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_codec(idx)) ||
        (st = open_file(idx, &man, &idx->f_doclens, TT_F_DOCLENS, "DOCL", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_doclens(idx)) ||
        (st = open_file(idx, &man, &idx->f_codes, TT_F_CODES, "CODE", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_codes(idx)) ||
        (st = open_file(idx, &man, &idx->f_ivf, TT_F_IVF, "IVF_", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_ivf(idx)))
        goto fail;
    /* Builds store ids (row numbers when they were given none); indexes made before
     * they did get them made here, so that tt_index_doc_id always has stable strings. */
    if (tt_manifest_find(&man, TT_F_IDS)
            ? (st = open_file(idx, &man, &idx->f_ids, TT_F_IDS, "IDS_", TT_MAP_WHOLE, RESIDENT)) ||
                  (st = load_ids(idx))
            : (st = make_row_ids(idx)))
        goto fail;
    idx->res_bytes = idx->codec.bytes_per_vec;
    uint64_t rbytes;
    if (!tt_mul_ok(idx->num_vectors, idx->res_bytes, &rbytes)) {
        st = tt_err(TT_ECORRUPT, "%s: residual size overflows", dir);
        goto fail;
    }
    if ((st = open_file(idx, &man, &idx->f_residuals, TT_F_RESIDUALS, "RESI", TT_MAP_NONE, STREAMED)) ||
        (st = expect_size(&idx->f_residuals, idx->num_vectors, idx->res_bytes, rbytes)))
        goto fail;
    if (idx->info.keep_originals) {
        uint64_t obytes;
        if (!tt_mul_ok(idx->num_vectors * dim, 2, &obytes)) {
            st = tt_err(TT_ECORRUPT, "%s: originals size overflows", dir);
            goto fail;
        }
        if ((st = open_file(idx, &man, &idx->f_originals, TT_F_ORIGINALS, "ORIG",
                            TT_MAP_WHOLE, STREAMED)) ||
            (st = expect_size(&idx->f_originals, idx->num_vectors, dim, obytes)))
            goto fail;
        idx->originals = (const uint16_t *)idx->f_originals.payload;
    }
    if ((st = setup_io(idx, opt)))
        goto fail;
    fill_info(idx, &man);
    *out = idx;
    return TT_OK;
fail:
    tt_index_close(idx);
    return st;
}

void tt_index_close(tt_index *idx) {
    if (!idx)
        return;
    tt_fmap *all[] = {&idx->f_meta, &idx->f_centroids, &idx->f_codec, &idx->f_doclens,
                      &idx->f_codes, &idx->f_residuals, &idx->f_ivf, &idx->f_ids,
                      &idx->f_originals};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->path || all[i]->fd >= 0)
            tt_fmap_close(all[i]);
    if (idx->res_fd_direct >= 0)
        close(idx->res_fd_direct);
    tt_codec_free(&idx->codec);
    tt_cq_free(&idx->cq);
    free(idx->doc_vec0);
    free(idx->ids_made);
    free(idx->dir);
    free(idx);
}

int tt_index_get_info(const tt_index *idx, tt_index_info *out) {
    if (!idx || !out)
        return tt_err(TT_EINVAL, "tt_index_get_info: NULL argument");
    *out = idx->info;
    return TT_OK;
}

const char *tt_index_doc_id(const tt_index *idx, uint64_t doc, size_t *len) {
    if (len)
        *len = 0;
    if (!idx || doc >= idx->num_docs) {
        tt_err(TT_EINVAL, "tt_index_doc_id: document %" PRIu64 " is not a row of the index",
               doc);
        return NULL;
    }
    if (len)
        *len = (size_t)(idx->id_off[doc + 1] - idx->id_off[doc]);
    return idx->id_data + idx->id_off[doc];
}

const char *tt_index_file_at(const tt_index *idx, const void *addr) {
    if (!idx)
        return NULL;
    const tt_fmap *const files[] = {&idx->f_meta, &idx->f_centroids, &idx->f_codec,
                                    &idx->f_doclens, &idx->f_codes, &idx->f_residuals,
                                    &idx->f_ivf, &idx->f_ids, &idx->f_originals};
    const uint8_t *a = (const uint8_t *)addr;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        const tt_fmap *f = files[i];
        if (f->base && a >= f->base && (uint64_t)(a - f->base) < f->size)
            return f->path;
    }
    return NULL;
}

/* Opening, describing and verifying an index. Every count, offset and length read
 * from a file is checked against the file sizes before it is used, so a damaged or
 * hostile index gives an error naming the file, never an out-of-bounds read. */
#include "index/index.h"
#include "index/shards.h"
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
bool tt_meta_get(const tt_fmap *m, const char *key, char *val, size_t cap) {
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

int tt_meta_u64(const tt_fmap *m, const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
    char v[64], *e;
    if (!tt_meta_get(m, key, v, sizeof v))
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
    return tt_meta_get(m, key, v, sizeof v) ? strtod(v, NULL) : 0.0;
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

/* Opens one file of the generation. The resident ones (everything search keeps in
 * memory: all but the residuals and the originals) get their payload checksum verified
 * before anything in them is trusted: they are small next to the residuals, and a
 * flipped byte in them changes rankings without any other sign (doc/format.md).
 * RESIDENT_MAPPED: checked the same, but left mapped for the caller to decide what
 * search keeps (the centroids: a float16 copy, or tt_fmap_own). */
enum { RESIDENT = 1, STREAMED = 0, RESIDENT_MAPPED = 2 };
static int open_file(tt_index *idx, tt_fmap *f, const char *name, const char *kind, int map,
                     int resident) {
    const tt_manifest_entry *e = tt_manifest_find(&idx->man, name);
    if (!e)
        return tt_err(TT_ECORRUPT, "%s/%s: missing from the manifest", idx->dir, name);
    /* What search keeps in memory is read into memory it owns (TT_MAP_COPY): mapped
     * file pages of the centroids, codes and lists were evicted under memory pressure
     * and faulted back one at a time in the middle of queries. */
    int st = tt_fmap_open(f, idx->dir, name, kind,
                          resident == RESIDENT && map == TT_MAP_WHOLE ? TT_MAP_COPY : map);
    if (st)
        return st;
    if (e->size != f->size || e->payload_hash != f->h.payload_hash)
        st = tt_err(TT_ECORRUPT, "%s: does not match the manifest (replaced or changed after "
                    "it was written)", f->path);
    else if (resident)
        st = tt_fmap_check_payload(f, NULL, NULL);
    if (st) /* the caller may not own f (load_tombstones' is its own): not left open */
        tt_fmap_close(f);
    return st;
}

/* A segment file's name: "<prefix><kind>.tt". */
static void seg_name(const tt_segment *sg, const char *file, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s", sg->prefix, file);
}

static int open_seg_file(tt_index *idx, tt_segment *sg, tt_fmap *f, const char *file,
                         const char *kind, int map, int resident) {
    char name[TT_MANIFEST_NAME_LEN + 16];
    seg_name(sg, file, name, sizeof name);
    return open_file(idx, f, name, kind, map, resident);
}

/* The shared file of one kind: a format-2 manifest may name it with a generation prefix
 * (a retrained codebook), a format-1 index by its fixed name. */
static const char *shared_name(const tt_index *idx, const char *kind, const char *fixed) {
    for (uint32_t i = 0; i < idx->man.n; i++)
        if (!memcmp(idx->man.e[i].kind, kind, 4))
            return idx->man.e[i].name;
    return fixed;
}

/* ------------------------------------------------------------- loading */

static int load_meta(tt_index *idx, uint64_t *meta_docs, uint64_t *meta_vectors) {
    const tt_fmap *m = &idx->f_meta;
    tt_index_info *in = &idx->info;
    uint64_t v;
    int st;
#define U64(key, lo, hi, dst)                                                                   \
    do {                                                                                        \
        if ((st = tt_meta_u64(m, key, lo, hi, &v)))                                               \
            return st;                                                                          \
        dst = v;                                                                                \
    } while (0)
    U64("dim", 1, 1 << 20, idx->dim);
    U64("nbits", 1, 4, idx->nbits);
    U64("num_docs", 1, UINT64_MAX >> 8, *meta_docs);
    U64("num_vectors", 1, UINT64_MAX >> 8, *meta_vectors);
    U64("num_centroids", 1, 1 << 24, idx->num_centroids);
    U64("normalized", 0, 1, idx->normalized);
    U64("codec_tables", 0, 2, in->codec_tables);
    U64("keep_originals", 0, 1, in->keep_originals);
    U64("has_ids", 0, 1, in->has_ids);
    U64("seed", 0, UINT64_MAX, in->seed);
    U64("train_vectors", 0, UINT64_MAX, in->train_vectors);
    U64("heldout_vectors", 0, UINT64_MAX, in->heldout_vectors);
    U64("kmeans_iters", 0, 100000, in->kmeans_iters);
    U64("threads", 0, 100000, in->threads);
    U64("assign", 0, 1, in->assign);
    if (!tt_codec_nbits_ok((int)in->codec_tables, idx->nbits))
        return tt_err(TT_ECORRUPT, "%s: nbits 3 with a codec that is not adaptive", m->path);
    if (*meta_vectors < *meta_docs)
        return tt_err(TT_ECORRUPT, "%s: fewer vectors than documents", m->path);
    in->sample_factor = meta_double(m, "sample_factor");
    in->build_seconds = meta_double(m, "build_seconds");
    in->heldout_mse = meta_double(m, "heldout_mse");
    /* Before tartan 0.2 tables were quantiles only (no key). */
    if (tt_meta_get(m, "lloyd_max_rounds", (char[8]){0}, 8))
        U64("lloyd_max_rounds", 0, 1000, in->lloyd_max_rounds);
    /* Token pooling: absent before tartan pooled (factor 1). */
    in->pool_factor = 1;
    if (tt_meta_get(m, "pool_factor", (char[2]){0}, 2))
        U64("pool_factor", 1, INT32_MAX, in->pool_factor);
    /* Pooling by one cut: absent otherwise. */
    in->pool_global = meta_double(m, "pool_global");
    in->pool_threshold = meta_double(m, "pool_threshold");
    if (!(in->pool_global >= 0 && in->pool_global <= 1e6) ||
        !(in->pool_threshold >= 0 && in->pool_threshold < INFINITY))
        return tt_err(TT_ECORRUPT, "%s: pool_global %g or pool_threshold %g out of range",
                      m->path, in->pool_global, in->pool_threshold);
    /* Debiased weights: absent before tartan 0.2 (0). Per-vector scales: adaptive only. */
    in->debias = TT_DEBIAS_NONE;
    if (tt_meta_get(m, "debias", (char[2]){0}, 2))
        U64("debias", 0, 2, in->debias);
    if (in->debias == TT_DEBIAS_VECTOR && in->codec_tables != TT_CODEC_ADAPTIVE)
        return tt_err(TT_ECORRUPT, "%s: per-vector residual scales (debias 2) with a codec "
                      "that is not adaptive", m->path);
#undef U64
    tt_meta_get(m, "encoder", in->encoder, sizeof in->encoder);
    tt_meta_get(m, "created", in->created, sizeof in->created);
    tt_meta_get(m, "tartan_version", in->tartan_version, sizeof in->tartan_version);
    return TT_OK;
}

/* codec.tt: shared and per-dim codecs: T = 1 or dim tables of cutoffs, then weights;
 * adaptive (T = 0): widths, permutation, then the tables (doc/format.md). The values
 * are checked by tt_codec_init*. */
static int load_codec(tt_index *idx) {
    const tt_fmap *f = &idx->f_codec;
    tt_index_info *in = &idx->info;
    const uint64_t nt = f->h.c, nb = 1ull << idx->nbits, dim = idx->dim;
    const int kind = in->codec_tables;
    int st;
    if (f->h.a != idx->nbits || f->h.b != dim ||
        nt != (kind == TT_CODEC_ADAPTIVE ? 0 : kind == TT_CODEC_SHARED ? 1 : dim))
        return tt_err(TT_ECORRUPT, "%s: header disagrees with the index (nbits, dim, tables)",
                      f->path);
    if (kind != TT_CODEC_ADAPTIVE) {
        if ((st = expect(f, f->h.payload_bytes == nt * (2 * nb - 1) * 4, "wrong size")))
            return st;
        const float *cut = (const float *)f->payload, *w = cut + nt * (nb - 1);
        st = tt_codec_init(&idx->codec, idx->dim, idx->nbits, (uint32_t)nt, cut, w);
    } else {
        const uint64_t head = (dim + 3) / 4 * 4 + 4 * dim;
        if ((st = expect(f, f->h.payload_bytes >= head, "wrong size")))
            return st;
        const uint8_t *bits = f->payload;
        uint64_t nc = 0, nw = 0;
        for (uint64_t k = 0; k < dim; k++) {
            if (bits[k] > 8)
                return tt_err(TT_ECORRUPT, "%s: position %" PRIu64 " has width %u", f->path, k,
                              bits[k]);
            nw += 1u << bits[k];
            nc += (1u << bits[k]) - 1;
        }
        if ((st = expect(f, f->h.payload_bytes == head + 4 * (nc + nw), "wrong size")))
            return st;
        const uint32_t *perm = (const uint32_t *)(f->payload + (dim + 3) / 4 * 4);
        const float *cut = (const float *)(f->payload + head), *w = cut + nc;
        st = tt_codec_init_adaptive(&idx->codec, idx->dim, idx->nbits, bits, perm, cut, w);
    }
    if (st)
        return tt_err_prefix(st, "%s", f->path);
    for (uint32_t k = 0; k < idx->dim; k++)
        in->dims_by_width[idx->codec.bits[k]]++;
    return TT_OK;
}

static int load_doclens(tt_index *idx, tt_segment *sg) {
    const tt_fmap *f = &sg->f_doclens;
    int st = expect_size(f, sg->num_docs, 0, sg->num_docs * 4);
    if (st)
        return st;
    const uint32_t *dl = (const uint32_t *)f->payload;
    uint64_t v = 0;
    for (uint64_t d = 0; d < sg->num_docs; d++) {
        if (dl[d] == 0)
            return tt_err(TT_ECORRUPT, "%s: document %" PRIu64 " has no vectors", f->path, d);
        v += dl[d];
        if (v > sg->num_vectors)
            break;
    }
    if (v != sg->num_vectors)
        return tt_err(TT_ECORRUPT, "%s: document lengths do not add up to %" PRIu64 " vectors",
                      f->path, sg->num_vectors);
    (void)idx;
    return TT_OK;
}

static int load_codes(tt_index *idx, tt_segment *sg) {
    const tt_fmap *f = &sg->f_codes;
    uint64_t bytes;
    if (!tt_mul_ok(sg->num_vectors, idx->code_bytes, &bytes))
        return tt_err(TT_ECORRUPT, "%s: size overflows", f->path);
    int st = expect_size(f, sg->num_vectors, idx->code_bytes, bytes);
    if (st)
        return st;
    /* Every code must name a centroid: search indexes score tables with them. */
    uint32_t K = idx->num_centroids;
    const uint8_t *p = f->payload;
    for (uint64_t v = 0; v < sg->num_vectors; v++) {
        uint32_t c = idx->code_bytes == 2 ? tt_rd16(p + 2 * v) : tt_rd32(p + 4 * v);
        if (c >= K)
            return tt_err(TT_ECORRUPT, "%s: vector %" PRIu64 " names centroid %u of %u", f->path,
                          v, c, K);
    }
    return TT_OK;
}

static int load_ivf(tt_index *idx, tt_segment *sg) {
    const tt_fmap *f = &sg->f_ivf;
    uint64_t K = idx->num_centroids, head = 8 * (K + 1) + 4 * K;
    if (f->h.a != K || f->h.payload_bytes < head || f->h.payload_bytes - head != f->h.c)
        return tt_err(TT_ECORRUPT, "%s: header disagrees with its size or the index", f->path);
    sg->ivf_off = (const uint64_t *)f->payload;
    sg->ivf_len = (const uint32_t *)(f->payload + 8 * (K + 1));
    sg->ivf_data = f->payload + head;
    sg->ivf_data_bytes = f->h.c;
    if (sg->ivf_off[0] != 0 || sg->ivf_off[K] != sg->ivf_data_bytes)
        return tt_err(TT_ECORRUPT, "%s: list offsets do not span the data", f->path);
    uint64_t entries = 0;
    for (uint64_t c = 0; c < K; c++) {
        /* Ascending and inside the data before any pointer is formed: the last offset
         * equals the data size, but a middle one may not yet be known to be below it
         * (found by fuzzing, tests/fuzz/regress/index). */
        if (sg->ivf_off[c + 1] < sg->ivf_off[c] || sg->ivf_off[c + 1] > sg->ivf_data_bytes)
            return tt_err(TT_ECORRUPT, "%s: list offsets not ascending within the data at "
                          "centroid %" PRIu64, f->path, c);
        /* Decode the list: it must hold exactly len ascending rows < num_docs. */
        const uint8_t *p = sg->ivf_data + sg->ivf_off[c], *end = sg->ivf_data + sg->ivf_off[c + 1];
        uint64_t doc = 0, delta;
        for (uint32_t i = 0; i < sg->ivf_len[c]; i++) {
            if (!tt_varint_get(&p, end, &delta) || (i && delta == 0) ||
                !tt_add_ok(doc, delta, &doc) || doc >= sg->num_docs)
                return tt_err(TT_ECORRUPT, "%s: list of centroid %" PRIu64 " is damaged",
                              f->path, c);
        }
        if (p != end)
            return tt_err(TT_ECORRUPT, "%s: list of centroid %" PRIu64 " has trailing bytes",
                          f->path, c);
        entries += sg->ivf_len[c];
    }
    return expect(f, entries == f->h.b, "entry count disagrees with the lists");
}

int tt_row_ids(uint64_t D, void **mem_out, const uint64_t **off_out, const char **data_out) {
    uint64_t digits = 0, bytes;
    for (uint64_t lo = 0, hi = 10, w = 1; lo < D; lo = hi, hi *= 10, w++) /* w-digit rows */
        digits += w * (TT_MIN(hi, D) - lo);
    if (D > (UINT64_MAX >> 8) || !tt_add_ok(8 * (D + 1), digits, &bytes))
        return tt_err(TT_ECORRUPT, "document count %llu overflows", (unsigned long long)D);
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
    *mem_out = mem;
    *off_out = off;
    *data_out = data;
    return TT_OK;
}

/* Ids "0", "1", ... for a segment built without ids.tt (indexes made before builds
 * stored ids). */
static int make_row_ids(tt_segment *sg) {
    return tt_row_ids(sg->num_docs, &sg->ids_made, &sg->id_off, &sg->id_data);
}

static int load_ids(tt_segment *sg) {
    const tt_fmap *f = &sg->f_ids;
    uint64_t D = sg->num_docs, head = 8 * (D + 1);
    if (f->h.a != D || f->h.payload_bytes < head || f->h.payload_bytes - head != f->h.b)
        return tt_err(TT_ECORRUPT, "%s: header disagrees with its size or the index", f->path);
    sg->id_off = (const uint64_t *)f->payload;
    sg->id_data = (const char *)f->payload + head;
    if (sg->id_off[0] != 0 || sg->id_off[D] != f->h.b)
        return tt_err(TT_ECORRUPT, "%s: id offsets do not span the data", f->path);
    for (uint64_t d = 0; d < D; d++)
        if (sg->id_off[d + 1] <= sg->id_off[d])
            return tt_err(TT_ECORRUPT, "%s: id of document %" PRIu64 " is empty or misplaced",
                          f->path, d);
    return TT_OK;
}

/* idmap.tt: the local rows sorted by id (bytewise), width 4 or 8 bytes; each row once.
 * The order itself is checked where it is used (a lookup that finds the wrong id
 * reports it), the permutation here. */
static int load_idmap(tt_segment *sg) {
    const tt_fmap *f = &sg->f_idmap;
    uint64_t D = sg->num_docs, w = f->h.b;
    if (f->h.a != D || (w != 4 && w != 8) || f->h.payload_bytes != D * w)
        return tt_err(TT_ECORRUPT, "%s: header disagrees with its size or the index", f->path);
    sg->idmap = f->payload;
    sg->idmap_width = (uint32_t)w;
    uint64_t *seen = tt_calloc((D + 63) / 64 + 1, 8, "id map check");
    if (!seen)
        return TT_ENOMEM;
    int st = TT_OK;
    for (uint64_t i = 0; i < D && !st; i++) {
        uint64_t r = w == 4 ? tt_rd32(sg->idmap + 4 * i) : tt_rd64(sg->idmap + 8 * i);
        if (r >= D || (seen[r >> 6] >> (r & 63) & 1))
            st = tt_err(TT_ECORRUPT, "%s: entry %" PRIu64 " is not a permutation of the rows",
                        f->path, i);
        else
            seen[r >> 6] |= 1ull << (r & 63);
    }
    free(seen);
    return st;
}

static int open_segment(tt_index *idx, tt_segment *sg) {
    int st;
    if ((st = open_seg_file(idx, sg, &sg->f_doclens, TT_F_DOCLENS, "DOCL", TT_MAP_WHOLE,
                            RESIDENT)) ||
        (st = load_doclens(idx, sg)) ||
        (st = open_seg_file(idx, sg, &sg->f_codes, TT_F_CODES, "CODE", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_codes(idx, sg)) ||
        (st = open_seg_file(idx, sg, &sg->f_ivf, TT_F_IVF, "IVF_", TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_ivf(idx, sg)))
        return st;
    /* Builds store ids (row numbers when they were given none); segments made before
     * they did get them made here, so that tt_index_doc_id always has stable strings. */
    char name[TT_MANIFEST_NAME_LEN + 16];
    seg_name(sg, TT_F_IDS, name, sizeof name);
    if (tt_manifest_find(&idx->man, name)
            ? (st = open_file(idx, &sg->f_ids, name, "IDS_", TT_MAP_WHOLE, RESIDENT)) ||
                  (st = load_ids(sg))
            : (st = make_row_ids(sg)))
        return st;
    seg_name(sg, TT_F_IDMAP, name, sizeof name);
    if (tt_manifest_find(&idx->man, name) &&
        ((st = open_file(idx, &sg->f_idmap, name, "IDMP", TT_MAP_WHOLE, RESIDENT)) ||
         (st = load_idmap(sg))))
        return st;
    /* Sparse postings, if the segment has them: validated completely at open. */
    seg_name(sg, TT_F_SPARSE, name, sizeof name);
    if (tt_manifest_find(&idx->man, name)) {
        if ((st = open_file(idx, &sg->f_sparse, name, "SPRS", TT_MAP_WHOLE, RESIDENT)) ||
            (st = expect(&sg->f_sparse, sg->f_sparse.h.a == sg->num_docs,
                         "sparse postings of another number of documents")) ||
            (st = tt_sparse_seg_parse(&sg->sparse, sg->f_sparse.payload,
                                      sg->f_sparse.h.payload_bytes, sg->f_sparse.h.a,
                                      sg->f_sparse.h.b, sg->f_sparse.h.c, sg->f_sparse.path)))
            return st;
        sg->has_sparse = true;
    }
    /* The lengths before token pooling, if its documents were pooled: only the header
     * is read (the total); tt_index_verify checks the lengths. */
    sg->input_vectors = sg->num_vectors;
    seg_name(sg, TT_F_INLENS, name, sizeof name);
    if (tt_manifest_find(&idx->man, name)) {
        tt_fmap f = {.fd = -1};
        if ((st = open_file(idx, &f, name, "INLN", TT_MAP_NONE, STREAMED)) ||
            (st = expect_size(&f, sg->num_docs, f.h.b, sg->num_docs * 4)) ||
            (st = expect(&f, f.h.b >= sg->num_vectors, "fewer vectors before pooling than after"))) {
            tt_fmap_close(&f);
            return st;
        }
        sg->input_vectors = f.h.b;
        sg->inlens_bytes = f.size;
        tt_fmap_close(&f);
    }
    /* The residual sketch: every segment has one when the codec has a sketch, except
     * segments written before sketches existed (then search does without). */
    uint32_t sb = tt_codec_sketch_bytes(&idx->codec);
    seg_name(sg, TT_F_SKETCH, name, sizeof name);
    if (sb && tt_manifest_find(&idx->man, name)) {
        uint64_t sbytes;
        if (!tt_mul_ok(sg->num_vectors, sb, &sbytes))
            return tt_err(TT_ECORRUPT, "%s: sketch size overflows", idx->dir);
        if ((st = open_file(idx, &sg->f_sketch, name, "SKCH", TT_MAP_WHOLE, RESIDENT)) ||
            (st = expect_size(&sg->f_sketch, sg->num_vectors, sb, sbytes)))
            return st;
    }
    if (idx->info.debias == TT_DEBIAS_VECTOR) {
        seg_name(sg, TT_F_VSCALE, name, sizeof name);
        /* mapped and checked here, copied into one array for the index (join_segments) */
        if ((st = open_file(idx, &sg->f_vscale, name, "VSCL", TT_MAP_WHOLE, RESIDENT_MAPPED)) ||
            (st = expect_size(&sg->f_vscale, sg->num_vectors, 2, sg->num_vectors * 2)))
            return st;
    }
    uint64_t rbytes;
    if (!tt_mul_ok(sg->num_vectors, idx->res_bytes, &rbytes))
        return tt_err(TT_ECORRUPT, "%s: residual size overflows", idx->dir);
    if ((st = open_seg_file(idx, sg, &sg->f_residuals, TT_F_RESIDUALS, "RESI", TT_MAP_NONE,
                            STREAMED)) ||
        (st = expect_size(&sg->f_residuals, sg->num_vectors, idx->res_bytes, rbytes)))
        return st;
    if (idx->info.keep_originals) {
        uint64_t obytes;
        if (!tt_mul_ok(sg->num_vectors * idx->dim, 2, &obytes))
            return tt_err(TT_ECORRUPT, "%s: originals size overflows", idx->dir);
        if ((st = open_seg_file(idx, sg, &sg->f_originals, TT_F_ORIGINALS, "ORIG", TT_MAP_WHOLE,
                                STREAMED)) ||
            (st = expect_size(&sg->f_originals, sg->num_vectors, idx->dim, obytes)))
            return st;
        sg->originals = (const uint16_t *)sg->f_originals.payload;
    }
    return TT_OK;
}

/* The segment with id `id`, or NULL. */
static tt_segment *find_segment(tt_index *idx, uint64_t id) {
    for (uint32_t s = 0; s < idx->nseg; s++)
        if (idx->seg[s].id == id)
            return &idx->seg[s];
    return NULL;
}

/* Tombstone files (TOMB): (u64 segment id, u64 local row) pairs, ascending, each row of
 * an existing segment, no row deleted twice across files; per segment the count must
 * equal the manifest's. */
static int load_tombstones(tt_index *idx) {
    int st = TT_OK;
    uint64_t *count = NULL;
    for (uint32_t i = 0; i < idx->man.n && !st; i++) {
        const tt_manifest_entry *e = &idx->man.e[i];
        if (memcmp(e->kind, "TOMB", 4))
            continue;
        if (!idx->deleted &&
            !(idx->deleted = tt_calloc((idx->num_docs + 63) / 64 + 1, 8, "deleted rows")))
            return TT_ENOMEM;
        if (!count && !(count = tt_calloc(idx->nseg, sizeof *count, "deleted rows")))
            return TT_ENOMEM;
        tt_fmap f;
        if ((st = open_file(idx, &f, e->name, "TOMB", TT_MAP_WHOLE, RESIDENT)))
            break;
        uint64_t n = f.h.a;
        if (f.h.payload_bytes != 16 * n) {
            st = tt_err(TT_ECORRUPT, "%s: header disagrees with its size", f.path);
        } else {
            for (uint64_t k = 0; k < n && !st; k++) {
                uint64_t sid = tt_rd64(f.payload + 16 * k), row = tt_rd64(f.payload + 16 * k + 8);
                tt_segment *sg = find_segment(idx, sid);
                if (!sg || row >= sg->num_docs) {
                    st = tt_err(TT_ECORRUPT, "%s: entry %" PRIu64 " names no document of the "
                                "index", f.path, k);
                    break;
                }
                uint64_t d = sg->doc0 + row;
                if (idx->deleted[d >> 6] >> (d & 63) & 1) {
                    st = tt_err(TT_ECORRUPT, "%s: document %" PRIu64 " of segment %" PRIu64
                                " deleted twice", f.path, row, sid);
                    break;
                }
                idx->deleted[d >> 6] |= 1ull << (d & 63);
                count[sg - idx->seg]++;
            }
        }
        tt_fmap_close(&f);
    }
    for (uint32_t s = 0; s < idx->nseg && !st; s++)
        if ((count ? count[s] : 0) != idx->seg[s].num_deleted)
            st = tt_err(TT_ECORRUPT, "%s: %" PRIu64 " deletions of segment %" PRIu64 " listed, "
                        "the manifest says %" PRIu64, idx->dir, count ? count[s] : 0,
                        idx->seg[s].id, idx->seg[s].num_deleted);
    free(count);
    return st;
}

/* Sparse postings: in every segment or in none, of one kind; the live documents' count
 * and mean length (BM25's N and avgdl over the snapshot). */
static int join_sparse(tt_index *idx) {
    uint32_t with = 0;
    for (uint32_t s = 0; s < idx->nseg; s++)
        with += idx->seg[s].has_sparse;
    if (with == 0)
        return TT_OK;
    if (with != idx->nseg)
        return tt_err(TT_ECORRUPT, "%s: some segments have sparse postings and some do not",
                      idx->dir);
    idx->sparse_kind = idx->seg[0].sparse.kind;
    uint64_t total = 0;
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        if (sg->sparse.kind != idx->sparse_kind)
            return tt_err(TT_ECORRUPT, "%s: sparse postings of different kinds", sg->f_sparse.path);
        idx->sparse_bytes += sg->f_sparse.size;
        for (uint64_t d = 0; d < sg->num_docs; d++)
            if (!tt_index_deleted(idx, sg->doc0 + d)) {
                idx->sparse_live++;
                total += tt_sparse_seg_len(&sg->sparse, d);
            }
    }
    idx->sparse_total_len = total;
    idx->sparse_avgdl = tt_bm25_avgdl(idx->sparse_live, total);
    return TT_OK;
}

/* The stored vocabulary (vocab.tt), when the generation has one: only beside term-id
 * postings, and every segment's ids below its size. */
static int open_vocab(tt_index *idx) {
    const tt_manifest_entry *e = NULL;
    for (uint32_t i = 0; i < idx->man.n && !e; i++)
        if (!memcmp(idx->man.e[i].kind, TT_VOCAB_KIND, 4))
            e = &idx->man.e[i];
    if (!e)
        return TT_OK;
    int st = open_file(idx, &idx->f_vocab, e->name, TT_VOCAB_KIND, TT_MAP_WHOLE, RESIDENT);
    if (st)
        return st;
    if (idx->sparse_kind != TT_SPARSE_KIND_IDS)
        return tt_err(TT_ECORRUPT, "%s: a vocabulary in an index without term-id postings",
                      idx->f_vocab.path);
    idx->sparse_bytes += idx->f_vocab.size; /* counted with the postings it goes with */
    if ((st = tt_sparse_vocab_read(&idx->vocab, idx->f_vocab.payload,
                                   idx->f_vocab.h.payload_bytes, idx->f_vocab.h.a,
                                   idx->f_vocab.h.b, idx->f_vocab.h.c, idx->f_vocab.path)))
        return st;
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_sparse_seg *sp = &idx->seg[s].sparse;
        if (sp->T && tt_sparse_key_id(sp->blob + tt_rd64(sp->term_off + 8 * (sp->T - 1))) >=
                         idx->vocab.n)
            return tt_err(TT_ECORRUPT, "%s: term ids past the vocabulary %s (%u terms)",
                          idx->seg[s].f_sparse.path, idx->f_vocab.path, idx->vocab.n);
    }
    return TT_OK;
}

/* The row space over all segments: lengths, vector offsets, codes (the one segment's
 * files as read at open, else joined copies), the longest live document and the live
 * count. */
static int join_segments(tt_index *idx) {
    uint64_t D = idx->num_docs, N = idx->num_vectors;
    if (idx->nseg == 1) {
        idx->doclens = (const uint32_t *)idx->seg[0].f_doclens.payload;
        idx->codes = idx->seg[0].f_codes.payload;
    } else {
        idx->doclens_owned = tt_alloc(D ? D : 1, sizeof *idx->doclens_owned, "document lengths");
        idx->codes_owned = tt_alloc(N ? N : 1, idx->code_bytes, "codes");
        if (!idx->doclens_owned || !idx->codes_owned)
            return TT_ENOMEM;
        for (uint32_t s = 0; s < idx->nseg; s++) {
            const tt_segment *sg = &idx->seg[s];
            memcpy(idx->doclens_owned + sg->doc0, sg->f_doclens.payload, sg->num_docs * 4);
            memcpy(idx->codes_owned + sg->vec0 * idx->code_bytes, sg->f_codes.payload,
                   sg->num_vectors * idx->code_bytes);
        }
        idx->doclens = idx->doclens_owned;
        idx->codes = idx->codes_owned;
    }
    /* The sketch, if every segment has one. */
    uint32_t sb = tt_codec_sketch_bytes(&idx->codec);
    for (uint32_t s = 0; s < idx->nseg; s++)
        if (!idx->seg[s].f_sketch.payload && idx->seg[s].num_vectors)
            sb = 0;
    idx->sketch_bytes = sb;
    if (sb && idx->nseg == 1) {
        idx->sketch = idx->seg[0].f_sketch.payload;
    } else if (sb) {
        if (!(idx->sketch_owned = tt_alloc(N ? N : 1, sb, "residual sketch")))
            return TT_ENOMEM;
        for (uint32_t s = 0; s < idx->nseg; s++) {
            const tt_segment *sg = &idx->seg[s];
            if (sg->num_vectors)
                memcpy(idx->sketch_owned + sg->vec0 * sb, sg->f_sketch.payload,
                       sg->num_vectors * sb);
        }
        idx->sketch = idx->sketch_owned;
    }
    if (idx->info.debias == TT_DEBIAS_VECTOR) {
        idx->vscale_k0 = tt_codec_n8(&idx->codec);
        if (!(idx->vscale_owned = tt_alloc(N ? N : 1, 2, "residual scales")))
            return TT_ENOMEM;
        for (uint32_t s = 0; s < idx->nseg; s++) {
            const tt_segment *sg = &idx->seg[s];
            const uint8_t *p = sg->f_vscale.payload;
            for (uint64_t v = 0; v < sg->num_vectors; v++) {
                const uint16_t h = tt_rd16(p + 2 * v);
                const float x = tt_f16_to_f32(h);
                if (!(x >= 0 && x < INFINITY))
                    return tt_err(TT_ECORRUPT, "%s: vector %llu has residual scale %g",
                                  sg->f_vscale.path, (unsigned long long)v, (double)x);
                idx->vscale_owned[sg->vec0 + v] = h;
            }
        }
        idx->vscale = idx->vscale_owned;
    }
    idx->doc_vec0 = tt_alloc(D + 1, sizeof *idx->doc_vec0, "document offsets");
    if (!idx->doc_vec0)
        return TT_ENOMEM;
    uint64_t v = 0;
    idx->num_live = 0;
    idx->max_doclen = 0;
    for (uint64_t d = 0; d < D; d++) {
        idx->doc_vec0[d] = v;
        v += idx->doclens[d];
        if (!tt_index_deleted(idx, d)) {
            idx->num_live++;
            if (idx->doclens[d] > idx->max_doclen)
                idx->max_doclen = idx->doclens[d];
        }
    }
    idx->doc_vec0[D] = v;
    return join_sparse(idx);
}

/* ------------------------------------------------------------------- I/O */

static int setup_io(tt_index *idx, const tt_open_options *o) {
    int want = o->io;
    idx->queue_depth = o->queue_depth > 0 ? TT_MIN(o->queue_depth, 4096) : 64;
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
        idx->direct = 1;
        for (uint32_t s = 0; s < idx->nseg; s++) {
            tt_segment *sg = &idx->seg[s];
            sg->res_fd_direct = open(sg->f_residuals.path, O_RDONLY | O_DIRECT | O_CLOEXEC);
            if (sg->res_fd_direct < 0) {
                snprintf(idx->io_note, sizeof idx->io_note,
                         "O_DIRECT refused by the file system (%s); using buffered reads",
                         strerror(errno));
                idx->direct = 0;
            }
        }
        for (uint32_t s = 0; !idx->direct && s < idx->nseg; s++) {
            if (idx->seg[s].res_fd_direct >= 0)
                close(idx->seg[s].res_fd_direct);
            idx->seg[s].res_fd_direct = -1;
        }
    }
    for (uint32_t s = 0; s < idx->nseg; s++) {
        tt_fmap *f = &idx->seg[s].f_residuals;
        /* Search reads residuals at random, about a kilobyte per document: kernel
         * readahead (up to 128 KiB around each read or fault) would multiply the bytes
         * read from the device and evict useful pages. Exhaustive scans ask for their
         * large ranges explicitly (src/io/fetch.c). Advice only: failure changes nothing
         * but speed. */
        (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_RANDOM);
        if (idx->io == TT_IO_MMAP) {
            void *p = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, f->fd, 0);
            if (p == MAP_FAILED)
                return tt_err_errno(TT_EIO, errno, "%s: mmap failed", f->path);
            (void)madvise(p, (size_t)f->size, MADV_RANDOM);
            f->base = p;
            f->payload = f->base + TT_HEADER_SIZE;
            idx->seg[s].res_map = f->payload;
        }
    }
    idx->info.io = idx->io;
    return TT_OK;
}

static void fill_info(tt_index *idx) {
    tt_index_info *in = &idx->info;
    in->format_version = idx->man.version;
    in->dim = idx->dim;
    in->nbits = idx->nbits;
    in->num_centroids = idx->num_centroids;
    in->num_docs = idx->num_docs;
    in->num_vectors = idx->num_vectors;
    in->normalized = idx->normalized;
    in->generation = idx->man.generation;
    in->num_segments = idx->nseg;
    in->num_deleted = idx->num_docs - idx->num_live;
    in->bytes_meta = idx->f_meta.size;
    in->bytes_centroids = idx->f_centroids.size;
    in->bytes_codec = idx->f_codec.size;
    double mse_sum = 0;
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        in->bytes_doclens += sg->f_doclens.size;
        in->bytes_codes += sg->f_codes.size;
        in->bytes_sketch += sg->f_sketch.size;
        in->bytes_vscale += sg->f_vscale.size;
        in->bytes_residuals += sg->f_residuals.size;
        in->bytes_ivf += sg->f_ivf.size;
        in->bytes_ids += sg->f_ids.size;
        in->bytes_idmap += sg->f_idmap.size;
        in->bytes_originals += sg->f_originals.size;
        in->added_vectors += sg->added_vectors;
        mse_sum += sg->added_mse * (double)sg->added_vectors;
        in->bytes_doclens += sg->inlens_bytes;
        in->input_vectors += sg->input_vectors;
    }
    for (uint32_t i = 0; i < idx->man.n; i++)
        if (!memcmp(idx->man.e[i].kind, "TOMB", 4))
            in->bytes_tombs += idx->man.e[i].size;
    in->added_mse = in->added_vectors ? mse_sum / (double)in->added_vectors : 0;
    in->sketch_bytes = idx->sketch_bytes;
    in->drift = in->added_vectors && in->heldout_mse > 0 ? in->added_mse / in->heldout_mse : 0;
    in->retrain_advised = in->drift >= TT_DRIFT_RETRAIN;
    in->bytes_manifest = TT_HEADER_SIZE + (idx->man.version == 2 ? 32 : 8) +
                         64ull * (idx->man.n + idx->man.nseg);
    /* The dense part: what compresses the vectors, and what the ratios are of. */
    uint64_t dense = in->bytes_meta + in->bytes_centroids + in->bytes_codec + in->bytes_doclens +
                     in->bytes_codes + in->bytes_sketch + in->bytes_vscale +
                     in->bytes_residuals + in->bytes_ivf +
                     in->bytes_ids + in->bytes_idmap + in->bytes_tombs + in->bytes_manifest;
    /* The generation's other files: sparse postings, metadata, calibration. */
    in->bytes_sparse = idx->sparse_bytes;
    in->bytes_metadata = idx->f_metadata.size;
    in->bytes_tune = idx->f_tune.size;
    in->bytes_index = dense + in->bytes_sparse + in->bytes_metadata + in->bytes_tune;
    double values = (double)idx->num_vectors * idx->dim;
    in->bytes_f16 = idx->num_vectors * idx->dim * 2;
    in->bytes_f32 = idx->num_vectors * idx->dim * 4;
    in->bits_per_dim = 8.0 * (double)dense / values;
    in->ratio_f16 = (double)in->bytes_f16 / (double)dense;
    in->ratio_f32 = (double)in->bytes_f32 / (double)dense;
    /* Search keeps everything in memory except the residuals and originals, plus the
     * document offsets, the int8 centroids made at open (and their rows), and with
     * several segments the copies of their lengths and codes and the deleted-row bitmap. */
    in->resident_bytes = in->bytes_index - in->bytes_residuals + 8 * (idx->num_docs + 1) +
                         tt_cq_bytes(&idx->cq) + tt_crows_bytes(&idx->crows);
    if (idx->centroids16) /* float16 in place of the float32 copy */
        in->resident_bytes -= (uint64_t)idx->num_centroids * idx->dim * 2;
    if (idx->nseg > 1)
        in->resident_bytes += 4 * idx->num_docs +
                              (uint64_t)(idx->code_bytes + idx->sketch_bytes) * idx->num_vectors;
    if (idx->deleted)
        in->resident_bytes += (idx->num_docs + 63) / 64 * 8;
}

/* The shared files: meta.tt, the centroids (and their int8 copy), the codec. */
static int open_codebook(tt_index *idx, uint64_t *meta_docs, uint64_t *meta_vectors) {
    int st;
    if ((st = open_file(idx, &idx->f_meta, shared_name(idx, "META", TT_F_META), "META",
                        TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_meta(idx, meta_docs, meta_vectors)))
        return st;
    uint64_t K = idx->num_centroids, dim = idx->dim, cbytes;
    if (!tt_mul_ok(K * dim, 4, &cbytes))
        return tt_err(TT_ECORRUPT, "%s: centroid table size overflows", idx->f_meta.path);
    /* Mapped and checked first: what search keeps of them is decided below. */
    if ((st = open_file(idx, &idx->f_centroids, shared_name(idx, "CENT", TT_F_CENTROIDS), "CENT",
                        TT_MAP_WHOLE, RESIDENT_MAPPED)) ||
        (st = expect_size(&idx->f_centroids, K, dim, cbytes)))
        return st;
    idx->centroids = (const float *)idx->f_centroids.payload;
    int64_t bad = tt_find_nonfinite(idx->centroids, K, idx->dim);
    if (bad >= 0)
        return tt_err(TT_ECORRUPT, "%s: centroid %lld has a NaN or infinite value",
                      idx->f_centroids.path, (long long)bad);
    /* Centroids that float16 holds exactly (tartan's builds round them so): search
     * reads a float16 copy, the same floats in half the bytes and half the RAM, and the
     * float32 file stays mapped for what else reads it (add, compaction, calibration).
     * Otherwise (older indexes, raw vectors beyond float16's range, or no memory for
     * the copy) the float32 values are copied into memory the index owns. Mapped
     * first, so that opening never holds both copies in its own memory. */
    const uint64_t nc = K * dim;
    if ((idx->centroids16 = malloc(nc * sizeof *idx->centroids16)) &&
        !tt_f16_from_f32_exact_n(idx->centroids16, idx->centroids, nc)) {
        free(idx->centroids16);
        idx->centroids16 = NULL;
    }
    if (!idx->centroids16) {
        if ((st = tt_fmap_own(&idx->f_centroids)))
            return st;
        idx->centroids = (const float *)idx->f_centroids.payload;
    }
    if ((st = open_file(idx, &idx->f_codec, shared_name(idx, "CODC", TT_F_CODEC), "CODC",
                        TT_MAP_WHOLE, RESIDENT)) ||
        (st = load_codec(idx)))
        return st;
    idx->res_bytes = idx->codec.bytes_per_vec;
    idx->code_bytes = idx->num_centroids <= 65536 ? 2 : 4;
    /* The calibrated search parameters, when the generation has them. */
    for (uint32_t i = 0; i < idx->man.n; i++)
        if (!memcmp(idx->man.e[i].kind, "TUNE", 4)) {
            if ((st = open_file(idx, &idx->f_tune, idx->man.e[i].name, "TUNE", TT_MAP_WHOLE,
                                RESIDENT)) ||
                (st = tt_tune_parse(&idx->f_tune, idx->num_centroids, &idx->tuned,
                                    &idx->cgroup_of)))
                return st;
            break;
        }
    /* The int8 table, in the calibration's centroid groups when it has them. */
    idx->cgroup_n = idx->cgroup_of ? idx->tuned.centroid_groups : 0;
    st = tt_cq_init_grouped(&idx->cq, idx->centroids, idx->num_centroids, idx->dim,
                            tt_cq_best_kernel(), idx->cgroup_of, idx->tuned.centroid_groups);
    if (st == TT_EINVAL)
        return tt_err(TT_ECORRUPT, "%s: centroid_group_of leaves a group without centroids",
                      idx->f_tune.path);
    if (st)
        return tt_err(st, "%s: out of memory for the int8 centroids", idx->dir);
    if (idx->dim >= TT_CROWS_MIN_DIM && tt_cq_simd_ok() &&
        tt_crows_init(&idx->crows, idx->centroids, idx->num_centroids, idx->dim))
        return tt_err(TT_ENOMEM, "%s: out of memory for the int8 centroid rows", idx->dir);
    return TT_OK;
}

/* Reads and opens dir's current generation. *stale: a file listed in the manifest was
 * missing or not what it listed, and MANIFEST has changed since it was read (a writer
 * published meanwhile and removed files of the generation this open started with, or a
 * build replaced the directory): try again. */
static int open_once(tt_index *idx, const char *dir, const tt_open_options *opt, bool *stale) {
    int st;
    *stale = false;
    if ((st = tt_manifest_read(dir, &idx->man))) {
        if (st == TT_ENOTFOUND)
            st = tt_index_not_found(dir);
        return st;
    }
    uint64_t meta_docs, meta_vectors;
    if ((st = open_codebook(idx, &meta_docs, &meta_vectors)))
        goto check_stale;
    /* Segments: a format-1 index is one, described by meta.tt. */
    idx->nseg = idx->man.version == 1 ? 1 : idx->man.nseg;
    if (idx->nseg == 0) {
        st = tt_err(TT_ECORRUPT, "%s: the manifest lists no segment", dir);
        goto check_stale;
    }
    if (!(idx->seg = tt_calloc(idx->nseg, sizeof *idx->seg, "segments"))) {
        st = TT_ENOMEM;
        goto check_stale;
    }
    /* No descriptor in any segment before one can fail: tt_index_close closes those
     * >= 0, and calloc's 0 is standard input -- or whatever file another thread of the
     * process holds as descriptor 0 by then. */
    for (uint32_t s = 0; s < idx->nseg; s++) {
        tt_segment *sg = &idx->seg[s];
        tt_fmap *fs[] = {&sg->f_doclens, &sg->f_codes, &sg->f_residuals, &sg->f_ivf,
                         &sg->f_ids, &sg->f_idmap, &sg->f_originals, &sg->f_sparse,
                         &sg->f_sketch, &sg->f_vscale};
        for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
            fs[i]->fd = -1;
        sg->res_fd_direct = -1;
    }
    for (uint32_t s = 0; s < idx->nseg; s++) {
        tt_segment *sg = &idx->seg[s];
        if (idx->man.version == 1) {
            sg->num_docs = meta_docs;
            sg->num_vectors = meta_vectors;
        } else {
            const tt_manifest_segment *ms = &idx->man.seg[s];
            sg->id = ms->id;
            memcpy(sg->prefix, ms->prefix, sizeof sg->prefix);
            sg->num_docs = ms->num_docs;
            sg->num_vectors = ms->num_vectors;
            sg->num_deleted = ms->num_deleted;
            sg->added_vectors = ms->added_vectors;
            sg->added_mse = ms->added_mse;
            if (sg->num_docs == 0 || find_segment(idx, sg->id) != sg) {
                st = tt_err(TT_ECORRUPT, "%s: segment %u is empty or listed twice", dir, s);
                goto check_stale;
            }
        }
        sg->doc0 = idx->num_docs;
        sg->vec0 = idx->num_vectors;
        if (!tt_add_ok(idx->num_docs, sg->num_docs, &idx->num_docs) ||
            !tt_add_ok(idx->num_vectors, sg->num_vectors, &idx->num_vectors) ||
            idx->num_vectors > (UINT64_MAX >> 8)) {
            st = tt_err(TT_ECORRUPT, "%s: segment sizes overflow", dir);
            goto check_stale;
        }
        if ((st = open_segment(idx, sg)))
            goto check_stale;
    }
    idx->has_originals = idx->info.keep_originals;
    /* The metadata database, if the generation has one: read into memory and checksummed
     * (it is small beside the index, and SQLite reads it in place). */
    for (uint32_t i = 0; i < idx->man.n; i++)
        if (!memcmp(idx->man.e[i].kind, TT_METADATA_KIND, 4)) {
            if ((st = open_file(idx, &idx->f_metadata, idx->man.e[i].name, TT_METADATA_KIND,
                                TT_MAP_WHOLE, RESIDENT)))
                goto check_stale;
            break;
        }
    if ((st = load_tombstones(idx)) || (st = join_segments(idx)) || (st = open_vocab(idx)) ||
        (st = setup_io(idx, opt)))
        goto check_stale;
    return TT_OK;
check_stale:
    /* A file gone, or one that is not what the manifest said (a directory replaced by a
     * build meanwhile): if MANIFEST is another one now, the snapshot moved on. */
    if (st == TT_ENOTFOUND || st == TT_EIO || st == TT_ECORRUPT || st == TT_EFORMAT) {
        tt_manifest now;
        if (tt_manifest_read(dir, &now) == TT_OK) {
            *stale = now.hash != idx->man.hash;
            tt_manifest_free(&now);
        }
    }
    return st;
}

int tt_index_not_found(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return tt_err_errno(TT_ENOTFOUND, errno, "%s", dir);
    if (!S_ISDIR(sb.st_mode))
        return tt_err(TT_ENOTFOUND, "%s: Not a directory (an index is a directory)", dir);
    if (tt_is_sharded_dir(dir))
        return tt_err(TT_ENOTFOUND, "%s: a sharded index (SHARDS, doc/scale.md): search, info "
                      "and verify take it whole, each %s/shard-NNNN is an index of its own; "
                      "add, delete and compact do not apply to it as a whole", dir, dir);
    return tt_err(TT_ENOTFOUND, "%s: not a tartan index (no MANIFEST)", dir);
}

int tt_index_open(tt_index **out, const char *dir, const tt_open_options *opt) {
    tt_open_options defaults;
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
    /* A snapshot: whatever generation MANIFEST names when it is read. A writer that
     * publishes the next one meanwhile may remove files of this one before they are
     * opened; then the open starts again from the new manifest. */
    for (int attempt = 0;; attempt++) {
        tt_index *idx = calloc(1, sizeof *idx);
        if (!idx)
            return tt_err(TT_ENOMEM, "%s: out of memory", dir);
        tt_fmap *shared[] = {&idx->f_meta, &idx->f_centroids, &idx->f_codec, &idx->f_tune,
                             &idx->f_metadata, &idx->f_vocab};
        for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
            shared[i]->fd = -1;
        if (!(idx->dir = strdup(dir))) {
            free(idx);
            return tt_err(TT_ENOMEM, "%s: out of memory", dir);
        }
        bool stale;
        int st = open_once(idx, dir, opt, &stale);
        if (st == TT_OK) {
            fill_info(idx);
            *out = idx;
            return TT_OK;
        }
        tt_index_close(idx);
        if (!stale || attempt >= 16)
            return st;
        tt_err_clear();
    }
}

int tt_index_open_codebook(tt_index **out, const char *dir, const tt_manifest *man) {
    *out = NULL;
    tt_index *idx = calloc(1, sizeof *idx);
    if (!idx || !(idx->dir = strdup(dir))) {
        free(idx);
        return tt_err(TT_ENOMEM, "%s: out of memory", dir);
    }
    idx->f_meta.fd = idx->f_centroids.fd = idx->f_codec.fd = idx->f_tune.fd = -1;
    idx->f_metadata.fd = idx->f_vocab.fd = -1;
    uint64_t meta_docs, meta_vectors;
    int st = tt_manifest_copy(&idx->man, man);
    if (!st)
        st = open_codebook(idx, &meta_docs, &meta_vectors);
    if (st) {
        tt_index_close(idx);
        return st;
    }
    idx->num_docs = meta_docs;
    idx->num_vectors = meta_vectors;
    fill_info(idx);
    *out = idx;
    return TT_OK;
}

void tt_index_close(tt_index *idx) {
    if (!idx)
        return;
    tt_fmap *shared[] = {&idx->f_meta, &idx->f_centroids, &idx->f_codec, &idx->f_tune,
                         &idx->f_metadata, &idx->f_vocab};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        if (shared[i]->path || shared[i]->fd >= 0)
            tt_fmap_close(shared[i]);
    for (uint32_t s = 0; idx->seg && s < idx->nseg; s++) {
        tt_segment *sg = &idx->seg[s];
        tt_fmap *fs[] = {&sg->f_doclens, &sg->f_codes, &sg->f_residuals, &sg->f_ivf,
                         &sg->f_ids, &sg->f_idmap, &sg->f_originals, &sg->f_sparse,
                         &sg->f_sketch, &sg->f_vscale};
        for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
            if (fs[i]->path || fs[i]->fd >= 0)
                tt_fmap_close(fs[i]);
        if (sg->res_fd_direct >= 0)
            close(sg->res_fd_direct);
        free(sg->ids_made);
    }
    free(idx->seg);
    tt_st_free(&idx->vocab);
    tt_codec_free(&idx->codec);
    tt_cq_free(&idx->cq);
    tt_crows_free(&idx->crows);
    free(idx->cgroup_of);
    free(idx->centroids16);
    tt_manifest_free(&idx->man);
    free(idx->doc_vec0);
    free(idx->doclens_owned);
    free(idx->codes_owned);
    free(idx->sketch_owned);
    free(idx->vscale_owned);
    free(idx->deleted);
    free(idx->dir);
    free(idx);
}

int tt_index_use_cq_kernel(tt_index *idx, int kernel) {
    tt_cq cq;
    int st = tt_cq_init_grouped(&cq, idx->centroids, idx->num_centroids, idx->dim, kernel,
                                idx->cgroup_of, idx->cgroup_n);
    if (st)
        return tt_err(st, "centroid scores: kernel %d %s", kernel,
                      st == TT_EINVAL ? "is not available on this CPU" : "is out of memory");
    idx->info.resident_bytes += tt_cq_bytes(&cq) - tt_cq_bytes(&idx->cq);
    tt_cq_free(&idx->cq);
    idx->cq = cq;
    return TT_OK;
}

int tt_index_make_crows(tt_index *idx) {
    if (idx->crows.data)
        return TT_OK;
    if (tt_crows_init(&idx->crows, idx->centroids, idx->num_centroids, idx->dim))
        return tt_err(TT_ENOMEM, "%s: out of memory for the int8 centroid rows", idx->dir);
    idx->info.resident_bytes += tt_crows_bytes(&idx->crows);
    return TT_OK;
}

int tt_index_set_centroid_groups(tt_index *idx, const uint32_t *group_of, uint32_t G) {
    const uint32_t K = idx->num_centroids;
    uint32_t *copy = NULL;
    if (G && !(copy = tt_alloc(K, sizeof *copy, "centroid groups")))
        return TT_ENOMEM;
    if (G)
        memcpy(copy, group_of, (size_t)K * sizeof *copy);
    tt_cq cq;
    int st = tt_cq_init_grouped(&cq, idx->centroids, K, idx->dim, idx->cq.kernel, copy, G);
    if (st) {
        free(copy);
        return tt_err(st, "centroid groups: %s", st == TT_EINVAL ? "a group is empty or out "
                      "of range" : "out of memory");
    }
    idx->info.resident_bytes += tt_cq_bytes(&cq) - tt_cq_bytes(&idx->cq);
    tt_cq_free(&idx->cq);
    idx->cq = cq;
    free(idx->cgroup_of);
    idx->cgroup_of = copy;
    idx->cgroup_n = G;
    return TT_OK;
}

int tt_index_tuned(const tt_index *idx, tt_tune_info *out) {
    if (!idx || !out)
        return tt_err(TT_EINVAL, "tt_index_tuned: NULL argument");
    *out = idx->tuned;
    return TT_OK;
}

int tt_index_get_info(const tt_index *idx, tt_index_info *out) {
    if (!idx || !out)
        return tt_err(TT_EINVAL, "tt_index_get_info: NULL argument");
    *out = idx->info;
    return TT_OK;
}

static uint64_t segment_bytes(const tt_segment *sg) {
    return sg->f_doclens.size + sg->f_codes.size + sg->f_residuals.size + sg->f_ivf.size +
           sg->f_ids.size + sg->f_idmap.size + sg->inlens_bytes + sg->f_sketch.size +
           sg->f_vscale.size;
}

int tt_index_segment_info(const tt_index *idx, uint32_t i, tt_segment_info *out) {
    if (!idx || !out || i >= idx->nseg)
        return tt_err(TT_EINVAL, "tt_index_segment_info: no segment %u", i);
    const tt_segment *sg = &idx->seg[i];
    memset(out, 0, sizeof *out);
    out->id = sg->id;
    out->first_doc = sg->doc0;
    out->num_docs = sg->num_docs;
    out->num_vectors = sg->num_vectors;
    out->num_deleted = sg->num_deleted;
    out->bytes = segment_bytes(sg);
    out->added_vectors = sg->added_vectors;
    out->added_mse = sg->added_mse;
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
    const tt_segment *sg = &idx->seg[tt_index_segment_of(idx, doc)];
    uint64_t r = doc - sg->doc0;
    if (len)
        *len = (size_t)(sg->id_off[r + 1] - sg->id_off[r]);
    return sg->id_data + sg->id_off[r];
}

const char *tt_index_file_at(const tt_index *idx, const void *addr) {
    if (!idx)
        return NULL;
    const uint8_t *a = (const uint8_t *)addr;
    const tt_fmap *shared[] = {&idx->f_meta, &idx->f_centroids, &idx->f_codec,
                               &idx->f_metadata};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++)
        if (shared[i]->base && a >= shared[i]->base &&
            (uint64_t)(a - shared[i]->base) < shared[i]->size)
            return shared[i]->path;
    for (uint32_t s = 0; idx->seg && s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        const tt_fmap *fs[] = {&sg->f_doclens, &sg->f_codes, &sg->f_residuals, &sg->f_ivf,
                               &sg->f_ids, &sg->f_idmap, &sg->f_originals, &sg->f_sketch,
                               &sg->f_vscale};
        for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++)
            if (fs[i]->base && a >= fs[i]->base && (uint64_t)(a - fs[i]->base) < fs[i]->size)
                return fs[i]->path;
    }
    return NULL;
}

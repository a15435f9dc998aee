/* Build + open + info + verify: synthetic corpora with known structure, the real
 * ColBERTv2 vectors, every bad input the build must refuse without leaving an index,
 * a flipped byte in every file of an index, and token pooling. */
#include "testutil.h"

#include "common/simd.h"
#include "quant/codec.h"
#include "quant/pool.h"
#include "io/dir.h"
#include "io/file.h"
#include "index/index.h"
#include "input/input.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>

/* Writes PREFIX.vectors.npy (float32, x) and PREFIX.doclens.npy for ndocs documents of
 * doclen vectors. */
static void write_vectors(const char *prefix, const float *x, uint64_t ndocs, uint32_t doclen,
                          uint32_t dim) {
    char path[512];
    snprintf(path, sizeof path, "%s.vectors.npy", prefix);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, dim, x, ndocs * doclen), TT_OK);
    int64_t *lens = malloc(ndocs * sizeof *lens);
    for (uint64_t d = 0; d < ndocs; d++)
        lens[d] = doclen;
    snprintf(path, sizeof path, "%s.doclens.npy", prefix);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_I64, 0, lens, ndocs), TT_OK);
    free(lens);
}

/* The same for ndocs clustered documents; returns the vectors (caller frees). */
static float *write_corpus(const char *prefix, uint64_t ndocs, uint32_t doclen, uint32_t dim,
                           uint64_t seed) {
    uint64_t n = ndocs * doclen;
    float *x = malloc(n * dim * sizeof *x);
    tu_clustered(x, n, dim, 40, 0.35f, seed, NULL);
    write_vectors(prefix, x, ndocs, doclen, dim);
    return x;
}

static tt_input *open_corpus(const char *prefix, const char *ids) {
    char v[512], l[512];
    snprintf(v, sizeof v, "%s.vectors.npy", prefix);
    snprintf(l, sizeof l, "%s.doclens.npy", prefix);
    const char *vp[] = {v}, *lp[] = {l};
    tt_input *in = NULL;
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, ids, NULL), TT_OK);
    return in;
}

static tt_build_options small_opts(void) {
    tt_build_options o;
    tt_build_options_init(&o);
    o.threads = 2;
    o.memory_bytes = 256ull << 20;
    return o;
}

/* Same files (names, kinds, sizes, hashes) and segments. */
static bool manifests_equal(const tt_manifest *a, const tt_manifest *b) {
    if (a->n != b->n || a->nseg != b->nseg || a->generation != b->generation)
        return false;
    for (uint32_t i = 0; i < a->n; i++)
        if (strcmp(a->e[i].name, b->e[i].name) || memcmp(a->e[i].kind, b->e[i].kind, 4) ||
            a->e[i].size != b->e[i].size || a->e[i].payload_hash != b->e[i].payload_hash)
            return false;
    return !memcmp(a->seg, b->seg, a->nseg * sizeof *a->seg);
}

/* No leftover OUT.tmp-* directory beside out. */
static void assert_no_tmp(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t bl = strlen(base);
    while ((de = readdir(d)))
        ck_assert_msg(!(strncmp(de->d_name, base, bl) == 0 && strstr(de->d_name, ".tmp-")),
                      "left behind: %s", de->d_name);
    closedir(d);
}

/* Whether a file whose path holds dir and then name is mapped into this process (1), not
 * (0), or this cannot be told (-1: no /proc/self/maps). */
static int file_mapped(const char *dir, const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[4096];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, dir);
        hit = p && strstr(p, name) != NULL;
    }
    fclose(f);
    return hit;
}

START_TEST(build_synthetic) {
    char *dir = tu_tmpdir(), prefix[512], out[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    const uint32_t dim = 64, doclen = 12;
    const uint64_t ndocs = 600;
    float *x = write_corpus(prefix, ndocs, doclen, dim, 11);
    tt_input *in = open_corpus(prefix, NULL);
    tt_build_options o = small_opts();
    o.num_centroids = 128;
    tt_build_stats bs;
    ck_assert_int_eq(tt_build(out, in, &o, &bs), TT_OK);
    ck_assert_uint_eq(bs.num_centroids, 128);
    ck_assert(bs.heldout_mse > 0 && bs.heldout_mse < 0.01);
    assert_no_tmp(dir, "index");

    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
    tt_index_info info;
    ck_assert_int_eq(tt_index_get_info(idx, &info), TT_OK);
    ck_assert_uint_eq(info.num_docs, ndocs);
    ck_assert_uint_eq(info.num_vectors, ndocs * doclen);
    ck_assert_uint_eq(info.dim, dim);
    ck_assert_uint_eq(info.nbits, 2);
    ck_assert_uint_eq(info.bytes_residuals, TT_HEADER_SIZE + ndocs * doclen * dim * 2 / 8);
    ck_assert_uint_eq(info.bytes_codes, TT_HEADER_SIZE + ndocs * doclen * 2);
    ck_assert(info.resident_bytes < info.bytes_index);
    /* What search keeps in memory is in memory the index owns, not mapped from its
     * files, whose pages memory pressure would evict (doc/search.md, "Memory"): the
     * centroids as float16 (the build rounds them; the float32 file is then only
     * mapped, for add and compaction), the codes and lists. */
    ck_assert_ptr_nonnull(idx->centroids16);
    for (uint64_t i = 0; i < 128ull * dim; i++)
        ck_assert(tt_f16_to_f32(idx->centroids16[i]) == idx->centroids[i]);
    ck_assert(!idx->f_centroids.copied);
    ck_assert_int_ne(file_mapped(out, "/codes.tt"), 1);
    ck_assert_int_ne(file_mapped(out, "/ivf.tt"), 1);
    /* default ids are row numbers */
    size_t len;
    const char *id = tt_index_doc_id(idx, 17, &len);
    ck_assert_int_eq((int)len, 2);
    ck_assert_mem_eq(id, "17", 2);

    /* decompressed vectors are close to the originals (2-bit, clustered data) */
    float *dec = malloc(dim * sizeof *dec);
    double mean_cos = 0, centroid_cos = 0;
    tt_fmap rf;
    ck_assert_int_eq(tt_fmap_open(&rf, out, TT_F_RESIDUALS, "RESI", TT_MAP_WHOLE), TT_OK);
    for (uint64_t v = 0; v < ndocs * doclen; v++) {
        tt_codec_decode(&idx->codec, rf.payload + v * idx->res_bytes, dec);
        const float *c = idx->centroids + (uint64_t)tt_index_code(idx, v) * dim;
        double dot = 0, nn = 0, cdot = 0;
        for (uint32_t j = 0; j < dim; j++) {
            double r = c[j] + dec[j];
            dot += r * x[v * dim + j];
            cdot += c[j] * x[v * dim + j];
            nn += r * r;
        }
        mean_cos += dot / sqrt(nn);
        centroid_cos += cdot; /* centroids are unit vectors */
    }
    mean_cos /= (double)(ndocs * doclen);
    centroid_cos /= (double)(ndocs * doclen);
    /* the residual must add real information over the centroid alone */
    ck_assert_msg(mean_cos > 0.9 && mean_cos > centroid_cos + 0.05, "mean cosine %f (centroid %f)",
                  mean_cos, centroid_cos);
    tt_fmap_close(&rf);

    /* every document is in the IVF list of each of its vectors' centroids, and the
     * lists hold nothing else */
    uint64_t entries = 0;
    uint8_t *seen = calloc(ndocs * 128, 1);
    for (uint64_t d = 0; d < ndocs; d++)
        for (uint64_t v = idx->doc_vec0[d]; v < idx->doc_vec0[d + 1]; v++)
            seen[d * 128 + tt_index_code(idx, v)] = 1;
    ck_assert_uint_eq(idx->nseg, 1);
    const tt_segment *sg = &idx->seg[0];
    for (uint32_t c = 0; c < 128; c++) {
        const uint8_t *p = sg->ivf_data + sg->ivf_off[c], *end = sg->ivf_data + sg->ivf_off[c + 1];
        uint64_t doc = 0, delta;
        for (uint32_t i = 0; i < sg->ivf_len[c]; i++) {
            ck_assert(tt_varint_get(&p, end, &delta));
            doc += delta;
            ck_assert_msg(seen[doc * 128 + c] == 1, "doc %llu wrongly in list %u",
                          (unsigned long long)doc, c);
            seen[doc * 128 + c] = 2;
            entries++;
        }
    }
    for (uint64_t i = 0; i < ndocs * 128; i++)
        ck_assert_int_ne(seen[i], 1); /* every (doc, centroid) pair was listed */
    free(seen);
    free(dec);
    tt_index_close(idx);
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);

    /* reproducible: the same seed and threads give the same index data */
    char out2[512];
    snprintf(out2, sizeof out2, "%s/index2", dir);
    ck_assert_int_eq(tt_build(out2, in, &o, NULL), TT_OK);
    tt_manifest m1, m2;
    ck_assert_int_eq(tt_manifest_read(out, &m1), TT_OK);
    ck_assert_int_eq(tt_manifest_read(out2, &m2), TT_OK);
    for (uint32_t i = 0; i < m1.n; i++)
        if (strcmp(m1.e[i].name, TT_F_META))
            ck_assert_msg(m1.e[i].payload_hash == tt_manifest_find(&m2, m1.e[i].name)->payload_hash,
                          "%s differs between identical builds", m1.e[i].name);
    tt_manifest_free(&m1);
    tt_manifest_free(&m2);
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Float16 centroids: a search reads the float16 copy and returns what the float32
 * rows give, hit for hit (bit for bit where the CPU has AVX2: the same floats, summed in
 * the same order), in PLAID's split stage 4 (512-d, 4-vector queries) and exhaustive
 * search; raw vectors whose centroids float16 cannot hold keep float32 centroids (an
 * owned copy, not mapped) and search as before. */
START_TEST(centroids_float16) {
    char *dir = tu_tmpdir(), prefix[512], out[512];
    const uint32_t dim = 512, doclen = 8, nq = 4, k = 10;
    const uint64_t ndocs = 200, n = ndocs * doclen;
    for (int raw = 0; raw <= 1; raw++) {
        snprintf(prefix, sizeof prefix, "%s/c%d", dir, raw);
        snprintf(out, sizeof out, "%s/index%d", dir, raw);
        float *x = malloc(n * dim * sizeof *x);
        tu_clustered(x, n, dim, 20, 0.35f, 41, NULL);
        for (uint64_t i = 0; raw && i < n * dim; i++)
            x[i] *= 3e6f; /* centroids far beyond float16's 65504 */
        write_vectors(prefix, x, ndocs, doclen, dim);
        tt_input *in = open_corpus(prefix, NULL);
        tt_build_options o = small_opts();
        o.num_centroids = 32;
        o.normalize = !raw;
        ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
        tt_input_free(in);
        tt_index *idx;
        ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
        if (raw) {
            ck_assert_ptr_null(idx->centroids16);
            ck_assert(idx->f_centroids.copied);
        } else {
            ck_assert_ptr_nonnull(idx->centroids16);
            ck_assert(!idx->f_centroids.copied);
        }
        tt_search_ctx *ctx;
        ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
        uint16_t *h16 = idx->centroids16;
        for (int mode = 0; mode < 2; mode++) {
            tt_search_options so;
            tt_search_options_init(&so);
            so.mode = mode ? TT_MODE_EXHAUSTIVE : TT_MODE_PLAID;
            for (uint64_t q = 0; q < 5; q++) {
                /* a query: 4 vectors of document 37 q */
                const float *Q = x + (37 * q) * doclen * dim;
                tt_hit a[10], b[10];
                uint32_t na, nb;
                idx->centroids16 = h16;
                ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &so, a, &na), TT_OK);
                idx->centroids16 = NULL; /* the float32 rows */
                ck_assert_int_eq(tt_search(idx, ctx, Q, nq, k, &so, b, &nb), TT_OK);
                idx->centroids16 = h16;
                ck_assert_uint_eq(na, k);
                ck_assert_uint_eq(na, nb);
                ck_assert_uint_eq(a[0].doc, 37 * q);
                for (uint32_t i = 0; i < na; i++) {
                    ck_assert_uint_eq(a[i].doc, b[i].doc);
                    if (tt_cpu_avx2())
                        ck_assert_float_eq(a[i].score, b[i].score);
                    else
                        ck_assert_float_eq_tol(a[i].score, b[i].score, 1e-5f * fabsf(b[i].score));
                }
            }
        }
        tt_search_ctx_free(ctx);
        tt_index_close(idx);
        free(x);
    }
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(build_options_variants) {
    char *dir = tu_tmpdir(), prefix[512], out[512], ids[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(ids, sizeof ids, "%s/ids.txt", dir);
    const uint32_t dim = 32;
    float *x = write_corpus(prefix, 200, 5, dim, 3);
    FILE *f = fopen(ids, "w");
    for (int d = 0; d < 200; d++)
        fprintf(f, "doc-%03d\n", d);
    fclose(f);
    tt_input *in = open_corpus(prefix, ids);
    double mse[5] = {0};
    int nbits[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        snprintf(out, sizeof out, "%s/i%d", dir, nbits[i]);
        tt_build_options o = small_opts();
        o.nbits = nbits[i];
        o.num_centroids = 32;
        o.keep_originals = TT_KEEP_F16;
        o.codec_tables = i == 1 ? TT_CODEC_SHARED : TT_CODEC_PER_DIM;
        o.encoder = "test encoder\nwith a newline";
        tt_build_stats bs;
        ck_assert_int_eq(tt_build(out, in, &o, &bs), TT_OK);
        mse[i] = bs.heldout_mse;
        tt_index *idx;
        ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
        tt_index_info info;
        tt_index_get_info(idx, &info);
        ck_assert_uint_eq(info.nbits, (unsigned)nbits[i]);
        ck_assert_int_eq(info.has_ids, 1);
        ck_assert_int_eq(info.keep_originals, 1);
        ck_assert_int_eq(info.codec_tables, o.codec_tables);
        ck_assert_str_eq(info.encoder, "test encoder with a newline");
        ck_assert_uint_eq(info.bytes_originals, TT_HEADER_SIZE + 1000ull * dim * 2);
        size_t len;
        const char *id = tt_index_doc_id(idx, 123, &len);
        ck_assert_int_eq((int)len, 7);
        ck_assert_mem_eq(id, "doc-123", 7);
        /* originals are the (normalised) inputs in float16 */
        for (uint64_t v = 0; v < 1000; v += 37)
            for (uint32_t j = 0; j < dim; j++)
                ck_assert_float_eq_tol(tt_f16_to_f32(idx->seg[0].originals[v * dim + j]),
                                       x[v * dim + j], 1e-3);
        tt_index_close(idx);
        ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);
    }
    /* reconstruction error shrinks with more bits */
    ck_assert_msg(mse[0] > mse[1] && mse[1] > mse[2], "mse %g %g %g", mse[0], mse[1], mse[2]);
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Flips one byte at `off` (from the start, or from the end if negative). */
static void flip(const char *path, long off) {
    int fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    off_t size = lseek(fd, 0, SEEK_END);
    off_t at = off >= 0 ? off : size + off;
    uint8_t b;
    ck_assert_int_eq(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

START_TEST(flipped_byte_in_every_file) {
    char *dir = tu_tmpdir(), prefix[512], out[512], ids[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    snprintf(ids, sizeof ids, "%s/ids.txt", dir);
    float *x = write_corpus(prefix, 150, 6, 32, 5);
    FILE *f = fopen(ids, "w");
    for (int d = 0; d < 150; d++)
        fprintf(f, "d%d\n", d);
    fclose(f);
    tt_input *in = open_corpus(prefix, ids);
    tt_build_options o = small_opts();
    o.num_centroids = 16;
    o.keep_originals = TT_KEEP_F16;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(out, &m), TT_OK);
    ck_assert_uint_eq(m.n, 10); /* every kind of file is exercised */
    const char *names[11];
    for (uint32_t i = 0; i < m.n; i++)
        names[i] = m.e[i].name;
    names[m.n] = TT_F_MANIFEST;
    long offsets[] = {0, 5, 30, 61, TT_HEADER_SIZE, -1};
    for (uint32_t i = 0; i <= m.n; i++) {
        char *p = tt_path_join(out, names[i]);
        for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++) {
            flip(p, offsets[k]);
            int st = tt_index_verify(out, NULL, NULL);
            ck_assert_msg(st != TT_OK, "flip at %ld in %s not detected", offsets[k], names[i]);
            ck_assert_msg(strstr(tt_last_error(), names[i]) != NULL,
                          "flip in %s: message '%s' does not name it", names[i], tt_last_error());
            flip(p, offsets[k]); /* restore */
            ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);
        }
        free(p);
    }
    /* A flip in a resident file's payload (all but residuals and originals) is caught by
     * open itself, not only by verify: its checksum is checked there. */
    for (uint32_t i = 0; i < m.n; i++) {
        if (!strcmp(names[i], TT_F_RESIDUALS) || !strcmp(names[i], TT_F_ORIGINALS))
            continue;
        char *q = tt_path_join(out, names[i]);
        flip(q, -1);
        tt_index *bad;
        ck_assert_int_eq(tt_index_open(&bad, out, NULL), TT_ECORRUPT);
        ck_assert_msg(strstr(tt_last_error(), names[i]) && strstr(tt_last_error(), "checksum"),
                      "open after a flip in %s: '%s'", names[i], tt_last_error());
        flip(q, -1);
        free(q);
    }
    /* a truncated file is caught at open, naming it */
    char *p = tt_path_join(out, TT_F_RESIDUALS);
    ck_assert_int_eq(truncate(p, 1000), 0);
    tt_index *idx;
    ck_assert_int_ne(tt_index_open(&idx, out, NULL), TT_OK);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_RESIDUALS));
    free(p);
    tt_manifest_free(&m);
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Overwrites bytes of a file's payload and makes every checksum agree again (the
 * file's header, the manifest): damage only a value check can find. */
static void rewrite_payload(const char *dir, const char *name, uint64_t off, const void *data,
                            size_t n) {
    char *p = tt_path_join(dir, name);
    int fd = open(p, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, data, n, (off_t)(TT_HEADER_SIZE + off)), (ssize_t)n);
    uint8_t head[TT_HEADER_SIZE];
    ck_assert_int_eq(pread(fd, head, sizeof head, 0), (ssize_t)sizeof head);
    uint64_t len = tt_rd64(head + 40);
    uint8_t *payload = malloc(len ? len : 1);
    ck_assert_int_eq(pread(fd, payload, len, TT_HEADER_SIZE), (ssize_t)len);
    uint64_t h = XXH64(payload, len, 0);
    tt_wr64(head + 48, h);
    tt_wr32(head + 60, XXH32(head, 60, 0));
    ck_assert_int_eq(pwrite(fd, head, sizeof head, 0), (ssize_t)sizeof head);
    close(fd);
    free(payload);
    free(p);
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(dir, &m), TT_OK);
    for (uint32_t i = 0; i < m.n; i++)
        if (!strcmp(m.e[i].name, name))
            m.e[i].payload_hash = h;
    ck_assert_int_eq(tt_manifest_publish(dir, &m), TT_OK);
    tt_manifest_free(&m);
}

/* Per-vector residual scales (TT_DEBIAS_VECTOR): vscale.tt holds, for every vector in
 * row order, float16 of tt_codec_vector_scale of its residual and decoded residual,
 * recomputed here from the input (normalised, minus its centroid); they are open's,
 * verify's and info's; a value a scale cannot be (NaN, negative) is refused at open
 * naming the file; and the option needs the adaptive codec. */
START_TEST(vector_scales_by_definition) {
    char *dir = tu_tmpdir(), prefix[512], out[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    const uint64_t ndocs = 80, len = 6, n = ndocs * len;
    const uint32_t dim = 32;
    float *x = malloc(n * dim * sizeof *x);
    tu_clustered(x, n, dim, 40, 0.35f, 17, NULL);
    for (uint64_t i = 0; i < n; i++) /* two outlier dimensions: 8 bits each */
        for (uint32_t j = 0; j < 2; j++)
            x[i * dim + 7 + 9 * j] *= 40.0f;
    write_vectors(prefix, x, ndocs, (uint32_t)len, dim);
    tt_input *in = open_corpus(prefix, NULL);
    tt_build_options o = small_opts();
    o.num_centroids = 8;
    o.nbits = 2;
    o.debias = TT_DEBIAS_VECTOR;
    o.codec_tables = TT_CODEC_PER_DIM;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "adaptive"));
    o.codec_tables = TT_CODEC_ADAPTIVE;
    ck_assert_msg(tt_build(out, in, &o, NULL) == TT_OK, "%s", tt_last_error());
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);

    tt_index *idx;
    tt_open_options oo;
    tt_open_options_init(&oo);
    oo.io = TT_IO_MMAP; /* the residuals mapped */
    ck_assert_int_eq(tt_index_open(&idx, out, &oo), TT_OK);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    ck_assert_int_eq(info.debias, TT_DEBIAS_VECTOR);
    ck_assert_ptr_nonnull(idx->vscale);
    ck_assert_msg(idx->vscale_k0 == 2, "%u positions of 8 bits", idx->vscale_k0);
    ck_assert_uint_eq(idx->vscale_k0, tt_codec_n8(&idx->codec));
    const tt_codec *c = &idx->codec;
    tt_normalize_rows(x, n, dim);
    float *rp = malloc(2 * dim * sizeof *rp), *d = rp + dim;
    uint8_t *pk = malloc(c->bytes_per_vec);
    uint32_t positive = 0;
    for (uint64_t v = 0; v < n; v++) {
        const float *cen = idx->centroids + (uint64_t)tt_index_code(idx, v) * dim;
        tt_codec_to_positions(c, x + v * dim, rp); /* the index's centroids are, too */
        for (uint32_t k = 0; k < dim; k++)
            rp[k] -= cen[k];
        tt_codec_encode(c, rp, pk);
        ck_assert_mem_eq(pk, idx->seg[0].res_map + v * idx->res_bytes, c->bytes_per_vec);
        tt_codec_decode(c, pk, d);
        const uint16_t want = tt_f32_to_f16(tt_codec_vector_scale(c, rp, d));
        ck_assert_msg(idx->vscale[v] == want, "vector %llu: scale %04x, by definition %04x",
                      (unsigned long long)v, idx->vscale[v], want);
        positive += tt_f16_to_f32(want) > 0;
    }
    ck_assert_uint_gt(positive, n * 9 / 10);
    tt_index_close(idx);

    /* damage that only a value check finds: NaN, then a negative scale */
    char name[64];
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(out, &m), TT_OK);
    snprintf(name, sizeof name, "%s%s", m.seg[0].prefix, TT_F_VSCALE);
    tt_manifest_free(&m);
    const uint8_t nan16[2] = {0x00, 0x7e}, neg16[2] = {0x00, 0xbc}; /* LE: NaN, -1 */
    for (int t = 0; t < 2; t++) {
        rewrite_payload(out, name, 2 * 33, t ? neg16 : nan16, 2);
        ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_ECORRUPT);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), name));
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "vector 33"));
        ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_ECORRUPT);
    }
    /* and a missing file */
    char *p = tt_path_join(out, name);
    ck_assert_int_eq(unlink(p), 0);
    free(p);
    ck_assert_int_ne(tt_index_open(&idx, out, NULL), TT_OK);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_VSCALE));
    free(rp);
    free(pk);
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* TT_DEBIAS_AUTO (the default) resolves at training: one scale per vector where the
 * adaptive codec gives some dimensions 8 bits, debiased tables elsewhere (the
 * per-dimension codec; isotropic vectors), each index file for file the build with
 * that choice asked for; the index records the choice. */
START_TEST(debias_auto_resolves) {
    char *dir = tu_tmpdir(), prefix[512], a[512], e[512];
    const uint64_t ndocs = 80, len = 6, n = ndocs * len;
    const uint32_t dim = 32;
    float *x = malloc(n * dim * sizeof *x);
    for (int t = 0; t < 3; t++) {
        const bool outliers = t == 0, adaptive = t < 2;
        tu_clustered(x, n, dim, 40, 0.35f, 17 + (uint64_t)t, NULL);
        for (uint64_t i = 0; outliers && i < n; i++) /* as in vector_scales_by_definition */
            for (uint32_t j = 0; j < 2; j++)
                x[i * dim + 7 + 9 * j] *= 40.0f;
        snprintf(prefix, sizeof prefix, "%s/c%d", dir, t);
        write_vectors(prefix, x, ndocs, (uint32_t)len, dim);
        tt_input *in = open_corpus(prefix, NULL);
        tt_build_options o = small_opts();
        o.num_centroids = 8;
        o.codec_tables = adaptive ? TT_CODEC_ADAPTIVE : TT_CODEC_PER_DIM;
        ck_assert_int_eq(o.debias, TT_DEBIAS_AUTO);
        snprintf(a, sizeof a, "%s/auto%d", dir, t);
        ck_assert_msg(tt_build(a, in, &o, NULL) == TT_OK, "%s", tt_last_error());
        const int want = outliers ? TT_DEBIAS_VECTOR : TT_DEBIAS_TABLE;
        o.debias = want;
        snprintf(e, sizeof e, "%s/explicit%d", dir, t);
        ck_assert_int_eq(tt_build(e, in, &o, NULL), TT_OK);
        tt_index *idx;
        ck_assert_int_eq(tt_index_open(&idx, a, NULL), TT_OK);
        ck_assert_msg(idx->info.debias == want, "case %d: debias %d, %u positions of 8 bits", t,
                      (int)idx->info.debias, tt_codec_n8(&idx->codec));
        ck_assert_msg((tt_codec_n8(&idx->codec) > 0) == outliers, "case %d", t);
        tt_index_close(idx);
        tt_manifest ma, me;
        ck_assert_int_eq(tt_manifest_read(a, &ma), TT_OK);
        ck_assert_int_eq(tt_manifest_read(e, &me), TT_OK);
        ck_assert_uint_eq(ma.n, me.n);
        for (uint32_t i = 0; i < ma.n; i++) {
            const tt_manifest_entry *f = tt_manifest_find(&me, ma.e[i].name);
            ck_assert_msg(f != NULL, "case %d: %s only in the auto build", t, ma.e[i].name);
            if (strcmp(ma.e[i].name, TT_F_META)) /* meta.tt: build times */
                ck_assert_msg(f->payload_hash == ma.e[i].payload_hash, "case %d: %s differs", t,
                              ma.e[i].name);
        }
        tt_manifest_free(&ma);
        tt_manifest_free(&me);
        tt_input_free(in);
    }
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Values the formats can carry but an index must not: a non-finite centroid is refused
 * at open, a non-finite original by verify and by exact search, a value float16 cannot
 * hold by the build (issue B10); ids are stable strings, also for an index built
 * without an ids file, and a row out of range is an error (B13). */
START_TEST(non_finite_values_and_ids) {
    char *dir = tu_tmpdir(), prefix[512], out[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    float *x = write_corpus(prefix, 60, 5, 16, 9);
    tt_input *in = open_corpus(prefix, NULL);
    tt_build_options o = small_opts();
    o.num_centroids = 8;
    o.keep_originals = TT_KEEP_F16;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);

    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
    size_t l0, l1;
    const char *id0 = tt_index_doc_id(idx, 0, &l0), *id1 = tt_index_doc_id(idx, 59, &l1);
    ck_assert(l0 == 1 && !memcmp(id0, "0", 1)); /* still valid after the second call */
    ck_assert(l1 == 2 && !memcmp(id1, "59", 2));
    ck_assert_ptr_null(tt_index_doc_id(idx, 60, &l0));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "60"));
    tt_index_info info;
    tt_index_get_info(idx, &info);
    ck_assert_int_eq(info.has_ids, 0); /* row numbers, stored */
    ck_assert_uint_gt(info.bytes_ids, 0);
    tt_index_close(idx);

    /* An original that float16 cannot hold (a damaged file: builds refuse it). */
    uint16_t inf16 = 0x7c00;
    rewrite_payload(out, TT_F_ORIGINALS, 2 * (16 * 7 + 3), &inf16, 2);
    ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_ORIGINALS));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "vector 7"));
    tt_search_ctx *ctx;
    ck_assert_int_eq(tt_search_ctx_new(idx, &ctx), TT_OK);
    tt_search_options so;
    tt_search_options_init(&so);
    so.mode = TT_MODE_EXACT;
    tt_hit hits[5];
    uint32_t nh;
    ck_assert_int_eq(tt_search(idx, ctx, x, 2, 5, &so, hits, &nh), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_ORIGINALS));
    tt_search_ctx_free(ctx);
    tt_index_close(idx);

    /* A centroid that is not finite: refused at open. */
    float inf = INFINITY;
    rewrite_payload(out, TT_F_CENTROIDS, 4 * (16 * 2 + 5), &inf, 4);
    ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_CENTROIDS));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "centroid 2"));
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_ECORRUPT);

    /* A value beyond float16's range with kept originals: refused at build, naming the
     * vector (raw vectors; normalised ones never exceed 1). */
    tt_input_free(in);
    x[(uint64_t)(3 * 5 + 2) * 16 + 1] = 1e6f;
    char path[600];
    snprintf(path, sizeof path, "%s.vectors.npy", prefix);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, 16, x, 60 * 5), TT_OK);
    in = open_corpus(prefix, NULL);
    o.normalize = 0;
    snprintf(out, sizeof out, "%s/raw", dir);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "vector 17"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "float16"));
    o.keep_originals = TT_KEEP_NONE; /* without originals the value is fine */
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(bad_inputs_leave_nothing) {
    char *dir = tu_tmpdir(), prefix[512], out[512], path[600];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    const uint32_t dim = 16;
    float *x = write_corpus(prefix, 300, 4, dim, 9);
    tt_build_options o = small_opts();
    o.num_centroids = 8;

    /* NaN in a vector that is not in the training sample's first document */
    x[(1100) * dim + 3] = NAN;
    snprintf(path, sizeof path, "%s.vectors.npy", prefix);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, dim, x, 1200), TT_OK);
    tt_input *in = open_corpus(prefix, NULL);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "c.vectors.npy"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "1100"));
    ck_assert_int_ne(access(out, F_OK), 0);
    assert_no_tmp(dir, "index");
    tt_input_free(in);

    /* all-zero vector */
    x[1100 * dim + 3] = 0;
    memset(x + 700 * dim, 0, dim * sizeof *x);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, dim, x, 1200), TT_OK);
    in = open_corpus(prefix, NULL);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EVALUE);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "all zeros"));
    ck_assert_int_ne(access(out, F_OK), 0);
    assert_no_tmp(dir, "index");
    tt_input_free(in);

    /* a good build, then: exists without force; with force a failing build keeps it */
    float *good = write_corpus(prefix, 300, 4, dim, 9);
    in = open_corpus(prefix, NULL);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_manifest before, after;
    ck_assert_int_eq(tt_manifest_read(out, &before), TT_OK);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EEXIST);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "--force"));
    tt_input_free(in);
    memset(good + 900 * dim, 0, dim * sizeof *good); /* make the next build fail */
    ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, dim, good, 1200), TT_OK);
    in = open_corpus(prefix, NULL);
    o.force = 1;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EVALUE);
    ck_assert_int_eq(tt_manifest_read(out, &after), TT_OK);
    ck_assert(manifests_equal(&before, &after));
    tt_manifest_free(&after);
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);
    assert_no_tmp(dir, "index");
    tt_input_free(in);
    /* with force and good input the index is replaced */
    free(good);
    good = write_corpus(prefix, 300, 4, dim, 10);
    in = open_corpus(prefix, NULL);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    ck_assert_int_eq(tt_manifest_read(out, &after), TT_OK);
    ck_assert(!manifests_equal(&before, &after));
    tt_manifest_free(&before);
    tt_manifest_free(&after);
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);
    assert_no_tmp(dir, "index");
    /* force never replaces a directory that is not an index */
    char other[512];
    snprintf(other, sizeof other, "%s/notindex", dir);
    mkdir(other, 0755);
    snprintf(path, sizeof path, "%s/precious.txt", other);
    tu_write_file(path, "keep", 4);
    ck_assert_int_eq(tt_build(other, in, &o, NULL), TT_EEXIST);
    ck_assert_int_eq(access(path, F_OK), 0);
    /* bad options */
    o.nbits = 5;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EINVAL);
    /* 3 bits exist only as the adaptive codec's budget */
    const int tables = o.codec_tables;
    o.nbits = 3;
    o.codec_tables = TT_CODEC_PER_DIM;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "adaptive"));
    o.codec_tables = tables;
    o.nbits = 2;
    o.num_centroids = 5000; /* more centroids than vectors */
    snprintf(path, sizeof path, "%s/toomany", dir);
    ck_assert_int_eq(tt_build(path, in, &o, NULL), TT_EINVAL);
    ck_assert_int_ne(access(path, F_OK), 0);
    assert_no_tmp(dir, "toomany");
    tt_input_free(in);
    free(good);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Writes n x dim floats as a float64 .npy (format 1.0, header padded as NumPy pads
 * it), with element `big` (if >= 0) replaced by 1e300, beyond float32's range. */
static void write_f64_npy(const char *path, const float *x, uint64_t n, uint32_t dim,
                          int64_t big) {
    char text[128];
    int k = snprintf(text, sizeof text, "{'descr': '<f8', 'fortran_order': False, 'shape': "
                     "(%llu, %u), }", (unsigned long long)n, dim);
    size_t hlen = ((10 + (size_t)k + 1 + 63) / 64) * 64 - 10;
    uint8_t *b = malloc(10 + hlen + n * dim * 8);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    tt_wr16(b + 8, (uint16_t)hlen);
    memset(b + 10, ' ', hlen);
    memcpy(b + 10, text, (size_t)k);
    b[10 + hlen - 1] = '\n';
    for (uint64_t i = 0; i < n * dim; i++) {
        double d = (int64_t)i == big ? 1e300 : (double)x[i];
        uint64_t u;
        memcpy(&u, &d, 8);
        tt_wr64(b + 10 + hlen + 8 * i, u);
    }
    ck_assert_int_eq(tu_write_file(path, b, 10 + hlen + n * dim * 8), 0);
    free(b);
}

/* float64 vectors build the index their float32 values build (they narrow exactly);
 * a value beyond float32's range narrows to inf, which the build refuses, naming the
 * file and the vector. */
START_TEST(float64_input) {
    char *dir = tu_tmpdir(), prefix[512], out[512], out2[512], v64[512], l[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    snprintf(out2, sizeof out2, "%s/index64", dir);
    snprintf(v64, sizeof v64, "%s/c.f64.npy", dir);
    snprintf(l, sizeof l, "%s/c.doclens.npy", dir);
    const uint32_t dim = 16;
    float *x = write_corpus(prefix, 300, 4, dim, 9);
    tt_build_options o = small_opts();
    o.num_centroids = 8;
    tt_input *in = open_corpus(prefix, NULL);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_input_free(in);
    write_f64_npy(v64, x, 1200, dim, -1);
    const char *vp[] = {v64}, *lp[] = {l};
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, NULL, NULL), TT_OK);
    ck_assert_int_eq(tt_build(out2, in, &o, NULL), TT_OK);
    tt_input_free(in);
    tt_manifest m1, m2;
    ck_assert_int_eq(tt_manifest_read(out, &m1), TT_OK);
    ck_assert_int_eq(tt_manifest_read(out2, &m2), TT_OK);
    for (uint32_t i = 0; i < m1.n; i++)
        if (strcmp(m1.e[i].name, TT_F_META))
            ck_assert_msg(m1.e[i].payload_hash == tt_manifest_find(&m2, m1.e[i].name)->payload_hash,
                          "%s differs between the float32 and float64 builds", m1.e[i].name);
    tt_manifest_free(&m1);
    tt_manifest_free(&m2);

    write_f64_npy(v64, x, 1200, dim, 1100 * dim + 5);
    snprintf(out2, sizeof out2, "%s/index_big", dir);
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, NULL, NULL), TT_OK);
    ck_assert_int_eq(tt_build(out2, in, &o, NULL), TT_EVALUE);
    ck_assert_msg(strstr(tt_last_error(), v64) && strstr(tt_last_error(), "vector 1100 ") &&
                  strstr(tt_last_error(), "Inf"), "%s", tt_last_error());
    ck_assert_int_ne(access(out2, F_OK), 0);
    assert_no_tmp(dir, "index_big");
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(build_nanofiqa) {
    const char *data = tu_data_dir();
    if (!data)
        return; /* shared data absent: nothing to check here */
    char v[4200], l[4200], ids[4200];
    snprintf(v, sizeof v, "%s/emb/colbertv2_nanofiqa/doc_token_embeddings.npy", data);
    snprintf(l, sizeof l, "%s/emb/colbertv2_nanofiqa/doclens.npy", data);
    snprintf(ids, sizeof ids, "%s/emb/colbertv2_nanofiqa/doc_ids.txt", data);
    const char *vp[] = {v}, *lp[] = {l};
    tt_input *in;
    ck_assert_int_eq(tt_input_open(&in, 1, vp, lp, ids, NULL), TT_OK);
    char *dir = tu_tmpdir(), out[512];
    snprintf(out, sizeof out, "%s/nanofiqa", dir);
    tt_build_options o = small_opts();
    o.encoder = "colbert-ir/colbertv2.0 (PyLate)";
    tt_build_stats bs;
    ck_assert_int_eq(tt_build(out, in, &o, &bs), TT_OK);
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    ck_assert_uint_eq(info.num_docs, 35);
    ck_assert_uint_eq(info.num_vectors, 4430);
    ck_assert_uint_eq(info.dim, 128);
    /* ColBERTv2's rule: 2^floor(log2(16*sqrt(4430))) = 1024 */
    ck_assert_uint_eq(info.num_centroids, 1024);
    ck_assert_int_eq(info.has_ids, 1);
    tt_index_close(idx);
    ck_assert_int_eq(tt_index_verify(out, NULL, NULL), TT_OK);
    tt_input_free(in);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Writes PREFIX.vectors.npy and PREFIX.doclens.npy for documents of the given lengths
 * (clustered unit vectors); returns the vectors (caller frees) and their count. */
static float *write_corpus_lens(const char *prefix, const int64_t *lens, uint64_t ndocs,
                                uint32_t dim, uint64_t seed, uint64_t *nvec) {
    uint64_t n = 0;
    for (uint64_t d = 0; d < ndocs; d++)
        n += (uint64_t)lens[d];
    float *x = malloc(n * dim * sizeof *x);
    tu_clustered(x, n, dim, 20, 0.35f, seed, NULL);
    char path[512];
    snprintf(path, sizeof path, "%s.vectors.npy", prefix);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, dim, x, n), TT_OK);
    snprintf(path, sizeof path, "%s.doclens.npy", prefix);
    ck_assert_int_eq(tu_write_npy(path, TT_DT_I64, 0, lens, ndocs), TT_OK);
    *nvec = n;
    return x;
}

/* meta.tt's lines, without those that name the moment or the threads of a build. */
static char *meta_stable(const char *dir) {
    tt_fmap m;
    ck_assert_int_eq(tt_fmap_open(&m, dir, TT_F_META, "META", TT_MAP_WHOLE), TT_OK);
    char *out = calloc(m.h.payload_bytes + 1, 1);
    const char *p = (const char *)m.payload, *end = p + m.h.payload_bytes;
    size_t o = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl + 1 : end) - p);
        if (strncmp(p, "created=", 8) && strncmp(p, "build_seconds=", 14) &&
            strncmp(p, "threads=", 8)) {
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
    }
    tt_fmap_close(&m);
    return out;
}

/* Every file but meta.tt the same (name, size, payload), meta.tt the same but for the
 * moment and the threads of the build. */
static void assert_same_index(const char *a, const char *b) {
    tt_manifest ma, mb;
    ck_assert_int_eq(tt_manifest_read(a, &ma), TT_OK);
    ck_assert_int_eq(tt_manifest_read(b, &mb), TT_OK);
    ck_assert_uint_eq(ma.n, mb.n);
    for (uint32_t i = 0; i < ma.n; i++) {
        if (!strcmp(ma.e[i].name, TT_F_META))
            continue;
        const tt_manifest_entry *e = tt_manifest_find(&mb, ma.e[i].name);
        ck_assert_msg(e && e->size == ma.e[i].size && e->payload_hash == ma.e[i].payload_hash,
                      "%s differs between %s and %s", ma.e[i].name, a, b);
    }
    ck_assert(!memcmp(ma.seg, mb.seg, ma.nseg * sizeof *ma.seg));
    char *ta = meta_stable(a), *tb = meta_stable(b);
    ck_assert_str_eq(ta, tb);
    free(ta);
    free(tb);
    tt_manifest_free(&ma);
    tt_manifest_free(&mb);
}

/* Token pooling in the build (doc/pooling.md): factor 1 is the build without pooling, bit
 * for bit (also for a caller that predates the option); a pooled build is the same on
 * any number of threads, keeps max(1, floor(n/F)) vectors per document, stores the
 * normalised means of the Ward clusters of the normalised vectors (as originals too),
 * and its lengths before pooling, which verify checks; a NaN or all-zero vector is
 * reported at its own file and row, not in a mean; a document too long for the memory
 * budget is refused before any work. */
START_TEST(pooled_build) {
    char *dir = tu_tmpdir(), prefix[512], out[512], path[700];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    const uint32_t dim = 32, factor = 3;
    const uint64_t ndocs = 150;
    int64_t lens[150];
    for (uint64_t d = 0; d < ndocs; d++) /* n < F, n = F, n = 1 and longer ones */
        lens[d] = d % 7 == 0 ? 1 : d % 11 == 0 ? 3 : d % 13 == 0 ? 2 : 4 + (int64_t)(d * 37 % 50);
    uint64_t n;
    float *x = write_corpus_lens(prefix, lens, ndocs, dim, 4, &n);
    tt_input *in = open_corpus(prefix, NULL);
    tt_build_options o = small_opts();
    o.num_centroids = 32;
    o.keep_originals = TT_KEEP_F16;

    /* factor 1: the index without pooling, whoever asks */
    char plain[3][512];
    for (int i = 0; i < 3; i++) {
        snprintf(plain[i], sizeof plain[i], "%s/plain%d", dir, i);
        tt_build_options p = o;
        if (i == 1)
            p.pool_factor = 0;
        if (i == 2) /* built against a tartan.h without pool_factor */
            p.struct_size = (uint32_t)offsetof(tt_build_options, pool_factor);
        ck_assert_int_eq(o.pool_factor, 1);
        ck_assert_msg(tt_build(plain[i], in, &p, NULL) == TT_OK, "%s", tt_last_error());
        if (i)
            assert_same_index(plain[0], plain[i]);
    }
    tt_manifest m;
    ck_assert_int_eq(tt_manifest_read(plain[0], &m), TT_OK);
    ck_assert_ptr_null(tt_manifest_find(&m, TT_F_INLENS));
    tt_manifest_free(&m);

    /* factor 3 on 1, 2 and 3 threads: the same index */
    char pooled[3][512];
    for (int t = 0; t < 3; t++) {
        snprintf(pooled[t], sizeof pooled[t], "%s/pooled%d", dir, t);
        tt_build_options p = o;
        p.pool_factor = (int)factor;
        p.threads = t + 1;
        ck_assert_msg(tt_build(pooled[t], in, &p, NULL) == TT_OK, "%s", tt_last_error());
        if (t)
            assert_same_index(pooled[0], pooled[t]);
    }
    ck_assert_int_eq(tt_index_verify(pooled[0], NULL, NULL), TT_OK);
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, pooled[0], NULL), TT_OK);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    ck_assert_uint_eq(info.pool_factor, factor);
    ck_assert_uint_eq(info.input_vectors, n);
    ck_assert_uint_eq(info.num_docs, ndocs);
    uint64_t kept = 0;
    for (uint64_t d = 0; d < ndocs; d++) {
        uint32_t k = lens[d] / factor ? (uint32_t)(lens[d] / factor) : 1;
        ck_assert_uint_eq(idx->doclens[d], k);
        kept += k;
    }
    ck_assert_uint_eq(info.num_vectors, kept);
    /* the originals are the normalised means of the pooled normalised vectors */
    tt_pool_work w;
    ck_assert_int_eq(tt_pool_work_init(&w, 60, dim), TT_OK);
    float *doc = malloc(60 * dim * sizeof *doc), *mean = malloc(60 * dim * sizeof *mean);
    uint64_t v = 0;
    for (uint64_t d = 0; d < ndocs; d++) {
        memcpy(doc, x + v * dim, (size_t)lens[d] * dim * sizeof *doc);
        tt_normalize_rows(doc, (uint64_t)lens[d], dim);
        uint32_t k = tt_pool_ward(&w, doc, (uint32_t)lens[d], factor, mean, NULL);
        tt_normalize_rows(mean, k, dim);
        /* stored in position order: position j of a vector is input dimension perm[j]
         * (the adaptive codec may order them by width) */
        for (uint32_t i = 0; i < k * dim; i++) {
            uint32_t j = i % dim, in_dim = idx->codec.perm ? idx->codec.perm[j] : j;
            ck_assert_msg(fabsf(tt_f16_to_f32(idx->seg[0].originals[idx->doc_vec0[d] * dim + i]) -
                                mean[i - j + in_dim]) < 2e-3f, "document %llu value %u",
                          (unsigned long long)d, i);
        }
        v += (uint64_t)lens[d];
    }
    tt_pool_work_free(&w);
    free(doc);
    free(mean);
    tt_index_close(idx);
    /* the lengths before pooling are checked by verify */
    snprintf(path, sizeof path, "%s/%s", pooled[1], TT_F_INLENS);
    flip(path, -2);
    ck_assert_int_eq(tt_index_verify(pooled[1], NULL, NULL), TT_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), TT_F_INLENS));
    tt_input_free(in);

    /* a NaN, then an all-zero vector, in the source of a pooled build: named where it is */
    o.pool_factor = 2;
    snprintf(path, sizeof path, "%s.vectors.npy", prefix);
    snprintf(out, sizeof out, "%s/bad", dir);
    for (int kind = 0; kind < 2; kind++) {
        float keep[32];
        memcpy(keep, x + 101 * dim, sizeof keep);
        if (kind == 0)
            x[101 * dim + 5] = NAN;
        else
            memset(x + 101 * dim, 0, dim * sizeof *x);
        ck_assert_int_eq(tu_write_npy(path, TT_DT_F32, dim, x, n), TT_OK);
        in = open_corpus(prefix, NULL);
        ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EVALUE);
        ck_assert_ptr_nonnull(strstr(tt_last_error(), "c.vectors.npy: vector 101 (document"));
        ck_assert_ptr_nonnull(strstr(tt_last_error(), kind ? "all zeros" : "NaN"));
        ck_assert_int_ne(access(out, F_OK), 0);
        tt_input_free(in);
        memcpy(x + 101 * dim, keep, sizeof keep);
    }
    free(x);

    /* a document whose work space does not fit in a quarter of the budget */
    int64_t long_lens[3] = {5, 1500, 5};
    x = write_corpus_lens(prefix, long_lens, 3, 8, 5, &n);
    in = open_corpus(prefix, NULL);
    o.memory_bytes = 64ull << 20;
    o.num_centroids = 4;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_ENOMEM);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "document 1 has 1500 vectors"));
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "--memory"));
    ck_assert_int_ne(access(out, F_OK), 0);
    assert_no_tmp(dir, "bad");
    o.memory_bytes = 256ull << 20; /* enough */
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    o.pool_factor = -2;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EINVAL);
    ck_assert_ptr_nonnull(strstr(tt_last_error(), "pool factor"));
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* tt_input_from_memory: one float32 block with doclens, one block per document, and
 * float16 rows all build the index a file of the same vectors builds (every file but
 * meta's timestamp has the same hash); ids are copied and checked; bad shapes, values
 * and ids fail with a message naming the input. */
START_TEST(memory_input) {
    char *dir = tu_tmpdir(), prefix[512], ref[512], out[512], idsf[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(ref, sizeof ref, "%s/ref", dir);
    snprintf(idsf, sizeof idsf, "%s/ids.txt", dir);
    const uint32_t dim = 16, doclen = 4;
    const uint64_t ndocs = 300, n = ndocs * doclen;
    float *x = write_corpus(prefix, ndocs, doclen, dim, 11);
    char **ids = malloc(ndocs * sizeof *ids);
    FILE *f = fopen(idsf, "w");
    for (uint64_t d = 0; d < ndocs; d++) {
        ids[d] = malloc(16);
        snprintf(ids[d], 16, "doc-%llu", (unsigned long long)d);
        fprintf(f, "%s\n", ids[d]);
    }
    fclose(f);
    tt_build_options o = small_opts();
    o.num_centroids = 8;
    tt_input *in = open_corpus(prefix, idsf);
    ck_assert_int_eq(tt_build(ref, in, &o, NULL), TT_OK);
    tt_input_free(in);

    /* one block, doclens */
    int64_t *lens = malloc(ndocs * sizeof *lens);
    for (uint64_t d = 0; d < ndocs; d++)
        lens[d] = doclen;
    const void *blk[] = {x};
    uint64_t rows[] = {n};
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, blk, rows, lens, ndocs,
                                          (const char *const *)ids, "mem"), TT_OK);
    ck_assert_uint_eq(tt_input_num_docs(in), ndocs);
    ck_assert_uint_eq(tt_input_num_vectors(in), n);
    ck_assert_uint_eq(tt_input_dim(in), dim);
    snprintf(out, sizeof out, "%s/one", dir);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_input_free(in);
    assert_same_index(ref, out);

    /* a block per document, no doclens */
    const void **blks = malloc(ndocs * sizeof *blks);
    uint64_t *brows = malloc(ndocs * sizeof *brows);
    for (uint64_t d = 0; d < ndocs; d++) {
        blks[d] = x + d * doclen * dim;
        brows[d] = doclen;
    }
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, ndocs, blks, brows, NULL, 0,
                                          (const char *const *)ids, NULL), TT_OK);
    snprintf(out, sizeof out, "%s/per-doc", dir);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_input_free(in);
    assert_same_index(ref, out);

    /* float16 blocks of uneven sizes with doclens across them = float32 of the rounded */
    uint16_t *h = malloc(n * dim * sizeof *h);
    float *xr = malloc(n * dim * sizeof *xr);
    for (uint64_t i = 0; i < n * dim; i++) {
        h[i] = tt_f32_to_f16(x[i]);
        xr[i] = tt_f16_to_f32(h[i]);
    }
    const void *hb[] = {h, h + 7 * dim, h + 700 * dim};
    uint64_t hrows[] = {7, 693, n - 700};
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F16, 3, hb, hrows, lens, ndocs,
                                          NULL, NULL), TT_OK);
    snprintf(out, sizeof out, "%s/f16", dir);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_input_free(in);
    const void *rb[] = {xr};
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, rb, rows, lens, ndocs,
                                          NULL, NULL), TT_OK);
    char out2[512];
    snprintf(out2, sizeof out2, "%s/f16-as-f32", dir);
    ck_assert_int_eq(tt_build(out2, in, &o, NULL), TT_OK);
    tt_input_free(in);
    assert_same_index(out, out2);

    /* errors */
    lens[5] = 3;
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, blk, rows, lens, ndocs,
                                          NULL, "mem"), TT_EDIM);
    ck_assert_ptr_null(in);
    ck_assert_msg(strstr(tt_last_error(), "mem: doclens sum to 1199"), "%s", tt_last_error());
    lens[5] = 0;
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, blk, rows, lens, ndocs,
                                          NULL, "mem"), TT_EVALUE);
    ck_assert_msg(strstr(tt_last_error(), "document 5 has length 0"), "%s", tt_last_error());
    lens[5] = doclen;
    ck_assert_int_eq(tt_input_from_memory(&in, dim, 7, 1, blk, rows, lens, ndocs, NULL, NULL),
                     TT_EUNSUPPORTED);
    ck_assert_int_eq(tt_input_from_memory(&in, 0, TT_DTYPE_F32, 1, blk, rows, lens, ndocs, NULL,
                                          NULL), TT_EDIM);
    brows[9] = 0;
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, ndocs, blks, brows, NULL, 0,
                                          NULL, "list"), TT_EVALUE);
    ck_assert_msg(strstr(tt_last_error(), "list: document 9 has no vectors"), "%s", tt_last_error());
    brows[9] = doclen;
    char *saved = ids[7];
    ids[7] = ids[3];
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, blk, rows, lens, ndocs,
                                          (const char *const *)ids, "mem"), TT_EPARSE);
    ck_assert_msg(strstr(tt_last_error(), "duplicate id 'doc-3'"), "%s", tt_last_error());
    ids[7] = (char *)"bad id";
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, blk, rows, lens, ndocs,
                                          (const char *const *)ids, "mem"), TT_EPARSE);
    ids[7] = saved;
    /* NaN: found by the build, which names the input, the vector and leaves nothing */
    x[333 * dim + 2] = NAN;
    ck_assert_int_eq(tt_input_from_memory(&in, dim, TT_DTYPE_F32, 1, blk, rows, lens, ndocs,
                                          NULL, "mem"), TT_OK);
    snprintf(out, sizeof out, "%s/nan", dir);
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_EVALUE);
    ck_assert_msg(strstr(tt_last_error(), "mem: vector 333 (document 83)"), "%s", tt_last_error());
    ck_assert_int_ne(access(out, F_OK), 0);
    tt_input_free(in);

    for (uint64_t d = 0; d < ndocs; d++)
        free(ids[d]);
    free(ids);
    free(lens);
    free(blks);
    free(brows);
    free(h);
    free(xr);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(compression_ratio_128d_2bit) {
    /* Large enough that per-index constants (centroids) are amortised as in practice:
     * 50k vectors x 128-d with 64 centroids. The 2-bit index must be >= 7x smaller
     * than the float16 vectors. */
    char *dir = tu_tmpdir(), prefix[512], out[512];
    snprintf(prefix, sizeof prefix, "%s/c", dir);
    snprintf(out, sizeof out, "%s/index", dir);
    float *x = write_corpus(prefix, 1600, 32, 128, 21);
    tt_input *in = open_corpus(prefix, NULL);
    tt_build_options o = small_opts();
    o.num_centroids = 64;
    ck_assert_int_eq(tt_build(out, in, &o, NULL), TT_OK);
    tt_index *idx;
    ck_assert_int_eq(tt_index_open(&idx, out, NULL), TT_OK);
    tt_index_info info;
    tt_index_get_info(idx, &info);
    ck_assert_msg(info.ratio_f16 >= 7.0, "ratio %.3f", info.ratio_f16);
    ck_assert(info.bits_per_dim < 2.3);
    tt_index_close(idx);
    tt_input_free(in);
    free(x);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("build");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, build_synthetic);
    tcase_add_test(tc, build_options_variants);
    tcase_add_test(tc, centroids_float16);
    tcase_add_test(tc, flipped_byte_in_every_file);
    tcase_add_test(tc, bad_inputs_leave_nothing);
    tcase_add_test(tc, non_finite_values_and_ids);
    tcase_add_test(tc, vector_scales_by_definition);
    tcase_add_test(tc, debias_auto_resolves);
    tcase_add_test(tc, float64_input);
    tcase_add_test(tc, memory_input);
    tcase_add_test(tc, build_nanofiqa);
    tcase_add_test(tc, compression_ratio_128d_2bit);
    tcase_add_test(tc, pooled_build);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* Index build, encoding: every vector to a centroid id and a packed residual, written
 * in bounded chunks; then the IVF lists from the codes file. */
#include "index/build.h"
#include "io/dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct encode_job {
    builder *b;
    const float *x;
    const uint32_t *ids;
    uint8_t *packed;
    uint16_t *orig;
    uint16_t *vscale; /* debias 2: each vector's scale (float16), or NULL */
    float *scratch; /* 3 * dim floats per thread */
    double *err;    /* per thread: squared reconstruction error (b->measure) */
    uint64_t n;
} encode_job;

static void encode_worker(void *arg, int t, int nt) {
    encode_job *j = arg;
    builder *b = j->b;
    uint32_t dim = b->dim;
    float *r = j->scratch + (uint64_t)t * 3 * dim, *rp = r + dim, *back = rp + dim;
    uint64_t lo = j->n * (uint64_t)t / (uint64_t)nt, hi = j->n * (uint64_t)(t + 1) / (uint64_t)nt;
    double err = 0;
    for (uint64_t i = lo; i < hi; i++) {
        const float *v = j->x + i * dim, *c = b->centroids + (uint64_t)j->ids[i] * dim;
        for (uint32_t d = 0; d < dim; d++)
            r[d] = v[d] - c[d];
        /* The index stores everything in the codec's position order. */
        tt_codec_to_positions(&b->codec, r, rp);
        uint8_t *packed = j->packed + i * b->codec.bytes_per_vec;
        tt_codec_encode(&b->codec, rp, packed);
        if (j->vscale || b->measure)
            tt_codec_decode(&b->codec, packed, back);
        if (j->vscale)
            j->vscale[i] = tt_f32_to_f16(tt_codec_vector_scale(&b->codec, rp, back));
        if (b->measure) { /* what the codec loses on these vectors (unscaled): drift's */
            for (uint32_t d = 0; d < dim; d++) {
                double e = (double)back[d] - rp[d];
                err += e * e;
            }
        }
        if (j->orig) {
            tt_codec_to_positions(&b->codec, v, rp);
            for (uint32_t d = 0; d < dim; d++)
                j->orig[i * dim + d] = tt_f32_to_f16(rp[d]);
        }
    }
    j->err[t] = err;
}

/* Updates the IVF bookkeeping with the codes of vectors [v0, v0+n). A document's
 * centroids are deduplicated with a per-centroid stamp (last document + 1). */
void tt_build_ivf_count(builder *b, const uint32_t *ids, uint64_t v0, uint64_t n) {
    const tt_input *in = b->in;
    uint64_t d = tt_find_le(in->doc_vec0, in->num_docs, v0); /* document containing v0 */
    for (uint64_t i = 0; i < n; i++) {
        while (in->doc_vec0[d + 1] <= v0 + i)
            d++;
        uint32_t c = ids[i];
        if (b->stamp[c] == d + 1)
            continue;
        b->stamp[c] = d + 1;
        uint64_t prev = b->ivf_last[c] ? b->ivf_last[c] - 1 : 0;
        uint8_t tmp[10];
        b->ivf_bytes[c] += tt_varint_put(tmp, b->ivf_last[c] ? d - prev : d);
        b->ivf_last[c] = d + 1;
        b->ivf_len[c]++;
    }
}

int tt_build_encode(builder *b, uint64_t *codes_size) {
    tt_input *in = b->in;
    const tt_build_options *o = b->o;
    uint64_t N = in->num_vectors, chunk = b->chunk_vectors;
    uint32_t dim = b->dim, bpv = b->codec.bytes_per_vec;
    tt_vec_files vf = TT_VEC_FILES_INIT;
    float *x = NULL;
    uint32_t *ids = NULL;
    uint8_t *packed = NULL, *codes = NULL;
    uint16_t *orig = NULL, *vscale = NULL;
    float *scratch = NULL;
    int st;
    double t0 = tt_now();

    scratch = tt_alloc((uint64_t)b->threads, 3ull * dim * sizeof(float), "encode buffer");
    double *err = tt_calloc((uint64_t)b->threads, sizeof *err, "encode buffer");
    x = tt_alloc(chunk, (uint64_t)dim * sizeof(float), "encode buffer");
    ids = tt_alloc(chunk, sizeof *ids, "encode buffer");
    packed = tt_alloc(chunk, bpv, "encode buffer");
    codes = tt_alloc(chunk, b->code_bytes, "encode buffer");
    if (o->keep_originals == TT_KEEP_F16)
        orig = tt_alloc(chunk, (uint64_t)dim * 2, "encode buffer");
    const bool vs = b->debias == TT_DEBIAS_VECTOR;
    if (vs)
        vscale = tt_alloc(chunk, 2, "encode buffer");
    if (!scratch || !err || !x || !ids || !packed || !codes ||
        (o->keep_originals == TT_KEEP_F16 && !orig) || (vs && !vscale)) {
        st = TT_ENOMEM;
        goto done;
    }
    vf.sb = tt_codec_sketch_bytes(&b->codec);
    vf.vs = vscale != NULL;
    if ((st = tt_vec_files_open(b, &vf, orig != NULL)))
        goto done;

    for (uint64_t v0 = 0; v0 < N; v0 += chunk) {
        uint64_t n = TT_MIN(chunk, N - v0);
        if ((st = tt_input_read(in, v0, n, x)) || (st = tt_build_prepare_vectors(b, x, v0, n)) ||
            (st = tt_assign(b->assigner, x, n, ids, b->threads)))
            goto done;
        encode_job job = {b, x, ids, packed, orig, vscale, scratch, err, n};
        tt_parallel(b->threads, encode_worker, &job);
        if (b->measure) {
            for (int t = 0; t < b->threads; t++)
                b->err_sum += err[t];
            b->err_values += n * dim;
        }
        for (uint64_t i = 0; i < n; i++) {
            if (b->code_bytes == 2)
                tt_wr16(codes + 2 * i, (uint16_t)ids[i]);
            else
                tt_wr32(codes + 4 * i, ids[i]);
        }
        if (orig)
            for (uint64_t i = 0; i < n * dim; i++)
                tt_wr16(&orig[i], orig[i]); /* little-endian on disk */
        tt_build_ivf_count(b, ids, v0, n);
        if ((st = tt_fw_write(&vf.codes, codes, (size_t)(n * b->code_bytes))) ||
            (st = tt_vec_files_write_residuals(&vf, packed, n, bpv)))
            goto done;
        if (orig && (st = tt_fw_write(&vf.originals, orig, (size_t)(n * dim * 2))))
            goto done;
        if (vscale) {
            for (uint64_t i = 0; i < n; i++)
                tt_wr16(&vscale[i], vscale[i]); /* little-endian on disk */
            if ((st = tt_fw_write(&vf.vscale, vscale, (size_t)(n * 2))))
                goto done;
        }
        if ((st = tt_build_progress(b, "encode", v0 + n, N)))
            goto done;
    }
    st = tt_vec_files_finish(b, &vf, N, b->code_bytes, bpv, dim, codes_size);
done:
    tt_vec_files_abort(&vf);
    free(x);
    free(ids);
    free(packed);
    free(codes);
    free(orig);
    free(vscale);
    free(scratch);
    free(err);
    b->st.seconds_encode = tt_now() - t0;
    return st;
}

/* ------------------------------------------------------------------ IVF */

/* Writes ivf.tt: u64 off[K+1] (byte offsets into the data), u32 len[K], then the
 * delta-varint document lists. The lists are filled from the codes file in as many
 * passes over it as needed to keep each pass's slice of the data within budget. */
int tt_build_write_ivf(builder *b) {
    const tt_input *in = b->in;
    uint32_t K = b->K;
    uint64_t total_bytes = 0, entries = 0;
    tt_fwriter w = {.fd = -1};
    uint8_t *arr = NULL, *data = NULL, *codes = NULL;
    uint64_t *pos = NULL;
    char *codes_path = NULL;
    int fd = -1, st;
    double t0 = tt_now();

    for (uint32_t c = 0; c < K; c++) {
        total_bytes += b->ivf_bytes[c];
        entries += b->ivf_len[c];
    }
    char name[TT_MANIFEST_NAME_LEN];
    if ((st = tt_fw_open(&w, b->wdir, tt_build_name(b, TT_F_IVF, name), "IVF_")))
        goto done;
    uint64_t arr_bytes = 8ull * (K + 1) + 4ull * K;
    arr = tt_alloc(arr_bytes, 1, "IVF offsets");
    if (!arr) {
        st = TT_ENOMEM;
        goto done;
    }
    uint64_t off = 0;
    for (uint32_t c = 0; c <= K; c++) {
        tt_wr64(arr + 8ull * c, off);
        if (c < K)
            off += b->ivf_bytes[c];
    }
    for (uint32_t c = 0; c < K; c++)
        tt_wr32(arr + 8ull * (K + 1) + 4ull * c, b->ivf_len[c]);
    if ((st = tt_fw_write(&w, arr, (size_t)arr_bytes)))
        goto done;

    uint64_t budget = TT_MAX(b->o->memory_bytes / 4, (uint64_t)(16 << 20));
    uint64_t slice = TT_MIN(total_bytes, budget);
    data = tt_alloc(TT_MAX(slice, 1), 1, "IVF data");
    pos = tt_alloc(K, sizeof *pos, "IVF data");
    uint64_t cbuf_n = 1 << 20;
    codes = tt_alloc(cbuf_n, b->code_bytes, "IVF data");
    char nc[TT_MANIFEST_NAME_LEN];
    codes_path = tt_path_join(b->wdir, tt_build_name(b, TT_F_CODES, nc));
    if (!data || !pos || !codes || !codes_path) {
        st = TT_ENOMEM;
        goto done;
    }
    fd = open(codes_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot reopen", codes_path);
        goto done;
    }
    uint32_t c0 = 0;
    uint64_t done_bytes = 0;
    while (c0 < K) {
        /* Centroids [c0, c1) whose lists fit in the slice (at least one). */
        uint32_t c1 = c0;
        uint64_t bytes = 0;
        while (c1 < K && (c1 == c0 || bytes + b->ivf_bytes[c1] <= slice))
            bytes += b->ivf_bytes[c1++];
        if (bytes > slice) {
            uint8_t *nd = realloc(data, bytes);
            if (!nd) {
                st = tt_err(TT_ENOMEM, "IVF list of centroid %u: %llu bytes", c0,
                            (unsigned long long)bytes);
                goto done;
            }
            data = nd;
            slice = bytes;
        }
        uint64_t base = 0;
        for (uint32_t c = c0; c < c1; c++) {
            pos[c] = base;
            base += b->ivf_bytes[c];
            b->ivf_last[c] = 0;
            b->stamp[c] = 0;
        }
        uint64_t d = 0;
        for (uint64_t v0 = 0; v0 < in->num_vectors; v0 += cbuf_n) {
            uint64_t n = TT_MIN(cbuf_n, in->num_vectors - v0);
            uint64_t want = n * b->code_bytes, got = 0;
            while (got < want) {
                ssize_t r = pread(fd, codes + got, (size_t)(want - got),
                                  (off_t)(TT_HEADER_SIZE + v0 * b->code_bytes + got));
                if (r < 0 && errno == EINTR)
                    continue;
                if (r <= 0) {
                    st = r < 0 ? tt_err_errno(TT_EIO, errno, "%s: read failed", codes_path)
                               : tt_err(TT_EIO, "%s: unexpected end of file", codes_path);
                    goto done;
                }
                got += (uint64_t)r;
            }
            for (uint64_t i = 0; i < n; i++) {
                while (in->doc_vec0[d + 1] <= v0 + i)
                    d++;
                uint32_t c = b->code_bytes == 2 ? tt_rd16(codes + 2 * i) : tt_rd32(codes + 4 * i);
                if (c < c0 || c >= c1 || b->stamp[c] == d + 1)
                    continue;
                b->stamp[c] = d + 1;
                uint64_t delta = b->ivf_last[c] ? d - (b->ivf_last[c] - 1) : d;
                pos[c] += tt_varint_put(data + pos[c], delta);
                b->ivf_last[c] = d + 1;
            }
            if ((st = tt_build_progress(b, "ivf", done_bytes + (bytes * (v0 + n)) / in->num_vectors,
                                        total_bytes)))
                goto done;
        }
        if ((st = tt_fw_write(&w, data, (size_t)bytes)))
            goto done;
        done_bytes += bytes;
        c0 = c1;
    }
    uint64_t size;
    if ((st = tt_fw_finish(&w, K, entries, total_bytes, &size)) ||
        (st = tt_build_add_manifest(b, &w, name, size)))
        goto done;
done:
    if (fd >= 0)
        close(fd);
    tt_fw_abort(&w);
    free(arr);
    free(data);
    free(pos);
    free(codes);
    free(codes_path);
    b->st.seconds_ivf = tt_now() - t0;
    return st;
}

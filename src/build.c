/* Index build: sample -> k-means -> codec -> streaming encode -> IVF -> publish.
 *
 * The corpus is read twice: once for the training sample (a random subset of
 * documents, as ColBERTv2's CollectionIndexer does) and once, in bounded chunks, to
 * encode every vector. Everything is written into a sibling temporary directory and
 * published with a manifest (written last) and a directory rename, so a failed or
 * killed build never leaves an index that opens at the output path. */
#include "codec.h"
#include "format.h"
#include "index.h"
#include "kmeans.h"
#include "npy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/fs.h>
#include <sys/syscall.h>
#endif

#define MIB (1024.0 * 1024.0)

void tt_build_options_init(tt_build_options *o) {
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->nbits = 2;
    o->memory_bytes = 2ull << 30;
    o->seed = 42;
    o->normalize = 1;
    o->keep_originals = TT_KEEP_NONE;
    o->codec_tables = TT_CODEC_PER_DIM;
    o->assign = TT_ASSIGN_TWO_LEVEL;
    o->sample_factor = 16.0;
    o->min_train_per_centroid = 32;
    o->max_train_per_centroid = 256;
    o->kmeans_iters = 4;
}

typedef struct builder {
    const tt_build_options *o;
    tt_input *in;
    const char *out;
    char *tmp;
    uint32_t dim, K, nbits;
    int threads;
    uint64_t chunk_vectors;     /* vectors per encode chunk */
    float *centroids;
    tt_codec codec;
    tt_assigner *assigner;
    tt_manifest man;
    tt_build_stats st;
    uint64_t code_bytes;
    /* IVF bookkeeping gathered during the encode pass */
    uint32_t *ivf_len;          /* documents per centroid */
    uint64_t *ivf_bytes;        /* varint bytes per centroid */
    uint64_t *ivf_last;         /* last document appended per centroid (+1; 0 = none) */
    uint64_t *stamp;            /* per centroid: last document seen + 1 (dedupe) */
} builder;

static void progress(builder *b, const char *phase, uint64_t done, uint64_t total) {
    if (b->o->progress)
        b->o->progress(b->o->progress_user, phase, done, total);
}

static int add_manifest(builder *b, const tt_fwriter *w, const char *name, uint64_t size) {
    if (b->man.n >= sizeof b->man.e / sizeof b->man.e[0])
        return tt_err(TT_EINVAL, "%s: too many index files", b->tmp);
    tt_manifest_entry *e = &b->man.e[b->man.n++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    memcpy(e->kind, w->h.kind, 4);
    e->size = size;
    e->payload_hash = w->h.payload_hash;
    return TT_OK;
}

/* Writes a whole small file in one go. */
static int write_small(builder *b, const char *name, const char *kind, const void *data,
                       size_t n, uint64_t a, uint64_t bb, uint64_t c) {
    tt_fwriter w;
    uint64_t size;
    int st = tt_fw_open(&w, b->tmp, name, kind);
    if (!st)
        st = tt_fw_write(&w, data, n);
    if (!st)
        st = tt_fw_finish(&w, a, bb, c, &size);
    if (!st)
        st = add_manifest(b, &w, name, size);
    tt_fw_abort(&w);
    return st;
}

/* Names the file and row of global vector v for error messages. */
static void locate_vector(const tt_input *in, uint64_t v, const char **path, uint64_t *row,
                          uint64_t *doc) {
    size_t f = 0;
    while (f + 1 < in->nfiles && in->file_vec0[f + 1] <= v)
        f++;
    *path = in->files[f].path;
    *row = v - in->file_vec0[f];
    uint64_t lo = 0, hi = in->num_docs; /* largest d with doc_vec0[d] <= v */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (in->doc_vec0[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    *doc = lo;
}

/* Normalises (if asked) and validates n vectors that start at global vector v0. */
static int prepare_vectors(builder *b, float *x, uint64_t v0, uint64_t n) {
    const char *path;
    uint64_t row, doc;
    int64_t bad = tt_find_nonfinite(x, n, b->dim);
    if (bad >= 0) {
        locate_vector(b->in, v0 + (uint64_t)bad, &path, &row, &doc);
        return tt_err(TT_EVALUE, "%s: vector %llu (document %llu) contains NaN or Inf", path,
                      (unsigned long long)row, (unsigned long long)doc);
    }
    int64_t zero;
    if (b->o->normalize) {
        zero = tt_normalize_rows(x, n, b->dim);
    } else {
        zero = -1;
        for (uint64_t i = 0; i < n && zero < 0; i++) {
            uint32_t j = 0;
            while (j < b->dim && x[i * b->dim + j] == 0.0f)
                j++;
            if (j == b->dim)
                zero = (int64_t)i;
        }
    }
    if (zero >= 0) {
        locate_vector(b->in, v0 + (uint64_t)zero, &path, &row, &doc);
        return tt_err(TT_EVALUE, "%s: vector %llu (document %llu) is all zeros", path,
                      (unsigned long long)row, (unsigned long long)doc);
    }
    return TT_OK;
}

/* ------------------------------------------------------------- training */

static uint32_t default_centroids(uint64_t n) {
    /* ColBERTv2: 2^floor(log2(16 * sqrt(num_embeddings))). */
    double k = floor(log2(16.0 * sqrt((double)n)));
    if (k < 0)
        k = 0;
    if (k > 24)
        k = 24;
    return (uint32_t)1 << (uint32_t)k;
}

/* Chooses the training documents (Knuth's selection sampling: one ordered pass, O(1)
 * memory, so the sample is read in file order), reads and prepares their vectors,
 * and splits off every 20th sampled document as held-out data for the codec. */
static int train(builder *b) {
    const tt_build_options *o = b->o;
    tt_input *in = b->in;
    uint64_t D = in->num_docs, N = in->num_vectors;
    int st = TT_OK;
    float *x = NULL, *held = NULL;
    uint64_t *docs = NULL;
    double t0 = tt_now();

    b->K = o->num_centroids ? o->num_centroids : default_centroids(N);
    /* Documents: 1 + f*sqrt(120*D) (ColBERTv2), grown until there are at least
     * min_train_per_centroid vectors per centroid (few-vectors-per-doc encoders). */
    double want_docs = 1.0 + o->sample_factor * sqrt(120.0 * (double)D);
    double avg = (double)N / (double)D;
    double want_vecs = TT_MAX(want_docs * avg, (double)o->min_train_per_centroid * b->K * 1.05);
    if (o->max_train_per_centroid && want_vecs > (double)o->max_train_per_centroid * b->K)
        want_vecs = (double)o->max_train_per_centroid * b->K;
    /* Memory: the sample plus k-means work space must fit in half of the budget. */
    double cap_vecs = (double)o->memory_bytes * 0.5 / ((double)b->dim * 4.0 + 64.0);
    if (want_vecs > cap_vecs)
        want_vecs = cap_vecs;
    uint64_t ndocs = (uint64_t)ceil(want_vecs / avg);
    if (ndocs > D)
        ndocs = D;
    if (ndocs < 1)
        ndocs = 1;

    docs = tt_alloc(ndocs, sizeof *docs, "training sample");
    if (!docs)
        return TT_ENOMEM;
    tt_rng rng;
    tt_rng_seed(&rng, o->seed);
    uint64_t chosen = 0, nvec = 0;
    for (uint64_t d = 0; d < D && chosen < ndocs; d++) {
        if ((double)(D - d) * tt_rng_uniform(&rng) < (double)(ndocs - chosen)) {
            docs[chosen++] = d;
            nvec += in->doclens[d];
        }
    }
    ndocs = chosen;
    x = tt_alloc(nvec, (uint64_t)b->dim * sizeof(float), "training sample");
    if (!x) {
        st = TT_ENOMEM;
        goto done;
    }
    /* Read: training docs first, held-out docs (every 20th, if there are >= 20) after. */
    uint64_t ntrain = 0, nheld = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t i = 0; i < ndocs; i++) {
            bool is_held = ndocs >= 20 && i % 20 == 19;
            if (is_held != (pass == 1))
                continue;
            uint64_t d = docs[i], v0 = in->doc_vec0[d], n = in->doclens[d];
            float *dst = x + (ntrain + nheld) * b->dim;
            if ((st = tt_input_read(in, v0, n, dst)) || (st = prepare_vectors(b, dst, v0, n)))
                goto done;
            if (pass == 0)
                ntrain += n;
            else
                nheld += n;
            progress(b, "sample", i + 1 + pass * ndocs, 2 * ndocs);
        }
    }
    if (nheld == 0) { /* tiny corpus: the codec learns from the training vectors */
        held = x;
        nheld = ntrain;
    } else {
        held = x + ntrain * b->dim;
    }
    if (b->K > ntrain) {
        if (o->num_centroids) {
            st = tt_err(TT_EINVAL,
                        "%u centroids requested but only %llu training vectors fit (corpus or "
                        "--memory too small)",
                        b->K, (unsigned long long)ntrain);
            goto done;
        }
        b->K = default_centroids(ntrain) > ntrain ? (uint32_t)ntrain : default_centroids(ntrain);
        while (b->K > ntrain)
            b->K >>= 1;
    }

    b->centroids = tt_alloc((uint64_t)b->K, (uint64_t)b->dim * sizeof(float), "centroids");
    if (!b->centroids) {
        st = TT_ENOMEM;
        goto done;
    }
    tt_kmeans_params kp = {.k = b->K, .dim = b->dim, .iters = o->kmeans_iters, .seed = o->seed,
                           .threads = b->threads, .spherical = o->normalize,
                           .progress = o->progress, .progress_user = o->progress_user};
    if ((st = tt_kmeans_train(x, ntrain, &kp, b->centroids)))
        goto done;
    if ((st = tt_assigner_new(b->centroids, b->K, b->dim, o->assign, o->seed, b->threads,
                              &b->assigner)))
        goto done;

    /* Codec: quantiles of held-out residuals (ColBERTv2 ResidualCodec). */
    uint32_t *ids = tt_alloc(nheld, sizeof *ids, "held-out assignment");
    if (!ids) {
        st = TT_ENOMEM;
        goto done;
    }
    float *res = held == x ? tt_alloc(nheld, (uint64_t)b->dim * sizeof(float), "residuals")
                           : held; /* held-out vectors are not needed after this: in place */
    if (!res || (st = tt_assign(b->assigner, held, nheld, ids, b->threads))) {
        if (!res)
            st = TT_ENOMEM;
        free(ids);
        if (res != held)
            free(res);
        goto done;
    }
    for (uint64_t i = 0; i < nheld; i++) {
        const float *c = b->centroids + (uint64_t)ids[i] * b->dim;
        for (uint32_t j = 0; j < b->dim; j++)
            res[i * b->dim + j] = held[i * b->dim + j] - c[j];
    }
    free(ids);
    progress(b, "codec", 0, 1);
    st = tt_codec_train(&b->codec, res, nheld, b->dim, b->nbits,
                        o->codec_tables == TT_CODEC_PER_DIM);
    if (!st) { /* measured reconstruction error, reported by tt_index_get_info */
        uint8_t *packed = malloc(b->codec.bytes_per_vec);
        float *dec = malloc((size_t)b->dim * sizeof *dec);
        double se = 0;
        if (!packed || !dec) {
            st = tt_err(TT_ENOMEM, "codec: out of memory");
        } else {
            for (uint64_t i = 0; i < nheld; i++) {
                tt_codec_encode(&b->codec, res + i * b->dim, packed);
                tt_codec_decode(&b->codec, packed, dec);
                for (uint32_t j = 0; j < b->dim; j++) {
                    double e = (double)dec[j] - res[i * b->dim + j];
                    se += e * e;
                }
            }
            b->st.heldout_mse = se / ((double)nheld * b->dim);
        }
        free(packed);
        free(dec);
    }
    if (res != held)
        free(res);
    progress(b, "codec", 1, 1);
    b->st.train_vectors = ntrain;
    b->st.heldout_vectors = nheld;
    b->st.num_centroids = b->K;
done:
    free(docs);
    free(x);
    b->st.seconds_train = tt_now() - t0;
    return st;
}

/* --------------------------------------------------------------- encode */

typedef struct encode_job {
    builder *b;
    const float *x;
    const uint32_t *ids;
    uint8_t *packed;
    uint16_t *orig;
    float *scratch; /* dim floats per thread */
    uint64_t n;
} encode_job;

static void encode_worker(void *arg, int t, int nt) {
    encode_job *j = arg;
    builder *b = j->b;
    uint32_t dim = b->dim;
    float *r = j->scratch + (uint64_t)t * dim;
    uint64_t lo = j->n * (uint64_t)t / (uint64_t)nt, hi = j->n * (uint64_t)(t + 1) / (uint64_t)nt;
    for (uint64_t i = lo; i < hi; i++) {
        const float *v = j->x + i * dim, *c = b->centroids + (uint64_t)j->ids[i] * dim;
        for (uint32_t d = 0; d < dim; d++)
            r[d] = v[d] - c[d];
        tt_codec_encode(&b->codec, r, j->packed + i * b->codec.bytes_per_vec);
        if (j->orig)
            for (uint32_t d = 0; d < dim; d++)
                j->orig[i * dim + d] = tt_f32_to_f16(v[d]);
    }
}

/* Updates the IVF bookkeeping with the codes of vectors [v0, v0+n). A document's
 * centroids are deduplicated with a per-centroid stamp (last document + 1). */
static void ivf_count(builder *b, const uint32_t *ids, uint64_t v0, uint64_t n) {
    const tt_input *in = b->in;
    uint64_t lo = 0, hi = in->num_docs; /* document containing v0 */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (in->doc_vec0[mid] <= v0)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t d = lo;
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

static int encode_all(builder *b, uint64_t *codes_size) {
    tt_input *in = b->in;
    const tt_build_options *o = b->o;
    uint64_t N = in->num_vectors, chunk = b->chunk_vectors;
    uint32_t dim = b->dim, bpv = b->codec.bytes_per_vec;
    tt_fwriter wc = {.fd = -1}, wr = {.fd = -1}, wo = {.fd = -1};
    float *x = NULL;
    uint32_t *ids = NULL;
    uint8_t *packed = NULL, *codes = NULL;
    uint16_t *orig = NULL;
    float *scratch = NULL;
    int st;
    double t0 = tt_now();

    scratch = tt_alloc((uint64_t)b->threads, (uint64_t)dim * sizeof(float), "encode buffer");
    x = tt_alloc(chunk, (uint64_t)dim * sizeof(float), "encode buffer");
    ids = tt_alloc(chunk, sizeof *ids, "encode buffer");
    packed = tt_alloc(chunk, bpv, "encode buffer");
    codes = tt_alloc(chunk, b->code_bytes, "encode buffer");
    if (o->keep_originals == TT_KEEP_F16)
        orig = tt_alloc(chunk, (uint64_t)dim * 2, "encode buffer");
    if (!scratch || !x || !ids || !packed || !codes || (o->keep_originals == TT_KEEP_F16 && !orig)) {
        st = TT_ENOMEM;
        goto done;
    }
    if ((st = tt_fw_open(&wc, b->tmp, TT_F_CODES, "CODE")) ||
        (st = tt_fw_open(&wr, b->tmp, TT_F_RESIDUALS, "RESI")))
        goto done;
    if (orig && (st = tt_fw_open(&wo, b->tmp, TT_F_ORIGINALS, "ORIG")))
        goto done;

    for (uint64_t v0 = 0; v0 < N; v0 += chunk) {
        uint64_t n = TT_MIN(chunk, N - v0);
        if ((st = tt_input_read(in, v0, n, x)) || (st = prepare_vectors(b, x, v0, n)) ||
            (st = tt_assign(b->assigner, x, n, ids, b->threads)))
            goto done;
        encode_job job = {b, x, ids, packed, orig, scratch, n};
        tt_parallel(b->threads, encode_worker, &job);
        for (uint64_t i = 0; i < n; i++) {
            if (b->code_bytes == 2)
                tt_wr16(codes + 2 * i, (uint16_t)ids[i]);
            else
                tt_wr32(codes + 4 * i, ids[i]);
        }
        if (orig)
            for (uint64_t i = 0; i < n * dim; i++)
                tt_wr16(&orig[i], orig[i]); /* little-endian on disk */
        ivf_count(b, ids, v0, n);
        if ((st = tt_fw_write(&wc, codes, (size_t)(n * b->code_bytes))) ||
            (st = tt_fw_write(&wr, packed, (size_t)(n * bpv))))
            goto done;
        if (orig && (st = tt_fw_write(&wo, orig, (size_t)(n * dim * 2))))
            goto done;
        progress(b, "encode", v0 + n, N);
    }
    if ((st = tt_fw_finish(&wc, N, b->code_bytes, 0, codes_size)) ||
        (st = add_manifest(b, &wc, TT_F_CODES, *codes_size)))
        goto done;
    uint64_t size;
    if ((st = tt_fw_finish(&wr, N, bpv, 0, &size)) ||
        (st = add_manifest(b, &wr, TT_F_RESIDUALS, size)))
        goto done;
    if (orig && ((st = tt_fw_finish(&wo, N, dim, 1, &size)) ||
                 (st = add_manifest(b, &wo, TT_F_ORIGINALS, size))))
        goto done;
done:
    tt_fw_abort(&wc);
    tt_fw_abort(&wr);
    tt_fw_abort(&wo);
    free(x);
    free(ids);
    free(packed);
    free(codes);
    free(orig);
    free(scratch);
    b->st.seconds_encode = tt_now() - t0;
    return st;
}

/* ------------------------------------------------------------------ IVF */

/* Writes ivf.tt: u64 off[K+1] (byte offsets into the data), u32 len[K], then the
 * delta-varint document lists. The lists are filled from the codes file in as many
 * passes over it as needed to keep each pass's slice of the data within budget. */
static int write_ivf(builder *b) {
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
    if ((st = tt_fw_open(&w, b->tmp, TT_F_IVF, "IVF_")))
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
    codes_path = tt_path_join(b->tmp, TT_F_CODES);
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
            progress(b, "ivf", done_bytes + (bytes * (v0 + n)) / in->num_vectors, total_bytes);
        }
        if ((st = tt_fw_write(&w, data, (size_t)bytes)))
            goto done;
        done_bytes += bytes;
        c0 = c1;
    }
    uint64_t size;
    if ((st = tt_fw_finish(&w, K, entries, total_bytes, &size)) ||
        (st = add_manifest(b, &w, TT_F_IVF, size)))
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

/* ------------------------------------------------------------ small files */

static int write_meta(builder *b, double seconds) {
    const tt_build_options *o = b->o;
    char enc[256] = "";
    if (o->encoder) { /* one line: control characters become spaces */
        snprintf(enc, sizeof enc, "%s", o->encoder);
        for (char *p = enc; *p; p++)
            if ((unsigned char)*p < 0x20)
                *p = ' ';
    }
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    char text[2048];
    int n = snprintf(text, sizeof text,
                     "tartan_version=%s\ncreated=%s\ndim=%u\nnbits=%u\nnum_docs=%llu\n"
                     "num_vectors=%llu\nnum_centroids=%u\nnormalized=%d\ncodec_tables=%d\n"
                     "keep_originals=%d\nhas_ids=%d\nseed=%llu\nsample_factor=%.6g\n"
                     "train_vectors=%llu\nheldout_vectors=%llu\nkmeans_iters=%d\nthreads=%d\n"
                     "assign=%d\nbuild_seconds=%.3f\nheldout_mse=%.9g\nencoder=%s\n",
                     TT_VERSION_STRING, created, b->dim, b->nbits,
                     (unsigned long long)b->in->num_docs, (unsigned long long)b->in->num_vectors,
                     b->K, o->normalize ? 1 : 0, o->codec_tables, o->keep_originals,
                     b->in->ids_blob ? 1 : 0, (unsigned long long)o->seed, o->sample_factor,
                     (unsigned long long)b->st.train_vectors,
                     (unsigned long long)b->st.heldout_vectors, o->kmeans_iters, b->threads,
                     o->assign, seconds, b->st.heldout_mse, enc);
    if (n < 0 || (size_t)n >= sizeof text)
        return tt_err(TT_EINVAL, "index metadata too long");
    return write_small(b, TT_F_META, "META", text, (size_t)n, 0, 0, 0);
}

static int write_tables(builder *b) {
    uint32_t dim = b->dim, K = b->K;
    int st;
    /* centroids: K x dim float32 */
    uint8_t *buf = tt_alloc((uint64_t)K * dim, 4, "centroids");
    if (!buf)
        return TT_ENOMEM;
    for (uint64_t i = 0; i < (uint64_t)K * dim; i++)
        tt_wrf32(buf + 4 * i, b->centroids[i]);
    st = write_small(b, TT_F_CENTROIDS, "CENT", buf, (size_t)K * dim * 4, K, dim, 0);
    free(buf);
    if (st)
        return st;
    /* codec: cutoffs then weights, float32 */
    const tt_codec *c = &b->codec;
    uint64_t nc = (uint64_t)c->ntables * (c->nbuckets - 1), nw = (uint64_t)c->ntables * c->nbuckets;
    buf = tt_alloc(nc + nw, 4, "codec");
    if (!buf)
        return TT_ENOMEM;
    for (uint64_t i = 0; i < nc; i++)
        tt_wrf32(buf + 4 * i, c->cutoffs[i]);
    for (uint64_t i = 0; i < nw; i++)
        tt_wrf32(buf + 4 * (nc + i), c->weights[i]);
    st = write_small(b, TT_F_CODEC, "CODC", buf, (size_t)(nc + nw) * 4, c->nbits, dim, c->ntables);
    free(buf);
    if (st)
        return st;
    /* doclens: u32 per document */
    const tt_input *in = b->in;
    buf = tt_alloc(in->num_docs, 4, "doclens");
    if (!buf)
        return TT_ENOMEM;
    for (uint64_t d = 0; d < in->num_docs; d++)
        tt_wr32(buf + 4 * d, in->doclens[d]);
    st = write_small(b, TT_F_DOCLENS, "DOCL", buf, (size_t)in->num_docs * 4, in->num_docs, 0, 0);
    free(buf);
    if (st || !in->ids_blob)
        return st;
    /* ids: u64 off[num_docs+1] into the blob of ids (no separators) */
    tt_fwriter w;
    uint64_t size, blob = 0;
    if ((st = tt_fw_open(&w, b->tmp, TT_F_IDS, "IDS_")))
        return st;
    uint8_t tmp[8];
    for (uint64_t d = 0; d <= in->num_docs && !st; d++) {
        tt_wr64(tmp, blob);
        st = tt_fw_write(&w, tmp, 8);
        if (d < in->num_docs)
            blob += in->id_off[d + 1] - in->id_off[d] - 1; /* without the newline */
    }
    for (uint64_t d = 0; d < in->num_docs && !st; d++)
        st = tt_fw_write(&w, in->ids_blob + in->id_off[d],
                         (size_t)(in->id_off[d + 1] - in->id_off[d] - 1));
    if (!st)
        st = tt_fw_finish(&w, in->num_docs, blob, 0, &size);
    if (!st)
        st = add_manifest(b, &w, TT_F_IDS, size);
    tt_fw_abort(&w);
    return st;
}

/* ------------------------------------------------------------ publishing */

static bool is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static char *parent_dir(const char *path) {
    char *p = strdup(path);
    if (!p)
        return NULL;
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    char *slash = strrchr(p, '/');
    if (!slash) {
        strcpy(p, ".");
    } else if (slash == p) {
        p[1] = '\0';
    } else {
        *slash = '\0';
    }
    return p;
}

/* Moves the finished temporary directory into place. With an index already at out,
 * the two directories are exchanged atomically (renameat2 RENAME_EXCHANGE) and the
 * old one removed, so at every instant `out` holds a complete index. */
static int publish(builder *b) {
    int st;
    char *parent = parent_dir(b->out);
    if (!parent)
        return tt_err(TT_ENOMEM, "%s: out of memory", b->out);
    if (!is_dir(b->out)) {
        if (rename(b->tmp, b->out) != 0) {
            st = tt_err_errno(TT_EIO, errno, "%s: cannot publish the index", b->out);
            goto done;
        }
    } else {
        bool swapped = false;
#if defined(__linux__) && defined(SYS_renameat2) && defined(RENAME_EXCHANGE)
        swapped = syscall(SYS_renameat2, AT_FDCWD, b->tmp, AT_FDCWD, b->out, RENAME_EXCHANGE) == 0;
#endif
        if (!swapped) { /* two renames: a crash between them leaves no index, never a mix */
            size_t n = strlen(b->tmp) + 8;
            char *old = malloc(n);
            if (!old) {
                st = tt_err(TT_ENOMEM, "%s: out of memory", b->out);
                goto done;
            }
            snprintf(old, n, "%s.old", b->tmp);
            if (rename(b->out, old) != 0) {
                st = tt_err_errno(TT_EIO, errno, "%s: cannot move the old index aside", b->out);
                free(old);
                goto done;
            }
            if (rename(b->tmp, b->out) != 0) {
                st = tt_err_errno(TT_EIO, errno, "%s: cannot publish the index", b->out);
                if (rename(old, b->out) != 0) { /* put the old index back */
                }
                free(old);
                goto done;
            }
            tt_remove_dir(old);
            free(old);
        } else {
            tt_remove_dir(b->tmp); /* now holds the previous index */
        }
    }
    free(b->tmp);
    b->tmp = NULL; /* nothing left to clean up */
    st = tt_fsync_dir(parent);
done:
    free(parent);
    return st;
}

/* An existing directory may be replaced only if it is a tartan index (has a
 * MANIFEST) or empty: --force must never delete unrelated data. */
static int check_replaceable(const char *out) {
    char *m = tt_path_join(out, TT_F_MANIFEST);
    if (!m)
        return TT_ENOMEM;
    struct stat sb;
    int st = TT_OK;
    if (stat(m, &sb) != 0 && rmdir(out) != 0 && errno != ENOENT)
        st = tt_err(TT_EEXIST, "%s: exists and is not a tartan index; refusing to replace it",
                    out);
    free(m);
    return st;
}

/* A build killed by SIGKILL cannot remove its directory OUT.tmp-PID-RANDOM. The next
 * build into OUT removes those whose process no longer exists (kill(pid, 0) fails with
 * ESRCH); a live pid, or one this process may not signal, is left alone, so builds
 * running beside this one keep theirs. Best effort: a directory that cannot be removed
 * stays (and the error is not this build's). Caveat: pids are per host and per pid
 * namespace, so builds into one shared directory from several hosts or containers must
 * not race. */
static void remove_stale_builds(const char *out_dir, size_t n) {
    char *copy = strndup(out_dir, n);
    if (!copy)
        return;
    char *slash = strrchr(copy, '/');
    const char *parent = ".", *base = copy;
    if (slash) {
        base = slash + 1;
        *slash = 0;
        parent = slash == copy ? "/" : copy;
    }
    DIR *d = opendir(parent);
    if (!d) {
        free(copy);
        return;
    }
    const size_t bl = strlen(base);
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *nm = de->d_name;
        if (strncmp(nm, base, bl) != 0 || strncmp(nm + bl, ".tmp-", 5) != 0)
            continue;
        const char *num = nm + bl + 5;
        char *end;
        errno = 0;
        long pid = strtol(num, &end, 10);
        if (end == num || *end != '-' || errno || pid <= 0 || pid == (long)getpid() ||
            strlen(end + 1) != 6 || strspn(end + 1, "0123456789abcdef") != 6)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char *p = tt_path_join(parent, nm);
        if (p)
            (void)tt_remove_dir(p);
        free(p);
    }
    closedir(d);
    free(copy);
}

int tt_build(const char *out_dir, tt_input *in, const tt_build_options *o,
             tt_build_stats *stats) {
    builder b;
    memset(&b, 0, sizeof b);
    tt_build_options defaults;
    int st;
    double t0 = tt_now();
    uint64_t codes_size = 0;

    tt_err_clear();
    if (!o) {
        tt_build_options_init(&defaults);
        o = &defaults;
    }
    if (!out_dir || !*out_dir || !in)
        return tt_err(TT_EINVAL, "tt_build: output directory and input are required");
    if (o->nbits != 1 && o->nbits != 2 && o->nbits != 4)
        return tt_err(TT_EINVAL, "nbits must be 1, 2 or 4 (got %d)", o->nbits);
    if (o->codec_tables != TT_CODEC_SHARED && o->codec_tables != TT_CODEC_PER_DIM)
        return tt_err(TT_EINVAL, "unknown codec table choice %d", o->codec_tables);
    if (o->keep_originals != TT_KEEP_NONE && o->keep_originals != TT_KEEP_F16)
        return tt_err(TT_EINVAL, "unknown keep-originals choice %d", o->keep_originals);
    if (o->kmeans_iters < 1 || o->kmeans_iters > 1000)
        return tt_err(TT_EINVAL, "k-means iterations must be 1..1000 (got %d)", o->kmeans_iters);
    if (o->max_train_per_centroid && o->max_train_per_centroid < o->min_train_per_centroid)
        return tt_err(TT_EINVAL, "max training vectors per centroid (%u) is below the minimum (%u)",
                      o->max_train_per_centroid, o->min_train_per_centroid);
    if (!(o->sample_factor > 0) || o->memory_bytes < (64ull << 20))
        return tt_err(TT_EINVAL, "sample factor must be > 0 and the memory budget >= 64 MiB");
    if (o->num_centroids > (1u << 24))
        return tt_err(TT_EINVAL, "at most 2^24 centroids (got %u)", o->num_centroids);
    if (o->threads < 0)
        return tt_err(TT_EINVAL, "threads must be >= 0");
    if (is_dir(out_dir)) {
        if (!o->force)
            return tt_err(TT_EEXIST, "%s: already exists (use --force to replace it)", out_dir);
        if ((st = check_replaceable(out_dir)))
            return st;
    }

    b.o = o;
    b.in = in;
    b.out = out_dir;
    b.dim = in->dim;
    b.nbits = (uint32_t)o->nbits;
    b.threads = o->threads ? o->threads : tt_default_threads();
    /* Encode chunk: the buffers of one chunk use at most a quarter of the budget. */
    uint64_t per_vec = (uint64_t)b.dim * (4 + (o->keep_originals ? 2 : 0)) + 64;
    b.chunk_vectors = TT_MAX((uint64_t)1024, TT_MIN((uint64_t)1 << 18, o->memory_bytes / 4 / per_vec));

    size_t tl = strlen(out_dir) + 48;
    b.tmp = malloc(tl);
    if (!b.tmp)
        return tt_err(TT_ENOMEM, "%s: out of memory", out_dir);
    {
        size_t n = strlen(out_dir); /* OUT without trailing slashes */
        while (n > 1 && out_dir[n - 1] == '/')
            n--;
        tt_rng r;
        tt_rng_seed(&r, (uint64_t)getpid() ^ (uint64_t)(tt_now() * 1e9));
        snprintf(b.tmp, tl, "%.*s.tmp-%d-%06llx", (int)n, out_dir, (int)getpid(),
                 (unsigned long long)(tt_rng_next(&r) & 0xffffff));
        remove_stale_builds(out_dir, n);
    }
    if (mkdir(b.tmp, 0755) != 0) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot create the build directory", b.tmp);
        free(b.tmp);
        return st;
    }

    if ((st = train(&b)))
        goto fail;
    b.code_bytes = b.K <= 65536 ? 2 : 4;
    b.ivf_len = tt_calloc(b.K, sizeof *b.ivf_len, "IVF counts");
    b.ivf_bytes = tt_calloc(b.K, sizeof *b.ivf_bytes, "IVF counts");
    b.ivf_last = tt_calloc(b.K, sizeof *b.ivf_last, "IVF counts");
    b.stamp = tt_calloc(b.K, sizeof *b.stamp, "IVF counts");
    if (!b.ivf_len || !b.ivf_bytes || !b.ivf_last || !b.stamp) {
        st = TT_ENOMEM;
        goto fail;
    }
    if ((st = encode_all(&b, &codes_size)) || (st = write_ivf(&b)) || (st = write_tables(&b)))
        goto fail;
    b.st.seconds_total = tt_now() - t0;
    if ((st = write_meta(&b, b.st.seconds_total)))
        goto fail;
    progress(&b, "publish", 0, 1);
    if ((st = tt_manifest_publish(b.tmp, &b.man)) || (st = tt_fsync_dir(b.tmp)))
        goto fail;
    for (uint32_t i = 0; i < b.man.n; i++)
        b.st.index_bytes += b.man.e[i].name[0] && strcmp(b.man.e[i].name, TT_F_ORIGINALS)
                                ? b.man.e[i].size
                                : 0;
    if ((st = publish(&b)))
        goto fail;
    progress(&b, "publish", 1, 1);
    b.st.seconds_total = tt_now() - t0;
    if (stats)
        *stats = b.st;
    st = TT_OK;
    goto done;
fail:
    if (b.tmp) {
        int saved = st;
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tt_last_error());
        tt_remove_dir(b.tmp);
        tt_err(saved, "%s", msg); /* keep the original message */
    }
done:
    tt_assigner_free(b.assigner);
    tt_codec_free(&b.codec);
    free(b.centroids);
    free(b.ivf_len);
    free(b.ivf_bytes);
    free(b.ivf_last);
    free(b.stamp);
    free(b.tmp);
    return st;
}

/* Index build: sample -> k-means -> codec -> streaming encode -> IVF -> publish.
 *
 * The corpus is read twice: once for the training sample (a random subset of
 * documents, as ColBERTv2's CollectionIndexer does) and once, in bounded chunks, to
 * encode every vector. Everything is written into a sibling temporary directory and
 * published with a manifest (written last) and a directory rename, so a failed or
 * killed build never leaves an index that opens at the output path. */
#include "index/build.h"
#include "index/shards.h"
#include "io/dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <math.h>
#include <stddef.h>
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
    o->codec_tables = TT_CODEC_ADAPTIVE;
    o->assign = TT_ASSIGN_TWO_LEVEL;
    o->sample_factor = 16.0;
    o->min_train_per_centroid = 32;
    o->max_train_per_centroid = 256;
    o->kmeans_iters = 4;
    o->lloyd_max_rounds = 100;
    o->pool_factor = 1;
    o->debias = TT_DEBIAS_AUTO;
}

int tt_build_cancelled(const builder *b) {
    if (b->o->cancel && *b->o->cancel)
        return tt_err(TT_ECANCELED, "%s: build cancelled", b->op.path);
    return TT_OK;
}

int tt_build_progress(builder *b, const char *phase, uint64_t done, uint64_t total) {
    if (b->o->progress)
        b->o->progress(b->o->progress_user, phase, done, total);
    return tt_build_cancelled(b);
}

int tt_build_add_manifest(builder *b, const tt_fwriter *w, const char *name, uint64_t size) {
    tt_manifest_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", name);
    memcpy(e.kind, w->h.kind, 4);
    e.size = size;
    e.payload_hash = w->h.payload_hash;
    return tt_manifest_add(&b->man, &e);
}

const char *tt_build_name(const builder *b, const char *file, char *buf) {
    snprintf(buf, TT_MANIFEST_NAME_LEN, "%s%s", b->prefix, file);
    return buf;
}

int tt_build_write_small(builder *b, const char *file, const char *kind, const void *data,
                         size_t n, uint64_t a, uint64_t bb, uint64_t c) {
    tt_fwriter w;
    uint64_t size;
    char name[TT_MANIFEST_NAME_LEN];
    tt_build_name(b, file, name);
    int st = tt_fw_open(&w, b->wdir, name, kind);
    if (!st)
        st = tt_fw_write(&w, data, n);
    if (!st)
        st = tt_fw_finish(&w, a, bb, c, &size);
    if (!st)
        st = tt_build_add_manifest(b, &w, name, size);
    tt_fw_abort(&w);
    return st;
}

/* Normalises (if asked) and validates n vectors of `in` that start at its vector v0. */
int tt_prepare_vectors(const tt_input *in, uint32_t dim, int normalize, int f16_range, float *x,
                       uint64_t v0, uint64_t n) {
    const char *path;
    uint64_t row, doc;
    int64_t bad = tt_find_nonfinite(x, n, dim);
    if (bad >= 0) {
        tt_input_locate(in, v0 + (uint64_t)bad, &path, &row, &doc);
        return tt_err(TT_EVALUE, "%s: vector %llu (document %llu) contains NaN or Inf", path,
                      (unsigned long long)row, (unsigned long long)doc);
    }
    int64_t zero;
    if (normalize) {
        zero = tt_normalize_rows(x, n, dim);
    } else {
        zero = -1;
        for (uint64_t i = 0; i < n && zero < 0; i++) {
            uint32_t j = 0;
            while (j < dim && x[i * dim + j] == 0.0f)
                j++;
            if (j == dim)
                zero = (int64_t)i;
        }
    }
    if (zero >= 0) {
        tt_input_locate(in, v0 + (uint64_t)zero, &path, &row, &doc);
        return tt_err(TT_EVALUE, "%s: vector %llu (document %llu) is all zeros", path,
                      (unsigned long long)row, (unsigned long long)doc);
    }
    /* Kept originals are float16: a value it cannot hold would be stored as infinity
     * (and every exact score would be NaN). 65520 and above round to infinity. */
    if (f16_range) {
        for (uint64_t i = 0; i < n * dim; i++) {
            if (fabsf(x[i]) >= 65520.0f) {
                tt_input_locate(in, v0 + i / dim, &path, &row, &doc);
                return tt_err(TT_EVALUE, "%s: vector %llu (document %llu) has the value %g, "
                              "beyond float16's range (65504): --keep-originals f16 cannot "
                              "store it (scale the vectors, or build without originals)", path,
                              (unsigned long long)row, (unsigned long long)doc, (double)x[i]);
            }
        }
    }
    return TT_OK;
}

int tt_build_prepare_vectors(builder *b, float *x, uint64_t v0, uint64_t n) {
    return tt_prepare_vectors(b->in, b->dim, b->o->normalize,
                              b->o->keep_originals == TT_KEEP_F16, x, v0, n);
}

/* ------------------------------------------------------------ small files */

int tt_build_write_meta(builder *b, double seconds) {
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
                     "assign=%d\nbuild_seconds=%.3f\nheldout_mse=%.9g\nlloyd_max_rounds=%d\n"
                     "encoder=%s\npool_factor=%d\ninput_vectors=%llu\ndebias=%d\n",
                     TT_VERSION_STRING, created, b->dim, b->nbits,
                     (unsigned long long)b->in->num_docs, (unsigned long long)b->in->num_vectors,
                     b->K, o->normalize ? 1 : 0, o->codec_tables, o->keep_originals,
                     b->in->ids_blob ? 1 : 0, (unsigned long long)o->seed, o->sample_factor,
                     (unsigned long long)b->st.train_vectors,
                     (unsigned long long)b->st.heldout_vectors, o->kmeans_iters, b->threads,
                     o->assign, seconds, b->st.heldout_mse, o->lloyd_max_rounds, enc,
                     TT_MAX(o->pool_factor, 1),
                     (unsigned long long)(b->in->input_lens ? b->in->input_vectors
                                                            : b->in->num_vectors),
                     b->debias);
    if (n >= 0 && (size_t)n < sizeof text && b->pool_global > 0)
        n += snprintf(text + n, sizeof text - (size_t)n, "pool_global=%.17g\npool_threshold=%.17g\n",
                      b->pool_global, b->pool_threshold);
    if (n < 0 || (size_t)n >= sizeof text)
        return tt_err(TT_EINVAL, "index metadata too long");
    return tt_build_write_small(b, TT_F_META, "META", text, (size_t)n, 0, 0, 0);
}

int tt_build_pool(builder *b, tt_input *in, tt_pooled **pool) {
    const tt_build_options *o = b->o;
    if (o->pool_factor <= 1 && !(o->pool_global > 0))
        return TT_OK; /* no pooling: *pool stays NULL */
    const tt_pool_spec spec = {.factor = o->pool_global > 0 ? 0 : (uint32_t)o->pool_factor,
                               .global = o->pool_global, .threshold = -1,
                               .normalize = o->normalize, .threads = b->threads,
                               .memory_bytes = o->memory_bytes, .cancel = o->cancel,
                               .progress = o->progress, .progress_user = o->progress_user};
    int st = tt_pooled_open(pool, in, &spec);
    if (!st && o->pool_global > 0) {
        b->pool_global = o->pool_global;
        b->pool_threshold = tt_pooled_threshold(*pool);
    }
    return st;
}

int tt_build_write_codebook(builder *b) {
    uint32_t dim = b->dim, K = b->K;
    int st;
    const tt_codec *c = &b->codec;
    /* centroids: K x dim float32, in the codec's position order */
    uint8_t *buf = tt_alloc((uint64_t)K * dim, 4, "centroids");
    float *row = tt_alloc(dim, sizeof *row, "centroids");
    if (!buf || !row) {
        free(buf);
        free(row);
        return TT_ENOMEM;
    }
    for (uint64_t k = 0; k < K; k++) {
        tt_codec_to_positions(c, b->centroids + k * dim, row);
        for (uint32_t j = 0; j < dim; j++)
            tt_wrf32(buf + 4 * (k * dim + j), row[j]);
    }
    free(row);
    st = tt_build_write_small(b, TT_F_CENTROIDS, "CENT", buf, (size_t)K * dim * 4, K, dim, 0);
    free(buf);
    if (st)
        return st;
    /* codec: shared and per-dim: cutoffs then weights, float32 (c = tables, 1 or dim);
     * adaptive (c = 0): the widths (u8, padded to 4 bytes), the permutation (u32), then
     * cutoffs and weights. */
    const uint64_t nc = c->ncutoffs, nw = c->nweights;
    const uint64_t head = c->kind == TT_CODEC_ADAPTIVE ? (dim + 3) / 4 * 4 + 4ull * dim : 0;
    buf = tt_calloc(head + 4 * (nc + nw), 1, "codec");
    if (!buf)
        return TT_ENOMEM;
    if (c->kind == TT_CODEC_ADAPTIVE)
        for (uint32_t k = 0; k < dim; k++) {
            buf[k] = c->bits[k];
            tt_wr32(buf + (dim + 3) / 4 * 4 + 4ull * k, c->perm ? c->perm[k] : k);
        }
    for (uint64_t i = 0; i < nc; i++)
        tt_wrf32(buf + head + 4 * i, c->cutoffs[i]);
    for (uint64_t i = 0; i < nw; i++)
        tt_wrf32(buf + head + 4 * (nc + i), c->weights[i]);
    st = tt_build_write_small(b, TT_F_CODEC, "CODC", buf, (size_t)(head + 4 * (nc + nw)),
                              c->nbits, dim, c->kind == TT_CODEC_ADAPTIVE ? 0 : c->ntables);
    free(buf);
    return st;
}

void tt_build_free(builder *b) {
    tt_assigner_free(b->assigner);
    tt_codec_free(&b->codec);
    free(b->centroids);
    free(b->ivf_len);
    free(b->ivf_bytes);
    free(b->ivf_last);
    free(b->stamp);
    tt_manifest_free(&b->man);
    b->assigner = NULL;
    b->centroids = NULL;
    b->ivf_len = NULL;
    b->ivf_bytes = NULL;
    b->ivf_last = b->stamp = NULL;
}

int tt_build(const char *out_dir, tt_input *in, const tt_build_options *o,
             tt_build_stats *stats) {
    builder b;
    memset(&b, 0, sizeof b);
    b.op.pfd = -1;
    b.lock.fd = -1;
    b.tmp_fd = -1;
    tt_build_options defaults;
    tt_pooled *pool = NULL;
    tt_mdb mdb;
    bool mdb_open = false;
    int st;
    double t0 = tt_now();

    tt_err_clear();
    /* Callers built against an older tartan.h pass a shorter struct: the fields they do
     * not know keep their defaults. */
    tt_build_options_init(&defaults);
    if (o) {
        if (o->struct_size < offsetof(tt_build_options, progress_user) + sizeof(void *) ||
            o->struct_size > sizeof *o)
            return tt_err(TT_EINVAL, "build options: struct_size %u is not a size this "
                          "library knows (initialise them with tt_build_options_init)",
                          o->struct_size);
        memcpy(&defaults, o, o->struct_size);
        defaults.struct_size = sizeof defaults;
    }
    o = &defaults;
    if (!out_dir || !*out_dir || !in)
        return tt_err(TT_EINVAL, "tt_build: output directory and input are required");
    if (o->nbits < 1 || o->nbits > 4)
        return tt_err(TT_EINVAL, "nbits must be 1, 2, 3 or 4 (got %d)", o->nbits);
    if (o->codec_tables != TT_CODEC_SHARED && o->codec_tables != TT_CODEC_PER_DIM &&
        o->codec_tables != TT_CODEC_ADAPTIVE)
        return tt_err(TT_EINVAL, "unknown codec %d", o->codec_tables);
    if (!tt_codec_nbits_ok(o->codec_tables, (uint32_t)o->nbits))
        return tt_err(TT_EINVAL, "nbits 3 needs the adaptive codec (per-dimension and shared "
                      "tables give every dimension the same width: 1, 2 or 4 bits)");
    if (o->lloyd_max_rounds < 0 || o->lloyd_max_rounds > 1000)
        return tt_err(TT_EINVAL, "Lloyd-Max rounds must be 0..1000 (got %d)", o->lloyd_max_rounds);
    if (o->keep_originals != TT_KEEP_NONE && o->keep_originals != TT_KEEP_F16)
        return tt_err(TT_EINVAL, "unknown keep-originals choice %d", o->keep_originals);
    if (o->kmeans_iters < 1 || o->kmeans_iters > 1000)
        return tt_err(TT_EINVAL, "k-means iterations must be 1..1000 (got %d)", o->kmeans_iters);
    if (o->max_train_per_centroid && o->max_train_per_centroid < o->min_train_per_centroid)
        return tt_err(TT_EINVAL, "max training vectors per centroid (%u) is below the minimum (%u)",
                      o->max_train_per_centroid, o->min_train_per_centroid);
    if (!(o->sample_factor > 0))
        return tt_err(TT_EINVAL, "the sample factor must be > 0 (got %g)", o->sample_factor);
    if (o->memory_bytes < (64ull << 20))
        return tt_err(TT_EINVAL, "the memory budget must be at least 64 MiB (got %llu bytes)",
                      (unsigned long long)o->memory_bytes);
    if (o->num_centroids > (1u << 24))
        return tt_err(TT_EINVAL, "at most 2^24 centroids (got %u)", o->num_centroids);
    if (o->threads < 0)
        return tt_err(TT_EINVAL, "threads must be >= 0");
    if (o->pool_factor < 0)
        return tt_err(TT_EINVAL, "the pool factor must be >= 1 (got %d)", o->pool_factor);
    if (o->pool_factor == 0)
        defaults.pool_factor = 1;
    if (o->pool_global != 0) { /* (an older caller's: the default 0, copied above) */
        if (!(o->pool_global > 1 && o->pool_global <= 1e6))
            return tt_err(TT_EINVAL, "the global pool factor must be in (1, 1e6] (got %g)",
                          o->pool_global);
        if (o->pool_factor > 1)
            return tt_err(TT_EINVAL, "pool by a factor (%d) or by one cut (%g), not both",
                          o->pool_factor, o->pool_global);
    }
    if (o->debias < TT_DEBIAS_AUTO || o->debias > TT_DEBIAS_VECTOR)
        return tt_err(TT_EINVAL, "debias must be -1 (auto), 0 (none), 1 (per table) or 2 (per "
                                 "vector), not %d", o->debias);
    if (o->debias == TT_DEBIAS_VECTOR && o->codec_tables != TT_CODEC_ADAPTIVE)
        return tt_err(TT_EINVAL, "a per-vector residual scale (debias 2) needs the adaptive "
                                 "codec");
    if (o->shards > TT_MAX_SHARDS)
        return tt_err(TT_EINVAL, "at most %u shards (got %u)", TT_MAX_SHARDS, o->shards);

    if (o->sparse && o->group)
        return tt_err(TT_EUNSUPPORTED, "%s: sparse postings (BM25 or sparse weights) are not "
                      "supported in a group (MPI) build yet; build it in one process "
                      "(--shards works)", out_dir);
    if (o->sparse && (st = tt_build_check_sparse(o->sparse, in, true)))
        return st;
    /* A codebook taken from another index fixes what training would choose. */
    tt_index *cb = NULL;
    if (o->codebook) {
        tt_open_options oo;
        tt_open_options_init(&oo);
        oo.io = TT_IO_MMAP;
        if ((st = tt_index_open(&cb, o->codebook, &oo)))
            return tt_err_prefix(st, "codebook");
        if (cb->dim != in->dim) {
            st = tt_err(TT_EDIM, "%s: the codebook index has dimension %u, the input %u",
                        o->codebook, cb->dim, in->dim);
            tt_index_close(cb);
            return st;
        }
        defaults.nbits = (int)cb->nbits;
        defaults.codec_tables = cb->codec.kind;
        defaults.lloyd_max_rounds = (int)cb->info.lloyd_max_rounds;
        defaults.debias = cb->info.debias;
        defaults.normalize = cb->normalized;
        defaults.num_centroids = cb->num_centroids;
        defaults.assign = cb->info.assign;
        defaults.seed = cb->info.seed;
    }

    if (o->group && (o->group->size < 1 || o->group->rank >= o->group->size ||
                     !o->group->sync || o->shards < 2 || cb)) {
        tt_index_close(cb);
        return tt_err(TT_EINVAL, "a build by a group of processes needs shards >= 2, a rank "
                      "below the group's size, a sync function, and no codebook option");
    }
    b.o = o;
    b.debias = o->debias;
    b.dim = in->dim;
    b.nbits = (uint32_t)o->nbits;
    b.threads = o->threads ? o->threads : tt_default_threads();
    /* Encode chunk: the buffers of one chunk use at most a quarter of the budget. */
    uint64_t per_vec = (uint64_t)b.dim * (4 + (o->keep_originals ? 2 : 0)) + 64;
    b.chunk_vectors = TT_MAX((uint64_t)1024, TT_MIN((uint64_t)1 << 18, o->memory_bytes / 4 / per_vec));

    if (o->group) { /* one process of several writing one sharded index: index/shards.c */
        /* every process reads the metadata (its shards' parts); a failure is agreed on
         * at the group's first sync point */
        int mst = TT_OK;
        if (o->metadata && !(mst = tt_mdb_create(&mdb))) {
            mdb_open = true;
            b.mdb = &mdb;
            mst = tt_mdb_read_jsonl(&mdb, o->metadata, 0, in->num_docs, in->ids_blob,
                                    in->id_off);
        }
        if ((st = tt_build_in_group(&b, out_dir, in, &pool, t0, mst)))
            goto fail;
        goto published;
    }
    /* The output first: a bad OUT fails now, not after hours of training. */
    if ((st = tt_build_prepare_output(&b, out_dir)))
        goto fail;
    /* The metadata next, read into memory before the long work: a bad line fails now. */
    if (o->metadata) {
        if ((st = tt_mdb_create(&mdb)))
            goto fail;
        mdb_open = true;
        if ((st = tt_mdb_read_jsonl(&mdb, o->metadata, 0, in->num_docs, in->ids_blob,
                                    in->id_off)))
            goto fail;
        if (o->shards > 1)
            b.mdb = &mdb;
    }
    /* Token pooling: the build reads the pooled documents (index/pooled.c). */
    if ((st = tt_build_pool(&b, in, &pool)))
        goto fail;
    b.in = pool ? tt_pooled_input(pool) : in;
    b.wdir = b.tmp;
    if ((st = cb ? tt_build_codebook_from(&b, cb) : tt_build_train(&b)))
        goto fail;
    if (o->shards > 1) { /* a sharded index: index/shards.c */
        if ((st = tt_build_shards(&b, 0, 1, t0)) || (st = tt_build_progress(&b, "publish", 0, 1)) ||
            (st = tt_build_publish(&b)))
            goto fail;
        goto published;
    }
    if ((st = tt_build_write_codebook(&b)) || (st = tt_build_segment(&b)) ||
        (o->sparse && (st = tt_build_write_sparse(&b, o->sparse))) ||
        (o->sparse && (st = tt_build_write_vocab(&b, o->sparse))))
        goto fail;
    b.st.seconds_total = tt_now() - t0;
    if ((st = tt_build_write_meta(&b, b.st.seconds_total)))
        goto fail;
    if (mdb_open) {
        tt_manifest_entry me;
        if ((st = tt_mdb_write(&mdb, b.wdir, TT_F_METADATA, &me)) ||
            (st = tt_manifest_add(&b.man, &me)))
            goto fail;
    }
    /* Generation 1: one segment, the build's, with the files' plain names. */
    tt_manifest_segment seg = {.id = 0, .num_docs = b.in->num_docs,
                               .num_vectors = b.in->num_vectors};
    b.man.generation = 1;
    b.man.next_auto_id = in->num_docs;
    if ((st = tt_manifest_add_segment(&b.man, &seg)) ||
        (st = tt_build_progress(&b, "publish", 0, 1)) ||
        (st = tt_manifest_publish(b.tmp, &b.man)) || (st = tt_fsync_dir(b.tmp)))
        goto fail;
    for (uint32_t i = 0; i < b.man.n; i++)
        b.st.index_bytes += strcmp(b.man.e[i].name, TT_F_ORIGINALS) ? b.man.e[i].size : 0;
    if ((st = tt_build_publish(&b)))
        goto fail;
published:
    if (o->progress)
        o->progress(o->progress_user, "publish", 1, 1);
    b.st.seconds_total = tt_now() - t0;
    if (stats)
        *stats = b.st;
    st = TT_OK;
fail:
    if (st && o->shards > 1 && (!o->group || o->group->rank == 0))
        tt_build_shards_discard(&b); /* a group's: rank 0, once every process stopped */
    if (mdb_open)
        tt_mdb_free(&mdb);
    tt_build_discard(&b, st);
    tt_build_free(&b);
    tt_pooled_free(pool);
    tt_index_close(cb);
    return st;
}

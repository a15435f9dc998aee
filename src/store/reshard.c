/* tt_index_reshard: a sharded (or plain) index re-partitioned into S shards without
 * re-encoding. The live documents of every source shard, in global row order, are cut
 * into S consecutive ranges (as a build cuts its input: [D*s/S, D*(s+1)/S)); each new
 * shard gets a copy of the shared codebook and one segment whose codes, residuals,
 * originals, residual scales, ids and lengths are copied document by document from the
 * source, with its IVF rebuilt from the codes (what compact.c does for one index). The
 * result is written into OUT.tmp-* and published as a build's (index/publish.c: OUT's
 * lock, --force only over tartan's own files); the source is only read (each part's
 * writer lock is held meanwhile, so no change runs under the copy).
 *
 * Sparse postings: the live documents' sparse vectors of every part are read into one
 * set in global row order (as a compaction reads them), and each new shard gets those
 * of its documents, every term quantized with the scale it had in the source (the
 * weights, BM25 counts and lengths are kept exactly; a sharded search's BM25
 * statistics, summed over the shards' live documents, are then the source's), and the
 * stored vocabulary (vocab.tt), which every part must share. */
#include "index/shards.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* One part of the source (a shard, or the plain index): its store, codebook and live
 * documents, and the first global row of those. */
typedef struct src_part {
    tt_store s;
    bool opened;
    tt_index *cb;
    live_set l;
    uint64_t first;
    tt_mdb md;         /* its metadata, rows renumbered as its live documents, if md_open */
    bool md_open;
    bool has_sparse;   /* its segments have sparse postings */
    tt_strtab vocab;   /* its stored vocabulary, if has_vocab */
    bool has_vocab;
} src_part;

typedef struct reshard {
    src_part *p;
    uint32_t np;
    uint64_t ndocs, nvecs, next_auto_id;
    int cur_part;      /* the part and segment mapped in f, or -1 */
    uint32_t cur_seg;
    seg_files f;
    bool has_md;       /* some part has metadata: every new shard gets its rows' part */
    tt_sparse_set *sparse; /* the live documents' sparse vectors, global row order, or NULL */
    tt_sparse_scales sc;   /* their terms' source scales (weights) */
} reshard;

static int open_part(src_part *p, const char *dir, const tt_change_options *co) {
    int st;
    if ((st = tt_store_open(&p->s, dir, co)))
        return st;
    p->opened = true;
    if ((st = tt_index_open_codebook(&p->cb, dir, &p->s.man)) ||
        (st = tt_store_live_collect(&p->s, p->cb, &p->l)))
        return st;
    /* The metadata: a row for each live document, in row order; renumbered, row i is
     * the part's i-th live document (as a compaction numbers them). */
    if ((st = tt_store_meta_load(&p->s, &p->md, &p->md_open)) ||
        (p->md_open && (st = tt_mdb_renumber(&p->md))))
        return st;
    return TT_OK;
}

/* The sparse vectors of every part's live documents, in global row order, into
 * rs->sparse (with their terms' scales), and the stored vocabulary they share; nothing
 * when no part has sparse postings. Every part, or none, must have them, of one kind,
 * with the same vocabulary or none. */
static int collect_sparse(reshard *rs, const char *dir) {
    uint64_t next = 0;
    int st = TT_OK;
    uint32_t with = 0, vocabs = 0;
    for (uint32_t k = 0; k < rs->np && !st; k++) {
        src_part *p = &rs->p[k];
        if ((st = tt_store_sparse_extract(&p->s, &rs->sparse, &next, &rs->sc, &p->has_sparse)) ||
            (st = tt_store_vocab_load(&p->s, &p->vocab, &p->has_vocab)))
            return st;
        with += p->has_sparse;
        vocabs += p->has_vocab;
    }
    if (with == 0)
        return TT_OK;
    if (with != rs->np)
        return tt_err(TT_ECORRUPT, "%s: some shards have sparse postings and some do not "
                      "(%u of %u have)", dir, with, rs->np);
    if (rs->sparse->n != rs->ndocs)
        return tt_err(TT_ECORRUPT, "%s: %llu live documents with sparse vectors of %llu", dir,
                      (unsigned long long)rs->sparse->n, (unsigned long long)rs->ndocs);
    if (vocabs == 0)
        return TT_OK;
    if (vocabs != rs->np)
        return tt_err(TT_ECORRUPT, "%s: some shards store a vocabulary and some do not "
                      "(%u of %u do)", dir, vocabs, rs->np);
    char why[300];
    for (uint32_t k = 1; k < rs->np; k++)
        if (tt_sparse_vocab_compare(&rs->p[0].vocab, &rs->p[k].vocab, why, sizeof why))
            return tt_err(TT_ECORRUPT, "%s: the vocabulary stored in %s is not %s's (%s)", dir,
                          rs->p[k].s.dir, rs->p[0].s.dir, why);
    return tt_sparse_vocab_copy(rs->sparse, &rs->p[0].vocab);
}

/* The new shard's calibration (tune.tt): that of the source part holding most of its
 * documents [g0, g1), among the parts that have one, written into b's directory.
 * Nothing when none has. The parameters were measured on that part: tartan tune
 * re-measures them. */
static int write_tune_part(reshard *rs, builder *b, uint64_t g0, uint64_t g1) {
    int best = -1;
    uint64_t most = 0;
    for (uint32_t k = 0; k < rs->np; k++) {
        const src_part *p = &rs->p[k];
        uint64_t lo = TT_MAX(g0, p->first), hi = TT_MIN(g1, p->first + p->l.ndocs);
        if (lo < hi && p->cb->f_tune.base && hi - lo > most) {
            most = hi - lo;
            best = (int)k;
        }
    }
    if (best < 0)
        return TT_OK;
    const tt_index *cb = rs->p[best].cb;
    char *text;
    size_t n;
    int st = tt_tune_format(&cb->tuned, cb->cgroup_of, cb->num_centroids, &text, &n);
    if (st)
        return st;
    st = tt_build_write_small(b, TT_F_TUNE, "TUNE", text, n, 0, 0, 0);
    free(text);
    return st;
}

/* The new shard's metadata: the rows of the live documents [g0, g1) from the parts that
 * hold them (rows of NULLs from a part without metadata), written into wdir. */
static int write_meta_part(reshard *rs, builder *b, const char *wdir, uint64_t g0,
                           uint64_t g1) {
    tt_mdb m;
    tt_manifest_entry me;
    int st = tt_mdb_create(&m);
    if (st)
        return st;
    for (uint32_t k = 0; k < rs->np && !st; k++) {
        const src_part *p = &rs->p[k];
        uint64_t lo = TT_MAX(g0, p->first), hi = TT_MIN(g1, p->first + p->l.ndocs);
        if (lo < hi)
            st = tt_mdb_append(&m, p->md_open ? &rs->p[k].md : NULL, lo - p->first, hi - lo,
                               lo - g0);
    }
    if (!st && !(st = tt_mdb_write(&m, wdir, TT_F_METADATA, &me)))
        st = tt_manifest_add(&b->man, &me);
    tt_mdb_free(&m);
    return st;
}

/* The documents [g0, g1) of the whole, as a build input (lengths and ids only: the
 * vectors are copied, never read as floats). */
typedef struct range_input {
    tt_input in;
    uint32_t *doclens, *inlens;
    uint64_t *doc_vec0, *id_off;
    char *ids;
} range_input;

static void range_free(range_input *r) {
    free(r->doclens);
    free(r->inlens);
    free(r->doc_vec0);
    free(r->id_off);
    free(r->ids);
    memset(r, 0, sizeof *r);
}

static int range_make(const reshard *rs, uint64_t g0, uint64_t g1, uint32_t dim,
                      range_input *r) {
    memset(r, 0, sizeof *r);
    const uint64_t D = g1 - g0;
    uint64_t idbytes = 0;
    bool pooled = false;
    for (uint32_t k = 0; k < rs->np; k++)
        pooled = pooled || rs->p[k].l.pooled;
    for (uint64_t g = g0; g < g1; g++) {
        uint32_t k = 0;
        while (g >= rs->p[k].first + rs->p[k].l.ndocs)
            k++;
        const live_set *l = &rs->p[k].l;
        uint64_t d = g - rs->p[k].first;
        idbytes += l->id_off[d + 1] - l->id_off[d];
    }
    r->doclens = tt_alloc(D, sizeof *r->doclens, "reshard");
    r->inlens = tt_alloc(D, sizeof *r->inlens, "reshard");
    r->doc_vec0 = tt_alloc(D + 1, sizeof *r->doc_vec0, "reshard");
    r->id_off = tt_alloc(D + 1, sizeof *r->id_off, "reshard");
    r->ids = tt_alloc(idbytes ? idbytes : 1, 1, "reshard");
    if (!r->doclens || !r->inlens || !r->doc_vec0 || !r->id_off || !r->ids) {
        range_free(r);
        return TT_ENOMEM;
    }
    uint64_t v = 0, pos = 0, inv = 0;
    uint32_t k = 0;
    for (uint64_t g = g0; g < g1; g++) {
        while (g >= rs->p[k].first + rs->p[k].l.ndocs)
            k++;
        const live_set *l = &rs->p[k].l;
        uint64_t d = g - rs->p[k].first, il = l->id_off[d + 1] - l->id_off[d];
        r->doclens[g - g0] = l->doclens[d];
        r->inlens[g - g0] = l->inlens[d];
        inv += l->inlens[d];
        r->doc_vec0[g - g0] = v;
        v += l->doclens[d];
        r->id_off[g - g0] = pos;
        memcpy(r->ids + pos, l->ids + l->id_off[d], il); /* with its NUL */
        pos += il;
    }
    r->doc_vec0[D] = v;
    r->id_off[D] = pos;
    r->in.dim = dim;
    r->in.num_docs = D;
    r->in.num_vectors = v;
    r->in.doclens = r->doclens;
    r->in.doc_vec0 = r->doc_vec0;
    r->in.ids_blob = r->ids;
    r->in.id_off = r->id_off;
    if (pooled) {
        r->in.input_lens = r->inlens;
        r->in.input_vectors = inv;
    }
    r->in.source = "reshard";
    return TT_OK;
}

/* Copies the codes, residuals (originals, residual scales) of documents [g0, g1) into
 * the segment being written, counting the IVF. */
static int copy_range(reshard *rs, builder *b, uint64_t g0, uint64_t g1) {
    const tt_index *cb = rs->p[0].cb;
    const uint32_t cw = cb->code_bytes, rb = cb->res_bytes, ob = 2 * cb->dim;
    const bool orig = cb->info.keep_originals;
    tt_vec_files vf = TT_VEC_FILES_INIT;
    uint32_t *ids = NULL;
    vf.sb = tt_codec_sketch_bytes(&cb->codec);
    vf.vs = cb->info.debias == TT_DEBIAS_VECTOR;
    int st = tt_vec_files_open(b, &vf, orig);
    uint32_t maxlen = 1;
    for (uint64_t d = 0; d < b->in->num_docs; d++)
        maxlen = TT_MAX(maxlen, b->in->doclens[d]);
    if (!st && !(ids = tt_alloc(maxlen, sizeof *ids, "codes")))
        st = TT_ENOMEM;
    uint32_t k = 0;
    for (uint64_t g = g0; g < g1 && !st; g++) {
        while (g >= rs->p[k].first + rs->p[k].l.ndocs)
            k++;
        src_part *p = &rs->p[k];
        uint64_t d = g - p->first;
        if (rs->cur_part != (int)k || rs->cur_seg != p->l.seg[d]) {
            tt_store_seg_files_close(&rs->f);
            rs->cur_part = -1;
            if ((st = tt_store_seg_files_open(&p->s, p->cb, &p->s.man.seg[p->l.seg[d]],
                                              &rs->f)))
                break;
            rs->cur_part = (int)k;
            rs->cur_seg = p->l.seg[d];
        }
        const uint64_t v = p->l.vec[d], len = p->l.doclens[d];
        const uint8_t *c = rs->f.codes.payload + v * cw;
        for (uint64_t j = 0; j < len && !st; j++) {
            ids[j] = cw == 2 ? tt_rd16(c + 2 * j) : tt_rd32(c + 4 * j);
            if (ids[j] >= cb->num_centroids)
                st = tt_err(TT_ECORRUPT, "%s: vector %llu names centroid %u of %u",
                            rs->f.codes.path, (unsigned long long)(v + j), ids[j],
                            cb->num_centroids);
        }
        if (st || (st = tt_fw_write(&vf.codes, c, (size_t)(len * cw))) ||
            (st = tt_vec_files_write_residuals(&vf, rs->f.residuals.payload + v * rb, len,
                                               rb)) ||
            (orig && (st = tt_fw_write(&vf.originals, rs->f.originals.payload + v * ob,
                                       (size_t)(len * ob)))) ||
            (vf.vs && (st = tt_fw_write(&vf.vscale, rs->f.vscale.payload + v * 2,
                                        (size_t)(len * 2)))))
            break;
        tt_build_ivf_count(b, ids, b->in->doc_vec0[g - g0], len);
        if (((g - g0) & 4095) == 0)
            st = tt_build_progress(b, "reshard", g, rs->ndocs);
    }
    if (!st)
        st = tt_vec_files_finish(b, &vf, b->in->num_vectors, cw, rb, cb->dim, NULL);
    tt_vec_files_abort(&vf);
    free(ids);
    return st;
}

/* One index directory wdir (a new shard, or the whole output when S = 1) holding the
 * documents [g0, g1). */
static int write_part(reshard *rs, builder *b, const char *wdir, uint64_t g0, uint64_t g1,
                      tt_shard_entry *e) {
    range_input r;
    int st = range_make(rs, g0, g1, b->dim, &r);
    if (st)
        return st;
    tt_manifest_free(&b->man);
    memset(&b->man, 0, sizeof b->man);
    free(b->ivf_len);
    free(b->ivf_bytes);
    free(b->ivf_last);
    free(b->stamp);
    b->ivf_len = NULL;
    b->ivf_bytes = NULL;
    b->ivf_last = b->stamp = NULL;
    b->wdir = wdir;
    b->in = &r.in;
    if ((st = tt_build_write_codebook(b)) || (st = tt_build_ivf_alloc(b)) ||
        (st = copy_range(rs, b, g0, g1)) || (st = tt_build_write_ivf(b)) ||
        (st = tt_build_segment_tables(b)) || (st = tt_build_write_meta(b, 0)) ||
        (rs->has_md && (st = write_meta_part(rs, b, wdir, g0, g1))) ||
        (st = write_tune_part(rs, b, g0, g1)) ||
        (rs->sparse && (st = tt_build_write_sparse_fixed(b, rs->sparse, g0, g1 - g0,
                                                          rs->sc.v))) ||
        (rs->sparse && (st = tt_build_write_vocab(b, rs->sparse))))
        goto done;
    tt_manifest_segment seg = {.id = 0, .num_docs = r.in.num_docs,
                               .num_vectors = r.in.num_vectors};
    b->man.generation = 1;
    b->man.next_auto_id = rs->next_auto_id;
    if ((st = tt_manifest_add_segment(&b->man, &seg)) ||
        (st = tt_manifest_publish(wdir, &b->man)) || (st = tt_fsync_dir(wdir)))
        goto done;
    if (e) {
        e->num_docs = r.in.num_docs;
        e->num_vectors = r.in.num_vectors;
        e->centroids_hash = tt_manifest_kind_hash(&b->man, "CENT");
        e->codec_hash = tt_manifest_kind_hash(&b->man, "CODC");
    }
    for (uint32_t i = 0; i < b->man.n; i++)
        b->st.index_bytes += b->man.e[i].size;
done:
    b->in = NULL;
    range_free(&r);
    return st;
}

int tt_index_reshard(const char *dir, uint32_t shards, const char *out_dir,
                     const tt_reshard_options *opt) {
    tt_reshard_options o;
    tt_reshard_options_init(&o);
    if (opt)
        o = *opt;
    tt_err_clear();
    if (!dir || !out_dir || !*out_dir)
        return tt_err(TT_EINVAL, "reshard: an index and an output directory are needed");
    if (shards < 1 || shards > TT_MAX_SHARDS)
        return tt_err(TT_EINVAL, "reshard: %u shards (1..%u)", shards, TT_MAX_SHARDS);
    char *rs_src = realpath(dir, NULL), *rs_out = realpath(out_dir, NULL);
    bool same = rs_src && rs_out && !strcmp(rs_src, rs_out);
    free(rs_src);
    free(rs_out);
    if (same)
        return tt_err(TT_EINVAL, "reshard: %s: the output is the source index", out_dir);
    reshard rs;
    memset(&rs, 0, sizeof rs);
    rs.cur_part = -1;
    tt_store_seg_files_init(&rs.f);
    tt_shards_file sf;
    memset(&sf, 0, sizeof sf);
    builder b;
    memset(&b, 0, sizeof b);
    b.op.pfd = b.lock.fd = b.tmp_fd = -1;
    tt_build_options bo;
    bool prepared = false;
    tt_shards_file nf = {.n = shards};
    char **part_dirs = NULL;
    int st = TT_OK;
    const bool sharded = tt_is_sharded_dir(dir);
    if (sharded && (st = tt_shards_read(dir, &sf)))
        goto done;
    rs.np = sharded ? sf.n : 1;
    rs.p = tt_calloc(rs.np, sizeof *rs.p, "reshard");
    part_dirs = tt_calloc(rs.np, sizeof *part_dirs, "reshard");
    nf.e = tt_calloc(shards, sizeof *nf.e, "reshard");
    if (!rs.p || !part_dirs || !nf.e) {
        st = TT_ENOMEM;
        goto done;
    }
    tt_change_options co;
    tt_change_options_init(&co);
    co.threads = o.threads;
    if (o.memory_bytes)
        co.memory_bytes = o.memory_bytes;
    co.progress = o.progress;
    co.progress_user = o.progress_user;
    co.cancel = o.cancel;
    for (uint32_t k = 0; k < rs.np; k++) {
        part_dirs[k] = sharded ? tt_path_join(dir, sf.e[k].name) : strdup(dir);
        if (!part_dirs[k]) {
            st = TT_ENOMEM;
            goto done;
        }
        if ((st = open_part(&rs.p[k], part_dirs[k], &co)))
            goto done;
        const tt_manifest *m = &rs.p[k].s.man;
        /* Every shard must hold the codebook SHARDS names. */
        if (sharded && (tt_manifest_kind_hash(m, "CENT") != sf.e[k].centroids_hash ||
                        tt_manifest_kind_hash(m, "CODC") != sf.e[k].codec_hash)) {
            st = tt_err(TT_ECORRUPT, "%s: its codebook is not the one %s/SHARDS names",
                        part_dirs[k], dir);
            goto done;
        }
        rs.p[k].first = rs.ndocs;
        rs.ndocs += rs.p[k].l.ndocs;
        rs.nvecs += rs.p[k].l.nvecs;
        rs.next_auto_id = TT_MAX(rs.next_auto_id, rs.p[k].l.next_auto_id);
        rs.has_md |= rs.p[k].md_open;
    }
    if ((st = collect_sparse(&rs, dir)))
        goto done;
    if (rs.ndocs < shards) {
        st = tt_err(TT_EINVAL, "%s: %llu live documents for %u shards", dir,
                    (unsigned long long)rs.ndocs, shards);
        goto done;
    }

    /* The writer: a builder as an add's over the first part's codebook, writing a new
     * directory that is published as a build's. */
    tt_store_builder(&rs.p[0].s, rs.p[0].cb, NULL, &bo, &b);
    bo.force = o.force;
    bo.shards = shards;
    b.prefix[0] = '\0';
    if ((st = tt_build_codebook_from(&b, rs.p[0].cb)) ||
        (st = tt_build_prepare_output(&b, out_dir)))
        goto done;
    prepared = true;
    for (uint32_t s = 0; s < shards && !st; s++) {
        const uint64_t g0 = rs.ndocs * s / shards, g1 = rs.ndocs * (s + 1) / shards;
        if (shards == 1) {
            st = write_part(&rs, &b, b.tmp, g0, g1, NULL);
            break;
        }
        tt_shard_name(s, nf.e[s].name);
        char *path = tt_path_join(b.tmp, nf.e[s].name);
        if (!path) {
            st = TT_ENOMEM;
            break;
        }
        if (mkdirat(b.tmp_fd, nf.e[s].name, 0777) != 0 && errno != EEXIST)
            st = tt_err_errno(TT_EIO, errno, "%s: cannot create", path);
        if (!st)
            st = write_part(&rs, &b, path, g0, g1, &nf.e[s]);
        free(path);
    }
    b.wdir = b.tmp;
    if (!st && shards > 1)
        st = tt_build_shards_finish(&b, &nf);
    if (!st && shards == 1)
        st = tt_fsync_dir(b.tmp);
    if (!st)
        st = tt_build_publish(&b);
done:
    tt_store_seg_files_close(&rs.f);
    if (st && prepared && shards > 1)
        tt_build_shards_discard(&b);
    if (prepared)
        tt_build_discard(&b, st);
    tt_build_free(&b);
    for (uint32_t k = 0; rs.p && k < rs.np; k++) {
        tt_store_live_free(&rs.p[k].l);
        tt_st_free(&rs.p[k].vocab);
        if (rs.p[k].md_open)
            tt_mdb_free(&rs.p[k].md);
        tt_index_close(rs.p[k].cb);
        if (rs.p[k].opened)
            st = tt_store_end(&rs.p[k].s, st);
        if (part_dirs)
            free(part_dirs[k]);
    }
    free(part_dirs);
    free(rs.p);
    tt_sparse_set_free(rs.sparse);
    free(rs.sc.v);
    tt_shards_file_free(&nf);
    tt_shards_file_free(&sf);
    return st;
}

void tt_reshard_options_init(tt_reshard_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->struct_size = sizeof *opt;
}

/* tt_index_compact: every segment merged into one, deleted documents left out, the IVF
 * rebuilt. Without retraining, the live documents' codes, residuals, originals, residual
 * scales, ids and lengths before token pooling are copied as they are, in row order: a
 * vector's encoding depends only on it and the codebook, so this is what a build over the
 * same documents with this codebook writes (tests/test_store.c compares the two file by
 * file). With retraining, a new codebook is trained on a sample of the live documents
 * (their kept originals, else their decompressed vectors) and every live document
 * re-encoded with it, through the build's own pipeline (which never pools again: pooled
 * vectors are re-encoded as they are). Both stream segment by segment: what stays in
 * memory is per document (lengths, ids, offsets) and per centroid, never the vectors. */
#include "store/store.h"

#include <stdio.h>
#include <stdlib.h>

void tt_store_seg_files_init(seg_files *f) {
    memset(f, 0, sizeof *f);
    f->doclens.fd = f->codes.fd = f->residuals.fd = f->ids.fd = f->originals.fd = -1;
    f->inlens.fd = f->vscale.fd = -1;
}

void tt_store_seg_files_close(seg_files *f) {
    tt_fmap *all[] = {&f->doclens, &f->codes, &f->residuals, &f->ids, &f->originals,
                      &f->inlens, &f->vscale};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i]->path || all[i]->fd >= 0)
            tt_fmap_close(all[i]);
    free(f->ids_made);
    tt_store_seg_files_init(f);
}

static int seg_file(tt_store *s, const tt_manifest_segment *m, tt_fmap *f, const char *file,
                    const char *kind, bool check) {
    char name[TT_MANIFEST_NAME_LEN + 16];
    snprintf(name, sizeof name, "%s%s", m->prefix, file);
    const tt_manifest_entry *e = tt_manifest_find(&s->man, name);
    if (!e)
        return tt_err(TT_ECORRUPT, "%s/%s: missing from the manifest", s->dir, name);
    int st = tt_fmap_open(f, s->dir, name, kind, TT_MAP_WHOLE);
    if (st)
        return st;
    if (f->size != e->size || f->h.payload_hash != e->payload_hash)
        return tt_err(TT_ECORRUPT, "%s: does not match the manifest", f->path);
    return check ? tt_fmap_check_payload(f, NULL, NULL) : TT_OK;
}

/* Maps segment m's files; the small ones (lengths, codes, ids) checksummed, the
 * residuals and originals checked for size (a compaction reads them once; verify checks
 * their sums). */
int tt_store_seg_files_open(tt_store *s, const tt_index *cb, const tt_manifest_segment *m,
                          seg_files *f) {
    int st;
    uint64_t D = m->num_docs, N = m->num_vectors;
    tt_store_seg_files_init(f);
    if ((st = seg_file(s, m, &f->doclens, TT_F_DOCLENS, "DOCL", true)) ||
        (st = seg_file(s, m, &f->codes, TT_F_CODES, "CODE", true)) ||
        (st = seg_file(s, m, &f->residuals, TT_F_RESIDUALS, "RESI", false)))
        return st;
    if (f->doclens.h.payload_bytes != 4 * D ||
        f->codes.h.payload_bytes != (uint64_t)cb->code_bytes * N ||
        f->residuals.h.payload_bytes != (uint64_t)cb->res_bytes * N)
        return tt_err(TT_ECORRUPT, "%s: segment %llu's files disagree with its counts", s->dir,
                      (unsigned long long)m->id);
    uint64_t v = 0;
    for (uint64_t d = 0; d < D; d++) {
        uint32_t len = tt_rd32(f->doclens.payload + 4 * d);
        if (len == 0 || (v += len) > N)
            return tt_err(TT_ECORRUPT, "%s: document lengths do not add up", f->doclens.path);
    }
    if (v != N)
        return tt_err(TT_ECORRUPT, "%s: document lengths do not add up", f->doclens.path);
    char name[TT_MANIFEST_NAME_LEN + 16];
    snprintf(name, sizeof name, "%s%s", m->prefix, TT_F_IDS);
    if (tt_manifest_find(&s->man, name)) {
        if ((st = seg_file(s, m, &f->ids, TT_F_IDS, "IDS_", true)))
            return st;
        if (f->ids.h.a != D || f->ids.h.payload_bytes != 8 * (D + 1) + f->ids.h.b)
            return tt_err(TT_ECORRUPT, "%s: header disagrees with its size", f->ids.path);
        f->id_off = (const uint64_t *)f->ids.payload;
        f->id_data = (const char *)f->ids.payload + 8 * (D + 1);
        for (uint64_t d = 0; d < D; d++)
            if (f->id_off[d + 1] <= f->id_off[d] || f->id_off[d + 1] > f->ids.h.b)
                return tt_err(TT_ECORRUPT, "%s: id offsets are damaged", f->ids.path);
    } else if ((st = tt_row_ids(D, &f->ids_made, &f->id_off, &f->id_data))) {
        return st;
    }
    /* Pooled documents: their lengths before pooling go with them. */
    snprintf(name, sizeof name, "%s%s", m->prefix, TT_F_INLENS);
    if (tt_manifest_find(&s->man, name)) {
        if ((st = seg_file(s, m, &f->inlens, TT_F_INLENS, "INLN", true)))
            return st;
        if (f->inlens.h.a != D || f->inlens.h.payload_bytes != 4 * D)
            return tt_err(TT_ECORRUPT, "%s: header disagrees with its size", f->inlens.path);
    }
    if (cb->info.keep_originals) {
        if ((st = seg_file(s, m, &f->originals, TT_F_ORIGINALS, "ORIG", false)))
            return st;
        if (f->originals.h.payload_bytes != 2ull * cb->dim * N)
            return tt_err(TT_ECORRUPT, "%s: wrong size", f->originals.path);
    }
    if (cb->info.debias == TT_DEBIAS_VECTOR) {
        if ((st = seg_file(s, m, &f->vscale, TT_F_VSCALE, "VSCL", true)))
            return st;
        if (f->vscale.h.payload_bytes != 2 * N)
            return tt_err(TT_ECORRUPT, "%s: wrong size", f->vscale.path);
    }
    return TT_OK;
}

void tt_store_live_free(live_set *l) {
    free(l->doclens);
    free(l->doc_vec0);
    free(l->seg);
    free(l->vec);
    free(l->ids);
    free(l->id_off);
    free(l->inlens);
    memset(l, 0, sizeof *l);
}

/* id[0..len) as the number an automatic id would spell ("%llu": digits, no leading
 * zero), if it is one. */
static bool auto_id_number(const char *id, size_t len, uint64_t *out) {
    if (len == 0 || len > 20 || (id[0] == '0' && len > 1))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned dgt = (unsigned)(id[i] - '0');
        if (dgt > 9 || v > (UINT64_MAX - dgt) / 10)
            return false;
        v = v * 10 + dgt;
    }
    *out = v;
    return true;
}

int tt_store_live_collect(tt_store *s, const tt_index *cb, live_set *l) {
    uint64_t D = 0;
    int st = TT_OK;
    l->next_auto_id = s->man.next_auto_id;
    for (uint32_t i = 0; i < s->man.nseg; i++)
        D += s->man.seg[i].num_docs - s->man.seg[i].num_deleted;
    l->ndocs = D;
    l->doclens = tt_alloc(D ? D : 1, sizeof *l->doclens, "live documents");
    l->doc_vec0 = tt_alloc(D + 1, sizeof *l->doc_vec0, "live documents");
    l->seg = tt_alloc(D ? D : 1, sizeof *l->seg, "live documents");
    l->vec = tt_alloc(D ? D : 1, sizeof *l->vec, "live documents");
    l->id_off = tt_alloc(D + 1, sizeof *l->id_off, "live documents");
    l->inlens = tt_alloc(D ? D : 1, sizeof *l->inlens, "live documents");
    if (!l->doclens || !l->doc_vec0 || !l->seg || !l->vec || !l->id_off || !l->inlens)
        return TT_ENOMEM;
    uint64_t d = 0, pos = 0;
    for (uint32_t i = 0; i < s->man.nseg && !st; i++) {
        seg_files f;
        if ((st = tt_store_seg_files_open(s, cb, &s->man.seg[i], &f))) {
            tt_store_seg_files_close(&f);
            break;
        }
        uint64_t v = 0, num;
        for (uint64_t r = 0; r < s->man.seg[i].num_docs; r++) {
            uint32_t len = tt_rd32(f.doclens.payload + 4 * r);
            if (tt_store_is_dead(s, i, r)) {
                /* Its row goes, and with it the memory that its id was used: automatic
                 * ids start past it instead (doc/format.md, "Ids"). */
                size_t il = (size_t)(f.id_off[r + 1] - f.id_off[r]);
                if (auto_id_number(f.id_data + f.id_off[r], il, &num) && num >= l->next_auto_id)
                    l->next_auto_id = num == UINT64_MAX ? num : num + 1;
            } else {
                size_t il = (size_t)(f.id_off[r + 1] - f.id_off[r]);
                if (pos + il + 1 > l->ids_cap) {
                    size_t c = (size_t)l->ids_cap;
                    if ((st = tt_grow((void **)&l->ids, &c, (size_t)(pos + il + 1), 1, "ids")))
                        break;
                    l->ids_cap = c;
                }
                memcpy(l->ids + pos, f.id_data + f.id_off[r], il);
                l->ids[pos + il] = '\0';
                l->id_off[d] = pos;
                pos += il + 1;
                l->doclens[d] = len;
                l->inlens[d] = f.inlens.payload ? tt_rd32(f.inlens.payload + 4 * r) : len;
                l->in_vecs += l->inlens[d];
                l->pooled = l->pooled || f.inlens.payload;
                l->doc_vec0[d] = l->nvecs;
                l->seg[d] = i;
                l->vec[d] = v;
                l->nvecs += len;
                d++;
            }
            v += len;
        }
        tt_store_seg_files_close(&f);
    }
    l->doc_vec0[D] = l->nvecs;
    l->id_off[D] = pos;
    return st;
}

/* The live documents as a build input (no files: vectors come from read_fn). */
static void live_input(const live_set *l, uint32_t dim, tt_input *in) {
    memset(in, 0, sizeof *in);
    in->dim = dim;
    in->num_docs = l->ndocs;
    in->num_vectors = l->nvecs;
    in->doclens = l->doclens;
    in->doc_vec0 = l->doc_vec0;
    in->ids_blob = l->ids;
    in->id_off = l->id_off;
    if (l->pooled) { /* kept as pooled: never pooled again */
        in->input_lens = l->inlens;
        in->input_vectors = l->in_vecs;
    }
}

/* ------------------------------------------------------- copying (no retrain) */

static int copy_segments(tt_store *s, const tt_index *cb, const live_set *l, builder *b) {
    tt_vec_files vf = TT_VEC_FILES_INIT;
    uint32_t *ids = NULL;
    int st;
    const uint32_t cw = cb->code_bytes, rb = cb->res_bytes, ob = 2 * cb->dim;
    const bool orig = cb->info.keep_originals;
    vf.sb = tt_codec_sketch_bytes(&cb->codec);
    vf.vs = cb->info.debias == TT_DEBIAS_VECTOR;
    if ((st = tt_vec_files_open(b, &vf, orig)))
        goto done;
    uint32_t maxlen = 0;
    for (uint64_t d = 0; d < l->ndocs; d++)
        maxlen = TT_MAX(maxlen, l->doclens[d]);
    if (!(ids = tt_alloc(maxlen ? maxlen : 1, sizeof *ids, "codes"))) {
        st = TT_ENOMEM;
        goto done;
    }
    uint64_t d = 0;
    for (uint32_t i = 0; i < s->man.nseg && !st; i++) {
        seg_files f;
        if ((st = tt_store_seg_files_open(s, cb, &s->man.seg[i], &f))) {
            tt_store_seg_files_close(&f);
            break;
        }
        for (; d < l->ndocs && l->seg[d] == i; d++) {
            uint64_t v = l->vec[d], len = l->doclens[d];
            const uint8_t *c = f.codes.payload + v * cw;
            for (uint64_t j = 0; j < len; j++) {
                ids[j] = cw == 2 ? tt_rd16(c + 2 * j) : tt_rd32(c + 4 * j);
                if (ids[j] >= cb->num_centroids) {
                    st = tt_err(TT_ECORRUPT, "%s: vector %llu names centroid %u of %u",
                                f.codes.path, (unsigned long long)(v + j), ids[j],
                                cb->num_centroids);
                    break;
                }
            }
            if (st || (st = tt_fw_write(&vf.codes, c, (size_t)(len * cw))) ||
                (st = tt_vec_files_write_residuals(&vf, f.residuals.payload + v * rb, len,
                                                   rb)) ||
                (orig && (st = tt_fw_write(&vf.originals, f.originals.payload + v * ob,
                                           (size_t)(len * ob)))))
                break;
            if (vf.vs && (st = tt_fw_write(&vf.vscale, f.vscale.payload + v * 2,
                                           (size_t)(len * 2))))
                break;
            tt_build_ivf_count(b, ids, l->doc_vec0[d], len);
            if ((d & 4095) == 0 && (st = tt_build_progress(b, "compact", d, l->ndocs)))
                break;
        }
        tt_store_seg_files_close(&f);
    }
    if (!st)
        st = tt_vec_files_finish(b, &vf, l->nvecs, cw, rb, cb->dim, NULL);
done:
    tt_vec_files_abort(&vf);
    free(ids);
    return st;
}

/* ------------------------------------------------------ retraining: the input */

/* Reads live vectors for the build: the kept originals, else c + r decompressed. The
 * segment of the vectors being read stays mapped between calls (reads go forward). */
typedef struct live_reader {
    tt_store *s;
    const tt_index *cb;
    const live_set *l;
    uint32_t cur;             /* the mapped segment, or UINT32_MAX */
    seg_files f;
    float *res;               /* 2 * dim floats */
} live_reader;

static int read_live(void *user, uint64_t v0, uint64_t n, float *out) {
    live_reader *r = user;
    const live_set *l = r->l;
    const uint32_t dim = r->cb->dim;
    int st;
    for (uint64_t d = tt_find_le(l->doc_vec0, l->ndocs, v0), v = v0; n > 0; d++) {
        if (l->seg[d] != r->cur) {
            tt_store_seg_files_close(&r->f);
            r->cur = UINT32_MAX;
            if ((st = tt_store_seg_files_open(r->s, r->cb, &r->s->man.seg[l->seg[d]], &r->f)))
                return st;
            r->cur = l->seg[d];
        }
        uint64_t skip = v - l->doc_vec0[d], take = TT_MIN((uint64_t)l->doclens[d] - skip, n);
        uint64_t sv = l->vec[d] + skip; /* first vector within the segment */
        /* The index holds vectors in its codec's position order; a build reads them
         * in the input's. */
        float *pos = r->res + dim;
        for (uint64_t j = 0; j < take; j++, out += dim) {
            if (r->f.originals.payload) {
                const uint8_t *p = r->f.originals.payload + (sv + j) * 2 * dim;
                for (uint32_t k = 0; k < dim; k++)
                    pos[k] = tt_f16_to_f32(tt_rd16(p + 2 * k));
            } else {
                const uint8_t *cp = r->f.codes.payload + (sv + j) * r->cb->code_bytes;
                uint32_t c = r->cb->code_bytes == 2 ? tt_rd16(cp) : tt_rd32(cp);
                if (c >= r->cb->num_centroids)
                    return tt_err(TT_ECORRUPT, "%s: damaged code", r->f.codes.path);
                tt_codec_decode(&r->cb->codec,
                                r->f.residuals.payload + (sv + j) * r->cb->res_bytes, r->res);
                if (r->f.vscale.payload)
                    tt_codec_scale(&r->cb->codec,
                                   tt_f16_to_f32(tt_rd16(r->f.vscale.payload + (sv + j) * 2)),
                                   r->res);
                const float *cen = r->cb->centroids + (uint64_t)c * dim;
                for (uint32_t k = 0; k < dim; k++)
                    pos[k] = cen[k] + r->res[k];
            }
            tt_codec_to_input(&r->cb->codec, pos, out);
        }
        v += take;
        n -= take;
    }
    return TT_OK;
}

/* ------------------------------------------------------------------ compact */

int tt_index_compact(const char *dir, const tt_change_options *opt, tt_change_stats *stats) {
    tt_store s;
    builder b;
    tt_index *cb = NULL;
    tt_manifest next;
    live_set l;
    tt_input in;
    live_reader rd;
    tt_mdb mdb;
    bool mdb_open = false;
    int st;
    memset(&b, 0, sizeof b);
    memset(&next, 0, sizeof next);
    memset(&l, 0, sizeof l);
    memset(&rd, 0, sizeof rd);
    rd.cur = UINT32_MAX;
    tt_store_seg_files_init(&rd.f);
    tt_err_clear();
    if (stats)
        memset(stats, 0, sizeof *stats);
    if ((st = tt_store_open(&s, dir, opt)) || (st = tt_index_open_codebook(&cb, dir, &s.man)) ||
        (st = tt_store_live_collect(&s, cb, &l)))
        goto done;
    if (l.ndocs == 0) {
        st = tt_err(TT_EINVAL, "%s: every document is deleted; a compaction would leave an "
                    "index without documents (add documents first, or remove the index)", dir);
        goto done;
    }
    live_input(&l, cb->dim, &in);

    /* The builder writes the new segment as an add would, with this codebook or a new
     * one. */
    tt_build_options bo;
    tt_store_builder(&s, cb, &in, &bo, &b);
    if ((st = tt_store_next(&s, &next)))
        goto done;
    /* The next generation keeps no segment file and no deletion list of this one. */
    tt_manifest keep;
    memset(&keep, 0, sizeof keep);
    for (uint32_t i = 0; i < next.n && !st; i++) {
        const char *k = next.e[i].kind;
        /* The calibration (tune.tt) stays with the codebook it was measured on. */
        if (!s.o.retrain && (!memcmp(k, "META", 4) || !memcmp(k, "CENT", 4) ||
                             !memcmp(k, "CODC", 4) || !memcmp(k, "TUNE", 4)))
            st = tt_manifest_add(&keep, &next.e[i]);
        /* The stored vocabulary goes with the term ids, whatever the codebook. */
        else if (!memcmp(k, TT_VOCAB_KIND, 4))
            st = tt_manifest_add(&keep, &next.e[i]);
    }
    free(next.e);
    next.e = keep.e;
    next.n = keep.n;
    next.cap = keep.cap;
    next.nseg = 0;
    if (st)
        goto done;

    if (s.o.retrain) {
        if (!(rd.res = tt_alloc(2 * (uint64_t)cb->dim, sizeof *rd.res, "decoded residual"))) {
            st = TT_ENOMEM;
            goto done;
        }
        rd.s = &s;
        rd.cb = cb;
        rd.l = &l;
        in.read_fn = read_live;
        in.read_user = &rd;
        in.source = dir;
        double t0 = tt_now();
        if ((st = tt_build_train(&b)))
            goto done;
        /* Without originals the new codebook learns from decompressed vectors, which
         * already carry the old codebook's error: its own held-out error on them is
         * far below what it makes on real vectors (measured: half), and would make
         * every later add look like drift. The old baseline, measured on real vectors
         * of the same collection, stays. */
        if (!cb->info.keep_originals)
            b.st.heldout_mse = cb->info.heldout_mse;
        if ((st = tt_build_write_codebook(&b)) || (st = tt_build_segment(&b)) ||
            (st = tt_build_write_meta(&b, tt_now() - t0)))
            goto done;
    } else {
        b.K = cb->num_centroids;
        if ((st = tt_build_ivf_alloc(&b)) || (st = copy_segments(&s, cb, &l, &b)) ||
            (st = tt_build_write_ivf(&b)) || (st = tt_build_segment_tables(&b)))
            goto done;
    }
    if ((st = tt_store_compact_sparse(&s, &b)))
        goto done;
    for (uint32_t i = 0; i < b.man.n && !st; i++)
        st = tt_manifest_add(&next, &b.man.e[i]);
    tt_manifest_segment seg = {.id = s.gen, .num_docs = l.ndocs, .num_vectors = l.nvecs};
    /* Drift outlives a compaction that keeps the codebook: the vectors added since it
     * was trained (their live share, in proportion) keep their measured error. */
    if (!s.o.retrain) {
        double w = 0, mse = 0;
        for (uint32_t i = 0; i < s.man.nseg; i++) {
            const tt_manifest_segment *m = &s.man.seg[i];
            if (!m->added_vectors || !m->num_docs)
                continue;
            double live = (double)m->added_vectors * (double)(m->num_docs - m->num_deleted) /
                          (double)m->num_docs;
            w += live;
            mse += live * m->added_mse;
        }
        seg.added_vectors = (uint64_t)(w + 0.5);
        seg.added_mse = w > 0 ? mse / w : 0;
    }
    memcpy(seg.prefix, s.prefix, sizeof seg.prefix);
    next.next_auto_id = l.next_auto_id;
    /* The metadata follows the rows: the live documents keep their order, numbered
     * from 0 (the deleted ones have no row). */
    if (!st && !(st = tt_store_meta_load(&s, &mdb, &mdb_open)) && mdb_open &&
        !(st = tt_mdb_renumber(&mdb)))
        st = tt_store_meta_write(&s, &mdb, &next);
    if (st || (st = tt_manifest_add_segment(&next, &seg)) ||
        (st = tt_store_publish(&s, &next)))
        goto done;
    if (stats) {
        stats->generation = s.gen;
        stats->live_docs = l.ndocs;
        stats->segments = 1;
        for (uint32_t i = 0; i < s.man.nseg; i++)
            stats->deleted += s.man.seg[i].num_deleted;
        stats->seconds = tt_now() - s.t0;
    }
done:
    if (mdb_open)
        tt_mdb_free(&mdb);
    tt_store_seg_files_close(&rd.f);
    free(rd.res);
    tt_store_live_free(&l);
    tt_manifest_free(&next);
    tt_build_free(&b);
    tt_index_close(cb);
    return tt_store_end(&s, st);
}

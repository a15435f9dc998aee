/* Sharded indexes (doc/format.md, "Sharded indexes"): the SHARDS file at the top of a
 * sharded index, and the build's writing of its shards. A shard is an ordinary index
 * directory (shard-NNNN) holding a contiguous range of the documents, encoded with the
 * codebook (centroids and codec) every shard shares; SHARDS names the shards in row
 * order with their counts and the codebook's checksums. */
#include "index/build.h"
#include "index/shards.h"
#include "io/dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

void tt_shard_name(uint32_t s, char *buf) {
    snprintf(buf, TT_MANIFEST_NAME_LEN, "shard-%04u", s);
}

/* ------------------------------------------------------------ SHARDS */

int tt_shards_write(const char *dir, const tt_shards_file *f, uint64_t *payload_hash) {
    tt_fwriter w;
    uint64_t size, docs = 0, vecs = 0;
    int st = tt_fw_open(&w, dir, TT_F_SHARDS, "SHRD");
    for (uint32_t s = 0; s < f->n && !st; s++) {
        uint8_t e[TT_SHARD_ENTRY] = {0};
        memcpy(e, f->e[s].name, strnlen(f->e[s].name, TT_MANIFEST_NAME_LEN - 1));
        tt_wr64(e + 32, f->e[s].num_docs);
        tt_wr64(e + 40, f->e[s].num_vectors);
        tt_wr64(e + 48, f->e[s].centroids_hash);
        tt_wr64(e + 56, f->e[s].codec_hash);
        docs += f->e[s].num_docs;
        vecs += f->e[s].num_vectors;
        st = tt_fw_write(&w, e, sizeof e);
    }
    if (!st)
        st = tt_fw_finish(&w, f->n, docs, vecs, &size);
    if (!st && payload_hash)
        *payload_hash = w.h.payload_hash;
    tt_fw_abort(&w);
    return st;
}

int tt_shards_read(const char *dir, tt_shards_file *f) {
    memset(f, 0, sizeof *f);
    tt_fmap m;
    int st = tt_fmap_open(&m, dir, TT_F_SHARDS, "SHRD", TT_MAP_WHOLE);
    if (st)
        return st;
    const uint64_t S = m.h.a;
    if ((st = tt_fmap_check_payload(&m, NULL, NULL)))
        goto done;
    if (S < 1 || S > TT_MAX_SHARDS || m.h.payload_bytes != S * TT_SHARD_ENTRY) {
        st = tt_err(TT_ECORRUPT, "%s: %llu shards in %llu bytes", m.path, (unsigned long long)S,
                    (unsigned long long)m.h.payload_bytes);
        goto done;
    }
    f->e = tt_calloc(S, sizeof *f->e, "shard list");
    if (!f->e) {
        st = TT_ENOMEM;
        goto done;
    }
    f->n = (uint32_t)S;
    uint64_t docs = 0, vecs = 0;
    for (uint32_t s = 0; s < f->n; s++) {
        const uint8_t *e = m.payload + (uint64_t)s * TT_SHARD_ENTRY;
        tt_shard_entry *x = &f->e[s];
        memcpy(x->name, e, 32);
        x->name[TT_MANIFEST_NAME_LEN - 1] = '\0';
        char want[TT_MANIFEST_NAME_LEN];
        tt_shard_name(s, want);
        /* Shards are named by their position, never a path: nothing outside DIR. */
        if (strcmp(x->name, want) || memchr(e + strlen(want), 0, 32 - strlen(want)) == NULL) {
            st = tt_err(TT_ECORRUPT, "%s: shard %u is named '%.32s', expected %s", m.path, s,
                        x->name, want);
            goto done;
        }
        x->num_docs = tt_rd64(e + 32);
        x->num_vectors = tt_rd64(e + 40);
        x->centroids_hash = tt_rd64(e + 48);
        x->codec_hash = tt_rd64(e + 56);
        if (x->num_docs == 0 || x->num_vectors < x->num_docs || docs + x->num_docs < docs ||
            vecs + x->num_vectors < vecs) {
            st = tt_err(TT_ECORRUPT, "%s: shard %u has bad counts", m.path, s);
            goto done;
        }
        docs += x->num_docs;
        vecs += x->num_vectors;
        if (s && (x->centroids_hash != f->e[0].centroids_hash ||
                  x->codec_hash != f->e[0].codec_hash)) {
            st = tt_err(TT_ECORRUPT, "%s: shard %u names another codebook than shard 0", m.path,
                        s);
            goto done;
        }
    }
    if (docs != m.h.b || vecs != m.h.c) {
        st = tt_err(TT_ECORRUPT, "%s: the shards' counts do not add up to the header's", m.path);
        goto done;
    }
    f->num_docs = docs;
    f->num_vectors = vecs;
done:
    if (st)
        tt_shards_file_free(f);
    tt_fmap_close(&m);
    return st;
}

void tt_shards_file_free(tt_shards_file *f) {
    free(f->e);
    memset(f, 0, sizeof *f);
}

bool tt_is_sharded_dir(const char *dir) {
    char *p = tt_path_join(dir, TT_F_SHARDS);
    struct stat sb;
    bool yes = p && stat(p, &sb) == 0;
    free(p);
    return yes;
}

/* ------------------------------------------------------- the build's side */

/* Documents [d0, d1) of a build's input as an input of their own: the vectors are read
 * from the parent, and, when it has no ids, the ids are the global row numbers (so a
 * shard's documents keep the names they have in the unsharded index). */
typedef struct view {
    tt_input in;
    const tt_input *parent;
    uint64_t v0;
    uint64_t *doc_vec0, *id_off;
    char *blob;
    char source[600];
} view;

static int view_read(void *user, uint64_t v0, uint64_t n, float *out) {
    const view *v = user;
    return tt_input_read(v->parent, v->v0 + v0, n, out);
}

static void view_free(view *v) {
    free(v->doc_vec0);
    free(v->id_off);
    free(v->blob);
    memset(v, 0, sizeof *v);
}

static int view_make(view *v, const tt_input *p, uint64_t d0, uint64_t d1, uint32_t s) {
    memset(v, 0, sizeof *v);
    const uint64_t D = d1 - d0;
    v->parent = p;
    v->v0 = p->doc_vec0[d0];
    v->doc_vec0 = tt_alloc(D + 1, sizeof *v->doc_vec0, "shard");
    v->id_off = tt_alloc(D + 1, sizeof *v->id_off, "shard");
    if (!v->doc_vec0 || !v->id_off) {
        view_free(v);
        return TT_ENOMEM;
    }
    for (uint64_t d = 0; d <= D; d++)
        v->doc_vec0[d] = p->doc_vec0[d0 + d] - v->v0;
    if (p->ids_blob) {
        for (uint64_t d = 0; d <= D; d++)
            v->id_off[d] = p->id_off[d0 + d] - p->id_off[d0];
        v->in.ids_blob = p->ids_blob + p->id_off[d0];
    } else {
        v->blob = tt_alloc(D, 21, "shard ids");
        if (!v->blob) {
            view_free(v);
            return TT_ENOMEM;
        }
        uint64_t pos = 0;
        for (uint64_t d = 0; d < D; d++) {
            v->id_off[d] = pos;
            pos += (uint64_t)snprintf(v->blob + pos, 21, "%llu", (unsigned long long)(d0 + d)) + 1;
        }
        v->id_off[D] = pos;
        v->in.ids_blob = v->blob;
    }
    v->in.id_off = v->id_off;
    v->in.dim = p->dim;
    v->in.num_docs = D;
    v->in.num_vectors = p->doc_vec0[d1] - v->v0;
    v->in.doclens = p->doclens + d0;
    v->in.doc_vec0 = v->doc_vec0;
    v->in.ids_path = p->ids_path;
    v->in.read_fn = view_read;
    v->in.read_user = v;
    if (p->input_lens) {
        v->in.input_lens = p->input_lens + d0;
        for (uint64_t d = 0; d < D; d++)
            v->in.input_vectors += p->input_lens[d0 + d];
    }
    const char *src = p->nfiles ? p->files[0].path : p->source ? p->source : "input";
    snprintf(v->source, sizeof v->source, "%s (shard %u: documents %llu..%llu)", src, s,
             (unsigned long long)d0, (unsigned long long)d1 - 1);
    v->in.source = v->source;
    return TT_OK;
}

static void free_ivf(builder *b) {
    free(b->ivf_len);
    free(b->ivf_bytes);
    free(b->ivf_last);
    free(b->stamp);
    b->ivf_len = NULL;
    b->ivf_bytes = NULL;
    b->ivf_last = b->stamp = NULL;
}

/* One shard: an index directory of its own in the build directory. */
static int write_shard(builder *b, tt_input *all, uint32_t s, uint32_t S, double t0,
                       tt_shard_entry *e) {
    const uint64_t D = all->num_docs, d0 = D * s / S, d1 = D * (s + 1) / S;
    char name[TT_MANIFEST_NAME_LEN];
    tt_shard_name(s, name);
    view v;
    int st = view_make(&v, all, d0, d1, s);
    if (st)
        return st;
    char *path = tt_path_join(b->tmp, name);
    if (!path) {
        view_free(&v);
        return tt_err(TT_ENOMEM, "%s: out of memory", b->tmp);
    }
    if (mkdirat(b->tmp_fd, name, 0777) != 0 && errno != EEXIST) {
        st = tt_err_errno(TT_EIO, errno, "%s: cannot create", path);
        goto done;
    }
    tt_manifest_free(&b->man);
    memset(&b->man, 0, sizeof b->man);
    free_ivf(b);
    b->wdir = path;
    b->in = &v.in;
    if ((st = tt_build_write_codebook(b)) || (st = tt_build_segment(b)) ||
        (b->o->sparse && (st = tt_build_write_sparse_range(b, b->o->sparse, d0, d1 - d0))) ||
        (b->o->sparse && (st = tt_build_write_vocab(b, b->o->sparse))) ||
        (st = tt_build_write_meta(b, tt_now() - t0)))
        goto done;
    if (b->mdb) { /* the documents' metadata, renumbered as the shard's rows */
        tt_mdb part;
        tt_manifest_entry me;
        if ((st = tt_mdb_slice(b->mdb, d0, d1 - d0, &part)))
            goto done;
        st = tt_mdb_write(&part, path, TT_F_METADATA, &me);
        tt_mdb_free(&part);
        if (st || (st = tt_manifest_add(&b->man, &me)))
            goto done;
    }
    tt_manifest_segment seg = {.id = 0, .num_docs = v.in.num_docs,
                               .num_vectors = v.in.num_vectors};
    b->man.generation = 1;
    b->man.next_auto_id = D; /* ids without a file are global row numbers: count on */
    if ((st = tt_manifest_add_segment(&b->man, &seg)) ||
        (st = tt_manifest_publish(path, &b->man)) || (st = tt_fsync_dir(path)))
        goto done;
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->num_docs = v.in.num_docs;
    e->num_vectors = v.in.num_vectors;
    e->centroids_hash = tt_manifest_kind_hash(&b->man, "CENT");
    e->codec_hash = tt_manifest_kind_hash(&b->man, "CODC");
    for (uint32_t i = 0; i < b->man.n; i++)
        b->st.index_bytes += strcmp(b->man.e[i].name, TT_F_ORIGINALS) ? b->man.e[i].size : 0;
done:
    b->in = all;
    b->wdir = b->tmp;
    free(path);
    view_free(&v);
    return st;
}

int tt_build_shards(builder *b, uint32_t first, uint32_t stride, double t0) {
    const uint32_t S = b->o->shards;
    tt_input *all = b->in;
    if (S > all->num_docs)
        return tt_err(TT_EINVAL, "%u shards, but the input has only %llu documents", S,
                      (unsigned long long)all->num_docs);
    tt_shards_file f = {.n = S};
    f.e = tt_calloc(S, sizeof *f.e, "shard list");
    if (!f.e)
        return TT_ENOMEM;
    int st = TT_OK;
    for (uint32_t s = first; s < S && !st; s += stride) {
        st = write_shard(b, all, s, S, t0, &f.e[s]);
        if (!st)
            st = tt_build_progress(b, "shards", s + 1, S);
    }
    if (!st && first == 0 && stride == 1 && !b->o->group)
        st = tt_build_shards_finish(b, &f);
    tt_shards_file_free(&f);
    return st;
}

int tt_build_shards_finish(builder *b, const tt_shards_file *f) {
    int st = tt_shards_write(b->tmp, f, NULL);
    if (!st)
        st = tt_fsync_dir(b->tmp);
    return st;
}

void tt_build_shards_discard(builder *b) {
    if (!b->tmp || b->tmp_fd < 0)
        return;
    for (uint32_t s = 0; s < b->o->shards; s++) {
        char name[TT_MANIFEST_NAME_LEN];
        tt_shard_name(s, name);
        char *p = tt_path_join(b->tmp, name);
        if (p)
            (void)tt_remove_ours(b->tmp_fd, name, p);
        free(p);
    }
    (void)unlinkat(b->tmp_fd, TT_F_SHARDS, 0);
}

/* ------------------------------------------------- a build by a group */

/* Every process of the group calls this at the same points in the same order: the
 * statuses are combined (and buf copied from rank 0). A process that failed keeps its
 * own error; one that did not learns that another did. */
static int group_sync(builder *b, int st, void *buf, size_t n, const char *out_dir) {
    const tt_build_group *g = b->o->group;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", st ? tt_last_error() : "");
    int all = g->sync(g->user, st, buf, n);
    if (st)
        return tt_err(st, "%s", msg);
    if (all)
        return tt_err(TT_EIO, "%s: another process of the build failed; nothing is published",
                      out_dir);
    return TT_OK;
}

/* Rank 0's view of a shard another process wrote: what its MANIFEST says. */
static int collect_shard(builder *b, uint32_t s, tt_shard_entry *e) {
    char name[TT_MANIFEST_NAME_LEN];
    tt_shard_name(s, name);
    char *p = tt_path_join(b->tmp, name);
    if (!p)
        return tt_err(TT_ENOMEM, "%s: out of memory", b->tmp);
    tt_manifest m;
    memset(&m, 0, sizeof m);
    int st = tt_manifest_read(p, &m);
    free(p);
    if (st)
        return st;
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    for (uint32_t i = 0; i < m.nseg; i++) {
        e->num_docs += m.seg[i].num_docs;
        e->num_vectors += m.seg[i].num_vectors;
    }
    e->centroids_hash = tt_manifest_kind_hash(&m, "CENT");
    e->codec_hash = tt_manifest_kind_hash(&m, "CODC");
    for (uint32_t i = 0; i < m.n; i++)
        b->st.index_bytes += strcmp(m.e[i].name, TT_F_ORIGINALS) ? m.e[i].size : 0;
    tt_manifest_free(&m);
    return TT_OK;
}

int tt_build_in_group(builder *b, const char *out_dir, tt_input *in, tt_pooled **pool,
                      double t0, int st0) {
    const tt_build_group *g = b->o->group;
    const bool root = g->rank == 0;
    const uint32_t S = b->o->shards;
    char path[4096] = "";
    int st = !st0 && root ? tt_build_prepare_output(b, out_dir) : st0;
    if (!st && root && snprintf(path, sizeof path, "%s", b->tmp) >= (int)sizeof path)
        st = tt_err(TT_EINVAL, "%s: path too long", b->tmp);
    if ((st = group_sync(b, st, path, sizeof path, out_dir)))
        return st;
    if (!root) { /* the build directory rank 0 made; it removes it if anything fails */
        b->tmp = strdup(path);
        if (!b->tmp)
            st = tt_err(TT_ENOMEM, "out of memory");
        else if ((b->tmp_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
            st = tt_err_errno(TT_EIO, errno, "%s: cannot open the group's build directory "
                              "(every process must see the same file system)", path);
    }
    if (!st)
        st = tt_build_pool(b, in, pool);
    b->in = *pool ? tt_pooled_input(*pool) : in;
    b->wdir = b->tmp;
    if (!st && S > b->in->num_docs)
        st = tt_err(TT_EINVAL, "%u shards, but the input has only %llu documents", S,
                    (unsigned long long)b->in->num_docs);
    /* Every process takes part in the training (distributed k-means, with a reduce);
     * rank 0 leaves the codebook in the build directory for the others. */
    st = tt_build_train_group(b, st);
    if (!st && root) {
        if (!(st = tt_build_write_codebook(b)) &&
            !(st = tt_build_write_meta(b, tt_now() - t0))) {
            b->man.generation = 1;
            st = tt_manifest_publish(b->tmp, &b->man);
        }
    }
    if ((st = group_sync(b, st, NULL, 0, out_dir)))
        return st;
    if (!root) {
        tt_manifest m;
        tt_index *cb = NULL;
        memset(&m, 0, sizeof m);
        if (!(st = tt_manifest_read(b->tmp, &m)) &&
            !(st = tt_index_open_codebook(&cb, b->tmp, &m)))
            st = tt_build_codebook_from(b, cb);
        tt_index_close(cb);
        tt_manifest_free(&m);
    }
    /* Each process writes its shards: rank, rank + size, ... */
    if (!st)
        st = tt_build_shards(b, g->rank, g->size, t0);
    if ((st = group_sync(b, st, NULL, 0, out_dir)))
        return st;
    if (root) {
        tt_shards_file f = {.n = S};
        f.e = tt_calloc(S, sizeof *f.e, "shard list");
        st = f.e ? TT_OK : TT_ENOMEM;
        b->st.index_bytes = 0;
        for (uint32_t s = 0; s < S && !st; s++)
            st = collect_shard(b, s, &f.e[s]);
        if (!st)
            st = tt_build_shards_finish(b, &f);
        tt_shards_file_free(&f);
        /* The codebook's own copy goes: each shard has one. */
        const char *top[] = {TT_F_MANIFEST, TT_F_META, TT_F_CENTROIDS, TT_F_CODEC};
        for (size_t i = 0; i < sizeof top / sizeof top[0] && !st; i++)
            if (unlinkat(b->tmp_fd, top[i], 0) != 0)
                st = tt_err_errno(TT_EIO, errno, "%s/%s: cannot remove", b->tmp, top[i]);
        if (!st)
            st = tt_fsync_dir(b->tmp);
        if (!st)
            st = tt_build_publish(b);
    }
    return group_sync(b, st, NULL, 0, out_dir);
}

void tt_shards_remove_stale(int pfd, const char *name, const char *path) {
    int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    for (uint32_t s = 0; s < TT_MAX_SHARDS; s++) {
        char sn[TT_MANIFEST_NAME_LEN];
        tt_shard_name(s, sn);
        struct stat sb;
        if (fstatat(fd, sn, &sb, AT_SYMLINK_NOFOLLOW) != 0)
            break; /* shards are numbered from 0 without gaps */
        char *p = tt_path_join(path, sn);
        if (p && S_ISDIR(sb.st_mode))
            (void)tt_remove_ours(fd, sn, p);
        free(p);
    }
    struct stat sb;
    if (fstatat(fd, TT_F_SHARDS, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode) &&
        tt_written_by_tartan(fd, TT_F_SHARDS))
        (void)unlinkat(fd, TT_F_SHARDS, 0);
    close(fd);
}

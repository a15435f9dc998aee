/* The writer's side of an index (store.h): lock, current generation, id lookup,
 * deletion lists, publication, and removal of the files no generation names.
 *
 * One generation is current: the one MANIFEST names. A change writes its new files
 * (named g<generation>.<kind>.tt, which no earlier generation uses) beside the current
 * ones, fsyncs them, and publishes by writing MANIFEST aside and renaming it (LevelDB's
 * and LMDB's way: one small record switched atomically). Only then are the files the
 * new generation does not name removed; readers that opened the previous generation
 * keep their descriptors and mappings of them (an unlinked file lives while it is
 * open), which is what makes an open index a snapshot without any reader lock. */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

void tt_change_options_init(tt_change_options *o) {
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->memory_bytes = 2ull << 30;
}

int tt_store_options(const tt_change_options *in, tt_change_options *out) {
    tt_change_options_init(out);
    if (in) {
        if (in->struct_size < sizeof(uint32_t) || in->struct_size > sizeof *out)
            return tt_err(TT_EINVAL, "change options: struct_size %u is not a size this library "
                          "knows (initialise them with tt_change_options_init)", in->struct_size);
        memcpy(out, in, in->struct_size);
        out->struct_size = sizeof *out;
    }
    if (out->threads < 0)
        return tt_err(TT_EINVAL, "change options: threads must be >= 0");
    if (out->memory_bytes < (64ull << 20))
        return tt_err(TT_EINVAL, "change options: the memory budget must be at least 64 MiB");
    if (out->pool_factor < 0)
        return tt_err(TT_EINVAL, "change options: the pool factor must be >= 1, or 0 for the "
                      "index's own (got %d)", out->pool_factor);
    return TT_OK;
}

int tt_store_progress(tt_store *s, const char *phase, uint64_t done, uint64_t total) {
    if (s->o.progress)
        s->o.progress(s->o.progress_user, phase, done, total);
    if (s->o.cancel && *s->o.cancel)
        return tt_err(TT_ECANCELED, "%s: change cancelled; the index is as it was", s->dir);
    return TT_OK;
}

/* ------------------------------------------------------------- cleaning up */

/* Removes the index files of the directory that `keep` does not name (and that are
 * not MANIFEST or LOCK): what a killed change left, or what the generation `keep`
 * replaced. With prefix, only files starting with it (this change's, after a failure).
 * Only files tartan wrote (tt_written_by_tartan: regular, never through a link, with
 * tartan's magic), so a file of someone else's under such a name stays. Best effort. */
static void remove_unnamed(tt_store *s, const tt_manifest *keep, const char *prefix) {
    DIR *d = tt_dir_list(s->dfd);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (!tt_is_index_file(n) || !strcmp(n, TT_F_LOCK) || !strcmp(n, TT_F_MANIFEST))
            continue;
        if (prefix ? strncmp(n, prefix, strlen(prefix)) && strcmp(n, "MANIFEST.tmp")
                   : keep && tt_manifest_find(keep, n) != NULL)
            continue;
        if (tt_written_by_tartan(s->dfd, n))
            (void)unlinkat(s->dfd, n, 0);
    }
    closedir(d);
}

void tt_store_discard(tt_store *s) {
    if (s->dfd >= 0 && s->lock.fd >= 0)
        remove_unnamed(s, NULL, s->prefix);
}

int tt_store_end(tt_store *s, int st) {
    if (!s->published && s->dfd >= 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", tt_last_error());
        tt_store_discard(s);
        if (st)
            tt_err(st, "%s", msg);
    }
    tt_store_close(s);
    return st;
}

void tt_store_builder(tt_store *s, const tt_index *cb, tt_input *in, tt_build_options *bo,
                      builder *b) {
    tt_build_options_init(bo);
    bo->normalize = cb->normalized;
    bo->keep_originals = cb->info.keep_originals ? TT_KEEP_F16 : TT_KEEP_NONE;
    bo->codec_tables = cb->codec.kind;
    bo->lloyd_max_rounds = cb->info.lloyd_max_rounds;
    bo->debias = cb->info.debias;
    bo->nbits = (int)cb->nbits;
    bo->assign = cb->info.assign;
    bo->seed = cb->info.seed;
    bo->num_centroids = cb->num_centroids;
    if (cb->info.kmeans_iters >= 1 && cb->info.kmeans_iters <= 1000)
        bo->kmeans_iters = (int)cb->info.kmeans_iters;
    if (cb->info.sample_factor > 0)
        bo->sample_factor = cb->info.sample_factor;
    bo->encoder = cb->info.encoder[0] ? cb->info.encoder : NULL;
    bo->pool_factor = (int)cb->info.pool_factor; /* recorded; pooling is the add's to do */
    bo->threads = s->o.threads;
    bo->memory_bytes = s->o.memory_bytes;
    bo->progress = s->o.progress;
    bo->progress_user = s->o.progress_user;
    bo->cancel = s->o.cancel;
    memset(b, 0, sizeof *b);
    b->op.pfd = b->lock.fd = b->tmp_fd = -1;
    b->o = bo;
    b->debias = bo->debias;
    b->pool_global = cb->info.pool_global;
    b->pool_threshold = cb->info.pool_threshold;
    b->in = in;
    b->dim = cb->dim;
    b->nbits = cb->nbits;
    b->threads = bo->threads ? bo->threads : tt_default_threads();
    uint64_t per_vec = (uint64_t)b->dim * (4 + (bo->keep_originals ? 2 : 0)) + 64;
    b->chunk_vectors = TT_MAX((uint64_t)1024,
                              TT_MIN((uint64_t)1 << 18, bo->memory_bytes / 4 / per_vec));
    b->wdir = s->dir;
    memcpy(b->prefix, s->prefix, sizeof b->prefix);
}

/* --------------------------------------------------------------- opening */

/* A format-1 index: its one segment is described by meta.tt. */
static int v1_segment(tt_store *s) {
    tt_fmap m;
    int st = tt_fmap_open(&m, s->dir, TT_F_META, "META", TT_MAP_WHOLE);
    if (st)
        return st;
    tt_manifest_segment sg;
    memset(&sg, 0, sizeof sg);
    if (!(st = tt_fmap_check_payload(&m, NULL, NULL)) &&
        !(st = tt_meta_u64(&m, "num_docs", 1, UINT64_MAX >> 8, &sg.num_docs)) &&
        !(st = tt_meta_u64(&m, "num_vectors", 1, UINT64_MAX >> 8, &sg.num_vectors)))
        st = tt_manifest_add_segment(&s->man, &sg);
    s->man.next_auto_id = sg.num_docs; /* its ids are the row numbers, or any others */
    tt_fmap_close(&m);
    return st;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Every deletion list of the generation, into each segment's sorted `dead` rows. */
static int load_tombs(tt_store *s) {
    int st = TT_OK;
    for (uint32_t i = 0; i < s->man.n && !st; i++) {
        const tt_manifest_entry *e = &s->man.e[i];
        if (memcmp(e->kind, "TOMB", 4))
            continue;
        tt_fmap f;
        if ((st = tt_fmap_open(&f, s->dir, e->name, "TOMB", TT_MAP_WHOLE)))
            break;
        if (f.size != e->size || f.h.payload_hash != e->payload_hash)
            st = tt_err(TT_ECORRUPT, "%s: does not match the manifest", f.path);
        if (!st)
            st = tt_fmap_check_payload(&f, NULL, NULL);
        if (!st && f.h.payload_bytes != 16 * f.h.a)
            st = tt_err(TT_ECORRUPT, "%s: header disagrees with its size", f.path);
        for (uint64_t k = 0; k < f.h.a && !st; k++) {
            uint64_t sid = tt_rd64(f.payload + 16 * k), row = tt_rd64(f.payload + 16 * k + 8);
            uint32_t j = 0;
            while (j < s->man.nseg && s->man.seg[j].id != sid)
                j++;
            if (j == s->man.nseg || row >= s->man.seg[j].num_docs) {
                st = tt_err(TT_ECORRUPT, "%s: entry %llu names no document of the index", f.path,
                            (unsigned long long)k);
                break;
            }
            tt_store_seg *sg = &s->seg[j];
            uint64_t *d = realloc(sg->dead, (sg->ndead + 1) * sizeof *d);
            if (!d) {
                st = tt_err(TT_ENOMEM, "%s: out of memory", f.path);
                break;
            }
            sg->dead = d;
            sg->dead[sg->ndead++] = row;
        }
        tt_fmap_close(&f);
    }
    for (uint32_t j = 0; j < s->man.nseg && !st; j++) {
        tt_store_seg *sg = &s->seg[j];
        if (sg->ndead > 1)
            qsort(sg->dead, (size_t)sg->ndead, sizeof *sg->dead, cmp_u64);
        for (uint64_t k = 1; k < sg->ndead && !st; k++)
            if (sg->dead[k] == sg->dead[k - 1])
                st = tt_err(TT_ECORRUPT, "%s: document %llu of segment %llu deleted twice",
                            s->dir, (unsigned long long)sg->dead[k], (unsigned long long)sg->m.id);
        if (!st && sg->ndead != sg->m.num_deleted)
            st = tt_err(TT_ECORRUPT, "%s: %llu deletions of segment %llu listed, the manifest "
                        "says %llu", s->dir, (unsigned long long)sg->ndead,
                        (unsigned long long)sg->m.id, (unsigned long long)sg->m.num_deleted);
    }
    return st;
}

int tt_store_open(tt_store *s, const char *dir, const tt_change_options *o) {
    int st;
    memset(s, 0, sizeof *s);
    s->dfd = -1;
    s->lock.fd = -1;
    s->t0 = tt_now();
    if (!dir || !*dir)
        return tt_err(TT_EINVAL, "no index directory given");
    if ((st = tt_store_options(o, &s->o)))
        return st;
    if (!(s->dir = strdup(dir)))
        return tt_err(TT_ENOMEM, "%s: out of memory", dir);
    s->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dfd < 0)
        return errno == ENOENT || errno == ENOTDIR ? tt_index_not_found(dir)
                                                   : tt_err_errno(TT_EIO, errno, "%s", dir);
    /* One writer: the lock lives in the index, so that every change of it (and a build
     * that replaces it) meets it. */
    if ((st = tt_lock_acquire(&s->lock, s->dfd, TT_F_LOCK, dir, "modified")))
        return st;
    if ((st = tt_manifest_read(dir, &s->man)))
        return st == TT_ENOTFOUND ? tt_index_not_found(dir) : st;
    if (s->man.version == 1 && (st = v1_segment(s)))
        return st;
    s->gen = s->man.generation + 1;
    snprintf(s->prefix, sizeof s->prefix, "g%06llu.", (unsigned long long)s->gen);
    /* What a killed change left: files of the next generation (or any other) that the
     * current manifest does not name. We hold the lock: no change is running. */
    remove_unnamed(s, &s->man, NULL);
    /* A change must not build on a generation that lost files: stat them (cheap; the
     * files a change reads are checksummed as they are read). */
    for (uint32_t i = 0; i < s->man.n; i++) {
        struct stat sb;
        const tt_manifest_entry *e = &s->man.e[i];
        if (fstatat(s->dfd, e->name, &sb, 0) != 0)
            return tt_err_errno(TT_ECORRUPT, errno, "%s/%s: named by the manifest but "
                                "missing; the index is damaged", dir, e->name);
        if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != e->size)
            return tt_err(TT_ECORRUPT, "%s/%s: %llu bytes, the manifest says %llu; the index "
                          "is damaged", dir, e->name, (unsigned long long)sb.st_size,
                          (unsigned long long)e->size);
    }
    if (!(s->seg = tt_calloc(s->man.nseg ? s->man.nseg : 1, sizeof *s->seg, "segments")))
        return TT_ENOMEM;
    for (uint32_t i = 0; i < s->man.nseg; i++) {
        s->seg[i].m = s->man.seg[i];
        s->seg[i].f_ids.fd = s->seg[i].f_idmap.fd = -1;
    }
    return load_tombs(s);
}

void tt_store_close(tt_store *s) {
    for (uint32_t i = 0; s->seg && i < s->man.nseg; i++) {
        tt_store_seg *sg = &s->seg[i];
        if (sg->f_ids.path || sg->f_ids.fd >= 0)
            tt_fmap_close(&sg->f_ids);
        if (sg->f_idmap.path || sg->f_idmap.fd >= 0)
            tt_fmap_close(&sg->f_idmap);
        free(sg->perm);
        free(sg->ids_made);
        free(sg->dead);
    }
    free(s->seg);
    tt_manifest_free(&s->man);
    tt_lock_release(&s->lock);
    if (s->dfd >= 0)
        close(s->dfd);
    free(s->dir);
    memset(s, 0, sizeof *s);
    s->dfd = -1;
    s->lock.fd = -1;
}

int tt_store_next(const tt_store *s, tt_manifest *next) {
    int st = tt_manifest_copy(next, &s->man);
    if (!st) {
        next->version = 2;
        next->generation = s->gen;
    }
    return st;
}

/* ------------------------------------------------------------ id lookup */

/* Id of local row r of segment sg (bounds checked: the files are trusted only as far
 * as their headers were checked). */
static const char *seg_id(const tt_store_seg *sg, uint64_t r, size_t *len) {
    uint64_t a = sg->id_off[r], b = sg->id_off[r + 1];
    if (a > b || b > sg->id_bytes) {
        *len = 0;
        return NULL;
    }
    *len = (size_t)(b - a);
    return sg->id_data + a;
}

static int cmp_id(const char *a, size_t la, const char *b, size_t lb) {
    int c = memcmp(a, b, TT_MIN(la, lb));
    return c ? c : la < lb ? -1 : la > lb;
}

static const tt_store_seg *sort_ctx;
static int cmp_rows(const void *pa, const void *pb) {
    size_t la, lb;
    const char *a = seg_id(sort_ctx, *(const uint64_t *)pa, &la);
    const char *b = seg_id(sort_ctx, *(const uint64_t *)pb, &lb);
    return cmp_id(a ? a : "", la, b ? b : "", lb);
}

/* Maps segment i's ids.tt and idmap.tt (headers and sizes checked against the manifest;
 * the data is checked where it is read). A segment without idmap.tt (format 1) gets
 * its sorted rows computed once; one without ids.tt gets its row numbers. */
static int open_ids(tt_store *s, uint32_t i) {
    tt_store_seg *sg = &s->seg[i];
    if (sg->ids_open)
        return TT_OK;
    uint64_t D = sg->m.num_docs;
    char name[TT_MANIFEST_NAME_LEN + 16];
    int st;
    snprintf(name, sizeof name, "%s%s", sg->m.prefix, TT_F_IDS);
    const tt_manifest_entry *e = tt_manifest_find(&s->man, name);
    if (e) {
        if ((st = tt_fmap_open(&sg->f_ids, s->dir, name, "IDS_", TT_MAP_WHOLE)))
            return st;
        const tt_fmap *f = &sg->f_ids;
        if (f->size != e->size || f->h.payload_hash != e->payload_hash || f->h.a != D ||
            f->h.payload_bytes < 8 * (D + 1) || f->h.payload_bytes - 8 * (D + 1) != f->h.b)
            return tt_err(TT_ECORRUPT, "%s: does not match the manifest or the segment", f->path);
        sg->id_off = (const uint64_t *)f->payload;
        sg->id_data = (const char *)f->payload + 8 * (D + 1);
        sg->id_bytes = f->h.b;
    } else {
        const uint64_t *off;
        const char *data;
        if ((st = tt_row_ids(D, &sg->ids_made, &off, &data)))
            return st;
        sg->id_off = off;
        sg->id_data = data;
        sg->id_bytes = off[D];
    }
    snprintf(name, sizeof name, "%s%s", sg->m.prefix, TT_F_IDMAP);
    e = tt_manifest_find(&s->man, name);
    if (e) {
        if ((st = tt_fmap_open(&sg->f_idmap, s->dir, name, "IDMP", TT_MAP_WHOLE)))
            return st;
        const tt_fmap *f = &sg->f_idmap;
        if (f->size != e->size || f->h.payload_hash != e->payload_hash || f->h.a != D ||
            (f->h.b != 4 && f->h.b != 8) || f->h.payload_bytes != D * f->h.b)
            return tt_err(TT_ECORRUPT, "%s: does not match the manifest or the segment", f->path);
        sg->idmap = f->payload;
        sg->width = (uint32_t)f->h.b;
    } else {
        if (!(sg->perm = tt_alloc(D ? D : 1, sizeof *sg->perm, "id map")))
            return TT_ENOMEM;
        for (uint64_t r = 0; r < D; r++)
            sg->perm[r] = r;
        sort_ctx = sg; /* the writer holds the lock: one sort at a time per process */
        qsort(sg->perm, (size_t)D, sizeof *sg->perm, cmp_rows);
        sort_ctx = NULL;
    }
    sg->ids_open = true;
    return TT_OK;
}

static uint64_t sorted_row(const tt_store_seg *sg, uint64_t i) {
    if (sg->perm)
        return sg->perm[i];
    return sg->width == 4 ? tt_rd32(sg->idmap + 4 * i) : tt_rd64(sg->idmap + 8 * i);
}

bool tt_store_is_dead(const tt_store *s, uint32_t i, uint64_t row) {
    const tt_store_seg *sg = &s->seg[i];
    uint64_t lo = 0, hi = sg->ndead;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (sg->dead[mid] < row)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sg->ndead && sg->dead[lo] == row;
}

int tt_store_find(tt_store *s, const char *id, size_t len, uint32_t *seg, uint64_t *row,
                  bool *ever) {
    int st;
    if (ever)
        *ever = false;
    for (uint32_t i = 0; i < s->man.nseg; i++) {
        if ((st = open_ids(s, i)))
            return st;
        const tt_store_seg *sg = &s->seg[i];
        uint64_t lo = 0, hi = sg->m.num_docs;
        while (lo < hi) { /* the first sorted row whose id is >= id */
            uint64_t mid = lo + (hi - lo) / 2, r = sorted_row(sg, mid);
            size_t l;
            const char *x = r < sg->m.num_docs ? seg_id(sg, r, &l) : NULL;
            if (!x)
                return tt_err(TT_ECORRUPT, "%s: the id map or ids of segment %llu are damaged "
                              "(tartan verify names the file)", s->dir,
                              (unsigned long long)sg->m.id);
            if (cmp_id(x, l, id, len) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == sg->m.num_docs)
            continue;
        uint64_t r = sorted_row(sg, lo);
        size_t l;
        const char *x = r < sg->m.num_docs ? seg_id(sg, r, &l) : NULL;
        if (!x || cmp_id(x, l, id, len))
            continue;
        if (ever)
            *ever = true;
        if (!tt_store_is_dead(s, i, r)) {
            *seg = i;
            *row = r;
            return TT_OK;
        }
    }
    return TT_ENOTFOUND; /* not an error: no message */
}

/* ------------------------------------------------------------- deletions */

static int cmp_pair(const void *a, const void *b) {
    const uint64_t *x = a, *y = b;
    if (x[0] != y[0])
        return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

int tt_store_write_tombs(tt_store *s, tt_manifest *next, uint64_t *pairs, size_t n) {
    if (n == 0)
        return TT_OK;
    qsort(pairs, n, 2 * sizeof *pairs, cmp_pair);
    uint8_t *buf = tt_alloc(n, 16, "deletions");
    if (!buf)
        return TT_ENOMEM;
    for (size_t k = 0; k < n; k++) {
        tt_wr64(buf + 16 * k, pairs[2 * k]);
        tt_wr64(buf + 16 * k + 8, pairs[2 * k + 1]);
        for (uint32_t j = 0; j < next->nseg; j++)
            if (next->seg[j].id == pairs[2 * k])
                next->seg[j].num_deleted++;
    }
    int st = tt_store_write_file(s, next, TT_F_TOMBS, "TOMB", buf, n * 16, n);
    free(buf);
    return st;
}

int tt_store_write_file(tt_store *s, tt_manifest *next, const char *file, const char *kind,
                        const void *data, size_t n, uint64_t a) {
    char name[TT_MANIFEST_NAME_LEN];
    snprintf(name, sizeof name, "%s%s", s->prefix, file);
    tt_fwriter w;
    uint64_t size;
    int st = tt_fw_open(&w, s->dir, name, kind);
    if (!st)
        st = tt_fw_write(&w, data, n);
    if (!st)
        st = tt_fw_finish(&w, a, 0, 0, &size);
    if (!st) {
        tt_manifest_entry e;
        memset(&e, 0, sizeof e);
        snprintf(e.name, sizeof e.name, "%s", name);
        memcpy(e.kind, kind, 4);
        e.size = size;
        e.payload_hash = w.h.payload_hash;
        st = tt_manifest_add(next, &e);
    }
    tt_fw_abort(&w);
    return st;
}

/* ------------------------------------------------------------ publishing */

int tt_store_publish(tt_store *s, const tt_manifest *next) {
    int st;
    if ((st = tt_store_progress(s, "publish", 0, 1)))
        return st;
    /* Every file of the change is fsynced (tt_fw_finish); the manifest rename is the
     * one moment the index changes. After it nothing can be cancelled, and nothing the
     * new MANIFEST names may be removed, whatever fails next. */
    if ((st = tt_manifest_publish(s->dir, next)))
        return st;
    s->published = true;
    if ((st = tt_fsync_dirfd(s->dfd, s->dir))) {
        /* The old generation's files stay: after a power failure the old MANIFEST may be
         * what the disk holds. The next change removes them. */
        char why[512];
        snprintf(why, sizeof why, "%s", tt_last_error());
        return tt_err(st, "generation %llu is published, but it may not survive a power "
                      "failure: %s", (unsigned long long)s->gen, why);
    }
    remove_unnamed(s, next, NULL);
    if (s->o.progress)
        s->o.progress(s->o.progress_user, "publish", 1, 1);
    return TT_OK;
}

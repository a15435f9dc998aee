/* tartan serve: the named indexes and their snapshots.
 *
 * An open tt_index is a snapshot of one generation (doc/format.md, "Snapshots"). The
 * registry holds, per index, the current snapshot with a reference count: a request
 * acquires it, searches, and releases it, so a request that started on generation N
 * finishes on N even if N+1 is published meanwhile; the last release of a replaced
 * snapshot closes it. A change is noticed by stat(DIR/MANIFEST): every publication
 * renames a new MANIFEST into place (a new inode, mtime and ctime), whoever made it
 * (this server, or `tartan add` in another process). The stat runs at most every
 * check_interval seconds per index; one request then opens the new generation while
 * the others go on with the old one, and swaps it in. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void snap_free(srv_snap *s) {
    for (size_t i = 0; i < s->nctx; i++)
        tt_search_ctx_free(s->ctx[i]);
    free(s->ctx);
    pthread_mutex_destroy(&s->mu);
    tt_index_close(s->idx);
    free(s);
}

void srv_snap_release(srv_snap *s) {
    if (s && atomic_fetch_sub(&s->refs, 1) == 1)
        snap_free(s);
}

static int snap_open(const char *dir, const tt_open_options *oo, srv_snap **out) {
    srv_snap *s = calloc(1, sizeof *s);
    if (!s)
        return TT_ENOMEM;
    int st = tt_index_open(&s->idx, dir, oo);
    if (st == TT_OK)
        st = tt_index_get_info(s->idx, &s->info);
    if (st) {
        tt_index_close(s->idx);
        free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->refs, 1); /* the registry's reference */
    *out = s;
    return TT_OK;
}

static void manifest_stat(const char *dir, struct stat *sb) {
    char p[4200];
    snprintf(p, sizeof p, "%s/MANIFEST", dir);
    if (stat(p, sb))
        memset(sb, 0, sizeof *sb);
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

int srv_registry_open(srv_registry *r, size_t n, char *const *names, char *const *dirs,
                      const tt_open_options *oo, char *err, size_t errlen) {
    r->ix = calloc(n ? n : 1, sizeof *r->ix);
    r->n = 0;
    r->oo = *oo;
    if (!r->ix) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        srv_index *x = &r->ix[i];
        for (size_t j = 0; j < i; j++)
            if (!strcmp(r->ix[j].name, names[i])) {
                snprintf(err, errlen, "two indexes are named '%s' (--index NAME=DIR)", names[i]);
                srv_registry_close(r);
                return -1;
            }
        struct stat sb;
        manifest_stat(dirs[i], &sb);
        srv_snap *s = NULL;
        int st = snap_open(dirs[i], oo, &s);
        if (st) {
            const char *m = tt_last_error();
            snprintf(err, errlen, "index '%s' (%s) does not open: %s", names[i], dirs[i],
                     m && *m ? m : tt_strerror(st));
            srv_registry_close(r);
            return -1;
        }
        x->name = strdup(names[i]);
        x->dir = strdup(dirs[i]);
        pthread_mutex_init(&x->mu, NULL);
        pthread_mutex_init(&x->write_mu, NULL);
        x->cur = s;
        x->sig = sb;
        x->checked = srv_now();
        r->n++;
        if (!x->name || !x->dir) {
            snprintf(err, errlen, "out of memory");
            srv_registry_close(r);
            return -1;
        }
    }
    return 0;
}

void srv_registry_close(srv_registry *r) {
    for (size_t i = 0; i < r->n; i++) {
        srv_index *x = &r->ix[i];
        srv_snap_release(x->cur);
        pthread_mutex_destroy(&x->mu);
        pthread_mutex_destroy(&x->write_mu);
        free(x->name);
        free(x->dir);
    }
    free(r->ix);
    r->ix = NULL;
    r->n = 0;
}

srv_index *srv_registry_find(srv_registry *r, const char *name) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->ix[i].name, name))
            return &r->ix[i];
    return NULL;
}

srv_snap *srv_snap_acquire(srv_registry *r, srv_index *ix, bool force) {
    double now = srv_now();
    pthread_mutex_lock(&ix->mu);
    srv_snap *s = ix->cur;
    atomic_fetch_add(&s->refs, 1);
    bool look = force || (!ix->reopening && now - ix->checked >= r->check_interval);
    if (!look) {
        pthread_mutex_unlock(&ix->mu);
        return s;
    }
    ix->checked = now;
    struct stat sb;
    manifest_stat(ix->dir, &sb);
    if (!force && same_file(&sb, &ix->sig)) {
        pthread_mutex_unlock(&ix->mu);
        return s;
    }
    bool mine = !ix->reopening;
    ix->reopening = true;
    pthread_mutex_unlock(&ix->mu);

    /* The stat came first: if another generation is published during the open, the
     * next look sees a MANIFEST unlike sb and opens again. */
    srv_snap *fresh = NULL;
    int st = snap_open(ix->dir, &r->oo, &fresh);
    if (st) {
        const char *m = tt_last_error();
        fprintf(stderr, "tartan serve: index '%s': the new generation does not open (still "
                "serving generation %llu): %s\n", ix->name,
                (unsigned long long)s->info.generation, m && *m ? m : tt_strerror(st));
        if (r->metrics)
            atomic_fetch_add(&r->metrics->reopen_errors, 1);
    }
    pthread_mutex_lock(&ix->mu);
    if (mine)
        ix->reopening = false;
    if (st) {
        ix->checked = now + 1.0; /* retry in a second, not on every request */
        pthread_mutex_unlock(&ix->mu);
        return s;
    }
    srv_snap *old = NULL;
    if (fresh->info.generation >= ix->cur->info.generation) {
        old = ix->cur;
        ix->cur = fresh;
        ix->sig = sb;
    } else {
        old = fresh; /* a racing reopen already installed a newer one */
    }
    srv_snap *use = ix->cur;
    atomic_fetch_add(&use->refs, 1);
    pthread_mutex_unlock(&ix->mu);
    srv_snap_release(old);
    srv_snap_release(s);
    return use;
}

tt_search_ctx *srv_ctx_get(srv_snap *s, int *status) {
    tt_search_ctx *c = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->nctx)
        c = s->ctx[--s->nctx];
    pthread_mutex_unlock(&s->mu);
    if (c)
        return c;
    *status = tt_search_ctx_new(s->idx, &c);
    return *status ? NULL : c;
}

void srv_ctx_put(srv_snap *s, tt_search_ctx *ctx) {
    pthread_mutex_lock(&s->mu);
    if (s->nctx == s->capctx) {
        size_t nc = s->capctx ? 2 * s->capctx : 8;
        tt_search_ctx **p = realloc(s->ctx, nc * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&s->mu);
            tt_search_ctx_free(ctx);
            return;
        }
        s->ctx = p;
        s->capctx = nc;
    }
    s->ctx[s->nctx++] = ctx;
    pthread_mutex_unlock(&s->mu);
}

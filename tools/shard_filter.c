/* Filters over a sharded index (a plain one is one shard): --where over every open
 * shard's metadata.tt and --filter-ids over their ids, as one filter over the global
 * rows (tt_sharded_search_batch), and a result's metadata by global row. Used by
 * tartan search and tartan-mpi search, whose ranks each open only their shards. */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct cli_smeta {
    uint32_t n;
    tt_metadata **md;  /* per open shard */
    uint64_t *first;   /* its first global row */
    uint64_t *rows;    /* its rows */
};

int cli_smeta_open(const char *who, const tt_sharded *sh, cli_smeta **out) {
    const uint32_t S = tt_sharded_num_open(sh);
    cli_smeta *m = calloc(1, sizeof *m);
    int st = TT_OK;
    if (!m || !(m->md = calloc(S ? S : 1, sizeof *m->md)) ||
        !(m->first = calloc(S ? S : 1, sizeof *m->first)) ||
        !(m->rows = calloc(S ? S : 1, sizeof *m->rows))) {
        fprintf(stderr, "%s: error: out of memory\n", who);
        cli_smeta_close(m);
        return -1;
    }
    for (uint32_t i = 0; i < S && !st; i++) {
        const tt_index *idx = tt_sharded_shard(sh, i, NULL, &m->first[i]);
        tt_index_info info;
        tt_index_get_info(idx, &info);
        m->rows[i] = info.num_docs;
        st = tt_metadata_open(idx, &m->md[i]);
        m->n = i + 1;
    }
    if (st) {
        fprintf(stderr, "%s: error: %s%s\n", who, tt_last_error(),
                tt_sharded_num_shards(sh) > 1 ? " (a sharded index has metadata when it was "
                                                "built, or resharded, with --metadata)"
                                              : "");
        cli_smeta_close(m);
        return -1;
    }
    *out = m;
    return 0;
}

void cli_smeta_close(cli_smeta *m) {
    if (!m)
        return;
    for (uint32_t i = 0; m->md && i < m->n; i++)
        tt_metadata_close(m->md[i]);
    free(m->md);
    free(m->first);
    free(m->rows);
    free(m);
}

int cli_smeta_json(cli_smeta *m, uint64_t row, char **json) {
    for (uint32_t i = 0; i < m->n; i++)
        if (row >= m->first[i] && row - m->first[i] < m->rows[i])
            return tt_metadata_json(m->md[i], row - m->first[i], json);
    return tt_metadata_json(m->md[0], UINT64_MAX, json); /* TT_EINVAL: not a row here */
}

/* Adds shard filter f (rows of the shard starting at global row first) to g. */
static int add_rows(tt_filter *g, const tt_filter *f, uint64_t first) {
    int st = TT_OK;
    for (uint64_t r = 0; r < tt_filter_num_rows(f) && !st; r++)
        if (tt_filter_has(f, r))
            st = tt_filter_add(g, first + r);
    return st;
}

/* --where over every open shard's metadata, as one filter over the global rows. */
static int where_sharded(const tt_sharded *sh, cli_smeta *md, const char *expr,
                         tt_filter **out) {
    tt_filter *g = NULL;
    int st = tt_filter_new(&g, tt_sharded_num_docs(sh));
    for (uint32_t i = 0; i < md->n && !st; i++) {
        tt_filter *f = NULL;
        if (!(st = tt_metadata_where(md->md[i], expr, &f)))
            st = add_rows(g, f, md->first[i]);
        tt_filter_free(f);
    }
    if (st) {
        tt_filter_free(g);
        return st;
    }
    *out = g;
    return TT_OK;
}

/* tt_filter_from_ids over every open shard of sh, as one filter over the global rows;
 * *found: the ids that name a live document of these shards. */
static int ids_sharded(const tt_sharded *sh, const char *const *ids, size_t n, tt_filter **out,
                       uint64_t *found) {
    const uint32_t S = tt_sharded_num_open(sh);
    tt_filter *g = NULL;
    int st = tt_filter_new(&g, tt_sharded_num_docs(sh));
    *found = 0;
    for (uint32_t i = 0; i < S && !st; i++) {
        uint64_t first = 0, unk = 0;
        const tt_index *idx = tt_sharded_shard(sh, i, NULL, &first);
        tt_filter *f = NULL;
        if ((st = tt_filter_from_ids(idx, ids, n, &f, &unk)))
            break;
        *found += n - unk; /* ids are unique across the shards */
        st = add_rows(g, f, first);
        tt_filter_free(f);
    }
    if (st) {
        tt_filter_free(g);
        return st;
    }
    *out = g;
    return TT_OK;
}

void cli_free_ids(char **ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

int cli_shard_filter(const char *who, const tt_sharded *sh, cli_smeta *md, const char *where,
                     const char *ids_path, tt_filter **out, size_t *nids, uint64_t *found) {
    tt_filter *w = NULL, *f = NULL;
    int st;
    *out = NULL;
    *nids = 0;
    *found = 0;
    if (where && (st = where_sharded(sh, md, where, &w))) {
        fprintf(stderr, "%s: error: %s\n", who, tt_last_error());
        return -1;
    }
    if (ids_path) {
        char **ids = NULL;
        size_t n = 0, cap = 0;
        if (cli_read_lines(who, ids_path, &ids, &n, &cap) != CLI_OK) {
            cli_free_ids(ids, n);
            tt_filter_free(w);
            return -1;
        }
        st = ids_sharded(sh, (const char *const *)ids, n, &f, found);
        cli_free_ids(ids, n);
        *nids = n;
        if (st) {
            fprintf(stderr, "%s: error: %s\n", who, tt_last_error());
            tt_filter_free(w);
            return -1;
        }
    }
    if (w && f) { /* both: the documents allowed by both */
        st = tt_filter_intersect(w, f);
        tt_filter_free(f);
        f = NULL;
        if (st) {
            fprintf(stderr, "%s: error: %s\n", who, tt_last_error());
            tt_filter_free(w);
            return -1;
        }
    }
    *out = w ? w : f;
    return 0;
}

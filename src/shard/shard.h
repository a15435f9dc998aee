/* A sharded index opened for search (src/shard/): some or all of its shards, each an
 * open tt_index, with the first global row of each; and the merge of per-shard top-k
 * lists (doc/format.md, "Sharded indexes"; doc/scale.md). */
#ifndef TT_SHARD_H
#define TT_SHARD_H

#include "index/index.h"
#include "index/shards.h"

struct tt_sharded {
    char *dir;
    uint32_t num_shards;    /* in SHARDS (1 for a plain index opened as one shard) */
    uint64_t num_docs, num_vectors;
    uint64_t *first_row;    /* num_shards + 1: global row of each shard's row 0 */
    uint32_t nopen;         /* the shards this process opened */
    uint32_t *open_id;      /* nopen: their numbers, ascending */
    tt_index **idx;         /* nopen */
};

/* TT_EINVAL (naming who) unless gf (NULL: none) is over sh's global rows. */
int tt_sharded_check_filter(const char *who, const tt_sharded *sh, const tt_filter *gf);
/* A filter over the global rows (NULL: none) as one filter per open shard over its own
 * rows: *out NULL for gf NULL, else nopen filters (free with tt_sharded_filters_free). */
int tt_sharded_split_filter(const tt_sharded *sh, const tt_filter *gf, tt_filter ***out);
void tt_sharded_filters_free(const tt_sharded *sh, tt_filter **f);

#endif

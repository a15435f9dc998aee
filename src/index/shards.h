/* Sharded indexes (doc/format.md, "Sharded indexes"): the SHARDS file and the build's
 * writing of the shards (src/index/shards.c). */
#ifndef TT_INDEX_SHARDS_H
#define TT_INDEX_SHARDS_H

#include "io/file.h"

#define TT_F_SHARDS "SHARDS"
#define TT_SHARD_ENTRY 64
#define TT_MAX_SHARDS 4096u

typedef struct tt_shard_entry {
    char name[TT_MANIFEST_NAME_LEN]; /* "shard-NNNN", its position */
    uint64_t num_docs, num_vectors;
    uint64_t centroids_hash, codec_hash; /* payload XXH64 of its centroids and codec */
} tt_shard_entry;

typedef struct tt_shards_file {
    uint32_t n;
    tt_shard_entry *e;
    uint64_t num_docs, num_vectors; /* sums */
} tt_shards_file;

/* The directory name of shard s: "shard-NNNN" (TT_MANIFEST_NAME_LEN bytes). */
void tt_shard_name(uint32_t s, char *buf);
/* Writes dir/SHARDS (fsynced; the caller fsyncs dir). */
int tt_shards_write(const char *dir, const tt_shards_file *f, uint64_t *payload_hash);
/* Reads and checks dir/SHARDS: checksums, names by position, counts that add up, one
 * codebook. TT_ENOTFOUND when it is absent, TT_ECORRUPT naming it. */
int tt_shards_read(const char *dir, tt_shards_file *f);
void tt_shards_file_free(tt_shards_file *f);
/* Whether dir holds a SHARDS file (it is a sharded index, or a damaged one). */
bool tt_is_sharded_dir(const char *dir);

#endif

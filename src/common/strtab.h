/* Hash tables of strings: interned ids (qrels, runs, and the duplicate checks of
 * document and query ids). In memory only. */
#ifndef TT_STRTAB_H
#define TT_STRTAB_H

#include "common/common.h"

/* 64-bit string hash (multiply-xorshift, MurmurHash3's fmix64 finish) and the finish. */
uint64_t tt_str_hash(const char *s, size_t n);
uint64_t tt_fmix64(uint64_t h);

/* Interned strings: index i <-> string, stored NUL-terminated back to back in an
 * arena (offsets, not pointers, so the arena can grow; off[n] is the arena length, so
 * string i has length off[i+1] - off[i] - 1). Lookup is linear probing over a
 * power-of-two array of 64-bit slots holding (hash32 << 32 | index + 1), 0 = empty,
 * kept at most 70% full. Keeping the hash in the slot means a probe touches the
 * arena only on a full hash match: one cache miss per lookup of a new string, which
 * is what dominates loading a large run (10M lines). */
typedef struct tt_strtab {
    char *arena;
    uint64_t arena_len, arena_cap;
    uint64_t *off; /* n + 1 entries */
    uint32_t n, cap;
    uint64_t *slot;
    uint64_t nslot;
} tt_strtab;

#define TT_ST_NONE UINT32_MAX

static inline const char *tt_st_str(const tt_strtab *t, uint32_t i) {
    return t->arena + t->off[i];
}
static inline size_t tt_st_len(const tt_strtab *t, uint32_t i) {
    return (size_t)(t->off[i + 1] - t->off[i] - 1);
}

void tt_st_free(tt_strtab *t);
/* Index of s[0..n), or TT_ST_NONE. */
uint32_t tt_st_find(const tt_strtab *t, const char *s, size_t n);
/* Interns s[0..n); *id receives its index and *added (may be NULL) whether it is new.
 * TT_ENOMEM past 2^32 - 2 strings or when memory runs out. */
int tt_st_intern(tt_strtab *t, const char *s, size_t n, uint32_t *id, bool *added);

/* realloc of p to n elements of size bytes, overflow-checked. NULL (TT_ENOMEM set,
 * p untouched) on failure. */
void *tt_regrow(void *p, uint64_t n, uint64_t size, const char *what);
/* Next capacity of a growing array of 32-bit-indexed elements. */
uint32_t tt_next_cap(uint32_t cap, uint32_t first);

#endif

/* Hash tables of strings (common/strtab.h). */
#include "common/strtab.h"

#include <stdlib.h>

/* 64-bit string hash: multiply-xorshift over 8-byte words, finished with the
 * MurmurHash3 fmix64 avalanche (Appleby). Only used for in-memory tables. */
uint64_t tt_fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

uint64_t tt_str_hash(const char *s, size_t n) {
    uint64_t h = 0x243f6a8885a308d3ull ^ ((uint64_t)n * 0x9e3779b97f4a7c15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return tt_fmix64(h ^ w);
}

/* ------------------------------------------------------------ string table */

void tt_st_free(tt_strtab *t) {
    free(t->arena);
    free(t->off);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

static uint32_t st_find_h(const tt_strtab *t, const char *s, size_t n, uint32_t h) {
    if (!t->nslot)
        return TT_ST_NONE;
    uint64_t mask = t->nslot - 1;
    for (uint64_t p = h & mask;; p = (p + 1) & mask) {
        uint64_t v = t->slot[p];
        if (!v)
            return TT_ST_NONE;
        if ((uint32_t)(v >> 32) != h)
            continue;
        uint32_t i = (uint32_t)v - 1;
        if (tt_st_len(t, i) == n && memcmp(t->arena + t->off[i], s, n) == 0)
            return i;
    }
}

uint32_t tt_st_find(const tt_strtab *t, const char *s, size_t n) {
    return st_find_h(t, s, n, (uint32_t)tt_str_hash(s, n));
}

static void st_place(uint64_t *slot, uint64_t mask, uint32_t h, uint32_t idx) {
    uint64_t p = h & mask;
    while (slot[p])
        p = (p + 1) & mask;
    slot[p] = (uint64_t)h << 32 | (idx + 1);
}

static int st_rehash(tt_strtab *t, uint64_t nslot) {
    uint64_t *slot = tt_calloc(nslot, sizeof *slot, "id table");
    if (!slot)
        return TT_ENOMEM;
    for (uint64_t p = 0; p < t->nslot; p++)
        if (t->slot[p])
            st_place(slot, nslot - 1, (uint32_t)(t->slot[p] >> 32), (uint32_t)t->slot[p] - 1);
    free(t->slot);
    t->slot = slot;
    t->nslot = nslot;
    return TT_OK;
}

/* realloc of p to n elements of size bytes, overflow-checked. NULL (TT_ENOMEM set,
 * p untouched) on failure. */
void *tt_regrow(void *p, uint64_t n, uint64_t size, const char *what) {
    uint64_t bytes;
    if (!tt_mul_ok(n, size, &bytes) || bytes > SIZE_MAX) {
        tt_err(TT_ENOMEM, "%s: size overflows", what);
        return NULL;
    }
    void *q = realloc(p, bytes ? (size_t)bytes : 1);
    if (!q)
        tt_err(TT_ENOMEM, "%s: cannot allocate %llu bytes", what, (unsigned long long)bytes);
    return q;
}

/* Next capacity of a growing array of 32-bit-indexed elements. */
uint32_t tt_next_cap(uint32_t cap, uint32_t first) {
    return cap == 0 ? first : cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
}

/* Interns s[0..n); *id receives its index and *added whether it is new. */
int tt_st_intern(tt_strtab *t, const char *s, size_t n, uint32_t *id, bool *added) {
    uint32_t h = (uint32_t)tt_str_hash(s, n);
    uint32_t i = st_find_h(t, s, n, h);
    if (added)
        *added = i == TT_ST_NONE;
    if (i != TT_ST_NONE) {
        *id = i;
        return TT_OK;
    }
    int st;
    if (t->n >= UINT32_MAX - 2)
        return tt_err(TT_ENOMEM, "too many distinct ids");
    if ((uint64_t)(t->n + 1) * 10 > t->nslot * 7 &&
        (st = st_rehash(t, t->nslot ? t->nslot * 2 : 64)))
        return st;
    if (t->n + 1 >= t->cap) {
        uint32_t cap = tt_next_cap(t->cap, 64);
        uint64_t *off = tt_regrow(t->off, cap, sizeof *off, "id table");
        if (!off)
            return TT_ENOMEM;
        if (!t->off)
            off[0] = 0;
        t->off = off;
        t->cap = cap;
    }
    if (t->arena_len + n + 1 > t->arena_cap) {
        uint64_t cap = t->arena_cap ? t->arena_cap : 4096;
        while (cap < t->arena_len + n + 1)
            cap *= 2;
        char *arena = tt_regrow(t->arena, cap, 1, "id strings");
        if (!arena)
            return TT_ENOMEM;
        t->arena = arena;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = '\0';
    i = t->n++;
    t->arena_len += n + 1;
    t->off[i + 1] = t->arena_len;
    st_place(t->slot, t->nslot - 1, h, i);
    *id = i;
    return TT_OK;
}


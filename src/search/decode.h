/* The residual decoder: packed residuals to floats, optionally plus their centroids
 * (src/search/decode.c). */
#ifndef TT_SEARCH_DECODE_H
#define TT_SEARCH_DECODE_H

#include "quant/codec.h"

/* Residual decoder: unpacks packed residuals (layout of codec.h) to floats through
 * byte tables: one 256-entry table of (8/nbits) floats for a shared codec; for
 * per-dimension codecs one such table per byte position when they fit in 512 KiB,
 * else bucket indices + per-dimension weights. */
typedef struct tt_resdec {
    uint32_t dim, nbits, bytes_per_vec, per_byte;  /* per_byte = 8 / nbits */
    int shared;
    float *tab;            /* shared: 256 * per_byte weights */
    float *ptab;           /* per-dim, small: bytes_per_vec * 256 * per_byte weights */
    uint8_t *bucket;       /* per-dim: 256 * per_byte bucket indices */
    const float *weights;  /* per-dim: dim * nbuckets (borrowed from the codec) */
    uint32_t nbuckets;
    int avx512;            /* per-dim without tables, 1-2 bits: 16 dimensions at a time */
} tt_resdec;

/* d->avx512 is set where the CPU has AVX-512; a test may clear it to compare with the
 * portable loop (the two write the same floats). */
int tt_resdec_init(tt_resdec *d, const tt_codec *c);
void tt_resdec_free(tt_resdec *d);
/* Unpacks n packed vectors (n * bytes_per_vec bytes) into n * dim floats. */
void tt_resdec_decode(const tt_resdec *d, const uint8_t *packed, uint64_t n, float *out);
/* The same, adding centroid codes[v] (rows of centroids, dim floats) to vector v: the
 * decompressed vectors c + r. */
void tt_resdec_decode_add(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                          const float *centroids, const uint32_t *codes, float *out);

#endif

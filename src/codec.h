/* Residual codec (ColBERTv2): each dimension of r = v - c(v) is quantized to one of
 * 2^nbits buckets; bucket cutoffs and reconstruction weights are exact quantiles of
 * held-out residuals, either one table for all dimensions (ColBERTv2) or one table
 * per dimension.
 *
 * Bit layout of a packed vector (bytes_per_vec = ceil(dim*nbits/8)): the code of
 * dimension j occupies bits [j*nbits, (j+1)*nbits) counting from the most significant
 * bit of byte 0 (MSB-first, as numpy.packbits); unused trailing bits are zero. */
#ifndef TT_CODEC_H
#define TT_CODEC_H

#include "internal.h"

typedef struct tt_codec {
    uint32_t dim, nbits, ntables; /* ntables = 1 (shared) or dim (per dimension) */
    uint32_t nbuckets;            /* 2^nbits */
    uint32_t bytes_per_vec;
    float *cutoffs;               /* ntables * (nbuckets-1), ascending per table */
    float *weights;               /* ntables * nbuckets */
} tt_codec;

/* Exact q-quantile (0 <= q <= 1) of x[0..n) with linear interpolation between order
 * statistics (numpy/torch 'linear'), by selection (x is reordered). n > 0. */
float tt_quantile(float *x, uint64_t n, double q);

/* Trains the tables from n held-out residual vectors (n*dim; not modified).
 * Cutoffs are the quantiles at i/nbuckets (i = 1..nbuckets-1), weights the quantiles
 * at (i+0.5)/nbuckets, as ColBERTv2. Errors: TT_EINVAL, TT_ENOMEM. */
int tt_codec_train(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim, int nbits,
                   int per_dim);
/* Fills a codec from stored tables (copies them). */
int tt_codec_init(tt_codec *c, uint32_t dim, uint32_t nbits, uint32_t ntables,
                  const float *cutoffs, const float *weights);
void tt_codec_free(tt_codec *c);

/* Quantizes and packs one residual vector (dim floats) into bytes_per_vec bytes. */
void tt_codec_encode(const tt_codec *c, const float *residual, uint8_t *packed);
/* Unpacks one vector into dim floats: out[j] = weight of its bucket. */
void tt_codec_decode(const tt_codec *c, const uint8_t *packed, float *out);

/* Per-query-vector lookup table over packed bytes: lut[b*256 + byte] = sum over the
 * dims stored in byte b of q[d] * weight(d, bucket). Size bytes_per_vec*256 floats.
 * Then <q, decode(packed)> = sum_b lut[b*256 + packed[b]]. */
void tt_codec_build_lut(const tt_codec *c, const float *q, float *lut);
float tt_codec_dot_lut(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec);

#endif

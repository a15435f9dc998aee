/* Residual codec (ColBERTv2): each dimension of r = v - c(v) is quantized to one of
 * 2^nbits buckets; bucket cutoffs and reconstruction weights are exact quantiles of
 * held-out residuals, either one table for all dimensions (ColBERTv2) or one table
 * per dimension.
 *
 * Bucket of a value x: the number of cutoffs strictly below x (torch.bucketize with
 * right=False, as ColBERTv2's ResidualCodec.binarize): a value equal to a cutoff goes to
 * the lower bucket; NaN goes to bucket 0.
 *
 * Bit layout of a packed vector (bytes_per_vec = ceil(dim*nbits/8)): the code of
 * dimension j occupies bits [j*nbits, (j+1)*nbits) counting from the most significant
 * bit of byte 0 (MSB-first, as numpy.packbits); unused trailing bits are zero. Within
 * its field a code is written most significant bit first, so byte b holds the codes of
 * dimensions b*8/nbits.. in order: nbits=4 -> code0<<4 | code1; nbits=2 ->
 * c0<<6 | c1<<4 | c2<<2 | c3; nbits=1 -> c0<<7 | ... | c7. This equals
 * numpy.packbits(np.unpackbits(codes[:, None], axis=1)[:, 8-nbits:]). (ColBERTv2 itself
 * expands each code LSB first before packbits, i.e. its fields are bit-reversed; tartan
 * does not read ColBERTv2 residual files, so the plain order is used.)
 *
 * Only nbits in {1, 2, 4} is supported: a code then never straddles a byte, which the
 * per-byte lookup tables rely on. */
#ifndef TT_CODEC_H
#define TT_CODEC_H

#include "common/common.h"

typedef struct tt_codec {
    uint32_t dim, nbits, ntables; /* ntables = 1 (shared) or dim (per dimension) */
    uint32_t nbuckets;            /* 2^nbits */
    uint32_t bytes_per_vec;
    float *cutoffs;               /* ntables * (nbuckets-1), ascending per table */
    float *weights;               /* ntables * nbuckets */
    float *cutoffs_t;             /* per-dim codecs only: cutoffs transposed, (nbuckets-1) *
                                   * dim, so encoding compares consecutive dims at once;
                                   * NULL for a shared table (owned, set by train/init) */
} tt_codec;

/* Exact q-quantile (0 <= q <= 1) of x[0..n) with linear interpolation between order
 * statistics (numpy/torch 'linear': pos = q*(n-1), lo = floor(pos),
 * x_(lo) + (pos-lo)*(x_(lo+1) - x_(lo))), by selection (x is reordered): O(n) expected
 * (introselect), no size limit. q is clamped to [0, 1]. Returns NaN when n == 0.
 * x must not contain NaN (the result is then unspecified, but memory-safe). */
float tt_quantile(float *x, uint64_t n, double q);

/* Trains the tables from n held-out residual vectors (n*dim; not modified).
 * Cutoffs are the quantiles at i/nbuckets (i = 1..nbuckets-1), weights the quantiles
 * at (i+0.5)/nbuckets, as ColBERTv2. per_dim = 0: one table over all n*dim values
 * (ColBERTv2; copies them: n*dim*4 bytes of scratch); per_dim != 0: one table per
 * dimension over its n values (scratch n*64*4 bytes). On failure *c is zeroed.
 * Errors: TT_EINVAL (n or dim 0, nbits not 1/2/4), TT_EVALUE (NaN/Inf), TT_ENOMEM. */
int tt_codec_train(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim, int nbits,
                   int per_dim);
/* Fills a codec from stored tables (copies them): cutoffs ntables*(2^nbits-1),
 * weights ntables*2^nbits, ntables 1 or dim. On failure *c is zeroed.
 * Errors: TT_EINVAL (shape), TT_ECORRUPT (non-finite values or descending cutoffs),
 * TT_ENOMEM. */
int tt_codec_init(tt_codec *c, uint32_t dim, uint32_t nbits, uint32_t ntables,
                  const float *cutoffs, const float *weights);
/* Frees the tables (c may be NULL or zeroed); the struct itself is the caller's. */
void tt_codec_free(tt_codec *c);

/* Encode, decode and the LUT functions only read the codec: any number of threads may
 * share one. */

/* Quantizes and packs one residual vector (dim floats) into bytes_per_vec bytes. */
void tt_codec_encode(const tt_codec *c, const float *residual, uint8_t *packed);
/* Unpacks one vector into dim floats: out[j] = weight of its bucket. */
void tt_codec_decode(const tt_codec *c, const uint8_t *packed, float *out);

/* Per-query-vector lookup table over packed bytes: lut[b*256 + byte] = sum over the
 * dims stored in byte b of q[d] * weight(d, bucket). Size bytes_per_vec*256 floats.
 * Then <q, decode(packed)> = sum_b lut[b*256 + packed[b]]. */
void tt_codec_build_lut(const tt_codec *c, const float *q, float *lut);
float tt_codec_dot_lut(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec);

/* The implementations behind tt_codec_dot_lut, for tests and benchmarks. The AVX2
 * (gather) version falls back to the scalar one where AVX2 is unavailable
 * (tt_codec_have_avx2() == 0). Both sum in float in different orders.
 * tt_codec_dot_lut is the scalar one: the gather was not faster where measured
 * (doc/benchmarks.md). */
float tt_codec_dot_lut_scalar(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec);
float tt_codec_dot_lut_avx2(const float *lut, const uint8_t *packed, uint32_t bytes_per_vec);
int tt_codec_have_avx2(void);

#endif

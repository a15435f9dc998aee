/* Residual codec: each dimension of r = v - c(v) is quantized to one of the buckets of
 * its table; a bucket is decoded to its weight. Three kinds (TT_CODEC_* of tartan.h):
 *
 *  - shared (ColBERTv2): one table of 2^nbits buckets for every dimension;
 *  - per-dim: one table of 2^nbits buckets per dimension;
 *  - adaptive: each dimension gets its own width b in {0, 1, 2, 3, 4, 8} and a table
 *    of 2^b buckets; the widths add up to at most nbits * dim bits, allocated by greedy
 *    water-filling on w_j * D_j(b) (D_j the dimension's measured distortion at width
 *    b, w_j its importance: the mean square of the dimension over the documents, a
 *    stand-in for how much queries weigh it). A 0-bit dimension decodes to a constant.
 *
 * Tables start at exact quantiles of held-out residuals (cutoffs at i/2^b, weights at
 * (i+0.5)/2^b, as ColBERTv2) and may then be refined by Lloyd-Max rounds (weights <-
 * the mean of their bucket, cutoffs <- midpoints of adjacent weights), which never
 * increase the held-out error: the best table seen is kept.
 *
 * Positions. The codec works on "positions": the dimensions of the index's own space.
 * For shared and per-dim codecs position k is input dimension k. An adaptive codec
 * orders the positions by decreasing width (ties by input dimension): perm[k] is the
 * input dimension at position k, and an index stores its centroids, residuals and
 * originals in position order, so that search decodes whole runs of equal widths
 * and permutes only the query (inner products do not change under a permutation
 * applied to both sides). tt_codec_to_positions/to_input move a vector between the
 * two orders.
 *
 * Bucket of a value x: the number of cutoffs strictly below x (torch.bucketize with
 * right=False, as ColBERTv2's ResidualCodec.binarize): a value equal to a cutoff goes to
 * the lower bucket; NaN goes to bucket 0.
 *
 * Bit layout of a packed vector (bytes_per_vec = ceil(dim*nbits/8)): the code of
 * position k occupies bits [bitoff[k], bitoff[k] + bits[k]) counting from the most
 * significant bit of byte 0 (MSB-first, as numpy.packbits), bitoff[k] the sum of the
 * widths before it; unused trailing bits are zero. Within its field a code is written
 * most significant bit first. With one width (shared, per-dim) byte b holds the codes of
 * positions b*8/nbits.. in order: nbits=4 -> code0<<4 | code1; nbits=2 ->
 * c0<<6 | c1<<4 | c2<<2 | c3; nbits=1 -> c0<<7 | ... | c7. This equals
 * numpy.packbits(np.unpackbits(codes[:, None], axis=1)[:, 8-nbits:]). (ColBERTv2 itself
 * expands each code LSB first before packbits, i.e. its fields are bit-reversed; tartan
 * does not read ColBERTv2 residual files, so the plain order is used.) Widths are in
 * non-increasing order. Codes of 1, 2, 4 and 8 bits never straddle a byte; 3-bit codes
 * (adaptive codecs only) do: eight fill three bytes, and one may also share a byte with
 * the run before or after. The per-byte lookup tables (tt_codec_build_lut) are for
 * codecs without them (tt_codec_lut_ok); the search decoder reads 3-bit runs in groups
 * of three bytes. nbits (the average) is 1, 2 or 4, or 3 for an adaptive codec. */
#ifndef TT_CODEC_H
#define TT_CODEC_H

#include "common/common.h"

/* A run of consecutive positions of one width (an adaptive codec has up to six). */
typedef struct tt_codec_run {
    uint32_t w, k0, n;            /* width, first position, positions */
    const float *ct;              /* cutoffs transposed: cutoff i of position k0 + j at
                                   * ct[i * n + j] (NULL for width 0 and shared codecs) */
} tt_codec_run;

/* Whether a codec of this kind may have nbits bits per dimension: 1, 2 or 4 (whole codes
 * per byte); an adaptive codec's budget may also be 3 (an average over its widths, of
 * which 3 is one). The one rule for build options, training, stored indexes and
 * decoders. */
static inline bool tt_codec_nbits_ok(int kind, uint32_t nbits) {
    return nbits == 1 || nbits == 2 || nbits == 4 || (nbits == 3 && kind == TT_CODEC_ADAPTIVE);
}

typedef struct tt_codec {
    uint32_t dim, nbits, ntables; /* ntables = 1 (shared) or dim (per-dim, adaptive) */
    int kind;                     /* TT_CODEC_SHARED, TT_CODEC_PER_DIM, TT_CODEC_ADAPTIVE */
    uint32_t nbuckets;            /* 2^nbits (for adaptive: of the average width) */
    uint32_t bytes_per_vec;
    float *cutoffs;               /* per table (position), ascending: 2^bits - 1 each */
    float *weights;               /* per table (position): 2^bits each */
    float *cutoffs_t;             /* per-dim and adaptive codecs: cutoffs transposed per
                                   * run (see tt_codec_run), so encoding compares
                                   * consecutive positions at once; NULL for a shared
                                   * table (owned, set by train/init) */
    /* The layout, for every kind (shared: woff = coff = 0). */
    uint8_t *bits;                /* dim: width of each position */
    uint32_t *bitoff;             /* dim: first bit of its code */
    uint32_t *woff, *coff;        /* dim: where its weights and cutoffs start */
    uint64_t nweights, ncutoffs;  /* table sizes */
    uint32_t *perm;               /* adaptive: input dimension of each position (dim);
                                   * NULL: the identity */
    uint32_t nruns;
    tt_codec_run runs[6];
} tt_codec;

/* How to train a codec. */
typedef struct tt_codec_params {
    int kind;                     /* TT_CODEC_SHARED, TT_CODEC_PER_DIM, TT_CODEC_ADAPTIVE */
    int nbits;                    /* bits per dimension (adaptive: on average): 1, 2, 4
                                   * (adaptive: also 3) */
    int lloyd_rounds;             /* Lloyd-Max refinement rounds; 0: quantile tables */
    const float *importance;      /* adaptive: w_j per input dimension (NULL: all 1) */
    int debias;                   /* 1: scale each table's weights by g = sum x^2 /
                                   * sum x*decode(x) over its held-out values, so that a
                                   * decoded residual's inner product with its own residual
                                   * is unbiased (bucket means shrink it); cutoffs unchanged */
} tt_codec_params;

/* Exact q-quantile (0 <= q <= 1) of x[0..n) with linear interpolation between order
 * statistics (numpy/torch 'linear': pos = q*(n-1), lo = floor(pos),
 * x_(lo) + (pos-lo)*(x_(lo+1) - x_(lo))), by selection (x is reordered): O(n) expected
 * (introselect), no size limit. q is clamped to [0, 1]. Returns NaN when n == 0.
 * x must not contain NaN (the result is then unspecified, but memory-safe). */
float tt_quantile(float *x, uint64_t n, double q);

/* Trains a codec from n held-out residual vectors (n*dim, input order; not modified).
 * Shared: one table over all n*dim values (copies and sorts them: n*dim*4 bytes of
 * scratch); per-dim and adaptive: tables per dimension over its n values (scratch
 * about n*64*4 bytes; adaptive also trains every width of every dimension to measure
 * its distortion). On failure *c is zeroed.
 * Errors: TT_EINVAL (n or dim 0, nbits not 1/2/4, unknown kind), TT_EVALUE (NaN/Inf),
 * TT_ENOMEM. */
int tt_codec_train_ex(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim,
                      const tt_codec_params *p);
/* Debiases the tables of a per-dimension or adaptive codec trained without it, as
 * training with p->debias does (each table's weights scaled so that its values' products
 * with their decoded values are unbiased; 0-bit positions left as they are): the same
 * floats, for the price of sorting each dimension's n held-out residuals (n*dim, input
 * order) once more instead of training every width again. Errors: TT_EINVAL (a shared
 * codec, no residuals), TT_ENOMEM. */
int tt_codec_debias(tt_codec *c, const float *residuals, uint64_t n);
/* The ColBERTv2 tables: quantiles only (lloyd_rounds 0), shared (per_dim 0) or per-dim. */
int tt_codec_train(tt_codec *c, const float *residuals, uint64_t n, uint32_t dim, int nbits,
                   int per_dim);
/* Fills a codec from stored tables (copies them): cutoffs ntables*(2^nbits-1),
 * weights ntables*2^nbits, ntables 1 or dim. On failure *c is zeroed.
 * Errors: TT_EINVAL (shape), TT_ECORRUPT (non-finite values or descending cutoffs),
 * TT_ENOMEM. */
int tt_codec_init(tt_codec *c, uint32_t dim, uint32_t nbits, uint32_t ntables,
                  const float *cutoffs, const float *weights);
/* Fills an adaptive codec from stored tables (copies them): bits[dim] (each 0, 1, 2, 3,
 * 4 or 8, non-increasing, summing to at most nbits*dim), perm[dim] (a permutation), then
 * per position its 2^bits - 1 cutoffs and 2^bits weights, concatenated. On failure *c
 * is zeroed. Errors: TT_EINVAL (nbits, dim), TT_ECORRUPT (widths, permutation, tables),
 * TT_ENOMEM. */
int tt_codec_init_adaptive(tt_codec *c, uint32_t dim, uint32_t nbits, const uint8_t *bits,
                           const uint32_t *perm, const float *cutoffs, const float *weights);
/* The residual sketch (doc/search.md, "Residual sketch"): the first tt_codec_sketch_bytes
 * bytes of every packed vector, kept in RAM beside the codes so that the centroid
 * stages can add <q, r> over the positions that hold them. They are the codes of the
 * 8-bit positions, which an adaptive codec gives to the few dimensions that carry most
 * of the importance-weighted residual error (the massive activations of LLM hidden
 * states): one byte per position, at bit offset 8p. 0 when the codec has no 8-bit
 * position or more than TT_SKETCH_MAX of them (isotropic data allocates nbits
 * everywhere: nothing to sketch), and for shared and per-dim codecs. */
#define TT_SKETCH_MAX 16
uint32_t tt_codec_sketch_bytes(const tt_codec *c);

/* The positions of 8 bits: the first ones (widths are non-increasing); a per-vector
 * scale (debias 2) applies to the positions after them. */
uint32_t tt_codec_n8(const tt_codec *c);
/* A decoded residual d (position order) scaled by its vector's scale s (debias 2): the
 * positions after the 8-bit ones times s. */
void tt_codec_scale(const tt_codec *c, float s, float *d);
/* One vector's residual scale (debias 2): s = |r_R|^2 / <r_R, d_R> over the positions R
 * after the 8-bit ones (r its residual, d its decoded residual, both in position order),
 * so that <s d_R, r_R> = |r_R|^2, at most 2 |r_R| / |d_R|; 0 if <r_R, d_R> <= 0. */
float tt_codec_vector_scale(const tt_codec *c, const float *r, const float *d);

/* A copy of src (any kind). TT_ENOMEM. */
int tt_codec_clone(tt_codec *dst, const tt_codec *src);
/* Frees the tables (c may be NULL or zeroed); the struct itself is the caller's. */
void tt_codec_free(tt_codec *c);

/* Encode, decode and the LUT functions only read the codec: any number of threads may
 * share one. */

/* x (dim floats, input order) in position order, and back; copies for the identity.
 * out must not alias x. */
void tt_codec_to_positions(const tt_codec *c, const float *x, float *out);
void tt_codec_to_input(const tt_codec *c, const float *x, float *out);

/* Quantizes and packs one residual vector (dim floats, position order) into
 * bytes_per_vec bytes. */
void tt_codec_encode(const tt_codec *c, const float *residual, uint8_t *packed);
/* Unpacks one vector into dim floats (position order): out[k] = weight of its bucket. */
void tt_codec_decode(const tt_codec *c, const uint8_t *packed, float *out);

/* The code and the decoded value of position k of a packed vector (the scalar
 * definition, for references and tests). A code may straddle two bytes (3 bits): the
 * second is read only then, so the last byte of a vector is never overrun. */
static inline uint32_t tt_codec_code(const tt_codec *c, const uint8_t *packed, uint32_t k) {
    uint32_t w = c->bits[k], off = c->bitoff[k], sh = off & 7;
    if (!w)
        return 0;
    const uint8_t *p = packed + (off >> 3);
    uint32_t x = (uint32_t)p[0] << 8 | (sh + w > 8 ? p[1] : 0u);
    return (x >> (16 - w - sh)) & ((1u << w) - 1);
}
static inline float tt_codec_value(const tt_codec *c, const uint8_t *packed, uint32_t k) {
    return c->weights[c->woff[k] + tt_codec_code(c, packed, k)];
}

/* Per-query-vector lookup table over packed bytes: lut[b*256 + byte] = sum over the
 * positions stored in byte b of q[k] * weight(k, bucket) (q in position order; the
 * constant of 0-bit positions is added to byte 0's entries). Size bytes_per_vec*256
 * floats. Then <q, decode(packed)> = sum_b lut[b*256 + packed[b]]. Only for codecs
 * whose codes never straddle a byte (tt_codec_lut_ok: no 3-bit positions); for others
 * it fills the table with NaN. */
bool tt_codec_lut_ok(const tt_codec *c);
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

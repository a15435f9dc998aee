/* The residual decoder: packed residuals to floats, optionally plus their centroids
 * (src/search/decode.c). */
#ifndef TT_SEARCH_DECODE_H
#define TT_SEARCH_DECODE_H

#include "quant/codec.h"

/* The whole bytes of one width of a packed vector, decoded together: bytes of 8 / w
 * codes, or for 3-bit codes groups of 3 bytes holding 8. */
typedef struct tt_resdec_run {
    uint32_t w, pb, nb;        /* width, codes per byte (8 / w; 3 bits: 8 per group),
                                * buckets (2^w) */
    uint32_t k0, byte0, nbytes; /* first position, its byte, whole bytes (3 bits: groups
                                 * of 3) */
    const float *weights;      /* position k0's weights, nb per position (the codec's) */
    float *ptab;               /* expanded: nbytes * 256 * pb weights, or NULL */
    const uint8_t *bucket;     /* 256 * pb bucket indices of a byte */
    float *wt8;                /* AVX2, runs of 1-3 bits without ptab: the weights of each
                                * 8 positions bucket by bucket, nb * 8 floats a block */
} tt_resdec_run;

/* The weight that code position t (< pb) of a run's byte b holds when the byte is x. */
static inline float tt_resdec_run_weight(const tt_resdec_run *r, uint32_t b, uint32_t x,
                                         uint32_t t) {
    return r->weights[(uint64_t)(b * r->pb + t) * r->nb + r->bucket[x * r->pb + t]];
}

/* Residual decoder: unpacks packed residuals (layout of quant/codec.h) to floats in
 * position order through byte tables: one 256-entry table of (8/nbits) floats for a
 * shared codec; otherwise, for each run of one width (a per-dim codec has one, an
 * adaptive one up to six), one such table per byte position while they fit in 512 KiB
 * together, else bucket indices + per-position weights; 3-bit runs by shifts of each
 * 3-byte group. Codes that share a byte with another width, a partial last byte or
 * group and 0-bit positions are decoded one by one. */
typedef struct tt_resdec {
    uint32_t dim, nbits, bytes_per_vec, per_byte;  /* per_byte = 8 / nbits (shared) */
    int shared;
    float *tab;            /* shared: 256 * per_byte weights */
    const float *weights;  /* shared: the codec's table */
    uint32_t nruns;
    tt_resdec_run runs[6];
    uint32_t nloose;
    uint32_t *loose;       /* positions decoded one by one */
    uint32_t nloose_w;     /* the fused kernels' order of them: lsplit[0..nloose_w) the */
    uint32_t *lsplit;      /* loose positions of 1 bit or more, then the 0-bit ones */
    const tt_codec *codec; /* borrowed: must outlive the decoder */
    uint8_t *bucket[9];    /* by width 1, 2, 4, 8: 256 * (8/w) bucket indices */
    int avx512;            /* runs of 1-3 bits without tables: 16 positions at a time */
    int avx2;              /* the same, 8 positions at a time (where avx512 is not set) */
    int lanes;             /* AVX2 tt_resdec_dot: blocks of 8 or 16 vectors a vector per
                            * lane (set with avx2; cleared: 2 vectors a block) */
} tt_resdec;

/* d->avx512 is set where the CPU has AVX-512, d->avx2 where it has AVX2 and FMA; a test
 * may clear them to compare with the AVX2 or the portable loop (all write the same
 * floats). */
int tt_resdec_init(tt_resdec *d, const tt_codec *c);
void tt_resdec_free(tt_resdec *d);
/* Unpacks n packed vectors (n * bytes_per_vec bytes) into n * dim floats. */
void tt_resdec_decode(const tt_resdec *d, const uint8_t *packed, uint64_t n, float *out);
/* The same, adding centroid codes[v] (rows of centroids, dim floats in position order)
 * to vector v: the decompressed vectors c + r. */
void tt_resdec_decode_add(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                          const float *centroids, const uint32_t *codes, float *out);
/* The same with float16 centroid rows (dim values each): the same floats as from
 * their float32 values. */
void tt_resdec_decode_add16(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                            const uint16_t *centroids, const uint32_t *codes, float *out);
/* With per-vector residual scales (debias 2): vector v's positions from k0 on scaled by
 * scales[v] (float16, host order), out_v[k] = c_v[k] + r_v[k] for k < k0 and c_v[k] +
 * s_v r_v[k] after; c_v the row codes[v] of centroids16 (float16) if not NULL, else of
 * centroids (float32), else 0 (the scaled residuals alone: codes unused). */
void tt_resdec_decode_scaled(const tt_resdec *d, const uint8_t *packed, uint64_t n,
                             const float *centroids, const uint16_t *centroids16,
                             const uint32_t *codes, uint32_t k0, const uint16_t *scales,
                             float *out);

/* Inner products of n packed residuals with the query rows, without writing the
 * residuals out: out[v * nqp + i] = <Qp_i, r_v> for i < nqp (Qp: nqp rows of dim
 * floats in position order; x: dim floats of scratch). Runs of 1-2 bits without
 * expanded tables are multiplied 16 positions at a time as they are decoded, the rest
 * decoded into x first. For stage 4 with few query vectors, on AVX-512 or AVX2: only
 * where tt_resdec_dot_ok(d, nqp) (elsewhere: tt_resdec_decode and an sgemm). The same
 * products as from tt_resdec_decode's floats, up to float rounding. */
bool tt_resdec_dot_ok(const tt_resdec *d, uint32_t nqp);
void tt_resdec_dot(const tt_resdec *d, const uint8_t *packed, uint64_t n, const float *Qp,
                   uint32_t nqp, float *x, float *out);

/* The same floats, bit for bit, from the n vectors' decoded residuals (tt_resdec_decode's
 * floats, no centroid) and their packed bytes (for the loose positions): tt_resdec_dot's
 * sums in its order, for a scan that decodes each document once for many queries and
 * must score each as tt_resdec_dot scores it alone (n: the vectors of one call of
 * tt_resdec_dot, since on AVX2 its order depends on a vector's place among them: its
 * whole blocks of 8 are summed a vector a lane). Where tt_resdec_dot_rows_ok(d, nqp),
 * i.e. where tt_resdec_dot_ok. The rows and the query rows are laid out by
 * tt_resdec_rows_layout: row i's position k at rows[i * stride + k] and Qs[i * stride +
 * k], where rows - shift and Qs - shift are 64-byte aligned, so that the longest run's
 * blocks of 16 positions (from its first position, as tt_resdec_dot takes them) load
 * whole cache lines. */
bool tt_resdec_dot_rows_ok(const tt_resdec *d, uint32_t nqp);
void tt_resdec_rows_layout(const tt_resdec *d, uint32_t *stride, uint32_t *shift);
void tt_resdec_dot_rows(const tt_resdec *d, const float *rows, const float *lanes,
                        uint32_t stride, const uint8_t *packed, uint64_t n, const float *Qs,
                        uint32_t nqp, float *out);
/* Where tt_resdec_rows_lanes(d) (AVX2: tt_resdec_dot sums the 1- and 2-bit runs of
 * whole blocks of 8 vectors a vector a lane), tt_resdec_dot_rows also reads the rows'
 * copy by lanes, which tt_resdec_to_lanes writes (once per document for all the
 * queries): for each whole block of 8 of the n rows (b = 0, 8, ...), row b + l's position
 * k at lanes[b * stride + 8 * k + l] (lanes: as many floats as the rows, without their
 * shift). Elsewhere lanes is not read (NULL will do). */
bool tt_resdec_rows_lanes(const tt_resdec *d);
void tt_resdec_to_lanes(const tt_resdec *d, const float *rows, uint32_t stride, uint64_t n,
                        float *lanes);

/* The part of those products over the positions that are not in the whole bytes of
 * runs of 1-2 bits: the loose positions listed (loose[0..nloose): d->loose, or a part of
 * it) and runs of other widths, for any nq: what the lookup tables below do not cover.
 * Runs whose width w has bit w set in `skip` are left out too (the 4- and 8-bit runs
 * that the lookup tables' float byte tables cover). Not for a shared codec. */
void tt_resdec_dot_rest(const tt_resdec *d, const uint32_t *loose, uint32_t nloose,
                        uint32_t skip, const uint8_t *packed, uint64_t n, const float *Q,
                        uint32_t nq, float *x, float *out);

/* Approximate <q, r> from the packed bytes through per-query lookup tables (the
 * fast-scan of PQ search, Andre et al., VLDB 2015; EMVB and WARP score residuals from
 * per-query tables too). For each whole byte of a run of 1-2 bits and each of its two
 * nibbles (2 or 4 positions), a table of the 16 values sum_k q_i[k] weight_k(code_k),
 * rounded to 8 bits on one scale per query row; 16 vectors are scored a nibble position
 * at a time by one byte shuffle (vpshufb) per query row and summed in 16-bit lanes. The
 * other positions are exact: whole bytes of 4- and 8-bit codes through float tables of
 * a byte's 256 values per query row, the rest by tt_resdec_dot_rest. Each table entry
 * errs by at most scale_i / 2, so a product errs by at most npos * scale_i (npos byte
 * positions, two nibbles each): the typical error is far smaller (rounding errors
 * cancel). */
typedef struct tt_reslut {
    uint32_t nqp;      /* query rows the tables are for (a multiple of 4) */
    uint32_t npos;     /* byte positions covered */
    uint32_t *src;     /* npos: each covered byte's offset in a packed vector */
    uint8_t *tab;      /* ((g * npos + p) * 4 + i) * 32 for rows 4g + i: nibble tables,
                        * 16 bytes for the high nibble, 16 for the low */
    float *scale;      /* nqp: row i's step */
    float *bias;       /* nqp: row i's sum of each table's minimum, plus its products
                        * with the 0-bit positions' constant values */
    uint8_t *buf;      /* npos * 16: a block's covered bytes, transposed */
    uint8_t *ibuf;     /* npos * 32: the same split into nibbles (AVX2, nqp > 4) */
    uint8_t *zero;     /* bytes_per_vec zero bytes: the rows missing from a last block */
    float *wlo;        /* 2 * dim: each covered position's least weight, then (from
                        * wlo + dim) its greatest */
    uint32_t cap_nqp;
    uint32_t *loose;   /* the decoder's loose positions of at least 1 bit (for
                        * tt_resdec_dot_rest; the 0-bit ones are constants: in bias) */
    uint32_t nloose;
    uint32_t nbpos;    /* whole bytes of 4- and 8-bit runs (float byte tables where they
                        * fit in RESLUT_BYTE_TABLES for the query rows: bon) */
    uint32_t *bsrc;    /* nbpos: their offsets in a packed vector */
    float *btab;       /* ((b * 256 + x) * nqp + i): the sum of row i's products with the
                        * values byte b stores as x (exact floats, no rounding) */
    uint32_t cap_bq;   /* btab's capacity in query rows */
    bool bon;          /* the float byte tables are set for the current query rows */
    bool rest;         /* positions outside the tables, bias and byte tables are left
                        * (a tt_resdec_dot_rest pass) */
    int avx2;          /* the AVX2 loop (set where the CPU has it; tests may clear it) */
    int avx512;        /* the AVX-512BW sums, two query rows a register (where the CPU has
                        * it, with avx2; tests may clear it) */
    int vbmi;          /* the VBMI + VNNI sums, two positions of a query row a register
                        * (where the CPU has them, with avx512: tt_reslut_vbmi_on; tests
                        * may clear it) */
    uint32_t npair;    /* (npos + 1) / 2: the positions in pairs */
    uint8_t *ptab;     /* (j * nqp + i) * 64 (vbmi; set where tt_reslut_vbmi_on): row
                        * i's tables of positions 2j and 2j + 1 (zeros past npos) side by
                        * side */
    uint8_t *pidx;     /* npair * 64 (vbmi): a block's permute indices into them */
} tt_reslut;

/* Whether L's sums run on the VBMI loop (where the CPU has it): from 16 query rows, or
 * from 1,024 query rows x byte positions (4 rows of 1024-d 2-bit codes); with less, the
 * loop's fixed cost a block (the transposition of its sums) makes it no faster than the
 * AVX-512BW one (doc/benchmarks.md, *Lookup-table sums two positions a register*). */
static inline bool tt_reslut_vbmi_on(const tt_reslut *L) {
    return L->vbmi && L->avx512 && L->avx2 && (L->nqp >= 16 || L->nqp * L->npos >= 1024);
}

/* Prepares L for the decoder d (its runs and scratch); L->npos == 0 if d has nothing the
 * tables cover (a shared codec, or no whole bytes of 1-2-bit codes). */
int tt_reslut_init(tt_reslut *L, const tt_resdec *d);
void tt_reslut_free(tt_reslut *L);
/* The tables of query rows Qp (nqp rows of dim floats, nqp a multiple of 4). */
int tt_reslut_set(tt_reslut *L, const tt_resdec *d, const float *Qp, uint32_t nqp);
/* out[v * nqp + i] ~ <Qp_i, r_v> for n packed vectors (the rows tt_reslut_set was given;
 * x: dim floats of scratch). The AVX2 and the portable loop give the same floats. */
void tt_reslut_dot(const tt_reslut *L, const tt_resdec *d, const uint8_t *packed, uint64_t n,
                   const float *Qp, float *x, float *out);

#endif

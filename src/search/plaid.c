/* PLAID search over the compressed index (Santhanam, Khattab, Potts, Zaharia, "PLAID:
 * An Efficient Engine for Late Interaction Retrieval", CIKM 2022), plus the reference
 * modes that measure what it loses.
 *
 *   stage 1  St ~ C·Qᵀ from int8 centroids and query (src/quant/cscore.c); the nprobe best
 *            centroids of every query vector; candidates = union of their IVF lists.
 *   stage 2  centroid interaction with pruning: score(d) = sum_i max over the codes c of
 *            d that survive pruning of St[c, i]; keep the ndocs best. A centroid
 *            survives if St[c, i] >= top_i - (1 - ratio) |top_i| for some i (relative,
 *            the default; top_i is query vector i's best centroid score), or, with an
 *            absolute threshold (ColBERTv2), if max_i St[c, i] >= threshold.
 *   stage 3  the same without pruning; keep max(ndocs/4, k).
 *   stage 4  read those documents' packed residuals (one range per document) and score
 *            decompressed MaxSim: sum_i max_j <q_i, c_j + r_j>; keep k.
 *
 * Stages 1-3 only rank, so their centroid scores come from exact integer dot products
 * of int8 copies (4x the multiply rate of float32 with AVX-512 VNNI, and no per-call
 * packing of the centroid matrix). Stage 4 does not use them: it decodes each residual,
 * adds its float32 centroid and multiplies the group with Q (one sgemm per group of
 * documents). The exhaustive mode runs the same stage-4 kernel over every document,
 * streaming the residual file in large sequential reads, so the default mode's scores
 * of the documents it returns equal the exhaustive scores up to float rounding. The
 * exact mode scores every document with the kept float16 originals.
 *
 * Residual sketch. Where the index keeps one (quant/codec.h, tt_codec_sketch_bytes: the
 * 8-bit codes of the few positions an adaptive codec found carrying most of the
 * importance-weighted residual error, e.g. the massive activations of LLM hidden
 * states), stages 2-3 score each vector as St[c, i] + <q_i, r> over those positions,
 * from a per-query lookup table (WARP's <q, c + r> = <q, c> + <q, r>, on the
 * positions where centroid-only scores err most), instead of St[c, i] alone.
 *
 * Like ColBERTv2's CPU path (filter_pids.cpp), the stage-2 maxima start at -9999, so a
 * document none of whose centroids survives pruning ranks last. Unlike ColBERTv2, the
 * decompressed vectors c + r are not re-normalised before scoring: <q, c + r> stays
 * exact arithmetic on what the index stores, and the reference modes score the same
 * quantity. */
#include "search/search.h"

#include "common/simd.h"

#include <math.h>
#include <stdlib.h>

/* Initial per-query-vector maximum of the centroid stages (ColBERTv2 filter_pids). */
#define STAGE2_FLOOR (-9999.0f)

/* Inserts centroid k with score x into a sorted list of nprobe (scores ps, ids pc) that
 * it beats the last of; returns the new last score. Equal scores keep the earlier
 * (lower) id first. */
static inline float probe_insert(float *ps, uint32_t *pc, uint32_t nprobe, float x, uint32_t k) {
    uint32_t r = nprobe - 1;
    while (r > 0 && x > ps[r - 1]) {
        ps[r] = ps[r - 1];
        pc[r] = pc[r - 1];
        r--;
    }
    ps[r] = x;
    pc[r] = k;
    return ps[nprobe - 1];
}

#ifdef TT_SSE2
/* The best of a row's first nq scores, given the lane maxima over all nqp of them: the
 * padding rows (scores 0) must not count. */
static inline float row_max_sse(__m128 lanes, const float *row, uint32_t nq, uint32_t nqp) {
    float m = -INFINITY;
    if (nq == nqp) {
        float t[4];
        _mm_storeu_ps(t, lanes);
        m = TT_MAX(TT_MAX(t[0], t[1]), TT_MAX(t[2], t[3]));
    } else {
        for (uint32_t i = 0; i < nq; i++)
            m = row[i] > m ? row[i] : m;
    }
    return m;
}
#endif

/* Best query score of every centroid (the pruning mask: a centroid survives if it
 * reaches the threshold) and, for nprobe == 1, every query vector's best centroid
 * (ties: the lower id). best and arg have nqp entries. */
static void scan_top1(const float *St, uint32_t K, uint32_t nq, uint32_t nqp, float threshold,
                      uint8_t *keep, float *best, uint32_t *arg) {
    for (uint32_t i = 0; i < nqp; i++) {
        best[i] = -INFINITY;
        arg[i] = UINT32_MAX;
    }
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        float m = -INFINITY;
#ifdef TT_SSE2
        const __m128i kv = _mm_set1_epi32((int)k);
        __m128 mx = _mm_set1_ps(-INFINITY);
        for (uint32_t i = 0; i < nqp; i += 4) {
            __m128 x = _mm_loadu_ps(row + i), b = _mm_loadu_ps(best + i);
            __m128i up = _mm_castps_si128(_mm_cmpgt_ps(x, b));
            __m128i a = _mm_loadu_si128((const __m128i *)(arg + i));
            _mm_storeu_ps(best + i, _mm_max_ps(x, b));
            _mm_storeu_si128((__m128i *)(arg + i),
                             _mm_or_si128(_mm_and_si128(up, kv), _mm_andnot_si128(up, a)));
            mx = _mm_max_ps(x, mx);
        }
        m = row_max_sse(mx, row, nq, nqp);
#else
        for (uint32_t i = 0; i < nqp; i++) {
            if (row[i] > best[i]) {
                best[i] = row[i];
                arg[i] = k;
            }
            if (i < nq)
                m = row[i] > m ? row[i] : m;
        }
#endif
        keep[k] = m >= threshold;
    }
}

#ifdef TT_AVX512
/* scan_top1 for nqp <= AVX512_MAX_NQP. */
AVX512_FN static void scan_top1_avx512(const float *St, uint32_t K, uint32_t nq, uint32_t nqp,
                                       float threshold, uint8_t *keep, float *best,
                                       uint32_t *arg) {
    const uint32_t nv = (nqp + 15) / 16;
    __m512 b[4];
    __m512i a[4];
    __mmask16 mp[4], mq[4];
    for (uint32_t r = 0; r < 4; r++) {
        b[r] = _mm512_set1_ps(-INFINITY);
        a[r] = _mm512_set1_epi32(-1);
        mp[r] = tt_lanes16(nqp, r);
        mq[r] = tt_lanes16(nq, r);
    }
    const __m512 thr = _mm512_set1_ps(threshold), ninf = _mm512_set1_ps(-INFINITY);
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        const __m512i kv = _mm512_set1_epi32((int)k);
        __mmask16 hit = 0;
        for (uint32_t r = 0; r < nv; r++) {
            __m512 x = _mm512_mask_loadu_ps(ninf, mp[r], row + 16 * r);
            __mmask16 up = _mm512_cmp_ps_mask(x, b[r], _CMP_GT_OQ);
            b[r] = _mm512_mask_mov_ps(b[r], up, x);
            a[r] = _mm512_mask_mov_epi32(a[r], up, kv);
            /* The best score reaches the threshold iff one of them does. */
            hit |= _mm512_mask_cmp_ps_mask(mq[r], x, thr, _CMP_GE_OQ);
        }
        keep[k] = hit != 0;
    }
    for (uint32_t r = 0; r < nv; r++) {
        _mm512_mask_storeu_ps(best + 16 * r, mp[r], b[r]);
        _mm512_mask_storeu_epi32(arg + 16 * r, mp[r], a[r]);
    }
}

/* scan_topn for nqp <= AVX512_MAX_NQP. */
AVX512_FN static void scan_topn_avx512(const float *St, uint32_t K, uint32_t nq, uint32_t nqp,
                                       uint32_t nprobe, const float *threshold, uint8_t *keep,
                                       float *probe_s, uint32_t *probe) {
    const uint32_t nv = (nqp + 15) / 16;
    __m512 worst[4];
    __mmask16 mq[4];
    for (uint32_t r = 0; r < 4; r++) {
        worst[r] = _mm512_set1_ps(-INFINITY);
        mq[r] = tt_lanes16(nq, r);
    }
    const __m512 thr = _mm512_set1_ps(threshold ? *threshold : 0.0f);
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        __mmask16 hit = 0;
        for (uint32_t r = 0; r < nv; r++) {
            __m512 x = _mm512_maskz_loadu_ps(mq[r], row + 16 * r);
            __mmask16 gt = _mm512_mask_cmp_ps_mask(mq[r], x, worst[r], _CMP_GT_OQ);
            hit |= _mm512_mask_cmp_ps_mask(mq[r], x, thr, _CMP_GE_OQ);
            if (!gt)
                continue;
            float w[16];
            _mm512_storeu_ps(w, worst[r]);
            for (uint32_t bits = gt; bits; bits &= bits - 1) {
                uint32_t l = (uint32_t)__builtin_ctz(bits), i = 16 * r + l;
                w[l] = probe_insert(probe_s + (size_t)i * nprobe, probe + (size_t)i * nprobe,
                                    nprobe, row[i], k);
            }
            worst[r] = _mm512_loadu_ps(w);
        }
        if (threshold)
            keep[k] = hit != 0;
    }
}

/* codes_max for nqp <= AVX512_MAX_NQP. */
AVX512_FN static void codes_max_avx512(float *m, const float *St, uint32_t nqp,
                                       const tt_index *idx, uint64_t d, const uint8_t *keep) {
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    const uint32_t nv = (nqp + 15) / 16;
    __m512 acc[4];
    __mmask16 mp[4];
    for (uint32_t r = 0; r < 4; r++) {
        acc[r] = _mm512_set1_ps(STAGE2_FLOOR);
        mp[r] = tt_lanes16(nqp, r);
    }
    for (uint64_t v = v0; v < v1; v++) {
        uint32_t k = tt_index_code(idx, v);
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * nqp);
        if (keep && !keep[k])
            continue;
        const float *s = St + (uint64_t)k * nqp;
        acc[0] = _mm512_max_ps(acc[0], _mm512_maskz_loadu_ps(mp[0], s));
        for (uint32_t r = 1; r < nv; r++)
            acc[r] = _mm512_max_ps(acc[r], _mm512_maskz_loadu_ps(mp[r], s + 16 * r));
    }
    for (uint32_t r = 0; r < nv; r++)
        _mm512_mask_storeu_ps(m + 16 * r, mp[r], acc[r]);
}

/* codes_max with the residual sketch, for nqp <= AVX512_MAX_NQP: per vector, its St row
 * plus the sketch table's rows for its sketch bytes, added in the same order as
 * codes_max (St first, then position 0, 1, ...), so every lane does the same float
 * additions and the maxima are the same bits. For up to 16 query vectors the pruning
 * mask is a masked maximum, without a branch, as in codes_max4_sketch4 (4-vector queries
 * with 4 sketch bytes take that loop instead). */
AVX512_FN static void codes_max_sketch_avx512(float *m, const tt_search_ctx *c, uint64_t d,
                                              const uint8_t *keep) {
    const tt_index *idx = c->idx;
    const uint32_t nqp = c->nqp, sb = idx->sketch_bytes;
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    const float *St = c->St, *slut = c->slut;
    const size_t pstride = (size_t)256 * nqp;
    const uint32_t nv = (nqp + 15) / 16;
    __m512 acc[4];
    __mmask16 mp[4];
    for (uint32_t r = 0; r < 4; r++) {
        acc[r] = _mm512_set1_ps(STAGE2_FLOOR);
        mp[r] = tt_lanes16(nqp, r);
    }
    if (nv == 1) {
        /* up to 16 query vectors (DiffRetriever's 4; ColBERT's 32 take the loop below) */
        const __mmask16 m0 = mp[0];
        __m512 a = acc[0];
        for (uint64_t v = v0; v < v1; v++) {
            const uint32_t k = tt_index_code(idx, v);
            if (v + 4 < v1)
                __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * nqp);
            const __mmask16 km = keep ? (__mmask16)(m0 & -(uint32_t)(keep[k] != 0)) : m0;
            const uint8_t *sk = idx->sketch + v * sb;
            __m512 x = _mm512_maskz_loadu_ps(m0, St + (uint64_t)k * nqp);
            if (sb == 4) {
                /* the common case (4 outlier dimensions): the table rows' addresses do
                 * not wait on one another */
                const __m512 t0 = _mm512_maskz_loadu_ps(m0, slut + (size_t)sk[0] * nqp);
                const __m512 t1 = _mm512_maskz_loadu_ps(m0, slut + pstride + (size_t)sk[1] * nqp);
                const __m512 t2 =
                    _mm512_maskz_loadu_ps(m0, slut + 2 * pstride + (size_t)sk[2] * nqp);
                const __m512 t3 =
                    _mm512_maskz_loadu_ps(m0, slut + 3 * pstride + (size_t)sk[3] * nqp);
                x = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(x, t0), t1), t2),
                                  t3);
            } else {
                for (uint32_t p = 0; p < sb; p++)
                    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(
                                             m0, slut + p * pstride + (size_t)sk[p] * nqp));
            }
            a = _mm512_mask_max_ps(a, km, a, x);
        }
        _mm512_mask_storeu_ps(m, m0, a);
        return;
    }
    for (uint64_t v = v0; v < v1; v++) {
        uint32_t k = tt_index_code(idx, v);
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * nqp);
        if (keep && !keep[k])
            continue;
        const float *s = St + (uint64_t)k * nqp;
        const uint8_t *sk = idx->sketch + v * sb;
        __m512 x[4];
        for (uint32_t r = 0; r < nv; r++)
            x[r] = _mm512_maskz_loadu_ps(mp[r], s + 16 * r);
        for (uint32_t p = 0; p < sb; p++) {
            const float *t = slut + p * pstride + (size_t)sk[p] * nqp;
            for (uint32_t r = 0; r < nv; r++)
                x[r] = _mm512_add_ps(x[r], _mm512_maskz_loadu_ps(mp[r], t + 16 * r));
        }
        for (uint32_t r = 0; r < nv; r++)
            acc[r] = _mm512_max_ps(acc[r], x[r]);
    }
    for (uint32_t r = 0; r < nv; r++)
        _mm512_mask_storeu_ps(m + 16 * r, mp[r], acc[r]);
}
#endif

#ifdef TT_SSE2
/* codes_max for 4-vector queries (nqp 4: DiffRetriever's), for every x86-64 CPU: the row
 * is one 128-bit register, cheaper than the general loop (a scratch row and a loop
 * over nqp) and than a masked 512-bit load of 4 lanes (0.6 against 1.3 ms per query on
 * the 20k-document DiffRetriever shape in the all-documents plan, bench/bench_stage2.c).
 * Without the sketch the pruning mask is a branch (a branchless blend measured slower:
 * 0.67 ms, and 0.26 against 0.21 ms with nprobe 1). */
static void codes_max4(float *m, const float *St, const tt_index *idx, uint64_t d,
                       const uint8_t *keep) {
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    __m128 a = _mm_set1_ps(STAGE2_FLOOR);
    for (uint64_t v = v0; v < v1; v++) {
        const uint32_t k = tt_index_code(idx, v);
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * 4);
        if (keep && !keep[k])
            continue;
        a = _mm_max_ps(a, _mm_loadu_ps(St + (uint64_t)k * 4));
    }
    _mm_storeu_ps(m, a);
}

/* The same with a 4-byte residual sketch (4 outlier dimensions): the table rows'
 * addresses do not wait on one another, the sums are added in codes_max's order (St,
 * then positions 0-3: the same bits), and the pruning mask is a blend with the floor,
 * which the maximum starts from (summing the sketch of a vector that then does not
 * count measured a little cheaper than the branch: 1.00 against 1.09 ms per query in
 * the all-documents plan, equal with nprobe 1). */
static void codes_max4_sketch4(float *m, const tt_search_ctx *c, uint64_t d,
                               const uint8_t *keep) {
    const tt_index *idx = c->idx;
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    const float *St = c->St, *slut = c->slut;
    const __m128 lo = _mm_set1_ps(STAGE2_FLOOR);
    __m128 a = lo;
    for (uint64_t v = v0; v < v1; v++) {
        const uint32_t k = tt_index_code(idx, v);
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * 4);
        const uint8_t *sk = idx->sketch + v * 4;
        __m128 x = _mm_loadu_ps(St + (uint64_t)k * 4);
        const __m128 t0 = _mm_loadu_ps(slut + (size_t)sk[0] * 4);
        const __m128 t1 = _mm_loadu_ps(slut + 1024 + (size_t)sk[1] * 4);
        const __m128 t2 = _mm_loadu_ps(slut + 2048 + (size_t)sk[2] * 4);
        const __m128 t3 = _mm_loadu_ps(slut + 3072 + (size_t)sk[3] * 4);
        x = _mm_add_ps(_mm_add_ps(_mm_add_ps(_mm_add_ps(x, t0), t1), t2), t3);
        if (keep) {
            const __m128 km = _mm_castsi128_ps(_mm_set1_epi32(-(int32_t)(keep[k] != 0)));
            x = _mm_or_ps(_mm_and_ps(km, x), _mm_andnot_ps(km, lo));
        }
        a = _mm_max_ps(a, x);
    }
    _mm_storeu_ps(m, a);
}
#endif

/* The nprobe best centroids of every query vector (lists sorted, ties: lower id) and,
 * with threshold, the pruning mask. probe_s/probe have nq * nprobe entries, already
 * -inf / UINT32_MAX; scratch has nqp floats. */
static void scan_topn(const float *St, uint32_t K, uint32_t nq, uint32_t nqp, uint32_t nprobe,
                      const float *threshold, uint8_t *keep, float *probe_s, uint32_t *probe,
                      float *scratch) {
    /* worst[i]: the score a centroid must beat to enter query vector i's list
     * (padding lanes never enter: +inf). A vector test skips most rows. */
    float *worst = scratch;
    for (uint32_t i = 0; i < nqp; i++)
        worst[i] = i < nq ? -INFINITY : INFINITY;
    for (uint32_t k = 0; k < K; k++) {
        const float *row = St + (uint64_t)k * nqp;
        float mx = -INFINITY;
#ifdef TT_SSE2
        __m128 any = _mm_setzero_ps(), vmx = _mm_set1_ps(-INFINITY);
        for (uint32_t i = 0; i < nqp; i += 4) {
            __m128 x = _mm_loadu_ps(row + i);
            any = _mm_or_ps(any, _mm_cmpgt_ps(x, _mm_loadu_ps(worst + i)));
            vmx = _mm_max_ps(x, vmx);
        }
        bool enter = _mm_movemask_ps(any) != 0;
        mx = row_max_sse(vmx, row, nq, nqp);
#else
        bool enter = true;
        for (uint32_t i = 0; i < nq; i++)
            mx = row[i] > mx ? row[i] : mx;
#endif
        for (uint32_t i = 0; enter && i < nq; i++)
            if (row[i] > worst[i])
                worst[i] = probe_insert(probe_s + (size_t)i * nprobe, probe + (size_t)i * nprobe,
                                        nprobe, row[i], k);
        if (threshold)
            keep[k] = mx >= *threshold;
    }
}

static int grow_probes(tt_search_ctx *c, uint32_t nprobe) {
    const size_t cap = TT_MAX((size_t)c->nq * nprobe, (size_t)c->nqp);
    int st = tt_grow((void **)&c->probe, &c->probe_cap, cap, sizeof *c->probe, "probes");
    return st ? st
              : tt_grow((void **)&c->probe_s, &c->probe_s_cap, cap, sizeof *c->probe_s, "probes");
}

/* One pass over St: with threshold, the pruning mask; and a sorted list of the nprobe
 * best centroids of every query vector (ties: lower id); then the distinct probed
 * centroids in c->cells. With nprobe 1 and c->st_top1 (stage 1's kernel kept each query
 * vector's best as it scored, and c->st_keep: the mask), there is no pass. */
static int stage1_select(tt_search_ctx *c, uint32_t nprobe, const float *threshold,
                         uint32_t *ncells_out) {
    const uint32_t K = c->idx->num_centroids, nq = c->nq, nqp = c->nqp;
    int st;
    size_t np = (size_t)nq * nprobe;
    if ((st = grow_probes(c, nprobe)))
        return st;
    if (nprobe == 1 && c->st_top1 && (!threshold || *threshold == INFINITY || c->st_keep)) {
        /* stage 1's kernel did this pass as it scored (the mask too, unless it is the
         * relative rule's to write: threshold +inf) */
    } else if (nprobe == 1 && threshold) {
#ifdef TT_AVX512
        if (c->avx512 && nqp <= AVX512_MAX_NQP)
            scan_top1_avx512(c->St, K, nq, nqp, *threshold, c->keep, c->probe_s, c->probe);
        else
#endif
            scan_top1(c->St, K, nq, nqp, *threshold, c->keep, c->probe_s, c->probe);
    } else {
        for (size_t r = 0; r < np; r++) {
            c->probe_s[r] = -INFINITY;
            c->probe[r] = UINT32_MAX;
        }
#ifdef TT_AVX512
        if (c->avx512 && nqp <= AVX512_MAX_NQP)
            scan_topn_avx512(c->St, K, nq, nqp, nprobe, threshold, c->keep, c->probe_s, c->probe);
        else
#endif
            scan_topn(c->St, K, nq, nqp, nprobe, threshold, c->keep, c->probe_s, c->probe,
                      c->m);
    }
    uint32_t ncells = 0;
    for (size_t r = 0; r < np; r++) {
        uint32_t k = c->probe[r];
        if (k != UINT32_MAX && !c->cell_seen[k]) {
            c->cell_seen[k] = 1;
            c->cells[ncells++] = k;
        }
    }
    for (uint32_t t = 0; t < ncells; t++)
        c->cell_seen[c->cells[t]] = 0;
    *ncells_out = ncells;
    return TT_OK;
}

/* Candidates: the union of the probed IVF lists, gathered in a bitmap and read back in
 * ascending order (which also clears the bitmap for the next query). */
static int stage1_union(tt_search_ctx *c, uint32_t ncells, size_t *ncand_out) {
    const tt_index *idx = c->idx;
    uint64_t wlo = UINT64_MAX, whi = 0, total = 0;
    int st;
    /* Each segment's lists hold its local rows: the union is over the index's rows. */
    for (uint32_t s = 0; s < idx->nseg; s++) {
        const tt_segment *sg = &idx->seg[s];
        for (uint32_t t = 0; t < ncells; t++) {
            uint32_t k = c->cells[t];
            const uint8_t *p = sg->ivf_data + sg->ivf_off[k];
            const uint8_t *end = sg->ivf_data + sg->ivf_off[k + 1];
            uint64_t doc = 0, delta;
            for (uint32_t e = 0; e < sg->ivf_len[k]; e++) {
                if (!tt_varint_get(&p, end, &delta) || !tt_add_ok(doc, delta, &doc) ||
                    doc >= sg->num_docs) {
                    for (uint64_t w = wlo; wlo != UINT64_MAX && w <= whi; w++)
                        c->bits[w] = 0;
                    return tt_err(TT_ECORRUPT, "%s: IVF list of centroid %u is damaged",
                                  sg->f_ivf.path, k);
                }
                uint64_t row = sg->doc0 + doc, w = row >> 6;
                c->bits[w] |= 1ull << (row & 63);
                wlo = w < wlo ? w : wlo;
                whi = w > whi ? w : whi;
            }
            total += sg->ivf_len[k];
        }
    }
    size_t n = 0;
    if (total > 0) {
        if ((st = tt_grow((void **)&c->cand, &c->cand_cap,
                           (size_t)TT_MIN(total, idx->num_docs), sizeof *c->cand, "candidates")))
            return st;
        for (uint64_t w = wlo; w <= whi; w++) {
            /* Deleted rows are no candidates: every stage sees only live documents. */
            uint64_t x = idx->deleted ? c->bits[w] & ~idx->deleted[w] : c->bits[w];
            /* Nor are rows outside the filter: no stage counts them. */
            if (c->filter)
                x &= c->filter->bits[w];
            c->bits[w] = 0;
            while (x) {
                c->cand[n++] = (w << 6) | (uint64_t)__builtin_ctzll(x);
                x &= x - 1;
            }
        }
    }
    *ncand_out = n;
    return TT_OK;
}

/* Whether every query vector's best centroid score (nprobe 1) is >= 0. */
static bool tops_nonnegative(const tt_search_ctx *c) {
    for (uint32_t i = 0; i < c->nq; i++)
        if (!(c->probe_s[i] >= 0))
            return false;
    return true;
}

/* The relative pruning mask: centroid k survives if St[k, i] >= t[i] for some query
 * vector i, t[i] = top_i - (1 - ratio) * |top_i| (top_i: its best centroid score, the
 * head of its probe list). Scale-free: scaling the query or the vectors scales top_i
 * and t[i] alike, so one ratio suits cosine ColBERT scores, 3584-d hidden states and
 * raw inner products, where ColBERTv2's absolute 0.5 prunes everything or nothing.
 * t has nqp entries (padding lanes: +inf, never reached). */
static void relative_mask(tt_search_ctx *c, uint32_t nprobe, float ratio, float *t) {
    const uint32_t K = c->idx->num_centroids, nq = c->nq, nqp = c->nqp;
    for (uint32_t i = 0; i < nqp; i++) {
        float top = i < nq ? c->probe_s[(size_t)i * nprobe] : INFINITY;
        t[i] = i < nq ? top - (1 - ratio) * fabsf(top) : INFINITY;
    }
    for (uint32_t k = 0; k < K; k++) {
        const float *row = c->St + (uint64_t)k * nqp;
#ifdef TT_SSE2
        /* Most kept centroids pass on their first query vectors: stop at the first. */
        uint8_t hit = 0;
        for (uint32_t i = 0; i < nqp && !hit; i += 4)
            hit = _mm_movemask_ps(_mm_cmpge_ps(_mm_loadu_ps(row + i), _mm_loadu_ps(t + i))) != 0;
        c->keep[k] = hit;
#else
        uint8_t hit = 0;
        for (uint32_t i = 0; i < nq; i++)
            hit |= row[i] >= t[i];
        c->keep[k] = hit;
#endif
    }
}

/* The sketch's lookup table for the current query: slut[(p * 256 + b) * nqp + i] =
 * q_i[p] * weight(p, b) for the sketched positions p (padding lanes 0). */
static int sketch_lut(tt_search_ctx *c) {
    const tt_index *idx = c->idx;
    const uint32_t sb = idx->sketch_bytes, nqp = c->nqp, dim = idx->dim;
    int st;
    if ((st = tt_grow((void **)&c->slut, &c->slut_cap, (size_t)sb * 256 * nqp, sizeof *c->slut,
                      "sketch table")))
        return st;
    for (uint32_t p = 0; p < sb; p++) {
        const float *w = idx->codec.weights + idx->codec.woff[p];
        for (uint32_t b = 0; b < 256; b++) {
            float *row = c->slut + ((size_t)p * 256 + b) * nqp;
            for (uint32_t i = 0; i < nqp; i++)
                row[i] = c->Qp[(size_t)i * dim + p] * w[b];
        }
    }
    return TT_OK;
}

/* Every live document (of the filter's, if any) as a candidate: what probing every
 * centroid gives, without sorting K centroids per query vector. */
static int every_allowed(tt_search_ctx *c, size_t *ncand_out) {
    int st = tt_ctx_allowed_list(c);
    *ncand_out = st ? 0 : (size_t)c->allowed;
    return st;
}

/* PLAID stage 1: St = C·Qᵀ, the pruning mask and the candidate documents.
 * When the nprobe lists hold fewer than min_cand documents (small collections, where a
 * list holds a handful of documents), nprobe doubles until they do or every centroid
 * is probed: stage 2 has room for min_cand = ndocs documents, and filling it costs
 * little. On collections large enough for PLAID's defaults this never triggers. */
int tt_plaid_stage1(tt_search_ctx *c, const tt_search_options *o, size_t *ncand_out) {
    const tt_index *idx = c->idx;
    const uint32_t K = idx->num_centroids;
    const size_t min_cand = o->ndocs;
    const bool relative = o->pruning == TT_PRUNE_RELATIVE;
    /* The relative rule needs every query vector's best score first: the mask is a
     * second pass over St (scan_top1 is given a threshold nothing reaches). */
    float threshold = relative ? INFINITY : o->threshold;
    uint32_t nprobe = TT_MIN((uint32_t)o->nprobe, K), ncells;
    int st;
    c->use_sketch = o->sketch && idx->sketch_bytes > 0;
    if (c->use_sketch && (st = sketch_lut(c)))
        return st;
    c->cgroups = o->centroid_groups > 0 ? (uint32_t)o->centroid_groups : 0;
    /* Probing every centroid: every live document is a candidate; only the pruning
     * mask and each query vector's best score are needed. */
    const bool all = nprobe >= K;
    /* With one probe, stage 1's kernel keeps each query vector's best centroid as it
     * scores, and the pruning mask where its threshold is known before the scores: the
     * absolute rule's, and the relative rule's at ratio 0 (the calibration's), whose
     * t_i = top_i - |top_i| is 0 wherever top_i >= 0. */
    const bool one = all || nprobe == 1;
    const float pre = relative ? 0.0f : o->threshold;
    const bool pre_known = !relative || o->prune_ratio == 0;
    if ((one && (st = grow_probes(c, 1))) ||
        (st = tt_ctx_centroid_scores(c, one, pre_known ? &pre : NULL)))
        return st;
    if ((st = stage1_select(c, all ? 1 : nprobe, &threshold, &ncells)))
        return st;
    if (relative && !(c->st_keep && tops_nonnegative(c)))
        relative_mask(c, all ? 1 : nprobe, o->prune_ratio, c->m);
    if (c->direct) {
        /* A small allowed set: every allowed document is a candidate. */
        if ((st = tt_ctx_allowed_list(c)))
            return st;
        *ncand_out = (size_t)c->allowed;
        return TT_OK;
    }
    if (all)
        return every_allowed(c, ncand_out);
    if ((st = stage1_union(c, ncells, ncand_out)))
        return st;
    while (*ncand_out < min_cand && *ncand_out < c->allowed && nprobe < K) {
        nprobe = nprobe > K / 2 ? K : 2 * nprobe;
        if (nprobe >= K)
            return every_allowed(c, ncand_out);
        if ((st = stage1_select(c, nprobe, NULL, &ncells)) ||
            (st = stage1_union(c, ncells, ncand_out)))
            return st;
    }
    return TT_OK;
}

/* Maximum over a document's vectors (only those with keep[code], if keep) of their St
 * rows, starting from STAGE2_FLOOR; with the sketch in use, of St[code(v)] plus
 * sum_p slut[p, sketch(v)[p]]. */
static void codes_max(float *m, const tt_search_ctx *c, uint64_t d, const uint8_t *keep) {
    const tt_index *idx = c->idx;
    const uint32_t nqp = c->nqp, sb = c->use_sketch ? idx->sketch_bytes : 0;
    const uint64_t v0 = idx->doc_vec0[d], v1 = idx->doc_vec0[d + 1];
    const float *St = c->St;
    float *row = c->m + nqp; /* nqp more floats of scratch (see tt_ctx_set_query) */
    for (uint32_t i = 0; i < nqp; i++)
        m[i] = STAGE2_FLOOR;
    for (uint64_t v = v0; v < v1; v++) {
        uint32_t k = tt_index_code(idx, v);
        /* St rows are random accesses: ask for a row a few codes ahead. */
        if (v + 4 < v1)
            __builtin_prefetch(St + (uint64_t)tt_index_code(idx, v + 4) * nqp);
        if (keep && !keep[k])
            continue;
        const float *s = St + (uint64_t)k * nqp;
        if (sb) {
            const uint8_t *sk = idx->sketch + v * sb;
            for (uint32_t i = 0; i < nqp; i++)
                row[i] = s[i];
            for (uint32_t p = 0; p < sb; p++) {
                const float *t = c->slut + ((size_t)p * 256 + sk[p]) * nqp;
                for (uint32_t i = 0; i < nqp; i++)
                    row[i] += t[i];
            }
            s = row;
        }
        max_into(m, s, nqp);
    }
}

/* PLAID stages 2 and 3: approximate score from the centroid scores (plus the residual
 * sketch's, when used); with keep, only centroids that survived pruning count. Pushes
 * every document into c->top. */
void tt_plaid_interaction(tt_search_ctx *c, const uint64_t *docs, size_t n,
                                 const uint8_t *keep) {
    const tt_index *idx = c->idx;
    float *m = c->m;
    for (size_t t = 0; t < n; t++) {
        uint64_t d = docs[t];
        /* The documents are scattered: ask for the offsets two documents ahead and the
         * codes one document ahead. */
        if (t + 2 < n)
            __builtin_prefetch(idx->doc_vec0 + docs[t + 2]);
        if (t + 1 < n)
            __builtin_prefetch(idx->codes + idx->doc_vec0[docs[t + 1]] * idx->code_bytes);
#ifdef TT_SSE2
        if (c->rows4 && c->nqp == 4 && !c->use_sketch)
            codes_max4(m, c->St, idx, d, keep);
        else if (c->rows4 && c->nqp == 4 && idx->sketch_bytes == 4)
            codes_max4_sketch4(m, c, d, keep);
        else
#endif
#ifdef TT_AVX512
        if (c->avx512 && c->nqp <= AVX512_MAX_NQP && c->use_sketch)
            codes_max_sketch_avx512(m, c, d, keep);
        else if (c->avx512 && c->nqp <= AVX512_MAX_NQP)
            codes_max_avx512(m, c->St, c->nqp, idx, d, keep);
        else
#endif
            codes_max(m, c, d, keep);
        float sum = 0;
        for (uint32_t i = 0; i < c->nq; i++)
            sum += m[i];
        tt_topk_push(&c->top, d, sum);
    }
}

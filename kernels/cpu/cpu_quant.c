/* kernels/cpu/cpu_quant.c — y = W·x for the GGML block formats Q4_0, Q4_1,
 * Q5_0, Q5_1 (blocks of 32) and Q4_K, Q5_K, Q6_K (super-blocks of 256), the
 * math of kernels/ref/ref_quant.c (its header comment is the definition).
 *
 * The inputs of a call are quantised once per input row as ggml does for
 * the type's vec_dot_type (Q8_0 blocks of 32 for Q4_0/Q5_0, Q8_1 for
 * Q4_1/Q5_1: the same plus s = f16(d sum q), Q8_K blocks of 256 with sums
 * of 16 for the K-quants: the same bits as the reference's quantisers), then the
 * pool's threads split the weight rows; a task walks tiles of rows x inputs
 * (NA_CQ_TR x NA_CQ_TB) so both stay in cache while every pair is dotted. A dot product unpacks
 * 32 codes into a vector of bytes and multiplies them with the int8 inputs
 * (maddubs: unsigned codes x signed inputs, pairs summed in int16, never
 * saturating as the codes are <= 63 and |q| <= 127; then madd into int32):
 *   legacy blocks   the block's int32 lanes to f32 times d_w * d_x, summed in
 *                   vector lanes (the only difference from the reference:
 *                   the f32 order over blocks);
 *   K-quants        the exact int32 sums per super-block in vector lanes
 *                   (sub-block scales applied with madd; the mins / the
 *                   Q6_K offset through the input's sums of 16), each lane
 *                   to f32 times d * d_x, summed in lanes (again only the
 *                   f32 order differs from the reference).
 * Compiled for x86-64-v3 and, as na_cpu_matmul_quant_v4, for x86-64-v4
 * (kernels/CMakeLists.txt); the AVX512-VNNI copy (NA_CPU_VNNI) replaces each
 * maddubs + madd pair by one vpdpbusd.
 * Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 weights placed in groups of 8 rows
 * (NA_LAYOUT_Q4X8, Q4KX8, Q5KX8, Q6KX8, Q8X8; kernels/cpu/cpu_pack.c) take the grouped
 * kernels below instead, at every batch: one output row per 32-bit lane
 * (their sections say how they sum). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"

#if defined(NA_CPU_VNNI)
#define na_cpu_matmul_quant na_cpu_matmul_quant_vnni
#define na_cpu_quant_inputs na_cpu_quant_inputs_vnni
#define na_cpu_gemm_q4 na_cpu_gemm_q4_vnni
#endif

#define NA_CPU_QPF 4096          /* prefetch distance along a weight row, bytes */
#define NA_CPU_QPREFETCH(p) _mm_prefetch((const char *)(p) + NA_CPU_QPF, _MM_HINT_T0)
#define NA_CPU_Q_PAR_MIN  (1u << 17)   /* weights x inputs worth waking the pool */

/* ---- helpers ------------------------------------------------------------- */

/* acc + the int16 pairs a x b of each 32-bit lane (a0 b0 + a1 b1): one
 * vpdpwssd in the VNNI copy, madd + add elsewhere; the same integers. */
NA_INLINE __m256i na_cq_madd_acc(__m256i acc, __m256i a, __m256i b)
{
#if defined(NA_CPU_VNNI)
    return _mm256_dpwssd_epi32(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

/* Unsigned bytes u (<= 63) times signed bytes s, the 4 products of each
 * 32-bit lane summed into it. */
NA_INLINE __m256i na_cq_dot4(__m256i u, __m256i s)
{
#if defined(NA_CPU_VNNI)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* The 16 bytes qs as 32 nibbles: low nibbles in bytes 0..15, high in 16..31. */
NA_INLINE __m256i na_cq_nibbles32(const uint8_t *qs)
{
    __m128i t = _mm_loadu_si128((const __m128i *)qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

NA_INLINE float na_cq_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ---- inputs ----------------------------------------------------------------- */

/* The inputs of one row, as kernels/ref/ref.h's na_ref_qx_t. */
typedef struct {
    const int8_t  *q;
    const float   *d;
    const int16_t *bs;      /* K-quants: sums of 16 */
    const float   *s;       /* Q4_1 / Q5_1: Q8_1's s per block */
} na_cq_x_t;

/* Q8_K: 256 inputs -> q, d (returned), the 16 sums of 16; bit-identical to
 * na_ref_quantize_q8k (ggml's quantize_row_q8_K_ref: same amax, iscale =
 * 127 / amax, x * iscale rounded to nearest even, d = 1 / iscale). */
static float na_cq_quantize_q8k(const float *x, int8_t *q, int16_t *bs)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(3.0e38f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256 am = _mm256_setzero_ps(), bad = _mm256_setzero_ps(), vid;
    float amax, d, id;
    int j, i;

    for (j = 0; j < NA_QK_K; j += 8) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + j), absmask);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));    /* NaN or Inf */
        am = _mm256_max_ps(am, a);
    }
    if (_mm256_movemask_ps(bad)) {
        memset(q, 0, NA_QK_K);
        memset(bs, 0, NA_QK_K / 16 * sizeof(int16_t));
        return NAN;
    }
    amax = na_cpu_hmax(am);
    id = amax != 0.0f ? 127.0f / amax : 0.0f;
    d = amax != 0.0f ? 1.0f / id : 0.0f;
    vid = _mm256_set1_ps(id);
    for (j = 0; j < NA_QK_K; j += 32) {
        __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), vid));
        __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8), vid));
        __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 16), vid));
        __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 24), vid));
        i0 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + j), _mm256_permutevar8x32_epi32(i0, perm));
    }
    for (j = 0; j < NA_QK_K / 16; j++) {
        int s = 0;
        for (i = 0; i < 16; i++)
            s += q[16 * j + i];
        bs[j] = (int16_t)s;
    }
    return d;
}

/* ---- dot products: one weight row (n elements) with one quantised input row -- */

/* Each kernel dots one weight row with NB (1..NA_CQ_NB, a constant after
 * inlining) input rows at once: the row's codes are unpacked once per block
 * and multiplied with every input, each input summed exactly as alone (so a
 * result never depends on the batch). */
#define NA_CQ_NB 4

/* Q4_0, Q5_0 (centred codes) and Q4_1, Q5_1 (codes + min), blocks of 32. */
NA_INLINE void na_cq_dot_legacy(na_dtype_t dt, const uint8_t *row, const na_cq_x_t *x, int NB,
                                int n, float *out)
{
    const int nb = n / 32;
    const size_t bb = na_dtype_block_bytes(dt);
    const int q5 = dt == NA_DTYPE_Q5_0 || dt == NA_DTYPE_Q5_1;
    const int has_m = dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1;
    __m256 acc[NA_CQ_NB];
    float summ[NA_CQ_NB];
    int b, i;

#pragma GCC unroll 4
    for (i = 0; i < NB; i++) {
        acc[i] = _mm256_setzero_ps();
        summ[i] = 0.0f;
    }
    for (b = 0; b < nb; b++, row += bb) {
        const uint8_t *qs = row + 2 + (has_m ? 2 : 0) + (q5 ? 4 : 0);
        __m256i w = na_cq_nibbles32(qs), wa = w;
        float dw = na_cq_f16(row), mw = has_m ? na_cq_f16(row + 2) : 0.0f;
        if ((b & 7) == 0)
            NA_CPU_QPREFETCH(row);
        if (q5) {
            __m256i hb = na_cpu_bits32(row + 2 + (has_m ? 2 : 0));
            if (has_m)                          /* q = nibble + 16 bit */
                w = _mm256_or_si256(w, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
            else                                /* q - 16 = nibble - 16 (1 - bit) as int8 */
                w = _mm256_or_si256(w, _mm256_andnot_si256(hb, _mm256_set1_epi8((char)0xF0)));
        } else if (!has_m) {
            w = _mm256_sub_epi8(w, _mm256_set1_epi8(8));
        }
        wa = has_m ? w : _mm256_sign_epi8(w, w);  /* signed codes: |w| x sign(x, w) */
#pragma GCC unroll 4
        for (i = 0; i < NB; i++) {
            __m256i xq = _mm256_loadu_si256((const __m256i *)(x[i].q + 32 * (size_t)b));
            float dx = x[i].d[b];
            __m256i p = na_cq_dot4(wa, has_m ? xq : _mm256_sign_epi8(xq, w));
            if (has_m)
                summ[i] = fmaf(mw, x[i].s[b], summ[i]);   /* fixed: one fma */
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * dx), acc[i]);
        }
    }
#pragma GCC unroll 4
    for (i = 0; i < NB; i++)
        out[i] = na_cpu_hsum(acc[i]) + summ[i];
}

/* The same dot products for NR (2..4) consecutive weight rows (stride rs
 * bytes) with NB (1..2) inputs: NR x NB independent accumulators, so the
 * f32 fmadd chains (one per block) overlap instead of waiting on each
 * other. The centred types skip the sign trick: the unsigned code u times
 * the input, plus -off x the input's sums of 4 (off 8 or 16, computed once
 * per block and input for all NR rows), is (u - off) x input in each int32
 * lane, the same integers as na_cq_dot_legacy's; then, as there, the lanes
 * to f32, times dw * dx, fmadd into 8 lanes, hsum. So each (row, input)
 * pair's bits do not depend on NR or NB. out[r * NB + i].
 * The prefetch fetches the next group of NR rows while this one is read:
 * in memory order (two lines per block step, NR blocks' bytes) when the
 * group is at most NA_CQ_PFLIN bytes, else each row's line NR rows ahead
 * every other block (tuned on 2048- and 8192-column Q4_0 rows from DRAM:
 * the in-order one lifted 2048-column rows from 36 to 65 GFLOP/s of CPU
 * time but slowed 8192-column rows, 18 KiB groups, from 50 to 41). */
#define NA_CQ_NR 4
#define NA_CQ_PFLIN (12u << 10)

/* 32 nibbles of the 16 bytes at qs (low nibbles in bytes 0..15, high in
 * 16..31): one broadcast load, one variable shift, one and. */
NA_INLINE __m256i na_cq_nibbles32b(const uint8_t *qs)
{
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    v = _mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* acc + the 4 products u x s of each 32-bit lane (u unsigned <= 31). */
NA_INLINE __m256i na_cq_dot4acc(__m256i acc, __m256i u, __m256i s)
{
#if defined(NA_CPU_VNNI)
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                   _mm256_set1_epi16(1)));
#endif
}

NA_INLINE void na_cq_dot_legacy_rows(na_dtype_t dt, const uint8_t *row, size_t rs, int NR,
                                     const na_cq_x_t *x, int NB, int n, float *out)
{
    const int nb = n / 32;
    const size_t bb = na_dtype_block_bytes(dt), pf = (size_t)NR * rs;
    const uint8_t *row0 = row;
    const int lin = pf <= NA_CQ_PFLIN;
    const int q5 = dt == NA_DTYPE_Q5_0 || dt == NA_DTYPE_Q5_1;
    const int has_m = dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1;
    const int qoff = 2 + (has_m ? 2 : 0) + (q5 ? 4 : 0);
    const __m256i voff = _mm256_set1_epi8(has_m ? 0 : (q5 ? 16 : 8));
    __m256 acc[NA_CQ_NR][2];
    float summ[NA_CQ_NR][2];
    int b, i, r;

#pragma GCC unroll 4
    for (r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (i = 0; i < NB; i++) {
            acc[r][i] = _mm256_setzero_ps();
            summ[r][i] = 0.0f;
        }
    for (b = 0; b < nb; b++, row += bb) {
        __m256i xq[2], neg[2];
        __m256 dx[2];
#pragma GCC unroll 2
        for (i = 0; i < NB; i++) {
            xq[i] = _mm256_loadu_si256((const __m256i *)(x[i].q + 32 * (size_t)b));
            dx[i] = _mm256_set1_ps(x[i].d[b]);
            neg[i] = has_m ? _mm256_setzero_si256()
                           : _mm256_sub_epi32(_mm256_setzero_si256(),
                                              na_cq_dot4acc(_mm256_setzero_si256(), voff, xq[i]));
        }
        if (lin) {                              /* the next group, in memory order */
            const char *pp = (const char *)row0 + pf + (size_t)b * NR * bb;
            _mm_prefetch(pp, _MM_HINT_T0);
            _mm_prefetch(pp + 64, _MM_HINT_T0);
        } else if ((b & 1) == 0) {              /* each row's line in the next group */
#pragma GCC unroll 4
            for (r = 0; r < NR; r++)
                _mm_prefetch((const char *)(row + (size_t)r * rs + pf), _MM_HINT_T0);
        }
#pragma GCC unroll 4
        for (r = 0; r < NR; r++) {
            const uint8_t *rb = row + (size_t)r * rs;
            __m256i w = na_cq_nibbles32b(rb + qoff);
            /* the f16 scale broadcast as f16 then widened: one load-op
             * and one convert (the same value as na_cq_f16) */
            __m256 dw = _mm256_cvtph_ps(_mm_set1_epi16((short)(rb[0] | (rb[1] << 8))));
            float mw = has_m ? na_cq_f16(rb + 2) : 0.0f;
            if (q5)                             /* code = nibble + 16 bit */
                w = _mm256_or_si256(w, _mm256_and_si256(na_cpu_bits32(rb + 2 + (has_m ? 2 : 0)),
                                                        _mm256_set1_epi8(0x10)));
#pragma GCC unroll 2
            for (i = 0; i < NB; i++) {
                __m256i p = na_cq_dot4acc(neg[i], w, xq[i]);
                if (has_m)
                    summ[r][i] = fmaf(mw, x[i].s[b], summ[r][i]);
                acc[r][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, dx[i]),
                                            acc[r][i]);
            }
        }
    }
#pragma GCC unroll 4
    for (r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (i = 0; i < NB; i++)
            out[r * NB + i] = na_cpu_hsum(acc[r][i]) + summ[r][i];
}

/* Q4_K / Q5_K. Per super-block: the 8 scales and mins unpacked with
 * 32-bit masks (as ggml does), the scales broadcast to the int16 lanes by
 * byte shuffles; exact int32 sums of scale x code x input per lane, then
 * converted and multiplied by d * d_x into f32 lanes; the mins' term from
 * the inputs' sums of 32 (pairs of the sums of 16) in 4 lanes. */
NA_INLINE __m256i na_cq_bcast_pair(__m256i v, int k)
{
    /* int16 lane k of each 128-bit half of v into all 8 lanes of that half */
    const __m256i m = _mm256_set1_epi16((short)((2 * k) | ((2 * k + 1) << 8)));
    return _mm256_shuffle_epi8(v, m);
}

NA_INLINE void na_cq_dot_k45(int q5, const uint8_t *row, const na_cq_x_t *x, int NB, int n,
                             float *out)
{
    const int nb = n / NA_QK_K;
    const size_t bb = q5 ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const uint32_t km1 = 0x3f3f3f3f, km2 = 0x0f0f0f0f, km3 = 0x03030303;
    __m256 acc_f[NA_CQ_NB];
    __m128 acc_m[NA_CQ_NB];
    int b, j, i;

#pragma GCC unroll 4
    for (i = 0; i < NB; i++) {
        acc_f[i] = _mm256_setzero_ps();
        acc_m[i] = _mm_setzero_ps();
    }
    for (b = 0; b < nb; b++, row += bb) {
        const uint8_t *qs = row + (q5 ? 48 : 16);
        __m256i acc[NA_CQ_NB], qh = _mm256_setzero_si256(), sc2;
        __m128i ms;
        uint32_t u[4], aux;
        float d = na_cq_f16(row), dmin = na_cq_f16(row + 2);

        NA_CPU_QPREFETCH(row);
        NA_CPU_QPREFETCH(row + 64);
        NA_CPU_QPREFETCH(row + 128);
        memcpy(u, row + 4, 12);                 /* 6-bit scales, mins (get_scale_min_k4) */
        u[3] = ((u[2] >> 4) & km2) | (((u[1] >> 6) & km3) << 4);
        aux = u[1] & km1;
        u[1] = (u[2] & km2) | (((u[0] >> 6) & km3) << 4);
        u[2] = aux;
        u[0] &= km1;
        /* int16: scales 0..7, then mins 0..7 */
        ms = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
        sc2 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(ms));
        if (q5)
            qh = _mm256_loadu_si256((const __m256i *)(row + 16));
#pragma GCC unroll 4
        for (i = 0; i < NB; i++)
            acc[i] = _mm256_setzero_si256();
        for (j = 0; j < 4; j++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            __m256i s0 = na_cq_bcast_pair(sc2, 2 * j);
            __m256i s1 = na_cq_bcast_pair(sc2, 2 * j + 1);
            if (q5) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(
                         _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(
                         _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4));
            }
#pragma GCC unroll 4
            for (i = 0; i < NB; i++) {
                const int8_t *xq = x[i].q + (size_t)b * NA_QK_K + 64 * j;
                __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)xq));
                __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 32)));
                acc[i] = na_cq_madd_acc(na_cq_madd_acc(acc[i], p0, s0), p1, s1);
            }
        }
#pragma GCC unroll 4
        for (i = 0; i < NB; i++) {
            const int16_t *bs = x[i].bs + (size_t)b * (NA_QK_K / 16);
            float dx = x[i].d[b];
            __m128i s16a = _mm_loadu_si128((const __m128i *)bs);
            __m128i s16b = _mm_loadu_si128((const __m128i *)(bs + 8));
            __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(ms, 8));
            __m128i pm = _mm_madd_epi16(mins, _mm_hadd_epi16(s16a, s16b));   /* 4 x int32 */
            acc_f[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), _mm256_set1_ps(d * dx), acc_f[i]);
            acc_m[i] = _mm_fmadd_ps(_mm_cvtepi32_ps(pm), _mm_set1_ps(dmin * dx), acc_m[i]);
        }
    }
#pragma GCC unroll 4
    for (i = 0; i < NB; i++) {
        __m128 m = acc_m[i];
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        out[i] = na_cpu_hsum(acc_f[i]) - _mm_cvtss_f32(m);
    }
}

/* Q6_K: codes 0..63 times the inputs, minus 32 x the scaled inputs' sums of
 * 16, exact in int32 lanes, then times d * d_x into f32 lanes. */
NA_INLINE void na_cq_dot_q6k(const uint8_t *row, const na_cq_x_t *x, int NB, int n, float *out)
{
    const int nb = n / NA_QK_K;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    __m256 acc_f[NA_CQ_NB];
    int b, h, j, i;

#pragma GCC unroll 4
    for (i = 0; i < NB; i++)
        acc_f[i] = _mm256_setzero_ps();
    for (b = 0; b < nb; b++, row += 210) {
        __m256i acc[NA_CQ_NB];
        /* int16 scales 0..15; each half broadcast to both 128-bit lanes */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + 192)));
        __m256i sch[2];
        float d = na_cq_f16(row + 208);

        sch[0] = _mm256_permute2x128_si256(sc16, sc16, 0x00);
        sch[1] = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        NA_CPU_QPREFETCH(row);
        NA_CPU_QPREFETCH(row + 64);
        NA_CPU_QPREFETCH(row + 128);
        NA_CPU_QPREFETCH(row + 192);
#pragma GCC unroll 4
        for (i = 0; i < NB; i++) {            /* - 32 sum_j sc_j bsum_j, in 8 lanes */
            __m256i bs = _mm256_loadu_si256((const __m256i *)(x[i].bs + (size_t)b * (NA_QK_K / 16)));
            acc[i] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                      _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs), 5));
        }
        for (h = 0; h < 2; h++) {
            const uint8_t *ql = row + 64 * h, *qh = row + 128 + 32 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hv = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(hv, m3), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), m3), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), m3), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), m3), 4));
            for (j = 0; j < 4; j++) {
                /* 32 elements = sub-blocks 8h+2j (int16 lanes 0..7) and 8h+2j+1 (8..15) */
                const __m256i sm = _mm256_set_m128i(
                    _mm_set1_epi16((short)((4 * j + 2) | ((4 * j + 3) << 8))),
                    _mm_set1_epi16((short)((4 * j) | ((4 * j + 1) << 8))));
                __m256i s = _mm256_shuffle_epi8(sch[h], sm);
#pragma GCC unroll 4
                for (i = 0; i < NB; i++) {
                    const int8_t *xh = x[i].q + (size_t)b * NA_QK_K + 128 * h + 32 * j;
                    __m256i p = _mm256_maddubs_epi16(q[j], _mm256_loadu_si256((const __m256i *)xh));
                    acc[i] = na_cq_madd_acc(acc[i], p, s);
                }
            }
        }
#pragma GCC unroll 4
        for (i = 0; i < NB; i++)
            acc_f[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[i]), _mm256_set1_ps(d * x[i].d[b]),
                                       acc_f[i]);
    }
#pragma GCC unroll 4
    for (i = 0; i < NB; i++)
        out[i] = na_cpu_hsum(acc_f[i]);
}

/* Kernel of type DT for NB inputs (constants: one copy per pair). */
NA_INLINE void na_cq_dotn(na_dtype_t DT, const uint8_t *row, const na_cq_x_t *x, int NB, int n,
                          float *out)
{
    switch (DT) {
    case NA_DTYPE_Q4_K: na_cq_dot_k45(0, row, x, NB, n, out); break;
    case NA_DTYPE_Q5_K: na_cq_dot_k45(1, row, x, NB, n, out); break;
    case NA_DTYPE_Q6_K: na_cq_dot_q6k(row, x, NB, n, out); break;
    default:            na_cq_dot_legacy(DT, row, x, NB, n, out); break;
    }
}

/* One row of type DT with nb (any) inputs, NA_CQ_NB at a time. */
NA_INLINE void na_cq_row_t(na_dtype_t DT, const uint8_t *row, const na_cq_x_t *x, int nb, int n,
                           float *out)
{
    int b = 0;
    for (; b + NA_CQ_NB <= nb; b += NA_CQ_NB)
        na_cq_dotn(DT, row, x + b, NA_CQ_NB, n, out + b);
    switch (nb - b) {
    case 3: na_cq_dotn(DT, row, x + b, 3, n, out + b); break;
    case 2: na_cq_dotn(DT, row, x + b, 2, n, out + b); break;
    case 1: na_cq_dotn(DT, row, x + b, 1, n, out + b); break;
    default: break;
    }
}

static void na_cq_row(na_dtype_t dt, const uint8_t *row, const na_cq_x_t *x, int nb, int n,
                      float *out)
{
    switch (dt) {
    case NA_DTYPE_Q4_0: na_cq_row_t(NA_DTYPE_Q4_0, row, x, nb, n, out); break;
    case NA_DTYPE_Q4_1: na_cq_row_t(NA_DTYPE_Q4_1, row, x, nb, n, out); break;
    case NA_DTYPE_Q5_0: na_cq_row_t(NA_DTYPE_Q5_0, row, x, nb, n, out); break;
    case NA_DTYPE_Q5_1: na_cq_row_t(NA_DTYPE_Q5_1, row, x, nb, n, out); break;
    case NA_DTYPE_Q4_K: na_cq_row_t(NA_DTYPE_Q4_K, row, x, nb, n, out); break;
    case NA_DTYPE_Q5_K: na_cq_row_t(NA_DTYPE_Q5_K, row, x, nb, n, out); break;
    case NA_DTYPE_Q6_K: na_cq_row_t(NA_DTYPE_Q6_K, row, x, nb, n, out); break;
    default: break;
    }
}

/* NA_CQ_NR rows of a legacy type DT (stride rs) with nb (1..2) inputs;
 * out[r * nb + i]. */
NA_INLINE void na_cq_rows_t(na_dtype_t DT, const uint8_t *row, size_t rs, const na_cq_x_t *x,
                            int nb, int n, float *out)
{
    if (nb == 2)
        na_cq_dot_legacy_rows(DT, row, rs, NA_CQ_NR, x, 2, n, out);
    else
        na_cq_dot_legacy_rows(DT, row, rs, NA_CQ_NR, x, 1, n, out);
}

/* 1 if dt has the several-row kernel (for 1..2 inputs), which it ran. */
static int na_cq_rows(na_dtype_t dt, const uint8_t *row, size_t rs, const na_cq_x_t *x, int nb,
                      int n, float *out)
{
    switch (dt) {
    case NA_DTYPE_Q4_0: na_cq_rows_t(NA_DTYPE_Q4_0, row, rs, x, nb, n, out); return 1;
    case NA_DTYPE_Q4_1: na_cq_rows_t(NA_DTYPE_Q4_1, row, rs, x, nb, n, out); return 1;
    case NA_DTYPE_Q5_0: na_cq_rows_t(NA_DTYPE_Q5_0, row, rs, x, nb, n, out); return 1;
    case NA_DTYPE_Q5_1: na_cq_rows_t(NA_DTYPE_Q5_1, row, rs, x, nb, n, out); return 1;
    default: return 0;
    }
}

/* See cpu.h. */
void na_cpu_quant_inputs(na_dtype_t dt, const float *x, int n, int8_t *q, float *d,
                         int16_t *bs, float *s)
{
    int i;
    if (na_ref_quant_kind(dt) == 2) {
        for (i = 0; i < n / NA_QK_K; i++)
            d[i] = na_cq_quantize_q8k(x + (size_t)i * NA_QK_K, q + (size_t)i * NA_QK_K,
                                      bs + (size_t)i * (NA_QK_K / 16));
        return;
    }
    /* Q8_0 blocks; Q8_1's s for Q4_1 / Q5_1 */
    na_cpu_quantize_q8s(x, n, q, d, dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1 ? s : NULL);
}

/* ---- Q4_0 in groups of 8 rows (NA_LAYOUT_Q4X8, kernels/cpu/cpu_pack.c) ------
 * A 32-bit lane per row: per block, the 8 rows' codes come as 4 loads of 32
 * bytes (4 code bytes of each row), their low and high nibbles are 8 vectors
 * of unsigned codes u, and 8 vpdpbusd (or maddubs summed in int16, then
 * one madd: at most 8 x 2 x 15 x 127 = 30480, exact) with the input's 4
 * matching bytes broadcast give each row's exact integer sum of u x input
 * in its lane, started from -8 x the sum of the input block (so (u - 8) x
 * input, the block's dot product of codes and Q8 inputs). Then, for the 8
 * rows at once, acc = fma(that sum as f32, d_w x d_x, acc), block by block
 * in order from 0; the lanes are the outputs (no horizontal sum).
 * So each output is one f32 fma per block in block order, whatever the
 * batch, the tile of inputs or the ISA copy: batch-invariant by its shape.
 * (The row-major kernels above keep 8 f32 lanes per output instead; a Q4_0
 * weight is read one way or the other for its whole life, as placed.)
 * A task reads its groups as one sequential stream, left to the hardware
 * prefetchers.
 *
 * Q8_0 in groups of 8 rows (NA_LAYOUT_Q8X8) is the same with 8 loads of
 * codes + 128 (unsigned bytes) instead of 4 loads split into nibbles, and
 * -128 x the input block's sum as the start; without VNNI (maddubs of
 * codes up to 255 would saturate) the signed codes go through the sign
 * trick of the row kernels instead: |w| x sign(x, w), madd into int32 per
 * chunk. Both give the exact integer sum, so the copies agree bit for
 * bit. */
#define NA_CQ8_GB 144                   /* bytes of a group's block: 8 x 18 */
#define NA_CQ88_GB 272                  /* Q8X8: 8 x 34 */
#if defined(NA_CPU_VNNI) || defined(NA_CPU_V4)
#define NA_CQ8_NB 8                     /* inputs per pass (32 vector registers) */
#else
#define NA_CQ8_NB 4                     /* (16) */
#endif
#define NA_CQ8_GC 8                     /* groups sharing a pass over the inputs */

/* The unsigned codes of a group's block p: u[2c] the low nibbles of chunk c
 * (elements 4c..4c+3 of each row), u[2c+1] its high nibbles (16 + 4c..). */
NA_INLINE void na_cq8_codes(const uint8_t *p, __m256i u[8])
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    int c;
#pragma GCC unroll 4
    for (c = 0; c < 4; c++) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * c));
        u[2 * c] = _mm256_and_si256(v, m4);
        u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

/* Q8X8: the 8 chunks of 32 unsigned codes (w + 128) of a group's block p,
 * stored in the order na_cq8_isum pairs them with the inputs. */
NA_INLINE void na_cq88_codes(const uint8_t *p, __m256i u[8])
{
    int c;
#pragma GCC unroll 8
    for (c = 0; c < 8; c++)
        u[c] = _mm256_loadu_si256((const __m256i *)(p + 16 + 32 * c));
}

NA_INLINE __m256i na_cq8_x4(const int8_t *p)    /* 4 input bytes in every lane */
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Each row's exact sum of (code - 8) x input over the block: neg = -8 x the
 * sum of the input block xq[0..31]. */
NA_INLINE __m256i na_cq8_isum(const __m256i u[8], const int8_t *xq, int32_t neg)
{
#if defined(NA_CPU_VNNI)
    __m256i a = _mm256_set1_epi32(neg), b = _mm256_setzero_si256();
    int c;
#pragma GCC unroll 4
    for (c = 0; c < 4; c++) {
        a = _mm256_dpbusd_epi32(a, u[2 * c], na_cq8_x4(xq + 4 * c));
        b = _mm256_dpbusd_epi32(b, u[2 * c + 1], na_cq8_x4(xq + 16 + 4 * c));
    }
    return _mm256_add_epi32(a, b);
#else
    __m256i t[4];
    int c;
#pragma GCC unroll 4
    for (c = 0; c < 4; c++)
        t[c] = _mm256_add_epi16(_mm256_maddubs_epi16(u[2 * c], na_cq8_x4(xq + 4 * c)),
                                _mm256_maddubs_epi16(u[2 * c + 1], na_cq8_x4(xq + 16 + 4 * c)));
    t[0] = _mm256_add_epi16(_mm256_add_epi16(t[0], t[1]), _mm256_add_epi16(t[2], t[3]));
    return _mm256_add_epi32(_mm256_madd_epi16(t[0], _mm256_set1_epi16(1)),
                            _mm256_set1_epi32(neg));
#endif
}

/* Q8X8: each row's exact sum of w x input over the block (u = w + 128;
 * neg = -128 x the sum of the input block, used by the VNNI form only). */
NA_INLINE __m256i na_cq88_isum(const __m256i u[8], const int8_t *xq, int32_t neg)
{
#if defined(NA_CPU_VNNI)
    return na_cq8_isum(u, xq, neg);
#else
    __m256i a = _mm256_setzero_si256();
    int c;
    (void)neg;
#pragma GCC unroll 8
    for (c = 0; c < 8; c++) {       /* |w| <= 128, |x| <= 127: pairs never saturate */
        __m256i w = _mm256_xor_si256(u[c], _mm256_set1_epi8((char)0x80));
        __m256i x = na_cq8_x4(xq + 16 * (c % 2) + 4 * (c / 2));
        a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w),
                                                                       _mm256_sign_epi8(x, w)),
                                                  _mm256_set1_epi16(1)));
    }
    return a;
#endif
}

/* The quantised inputs of one row for the groups: q, d per block, and
 * neg = -8 x each block's sum of q (Q4_0; -128 x for Q8_0); b32, the sums
 * of 32 in the first 8 of each super-block's 16 slots (Q4_K:
 * na_cq_pair_sums), or the sums of 16 as quantised (Q6_K). */
typedef struct {
    const int8_t  *q;
    const float   *d;
    const int32_t *neg;
    const int16_t *b32;
} na_cq8_x_t;

/* Group gp (nblk blocks; Q8X8 when K8, else Q4X8) times NB inputs:
 * y[i * ys + 0..7] for input i. */
NA_INLINE void na_cq8_group(const uint8_t *gp, int nblk, const na_cq8_x_t *x, int NB, float *y,
                            size_t ys, int K8)
{
    __m256 acc[NA_CQ8_NB];
    int b, i;

#pragma GCC unroll 8
    for (i = 0; i < NB; i++)
        acc[i] = _mm256_setzero_ps();
    for (b = 0; b < nblk; b++, gp += K8 ? NA_CQ88_GB : NA_CQ8_GB) {
        __m256i u[8];
        __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
        if (K8)
            na_cq88_codes(gp, u);
        else
            na_cq8_codes(gp, u);
#pragma GCC unroll 8
        for (i = 0; i < NB; i++) {
            __m256i s = K8 ? na_cq88_isum(u, x[i].q + 32 * (size_t)b, x[i].neg[b])
                           : na_cq8_isum(u, x[i].q + 32 * (size_t)b, x[i].neg[b]);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s),
                                     _mm256_mul_ps(dw, _mm256_set1_ps(x[i].d[b])), acc[i]);
        }
    }
#pragma GCC unroll 8
    for (i = 0; i < NB; i++)
        _mm256_storeu_ps(y + (size_t)i * ys, acc[i]);
}

/* f(args..., 1) when flag, else f(args..., 0): a flag as a constant of the
 * kernel's inlined copy. */
#define NA_CQ_FLAG(flag, f, ...)        \
    do {                                \
        if (flag)                       \
            f(__VA_ARGS__, 1);          \
        else                            \
            f(__VA_ARGS__, 0);          \
    } while (0)

/* Group gp with nb (1..NA_CQ8_NB) inputs (NB and K8 constants in each copy). */
static void na_cq8_group_n(const uint8_t *gp, int nblk, const na_cq8_x_t *x, int nb, float *y,
                           size_t ys, int k8)
{
    switch (nb) {
#if NA_CQ8_NB == 8
    case 8: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 8, y, ys); break;
    case 7: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 7, y, ys); break;
    case 6: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 6, y, ys); break;
    case 5: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 5, y, ys); break;
#endif
    case 4: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 4, y, ys); break;
    case 3: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 3, y, ys); break;
    case 2: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 2, y, ys); break;
    default: NA_CQ_FLAG(k8, na_cq8_group, gp, nblk, x, 1, y, ys); break;
    }
}

/* ---- Q4_K in groups of 8 rows (NA_LAYOUT_Q4KX8, kernels/cpu/cpu_pack.c) -----
 * A 32-bit lane per row, as for Q4_0: per super-block and sub-block, each
 * row's exact integer sum of code x input (8 vpdpbusd, or 8 maddubs summed
 * in int16: at most 8 x 2 x 15 x 127 = 30480), times its 6-bit scale
 * (vpmulld), summed over the 8 sub-blocks; the mins' term, sum over s of
 * m_s x the input's sum over sub-block s, by madd of the byte pairs; then
 * acc += that sum x (d x d_x) and accm += the mins' term x (dmin x d_x), in
 * f32, super-block after super-block from 0; the output is acc - accm. The
 * same for every batch and ISA copy (batch-invariant by its shape).
 * Q5_K (NA_LAYOUT_Q5KX8) is the same kernel with each chunk's codes + 16
 * where their fifth bit is set (codes <= 31: without VNNI the int16 sums
 * are widened after 4 chunks, at most 4 x 2 x 31 x 127 = 31496). */
#define NA_CQK_GB 1184                  /* bytes of a group's super-block */
#define NA_CQ5_GB 1440                  /* Q5KX8: the same + 256 bytes of fifth bits */
#if defined(NA_CPU_VNNI) || defined(NA_CPU_V4)
#define NA_CQK_NB 4                     /* inputs per pass */
#else
#define NA_CQK_NB 2
#endif

/* Q5KX8: codes u (4 bytes of each of 8 rows) + 16 where bit p of the
 * little-endian 32-bit word at fb is set (p the byte of u): one masked add
 * with AVX-512 (BW, VL); elsewhere the word's bytes spread to the 32 bytes
 * and compared with each byte's bit. */
NA_INLINE __m256i na_cq5_fifth(__m256i u, const uint8_t *fb)
{
    uint32_t m;
    memcpy(&m, fb, 4);
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    return _mm256_mask_add_epi8(u, _cvtu32_mask32(m), u, _mm256_set1_epi8(0x10));
#else
    {
        const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ull);
        __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m),
                                        _mm256_setr_epi64x(0, 0x0101010101010101ll,
                                                           0x0202020202020202ll,
                                                           0x0303030303030303ll));
        b = _mm256_cmpeq_epi8(_mm256_and_si256(b, sel), sel);
        return _mm256_or_si256(u, _mm256_and_si256(b, _mm256_set1_epi8(0x10)));
    }
#endif
}

NA_INLINE void na_cqk_group(const uint8_t *gp, int nsb, const na_cq8_x_t *x, int NB, float *y,
                            size_t ys, int K5)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[NA_CQK_NB], accm[NA_CQK_NB];
    int b, j, c, i;

#pragma GCC unroll 4
    for (i = 0; i < NB; i++) {
        acc[i] = _mm256_setzero_ps();
        accm[i] = _mm256_setzero_ps();
    }
    for (b = 0; b < nsb; b++, gp += K5 ? NA_CQ5_GB : NA_CQK_GB) {
        __m256i isum[NA_CQK_NB], msum[NA_CQK_NB];
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
        __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gp + 16)));
#pragma GCC unroll 4
        for (i = 0; i < NB; i++) {
            isum[i] = _mm256_setzero_si256();
            msum[i] = _mm256_setzero_si256();
        }
        for (j = 0; j < 4; j++) {               /* sub-blocks 2j (low nibbles), 2j + 1 */
            __m256i slo[NA_CQK_NB], shi[NA_CQK_NB], sc0, sc1, mv;
#if !defined(NA_CPU_VNNI)
            __m256i wlo[NA_CQK_NB], whi[NA_CQK_NB];   /* Q5: the int16 sums of chunks 0-3 */
#endif
#pragma GCC unroll 4
            for (i = 0; i < NB; i++) {
                slo[i] = _mm256_setzero_si256();
                shi[i] = _mm256_setzero_si256();
            }
#pragma GCC unroll 8
            for (c = 0; c < 8; c++) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(gp + 160 + 32 * (8 * j + c) +
                                                                 (K5 ? 64 * j : 0)));
                __m256i lo = _mm256_and_si256(v, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if (K5) {                       /* + 16 where the chunk's fifth bit is set */
                    const uint8_t *fb = gp + 160 + 320 * j + 256 + 8 * c;   /* after the 8 chunks */
                    lo = na_cq5_fifth(lo, fb);
                    hi = na_cq5_fifth(hi, fb + 4);
                }
#if !defined(NA_CPU_VNNI)
                if (K5 && c == 4) {             /* codes <= 31: int16 holds 4 chunks' sums */
#pragma GCC unroll 4
                    for (i = 0; i < NB; i++) {
                        wlo[i] = slo[i];
                        whi[i] = shi[i];
                        slo[i] = _mm256_setzero_si256();
                        shi[i] = _mm256_setzero_si256();
                    }
                }
#endif
#pragma GCC unroll 4
                for (i = 0; i < NB; i++) {
                    const int8_t *xq = x[i].q + (size_t)b * NA_QK_K + 64 * j + 4 * c;
#if defined(NA_CPU_VNNI)
                    slo[i] = _mm256_dpbusd_epi32(slo[i], lo, na_cq8_x4(xq));
                    shi[i] = _mm256_dpbusd_epi32(shi[i], hi, na_cq8_x4(xq + 32));
#else                                           /* int16 sums, widened below */
                    slo[i] = _mm256_add_epi16(slo[i], _mm256_maddubs_epi16(lo, na_cq8_x4(xq)));
                    shi[i] = _mm256_add_epi16(shi[i],
                                              _mm256_maddubs_epi16(hi, na_cq8_x4(xq + 32)));
#endif
                }
            }
            sc0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(gp + 32 + 16 * j)));
            sc1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(gp + 40 + 16 * j)));
            mv = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(gp + 96 + 16 * j)));
#pragma GCC unroll 4
            for (i = 0; i < NB; i++) {
                int32_t pair;
#if !defined(NA_CPU_VNNI)
                slo[i] = _mm256_madd_epi16(slo[i], _mm256_set1_epi16(1));
                shi[i] = _mm256_madd_epi16(shi[i], _mm256_set1_epi16(1));
                if (K5) {
                    slo[i] = _mm256_add_epi32(slo[i], _mm256_madd_epi16(wlo[i], _mm256_set1_epi16(1)));
                    shi[i] = _mm256_add_epi32(shi[i], _mm256_madd_epi16(whi[i], _mm256_set1_epi16(1)));
                }
#endif
                isum[i] = _mm256_add_epi32(isum[i], _mm256_add_epi32(_mm256_mullo_epi32(slo[i], sc0),
                                                                     _mm256_mullo_epi32(shi[i], sc1)));
                memcpy(&pair, x[i].b32 + (size_t)b * (NA_QK_K / 16) + 2 * j, 4);
                msum[i] = _mm256_add_epi32(msum[i], _mm256_madd_epi16(mv, _mm256_set1_epi32(pair)));
            }
        }
#pragma GCC unroll 4
        for (i = 0; i < NB; i++) {
            __m256 dx = _mm256_set1_ps(x[i].d[b]);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_mul_ps(d, dx), acc[i]);
            accm[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum[i]), _mm256_mul_ps(dm, dx), accm[i]);
        }
    }
#pragma GCC unroll 4
    for (i = 0; i < NB; i++)
        _mm256_storeu_ps(y + (size_t)i * ys, _mm256_sub_ps(acc[i], accm[i]));
}

/* ---- Q6_K in groups of 8 rows (NA_LAYOUT_Q6KX8, kernels/cpu/cpu_pack.c) -----
 * A 32-bit lane per row, as for Q4_K: per sub-block of 16, the 8 rows'
 * codes (0..63) come from 3 loads (low 4 bits of 8 elements per row in
 * each of two, the top 2 bits of all 16 in the third), and 4 vpdpbusd (or
 * maddubs summed in int16 two at a time: at most 2 x 2 x 63 x 127 = 32004)
 * started from -32 x the input's sum of those 16 give each row's exact
 * sum of (code - 32) x input, times its int8 scale (vpmulld), summed over
 * the 16 sub-blocks; then acc += that sum x (d x d_x) in f32, super-block
 * after super-block from 0. Batch-invariant by its shape, the same in
 * every ISA copy. */
#define NA_CQ6_GB 1680                  /* bytes of a group's super-block */

NA_INLINE void na_cq6_group(const uint8_t *gp, int nsb, const na_cq8_x_t *x, int NB, float *y,
                            size_t ys)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    __m256 acc[NA_CQK_NB];
    int b, s, i;

#pragma GCC unroll 4
    for (i = 0; i < NB; i++)
        acc[i] = _mm256_setzero_ps();
    for (b = 0; b < nsb; b++, gp += NA_CQ6_GB) {
        __m256i isum[NA_CQK_NB];
        __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)gp));
#pragma GCC unroll 4
        for (i = 0; i < NB; i++)
            isum[i] = _mm256_setzero_si256();
        for (s = 0; s < 16; s++) {
            const uint8_t *p = gp + 144 + 96 * s;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)p);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(p + 32));
            __m256i h = _mm256_loadu_si256((const __m256i *)(p + 64));
            __m256i u0 = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
            __m256i u1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
            __m256i u2 = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
            __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
            __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(gp + 16 + 8 * s)));
#pragma GCC unroll 4
            for (i = 0; i < NB; i++) {
                const int8_t *xq = x[i].q + (size_t)b * NA_QK_K + 16 * s;
                __m256i a = _mm256_set1_epi32(-32 * (int32_t)x[i].b32[(size_t)b * (NA_QK_K / 16) + s]);
#if defined(NA_CPU_VNNI)
                a = _mm256_dpbusd_epi32(a, u0, na_cq8_x4(xq));
                a = _mm256_dpbusd_epi32(a, u1, na_cq8_x4(xq + 4));
                a = _mm256_dpbusd_epi32(a, u2, na_cq8_x4(xq + 8));
                a = _mm256_dpbusd_epi32(a, u3, na_cq8_x4(xq + 12));
#else
                __m256i t0 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, na_cq8_x4(xq)),
                                              _mm256_maddubs_epi16(u1, na_cq8_x4(xq + 4)));
                __m256i t1 = _mm256_add_epi16(_mm256_maddubs_epi16(u2, na_cq8_x4(xq + 8)),
                                              _mm256_maddubs_epi16(u3, na_cq8_x4(xq + 12)));
                a = _mm256_add_epi32(a, _mm256_add_epi32(_mm256_madd_epi16(t0, _mm256_set1_epi16(1)),
                                                         _mm256_madd_epi16(t1, _mm256_set1_epi16(1))));
#endif
                isum[i] = _mm256_add_epi32(isum[i], _mm256_mullo_epi32(a, sc));
            }
        }
#pragma GCC unroll 4
        for (i = 0; i < NB; i++)
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]),
                                     _mm256_mul_ps(d, _mm256_set1_ps(x[i].d[b])), acc[i]);
    }
#pragma GCC unroll 4
    for (i = 0; i < NB; i++)
        _mm256_storeu_ps(y + (size_t)i * ys, acc[i]);
}

/* One K-quant group (layout NA_LAYOUT_Q4KX8, Q5KX8 or Q6KX8) times N inputs. */
#define NA_CQK_G(layout, N)                                                     \
    do {                                                                        \
        if ((layout) == NA_LAYOUT_Q6KX8)                                        \
            na_cq6_group(gp, nsb, x, N, y, ys);                                 \
        else                                                                    \
            NA_CQ_FLAG((layout) == NA_LAYOUT_Q5KX8, na_cqk_group, gp, nsb, x, N, y, ys); \
    } while (0)

/* K-quant group gp with nb (1..NA_CQ8_NB) inputs, NA_CQK_NB at a time. */
static void na_cqk_group_n(int layout, const uint8_t *gp, int nsb, const na_cq8_x_t *x, int nb,
                           float *y, size_t ys)
{
    for (; nb > 0; nb -= NA_CQK_NB, x += NA_CQK_NB, y += NA_CQK_NB * ys) {
        switch (nb < NA_CQK_NB ? nb : NA_CQK_NB) {
#if NA_CQK_NB == 4
        case 4: NA_CQK_G(layout, 4); break;
        case 3: NA_CQK_G(layout, 3); break;
#endif
        case 2: NA_CQK_G(layout, 2); break;
        default: NA_CQK_G(layout, 1); break;
        }
    }
}

typedef struct {
    float         *y;
    const uint8_t *w;           /* NA_LAYOUT_Q4X8, Q4KX8, Q5KX8, Q6KX8 or Q8X8 */
    int            layout;      /* which (the K-quants: nblk super-blocks per row) */
    int            rows, nblk, batch;
    const int8_t  *q;           /* (batch, cols) */
    const float   *d;           /* (batch, nblk) */
    const int32_t *neg;         /* Q4_0, Q8_0: (batch, nblk) */
    const int16_t *b32;         /* Q4_K, Q5_K: (batch, nblk x 16), pair sums; Q6_K: sums of 16 */
} na_cq8_job_t;

static void na_cq8_task(void *ctx, int t, int n_tasks)
{
    const na_cq8_job_t *j = ctx;
    const int k5 = j->layout == NA_LAYOUT_Q5KX8, k4 = j->layout == NA_LAYOUT_Q4KX8 || k5;
    const int k6 = j->layout == NA_LAYOUT_Q6KX8, k8 = j->layout == NA_LAYOUT_Q8X8;
    const int ng = j->rows / 8, cols = (k4 || k6 ? NA_QK_K : 32) * j->nblk;
    const size_t gbytes = (size_t)j->nblk * (k5 ? NA_CQ5_GB : k4 ? NA_CQK_GB : k6 ? NA_CQ6_GB
                                                 : k8 ? NA_CQ88_GB : NA_CQ8_GB);
    /* split on pairs of groups: 16 rows, 64 bytes of each output row */
    int lo = (int)((long)ng * t / n_tasks) & ~1, hi = (int)((long)ng * (t + 1) / n_tasks) & ~1;
    int g0, g1, g, b0, nb, i;

    if (t == n_tasks - 1)
        hi = ng;
    for (g0 = lo; g0 < hi; g0 = g1) {
        g1 = g0 + NA_CQ8_GC < hi ? g0 + NA_CQ8_GC : hi;
        for (b0 = 0; b0 < j->batch; b0 += NA_CQ8_NB) {
            na_cq8_x_t x[NA_CQ8_NB];
            nb = j->batch - b0 < NA_CQ8_NB ? j->batch - b0 : NA_CQ8_NB;
            for (i = 0; i < nb; i++) {
                x[i].q = j->q + (size_t)(b0 + i) * cols;
                x[i].d = j->d + (size_t)(b0 + i) * j->nblk;
                x[i].neg = k4 || k6 ? NULL : j->neg + (size_t)(b0 + i) * j->nblk;
                x[i].b32 = k4 || k6 ? j->b32 + (size_t)(b0 + i) * j->nblk * (NA_QK_K / 16) : NULL;
            }
            for (g = g0; g < g1; g++) {
                float *yg = j->y + (size_t)b0 * j->rows + 8 * (size_t)g;
                if (k4 || k6)
                    na_cqk_group_n(j->layout, j->w + g * gbytes, j->nblk, x, nb, yg,
                                   (size_t)j->rows);
                else
                    na_cq8_group_n(j->w + g * gbytes, j->nblk, x, nb, yg, (size_t)j->rows, k8);
            }
        }
    }
}

/* Q4_K's groups use an input's sums of 32, not of 16: each super-block's 16
 * sums become its 8 pair sums in their first 8 slots. */
static void na_cq_pair_sums(int16_t *bs, int nsb)
{
    int b;
    for (b = 0; b < nsb; b++, bs += NA_QK_K / 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)bs);
        __m128i c = _mm_loadu_si128((const __m128i *)(bs + 8));
        _mm_storeu_si128((__m128i *)bs, _mm_hadd_epi16(a, c));
    }
}

/* neg[b] = -off x the sum of the 32 inputs of block b, nblk blocks of q
 * (off: the codes' offset, 8 for Q4_0, 128 for Q8X8's unsigned codes). */
static void na_cq8_negs(const int8_t *q, int nblk, int32_t off, int32_t *neg)
{
    int b;
    for (b = 0; b < nblk; b++) {
        __m256i s = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_set1_epi8(1),
                                 _mm256_loadu_si256((const __m256i *)(q + 32 * (size_t)b))),
            _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        neg[b] = -off * _mm_cvtsi128_si32(h);
    }
}

/* ---- the matmul --------------------------------------------------------------- */

typedef struct {
    float             *y;
    const na_tensor_t *w;
    int                batch;
    size_t             row_bytes;
    const int8_t      *q;       /* (batch, cols) */
    const float       *d;       /* (batch, nd) */
    const int16_t     *bs;      /* (batch, nbs), K-quants */
    const float       *s;       /* (batch, nd), Q4_1 / Q5_1 */
    int                nd, nbs;
} na_cq_job_t;

/* Tiles of the (rows x batch) outputs a task computes: NA_CQ_TR weight rows
 * (a few KiB each) times NA_CQ_TB quantised inputs (cols bytes each) stay
 * in L1/L2 while every pair is dotted; batch 1 reads each row once. */
#define NA_CQ_TR 8
#define NA_CQ_TB 16

static void na_cq_task(void *ctx, int t, int n_tasks)
{
    const na_cq_job_t *j = ctx;
    int rows = j->w->rows, cols = j->w->cols;
    /* split on 16 rows (64 bytes of each output row: no line shared by two
     * tasks; whole groups of NA_CQ_NR rows) */
    int lo = (int)((long)rows * t / n_tasks) & ~15, hi = (int)((long)rows * (t + 1) / n_tasks) & ~15;
    int r0, b0, r, b;

    if (t == n_tasks - 1)
        hi = rows;

    for (r0 = lo; r0 < hi; r0 += NA_CQ_TR) {
        int r1 = r0 + NA_CQ_TR < hi ? r0 + NA_CQ_TR : hi;
        for (b0 = 0; b0 < j->batch; b0 += NA_CQ_TB) {
            int b1 = b0 + NA_CQ_TB < j->batch ? b0 + NA_CQ_TB : j->batch;
            na_cq_x_t x[NA_CQ_TB];
            float out[NA_CQ_TB];
            for (b = b0; b < b1; b++) {
                x[b - b0].q = j->q + (size_t)b * cols;
                x[b - b0].d = j->d + (size_t)b * j->nd;
                x[b - b0].bs = j->bs + (size_t)b * j->nbs;
                x[b - b0].s = j->s + (size_t)b * j->nd;
            }
            r = r0;
            if (b1 - b0 <= 2) {         /* NA_CQ_NR rows at a time where the type has it */
                float o4[NA_CQ_NR * 2];
                int nb = b1 - b0, k;
                for (; r + NA_CQ_NR <= r1; r += NA_CQ_NR) {
                    if (!na_cq_rows(j->w->dtype, (const uint8_t *)j->w->data +
                                    (size_t)r * j->row_bytes, j->row_bytes, x, nb, cols, o4))
                        break;
                    for (k = 0; k < NA_CQ_NR; k++)
                        for (b = b0; b < b1; b++)
                            j->y[(size_t)b * rows + r + k] = o4[k * nb + b - b0];
                }
            }
            for (; r < r1; r++) {
                na_cq_row(j->w->dtype, (const uint8_t *)j->w->data + (size_t)r * j->row_bytes,
                          x, b1 - b0, cols, out);
                for (b = b0; b < b1; b++)
                    j->y[(size_t)b * rows + r] = out[b - b0];
            }
        }
    }
}

/* Large batches of Q4_0 / Q5_0 / Q4_1 / Q5_1 weights: the GEMM of
 * kernels/cpu/cpu_gemm_q4.c (the copy for this ISA), bit-identical to the
 * row kernels above, so it serves batch_invariant too. From this batch on: the crossover with the
 * row kernel (1 thread, CPU time, load 18, GFLOP/s row kernel / GEMM, Q4_0
 * 2048x2048 and 2048x8192): AVX-512 b=8 70 / 89 and 68 / 69, b=16 67 / 97
 * and 69 / 84 (VNNI b=8 81 / 112 and 78 / 77); AVX2 b=8 70 / 73 and 68 /
 * 63, b=16 67 / 74 and 69 / 71. */
#if defined(NA_CPU_VNNI) || defined(NA_CPU_V4)
#define NA_CQ_GEMM_MIN_BATCH 8
#else
#define NA_CQ_GEMM_MIN_BATCH 16
#endif

/* 0 done; -1 no scratch (the caller takes the reference). */
int na_cpu_matmul_quant(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                        int batch)
{
    na_cpu_state_t *s = k->priv;
    int kind = na_ref_quant_kind(w->dtype), cols = w->cols, b, tasks;
    size_t nq = (size_t)batch * (size_t)cols, work;
    na_cq_job_t j;
    float *sc;

    if (kind == 1 && w->layout == NA_LAYOUT_ROWS && batch >= NA_CQ_GEMM_MIN_BATCH &&
        na_cpu_gemm_q4(k, y, x, w, batch) == 0)
        return 0;
    j.y = y;
    j.w = w;
    j.batch = batch;
    j.row_bytes = na_dtype_bytes(w->dtype, (size_t)cols);
    j.nd = kind == 2 ? cols / NA_QK_K : cols / 32;
    j.nbs = kind == 2 ? cols / 16 : 0;
    /* q (nq bytes), d and s (batch * nd floats each), bs (batch * nbs int16),
     * float-aligned */
    sc = na_cpu_scratch(k, nq / 4 + 1 + 2 * (size_t)batch * (size_t)j.nd +
                           ((size_t)batch * (size_t)j.nbs + 1) / 2);
    if (sc == NULL)
        return -1;
    j.q = (const int8_t *)sc;
    j.d = sc + nq / 4 + 1;
    j.s = j.d + (size_t)batch * j.nd;
    j.bs = (const int16_t *)(j.s + (size_t)batch * j.nd);
    for (b = 0; b < batch; b++) {
        const float *xb = x + (size_t)b * cols;
        int8_t *qb = (int8_t *)j.q + (size_t)b * cols;
        float *db = (float *)j.d + (size_t)b * j.nd;
        int16_t *sb = (int16_t *)j.bs + (size_t)b * j.nbs;
        na_cpu_quant_inputs(w->dtype, xb, cols, qb, db, sb, (float *)j.s + (size_t)b * j.nd);
    }
    work = (size_t)w->rows * (size_t)cols * (size_t)batch;
    tasks = k->n_threads == 1 || work < NA_CPU_Q_PAR_MIN ? 1 : 4 * k->n_threads;
    if (w->layout != NA_LAYOUT_ROWS) {          /* Q4_0, Q4_K, Q6_K, Q8_0 in groups of 8 rows */
        na_cq8_job_t j8 = { y, w->data, w->layout, w->rows, j.nd, batch, j.q, j.d,
                            (const int32_t *)j.s, j.bs };
        for (b = 0; b < batch; b++) {           /* s (unused by these types): the sums */
            if (w->layout == NA_LAYOUT_Q4KX8 || w->layout == NA_LAYOUT_Q5KX8)
                na_cq_pair_sums((int16_t *)j.bs + (size_t)b * j.nbs, j.nd);
            else if (w->layout != NA_LAYOUT_Q6KX8)      /* Q6KX8: the sums of 16 */
                na_cq8_negs(j.q + (size_t)b * cols, j.nd,
                            w->layout == NA_LAYOUT_Q8X8 ? 128 : 8, (int32_t *)j.s + (size_t)b * j.nd);
        }
        if (tasks > w->rows / 16)
            tasks = w->rows / 16 > 0 ? w->rows / 16 : 1;
        na_cpu_pool_run(s->pool, na_cq8_task, &j8, tasks);
        return 0;
    }
    if (tasks > w->rows)
        tasks = w->rows;
    na_cpu_pool_run(s->pool, na_cq_task, &j, tasks);
    return 0;
}

/* kernels/cuda/cuda_qcodes.h — the per-block arithmetic of the quantised
 * GEMV and embedding (cuda_quant.cu) on repacked weights (cuda_launch.h):
 * codes unpacked to words of 4 int8, the exact int32 block sums, and the
 * block's f32 term. Written once for both sides: nvcc compiles it into the
 * kernels (16-byte loads, __dp4a, f16 through cuda_fp16), a C compiler into
 * tests/unit/test_cuda_qpack.c, which checks it against kernels/ref on the
 * host (no GPU needed). dt is a na_dtype_t value (3 Q8_0 ... 10 Q6_K); the
 * kernels pass it as a template constant, so the switches fold away. */
#ifndef NA_KERNELS_CUDA_QCODES_H
#define NA_KERNELS_CUDA_QCODES_H

#include <stddef.h>
#include <string.h>

#include "kernels/cuda/cuda_launch.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define NA_QC_FN static __host__ __device__ __forceinline__
#else
#include "common/dtype.h"
#define NA_QC_FN static inline
#endif

#define NA_QC_Q8_0 3
#define NA_QC_Q4_0 4
#define NA_QC_Q4_1 5
#define NA_QC_Q5_0 6
#define NA_QC_Q5_1 7
#define NA_QC_Q4_K 8
#define NA_QC_Q5_K 9
#define NA_QC_Q6_K 10
#define NA_QC_ONES 0x01010101

/* f32 products and sums rounded one at a time (no fused multiply-add where
 * the reference, plain C, has none). */
#ifdef __CUDA_ARCH__
#define NA_QC_MUL(a, b) __fmul_rn((a), (b))
#define NA_QC_ADD(a, b) __fadd_rn((a), (b))
#define NA_QC_SUB(a, b) __fsub_rn((a), (b))
#else
#define NA_QC_MUL(a, b) ((a) * (b))
#define NA_QC_ADD(a, b) ((a) + (b))
#define NA_QC_SUB(a, b) ((a) - (b))
#endif

NA_QC_FN float na_qc_h2f(unsigned short h)
{
#ifdef __CUDACC__
    return __half2float(__ushort_as_half(h));
#else
    return na_f16_to_f32(h);
#endif
}

/* sum of the 4 signed byte products of a and b, plus c */
NA_QC_FN int na_qc_dp4a(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    int k;
    for (k = 0; k < 4; k++)
        c += (int)(signed char)(unsigned char)((unsigned)a >> (8 * k)) *
             (int)(signed char)(unsigned char)((unsigned)b >> (8 * k));
    return c;
#endif
}

/* n little-endian words (n = 4 or 8) at p, 16-byte aligned: 16-byte loads
 * on the device */
NA_QC_FN void na_qc_ld(const unsigned char *p, unsigned *w, int n)
{
#ifdef __CUDA_ARCH__
    for (int i = 0; i < n / 4; i++) {
        uint4 v = reinterpret_cast<const uint4 *>(p)[i];
        w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
    }
#else
    memcpy(w, p, (size_t)n * 4);           /* the build hosts are little-endian */
#endif
}

/* The 4-byte aligned little-endian word at p. */
NA_QC_FN unsigned na_qc_ld32(const unsigned char *p)
{
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const unsigned *>(p);
#else
    unsigned v;
    memcpy(&v, p, 4);
    return v;
#endif
}

/* Bits 0..3 of t to bit 4 of bytes 0..3. */
NA_QC_FN unsigned na_qc_spread4(unsigned t)
{
    return ((t & 1u) << 4) | ((t & 2u) << 11) | ((t & 4u) << 18) | ((t & 8u) << 25);
}

/* Block bi of a 32-element type: wq[k] = the codes of elements 4k..4k+3
 * (not centred: 0..15 / 0..31 for the 4/5-bit types, int8 for Q8_0). */
NA_QC_FN void na_qc_codes32(int dt, const na_cu_qw_t *w, size_t bi, int wq[8])
{
    unsigned v[8];
    int k;
    if (dt == NA_QC_Q8_0) {
        na_qc_ld(w->qs + bi * 32, v, 8);
        for (k = 0; k < 8; k++)
            wq[k] = (int)v[k];
        return;
    }
    na_qc_ld(w->qs + bi * 16, v, 4);
    for (k = 0; k < 4; k++) {
        wq[k] = (int)(v[k] & 0x0F0F0F0Fu);
        wq[k + 4] = (int)((v[k] >> 4) & 0x0F0F0F0Fu);
    }
    if (dt == NA_QC_Q5_0 || dt == NA_QC_Q5_1) {
        unsigned qh = na_qc_ld32(w->qh + bi * 4);
        for (k = 0; k < 4; k++) {
            wq[k] |= (int)na_qc_spread4((qh >> (4 * k)) & 0xFu);
            wq[k + 4] |= (int)na_qc_spread4((qh >> (16 + 4 * k)) & 0xFu);
        }
    }
}

/* Part s (0..7: elements 32s..32s+31) of super-block bi of a K-quant:
 * wq[k] = codes of elements 32s + 4k .. +3 (Q6_K: not centred, 0..63). */
NA_QC_FN void na_qc_codes256(int dt, const na_cu_qw_t *w, size_t bi, int s, int wq[8])
{
    unsigned lw[8], hw[8];
    int k;
    if (dt == NA_QC_Q6_K) {
        int h = s >> 2, g = s & 3;
        na_qc_ld(w->qs + bi * 128 + (size_t)h * 64 + (size_t)(g & 1) * 32, lw, 8);
        na_qc_ld(w->qh + bi * 64 + (size_t)h * 32, hw, 8);
        for (k = 0; k < 8; k++)
            wq[k] = (int)(((lw[k] >> (4 * (g >> 1))) & 0x0F0F0F0Fu) |
                          (((hw[k] >> (2 * g)) & 0x03030303u) << 4));
        return;
    }
    na_qc_ld(w->qs + bi * 128 + (size_t)(s >> 1) * 32, lw, 8);
    for (k = 0; k < 8; k++)
        wq[k] = (int)((lw[k] >> (4 * (s & 1))) & 0x0F0F0F0Fu);
    if (dt == NA_QC_Q5_K) {
        na_qc_ld(w->qh + bi * 32, hw, 8);
        for (k = 0; k < 8; k++)
            wq[k] |= (int)(((hw[k] >> s) & 0x01010101u) << 4);
    }
}

/* The f32 term of a block of a 32-element type (scale dw; min mw: Q4_1 and
 * Q5_1 only) with the 32 quantised inputs xw (8 words) of scale dx and
 * (Q4_1 / Q5_1 only) Q8_1 sum sx = f16(sum q * d32), as
 * kernels/ref/ref_quant.c adds it (there in two sums: sum and summs). */
NA_QC_FN float na_qc_term32(int dt, float dw, float mw, const int wq[8], const int xw[8],
                            float dx, float sx)
{
    int isum = 0, qsum = 0, k;
    for (k = 0; k < 8; k++)
        isum = na_qc_dp4a(wq[k], xw[k], isum);
    if (dt == NA_QC_Q4_1 || dt == NA_QC_Q5_1)       /* + m_w * Q8_1's s */
        return NA_QC_ADD(NA_QC_MUL((float)isum, dw * dx), NA_QC_MUL(mw, sx));
    if (dt == NA_QC_Q8_0)
        return (float)isum * (dw * dx);
    for (k = 0; k < 8; k++)
        qsum = na_qc_dp4a(NA_QC_ONES, xw[k], qsum);
    isum -= (dt == NA_QC_Q4_0 ? 8 : 16) * qsum;      /* centred codes: sum q x - o sum x */
    return (float)isum * (dw * dx);
}

/* Part s of super-block bi of a K-quant with its 32 quantised inputs xw:
 * the part's share of the block's integer sums (sumi, and summ for
 * Q4_K/Q5_K; the block's sums are these over its 8 parts). */
NA_QC_FN void na_qc_part256(int dt, const na_cu_qw_t *w, size_t bi, int s, const int wq[8],
                            const int xw[8], int *sumi, int *summ)
{
    int i0 = 0, i1 = 0, q0 = 0, q1 = 0, k;
    for (k = 0; k < 4; k++) {
        i0 = na_qc_dp4a(wq[k], xw[k], i0);
        i1 = na_qc_dp4a(wq[k + 4], xw[k + 4], i1);
        q0 = na_qc_dp4a(NA_QC_ONES, xw[k], q0);
        q1 = na_qc_dp4a(NA_QC_ONES, xw[k + 4], q1);
    }
    if (dt == NA_QC_Q6_K) {          /* two sub-blocks of 16, codes - 32, int8 scales */
        *sumi = (int)(signed char)w->sc[bi * 16 + (size_t)(2 * s)] * (i0 - 32 * q0) +
                (int)(signed char)w->sc[bi * 16 + (size_t)(2 * s + 1)] * (i1 - 32 * q1);
        *summ = 0;
    } else {                         /* one sub-block of 32: 6-bit scale and min */
        *sumi = (int)w->sc[bi * 16 + (size_t)s] * (i0 + i1);
        *summ = (int)w->sc[bi * 16 + 8 + (size_t)s] * (q0 + q1);
    }
}

/* The f32 term of super-block bi from its integer sums. */
NA_QC_FN float na_qc_term256(int dt, const na_cu_qw_t *w, size_t bi, int sumi, int summ,
                             float dx)
{
    float d = na_qc_h2f(w->d[bi]);
    if (dt == NA_QC_Q6_K)
        return (d * dx) * (float)sumi;
    return NA_QC_SUB(NA_QC_MUL(d * dx, (float)sumi),
                     NA_QC_MUL(na_qc_h2f(w->m[bi]) * dx, (float)summ));
}

/* Element e of block bi dequantised, as na_ref_dequant_row computes it. */
NA_QC_FN float na_qc_deq(int dt, const na_cu_qw_t *w, size_t bi, int e)
{
    float d = na_qc_h2f(w->d[bi]);
    int q;
    if (dt == NA_QC_Q8_0)
        return NA_QC_MUL(d, (float)(signed char)w->qs[bi * 32 + (size_t)e]);
    if (dt == NA_QC_Q6_K) {
        int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
        int lo = (w->qs[bi * 128 + (size_t)(h * 64 + (g & 1) * 32 + l)] >> (4 * (g >> 1))) & 0xF;
        int hi = (w->qh[bi * 64 + (size_t)(h * 32 + l)] >> (2 * g)) & 3;
        return NA_QC_MUL(NA_QC_MUL(d, (float)(signed char)w->sc[bi * 16 + (size_t)(e >> 4)]),
                         (float)((lo | (hi << 4)) - 32));
    }
    if (dt == NA_QC_Q4_K || dt == NA_QC_Q5_K) {
        int s = e >> 5, l = e & 31;
        float d1, m1;
        q = (w->qs[bi * 128 + (size_t)((s >> 1) * 32 + l)] >> (4 * (s & 1))) & 0xF;
        if (dt == NA_QC_Q5_K)
            q |= ((w->qh[bi * 32 + (size_t)l] >> s) & 1) << 4;
        d1 = NA_QC_MUL(d, (float)w->sc[bi * 16 + (size_t)s]);
        m1 = NA_QC_MUL(na_qc_h2f(w->m[bi]), (float)w->sc[bi * 16 + 8 + (size_t)s]);
        return NA_QC_SUB(NA_QC_MUL(d1, (float)q), m1);
    }
    q = (w->qs[bi * 16 + (size_t)(e & 15)] >> (e < 16 ? 0 : 4)) & 0xF;
    if (dt == NA_QC_Q5_0 || dt == NA_QC_Q5_1) {
        q |= (int)((na_qc_ld32(w->qh + bi * 4) >> e) & 1u) << 4;
    }
    if (dt == NA_QC_Q4_0)
        q -= 8;
    if (dt == NA_QC_Q5_0)
        q -= 16;
    if (dt == NA_QC_Q4_1 || dt == NA_QC_Q5_1)
        return NA_QC_ADD(NA_QC_MUL((float)q, d), na_qc_h2f(w->m[bi]));
    return NA_QC_MUL((float)q, d);
}

#endif /* NA_KERNELS_CUDA_QCODES_H */

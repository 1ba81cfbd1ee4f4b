/* kernels/cpu/cpu_panel.h — the AVX-512 panel kernel of the large-batch F32,
 * F16 and BF16 matmuls (cpu_matmul.c's na_cpu_dotpx_any for dequantised or
 * F32 panels, cpu_gemm_h16.c's na_gh_tile_any for F16 / BF16 rows read in
 * place), written once for the three weight types: the weight type is a
 * constant after inlining, so each caller's copy is the loop it had.
 * Empty without AVX-512 (the x86-64-v3 copies). */
#ifndef NA_KERNELS_CPU_PANEL_H
#define NA_KERNELS_CPU_PANEL_H

#include "kernels/cpu/cpu.h"

#if defined(__AVX512F__)
/* The panel kernel's weight types. */
enum { NA_CPU_PX_F32, NA_CPU_PX_F16, NA_CPU_PX_BF16 };

/* NR rows of a panel (rows ws elements apart; f32, or f16 / bf16 read in
 * place) times NB inputs (ld apart), elements [i0, i1) of rows of n (NR <=
 * 4, NB <= 3, WT constants after inlining), in exactly the order of the
 * batch-1 row kernels (na_cpu_dotrn_f32, na_cpu_dot_h16: each output's 32
 * f32 lanes, blocks of 8 into lanes 0-7, na_cpu_hsum2x16, a scalar fma tail),
 * so bit-identical to batch 1. The inputs of a step stay in registers while
 * each row's two vectors are loaded once: 2 * NB + 2 * NR loads per 2 * NR *
 * NB FMAs (NR 4, NB 3: 14 per 24; 24 accumulators + 6 inputs + 2 weights =
 * the 32 zmm registers). A long row is done in parts: the accumulators of a
 * part that is not the first start from acc, those of one that is not the
 * last (i1 < n, a multiple of 32, no tails) go back to acc (exact: the same
 * sums, only stored between parts); the last does the tails and writes
 * out[b * os + r]. BF16: the 32-blocks in even/odd order (x packed the same
 * way: a zmm load of 32 weights gives the even elements (<< 16) and the odd
 * ones (& 0xffff0000), one op each), put back in order before the 8-block
 * tail. No prefetch: the panel is in L2, the inputs are reused across it. */
NA_INLINE void na_cpu_px_tile(const void *w, size_t ws, int NR, const float *x, size_t ld, int n,
                              int i0, int i1, int NB, __m512 *acc, float *out, size_t os, int WT)
{
    const float *wf = w;
    const uint16_t *wh = w;
    __m512 a[4][3][2];
    float sum[4][3];
    int i = i0, b, r;

#pragma GCC unroll 4
    for (r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (b = 0; b < NB; b++) {
            a[r][b][0] = i0 > 0 ? acc[(r * 3 + b) * 2] : _mm512_setzero_ps();
            a[r][b][1] = i0 > 0 ? acc[(r * 3 + b) * 2 + 1] : _mm512_setzero_ps();
        }
    for (; i + 32 <= i1; i += 32) {
        __m512 x0[3], x1[3];
#pragma GCC unroll 3
        for (b = 0; b < NB; b++) {
            x0[b] = _mm512_loadu_ps(x + (size_t)b * ld + i);
            x1[b] = _mm512_loadu_ps(x + (size_t)b * ld + i + 16);
        }
#pragma GCC unroll 4
        for (r = 0; r < NR; r++) {
            __m512 u0, u1;
            if (WT == NA_CPU_PX_F32) {
                u0 = _mm512_loadu_ps(wf + (size_t)r * ws + i);
                u1 = _mm512_loadu_ps(wf + (size_t)r * ws + i + 16);
                /* in registers: else gcc folds a load of u into each of the NB FMAs */
                __asm__("" : "+v"(u0), "+v"(u1));
            } else if (WT == NA_CPU_PX_F16) {
                const uint16_t *wr = wh + (size_t)r * ws + i;
                u0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)wr));
                u1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(wr + 16)));
            } else {
                __m512i v = _mm512_loadu_si512(wh + (size_t)r * ws + i);
                u0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
                u1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
            }
#pragma GCC unroll 3
            for (b = 0; b < NB; b++) {
                a[r][b][0] = _mm512_fmadd_ps(u0, x0[b], a[r][b][0]);
                a[r][b][1] = _mm512_fmadd_ps(u1, x1[b], a[r][b][1]);
            }
        }
    }
    if (i1 < n) {                       /* not the last part */
#pragma GCC unroll 4
        for (r = 0; r < NR; r++)
#pragma GCC unroll 3
            for (b = 0; b < NB; b++) {
                acc[(r * 3 + b) * 2] = a[r][b][0];
                acc[(r * 3 + b) * 2 + 1] = a[r][b][1];
            }
        return;
    }
    if (WT == NA_CPU_PX_BF16) {         /* lanes (even | odd) back to elements 0-15 | 16-31 */
        const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19,
                                             4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27,
                                             12, 28, 13, 29, 14, 30, 15, 31);
#pragma GCC unroll 4
        for (r = 0; r < NR; r++)
#pragma GCC unroll 3
            for (b = 0; b < NB; b++) {
                __m512 e = a[r][b][0], o = a[r][b][1];
                a[r][b][0] = _mm512_permutex2var_ps(e, lo, o);
                a[r][b][1] = _mm512_permutex2var_ps(e, hi, o);
            }
    }
    for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 4
        for (r = 0; r < NR; r++) {
            __m512 u;
            if (WT == NA_CPU_PX_F32) {
                u = _mm512_maskz_loadu_ps(0xff, wf + (size_t)r * ws + i);
            } else {
                __m256i h = _mm256_zextsi128_si256(
                    _mm_loadu_si128((const __m128i *)(wh + (size_t)r * ws + i)));
                u = WT == NA_CPU_PX_F16
                        ? _mm512_cvtph_ps(h)
                        : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            }
#pragma GCC unroll 3
            for (b = 0; b < NB; b++)
                a[r][b][0] = _mm512_mask3_fmadd_ps(
                    u, _mm512_maskz_loadu_ps(0xff, x + (size_t)b * ld + i), a[r][b][0], 0xff);
        }
    }
#pragma GCC unroll 4
    for (r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (b = 0; b < NB; b++)
            sum[r][b] = na_cpu_hsum2x16(a[r][b][0], a[r][b][1]);
    for (; i < n; i++)
#pragma GCC unroll 4
        for (r = 0; r < NR; r++) {
            float wv = WT == NA_CPU_PX_F32 ? wf[(size_t)r * ws + i]
                       : WT == NA_CPU_PX_F16 ? na_f16_to_f32(wh[(size_t)r * ws + i])
                                             : na_bf16_to_f32(wh[(size_t)r * ws + i]);
#pragma GCC unroll 3
            for (b = 0; b < NB; b++)
                sum[r][b] = fmaf(wv, x[(size_t)b * ld + i], sum[r][b]);
        }
#pragma GCC unroll 4
    for (r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (b = 0; b < NB; b++)
            out[(size_t)b * os + r] = sum[r][b];
}

#endif /* __AVX512F__ */

#endif /* NA_KERNELS_CPU_PANEL_H */

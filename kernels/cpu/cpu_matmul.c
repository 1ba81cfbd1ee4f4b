/* kernels/cpu/cpu_matmul.c — y = W·x for F32, F16, BF16 and Q8_0 weights
 * (the other block formats: kernels/cpu/cpu_quant.c).
 *
 * Weights stay in their file dtype (usually a read-only mmap of the model
 * file) and are dequantised inside the kernel, per row or per tile of rows,
 * never at load: memory holds the smaller file dtype, and decode (batch 1)
 * is bandwidth-bound, so reading 2 or ~1.06 bytes per weight instead of 4 is
 * what makes it fast. The paths:
 *
 *   batch 1, any dtype    rows split across the pool; one AVX2 dot product
 *                         per row that converts 8 weights at a time in
 *                         registers (F16C for f16, shift for bf16), the
 *                         weight stream prefetched into L2 (F16/BF16:
 *                         NA_CPU_MV_PF_L2 below; 1.5x the T0 one). Four
 *                         rows per pass (AVX-512) were tried and removed:
 *                         F32 read 16-19 GB/s against 26-27 (bench kernels,
 *                         2048x2048, load 3), and a 1B-shape F16 decode
 *                         (tg64, t=1, load 1.3-1.6) ran 5.79 tok/s against
 *                         7.89 one row at a time; Q8_0 was no faster.
 *   Q8_0, batch > 1       the inputs are quantised to Q8 blocks once per call
 *                         (kernels/ref/ref.h: the definition), then each row's
 *                         blocks are multiplied in int8 and summed exactly in
 *                         int32 (maddubs + madd), one f32 FMA per block.
 *                         2048x2048 Q8_0, 1 thread, min of 200 calls: 182 us
 *                         (f32 inputs, weights converted per block) -> 99 us;
 *                         512x512 (in L2), min of 3000: 11.5 -> 6.4 us.
 *                         From s->gemm_q8_min_batch (8 with AVX512-VNNI, 20
 *                         without) na_cpu_gemm_q8 (kernels/cpu/cpu_gemm_q8.c):
 *                         the same sums, bit for bit, register-blocked.
 *                         768x768 b=512, 1 thread, best of 10 (GFLOP/s):
 *                         dequantise + sgemm 110-117, VNNI GEMM 205, AVX2
 *                         maddubs GEMM 110 (NA_CPU_ISA=v3); 768x2048: 122,
 *                         230, 114.
 *   F16/BF16, batch >= 2  na_cpu_gemm_h16 (kernels/cpu/cpu_gemm_h16.c): the
 *   (AVX2: >= 32 and      row kernel's 32 lanes per output kept in registers
 *   batch_invariant)      over the whole row, weights converted in registers,
 *                         so bit-identical to batch 1 (every engine takes
 *                         it). 1 thread, b=512, CPU-time GFLOP/s, load 10-19,
 *                         AVX-512 panels below / GEMM: F16 2048x8192 56-60 /
 *                         80-86, 8192x2048 70-78 / 85-91; BF16 54-59 / 85-87,
 *                         72-77 / 91-97; AVX2 row kernel / GEMM 29 / 45-46.
 *                         Without batch_invariant BF16 from batch 20 keeps
 *                         the bf16-input GEMM next.
 *   BF16, batch >= 20     with AVX512-BF16, na_cpu_gemm_bf16
 *   (not batch-invariant) (kernels/cpu/cpu_gemm_bf16.c): inputs rounded to
 *                         bf16, vdpbf16ps. 768x768 b=512, 1 thread, best of
 *                         10: dequantise + sgemm 120 GFLOP/s, GEMM 438;
 *                         768x2048: 385; 2048x768: 408. Without AVX512-BF16
 *                         (or NA_CPU_ISA=v3/v4): the paths below.
 *   batch > 1, small      (F32: batch < NA_CPU_F32_SGEMM_MIN_BATCH; other
 *                         dtypes: batch < NA_CPU_TILE_MIN_BATCH) rows split
 *                         across the pool; each row is read once (other
 *                         dtypes: dequantised once into an f32 row buffer)
 *                         and dotted with NA_CPU_MM_NB inputs at a time, in
 *                         the batch-1 summation order: every output is
 *                         bit-identical to the same row computed at batch 1.
 *                         With AVX-512 four rows per pass (na_cpu_dotrn_f32,
 *                         the same order in zmm halves): each input vector
 *                         loaded feeds four rows.
 *   F32, batch >= 64      with AVX-512F (x86-64-v4), na_cpu_gemm_f32
 *   (not batch-invariant) (kernels/cpu/cpu_gemm_f32.c): f32 products, an
 *                         AVX-512 register-blocked GEMM in place of the two
 *                         paths below (768x768 b=516, 1 thread: 216 GFLOP/s,
 *                         OpenBLAS's Haswell kernels 127).
 *   batch > 1, F32 large  the weight's rows split across the pool, each
 *                         part one single-threaded cblas_sgemm (OpenBLAS
 *                         runs with 1 thread: no second set of threads
 *                         spinning beside the pool's).
 *   batch > 1, large      each thread dequantises a tile of its rows into
 *                         f32 scratch and multiplies it by cblas_sgemm (F16;
 *                         BF16 without AVX512-BF16).
 *   batch >= 8, AVX-512   (the row kernel at large batches; every F32 batch
 *   panels                with k->batch_invariant; F16/BF16 took it before
 *                         na_cpu_gemm_h16, the figures below) each task
 *                         dequantises a panel of its rows to f32 (~512 KiB,
 *                         in L2), then runs each group of 3 inputs over the
 *                         whole panel, 4 rows x 3 inputs per pass
 *                         (cpu_panel.h, 24 zmm accumulators, rows over
 *                         4096 elements in parts with the accumulators kept
 *                         between them), in the batch-1 summation order.
 *                         Before, each group of 4 rows went over all the
 *                         inputs, which at 512 inputs came from L3/DRAM for
 *                         every 4 rows. F16, b=512, 1 thread, CPU-time
 *                         GFLOP/s at load 13 (2-core EPYC shared with 6
 *                         other sessions): 2048x8192 24 -> 53-58, 8192x2048
 *                         52 -> 70-76; the AVX-512 GEMM (not invariant)
 *                         beside it 80-84.
 *   k->batch_invariant    the "small" path (its panels from batch 8) at every
 *                         batch size, so a row's
 *                         result never depends on what is batched beside it
 *                         (greedy and seeded text reproduce across batch
 *                         sizes); na_engine_create sets it for every engine.
 *                         Its cost against the paths above (busy 2-core
 *                         EPYC, load 9-13, medians of 4-7 alternated runs):
 *                         `bench e2e --mode monolithic` dim 256 decode B=32
 *                         469 -> 638 tok/s, B=64 597 -> 603 (no cost); a
 *                         dim-768 F16 model, 32 prompts: decode 513 -> 475,
 *                         prefill (398 rows) 540 -> 371 tok/s (the AVX-512
 *                         GEMM is faster at hundreds of rows); stories260K
 *                         (dim 64: the per-output reduction dominates), 64
 *                         prompts: decode 7751 -> 5422, prefill 7471 -> 4788.
 *
 * F32 crossover, `nearattn bench kernels --part small` (2 threads, weights
 * from DRAM, GFLOP/s row kernel / cblas_sgemm, busy machine, spreads of
 * 20-200%): 32000x288 b=2: 28 / 10, b=4: 42 / 16, b=8: 72 / 30, b=16: 43 / 61,
 * b=32: 84 / 66; 768x288 b=8: 45 / 32, b=16: 46 / 57, b=32: 49 / 87;
 * 4096x4096 b=8: 41 / 30, b=16: 53 / 52, b=32: 50 / 80. Below 16 OpenBLAS
 * spends most of its time packing the weight for a few columns; from ~16 its
 * blocking wins (the row kernel is load-bound near 50 GFLOP/s).
 *
 * The threshold was measured on the 2-core AMD EPYC (Zen 4) machine, 2048x2048
 * F16 and Q8_0 weights, 1 thread, best of 15 (GFLOP/s, row kernel / tile+sgemm):
 * batch 3: 25 / 7, batch 8: 36 / 18, batch 17: 35 / 31, batch 24: 37 / 41,
 * batch 32: 39 / 46, batch 64: 35 / 45 (a busy shared machine: the shape of
 * the curve, not the figures, is the point). Below ~20 the fused row kernel
 * wins, above it sgemm's blocking does. All sums are f32. Q8_0 needs cols % 32 == 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_panel.h"
#include "kernels/ref/ref.h"

#define NA_CPU_TILE_MIN_BATCH 20
/* F16 / BF16 weights from this batch on go to na_cpu_gemm_h16
 * (kernels/cpu/cpu_gemm_h16.c: the row kernel's bits). 1 thread, CPU-time
 * GFLOP/s, load 10-13, row kernel / GEMM. AVX-512: 2048x2048 b=2 32 / 77-88,
 * 8192x2048 b=2 17 / 29-32, b=8 44 / 59-61, b=16 54 / 72-74; so from 2, for
 * batch_invariant or not (it is as fast as the AVX-512 GEMM of
 * cpu_gemm_f32.c, 84-87 at b=512, and exact). AVX2: b=8 35 / 31-35, b=16 39 /
 * 36-38, b=32 42 / 42-43, b=512 29 / 45-46; so from 32 and only for
 * batch_invariant (OpenBLAS's sgemm is faster where the bits may differ). */
#if defined(__AVX512F__)
#define NA_CPU_GEMM_H16_MIN_BATCH 2
#define NA_CPU_GEMM_H16_ANY 1      /* also without batch_invariant */
#else
#define NA_CPU_GEMM_H16_MIN_BATCH 32
#define NA_CPU_GEMM_H16_ANY 0
#endif
#define NA_CPU_F32_SGEMM_MIN_BATCH 16
#define NA_CPU_TILE_FLOATS    (512u * 1024u)   /* 2 MiB of dequantised rows */
#define NA_CPU_PAR_MIN_WORK   (1u << 17)       /* weights per matmul worth waking the pool */
/* The row kernel from this batch on works in panels of rows dequantised to
 * f32 (about this many bytes, in L2), each group of 3 inputs run over the
 * whole panel (cpu_matmul.c na_cpu_panel_f32; AVX-512 only). */
#ifndef NA_CPU_PANEL_MIN_BATCH
#define NA_CPU_PANEL_MIN_BATCH 8
#endif
#ifndef NA_CPU_PANEL_BYTES
#define NA_CPU_PANEL_BYTES (512u * 1024u)
#endif
#ifndef NA_CPU_PANEL_KC
#define NA_CPU_PANEL_KC 4096            /* elements of a row per part (a multiple of 32) */
#endif
#define NA_CPU_PANEL_MAXROWS 64         /* rows per panel at most */

/* Batch 1 and small batches read the weight rows front to back, one stream
 * per thread: each kernel asks for the line NA_CPU_MV_PF bytes ahead of the
 * one it reads (a hint; past the end of the weight it is dropped). */
#ifndef NA_CPU_MV_PF
#define NA_CPU_MV_PF 4096
#endif
#define NA_CPU_MV_PREFETCH(p) _mm_prefetch((const char *)(p) + NA_CPU_MV_PF, _MM_HINT_T0)
/* The F16/BF16 batch-1 kernel (and the row dequantiser of the small-batch
 * paths) asks for the line NA_CPU_MV_PF_L2 bytes ahead into L2 instead (T1):
 * an L1 prefetch holds one of the core's few L1 miss buffers until its line
 * arrives, an L2 prefetch does not, so more lines are in flight. A 2.4 GB
 * file mmap read as 2048-column f16 rows, 1 thread, CPU-time GB/s, medians
 * of 8-12 alternated passes at load 19-29 (2-core EPYC shared with other
 * sessions): T0 4096 ahead 16.3-19.5; T1 4096 21.1-22.3, 5120 22.8, 6144
 * 24.6-26.6, 7168 23.0, 8192 22.6-24.1, 12288 21.7-22.5, 16384 22.1 (T2
 * the same); bf16 T0 4096 17.7, 6144 24.9. A whole 1B-shape decode step
 * (run, t=1, CPU time) ran 1.5-1.6x faster at 6144 or 8192. Q8_0
 * rows kept T0: T1 8192 gave the same step time (55-58 against 58 ms).
 * F32 rows (na_cpu_dotn_f32 and the AVX-512 rows kernel) ask for nothing
 * since 2026-11-28: the hardware prefetcher follows their stream best.
 * 1B-shape F32 decode, run -n 48, alternated, load 1.0-1.3 (tok/s): T0
 * 4096 ahead (before) t=1 3.6-3.9, t=2 5.3-6.1; T1 6144 ahead t=1 4.1-4.6,
 * t=2 5.6-6.9; none t=1 5.1-5.3, t=2 6.0-8.1. F16 rows without their T1
 * prefetch: t=1 8.7-8.9 against 10.2-10.9, t=2 12.3-15.6 against
 * 13.0-15.3, so they keep it. */
/* NA_CPU_MV_PF_L2 and NA_CPU_MV_PREFETCH_L2: kernels/cpu/cpu.h (the BF16
 * panels' one-input pass, cpu_gemm_bf16.c, asks the same way). */

/* Address of row r of w. */
static const uint8_t *na_cpu_row(const na_tensor_t *w, int r)
{
    const uint8_t *base = w->data;
    if (w->dtype == NA_DTYPE_Q8_0)
        return base + (size_t)r * (size_t)(w->cols / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
    return base + (size_t)r * na_dtype_bytes(w->dtype, (size_t)w->cols);
}

/* 32 Q8_0 values of block blk times d, as 4 vectors. */
static inline void na_cpu_q8_block(const uint8_t *blk, __m256 out[4])
{
    uint16_t dh;
    __m256 d;
    int j;
    memcpy(&dh, blk, 2);
    d = _mm256_set1_ps(_cvtsh_ss(dh));
    for (j = 0; j < 4; j++) {
        __m128i q = _mm_loadl_epi64((const __m128i *)(blk + 2 + 8 * j));
        out[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
}

/* Q8_0 weights times inputs quantised to Q8 blocks (the definition is in
 * kernels/ref/ref.h, na_ref_quantize_q8): the inputs of a call are quantised
 * once, then each block's 32 products are summed exactly in int32 and added
 * to the f32 sum as isum * d_w * d_x. */

/* acc + the int32 products of Q8_0 block blk with Q8 inputs qx (lane l holds
 * products 4l..4l+3: |w| x sign(x, w) in pairs, then pairs of pairs; exact,
 * |w| <= 128 and |x| <= 127 never saturate) times d_w * dx. */
static inline __attribute__((always_inline)) __m256
na_cpu_q8q8_block(__m256 acc, const uint8_t *blk, const int8_t *qx, float dx)
{
    __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 2));
    __m256i x = _mm256_loadu_si256((const __m256i *)qx);
    __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w),
                                                       _mm256_sign_epi8(x, w)),
                                  _mm256_set1_epi16(1));
    uint16_t dh;
    memcpy(&dh, blk, 2);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(dh) * dx), acc);
}

/* One Q8_0 weight row (nblk blocks) dotted with Q8 inputs qx / dx: four
 * accumulators by block index mod 4, one fixed reduction, so the result does
 * not depend on the batch or the thread count. */
static float na_cpu_dot_q8q8(const uint8_t *row, const int8_t *qx, const float *dx, int nblk)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int b = 0;

#define NA_Q8B(a, i) na_cpu_q8q8_block(a, row + (size_t)(b + (i)) * NA_Q8_0_BLOCK_SIZE, \
                                       qx + (size_t)(b + (i)) * NA_Q8_0_BLOCK, dx[b + (i)])
    for (; b + 4 <= nblk; b += 4) {
        NA_CPU_MV_PREFETCH(row + (size_t)b * NA_Q8_0_BLOCK_SIZE);
        NA_CPU_MV_PREFETCH(row + (size_t)b * NA_Q8_0_BLOCK_SIZE + 64);
        NA_CPU_MV_PREFETCH(row + (size_t)b * NA_Q8_0_BLOCK_SIZE + 128);
        a0 = NA_Q8B(a0, 0);
        a1 = NA_Q8B(a1, 1);
        a2 = NA_Q8B(a2, 2);
        a3 = NA_Q8B(a3, 3);
    }
    if (b < nblk)
        a0 = NA_Q8B(a0, 0);
    if (b + 1 < nblk)
        a1 = NA_Q8B(a1, 1);
    if (b + 2 < nblk)
        a2 = NA_Q8B(a2, 2);
#undef NA_Q8B
    return na_cpu_hsum4(a0, a1, a2, a3);
}

/* Inputs dotted with one weight row at a time by the small-batch kernel: it
 * keeps 4 accumulators per input in registers (16 with AVX-512VL's 32 ymm
 * registers, 8 with AVX2's 16). */
#if defined(__AVX512VL__)
#define NA_CPU_MM_NB 4
#else
#define NA_CPU_MM_NB 2
#endif

/* out[b * os] = w[n] · x[b * ld .. + n] for b < NB (NB <= 4, a constant
 * after inlining). Each output is summed in exactly the same order for every
 * NB — 4 accumulators over blocks of 32, then blocks of 8 into the first, a
 * fixed reduction tree, a scalar tail — so a row computed in a batch is
 * bit-identical to the same row computed alone (batch 1). */
NA_INLINE void na_cpu_dotn_f32(const float *w, const float *x, size_t ld, int n, int NB,
                               float *out, size_t os)
{
    __m256 a[4][4];
    float sum[4];
    int i = 0, b, j;

#pragma GCC unroll 4
    for (b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (j = 0; j < 4; j++)
            a[b][j] = _mm256_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        __m256 w0 = _mm256_loadu_ps(w + i), w1 = _mm256_loadu_ps(w + i + 8);
        __m256 w2 = _mm256_loadu_ps(w + i + 16), w3 = _mm256_loadu_ps(w + i + 24);
#pragma GCC unroll 4
        for (b = 0; b < NB; b++) {
            const float *xb = x + (size_t)b * ld + i;
            a[b][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xb),      a[b][0]);
            a[b][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 8),  a[b][1]);
            a[b][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 16), a[b][2]);
            a[b][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 24), a[b][3]);
        }
    }
#define NA_W8(k) _mm256_loadu_ps(w + (k))
    NA_CPU_ROW_REDUCE(NA_W8, a, sum, x, ld, i, n, NB, b);
#undef NA_W8
    for (; i < n; i++)
#pragma GCC unroll 4
        for (b = 0; b < NB; b++)
            sum[b] = fmaf(w[i], x[(size_t)b * ld + i], sum[b]);
#pragma GCC unroll 4
    for (b = 0; b < NB; b++)
        out[(size_t)b * os] = sum[b];
}

/* out[b * os] = w[n] · x[b * ld ..] for b < nb (any nb), NA_CPU_MM_NB inputs
 * per pass over the row (the row stays in L1 between passes). */
static void na_cpu_dot_batch_f32(const float *w, const float *x, size_t ld, int n, int nb,
                                 float *out, size_t os)
{
    int b = 0;
    for (; b + NA_CPU_MM_NB <= nb; b += NA_CPU_MM_NB)
        na_cpu_dotn_f32(w, x + (size_t)b * ld, ld, n, NA_CPU_MM_NB, out + (size_t)b * os, os);
    switch (nb - b) {
#if NA_CPU_MM_NB > 3
    case 3: na_cpu_dotn_f32(w, x + (size_t)b * ld, ld, n, 3, out + (size_t)b * os, os); break;
#endif
#if NA_CPU_MM_NB > 2
    case 2: na_cpu_dotn_f32(w, x + (size_t)b * ld, ld, n, 2, out + (size_t)b * os, os); break;
#endif
    case 1: na_cpu_dotn_f32(w, x + (size_t)b * ld, ld, n, 1, out + (size_t)b * os, os); break;
    default: break;
    }
}

#if defined(__AVX512F__)
/* NR weight rows at a time (AVX-512): out[b * os + r] = w[r] · x[b * ld ..]
 * for r < NR, b < NB (NR * NB <= 8, constants after inlining). Every output
 * is summed in exactly the order of na_cpu_dotn_f32 — a zmm accumulator
 * holds that kernel's a0|a1 (lanes i..i+15 of each block of 32), another
 * a2|a3; blocks of 8 go into the low half (a0) under a mask; the same
 * reduction tree and scalar tail — so it is bit-identical to batch 1, while
 * each input vector loaded feeds NR rows (NR 4, NB 2: 12 loads per 16 FMAs of
 * 16 lanes, where na_cpu_dotn_f32 needs 20 per 16 of 8). */
NA_INLINE void na_cpu_dotrn_f32(const float *const *w, int NR, const float *x, size_t ld,
                                int n, int NB, float *out, size_t os)
{
    __m512 a[4][4][2];
    float sum[4][4];
    int i = 0, b, r;

#pragma GCC unroll 4
    for (b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (r = 0; r < NR; r++)
            a[r][b][0] = a[r][b][1] = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        __m512 u[4][2];
#pragma GCC unroll 4
        for (r = 0; r < NR; r++) {
            u[r][0] = _mm512_loadu_ps(w[r] + i);
            u[r][1] = _mm512_loadu_ps(w[r] + i + 16);
        }
#pragma GCC unroll 4
        for (b = 0; b < NB; b++) {
            const float *xb = x + (size_t)b * ld + i;
            __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
#pragma GCC unroll 4
            for (r = 0; r < NR; r++) {
                a[r][b][0] = _mm512_fmadd_ps(u[r][0], x0, a[r][b][0]);
                a[r][b][1] = _mm512_fmadd_ps(u[r][1], x1, a[r][b][1]);
            }
        }
    }
    for (; i + 8 <= n; i += 8) {
        __m512 u[4];
#pragma GCC unroll 4
        for (r = 0; r < NR; r++)
            u[r] = _mm512_maskz_loadu_ps(0xff, w[r] + i);
#pragma GCC unroll 4
        for (b = 0; b < NB; b++) {
            __m512 xv = _mm512_maskz_loadu_ps(0xff, x + (size_t)b * ld + i);
#pragma GCC unroll 4
            for (r = 0; r < NR; r++)
                a[r][b][0] = _mm512_mask3_fmadd_ps(u[r], xv, a[r][b][0], 0xff);
        }
    }
#pragma GCC unroll 4
    for (b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (r = 0; r < NR; r++)
            sum[r][b] = na_cpu_hsum2x16(a[r][b][0], a[r][b][1]);
    for (; i < n; i++)
#pragma GCC unroll 4
        for (b = 0; b < NB; b++)
#pragma GCC unroll 4
            for (r = 0; r < NR; r++)
                sum[r][b] = fmaf(w[r][i], x[(size_t)b * ld + i], sum[r][b]);
#pragma GCC unroll 4
    for (b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (r = 0; r < NR; r++)
            out[(size_t)b * os + r] = sum[r][b];
}

/* NR rows (1-4) of the panel, NB inputs (1-3): the constant-argument copies. */
static void na_cpu_dotpx_any(const float *w, size_t ws, int NR, const float *x, size_t ld,
                             int n, int i0, int i1, int NB, __m512 *acc, float *out, size_t os)
{
#define NA_PX(R, B) na_cpu_px_tile(w, ws, R, x, ld, n, i0, i1, B, acc, out, os, NA_CPU_PX_F32)
    switch (NR * 4 + NB) {
    case 4 * 4 + 3: NA_PX(4, 3); break;
    case 4 * 4 + 2: NA_PX(4, 2); break;
    case 4 * 4 + 1: NA_PX(4, 1); break;
    case 3 * 4 + 3: NA_PX(3, 3); break;
    case 3 * 4 + 2: NA_PX(3, 2); break;
    case 3 * 4 + 1: NA_PX(3, 1); break;
    case 2 * 4 + 3: NA_PX(2, 3); break;
    case 2 * 4 + 2: NA_PX(2, 2); break;
    case 2 * 4 + 1: NA_PX(2, 1); break;
    case 1 * 4 + 3: NA_PX(1, 3); break;
    case 1 * 4 + 2: NA_PX(1, 2); break;
    default:        NA_PX(1, 1); break;
    }
#undef NA_PX
}

/* A dequantised panel of np rows (rows cols apart in p, outputs from y)
 * times all nb inputs: 3 inputs at a time, each group run over every 4 rows
 * of the panel, NA_CPU_PANEL_KC of the row at a time, so the group's part of
 * the inputs stays in L1 while the panel (in L2) streams past it. */
static void na_cpu_panel_f32(const float *p, int np, const float *x, int cols, int nb,
                             float *y, size_t rows)
{
    __m512 acc[NA_CPU_PANEL_MAXROWS / 4][24];
    int b, r, k0, k1;
    for (b = 0; b < nb; b += 3) {
        const float *xb = x + (size_t)b * cols;
        float *yb = y + (size_t)b * rows;
        int nbb = nb - b < 3 ? nb - b : 3;
        for (k0 = 0; k0 < cols; k0 = k1) {
            k1 = cols - k0 <= NA_CPU_PANEL_KC + 32 ? cols : k0 + NA_CPU_PANEL_KC;
            for (r = 0; r < np; r += 4)
                na_cpu_dotpx_any(p + (size_t)r * cols, (size_t)cols, np - r < 4 ? np - r : 4,
                                 xb, (size_t)cols, cols, k0, k1, nbb, acc[r / 4], yb + r, rows);
        }
    }
}

/* NA_CPU_MM_ROWS adjacent rows w[0..3] (outputs out[b * os + r]) times
 * inputs b < nb, 2 at a time. */
static void na_cpu_dot4_batch_f32(const float *const *w, const float *x, size_t ld, int n,
                                  int nb, float *out, size_t os)
{
    int b = 0;
    for (; b + 2 <= nb; b += 2)
        na_cpu_dotrn_f32(w, 4, x + (size_t)b * ld, ld, n, 2, out + (size_t)b * os, os);
    if (b < nb)
        na_cpu_dotrn_f32(w, 4, x + (size_t)b * ld, ld, n, 1, out + (size_t)b * os, os);
}
#define NA_CPU_MM_ROWS 4    /* weight rows per pass of the small-batch kernel */
#else
#define NA_CPU_MM_ROWS 1
#endif

/* One F16 (f16 != 0) or BF16 weight row w[n] dotted with x[n] at batch 1:
 * 4 accumulators over blocks of 32 (8 lanes each), blocks of 8 into the
 * first, a fixed reduction tree, a scalar tail — na_cpu_dotn_f32's order on
 * the converted row, so batch 1 equals every batch bit for bit. f16 is a
 * constant after inlining (one loop per dtype, no test inside it). The
 * prefetch asks for the line NA_CPU_MV_PF_L2 bytes ahead into L2 (see
 * there). */
NA_INLINE float na_cpu_dot_h16(const uint16_t *w, const float *x, int n, int f16)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    float sum;
    int i = 0;
#define NA_LD(p) (f16 ? na_cpu_load_f16(p) : na_cpu_load_bf16(p))
    for (; i + 32 <= n; i += 32) {
        NA_CPU_MV_PREFETCH_L2(w + i);
        a0 = _mm256_fmadd_ps(NA_LD(w + i),      _mm256_loadu_ps(x + i),      a0);
        a1 = _mm256_fmadd_ps(NA_LD(w + i + 8),  _mm256_loadu_ps(x + i + 8),  a1);
        a2 = _mm256_fmadd_ps(NA_LD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(NA_LD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(NA_LD(w + i), _mm256_loadu_ps(x + i), a0);
#undef NA_LD
    sum = na_cpu_hsum4(a0, a1, a2, a3);
    for (; i < n; i++)
        sum = fmaf(f16 ? na_f16_to_f32(w[i]) : na_bf16_to_f32(w[i]), x[i], sum);
    return sum;
}

/* Dot product of one weight row (any dtype) with x[n]. */
static float na_cpu_dot_row(na_dtype_t dt, const uint8_t *row, const float *x, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    float sum;
    int i = 0;

    switch (dt) {
    case NA_DTYPE_F32:
        na_cpu_dotn_f32((const float *)row, x, 0, n, 1, &sum, 1);
        return sum;
    case NA_DTYPE_F16:
        return na_cpu_dot_h16((const uint16_t *)row, x, n, 1);
    case NA_DTYPE_BF16:
        return na_cpu_dot_h16((const uint16_t *)row, x, n, 0);
    case NA_DTYPE_Q8_0: {
        const uint8_t *blk = row;
        for (; i + NA_Q8_0_BLOCK <= n; i += NA_Q8_0_BLOCK, blk += NA_Q8_0_BLOCK_SIZE) {
            __m256 v[4];
            na_cpu_q8_block(blk, v);
            a0 = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(x + i),      a0);
            a1 = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + i + 8),  a1);
            a2 = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + i + 16), a2);
            a3 = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + i + 24), a3);
        }
        return na_cpu_hsum4(a0, a1, a2, a3);
    }
    default:
        return 0.0f;
    }
}

/* Dequantise one row of n weights into out[n] (f32). */
static void na_cpu_dequant_row(na_dtype_t dt, const uint8_t *row, float *out, int n)
{
    int i = 0;
    switch (dt) {
    case NA_DTYPE_F32:
        memcpy(out, row, sizeof(float) * (size_t)n);
        break;
    case NA_DTYPE_F16:
    case NA_DTYPE_BF16: {
        const uint16_t *w = (const uint16_t *)row;
        int f16 = dt == NA_DTYPE_F16, k;
        for (; i + 32 <= n; i += 32) {      /* a line at a time, the next ones asked into L2 */
            NA_CPU_MV_PREFETCH_L2(w + i);
            for (k = 0; k < 32; k += 8)
                _mm256_storeu_ps(out + i + k, f16 ? na_cpu_load_f16(w + i + k)
                                                  : na_cpu_load_bf16(w + i + k));
        }
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, f16 ? na_cpu_load_f16(w + i) : na_cpu_load_bf16(w + i));
        for (; i < n; i++)
            out[i] = f16 ? na_f16_to_f32(w[i]) : na_bf16_to_f32(w[i]);
        break;
    }
    case NA_DTYPE_Q8_0: {
        const uint8_t *blk = row;
        for (; i + NA_Q8_0_BLOCK <= n; i += NA_Q8_0_BLOCK, blk += NA_Q8_0_BLOCK_SIZE) {
            __m256 v[4];
            na_cpu_q8_block(blk, v);
            _mm256_storeu_ps(out + i, v[0]);
            _mm256_storeu_ps(out + i + 8, v[1]);
            _mm256_storeu_ps(out + i + 16, v[2]);
            _mm256_storeu_ps(out + i + 24, v[3]);
        }
        break;
    }
    default:
        break;
    }
}

/* One job of the pool: rows [lo, hi) of task t out of n_tasks. */
typedef struct {
    float             *y;       /* (batch, rows) */
    const float       *x;       /* (batch, cols) */
    const na_tensor_t *w;
    int                batch;
    int                r0, r1;  /* rows of this job */
    float             *buf;     /* per-task row buffers (n_tasks, cols) or a tile (r1-r0, cols) */
    const int8_t      *qx;      /* Q8_0 weights: the inputs in Q8 blocks (batch, cols) */
    const float       *dx;      /* and their scales (batch, cols / 32) */
    int                mc;      /* > 0: the row kernel in panels of mc rows (buf: mc per task) */
} na_cpu_mm_job_t;

static void na_cpu_task_rows(const na_cpu_mm_job_t *j, int t, int n_tasks, int *lo, int *hi)
{
    int n = j->r1 - j->r0;
    *lo = j->r0 + (int)((long)n * t / n_tasks);
    *hi = j->r0 + (int)((long)n * (t + 1) / n_tasks);
}


/* Batch 1: y[r] = dot(row r, x). */
static void na_cpu_mm_vec_task(void *ctx, int t, int n_tasks)
{
    const na_cpu_mm_job_t *j = ctx;
    int r, lo, hi;
    na_cpu_task_rows(j, t, n_tasks, &lo, &hi);
    if (j->qx != NULL) {
        for (r = lo; r < hi; r++)
            j->y[r] = na_cpu_dot_q8q8(na_cpu_row(j->w, r), j->qx, j->dx,
                                      j->w->cols / NA_Q8_0_BLOCK);
        return;
    }
    for (r = lo; r < hi; r++)
        j->y[r] = na_cpu_dot_row(j->w->dtype, na_cpu_row(j->w, r), j->x, j->w->cols);
}

/* Small batch: each weight row is read once and dotted with every input,
 * NA_CPU_MM_NB inputs at a time, by na_cpu_dot_batch_f32 (so every output
 * equals its batch-1 value bit for bit). F32 rows are used in place; other
 * dtypes are first dequantised into this task's row buffer (exact: the
 * batch-1 kernel converts to the same f32 values in registers). Without a
 * buffer (buf NULL), the quantised row is dotted with each input in turn. */
static void na_cpu_mm_rows_task(void *ctx, int t, int n_tasks)
{
    const na_cpu_mm_job_t *j = ctx;
    int cols = j->w->cols, rows = j->w->rows;
    int r, b, lo, hi;
    float *rb = j->buf ? j->buf + (size_t)t * NA_CPU_MM_ROWS * cols : NULL;

    na_cpu_task_rows(j, t, n_tasks, &lo, &hi);
    if (j->qx != NULL) {                /* Q8_0: the row stays in L1 across the inputs */
        int nblk = cols / NA_Q8_0_BLOCK;
        for (r = lo; r < hi; r++)
            for (b = 0; b < j->batch; b++)
                j->y[(size_t)b * rows + r] =
                    na_cpu_dot_q8q8(na_cpu_row(j->w, r), j->qx + (size_t)b * cols,
                                    j->dx + (size_t)b * nblk, nblk);
        return;
    }
#if NA_CPU_MM_ROWS == 4
    if (j->mc > 0 && rb != NULL) {     /* large batches: panels of j->mc rows */
        int p0, np, i;
        rb = j->buf + (size_t)t * j->mc * cols;
        for (p0 = lo; p0 < hi; p0 += np) {
            np = hi - p0 < j->mc ? hi - p0 : j->mc;
            for (i = 0; i < np; i++)
                na_cpu_dequant_row(j->w->dtype, na_cpu_row(j->w, p0 + i), rb + (size_t)i * cols,
                                   cols);
            na_cpu_panel_f32(rb, np, j->x, cols, j->batch, j->y + p0, (size_t)rows);
        }
        return;
    }
    /* F32 below 8 inputs: the rows in place, one at a time (4 at a time with
     * the copy measured 15 % slower at batch 4; from batch 8 faster) */
    for (r = lo; r + 4 <= hi && rb != NULL && (j->w->dtype != NA_DTYPE_F32 || j->batch >= 8);
         r += 4) {
        const float *w4[4];
        int i;
        for (i = 0; i < 4; i++) {
            /* F32 rows copied too: the 4 rows stay together in L1 (measured
             * 52 -> 68-77 GFLOP/s at 768 cols, batch 32-64, 1 thread) */
            na_cpu_dequant_row(j->w->dtype, na_cpu_row(j->w, r + i), rb + (size_t)i * cols, cols);
            w4[i] = rb + (size_t)i * cols;
        }
        na_cpu_dot4_batch_f32(w4, j->x, (size_t)cols, cols, j->batch, j->y + r, (size_t)rows);
    }
#else
    r = lo;
#endif
    for (; r < hi; r++) {
        const uint8_t *row = na_cpu_row(j->w, r);
        const float *wf = (const float *)row;
        if (j->w->dtype != NA_DTYPE_F32) {
            if (rb == NULL) {
                for (b = 0; b < j->batch; b++)
                    j->y[(size_t)b * rows + r] =
                        na_cpu_dot_row(j->w->dtype, row, j->x + (size_t)b * cols, cols);
                continue;
            }
            na_cpu_dequant_row(j->w->dtype, row, rb, cols);
            wf = rb;
        }
        na_cpu_dot_batch_f32(wf, j->x, (size_t)cols, cols, j->batch, j->y + r, (size_t)rows);
    }
}

/* Large batch, one task per thread: its rows [lo, hi) of W times all inputs
 * by a single-threaded cblas_sgemm (OpenBLAS runs with 1 thread: the pool is
 * the one set of threads, so no OpenBLAS thread spins beside it between
 * calls). F32 rows are used in place; other dtypes are dequantised into the
 * task's part of buf, j->r1 rows (a tile) at a time. */
static void na_cpu_mm_gemm_task(void *ctx, int t, int n_tasks)
{
    const na_cpu_mm_job_t *j = ctx;
    const int cols = j->w->cols, rows = j->w->rows, tile = j->r1;
    int lo = (int)((long)rows * t / n_tasks), hi = (int)((long)rows * (t + 1) / n_tasks), r0, r;

    if (j->w->dtype == NA_DTYPE_F32) {
        if (hi > lo)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->batch, hi - lo, cols, 1.0f,
                        j->x, cols, (const float *)j->w->data + (size_t)lo * cols, cols, 0.0f,
                        j->y + lo, rows);
        return;
    }
    for (r0 = lo; r0 < hi; r0 += tile) {
        int n = hi - r0 < tile ? hi - r0 : tile;
        float *buf = j->buf + (size_t)t * tile * cols;
        for (r = 0; r < n; r++)
            na_cpu_dequant_row(j->w->dtype, na_cpu_row(j->w, r0 + r), buf + (size_t)r * cols,
                               cols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->batch, n, cols, 1.0f, j->x, cols,
                    buf, cols, 0.0f, j->y + r0, rows);
    }
}

/* Tasks for a job over n rows of `cols` weights: 1 when too small to be
 * worth waking the pool, else a few per thread so uneven cores balance. */
static int na_cpu_mm_tasks(na_kernels_t *k, int n, int cols, int batch)
{
    size_t work = (size_t)n * (size_t)cols * (size_t)batch;
    int tasks;
    if (k->n_threads == 1 || work < NA_CPU_PAR_MIN_WORK)
        return 1;
    tasks = 4 * k->n_threads;
    return tasks > n ? n : tasks;
}

void na_cpu_matmul(na_kernels_t *k, float *y, const float *x,
                   const na_tensor_t *w, int batch)
{
    na_cpu_state_t *s = k->priv;
    na_cpu_mm_job_t j = { y, x, w, batch, 0, w->rows, NULL, NULL, NULL, 0 };
    int rows = w->rows, cols = w->cols, tasks;

    if (batch <= 0 || rows <= 0)
        return;
    if (na_ref_quant_kind(w->dtype) != 0 || w->layout == NA_LAYOUT_Q8X8) {
        /* Q4_0 ... Q6_K, and Q8_0 in groups of 8 rows: cpu_quant.c */
        if (s->matmul_quant(k, y, x, w, batch) == 0)
            return;
        if (w->layout != NA_LAYOUT_ROWS)
            na_cpu_packed_matmul_f32(y, x, w, batch);
        else
            na_ref_matmul(k, y, x, w, batch);
        return;
    }
    if (w->layout == NA_LAYOUT_BF16X32) {      /* placed for cpu_gemm_bf16.c: every batch */
        if (s->gemm_bf16(k, y, x, w, batch) != 0)
            na_cpu_packed_matmul_f32(y, x, w, batch);
        return;
    }
    /* in the weight type (kernels/cpu/cpu_gemm_*.c); Q8_0 is bit-identical
     * to the row kernels below, so it serves batch_invariant too */
    if (w->dtype == NA_DTYPE_Q8_0 && batch >= s->gemm_q8_min_batch &&
        s->gemm_q8(k, y, x, w, batch) == 0)
        return;
    if (w->dtype == NA_DTYPE_BF16 && batch >= NA_CPU_GEMM_BF16_MIN_BATCH &&
        !k->batch_invariant && s->gemm_bf16 != NULL && s->gemm_bf16(k, y, x, w, batch) == 0)
        return;
    if (w->dtype == NA_DTYPE_Q8_0 && (batch < NA_CPU_TILE_MIN_BATCH || k->batch_invariant)) {
        /* the inputs in Q8 blocks: batch x cols bytes, then batch x cols/32 scales */
        size_t nq = (size_t)batch * (size_t)cols;
        float *sc = na_cpu_scratch(k, nq / 4 + nq / NA_Q8_0_BLOCK);
        if (sc != NULL) {
            int b;
            j.qx = (const int8_t *)sc;
            j.dx = sc + nq / 4;
            for (b = 0; b < batch; b++)
                na_cpu_quantize_q8(x + (size_t)b * cols, cols, (int8_t *)sc + (size_t)b * cols,
                                   sc + nq / 4 + (size_t)b * (cols / NA_Q8_0_BLOCK));
            na_cpu_pool_run(s->pool, batch == 1 ? na_cpu_mm_vec_task : na_cpu_mm_rows_task, &j,
                            na_cpu_mm_tasks(k, rows, cols, batch));
            return;
        }
        /* no scratch: f32 inputs below (no input rounding: closer to exact, not
         * bit-identical to batch 1 or kernels/ref) */
    }
    if (batch == 1) {
        na_cpu_pool_run(s->pool, na_cpu_mm_vec_task, &j, na_cpu_mm_tasks(k, rows, cols, 1));
        return;
    }
    /* F16 / BF16: the GEMM bit-identical to the row kernel (cpu_gemm_h16.c) */
    if ((w->dtype == NA_DTYPE_F16 || w->dtype == NA_DTYPE_BF16) &&
        batch >= NA_CPU_GEMM_H16_MIN_BATCH && (k->batch_invariant || NA_CPU_GEMM_H16_ANY) &&
        na_cpu_gemm_h16(k, y, x, w, batch) == 0)
        return;
    if (k->batch_invariant)
        goto rows;                      /* the row kernel: batch-1 summation order */
    if ((w->dtype == NA_DTYPE_F32 || w->dtype == NA_DTYPE_F16) &&
        batch >= NA_CPU_GEMM_F32_MIN_BATCH && s->gemm_f32 != NULL &&
        s->gemm_f32(k, y, x, w, batch) == 0)
        return;
    if ((w->dtype == NA_DTYPE_F32 && batch >= NA_CPU_F32_SGEMM_MIN_BATCH) ||
        (w->dtype != NA_DTYPE_F32 && batch >= NA_CPU_TILE_MIN_BATCH)) {
        int n_tasks = k->n_threads < rows ? k->n_threads : rows;
        int tile = (int)(NA_CPU_TILE_FLOATS / ((size_t)cols * (size_t)n_tasks));
        if (tile < 8)
            tile = 8;
        j.r1 = tile;                    /* rows per dequantised tile of a task */
        if (w->dtype != NA_DTYPE_F32)
            j.buf = na_cpu_scratch(k, (size_t)n_tasks * tile * cols);
        if (w->dtype == NA_DTYPE_F32 || j.buf != NULL) {
            na_cpu_pool_run(s->pool, na_cpu_mm_gemm_task, &j, n_tasks);
            return;
        }
        j.r1 = rows;
        /* no scratch: fall through to the row kernel without buffers */
    }
rows:
    tasks = na_cpu_mm_tasks(k, rows, cols, batch);
    j.r0 = 0;
    j.r1 = rows;
#if NA_CPU_MM_ROWS == 4
    if (batch >= NA_CPU_PANEL_MIN_BATCH) {
        /* panels of about NA_CPU_PANEL_BYTES of f32 rows, a multiple of 4 */
        int mc = (int)(NA_CPU_PANEL_BYTES / (sizeof(float) * (size_t)cols)) / 4 * 4;
        j.mc = mc < 4 ? 4 : mc > NA_CPU_PANEL_MAXROWS ? NA_CPU_PANEL_MAXROWS : mc;
        j.buf = na_cpu_scratch(k, (size_t)tasks * j.mc * cols);
        if (j.buf != NULL) {
            na_cpu_pool_run(s->pool, na_cpu_mm_rows_task, &j, tasks);
            return;
        }
        j.mc = 0;
    }
#endif
    if (w->dtype != NA_DTYPE_F32 || NA_CPU_MM_ROWS > 1)
        j.buf = na_cpu_scratch(k, (size_t)tasks * NA_CPU_MM_ROWS * cols);
    na_cpu_pool_run(s->pool, na_cpu_mm_rows_task, &j, tasks);
}

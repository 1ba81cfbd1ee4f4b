/* kernels/cpu/cpu_gemm_q8.c — y = W·x for Q8_0 weights at large batches
 * (prompt processing): the inputs quantised to Q8 blocks once per call
 * (kernels/ref/ref.h, na_ref_quantize_q8), then a register-blocked
 * micro-kernel of NA_GQ_RM weight rows x NA_GQ_RN inputs that multiplies in
 * int8 and sums each block exactly in int32.
 *
 * Bit-identical to the batch-1 / small-batch kernel of cpu_matmul.c
 * (na_cpu_dot_q8q8): an output keeps the same four 8-lane f32 accumulators,
 * block b going into accumulator b % 4 as fma(int32 lanes as f32,
 * d_w * d_x, acc), lane l holding the products 4l..4l+3 of the block, and
 * the same final reduction ((a0 + a1) + (a2 + a3), then na_cpu_hsum). Blocks
 * past the end of a row are zero with zero scales: fma(0, 0, acc) == acc
 * exactly (an accumulator that starts at +0 never becomes -0); units of
 * padding only are skipped (cols 288 = 9 blocks: 5 of 6 VNNI units run).
 *
 * Compiled twice (kernels/CMakeLists.txt):
 *   baseline (x86-64-v3)  na_cpu_gemm_q8: per block and output
 *                         sign/maddubs/madd (as na_cpu_dot_q8q8), 1 row x 2
 *                         inputs (16 ymm registers hold 8 accumulators).
 *   AVX512-VNNI           na_cpu_gemm_q8_vnni: a zmm holds 2 blocks (a0|a1
 *                         or a2|a3), vpdpbusd on (x + 128) as u8 times w as
 *                         s8, started from -128 * sum4(w) so each lane is the
 *                         exact signed sum; 3 rows x 3 inputs.
 * Both pack the inputs once (all threads, by columns) and each task packs
 * its weight rows, a chunk at a time, into a layout the kernel reads with
 * plain loads: the scales already widened to f32 lanes, padding blocks and
 * rows zero. */
#include <string.h>

#include "kernels/cpu/cpu.h"

#if defined(NA_CPU_VNNI)
#define na_cpu_gemm_q8 na_cpu_gemm_q8_vnni
#define NA_GQ_UB 2          /* Q8 blocks per unit (one vector of quants) */
#define NA_GQ_WB 192        /* packed bytes per weight row and unit: w, -128*sum4(w), d_w */
#define NA_GQ_XB 128        /* per input and unit: x + 128 (u8), d_x */
#define NA_GQ_RM 3          /* weight rows per micro-tile */
#define NA_GQ_RN 3          /* inputs per micro-tile */
#else
#define NA_GQ_UB 1
#define NA_GQ_WB 96         /* w, |w|, d_w */
#define NA_GQ_XB 64         /* x, d_x */
#define NA_GQ_RM 1
#define NA_GQ_RN 3
#endif
#define NA_GQ_QUAD (4 / NA_GQ_UB)           /* units per step of all 4 accumulators */

typedef struct {
    na_cpu_gemm_io_t   io;      /* the call; ncols: batch rounded up to NA_GQ_RN */
    int                nblk;    /* Q8 blocks per row */
    int                nunit;   /* units per row, padded to a whole NA_GQ_QUAD */
    int                mc;      /* weight rows per packed chunk (a multiple of NA_GQ_RM) */
    int                nc;      /* inputs per pass (a multiple of NA_GQ_RN) */
    uint8_t           *xp;      /* packed inputs (ncols, nunit, NA_GQ_XB) */
    uint8_t           *wp;      /* per task: packed rows (mc / RM, nunit, RM, NA_GQ_WB) */
} na_gq_job_t;

/* Input column x (NULL: a padding column) into units of NA_GQ_XB bytes. */
static void na_gq_pack_x(const float *x, int nblk, int nunit, uint8_t *out)
{
    int u, k;
    for (u = 0; u < nunit; u++)
        for (k = 0; k < NA_GQ_UB; k++) {
            int b = u * NA_GQ_UB + k;
            int8_t *q = (int8_t *)out + (size_t)u * NA_GQ_XB + k * NA_Q8_0_BLOCK;
            float *dx = (float *)(out + (size_t)u * NA_GQ_XB + NA_GQ_UB * NA_Q8_0_BLOCK) + 8 * k;
            float d = 0.0f;
            if (x != NULL && b < nblk)
                na_cpu_quantize_q8(x + (size_t)b * NA_Q8_0_BLOCK, NA_Q8_0_BLOCK, q, &d);
            else
                memset(q, 0, NA_Q8_0_BLOCK);
#if defined(NA_CPU_VNNI)
            _mm256_storeu_si256((__m256i *)q, _mm256_xor_si256(      /* x + 128 as u8 */
                _mm256_loadu_si256((const __m256i *)q), _mm256_set1_epi8((char)0x80)));
#endif
            _mm256_storeu_ps(dx, _mm256_set1_ps(d));
        }
}

/* Weight row (NULL: a padding row), unit u, into NA_GQ_WB bytes at out. */
static void na_gq_pack_w(const uint8_t *row, int nblk, int u, uint8_t *out)
{
    float *dw = (float *)(out + NA_GQ_WB - 32 * NA_GQ_UB);
    int k;
    for (k = 0; k < NA_GQ_UB; k++) {
        int b = u * NA_GQ_UB + k;
        float d = 0.0f;
        if (row != NULL && b < nblk) {
            uint16_t dh;
            memcpy(&dh, row + (size_t)b * NA_Q8_0_BLOCK_SIZE, 2);
            memcpy(out + k * NA_Q8_0_BLOCK, row + (size_t)b * NA_Q8_0_BLOCK_SIZE + 2,
                   NA_Q8_0_BLOCK);
            d = _cvtsh_ss(dh);
        } else {
            memset(out + k * NA_Q8_0_BLOCK, 0, NA_Q8_0_BLOCK);
        }
        _mm256_storeu_ps(dw + 8 * k, _mm256_set1_ps(d));
    }
#if defined(NA_CPU_VNNI)
    {   /* -128 * (sum of each 4 weights): the start of every lane's vpdpbusd */
        __m512i w = _mm512_loadu_si512(out);
        __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w);
        _mm512_storeu_si512(out + 64, _mm512_sub_epi32(_mm512_setzero_si512(), s));
    }
#else
    {   /* |w| for maddubs (sign_epi8(w, w), as na_cpu_dot_q8q8) */
        __m256i w = _mm256_loadu_si256((const __m256i *)out);
        _mm256_storeu_si256((__m256i *)(out + 32), _mm256_sign_epi8(w, w));
    }
#endif
}

#if defined(NA_CPU_VNNI)
typedef __m512 na_gq_acc_t[NA_GQ_RM][NA_GQ_RN];

/* acc += unit u of the packed rows wp (RM) times the packed inputs xp + c * xs. */
NA_INLINE void na_gq_unit(na_gq_acc_t acc, const uint8_t *wp, const uint8_t *xp, size_t xs, int u)
{
    const uint8_t *wu = wp + (size_t)u * NA_GQ_RM * NA_GQ_WB;
    __m512i xv[NA_GQ_RN];
    __m512 dx[NA_GQ_RN];
    int r, c;

#pragma GCC unroll 4
    for (c = 0; c < NA_GQ_RN; c++) {
        const uint8_t *xc = xp + (size_t)c * xs + (size_t)u * NA_GQ_XB;
        xv[c] = _mm512_loadu_si512(xc);
        dx[c] = _mm512_loadu_ps(xc + 64);
    }
#pragma GCC unroll 4
    for (r = 0; r < NA_GQ_RM; r++) {
        const uint8_t *wr = wu + (size_t)r * NA_GQ_WB;
        __m512i wv = _mm512_loadu_si512(wr), cr = _mm512_loadu_si512(wr + 64);
        __m512 dw = _mm512_loadu_ps(wr + 128);
        /* in registers: else gcc reloads cr and wv for each of the RN inputs */
        __asm__("" : "+v"(wv), "+v"(cr), "+v"(dw));
#pragma GCC unroll 4
        for (c = 0; c < NA_GQ_RN; c++) {
            __m512i p = _mm512_dpbusd_epi32(cr, xv[c], wv);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(dw, dx[c]),
                                        acc[r][c]);
        }
    }
}

/* out[r][c] = packed rows wp (RM) · packed inputs xp + c * xs (RN), over the
 * nreal units that hold blocks (the rest of the padded row would add 0). */
NA_INLINE void na_gq_tile(const uint8_t *wp, const uint8_t *xp, size_t xs, int nreal,
                          float out[NA_GQ_RM][NA_GQ_RN])
{
    na_gq_acc_t a, b;           /* blocks 4q, 4q+1 -> a = (a0|a1); 4q+2, 4q+3 -> b = (a2|a3) */
    int u, r, c;

#pragma GCC unroll 4
    for (r = 0; r < NA_GQ_RM; r++)
#pragma GCC unroll 4
        for (c = 0; c < NA_GQ_RN; c++)
            a[r][c] = b[r][c] = _mm512_setzero_ps();
    for (u = 0; u + 2 <= nreal; u += 2) {
        na_gq_unit(a, wp, xp, xs, u);
        na_gq_unit(b, wp, xp, xs, u + 1);
    }
    if (u < nreal)
        na_gq_unit(a, wp, xp, xs, u);
#pragma GCC unroll 4
    for (r = 0; r < NA_GQ_RM; r++)
#pragma GCC unroll 4
        for (c = 0; c < NA_GQ_RN; c++) {
            __m256 a01 = _mm256_add_ps(_mm512_castps512_ps256(a[r][c]),
                                       _mm512_extractf32x8_ps(a[r][c], 1));
            __m256 a23 = _mm256_add_ps(_mm512_castps512_ps256(b[r][c]),
                                       _mm512_extractf32x8_ps(b[r][c], 1));
            out[r][c] = na_cpu_hsum(_mm256_add_ps(a01, a23));
        }
}
#else
typedef __m256 na_gq_acc_t[NA_GQ_RM][NA_GQ_RN];

/* acc += unit (block) u of the packed rows wp (RM) times the packed inputs
 * xp + c * xs, as na_cpu_q8q8_block. */
NA_INLINE void na_gq_unit(na_gq_acc_t acc, const uint8_t *wp, const uint8_t *xp, size_t xs, int u)
{
    const uint8_t *wu = wp + (size_t)u * NA_GQ_RM * NA_GQ_WB;
    int r, c;

#pragma GCC unroll 4
    for (r = 0; r < NA_GQ_RM; r++) {
        const uint8_t *wr = wu + (size_t)r * NA_GQ_WB;
        __m256i wv = _mm256_loadu_si256((const __m256i *)wr);
        __m256i aw = _mm256_loadu_si256((const __m256i *)(wr + 32));
        __m256 dw = _mm256_loadu_ps((const float *)(wr + 64));
#pragma GCC unroll 4
        for (c = 0; c < NA_GQ_RN; c++) {
            const uint8_t *xc = xp + (size_t)c * xs + (size_t)u * NA_GQ_XB;
            __m256i xv = _mm256_loadu_si256((const __m256i *)xc);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)),
                                          _mm256_set1_epi16(1));
            acc[r][c] = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(p), _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(xc + 32))),
                acc[r][c]);
        }
    }
}

/* out[r][c] = packed rows wp (RM) · packed inputs xp + c * xs (RN), over the
 * nreal units that hold blocks (the rest of the padded row would add 0). */
NA_INLINE void na_gq_tile(const uint8_t *wp, const uint8_t *xp, size_t xs, int nreal,
                          float out[NA_GQ_RM][NA_GQ_RN])
{
    na_gq_acc_t a0, a1, a2, a3;     /* block 4q + i -> ai */
    int u, r, c;

#pragma GCC unroll 4
    for (r = 0; r < NA_GQ_RM; r++)
#pragma GCC unroll 4
        for (c = 0; c < NA_GQ_RN; c++)
            a0[r][c] = a1[r][c] = a2[r][c] = a3[r][c] = _mm256_setzero_ps();
    for (u = 0; u + 4 <= nreal; u += 4) {
        na_gq_unit(a0, wp, xp, xs, u);
        na_gq_unit(a1, wp, xp, xs, u + 1);
        na_gq_unit(a2, wp, xp, xs, u + 2);
        na_gq_unit(a3, wp, xp, xs, u + 3);
    }
    if (u < nreal)
        na_gq_unit(a0, wp, xp, xs, u);
    if (u + 1 < nreal)
        na_gq_unit(a1, wp, xp, xs, u + 1);
    if (u + 2 < nreal)
        na_gq_unit(a2, wp, xp, xs, u + 2);
#pragma GCC unroll 4
    for (r = 0; r < NA_GQ_RM; r++)
#pragma GCC unroll 4
        for (c = 0; c < NA_GQ_RN; c++)
            out[r][c] = na_cpu_hsum4(a0[r][c], a1[r][c], a2[r][c], a3[r][c]);
}
#endif

/* Pool job 1: input columns [lo, hi) of the padded batch into j->xp. */
static void na_gq_pack_x_task(void *ctx, int t, int n_tasks)
{
    const na_gq_job_t *j = ctx;
    const size_t xs = (size_t)j->nunit * NA_GQ_XB;
    int c, lo = (int)((long)j->io.ncols * t / n_tasks);
    int hi = (int)((long)j->io.ncols * (t + 1) / n_tasks);
    for (c = lo; c < hi; c++)
        na_gq_pack_x(na_cpu_gemm_input(&j->io, c), j->nblk, j->nunit, j->xp + (size_t)c * xs);
}

/* Pool job 2: the row tiles [lo, hi) of task t: packs j->mc rows at a time
 * into its part of j->wp, then every input, j->nc at a time, times them. */
static void na_gq_mm_task(void *ctx, int t, int n_tasks)
{
    const na_gq_job_t *j = ctx;
    const int rows = j->io.w->rows, nunit = j->nunit;
    const size_t xs = (size_t)nunit * NA_GQ_XB, tile_b = (size_t)nunit * NA_GQ_RM * NA_GQ_WB;
    const int ntile = (rows + NA_GQ_RM - 1) / NA_GQ_RM;
    int lo = (int)((long)ntile * t / n_tasks) * NA_GQ_RM;
    int hi = (int)((long)ntile * (t + 1) / n_tasks) * NA_GQ_RM;
    uint8_t *wp = j->wp + (size_t)t * (size_t)(j->mc / NA_GQ_RM) * tile_b;
    int r0, r, u, c0, c1, rt;

    for (r0 = lo; r0 < hi; r0 += j->mc) {
        int nr = hi - r0 < j->mc ? hi - r0 : j->mc;
        for (r = 0; r < nr; r++) {
            const uint8_t *row = r0 + r < rows ? j->io.w->data + (size_t)(r0 + r) *
                                                 (size_t)j->nblk * NA_Q8_0_BLOCK_SIZE : NULL;
            uint8_t *tp = wp + (size_t)(r / NA_GQ_RM) * tile_b + (size_t)(r % NA_GQ_RM) * NA_GQ_WB;
            for (u = 0; u < nunit; u++)
                na_gq_pack_w(row, j->nblk, u, tp + (size_t)u * NA_GQ_RM * NA_GQ_WB);
        }
        for (c0 = 0; c0 < j->io.ncols; c0 += j->nc) {
            int cn = j->io.ncols - c0 < j->nc ? j->io.ncols - c0 : j->nc;
            for (rt = 0; rt < nr; rt += NA_GQ_RM)
                for (c1 = c0; c1 < c0 + cn; c1 += NA_GQ_RN) {
                    float out[NA_GQ_RM][NA_GQ_RN];
                    na_gq_tile(wp + (size_t)(rt / NA_GQ_RM) * tile_b, j->xp + (size_t)c1 * xs,
                               xs, (j->nblk + NA_GQ_UB - 1) / NA_GQ_UB, out);
                    na_cpu_gemm_put(j->io.y, rows, j->io.batch, r0 + rt, c1, &out[0][0], NA_GQ_RM,
                                    NA_GQ_RN);
                }
        }
    }
}

/* See kernels/cpu/cpu.h. */
int na_cpu_gemm_q8(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch)
{
    na_gq_job_t j;
    int ntile = (w->rows + NA_GQ_RM - 1) / NA_GQ_RM, n_tasks;
    size_t row_b, xbytes, wbytes;

    j.io = na_cpu_gemm_io(y, x, w, batch, NA_GQ_RN);
    j.nblk = w->cols / NA_Q8_0_BLOCK;
    j.nunit = (j.nblk + 3) / 4 * NA_GQ_QUAD;
    row_b = (size_t)j.nunit * NA_GQ_WB;
    n_tasks = na_cpu_gemm_blocks(k, ntile, NA_GQ_RM, NA_GQ_RN, row_b, (size_t)j.nunit * NA_GQ_XB,
                                 &j.mc, &j.nc);
    xbytes = (size_t)j.io.ncols * j.nunit * NA_GQ_XB;
    wbytes = (size_t)n_tasks * (size_t)j.mc * row_b;
    j.xp = (uint8_t *)na_cpu_scratch(k, (xbytes + wbytes) / sizeof(float) + 1);
    if (j.xp == NULL)
        return -1;
    j.wp = j.xp + xbytes;
    na_cpu_gemm_run(k, na_gq_pack_x_task, na_gq_mm_task, &j, j.io.ncols, n_tasks);
    return 0;
}

/* kernels/cpu/cpu_gemm_bf16.c — y = W·x for BF16 weights at large batches
 * with AVX512-BF16 (compiled with -mavx512bf16, picked at run time by
 * kernels/cpu/cpu_backend.c; without it BF16 keeps cpu_matmul.c's
 * dequantise + sgemm path).
 *
 * The math (kernels/ref/ref.h, na_ref_matmul_xbf16): the inputs are rounded
 * to bf16 once per call (round to nearest even, as na_f32_to_bf16), each
 * product of two bf16 values is exact in f32, and the products are summed in
 * f32 — vdpbf16ps adds the two products of a pair in turn to a lane (it
 * treats denormal inputs and results as zero). This is the precision
 * llama.cpp multiplies bf16 weights at. A weight placed in this file's
 * panels (NA_LAYOUT_BF16X32, kernels/cpu/cpu_pack.c) takes this file at
 * every batch (the small-batch passes below NA_GB_VMAX), so its results do
 * not depend on the batch; a row-major bf16 weight takes it only without
 * batch_invariant from NA_CPU_GEMM_BF16_MIN_BATCH (its smaller batches keep
 * f32 inputs, cpu_matmul.c).
 *
 * Layout: a weight panel of NA_GB_MR rows is packed as (k pair, row, 2)
 * 32-bit words, so one zmm holds one pair of 16 rows; the micro-kernel
 * multiplies NA_GB_MR rows by NA_GB_NR inputs, each input pair broadcast
 * from the bf16 rows of x (vdpbf16ps with a {1to16} memory operand), and
 * stores 16 consecutive rows of y per vector: no horizontal sums. */
#include <string.h>

#include "kernels/cpu/cpu.h"

#define NA_GB_MR 32         /* weight rows per panel: 2 zmm */
#define NA_GB_NR 12         /* inputs per micro-tile: 24 accumulators */

typedef struct {
    na_cpu_gemm_io_t   io;      /* the call; ncols: batch rounded up to NA_GB_NR */
    int                npair;   /* k pairs: (cols + 1) / 2 */
    uint32_t          *xb;      /* inputs as bf16 pairs (ncols, npair) */
    uint32_t          *wp;      /* per task: one packed panel (npair, NA_GB_MR) */
} na_gb_job_t;

/* n f32 (n % 16 == 0) to bf16 with round to nearest even, NaN kept quiet:
 * na_f32_to_bf16 on 16 lanes. */
static inline __m256i na_gb_round16(__m512i x)
{
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
                                                   odd), 16);
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(r);
}

/* Pool job 1: input columns [lo, hi) of the padded batch to bf16 pairs
 * (padding columns and the odd last element zero). */
static void na_gb_pack_x_task(void *ctx, int t, int n_tasks)
{
    const na_gb_job_t *j = ctx;
    const int cols = j->io.w->cols;
    int c, i, lo = (int)((long)j->io.ncols * t / n_tasks);
    int hi = (int)((long)j->io.ncols * (t + 1) / n_tasks);

    for (c = lo; c < hi; c++) {
        uint16_t *out = (uint16_t *)(j->xb + (size_t)c * j->npair);
        const float *xc = na_cpu_gemm_input(&j->io, c);
        memset(out, 0, (size_t)j->npair * 4);
        if (xc == NULL)
            continue;
        for (i = 0; i + 16 <= cols; i += 16)
            _mm256_storeu_si256((__m256i *)(out + i),
                                na_gb_round16(_mm512_loadu_si512(xc + i)));
        for (; i < cols; i++)
            out[i] = na_f32_to_bf16(xc[i]);
    }
}

/* Rows [r0, r0 + NA_GB_MR) of w (past the end: zero) into the panel p. */
static void na_gb_pack_w(const na_tensor_t *w, int r0, int npair, uint32_t *p)
{
    int r, kp;
    for (r = 0; r < NA_GB_MR; r++) {
        const uint8_t *row;
        int whole = w->cols / 2;
        if (r0 + r >= w->rows) {
            for (kp = 0; kp < npair; kp++)
                p[(size_t)kp * NA_GB_MR + r] = 0;
            continue;
        }
        row = w->data + (size_t)(r0 + r) * (size_t)w->cols * 2;
        for (kp = 0; kp < whole; kp++) {
            uint32_t v;
            memcpy(&v, row + (size_t)kp * 4, 4);
            p[(size_t)kp * NA_GB_MR + r] = v;
        }
        if (whole < npair) {                    /* odd cols: the last element alone */
            uint16_t h;
            memcpy(&h, row + (size_t)whole * 4, 2);
            p[(size_t)whole * NA_GB_MR + r] = h;
        }
    }
}

/* y rows [r0, r0 + 32) x inputs [c0, c0 + NR) from panel p (ps words from
 * one k pair to the next: NA_GB_MR, or more in a placed chunk) and xb. */
static inline __attribute__((always_inline)) void
na_gb_tile(const na_gb_job_t *j, const uint32_t *p, size_t ps, int r0, int c0)
{
    const uint32_t *xc = j->xb + (size_t)c0 * j->npair;
    const int rows = j->io.w->rows;
    __m512 acc[2][NA_GB_NR];
    __mmask16 m0, m1;
    int kp, c;

#pragma GCC unroll 12
    for (c = 0; c < NA_GB_NR; c++) {
        acc[0][c] = _mm512_setzero_ps();
        acc[1][c] = _mm512_setzero_ps();
    }
    for (kp = 0; kp < j->npair; kp++) {
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(p + (size_t)kp * ps);
        __m512bh w1 = (__m512bh)_mm512_loadu_si512(p + (size_t)kp * ps + 16);
#pragma GCC unroll 12
        for (c = 0; c < NA_GB_NR; c++) {
            __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xc[(size_t)c * j->npair + kp]);
            acc[0][c] = _mm512_dpbf16_ps(acc[0][c], w0, xv);
            acc[1][c] = _mm512_dpbf16_ps(acc[1][c], w1, xv);
        }
    }
    m0 = rows - r0 >= 16 ? 0xffff : (__mmask16)((1u << (rows - r0)) - 1u);
    m1 = rows - r0 >= 32 ? 0xffff : rows - r0 <= 16 ? 0 : (__mmask16)((1u << (rows - r0 - 16)) - 1u);
#pragma GCC unroll 12
    for (c = 0; c < NA_GB_NR; c++) {
        float *yc = j->io.y + (size_t)(c0 + c) * rows + r0;
        if (c0 + c >= j->io.batch)
            break;
        _mm512_mask_storeu_ps(yc, m0, acc[0][c]);
        _mm512_mask_storeu_ps(yc + 16, m1, acc[1][c]);
    }
}

/* Panel pi of a weight placed in chunks of 4 panels (NA_LAYOUT_BF16X32,
 * kernels/cpu/cpu_pack.c): its first word; *ps the words from one k pair to
 * the next (32 x the panels of its chunk). */
static inline const uint32_t *na_gb_placed(const na_gb_job_t *j, int pi, size_t *ps)
{
    const int npanel = j->io.w->rows / NA_GB_MR, c = pi / 4;
    const int nc = npanel - 4 * c < 4 ? npanel - 4 * c : 4;
    *ps = (size_t)nc * NA_GB_MR;
    return (const uint32_t *)j->io.w->data + (size_t)4 * c * j->npair * NA_GB_MR +
           (size_t)(pi % 4) * NA_GB_MR;
}

/* Pool job 2: the row panels [lo, hi) of task t, each packed into the
 * task's panel (or read where the weight was placed in panels,
 * NA_LAYOUT_BF16X32) and multiplied by every input. */
static void na_gb_mm_task(void *ctx, int t, int n_tasks)
{
    const na_gb_job_t *j = ctx;
    const int npanel = (j->io.w->rows + NA_GB_MR - 1) / NA_GB_MR;
    int pi, c0, lo = (int)((long)npanel * t / n_tasks), hi = (int)((long)npanel * (t + 1) / n_tasks);
    uint32_t *p = j->wp + (size_t)t * j->npair * NA_GB_MR;

    for (pi = lo; pi < hi; pi++) {
        size_t ps = NA_GB_MR;
        if (j->io.w->layout == NA_LAYOUT_BF16X32)
            p = (uint32_t *)na_gb_placed(j, pi, &ps);
        else
            na_gb_pack_w(j->io.w, pi * NA_GB_MR, j->npair, p);
        for (c0 = 0; c0 < j->io.ncols; c0 += NA_GB_NR)
            na_gb_tile(j, p, ps, pi * NA_GB_MR, c0);
    }
}

/* ---- small batches of a weight placed in panels (NA_LAYOUT_BF16X32) --------
 * The tile above with NB (1..NA_GB_VNB) inputs and GP panels at once (so
 * the vdpbf16ps chains of one input overlap: 2 x GP of them), the same
 * accumulator per output, pair after pair: the same bits as the GEMM. */
#define NA_GB_VNB 4             /* inputs per pass */
/* With one input a pass runs at the weight stream's pace: it asks for the
 * lines ahead into L2 as the F16 rows do (NA_CPU_MV_PREFETCH_L2, cpu.h).
 * 1B-shape BF16 decode, run -n 64, 6 alternated rounds, load 1.3-2.7:
 * t=1 median 11.15 -> 11.45 tok/s, t=2 12.5 -> 13.2. */
#define NA_GB_VMAX 12           /* batches below this: these passes; from it the GEMM */

static inline __attribute__((always_inline)) void
na_gb_vtile(const na_gb_job_t *j, int pi, int GP, int c0, int NB)
{
    size_t ps;                                  /* words per k pair in pi's chunk */
    const uint32_t *w = na_gb_placed(j, pi, &ps);
    const uint32_t *xc = j->xb + (size_t)c0 * j->npair;
    const int rows = j->io.w->rows;
    __m512 acc[4][2][NA_GB_VNB];
    int kp, c, g;

#pragma GCC unroll 4
    for (g = 0; g < GP; g++)
#pragma GCC unroll 4
        for (c = 0; c < NB; c++) {
            acc[g][0][c] = _mm512_setzero_ps();
            acc[g][1][c] = _mm512_setzero_ps();
        }
    for (kp = 0; kp < j->npair; kp++) {
#pragma GCC unroll 4
        for (g = 0; g < GP; g++) {
            const uint32_t *pw = w + (size_t)kp * ps + (size_t)g * NA_GB_MR;
            __m512bh w0 = (__m512bh)_mm512_loadu_si512(pw);
            __m512bh w1 = (__m512bh)_mm512_loadu_si512(pw + 16);
            if (NB == 1) {                      /* one input: the stream's pace */
                NA_CPU_MV_PREFETCH_L2(pw);
                NA_CPU_MV_PREFETCH_L2(pw + 16);
            }
#pragma GCC unroll 4
            for (c = 0; c < NB; c++) {
                __m512bh xv = (__m512bh)_mm512_set1_epi32((int)xc[(size_t)c * j->npair + kp]);
                acc[g][0][c] = _mm512_dpbf16_ps(acc[g][0][c], w0, xv);
                acc[g][1][c] = _mm512_dpbf16_ps(acc[g][1][c], w1, xv);
            }
        }
    }
#pragma GCC unroll 4
    for (g = 0; g < GP; g++)
#pragma GCC unroll 4
        for (c = 0; c < NB; c++) {
            float *yc = j->io.y + (size_t)(c0 + c) * rows + (size_t)(pi + g) * NA_GB_MR;
            _mm512_storeu_ps(yc, acc[g][0][c]);
            _mm512_storeu_ps(yc + 16, acc[g][1][c]);
        }
}

/* Panels pi.. (gp: 1..4 with 1 or 2 inputs, 1..2 with 3 or 4) times inputs
 * c0.. (nb, 1..NA_GB_VNB): the tile with constants, at most 16
 * accumulators. */
static void na_gb_vtile_n(const na_gb_job_t *j, int pi, int gp, int c0, int nb)
{
    switch (gp * 10 + nb) {
    case 41: na_gb_vtile(j, pi, 4, c0, 1); break;
    case 42: na_gb_vtile(j, pi, 4, c0, 2); break;
    case 31: na_gb_vtile(j, pi, 3, c0, 1); break;
    case 32: na_gb_vtile(j, pi, 3, c0, 2); break;
    case 21: na_gb_vtile(j, pi, 2, c0, 1); break;
    case 22: na_gb_vtile(j, pi, 2, c0, 2); break;
    case 23: na_gb_vtile(j, pi, 2, c0, 3); break;
    case 24: na_gb_vtile(j, pi, 2, c0, 4); break;
    case 11: na_gb_vtile(j, pi, 1, c0, 1); break;
    case 12: na_gb_vtile(j, pi, 1, c0, 2); break;
    case 13: na_gb_vtile(j, pi, 1, c0, 3); break;
    default: na_gb_vtile(j, pi, 1, c0, 4); break;
    }
}

/* Pool job 2 of a small batch: task t's chunks of 4 panels (the last one
 * shorter), each run over the inputs NA_GB_VNB at a time (the panels stay
 * in cache); a chunk's panels are read together, so each input has 2 x 4
 * vdpbf16ps chains in flight. */
static void na_gb_mv_task(void *ctx, int t, int n_tasks)
{
    const na_gb_job_t *j = ctx;
    const int npanel = j->io.w->rows / NA_GB_MR, nchunk = (npanel + 3) / 4;
    int pi = 4 * (int)((long)nchunk * t / n_tasks);
    int hi = 4 * (int)((long)nchunk * (t + 1) / n_tasks);

    if (hi > npanel)
        hi = npanel;
    while (pi < hi) {
        int c0, g = hi - pi >= 4 ? 4 : hi - pi;
        for (c0 = 0; c0 < j->io.batch; c0 += NA_GB_VNB) {
            int nb = j->io.batch - c0 < NA_GB_VNB ? j->io.batch - c0 : NA_GB_VNB;
            if (g > 2 && nb > 2) {              /* at most 16 accumulators */
                na_gb_vtile_n(j, pi, 2, c0, nb);
                na_gb_vtile_n(j, pi + 2, g - 2, c0, nb);
            } else {
                na_gb_vtile_n(j, pi, g, c0, nb);
            }
        }
        pi += g;
    }
}

/* See kernels/cpu/cpu.h. */
int na_cpu_gemm_bf16(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                     int batch)
{
    const int npanel = (w->rows + NA_GB_MR - 1) / NA_GB_MR;
    const int n_tasks = na_cpu_gemm_tasks(k, npanel);
    na_gb_job_t j;
    size_t xwords;

    if (w->layout == NA_LAYOUT_BF16X32 && batch < NA_GB_VMAX) {
        j.io = na_cpu_gemm_io(y, x, w, batch, 1);
        j.npair = w->cols / 2;
        j.xb = (uint32_t *)na_cpu_scratch(k, (size_t)batch * j.npair);
        if (j.xb == NULL)
            return -1;
        j.wp = NULL;
        const int nchunk = (w->rows / NA_GB_MR + 3) / 4;
        na_cpu_gemm_run(k, na_gb_pack_x_task, na_gb_mv_task, &j, batch,
                        k->n_threads == 1 ? 1 : 4 * k->n_threads < nchunk ? 4 * k->n_threads
                                                                         : nchunk);
        return 0;
    }
    j.io = na_cpu_gemm_io(y, x, w, batch, NA_GB_NR);
    j.npair = (w->cols + 1) / 2;
    xwords = (size_t)j.io.ncols * j.npair;
    /* a panel per task, unless the weight was placed in panels */
    j.xb = (uint32_t *)na_cpu_scratch(k, xwords + (w->layout == NA_LAYOUT_BF16X32 ? 0 :
                                                   (size_t)n_tasks * j.npair * NA_GB_MR));
    if (j.xb == NULL)
        return -1;
    j.wp = j.xb + xwords;
    na_cpu_gemm_run(k, na_gb_pack_x_task, na_gb_mm_task, &j, j.io.ncols, n_tasks);
    return 0;
}

/* kernels/cpu/cpu_gemm_h16.c — y = W·x for F16 and BF16 weights at large
 * batches (prompt processing), bit-identical to the batch-1 row kernel of
 * kernels/cpu/cpu_matmul.c (na_cpu_dot_h16), so it serves batch_invariant
 * (every engine) too.
 *
 * The row kernel sums each output in 32 f32 lanes (lane l: the products of
 * elements 32m + l, m in order, one fma each), then blocks of 8 into lanes
 * 0-7, the tree (l0-7 + l8-15) + (l16-23 + l24-31), na_cpu_hsum, a scalar
 * fma tail. Here each output keeps those 32 lanes in registers (2 zmm, or
 * 4 ymm in the AVX2 copy) across the whole row, so every lane sees the same
 * fmas in the same order; the weights are converted in registers as the row
 * kernel converts them (F16C; bf16 << 16), read in place from the weight,
 * never copied. A row longer than NA_GH_KC is done in parts, the lanes kept
 * in memory between parts (exact: stored, not rounded).
 *
 * Blocking: each task takes rows [lo, hi) in panels of ~NA_GH_PANEL_BYTES of
 * f16/bf16 rows (in L2 after the first pass); each group of NA_GH_NB inputs
 * (a part of their rows in L1) runs over the whole panel, NA_GH_MR rows x
 * NA_GH_NB inputs per micro-tile.
 *
 * Compiled twice (kernels/CMakeLists.txt), called by cpu_matmul.c's copy of
 * the same ISA:
 *   x86-64-v4   na_cpu_gemm_h16_v4: 4 rows x 3 inputs, 24 zmm accumulators.
 *               BF16: a zmm load of 32 weights gives the even elements
 *               (<< 16) and the odd ones (& 0xffff0000) as two vectors, one
 *               op each; the inputs are packed once per call with each
 *               block of 32 in the same even/odd order, and the lanes are
 *               put back in order (one permute) before the tails.
 *   x86-64-v3   na_cpu_gemm_h16: 1 row x 3 inputs, 12 ymm accumulators,
 *               the inputs as the FMAs' memory operands. */
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cpu/cpu_panel.h"

/* Measured (1 thread, b=512, CPU-time GFLOP/s, load 12-19, f16 2048x8192 /
 * 8192x2048): panels 256 KiB, parts 2048: 56-67 / 83-98; 512 KiB, 4096:
 * 76-78 / 85-92; 768 KiB, 4096: 80-86 / 85-91; parts of 512 or 1024
 * (lanes stored more often) slower: 44-69 / 72-89. */
#ifndef NA_GH_PANEL_BYTES
#define NA_GH_PANEL_BYTES (768u * 1024u)   /* f16/bf16 weight rows per panel, in L2 */
#endif
#ifndef NA_GH_KC
#define NA_GH_KC 4096                      /* elements of a row per part (a multiple of 32) */
#endif
#define NA_GH_MAXROWS 64                   /* rows per panel at most */
#define NA_GH_NB 3                         /* inputs per micro-tile */
#if defined(__AVX512F__)
#define NA_GH_MR 4                         /* rows per micro-tile */
#define NA_GH_ACC 24                       /* vectors of saved lanes per micro-tile */
typedef __m512 na_gh_vec;
#else
#define NA_GH_MR 1
#define NA_GH_ACC 12
typedef __m256 na_gh_vec;
#endif

typedef struct {
    float             *y;       /* (batch, rows) */
    const float       *x;       /* (batch, cols): the inputs, or for BF16 (v4) xp */
    const float       *xin;     /* the caller's inputs */
    float             *xp;      /* BF16 (v4): the inputs, each block of 32 even/odd */
    const na_tensor_t *w;
    int                batch;
    int                f16;     /* F16 (else BF16) */
    int                pr;      /* rows per panel (a multiple of NA_GH_MR) */
} na_gh_job_t;

#if defined(__AVX512F__)
/* NR rows (ws elements apart) x NB inputs (ld apart) over elements [i0, i1)
 * of rows of n (NR <= 4, NB <= 3, F16 constants after inlining): the panel
 * kernel of kernels/cpu/cpu_panel.h, which says how a row is done in parts
 * (acc) and how BF16 reads its 32-blocks in even/odd order (x packed the same
 * way). */
NA_INLINE void na_gh_tile(const uint16_t *w, size_t ws, int NR, const float *x, size_t ld,
                          int n, int i0, int i1, int NB, __m512 *acc, float *out, size_t os,
                          int F16)
{
    na_cpu_px_tile(w, ws, NR, x, ld, n, i0, i1, NB, acc, out, os,
                   F16 ? NA_CPU_PX_F16 : NA_CPU_PX_BF16);
}
#else
/* The AVX2 copy: one row x NB inputs (NB <= 3), 4 ymm lanes per output as
 * the row kernel's a0..a3; otherwise as above (natural order for both
 * dtypes: the conversion is vpmovzxwd + shift, no packed inputs). */
NA_INLINE void na_gh_tile(const uint16_t *w, size_t ws, int NR, const float *x, size_t ld,
                          int n, int i0, int i1, int NB, __m256 *acc, float *out, size_t os,
                          int F16)
{
    __m256 a[3][4];
    float sum[3];
    int i = i0, b, q;

    (void)ws;
    (void)NR;
#pragma GCC unroll 3
    for (b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (q = 0; q < 4; q++)
            a[b][q] = i0 > 0 ? acc[b * 4 + q] : _mm256_setzero_ps();
    for (; i + 32 <= i1; i += 32) {
#pragma GCC unroll 2
        for (q = 0; q < 4; q += 2) {
            __m256 u0 = F16 ? na_cpu_load_f16(w + i + 8 * q) : na_cpu_load_bf16(w + i + 8 * q);
            __m256 u1 = F16 ? na_cpu_load_f16(w + i + 8 * q + 8)
                            : na_cpu_load_bf16(w + i + 8 * q + 8);
#pragma GCC unroll 3
            for (b = 0; b < NB; b++) {
                const float *xb = x + (size_t)b * ld + i + 8 * q;
                a[b][q] = _mm256_fmadd_ps(u0, _mm256_loadu_ps(xb), a[b][q]);
                a[b][q + 1] = _mm256_fmadd_ps(u1, _mm256_loadu_ps(xb + 8), a[b][q + 1]);
            }
        }
    }
    if (i1 < n) {
#pragma GCC unroll 3
        for (b = 0; b < NB; b++)
#pragma GCC unroll 4
            for (q = 0; q < 4; q++)
                acc[b * 4 + q] = a[b][q];
        return;
    }
#define NA_W8(k) (F16 ? na_cpu_load_f16(w + (k)) : na_cpu_load_bf16(w + (k)))
    NA_CPU_ROW_REDUCE(NA_W8, a, sum, x, ld, i, n, NB, b);
#undef NA_W8
    for (; i < n; i++) {
        float wv = F16 ? na_f16_to_f32(w[i]) : na_bf16_to_f32(w[i]);
#pragma GCC unroll 3
        for (b = 0; b < NB; b++)
            sum[b] = fmaf(wv, x[(size_t)b * ld + i], sum[b]);
    }
#pragma GCC unroll 3
    for (b = 0; b < NB; b++)
        out[(size_t)b * os] = sum[b];
}
#endif

/* na_gh_tile with constant NR (1..NA_GH_MR), NB (1..3) and dtype. */
static void na_gh_tile_any(const uint16_t *w, size_t ws, int NR, const float *x, size_t ld,
                           int n, int i0, int i1, int NB, na_gh_vec *acc, float *out, size_t os,
                           int f16)
{
#define NA_GT(R, B)                                                                  \
    do {                                                                             \
        if (f16)                                                                     \
            na_gh_tile(w, ws, R, x, ld, n, i0, i1, B, acc, out, os, 1);              \
        else                                                                         \
            na_gh_tile(w, ws, R, x, ld, n, i0, i1, B, acc, out, os, 0);              \
    } while (0)
    switch (NR * 4 + NB) {
#if NA_GH_MR == 4
    case 4 * 4 + 3: NA_GT(4, 3); break;
    case 4 * 4 + 2: NA_GT(4, 2); break;
    case 4 * 4 + 1: NA_GT(4, 1); break;
    case 3 * 4 + 3: NA_GT(3, 3); break;
    case 3 * 4 + 2: NA_GT(3, 2); break;
    case 3 * 4 + 1: NA_GT(3, 1); break;
    case 2 * 4 + 3: NA_GT(2, 3); break;
    case 2 * 4 + 2: NA_GT(2, 2); break;
    case 2 * 4 + 1: NA_GT(2, 1); break;
#endif
    case 1 * 4 + 3: NA_GT(1, 3); break;
    case 1 * 4 + 2: NA_GT(1, 2); break;
    default:        NA_GT(1, 1); break;
    }
#undef NA_GT
}

#if defined(__AVX512F__)
/* Pool job 1 (BF16): inputs [lo, hi) into xp, each whole block of 32 as its
 * 16 even elements then its 16 odd ones, the tail as it is. */
static void na_gh_pack_x_task(void *ctx, int t, int n_tasks)
{
    const na_gh_job_t *j = ctx;
    const int cols = j->w->cols;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14,
                                         16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15,
                                         17, 19, 21, 23, 25, 27, 29, 31);
    int c, i, lo = (int)((long)j->batch * t / n_tasks), hi = (int)((long)j->batch * (t + 1) / n_tasks);

    for (c = lo; c < hi; c++) {
        const float *xc = j->xin + (size_t)c * cols;
        float *o = j->xp + (size_t)c * cols;
        for (i = 0; i + 32 <= cols; i += 32) {
            __m512 v0 = _mm512_loadu_ps(xc + i), v1 = _mm512_loadu_ps(xc + i + 16);
            _mm512_storeu_ps(o + i, _mm512_permutex2var_ps(v0, ev, v1));
            _mm512_storeu_ps(o + i + 16, _mm512_permutex2var_ps(v0, od, v1));
        }
        for (; i < cols; i++)
            o[i] = xc[i];
    }
}
#endif

/* Pool job 2: task t's rows, panel by panel; each group of NA_GH_NB inputs
 * over the whole panel, NA_GH_KC of the row at a time. */
static void na_gh_mm_task(void *ctx, int t, int n_tasks)
{
    const na_gh_job_t *j = ctx;
    const int rows = j->w->rows, cols = j->w->cols, nq = (rows + NA_GH_MR - 1) / NA_GH_MR;
    const uint16_t *wd = j->w->data;
    na_gh_vec acc[NA_GH_MAXROWS / NA_GH_MR][NA_GH_ACC];
    int lo = NA_GH_MR * (int)((long)nq * t / n_tasks);
    int hi = NA_GH_MR * (int)((long)nq * (t + 1) / n_tasks);
    int p0, np, b, k0, k1, r;

    if (hi > rows)
        hi = rows;
    for (p0 = lo; p0 < hi; p0 += np) {
        np = hi - p0 < j->pr ? hi - p0 : j->pr;
        for (b = 0; b < j->batch; b += NA_GH_NB) {
            const float *xb = j->x + (size_t)b * cols;
            float *yb = j->y + (size_t)b * rows + p0;
            int nb = j->batch - b < NA_GH_NB ? j->batch - b : NA_GH_NB;
            for (k0 = 0; k0 < cols; k0 = k1) {
                k1 = cols - k0 <= NA_GH_KC + 32 ? cols : k0 + NA_GH_KC;
                for (r = 0; r < np; r += NA_GH_MR)
                    na_gh_tile_any(wd + (size_t)(p0 + r) * cols, (size_t)cols,
                                   np - r < NA_GH_MR ? np - r : NA_GH_MR, xb, (size_t)cols,
                                   cols, k0, k1, nb, acc[r / NA_GH_MR], yb + r, (size_t)rows,
                                   j->f16);
            }
        }
    }
}

/* See kernels/cpu/cpu.h. */
int na_cpu_gemm_h16(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch)
{
    na_cpu_state_t *s = k->priv;
    const int rows = w->rows, cols = w->cols;
    int pr, nq = (rows + NA_GH_MR - 1) / NA_GH_MR, n_tasks;
    na_gh_job_t j;

    if ((w->dtype != NA_DTYPE_F16 && w->dtype != NA_DTYPE_BF16) || cols <= 0)
        return -1;
    pr = (int)(NA_GH_PANEL_BYTES / (2u * (size_t)cols)) / NA_GH_MR * NA_GH_MR;
    pr = pr < NA_GH_MR ? NA_GH_MR : pr > NA_GH_MAXROWS ? NA_GH_MAXROWS : pr;
    n_tasks = k->n_threads == 1 ? 1 : 4 * k->n_threads;
    if (n_tasks > nq)
        n_tasks = nq;
    j.y = y;
    j.x = x;
    j.xin = x;
    j.xp = NULL;
    j.w = w;
    j.batch = batch;
    j.f16 = w->dtype == NA_DTYPE_F16;
    j.pr = pr;
#if defined(__AVX512F__)
    if (!j.f16) {
        j.xp = na_cpu_scratch(k, (size_t)batch * cols);
        if (j.xp == NULL)
            return -1;
        j.x = j.xp;
        na_cpu_gemm_run(k, na_gh_pack_x_task, na_gh_mm_task, &j, batch, n_tasks);
        return 0;
    }
#endif
    na_cpu_pool_run(s->pool, na_gh_mm_task, &j, n_tasks);
    return 0;
}

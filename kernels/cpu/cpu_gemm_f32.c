/* kernels/cpu/cpu_gemm_f32.c — y = W·x for F32 and F16 weights at large
 * batches with AVX-512F (compiled into the x86-64-v4 object, picked at run
 * time by kernels/cpu/cpu_backend.c; the x86-64-v3 baseline keeps
 * cpu_matmul.c's cblas_sgemm paths).
 *
 * The math is plain f32: each weight (f16 converted exactly) times each
 * input, summed in f32 along the row in order; only the grouping of the
 * additions differs from kernels/ref (one accumulator per output).
 *
 * Layout, as in cpu_gemm_bf16.c: a weight panel of NA_GF_MR rows is packed
 * as (k, row) floats, so one zmm holds element k of 16 rows; the micro-kernel
 * multiplies NA_GF_MR rows by NA_GF_NR inputs, each input element broadcast
 * from x, and stores 16 consecutive rows of y per vector: no horizontal sums.
 *
 * Why not OpenBLAS: its x86-64-v3 (Haswell) kernels, which it runs where
 * OPENBLAS_CORETYPE=Haswell is set (this project's machines), reach 123-127
 * GFLOP/s on 768x768, 2048x768 and 768x2048 at batch 516 (1 thread, best of
 * 5); this kernel 209-228, its AVX-512 (Cooperlake) kernels 220-241. */
#include <string.h>

#include "kernels/cpu/cpu.h"

#define NA_GF_MR 32         /* weight rows per panel: 2 zmm */
#define NA_GF_NR 12         /* inputs per micro-tile: 24 accumulators */
#define NA_GF_KC 256        /* k per pass: 32 KiB of panel + 12 KiB of inputs in L1 */

typedef struct {
    float             *y;       /* (batch, rows) */
    const float       *x;       /* (batch, cols) */
    const na_tensor_t *w;
    int                batch;
    float             *xtail;   /* the last batch % NR inputs, zero-padded to NR */
    float             *wp;      /* per task: one packed panel (cols, NA_GF_MR) */
} na_gf_job_t;

/* Rows [r0, r0 + NA_GF_MR) of w (past the end: zero) into the panel p. */
static void na_gf_pack_w(const na_tensor_t *w, int r0, float *p)
{
    const int cols = w->cols;
    int r, c;

    for (r = 0; r < NA_GF_MR; r++) {
        if (r0 + r >= w->rows) {
            for (c = 0; c < cols; c++)
                p[(size_t)c * NA_GF_MR + r] = 0.0f;
            continue;
        }
        if (w->dtype == NA_DTYPE_F32) {
            const float *row = (const float *)w->data + (size_t)(r0 + r) * cols;
            for (c = 0; c < cols; c++)
                p[(size_t)c * NA_GF_MR + r] = row[c];
        } else {                                /* F16 */
            const uint16_t *row = (const uint16_t *)w->data + (size_t)(r0 + r) * cols;
            float tmp[16];
            int i;
            for (c = 0; c + 16 <= cols; c += 16) {
                _mm512_storeu_ps(tmp, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + c))));
                for (i = 0; i < 16; i++)
                    p[(size_t)(c + i) * NA_GF_MR + r] = tmp[i];
            }
            for (; c < cols; c++)
                p[(size_t)c * NA_GF_MR + r] = na_f16_to_f32(row[c]);
        }
    }
}

/* y rows [r0, r0 + 32) x inputs [c0, c0 + NR) from panel p over k in
 * [k0, k1), added to what earlier passes left in y (k0 > 0); xc: those
 * inputs' rows (cols apart), n of them real. */
static inline __attribute__((always_inline)) void
na_gf_tile(const na_gf_job_t *j, const float *p, int r0, int c0, const float *xc, int n,
           int k0, int k1)
{
    const int rows = j->w->rows, cols = j->w->cols;
    const __mmask16 m0 = rows - r0 >= 16 ? 0xffff : (__mmask16)((1u << (rows - r0)) - 1u);
    const __mmask16 m1 = rows - r0 >= 32 ? 0xffff : rows - r0 <= 16 ? 0
                       : (__mmask16)((1u << (rows - r0 - 16)) - 1u);
    __m512 acc[2][NA_GF_NR];
    int k, c;

#pragma GCC unroll 12
    for (c = 0; c < NA_GF_NR; c++) {
        const float *yc = j->y + (size_t)(c0 + c) * rows + r0;
        if (k0 > 0 && c < n) {
            acc[0][c] = _mm512_maskz_loadu_ps(m0, yc);
            acc[1][c] = _mm512_maskz_loadu_ps(m1, yc + 16);
        } else {
            acc[0][c] = _mm512_setzero_ps();
            acc[1][c] = _mm512_setzero_ps();
        }
    }
    for (k = k0; k < k1; k++) {
        __m512 w0 = _mm512_loadu_ps(p + (size_t)k * NA_GF_MR);
        __m512 w1 = _mm512_loadu_ps(p + (size_t)k * NA_GF_MR + 16);
#pragma GCC unroll 12
        for (c = 0; c < NA_GF_NR; c++) {
            __m512 xv = _mm512_set1_ps(xc[(size_t)c * cols + k]);
            acc[0][c] = _mm512_fmadd_ps(w0, xv, acc[0][c]);
            acc[1][c] = _mm512_fmadd_ps(w1, xv, acc[1][c]);
        }
    }
#pragma GCC unroll 12
    for (c = 0; c < NA_GF_NR; c++) {
        float *yc = j->y + (size_t)(c0 + c) * rows + r0;
        if (c >= n)
            break;
        _mm512_mask_storeu_ps(yc, m0, acc[0][c]);
        _mm512_mask_storeu_ps(yc + 16, m1, acc[1][c]);
    }
}

/* Pool task t: its row panels, each packed into the task's panel and
 * multiplied by every input, NA_GF_KC of k at a time. */
static void na_gf_mm_task(void *ctx, int t, int n_tasks)
{
    const na_gf_job_t *j = ctx;
    const int npanel = (j->w->rows + NA_GF_MR - 1) / NA_GF_MR, cols = j->w->cols;
    int pi, c0, k0, lo = (int)((long)npanel * t / n_tasks), hi = (int)((long)npanel * (t + 1) / n_tasks);
    float *p = j->wp + (size_t)t * cols * NA_GF_MR;

    for (pi = lo; pi < hi; pi++) {
        na_gf_pack_w(j->w, pi * NA_GF_MR, p);
        for (k0 = 0; k0 < cols; k0 += NA_GF_KC) {
            int k1 = cols - k0 < NA_GF_KC ? cols : k0 + NA_GF_KC;
            for (c0 = 0; c0 + NA_GF_NR <= j->batch; c0 += NA_GF_NR)
                na_gf_tile(j, p, pi * NA_GF_MR, c0, j->x + (size_t)c0 * cols, NA_GF_NR, k0, k1);
            if (c0 < j->batch)
                na_gf_tile(j, p, pi * NA_GF_MR, c0, j->xtail, j->batch - c0, k0, k1);
        }
    }
}

/* See kernels/cpu/cpu.h. */
int na_cpu_gemm_f32(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch)
{
    na_cpu_state_t *s = k->priv;
    const int npanel = (w->rows + NA_GF_MR - 1) / NA_GF_MR, cols = w->cols;
    const int left = batch % NA_GF_NR;
    const int n_tasks = na_cpu_gemm_tasks(k, npanel);
    na_gf_job_t j;

    if (w->dtype != NA_DTYPE_F32 && w->dtype != NA_DTYPE_F16)
        return -1;
    j.y = y;
    j.x = x;
    j.w = w;
    j.batch = batch;
    j.xtail = na_cpu_scratch(k, (size_t)NA_GF_NR * cols + (size_t)n_tasks * cols * NA_GF_MR);
    if (j.xtail == NULL)
        return -1;
    j.wp = j.xtail + (size_t)NA_GF_NR * cols;
    memset(j.xtail, 0, sizeof(float) * (size_t)NA_GF_NR * cols);
    if (left > 0)
        memcpy(j.xtail, x + (size_t)(batch - left) * cols, sizeof(float) * (size_t)left * cols);
    na_cpu_pool_run(s->pool, na_gf_mm_task, &j, n_tasks);
    return 0;
}

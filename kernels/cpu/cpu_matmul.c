/* kernels/cpu/cpu_matmul.c — y = W·x for F32, F16, BF16 and Q8_0 weights.
 *
 * Weights stay in their file dtype (usually a read-only mmap of the model
 * file) and are dequantised inside the kernel, per row or per tile of rows,
 * never at load: memory holds the smaller file dtype, and decode (batch 1)
 * is bandwidth-bound, so reading 2 or ~1.06 bytes per weight instead of 4 is
 * what makes it fast. The paths:
 *
 *   batch 1, any dtype    rows split across the pool; one AVX2 dot product
 *                         per row that converts 8 weights at a time in
 *                         registers (F16C for f16, shift for bf16, sign-
 *                         extend + scale for Q8_0).
 *   batch > 1, small      (F32: batch < NA_CPU_F32_SGEMM_MIN_BATCH; other
 *                         dtypes: batch < NA_CPU_TILE_MIN_BATCH) rows split
 *                         across the pool; each row is read once (other
 *                         dtypes: dequantised once into an f32 row buffer)
 *                         and dotted with NA_CPU_MM_NB inputs at a time, in
 *                         the batch-1 summation order: every output is
 *                         bit-identical to the same row computed at batch 1.
 *   batch > 1, F32 large  one cblas_sgemm (OpenBLAS, n_threads threads).
 *   batch > 1, large      a tile of rows is dequantised into f32 scratch by
 *                         the pool, then multiplied by cblas_sgemm; repeat.
 *   k->batch_invariant    the "small" path at every batch size, so a row's
 *                         result never depends on what is batched beside it
 *                         (seeded sampling reproduces across batch sizes).
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

#define NA_CPU_TILE_MIN_BATCH 20
#define NA_CPU_F32_SGEMM_MIN_BATCH 16
#define NA_CPU_TILE_FLOATS    (512u * 1024u)   /* 2 MiB of dequantised rows */
#define NA_CPU_PAR_MIN_WORK   (1u << 17)       /* weights per matmul worth waking the pool */

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

#define NA_INLINE static inline __attribute__((always_inline))

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
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_loadu_ps(w + i);
#pragma GCC unroll 4
        for (b = 0; b < NB; b++)
            a[b][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (size_t)b * ld + i), a[b][0]);
    }
#pragma GCC unroll 4
    for (b = 0; b < NB; b++)
        sum[b] = na_cpu_hsum(_mm256_add_ps(_mm256_add_ps(a[b][0], a[b][1]),
                                           _mm256_add_ps(a[b][2], a[b][3])));
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
    case NA_DTYPE_BF16: {
        const uint16_t *w = (const uint16_t *)row;
        int f16 = dt == NA_DTYPE_F16;
#define NA_LD(p) (f16 ? na_cpu_load_f16(p) : na_cpu_load_bf16(p))
        for (; i + 32 <= n; i += 32) {
            a0 = _mm256_fmadd_ps(NA_LD(w + i),      _mm256_loadu_ps(x + i),      a0);
            a1 = _mm256_fmadd_ps(NA_LD(w + i + 8),  _mm256_loadu_ps(x + i + 8),  a1);
            a2 = _mm256_fmadd_ps(NA_LD(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
            a3 = _mm256_fmadd_ps(NA_LD(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(NA_LD(w + i), _mm256_loadu_ps(x + i), a0);
#undef NA_LD
        sum = na_cpu_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; i < n; i++)
            sum = fmaf(f16 ? na_f16_to_f32(w[i]) : na_bf16_to_f32(w[i]), x[i], sum);
        return sum;
    }
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
        return na_cpu_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
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
        int f16 = dt == NA_DTYPE_F16;
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
    float *rb = j->buf ? j->buf + (size_t)t * cols : NULL;

    na_cpu_task_rows(j, t, n_tasks, &lo, &hi);
    for (r = lo; r < hi; r++) {
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

/* Tile: dequantise rows [lo, hi) of the tile into buf. */
static void na_cpu_mm_tile_task(void *ctx, int t, int n_tasks)
{
    const na_cpu_mm_job_t *j = ctx;
    int r, lo, hi;
    na_cpu_task_rows(j, t, n_tasks, &lo, &hi);
    for (r = lo; r < hi; r++)
        na_cpu_dequant_row(j->w->dtype, na_cpu_row(j->w, r),
                           j->buf + (size_t)(r - j->r0) * j->w->cols, j->w->cols);
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
    na_cpu_mm_job_t j = { y, x, w, batch, 0, w->rows, NULL };
    int rows = w->rows, cols = w->cols, tasks;

    if (batch <= 0 || rows <= 0)
        return;
    if (batch == 1) {
        na_cpu_pool_run(s->pool, na_cpu_mm_vec_task, &j, na_cpu_mm_tasks(k, rows, cols, 1));
        return;
    }
    if (k->batch_invariant)
        goto rows;                      /* the row kernel: batch-1 summation order */
    if (w->dtype == NA_DTYPE_F32 && batch >= NA_CPU_F32_SGEMM_MIN_BATCH) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, rows, cols,
                    1.0f, x, cols, (const float *)w->data, cols, 0.0f, y, rows);
        return;
    }
    if (batch >= NA_CPU_TILE_MIN_BATCH) {
        int tile = (int)(NA_CPU_TILE_FLOATS / (size_t)cols);
        if (tile < 8)
            tile = 8;
        if (tile > rows)
            tile = rows;
        j.buf = na_cpu_scratch(k, (size_t)tile * cols);
        if (j.buf != NULL) {
            int r0;
            for (r0 = 0; r0 < rows; r0 += tile) {
                int n = rows - r0 < tile ? rows - r0 : tile;
                j.r0 = r0;
                j.r1 = r0 + n;
                na_cpu_pool_run(s->pool, na_cpu_mm_tile_task, &j, na_cpu_mm_tasks(k, n, cols, 1));
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, n, cols,
                            1.0f, x, cols, j.buf, cols, 0.0f, y + r0, rows);
            }
            return;
        }
        /* no scratch: fall through to the row kernel without buffers */
    }
rows:
    tasks = na_cpu_mm_tasks(k, rows, cols, batch);
    j.r0 = 0;
    j.r1 = rows;
    if (w->dtype != NA_DTYPE_F32)
        j.buf = na_cpu_scratch(k, (size_t)tasks * cols);
    na_cpu_pool_run(s->pool, na_cpu_mm_rows_task, &j, tasks);
}

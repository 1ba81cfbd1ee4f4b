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
 *   batch > 1, F32        one cblas_sgemm (OpenBLAS, n_threads threads).
 *   batch > 1, small      (batch < NA_CPU_TILE_MIN_BATCH) rows split across the
 *                         pool; each row is dequantised once into an f32 row
 *                         buffer and dotted with 4 inputs at a time.
 *   batch > 1, large      a tile of rows is dequantised into f32 scratch by
 *                         the pool, then multiplied by cblas_sgemm; repeat.
 *
 * The threshold was measured on the 2-core AMD EPYC (Zen 4) machine, 2048x2048
 * F16 and Q8_0 weights, 1 thread, best of 15 (GFLOP/s, row kernel / tile+sgemm):
 * batch 3: 25 / 7, batch 8: 36 / 18, batch 17: 35 / 31, batch 24: 37 / 41,
 * batch 32: 39 / 46, batch 64: 35 / 45 (a busy shared machine: the shape of
 * the curve, not the figures, is the point). Below ~20 the fused row kernel
 * wins, above it sgemm's blocking does. All sums are f32. Q8_0 needs cols % 32 == 0. */
#include <stdlib.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"

#define NA_CPU_TILE_MIN_BATCH 20
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

/* Dot product of one weight row (any dtype) with x[n]. */
static float na_cpu_dot_row(na_dtype_t dt, const uint8_t *row, const float *x, int n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    float sum;
    int i = 0;

    switch (dt) {
    case NA_DTYPE_F32: {
        const float *w = (const float *)row;
        for (; i + 32 <= n; i += 32) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i),      _mm256_loadu_ps(x + i),      a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8),  _mm256_loadu_ps(x + i + 8),  a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        sum = na_cpu_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; i < n; i++)
            sum += w[i] * x[i];
        return sum;
    }
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
            sum += (f16 ? na_f16_to_f32(w[i]) : na_bf16_to_f32(w[i])) * x[i];
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

/* Four dot products of w[n] with x0..x3 (rows of stride ld). */
static void na_cpu_dot4_f32(const float *w, const float *x, size_t ld, int n, float out[4])
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int i, j;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_loadu_ps(w + i);
        a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + ld + i), a1);
        a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 2 * ld + i), a2);
        a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + 3 * ld + i), a3);
    }
    out[0] = na_cpu_hsum(a0);
    out[1] = na_cpu_hsum(a1);
    out[2] = na_cpu_hsum(a2);
    out[3] = na_cpu_hsum(a3);
    for (; i < n; i++)
        for (j = 0; j < 4; j++)
            out[j] += w[i] * x[(size_t)j * ld + i];
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

/* Small batch: dequantise each row once, dot it with every input. Without a
 * buffer (buf NULL), dot the quantised row with each input instead. */
static void na_cpu_mm_rows_task(void *ctx, int t, int n_tasks)
{
    const na_cpu_mm_job_t *j = ctx;
    int cols = j->w->cols, rows = j->w->rows;
    int r, b, lo, hi;
    float *rb = j->buf ? j->buf + (size_t)t * cols : NULL;

    na_cpu_task_rows(j, t, n_tasks, &lo, &hi);
    for (r = lo; r < hi; r++) {
        const uint8_t *row = na_cpu_row(j->w, r);
        if (rb == NULL) {
            for (b = 0; b < j->batch; b++)
                j->y[(size_t)b * rows + r] =
                    na_cpu_dot_row(j->w->dtype, row, j->x + (size_t)b * cols, cols);
            continue;
        }
        na_cpu_dequant_row(j->w->dtype, row, rb, cols);
        for (b = 0; b + 4 <= j->batch; b += 4) {
            float o[4];
            na_cpu_dot4_f32(rb, j->x + (size_t)b * cols, (size_t)cols, cols, o);
            j->y[(size_t)b * rows + r]       = o[0];
            j->y[(size_t)(b + 1) * rows + r] = o[1];
            j->y[(size_t)(b + 2) * rows + r] = o[2];
            j->y[(size_t)(b + 3) * rows + r] = o[3];
        }
        for (; b < j->batch; b++)
            j->y[(size_t)b * rows + r] =
                na_cpu_dot_row(NA_DTYPE_F32, (const uint8_t *)rb, j->x + (size_t)b * cols, cols);
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
    if (w->dtype == NA_DTYPE_F32) {
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
    tasks = na_cpu_mm_tasks(k, rows, cols, batch);
    j.r0 = 0;
    j.r1 = rows;
    j.buf = na_cpu_scratch(k, (size_t)tasks * cols);
    na_cpu_pool_run(s->pool, na_cpu_mm_rows_task, &j, tasks);
}

/* kernels/cpu/cpu.h — internals of the cpu backend: its private state, the
 * thread pool it owns, and the AVX2/FMA/F16C helpers its files share. */
#ifndef NA_KERNELS_CPU_H
#define NA_KERNELS_CPU_H

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/host/host.h"
#include "kernels/kernels.h"

/* ---- thread pool (kernels/cpu/cpu_pool.c) --------------------------------
 * n_threads - 1 persistent workers plus the calling thread. A job is a
 * function run for task = 0..n_tasks-1; tasks are claimed dynamically. */
typedef struct na_cpu_pool na_cpu_pool_t;
typedef void (*na_cpu_task_fn)(void *ctx, int task, int n_tasks);

/* Start n_threads - 1 workers (none for 1). NA_ERR_NOMEM / NA_ERR_INTERNAL
 * (pthread_create failed) with a message. */
na_status_t na_cpu_pool_create(int n_threads, na_cpu_pool_t **pool_p);
/* Stop and join the workers, free the pool. NULL is ignored. */
void na_cpu_pool_destroy(na_cpu_pool_t *pool);
/* Run fn(ctx, task, n_tasks) for every task, the caller taking part; returns
 * when all tasks are done. Cannot fail. Not re-entrant. */
void na_cpu_pool_run(na_cpu_pool_t *pool, na_cpu_task_fn fn, void *ctx, int n_tasks);
/* No job is coming for a while: workers polling for one sleep now instead of
 * spinning out NA_CPU_POOL_SPIN (the next na_cpu_pool_run wakes them). */
void na_cpu_pool_rest(na_cpu_pool_t *pool);

/* ---- large-batch GEMMs in the weight type --------------------------------
 * y (batch, rows) = W x for large batches (cpu_matmul.c picks them: Q8_0 from
 * gemm_q8_min_batch, BF16 from NA_CPU_GEMM_BF16_MIN_BATCH), chosen at
 * create time from CPUID (kernels/cpu/cpu_backend.c). Each returns 0, or -1
 * (nothing written) when the backend's scratch cannot be grown: the caller
 * then takes the dequantise + sgemm path.
 *
 * na_cpu_gemm_q8 (kernels/cpu/cpu_gemm_q8.c, compiled twice): Q8_0 weights
 * times the inputs in Q8 blocks (kernels/ref/ref.h), bit-identical to the
 * batch-1 and small-batch kernels of cpu_matmul.c (the same int32 block sums,
 * the same f32 accumulation order), so the batch size never changes a
 * result. The baseline copy uses AVX2 maddubs, the _vnni copy AVX512-VNNI.
 * na_cpu_gemm_bf16 (kernels/cpu/cpu_gemm_bf16.c): BF16 weights times the
 * inputs rounded to bf16 with AVX512-BF16 (the math: na_ref_matmul_xbf16).
 * na_cpu_gemm_f32 (kernels/cpu/cpu_gemm_f32.c, x86-64-v4 only): F32 and F16
 * weights in f32 with AVX-512F, where cpu_matmul.c would call cblas_sgemm.
 * The AVX-512 extensions are not part of x86-64-v4: their copies get their
 * own flags (kernels/CMakeLists.txt) and their own CPUID checks. */

/* na_cpu_gemm_bf16 from this batch on for a row-major bf16 weight without
 * batch_invariant: it is faster from batch 8 (768x768 and 2048x768, 1
 * thread, best of 100, GFLOP/s row kernel / GEMM: b=6 66 / 65, b=8 79 / 84,
 * b=12 85 / 129), but its bf16 inputs would break the bit-identity of
 * batches below 20 with batch 1 (cpu_matmul.c). A weight placed as
 * NA_LAYOUT_BF16X32 takes cpu_gemm_bf16.c at every batch instead. */
#define NA_CPU_GEMM_BF16_MIN_BATCH 20
/* na_cpu_gemm_f32 from this batch on: its panel packing (a transposing copy
 * of the weight per call) is paid back from ~64 inputs (1 thread, best of
 * 0.3 s, GFLOP/s GEMM / OpenBLAS Haswell kernels; f32 768x768: b=32 100 /
 * 105, b=64 139 / 120, b=512 219 / 130; 4096x4096: b=64 98 / 100, b=128 145
 * / 113; f16 likewise). */
#define NA_CPU_GEMM_F32_MIN_BATCH 64
/* Always inlined: the kernels' helpers with constant arguments (tile sizes,
 * types) that the compiler must see as constants. */
#define NA_INLINE static inline __attribute__((always_inline))

/* A weight stream read front to back at batch 1 asks for the line
 * NA_CPU_MV_PF_L2 bytes ahead into L2 (T1): the F16 / BF16 rows of
 * cpu_matmul.c (where the measurements are) and the one-input pass over
 * the BF16 panels (cpu_gemm_bf16.c). */
#ifndef NA_CPU_MV_PF_L2
#define NA_CPU_MV_PF_L2 6144
#endif
#define NA_CPU_MV_PREFETCH_L2(p) \
    _mm_prefetch((const char *)(p) + NA_CPU_MV_PF_L2, _MM_HINT_T1)

/* Pool tasks for a GEMM over n_panels row panels: a few per thread so
 * uneven cores balance, 1 on one thread, never more than the panels. */
static inline int na_cpu_gemm_tasks(const na_kernels_t *k, int n_panels)
{
    int n = k->n_threads == 1 ? 1 : 4 * k->n_threads;
    return n < n_panels ? n : n_panels;
}
/* What the pool jobs of the packing GEMMs (q8, q4, bf16) share: the call's
 * arguments, and its inputs padded to whole micro-tiles (ncols = batch
 * rounded up to rn inputs; the padding inputs count as zero). */
typedef struct {
    float             *y;       /* (batch, rows) */
    const float       *x;       /* (batch, cols) */
    const na_tensor_t *w;
    int                batch;
    int                ncols;   /* batch rounded up to the micro-tile's inputs */
} na_cpu_gemm_io_t;
static inline na_cpu_gemm_io_t na_cpu_gemm_io(float *y, const float *x, const na_tensor_t *w,
                                              int batch, int rn)
{
    na_cpu_gemm_io_t io = { y, x, w, batch, (batch + rn - 1) / rn * rn };
    return io;
}
/* Input c < io->ncols: its row of x, NULL for a padding input. */
static inline const float *na_cpu_gemm_input(const na_cpu_gemm_io_t *io, int c)
{
    return c < io->batch ? io->x + (size_t)c * (size_t)io->w->cols : NULL;
}
/* Bytes of packed weight rows per chunk and of packed inputs per pass of the
 * quantised GEMMs (both in L2). Q8_0, 1B shape, b=512, 1 thread, CPU-time
 * GFLOP/s at load 20 (weight / input KiB): 2048x8192 128/256 80, 256/128 97,
 * 512/128 98; 8192x2048 128-129 for each (at 8192 columns a 128 KiB chunk
 * held 3 rows, so every 3 rows read all the packed inputs again). */
#define NA_CPU_GEMM_W_CHUNK (256u * 1024u)
#define NA_CPU_GEMM_X_CHUNK (128u * 1024u)
/* The blocking of the quantised GEMMs (cpu_gemm_q8.c, cpu_gemm_q4.c) over
 * ntile row tiles of rm weight rows: *mc weight rows packed at a time (row_b
 * packed bytes each, about NA_CPU_GEMM_W_CHUNK of them), *nc inputs at a time
 * (x_b packed bytes each, about NA_CPU_GEMM_X_CHUNK of them), whole tiles (rm
 * rows, rn inputs) of at least one, and a chunk no larger than a task's rows.
 * Returns the tasks. */
static inline int na_cpu_gemm_blocks(const na_kernels_t *k, int ntile, int rm, int rn,
                                     size_t row_b, size_t x_b, int *mc, int *nc)
{
    int n_tasks = na_cpu_gemm_tasks(k, ntile);
    *mc = (int)(NA_CPU_GEMM_W_CHUNK / row_b) / rm * rm;
    if (*mc < rm)
        *mc = rm;
    *nc = (int)(NA_CPU_GEMM_X_CHUNK / x_b) / rn * rn;
    if (*nc < rn)
        *nc = rn;
    if (*mc > (ntile + n_tasks - 1) / n_tasks * rm)
        *mc = (ntile + n_tasks - 1) / n_tasks * rm;   /* no larger than a task */
    return n_tasks;
}
/* A micro-tile's outputs out[i * rn + c] (i < rm weight rows from row r, c <
 * rn inputs from input c1) into y (batch, rows), but for the padding rows
 * and inputs. */
static inline void na_cpu_gemm_put(float *y, int rows, int batch, int r, int c1,
                                   const float *out, int rm, int rn)
{
    int i, c;
    for (i = 0; i < rm && r + i < rows; i++)
        for (c = 0; c < rn && c1 + c < batch; c++)
            y[(size_t)(c1 + c) * rows + r + i] = out[i * rn + c];
}
/* (na_cpu_gemm_run, the two pool jobs of a GEMM: after the backend state) */
typedef int (*na_cpu_gemm_fn)(na_kernels_t *k, float *y, const float *x,
                              const na_tensor_t *w, int batch);
int na_cpu_gemm_q8(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch);
/* kernels/cpu/cpu_quant.c's entry (declared below), one copy per ISA */
typedef int (*na_cpu_matmul_quant_fn)(na_kernels_t *k, float *y, const float *x,
                                      const na_tensor_t *w, int batch);
int na_cpu_gemm_q8_vnni(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                        int batch);
int na_cpu_gemm_bf16(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                     int batch);
/* na_cpu_gemm_q4 (kernels/cpu/cpu_gemm_q4.c, compiled three times): Q4_0 and
 * Q5_0 weights read in their own blocks, bit-identical to cpu_quant.c's row
 * kernels; called by cpu_quant.c's copy for the same ISA. */
int na_cpu_gemm_q4(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch);
int na_cpu_gemm_q4_v4(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                      int batch);
int na_cpu_gemm_q4_vnni(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                        int batch);
int na_cpu_gemm_f32(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch);
/* na_cpu_gemm_h16 (kernels/cpu/cpu_gemm_h16.c, compiled twice): F16 and BF16
 * weights in f32, bit-identical to cpu_matmul.c's batch-1 row kernel (so it
 * serves batch_invariant); called by cpu_matmul.c's copy for the same ISA
 * from NA_CPU_GEMM_H16_MIN_BATCH. */
#ifdef NA_CPU_V4
#define na_cpu_gemm_h16 na_cpu_gemm_h16_v4
#endif
int na_cpu_gemm_h16(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch);

/* ---- backend state (kernels/cpu/cpu_backend.c) --------------------------- */
/* A placed weight's reordered copy (kernels/cpu/cpu_pack.c): its source,
 * size and placements. */
typedef struct {
    const void *src;
    size_t      bytes;
    void       *copy;
    int         refs;
} na_cpu_packed_t;

typedef struct {
    na_khost_t     host;        /* first: the shared host-backend state */
    na_cpu_pool_t *pool;
    float         *scratch;     /* grown on demand, see na_cpu_scratch */
    size_t         scratch_n;   /* floats in scratch */
    na_cpu_gemm_fn gemm_q8;     /* Q8_0 large batches: na_cpu_gemm_q8[_vnni] */
    int            gemm_q8_min_batch;   /* from this batch on (its crossover) */
    na_cpu_gemm_fn gemm_bf16;   /* BF16 large batches; NULL: dequantise + sgemm */
    na_cpu_gemm_fn gemm_f32;    /* F32/F16 large batches; NULL: (dequantise +) sgemm */
    na_cpu_matmul_quant_fn matmul_quant;  /* Q4_0 ... Q6_K, Q8X8: cpu_quant.c's copy for this CPU */
    na_cpu_packed_t *packed;    /* the reordered copies of placed weights */
    int              n_packed;
    size_t           cap_packed;
} na_cpu_state_t;

/* ---- placement (kernels/cpu/cpu_pack.c) ------------------------------------ */
na_status_t na_cpu_place(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w);
void        na_cpu_unplace(na_kernels_t *k, na_kweight_t *w);
/* Row `row` of a weight t placed in one of the backend's layouts
 * (NA_LAYOUT_Q4X8 ...) as f32, cols values (embed). */
void na_cpu_packed_row(const na_tensor_t *t, int row, float *out);
/* y = w.x for such a weight in plain f32 (the weights converted, the inputs
 * as they are): the fallback when its kernel has no scratch, as
 * na_ref_matmul is for the model's own order. */
void na_cpu_packed_matmul_f32(float *y, const float *x, const na_tensor_t *w, int batch);

/* The backend's resources its kernels borrow, below every kernel file (no
 * kernel calls back into cpu_backend.c, which calls them):
 * A scratch buffer of at least n floats owned by the backend (valid until the
 * next call); NULL if it cannot be allocated — callers then take a path that
 * needs none (kernels/cpu/cpu_scratch.c). */
float *na_cpu_scratch(na_kernels_t *k, size_t n);
/* The two pool jobs of a GEMM: pack_x over the ncols inputs (at most one
 * task per thread), then mm over n_tasks tasks, on the backend's pool. */
static inline void na_cpu_gemm_run(na_kernels_t *k, na_cpu_task_fn pack_x, na_cpu_task_fn mm,
                                   void *job, int ncols, int n_tasks)
{
    na_cpu_state_t *s = k->priv;
    na_cpu_pool_run(s->pool, pack_x, job, k->n_threads < ncols ? k->n_threads : ncols);
    na_cpu_pool_run(s->pool, mm, job, n_tasks);
}

/* ---- ops (kernels/cpu/cpu_matmul.c, kernels/cpu/cpu_attn.c) --------------
 * Both files are compiled twice (kernels/CMakeLists.txt): for the build's
 * baseline (x86-64-v3: AVX2, FMA, F16C) and with NA_CPU_V4 for x86-64-v4
 * (AVX-512F/BW/CD/DQ/VL: 32 vector registers, so wider register blocking).
 * The v4 copy's exported names end in _v4; na_kernels_cpu_create picks one
 * set at run time from CPUID (NA_CPU_ISA=v3 forces the baseline, v4 leaves
 * out the AVX512-VNNI / -BF16 GEMMs above), so the binary runs on any
 * x86-64-v3 machine and uses AVX-512 where it exists. */
#ifdef NA_CPU_V4
#define na_cpu_matmul       na_cpu_matmul_v4
#define na_cpu_attn_prefill na_cpu_attn_prefill_v4
#define na_cpu_attn_decode  na_cpu_attn_decode_v4
#define na_cpu_attn_partial na_cpu_attn_partial_v4
#define na_cpu_matmul_quant na_cpu_matmul_quant_v4
#define na_cpu_quant_inputs na_cpu_quant_inputs_v4
#define na_cpu_gemm_q4      na_cpu_gemm_q4_v4
#endif
/* Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K weights, and Q8_0 placed in
 * NA_LAYOUT_Q8X8 (kernels/cpu/cpu_quant.c, called by na_cpu_matmul): 0, or
 * -1 when the scratch for the quantised inputs cannot be had (nothing
 * written). */
int na_cpu_matmul_quant(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                        int batch);
/* The inputs x[n] of a weight of type dt (na_ref_quant_kind 1 or 2) as
 * na_cpu_matmul_quant quantises them: q[n]; kind 1: d[n/32], and s[n/32]
 * (Q8_1's s) for Q4_1 / Q5_1 (bs unused); kind 2: d[n/256], bs[n/16] (s
 * unused). Bit for bit na_ref_quantize_x's (test_quant checks each copy). */
void na_cpu_quant_inputs(na_dtype_t dt, const float *x, int n, int8_t *q, float *d,
                         int16_t *bs, float *s);
#ifndef NA_CPU_V4
void na_cpu_quant_inputs_v4(na_dtype_t dt, const float *x, int n, int8_t *q, float *d,
                            int16_t *bs, float *s);
void na_cpu_quant_inputs_vnni(na_dtype_t dt, const float *x, int n, int8_t *q, float *d,
                              int16_t *bs, float *s);
int na_cpu_matmul_quant_v4(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                           int batch);
/* the same built with AVX512-VNNI (vpdpbusd), picked where the CPU has it */
int na_cpu_matmul_quant_vnni(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                             int batch);
#endif
na_khost_matmul_fn       na_cpu_matmul;
na_khost_attn_prefill_fn na_cpu_attn_prefill;
na_khost_attn_decode_fn  na_cpu_attn_decode;
na_kattn_partial_fn      na_cpu_attn_partial;
#ifndef NA_CPU_V4
na_khost_matmul_fn       na_cpu_matmul_v4;
na_khost_attn_prefill_fn na_cpu_attn_prefill_v4;
na_khost_attn_decode_fn  na_cpu_attn_decode_v4;
na_kattn_partial_fn      na_cpu_attn_partial_v4;
#endif

/* ---- vector helpers ------------------------------------------------------ */

/* Sum of the 8 lanes. */
static inline float na_cpu_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Sum of 4 accumulators of 8 lanes, in the row kernels' order: (a0 + a1) +
 * (a2 + a3), then na_cpu_hsum. */
static inline float na_cpu_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3)
{
    return na_cpu_hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* Max of the 8 lanes. */
static inline float na_cpu_hmax(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x on 8 lanes, the bits of na_expf (kernels/expf.h, which says where the
 * algorithm comes from): n = round(x log2 e) by the 1.5*2^23 trick, b = x - n
 * ln 2 in two steps, a degree-5 polynomial j ~ e^b, result j * 2^n rounded
 * once. -inf gives exactly 0, x > ~88.7 inf. */
static inline __m256 na_cpu_exp(__m256 x)
{
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
                                        _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
                                        _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    __m256i ni = _mm256_cvtps_epi32(n);
    if (!_mm256_movemask_ps(_mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_GT_OQ)))
        return _mm256_mul_ps(j, _mm256_castsi256_ps(_mm256_slli_epi32(
                                    _mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23)));
    {
        /* |n| > 126 in some lane: 2^n as two normal factors, so j * 2^n1 is
         * exact and the second product rounds once (a subnormal result
         * too); |n| > 192 (x = -inf included): 0 for n <= 0, else inf. A NaN
         * x stays NaN (j is NaN). */
        const __m256 big = _mm256_cmp_ps(an, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
        const __m256 alt = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ),
                                         _mm256_set1_ps(INFINITY));
        __m256i n1, n2;
        __m256 res;
        ni = _mm256_castps_si256(_mm256_andnot_ps(big, _mm256_castsi256_ps(ni)));
        n1 = _mm256_srai_epi32(ni, 1);
        n2 = _mm256_sub_epi32(ni, n1);
        res = _mm256_mul_ps(_mm256_mul_ps(j, _mm256_castsi256_ps(_mm256_slli_epi32(
                                              _mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23))),
                            _mm256_castsi256_ps(_mm256_slli_epi32(
                                _mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23)));
        return _mm256_blendv_ps(res, alt, big);
    }
}

/* 8 f16 values (unaligned) to f32. */
static inline __m256 na_cpu_load_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* 8 bf16 values (unaligned) to f32. */
static inline __m256 na_cpu_load_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* The reduction of an AVX2 kernel of one weight row x NB inputs
 * (na_cpu_dotn_f32; cpu_gemm_h16.c's na_gh_tile for F16 / BF16 rows), whose
 * outputs are in 4 accumulators a[b][0..3] over the blocks of 32 as in the
 * batch-1 row kernels: from element i the blocks of 8 into a[b][0], then
 * na_cpu_hsum4 into sum[b] — their order, written once (the scalar tail
 * follows), so that every output is the batch-1 one bit for bit. W8(k):
 * weights k..k+7 as f32 lanes (the caller's macro); b: the caller's loop
 * counter. A macro: each kernel's code stays the one it had (NB <= 4, a
 * constant after inlining). */
#define NA_CPU_ROW_REDUCE(W8, a, sum, x, ld, i, n, NB, b)                                \
    do {                                                                                \
        for (; (i) + 8 <= (n); (i) += 8) {                                              \
            __m256 w8_ = W8(i);                                                         \
            _Pragma("GCC unroll 4")                                                     \
            for (b = 0; b < (NB); b++)                                                  \
                a[b][0] = _mm256_fmadd_ps(w8_, _mm256_loadu_ps((x) + (size_t)b * (ld) + (i)), \
                                          a[b][0]);                                     \
        }                                                                               \
        _Pragma("GCC unroll 4")                                                         \
        for (b = 0; b < (NB); b++)                                                      \
            sum[b] = na_cpu_hsum4(a[b][0], a[b][1], a[b][2], a[b][3]);                  \
    } while (0)

/* Bit j of the 32-bit word at p as byte j: 0xFF if set, else 0 (the high
 * bits of Q5 codes). */
static inline __m256i na_cpu_bits32(const uint8_t *p)
{
    uint32_t x32;
    __m256i bytes;
    memcpy(&x32, p, 4);
    bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32),
                                _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                                  0x0101010101010101, 0x0000000000000000));
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

#if defined(__AVX512F__)
/* Sum of a zmm pair whose halves are the 8-lane kernels' 4 accumulators
 * (a0 = their a0|a1, a1 = their a2|a3), reduced as na_cpu_hsum4 reduces
 * those: how the AVX-512 kernels stay bit-identical to them. */
static inline float na_cpu_hsum2x16(__m512 a0, __m512 a1)
{
    return na_cpu_hsum4(_mm512_castps512_ps256(a0),
                        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a0), 1)),
                        _mm512_castps512_ps256(a1),
                        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a1), 1)));
}
#endif

/* na_ref_f16_round with F16C: v to f16 and back, v itself where f16
 * overflows. */
static inline float na_cpu_f16_round(float v)
{
    unsigned short h = _cvtss_sh(v, 0);
    if ((h & 0x7fffu) == 0x7c00u && fabsf(v) <= 3.4028235e38f)
        return v;
    return _cvtsh_ss(h);
}

/* Quantise x[n] (n % 32 == 0) into q[n] and d[n / 32], bit-identical to
 * na_ref_quantize_q8 (ggml's quantize_row_q8_0): the same amax, iscale =
 * 127 / amax, x * iscale in f32, cvtps rounding to nearest even as
 * nearbyintf does, d = f16(amax / 127) as f32 (na_cpu_f16_round). With
 * s != NULL also Q8_1's s[n / 32] = f16(amax / 127 * sum q)
 * (na_ref_quantize_q8_1). */
static inline void na_cpu_quantize_q8s(const float *x, int n, int8_t *q, float *d, float *s)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 big = _mm256_set1_ps(3.0e38f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int b, j;

    for (b = 0; b < n / NA_Q8_0_BLOCK; b++) {
        const float *xb = x + (size_t)b * NA_Q8_0_BLOCK;
        __m256 v[4], am = _mm256_setzero_ps(), bad = _mm256_setzero_ps(), vid;
        __m256i i0, i1, i2, i3;
        float amax, id;

        for (j = 0; j < 4; j++) {
            __m256 a;
            v[j] = _mm256_loadu_ps(xb + 8 * j);
            a = _mm256_and_ps(v[j], absmask);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));   /* NaN or Inf */
            am = _mm256_max_ps(am, a);
        }
        if (_mm256_movemask_ps(bad)) {
            memset(q + (size_t)b * NA_Q8_0_BLOCK, 0, NA_Q8_0_BLOCK);
            d[b] = NAN;
            if (s != NULL)
                s[b] = NAN;
            continue;
        }
        amax = na_cpu_hmax(am);
        id = amax != 0.0f ? 127.0f / amax : 0.0f;
        vid = _mm256_set1_ps(id);
        i0 = _mm256_cvtps_epi32(_mm256_mul_ps(v[0], vid));
        i1 = _mm256_cvtps_epi32(_mm256_mul_ps(v[1], vid));
        i2 = _mm256_cvtps_epi32(_mm256_mul_ps(v[2], vid));
        i3 = _mm256_cvtps_epi32(_mm256_mul_ps(v[3], vid));
        d[b] = na_cpu_f16_round(amax / 127.0f);
        if (s != NULL) {
            __m256i t = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
            __m128i u = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
            u = _mm_add_epi32(u, _mm_unpackhi_epi64(u, u));
            u = _mm_add_epi32(u, _mm_shuffle_epi32(u, 0xB1));
            s[b] = na_cpu_f16_round((float)_mm_cvtsi128_si32(u) * (amax / 127.0f));
        }
        /* packs work per 128-bit lane: the permute puts the 32 bytes back in order */
        i0 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + (size_t)b * NA_Q8_0_BLOCK),
                            _mm256_permutevar8x32_epi32(i0, perm));
    }
}

/* The same without Q8_1's sums (Q8_0 inputs). */
static inline void na_cpu_quantize_q8(const float *x, int n, int8_t *q, float *d)
{
    na_cpu_quantize_q8s(x, n, q, d, NULL);
}

#endif /* NA_KERNELS_CPU_H */

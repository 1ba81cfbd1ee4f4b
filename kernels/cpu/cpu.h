/* kernels/cpu/cpu.h — internals of the cpu backend: its private state, the
 * thread pool it owns, and the AVX2/FMA/F16C helpers its files share. */
#ifndef NA_KERNELS_CPU_H
#define NA_KERNELS_CPU_H

#include <immintrin.h>
#include <stddef.h>

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

/* ---- backend state (kernels/cpu/cpu_backend.c) --------------------------- */
typedef struct {
    na_khost_t     host;        /* first: the shared host-backend state */
    na_cpu_pool_t *pool;
    float         *scratch;     /* grown on demand, see na_cpu_scratch */
    size_t         scratch_n;   /* floats in scratch */
} na_cpu_state_t;

/* A scratch buffer of at least n floats owned by the backend (valid until the
 * next call); NULL if it cannot be allocated — callers then take a path that
 * needs none. */
float *na_cpu_scratch(na_kernels_t *k, size_t n);

/* ---- ops (kernels/cpu/cpu_matmul.c, kernels/cpu/cpu_attn.c) --------------
 * Both files are compiled twice (kernels/CMakeLists.txt): for the build's
 * baseline (x86-64-v3: AVX2, FMA, F16C) and with NA_CPU_V4 for x86-64-v4
 * (AVX-512F/BW/CD/DQ/VL: 32 vector registers, so wider register blocking).
 * The v4 copy's exported names end in _v4; na_kernels_cpu_create picks one
 * set at run time from CPUID (NA_CPU_ISA=v3 forces the baseline), so the
 * binary runs on any x86-64-v3 machine and uses AVX-512 where it exists. */
#ifdef NA_CPU_V4
#define na_cpu_matmul       na_cpu_matmul_v4
#define na_cpu_attn_prefill na_cpu_attn_prefill_v4
#define na_cpu_attn_decode  na_cpu_attn_decode_v4
#define na_cpu_attn_partial na_cpu_attn_partial_v4
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

/* Max of the 8 lanes. */
static inline float na_cpu_hmax(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* e^x on 8 lanes: range reduction by ln 2 and a degree-5 polynomial
 * (Cephes expf); relative error ~2 ulp. x is clamped to [-87.3, 88.3], so a
 * very negative x gives ~1e-38 instead of 0 (harmless for softmax weights). */
static inline __m256 na_cpu_exp(__m256 x)
{
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
    const __m256 ln2hi = _mm256_set1_ps(0.693359375f);
    const __m256 ln2lo = _mm256_set1_ps(-2.12194440e-4f);
    __m256 fx, y, z;
    __m256i e;

    x  = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    fx = _mm256_round_ps(_mm256_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x  = _mm256_fnmadd_ps(fx, ln2hi, x);
    x  = _mm256_fnmadd_ps(fx, ln2lo, x);
    z  = _mm256_mul_ps(x, x);
    y  = _mm256_set1_ps(1.9875691500e-4f);
    y  = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y  = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y  = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y  = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y  = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y  = _mm256_fmadd_ps(y, z, _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    e  = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
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

#endif /* NA_KERNELS_CPU_H */

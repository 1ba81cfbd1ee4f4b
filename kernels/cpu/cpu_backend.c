/* kernels/cpu/cpu_backend.c — the "cpu" backend: its table, create/destroy,
 * and the element-wise ops (rmsnorm, RoPE, SwiGLU,
 * softmax, residual add), embedding and KV store. Buffers, events and the
 * checked table entries are shared with ref (kernels/host/host.c). Matmul
 * is in cpu_matmul.c, attention in cpu_attn.c.
 *
 * Threading: the backend owns a pool of n_threads (kernels/cpu/cpu_pool.c)
 * for matmul rows and long decode contexts, and sets OpenBLAS to the same
 * n_threads; the two never run at once (sgemm is called from the caller's
 * thread while the pool's workers sleep), so together they never use more
 * than n_threads cores. The element-wise ops are cheap and run on the
 * calling thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cblas.h>

#include "kernels/cpu/cpu.h"
#include "kernels/expf.h"
#include "kernels/ref/ref.h"

/* ops->rmsnorm: sum of squares in 8 lanes, then one scaled pass. */
static void na_cpu_rmsnorm(float *out, const float *x,
                           const float *weight, int n, float eps, int batch)
{
    int b, i;
    for (b = 0; b < batch; b++) {
        const float *xb = x + (size_t)b * n;
        float *ob = out + (size_t)b * n;
        __m256 acc = _mm256_setzero_ps(), sv;
        float ss;
        for (i = 0; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(xb + i);
            acc = _mm256_fmadd_ps(v, v, acc);
        }
        ss = na_cpu_hsum(acc);
        for (; i < n; i++)
            ss += xb[i] * xb[i];
        ss = 1.0f / sqrtf(ss / (float)n + eps);
        sv = _mm256_set1_ps(ss);
        for (i = 0; i + 8 <= n; i += 8)
            _mm256_storeu_ps(ob + i, _mm256_mul_ps(_mm256_loadu_ps(weight + i),
                                                   _mm256_mul_ps(sv, _mm256_loadu_ps(xb + i))));
        for (; i < n; i++)
            ob[i] = weight[i] * (ss * xb[i]);
    }
}

/* Same formula as the reference, with cos/sin computed once per pair and
 * row instead of once per head: results are bit-identical. */
static void na_cpu_rope(float *vec, int n_heads, const int *pos, const na_rope_t *r, int batch)
{
    float fcr[NA_MODEL_MAX_HEAD_DIM / 2], fci[NA_MODEL_MAX_HEAD_DIM / 2];
    int b, h, i, half = r->n_dims / 2;
    int step = r->style == NA_ROPE_NEOX ? 1 : 2, other = r->style == NA_ROPE_NEOX ? half : 1;

    if (r->n_dims > NA_MODEL_MAX_HEAD_DIM) {
        na_ref_rope(vec, n_heads, pos, r, batch);
        return;
    }
    for (b = 0; b < batch; b++) {
        for (i = 0; i < half; i++) {
            float val = (float)pos[b] * r->freq[i];
            fcr[i] = cosf(val);
            fci[i] = sinf(val);
            if (r->mscale != 1.0f) {
                fcr[i] *= r->mscale;
                fci[i] *= r->mscale;
            }
        }
        for (h = 0; h < n_heads; h++) {
            float *v = vec + ((size_t)b * n_heads + h) * r->head_dim;
            for (i = 0; i < half; i++) {
                float *p = v + i * step;
                float v0 = p[0], v1 = p[other];
                p[0]     = v0 * fcr[i] - v1 * fci[i];
                p[other] = v0 * fci[i] + v1 * fcr[i];
            }
        }
    }
}

/* silu(g) * u of 8 lanes with the vector exp. */
static inline __m256 na_cpu_swiglu8(__m256 g, __m256 u)
{
    __m256 e = na_cpu_exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

/* ops->swiglu: silu(g) * u with the vector exp. The n % 8 last elements go
 * through the same vector code (padded), so an element's value does not
 * depend on where it falls in the (batch * hidden) array: a row computed in a
 * batch equals the same row computed alone, bit for bit. */
static void na_cpu_swiglu(float *gate, const float *up, size_t n)
{
    float g8[8] = { 0 }, u8[8] = { 0 };
    size_t i, rest;
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, na_cpu_swiglu8(_mm256_loadu_ps(gate + i),
                                                  _mm256_loadu_ps(up + i)));
    rest = n - i;
    if (rest == 0)
        return;
    memcpy(g8, gate + i, rest * sizeof(float));
    memcpy(u8, up + i, rest * sizeof(float));
    _mm256_storeu_ps(g8, na_cpu_swiglu8(_mm256_loadu_ps(g8), _mm256_loadu_ps(u8)));
    memcpy(gate + i, g8, rest * sizeof(float));
}

/* ops->softmax: vector max, exp + sum, scale; per row. */
static void na_cpu_softmax(float *x, int n, int batch)
{
    int b, i;
    for (b = 0; b < batch; b++) {
        float *xb = x + (size_t)b * n;
        __m256 vmax = _mm256_set1_ps(-INFINITY), vsum = _mm256_setzero_ps(), vm, inv;
        float max, sum;
        for (i = 0; i + 8 <= n; i += 8)
            vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(xb + i));
        max = na_cpu_hmax(vmax);
        for (; i < n; i++)
            if (xb[i] > max)
                max = xb[i];
        vm = _mm256_set1_ps(max);
        for (i = 0; i + 8 <= n; i += 8) {
            __m256 e = na_cpu_exp(_mm256_sub_ps(_mm256_loadu_ps(xb + i), vm));
            _mm256_storeu_ps(xb + i, e);
            vsum = _mm256_add_ps(vsum, e);
        }
        sum = na_cpu_hsum(vsum);
        for (; i < n; i++) {
            xb[i] = na_expf(xb[i] - max);
            sum += xb[i];
        }
        inv = _mm256_set1_ps(1.0f / sum);
        for (i = 0; i + 8 <= n; i += 8)
            _mm256_storeu_ps(xb + i, _mm256_mul_ps(_mm256_loadu_ps(xb + i), inv));
        for (; i < n; i++)
            xb[i] *= 1.0f / sum;
    }
}

/* Row `row` of a 2-D weight as f32 into out[t->cols] (embedding lookup):
 * a memcpy for f32, one conversion pass otherwise. */
static void na_cpu_tensor_row(const na_tensor_t *t, int row, float *out)
{
    size_t n = (size_t)t->cols;
    size_t i, b;

    if (t->layout != NA_LAYOUT_ROWS) {           /* the backend's own copy */
        na_cpu_packed_row(t, row, out);
        return;
    }
    switch (t->dtype) {
    case NA_DTYPE_F32:
        memcpy(out, (const float *)t->data + (size_t)row * n, n * sizeof(float));
        break;
    case NA_DTYPE_F16: {
        const uint16_t *p = (const uint16_t *)t->data + (size_t)row * n;
        for (i = 0; i < n; i++)
            out[i] = na_f16_to_f32(p[i]);
        break;
    }
    case NA_DTYPE_BF16: {
        const uint16_t *p = (const uint16_t *)t->data + (size_t)row * n;
        for (i = 0; i < n; i++)
            out[i] = na_bf16_to_f32(p[i]);
        break;
    }
    case NA_DTYPE_Q8_0: {
        /* blocks of { f16 scale, int8 q[32] } */
        const uint8_t *p = (const uint8_t *)t->data +
                           (size_t)row * (n / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
        for (b = 0; b < n / NA_Q8_0_BLOCK; b++) {
            const uint8_t *blk = p + b * NA_Q8_0_BLOCK_SIZE;
            uint16_t h;
            float d;
            memcpy(&h, blk, sizeof(h));
            d = na_f16_to_f32(h);
            for (i = 0; i < NA_Q8_0_BLOCK; i++)
                out[b * NA_Q8_0_BLOCK + i] = d * (float)(int8_t)blk[2 + i];
        }
        break;
    }
    default:                                    /* the other block formats */
        na_ref_dequant_row(t->dtype, (const uint8_t *)t->data +
                                     (size_t)row * na_dtype_bytes(t->dtype, n), out, (int)n);
        break;
    }
}

/* ops->embed: one row per token. */
static void na_cpu_embed(float *x, const na_tensor_t *t, const int *tokens, int n)
{
    int r;
    for (r = 0; r < n; r++)
        na_cpu_tensor_row(t, tokens[r], x + (size_t)r * (size_t)t->cols);
}

/* ops->add: x += y, 8 lanes at a time. */
static void na_cpu_add(float *x, const float *y, size_t n)
{
    size_t i;
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++)
        x[i] += y[i];
}

/* ops->store: f32 rows into a KV cache of f32 (memcpy), f16 or bf16, 8
 * values at a time, bit-identical to the scalar round-to-nearest-even
 * conversions used everywhere else: F16C vcvtps2ph for f16 (a group of 8
 * holding a NaN goes through na_f32_to_f16, which does not keep NaN payload
 * bits as vcvtps2ph does), na_f32_to_bf16's integer rounding for bf16. It
 * was scalar: 10% of a 512-token prefill (110M bf16, f16 KV, 1 thread, perf),
 * on the calling thread while the pool waits. */
static void na_cpu_store(void *dst, na_dtype_t dtype, const float *src, size_t n)
{
    uint16_t *d = dst;
    size_t i = 0, j;
    if (dtype == NA_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    if (dtype == NA_DTYPE_BF16) {
        const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
        for (; i + 8 <= n; i += 8) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
            __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
            __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
            __m256i r = _mm256_srli_epi32(
                _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
            r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(x, 16),
                                                      _mm256_set1_epi32(0x40)), nan);
            _mm_storeu_si128((__m128i *)(d + i), _mm_packus_epi32(_mm256_castsi256_si128(r),
                                                                  _mm256_extracti128_si256(r, 1)));
        }
        for (; i < n; i++)
            d[i] = na_f32_to_bf16(src[i]);
        return;
    }
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (j = i; j < i + 8; j++)
                d[j] = na_f32_to_f16(src[j]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++)
        d[i] = na_f32_to_f16(src[i]);
}

/* ops->destroy: join the pool, free scratch, state and the struct. */
static void na_cpu_destroy(na_kernels_t *k)
{
    na_cpu_state_t *s = k->priv;
    na_cpu_pool_destroy(s->pool);
    while (s->n_packed > 0)                 /* placements never undone */
        free(s->packed[--s->n_packed].copy);
    free(s->packed);
    free(s->scratch);
    free(s);
    free(k);
}

/* The baseline ops (x86-64-v3) and the x86-64-v4 copies of matmul and
 * attention (kernels/cpu/cpu.h); the small ops here stay on the baseline. */
#define NA_CPU_CORE(sfx) {                                  \
        .embed        = na_cpu_embed,                       \
        .add          = na_cpu_add,                         \
        .store        = na_cpu_store,                       \
        .matmul       = na_cpu_matmul##sfx,                 \
        .rmsnorm      = na_cpu_rmsnorm,                     \
        .rope         = na_cpu_rope,                        \
        .swiglu       = na_cpu_swiglu,                      \
        .softmax      = na_cpu_softmax,                     \
        .attn_prefill = na_cpu_attn_prefill##sfx,           \
        .attn_decode  = na_cpu_attn_decode##sfx,            \
    }
static const na_khost_core_t na_cpu_core    = NA_CPU_CORE();
static const na_khost_core_t na_cpu_core_v4 = NA_CPU_CORE(_v4);

/* ops->rest: the pool's workers sleep now rather than spin for the next job. */
static void na_cpu_rest(na_kernels_t *k)
{
    na_cpu_pool_rest(((na_cpu_state_t *)k->priv)->pool);
}

/* The table of each copy: they differ in the storage kernel only. */
#define NA_CPU_OPS(sfx) {                                   \
        .name         = "cpu",                              \
        NA_KHOST_OPS,                                       \
        .place        = na_cpu_place,                       \
        .unplace      = na_cpu_unplace,                     \
        .attn_partial = na_cpu_attn_partial##sfx,           \
        .rest         = na_cpu_rest,                        \
        .destroy      = na_cpu_destroy,                     \
    }
static const na_kernel_ops_t na_cpu_ops    = NA_CPU_OPS();
static const na_kernel_ops_t na_cpu_ops_v4 = NA_CPU_OPS(_v4);

/* The kernels this CPU gets: *v4 = 1 when it has x86-64-v4's AVX-512
 * subsets, *ext = NA_CPU_EXT_* bits of the extensions beyond v4 that have
 * their own GEMMs (kernels/cpu/cpu.h). NA_CPU_ISA: auto (the best there is),
 * v3 (the AVX2 baseline), v4 (AVX-512 without the VNNI / BF16 GEMMs: their
 * fallbacks), v4x (AVX-512 and both extensions; refused where missing). */
#define NA_CPU_EXT_VNNI 1
#define NA_CPU_EXT_BF16 2
static na_status_t na_cpu_pick_isa(int *v4, int *ext)
{
    const char *want = getenv("NA_CPU_ISA");
    int have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512cd");
    int have_ext = !have ? 0 :
                   (__builtin_cpu_supports("avx512vnni") ? NA_CPU_EXT_VNNI : 0) |
                   (__builtin_cpu_supports("avx512bf16") ? NA_CPU_EXT_BF16 : 0);

    *v4 = have;
    *ext = have_ext;
    if (want == NULL || *want == '\0' || !strcmp(want, "auto"))
        return NA_OK;
    if (!strcmp(want, "v3")) {
        *v4 = 0;
        *ext = 0;
        return NA_OK;
    }
    if (!strcmp(want, "v4") || !strcmp(want, "v4x")) {
        if (!have)
            return na_err(NA_ERR_UNSUPPORTED, "kernels cpu: NA_CPU_ISA=%s but this CPU lacks "
                          "AVX-512F/VL/BW/DQ/CD (unset it, or use v3)", want);
        if (want[2] == '\0') {
            *ext = 0;
        } else if (have_ext != (NA_CPU_EXT_VNNI | NA_CPU_EXT_BF16)) {
            return na_err(NA_ERR_UNSUPPORTED, "kernels cpu: NA_CPU_ISA=v4x but this CPU lacks "
                          "AVX512-VNNI or AVX512-BF16 (unset it, or use v4)");
        }
        return NA_OK;
    }
    return na_err(NA_ERR_INVALID, "kernels cpu: NA_CPU_ISA='%s' (use auto, v3, v4 or v4x)",
                  want);
}

/* Create the backend with its pool; n_threads <= 0 means every online core.
 * NA_ERR_UNSUPPORTED when this CPU lacks AVX2/FMA/F16C. */
na_status_t na_kernels_cpu_create(int n_threads, na_kernels_t **k_p)
{
    na_kernels_t *k;
    na_cpu_state_t *s;
    na_status_t st;
    int v4 = 0, ext = 0;
    static const char *const isa_v4[] = { "x86-64-v4", "x86-64-v4+vnni", "x86-64-v4+bf16",
                                           "x86-64-v4+vnni+bf16" };

    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return na_err(NA_ERR_UNSUPPORTED, "kernels cpu: this CPU lacks AVX2/FMA (use backend 'ref')");
    st = na_cpu_pick_isa(&v4, &ext);
    if (st != NA_OK)
        return st;
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return na_err(NA_ERR_NOMEM, "kernels cpu: out of memory");
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        st = na_err(NA_ERR_NOMEM, "kernels cpu: out of memory");
        goto err_free_kernels;
    }
    st = na_cpu_pool_create(n_threads, &s->pool);
    if (st != NA_OK)
        goto err_free_state;
    /* OpenBLAS runs single-threaded: large matmuls split their rows over
     * this pool (kernels/cpu/cpu_matmul.c), so OpenBLAS's own threads never
     * spin beside the pool's between calls (its count is process-wide). */
    openblas_set_num_threads(1);
    s->host.core = v4 ? &na_cpu_core_v4 : &na_cpu_core;
    k->ops = v4 ? &na_cpu_ops_v4 : &na_cpu_ops;
    /* crossovers with the row kernels (kernels/cpu/cpu_matmul.c), 768x768
     * Q8_0, 1 thread, best of 200 (GFLOP/s row kernel / GEMM): VNNI b=4
     * 86 / 58, b=8 86 / 98, b=16 85 / 135; AVX2 b=16 85 / 73, b=24 82 / 88 */
    s->gemm_q8 = ext & NA_CPU_EXT_VNNI ? na_cpu_gemm_q8_vnni : na_cpu_gemm_q8;
    s->gemm_q8_min_batch = ext & NA_CPU_EXT_VNNI ? 8 : 20;
    s->gemm_bf16 = ext & NA_CPU_EXT_BF16 ? na_cpu_gemm_bf16 : NULL;
    s->gemm_f32 = v4 ? na_cpu_gemm_f32 : NULL;
    s->matmul_quant = ext & NA_CPU_EXT_VNNI ? na_cpu_matmul_quant_vnni
                    : v4 ? na_cpu_matmul_quant_v4 : na_cpu_matmul_quant;
    k->isa = v4 ? isa_v4[ext] : "x86-64-v3";
    k->n_threads = n_threads;
    k->priv = s;
    *k_p = k;
    return NA_OK;

err_free_state:
    free(s);
err_free_kernels:
    free(k);
    return st;
}

/* See kernels.h. OpenBLAS chooses its kernels as it loads, by CPUID or by
 * OPENBLAS_CORETYPE (the machines of this project have OPENBLAS_CORETYPE=
 * Haswell in their environment). Measured on the Zen 4 machine, `nearattn
 * bench e2e --peers --shapes 110m --dtypes f32 --threads-list 1 --reps 1`,
 * pp512 (one thread, user time = wall time): Haswell 653 tok/s, Cooperlake
 * (what OpenBLAS 0.3.21 picks there by itself) 1060 (before
 * kernels/cpu/cpu_gemm_f32.c took batches from 64: 1021 now with Haswell
 * set). NA_CPU_ISA=v3 (the
 * AVX2 kernels on purpose) asks for nothing better. */
const char *na_kernels_blas_better_core(void)
{
    const char *isa = getenv("NA_CPU_ISA"), *now;

    if (isa != NULL && !strcmp(isa, "v3"))
        return NULL;
    __builtin_cpu_init();
    if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512cd")))
        return NULL;
    now = openblas_get_corename();
    if (now == NULL || (strcasecmp(now, "haswell") && strcasecmp(now, "zen")))
        return NULL;
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
}

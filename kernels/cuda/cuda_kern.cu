/* kernels/cuda/cuda_kern.cu — the CUDA backend's own element-wise and row
 * kernels (embedding, residual add, KV store, rmsnorm, RoPE, SwiGLU,
 * softmax, argmax, f32 -> f16/bf16) and the GEMV of f32, f16 and bf16
 * weights (the quantised types: cuda_quant.cu). Each kernel follows its reference in kernels/ref/ (same
 * formulas, f32 arithmetic, accurate expf/powf/sinf/cosf, no fast math). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"

#include <stdlib.h>
#include <string.h>

#define NA_CU_THREADS 256

static int na_cu_last(void)
{
    return (int)cudaGetLastError();
}

/* ---- embedding ---------------------------------------------------------- */

template <int DT>
__global__ void na_cu_embed_k(float *x, const void *table, int cols, const int *tokens)
{
    size_t row = (size_t)tokens[blockIdx.x] * (size_t)cols;
    float *xr = x + (size_t)blockIdx.x * (size_t)cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        xr[j] = na_cu_load<DT>(table, row + (size_t)j);
}

extern "C" int na_cu_embed(void *stream, float *x, const void *table, int dtype, int cols,
                           const int *tokens, int n)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return 0;
    switch (dtype) {
    case NA_CU_F32:  na_cu_embed_k<NA_CU_F32><<<n, NA_CU_THREADS, 0, s>>>(x, table, cols, tokens); break;
    case NA_CU_F16:  na_cu_embed_k<NA_CU_F16><<<n, NA_CU_THREADS, 0, s>>>(x, table, cols, tokens); break;
    default:         na_cu_embed_k<NA_CU_BF16><<<n, NA_CU_THREADS, 0, s>>>(x, table, cols, tokens); break;
    }
    return na_cu_last();
}

/* ---- element-wise ------------------------------------------------------- */

__global__ void na_cu_add_k(float *x, const float *y, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += y[i];
}

extern "C" int na_cu_add(void *stream, float *x, const float *y, size_t n)
{
    if (n == 0)
        return 0;
    na_cu_add_k<<<na_cu_grid(n, NA_CU_THREADS), NA_CU_THREADS, 0, (cudaStream_t)stream>>>(x, y, n);
    return na_cu_last();
}

template <int DT>
__global__ void na_cu_store_k(void *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (DT == NA_CU_F16)
            static_cast<__half *>(dst)[i] = __float2half_rn(src[i]);
        else if (DT == NA_CU_BF16)
            static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(src[i]);
        else
            static_cast<float *>(dst)[i] = src[i];
    }
}

extern "C" int na_cu_store(void *stream, void *dst, int dtype, const float *src, size_t n)
{
    cudaStream_t s = (cudaStream_t)stream;
    unsigned g = na_cu_grid(n, NA_CU_THREADS);
    if (n == 0)
        return 0;
    if (dtype == NA_CU_F16)
        na_cu_store_k<NA_CU_F16><<<g, NA_CU_THREADS, 0, s>>>(dst, src, n);
    else if (dtype == NA_CU_BF16)
        na_cu_store_k<NA_CU_BF16><<<g, NA_CU_THREADS, 0, s>>>(dst, src, n);
    else
        na_cu_store_k<NA_CU_F32><<<g, NA_CU_THREADS, 0, s>>>(dst, src, n);
    return na_cu_last();
}

extern "C" int na_cu_to_half(void *stream, void *dst, int dtype, const float *src, size_t n)
{
    return na_cu_store(stream, dst, dtype, src, n);
}

__global__ void na_cu_swiglu_k(float *gate, const float *up, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

extern "C" int na_cu_swiglu(void *stream, float *gate, const float *up, size_t n)
{
    if (n == 0)
        return 0;
    na_cu_swiglu_k<<<na_cu_grid(n, NA_CU_THREADS), NA_CU_THREADS, 0, (cudaStream_t)stream>>>(
        gate, up, n);
    return na_cu_last();
}

/* One thread per rotated pair: (b, h, i). The angles come from the host's
 * table (kernels/rope.h), never from powf on the device. */
__global__ void na_cu_rope_k(float *vec, int n_heads, int head_dim, int n_dims, int neox,
                             const float *freq, float mscale, const int *pos, size_t n_pairs)
{
    int half = n_dims / 2;
    for (size_t p = blockIdx.x * (size_t)blockDim.x + threadIdx.x; p < n_pairs;
         p += (size_t)gridDim.x * blockDim.x) {
        size_t bh = p / (size_t)half;
        int i = (int)(p % (size_t)half);
        int b = (int)(bh / (size_t)n_heads);
        float *v = vec + bh * (size_t)head_dim + (neox ? i : 2 * i);
        int other = neox ? half : 1;
        float val = (float)pos[b] * freq[i];
        float fcr = cosf(val), fci = sinf(val);
        if (mscale != 1.0f) {
            fcr *= mscale;
            fci *= mscale;
        }
        float v0 = v[0], v1 = v[other];
        v[0] = v0 * fcr - v1 * fci;
        v[other] = v0 * fci + v1 * fcr;
    }
}

extern "C" int na_cu_rope(void *stream, float *vec, int n_heads, int head_dim, int n_dims,
                          int neox, const float *freq, float mscale, const int *pos, int batch)
{
    size_t n = (size_t)batch * (size_t)n_heads * (size_t)(n_dims / 2);
    if (n == 0)
        return 0;
    na_cu_rope_k<<<na_cu_grid(n, NA_CU_THREADS), NA_CU_THREADS, 0, (cudaStream_t)stream>>>(
        vec, n_heads, head_dim, n_dims, neox, freq, mscale, pos, n);
    return na_cu_last();
}

__global__ void na_cu_bias_k(float *x, const float *bias, int n, size_t total)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] += bias[i % (size_t)n];
}

extern "C" int na_cu_bias(void *stream, float *x, const float *bias, int n, int batch)
{
    size_t total = (size_t)n * (size_t)batch;
    if (total == 0)
        return 0;
    na_cu_bias_k<<<na_cu_grid(total, NA_CU_THREADS), NA_CU_THREADS, 0, (cudaStream_t)stream>>>(
        x, bias, n, total);
    return na_cu_last();
}

/* ---- row kernels: one block per row ------------------------------------- */

/* One block per row. A thread's elements (i = thread, thread + blockDim,
 * ...) are loaded NA_CU_NORM_U at a time before their math: one row is a
 * single block, so its time is its chain of memory round trips (one per
 * element a thread before: ~8 us for 2048 floats on an H200). The sums
 * run in the same order, so the bits are those of one element at a time;
 * out may be x (each thread reads its elements before writing them). */
#define NA_CU_NORM_U 8
__global__ void na_cu_rmsnorm_k(float *out, const float *x, const float *w, int n, float eps)
{
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * (size_t)n;
    float *orow = out + (size_t)blockIdx.x * (size_t)n;
    const int step = (int)blockDim.x;
    float ss = 0.0f;
    for (int i0 = threadIdx.x; i0 < n; i0 += step * NA_CU_NORM_U) {
        float v[NA_CU_NORM_U];
#pragma unroll
        for (int u = 0; u < NA_CU_NORM_U; u++)
            v[u] = i0 + u * step < n ? xr[i0 + u * step] : 0.0f;
#pragma unroll
        for (int u = 0; u < NA_CU_NORM_U; u++)
            if (i0 + u * step < n)
                ss += v[u] * v[u];
    }
    ss = na_cu_block_sum(ss, sh);
    ss = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i0 = threadIdx.x; i0 < n; i0 += step * NA_CU_NORM_U) {
        float v[NA_CU_NORM_U], g[NA_CU_NORM_U];
#pragma unroll
        for (int u = 0; u < NA_CU_NORM_U; u++) {
            int i = i0 + u * step;
            v[u] = i < n ? xr[i] : 0.0f;
            g[u] = i < n ? w[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NA_CU_NORM_U; u++)
            if (i0 + u * step < n)
                orow[i0 + u * step] = g[u] * (ss * v[u]);
    }
}

extern "C" int na_cu_rmsnorm(void *stream, float *out, const float *x, const float *w, int n,
                             float eps, int batch)
{
    if (batch <= 0 || n <= 0)
        return 0;
    na_cu_rmsnorm_k<<<batch, NA_CU_THREADS, 0, (cudaStream_t)stream>>>(out, x, w, n, eps);
    return na_cu_last();
}

__global__ void na_cu_softmax_k(float *x, int n)
{
    __shared__ float sh[32];
    float *xr = x + (size_t)blockIdx.x * (size_t)n;
    float m = -INFINITY, sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        m = fmaxf(m, xr[i]);
    m = na_cu_block_max(m, sh);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float e = expf(xr[i] - m);
        xr[i] = e;
        sum += e;
    }
    sum = na_cu_block_sum(sum, sh);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        xr[i] /= sum;
}

extern "C" int na_cu_softmax(void *stream, float *x, int n, int batch)
{
    if (batch <= 0 || n <= 0)
        return 0;
    na_cu_softmax_k<<<batch, NA_CU_THREADS, 0, (cudaStream_t)stream>>>(x, n);
    return na_cu_last();
}

/* (value, index) pairs reduced to the larger value, the lower index on ties. */
__global__ void na_cu_argmax_k(int *idx, const float *x, int n)
{
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *xr = x + (size_t)blockIdx.x * (size_t)n;
    float best = -INFINITY;
    int bi = 0x7fffffff, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (xr[i] > best || bi == 0x7fffffff) {
            best = xr[i];
            bi = i;
        }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, best, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) {
            best = ov;
            bi = oi;
        }
    }
    if (lane == 0) {
        sv[w] = best;
        si[w] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < (int)(blockDim.x >> 5); k++)
            if (sv[k] > sv[0] || (sv[k] == sv[0] && si[k] < si[0])) {
                sv[0] = sv[k];
                si[0] = si[k];
            }
        idx[blockIdx.x] = si[0];
    }
}

extern "C" int na_cu_argmax(void *stream, int *idx, const float *x, int n, int batch)
{
    if (batch <= 0 || n <= 0)
        return 0;
    na_cu_argmax_k<<<batch, NA_CU_THREADS, 0, (cudaStream_t)stream>>>(idx, x, n);
    return na_cu_last();
}

/* ---- dequantising GEMV ---------------------------------------------------
 * One warp per output row, NA_CU_GEMV_WARPS rows per block; the warp walks
 * the row's columns once and multiplies each weight into up to NBT rows of
 * x (acc[b] in registers; NBT the batch rounded up to 1, 2, 4 or
 * NA_CU_GEMV_MAX_BATCH, so a batch of 1 holds one accumulator, not 8),
 * then reduces across lanes. f16/bf16 rows whose columns are a multiple of
 * 8 (and 16-byte aligned) are read 16 bytes per lane, U chunks a lane in
 * flight before their math. NA_CUDA_GEMV picks the variant: u4 (the
 * default: U = 4), u8 (U = 8) or nb8 (U = 8 and 8 accumulators at every
 * batch, the kernel before; 96 registers a thread held an SM to 31 %
 * occupancy). On an H200, 4096 x 4096 bf16 at batch 1 read its weights at
 * 85 / 78 / 44 % of the device-to-device copy, and the 1B-shape bf16
 * decode ran at 601 / 578 / 486 tok/s (2026-11-28). Accumulation is f32;
 * each product is (w as f32) * x, as in the reference, and every variant
 * sums in the same order, so they give the same bits.
 * The quantised types' GEMV (Q8_0 and the other GGML blocks): cuda_quant.cu. */
#define NA_CU_GEMV_WARPS 4

template <int DT, bool VEC, int NBT, int U>
__global__ void __launch_bounds__(32 * NA_CU_GEMV_WARPS)
na_cu_gemv_k(float *y, const float *x, const void *w, int rows, int cols, int nb)
{
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * NA_CU_GEMV_WARPS + (threadIdx.x >> 5);
    float acc[NBT];
#pragma unroll
    for (int b = 0; b < NBT; b++)
        acc[b] = 0.0f;
    if (r >= rows)
        return;                                  /* whole warp: no shuffles follow for it */
    if (VEC) {
        /* U chunks of the row a lane (16 bytes each) are loaded before any
         * is used: one memory round trip per U x 32 chunks, not per 32.
         * The sums run in the same order as one chunk at a time (lane, then
         * chunk lane, lane + 32, ...), so the results are those bits. */
        const uint4 *row = reinterpret_cast<const uint4 *>(
            static_cast<const unsigned short *>(w) + (size_t)r * (size_t)cols);
        int nc = cols / 8;
        for (int c0 = 0; c0 < nc; c0 += 32 * U) {
            uint4 raw[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                int c8 = c0 + u * 32 + lane;
                raw[u] = c8 < nc ? row[c8] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                int c8 = c0 + u * 32 + lane;
                if (c8 >= nc)
                    break;
                const unsigned short *hs = reinterpret_cast<const unsigned short *>(&raw[u]);
                float wv[8];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    wv[e] = DT == NA_CU_F16 ? na_cu_h2f(hs[e]) : na_cu_bf2f(hs[e]);
#pragma unroll
                for (int b = 0; b < NBT; b++)
                    if (b < nb) {
                        const float4 *xb = reinterpret_cast<const float4 *>(
                            x + (size_t)b * (size_t)cols + (size_t)c8 * 8);
                        float4 x0 = xb[0], x1 = xb[1];
                        acc[b] += wv[0] * x0.x; acc[b] += wv[1] * x0.y;
                        acc[b] += wv[2] * x0.z; acc[b] += wv[3] * x0.w;
                        acc[b] += wv[4] * x1.x; acc[b] += wv[5] * x1.y;
                        acc[b] += wv[6] * x1.z; acc[b] += wv[7] * x1.w;
                    }
            }
        }
    } else {
        size_t base = (size_t)r * (size_t)cols;
        for (int j = lane; j < cols; j += 32) {
            float wj = na_cu_load<DT>(w, base + (size_t)j);
#pragma unroll
            for (int b = 0; b < NBT; b++)
                if (b < nb)
                    acc[b] += wj * x[(size_t)b * (size_t)cols + (size_t)j];
        }
    }
#pragma unroll
    for (int b = 0; b < NBT; b++) {
        float s = na_cu_warp_sum(acc[b]);
        if (lane == 0 && b < nb)
            y[(size_t)b * (size_t)rows + (size_t)r] = s;
    }
}

template <int DT, bool VEC, int NBT, int U>
static void na_cu_gemv_go(cudaStream_t s, float *y, const float *x, const void *w, int rows,
                          int cols, int nb)
{
    unsigned blocks = (unsigned)((rows + NA_CU_GEMV_WARPS - 1) / NA_CU_GEMV_WARPS);
    na_cu_gemv_k<DT, VEC, NBT, U><<<blocks, 32 * NA_CU_GEMV_WARPS, 0, s>>>(y, x, w, rows, cols,
                                                                         nb);
}

/* NA_CUDA_GEMV (na_kernels_cuda_create refuses any other value): 1 u4
 * (the default), 0 u8, 2 nb8. Read once. */
static int na_cu_gemv_variant(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("NA_CUDA_GEMV");
        v = e != NULL && strcmp(e, "u8") == 0 ? 0 : e != NULL && strcmp(e, "nb8") == 0 ? 2 : 1;
    }
    return v;
}

template <int DT, bool VEC>
static void na_cu_gemv_launch(cudaStream_t s, float *y, const float *x, const void *w,
                              int rows, int cols, int nb)
{
    const int NB = NA_CU_GEMV_MAX_BATCH;
    int v = na_cu_gemv_variant();
    if constexpr (!VEC)
        na_cu_gemv_go<DT, false, NB, 8>(s, y, x, w, rows, cols, nb);
    else if (v == 2)
        na_cu_gemv_go<DT, VEC, NB, 8>(s, y, x, w, rows, cols, nb);
    else if (v == 1 && nb == 1)
        na_cu_gemv_go<DT, VEC, 1, 4>(s, y, x, w, rows, cols, nb);
    else if (v == 1 && nb == 2)
        na_cu_gemv_go<DT, VEC, 2, 4>(s, y, x, w, rows, cols, nb);
    else if (v == 1 && nb <= 4)
        na_cu_gemv_go<DT, VEC, 4, 4>(s, y, x, w, rows, cols, nb);
    else if (v == 1)
        na_cu_gemv_go<DT, VEC, NB, 4>(s, y, x, w, rows, cols, nb);
    else if (nb == 1)
        na_cu_gemv_go<DT, VEC, 1, 8>(s, y, x, w, rows, cols, nb);
    else if (nb == 2)
        na_cu_gemv_go<DT, VEC, 2, 8>(s, y, x, w, rows, cols, nb);
    else if (nb <= 4)
        na_cu_gemv_go<DT, VEC, 4, 8>(s, y, x, w, rows, cols, nb);
    else
        na_cu_gemv_go<DT, VEC, NB, 8>(s, y, x, w, rows, cols, nb);
}

extern "C" int na_cu_gemv(void *stream, float *y, const float *x, const void *w, int dtype,
                          int rows, int cols, int batch)
{
    cudaStream_t s = (cudaStream_t)stream;
    bool vec = cols % 8 == 0 && ((uintptr_t)w % 16) == 0 && ((uintptr_t)x % 16) == 0;
    const int NB = NA_CU_GEMV_MAX_BATCH;
    for (int b0 = 0; b0 < batch; b0 += NB) {
        int nb = batch - b0 < NB ? batch - b0 : NB;
        float *yb = y + (size_t)b0 * (size_t)rows;
        const float *xb = x + (size_t)b0 * (size_t)cols;
        if (dtype == NA_CU_F16 && vec)
            na_cu_gemv_launch<NA_CU_F16, true>(s, yb, xb, w, rows, cols, nb);
        else if (dtype == NA_CU_F16)
            na_cu_gemv_launch<NA_CU_F16, false>(s, yb, xb, w, rows, cols, nb);
        else if (dtype == NA_CU_BF16 && vec)
            na_cu_gemv_launch<NA_CU_BF16, true>(s, yb, xb, w, rows, cols, nb);
        else if (dtype == NA_CU_BF16)
            na_cu_gemv_launch<NA_CU_BF16, false>(s, yb, xb, w, rows, cols, nb);
        else
            na_cu_gemv_launch<NA_CU_F32, false>(s, yb, xb, w, rows, cols, nb);
        int e = na_cu_last();
        if (e != 0)
            return e;
    }
    return 0;
}

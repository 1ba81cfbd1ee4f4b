// kernels/cuda/cuda_half.cu — f16 activations for the tensor-core GEMM of
// f16 weights without overflow: each row of x is scaled by a power of two
// 2^-e (e >= 0, chosen so that max|x_row| < 2^15) before the rounding to
// f16, and the GEMM's output row is scaled back by 2^e. Power-of-two
// scaling is exact, so a row with max|x| < 2^15 (e = 0) rounds exactly as a
// plain f32 -> f16 conversion, and a row beyond f16's range (|x| > 65504
// became inf) keeps f16's relative precision instead. bf16 has f32's
// exponent range and needs none of this.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"

#define NA_CU_HALF_THREADS 256

// One block per row: e = max(0, p - 15) where max|x_row| = m * 2^p, m in
// [0.5, 1) (frexpf), so max|x_row| * 2^-e < 2^15; non-finite rows keep e = 0
// (inf / nan propagate as through f32).
__global__ void na_cu_to_f16_scaled_k(__half *dst, int *exp_out, const float *src, int cols)
{
    __shared__ float red[NA_CU_HALF_THREADS / 32];
    __shared__ int e_row;
    const float *x = src + (size_t)blockIdx.x * cols;
    __half *h = dst + (size_t)blockIdx.x * cols;
    float m = 0.0f;
    int i;

    for (i = threadIdx.x; i < cols; i += blockDim.x)
        m = fmaxf(m, fabsf(x[i]));
    m = na_cu_warp_max(m);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        int p = 0;
        m = red[0];
        for (i = 1; i < (int)(blockDim.x >> 5); i++)
            m = fmaxf(m, red[i]);
        e_row = 0;
        if (isfinite(m)) {
            (void)frexpf(m, &p);
            e_row = p > 15 ? p - 15 : 0;
        }
        exp_out[blockIdx.x] = e_row;
    }
    __syncthreads();
    for (i = threadIdx.x; i < cols; i += blockDim.x)
        h[i] = __float2half_rn(ldexpf(x[i], -e_row));
}

// y[b][:] *= 2^exp[b]
__global__ void na_cu_unscale_rows_k(float *y, const int *exp_in, int rows)
{
    int e = exp_in[blockIdx.x];
    float *yr = y + (size_t)blockIdx.x * rows;
    if (e == 0)
        return;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < rows; i += gridDim.y * blockDim.x)
        yr[i] = ldexpf(yr[i], e);
}

extern "C" int na_cu_to_f16_scaled(void *stream, void *dst, int *exp_out, const float *src,
                                   int cols, int batch)
{
    if (batch <= 0 || cols <= 0)
        return 0;
    na_cu_to_f16_scaled_k<<<batch, NA_CU_HALF_THREADS, 0, (cudaStream_t)stream>>>(
        static_cast<__half *>(dst), exp_out, src, cols);
    return (int)cudaGetLastError();
}

extern "C" int na_cu_unscale_rows(void *stream, float *y, const int *exp_in, int rows, int batch)
{
    unsigned gy = (unsigned)((rows + NA_CU_HALF_THREADS - 1) / NA_CU_HALF_THREADS);
    if (batch <= 0 || rows <= 0)
        return 0;
    if (gy > 64)
        gy = 64;
    na_cu_unscale_rows_k<<<dim3((unsigned)batch, gy), NA_CU_HALF_THREADS, 0,
                           (cudaStream_t)stream>>>(y, exp_in, rows);
    return (int)cudaGetLastError();
}

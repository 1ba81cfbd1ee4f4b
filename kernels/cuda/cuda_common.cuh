/* kernels/cuda/cuda_common.cuh — device helpers the .cu files share: element
 * loads of every dtype as f32, warp and block reductions. */
#ifndef NA_KERNELS_CUDA_COMMON_CUH
#define NA_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define NA_CU_F32  0
#define NA_CU_F16  1
#define NA_CU_BF16 2
#define NA_CU_Q8_0 3
#define NA_CU_Q4_0 4
#define NA_CU_Q4_1 5
#define NA_CU_Q5_0 6
#define NA_CU_Q5_1 7
#define NA_CU_Q4_K 8
#define NA_CU_Q5_K 9
#define NA_CU_Q6_K 10
#define NA_CU_QK_K 256
#define NA_CU_Q8_BLOCK      32

static __device__ __forceinline__ float na_cu_h2f(unsigned short h)
{
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ float na_cu_bf2f(unsigned short h)
{
    return __bfloat162float(__ushort_as_bfloat16(h));
}

/* Element idx of a row-major f32/f16/bf16 array as f32. */
template <int DT>
static __device__ __forceinline__ float na_cu_load(const void *p, size_t idx)
{
    if (DT == NA_CU_F32)
        return static_cast<const float *>(p)[idx];
    unsigned short h = static_cast<const unsigned short *>(p)[idx];
    return DT == NA_CU_F16 ? na_cu_h2f(h) : na_cu_bf2f(h);
}

static __device__ __forceinline__ float na_cu_warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static __device__ __forceinline__ float na_cu_warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max) of v over the block (blockDim.x a multiple of 32, <= 1024);
 * every thread gets the result. sh: 32 floats of shared memory. */
static __device__ __forceinline__ float na_cu_block_sum(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = na_cu_warp_sum(v);
    __syncthreads();                    /* sh may still be read by a previous call */
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return na_cu_warp_sum(v);
}

static __device__ __forceinline__ float na_cu_block_max(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = na_cu_warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return na_cu_warp_max(v);
}

/* Blocks of `threads` threads covering n elements, capped (grid-stride loops
 * take the rest). */
static inline unsigned na_cu_grid(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return b == 0 ? 1u : b > 65535u * 16u ? 65535u * 16u : (unsigned)b;
}

#endif /* NA_KERNELS_CUDA_COMMON_CUH */

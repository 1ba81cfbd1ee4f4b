/* kernels/cuda/cuda_quant.cu — the GEMV and the embedding of quantised
 * weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) in the layout
 * place() repacks them to (one 16-byte aligned array per field:
 * cuda_launch.h, cuda_qpack.c). The codes are unpacked in registers; no
 * dequantised copy of a weight exists anywhere.
 *
 * The arithmetic is kernels/ref/ref_quant.c's definition (ggml's vec_dot):
 * x is quantised once per call, to Q8 blocks of 32 (Q8_0 and the legacy
 * types) or to Q8_K blocks of 256 (the K-quants), bit for bit as
 * na_ref_quantize_q8 / _q8_1 / _q8k, ggml's quantisers (q =
 * round-to-nearest-even(x * (127 / max|x|)); d = f16(max|x| / 127) for Q8
 * blocks, 1 / (127 / max|x|) for Q8_K; d = 0: all zero; a NaN or Inf in
 * the block: d = NaN, q = 0); for Q4_1 / Q5_1 each block of 32 also gets
 * ggml's Q8_1 s = f16(sum q * (max|x| / 127)), the f32 d before its f16
 * rounding, f16 rounded to nearest even and kept as it is where f16 would
 * overflow (na_ref_f16_round; NaN for a NaN/Inf block), written by the
 * same quantiser kernel. Per weight block the integer sums are exact in
 * int32 (__dp4a over 4 codes at a time; a centred code q - o is summed as
 * sum q x - o sum x, the same integer), and the block adds the reference's
 * f32 terms:
 *   Q8_0, Q4_0, Q5_0   isum * (d_w * d_x)
 *   Q4_1, Q5_1         isum * (d_w * d_x) + m_w * s_x
 *                      (the reference sums the two terms in two sums, the
 *                      cpu backend the second with fmaf: only the order of
 *                      the additions differs)
 *   Q4_K, Q5_K         (d * d_x) * sumi - (dmin * d_x) * summ
 *   Q6_K               (d * d_x) * sumi
 * Only the order of the f32 sum over blocks differs from the reference
 * (lanes, then the warp's butterfly), as in the CPU's fast kernels.
 *
 * Shape (the f16 GEMV's): one warp per output row, NA_CU_QW_WARPS rows a
 * block, up to NA_CU_GEMV_MAX_BATCH rows of x per launch (acc[b] in
 * registers, each weight block read once for all of them). 32-element
 * types: a lane takes one block per step. K-quants: 8 lanes take one
 * super-block (a lane per 32 elements), their int32 partial sums joined by
 * three exact integer shuffles before the block's f32 term.
 *
 * Q8_0 is bit-exact with the kernel before the repack (which read each
 * 34-byte block as 17 two-byte loads): the same lane takes the same blocks
 * in the same order, the 8 dp4a run over the same byte words in the same
 * order, the f32 term is the same expression of the same f16 scale, and the
 * warp reduction is unchanged; only where the bytes come from moved. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/cuda_qcodes.h"

#define NA_CU_QW_WARPS 4
#define NA_CU_QT 256
#define NB NA_CU_GEMV_MAX_BATCH

static int na_cu_qlast(void)
{
    return (int)cudaGetLastError();
}

/* ---- x in Q8 / Q8_K blocks ------------------------------------------------- */

/* v rounded to f16 and back, nearest even; v itself where f16 overflows
 * (na_ref_f16_round: finite v, f16 inf). */
static __device__ __forceinline__ float na_cu_f16_round(float v)
{
    float h = __half2float(__float2half_rn(v));
    return isinf(h) && !isinf(v) ? v : h;
}

/* One warp per block of 32 inputs: q (int8, as x) and d (one per block);
 * s (NULL: not wanted) Q8_1's f16(sum q * d32) per block, with d32 the f32
 * d before its rounding, as na_ref_quantize_q8_1. */
__global__ void na_cu_quant_q8_k(signed char *q, float *d, float *s, const float *x,
                                 size_t n_blocks)
{
    size_t w0 = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    size_t stride = ((size_t)gridDim.x * blockDim.x) >> 5;
    int lane = threadIdx.x & 31;
    for (size_t blk = w0; blk < n_blocks; blk += stride) {
        float v = x[blk * NA_CU_Q8_BLOCK + (size_t)lane], a = fabsf(v);
        bool bad = __any_sync(0xffffffffu, !(a <= 3.0e38f));
        float amax = na_cu_warp_max(bad ? 0.0f : a);
        float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
        float d32 = __fdiv_rn(amax, 127.0f);
        int c = bad ? 0 : __float2int_rn(__fmul_rn(v, id));
        q[blk * NA_CU_Q8_BLOCK + (size_t)lane] = (signed char)c;
        if (s != NULL) {                         /* the same on every lane */
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)     /* exact: |sum| <= 32 * 127 */
                c += __shfl_xor_sync(0xffffffffu, c, o);
        }
        if (lane == 0) {
            d[blk] = bad ? __int_as_float(0x7fc00000) : na_cu_f16_round(d32);
            if (s != NULL)
                s[blk] = bad ? __int_as_float(0x7fc00000) : na_cu_f16_round(__fmul_rn((float)c, d32));
        }
    }
}

/* One warp per block of 256 inputs (8 a lane): as na_ref_quantize_q8k (its
 * bsums are not needed: the GEMV sums the codes it reads). */
__global__ void na_cu_quant_q8k_k(signed char *q, float *d, const float *x, size_t n_blocks)
{
    size_t w0 = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5;
    size_t stride = ((size_t)gridDim.x * blockDim.x) >> 5;
    int lane = threadIdx.x & 31;
    for (size_t blk = w0; blk < n_blocks; blk += stride) {
        const float *xb = x + blk * NA_CU_QK_K + (size_t)lane * 8;
        float v[8], amax = 0.0f;
        bool bad = false;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            float a;
            v[e] = xb[e];
            a = fabsf(v[e]);
            if (!(a <= 3.0e38f))
                bad = true;
            else
                amax = fmaxf(amax, a);
        }
        bad = __any_sync(0xffffffffu, bad);
        amax = na_cu_warp_max(bad ? 0.0f : amax);
        float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
        float dd = amax != 0.0f ? __fdiv_rn(1.0f, id) : 0.0f;
        unsigned lo = 0, hi = 0;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            lo |= (unsigned)(unsigned char)(signed char)(bad ? 0 : __float2int_rn(__fmul_rn(v[e], id)))
                  << (8 * e);
            hi |= (unsigned)(unsigned char)(signed char)(bad ? 0 : __float2int_rn(__fmul_rn(v[e + 4], id)))
                  << (8 * e);
        }
        reinterpret_cast<uint2 *>(q + blk * NA_CU_QK_K)[lane] = make_uint2(lo, hi);
        if (lane == 0)
            d[blk] = bad ? __int_as_float(0x7fc00000) : dd;
    }
}

/* ---- the GEMVs (the per-block arithmetic: cuda_qcodes.h) ---------------------- */

template <int DT>
__global__ void na_cu_gemv_q32_k(float *y, const signed char *qx, const float *dx, const float *sx,
                                 na_cu_qw_t w, int rows, int cols, int nb)
{
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * NA_CU_QW_WARPS + (threadIdx.x >> 5);
    int nblk = cols / NA_CU_Q8_BLOCK;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;
    if (r >= rows)
        return;                                  /* whole warp: no shuffles follow for it */
    for (int bi = lane; bi < nblk; bi += 32) {
        size_t gb = (size_t)r * (size_t)nblk + (size_t)bi;
        int wq[8];
        float dw = na_cu_h2f(w.d[gb]);
        float mw = DT == NA_CU_Q4_1 || DT == NA_CU_Q5_1 ? na_cu_h2f(w.m[gb]) : 0.0f;
        na_qc_codes32(DT, &w, gb, wq);
#pragma unroll
        for (int b = 0; b < NB; b++)
            if (b < nb) {
                const int4 *xq = reinterpret_cast<const int4 *>(
                    qx + (size_t)b * (size_t)cols + (size_t)bi * NA_CU_Q8_BLOCK);
                int4 x0 = xq[0], x1 = xq[1];
                int xw[8] = { x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w };
                size_t xb = (size_t)b * nblk + bi;
                acc[b] += na_qc_term32(DT, dw, mw, wq, xw, dx[xb],
                                       DT == NA_CU_Q4_1 || DT == NA_CU_Q5_1 ? sx[xb] : 0.0f);
            }
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        float s = na_cu_warp_sum(acc[b]);
        if (lane == 0 && b < nb)
            y[(size_t)b * (size_t)rows + (size_t)r] = s;
    }
}

template <int DT>
__global__ void na_cu_gemv_qk_k(float *y, const signed char *qx, const float *dx, na_cu_qw_t w,
                                int rows, int cols, int nb)
{
    int lane = threadIdx.x & 31, s = lane & 7;
    int r = blockIdx.x * NA_CU_QW_WARPS + (threadIdx.x >> 5);
    int nsb = cols / NA_CU_QK_K;
    float acc[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        acc[b] = 0.0f;
    if (r >= rows)
        return;                                  /* whole warp */
    /* the loop runs the same steps on every lane (the shuffles need all);
     * the lanes of a super-block past the row's end add nothing */
    for (int j0 = 0; j0 < nsb * 8; j0 += 32) {
        int j = j0 + lane, sb = j >> 3;
        bool ok = j < nsb * 8;                   /* the same for the 8 lanes of sb */
        size_t gb = (size_t)r * (size_t)nsb + (size_t)(ok ? sb : 0);
        int wq[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
        if (ok)
            na_qc_codes256(DT, &w, gb, s, wq);
#pragma unroll
        for (int b = 0; b < NB; b++)
            if (b < nb) {                        /* nb: the same on every lane */
                int xw[8] = { 0, 0, 0, 0, 0, 0, 0, 0 }, sumi = 0, summ = 0;
                if (ok) {
                    const int4 *xq = reinterpret_cast<const int4 *>(
                        qx + (size_t)b * (size_t)cols + (size_t)sb * NA_CU_QK_K + (size_t)s * 32);
                    int4 x0 = xq[0], x1 = xq[1];
                    xw[0] = x0.x; xw[1] = x0.y; xw[2] = x0.z; xw[3] = x0.w;
                    xw[4] = x1.x; xw[5] = x1.y; xw[6] = x1.z; xw[7] = x1.w;
                    na_qc_part256(DT, &w, gb, s, wq, xw, &sumi, &summ);
                }
                /* exact: the super-block's int32 sums over its 8 lanes */
#pragma unroll
                for (int o = 1; o < 8; o <<= 1) {
                    sumi += __shfl_xor_sync(0xffffffffu, sumi, o);
                    summ += __shfl_xor_sync(0xffffffffu, summ, o);
                }
                if (ok && s == 0)
                    acc[b] += na_qc_term256(DT, &w, gb, sumi, summ, dx[(size_t)b * nsb + sb]);
            }
    }
#pragma unroll
    for (int b = 0; b < NB; b++) {
        float v = na_cu_warp_sum(acc[b]);
        if (lane == 0 && b < nb)
            y[(size_t)b * (size_t)rows + (size_t)r] = v;
    }
}

/* The codes (padded to 16 bytes), then d and (Q4_1 / Q5_1) s per block of 32. */
extern "C" size_t na_cu_gemv_q8_scratch(int cols, int batch)
{
    size_t n = (size_t)batch * (size_t)cols;
    return ((n + 15) & ~(size_t)15) + 2 * (n / NA_CU_Q8_BLOCK) * sizeof(float);
}

template <int DT>
static void na_cu_gemv_q_launch(cudaStream_t s, unsigned blocks, float *y, const signed char *qx,
                                const float *dx, const float *sx, const na_cu_qw_t &w, int rows,
                                int cols, int nb)
{
    if constexpr (DT == NA_CU_Q4_K || DT == NA_CU_Q5_K || DT == NA_CU_Q6_K)
        na_cu_gemv_qk_k<DT><<<blocks, 32 * NA_CU_QW_WARPS, 0, s>>>(y, qx, dx, w, rows, cols, nb);
    else
        na_cu_gemv_q32_k<DT><<<blocks, 32 * NA_CU_QW_WARPS, 0, s>>>(y, qx, dx, sx, w, rows, cols,
                                                                      nb);
}

extern "C" int na_cu_gemv_quant(void *stream, float *y, const float *x, const na_cu_qw_t *w,
                                int dtype, int rows, int cols, int batch, void *scratch)
{
    cudaStream_t s = (cudaStream_t)stream;
    bool kq = dtype == NA_CU_Q4_K || dtype == NA_CU_Q5_K || dtype == NA_CU_Q6_K;
    bool q1 = dtype == NA_CU_Q4_1 || dtype == NA_CU_Q5_1;
    int xblk = kq ? NA_CU_QK_K : NA_CU_Q8_BLOCK;
    size_t n = (size_t)batch * (size_t)cols, nblk = n / (size_t)xblk;
    signed char *qx = static_cast<signed char *>(scratch);
    float *dx = reinterpret_cast<float *>(static_cast<char *>(scratch) + ((n + 15) & ~(size_t)15));
    float *sx = dx + n / NA_CU_Q8_BLOCK;
    unsigned blocks = (unsigned)((rows + NA_CU_QW_WARPS - 1) / NA_CU_QW_WARPS);
    if (batch <= 0)
        return 0;
    if (kq)
        na_cu_quant_q8k_k<<<na_cu_grid(nblk * 32, NA_CU_QT), NA_CU_QT, 0, s>>>(qx, dx, x, nblk);
    else
        na_cu_quant_q8_k<<<na_cu_grid(nblk * 32, NA_CU_QT), NA_CU_QT, 0, s>>>(qx, dx, q1 ? sx : NULL,
                                                                              x, nblk);
    for (int b0 = 0; b0 < batch; b0 += NB) {
        int nb = batch - b0 < NB ? batch - b0 : NB, e;
        float *yb = y + (size_t)b0 * (size_t)rows;
        const signed char *qb = qx + (size_t)b0 * (size_t)cols;
        const float *db = dx + (size_t)b0 * (size_t)(cols / xblk);
        const float *sb = sx + (size_t)b0 * (size_t)(cols / xblk);
        switch (dtype) {
        case NA_CU_Q8_0: na_cu_gemv_q_launch<NA_CU_Q8_0>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q4_0: na_cu_gemv_q_launch<NA_CU_Q4_0>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q4_1: na_cu_gemv_q_launch<NA_CU_Q4_1>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q5_0: na_cu_gemv_q_launch<NA_CU_Q5_0>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q5_1: na_cu_gemv_q_launch<NA_CU_Q5_1>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q4_K: na_cu_gemv_q_launch<NA_CU_Q4_K>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q5_K: na_cu_gemv_q_launch<NA_CU_Q5_K>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        case NA_CU_Q6_K: na_cu_gemv_q_launch<NA_CU_Q6_K>(s, blocks, yb, qb, db, sb, *w, rows, cols, nb); break;
        default:         return (int)cudaErrorInvalidValue;
        }
        if ((e = na_cu_qlast()) != 0)
            return e;
    }
    return 0;
}

/* ---- embedding ------------------------------------------------------------------ */

template <int DT>
__global__ void na_cu_embed_q_k(float *x, na_cu_qw_t w, int cols, const int *tokens)
{
    const int blk = DT == NA_CU_Q4_K || DT == NA_CU_Q5_K || DT == NA_CU_Q6_K ? NA_CU_QK_K
                                                                              : NA_CU_Q8_BLOCK;
    size_t row = (size_t)tokens[blockIdx.x] * (size_t)(cols / blk);
    float *xr = x + (size_t)blockIdx.x * (size_t)cols;
    for (int j = threadIdx.x; j < cols; j += blockDim.x)
        xr[j] = na_qc_deq(DT, &w, row + (size_t)(j / blk), j % blk);
}

extern "C" int na_cu_embed_quant(void *stream, float *x, const na_cu_qw_t *w, int dtype, int cols,
                                 const int *tokens, int n)
{
    cudaStream_t s = (cudaStream_t)stream;
    if (n <= 0)
        return 0;
    switch (dtype) {
    case NA_CU_Q8_0: na_cu_embed_q_k<NA_CU_Q8_0><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q4_0: na_cu_embed_q_k<NA_CU_Q4_0><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q4_1: na_cu_embed_q_k<NA_CU_Q4_1><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q5_0: na_cu_embed_q_k<NA_CU_Q5_0><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q5_1: na_cu_embed_q_k<NA_CU_Q5_1><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q4_K: na_cu_embed_q_k<NA_CU_Q4_K><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q5_K: na_cu_embed_q_k<NA_CU_Q5_K><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    case NA_CU_Q6_K: na_cu_embed_q_k<NA_CU_Q6_K><<<n, NA_CU_QT, 0, s>>>(x, *w, cols, tokens); break;
    default:         return (int)cudaErrorInvalidValue;
    }
    return na_cu_qlast();
}

/* kernels/cuda/cuda_launch.h — the C ABI of the CUDA kernels (cuda_*.cu).
 *
 * The .cu files hold only device code and these launchers; everything else
 * of the backend (buffers, events, argument checks, cuBLAS calls) is C11 in
 * cuda_backend.c and cuda_ops.c. The launchers take raw device addresses
 * (or mapped pinned host addresses), already checked by the caller, and the
 * stream as `void *` (a cudaStream_t); they enqueue and return the launch's
 * cudaError_t as an int (0: cudaSuccess). Dtypes are na_dtype_t values
 * (0 f32, 1 f16, 2 bf16, 3 q8_0) passed as int so this header needs nothing
 * of common/. */
#ifndef NA_KERNELS_CUDA_LAUNCH_H
#define NA_KERNELS_CUDA_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[r] = row tokens[r] of table (vocab rows, cols, dtype) as f32, r < n. */
int na_cu_embed(void *stream, float *x, const void *table, int dtype, int cols,
                const int *tokens, int n);
/* x[i] += y[i]. */
int na_cu_add(void *stream, float *x, const float *y, size_t n);
/* dst[i] = src[i] converted to dtype (f32, f16, bf16; round to nearest even). */
int na_cu_store(void *stream, void *dst, int dtype, const float *src, size_t n);
/* out = x / rms(x) * w per row of n, batch rows. */
int na_cu_rmsnorm(void *stream, float *out, const float *x, const float *w, int n,
                  float eps, int batch);
/* RoPE, position pos[b] for row b (pos: device-readable): pair i of each
 * head turns by pos * freq[i] (freq: the host's table, uploaded; n_dims/2
 * entries), cos/sin times mscale; neox 0 pairs (2i, 2i+1), 1 (i, i+n_dims/2). */
int na_cu_rope(void *stream, float *vec, int n_heads, int head_dim, int n_dims, int neox,
               const float *freq, float mscale, const int *pos, int batch);
/* x[b*n + i] += bias[i], batch rows of n. */
int na_cu_bias(void *stream, float *x, const float *bias, int n, int batch);
/* gate[i] = silu(gate[i]) * up[i]. */
int na_cu_swiglu(void *stream, float *gate, const float *up, size_t n);
/* In-place softmax of batch rows of n. */
int na_cu_softmax(void *stream, float *x, int n, int batch);
/* Row-wise argmax of batch rows of n into idx[b] (first of equal maxima). */
int na_cu_argmax(void *stream, int *idx, const float *x, int n, int batch);
/* dst[i] = src[i] as f16 (dtype 1) or bf16 (dtype 2): activations for a
 * tensor-core GEMM. */
int na_cu_to_half(void *stream, void *dst, int dtype, const float *src, size_t n);
/* (cuda_half.cu) Row b of x (batch rows of cols) as f16 scaled by 2^-exp[b],
 * exp[b] >= 0 the least keeping max|x_b| below 2^15 (0 for rows within f16's
 * range: then bit-equal to na_cu_to_half); na_cu_unscale_rows multiplies row
 * b of y (batch rows of `rows`) by 2^exp[b] after the GEMM. exp: device. */
int na_cu_to_f16_scaled(void *stream, void *dst, int *exp_out, const float *src, int cols,
                        int batch);
int na_cu_unscale_rows(void *stream, float *y, const int *exp_in, int rows, int batch);

/* The batch size up to which na_cu_gemv reads the weights once for all rows. */
#define NA_CU_GEMV_MAX_BATCH 8
/* y[b, rows] = W · x[b, cols], W (rows, cols) row-major in f32, f16 or bf16,
 * x and y f32, f32 accumulation; any batch (rows of x are taken
 * NA_CU_GEMV_MAX_BATCH at a time, each group reading W once). */
int na_cu_gemv(void *stream, float *y, const float *x, const void *w, int dtype, int rows,
               int cols, int batch);
/* The same for Q8_0 weights (cols % 32 == 0), x taken in Q8 blocks as
 * kernels/ref defines it; scratch: na_cu_gemv_q8_scratch(cols, batch) bytes
 * of device memory (16-byte aligned) for the quantised x. */
size_t na_cu_gemv_q8_scratch(int cols, int batch);
int    na_cu_gemv_q8(void *stream, float *y, const float *x, const void *w, int rows, int cols,
                     int batch, void *scratch);

/* ---- attention (cuda_attn.cu) ----------------------------------------------
 * Rows r < n_rows of q (n_heads*head_dim f32 each) attend to the first
 * ctx0 + r + 1 tokens (causal prefill; decode is n_rows = 1, ctx0 = ctx - 1)
 * of K/V laid out [token][kv_head][head_dim] in kv_dtype (f32, f16, bf16).
 * Flash-decoding: each block takes one KV head, one row and one split of
 * the context, reads each K/V row once for all query heads of the group and
 * keeps an online softmax; splits are merged by log-sum-exp. `scratch` holds
 * na_cu_attn_scratch_floats() floats for the split partials. */
typedef struct {
    int n_rows, ctx0, n_heads, n_kv_heads, head_dim, kv_dtype;
    int n_splits;          /* from na_cu_attn_plan */
    int split_len;         /* tokens per split */
} na_cu_attn_shape_t;

/* Choose the splits of s for a device of n_sm multiprocessors: enough blocks
 * to fill it, splits of at least 64 tokens. 0, or -1 for a shape the kernels
 * do not take (head_dim > 256). */
int    na_cu_attn_plan(na_cu_attn_shape_t *s, int n_sm);
size_t na_cu_attn_scratch_floats(const na_cu_attn_shape_t *s);
int    na_cu_attn(void *stream, float *out, const float *q, const void *kc, const void *vc,
                  const na_cu_attn_shape_t *s, float *scratch);

/* Batched decode (UNVERIFIED: never run on a GPU): one launch for n_req
 * requests of one shape (s: n_rows 1, ctx0 = the longest context - 1, planned
 * by na_cu_attn_plan_batch), request i reading reqs[i] (a device-readable
 * array: mapped pinned memory) and attending to its first ctx tokens (0:
 * zeros). scratch: n_req * na_cu_attn_scratch_floats(s) floats. */
typedef struct {
    float       *out;
    const float *q;
    const void  *k, *v;
    int          ctx, pad_;
} na_cu_attn_req_t;
int    na_cu_attn_plan_batch(na_cu_attn_shape_t *s, int n_req, int n_sm);
int    na_cu_attn_batch(void *stream, const na_cu_attn_req_t *reqs, int n_req,
                        const na_cu_attn_shape_t *s, float *scratch);

#ifdef __cplusplus
}
#endif

#endif /* NA_KERNELS_CUDA_LAUNCH_H */

/* kernels/cuda/cuda_launch.h — the C ABI of the CUDA kernels (cuda_*.cu).
 *
 * The .cu files hold only device code and these launchers; everything else
 * of the backend (buffers, events, argument checks, cuBLAS calls) is C11 in
 * cuda_backend.c and cuda_ops.c. The launchers take raw device addresses
 * (or mapped pinned host addresses), already checked by the caller, and the
 * stream as `void *` (a cudaStream_t); they enqueue and return the launch's
 * cudaError_t as an int (0: cudaSuccess). Dtypes are na_dtype_t values
 * (0 f32, 1 f16, 2 bf16, 3 q8_0, 4..10 the other quants) passed as int so this header needs nothing
 * of common/. */
#ifndef NA_KERNELS_CUDA_LAUNCH_H
#define NA_KERNELS_CUDA_LAUNCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[r] = row tokens[r] of table (vocab rows, cols, dtype f32/f16/bf16) as f32, r < n. */
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
/* ---- quantised weights (cuda_qpack.c, cuda_quant.cu) -----------------------
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (dtype 3..10; layouts in
 * common/dtype.h) are repacked by place(): GGML's array of interleaved
 * blocks (34, 18, ... 210 bytes: 2-byte aligned at best) becomes one array
 * per field, each starting 16-byte aligned, so that a lane reads a block's
 * codes with 16-byte loads and the scales of neighbouring blocks sit side by
 * side. The bytes are GGML's own (no value changes), except the 12 packed
 * 6-bit scale/min bytes of Q4_K/Q5_K, unpacked to 8 scales then 8 mins. */
typedef struct {
    const unsigned char  *qs;   /* codes: Q8_0 32 B a block (int8); Q4_0..Q5_1 16 B (nibbles);
                                 * K-quants 128 B (Q4_K/Q5_K qs, Q6_K ql) */
    const unsigned char  *qh;   /* high bits: Q5_0/Q5_1 4 B, Q5_K 32 B, Q6_K 64 B; else NULL */
    const unsigned char  *sc;   /* K-quants 16 B: Q4_K/Q5_K 8 scales, 8 mins; Q6_K 16 int8 */
    const unsigned short *d;    /* f16 scale, one a block */
    const unsigned short *m;    /* f16 min (Q4_1, Q5_1) or dmin (Q4_K, Q5_K); else NULL */
} na_cu_qw_t;

/* Bytes of n_blocks blocks of dtype repacked (0 for a type that is not
 * block-quantised); never less than GGML's n_blocks * block bytes. */
size_t na_cu_qpack_bytes(int dtype, size_t n_blocks);
/* The field arrays of n_blocks repacked blocks at base (host or device). */
void   na_cu_qpack_view(int dtype, const void *base, size_t n_blocks, na_cu_qw_t *qw);
/* Repack n_blocks GGML blocks at src into dst (na_cu_qpack_bytes bytes,
 * 16-byte aligned); host memory, no device call. */
void   na_cu_qpack(int dtype, const void *src, size_t n_blocks, void *dst);
/* The same a field and a range at a time (place() streams a weight through
 * its staging buffer this way): field 0 qs, 1 qh, 2 sc, 3 d, 4 m. Returns
 * the field's bytes a block (0: the type has no such field) and its array's
 * offset in the repacked layout of n_blocks; na_cu_qpack_blocks writes
 * blocks b0 .. b0+nb-1 of src's field to dst (nb * bytes a block). */
size_t na_cu_qpack_field(int dtype, int field, size_t n_blocks, size_t *off_p);
void   na_cu_qpack_blocks(int dtype, int field, const void *src, size_t b0, size_t nb,
                          void *dst);

/* y[b, rows] = W · x[b, cols] for repacked quantised W (cols a multiple of
 * the block), x taken as kernels/ref defines each type: in Q8 blocks of 32
 * (Q8_0 and the legacy types) or Q8_K blocks of 256 (K-quants), integer
 * block sums, f32 scales; any batch (NA_CU_GEMV_MAX_BATCH rows of x a
 * launch, each reading W once). scratch: na_cu_gemv_q8_scratch(cols, batch)
 * bytes of device memory (16-byte aligned) for the quantised x. */
size_t na_cu_gemv_q8_scratch(int cols, int batch);
int    na_cu_gemv_quant(void *stream, float *y, const float *x, const na_cu_qw_t *w, int dtype,
                        int rows, int cols, int batch, void *scratch);
/* x[r] = row tokens[r] of a repacked quantised table (cols a row) as f32,
 * dequantised exactly as na_ref_dequant_row does. */
int    na_cu_embed_quant(void *stream, float *x, const na_cu_qw_t *table, int dtype, int cols,
                         const int *tokens, int n);

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

/* Choose the splits of s for a device of n_sm multiprocessors from s alone
 * (cuda_attn.cu: enough blocks to fill it, splits of at least 512 / 64
 * tokens). 0, or -1 for a shape the kernels do not take (head_dim > 256). */
int    na_cu_attn_plan(na_cu_attn_shape_t *s, int n_sm);
size_t na_cu_attn_scratch_floats(const na_cu_attn_shape_t *s);
int    na_cu_attn(void *stream, float *out, const float *q, const void *kc, const void *vc,
                  const na_cu_attn_shape_t *s, float *scratch);

/* Batched decode: one launch for n_req requests of one shape (s: n_rows 1),
 * request i reading reqs[i] (a device-readable array: mapped pinned memory)
 * and attending to its first ctx tokens (0: zeros). na_cu_attn_plan_batch
 * plans each request as na_cu_attn_plan would alone (split_len, n_splits:
 * the batched result of a request is its single launch's, bit for bit) and
 * sets s->n_splits to the most. scratch: n_req * na_cu_attn_scratch_floats(s)
 * floats. */
typedef struct {
    float       *out;
    const float *q;
    const void  *k, *v;
    int          ctx;
    int          split_len, n_splits;   /* na_cu_attn_plan_batch */
    int          pad_;
} na_cu_attn_req_t;
int    na_cu_attn_plan_batch(na_cu_attn_shape_t *s, na_cu_attn_req_t *reqs, int n_req, int n_sm);
int    na_cu_attn_batch(void *stream, const na_cu_attn_req_t *reqs, int n_req,
                        const na_cu_attn_shape_t *s, float *scratch);

#ifdef __cplusplus
}
#endif

#endif /* NA_KERNELS_CUDA_LAUNCH_H */

/* kernels/ref/ref.h — plain scalar C reference kernels (no intrinsics).
 *
 * Every fast kernel is tested against these; the cpu backend also falls back
 * to them for shapes its vector paths do not cover (head_dim not a multiple
 * of 8). They allocate nothing, keep no state and may be called from any
 * thread. They take host pointers; the backend's table entries
 * (kernels/host/host.c) check the buffers and call them. */
#ifndef NA_KERNELS_REF_H
#define NA_KERNELS_REF_H

#include "kernels/host/host.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

/* Value j of row r of weight w, dequantised to f32 (any dtype). */
float na_ref_weight_at(const na_tensor_t *w, int r, int j);

/* x[0..n) as int8, as ggml's activation quantisers do it: with amax =
 * max|x| and iscale = 127 / amax (0 when amax = 0), q = round-to-nearest-
 * even(x * iscale); returns amax (the caller derives its block's d); NaN
 * with q all 0 when x holds a NaN or an infinity. (kernels/ref/ref_quant.c,
 * with the other input quantisers: ref_ops.c's Q8_0 path calls down into
 * it.) */
float na_ref_quantize_i8(const float *x, int n, int8_t *q);
/* Q8_0 weights are multiplied with their input in 8-bit blocks, as ggml's
 * Q8_0 x Q8_0 dot does: each block of 32 inputs is quantised to a Q8_0
 * block as ggml's quantize_row_q8_0 does (na_ref_quantize_i8's codes, and
 * d = max|x| / 127 rounded to f16 and back: the scale ggml stores;
 * na_ref_f16_round), the 32
 * products are summed exactly in int32, and the block adds
 * isum * (d_w * d_x) to the f32 sum. The inputs' rounding costs at most
 * 0.5/127 of each block's largest input plus 2^-11 of it for the f16 scale.
 * A block with a NaN or Inf gives d = NaN (q = 0) so a non-finite input
 * still makes a non-finite output.
 * Quantise the NA_Q8_0_BLOCK values x into q; returns d (an f16 value). */
float na_ref_quantize_q8(const float *x, int8_t *q);
/* v rounded to f16 and back (nearest even), as ggml stores Q8_0 / Q8_1
 * scales; where f16 would overflow (|v| >= 65520: ggml's block then holds
 * an infinity) v stays as it is, so huge activations still give finite
 * sums. NaN stays NaN. */
static inline float na_ref_f16_round(float v)
{
    uint16_t h = na_f32_to_f16(v);
    if ((h & 0x7fffu) == 0x7c00u && v == v && v - v == 0.0f)   /* finite v, f16 inf */
        return v;
    return na_f16_to_f32(h);
}

/* ---- the other GGML block formats (kernels/ref/ref_quant.c: the definition
 * of their dot products is at the top of that file) ---- */
/* Row of n elements of any dtype (n a multiple of its block) to f32. */
void na_ref_dequant_row(na_dtype_t dt, const void *row, float *out, int n);
/* Scale sc and min m (6 bits each) of sub-block j (0..7) of a Q4_K/Q5_K
 * block's 12 scale bytes s (ggml's get_scale_min_k4). */
static inline void na_ref_k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
/* Which inputs a weight type takes: 1 Q8 blocks of 32 (Q4_0, Q4_1, Q5_0,
 * Q5_1), 2 Q8_K blocks of 256 (Q4_K, Q5_K, Q6_K), 0 another type (the
 * f32/f16/bf16 paths, Q8_0's own na_ref_quantize_q8 path). */
int na_ref_quant_kind(na_dtype_t dt);
/* Inputs in blocks, as ggml's vec_dot_type of the weight type: q[n];
 * kind 1 (Q8_0 blocks for Q4_0/Q5_0, Q8_1 for Q4_1/Q5_1): d[n/32] (the
 * f16 scale), bsums[n/32] the sum of each block's q and s[n/32] Q8_1's s,
 * f16(amax / 127 * bsum) with the unrounded scale (what Q4_1/Q5_1's min
 * multiplies); kind 2 (Q8_K): d[n/256] and bsums[n/16] the sums of 16
 * (s unused, may be NULL). */
typedef struct {
    int8_t  *q;
    float   *d;
    int16_t *bsums;
    float   *s;
} na_ref_qx_t;
/* Quantise 256 inputs to a Q8_K block as ggml's quantize_row_q8_K_ref does:
 * na_ref_quantize_i8's codes (ggml's sign-flipped -127/max gives the same
 * products), d = 1 / iscale in f32 (0 when all inputs are 0; NaN/Inf ->
 * d = NaN, q = 0), plus the 16 sums of 16 q; returns d. */
float na_ref_quantize_q8k(const float *x, int8_t *q, int16_t *bsums);
/* One block of 32 inputs as a Q8_1 block (quantize_row_q8_1): q, d as
 * na_ref_quantize_q8, *bsum the sum of q, *s = f16(amax / 127 * bsum) as
 * f32; returns d. */
float na_ref_quantize_q8_1(const float *x, int8_t *q, int16_t *bsum, float *s);
/* x[n] into qx for weight type dt (kind 1 or 2). */
void na_ref_quantize_x(na_dtype_t dt, const float *x, int n, na_ref_qx_t *qx);
/* Row of n weights of type dt (kind 1 or 2) dotted with quantised inputs. */
float na_ref_vec_dot(na_dtype_t dt, const void *row, const na_ref_qx_t *qx, int n);
/* The same from f32 inputs, quantised block by block (no allocation). */
float na_ref_dot_quant(na_dtype_t dt, const void *row, const float *x, int n);
/* Value j of row r of a weight of a block type (any), via its block. */
float na_ref_quant_weight_at(const na_tensor_t *w, int r, int j);

/* BF16 weights at large batches on CPUs with AVX512-BF16
 * (kernels/cpu/cpu_gemm_bf16.c) take their inputs rounded to bf16:
 * y[b][r] = sum_j W[r][j] * bf16(x[b][j]), bf16() rounding to nearest even
 * (na_f32_to_bf16), each product exact in f32, summed in f32 left to right.
 * The fast kernel sums in another order and flushes denormal products: the
 * tests compare within the usual f32 summation tolerance. */
void na_ref_matmul_xbf16(float *y, const float *x, const na_tensor_t *w, int batch);

void na_ref_embed(float *x, const na_tensor_t *t, const int *tokens, int n);
void na_ref_add(float *x, const float *y, size_t n);
void na_ref_store(void *dst, na_dtype_t dtype, const float *src, size_t n);
void na_ref_rmsnorm(float *out, const float *x,
                    const float *weight, int n, float eps, int batch);
void na_ref_rope(float *vec, int n_heads, const int *pos, const na_rope_t *rope, int batch);
void na_ref_swiglu(float *gate, const float *up, size_t n);
void na_ref_softmax(float *x, int n, int batch);
/* The kernels that take the backend: types in kernels/host/host.h, kernels.h. */
na_khost_matmul_fn       na_ref_matmul;
na_khost_attn_prefill_fn na_ref_attn_prefill;
na_khost_attn_decode_fn  na_ref_attn_decode;
na_kattn_partial_fn      na_ref_attn_partial;

/* Backend constructors (kernels/backend.c dispatches by name). */
na_status_t na_kernels_ref_create(int n_threads, na_kernels_t **k_p);
na_status_t na_kernels_refdev_create(int n_threads, na_kernels_t **k_p);
/* "refdev:N": its emulated device holds N MiB; beyond that buf_alloc and
 * buf_resize of device memory fail with NA_ERR_NOMEM, as on a full GPU. */
na_status_t na_kernels_refdev_create_mb(int mb, na_kernels_t **k_p);
na_status_t na_kernels_cpu_create(int n_threads, na_kernels_t **k_p);

#endif /* NA_KERNELS_REF_H */

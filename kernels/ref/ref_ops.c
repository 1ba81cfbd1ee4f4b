/* kernels/ref/ref_ops.c — scalar reference kernels: matmul for every weight
 * dtype, rmsnorm, RoPE, SwiGLU, softmax, and the "ref" backend table.
 * Written to be obviously correct, in the order of llama2.c's run.c; speed
 * is not a goal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/expf.h"
#include "kernels/host/host.h"
#include "kernels/ref/ref.h"

/* Dequantise one weight element; cannot fail; w must be a valid tensor. */
float na_ref_weight_at(const na_tensor_t *w, int r, int j)
{
    size_t idx = (size_t)r * (size_t)w->cols + (size_t)j;

    switch (w->dtype) {
    case NA_DTYPE_F32:
        return ((const float *)w->data)[idx];
    case NA_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, (const uint8_t *)w->data + 2 * idx, 2);
        return na_f16_to_f32(h);
    }
    case NA_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, (const uint8_t *)w->data + 2 * idx, 2);
        return na_bf16_to_f32(h);
    }
    case NA_DTYPE_Q8_0: {
        /* Block b of row r starts at (r*cols/32 + b) * 34 bytes: f16 d, 32 x int8. */
        const uint8_t *blk = (const uint8_t *)w->data +
                             (idx / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
        uint16_t d;
        memcpy(&d, blk, 2);
        return na_f16_to_f32(d) * (float)(int8_t)blk[2 + idx % NA_Q8_0_BLOCK];
    }
    default:
        return na_ref_quant_weight_at(w, r, j);
    }
}

/* See ref.h. */
float na_ref_quantize_q8(const float *x, int8_t *q)
{
    float amax = na_ref_quantize_i8(x, NA_Q8_0_BLOCK, q);
    /* NaN stays NaN through the f16 round trip */
    return na_ref_f16_round(amax / 127.0f);
}

/* Row r of Q8_0 weight w dotted with the Q8 blocks of x (see ref.h). */
static float na_ref_dot_q8(const na_tensor_t *w, int r, const float *x)
{
    const uint8_t *row = (const uint8_t *)w->data +
                         (size_t)r * (size_t)(w->cols / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
    float sum = 0.0f;
    int b, j;

    for (b = 0; b < w->cols / NA_Q8_0_BLOCK; b++) {
        const uint8_t *blk = row + (size_t)b * NA_Q8_0_BLOCK_SIZE;
        int8_t qx[NA_Q8_0_BLOCK];
        float dx = na_ref_quantize_q8(x + (size_t)b * NA_Q8_0_BLOCK, qx);
        int32_t isum = 0;
        uint16_t dw;
        memcpy(&dw, blk, 2);
        for (j = 0; j < NA_Q8_0_BLOCK; j++)
            isum += (int32_t)(int8_t)blk[2 + j] * qx[j];
        sum += (float)isum * (na_f16_to_f32(dw) * dx);
    }
    return sum;
}

/* y[b][r] = sum_j W[r][j] * x[b][j], summed in f32 left to right; Q8_0
 * weights take x in Q8 blocks (see ref.h). */
void na_ref_matmul(na_kernels_t *k, float *y, const float *x,
                   const na_tensor_t *w, int batch)
{
    (void)k;       /* ops-table signature: the reference needs no backend state */
    int b, r, j;
    for (b = 0; b < batch; b++) {
        const float *xb = x + (size_t)b * w->cols;
        for (r = 0; r < w->rows; r++) {
            float sum = 0.0f;
            if (w->dtype == NA_DTYPE_Q8_0) {
                y[(size_t)b * w->rows + r] = na_ref_dot_q8(w, r, xb);
                continue;
            }
            if (na_ref_quant_kind(w->dtype) != 0) {      /* ref_quant.c */
                y[(size_t)b * w->rows + r] = na_ref_dot_quant(
                    w->dtype, (const uint8_t *)w->data +
                              (size_t)r * na_dtype_bytes(w->dtype, (size_t)w->cols),
                    xb, w->cols);
                continue;
            }
            for (j = 0; j < w->cols; j++)
                sum += na_ref_weight_at(w, r, j) * xb[j];
            y[(size_t)b * w->rows + r] = sum;
        }
    }
}

/* See ref.h. */
void na_ref_matmul_xbf16(float *y, const float *x, const na_tensor_t *w, int batch)
{
    int b, r, j;
    for (b = 0; b < batch; b++)
        for (r = 0; r < w->rows; r++) {
            float sum = 0.0f;
            for (j = 0; j < w->cols; j++)
                sum += na_ref_weight_at(w, r, j) *
                       na_bf16_to_f32(na_f32_to_bf16(x[(size_t)b * w->cols + j]));
            y[(size_t)b * w->rows + r] = sum;
        }
}

/* out = x / sqrt(mean(x^2) + eps) * weight, per row. */
void na_ref_rmsnorm(float *out, const float *x,
                    const float *weight, int n, float eps, int batch)
{
    int b, i;
    for (b = 0; b < batch; b++) {
        const float *xb = x + (size_t)b * n;
        float *ob = out + (size_t)b * n;
        float ss = 0.0f;
        for (i = 0; i < n; i++)
            ss += xb[i] * xb[i];
        ss = 1.0f / sqrtf(ss / (float)n + eps);
        for (i = 0; i < n; i++)
            ob[i] = weight[i] * (ss * xb[i]);
    }
}

/* Pair i of each head turns by pos * freq[i] (kernels/rope.h): elements
 * (2i, 2i+1) for NORM, (i, i + n_dims/2) for NEOX; cos/sin times mscale.
 * Products rounded before the sum (no FMA contraction): the results of the
 * earlier adjacent-pair loop, which the compiler vectorised without FMA, bit
 * for bit (llama2.c models give the same logits as before). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("fp-contract=off")))
#endif
void na_ref_rope(float *vec, int n_heads, const int *pos, const na_rope_t *r, int batch)
{
    int b, h, i, half = r->n_dims / 2;
    int step = r->style == NA_ROPE_NEOX ? 1 : 2, other = r->style == NA_ROPE_NEOX ? half : 1;
    for (b = 0; b < batch; b++) {
        for (h = 0; h < n_heads; h++) {
            float *v = vec + ((size_t)b * n_heads + h) * r->head_dim;
            for (i = 0; i < half; i++) {
                float val = (float)pos[b] * r->freq[i];
                float fcr = cosf(val), fci = sinf(val);
                float *p = v + i * step;
                float v0 = p[0], v1 = p[other];
                if (r->mscale != 1.0f) {
                    fcr *= r->mscale;
                    fci *= r->mscale;
                }
                p[0]     = v0 * fcr - v1 * fci;
                p[other] = v0 * fci + v1 * fcr;
            }
        }
    }
}

/* gate = gate * sigmoid(gate) * up. */
void na_ref_swiglu(float *gate, const float *up, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + na_expf(-g)) * up[i];
    }
}

/* Max-subtracted softmax per row. */
void na_ref_softmax(float *x, int n, int batch)
{
    int b, i;
    for (b = 0; b < batch; b++) {
        float *xb = x + (size_t)b * n;
        float max = xb[0], sum = 0.0f;
        for (i = 1; i < n; i++)
            if (xb[i] > max)
                max = xb[i];
        for (i = 0; i < n; i++) {
            xb[i] = na_expf(xb[i] - max);
            sum += xb[i];
        }
        for (i = 0; i < n; i++)
            xb[i] /= sum;
    }
}

/* x[r] = row tokens[r] of t, dequantised (na_ref_dequant_row). */
void na_ref_embed(float *x, const na_tensor_t *t, const int *tokens, int n)
{
    int r;
    for (r = 0; r < n; r++)
        na_ref_dequant_row(t->dtype, (const uint8_t *)t->data +
                                     (size_t)tokens[r] * na_dtype_bytes(t->dtype, (size_t)t->cols),
                           x + (size_t)r * t->cols, t->cols);
}

void na_ref_add(float *x, const float *y, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        x[i] += y[i];
}

void na_ref_store(void *dst, na_dtype_t dtype, const float *src, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        if (dtype == NA_DTYPE_F16)
            ((uint16_t *)dst)[i] = na_f32_to_f16(src[i]);
        else if (dtype == NA_DTYPE_BF16)
            ((uint16_t *)dst)[i] = na_f32_to_bf16(src[i]);
        else
            ((float *)dst)[i] = src[i];
    }
}

static void na_ref_destroy(na_kernels_t *k)
{
    free(k->priv);
    free(k);
}

static const na_khost_core_t na_ref_core = {
    .embed        = na_ref_embed,
    .add          = na_ref_add,
    .store        = na_ref_store,
    .matmul       = na_ref_matmul,
    .rmsnorm      = na_ref_rmsnorm,
    .rope         = na_ref_rope,
    .swiglu       = na_ref_swiglu,
    .softmax      = na_ref_softmax,
    .attn_prefill = na_ref_attn_prefill,
    .attn_decode  = na_ref_attn_decode,
};

static const na_kernel_ops_t na_ref_ops = {
    .name         = "ref",
    NA_KHOST_OPS,
    .place        = na_khost_place,
    .unplace      = na_khost_unplace,
    .attn_partial = na_ref_attn_partial,
    .destroy      = na_ref_destroy,
};

/* The ref backend is single-threaded whatever n_threads says; it emulates
 * NA_KMEM_DEVICE (host memory without a host pointer) so callers' device
 * paths are tested. Fails only with NA_ERR_NOMEM. */
na_status_t na_kernels_ref_create(int n_threads, na_kernels_t **k_p)
{
    na_kernels_t *k = calloc(1, sizeof(*k));
    na_khost_t *h = calloc(1, sizeof(*h));
    (void)n_threads;
    if (k == NULL || h == NULL) {
        free(h);
        free(k);
        return na_err(NA_ERR_NOMEM, "kernels ref: out of memory");
    }
    h->core = &na_ref_core;
    h->emulate_device = 1;
    k->ops = &na_ref_ops;
    k->n_threads = 1;
    k->priv = h;
    k->mem = NA_KMEM_HOST;
    *k_p = k;
    return NA_OK;
}

/* ref with emulated device memory as its preferred memory. */
na_status_t na_kernels_refdev_create(int n_threads, na_kernels_t **k_p)
{
    na_status_t st = na_kernels_ref_create(n_threads, k_p);
    if (st == NA_OK)
        (*k_p)->mem = NA_KMEM_DEVICE;
    return st;
}

/* "refdev:N": refdev whose emulated device holds N MiB (N >= 1). */
na_status_t na_kernels_refdev_create_mb(int mb, na_kernels_t **k_p)
{
    na_status_t st;
    if (mb < 1)
        return na_err(NA_ERR_INVALID, "kernels refdev:%d: the emulated device needs at least "
                      "1 MiB", mb);
    if ((st = na_kernels_refdev_create(1, k_p)) == NA_OK)
        ((na_khost_t *)(*k_p)->priv)->dev_limit = (size_t)mb << 20;
    return st;
}

/* kernels/cuda/cuda_ops.c — the math entries of the CUDA backend's table:
 * check the buffers and shapes (as kernels/host/host.c does for the host
 * backends), then enqueue the kernel (cuda_kern.cu, cuda_attn.cu) or the
 * cuBLAS call on the backend's stream.
 *
 * Matmul: f32 weights -> cublasSgemm (f32 in, f32 out; the default math mode
 * uses no TF32). f16/bf16 weights -> the GEMV kernel at batch <= 8 (f32
 * activations, the decode step) and cuBLAS GemmEx above it (activations
 * rounded to the weight's type for the tensor cores, f32 accumulation; for
 * f16 each row is first scaled by a power of two keeping it inside f16's
 * range, the output row scaled back: cuda_half.cu).
 * Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K -> the quantised GEMV
 * at every batch (cuda_quant.cu: weights repacked by place(), x quantised
 * to Q8 / Q8_K blocks once per call, int32 block sums, as kernels/ref
 * defines each type); embed dequantises them as the reference does. With
 * k->batch_invariant the GEMV takes every dtype, so that a row's result never
 * depends on the batch. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/rope.h"

#define F32B(n) ((size_t)(n) * sizeof(float))

#define NA_CU_ARG(b, need, op, what, p) NA_KBUF_ARG(na_cu_arg, b, need, op, what, p)

#define NA_CU_ENTER()                                                                \
    do {                                                                             \
        na_status_t na_st_ = na_cu_enter(k);                                         \
        if (na_st_ != NA_OK)                                                         \
            return na_st_;                                                           \
    } while (0)

static na_status_t na_cu_shape(const char *op)
{
    return na_err(NA_ERR_INVALID, "kernels cuda %s: bad shape", op);
}

static void *na_cu_stream(na_kernels_t *k)
{
    return (void *)NA_CU(k)->stream;
}


/* Bytes of a placed weight (quantised: the repacked layout, cuda_qpack.c). */
static size_t na_cu_wbytes(const na_kweight_t *w)
{
    if (na_dtype_is_quant(w->dtype))
        return na_cu_qpack_bytes((int)w->dtype, (size_t)w->rows * (size_t)w->cols /
                                                (size_t)na_dtype_block(w->dtype));
    return (size_t)w->rows * na_dtype_bytes(w->dtype, (size_t)w->cols);
}

/* A placed weight's shape: a known dtype, whole blocks a row. */
static int na_cu_wshape_ok(const na_kweight_t *w)
{
    return w != NULL && (unsigned)w->dtype < (unsigned)NA_DTYPE_COUNT && w->rows >= 0 &&
           w->cols >= 0 && w->cols % na_dtype_block(w->dtype) == 0;
}

na_status_t na_cu_embed_op(na_kernels_t *k, const na_kbuf_t *x, const na_kweight_t *t,
                           const int *tokens, int n)
{
    const int *dtok;
    float *px;
    void *pt;
    na_status_t st;
    int i;

    if (!na_cu_wshape_ok(t) || tokens == NULL || n < 0)
        return na_cu_shape("embed");
    NA_CU_ARG(x, F32B((size_t)n * (size_t)t->cols), "embed", "x", px);
    NA_CU_ARG(&t->buf, na_cu_wbytes(t), "embed", "table", pt);
    for (i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= t->rows)
            return na_err(NA_ERR_INVALID, "kernels cuda embed: token %d outside [0, %d)",
                          tokens[i], t->rows);
    NA_CU_ENTER();
    if ((st = na_cu_params(k, tokens, n, &dtok)) != NA_OK)
        return st;
    if (na_dtype_is_quant(t->dtype)) {
        na_cu_qw_t qw;
        na_cu_qpack_view((int)t->dtype, pt, (size_t)t->rows * (size_t)t->cols /
                                            (size_t)na_dtype_block(t->dtype), &qw);
        return na_cu_status(k, na_cu_embed_quant(na_cu_stream(k), px, &qw, (int)t->dtype,
                                                 t->cols, dtok, n), "embed kernel");
    }
    return na_cu_status(k, na_cu_embed(na_cu_stream(k), px, pt, (int)t->dtype, t->cols, dtok,
                                         n), "embed kernel");
}

na_status_t na_cu_add_op(na_kernels_t *k, const na_kbuf_t *x, const na_kbuf_t *y, size_t n)
{
    float *px, *py;
    NA_CU_ARG(x, F32B(n), "add", "x", px);
    NA_CU_ARG(y, F32B(n), "add", "y", py);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_add(na_cu_stream(k), px, py, n), "add kernel");
}

na_status_t na_cu_store_op(na_kernels_t *k, const na_kbuf_t *dst, na_dtype_t dtype,
                           const na_kbuf_t *src, size_t n)
{
    void *pd;
    float *ps;
    if (dtype != NA_DTYPE_F32 && dtype != NA_DTYPE_F16 && dtype != NA_DTYPE_BF16)
        return na_err(NA_ERR_INVALID, "kernels cuda store: dtype %s (use f32, f16 or bf16)",
                      na_dtype_name(dtype));
    NA_CU_ARG(dst, na_dtype_bytes(dtype, n), "store", "dst", pd);
    NA_CU_ARG(src, F32B(n), "store", "src", ps);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_store(na_cu_stream(k), pd, (int)dtype, ps, n), "store kernel");
}

/* y (batch x rows) = x (batch x cols) · W^T through cuBLAS. W is row-major
 * (rows, cols) = column-major (cols, rows): C(rows x batch) = op_T(W) · X. */
static na_status_t na_cu_gemm(na_kernels_t *k, float *y, const float *x, const void *w,
                              na_dtype_t dt, int rows, int cols, int batch)
{
    na_cuda_t *c = NA_CU(k);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t bs;
    cudaDataType_t ty;
    na_status_t st;
    size_t n = (size_t)batch * (size_t)cols;

    if (dt == NA_DTYPE_F32) {
        bs = cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, batch, cols, &one, w, cols, x,
                         cols, &zero, y, rows);
    } else {
        /* f16: x rounded to f16 after a per-row power-of-two scale that keeps
         * |x| below 2^15 (a plain conversion made |x| > 65504 inf), the
         * output rows scaled back; the row exponents follow the halves in
         * the scratch. bf16 has f32's range: a plain conversion. */
        size_t hb = (n * 2 + 15) / 16 * 16;
        int *ex;
        ty = dt == NA_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
        if ((st = na_cu_scratch(k, &c->xh, &c->xh_bytes,
                                hb + (size_t)batch * sizeof(int))) != NA_OK)
            return st;
        ex = (int *)((char *)c->xh + hb);
        st = dt == NA_DTYPE_F16
           ? na_cu_status(k, na_cu_to_f16_scaled(c->stream, c->xh, ex, x, cols, batch),
                          "f32->f16 (scaled) kernel")
           : na_cu_status(k, na_cu_to_half(c->stream, c->xh, (int)dt, x, n), "f32->bf16 kernel");
        if (st != NA_OK)
            return st;
        bs = cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, batch, cols, &one, w, ty, cols,
                          c->xh, ty, cols, &zero, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT);
        if (bs == CUBLAS_STATUS_SUCCESS && dt == NA_DTYPE_F16 &&
            (st = na_cu_status(k, na_cu_unscale_rows(c->stream, y, ex, rows, batch),
                               "unscale rows kernel")) != NA_OK)
            return st;
    }
    if (bs != CUBLAS_STATUS_SUCCESS)
        return na_err(NA_ERR_IO, "kernels cuda (gpu %d) matmul: %s (%d x %d %s weight, batch "
                      "%d): %s", c->gpu, dt == NA_DTYPE_F32 ? "cublasSgemm" : "cublasGemmEx",
                      rows, cols, na_dtype_name(dt), batch, cublasGetStatusString(bs));
    return NA_OK;
}

na_status_t na_cu_matmul_op(na_kernels_t *k, const na_kbuf_t *y, const na_kbuf_t *x,
                            const na_kweight_t *w, int batch)
{
    float *py, *px;
    void *pw;
    int gemv;

    if (!na_cu_wshape_ok(w) || batch < 0)
        return na_cu_shape("matmul");
    NA_CU_ARG(y, F32B((size_t)batch * (size_t)w->rows), "matmul", "y", py);
    NA_CU_ARG(x, F32B((size_t)batch * (size_t)w->cols), "matmul", "x", px);
    NA_CU_ARG(&w->buf, na_cu_wbytes(w), "matmul", "w", pw);
    if (batch == 0)
        return NA_OK;
    NA_CU_ENTER();
    if (na_dtype_is_quant(w->dtype)) {
        na_cuda_t *c = NA_CU(k);
        na_cu_qw_t qw;
        na_status_t st = na_cu_scratch(k, &c->xh, &c->xh_bytes,
                                       na_cu_gemv_q8_scratch(w->cols, batch));
        if (st != NA_OK)
            return st;
        na_cu_qpack_view((int)w->dtype, pw, (size_t)w->rows * (size_t)w->cols /
                                            (size_t)na_dtype_block(w->dtype), &qw);
        return na_cu_status(k, na_cu_gemv_quant(na_cu_stream(k), py, px, &qw, (int)w->dtype,
                                                w->rows, w->cols, batch, c->xh),
                            "quantised gemv kernel");
    }
    gemv = k->batch_invariant || (w->dtype != NA_DTYPE_F32 && batch <= NA_CU_GEMV_MAX_BATCH);
    if (gemv)
        return na_cu_status(k, na_cu_gemv(na_cu_stream(k), py, px, pw, (int)w->dtype, w->rows,
                                            w->cols, batch), "gemv kernel");
    return na_cu_gemm(k, py, px, pw, w->dtype, w->rows, w->cols, batch);
}

na_status_t na_cu_rmsnorm_op(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *x,
                             const na_kweight_t *weight, int n, float eps, int batch)
{
    float *po, *px, *pw;
    if (weight == NULL || weight->dtype != NA_DTYPE_F32 || n < 0 || batch < 0)
        return na_cu_shape("rmsnorm");
    NA_CU_ARG(out, F32B((size_t)batch * (size_t)n), "rmsnorm", "out", po);
    NA_CU_ARG(x, F32B((size_t)batch * (size_t)n), "rmsnorm", "x", px);
    NA_CU_ARG(&weight->buf, F32B(n), "rmsnorm", "weight", pw);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_rmsnorm(na_cu_stream(k), po, px, pw, n, eps, batch),
                          "rmsnorm kernel");
}

na_status_t na_cu_rope_op(na_kernels_t *k, const na_kbuf_t *vec, int n_heads, const int *pos,
                          const na_rope_t *rope, int batch)
{
    const int *dpos;
    float *pv, *pf;
    na_status_t st;
    if (pos == NULL || rope == NULL || rope->k != k || n_heads < 0 || batch < 0)
        return na_cu_shape("rope");
    NA_CU_ARG(vec, F32B((size_t)batch * (size_t)n_heads * (size_t)rope->head_dim), "rope", "vec",
              pv);
    NA_CU_ARG(rope->buf, F32B(rope->n_dims / 2), "rope", "freq", pf);
    NA_CU_ENTER();
    if ((st = na_cu_params(k, pos, batch, &dpos)) != NA_OK)
        return st;
    return na_cu_status(k, na_cu_rope(na_cu_stream(k), pv, n_heads, rope->head_dim,
                                        rope->n_dims, rope->style == NA_ROPE_NEOX, pf,
                                        rope->mscale, dpos, batch), "rope kernel");
}

na_status_t na_cu_bias_op(na_kernels_t *k, const na_kbuf_t *x, const na_kweight_t *bias, int n,
                          int batch)
{
    float *px, *pb;
    if (bias == NULL || bias->dtype != NA_DTYPE_F32 || n < 0 || batch < 0)
        return na_cu_shape("bias");
    NA_CU_ARG(x, F32B((size_t)batch * (size_t)n), "bias", "x", px);
    NA_CU_ARG(&bias->buf, F32B(n), "bias", "bias", pb);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_bias(na_cu_stream(k), px, pb, n, batch), "bias kernel");
}

na_status_t na_cu_swiglu_op(na_kernels_t *k, const na_kbuf_t *gate, const na_kbuf_t *up,
                            size_t n)
{
    float *pg, *pu;
    NA_CU_ARG(gate, F32B(n), "swiglu", "gate", pg);
    NA_CU_ARG(up, F32B(n), "swiglu", "up", pu);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_swiglu(na_cu_stream(k), pg, pu, n), "swiglu kernel");
}

na_status_t na_cu_softmax_op(na_kernels_t *k, const na_kbuf_t *x, int n, int batch)
{
    float *px;
    if (n <= 0 || batch < 0)
        return na_cu_shape("softmax");
    NA_CU_ARG(x, F32B((size_t)batch * (size_t)n), "softmax", "x", px);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_softmax(na_cu_stream(k), px, n, batch), "softmax kernel");
}

na_status_t na_kernels_cuda_argmax(na_kernels_t *k, const na_kbuf_t *idx, const na_kbuf_t *x,
                                   int n, int batch)
{
    float *px;
    int *pi;
    if (k == NULL || strcmp(k->ops->name, "cuda") != 0)
        return na_err(NA_ERR_INVALID, "kernels: argmax needs a cuda backend");
    if (n <= 0 || batch < 0)
        return na_cu_shape("argmax");
    NA_CU_ARG(idx, (size_t)batch * sizeof(int), "argmax", "idx", pi);
    NA_CU_ARG(x, F32B((size_t)batch * (size_t)n), "argmax", "x", px);
    NA_CU_ENTER();
    return na_cu_status(k, na_cu_argmax(na_cu_stream(k), pi, px, n, batch), "argmax kernel");
}

/* Check an attention op's buffers (n_q query rows, n_kv KV tokens) and run
 * rows [0, n_q) against ctx0 + r + 1 tokens each. */
static na_status_t na_cu_attn_run(na_kernels_t *k, const char *op, const na_kbuf_t *out,
                                  const na_kbuf_t *q, const na_kbuf_t *kc, const na_kbuf_t *vc,
                                  na_dtype_t dt, int n_q, int ctx0, int n_heads,
                                  int n_kv_heads, int head_dim)
{
    na_cuda_t *c = NA_CU(k);
    na_cu_attn_shape_t s;
    void *po, *pq, *pk, *pv;
    size_t qb, kvb;
    na_status_t st;

    if ((dt != NA_DTYPE_F16 && dt != NA_DTYPE_BF16 && dt != NA_DTYPE_F32) || n_heads <= 0 ||
        n_kv_heads <= 0 || head_dim <= 0 || n_heads % n_kv_heads != 0 || n_q < 0 || ctx0 < 0)
        return na_cu_shape(op);
    qb = F32B((size_t)n_q * (size_t)n_heads * (size_t)head_dim);
    kvb = na_dtype_bytes(dt, (size_t)(ctx0 + n_q) * (size_t)n_kv_heads * (size_t)head_dim);
    NA_CU_ARG(out, qb, op, "out", po);
    NA_CU_ARG(q, qb, op, "q", pq);
    NA_CU_ARG(kc, kvb, op, "kcache", pk);
    NA_CU_ARG(vc, kvb, op, "vcache", pv);
    if (n_q == 0)
        return NA_OK;
    s = (na_cu_attn_shape_t){ n_q, ctx0, n_heads, n_kv_heads, head_dim, (int)dt, 1, 1 };
    if (na_cu_attn_plan(&s, c->n_sm) != 0)
        return na_err(NA_ERR_UNSUPPORTED, "kernels cuda %s: head_dim %d is over 256", op,
                      head_dim);
    NA_CU_ENTER();
    if ((st = na_cu_scratch(k, &c->scratch, &c->scratch_bytes,
                            F32B(na_cu_attn_scratch_floats(&s)))) != NA_OK)
        return st;
    return na_cu_status(k, na_cu_attn(c->stream, po, pq, pk, pv, &s, c->scratch),
                          "attention kernel");
}

na_status_t na_cu_attn_prefill_op(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *q,
                                  const na_kbuf_t *kcache, const na_kbuf_t *vcache,
                                  na_dtype_t kv_dtype, int n_tok, int pos0, int n_heads,
                                  int n_kv_heads, int head_dim)
{
    return na_cu_attn_run(k, "attn_prefill", out, q, kcache, vcache, kv_dtype, n_tok, pos0,
                          n_heads, n_kv_heads, head_dim);
}

/* Decode of ctx tokens = one row against positions 0..ctx-1. ctx 0 gives zeros. */
na_status_t na_cu_attn_decode_op(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *q,
                                 const na_kbuf_t *kcache, const na_kbuf_t *vcache,
                                 na_dtype_t kv_dtype, int ctx, int n_heads, int n_kv_heads,
                                 int head_dim)
{
    na_cuda_t *c = NA_CU(k);
    float *po;
    if (ctx < 0)
        return na_cu_shape("attn_decode");
    if (ctx > 0)
        return na_cu_attn_run(k, "attn_decode", out, q, kcache, vcache, kv_dtype, 1, ctx - 1,
                              n_heads, n_kv_heads, head_dim);
    if (n_heads <= 0 || head_dim <= 0)
        return na_cu_shape("attn_decode");
    NA_CU_ARG(out, F32B((size_t)n_heads * (size_t)head_dim), "attn_decode", "out", po);
    NA_CU_ENTER();
    return na_cu_status(k, cudaMemsetAsync(po, 0, F32B((size_t)n_heads * (size_t)head_dim),
                                           c->stream), "cudaMemsetAsync");
}

/* n requests in one launch (cuda_attn.cu: grid z = request). The
 * descriptors go through the parameter ring (mapped pinned memory). */
na_status_t na_cu_attn_decode_batch_op(na_kernels_t *k, const na_kcuda_attn_req_t *reqs, int n,
                                       na_dtype_t dt, int n_heads, int n_kv_heads, int head_dim)
{
    na_cuda_t *c = NA_CU(k);
    na_cu_attn_req_t *d;
    na_cu_attn_shape_t s;
    const int *dev;
    size_t qb = F32B((size_t)n_heads * (size_t)head_dim);
    na_status_t st = NA_OK;
    int i, max_ctx = 0;

    if ((dt != NA_DTYPE_F16 && dt != NA_DTYPE_BF16 && dt != NA_DTYPE_F32) || n_heads <= 0 ||
        n_kv_heads <= 0 || head_dim <= 0 || n_heads % n_kv_heads != 0 || n < 0 ||
        (n > 0 && reqs == NULL) || n > 65535)
        return na_cu_shape("attn_decode_batch");
    if (n == 0)
        return NA_OK;
    if ((d = calloc((size_t)n, sizeof(*d))) == NULL)
        return na_err(NA_ERR_NOMEM, "kernels cuda attn_decode_batch: out of memory");
    for (i = 0; i < n && st == NA_OK; i++) {
        size_t kvb = na_dtype_bytes(dt, (size_t)reqs[i].ctx * (size_t)n_kv_heads *
                                            (size_t)head_dim);
        void *po = NULL, *pq = NULL, *pk = NULL, *pv = NULL;
        if (reqs[i].ctx < 0)
            st = na_cu_shape("attn_decode_batch");
        if (st == NA_OK)
            st = na_cu_arg(k, reqs[i].out, qb, "attn_decode_batch", "out", &po);
        if (st == NA_OK)
            st = na_cu_arg(k, reqs[i].q, qb, "attn_decode_batch", "q", &pq);
        if (st == NA_OK)
            st = na_cu_arg(k, reqs[i].kcache, kvb, "attn_decode_batch", "kcache", &pk);
        if (st == NA_OK)
            st = na_cu_arg(k, reqs[i].vcache, kvb, "attn_decode_batch", "vcache", &pv);
        d[i] = (na_cu_attn_req_t){ po, pq, pk, pv, reqs[i].ctx, 0, 0, 0 };
        if (reqs[i].ctx > max_ctx)
            max_ctx = reqs[i].ctx;
    }
    s = (na_cu_attn_shape_t){ 1, max_ctx > 0 ? max_ctx - 1 : 0, n_heads, n_kv_heads, head_dim,
                              (int)dt, 1, 1 };
    if (st == NA_OK && na_cu_attn_plan_batch(&s, d, n, c->n_sm) != 0)
        st = na_err(NA_ERR_UNSUPPORTED, "kernels cuda attn_decode_batch: head_dim %d is over "
                    "256", head_dim);
    if (st == NA_OK)
        st = na_cu_enter(k);
    if (st == NA_OK)
        st = na_cu_scratch(k, &c->scratch, &c->scratch_bytes,
                           F32B((size_t)n * na_cu_attn_scratch_floats(&s)));
    if (st == NA_OK)
        st = na_cu_params(k, (const int *)d, (int)(n * (sizeof(*d) / sizeof(int))), &dev);
    if (st == NA_OK)
        st = na_cu_status(k, na_cu_attn_batch(c->stream, (const na_cu_attn_req_t *)dev, n, &s,
                                              c->scratch), "batched attention kernel");
    free(d);
    return st;
}

na_status_t na_kernels_cuda_attn_decode_batch(na_kernels_t *k, const na_kcuda_attn_req_t *reqs,
                                              int n, na_dtype_t kv_dtype, int n_heads,
                                              int n_kv_heads, int head_dim)
{
    if (k == NULL || strcmp(k->ops->name, "cuda") != 0)
        return na_err(NA_ERR_INVALID, "kernels: attn_decode_batch needs a cuda backend");
    return na_cu_attn_decode_batch_op(k, reqs, n, kv_dtype, n_heads, n_kv_heads, head_dim);
}

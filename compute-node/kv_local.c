/* compute-node/kv_local.c — a request's local KV cache (see kv_local.h). */
#include "compute-node/kv_local.h"

#include <stdlib.h>
#include <string.h>

#if NA_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#define NA_KV_LOCAL_MIN_CAP 16   /* first allocation, in tokens */

na_status_t na_lkv_create(const na_model_config_t *cfg, na_dtype_t dtype,
                               na_kernels_t *kern, na_kmem_t mem, na_lkv_t **kv_p)
{
    na_lkv_t *kv;

    if (dtype != NA_DTYPE_F32 && dtype != NA_DTYPE_F16 && dtype != NA_DTYPE_BF16)
        return na_err(NA_ERR_INVALID, "KV cache dtype %s is not supported (use f16, bf16 or f32)",
                      na_dtype_name(dtype));
    kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        goto err_nomem;
    kv->dtype = dtype;
    kv->n_layers = cfg->n_layers;
    kv->kv_dim = cfg->n_kv_heads * cfg->head_dim;
    kv->max_tokens = cfg->seq_len;
    kv->kern = kern;
    kv->mem = mem;
    /* k, v, kb, vb, km, vm: six arrays of n_layers pointers in one block */
    kv->k = calloc(6 * (size_t)cfg->n_layers, sizeof(void *));
    if (kv->k == NULL)
        goto err_free_kv;
    kv->v = kv->k + cfg->n_layers;
    kv->kb = (na_kbuf_t **)(kv->v + cfg->n_layers);
    kv->vb = kv->kb + cfg->n_layers;
    kv->km = kv->vb + cfg->n_layers;
    kv->vm = kv->km + cfg->n_layers;
    *kv_p = kv;
    return NA_OK;

err_free_kv:
    free(kv);
err_nomem:
    return na_err(NA_ERR_NOMEM, "KV cache: out of memory");
}

void na_lkv_destroy(na_lkv_t *kv)
{
    const na_kernel_ops_t *ops;
    int l;

    if (kv == NULL)
        return;
    ops = kv->kern->ops;
    for (l = 0; l < kv->n_layers; l++) {
        ops->buf_free(kv->kern, kv->kb[l]);
        ops->buf_free(kv->kern, kv->vb[l]);
        ops->buf_free(kv->kern, kv->km[l]);
        ops->buf_free(kv->kern, kv->vm[l]);
    }
    free(kv->k);
    free(kv);
}

/* Allocate *b_p (NULL: none yet) with `size` bytes of memory type mem, or
 * grow it keeping its contents. */
static na_status_t na_lkv_grow(na_lkv_t *kv, na_kbuf_t **b_p, size_t size,
                                    na_kmem_t mem)
{
    const na_kernel_ops_t *ops = kv->kern->ops;
    if (*b_p == NULL)
        return ops->buf_alloc(kv->kern, size, mem, b_p);
    return ops->buf_resize(kv->kern, *b_p, size);
}

na_status_t na_lkv_reserve(na_lkv_t *kv, int n_tok)
{
    size_t row = na_dtype_bytes(kv->dtype, (size_t)kv->kv_dim);
    na_status_t st;
    int cap, l;

    if (n_tok <= kv->cap)
        return NA_OK;
    if (n_tok > kv->max_tokens)
        return na_err(NA_ERR_RANGE, "context of %d tokens exceeds the model's seq_len %d",
                      n_tok, kv->max_tokens);
    cap = kv->cap > 0 ? kv->cap : NA_KV_LOCAL_MIN_CAP;
    while (cap < n_tok)
        cap = cap > kv->max_tokens / 2 ? kv->max_tokens : cap * 2;
    if (cap > kv->max_tokens)
        cap = kv->max_tokens;
    /* Each layer grows on its own; a failure part-way leaves the grown layers
     * larger than kv->cap, which is harmless (cap only promises a minimum). */
    for (l = 0; l < kv->n_layers; l++) {
        if ((st = na_lkv_grow(kv, &kv->kb[l], (size_t)cap * row, kv->mem)) != NA_OK ||
            (st = na_lkv_grow(kv, &kv->vb[l], (size_t)cap * row, kv->mem)) != NA_OK)
            return st;
        kv->k[l] = kv->kb[l]->host;
        kv->v[l] = kv->vb[l]->host;
    }
    kv->cap = cap;
    return NA_OK;
}

na_status_t na_lkv_write(na_lkv_t *kv, int layer, int pos0, int n,
                              const na_kbuf_t *k_rows, const na_kbuf_t *v_rows)
{
    const na_kernel_ops_t *ops = kv->kern->ops;
    size_t count = (size_t)n * (size_t)kv->kv_dim;
    size_t off = na_dtype_bytes(kv->dtype, (size_t)pos0 * (size_t)kv->kv_dim);
    size_t bytes = na_dtype_bytes(kv->dtype, count);
    na_kbuf_t k = na_kbuf_view(kv->kb[layer], off, bytes);
    na_kbuf_t v = na_kbuf_view(kv->vb[layer], off, bytes);
    na_status_t st = ops->store(kv->kern, &k, kv->dtype, k_rows, count);

    return st != NA_OK ? st : ops->store(kv->kern, &v, kv->dtype, v_rows, count);
}

void na_lkv_commit(na_lkv_t *kv, int n_tok)
{
    if (n_tok > kv->n_tok)
        kv->n_tok = n_tok;
}

na_status_t na_lkv_attend(const na_lkv_t *kv, int layer, const na_kbuf_t *out,
                               const na_kbuf_t *q, int n, int pos0,
                               const na_model_config_t *cfg)
{
    const na_kernel_ops_t *ops = kv->kern->ops;
    if (n == 1)
        return ops->attn_decode(kv->kern, out, q, kv->kb[layer], kv->vb[layer], kv->dtype,
                                pos0 + 1, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
    return ops->attn_prefill(kv->kern, out, q, kv->kb[layer], kv->vb[layer], kv->dtype,
                             n, pos0, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
}

na_status_t na_lkv_attend_decode(na_lkv_t *const *kv, int n, int layer, const na_kbuf_t *out,
                                 const na_kbuf_t *q, const int *ctx,
                                 const na_model_config_t *cfg)
{
    na_status_t st = NA_OK;
    int i;
#if NA_HAVE_CUDA
    if (n >= 2 && strcmp(kv[0]->kern->ops->name, "cuda") == 0) {
        na_kcuda_attn_req_t rq[NA_LKV_BATCH];
        int i0, m;
        for (i0 = 0; i0 < n && st == NA_OK; i0 += m) {
            m = n - i0 < NA_LKV_BATCH ? n - i0 : NA_LKV_BATCH;
            for (i = 0; i < m; i++)
                rq[i] = (na_kcuda_attn_req_t){ &out[i0 + i], &q[i0 + i],
                                               kv[i0 + i]->kb[layer], kv[i0 + i]->vb[layer],
                                               ctx[i0 + i] };
            st = na_kernels_cuda_attn_decode_batch(kv[0]->kern, rq, m, kv[0]->dtype,
                                                   cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
        }
        return st;
    }
#endif
    for (i = 0; i < n && st == NA_OK; i++)
        st = na_lkv_attend(kv[i], layer, &out[i], &q[i], 1, ctx[i] - 1, cfg);
    return st;
}

na_status_t na_lkv_to_host(na_lkv_t *kv)
{
    const na_kernel_ops_t *ops = kv->kern->ops;
    size_t bytes = na_dtype_bytes(kv->dtype, (size_t)kv->n_tok * (size_t)kv->kv_dim);
    na_status_t st;
    int l;

    for (l = 0; l < kv->n_layers; l++) {
        if (kv->kb[l] == NULL || kv->kb[l]->host != NULL)
            continue;                           /* host memory: read in place */
        if (kv->km[l] == NULL || kv->km[l]->size < kv->kb[l]->size) {
            if ((st = na_lkv_grow(kv, &kv->km[l], kv->kb[l]->size,
                                       NA_KMEM_PINNED)) != NA_OK ||
                (st = na_lkv_grow(kv, &kv->vm[l], kv->kb[l]->size,
                                       NA_KMEM_PINNED)) != NA_OK)
                return st;
        }
        if ((st = ops->download(kv->kern, kv->km[l]->host, kv->kb[l], bytes)) != NA_OK ||
            (st = ops->download(kv->kern, kv->vm[l]->host, kv->vb[l], bytes)) != NA_OK)
            return st;
        kv->k[l] = kv->km[l]->host;
        kv->v[l] = kv->vm[l]->host;
    }
    return na_kernels_finish(kv->kern);
}

size_t na_lkv_bytes(const na_lkv_t *kv)
{
    return 2u * (size_t)kv->n_layers * (size_t)kv->cap *
           na_dtype_bytes(kv->dtype, (size_t)kv->kv_dim);
}

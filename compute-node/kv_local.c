/* compute-node/kv_local.c — a request's local KV cache (see kv_local.h). */
#include "compute-node/kv_local.h"

#include <stdlib.h>
#include <string.h>

#define NA_KV_LOCAL_MIN_CAP 16   /* first allocation, in tokens */

na_status_t na_kv_local_create(const na_model_config_t *cfg, na_dtype_t dtype,
                               na_kv_local_t **kv_p)
{
    na_kv_local_t *kv;

    if (dtype != NA_DTYPE_F32 && dtype != NA_DTYPE_F16)
        return na_err(NA_ERR_INVALID, "KV cache dtype %s is not supported (use f16 or f32)",
                      na_dtype_name(dtype));
    kv = calloc(1, sizeof(*kv));
    if (kv == NULL)
        goto err_nomem;
    kv->dtype = dtype;
    kv->n_layers = cfg->n_layers;
    kv->kv_dim = cfg->n_kv_heads * cfg->head_dim;
    kv->max_tokens = cfg->seq_len;
    kv->k = calloc((size_t)cfg->n_layers, sizeof(*kv->k));
    if (kv->k == NULL)
        goto err_free_kv;
    kv->v = calloc((size_t)cfg->n_layers, sizeof(*kv->v));
    if (kv->v == NULL)
        goto err_free_k;
    *kv_p = kv;
    return NA_OK;

err_free_k:
    free(kv->k);
err_free_kv:
    free(kv);
err_nomem:
    return na_err(NA_ERR_NOMEM, "KV cache: out of memory");
}

void na_kv_local_destroy(na_kv_local_t *kv)
{
    int l;

    if (kv == NULL)
        return;
    for (l = 0; l < kv->n_layers; l++) {
        free(kv->k[l]);
        free(kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    free(kv);
}

na_status_t na_kv_local_reserve(na_kv_local_t *kv, int n_tok)
{
    size_t row = na_dtype_bytes(kv->dtype, (size_t)kv->kv_dim);
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
        void *k = realloc(kv->k[l], (size_t)cap * row);
        if (k == NULL)
            goto err_nomem;
        kv->k[l] = k;
        void *v = realloc(kv->v[l], (size_t)cap * row);
        if (v == NULL)
            goto err_nomem;
        kv->v[l] = v;
    }
    kv->cap = cap;
    return NA_OK;

err_nomem:
    return na_err(NA_ERR_NOMEM, "KV cache: out of memory growing to %d tokens", cap);
}

void na_kv_local_write(na_kv_local_t *kv, int layer, int pos0, int n,
                       const float *k_rows, const float *v_rows)
{
    size_t count = (size_t)n * (size_t)kv->kv_dim;
    size_t off = (size_t)pos0 * (size_t)kv->kv_dim;
    size_t i;

    if (kv->dtype == NA_DTYPE_F32) {
        memcpy((float *)kv->k[layer] + off, k_rows, count * sizeof(float));
        memcpy((float *)kv->v[layer] + off, v_rows, count * sizeof(float));
    } else {
        uint16_t *k = (uint16_t *)kv->k[layer] + off;
        uint16_t *v = (uint16_t *)kv->v[layer] + off;
        for (i = 0; i < count; i++) {
            k[i] = na_f32_to_f16(k_rows[i]);
            v[i] = na_f32_to_f16(v_rows[i]);
        }
    }
}

void na_kv_local_commit(na_kv_local_t *kv, int n_tok)
{
    if (n_tok > kv->n_tok)
        kv->n_tok = n_tok;
}

void na_kv_local_attend(const na_kv_local_t *kv, na_kernels_t *kern, int layer,
                        float *out, const float *q, int n, int pos0,
                        const na_model_config_t *cfg)
{
    if (n == 1)
        kern->ops->attn_decode(kern, out, q, kv->k[layer], kv->v[layer], kv->dtype,
                               pos0 + 1, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
    else
        kern->ops->attn_prefill(kern, out, q, kv->k[layer], kv->v[layer], kv->dtype,
                                n, pos0, cfg->n_heads, cfg->n_kv_heads, cfg->head_dim);
}

size_t na_kv_local_bytes(const na_kv_local_t *kv)
{
    return 2u * (size_t)kv->n_layers * (size_t)kv->cap *
           na_dtype_bytes(kv->dtype, (size_t)kv->kv_dim);
}

/* compute-node/xcache.c — cooperative X-cache (INF2 §4.3).
 *
 * For an X-cache request the compute node keeps X, the input of each
 * layer's K/V projection (the attention-normed residual xb), instead of
 * sending K and V to a storage node. Each decode step regenerates
 * K = RoPE(X·Wk) and V = X·Wv for the layer (na_slice_kv: with the
 * architecture's biases and k norm) and runs the attention here,
 * while the storage nodes compute the batch's other requests (the batch's
 * remote entries are sent first). Nothing of such a request lives on a
 * storage node, so they need nothing for it.
 *
 * X per token and layer is dim values, K+V is 2·kv_dim: for MHA (kv_dim ==
 * dim) X is half of K+V, the memory the X-cache trades for the storage
 * nodes' bandwidth. With GQA X is as large as K+V or larger, so it is
 * refused. X is kept in f16; the regenerated K/V are rounded to the engine's
 * KV dtype as the monolithic engine stores them. */
#include <stdlib.h>
#include <string.h>

#include "compute-node/xcache.h"

struct na_xcache {
    int        n_layers, dim, max_tokens;
    uint16_t   x[];          /* (n_layers, max_tokens, dim) f16, in the object's allocation */
};

/* Layer l's (max_tokens, dim) rows. */
static uint16_t *na_xcache_layer(na_xcache_t *x, int l)
{
    return x->x + (size_t)l * (size_t)x->max_tokens * (size_t)x->dim;
}

na_status_t na_xcache_check(const na_model_config_t *mc)
{
    long x = mc->dim, kv = 2L * mc->n_kv_heads * mc->head_dim;

    if (mc->n_kv_heads != mc->n_heads || x >= kv)
        return na_err(NA_ERR_UNSUPPORTED, "xcache: the model has %d KV heads for %d query "
                      "heads (GQA): X is %ld values per token and layer, K+V only %ld, so "
                      "keeping X would cost more than the KV; X-cache needs an MHA model",
                      mc->n_kv_heads, mc->n_heads, x, kv);
    return NA_OK;
}

size_t na_xcache_bytes(const na_model_config_t *mc, int max_tokens)
{
    if (max_tokens > mc->seq_len)
        max_tokens = mc->seq_len;
    return (size_t)mc->n_layers * (size_t)max_tokens * (size_t)mc->dim * sizeof(uint16_t);
}

na_status_t na_xcache_create(const na_model_config_t *mc, int max_tokens, na_xcache_t **x_p)
{
    na_xcache_t *x;

    if (max_tokens > mc->seq_len)
        max_tokens = mc->seq_len;
    x = malloc(sizeof(*x) + na_xcache_bytes(mc, max_tokens));
    if (x == NULL)
        return na_err(NA_ERR_NOMEM, "xcache: out of memory for %d tokens", max_tokens);
    x->n_layers = mc->n_layers;
    x->dim = mc->dim;
    x->max_tokens = max_tokens;
    *x_p = x;
    return NA_OK;
}

void na_xcache_destroy(na_xcache_t *x)
{
    free(x);
}

void na_xcache_put(na_xcache_t *x, int layer, int pos0, int n, const float *xb)
{
    uint16_t *dst = na_xcache_layer(x, layer) + (size_t)pos0 * (size_t)x->dim;
    size_t i, cnt = (size_t)n * (size_t)x->dim;

    if (pos0 < 0 || pos0 + n > x->max_tokens)
        return;     /* the caller sized the cache for prompt + max_new */
    for (i = 0; i < cnt; i++)
        dst[i] = na_f32_to_f16(xb[i]);
}

na_status_t na_xcache_attend(na_xcache_t *x, na_engine_t *e, int layer, int pos,
                             const float *q, float *out)
{
    const na_model_config_t *c = &e->cfg;
    const na_kernel_ops_t *ops = e->kern->ops;
    na_dtype_t kt = e->opts.kv_dtype;
    int n = pos + 1, i;
    size_t kd = (size_t)e->kv_dim, cnt = (size_t)n * kd, nx = (size_t)n * (size_t)x->dim;
    const uint16_t *xl = na_xcache_layer(x, layer);
    float *xf, *k, *v;
    char *kc, *vc;
    int *positions;
    na_status_t st;

    if (n > x->max_tokens)
        return na_err(NA_ERR_RANGE, "xcache: position %d past the %d tokens kept", pos,
                      x->max_tokens);
    /* one scratch block: X, K, V (f32), positions, then K and V in the KV dtype */
    xf = malloc((nx + 2 * cnt) * sizeof(float) + (size_t)n * sizeof(int) +
                2 * na_dtype_bytes(kt, cnt));
    if (xf == NULL)
        return na_err(NA_ERR_NOMEM, "xcache: out of memory regenerating %d tokens", n);
    k = xf + nx;
    v = k + cnt;
    positions = (int *)(v + cnt);
    kc = (char *)(positions + n);
    vc = kc + na_dtype_bytes(kt, cnt);
    for (i = 0; i < n * x->dim; i++)
        xf[i] = na_f16_to_f32(xl[i]);
    for (i = 0; i < n; i++)
        positions[i] = i;
    /* regenerate K = RoPE(X·Wk), V = X·Wv, stored in the KV dtype, then attend
     * (host arrays wrapped as buffers: a host backend's path) */
    {
        na_kbuf_t xb = na_kbuf_host(xf, nx * sizeof(float));
        na_kbuf_t kb = na_kbuf_host(k, cnt * sizeof(float));
        na_kbuf_t vb = na_kbuf_host(v, cnt * sizeof(float));
        na_kbuf_t kcb = na_kbuf_host(kc, na_dtype_bytes(kt, cnt));
        na_kbuf_t vcb = na_kbuf_host(vc, na_dtype_bytes(kt, cnt));
        if ((st = na_slice_kv(e, layer, &kb, &vb, &xb, positions, n)) == NA_OK &&
            (st = ops->store(e->kern, &kcb, kt, &kb, cnt)) == NA_OK &&
            (st = ops->store(e->kern, &vcb, kt, &vb, cnt)) == NA_OK)
            st = na_kernels_attn_decode_host(e->kern, out, q, kc, vc, kt, n, c->n_heads,
                                             c->n_kv_heads, c->head_dim);
    }
    free(xf);
    return st;
}

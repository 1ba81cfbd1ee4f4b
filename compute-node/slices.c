/* compute-node/slices.c — the forward pass as model slices cut at attention
 * (see engine.h). Each function reads top to bottom in the order the data
 * flows; every op goes through the backend's table on the activation
 * buffers, and every matmul runs all rows of the step at once (batch =
 * rows). A slice stops at the first op that fails and returns its status. */
#include "compute-node/engine.h"

/* Run one op and return from the slice if it failed. */
#define NA_OP(call)                          \
    do {                                     \
        na_status_t na_st_ = (call);         \
        if (na_st_ != NA_OK)                 \
            return na_st_;                   \
    } while (0)

na_status_t na_slice_embed(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    /* x = tok_embd[token] */
    return e->kern->ops->embed(e->kern, a->buf[NA_ACT_X], &e->w.tok_embd, s->tokens,
                               s->n_rows);
}

na_status_t na_slice_pre_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_engine_layer_w_t *w = &e->w.layers[layer];
    const na_model_config_t *c = &e->cfg;
    na_kernels_t *k = e->kern;
    na_kbuf_t *const *b = a->buf;
    int n = s->n_rows;

    /* attention rmsnorm */
    NA_OP(ops->rmsnorm(k, b[NA_ACT_XB], b[NA_ACT_X], &w->attn_norm, c->dim, c->rms_eps, n));
    /* q, k, v projections */
    NA_OP(ops->matmul(k, b[NA_ACT_Q], b[NA_ACT_XB], &w->wq, n));
    NA_OP(ops->matmul(k, b[NA_ACT_K], b[NA_ACT_XB], &w->wk, n));
    NA_OP(ops->matmul(k, b[NA_ACT_V], b[NA_ACT_XB], &w->wv, n));
    /* RoPE: rotate q and k by each row's position */
    NA_OP(ops->rope(k, b[NA_ACT_Q], c->n_heads, c->head_dim, s->pos, c->rope_theta, n));
    NA_OP(ops->rope(k, b[NA_ACT_K], c->n_kv_heads, c->head_dim, s->pos, c->rope_theta, n));
    return NA_OK;
}

na_status_t na_slice_post_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_engine_layer_w_t *w = &e->w.layers[layer];
    const na_model_config_t *c = &e->cfg;
    na_kernels_t *k = e->kern;
    na_kbuf_t *const *b = a->buf;
    int n = s->n_rows;
    size_t xs = (size_t)n * (size_t)c->dim;

    /* output projection and residual */
    NA_OP(ops->matmul(k, b[NA_ACT_XB], b[NA_ACT_ATT], &w->wo, n));
    NA_OP(ops->add(k, b[NA_ACT_X], b[NA_ACT_XB], xs));
    /* ffn rmsnorm */
    NA_OP(ops->rmsnorm(k, b[NA_ACT_XB], b[NA_ACT_X], &w->ffn_norm, c->dim, c->rms_eps, n));
    /* SwiGLU MLP: w2 · (silu(w1·xb) * (w3·xb)) */
    NA_OP(ops->matmul(k, b[NA_ACT_HB], b[NA_ACT_XB], &w->w1, n));
    NA_OP(ops->matmul(k, b[NA_ACT_HB2], b[NA_ACT_XB], &w->w3, n));
    NA_OP(ops->swiglu(k, b[NA_ACT_HB], b[NA_ACT_HB2], (size_t)n * (size_t)c->hidden_dim));
    NA_OP(ops->matmul(k, b[NA_ACT_XB], b[NA_ACT_HB], &w->w2, n));
    /* residual */
    NA_OP(ops->add(k, b[NA_ACT_X], b[NA_ACT_XB], xs));
    return NA_OK;
}

na_status_t na_slice_final(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_model_config_t *c = &e->cfg;
    const size_t d = (size_t)c->dim * sizeof(float);
    na_kernels_t *k = e->kern;
    na_kbuf_t *const *b = a->buf;
    int i;

    /* only the last row of each segment needs logits: gather them into xb */
    for (i = 0; i < s->n_seg; i++) {
        size_t last = (size_t)(s->seg[i].row0 + s->seg[i].n_tok - 1);
        na_kbuf_t dst = na_kbuf_view(b[NA_ACT_XB], (size_t)i * d, d);
        na_kbuf_t src = na_kbuf_view(b[NA_ACT_X], last * d, d);
        NA_OP(ops->copy(k, &dst, &src, d));
    }
    /* final rmsnorm */
    NA_OP(ops->rmsnorm(k, b[NA_ACT_XL], b[NA_ACT_XB], &e->w.out_norm, c->dim, c->rms_eps,
                       s->n_seg));
    /* classifier into logits */
    NA_OP(ops->matmul(k, b[NA_ACT_LOGITS], b[NA_ACT_XL], &e->w.output, s->n_seg));
    return NA_OK;
}

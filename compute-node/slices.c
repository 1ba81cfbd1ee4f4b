/* compute-node/slices.c — the forward pass as model slices cut at attention
 * (see engine.h). Each function reads top to bottom in the order the data
 * flows; every op goes through the backend's table on the activation
 * buffers, and every matmul runs all rows of the step at once (batch =
 * rows). A slice stops at the first op that fails and returns its status. */
#include <errno.h>
#include <time.h>

#include "compute-node/engine.h"

/* After each op: the test double's delay, the engine's tick (both off
 * unless set: na_engine_t.fault_op_ms, .tick). */
static void na_slice_after_op(na_engine_t *e)
{
    if (e->fault_op_ms > 0) {
        struct timespec ts = { e->fault_op_ms / 1000, (long)(e->fault_op_ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (e->tick != NULL)
        e->tick(e->tick_ctx);
}

/* Run one op and return from the slice if it failed; then the engine's
 * tick, if any (na_slice_after_op). */
#define NA_OP(call)                          \
    do {                                     \
        na_status_t na_st_ = (call);         \
        if (na_st_ != NA_OK)                 \
            return na_st_;                   \
        na_slice_after_op(e);                \
    } while (0)

na_status_t na_slice_embed(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    /* x = tok_embd[token] */
    return e->kern->ops->embed(e->kern, a->buf[NA_ACT_X], &e->w.tok_embd, s->tokens,
                               s->n_rows);
}

na_status_t na_slice_kv(na_engine_t *e, int layer, const na_kbuf_t *kb, const na_kbuf_t *vb,
                        const na_kbuf_t *xb, const int *pos, int n)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_engine_layer_w_t *w = &e->w.layers[layer];
    const na_layer_weights_t *mw = &e->model->layers[layer];
    const na_model_config_t *c = &e->cfg;
    na_kernels_t *k = e->kern;

    /* k, v projections (+ biases) */
    NA_OP(ops->matmul(k, kb, xb, &w->wk, n));
    NA_OP(ops->matmul(k, vb, xb, &w->wv, n));
    if (na_tensor_present(&mw->bk))
        NA_OP(ops->bias(k, kb, &w->bk, e->kv_dim, n));
    if (na_tensor_present(&mw->bv))
        NA_OP(ops->bias(k, vb, &w->bv, e->kv_dim, n));
    /* per-head RMS norm of k (qwen3), then RoPE by each row's position */
    if (na_tensor_present(&mw->k_norm))
        NA_OP(ops->rmsnorm(k, kb, kb, &w->k_norm, c->head_dim, c->rms_eps, n * c->n_kv_heads));
    NA_OP(ops->rope(k, kb, c->n_kv_heads, pos, e->rope, n));
    return NA_OK;
}

na_status_t na_slice_pre_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_engine_layer_w_t *w = &e->w.layers[layer];
    const na_layer_weights_t *mw = &e->model->layers[layer];
    const na_model_config_t *c = &e->cfg;
    na_kernels_t *k = e->kern;
    na_kbuf_t *const *b = a->buf;
    int n = s->n_rows;

    /* attention rmsnorm */
    NA_OP(ops->rmsnorm(k, b[NA_ACT_XB], b[NA_ACT_X], &w->attn_norm, c->dim, c->rms_eps, n));
    /* q projection (+ bias), per-head RMS norm (qwen3), RoPE by each row's position */
    NA_OP(ops->matmul(k, b[NA_ACT_Q], b[NA_ACT_XB], &w->wq, n));
    if (na_tensor_present(&mw->bq))
        NA_OP(ops->bias(k, b[NA_ACT_Q], &w->bq, e->q_dim, n));
    if (na_tensor_present(&mw->q_norm))
        NA_OP(ops->rmsnorm(k, b[NA_ACT_Q], b[NA_ACT_Q], &w->q_norm, c->head_dim, c->rms_eps,
                           n * c->n_heads));
    NA_OP(ops->rope(k, b[NA_ACT_Q], c->n_heads, s->pos, e->rope, n));
    /* k and v */
    return na_slice_kv(e, layer, b[NA_ACT_K], b[NA_ACT_V], b[NA_ACT_XB], s->pos, n);
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
    if (na_tensor_present(&e->model->layers[layer].bo))
        NA_OP(ops->bias(k, b[NA_ACT_XB], &w->bo, c->dim, n));
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

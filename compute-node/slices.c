/* compute-node/slices.c — the forward pass as model slices cut at attention
 * (see engine.h). Each function reads top to bottom in the order the data
 * flows; every matmul runs all rows of the step at once (batch = rows). */
#include "compute-node/engine.h"

#include <string.h>

/* Row `row` of a 2-D weight as f32 into out[w->cols] (embedding lookup). */
static void na_slice_tensor_row(const na_tensor_t *w, int row, float *out)
{
    size_t n = (size_t)w->cols;
    size_t i, b;

    switch (w->dtype) {
    case NA_DTYPE_F32:
        memcpy(out, (const float *)w->data + (size_t)row * n, n * sizeof(float));
        break;
    case NA_DTYPE_F16: {
        const uint16_t *p = (const uint16_t *)w->data + (size_t)row * n;
        for (i = 0; i < n; i++)
            out[i] = na_f16_to_f32(p[i]);
        break;
    }
    case NA_DTYPE_BF16: {
        const uint16_t *p = (const uint16_t *)w->data + (size_t)row * n;
        for (i = 0; i < n; i++)
            out[i] = na_bf16_to_f32(p[i]);
        break;
    }
    case NA_DTYPE_Q8_0: {
        /* blocks of { f16 scale, int8 q[32] } */
        const uint8_t *p = (const uint8_t *)w->data +
                           (size_t)row * (n / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
        for (b = 0; b < n / NA_Q8_0_BLOCK; b++) {
            const uint8_t *blk = p + b * NA_Q8_0_BLOCK_SIZE;
            uint16_t h;
            float d;
            memcpy(&h, blk, sizeof(h));
            d = na_f16_to_f32(h);
            for (i = 0; i < NA_Q8_0_BLOCK; i++)
                out[b * NA_Q8_0_BLOCK + i] = d * (float)(int8_t)blk[2 + i];
        }
        break;
    }
    default:
        memset(out, 0, n * sizeof(float));      /* the loader rejects other dtypes */
        break;
    }
}

/* x[i] += y[i] for n elements, on the host.
 * GAP: kernels.h has no elementwise-add op, so a device backend would need a
 * sync here; the CPU and ref backends run ops at once, so none is needed. */
static void na_slice_residual(float *x, const float *y, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++)
        x[i] += y[i];
}

void na_slice_embed(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    int r;

    for (r = 0; r < s->n_rows; r++)
        na_slice_tensor_row(&e->model->tok_embd, s->tokens[r],
                            a->x + (size_t)r * (size_t)e->cfg.dim);
}

void na_slice_pre_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_layer_weights_t *w = &e->model->layers[layer];
    const na_model_config_t *c = &e->cfg;
    int n = s->n_rows;

    /* attention rmsnorm */
    ops->rmsnorm(e->kern, a->xb, a->x, (const float *)w->attn_norm.data, c->dim,
                 c->rms_eps, n);
    /* q, k, v projections */
    ops->matmul(e->kern, a->q, a->xb, &w->wq, n);
    ops->matmul(e->kern, a->k, a->xb, &w->wk, n);
    ops->matmul(e->kern, a->v, a->xb, &w->wv, n);
    /* RoPE: rotate q and k by each row's position */
    ops->rope(e->kern, a->q, c->n_heads, c->head_dim, s->pos, c->rope_theta, n);
    ops->rope(e->kern, a->k, c->n_kv_heads, c->head_dim, s->pos, c->rope_theta, n);
}

void na_slice_post_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_layer_weights_t *w = &e->model->layers[layer];
    const na_model_config_t *c = &e->cfg;
    int n = s->n_rows;
    size_t xs = (size_t)n * (size_t)c->dim;

    /* output projection and residual */
    ops->matmul(e->kern, a->xb, a->att, &w->wo, n);
    na_slice_residual(a->x, a->xb, xs);
    /* ffn rmsnorm */
    ops->rmsnorm(e->kern, a->xb, a->x, (const float *)w->ffn_norm.data, c->dim,
                 c->rms_eps, n);
    /* SwiGLU MLP: w2 · (silu(w1·xb) * (w3·xb)) */
    ops->matmul(e->kern, a->hb, a->xb, &w->w1, n);
    ops->matmul(e->kern, a->hb2, a->xb, &w->w3, n);
    ops->swiglu(e->kern, a->hb, a->hb2, (size_t)n * (size_t)c->hidden_dim);
    ops->matmul(e->kern, a->xb, a->hb, &w->w2, n);
    /* residual */
    na_slice_residual(a->x, a->xb, xs);
}

void na_slice_final(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    const na_model_config_t *c = &e->cfg;
    size_t d = (size_t)c->dim;
    int i;

    /* only the last row of each segment needs logits: gather them into xb */
    for (i = 0; i < s->n_seg; i++) {
        int last = s->seg[i].row0 + s->seg[i].n_tok - 1;
        memcpy(a->xb + (size_t)i * d, a->x + (size_t)last * d, d * sizeof(float));
    }
    /* final rmsnorm */
    ops->rmsnorm(e->kern, a->xl, a->xb, (const float *)e->model->out_norm.data, c->dim,
                 c->rms_eps, s->n_seg);
    /* classifier into logits */
    ops->matmul(e->kern, a->logits, a->xl, &e->model->output, s->n_seg);
}

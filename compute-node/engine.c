/* compute-node/engine.c — engine and activation objects, step checks, and the
 * monolithic forward pass (slices with local attention in between). */
#include "compute-node/engine.h"

#include <stdlib.h>
#include <string.h>

na_status_t na_engine_create(const na_model_t *model, const na_engine_opts_t *opts,
                             na_engine_t **e_p)
{
    const char *backend = opts->backend != NULL ? opts->backend : "cpu";
    na_engine_t *e;
    na_status_t st;

    if (opts->kv_dtype != NA_DTYPE_F32 && opts->kv_dtype != NA_DTYPE_F16)
        return na_err(NA_ERR_INVALID, "KV dtype %s is not supported (use f16 or f32)",
                      na_dtype_name(opts->kv_dtype));
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return na_err(NA_ERR_NOMEM, "engine: out of memory");
    e->model = model;
    e->cfg = model->cfg;
    e->opts = *opts;
    e->opts.backend = NULL;
    if (e->opts.max_rows <= 0)
        e->opts.max_rows = NA_ENGINE_DEFAULT_MAX_ROWS;
    e->q_dim = e->cfg.n_heads * e->cfg.head_dim;
    e->kv_dim = e->cfg.n_kv_heads * e->cfg.head_dim;
    st = na_kernels_create(backend, opts->n_threads, &e->kern);
    if (st != NA_OK)
        goto err_free_engine;
    *e_p = e;
    return NA_OK;

err_free_engine:
    free(e);
    return st;
}

void na_engine_destroy(na_engine_t *e)
{
    if (e == NULL)
        return;
    na_kernels_destroy(e->kern);
    free(e);
}

/* Free every buffer of a (the struct itself stays). */
static void na_acts_free_buffers(na_acts_t *a)
{
    free(a->x);      a->x = NULL;
    free(a->xb);     a->xb = NULL;
    free(a->q);      a->q = NULL;
    free(a->k);      a->k = NULL;
    free(a->v);      a->v = NULL;
    free(a->att);    a->att = NULL;
    free(a->hb);     a->hb = NULL;
    free(a->hb2);    a->hb2 = NULL;
    free(a->xl);     a->xl = NULL;
    free(a->logits); a->logits = NULL;
    a->cap_rows = 0;
    a->cap_seg = 0;
}

na_status_t na_acts_reserve(na_acts_t *a, const na_engine_t *e, int n_rows, int n_seg)
{
    const na_model_config_t *c = &e->cfg;
    size_t r, g;

    if (n_rows <= a->cap_rows && n_seg <= a->cap_seg)
        return NA_OK;
    if (n_rows < a->cap_rows)
        n_rows = a->cap_rows;
    if (n_seg < a->cap_seg)
        n_seg = a->cap_seg;
    na_acts_free_buffers(a);
    r = (size_t)n_rows;
    g = (size_t)n_seg;
    a->x      = malloc(r * (size_t)c->dim * sizeof(float));
    a->xb     = malloc(r * (size_t)c->dim * sizeof(float));
    a->q      = malloc(r * (size_t)e->q_dim * sizeof(float));
    a->k      = malloc(r * (size_t)e->kv_dim * sizeof(float));
    a->v      = malloc(r * (size_t)e->kv_dim * sizeof(float));
    a->att    = malloc(r * (size_t)e->q_dim * sizeof(float));
    a->hb     = malloc(r * (size_t)c->hidden_dim * sizeof(float));
    a->hb2    = malloc(r * (size_t)c->hidden_dim * sizeof(float));
    a->xl     = malloc(g * (size_t)c->dim * sizeof(float));
    a->logits = malloc(g * (size_t)c->vocab_size * sizeof(float));
    if (!a->x || !a->xb || !a->q || !a->k || !a->v || !a->att || !a->hb || !a->hb2 ||
        !a->xl || !a->logits)
        goto err_free_buffers;
    a->cap_rows = n_rows;
    a->cap_seg = n_seg;
    return NA_OK;

err_free_buffers:
    na_acts_free_buffers(a);
    return na_err(NA_ERR_NOMEM, "activations: out of memory for %d rows", n_rows);
}

na_status_t na_acts_create(const na_engine_t *e, int max_rows, int max_seg,
                           na_acts_t **a_p)
{
    na_acts_t *a = calloc(1, sizeof(*a));
    na_status_t st;

    if (a == NULL)
        return na_err(NA_ERR_NOMEM, "activations: out of memory");
    st = na_acts_reserve(a, e, max_rows > 0 ? max_rows : 1, max_seg > 0 ? max_seg : 1);
    if (st != NA_OK)
        goto err_free_acts;
    *a_p = a;
    return NA_OK;

err_free_acts:
    free(a);
    return st;
}

void na_acts_destroy(na_acts_t *a)
{
    if (a == NULL)
        return;
    na_acts_free_buffers(a);
    free(a);
}

na_status_t na_step_check(const na_engine_t *e, const na_step_t *s)
{
    int i, j, row = 0;

    if (s->n_seg <= 0 || s->n_rows <= 0)
        return na_err(NA_ERR_INVALID, "step: empty (%d rows, %d segments)",
                      s->n_rows, s->n_seg);
    for (i = 0; i < s->n_seg; i++) {
        const na_step_seg_t *g = &s->seg[i];
        if (g->row0 != row || g->n_tok <= 0 || g->pos0 < 0 ||
            g->pos0 + g->n_tok > e->cfg.seq_len)
            return na_err(NA_ERR_INVALID,
                          "step: segment %d (row0 %d, %d tokens at position %d) is not "
                          "contiguous or exceeds the context of %d",
                          i, g->row0, g->n_tok, g->pos0, e->cfg.seq_len);
        for (j = 0; j < g->n_tok; j++) {
            int t = s->tokens[row + j];
            if (t < 0 || t >= e->cfg.vocab_size)
                return na_err(NA_ERR_INVALID, "step: token id %d outside [0, %d)",
                              t, e->cfg.vocab_size);
            if (s->pos[row + j] != g->pos0 + j)
                return na_err(NA_ERR_INVALID, "step: row %d has position %d, expected %d",
                              row + j, s->pos[row + j], g->pos0 + j);
        }
        row += g->n_tok;
    }
    if (row != s->n_rows)
        return na_err(NA_ERR_INVALID, "step: segments cover %d rows of %d", row, s->n_rows);
    return NA_OK;
}

na_status_t na_engine_attn_local(na_engine_t *e, na_acts_t *a, const na_step_t *s,
                                 int layer)
{
    na_status_t st;
    int i;

    st = e->kern->ops->sync(e->kern);       /* q, k, v are read on the host */
    if (st != NA_OK)
        return st;
    for (i = 0; i < s->n_seg; i++) {
        const na_step_seg_t *g = &s->seg[i];
        size_t r = (size_t)g->row0;
        na_kv_local_write(g->kv, layer, g->pos0, g->n_tok,
                          a->k + r * (size_t)e->kv_dim, a->v + r * (size_t)e->kv_dim);
        na_kv_local_attend(g->kv, e->kern, layer, a->att + r * (size_t)e->q_dim,
                           a->q + r * (size_t)e->q_dim, g->n_tok, g->pos0, &e->cfg);
    }
    return NA_OK;
}

na_status_t na_engine_forward(na_engine_t *e, na_acts_t *a, const na_step_t *s)
{
    na_status_t st;
    int i, l;

    st = na_step_check(e, s);
    if (st != NA_OK)
        return st;
    for (i = 0; i < s->n_seg; i++) {
        if (s->seg[i].kv == NULL)
            return na_err(NA_ERR_INVALID, "step: segment %d has no local KV cache", i);
        st = na_kv_local_reserve(s->seg[i].kv, s->seg[i].pos0 + s->seg[i].n_tok);
        if (st != NA_OK)
            return st;
    }
    st = na_acts_reserve(a, e, s->n_rows, s->n_seg);
    if (st != NA_OK)
        return st;

    na_slice_embed(e, a, s);
    for (l = 0; l < e->cfg.n_layers; l++) {
        na_slice_pre_attn(e, a, s, l);
        st = na_engine_attn_local(e, a, s, l);
        if (st != NA_OK)
            return st;
        na_slice_post_attn(e, a, s, l);
    }
    na_slice_final(e, a, s);
    st = e->kern->ops->sync(e->kern);
    if (st != NA_OK)
        return st;

    for (i = 0; i < s->n_seg; i++)
        na_kv_local_commit(s->seg[i].kv, s->seg[i].pos0 + s->seg[i].n_tok);
    return NA_OK;
}

/* common/model_check.c — the config checks both model loaders share
 * (model_internal.h: na_model_check_config), below common/model.c (which
 * dispatches to the loaders) and the loaders common/llama2c.c and
 * common/model_gguf.c, so that no loader calls back up into model.c. */
#include <string.h>

#include "model_internal.h"

/* Check lo <= v <= hi for a field. */
static na_status_t na_model_bound(const na_model_t *m, const char *field, long long v,
                                  long long lo, long long hi)
{
    if (v < lo || v > hi)
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %lld out of range [%lld, %lld]",
                      m->path, field, v, lo, hi);
    return NA_OK;
}

na_status_t na_model_check_config(const na_model_t *m, const na_model_field_names_t *f,
                                  na_model_config_t *c)
{
    na_status_t st;

    if ((st = na_model_bound(m, f->dim, c->dim, 1, NA_MODEL_MAX_DIM)) != NA_OK ||
        (st = na_model_bound(m, f->hidden_dim, c->hidden_dim, 1, NA_MODEL_MAX_HIDDEN)) != NA_OK ||
        (st = na_model_bound(m, f->n_layers, c->n_layers, 1, NA_MODEL_MAX_LAYERS)) != NA_OK ||
        (st = na_model_bound(m, f->n_heads, c->n_heads, 1, NA_MODEL_MAX_HEADS)) != NA_OK ||
        (st = na_model_bound(m, f->n_kv_heads, c->n_kv_heads, 1, NA_MODEL_MAX_HEADS)) != NA_OK ||
        (st = na_model_bound(m, f->vocab_size, c->vocab_size, 1, NA_MODEL_MAX_VOCAB)) != NA_OK ||
        (st = na_model_bound(m, f->seq_len, c->seq_len, 1, NA_MODEL_MAX_SEQ)) != NA_OK)
        return st;
    if (c->head_dim <= 0) {
        if (c->dim % c->n_heads != 0)
            return na_err(NA_ERR_FORMAT, "%s: field '%s' = %d does not divide field '%s' = %d",
                          m->path, f->n_heads, c->n_heads, f->dim, c->dim);
        c->head_dim = c->dim / c->n_heads;
        if (c->head_dim % 2 != 0 || c->head_dim > NA_MODEL_MAX_HEAD_DIM)
            return na_err(NA_ERR_FORMAT, "%s: head_dim = '%s' / '%s' = %d must be even and <= %d",
                          m->path, f->dim, f->n_heads, c->head_dim, NA_MODEL_MAX_HEAD_DIM);
    } else if (c->head_dim % 2 != 0 || c->head_dim > NA_MODEL_MAX_HEAD_DIM) {
        return na_err(NA_ERR_FORMAT, "%s: field '%s' = %d must be even and <= %d", m->path,
                      f->head_dim, c->head_dim, NA_MODEL_MAX_HEAD_DIM);
    }
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
        return na_err(NA_ERR_FORMAT, "%s: field '%s' = %d does not divide field '%s' = %d",
                      m->path, f->n_kv_heads, c->n_kv_heads, f->n_heads, c->n_heads);
    if (c->rope_dims <= 0)
        c->rope_dims = c->head_dim;
    else if (c->rope_dims % 2 != 0 || c->rope_dims > c->head_dim)
        return na_err(NA_ERR_FORMAT, "%s: field '%s' = %d must be even and <= head_dim %d",
                      m->path, f->rope_dims, c->rope_dims, c->head_dim);
    if (c->rope_freq_scale == 0.0f)
        c->rope_freq_scale = 1.0f;
    if (c->yarn_attn_factor == 0.0f)
        c->yarn_attn_factor = 1.0f;
    if (c->yarn_beta_fast == 0.0f)
        c->yarn_beta_fast = 32.0f;
    if (c->yarn_beta_slow == 0.0f)
        c->yarn_beta_slow = 1.0f;
    if (c->yarn_orig_ctx == 0)
        c->yarn_orig_ctx = c->seq_len;
    if (c->arch[0] == 0)
        memcpy(c->arch, "llama", 6);
    if (!(c->rope_theta > 0.0f) || !(c->rope_theta < 1e12f))
        return na_err(NA_ERR_RANGE, "%s: rope theta %g out of range (0, 1e12)", m->path,
                      (double)c->rope_theta);
    if (!(c->rms_eps > 0.0f) || !(c->rms_eps < 1.0f))
        return na_err(NA_ERR_RANGE, "%s: rms epsilon %g out of range (0, 1)", m->path,
                      (double)c->rms_eps);
    return NA_OK;
}

/* kernels/rope.c — the RoPE table (rope.h). The yarn math is llama.cpp's
 * (ggml's rope_yarn, rope_yarn_ramp and ggml_rope_yarn_corr_dims), folded
 * into one frequency per pair: llama.cpp turns pair i by
 *   theta_interp * (1 - mix_i) + theta_extrap * mix_i,
 *   theta_extrap = pos * base^(-2i/n_dims) / ff_i, theta_interp = scale * theta_extrap,
 * which is pos * freq_i with freq_i = base_i / ff_i * (scale * (1 - mix_i) + mix_i). */
#include "kernels/rope.h"

#include <math.h>
#include <stdlib.h>

void na_rope_desc_plain(na_rope_desc_t *d, int head_dim, float theta)
{
    *d = (na_rope_desc_t){
        .style = NA_ROPE_NORM, .head_dim = head_dim, .n_dims = head_dim, .theta = theta,
        .scaling = NA_ROPE_SCALING_NONE, .freq_scale = 1.0f, .attn_factor = 1.0f,
        .beta_fast = 32.0f, .beta_slow = 1.0f,
    };
}

void na_rope_desc_model(na_rope_desc_t *d, const na_model_t *m)
{
    const na_model_config_t *c = &m->cfg;
    na_rope_desc_plain(d, c->head_dim, c->rope_theta);
    d->style = c->rope_style;
    d->n_dims = c->rope_dims > 0 ? c->rope_dims : c->head_dim;
    d->scaling = c->rope_scaling;
    d->freq_scale = c->rope_freq_scale > 0.0f ? c->rope_freq_scale : 1.0f;
    d->ext_factor = c->yarn_ext_factor;
    d->attn_factor = c->yarn_attn_factor > 0.0f ? c->yarn_attn_factor : 1.0f;
    d->beta_fast = c->yarn_beta_fast;
    d->beta_slow = c->yarn_beta_slow;
    d->orig_ctx = c->yarn_orig_ctx > 0 ? c->yarn_orig_ctx : c->seq_len;
    d->freq_factors = na_tensor_present(&m->rope_freqs) ? m->rope_freqs.data : NULL;
}

/* ggml_rope_yarn_corr_dim: the pair dimension where n_rot turns fit the context. */
static float na_rope_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base)
{
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

na_status_t na_rope_table(const na_rope_desc_t *d, float *freq, float *mscale)
{
    int i, half;
    float lo = 0.0f, hi = 0.0f, ms = d->attn_factor;
    int yarn = d->scaling == NA_ROPE_SCALING_YARN && d->ext_factor != 0.0f;
    float fs = d->scaling == NA_ROPE_SCALING_NONE ? 1.0f : d->freq_scale;

    if (d->head_dim <= 0 || d->head_dim % 2 != 0 || d->n_dims <= 0 || d->n_dims % 2 != 0 ||
        d->n_dims > d->head_dim || !(d->theta > 0.0f) || !(fs > 0.0f) ||
        !(d->attn_factor > 0.0f) || (yarn && d->orig_ctx <= 0))
        return na_err(NA_ERR_INVALID, "rope: bad table (head_dim %d, dims %d, theta %g, scale "
                      "%g, attn factor %g)", d->head_dim, d->n_dims, (double)d->theta,
                      (double)fs, (double)d->attn_factor);
    half = d->n_dims / 2;
    if (yarn) {
        float start = floorf(na_rope_corr_dim(d->n_dims, d->orig_ctx, d->beta_fast, d->theta));
        float end = ceilf(na_rope_corr_dim(d->n_dims, d->orig_ctx, d->beta_slow, d->theta));
        lo = start > 0.0f ? start : 0.0f;
        hi = end < (float)(d->n_dims - 1) ? end : (float)(d->n_dims - 1);
        ms *= 1.0f + 0.1f * logf(1.0f / fs);
    }
    for (i = 0; i < half; i++) {
        /* the llama2.c formula, bit for bit when nothing else applies */
        float f = 1.0f / powf(d->theta, (float)(2 * i) / (float)d->n_dims);
        if (d->freq_factors != NULL)
            f /= d->freq_factors[i];
        if (yarn) {
            float den = hi - lo > 0.001f ? hi - lo : 0.001f;
            float y = ((float)i - lo) / den;
            float ramp = 1.0f - (y < 0.0f ? 0.0f : y > 1.0f ? 1.0f : y);
            float mix = ramp * d->ext_factor;
            f = f * fs * (1.0f - mix) + f * mix;
        } else if (fs != 1.0f) {
            f *= fs;
        }
        freq[i] = f;
    }
    *mscale = ms;
    return NA_OK;
}

na_status_t na_rope_create(na_kernels_t *k, const na_rope_desc_t *d, na_rope_t **r_p)
{
    const na_kernel_ops_t *ops = k->ops;
    na_rope_t *r = calloc(1, sizeof(*r));
    size_t bytes;
    na_status_t st;

    if (r == NULL || (r->freq = malloc((size_t)(d->n_dims > 2 ? d->n_dims : 2) / 2 *
                                       sizeof(float))) == NULL) {
        free(r);
        return na_err(NA_ERR_NOMEM, "rope: out of memory");
    }
    r->k = k;
    if ((st = na_rope_table(d, r->freq, &r->mscale)) != NA_OK)
        goto err;
    r->style = d->style;
    r->head_dim = d->head_dim;
    r->n_dims = d->n_dims;
    bytes = (size_t)r->n_dims / 2 * sizeof(float);
    if ((st = ops->buf_alloc(k, bytes, k->mem, &r->buf)) != NA_OK ||
        (st = ops->upload(k, r->buf, r->freq, bytes)) != NA_OK ||
        (st = na_kernels_finish(k)) != NA_OK)
        goto err;
    *r_p = r;
    return NA_OK;

err:
    na_rope_destroy(r);
    return st;
}

void na_rope_destroy(na_rope_t *r)
{
    if (r == NULL)
        return;
    if (r->buf != NULL)
        r->k->ops->buf_free(r->k, r->buf);
    free(r->freq);
    free(r);
}

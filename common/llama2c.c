/* common/llama2c.c — llama2.c "legacy" (version 0) checkpoints.
 *
 * Layout: 7 x int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads,
 * vocab_size, seq_len; a negative vocab_size means a separate classifier),
 * then f32 tensors, each stacked over layers where it has a layer axis:
 *   token_embedding (vocab, dim)        rms_att (L, dim)
 *   wq (L, n_heads*hs, dim)             wk, wv (L, n_kv_heads*hs, dim)
 *   wo (L, dim, n_heads*hs)             rms_ffn (L, dim)
 *   w1, w3 (L, hidden, dim)             w2 (L, dim, hidden)
 *   rms_final (dim)                     freq_cis_real, freq_cis_imag (seq_len, hs/2)
 *   wcls (vocab, dim)                   only with a separate classifier
 * Matrices are (out, in) row-major (y = W·x), i.e. rows = out, cols = in,
 * exactly model.h's convention: every tensor points into the mmap. The file
 * size must equal the size the header implies. */
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

enum {
    NA_L2C_TOK, NA_L2C_RMS_ATT, NA_L2C_WQ, NA_L2C_WK, NA_L2C_WV, NA_L2C_WO, NA_L2C_RMS_FFN,
    NA_L2C_W1, NA_L2C_W2, NA_L2C_W3, NA_L2C_RMS_FINAL, NA_L2C_FREQ_RE, NA_L2C_FREQ_IM,
    NA_L2C_WCLS, NA_L2C_COUNT
};

static const char *const na_l2c_names[NA_L2C_COUNT] = {
    "token_embedding", "rms_att_weight", "wq", "wk", "wv", "wo", "rms_ffn_weight",
    "w1", "w2", "w3", "rms_final_weight", "freq_cis_real", "freq_cis_imag", "wcls",
};

static const na_model_field_names_t na_l2c_fields = {
    "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len", NULL, NULL,
};

/* A 2-D f32 tensor at byte offset off of the map. */
static na_tensor_t na_l2c_tensor(const na_model_t *m, uint64_t off, int rows, int cols)
{
    na_tensor_t t;
    t.dtype = NA_DTYPE_F32;
    t.rows = rows;
    t.cols = cols;
    t.data = (const uint8_t *)m->map + off;
    return t;
}

/* The header into m->cfg and every tensor's offset, checked against the file
 * size m->map_size (m->map holds at least the header's bytes). */
static na_status_t na_l2c_layout(na_model_t *m, uint64_t off[NA_L2C_COUNT])
{
    static const char *const hdr_names[7] = {
        "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len",
    };
    na_model_config_t *c = &m->cfg;
    uint64_t elems[NA_L2C_COUNT], pos, d, h, L, q, kv, hs;
    int32_t hdr[7];
    int i;
    na_status_t st;

    if (m->map_size < sizeof(hdr)) {
        for (i = 0; (size_t)(i + 1) * 4 <= m->map_size; i++)
            ;
        return na_err(NA_ERR_FORMAT, "%s: header field '%s' runs past the end (file is %zu "
                      "bytes)", m->path, hdr_names[i], m->map_size);
    }
    memcpy(hdr, m->map, sizeof(hdr));
    c->dim = hdr[0];
    c->hidden_dim = hdr[1];
    c->n_layers = hdr[2];
    c->n_heads = hdr[3];
    c->n_kv_heads = hdr[4];
    c->shared_classifier = hdr[5] > 0;
    c->vocab_size = hdr[5] == INT32_MIN ? INT32_MIN : abs(hdr[5]);
    c->seq_len = hdr[6];
    c->rope_theta = 10000.0f;
    c->rms_eps = 1e-5f;
    if ((st = na_model_check_config(m, &na_l2c_fields, c)) != NA_OK)
        return st;

    d = (uint64_t)c->dim;
    h = (uint64_t)c->hidden_dim;
    L = (uint64_t)c->n_layers;
    hs = (uint64_t)c->head_dim;
    q = (uint64_t)c->n_heads * hs;
    kv = (uint64_t)c->n_kv_heads * hs;
    elems[NA_L2C_TOK] = (uint64_t)c->vocab_size * d;
    elems[NA_L2C_RMS_ATT] = L * d;
    elems[NA_L2C_WQ] = L * q * d;
    elems[NA_L2C_WK] = L * kv * d;
    elems[NA_L2C_WV] = L * kv * d;
    elems[NA_L2C_WO] = L * d * q;
    elems[NA_L2C_RMS_FFN] = L * d;
    elems[NA_L2C_W1] = L * h * d;
    elems[NA_L2C_W2] = L * d * h;
    elems[NA_L2C_W3] = L * h * d;
    elems[NA_L2C_RMS_FINAL] = d;
    elems[NA_L2C_FREQ_RE] = (uint64_t)c->seq_len * hs / 2;
    elems[NA_L2C_FREQ_IM] = (uint64_t)c->seq_len * hs / 2;
    elems[NA_L2C_WCLS] = c->shared_classifier ? 0 : (uint64_t)c->vocab_size * d;

    /* every tensor inside the file, and nothing after the last one */
    pos = sizeof(hdr);
    for (i = 0; i < NA_L2C_COUNT; i++) {
        uint64_t bytes = elems[i] * 4;
        off[i] = pos;
        if (bytes > (uint64_t)m->map_size - pos)
            return na_err(NA_ERR_FORMAT, "%s: tensor '%s' (%llu bytes at offset %llu) runs past "
                          "the end of the file (%zu bytes); truncated file or wrong header?",
                          m->path, na_l2c_names[i], (unsigned long long)bytes,
                          (unsigned long long)pos, m->map_size);
        pos += bytes;
    }
    if (pos != m->map_size)
        return na_err(NA_ERR_FORMAT, "%s: %llu trailing bytes after the last tensor '%s': the "
                      "header (dim %d, hidden_dim %d, n_layers %d, vocab_size %d%s) implies %llu "
                      "bytes", m->path, (unsigned long long)(m->map_size - pos),
                      c->shared_classifier ? "rms_final/freq_cis" : "wcls", c->dim,
                      c->hidden_dim, c->n_layers, c->vocab_size,
                      c->shared_classifier ? ", shared classifier" : "",
                      (unsigned long long)pos);
    return NA_OK;
}

na_status_t na_llama2c_config(na_model_t *m)
{
    uint64_t off[NA_L2C_COUNT];
    return na_l2c_layout(m, off);
}

na_status_t na_llama2c_load(na_model_t *m)
{
    na_model_config_t *c = &m->cfg;
    uint64_t off[NA_L2C_COUNT], d, h, q, kv;
    int l;
    na_status_t st;

    if ((st = na_l2c_layout(m, off)) != NA_OK)
        return st;
    d = (uint64_t)c->dim;
    h = (uint64_t)c->hidden_dim;
    q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (m->layers == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for %d layers", m->path, c->n_layers);
    m->tok_embd = na_l2c_tensor(m, off[NA_L2C_TOK], c->vocab_size, c->dim);
    for (l = 0; l < c->n_layers; l++) {
        na_layer_weights_t *w = &m->layers[l];
        uint64_t ul = (uint64_t)l;
        w->attn_norm = na_l2c_tensor(m, off[NA_L2C_RMS_ATT] + ul * d * 4, 1, c->dim);
        w->wq = na_l2c_tensor(m, off[NA_L2C_WQ] + ul * q * d * 4, (int)q, c->dim);
        w->wk = na_l2c_tensor(m, off[NA_L2C_WK] + ul * kv * d * 4, (int)kv, c->dim);
        w->wv = na_l2c_tensor(m, off[NA_L2C_WV] + ul * kv * d * 4, (int)kv, c->dim);
        w->wo = na_l2c_tensor(m, off[NA_L2C_WO] + ul * d * q * 4, c->dim, (int)q);
        w->ffn_norm = na_l2c_tensor(m, off[NA_L2C_RMS_FFN] + ul * d * 4, 1, c->dim);
        w->w1 = na_l2c_tensor(m, off[NA_L2C_W1] + ul * h * d * 4, c->hidden_dim, c->dim);
        w->w2 = na_l2c_tensor(m, off[NA_L2C_W2] + ul * d * h * 4, c->dim, c->hidden_dim);
        w->w3 = na_l2c_tensor(m, off[NA_L2C_W3] + ul * h * d * 4, c->hidden_dim, c->dim);
    }
    m->out_norm = na_l2c_tensor(m, off[NA_L2C_RMS_FINAL], 1, c->dim);
    m->output = c->shared_classifier ? m->tok_embd
                                     : na_l2c_tensor(m, off[NA_L2C_WCLS], c->vocab_size, c->dim);
    return NA_OK;
}

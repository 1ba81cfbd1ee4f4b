/* common/model_gguf.c — LLaMA-family models from GGUF v3 files
 * (general.architecture = "llama").
 *
 * Hyper-parameters: llama.embedding_length, llama.feed_forward_length,
 * llama.block_count, llama.attention.head_count, llama.attention.head_count_kv
 * (default head_count), llama.context_length, llama.rope.freq_base (default
 * 10000), llama.attention.layer_norm_rms_epsilon (default 1e-5); the vocabulary
 * size from tokenizer.ggml.tokens (else token_embd.weight).
 * Tensors: token_embd.weight, blk.N.{attn_norm, attn_q, attn_k, attn_v,
 * attn_output, ffn_norm, ffn_gate, ffn_down, ffn_up}.weight, output_norm.weight,
 * output.weight (absent: tied to token_embd). GGUF ne[0] is the contiguous
 * (input) dimension, so a matrix has cols = ne[0], rows = ne[1].
 * Matrices stay in their file dtype (F32/F16/BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q4_K, Q5_K, Q6_K: na_dtype_t) inside the mmap; norms are converted to F32
 * into m->owned when stored otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_internal.h"

static const na_model_field_names_t na_mg_fields = {
    "llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
    "llama.attention.head_count", "llama.attention.head_count_kv", "tokenizer.ggml.tokens",
    "llama.context_length",
};

/* Map a ggml type to ours; -1 if not loadable. */
static int na_mg_dtype(uint32_t ggml_type)
{
    switch (ggml_type) {
    case NA_GGML_TYPE_F32:  return NA_DTYPE_F32;
    case NA_GGML_TYPE_F16:  return NA_DTYPE_F16;
    case NA_GGML_TYPE_BF16: return NA_DTYPE_BF16;
    case NA_GGML_TYPE_Q8_0: return NA_DTYPE_Q8_0;
    case NA_GGML_TYPE_Q4_0: return NA_DTYPE_Q4_0;
    case NA_GGML_TYPE_Q4_1: return NA_DTYPE_Q4_1;
    case NA_GGML_TYPE_Q5_0: return NA_DTYPE_Q5_0;
    case NA_GGML_TYPE_Q5_1: return NA_DTYPE_Q5_1;
    case NA_GGML_TYPE_Q4_K: return NA_DTYPE_Q4_K;
    case NA_GGML_TYPE_Q5_K: return NA_DTYPE_Q5_K;
    case NA_GGML_TYPE_Q6_K: return NA_DTYPE_Q6_K;
    default:                return -1;
    }
}

/* A required u32 field that must fit an int. */
static na_status_t na_mg_int(const na_model_t *m, const char *key, int *out)
{
    uint32_t v;
    na_status_t st = na_gguf_get_u32(m->gguf, key, &v);
    if (st != NA_OK)
        return st;
    if (v > (uint32_t)NA_MODEL_MAX_VOCAB * 4)
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %u is absurdly large", m->path, key, v);
    *out = (int)v;
    return NA_OK;
}

/* Look up tensor `name` with shape (rows, cols) (rows = 1: 1-D). */
static na_status_t na_mg_tensor(const na_model_t *m, const char *name, int rows, int cols,
                                na_tensor_t *t)
{
    const na_gguf_tensor_t *gt = na_gguf_find_tensor(m->gguf, name);
    uint64_t want_r = (uint64_t)rows, got_r;
    int dt;

    if (gt == NULL)
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s' is missing", m->path, name);
    got_r = gt->ne[1] * gt->ne[2] * gt->ne[3];
    if (gt->ne[0] != (uint64_t)cols || got_r != want_r || (rows > 1 && gt->n_dims != 2))
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s': shape ne = [%llu, %llu, %llu, %llu] "
                      "(n_dims %u), expected [%d, %d]", m->path, name,
                      (unsigned long long)gt->ne[0], (unsigned long long)gt->ne[1],
                      (unsigned long long)gt->ne[2], (unsigned long long)gt->ne[3], gt->n_dims,
                      cols, rows);
    dt = na_mg_dtype(gt->type);
    if (dt < 0)
        return na_err(NA_ERR_UNSUPPORTED, "%s: tensor '%s': type %s (%u) is not supported "
                      "(f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k)", m->path, name, na_gguf_ggml_type_name(gt->type),
                      gt->type);
    if (cols % na_dtype_block((na_dtype_t)dt) != 0)      /* the reader checked ne[0]: kept local */
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s': %d columns are not whole %s blocks of %d",
                      m->path, name, cols, na_dtype_name((na_dtype_t)dt),
                      na_dtype_block((na_dtype_t)dt));
    if ((uintptr_t)gt->data % (dt == NA_DTYPE_F32 ? 4 : 2) != 0)
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s': data at offset %llu is misaligned for %s",
                      m->path, name, (unsigned long long)(m->gguf->data_offset + gt->offset),
                      na_dtype_name((na_dtype_t)dt));
    t->dtype = (na_dtype_t)dt;
    t->rows = rows;
    t->cols = cols;
    t->data = gt->data;
    return NA_OK;
}

/* A norm weight (dim) as F32: converted into slot `slot` of m->owned if needed. */
static na_status_t na_mg_norm(na_model_t *m, const char *name, int slot, na_tensor_t *t)
{
    int dim = m->cfg.dim, i;
    float *dst;
    na_status_t st = na_mg_tensor(m, name, 1, dim, t);

    if (st != NA_OK || t->dtype == NA_DTYPE_F32)
        return st;
    if (na_dtype_is_quant(t->dtype))
        return na_err(NA_ERR_UNSUPPORTED, "%s: tensor '%s': %s norm weights are not supported",
                      m->path, name, na_dtype_name(t->dtype));
    if (m->owned == NULL) {
        m->owned = calloc((size_t)(2 * m->cfg.n_layers + 1) * (size_t)dim, sizeof(float));
        if (m->owned == NULL)
            return na_err(NA_ERR_NOMEM, "%s: no memory for norm weights", m->path);
    }
    dst = (float *)m->owned + (size_t)slot * (size_t)dim;
    for (i = 0; i < dim; i++) {
        uint16_t v;
        memcpy(&v, (const uint8_t *)t->data + 2 * (size_t)i, 2);
        dst[i] = t->dtype == NA_DTYPE_F16 ? na_f16_to_f32(v) : na_bf16_to_f32(v);
    }
    t->dtype = NA_DTYPE_F32;
    t->data = dst;
    return NA_OK;
}

static na_status_t na_mg_config(na_model_t *m)
{
    na_model_config_t *c = &m->cfg;
    const na_gguf_kv_t *toks;
    const na_gguf_tensor_t *emb;
    na_gguf_str_t arch;
    uint32_t rope_dims;
    na_status_t st;

    st = na_gguf_get_str(m->gguf, "general.architecture", &arch);
    if (st != NA_OK)
        return st;
    if (!(arch.len == 5 && memcmp(arch.data, "llama", 5) == 0))
        return na_err(NA_ERR_UNSUPPORTED, "%s: field 'general.architecture' = '%.*s': only "
                      "'llama' is supported", m->path, (int)(arch.len > 64 ? 64 : arch.len),
                      arch.data);
    if ((st = na_mg_int(m, "llama.embedding_length", &c->dim)) != NA_OK ||
        (st = na_mg_int(m, "llama.feed_forward_length", &c->hidden_dim)) != NA_OK ||
        (st = na_mg_int(m, "llama.block_count", &c->n_layers)) != NA_OK ||
        (st = na_mg_int(m, "llama.attention.head_count", &c->n_heads)) != NA_OK ||
        (st = na_mg_int(m, "llama.context_length", &c->seq_len)) != NA_OK)
        return st;
    c->n_kv_heads = c->n_heads;
    if (na_gguf_find(m->gguf, "llama.attention.head_count_kv") &&
        (st = na_mg_int(m, "llama.attention.head_count_kv", &c->n_kv_heads)) != NA_OK)
        return st;
    c->rope_theta = 10000.0f;
    if (na_gguf_find(m->gguf, "llama.rope.freq_base") &&
        (st = na_gguf_get_f32(m->gguf, "llama.rope.freq_base", &c->rope_theta)) != NA_OK)
        return st;
    c->rms_eps = 1e-5f;
    if (na_gguf_find(m->gguf, "llama.attention.layer_norm_rms_epsilon") &&
        (st = na_gguf_get_f32(m->gguf, "llama.attention.layer_norm_rms_epsilon",
                              &c->rms_eps)) != NA_OK)
        return st;
    if (na_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", NA_GGUF_STRING, &toks) == NA_OK) {
        c->vocab_size = toks->v.arr.n > NA_MODEL_MAX_VOCAB ? NA_MODEL_MAX_VOCAB + 1
                                                          : (int)toks->v.arr.n;
    } else if ((emb = na_gguf_find_tensor(m->gguf, "token_embd.weight")) != NULL) {
        c->vocab_size = emb->ne[1] > NA_MODEL_MAX_VOCAB ? NA_MODEL_MAX_VOCAB + 1
                                                       : (int)emb->ne[1];
    } else {
        return na_err(NA_ERR_FORMAT, "%s: neither 'tokenizer.ggml.tokens' nor tensor "
                      "'token_embd.weight' gives the vocabulary size", m->path);
    }
    na_err_clear();
    if ((st = na_model_check_config(m, &na_mg_fields, c)) != NA_OK)
        return st;
    if (na_gguf_find(m->gguf, "llama.rope.dimension_count")) {
        if ((st = na_gguf_get_u32(m->gguf, "llama.rope.dimension_count", &rope_dims)) != NA_OK)
            return st;
        if (rope_dims != (uint32_t)c->head_dim)
            return na_err(NA_ERR_UNSUPPORTED, "%s: field 'llama.rope.dimension_count' = %u: "
                          "partial RoPE (head_dim %d) is not supported", m->path, rope_dims,
                          c->head_dim);
    }
    return NA_OK;
}

na_status_t na_model_gguf_load(na_model_t *m)
{
    na_model_config_t *c = &m->cfg;
    int q, kv, l;
    char name[64];
    na_status_t st;

    if ((st = na_gguf_parse(m->path, m->map, m->map_size, &m->gguf)) != NA_OK)
        return st;
    if ((st = na_mg_config(m)) != NA_OK)
        return st;
    q = c->n_heads * c->head_dim;
    kv = c->n_kv_heads * c->head_dim;
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (m->layers == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for %d layers", m->path, c->n_layers);
    if ((st = na_mg_tensor(m, "token_embd.weight", c->vocab_size, c->dim, &m->tok_embd)) != NA_OK)
        return st;
    for (l = 0; l < c->n_layers; l++) {
        na_layer_weights_t *w = &m->layers[l];
#define NA_MG_T(field, suffix, rows, cols) \
        snprintf(name, sizeof(name), "blk.%d." suffix ".weight", l); \
        if ((st = na_mg_tensor(m, name, (rows), (cols), &w->field)) != NA_OK) \
            return st;
        snprintf(name, sizeof(name), "blk.%d.attn_norm.weight", l);
        if ((st = na_mg_norm(m, name, 2 * l, &w->attn_norm)) != NA_OK)
            return st;
        NA_MG_T(wq, "attn_q", q, c->dim)
        NA_MG_T(wk, "attn_k", kv, c->dim)
        NA_MG_T(wv, "attn_v", kv, c->dim)
        NA_MG_T(wo, "attn_output", c->dim, q)
        snprintf(name, sizeof(name), "blk.%d.ffn_norm.weight", l);
        if ((st = na_mg_norm(m, name, 2 * l + 1, &w->ffn_norm)) != NA_OK)
            return st;
        NA_MG_T(w1, "ffn_gate", c->hidden_dim, c->dim)
        NA_MG_T(w2, "ffn_down", c->dim, c->hidden_dim)
        NA_MG_T(w3, "ffn_up", c->hidden_dim, c->dim)
#undef NA_MG_T
    }
    if ((st = na_mg_norm(m, "output_norm.weight", 2 * c->n_layers, &m->out_norm)) != NA_OK)
        return st;
    c->shared_classifier = na_gguf_find_tensor(m->gguf, "output.weight") == NULL;
    if (c->shared_classifier)
        m->output = m->tok_embd;
    else if ((st = na_mg_tensor(m, "output.weight", c->vocab_size, c->dim, &m->output)) != NA_OK)
        return st;
    return NA_OK;
}

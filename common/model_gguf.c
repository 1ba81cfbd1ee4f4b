/* common/model_gguf.c — models from GGUF v3 files, one loader for every
 * architecture of common/model_arch.c (general.architecture names the table).
 *
 * Hyper-parameters, with A the architecture: A.embedding_length,
 * A.feed_forward_length, A.block_count, A.attention.head_count,
 * A.attention.head_count_kv (default head_count), A.context_length,
 * A.attention.key_length / value_length (default dim / head_count; they must
 * be equal), A.rope.freq_base (default 10000), A.rope.dimension_count
 * (default head_dim: partial RoPE when smaller), A.rope.scaling.type (none,
 * linear, yarn) with A.rope.scaling.factor, A.rope.scaling.attn_factor,
 * A.rope.scaling.original_context_length, A.rope.scaling.yarn_ext_factor,
 * A.rope.scaling.yarn_beta_fast / yarn_beta_slow,
 * A.attention.layer_norm_rms_epsilon (default 1e-5); the vocabulary size from
 * tokenizer.ggml.tokens (else token_embd.weight).
 * Tensors: token_embd.weight, blk.N.<name>.<suffix> for every layer tensor
 * the architecture's table has (required ones must be there, optional ones
 * are used when there), output_norm.weight, output.weight (absent: tied to
 * token_embd), rope_freqs.weight. GGUF ne[0] is the contiguous (input)
 * dimension, so a matrix has cols = ne[0], rows = ne[1].
 * Matrices stay in their file dtype (F32/F16/BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q4_K, Q5_K, Q6_K: na_dtype_t) inside the mmap;
 * vectors (norms, biases, rope_freqs) are converted to F32 into m->owned
 * when stored otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "model_arch.h"
#include "model_internal.h"

/* The loader's state: the architecture and its key names. */
typedef struct {
    na_model_t            *m;
    const na_model_arch_t *arch;
    size_t                 owned_used, owned_cap;   /* floats of m->owned (allocated
                                                       at the first conversion) */
    char                   keys[9][80];
} na_mg_t;

/* "A.<suffix>" for the architecture A. */
static const char *na_mg_key(const na_model_t *m, char *buf, size_t size, const char *suffix)
{
    snprintf(buf, size, "%s.%s", m->cfg.arch, suffix);
    return buf;
}

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

/* An optional u32 field A.<suffix> (left as it is when absent). */
static na_status_t na_mg_opt_int(const na_model_t *m, const char *suffix, int *out)
{
    char key[96];
    na_mg_key(m, key, sizeof(key), suffix);
    if (na_gguf_find(m->gguf, key) == NULL)
        return NA_OK;
    return na_mg_int(m, key, out);
}

/* An optional f32 field A.<suffix> that must lie in [lo, hi] (left as it is
 * when absent). */
static na_status_t na_mg_opt_f32(const na_model_t *m, const char *suffix, float lo, float hi,
                                 float *out)
{
    char key[96];
    float v;
    na_status_t st;

    na_mg_key(m, key, sizeof(key), suffix);
    if (na_gguf_find(m->gguf, key) == NULL)
        return NA_OK;
    if ((st = na_gguf_get_f32(m->gguf, key, &v)) != NA_OK)
        return st;
    if (!(v >= lo && v <= hi))
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %g out of range [%g, %g]", m->path, key,
                      (double)v, (double)lo, (double)hi);
    *out = v;
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
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s' is missing (architecture '%s')", m->path,
                      name, m->cfg.arch);
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

/* A vector tensor (norm, bias, rope_freqs) of n elements as F32: converted
 * into the next n floats of m->owned if stored as F16/BF16. */
static na_status_t na_mg_vector(na_mg_t *g, const char *name, int n, na_tensor_t *t)
{
    na_model_t *m = g->m;
    float *dst;
    int i;
    na_status_t st = na_mg_tensor(m, name, 1, n, t);

    if (st != NA_OK || t->dtype == NA_DTYPE_F32)
        return st;
    if (na_dtype_is_quant(t->dtype))
        return na_err(NA_ERR_UNSUPPORTED, "%s: tensor '%s': %s vectors (norms, biases) are "
                      "not supported", m->path, name, na_dtype_name(t->dtype));
    if (g->owned_used + (size_t)n > g->owned_cap)
        return na_err(NA_ERR_FORMAT, "%s: tensor '%s': more vector data than the config "
                      "allows", m->path, name);
    if (m->owned == NULL && (m->owned = malloc(g->owned_cap * sizeof(float))) == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for norm weights", m->path);
    dst = (float *)m->owned + g->owned_used;
    g->owned_used += (size_t)n;
    for (i = 0; i < n; i++) {
        uint16_t v;
        memcpy(&v, (const uint8_t *)t->data + 2 * (size_t)i, 2);
        dst[i] = t->dtype == NA_DTYPE_F16 ? na_f16_to_f32(v) : na_bf16_to_f32(v);
    }
    t->dtype = NA_DTYPE_F32;
    t->data = dst;
    return NA_OK;
}

/* general.architecture -> its table and cfg.arch. */
static na_status_t na_mg_arch(na_mg_t *g)
{
    na_model_t *m = g->m;
    na_gguf_str_t arch;
    char list[128];
    na_status_t st;

    st = na_gguf_get_str(m->gguf, "general.architecture", &arch);
    if (st != NA_OK)
        return st;
    g->arch = na_model_arch_find(arch.data, (size_t)arch.len);
    if (g->arch == NULL)
        return na_err(NA_ERR_UNSUPPORTED, "%s: field 'general.architecture' = '%.*s' is not "
                      "supported (supported: %s)", m->path, (int)(arch.len > 64 ? 64 : arch.len),
                      arch.data, na_model_arch_list(list, sizeof(list)));
    snprintf(m->cfg.arch, sizeof(m->cfg.arch), "%s", g->arch->name);
    m->cfg.rope_style = g->arch->rope_style;
    return NA_OK;
}

/* A.rope.scaling.*: type, factor, yarn parameters. */
static na_status_t na_mg_rope_scaling(na_mg_t *g)
{
    na_model_t *m = g->m;
    na_model_config_t *c = &m->cfg;
    float factor = 0.0f;
    char key[96];
    na_gguf_str_t type;
    na_status_t st;

    /* absent: none (llama.cpp says linear, with factor 1: the same) */
    c->rope_scaling = NA_ROPE_SCALING_NONE;
    na_mg_key(m, key, sizeof(key), "rope.scaling.type");
    if (na_gguf_find(m->gguf, key) != NULL) {
        if ((st = na_gguf_get_str(m->gguf, key, &type)) != NA_OK)
            return st;
        if (type.len == 4 && memcmp(type.data, "none", 4) == 0)
            c->rope_scaling = NA_ROPE_SCALING_NONE;
        else if (type.len == 6 && memcmp(type.data, "linear", 6) == 0)
            c->rope_scaling = NA_ROPE_SCALING_LINEAR;
        else if (type.len == 4 && memcmp(type.data, "yarn", 4) == 0)
            c->rope_scaling = NA_ROPE_SCALING_YARN;
        else
            return na_err(NA_ERR_UNSUPPORTED, "%s: field '%s' = '%.*s' is not supported (none, "
                          "linear, yarn)", m->path, key, (int)(type.len > 64 ? 64 : type.len),
                          type.data);
    }
    /* factor: the scaling's, else the old key A.rope.scale_linear; 0 = none */
    if ((st = na_mg_opt_f32(m, "rope.scale_linear", 0.0f, 1e6f, &factor)) != NA_OK ||
        (st = na_mg_opt_f32(m, "rope.scaling.factor", 0.0f, 1e6f, &factor)) != NA_OK)
        return st;
    if (na_gguf_find(m->gguf, key) == NULL && factor != 0.0f)
        c->rope_scaling = NA_ROPE_SCALING_LINEAR;  /* llama.cpp's default type */
    if (factor != 0.0f && factor < 1e-6f)
        return na_err(NA_ERR_RANGE, "%s: field '%s.rope.scaling.factor' = %g is too small",
                      m->path, c->arch, (double)factor);
    /* the defaults of the rest: na_model_check_config */
    c->rope_freq_scale = c->rope_scaling == NA_ROPE_SCALING_NONE || factor == 0.0f
                             ? 1.0f : 1.0f / factor;
    c->yarn_ext_factor = c->rope_scaling == NA_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    if ((st = na_mg_opt_f32(m, "rope.scaling.attn_factor", 1e-3f, 1e3f,
                            &c->yarn_attn_factor)) != NA_OK ||
        (st = na_mg_opt_int(m, "rope.scaling.original_context_length",
                            &c->yarn_orig_ctx)) != NA_OK)
        return st;
    if (c->rope_scaling == NA_ROPE_SCALING_YARN &&
        ((st = na_mg_opt_f32(m, "rope.scaling.yarn_ext_factor", 0.0f, 1.0f,
                             &c->yarn_ext_factor)) != NA_OK ||
         (st = na_mg_opt_f32(m, "rope.scaling.yarn_beta_fast", 1e-3f, 1e4f,
                             &c->yarn_beta_fast)) != NA_OK ||
         (st = na_mg_opt_f32(m, "rope.scaling.yarn_beta_slow", 1e-3f, 1e4f,
                             &c->yarn_beta_slow)) != NA_OK))
        return st;
    if (c->yarn_orig_ctx < 1 || c->yarn_orig_ctx > NA_MODEL_MAX_SEQ)
        return na_err(NA_ERR_RANGE, "%s: field '%s.rope.scaling.original_context_length' = %d "
                      "out of range [1, %d]", m->path, c->arch, c->yarn_orig_ctx,
                      NA_MODEL_MAX_SEQ);
    return NA_OK;
}

static na_status_t na_mg_config(na_mg_t *g)
{
    na_model_t *m = g->m;
    na_model_config_t *c = &m->cfg;
    const na_gguf_kv_t *toks;
    const na_gguf_tensor_t *emb;
    na_model_field_names_t names;
    int head_v = 0;
    na_status_t st;

    if ((st = na_mg_arch(g)) != NA_OK)
        return st;
    names.dim = na_mg_key(m, g->keys[0], sizeof(g->keys[0]), "embedding_length");
    names.hidden_dim = na_mg_key(m, g->keys[1], sizeof(g->keys[1]), "feed_forward_length");
    names.n_layers = na_mg_key(m, g->keys[2], sizeof(g->keys[2]), "block_count");
    names.n_heads = na_mg_key(m, g->keys[3], sizeof(g->keys[3]), "attention.head_count");
    names.n_kv_heads = na_mg_key(m, g->keys[4], sizeof(g->keys[4]), "attention.head_count_kv");
    names.vocab_size = "tokenizer.ggml.tokens";
    names.seq_len = na_mg_key(m, g->keys[5], sizeof(g->keys[5]), "context_length");
    names.head_dim = na_mg_key(m, g->keys[6], sizeof(g->keys[6]), "attention.key_length");
    names.rope_dims = na_mg_key(m, g->keys[7], sizeof(g->keys[7]), "rope.dimension_count");
    if ((st = na_mg_int(m, names.dim, &c->dim)) != NA_OK ||
        (st = na_mg_int(m, names.hidden_dim, &c->hidden_dim)) != NA_OK ||
        (st = na_mg_int(m, names.n_layers, &c->n_layers)) != NA_OK ||
        (st = na_mg_int(m, names.n_heads, &c->n_heads)) != NA_OK ||
        (st = na_mg_int(m, names.seq_len, &c->seq_len)) != NA_OK)
        return st;
    c->n_kv_heads = c->n_heads;
    if ((st = na_mg_opt_int(m, "attention.head_count_kv", &c->n_kv_heads)) != NA_OK ||
        (st = na_mg_opt_int(m, "attention.key_length", &c->head_dim)) != NA_OK ||
        (st = na_mg_opt_int(m, "attention.value_length", &head_v)) != NA_OK ||
        (st = na_mg_opt_int(m, "rope.dimension_count", &c->rope_dims)) != NA_OK)
        return st;
    if (na_gguf_find(m->gguf, names.head_dim) != NULL && c->head_dim <= 0)
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %d must be > 0", m->path, names.head_dim,
                      c->head_dim);
    if (na_gguf_find(m->gguf, names.rope_dims) != NULL && c->rope_dims <= 0)
        return na_err(NA_ERR_RANGE, "%s: field '%s' = %d must be > 0", m->path,
                      names.rope_dims, c->rope_dims);
    c->rope_theta = 10000.0f;
    c->rms_eps = 1e-5f;
    if ((st = na_mg_opt_f32(m, "rope.freq_base", -1e30f, 1e30f, &c->rope_theta)) != NA_OK ||
        (st = na_mg_opt_f32(m, "attention.layer_norm_rms_epsilon", -1e30f, 1e30f,
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
    if ((st = na_model_check_config(m, &names, c)) != NA_OK)
        return st;
    if (head_v != 0 && head_v != c->head_dim)
        return na_err(NA_ERR_UNSUPPORTED, "%s: field '%s.attention.value_length' = %d differs "
                      "from the key length %d: not supported", m->path, c->arch, head_v,
                      c->head_dim);
    c->shared_classifier = g->arch->output != NA_TP_REQUIRED &&
                           na_gguf_find_tensor(m->gguf, "output.weight") == NULL;
    return na_mg_rope_scaling(g);
}

/* The layer tensors of the architecture's table. */
static na_status_t na_mg_layer(na_mg_t *g, int l)
{
    na_model_t *m = g->m;
    na_layer_weights_t *w = &m->layers[l];
    char name[96];
    int i, rows, cols;
    na_status_t st;

    for (i = 0; i < NA_LT_COUNT; i++) {
        const na_layer_tensor_info_t *ti = &na_layer_tensors[i];
        na_tensor_t *t = (na_tensor_t *)((char *)w + ti->offset);
        if (g->arch->layer[i] == NA_TP_NONE)
            continue;
        snprintf(name, sizeof(name), "blk.%d.%s.%s", l, ti->name, ti->suffix);
        if (g->arch->layer[i] == NA_TP_OPTIONAL && na_gguf_find_tensor(m->gguf, name) == NULL)
            continue;
        na_model_tshape(&m->cfg, ti->shape, &rows, &cols);
        st = rows == 1 ? na_mg_vector(g, name, cols, t) : na_mg_tensor(m, name, rows, cols, t);
        if (st != NA_OK)
            return st;
    }
    return NA_OK;
}

na_status_t na_model_gguf_config(na_model_t *m)
{
    na_mg_t g;

    memset(&g, 0, sizeof(g));
    g.m = m;
    return na_mg_config(&g);
}

na_status_t na_model_gguf_load(na_model_t *m)
{
    na_model_config_t *c;
    na_mg_t g;
    size_t per_layer;
    int l, i, rows, cols;
    na_status_t st;

    memset(&g, 0, sizeof(g));
    g.m = m;
    c = &m->cfg;
    if ((st = na_gguf_parse(m->path, m->map, m->map_size, &m->gguf)) != NA_OK)
        return st;
    if ((st = na_mg_config(&g)) != NA_OK)
        return st;
    m->layers = calloc((size_t)c->n_layers, sizeof(*m->layers));
    if (m->layers == NULL)
        return na_err(NA_ERR_NOMEM, "%s: no memory for %d layers", m->path, c->n_layers);
    /* room for every vector converted to f32: the layers', output_norm, rope_freqs */
    per_layer = 0;
    for (i = 0; i < NA_LT_COUNT; i++) {
        na_model_tshape(c, na_layer_tensors[i].shape, &rows, &cols);
        if (rows == 1)
            per_layer += (size_t)cols;
    }
    g.owned_cap = per_layer * (size_t)c->n_layers + (size_t)c->dim + (size_t)c->rope_dims / 2;
    if ((st = na_mg_tensor(m, "token_embd.weight", c->vocab_size, c->dim, &m->tok_embd)) != NA_OK)
        return st;
    for (l = 0; l < c->n_layers; l++)
        if ((st = na_mg_layer(&g, l)) != NA_OK)
            return st;
    if ((st = na_mg_vector(&g, "output_norm.weight", c->dim, &m->out_norm)) != NA_OK)
        return st;
    if (g.arch->rope_freqs != NA_TP_NONE &&
        (g.arch->rope_freqs == NA_TP_REQUIRED ||
         na_gguf_find_tensor(m->gguf, "rope_freqs.weight") != NULL) &&
        (st = na_mg_vector(&g, "rope_freqs.weight", c->rope_dims / 2, &m->rope_freqs)) != NA_OK)
        return st;
    for (i = 0; na_tensor_present(&m->rope_freqs) && i < c->rope_dims / 2; i++) {
        float f = ((const float *)m->rope_freqs.data)[i];
        if (!(f > 0.0f && f < 1e30f))
            return na_err(NA_ERR_FORMAT, "%s: tensor 'rope_freqs.weight': element %d = %g is "
                          "not a positive frequency divisor", m->path, i, (double)f);
    }
    if (c->shared_classifier)
        m->output = m->tok_embd;
    else if ((st = na_mg_tensor(m, "output.weight", c->vocab_size, c->dim, &m->output)) != NA_OK)
        return st;
    return NA_OK;
}

/* common/model_arch.c — one table per architecture (model_arch.h). The tensor
 * names and the math each entry implies follow llama.cpp (src/llama-arch.cpp
 * for the names, src/llama.cpp's build_llama / build_qwen2 / build_qwen3). */
#include "model_arch.h"

#include <stdio.h>
#include <string.h>

#define NA_LT(id, n, suf, shp, f) \
    [id] = { n, suf, shp, offsetof(na_layer_weights_t, f), #f }

const na_layer_tensor_info_t na_layer_tensors[NA_LT_COUNT] = {
    NA_LT(NA_LT_ATTN_NORM, "attn_norm",   "weight", NA_TS_DIM,        attn_norm),
    NA_LT(NA_LT_WQ,        "attn_q",      "weight", NA_TS_Q_DIM,      wq),
    NA_LT(NA_LT_WK,        "attn_k",      "weight", NA_TS_KV_DIM,     wk),
    NA_LT(NA_LT_WV,        "attn_v",      "weight", NA_TS_KV_DIM,     wv),
    NA_LT(NA_LT_WO,        "attn_output", "weight", NA_TS_DIM_Q,      wo),
    NA_LT(NA_LT_BQ,        "attn_q",      "bias",   NA_TS_Q,          bq),
    NA_LT(NA_LT_BK,        "attn_k",      "bias",   NA_TS_KV,         bk),
    NA_LT(NA_LT_BV,        "attn_v",      "bias",   NA_TS_KV,         bv),
    NA_LT(NA_LT_BO,        "attn_output", "bias",   NA_TS_DIM,        bo),
    NA_LT(NA_LT_Q_NORM,    "attn_q_norm", "weight", NA_TS_HEAD,       q_norm),
    NA_LT(NA_LT_K_NORM,    "attn_k_norm", "weight", NA_TS_HEAD,       k_norm),
    NA_LT(NA_LT_FFN_NORM,  "ffn_norm",    "weight", NA_TS_DIM,        ffn_norm),
    NA_LT(NA_LT_GATE,      "ffn_gate",    "weight", NA_TS_HIDDEN_DIM, w1),
    NA_LT(NA_LT_DOWN,      "ffn_down",    "weight", NA_TS_DIM_HIDDEN, w2),
    NA_LT(NA_LT_UP,        "ffn_up",      "weight", NA_TS_HIDDEN_DIM, w3),
};

/* The tensors every family here has: the LLaMA block. */
#define NA_ARCH_BLOCK                                                              \
    [NA_LT_ATTN_NORM] = NA_TP_REQUIRED, [NA_LT_WQ] = NA_TP_REQUIRED,               \
    [NA_LT_WK] = NA_TP_REQUIRED, [NA_LT_WV] = NA_TP_REQUIRED,                      \
    [NA_LT_WO] = NA_TP_REQUIRED, [NA_LT_FFN_NORM] = NA_TP_REQUIRED,                \
    [NA_LT_GATE] = NA_TP_REQUIRED, [NA_LT_DOWN] = NA_TP_REQUIRED,                  \
    [NA_LT_UP] = NA_TP_REQUIRED

static const na_model_arch_t na_archs[] = {
    /* Llama 2/3/3.x, Mistral, TinyLlama: biases optional as llama.cpp's
     * build_llama takes them; rope_freqs from the llama3 rope scaling. */
    { "llama", NA_ROPE_NORM,
      { NA_ARCH_BLOCK, [NA_LT_BQ] = NA_TP_OPTIONAL, [NA_LT_BK] = NA_TP_OPTIONAL,
        [NA_LT_BV] = NA_TP_OPTIONAL, [NA_LT_BO] = NA_TP_OPTIONAL },
      NA_TP_OPTIONAL, NA_TP_OPTIONAL },
    /* Qwen2 / Qwen2.5 / DeepSeek-R1-Distill-Qwen: q/k/v biases, NEOX. */
    { "qwen2", NA_ROPE_NEOX,
      { NA_ARCH_BLOCK, [NA_LT_BQ] = NA_TP_REQUIRED, [NA_LT_BK] = NA_TP_REQUIRED,
        [NA_LT_BV] = NA_TP_REQUIRED },
      NA_TP_NONE, NA_TP_OPTIONAL },
    /* Qwen3: per-head q/k RMS norms before RoPE, NEOX, no biases. */
    { "qwen3", NA_ROPE_NEOX,
      { NA_ARCH_BLOCK, [NA_LT_Q_NORM] = NA_TP_REQUIRED, [NA_LT_K_NORM] = NA_TP_REQUIRED },
      NA_TP_NONE, NA_TP_OPTIONAL },
};

const na_model_arch_t *na_model_arch_find(const char *name, size_t len)
{
    size_t i;
    for (i = 0; i < sizeof(na_archs) / sizeof(na_archs[0]); i++)
        if (strlen(na_archs[i].name) == len && memcmp(na_archs[i].name, name, len) == 0)
            return &na_archs[i];
    return NULL;
}

const char *na_model_arch_list(char *buf, size_t size)
{
    size_t i, at = 0;
    if (size == 0)
        return buf;
    buf[0] = 0;
    for (i = 0; i < sizeof(na_archs) / sizeof(na_archs[0]) && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "", na_archs[i].name);
    return buf;
}

void na_model_tshape(const na_model_config_t *c, na_tshape_t s, int *rows, int *cols)
{
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    *rows = 1;
    switch (s) {
    case NA_TS_DIM:        *cols = c->dim; break;
    case NA_TS_Q:          *cols = q; break;
    case NA_TS_KV:         *cols = kv; break;
    case NA_TS_HEAD:       *cols = c->head_dim; break;
    case NA_TS_Q_DIM:      *rows = q; *cols = c->dim; break;
    case NA_TS_KV_DIM:     *rows = kv; *cols = c->dim; break;
    case NA_TS_DIM_Q:      *rows = c->dim; *cols = q; break;
    case NA_TS_HIDDEN_DIM: *rows = c->hidden_dim; *cols = c->dim; break;
    case NA_TS_DIM_HIDDEN: *rows = c->dim; *cols = c->hidden_dim; break;
    }
}

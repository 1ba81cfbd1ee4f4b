/* common/model_internal.h — shared between common/model.c and the per-format
 * loaders (common/llama2c.c, common/model_gguf.c). Not a public API. */
#ifndef NA_MODEL_INTERNAL_H
#define NA_MODEL_INTERNAL_H

#include "model.h"

/* Check every config field of m->cfg against common/model.h's bounds and the
 * divisibility rules; sets head_dim (= dim / n_heads unless the loader set
 * it, e.g. from key_length) and the RoPE defaults (rope_dims = head_dim,
 * scale and attention factor 1, yarn betas 32 / 1, original context
 * seq_len) where the loader left them zero. fmt_field(x) names fields in messages the
 * way the format spells them (e.g. "dim" or "llama.embedding_length").
 * NA_ERR_RANGE / NA_ERR_FORMAT with a message naming m->path and the field. */
typedef struct {
    const char *dim, *hidden_dim, *n_layers, *n_heads, *n_kv_heads, *vocab_size, *seq_len;
    const char *head_dim;   /* the field that set c->head_dim when it is > 0 on entry */
    const char *rope_dims;  /* the field that set c->rope_dims when it is > 0 on entry */
} na_model_field_names_t;

na_status_t na_model_check_config(const na_model_t *m, const na_model_field_names_t *names,
                                  na_model_config_t *cfg);

/* Fill m (cfg, tensors, layers) from a llama2.c checkpoint mapped at m->map. */
na_status_t na_llama2c_load(na_model_t *m);

/* Fill m from a GGUF v3 file mapped at m->map; m->gguf is set (owned by m). */
na_status_t na_model_gguf_load(na_model_t *m);

/* Only m->cfg, with every check the loaders make on it: llama2.c from the
 * header bytes at m->map and the file size in m->map_size (tensor extents
 * included); GGUF from the metadata and tensor infos of m->gguf (set by the
 * caller, e.g. na_gguf_open_head). No tensor is touched. */
na_status_t na_llama2c_config(na_model_t *m);
na_status_t na_model_gguf_config(na_model_t *m);

#endif /* NA_MODEL_INTERNAL_H */

/* common/model_arch.h — the model architectures nearattn runs, as data: one
 * table entry per family (GGUF general.architecture), read by the one GGUF
 * loader (common/model_gguf.c) and by gen-model. Adding a family whose layer
 * is the LLaMA block with some of the optional tensors below is one entry in
 * common/model_arch.c. Modelled on llama.cpp's LLM_ARCH / LLM_TENSOR_NAMES. */
#ifndef NA_MODEL_ARCH_H
#define NA_MODEL_ARCH_H

#include <stddef.h>

#include "model.h"

/* The tensors of one layer, named blk.N.<name>.<suffix> in a GGUF file. */
typedef enum {
    NA_LT_ATTN_NORM, NA_LT_WQ, NA_LT_WK, NA_LT_WV, NA_LT_WO,
    NA_LT_BQ, NA_LT_BK, NA_LT_BV, NA_LT_BO, NA_LT_Q_NORM, NA_LT_K_NORM,
    NA_LT_FFN_NORM, NA_LT_GATE, NA_LT_DOWN, NA_LT_UP,
    NA_LT_COUNT
} na_layer_tensor_t;

/* Whether an architecture has a tensor. */
typedef enum {
    NA_TP_NONE     = 0,     /* never: a file holding it is still accepted, it is unused */
    NA_TP_OPTIONAL = 1,     /* used when present */
    NA_TP_REQUIRED = 2,     /* missing: the file is refused */
} na_tpresence_t;

/* The shape of a tensor, in terms of the config. */
typedef enum {
    NA_TS_DIM,              /* (dim) vector */
    NA_TS_Q,                /* (n_heads*head_dim) vector */
    NA_TS_KV,               /* (n_kv_heads*head_dim) vector */
    NA_TS_HEAD,             /* (head_dim) vector */
    NA_TS_Q_DIM,            /* (n_heads*head_dim, dim) */
    NA_TS_KV_DIM,           /* (n_kv_heads*head_dim, dim) */
    NA_TS_DIM_Q,            /* (dim, n_heads*head_dim) */
    NA_TS_HIDDEN_DIM,       /* (hidden_dim, dim) */
    NA_TS_DIM_HIDDEN,       /* (dim, hidden_dim) */
} na_tshape_t;

/* One layer tensor: its GGUF name parts, shape, and field of na_layer_weights_t. */
typedef struct {
    const char *name;       /* "attn_q" */
    const char *suffix;     /* "weight" or "bias" */
    na_tshape_t shape;
    size_t      offset;     /* offsetof(na_layer_weights_t, field) */
    const char *field;      /* the field's name, for messages ("wq") */
} na_layer_tensor_info_t;

typedef struct {
    const char     *name;                   /* general.architecture */
    na_rope_style_t rope_style;
    unsigned char   layer[NA_LT_COUNT];     /* na_tpresence_t of each layer tensor */
    unsigned char   rope_freqs;             /* rope_freqs.weight */
    unsigned char   output;                 /* output.weight (absent: tied to token_embd) */
} na_model_arch_t;

extern const na_layer_tensor_info_t na_layer_tensors[NA_LT_COUNT];

/* The table of architecture `name` (len bytes, not NUL-terminated), or NULL. */
const na_model_arch_t *na_model_arch_find(const char *name, size_t len);

/* The supported names, "llama, qwen2, qwen3", written into buf (for
 * messages; truncated to size); returns buf. */
const char *na_model_arch_list(char *buf, size_t size);

/* Rows and cols of a shape for config c (vectors: rows = 1). */
void na_model_tshape(const na_model_config_t *c, na_tshape_t s, int *rows, int *cols);

#endif /* NA_MODEL_ARCH_H */

/* common/model.h — a LLaMA-family model in memory: hyper-parameters and
 * weights, loaded from a llama2.c checkpoint or a GGUF v3 file.
 *
 * Shapes follow the usage y = W·x: a weight of shape (rows, cols) is stored
 * row-major, rows = output features, cols = input features (GGUF ne0 = cols).
 * Weights are pointers into a read-only mmap of the file whenever the file's
 * dtype can be used directly; nothing is copied in that case.
 * Matrices keep the file's dtype (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q4_K, Q5_K, Q6_K: common/dtype.h) and are dequantized
 * per row / tile inside the matmul kernels, never at load; only norm weights a
 * GGUF file stores as F16/BF16 are converted to F32 at load (into `owned`).
 * Loaders: common/llama2c.c, common/model_gguf.c; tokenizer: common/tokenizer.h.
 *
 * Architectures (GGUF general.architecture; common/model_arch.c holds one
 * table per family): llama (llama2.c files too), qwen2, qwen3. What differs
 * between them is data here: optional tensors (q/k/v/o biases, per-head q/k
 * RMS norms, rope_freqs) and the RoPE style and scaling of the config.
 *
 * RoPE: pair i of each head (i < rope_dims/2) turns by pos * freq_i with
 * freq_i = theta^(-2i/rope_dims) / rope_freqs[i] (when present), then
 * scaled (linear / yarn); NORM pairs (x[2i], x[2i+1]) as llama2.c's run.c and
 * llama.cpp's LLaMA (GGUF stores Q/K already permuted for this), NEOX pairs
 * (x[i], x[i + rope_dims/2]) as Qwen. Elements past rope_dims stay as they
 * are. kernels/rope.h computes the table. */
#ifndef NA_MODEL_H
#define NA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"
#include "status.h"

/* Sane bounds every loader checks header fields against. */
#define NA_MODEL_MAX_DIM      65536
#define NA_MODEL_MAX_HIDDEN   262144
#define NA_MODEL_MAX_LAYERS   1024
#define NA_MODEL_MAX_HEADS    1024
#define NA_MODEL_MAX_VOCAB    1048576
#define NA_MODEL_MAX_SEQ      1048576
#define NA_MODEL_MAX_HEAD_DIM 1024

typedef enum {
    NA_MODEL_FORMAT_LLAMA2C = 0,
    NA_MODEL_FORMAT_GGUF    = 1,
} na_model_format_t;

/* RoPE pairing (see above). */
typedef enum {
    NA_ROPE_NORM = 0,       /* adjacent pairs (x[2i], x[2i+1]) */
    NA_ROPE_NEOX = 1,       /* halves (x[i], x[i + rope_dims/2]) */
} na_rope_style_t;

/* RoPE scaling ({arch}.rope.scaling.type). */
typedef enum {
    NA_ROPE_SCALING_NONE   = 0,
    NA_ROPE_SCALING_LINEAR = 1,     /* every frequency times rope_freq_scale */
    NA_ROPE_SCALING_YARN   = 2,     /* llama.cpp's rope_yarn: ramp between the two */
} na_rope_scaling_t;

#define NA_MODEL_ARCH_MAX 16        /* bytes of na_model_config_t.arch, with the NUL */

typedef struct {
    int   dim;              /* model width */
    int   hidden_dim;       /* FFN inner width */
    int   n_layers;
    int   n_heads;          /* query heads */
    int   n_kv_heads;       /* KV heads (GQA when < n_heads) */
    int   vocab_size;
    int   seq_len;          /* maximum context length */
    int   head_dim;         /* {arch}.attention.key_length, else dim / n_heads */
    float rope_theta;       /* 10000 for llama2.c files */
    float rms_eps;          /* 1e-5 for llama2.c files */
    int   shared_classifier;/* 1: output projection is tok_embd */
    char  arch[NA_MODEL_ARCH_MAX]; /* "llama", "qwen2", "qwen3" */
    /* RoPE; all zero means NORM, full head_dim, no scaling (the loaders set
     * rope_dims = head_dim, rope_freq_scale = yarn_attn_factor = 1). */
    int   rope_dims;        /* rotated elements per head: even, <= head_dim */
    na_rope_style_t   rope_style;
    na_rope_scaling_t rope_scaling;
    float rope_freq_scale;  /* 1 / {arch}.rope.scaling.factor (linear, yarn); 1: none */
    float yarn_ext_factor;  /* yarn: extrapolation mix (default 1; 0 = linear) */
    float yarn_attn_factor; /* magnitude of cos/sin ({arch}.rope.scaling.attn_factor, 1) */
    float yarn_beta_fast;   /* yarn ramp ends (32, 1) */
    float yarn_beta_slow;
    int   yarn_orig_ctx;    /* {arch}.rope.scaling.original_context_length (seq_len) */
} na_model_config_t;

/* A 1-D or 2-D weight. A 1-D tensor has rows = 1. An optional tensor the
 * file lacks is all zero (data == NULL): na_tensor_present. */
typedef struct {
    na_dtype_t  dtype;
    int         rows;       /* output features */
    int         cols;       /* input features (contiguous) */
    const void *data;       /* rows*cols elements, row-major; block types: rows * cols/block blocks */
    int         layout;     /* NA_LAYOUT_ROWS (every model's and file's tensor), or a
                             * backend's placed copy in another order (kernels.h) */
} na_tensor_t;

/* na_tensor_t.layout: data as the comment above says (0, what a zeroed or
 * partly initialised tensor has); NA_LAYOUT_Q4X8: the same bytes of a Q4_0
 * weight of rows % 8 == 0 with every 8 rows interleaved block by block, the
 * cpu backend's placed copy (kernels/cpu/cpu_pack.c); NA_LAYOUT_BF16X32: a
 * BF16 weight's copy there in panels of 32 rows by k pairs; NA_LAYOUT_Q4KX8:
 * a Q4_K weight's in groups of 8 rows; NA_LAYOUT_Q8X8: a Q8_0 weight's;
 * NA_LAYOUT_Q6KX8: a Q6_K weight's; NA_LAYOUT_Q5KX8: a Q5_K weight's */
#define NA_LAYOUT_ROWS    0
#define NA_LAYOUT_Q4X8    1
#define NA_LAYOUT_BF16X32 2
#define NA_LAYOUT_Q4KX8   3
#define NA_LAYOUT_Q8X8    4
#define NA_LAYOUT_Q6KX8   5
#define NA_LAYOUT_Q5KX8   6

static inline int na_tensor_present(const na_tensor_t *t)
{
    return t->data != NULL;
}

typedef struct {
    na_tensor_t attn_norm;  /* (dim) f32 */
    na_tensor_t wq;         /* (n_heads*head_dim, dim) */
    na_tensor_t wk;         /* (n_kv_heads*head_dim, dim) */
    na_tensor_t wv;         /* (n_kv_heads*head_dim, dim) */
    na_tensor_t wo;         /* (dim, n_heads*head_dim) */
    na_tensor_t ffn_norm;   /* (dim) f32 */
    na_tensor_t w1;         /* gate: (hidden_dim, dim) */
    na_tensor_t w2;         /* down: (dim, hidden_dim) */
    na_tensor_t w3;         /* up:   (hidden_dim, dim) */
    /* optional (the architecture's table says which): f32 vectors */
    na_tensor_t bq, bk, bv; /* projection biases (qwen2): (q), (kv), (kv) */
    na_tensor_t bo;         /* output projection bias (dim) */
    na_tensor_t q_norm;     /* per-head RMS norm of q before RoPE (qwen3): (head_dim) */
    na_tensor_t k_norm;     /* per-head RMS norm of k before RoPE (qwen3): (head_dim) */
} na_layer_weights_t;

typedef struct na_model {
    na_model_config_t   cfg;
    na_model_format_t   format;
    na_tensor_t         tok_embd;   /* (vocab_size, dim) */
    na_layer_weights_t *layers;     /* [n_layers] */
    na_tensor_t         out_norm;   /* (dim) f32 */
    na_tensor_t         output;     /* (vocab_size, dim); == tok_embd when shared */
    na_tensor_t         rope_freqs; /* optional (rope_dims/2) f32: per-pair frequency divisors */
    char               *path;       /* the file it came from (owned) */
    void               *map;        /* read-only mmap of the whole file */
    size_t              map_size;
    void               *owned;      /* weights converted at load, if any (owned) */
    struct na_gguf     *gguf;       /* GGUF metadata (tokenizer), NULL for llama2.c */
} na_model_t;

/* Open a model file; the format is detected from its first bytes ("GGUF" magic,
 * else a llama2.c header). Every header field, dimension and tensor extent is
 * checked against sane bounds and the file size. On failure returns an error
 * whose message (na_errmsg) names the file and the offending field. */
na_status_t na_model_open(const char *path, na_model_t **model_p);
void        na_model_destroy(na_model_t *model);

/* Only the hyper-parameters of a model file, the same as na_model_open's
 * model->cfg and with the same checks and messages (llama2.c: the header
 * and the file size; GGUF: metadata and tensor infos), without mapping or
 * reading the weights (common/gguf.h: na_gguf_open_head). For the storage
 * node, which needs the shape of the KV cache, not the model. */
na_status_t na_model_read_config(const char *path, na_model_config_t *cfg);

/* Read every weight: NA_ERR_FORMAT naming the tensor, layer and element of
 * the first NaN or infinity (block types: a block's f16 scale or min), else NA_OK. Reads the
 * whole file (`nearattn run --check-weights`). */
na_status_t na_model_check_finite(const na_model_t *model);

/* Number of parameters (for reporting). */
size_t na_model_param_count(const na_model_t *model);

#endif /* NA_MODEL_H */

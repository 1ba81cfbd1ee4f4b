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
 * RoPE convention: rotate adjacent pairs (x[2i], x[2i+1]) of each head with
 * frequency theta^(-2i/head_dim), as llama2.c's run.c and llama.cpp's LLaMA
 * (GGUF stores Q/K already permuted for this). */
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

typedef struct {
    int   dim;              /* model width */
    int   hidden_dim;       /* FFN inner width */
    int   n_layers;
    int   n_heads;          /* query heads */
    int   n_kv_heads;       /* KV heads (GQA when < n_heads) */
    int   vocab_size;
    int   seq_len;          /* maximum context length */
    int   head_dim;         /* dim / n_heads */
    float rope_theta;       /* 10000 for llama2.c files */
    float rms_eps;          /* 1e-5 for llama2.c files */
    int   shared_classifier;/* 1: output projection is tok_embd */
} na_model_config_t;

/* A 1-D or 2-D weight. A 1-D tensor has rows = 1. */
typedef struct {
    na_dtype_t  dtype;
    int         rows;       /* output features */
    int         cols;       /* input features (contiguous) */
    const void *data;       /* rows*cols elements, row-major; block types: rows * cols/block blocks */
} na_tensor_t;

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
} na_layer_weights_t;

typedef struct na_model {
    na_model_config_t   cfg;
    na_model_format_t   format;
    na_tensor_t         tok_embd;   /* (vocab_size, dim) */
    na_layer_weights_t *layers;     /* [n_layers] */
    na_tensor_t         out_norm;   /* (dim) f32 */
    na_tensor_t         output;     /* (vocab_size, dim); == tok_embd when shared */
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

/* Read every weight: NA_ERR_FORMAT naming the tensor, layer and element of
 * the first NaN or infinity (block types: a block's f16 scale or min), else NA_OK. Reads the
 * whole file (`nearattn run --check-weights`). */
na_status_t na_model_check_finite(const na_model_t *model);

/* Number of parameters (for reporting). */
size_t na_model_param_count(const na_model_t *model);

#endif /* NA_MODEL_H */

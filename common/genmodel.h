/* common/genmodel.h — deterministic random-weight LLaMA models of any shape,
 * written as a llama2.c checkpoint (+ tokenizer.bin) and/or a GGUF v3 file
 * (with tokenizer.ggml.* metadata), holding the same weights.
 *
 * Files written for a prefix P:
 *   P.bin      llama2.c checkpoint, always f32
 *   P.tok.bin  llama2.c tokenizer.bin with the generated vocabulary
 *   P.gguf     GGUF v3 in the chosen dtype, tokenizer embedded
 *
 * Every weight is a function of (seed, tensor, element index) only, so the two
 * formats hold the same values (the GGUF one rounded to its dtype). Matrices
 * are normal(0, 1/sqrt(cols)), the embedding normal(0, 1/sqrt(dim)), norm
 * weights 1 + normal(0, 0.05): activations stay of order one at any size.
 * The vocabulary is <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
 * printable ASCII characters, BPE merges learnt from a small built-in English
 * text, then synthetic merges of existing pieces up to vocab_size. */
#ifndef NA_GENMODEL_H
#define NA_GENMODEL_H

#include <stdint.h>

#include "dtype.h"
#include "status.h"

/* The architecture gen-model writes (GGUF general.architecture and tensors):
 * llama (Llama-2 shape, both formats), llama3 (llama with rope_freqs from
 * Llama-3.x's rope scaling, theta 500000), qwen2 (q/k/v biases), qwen3
 * (per-head q/k norms, key_length). All but llama are GGUF only. */
typedef enum {
    NA_GENMODEL_LLAMA = 0, NA_GENMODEL_LLAMA3, NA_GENMODEL_QWEN2, NA_GENMODEL_QWEN3,
    NA_GENMODEL_ARCH_COUNT
} na_genmodel_arch_t;

#define NA_GENMODEL_MIN_VOCAB 259   /* 3 specials + 256 byte tokens */
#define NA_GENMODEL_MAX_BYTES (1024ull << 30)  /* cap on all files of one run: 1 TiB */

typedef struct na_genmodel_opts {
    int        dim;
    int        hidden_dim;
    int        n_layers;
    int        n_heads;
    int        n_kv_heads;
    int        vocab_size;          /* >= NA_GENMODEL_MIN_VOCAB */
    int        seq_len;
    na_dtype_t dtype;               /* GGUF weight dtype (norms stay f32) */
    int        quant_mix;           /* NA_GENMODEL_MIX_*: which matrices take another type */
    uint64_t   seed;
    float      rope_theta;
    float      rms_eps;
    int        shared_classifier;   /* 1: output = tok_embd (tied) */
    int        write_llama2c;       /* write P.bin + P.tok.bin */
    int        write_gguf;          /* write P.gguf */
    int        progress;            /* print progress lines to stderr */
    const char *chat_template;      /* GGUF tokenizer.chat_template (Jinja text), or NULL */
    na_genmodel_arch_t arch;        /* default NA_GENMODEL_LLAMA */
    int        head_dim;            /* 0: dim / n_heads; else written as key_length (GGUF) */
    int        rope_dims;           /* 0: head_dim; else rope.dimension_count (partial, GGUF) */
    const char *rope_scaling;       /* NULL, "linear" or "yarn": rope.scaling.* keys (GGUF) */
    float      rope_scaling_factor; /* with rope_scaling (> 0) */
    const char *vocab_from;         /* NULL, or a GGUF whose tokenizer.* keys the GGUF
                                     * file copies (na_genmodel_vocab_from) */
} na_genmodel_opts_t;

/* Take the vocabulary of the GGUF file `path` (a model or a vocabulary-only
 * file such as llama.cpp's models/ggml-vocab-*.gguf): its header is read
 * and checked here (tokenizer.ggml.model a string, tokenizer.ggml.tokens a
 * string array of NA_GENMODEL_MIN_VOCAB..NA_MODEL_MAX_VOCAB entries), and
 * o gets vocab_size = the token count, vocab_from = path and the GGUF
 * format only. The GGUF file then holds every tokenizer.* key of `path` as
 * it is there (tokens, types, scores, merges, pre-tokenizer, special ids,
 * add_bos/add_eos, chat template; o->chat_template replaces the last) in
 * place of the generated SentencePiece vocabulary. Errors name the file and
 * the key. */
na_status_t na_genmodel_vocab_from(const char *path, na_genmodel_opts_t *o);
/* "llama", "llama3", "qwen2", "qwen3" -> the arch (< 0 if unknown). */
int         na_genmodel_arch_parse(const char *name);
const char *na_genmodel_arch_name(na_genmodel_arch_t arch);
/* Set o->arch and its RoPE base (llama3 500000, qwen 1000000); an arch
 * other than llama writes the GGUF file only. */
void        na_genmodel_set_arch(na_genmodel_opts_t *o, na_genmodel_arch_t arch);

/* quant_mix values. NONE: every matrix in dtype (a K-quant falls back as
 * llama-quantize does where the columns are not whole super-blocks of 256:
 * Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 where not whole blocks
 * of 32). Q4_K_M: llama-quantize's Q4_K_M rule for the llama architecture
 * (src/llama-quant.cpp, llama_tensor_get_type): dtype Q4_K, but Q6_K for
 * the output classifier (the token embedding when tied) and for attn_v and
 * ffn_down of the layers i where use_more_bits(i, n_layers) (i < n/8, or
 * i >= 7n/8, or (i - n/8) % 3 == 2). */
#define NA_GENMODEL_MIX_NONE   0
#define NA_GENMODEL_MIX_Q4_K_M 1

/* Parse a --dtype value: a dtype name (na_dtype_parse) or "q4_k_m" (dtype
 * Q4_K, mix Q4_K_M); -1 on failure. */
int na_genmodel_parse_dtype(const char *s, na_dtype_t *dtype, int *mix);

/* Fill o with the defaults: a small model (dim 64, hidden 172, 2 layers,
 * 8 heads, 4 kv heads, vocab 512, seq 256, f32, seed 1, theta 10000,
 * eps 1e-5, tied, both formats, no progress). */
void na_genmodel_defaults(na_genmodel_opts_t *o);

/* The defaults with this shape, f32 weights, the llama2.c files only (no
 * GGUF): the set-up tests and benchmarks share; adjust fields after it. */
void na_genmodel_shape(na_genmodel_opts_t *o, int dim, int hidden_dim, int n_layers, int n_heads,
                       int n_kv_heads, int vocab_size, int seq_len);

/* Check the shape against common/model.h's bounds and the format rules
 * (dim % n_heads, n_heads % n_kv_heads, even head_dim, Q8_0, Q4_0, Q4_1, Q5_0
 * and Q5_1 need dim and hidden_dim multiples of 32; the K-quants fall back). NA_ERR_INVALID with a message naming the field. */
na_status_t na_genmodel_check(const na_genmodel_opts_t *o);

/* Upper bound of the bytes na_genmodel_write writes for o (all selected
 * files; the vocabulary counted at its longest pieces). Cannot fail. */
uint64_t na_genmodel_total_bytes(const na_genmodel_opts_t *o);

/* Refuse before writing anything: NA_ERR_RANGE when the files would exceed
 * NA_GENMODEL_MAX_BYTES, NA_ERR_NOSPACE when they exceed the free space of
 * the file system holding prefix's directory (statvfs). NA_OK otherwise
 * (also when that directory cannot be examined: the write then names it). */
na_status_t na_genmodel_check_space(const char *prefix, const na_genmodel_opts_t *o);

/* Write the files for `prefix` (see above), after na_genmodel_check and
 * na_genmodel_check_space. Fails with NA_ERR_INVALID (shape), NA_ERR_RANGE /
 * NA_ERR_NOSPACE (too large), NA_ERR_IO (message names the file),
 * NA_ERR_NOMEM; a partial file is removed. */
na_status_t na_genmodel_write(const char *prefix, const na_genmodel_opts_t *o);

#endif /* NA_GENMODEL_H */

/* kernels/rope.h — a model's RoPE as one small object: the per-pair angle
 * frequencies computed once on the host (theta, rope_freqs divisors, linear
 * and yarn scaling, partial rotation), and the same table placed on the
 * backend, so every backend turns by the same angles (the CUDA backend reads
 * the uploaded table instead of calling powf on the device).
 *
 * Pair i (i < n_dims/2) of each head turns by angle pos * freq[i]; its
 * cos/sin are multiplied by mscale (1 unless yarn). NORM pairs elements
 * (2i, 2i+1), NEOX (i, i + n_dims/2); elements n_dims..head_dim-1 stay. */
#ifndef NA_ROPE_H
#define NA_ROPE_H

#include "kernels/kernels.h"

/* What the table is made of (na_rope_desc_model fills it from a model). */
typedef struct {
    na_rope_style_t   style;
    int               head_dim;
    int               n_dims;           /* rotated elements: even, <= head_dim */
    float             theta;            /* frequency base */
    na_rope_scaling_t scaling;
    float             freq_scale;       /* 1 / factor (linear, yarn) */
    float             ext_factor;       /* yarn */
    float             attn_factor;      /* magnitude of cos/sin */
    float             beta_fast, beta_slow;
    int               orig_ctx;         /* yarn: training context */
    const float      *freq_factors;     /* [n_dims/2] divisors (rope_freqs), or NULL */
} na_rope_desc_t;

struct na_rope {
    na_rope_style_t style;
    int             head_dim;
    int             n_dims;
    float           mscale;             /* cos/sin magnitude */
    float          *freq;               /* [n_dims/2] host table (owned) */
    na_kbuf_t      *buf;                /* the table on the backend (owned) */
    na_kernels_t   *k;                  /* the backend of buf */
};

/* LLaMA-2 RoPE: NORM, all of head_dim, base theta, no scaling. */
void na_rope_desc_plain(na_rope_desc_t *d, int head_dim, float theta);

/* The RoPE of a loaded model (its config and rope_freqs, which must be f32). */
void na_rope_desc_model(na_rope_desc_t *d, const na_model_t *m);

/* Fill freq[n_dims/2] and *mscale for d (host math only; ref tests use it).
 * With no scaling or factors, freq[i] = 1 / powf(theta, 2i / n_dims) in
 * float, exactly as llama2.c's run.c. NA_ERR_INVALID for a bad desc. */
na_status_t na_rope_table(const na_rope_desc_t *d, float *freq, float *mscale);

/* Compute the table and place it on backend k (buf_alloc in k->mem +
 * upload; waits for the upload). The object serves k's rope op until
 * na_rope_destroy. */
na_status_t na_rope_create(na_kernels_t *k, const na_rope_desc_t *d, na_rope_t **r_p);
void        na_rope_destroy(na_rope_t *r);

#endif /* NA_ROPE_H */

/* kernels/kernels.h — the math of nearattn behind one table per device kind.
 *
 * Callers never call a kernel directly: they get a backend (na_kernels_get)
 * and call through its ops table. `ref` holds plain scalar C references,
 * `cpu` the fast versions (AVX2/FMA/F16C, OpenBLAS); `cuda` and `csd` go
 * beside them later without touching callers.
 *
 * Asynchrony: every op is *enqueued* on the backend's queue. The CPU and ref
 * backends run it at once; a device backend puts it on a stream. Callers that
 * need the results on the host call ops->sync() before reading them.
 *
 * Conventions: activations are f32, row-major, `batch` rows. A weight W of
 * shape (rows, cols) maps x (cols) to y (rows): y = W·x. Head vectors are laid
 * out head-major: q[h*head_dim + i]. Float accumulation is f32 everywhere. */
#ifndef NA_KERNELS_H
#define NA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/model.h"
#include "common/status.h"

typedef struct na_kernels na_kernels_t;

/* Partial state of decode attention for one query head over a part of the
 * context (flash-decoding): running max m, running sum l, and the unnormalised
 * accumulator acc[head_dim]. Two partials merge exactly (na_attn_merge). */
typedef struct {
    float m;
    float l;
} na_attn_stat_t;

/* One KV span: n consecutive tokens of one KV head, K and V rows of head_dim
 * elements of kv_dtype (f16 or f32) with a row stride of `stride` elements. */
typedef struct {
    const void *k;
    const void *v;
    size_t      stride;
    int         n;
} na_kv_span_t;

typedef struct {
    const char *name;                 /* "ref", "cpu", ... */

    /* y[b, W.rows] = W · x[b, W.cols] for b < batch. W any na_dtype_t. */
    void (*matmul)(na_kernels_t *k, float *y, const float *x,
                   const na_tensor_t *w, int batch);

    /* out[b] = x[b] / rms(x[b]) * weight, over n elements, b < batch. */
    void (*rmsnorm)(na_kernels_t *k, float *out, const float *x,
                    const float *weight, int n, float eps, int batch);

    /* Rotate adjacent pairs of each head of vec (n_heads*head_dim) for
     * position pos[b] of row b (row stride n_heads*head_dim). */
    void (*rope)(na_kernels_t *k, float *vec, int n_heads, int head_dim,
                 const int *pos, float theta, int batch);

    /* gate[i] = silu(gate[i]) * up[i], n*batch elements in place. */
    void (*swiglu)(na_kernels_t *k, float *gate, const float *up, size_t n);

    /* In-place softmax over n elements of each of batch rows. */
    void (*softmax)(na_kernels_t *k, float *x, int n, int batch);

    /* Causal attention of a prompt: q (n_tok, n_heads*head_dim) for positions
     * pos0..pos0+n_tok-1; K/V hold positions 0..pos0+n_tok-1 of n_kv_heads
     * heads, layout [token][kv_head][head_dim] in kv_dtype (f16/f32);
     * out (n_tok, n_heads*head_dim). */
    void (*attn_prefill)(na_kernels_t *k, float *out, const float *q,
                         const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                         int n_tok, int pos0, int n_heads, int n_kv_heads,
                         int head_dim);

    /* Decode attention of one request, GQA: q (n_heads*head_dim) against
     * ctx tokens of K/V laid out [token][kv_head][head_dim] in kv_dtype.
     * Long contexts are split across the backend's threads. out as q. */
    void (*attn_decode)(na_kernels_t *k, float *out, const float *q,
                        const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                        int ctx, int n_heads, int n_kv_heads, int head_dim);

    /* Partial decode attention of `group` query heads (q: group*head_dim)
     * sharing one KV head, over one span; folds into st[group] and
     * acc[group*head_dim] (initialise with na_attn_init). Each K/V row is
     * read once for all heads of the group. scale is 1/sqrt(head_dim). */
    void (*attn_partial)(na_kernels_t *k, na_attn_stat_t *st, float *acc,
                         const float *q, int group, int head_dim,
                         const na_kv_span_t *span, na_dtype_t kv_dtype, float scale);

    /* Wait until every op enqueued so far has completed. */
    na_status_t (*sync)(na_kernels_t *k);

    /* Release the backend (threads, scratch, the struct itself); called by
     * na_kernels_destroy only. */
    void (*destroy)(na_kernels_t *k);
} na_kernel_ops_t;

struct na_kernels {
    const na_kernel_ops_t *ops;
    int                    n_threads;  /* threads the backend may use */
    void                  *priv;       /* backend state (thread pool, stream) */
};

/* Create a backend by name ("ref", "cpu"); n_threads <= 0 means all cores.
 * NA_ERR_UNSUPPORTED for a backend not built or without a device here.
 * A backend instance serves one calling thread at a time (matmul and
 * attn_decode use its scratch and thread pool); attn_partial and the ref
 * backend are stateless and may be called from several threads at once. */
na_status_t na_kernels_create(const char *name, int n_threads, na_kernels_t **k_p);
void        na_kernels_destroy(na_kernels_t *k);

/* Helpers on attention partials (plain C, shared by all backends). */
void na_attn_init(na_attn_stat_t *st, float *acc, int group, int head_dim);
/* Fold partial (st_b, acc_b) into (st_a, acc_a). */
void na_attn_merge(na_attn_stat_t *st_a, float *acc_a,
                   const na_attn_stat_t *st_b, const float *acc_b,
                   int group, int head_dim);
/* out[g*head_dim+i] = acc / l. */
void na_attn_finalize(float *out, const na_attn_stat_t *st, const float *acc,
                      int group, int head_dim);

#endif /* NA_KERNELS_H */

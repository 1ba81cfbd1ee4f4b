/* compute-node/engine.h — the model runner, cut at every attention operator.
 *
 * Three objects with three jobs, as in llama2.c's run.c:
 *   na_engine_t  the model (borrowed), the compute backend and the run options;
 *   na_acts_t    the activations of one batch in flight ("RunState" without the
 *                KV): several batches in flight each own one;
 *   na_step_t    what one forward step computes: a list of segments, each a run
 *                of consecutive tokens of one request (a whole prompt, a prompt
 *                chunk, or the single token of a decode step), all stacked as
 *                the rows of every matmul.
 *
 * The forward pass is n_layers + 1 model slices separated by attention:
 *
 *   na_slice_embed            x = tok_embd[token]
 *   for each layer l:
 *     na_slice_pre_attn       xb = rmsnorm(x); q,k,v = xb·Wq,Wk,Wv (+ biases);
 *                             per-head rmsnorm(q, k) (qwen3); RoPE(q, k)
 *     -- attention --         att = softmax(q·Kᵀ/√d)·V   (monolithic: local KV,
 *                                                         offload: a storage node)
 *     na_slice_post_attn      x += att·Wo (+ bo); x += W2·(silu(W1·rmsnorm(x)) * W3·rmsnorm(x))
 *   na_slice_final            logits = Wout·rmsnorm(x) of each segment's last row
 *
 * na_engine_forward runs them back to back with local attention; an offload
 * engine calls the slices itself and puts its remote attention in between. */
#ifndef NA_ENGINE_H
#define NA_ENGINE_H

#include <stddef.h>

#include "common/dtype.h"
#include "common/model.h"
#include "common/status.h"
#include "compute-node/kv_local.h"
#include "kernels/kernels.h"
#include "kernels/rope.h"

#define NA_ENGINE_DEFAULT_MAX_ROWS 512

typedef struct {
    const char *backend;    /* kernels backend: "cpu" (default when NULL) or "ref" */
    int         n_threads;  /* backend threads; <= 0 means all cores */
    na_dtype_t  kv_dtype;   /* local KV cache: NA_DTYPE_F32, F16 or BF16 */
    int         max_rows;   /* most token rows per forward step (prefill chunk);
                               <= 0 means NA_ENGINE_DEFAULT_MAX_ROWS */
} na_engine_opts_t;

/* The model's weights as placed on the backend once (ops->place): the host
 * backends wrap the mmap, a device backend holds its own copy. */
typedef struct {
    na_kweight_t attn_norm, wq, wk, wv, wo, ffn_norm, w1, w2, w3;
    /* the architecture's optional tensors; placed only when the model has
     * them (the model's na_tensor_present says which) */
    na_kweight_t bq, bk, bv, bo, q_norm, k_norm;
} na_engine_layer_w_t;

typedef struct {
    na_kweight_t         tok_embd;  /* (vocab_size, dim) */
    na_kweight_t         out_norm;  /* (dim) f32 */
    na_kweight_t         output;    /* (vocab_size, dim) */
    na_engine_layer_w_t *layers;    /* [n_layers] */
} na_engine_w_t;

typedef struct na_engine {
    const na_model_t  *model;   /* borrowed: outlives the engine */
    na_model_config_t  cfg;     /* copy of model->cfg */
    na_engine_opts_t   opts;    /* backend string not kept (NULL after create) */
    na_kernels_t      *kern;    /* owned */
    na_engine_w_t      w;       /* placed weights (owned placements) */
    na_rope_t         *rope;    /* the model's RoPE table on kern (owned) */
    int                q_dim;   /* n_heads * head_dim */
    int                kv_dim;  /* n_kv_heads * head_dim */
    /* when set, called after every op of a slice (compute-node/slices.c):
     * a long slice (a prompt chunk of thousands of rows) lets its caller
     * keep its sessions alive there (compute-node/sched.c answers the
     * storage nodes' heartbeats); it must not touch the slice's buffers */
    void             (*tick)(void *ctx);
    void              *tick_ctx;
    /* test double (NA_FAULTS "compute:op_ms=N", set by compute-node/sched.c;
     * docs/fault-injection.md): every op of a slice takes N ms longer */
    int                fault_op_ms;
} na_engine_t;

/* One request's share of a step: n_tok consecutive tokens at positions
 * pos0..pos0+n_tok-1, stored in rows row0..row0+n_tok-1 of the step. */
typedef struct {
    int            row0;
    int            n_tok;
    int            pos0;
    na_lkv_t *kv;      /* its local KV cache (monolithic, prefill); NULL
                               when attention happens elsewhere */
} na_step_seg_t;

typedef struct {
    int                  n_rows;  /* sum of seg[i].n_tok */
    int                  n_seg;
    const int           *tokens;  /* [n_rows] input token of each row */
    const int           *pos;     /* [n_rows] position of each row */
    const na_step_seg_t *seg;     /* [n_seg], rows in order, no gaps */
} na_step_t;

/* Activations of one batch in flight; buffers grow to the largest step seen
 * (na_acts_reserve). Rows are the step's rows, "seg" rows one per segment.
 * buf[i] are backend buffers (the ops use them); the float * fields are
 * their host views: the buffer's own memory for host memory, a pinned
 * mirror for device memory. Host code reads a view only after
 * na_acts_to_host and, after writing one, calls na_acts_from_host. */
enum {
    NA_ACT_X, NA_ACT_XB, NA_ACT_Q, NA_ACT_K, NA_ACT_V, NA_ACT_ATT, NA_ACT_HB, NA_ACT_HB2,
    NA_ACT_XL, NA_ACT_LOGITS, NA_ACT_COUNT
};
#define NA_ACT(i) (1u << (i))   /* mask bit of activation i */

typedef struct na_acts {
    int    cap_rows;
    int    cap_seg;
    int    n_rows;  /* rows and segments of the current step (na_acts_reserve) */
    int    n_seg;
    float *x;       /* (cap_rows, dim) residual stream */
    float *xb;      /* (cap_rows, dim) normed input / matmul output */
    float *q;       /* (cap_rows, q_dim) queries after RoPE */
    float *k;       /* (cap_rows, kv_dim) new keys after RoPE */
    float *v;       /* (cap_rows, kv_dim) new values */
    float *att;     /* (cap_rows, q_dim) attention output */
    float *hb;      /* (cap_rows, hidden_dim) gate, then silu(gate)*up */
    float *hb2;     /* (cap_rows, hidden_dim) up */
    float *xl;      /* (cap_seg, dim) last row of each segment, normed */
    float *logits;  /* (cap_seg, vocab_size) */
    na_kbuf_t   *buf[NA_ACT_COUNT];     /* the buffers, by NA_ACT_* */
    na_kbuf_t   *mirror[NA_ACT_COUNT];  /* pinned host mirrors of device buffers */
    na_kevent_t *ev;                    /* recorded by na_acts_to_host */
    const struct na_engine *e;          /* the engine whose backend owns them */
} na_acts_t;

/* Create an engine over a loaded model. Fails with NA_ERR_INVALID (bad opts,
 * e.g. an unsupported kv dtype), NA_ERR_UNSUPPORTED (backend not available),
 * NA_ERR_NOMEM. The model must outlive the engine; *e_p is owned by the caller.
 * The engine's kernels are batch-invariant (kern->batch_invariant = 1): a
 * request's logits, so its greedy or seeded text, never depend on the
 * requests batched beside it, in any front end or mode. */
na_status_t na_engine_create(const na_model_t *model, const na_engine_opts_t *opts,
                             na_engine_t **e_p);
/* Free the engine and its backend; NULL is a no-op. */
void na_engine_destroy(na_engine_t *e);

/* Activations for steps of up to max_rows rows and max_seg segments (both
 * grow later through na_acts_reserve). NA_ERR_NOMEM. Owned by the caller. */
na_status_t na_acts_create(const na_engine_t *e, int max_rows, int max_seg,
                           na_acts_t **a_p);
void        na_acts_destroy(na_acts_t *a);
/* Grow the buffers to hold a step of n_rows rows and n_seg segments and make
 * them the current step's sizes; keeps nothing when it grows (contents are
 * undefined afterwards). NA_ERR_NOMEM. */
na_status_t na_acts_reserve(na_acts_t *a, const na_engine_t *e, int n_rows, int n_seg);

/* Width (floats per row) of activation i and whether its rows are segments. */
static inline size_t na_acts_width(const na_engine_t *e, int i, int *per_seg_p)
{
    const na_model_config_t *c = &e->cfg;
    *per_seg_p = i == NA_ACT_XL || i == NA_ACT_LOGITS;
    switch (i) {
    case NA_ACT_Q: case NA_ACT_ATT:   return (size_t)e->q_dim;
    case NA_ACT_K: case NA_ACT_V:     return (size_t)e->kv_dim;
    case NA_ACT_HB: case NA_ACT_HB2:  return (size_t)c->hidden_dim;
    case NA_ACT_LOGITS:               return (size_t)c->vocab_size;
    default:                          return (size_t)c->dim;    /* x, xb, xl */
    }
}

/* The host view field of activation i. */
static inline float **na_acts_view(na_acts_t *a, int i)
{
    float **v[NA_ACT_COUNT] = { &a->x, &a->xb, &a->q, &a->k, &a->v, &a->att, &a->hb,
                                &a->hb2, &a->xl, &a->logits };
    return v[i];
}

/* Bytes of activation i used by the current step. */
static inline size_t na_acts_used(const na_engine_t *e, const na_acts_t *a, int i)
{
    int per_seg;
    size_t w = na_acts_width(e, i, &per_seg);
    return w * (size_t)(per_seg ? a->n_seg : a->n_rows) * sizeof(float);
}

/* The one way host code reads activations: download the activations of mask
 * `which` (NA_ACT bits; the current step's rows) into their host views and
 * wait on a->ev until they are there (a no-op copy for host memory). Fails
 * with the backend's status. Inline (with the three helpers above): the
 * scheduler calls it around every layer's attention. */
static inline na_status_t na_acts_to_host(na_engine_t *e, na_acts_t *a, unsigned which)
{
    const na_kernel_ops_t *ops = e->kern->ops;
    na_status_t st;
    int i;

    for (i = 0; i < NA_ACT_COUNT; i++) {
        if (!(which & NA_ACT(i)))
            continue;
        st = ops->download(e->kern, *na_acts_view(a, i), a->buf[i], na_acts_used(e, a, i));
        if (st != NA_OK)
            return st;
    }
    st = ops->event_record(e->kern, a->ev);
    return st != NA_OK ? st : ops->event_wait(e->kern, a->ev);
}

/* After host code wrote the views of mask `which`: upload them (nothing for
 * host memory). The views must stay unchanged until the next to_host. */
static inline na_status_t na_acts_from_host(na_engine_t *e, na_acts_t *a, unsigned which)
{
    na_status_t st;
    int i;

    for (i = 0; i < NA_ACT_COUNT; i++) {
        if (!(which & NA_ACT(i)) || a->mirror[i] == NULL)
            continue;
        st = e->kern->ops->upload(e->kern, a->buf[i], a->mirror[i]->host,
                                  na_acts_used(e, a, i));
        if (st != NA_OK)
            return st;
    }
    return NA_OK;
}

/* Check a step against the model: token ids in range, positions in
 * [0, seq_len), segments contiguous and consistent with pos. NA_ERR_INVALID. */
na_status_t na_step_check(const na_engine_t *e, const na_step_t *s);

/* ---- model slices (compute-node/slices.c) --------------------------------
 * Each enqueues its ops on the backend queue and returns the first failing
 * op's status (none fails once the step passed na_step_check and the acts
 * were reserved). A caller that reads an output on the host (q/k/v before
 * attention, logits after final) calls na_acts_to_host first. */
na_status_t na_slice_embed(na_engine_t *e, na_acts_t *a, const na_step_t *s);
/* Outputs a->q, a->k, a->v (rows of the step). */
na_status_t na_slice_pre_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer);
/* K and V of n rows of the attention-normed input xb at positions pos (the
 * K/V part of na_slice_pre_attn: projections, biases, k norm, RoPE of k),
 * also run by the X-cache to regenerate K/V. k/v/xb: (n, kv_dim/kv_dim/dim). */
na_status_t na_slice_kv(na_engine_t *e, int layer, const na_kbuf_t *k, const na_kbuf_t *v,
                        const na_kbuf_t *xb, const int *pos, int n);
/* Input a->att (rows of the step); updates a->x. */
na_status_t na_slice_post_attn(na_engine_t *e, na_acts_t *a, const na_step_t *s, int layer);
/* a->logits row i = logits after segment i's last token. */
na_status_t na_slice_final(na_engine_t *e, na_acts_t *a, const na_step_t *s);

/* Local attention of `layer` for every segment of the step: enqueues the
 * stores of the segment's new K/V rows (a->k, a->v) into its kv at pos0..
 * and the attention that writes a->att; nothing is read on the host. Each
 * segment's kv must be reserved for pos0 + n_tok tokens. Fails with the
 * first failing op's status. */
na_status_t na_engine_attn_local(na_engine_t *e, na_acts_t *a, const na_step_t *s,
                                 int layer);

/* The whole monolithic forward pass of a step: reserves each segment's KV,
 * runs every slice with local attention, commits the KV. On return
 * a->logits holds one row per segment, downloaded (na_acts_to_host). Fails
 * with NA_ERR_INVALID (bad step), NA_ERR_RANGE (context past seq_len),
 * NA_ERR_NOMEM, or a failing op's status. */
na_status_t na_engine_forward(na_engine_t *e, na_acts_t *a, const na_step_t *s);

/* na_engine_forward calling fn(ctx, e, a, s, layer, stage) after each
 * layer's attention (stage NA_TRACE_ATT: a->buf[NA_ACT_ATT] holds its
 * output, before Wo) and after the layer (NA_TRACE_OUT: a->buf[NA_ACT_X],
 * the residual stream), for tracing tools (tests/tools/greedy_top.c); a
 * status other than NA_OK from fn ends the pass with it. */
enum { NA_TRACE_ATT, NA_TRACE_OUT };
typedef na_status_t (*na_layer_trace_fn)(void *ctx, na_engine_t *e, na_acts_t *a,
                                         const na_step_t *s, int layer, int stage);
na_status_t na_engine_forward_traced(na_engine_t *e, na_acts_t *a, const na_step_t *s,
                                     na_layer_trace_fn fn, void *ctx);

#endif /* NA_ENGINE_H */

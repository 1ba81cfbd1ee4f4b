/* kernels/kernels.h — the math of nearattn behind one table per device kind.
 *
 * Callers never call a kernel directly: they get a backend (na_kernels_get)
 * and call through its ops table. `ref` holds plain scalar C references,
 * `cpu` the fast versions (AVX2/FMA/F16C, OpenBLAS); `cuda` and `csd` go
 * beside them later without touching callers.
 *
 * Memory: ops read and write buffers (na_kbuf_t) allocated through the
 * backend (host, pinned host or device memory); weights are placed once
 * (ops->place). Asynchrony: every op is *enqueued* on the backend's queue and
 * returns a status. The CPU and ref backends run it at once; a device backend
 * puts it on a stream. Callers that need results on the host download them
 * and wait on an event recorded after the download (na_kevent_t).
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
#include "kernels/attn_state.h"

typedef struct na_kernels na_kernels_t;
typedef struct na_kevent na_kevent_t;     /* a point in a backend's queue */
typedef struct na_rope na_rope_t;         /* a model's RoPE table (kernels/rope.h) */

/* ---- buffers ---------------------------------------------------------------
 * Memory the ops read and write. A buffer is allocated, freed, filled
 * (upload) and read back (download) through its backend. `host` is non-NULL
 * only when the memory is readable and writable by the host (host and pinned
 * host memory); `dev` is the address the backend's ops use (== host for the
 * cpu backend). A handle may also be a view: na_kbuf_view() names a byte
 * range of another buffer (no allocation, nothing to free), and
 * na_kbuf_host() wraps host memory the caller owns, which the host backends
 * (ref, cpu) accept anywhere a buffer is expected (a device backend does
 * not: it returns NA_ERR_INVALID, allocate through it instead). */
typedef enum {
    NA_KMEM_HOST   = 0,     /* pageable host memory */
    NA_KMEM_PINNED = 1,     /* host memory the device can DMA (cpu: plain host) */
    NA_KMEM_DEVICE = 2,     /* device memory: no host pointer */
} na_kmem_t;

typedef struct na_kbuf {
    na_kernels_t *owner;    /* allocating backend; NULL for wrapped host memory */
    na_kmem_t     mem;
    size_t        size;     /* bytes */
    void         *host;     /* host-accessible address, or NULL (device memory) */
    void         *dev;      /* address the owning backend's ops use */
    void         *alloc;    /* the allocation; NULL in views and wrappers */
} na_kbuf_t;

/* A view of bytes [off, off+size) of b (same owner and memory), its size
 * clamped to what b holds past off, so the ops' size checks still guard b. */
static inline na_kbuf_t na_kbuf_view(const na_kbuf_t *b, size_t off, size_t size)
{
    na_kbuf_t v = *b;
    size_t left = off <= b->size ? b->size - off : 0;
    v.size = size < left ? size : left;
    v.host = b->host != NULL ? (char *)b->host + off : NULL;
    v.dev = b->dev != NULL ? (char *)b->dev + off : NULL;
    v.alloc = NULL;
    return v;
}

/* Host memory owned by the caller, as a buffer for the host backends. */
static inline na_kbuf_t na_kbuf_host(void *p, size_t size)
{
    na_kbuf_t b = { NULL, NA_KMEM_HOST, size, p, p, NULL };
    return b;
}

/* A weight placed on a backend (na_kernel_ops_t.place): its shape and dtype
 * and the buffer the ops read. The host backends wrap the model's mmap (no
 * copy); a device backend uploads once. */
typedef struct {
    na_dtype_t dtype;
    int        rows;        /* output features (1 for a vector) */
    int        cols;        /* input features (contiguous) */
    na_kbuf_t  buf;
    int        layout;      /* NA_LAYOUT_* of buf's bytes (common/model.h): the
                             * model's row order, or the backend's own */
} na_kweight_t;

/* (na_kattn_stat_t, the partial state of decode attention, and its helpers
 * na_kattn_init / na_kattn_merge / na_kattn_finalize: kernels/attn_state.h) */

/* One KV span: n consecutive tokens of one KV head, K and V rows of head_dim
 * elements of kv_dtype (f16, bf16 or f32) with a row stride of `stride` elements.
 * next/next_bytes (optional, NULL/0: none): the memory the caller reads after
 * this span (e.g. the next head's K and V); a backend may prefetch it while
 * it reads this span. A hint: never read as data, never dereferenced past. */
typedef struct {
    const void *k;
    const void *v;
    size_t      stride;
    int         n;
    const void *next;
    size_t      next_bytes;
} na_kv_span_t;

/* The canonical order of attention (bit-exact attention, issue 22 item 15):
 * a query row's output is one function of its keys, whoever computes it (the
 * compute node's decode or prefill, a storage node over KV blocks of any
 * size, on any tier, with any thread count). Its context is cut into parts of
 * NA_ATTN_PART tokens from position 0, each part folded into its own partial
 * chunk by chunk (NA_ATTN_CHUNK tokens from the part's start: one online-
 * softmax update per chunk), and the parts merged in order (na_kattn_merge:
 * part 0, then 1, 2, ...) before na_kattn_finalize. A recovered request is
 * prefilled again over the tokens decode produced, so any difference in the
 * last bits would make a long generation diverge. */
#define NA_ATTN_PART  1024
#define NA_ATTN_CHUNK 64

/* The type of ops->attn_partial (below); backends declare theirs with it.
 * The n_spans spans are one run of keys, in order (e.g. the pieces of a
 * chunk that lie in several KV blocks); the run is folded in chunks of
 * NA_ATTN_CHUNK tokens counted from its first token, whatever the spans'
 * lengths: the result's bits depend on the run's tokens, not on where the
 * spans split it (cpu). For the canonical order, a run starts on a chunk
 * boundary of the context and stays within one part. */
typedef void na_kattn_partial_fn(na_kernels_t *k, na_kattn_stat_t *st, float *acc,
                                 const float *q, int group, int head_dim,
                                 const na_kv_span_t *spans, int n_spans, na_dtype_t kv_dtype,
                                 float scale);

/* The types of the math entries of na_kernel_ops_t (described there, below):
 * each backend declares its own with them. */
typedef na_status_t na_kop_embed_fn(na_kernels_t *k, const na_kbuf_t *x, const na_kweight_t *t,
                                    const int *tokens, int n);
typedef na_status_t na_kop_add_fn(na_kernels_t *k, const na_kbuf_t *x, const na_kbuf_t *y,
                                  size_t n);
typedef na_status_t na_kop_store_fn(na_kernels_t *k, const na_kbuf_t *dst, na_dtype_t dtype,
                                    const na_kbuf_t *src, size_t n);
typedef na_status_t na_kop_matmul_fn(na_kernels_t *k, const na_kbuf_t *y, const na_kbuf_t *x,
                                     const na_kweight_t *w, int batch);
typedef na_status_t na_kop_rmsnorm_fn(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *x,
                                      const na_kweight_t *weight, int n, float eps, int batch);
typedef na_status_t na_kop_rope_fn(na_kernels_t *k, const na_kbuf_t *vec, int n_heads,
                                   const int *pos, const na_rope_t *rope, int batch);
typedef na_status_t na_kop_bias_fn(na_kernels_t *k, const na_kbuf_t *x, const na_kweight_t *bias,
                                   int n, int batch);
typedef na_status_t na_kop_swiglu_fn(na_kernels_t *k, const na_kbuf_t *gate, const na_kbuf_t *up,
                                     size_t n);
typedef na_status_t na_kop_softmax_fn(na_kernels_t *k, const na_kbuf_t *x, int n, int batch);
typedef na_status_t na_kop_attn_prefill_fn(na_kernels_t *k, const na_kbuf_t *out,
                                           const na_kbuf_t *q, const na_kbuf_t *kcache,
                                           const na_kbuf_t *vcache, na_dtype_t kv_dtype, int n_tok,
                                           int pos0, int n_heads, int n_kv_heads, int head_dim);
typedef na_status_t na_kop_attn_decode_fn(na_kernels_t *k, const na_kbuf_t *out,
                                          const na_kbuf_t *q, const na_kbuf_t *kcache,
                                          const na_kbuf_t *vcache, na_dtype_t kv_dtype, int ctx,
                                          int n_heads, int n_kv_heads, int head_dim);

/* Every op below except attn_partial is *enqueued* on the backend's queue
 * and returns at once; its status says whether it was accepted
 * (NA_ERR_INVALID: a NULL or too small buffer, a buffer of another backend,
 * a bad shape). Results are ready once an event recorded after the op has
 * completed (event_wait / event_query). The host backends run each op before
 * returning. Buffer arguments are views (na_kbuf_view) sized at least as the
 * op needs; `pos` and `tokens` are host arrays read before the op returns. */
typedef struct {
    const char *name;                 /* "ref", "cpu", ... */

    /* -- memory -- */
    /* Allocate `size` bytes of memory type mem: *b_p is owned by the caller
     * (buf_free). NA_ERR_UNSUPPORTED for a type the backend lacks,
     * NA_ERR_NOMEM. Contents undefined. */
    na_status_t (*buf_alloc)(na_kernels_t *k, size_t size, na_kmem_t mem, na_kbuf_t **b_p);
    /* Free a buffer from buf_alloc once the ops using it completed; NULL ok. */
    void (*buf_free)(na_kernels_t *k, na_kbuf_t *b);
    /* Grow or shrink a buffer from buf_alloc to `size` bytes keeping its
     * first min(old, new) bytes (host memory: realloc, often without a
     * copy); the handle stays, its addresses may change. Waits for the ops
     * using it. NA_ERR_NOMEM leaves it as it was. */
    na_status_t (*buf_resize)(na_kernels_t *k, na_kbuf_t *b, size_t size);
    /* Copy `size` host bytes into dst. src must stay unchanged until an event
     * recorded after the upload completed. */
    na_status_t (*upload)(na_kernels_t *k, const na_kbuf_t *dst, const void *src, size_t size);
    /* Copy `size` bytes of src into host memory dst (valid once an event
     * recorded after it completed). When dst is src's own host memory this
     * is a no-op: host buffers are read in place. Also the logits copy. */
    na_status_t (*download)(na_kernels_t *k, void *dst, const na_kbuf_t *src, size_t size);
    /* dst = src, `size` bytes, both buffers of this backend. */
    na_status_t (*copy)(na_kernels_t *k, const na_kbuf_t *dst, const na_kbuf_t *src,
                        size_t size);
    /* Place weight t once for the ops: w->buf wraps t->data on host backends
     * (no copy), is uploaded on a device. Undo with unplace. */
    na_status_t (*place)(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w);
    void (*unplace)(na_kernels_t *k, na_kweight_t *w);

    /* -- events: create, record (mark everything enqueued so far), query
     * (NA_OK: completed or never recorded, NA_ERR_BUSY: pending), wait (block
     * the host until completed; returns the first error of the ops before
     * it), destroy. They replace a global sync. -- */
    na_status_t (*event_create)(na_kernels_t *k, na_kevent_t **ev_p);
    na_status_t (*event_record)(na_kernels_t *k, na_kevent_t *ev);
    na_status_t (*event_query)(na_kernels_t *k, na_kevent_t *ev);
    na_status_t (*event_wait)(na_kernels_t *k, na_kevent_t *ev);
    void (*event_destroy)(na_kernels_t *k, na_kevent_t *ev);

    /* -- math. Activations f32. -- */
    /* x[r] = row tokens[r] of table t (vocab, dim) as f32, r < n; any dtype. */
    na_kop_embed_fn *embed;
    /* x[i] += y[i], i < n (residual add). */
    na_kop_add_fn *add;
    /* dst[i] = src[i] (f32) converted to dtype (f32, f16 or bf16), i < n: KV rows
     * into a KV cache. */
    na_kop_store_fn *store;

    /* y[b, W.rows] = W · x[b, W.cols] for b < batch. W any na_dtype_t. */
    na_kop_matmul_fn *matmul;

    /* out[b] = x[b] / rms(x[b]) * weight (f32, n), over n elements, b < batch.
     * out may be x (in place: also the per-head q/k norms, n = head_dim). */
    na_kop_rmsnorm_fn *rmsnorm;

    /* Rotate the pairs of each head of vec (n_heads * rope->head_dim per
     * row) for position pos[b] of row b, by the table of rope (kernels/rope.h:
     * NORM or NEOX pairs, its frequencies and magnitude); rope was created
     * on this backend. */
    na_kop_rope_fn *rope;

    /* x[b*n + i] += bias[i] (f32, n), i < n, b < batch: a projection's bias. */
    na_kop_bias_fn *bias;

    /* gate[i] = silu(gate[i]) * up[i], n*batch elements in place. */
    na_kop_swiglu_fn *swiglu;

    /* In-place softmax over n elements of each of batch rows. */
    na_kop_softmax_fn *softmax;

    /* Causal attention of a prompt: q (n_tok, n_heads*head_dim) for positions
     * pos0..pos0+n_tok-1; K/V hold positions 0..pos0+n_tok-1 of n_kv_heads
     * heads, layout [token][kv_head][head_dim] in kv_dtype (f16/bf16/f32);
     * out (n_tok, n_heads*head_dim). */
    na_kop_attn_prefill_fn *attn_prefill;

    /* Decode attention of one request, GQA: q (n_heads*head_dim) against
     * ctx tokens of K/V laid out [token][kv_head][head_dim] in kv_dtype.
     * Long contexts are split across the backend's threads. out as q. */
    na_kop_attn_decode_fn *attn_decode;

    /* The storage node's host attention kernel (storage-node/attn_engine.c),
     * on host pointers, run at once on the calling thread (not enqueued):
     * partial decode attention of `group` query heads (q: group*head_dim)
     * sharing one KV head, over one run of spans (na_kattn_partial_fn:
     * chunks of NA_ATTN_CHUNK across the spans); folds into st[group] and
     * acc[group*head_dim] (initialise with na_kattn_init). Each K/V row is
     * read once for all heads of the group. scale is 1/sqrt(head_dim). */
    na_kattn_partial_fn *attn_partial;

    /* Optional (NULL: nothing to do; call na_kernels_rest). The caller will
     * enqueue nothing for a while (it waits on the network): threads that
     * poll for work may sleep now, giving their cores to a storage node on
     * the same machine. A hint: the next op works as always. */
    void (*rest)(na_kernels_t *k);

    /* Release the backend (threads, scratch, the struct itself); called by
     * na_kernels_destroy only. */
    void (*destroy)(na_kernels_t *k);
} na_kernel_ops_t;

struct na_kernels {
    const na_kernel_ops_t *ops;
    int                    n_threads;  /* threads the backend may use */
    void                  *priv;       /* backend state (thread pool, stream) */
    na_kevent_t           *fin;        /* event of na_kernels_finish */
    na_kmem_t              mem;        /* where its ops work best: callers put
                                          activations there (host for ref and
                                          cpu, device for refdev and devices) */
    int                    batch_invariant; /* 1: every output row of matmul is
                                          bit-identical to the same row at batch
                                          1 (cpu: no sgemm path); 0 at create,
                                          1 from na_engine_create */
    const char            *isa;        /* the kernels' instruction set, chosen at
                                          create (cpu: "x86-64-v3" or "x86-64-v4");
                                          NULL when it does not apply */
};

/* Create a backend by name ("ref", "cpu", "refdev": ref whose preferred
 * memory is emulated device memory, which tests callers' device paths;
 * "refdev:N": the same with N MiB of device memory, allocations beyond it
 * failing as on a full GPU);
 * n_threads <= 0 means all cores.
 * NA_ERR_UNSUPPORTED for a backend not built or without a device here.
 * A backend instance serves one calling thread at a time (matmul and
 * attn_decode use its scratch and thread pool); attn_partial and the ref
 * backend are stateless and may be called from several threads at once. */
na_status_t na_kernels_create(const char *name, int n_threads, na_kernels_t **k_p);
void        na_kernels_destroy(na_kernels_t *k);

/* The OpenBLAS core type this CPU could run when OpenBLAS loaded older
 * (AVX2) kernels on an AVX-512 CPU, e.g. because OPENBLAS_CORETYPE=Haswell
 * is in the environment (kernels/cpu/cpu_backend.c has the cost: ~1.6x on
 * large-batch sgemm; nearattn's own AVX-512 GEMM takes F32/F16 batches from
 * 64 on such CPUs, kernels/cpu/cpu_gemm_f32.c); NULL when the loaded kernels are the CPU's own or
 * NA_CPU_ISA=v3. OpenBLAS reads OPENBLAS_CORETYPE only as it loads, and an
 * explicit setting is the user's: the benches say it (na_cli_blas_note),
 * nothing overrides it. */
const char *na_kernels_blas_better_core(void);

/* ops->rest if the backend has it (see there). */
void        na_kernels_rest(na_kernels_t *k);

/* Record the backend's own event and wait for it: every op enqueued so far
 * has completed. For callers that need nothing finer. */
na_status_t na_kernels_finish(na_kernels_t *k);

/* Decode attention (ops->attn_decode) on host arrays the caller owns, then
 * wait for it: for host-memory callers of the host backends (tests, benches,
 * the KV-fetch path). Fails with the op's status. */
na_status_t na_kernels_attn_decode_host(na_kernels_t *k, float *out, const float *q,
                                        const void *kcache, const void *vcache,
                                        na_dtype_t kv_dtype, int ctx, int n_heads,
                                        int n_kv_heads, int head_dim);

/* For a backend's table entries (on backend k): p = the address that the
 * backend's argument check `check` (na_khost_arg, na_cu_arg: a NULL, foreign
 * or too small buffer is NA_ERR_INVALID) gives for buffer b used over `need`
 * bytes by op `op` as its argument `what`; on an error the entry returns it. */
#define NA_KBUF_ARG(check, b, need, op, what, p)                                     \
    do {                                                                             \
        void *na_p_ = NULL;                                                          \
        na_status_t na_st_ = check(k, (b), (need), (op), (what), &na_p_);            \
        if (na_st_ != NA_OK)                                                         \
            return na_st_;                                                           \
        (p) = na_p_;                                                                 \
    } while (0)

/* The host-memory attention helpers of kernels/attn_state.h and
 * ops->attn_partial are the storage node's kernels: plain host pointers, no
 * buffers, no queue. */

#endif /* NA_KERNELS_H */

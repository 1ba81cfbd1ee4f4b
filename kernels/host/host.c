/* kernels/host/host.c — the table entries the host backends (ref, cpu)
 * share: host-memory buffers, events, weight placement, and the checked
 * entries of the math ops that call the backend's raw-pointer kernels.
 *
 * Every op runs to completion before it returns, so an event is complete as
 * soon as it is recorded, a download from a buffer's own host memory is a
 * no-op and a weight is placed by wrapping its mmap (no copy). */
#include <stdlib.h>
#include <string.h>

#include "kernels/host/host.h"
#include "kernels/rope.h"

struct na_kevent {
    int recorded;
};

static const na_khost_core_t *na_khost_core(na_kernels_t *k)
{
    return ((const na_khost_t *)k->priv)->core;
}

/* Check that b can be read or written by backend k's ops over `need` bytes
 * and return its address. Host-accessible memory of any host backend (and
 * wrapped caller memory) is accepted; emulated device memory only from its
 * own backend. */
static na_status_t na_khost_arg(na_kernels_t *k, const na_kbuf_t *b, size_t need,
                                const char *op, const char *what, void **p_p)
{
    if (b == NULL || b->dev == NULL)
        return na_err(NA_ERR_INVALID, "kernels %s %s: buffer '%s' is NULL", k->ops->name,
                      op, what);
    if (b->host == NULL && b->owner != k)
        return na_err(NA_ERR_INVALID, "kernels %s %s: buffer '%s' is device memory of "
                      "another backend", k->ops->name, op, what);
    if (b->size < need)
        return na_err(NA_ERR_INVALID, "kernels %s %s: buffer '%s' holds %zu bytes, "
                      "needs %zu", k->ops->name, op, what, b->size, need);
    *p_p = b->dev;
    return NA_OK;
}

#define NA_KHOST_ARG(b, need, op, what, p) NA_KBUF_ARG(na_khost_arg, b, need, op, what, p)

/* A weight of dtype dt with rows of cols elements: a known dtype, whole blocks. */
static na_status_t na_khost_blocks(na_kernels_t *k, const char *op, na_dtype_t dt, int cols)
{
    if ((unsigned)dt >= NA_DTYPE_COUNT)
        return na_err(NA_ERR_INVALID, "kernels %s %s: weight dtype %d unknown", k->ops->name,
                      op, (int)dt);
    if (cols % na_dtype_block(dt) != 0)
        return na_err(NA_ERR_INVALID, "kernels %s %s: %d columns are not whole %s blocks of %d",
                      k->ops->name, op, cols, na_dtype_name(dt), na_dtype_block(dt));
    return NA_OK;
}

static na_status_t na_khost_shape(na_kernels_t *k, const char *op, int ok)
{
    return ok ? NA_OK : na_err(NA_ERR_INVALID, "kernels %s %s: bad shape", k->ops->name, op);
}

/* ---- memory ------------------------------------------------------------- */

na_status_t na_khost_buf_alloc(na_kernels_t *k, size_t size, na_kmem_t mem, na_kbuf_t **b_p)
{
    na_khost_t *h = k->priv;
    na_kbuf_t *b;
    void *p = NULL;

    if (mem != NA_KMEM_HOST && mem != NA_KMEM_PINNED &&
        !(mem == NA_KMEM_DEVICE && h->emulate_device))
        return na_err(NA_ERR_UNSUPPORTED, "kernels %s: no memory of type %d",
                      k->ops->name, (int)mem);
    if (mem == NA_KMEM_DEVICE && h->dev_limit > 0 && size > h->dev_limit - h->dev_used)
        return na_err(NA_ERR_NOMEM, "kernels %s: out of (emulated) device memory: %zu bytes "
                      "asked, %zu of %zu in use", k->ops->name, size, h->dev_used, h->dev_limit);
    b = calloc(1, sizeof(*b));
    if (b != NULL)
        p = malloc(size ? size : 1);
    if (p == NULL) {
        free(b);
        return na_err(NA_ERR_NOMEM, "kernels %s: out of memory for a %zu-byte buffer",
                      k->ops->name, size);
    }
    if (mem == NA_KMEM_DEVICE)
        h->dev_used += size;
    b->owner = k;
    b->mem = mem;
    b->size = size;
    b->host = mem == NA_KMEM_DEVICE ? NULL : p;
    b->dev = p;
    b->alloc = p;
    *b_p = b;
    return NA_OK;
}

void na_khost_buf_free(na_kernels_t *k, na_kbuf_t *b)
{
    na_khost_t *h = k->priv;
    if (b == NULL)
        return;
    if (b->mem == NA_KMEM_DEVICE && b->owner == k)
        h->dev_used -= b->size;
    free(b->alloc);
    free(b);
}

na_status_t na_khost_buf_resize(na_kernels_t *k, na_kbuf_t *b, size_t size)
{
    na_khost_t *h = k->priv;
    void *p;
    if (b == NULL || b->alloc == NULL || b->owner != k)
        return na_err(NA_ERR_INVALID, "kernels %s buf_resize: not a buffer of this backend",
                      k->ops->name);
    if (b->mem == NA_KMEM_DEVICE && h->dev_limit > 0 && size > b->size &&
        size - b->size > h->dev_limit - h->dev_used)
        return na_err(NA_ERR_NOMEM, "kernels %s: out of (emulated) device memory growing a "
                      "buffer to %zu bytes, %zu of %zu in use", k->ops->name, size, h->dev_used,
                      h->dev_limit);
    p = realloc(b->alloc, size ? size : 1);
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "kernels %s: out of memory growing a buffer to %zu bytes",
                      k->ops->name, size);
    if (b->mem == NA_KMEM_DEVICE)
        h->dev_used = h->dev_used - b->size + size;
    b->alloc = p;
    b->dev = p;
    b->host = b->mem == NA_KMEM_DEVICE ? NULL : p;
    b->size = size;
    return NA_OK;
}

na_status_t na_khost_upload(na_kernels_t *k, const na_kbuf_t *dst, const void *src, size_t size)
{
    void *d;
    NA_KHOST_ARG(dst, size, "upload", "dst", d);
    if (src == NULL && size > 0)
        return na_err(NA_ERR_INVALID, "kernels %s upload: NULL source", k->ops->name);
    if (d != src && size > 0)
        memmove(d, src, size);
    return NA_OK;
}

na_status_t na_khost_download(na_kernels_t *k, void *dst, const na_kbuf_t *src, size_t size)
{
    void *s;
    NA_KHOST_ARG(src, size, "download", "src", s);
    if (dst == NULL && size > 0)
        return na_err(NA_ERR_INVALID, "kernels %s download: NULL destination", k->ops->name);
    if (dst != s && size > 0)           /* a host buffer read in place: nothing to do */
        memmove(dst, s, size);
    return NA_OK;
}

na_status_t na_khost_copy(na_kernels_t *k, const na_kbuf_t *dst, const na_kbuf_t *src,
                          size_t size)
{
    void *d, *s;
    NA_KHOST_ARG(dst, size, "copy", "dst", d);
    NA_KHOST_ARG(src, size, "copy", "src", s);
    if (d != s && size > 0)
        memmove(d, s, size);
    return NA_OK;
}

/* The mmap is the placed weight: a wrapper of t->data, nothing copied. */
na_status_t na_khost_place(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w)
{
    if (t == NULL || t->data == NULL || t->rows <= 0 || t->cols <= 0)
        return na_err(NA_ERR_INVALID, "kernels %s place: empty tensor", k->ops->name);
    if (na_khost_blocks(k, "place", t->dtype, t->cols) != NA_OK)
        return NA_ERR_INVALID;
    w->dtype = t->dtype;
    w->rows = t->rows;
    w->cols = t->cols;
    w->layout = NA_LAYOUT_ROWS;
    w->buf = na_kbuf_host((void *)t->data,
                          (size_t)t->rows * na_dtype_bytes(t->dtype, (size_t)t->cols));
    return NA_OK;
}

void na_khost_unplace(na_kernels_t *k, na_kweight_t *w)
{
    (void)k;
    memset(w, 0, sizeof(*w));
}

/* ---- events ------------------------------------------------------------- */

na_status_t na_khost_event_create(na_kernels_t *k, na_kevent_t **ev_p)
{
    na_kevent_t *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return na_err(NA_ERR_NOMEM, "kernels %s: out of memory for an event", k->ops->name);
    *ev_p = ev;
    return NA_OK;
}

na_status_t na_khost_event_record(na_kernels_t *k, na_kevent_t *ev)
{
    if (ev == NULL)
        return na_err(NA_ERR_INVALID, "kernels %s event_record: NULL event", k->ops->name);
    ev->recorded = 1;                   /* everything before it has already run */
    return NA_OK;
}

/* Query and wait alike: every op before the event has already run. */
na_status_t na_khost_event_done(na_kernels_t *k, na_kevent_t *ev)
{
    if (ev == NULL)
        return na_err(NA_ERR_INVALID, "kernels %s: NULL event", k->ops->name);
    return NA_OK;
}

void na_khost_event_destroy(na_kernels_t *k, na_kevent_t *ev)
{
    (void)k;
    free(ev);
}

/* ---- math: check the arguments, call the backend's kernel --------------- */

#define F32B(n) ((size_t)(n) * sizeof(float))

na_status_t na_khost_embed(na_kernels_t *k, const na_kbuf_t *x, const na_kweight_t *t,
                           const int *tokens, int n)
{
    na_tensor_t tt;
    float *px;
    void *pt;
    int i;

    if (t == NULL || tokens == NULL || n < 0)
        return na_khost_shape(k, "embed", 0);
    if (na_khost_blocks(k, "embed", t->dtype, t->cols) != NA_OK)
        return NA_ERR_INVALID;
    NA_KHOST_ARG(x, F32B((size_t)n * (size_t)t->cols), "embed", "x", px);
    NA_KHOST_ARG(&t->buf, (size_t)t->rows * na_dtype_bytes(t->dtype, (size_t)t->cols),
                 "embed", "table", pt);
    for (i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= t->rows)
            return na_err(NA_ERR_INVALID, "kernels %s embed: token %d outside [0, %d)",
                          k->ops->name, tokens[i], t->rows);
    tt.dtype = t->dtype;
    tt.rows = t->rows;
    tt.cols = t->cols;
    tt.data = pt;
    tt.layout = t->layout;
    na_khost_core(k)->embed(px, &tt, tokens, n);
    return NA_OK;
}

na_status_t na_khost_add(na_kernels_t *k, const na_kbuf_t *x, const na_kbuf_t *y, size_t n)
{
    float *px, *py;
    NA_KHOST_ARG(x, F32B(n), "add", "x", px);
    NA_KHOST_ARG(y, F32B(n), "add", "y", py);
    na_khost_core(k)->add(px, py, n);
    return NA_OK;
}

na_status_t na_khost_store(na_kernels_t *k, const na_kbuf_t *dst, na_dtype_t dtype,
                           const na_kbuf_t *src, size_t n)
{
    void *pd;
    float *ps;
    if (dtype != NA_DTYPE_F32 && dtype != NA_DTYPE_F16 && dtype != NA_DTYPE_BF16)
        return na_err(NA_ERR_INVALID, "kernels %s store: dtype %s (use f32, f16 or bf16)",
                      k->ops->name, na_dtype_name(dtype));
    NA_KHOST_ARG(dst, na_dtype_bytes(dtype, n), "store", "dst", pd);
    NA_KHOST_ARG(src, F32B(n), "store", "src", ps);
    na_khost_core(k)->store(pd, dtype, ps, n);
    return NA_OK;
}

na_status_t na_khost_matmul(na_kernels_t *k, const na_kbuf_t *y, const na_kbuf_t *x,
                            const na_kweight_t *w, int batch)
{
    na_tensor_t t;
    float *py, *px;
    void *pw;

    if (w == NULL || batch < 0)
        return na_khost_shape(k, "matmul", 0);
    if (na_khost_blocks(k, "matmul", w->dtype, w->cols) != NA_OK)
        return NA_ERR_INVALID;
    NA_KHOST_ARG(y, F32B((size_t)batch * (size_t)w->rows), "matmul", "y", py);
    NA_KHOST_ARG(x, F32B((size_t)batch * (size_t)w->cols), "matmul", "x", px);
    NA_KHOST_ARG(&w->buf, (size_t)w->rows * na_dtype_bytes(w->dtype, (size_t)w->cols),
                 "matmul", "w", pw);
    t.dtype = w->dtype;
    t.rows = w->rows;
    t.cols = w->cols;
    t.data = pw;
    t.layout = w->layout;
    na_khost_core(k)->matmul(k, py, px, &t, batch);
    return NA_OK;
}

na_status_t na_khost_rmsnorm(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *x,
                             const na_kweight_t *weight, int n, float eps, int batch)
{
    float *po, *px, *pw;
    if (weight == NULL || weight->dtype != NA_DTYPE_F32 || n < 0 || batch < 0)
        return na_khost_shape(k, "rmsnorm", 0);
    NA_KHOST_ARG(out, F32B((size_t)batch * (size_t)n), "rmsnorm", "out", po);
    NA_KHOST_ARG(x, F32B((size_t)batch * (size_t)n), "rmsnorm", "x", px);
    NA_KHOST_ARG(&weight->buf, F32B(n), "rmsnorm", "weight", pw);
    na_khost_core(k)->rmsnorm(po, px, pw, n, eps, batch);
    return NA_OK;
}

na_status_t na_khost_rope(na_kernels_t *k, const na_kbuf_t *vec, int n_heads, const int *pos,
                          const na_rope_t *rope, int batch)
{
    float *pv;
    if (pos == NULL || rope == NULL || rope->k != k || n_heads < 0 || batch < 0)
        return na_khost_shape(k, "rope", 0);
    NA_KHOST_ARG(vec, F32B((size_t)batch * (size_t)n_heads * (size_t)rope->head_dim), "rope",
                 "vec", pv);
    na_khost_core(k)->rope(pv, n_heads, pos, rope, batch);
    return NA_OK;
}

/* Row by row through the backend's add kernel. */
na_status_t na_khost_bias(na_kernels_t *k, const na_kbuf_t *x, const na_kweight_t *bias, int n,
                          int batch)
{
    float *px, *pb;
    int b;
    if (bias == NULL || bias->dtype != NA_DTYPE_F32 || n < 0 || batch < 0)
        return na_khost_shape(k, "bias", 0);
    NA_KHOST_ARG(x, F32B((size_t)batch * (size_t)n), "bias", "x", px);
    NA_KHOST_ARG(&bias->buf, F32B(n), "bias", "bias", pb);
    for (b = 0; b < batch; b++)
        na_khost_core(k)->add(px + (size_t)b * (size_t)n, pb, (size_t)n);
    return NA_OK;
}

na_status_t na_khost_swiglu(na_kernels_t *k, const na_kbuf_t *gate, const na_kbuf_t *up,
                            size_t n)
{
    float *pg, *pu;
    NA_KHOST_ARG(gate, F32B(n), "swiglu", "gate", pg);
    NA_KHOST_ARG(up, F32B(n), "swiglu", "up", pu);
    na_khost_core(k)->swiglu(pg, pu, n);
    return NA_OK;
}

na_status_t na_khost_softmax(na_kernels_t *k, const na_kbuf_t *x, int n, int batch)
{
    float *px;
    if (n <= 0 || batch < 0)
        return na_khost_shape(k, "softmax", 0);
    NA_KHOST_ARG(x, F32B((size_t)batch * (size_t)n), "softmax", "x", px);
    na_khost_core(k)->softmax(px, n, batch);
    return NA_OK;
}

/* The four buffers of an attention op: n_q query rows of n_heads heads and
 * n_kv KV tokens of n_kv_heads heads (kv f16, bf16 or f32, n_kv_heads dividing
 * n_heads); their addresses into p[4] (out, q, kcache, vcache). */
typedef struct {
    const na_kbuf_t *out, *q, *kc, *vc;
} na_khost_attn_bufs_t;

static na_status_t na_khost_attn_args(na_kernels_t *k, const char *op,
                                      const na_khost_attn_bufs_t *b, na_dtype_t dt,
                                      int n_q, int n_kv, int n_heads, int n_kv_heads,
                                      int head_dim, void *p[4])
{
    size_t qb, kvb;
    na_status_t st;

    if ((dt != NA_DTYPE_F16 && dt != NA_DTYPE_BF16 && dt != NA_DTYPE_F32) || n_heads <= 0 || n_kv_heads <= 0 ||
        head_dim <= 0 || n_heads % n_kv_heads != 0 || n_q < 0 || n_kv < 0)
        return na_khost_shape(k, op, 0);
    qb = F32B((size_t)n_q * (size_t)n_heads * (size_t)head_dim);
    kvb = na_dtype_bytes(dt, (size_t)n_kv * (size_t)n_kv_heads * (size_t)head_dim);
    if ((st = na_khost_arg(k, b->out, qb, op, "out", &p[0])) != NA_OK ||
        (st = na_khost_arg(k, b->q, qb, op, "q", &p[1])) != NA_OK ||
        (st = na_khost_arg(k, b->kc, kvb, op, "kcache", &p[2])) != NA_OK ||
        (st = na_khost_arg(k, b->vc, kvb, op, "vcache", &p[3])) != NA_OK)
        return st;
    return NA_OK;
}

na_status_t na_khost_attn_prefill(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *q,
                                  const na_kbuf_t *kcache, const na_kbuf_t *vcache,
                                  na_dtype_t kv_dtype, int n_tok, int pos0, int n_heads,
                                  int n_kv_heads, int head_dim)
{
    na_khost_attn_bufs_t b = { out, q, kcache, vcache };
    void *p[4];
    na_status_t st = pos0 < 0 ? na_khost_shape(k, "attn_prefill", 0)
                              : na_khost_attn_args(k, "attn_prefill", &b, kv_dtype, n_tok,
                                                   pos0 + n_tok, n_heads, n_kv_heads,
                                                   head_dim, p);
    if (st != NA_OK)
        return st;
    na_khost_core(k)->attn_prefill(k, p[0], p[1], p[2], p[3], kv_dtype, n_tok, pos0, n_heads,
                                   n_kv_heads, head_dim);
    return NA_OK;
}

na_status_t na_khost_attn_decode(na_kernels_t *k, const na_kbuf_t *out, const na_kbuf_t *q,
                                 const na_kbuf_t *kcache, const na_kbuf_t *vcache,
                                 na_dtype_t kv_dtype, int ctx, int n_heads, int n_kv_heads,
                                 int head_dim)
{
    na_khost_attn_bufs_t b = { out, q, kcache, vcache };
    void *p[4];
    na_status_t st = na_khost_attn_args(k, "attn_decode", &b, kv_dtype, 1, ctx, n_heads,
                                        n_kv_heads, head_dim, p);
    if (st != NA_OK)
        return st;
    na_khost_core(k)->attn_decode(k, p[0], p[1], p[2], p[3], kv_dtype, ctx, n_heads,
                                  n_kv_heads, head_dim);
    return NA_OK;
}

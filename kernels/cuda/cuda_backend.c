/* kernels/cuda/cuda_backend.c — the CUDA backend's table, device set-up,
 * buffers (device, mapped pinned, pageable host), copies, events and weight
 * placement. The math entries are in cuda_ops.c, the kernels in *.cu. Only
 * the CUDA runtime and cuBLAS are called (no driver API). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/cuda/cuda_present.h"
#include "kernels/ref/ref.h"

#define NA_CU_RING_INTS 65536

struct na_kevent {
    cudaEvent_t ev;
};

na_status_t na_cu_status(na_kernels_t *k, int err, const char *call)
{
    cudaError_t e = (cudaError_t)err;
    int gpu = k != NULL ? NA_CU(k)->gpu : -1;
    if (e == cudaSuccess)
        return NA_OK;
    return na_err(e == cudaErrorMemoryAllocation ? NA_ERR_NOMEM : NA_ERR_IO,
                  "kernels cuda (gpu %d): %s: %s (error %d)", gpu, call, cudaGetErrorString(e),
                  (int)e);
}

na_status_t na_cu_enter(na_kernels_t *k)
{
    return na_cu_status(k, cudaSetDevice(NA_CU(k)->gpu), "cudaSetDevice");
}

na_status_t na_cuda_probe(int gpu, int *n_p)
{
    int n = 0;
    char node[300];
    cudaError_t e = cudaGetDeviceCount(&n);
    if ((e != cudaSuccess || n <= 0) && na_cuda_gpu_present(node, sizeof(node)))
        return na_err(NA_ERR_IO, "the CUDA runtime sees no device on a machine with an NVIDIA "
                      "GPU (%s): cudaGetDeviceCount: %s (error %d, %d devices)", node,
                      cudaGetErrorString(e), (int)e, n);
    if (e != cudaSuccess)
        return na_err(NA_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount: %s (error %d)",
                      cudaGetErrorString(e), (int)e);
    if (n <= 0)
        return na_err(NA_ERR_UNSUPPORTED, "no CUDA device: cudaGetDeviceCount found none");
    if (gpu >= n)
        return na_err(NA_ERR_NOT_FOUND, "no CUDA device: gpu %d does not exist (this machine "
                      "has %d, numbered from 0)", gpu, n);
    if (n_p != NULL)
        *n_p = n;
    return NA_OK;
}

/* b checked for an op over `need` bytes: NA_ERR_INVALID for NULL, another
 * backend's memory, pageable host memory unless host_ok (a copy takes
 * it), too small. */
static na_status_t na_cu_buf_check(na_kernels_t *k, const na_kbuf_t *b, size_t need,
                                   const char *op, const char *what, int host_ok)
{
    if (b == NULL || b->dev == NULL)
        return na_err(NA_ERR_INVALID, "kernels cuda %s: buffer '%s' is NULL", op, what);
    if (b->owner != k)
        return na_err(NA_ERR_INVALID, "kernels cuda %s: buffer '%s' is not memory of this "
                      "backend (allocate it with buf_alloc)", op, what);
    if (b->mem == NA_KMEM_HOST && !host_ok)
        return na_err(NA_ERR_INVALID, "kernels cuda %s: buffer '%s' is pageable host memory "
                      "(use device or pinned memory)", op, what);
    if (b->size < need)
        return na_err(NA_ERR_INVALID, "kernels cuda %s: buffer '%s' holds %zu bytes, needs %zu",
                      op, what, b->size, need);
    return NA_OK;
}

na_status_t na_cu_arg(na_kernels_t *k, const na_kbuf_t *b, size_t need, const char *op,
                      const char *what, void **p_p)
{
    na_status_t st = na_cu_buf_check(k, b, need, op, what, 0);
    if (st == NA_OK)
        *p_p = b->dev;
    return st;
}

/* ---- scratch and the parameter ring ------------------------------------- */

na_status_t na_cu_scratch(na_kernels_t *k, void **p, size_t *cap, size_t bytes)
{
    na_cuda_t *c = NA_CU(k);
    na_status_t st;
    if (bytes <= *cap)
        return NA_OK;
    if ((st = na_cu_status(k, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize")) != NA_OK)
        return st;
    cudaFree(*p);
    *p = NULL;
    *cap = 0;
    if ((st = na_cu_status(k, cudaMalloc(p, bytes), "cudaMalloc (scratch)")) != NA_OK)
        return st;
    *cap = bytes;
    return NA_OK;
}

/* `bytes` of pinned host memory mapped into the device: its host address
 * *h_p and device address *d_p (both unchanged on failure); `call` names the
 * allocation in the error. Free with cudaFreeHost. */
static na_status_t na_cu_pinned_alloc(na_kernels_t *k, size_t bytes, const char *call,
                                      void **h_p, void **d_p)
{
    void *h = NULL, *d = NULL;
    na_status_t st = na_cu_status(k, cudaHostAlloc(&h, bytes,
                                                   cudaHostAllocMapped | cudaHostAllocPortable),
                                  call);
    if (st == NA_OK && (st = na_cu_status(k, cudaHostGetDevicePointer(&d, h, 0),
                                          "cudaHostGetDevicePointer")) != NA_OK)
        cudaFreeHost(h);
    if (st != NA_OK)
        return st;
    *h_p = h;
    *d_p = d;
    return NA_OK;
}

static na_status_t na_cu_ring_alloc(na_kernels_t *k, size_t ints)
{
    na_cuda_t *c = NA_CU(k);
    void *h = NULL, *d = NULL;
    na_status_t st = na_cu_pinned_alloc(k, ints * sizeof(int), "cudaHostAlloc (parameters)", &h,
                                        &d);
    if (st != NA_OK)
        return st;
    c->ring = h;
    c->ring_dev = d;
    c->ring_cap = ints;
    c->ring_pos = 0;
    return NA_OK;
}

na_status_t na_cu_params(na_kernels_t *k, const int *src, int n, const int **dev_p)
{
    na_cuda_t *c = NA_CU(k);
    na_status_t st;
    if (n <= 0) {
        *dev_p = c->ring_dev;
        return NA_OK;
    }
    c->ring_pos += c->ring_pos & 1;    /* 8-byte aligned: descriptors hold pointers */
    if ((size_t)n > c->ring_cap - c->ring_pos) {   /* the kernels reading it finish first */
        if ((st = na_cu_status(k, cudaStreamSynchronize(c->stream),
                               "cudaStreamSynchronize")) != NA_OK)
            return st;
        c->ring_pos = 0;
        if ((size_t)n > c->ring_cap) {
            cudaFreeHost(c->ring);
            c->ring = c->ring_dev = NULL;
            c->ring_cap = 0;
            if ((st = na_cu_ring_alloc(k, (size_t)n)) != NA_OK)
                return st;
        }
    }
    memcpy(c->ring + c->ring_pos, src, (size_t)n * sizeof(int));
    *dev_p = c->ring_dev + c->ring_pos;
    c->ring_pos += (size_t)n;
    return NA_OK;
}

/* ---- memory ------------------------------------------------------------- */

/* Allocate size bytes of type mem into b's addresses. */
static na_status_t na_cu_mem_alloc(na_kernels_t *k, na_kbuf_t *b, size_t size, na_kmem_t mem)
{
    void *p = NULL, *d = NULL;
    na_status_t st;
    size_t sz = size ? size : 1;

    if (mem == NA_KMEM_HOST) {
        if ((p = malloc(sz)) == NULL)
            return na_err(NA_ERR_NOMEM, "kernels cuda: out of host memory for %zu bytes", size);
        d = p;
    } else if (mem == NA_KMEM_PINNED) {
        if ((st = na_cu_pinned_alloc(k, sz, "cudaHostAlloc", &p, &d)) != NA_OK)
            return st;
    } else if (mem == NA_KMEM_DEVICE) {
        if ((st = na_cu_status(k, cudaMalloc(&d, sz), "cudaMalloc")) != NA_OK)
            return st;
        p = NULL;
    } else {
        return na_err(NA_ERR_UNSUPPORTED, "kernels cuda: no memory of type %d", (int)mem);
    }
    b->owner = k;
    b->mem = mem;
    b->size = size;
    b->host = p;
    b->dev = d;
    b->alloc = mem == NA_KMEM_DEVICE ? d : p;
    return NA_OK;
}

static void na_cu_mem_free(na_kbuf_t *b)
{
    if (b->alloc == NULL)
        return;
    if (b->mem == NA_KMEM_HOST)
        free(b->alloc);
    else if (b->mem == NA_KMEM_PINNED)
        cudaFreeHost(b->alloc);
    else
        cudaFree(b->alloc);
}

static na_status_t na_cu_buf_alloc(na_kernels_t *k, size_t size, na_kmem_t mem, na_kbuf_t **b_p)
{
    na_kbuf_t *b = calloc(1, sizeof(*b));
    na_status_t st;
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "kernels cuda: out of memory for a buffer handle");
    if ((st = na_cu_enter(k)) != NA_OK || (st = na_cu_mem_alloc(k, b, size, mem)) != NA_OK) {
        free(b);
        return st;
    }
    *b_p = b;
    return NA_OK;
}

static void na_cu_buf_free(na_kernels_t *k, na_kbuf_t *b)
{
    if (b == NULL)
        return;
    /* the ops enqueued before may still use it: wait for them explicitly */
    if (na_cu_enter(k) == NA_OK &&
        (b->mem == NA_KMEM_HOST || cudaStreamSynchronize(NA_CU(k)->stream) == cudaSuccess))
        na_cu_mem_free(b);
    free(b);
}

/* Copy between two addresses in the stream's order (below). */
static na_status_t na_cu_memcpy(na_kernels_t *k, void *dst, int dst_host, const void *src,
                                int src_host, size_t size, const char *op);

/* A new allocation, the kept contents copied into it on the stream (after
 * every op enqueued before, which may still write b), then an explicit wait
 * for that copy before the old memory is freed: the order never rests on
 * cudaFree's implicit synchronisation. */
static na_status_t na_cu_buf_resize(na_kernels_t *k, na_kbuf_t *b, size_t size)
{
    na_cuda_t *c = NA_CU(k);
    na_kbuf_t nb;
    size_t keep;
    na_status_t st;

    if (b == NULL || b->alloc == NULL || b->owner != k)
        return na_err(NA_ERR_INVALID, "kernels cuda buf_resize: not a buffer of this backend");
    if ((st = na_cu_enter(k)) != NA_OK || (st = na_cu_mem_alloc(k, &nb, size, b->mem)) != NA_OK)
        return st;
    keep = size < b->size ? size : b->size;
    st = na_cu_memcpy(k, nb.host != NULL ? nb.host : nb.dev, nb.host != NULL,
                      b->host != NULL ? b->host : b->dev, b->host != NULL, keep,
                      "cudaMemcpyAsync (resize)");
    if (st == NA_OK)
        st = na_cu_status(k, cudaStreamSynchronize(c->stream), "cudaStreamSynchronize (resize)");
    if (st != NA_OK) {
        na_cu_mem_free(&nb);
        return st;
    }
    na_cu_mem_free(b);
    *b = nb;
    return NA_OK;
}

/* Copy between two addresses in the stream's order. Host to host (pinned or
 * pageable on both sides) waits for the stream and copies on the host: the
 * ops before it may still read or write that memory. With device memory on
 * one side, cudaMemcpyAsync keeps the order; a pageable host side makes the
 * runtime stage the copy before returning, so the host array may be reused
 * at once. */
static na_status_t na_cu_memcpy(na_kernels_t *k, void *dst, int dst_host, const void *src,
                                int src_host, size_t size, const char *op)
{
    na_status_t st;
    if (size == 0 || dst == src)
        return NA_OK;
    if (dst_host && src_host) {
        if ((st = na_cu_status(k, cudaStreamSynchronize(NA_CU(k)->stream),
                               "cudaStreamSynchronize")) != NA_OK)
            return st;
        memmove(dst, src, size);
        return NA_OK;
    }
    return na_cu_status(k, cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault,
                                           NA_CU(k)->stream), op);
}

static na_status_t na_cu_upload(na_kernels_t *k, const na_kbuf_t *dst, const void *src,
                                size_t size)
{
    na_status_t st = na_cu_buf_check(k, dst, size, "upload", "dst", 1);
    if (st == NA_OK && src == NULL && size > 0)
        st = na_err(NA_ERR_INVALID, "kernels cuda upload: NULL source");
    if (st == NA_OK)
        st = na_cu_enter(k);
    if (st != NA_OK)
        return st;
    return na_cu_memcpy(k, dst->host != NULL ? dst->host : dst->dev, dst->host != NULL, src, 1,
                        size, "cudaMemcpyAsync (upload)");
}

static na_status_t na_cu_download(na_kernels_t *k, void *dst, const na_kbuf_t *src, size_t size)
{
    na_status_t st = na_cu_buf_check(k, src, size, "download", "src", 1);
    if (st == NA_OK && dst == NULL && size > 0)
        st = na_err(NA_ERR_INVALID, "kernels cuda download: NULL destination");
    if (st != NA_OK)
        return st;
    if (dst == src->host)               /* host-visible memory read in place */
        return NA_OK;
    if ((st = na_cu_enter(k)) != NA_OK)
        return st;
    return na_cu_memcpy(k, dst, 1, src->host != NULL ? src->host : src->dev, src->host != NULL,
                        size, "cudaMemcpyAsync (download)");
}

static na_status_t na_cu_copy(na_kernels_t *k, const na_kbuf_t *dst, const na_kbuf_t *src,
                              size_t size)
{
    na_status_t st;
    if ((st = na_cu_buf_check(k, dst, size, "copy", "dst", 1)) != NA_OK ||
        (st = na_cu_buf_check(k, src, size, "copy", "src", 1)) != NA_OK ||
        (st = na_cu_enter(k)) != NA_OK)
        return st;
    return na_cu_memcpy(k, dst->host != NULL ? dst->host : dst->dev, dst->host != NULL,
                        src->host != NULL ? src->host : src->dev, src->host != NULL, size,
                        "cudaMemcpyAsync (copy)");
}

/* ---- weights ------------------------------------------------------------ */

/* Upload bytes of host memory src to device memory d on the stream, staged
 * through two pinned halves of NA_CU_STAGE_BYTES: while one half's DMA
 * runs the host fills the other; a half is refilled only after the event of
 * its last copy completed. Pageable memory is never handed to
 * cudaMemcpyAsync, and the copies are ordered with the ops on the stream
 * (which may already use d's neighbours). Returns once src is no longer
 * read (the last DMA may still be in flight: the ops after it wait for it
 * in stream order). */
static na_status_t na_cu_stage_upload(na_kernels_t *k, void *d, const void *src, size_t bytes)
{
    na_cuda_t *c = NA_CU(k);
    size_t off = 0, n;
    na_status_t st;
    int half = 0, i;

    if (c->stage == NULL) {
        void *p = NULL;
        if ((st = na_cu_status(k, cudaHostAlloc(&p, 2 * NA_CU_STAGE_BYTES, cudaHostAllocPortable),
                               "cudaHostAlloc (weight staging)")) != NA_OK)
            return st;
        for (i = 0; i < 2 && st == NA_OK; i++)
            st = na_cu_status(k, cudaEventCreateWithFlags(&c->stage_ev[i],
                                                          cudaEventDisableTiming),
                              "cudaEventCreateWithFlags (weight staging)");
        if (st != NA_OK) {
            for (i = 0; i < 2; i++)
                if (c->stage_ev[i] != NULL)
                    cudaEventDestroy(c->stage_ev[i]);
            c->stage_ev[0] = c->stage_ev[1] = NULL;
            cudaFreeHost(p);
            return st;
        }
        c->stage = p;
    }
    while (off < bytes) {
        char *h = c->stage + (size_t)half * NA_CU_STAGE_BYTES;
        n = bytes - off < NA_CU_STAGE_BYTES ? bytes - off : NA_CU_STAGE_BYTES;
        if ((st = na_cu_status(k, cudaEventSynchronize(c->stage_ev[half]),
                               "cudaEventSynchronize (weight staging)")) != NA_OK)
            return st;
        memcpy(h, (const char *)src + off, n);
        if ((st = na_cu_status(k, cudaMemcpyAsync((char *)d + off, h, n, cudaMemcpyHostToDevice,
                                                  c->stream), "cudaMemcpyAsync (weight)")) != NA_OK ||
            (st = na_cu_status(k, cudaEventRecord(c->stage_ev[half], c->stream),
                               "cudaEventRecord (weight staging)")) != NA_OK)
            return st;
        off += n;
        half ^= 1;
    }
    return NA_OK;
}

/* Upload quantised t into d in the repacked layout (cuda_launch.h), a field
 * and a range of blocks at a time through a host buffer of at most
 * NA_CU_STAGE_BYTES: never a host copy of the whole weight. The padding
 * between the field arrays is left as it is (never read). */
static na_status_t na_cu_qupload(na_kernels_t *k, void *d, const na_tensor_t *t)
{
    size_t nb = (size_t)t->rows * (size_t)t->cols / (size_t)na_dtype_block(t->dtype);
    size_t off, per, b0, n, chunk = 0;
    unsigned char *h;
    na_status_t st = NA_OK;
    int field;

    for (field = 0; field < 5; field++)          /* the buffer: the largest chunk */
        if ((per = na_cu_qpack_field((int)t->dtype, field, nb, &off)) > 0 && per * nb > chunk)
            chunk = per * nb;
    chunk = chunk < NA_CU_STAGE_BYTES ? chunk : NA_CU_STAGE_BYTES;
    if ((h = malloc(chunk ? chunk : 1)) == NULL)
        return na_err(NA_ERR_NOMEM, "kernels cuda place: out of host memory repacking a %s "
                      "weight (%zu bytes)", na_dtype_name(t->dtype), chunk);
    for (field = 0; field < 5 && st == NA_OK; field++) {
        if ((per = na_cu_qpack_field((int)t->dtype, field, nb, &off)) == 0)
            continue;
        for (b0 = 0; b0 < nb && st == NA_OK; b0 += n) {
            n = nb - b0 < NA_CU_STAGE_BYTES / per ? nb - b0 : NA_CU_STAGE_BYTES / per;
            na_cu_qpack_blocks((int)t->dtype, field, t->data, b0, n, h);
            /* returns once h is no longer read: refilled next */
            st = na_cu_stage_upload(k, (char *)d + off + b0 * per, h, n * per);
        }
    }
    free(h);
    return st;
}

/* Placed bytes of t: GGML's bytes for f32/f16/bf16, the repacked layout
 * (cuda_launch.h) for the quantised types. */
static size_t na_cu_placed_bytes(const na_tensor_t *t)
{
    if (na_dtype_is_quant(t->dtype))
        return na_cu_qpack_bytes((int)t->dtype, (size_t)t->rows * (size_t)t->cols /
                                                (size_t)na_dtype_block(t->dtype));
    return (size_t)t->rows * na_dtype_bytes(t->dtype, (size_t)t->cols);
}

static na_status_t na_cu_place(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w)
{
    na_cuda_t *c = NA_CU(k);
    na_cu_placed_t *pl;
    size_t bytes;
    void *d = NULL;
    na_status_t st;
    int i;

    if (t == NULL || t->data == NULL || t->rows <= 0 || t->cols <= 0 ||
        (unsigned)t->dtype >= (unsigned)NA_DTYPE_COUNT ||
        t->cols % na_dtype_block(t->dtype) != 0)
        return na_err(NA_ERR_INVALID, "kernels cuda place: empty or malformed tensor (a %s row "
                      "holds whole blocks of %d)", t != NULL ? na_dtype_name(t->dtype) : "?",
                      t != NULL ? na_dtype_block(t->dtype) : 0);
    bytes = na_cu_placed_bytes(t);
    for (i = 0; i < c->n_placed; i++)
        if (c->placed[i].src == t->data && c->placed[i].bytes == bytes) {
            c->placed[i].refs++;
            d = c->placed[i].dev;
            break;
        }
    if (d == NULL) {
        if (c->n_placed == c->cap_placed) {
            int cap = c->cap_placed ? 2 * c->cap_placed : 64;
            pl = realloc(c->placed, (size_t)cap * sizeof(*pl));
            if (pl == NULL)
                return na_err(NA_ERR_NOMEM, "kernels cuda place: out of memory");
            c->placed = pl;
            c->cap_placed = cap;
        }
        if ((st = na_cu_enter(k)) != NA_OK ||
            (st = na_cu_status(k, cudaMalloc(&d, bytes), "cudaMalloc (weight)")) != NA_OK)
            return na_err_prefix(st, "placing a %d x %d %s weight (%zu bytes): ", t->rows,
                                 t->cols, na_dtype_name(t->dtype), bytes);
        st = na_dtype_is_quant(t->dtype) ? na_cu_qupload(k, d, t)
                                         : na_cu_stage_upload(k, d, t->data, bytes);
        if (st != NA_OK) {
            cudaStreamSynchronize(c->stream);     /* no copy may still target d */
            cudaFree(d);
            return na_err_prefix(st, "placing a %d x %d %s weight: ", t->rows, t->cols,
                                 na_dtype_name(t->dtype));
        }
        c->placed[c->n_placed++] = (na_cu_placed_t){ t->data, bytes, d, 1 };
    }
    w->dtype = t->dtype;
    w->rows = t->rows;
    w->cols = t->cols;
    w->buf = (na_kbuf_t){ k, NA_KMEM_DEVICE, bytes, NULL, d, NULL };
    return NA_OK;
}

static void na_cu_unplace(na_kernels_t *k, na_kweight_t *w)
{
    na_cuda_t *c = NA_CU(k);
    int i;
    for (i = 0; w->buf.dev != NULL && i < c->n_placed; i++) {
        if (c->placed[i].dev != w->buf.dev)
            continue;
        if (--c->placed[i].refs == 0) {
            /* ops enqueued before may still read it: wait for them, then free */
            if (na_cu_enter(k) == NA_OK && cudaStreamSynchronize(c->stream) == cudaSuccess)
                cudaFree(c->placed[i].dev);
            c->placed[i] = c->placed[--c->n_placed];
        }
        break;
    }
    memset(w, 0, sizeof(*w));
}

/* ---- events ------------------------------------------------------------- */

static na_status_t na_cu_event_create(na_kernels_t *k, na_kevent_t **ev_p)
{
    na_kevent_t *ev = calloc(1, sizeof(*ev));
    na_status_t st;
    if (ev == NULL)
        return na_err(NA_ERR_NOMEM, "kernels cuda: out of memory for an event");
    if ((st = na_cu_enter(k)) != NA_OK ||
        (st = na_cu_status(k, cudaEventCreateWithFlags(&ev->ev, cudaEventDisableTiming),
                           "cudaEventCreateWithFlags")) != NA_OK) {
        free(ev);
        return st;
    }
    *ev_p = ev;
    return NA_OK;
}

static na_status_t na_cu_event_record(na_kernels_t *k, na_kevent_t *ev)
{
    if (ev == NULL)
        return na_err(NA_ERR_INVALID, "kernels cuda event_record: NULL event");
    return na_cu_status(k, cudaEventRecord(ev->ev, NA_CU(k)->stream), "cudaEventRecord");
}

static na_status_t na_cu_event_query(na_kernels_t *k, na_kevent_t *ev)
{
    cudaError_t e;
    if (ev == NULL)
        return na_err(NA_ERR_INVALID, "kernels cuda event_query: NULL event");
    e = cudaEventQuery(ev->ev);
    if (e == cudaErrorNotReady)
        return NA_ERR_BUSY;
    return na_cu_status(k, e, "cudaEventQuery (an op before the event failed)");
}

static na_status_t na_cu_event_wait(na_kernels_t *k, na_kevent_t *ev)
{
    if (ev == NULL)
        return na_err(NA_ERR_INVALID, "kernels cuda event_wait: NULL event");
    return na_cu_status(k, cudaEventSynchronize(ev->ev),
                        "cudaEventSynchronize (an op before the event failed)");
}

static void na_cu_event_destroy(na_kernels_t *k, na_kevent_t *ev)
{
    (void)k;
    if (ev == NULL)
        return;
    cudaEventDestroy(ev->ev);
    free(ev);
}

/* ---- the table ---------------------------------------------------------- */

static void na_cu_destroy(na_kernels_t *k)
{
    na_cuda_t *c = NA_CU(k);
    int i;
    if (c != NULL) {
        cudaSetDevice(c->gpu);
        if (c->stream != NULL)
            cudaStreamSynchronize(c->stream);
        for (i = 0; i < c->n_placed; i++)
            cudaFree(c->placed[i].dev);
        free(c->placed);
        cudaFree(c->scratch);
        cudaFree(c->xh);
        if (c->ring != NULL)
            cudaFreeHost(c->ring);
        for (i = 0; i < 2; i++)
            if (c->stage_ev[i] != NULL)
                cudaEventDestroy(c->stage_ev[i]);
        if (c->stage != NULL)
            cudaFreeHost(c->stage);
        if (c->blas != NULL)
            cublasDestroy(c->blas);
        if (c->stream != NULL)
            cudaStreamDestroy(c->stream);
        free(c);
    }
    free(k);
}

static const na_kernel_ops_t na_cu_ops = {
    .name          = "cuda",
    .buf_alloc     = na_cu_buf_alloc,
    .buf_free      = na_cu_buf_free,
    .buf_resize    = na_cu_buf_resize,
    .upload        = na_cu_upload,
    .download      = na_cu_download,
    .copy          = na_cu_copy,
    .place         = na_cu_place,
    .unplace       = na_cu_unplace,
    .event_create  = na_cu_event_create,
    .event_record  = na_cu_event_record,
    .event_query   = na_cu_event_query,
    .event_wait    = na_cu_event_wait,
    .event_destroy = na_cu_event_destroy,
    .embed         = na_cu_embed_op,
    .add           = na_cu_add_op,
    .store         = na_cu_store_op,
    .matmul        = na_cu_matmul_op,
    .rmsnorm       = na_cu_rmsnorm_op,
    .rope          = na_cu_rope_op,
    .bias          = na_cu_bias_op,
    .swiglu        = na_cu_swiglu_op,
    .softmax       = na_cu_softmax_op,
    .attn_prefill  = na_cu_attn_prefill_op,
    .attn_decode   = na_cu_attn_decode_op,
    /* the storage node's host kernel on host pointers: the reference */
    .attn_partial  = na_ref_attn_partial,
    .destroy       = na_cu_destroy,
};

na_status_t na_kernels_cuda_create_on(int gpu, na_kernels_t **k_p)
{
    struct cudaDeviceProp prop;
    na_kernels_t *k;
    na_cuda_t *c;
    na_status_t st;
    const char *ak = getenv("NA_CUDA_ATTN_KERNEL");   /* cuda_attn.cu reads it */

    if (ak != NULL && *ak != '\0' && strcmp(ak, "tile") != 0 && strcmp(ak, "warp") != 0)
        return na_err(NA_ERR_INVALID, "kernels cuda: NA_CUDA_ATTN_KERNEL is \"%s\"; it takes "
                      "tile (the default) or warp", ak);
    ak = getenv("NA_CUDA_GEMV");                     /* cuda_kern.cu reads it */
    if (ak != NULL && *ak != '\0' && strcmp(ak, "u8") != 0 && strcmp(ak, "u4") != 0 &&
        strcmp(ak, "nb8") != 0)
        return na_err(NA_ERR_INVALID, "kernels cuda: NA_CUDA_GEMV is \"%s\"; it takes u4 (the "
                      "default), u8 or nb8", ak);
    if ((st = na_cuda_probe(gpu < 0 ? 0 : gpu, NULL)) != NA_OK)
        return st;
    k = calloc(1, sizeof(*k));
    c = calloc(1, sizeof(*c));
    if (k == NULL || c == NULL) {
        free(k);
        free(c);
        return na_err(NA_ERR_NOMEM, "kernels cuda: out of memory");
    }
    c->gpu = gpu < 0 ? 0 : gpu;
    k->ops = &na_cu_ops;
    k->n_threads = 1;
    k->priv = c;
    k->mem = NA_KMEM_DEVICE;
    if ((st = na_cu_enter(k)) != NA_OK ||
        (st = na_cu_status(k, cudaGetDeviceProperties(&prop, c->gpu),
                           "cudaGetDeviceProperties")) != NA_OK ||
        (st = na_cu_status(k, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
                           "cudaStreamCreateWithFlags")) != NA_OK ||
        (st = na_cu_ring_alloc(k, NA_CU_RING_INTS)) != NA_OK)
        goto fail;
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        st = na_err(NA_ERR_IO, "kernels cuda (gpu %d): cublasCreate/cublasSetStream failed",
                    c->gpu);
        goto fail;
    }
    snprintf(c->name, sizeof(c->name), "%s", prop.name);
    c->mem_total = prop.totalGlobalMem;
    c->n_sm = prop.multiProcessorCount;
    *k_p = k;
    return NA_OK;
fail:
    na_cu_destroy(k);
    return st;
}

na_status_t na_kernels_cuda_create(int n_threads, na_kernels_t **k_p)
{
    (void)n_threads;
    return na_kernels_cuda_create_on(0, k_p);
}

na_status_t na_kernels_cuda_info(na_kernels_t *k, const char **name_p, size_t *mem_p)
{
    if (k == NULL || k->ops != &na_cu_ops)
        return na_err(NA_ERR_INVALID, "kernels: not a cuda backend");
    *name_p = NA_CU(k)->name;
    *mem_p = NA_CU(k)->mem_total;
    return NA_OK;
}

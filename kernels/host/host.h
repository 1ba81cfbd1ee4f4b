/* kernels/host/host.h — what the host backends (ref, cpu) share: buffers in
 * host memory, events that are complete as soon as recorded (every op runs
 * before it returns), weight placement without a copy, and the table
 * entries that check buffer arguments and call the backend's raw-pointer
 * kernels (its na_khost_core_t). */
#ifndef NA_KERNELS_HOST_H
#define NA_KERNELS_HOST_H

#include "kernels/kernels.h"

/* The types of the kernels on plain pointers that take the backend (its
 * scratch, pool): each host backend declares its own with them. */
typedef void na_khost_matmul_fn(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w,
                                int batch);
typedef void na_khost_attn_prefill_fn(na_kernels_t *k, float *out, const float *q,
                                      const void *kcache, const void *vcache,
                                      na_dtype_t kv_dtype, int n_tok, int pos0, int n_heads,
                                      int n_kv_heads, int head_dim);
typedef void na_khost_attn_decode_fn(na_kernels_t *k, float *out, const float *q,
                                     const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                                     int ctx, int n_heads, int n_kv_heads, int head_dim);

/* A host backend's kernels on plain pointers (checked by the table entries). */
typedef struct {
    void (*embed)(float *x, const na_tensor_t *t, const int *tokens, int n);
    void (*add)(float *x, const float *y, size_t n);
    void (*store)(void *dst, na_dtype_t dtype, const float *src, size_t n);
    na_khost_matmul_fn *matmul;
    void (*rmsnorm)(float *out, const float *x, const float *weight, int n,
                    float eps, int batch);
    void (*rope)(float *vec, int n_heads, const int *pos, const na_rope_t *rope, int batch);
    void (*swiglu)(float *gate, const float *up, size_t n);
    void (*softmax)(float *x, int n, int batch);
    na_khost_attn_prefill_fn *attn_prefill;
    na_khost_attn_decode_fn *attn_decode;
} na_khost_core_t;

/* The first member of a host backend's k->priv. */
typedef struct {
    const na_khost_core_t *core;
    /* 1: NA_KMEM_DEVICE is emulated with host memory whose host pointer is
     * hidden (ref backend), so the device paths of callers run in tests. */
    int                    emulate_device;
    /* emulated device memory: bytes allowed (0: no limit) and in use; an
     * allocation beyond the limit fails with NA_ERR_NOMEM as cudaMalloc on
     * a full GPU ("refdev:N", N MiB) */
    size_t                 dev_limit, dev_used;
} na_khost_t;

na_status_t na_khost_buf_alloc(na_kernels_t *k, size_t size, na_kmem_t mem, na_kbuf_t **b_p);
void        na_khost_buf_free(na_kernels_t *k, na_kbuf_t *b);
na_status_t na_khost_buf_resize(na_kernels_t *k, na_kbuf_t *b, size_t size);
na_status_t na_khost_upload(na_kernels_t *k, const na_kbuf_t *dst, const void *src, size_t size);
na_status_t na_khost_download(na_kernels_t *k, void *dst, const na_kbuf_t *src, size_t size);
na_status_t na_khost_copy(na_kernels_t *k, const na_kbuf_t *dst, const na_kbuf_t *src,
                          size_t size);
na_status_t na_khost_place(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w);
void        na_khost_unplace(na_kernels_t *k, na_kweight_t *w);
na_status_t na_khost_event_create(na_kernels_t *k, na_kevent_t **ev_p);
na_status_t na_khost_event_record(na_kernels_t *k, na_kevent_t *ev);
na_status_t na_khost_event_done(na_kernels_t *k, na_kevent_t *ev);   /* query and wait */
void        na_khost_event_destroy(na_kernels_t *k, na_kevent_t *ev);
na_kop_embed_fn        na_khost_embed;
na_kop_add_fn          na_khost_add;
na_kop_store_fn        na_khost_store;
na_kop_matmul_fn       na_khost_matmul;
na_kop_rmsnorm_fn      na_khost_rmsnorm;
na_kop_rope_fn         na_khost_rope;
na_kop_bias_fn         na_khost_bias;
na_kop_swiglu_fn       na_khost_swiglu;
na_kop_softmax_fn      na_khost_softmax;
na_kop_attn_prefill_fn na_khost_attn_prefill;
na_kop_attn_decode_fn  na_khost_attn_decode;

/* The table entries every host backend shares, for its na_kernel_ops_t; each
 * names its own place / unplace (ref: na_khost_place / _unplace, the mmap
 * wrapped; cpu: kernels/cpu/cpu_pack.c, which reorders some weights). */
#define NA_KHOST_OPS                              \
    .buf_alloc     = na_khost_buf_alloc,          \
    .buf_free      = na_khost_buf_free,           \
    .buf_resize    = na_khost_buf_resize,         \
    .upload        = na_khost_upload,             \
    .download      = na_khost_download,           \
    .copy          = na_khost_copy,               \
    .event_create  = na_khost_event_create,       \
    .event_record  = na_khost_event_record,       \
    .event_query   = na_khost_event_done,         \
    .event_wait    = na_khost_event_done,         \
    .event_destroy = na_khost_event_destroy,      \
    .embed         = na_khost_embed,              \
    .add           = na_khost_add,                \
    .store         = na_khost_store,              \
    .matmul        = na_khost_matmul,             \
    .rmsnorm       = na_khost_rmsnorm,            \
    .rope          = na_khost_rope,               \
    .bias          = na_khost_bias,               \
    .swiglu        = na_khost_swiglu,             \
    .softmax       = na_khost_softmax,            \
    .attn_prefill  = na_khost_attn_prefill,       \
    .attn_decode   = na_khost_attn_decode

#endif /* NA_KERNELS_HOST_H */

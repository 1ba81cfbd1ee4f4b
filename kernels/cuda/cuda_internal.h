/* kernels/cuda/cuda_internal.h — the CUDA backend's private state, shared by
 * cuda_backend.c (memory, events, weights) and cuda_ops.c (the math). */
#ifndef NA_KERNELS_CUDA_INTERNAL_H
#define NA_KERNELS_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda.h"
#include "kernels/kernels.h"

/* One uploaded weight, shared by every place of the same host tensor. */
typedef struct {
    const void *src;        /* t->data */
    size_t      bytes;
    void       *dev;
    int         refs;
} na_cu_placed_t;

typedef struct {
    int            gpu;
    char           name[256];
    size_t         mem_total;
    int            n_sm;
    cudaStream_t   stream;
    cublasHandle_t blas;
    /* small host arrays of the ops (token ids, positions), copied into
     * mapped pinned memory the kernels read; reused from the start after a
     * stream sync when full */
    int           *ring;
    int           *ring_dev;
    size_t         ring_cap, ring_pos;     /* ints */
    /* device scratch: attention split partials, half activations of GEMM */
    void          *scratch;
    size_t         scratch_bytes;
    void          *xh;
    size_t         xh_bytes;
    na_cu_placed_t *placed;
    int            n_placed, cap_placed;
    /* weight uploads: two pinned staging halves, each free again once the
     * copy out of it (recorded by its event) completed */
    char          *stage;
    cudaEvent_t    stage_ev[2];
} na_cuda_t;

/* Bytes of each pinned staging half of place(). */
#define NA_CU_STAGE_BYTES ((size_t)8 << 20)

#define NA_CU(k) ((na_cuda_t *)(k)->priv)

/* NA_OK, or the error of `call` as na_err (NA_ERR_NOMEM for an allocation,
 * NA_ERR_IO otherwise) naming the call and the device. */
na_status_t na_cu_status(na_kernels_t *k, int err, const char *call);
/* Make the backend's GPU current on the calling thread. */
na_status_t na_cu_enter(na_kernels_t *k);
/* Device (or mapped pinned) address of b for an op over `need` bytes:
 * NA_ERR_INVALID for NULL, another backend's or pageable memory, too small. */
na_status_t na_cu_arg(na_kernels_t *k, const na_kbuf_t *b, size_t need, const char *op,
                      const char *what, void **p_p);
/* Copy n ints into the ring (8-byte aligned); *dev_p is their
 * device-readable address, valid for the ops enqueued next. */
na_status_t na_cu_params(na_kernels_t *k, const int *src, int n, const int **dev_p);
/* Grow a device scratch area (*p, *cap) to `bytes` (waits for the stream). */
na_status_t na_cu_scratch(na_kernels_t *k, void **p, size_t *cap, size_t bytes);

/* The math entries of the table (cuda_ops.c). */
na_kop_embed_fn        na_cu_embed_op;
na_kop_add_fn          na_cu_add_op;
na_kop_store_fn        na_cu_store_op;
na_kop_matmul_fn       na_cu_matmul_op;
na_kop_rmsnorm_fn      na_cu_rmsnorm_op;
na_kop_rope_fn         na_cu_rope_op;
na_kop_bias_fn         na_cu_bias_op;
na_kop_swiglu_fn       na_cu_swiglu_op;
na_kop_softmax_fn      na_cu_softmax_op;
na_kop_attn_prefill_fn na_cu_attn_prefill_op;
na_status_t na_cu_attn_decode_batch_op(na_kernels_t *k, const na_kcuda_attn_req_t *reqs, int n,
                                       na_dtype_t kv_dtype, int n_heads, int n_kv_heads,
                                       int head_dim);
na_kop_attn_decode_fn  na_cu_attn_decode_op;

#endif /* NA_KERNELS_CUDA_INTERNAL_H */

/* kernels/cuda/cuda.h — the CUDA backend of the kernels table (plain C; the
 * CUDA code is behind it). Built only when the CUDA toolkit is found
 * (NA_HAVE_CUDA); callers reach it through na_kernels_create("cuda") or
 * "cuda:N" (GPU N), the functions below are for the registry, the CLI and
 * the tests.
 *
 * Memory: NA_KMEM_DEVICE is cudaMalloc memory (no host pointer),
 * NA_KMEM_PINNED cudaHostAlloc memory mapped into the device (the ops accept
 * it too), NA_KMEM_HOST plain malloc memory (upload/download/copy only; the
 * ops refuse it, as they refuse na_kbuf_host wrappers). Every op is enqueued
 * on the backend's one stream; events are CUDA events on it. Weights are
 * uploaded once by place (a tensor placed twice, e.g. tied embeddings, is
 * shared). Matmul: f32 weights through cuBLAS SGEMM (no TF32); f16/bf16
 * weights through the GEMV kernel at batch <= 8 (f32 activations) and
 * cuBLAS GemmEx above (activations rounded to the weight's type, f32
 * accumulation); quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K) stay quantised on the device, repacked into aligned per-field
 * arrays, and go through the dequantise-in-register GEMV at every batch
 * (see docs/gpu.md). */
#ifndef NA_KERNELS_CUDA_H
#define NA_KERNELS_CUDA_H

#include "kernels/kernels.h"

/* The backend lives in a module, libna_cuda.so (kernels/CMakeLists.txt),
 * loaded on first use by kernels/cuda/cuda_load.c, which defines the names
 * below for the rest of the program: a process that never asks for cuda
 * never maps cudart, cuBLAS or NCCL (hundreds of MiB). Inside the module
 * (NA_CUDA_MODULE) the implementations carry the na_cudam_ names the loader
 * looks up. */
#ifdef NA_CUDA_MODULE
#define na_cuda_probe             na_cudam_probe
#define na_kernels_cuda_create    na_cudam_create
#define na_kernels_cuda_create_on na_cudam_create_on
#define na_kernels_cuda_argmax    na_cudam_argmax
#define na_kernels_cuda_info      na_cudam_info
#define na_kernels_cuda_attn_decode_batch na_cudam_attn_decode_batch
#endif

/* How many CUDA devices this process sees: NA_OK with *n >= 1, or
 * NA_ERR_UNSUPPORTED with the message "no CUDA device: <why>" (the runtime's
 * error for cudaGetDeviceCount: 35 insufficient driver, 100 no device, ...)
 * on a machine that shows no NVIDIA GPU (cuda_present.h). Where the driver's
 * GPU nodes exist, a runtime that sees none or a module that cannot be
 * loaded is NA_ERR_IO instead: a broken installation, never a skip. With
 * gpu >= 0, also NA_ERR_NOT_FOUND when GPU `gpu` does not exist. */
na_status_t na_cuda_probe(int gpu, int *n_p);

/* Backend on GPU 0 (n_threads is ignored), or on GPU `gpu`. Fails as
 * na_cuda_probe, or with the CUDA/cuBLAS call that failed. */
na_status_t na_kernels_cuda_create(int n_threads, na_kernels_t **k_p);
na_status_t na_kernels_cuda_create_on(int gpu, na_kernels_t **k_p);

/* A helper beyond the table: idx[b] = argmax of row b of x (batch rows of n
 * f32; the first of equal maxima), enqueued like the ops; idx is an int
 * buffer of this backend (device or pinned). For on-device greedy sampling. */
na_status_t na_kernels_cuda_argmax(na_kernels_t *k, const na_kbuf_t *idx, const na_kbuf_t *x,
                                   int n, int batch);

/* Decode attention of n requests of one shape in one launch (+ one merge)
 * instead of n: request i attends q (n_heads*head_dim f32) to the first ctx
 * rows of its kcache/vcache ([token][kv_head][head_dim] in kv_dtype) into
 * out, as attn_decode does each. UNVERIFIED: compiled, never run on a GPU
 * (test_cuda_ops checks it against kernels/ref on the first GPU run). */
typedef struct {
    const na_kbuf_t *out, *q, *kcache, *vcache;
    int              ctx;
} na_kcuda_attn_req_t;
na_status_t na_kernels_cuda_attn_decode_batch(na_kernels_t *k, const na_kcuda_attn_req_t *reqs,
                                              int n, na_dtype_t kv_dtype, int n_heads,
                                              int n_kv_heads, int head_dim);

/* The device's name and memory for summaries ("NVIDIA H100 80GB HBM3",
 * bytes); NA_ERR_INVALID when k is not a cuda backend. */
na_status_t na_kernels_cuda_info(na_kernels_t *k, const char **name_p, size_t *mem_p);

#endif /* NA_KERNELS_CUDA_H */

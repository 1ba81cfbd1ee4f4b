/* kernels/cuda/cuda_tp.h — NCCL tensor parallelism inside a compute node:
 * one process drives n GPUs, one thread per GPU (rank r uses a cuda backend
 * created on gpus[r], "cuda:N"), and the ranks sum their partial outputs
 * with ncclAllReduce on their backend's stream (after the row-parallel Wo
 * and W2 of a Megatron split; see docs/gpu.md). NCCL is loaded on demand
 * (dlopen of libnccl.so.2 by the first na_cuda_tp_create): the CUDA module
 * does not link it, and a machine without it refuses only tensor
 * parallelism. tp = 1 runs through NCCL as well (an all-reduce of one rank),
 * so the path is tested on a single GPU. */
#ifndef NA_KERNELS_CUDA_TP_H
#define NA_KERNELS_CUDA_TP_H

#include "kernels/kernels.h"

/* In the module libna_cuda.so: see kernels/cuda/cuda.h. */
#ifdef NA_CUDA_MODULE
#define na_cuda_tp_create    na_cudam_tp_create
#define na_cuda_tp_destroy   na_cudam_tp_destroy
#define na_cuda_tp_size      na_cudam_tp_size
#define na_cuda_tp_allreduce na_cudam_tp_allreduce
#define na_cuda_tp_nccl      na_cudam_tp_nccl
#endif

typedef struct na_cuda_tp na_cuda_tp_t;

/* Load NCCL if not yet loaded ($NA_NCCL_LIBRARY, else libnccl.so.2 by the
 * loader's search): NA_OK with its version (NCCL_VERSION_CODE, 22807 for
 * 2.28.7) in *version_p (may be NULL), or NA_ERR_UNSUPPORTED with "NCCL is
 * not available: <the loader's reason>". Needs no GPU. */
na_status_t na_cuda_tp_nccl(int *version_p);

/* Communicators for gpus[0..n) (ncclCommInitAll: one process, all ranks).
 * NA_ERR_INVALID for n < 1 or a GPU named twice (NCCL cannot put two ranks
 * on one GPU), "no CUDA device: ..." as na_cuda_probe, NA_ERR_UNSUPPORTED
 * as na_cuda_tp_nccl when NCCL cannot be loaded, NA_ERR_IO with the NCCL
 * error otherwise. */
na_status_t na_cuda_tp_create(const int *gpus, int n, na_cuda_tp_t **tp_p);
void        na_cuda_tp_destroy(na_cuda_tp_t *tp);
int         na_cuda_tp_size(const na_cuda_tp_t *tp);

/* Sum n floats of buf in place across the ranks, enqueued on k's stream;
 * called by rank r's thread with k created on gpus[r] (NA_ERR_INVALID
 * otherwise). Every rank must call it with the same n, in the same order. */
na_status_t na_cuda_tp_allreduce(na_cuda_tp_t *tp, int rank, na_kernels_t *k,
                                 const na_kbuf_t *buf, size_t n);

#endif /* NA_KERNELS_CUDA_TP_H */

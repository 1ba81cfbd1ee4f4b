/* kernels/cuda/cuda_tp.c — NCCL communicators and the all-reduce of the
 * tensor-parallel compute node (see cuda_tp.h). */
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_tp.h"

struct na_cuda_tp {
    int         n;
    int        *gpus;
    ncclComm_t *comms;
};

static na_status_t na_tp_nccl(ncclResult_t r, const char *call)
{
    if (r == ncclSuccess)
        return NA_OK;
    return na_err(NA_ERR_IO, "nccl: %s: %s (error %d)", call, ncclGetErrorString(r), (int)r);
}

na_status_t na_cuda_tp_create(const int *gpus, int n, na_cuda_tp_t **tp_p)
{
    na_cuda_tp_t *tp;
    na_status_t st;
    int i, j, n_dev = 0;

    if (gpus == NULL || n < 1)
        return na_err(NA_ERR_INVALID, "tensor parallel: no GPUs given");
    for (i = 0; i < n; i++)
        for (j = 0; j < i; j++)
            if (gpus[i] == gpus[j])
                return na_err(NA_ERR_INVALID, "tensor parallel: gpu %d named twice (NCCL puts "
                              "one rank on a GPU)", gpus[i]);
    for (i = 0; i < n; i++)
        if ((st = na_cuda_probe(gpus[i], &n_dev)) != NA_OK)
            return st;
    tp = calloc(1, sizeof(*tp));
    if (tp != NULL) {
        tp->gpus = calloc((size_t)n, sizeof(int));
        tp->comms = calloc((size_t)n, sizeof(ncclComm_t));
    }
    if (tp == NULL || tp->gpus == NULL || tp->comms == NULL) {
        na_cuda_tp_destroy(tp);
        return na_err(NA_ERR_NOMEM, "tensor parallel: out of memory");
    }
    for (i = 0; i < n; i++)
        tp->gpus[i] = gpus[i];
    if ((st = na_tp_nccl(ncclCommInitAll(tp->comms, n, gpus), "ncclCommInitAll")) != NA_OK) {
        free(tp->comms);
        tp->comms = NULL;
        na_cuda_tp_destroy(tp);
        return st;
    }
    tp->n = n;
    *tp_p = tp;
    return NA_OK;
}

void na_cuda_tp_destroy(na_cuda_tp_t *tp)
{
    int i;
    if (tp == NULL)
        return;
    for (i = 0; tp->comms != NULL && i < tp->n; i++)
        ncclCommDestroy(tp->comms[i]);
    free(tp->comms);
    free(tp->gpus);
    free(tp);
}

int na_cuda_tp_size(const na_cuda_tp_t *tp)
{
    return tp->n;
}

na_status_t na_cuda_tp_allreduce(na_cuda_tp_t *tp, int rank, na_kernels_t *k,
                                 const na_kbuf_t *buf, size_t n)
{
    void *p;
    na_status_t st;

    if (tp == NULL || rank < 0 || rank >= tp->n || k == NULL ||
        strcmp(k->ops->name, "cuda") != 0)
        return na_err(NA_ERR_INVALID, "tensor parallel all-reduce: bad rank or backend");
    if (NA_CU(k)->gpu != tp->gpus[rank])
        return na_err(NA_ERR_INVALID, "tensor parallel all-reduce: rank %d is gpu %d, the "
                      "backend is on gpu %d", rank, tp->gpus[rank], NA_CU(k)->gpu);
    if ((st = na_cu_arg(k, buf, n * sizeof(float), "allreduce", "buf", &p)) != NA_OK ||
        (st = na_cu_enter(k)) != NA_OK)
        return st;
    return na_tp_nccl(ncclAllReduce(p, p, n, ncclFloat32, ncclSum, tp->comms[rank],
                                    NA_CU(k)->stream), "ncclAllReduce");
}

/* kernels/cuda/cuda_tp.c — NCCL communicators and the all-reduce of the
 * tensor-parallel compute node (see cuda_tp.h).
 *
 * NCCL is not part of the CUDA toolkit, so it is loaded on demand: the
 * first na_cuda_tp_create dlopens $NA_NCCL_LIBRARY when set, else
 * libnccl.so.2 (the loader's search: LD_LIBRARY_PATH, the module's RUNPATH,
 * which names the toolkit's library folder, then the system's folders) and
 * looks up the five entry points used here. Where it is absent only tensor parallelism is refused,
 * with one line saying so; the module itself has no link-time dependency on
 * NCCL. The declarations below are NCCL 2's stable C ABI (nccl.h: ncclResult_t
 * an int enum with ncclSuccess = 0, ncclComm_t an opaque pointer,
 * ncclFloat32 = 7, ncclSum = 0), so no NCCL header is needed to build. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_tp.h"

#define NA_NCCL_LIB "libnccl.so.2"

typedef struct ncclComm *na_nccl_comm_t;
enum { NA_NCCL_SUCCESS = 0, NA_NCCL_FLOAT32 = 7, NA_NCCL_SUM = 0 };

static struct {
    pthread_once_t once;
    void          *lib;
    char           why[400];
    int            version;
    const char *(*get_error_string)(int r);
    int (*get_version)(int *v);
    int (*comm_init_all)(na_nccl_comm_t *comms, int n, const int *devs);
    int (*comm_destroy)(na_nccl_comm_t comm);
    int (*all_reduce)(const void *send, void *recv, size_t n, int dtype, int op,
                      na_nccl_comm_t comm, cudaStream_t stream);
} na_nccl = { PTHREAD_ONCE_INIT, NULL, "", 0, NULL, NULL, NULL, NULL, NULL };

static void na_nccl_open(void)
{
    const char *miss = NULL, *env = getenv("NA_NCCL_LIBRARY");
    const char *name = env != NULL && env[0] != '\0' ? env : NA_NCCL_LIB;
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(na_nccl.why, sizeof(na_nccl.why), "%s", e != NULL ? e : "not found");
        return;
    }
#define NA_NCCL_SYM(field, name)                                                   \
    do {                                                                           \
        *(void **)&na_nccl.field = dlsym(h, name);                                 \
        if (na_nccl.field == NULL && miss == NULL)                                 \
            miss = name;                                                           \
    } while (0)
    NA_NCCL_SYM(get_error_string, "ncclGetErrorString");
    NA_NCCL_SYM(get_version, "ncclGetVersion");
    NA_NCCL_SYM(comm_init_all, "ncclCommInitAll");
    NA_NCCL_SYM(comm_destroy, "ncclCommDestroy");
    NA_NCCL_SYM(all_reduce, "ncclAllReduce");
#undef NA_NCCL_SYM
    if (miss != NULL) {
        snprintf(na_nccl.why, sizeof(na_nccl.why), "%s has no symbol %s", name, miss);
        dlclose(h);
        return;
    }
    if (na_nccl.get_version(&na_nccl.version) != NA_NCCL_SUCCESS || na_nccl.version < 20000) {
        snprintf(na_nccl.why, sizeof(na_nccl.why), "%s is version %d, not NCCL 2", name,
                 na_nccl.version);
        dlclose(h);
        return;
    }
    na_nccl.lib = h;
}

/* NA_OK once NCCL is loaded; NA_ERR_UNSUPPORTED with the loader's reason. */
static na_status_t na_nccl_load(void)
{
    pthread_once(&na_nccl.once, na_nccl_open);
    if (na_nccl.lib != NULL)
        return NA_OK;
    return na_err(NA_ERR_UNSUPPORTED, "tensor parallel: NCCL is not available: %s; install "
                  "NCCL 2, put its folder on LD_LIBRARY_PATH or name the library in "
                  "NA_NCCL_LIBRARY", na_nccl.why);
}

na_status_t na_cuda_tp_nccl(int *version_p)
{
    na_status_t st = na_nccl_load();
    if (st == NA_OK && version_p != NULL)
        *version_p = na_nccl.version;
    return st;
}

struct na_cuda_tp {
    int             n;
    int            *gpus;
    na_nccl_comm_t *comms;
};

static na_status_t na_tp_nccl(int r, const char *call)
{
    if (r == NA_NCCL_SUCCESS)
        return NA_OK;
    return na_err(NA_ERR_IO, "nccl: %s: %s (error %d)", call, na_nccl.get_error_string(r), r);
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
    if ((st = na_nccl_load()) != NA_OK)
        return st;
    tp = calloc(1, sizeof(*tp));
    if (tp != NULL) {
        tp->gpus = calloc((size_t)n, sizeof(int));
        tp->comms = calloc((size_t)n, sizeof(na_nccl_comm_t));
    }
    if (tp == NULL || tp->gpus == NULL || tp->comms == NULL) {
        na_cuda_tp_destroy(tp);
        return na_err(NA_ERR_NOMEM, "tensor parallel: out of memory");
    }
    for (i = 0; i < n; i++)
        tp->gpus[i] = gpus[i];
    if ((st = na_tp_nccl(na_nccl.comm_init_all(tp->comms, n, gpus), "ncclCommInitAll")) != NA_OK) {
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
        na_nccl.comm_destroy(tp->comms[i]);
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
    return na_tp_nccl(na_nccl.all_reduce(p, p, n, NA_NCCL_FLOAT32, NA_NCCL_SUM, tp->comms[rank],
                                         NA_CU(k)->stream), "ncclAllReduce");
}

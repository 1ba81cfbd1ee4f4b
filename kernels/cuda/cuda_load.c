/* kernels/cuda/cuda_load.c — the CUDA backend's entry points for the rest of
 * the program (kernels/cuda/cuda.h, cuda_tp.h): each loads the module
 * libna_cuda.so once (dlopen) and calls its na_cudam_ implementation. The
 * module is looked for at $NA_CUDA_MODULE, beside the executable, in
 * ../kernels/ from it (the build tree: build/cli/nearattn, build/tests/...),
 * in the directory it was built in, then by the loader's own search
 * (LD_LIBRARY_PATH). A module that cannot be loaded reads as "no CUDA
 * device: ..." (NA_ERR_UNSUPPORTED) only where the machine shows no NVIDIA
 * GPU (cuda_present.h); where it does, the failure is an error
 * (NA_ERR_IO, "... cannot be loaded on a machine with an NVIDIA GPU"), so a
 * GPU machine with a broken installation never looks like one without a
 * GPU (the tests skip on the first, fail on the second). */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_present.h"
#include "kernels/cuda/cuda_tp.h"

#define NA_CUDA_MODULE_NAME "libna_cuda.so"

static pthread_once_t na_cuda_once = PTHREAD_ONCE_INIT;
static void          *na_cuda_mod;
static char           na_cuda_why[512];

static void *na_cuda_try(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL && na_cuda_why[0] == '\0')
        snprintf(na_cuda_why, sizeof(na_cuda_why), "%s", dlerror());
    return h;
}

static void na_cuda_open(void)
{
    const char *env = getenv("NA_CUDA_MODULE");
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n;

    if (env != NULL && env[0] != '\0') {
        na_cuda_mod = na_cuda_try(env);
        return;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        char *slash;
        exe[n] = '\0';
        if ((slash = strrchr(exe, '/')) != NULL) {
            *slash = '\0';
            snprintf(path, sizeof(path), "%s/" NA_CUDA_MODULE_NAME, exe);
            if (access(path, R_OK) == 0 && (na_cuda_mod = na_cuda_try(path)) != NULL)
                return;
            snprintf(path, sizeof(path), "%s/../kernels/" NA_CUDA_MODULE_NAME, exe);
            if (access(path, R_OK) == 0 && (na_cuda_mod = na_cuda_try(path)) != NULL)
                return;
        }
    }
#ifdef NA_CUDA_MODULE_DIR
    snprintf(path, sizeof(path), "%s/" NA_CUDA_MODULE_NAME, NA_CUDA_MODULE_DIR);
    if (access(path, R_OK) == 0 && (na_cuda_mod = na_cuda_try(path)) != NULL)
        return;
#endif
    na_cuda_mod = na_cuda_try(NA_CUDA_MODULE_NAME);
}

/* The module's symbol `name` into *f; NA_ERR_UNSUPPORTED with the reason. */
static na_status_t na_cuda_sym(const char *name, void **f)
{
    pthread_once(&na_cuda_once, na_cuda_open);
    *f = NULL;
    if (na_cuda_mod == NULL) {
        char gpu[300];
        const char *why = na_cuda_why[0] ? na_cuda_why : "not found";
        if (na_cuda_gpu_present(gpu, sizeof(gpu)))
            return na_err(NA_ERR_IO, "the CUDA backend module " NA_CUDA_MODULE_NAME " cannot be "
                          "loaded on a machine with an NVIDIA GPU (%s): %s", gpu, why);
        return na_err(NA_ERR_UNSUPPORTED, "no CUDA device: cannot load the CUDA backend module "
                      NA_CUDA_MODULE_NAME " (%s)", why);
    }
    *f = dlsym(na_cuda_mod, name);
    if (*f == NULL)
        return na_err(NA_ERR_UNSUPPORTED, "CUDA backend module: no symbol %s (a module of "
                      "another build?)", name);
    return NA_OK;
}

/* One forwarding entry: name(params) -> the module's sym(args). */
#define NA_CUDA_FWD(name, sym, params, args)                                  \
    na_status_t name params                                                   \
    {                                                                         \
        na_status_t (*f) params;                                              \
        na_status_t st = na_cuda_sym(sym, (void **)&f);                       \
        return st == NA_OK ? f args : st;                                     \
    }

NA_CUDA_FWD(na_cuda_probe, "na_cudam_probe", (int gpu, int *n_p), (gpu, n_p))
NA_CUDA_FWD(na_kernels_cuda_create, "na_cudam_create", (int n_threads, na_kernels_t **k_p),
            (n_threads, k_p))
NA_CUDA_FWD(na_kernels_cuda_create_on, "na_cudam_create_on", (int gpu, na_kernels_t **k_p),
            (gpu, k_p))
NA_CUDA_FWD(na_kernels_cuda_argmax, "na_cudam_argmax",
            (na_kernels_t *k, const na_kbuf_t *idx, const na_kbuf_t *x, int n, int batch),
            (k, idx, x, n, batch))
NA_CUDA_FWD(na_kernels_cuda_attn_decode_batch, "na_cudam_attn_decode_batch",
            (na_kernels_t *k, const na_kcuda_attn_req_t *reqs, int n, na_dtype_t kv_dtype,
             int n_heads, int n_kv_heads, int head_dim),
            (k, reqs, n, kv_dtype, n_heads, n_kv_heads, head_dim))
NA_CUDA_FWD(na_kernels_cuda_info, "na_cudam_info",
            (na_kernels_t *k, const char **name_p, size_t *mem_p), (k, name_p, mem_p))

NA_CUDA_FWD(na_cuda_tp_nccl, "na_cudam_tp_nccl", (int *version_p), (version_p))
NA_CUDA_FWD(na_cuda_tp_create, "na_cudam_tp_create", (const int *gpus, int n, na_cuda_tp_t **tp_p),
            (gpus, n, tp_p))
NA_CUDA_FWD(na_cuda_tp_allreduce, "na_cudam_tp_allreduce",
            (na_cuda_tp_t *tp, int rank, na_kernels_t *k, const na_kbuf_t *buf, size_t n),
            (tp, rank, k, buf, n))

void na_cuda_tp_destroy(na_cuda_tp_t *tp)
{
    void (*f)(na_cuda_tp_t *);
    if (tp != NULL && na_cuda_sym("na_cudam_tp_destroy", (void **)&f) == NA_OK)
        f(tp);
}

int na_cuda_tp_size(const na_cuda_tp_t *tp)
{
    int (*f)(const na_cuda_tp_t *);
    return na_cuda_sym("na_cudam_tp_size", (void **)&f) == NA_OK ? f(tp) : 0;
}

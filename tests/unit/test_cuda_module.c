/* tests/unit/test_cuda_module.c — how the CUDA backend module and NCCL are
 * found, and what a failure to find them reads as. Runs on any machine of a
 * CUDA build, with or without a GPU (label unit):
 *
 *   test_cuda_module probe    na_cuda_probe agrees with the machine: NA_OK
 *                             where an NVIDIA GPU shows (cuda_present.h),
 *                             else NA_ERR_UNSUPPORTED "no CUDA device: ...";
 *                             NCCL loads on demand where the toolkit's
 *                             library folder holds libnccl.so.2 (found by the
 *                             module's RUNPATH, no LD_LIBRARY_PATH needed).
 *   test_cuda_module nonccl   NA_NCCL_LIBRARY names a missing file: NCCL is
 *                             refused in one line naming it, the rest of the
 *                             backend is unaffected.
 *   test_cuda_module nomodule NA_CUDA_MODULE names a missing file: "no CUDA
 *                             device" (NA_ERR_UNSUPPORTED, a skip for the
 *                             tests) only where no GPU shows; on a GPU
 *                             machine NA_ERR_IO (a failure).
 * NA_CUDA_LIBDIR (the toolkit's library folder) comes from CMake. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_present.h"
#include "kernels/cuda/cuda_tp.h"
#include "tests/testutil.h"

static int has(const char *s, const char *sub)
{
    return strstr(s, sub) != NULL;
}

static void probe(void)
{
    char node[300] = "";
    int gpu = na_cuda_gpu_present(node, sizeof(node)), version = 0;
    na_status_t st = na_cuda_probe(0, NULL);

    fprintf(stderr, "GPU node: %s; probe: %s\n", gpu ? node : "none", st == NA_OK ? "ok"
                                                                               : na_errmsg());
    if (gpu)
        NA_CHECK_MSG(st == NA_OK, "a GPU shows (%s) but: %s", node, na_errmsg());
    else
        NA_CHECK_MSG(st == NA_ERR_UNSUPPORTED && has(na_errmsg(), "no CUDA device: "),
                     "no GPU here, probe gave %d: %s", (int)st, na_errmsg());
    st = na_cuda_tp_nccl(&version);
    fprintf(stderr, "NCCL: %s (version %d)\n", st == NA_OK ? "loaded" : na_errmsg(), version);
    if (access(NA_CUDA_LIBDIR "/libnccl.so.2", R_OK) == 0)
        NA_CHECK_MSG(st == NA_OK && version >= 20000, "the toolkit has " NA_CUDA_LIBDIR
                     "/libnccl.so.2 but: %s", na_errmsg());
    else
        NA_CHECK(st == NA_OK || (st == NA_ERR_UNSUPPORTED &&
                                 has(na_errmsg(), "NCCL is not available")));
}

static void nonccl(void)
{
    int gpus[1] = { 0 };
    na_cuda_tp_t *tp = NULL;
    na_status_t st;

    setenv("NA_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    st = na_cuda_tp_nccl(NULL);
    NA_CHECK_MSG(st == NA_ERR_UNSUPPORTED && has(na_errmsg(), "NCCL is not available") &&
                 has(na_errmsg(), "/nonexistent/libnccl.so.2"), "%d: %s", (int)st, na_errmsg());
    /* tensor parallelism is refused (no device here: the probe first) */
    st = na_cuda_tp_create(gpus, 1, &tp);
    NA_CHECK_MSG(st == NA_ERR_UNSUPPORTED && tp == NULL, "%d: %s", (int)st, na_errmsg());
    /* the module itself still loads: the probe answers as without the variable */
    st = na_cuda_probe(0, NULL);
    NA_CHECK_MSG(st == NA_OK || has(na_errmsg(), "cudaGetDeviceCount"), "%s", na_errmsg());
}

static void nomodule(void)
{
    na_status_t st;
    setenv("NA_CUDA_MODULE", "/nonexistent/libna_cuda.so", 1);
    st = na_cuda_probe(0, NULL);
    if (na_cuda_gpu_present(NULL, 0))
        NA_CHECK_MSG(st == NA_ERR_IO && has(na_errmsg(), "machine with an NVIDIA GPU"), "%d: %s",
                     (int)st, na_errmsg());
    else
        NA_CHECK_MSG(st == NA_ERR_UNSUPPORTED && has(na_errmsg(), "no CUDA device: cannot load"),
                     "%d: %s", (int)st, na_errmsg());
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "probe";
    if (strcmp(mode, "nonccl") == 0)
        nonccl();
    else if (strcmp(mode, "nomodule") == 0)
        nomodule();
    else
        probe();
    return na_test_finish();
}

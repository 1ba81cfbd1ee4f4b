/* cli/bench_kernels_cuda.h — the CUDA rows of `nearattn bench kernels`
 * (cli/bench_kernels_cuda.c). */
#ifndef NA_CLI_BENCH_KERNELS_CUDA_H
#define NA_CLI_BENCH_KERNELS_CUDA_H

#include "common/bench.h"
#include "common/status.h"

/* Measure the cuda backend's rows into b (part: all, attn, matmul or
 * model; dtypes: the matmul rows' weight types, a bit per na_dtype_t, F32
 * the reference always).
 * NA_ERR_UNSUPPORTED "no CUDA device: ..." without a device (nothing is
 * measured), or when the backend is not built. */
na_status_t na_cli_bench_kernels_cuda(na_bench_t *b, int quick, const char *part,
                                      unsigned dtypes);

#endif /* NA_CLI_BENCH_KERNELS_CUDA_H */

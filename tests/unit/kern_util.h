/* tests/unit/kern_util.h — what the kernels tests (test_kernels, test_quant,
 * test_attn_exact, test_engine) share: the kernel sets they compare (the
 * reference, the cpu backend with 1 and 2 threads), random weights of every
 * dtype, a matmul on host arrays, and the check of the cpu backend's matmul
 * against a reference result. */
#ifndef NA_TEST_KERN_UTIL_H
#define NA_TEST_KERN_UTIL_H

#include "kernels/kernels.h"
#include "tests/testutil.h"

/* The cpu backend with 1 and 2 threads in cpu[0], cpu[1] and, when ref is
 * not NULL, the reference kernels in *ref; each creation is a check. 0, or
 * -1 when one of them is missing. */
int  na_test_kernels_open(na_kernels_t **ref, na_kernels_t *cpu[2]);
/* Destroy what na_test_kernels_open made (ref may be NULL). */
void na_test_kernels_close(na_kernels_t *ref, na_kernels_t *cpu[2]);

/* A rows x cols weight of dtype dt (cols a multiple of its block) in w,
 * random but finite: random bytes from rng, then each block's f16 scales
 * drawn in a sane range (a random f16 may be NaN or huge) and f32 / f16 /
 * bf16 elements from [-0.5, 0.5). Returns w->data (na_test_xmalloc: free
 * it). */
void *na_test_rand_weight(na_rng_t *rng, na_dtype_t dt, int rows, int cols, na_tensor_t *w);

/* y = w·x for batch rows of x, host arrays: w placed on k, the matmul, w
 * unplaced. The first failing status. */
na_status_t na_test_mm(na_kernels_t *k, float *y, float *x, const na_tensor_t *w, int batch);

/* cpu[0] and cpu[1] each compute w·x again (batch rows of x) into a buffer
 * of NaN: one check each that every element is within rel·Σ_j|w_rj·x_bj| +
 * 1e-6 of yr, the reference result (a NaN, an unwritten element, fails),
 * naming the weight dtype, shape, batch, threads and the worst ratio. */
void na_test_check_mm(na_kernels_t *const cpu[2], const na_tensor_t *w, float *x, int batch,
                      const float *yr, double rel);

#endif /* NA_TEST_KERN_UTIL_H */

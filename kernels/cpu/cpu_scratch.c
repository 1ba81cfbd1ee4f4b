/* kernels/cpu/cpu_scratch.c — the cpu backend's scratch buffer (cpu.h,
 * na_cpu_scratch): the one resource of the backend state its kernels
 * (cpu_matmul.c, cpu_gemm_*.c, cpu_quant.c, cpu_attn.c) call for, in a file
 * below them, so that no kernel calls back into cpu_backend.c, which calls
 * the kernels. Freed with the state (cpu_backend.c's destroy). */
#include <stdlib.h>

#include "kernels/cpu/cpu.h"

/* See cpu.h: grows (never shrinks) the backend's 64-byte aligned scratch. */
float *na_cpu_scratch(na_kernels_t *k, size_t n)
{
    na_cpu_state_t *s = k->priv;
    if (s->scratch_n < n) {
        float *p = NULL;
        if (posix_memalign((void **)&p, 64, n * sizeof(float)) != 0)
            return NULL;
        free(s->scratch);
        s->scratch = p;
        s->scratch_n = n;
    }
    return s->scratch;
}

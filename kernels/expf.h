/* kernels/expf.h — na_expf: the exp of every softmax and SiLU weight in the
 * kernels, one algorithm whose bits every backend's copy reproduces (this
 * plain C one for the reference kernels and the shared partial merge, the
 * 8-lane na_cpu_exp in kernels/cpu/cpu.h for the cpu backend, its AVX2 and
 * AVX-512 builds alike).
 *
 * The algorithm is ggml's ggml_v_expf as llama.cpp's CPU backend builds it
 * for AVX-512 (ggml/src/ggml-cpu/ggml-cpu.c, "adapted from arm limited
 * optimized routine"; MIT licence), written again here so that nearattn's
 * softmax and SiLU give llama.cpp's bits on the same inputs (issue 20:
 * greedy agreement; docs/benchmarks.md, "Same tokens as llama.cpp"):
 * n = round(x log2 e) by adding and subtracting 1.5 * 2^23, b = x - n ln 2
 * in two fused steps (ln 2 split in a high and a low part), a degree-5
 * polynomial j ~ e^b evaluated with fused multiply-adds in a fixed tree,
 * then j * 2^n rounded once (as AVX-512's scalef). Maximum error ~1.5 ulp.
 * |n| > 192 gives 0 (n < 0: x = -inf included) or inf. ggml's AVX2 copy
 * adds the polynomial's constant 1 in another place and differs from its
 * AVX-512 copy (and from this) in the last bit of some results. */
#ifndef NA_KERNELS_EXPF_H
#define NA_KERNELS_EXPF_H

#include <math.h>

static inline float na_expf(float x)
{
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                              fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                         u, fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192.0f)
        return n > 0.0f ? INFINITY : 0.0f;
    return ldexpf(j, (int)n);           /* NaN x: j is NaN */
}

#endif

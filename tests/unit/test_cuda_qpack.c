/* tests/unit/test_cuda_qpack.c — the CUDA backend's quantised-weight
 * arithmetic on the host, no GPU needed: the repack of place()
 * (kernels/cuda/cuda_qpack.c) and the per-block code unpacking, integer
 * sums and f32 terms the GEMV and embed kernels run (cuda_qcodes.h, compiled
 * here as C), for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K against
 * kernels/ref:
 *   - the repacked size is never below GGML's, and its arrays 16-byte aligned;
 *   - a field packed in two ranges of blocks (as place() streams it) gives
 *     the bytes of the whole repack;
 *   - every element dequantised from the repacked blocks equals
 *     na_ref_dequant_row's, bit for bit;
 *   - a row's dot product with x, summed block after block as the reference
 *     does (the K-quants' super-block sums joined from their 8 lane parts, as
 *     the warp's shuffles join them), equals na_ref_matmul's within
 *     4e-7 * Σ|block terms| (Q4_1/Q5_1 with ggml's Q8_1 s of each input
 *     block, as the reference and the GEMV's quantiser make it; the
 *     reference sums the min terms apart, so the d and min parts of a block
 *     count apart, as they may cancel); the integer sums are exact; the f32 terms may
 *     round differently where the C compiler fuses a multiply-add in one
 *     build and not the other: Q8_0's reference does),
 *     on rows of several blocks with x of mixed scales, a zero block and (for
 *     the NaN path) a block holding an Inf.
 * What this cannot cover: the device's loads, shuffles and launch shapes
 * (tests/unit/test_cuda.c, on a GPU). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/quantize.h"
#include "kernels/cuda/cuda_qcodes.h"
#include "kernels/ref/ref.h"
#include "tests/testutil.h"

static na_rng_t rng;

static void *xalloc16(size_t n)
{
    void *p = aligned_alloc(16, (n + 15) & ~(size_t)15);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* Row r's dot product with x (cols) from the repacked blocks, block by block. */
static float qc_dot(int dt, const na_cu_qw_t *w, int r, const float *x, int cols, double *mag)
{
    int k = na_dtype_block((na_dtype_t)dt) == NA_QK_K;
    int xblk = k ? NA_QK_K : NA_Q8_0_BLOCK, nblk = cols / xblk, b, s;
    float sum = 0.0f;
    int8_t q[NA_QK_K];
    int16_t bsums[NA_QK_K / 16];

    for (b = 0; b < nblk; b++) {
        size_t gb = (size_t)r * (size_t)nblk + (size_t)b;
        float sx = 0.0f;
        float dx = k ? na_ref_quantize_q8k(x + (size_t)b * xblk, q, bsums)
                     : na_ref_quantize_q8_1(x + (size_t)b * xblk, q, bsums, &sx);
        int wq[8], xw[8];
        if (!k) {
            memcpy(xw, q, 32);
            na_qc_codes32(dt, w, gb, wq);
            {
                float dw = na_f16_to_f32(w->d[gb]), mw = w->m ? na_f16_to_f32(w->m[gb]) : 0.0f;
                float term = na_qc_term32(dt, dw, mw, wq, xw, dx, sx);
                sum += term;
                /* Q4_1/Q5_1: the term is d-part + m-part, which may cancel:
                 * the roundings scale with the parts, |d-part| <= |term| +
                 * |m-part| */
                *mag += fabs((double)term) + 2.0 * fabs((double)mw * sx);
            }
            continue;
        }
        {
            int sumi = 0, summ = 0;
            for (s = 0; s < 8; s++) {       /* the 8 lanes of a super-block */
                int pi, pm;
                memcpy(xw, q + 32 * s, 32);
                na_qc_codes256(dt, w, gb, s, wq);
                na_qc_part256(dt, w, gb, s, wq, xw, &pi, &pm);
                sumi += pi;
                summ += pm;
            }
            sum += na_qc_term256(dt, w, gb, sumi, summ, dx);
            *mag += fabs((double)na_qc_term256(dt, w, gb, sumi, summ, dx));
        }
    }
    return sum;
}

static void check_type(na_dtype_t dt, int rows, int nblocks)
{
    int blk = na_dtype_block(dt), cols = blk * nblocks, r, j, bad = 0;
    size_t n = (size_t)rows * (size_t)cols, nb = n / (size_t)blk;
    size_t bytes = na_cu_qpack_bytes((int)dt, nb);
    float *f = malloc(n * sizeof(float)), *x = malloc((size_t)cols * sizeof(float));
    float *ref = malloc(n * sizeof(float)), *yr = malloc((size_t)rows * sizeof(float));
    void *g = malloc(na_dtype_bytes(dt, n)), *p = xalloc16(bytes);
    na_tensor_t t = { dt, rows, cols, g, NA_LAYOUT_ROWS };
    na_cu_qw_t w;

    NA_CHECK(f != NULL && x != NULL && ref != NULL && yr != NULL && g != NULL);
    NA_CHECK_MSG(bytes >= na_dtype_bytes(dt, n), "%s: repacked %zu < %zu bytes",
                 na_dtype_name(dt), bytes, na_dtype_bytes(dt, n));
    na_rng_fill(&rng, f, n, -1.0f, 1.0f);
    for (j = 0; j < cols; j++)                 /* rows of mixed magnitude */
        f[j] *= 1e-3f;
    NA_CHECK(na_quantize(dt, f, n, g) == na_dtype_bytes(dt, n));
    na_cu_qpack((int)dt, g, nb, p);
    na_cu_qpack_view((int)dt, p, nb, &w);
    NA_CHECK(((uintptr_t)w.qs | (uintptr_t)w.qh | (uintptr_t)w.sc | (uintptr_t)w.d |
              (uintptr_t)w.m) % 16 == 0);

    /* place() streams the layout a field and a range of blocks at a time:
     * two ranges of each field give the bytes of the whole repack */
    for (j = 0; j < 5; j++) {
        size_t off, per = na_cu_qpack_field((int)dt, j, nb, &off), h = nb / 2;
        unsigned char *c;
        if (per == 0)
            continue;
        c = malloc(per * nb);
        NA_CHECK(c != NULL && off + per * nb <= bytes);
        na_cu_qpack_blocks((int)dt, j, g, h, nb - h, c + h * per);
        na_cu_qpack_blocks((int)dt, j, g, 0, h, c);
        NA_CHECK_MSG(memcmp(c, (unsigned char *)p + off, per * nb) == 0,
                     "%s field %d: ranges differ from the whole repack", na_dtype_name(dt), j);
        free(c);
    }

    /* embed: every element, bit for bit */
    for (r = 0; r < rows; r++)
        na_ref_dequant_row(dt, (const uint8_t *)g + (size_t)r * na_dtype_bytes(dt, cols),
                           ref + (size_t)r * cols, cols);
    for (r = 0; r < rows && !bad; r++)
        for (j = 0; j < cols && !bad; j++) {
            size_t idx = (size_t)r * cols + (size_t)j;
            float v = na_qc_deq((int)dt, &w, idx / (size_t)blk, (int)(idx % (size_t)blk));
            if (memcmp(&v, &ref[idx], sizeof(v)) != 0) {
                NA_CHECK_MSG(0, "%s dequant [%d][%d] = %.9g, ref %.9g", na_dtype_name(dt), r,
                             j, (double)v, (double)ref[idx]);
                bad = 1;
            }
        }

    /* the GEMV's block arithmetic: x of several scales, a zero block */
    for (int pass = 0; pass < 2; pass++) {
        na_rng_fill(&rng, x, (size_t)cols, -1.0f, 1.0f);
        for (j = 0; j < cols; j++)
            x[j] *= (j / 32) % 3 == 1 ? 1e4f : (j / 32) % 3 == 2 ? 1e-4f : 1.0f;
        for (j = 0; j < 32 && cols > 64; j++)
            x[32 + j] = 0.0f;
        if (pass == 1)
            x[cols - 1] = INFINITY;            /* its block: d = NaN, a NaN row sum */
        na_ref_matmul(NULL, yr, x, &t, 1);
        for (r = 0; r < rows; r++) {
            double mag = 0.0;
            float y = qc_dot((int)dt, &w, r, x, cols, &mag);
            NA_CHECK_MSG(fabs((double)y - yr[r]) <= 4e-7 * mag || (isnan(y) && isnan(yr[r])),
                         "%s %dx%d row %d pass %d: %.9g, ref %.9g", na_dtype_name(dt), rows,
                         cols, r, pass, (double)y, (double)yr[r]);
        }
    }
    free(f);
    free(x);
    free(ref);
    free(yr);
    free(g);
    free(p);
}

int main(void)
{
    int d;
    na_rng_seed(&rng, 20261127);
    NA_CHECK(na_cu_qpack_bytes(NA_DTYPE_F16, 4) == 0);
    for (d = NA_DTYPE_Q8_0; d < NA_DTYPE_COUNT; d++) {
        check_type((na_dtype_t)d, 3, 1);
        check_type((na_dtype_t)d, 5, 7);
        check_type((na_dtype_t)d, 2, 41);
    }
    return na_test_finish();
}

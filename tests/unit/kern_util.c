/* tests/unit/kern_util.c — see kern_util.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/ref/ref.h"
#include "tests/testutil.h"
#include "tests/unit/kern_util.h"

int na_test_kernels_open(na_kernels_t **ref, na_kernels_t *cpu[2])
{
    if (ref != NULL)
        NA_CHECK_OK(na_kernels_create("ref", 1, ref));
    NA_CHECK_OK(na_kernels_create("cpu", 1, &cpu[0]));
    NA_CHECK_OK(na_kernels_create("cpu", 2, &cpu[1]));
    return (ref != NULL && *ref == NULL) || cpu[0] == NULL || cpu[1] == NULL ? -1 : 0;
}

void na_test_kernels_close(na_kernels_t *ref, na_kernels_t *cpu[2])
{
    na_kernels_destroy(cpu[1]);
    na_kernels_destroy(cpu[0]);
    na_kernels_destroy(ref);
}

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = na_f32_to_f16(f);
    memcpy(p, &h, 2);
}

void *na_test_rand_weight(na_rng_t *rng, na_dtype_t dt, int rows, int cols, na_tensor_t *w)
{
    size_t nblk = (size_t)rows * (size_t)(cols / na_dtype_block(dt)), bb = na_dtype_block_bytes(dt);
    uint8_t *p = na_test_xmalloc(nblk * bb), *b;
    size_t i;

    for (i = 0; i < nblk * bb; i++)
        p[i] = (uint8_t)na_rng_u64(rng);
    for (i = 0, b = p; i < nblk; i++, b += bb) {
        switch (dt) {
        case NA_DTYPE_F32: {
            float f = na_rng_uniform(rng) - 0.5f;
            memcpy(b, &f, 4);
            break;
        }
        case NA_DTYPE_F16: put_f16(b, na_rng_uniform(rng) - 0.5f); break;
        case NA_DTYPE_BF16: {
            uint16_t h = na_f32_to_bf16(na_rng_uniform(rng) - 0.5f);
            memcpy(b, &h, 2);
            break;
        }
        case NA_DTYPE_Q4_0: case NA_DTYPE_Q5_0:
            put_f16(b, 0.001f + 0.02f * na_rng_uniform(rng));
            break;
        case NA_DTYPE_Q4_1: case NA_DTYPE_Q5_1:
            put_f16(b, 0.001f + 0.02f * na_rng_uniform(rng));
            put_f16(b + 2, -0.2f * na_rng_uniform(rng));
            break;
        case NA_DTYPE_Q4_K: case NA_DTYPE_Q5_K:
            put_f16(b, 0.0005f * na_rng_uniform(rng));
            put_f16(b + 2, 0.0005f * na_rng_uniform(rng));
            break;
        case NA_DTYPE_Q6_K:
            put_f16(b + 208, 0.0002f * na_rng_uniform(rng));
            break;
        case NA_DTYPE_Q8_0:
            put_f16(b, 0.0002f + 0.002f * na_rng_uniform(rng));
            break;
        default:
            break;
        }
    }
    w->dtype = dt;
    w->rows = rows;
    w->cols = cols;
    w->data = p;
    w->layout = NA_LAYOUT_ROWS;
    return p;
}

na_status_t na_test_mm(na_kernels_t *k, float *y, float *x, const na_tensor_t *w, int batch)
{
    na_kbuf_t yb = na_kbuf_host(y, sizeof(float) * (size_t)batch * w->rows);
    na_kbuf_t xb = na_kbuf_host(x, sizeof(float) * (size_t)batch * w->cols);
    na_kweight_t pw;
    na_status_t st = k->ops->place(k, w, &pw);

    if (st != NA_OK)
        return st;
    st = k->ops->matmul(k, &yb, &xb, &pw, batch);
    k->ops->unplace(k, &pw);
    return st;
}

/* mag[b * rows + r] = Σ_j |w_rj·x_bj|, the weights dequantised by the
 * reference. */
static double *mm_magnitudes(const na_tensor_t *w, const float *x, int batch)
{
    const int rows = w->rows, cols = w->cols;
    const size_t row_bytes = na_dtype_bytes(w->dtype, (size_t)cols);
    float *wf = na_test_xmalloc(sizeof(float) * (size_t)cols);
    double *mag = na_test_xmalloc(sizeof(double) * (size_t)batch * rows);
    int b, r, j;

    for (r = 0; r < rows; r++) {
        na_ref_dequant_row(w->dtype, (const uint8_t *)w->data + (size_t)r * row_bytes, wf, cols);
        for (b = 0; b < batch; b++) {
            double m = 0.0;
            for (j = 0; j < cols; j++)
                m += fabs((double)wf[j] * x[(size_t)b * cols + j]);
            mag[(size_t)b * rows + r] = m;
        }
    }
    free(wf);
    return mag;
}

void na_test_check_mm(na_kernels_t *const cpu[2], const na_tensor_t *w, float *x, int batch,
                      const float *yr, double rel)
{
    const size_t n = (size_t)batch * w->rows;
    double *mag = mm_magnitudes(w, x, batch);
    float *yc = na_test_xmalloc(sizeof(float) * n);
    int t;
    size_t i;

    for (t = 0; t < 2; t++) {
        double worst = 0.0;
        memset(yc, 0xff, sizeof(float) * n);           /* NaN: catch unwritten */
        NA_CHECK_OK(na_test_mm(cpu[t], yc, x, w, batch));
        for (i = 0; i < n; i++) {
            double err = fabs((double)yc[i] - yr[i]) / (rel * mag[i] + 1e-6);
            if (!(err <= worst))
                worst = isnan(err) ? INFINITY : err;
        }
        NA_CHECK_MSG(worst <= 1.0, "matmul %s rows %d cols %d batch %d threads %d: ratio %g",
                     na_dtype_name(w->dtype), w->rows, w->cols, batch, t + 1, worst);
    }
    free(yc);
    free(mag);
}

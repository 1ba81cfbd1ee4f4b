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

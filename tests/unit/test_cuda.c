/* tests/unit/test_cuda.c — the CUDA backend (kernels/cuda/) on a GPU.
 *
 *   test_cuda ops      every op of the table against kernels/ref on awkward
 *                      sizes: matmul in every weight dtype (GEMV and cuBLAS
 *                      paths, batch invariance), embed, add, store, rmsnorm,
 *                      RoPE, SwiGLU, softmax, argmax, causal prefill and
 *                      flash-decoding attention (f32/f16/bf16 KV, MHA, GQA,
 *                      groups over 8, head_dim up to 256, contexts across
 *                      many splits); then the buffer API (every memory type,
 *                      resize, events) and the statuses of bad arguments.
 *   test_cuda engine   the monolithic engine on "cuda": greedy tokens equal
 *                      the cpu backend's for generated MHA and GQA models and
 *                      stories260K (f32 KV; GQA also f16 KV: the same RNE
 *                      rounding of the stored rows) and a q8_0 model (x in
 *                      Q8 blocks with int32 sums, as the cpu backend does
 *                      since the Q8 x Q8 change on main); for q5_1, q4_k,
 *                      q6_k models equal up to near ties, teacher forced
 *                      (check_tokens_tie: their logits have top-2 margins
 *                      within the rounding noise that quantised activations
 *                      amplify, so a change of f32 summation order flips
 *                      some; docs/gpu.md, "Near ties").
 *   test_cuda tp       NCCL tensor parallelism at tp = 1 (one GPU): the
 *                      all-reduce of one rank leaves a matmul output as it
 *                      was; a GPU named twice is refused.
 *
 * Without a CUDA device (cudaGetDeviceCount fails: error 35 insufficient
 * driver, 100 no device, on a machine with no /dev/nvidiaN) each exits 77:
 * ctest reports them skipped. On a machine with an NVIDIA GPU a module that
 * cannot be loaded or a runtime that sees no device fails (exit 1), never
 * skips; tp skips where NCCL cannot be loaded (the GPU kit counts that as a
 * failure: scripts/gpu/verify.sh).
 *
 * Tolerances. Sums of n f32 terms in another order differ by up to
 * ~n·eps·Σ|terms|; as in test_kernels.c matmul is checked against
 * 2e-5·Σ_j|w_rj x_j| (+1e-6). On the cuBLAS path of f16/bf16 weights
 * (batch > 8) the activations are rounded to the weight's type first
 * (relative error 2^-11 / 2^-8 each), so the bound is 2^-10 / 2^-7 of
 * Σ|w x|. Quantised weights take x in Q8 blocks of 32 (Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1) or Q8_K blocks of 256 (Q4_K, Q5_K, Q6_K), as kernels/ref
 * defines each type: each input is off by at most max|x_block|/254, so the
 * bound adds Σ_blocks max|x|/254 · Σ|w| and holds against a reference with
 * f32 x too. The quantised types run on their awkward shapes too (rows of
 * 40 legacy blocks, 5 super-blocks), and embed compares bit for bit. Attention outputs
 * are convex combinations of V rows in [-1, 1]:
 * 2e-5 absolute + 1e-4 relative. Element-wise ops: 1e-6 absolute + 1e-5
 * relative (CUDA's expf/sinf/cosf/powf are within 2 ulp). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/model.h"
#include "common/quantize.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_tp.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels/rope.h"
#include "tests/testutil.h"
#include "tests/tools/greedy_engine.h"
#include "tests/tools/greedy_top2.h"

#define F32B(n) ((size_t)(n) * sizeof(float))

static na_rng_t rng;
static na_kernels_t *cu;

static void *xalloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* A device buffer holding n bytes of src (NULL: uninitialised). */
static na_kbuf_t *dev_from(const void *src, size_t n)
{
    na_kbuf_t *b = NULL;
    NA_CHECK_OK(cu->ops->buf_alloc(cu, n, NA_KMEM_DEVICE, &b));
    if (b != NULL && src != NULL)
        NA_CHECK_OK(cu->ops->upload(cu, b, src, n));
    return b;
}

static void dev_to(void *dst, na_kbuf_t *b, size_t n)
{
    NA_CHECK_OK(cu->ops->download(cu, dst, b, n));
    NA_CHECK_OK(na_kernels_finish(cu));
}

static void dev_free(na_kbuf_t *b)
{
    cu->ops->buf_free(cu, b);
}

/* ---- weights in every dtype -------------------------------------------- */

/* A rows x cols tensor of dtype dt from random values in [-1, 1) (Q8_0:
 * per-block scale max|x|/127, rounded quants; the other quantised types:
 * common/quantize.c). Free t->data. */
static void make_weight(na_tensor_t *t, na_dtype_t dt, int rows, int cols)
{
    size_t n = (size_t)rows * (size_t)cols, i;
    float *f = xalloc(F32B(n));
    na_rng_fill(&rng, f, n, -1.0f, 1.0f);
    t->dtype = dt;
    t->rows = rows;
    t->cols = cols;
    if (dt == NA_DTYPE_F32) {
        t->data = f;
        return;
    }
    if (dt == NA_DTYPE_Q8_0) {
        uint8_t *q = xalloc(n / NA_Q8_0_BLOCK * NA_Q8_0_BLOCK_SIZE);
        for (i = 0; i < n / NA_Q8_0_BLOCK; i++) {
            float amax = 0.0f, d;
            uint16_t dh;
            int j;
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                amax = fmaxf(amax, fabsf(f[i * NA_Q8_0_BLOCK + j]));
            dh = na_f32_to_f16(amax / 127.0f);
            d = na_f16_to_f32(dh);
            memcpy(q + i * NA_Q8_0_BLOCK_SIZE, &dh, 2);
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                q[i * NA_Q8_0_BLOCK_SIZE + 2 + j] =
                    (uint8_t)(int8_t)lrintf(d > 0.0f ? f[i * NA_Q8_0_BLOCK + j] / d : 0.0f);
        }
        t->data = q;
    } else if (na_dtype_is_quant(dt)) {   /* Q4_0 ... Q6_K: gen-model's quantiser */
        void *q = xalloc(na_dtype_bytes(dt, n));
        NA_CHECK(na_quantize(dt, f, n, q) == na_dtype_bytes(dt, n));
        t->data = q;
    } else {
        uint16_t *h = xalloc(n * 2);
        for (i = 0; i < n; i++)
            h[i] = dt == NA_DTYPE_F16 ? na_f32_to_f16(f[i]) : na_f32_to_bf16(f[i]);
        t->data = h;
    }
    free(f);
}

/* y = W x on the GPU (placed, device buffers) vs the reference. */
/* big: rows b % 3 == 1 of x scaled by 1e5 (beyond f16's 65504: the cuBLAS
 * path of f16 weights made them inf before it scaled rows into f16's range)
 * and rows b % 3 == 2 by 1e-3; the tolerance follows Σ|w x|. */
static void check_matmul_x(na_dtype_t dt, int rows, int cols, int batch, int big)
{
    na_tensor_t t;
    na_kweight_t w;
    size_t nx = (size_t)batch * cols, ny = (size_t)batch * rows;
    float *x = xalloc(F32B(nx)), *y = xalloc(F32B(ny)), *yr = xalloc(F32B(ny));
    double half_eps = batch > 8 && dt == NA_DTYPE_F16 ? 1.0 / 1024 :
                      batch > 8 && dt == NA_DTYPE_BF16 ? 1.0 / 128 : 0.0;
    na_kbuf_t *bx, *by;
    int b, r, j, bad = 0, xblk = na_dtype_block(dt) == NA_QK_K ? NA_QK_K : NA_Q8_0_BLOCK;

    float *wd = xalloc(F32B((size_t)rows * cols));     /* W dequantised */

    make_weight(&t, dt, rows, cols);
    for (r = 0; r < rows; r++)
        na_ref_dequant_row(dt, (const uint8_t *)t.data + (size_t)r * na_dtype_bytes(dt, cols),
                           wd + (size_t)r * cols, cols);
    na_rng_fill(&rng, x, nx, -1.0f, 1.0f);
    for (b = 0; big && b < batch; b++)
        for (j = 0; j < cols && b % 3 != 0; j++)
            x[(size_t)b * cols + j] *= b % 3 == 1 ? 1e5f : 1e-3f;
    na_ref_matmul(NULL, yr, x, &t, batch);
    NA_CHECK_OK(cu->ops->place(cu, &t, &w));
    bx = dev_from(x, F32B(nx));
    by = dev_from(NULL, F32B(ny));
    NA_CHECK_OK(cu->ops->matmul(cu, by, bx, &w, batch));
    dev_to(y, by, F32B(ny));
    for (b = 0; b < batch && !bad; b++)
        for (r = 0; r < rows && !bad; r++) {
            double mag = 0.0, qerr = 0.0, tol;
            for (j = 0; j < cols; j++)
                mag += fabs((double)wd[(size_t)r * cols + j] * x[(size_t)b * cols + j]);
            /* quantised weights: x in Q8 blocks of 32 (Q8_0, Q4_0 ... Q5_1) or
             * Q8_K blocks of 256 (K-quants), each input off by at most
             * d_x/2 = max|x|/254 */
            for (j = 0; na_dtype_is_quant(dt) && j < cols; j += xblk) {
                double amax = 0.0, wsum = 0.0;
                int i;
                for (i = j; i < j + xblk; i++) {
                    amax = fmax(amax, fabs((double)x[(size_t)b * cols + i]));
                    wsum += fabs((double)wd[(size_t)r * cols + i]);
                }
                qerr += amax / 254.0 * wsum;
            }
            tol = 1e-6 + (2e-5 + half_eps) * mag + 1.0001 * qerr;
            if (fabs((double)y[(size_t)b * rows + r] - yr[(size_t)b * rows + r]) > tol) {
                NA_CHECK_MSG(0, "matmul %s %dx%d batch %d%s: y[%d][%d] = %g, ref %g (tol %g)",
                             na_dtype_name(dt), rows, cols, batch, big ? " (big x)" : "", b, r,
                             (double)y[(size_t)b * rows + r], (double)yr[(size_t)b * rows + r],
                             tol);
                bad = 1;
            }
        }
    NA_CHECK(!bad);
    /* batch invariance: every row bit-identical to the same row at batch 1 */
    cu->batch_invariant = 1;
    NA_CHECK_OK(cu->ops->matmul(cu, by, bx, &w, batch));
    dev_to(yr, by, F32B(ny));
    for (b = 0; b < batch; b++) {
        na_kbuf_t xv = na_kbuf_view(bx, F32B((size_t)b * cols), F32B(cols));
        na_kbuf_t yv = na_kbuf_view(by, F32B((size_t)b * rows), F32B(rows));
        NA_CHECK_OK(cu->ops->matmul(cu, &yv, &xv, &w, 1));
    }
    dev_to(y, by, F32B(ny));
    cu->batch_invariant = 0;
    NA_CHECK_MSG(memcmp(y, yr, F32B(ny)) == 0, "matmul %s %dx%d batch %d: not batch invariant",
                 na_dtype_name(dt), rows, cols, batch);
    cu->ops->unplace(cu, &w);
    dev_free(bx);
    dev_free(by);
    free((void *)t.data);
    free(wd);
    free(x);
    free(y);
    free(yr);
}

static void check_matmul(na_dtype_t dt, int rows, int cols, int batch)
{
    check_matmul_x(dt, rows, cols, batch, 0);
}

static void test_matmul(void)
{
    /* 512 and 1280: 2 and 5 super-blocks of the K-quants (1280: a second
     * step of the warp with 8 of its 32 lanes on the row), 40 legacy blocks
     * (more than a warp's lanes) */
    static const int shapes[][2] = { { 1, 32 }, { 7, 64 }, { 33, 96 }, { 130, 256 },
                                     { 3, 40 }, { 65, 100 }, { 17, 1000 }, { 9, 512 },
                                     { 31, 1280 } };
    /* 1, 2, 3 and 5: each accumulator count of the f16/bf16 GEMV (1, 2, 4, 8) */
    static const int batches[] = { 1, 2, 3, 5, 8, 9, 17 };
    size_t s, b;
    int d;
    for (d = 0; d < NA_DTYPE_COUNT; d++)        /* every weight type, quantised ones too */
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            if (shapes[s][1] % na_dtype_block((na_dtype_t)d) != 0)
                continue;
            for (b = 0; b < sizeof(batches) / sizeof(batches[0]); b++)
                check_matmul((na_dtype_t)d, shapes[s][0], shapes[s][1], batches[b]);
        }
    /* a weight over the 2 x 8 MiB pinned staging of place (17.2 MB of f16:
     * three chunks, the last partial) */
    check_matmul(NA_DTYPE_F16, 4100, 2100, 3);
    /* activations beyond f16's range, GEMV (batch 3) and cuBLAS (9, 17) paths */
    for (d = 0; d < NA_DTYPE_COUNT; d++)
        for (b = 0; b < sizeof(batches) / sizeof(batches[0]); b++)
            if (batches[b] >= 3)
                check_matmul_x((na_dtype_t)d, 65, na_dtype_block((na_dtype_t)d) == NA_QK_K
                                                  ? NA_QK_K : 128, batches[b], 1);
    /* a row of partial blocks is refused by place, never read past its end */
    for (d = NA_DTYPE_Q8_0; d < NA_DTYPE_COUNT; d++) {
        na_tensor_t t;
        na_kweight_t w;
        make_weight(&t, (na_dtype_t)d, 4, na_dtype_block((na_dtype_t)d));
        t.cols = na_dtype_block((na_dtype_t)d) / 2 + 8;
        NA_CHECK_MSG(cu->ops->place(cu, &t, &w) == NA_ERR_INVALID, "place %s with %d columns",
                     na_dtype_name((na_dtype_t)d), t.cols);
        free((void *)t.data);
    }
}

/* ---- element-wise and row ops ------------------------------------------- */

static void check_close(const float *a, const float *b, size_t n, double atol, double rtol,
                        const char *what)
{
    double r = na_close_ratio(a, b, n, atol, rtol);
    NA_CHECK_MSG(r <= 1.0, "%s: ratio %g", what, r);
}

static void test_embed(void)
{
    int toks[5] = { 0, 63, 5, 5, 31 }, d;
    for (d = 0; d < NA_DTYPE_COUNT; d++) {     /* every weight type, quantised ones too */
        int cols = na_dtype_block((na_dtype_t)d) == NA_QK_K ? 2 * NA_QK_K : 96;
        na_tensor_t t;
        na_kweight_t w;
        float *out = xalloc(F32B(5 * cols)), *ref = xalloc(F32B(5 * cols));
        na_kbuf_t *bx = dev_from(NULL, F32B(5 * cols));
        make_weight(&t, (na_dtype_t)d, 64, cols);
        na_ref_embed(ref, &t, toks, 5);
        NA_CHECK_OK(cu->ops->place(cu, &t, &w));
        NA_CHECK_OK(cu->ops->embed(cu, bx, &w, toks, 5));
        toks[1] = 64;                               /* outside the table */
        NA_CHECK(cu->ops->embed(cu, bx, &w, toks, 5) == NA_ERR_INVALID);
        toks[1] = 63;
        dev_to(out, bx, F32B(5 * cols));
        NA_CHECK_MSG(memcmp(out, ref, F32B(5 * cols)) == 0, "embed %s",
                     na_dtype_name((na_dtype_t)d));
        cu->ops->unplace(cu, &w);
        dev_free(bx);
        free((void *)t.data);
        free(out);
        free(ref);
    }
}

static void test_elementwise(void)
{
    static const size_t sizes[] = { 1, 31, 1000, 70001 };
    size_t s;
    for (s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        size_t n = sizes[s];
        float *x = xalloc(F32B(n)), *y = xalloc(F32B(n)), *r = xalloc(F32B(n));
        float *o = xalloc(F32B(n));
        uint16_t *h = xalloc(n * 2), *hr = xalloc(n * 2);
        na_kbuf_t *bx, *by, *bh;
        int d;
        na_rng_fill(&rng, x, n, -8.0f, 8.0f);
        na_rng_fill(&rng, y, n, -8.0f, 8.0f);
        bx = dev_from(x, F32B(n));
        by = dev_from(y, F32B(n));
        bh = dev_from(NULL, F32B(n));
        /* add */
        memcpy(r, x, F32B(n));
        na_ref_add(r, y, n);
        NA_CHECK_OK(cu->ops->add(cu, bx, by, n));
        dev_to(o, bx, F32B(n));
        NA_CHECK_MSG(memcmp(o, r, F32B(n)) == 0, "add n %zu", n);
        /* swiglu */
        na_ref_swiglu(r, y, n);
        NA_CHECK_OK(cu->ops->swiglu(cu, bx, by, n));
        dev_to(o, bx, F32B(n));
        check_close(o, r, n, 1e-6, 1e-5, "swiglu");
        /* store: the same rounding to nearest even, bit for bit */
        for (d = 0; d < 3; d++) {
            na_dtype_t dt = (na_dtype_t)d;
            na_ref_store(d == 0 ? (void *)r : (void *)hr, dt, y, n);
            NA_CHECK_OK(cu->ops->store(cu, bh, dt, by, n));
            dev_to(d == 0 ? (void *)o : (void *)h, bh, na_dtype_bytes(dt, n));
            NA_CHECK_MSG(d == 0 ? memcmp(o, r, F32B(n)) == 0 : memcmp(h, hr, n * 2) == 0,
                         "store %s n %zu", na_dtype_name(dt), n);
        }
        NA_CHECK(cu->ops->store(cu, bh, NA_DTYPE_Q8_0, by, n) == NA_ERR_INVALID);
        dev_free(bx);
        dev_free(by);
        dev_free(bh);
        free(x);
        free(y);
        free(r);
        free(o);
        free(h);
        free(hr);
    }
}

static void test_rows(void)
{
    static const int ns[] = { 1, 7, 260, 4097, 32000 };
    size_t s;
    for (s = 0; s < sizeof(ns) / sizeof(ns[0]); s++) {
        int n = ns[s], batch = 3, b, best[3], got[3];
        size_t nn = (size_t)n * batch;
        float *x = xalloc(F32B(nn)), *o = xalloc(F32B(nn)), *r = xalloc(F32B(nn));
        float *wv = xalloc(F32B(n));
        na_tensor_t wt = { NA_DTYPE_F32, 1, n, wv, NA_LAYOUT_ROWS };
        na_kweight_t w;
        na_kbuf_t *bx, *bo, *bi = NULL;
        na_rng_fill(&rng, x, nn, -4.0f, 4.0f);
        na_rng_fill(&rng, wv, (size_t)n, 0.5f, 1.5f);
        bx = dev_from(x, F32B(nn));
        bo = dev_from(NULL, F32B(nn));
        NA_CHECK_OK(cu->ops->place(cu, &wt, &w));
        na_ref_rmsnorm(r, x, wv, n, 1e-5f, batch);
        NA_CHECK_OK(cu->ops->rmsnorm(cu, bo, bx, &w, n, 1e-5f, batch));
        dev_to(o, bo, F32B(nn));
        check_close(o, r, nn, 1e-6, 1e-5, "rmsnorm");
        /* argmax before softmax: the first of equal maxima */
        x[(size_t)n - 1] = 100.0f;
        x[0] = 100.0f;
        NA_CHECK_OK(cu->ops->upload(cu, bx, x, F32B(nn)));
        NA_CHECK_OK(cu->ops->buf_alloc(cu, sizeof(got), NA_KMEM_PINNED, &bi));
        NA_CHECK_OK(na_kernels_cuda_argmax(cu, bi, bx, n, batch));
        dev_to(got, bi, sizeof(got));
        for (b = 0; b < batch; b++) {
            int i;
            best[b] = 0;
            for (i = 1; i < n; i++)
                if (x[(size_t)b * n + i] > x[(size_t)b * n + best[b]])
                    best[b] = i;
        }
        NA_CHECK_MSG(memcmp(got, best, sizeof(got)) == 0, "argmax n %d: %d %d %d", n, got[0],
                     got[1], got[2]);
        memcpy(r, x, F32B(nn));
        na_ref_softmax(r, n, batch);
        NA_CHECK_OK(cu->ops->softmax(cu, bx, n, batch));
        dev_to(o, bx, F32B(nn));
        check_close(o, r, nn, 1e-7, 1e-5, "softmax");
        cu->ops->unplace(cu, &w);
        dev_free(bx);
        dev_free(bo);
        dev_free(bi);
        free(x);
        free(o);
        free(r);
        free(wv);
    }
}

static void test_rope(void)
{
    static const int dims[] = { 2, 6, 64, 128 };
    int pos[4] = { 0, 5, 1000, 30000 };
    na_kernels_t *ref_k = NULL;
    size_t s;
    int v;
    NA_CHECK_OK(na_kernels_create("ref", 1, &ref_k));
    for (s = 0; s < sizeof(dims) / sizeof(dims[0]); s++)
    for (v = 0; v < 3; v++) {
        int hd = dims[s], nh = 3, i;
        size_t n = (size_t)4 * nh * hd;
        float *x = xalloc(F32B(n)), *r = xalloc(F32B(n)), *o = xalloc(F32B(n)), ff[64];
        na_rope_desc_t d;
        na_rope_t *rr = NULL, *rc = NULL;
        na_kbuf_t *bx;
        /* NORM; NEOX with divisors on part of the head; yarn (mscale != 1) */
        na_rope_desc_plain(&d, hd, 10000.0f);
        for (i = 0; i < 64; i++)
            ff[i] = 1.0f + (float)(i % 3);
        if (v == 1) {
            d.style = NA_ROPE_NEOX;
            d.n_dims = hd >= 4 ? hd / 2 - (hd / 2) % 2 : hd;
            d.freq_factors = ff;
        } else if (v == 2) {
            d.scaling = NA_ROPE_SCALING_YARN;
            d.freq_scale = 0.25f;
            d.ext_factor = 1.0f;
            d.orig_ctx = 512;
        }
        NA_CHECK_OK(na_rope_create(ref_k, &d, &rr));
        NA_CHECK_OK(na_rope_create(cu, &d, &rc));
        na_rng_fill(&rng, x, n, -1.0f, 1.0f);
        memcpy(r, x, F32B(n));
        na_ref_rope(r, nh, pos, rr, 4);
        bx = dev_from(x, F32B(n));
        NA_CHECK_OK(cu->ops->rope(cu, bx, nh, pos, rc, 4));
        dev_to(o, bx, F32B(n));
        /* the host's frequency table: only sin/cos of arguments up to 3e4 rad
         * differ (2 ulp of the argument reduction) */
        check_close(o, r, n, 1e-5, 1e-5, "rope");
        na_rope_destroy(rc);
        na_rope_destroy(rr);
        dev_free(bx);
        free(x);
        free(r);
        free(o);
    }
    na_kernels_destroy(ref_k);
}

/* x += bias per row (qwen2's projection biases). */
static void test_bias(void)
{
    int n = 100, batch = 3, i;
    float x[300], b[100], r[300], o[300];
    na_tensor_t t = { NA_DTYPE_F32, 1, 100, b, NA_LAYOUT_ROWS };
    na_kweight_t w;
    na_kbuf_t *bx;
    na_rng_fill(&rng, x, 300, -1.0f, 1.0f);
    na_rng_fill(&rng, b, 100, -1.0f, 1.0f);
    for (i = 0; i < n * batch; i++)
        r[i] = x[i] + b[i % n];
    NA_CHECK_OK(cu->ops->place(cu, &t, &w));
    bx = dev_from(x, F32B(300));
    NA_CHECK_OK(cu->ops->bias(cu, bx, &w, n, batch));
    dev_to(o, bx, F32B(300));
    NA_CHECK(memcmp(o, r, sizeof(o)) == 0);
    dev_free(bx);
    cu->ops->unplace(cu, &w);
}

/* ---- attention ---------------------------------------------------------- */

/* Decode (n_tok 0) or prefill of n_tok rows after pos0 tokens, vs ref. */
static void check_attn(na_dtype_t dt, int n_heads, int n_kv, int hd, int pos0, int n_tok)
{
    int decode = n_tok == 0, rows = decode ? 1 : n_tok, ctx = decode ? pos0 : pos0 + n_tok;
    size_t nq = (size_t)rows * n_heads * hd, nkv = (size_t)ctx * n_kv * hd;
    float *q = xalloc(F32B(nq)), *o = xalloc(F32B(nq)), *r = xalloc(F32B(nq));
    float *kf = xalloc(F32B(nkv)), *vf = xalloc(F32B(nkv));
    void *kc = xalloc(na_dtype_bytes(dt, nkv)), *vc = xalloc(na_dtype_bytes(dt, nkv));
    na_kbuf_t *bq, *bo, *bk, *bv;

    na_rng_fill(&rng, q, nq, -1.0f, 1.0f);
    na_rng_fill(&rng, kf, nkv, -1.0f, 1.0f);
    na_rng_fill(&rng, vf, nkv, -1.0f, 1.0f);
    na_ref_store(kc, dt, kf, nkv);
    na_ref_store(vc, dt, vf, nkv);
    if (decode)
        na_ref_attn_decode(NULL, r, q, kc, vc, dt, ctx, n_heads, n_kv, hd);
    else
        na_ref_attn_prefill(NULL, r, q, kc, vc, dt, n_tok, pos0, n_heads, n_kv, hd);
    bq = dev_from(q, F32B(nq));
    bo = dev_from(NULL, F32B(nq));
    bk = dev_from(kc, na_dtype_bytes(dt, nkv));
    bv = dev_from(vc, na_dtype_bytes(dt, nkv));
    if (decode)
        NA_CHECK_OK(cu->ops->attn_decode(cu, bo, bq, bk, bv, dt, ctx, n_heads, n_kv, hd));
    else
        NA_CHECK_OK(cu->ops->attn_prefill(cu, bo, bq, bk, bv, dt, n_tok, pos0, n_heads, n_kv,
                                          hd));
    dev_to(o, bo, F32B(nq));
    {
        double ratio = na_close_ratio(o, r, nq, 2e-5, 1e-4);
        NA_CHECK_MSG(ratio <= 1.0, "attn %s %s heads %d/%d hd %d pos0 %d n_tok %d: ratio %g",
                     decode ? "decode" : "prefill", na_dtype_name(dt), n_heads, n_kv, hd, pos0,
                     n_tok, ratio);
    }
    dev_free(bq);
    dev_free(bo);
    dev_free(bk);
    dev_free(bv);
    free(q);
    free(o);
    free(r);
    free(kf);
    free(vf);
    free(kc);
    free(vc);
}

/* Batched decode (na_kernels_cuda_attn_decode_batch): n requests with the
 * contexts ctxs[], each against kernels/ref, in one launch. */
static void check_attn_batch(na_dtype_t dt, int n_heads, int n_kv, int hd, const int *ctxs, int n)
{
    na_kcuda_attn_req_t *rq = xalloc(sizeof(*rq) * (size_t)n);
    na_kbuf_t **bufs = xalloc(sizeof(*bufs) * 4 * (size_t)n);
    float **ref = xalloc(sizeof(*ref) * (size_t)n);
    size_t nq = (size_t)n_heads * hd;
    float *o = xalloc(F32B(nq)), *o1 = xalloc(F32B(nq));
    na_kbuf_t *single = dev_from(NULL, F32B(nq));
    int i;

    for (i = 0; i < n; i++) {
        size_t nkv = (size_t)(ctxs[i] > 0 ? ctxs[i] : 1) * n_kv * hd;
        float *q = xalloc(F32B(nq)), *kf = xalloc(F32B(nkv)), *vf = xalloc(F32B(nkv));
        void *kc = xalloc(na_dtype_bytes(dt, nkv)), *vc = xalloc(na_dtype_bytes(dt, nkv));
        na_rng_fill(&rng, q, nq, -1.0f, 1.0f);
        na_rng_fill(&rng, kf, nkv, -1.0f, 1.0f);
        na_rng_fill(&rng, vf, nkv, -1.0f, 1.0f);
        na_ref_store(kc, dt, kf, nkv);
        na_ref_store(vc, dt, vf, nkv);
        ref[i] = xalloc(F32B(nq));
        na_ref_attn_decode(NULL, ref[i], q, kc, vc, dt, ctxs[i], n_heads, n_kv, hd);
        bufs[4 * i + 0] = dev_from(NULL, F32B(nq));
        bufs[4 * i + 1] = dev_from(q, F32B(nq));
        bufs[4 * i + 2] = dev_from(kc, na_dtype_bytes(dt, nkv));
        bufs[4 * i + 3] = dev_from(vc, na_dtype_bytes(dt, nkv));
        rq[i] = (na_kcuda_attn_req_t){ bufs[4 * i], bufs[4 * i + 1], bufs[4 * i + 2],
                                       bufs[4 * i + 3], ctxs[i] };
        free(q);
        free(kf);
        free(vf);
        free(kc);
        free(vc);
    }
    NA_CHECK_OK(na_kernels_cuda_attn_decode_batch(cu, rq, n, dt, n_heads, n_kv, hd));
    for (i = 0; i < n; i++) {
        double ratio;
        dev_to(o, bufs[4 * i], F32B(nq));
        ratio = na_close_ratio(o, ref[i], nq, 2e-5, 1e-4);
        NA_CHECK_MSG(ratio <= 1.0, "batched decode %s heads %d/%d hd %d: request %d (ctx %d) "
                     "ratio %g", na_dtype_name(dt), n_heads, n_kv, hd, i, ctxs[i], ratio);
        /* a request's batched result is its single launch's, bit for bit:
         * its splits come from its own context, never from the batch's */
        NA_CHECK_OK(cu->ops->attn_decode(cu, single, bufs[4 * i + 1], bufs[4 * i + 2],
                                         bufs[4 * i + 3], dt, ctxs[i], n_heads, n_kv, hd));
        dev_to(o1, single, F32B(nq));
        NA_CHECK_MSG(memcmp(o, o1, F32B(nq)) == 0, "batched decode %s heads %d/%d hd %d: request "
                     "%d (ctx %d) differs from its single launch", na_dtype_name(dt), n_heads,
                     n_kv, hd, i, ctxs[i]);
        dev_free(bufs[4 * i]);
        dev_free(bufs[4 * i + 1]);
        dev_free(bufs[4 * i + 2]);
        dev_free(bufs[4 * i + 3]);
        free(ref[i]);
    }
    dev_free(single);
    free(o);
    free(o1);
    free(ref);
    free(bufs);
    free(rq);
}

static void test_attention(void)
{
    static const int heads[][3] = { { 4, 4, 8 },   { 8, 2, 64 },  { 32, 8, 128 },
                                    { 6, 2, 36 },  { 12, 1, 80 }, { 16, 1, 32 },
                                    { 4, 2, 256 }, { 3, 3, 2 },  { 12, 1, 128 },
                                    { 5, 5, 64 },  { 40, 8, 128 } };
    static const int ctxs[] = { 1, 7, 64, 65, 300, 4100 };
    size_t h, c;
    int d;
    for (d = 0; d < 3; d++)
        for (h = 0; h < sizeof(heads) / sizeof(heads[0]); h++) {
            for (c = 0; c < sizeof(ctxs) / sizeof(ctxs[0]); c++)
                check_attn((na_dtype_t)d, heads[h][0], heads[h][1], heads[h][2], ctxs[c], 0);
            check_attn((na_dtype_t)d, heads[h][0], heads[h][1], heads[h][2], 0, 1);
            check_attn((na_dtype_t)d, heads[h][0], heads[h][1], heads[h][2], 0, 33);
            check_attn((na_dtype_t)d, heads[h][0], heads[h][1], heads[h][2], 300, 5);
        }
    /* batched decode: requests of unequal contexts (0: zeros) in one launch */
    {
        static const int bctx[] = { 5, 0, 4100, 1, 700, 64, 65, 20000, 513 };
        for (d = 0; d < 3; d++) {
            check_attn_batch((na_dtype_t)d, 32, 8, 128, bctx, 9);
            check_attn_batch((na_dtype_t)d, 12, 1, 80, bctx, 7);
            check_attn_batch((na_dtype_t)d, 4, 4, 8, bctx + 2, 1);
        }
    }
    /* ctx 0: zeros; head_dim over 256: refused */
    {
        float o[8] = { 1, 1, 1, 1, 1, 1, 1, 1 }, z[8] = { 0 };
        na_kbuf_t *bo = dev_from(o, sizeof(o)), *bk = dev_from(z, sizeof(z));
        NA_CHECK_OK(cu->ops->attn_decode(cu, bo, bo, bk, bk, NA_DTYPE_F32, 0, 2, 1, 4));
        dev_to(o, bo, sizeof(o));
        NA_CHECK(memcmp(o, z, sizeof(o)) == 0);
        dev_free(bo);
        dev_free(bk);
    }
}

/* ---- buffers, events, bad arguments ------------------------------------- */

static void test_buffers(void)
{
    static const na_kmem_t mems[3] = { NA_KMEM_HOST, NA_KMEM_PINNED, NA_KMEM_DEVICE };
    float src[1000], dst[1000];
    na_kbuf_t *a = NULL, *b = NULL;
    na_kevent_t *ev = NULL;
    int i, j;

    na_rng_fill(&rng, src, 1000, -1.0f, 1.0f);
    for (i = 0; i < 3; i++)
        for (j = 0; j < 3; j++) {
            NA_CHECK_OK(cu->ops->buf_alloc(cu, sizeof(src), mems[i], &a));
            NA_CHECK_OK(cu->ops->buf_alloc(cu, sizeof(src), mems[j], &b));
            if (a == NULL || b == NULL)
                return;
            NA_CHECK(mems[i] == NA_KMEM_DEVICE ? a->host == NULL : a->host != NULL);
            NA_CHECK_OK(cu->ops->upload(cu, a, src, sizeof(src)));
            NA_CHECK_OK(cu->ops->copy(cu, b, a, sizeof(src)));
            memset(dst, 0, sizeof(dst));
            dev_to(dst, b, sizeof(src));
            NA_CHECK_MSG(memcmp(dst, src, sizeof(src)) == 0, "round trip mem %d -> %d", i, j);
            /* resize keeps the first bytes */
            NA_CHECK_OK(cu->ops->buf_resize(cu, b, 3 * sizeof(src)));
            memset(dst, 0, sizeof(dst));
            dev_to(dst, b, sizeof(src));
            NA_CHECK_MSG(memcmp(dst, src, sizeof(src)) == 0, "resize mem %d", j);
            cu->ops->buf_free(cu, a);
            cu->ops->buf_free(cu, b);
        }
    /* events: never recorded -> done; recorded after work -> done once waited */
    NA_CHECK_OK(cu->ops->event_create(cu, &ev));
    NA_CHECK_OK(cu->ops->event_query(cu, ev));
    NA_CHECK_OK(cu->ops->event_record(cu, ev));
    NA_CHECK_OK(cu->ops->event_wait(cu, ev));
    NA_CHECK_OK(cu->ops->event_query(cu, ev));
    cu->ops->event_destroy(cu, ev);
    /* bad arguments */
    {
        na_kbuf_t h = na_kbuf_host(src, sizeof(src)), *d = dev_from(src, sizeof(src));
        na_kbuf_t small = na_kbuf_view(d, 0, 16), *pg = NULL;
        NA_CHECK(cu->ops->add(cu, &h, d, 10) == NA_ERR_INVALID);       /* caller memory */
        NA_CHECK(cu->ops->add(cu, &small, d, 10) == NA_ERR_INVALID);   /* too small */
        NA_CHECK(cu->ops->add(cu, NULL, d, 10) == NA_ERR_INVALID);
        NA_CHECK_OK(cu->ops->buf_alloc(cu, sizeof(src), NA_KMEM_HOST, &pg));
        NA_CHECK(cu->ops->add(cu, pg, d, 10) == NA_ERR_INVALID);       /* pageable */
        NA_CHECK(cu->ops->softmax(cu, d, 0, 1) == NA_ERR_INVALID);
        NA_CHECK(cu->ops->attn_decode(cu, d, d, d, d, NA_DTYPE_F32, 1, 3, 2, 4) ==
                 NA_ERR_INVALID);                                      /* 3 % 2 heads */
        NA_CHECK(cu->ops->attn_decode(cu, d, d, d, d, NA_DTYPE_Q8_0, 1, 2, 2, 4) ==
                 NA_ERR_INVALID);
        dev_free(pg);
        dev_free(d);
        NA_CHECK_OK(na_kernels_finish(cu));
    }
}

/* ---- the engine ----------------------------------------------------------- */

/* Greedy steps per prompt of the tie-aware check (check_tokens_tie), and
 * its relative tolerance: scripts/greedy_tie.sh's default NA_TIE_TOL, from
 * the cpu backend against kernels/ref on generated quantised models
 * (docs/gpu.md, "Near ties"). */
#define NA_TIE_STEPS 40
#define NA_TIE_TOL 0.05

/* the prompts of both checks */
static int pr0[] = { 1, 40, 41, 42 }, pr1[] = { 1, 300 },
           pr2[] = { 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 }, pr3[] = { 1, 99, 98 };
static int *const prompt_ids[4] = { pr0, pr1, pr2, pr3 };
static const int prompt_len[4] = { 4, 2, 13, 3 };

/* Greedy tokens of prompts on backend. */
static na_status_t gen(const na_model_t *m, const char *backend, na_dtype_t kv, int *const *p,
                       const int *np, int n, int max_new, int out[][64], int *n_out)
{
    na_engine_opts_t eo = { backend, 1, kv, 0 };
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    na_gen_opts_t go = { 0, NULL, 0, NULL, NULL, NULL, NULL };
    na_request_t *reqs[4] = { 0 };
    na_engine_t *e = NULL;
    na_status_t st = na_engine_create(m, &eo, &e);
    int i;
    for (i = 0; i < n && st == NA_OK; i++)
        st = na_request_create(e, i, p[i], np[i], max_new, &sc, &reqs[i]);
    if (st == NA_OK)
        st = na_generate(e, reqs, n, &go, NULL);
    for (i = 0; i < n; i++) {
        if (reqs[i] != NULL && st == NA_OK) {
            n_out[i] = reqs[i]->n_out;
            memcpy(out[i], reqs[i]->out, (size_t)reqs[i]->n_out * sizeof(int));
        }
        na_request_destroy(reqs[i]);
    }
    na_engine_destroy(e);
    return st;
}

/* The engine on backend stepped as tests/tools/greedy_top.c does
 * (tests/tools/greedy_engine.h): the prompt p (np ids) in one prefill step,
 * then n decode steps, each fed force[i] (teacher forcing) or, force NULL,
 * its own argmax; the logits of step i into lg + i * vocab. */
static na_status_t stepped(const na_model_t *m, const char *backend, na_dtype_t kv,
                           const int *p, int np, const int *force, int n, float *lg)
{
    na_engine_opts_t eo = { backend, 1, kv, 0 };
    greedy_eng_t g;
    int seq[NA_TIE_STEPS + 16], v = m->cfg.vocab_size, i;
    na_status_t st = np + n <= (int)(sizeof(seq) / sizeof(seq[0])) ? NA_OK :
                     na_err(NA_ERR_INVALID, "stepped: %d + %d ids", np, n);

    memset(&g, 0, sizeof(g));
    if (st == NA_OK)
        st = greedy_eng_open(&g, m, &eo, np, np + n);
    for (i = 0; i < np + n; i++)
        seq[i] = i < np ? p[i] : 0;
    for (i = 0; i < n && st == NA_OK; i++) {
        st = greedy_eng_step(&g, seq, i, NULL, NULL);
        if (st != NA_OK)
            break;
        memcpy(lg + (size_t)i * v, g.a->logits, (size_t)v * sizeof(float));
        seq[np + i] = force != NULL ? force[i] : greedy_top2(g.a->logits, v, NULL);
    }
    greedy_eng_close(&g);
    return st;
}

/* d within k tolerances of logit l (k = 2 for a gap of two ids' logits) */
static int tie_small(double d, double l, double k)
{
    return d <= k * NA_TIE_TOL * (fabs(l) > 1.0 ? fabs(l) : 1.0);
}

/* Greedy decoding of the quantised models, tie aware (the rule of
 * scripts/forced_cmp.awk, docs/gpu.md "Near ties"): the cpu backend decodes
 * greedily (its logits a), the cuda engine is fed the cpu's tokens (its
 * logits b). At every step the cpu's top-2 logits on cuda are within
 * NA_TIE_TOL * max(1, |logit|) of the cpu's; where cuda's argmax is not the
 * cpu's token, both cuda's logit of the cpu's token below its own top and
 * the cpu's own top-2 margin are within twice that (each a gap between two
 * ids' logits, each id off by up to the tolerance). */
static void check_tokens_tie(const na_model_t *m, const char *what, na_dtype_t kv)
{
    int v = m->cfg.vocab_size, i, k, flips = 0, steps = 0;
    float *a = xalloc((size_t)NA_TIE_STEPS * v * sizeof(float));
    float *b = xalloc((size_t)NA_TIE_STEPS * v * sizeof(float));
    double maxd = 0.0, noise = 0.0;

    for (k = 0; k < 4; k++) {
        int toks[NA_TIE_STEPS], bad = 0;
        na_status_t st = stepped(m, "cpu", kv, prompt_ids[k], prompt_len[k], NULL, NA_TIE_STEPS, a);
        NA_CHECK_OK(st);
        if (st != NA_OK)
            continue;
        for (i = 0; i < NA_TIE_STEPS; i++)
            toks[i] = greedy_top2(a + (size_t)i * v, v, NULL);
        st = stepped(m, "cuda", kv, prompt_ids[k], prompt_len[k], toks, NA_TIE_STEPS, b);
        NA_CHECK_OK(st);
        for (i = 0; i < NA_TIE_STEPS && !bad && st == NA_OK; i++) {
            const float *la = a + (size_t)i * v, *lb = b + (size_t)i * v;
            int a2, a1 = greedy_top2(la, v, &a2), b1 = greedy_top2(lb, v, NULL);
            double n1 = fabs((double)la[a1] - lb[a1]), n2 = fabs((double)la[a2] - lb[a2]);
            double ga = (double)la[a1] - la[a2], db = (double)lb[b1] - lb[a1];
            steps++;
            noise = fmax(noise, fmax(n1, n2));
            if (!tie_small(n1, la[a1], 1.0) || !tie_small(n2, la[a1], 1.0)) {
                NA_CHECK_MSG(0, "%s, kv %s: prompt %d step %d: cpu's top-2 ids %d %d at %.6f "
                             "%.6f, cuda's %.6f %.6f (tolerance %g relative)", what,
                             na_dtype_name(kv), k, i, a1, a2, (double)la[a1], (double)la[a2],
                             (double)lb[a1], (double)lb[a2], NA_TIE_TOL);
                bad = 1;
            }
            if (b1 == a1 || bad)
                continue;
            flips++;
            maxd = fmax(maxd, fmax(ga, db));
            if (!tie_small(db, lb[b1], 2.0) || !tie_small(ga, la[a1], 2.0)) {
                NA_CHECK_MSG(0, "%s, kv %s: prompt %d step %d: cpu id %d (logit %.6f, top-2 "
                             "margin %.6f), cuda id %d (logit %.6f, the cpu's id at %.6f: "
                             "%.6f below): not a near tie (tolerance 2 x %g relative)", what,
                             na_dtype_name(kv), k, i, a1, (double)la[a1], ga, b1,
                             (double)lb[b1], (double)lb[a1], db, NA_TIE_TOL);
                bad = 1;
            }
        }
    }
    fprintf(stderr, "%s, kv %s: cuda fed the cpu's greedy tokens: %d of %d steps with the same "
            "argmax, %d near ties (max |dlogit| %.6f), logit noise %.6f\n", what,
            na_dtype_name(kv), steps - flips, steps, flips, maxd, noise);
    free(a);
    free(b);
}

/* Greedy tokens of cuda equal the cpu backend's, exactly. */
static void check_tokens(const na_model_t *m, const char *what, na_dtype_t kv)
{
    int a[4][64], b[4][64], na[4] = { 0 }, nb[4] = { 0 }, i;
    NA_CHECK_OK(gen(m, "cpu", kv, prompt_ids, prompt_len, 4, 40, a, na));
    NA_CHECK_OK(gen(m, "cuda", kv, prompt_ids, prompt_len, 4, 40, b, nb));
    for (i = 0; i < 4; i++)
        NA_CHECK_MSG(na_test_same_ints(a[i], na[i], b[i], nb[i]),
                     "%s, kv %s: prompt %d: cuda tokens differ from cpu", what,
                     na_dtype_name(kv), i);
}

static int test_engine(void)
{
    char dir[512];
    na_genmodel_opts_t o;
    na_model_t *m;

    if (na_test_tmpdir(dir, sizeof(dir)) != 0)
        NA_SKIP("no temporary directory");
    na_genmodel_shape(&o, 128, 352, 2, 4, 4, 600, 128);      /* MHA, head_dim 32 */
    o.write_gguf = 0;
    if ((m = na_test_genmodel_open(dir, "mha", &o, "bin")) != NULL) {
        check_tokens(m, "generated MHA", NA_DTYPE_F32);
        na_model_destroy(m);
    }
    na_genmodel_shape(&o, 256, 704, 2, 8, 2, 600, 128);      /* GQA 8/2, head_dim 32 */
    o.write_gguf = 0;
    if ((m = na_test_genmodel_open(dir, "gqa", &o, "bin")) != NULL) {
        check_tokens(m, "generated GQA", NA_DTYPE_F32);
        check_tokens(m, "generated GQA", NA_DTYPE_F16);
        na_model_destroy(m);
    }
    /* q8_0 weights: x in Q8 blocks, exactly as the cpu backend (on main) */
    na_genmodel_shape(&o, 256, 704, 2, 8, 2, 600, 128);
    o.dtype = NA_DTYPE_Q8_0;
    o.write_llama2c = 0;
    o.write_gguf = 1;
    if ((m = na_test_genmodel_open(dir, "q8", &o, "gguf")) != NULL) {
        check_tokens(m, "generated GQA q8_0", NA_DTYPE_F32);
        na_model_destroy(m);
    }
    /* the other quantised types (repacked on the device; x in Q8 / Q8_K
     * blocks as the cpu backend takes them): a legacy and a K-quant mix */
    {
        static const na_dtype_t qd[] = { NA_DTYPE_Q5_1, NA_DTYPE_Q4_K, NA_DTYPE_Q6_K };
        size_t i;
        for (i = 0; i < sizeof(qd) / sizeof(qd[0]); i++) {
            char what[64];
            na_genmodel_shape(&o, 256, 768, 2, 8, 2, 600, 128);   /* rows of whole super-blocks */
            o.dtype = qd[i];
            o.write_llama2c = 0;
            o.write_gguf = 1;
            snprintf(what, sizeof(what), "generated GQA %s", na_dtype_name(qd[i]));
            if ((m = na_test_genmodel_open(dir, na_dtype_name(qd[i]), &o, "gguf")) != NULL) {
                check_tokens_tie(m, what, NA_DTYPE_F32);
                na_model_destroy(m);
            }
        }
    }
    if (na_test_shared_model("stories260K.bin") != NULL) {
        char path[1024];
        snprintf(path, sizeof(path), "%s", na_test_shared_model("stories260K.bin"));
        m = NULL;
        NA_CHECK_OK(na_model_open(path, &m));
        if (m != NULL) {
            check_tokens(m, "stories260K", NA_DTYPE_F32);
            na_model_destroy(m);
        }
    }
    na_test_rmtree(dir);
    return na_test_finish();
}

static int test_tp(void)
{
    int gpus[2] = { 0, 0 }, version = 0;
    na_cuda_tp_t *tp = NULL;
    na_tensor_t t;
    na_kweight_t w;
    float x[3 * 96], y0[3 * 40], y1[3 * 40];
    na_kbuf_t *bx, *by;

    if (na_cuda_tp_nccl(&version) != NA_OK)
        NA_SKIP("%s", na_errmsg());
    fprintf(stderr, "NCCL %d loaded\n", version);

    NA_CHECK(na_cuda_tp_create(gpus, 2, &tp) == NA_ERR_INVALID);
    NA_CHECK_OK(na_kernels_create("cuda:0", 1, &cu));
    NA_CHECK_OK(na_cuda_tp_create(gpus, 1, &tp));
    if (cu == NULL || tp == NULL)
        return na_test_finish();
    NA_CHECK(na_cuda_tp_size(tp) == 1);
    make_weight(&t, NA_DTYPE_BF16, 40, 96);
    na_rng_fill(&rng, x, 3 * 96, -1.0f, 1.0f);
    NA_CHECK_OK(cu->ops->place(cu, &t, &w));
    bx = dev_from(x, sizeof(x));
    by = dev_from(NULL, sizeof(y0));
    NA_CHECK_OK(cu->ops->matmul(cu, by, bx, &w, 3));
    dev_to(y0, by, sizeof(y0));
    NA_CHECK_OK(na_cuda_tp_allreduce(tp, 0, cu, by, 3 * 40));
    NA_CHECK(na_cuda_tp_allreduce(tp, 1, cu, by, 3 * 40) == NA_ERR_INVALID);
    dev_to(y1, by, sizeof(y1));
    NA_CHECK_MSG(memcmp(y0, y1, sizeof(y0)) == 0, "tp=1 all-reduce changed the output");
    cu->ops->unplace(cu, &w);
    dev_free(bx);
    dev_free(by);
    free((void *)t.data);
    na_cuda_tp_destroy(tp);
    na_kernels_destroy(cu);
    return na_test_finish();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ops";
    na_status_t st = na_cuda_probe(0, NULL);
    if (st == NA_ERR_UNSUPPORTED)       /* no GPU on this machine (cuda_present.h) */
        NA_SKIP("%s", na_errmsg());
    if (st != NA_OK) {                  /* a GPU, but the backend cannot use it */
        fprintf(stderr, "FAIL: %s\n", na_errmsg());
        return 1;
    }
    na_rng_seed(&rng, 2026);
    if (strcmp(mode, "engine") == 0)
        return test_engine();
    if (strcmp(mode, "tp") == 0)
        return test_tp();
    NA_CHECK_OK(na_kernels_create("cuda", 1, &cu));
    if (cu == NULL)
        return na_test_finish();
    test_buffers();
    test_embed();
    test_elementwise();
    test_rows();
    test_rope();
    test_bias();
    test_matmul();
    test_attention();
    na_kernels_destroy(cu);
    return na_test_finish();
}

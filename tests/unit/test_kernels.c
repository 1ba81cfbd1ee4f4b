/* tests/unit/test_kernels.c — kernels/: the reference kernels against
 * hand-computed values, then every cpu op against its reference on random
 * inputs of awkward sizes, with 1 and 2 threads, all weight dtypes and f16/bf16/f32
 * KV; online-softmax partials merged in different splits against one pass.
 *
 * Tolerances. Both backends sum in f32 but in different orders (blocked
 * vector lanes, sgemm, chunked online softmax), so a sum of n terms differs
 * by about sqrt(n)·eps·Σ|terms| and by at most n·eps·Σ|terms|. Matmul
 * outputs are checked against 2e-5·Σ_j|w_rj x_j| (+1e-6): ~80 eps, several
 * times the random-walk size for n <= 1000 while a wrong index or a dropped
 * element is off by O(Σ|terms|/n) or more. Attention outputs are convex
 * combinations of V rows in [-1, 1]; the vector exp is within 2 ulp of expf,
 * so 2e-5 absolute + 1e-4 relative is ~100x the observed error yet far below
 * the error of a wrong token, head or mask. Then the buffer API: embedding in
 * every weight dtype, residual add, KV store, upload/copy/download round
 * trips in every memory type (refdev: ref with emulated device memory),
 * events, and the statuses of bad arguments. */
#include <cpuid.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "common/bench.h"
#include "kernels/cpu/cpu.h"
#include "kernels/expf.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "kernels/rope.h"
#include "tests/testutil.h"
#include "tests/unit/kern_util.h"

static na_rng_t rng;
static na_kernels_t *ref_k, *cpu_k[2];   /* cpu with 1 and 2 threads */
static int gemm_bf16;                     /* the cpu backend has the AVX512-BF16 GEMM */
static int gemm_h16_any;                  /* F16/BF16 batches exact without batch_invariant */

static float *falloc(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof(float));
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- table calls on host arrays --------------------------------------------
 * The host backends accept caller memory wrapped by na_kbuf_host; weights
 * are placed (wrapped, no copy) around each call. */
#define F32B(n) ((size_t)(n) * sizeof(float))

static na_status_t rmsnorm(na_kernels_t *k, float *out, float *x, float *w, int n, int batch)
{
    na_tensor_t wt = { NA_DTYPE_F32, 1, n, w, NA_LAYOUT_ROWS };
    na_kbuf_t ob = na_kbuf_host(out, F32B((size_t)batch * n));
    na_kbuf_t xb = na_kbuf_host(x, F32B((size_t)batch * n));
    na_kweight_t pw;
    na_status_t st = k->ops->place(k, &wt, &pw);
    if (st == NA_OK)
        st = k->ops->rmsnorm(k, &ob, &xb, &pw, n, 1e-5f, batch);
    k->ops->unplace(k, &pw);
    return st;
}

static na_status_t softmax(na_kernels_t *k, float *x, int n, int batch)
{
    na_kbuf_t xb = na_kbuf_host(x, F32B((size_t)batch * n));
    return k->ops->softmax(k, &xb, n, batch);
}

static na_status_t swiglu(na_kernels_t *k, float *g, float *u, size_t n)
{
    na_kbuf_t gb = na_kbuf_host(g, F32B(n)), ub = na_kbuf_host(u, F32B(n));
    return k->ops->swiglu(k, &gb, &ub, n);
}

/* A RoPE table on k: style, n_dims of hd rotated, theta 1e4; scale != 1:
 * yarn with that scale (mscale != 1); ff: divisors or NULL. */
static na_rope_t *mkrope(na_kernels_t *k, int hd, int n_dims, na_rope_style_t style,
                         float scale, const float *ff)
{
    na_rope_desc_t d;
    na_rope_t *r = NULL;
    na_rope_desc_plain(&d, hd, 10000.0f);
    d.style = style;
    d.n_dims = n_dims;
    d.freq_factors = ff;
    if (scale != 1.0f) {
        d.scaling = NA_ROPE_SCALING_YARN;
        d.freq_scale = scale;
        d.ext_factor = 1.0f;
        d.orig_ctx = 256;
    }
    NA_CHECK_OK(na_rope_create(k, &d, &r));
    return r;
}

static na_status_t rope(na_kernels_t *k, float *v, int nh, const int *pos, const na_rope_t *r,
                        int batch)
{
    na_kbuf_t vb = na_kbuf_host(v, F32B((size_t)batch * nh * r->head_dim));
    return k->ops->rope(k, &vb, nh, pos, r, batch);
}

static na_status_t prefill(na_kernels_t *k, float *out, float *q, void *kc, void *vc,
                           na_dtype_t dt, int n_tok, int pos0, int nh, int nkv, int hd)
{
    size_t qb = F32B((size_t)n_tok * nh * hd);
    size_t kvb = na_dtype_bytes(dt, (size_t)(pos0 + n_tok) * nkv * hd);
    na_kbuf_t ob = na_kbuf_host(out, qb), qq = na_kbuf_host(q, qb);
    na_kbuf_t kb = na_kbuf_host(kc, kvb), vb = na_kbuf_host(vc, kvb);
    return k->ops->attn_prefill(k, &ob, &qq, &kb, &vb, dt, n_tok, pos0, nh, nkv, hd);
}

/* ---- reference kernels against hand-computed values --------------------- */
/* na_expf is ggml's ggml_v_expf (AVX-512 build) bit for bit: values of that
 * function (llama.cpp c392e5094, computed outside the repository), where
 * libm's expf differs in the last bits; the cpu backend's 8-lane
 * na_cpu_exp gives na_expf's bits on a sweep of inputs and the edges. */
static void test_expf(void)
{
    static const float known[][2] = {
        { -0x1p-1f, 0x1.368b2ep-1f },          /* expf: 0x1.368b3p-1 */
        { -0x1.a66666p+1f, 0x1.2e259ap-5f },   /* -3.3: expf 0x1.2e259cp-5 */
        { -0x1.566666p+3f, 0x1.7a3dccp-16f },  /* -10.7 */
        { -0x1.aaaaaap+2f, 0x1.4d9d06p-10f },  /* -20/3: as expf */
        { -0x1.5f999ap+6f, 0x1.237324p-127f }, /* -87.9: subnormal */
        { -0x1.92p+6f, 0x1p-145f },            /* -100.5 */
        { 0x1.4p+0f, 0x1.bec38cp+1f },         /* 1.25 */
        { 0x1.99999ap-4f, 0x1.1aec78p+0f },    /* 0.1 */
    };
    size_t i;
    int bad = 0;
    float x, e8[8];

    for (i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        NA_CHECK_MSG(memcmp(&(float){ na_expf(known[i][0]) }, &known[i][1], 4) == 0,
                     "na_expf(%a) = %a, ggml gives %a", (double)known[i][0],
                     (double)na_expf(known[i][0]), (double)known[i][1]);
    NA_CHECK(na_expf(-INFINITY) == 0.0f && na_expf(-200.0f) == 0.0f);
    NA_CHECK(na_expf(100.0f) == INFINITY && na_expf(0.0f) == 1.0f);
    for (x = -110.0f; x < 95.0f && bad < 3; x += 0.0031f) {
        float xs[8] = { x, -x, x * 0.5f, x * 0.01f, x - 0.00017f, -INFINITY, 0.0f, x * 1e-6f };
        int l;
        _mm256_storeu_ps(e8, na_cpu_exp(_mm256_loadu_ps(xs)));
        for (l = 0; l < 8; l++)
            if (memcmp(&e8[l], &(float){ na_expf(xs[l]) }, 4) != 0 && bad++ < 3)
                NA_CHECK_MSG(0, "na_cpu_exp(%a) = %a, na_expf %a", (double)xs[l],
                             (double)e8[l], (double)na_expf(xs[l]));
    }
}

static void test_ref_known(void)
{
    float sm[3] = { 1.0f, 2.0f, 3.0f };
    float exp_sm[3] = { 0.09003057f, 0.24472847f, 0.66524096f };
    float rv[4] = { 1.0f, 0.0f, 0.0f, 1.0f };
    float exp_rv[4] = { cosf(1.0f), sinf(1.0f), -sinf(0.01f), cosf(0.01f) };
    float nv[4] = { 1.0f, 0.0f, 0.0f, 1.0f };   /* NEOX pairs (0, 2) and (1, 3) */
    float exp_nv[4] = { cosf(1.0f), -sinf(0.01f), sinf(1.0f), cosf(0.01f) };
    float pv[6] = { 1.0f, 0.0f, 0.0f, 1.0f, 5.0f, 6.0f };   /* 4 of 6 rotated: */
    float exp_pv[6] = { cosf(1.0f), sinf(1.0f), -sinf(0.01f), cosf(0.01f), 5.0f, 6.0f };
    na_rope_t *r4 = mkrope(ref_k, 4, 4, NA_ROPE_NORM, 1.0f, NULL);
    na_rope_t *n4 = mkrope(ref_k, 4, 4, NA_ROPE_NEOX, 1.0f, NULL);
    na_rope_t *p6 = mkrope(ref_k, 6, 4, NA_ROPE_NORM, 1.0f, NULL);
    float rx[2] = { 3.0f, 4.0f }, rw[2] = { 1.0f, 2.0f }, ro[2];
    float exp_ro[2] = { 0.84852814f, 2.26274170f };      /* x / sqrt(12.5) * w */
    float g[1] = { 1.0f }, u[1] = { 2.0f };
    uint8_t blk[NA_Q8_0_BLOCK_SIZE];
    float xq[32], yq;
    na_tensor_t wq = { NA_DTYPE_Q8_0, 1, 32, blk, NA_LAYOUT_ROWS };
    float q[2] = { 1.0f, 0.0f }, kc[4] = { 1.0f, 0.0f, 0.0f, 0.0f }, vc[4] = { 1, 2, 3, 4 };
    float ao[2], p0 = 1.0f / (1.0f + expf(-1.0f / sqrtf(2.0f)));
    uint16_t d = na_f32_to_f16(0.5f);
    int pos = 1, i;

    na_ref_softmax(sm, 3, 1);
    NA_CHECK(na_close_ratio(sm, exp_sm, 3, 1e-7, 1e-6) <= 1.0);
    /* head_dim 4: pair 0 turns by pos·1, pair 2 by pos·10000^(-2/4) = 0.01 */
    na_ref_rope(rv, 1, &pos, r4, 1);
    NA_CHECK(na_close_ratio(rv, exp_rv, 4, 1e-7, 1e-6) <= 1.0);
    na_ref_rope(nv, 1, &pos, n4, 1);
    NA_CHECK(na_close_ratio(nv, exp_nv, 4, 1e-7, 1e-6) <= 1.0);
    /* partial: 10000^(-2/4) for the second pair, elements 4 and 5 stay */
    na_ref_rope(pv, 1, &pos, p6, 1);
    NA_CHECK(na_close_ratio(pv, exp_pv, 6, 1e-7, 1e-6) <= 1.0);
    na_rope_destroy(p6);
    na_rope_destroy(n4);
    na_rope_destroy(r4);
    na_ref_rmsnorm(ro, rx, rw, 2, 0.0f, 1);
    NA_CHECK(na_close_ratio(ro, exp_ro, 2, 1e-7, 1e-6) <= 1.0);
    na_ref_swiglu(g, u, 1);
    NA_CHECK(fabsf(g[0] - 2.0f * 0.73105858f) < 1e-6f);
    /* Q8_0: d = 0.5, q = 0..31 -> row · ones = 0.5 * 496 (the ones as q 127,
     * d = f16(1/127): within 2^-11) */
    memcpy(blk, &d, 2);
    for (i = 0; i < 32; i++) {
        blk[2 + i] = (uint8_t)i;
        xq[i] = 1.0f;
    }
    na_ref_matmul(ref_k, &yq, xq, &wq, 1);
    NA_CHECK(fabsf(yq - 248.0f) < 248.0f / 2048.0f);
    NA_CHECK(na_ref_weight_at(&wq, 0, 7) == 3.5f);
    /* one head, head_dim 2, scores (1/sqrt 2, 0): o = p0 v0 + (1-p0) v1 */
    na_ref_attn_decode(ref_k, ao, q, kc, vc, NA_DTYPE_F32, 2, 1, 1, 2);
    NA_CHECK(fabsf(ao[0] - (p0 * 1 + (1 - p0) * 3)) < 1e-6f);
    NA_CHECK(fabsf(ao[1] - (p0 * 2 + (1 - p0) * 4)) < 1e-6f);
    /* ctx 1 returns v0 exactly */
    na_ref_attn_decode(ref_k, ao, q, kc, vc, NA_DTYPE_F32, 1, 1, 1, 2);
    NA_CHECK(ao[0] == 1.0f && ao[1] == 2.0f);
}

/* ---- matmul --------------------------------------------------------------- */

/* A random weight (rows, cols) of dtype dt in a fresh buffer (*buf to free). */
static na_tensor_t make_weight(na_dtype_t dt, int rows, int cols, void **buf)
{
    size_t n = (size_t)rows * cols, i;
    na_tensor_t w = { dt, rows, cols, NULL, NA_LAYOUT_ROWS };
    size_t bytes = na_dtype_bytes(dt, n);
    uint8_t *p = malloc(bytes ? bytes : 1);

    if (p == NULL)
        exit(1);
    for (i = 0; i < n; i++) {
        float f = na_rng_uniform(&rng) * 2.0f - 1.0f;
        if (dt == NA_DTYPE_F32) {
            memcpy(p + 4 * i, &f, 4);
        } else if (dt == NA_DTYPE_F16 || dt == NA_DTYPE_BF16) {
            uint16_t h = dt == NA_DTYPE_F16 ? na_f32_to_f16(f) : na_f32_to_bf16(f);
            memcpy(p + 2 * i, &h, 2);
        } else if (i % NA_Q8_0_BLOCK == 0) {
            uint8_t *blk = p + (i / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
            uint16_t d = na_f32_to_f16(0.001f + 0.02f * na_rng_uniform(&rng));
            int j;
            memcpy(blk, &d, 2);
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                blk[2 + j] = (uint8_t)(int8_t)((int)(na_rng_u64(&rng) % 255) - 127);
        }
    }
    w.data = p;
    *buf = p;
    return w;
}

static void check_matmul(na_dtype_t dt, int rows, int cols, int batch)
{
    void *buf;
    na_tensor_t w = make_weight(dt, rows, cols, &buf);
    float *x = falloc((size_t)batch * cols), *yr = falloc((size_t)batch * rows);

    na_rng_fill(&rng, x, (size_t)batch * cols, -1.0f, 1.0f);
    if (dt == NA_DTYPE_BF16 && gemm_bf16 && batch >= NA_CPU_GEMM_BF16_MIN_BATCH)
        na_ref_matmul_xbf16(yr, x, &w, batch);   /* inputs rounded to bf16 (ref.h) */
    else
        na_ref_matmul(ref_k, yr, x, &w, batch);
    na_test_check_mm(cpu_k, &w, x, batch, yr, 2e-5);
    free(yr);
    free(x);
    free(buf);
}

/* The rows of a batch of `batch` (kernels k, weight w, inputs x) that differ
 * from the same row computed alone (batch 1): yb and y1 are scratch. */
static int rows_off_batch1(na_kernels_t *k, const na_tensor_t *w, float *x, int batch,
                           float *yb, float *y1)
{
    int b, bad = 0;

    NA_CHECK_OK(na_test_mm(k, yb, x, w, batch));
    for (b = 0; b < batch; b++) {
        NA_CHECK_OK(na_test_mm(k, y1, x + (size_t)b * w->cols, w, 1));
        bad += memcmp(y1, yb + (size_t)b * w->rows, sizeof(float) * (size_t)w->rows) != 0;
    }
    return bad;
}

static void test_matmul(void)
{
    static const int shapes[][2] = { { 1, 1 }, { 7, 31 }, { 31, 7 }, { 33, 65 }, { 65, 1000 },
                                     { 257, 288 }, { 288, 257 }, { 1000, 33 }, { 300, 1000 } };
    static const int q8_shapes[][2] = { { 1, 32 }, { 7, 64 }, { 33, 288 }, { 257, 1024 },
                                        { 1000, 96 } };
    /* from 16: the dequantise+sgemm path, or the GEMMs in the weight type
     * (kernels/cpu/cpu.h: Q8_0 from batch 8 with AVX512-VNNI, 20 without;
     * BF16 with AVX512-BF16 from NA_CPU_GEMM_BF16_MIN_BATCH; F32/F16 with
     * AVX-512F from NA_CPU_GEMM_F32_MIN_BATCH: 70 = 5 full tiles of 12 and
     * a partial one) */
    static const int batches[] = { 1, 3, 8, 16, 17, 20, 24, 37, 70 };
    size_t s, bi;
    int dt;

    for (dt = 0; dt <= NA_DTYPE_Q8_0; dt++)       /* the others: test_quant.c */
        for (bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
            if (dt == NA_DTYPE_Q8_0) {
                for (s = 0; s < sizeof(q8_shapes) / sizeof(q8_shapes[0]); s++)
                    check_matmul((na_dtype_t)dt, q8_shapes[s][0], q8_shapes[s][1], batches[bi]);
            } else {
                for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
                    check_matmul((na_dtype_t)dt, shapes[s][0], shapes[s][1], batches[bi]);
            }
        }
}

/* Q8_0 weights take their inputs in Q8 blocks (kernels/ref/ref.h): known
 * values, an all-zero block, rounding to nearest even, and a NaN or Inf input
 * making the output non-finite on every backend. */
static void test_q8_inputs(void)
{
    uint8_t blk[2 * NA_Q8_0_BLOCK_SIZE];
    float x[64], y, d;
    int8_t q[32];
    na_tensor_t w = { NA_DTYPE_Q8_0, 1, 64, blk, NA_LAYOUT_ROWS };
    uint16_t one = na_f32_to_f16(1.0f);
    int i, t;

    for (i = 0; i < 32; i++)
        x[i] = (float)i;                 /* amax 31: d = 31/127 rounded to f16 */
    d = na_ref_quantize_q8(x, q);
    NA_CHECK(d == na_f16_to_f32(na_f32_to_f16(31.0f / 127.0f)) && d != 31.0f / 127.0f);
    NA_CHECK(q[31] == 127 && q[0] == 0);
    for (i = 0; i < 32; i++)
        x[i] = 0.0f;
    NA_CHECK(na_ref_quantize_q8(x, q) == 0.0f && q[5] == 0);
    x[0] = 127.0f;      /* d = 1: x = 2.5 rounds to 2, 3.5 to 4, -2.5 to -2 */
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    NA_CHECK(na_ref_quantize_q8(x, q) == 1.0f);
    NA_CHECK(q[0] == 127 && q[1] == 2 && q[2] == 4 && q[3] == -2);

    /* weights d = 1, q = 1: y = sum of the quantised inputs times d_x: 32 x
     * 127 x (d1 - d1 / 2), d1 = f16(1/127) (exact in f32) */
    for (i = 0; i < 2; i++) {
        memcpy(blk + i * NA_Q8_0_BLOCK_SIZE, &one, 2);
        memset(blk + i * NA_Q8_0_BLOCK_SIZE + 2, 1, NA_Q8_0_BLOCK);
    }
    for (i = 0; i < 64; i++)
        x[i] = i < 32 ? 1.0f : -0.5f;
    d = na_f16_to_f32(na_f32_to_f16(1.0f / 127.0f));
    na_ref_matmul(ref_k, &y, x, &w, 1);
    NA_CHECK(y == 2032.0f * d);
    for (t = 0; t < 2; t++) {
        NA_CHECK_OK(na_test_mm(cpu_k[t], &y, x, &w, 1));
        NA_CHECK(y == 2032.0f * d);
        x[40] = NAN;
        NA_CHECK_OK(na_test_mm(cpu_k[t], &y, x, &w, 1));
        NA_CHECK_MSG(isnan(y), "q8 input NaN: %g", y);
        x[40] = INFINITY;
        NA_CHECK_OK(na_test_mm(cpu_k[t], &y, x, &w, 1));
        NA_CHECK_MSG(!isfinite(y), "q8 input Inf: %g", y);
        x[40] = -0.5f;
    }
    x[40] = NAN;
    na_ref_matmul(ref_k, &y, x, &w, 1);
    NA_CHECK(isnan(y));
}

/* Below the sgemm/tile crossovers (batch < 16 for F32, < 20 for the other
 * dtypes), and at every batch for Q8_0 (its GEMMs, kernels/cpu/cpu.h), every
 * row of a batched matmul is bit-identical to the same row at batch 1: the
 * engine relies on it for batched == one-at-a-time greedy tokens. Shapes
 * with 8- and scalar tails (Q8_0: 1, 2, 3 blocks past a multiple of 4; rows
 * and batches not multiples of the micro-tiles), 1 and 2 threads. */
static void test_matmul_batch_exact(void)
{
    static const int shapes[][2] = { { 7, 31 }, { 33, 65 }, { 257, 288 }, { 300, 1000 } };
    /* 33x4096: more inputs than one pass of the Q8_0 GEMM holds (kernels/cpu/cpu_gemm_q8.c) */
    static const int q8_shapes[][2] = { { 7, 64 }, { 257, 288 }, { 33, 1024 }, { 100, 224 },
                                        { 33, 4096 } };
    static const int batches[] = { 2, 3, 4, 5, 7, 9, 15, 8, 19, 20, 21, 37, 64 };
    size_t s, bi;
    int dt, t;

    for (dt = 0; dt <= NA_DTYPE_Q8_0; dt++)       /* the others: test_quant.c */
        for (s = 0; s < (dt == NA_DTYPE_Q8_0 ? 5u : 4u); s++) {
            int q8 = dt == NA_DTYPE_Q8_0;
            int rows = q8 ? q8_shapes[s][0] : shapes[s][0];
            int cols = q8 ? q8_shapes[s][1] : shapes[s][1];
            size_t nb = q8 ? sizeof(batches) / sizeof(batches[0]) : 7;   /* Q8_0: all */
            void *buf;
            na_tensor_t w = make_weight((na_dtype_t)dt, rows, cols, &buf);
            float *x = falloc((size_t)64 * cols), *yb = falloc((size_t)64 * rows);
            float *y1 = falloc((size_t)rows);

            na_rng_fill(&rng, x, (size_t)64 * cols, -1.0f, 1.0f);
            for (t = 0; t < 2; t++)
                for (bi = 0; bi < nb; bi++) {
                    int bad = rows_off_batch1(cpu_k[t], &w, x, batches[bi], yb, y1);
                    NA_CHECK_MSG(bad == 0, "matmul %s %dx%d batch %d threads %d: %d rows "
                                 "differ from batch 1", na_dtype_name((na_dtype_t)dt), rows,
                                 cols, batches[bi], t + 1, bad);
                }
            free(y1);
            free(yb);
            free(x);
            free(buf);
        }
}

/* With batch_invariant set (na_engine_create sets it for every engine), every
 * row of a matmul is bit-identical to the same row at batch 1 at every batch
 * size and every weight type of this file, the prefill sizes included (F32 /
 * F16 / BF16 from batch 8: the panel kernel of kernels/cpu/cpu_matmul.c).
 * Shapes: rows not multiples of its 4-row groups, panels of several sizes,
 * 8- and scalar tails, a row longer than one part (NA_CPU_PANEL_KC 4096:
 * 4139 = 4096 + 32 + 8 + 3); batches not multiples of its 3 inputs. */
static void test_matmul_invariant(void)
{
    static const int shapes[][2] = { { 7, 40 }, { 70, 1000 }, { 13, 4139 }, { 130, 256 } };
    static const int batches[] = { 8, 9, 10, 11, 64, 70, 131 };
    size_t s, bi;
    int dt, t;

    for (t = 0; t < 2; t++)
        cpu_k[t]->batch_invariant = 1;
    for (dt = 0; dt <= NA_DTYPE_Q8_0; dt++)
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            int rows = shapes[s][0], cols = shapes[s][1];
            void *buf;
            na_tensor_t w;
            float *x, *yb, *y1;

            if (dt == NA_DTYPE_Q8_0)
                cols = cols / NA_Q8_0_BLOCK * NA_Q8_0_BLOCK;
            w = make_weight((na_dtype_t)dt, rows, cols, &buf);
            x = falloc((size_t)131 * cols);
            yb = falloc((size_t)131 * rows);
            y1 = falloc((size_t)rows);
            na_rng_fill(&rng, x, (size_t)131 * cols, -1.0f, 1.0f);
            for (t = 0; t < 2; t++)
                for (bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
                    int bad = rows_off_batch1(cpu_k[t], &w, x, batches[bi], yb, y1);
                    NA_CHECK_MSG(bad == 0, "batch_invariant matmul %s %dx%d batch %d threads "
                                 "%d: %d rows differ from batch 1",
                                 na_dtype_name((na_dtype_t)dt), rows, cols, batches[bi], t + 1,
                                 bad);
                }
            free(y1);
            free(yb);
            free(x);
            free(buf);
        }
    for (t = 0; t < 2; t++)
        cpu_k[t]->batch_invariant = 0;
}

/* BF16 weights of rows % 32 == 0, even cols and enough elements are placed
 * on a cpu backend with AVX512-BF16 as panels (NA_LAYOUT_BF16X32,
 * kernels/cpu/cpu_pack.c), and every batch takes kernels/cpu/cpu_gemm_bf16.c
 * (its small-batch passes, then the GEMM) with the inputs rounded to bf16:
 * each output bit-identical to the same input alone (batch 1), with and
 * without batch_invariant, 1 and 2 threads; within kernels/ref's
 * na_ref_matmul_xbf16; the embedding rows the model's. Shapes leave a tail
 * of panels past the groups of 4 and input tiles past the groups of 4.
 * Without AVX512-BF16 (or NA_CPU_ISA=v3 / v4) the layout stays row-major. */
static void test_matmul_bf16x32(void)
{
    static const int shapes[][2] = { { 64, 1024 }, { 96, 2050 }, { 160, 512 } };
    static const int batches[] = { 2, 3, 4, 5, 7, 11, 12, 13, 24, 41 };
    static const int toks[] = { 0, 31, 32, 63, 5 };
    size_t s, bi;
    int t, b, inv, r, c;

    for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        void *buf;
        na_tensor_t w = make_weight(NA_DTYPE_BF16, rows, cols, &buf);
        float *x = falloc((size_t)41 * cols), *yb = falloc((size_t)41 * rows);
        float *y1 = falloc((size_t)41 * rows), *yr = falloc((size_t)41 * rows);
        float *emb = falloc((size_t)5 * cols);

        na_rng_fill(&rng, x, (size_t)41 * cols, -1.0f, 1.0f);
        for (t = 0; t < 2; t++) {
            na_kernels_t *k = cpu_k[t];
            na_kbuf_t eb = na_kbuf_host(emb, sizeof(float) * 5 * (size_t)cols);
            na_kweight_t pw;
            int bad = 0;
            NA_CHECK_OK(k->ops->place(k, &w, &pw));
            NA_CHECK_MSG(pw.layout == (gemm_bf16 ? NA_LAYOUT_BF16X32 : NA_LAYOUT_ROWS),
                         "bf16 %d x %d placed as layout %d (AVX512-BF16 GEMM: %d)", rows, cols,
                         pw.layout, gemm_bf16);
            NA_CHECK_OK(k->ops->embed(k, &eb, &pw, toks, 5));
            for (r = 0; r < 5; r++)
                for (c = 0; c < cols; c++)
                    bad += emb[(size_t)r * cols + c] !=
                           na_bf16_to_f32(((const uint16_t *)w.data)[(size_t)toks[r] * cols + c]);
            NA_CHECK_MSG(bad == 0, "embed of the bf16 %d x %d placed copy: %d values differ",
                         rows, cols, bad);
            k->ops->unplace(k, &pw);
            if (!gemm_bf16)
                continue;                       /* row-major: test_matmul_h16 */
            for (inv = 0; inv < 2; inv++) {
                k->batch_invariant = inv;
                for (b = 0; b < 41; b++)
                    NA_CHECK_OK(na_test_mm(k, y1 + (size_t)b * rows, x + (size_t)b * cols, &w, 1));
                for (bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++) {
                    int nb = batches[bi];
                    bad = 0;
                    memset(yb, 0xff, sizeof(float) * (size_t)nb * rows);
                    NA_CHECK_OK(na_test_mm(k, yb, x, &w, nb));
                    for (b = 0; b < nb; b++)
                        bad += memcmp(y1 + (size_t)b * rows, yb + (size_t)b * rows,
                                      sizeof(float) * rows) != 0;
                    NA_CHECK_MSG(bad == 0, "matmul bf16 panels %dx%d batch %d threads %d "
                                 "invariant %d: %d rows differ from batch 1", rows, cols, nb,
                                 t + 1, inv, bad);
                }
            }
            k->batch_invariant = 0;
        }
        if (gemm_bf16)
            for (bi = 0; bi < 3; bi++) {
                int nb = bi == 0 ? 1 : bi == 1 ? 5 : 41;
                na_ref_matmul_xbf16(yr, x, &w, nb);
                na_test_check_mm(cpu_k, &w, x, nb, yr, 2e-5);
            }
        free(emb);
        free(yr);
        free(y1);
        free(yb);
        free(x);
        free(buf);
    }
}

/* F16 / BF16 weights at batches 1..41 and 64, 131 (kernels/cpu/cpu_gemm_h16.c
 * from batch 2 with AVX-512, 32 with AVX2; the row kernel below), with and
 * without batch_invariant, 1 and 2 threads: every output bit-identical to
 * the same row at batch 1, and within the tolerance of kernels/ref. Rows not
 * multiples of the 4-row tiles nor of the tasks' split, columns with 8- and
 * scalar tails, a row in two parts (4139 = 4096 + 32 + 8 + 3: the lanes
 * kept between parts, and BF16's even/odd lanes put back before the tails),
 * a panel of 48 rows (8195 columns) and rows shorter than one block; the
 * long rows at a few batches (ASan builds run this too). */
static void test_matmul_h16(void)
{
    /* shapes[s][2]: every batch (1), or 1-5, 12, 13, 41, 131 (the long rows) */
    static const int shapes[][3] = { { 5, 33, 1 }, { 70, 300, 1 }, { 3, 7, 1 }, { 13, 4139, 0 },
                                     { 53, 8195, 0 } };
    static const na_dtype_t dts[] = { NA_DTYPE_F16, NA_DTYPE_BF16 };
    int batches[43], nbat = 0, di, t, b, inv, bi;
    size_t s;

    for (b = 1; b <= 41; b++)
        batches[nbat++] = b;
    batches[nbat++] = 64;
    batches[nbat++] = 131;
    for (di = 0; di < 2; di++)
        for (s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            int rows = shapes[s][0], cols = shapes[s][1];
            void *buf;
            na_tensor_t w = make_weight(dts[di], rows, cols, &buf);
            float *x = falloc((size_t)131 * cols), *yb = falloc((size_t)131 * rows);
            float *y1 = falloc((size_t)131 * rows);

            na_rng_fill(&rng, x, (size_t)131 * cols, -1.0f, 1.0f);
            for (t = 0; t < 2; t++) {
                for (b = 0; b < 131; b++)      /* batch 1 of every input */
                    NA_CHECK_OK(na_test_mm(cpu_k[t], y1 + (size_t)b * rows, x + (size_t)b * cols, &w,
                                   1));
                for (inv = 0; inv < 2; inv++) {
                    cpu_k[t]->batch_invariant = inv;
                    for (bi = 0; bi < nbat; bi++) {
                        int bad = 0, nb = batches[bi];
                        if (!shapes[s][2] && nb > 5 && nb != 12 && nb != 13 && nb != 41 &&
                            nb != 131)
                            continue;           /* the long rows: a few batches */
                        if (!inv && dts[di] == NA_DTYPE_BF16 && gemm_bf16 &&
                            nb >= NA_CPU_GEMM_BF16_MIN_BATCH)
                            continue;           /* bf16 inputs (test_matmul) */
                        memset(yb, 0xff, sizeof(float) * (size_t)nb * rows);
                        NA_CHECK_OK(na_test_mm(cpu_k[t], yb, x, &w, nb));
                        for (b = 0; b < nb; b++)
                            bad += memcmp(y1 + (size_t)b * rows, yb + (size_t)b * rows,
                                          sizeof(float) * rows) != 0;
                        /* without batch_invariant the AVX2 copy may take sgemm */
                        NA_CHECK_MSG(bad == 0 || (!inv && !gemm_h16_any),
                                     "matmul %s %dx%d batch %d threads %d invariant %d: %d "
                                     "rows differ from batch 1", na_dtype_name(dts[di]), rows,
                                     cols, nb, t + 1, inv, bad);
                    }
                }
                cpu_k[t]->batch_invariant = 0;
            }
            free(y1);
            free(yb);
            free(x);
            free(buf);
            if (cols < 5000) {                  /* against kernels/ref */
                check_matmul(dts[di], rows, cols, 5);
                check_matmul(dts[di], rows, cols, 41);
            }
        }
}

/* ---- element-wise ops ---------------------------------------------------- */
static void test_elementwise(void)
{
    static const int dims[] = { 1, 7, 31, 33, 65, 257, 288, 1000 };
    static const int hds[] = { 2, 48, 64, 128 };
    size_t d;
    int batch, t;

    for (d = 0; d < sizeof(dims) / sizeof(dims[0]); d++)
        for (batch = 1; batch <= 3; batch += 2) {
            int n = dims[d];
            size_t tot = (size_t)n * batch;
            float *x = falloc(tot), *w = falloc(n), *a = falloc(tot), *b = falloc(tot);
            float *up = falloc(tot);
            na_rng_fill(&rng, x, tot, -4.0f, 4.0f);
            na_rng_fill(&rng, w, n, -1.0f, 1.0f);
            na_rng_fill(&rng, up, tot, -2.0f, 2.0f);
            for (t = 0; t < 2; t++) {
                na_kernels_t *c = cpu_k[t];
                na_ref_rmsnorm(a, x, w, n, 1e-5f, batch);
                NA_CHECK_OK(rmsnorm(c, b, x, w, n, batch));
                NA_CHECK_MSG(na_close_ratio(b, a, tot, 1e-6, 1e-5) <= 1.0, "rmsnorm n %d", n);
                memcpy(a, x, tot * 4);
                memcpy(b, x, tot * 4);
                na_ref_softmax(a, n, batch);
                NA_CHECK_OK(softmax(c, b, n, batch));
                NA_CHECK_MSG(na_close_ratio(b, a, tot, 1e-7, 1e-5) <= 1.0, "softmax n %d", n);
                memcpy(a, x, tot * 4);
                memcpy(b, x, tot * 4);
                na_ref_swiglu(a, up, tot);
                NA_CHECK_OK(swiglu(c, b, up, tot));
                /* one exp (kernels/expf.h), one order: the same bits */
                NA_CHECK_MSG(memcmp(b, a, tot * 4) == 0, "swiglu n %d: not the reference's bits",
                             n);
            }
            free(up);
            free(b);
            free(a);
            free(w);
            free(x);
        }
    for (d = 0; d < sizeof(hds) / sizeof(hds[0]); d++) {
        int hd = hds[d], nh = 3, batch = 3, pos[3] = { 0, 17, 4999 }, v;
        size_t tot = (size_t)batch * nh * hd;
        float *x = falloc(tot), *a = falloc(tot), *b = falloc(tot), ff[512];
        na_rng_fill(&rng, x, tot, -1.0f, 1.0f);
        for (v = 0; v < hd / 2 && v < 512; v++)
            ff[v] = 1.0f + (float)(v % 5);
        /* NORM, NEOX, partial NEOX with divisors, yarn (mscale != 1) */
        for (v = 0; v < 4; v++) {
            int nd = v == 2 && hd >= 4 ? hd / 2 - (hd / 2) % 2 : hd;
            na_rope_style_t sty = v == 0 || v == 3 ? NA_ROPE_NORM : NA_ROPE_NEOX;
            na_rope_t *rr = mkrope(ref_k, hd, nd, sty, v == 3 ? 0.25f : 1.0f, v == 2 ? ff : NULL);
            for (t = 0; t < 2; t++) {
                na_rope_t *rc = mkrope(cpu_k[t], hd, nd, sty, v == 3 ? 0.25f : 1.0f,
                                       v == 2 ? ff : NULL);
                memcpy(a, x, tot * 4);
                memcpy(b, x, tot * 4);
                na_ref_rope(a, nh, pos, rr, batch);
                NA_CHECK_OK(rope(cpu_k[t], b, nh, pos, rc, batch));
                /* the same table and formula; the compilers' FMA contraction
                 * differs (ref rounds each product): a few ulp */
                NA_CHECK_MSG(na_close_ratio(b, a, tot, 1e-6, 1e-6) <= 1.0, "rope hd %d variant %d",
                             hd, v);
                /* a table of another backend is refused */
                NA_CHECK(rope(cpu_k[t], b, nh, pos, rr, batch) == NA_ERR_INVALID);
                na_rope_destroy(rc);
            }
            na_rope_destroy(rr);
        }
        free(b);
        free(a);
        free(x);
    }
}

/* ---- attention ------------------------------------------------------------ */

/* The KV dtypes every attention test runs over. */
static const na_dtype_t kv_dtypes[] = { NA_DTYPE_F32, NA_DTYPE_F16, NA_DTYPE_BF16 };
#define N_KV_DTYPES ((int)(sizeof(kv_dtypes) / sizeof(kv_dtypes[0])))

/* Random KV of n rows of row_elems in dtype dt (f16, bf16 or f32), in [-1, 1). */
static void *make_kv(na_dtype_t dt, size_t n_elems)
{
    return na_test_rand_dtype(&rng, dt, n_elems);
}

static void check_decode(na_dtype_t dt, int ctx, int n_heads, int n_kv, int hd, float qmag)
{
    size_t qn = (size_t)n_heads * hd, kvn = (size_t)ctx * n_kv * hd;
    float *q = falloc(qn), *ref = falloc(qn), *out = falloc(qn);
    void *kc = make_kv(dt, kvn), *vc = make_kv(dt, kvn);
    int t;

    na_rng_fill(&rng, q, qn, -qmag, qmag);
    na_ref_attn_decode(ref_k, ref, q, kc, vc, dt, ctx, n_heads, n_kv, hd);
    for (t = 0; t < 2; t++) {
        double r;
        memset(out, 0xff, qn * 4);
        NA_CHECK_OK(na_kernels_attn_decode_host(cpu_k[t], out, q, kc, vc, dt, ctx, n_heads,
                                                n_kv, hd));
        r = na_close_ratio(out, ref, qn, 2e-5, 1e-4);
        NA_CHECK_MSG(r <= 1.0, "decode %s ctx %d heads %d/%d hd %d threads %d: ratio %g",
                     na_dtype_name(dt), ctx, n_heads, n_kv, hd, t + 1, r);
    }
    free(vc);
    free(kc);
    free(out);
    free(ref);
    free(q);
}

static void test_decode(void)
{
    static const int ctxs[] = { 1, 2, 63, 1025, 5000 };
    /* 36: not a multiple of 8 -> ref path; 40, 48, 120: odd numbers of
     * vectors left after the PV kernel's widest blocks (5, 6, 8 + 7) */
    static const int hds[] = { 64, 128, 48, 36, 40, 120 };
    static const int ratios[] = { 1, 2, 4, 8 };
    size_t c, h, r;
    int dt;

    for (dt = 0; dt < N_KV_DTYPES; dt++) {
        na_dtype_t kd = kv_dtypes[dt];
        for (c = 0; c < 5; c++)
            for (h = 0; h < sizeof(hds) / sizeof(hds[0]); h++)
                for (r = 0; r < 4; r++) {
                    int n_kv = ctxs[c] >= 5000 ? 1 : 2;
                    if (ctxs[c] >= 5000 && (hds[h] < 64 || hds[h] == 120))
                        continue;               /* keep the scalar reference fast */
                    check_decode(kd, ctxs[c], ratios[r] * n_kv, n_kv, hds[h], 1.0f);
                }
        /* group sizes that are not powers of two, or above the core's 16 */
        check_decode(kd, 700, 3, 1, 64, 1.0f);
        check_decode(kd, 700, 12, 2, 64, 1.0f);
        check_decode(kd, 130, 40, 2, 32, 1.0f);
        /* above 16 with one range per thread (each 16-head piece re-walks the
         * range's chunks, and restarts the prefetch cursor) */
        check_decode(kd, 1100, 40, 2, 32, 1.0f);
        /* peaked softmax: large scores exercise max tracking across chunks */
        check_decode(kd, 3000, 8, 2, 64, 8.0f);
    }
}

static void check_prefill(na_dtype_t dt, int n_tok, int pos0, int n_heads, int n_kv, int hd)
{
    int ctx = pos0 + n_tok, t;
    size_t qn = (size_t)n_tok * n_heads * hd, kvn = (size_t)ctx * n_kv * hd;
    float *q = falloc(qn), *ref = falloc(qn), *out = falloc(qn);
    void *kc = make_kv(dt, kvn), *vc = make_kv(dt, kvn);

    na_rng_fill(&rng, q, qn, -1.0f, 1.0f);
    na_ref_attn_prefill(ref_k, ref, q, kc, vc, dt, n_tok, pos0, n_heads, n_kv, hd);
    for (t = 0; t < 2; t++) {
        double r;
        memset(out, 0xff, qn * 4);
        NA_CHECK_OK(prefill(cpu_k[t], out, q, kc, vc, dt, n_tok, pos0, n_heads, n_kv, hd));
        r = na_close_ratio(out, ref, qn, 2e-5, 1e-4);
        NA_CHECK_MSG(r <= 1.0, "prefill %s n_tok %d pos0 %d heads %d/%d hd %d threads %d: %g",
                     na_dtype_name(dt), n_tok, pos0, n_heads, n_kv, hd, t + 1, r);
    }
    free(vc);
    free(kc);
    free(out);
    free(ref);
    free(q);
}

static void test_prefill(void)
{
    int dt;
    for (dt = 0; dt < N_KV_DTYPES; dt++) {
        na_dtype_t kd = kv_dtypes[dt];
        check_prefill(kd, 1, 0, 4, 4, 64);
        check_prefill(kd, 7, 0, 8, 2, 48);
        check_prefill(kd, 33, 5, 8, 1, 64);
        check_prefill(kd, 65, 100, 4, 2, 128);
        check_prefill(kd, 17, 3, 6, 3, 36);
        /* blocks of query tokens per task (na_cpu_pre_qb): MHA (8 per task,
         * a short last block), group 5 (3 per task, 15 heads), a head too
         * large for the blocked path (one token per task) */
        check_prefill(kd, 21, 3, 6, 6, 40);
        check_prefill(kd, 11, 0, 10, 2, 16);
        check_prefill(kd, 9, 2, 2, 2, 264);
    }
}

/* Partials folded over spans of different splits and merged (na_kattn_merge)
 * give the same result as one pass and as the reference decode. */
static void test_partials(void)
{
    const int group = 4, hd = 64, ctx = 1500;
    static const int splits[][4] = { { 1500, 0, 0, 0 }, { 1, 1499, 0, 0 },
                                     { 700, 64, 1, 735 }, { 63, 65, 1000, 372 } };
    int dt, s, t, i;

    for (dt = 0; dt < N_KV_DTYPES; dt++) {
        na_dtype_t kd = kv_dtypes[dt];
        size_t esz = na_dtype_bytes(kd, 1), kvn = (size_t)ctx * 2 * hd;   /* 2 KV heads, use head 1 */
        void *kc = make_kv(kd, kvn), *vc = make_kv(kd, kvn);
        float q[4 * 64], ref[4 * 64 * 2], qfull[8 * 64], out[4 * 64];
        float acc[4 * 64], acc2[4 * 64];
        na_kattn_stat_t st[4], st2[4];
        float scale = 1.0f / sqrtf((float)hd);

        na_rng_fill(&rng, q, group * hd, -2.0f, 2.0f);
        /* reference: decode with 8 heads / 2 KV heads; heads 4..7 use KV head 1 */
        memset(qfull, 0, sizeof(qfull));
        memcpy(qfull + group * hd, q, sizeof(q));
        na_ref_attn_decode(ref_k, ref, qfull, kc, vc, kd, ctx, 8, 2, hd);
        for (s = 0; s < 4; s++)
            for (t = 0; t < 3; t++) {           /* 0: ref partial, 1-2: cpu 1/2 threads */
                na_kernels_t *k = t == 0 ? ref_k : cpu_k[t - 1];
                int pos = 0;
                na_kattn_init(st, acc, group, hd);
                for (i = 0; i < 4 && splits[s][i] > 0; i++) {
                    size_t off = ((size_t)pos * 2 + 1) * hd * esz;
                    /* next: the following span's K rows (a prefetch hint) */
                    na_kv_span_t sp = { (const uint8_t *)kc + off, (const uint8_t *)vc + off,
                                        (size_t)2 * hd, splits[s][i],
                                        (const uint8_t *)kc + off +
                                            (size_t)splits[s][i] * 2 * hd * esz,
                                        (size_t)(i < 3 ? splits[s][i + 1] : 0) * 2 * hd * esz };
                    na_kattn_init(st2, acc2, group, hd);
                    k->ops->attn_partial(k, st2, acc2, q, group, hd, &sp, 1, kd, scale);
                    na_kattn_merge(st, acc, st2, acc2, group, hd);
                    pos += splits[s][i];
                }
                NA_CHECK(pos == ctx);
                na_kattn_finalize(out, st, acc, group, hd);
                NA_CHECK_MSG(na_close_ratio(out, ref + group * hd, group * hd, 2e-5, 1e-4) <= 1.0,
                             "partials %s split %d backend %d", na_dtype_name(kd), s, t);
            }
        free(vc);
        free(kc);
    }
}

/* ---- buffers, events and the new ops ------------------------------------ */

/* Embedding lookup from every weight dtype, cpu against ref through the
 * table, on awkward widths; both dequantise exactly, so they agree bit for
 * bit. Output into a device buffer of refdev too (downloaded). */
static void test_embed(void)
{
    static const int tokens[] = { 0, 36, 5, 5, 17, 1, 36 };
    const int n = 7, vocab = 37;
    na_kernels_t *dev = NULL;
    int dt, t;

    NA_CHECK_OK(na_kernels_create("refdev", 1, &dev));
    for (dt = 0; dt <= NA_DTYPE_Q8_0 && dev != NULL; dt++) {   /* others: test_quant.c */
        int cols = dt == NA_DTYPE_Q8_0 ? 96 : 33;
        void *buf;
        na_tensor_t w = make_weight((na_dtype_t)dt, vocab, cols, &buf);
        float *xr = falloc((size_t)n * cols), *xc = falloc((size_t)n * cols);
        na_kbuf_t xrb = na_kbuf_host(xr, F32B((size_t)n * cols));
        na_kbuf_t xcb = na_kbuf_host(xc, F32B((size_t)n * cols));
        na_kbuf_t *xd = NULL;
        na_kweight_t pr, pc, pd;
        int r, j, bad = 0;

        NA_CHECK_OK(ref_k->ops->place(ref_k, &w, &pr));
        NA_CHECK(pr.buf.host == w.data);                  /* placed without a copy */
        NA_CHECK_OK(ref_k->ops->embed(ref_k, &xrb, &pr, tokens, n));
        for (r = 0; r < n; r++)
            for (j = 0; j < cols; j++)
                bad += xr[(size_t)r * cols + j] != na_ref_weight_at(&w, tokens[r], j);
        NA_CHECK_MSG(bad == 0, "ref embed %s: %d values wrong", na_dtype_name((na_dtype_t)dt),
                     bad);
        for (t = 0; t < 2; t++) {
            memset(xc, 0xff, F32B((size_t)n * cols));
            NA_CHECK_OK(cpu_k[t]->ops->place(cpu_k[t], &w, &pc));
            NA_CHECK_OK(cpu_k[t]->ops->embed(cpu_k[t], &xcb, &pc, tokens, n));
            NA_CHECK_MSG(memcmp(xc, xr, F32B((size_t)n * cols)) == 0, "cpu embed %s",
                         na_dtype_name((na_dtype_t)dt));
            cpu_k[t]->ops->unplace(cpu_k[t], &pc);
        }
        NA_CHECK_OK(dev->ops->buf_alloc(dev, F32B((size_t)n * cols), NA_KMEM_DEVICE, &xd));
        NA_CHECK_OK(dev->ops->place(dev, &w, &pd));
        if (xd != NULL) {
            NA_CHECK(xd->host == NULL && xd->dev != NULL);
            memset(xc, 0, F32B((size_t)n * cols));
            NA_CHECK_OK(dev->ops->embed(dev, xd, &pd, tokens, n));
            NA_CHECK_OK(dev->ops->download(dev, xc, xd, F32B((size_t)n * cols)));
            NA_CHECK_OK(na_kernels_finish(dev));
            NA_CHECK(memcmp(xc, xr, F32B((size_t)n * cols)) == 0);
        }
        dev->ops->unplace(dev, &pd);
        dev->ops->buf_free(dev, xd);
        ref_k->ops->unplace(ref_k, &pr);
        free(xc);
        free(xr);
        free(buf);
    }
    na_kernels_destroy(dev);
}

/* Residual add and KV store (f32 -> f32/f16), cpu against ref: exact. */
static void test_add_store(void)
{
    static const size_t ns[] = { 1, 7, 8, 9, 33, 1000, 1001 };
    size_t i, j;
    int t, dt;

    for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
        size_t n = ns[i];
        float *x = falloc(n), *y = falloc(n), *a = falloc(n), *b = falloc(n);
        uint16_t *hr = malloc(2 * n), *hc = malloc(2 * n);
        na_kbuf_t ab = na_kbuf_host(a, F32B(n)), bb = na_kbuf_host(b, F32B(n));
        na_kbuf_t yb = na_kbuf_host(y, F32B(n)), xb = na_kbuf_host(x, F32B(n));

        na_rng_fill(&rng, x, n, -3.0f, 3.0f);
        na_rng_fill(&rng, y, n, -3.0f, 3.0f);
        if (n > 40) {       /* the KV store's edge values (below: stored bit for bit as ref) */
            static const uint32_t special[] = {
                0x7fc00000u, 0xffc12345u, 0x7f800001u, 0x7f800000u, 0xff800000u,  /* NaN, Inf */
                0x477fe000u, 0x477ff000u, 0x47800000u, 0x7f7fffffu,   /* f16 max, overflow */
                0x33800000u, 0x33000000u, 0x33000001u, 0x387fc000u,   /* f16 subnormal range */
                0x00000001u, 0x80400000u, 0x80000000u, 0x3f808000u,   /* f32 subnormal, -0, ties */
                0x3f818000u, 0x3f800fffu, 0x3f801000u, 0x3f803000u };
            for (j = 0; j < sizeof(special) / sizeof(special[0]); j++)
                memcpy(&x[j * 2], &special[j], 4);        /* spread over groups of 8 */
        }
        memcpy(a, x, F32B(n));
        NA_CHECK_OK(ref_k->ops->add(ref_k, &ab, &yb, n));
        for (j = 0; j < n; j++)
            NA_CHECK(a[j] == x[j] + y[j] || (isnan(a[j]) && isnan(x[j] + y[j])));
        for (t = 0; t < 2; t++) {
            memcpy(b, x, F32B(n));
            NA_CHECK_OK(cpu_k[t]->ops->add(cpu_k[t], &bb, &yb, n));
            NA_CHECK_MSG(memcmp(a, b, F32B(n)) == 0, "add n %zu", n);
        }
        for (dt = 0; dt < N_KV_DTYPES; dt++) {
            na_dtype_t kd = kv_dtypes[dt];
            size_t bytes = na_dtype_bytes(kd, n);
            void *dr = dt ? (void *)hr : (void *)a, *dc = dt ? (void *)hc : (void *)b;
            na_kbuf_t drb = na_kbuf_host(dr, bytes), dcb = na_kbuf_host(dc, bytes);
            NA_CHECK_OK(ref_k->ops->store(ref_k, &drb, kd, &xb, n));
            NA_CHECK_OK(cpu_k[1]->ops->store(cpu_k[1], &dcb, kd, &xb, n));
            NA_CHECK_MSG(memcmp(dr, dc, bytes) == 0, "store %s n %zu", na_dtype_name(kd), n);
        }
        NA_CHECK(hr[0] == na_f32_to_bf16(x[0]));   /* the last dtype stored: bf16 */
        free(hc);
        free(hr);
        free(b);
        free(a);
        free(y);
        free(x);
    }
}

/* Upload, copy between views, download, resize: every memory type each backend has
 * (cpu: host, pinned; refdev: also device); device memory on cpu is
 * NA_ERR_UNSUPPORTED. A download of a host buffer into its own memory is a
 * no-op that keeps the data. */
static void test_buffers(void)
{
    static const char *names[] = { "cpu", "ref", "refdev" };
    const size_t n = 1000, off = 13 * sizeof(float), part = 501;
    unsigned char *src = malloc(n), *dst = malloc(n);
    size_t i, b;
    int m;

    for (i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    for (b = 0; b < 3; b++) {
        na_kernels_t *k = NULL;
        NA_CHECK_OK(na_kernels_create(names[b], 1, &k));
        if (k == NULL)
            continue;
        NA_CHECK(k->mem == (b == 2 ? NA_KMEM_DEVICE : NA_KMEM_HOST));
        for (m = 0; m < 3; m++) {
            na_kbuf_t *x = NULL, *y = NULL, xv, yv;
            na_status_t st = k->ops->buf_alloc(k, n, (na_kmem_t)m, &x);
            if (m == NA_KMEM_DEVICE && b == 0) {
                NA_CHECK(st == NA_ERR_UNSUPPORTED && x == NULL);
                continue;
            }
            NA_CHECK_OK(st);
            NA_CHECK_OK(k->ops->buf_alloc(k, n, (na_kmem_t)m, &y));
            if (x == NULL || y == NULL)
                continue;
            NA_CHECK(x->owner == k && x->size == n && (x->host == NULL) == (m == NA_KMEM_DEVICE));
            /* whole round trip */
            memset(dst, 0, n);
            NA_CHECK_OK(k->ops->upload(k, x, src, n));
            NA_CHECK_OK(k->ops->download(k, dst, x, n));
            NA_CHECK_OK(na_kernels_finish(k));
            NA_CHECK_MSG(memcmp(src, dst, n) == 0, "%s mem %d round trip", names[b], m);
            /* a part through views: y[off..] = x[0..part) */
            xv = na_kbuf_view(x, 0, part);
            yv = na_kbuf_view(y, off, part);
            NA_CHECK(yv.alloc == NULL && yv.size == part);
            NA_CHECK(na_kbuf_view(y, off, n).size == n - off);      /* clamped */
            NA_CHECK(na_kbuf_view(y, n + 1, 4).size == 0);
            NA_CHECK_OK(k->ops->copy(k, &yv, &xv, part));
            memset(dst, 0, n);
            NA_CHECK_OK(k->ops->download(k, dst, &yv, part));
            NA_CHECK_OK(na_kernels_finish(k));
            NA_CHECK(memcmp(dst, src, part) == 0);
            /* sizes are checked: a view too small, a copy past the end */
            NA_CHECK(k->ops->download(k, dst, &yv, part + 1) == NA_ERR_INVALID);
            yv = na_kbuf_view(y, off, n - off);
            NA_CHECK(k->ops->copy(k, &yv, x, n) == NA_ERR_INVALID);
            if (x->host != NULL) {            /* host memory: read in place */
                NA_CHECK_OK(k->ops->download(k, x->host, x, n));
                NA_CHECK(memcmp(x->host, src, n) == 0);
            }
            /* resize keeps the contents; a view cannot be resized */
            NA_CHECK(k->ops->buf_resize(k, &xv, 2 * n) == NA_ERR_INVALID);
            NA_CHECK_OK(k->ops->buf_resize(k, x, 3 * n));
            NA_CHECK(x->size == 3 * n && (x->host == NULL) == (m == NA_KMEM_DEVICE));
            memset(dst, 0, n);
            NA_CHECK_OK(k->ops->download(k, dst, x, n));
            NA_CHECK_OK(na_kernels_finish(k));
            NA_CHECK(memcmp(dst, src, n) == 0);
            k->ops->buf_free(k, y);
            k->ops->buf_free(k, x);
        }
        k->ops->buf_free(k, NULL);
        na_kernels_destroy(k);
    }
    free(dst);
    free(src);
}

/* Events: an unrecorded event is complete; after ops and a record, query and
 * wait report completion and the results are there. */
static void test_events(void)
{
    na_kernels_t *ks[3] = { ref_k, cpu_k[0], cpu_k[1] };
    float x[19], y[19];
    int i, t;

    for (t = 0; t < 3; t++) {
        na_kernels_t *k = ks[t];
        na_kevent_t *ev = NULL, *ev2 = NULL;
        na_kbuf_t *b = NULL;
        na_status_t st;

        NA_CHECK_OK(k->ops->event_create(k, &ev));
        NA_CHECK_OK(k->ops->event_create(k, &ev2));
        NA_CHECK_OK(k->ops->buf_alloc(k, sizeof(x), NA_KMEM_PINNED, &b));
        if (ev == NULL || ev2 == NULL || b == NULL)
            return;
        NA_CHECK_OK(k->ops->event_query(k, ev));          /* never recorded */
        for (i = 0; i < 19; i++)
            x[i] = (float)i;
        NA_CHECK_OK(k->ops->upload(k, b, x, sizeof(x)));
        NA_CHECK_OK(k->ops->event_record(k, ev));
        NA_CHECK_OK(softmax(k, b->host, 19, 1));
        NA_CHECK_OK(k->ops->download(k, y, b, sizeof(y)));
        NA_CHECK_OK(k->ops->event_record(k, ev2));
        NA_CHECK_OK(k->ops->event_wait(k, ev2));
        st = k->ops->event_query(k, ev2);
        NA_CHECK(st == NA_OK);
        NA_CHECK_OK(k->ops->event_query(k, ev));        /* the earlier one too */
        NA_CHECK(y[18] > y[17] && y[0] > 0.0f && y[18] < 1.0f);
        NA_CHECK(k->ops->event_record(k, NULL) == NA_ERR_INVALID);
        NA_CHECK(k->ops->event_wait(k, NULL) == NA_ERR_INVALID);
        k->ops->buf_free(k, b);
        k->ops->event_destroy(k, ev2);
        k->ops->event_destroy(k, ev);
    }
}

/* Bad arguments are refused with NA_ERR_INVALID and touch nothing. */
static void test_bad_args(void)
{
    na_kernels_t *c = cpu_k[0], *dev = NULL;
    float x[64], y[64], w[64];
    uint16_t h[64];
    na_tensor_t wt = { NA_DTYPE_F32, 2, 32, w, NA_LAYOUT_ROWS };
    na_tensor_t empty = { NA_DTYPE_F32, 2, 32, NULL, NA_LAYOUT_ROWS };
    na_tensor_t nt = { NA_DTYPE_F32, 1, 32, h, NA_LAYOUT_ROWS };
    na_kbuf_t xb = na_kbuf_host(x, sizeof(x)), yb = na_kbuf_host(y, sizeof(y));
    na_kbuf_t small = na_kbuf_host(y, sizeof(float)), nul = na_kbuf_host(NULL, 64);
    na_kbuf_t hb = na_kbuf_host(h, sizeof(h));
    na_kbuf_t *d = NULL;
    na_kweight_t pw, pn;
    int tok_bad = 2, pos = 0;

    na_rng_fill(&rng, x, 64, -1.0f, 1.0f);
    na_rng_fill(&rng, w, 64, -1.0f, 1.0f);
    NA_CHECK_OK(c->ops->place(c, &wt, &pw));
    NA_CHECK(c->ops->place(c, &empty, &pn) == NA_ERR_INVALID);
    NA_CHECK(c->ops->matmul(c, &small, &xb, &pw, 1) == NA_ERR_INVALID);   /* y too small */
    NA_CHECK(strstr(na_errmsg(), "matmul") != NULL);
    NA_CHECK(c->ops->matmul(c, &yb, &xb, &pw, 3) == NA_ERR_INVALID);      /* x too small */
    NA_CHECK(c->ops->matmul(c, NULL, &xb, &pw, 1) == NA_ERR_INVALID);
    NA_CHECK(c->ops->matmul(c, &nul, &xb, &pw, 1) == NA_ERR_INVALID);
    NA_CHECK(c->ops->embed(c, &yb, &pw, &tok_bad, 1) == NA_ERR_INVALID);  /* token 2 of 2 */
    NA_CHECK_OK(c->ops->place(c, &nt, &pn));
    pn.dtype = NA_DTYPE_F16;
    NA_CHECK(c->ops->rmsnorm(c, &yb, &xb, &pn, 32, 1e-5f, 1) == NA_ERR_INVALID);
    NA_CHECK(c->ops->store(c, &hb, NA_DTYPE_Q8_0, &xb, 8) == NA_ERR_INVALID);  /* not a KV dtype */
    NA_CHECK(c->ops->store(c, &hb, NA_DTYPE_F32, &xb, 64) == NA_ERR_INVALID);
    NA_CHECK(c->ops->attn_decode(c, &yb, &xb, &xb, &xb, NA_DTYPE_F32, 1, 3, 2, 8) ==
             NA_ERR_INVALID);                                             /* 3 heads / 2 */
    NA_CHECK(c->ops->attn_prefill(c, &yb, &xb, &small, &xb, NA_DTYPE_F32, 1, 0, 2, 2, 8) ==
             NA_ERR_INVALID);
    {
        na_rope_t *r32 = mkrope(c, 32, 32, NA_ROPE_NORM, 1.0f, NULL);
        NA_CHECK(c->ops->rope(c, &xb, 2, NULL, r32, 1) == NA_ERR_INVALID);
        NA_CHECK(c->ops->rope(c, &xb, 4, &pos, r32, 1) == NA_ERR_INVALID);
        NA_CHECK(c->ops->rope(c, &xb, 2, &pos, NULL, 1) == NA_ERR_INVALID);
        NA_CHECK(c->ops->bias(c, &xb, &pn, 8, 1) == NA_ERR_INVALID);    /* f16 */
        na_rope_destroy(r32);
    }
    NA_CHECK(c->ops->softmax(c, &xb, 0, 1) == NA_ERR_INVALID);
    NA_CHECK(c->ops->upload(c, &xb, NULL, 4) == NA_ERR_INVALID);
    NA_CHECK(c->ops->download(c, NULL, &xb, 4) == NA_ERR_INVALID);
    /* device memory of another backend */
    NA_CHECK_OK(na_kernels_create("refdev", 1, &dev));
    if (dev != NULL) {
        NA_CHECK_OK(dev->ops->buf_alloc(dev, sizeof(x), NA_KMEM_DEVICE, &d));
        if (d != NULL)
            NA_CHECK(c->ops->add(c, &xb, d, 16) == NA_ERR_INVALID);
        dev->ops->buf_free(dev, d);
        na_kernels_destroy(dev);
    }
    c->ops->unplace(c, &pn);
    c->ops->unplace(c, &pw);
}

/* ---- the cpu backend's thread pool ------------------------------------------ */
typedef struct {
    atomic_int count[1000];
    atomic_int started1;
    pthread_t  who[2];
    int        waited_ok;
} pool_probe_t;

static void pool_count_task(void *ctx, int t, int n)
{
    (void)n;       /* pool task signature */
    pool_probe_t *p = ctx;
    atomic_fetch_add(&p->count[t], 1);
}

/* Task 0 waits (bounded) until task 1 has started: only another thread can
 * have claimed it, so this proves the worker runs tasks concurrently. */
static void pool_pair_task(void *ctx, int t, int n)
{
    (void)n;       /* pool task signature */
    pool_probe_t *p = ctx;
    p->who[t] = pthread_self();
    if (t == 1) {
        atomic_store(&p->started1, 1);
    } else {
        double t0 = na_bench_now();
        while (!atomic_load(&p->started1) && na_bench_now() - t0 < 10.0)
            sched_yield();
        p->waited_ok = atomic_load(&p->started1);
    }
}

static void test_pool(void)
{
    static pool_probe_t p;
    na_cpu_pool_t *pool;
    int i, round;

    NA_CHECK_OK(na_cpu_pool_create(2, &pool));
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 1000; i++)
            atomic_init(&p.count[i], 0);
        na_cpu_pool_run(pool, pool_count_task, &p, 1000);
        for (i = 0; i < 1000; i++)
            NA_CHECK(atomic_load(&p.count[i]) == 1);
        atomic_init(&p.started1, 0);
        p.waited_ok = 0;
        na_cpu_pool_run(pool, pool_pair_task, &p, 2);
        NA_CHECK(p.waited_ok && !pthread_equal(p.who[0], p.who[1]));
    }
    na_cpu_pool_destroy(pool);
}

static void test_registry(void)
{
    na_kernels_t *k = NULL;
    NA_CHECK(na_kernels_create("nope", 1, &k) == NA_ERR_NOT_FOUND);
    NA_CHECK(strstr(na_errmsg(), "nope") != NULL);
    NA_CHECK(na_kernels_create("cuda", 1, &k) == NA_ERR_UNSUPPORTED);
    NA_CHECK(k == NULL);
}

/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not
 * know the name "f16c", gcc's does; <cpuid.h> works with both. */
static int cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

int main(void)
{
    char isa[64];
    na_rng_seed(&rng, 20261122);
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !cpu_has_f16c())
        NA_SKIP("this CPU lacks AVX2/FMA/F16C: the cpu backend cannot run");
    /* the instruction set chosen at run time: ctest runs this as the CPU
     * allows, with NA_CPU_ISA=v4 (AVX-512 without the VNNI / BF16 GEMMs:
     * their fallbacks) and with NA_CPU_ISA=v3 (the AVX2 baseline) */
    {
        const char *want = getenv("NA_CPU_ISA");
        int v4 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                 __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("avx512cd");
        int vnni = v4 && __builtin_cpu_supports("avx512vnni");
        int bf16 = v4 && __builtin_cpu_supports("avx512bf16");

        if (want != NULL && (!strcmp(want, "v4") || !strcmp(want, "v4x")) && !v4)
            NA_SKIP("NA_CPU_ISA=%s: this CPU lacks AVX-512F/VL/BW/DQ/CD", want);
        if (want != NULL && !strcmp(want, "v4x") && !(vnni && bf16))
            NA_SKIP("NA_CPU_ISA=v4x: this CPU lacks AVX512-VNNI or AVX512-BF16");
        if (want != NULL && !strcmp(want, "v3"))
            v4 = 0;
        if (want != NULL && (!strcmp(want, "v3") || !strcmp(want, "v4")))
            vnni = bf16 = 0;
        snprintf(isa, sizeof(isa), "%s%s%s", v4 ? "x86-64-v4" : "x86-64-v3",
                 vnni ? "+vnni" : "", bf16 ? "+bf16" : "");
        gemm_bf16 = bf16;
        gemm_h16_any = v4;
        printf("cpu kernels: expect %s; Q8_0 GEMM: %s; BF16 GEMM: %s\n", isa,
               vnni ? "AVX512-VNNI" : "AVX2 maddubs",
               bf16 ? "AVX512-BF16" : "none (dequantise + sgemm)");
        if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bf16"))
            printf("not tested in any run on this CPU: the AVX512-VNNI / AVX512-BF16 GEMMs "
                   "(this CPU lacks them)\n");
    }
    if (na_test_kernels_open(&ref_k, cpu_k) != 0)
        return na_test_finish();
    NA_CHECK(cpu_k[1]->n_threads == 2 && !strcmp(cpu_k[1]->ops->name, "cpu"));
    NA_CHECK_MSG(cpu_k[0]->isa != NULL && !strcmp(cpu_k[0]->isa, isa), "isa %s, expected %s",
                 cpu_k[0]->isa ? cpu_k[0]->isa : "?", isa);

    test_registry();
    test_pool();
    test_expf();
    test_ref_known();
    test_elementwise();
    test_matmul();
    test_matmul_batch_exact();
    test_matmul_invariant();
    test_matmul_h16();
    test_matmul_bf16x32();
    test_q8_inputs();
    test_decode();
    test_prefill();
    test_partials();
    test_embed();
    test_add_store();
    test_buffers();
    test_events();
    test_bad_args();

    na_test_kernels_close(ref_k, cpu_k);
    return na_test_finish();
}

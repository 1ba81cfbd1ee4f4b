/* tests/unit/test_quant.c — the GGML block formats beyond Q8_0 (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, Q6_K): the reference dequantisation against
 * blocks packed here from known codes (the bit layout written a second
 * time, from ggml-common.h's structs), the reference dot product against
 * dequantise-then-dot, and the cpu backend (1 and 2 threads, the ISA chosen
 * at run time; ctest runs it again with NA_CPU_ISA=v3 and v4) against the
 * reference on awkward shapes and batches; embed; bad shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/kernels.h"
#include "kernels/ref/ref.h"
#include "tests/testutil.h"
#include "tests/unit/kern_util.h"

static na_rng_t rng;
static na_kernels_t *ref_k, *cpu_k[2];

static const na_dtype_t types[] = { NA_DTYPE_Q4_0, NA_DTYPE_Q4_1, NA_DTYPE_Q5_0, NA_DTYPE_Q5_1,
                                    NA_DTYPE_Q4_K, NA_DTYPE_Q5_K, NA_DTYPE_Q6_K };
#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

#define F32B(n) ((size_t)(n) * sizeof(float))

static void put_f16(uint8_t *p, float f)
{
    uint16_t h = na_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* ---- blocks packed from codes ---------------------------------------------
 * code[el] in the type's range (Q4: 0..15, Q5: 0..31, Q6: 0..63), scale/min
 * codes sc[], m[] (K-quants), the f16 fields d, m/dmin; expected value of
 * each element computed from the formula of common/dtype.h. */
static void pack_block(na_dtype_t dt, uint8_t *blk, const int *code, const int *sc,
                       const int *mn, float d, float dm, float *want)
{
    int j, l, i;
    memset(blk, 0, na_dtype_block_bytes(dt));
    switch (dt) {
    case NA_DTYPE_Q4_0: case NA_DTYPE_Q4_1: case NA_DTYPE_Q5_0: case NA_DTYPE_Q5_1: {
        int has_m = dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1;
        int q5 = dt == NA_DTYPE_Q5_0 || dt == NA_DTYPE_Q5_1;
        uint8_t *qs = blk + 2 + (has_m ? 2 : 0) + (q5 ? 4 : 0);
        uint32_t qh = 0;
        put_f16(blk, d);
        if (has_m)
            put_f16(blk + 2, dm);
        for (j = 0; j < 32; j++) {
            int c = code[j];
            if (j < 16)
                qs[j] |= (uint8_t)(c & 15);
            else
                qs[j - 16] |= (uint8_t)((c & 15) << 4);
            if (c & 16)
                qh |= 1u << j;
            want[j] = has_m ? na_f16_to_f32(na_f32_to_f16(d)) * (float)c +
                              na_f16_to_f32(na_f32_to_f16(dm))
                            : na_f16_to_f32(na_f32_to_f16(d)) *
                              (float)(c - (q5 ? 16 : 8));
        }
        if (q5)
            memcpy(blk + 2 + (has_m ? 2 : 0), &qh, 4);
        return;
    }
    case NA_DTYPE_Q4_K: case NA_DTYPE_Q5_K: {
        int q5 = dt == NA_DTYPE_Q5_K;
        uint8_t *s = blk + 4, *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
        float dd = na_f16_to_f32(na_f32_to_f16(d)), dmm = na_f16_to_f32(na_f32_to_f16(dm));
        put_f16(blk, d);
        put_f16(blk + 2, dm);
        for (j = 0; j < 8; j++) {         /* ggml's quantize_row_q4_K_ref packing */
            if (j < 4) {
                s[j] = (uint8_t)sc[j];
                s[j + 4] = (uint8_t)mn[j];
            } else {
                s[j + 4] = (uint8_t)((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
                s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
                s[j] |= (uint8_t)((mn[j] >> 4) << 6);
            }
        }
        for (i = 0; i < 4; i++)          /* 64 elements: 32 low nibbles, 32 high */
            for (l = 0; l < 32; l++) {
                int c0 = code[64 * i + l], c1 = code[64 * i + 32 + l];
                qs[32 * i + l] = (uint8_t)((c0 & 15) | ((c1 & 15) << 4));
                if (q5)
                    qh[l] |= (uint8_t)((((c0 >> 4) & 1) << (2 * i)) |
                                       (((c1 >> 4) & 1) << (2 * i + 1)));
            }
        for (j = 0; j < 256; j++)
            want[j] = dd * (float)sc[j / 32] * (float)code[j] - dmm * (float)mn[j / 32];
        return;
    }
    case NA_DTYPE_Q6_K: {
        uint8_t *ql = blk, *qh = blk + 128;
        float dd = na_f16_to_f32(na_f32_to_f16(d));
        for (i = 0; i < 2; i++)          /* 128 elements: ql[64], qh[32] */
            for (l = 0; l < 32; l++) {
                const int *c = code + 128 * i;
                ql[64 * i + l] = (uint8_t)((c[l] & 15) | ((c[l + 64] & 15) << 4));
                ql[64 * i + 32 + l] = (uint8_t)((c[l + 32] & 15) | ((c[l + 96] & 15) << 4));
                qh[32 * i + l] = (uint8_t)((c[l] >> 4) | ((c[l + 32] >> 4) << 2) |
                                           ((c[l + 64] >> 4) << 4) | ((c[l + 96] >> 4) << 6));
            }
        for (j = 0; j < 16; j++)
            blk[192 + j] = (uint8_t)(int8_t)sc[j];
        put_f16(blk + 208, d);
        for (j = 0; j < 256; j++)
            want[j] = dd * (float)sc[j / 16] * (float)(code[j] - 32);
        return;
    }
    default:
        return;
    }
}

static int code_max(na_dtype_t dt)
{
    switch (dt) {
    case NA_DTYPE_Q4_0: case NA_DTYPE_Q4_1: case NA_DTYPE_Q4_K: return 15;
    case NA_DTYPE_Q6_K: return 63;
    default: return 31;
    }
}

/* Dequantisation of packed random codes, the extremes included. */
static void test_dequant_known(void)
{
    int ti, rep, j;
    for (ti = 0; ti < N_TYPES; ti++) {
        na_dtype_t dt = types[ti];
        int blk = na_dtype_block(dt), cm = code_max(dt);
        for (rep = 0; rep < 20; rep++) {
            uint8_t b[256];
            int code[256], sc[16], mn[16], bad = 0;
            float want[256], got[256];
            for (j = 0; j < blk; j++)
                code[j] = rep == 0 ? cm : rep == 1 ? 0 : (int)(na_rng_u64(&rng) % (unsigned)(cm + 1));
            for (j = 0; j < 16; j++) {
                if (dt == NA_DTYPE_Q6_K)
                    sc[j] = rep == 0 ? 127 : rep == 1 ? -128 : (int)(na_rng_u64(&rng) % 256) - 128;
                else
                    sc[j] = rep == 0 ? 63 : (int)(na_rng_u64(&rng) % 64);
                mn[j] = rep == 0 ? 63 : (int)(na_rng_u64(&rng) % 64);
            }
            pack_block(dt, b, code, sc, mn, 0.01f + 0.1f * na_rng_uniform(&rng),
                       0.2f * na_rng_uniform(&rng) - 0.1f, want);
            na_ref_dequant_row(dt, b, got, blk);
            for (j = 0; j < blk; j++)
                if (!(fabsf(got[j] - want[j]) <= 1e-6f * (1.0f + fabsf(want[j]))))
                    bad++;
            NA_CHECK_MSG(bad == 0, "dequant %s rep %d: %d elements differ", na_dtype_name(dt),
                         rep, bad);
        }
        /* by element through na_ref_weight_at */
        {
            uint8_t b[2 * 256];
            int code[256], sc[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
            int mn[16] = { 0 };
            float want[256];
            na_tensor_t w = { dt, 2, blk, b, NA_LAYOUT_ROWS };
            for (j = 0; j < blk; j++)
                code[j] = j % (cm + 1);
            pack_block(dt, b + na_dtype_block_bytes(dt), code, sc, mn, 0.5f, 0.25f, want);
            NA_CHECK(na_ref_weight_at(&w, 1, blk - 1) == want[blk - 1]);
            NA_CHECK(na_ref_weight_at(&w, 1, 3) == want[3]);
        }
    }
}

/* The reference dot (quantised inputs, integer block sums) against the
 * dequantised weight times the dequantised inputs summed in double: they
 * differ only by f32 rounding (~1e-6 of the sum of |terms|). And against the
 * f32 inputs: the inputs' rounding is at most 0.5/127 of each block's
 * largest |x|. */
static void test_ref_dot(void)
{
    static const int mult[] = { 1, 3, 5 };
    int ti, mi, r;
    for (ti = 0; ti < N_TYPES; ti++) {
        na_dtype_t dt = types[ti];
        int kind = na_ref_quant_kind(dt), qb = kind == 2 ? NA_QK_K : NA_Q8_0_BLOCK;
        NA_CHECK(kind != 0);
        for (mi = 0; mi < 3; mi++) {
            int cols = na_dtype_block(dt) * mult[mi], rows = 5, j;
            na_tensor_t w;
            void *buf = na_test_rand_weight(&rng, dt, rows, cols, &w);
            float *x = na_test_xmalloc(F32B(cols)), *wf = na_test_xmalloc(F32B(cols));
            float *xq = na_test_xmalloc(F32B(cols));
            int8_t *q = na_test_xmalloc((size_t)cols);
            float *d = na_test_xmalloc(F32B(cols / 32));
            int16_t *bs = na_test_xmalloc(sizeof(int16_t) * (size_t)(cols / 16));
            float *s1 = na_test_xmalloc(F32B(cols / 32));
            na_ref_qx_t qx = { q, d, bs, s1 };
            int has_m = dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1;

            na_rng_fill(&rng, x, (size_t)cols, -1.0f, 1.0f);
            x[cols / 2] = 3.0f;                          /* one large input */
            na_ref_quantize_x(dt, x, cols, &qx);
            for (j = 0; j < cols; j++)
                xq[j] = (float)q[j] * d[j / qb];
            for (r = 0; r < rows; r++) {
                const uint8_t *row = (const uint8_t *)w.data +
                                     (size_t)r * na_dtype_bytes(dt, (size_t)cols);
                double exact = 0.0, mag = 0.0, fx = 0.0, xtol = 0.0;
                float got = na_ref_vec_dot(dt, row, &qx, cols);
                float got2 = na_ref_dot_quant(dt, row, x, cols);
                na_ref_dequant_row(dt, row, wf, cols);
                for (j = 0; j < cols; j++) {
                    exact += (double)wf[j] * xq[j];
                    mag += fabs((double)wf[j] * xq[j]);
                    fx += (double)wf[j] * x[j];
                    /* code rounding and the f16 scale of Q8_0 / Q8_1 blocks */
                    xtol += fabs((double)wf[j]) * (0.5 / 127.0 + 1.0 / 2048.0) * 3.0;
                }
                /* Q4_1 / Q5_1: the min times Q8_1's s (f16(d sum q)), not d16 sum q */
                for (j = 0; has_m && j < cols / 32; j++) {
                    uint16_t mh;
                    double m;
                    memcpy(&mh, row + (size_t)j * na_dtype_block_bytes(dt) + 2, 2);
                    m = na_f16_to_f32(mh);
                    exact += m * ((double)s1[j] - (double)d[j] * bs[j]);
                    xtol += fabs(m * s1[j]) / 2048.0;
                }
                NA_CHECK_MSG(fabs(got - exact) <= 2e-6 * mag + 1e-7, "ref dot %s cols %d row %d: "
                             "%g vs dequantised %g (mag %g)", na_dtype_name(dt), cols, r,
                             (double)got, exact, mag);
                /* the same terms (the compiler may fuse a different multiply-add) */
                NA_CHECK_MSG(fabs(got - got2) <= 1e-6 * mag, "ref dot %s: quantised at once %g, "
                             "by block %g", na_dtype_name(dt), (double)got, (double)got2);
                NA_CHECK_MSG(fabs(got - fx) <= xtol + 2e-6 * mag, "ref dot %s cols %d: %g vs "
                             "f32 inputs %g (bound %g)", na_dtype_name(dt), cols, (double)got,
                             fx, xtol);
            }
            free(s1);
            free(bs);
            free(d);
            free(q);
            free(xq);
            free(wf);
            free(x);
            free(buf);
        }
    }
}

/* cpu vs ref: the same quantised inputs and integer block sums, the f32 sum
 * over blocks in another order (vector lanes, several accumulators): within
 * 2e-6 of the sum of |terms| (a few f32 roundings of it; observed well below). */
static void fill_halfway(float *x, size_t n);

static void check_matmul_x(na_dtype_t dt, int rows, int cols, int batch, int halfway)
{
    na_tensor_t w;
    void *buf = na_test_rand_weight(&rng, dt, rows, cols, &w);
    float *x = na_test_xmalloc(F32B((size_t)batch * cols));
    float *yr = na_test_xmalloc(F32B((size_t)batch * rows));

    if (halfway)
        fill_halfway(x, (size_t)batch * cols);
    else
        na_rng_fill(&rng, x, (size_t)batch * cols, -1.0f, 1.0f);
    NA_CHECK_OK(na_test_mm(ref_k, yr, x, &w, batch));
    na_test_check_mm(cpu_k, &w, x, batch, yr, 2e-6);
    free(yr);
    free(x);
    free(buf);
}

static void check_matmul(na_dtype_t dt, int rows, int cols, int batch)
{
    check_matmul_x(dt, rows, cols, batch, 0);
}

/* ---- the inputs quantised as ggml quantises them ---------------------------
 * ggml's activation quantisers written a second time, from ggml-quants.c and
 * ggml-cpu-quants.c (llama.cpp c392e5094): quantize_row_q8_0 / _q8_1 (the
 * AVX2 versions: id = 127 / max, round to nearest even, d and s stored in
 * f16) and quantize_row_q8_K_ref (the signed max, iscale = -127 / max,
 * nearest_int, d = 1 / iscale in f32). */
static float g_f16(float f)
{
    return na_f16_to_f32(na_f32_to_f16(f));
}

static int g_nearest_int(volatile float f)   /* ggml's nearest_int */
{
    /* volatile: f is the product rounded to f32, never fused into an fma
     * with the add (libggml-base, where ggml's version lives, has no FMA) */
    float v = f + 12582912.f;
    int i;
    memcpy(&i, &v, sizeof(i));
    return (i & 0x007fffff) - 0x00400000;
}

static void g_q8_1(const float *x, int8_t *q, float *d, float *s)
{
    float amax = 0.0f, dd, id;
    int j, sum = 0;
    for (j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    dd = amax / 127.f;
    id = amax != 0.0f ? 127.f / amax : 0.0f;
    for (j = 0; j < 32; j++) {
        q[j] = (int8_t)g_nearest_int(x[j] * id);
        sum += q[j];
    }
    *d = g_f16(dd);
    *s = g_f16((float)sum * dd);
}

static float g_q8_k(const float *x, int8_t *q, int16_t *bsums)
{
    float max = 0, amax = 0, iscale;
    int j, i;
    for (j = 0; j < NA_QK_K; j++) {
        float ax = fabsf(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (!amax) {
        memset(q, 0, NA_QK_K);
        memset(bsums, 0, 32);
        return 0.0f;
    }
    iscale = -127.f / max;
    for (j = 0; j < NA_QK_K; j++) {
        int v = g_nearest_int(iscale * x[j]);
        q[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (j = 0; j < NA_QK_K / 16; j++) {
        int sum = 0;
        for (i = 0; i < 16; i++)
            sum += q[j * 16 + i];
        bsums[j] = (int16_t)sum;
    }
    return 1 / iscale;
}

/* Inputs whose codes sit at half-way points: per 256 one random scale
 * a (the block's max|x|, signed at random), the others a (k + 1/2) / 127
 * for random |k| < 127, where the last bit of the multiplier decides the
 * rounding; a few blocks all zero. */
static void fill_halfway(float *x, size_t n)
{
    size_t i, j;
    for (i = 0; i < n; i += NA_QK_K) {
        float a = 0.01f + 4.0f * na_rng_uniform(&rng);
        int zero = na_rng_u64(&rng) % 17 == 0;
        for (j = i; j < i + NA_QK_K && j < n; j++) {
            int k = (int)(na_rng_u64(&rng) % 253) - 126;
            x[j] = zero ? 0.0f : a * ((float)k + (k < 0 ? -0.5f : 0.5f)) / 127.0f;
        }
        if (!zero)
            for (j = i; j < i + NA_QK_K && j < n; j += 32)   /* each block's max */
                x[j + na_rng_u64(&rng) % 32] = (na_rng_u64(&rng) & 1) ? a : -a;
    }
}

/* The reference's Q8_0 / Q8_1 / Q8_K blocks are ggml's, bit for bit (Q8_K's
 * codes and d with the sign flipped where ggml's max is positive), on
 * half-way inputs that the quantiser before this (d = max / 127 in f32, x *
 * (1 / d)) rounded differently; then cpu = ref on those inputs for every
 * type, Q8_0 included (a code or a scale off by one rounding moves an
 * output ~1e-4 of its terms, 50x the comparison's bound). */
static void test_act_quant_ggml(void)
{
    enum { N = 64 * NA_QK_K };
    float *x = na_test_xmalloc(F32B(N));
    int8_t q[NA_QK_K], g[NA_QK_K];
    int16_t bs[NA_QK_K / 16], gbs[NA_QK_K / 16], bs1;
    size_t b;
    int j, ti, old_differs = 0;

    fill_halfway(x, N);
    for (j = 32; j < 64; j++)        /* a block of tiny values (its f16 d is 0) */
        x[j] = 1e-30f * (float)(j - 40);
    for (b = 0; b < N / 32; b++) {
        const float *xb = x + 32 * b;
        float d, s, gd, gs, amax = 0.0f, od;
        g_q8_1(xb, g, &gd, &gs);
        d = na_ref_quantize_q8(xb, q);
        NA_CHECK_MSG(memcmp(q, g, 32) == 0 && memcmp(&d, &gd, 4) == 0,
                     "Q8_0 block %zu: d %a vs ggml %a", b, (double)d, (double)gd);
        d = na_ref_quantize_q8_1(xb, q, &bs1, &s);
        NA_CHECK_MSG(memcmp(q, g, 32) == 0 && memcmp(&d, &gd, 4) == 0 &&
                     memcmp(&s, &gs, 4) == 0, "Q8_1 block %zu: s %a vs ggml %a", b,
                     (double)s, (double)gs);
        for (j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        od = amax / 127.0f;
        for (j = 0; j < 32; j++)      /* the old rounding, to show the inputs bite */
            old_differs += (int8_t)nearbyintf(xb[j] * (od != 0.0f ? 1.0f / od : 0.0f)) != g[j];
    }
    NA_CHECK_MSG(old_differs > 0, "no half-way input tells the two roundings apart");
    for (b = 0; b < N / NA_QK_K; b++) {
        const float *xb = x + NA_QK_K * b;
        float d = na_ref_quantize_q8k(xb, q, bs), gd = g_q8_k(xb, g, gbs);
        if (gd < 0.0f) {              /* ggml's max was positive: codes negated */
            gd = -gd;
            for (j = 0; j < NA_QK_K; j++)
                g[j] = (int8_t)-g[j];
            for (j = 0; j < NA_QK_K / 16; j++)
                gbs[j] = (int16_t)-gbs[j];
        }
        NA_CHECK_MSG(memcmp(q, g, NA_QK_K) == 0 && memcmp(&d, &gd, 4) == 0 &&
                     memcmp(bs, gbs, sizeof(bs)) == 0, "Q8_K block %zu: d %a vs ggml %a", b,
                     (double)d, (double)gd);
    }
    for (ti = 0; ti < N_TYPES; ti++) {
        int blk = na_dtype_block(types[ti]);
        check_matmul_x(types[ti], 37, blk * (blk == 32 ? 24 : 3), 1, 1);
        check_matmul_x(types[ti], 37, blk * (blk == 32 ? 24 : 3), 3, 1);
        check_matmul_x(types[ti], 20, blk * (blk == 32 ? 8 : 1), 40, 1);
    }
    /* where ggml's f16 scale would overflow (max|x| / 127 >= 65520: its
     * block holds an infinity), d and s stay in f32 */
    for (j = 0; j < 32; j++)
        x[64 + j] = 1e7f * (float)(j - 16) / 16.0f;
    {
        float d = na_ref_quantize_q8(x + 64, q), s;
        NA_CHECK(d == 1e7f / 127.0f && q[0] == -127);
        d = na_ref_quantize_q8_1(x + 64, q, &bs1, &s);
        NA_CHECK_MSG(isfinite(s) && s == (float)bs1 * (1e7f / 127.0f), "s %g", (double)s);
    }
    /* each copy of cpu_quant.c quantises exactly as the reference */
    for (ti = 0; ti < N_TYPES; ti++) {
        typedef void (*qfn_t)(na_dtype_t, const float *, int, int8_t *, float *, int16_t *,
                              float *);
        static const qfn_t fns[] = { na_cpu_quant_inputs, na_cpu_quant_inputs_v4,
                                     na_cpu_quant_inputs_vnni };
        static const char *const names[] = { "v3", "v4", "vnni" };
        na_dtype_t dt = types[ti];
        int kind = na_ref_quant_kind(dt), has_m = dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1;
        int nd = N / (kind == 2 ? NA_QK_K : 32), nbs = kind == 2 ? N / 16 : nd, f;
        int8_t *rq = na_test_xmalloc(N), *cq = na_test_xmalloc(N);
        float *rd = na_test_xmalloc(F32B(nd)), *cd = na_test_xmalloc(F32B(nd));
        float *rs = na_test_xmalloc(F32B(nd));
        float *cs = na_test_xmalloc(F32B(nd));
        int16_t *rb = na_test_xmalloc(sizeof(int16_t) * (size_t)nbs);
        int16_t *cb = na_test_xmalloc(sizeof(int16_t) * (size_t)nbs);
        na_ref_qx_t qx = { rq, rd, rb, rs };
        na_ref_quantize_x(dt, x, N, &qx);
        for (f = 0; f < 3; f++) {
            if ((f >= 1 && (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
                            !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))) ||
                (f == 2 && !__builtin_cpu_supports("avx512vnni")))
                continue;
            memset(cq, 0x55, N);
            memset(cd, 0x55, F32B(nd));
            memset(cs, 0x55, F32B(nd));
            memset(cb, 0x55, sizeof(int16_t) * (size_t)nbs);
            fns[f](dt, x, N, cq, cd, cb, cs);
            NA_CHECK_MSG(memcmp(rq, cq, N) == 0 && memcmp(rd, cd, F32B(nd)) == 0 &&
                         (kind != 2 || memcmp(rb, cb, sizeof(int16_t) * (size_t)nbs) == 0) &&
                         (!has_m || memcmp(rs, cs, F32B(nd)) == 0),
                         "cpu (%s) inputs for %s differ from the reference's", names[f],
                         na_dtype_name(dt));
        }
        free(cb);
        free(rb);
        free(cs);
        free(rs);
        free(cd);
        free(rd);
        free(cq);
        free(rq);
    }
    check_matmul_x(NA_DTYPE_Q8_0, 37, 32 * 24, 1, 1);
    check_matmul_x(NA_DTYPE_Q8_0, 37, 32 * 24, 3, 1);
    check_matmul_x(NA_DTYPE_Q8_0, 64, 32 * 8, 70, 1);
    free(x);
}

static void test_matmul(void)
{
    static const int rows[] = { 1, 7, 33, 130 };
    static const int mult[] = { 1, 3, 7 };
    static const int batches[] = { 1, 3, 8, 21, 70 };
    size_t ri, mi, bi;
    int ti;
    for (ti = 0; ti < N_TYPES; ti++)
        for (ri = 0; ri < sizeof(rows) / sizeof(rows[0]); ri++)
            for (mi = 0; mi < sizeof(mult) / sizeof(mult[0]); mi++)
                for (bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++)
                    check_matmul(types[ti], rows[ri], na_dtype_block(types[ti]) * mult[mi],
                                 batches[bi]);
    /* a large one: the threads' row split, the bandwidth path */
    for (ti = 0; ti < N_TYPES; ti++)
        check_matmul(types[ti], 1000, 2048, 1);
    /* the legacy types through their GEMM: tails of its tiles, the threads' split */
    for (ti = 0; ti < 4; ti++)
        check_matmul(types[ti], 301, 32 * 15, 40);
}

/* Batch invariance: each output of a batch is bit-identical to the same
 * input's output alone (batch 1), whatever path the batch takes (several
 * weight rows per pass for 1..2 inputs, several inputs per row above, the
 * Q4_0 / Q4_1 / Q5_0 / Q5_1 GEMM from batch 8 or 16), on row counts that
 * leave tails of those groups, the GEMM's tiles and the threads' split; for
 * those four also a long row (300 blocks: several packed chunks per task and several passes
 * over the inputs). With and without kernels' batch_invariant. */
static void check_invariant(na_dtype_t dt, int rows, int cols, const int *batches, int nbat)
{
    int nb_max = 0, t, bi, b, inv;
    na_tensor_t w;
    void *buf = na_test_rand_weight(&rng, dt, rows, cols, &w);
    float *x, *yb, *y1;
    for (bi = 0; bi < nbat; bi++)
        nb_max = batches[bi] > nb_max ? batches[bi] : nb_max;
    x = na_test_xmalloc(F32B((size_t)nb_max * cols));
    yb = na_test_xmalloc(F32B((size_t)nb_max * rows));
    y1 = na_test_xmalloc(F32B(rows));
    na_rng_fill(&rng, x, (size_t)nb_max * cols, -1.0f, 1.0f);
    for (inv = 0; inv < 2; inv++)
        for (t = 0; t < 2; t++) {
            cpu_k[t]->batch_invariant = inv;
            for (bi = 0; bi < nbat; bi++) {
                NA_CHECK_OK(na_test_mm(cpu_k[t], yb, x, &w, batches[bi]));
                for (b = 0; b < batches[bi]; b++) {
                    NA_CHECK_OK(na_test_mm(cpu_k[t], y1, x + (size_t)b * cols, &w, 1));
                    NA_CHECK_MSG(memcmp(y1, yb + (size_t)b * rows, F32B(rows)) == 0,
                                 "batch invariance %s rows %d cols %d batch %d input %d "
                                 "threads %d invariant %d", na_dtype_name(dt), rows, cols,
                                 batches[bi], b, t + 1, inv);
                }
            }
            cpu_k[t]->batch_invariant = 0;
        }
    free(y1);
    free(yb);
    free(x);
    free(buf);
}

static void test_batch_invariant(void)
{
    static const int batches[] = { 2, 3, 5, 8, 13, 40 }, long_b[] = { 9, 17 };
    int ti;
    for (ti = 0; ti < N_TYPES; ti++) {
        na_dtype_t dt = types[ti];
        check_invariant(dt, 70, na_dtype_block(dt) * (na_dtype_block(dt) == 32 ? 37 : 3),
                        batches, (int)(sizeof(batches) / sizeof(batches[0])));
    }
    for (ti = 0; ti < 4; ti++)              /* Q4_0, Q4_1, Q5_0, Q5_1 */
        check_invariant(types[ti], 37, 32 * 300, long_b, 2);
}

/* Non-finite inputs give non-finite outputs (a block's d = NaN), on both. */
static void test_nonfinite(void)
{
    int ti, t;
    for (ti = 0; ti < N_TYPES; ti++) {
        na_tensor_t w;
        int cols = na_dtype_block(types[ti]) * 2;
        void *buf = na_test_rand_weight(&rng, types[ti], 3, cols, &w);
        float *x = na_test_xmalloc(F32B(cols)), y[3];
        na_rng_fill(&rng, x, (size_t)cols, -1.0f, 1.0f);
        x[cols - 1] = NAN;
        NA_CHECK_OK(na_test_mm(ref_k, y, x, &w, 1));
        NA_CHECK_MSG(isnan(y[0]) && isnan(y[2]), "ref %s: NaN input gave %g",
                     na_dtype_name(types[ti]), (double)y[0]);
        for (t = 0; t < 2; t++) {
            NA_CHECK_OK(na_test_mm(cpu_k[t], y, x, &w, 1));
            NA_CHECK_MSG(isnan(y[0]) && isnan(y[2]), "cpu %s: NaN input gave %g",
                         na_dtype_name(types[ti]), (double)y[0]);
        }
        free(x);
        free(buf);
    }
}

/* embed on ref and cpu: exactly the dequantised rows. */
static void test_embed(void)
{
    static const int toks[] = { 0, 12, 5, 5, 1 };
    int ti, t, r;
    for (ti = 0; ti < N_TYPES; ti++) {
        na_dtype_t dt = types[ti];
        int cols = na_dtype_block(dt) * 3;
        na_tensor_t w;
        void *buf = na_test_rand_weight(&rng, dt, 13, cols, &w);
        float *want = na_test_xmalloc(F32B(5 * cols)), *got = na_test_xmalloc(F32B(5 * cols));
        for (r = 0; r < 5; r++)
            na_ref_dequant_row(dt, (const uint8_t *)w.data +
                                   (size_t)toks[r] * na_dtype_bytes(dt, (size_t)cols),
                               want + (size_t)r * cols, cols);
        for (t = 0; t < 3; t++) {
            na_kernels_t *k = t == 0 ? ref_k : cpu_k[t - 1];
            na_kbuf_t xb = na_kbuf_host(got, F32B(5 * cols));
            na_kweight_t pw;
            memset(got, 0xff, F32B(5 * cols));
            NA_CHECK_OK(k->ops->place(k, &w, &pw));
            NA_CHECK_OK(k->ops->embed(k, &xb, &pw, toks, 5));
            NA_CHECK_MSG(memcmp(got, want, F32B(5 * cols)) == 0, "embed %s on %s differs",
                         na_dtype_name(dt), k->ops->name);
            k->ops->unplace(k, &pw);
        }
        free(got);
        free(want);
        free(buf);
    }
}

/* Q4_0, Q4_K, Q5_K, Q6_K and Q8_0 weights of rows % 8 == 0 (and enough
 * elements) are placed on the cpu backend as copies in NA_LAYOUT_Q4X8 /
 * Q4KX8 / Q5KX8 / Q6KX8 / Q8X8
 * (kernels/cpu/cpu_pack.c) with their own kernels: the layout is reported,
 * the embedding rows are the model's, a tensor placed twice shares one
 * copy, and the matmul (against the reference, and bit-identical at every
 * batch: check_matmul / check_invariant) on shapes that leave tails of the
 * kernels' input tiles and group chunks; rows % 8 != 0 stays row-major. */
static void test_grouped(void)
{
    static const struct {
        na_dtype_t dt;
        int        layout, rows, cols;
    } cases[] = {
        { NA_DTYPE_Q4_0, NA_LAYOUT_Q4X8, 64, 32 * 33 },
        { NA_DTYPE_Q4_0, NA_LAYOUT_Q4X8, 136, 32 * 20 },
        { NA_DTYPE_Q4_0, NA_LAYOUT_Q4X8, 8, 32 * 260 },
        { NA_DTYPE_Q4_K, NA_LAYOUT_Q4KX8, 64, 256 * 5 },
        { NA_DTYPE_Q4_K, NA_LAYOUT_Q4KX8, 136, 256 * 2 },
        { NA_DTYPE_Q4_K, NA_LAYOUT_Q4KX8, 8, 256 * 33 },
        { NA_DTYPE_Q8_0, NA_LAYOUT_Q8X8, 64, 32 * 33 },
        { NA_DTYPE_Q8_0, NA_LAYOUT_Q8X8, 136, 32 * 20 },
        { NA_DTYPE_Q8_0, NA_LAYOUT_Q8X8, 8, 32 * 260 },
        { NA_DTYPE_Q6_K, NA_LAYOUT_Q6KX8, 64, 256 * 5 },
        { NA_DTYPE_Q6_K, NA_LAYOUT_Q6KX8, 136, 256 * 2 },
        { NA_DTYPE_Q6_K, NA_LAYOUT_Q6KX8, 8, 256 * 33 },
        { NA_DTYPE_Q5_K, NA_LAYOUT_Q5KX8, 64, 256 * 5 },
        { NA_DTYPE_Q5_K, NA_LAYOUT_Q5KX8, 136, 256 * 2 },
        { NA_DTYPE_Q5_K, NA_LAYOUT_Q5KX8, 8, 256 * 33 },
    };
    static const int batches[] = { 2, 3, 5, 8, 9, 13, 40 };
    static const int toks[] = { 0, 7, 63, 8, 9 };
    size_t ci, bi;
    int t, r;
    for (ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        const na_dtype_t dt = cases[ci].dt;
        const int rows = cases[ci].rows, cols = cases[ci].cols;
        na_tensor_t w;
        void *buf = na_test_rand_weight(&rng, dt, rows, cols, &w);
        float *want = na_test_xmalloc(F32B(5 * cols)), *got = na_test_xmalloc(F32B(5 * cols));
        for (r = 0; r < 5; r++)
            na_ref_dequant_row(dt, (const uint8_t *)w.data + (size_t)(toks[r] % rows) *
                                   na_dtype_bytes(dt, (size_t)cols),
                               want + (size_t)r * cols, cols);
        for (t = 0; t < 2; t++) {
            na_kernels_t *k = cpu_k[t];
            na_kbuf_t xb = na_kbuf_host(got, F32B(5 * cols));
            na_kweight_t pw, pw2;
            int tk[5];
            for (r = 0; r < 5; r++)
                tk[r] = toks[r] % rows;
            NA_CHECK_OK(k->ops->place(k, &w, &pw));
            NA_CHECK_MSG(pw.layout == cases[ci].layout, "%s %d x %d placed as layout %d",
                         na_dtype_name(dt), rows, cols, pw.layout);
            NA_CHECK_OK(k->ops->place(k, &w, &pw2));
            NA_CHECK(pw2.buf.host == pw.buf.host && pw.buf.host != w.data);
            memset(got, 0xff, F32B(5 * cols));
            NA_CHECK_OK(k->ops->embed(k, &xb, &pw, tk, 5));
            NA_CHECK_MSG(memcmp(got, want, F32B(5 * cols)) == 0,
                         "embed of the %s %d x %d reordered copy differs", na_dtype_name(dt),
                         rows, cols);
            k->ops->unplace(k, &pw2);
            k->ops->unplace(k, &pw);
        }
        for (bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++)
            check_matmul(dt, rows, cols, batches[bi]);
        check_matmul(dt, rows, cols, 1);
        check_invariant(dt, rows, cols, batches, (int)(sizeof(batches) / sizeof(batches[0])));
        free(got);
        free(want);
        free(buf);
    }
    {                                   /* not whole groups of 8 rows: row-major */
        na_tensor_t w;
        void *buf = na_test_rand_weight(&rng, NA_DTYPE_Q4_0, 67, 32 * 40, &w);
        na_kweight_t pw;
        NA_CHECK_OK(cpu_k[0]->ops->place(cpu_k[0], &w, &pw));
        NA_CHECK(pw.layout == NA_LAYOUT_ROWS && pw.buf.host == w.data);
        cpu_k[0]->ops->unplace(cpu_k[0], &pw);
        free(buf);
    }
}

/* cols not whole blocks, an unknown dtype: NA_ERR_INVALID from every entry. */
static void test_bad_shapes(void)
{
    uint8_t blk[512];
    float x[300], y[4];
    int t;
    memset(blk, 0, sizeof(blk));
    for (t = 0; t < 3; t++) {
        na_kernels_t *k = t == 0 ? ref_k : cpu_k[t - 1];
        na_tensor_t w = { NA_DTYPE_Q4_K, 1, 255, blk, NA_LAYOUT_ROWS };
        na_tensor_t w2 = { NA_DTYPE_Q4_0, 2, 40, blk, NA_LAYOUT_ROWS };
        na_tensor_t w3 = { (na_dtype_t)NA_DTYPE_COUNT, 1, 32, blk, NA_LAYOUT_ROWS };
        na_kweight_t pw = { NA_DTYPE_Q4_0, 2, 40, na_kbuf_host(blk, sizeof(blk)),
                            NA_LAYOUT_ROWS };
        na_kbuf_t xb = na_kbuf_host(x, sizeof(x)), yb = na_kbuf_host(y, sizeof(y));
        int tok = 0;
        NA_CHECK(k->ops->place(k, &w, &pw) == NA_ERR_INVALID);
        NA_CHECK(k->ops->place(k, &w2, &pw) == NA_ERR_INVALID);
        NA_CHECK(k->ops->place(k, &w3, &pw) == NA_ERR_INVALID);
        pw.dtype = NA_DTYPE_Q4_0;
        pw.rows = 2;
        pw.cols = 40;
        pw.buf = na_kbuf_host(blk, sizeof(blk));
        NA_CHECK(k->ops->matmul(k, &yb, &xb, &pw, 1) == NA_ERR_INVALID);
        NA_CHECK(k->ops->embed(k, &xb, &pw, &tok, 1) == NA_ERR_INVALID);
    }
}

int main(void)
{
    na_rng_seed(&rng, 20261127);
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        NA_SKIP("this CPU lacks AVX2/FMA: the cpu backend cannot run");
    if (na_test_kernels_open(&ref_k, cpu_k) != 0)
        return na_test_finish();
    printf("cpu kernels: %s\n", cpu_k[0]->isa ? cpu_k[0]->isa : "?");
    test_dequant_known();
    test_ref_dot();
    test_act_quant_ggml();
    test_embed();
    test_bad_shapes();
    test_nonfinite();
    test_matmul();
    test_batch_invariant();
    test_grouped();
    na_test_kernels_close(ref_k, cpu_k);
    return na_test_finish();
}

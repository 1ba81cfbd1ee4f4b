/* common/quantize.c — f32 to the GGML block formats (quantize.h). The legacy
 * types follow ggml's quantize_row_*_ref (ggml-quants.c): Q4_0/Q5_0 scale
 * the largest-magnitude value to the most negative code, Q4_1/Q5_1 span
 * [min, max]. The K-quants take each sub-block's range (its min clipped at
 * 0, so the min term is a non-negative offset), store sub-block scales and
 * mins as 6-bit (Q6_K: 8-bit) multiples of the super-block's f16 d / dmin,
 * then pick every code against the stored (rounded) scales. */
#include "quantize.h"

#include <math.h>
#include <string.h>

static void na_q_put16(uint8_t *p, float f)
{
    uint16_t h = na_f32_to_f16(f);
    memcpy(p, &h, 2);
}

static float na_q_get16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return na_f16_to_f32(h);
}

static int na_q_clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* One block of 32: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0. */
static void na_q_legacy(na_dtype_t t, const float *x, uint8_t *blk)
{
    int q5 = t == NA_DTYPE_Q5_0 || t == NA_DTYPE_Q5_1;
    int has_m = t == NA_DTYPE_Q4_1 || t == NA_DTYPE_Q5_1;
    int nq = q5 ? 16 : 8, j, code[32];    /* half the code range */
    uint8_t *qs = blk + 2 + (has_m ? 2 : 0) + (q5 ? 4 : 0);
    uint32_t qh = 0;

    if (t == NA_DTYPE_Q8_0) {
        float amax = 0.0f, d, id;
        for (j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        d = amax / 127.0f;
        id = d > 0.0f ? 1.0f / d : 0.0f;
        na_q_put16(blk, d);
        for (j = 0; j < 32; j++)
            blk[2 + j] = (uint8_t)(int8_t)lroundf(x[j] * id);
        return;
    }
    if (has_m) {
        float mn = x[0], mx = x[0], d, id;
        for (j = 1; j < 32; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        d = (mx - mn) / (float)(2 * nq - 1);
        id = d > 0.0f ? 1.0f / d : 0.0f;
        na_q_put16(blk, d);
        na_q_put16(blk + 2, mn);
        for (j = 0; j < 32; j++)
            code[j] = na_q_clamp((int)((x[j] - mn) * id + 0.5f), 0, 2 * nq - 1);
    } else {
        float amax = 0.0f, mx = 0.0f, d, id;
        for (j = 0; j < 32; j++)
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                mx = x[j];
            }
        d = mx / (float)-nq;
        id = d != 0.0f ? 1.0f / d : 0.0f;
        na_q_put16(blk, d);
        for (j = 0; j < 32; j++)
            code[j] = na_q_clamp((int)(x[j] * id + (float)nq + 0.5f), 0, 2 * nq - 1);
    }
    memset(qs, 0, 16);
    for (j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((code[j] & 15) | ((code[j + 16] & 15) << 4));
        qh |= (uint32_t)((code[j] >> 4) & 1) << j;
        qh |= (uint32_t)((code[j + 16] >> 4) & 1) << (j + 16);
    }
    if (q5)
        memcpy(blk + 2 + (has_m ? 2 : 0), &qh, 4);
}

/* One super-block of 256: Q4_K, Q5_K. */
static void na_q_k45(int q5, const float *x, uint8_t *blk)
{
    const int qmax = q5 ? 31 : 15;
    float scale[8], mins[8], max_s = 0.0f, max_m = 0.0f, d, dmin;
    uint8_t *s = blk + 4, *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
    int ls[8], lm[8], code[256], j, l, i;

    for (j = 0; j < 8; j++) {
        float mn = 0.0f, mx = 0.0f;
        for (l = 0; l < 32; l++) {
            mn = fminf(mn, x[32 * j + l]);
            mx = fmaxf(mx, x[32 * j + l]);
        }
        scale[j] = (mx - mn) / (float)qmax;
        mins[j] = -mn;                       /* >= 0 */
        max_s = fmaxf(max_s, scale[j]);
        max_m = fmaxf(max_m, mins[j]);
    }
    na_q_put16(blk, max_s / 63.0f);
    na_q_put16(blk + 2, max_m / 63.0f);
    d = na_q_get16(blk);
    dmin = na_q_get16(blk + 2);
    memset(s, 0, 12);
    for (j = 0; j < 8; j++) {
        ls[j] = d > 0.0f ? na_q_clamp((int)lroundf(scale[j] / d), 0, 63) : 0;
        lm[j] = dmin > 0.0f ? na_q_clamp((int)lroundf(mins[j] / dmin), 0, 63) : 0;
        /* the min must cover the sub-block's negative end: round it up */
        if (dmin > 0.0f && (float)lm[j] * dmin < mins[j] && lm[j] < 63)
            lm[j]++;
        if (j < 4) {
            s[j] = (uint8_t)ls[j];
            s[j + 4] = (uint8_t)lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
    for (j = 0; j < 8; j++) {
        float dd = d * (float)ls[j], dm = dmin * (float)lm[j];
        for (l = 0; l < 32; l++)
            code[32 * j + l] = dd > 0.0f ? na_q_clamp((int)lroundf((x[32 * j + l] + dm) / dd), 0, qmax)
                                         : 0;
    }
    if (q5)
        memset(qh, 0, 32);
    for (i = 0; i < 4; i++)
        for (l = 0; l < 32; l++) {
            int c0 = code[64 * i + l], c1 = code[64 * i + 32 + l];
            qs[32 * i + l] = (uint8_t)((c0 & 15) | ((c1 & 15) << 4));
            if (q5)
                qh[l] |= (uint8_t)((((c0 >> 4) & 1) << (2 * i)) | (((c1 >> 4) & 1) << (2 * i + 1)));
        }
}

/* One super-block of 256: Q6_K (16 sub-blocks of 16, int8 scales). */
static void na_q_q6k(const float *x, uint8_t *blk)
{
    float scale[16], max_abs = 0.0f, max_scale = 0.0f, d;
    uint8_t *ql = blk, *qh = blk + 128;
    int8_t *sc = (int8_t *)(blk + 192);
    int code[256], j, l, i;

    for (j = 0; j < 16; j++) {
        float amax = 0.0f, mx = 0.0f;
        for (l = 0; l < 16; l++)
            if (fabsf(x[16 * j + l]) > amax) {
                amax = fabsf(x[16 * j + l]);
                mx = x[16 * j + l];
            }
        scale[j] = mx / -32.0f;              /* the largest value -> code -32 */
        if (fabsf(scale[j]) > max_abs) {
            max_abs = fabsf(scale[j]);
            max_scale = scale[j];
        }
    }
    na_q_put16(blk + 208, max_scale / -128.0f);
    d = na_q_get16(blk + 208);
    for (j = 0; j < 16; j++) {
        float dd;
        sc[j] = (int8_t)(d != 0.0f ? na_q_clamp((int)lroundf(scale[j] / d), -128, 127) : 0);
        dd = d * (float)sc[j];
        for (l = 0; l < 16; l++)
            code[16 * j + l] = dd != 0.0f
                ? na_q_clamp((int)lroundf(x[16 * j + l] / dd), -32, 31) + 32 : 32;
    }
    for (i = 0; i < 2; i++)
        for (l = 0; l < 32; l++) {
            const int *c = code + 128 * i;
            ql[64 * i + l] = (uint8_t)((c[l] & 15) | ((c[l + 64] & 15) << 4));
            ql[64 * i + 32 + l] = (uint8_t)((c[l + 32] & 15) | ((c[l + 96] & 15) << 4));
            qh[32 * i + l] = (uint8_t)((c[l] >> 4) | ((c[l + 32] >> 4) << 2) |
                                       ((c[l + 64] >> 4) << 4) | ((c[l + 96] >> 4) << 6));
        }
}

size_t na_quantize(na_dtype_t t, const float *src, size_t n, void *dst)
{
    size_t blk = (size_t)na_dtype_block(t), bb = na_dtype_block_bytes(t), b, i;
    uint8_t *q = dst;
    uint16_t *h = dst;

    if (blk == 0 || n % blk != 0)
        return 0;
    switch (t) {
    case NA_DTYPE_F32:
        memcpy(dst, src, 4 * n);
        return 4 * n;
    case NA_DTYPE_F16:
    case NA_DTYPE_BF16:
        for (i = 0; i < n; i++)
            h[i] = t == NA_DTYPE_F16 ? na_f32_to_f16(src[i]) : na_f32_to_bf16(src[i]);
        return 2 * n;
    default:
        break;
    }
    for (b = 0; b < n / blk; b++) {
        const float *x = src + b * blk;
        uint8_t *o = q + b * bb;
        if (t == NA_DTYPE_Q4_K || t == NA_DTYPE_Q5_K)
            na_q_k45(t == NA_DTYPE_Q5_K, x, o);
        else if (t == NA_DTYPE_Q6_K)
            na_q_q6k(x, o);
        else
            na_q_legacy(t, x, o);
    }
    return n / blk * bb;
}

/* kernels/ref/ref_quant.c — the GGML block formats beyond Q8_0 (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, Q6_K; layouts in common/dtype.h): dequantise a
 * row, quantise the inputs, and the dot product of a weight row with
 * quantised inputs, written to be obviously correct. The fast kernels
 * (kernels/cpu/cpu_quant*.c) compute the same integer sums and the same f32
 * expression per block; only the order of the f32 sum over blocks differs.
 *
 * The definition (as ggml's vec_dot kernels, ggml-cpu-quants.c): the
 * inputs of a row are quantised once, as ggml quantises them for the
 * weight type's vec_dot_type, bit for bit: Q8_0 blocks of 32 for Q4_0/Q5_0
 * (and Q8_0 weights, ref_ops.c), Q8_1 blocks for Q4_1/Q5_1 (the same plus
 * s = f16(d * sum q)), Q8_K blocks of 256 with sums of 16 for the K-quants
 * (na_ref_quantize_q8 / _q8_1 / _q8k: codes round(x * 127 / max|x|) to
 * nearest even; d rounded to f16 for Q8_0/Q8_1, 1 / (127 / max|x|) in f32
 * for Q8_K). Per weight block, with d_w, m_w the weight's scale and min and
 * d_x the input block's scale:
 *   Q4_0, Q5_0   sum += isum * (d_w * d_x)                isum = sum (q - 8|16) qx
 *   Q4_1, Q5_1   sum += isum * (d_w * d_x),  summs += m_w * s_x; result sum + summs
 *                                                         isum = sum q qx
 *   Q4_K, Q5_K   sum += (d * d_x) * sumi - (dmin * d_x) * summ
 *                sumi = sum_j sc_j sum_{32 el} q qx, summ = sum_j m_j (bsum_2j + bsum_2j+1)
 *   Q6_K         sum += (d * d_x) * sumi,  sumi = sum_j sc_j sum_{16 el} (q - 32) qx
 * Every integer sum is exact in int32; its conversion to f32 rounds above
 * 2^24 (only in the K-quants' sumi), the same way in every kernel. */
#include <math.h>
#include <string.h>

#include "kernels/ref/ref.h"

/* See ref.h. */
float na_ref_quantize_i8(const float *x, int n, int8_t *q)
{
    float amax = 0.0f, id;
    int j, bad = 0;

    for (j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (!(a <= 3.0e38f))               /* NaN or Inf */
            bad = 1;
        else if (a > amax)
            amax = a;
    }
    if (bad) {
        memset(q, 0, (size_t)n);
        return NAN;
    }
    id = amax != 0.0f ? 127.0f / amax : 0.0f;     /* ggml's 127 / max (iscale) */
    for (j = 0; j < n; j++)
        q[j] = (int8_t)nearbyintf(x[j] * id);     /* |x * id| <= 127 (+ rounding) */
    return amax;
}

static float na_rq_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return na_f16_to_f32(h);
}

/* ---- codes of one block ---------------------------------------------------
 * q[el] of one block as ints (Q4_0/Q5_0/Q6_K already centred: q - 8/16/32),
 * the legacy types' (d, m), the K-quants' per-sub-block scales and mins. */

/* The 32 codes of a legacy block. */
static void na_rq_codes32(na_dtype_t dt, const uint8_t *blk, int *q)
{
    const uint8_t *qs;
    uint32_t qh = 0;
    int j, off;

    switch (dt) {
    case NA_DTYPE_Q4_0: qs = blk + 2;  off = 8;  break;
    case NA_DTYPE_Q4_1: qs = blk + 4;  off = 0;  break;
    case NA_DTYPE_Q5_0: qs = blk + 6;  off = 16; memcpy(&qh, blk + 2, 4); break;
    default:            qs = blk + 8;  off = 0;  memcpy(&qh, blk + 4, 4); break;   /* Q5_1 */
    }
    for (j = 0; j < 16; j++) {
        q[j] = (int)((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - off;
        q[j + 16] = (int)((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - off;
    }
}

/* The 256 codes of a K-quant block (Q6_K: q - 32). */
static void na_rq_codes256(na_dtype_t dt, const uint8_t *blk, int *q)
{
    int i, l;
    if (dt == NA_DTYPE_Q6_K) {
        const uint8_t *ql = blk, *qh = blk + 128;
        for (i = 0; i < 2; i++, ql += 64, qh += 32, q += 128)
            for (l = 0; l < 32; l++) {
                q[l]      = (int)((ql[l] & 0xF)      | (((qh[l] >> 0) & 3) << 4)) - 32;
                q[l + 32] = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                q[l + 64] = (int)((ql[l] >> 4)       | (((qh[l] >> 4) & 3) << 4)) - 32;
                q[l + 96] = (int)((ql[l + 32] >> 4)  | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
        return;
    }
    {
        int q5 = dt == NA_DTYPE_Q5_K;
        const uint8_t *qh = blk + 16, *qs = blk + (q5 ? 48 : 16);
        for (i = 0; i < 4; i++, qs += 32)          /* 64 elements per 32 bytes */
            for (l = 0; l < 32; l++) {
                q[64 * i + l]      = (qs[l] & 0xF) + (q5 ? ((qh[l] >> (2 * i)) & 1) << 4 : 0);
                q[64 * i + 32 + l] = (qs[l] >> 4) + (q5 ? ((qh[l] >> (2 * i + 1)) & 1) << 4 : 0);
            }
    }
}

/* ---- dequantise ------------------------------------------------------------ */

void na_ref_dequant_row(na_dtype_t dt, const void *rowp, float *out, int n)
{
    const uint8_t *row = rowp;
    int blk = na_dtype_block(dt), b, j, q[NA_QK_K];
    size_t bb = na_dtype_block_bytes(dt);

    switch (dt) {
    case NA_DTYPE_F32:
        memcpy(out, row, sizeof(float) * (size_t)n);
        return;
    case NA_DTYPE_F16:
    case NA_DTYPE_BF16:
        for (j = 0; j < n; j++) {
            uint16_t h;
            memcpy(&h, row + 2 * (size_t)j, 2);
            out[j] = dt == NA_DTYPE_F16 ? na_f16_to_f32(h) : na_bf16_to_f32(h);
        }
        return;
    default:
        break;
    }
    if (blk == 0)
        return;
    for (b = 0; b < n / blk; b++, row += bb, out += blk) {
        switch (dt) {
        case NA_DTYPE_Q8_0: {
            float d = na_rq_f16(row);
            for (j = 0; j < 32; j++)
                out[j] = d * (float)(int8_t)row[2 + j];
            break;
        }
        case NA_DTYPE_Q4_0:
        case NA_DTYPE_Q5_0: {
            float d = na_rq_f16(row);
            na_rq_codes32(dt, row, q);
            for (j = 0; j < 32; j++)
                out[j] = (float)q[j] * d;
            break;
        }
        case NA_DTYPE_Q4_1:
        case NA_DTYPE_Q5_1: {
            float d = na_rq_f16(row), m = na_rq_f16(row + 2);
            na_rq_codes32(dt, row, q);
            for (j = 0; j < 32; j++)
                out[j] = (float)q[j] * d + m;
            break;
        }
        case NA_DTYPE_Q4_K:
        case NA_DTYPE_Q5_K: {
            float d = na_rq_f16(row), dmin = na_rq_f16(row + 2);
            int s, sc, m;
            na_rq_codes256(dt, row, q);
            for (s = 0; s < 8; s++) {
                float d1, m1;
                na_ref_k4_scale_min(row + 4, s, &sc, &m);
                d1 = d * (float)sc;
                m1 = dmin * (float)m;
                for (j = 0; j < 32; j++)
                    out[32 * s + j] = d1 * (float)q[32 * s + j] - m1;
            }
            break;
        }
        case NA_DTYPE_Q6_K: {
            float d = na_rq_f16(row + 208);
            na_rq_codes256(dt, row, q);
            for (j = 0; j < NA_QK_K; j++)
                out[j] = d * (float)(int8_t)row[192 + j / 16] * (float)q[j];
            break;
        }
        default:
            break;
        }
    }
}

float na_ref_quant_weight_at(const na_tensor_t *w, int r, int j)
{
    size_t idx = (size_t)r * (size_t)w->cols + (size_t)j;
    int blk = na_dtype_block(w->dtype);
    float v[NA_QK_K];

    if (blk == 0)
        return NAN;
    na_ref_dequant_row(w->dtype, (const uint8_t *)w->data +
                                 idx / (size_t)blk * na_dtype_block_bytes(w->dtype), v, blk);
    return v[idx % (size_t)blk];
}

/* ---- inputs ------------------------------------------------------------------ */

float na_ref_quantize_q8k(const float *x, int8_t *q, int16_t *bsums)
{
    float amax = na_ref_quantize_i8(x, NA_QK_K, q);  /* NaN: q all 0, so bsums 0 */
    int j;

    for (j = 0; j < NA_QK_K / 16; j++) {
        int s = 0, i;
        for (i = 0; i < 16; i++)
            s += q[16 * j + i];
        bsums[j] = (int16_t)s;
    }
    if (amax == 0.0f)
        return 0.0f;
    return 1.0f / (127.0f / amax);                    /* ggml: d = 1 / iscale */
}

float na_ref_quantize_q8_1(const float *x, int8_t *q, int16_t *bsum, float *s)
{
    float amax = na_ref_quantize_i8(x, NA_Q8_0_BLOCK, q), d = amax / 127.0f;
    int j, sum = 0;

    for (j = 0; j < NA_Q8_0_BLOCK; j++)
        sum += q[j];
    *bsum = (int16_t)sum;                             /* |sum| <= 32 * 127 */
    *s = na_ref_f16_round((float)sum * d);
    return na_ref_f16_round(d);
}

int na_ref_quant_kind(na_dtype_t dt)
{
    switch (dt) {
    case NA_DTYPE_Q4_0: case NA_DTYPE_Q4_1: case NA_DTYPE_Q5_0: case NA_DTYPE_Q5_1:
        return 1;
    case NA_DTYPE_Q4_K: case NA_DTYPE_Q5_K: case NA_DTYPE_Q6_K:
        return 2;
    default:
        return 0;
    }
}

void na_ref_quantize_x(na_dtype_t dt, const float *x, int n, na_ref_qx_t *qx)
{
    int b;
    if (na_ref_quant_kind(dt) == 2) {
        for (b = 0; b < n / NA_QK_K; b++)
            qx->d[b] = na_ref_quantize_q8k(x + (size_t)b * NA_QK_K, qx->q + (size_t)b * NA_QK_K,
                                           qx->bsums + (size_t)b * (NA_QK_K / 16));
        return;
    }
    for (b = 0; b < n / NA_Q8_0_BLOCK; b++) {
        float s;
        qx->d[b] = na_ref_quantize_q8_1(x + (size_t)b * NA_Q8_0_BLOCK, qx->q + (size_t)b * NA_Q8_0_BLOCK,
                                        qx->bsums + b, &s);
        if (qx->s != NULL)
            qx->s[b] = s;
    }
}

/* ---- dot products ------------------------------------------------------------ */

float na_ref_vec_dot(na_dtype_t dt, const void *rowp, const na_ref_qx_t *qx, int n)
{
    const uint8_t *row = rowp;
    size_t bb = na_dtype_block_bytes(dt);
    float sum = 0.0f, summs = 0.0f;
    int b, j, s, q[NA_QK_K];

    if (na_ref_quant_kind(dt) == 1) {
        for (b = 0; b < n / NA_Q8_0_BLOCK; b++, row += bb) {
            const int8_t *x = qx->q + (size_t)b * NA_Q8_0_BLOCK;
            float dw = na_rq_f16(row), dx = qx->d[b];
            int32_t isum = 0;
            na_rq_codes32(dt, row, q);
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                isum += q[j] * x[j];
            sum += (float)isum * (dw * dx);
            if (dt == NA_DTYPE_Q4_1 || dt == NA_DTYPE_Q5_1)
                summs += na_rq_f16(row + 2) * qx->s[b];
        }
        return sum + summs;
    }
    for (b = 0; b < n / NA_QK_K; b++, row += bb) {
        const int8_t *x = qx->q + (size_t)b * NA_QK_K;
        const int16_t *bs = qx->bsums + (size_t)b * (NA_QK_K / 16);
        float dx = qx->d[b];
        int32_t sumi = 0, summ = 0;
        na_rq_codes256(dt, row, q);
        if (dt == NA_DTYPE_Q6_K) {
            for (s = 0; s < 16; s++) {
                int32_t is = 0;
                for (j = 0; j < 16; j++)
                    is += q[16 * s + j] * x[16 * s + j];
                sumi += (int8_t)row[192 + s] * is;
            }
            sum += (na_rq_f16(row + 208) * dx) * (float)sumi;
            continue;
        }
        for (s = 0; s < 8; s++) {
            int32_t is = 0;
            int sc, m;
            na_ref_k4_scale_min(row + 4, s, &sc, &m);
            for (j = 0; j < 32; j++)
                is += q[32 * s + j] * x[32 * s + j];
            sumi += sc * is;
            summ += m * (bs[2 * s] + bs[2 * s + 1]);
        }
        sum += (na_rq_f16(row) * dx) * (float)sumi - (na_rq_f16(row + 2) * dx) * (float)summ;
    }
    return sum;
}

float na_ref_dot_quant(na_dtype_t dt, const void *rowp, const float *x, int n)
{
    const uint8_t *row = rowp;
    int blk = na_ref_quant_kind(dt) == 2 ? NA_QK_K : NA_Q8_0_BLOCK, b;
    size_t bb = na_dtype_block_bytes(dt);
    int8_t q[NA_QK_K];
    float d;
    int16_t bsums[NA_QK_K / 16];
    float qs;
    na_ref_qx_t qx = { q, &d, bsums, &qs };
    float sum = 0.0f;

    for (b = 0; b < n / blk; b++) {     /* one block of inputs at a time: the same bits */
        na_ref_quantize_x(dt, x + (size_t)b * blk, blk, &qx);
        sum += na_ref_vec_dot(dt, row + (size_t)b * bb, &qx, blk);
    }
    return sum;
}

/* kernels/ref/ref_attn.c — scalar reference attention: causal prefill, GQA
 * decode and the online-softmax partial over one KV span.
 *
 * Decode/prefill use a plain two-pass softmax (max first, then exp/sum and
 * the weighted sum of V) so they share no algorithm with the online-softmax
 * partials they are compared against. No scratch memory: the scores are
 * recomputed in the second pass. */
#include <math.h>

#include "kernels/expf.h"
#include "kernels/ref/ref.h"

/* Element i of KV row `row` (f16, bf16 or f32). */
static float na_ref_kv_at(const void *base, na_dtype_t dt, size_t row_off, int i)
{
    if (dt == NA_DTYPE_F16)
        return na_f16_to_f32(((const uint16_t *)base)[row_off + (size_t)i]);
    if (dt == NA_DTYPE_BF16)
        return na_bf16_to_f32(((const uint16_t *)base)[row_off + (size_t)i]);
    return ((const float *)base)[row_off + (size_t)i];
}

static float na_ref_dot_kv(const float *q, const void *kc, na_dtype_t dt,
                           size_t row_off, int head_dim)
{
    float s = 0.0f;
    int i;
    for (i = 0; i < head_dim; i++)
        s += q[i] * na_ref_kv_at(kc, dt, row_off, i);
    return s;
}

/* One query head against tokens 0..n-1 of KV head kvh: out[head_dim]. */
static void na_ref_attn_head(float *out, const float *q, const void *kc, const void *vc,
                             na_dtype_t dt, int n, int n_kv_heads, int kvh, int head_dim)
{
    float scale = 1.0f / sqrtf((float)head_dim);
    float max = -INFINITY, sum = 0.0f;
    int t, i;

    for (t = 0; t < n; t++) {
        size_t off = ((size_t)t * n_kv_heads + kvh) * head_dim;
        float s = na_ref_dot_kv(q, kc, dt, off, head_dim) * scale;
        if (s > max)
            max = s;
    }
    for (i = 0; i < head_dim; i++)
        out[i] = 0.0f;
    for (t = 0; t < n; t++) {
        size_t off = ((size_t)t * n_kv_heads + kvh) * head_dim;
        float p = na_expf(na_ref_dot_kv(q, kc, dt, off, head_dim) * scale - max);
        sum += p;
        for (i = 0; i < head_dim; i++)
            out[i] += p * na_ref_kv_at(vc, dt, off, i);
    }
    for (i = 0; i < head_dim && sum > 0.0f; i++)    /* n == 0: zeros */
        out[i] /= sum;
}

/* Query head h uses KV head h / (n_heads / n_kv_heads). */
void na_ref_attn_decode(na_kernels_t *k, float *out, const float *q,
                        const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                        int ctx, int n_heads, int n_kv_heads, int head_dim)
{
    (void)k;       /* ops-table signature: the reference needs no backend state */
    int group = n_heads / n_kv_heads, h;
    for (h = 0; h < n_heads; h++)
        na_ref_attn_head(out + (size_t)h * head_dim, q + (size_t)h * head_dim,
                         kcache, vcache, kv_dtype, ctx, n_kv_heads, h / group, head_dim);
}

/* Token t of the prompt is a decode over positions 0..pos0+t. */
void na_ref_attn_prefill(na_kernels_t *k, float *out, const float *q,
                         const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                         int n_tok, int pos0, int n_heads, int n_kv_heads, int head_dim)
{
    int t;
    for (t = 0; t < n_tok; t++) {
        size_t row = (size_t)t * n_heads * head_dim;
        na_ref_attn_decode(k, out + row, q + row, kcache, vcache, kv_dtype,
                           pos0 + t + 1, n_heads, n_kv_heads, head_dim);
    }
}

/* Fold the spans' tokens into (st, acc) one token at a time, in order: the
 * textbook online softmax update m' = max(m, s), l' = l e^(m-m') + e^(s-m'),
 * acc likewise (so how spans split a run does not matter here either; it
 * is not the cpu backend's chunked order, and not bit-identical to it). */
void na_ref_attn_partial(na_kernels_t *k, na_kattn_stat_t *st, float *acc,
                         const float *q, int group, int head_dim,
                         const na_kv_span_t *spans, int n_spans, na_dtype_t kv_dtype,
                         float scale)
{
    (void)k;       /* ops-table signature: the reference needs no backend state */
    int g, t, i, j;
    for (j = 0; j < n_spans; j++) {
        const na_kv_span_t *span = &spans[j];
        for (g = 0; g < group; g++) {
            const float *qg = q + (size_t)g * head_dim;
            float *ag = acc + (size_t)g * head_dim;
            for (t = 0; t < span->n; t++) {
                size_t off = (size_t)t * span->stride;
                float s = na_ref_dot_kv(qg, span->k, kv_dtype, off, head_dim) * scale;
                float m = s > st[g].m ? s : st[g].m;
                float a = st[g].m == -INFINITY ? 0.0f : na_expf(st[g].m - m);
                float p = na_expf(s - m);
                for (i = 0; i < head_dim; i++)
                    ag[i] = ag[i] * a + p * na_ref_kv_at(span->v, kv_dtype, off, i);
                st[g].l = st[g].l * a + p;
                st[g].m = m;
            }
        }
    }
}

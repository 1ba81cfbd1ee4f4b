/* kernels/csd/csd_kernel.c — the CSD decode-attention kernel (csd_kernel.h).
 *
 * Written for Vitis HLS: fixed-size on-chip row buffers, burst copies of
 * whole K/V rows from device memory, no allocation, no library calls other
 * than expf/logf (hls_math). gcc ignores the pragmas (-Wno-unknown-pragmas
 * is set for this file). v++ builds it with common/dtype.h for the f16
 * conversion (docs/csd.md). */
#include <math.h>
#include <string.h>

#include "common/dtype.h"
#include "kernels/csd/csd_kernel.h"

uint64_t na_csd_page_bytes(const na_csd_shape_t *s)
{
    return 2u * (uint64_t)s->page_tokens * s->head_dim * sizeof(uint16_t);
}

uint32_t na_csd_page_sum(const void *page, uint64_t n)
{
    const uint16_t *w = page;
    uint32_t a = 0xffff, b = 0xffff;
    uint64_t i;

    for (i = 0; i < n / 2; i++) {
#pragma HLS PIPELINE II=1
        a = (a + w[i]) % 65535u;
        b = (b + a) % 65535u;
    }
    return (b << 16) | a;
}

/* Validate job d against the page table and the KV buffer. */
static int32_t na_csd_job_check(const na_csd_desc_t *d, const na_csd_page_t *pages,
                                uint32_t n_page_entries, const uint16_t *kv, uint64_t kv_bytes,
                                uint64_t pb, uint32_t page_tokens)
{
    uint32_t p, need = (d->n_tokens + page_tokens - 1) / page_tokens;

    if (d->page0 > n_page_entries || d->n_pages > n_page_entries - d->page0 ||
        d->n_pages < need)
        return NA_CSD_BAD_DESC;
    for (p = 0; p < need; p++) {
        const na_csd_page_t *pg = &pages[d->page0 + p];
        if (pg->off > kv_bytes || pb > kv_bytes - pg->off || pg->off % 2 != 0)
            return NA_CSD_BAD_PAGE;
        if ((pg->flags & NA_CSD_PAGE_SUM) &&
            na_csd_page_sum((const char *)kv + pg->off, pb) != pg->sum)
            return NA_CSD_CHECKSUM;
    }
    return NA_CSD_OK;
}

/* One job: online softmax of `group` query heads over the job's tokens. */
static void na_csd_job(const na_csd_desc_t *d, const na_csd_page_t *pages, const uint16_t *kv,
                       const float *q, float *o, float *lse, const na_csd_shape_t *s)
{
    float qb[NA_CSD_MAX_GROUP][NA_CSD_MAX_HEAD_DIM];
    float acc[NA_CSD_MAX_GROUP][NA_CSD_MAX_HEAD_DIM];
    float m[NA_CSD_MAX_GROUP], l[NA_CSD_MAX_GROUP];
    uint16_t krow[NA_CSD_MAX_HEAD_DIM], vrow[NA_CSD_MAX_HEAD_DIM];
    float kf[NA_CSD_MAX_HEAD_DIM], vf[NA_CSD_MAX_HEAD_DIM];
#pragma HLS ARRAY_PARTITION variable=kf cyclic factor=16
#pragma HLS ARRAY_PARTITION variable=vf cyclic factor=16
    const uint32_t hd = s->head_dim, grp = s->group, bt = s->page_tokens;
    uint32_t g, i, t;

    for (g = 0; g < grp; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
        for (i = 0; i < hd; i++) {
#pragma HLS PIPELINE II=1
            qb[g][i] = q[(size_t)g * hd + i];
            acc[g][i] = 0.0f;
        }
    }
    for (t = 0; t < d->n_tokens; t++) {
        const uint16_t *page = kv + pages[d->page0 + t / bt].off / 2;
        uint32_t r = t % bt;

        /* one burst per row, shared by every query head of the group */
        memcpy(krow, page + (size_t)r * hd, hd * sizeof(uint16_t));
        memcpy(vrow, page + (size_t)bt * hd + (size_t)r * hd, hd * sizeof(uint16_t));
        for (i = 0; i < hd; i++) {            /* converted once for the group */
#pragma HLS PIPELINE II=1
            kf[i] = na_f16_to_f32(krow[i]);
            vf[i] = na_f16_to_f32(vrow[i]);
        }
        for (g = 0; g < grp; g++) {
            float dot = 0.0f, mx, a, p;
            for (i = 0; i < hd; i++) {
#pragma HLS PIPELINE II=1
                dot += qb[g][i] * kf[i];
            }
            dot *= s->scale;
            mx = dot > m[g] ? dot : m[g];
            a = m[g] == -INFINITY ? 0.0f : expf(m[g] - mx);
            p = expf(dot - mx);
            for (i = 0; i < hd; i++) {
#pragma HLS PIPELINE II=1
                acc[g][i] = acc[g][i] * a + p * vf[i];
            }
            l[g] = l[g] * a + p;
            m[g] = mx;
        }
    }
    for (g = 0; g < grp; g++) {
        float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
        for (i = 0; i < hd; i++) {
#pragma HLS PIPELINE II=1
            o[(size_t)g * hd + i] = acc[g][i] * inv;
        }
        lse[g] = l[g] > 0.0f ? m[g] + logf(l[g]) : -INFINITY;
    }
}

void na_csd_attn(const na_csd_desc_t *desc, uint32_t n_jobs,
                 const na_csd_page_t *pages, uint32_t n_page_entries,
                 const uint16_t *kv, uint64_t kv_bytes,
                 const float *q, float *o, float *lse, int32_t *status,
                 na_csd_shape_t shape)
{
#pragma HLS INTERFACE m_axi port=desc   bundle=gmem0
#pragma HLS INTERFACE m_axi port=pages  bundle=gmem0
#pragma HLS INTERFACE m_axi port=kv     bundle=gmem1 max_read_burst_length=256
#pragma HLS INTERFACE m_axi port=q      bundle=gmem2
#pragma HLS INTERFACE m_axi port=o      bundle=gmem2
#pragma HLS INTERFACE m_axi port=lse    bundle=gmem2
#pragma HLS INTERFACE m_axi port=status bundle=gmem2
    const size_t qn = (size_t)shape.group * shape.head_dim;
    const uint64_t pb = na_csd_page_bytes(&shape);
    int shape_ok = shape.head_dim >= 1 && shape.head_dim <= NA_CSD_MAX_HEAD_DIM &&
                   shape.group >= 1 && shape.group <= NA_CSD_MAX_GROUP &&
                   shape.page_tokens >= 1;
    uint32_t j;

    for (j = 0; j < n_jobs; j++) {
        const na_csd_desc_t *d = &desc[j];
        int32_t st = shape_ok ? na_csd_job_check(d, pages, n_page_entries, kv, kv_bytes, pb,
                                                 shape.page_tokens)
                              : NA_CSD_BAD_SHAPE;
        status[j] = st;
        if (st == NA_CSD_OK)
            na_csd_job(d, pages, kv, q + j * qn, o + j * qn, lse + (size_t)j * shape.group,
                       &shape);
    }
}

void na_csd_top(const na_csd_desc_t *desc, uint32_t n_jobs, const na_csd_page_t *pages,
                uint32_t n_page_entries, const uint16_t *kv, uint64_t kv_bytes,
                const float *q, float *o, float *lse, int32_t *status,
                uint32_t head_dim, uint32_t group, uint32_t page_tokens, float scale)
{
#pragma HLS INTERFACE s_axilite port=return
    na_csd_shape_t s = { head_dim, group, page_tokens, scale };
    na_csd_attn(desc, n_jobs, pages, n_page_entries, kv, kv_bytes, q, o, lse, status, s);
}

void na_csd_merge(float *o_a, float *lse_a, const float *o_b, float lse_b, int head_dim)
{
    float m, wa, wb;
    int i;

    if (lse_b == -INFINITY)
        return;
    if (*lse_a == -INFINITY) {
        memcpy(o_a, o_b, sizeof(float) * (size_t)head_dim);
        *lse_a = lse_b;
        return;
    }
    m = *lse_a > lse_b ? *lse_a : lse_b;
    wa = expf(*lse_a - m);
    wb = expf(lse_b - m);
    for (i = 0; i < head_dim; i++)
        o_a[i] = (o_a[i] * wa + o_b[i] * wb) / (wa + wb);
    *lse_a = m + logf(wa + wb);
}

const char *na_csd_status_name(int32_t st)
{
    switch (st) {
    case NA_CSD_OK:        return "ok";
    case NA_CSD_BAD_DESC:  return "bad descriptor (pages outside the page table)";
    case NA_CSD_BAD_PAGE:  return "page outside the device KV buffer";
    case NA_CSD_CHECKSUM:  return "KV page checksum mismatch";
    case NA_CSD_BAD_SHAPE: return "shape outside the kernel's bounds";
    default:               return "unknown kernel status";
    }
}

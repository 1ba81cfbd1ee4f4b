/* kernels/cuda/cuda_attn.cu — causal prefill and decode attention on the GPU
 * (flash-decoding).
 *
 * Grid: (query row x KV head x head sub-group, context split). A block of
 * NA_CU_ATTN_WARPS warps takes one KV head, up to G query heads of its GQA
 * group, one query row and one split of that row's causal context. Each warp
 * walks every NA_CU_ATTN_WARPS-th token of the split: it loads the token's K
 * and V rows once (lane l holds elements [l*DL, l*DL+DL) of head_dim, vector
 * loads when head_dim == 32*DL) and folds them into the online softmax
 * (m, l, acc) of all G heads, so each K/V row is read once per group. The
 * warps' partials merge in shared memory; with one split the block writes
 * the output, otherwise (m, l, acc) go to scratch and a second kernel merges
 * the splits by log-sum-exp. Scores are dot * (1/sqrt(head_dim)) as in
 * kernels/ref/ref_attn.c.
 *
 * That is na_cu_attn_k, the one-token-a-warp kernel (f32 K/V and the other
 * head sizes); f16 / bf16 K/V with head_dim 64, 128 or 256 take
 * na_cu_att2_k, the same grid with a tile of 32 tokens a warp (below).
 *
 * Batched decode (na_cu_attn_batch; first run on an H200, 2026-11-27,
 * against kernels/ref in test_cuda_ops): the same kernels with grid z = request, each block reading its
 * request's q/out/K/V pointers and context length from a descriptor array,
 * so one launch (+ one merge) serves every request of a layer; the splits
 * are planned for the longest context, and a split past a request's
 * context leaves an empty partial (m = -inf) the merge ignores. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_launch.h"

#include <stdlib.h>
#include <string.h>

#define NA_CU_ATTN_WARPS   4
#define NA_CU_ATTN_MIN_LEN 64     /* tokens per split at least */

/* Grid: x = row * (KV heads x sub-groups) + head block, y = split (rows may
 * exceed gridDim.y's 65535, splits are capped there). */

/* DL consecutive 16-bit or f32 elements, read as one (or two) vector loads. */
template <int N>
struct alignas(2 * N > 16 ? 16 : 2 * N) na_cu_h_chunk {
    unsigned short h[N];
};
template <int N>
struct alignas(4 * N > 16 ? 16 : 4 * N) na_cu_f_chunk {
    float f[N];
};

/* out[e] = row[off + lane*DL + e] for e < DL and element < hd (0 past it). */
template <int DT, int DL>
static __device__ __forceinline__ void na_cu_attn_row(float *out, const void *base, size_t off,
                                                      int lane, int hd, bool full)
{
    size_t i0 = off + (size_t)lane * DL;
    if (full) {
        if (DT == NA_CU_F32) {
            na_cu_f_chunk<DL> c = *reinterpret_cast<const na_cu_f_chunk<DL> *>(
                static_cast<const float *>(base) + i0);
#pragma unroll
            for (int e = 0; e < DL; e++)
                out[e] = c.f[e];
        } else {
            na_cu_h_chunk<DL> c = *reinterpret_cast<const na_cu_h_chunk<DL> *>(
                static_cast<const unsigned short *>(base) + i0);
#pragma unroll
            for (int e = 0; e < DL; e++)
                out[e] = DT == NA_CU_F16 ? na_cu_h2f(c.h[e]) : na_cu_bf2f(c.h[e]);
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < DL; e++)
        out[e] = lane * DL + e < hd ? na_cu_load<DT>(base, i0 + (size_t)e) : 0.0f;
}

/* Fold one token's K/V row pair into the online softmax of the G heads. */
template <int G, int DL>
static __device__ __forceinline__ void na_cu_attn_fold(const float (&qv)[G][DL],
                                                       float (&acc)[G][DL], float (&m)[G],
                                                       float (&l)[G], const float *kr,
                                                       const float *vr, float scale)
{
#pragma unroll
    for (int g = 0; g < G; g++) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < DL; e++)
            d += qv[g][e] * kr[e];
        float sc = na_cu_warp_sum(d) * scale;
        float mn = fmaxf(m[g], sc);
        float a = expf(m[g] - mn);                     /* m = -inf: 0 */
        float p = expf(sc - mn);
        l[g] = l[g] * a + p;
#pragma unroll
        for (int e = 0; e < DL; e++)
            acc[g][e] = acc[g][e] * a + p * vr[e];
        m[g] = mn;
    }
}

/* Batched decode: request blockIdx.z's pointers, context (ctx 0: no tokens,
 * zeros) and its own split plan (splits past it are empty), and its part
 * of the scratch. */
static __device__ __forceinline__ void na_cu_attn_take(const na_cu_attn_req_t *reqs, float **out,
                                                       const float **q, const void **kc,
                                                       const void **vc, na_cu_attn_shape_t *s,
                                                       float **scratch)
{
    const na_cu_attn_req_t *r = reqs + blockIdx.z;
    *out = r->out;
    *q = r->q;
    *kc = r->k;
    *vc = r->v;
    s->ctx0 = r->ctx - 1;
    s->split_len = r->split_len;
    *scratch += (size_t)blockIdx.z * (size_t)s->n_heads * (size_t)s->n_splits *
                (size_t)(s->head_dim + 2);
}

/* The end of a block of either kernel: the warps' (m, l, acc) in shared
 * memory (sm_m / sm_l [warp][G], sm_acc [warp][G][A]) merged by log-sum-exp
 * (m in the log2 domain when LOG2) for the ng heads from output head oh0,
 * then written: the output row (one split) or the split's partial in
 * scratch (m, l, acc[hd]) for na_cu_attn_merge_k. */
template <bool LOG2>
static __device__ __forceinline__ void na_cu_attn_emit(float *out, float *scratch,
                                                       const float *sm_m, const float *sm_l,
                                                       const float *sm_acc, int G, int A, int ng,
                                                       int hd, size_t oh0, int n_splits, int split)
{
    for (int idx = threadIdx.x; idx < ng * hd; idx += blockDim.x) {
        int g = idx / hd, i = idx % hd;
        float mm = -INFINITY, ll = 0.0f, aa = 0.0f;
        for (int w = 0; w < NA_CU_ATTN_WARPS; w++)
            mm = fmaxf(mm, sm_m[w * G + g]);
        if (mm != -INFINITY)
            for (int w = 0; w < NA_CU_ATTN_WARPS; w++) {
                float f = LOG2 ? exp2f(sm_m[w * G + g] - mm) : expf(sm_m[w * G + g] - mm);
                ll += sm_l[w * G + g] * f;
                aa += sm_acc[((size_t)w * G + g) * A + i] * f;
            }
        size_t oh = oh0 + (size_t)g;
        if (n_splits == 1) {
            out[oh * (size_t)hd + (size_t)i] = ll > 0.0f ? aa / ll : 0.0f;
        } else {
            float *p = scratch + (oh * (size_t)n_splits + (size_t)split) * (size_t)(hd + 2);
            if (i == 0) {
                p[0] = mm;
                p[1] = ll;
            }
            p[2 + i] = aa;
        }
    }
}

template <int DT, int G, int DL>
__global__ void __launch_bounds__(32 * NA_CU_ATTN_WARPS)
na_cu_attn_k(float *out, const float *q, const void *kc, const void *vc, na_cu_attn_shape_t s,
             bool vec, float *scratch, const na_cu_attn_req_t *reqs)
{
    if (reqs != NULL) {                  /* batched decode: request blockIdx.z */
        na_cu_attn_take(reqs, &out, &q, &kc, &vc, &s, &scratch);
        vec = vec && (((uintptr_t)kc | (uintptr_t)vc) % 16) == 0;
    }
    __shared__ float sm_m[NA_CU_ATTN_WARPS][G], sm_l[NA_CU_ATTN_WARPS][G];
    __shared__ float sm_acc[NA_CU_ATTN_WARPS][G][32 * DL];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int group = s.n_heads / s.n_kv_heads, n_hg = (group + G - 1) / G;
    int n_hb = s.n_kv_heads * n_hg, hb = blockIdx.x % n_hb;
    int kvh = hb / n_hg, hg = hb % n_hg;
    int row = blockIdx.x / n_hb, split = blockIdx.y, hd = s.head_dim;
    int h0 = kvh * group + hg * G;                     /* first query head of the block */
    int ng = group - hg * G < G ? group - hg * G : G;  /* heads it takes */
    int ctx = s.ctx0 + row + 1;
    int t0 = split * s.split_len;
    int t1 = t0 + s.split_len < ctx ? t0 + s.split_len : ctx;   /* t1 <= t0: empty */
    bool full = vec && hd == 32 * DL;          /* whole, aligned rows: vector loads */
    float scale = 1.0f / sqrtf((float)hd);
    float qv[G][DL], acc[G][DL], m[G], l[G];

#pragma unroll
    for (int g = 0; g < G; g++) {
        size_t qo = ((size_t)row * s.n_heads + (size_t)(h0 + (g < ng ? g : 0))) * (size_t)hd;
#pragma unroll
        for (int e = 0; e < DL; e++) {
            int i = lane * DL + e;
            qv[g][e] = g < ng && i < hd ? q[qo + (size_t)i] : 0.0f;
            acc[g][e] = 0.0f;
        }
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    /* two tokens per step, both rows loaded before either is folded: twice
     * the loads in flight per warp (decode is bound by their latency) */
    for (int t = t0 + warp; t < t1; t += 2 * NA_CU_ATTN_WARPS) {
        int t2 = t + NA_CU_ATTN_WARPS;
        size_t kvs = (size_t)s.n_kv_heads * (size_t)hd;
        size_t off = (size_t)t * kvs + (size_t)kvh * (size_t)hd;
        float kr[DL], vr[DL], kr2[DL], vr2[DL];
        na_cu_attn_row<DT, DL>(kr, kc, off, lane, hd, full);
        na_cu_attn_row<DT, DL>(vr, vc, off, lane, hd, full);
        if (t2 < t1) {
            na_cu_attn_row<DT, DL>(kr2, kc, off + (size_t)NA_CU_ATTN_WARPS * kvs, lane, hd, full);
            na_cu_attn_row<DT, DL>(vr2, vc, off + (size_t)NA_CU_ATTN_WARPS * kvs, lane, hd, full);
        }
        na_cu_attn_fold<G, DL>(qv, acc, m, l, kr, vr, scale);
        if (t2 < t1)
            na_cu_attn_fold<G, DL>(qv, acc, m, l, kr2, vr2, scale);
    }
    /* merge the warps */
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (lane == 0) {
            sm_m[warp][g] = m[g];
            sm_l[warp][g] = l[g];
        }
#pragma unroll
        for (int e = 0; e < DL; e++)
            sm_acc[warp][g][lane * DL + e] = acc[g][e];
    }
    __syncthreads();
    na_cu_attn_emit<false>(out, scratch, &sm_m[0][0], &sm_l[0][0], &sm_acc[0][0][0], G, 32 * DL,
                           ng, hd, (size_t)row * s.n_heads + (size_t)h0, s.n_splits, split);
}

/* ---- the token-tile kernel (f16 / bf16 K/V, head_dim 64, 128 or 256) ------
 * The same grid, blocks and partials as na_cu_attn_k, but a warp takes a
 * tile of 32 tokens per step instead of one: lane l scores token t0 + l for
 * every query head of the group (its K row read with 16-byte loads, q from
 * shared memory, read by all lanes at once), the online softmax is updated
 * once per tile and head (one warp max, one rescale: not per token), in the
 * log2 domain (exp2f, the scale and log2(e) folded into q), and the tile's
 * weights p go through shared memory to the V pass, where LR = head_dim / 8
 * lanes cover one V row with 16-byte loads (32 / LR rows per step; the rows'
 * partial sums joined by shuffles at the end). Each K/V row is read once
 * per GQA group, as before. A block writes (m, l, acc) with m in the log2
 * domain; na_cu_attn_merge_k takes that form when log2 is set. */
#define NA_CU_ATT2_TILE 32

/* 8 consecutive 16-bit elements at base + i0: one 16-byte load where the
 * K/V base is 16-byte aligned (i0 is a multiple of 8), else eight. */
static __device__ __forceinline__ uint4 na_cu_att2_raw(const void *base, size_t i0, bool aligned)
{
    const unsigned short *p = static_cast<const unsigned short *>(base) + i0;
    if (aligned)
        return *reinterpret_cast<const uint4 *>(p);
    return make_uint4(p[0] | (unsigned)p[1] << 16, p[2] | (unsigned)p[3] << 16,
                      p[4] | (unsigned)p[5] << 16, p[6] | (unsigned)p[7] << 16);
}

template <int DT>
static __device__ __forceinline__ void na_cu_att2_f(float (&o)[8], uint4 u)
{
    unsigned w[4] = { u.x, u.y, u.z, u.w };
#pragma unroll
    for (int e = 0; e < 4; e++) {
        unsigned short lo = (unsigned short)(w[e] & 0xffffu), hi = (unsigned short)(w[e] >> 16);
        o[2 * e] = DT == NA_CU_F16 ? na_cu_h2f(lo) : na_cu_bf2f(lo);
        o[2 * e + 1] = DT == NA_CU_F16 ? na_cu_h2f(hi) : na_cu_bf2f(hi);
    }
}

template <int DT, int G, int HD>
__global__ void __launch_bounds__(32 * NA_CU_ATTN_WARPS)
na_cu_att2_k(float *out, const float *q, const void *kc, const void *vc, na_cu_attn_shape_t s,
             float *scratch, const na_cu_attn_req_t *reqs)
{
    constexpr int LR = HD / 8;                 /* lanes per V row */
    constexpr int RPS = 32 / LR;               /* V rows per step */
    constexpr int NC = HD / 8;                 /* 16-byte chunks per K row */
    constexpr int KU = NC < 16 ? NC : 16;      /* K chunks loaded before their math */
    constexpr int VU = RPS >= 2 ? 8 : 4;       /* V rows loaded before their math */
    if (reqs != NULL)                          /* batched decode: request blockIdx.z */
        na_cu_attn_take(reqs, &out, &q, &kc, &vc, &s, &scratch);
    __shared__ __align__(16) float sm_q[G][HD];
    __shared__ float sm_p[NA_CU_ATTN_WARPS][G][NA_CU_ATT2_TILE];
    __shared__ float sm_m[NA_CU_ATTN_WARPS][G], sm_l[NA_CU_ATTN_WARPS][G];
    __shared__ float sm_acc[NA_CU_ATTN_WARPS][G][HD];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int group = s.n_heads / s.n_kv_heads, n_hg = (group + G - 1) / G;
    int n_hb = s.n_kv_heads * n_hg, hb = blockIdx.x % n_hb;
    int kvh = hb / n_hg, hg = hb % n_hg;
    int row = blockIdx.x / n_hb, split = blockIdx.y;
    int h0 = kvh * group + hg * G;
    int ng = group - hg * G < G ? group - hg * G : G;
    int ctx = s.ctx0 + row + 1;
    int t0 = split * s.split_len;
    int t1 = t0 + s.split_len < ctx ? t0 + s.split_len : ctx;
    size_t kvs = (size_t)s.n_kv_heads * HD;
    bool aligned = (((uintptr_t)kc | (uintptr_t)vc) % 16) == 0;
    const float qs = 1.4426950408889634f / sqrtf((float)HD);   /* log2(e) / sqrt(hd) */
    int sub = lane / LR, cix = lane % LR;
    float acc[G][8], m[G], l[G];

    for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
        int g = i / HD, e = i % HD;
        sm_q[g][e] = g < ng ? q[((size_t)row * s.n_heads + (size_t)(h0 + g)) * HD + (size_t)e] * qs
                            : 0.0f;
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[g][e] = 0.0f;
    }
    __syncthreads();
    for (int tb = t0 + warp * NA_CU_ATT2_TILE; tb < t1; tb += NA_CU_ATTN_WARPS * NA_CU_ATT2_TILE) {
        int t = tb + lane, nt = t1 - tb < NA_CU_ATT2_TILE ? t1 - tb : NA_CU_ATT2_TILE;
        float sc[G];
#pragma unroll
        for (int g = 0; g < G; g++)
            sc[g] = 0.0f;
        if (t < t1) {                          /* this lane's token: its scores */
            size_t off = (size_t)t * kvs + (size_t)kvh * HD;
#pragma unroll
            for (int c0 = 0; c0 < NC; c0 += KU) {
                uint4 raw[KU];                 /* KU loads in flight, then the math */
#pragma unroll
                for (int u = 0; u < KU; u++)
                    raw[u] = na_cu_att2_raw(kc, off + (size_t)(c0 + u) * 8, aligned);
#pragma unroll
                for (int u = 0; u < KU; u++) {
                    float kr[8];
                    na_cu_att2_f<DT>(kr, raw[u]);
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        float4 a = *reinterpret_cast<const float4 *>(&sm_q[g][(c0 + u) * 8]);
                        float4 b = *reinterpret_cast<const float4 *>(&sm_q[g][(c0 + u) * 8 + 4]);
                        sc[g] += a.x * kr[0] + a.y * kr[1] + a.z * kr[2] + a.w * kr[3] +
                                 b.x * kr[4] + b.y * kr[5] + b.z * kr[6] + b.w * kr[7];
                    }
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {          /* one softmax update per tile */
            float v = t < t1 ? sc[g] : -INFINITY;
            float mn = fmaxf(m[g], na_cu_warp_max(v));   /* finite: lane 0's token is in */
            float a = exp2f(m[g] - mn);                  /* m = -inf: 0 */
            float p = exp2f(v - mn);                     /* v = -inf: 0 */
            l[g] = l[g] * a + p;
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[g][e] *= a;
            m[g] = mn;
            sm_p[warp][g][lane] = p;
        }
        __syncwarp();
        for (int j0 = 0; j0 < nt; j0 += VU * RPS) {   /* V rows: LR lanes a row */
            uint4 raw[VU];                     /* VU rows' loads in flight */
#pragma unroll
            for (int u = 0; u < VU; u++) {
                int j = j0 + u * RPS + sub;
                raw[u] = j < nt ? na_cu_att2_raw(vc, (size_t)(tb + j) * kvs + (size_t)kvh * HD +
                                                         (size_t)cix * 8, aligned)
                                : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < VU; u++) {
                int j = j0 + u * RPS + sub;
                if (j < nt) {
                    float vr[8];
                    na_cu_att2_f<DT>(vr, raw[u]);
#pragma unroll
                    for (int g = 0; g < G; g++) {
                        float p = sm_p[warp][g][j];
#pragma unroll
                        for (int e = 0; e < 8; e++)
                            acc[g][e] = fmaf(p, vr[e], acc[g][e]);
                    }
                }
            }
        }
        __syncwarp();
    }
    /* the rows' partial sums of each chunk, then the warps */
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int o = LR; o < 32; o <<= 1)
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
        float ls = na_cu_warp_sum(l[g]);
        if (lane == 0) {
            sm_m[warp][g] = m[g];
            sm_l[warp][g] = ls;
        }
        if (sub == 0)
#pragma unroll
            for (int e = 0; e < 8; e++)
                sm_acc[warp][g][cix * 8 + e] = acc[g][e];
    }
    __syncthreads();
    na_cu_attn_emit<true>(out, scratch, &sm_m[0][0], &sm_l[0][0], &sm_acc[0][0][0], G, HD, ng,
                          HD, (size_t)row * s.n_heads + (size_t)h0, s.n_splits, split);
}

/* One block per (row, head): fold the splits' (m, l, acc) into out (m in the
 * log2 domain when log2dom: na_cu_att2_k's partials). Batched: y = request
 * (its out, its part of the scratch), x = head. */
__global__ void na_cu_attn_merge_k(float *out, const float *scratch, int n_splits, int hd,
                                   const na_cu_attn_req_t *reqs, int n_heads, bool log2dom)
{
    size_t oh = blockIdx.x;
    int n_use = n_splits;                /* the stride is n_splits, the request's count its own */
    if (reqs != NULL) {
        out = reqs[blockIdx.y].out;
        n_use = reqs[blockIdx.y].n_splits;
        scratch += (size_t)blockIdx.y * (size_t)n_heads * (size_t)n_splits * (size_t)(hd + 2);
    }
    const float *p0 = scratch + oh * (size_t)n_splits * (size_t)(hd + 2);
    float mm = -INFINITY;
    for (int sp = 0; sp < n_use; sp++)
        mm = fmaxf(mm, p0[(size_t)sp * (hd + 2)]);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float ll = 0.0f, aa = 0.0f;
        if (mm != -INFINITY)
            for (int sp = 0; sp < n_use; sp++) {
                const float *p = p0 + (size_t)sp * (hd + 2);
                float f = log2dom ? exp2f(p[0] - mm) : expf(p[0] - mm);
                ll += p[1] * f;
                aa += p[2 + i] * f;
            }
        out[oh * (size_t)hd + (size_t)i] = ll > 0.0f ? aa / ll : 0.0f;
    }
}

/* G: query heads per block (1, 2, 4, 8), DL: elements per lane (1, 2, 4, 8). */
static int na_cu_attn_g(const na_cu_attn_shape_t *s)
{
    int group = s->n_heads / s->n_kv_heads;
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

static int na_cu_attn_dl(const na_cu_attn_shape_t *s)
{
    int per = (s->head_dim + 31) / 32;
    return per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 8;
}

static unsigned na_cu_attn_heads(const na_cu_attn_shape_t *s)
{
    int group = s->n_heads / s->n_kv_heads, g = na_cu_attn_g(s);
    return (unsigned)(s->n_kv_heads * ((group + g - 1) / g));
}

/* The token-tile kernel takes s (f16 / bf16 K/V, head_dim 64, 128 or 256),
 * unless NA_CUDA_ATTN_KERNEL=warp asks for the one-token-a-warp kernel
 * (tile or warp: na_kernels_cuda_create refuses another value; the
 * A/B of bench kernels --backend cuda). Plan and launch ask the same. */
static bool na_cu_attn_tile(const na_cu_attn_shape_t *s)
{
    const char *e = getenv("NA_CUDA_ATTN_KERNEL");
    if (e != NULL && strcmp(e, "warp") == 0)
        return false;
    return (s->kv_dtype == NA_CU_F16 || s->kv_dtype == NA_CU_BF16) &&
           (s->head_dim == 64 || s->head_dim == 128 || s->head_dim == 256);
}

/* The splits of one request's context (s->ctx0 + s->n_rows tokens), from
 * that context, the shape and the device alone: never from the other
 * requests of a batched launch, so a request's result does not depend on
 * its batch (the batched launch gives the single launch's bits). Enough
 * blocks for 8 (tile kernel) or 4 per SM; splits of at least 512 tokens
 * for the tile kernel (4 warps x 32 tokens a step, 4 steps: a batch of
 * requests does not drown in merges) or 64 for the warp kernel. */
extern "C" int na_cu_attn_plan(na_cu_attn_shape_t *s, int n_sm)
{
    long base, target, max_ctx = (long)s->ctx0 + s->n_rows;
    long splits, by_len, min_len;
    if (s->head_dim <= 0 || s->head_dim > 256 || s->n_kv_heads <= 0 || s->n_rows <= 0 ||
        s->n_heads % s->n_kv_heads != 0)
        return -1;
    bool tile = na_cu_attn_tile(s);
    target = (tile ? 8L : 4L) * (n_sm > 0 ? n_sm : 132);
    min_len = tile ? 4L * NA_CU_ATTN_WARPS * NA_CU_ATT2_TILE : NA_CU_ATTN_MIN_LEN;
    base = (long)s->n_rows * (long)na_cu_attn_heads(s);
    splits = (target + base - 1) / base;
    by_len = (max_ctx + min_len - 1) / min_len;
    if (splits > by_len)
        splits = by_len;
    if (splits > 65535)
        splits = 65535;
    if (splits < 1)
        splits = 1;
    s->n_splits = (int)splits;
    s->split_len = (int)((max_ctx + splits - 1) / splits);
    return 0;
}

/* Each request's own plan (its ctx as a decode row) into reqs[i].split_len
 * and .n_splits; s->n_splits = the most (the grid and the scratch stride). */
extern "C" int na_cu_attn_plan_batch(na_cu_attn_shape_t *s, na_cu_attn_req_t *reqs, int n_req,
                                     int n_sm)
{
    int i, most = 1;
    if (s->n_rows != 1 || n_req < 1 || n_req > 65535)
        return -1;
    for (i = 0; i < n_req; i++) {
        na_cu_attn_shape_t r = *s;
        r.ctx0 = reqs[i].ctx > 0 ? reqs[i].ctx - 1 : 0;
        if (na_cu_attn_plan(&r, n_sm) != 0)
            return -1;
        reqs[i].split_len = r.split_len;
        reqs[i].n_splits = r.n_splits;
        if (r.n_splits > most)
            most = r.n_splits;
    }
    s->n_splits = most;
    s->split_len = 0;
    return 0;
}

extern "C" size_t na_cu_attn_scratch_floats(const na_cu_attn_shape_t *s)
{
    if (s->n_splits <= 1)
        return 0;
    return (size_t)s->n_rows * (size_t)s->n_heads * (size_t)s->n_splits *
           (size_t)(s->head_dim + 2);
}

template <int DT, int G>
static void na_cu_attn_dl_launch(dim3 grid, cudaStream_t st, float *out, const float *q,
                                 const void *kc, const void *vc, const na_cu_attn_shape_t *s,
                                 bool vec, float *scratch, const na_cu_attn_req_t *rq)
{
    unsigned thr = 32 * NA_CU_ATTN_WARPS;
    switch (na_cu_attn_dl(s)) {
    case 1:  na_cu_attn_k<DT, G, 1><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, vec, scratch, rq); break;
    case 2:  na_cu_attn_k<DT, G, 2><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, vec, scratch, rq); break;
    case 4:  na_cu_attn_k<DT, G, 4><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, vec, scratch, rq); break;
    default: na_cu_attn_k<DT, G, 8><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, vec, scratch, rq); break;
    }
}

template <int DT>
static void na_cu_attn_g_launch(dim3 grid, cudaStream_t st, float *out, const float *q,
                                const void *kc, const void *vc, const na_cu_attn_shape_t *s,
                                bool vec, float *scratch, const na_cu_attn_req_t *rq)
{
    switch (na_cu_attn_g(s)) {
    case 1:  na_cu_attn_dl_launch<DT, 1>(grid, st, out, q, kc, vc, s, vec, scratch, rq); break;
    case 2:  na_cu_attn_dl_launch<DT, 2>(grid, st, out, q, kc, vc, s, vec, scratch, rq); break;
    case 4:  na_cu_attn_dl_launch<DT, 4>(grid, st, out, q, kc, vc, s, vec, scratch, rq); break;
    default: na_cu_attn_dl_launch<DT, 8>(grid, st, out, q, kc, vc, s, vec, scratch, rq); break;
    }
}

template <int DT, int G>
static void na_cu_att2_hd_launch(dim3 grid, cudaStream_t st, float *out, const float *q,
                                 const void *kc, const void *vc, const na_cu_attn_shape_t *s,
                                 float *scratch, const na_cu_attn_req_t *rq)
{
    unsigned thr = 32 * NA_CU_ATTN_WARPS;
    switch (s->head_dim) {
    case 64:  na_cu_att2_k<DT, G, 64><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, scratch, rq); break;
    case 128: na_cu_att2_k<DT, G, 128><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, scratch, rq); break;
    default:  na_cu_att2_k<DT, G, 256><<<grid, thr, 0, st>>>(out, q, kc, vc, *s, scratch, rq); break;
    }
}

template <int DT>
static void na_cu_att2_g_launch(dim3 grid, cudaStream_t st, float *out, const float *q,
                                const void *kc, const void *vc, const na_cu_attn_shape_t *s,
                                float *scratch, const na_cu_attn_req_t *rq)
{
    switch (na_cu_attn_g(s)) {
    case 1:  na_cu_att2_hd_launch<DT, 1>(grid, st, out, q, kc, vc, s, scratch, rq); break;
    case 2:  na_cu_att2_hd_launch<DT, 2>(grid, st, out, q, kc, vc, s, scratch, rq); break;
    case 4:  na_cu_att2_hd_launch<DT, 4>(grid, st, out, q, kc, vc, s, scratch, rq); break;
    default: na_cu_att2_hd_launch<DT, 8>(grid, st, out, q, kc, vc, s, scratch, rq); break;
    }
}

/* The kernel for dtype s->kv_dtype (the tile kernel where it takes s). */
static void na_cu_attn_dt_launch(dim3 grid, cudaStream_t st, float *out, const float *q,
                                 const void *kc, const void *vc, const na_cu_attn_shape_t *s,
                                 bool vec, float *scratch, const na_cu_attn_req_t *rq)
{
    if (na_cu_attn_tile(s) && s->kv_dtype == NA_CU_F16)
        na_cu_att2_g_launch<NA_CU_F16>(grid, st, out, q, kc, vc, s, scratch, rq);
    else if (na_cu_attn_tile(s))
        na_cu_att2_g_launch<NA_CU_BF16>(grid, st, out, q, kc, vc, s, scratch, rq);
    else if (s->kv_dtype == NA_CU_F16)
        na_cu_attn_g_launch<NA_CU_F16>(grid, st, out, q, kc, vc, s, vec, scratch, rq);
    else if (s->kv_dtype == NA_CU_BF16)
        na_cu_attn_g_launch<NA_CU_BF16>(grid, st, out, q, kc, vc, s, vec, scratch, rq);
    else
        na_cu_attn_g_launch<NA_CU_F32>(grid, st, out, q, kc, vc, s, vec, scratch, rq);
}

extern "C" int na_cu_attn(void *stream, float *out, const float *q, const void *kc,
                          const void *vc, const na_cu_attn_shape_t *s, float *scratch)
{
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid(na_cu_attn_heads(s) * (unsigned)s->n_rows, (unsigned)s->n_splits);
    bool vec = (((uintptr_t)kc | (uintptr_t)vc) % 16) == 0;
    int e;
    if (s->n_rows <= 0)
        return 0;
    na_cu_attn_dt_launch(grid, st, out, q, kc, vc, s, vec, scratch, NULL);
    e = (int)cudaGetLastError();
    if (e != 0 || s->n_splits == 1)
        return e;
    na_cu_attn_merge_k<<<(unsigned)(s->n_rows * s->n_heads), 128, 0, st>>>(
        out, scratch, s->n_splits, s->head_dim, NULL, s->n_heads, na_cu_attn_tile(s));
    return (int)cudaGetLastError();
}

extern "C" int na_cu_attn_batch(void *stream, const na_cu_attn_req_t *reqs, int n_req,
                                const na_cu_attn_shape_t *s, float *scratch)
{
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid(na_cu_attn_heads(s), (unsigned)s->n_splits, (unsigned)n_req);
    int e;
    if (n_req <= 0)
        return 0;
    na_cu_attn_dt_launch(grid, st, NULL, NULL, NULL, NULL, s, true, scratch, reqs);
    e = (int)cudaGetLastError();
    if (e != 0 || s->n_splits == 1)
        return e;
    na_cu_attn_merge_k<<<dim3((unsigned)s->n_heads, (unsigned)n_req), 128, 0, st>>>(
        NULL, scratch, s->n_splits, s->head_dim, reqs, s->n_heads, na_cu_attn_tile(s));
    return (int)cudaGetLastError();
}

/* kernels/cpu/cpu_attn.c — decode, partial and causal prefill attention with
 * GQA over f16, bf16 or f32 KV, AVX2/FMA/F16C (and 512-bit score and PV loops
 * in the x86-64-v4 copy).
 *
 * Everything is built on one core, na_cpu_attn_span: up to 16 query heads
 * sharing one KV head against n tokens of K/V rows (row stride `stride`
 * elements), folded into online-softmax partials (st, acc). It walks the
 * span in chunks of 64 tokens:
 *   1. scores S[g][t] = q_g·k_t · scale. Each K row is converted from f16 once
 *      and used for every head of the group; NA_CPU_NACC (8 or 16)
 *      accumulators in registers (G heads x NACC/G tokens) are reduced
 *      together with hadd trees.
 *   2. per head: chunk max, rescale (l, acc) by e^(m_old - m_new), p = e^(s-m).
 *   3. acc[g] += sum_t p[g][t] v_t, with G heads x NACC/G vectors of acc kept
 *      in registers across the chunk; each V row is converted once.
 * So each K/V row is read from memory once for all heads of its group, and
 * the bytes the caller reads next (na_cpu_pf_t: the next chunk in decode,
 * the next head's block in the storage node) are prefetched at the pace of
 * the reads. Measured on an AVX2 2-core machine (32 q / 8 kv heads, head_dim
 * 128, f16 KV, 1 thread, min of 400+ calls, before na_cpu_pf_t): ~200 ns per
 * token with the KV in L2, ~270 ns from DRAM (8K context). A 256-bit FMA loop runs at 7.0-7.3 G FMA/s
 * there (2 per cycle at ~3.5 GHz), so the 1024 FMAs per token alone take
 * 145 ns: the kernel is compute-bound at ~72% of FMA peak, the rest being
 * the 256 f16 conversions (which share the FP pipes), reductions and exp.
 * Tried without gain: chunks of 32 (10% slower) or 128 tokens (same),
 * prefetch 128/256 tokens ahead (4%/15% slower; none: 3x slower), one
 * 512-bit vcvtph2ps per 16 elements split into halves (same). f32 KV runs
 * ~2x slower per token than f16 even from L2 (not investigated).
 * The 2 vCPUs of that machine share one core's FP throughput (two 1-thread
 * runs at once: ~425 ns per token each), so t=2 is no faster there.
 *
 * Decode splits a long context into parts of NA_CPU_PART (1024) tokens
 * (flash-decoding), claimed by the pool's threads; each part walks its
 * tokens chunk by chunk over every KV head, and the partials are merged in
 * order with na_kattn_merge. The parts are fixed by the context length, not
 * the thread count, so that a query row gets the same bits from decode (any
 * thread count), from prefill and from the storage node (granules of
 * split_tokens = 1024, blocks of 64): a recovered request is prefilled again
 * over the tokens decode produced (issue 22 item 15; test_attn_exact). It
 * was one range per thread; nothing is prefetched for a
 * range's first chunk, so more, smaller ranges (claimed dynamically, to
 * spread a descheduled thread's delay) cost more than they saved: 8K
 * context, t=2, with 1 / 2 / 4 ranges per thread: 86-89 / 81-84 / 79 % of
 * the in-cache rate (bench kernels, TARGET attn roof, two runs each). head_dim must be a
 * multiple of 8; other shapes use the reference kernels. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/expf.h"
#include "kernels/ref/ref.h"

#define NA_CPU_CHUNK     NA_ATTN_CHUNK  /* tokens per softmax update (64) */
/* Software prefetch (na_cpu_pf_t below) into L1, T0: measured against T2
 * (into L2) with the block layout, 1 thread, 16K context: 26 vs 18 GB/s. */
#define NA_CPU_PF_HINT   _MM_HINT_T0
/* ... and the line this many bytes past it into L2 (T2): the L1's few miss
 * buffers then wait on L2 hits, not on DRAM (bench kernels, t=2, 8K-64K, two
 * ABBA pairs: 35-45 -> 41-47 GB/s; 32 KiB instead: no gain). A hint: past
 * the end of the cursor it may touch other memory, never faults. */
#define NA_CPU_PF_L2_AHEAD 8192
#define NA_CPU_MAX_GROUP 16     /* heads per core call */
#define NA_CPU_PRE_QB    8      /* prefill: query tokens per task sharing each K/V row */
#define NA_CPU_PRE_MAX_HD 256   /* prefill: larger heads go one token per task */
/* Bit-exact attention: a query row's output is one function of its context
 * length, whichever op computes it (decode, prefill, the storage node's
 * partials): the context is cut into parts of NA_CPU_PART tokens from
 * position 0 (the storage node's default split_tokens, blocks of 64), each
 * part folded chunk by chunk (NA_CPU_CHUNK, aligned on position 0), the
 * parts merged in order with na_kattn_merge. Decode runs the parts on the
 * pool; prefill folds the chunks its query tokens share together, then each
 * token its own last chunk. */
#define NA_CPU_PART             NA_ATTN_PART   /* 1024 */

/* Vector accumulators kept in registers by the score and PV loops: 16 when
 * the compiler may use 32 ymm registers (AVX-512VL), else 8 (AVX2's 16). */
#if defined(__AVX512VL__)
#define NA_CPU_NACC 16
#else
#define NA_CPU_NACC 8
#endif

/* Pin a loaded vector to a register. GCC otherwise folds the load into
 * every FMA that uses it (q once per token in the score loop, an f32 K or V
 * vector once per head), which made those loops load-bound: measured with
 * the KV in L2, 32 q / 8 kv heads, head_dim 128, 1 thread, min of 600 calls,
 * f16 KV 200 -> ~180 ns per token, f32 KV ~430 -> ~205 ns. Only with
 * AVX-512VL's 32 registers; AVX2's 16 cannot hold q, accumulators and K. */
#if NA_CPU_NACC == 16
#define NA_CPU_IN_REG(v) __asm__("" : "+v"(v))
#else
#define NA_CPU_IN_REG(v) ((void)0)
#endif

/* 8 KV elements at element offset off, as f32. The `f16` argument of the
 * vector paths is the KV row kind (na_cpu_kv_kind): 0 f32, 1 f16, 2 bf16;
 * non-zero means 2-byte elements. */
NA_INLINE __m256 na_cpu_kv8(const void *base, size_t off, int f16)
{
    if (f16 == 2)
        return na_cpu_load_bf16((const uint16_t *)base + off);
    if (f16)
        return na_cpu_load_f16((const uint16_t *)base + off);
    return _mm256_loadu_ps((const float *)base + off);
}

/* Prefetch cursor: rows the kernel reads later (the caller's next chunk or
 * block, or this span's own rows one chunk ahead), requested line by line
 * at the pace of the span's reads: the score loop steps the K cursor and
 * the PV loop the V cursor (both may be one cursor), one line prefetched
 * per line read. So DRAM sees one steady stream, a chunk or a head ahead,
 * instead of the hardware prefetchers' short, page-bounded run-ahead.
 * Measured (32 q / 8 kv heads, head_dim 128, f16, 16K context, KV in 64-token
 * blocks, 1 thread): 14 GB/s without, 26 with, against 29 with the KV in
 * cache. A cursor with n == 0 prefetches nothing. */
typedef struct {
    const char *row;             /* the current row */
    size_t      off;             /* next byte of it to prefetch */
    size_t      row_bytes, stride;
    size_t      n;               /* rows left, the current one included */
} na_cpu_pf_seg_t;

typedef struct {
    na_cpu_pf_seg_t seg[2];      /* seg[0], then seg[1] */
    int             i;           /* the segment being prefetched */
} na_cpu_pf_t;

/* A segment of n rows of row_bytes, stride bytes apart, from p (NULL or
 * n == 0: empty). */
NA_INLINE na_cpu_pf_seg_t na_cpu_pf_seg(const void *p, size_t row_bytes, size_t stride,
                                        size_t n)
{
    na_cpu_pf_seg_t s = { (const char *)p, 0, row_bytes, stride,
                          p != NULL && row_bytes > 0 ? n : 0 };
    return s;
}

/* A cursor over segment a, then b. */
NA_INLINE na_cpu_pf_t na_cpu_pf(na_cpu_pf_seg_t a, na_cpu_pf_seg_t b)
{
    na_cpu_pf_t pf = { { a, b }, 0 };
    return pf;
}

/* A cursor over n rows (one segment). */
NA_INLINE na_cpu_pf_t na_cpu_pf_rows(const void *p, size_t row_bytes, size_t stride, size_t n)
{
    return na_cpu_pf(na_cpu_pf_seg(p, row_bytes, stride, n), na_cpu_pf_seg(NULL, 0, 0, 0));
}

NA_INLINE void na_cpu_pf_step(na_cpu_pf_t *pf, int lines)
{
    while (lines > 0 && pf->i < 2) {
        na_cpu_pf_seg_t *s = &pf->seg[pf->i];
        if (s->n == 0) {
            pf->i++;
            continue;
        }
        _mm_prefetch(s->row + s->off, NA_CPU_PF_HINT);
        _mm_prefetch(s->row + s->off + NA_CPU_PF_L2_AHEAD, _MM_HINT_T2);
        lines--;
        s->off += 64;
        if (s->off >= s->row_bytes) {
            s->off = 0;
            s->row += s->stride;
            s->n--;
        }
    }
}

/* Lane i of the result = sum of the 8 lanes of a[i]. */
NA_INLINE __m256 na_cpu_reduce8(const __m256 a[8])
{
    __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    __m256 h0123 = _mm256_hadd_ps(h01, h23), h4567 = _mm256_hadd_ps(h45, h67);
    __m256 lo = _mm256_permute2f128_ps(h0123, h4567, 0x20);
    __m256 hi = _mm256_permute2f128_ps(h0123, h4567, 0x31);
    return _mm256_add_ps(lo, hi);
}

/* The score and PV loops (kernels/cpu/cpu_attn_loops.h), 256-bit: */
#define NA_W 8
#include "kernels/cpu/cpu_attn_loops.h"
#undef NA_W

#if defined(__AVX512F__)
/* The same two loops with 512-bit vectors (x86-64-v4 build, head_dim % 16
 * == 0): 16 KV elements per conversion and per FMA. On a CPU with 512-bit
 * FMA units that halves the instructions per K/V byte. Measured (the 2-vCPU
 * AVX-512 machine, bench kernels --part attn, ABBA, 32 q / 8 kv, head_dim
 * 128, f16): KV in cache t=1 28 -> 38-39 GB/s, t=2 51-54 -> 71-73; from DRAM
 * t=1 25-26 -> 29-32, t=2 the same when the memory is the limit (36-44) and
 * 47-50 -> 52-57 when it is faster; prefill, 64 queries at 16K: 87-90 -> 59
 * ms. */
NA_INLINE __m512 na_cpu_kv16(const void *base, size_t off, int f16)
{
    if (f16 == 2)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off))), 16));
    if (f16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off)));
    return _mm512_loadu_ps((const float *)base + off);
}

#define NA_W 16
#include "kernels/cpu/cpu_attn_loops.h"
#undef NA_W
#endif

NA_INLINE void na_cpu_pv(float *acc, const float *p, const void *v, size_t stride,
                         int cn, na_cpu_pf_t *pf, int hd, int G, int f16)
{
    const int DV = NA_CPU_NACC / G;
    int d = 0;
#if defined(__AVX512F__)
    /* 16-wide passes of up to 8 vectors per head (16 would spill) */
    while (hd - d >= 16) {
        int r = (hd - d) / 16;
        r = r > DV ? DV : r;
        if (r >= 8) {
            na_cpu_pv_cols16(acc, p, v, stride, cn, pf, hd, d, G, 8, f16);
            d += 128;
        } else if (r >= 4) {
            na_cpu_pv_cols16(acc, p, v, stride, cn, pf, hd, d, G, 4, f16);
            d += 64;
        } else if (r >= 2) {
            na_cpu_pv_cols16(acc, p, v, stride, cn, pf, hd, d, G, 2, f16);
            d += 32;
        } else {
            na_cpu_pv_cols16(acc, p, v, stride, cn, pf, hd, d, G, 1, f16);
            d += 16;
        }
    }
#endif
    for (; d + 8 * DV <= hd; d += 8 * DV)
        na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, DV, f16);
    /* The r < DV vectors left in one pass with r accumulators per head, so
     * that small heads (head_dim 48 with G = 1: 6 vectors) keep several
     * independent FMA chains instead of one latency-bound chain per vector
     * (measured: 15M-model shape, 6 heads of 48, ctx 256, 1 thread, KV in
     * cache: 54 -> ~30 ns per token). */
    while (DV > 2 && (hd - d) / 8 >= 2) {
        int r = (hd - d) / 8;
        r = r > DV - 1 ? DV - 1 : r;
        switch (r > 8 ? 8 : r) {
        case 8:  na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 8, f16); d += 64; break;
        case 7:  na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 7, f16); d += 56; break;
        case 6:  na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 6, f16); d += 48; break;
        case 5:  na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 5, f16); d += 40; break;
        case 4:  na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 4, f16); d += 32; break;
        case 3:  na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 3, f16); d += 24; break;
        default: na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 2, f16); d += 16; break;
        }
    }
    for (; d < hd; d += 8)
        na_cpu_pv_cols8(acc, p, v, stride, cn, pf, hd, d, G, 1, f16);
}

/* Online-softmax update of G heads with the chunk's scores s[t * G + g]
 * (replaced by the weights p). lim (NULL: none) masks head g's tokens t >=
 * lim[g]: weight exactly 0, so the head's state is bits-for-bits the one of a
 * chunk of lim[g] tokens (lim[g] >= 1). Since G divides 8, lane l of every 8-float
 * vector of s belongs to head l % G. */
NA_INLINE void na_cpu_softmax_fold(na_kattn_stat_t *st, float *acc, float *s, int cn, int hd,
                                   int G, const int *lim)
{
    const int n = cn * G;
    float lanes[8], cmax[8], m[8], alpha[8], sum[8], ml[8];
    __m256 vmax = _mm256_set1_ps(-INFINITY), vm;
    int i, g, l, d;

    if (lim != NULL)
        for (g = 0; g < G; g++)
            for (i = lim[g]; i < cn; i++)
                s[i * G + g] = -INFINITY;
    for (i = 0; i + 8 <= n; i += 8)
        vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + i));
    _mm256_storeu_ps(lanes, vmax);
    for (g = 0; g < G; g++)
        cmax[g] = -INFINITY;
    for (l = 0; l < 8; l++)
        cmax[l % G] = lanes[l] > cmax[l % G] ? lanes[l] : cmax[l % G];
    for (; i < n; i++)
        cmax[i % G] = s[i] > cmax[i % G] ? s[i] : cmax[i % G];
    for (g = 0; g < G; g++) {
        m[g] = st[g].m > cmax[g] ? st[g].m : cmax[g];
        alpha[g] = st[g].m == -INFINITY ? 0.0f : na_expf(st[g].m - m[g]);
        sum[g] = 0.0f;
    }
    for (l = 0; l < 8; l++)
        ml[l] = m[l % G];
    vm = _mm256_loadu_ps(ml);
    /* Every weight through the vector exp (the tail in a padded vector), and
     * each head's sum taken by token index mod 8 in token order, then over
     * those 8 in order: the same bits whatever G, the chunk's length or a
     * token's place in it (prefill and decode fold the same rows with
     * different G; see na_cpu_attn_prefill). */
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(s + i, na_cpu_exp(_mm256_sub_ps(_mm256_loadu_ps(s + i), vm)));
    if (i < n) {
        float buf[8];
        for (l = 0; l < 8; l++)
            buf[l] = i + l < n ? s[i + l] : -INFINITY;
        _mm256_storeu_ps(buf, na_cpu_exp(_mm256_sub_ps(_mm256_loadu_ps(buf), vm)));
        for (l = 0; i + l < n; l++)
            s[i + l] = buf[l];
    }
    if (lim != NULL)            /* the vector exp gives ~1e-38 for -inf: exactly 0 */
        for (g = 0; g < G; g++)
            for (i = lim[g]; i < cn; i++)
                s[i * G + g] = 0.0f;
    /* Sums: vector i (tokens i*8/G.., all G heads) into vs[i % G], so lane
     * (m % (8/G)) * G + g of vs[m / (8/G)] holds head g's tokens t = m mod 8
     * in token order; then m = 0..7 in order. */
    {
        __m256 vs[8];
        float part[8][8];
        const int tpv = 8 / G;
        for (g = 0; g < G; g++)
            vs[g] = _mm256_setzero_ps();
        for (i = 0; i + 8 <= n; i += 8)
            vs[(i / 8) % G] = _mm256_add_ps(vs[(i / 8) % G], _mm256_loadu_ps(s + i));
        if (i < n) {
            float buf[8] = { 0 };
            for (l = 0; i + l < n; l++)
                buf[l] = s[i + l];
            vs[(i / 8) % G] = _mm256_add_ps(vs[(i / 8) % G], _mm256_loadu_ps(buf));
        }
        for (g = 0; g < G; g++)
            _mm256_storeu_ps(part[g], vs[g]);
        for (g = 0; g < G; g++)
            for (l = 0; l < 8; l++)
                sum[g] += part[l / tpv][(l % tpv) * G + g];
    }
    for (g = 0; g < G; g++) {
        float *ag = acc + (size_t)g * hd;
        if (alpha[g] != 1.0f) {
            __m256 va = _mm256_set1_ps(alpha[g]);
            for (d = 0; d < hd; d += 8)
                _mm256_storeu_ps(ag + d, _mm256_mul_ps(va, _mm256_loadu_ps(ag + d)));
        }
        st[g].l = st[g].l * alpha[g] + sum[g];
        st[g].m = m[g];
    }
}

/* Run `fn` (a macro taking G) on head blocks of 8/4/2/1 over the group. */
#define NA_CPU_GROUP_BLOCKS(group, g0, G, body) \
    for (g0 = 0; g0 < (group); g0 += G) {      \
        int left_ = (group) - g0;              \
        G = left_ >= 8 ? 8 : left_ >= 4 ? 4 : left_ >= 2 ? 2 : 1; \
        body                                   \
    }

/* The score loop: 16-wide where the build and head_dim allow. */
#if defined(__AVX512F__)
#define NA_CPU_QK(...) (hd % 16 == 0 ? na_cpu_qk16(__VA_ARGS__) : na_cpu_qk8(__VA_ARGS__))
#else
#define NA_CPU_QK(...) na_cpu_qk8(__VA_ARGS__)
#endif

/* One piece of a chunk: n tokens of one span, landing at token o of the chunk. */
typedef struct {
    const void *k, *v;
    size_t      stride;          /* elements between rows */
    int         n, o;
} na_cpu_piece_t;

/* The core (see the top of the file): group <= NA_CPU_MAX_GROUP heads,
 * head_dim % 8 == 0, f16, bf16 or f32 rows (f16: na_cpu_kv8's kind), over
 * the run of keys of the nsp spans sp[] (in order; each with its own row
 * stride). The run is folded in chunks of NA_CPU_CHUNK tokens counted from
 * its first token, across span boundaries: a chunk's scores are taken piece
 * by piece (a token's score does not depend on its place, see na_cpu_qk),
 * its softmax update is one (na_cpu_softmax_fold), and its PV products run
 * piece by piece on the same accumulators in token order (stored and
 * loaded between pieces, which is exact). So the bits depend on the run's
 * tokens only, not on how spans split it (the storage node's KV blocks of
 * any size; tests/unit/test_attn_exact.c). pk/pv advance as the rows are
 * read. */
NA_INLINE void na_cpu_attn_span_t(na_kattn_stat_t *st, float *acc, const float *q,
                                  int group, int hd, const na_kv_span_t *sp, int nsp,
                                  na_cpu_pf_t *pk, na_cpu_pf_t *pv, float scale, int f16,
                                  const int *lim)
{
    float s[NA_CPU_MAX_GROUP * NA_CPU_CHUNK];
    int cl[NA_CPU_MAX_GROUP];
    na_cpu_piece_t pc[NA_CPU_CHUNK];
    na_cpu_pf_t idle = na_cpu_pf_rows(NULL, 0, 0, 0);
    const size_t esz = f16 ? 2 : 4;
    int c0 = 0, g0, G, si = 0, so = 0, np, i;

    /* Head blocks after the first read the same rows again: only the first
     * steps the cursors, which run one line per line of KV, not per pass. */
    for (;;) {
        int cn = 0;
        /* the chunk's pieces: the next NA_CPU_CHUNK tokens of the run */
        for (np = 0; cn < NA_CPU_CHUNK && si < nsp;) {
            int take = sp[si].n - so < NA_CPU_CHUNK - cn ? sp[si].n - so : NA_CPU_CHUNK - cn;
            if (take > 0) {
                size_t off = (size_t)so * sp[si].stride * esz;
                pc[np].k = (const char *)sp[si].k + off;
                pc[np].v = (const char *)sp[si].v + off;
                pc[np].stride = sp[si].stride;
                pc[np].n = take;
                pc[np].o = cn;
                np++;
                cn += take;
                so += take;
            }
            if (so >= sp[si].n) {
                si++;
                so = 0;
            }
        }
        if (cn == 0)
            break;
        NA_CPU_GROUP_BLOCKS(group, g0, G, {
            const float *qg = q + (size_t)g0 * hd;
            for (i = 0; i < np; i++) {
                float *sg = s + g0 * NA_CPU_CHUNK + pc[i].o * G;
                const size_t stride = pc[i].stride;
                switch (G) {
                case 8:  NA_CPU_QK(sg, qg, pc[i].k, stride, pc[i].n, g0 ? &idle : pk, hd, scale, 8, f16); break;
                case 4:  NA_CPU_QK(sg, qg, pc[i].k, stride, pc[i].n, g0 ? &idle : pk, hd, scale, 4, f16); break;
                case 2:  NA_CPU_QK(sg, qg, pc[i].k, stride, pc[i].n, g0 ? &idle : pk, hd, scale, 2, f16); break;
                default: NA_CPU_QK(sg, qg, pc[i].k, stride, pc[i].n, g0 ? &idle : pk, hd, scale, 1, f16); break;
                }
            }
        })
        if (lim != NULL)            /* the chunk's share of each head's limit */
            for (g0 = 0; g0 < group; g0++)
                cl[g0] = lim[g0] - c0 < cn ? lim[g0] - c0 : cn;
        NA_CPU_GROUP_BLOCKS(group, g0, G, {
            float *ag = acc + (size_t)g0 * hd;
            float *sg = s + g0 * NA_CPU_CHUNK;
            const int *lg = lim != NULL ? cl + g0 : NULL;
            switch (G) {
            case 8:  na_cpu_softmax_fold(st + g0, ag, sg, cn, hd, 8, lg); break;
            case 4:  na_cpu_softmax_fold(st + g0, ag, sg, cn, hd, 4, lg); break;
            case 2:  na_cpu_softmax_fold(st + g0, ag, sg, cn, hd, 2, lg); break;
            default: na_cpu_softmax_fold(st + g0, ag, sg, cn, hd, 1, lg); break;
            }
        })
        NA_CPU_GROUP_BLOCKS(group, g0, G, {
            float *ag = acc + (size_t)g0 * hd;
            for (i = 0; i < np; i++) {
                const float *pg = s + g0 * NA_CPU_CHUNK + pc[i].o * G;
                const size_t stride = pc[i].stride;
                switch (G) {
                case 8:  na_cpu_pv(ag, pg, pc[i].v, stride, pc[i].n, g0 ? &idle : pv, hd, 8, f16); break;
                case 4:  na_cpu_pv(ag, pg, pc[i].v, stride, pc[i].n, g0 ? &idle : pv, hd, 4, f16); break;
                case 2:  na_cpu_pv(ag, pg, pc[i].v, stride, pc[i].n, g0 ? &idle : pv, hd, 2, f16); break;
                default: na_cpu_pv(ag, pg, pc[i].v, stride, pc[i].n, g0 ? &idle : pv, hd, 1, f16); break;
                }
            }
        })
        c0 += cn;
    }
}

/* One copy of the core per K/V dtype, the dtype a constant in each (its
 * `f16` argument: 0 f32, 1 f16, 2 bf16). */
#define NA_CPU_ATTN_SPAN(sfx, kind)                                                        \
    static void na_cpu_attn_span_##sfx(na_kattn_stat_t *st, float *acc, const float *q,     \
                                       int group, int hd, const na_kv_span_t *sp, int nsp, \
                                       na_cpu_pf_t *pk, na_cpu_pf_t *pv, float scale,      \
                                       const int *lim)                                     \
    {                                                                                      \
        na_cpu_attn_span_t(st, acc, q, group, hd, sp, nsp, pk, pv, scale, kind, lim);      \
    }
NA_CPU_ATTN_SPAN(f32, 0)
NA_CPU_ATTN_SPAN(f16, 1)
NA_CPU_ATTN_SPAN(bf16, 2)

/* The core over a run of spans, any group size: pieces of at most
 * NA_CPU_MAX_GROUP heads. lim (NULL: none): head g sees only the run's
 * first lim[g] >= 1 tokens (prefill's causal mask), with the bits of a run
 * that ends there. pk/pv (na_cpu_pf_t) advance as K/V rows are read. Each
 * piece walks the whole run again, so each starts from the cursors as they
 * were given (pk and pv may be one cursor). */
static void na_cpu_attn_spans(na_kattn_stat_t *st, float *acc, const float *q, int group,
                              int hd, const na_kv_span_t *sp, int nsp, na_cpu_pf_t *pk,
                              na_cpu_pf_t *pv, float scale, int f16, const int *lim)
{
    const na_cpu_pf_t pk0 = *pk, pv0 = *pv;
    int g0;
    for (g0 = 0; g0 < group; g0 += NA_CPU_MAX_GROUP) {
        int gn = group - g0 < NA_CPU_MAX_GROUP ? group - g0 : NA_CPU_MAX_GROUP;
        const int *lg = lim != NULL ? lim + g0 : NULL;
        if (g0 > 0) {
            *pk = pk0;
            *pv = pv0;
        }
        if (f16 == 2)
            na_cpu_attn_span_bf16(st + g0, acc + (size_t)g0 * hd, q + (size_t)g0 * hd,
                                  gn, hd, sp, nsp, pk, pv, scale, lg);
        else if (f16)
            na_cpu_attn_span_f16(st + g0, acc + (size_t)g0 * hd, q + (size_t)g0 * hd,
                                 gn, hd, sp, nsp, pk, pv, scale, lg);
        else
            na_cpu_attn_span_f32(st + g0, acc + (size_t)g0 * hd, q + (size_t)g0 * hd,
                                 gn, hd, sp, nsp, pk, pv, scale, lg);
    }
}

/* The same over one contiguous span of n rows from k/v (row stride
 * `stride` elements). */
static void na_cpu_attn_span(na_kattn_stat_t *st, float *acc, const float *q, int group,
                             int hd, const void *k, const void *v, size_t stride, int n,
                             na_cpu_pf_t *pk, na_cpu_pf_t *pv, float scale, int f16,
                             const int *lim)
{
    na_kv_span_t sp = { k, v, stride, n, NULL, 0 };
    na_cpu_attn_spans(st, acc, q, group, hd, &sp, 1, pk, pv, scale, f16, lim);
}

/* 1 if the vector paths handle this KV dtype and head_dim, else 0. */
static int na_cpu_attn_ok(na_dtype_t dt, int head_dim)
{
    return (dt == NA_DTYPE_F16 || dt == NA_DTYPE_BF16 || dt == NA_DTYPE_F32) &&
           head_dim % 8 == 0 && head_dim > 0;
}

/* The row kind the vector paths take for a KV dtype (see na_cpu_kv8). */
static int na_cpu_kv_kind(na_dtype_t dt)
{
    return dt == NA_DTYPE_BF16 ? 2 : dt == NA_DTYPE_F16 ? 1 : 0;
}

/* ops->attn_partial: fold the run of spans into (st, acc) (chunks across
 * the spans, na_cpu_attn_spans), prefetching the first two spans' `next`.
 * No scratch, no pool: safe to call from several threads at once. Cannot
 * fail. */
void na_cpu_attn_partial(na_kernels_t *k, na_kattn_stat_t *st, float *acc,
                         const float *q, int group, int head_dim,
                         const na_kv_span_t *spans, int n_spans, na_dtype_t kv_dtype,
                         float scale)
{
    /* one cursor for K and V: the K reads prefetch the first part of next,
     * the V reads the rest (the next head's K, then V, in the block layout) */
    na_cpu_pf_t pf = na_cpu_pf(na_cpu_pf_seg(n_spans > 0 ? spans[0].next : NULL,
                                             n_spans > 0 ? spans[0].next_bytes : 0, 0, 1),
                               na_cpu_pf_seg(n_spans > 1 ? spans[1].next : NULL,
                                             n_spans > 1 ? spans[1].next_bytes : 0, 0, 1));

    if (!na_cpu_attn_ok(kv_dtype, head_dim)) {
        na_ref_attn_partial(k, st, acc, q, group, head_dim, spans, n_spans, kv_dtype, scale);
        return;
    }
    na_cpu_attn_spans(st, acc, q, group, head_dim, spans, n_spans, &pf, &pf, scale,
                      na_cpu_kv_kind(kv_dtype), NULL);
}

/* Tokens [t0, t1) of every KV head, folded into (st, acc) of all heads:
 * chunk by chunk, every head of a chunk before the next chunk, so the
 * chunk's K/V rows (contiguous for all heads) are used while in cache; the
 * next chunk's K rows, then its V rows, are prefetched meanwhile (the
 * cursor runs on across the heads' spans). */
static void na_cpu_attn_range(na_kattn_stat_t *st, float *acc, const float *q,
                              const void *kc, const void *vc, int f16, int t0, int t1,
                              int n_heads, int n_kv_heads, int hd)
{
    int group = n_heads / n_kv_heads, c0, h;
    size_t stride = (size_t)n_kv_heads * hd, esz = f16 ? 2 : 4;
    float scale = 1.0f / sqrtf((float)hd);

    for (c0 = t0; c0 < t1; c0 += NA_CPU_CHUNK) {
        int cn = t1 - c0 < NA_CPU_CHUNK ? t1 - c0 : NA_CPU_CHUNK, c1 = c0 + cn;
        int nn = t1 - c1 < NA_CPU_CHUNK ? t1 - c1 : NA_CPU_CHUNK;
        size_t next = (size_t)c1 * stride * esz, next_len = (size_t)nn * stride * esz;
        na_cpu_pf_t pf = na_cpu_pf(na_cpu_pf_seg((const char *)kc + next, next_len, 0, 1),
                                   na_cpu_pf_seg((const char *)vc + next, next_len, 0, 1));
        for (h = 0; h < n_kv_heads; h++) {
            size_t off = ((size_t)c0 * n_kv_heads + h) * hd * esz;
            na_cpu_attn_span(st + h * group, acc + (size_t)h * group * hd,
                             q + (size_t)h * group * hd, group, hd,
                             (const uint8_t *)kc + off, (const uint8_t *)vc + off,
                             stride, cn, &pf, &pf, scale, f16, NULL);
        }
    }
}

typedef struct {
    float          *out;        /* (n_heads*hd): acc of part 0, then the result */
    float          *accs;       /* (n_parts-1, n_heads*hd) */
    na_kattn_stat_t *sts;        /* (n_parts, n_heads) */
    const float    *q;
    const void     *kc, *vc;
    int             f16, ctx, n_heads, n_kv_heads, hd;
} na_cpu_dec_job_t;

/* Pool task p of n_parts: context part p (NA_CPU_PART) into its own partial. */
static void na_cpu_dec_task(void *ctx, int p, int n_parts)
{
    (void)n_parts;
    const na_cpu_dec_job_t *j = ctx;
    size_t hsz = (size_t)j->n_heads * j->hd;
    int t0 = p * NA_CPU_PART, t1 = t0 + NA_CPU_PART;
    na_kattn_stat_t *st = j->sts + (size_t)p * j->n_heads;
    float *acc = p == 0 ? j->out : j->accs + (size_t)(p - 1) * hsz;

    if (t1 > j->ctx)
        t1 = j->ctx;
    na_kattn_init(st, acc, j->n_heads, j->hd);
    na_cpu_attn_range(st, acc, j->q, j->kc, j->vc, j->f16, t0, t1,
                      j->n_heads, j->n_kv_heads, j->hd);
}

/* ops->attn_decode: one partial per NA_CPU_PART tokens of context (on the
 * pool), merged in order and normalised into out: the same bits with any
 * thread count, and as prefill's row (see NA_CPU_PART). Uses the backend
 * scratch; without it (out of memory) the reference kernel, which is not
 * bit-exact with prefill. Cannot fail. */
void na_cpu_attn_decode(na_kernels_t *k, float *out, const float *q,
                        const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                        int ctx, int n_heads, int n_kv_heads, int head_dim)
{
    na_cpu_state_t *s = k->priv;
    na_kattn_stat_t st0[NA_MODEL_MAX_HEADS];
    na_cpu_dec_job_t j = { out, NULL, st0, q, kcache, vcache, na_cpu_kv_kind(kv_dtype),
                           ctx, n_heads, n_kv_heads, head_dim };
    size_t hsz = (size_t)n_heads * head_dim;
    int n_parts = (ctx + NA_CPU_PART - 1) / NA_CPU_PART, p;
    float *buf = NULL;

    if (n_parts > 1)       /* scratch: (n_parts-1) accumulators, then n_parts stat arrays */
        buf = na_cpu_scratch(k, (size_t)(n_parts - 1) * hsz + (size_t)n_parts * n_heads * 2);
    if (!na_cpu_attn_ok(kv_dtype, head_dim) || n_heads > NA_MODEL_MAX_HEADS || ctx <= 0 ||
        (n_parts > 1 && buf == NULL)) {
        na_ref_attn_decode(k, out, q, kcache, vcache, kv_dtype, ctx, n_heads, n_kv_heads,
                           head_dim);
        return;
    }
    if (buf != NULL) {
        j.accs = buf;
        j.sts = (na_kattn_stat_t *)(buf + (size_t)(n_parts - 1) * hsz);
    }
    na_cpu_pool_run(s->pool, na_cpu_dec_task, &j, n_parts);
    for (p = 1; p < n_parts; p++)
        na_kattn_merge(j.sts, out, j.sts + (size_t)p * n_heads, j.accs + (size_t)(p - 1) * hsz,
                      n_heads, head_dim);
    na_kattn_finalize(out, j.sts, out, n_heads, head_dim);
}

typedef struct {
    float       *out;           /* (n_tok, n_heads*hd) */
    const float *q;             /* (n_tok, n_heads*hd) */
    const void  *kc, *vc;
    int          f16, pos0, n_heads, n_kv_heads, hd;
    int          n_tok, qb;     /* query tokens; per task (na_cpu_pre_qb) */
} na_cpu_pre_job_t;

/* A part (NA_CPU_PART) of `group` rows ended: the first becomes the total
 * (tst, tacc), a later one is merged into it, as decode does; the part
 * partial starts again. */
static void na_cpu_part_done(na_kattn_stat_t *tst, float *tacc, na_kattn_stat_t *pst,
                             float *pacc, int group, int hd, int first)
{
    if (first) {
        memcpy(tst, pst, sizeof(*tst) * (size_t)group);
        memcpy(tacc, pacc, sizeof(float) * (size_t)group * hd);
    } else {
        na_kattn_merge(tst, tacc, pst, pacc, group, hd);
    }
    na_kattn_init(pst, pacc, group, hd);
}

/* Fold keys [a, b) of one KV head (rows kh/vh, `rstride` bytes apart; a on a
 * chunk boundary) into the part partial (pst, pacc) of `group` query rows q,
 * closing each part that ends (na_cpu_part_done). */
static void na_cpu_fold_parts(na_kattn_stat_t *tst, float *tacc, na_kattn_stat_t *pst,
                              float *pacc, const float *q, int group, int hd,
                              const uint8_t *kh, const uint8_t *vh, size_t stride,
                              size_t rstride, int a, int b, na_cpu_pf_t *pk, na_cpu_pf_t *pv,
                              float scale, int f16)
{
    while (a < b) {
        int pend = (a / NA_CPU_PART + 1) * NA_CPU_PART, e = b < pend ? b : pend;
        na_cpu_attn_span(pst, pacc, q, group, hd, kh + (size_t)a * rstride,
                         vh + (size_t)a * rstride, stride, e - a, pk, pv, scale, f16, NULL);
        if (e == pend)
            na_cpu_part_done(tst, tacc, pst, pacc, group, hd, pend == NA_CPU_PART);
        a = e;
    }
}

/* The rows' context (ctx tokens) is folded: the open part, if any, joins
 * the total, which is normalised into out. */
static void na_cpu_parts_finish(float *out, na_kattn_stat_t *tst, float *tacc,
                                na_kattn_stat_t *pst, float *pacc, int group, int hd, int ctx)
{
    if (ctx % NA_CPU_PART != 0)
        na_cpu_part_done(tst, tacc, pst, pacc, group, hd, ctx < NA_CPU_PART);
    na_kattn_finalize(out, tst, tacc, group, hd);
}

/* Heads per piece of na_cpu_pre_token: as many as NA_CPU_PRE_ACC floats hold. */
#define NA_CPU_PRE_ACC (NA_CPU_MAX_GROUP * NA_CPU_PRE_MAX_HD)

/* Query token t attends to positions 0 .. pos0 + t: per KV head, its query
 * heads in pieces, each folded part by part (see NA_CPU_PART); the total
 * accumulates in the output row. */
static void na_cpu_pre_token(const na_cpu_pre_job_t *j, int t)
{
    const int hd = j->hd, group = j->n_heads / j->n_kv_heads, ctx = j->pos0 + t + 1;
    const size_t stride = (size_t)j->n_kv_heads * hd, esz = j->f16 ? 2 : 4;
    const float scale = 1.0f / sqrtf((float)hd);
    int pg = NA_CPU_PRE_ACC / hd, h, g0;
    float pacc[NA_CPU_PRE_ACC];
    na_kattn_stat_t tst[NA_CPU_MAX_GROUP], pst[NA_CPU_MAX_GROUP];
    na_cpu_pf_t none = na_cpu_pf_rows(NULL, 0, 0, 0);

    pg = pg > NA_CPU_MAX_GROUP ? NA_CPU_MAX_GROUP : pg < 1 ? 1 : pg;
    for (h = 0; h < j->n_kv_heads; h++)
        for (g0 = 0; g0 < group; g0 += pg) {
            int gn = group - g0 < pg ? group - g0 : pg;
            size_t row = (size_t)t * j->n_heads * hd + ((size_t)h * group + g0) * hd;
            float *o = j->out + row;
            na_kattn_init(tst, o, gn, hd);
            na_kattn_init(pst, pacc, gn, hd);
            na_cpu_fold_parts(tst, o, pst, pacc, j->q + row, gn, hd,
                              (const uint8_t *)j->kc + (size_t)h * hd * esz,
                              (const uint8_t *)j->vc + (size_t)h * hd * esz, stride,
                              stride * esz, 0, ctx, &none, &none, scale, j->f16);
            na_cpu_parts_finish(o, tst, o, pst, pacc, gn, hd, ctx);
        }
}

/* Prefill task: query tokens t0 .. t0+nq-1 (nq = na_cpu_pre_qb) together.
 * Per KV head, the nq tokens' query heads of that KV head are one group of
 * the core (gathered into qg), so each K/V row read is used for all of them
 * (a token alone uses it for its `group` heads: 1 in MHA, where prefill
 * attention ran ~5x below the FMA peak). The whole chunks every token of
 * the block sees are folded together, then the last chunk(s) with each
 * token's causal limit (masked: exactly a shorter chunk), so that every
 * token's chunks and parts are decode's (NA_CPU_PART). */
static void na_cpu_pre_task(void *ctx, int task, int n_tasks)
{
    (void)n_tasks;
    const na_cpu_pre_job_t *j = ctx;
    const int hd = j->hd, group = j->n_heads / j->n_kv_heads, t0 = task * j->qb;
    const int nq = j->n_tok - t0 < j->qb ? j->n_tok - t0 : j->qb, gq = group * nq;
    const int n_common = j->pos0 + t0 + 1, c_common = n_common / NA_CPU_CHUNK * NA_CPU_CHUNK;
    const size_t stride = (size_t)j->n_kv_heads * hd, esz = j->f16 ? 2 : 4;
    const size_t qrow = (size_t)j->n_heads * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float qg[NA_CPU_MAX_GROUP * NA_CPU_PRE_MAX_HD], accg[NA_CPU_MAX_GROUP * NA_CPU_PRE_MAX_HD];
    float acct[NA_CPU_MAX_GROUP * NA_CPU_PRE_MAX_HD];
    na_kattn_stat_t stg[NA_CPU_MAX_GROUP], stt[NA_CPU_MAX_GROUP];
    int lim[NA_CPU_MAX_GROUP];
    int h, i, g, c;

    if (j->qb == 1) {
        na_cpu_pre_token(j, t0);
        return;
    }
    for (h = 0; h < j->n_kv_heads; h++) {
        const uint8_t *kh = (const uint8_t *)j->kc + (size_t)h * hd * esz;
        const uint8_t *vh = (const uint8_t *)j->vc + (size_t)h * hd * esz;
        for (i = 0; i < nq; i++)
            for (g = 0; g < group; g++)
                memcpy(qg + (size_t)(i * group + g) * hd,
                       j->q + (size_t)(t0 + i) * qrow + (size_t)(h * group + g) * hd,
                       sizeof(float) * (size_t)hd);
        /* the common chunks: this head's own rows one chunk ahead are
         * prefetched (the hardware prefetchers do not follow rows strided by
         * all heads' rows: 2.3x slower without, 64 queries at 16K) */
        size_t ahead = c_common > NA_CPU_CHUNK ? (size_t)(c_common - NA_CPU_CHUNK) : 0;
        const size_t rstride = stride * esz, skip = (size_t)NA_CPU_CHUNK * rstride;
        na_cpu_pf_t pk = na_cpu_pf_rows(ahead ? kh + skip : NULL, (size_t)hd * esz, rstride, ahead);
        na_cpu_pf_t pv = na_cpu_pf_rows(ahead ? vh + skip : NULL, (size_t)hd * esz, rstride, ahead);
        na_cpu_pf_t none = na_cpu_pf_rows(NULL, 0, 0, 0);

        na_kattn_init(stg, accg, gq, hd);
        na_kattn_init(stt, acct, gq, hd);
        na_cpu_fold_parts(stt, acct, stg, accg, qg, gq, hd, kh, vh, stride, rstride, 0,
                          c_common, &pk, &pv, scale, j->f16);
        /* the last keys, c_common .. n_common+nq-2, chunk by chunk with each
         * token's own limit (token t0+i sees keys < n_common+i: the tokens
         * still seeing keys of a chunk are the last ones of the block) */
        for (c = c_common; c < n_common + nq - 1; c += NA_CPU_CHUNK) {
            int i0 = c - n_common + 1 > 0 ? c - n_common + 1 : 0, ce = c + NA_CPU_CHUNK;
            int rows = (nq - i0) * group;
            if (ce > n_common + nq - 1)
                ce = n_common + nq - 1;
            for (i = i0; i < nq; i++)
                for (g = 0; g < group; g++)
                    lim[(i - i0) * group + g] = n_common + i - c;
            na_cpu_attn_span(stg + i0 * group, accg + (size_t)i0 * group * hd,
                             qg + (size_t)i0 * group * hd, rows, hd,
                             kh + (size_t)c * rstride, vh + (size_t)c * rstride, stride,
                             ce - c, &none, &none, scale, j->f16, lim);
            if ((c + NA_CPU_CHUNK) % NA_CPU_PART == 0)     /* tokens past it: the part ends */
                for (i = i0; i < nq; i++)
                    if (n_common + i >= c + NA_CPU_CHUNK)
                        na_cpu_part_done(stt + i * group, acct + (size_t)i * group * hd,
                                         stg + i * group, accg + (size_t)i * group * hd,
                                         group, hd, c + NA_CPU_CHUNK == NA_CPU_PART);
        }
        for (i = 0; i < nq; i++)
            na_cpu_parts_finish(j->out + (size_t)(t0 + i) * qrow + (size_t)h * group * hd,
                                stt + i * group, acct + (size_t)i * group * hd,
                                stg + i * group, accg + (size_t)i * group * hd, group, hd,
                                n_common + i);
    }
}

/* Query tokens per prefill task: as many as fit one core group with all
 * their heads of a KV head (NA_CPU_MAX_GROUP), at most NA_CPU_PRE_QB; 1 when
 * the head is too large for the task's stack buffers. */
static int na_cpu_pre_qb(int group, int head_dim)
{
    int qb = NA_CPU_MAX_GROUP / group;
    if (head_dim > NA_CPU_PRE_MAX_HD || qb < 2)
        return 1;
    return qb > NA_CPU_PRE_QB ? NA_CPU_PRE_QB : qb;
}

/* ops->attn_prefill: one pool task per block of na_cpu_pre_qb query tokens
 * (causal: token t sees positions 0..pos0+t; na_cpu_pre_task). Cannot fail. */
void na_cpu_attn_prefill(na_kernels_t *k, float *out, const float *q,
                         const void *kcache, const void *vcache, na_dtype_t kv_dtype,
                         int n_tok, int pos0, int n_heads, int n_kv_heads, int head_dim)
{
    na_cpu_state_t *s = k->priv;
    na_cpu_pre_job_t j = { out, q, kcache, vcache, na_cpu_kv_kind(kv_dtype), pos0,
                           n_heads, n_kv_heads, head_dim, n_tok, 1 };

    if (!na_cpu_attn_ok(kv_dtype, head_dim) || n_heads > NA_MODEL_MAX_HEADS) {
        na_ref_attn_prefill(k, out, q, kcache, vcache, kv_dtype, n_tok, pos0, n_heads,
                            n_kv_heads, head_dim);
        return;
    }
    j.qb = na_cpu_pre_qb(n_heads / n_kv_heads, head_dim);
    na_cpu_pool_run(s->pool, na_cpu_pre_task, &j, (n_tok + j.qb - 1) / j.qb);
}

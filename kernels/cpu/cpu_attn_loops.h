/* kernels/cpu/cpu_attn_loops.h — the score and PV loops of
 * kernels/cpu/cpu_attn.c, written once for both vector widths: that file
 * includes this one with NA_W 8 (256-bit, every build) and NA_W 16 (512-bit,
 * the x86-64-v4 copy), which defines na_cpu_qk<W> and na_cpu_pv_cols<W>. No
 * include guard: it is a template, included once per width. */

#if NA_W == 8
#define NA_VT         __m256
#define NA_VLOAD      _mm256_loadu_ps
#define NA_VSTORE     _mm256_storeu_ps
#define NA_VZERO      _mm256_setzero_ps
#define NA_VSET1      _mm256_set1_ps
#define NA_VFMA       _mm256_fmadd_ps
#define NA_VKV        na_cpu_kv8
#define NA_VTO8(v)    (v)
#elif NA_W == 16
#define NA_VT         __m512
#define NA_VLOAD      _mm512_loadu_ps
#define NA_VSTORE     _mm512_storeu_ps
#define NA_VZERO      _mm512_setzero_ps
#define NA_VSET1      _mm512_set1_ps
#define NA_VFMA       _mm512_fmadd_ps
#define NA_VKV        na_cpu_kv16
#define NA_VTO8(v)    _mm256_add_ps(_mm512_castps512_ps256(v), \
                          _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))
#else
#error "cpu_attn_loops.h: NA_W must be 8 or 16"
#endif
#define NA_VNAME_(x, w) x##w
#define NA_VNAME(x, w)  NA_VNAME_(x, w)

/* Scores of G heads (q rows g0.., stride hd) against cn tokens of k, into
 * s[t * G + g] (token-major, so each reduced vector is one contiguous store).
 * TB = NA_CPU_NACC / G tokens per step; head_dim % NA_W == 0. */
NA_INLINE void NA_VNAME(na_cpu_qk, NA_W)(float *s, const float *q, const void *k, size_t stride,
                                        int cn, na_cpu_pf_t *pf, int hd, float scale, int G,
                                        int f16)
{
    const int TB = NA_CPU_NACC / G, pf_lines = (TB * hd * (f16 ? 2 : 4) + 63) / 64;
    const __m256 vs = _mm256_set1_ps(scale);
    int t = 0, d, g;

    for (; t + TB <= cn; t += TB) {
        NA_VT a[NA_CPU_NACC];
        __m256 h[NA_CPU_NACC];
        int tt;
        na_cpu_pf_step(pf, pf_lines);
#pragma GCC unroll 16
        for (g = 0; g < NA_CPU_NACC; g++)
            a[g] = NA_VZERO();
        for (d = 0; d < hd; d += NA_W) {
            NA_VT qv[8];
#pragma GCC unroll 8
            for (g = 0; g < G; g++) {
                qv[g] = NA_VLOAD(q + (size_t)g * hd + d);
                NA_CPU_IN_REG(qv[g]);
            }
#pragma GCC unroll 16
            for (tt = 0; tt < TB; tt++) {
                NA_VT kv = NA_VKV(k, (size_t)(t + tt) * stride + d, f16);
                NA_CPU_IN_REG(kv);
#pragma GCC unroll 8
                for (g = 0; g < G; g++)
                    a[tt * G + g] = NA_VFMA(qv[g], kv, a[tt * G + g]);
            }
        }
        /* a[tt * G + g] holds (token t + tt, head g): lands at s[(t+tt)*G + g] */
#pragma GCC unroll 16
        for (g = 0; g < NA_CPU_NACC; g++)
            h[g] = NA_VTO8(a[g]);
#pragma GCC unroll 2
        for (g = 0; g < NA_CPU_NACC; g += 8)
            _mm256_storeu_ps(s + (size_t)t * G + g, _mm256_mul_ps(na_cpu_reduce8(h + g), vs));
    }
    for (; t < cn; t++) {                       /* tail tokens, one at a time */
        for (g = 0; g < G; g++) {
            NA_VT a = NA_VZERO();
            for (d = 0; d < hd; d += NA_W)
                a = NA_VFMA(NA_VLOAD(q + (size_t)g * hd + d),
                            NA_VKV(k, (size_t)t * stride + d, f16), a);
            /* the block path's reduction (na_cpu_reduce8), so that a
             * token's score does not depend on where it falls */
            __m256 h[8] = { NA_VTO8(a), _mm256_setzero_ps(), _mm256_setzero_ps(),
                            _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                            _mm256_setzero_ps(), _mm256_setzero_ps() };
            s[t * G + g] = _mm256_cvtss_f32(na_cpu_reduce8(h)) * scale;
        }
    }
}

/* acc[g][d0 .. d0+NA_W*DV) += sum_t p[g][t] v_t[...] for G heads, cn tokens. */
NA_INLINE void NA_VNAME(na_cpu_pv_cols, NA_W)(float *acc, const float *p, const void *v,
                                             size_t stride, int cn, na_cpu_pf_t *pf, int hd,
                                             int d0, int G, int DV, int f16)
{
    const int pf_lines = (NA_W * DV * (f16 ? 2 : 4) + 63) / 64;
    NA_VT a[NA_CPU_NACC];
    int t, g, j;
#pragma GCC unroll 8
    for (g = 0; g < G; g++)
#pragma GCC unroll 16
        for (j = 0; j < DV; j++)
            a[g * DV + j] = NA_VLOAD(acc + (size_t)g * hd + d0 + NA_W * j);
    for (t = 0; t < cn; t++) {
        NA_VT vv[NA_CPU_NACC];
        na_cpu_pf_step(pf, pf_lines);
#pragma GCC unroll 16
        for (j = 0; j < DV; j++) {
            vv[j] = NA_VKV(v, (size_t)t * stride + d0 + NA_W * j, f16);
            NA_CPU_IN_REG(vv[j]);
        }
#pragma GCC unroll 8
        for (g = 0; g < G; g++) {
            NA_VT pg = NA_VSET1(p[t * G + g]);
#pragma GCC unroll 16
            for (j = 0; j < DV; j++)
                a[g * DV + j] = NA_VFMA(pg, vv[j], a[g * DV + j]);
        }
    }
#pragma GCC unroll 8
    for (g = 0; g < G; g++)
#pragma GCC unroll 16
        for (j = 0; j < DV; j++)
            NA_VSTORE(acc + (size_t)g * hd + d0 + NA_W * j, a[g * DV + j]);
}

#undef NA_VT
#undef NA_VLOAD
#undef NA_VSTORE
#undef NA_VZERO
#undef NA_VSET1
#undef NA_VFMA
#undef NA_VKV
#undef NA_VTO8
#undef NA_VNAME_
#undef NA_VNAME

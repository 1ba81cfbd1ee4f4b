/* kernels/cpu/cpu_gemm_q4.c — y = W·x for the legacy 4/5-bit block formats
 * Q4_0, Q5_0, Q4_1, Q5_1 at large batches (prompt processing), reading
 * their blocks directly: the inputs quantised to Q8 blocks (Q8_1 with its s
 * for Q4_1 / Q5_1) once per call, as kernels/cpu/cpu_quant.c does for these
 * types; each task unpacks a chunk of weight rows at a time into a layout
 * its micro-kernel reads with plain loads (the codes as bytes, the f16
 * scales widened to f32 lanes), then multiplies tiles of NA_G4_RM rows x
 * NA_G4_RN inputs in int8 with each block summed exactly in int32.
 *
 * Bit-identical to the row kernels of cpu_quant.c (na_cq_dot_legacy,
 * na_cq_dot_legacy_rows), which every smaller batch and the batch-1 decode
 * take, so the batch size never changes a result (batch_invariant): each
 * output keeps one 8-lane f32 accumulator, block b in order adding
 * fma(int32 lanes as f32, d_w * d_x, acc), lane l holding the products
 * 4l..4l+3 of the block, then na_cpu_hsum. The int32 lanes are the same
 * integers: the unsigned code u (the nibble, + 16 x the high bit for Q5_*)
 * times the input, started from -off x the input's sums of 4 (off 8 or 16
 * for Q4_0 / Q5_0, 0 for Q4_1 / Q5_1; packed with the input), is
 * (u - off) x input. Q4_1 / Q5_1 add the min term as the row kernels do:
 * summ = fma(m_w, s_x, summ) over the blocks in order, from 0, in f32
 * vector lanes of its own (one per output), then hsum(acc) + summ.
 *
 * Compiled three times (kernels/CMakeLists.txt):
 *   baseline (x86-64-v3)  na_cpu_gemm_q4: a ymm per output, maddubs + madd,
 *                         2 rows x 3 inputs (16 ymm registers).
 *   x86-64-v4             na_cpu_gemm_q4_v4: a zmm holds one block of two
 *   AVX512-VNNI           rows (each row's 8 lanes in a half) times the
 *                         input block in both halves; maddubs + madd, or
 *                         na_cpu_gemm_q4_vnni: one vpdpbusd; 6 rows x 4
 *                         inputs (32 zmm registers).
 * cpu_quant.c's copy for the same ISA calls it. */
#include <string.h>

#include "kernels/cpu/cpu.h"

#if defined(NA_CPU_VNNI)
#define na_cpu_gemm_q4 na_cpu_gemm_q4_vnni
#endif

#if defined(NA_CPU_VNNI) || defined(NA_CPU_V4)
#define NA_G4_Z 1           /* zmm: two rows per vector */
#define NA_G4_RM 6          /* weight rows per micro-tile */
#define NA_G4_RN 4          /* inputs per micro-tile */
#define NA_G4_DWB 32        /* packed scale bytes per row and block: d_w in 8 f32 lanes */
#define NA_G4_ML 4          /* summ lanes per row: lane 4r + c (a zmm for rows 0-3, a ymm for 4-5) */
#else
#define NA_G4_Z 0
#define NA_G4_RM 2
#define NA_G4_RN 3
#define NA_G4_DWB 4         /* d_w as one f32 */
#define NA_G4_ML 3          /* summ lanes per row: lane 3r + c of a ymm (6 and 7 unused) */
#endif
/* Q4_1 / Q5_1: the mins m_w of a tile and block, lane NA_G4_ML r + c holding
 * row r's (NA_G4_MB bytes after the scales), and the inputs' s_x of a tile
 * of NA_G4_RN inputs and block in the lanes that use them (NA_G4_SB bytes) */
#define NA_G4_MB (NA_G4_Z ? 96 : 32)
#define NA_G4_SB (NA_G4_Z ? 16 : 32)
/* packed bytes of one tile (NA_G4_RM rows) and block: the codes (32 per
 * row; row pairs adjacent in the zmm copies), the scales, the mins (Q4_1 /
 * Q5_1; j->tb is this or NA_G4_TB0 without them) */
#define NA_G4_TB0 (NA_G4_RM * (32 + NA_G4_DWB))
#define NA_G4_TB (NA_G4_TB0 + NA_G4_MB)
#define NA_G4_XB 64         /* per input and block: the codes (s8), -off x sums of 4 (8 x i32) */

typedef struct {
    na_cpu_gemm_io_t   io;      /* the call; ncols: batch rounded up to NA_G4_RN */
    int                nblk;    /* blocks per row */
    int                q5;      /* Q5_0 / Q5_1 (else Q4_*) */
    int                hm;      /* Q4_1 / Q5_1: a min per block */
    size_t             bb;      /* bytes per weight block */
    size_t             tb;      /* packed bytes per tile and block */
    int                mc;      /* weight rows per packed chunk (a multiple of NA_G4_RM) */
    int                nc;      /* inputs per pass (a multiple of NA_G4_RN) */
    size_t             xs;      /* bytes per packed input: nblk x NA_G4_XB, then nblk d_x */
    uint8_t           *xp;      /* packed inputs (ncols, xs) */
    uint8_t           *wp;      /* per task: packed tiles (mc / RM, nblk, tb) */
    float             *sp;      /* Q4_1 / Q5_1: s_x, (ncols / RN, nblk, NA_G4_SB) */
} na_g4_job_t;

/* Input column c (x; NULL: a padding column, all zero) of j into out: per
 * block the Q8 codes and -off x their sums of 4, then the nblk scales; for
 * Q4_1 / Q5_1 Q8_1's s into the lanes of j->sp that use it. */
static void na_g4_pack_x(const na_g4_job_t *j, const float *x, int c, uint8_t *out)
{
    const int nblk = j->nblk, off = j->hm ? 0 : j->q5 ? 16 : 8;
    float *dx = (float *)(out + (size_t)nblk * NA_G4_XB);
    float *sp = j->hm ? j->sp + (size_t)(c / NA_G4_RN) * nblk * (NA_G4_SB / 4) : NULL;
    int b;
    for (b = 0; b < nblk; b++) {
        int8_t *q = (int8_t *)out + (size_t)b * NA_G4_XB;
        __m256i xv, s;
        float sx = 0.0f;
        if (x != NULL) {
            na_cpu_quantize_q8s(x + (size_t)b * 32, 32, q, dx + b, j->hm ? &sx : NULL);
        } else {
            memset(q, 0, 32);
            dx[b] = 0.0f;
        }
        if (sp != NULL) {
            float *sb = sp + (size_t)b * (NA_G4_SB / 4);
#if NA_G4_Z
            sb[c % NA_G4_RN] = sx;
#else
            sb[c % NA_G4_RN] = sb[NA_G4_RN + c % NA_G4_RN] = sx;
            if (c % NA_G4_RN == 0)              /* lanes 6, 7: unused (the group's first input) */
                sb[6] = sb[7] = 0.0f;
#endif
        }
        xv = _mm256_loadu_si256((const __m256i *)q);
        s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8((char)off), xv),
                              _mm256_set1_epi16(1));
        _mm256_storeu_si256((__m256i *)(q + 32), _mm256_sub_epi32(_mm256_setzero_si256(), s));
    }
}

/* Weight row (NULL: a padding row, zero codes, scales and mins), every
 * block, as row i of the tiles at tp (j->tb bytes per block). */
static void na_g4_pack_w(const na_g4_job_t *j, const uint8_t *row, int i, uint8_t *tp)
{
    const int q5 = j->q5, hm = j->hm;
    const size_t qo = 2 + (hm ? 2 : 0) + (q5 ? 4 : 0);       /* the nibbles in a block */
#if NA_G4_Z
    const size_t co = (size_t)(i / 2) * 64 + (size_t)(i % 2) * 32;           /* codes */
    const size_t so = NA_G4_RM * 32 + (size_t)(i / 2) * 64 + (size_t)(i % 2) * 32;
    /* the mins: rows 0-3 in the zmm's lanes 4i.., rows 4-5 in the ymm's */
    const size_t mo = NA_G4_TB0 + (i < 4 ? (size_t)i * 16 : 64 + (size_t)(i - 4) * 16);
#else
    const size_t co = (size_t)i * 32, so = NA_G4_RM * 32 + (size_t)i * 4;
    const size_t mo = NA_G4_TB0 + (size_t)i * 12;
#endif
    int b, l;
    for (b = 0; b < j->nblk; b++) {
        uint8_t *t = tp + (size_t)b * j->tb;
        __m256i v = _mm256_setzero_si256();
        float d = 0.0f, m = 0.0f;
        if (row != NULL) {
            const uint8_t *blk = row + (size_t)b * j->bb;
            uint16_t dh;
            __m128i q = _mm_loadu_si128((const __m128i *)(blk + qo));
            /* low nibbles in bytes 0..15, high in 16..31: byte j = code j */
            v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q),
                                 _mm256_set1_epi8(0x0F));
            if (q5)
                v = _mm256_or_si256(v, _mm256_and_si256(na_cpu_bits32(blk + qo - 4),
                                                        _mm256_set1_epi8(0x10)));
            memcpy(&dh, blk, 2);
            d = _cvtsh_ss(dh);
            if (hm) {
                memcpy(&dh, blk + 2, 2);
                m = _cvtsh_ss(dh);
            }
        }
        _mm256_storeu_si256((__m256i *)(t + co), v);
#if NA_G4_Z
        _mm256_storeu_ps((float *)(t + so), _mm256_set1_ps(d));
#else
        memcpy(t + so, &d, 4);
#endif
        if (hm) {
            for (l = 0; l < NA_G4_ML; l++)
                memcpy(t + mo + 4 * (size_t)l, &m, 4);
#if !NA_G4_Z
            if (i == 0)
                memset(t + NA_G4_TB0 + 24, 0, 8);          /* lanes 6, 7 */
#endif
        }
    }
}

#if NA_G4_Z
#define NA_G4_RP (NA_G4_RM / 2)
#define NA_G4_AR NA_G4_RP               /* accumulator rows: row pairs */
#define NA_G4_ZERO _mm512_setzero_ps
typedef __m512 na_g4_acc_t[NA_G4_RP][NA_G4_RN];
#else
#define NA_G4_AR NA_G4_RM
#define NA_G4_ZERO _mm256_setzero_ps
typedef __m256 na_g4_acc_t[NA_G4_RM][NA_G4_RN];
#endif

/* A tile's start in both copies: dxp[c], the block scales of input c
 * (packed after its nblk blocks), and every accumulator 0; r and c are the
 * caller's loop counters. A macro: as an inline function (dxp and acc by
 * address) it changed the register allocation of the v4 / VNNI copies' block
 * loop; expanded, each copy's code is the one it had. */
#define NA_G4_TILE_START(xp, xs, nblk, dxp, acc, r, c)                                  \
    do {                                                                                \
        _Pragma("GCC unroll 4")                                                         \
        for (c = 0; c < NA_G4_RN; c++)                                                  \
            dxp[c] = (const float *)((xp) + (size_t)c * (xs) + (size_t)(nblk) * NA_G4_XB); \
        _Pragma("GCC unroll 4")                                                         \
        for (r = 0; r < NA_G4_AR; r++)                                                  \
            _Pragma("GCC unroll 4")                                                     \
            for (c = 0; c < NA_G4_RN; c++)                                              \
                acc[r][c] = NA_G4_ZERO();                                               \
    } while (0)

#if NA_G4_Z

/* The exact int32 lanes start + sum of 4 (u x s) (u unsigned <= 31). */
NA_INLINE __m512i na_g4_dot(__m512i start, __m512i u, __m512i s)
{
#if defined(NA_CPU_VNNI)
    return _mm512_dpbusd_epi32(start, u, s);
#else
    return _mm512_add_epi32(start, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s),
                                                     _mm512_set1_epi16(1)));
#endif
}

/* out[r][c] = packed tiles wp (RM rows, tb bytes per block) · packed
 * inputs xp + c * xs, over nblk blocks; HM (a constant): plus the mins'
 * term, the inputs' s at sp. */
NA_INLINE void na_g4_tile(int HM, const uint8_t *wp, size_t tb, const uint8_t *xp, size_t xs,
                          const float *sp, int nblk, float out[NA_G4_RM][NA_G4_RN])
{
    na_g4_acc_t acc;
    __m512 sm0 = _mm512_setzero_ps();           /* summ, lane 4r + c: rows 0-3 */
    __m256 sm1 = _mm256_setzero_ps();           /* rows 4-5 */
    const float *dxp[NA_G4_RN];
    float sm[NA_G4_RM * NA_G4_ML];
    int b, r, c;

    NA_G4_TILE_START(xp, xs, nblk, dxp, acc, r, c);
    for (b = 0; b < nblk; b++) {
        const uint8_t *wb = wp + (size_t)b * tb;
        __m512i xv[NA_G4_RN], st[NA_G4_RN];
        if (HM) {
            const float *sb = sp + (size_t)b * (NA_G4_SB / 4);
            sm0 = _mm512_fmadd_ps(_mm512_loadu_ps(wb + NA_G4_TB0),
                                  _mm512_broadcast_f32x4(_mm_loadu_ps(sb)), sm0);
            sm1 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(wb + NA_G4_TB0 + 64)),
                                  _mm256_broadcast_ps((const __m128 *)sb), sm1);
        }
#pragma GCC unroll 4
        for (c = 0; c < NA_G4_RN; c++) {
            const uint8_t *xc = xp + (size_t)c * xs + (size_t)b * NA_G4_XB;
            xv[c] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)xc));
            st[c] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xc + 32)));
        }
#pragma GCC unroll 4
        for (r = 0; r < NA_G4_RP; r++) {
            __m512i wv = _mm512_loadu_si512(wb + (size_t)r * 64);
            __m512 dw = _mm512_loadu_ps(wb + NA_G4_RM * 32 + (size_t)r * 64);
#pragma GCC unroll 4
            for (c = 0; c < NA_G4_RN; c++) {
                __m512i p = na_g4_dot(st[c], wv, xv[c]);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p),
                                            _mm512_mul_ps(dw, _mm512_set1_ps(dxp[c][b])),
                                            acc[r][c]);
            }
        }
    }
    _mm512_storeu_ps(sm, sm0);
    _mm256_storeu_ps(sm + 16, sm1);
#pragma GCC unroll 4
    for (r = 0; r < NA_G4_RP; r++)
#pragma GCC unroll 4
        for (c = 0; c < NA_G4_RN; c++) {
            out[2 * r][c] = na_cpu_hsum(_mm512_castps512_ps256(acc[r][c]));
            out[2 * r + 1][c] = na_cpu_hsum(_mm512_extractf32x8_ps(acc[r][c], 1));
            if (HM) {
                out[2 * r][c] += sm[NA_G4_ML * 2 * r + c];
                out[2 * r + 1][c] += sm[NA_G4_ML * (2 * r + 1) + c];
            }
        }
}
#else
NA_INLINE void na_g4_tile(int HM, const uint8_t *wp, size_t tb, const uint8_t *xp, size_t xs,
                          const float *sp, int nblk, float out[NA_G4_RM][NA_G4_RN])
{
    na_g4_acc_t acc;
    __m256 sm0 = _mm256_setzero_ps();           /* summ, lane 3r + c */
    const float *dxp[NA_G4_RN];
    float sm[8];
    int b, r, c;

    NA_G4_TILE_START(xp, xs, nblk, dxp, acc, r, c);
    for (b = 0; b < nblk; b++) {
        const uint8_t *wb = wp + (size_t)b * tb;
        const float *dw = (const float *)(wb + NA_G4_RM * 32);
        if (HM)
            sm0 = _mm256_fmadd_ps(_mm256_loadu_ps((const float *)(wb + NA_G4_TB0)),
                                  _mm256_loadu_ps(sp + (size_t)b * (NA_G4_SB / 4)), sm0);
#pragma GCC unroll 4
        for (c = 0; c < NA_G4_RN; c++) {
            const uint8_t *xc = xp + (size_t)c * xs + (size_t)b * NA_G4_XB;
            __m256i xv = _mm256_loadu_si256((const __m256i *)xc);
            __m256i st = _mm256_loadu_si256((const __m256i *)(xc + 32));
            __m256 dx = _mm256_set1_ps(dxp[c][b]);
#pragma GCC unroll 4
            for (r = 0; r < NA_G4_RM; r++) {
                __m256i wv = _mm256_loadu_si256((const __m256i *)(wb + (size_t)r * 32));
                __m256i p = _mm256_add_epi32(st, _mm256_madd_epi16(
                    _mm256_maddubs_epi16(wv, xv), _mm256_set1_epi16(1)));
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                                            _mm256_mul_ps(_mm256_set1_ps(dw[r]), dx), acc[r][c]);
            }
        }
    }
    _mm256_storeu_ps(sm, sm0);
#pragma GCC unroll 4
    for (r = 0; r < NA_G4_RM; r++)
#pragma GCC unroll 4
        for (c = 0; c < NA_G4_RN; c++) {
            out[r][c] = na_cpu_hsum(acc[r][c]);
            if (HM)
                out[r][c] += sm[NA_G4_ML * r + c];
        }
}
#endif

/* Pool job 1: input columns [lo, hi) of the padded batch into j->xp. */
static void na_g4_pack_x_task(void *ctx, int t, int n_tasks)
{
    const na_g4_job_t *j = ctx;
    int c, lo = (int)((long)j->io.ncols * t / n_tasks);
    int hi = (int)((long)j->io.ncols * (t + 1) / n_tasks);
    for (c = lo; c < hi; c++)
        na_g4_pack_x(j, na_cpu_gemm_input(&j->io, c), c, j->xp + (size_t)c * j->xs);
}

/* Pool job 2: the row tiles [lo, hi) of task t: packs j->mc rows at a time
 * into its part of j->wp, then every input, j->nc at a time, times them. */
static void na_g4_mm_task(void *ctx, int t, int n_tasks)
{
    const na_g4_job_t *j = ctx;
    const int rows = j->io.w->rows, nblk = j->nblk;
    const size_t tile_b = (size_t)nblk * j->tb, row_in = (size_t)nblk * j->bb;
    const int ntile = (rows + NA_G4_RM - 1) / NA_G4_RM;
    int lo = (int)((long)ntile * t / n_tasks) * NA_G4_RM;
    int hi = (int)((long)ntile * (t + 1) / n_tasks) * NA_G4_RM;
    uint8_t *wp = j->wp + (size_t)t * (size_t)(j->mc / NA_G4_RM) * tile_b;
    int r0, r, c0, c1, rt;

    for (r0 = lo; r0 < hi; r0 += j->mc) {
        int nr = hi - r0 < j->mc ? hi - r0 : j->mc;
        for (r = 0; r < nr; r++)
            na_g4_pack_w(j, r0 + r < rows ? j->io.w->data + (size_t)(r0 + r) * row_in : NULL,
                         r % NA_G4_RM, wp + (size_t)(r / NA_G4_RM) * tile_b);
        for (c0 = 0; c0 < j->io.ncols; c0 += j->nc) {
            int cn = j->io.ncols - c0 < j->nc ? j->io.ncols - c0 : j->nc;
            for (rt = 0; rt < nr; rt += NA_G4_RM)
                for (c1 = c0; c1 < c0 + cn; c1 += NA_G4_RN) {
                    const uint8_t *tw = wp + (size_t)(rt / NA_G4_RM) * tile_b;
                    const uint8_t *tx = j->xp + (size_t)c1 * j->xs;
                    float out[NA_G4_RM][NA_G4_RN];
                    if (j->hm)
                        na_g4_tile(1, tw, j->tb, tx, j->xs, j->sp + (size_t)(c1 / NA_G4_RN) *
                                   nblk * (NA_G4_SB / 4), nblk, out);
                    else
                        na_g4_tile(0, tw, j->tb, tx, j->xs, NULL, nblk, out);
                    na_cpu_gemm_put(j->io.y, rows, j->io.batch, r0 + rt, c1, &out[0][0], NA_G4_RM,
                                    NA_G4_RN);
                }
        }
    }
}

/* See kernels/cpu/cpu.h. */
int na_cpu_gemm_q4(na_kernels_t *k, float *y, const float *x, const na_tensor_t *w, int batch)
{
    na_g4_job_t j;
    int ntile = (w->rows + NA_G4_RM - 1) / NA_G4_RM, n_tasks;
    size_t row_b, xbytes, wbytes, sbytes;

    j.io = na_cpu_gemm_io(y, x, w, batch, NA_G4_RN);
    j.nblk = w->cols / 32;
    j.q5 = w->dtype == NA_DTYPE_Q5_0 || w->dtype == NA_DTYPE_Q5_1;
    j.hm = w->dtype == NA_DTYPE_Q4_1 || w->dtype == NA_DTYPE_Q5_1;
    j.bb = na_dtype_block_bytes(w->dtype);
    j.tb = j.hm ? NA_G4_TB : NA_G4_TB0;
    j.xs = (size_t)j.nblk * (NA_G4_XB + sizeof(float));
    row_b = (size_t)j.nblk * j.tb / NA_G4_RM;
    n_tasks = na_cpu_gemm_blocks(k, ntile, NA_G4_RM, NA_G4_RN, row_b, j.xs, &j.mc, &j.nc);
    xbytes = (size_t)j.io.ncols * j.xs;
    wbytes = (size_t)n_tasks * (size_t)j.mc * row_b;
    sbytes = j.hm ? (size_t)(j.io.ncols / NA_G4_RN) * j.nblk * NA_G4_SB : 0;
    /* inputs, weight chunks, the inputs' s: each a whole number of floats */
    j.xp = (uint8_t *)na_cpu_scratch(k, (xbytes + wbytes + sbytes) / sizeof(float) + 1);
    if (j.xp == NULL)
        return -1;
    j.wp = j.xp + xbytes;
    j.sp = (float *)(j.wp + wbytes);
    na_cpu_gemm_run(k, na_g4_pack_x_task, na_g4_mm_task, &j, j.io.ncols, n_tasks);
    return 0;
}

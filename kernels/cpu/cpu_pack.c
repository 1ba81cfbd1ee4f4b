/* kernels/cpu/cpu_pack.c — the cpu backend's weight placement: most weights
 * are read where the model maps them (na_khost_place, no copy); six kinds
 * are copied once into the order their kernels read, with one output row
 * per vector lane, so a row's sum never needs a horizontal add:
 *
 * NA_LAYOUT_Q4X8 (Q4_0, rows % 8 == 0; kernels/cpu/cpu_quant.c's "Q4_0 in
 * groups of 8 rows"): rows r = 8g..8g+7 form group g; for each group,
 * block b of its 8 rows is 144 bytes (8 x 18, the bytes of those 8 Q4_0
 * blocks):
 *   bytes   0..15   the 8 rows' f16 scales d, row 8g + i at 2i;
 *   bytes  16..143  4 chunks of 32: chunk c holds bytes 4c..4c+3 of each
 *                   row's 16 code bytes, row 8g + i at 16 + 32c + 4i.
 * One 32-byte load gives 8 rows x 4 code bytes, one 32-bit lane a row
 * (llama.cpp's repacked Q4_0 rests on the same idea). Group g, block b at
 * (g * nblk + b) * 144.
 *
 * NA_LAYOUT_BF16X32 (BF16, rows % 32 == 0, even cols, where the CPU has
 * AVX512-BF16; kernels/cpu/cpu_gemm_bf16.c): rows 32g..32g+31 form panel g,
 * and panels 4c..4c+3 chunk c (the last chunk may hold fewer, n_c); a chunk
 * is (cols / 2) k pairs x n_c panels x 32 rows of 32-bit words, word (p, g,
 * i) = row 32(4c + g) + i's elements 2p and 2p + 1, at 4c x cols x 32
 * elements. So vdpbf16ps reads a pair of 16 rows per zmm (the GEMM's panel,
 * read with a stride), and a small batch reads 4 panels as one stream: the
 * whole weight is one sequential read, as row-major rows are.
 *
 * NA_LAYOUT_Q4KX8 (Q4_K, rows % 8 == 0; cpu_quant.c's "Q4_K in groups of 8
 * rows"): group g = rows 8g..8g+7; super-block b of the group is 1184 bytes
 * (the 8 rows' 1152, the 6-bit scales and mins widened to bytes):
 *   bytes    0..15    the 8 rows' f16 d, row 8g + i at 2i;
 *   bytes   16..31    their f16 dmin;
 *   bytes   32..95    the sub-block scales, sub-block s, row i at 32 + 8s + i;
 *   bytes   96..159   the mins in pairs of sub-blocks: (2t, 2t+1), row i at
 *                     96 + 16t + 2i (and + 1);
 *   bytes  160..1183  32 chunks of 32: chunk c holds code bytes 4c..4c+3 of
 *                     each row (row i at 160 + 32c + 4i): the low nibbles
 *                     elements 64(c / 8) + 4(c % 8).., of sub-block 2(c / 8),
 *                     the high ones 32 further, of sub-block 2(c / 8) + 1.
 * Group g, super-block b at (g * nsb + b) * 1184.
 *
 * NA_LAYOUT_Q5KX8 (Q5_K, rows % 8 == 0; cpu_quant.c's Q4_K kernel with the
 * fifth bits): super-block b of group g is 1440 bytes, NA_LAYOUT_Q4KX8's
 * 1184 for the scales, mins and low 4 bits of the codes with 64 bytes of
 * fifth bits after each 8 code chunks (so one stream, read in order): chunk
 * c at 160 + 32c + 64(c / 8), and its fifth bits as two little-endian 32-bit
 * words at 160 + 320(c / 8) + 256 + 8(c % 8), the low-nibble elements' and
 * the high-nibble ones', bit 4i + k the fifth bit of row i's element k of
 * the chunk (the byte of the chunk's 32 that holds it). Group g,
 * super-block b at (g * nsb + b) * 1440.
 *
 * NA_LAYOUT_Q6KX8 (Q6_K, rows % 8 == 0; cpu_quant.c's Q6KX8): group g =
 * rows 8g..8g+7; super-block b of the group is 1680 bytes (8 x 210):
 *   bytes    0..15    the 8 rows' f16 d, row 8g + i at 2i;
 *   bytes   16..143   the sub-block scales (int8), sub-block s, row i at
 *                     16 + 8s + i;
 *   bytes  144..1679  16 sub-blocks of 96 bytes, sub-block s at 144 + 96s:
 *                     three chunks of 32, row i at 4i of each (j = 0..3,
 *                     element e = 16s + j): chunk 0 the low 4 bits of the
 *                     codes (0..63) of e (low nibble) and e + 4 (high);
 *                     chunk 1 of e + 8 and e + 12; chunk 2 their top 2 bits,
 *                     e at bits 0-1, e + 4 at 2-3, e + 8 at 4-5, e + 12 at
 *                     6-7.
 * Group g, super-block b at (g * nsb + b) * 1680.
 *
 * NA_LAYOUT_Q8X8 (Q8_0, rows % 8 == 0; cpu_quant.c's Q8X8): group g = rows
 * 8g..8g+7; block b of the group is 272 bytes (8 x 34):
 *   bytes   0..15   the 8 rows' f16 scales d, row 8g + i at 2i;
 *   bytes  16..271  8 chunks of 32: chunk c holds codes e..e+3 of each row,
 *                   e = 4(c / 2) + 16(c % 2), as unsigned bytes code + 128
 *                   (row 8g + i at 16 + 32c + 4i): the order in which the
 *                   Q4_0 kernel pairs its low and high nibbles with the
 *                   inputs.
 * Group g, block b at (g * nblk + b) * 272.
 *
 * A tensor placed twice (the tied output and embedding) shares one copy,
 * reference-counted by its source address, as the cuda backend shares
 * its uploads. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/grow.h"
#include "kernels/cpu/cpu.h"
#include "kernels/host/host.h"
#include "kernels/ref/ref.h"

#define NA_Q4X8_GROUP_BLOCK 144     /* 8 rows x 18 bytes */
#define NA_X8_BLOCK_MAX 210         /* bytes of the largest model block here (Q6_K) */
#define NA_Q4K_BLOCK 144            /* bytes of a Q4_K super-block */
#define NA_Q4KX8_GROUP_BLOCK 1184   /* 8 rows' super-blocks, reordered */
#define NA_Q8X8_GROUP_BLOCK 272     /* 8 rows x 34 bytes */
#define NA_Q6KX8_GROUP_BLOCK 1680   /* 8 rows x 210 bytes */
#define NA_Q5KX8_GROUP_BLOCK 1440   /* 8 rows' super-blocks, reordered (8 x 176 = 1408) */

/* Weights with fewer elements stay row-major: the copy would not pay. */
#define NA_CPU_PACK_MIN ((size_t)1 << 16)

/* The groups of 8 rows (NA_LAYOUT_Q4X8, Q4KX8, Q5KX8, Q6KX8, Q8X8): a model
 * block of row i (0..7) into its group's block o (put), and back (get). */
static void na_cpu_q4x8_put(uint8_t *o, int i, const uint8_t *blk)
{
    int c;
    memcpy(o + 2 * i, blk, 2);
    for (c = 0; c < 4; c++)
        memcpy(o + 16 + 32 * c + 4 * i, blk + 2 + 4 * c, 4);
}

static void na_cpu_q4x8_get(const uint8_t *o, int i, uint8_t *blk)
{
    int c;
    memcpy(blk, o + 2 * i, 2);
    for (c = 0; c < 4; c++)
        memcpy(blk + 2 + 4 * c, o + 16 + 32 * c + 4 * i, 4);
}

/* Q4KX8's code chunk c in a group's super-block; Q5KX8 (k5) has 64 bytes of
 * fifth bits after each 8 chunks. */
static size_t na_cpu_qk_chunk(int c, int k5)
{
    return 160 + 32 * (size_t)c + (k5 ? 64 * (size_t)(c / 8) : 0);
}

/* A Q4_K block (or Q5_K's d, scales and low bits as one, k5) of row i into
 * a group's super-block o, and back. */
static void na_cpu_qk_put(uint8_t *o, int i, const uint8_t *blk, int k5)
{
    int s, c, sc, m;
    memcpy(o + 2 * i, blk, 2);
    memcpy(o + 16 + 2 * i, blk + 2, 2);
    for (s = 0; s < 8; s++) {
        na_ref_k4_scale_min(blk + 4, s, &sc, &m);
        o[32 + 8 * s + i] = (uint8_t)sc;
        o[96 + 16 * (s / 2) + 2 * i + s % 2] = (uint8_t)m;
    }
    for (c = 0; c < 32; c++)
        memcpy(o + na_cpu_qk_chunk(c, k5) + 4 * i, blk + 16 + 4 * c, 4);
}

/* (the 6-bit scales and mins packed back as na_ref_k4_scale_min reads them) */
static void na_cpu_qk_get(const uint8_t *o, int i, uint8_t *blk, int k5)
{
    int sc[8], m[8], s, c;
    memcpy(blk, o + 2 * i, 2);
    memcpy(blk + 2, o + 16 + 2 * i, 2);
    for (s = 0; s < 8; s++) {
        sc[s] = o[32 + 8 * s + i];
        m[s] = o[96 + 16 * (s / 2) + 2 * i + s % 2];
    }
    for (s = 0; s < 4; s++) {
        blk[4 + s] = (uint8_t)((sc[s] & 63) | ((sc[s + 4] >> 4) << 6));
        blk[8 + s] = (uint8_t)((m[s] & 63) | ((m[s + 4] >> 4) << 6));
        blk[12 + s] = (uint8_t)((sc[s + 4] & 0xF) | ((m[s + 4] & 0xF) << 4));
    }
    for (c = 0; c < 32; c++)
        memcpy(blk + 16 + 4 * c, o + na_cpu_qk_chunk(c, k5) + 4 * i, 4);
}

static void na_cpu_q4kx8_put(uint8_t *o, int i, const uint8_t *blk)
{
    na_cpu_qk_put(o, i, blk, 0);
}

static void na_cpu_q4kx8_get(const uint8_t *o, int i, uint8_t *blk)
{
    na_cpu_qk_get(o, i, blk, 0);
}

static void na_cpu_q8x8_put(uint8_t *o, int i, const uint8_t *blk)
{
    int c, j;
    memcpy(o + 2 * i, blk, 2);
    for (c = 0; c < 8; c++)
        for (j = 0; j < 4; j++)
            o[16 + 32 * c + 4 * i + j] = blk[2 + 4 * (c / 2) + 16 * (c % 2) + j] ^ 0x80;
}

static void na_cpu_q8x8_get(const uint8_t *o, int i, uint8_t *blk)
{
    int c, j;
    memcpy(blk, o + 2 * i, 2);
    for (c = 0; c < 8; c++)
        for (j = 0; j < 4; j++)
            blk[2 + 4 * (c / 2) + 16 * (c % 2) + j] = o[16 + 32 * c + 4 * i + j] ^ 0x80;
}

/* Q5_K (d, dmin, 12 bytes of scales, qh[32], qs[128]): Q4KX8's header and
 * chunks for a Q4_K block of the same d, scales and low bits, and the fifth
 * bits of chunk c as two 32-bit words (bit 4i + j: row i's element j) after
 * its 8 chunks. */
static void na_cpu_q5kx8_put(uint8_t *o, int i, const uint8_t *blk)
{
    uint8_t k4[NA_Q4K_BLOCK];
    int c, j;
    memcpy(k4, blk, 16);
    memcpy(k4 + 16, blk + 48, 128);
    na_cpu_qk_put(o, i, k4, 1);
    for (c = 0; c < 32; c++) {
        uint8_t *w = o + na_cpu_qk_chunk(8 * (c / 8), 1) + 256 + 8 * (c % 8);
        uint32_t lo = 0, hi = 0, v;
        for (j = 0; j < 4; j++) {               /* row i's 4 bits of each word */
            const uint8_t h = blk[16 + 4 * (c % 8) + j];
            lo |= (uint32_t)((h >> (2 * (c / 8))) & 1) << j;
            hi |= (uint32_t)((h >> (2 * (c / 8) + 1)) & 1) << j;
        }
        memcpy(&v, w, 4);
        v = (v & ~(0xFu << (4 * i))) | lo << (4 * i);
        memcpy(w, &v, 4);
        memcpy(&v, w + 4, 4);
        v = (v & ~(0xFu << (4 * i))) | hi << (4 * i);
        memcpy(w + 4, &v, 4);
    }
}

static void na_cpu_q5kx8_get(const uint8_t *o, int i, uint8_t *blk)
{
    uint8_t k4[NA_Q4K_BLOCK];
    int c, j;
    na_cpu_qk_get(o, i, k4, 1);
    memcpy(blk, k4, 16);
    memcpy(blk + 48, k4 + 16, 128);
    memset(blk + 16, 0, 32);
    for (c = 0; c < 32; c++) {
        const uint8_t *w = o + na_cpu_qk_chunk(8 * (c / 8), 1) + 256 + 8 * (c % 8);
        for (j = 0; j < 4; j++) {
            const int p = 4 * i + j;
            blk[16 + 4 * (c % 8) + j] |= (uint8_t)((((w[p / 8] >> (p % 8)) & 1) << (2 * (c / 8))) |
                                                   (((w[4 + p / 8] >> (p % 8)) & 1)
                                                    << (2 * (c / 8) + 1)));
        }
    }
}

/* Q6_K (ql[128] low 4 bits, qh[64] top 2 bits, 16 int8 scales, d): its 256
 * codes (0..63) as ggml orders them, and back. */
static void na_cpu_q6k_codes(const uint8_t *blk, uint8_t *q)
{
    int h, l;
    for (h = 0; h < 2; h++, q += 128)
        for (l = 0; l < 32; l++) {
            const uint8_t a = blk[64 * h + l], b = blk[64 * h + l + 32], t = blk[128 + 32 * h + l];
            q[l] = (uint8_t)((a & 0xF) | (t & 3) << 4);
            q[l + 32] = (uint8_t)((b & 0xF) | ((t >> 2) & 3) << 4);
            q[l + 64] = (uint8_t)((a >> 4) | ((t >> 4) & 3) << 4);
            q[l + 96] = (uint8_t)((b >> 4) | ((t >> 6) & 3) << 4);
        }
}

static void na_cpu_q6k_pack(const uint8_t *q, uint8_t *blk)
{
    int h, l;
    for (h = 0; h < 2; h++, q += 128)
        for (l = 0; l < 32; l++) {
            blk[64 * h + l] = (uint8_t)((q[l] & 0xF) | (q[l + 64] & 0xF) << 4);
            blk[64 * h + l + 32] = (uint8_t)((q[l + 32] & 0xF) | (q[l + 96] & 0xF) << 4);
            blk[128 + 32 * h + l] = (uint8_t)(q[l] >> 4 | (q[l + 32] >> 4) << 2 |
                                              (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
        }
}

static void na_cpu_q6kx8_put(uint8_t *o, int i, const uint8_t *blk)
{
    uint8_t q[NA_QK_K];
    int s, j;
    na_cpu_q6k_codes(blk, q);
    memcpy(o + 2 * i, blk + 208, 2);
    for (s = 0; s < 16; s++) {
        uint8_t *p = o + 144 + 96 * s + 4 * i;
        const uint8_t *c = q + 16 * s;
        o[16 + 8 * s + i] = blk[192 + s];
        for (j = 0; j < 4; j++) {
            p[j] = (uint8_t)((c[j] & 0xF) | (c[4 + j] & 0xF) << 4);
            p[32 + j] = (uint8_t)((c[8 + j] & 0xF) | (c[12 + j] & 0xF) << 4);
            p[64 + j] = (uint8_t)(c[j] >> 4 | (c[4 + j] >> 4) << 2 | (c[8 + j] >> 4) << 4 |
                                  (c[12 + j] >> 4) << 6);
        }
    }
}

static void na_cpu_q6kx8_get(const uint8_t *o, int i, uint8_t *blk)
{
    uint8_t q[NA_QK_K];
    int s, j;
    memcpy(blk + 208, o + 2 * i, 2);
    for (s = 0; s < 16; s++) {
        const uint8_t *p = o + 144 + 96 * s + 4 * i;
        uint8_t *c = q + 16 * s;
        blk[192 + s] = o[16 + 8 * s + i];
        for (j = 0; j < 4; j++) {
            c[j] = (uint8_t)((p[j] & 0xF) | (p[64 + j] & 3) << 4);
            c[4 + j] = (uint8_t)((p[j] >> 4) | ((p[64 + j] >> 2) & 3) << 4);
            c[8 + j] = (uint8_t)((p[32 + j] & 0xF) | ((p[64 + j] >> 4) & 3) << 4);
            c[12 + j] = (uint8_t)((p[32 + j] >> 4) | (p[64 + j] >> 6) << 4);
        }
    }
    na_cpu_q6k_pack(q, blk);
}

/* A layout in groups of 8 rows: the weight type it takes, the bytes of a
 * group's block (8 model blocks, reordered) and its put / get. */
typedef struct {
    int        layout;
    na_dtype_t dtype;
    size_t     gb;
    void (*put)(uint8_t *o, int i, const uint8_t *blk);
    void (*get)(const uint8_t *o, int i, uint8_t *blk);
} na_cpu_x8_t;

static const na_cpu_x8_t na_cpu_x8s[] = {
    { NA_LAYOUT_Q4X8, NA_DTYPE_Q4_0, NA_Q4X8_GROUP_BLOCK, na_cpu_q4x8_put, na_cpu_q4x8_get },
    { NA_LAYOUT_Q4KX8, NA_DTYPE_Q4_K, NA_Q4KX8_GROUP_BLOCK, na_cpu_q4kx8_put, na_cpu_q4kx8_get },
    { NA_LAYOUT_Q5KX8, NA_DTYPE_Q5_K, NA_Q5KX8_GROUP_BLOCK, na_cpu_q5kx8_put, na_cpu_q5kx8_get },
    { NA_LAYOUT_Q6KX8, NA_DTYPE_Q6_K, NA_Q6KX8_GROUP_BLOCK, na_cpu_q6kx8_put, na_cpu_q6kx8_get },
    { NA_LAYOUT_Q8X8, NA_DTYPE_Q8_0, NA_Q8X8_GROUP_BLOCK, na_cpu_q8x8_put, na_cpu_q8x8_get },
};
#define NA_CPU_N_X8 (sizeof(na_cpu_x8s) / sizeof(na_cpu_x8s[0]))

/* The groups-of-8 description of a layout (dt < 0) or of weight type dt;
 * NULL for none. */
static const na_cpu_x8_t *na_cpu_x8(int layout, int dt)
{
    size_t i;
    for (i = 0; i < NA_CPU_N_X8; i++)
        if (dt < 0 ? na_cpu_x8s[i].layout == layout : (int)na_cpu_x8s[i].dtype == dt)
            return &na_cpu_x8s[i];
    return NULL;
}

/* The layout t gets on this backend. */
static int na_cpu_layout(const na_kernels_t *k, const na_tensor_t *t)
{
    const na_cpu_state_t *s = k->priv;
    const na_cpu_x8_t *x = na_cpu_x8(0, (int)t->dtype);

    if ((size_t)t->rows * (size_t)t->cols < NA_CPU_PACK_MIN)
        return NA_LAYOUT_ROWS;
    if (x != NULL && t->rows % 8 == 0)
        return x->layout;
    if (t->dtype == NA_DTYPE_BF16 && t->rows % 32 == 0 && t->cols % 2 == 0 &&
        s->gemm_bf16 != NULL)
        return NA_LAYOUT_BF16X32;
    return NA_LAYOUT_ROWS;
}

/* A na_cpu_pack_x8: src (rows x nblk row-major blocks) into dst. */
typedef struct {
    const na_cpu_x8_t *x;
    uint8_t           *dst;
    const uint8_t     *src;
    int                rows, nblk;
} na_cpu_pack_job_t;

/* Pool task t's share of the groups of a na_cpu_pack_x8 (each thread also
 * takes its own first touch of the copy's fresh pages). */
static void na_cpu_pack_x8_task(void *ctx, int t, int n_tasks)
{
    const na_cpu_pack_job_t *j = ctx;
    const na_cpu_x8_t *x = j->x;
    const size_t bb = na_dtype_block_bytes(x->dtype), rb = (size_t)j->nblk * bb;
    const int ng = j->rows / 8, g1 = (int)((long)ng * (t + 1) / n_tasks);
    int g, b, i;

    for (g = (int)((long)ng * t / n_tasks); g < g1; g++)
        for (b = 0; b < j->nblk; b++)
            for (i = 0; i < 8; i++)
                x->put(j->dst + ((size_t)g * j->nblk + b) * x->gb, i,
                       j->src + (size_t)(8 * g + i) * rb + (size_t)b * bb);
}

/* src (rows x nblk row-major blocks of x->dtype) into dst in groups of 8,
 * the groups split over the backend's threads. */
static void na_cpu_pack_x8(na_kernels_t *k, const na_cpu_x8_t *x, uint8_t *dst,
                           const uint8_t *src, int rows, int nblk)
{
    na_cpu_state_t *s = k->priv;
    na_cpu_pack_job_t j = { x, dst, src, rows, nblk };
    int tasks = 4 * k->n_threads;

    if (tasks > rows / 8)
        tasks = rows / 8;
    na_cpu_pool_run(s->pool, na_cpu_pack_x8_task, &j, tasks > 0 ? tasks : 1);
}

/* The word of NA_LAYOUT_BF16X32 holding row r's k pair p (npanel panels,
 * npair pairs). */
static size_t na_cpu_bf16x32_word(int r, int p, int npanel, int npair)
{
    const int g = r / 32, c = g / 4, nc = npanel - 4 * c < 4 ? npanel - 4 * c : 4;
    return (size_t)4 * c * npair * 32 + ((size_t)p * nc + (size_t)(g % 4)) * 32 +
           (size_t)(r % 32);
}

/* src (rows x cols row-major bf16) into dst in NA_LAYOUT_BF16X32. */
static void na_cpu_pack_bf16x32(uint32_t *dst, const uint8_t *src, int rows, int cols)
{
    const int npair = cols / 2, npanel = rows / 32;
    int r, p;

    for (r = 0; r < rows; r++) {
        const uint8_t *row = src + (size_t)r * (size_t)cols * 2;
        for (p = 0; p < npair; p++)
            memcpy(dst + na_cpu_bf16x32_word(r, p, npanel, npair), row + 4 * (size_t)p, 4);
    }
}

/* Elements [c0, c0 + n) of row `row` of a packed weight t as f32, n the
 * return: a block of the type (32 or 256) in the groups of 8, 32 (or the
 * rest of the row) in the bf16 panels. */
static int na_cpu_packed_block(const na_tensor_t *t, int row, int c0, float out[NA_QK_K])
{
    const na_cpu_x8_t *x = na_cpu_x8(t->layout, -1);
    int j;

    if (x != NULL) {
        const int n = na_dtype_block(x->dtype), nblk = t->cols / n;
        uint8_t blk[NA_X8_BLOCK_MAX];
        x->get((const uint8_t *)t->data + ((size_t)(row / 8) * nblk + c0 / n) * x->gb, row % 8,
               blk);
        na_ref_dequant_row(x->dtype, blk, out, n);
        return n;
    }
    for (j = 0; j < 32 && c0 + j < t->cols; j++) {      /* NA_LAYOUT_BF16X32 */
        const int c = c0 + j;
        const uint16_t *pw = (const uint16_t *)t->data +
                             2 * na_cpu_bf16x32_word(row, c / 2, t->rows / 32, t->cols / 2) +
                             (size_t)(c % 2);
        out[j] = na_bf16_to_f32(*pw);
    }
    return j;
}

/* See cpu.h. */
void na_cpu_packed_row(const na_tensor_t *t, int row, float *out)
{
    float blk[NA_QK_K];
    int c0, n;

    for (c0 = 0; c0 < t->cols; c0 += n) {
        n = na_cpu_packed_block(t, row, c0, blk);
        memcpy(out + c0, blk, sizeof(float) * (size_t)n);
    }
}

/* See cpu.h. */
void na_cpu_packed_matmul_f32(float *y, const float *x, const na_tensor_t *w, int batch)
{
    float wf[NA_QK_K];
    int r, c0, n, i, j;

    for (i = 0; i < batch; i++)
        for (r = 0; r < w->rows; r++)
            y[(size_t)i * w->rows + r] = 0.0f;
    for (r = 0; r < w->rows; r++)
        for (c0 = 0; c0 < w->cols; c0 += n) {
            n = na_cpu_packed_block(w, r, c0, wf);
            for (i = 0; i < batch; i++) {
                const float *xb = x + (size_t)i * w->cols + c0;
                float acc = 0.0f;
                for (j = 0; j < n; j++)
                    acc += wf[j] * xb[j];
                y[(size_t)i * w->rows + r] += acc;
            }
        }
}

/* Memory for a copy of `bytes`: from 1 MiB on in 2 MiB units with the
 * transparent huge pages asked for (madvise: advice, harmless if refused),
 * as a stream through the whole weight misses the TLB every 4 KiB page
 * otherwise; smaller copies 64-byte aligned. */
static void *na_cpu_pack_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    void *p = NULL;

    if (bytes < huge / 2)
        return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    bytes = (bytes + huge - 1) / huge * huge;
    if (posix_memalign(&p, huge, bytes) != 0)
        return NULL;
    (void)madvise(p, bytes, MADV_HUGEPAGE);
    return p;
}

/* ops->place: the mmap wrapped (na_khost_place); a weight that packs gets
 * its copy in the layout of na_cpu_layout, made once per source. */
na_status_t na_cpu_place(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w)
{
    na_cpu_state_t *s = k->priv;
    na_status_t st = na_khost_place(k, t, w);
    const na_cpu_x8_t *x;
    int layout, i;
    size_t bytes;
    void *copy;

    if (st != NA_OK || (layout = na_cpu_layout(k, t)) == NA_LAYOUT_ROWS)
        return st;
    x = na_cpu_x8(layout, -1);
    bytes = w->buf.size;                        /* groups: Q4KX8 and Q5KX8 grow */
    if (x != NULL)
        bytes = (size_t)(t->rows / 8) * (size_t)(t->cols / na_dtype_block(t->dtype)) * x->gb;
    for (i = 0; i < s->n_packed; i++)
        if (s->packed[i].src == t->data && s->packed[i].bytes == bytes)
            break;
    if (i == s->n_packed) {
        na_cpu_packed_t *v = na_grow(s->packed, &s->cap_packed, (size_t)s->n_packed + 1,
                                     sizeof(*v), 8);
        if (v == NULL)
            return na_err(NA_ERR_NOMEM, "kernels cpu place: out of memory");
        s->packed = v;
        copy = na_cpu_pack_alloc(bytes);
        if (copy == NULL)
            return na_err(NA_ERR_NOMEM, "kernels cpu place: out of memory for the %d x %d %s "
                          "weight's reordered copy (%zu bytes)", t->rows, t->cols,
                          na_dtype_name(t->dtype), bytes);
        if (x != NULL)
            na_cpu_pack_x8(k, x, copy, t->data, t->rows, t->cols / na_dtype_block(t->dtype));
        else
            na_cpu_pack_bf16x32(copy, t->data, t->rows, t->cols);
        s->packed[s->n_packed++] = (na_cpu_packed_t){ t->data, bytes, copy, 0 };
    }
    s->packed[i].refs++;
    w->layout = layout;
    w->buf = na_kbuf_host(s->packed[i].copy, bytes);
    return NA_OK;
}

/* ops->unplace: a copy is freed with its last placement. */
void na_cpu_unplace(na_kernels_t *k, na_kweight_t *w)
{
    na_cpu_state_t *s = k->priv;
    int i;

    for (i = 0; w->layout != NA_LAYOUT_ROWS && i < s->n_packed; i++) {
        if (s->packed[i].copy != w->buf.host)
            continue;
        if (--s->packed[i].refs == 0) {
            free(s->packed[i].copy);
            s->packed[i] = s->packed[--s->n_packed];
        }
        break;
    }
    na_khost_unplace(k, w);
}

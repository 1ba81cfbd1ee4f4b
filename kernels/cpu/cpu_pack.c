/* kernels/cpu/cpu_pack.c — the cpu backend's weight placement: most weights
 * are read where the model maps them (na_khost_place, no copy); a Q4_0
 * weight of rows % 8 == 0 is copied once into NA_LAYOUT_Q4X8, the order its
 * matmul reads (kernels/cpu/cpu_quant.c, "Q4_0 in groups of 8 rows").
 *
 * NA_LAYOUT_Q4X8: rows r = 8g..8g+7 form group g; for each group, block b
 * of its 8 rows is 144 bytes (8 x 18, the bytes of those 8 Q4_0 blocks):
 *   bytes   0..15   the 8 rows' f16 scales d, row 8g + i at 2i;
 *   bytes  16..143  4 chunks of 32: chunk c holds bytes 4c..4c+3 of each
 *                   row's 16 code bytes, row 8g + i at 16 + 32c + 4i.
 * So one 32-byte load gives 8 rows x 4 code bytes, one 32-bit lane a row:
 * the kernel sums each row's block exactly in its lane and needs no
 * horizontal sum (llama.cpp's repacked Q4_0 rests on the same idea).
 * Groups follow each other: group g, block b at (g * nblk + b) * 144.
 *
 * A tensor placed twice (the tied output and embedding) shares one copy,
 * reference-counted by its source address, as the cuda backend shares
 * its uploads. */
#include <stdlib.h>
#include <string.h>

#include "common/grow.h"
#include "kernels/cpu/cpu.h"
#include "kernels/host/host.h"
#include "kernels/ref/ref.h"

#define NA_Q4X8_BLOCK 18            /* bytes of a Q4_0 block: f16 d, 16 code bytes */
#define NA_Q4X8_GROUP_BLOCK 144     /* 8 rows x 18 bytes */

/* Weights with fewer elements stay row-major: the copy would not pay. */
#define NA_CPU_PACK_MIN ((size_t)1 << 16)

static int na_cpu_packs(const na_tensor_t *t)
{
    return t->dtype == NA_DTYPE_Q4_0 && t->rows % 8 == 0 &&
           (size_t)t->rows * (size_t)t->cols >= NA_CPU_PACK_MIN;
}

/* src (rows x nblk row-major Q4_0 blocks) into dst in NA_LAYOUT_Q4X8. */
static void na_cpu_pack_q4x8(uint8_t *dst, const uint8_t *src, int rows, int nblk)
{
    const size_t rb = (size_t)nblk * NA_Q4X8_BLOCK;
    int g, b, i, c;

    for (g = 0; g < rows / 8; g++)
        for (b = 0; b < nblk; b++) {
            uint8_t *o = dst + ((size_t)g * nblk + b) * NA_Q4X8_GROUP_BLOCK;
            for (i = 0; i < 8; i++) {
                const uint8_t *blk = src + (size_t)(8 * g + i) * rb + (size_t)b * NA_Q4X8_BLOCK;
                memcpy(o + 2 * i, blk, 2);
                for (c = 0; c < 4; c++)
                    memcpy(o + 16 + 32 * c + 4 * i, blk + 2 + 4 * c, 4);
            }
        }
}

/* See cpu.h. */
void na_cpu_q4x8_block(const na_tensor_t *t, int row, int b, uint8_t out[NA_Q4X8_BLOCK])
{
    const int nblk = t->cols / 32, i = row % 8;
    const uint8_t *o = (const uint8_t *)t->data +
                       ((size_t)(row / 8) * nblk + b) * NA_Q4X8_GROUP_BLOCK;
    int c;

    memcpy(out, o + 2 * i, 2);
    for (c = 0; c < 4; c++)
        memcpy(out + 2 + 4 * c, o + 16 + 32 * c + 4 * i, 4);
}

/* See cpu.h. */
void na_cpu_q4x8_row(const na_tensor_t *t, int row, float *out)
{
    uint8_t blk[NA_Q4X8_BLOCK];
    int b;

    for (b = 0; b < t->cols / 32; b++) {
        na_cpu_q4x8_block(t, row, b, blk);
        na_ref_dequant_row(NA_DTYPE_Q4_0, blk, out + 32 * (size_t)b, 32);
    }
}

/* ops->place: the mmap wrapped (na_khost_place); a Q4_0 weight that packs
 * gets its NA_LAYOUT_Q4X8 copy, made once per source. */
na_status_t na_cpu_place(na_kernels_t *k, const na_tensor_t *t, na_kweight_t *w)
{
    na_cpu_state_t *s = k->priv;
    na_status_t st = na_khost_place(k, t, w);
    size_t bytes;
    uint8_t *copy;
    int i;

    if (st != NA_OK || !na_cpu_packs(t))
        return st;
    bytes = w->buf.size;
    for (i = 0; i < s->n_packed; i++)
        if (s->packed[i].src == t->data && s->packed[i].bytes == bytes)
            break;
    if (i == s->n_packed) {
        na_cpu_packed_t *v = na_grow(s->packed, &s->cap_packed, (size_t)s->n_packed + 1,
                                     sizeof(*v), 8);
        if (v == NULL)
            return na_err(NA_ERR_NOMEM, "kernels cpu place: out of memory");
        s->packed = v;
        copy = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (copy == NULL)
            return na_err(NA_ERR_NOMEM, "kernels cpu place: out of memory for the %d x %d "
                          "Q4_0 weight's interleaved copy (%zu bytes)", t->rows, t->cols, bytes);
        na_cpu_pack_q4x8(copy, t->data, t->rows, t->cols / 32);
        s->packed[s->n_packed++] = (na_cpu_packed_t){ t->data, bytes, copy, 0 };
    }
    s->packed[i].refs++;
    w->layout = NA_LAYOUT_Q4X8;
    w->buf = na_kbuf_host(s->packed[i].copy, bytes);
    return NA_OK;
}

/* ops->unplace: a packed copy is freed with its last placement. */
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

/* See cpu.h. */
void na_cpu_q4x8_matmul_f32(float *y, const float *x, const na_tensor_t *w, int batch)
{
    uint8_t blk[NA_Q4X8_BLOCK];
    float wf[32];
    int r, b, i, j;

    for (i = 0; i < batch; i++)
        for (r = 0; r < w->rows; r++)
            y[(size_t)i * w->rows + r] = 0.0f;
    for (r = 0; r < w->rows; r++)
        for (b = 0; b < w->cols / 32; b++) {
            na_cpu_q4x8_block(w, r, b, blk);
            na_ref_dequant_row(NA_DTYPE_Q4_0, blk, wf, 32);
            for (i = 0; i < batch; i++) {
                const float *xb = x + (size_t)i * w->cols + 32 * (size_t)b;
                float acc = 0.0f;
                for (j = 0; j < 32; j++)
                    acc += wf[j] * xb[j];
                y[(size_t)i * w->rows + r] += acc;
            }
        }
}

/* kernels/cuda/cuda_qpack.c — the device layout of quantised weights: GGML's
 * interleaved blocks split into one 16-byte aligned array per field
 * (cuda_launch.h). Plain host C: place() repacks before the upload. */
#include <string.h>

#include "common/dtype.h"
#include "kernels/cuda/cuda_launch.h"
#include "kernels/ref/ref.h"

/* A type's fields: bytes a block in each array, and their offsets in GGML's
 * block (-1: absent). sc_src: the K-quants' scale bytes (12 packed for
 * Q4_K/Q5_K, 16 int8 for Q6_K). */
typedef struct {
    int qs, qh, sc, m;          /* bytes a block (m: 2 or 0) */
    int qs_src, qh_src, sc_src, d_src, m_src;
} na_cu_qfields_t;

static int na_cu_qfields(int dtype, na_cu_qfields_t *f)
{
    static const na_cu_qfields_t tab[] = {
        /*            qs   qh  sc  m  qs@  qh@  sc@  d@   m@ */
        /* Q8_0 */ {  32,   0,  0, 0,   2,  -1,  -1,   0,  -1 },
        /* Q4_0 */ {  16,   0,  0, 0,   2,  -1,  -1,   0,  -1 },
        /* Q4_1 */ {  16,   0,  0, 2,   4,  -1,  -1,   0,   2 },
        /* Q5_0 */ {  16,   4,  0, 0,   6,   2,  -1,   0,  -1 },
        /* Q5_1 */ {  16,   4,  0, 2,   8,   4,  -1,   0,   2 },
        /* Q4_K */ { 128,   0, 16, 2,  16,  -1,   4,   0,   2 },
        /* Q5_K */ { 128,  32, 16, 2,  48,  16,   4,   0,   2 },
        /* Q6_K */ { 128,  64, 16, 0,   0, 128, 192, 208,  -1 },
    };
    if (dtype < NA_DTYPE_Q8_0 || dtype >= NA_DTYPE_COUNT)
        return -1;
    *f = tab[dtype - NA_DTYPE_Q8_0];
    return 0;
}

static size_t na_cu_al16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Offsets of the arrays qs, qh, sc, d, m and the total. */
static size_t na_cu_qoffs(const na_cu_qfields_t *f, size_t nb, size_t off[5])
{
    size_t o = 0;
    off[0] = o; o += na_cu_al16((size_t)f->qs * nb);
    off[1] = o; o += na_cu_al16((size_t)f->qh * nb);
    off[2] = o; o += na_cu_al16((size_t)f->sc * nb);
    off[3] = o; o += na_cu_al16(2 * nb);
    off[4] = o; o += na_cu_al16((size_t)f->m * nb);
    return o;
}

size_t na_cu_qpack_bytes(int dtype, size_t n_blocks)
{
    na_cu_qfields_t f;
    size_t off[5];
    if (na_cu_qfields(dtype, &f) != 0)
        return 0;
    return na_cu_qoffs(&f, n_blocks, off);
}

void na_cu_qpack_view(int dtype, const void *base, size_t n_blocks, na_cu_qw_t *qw)
{
    const unsigned char *p = base;
    na_cu_qfields_t f;
    size_t off[5];
    memset(qw, 0, sizeof(*qw));
    if (na_cu_qfields(dtype, &f) != 0)
        return;
    na_cu_qoffs(&f, n_blocks, off);
    qw->qs = p + off[0];
    qw->qh = f.qh ? p + off[1] : NULL;
    qw->sc = f.sc ? p + off[2] : NULL;
    qw->d = (const unsigned short *)(const void *)(p + off[3]);
    qw->m = f.m ? (const unsigned short *)(const void *)(p + off[4]) : NULL;
}

size_t na_cu_qpack_field(int dtype, int field, size_t n_blocks, size_t *off_p)
{
    na_cu_qfields_t f;
    size_t off[5];
    if (na_cu_qfields(dtype, &f) != 0 || field < 0 || field > 4)
        return 0;
    na_cu_qoffs(&f, n_blocks, off);
    *off_p = off[field];
    switch (field) {
    case 0:  return (size_t)f.qs;
    case 1:  return (size_t)f.qh;
    case 2:  return (size_t)f.sc;
    case 3:  return 2;
    default: return (size_t)f.m;
    }
}

void na_cu_qpack_blocks(int dtype, int field, const void *src, size_t b0, size_t nb, void *dst)
{
    const unsigned char *s = src;
    unsigned char *p = dst;
    size_t bb = na_dtype_block_bytes((na_dtype_t)dtype), i;
    na_cu_qfields_t f;
    int j;

    if (na_cu_qfields(dtype, &f) != 0)
        return;
    for (i = 0, s += b0 * bb; i < nb; i++, s += bb) {
        switch (field) {
        case 0:
            memcpy(p + i * (size_t)f.qs, s + f.qs_src, (size_t)f.qs);
            break;
        case 1:
            memcpy(p + i * (size_t)f.qh, s + f.qh_src, (size_t)f.qh);
            break;
        case 2:
            if (dtype == NA_DTYPE_Q6_K) {
                memcpy(p + i * 16, s + f.sc_src, 16);
                break;
            }
            for (j = 0; j < 8; j++) {       /* Q4_K/Q5_K: 8 scales, then 8 mins */
                int sc, m;
                na_ref_k4_scale_min(s + f.sc_src, j, &sc, &m);
                p[i * 16 + (size_t)j] = (unsigned char)sc;
                p[i * 16 + 8 + (size_t)j] = (unsigned char)m;
            }
            break;
        case 3:
            memcpy(p + i * 2, s + f.d_src, 2);
            break;
        default:
            memcpy(p + i * 2, s + f.m_src, 2);
            break;
        }
    }
}

void na_cu_qpack(int dtype, const void *src, size_t n_blocks, void *dst)
{
    size_t off, per;
    int field;

    memset(dst, 0, na_cu_qpack_bytes(dtype, n_blocks));
    for (field = 0; field < 5; field++)
        if ((per = na_cu_qpack_field(dtype, field, n_blocks, &off)) > 0)
            na_cu_qpack_blocks(dtype, field, src, 0, n_blocks, (unsigned char *)dst + off);
}

/* common/dtype.h — element types of weights, activations and KV, and the
 * scalar conversions every module shares (plain C, no intrinsics). */
#ifndef NA_DTYPE_H
#define NA_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    NA_DTYPE_F32  = 0,
    NA_DTYPE_F16  = 1,
    NA_DTYPE_BF16 = 2,
    NA_DTYPE_Q8_0 = 3,   /* GGML Q8_0: blocks of 32 int8 with one f16 scale (34 bytes) */
    /* GGML's other block formats, byte for byte as ggml-common.h lays them
     * out (little-endian, f16 scales); x = the element, q its code:
     *   Q4_0  32 el, 18 B: f16 d, qs[16] (low nibbles: el 0..15, high: 16..31); x = d (q - 8)
     *   Q4_1  32 el, 20 B: f16 d, f16 m, qs[16];                          x = d q + m
     *   Q5_0  32 el, 22 B: f16 d, qh[4] (bit j: 5th bit of el j), qs[16]; x = d (q - 16)
     *   Q5_1  32 el, 24 B: f16 d, f16 m, qh[4], qs[16];                   x = d q + m
     *   Q4_K 256 el, 144 B: f16 d, f16 dmin, scales[12] (8 6-bit scale/min pairs, one per
     *        32 el), qs[128] (64 el per 32 bytes: low nibbles then high);  x = d sc q - dmin m
     *   Q5_K 256 el, 176 B: as Q4_K + qh[32] before qs (bit 2i / 2i+1 of qh[l]: 5th bit of
     *        el 64i + l / 64i + 32 + l)
     *   Q6_K 256 el, 210 B: ql[128], qh[64], int8 scales[16] (one per 16 el), f16 d;
     *        x = d sc (q - 32)
     * The dequantisation and dot products: kernels/ref/ref_quant.c. */
    NA_DTYPE_Q4_0 = 4,
    NA_DTYPE_Q4_1 = 5,
    NA_DTYPE_Q5_0 = 6,
    NA_DTYPE_Q5_1 = 7,
    NA_DTYPE_Q4_K = 8,
    NA_DTYPE_Q5_K = 9,
    NA_DTYPE_Q6_K = 10,
    NA_DTYPE_COUNT
} na_dtype_t;

#define NA_Q8_0_BLOCK      32
#define NA_Q8_0_BLOCK_SIZE 34    /* bytes: f16 scale + 32 x int8 */
#define NA_QK_K            256   /* elements of a K-quant super-block */

/* Static name ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1",
 * "q4_k", "q5_k", "q6_k"); "?" for an invalid value. */
const char *na_dtype_name(na_dtype_t t);
/* Parse a name as above (case-insensitive); -1 on failure. */
int na_dtype_parse(const char *s);
/* Elements per block of type t: 1 (f32, f16, bf16), 32 (Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1), 256 (Q4_K, Q5_K, Q6_K); 0 for an invalid value. A row of a
 * matrix holds whole blocks: its length must be a multiple of this. */
int na_dtype_block(na_dtype_t t);
/* Bytes per block of type t (the element size for f32/f16/bf16); 0 if invalid. */
size_t na_dtype_block_bytes(na_dtype_t t);
/* 1 for the block-quantised types (Q8_0 and the ones after it). */
static inline int na_dtype_is_quant(na_dtype_t t) { return t >= NA_DTYPE_Q8_0 && t < NA_DTYPE_COUNT; }
/* Bytes used by n elements of type t: n / block * block bytes (n must be a
 * multiple of na_dtype_block(t); a partial block counts 0). */
size_t na_dtype_bytes(na_dtype_t t, size_t n);

static inline float na_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp  = (h >> 10) & 0x1fu;
    uint32_t man  = h & 0x3ffu;
    uint32_t bits;
    float f;

    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {                       /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while ((man & 0x400u) == 0) { man <<= 1; exp--; }
            man &= 0x3ffu;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    memcpy(&f, &bits, sizeof(f));
    return f;
}

/* Round to nearest even, like F16C's vcvtps2ph with rounding mode 0. */
static inline uint16_t na_f32_to_f16(float f)
{
    uint32_t x, sign, mant;
    int32_t exp;

    memcpy(&x, &f, sizeof(x));
    sign = (x >> 16) & 0x8000u;
    exp  = (int32_t)((x >> 23) & 0xffu);
    mant = x & 0x7fffffu;
    if (exp == 0xff)                               /* inf / nan */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    exp = exp - 127 + 15;
    if (exp >= 31)                                 /* overflow -> inf */
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {                                /* subnormal or zero */
        uint32_t shift, half, rem, res;
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        shift = (uint32_t)(14 - exp);
        res  = mant >> shift;
        rem  = mant & ((1u << shift) - 1u);
        half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (res & 1u)))
            res++;
        return (uint16_t)(sign | res);
    } else {
        uint32_t res = sign | ((uint32_t)exp << 10) | (mant >> 13);
        uint32_t rem = mant & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (res & 1u)))
            res++;                                 /* may carry into exp: still correct */
        return (uint16_t)res;
    }
}

static inline float na_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline uint16_t na_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)           /* nan stays nan */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);               /* round to nearest even */
    return (uint16_t)(x >> 16);
}

#endif /* NA_DTYPE_H */

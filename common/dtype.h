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
    NA_DTYPE_COUNT
} na_dtype_t;

#define NA_Q8_0_BLOCK      32
#define NA_Q8_0_BLOCK_SIZE 34    /* bytes: f16 scale + 32 x int8 */

/* Static name ("f32", "f16", "bf16", "q8_0"); "?" for an invalid value. */
const char *na_dtype_name(na_dtype_t t);
/* Parse a name as above (case-insensitive); -1 on failure. */
int na_dtype_parse(const char *s);
/* Bytes used by n elements of type t (n must be a multiple of 32 for Q8_0). */
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

/* common/dtype.c — dtype names and sizes. */
#include "dtype.h"

#include <strings.h>

const char *na_dtype_name(na_dtype_t t)
{
    switch (t) {
    case NA_DTYPE_F32:  return "f32";
    case NA_DTYPE_F16:  return "f16";
    case NA_DTYPE_BF16: return "bf16";
    case NA_DTYPE_Q8_0: return "q8_0";
    default:            return "?";
    }
}

int na_dtype_parse(const char *s)
{
    int t;
    for (t = 0; t < NA_DTYPE_COUNT; t++)
        if (!strcasecmp(s, na_dtype_name((na_dtype_t)t)))
            return t;
    return -1;
}

size_t na_dtype_bytes(na_dtype_t t, size_t n)
{
    switch (t) {
    case NA_DTYPE_F32:  return n * 4;
    case NA_DTYPE_F16:
    case NA_DTYPE_BF16: return n * 2;
    case NA_DTYPE_Q8_0: return (n / NA_Q8_0_BLOCK) * NA_Q8_0_BLOCK_SIZE;
    default:            return 0;
    }
}

/* common/dtype.c — dtype names and sizes. */
#include "dtype.h"

#include <strings.h>

static const struct {
    const char *name;
    int         block;          /* elements per block */
    size_t      bytes;          /* bytes per block */
} na_dtypes[NA_DTYPE_COUNT] = {
    [NA_DTYPE_F32]  = { "f32",  1,   4   }, [NA_DTYPE_F16]  = { "f16",  1,   2   },
    [NA_DTYPE_BF16] = { "bf16", 1,   2   }, [NA_DTYPE_Q8_0] = { "q8_0", 32,  34  },
    [NA_DTYPE_Q4_0] = { "q4_0", 32,  18  }, [NA_DTYPE_Q4_1] = { "q4_1", 32,  20  },
    [NA_DTYPE_Q5_0] = { "q5_0", 32,  22  }, [NA_DTYPE_Q5_1] = { "q5_1", 32,  24  },
    [NA_DTYPE_Q4_K] = { "q4_k", 256, 144 }, [NA_DTYPE_Q5_K] = { "q5_k", 256, 176 },
    [NA_DTYPE_Q6_K] = { "q6_k", 256, 210 },
};

const char *na_dtype_name(na_dtype_t t)
{
    return (unsigned)t < NA_DTYPE_COUNT ? na_dtypes[t].name : "?";
}

int na_dtype_parse(const char *s)
{
    int t;
    for (t = 0; t < NA_DTYPE_COUNT; t++)
        if (!strcasecmp(s, na_dtype_name((na_dtype_t)t)))
            return t;
    return -1;
}

int na_dtype_block(na_dtype_t t)
{
    return (unsigned)t < NA_DTYPE_COUNT ? na_dtypes[t].block : 0;
}

size_t na_dtype_block_bytes(na_dtype_t t)
{
    return (unsigned)t < NA_DTYPE_COUNT ? na_dtypes[t].bytes : 0;
}

size_t na_dtype_bytes(na_dtype_t t, size_t n)
{
    if ((unsigned)t >= NA_DTYPE_COUNT)
        return 0;
    return n / (size_t)na_dtypes[t].block * na_dtypes[t].bytes;
}

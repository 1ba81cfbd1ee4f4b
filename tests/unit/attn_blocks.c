/* tests/unit/attn_blocks.c — see attn_blocks.h. */
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"
#include "tests/unit/attn_blocks.h"

const na_dtype_t na_test_kv_dtypes[NA_TEST_KV_DTYPES] = { NA_DTYPE_F32, NA_DTYPE_F16,
                                                          NA_DTYPE_BF16 };

void na_test_blocks_init(na_test_blocks_t *bl, na_dtype_t dt, int ctx, int nkv, int hd, int bt)
{
    const int nb = (ctx + bt - 1) / bt;

    bl->row = (size_t)hd * na_dtype_bytes(dt, 1);
    bl->bt = bt;
    bl->nkv = nkv;
    bl->block_bytes = (size_t)nkv * 2 * bt * bl->row;
    bl->mem = na_test_xmalloc(bl->block_bytes * (size_t)nb);
    memset(bl->mem, 0xff, bl->block_bytes * (size_t)nb);
}

void na_test_blocks_free(na_test_blocks_t *bl)
{
    free(bl->mem);
    bl->mem = NULL;
}

char *na_test_blocks_row(const na_test_blocks_t *bl, int t, int h, int v)
{
    return bl->mem + (size_t)(t / bl->bt) * bl->block_bytes +
           ((size_t)h * 2 * bl->bt + (size_t)v * bl->bt + t % bl->bt) * bl->row;
}

const char *na_test_block_at(void *arg, int b)
{
    const na_test_blocks_t *bl = arg;
    return bl->mem + (size_t)b * bl->block_bytes;
}

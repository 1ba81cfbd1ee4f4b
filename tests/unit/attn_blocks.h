/* tests/unit/attn_blocks.h — the storage node's KV in its block layout, as
 * the exactness tests of its attention build it (test_attn_exact,
 * test_attn_fold_block): per block of bt tokens, for each KV head, bt K rows
 * then bt V rows of head_dim elements (storage-node/attn_fold.h reads them
 * through a block table callback), and the KV dtypes they cover. */
#ifndef NA_TEST_ATTN_BLOCKS_H
#define NA_TEST_ATTN_BLOCKS_H

#include <stddef.h>

#include "common/dtype.h"

/* The KV dtypes of the tests: f32, f16, bf16. */
#define NA_TEST_KV_DTYPES 3
extern const na_dtype_t na_test_kv_dtypes[NA_TEST_KV_DTYPES];

typedef struct {
    char  *mem;
    size_t block_bytes, row;     /* a block's bytes, a row's bytes */
    int    bt, nkv;              /* tokens per block, KV heads */
} na_test_blocks_t;

/* Blocks for ctx tokens of nkv heads of hd elements of dt, in blocks of bt
 * tokens; every row NaN (0xff bytes) until written, so that a row read past
 * its context shows. */
void        na_test_blocks_init(na_test_blocks_t *bl, na_dtype_t dt, int ctx, int nkv, int hd,
                                int bt);
void        na_test_blocks_free(na_test_blocks_t *bl);
/* The row of token t, KV head h: its K row (v = 0) or its V row (v = 1). */
char       *na_test_blocks_row(const na_test_blocks_t *bl, int t, int h, int v);
/* The block table callback of storage-node/attn_fold.h (arg: the blocks). */
const char *na_test_block_at(void *arg, int b);

#endif /* NA_TEST_ATTN_BLOCKS_H */

/* common/kvhash.h — the identity of a prompt's KV blocks for prefix reuse
 * (docs/prefix-reuse.md): a hash chain over the model and the token blocks.
 *
 *   root      = SHA-256("nearattn-kv-prefix-v1", model_fp, block_tokens,
 *                       kv_h0, kv_h1, kv dtype)
 *   key(b)    = SHA-256(key(b-1) or root, the block's block_tokens token ids)
 *
 * so block b's key names every token before its end, the model and the KV
 * heads and dtype it holds. Both sides compute it: the storage node from the
 * token ids of a REQ_OPEN (it never trusts a key it is sent), the compute
 * node to guess which node holds a prompt's prefix (placement). A key is a
 * name, not a proof: the prefix cache also keeps each block's token ids and
 * its parent and compares them on every hit, so even colliding keys never
 * return another prompt's KV. */
#ifndef NA_KVHASH_H
#define NA_KVHASH_H

#include <stdint.h>

#include "common/dtype.h"

#define NA_KVHASH_SIZE 32
#define NA_KVHASH_FP   16

typedef struct {
    uint8_t b[NA_KVHASH_SIZE];
} na_kvhash_t;

/* The chain's root for a model fingerprint and a KV layout. */
void na_kvhash_root(const uint8_t fp[NA_KVHASH_FP], int block_tokens, int kv_h0, int kv_h1,
                    na_dtype_t kv_dtype, na_kvhash_t *out);
/* The key of the block after `parent` holding tokens[0..block_tokens). */
void na_kvhash_next(const na_kvhash_t *parent, const uint32_t *tokens, int block_tokens,
                    na_kvhash_t *out);
/* Keep only the first `bits` bits of h (0 or >= 256: all). A test hook:
 * truncated keys collide, which the prefix cache must survive. */
void na_kvhash_truncate(na_kvhash_t *h, int bits);

#endif /* NA_KVHASH_H */

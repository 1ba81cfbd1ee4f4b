/* common/kvhash.c — the prefix hash chain (kvhash.h). */
#include "common/kvhash.h"

#include <string.h>

#include "common/sha256.h"

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void na_kvhash_root(const uint8_t fp[NA_KVHASH_FP], int block_tokens, int kv_h0, int kv_h1,
                    na_dtype_t kv_dtype, na_kvhash_t *out)
{
    static const char tag[] = "nearattn-kv-prefix-v1";
    uint8_t f[16];
    na_sha256_t s;

    put32(f, (uint32_t)block_tokens);
    put32(f + 4, (uint32_t)kv_h0);
    put32(f + 8, (uint32_t)kv_h1);
    put32(f + 12, (uint32_t)kv_dtype);
    na_sha256_init(&s);
    na_sha256_update(&s, tag, sizeof(tag));
    na_sha256_update(&s, fp, NA_KVHASH_FP);
    na_sha256_update(&s, f, sizeof(f));
    na_sha256_final(&s, out->b);
}

void na_kvhash_next(const na_kvhash_t *parent, const uint32_t *tokens, int block_tokens,
                    na_kvhash_t *out)
{
    uint8_t buf[256];
    na_sha256_t s;
    int i = 0;

    na_sha256_init(&s);
    na_sha256_update(&s, parent->b, NA_KVHASH_SIZE);
    while (i < block_tokens) {          /* little-endian ids, whatever the host */
        int n = 0;
        for (; i < block_tokens && n + 4 <= (int)sizeof(buf); i++, n += 4)
            put32(buf + n, tokens[i]);
        na_sha256_update(&s, buf, (size_t)n);
    }
    na_sha256_final(&s, out->b);
}

void na_kvhash_truncate(na_kvhash_t *h, int bits)
{
    int i;

    if (bits <= 0 || bits >= 8 * NA_KVHASH_SIZE)
        return;
    for (i = 0; i < NA_KVHASH_SIZE; i++) {
        int keep = bits - 8 * i;
        if (keep >= 8)
            continue;
        h->b[i] = keep <= 0 ? 0 : (uint8_t)(h->b[i] & (0xffu << (8 - keep)));
    }
}

/* common/sha256.c — SHA-256 (FIPS 180-4 §6.2) and HMAC-SHA256 (RFC 2104).
 * Written from the specification; checked against the FIPS 180-2 and RFC 4231
 * vectors in tests/unit/test_sha256.c. */
#include "sha256.h"

#include <string.h>

static const uint32_t K256[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

static inline uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* One 64-byte block into the chaining state. */
static void sha256_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64], a, b, c, d, e, f, g, hh, t1, t2;
    int i;

    for (i = 0; i < 16; i++)
        w[i] = load_be32(p + 4 * i);
    for (i = 16; i < 64; i++) {
        uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0]; b = h[1]; c = h[2]; d = h[3]; e = h[4]; f = h[5]; g = h[6]; hh = h[7];
    for (i = 0; i < 64; i++) {
        t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void na_sha256_init(na_sha256_t *s)
{
    static const uint32_t iv[8] = {
        0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
        0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
    };
    memcpy(s->h, iv, sizeof(iv));
    s->total = 0;
    s->used = 0;
}

void na_sha256_update(na_sha256_t *s, const void *data, size_t len)
{
    const uint8_t *p = data;

    s->total += len;
    if (s->used) {
        size_t take = NA_SHA256_BLOCK - s->used;
        if (take > len)
            take = len;
        memcpy(s->buf + s->used, p, take);
        s->used += take; p += take; len -= take;
        if (s->used < NA_SHA256_BLOCK)
            return;
        sha256_block(s->h, s->buf);
        s->used = 0;
    }
    while (len >= NA_SHA256_BLOCK) {
        sha256_block(s->h, p);
        p += NA_SHA256_BLOCK; len -= NA_SHA256_BLOCK;
    }
    if (len) {
        memcpy(s->buf, p, len);
        s->used = len;
    }
}

void na_sha256_final(na_sha256_t *s, uint8_t out[NA_SHA256_SIZE])
{
    uint64_t bits = s->total * 8;
    int i;

    s->buf[s->used++] = 0x80;
    if (s->used > NA_SHA256_BLOCK - 8) {
        memset(s->buf + s->used, 0, NA_SHA256_BLOCK - s->used);
        sha256_block(s->h, s->buf);
        s->used = 0;
    }
    memset(s->buf + s->used, 0, NA_SHA256_BLOCK - 8 - s->used);
    for (i = 0; i < 8; i++)
        s->buf[NA_SHA256_BLOCK - 1 - i] = (uint8_t)(bits >> (8 * i));
    sha256_block(s->h, s->buf);
    for (i = 0; i < 8; i++)
        store_be32(out + 4 * i, s->h[i]);
    na_secure_zero(s, sizeof(*s));
}

void na_sha256(const void *data, size_t len, uint8_t out[NA_SHA256_SIZE])
{
    na_sha256_t s;
    na_sha256_init(&s);
    na_sha256_update(&s, data, len);
    na_sha256_final(&s, out);
}

void na_hmac_sha256_init(na_hmac_sha256_t *h, const void *key, size_t key_len)
{
    uint8_t k[NA_SHA256_BLOCK], pad[NA_SHA256_BLOCK];
    int i;

    memset(k, 0, sizeof(k));
    if (key_len > NA_SHA256_BLOCK)          /* long keys are hashed first */
        na_sha256(key, key_len, k);
    else if (key_len)
        memcpy(k, key, key_len);
    for (i = 0; i < NA_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x36;
    na_sha256_init(&h->inner);
    na_sha256_update(&h->inner, pad, sizeof(pad));
    for (i = 0; i < NA_SHA256_BLOCK; i++)
        pad[i] = k[i] ^ 0x5c;
    na_sha256_init(&h->outer);
    na_sha256_update(&h->outer, pad, sizeof(pad));
    na_secure_zero(k, sizeof(k));
    na_secure_zero(pad, sizeof(pad));
}

void na_hmac_sha256_update(na_hmac_sha256_t *h, const void *data, size_t len)
{
    na_sha256_update(&h->inner, data, len);
}

void na_hmac_sha256_final(na_hmac_sha256_t *h, uint8_t out[NA_SHA256_SIZE])
{
    uint8_t ih[NA_SHA256_SIZE];

    na_sha256_final(&h->inner, ih);
    na_sha256_update(&h->outer, ih, sizeof(ih));
    na_sha256_final(&h->outer, out);
    na_secure_zero(ih, sizeof(ih));
}

void na_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t out[NA_SHA256_SIZE])
{
    na_hmac_sha256_t h;
    na_hmac_sha256_init(&h, key, key_len);
    na_hmac_sha256_update(&h, data, len);
    na_hmac_sha256_final(&h, out);
}

int na_ct_equal(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t diff = 0;
    size_t i;

    for (i = 0; i < n; i++)
        diff |= (uint8_t)(x[i] ^ y[i]);
    return diff == 0;
}

void na_secure_zero(void *p, size_t n)
{
    volatile uint8_t *q = p;
    while (n--)
        *q++ = 0;
}

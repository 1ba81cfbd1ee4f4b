/* common/sha256.h — SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), plain C,
 * used by the wire handshake to prove knowledge of the cluster secret. Not a
 * general crypto library: no hardware acceleration, no streaming HMAC beyond
 * what the handshake needs. */
#ifndef NA_SHA256_H
#define NA_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define NA_SHA256_SIZE   32   /* digest bytes */
#define NA_SHA256_BLOCK  64   /* block bytes */

typedef struct {
    uint32_t h[8];                      /* chaining state */
    uint64_t total;                     /* bytes hashed so far */
    uint8_t  buf[NA_SHA256_BLOCK];      /* partial block */
    size_t   used;                      /* bytes in buf */
} na_sha256_t;

/* Start a digest. Cannot fail. */
void na_sha256_init(na_sha256_t *s);
/* Hash len more bytes (data may be NULL when len == 0). Cannot fail. */
void na_sha256_update(na_sha256_t *s, const void *data, size_t len);
/* Finish and write the 32-byte digest; s is wiped afterwards. */
void na_sha256_final(na_sha256_t *s, uint8_t out[NA_SHA256_SIZE]);
/* One-shot digest of a buffer. */
void na_sha256(const void *data, size_t len, uint8_t out[NA_SHA256_SIZE]);

/* HMAC-SHA256 in three steps, so a message made of several fields need not
 * be concatenated first. */
typedef struct {
    na_sha256_t inner, outer;
} na_hmac_sha256_t;

void na_hmac_sha256_init(na_hmac_sha256_t *h, const void *key, size_t key_len);
void na_hmac_sha256_update(na_hmac_sha256_t *h, const void *data, size_t len);
void na_hmac_sha256_final(na_hmac_sha256_t *h, uint8_t out[NA_SHA256_SIZE]);
/* One-shot HMAC of a buffer. */
void na_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                    uint8_t out[NA_SHA256_SIZE]);

/* Compare n bytes in time independent of where they differ: 1 if equal. */
int  na_ct_equal(const void *a, const void *b, size_t n);
/* Zero n bytes in a way the compiler does not remove. */
void na_secure_zero(void *p, size_t n);

#endif /* NA_SHA256_H */

/* tests/unit/test_sha256.c — SHA-256 against the FIPS 180-2 vectors and
 * HMAC-SHA256 against RFC 4231 test cases 1-7; incremental updates split at
 * every offset give the one-shot digest; constant-time compare. */
#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "tests/testutil.h"

static void hex(const char *s, uint8_t *out, size_t n)
{
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
}

static int digest_is(const uint8_t *d, const char *want_hex, size_t n)
{
    uint8_t want[32];
    hex(want_hex, want, n);
    return memcmp(d, want, n) == 0;
}

static void test_sha256_vectors(void)
{
    uint8_t d[32];
    na_sha256_t s;
    char *big;
    int i;

    na_sha256("", 0, d);
    NA_CHECK(digest_is(d, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 32));
    na_sha256("abc", 3, d);
    NA_CHECK(digest_is(d, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", 32));
    na_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, d);
    NA_CHECK(digest_is(d, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", 32));
    /* one million 'a', fed in uneven pieces */
    big = malloc(1000000);
    NA_CHECK(big != NULL);
    if (!big)
        return;
    memset(big, 'a', 1000000);
    na_sha256_init(&s);
    for (i = 0; i < 1000000;) {
        int n = 1 + (i * 7) % 131;
        if (i + n > 1000000)
            n = 1000000 - i;
        na_sha256_update(&s, big + i, (size_t)n);
        i += n;
    }
    na_sha256_final(&s, d);
    NA_CHECK(digest_is(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", 32));
    free(big);
}

/* Padding edge cases: lengths around 55/56/64 bytes, split at every point. */
static void test_sha256_splits(void)
{
    uint8_t msg[200], one[32], two[32];
    size_t len, cut;
    na_sha256_t s;
    int bad = 0;

    for (len = 0; len < sizeof(msg); len++)
        msg[len] = (uint8_t)(len * 31 + 7);
    for (len = 0; len <= 130; len++) {
        na_sha256(msg, len, one);
        for (cut = 0; cut <= len; cut++) {
            na_sha256_init(&s);
            na_sha256_update(&s, msg, cut);
            na_sha256_update(&s, msg + cut, len - cut);
            na_sha256_final(&s, two);
            bad += memcmp(one, two, 32) != 0;
        }
    }
    NA_CHECK(bad == 0);
}

static void test_hmac_rfc4231(void)
{
    static const char *const data7 =
        "This is a test using a larger than block-size key and a larger than block-size data. "
        "The key needs to be hashed before being used by the HMAC algorithm.";
    uint8_t key[131], data[50], d[32];
    na_hmac_sha256_t h;
    int i;

    memset(key, 0x0b, 20);                                                          /* case 1 */
    na_hmac_sha256(key, 20, "Hi There", 8, d);
    NA_CHECK(digest_is(d, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32));
    na_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, d);              /* case 2 */
    NA_CHECK(digest_is(d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32));
    memset(key, 0xaa, 20);                                                          /* case 3 */
    memset(data, 0xdd, 50);
    na_hmac_sha256(key, 20, data, 50, d);
    NA_CHECK(digest_is(d, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32));
    for (i = 0; i < 25; i++)                                                        /* case 4 */
        key[i] = (uint8_t)(i + 1);
    memset(data, 0xcd, 50);
    na_hmac_sha256(key, 25, data, 50, d);
    NA_CHECK(digest_is(d, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32));
    memset(key, 0x0c, 20);                                                          /* case 5 (128 bits) */
    na_hmac_sha256(key, 20, "Test With Truncation", 20, d);
    NA_CHECK(digest_is(d, "a3b6167473100ee06e0c796c2955552b", 16));
    memset(key, 0xaa, 131);                                                         /* case 6 */
    na_hmac_sha256(key, 131, "Test Using Larger Than Block-Size Key - Hash Key First", 54, d);
    NA_CHECK(digest_is(d, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32));
    na_hmac_sha256_init(&h, key, 131);                                              /* case 7, in pieces */
    na_hmac_sha256_update(&h, data7, 100);
    na_hmac_sha256_update(&h, data7 + 100, strlen(data7) - 100);
    na_hmac_sha256_final(&h, d);
    NA_CHECK(digest_is(d, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32));
}

static void test_ct_equal(void)
{
    uint8_t a[32], b[32];
    int i;
    for (i = 0; i < 32; i++)
        a[i] = b[i] = (uint8_t)i;
    NA_CHECK(na_ct_equal(a, b, 32));
    NA_CHECK(na_ct_equal(a, b, 0));
    for (i = 0; i < 32; i++) {
        b[i] ^= 0x80;
        NA_CHECK(!na_ct_equal(a, b, 32));
        b[i] ^= 0x80;
    }
    na_secure_zero(a, sizeof(a));
    for (i = 0; i < 32; i++)
        NA_CHECK(a[i] == 0);
}

int main(void)
{
    test_sha256_vectors();
    test_sha256_splits();
    test_hmac_rfc4231();
    test_ct_equal();
    return na_test_finish();
}

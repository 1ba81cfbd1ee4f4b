/* common/wire_auth.c — the handshake proofs of common/wire.h (fresh nonces,
 * HMAC-SHA256 over both nonces and names, constant-time verification), the
 * sealing of the ADDR frame that follows AUTH. */
#include "wire_priv.h"

#include <errno.h>
#include <sys/random.h>

#include "common/sha256.h"

na_status_t na_wire_nonce(uint8_t out[NA_WIRE_NONCE_SIZE])
{
    size_t got = 0;

    while (got < NA_WIRE_NONCE_SIZE) {
        ssize_t n = getrandom(out + got, NA_WIRE_NONCE_SIZE - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return na_err(NA_ERR_IO, "getrandom: %s", strerror(errno));
        }
        got += (size_t)n;
    }
    return NA_OK;
}

/* Feed a string as u16 little-endian length + bytes, so that field
 * boundaries are unambiguous ("ab"+"c" differs from "a"+"bc"). */
static void mac_str(na_hmac_sha256_t *h, const char *s)
{
    uint8_t len[2];
    size_t n = strlen(s);
    na_st16(len, (uint16_t)n);
    na_hmac_sha256_update(h, len, 2);
    na_hmac_sha256_update(h, s, n);
}

na_status_t na_wire_auth_compute(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                                 const uint8_t nonce_c[NA_WIRE_NONCE_SIZE], const uint8_t nonce_s[NA_WIRE_NONCE_SIZE],
                                 const char *name_c, const char *name_s, const char *cluster,
                                 uint8_t mac_out[NA_WIRE_MAC_SIZE])
{
    static const char label_c[] = "nearattn-auth-v1 client";
    static const char label_s[] = "nearattn-auth-v1 server";
    na_hmac_sha256_t h;

    if (!secret || secret_len == 0)
        return na_err(NA_ERR_INVALID, "wire auth: empty cluster secret");
    if (side != NA_WIRE_AUTH_CLIENT && side != NA_WIRE_AUTH_SERVER)
        return na_err(NA_ERR_INVALID, "wire auth: side %d is neither client nor server", (int)side);
    if (!nonce_c || !nonce_s || !name_c || !name_s || !cluster)
        return na_err(NA_ERR_INVALID, "wire auth: NULL nonce or name");
    if (strnlen(name_c, NA_WIRE_NAME_MAX) >= NA_WIRE_NAME_MAX ||
        strnlen(name_s, NA_WIRE_NAME_MAX) >= NA_WIRE_NAME_MAX ||
        strnlen(cluster, NA_WIRE_NAME_MAX) >= NA_WIRE_NAME_MAX)
        return na_err(NA_ERR_INVALID, "wire auth: a name is longer than %d characters",
                      NA_WIRE_NAME_MAX - 1);
    na_hmac_sha256_init(&h, secret, secret_len);
    if (side == NA_WIRE_AUTH_CLIENT)
        na_hmac_sha256_update(&h, label_c, sizeof(label_c) - 1);
    else
        na_hmac_sha256_update(&h, label_s, sizeof(label_s) - 1);
    na_hmac_sha256_update(&h, nonce_c, NA_WIRE_NONCE_SIZE);
    na_hmac_sha256_update(&h, nonce_s, NA_WIRE_NONCE_SIZE);
    mac_str(&h, name_c);
    mac_str(&h, name_s);
    mac_str(&h, cluster);
    na_hmac_sha256_final(&h, mac_out);
    na_secure_zero(&h, sizeof(h));
    return NA_OK;
}

na_status_t na_wire_auth_verify(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                                const uint8_t nonce_c[NA_WIRE_NONCE_SIZE], const uint8_t nonce_s[NA_WIRE_NONCE_SIZE],
                                const char *name_c, const char *name_s, const char *cluster,
                                const uint8_t mac[NA_WIRE_MAC_SIZE])
{
    uint8_t want[NA_WIRE_MAC_SIZE];
    na_status_t st;
    int ok;

    st = na_wire_auth_compute(secret, secret_len, side, nonce_c, nonce_s, name_c, name_s,
                              cluster, want);
    if (st)
        return st;
    ok = na_ct_equal(want, mac, NA_WIRE_MAC_SIZE);
    na_secure_zero(want, sizeof(want));
    if (!ok)
        return na_err(NA_ERR_AUTH, "peer %s could not prove the cluster secret",
                      side == NA_WIRE_AUTH_CLIENT ? name_c : name_s);
    return NA_OK;
}

/* ---- the ADDR frame (after AUTH) ----------------------------------------------- */

/* HMAC keyed with the secret, fed label | side | nonce_c | nonce_s: the
 * common prefix of the ADDR keystream and MAC (domain-separated labels). */
static void addr_prefix(na_hmac_sha256_t *h, const uint8_t *secret, size_t secret_len,
                        const char *label, na_wire_auth_side_t side,
                        const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                        const uint8_t nonce_s[NA_WIRE_NONCE_SIZE])
{
    uint8_t sd = (uint8_t)side;
    na_hmac_sha256_init(h, secret, secret_len);
    na_hmac_sha256_update(h, label, strlen(label));
    na_hmac_sha256_update(h, &sd, 1);
    na_hmac_sha256_update(h, nonce_c, NA_WIRE_NONCE_SIZE);
    na_hmac_sha256_update(h, nonce_s, NA_WIRE_NONCE_SIZE);
}

/* XOR body with the keystream: block i = HMAC(prefix("...key") | u32 i). */
static void addr_xor(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                     const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                     const uint8_t nonce_s[NA_WIRE_NONCE_SIZE], uint8_t *body, size_t len)
{
    na_hmac_sha256_t base, h;
    uint8_t ks[NA_SHA256_SIZE], ctr[4];
    size_t off, i;
    uint32_t blk = 0;

    addr_prefix(&base, secret, secret_len, "nearattn-addr-v2 key", side, nonce_c, nonce_s);
    for (off = 0; off < len; off += NA_SHA256_SIZE, blk++) {
        h = base;
        na_st32(ctr, blk);
        na_hmac_sha256_update(&h, ctr, 4);
        na_hmac_sha256_final(&h, ks);
        for (i = 0; i < NA_SHA256_SIZE && off + i < len; i++)
            body[off + i] ^= ks[i];
    }
    na_secure_zero(&base, sizeof(base));
    na_secure_zero(&h, sizeof(h));
    na_secure_zero(ks, sizeof(ks));
}

/* mac = HMAC(prefix("...mac") | u32 len | body as sent). */
static void addr_mac(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                     const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                     const uint8_t nonce_s[NA_WIRE_NONCE_SIZE], const uint8_t *body, size_t len,
                     uint8_t mac_out[NA_WIRE_MAC_SIZE])
{
    na_hmac_sha256_t h;
    uint8_t l[4];

    addr_prefix(&h, secret, secret_len, "nearattn-addr-v2 mac", side, nonce_c, nonce_s);
    na_st32(l, (uint32_t)len);
    na_hmac_sha256_update(&h, l, 4);
    na_hmac_sha256_update(&h, body, len);
    na_hmac_sha256_final(&h, mac_out);
    na_secure_zero(&h, sizeof(h));
}

static na_status_t addr_args(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                             const uint8_t *nonce_c, const uint8_t *nonce_s, const uint8_t *body,
                             size_t len)
{
    if (!secret || secret_len == 0)
        return na_err(NA_ERR_INVALID, "wire addr: empty cluster secret");
    if (side != NA_WIRE_AUTH_CLIENT && side != NA_WIRE_AUTH_SERVER)
        return na_err(NA_ERR_INVALID, "wire addr: side %d is neither client nor server", (int)side);
    if (!nonce_c || !nonce_s || !body)
        return na_err(NA_ERR_INVALID, "wire addr: NULL nonce or body");
    if (len > UINT32_MAX)
        return na_err(NA_ERR_INVALID, "wire addr: body of %zu bytes too long", len);
    return NA_OK;
}

na_status_t na_wire_addr_seal(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                              const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                              const uint8_t nonce_s[NA_WIRE_NONCE_SIZE], uint8_t *body, size_t len,
                              uint8_t mac_out[NA_WIRE_MAC_SIZE])
{
    na_status_t st = addr_args(secret, secret_len, side, nonce_c, nonce_s, body, len);
    if (st)
        return st;
    addr_xor(secret, secret_len, side, nonce_c, nonce_s, body, len);
    addr_mac(secret, secret_len, side, nonce_c, nonce_s, body, len, mac_out);
    return NA_OK;
}

na_status_t na_wire_addr_open(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                              const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                              const uint8_t nonce_s[NA_WIRE_NONCE_SIZE], uint8_t *body, size_t len,
                              const uint8_t mac[NA_WIRE_MAC_SIZE])
{
    uint8_t want[NA_WIRE_MAC_SIZE];
    na_status_t st = addr_args(secret, secret_len, side, nonce_c, nonce_s, body, len);
    int ok;

    if (st)
        return st;
    addr_mac(secret, secret_len, side, nonce_c, nonce_s, body, len, want);
    ok = na_ct_equal(want, mac, NA_WIRE_MAC_SIZE);
    na_secure_zero(want, sizeof(want));
    if (!ok)
        return na_err(NA_ERR_AUTH, "address frame failed its MAC check (altered on the way?)");
    addr_xor(secret, secret_len, side, nonce_c, nonce_s, body, len);
    return NA_OK;
}

/* common/wire.c — wire header, names, the encode /
 * decode dispatch, and the small messages (handshake, heartbeat, request
 * open/release, error, ack, bye). Bulk messages are in common/wire_bulk.c,
 * the handshake proofs and row conversions in common/wire_auth.c. */
#include "wire_priv.h"

#include <inttypes.h>
#include <stdio.h>

_Static_assert(NA_WIRE_HDR_SIZE == 64, "wire header is 64 bytes");
_Static_assert(NA_WIRE_HDR_SIZE % NA_WIRE_ALIGN == 0, "payload starts aligned");
_Static_assert(sizeof(NA_WIRE_MAGIC) - 1 == 4, "magic is 4 bytes");
_Static_assert(NA_WIRE_MSG_COUNT == 21, "update the ops table and names with new types");
_Static_assert(NA_WIRE_MAX_PAYLOAD < (1ull << 32), "offsets in tables are u32");

/* Payload sizes of the fixed-size messages. */
enum {
    HELLO_SIZE     = 8 + NA_WIRE_NONCE_SIZE + 2 * NA_WIRE_NAME_MAX,   /* 168 */
    CHALLENGE_SIZE = HELLO_SIZE + NA_WIRE_MAC_SIZE,                   /* 200 */
    AUTH_SIZE      = NA_WIRE_MAC_SIZE,
    HELLO_OK_SIZE  = 8,
    TEXT_FIXED     = 8,                                               /* REFUSE, BYE */
    HEARTBEAT_SIZE = 16,
    REQ_OPEN_SIZE  = 24,
    REQ_OPEN_PFX   = 24,                                              /* fp, n, rsvd */
    REQ_REL_SIZE   = 8,
    ERROR_FIXED    = 16,
    ACK_SIZE       = 8,
    ACK_PFX_SIZE   = 16,
};
_Static_assert(HELLO_SIZE == 168 && CHALLENGE_SIZE == 200, "handshake sizes");

/* ---- names -------------------------------------------------------------------- */

const char *na_wire_type_name(unsigned type)
{
    return na_wire_name_of(type);
}

const char *na_wire_role_name(unsigned role)
{
    switch (role) {
    case NA_WIRE_ROLE_COMPUTE: return "compute";
    case NA_WIRE_ROLE_STORAGE: return "storage";
    case NA_WIRE_ROLE_TOOL:    return "tool";
    default:                   return "?";
    }
}

const char *na_wire_refuse_name(unsigned reason)
{
    static const char *const names[NA_WIRE_REFUSE_COUNT] = {
        "normal", "version", "auth", "cluster", "role", "busy", "protocol", "shutdown", "name",
        "model",
    };
    return reason < NA_WIRE_REFUSE_COUNT ? names[reason] : "?";
}

/* A node/cluster name in a fixed field of NA_WIRE_NAME_MAX bytes: 1..63 chars
 * of [A-Za-z0-9_.:-], NUL-terminated, zero after the NUL. */
static na_status_t chk_name(na_status_t code, const char *who, const char *field, const char *s)
{
    size_t n = 0, i;

    while (n < NA_WIRE_NAME_MAX && s[n])
        n++;
    if (n == 0 || n >= NA_WIRE_NAME_MAX)
        return na_err(code, "wire %s: field '%s' has length %zu, want 1..%d", who, field,
                      n, NA_WIRE_NAME_MAX - 1);
    for (i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-'))
            return na_err(code, "wire %s: field '%s' has character 0x%02x at %zu (want [A-Za-z0-9_.:-])",
                          who, field, (unsigned)(unsigned char)c, i);
    }
    return NA_OK;
}

/* Text of a REFUSE / ERROR / BYE: printable ASCII. */
static na_status_t chk_text(na_status_t code, const char *who, const char *s, size_t n)
{
    size_t i;
    if (n > NA_WIRE_TEXT_MAX)
        return na_err(code, "wire %s: field 'text_len' = %zu out of range [0, %d]", who, n,
                      NA_WIRE_TEXT_MAX);
    for (i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return na_err(code, "wire %s: field 'text' has byte 0x%02x at %zu (want printable ASCII)",
                          who, (unsigned)(unsigned char)s[i], i);
    return NA_OK;
}

/* ---- header ------------------------------------------------------------------- */

void na_wire_hdr_encode(uint8_t out[NA_WIRE_HDR_SIZE], const na_wire_hdr_t *h)
{
    memset(out, 0, NA_WIRE_HDR_SIZE);
    memcpy(out, NA_WIRE_MAGIC, 4);
    na_st16(out + 4, NA_WIRE_VERSION_MAJOR);
    na_st16(out + 6, NA_WIRE_VERSION_MINOR);
    na_st16(out + 8, h->type);
    na_st16(out + 10, h->flags);
    na_st16(out + 12, NA_WIRE_HDR_SIZE);
    na_st64(out + 16, h->payload_len);
    na_st64(out + 24, h->request_id);
    na_st32(out + 32, h->batch_id);
    na_st32(out + 36, h->layer);
    na_st32(out + 40, h->seq);
    na_st64(out + 48, h->time_ns);
}

na_status_t na_wire_hdr_decode(const void *buf, size_t len, na_wire_hdr_t *h_p)
{
    const uint8_t *p = buf;
    na_wire_hdr_t h;
    na_status_t st;

    if (!p || len < NA_WIRE_HDR_SIZE)
        return na_err(NA_ERR_PROTO, "wire header: %zu bytes, need at least %d", p ? len : 0,
                      NA_WIRE_HDR_SIZE);
    if (memcmp(p, NA_WIRE_MAGIC, 4) != 0)
        return na_err(NA_ERR_PROTO, "wire header: bad magic %02x %02x %02x %02x (want \"NATN\")",
                      p[0], p[1], p[2], p[3]);
    memset(&h, 0, sizeof(h));
    h.ver_major = na_ld16(p + 4);
    h.ver_minor = na_ld16(p + 6);
    if (h.ver_major != NA_WIRE_VERSION_MAJOR)
        return na_err(NA_ERR_VERSION, "wire header: peer speaks protocol version %u.%u, this node %d.%d",
                      h.ver_major, h.ver_minor, NA_WIRE_VERSION_MAJOR, NA_WIRE_VERSION_MINOR);
    h.type        = na_ld16(p + 8);
    h.flags       = na_ld16(p + 10);
    h.hdr_len     = na_ld16(p + 12);
    h.payload_len = na_ld64(p + 16);
    h.request_id  = na_ld64(p + 24);
    h.batch_id    = na_ld32(p + 32);
    h.layer       = na_ld32(p + 36);
    h.seq         = na_ld32(p + 40);
    h.time_ns     = na_ld64(p + 48);
    if (h.hdr_len % NA_WIRE_HDR_SIZE != 0 ||
        (st = na_wire_chk(NA_ERR_PROTO, "header", "hdr_len", h.hdr_len, NA_WIRE_HDR_SIZE,
                          NA_WIRE_HDR_MAX)) != NA_OK)
        return na_err(NA_ERR_PROTO, "wire header: field 'hdr_len' = %u, want a multiple of %d in [%d, %d]",
                      h.hdr_len, NA_WIRE_HDR_SIZE, NA_WIRE_HDR_SIZE, NA_WIRE_HDR_MAX);
    if (len < h.hdr_len)
        return na_err(NA_ERR_PROTO, "wire header: %zu bytes, hdr_len says %u", len, h.hdr_len);
    if ((st = na_wire_chk(NA_ERR_PROTO, "header", "type", h.type, 1, NA_WIRE_MSG_COUNT - 1)) != NA_OK)
        return st;
    if (h.flags & 0x00ffu & ~NA_WIRE_F_KNOWN)
        return na_err(NA_ERR_PROTO, "wire header: field 'flags' = 0x%04x has unknown must-understand bits 0x%02x",
                      h.flags, h.flags & 0x00ffu & ~NA_WIRE_F_KNOWN);
    if ((st = na_wire_chk(NA_ERR_PROTO, "header", "payload_len", h.payload_len, 0,
                          NA_WIRE_MAX_PAYLOAD)) != NA_OK)
        return st;
    *h_p = h;
    return NA_OK;
}

na_status_t na_wire_version_check(uint16_t peer_major, uint16_t peer_minor)
{
    if (peer_major == NA_WIRE_VERSION_MAJOR)
        return NA_OK;
    return na_err(NA_ERR_VERSION, "peer speaks protocol version %u.%u, this node %d.%d (major versions differ)",
                  peer_major, peer_minor, NA_WIRE_VERSION_MAJOR, NA_WIRE_VERSION_MINOR);
}

/* ---- field tables -------------------------------------------------------------- */

/* Copy a message's header ids between the header struct and the message body. */
static void ids_to_hdr(na_wire_hdr_t *h, const void *s, const na_wire_field_t *f, size_t n)
{
    for (; n--; f++)
        na_wire_host_store((uint8_t *)h + f->off, f->bytes, na_wire_host_load((const uint8_t *)s + f->moff, f->msize));
}

static void ids_from_hdr(void *s, const na_wire_hdr_t *h, const na_wire_field_t *f, size_t n)
{
    for (; n--; f++)
        na_wire_host_store((uint8_t *)s + f->moff, f->msize, na_wire_host_load((const uint8_t *)h + f->off, f->bytes));
}

/* ---- HELLO / HELLO_CHALLENGE / AUTH / HELLO_OK -------------------------------- */

static na_status_t hello_check(na_status_t code, const char *who, const na_wire_hello_t *m)
{
    na_status_t st;
    if ((st = na_wire_chk(code, who, "role", m->role, 1, NA_WIRE_ROLE_COUNT - 1)) != NA_OK ||
        (st = chk_name(code, who, "name", m->name)) != NA_OK ||
        (st = chk_name(code, who, "cluster", m->cluster)) != NA_OK)
        return st;
    return NA_OK;
}

static void hello_put(const na_wire_hello_t *m, uint8_t *p)
{
    memcpy(p + 8, m->nonce, NA_WIRE_NONCE_SIZE);
    memcpy(p + 40, m->name, strnlen(m->name, NA_WIRE_NAME_MAX - 1));
    memcpy(p + 104, m->cluster, strnlen(m->cluster, NA_WIRE_NAME_MAX - 1));
}

/* Read a fixed name field: NUL-terminated inside the field, zero after it. */
static na_status_t name_get(const char *who, const char *field, const uint8_t *src, char *dst)
{
    size_t n = strnlen((const char *)src, NA_WIRE_NAME_MAX), i;
    if (n >= NA_WIRE_NAME_MAX)
        return na_err(NA_ERR_PROTO, "wire %s: field '%s' is not NUL-terminated within %d bytes",
                      who, field, NA_WIRE_NAME_MAX);
    for (i = n; i < NA_WIRE_NAME_MAX; i++)
        if (src[i])
            return na_err(NA_ERR_PROTO, "wire %s: field '%s' has non-zero bytes after its end", who, field);
    memcpy(dst, src, NA_WIRE_NAME_MAX);
    return NA_OK;
}

/* The role (read with the fixed fields) first, then the names. */
static na_status_t hello_get(const char *who, const uint8_t *p, na_wire_hello_t *m)
{
    na_status_t st;

    if ((st = na_wire_chk(NA_ERR_PROTO, who, "role", m->role, 1, NA_WIRE_ROLE_COUNT - 1)) != NA_OK)
        return st;
    memcpy(m->nonce, p + 8, NA_WIRE_NONCE_SIZE);
    if ((st = name_get(who, "name", p + 40, m->name)) != NA_OK ||
        (st = name_get(who, "cluster", p + 104, m->cluster)) != NA_OK)
        return st;
    return hello_check(NA_ERR_PROTO, who, m);
}

/* Fixed-size handshake payloads: their readers never need the length, which
 * the decoder checked against the fixed size. */
static na_status_t hello_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    *len_p = HELLO_SIZE;
    return hello_check(NA_ERR_INVALID, "HELLO", &m->u.hello);
}
static void hello_write(const na_wire_msg_t *m, uint8_t *p)
{
    hello_put(&m->u.hello, p);
}
static na_status_t hello_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    (void)len;      /* == HELLO_SIZE, checked by the decoder */
    return hello_get("HELLO", p, &m->u.hello);
}

static na_status_t challenge_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    *len_p = CHALLENGE_SIZE;
    return hello_check(NA_ERR_INVALID, "HELLO_CHALLENGE", &m->u.challenge.hello);
}
static void challenge_write(const na_wire_msg_t *m, uint8_t *p)
{
    hello_put(&m->u.challenge.hello, p);
    memcpy(p + HELLO_SIZE, m->u.challenge.mac, NA_WIRE_MAC_SIZE);
}
static na_status_t challenge_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_status_t st = hello_get("HELLO_CHALLENGE", p, &m->u.challenge.hello);

    (void)len;      /* == CHALLENGE_SIZE, checked by the decoder */
    if (st)
        return st;
    memcpy(m->u.challenge.mac, p + HELLO_SIZE, NA_WIRE_MAC_SIZE);
    return NA_OK;
}

static void auth_write(const na_wire_msg_t *m, uint8_t *p)
{
    memcpy(p, m->u.auth.mac, NA_WIRE_MAC_SIZE);
}
static na_status_t auth_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    (void)len;      /* == AUTH_SIZE, checked by the decoder */
    memcpy(m->u.auth.mac, p, NA_WIRE_MAC_SIZE);
    return NA_OK;
}

/* ---- REFUSE / BYE ----------------------------------------------------------------- */

/* REFUSE and BYE share a body (na_wire_bye_t is na_wire_refuse_msg_t, at the
 * same place in the union); a REFUSE must give a reason, a BYE may give 0. */
static const char *text_who(const na_wire_msg_t *m)
{
    return m->type == NA_WIRE_MSG_BYE ? "BYE" : "REFUSE";
}

static unsigned text_lo(const na_wire_msg_t *m)
{
    return m->type == NA_WIRE_MSG_BYE ? 0 : 1;
}

static na_status_t text_msg_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_refuse_msg_t *r = &m->u.refuse;
    size_t n = strnlen(r->text, NA_WIRE_TEXT_MAX + 1);
    na_status_t st;
    if ((st = na_wire_chk(NA_ERR_INVALID, text_who(m), "reason", r->reason, text_lo(m),
                          NA_WIRE_REFUSE_COUNT - 1)) != NA_OK ||
        (st = chk_text(NA_ERR_INVALID, text_who(m), r->text, n)) != NA_OK)
        return st;
    *len_p = TEXT_FIXED + n;
    return NA_OK;
}

/* The text of REFUSE / BYE / ERROR: its length u16 at len_off, its bytes at text_off. */
static void text_put(uint8_t *p, size_t len_off, size_t text_off, const char *text)
{
    size_t n = strnlen(text, NA_WIRE_TEXT_MAX);
    na_st16(p + len_off, (uint16_t)n);
    memcpy(p + text_off, text, n);
}

static na_status_t text_get(const char *who, const uint8_t *p, uint64_t len, size_t len_off,
                            size_t text_off, char dst[NA_WIRE_TEXT_MAX + 1])
{
    uint16_t n = na_ld16(p + len_off);
    na_status_t st;

    if ((st = na_wire_chk(NA_ERR_PROTO, who, "text_len", n, 0, NA_WIRE_TEXT_MAX)) != NA_OK ||
        (st = na_wire_chk_len(who, len, text_off + (uint64_t)n)) != NA_OK ||
        (st = chk_text(NA_ERR_PROTO, who, (const char *)p + text_off, n)) != NA_OK)
        return st;
    memcpy(dst, p + text_off, n);
    dst[n] = '\0';
    return NA_OK;
}

static void text_msg_write(const na_wire_msg_t *m, uint8_t *p)
{
    text_put(p, 2, TEXT_FIXED, m->u.refuse.text);
}

static na_status_t text_msg_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_status_t st = na_wire_chk(NA_ERR_PROTO, text_who(m), "reason", m->u.refuse.reason, text_lo(m),
                                 NA_WIRE_REFUSE_COUNT - 1);
    return st ? st : text_get(text_who(m), p, len, 2, TEXT_FIXED, m->u.refuse.text);
}

/* ---- REQ_OPEN / REQ_RELEASE -------------------------------------------------------- */

static na_status_t req_open_check(na_status_t code, const na_wire_msg_t *m)
{
    const na_wire_req_open_t *r = &m->u.req_open;
    const na_wire_range_t range[] = {
        { "request_id", r->request_id, 1, UINT64_MAX }, { "max_tokens", r->max_tokens, 1, NA_WIRE_MAX_POS },
        { "n_layers", r->n_layers, 1, NA_WIRE_MAX_LAYERS }, { "kv_h0", r->kv_h0, 0, NA_WIRE_MAX_KV_HEADS - 1 },
        { "kv_h1", r->kv_h1, (uint64_t)r->kv_h0 + 1, NA_WIRE_MAX_KV_HEADS },
        { "head_dim", r->head_dim, 1, NA_WIRE_MAX_HEAD_DIM }, { "q_per_kv", r->q_per_kv, 1, NA_WIRE_MAX_Q_PER_KV },
    };
    size_t es;
    na_status_t st = na_wire_chk_all(code, "REQ_OPEN", range, NA_WIRE_N(range));
    if (st == NA_OK && r->n_prefix != 0)
        st = na_wire_chk(code, "REQ_OPEN", "n_prefix", r->n_prefix, 1,
                         r->max_tokens < NA_WIRE_MAX_TOKENS ? r->max_tokens : NA_WIRE_MAX_TOKENS);
    if (st == NA_OK)
        st = na_wire_chk(code, "REQ_OPEN", "n_prompt", r->n_prompt, 0, r->max_tokens);
    return st ? st : na_wire_chk_dtype(code, "REQ_OPEN", "dtype", (uint64_t)r->dtype, &es);
}

static na_status_t req_open_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_req_open_t *r = &m->u.req_open;

    if (r->n_prefix == 0) {
        *len_p = REQ_OPEN_SIZE;
        return NA_OK;
    }
    if (r->prefix == NULL)
        return na_err(NA_ERR_INVALID, "wire REQ_OPEN: %u prefix tokens but no array", r->n_prefix);
    *len_p = REQ_OPEN_SIZE + REQ_OPEN_PFX + 4ull * r->n_prefix;
    return NA_OK;
}

static void req_open_write(const na_wire_msg_t *m, uint8_t *p)
{
    const na_wire_req_open_t *r = &m->u.req_open;
    const uint32_t *t = r->prefix;
    uint32_t i;

    if (r->n_prefix == 0)
        return;
    na_st16(p + 18, 1);                 /* sections: the prefix section follows */
    p += REQ_OPEN_SIZE;
    memcpy(p, r->model_fp, NA_WIRE_FP_SIZE);
    na_st32(p + 16, r->n_prefix);
    na_st32(p + 20, 0);
    for (i = 0; i < r->n_prefix; i++)
        na_st32(p + REQ_OPEN_PFX + 4u * i, t[i]);
}

static na_status_t req_open_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_req_open_t *r = &m->u.req_open;
    uint32_t n;
    na_status_t st;

    if ((st = na_wire_chk(NA_ERR_PROTO, "REQ_OPEN", "sections", na_ld16(p + 18), 0, 1)) != NA_OK)
        return st;
    if (na_ld16(p + 18) == 0)
        return na_wire_chk_len("REQ_OPEN", len, REQ_OPEN_SIZE);
    if ((st = na_wire_chk_min("REQ_OPEN", len, REQ_OPEN_SIZE + REQ_OPEN_PFX)) != NA_OK)
        return st;
    p += REQ_OPEN_SIZE;
    n = na_ld32(p + 16);
    if ((st = na_wire_chk(NA_ERR_PROTO, "REQ_OPEN", "n_prefix", n, 1, NA_WIRE_MAX_TOKENS)) != NA_OK ||
        (st = na_wire_chk_len("REQ_OPEN", len, REQ_OPEN_SIZE + REQ_OPEN_PFX + 4ull * n)) != NA_OK ||
        (st = na_wire_chk_pad("REQ_OPEN", p, 20, 24)) != NA_OK)
        return st;
    memcpy(r->model_fp, p, NA_WIRE_FP_SIZE);
    r->n_prefix = n;
    r->prefix = p + REQ_OPEN_PFX;
    return NA_OK;
}

uint32_t na_wire_req_open_token(const na_wire_req_open_t *o, uint32_t i)
{
    return na_ld32((const uint8_t *)o->prefix + 4u * i);
}

static na_status_t req_release_check(na_status_t code, const na_wire_msg_t *m)
{
    na_status_t st = na_wire_chk(code, "REQ_RELEASE", "request_id", m->u.req_release.request_id,
                                 1, UINT64_MAX);
    return st ? st : na_wire_chk_s(code, "REQ_RELEASE", "status", m->u.req_release.status, -255, 0);
}

/* ---- ERROR / ACK ------------------------------------------------------------------- */

static na_status_t error_check(na_status_t code, const na_wire_msg_t *m)
{
    const na_wire_error_t *e = &m->u.error;
    na_status_t st;
    if ((st = na_wire_chk_s(code, "ERROR", "status", e->status, -255, -1)) != NA_OK ||
        (st = na_wire_chk(code, "ERROR", "about_type", e->about_type, 0, NA_WIRE_MSG_COUNT - 1)) != NA_OK)
        return st;
    return chk_text(code, "ERROR", e->text, strnlen(e->text, NA_WIRE_TEXT_MAX + 1));
}
static na_status_t error_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    *len_p = ERROR_FIXED + strnlen(m->u.error.text, NA_WIRE_TEXT_MAX + 1);
    return NA_OK;
}
static void error_write(const na_wire_msg_t *m, uint8_t *p)
{
    text_put(p, 6, ERROR_FIXED, m->u.error.text);
}
static na_status_t error_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    return text_get("ERROR", p, len, 6, ERROR_FIXED, m->u.error.text);
}

static na_status_t ack_check(na_status_t code, const na_wire_msg_t *m)
{
    na_status_t st = na_wire_chk(code, "ACK", "about_type", m->u.ack.about_type, 1,
                                 NA_WIRE_MSG_COUNT - 1);
    if (st == NA_OK && m->u.ack.prefix_tokens != 0)
        st = na_wire_chk(code, "ACK", "prefix_tokens", m->u.ack.prefix_tokens, 1, NA_WIRE_MAX_POS);
    return st;
}
static na_status_t ack_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    *len_p = m->u.ack.prefix_tokens ? ACK_PFX_SIZE : ACK_SIZE;
    return NA_OK;
}
static void ack_write(const na_wire_msg_t *m, uint8_t *p)
{
    if (m->u.ack.prefix_tokens) {
        na_st16(p + 2, 1);              /* sections: the prefix count follows */
        na_st32(p + 8, m->u.ack.prefix_tokens);
        na_st32(p + 12, 0);
    }
}
static na_status_t ack_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_status_t st;

    if ((st = na_wire_chk(NA_ERR_PROTO, "ACK", "sections", na_ld16(p + 2), 0, 1)) != NA_OK)
        return st;
    if (na_ld16(p + 2) == 0)
        return na_wire_chk_len("ACK", len, ACK_SIZE);
    if ((st = na_wire_chk_len("ACK", len, ACK_PFX_SIZE)) != NA_OK ||
        (st = na_wire_chk_pad("ACK", p, 12, 16)) != NA_OK)
        return st;
    m->u.ack.prefix_tokens = na_ld32(p + 8);
    if (m->u.ack.prefix_tokens == 0)
        return na_err(NA_ERR_PROTO, "wire ACK: a prefix section with prefix_tokens 0");
    return NA_OK;
}

/* ---- dispatch ---------------------------------------------------------------------- */

#define F NA_WIRE_FIELD
static const na_wire_field_t hello_f[] = { F(0, 2, na_wire_hello_t, role) };
static const na_wire_field_t hello_ids[] = {
    NA_WIRE_ID(ver_major, na_wire_hello_t, ver_major), NA_WIRE_ID(ver_minor, na_wire_hello_t, ver_minor),
};
static const na_wire_field_t hello_ok_f[] = { F(0, 4, na_wire_hello_ok_t, heartbeat_ms) };
static const na_wire_field_t refuse_f[] = { F(0, 2, na_wire_refuse_msg_t, reason) };
static const na_wire_field_t heartbeat_f[] = {
    F(0, 8, na_wire_heartbeat_t, send_ns), F(8, 8, na_wire_heartbeat_t, echo_ns),
};
static const na_wire_field_t req_open_f[] = {
    F(0, 4, na_wire_req_open_t, max_tokens), F(4, 4, na_wire_req_open_t, n_layers),
    F(8, 2, na_wire_req_open_t, kv_h0), F(10, 2, na_wire_req_open_t, kv_h1),
    F(12, 2, na_wire_req_open_t, head_dim), F(14, 2, na_wire_req_open_t, q_per_kv),
    F(16, 2, na_wire_req_open_t, dtype), F(20, 4, na_wire_req_open_t, n_prompt),
};
static const na_wire_field_t req_open_ids[] = { NA_WIRE_ID(request_id, na_wire_req_open_t, request_id) };
static const na_wire_field_t req_rel_f[] = { F(0, 4, na_wire_req_release_t, status) };
static const na_wire_field_t req_rel_ids[] = { NA_WIRE_ID(request_id, na_wire_req_release_t, request_id) };
static const na_wire_field_t error_f[] = {
    F(0, 4, na_wire_error_t, status), F(4, 2, na_wire_error_t, about_type),
    F(8, 4, na_wire_error_t, about_seq),
};
static const na_wire_field_t error_ids[] = {
    NA_WIRE_ID(request_id, na_wire_error_t, request_id), NA_WIRE_ID(batch_id, na_wire_error_t, batch_id),
    NA_WIRE_ID(layer, na_wire_error_t, layer),
};
static const na_wire_field_t ack_f[] = { F(0, 2, na_wire_ack_t, about_type), F(4, 4, na_wire_ack_t, about_seq) };
static const na_wire_field_t ack_ids[] = { NA_WIRE_ID(request_id, na_wire_ack_t, request_id) };
#undef F
_Static_assert(offsetof(na_wire_challenge_t, hello) == 0, "a challenge starts with its hello");

/* name, fixed size, exact, fields, ids, then the hooks check / size / write / read */
#define T(a) a, NA_WIRE_N(a)
static const na_wire_ops_t ops_hello     = { "HELLO", HELLO_SIZE, 1, T(hello_f), T(hello_ids), NULL,
                                             hello_size, hello_write, hello_read };
static const na_wire_ops_t ops_challenge = { "HELLO_CHALLENGE", CHALLENGE_SIZE, 1, T(hello_f), T(hello_ids),
                                             NULL, challenge_size, challenge_write, challenge_read };
static const na_wire_ops_t ops_auth      = { "AUTH", AUTH_SIZE, 1, NULL, 0, NULL, 0, NULL, NULL,
                                             auth_write, auth_read };
static const na_wire_ops_t ops_hello_ok  = { "HELLO_OK", HELLO_OK_SIZE, 1, T(hello_ok_f), NULL, 0, NULL,
                                             NULL, NULL, NULL };
static const na_wire_ops_t ops_refuse    = { "REFUSE", TEXT_FIXED, 0, T(refuse_f), NULL, 0, NULL,
                                             text_msg_size, text_msg_write, text_msg_read };
static const na_wire_ops_t ops_heartbeat = { "HEARTBEAT", HEARTBEAT_SIZE, 1, T(heartbeat_f), NULL, 0, NULL,
                                             NULL, NULL, NULL };
static const na_wire_ops_t ops_req_open  = { "REQ_OPEN", REQ_OPEN_SIZE, 0, T(req_open_f), T(req_open_ids),
                                             req_open_check, req_open_size, req_open_write,
                                             req_open_read };
static const na_wire_ops_t ops_req_rel   = { "REQ_RELEASE", REQ_REL_SIZE, 1, T(req_rel_f), T(req_rel_ids),
                                             req_release_check, NULL, NULL, NULL };
static const na_wire_ops_t ops_stats_req = { "STATS_REQ", 0, 1, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL };
static const na_wire_ops_t ops_error     = { "ERROR", ERROR_FIXED, 0, T(error_f), T(error_ids),
                                             error_check, error_size, error_write, error_read };
static const na_wire_ops_t ops_bye       = { "BYE", TEXT_FIXED, 0, T(refuse_f), NULL, 0, NULL,
                                             text_msg_size, text_msg_write, text_msg_read };
static const na_wire_ops_t ops_ack       = { "ACK", ACK_SIZE, 0, T(ack_f), T(ack_ids), ack_check,
                                             ack_size, ack_write, ack_read };
#undef T

static const na_wire_ops_t *const ops_table[NA_WIRE_MSG_COUNT] = {
    [NA_WIRE_MSG_HELLO]           = &ops_hello,
    [NA_WIRE_MSG_HELLO_CHALLENGE] = &ops_challenge,
    [NA_WIRE_MSG_AUTH]            = &ops_auth,
    [NA_WIRE_MSG_HELLO_OK]        = &ops_hello_ok,
    [NA_WIRE_MSG_REFUSE]          = &ops_refuse,
    [NA_WIRE_MSG_HEARTBEAT]       = &ops_heartbeat,
    [NA_WIRE_MSG_REQ_OPEN]        = &ops_req_open,
    [NA_WIRE_MSG_REQ_RELEASE]     = &ops_req_rel,
    [NA_WIRE_MSG_PREFILL_KV]      = &na_wire_ops_kv_prefill,
    [NA_WIRE_MSG_DECODE_ATTN]     = &na_wire_ops_attn,
    [NA_WIRE_MSG_ATTN_OUT]        = &na_wire_ops_attn_out,
    [NA_WIRE_MSG_KV_FETCH]        = &na_wire_ops_kv_fetch,
    [NA_WIRE_MSG_KV_DATA]         = &na_wire_ops_kv_data,
    [NA_WIRE_MSG_STATS_REQ]       = &ops_stats_req,
    [NA_WIRE_MSG_STATS]           = &na_wire_ops_stats,
    [NA_WIRE_MSG_ERROR]           = &ops_error,
    [NA_WIRE_MSG_BYE]             = &ops_bye,
    [NA_WIRE_MSG_ECHO]            = &na_wire_ops_echo,
    [NA_WIRE_MSG_ACK]             = &ops_ack,
    [NA_WIRE_MSG_BATCH_CTX]       = &na_wire_ops_ctx,
};

/* The ops of a message about to be encoded, or an NA_ERR_INVALID. */
static na_status_t enc_ops(const na_wire_msg_t *m, const na_wire_ops_t **ops_p, uint64_t *plen_p)
{
    const na_wire_ops_t *ops = NULL;
    na_status_t st;

    if (!m || (unsigned)m->type == 0 || (unsigned)m->type >= NA_WIRE_MSG_COUNT)
        return na_err(NA_ERR_INVALID, "wire encode: message type %d out of range [1, %d]",
                      m ? (int)m->type : -1, NA_WIRE_MSG_COUNT - 1);
    if (m->flags & 0x00ffu & ~NA_WIRE_F_KNOWN)
        return na_err(NA_ERR_INVALID, "wire %s: flags 0x%04x has unknown must-understand bits",
                      na_wire_type_name(m->type), m->flags);
    ops = ops_table[m->type];
    *plen_p = ops->fixed;
    if ((ops->check && (st = ops->check(NA_ERR_INVALID, m)) != NA_OK) ||
        (ops->size && (st = ops->size(m, plen_p)) != NA_OK))
        return st;
    if (*plen_p > NA_WIRE_MAX_PAYLOAD)
        return na_err(NA_ERR_INVALID, "wire %s: payload of %" PRIu64 " bytes exceeds the limit %llu",
                      ops->name, *plen_p, NA_WIRE_MAX_PAYLOAD);
    *ops_p = ops;
    return NA_OK;
}

na_status_t na_wire_msg_size(const na_wire_msg_t *m, size_t *size_p)
{
    const na_wire_ops_t *ops = NULL;
    uint64_t plen = 0;
    na_status_t st = enc_ops(m, &ops, &plen);
    if (st)
        return st;
    *size_p = (size_t)(NA_WIRE_HDR_SIZE + plen);
    return NA_OK;
}

na_status_t na_wire_encode(const na_wire_msg_t *m, void *buf, size_t cap, size_t *len_p)
{
    const na_wire_ops_t *ops = NULL;
    na_wire_hdr_t h;
    uint64_t plen = 0;
    uint8_t *p = buf;
    na_status_t st = enc_ops(m, &ops, &plen);

    if (st)
        return st;
    if (!p || cap < NA_WIRE_HDR_SIZE + plen)
        return na_err(NA_ERR_NOSPACE, "wire %s: needs %" PRIu64 " bytes, buffer has %zu",
                      ops->name, NA_WIRE_HDR_SIZE + plen, p ? cap : 0);
    memset(&h, 0, sizeof(h));
    h.type = (uint16_t)m->type;
    h.flags = m->flags;
    h.seq = m->seq;
    h.time_ns = m->time_ns;
    h.payload_len = plen;
    ids_to_hdr(&h, &m->u, ops->ids, ops->n_ids);
    memset(p + NA_WIRE_HDR_SIZE, 0, ops->fixed);
    na_wire_put(p + NA_WIRE_HDR_SIZE, &m->u, ops->fields, ops->n_fields);
    if (ops->write)
        ops->write(m, p + NA_WIRE_HDR_SIZE);
    na_wire_hdr_encode(p, &h);
    *len_p = (size_t)(NA_WIRE_HDR_SIZE + plen);
    return NA_OK;
}

na_status_t na_wire_decode(const na_wire_hdr_t *h, const void *payload, size_t payload_len,
                           na_wire_msg_t *m_p)
{
    const na_wire_ops_t *ops = NULL;
    const uint8_t *p = payload ? payload : (const void *)"";
    na_wire_msg_t m;
    na_status_t st;

    if (!h || h->type == 0 || h->type >= NA_WIRE_MSG_COUNT)
        return na_err(NA_ERR_PROTO, "wire: message type %d out of range [1, %d]",
                      h ? (int)h->type : -1, NA_WIRE_MSG_COUNT - 1);
    ops = ops_table[h->type];
    if (h->payload_len > NA_WIRE_MAX_PAYLOAD || payload_len != h->payload_len)
        return na_err(NA_ERR_PROTO, "wire %s: %zu payload bytes arrived, header says %" PRIu64
                      " (limit %llu)", ops->name, payload_len, h->payload_len, NA_WIRE_MAX_PAYLOAD);
    if (!payload && payload_len)
        return na_err(NA_ERR_INVALID, "wire %s: NULL payload", ops->name);
    if ((st = (ops->exact ? na_wire_chk_len : na_wire_chk_min)(ops->name, payload_len, ops->fixed)) != NA_OK)
        return st;
    memset(&m, 0, sizeof(m));
    m.type = (na_wire_type_t)h->type;
    m.flags = h->flags;
    m.seq = h->seq;
    m.time_ns = h->time_ns;
    na_wire_get(&m.u, p, ops->fields, ops->n_fields);
    ids_from_hdr(&m.u, h, ops->ids, ops->n_ids);
    if ((ops->read && (st = ops->read(p, payload_len, &m)) != NA_OK) ||
        (ops->check && (st = ops->check(NA_ERR_PROTO, &m)) != NA_OK))
        return st;
    *m_p = m;
    return NA_OK;
}

na_status_t na_wire_decode_buf(const void *buf, size_t len, na_wire_hdr_t *h_p, na_wire_msg_t *m_p)
{
    na_wire_hdr_t h;
    na_status_t st = na_wire_hdr_decode(buf, len, &h);

    if (st)
        return st;
    if ((uint64_t)len - h.hdr_len != h.payload_len)
        return na_err(NA_ERR_PROTO, "wire %s: message of %zu bytes, header says %u + %" PRIu64,
                      na_wire_type_name(h.type), len, h.hdr_len, h.payload_len);
    if ((st = na_wire_decode(&h, (const uint8_t *)buf + h.hdr_len, len - h.hdr_len, m_p)) != NA_OK)
        return st;
    if (h_p)
        *h_p = h;
    return NA_OK;
}

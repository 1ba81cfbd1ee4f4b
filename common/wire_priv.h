/* common/wire_priv.h — private to common/wire*.c: little-endian byte access,
 * the per-message-type operations table, the shared range checks and field
 * tables (static inline: the primitives under wire.c and wire_bulk.c). */
#ifndef NA_WIRE_PRIV_H
#define NA_WIRE_PRIV_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/wire.h"

/* ---- little-endian load/store (no host-endian assumptions) ---------------- */

static inline uint16_t na_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t na_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t na_ld64(const uint8_t *p) { return na_ld32(p) | ((uint64_t)na_ld32(p + 4) << 32); }
static inline void na_st16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static inline void na_st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static inline void na_st64(uint8_t *p, uint64_t v) { na_st32(p, (uint32_t)v); na_st32(p + 4, (uint32_t)(v >> 32)); }
static inline uint32_t na_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float    na_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint64_t na_wire_align_up(uint64_t n)
{
    return (n + (NA_WIRE_ALIGN - 1)) & ~(uint64_t)(NA_WIRE_ALIGN - 1);
}

/* ---- names -------------------------------------------------------------------- */

/* The message type's name ("?" past the last); na_wire_type_name is this. */
static inline const char *na_wire_name_of(unsigned type)
{
    static const char *const names[NA_WIRE_MSG_COUNT] = {
        "INVALID", "HELLO", "HELLO_CHALLENGE", "AUTH", "HELLO_OK", "REFUSE", "HEARTBEAT",
        "REQ_OPEN", "REQ_RELEASE", "PREFILL_KV", "DECODE_ATTN", "ATTN_OUT", "KV_FETCH",
        "KV_DATA", "STATS_REQ", "STATS", "ERROR", "BYE", "ECHO", "ACK", "BATCH_CTX",
    };
    return type < NA_WIRE_MSG_COUNT ? names[type] : "?";
}

/* ---- checks: code is NA_ERR_INVALID when encoding, NA_ERR_PROTO when
 * decoding; who is the message name. Each returns NA_OK or records a message
 * "wire WHO: field 'F' = V out of range [LO, HI]". The primitives below are
 * static inline so that wire.c (the dispatch) and wire_bulk.c (the bulk
 * messages) share them without calling each other: wire.c is the top,
 * wire_bulk.c below it (docs/architecture.md, "Layers inside a module"). -- */

/* Same as na_wire_chk for field "ARRAY[i].F" ("F" when array is NULL). */
static inline na_status_t na_wire_chk_i(na_status_t code, const char *who, const char *array,
                                        uint32_t i, const char *field,
                                        uint64_t v, uint64_t lo, uint64_t hi)
{
    char name[96];
    if (v >= lo && v <= hi)
        return NA_OK;
    if (array)
        snprintf(name, sizeof(name), "%s[%" PRIu32 "].%s", array, i, field);
    return na_err(code, "wire %s: field '%s' = %" PRIu64 " out of range [%" PRIu64 ", %" PRIu64 "]",
                  who, array ? name : field, v, lo, hi);
}

static inline na_status_t na_wire_chk(na_status_t code, const char *who, const char *field,
                                      uint64_t v, uint64_t lo, uint64_t hi)
{
    return na_wire_chk_i(code, who, NULL, 0, field, v, lo, hi);
}

/* na_wire_chk over a table of fields, in order: the first failure. */
typedef struct {
    const char *field;
    uint64_t v, lo, hi;
} na_wire_range_t;

static inline na_status_t na_wire_chk_all(na_status_t code, const char *who,
                                          const na_wire_range_t *r, size_t n)
{
    na_status_t st = NA_OK;
    for (; n-- && st == NA_OK; r++)
        st = na_wire_chk(code, who, r->field, r->v, r->lo, r->hi);
    return st;
}

/* Signed variant. */
static inline na_status_t na_wire_chk_s(na_status_t code, const char *who, const char *field,
                                        int64_t v, int64_t lo, int64_t hi)
{
    return v >= lo && v <= hi ? NA_OK
         : na_err(code, "wire %s: field '%s' = %" PRId64 " out of range [%" PRId64 ", %" PRId64 "]",
                  who, field, v, lo, hi);
}

/* payload_len must equal want. */
static inline na_status_t na_wire_chk_len(const char *who, uint64_t have, uint64_t want)
{
    if (have == want)
        return NA_OK;
    return na_err(NA_ERR_PROTO, "wire %s: payload_len = %" PRIu64 ", the fields imply %" PRIu64,
                  who, have, want);
}

/* payload_len must be at least want (the fixed part). */
static inline na_status_t na_wire_chk_min(const char *who, uint64_t have, uint64_t want)
{
    if (have >= want)
        return NA_OK;
    return na_err(NA_ERR_PROTO, "wire %s: payload_len = %" PRIu64
                  " is shorter than the fixed part (%" PRIu64 " bytes)", who, have, want);
}

/* Row dtype: f32/f16/bf16 -> element size, else error (and 0). */
static inline na_status_t na_wire_chk_dtype(na_status_t code, const char *who, const char *field,
                                            uint64_t v, size_t *esize_p)
{
    switch (v) {
    case NA_DTYPE_F32:  *esize_p = 4; return NA_OK;
    case NA_DTYPE_F16:
    case NA_DTYPE_BF16: *esize_p = 2; return NA_OK;
    default:
        *esize_p = 0;
        return na_err(code, "wire %s: field '%s' = %" PRIu64 " is not a row dtype (f32=%d, f16=%d, bf16=%d)",
                      who, field, v, NA_DTYPE_F32, NA_DTYPE_F16, NA_DTYPE_BF16);
    }
}

/* Bytes [from, to) of p must be zero (padding). */
static inline na_status_t na_wire_chk_pad(const char *who, const uint8_t *p, uint64_t from, uint64_t to)
{
    uint64_t i;
    for (i = from; i < to; i++)
        if (p[i])
            return na_err(NA_ERR_PROTO, "wire %s: padding byte at payload offset %" PRIu64 " is not zero",
                          who, i);
    return NA_OK;
}

/* ---- field tables ------------------------------------------------------------
 * One description of a fixed layout serves the encoder and the decoder: a
 * little-endian field of `bytes` (2, 4 or 8) at payload offset `off`, mirrored
 * by the struct member of `msize` bytes at `moff` (an integer or enum, copied
 * by value; signed ones as their two's-complement bits). The same table type
 * names a message's header ids: then `off` is the member's offset in
 * na_wire_hdr_t and `bytes` its size. */
typedef struct {
    uint16_t off;
    uint8_t  bytes, msize;
    uint16_t moff;
} na_wire_field_t;

#define NA_WIRE_FIELD(off, bytes, type, member) \
    { (off), (bytes), (uint8_t)sizeof(((type *)0)->member), (uint16_t)offsetof(type, member) }
#define NA_WIRE_ID(hmember, type, member) \
    NA_WIRE_FIELD(offsetof(na_wire_hdr_t, hmember), sizeof(((na_wire_hdr_t *)0)->hmember), type, member)
#define NA_WIRE_N(table) (sizeof(table) / sizeof((table)[0]))

/* A host integer of size bytes at src (any alignment), widened to 64 bits. */
static inline uint64_t na_wire_host_load(const uint8_t *src, unsigned size)
{
    uint64_t v8; uint32_t v4; uint16_t v2;
    switch (size) {
    case 8: memcpy(&v8, src, 8); return v8;
    case 4: memcpy(&v4, src, 4); return v4;
    case 2: memcpy(&v2, src, 2); return v2;
    default: return *src;
    }
}

static inline void na_wire_host_store(uint8_t *dst, unsigned size, uint64_t v)
{
    uint32_t v4 = (uint32_t)v;
    uint16_t v2 = (uint16_t)v;
    switch (size) {
    case 8: memcpy(dst, &v, 8); break;
    case 4: memcpy(dst, &v4, 4); break;
    case 2: memcpy(dst, &v2, 2); break;
    default: *dst = (uint8_t)v; break;
    }
}

/* Write the n fields of s described by f into the payload p, or read them back. */
static inline void na_wire_put(uint8_t *p, const void *s, const na_wire_field_t *f, size_t n)
{
    size_t i, b;
    for (; n--; f++) {
        uint64_t v = na_wire_host_load((const uint8_t *)s + f->moff, f->msize);
        for (b = 0, i = f->off; b < f->bytes; b++, i++)
            p[i] = (uint8_t)(v >> (8 * b));
    }
}

static inline void na_wire_get(void *s, const uint8_t *p, const na_wire_field_t *f, size_t n)
{
    size_t b;
    for (; n--; f++) {
        uint64_t v = 0;
        for (b = 0; b < f->bytes; b++)
            v |= (uint64_t)p[f->off + b] << (8 * b);
        na_wire_host_store((uint8_t *)s + f->moff, f->msize, v);
    }
}

/* Row i of a message's table of n rows (NA_ERR_RANGE naming `who` and `what`
 * when i >= n). When the message was built for encoding, arr holds the rows:
 * row i is copied to *row_p (size bytes); when arr is NULL the caller reads
 * it from the payload. */
static inline na_status_t na_wire_row(const char *who, const char *what, uint32_t i, uint32_t n,
                                      const void *arr, size_t size, void *row_p)
{
    if (i >= n)
        return na_err(NA_ERR_RANGE, "wire %s: %s %u of %u", who, what, i, n);
    if (arr)
        memcpy(row_p, (const uint8_t *)arr + (size_t)i * size, size);
    return NA_OK;
}

/* ---- per-type operations (wire.c holds the table, wire_bulk.c the bulk
 * messages' entries: wire.c reads them, they call nothing in wire.c) ------- */

/* Encoding runs check, size, then zeroes the fixed part, writes `fields` and
 * the header `ids`, then write. Decoding checks the payload length against
 * `fixed` (equal when `exact`, else at least), reads `fields` and `ids`, then
 * runs read and check. Every hook is optional. */
typedef struct {
    const char *name;
    uint32_t fixed;                          /* bytes of the fixed part */
    int      exact;                          /* the payload is the fixed part alone */
    const na_wire_field_t *fields;           /* the fixed part's fields */
    size_t   n_fields;
    const na_wire_field_t *ids;              /* the message's ids in the header */
    size_t   n_ids;
    /* Validate m's fields (code NA_ERR_INVALID when encoding, PROTO decoding). */
    na_status_t (*check)(na_status_t code, const na_wire_msg_t *m);
    /* Validate the variable part of m and compute the payload size (NULL: fixed). */
    na_status_t (*size)(const na_wire_msg_t *m, uint64_t *len_p);
    /* Write what follows the fixed part (len from size()). */
    void (*write)(const na_wire_msg_t *m, uint8_t *p);
    /* Validate and read a payload of len bytes past its fixed part. */
    na_status_t (*read)(const uint8_t *p, uint64_t len, na_wire_msg_t *m);
} na_wire_ops_t;

/* Bulk messages (wire_bulk.c). */
extern const na_wire_ops_t na_wire_ops_kv_prefill, na_wire_ops_kv_data, na_wire_ops_kv_fetch,
                           na_wire_ops_attn, na_wire_ops_attn_out, na_wire_ops_stats,
                           na_wire_ops_echo, na_wire_ops_ctx;

#endif /* NA_WIRE_PRIV_H */

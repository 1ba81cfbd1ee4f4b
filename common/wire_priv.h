/* common/wire_priv.h — private to common/wire*.c: little-endian byte access,
 * the per-message-type operations table and the shared range checks. */
#ifndef NA_WIRE_PRIV_H
#define NA_WIRE_PRIV_H

#include <stdint.h>
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

/* ---- checks: code is NA_ERR_INVALID when encoding, NA_ERR_PROTO when
 * decoding; who is the message name. Each returns NA_OK or records a message
 * "wire WHO: field 'F' = V out of range [LO, HI]". ------------------------------ */

na_status_t na_wire_chk(na_status_t code, const char *who, const char *field,
                        uint64_t v, uint64_t lo, uint64_t hi);
/* Same for field "ARRAY[i].F". */
na_status_t na_wire_chk_i(na_status_t code, const char *who, const char *array, uint32_t i,
                          const char *field, uint64_t v, uint64_t lo, uint64_t hi);
/* Signed variant. */
na_status_t na_wire_chk_s(na_status_t code, const char *who, const char *field,
                          int64_t v, int64_t lo, int64_t hi);
/* payload_len must equal want. */
na_status_t na_wire_chk_len(const char *who, uint64_t have, uint64_t want);
/* payload_len must be at least want (the fixed part). */
na_status_t na_wire_chk_min(const char *who, uint64_t have, uint64_t want);
/* Row dtype: f32/f16/bf16 -> element size, else error. */
na_status_t na_wire_chk_dtype(na_status_t code, const char *who, const char *field,
                              uint64_t v, size_t *esize_p);
/* Bytes [from, to) of p must be zero (padding). */
na_status_t na_wire_chk_pad(const char *who, const uint8_t *p, uint64_t from, uint64_t to);

/* ---- per-type operations (wire.c holds the table) --------------------------- */

typedef struct {
    const char *name;
    /* Validate m (NA_ERR_INVALID) and compute its payload size. */
    na_status_t (*size)(const na_wire_msg_t *m, uint64_t *len_p);
    /* Write the payload (len from size()) and the ids into h. */
    void (*write)(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p);
    /* Validate and read a payload of len bytes (== h->payload_len). */
    na_status_t (*read)(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m);
} na_wire_ops_t;

/* Bulk messages (wire_bulk.c). */
extern const na_wire_ops_t na_wire_ops_kv_prefill, na_wire_ops_kv_data, na_wire_ops_kv_fetch,
                           na_wire_ops_attn, na_wire_ops_attn_out, na_wire_ops_stats,
                           na_wire_ops_echo, na_wire_ops_ctx;

#endif /* NA_WIRE_PRIV_H */

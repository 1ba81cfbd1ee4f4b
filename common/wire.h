/* common/wire.h — the nearattn wire protocol: one fixed header, one message
 * type enum, one struct per message, an encoder and a validating decoder.
 *
 * Framing (every message; all integers little-endian, fixed width; floats are
 * IEEE-754 binary32 bit patterns sent as u32):
 *
 *   0        4        6        8        10       12       14       16
 *   +--------+--------+--------+--------+--------+--------+--------+
 *   | magic "NATN"    | ver    | ver    | type   | flags  | hdr_len| rsvd0  |
 *   |                 | major  | minor  |        |        | (=64)  |        |
 *   +-----------------+--------+--------+--------+--------+--------+--------+
 *  16 | payload_len (u64)            24 | request_id (u64)                  |
 *  32 | batch_id (u32) 36 | layer(u32) 40 | seq (u32)  44 | rsvd1 (u32)     |
 *  48 | time_ns (u64, sender clock)  56 | rsvd2 (u64)                       |
 *  64 +-------------------------------------------------------------------+
 *     | payload: payload_len bytes, laid out per message type (below)     |
 *     +-------------------------------------------------------------------+
 *
 * - hdr_len is a multiple of 64 in [64, 256]; this version writes 64 and
 *   reads the first 64 bytes (a later minor version may append fields; the
 *   payload always starts at hdr_len). Reserved fields are sent as 0 and
 *   ignored on receipt.
 * - Versions: a peer with another MAJOR version is refused at HELLO
 *   (REFUSE reason NA_WIRE_REFUSE_VERSION) and na_wire_hdr_decode() of any
 *   other message returns NA_ERR_VERSION; another MINOR version is accepted.
 * - Flags bits 0..7 must be understood (an unknown one is NA_ERR_PROTO); bits
 *   8..15 are hints a receiver may ignore.
 * - Inside payloads, bulk row sections (K, V, q, o ...) start at offsets that
 *   are multiples of 64 (NA_WIRE_ALIGN) from the payload start; padding bytes
 *   are zero. A payload received into a 64-byte-aligned buffer therefore gives
 *   aligned row views. Decoders never require alignment: views are `const void *`;
 *   read them with na_wire_rows_to_f32() (memcpy-safe) or check
 *   na_wire_aligned() before casting.
 * - payload_len must equal exactly what the message's fields imply, and is at
 *   most NA_WIRE_MAX_PAYLOAD.
 * - Row elements (f32 / f16 / bf16) are little-endian IEEE; encoders copy
 *   rows verbatim, which is right on the little-endian hosts nearattn builds
 *   for (common/wire_bulk.c refuses to compile on a big-endian one).
 *
 * Decoders validate every length, count, enum and range against the header and
 * the limits below before anything is used, and return NA_ERR_PROTO with a
 * message naming the message and field ("wire DECODE_ATTN: entries[3].kv_h1 =
 * 300 out of range [1, 256]"). A receiver drops the connection (not the
 * process) on NA_ERR_PROTO. Decoded messages hold views into the payload
 * buffer: they are valid while that buffer is.
 *
 * Handshake (mutual proof of the cluster secret; the secret never crosses the
 * wire; MACs are HMAC-SHA256, compared in constant time):
 *
 *   connector (client)                         listener (server)
 *   HELLO {name_c, role, cluster, nonce_c} ──▶  check major version, cluster
 *                                          ◀──  HELLO_CHALLENGE {name_s, role,
 *                                                 cluster, nonce_s, mac_s}
 *   verify mac_s                                  mac_s = auth(SERVER, ...)
 *   AUTH {mac_c = auth(CLIENT, ...)}        ──▶  verify mac_c
 *   ADDR {id_c, worker address}, sealed    ──▶  open (mac), check, UCX endpoint
 *                                          ◀──  HELLO_OK {heartbeat_ms}
 *                                          ◀──  ADDR {id_s, worker address}, sealed
 *   (the ADDR frames are the transport's, rdma/xp_door.c; sealed with
 *   na_wire_addr_seal(): encrypted and MAC'd over both nonces and the side,
 *   so a relay can neither read nor alter them: new in major version 2)
 *   Any step may instead answer REFUSE {reason, text} and close.
 *   auth(side, ...) = HMAC(secret, label(side) | nonce_c | nonce_s |
 *                          u16 len | name_c | u16 len | name_s | cluster...)
 *   — see na_wire_auth_compute().
 */
#ifndef NA_WIRE_H
#define NA_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"

#define NA_WIRE_MAGIC          "NATN"
#define NA_WIRE_VERSION_MAJOR  2   /* 2: ADDR frame sealed to the handshake */
#define NA_WIRE_VERSION_MINOR  2   /* 1: n_queries per DECODE_ATTN / ATTN_OUT entry;
                                      2: REQ_OPEN's n_prompt (its reserved word) */
#define NA_WIRE_HDR_SIZE       64          /* bytes this version writes */
#define NA_WIRE_HDR_MAX        256         /* largest hdr_len accepted */
#define NA_WIRE_ALIGN          64          /* row sections start on this */

/* Limits every decoder (and encoder) enforces. */
#define NA_WIRE_MAX_PAYLOAD    (1ull << 30) /* 1 GiB */
#define NA_WIRE_MAX_KV_HEADS   256         /* kv head index < this */
#define NA_WIRE_MAX_Q_PER_KV   64          /* GQA ratio n_heads / n_kv_heads */
#define NA_WIRE_MAX_HEAD_DIM   1024
#define NA_WIRE_MAX_ENTRIES    4096        /* requests in one DECODE_ATTN / ATTN_OUT */
#define NA_WIRE_MAX_LAYERS     1024        /* layer < this */
#define NA_WIRE_MAX_POS        (1u << 24)  /* token positions < this (16 Mi) */
#define NA_WIRE_MAX_TOKENS     (1u << 20)  /* tokens in one PREFILL_KV / KV_DATA */
#define NA_WIRE_MAX_QUERIES    65536       /* queries (prompt tokens) of one DECODE_ATTN entry */
#define NA_WIRE_NAME_MAX       64          /* node/cluster names incl. NUL (<= 63 chars) */
#define NA_WIRE_TEXT_MAX       256         /* REFUSE / ERROR text bytes (no NUL on wire) */
#define NA_WIRE_STATS_MAX      256         /* key/value pairs in one STATS */
#define NA_WIRE_STATS_KEY_MAX  32          /* stats key incl. NUL (<= 31 chars) */
#define NA_WIRE_MAX_DIM        65536       /* model dim / q_dim in BATCH_CTX rows */
#define NA_WIRE_NONCE_SIZE     32
#define NA_WIRE_MAC_SIZE       32

/* Message types: explicit values, never reused; NA_WIRE_MSG_COUNT is the
 * sentinel (a type >= it, or 0, is NA_ERR_PROTO). */
typedef enum {
    NA_WIRE_MSG_INVALID         = 0,
    NA_WIRE_MSG_HELLO           = 1,   /* client -> server: who I am + nonce_c */
    NA_WIRE_MSG_HELLO_CHALLENGE = 2,   /* server -> client: nonce_s + server proof */
    NA_WIRE_MSG_AUTH            = 3,   /* client -> server: client proof */
    NA_WIRE_MSG_HELLO_OK        = 4,   /* server -> client: accepted */
    NA_WIRE_MSG_REFUSE          = 5,   /* either: refused (reason + text), then close */
    NA_WIRE_MSG_HEARTBEAT       = 6,   /* either; flag REPLY on the answer */
    NA_WIRE_MSG_REQ_OPEN        = 7,   /* compute -> storage: reserve a request's KV */
    NA_WIRE_MSG_REQ_RELEASE     = 8,   /* compute -> storage: free a request's KV */
    NA_WIRE_MSG_PREFILL_KV      = 9,   /* compute -> storage: bulk K,V of a prompt chunk */
    NA_WIRE_MSG_DECODE_ATTN     = 10,  /* compute -> storage: q, k_new, v_new per entry */
    NA_WIRE_MSG_ATTN_OUT        = 11,  /* storage -> compute: o per entry */
    NA_WIRE_MSG_KV_FETCH        = 12,  /* compute -> storage: send back a KV range */
    NA_WIRE_MSG_KV_DATA         = 13,  /* storage -> compute: the KV range (PREFILL_KV layout) */
    NA_WIRE_MSG_STATS_REQ       = 14,  /* either: ask for counters */
    NA_WIRE_MSG_STATS           = 15,  /* counters as key/value pairs */
    NA_WIRE_MSG_ERROR           = 16,  /* an error on one request / message */
    NA_WIRE_MSG_BYE             = 17,  /* orderly close */
    NA_WIRE_MSG_ECHO            = 18,  /* opaque payload, echoed back with flag REPLY */
    NA_WIRE_MSG_ACK             = 19,  /* success answer to REQ_OPEN / REQ_RELEASE / PREFILL_KV */
    NA_WIRE_MSG_BATCH_CTX       = 20,  /* compute -> compute: a batch's context migrates
                                          (rotational pipelining) */
    NA_WIRE_MSG_COUNT
} na_wire_type_t;

/* Header flags. Bits 0..7: must be understood. Bits 8..15: ignorable hints. */
#define NA_WIRE_F_REPLY     0x0001u  /* this message answers one of the same type (ECHO, HEARTBEAT) */
#define NA_WIRE_F_MORE      0x0002u  /* more messages of the same batch/request follow */
#define NA_WIRE_F_KNOWN     0x0003u  /* all must-understand bits this version knows */

/* Node roles (HELLO). */
typedef enum {
    NA_WIRE_ROLE_COMPUTE = 1,
    NA_WIRE_ROLE_STORAGE = 2,
    NA_WIRE_ROLE_TOOL    = 3,     /* a client such as `nearattn bench` or a test */
    NA_WIRE_ROLE_COUNT
} na_wire_role_t;

/* REFUSE reasons. */
typedef enum {
    NA_WIRE_REFUSE_VERSION  = 1,  /* other major version */
    NA_WIRE_REFUSE_AUTH     = 2,  /* proof of the secret failed */
    NA_WIRE_REFUSE_CLUSTER  = 3,  /* other cluster name */
    NA_WIRE_REFUSE_ROLE     = 4,  /* role not accepted here */
    NA_WIRE_REFUSE_BUSY     = 5,  /* no capacity for another peer */
    NA_WIRE_REFUSE_PROTO    = 6,  /* malformed handshake */
    NA_WIRE_REFUSE_SHUTDOWN = 7,  /* node is stopping */
    NA_WIRE_REFUSE_NAME     = 8,  /* a peer of that name is already connected / unknown */
    NA_WIRE_REFUSE_MODEL    = 9,  /* a storage node holding KV of another model shape /
                                     dtype than the compute node's (BYE after STATS) */
    NA_WIRE_REFUSE_COUNT
} na_wire_refuse_t;

/* ---- header ---------------------------------------------------------------- */

typedef struct {
    uint16_t ver_major, ver_minor;  /* encode: set by the encoder (ours) */
    uint16_t type;                  /* na_wire_type_t */
    uint16_t flags;                 /* NA_WIRE_F_* */
    uint16_t hdr_len;               /* payload starts here (64 when we send) */
    uint64_t payload_len;
    uint64_t request_id;
    uint32_t batch_id;
    uint32_t layer;
    uint32_t seq;                   /* sender's message counter (opaque to the protocol) */
    uint64_t time_ns;               /* sender's monotonic clock (opaque; tracing/latency) */
} na_wire_hdr_t;

/* Write h as the 64-byte header into out (ver_* and hdr_len are forced to this
 * version's values). Cannot fail. */
void        na_wire_hdr_encode(uint8_t out[NA_WIRE_HDR_SIZE], const na_wire_hdr_t *h);
/* Read and validate a header from buf (len bytes available, at least 64): magic,
 * major version (NA_ERR_VERSION), hdr_len, type, flags, payload_len <= limit.
 * Sets *h_p on success only. Does not check the payload. */
na_status_t na_wire_hdr_decode(const void *buf, size_t len, na_wire_hdr_t *h_p);

/* Static names ("DECODE_ATTN", "storage", "version"); "?" if out of range. */
const char *na_wire_type_name(unsigned type);
const char *na_wire_role_name(unsigned role);
const char *na_wire_refuse_name(unsigned reason);

/* ---- messages ---------------------------------------------------------------
 * Request ids are >= 1 wherever a message names a request (0 = "none", e.g.
 * an ERROR about a whole connection). The payload ends right after its last
 * row section (no trailing padding).
 * Ids that live in the header (request_id, batch_id, layer) are fields of the
 * message structs below; the encoder writes them to the header and the decoder
 * reads them back from it. Pointer fields are inputs when encoding (NULL for a
 * row section = leave those bytes as they are in the caller's buffer, for a
 * caller that writes rows in place afterwards) and views into the payload
 * when decoding. */

/* HELLO: payload = role u16, rsvd u16, rsvd u32, nonce[32], name[64], cluster[64]
 * (names NUL-padded, 1..63 printable ASCII chars). 168 bytes. The peer's
 * version is the header's. */
typedef struct {
    uint16_t ver_major, ver_minor;       /* decode: from the header; encode: ignored */
    na_wire_role_t role;
    uint8_t  nonce[NA_WIRE_NONCE_SIZE];  /* fresh random (na_wire_nonce) */
    char     name[NA_WIRE_NAME_MAX];     /* sender node name */
    char     cluster[NA_WIRE_NAME_MAX];  /* cluster name from the layout */
} na_wire_hello_t;

/* HELLO_CHALLENGE: a HELLO (server's name, role, cluster, nonce_s) + mac_s[32]. */
typedef struct {
    na_wire_hello_t hello;
    uint8_t mac[NA_WIRE_MAC_SIZE];       /* na_wire_auth_compute(NA_WIRE_AUTH_SERVER, ...) */
} na_wire_challenge_t;

/* AUTH: mac_c[32]. */
typedef struct {
    uint8_t mac[NA_WIRE_MAC_SIZE];       /* na_wire_auth_compute(NA_WIRE_AUTH_CLIENT, ...) */
} na_wire_auth_t;

/* HELLO_OK: heartbeat_ms u32, rsvd u32. */
typedef struct {
    uint32_t heartbeat_ms;               /* the interval the server expects; 0 = none */
} na_wire_hello_ok_t;

/* REFUSE / ERROR / BYE text: len u16 bytes, printable ASCII, no NUL on wire.
 * REFUSE payload: reason u16, text_len u16, rsvd u32, text. */
typedef struct {
    na_wire_refuse_t reason;
    char text[NA_WIRE_TEXT_MAX + 1];     /* NUL-terminated copy */
} na_wire_refuse_msg_t;

/* HEARTBEAT payload: send_ns u64, echo_ns u64 (the peer's send_ns when REPLY). */
typedef struct {
    uint64_t send_ns, echo_ns;
} na_wire_heartbeat_t;

/* REQ_OPEN payload (request_id in header): max_tokens u32, n_layers u32,
 * kv_h0 u16, kv_h1 u16, head_dim u16, q_per_kv u16, dtype u16 (KV storage
 * type: f32/f16/bf16), sections u16, n_prompt u32. 24 bytes. The storage node
 * answers ACK or ERROR (e.g. NA_ERR_NOSPACE).
 * n_prompt (2.2; the word was reserved and written 0 before, and a 2.1 node
 * ignores it): the tokens the compute node feeds as the request's prompt
 * through DECODE_ATTN chunks (chunked prefill), 0 = not said. When the last
 * layer's rows up to it are in, the node flushes the prompt's KV (as a
 * PREFILL_KV without MORE) and then publishes its blocks to the prefix cache.
 * Optional prefix section (prefix reuse, docs/prefix-reuse.md), present when
 * sections is 1 (0: absent): model_fp[16], n_prefix u32, rsvd u32,
 * then n_prefix token ids u32 (the prompt's leading tokens the node may
 * already hold KV of). The node hashes them itself (common/kvhash.h) and
 * answers with an ACK whose prefix_tokens says how many leading tokens it
 * attached to the request (0: none). */
#define NA_WIRE_FP_SIZE 16
typedef struct {
    uint64_t request_id;
    uint32_t max_tokens;                 /* 1..NA_WIRE_MAX_POS: prompt + generated */
    uint32_t n_layers;                   /* 1..NA_WIRE_MAX_LAYERS */
    uint16_t kv_h0, kv_h1;               /* kv heads [h0, h1) held by this node */
    uint16_t head_dim;
    uint16_t q_per_kv;                   /* query heads per kv head (GQA ratio) */
    na_dtype_t dtype;
    uint32_t n_prompt;                   /* 0 (not said), 1..max_tokens: the prompt's end */
    uint32_t n_prefix;                   /* 0 (no section), 1..min(max_tokens, MAX_TOKENS) */
    uint8_t  model_fp[NA_WIRE_FP_SIZE];  /* the model's fingerprint (opaque) */
    const void *prefix;                  /* encode: uint32_t[n_prefix]; decode: the raw
                                            little-endian ids (na_wire_req_open_token) */
} na_wire_req_open_t;

/* Token i of a REQ_OPEN's prefix section (i < n_prefix). */
uint32_t na_wire_req_open_token(const na_wire_req_open_t *o, uint32_t i);

/* REQ_RELEASE payload (request_id in header): status i32 (0 = normal end), rsvd u32. */
typedef struct {
    uint64_t request_id;
    int32_t  status;
} na_wire_req_release_t;

/* PREFILL_KV and KV_DATA (request_id, layer in header): payload =
 *   pos0 u32, n_tokens u32, kv_h0 u16, kv_h1 u16, head_dim u16, dtype u16,
 *   pad to 64, K [n_tokens][kv_h1-kv_h0][head_dim] (dtype), pad to 64,
 *   V [n_tokens][kv_h1-kv_h0][head_dim] (dtype).
 * Token-major rows: token t's K for kv head h is at ((t*nh + (h-h0))*head_dim).
 * Positions are pos0 .. pos0+n_tokens-1 (a prompt can come in several chunks,
 * flag MORE on all but the last). */
typedef struct {
    uint64_t request_id;
    uint32_t layer;
    uint32_t pos0, n_tokens;             /* n_tokens 1..NA_WIRE_MAX_TOKENS */
    uint16_t kv_h0, kv_h1;
    uint16_t head_dim;
    na_dtype_t dtype;                    /* f32 / f16 / bf16 */
    const void *k;                       /* [n_tokens][kv_h1-kv_h0][head_dim] */
    const void *v;                       /* [n_tokens][kv_h1-kv_h0][head_dim] */
} na_wire_kv_t;

/* KV_FETCH (request_id, layer in header): pos0 u32, n_tokens u32, kv_h0 u16,
 * kv_h1 u16, dtype u16 (wanted), rsvd u16. Answered by KV_DATA or ERROR. */
typedef struct {
    uint64_t request_id;
    uint32_t layer;
    uint32_t pos0, n_tokens;
    uint16_t kv_h0, kv_h1;
    na_dtype_t dtype;
} na_wire_kv_fetch_t;

/* DECODE_ATTN (batch_id, layer in header). Payload:
 *   n_entries u32, entry_base u32, batch_total u32, head_dim u16, q_per_kv u16,
 *   dtype u16, rsvd u16, scale f32, rsvd u64                     (32 bytes)
 *   entry table: n_entries x {request_id u64, position u32, kv_h0 u16, kv_h1 u16,
 *                             offset u32, n_queries u32}            (24 bytes each)
 *   pad to 64
 *   per entry i, at `offset` (a multiple of 64: the previous entry's end
 *   rounded up, the first right after the padded table), contiguous, with
 *   nq = n_queries (0 is read as 1: encoders before version 2.1 wrote 0):
 *     q     [nq][(kv_h1-kv_h0)*q_per_kv][head_dim] (query head of kv head h:
 *                                           rows (h-h0)*q_per_kv .. +q_per_kv-1)
 *     k_new [nq][kv_h1-kv_h0][head_dim]
 *     v_new [nq][kv_h1-kv_h0][head_dim]
 * The table comes first so a receiver knows every entry's place; entry i's
 * rows end at na_wire_attn_entry_end(), so attention on the first entries can
 * start before the last ones are in (na_wire_decode_attn_prefix). A batch may
 * also be split into several messages: entries [entry_base, entry_base +
 * n_entries) of batch_total, flag MORE on all but the last. position is the
 * new token's position: after appending k_new/v_new the request has
 * position+1 tokens, and attention runs over all of them. An entry of
 * n_queries > 1 is a chunk of a prompt (chunked prefill): row t = 0..nq-1
 * is token position+t; the node appends all nq K/V rows and query t attends
 * over the position+t+1 tokens up to its own (causal), exactly as nq
 * single-query entries sent one step after another would. */
typedef struct {
    uint64_t request_id;
    uint32_t position;                   /* position + nq <= NA_WIRE_MAX_POS */
    uint16_t kv_h0, kv_h1;
    uint32_t n_queries;                  /* 1..NA_WIRE_MAX_QUERIES (0 = 1) */
    const void *q;                       /* [nq][(kv_h1-kv_h0)*q_per_kv][head_dim] */
    const void *k;                       /* [nq][kv_h1-kv_h0][head_dim] */
    const void *v;                       /* [nq][kv_h1-kv_h0][head_dim] */
    /* encode only: elements of dtype from one query's q (k, v) rows to the
     * next one's; 0 = packed. A head range of wider rows goes out without a
     * copy. Decode sets 0 (rows are packed on the wire). */
    size_t   q_stride, kv_stride;
} na_wire_attn_entry_t;

typedef struct {
    uint32_t batch_id, layer;
    uint32_t n_entries;                  /* 1..NA_WIRE_MAX_ENTRIES in this message */
    uint32_t entry_base, batch_total;    /* entry_base + n_entries <= batch_total <= MAX_ENTRIES */
    uint16_t head_dim, q_per_kv;
    na_dtype_t dtype;                    /* f32 / f16 / bf16 of q, k, v rows */
    float    scale;                      /* softmax scale, finite > 0 (1/sqrt(head_dim)) */
    const na_wire_attn_entry_t *entries; /* encode: [n_entries]; decode: NULL (use _get) */
    const uint8_t *raw;                  /* decode: the payload (private) */
} na_wire_attn_t;

/* ATTN_OUT (batch_id, layer in header). Payload:
 *   n_entries u32, entry_base u32, batch_total u32, head_dim u16, q_per_kv u16,
 *   dtype u16, rsvd u16, rsvd u32, rsvd u64                     (32 bytes)
 *   entry table: n_entries x {request_id u64, status i32, kv_h0 u16, kv_h1 u16,
 *                             offset u32, n_queries u32}            (24 bytes each)
 *   pad to 64, per entry at `offset` (placed as in DECODE_ATTN):
 *     o [nq][(kv_h1-kv_h0)*q_per_kv][head_dim]   (nq = n_queries, 0 read as 1)
 * Rows are present for every entry; for status != 0 they are zero and the
 * status (a negative na_status_t) says why that request failed. */
typedef struct {
    uint64_t request_id;
    int32_t  status;                     /* 0 or a negative na_status_t */
    uint16_t kv_h0, kv_h1;
    uint32_t n_queries;                  /* as asked (1..NA_WIRE_MAX_QUERIES; 0 = 1) */
    const void *o;                       /* [nq][(kv_h1-kv_h0)*q_per_kv][head_dim] */
} na_wire_out_entry_t;

typedef struct {
    uint32_t batch_id, layer;
    uint32_t n_entries, entry_base, batch_total;
    uint16_t head_dim, q_per_kv;
    na_dtype_t dtype;
    const na_wire_out_entry_t *entries;  /* encode: [n_entries]; decode: NULL (use _get) */
    const uint8_t *raw;                  /* decode: the payload (private) */
} na_wire_attn_out_t;

/* STATS payload: n u32, rsvd u32, n x {key[32] NUL-padded ([a-z0-9_.], 1..31
 * chars), value u64}. STATS_REQ has an empty payload. */
typedef struct {
    char     key[NA_WIRE_STATS_KEY_MAX];
    uint64_t value;
} na_wire_stat_t;

typedef struct {
    uint32_t n;                          /* 0..NA_WIRE_STATS_MAX */
    const na_wire_stat_t *pairs;         /* encode: [n]; decode: NULL (use _get) */
    const uint8_t *raw;                  /* decode: the payload (private) */
} na_wire_stats_t;

/* ERROR (request_id, batch_id, layer in header copied from the failed
 * message): status i32 (-1..-255), about_type u16, text_len u16, about_seq u32,
 * rsvd u32, text. */
typedef struct {
    uint64_t request_id;
    uint32_t batch_id, layer;
    int32_t  status;                     /* negative na_status_t */
    uint16_t about_type;                 /* type of the message that failed (0 = none) */
    uint32_t about_seq;                  /* its seq */
    char     text[NA_WIRE_TEXT_MAX + 1];
} na_wire_error_t;

/* ACK (request_id in header): about_type u16, sections u16, about_seq u32;
 * then, when sections is 1 (only when prefix_tokens != 0), prefix_tokens u32,
 * rsvd u32 (16 bytes). */
typedef struct {
    uint64_t request_id;
    uint16_t about_type;                 /* REQ_OPEN, REQ_RELEASE, PREFILL_KV, ... */
    uint32_t about_seq;
    uint32_t prefix_tokens;              /* REQ_OPEN: leading prompt tokens the node
                                            attached from its prefix cache (0: none) */
} na_wire_ack_t;

/* BYE: reason u16 (a na_wire_refuse_t or 0 = normal), text_len u16, rsvd u32, text. */
typedef na_wire_refuse_msg_t na_wire_bye_t;

/* ECHO: opaque bytes (0..NA_WIRE_MAX_PAYLOAD). */
typedef struct {
    const void *data;
    uint64_t    len;
} na_wire_echo_t;

/* BATCH_CTX (batch_id, layer = the slice the receiver runs next, in header):
 * the context of one batch in flight moving from the compute replica that ran
 * its last slice to the one that runs the next (rotational pipelining,
 * Lamina §5.1). Payload:
 *   n_rows u32, dim u32, att_dim u32, dtype u16, rsvd u16, step u64, rsvd u64
 *                                                                  (32 bytes)
 *   row table: n_rows x {request_id u64, position u32, token u32, rng u64,
 *                        status i32, rsvd u32}                  (32 bytes each)
 *   pad to 64, x [n_rows][dim] (dtype: the residual stream), pad to 64,
 *   att [n_rows][att_dim] (dtype: the attention output of the layer before
 *   the slice; absent when att_dim is 0).
 * Row i is request_id's token at `position`; `token` is the token it feeds,
 * rng its sampler state (opaque here), status 0 or the negative
 * na_status_t that ended it during this step (its rows are then ignored). */
typedef struct {
    uint64_t request_id;                 /* >= 1 */
    uint32_t position;                   /* < NA_WIRE_MAX_POS */
    uint32_t token;                      /* < NA_WIRE_MAX_POS */
    uint64_t rng;                        /* sampler state, opaque */
    int32_t  status;                     /* 0 or -1..-255 */
} na_wire_ctx_row_t;

typedef struct {
    uint32_t batch_id;
    uint32_t slice;                      /* header layer: 0..NA_WIRE_MAX_LAYERS */
    uint32_t n_rows;                     /* 1..NA_WIRE_MAX_ENTRIES */
    uint32_t dim;                        /* 1..NA_WIRE_MAX_DIM */
    uint32_t att_dim;                    /* 0..NA_WIRE_MAX_DIM */
    na_dtype_t dtype;                    /* f32 / f16 / bf16 of x and att */
    uint64_t step;                       /* the batch's decode step (opaque) */
    const na_wire_ctx_row_t *rows;       /* encode: [n_rows]; decode: NULL (use _get) */
    const void *x;                       /* [n_rows][dim] */
    const void *att;                     /* [n_rows][att_dim]; NULL when att_dim is 0 */
    const uint8_t *raw;                  /* decode: the payload (private) */
} na_wire_ctx_t;

/* Any message: type + header flags/seq/time + the body. */
typedef struct {
    na_wire_type_t type;
    uint16_t flags;                      /* NA_WIRE_F_* */
    uint32_t seq;
    uint64_t time_ns;
    union {
        na_wire_hello_t       hello;
        na_wire_challenge_t   challenge;
        na_wire_auth_t        auth;
        na_wire_hello_ok_t    hello_ok;
        na_wire_refuse_msg_t  refuse;
        na_wire_heartbeat_t   heartbeat;
        na_wire_req_open_t    req_open;
        na_wire_req_release_t req_release;
        na_wire_kv_t          kv;        /* PREFILL_KV and KV_DATA */
        na_wire_attn_t        attn;
        na_wire_attn_out_t    attn_out;
        na_wire_kv_fetch_t    kv_fetch;
        na_wire_stats_t       stats;     /* STATS (STATS_REQ has no body) */
        na_wire_error_t       error;
        na_wire_bye_t         bye;
        na_wire_echo_t        echo;
        na_wire_ack_t         ack;
        na_wire_ctx_t         ctx;       /* BATCH_CTX */
    } u;
} na_wire_msg_t;

/* ---- encode / decode ------------------------------------------------------- */

/* Total encoded size (header + payload) of m, after validating m's fields
 * against the limits. NA_ERR_INVALID (naming the field) if m is not valid. */
na_status_t na_wire_msg_size(const na_wire_msg_t *m, size_t *size_p);

/* Encode m as header + payload into buf (cap bytes). The header occupies
 * [0, 64) and the payload [64, *len_p), so a transport that carries them
 * separately sends (buf, 64) + (buf + 64, *len_p - 64). Row sections whose
 * pointer is NULL are left untouched (padding is still zeroed). Fails with
 * NA_ERR_INVALID (bad field) or NA_ERR_NOSPACE (cap too small). */
na_status_t na_wire_encode(const na_wire_msg_t *m, void *buf, size_t cap, size_t *len_p);

/* Decode the payload of a message whose header h was decoded already.
 * payload/payload_len are what arrived (payload_len must equal h->payload_len).
 * Validates everything; on success *m_p holds the message with views into
 * payload. NA_ERR_PROTO (naming the field) on any inconsistency. */
na_status_t na_wire_decode(const na_wire_hdr_t *h, const void *payload, size_t payload_len,
                           na_wire_msg_t *m_p);

/* Decode a contiguous buffer (header + payload, exactly len bytes). */
na_status_t na_wire_decode_buf(const void *buf, size_t len, na_wire_hdr_t *h_p,
                               na_wire_msg_t *m_p);

/* Entry i (< n_entries) of a DECODE_ATTN / ATTN_OUT / STATS message, encoded
 * (from .entries) or decoded (from the payload, validated at decode). Cannot
 * fail for i in range; returns NA_ERR_RANGE otherwise. */
na_status_t na_wire_attn_get(const na_wire_attn_t *m, uint32_t i, na_wire_attn_entry_t *e_p);
na_status_t na_wire_attn_out_get(const na_wire_attn_out_t *m, uint32_t i, na_wire_out_entry_t *e_p);
na_status_t na_wire_stats_get(const na_wire_stats_t *m, uint32_t i, na_wire_stat_t *s_p);
na_status_t na_wire_ctx_get(const na_wire_ctx_t *m, uint32_t i, na_wire_ctx_row_t *r_p);

/* Streaming DECODE_ATTN: decode when only the first avail bytes of the payload
 * have arrived (h->payload_len is the full size, avail <= it). Validates the
 * fixed part, the whole entry table and the total size, and sets *n_ready_p
 * to how many leading entries lie completely within avail (their views are
 * usable). Returns NA_OK; NA_INPROGRESS (nothing set) while avail does not
 * yet cover the fixed part and the table; NA_ERR_PROTO on bad input. */
na_status_t na_wire_decode_attn_prefix(const na_wire_hdr_t *h, const void *payload,
                                       size_t avail, na_wire_attn_t *m_p,
                                       uint32_t *n_ready_p);

/* ---- rows -------------------------------------------------------------------- */

/* 1 if p is aligned for elements of dtype t. */
int  na_wire_aligned(const void *p, na_dtype_t t);
/* Convert n elements of dtype t (f32/f16/bf16) at any alignment into floats. */
void na_wire_rows_to_f32(const void *src, na_dtype_t t, size_t n, float *dst);
/* Convert n floats into dtype t at any alignment. */
void na_wire_rows_from_f32(const float *src, na_dtype_t t, size_t n, void *dst);

/* ---- handshake ------------------------------------------------------------- */

typedef enum {
    NA_WIRE_AUTH_CLIENT = 1,             /* proof sent in AUTH */
    NA_WIRE_AUTH_SERVER = 2,             /* proof sent in HELLO_CHALLENGE */
} na_wire_auth_side_t;

/* Fill out with NA_WIRE_NONCE_SIZE fresh random bytes (getrandom). NA_ERR_IO
 * if the kernel's generator fails. */
na_status_t na_wire_nonce(uint8_t out[NA_WIRE_NONCE_SIZE]);

/* mac = HMAC-SHA256(secret, "nearattn-auth-v1 " + ("client"|"server") |
 *                   nonce_c | nonce_s | u16 len name_c | name_c |
 *                   u16 len name_s | name_s | u16 len cluster | cluster).
 * Pure; NA_ERR_INVALID on an empty secret or a name longer than 63. */
na_status_t na_wire_auth_compute(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                                 const uint8_t nonce_c[NA_WIRE_NONCE_SIZE], const uint8_t nonce_s[NA_WIRE_NONCE_SIZE],
                                 const char *name_c, const char *name_s, const char *cluster,
                                 uint8_t mac_out[NA_WIRE_MAC_SIZE]);
/* Recompute and compare in constant time: NA_OK, or NA_ERR_AUTH
 * ("peer NAME could not prove the cluster secret"). */
na_status_t na_wire_auth_verify(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                                const uint8_t nonce_c[NA_WIRE_NONCE_SIZE], const uint8_t nonce_s[NA_WIRE_NONCE_SIZE],
                                const char *name_c, const char *name_s, const char *cluster,
                                const uint8_t mac[NA_WIRE_MAC_SIZE]);

/* The ADDR frame that follows AUTH in both directions (rdma/xp_door.c:
 * "NAXA", u32 body length, mac[32], body = the sender's connection id (8) |
 * its UCX worker address) is bound to this handshake and hidden from
 * onlookers: side is the sender's (CLIENT for the connector's frame),
 *   body ^= keystream, block i = HMAC(secret, "nearattn-addr-v2 key" | u8 side |
 *                                     nonce_c | nonce_s | u32 i)
 *   mac   = HMAC(secret, "nearattn-addr-v2 mac" | u8 side | nonce_c | nonce_s |
 *                u32 len | body as sent).
 * seal: encrypt body in place and write its mac. open: check the mac in
 * constant time (NA_ERR_AUTH "address frame failed its MAC check ..." and body
 * left alone), then decrypt in place. NA_ERR_INVALID on bad arguments. */
na_status_t na_wire_addr_seal(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                              const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                              const uint8_t nonce_s[NA_WIRE_NONCE_SIZE], uint8_t *body, size_t len,
                              uint8_t mac_out[NA_WIRE_MAC_SIZE]);
na_status_t na_wire_addr_open(const uint8_t *secret, size_t secret_len, na_wire_auth_side_t side,
                              const uint8_t nonce_c[NA_WIRE_NONCE_SIZE],
                              const uint8_t nonce_s[NA_WIRE_NONCE_SIZE], uint8_t *body, size_t len,
                              const uint8_t mac[NA_WIRE_MAC_SIZE]);

/* Version rule for a received HELLO / HELLO_CHALLENGE: NA_OK for the same
 * major (any minor), NA_ERR_VERSION naming both versions otherwise. */
na_status_t na_wire_version_check(uint16_t peer_major, uint16_t peer_minor);

#endif /* NA_WIRE_H */

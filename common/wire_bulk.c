/* common/wire_bulk.c — the bulk messages of common/wire.h: PREFILL_KV /
 * KV_DATA (K and V rows of a token range), KV_FETCH, DECODE_ATTN (q, k_new,
 * v_new per entry), ATTN_OUT (o per entry), STATS, ECHO and BATCH_CTX. Layouts are drawn
 * in common/wire.h, and the row conversions used on their decoded views
 * (na_wire_rows_to_f32 / _from_f32); every size is computed in 64-bit arithmetic from fields
 * already checked against the limits, so no product can overflow. */
#include "wire_priv.h"

#include <inttypes.h>

/* Row sections are copied verbatim: the wire's rows are little-endian IEEE,
 * which is the host's layout on every machine nearattn targets. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "common/wire_bulk.c copies rows verbatim and needs a little-endian host"
#endif

enum {
    KV_FIXED      = 16,
    KV_FETCH_SIZE = 16,
    ATTN_FIXED    = 32,
    ATTN_ENTRY    = 24,
    STATS_FIXED   = 8,
    STATS_PAIR    = NA_WIRE_STATS_KEY_MAX + 8,
};
_Static_assert(STATS_PAIR == 40, "stats pair is 40 bytes");

/* ---- PREFILL_KV / KV_DATA / KV_FETCH ---------------------------------------------- */

/* The range fields KV messages share, head_dim when head_dim_p is not NULL
 * (KV_FETCH has none), then the dtype. */
static na_status_t kv_range_check(na_status_t code, const char *who, uint64_t request_id,
                                  uint32_t layer, uint32_t pos0, uint32_t n_tokens, uint16_t kv_h0,
                                  uint16_t kv_h1, const uint16_t *head_dim_p, uint64_t dtype, size_t *es_p)
{
    const na_wire_range_t range[] = {
        { "request_id", request_id, 1, UINT64_MAX }, { "layer", layer, 0, NA_WIRE_MAX_LAYERS - 1 },
        { "n_tokens", n_tokens, 1, NA_WIRE_MAX_TOKENS }, { "pos0", pos0, 0, NA_WIRE_MAX_POS - n_tokens },
        { "kv_h0", kv_h0, 0, NA_WIRE_MAX_KV_HEADS - 1 },
        { "kv_h1", kv_h1, (uint64_t)kv_h0 + 1, NA_WIRE_MAX_KV_HEADS },
        { "head_dim", head_dim_p ? *head_dim_p : 1, 1, NA_WIRE_MAX_HEAD_DIM },
    };
    na_status_t st = na_wire_chk_all(code, who, range, NA_WIRE_N(range) - !head_dim_p);
    return st ? st : na_wire_chk_dtype(code, who, "dtype", dtype, es_p);
}

/* Validate the shape fields of a KV message, and compute the offsets of the
 * K and V sections and the payload size. */
static na_status_t kv_layout(na_status_t code, const char *who, const na_wire_kv_t *k,
                             uint64_t *koff_p, uint64_t *voff_p, uint64_t *len_p)
{
    na_status_t st;
    size_t es;
    uint64_t bytes;

    if ((st = kv_range_check(code, who, k->request_id, k->layer, k->pos0, k->n_tokens, k->kv_h0,
                             k->kv_h1, &k->head_dim, (uint64_t)k->dtype, &es)) != NA_OK)
        return st;
    bytes = (uint64_t)k->n_tokens * (uint64_t)(k->kv_h1 - k->kv_h0) * k->head_dim * es;
    *koff_p = NA_WIRE_ALIGN;
    *voff_p = na_wire_align_up(*koff_p + bytes);
    *len_p = *voff_p + bytes;
    if (*len_p > NA_WIRE_MAX_PAYLOAD)
        return na_err(code, "wire %s: %" PRIu32 " tokens x %d heads x %" PRIu16
                      " dims need %" PRIu64 " bytes, over the payload limit %llu", who,
                      k->n_tokens, k->kv_h1 - k->kv_h0, k->head_dim, *len_p, NA_WIRE_MAX_PAYLOAD);
    return NA_OK;
}

static const char *kv_name(const na_wire_msg_t *m)
{
    return m->type == NA_WIRE_MSG_KV_DATA ? "KV_DATA" : "PREFILL_KV";
}

static na_status_t kv_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    uint64_t ko, vo;
    return kv_layout(NA_ERR_INVALID, kv_name(m), &m->u.kv, &ko, &vo, len_p);
}

static void kv_write(const na_wire_msg_t *m, uint8_t *p)
{
    const na_wire_kv_t *k = &m->u.kv;
    uint64_t ko = 0, vo = 0, len = 0, bytes;

    (void)kv_layout(NA_ERR_INVALID, kv_name(m), k, &ko, &vo, &len);  /* validated by size() */
    bytes = len - vo;
    memset(p + KV_FIXED, 0, ko - KV_FIXED);
    if (k->k)
        memcpy(p + ko, k->k, bytes);
    memset(p + ko + bytes, 0, vo - ko - bytes);
    if (k->v)
        memcpy(p + vo, k->v, bytes);
}

static na_status_t kv_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    const char *who = kv_name(m);
    na_wire_kv_t *k = &m->u.kv;
    uint64_t ko, vo, want;
    size_t es;
    na_status_t st;

    if ((st = na_wire_chk_dtype(NA_ERR_PROTO, who, "dtype", (uint64_t)k->dtype, &es)) != NA_OK ||
        (st = kv_layout(NA_ERR_PROTO, who, k, &ko, &vo, &want)) != NA_OK ||
        (st = na_wire_chk_len(who, len, want)) != NA_OK ||
        (st = na_wire_chk_pad(who, p, KV_FIXED, ko)) != NA_OK ||
        (st = na_wire_chk_pad(who, p, ko + (want - vo), vo)) != NA_OK)
        return st;
    k->k = p + ko;
    k->v = p + vo;
    return NA_OK;
}

static na_status_t kv_fetch_check(na_status_t code, const na_wire_msg_t *m)
{
    const na_wire_kv_fetch_t *f = &m->u.kv_fetch;
    size_t es;
    return kv_range_check(code, "KV_FETCH", f->request_id, f->layer, f->pos0, f->n_tokens, f->kv_h0,
                          f->kv_h1, NULL, (uint64_t)f->dtype, &es);
}

#define F NA_WIRE_FIELD
static const na_wire_field_t kv_f[] = {
    F(0, 4, na_wire_kv_t, pos0), F(4, 4, na_wire_kv_t, n_tokens), F(8, 2, na_wire_kv_t, kv_h0),
    F(10, 2, na_wire_kv_t, kv_h1), F(12, 2, na_wire_kv_t, head_dim), F(14, 2, na_wire_kv_t, dtype),
};
static const na_wire_field_t kv_ids[] = {
    NA_WIRE_ID(request_id, na_wire_kv_t, request_id), NA_WIRE_ID(layer, na_wire_kv_t, layer),
};
static const na_wire_field_t fetch_f[] = {
    F(0, 4, na_wire_kv_fetch_t, pos0), F(4, 4, na_wire_kv_fetch_t, n_tokens),
    F(8, 2, na_wire_kv_fetch_t, kv_h0), F(10, 2, na_wire_kv_fetch_t, kv_h1), F(12, 2, na_wire_kv_fetch_t, dtype),
};
static const na_wire_field_t fetch_ids[] = {
    NA_WIRE_ID(request_id, na_wire_kv_fetch_t, request_id), NA_WIRE_ID(layer, na_wire_kv_fetch_t, layer),
};
#undef F

#define T(a) a, NA_WIRE_N(a)
const na_wire_ops_t na_wire_ops_kv_prefill = { "PREFILL_KV", KV_FIXED, 0, T(kv_f), T(kv_ids), NULL,
                                               kv_size, kv_write, kv_read };
const na_wire_ops_t na_wire_ops_kv_data    = { "KV_DATA", KV_FIXED, 0, T(kv_f), T(kv_ids), NULL,
                                               kv_size, kv_write, kv_read };
const na_wire_ops_t na_wire_ops_kv_fetch   = { "KV_FETCH", KV_FETCH_SIZE, 1, T(fetch_f), T(fetch_ids),
                                               kv_fetch_check, NULL, NULL, NULL };
#undef T

/* ---- DECODE_ATTN / ATTN_OUT: shared batch fields ------------------------------------- */

/* The batch-level fields both messages share. */
typedef struct {
    uint32_t layer, n, base, total;
    uint16_t head_dim, q_per_kv;
    uint64_t dtype;
} batch_t;

#define BATCH(a) { (a)->layer, (a)->n_entries, (a)->entry_base, (a)->batch_total, (a)->head_dim, \
                   (a)->q_per_kv, (uint64_t)(a)->dtype }

/* Both fixed parts: n_entries u32, entry_base u32, batch_total u32, head_dim
 * u16, q_per_kv u16, dtype u16 (DECODE_ATTN adds its scale at 20). */
#define BATCH_FIELDS(type) \
    NA_WIRE_FIELD(0, 4, type, n_entries), NA_WIRE_FIELD(4, 4, type, entry_base), \
    NA_WIRE_FIELD(8, 4, type, batch_total), NA_WIRE_FIELD(12, 2, type, head_dim), \
    NA_WIRE_FIELD(14, 2, type, q_per_kv), NA_WIRE_FIELD(16, 2, type, dtype)
#define BATCH_IDS(type) NA_WIRE_ID(batch_id, type, batch_id), NA_WIRE_ID(layer, type, layer)
/* Entry tables: request_id u64, position u32 (ATTN) or status i32 (OUT),
 * kv_h0 u16, kv_h1 u16, then the rows' offset u32 and n_queries u32 (written
 * by the loops; n_queries 0 is read as 1, what encoders before 2.1 wrote). */
#define ENTRY_FIELDS(type, word2) \
    NA_WIRE_FIELD(0, 8, type, request_id), NA_WIRE_FIELD(8, 4, type, word2), \
    NA_WIRE_FIELD(12, 2, type, kv_h0), NA_WIRE_FIELD(14, 2, type, kv_h1)

static const na_wire_field_t attn_f[] = { BATCH_FIELDS(na_wire_attn_t) };
static const na_wire_field_t attn_ids[] = { BATCH_IDS(na_wire_attn_t) };
static const na_wire_field_t attn_entry_f[] = { ENTRY_FIELDS(na_wire_attn_entry_t, position) };
static const na_wire_field_t out_f[] = { BATCH_FIELDS(na_wire_attn_out_t) };
static const na_wire_field_t out_ids[] = { BATCH_IDS(na_wire_attn_out_t) };
static const na_wire_field_t out_entry_f[] = { ENTRY_FIELDS(na_wire_out_entry_t, status) };

static na_status_t batch_check(na_status_t code, const char *who, const batch_t *b, size_t *es_p)
{
    const na_wire_range_t range[] = {
        { "layer", b->layer, 0, NA_WIRE_MAX_LAYERS - 1 }, { "n_entries", b->n, 1, NA_WIRE_MAX_ENTRIES },
        { "batch_total", b->total, 1, NA_WIRE_MAX_ENTRIES },
        { "entry_base", b->base, 0, b->total >= b->n ? b->total - b->n : 0 },
        { "n_entries", b->n, 1, b->total }, { "head_dim", b->head_dim, 1, NA_WIRE_MAX_HEAD_DIM },
        { "q_per_kv", b->q_per_kv, 1, NA_WIRE_MAX_Q_PER_KV },
    };
    na_status_t st = na_wire_chk_all(code, who, range, NA_WIRE_N(range));
    return st ? st : na_wire_chk_dtype(code, who, "dtype", b->dtype, es_p);
}

/* Offset of the first entry's rows. */
static uint64_t rows_start(uint32_t n)
{
    return na_wire_align_up(ATTN_FIXED + (uint64_t)n * ATTN_ENTRY);
}

/* Check one entry's head range and query count and place its rows
 * (row_bytes per kv head and query) at *off_p, which advances to the next
 * entry's place. */
static na_status_t entry_place(na_status_t code, const char *who, uint32_t i, uint64_t h0,
                               uint64_t h1, uint64_t nq, uint64_t row_bytes, uint64_t *off_p,
                               uint64_t *end_p)
{
    na_status_t st;
    if ((st = na_wire_chk_i(code, who, "entries", i, "kv_h0", h0, 0, NA_WIRE_MAX_KV_HEADS - 1)) != NA_OK ||
        (st = na_wire_chk_i(code, who, "entries", i, "kv_h1", h1, h0 + 1, NA_WIRE_MAX_KV_HEADS)) != NA_OK ||
        (st = na_wire_chk_i(code, who, "entries", i, "n_queries", nq, 0, NA_WIRE_MAX_QUERIES)) != NA_OK)
        return st;
    *end_p = *off_p + (h1 - h0) * (nq ? nq : 1) * row_bytes;
    if (*end_p > NA_WIRE_MAX_PAYLOAD)
        return na_err(code, "wire %s: entries[%" PRIu32 "] ends at byte %" PRIu64
                      ", over the payload limit %llu", who, i, *end_p, NA_WIRE_MAX_PAYLOAD);
    return NA_OK;
}

/* Write entry i's table row (e, described by f) with its rows' offset, and
 * zero the padding before the next entry's rows (at the returned offset). */
static uint64_t entry_write(uint8_t *p, uint32_t i, uint32_t n, const void *e,
                            const na_wire_field_t *f, uint32_t nq, uint64_t off, uint64_t end)
{
    uint8_t *t = p + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
    uint64_t next = na_wire_align_up(end);

    na_wire_put(t, e, f, 4);
    na_st32(t + 16, (uint32_t)off);
    na_st32(t + 20, nq ? nq : 1);
    if (i + 1 < n)
        memset(p + end, 0, next - end);
    return next;
}

/* Entry status: 0, or a negative na_status_t that fits the wire (-255..-1). */
static na_status_t status_check(na_status_t code, const char *who, const char *array, uint32_t i,
                                int32_t s)
{
    if (s > 0 || s < -255)
        return na_err(code, "wire %s: field '%s[%" PRIu32 "].status' = %" PRId32
                      " out of range [-255, 0]", who, array, i, s);
    return NA_OK;
}

/* ---- DECODE_ATTN ------------------------------------------------------------------------ */

static na_status_t scale_check(na_status_t code, float s)
{
    uint32_t u = na_f32_bits(s);
    if ((u & 0x7f800000u) == 0x7f800000u || !(s > 0.0f))
        return na_err(code, "wire DECODE_ATTN: field 'scale' = %g (bits 0x%08x) is not finite and > 0",
                      (double)s, u);
    return NA_OK;
}

/* Payload size of a DECODE_ATTN (ae) or ATTN_OUT (oe) being encoded: each
 * entry's request_id, position or status and head range, rows_per_kv rows of
 * head_dim per kv head. */
static na_status_t entries_size(const char *who, const batch_t *b, size_t es, uint64_t rows_per_kv,
                                const na_wire_attn_entry_t *ae, const na_wire_out_entry_t *oe,
                                uint64_t *len_p)
{
    uint64_t row = rows_per_kv * b->head_dim * es, off = rows_start(b->n), end = 0;
    uint32_t i;
    na_status_t st;

    if (!ae && !oe)
        return na_err(NA_ERR_INVALID, "wire %s: entries is NULL", who);
    for (i = 0; i < b->n; i++) {
        uint64_t id = ae ? ae[i].request_id : oe[i].request_id;
        uint16_t h0 = ae ? ae[i].kv_h0 : oe[i].kv_h0, h1 = ae ? ae[i].kv_h1 : oe[i].kv_h1;
        uint32_t nq = ae ? ae[i].n_queries : oe[i].n_queries;
        if ((st = na_wire_chk_i(NA_ERR_INVALID, who, "entries", i, "request_id", id, 1, UINT64_MAX)) != NA_OK ||
            (st = ae ? na_wire_chk_i(NA_ERR_INVALID, who, "entries", i, "position", ae[i].position, 0,
                                     NA_WIRE_MAX_POS - (nq ? nq : 1))
                     : status_check(NA_ERR_INVALID, who, "entries", i, oe[i].status)) != NA_OK ||
            (st = entry_place(NA_ERR_INVALID, who, i, h0, h1, nq, row, &off, &end)) != NA_OK)
            return st;
        off = na_wire_align_up(end);
    }
    *len_p = end;
    return NA_OK;
}

static na_status_t attn_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_attn_t *a = &m->u.attn;
    batch_t b = BATCH(a);
    size_t es;
    na_status_t st;

    if ((st = batch_check(NA_ERR_INVALID, "DECODE_ATTN", &b, &es)) != NA_OK ||
        (st = scale_check(NA_ERR_INVALID, a->scale)) != NA_OK)
        return st;
    /* q rows + k + v per kv head */
    return entries_size("DECODE_ATTN", &b, es, (uint64_t)a->q_per_kv + 2, a->entries, NULL, len_p);
}

static void attn_write(const na_wire_msg_t *m, uint8_t *p)
{
    const na_wire_attn_t *a = &m->u.attn;
    size_t es = na_dtype_bytes(a->dtype, 1);
    uint64_t off = rows_start(a->n_entries), qb, kb;
    uint32_t i;

    memset(p + ATTN_FIXED, 0, off - ATTN_FIXED);
    na_st32(p + 20, na_f32_bits(a->scale));
    for (i = 0; i < a->n_entries; i++) {
        const na_wire_attn_entry_t *e = &a->entries[i];
        uint64_t nh = (uint64_t)(e->kv_h1 - e->kv_h0), nq = e->n_queries ? e->n_queries : 1, t;
        uint64_t qs, ks;
        uint8_t *q_at, *k_at, *v_at;
        qb = nh * a->q_per_kv * a->head_dim * es;     /* one query's rows */
        kb = nh * a->head_dim * es;
        qs = e->q_stride ? e->q_stride * es : qb;     /* source strides, bytes */
        ks = e->kv_stride ? e->kv_stride * es : kb;
        q_at = p + off;
        k_at = q_at + nq * qb;
        v_at = k_at + nq * kb;
        for (t = 0; t < nq; t++) {
            if (e->q) memcpy(q_at + t * qb, (const uint8_t *)e->q + t * qs, qb);
            if (e->k) memcpy(k_at + t * kb, (const uint8_t *)e->k + t * ks, kb);
            if (e->v) memcpy(v_at + t * kb, (const uint8_t *)e->v + t * ks, kb);
        }
        off = entry_write(p, i, a->n_entries, e, attn_entry_f, (uint32_t)nq, off,
                          off + nq * (qb + 2 * kb));
    }
}

/* Shared by DECODE_ATTN and ATTN_OUT decoders: read the table, check every
 * entry and its offset, the total size against h->payload_len, and count the
 * entries whose rows lie within avail. rows_per_kv is q_per_kv+2 (attn) or
 * q_per_kv (out). */
static na_status_t table_read(const char *who, const batch_t *b, size_t es, uint64_t rows_per_kv,
                              int is_out, const uint8_t *p, uint64_t avail, uint64_t total,
                              uint32_t *n_ready_p)
{
    uint64_t row = rows_per_kv * b->head_dim * es, off = rows_start(b->n), end = 0;
    uint32_t i, ready = 0;
    int ready_run = 1;
    na_status_t st;

    if ((st = na_wire_chk_pad(who, p, ATTN_FIXED + (uint64_t)b->n * ATTN_ENTRY, off)) != NA_OK)
        return st;
    for (i = 0; i < b->n; i++) {
        const uint8_t *t = p + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
        uint64_t id = na_ld64(t), h0 = na_ld16(t + 12), h1 = na_ld16(t + 14), o = na_ld32(t + 16);
        uint64_t nq = na_ld32(t + 20);
        if ((st = na_wire_chk_i(NA_ERR_PROTO, who, "entries", i, "request_id", id, 1, UINT64_MAX)) != NA_OK)
            return st;
        if (is_out) {
            if ((st = status_check(NA_ERR_PROTO, who, "entries", i, (int32_t)na_ld32(t + 8))) != NA_OK)
                return st;
        } else if ((st = na_wire_chk_i(NA_ERR_PROTO, who, "entries", i, "n_queries", nq, 0,
                                       NA_WIRE_MAX_QUERIES)) != NA_OK ||
                   (st = na_wire_chk_i(NA_ERR_PROTO, who, "entries", i, "position", na_ld32(t + 8),
                                       0, NA_WIRE_MAX_POS - (nq ? nq : 1))) != NA_OK) {
            return st;
        }
        if (o != off)
            return na_err(NA_ERR_PROTO, "wire %s: field 'entries[%" PRIu32 "].offset' = %" PRIu64
                          ", the layout puts it at %" PRIu64, who, i, o, off);
        if ((st = entry_place(NA_ERR_PROTO, who, i, h0, h1, nq, row, &off, &end)) != NA_OK)
            return st;
        if (ready_run && end <= avail) {
            ready++;
        } else {
            ready_run = 0;
        }
        off = na_wire_align_up(end);
        /* padding between this entry and the next, once it has arrived */
        if (i + 1 < b->n && off <= avail && (st = na_wire_chk_pad(who, p, end, off)) != NA_OK)
            return st;
    }
    if ((st = na_wire_chk_len(who, total, end)) != NA_OK)
        return st;
    *n_ready_p = ready;
    return NA_OK;
}

na_status_t na_wire_decode_attn_prefix(const na_wire_hdr_t *h, const void *payload,
                                       size_t avail, na_wire_attn_t *m_p, uint32_t *n_ready_p)
{
    const char *who = "DECODE_ATTN";
    const uint8_t *p = payload;
    na_wire_attn_t a;
    batch_t b;
    size_t es;
    uint32_t ready;
    na_status_t st;

    if (!h || h->type != NA_WIRE_MSG_DECODE_ATTN)
        return na_err(NA_ERR_INVALID, "wire DECODE_ATTN: header of another type (%s)",
                      h ? na_wire_name_of(h->type) : "NULL");
    if (h->payload_len > NA_WIRE_MAX_PAYLOAD || avail > h->payload_len)
        return na_err(NA_ERR_PROTO, "wire %s: %zu payload bytes arrived, header says %" PRIu64,
                      who, avail, h->payload_len);
    if ((st = na_wire_chk_min(who, h->payload_len, ATTN_FIXED)) != NA_OK)
        return st;
    if (avail < ATTN_FIXED || !p)
        return NA_INPROGRESS;
    memset(&a, 0, sizeof(a));
    a.batch_id = h->batch_id;
    a.layer    = h->layer;
    na_wire_get(&a, p, attn_f, NA_WIRE_N(attn_f));
    a.scale    = na_bits_f32(na_ld32(p + 20));
    b = (batch_t)BATCH(&a);
    if ((st = batch_check(NA_ERR_PROTO, who, &b, &es)) != NA_OK ||
        (st = scale_check(NA_ERR_PROTO, a.scale)) != NA_OK ||
        (st = na_wire_chk_min(who, h->payload_len, rows_start(a.n_entries))) != NA_OK)
        return st;
    if (avail < rows_start(a.n_entries))
        return NA_INPROGRESS;
    if ((st = table_read(who, &b, es, (uint64_t)a.q_per_kv + 2, 0, p, avail, h->payload_len,
                         &ready)) != NA_OK)
        return st;
    a.raw = p;
    *m_p = a;
    *n_ready_p = ready;
    return NA_OK;
}

static na_status_t attn_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_hdr_t h;
    uint32_t ready;
    na_status_t st;

    memset(&h, 0, sizeof(h));
    h.type = NA_WIRE_MSG_DECODE_ATTN;
    h.payload_len = len;
    h.batch_id = m->u.attn.batch_id;
    h.layer = m->u.attn.layer;
    st = na_wire_decode_attn_prefix(&h, p, len, &m->u.attn, &ready);
    if (st == NA_INPROGRESS)      /* cannot happen with len == payload_len; be safe */
        return na_err(NA_ERR_PROTO, "wire DECODE_ATTN: payload of %" PRIu64 " bytes is incomplete", len);
    return st;
}

na_status_t na_wire_attn_get(const na_wire_attn_t *m, uint32_t i, na_wire_attn_entry_t *e_p)
{
    const uint8_t *t;
    uint64_t nh, nq, off, qb, kb;
    size_t es;
    na_status_t st = na_wire_row("DECODE_ATTN", "entry", i, m ? m->n_entries : 0,
                                 m ? m->entries : NULL, sizeof(*e_p), e_p);

    if (st || m->entries)
        return st;
    es = na_dtype_bytes(m->dtype, 1);
    t = m->raw + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
    memset(e_p, 0, sizeof(*e_p));
    na_wire_get(e_p, t, attn_entry_f, NA_WIRE_N(attn_entry_f));
    off = na_ld32(t + 16);
    nq = na_ld32(t + 20) ? na_ld32(t + 20) : 1;
    e_p->n_queries = (uint32_t)nq;
    nh = (uint64_t)(e_p->kv_h1 - e_p->kv_h0);
    qb = nq * nh * m->q_per_kv * m->head_dim * es;
    kb = nq * nh * m->head_dim * es;
    e_p->q = m->raw + off;
    e_p->k = m->raw + off + qb;
    e_p->v = m->raw + off + qb + kb;
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_attn = { "DECODE_ATTN", ATTN_FIXED, 0, attn_f, NA_WIRE_N(attn_f), attn_ids,
                                         NA_WIRE_N(attn_ids), NULL, attn_size, attn_write, attn_read };

/* ---- ATTN_OUT ------------------------------------------------------------------------------ */

static na_status_t out_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_attn_out_t *a = &m->u.attn_out;
    batch_t b = BATCH(a);
    size_t es;
    na_status_t st = batch_check(NA_ERR_INVALID, "ATTN_OUT", &b, &es);

    return st ? st : entries_size("ATTN_OUT", &b, es, a->q_per_kv, NULL, a->entries, len_p);
}

static void out_write(const na_wire_msg_t *m, uint8_t *p)
{
    const na_wire_attn_out_t *a = &m->u.attn_out;
    size_t es = na_dtype_bytes(a->dtype, 1);
    uint64_t off = rows_start(a->n_entries), ob;
    uint32_t i;

    memset(p + ATTN_FIXED, 0, off - ATTN_FIXED);
    for (i = 0; i < a->n_entries; i++) {
        const na_wire_out_entry_t *e = &a->entries[i];
        uint32_t nq = e->n_queries ? e->n_queries : 1;
        ob = (uint64_t)nq * (e->kv_h1 - e->kv_h0) * a->q_per_kv * a->head_dim * es;
        if (e->o)
            memcpy(p + off, e->o, ob);
        else if (e->status != 0)
            memset(p + off, 0, ob);
        off = entry_write(p, i, a->n_entries, e, out_entry_f, nq, off, off + ob);
    }
}

static na_status_t out_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    const char *who = "ATTN_OUT";
    na_wire_attn_out_t *a = &m->u.attn_out;
    batch_t b = BATCH(a);
    size_t es;
    uint32_t ready;
    na_status_t st;

    if ((st = batch_check(NA_ERR_PROTO, who, &b, &es)) != NA_OK ||
        (st = na_wire_chk_min(who, len, rows_start(a->n_entries))) != NA_OK ||
        (st = table_read(who, &b, es, a->q_per_kv, 1, p, len, len, &ready)) != NA_OK)
        return st;
    a->entries = NULL;
    a->raw = p;
    return NA_OK;
}

na_status_t na_wire_attn_out_get(const na_wire_attn_out_t *m, uint32_t i, na_wire_out_entry_t *e_p)
{
    const uint8_t *t;
    na_status_t st = na_wire_row("ATTN_OUT", "entry", i, m ? m->n_entries : 0,
                                 m ? m->entries : NULL, sizeof(*e_p), e_p);

    if (st || m->entries)
        return st;
    t = m->raw + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
    memset(e_p, 0, sizeof(*e_p));
    na_wire_get(e_p, t, out_entry_f, NA_WIRE_N(out_entry_f));
    e_p->n_queries = na_ld32(t + 20) ? na_ld32(t + 20) : 1;
    e_p->o = m->raw + na_ld32(t + 16);
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_attn_out = { "ATTN_OUT", ATTN_FIXED, 0, out_f, NA_WIRE_N(out_f), out_ids,
                                             NA_WIRE_N(out_ids), NULL, out_size, out_write, out_read };

/* ---- STATS --------------------------------------------------------------------------------- */

/* A key in a field of NA_WIRE_STATS_KEY_MAX bytes: 1..31 of [a-z0-9_.], NUL-padded. */
static na_status_t stat_key_check(na_status_t code, uint32_t i, const char *key)
{
    size_t n = strnlen(key, NA_WIRE_STATS_KEY_MAX), j;

    if (n == 0 || n >= NA_WIRE_STATS_KEY_MAX)
        return na_err(code, "wire STATS: field 'pairs[%" PRIu32 "].key' has length %zu, want 1..%d",
                      i, n, NA_WIRE_STATS_KEY_MAX - 1);
    for (j = 0; j < n; j++) {
        char c = key[j];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return na_err(code, "wire STATS: field 'pairs[%" PRIu32 "].key' has character 0x%02x "
                          "(want [a-z0-9_.])", i, (unsigned)(unsigned char)c);
    }
    if (code == NA_ERR_PROTO)
        for (j = n; j < NA_WIRE_STATS_KEY_MAX; j++)
            if (key[j])
                return na_err(code, "wire STATS: field 'pairs[%" PRIu32 "].key' has non-zero bytes "
                              "after its end", i);
    return NA_OK;
}

na_status_t na_wire_stats_get(const na_wire_stats_t *m, uint32_t i, na_wire_stat_t *s_p)
{
    const uint8_t *q;
    na_status_t st = na_wire_row("STATS", "pair", i, m ? m->n : 0, m ? m->pairs : NULL,
                                 sizeof(*s_p), s_p);

    if (st || m->pairs)
        return st;
    q = m->raw + STATS_FIXED + (size_t)i * STATS_PAIR;
    memcpy(s_p->key, q, NA_WIRE_STATS_KEY_MAX);
    s_p->key[NA_WIRE_STATS_KEY_MAX - 1] = '\0';
    s_p->value = na_ld64(q + NA_WIRE_STATS_KEY_MAX);
    return NA_OK;
}

static na_status_t stats_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_stats_t *s = &m->u.stats;
    uint32_t i;
    na_status_t st;

    if ((st = na_wire_chk(NA_ERR_INVALID, "STATS", "n", s->n, 0, NA_WIRE_STATS_MAX)) != NA_OK)
        return st;
    if (s->n && !s->pairs)
        return na_err(NA_ERR_INVALID, "wire STATS: pairs is NULL");
    for (i = 0; i < s->n; i++)
        if ((st = stat_key_check(NA_ERR_INVALID, i, s->pairs[i].key)) != NA_OK)
            return st;
    *len_p = STATS_FIXED + (uint64_t)s->n * STATS_PAIR;
    return NA_OK;
}

static void stats_write(const na_wire_msg_t *m, uint8_t *p)
{
    const na_wire_stats_t *s = &m->u.stats;
    uint32_t i;

    memset(p + STATS_FIXED, 0, (size_t)s->n * STATS_PAIR);
    for (i = 0; i < s->n; i++) {
        uint8_t *q = p + STATS_FIXED + (size_t)i * STATS_PAIR;
        memcpy(q, s->pairs[i].key, strnlen(s->pairs[i].key, NA_WIRE_STATS_KEY_MAX - 1));
        na_st64(q + NA_WIRE_STATS_KEY_MAX, s->pairs[i].value);
    }
}

static na_status_t stats_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_stats_t *s = &m->u.stats;
    uint32_t i;
    na_status_t st;

    if ((st = na_wire_chk(NA_ERR_PROTO, "STATS", "n", s->n, 0, NA_WIRE_STATS_MAX)) != NA_OK ||
        (st = na_wire_chk_len("STATS", len, STATS_FIXED + (uint64_t)s->n * STATS_PAIR)) != NA_OK)
        return st;
    for (i = 0; i < s->n; i++)
        if ((st = stat_key_check(NA_ERR_PROTO, i, (const char *)p + STATS_FIXED + (size_t)i * STATS_PAIR)) != NA_OK)
            return st;
    s->pairs = NULL;
    s->raw = p;
    return NA_OK;
}

static const na_wire_field_t stats_f[] = { NA_WIRE_FIELD(0, 4, na_wire_stats_t, n) };

const na_wire_ops_t na_wire_ops_stats = { "STATS", STATS_FIXED, 0, stats_f, NA_WIRE_N(stats_f), NULL, 0,
                                          NULL, stats_size, stats_write, stats_read };

/* ---- ECHO ---------------------------------------------------------------------------------- */

static na_status_t echo_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    if (m->u.echo.len > NA_WIRE_MAX_PAYLOAD)
        return na_err(NA_ERR_INVALID, "wire ECHO: field 'len' = %" PRIu64 " over the limit %llu",
                      m->u.echo.len, NA_WIRE_MAX_PAYLOAD);
    *len_p = m->u.echo.len;
    return NA_OK;
}
static void echo_write(const na_wire_msg_t *m, uint8_t *p)
{
    if (m->u.echo.data && m->u.echo.len)
        memcpy(p, m->u.echo.data, m->u.echo.len);
}
static na_status_t echo_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    m->u.echo.data = p;
    m->u.echo.len = len;
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_echo = { "ECHO", 0, 0, NULL, 0, NULL, 0, NULL, echo_size, echo_write,
                                         echo_read };

/* ---- BATCH_CTX ----------------------------------------------------------------------------- */

enum { CTX_FIXED = 32, CTX_ROW = 32 };
_Static_assert(CTX_FIXED % 8 == 0 && CTX_ROW == 8 + 4 + 4 + 8 + 4 + 4, "BATCH_CTX row is 32 bytes");

#define F NA_WIRE_FIELD
static const na_wire_field_t ctx_f[] = {
    F(0, 4, na_wire_ctx_t, n_rows), F(4, 4, na_wire_ctx_t, dim), F(8, 4, na_wire_ctx_t, att_dim),
    F(12, 2, na_wire_ctx_t, dtype), F(16, 8, na_wire_ctx_t, step),
};
static const na_wire_field_t ctx_ids[] = {
    NA_WIRE_ID(batch_id, na_wire_ctx_t, batch_id), NA_WIRE_ID(layer, na_wire_ctx_t, slice),
};
static const na_wire_field_t ctx_row_f[] = {
    F(0, 8, na_wire_ctx_row_t, request_id), F(8, 4, na_wire_ctx_row_t, position),
    F(12, 4, na_wire_ctx_row_t, token), F(16, 8, na_wire_ctx_row_t, rng), F(24, 4, na_wire_ctx_row_t, status),
};
#undef F

/* Validate the shape fields of a BATCH_CTX and compute the offsets of the x
 * and att sections and the payload size. */
static na_status_t ctx_layout(na_status_t code, const na_wire_ctx_t *c, uint64_t *xoff_p,
                              uint64_t *aoff_p, uint64_t *len_p)
{
    const na_wire_range_t range[] = {
        { "slice", c->slice, 0, NA_WIRE_MAX_LAYERS }, { "n_rows", c->n_rows, 1, NA_WIRE_MAX_ENTRIES },
        { "dim", c->dim, 1, NA_WIRE_MAX_DIM }, { "att_dim", c->att_dim, 0, NA_WIRE_MAX_DIM },
    };
    na_status_t st;
    uint64_t xb, ab;
    size_t es;

    if ((st = na_wire_chk_all(code, "BATCH_CTX", range, NA_WIRE_N(range))) != NA_OK ||
        (st = na_wire_chk_dtype(code, "BATCH_CTX", "dtype", (uint64_t)c->dtype, &es)) != NA_OK)
        return st;
    xb = (uint64_t)c->n_rows * c->dim * es;
    ab = (uint64_t)c->n_rows * c->att_dim * es;
    *xoff_p = na_wire_align_up(CTX_FIXED + (uint64_t)c->n_rows * CTX_ROW);
    *aoff_p = na_wire_align_up(*xoff_p + xb);
    *len_p = ab ? *aoff_p + ab : *xoff_p + xb;
    if (*len_p > NA_WIRE_MAX_PAYLOAD)
        return na_err(code, "wire BATCH_CTX: %" PRIu32 " rows of %" PRIu32 " + %" PRIu32
                      " values need %" PRIu64 " bytes, over the payload limit %llu",
                      c->n_rows, c->dim, c->att_dim, *len_p, NA_WIRE_MAX_PAYLOAD);
    return NA_OK;
}

static na_status_t ctx_row_check(na_status_t code, uint32_t i, const na_wire_ctx_row_t *r)
{
    na_status_t st;

    if ((st = na_wire_chk_i(code, "BATCH_CTX", "rows", i, "request_id", r->request_id, 1,
                            UINT64_MAX)) != NA_OK ||
        (st = na_wire_chk_i(code, "BATCH_CTX", "rows", i, "position", r->position, 0,
                            NA_WIRE_MAX_POS - 1)) != NA_OK ||
        (st = na_wire_chk_i(code, "BATCH_CTX", "rows", i, "token", r->token, 0,
                            NA_WIRE_MAX_POS - 1)) != NA_OK)
        return st;
    return status_check(code, "BATCH_CTX", "rows", i, r->status);
}

static na_status_t ctx_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_ctx_t *c = &m->u.ctx;
    uint64_t xo, ao;
    uint32_t i;
    na_status_t st;

    if ((st = ctx_layout(NA_ERR_INVALID, c, &xo, &ao, len_p)) != NA_OK)
        return st;
    if (!c->rows)
        return na_err(NA_ERR_INVALID, "wire BATCH_CTX: rows is NULL");
    for (i = 0; i < c->n_rows; i++)
        if ((st = ctx_row_check(NA_ERR_INVALID, i, &c->rows[i])) != NA_OK)
            return st;
    return NA_OK;
}

static void ctx_write(const na_wire_msg_t *m, uint8_t *p)
{
    const na_wire_ctx_t *c = &m->u.ctx;
    uint64_t xo, ao, len, xb;
    uint32_t i;

    (void)ctx_layout(NA_ERR_INVALID, c, &xo, &ao, &len);      /* validated by size() */
    xb = (uint64_t)c->n_rows * c->dim * na_dtype_bytes(c->dtype, 1);
    memset(p + CTX_FIXED, 0, xo - CTX_FIXED);
    for (i = 0; i < c->n_rows; i++)
        na_wire_put(p + CTX_FIXED + (size_t)i * CTX_ROW, &c->rows[i], ctx_row_f, NA_WIRE_N(ctx_row_f));
    if (c->x)
        memcpy(p + xo, c->x, xb);
    if (len > xo + xb) {
        memset(p + xo + xb, 0, ao - xo - xb);
        if (c->att)
            memcpy(p + ao, c->att, len - ao);
    }
}

static na_status_t ctx_read(const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_ctx_t *c = &m->u.ctx;
    uint64_t xo, ao, want, xb;
    na_wire_ctx_row_t r;
    uint32_t i;
    size_t es;
    na_status_t st;

    if ((st = na_wire_chk_dtype(NA_ERR_PROTO, "BATCH_CTX", "dtype", (uint64_t)c->dtype, &es)) != NA_OK ||
        (st = ctx_layout(NA_ERR_PROTO, c, &xo, &ao, &want)) != NA_OK ||
        (st = na_wire_chk_len("BATCH_CTX", len, want)) != NA_OK ||
        (st = na_wire_chk_pad("BATCH_CTX", p, CTX_FIXED + (uint64_t)c->n_rows * CTX_ROW, xo)) != NA_OK)
        return st;
    xb = (uint64_t)c->n_rows * c->dim * es;
    if (c->att_dim && (st = na_wire_chk_pad("BATCH_CTX", p, xo + xb, ao)) != NA_OK)
        return st;
    c->rows = NULL;
    c->raw = p;
    for (i = 0; i < c->n_rows; i++) {
        (void)na_wire_ctx_get(c, i, &r);
        if ((st = ctx_row_check(NA_ERR_PROTO, i, &r)) != NA_OK)
            return st;
    }
    c->x = p + xo;
    c->att = c->att_dim ? p + ao : NULL;
    return NA_OK;
}

na_status_t na_wire_ctx_get(const na_wire_ctx_t *m, uint32_t i, na_wire_ctx_row_t *r_p)
{
    na_status_t st = na_wire_row("BATCH_CTX", "row", i, m ? m->n_rows : 0, m ? m->rows : NULL,
                                 sizeof(*r_p), r_p);

    if (st || m->rows)
        return st;
    na_wire_get(r_p, m->raw + CTX_FIXED + (size_t)i * CTX_ROW, ctx_row_f, NA_WIRE_N(ctx_row_f));
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_ctx = { "BATCH_CTX", CTX_FIXED, 0, ctx_f, NA_WIRE_N(ctx_f), ctx_ids,
                                        NA_WIRE_N(ctx_ids), NULL, ctx_size, ctx_write, ctx_read };

/* ---- rows ------------------------------------------------------------------------ */

int na_wire_aligned(const void *p, na_dtype_t t)
{
    size_t a = t == NA_DTYPE_F32 ? 4 : 2;
    return ((uintptr_t)p & (a - 1)) == 0;
}

void na_wire_rows_to_f32(const void *src, na_dtype_t t, size_t n, float *dst)
{
    const uint8_t *s = src;
    size_t i;

    switch (t) {
    case NA_DTYPE_F32:
        for (i = 0; i < n; i++)
            dst[i] = na_bits_f32(na_ld32(s + 4 * i));
        break;
    case NA_DTYPE_F16:
        for (i = 0; i < n; i++)
            dst[i] = na_f16_to_f32(na_ld16(s + 2 * i));
        break;
    case NA_DTYPE_BF16:
        for (i = 0; i < n; i++)
            dst[i] = na_bf16_to_f32(na_ld16(s + 2 * i));
        break;
    default:
        break;
    }
}

void na_wire_rows_from_f32(const float *src, na_dtype_t t, size_t n, void *dst)
{
    uint8_t *d = dst;
    size_t i;

    switch (t) {
    case NA_DTYPE_F32:
        for (i = 0; i < n; i++)
            na_st32(d + 4 * i, na_f32_bits(src[i]));
        break;
    case NA_DTYPE_F16:
        for (i = 0; i < n; i++)
            na_st16(d + 2 * i, na_f32_to_f16(src[i]));
        break;
    case NA_DTYPE_BF16:
        for (i = 0; i < n; i++)
            na_st16(d + 2 * i, na_f32_to_bf16(src[i]));
        break;
    default:
        break;
    }
}

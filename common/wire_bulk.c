/* common/wire_bulk.c — the bulk messages of common/wire.h: PREFILL_KV /
 * KV_DATA (K and V rows of a token range), KV_FETCH, DECODE_ATTN (q, k_new,
 * v_new per entry), ATTN_OUT (o per entry), STATS, ECHO and BATCH_CTX. Layouts are drawn
 * in common/wire.h; every size is computed in 64-bit arithmetic from fields
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

/* ---- PREFILL_KV / KV_DATA -------------------------------------------------------- */

/* Validate the shape fields of a KV message, and compute the offsets of the
 * K and V sections and the payload size. */
static na_status_t kv_layout(na_status_t code, const char *who, const na_wire_kv_t *k,
                             uint64_t *koff_p, uint64_t *voff_p, uint64_t *len_p)
{
    na_status_t st;
    size_t es;
    uint64_t bytes;

    if ((st = na_wire_chk(code, who, "request_id", k->request_id, 1, UINT64_MAX)) != NA_OK ||
        (st = na_wire_chk(code, who, "layer", k->layer, 0, NA_WIRE_MAX_LAYERS - 1)) != NA_OK ||
        (st = na_wire_chk(code, who, "n_tokens", k->n_tokens, 1, NA_WIRE_MAX_TOKENS)) != NA_OK ||
        (st = na_wire_chk(code, who, "pos0", k->pos0, 0, NA_WIRE_MAX_POS - k->n_tokens)) != NA_OK ||
        (st = na_wire_chk(code, who, "kv_h0", k->kv_h0, 0, NA_WIRE_MAX_KV_HEADS - 1)) != NA_OK ||
        (st = na_wire_chk(code, who, "kv_h1", k->kv_h1, (uint64_t)k->kv_h0 + 1, NA_WIRE_MAX_KV_HEADS)) != NA_OK ||
        (st = na_wire_chk(code, who, "head_dim", k->head_dim, 1, NA_WIRE_MAX_HEAD_DIM)) != NA_OK ||
        (st = na_wire_chk_dtype(code, who, "dtype", (uint64_t)k->dtype, &es)) != NA_OK)
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

static void kv_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    const na_wire_kv_t *k = &m->u.kv;
    uint64_t ko, vo, len, bytes;

    (void)kv_layout(NA_ERR_INVALID, kv_name(m), k, &ko, &vo, &len);  /* validated by size() */
    bytes = len - vo;
    h->request_id = k->request_id;
    h->layer = k->layer;
    memset(p, 0, ko);
    na_st32(p, k->pos0);
    na_st32(p + 4, k->n_tokens);
    na_st16(p + 8, k->kv_h0);
    na_st16(p + 10, k->kv_h1);
    na_st16(p + 12, k->head_dim);
    na_st16(p + 14, (uint16_t)k->dtype);
    if (k->k)
        memcpy(p + ko, k->k, bytes);
    memset(p + ko + bytes, 0, vo - ko - bytes);
    if (k->v)
        memcpy(p + vo, k->v, bytes);
}

static na_status_t kv_read_as(const char *who, const na_wire_hdr_t *h, const uint8_t *p,
                              uint64_t len, na_wire_msg_t *m)
{
    na_wire_kv_t *k = &m->u.kv;
    uint64_t ko, vo, want;
    size_t es;
    na_status_t st;

    if ((st = na_wire_chk_min(who, len, KV_FIXED)) != NA_OK ||
        (st = na_wire_chk_dtype(NA_ERR_PROTO, who, "dtype", na_ld16(p + 14), &es)) != NA_OK)
        return st;
    k->request_id = h->request_id;
    k->layer      = h->layer;
    k->pos0       = na_ld32(p);
    k->n_tokens   = na_ld32(p + 4);
    k->kv_h0      = na_ld16(p + 8);
    k->kv_h1      = na_ld16(p + 10);
    k->head_dim   = na_ld16(p + 12);
    k->dtype      = (na_dtype_t)na_ld16(p + 14);
    if ((st = kv_layout(NA_ERR_PROTO, who, k, &ko, &vo, &want)) != NA_OK ||
        (st = na_wire_chk_len(who, len, want)) != NA_OK ||
        (st = na_wire_chk_pad(who, p, KV_FIXED, ko)) != NA_OK ||
        (st = na_wire_chk_pad(who, p, ko + (want - vo), vo)) != NA_OK)
        return st;
    k->k = p + ko;
    k->v = p + vo;
    return NA_OK;
}

static na_status_t kv_prefill_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    return kv_read_as("PREFILL_KV", h, p, len, m);
}
static na_status_t kv_data_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    return kv_read_as("KV_DATA", h, p, len, m);
}

const na_wire_ops_t na_wire_ops_kv_prefill = { "PREFILL_KV", kv_size, kv_write, kv_prefill_read };
const na_wire_ops_t na_wire_ops_kv_data    = { "KV_DATA", kv_size, kv_write, kv_data_read };

/* ---- KV_FETCH ------------------------------------------------------------------------ */

static na_status_t kv_fetch_check(na_status_t code, const na_wire_kv_fetch_t *f)
{
    const char *who = "KV_FETCH";
    na_status_t st;
    size_t es;
    if ((st = na_wire_chk(code, who, "request_id", f->request_id, 1, UINT64_MAX)) != NA_OK ||
        (st = na_wire_chk(code, who, "layer", f->layer, 0, NA_WIRE_MAX_LAYERS - 1)) != NA_OK ||
        (st = na_wire_chk(code, who, "n_tokens", f->n_tokens, 1, NA_WIRE_MAX_TOKENS)) != NA_OK ||
        (st = na_wire_chk(code, who, "pos0", f->pos0, 0, NA_WIRE_MAX_POS - f->n_tokens)) != NA_OK ||
        (st = na_wire_chk(code, who, "kv_h0", f->kv_h0, 0, NA_WIRE_MAX_KV_HEADS - 1)) != NA_OK ||
        (st = na_wire_chk(code, who, "kv_h1", f->kv_h1, (uint64_t)f->kv_h0 + 1, NA_WIRE_MAX_KV_HEADS)) != NA_OK ||
        (st = na_wire_chk_dtype(code, who, "dtype", (uint64_t)f->dtype, &es)) != NA_OK)
        return st;
    return NA_OK;
}
static na_status_t kv_fetch_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    *len_p = KV_FETCH_SIZE;
    return kv_fetch_check(NA_ERR_INVALID, &m->u.kv_fetch);
}
static void kv_fetch_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    const na_wire_kv_fetch_t *f = &m->u.kv_fetch;
    memset(p, 0, KV_FETCH_SIZE);
    h->request_id = f->request_id;
    h->layer = f->layer;
    na_st32(p, f->pos0);
    na_st32(p + 4, f->n_tokens);
    na_st16(p + 8, f->kv_h0);
    na_st16(p + 10, f->kv_h1);
    na_st16(p + 12, (uint16_t)f->dtype);
}
static na_status_t kv_fetch_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_kv_fetch_t *f = &m->u.kv_fetch;
    na_status_t st = na_wire_chk_len("KV_FETCH", len, KV_FETCH_SIZE);
    size_t es;
    if (st || (st = na_wire_chk_dtype(NA_ERR_PROTO, "KV_FETCH", "dtype", na_ld16(p + 12), &es)) != NA_OK)
        return st;
    f->request_id = h->request_id;
    f->layer      = h->layer;
    f->pos0       = na_ld32(p);
    f->n_tokens   = na_ld32(p + 4);
    f->kv_h0      = na_ld16(p + 8);
    f->kv_h1      = na_ld16(p + 10);
    f->dtype      = (na_dtype_t)na_ld16(p + 12);
    return kv_fetch_check(NA_ERR_PROTO, f);
}

const na_wire_ops_t na_wire_ops_kv_fetch = { "KV_FETCH", kv_fetch_size, kv_fetch_write, kv_fetch_read };

/* ---- DECODE_ATTN / ATTN_OUT: shared batch fields ------------------------------------- */

/* The batch-level fields both messages share. */
typedef struct {
    uint32_t layer, n, base, total;
    uint16_t head_dim, q_per_kv;
    uint64_t dtype;
} batch_t;

static na_status_t batch_check(na_status_t code, const char *who, const batch_t *b, size_t *es_p)
{
    na_status_t st;
    if ((st = na_wire_chk(code, who, "layer", b->layer, 0, NA_WIRE_MAX_LAYERS - 1)) != NA_OK ||
        (st = na_wire_chk(code, who, "n_entries", b->n, 1, NA_WIRE_MAX_ENTRIES)) != NA_OK ||
        (st = na_wire_chk(code, who, "batch_total", b->total, 1, NA_WIRE_MAX_ENTRIES)) != NA_OK ||
        (st = na_wire_chk(code, who, "entry_base", b->base, 0,
                          b->total >= b->n ? b->total - b->n : 0)) != NA_OK ||
        (st = na_wire_chk(code, who, "n_entries", b->n, 1, b->total)) != NA_OK ||
        (st = na_wire_chk(code, who, "head_dim", b->head_dim, 1, NA_WIRE_MAX_HEAD_DIM)) != NA_OK ||
        (st = na_wire_chk(code, who, "q_per_kv", b->q_per_kv, 1, NA_WIRE_MAX_Q_PER_KV)) != NA_OK ||
        (st = na_wire_chk_dtype(code, who, "dtype", b->dtype, es_p)) != NA_OK)
        return st;
    return NA_OK;
}

/* Offset of the first entry's rows. */
static uint64_t rows_start(uint32_t n)
{
    return na_wire_align_up(ATTN_FIXED + (uint64_t)n * ATTN_ENTRY);
}

/* Check one entry's head range and place its rows (row_bytes per kv head)
 * at *off_p, which advances to the next entry's place. */
static na_status_t entry_place(na_status_t code, const char *who, uint32_t i, uint64_t h0,
                               uint64_t h1, uint64_t row_bytes, uint64_t *off_p, uint64_t *end_p)
{
    na_status_t st;
    if ((st = na_wire_chk_i(code, who, "entries", i, "kv_h0", h0, 0, NA_WIRE_MAX_KV_HEADS - 1)) != NA_OK ||
        (st = na_wire_chk_i(code, who, "entries", i, "kv_h1", h1, h0 + 1, NA_WIRE_MAX_KV_HEADS)) != NA_OK)
        return st;
    *end_p = *off_p + (h1 - h0) * row_bytes;
    if (*end_p > NA_WIRE_MAX_PAYLOAD)
        return na_err(code, "wire %s: entries[%" PRIu32 "] ends at byte %" PRIu64
                      ", over the payload limit %llu", who, i, *end_p, NA_WIRE_MAX_PAYLOAD);
    return NA_OK;
}

/* ---- DECODE_ATTN ------------------------------------------------------------------------ */

static batch_t attn_batch(const na_wire_attn_t *a)
{
    batch_t b = { a->layer, a->n_entries, a->entry_base, a->batch_total, a->head_dim,
                  a->q_per_kv, (uint64_t)a->dtype };
    return b;
}

static na_status_t scale_check(na_status_t code, float s)
{
    uint32_t u = na_f32_bits(s);
    if ((u & 0x7f800000u) == 0x7f800000u || !(s > 0.0f))
        return na_err(code, "wire DECODE_ATTN: field 'scale' = %g (bits 0x%08x) is not finite and > 0",
                      (double)s, u);
    return NA_OK;
}

static na_status_t attn_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_attn_t *a = &m->u.attn;
    batch_t b = attn_batch(a);
    uint64_t off, end = 0, row;
    size_t es;
    uint32_t i;
    na_status_t st;

    if ((st = batch_check(NA_ERR_INVALID, "DECODE_ATTN", &b, &es)) != NA_OK ||
        (st = scale_check(NA_ERR_INVALID, a->scale)) != NA_OK)
        return st;
    if (!a->entries)
        return na_err(NA_ERR_INVALID, "wire DECODE_ATTN: entries is NULL");
    row = (uint64_t)(a->q_per_kv + 2) * a->head_dim * es;       /* q rows + k + v per kv head */
    off = rows_start(a->n_entries);
    for (i = 0; i < a->n_entries; i++) {
        const na_wire_attn_entry_t *e = &a->entries[i];
        if ((st = na_wire_chk_i(NA_ERR_INVALID, "DECODE_ATTN", "entries", i, "request_id",
                                e->request_id, 1, UINT64_MAX)) != NA_OK ||
            (st = na_wire_chk_i(NA_ERR_INVALID, "DECODE_ATTN", "entries", i, "position",
                                e->position, 0, NA_WIRE_MAX_POS - 1)) != NA_OK ||
            (st = entry_place(NA_ERR_INVALID, "DECODE_ATTN", i, e->kv_h0, e->kv_h1, row, &off, &end)) != NA_OK)
            return st;
        off = na_wire_align_up(end);
    }
    *len_p = end;
    return NA_OK;
}

static void attn_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    const na_wire_attn_t *a = &m->u.attn;
    size_t es = a->dtype == NA_DTYPE_F32 ? 4 : 2;
    uint64_t off = rows_start(a->n_entries), qb, kb;
    uint32_t i;

    h->batch_id = a->batch_id;
    h->layer = a->layer;
    memset(p, 0, off);
    na_st32(p, a->n_entries);
    na_st32(p + 4, a->entry_base);
    na_st32(p + 8, a->batch_total);
    na_st16(p + 12, a->head_dim);
    na_st16(p + 14, a->q_per_kv);
    na_st16(p + 16, (uint16_t)a->dtype);
    na_st32(p + 20, na_f32_bits(a->scale));
    for (i = 0; i < a->n_entries; i++) {
        const na_wire_attn_entry_t *e = &a->entries[i];
        uint8_t *t = p + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
        uint64_t nh = (uint64_t)(e->kv_h1 - e->kv_h0), end;
        na_st64(t, e->request_id);
        na_st32(t + 8, e->position);
        na_st16(t + 12, e->kv_h0);
        na_st16(t + 14, e->kv_h1);
        na_st32(t + 16, (uint32_t)off);
        qb = nh * a->q_per_kv * a->head_dim * es;
        kb = nh * a->head_dim * es;
        if (e->q) memcpy(p + off, e->q, qb);
        if (e->k) memcpy(p + off + qb, e->k, kb);
        if (e->v) memcpy(p + off + qb + kb, e->v, kb);
        end = off + qb + 2 * kb;
        if (i + 1 < a->n_entries) {
            off = na_wire_align_up(end);
            memset(p + end, 0, off - end);
        }
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
        if ((st = na_wire_chk_i(NA_ERR_PROTO, who, "entries", i, "request_id", id, 1, UINT64_MAX)) != NA_OK)
            return st;
        if (is_out) {
            int32_t s = (int32_t)na_ld32(t + 8);
            if (s > 0 || s < -255)
                return na_err(NA_ERR_PROTO, "wire %s: field 'entries[%" PRIu32 "].status' = %" PRId32
                              " out of range [-255, 0]", who, i, s);
        } else if ((st = na_wire_chk_i(NA_ERR_PROTO, who, "entries", i, "position", na_ld32(t + 8),
                                       0, NA_WIRE_MAX_POS - 1)) != NA_OK) {
            return st;
        }
        if (o != off)
            return na_err(NA_ERR_PROTO, "wire %s: field 'entries[%" PRIu32 "].offset' = %" PRIu64
                          ", the layout puts it at %" PRIu64, who, i, o, off);
        if ((st = entry_place(NA_ERR_PROTO, who, i, h0, h1, row, &off, &end)) != NA_OK)
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
                      h ? na_wire_type_name(h->type) : "NULL");
    if (h->payload_len > NA_WIRE_MAX_PAYLOAD || avail > h->payload_len)
        return na_err(NA_ERR_PROTO, "wire %s: %zu payload bytes arrived, header says %" PRIu64,
                      who, avail, h->payload_len);
    if ((st = na_wire_chk_min(who, h->payload_len, ATTN_FIXED)) != NA_OK)
        return st;
    if (avail < ATTN_FIXED || !p)
        return NA_INPROGRESS;
    memset(&a, 0, sizeof(a));
    a.batch_id    = h->batch_id;
    a.layer       = h->layer;
    a.n_entries   = na_ld32(p);
    a.entry_base  = na_ld32(p + 4);
    a.batch_total = na_ld32(p + 8);
    a.head_dim    = na_ld16(p + 12);
    a.q_per_kv    = na_ld16(p + 14);
    b = attn_batch(&a);
    b.dtype       = na_ld16(p + 16);
    a.scale       = na_bits_f32(na_ld32(p + 20));
    if ((st = batch_check(NA_ERR_PROTO, who, &b, &es)) != NA_OK ||
        (st = scale_check(NA_ERR_PROTO, a.scale)) != NA_OK)
        return st;
    a.dtype = (na_dtype_t)b.dtype;
    if ((st = na_wire_chk_min(who, h->payload_len, rows_start(a.n_entries))) != NA_OK)
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

static na_status_t attn_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    uint32_t ready;
    na_status_t st = na_wire_decode_attn_prefix(h, p, len, &m->u.attn, &ready);
    if (st == NA_INPROGRESS)      /* cannot happen with len == payload_len; be safe */
        return na_err(NA_ERR_PROTO, "wire DECODE_ATTN: payload of %" PRIu64 " bytes is incomplete", len);
    return st;
}

na_status_t na_wire_attn_get(const na_wire_attn_t *m, uint32_t i, na_wire_attn_entry_t *e_p)
{
    const uint8_t *t;
    uint64_t nh, off, qb, kb;
    size_t es;

    if (!m || i >= m->n_entries)
        return na_err(NA_ERR_RANGE, "wire DECODE_ATTN: entry %u of %u", i, m ? m->n_entries : 0);
    if (m->entries) {
        *e_p = m->entries[i];
        return NA_OK;
    }
    es = m->dtype == NA_DTYPE_F32 ? 4 : 2;
    t = m->raw + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
    e_p->request_id = na_ld64(t);
    e_p->position   = na_ld32(t + 8);
    e_p->kv_h0      = na_ld16(t + 12);
    e_p->kv_h1      = na_ld16(t + 14);
    off = na_ld32(t + 16);
    nh = (uint64_t)(e_p->kv_h1 - e_p->kv_h0);
    qb = nh * m->q_per_kv * m->head_dim * es;
    kb = nh * m->head_dim * es;
    e_p->q = m->raw + off;
    e_p->k = m->raw + off + qb;
    e_p->v = m->raw + off + qb + kb;
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_attn = { "DECODE_ATTN", attn_size, attn_write, attn_read };

/* ---- ATTN_OUT ------------------------------------------------------------------------------ */

static batch_t out_batch(const na_wire_attn_out_t *a)
{
    batch_t b = { a->layer, a->n_entries, a->entry_base, a->batch_total, a->head_dim,
                  a->q_per_kv, (uint64_t)a->dtype };
    return b;
}

static na_status_t out_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    const na_wire_attn_out_t *a = &m->u.attn_out;
    batch_t b = out_batch(a);
    uint64_t off, end = 0, row;
    size_t es;
    uint32_t i;
    na_status_t st;

    if ((st = batch_check(NA_ERR_INVALID, "ATTN_OUT", &b, &es)) != NA_OK)
        return st;
    if (!a->entries)
        return na_err(NA_ERR_INVALID, "wire ATTN_OUT: entries is NULL");
    row = (uint64_t)a->q_per_kv * a->head_dim * es;
    off = rows_start(a->n_entries);
    for (i = 0; i < a->n_entries; i++) {
        const na_wire_out_entry_t *e = &a->entries[i];
        if ((st = na_wire_chk_i(NA_ERR_INVALID, "ATTN_OUT", "entries", i, "request_id",
                                e->request_id, 1, UINT64_MAX)) != NA_OK)
            return st;
        if (e->status > 0 || e->status < -255)
            return na_err(NA_ERR_INVALID, "wire ATTN_OUT: field 'entries[%" PRIu32 "].status' = %" PRId32
                          " out of range [-255, 0]", i, e->status);
        if ((st = entry_place(NA_ERR_INVALID, "ATTN_OUT", i, e->kv_h0, e->kv_h1, row, &off, &end)) != NA_OK)
            return st;
        off = na_wire_align_up(end);
    }
    *len_p = end;
    return NA_OK;
}

static void out_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    const na_wire_attn_out_t *a = &m->u.attn_out;
    size_t es = a->dtype == NA_DTYPE_F32 ? 4 : 2;
    uint64_t off = rows_start(a->n_entries), ob;
    uint32_t i;

    h->batch_id = a->batch_id;
    h->layer = a->layer;
    memset(p, 0, off);
    na_st32(p, a->n_entries);
    na_st32(p + 4, a->entry_base);
    na_st32(p + 8, a->batch_total);
    na_st16(p + 12, a->head_dim);
    na_st16(p + 14, a->q_per_kv);
    na_st16(p + 16, (uint16_t)a->dtype);
    for (i = 0; i < a->n_entries; i++) {
        const na_wire_out_entry_t *e = &a->entries[i];
        uint8_t *t = p + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
        uint64_t end;
        na_st64(t, e->request_id);
        na_st32(t + 8, (uint32_t)e->status);
        na_st16(t + 12, e->kv_h0);
        na_st16(t + 14, e->kv_h1);
        na_st32(t + 16, (uint32_t)off);
        ob = (uint64_t)(e->kv_h1 - e->kv_h0) * a->q_per_kv * a->head_dim * es;
        if (e->o)
            memcpy(p + off, e->o, ob);
        else if (e->status != 0)
            memset(p + off, 0, ob);
        end = off + ob;
        if (i + 1 < a->n_entries) {
            off = na_wire_align_up(end);
            memset(p + end, 0, off - end);
        }
    }
}

static na_status_t out_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    const char *who = "ATTN_OUT";
    na_wire_attn_out_t *a = &m->u.attn_out;
    batch_t b;
    size_t es;
    uint32_t ready;
    na_status_t st;

    if ((st = na_wire_chk_min(who, len, ATTN_FIXED)) != NA_OK)
        return st;
    a->batch_id    = h->batch_id;
    a->layer       = h->layer;
    a->n_entries   = na_ld32(p);
    a->entry_base  = na_ld32(p + 4);
    a->batch_total = na_ld32(p + 8);
    a->head_dim    = na_ld16(p + 12);
    a->q_per_kv    = na_ld16(p + 14);
    b = out_batch(a);
    b.dtype        = na_ld16(p + 16);
    if ((st = batch_check(NA_ERR_PROTO, who, &b, &es)) != NA_OK ||
        (st = na_wire_chk_min(who, len, rows_start(a->n_entries))) != NA_OK)
        return st;
    a->dtype = (na_dtype_t)b.dtype;
    if ((st = table_read(who, &b, es, a->q_per_kv, 1, p, len, len, &ready)) != NA_OK)
        return st;
    a->entries = NULL;
    a->raw = p;
    return NA_OK;
}

na_status_t na_wire_attn_out_get(const na_wire_attn_out_t *m, uint32_t i, na_wire_out_entry_t *e_p)
{
    const uint8_t *t;

    if (!m || i >= m->n_entries)
        return na_err(NA_ERR_RANGE, "wire ATTN_OUT: entry %u of %u", i, m ? m->n_entries : 0);
    if (m->entries) {
        *e_p = m->entries[i];
        return NA_OK;
    }
    t = m->raw + ATTN_FIXED + (uint64_t)i * ATTN_ENTRY;
    e_p->request_id = na_ld64(t);
    e_p->status     = (int32_t)na_ld32(t + 8);
    e_p->kv_h0      = na_ld16(t + 12);
    e_p->kv_h1      = na_ld16(t + 14);
    e_p->o          = m->raw + na_ld32(t + 16);
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_attn_out = { "ATTN_OUT", out_size, out_write, out_read };

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

static void stats_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    const na_wire_stats_t *s = &m->u.stats;
    uint32_t i;

    memset(p, 0, STATS_FIXED + (size_t)s->n * STATS_PAIR);
    na_st32(p, s->n);
    for (i = 0; i < s->n; i++) {
        uint8_t *q = p + STATS_FIXED + (size_t)i * STATS_PAIR;
        memcpy(q, s->pairs[i].key, strnlen(s->pairs[i].key, NA_WIRE_STATS_KEY_MAX - 1));
        na_st64(q + NA_WIRE_STATS_KEY_MAX, s->pairs[i].value);
    }
}

static na_status_t stats_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_stats_t *s = &m->u.stats;
    uint32_t n, i;
    na_status_t st;

    if ((st = na_wire_chk_min("STATS", len, STATS_FIXED)) != NA_OK)
        return st;
    n = na_ld32(p);
    if ((st = na_wire_chk(NA_ERR_PROTO, "STATS", "n", n, 0, NA_WIRE_STATS_MAX)) != NA_OK ||
        (st = na_wire_chk_len("STATS", len, STATS_FIXED + (uint64_t)n * STATS_PAIR)) != NA_OK)
        return st;
    for (i = 0; i < n; i++)
        if ((st = stat_key_check(NA_ERR_PROTO, i, (const char *)p + STATS_FIXED + (size_t)i * STATS_PAIR)) != NA_OK)
            return st;
    s->n = n;
    s->pairs = NULL;
    s->raw = p;
    return NA_OK;
}

na_status_t na_wire_stats_get(const na_wire_stats_t *m, uint32_t i, na_wire_stat_t *s_p)
{
    const uint8_t *q;

    if (!m || i >= m->n)
        return na_err(NA_ERR_RANGE, "wire STATS: pair %u of %u", i, m ? m->n : 0);
    if (m->pairs) {
        *s_p = m->pairs[i];
        return NA_OK;
    }
    q = m->raw + STATS_FIXED + (size_t)i * STATS_PAIR;
    memcpy(s_p->key, q, NA_WIRE_STATS_KEY_MAX);
    s_p->key[NA_WIRE_STATS_KEY_MAX - 1] = '\0';
    s_p->value = na_ld64(q + NA_WIRE_STATS_KEY_MAX);
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_stats = { "STATS", stats_size, stats_write, stats_read };

/* ---- ECHO ---------------------------------------------------------------------------------- */

static na_status_t echo_size(const na_wire_msg_t *m, uint64_t *len_p)
{
    if (m->u.echo.len > NA_WIRE_MAX_PAYLOAD)
        return na_err(NA_ERR_INVALID, "wire ECHO: field 'len' = %" PRIu64 " over the limit %llu",
                      m->u.echo.len, NA_WIRE_MAX_PAYLOAD);
    *len_p = m->u.echo.len;
    return NA_OK;
}
static void echo_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    if (m->u.echo.data && m->u.echo.len)
        memcpy(p, m->u.echo.data, m->u.echo.len);
}
static na_status_t echo_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    m->u.echo.data = p;
    m->u.echo.len = len;
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_echo = { "ECHO", echo_size, echo_write, echo_read };

/* ---- BATCH_CTX ----------------------------------------------------------------------------- */

enum { CTX_FIXED = 32, CTX_ROW = 32 };
_Static_assert(CTX_FIXED % 8 == 0 && CTX_ROW == 8 + 4 + 4 + 8 + 4 + 4, "BATCH_CTX row is 32 bytes");

/* Validate the shape fields of a BATCH_CTX and compute the offsets of the x
 * and att sections and the payload size. */
static na_status_t ctx_layout(na_status_t code, const na_wire_ctx_t *c, uint64_t *xoff_p,
                              uint64_t *aoff_p, uint64_t *len_p)
{
    na_status_t st;
    uint64_t xb, ab;
    size_t es;

    if ((st = na_wire_chk(code, "BATCH_CTX", "slice", c->slice, 0, NA_WIRE_MAX_LAYERS)) != NA_OK ||
        (st = na_wire_chk(code, "BATCH_CTX", "n_rows", c->n_rows, 1, NA_WIRE_MAX_ENTRIES)) != NA_OK ||
        (st = na_wire_chk(code, "BATCH_CTX", "dim", c->dim, 1, NA_WIRE_MAX_DIM)) != NA_OK ||
        (st = na_wire_chk(code, "BATCH_CTX", "att_dim", c->att_dim, 0, NA_WIRE_MAX_DIM)) != NA_OK ||
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
    if (r->status > 0 || r->status < -255)
        return na_err(code, "wire BATCH_CTX: field 'rows[%" PRIu32 "].status' = %" PRId32
                      " out of range [-255, 0]", i, r->status);
    return NA_OK;
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

static void ctx_write(const na_wire_msg_t *m, na_wire_hdr_t *h, uint8_t *p)
{
    const na_wire_ctx_t *c = &m->u.ctx;
    uint64_t xo, ao, len, xb;
    uint32_t i;

    (void)ctx_layout(NA_ERR_INVALID, c, &xo, &ao, &len);      /* validated by size() */
    xb = (uint64_t)c->n_rows * c->dim * (c->dtype == NA_DTYPE_F32 ? 4 : 2);
    h->batch_id = c->batch_id;
    h->layer = c->slice;
    memset(p, 0, xo);
    na_st32(p, c->n_rows);
    na_st32(p + 4, c->dim);
    na_st32(p + 8, c->att_dim);
    na_st16(p + 12, (uint16_t)c->dtype);
    na_st64(p + 16, c->step);
    for (i = 0; i < c->n_rows; i++) {
        uint8_t *q = p + CTX_FIXED + (size_t)i * CTX_ROW;
        na_st64(q, c->rows[i].request_id);
        na_st32(q + 8, c->rows[i].position);
        na_st32(q + 12, c->rows[i].token);
        na_st64(q + 16, c->rows[i].rng);
        na_st32(q + 24, (uint32_t)c->rows[i].status);
    }
    if (c->x)
        memcpy(p + xo, c->x, xb);
    if (len > xo + xb) {
        memset(p + xo + xb, 0, ao - xo - xb);
        if (c->att)
            memcpy(p + ao, c->att, len - ao);
    }
}

static na_status_t ctx_read(const na_wire_hdr_t *h, const uint8_t *p, uint64_t len, na_wire_msg_t *m)
{
    na_wire_ctx_t *c = &m->u.ctx;
    uint64_t xo, ao, want, xb;
    na_wire_ctx_row_t r;
    uint32_t i;
    size_t es;
    na_status_t st;

    if ((st = na_wire_chk_min("BATCH_CTX", len, CTX_FIXED)) != NA_OK ||
        (st = na_wire_chk_dtype(NA_ERR_PROTO, "BATCH_CTX", "dtype", na_ld16(p + 12), &es)) != NA_OK)
        return st;
    c->batch_id = h->batch_id;
    c->slice = h->layer;
    c->n_rows = na_ld32(p);
    c->dim = na_ld32(p + 4);
    c->att_dim = na_ld32(p + 8);
    c->dtype = (na_dtype_t)na_ld16(p + 12);
    c->step = na_ld64(p + 16);
    if ((st = ctx_layout(NA_ERR_PROTO, c, &xo, &ao, &want)) != NA_OK ||
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
    const uint8_t *q;

    if (!m || i >= m->n_rows)
        return na_err(NA_ERR_RANGE, "wire BATCH_CTX: row %u of %u", i, m ? m->n_rows : 0);
    if (m->rows) {
        *r_p = m->rows[i];
        return NA_OK;
    }
    q = m->raw + CTX_FIXED + (size_t)i * CTX_ROW;
    r_p->request_id = na_ld64(q);
    r_p->position = na_ld32(q + 8);
    r_p->token = na_ld32(q + 12);
    r_p->rng = na_ld64(q + 16);
    r_p->status = (int32_t)na_ld32(q + 24);
    return NA_OK;
}

const na_wire_ops_t na_wire_ops_ctx = { "BATCH_CTX", ctx_size, ctx_write, ctx_read };

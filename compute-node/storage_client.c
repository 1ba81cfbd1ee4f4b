/* compute-node/storage_client.c — the one client of the storage-node
 * protocol: every request is built and sent by sc_request (a kind: message
 * type, answer type and flags, and a body), as an asynchronous request or a
 * synchronous call of the protocol session (rdma/session.h). See
 * compute-node/storage_client.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "compute-node/storage_client.h"

/* A kind of request: the message type sent, the type that answers it and
 * the session flags (NA_SES_*) it always goes with. */
typedef struct {
    na_wire_type_t type, reply;
    unsigned       flags;
} sc_kind_t;

static const sc_kind_t SC_OPEN    = { NA_WIRE_MSG_REQ_OPEN, NA_WIRE_MSG_ACK, 0 };
static const sc_kind_t SC_PREFILL = { NA_WIRE_MSG_PREFILL_KV, NA_WIRE_MSG_ACK, 0 };
static const sc_kind_t SC_DECODE  = { NA_WIRE_MSG_DECODE_ATTN, NA_WIRE_MSG_ATTN_OUT,
                                      NA_SES_ERR_NOTE };
static const sc_kind_t SC_FETCH   = { NA_WIRE_MSG_KV_FETCH, NA_WIRE_MSG_KV_DATA, 0 };
static const sc_kind_t SC_RELEASE = { NA_WIRE_MSG_REQ_RELEASE, NA_WIRE_MSG_ACK, 0 };
static const sc_kind_t SC_STATS   = { NA_WIRE_MSG_STATS_REQ, NA_WIRE_MSG_STATS, 0 };
static const sc_kind_t SC_PING    = { NA_WIRE_MSG_HEARTBEAT, NA_WIRE_MSG_HEARTBEAT,
                                      NA_SES_NO_LOSS };

/* Every request of this client: a message of kind k whose body is the
 * `size` bytes at `body` (the member of na_wire_msg_t.u that k's type
 * reads; NULL: no body), flagged MORE when `more`, sent with k's flags and
 * `flags` and answered by k's reply type to fn(arg): waited for (wait 1,
 * the session polled until it came) or not. */
static na_status_t sc_request(na_peer_t *p, const sc_kind_t *k, const void *body, size_t size,
                              int more, unsigned flags, int timeout_ms, na_ses_reply_fn fn,
                              uintptr_t arg, int wait)
{
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = k->type;
    m.flags = more ? NA_WIRE_F_MORE : 0;
    if (body != NULL)
        memcpy(&m.u, body, size);
    if (wait)
        return na_peer_call(p, &m, NULL, k->reply, k->flags | flags, timeout_ms, fn, arg);
    return na_peer_request(p, &m, NULL, k->reply, k->flags | flags, timeout_ms, fn, arg);
}

/* ---- REQ_OPEN ----------------------------------------------------------- */

na_status_t na_sc_open_send(na_peer_t *p, const na_wire_req_open_t *o, int timeout_ms,
                            na_ses_reply_fn fn, uintptr_t arg)
{
    return sc_request(p, &SC_OPEN, o, sizeof(*o), 0, 0, timeout_ms, fn, arg, 0);
}

/* The ACK of a REQ_OPEN: how many prompt tokens the node attached. */
static void sc_open_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                          const na_ses_in_t *in)
{
    (void)ctx;
    (void)p;
    if (st == NA_OK && in != NULL && in->m->type == NA_WIRE_MSG_ACK)
        *(int *)arg = (int)in->m->u.ack.prefix_tokens;
}

na_status_t na_sc_open(na_peer_t *p, const na_wire_req_open_t *o, int timeout_ms,
                       int *prefix_p)
{
    int hit = 0;
    na_status_t st = sc_request(p, &SC_OPEN, o, sizeof(*o), 0, 0, timeout_ms, sc_open_reply,
                                (uintptr_t)&hit, 1);
    if (prefix_p != NULL)
        *prefix_p = hit;
    return st;
}

void na_sc_open_msg(na_wire_req_open_t *o, uint64_t req, int max_tokens,
                    const na_model_config_t *mc, na_dtype_t dtype)
{
    memset(o, 0, sizeof(*o));
    o->request_id = req;
    o->max_tokens = (uint32_t)max_tokens;
    o->n_layers = (uint32_t)mc->n_layers;
    o->head_dim = (uint16_t)mc->head_dim;
    o->q_per_kv = (uint16_t)(mc->n_heads / mc->n_kv_heads);
    o->dtype = dtype;
    o->kv_h0 = 0;
    o->kv_h1 = (uint16_t)mc->n_kv_heads;
}

/* ---- PREFILL_KV --------------------------------------------------------- */

na_status_t na_sc_prefill_send(na_peer_t *p, const na_wire_kv_t *kv, int more, int timeout_ms,
                               na_ses_reply_fn fn, uintptr_t arg)
{
    return sc_request(p, &SC_PREFILL, kv, sizeof(*kv), more, 0, timeout_ms, fn, arg, 0);
}

na_status_t na_sc_prefill(na_peer_t *p, const na_wire_kv_t *kv, int timeout_ms)
{
    return sc_request(p, &SC_PREFILL, kv, sizeof(*kv), 0, 0, timeout_ms, NULL, 0, 1);
}

/* ---- DECODE_ATTN / ATTN_OUT --------------------------------------------- */

na_status_t na_sc_decode_send(na_peer_t *p, const na_wire_attn_t *a, int more, int timeout_ms,
                              na_ses_reply_fn fn, uintptr_t arg)
{
    return sc_request(p, &SC_DECODE, a, sizeof(*a), more, 0, timeout_ms, fn, arg, 0);
}

na_status_t na_sc_attn_check(const na_wire_attn_t *asked, const na_wire_attn_out_t *got,
                             char *why, size_t cap)
{
    uint32_t k;

    if (got->batch_id != asked->batch_id || got->layer != asked->layer ||
        got->entry_base != asked->entry_base || got->batch_total != asked->batch_total ||
        got->n_entries != asked->n_entries || got->head_dim != asked->head_dim ||
        got->q_per_kv != asked->q_per_kv) {
        snprintf(why, cap, "answered batch %u layer %u with wrong shapes (%u entries from %u, "
                 "head_dim %u, q_per_kv %u)", got->batch_id, got->layer, got->n_entries,
                 got->entry_base, got->head_dim, got->q_per_kv);
        return NA_ERR_PROTO;
    }
    /* a node that answers another request than asked (a wrong or repeated
     * id), other heads, or a status that is no na_status_t (the wire allows
     * -255..0; ours are NA_ERR_VERSION..-1) does not answer this part */
    for (k = 0; k < got->n_entries; k++) {
        na_wire_out_entry_t oe;
        na_wire_attn_entry_t ae;
        uint32_t nq;
        (void)na_wire_attn_get(asked, k, &ae);
        nq = ae.n_queries > 1 ? ae.n_queries : 1;
        if (na_wire_attn_out_get(got, k, &oe) != NA_OK)
            snprintf(why, cap, "answered batch %u layer %u with an unreadable entry %u",
                     got->batch_id, got->layer, got->entry_base + k);
        else if (oe.request_id != ae.request_id)
            snprintf(why, cap, "answered batch %u layer %u entry %u with request %llu where "
                     "%llu was asked", got->batch_id, got->layer, got->entry_base + k,
                     (unsigned long long)oe.request_id, (unsigned long long)ae.request_id);
        else if (oe.kv_h0 != ae.kv_h0 || oe.kv_h1 != ae.kv_h1)
            snprintf(why, cap, "answered batch %u layer %u entry %u with KV heads [%u, %u) "
                     "where [%u, %u) were asked", got->batch_id, got->layer,
                     got->entry_base + k, oe.kv_h0, oe.kv_h1, ae.kv_h0, ae.kv_h1);
        else if ((oe.n_queries > 1 ? oe.n_queries : 1) != nq)
            snprintf(why, cap, "answered batch %u layer %u entry %u with %u queries where %u "
                     "were asked", got->batch_id, got->layer, got->entry_base + k,
                     oe.n_queries, nq);
        else if (oe.status > 0 || oe.status < (int32_t)NA_ERR_VERSION)
            snprintf(why, cap, "answered batch %u layer %u entry %u with status %d, which is "
                     "no status", got->batch_id, got->layer, got->entry_base + k,
                     (int)oe.status);
        else
            continue;
        return NA_ERR_PROTO;
    }
    return NA_OK;
}

void na_sc_attn_rows(const na_wire_attn_out_t *got, uint32_t k, float *dst, size_t q_stride)
{
    na_wire_out_entry_t oe;
    size_t cnt, es;
    uint32_t t, nq;

    (void)na_wire_attn_out_get(got, k, &oe);        /* read fine by the check */
    cnt = (size_t)(oe.kv_h1 - oe.kv_h0) * got->q_per_kv * got->head_dim;
    es = na_dtype_bytes(got->dtype, 1);
    nq = oe.n_queries > 1 ? oe.n_queries : 1;
    for (t = 0; t < nq; t++)
        na_wire_rows_to_f32((const uint8_t *)oe.o + t * cnt * es, got->dtype, cnt,
                            dst + (size_t)t * q_stride);
}

int32_t na_sc_attn_take(const na_wire_attn_out_t *got, uint32_t k, float *dst)
{
    na_wire_out_entry_t oe;
    size_t cnt;

    (void)na_wire_attn_out_get(got, k, &oe);        /* read fine by the check */
    cnt = (size_t)(oe.kv_h1 - oe.kv_h0) * got->q_per_kv * got->head_dim;
    if (oe.status == 0)
        na_sc_attn_rows(got, k, dst, cnt);
    else
        memset(dst, 0, cnt * (oe.n_queries > 1 ? oe.n_queries : 1) * sizeof(float));
    return oe.status;
}

/* What a synchronous decode fills in from the ATTN_OUT of each part. */
typedef struct {
    const na_wire_attn_t *a;
    uint32_t              per, parts;   /* entries per part, parts */
    float *const         *o_out;
    int32_t              *status_out;
    uint32_t              seen, done;   /* bit c: part c answered; final replies */
    na_status_t           st;
} sc_decode_t;

/* Part c of batch a cut in parts of per entries: entries [c*per, +per) of
 * a (the last part: the rest). */
static void sc_decode_part(const na_wire_attn_t *a, uint32_t per, uint32_t c,
                           na_wire_attn_t *part)
{
    uint32_t off = c * per;

    *part = *a;
    part->entry_base = a->entry_base + off;
    part->n_entries = a->n_entries - off < per ? a->n_entries - off : per;
    part->entries = a->entries + off;
}

/* The answer to one part: checked against the part that starts at its
 * entry_base and is still owed (na_sc_attn_check), flagged MORE on all but
 * the last part; its entries taken by index in the batch. */
static void sc_decode_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                            const na_ses_in_t *in)
{
    sc_decode_t *d = (sc_decode_t *)arg;
    const na_wire_attn_t *a = d->a;
    const na_wire_attn_out_t *r;
    na_wire_attn_t asked;
    char why[NA_WIRE_TEXT_MAX];
    uint32_t off, c, k;

    (void)ctx;
    if (st != NA_OK) {          /* an entry's ERROR (a note) or the end of the peer */
        if (in != NULL)
            na_log_warn("storage node %s: %s", na_peer_name(p), in->m->u.error.text);
        else
            d->done++;
        return;
    }
    d->done++;
    r = &in->m->u.attn_out;
    off = r->entry_base - a->entry_base;        /* wraps past any part when before a */
    c = off / d->per;
    sc_decode_part(a, d->per, c < d->parts ? c : 0, &asked);
    if (c >= d->parts || (d->seen >> c & 1u))
        asked.entry_base = UINT32_MAX;          /* no such part is owed */
    if (na_sc_attn_check(&asked, r, why, sizeof(why)) != NA_OK) {
        d->st = na_err(NA_ERR_PROTO, "storage node %s: %s", na_peer_name(p), why);
        return;
    }
    if (!(in->h->flags & NA_WIRE_F_MORE) != (c + 1 == d->parts)) {
        d->st = na_err(NA_ERR_PROTO, "storage node %s: ATTN_OUT of entries [%u, +%u) of %u "
                       "(flags 0x%x) does not answer a part", na_peer_name(p), r->entry_base,
                       r->n_entries, r->batch_total, (unsigned)in->h->flags);
        return;
    }
    for (k = 0; k < r->n_entries; k++)
        d->status_out[off + k] = na_sc_attn_take(r, k, d->o_out[off + k]);
    d->seen |= 1u << c;
}

na_status_t na_sc_decode_parts(na_peer_t *p, const na_wire_attn_t *a, uint32_t parts,
                               int timeout_ms, float *const *o_out, int32_t *status_out)
{
    sc_decode_t d;
    na_status_t st = NA_OK;
    uint32_t c, sent = 0;

    if (parts < 1 || parts > NA_SC_DECODE_PARTS_MAX)
        return na_err(NA_ERR_INVALID, "storage client: a DECODE_ATTN batch goes in 1 to %d "
                      "parts, not %u", NA_SC_DECODE_PARTS_MAX, parts);
    memset(&d, 0, sizeof(d));
    d.a = a;
    d.per = a->n_entries > parts ? (a->n_entries + parts - 1) / parts : 1;
    d.parts = a->n_entries > 0 ? (a->n_entries + d.per - 1) / d.per : 1;
    d.o_out = o_out;
    d.status_out = status_out;
    d.st = NA_OK;
    /* every part but the last goes without waiting; the last is waited
     * for, then the session polled until every part sent had its final
     * reply (none is left pointing at d) or the node is gone (which fails
     * what it owes) */
    for (c = 0; c < d.parts && st == NA_OK; c++) {
        na_wire_attn_t part;
        sc_decode_part(a, d.per, c, &part);
        st = sc_request(p, &SC_DECODE, &part, sizeof(part), c + 1 < d.parts, 0, timeout_ms,
                        sc_decode_reply, (uintptr_t)&d, c + 1 == d.parts);
        sent += st == NA_OK;
    }
    while (d.done < sent && na_peer_alive(p))
        (void)na_sc_poll(p, 100);   /* a poll error too: the parts' deadlines end it */
    return st != NA_OK ? st : d.st;
}

na_status_t na_sc_decode(na_peer_t *p, const na_wire_attn_t *a, int timeout_ms,
                         float *const *o_out, int32_t *status_out)
{
    return na_sc_decode_parts(p, a, 1, timeout_ms, o_out, status_out);
}

/* ---- KV_FETCH / KV_DATA ------------------------------------------------- */

na_status_t na_sc_fetch_send(na_peer_t *p, const na_wire_kv_fetch_t *f, int timeout_ms,
                             na_ses_reply_fn fn, uintptr_t arg)
{
    return sc_request(p, &SC_FETCH, f, sizeof(*f), 0, 0, timeout_ms, fn, arg, 0);
}

/* What a synchronous fetch fills in from its KV_DATA. */
typedef struct {
    const na_wire_kv_fetch_t *f;
    int                       head_dim;
    void                     *k_out, *v_out;
    na_dtype_t                out;
    na_status_t               st;
} sc_fetch_t;

static void sc_fetch_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                           const na_ses_in_t *in)
{
    sc_fetch_t *d = (sc_fetch_t *)arg;
    const na_wire_kv_fetch_t *f = d->f;
    const na_wire_kv_t *r;
    size_t cnt;

    (void)ctx;
    if (st != NA_OK || in == NULL)
        return;
    r = &in->m->u.kv;
    if (r->request_id != f->request_id || r->layer != f->layer || r->pos0 != f->pos0 ||
        r->n_tokens != f->n_tokens || r->kv_h0 != f->kv_h0 || r->kv_h1 != f->kv_h1 ||
        r->head_dim != d->head_dim || r->dtype != f->dtype) {
        d->st = na_err(NA_ERR_PROTO, "storage node %s: KV_DATA of request %llu layer %u is not "
                       "the rows asked for", na_peer_name(p),
                       (unsigned long long)f->request_id, f->layer);
        return;
    }
    cnt = (size_t)f->n_tokens * (size_t)(f->kv_h1 - f->kv_h0) * (size_t)d->head_dim;
    if (d->out == r->dtype) {
        memcpy(d->k_out, r->k, na_dtype_bytes(r->dtype, cnt));
        memcpy(d->v_out, r->v, na_dtype_bytes(r->dtype, cnt));
    } else {
        na_wire_rows_to_f32(r->k, r->dtype, cnt, d->k_out);
        na_wire_rows_to_f32(r->v, r->dtype, cnt, d->v_out);
    }
}

na_status_t na_sc_fetch(na_peer_t *p, const na_wire_kv_fetch_t *f, int head_dim,
                        int timeout_ms, void *k_out, void *v_out, na_dtype_t out_dtype)
{
    sc_fetch_t d = { f, head_dim, k_out, v_out, out_dtype, NA_OK };
    na_status_t st;

    if (out_dtype != f->dtype && out_dtype != NA_DTYPE_F32)
        return na_err(NA_ERR_INVALID, "storage client: KV_FETCH rows in %s cannot be read as %s "
                      "(only as sent or f32)", na_dtype_name(f->dtype), na_dtype_name(out_dtype));
    st = sc_request(p, &SC_FETCH, f, sizeof(*f), 0, 0, timeout_ms, sc_fetch_reply,
                    (uintptr_t)&d, 1);
    return st != NA_OK ? st : d.st;
}

/* ---- REQ_RELEASE -------------------------------------------------------- */

static na_status_t sc_release(na_peer_t *p, uint64_t request_id, int status, int timeout_ms,
                              na_ses_reply_fn fn, uintptr_t arg, int wait)
{
    na_wire_req_release_t r;

    memset(&r, 0, sizeof(r));
    r.request_id = request_id;
    r.status = status;
    return sc_request(p, &SC_RELEASE, &r, sizeof(r), 0, 0, timeout_ms, fn, arg, wait);
}

na_status_t na_sc_release_send(na_peer_t *p, uint64_t request_id, int status, int timeout_ms,
                               na_ses_reply_fn fn, uintptr_t arg)
{
    return sc_release(p, request_id, status, timeout_ms, fn, arg, 0);
}

na_status_t na_sc_release(na_peer_t *p, uint64_t request_id, int status, int timeout_ms)
{
    return sc_release(p, request_id, status, timeout_ms, NULL, 0, 1);
}

/* ---- STATS_REQ / STATS -------------------------------------------------- */

na_status_t na_sc_stats_send(na_peer_t *p, unsigned flags, int timeout_ms, na_ses_reply_fn fn,
                             uintptr_t arg)
{
    return sc_request(p, &SC_STATS, NULL, 0, 0, flags, timeout_ms, fn, arg, 0);
}

static void sc_stats_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                           const na_ses_in_t *in)
{
    (void)ctx;
    (void)p;
    if (st == NA_OK && in != NULL)
        na_stats_view(&in->m->u.stats, (na_stats_view_t *)arg);
}

na_status_t na_sc_stats(na_peer_t *p, unsigned flags, int timeout_ms, na_stats_view_t *v)
{
    return sc_request(p, &SC_STATS, NULL, 0, 0, flags, timeout_ms, sc_stats_reply, (uintptr_t)v,
                      1);
}

/* ---- HEARTBEAT ---------------------------------------------------------- */

na_status_t na_sc_ping(na_peer_t *p, int timeout_ms)
{
    na_wire_heartbeat_t hb;

    memset(&hb, 0, sizeof(hb));
    hb.send_ns = na_xp_now_ns();
    return sc_request(p, &SC_PING, &hb, sizeof(hb), 0, 0, timeout_ms, NULL, 0, 1);
}

na_status_t na_sc_poll(na_peer_t *p, int timeout_ms)
{
    na_ses_t *ses = na_peer_ses(p);
    na_status_t st = NA_OK;

    if (na_peer_alive(p))
        st = na_ses_poll(ses, timeout_ms);
    if (!na_peer_alive(p))
        return na_err(NA_ERR_PEER, "storage node %s is gone: %s", na_peer_name(p),
                      na_peer_why(p));
    return st == NA_ERR_TIMEOUT ? NA_OK : st;
}

/* compute-node/storage_client.c — blocking client calls of the storage-node
 * protocol. See compute-node/storage_client.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "compute-node/storage_client.h"

#define NA_SC_WAIT_MS  60000      /* bound on one call's answer */
#define NA_SC_SLICE_MS 100

struct na_sc {
    na_xp_t    *xp;
    na_xp_ep_t *ep;
    uint32_t    seq;
    int         lost;
};

na_status_t na_sc_connect(na_xp_t *xp, const char *host, int port, na_sc_t **sc_p)
{
    na_sc_t *sc = calloc(1, sizeof(*sc));
    na_status_t st;

    if (sc == NULL)
        return na_err(NA_ERR_NOMEM, "storage client: out of memory");
    sc->xp = xp;
    st = na_xp_connect(xp, host, port, &sc->ep);
    if (st != NA_OK) {
        free(sc);
        return st;
    }
    *sc_p = sc;
    return NA_OK;
}

na_xp_ep_t *na_sc_ep(na_sc_t *sc) { return sc->ep; }

/* Send m on ep with our sequence counter. */
static na_status_t sc_send_ep(na_xp_ep_t *ep, uint32_t seq, na_wire_msg_t *m)
{
    size_t size, len;
    uint8_t *buf;
    na_status_t st;

    m->seq = seq;
    m->time_ns = na_xp_now_ns();
    st = na_wire_msg_size(m, &size);
    if (st != NA_OK)
        return st;
    buf = calloc(1, size);
    if (buf == NULL)
        return na_err(NA_ERR_NOMEM, "storage client: out of memory for %zu bytes", size);
    st = na_wire_encode(m, buf, size, &len);
    if (st == NA_OK)
        st = na_xp_send(ep, buf, NA_WIRE_HDR_SIZE, buf + NA_WIRE_HDR_SIZE, len - NA_WIRE_HDR_SIZE);
    free(buf);
    return st;
}

na_status_t na_sc_send(na_sc_t *sc, na_wire_msg_t *m)
{
    if (sc->lost)
        return na_err(NA_ERR_PEER, "storage node %s is gone", na_xp_ep_name(sc->ep));
    return sc_send_ep(sc->ep, ++sc->seq, m);
}

void na_sc_close(na_sc_t *sc)
{
    na_wire_msg_t m;

    if (sc == NULL)
        return;
    if (!sc->lost && na_xp_ep_alive(sc->ep)) {
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_BYE;
        snprintf(m.u.bye.text, sizeof(m.u.bye.text), "done");
        (void)na_sc_send(sc, &m);
    }
    na_xp_ep_close(sc->ep);
    free(sc);
}

/* Answer a HEARTBEAT request on ep. */
static void sc_heartbeat_reply(na_xp_ep_t *ep, const na_wire_heartbeat_t *hb)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_HEARTBEAT;
    m.flags = NA_WIRE_F_REPLY;
    m.u.heartbeat.send_ns = na_xp_now_ns();
    m.u.heartbeat.echo_ns = hb->send_ns;
    if (sc_send_ep(ep, 0, &m) != NA_OK)
        na_log_debug("storage client: heartbeat reply to %s: %s", na_xp_ep_name(ep), na_errmsg());
}

/* What a wait looks for. */
typedef struct {
    na_wire_type_t type;       /* answer type (ACK, ATTN_OUT, KV_DATA, STATS), 0 = none */
    na_wire_type_t about;      /* for ACK / ERROR: the message answered */
    uint64_t       req;        /* request id (0 = any) */
    uint32_t       batch, layer;
    int            errors_ok;  /* ERROR for our request: log and keep waiting (ATTN_OUT) */
} sc_want_t;

/* Wait for the answer w from sc's node. On NA_OK *msg_p (release it) holds it
 * and h/m are decoded. */
static na_status_t sc_wait(na_sc_t *sc, const sc_want_t *w, int timeout_ms,
                           na_xp_msg_t **msg_p, na_wire_hdr_t *h, na_wire_msg_t *m)
{
    uint64_t deadline = na_xp_now_ns() + (uint64_t)timeout_ms * 1000000ull;

    for (;;) {
        na_xp_msg_t *msg;
        na_status_t st;
        uint64_t now = na_xp_now_ns();
        int slice = NA_SC_SLICE_MS;

        if (now >= deadline && w->type != 0)
            return na_err(NA_ERR_TIMEOUT, "storage node %s: no %s within %d ms",
                          na_xp_ep_name(sc->ep), na_wire_type_name(w->type), timeout_ms);
        if (now >= deadline)
            return NA_OK;
        if ((deadline - now) / 1000000ull < (uint64_t)slice)
            slice = (int)((deadline - now) / 1000000ull);
        st = na_xp_recv(sc->xp, slice, &msg);
        if (st == NA_ERR_TIMEOUT)
            continue;
        if (st != NA_OK)
            return st;
        if (msg->kind == NA_XP_EV_LOST) {
            int ours = msg->ep == sc->ep;
            char why[200];
            snprintf(why, sizeof(why), "%s", na_status_string(msg->status));
            na_xp_msg_release(sc->xp, msg);
            if (!ours)
                continue;
            sc->lost = 1;
            return na_err(NA_ERR_PEER, "storage node %s lost: %s", na_xp_ep_name(sc->ep), why);
        }
        if (msg->kind != NA_XP_MSG_DATA) {
            na_xp_msg_release(sc->xp, msg);      /* we do not listen: nothing to accept */
            continue;
        }
        st = na_wire_hdr_decode(msg->hdr, msg->hdr_len, h);
        if (st == NA_OK)
            st = na_wire_decode(h, msg->data, msg->len, m);
        if (st != NA_OK) {
            int ours = msg->ep == sc->ep;
            na_xp_msg_release(sc->xp, msg);
            if (ours)
                return na_err_prefix(NA_ERR_PROTO, "storage node %s: ", na_xp_ep_name(sc->ep));
            continue;
        }
        if (m->type == NA_WIRE_MSG_HEARTBEAT && !(m->flags & NA_WIRE_F_REPLY)) {
            sc_heartbeat_reply(msg->ep, &m->u.heartbeat);
            na_xp_msg_release(sc->xp, msg);
            continue;
        }
        if (msg->ep != sc->ep) {
            na_log_debug("storage client: %s from %s ignored", na_wire_type_name(m->type),
                         na_xp_ep_name(msg->ep));
            na_xp_msg_release(sc->xp, msg);
            continue;
        }
        if (m->type == NA_WIRE_MSG_BYE) {
            char text[NA_WIRE_TEXT_MAX + 1];
            snprintf(text, sizeof(text), "%s", m->u.bye.text);
            na_xp_msg_release(sc->xp, msg);
            sc->lost = 1;
            return na_err(NA_ERR_PEER, "storage node %s said BYE: %s", na_xp_ep_name(sc->ep), text);
        }
        if (m->type == NA_WIRE_MSG_ERROR && w->type != 0 &&
            (m->u.error.request_id == w->req || m->u.error.request_id == 0 ||
             (w->errors_ok && m->u.error.about_type == w->about))) {
            na_status_t es = (na_status_t)m->u.error.status;
            char text[NA_WIRE_TEXT_MAX + 1];
            snprintf(text, sizeof(text), "%s", m->u.error.text);
            na_xp_msg_release(sc->xp, msg);
            if (w->errors_ok) {
                na_log_warn("storage node %s: %s", na_xp_ep_name(sc->ep), text);
                continue;
            }
            return na_err(es < 0 ? es : NA_ERR_INTERNAL, "%s", text);
        }
        if (w->type != 0 && m->type == w->type) {
            int match = 1;
            if (w->type == NA_WIRE_MSG_ACK)
                match = m->u.ack.request_id == w->req && m->u.ack.about_type == w->about;
            else if (w->type == NA_WIRE_MSG_ATTN_OUT)
                match = m->u.attn_out.batch_id == w->batch && m->u.attn_out.layer == w->layer;
            else if (w->type == NA_WIRE_MSG_KV_DATA)
                match = m->u.kv.request_id == w->req && m->u.kv.layer == w->layer;
            if (match) {
                *msg_p = msg;
                return NA_OK;
            }
        }
        na_log_debug("storage client: unexpected %s from %s ignored", na_wire_type_name(m->type),
                     na_xp_ep_name(sc->ep));
        na_xp_msg_release(sc->xp, msg);
    }
}

/* Send m and wait for an ACK about it. */
static na_status_t sc_call_ack(na_sc_t *sc, na_wire_msg_t *m, uint64_t req)
{
    sc_want_t w = { NA_WIRE_MSG_ACK, m->type, req, 0, 0, 0 };
    na_wire_hdr_t h;
    na_wire_msg_t r;
    na_xp_msg_t *msg;
    na_status_t st = na_sc_send(sc, m);

    if (st != NA_OK)
        return st;
    st = sc_wait(sc, &w, NA_SC_WAIT_MS, &msg, &h, &r);
    if (st == NA_OK)
        na_xp_msg_release(sc->xp, msg);
    return st;
}

na_status_t na_sc_open(na_sc_t *sc, const na_wire_req_open_t *o)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_OPEN;
    m.u.req_open = *o;
    return sc_call_ack(sc, &m, o->request_id);
}

na_status_t na_sc_prefill(na_sc_t *sc, const na_wire_kv_t *kv)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_PREFILL_KV;
    m.u.kv = *kv;
    return sc_call_ack(sc, &m, kv->request_id);
}

na_status_t na_sc_release(na_sc_t *sc, uint64_t request_id)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_RELEASE;
    m.u.req_release.request_id = request_id;
    return sc_call_ack(sc, &m, request_id);
}

na_status_t na_sc_decode(na_sc_t *sc, const na_wire_attn_t *a, float *const *o_out,
                         int32_t *status_out)
{
    sc_want_t w = { NA_WIRE_MSG_ATTN_OUT, NA_WIRE_MSG_DECODE_ATTN, 0, a->batch_id, a->layer, 1 };
    na_wire_hdr_t h;
    na_wire_msg_t m, r;
    na_xp_msg_t *msg;
    na_status_t st;
    uint32_t i;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_DECODE_ATTN;
    m.u.attn = *a;
    st = na_sc_send(sc, &m);
    if (st != NA_OK)
        return st;
    st = sc_wait(sc, &w, NA_SC_WAIT_MS, &msg, &h, &r);
    if (st != NA_OK)
        return st;
    if (r.u.attn_out.n_entries != a->n_entries || r.u.attn_out.head_dim != a->head_dim ||
        r.u.attn_out.q_per_kv != a->q_per_kv) {
        na_xp_msg_release(sc->xp, msg);
        return na_err(NA_ERR_PROTO, "storage node %s: ATTN_OUT of %u entries (head_dim %u, "
                      "q_per_kv %u) answers a DECODE_ATTN of %u (%u, %u)", na_xp_ep_name(sc->ep),
                      r.u.attn_out.n_entries, r.u.attn_out.head_dim, r.u.attn_out.q_per_kv,
                      a->n_entries, a->head_dim, a->q_per_kv);
    }
    for (i = 0; i < a->n_entries && st == NA_OK; i++) {
        na_wire_out_entry_t oe;
        na_wire_attn_entry_t ae;
        size_t cnt;
        (void)na_wire_attn_out_get(&r.u.attn_out, i, &oe);
        (void)na_wire_attn_get(a, i, &ae);
        if (oe.request_id != ae.request_id || oe.kv_h0 != ae.kv_h0 || oe.kv_h1 != ae.kv_h1) {
            st = na_err(NA_ERR_PROTO, "storage node %s: ATTN_OUT entry %u is request %llu, "
                        "expected %llu", na_xp_ep_name(sc->ep), i,
                        (unsigned long long)oe.request_id, (unsigned long long)ae.request_id);
            break;
        }
        cnt = (size_t)(oe.kv_h1 - oe.kv_h0) * a->q_per_kv * a->head_dim;
        status_out[i] = oe.status;
        if (oe.status == 0)
            na_wire_rows_to_f32(oe.o, r.u.attn_out.dtype, cnt, o_out[i]);
        else
            memset(o_out[i], 0, cnt * sizeof(float));
    }
    na_xp_msg_release(sc->xp, msg);
    return st;
}

na_status_t na_sc_fetch(na_sc_t *sc, const na_wire_kv_fetch_t *f, int head_dim,
                        float *k_out, float *v_out)
{
    sc_want_t w = { NA_WIRE_MSG_KV_DATA, NA_WIRE_MSG_KV_FETCH, f->request_id, 0, f->layer, 0 };
    na_wire_hdr_t h;
    na_wire_msg_t m, r;
    na_xp_msg_t *msg;
    na_status_t st;
    size_t cnt;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_KV_FETCH;
    m.u.kv_fetch = *f;
    st = na_sc_send(sc, &m);
    if (st != NA_OK)
        return st;
    st = sc_wait(sc, &w, NA_SC_WAIT_MS, &msg, &h, &r);
    if (st != NA_OK)
        return st;
    if (r.u.kv.pos0 != f->pos0 || r.u.kv.n_tokens != f->n_tokens || r.u.kv.kv_h0 != f->kv_h0 ||
        r.u.kv.kv_h1 != f->kv_h1 || r.u.kv.head_dim != head_dim) {
        na_xp_msg_release(sc->xp, msg);
        return na_err(NA_ERR_PROTO, "storage node %s: KV_DATA does not match the KV_FETCH",
                      na_xp_ep_name(sc->ep));
    }
    cnt = (size_t)f->n_tokens * (size_t)(f->kv_h1 - f->kv_h0) * (size_t)head_dim;
    na_wire_rows_to_f32(r.u.kv.k, r.u.kv.dtype, cnt, k_out);
    na_wire_rows_to_f32(r.u.kv.v, r.u.kv.dtype, cnt, v_out);
    na_xp_msg_release(sc->xp, msg);
    return NA_OK;
}

na_status_t na_sc_stat(na_sc_t *sc, const char *key, uint64_t *value_p)
{
    sc_want_t w = { NA_WIRE_MSG_STATS, NA_WIRE_MSG_STATS_REQ, 0, 0, 0, 0 };
    na_wire_hdr_t h;
    na_wire_msg_t m, r;
    na_xp_msg_t *msg;
    na_status_t st;
    uint32_t i;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    st = na_sc_send(sc, &m);
    if (st != NA_OK)
        return st;
    st = sc_wait(sc, &w, NA_SC_WAIT_MS, &msg, &h, &r);
    if (st != NA_OK)
        return st;
    st = na_err(NA_ERR_NOT_FOUND, "storage node %s: no stat '%s'", na_xp_ep_name(sc->ep), key);
    for (i = 0; i < r.u.stats.n; i++) {
        na_wire_stat_t s;
        (void)na_wire_stats_get(&r.u.stats, i, &s);
        if (!strcmp(s.key, key)) {
            *value_p = s.value;
            st = NA_OK;
            break;
        }
    }
    na_xp_msg_release(sc->xp, msg);
    return st;
}

na_status_t na_sc_poll(na_sc_t *sc, int timeout_ms)
{
    sc_want_t w;
    na_wire_hdr_t h;
    na_wire_msg_t m;
    na_xp_msg_t *msg = NULL;

    memset(&w, 0, sizeof(w));
    if (sc->lost)
        return na_err(NA_ERR_PEER, "storage node %s is gone", na_xp_ep_name(sc->ep));
    return sc_wait(sc, &w, timeout_ms > 0 ? timeout_ms : 1, &msg, &h, &m);
}

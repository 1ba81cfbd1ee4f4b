/* compute-node/storage_client.c — blocking client calls of the storage-node
 * protocol, as requests on a protocol session (rdma/session.h). See
 * compute-node/storage_client.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "compute-node/storage_client.h"

#define NA_SC_WAIT_MS  60000      /* bound on one call's answer */

struct na_sc {
    na_peer_t *p;
};

na_status_t na_sc_connect(na_ses_t *ses, const char *host, int port, na_sc_t **sc_p)
{
    na_sc_t *sc = calloc(1, sizeof(*sc));
    na_status_t st;

    if (sc == NULL)
        return na_err(NA_ERR_NOMEM, "storage client: out of memory");
    st = na_ses_connect(ses, host, port, &sc->p);
    if (st != NA_OK) {
        free(sc);
        return st;
    }
    *sc_p = sc;
    return NA_OK;
}

na_xp_ep_t *na_sc_ep(na_sc_t *sc) { return na_peer_ep(sc->p); }
na_peer_t  *na_sc_peer(na_sc_t *sc) { return sc->p; }

na_status_t na_sc_send(na_sc_t *sc, na_wire_msg_t *m)
{
    return na_peer_send(sc->p, m, NULL);
}

void na_sc_close(na_sc_t *sc)
{
    if (sc == NULL)
        return;
    na_peer_close(sc->p, 0, "done");
    free(sc);
}

/* Send m and wait for the ACK about it. */
static na_status_t sc_call_ack(na_sc_t *sc, na_wire_msg_t *m)
{
    return na_peer_call(sc->p, m, NULL, NA_WIRE_MSG_ACK, 0, NA_SC_WAIT_MS, NULL, 0);
}

na_status_t na_sc_open(na_sc_t *sc, const na_wire_req_open_t *o)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_OPEN;
    m.u.req_open = *o;
    return sc_call_ack(sc, &m);
}

na_status_t na_sc_prefill(na_sc_t *sc, const na_wire_kv_t *kv)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_PREFILL_KV;
    m.u.kv = *kv;
    return sc_call_ack(sc, &m);
}

na_status_t na_sc_release(na_sc_t *sc, uint64_t request_id)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_RELEASE;
    m.u.req_release.request_id = request_id;
    return sc_call_ack(sc, &m);
}

/* What a decode call fills in from its ATTN_OUT. */
typedef struct {
    const na_wire_attn_t *a;
    float *const         *o_out;
    int32_t              *status_out;
    na_status_t           st;
} sc_decode_t;

static void sc_decode_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                            const na_ses_in_t *in)
{
    sc_decode_t *d = (sc_decode_t *)arg;
    const na_wire_attn_t *a = d->a;
    const na_wire_attn_out_t *r;
    uint32_t i;

    (void)ctx;
    if (st != NA_OK) {          /* an entry's ERROR (a note) or the end of the peer */
        if (in != NULL)
            na_log_warn("storage node %s: %s", na_peer_name(p), in->m->u.error.text);
        return;
    }
    r = &in->m->u.attn_out;
    if (r->n_entries != a->n_entries || r->head_dim != a->head_dim ||
        r->q_per_kv != a->q_per_kv) {
        d->st = na_err(NA_ERR_PROTO, "storage node %s: ATTN_OUT of %u entries (head_dim %u, "
                       "q_per_kv %u) answers a DECODE_ATTN of %u (%u, %u)", na_peer_name(p),
                       r->n_entries, r->head_dim, r->q_per_kv, a->n_entries, a->head_dim,
                       a->q_per_kv);
        return;
    }
    for (i = 0; i < a->n_entries; i++) {
        na_wire_out_entry_t oe;
        na_wire_attn_entry_t ae;
        size_t cnt;
        (void)na_wire_attn_out_get(r, i, &oe);
        (void)na_wire_attn_get(a, i, &ae);
        if (oe.request_id != ae.request_id || oe.kv_h0 != ae.kv_h0 || oe.kv_h1 != ae.kv_h1) {
            d->st = na_err(NA_ERR_PROTO, "storage node %s: ATTN_OUT entry %u is request %llu, "
                           "expected %llu", na_peer_name(p), i,
                           (unsigned long long)oe.request_id, (unsigned long long)ae.request_id);
            return;
        }
        cnt = (size_t)(oe.kv_h1 - oe.kv_h0) * a->q_per_kv * a->head_dim;
        d->status_out[i] = oe.status;
        if (oe.status == 0)
            na_wire_rows_to_f32(oe.o, r->dtype, cnt, d->o_out[i]);
        else
            memset(d->o_out[i], 0, cnt * sizeof(float));
    }
}

na_status_t na_sc_decode(na_sc_t *sc, const na_wire_attn_t *a, float *const *o_out,
                         int32_t *status_out)
{
    sc_decode_t d = { a, o_out, status_out, NA_OK };
    na_wire_msg_t m;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_DECODE_ATTN;
    m.u.attn = *a;
    st = na_peer_call(sc->p, &m, NULL, NA_WIRE_MSG_ATTN_OUT, NA_SES_ERR_NOTE, NA_SC_WAIT_MS,
                      sc_decode_reply, (uintptr_t)&d);
    return st != NA_OK ? st : d.st;
}

/* What a fetch call fills in from its KV_DATA. */
typedef struct {
    const na_wire_kv_fetch_t *f;
    int                       head_dim;
    float                    *k_out, *v_out;
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
    if (st != NA_OK)
        return;
    r = &in->m->u.kv;
    if (r->pos0 != f->pos0 || r->n_tokens != f->n_tokens || r->kv_h0 != f->kv_h0 ||
        r->kv_h1 != f->kv_h1 || r->head_dim != d->head_dim) {
        d->st = na_err(NA_ERR_PROTO, "storage node %s: KV_DATA does not match the KV_FETCH",
                       na_peer_name(p));
        return;
    }
    cnt = (size_t)f->n_tokens * (size_t)(f->kv_h1 - f->kv_h0) * (size_t)d->head_dim;
    na_wire_rows_to_f32(r->k, r->dtype, cnt, d->k_out);
    na_wire_rows_to_f32(r->v, r->dtype, cnt, d->v_out);
}

na_status_t na_sc_fetch(na_sc_t *sc, const na_wire_kv_fetch_t *f, int head_dim,
                        float *k_out, float *v_out)
{
    sc_fetch_t d = { f, head_dim, k_out, v_out, NA_OK };
    na_wire_msg_t m;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_KV_FETCH;
    m.u.kv_fetch = *f;
    st = na_peer_call(sc->p, &m, NULL, NA_WIRE_MSG_KV_DATA, 0, NA_SC_WAIT_MS, sc_fetch_reply,
                      (uintptr_t)&d);
    return st != NA_OK ? st : d.st;
}

/* What a stat call looks for. */
typedef struct {
    const char *key;
    uint64_t    value;
    int         found;
} sc_stat_t;

static void sc_stat_reply(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                          const na_ses_in_t *in)
{
    sc_stat_t *d = (sc_stat_t *)arg;
    uint32_t i;

    (void)ctx;
    (void)p;
    for (i = 0; st == NA_OK && i < in->m->u.stats.n; i++) {
        na_wire_stat_t s;
        (void)na_wire_stats_get(&in->m->u.stats, i, &s);
        if (!strcmp(s.key, d->key)) {
            d->value = s.value;
            d->found = 1;
            return;
        }
    }
}

na_status_t na_sc_stat(na_sc_t *sc, const char *key, uint64_t *value_p)
{
    sc_stat_t d = { key, 0, 0 };
    na_wire_msg_t m;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    st = na_peer_call(sc->p, &m, NULL, NA_WIRE_MSG_STATS, 0, NA_SC_WAIT_MS, sc_stat_reply,
                      (uintptr_t)&d);
    if (st != NA_OK)
        return st;
    if (!d.found)
        return na_err(NA_ERR_NOT_FOUND, "storage node %s: no stat '%s'", na_peer_name(sc->p),
                      key);
    *value_p = d.value;
    return NA_OK;
}

na_status_t na_sc_poll(na_sc_t *sc, int timeout_ms)
{
    na_ses_t *ses = na_peer_ses(sc->p);
    na_status_t st = NA_OK;

    if (na_peer_alive(sc->p))
        st = na_ses_poll(ses, timeout_ms);
    if (!na_peer_alive(sc->p))
        return na_err(NA_ERR_PEER, "storage node %s is gone: %s", na_peer_name(sc->p),
                      na_peer_why(sc->p));
    return st == NA_ERR_TIMEOUT ? NA_OK : st;
}

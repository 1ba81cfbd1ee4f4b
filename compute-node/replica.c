/* compute-node/replica.c — replica 0's side of the compute link for
 * rotational pipelining (see compute-node/replica.h): connect to the other
 * compute replicas, open / prefill / release requests on them, and move
 * batch contexts (BATCH_CTX) back and forth. The replicas' service loop is in
 * compute-node/replica_serve.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "compute-node/replica.h"
#include "rdma/xp_cfg.h"

#define NA_REP_QMAX   64        /* contexts received while waiting for an answer */
#define NA_REP_WAIT_MS 200      /* one wait slice */

struct na_rep {
    const na_cfg_t *cfg;
    na_xp_t        *xp;
    int             n;                       /* replicas, this one included */
    na_xp_ep_t     *ep[NA_REP_MAX];          /* [1..n-1] */
    char            name[NA_REP_MAX][NA_WIRE_NAME_MAX];
    int             lost[NA_REP_MAX];
    na_xp_msg_t    *q[NA_REP_QMAX];          /* BATCH_CTX kept for na_rep_recv_ctx, FIFO */
    int             qh, qn;
    uint32_t        seq;
    na_rep_stats_t  st;
    na_asvc_t      *svc;                     /* served while waiting for an answer, or NULL */
};

void na_rep_xp_opts(const na_cfg_t *cfg, const char *name, na_xp_opts_t *xo)
{
    na_xp_opts_from_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, (size_t)NA_WIRE_MAX_PAYLOAD, xo);
}

na_status_t na_rep_send_msg(na_xp_ep_t *ep, const na_wire_msg_t *m, uint64_t *bytes_p)
{
    size_t size, len;
    uint8_t *buf;
    na_status_t st;

    st = na_wire_msg_size(m, &size);
    if (st != NA_OK)
        return st;
    buf = malloc(size);
    if (buf == NULL)
        return na_err(NA_ERR_NOMEM, "replica link: out of memory for a %zu-byte message", size);
    st = na_wire_encode(m, buf, size, &len);
    if (st == NA_OK)
        st = na_xp_send(ep, buf, NA_WIRE_HDR_SIZE, buf + NA_WIRE_HDR_SIZE,
                        len - NA_WIRE_HDR_SIZE);
    free(buf);
    if (st == NA_OK && bytes_p != NULL)
        *bytes_p += len;
    return st;
}

na_status_t na_rep_create(const na_cfg_t *cfg, const char *name, na_rep_t **r_p)
{
    na_xp_opts_t xo;
    na_rep_t *r;
    na_status_t st;
    int i;

    if (cfg->n_compute < 2 || cfg->n_compute > NA_REP_MAX)
        return na_err(NA_ERR_RANGE, "replicas: %d compute nodes out of range [2, %d]",
                      cfg->n_compute, NA_REP_MAX);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "replicas: out of memory");
    r->cfg = cfg;
    r->n = cfg->n_compute;
    na_rep_xp_opts(cfg, name, &xo);
    st = na_xp_create(&xo, &r->xp);
    if (st != NA_OK) {
        free(r);
        return st;
    }
    for (i = 1; i < r->n; i++) {
        const na_cfg_node_t *nd = &cfg->nodes[i];
        snprintf(r->name[i], sizeof(r->name[i]), "%s", nd->name);
        if (nd->port <= 0) {
            st = na_err(NA_ERR_INVALID, "replicas: compute node %s has no port: rotational "
                        "pipelining needs one on every compute node but the first", nd->name);
            goto fail_link;
        }
        st = na_xp_connect(r->xp, nd->host, (int)nd->port, &r->ep[i]);
        if (st != NA_OK) {
            st = na_err(NA_ERR_PEER, "replicas: compute replica %s (%s:%ld) unreachable: %s",
                        nd->name, nd->host, nd->port, na_errmsg());
            goto fail_link;
        }
    }
    *r_p = r;
    return NA_OK;

fail_link:
    na_rep_destroy(r);
    return st;
}

void na_rep_destroy(na_rep_t *r)
{
    na_wire_msg_t m;
    int i;

    if (r == NULL)
        return;
    while (r->qn > 0) {
        na_xp_msg_release(r->xp, r->q[r->qh]);
        r->qh = (r->qh + 1) % NA_REP_QMAX;
        r->qn--;
    }
    for (i = 1; i < r->n; i++) {
        if (r->ep[i] == NULL)
            continue;
        if (!r->lost[i] && na_xp_ep_alive(r->ep[i])) {
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_BYE;
            snprintf(m.u.bye.text, sizeof(m.u.bye.text), "done");
            (void)na_rep_send_msg(r->ep[i], &m, NULL);
        }
        na_xp_ep_close(r->ep[i]);
    }
    na_xp_destroy(r->xp);
    free(r);
}

void na_rep_attach_service(na_rep_t *r, na_asvc_t *svc)
{
    if (r != NULL)
        r->svc = svc;
}

int na_rep_count(const na_rep_t *r)
{
    return r != NULL ? r->n : 1;
}

void na_rep_stats(const na_rep_t *r, na_rep_stats_t *out)
{
    *out = r->st;
}

/* The replica index of endpoint ep, or -1. */
static int na_rep_of(const na_rep_t *r, const na_xp_ep_t *ep)
{
    int i;
    for (i = 1; i < r->n; i++)
        if (r->ep[i] == ep)
            return i;
    return -1;
}

/* Send m to replica w. */
static na_status_t na_rep_send(na_rep_t *r, int w, na_wire_msg_t *m)
{
    na_status_t st;

    if (w < 1 || w >= r->n)
        return na_err(NA_ERR_INTERNAL, "replicas: no replica %d", w);
    if (r->lost[w])
        return na_err(NA_ERR_PEER, "compute replica %s is gone", r->name[w]);
    m->seq = ++r->seq;
    m->time_ns = na_xp_now_ns();
    st = na_rep_send_msg(r->ep[w], m, &r->st.bytes_sent);
    if (st != NA_OK && st != NA_ERR_INVALID && st != NA_ERR_NOMEM) {
        r->lost[w] = 1;
        return na_err(NA_ERR_PEER, "compute replica %s: %s", r->name[w], na_errmsg());
    }
    return st;
}

/* Receive one message (up to timeout_ms). BATCH_CTX messages are queued;
 * HEARTBEATs answered; an ACK / ERROR about (w, id) sets *answered_p and its
 * status. Returns NA_ERR_TIMEOUT when nothing came, NA_ERR_PEER when a
 * replica was lost or sent garbage. */
static na_status_t na_rep_pump(na_rep_t *r, int timeout_ms, int w, uint64_t id,
                               int *answered_p)
{
    na_xp_msg_t *msg;
    na_wire_hdr_t h;
    na_wire_msg_t m;
    na_status_t st;
    int j;

    st = na_xp_recv(r->xp, timeout_ms, &msg);
    if (st != NA_OK)
        return st;
    j = na_rep_of(r, msg->ep);
    if (j < 0) {
        na_xp_msg_release(r->xp, msg);
        return NA_OK;
    }
    if (msg->kind == NA_XP_EV_LOST) {
        na_xp_msg_release(r->xp, msg);
        r->lost[j] = 1;
        return na_err(NA_ERR_PEER, "compute replica %s was lost", r->name[j]);
    }
    if (msg->kind != NA_XP_MSG_DATA) {
        na_xp_msg_release(r->xp, msg);
        return NA_OK;
    }
    r->st.bytes_recv += msg->hdr_len + msg->len;
    st = na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h);
    if (st == NA_OK)
        st = na_wire_decode(&h, msg->data, msg->len, &m);
    if (st != NA_OK) {
        na_xp_msg_release(r->xp, msg);
        r->lost[j] = 1;
        return na_err(NA_ERR_PEER, "compute replica %s sent a malformed message: %s",
                      r->name[j], na_errmsg());
    }
    switch (m.type) {
    case NA_WIRE_MSG_BATCH_CTX:
        if (r->qn == NA_REP_QMAX) {
            na_xp_msg_release(r->xp, msg);
            return na_err(NA_ERR_INTERNAL, "replicas: more than %d contexts pending",
                          NA_REP_QMAX);
        }
        r->q[(r->qh + r->qn) % NA_REP_QMAX] = msg;
        r->qn++;
        return NA_OK;
    case NA_WIRE_MSG_ACK:
        if (j == w && m.u.ack.request_id == id)
            *answered_p = 1;
        st = NA_OK;
        break;
    case NA_WIRE_MSG_ERROR:
        if (j == w && m.u.error.request_id == id) {
            *answered_p = 1;
            st = na_err((na_status_t)m.u.error.status, "compute replica %s: %s", r->name[j],
                        m.u.error.text);
        } else {
            na_log_warn("compute replica %s: %s", r->name[j], m.u.error.text);
        }
        break;
    case NA_WIRE_MSG_BYE:
        r->lost[j] = 1;
        st = na_err(NA_ERR_PEER, "compute replica %s left: %s", r->name[j], m.u.bye.text);
        break;
    default:
        break;
    }
    na_xp_msg_release(r->xp, msg);
    return st;
}

/* Send m to replica w and wait for its ACK / ERROR about request id. */
static na_status_t na_rep_call(na_rep_t *r, int w, na_wire_msg_t *m, uint64_t id)
{
    int answered = 0, waited = 0;
    na_status_t st = na_rep_send(r, w, m);

    while (st == NA_OK && !answered) {
        st = na_rep_pump(r, r->svc != NULL ? 5 : NA_REP_WAIT_MS, w, id, &answered);
        if (r->svc != NULL)
            na_asvc_progress(r->svc);       /* the storage nodes' heartbeats meanwhile */
        if (st == NA_ERR_TIMEOUT) {
            waited += r->svc != NULL ? 5 : NA_REP_WAIT_MS;
            st = waited < 6 * (int)r->cfg->transport.timeout_ms ? NA_OK :
                 na_err(NA_ERR_PEER, "compute replica %s did not answer %s within %d ms",
                        r->name[w], na_wire_type_name(m->type), waited);
        }
        if (st == NA_OK && r->lost[w])
            st = na_err(NA_ERR_PEER, "compute replica %s is gone", r->name[w]);
    }
    return st;
}

na_status_t na_rep_open(na_rep_t *r, int w, uint64_t id, int max_tokens,
                        const na_model_config_t *mc)
{
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_OPEN;
    m.u.req_open.request_id = id;
    m.u.req_open.max_tokens = (uint32_t)max_tokens;
    m.u.req_open.n_layers = (uint32_t)mc->n_layers;
    m.u.req_open.kv_h0 = 0;
    m.u.req_open.kv_h1 = (uint16_t)mc->n_kv_heads;
    m.u.req_open.head_dim = (uint16_t)mc->head_dim;
    m.u.req_open.q_per_kv = (uint16_t)(mc->n_heads / mc->n_kv_heads);
    m.u.req_open.dtype = NA_DTYPE_F32;
    return na_rep_call(r, w, &m, id);
}

na_status_t na_rep_prefill(na_rep_t *r, int w, uint64_t id, int layer, const void *k,
                           const void *v, na_dtype_t dtype, int n_tok,
                           const na_model_config_t *mc)
{
    na_wire_msg_t m;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_PREFILL_KV;
    m.u.kv.request_id = id;
    m.u.kv.layer = (uint32_t)layer;
    m.u.kv.pos0 = 0;
    m.u.kv.n_tokens = (uint32_t)n_tok;
    m.u.kv.kv_h0 = 0;
    m.u.kv.kv_h1 = (uint16_t)mc->n_kv_heads;
    m.u.kv.head_dim = (uint16_t)mc->head_dim;
    m.u.kv.dtype = dtype;
    m.u.kv.k = k;
    m.u.kv.v = v;
    st = na_rep_call(r, w, &m, id);
    if (st == NA_OK)
        r->st.prefill_bytes += 2ull * (uint64_t)n_tok * (uint64_t)mc->n_kv_heads *
                               (uint64_t)mc->head_dim * (dtype == NA_DTYPE_F32 ? 4u : 2u);
    return st;
}

void na_rep_release(na_rep_t *r, int w, uint64_t id, int status)
{
    na_wire_msg_t m;

    if (w < 1 || w >= r->n || r->lost[w])
        return;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_RELEASE;
    m.u.req_release.request_id = id;
    m.u.req_release.status = status;
    if (na_rep_send(r, w, &m) != NA_OK)
        na_log_debug("replicas: release of %llu on %s: %s", (unsigned long long)id,
                     r->name[w], na_errmsg());
}

na_status_t na_rep_send_ctx(na_rep_t *r, int w, const na_wire_ctx_t *c)
{
    na_wire_msg_t m;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_BATCH_CTX;
    m.u.ctx = *c;
    st = na_rep_send(r, w, &m);
    if (st == NA_OK)
        r->st.ctx_sent++;
    return st;
}

na_status_t na_rep_recv_ctx(na_rep_t *r, int timeout_ms, na_xp_msg_t **msg_p,
                            na_wire_ctx_t *c_p)
{
    na_wire_hdr_t h;
    na_wire_msg_t m;
    na_status_t st;
    int dummy = 0;

    if (r->qn == 0) {
        st = na_rep_pump(r, timeout_ms, 0, 0, &dummy);
        while (st == NA_OK && r->qn == 0)
            st = na_rep_pump(r, 0, 0, 0, &dummy);
        if (r->qn == 0)
            return st == NA_OK ? NA_ERR_TIMEOUT : st;
    }
    *msg_p = r->q[r->qh];
    r->qh = (r->qh + 1) % NA_REP_QMAX;
    r->qn--;
    /* decoded once already in na_rep_pump: cannot fail here */
    st = na_wire_hdr_decode((*msg_p)->hdr, (*msg_p)->hdr_len, &h);
    if (st == NA_OK)
        st = na_wire_decode(&h, (*msg_p)->data, (*msg_p)->len, &m);
    if (st != NA_OK) {
        na_xp_msg_release(r->xp, *msg_p);
        return st;
    }
    *c_p = m.u.ctx;
    r->st.ctx_recv++;
    return NA_OK;
}

void na_rep_msg_release(na_rep_t *r, na_xp_msg_t *msg)
{
    na_xp_msg_release(r->xp, msg);
}

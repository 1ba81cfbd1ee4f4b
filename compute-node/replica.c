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
#include "rdma/session.h"

#define NA_REP_QMAX   64        /* contexts received while waiting for an answer */

/* A BATCH_CTX kept for na_rep_recv_ctx. */
typedef struct {
    na_xp_msg_t  *msg;
    na_wire_ctx_t c;                         /* views into msg */
} na_rep_ctx_t;

struct na_rep {
    const na_cfg_t *cfg;
    na_ses_t       *ses;                     /* the compute link (rdma/session.h) */
    int             n;                       /* replicas, this one included */
    na_peer_t      *peer[NA_REP_MAX];        /* [1..n-1] */
    char            name[NA_REP_MAX][NA_WIRE_NAME_MAX];
    int             lost[NA_REP_MAX];
    char            lost_why[320];           /* a loss not reported yet, or "" */
    na_rep_ctx_t    q[NA_REP_QMAX];          /* FIFO */
    int             qh, qn;
    na_rep_stats_t  st;
    na_asvc_t      *svc;                     /* served while waiting for an answer, or NULL */
};

/* The replica index of peer p, or -1. */
static int na_rep_of(const na_rep_t *r, const na_peer_t *p)
{
    int i;
    for (i = 1; i < r->n; i++)
        if (r->peer[i] == p)
            return i;
    return -1;
}

/* A replica ended (lost, BYE, protocol error): remember it for the driver. */
static void na_rep_on_end(void *ctx, na_peer_t *p, na_ses_end_t how, const char *why)
{
    na_rep_t *r = ctx;
    int w = na_rep_of(r, p);

    (void)how;
    if (w < 0)
        return;
    r->lost[w] = 1;
    if (r->lost_why[0] == '\0')
        snprintf(r->lost_why, sizeof(r->lost_why), "compute replica %s was lost: %.200s",
                 r->name[w], why);
}

/* BATCH_CTX: kept for na_rep_recv_ctx. */
static na_status_t na_rep_on_ctx(void *ctx, na_ses_in_t *in)
{
    na_rep_t *r = ctx;
    na_rep_ctx_t *slot;

    if (r->qn == NA_REP_QMAX)
        return na_err(NA_ERR_INTERNAL, "replicas: more than %d contexts pending", NA_REP_QMAX);
    slot = &r->q[(r->qh + r->qn) % NA_REP_QMAX];
    slot->msg = in->raw;
    slot->c = in->m->u.ctx;
    r->qn++;
    in->keep = 1;
    return NA_OK;
}

/* Take the oldest kept context (the FIFO is not empty). */
static const na_rep_ctx_t *na_rep_pop(na_rep_t *r)
{
    const na_rep_ctx_t *c = &r->q[r->qh];

    r->qh = (r->qh + 1) % NA_REP_QMAX;
    r->qn--;
    return c;
}

/* Each session round while waiting: the storage nodes' heartbeats too. */
static void na_rep_tick(void *ctx)
{
    na_rep_t *r = ctx;
    if (r->svc != NULL)
        na_asvc_progress(r->svc);
}

na_status_t na_rep_create(const na_cfg_t *cfg, const char *name, na_rep_t **r_p)
{
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
    st = na_ses_create_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, "replicas", r, &r->ses);
    if (st != NA_OK)
        goto fail_link;
    na_ses_on_end(r->ses, na_rep_on_end);
    na_ses_on(r->ses, NA_WIRE_MSG_BATCH_CTX, na_rep_on_ctx);
    na_ses_on_tick(r->ses, na_rep_tick);
    for (i = 1; i < r->n; i++) {
        const na_cfg_node_t *nd = &cfg->nodes[i];
        snprintf(r->name[i], sizeof(r->name[i]), "%s", nd->name);
        if (nd->port <= 0) {
            st = na_err(NA_ERR_INVALID, "replicas: compute node %s has no port: rotational "
                        "pipelining needs one on every compute node but the first", nd->name);
            goto fail_link;
        }
        st = na_ses_connect(r->ses, nd->host, (int)nd->port, &r->peer[i]);
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
    int i;

    if (r == NULL)
        return;
    while (r->qn > 0)
        na_ses_msg_release(r->ses, na_rep_pop(r)->msg);
    for (i = 1; i < r->n; i++)
        na_peer_close(r->peer[i], 0, "done");
    na_ses_destroy(r->ses);
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
    int i;

    *out = r->st;
    for (i = 1; i < r->n; i++) {
        na_xp_stats_t xs;
        if (r->peer[i] == NULL)
            continue;
        na_xp_ep_stats(na_peer_ep(r->peer[i]), &xs);
        out->bytes_sent += xs.bytes_sent;
        out->bytes_recv += xs.bytes_recv;
    }
}

/* Replica w's peer: NA_ERR_INTERNAL for no such replica, NA_ERR_PEER for
 * one that is gone. */
static na_status_t na_rep_peer(na_rep_t *r, int w, na_peer_t **p_p)
{
    if (w < 1 || w >= r->n)
        return na_err(NA_ERR_INTERNAL, "replicas: no replica %d", w);
    if (r->lost[w] || !na_peer_alive(r->peer[w]))
        return na_err(NA_ERR_PEER, "compute replica %s is gone: %s", r->name[w],
                      na_peer_why(r->peer[w]));
    *p_p = r->peer[w];
    return NA_OK;
}

/* Send m to replica w and wait for its ACK / ERROR. */
static na_status_t na_rep_call(na_rep_t *r, int w, na_wire_msg_t *m)
{
    char why[NA_WIRE_TEXT_MAX + 1];
    na_peer_t *p = NULL;
    na_status_t st = na_rep_peer(r, w, &p);

    if (st != NA_OK)
        return st;
    st = na_peer_call(p, m, NULL, NA_WIRE_MSG_ACK, 0, 6 * (int)r->cfg->transport.timeout_ms,
                      NULL, 0);
    if (st == NA_OK)
        return NA_OK;
    snprintf(why, sizeof(why), "%s", na_errmsg());
    return na_err(st, "compute replica %s: %s", r->name[w], why);
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
    return na_rep_call(r, w, &m);
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
    st = na_rep_call(r, w, &m);
    if (st == NA_OK)
        r->st.prefill_bytes += 2ull * (uint64_t)n_tok *
                               na_dtype_bytes(dtype, (size_t)mc->n_kv_heads * mc->head_dim);
    return st;
}

void na_rep_release(na_rep_t *r, int w, uint64_t id, int status)
{
    na_wire_msg_t m;
    na_peer_t *p = NULL;

    if (na_rep_peer(r, w, &p) != NA_OK)
        return;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_RELEASE;
    m.u.req_release.request_id = id;
    m.u.req_release.status = status;
    if (na_peer_send(p, &m, NULL) != NA_OK)
        na_log_debug("replicas: release of %llu on %s: %s", (unsigned long long)id,
                     r->name[w], na_errmsg());
}

na_status_t na_rep_send_ctx(na_rep_t *r, int w, const na_wire_ctx_t *c)
{
    na_wire_msg_t m;
    na_peer_t *p = NULL;
    na_status_t st = na_rep_peer(r, w, &p);

    if (st != NA_OK)
        return st;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_BATCH_CTX;
    m.u.ctx = *c;
    st = na_peer_send(p, &m, NULL);
    if (st == NA_OK)
        r->st.ctx_sent++;
    return st;
}

na_status_t na_rep_recv_ctx(na_rep_t *r, int timeout_ms, na_xp_msg_t **msg_p,
                            na_wire_ctx_t *c_p)
{
    const na_rep_ctx_t *head;
    na_status_t st = NA_OK;

    if (r->qn == 0)
        st = na_ses_poll(r->ses, timeout_ms);
    if (r->lost_why[0] != '\0') {       /* reported once, as the transport's event was */
        st = na_err(NA_ERR_PEER, "%s", r->lost_why);
        r->lost_why[0] = '\0';
        return st;
    }
    if (r->qn == 0)
        return st == NA_OK ? NA_ERR_TIMEOUT : st;
    head = na_rep_pop(r);
    *msg_p = head->msg;
    *c_p = head->c;
    r->st.ctx_recv++;
    return NA_OK;
}

void na_rep_msg_release(na_rep_t *r, na_xp_msg_t *msg)
{
    na_ses_msg_release(r->ses, msg);
}

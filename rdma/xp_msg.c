/* rdma/xp_msg.c — messages on an endpoint, both ways: sending owner
 * messages (with the header kept alive while in flight), waiting for their
 * completion with a bound (a send that does not finish fails its endpoint),
 * owned sends (the buffer goes back to the pool at completion, the owner
 * told by callback; a deadline per send), and the active-message receive
 * path that queues what arrives for na_xp_recv (eager data kept in UCX's
 * buffer or copied into a pooled one, rendezvous data landing in a
 * registered pool buffer). Operation and message records are reused; the
 * owner's queue, the records, registered buffers and the landing pool are
 * here too, the floor of the transport's files (xp_worker.c → xp_door.c →
 * xp_handshake.c → xp_endpoint.c → xp_msg.c, xp_sock.c). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "common/wire.h"
#include "rdma/xp_internal.h"

/* Largest message sent with UCP_OP_ATTR_FLAG_FAST_CMPL (see xp_am_send). */
#define XP_FAST_CMPL_MAX ((size_t)256 << 10)

_Static_assert(UCS_OK == 0, "xp_op_new clears an operation's status to UCS_OK with zeros");

/* An operation record from the node's free list (NULL: out of memory). */
static na_xp_op_t *xp_op_new(na_xp_t *xp)
{
    na_xp_op_t *op;

    NA_FREELIST_TAKE(xp->op_free, xp->op_free_n, op, next);
    if (op == NULL && (op = malloc(sizeof(*op))) == NULL)
        return NULL;
    /* every field but the header bytes (the sender fills them): a field
     * added before hdr starts cleared too */
    memset(op, 0, offsetof(na_xp_op_t, hdr));
    return op;
}

/* Give op back to the free list (freed beyond NA_XP_OPS_KEEP). */
static void xp_op_put(na_xp_t *xp, na_xp_op_t *op)
{
    NA_FREELIST_PUT(xp->op_free, xp->op_free_n, NA_XP_OPS_KEEP, op, next);
}

/* UCX completed an owned send: mark it; progress finishes it outside UCX. */
static void xp_owned_cb(void *request, ucs_status_t status, void *user_data)
{
    na_xp_op_t *op = user_data;
    (void)request;
    op->done = 1;
    op->status = status;
    op->ep->xp->cmpl_due = 1;
}

/* Issue ucp_am_send_nbx on id with the header (owner header + the peer's
 * connection id) kept in op; owned (op->buf set): UCX calls xp_owned_cb. */
static void *xp_am_send(na_xp_ep_t *ep, unsigned id, const void *hdr, size_t hdr_len,
                        const void *data, size_t len, const na_xp_buf_t *buf, na_xp_op_t *op)
{
    ucp_request_param_t p;

    memset(&p, 0, sizeof(p));
    /* Up to 256 KiB (UCX_RNDV_SEND_NBR_THRESH's default) ask for fast local
     * completion: UCX then sends eagerly, as ucx_perftest's messages go,
     * where the ep's rendezvous threshold (a few KiB over shared memory)
     * would add a control round trip per message (24 KiB round trip over shm
     * 10.4 -> 6.3 us, 192 KiB 50 -> 35 us). Larger messages keep UCX's own
     * choice (zero-copy rendezvous). */
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    if (len <= XP_FAST_CMPL_MAX)
        p.op_attr_mask |= UCP_OP_ATTR_FLAG_FAST_CMPL;
    /* no UCP_AM_SEND_FLAG_REPLY: the receiver matches the message to its
     * connection by the id at the end of the header, not by UCX's endpoint */
    if (buf != NULL) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.memh = (ucp_mem_h)buf->memh;
        p.memory_type = UCS_MEMORY_TYPE_HOST;
    }
    if (op->buf != NULL) {
        p.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        p.cb.send = xp_owned_cb;
        p.user_data = op;
    }
    return ucp_am_send_nbx(ep->uep, id, hdr, hdr_len, data, len, &p);
}

na_status_t na_xp_send_start(na_xp_ep_t *ep, const void *hdr, size_t hdr_len,
                             const void *data, size_t len, const na_xp_buf_t *buf,
                             na_xp_op_t **op_p)
{
    na_xp_op_t *op;
    void *req;

    *op_p = NULL;
    if (ep->state != NA_XP_EP_READY)
        return na_err(NA_ERR_PEER, "transport: peer %s at %s: %s", ep->name, ep->addr,
                      ep->errmsg[0] ? ep->errmsg : "not connected");
    if (hdr_len > NA_XP_HDR_MAX || len > ep->xp->opts.max_msg)
        return na_err(NA_ERR_INVALID, "transport: message of %zu+%zu bytes over the limits",
                      hdr_len, len);
    op = xp_op_new(ep->xp);
    if (op == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    if (hdr_len > 0)
        memcpy(op->hdr, hdr, hdr_len);
    memcpy(op->hdr + hdr_len, &ep->tx_id, NA_XP_ID_LEN);
    req = xp_am_send(ep, NA_XP_AM_MSG, op->hdr, hdr_len + NA_XP_ID_LEN, data, len, buf, op);
    if (UCS_PTR_IS_ERR(req)) {
        xp_op_put(ep->xp, op);
        na_xp_ep_fail(ep, NA_ERR_PEER, ucs_status_string(UCS_PTR_STATUS(req)));
        return na_err(NA_ERR_PEER, "transport: send to %s: %s", ep->name,
                      ucs_status_string(UCS_PTR_STATUS(req)));
    }
    if (req == NULL) {
        xp_op_put(ep->xp, op);
        ep->stats.msgs_sent++;
        ep->stats.bytes_sent += hdr_len + len;
        return NA_OK;
    }
    op->req = req;
    op->ep = ep;
    op->bytes = hdr_len + len;
    ep->refs++;
    *op_p = op;
    return NA_OK;
}

/* 1 once op's request is no longer in progress. */
static int xp_op_done(void *arg)
{
    na_xp_op_t *op = arg;
    return ucp_request_check_status(op->req) != UCS_INPROGRESS;
}

/* 1 once op completed, or its endpoint failed (without peer error handling
 * UCX may never complete a send to a vanished peer). */
static int xp_op_done_or_dead(void *arg)
{
    na_xp_op_t *op = arg;
    return xp_op_done(op) || op->ep->state == NA_XP_EP_FAILED ||
           op->ep->state == NA_XP_EP_CLOSED;
}

na_status_t na_xp_op_wait(na_xp_t *xp, na_xp_op_t *op, int timeout_ms)
{
    ucs_status_t us;
    na_status_t st = NA_OK;
    na_xp_ep_t *ep;
    int t;

    if (op == NULL)
        return NA_OK;
    ep = op->ep;
    if (xp == NULL)
        xp = ep->xp;
    t = timeout_ms < 0 ? xp->opts.timeout_ms : timeout_ms;
    if (!na_xp_wait_ms(xp, xp_op_done_or_dead, op, t)) {
        char why[96];
        snprintf(why, sizeof(why), "send did not complete within %d ms", t);
        na_xp_ep_fail(ep, NA_ERR_TIMEOUT, why);
        na_xp_loop_progress(xp);          /* force-closes the ep: the request ends */
        (void)na_xp_wait_ms(xp, xp_op_done, op, t < 500 ? t : 500);
        st = na_err(NA_ERR_TIMEOUT, "transport: send to %s at %s: %s", ep->name, ep->addr, why);
    } else if (!xp_op_done(op)) {
        /* the peer is gone: give the force close a moment to end the request */
        na_xp_loop_progress(xp);
        (void)na_xp_wait_ms(xp, xp_op_done, op, t < 200 ? t : 200);
        st = na_err(NA_ERR_PEER, "transport: send to %s at %s: %s", ep->name, ep->addr,
                    ep->errmsg[0] ? ep->errmsg : "connection lost");
    } else {
        us = ucp_request_check_status(op->req);
        if (us == UCS_OK) {
            ep->stats.msgs_sent++;
            ep->stats.bytes_sent += op->bytes;
        } else {
            st = na_err(NA_ERR_PEER, "transport: send to %s at %s: %s", ep->name, ep->addr,
                        ucs_status_string(us));
        }
    }
    na_xp_req_drop(xp, op->req);
    xp_op_put(xp, op);
    na_xp_ep_unref(ep);
    return st;
}

na_status_t na_xp_send(na_xp_ep_t *ep, const void *hdr, size_t hdr_len,
                       const void *data, size_t len)
{
    na_xp_op_t *op;
    na_status_t st = na_xp_send_start(ep, hdr, hdr_len, data, len, NULL, &op);
    if (st != NA_OK)
        return st;
    return na_xp_op_wait(ep->xp, op, -1);
}

/* ---- owned sends ------------------------------------------------------------ */

int na_xp_inflight(const na_xp_t *xp)
{
    return xp->inflight_n;
}

/* 1 while the node has room for another owned send. */
static int xp_owned_room(void *arg)
{
    na_xp_t *xp = arg;
    if (xp->cmpl_due)
        na_xp_owned_reap(xp);
    return xp->inflight_n < NA_XP_INFLIGHT_MAX && xp->inflight_bytes < NA_XP_INFLIGHT_BYTES;
}

/* op is over: stats, its buffer back to the pool, the owner told. */
static void xp_owned_finish(na_xp_t *xp, na_xp_op_t *op, na_status_t st)
{
    na_xp_ep_t *ep = op->ep;

    if (st == NA_OK) {
        ep->stats.msgs_sent++;
        ep->stats.bytes_sent += op->bytes;
    }
    na_xp_pool_put(xp, op->buf);
    if (op->fn != NULL)
        op->fn(op->arg, st);
    xp_op_put(xp, op);
}

/* Unlink op from the in-flight list. */
static void xp_owned_unlink(na_xp_t *xp, na_xp_op_t *op)
{
    NA_LIST_UNLINK(xp->inflight, op, prev, next);
    xp->inflight_n--;
    xp->inflight_bytes -= op->bytes;
}

na_status_t na_xp_send_owned(na_xp_ep_t *ep, na_xp_buf_t *buf, size_t hdr_len, size_t off,
                             size_t len, na_xp_sent_fn fn, void *arg)
{
    na_xp_t *xp = ep->xp;
    na_xp_op_t *op;
    void *req;

    if (buf == NULL)
        return na_err(NA_ERR_INVALID, "transport: owned send without a buffer");
    if (ep->state != NA_XP_EP_READY) {
        na_xp_pool_put(xp, buf);
        return na_err(NA_ERR_PEER, "transport: peer %s at %s: %s", ep->name, ep->addr,
                      ep->errmsg[0] ? ep->errmsg : "not connected");
    }
    if (hdr_len > NA_XP_HDR_MAX || len > xp->opts.max_msg || off < hdr_len ||
        off + len > buf->size) {
        na_xp_pool_put(xp, buf);
        return na_err(NA_ERR_INVALID, "transport: message of %zu+%zu bytes (at %zu) over the "
                      "limits or its %zu-byte buffer", hdr_len, len, off, buf->size);
    }
    if (!xp_owned_room(xp)) {
        (void)na_xp_wait_ms(xp, xp_owned_room, xp, xp->opts.timeout_ms);
        if (ep->state != NA_XP_EP_READY) {
            na_xp_pool_put(xp, buf);
            return na_err(NA_ERR_PEER, "transport: peer %s at %s: %s", ep->name, ep->addr,
                          ep->errmsg[0] ? ep->errmsg : "connection lost");
        }
    }
    op = xp_op_new(xp);
    if (op == NULL) {
        na_xp_pool_put(xp, buf);
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    }
    op->ep = ep;
    op->buf = buf;
    op->fn = fn;
    op->arg = arg;
    op->bytes = hdr_len + len;
    if (hdr_len > 0)
        memcpy(op->hdr, buf->ptr, hdr_len);
    memcpy(op->hdr + hdr_len, &ep->tx_id, NA_XP_ID_LEN);
    req = xp_am_send(ep, NA_XP_AM_MSG, op->hdr, hdr_len + NA_XP_ID_LEN,
                     (const uint8_t *)buf->ptr + off, len, buf, op);
    if (UCS_PTR_IS_ERR(req)) {
        na_xp_pool_put(xp, buf);
        xp_op_put(xp, op);
        na_xp_ep_fail(ep, NA_ERR_PEER, ucs_status_string(UCS_PTR_STATUS(req)));
        return na_err(NA_ERR_PEER, "transport: send to %s: %s", ep->name,
                      ucs_status_string(UCS_PTR_STATUS(req)));
    }
    if (req == NULL) {                  /* completed inside the call */
        xp_owned_finish(xp, op, NA_OK);
        return NA_OK;
    }
    op->req = req;
    op->deadline_ns = na_now_ns() + (uint64_t)xp->opts.timeout_ms * 1000000ull;
    ep->refs++;
    NA_LIST_PUSH(xp->inflight, op, prev, next);
    xp->inflight_n++;
    xp->inflight_bytes += op->bytes;
    return NA_OK;
}

void na_xp_owned_reap(na_xp_t *xp)
{
    na_xp_op_t *op, *next;

    xp->cmpl_due = 0;
    for (op = xp->inflight; op != NULL; op = next) {
        na_xp_ep_t *ep = op->ep;
        next = op->next;
        if (!op->done)
            continue;
        xp_owned_unlink(xp, op);
        ucp_request_free(op->req);
        if (op->status != UCS_OK)        /* the endpoint's failure tells the owner */
            na_log_debug("transport: send to %s at %s: %s", ep->name, ep->addr,
                         ucs_status_string(op->status));
        xp_owned_finish(xp, op, op->status == UCS_OK ? NA_OK : NA_ERR_PEER);
        na_xp_ep_unref(ep);
    }
}

void na_xp_owned_check(na_xp_t *xp, uint64_t now_ns)
{
    na_xp_op_t *op;

    for (op = xp->inflight; op != NULL; op = op->next) {
        if (!op->done && now_ns > op->deadline_ns && op->ep->state == NA_XP_EP_READY) {
            char why[96];
            snprintf(why, sizeof(why), "send did not complete within %d ms",
                     xp->opts.timeout_ms);
            na_xp_ep_fail(op->ep, NA_ERR_TIMEOUT, why);
        }
    }
}

void na_xp_owned_drop_all(na_xp_t *xp)
{
    na_xp_owned_reap(xp);
    while (xp->inflight != NULL) {
        na_xp_op_t *op = xp->inflight;
        na_xp_ep_t *ep = op->ep;
        xp_owned_unlink(xp, op);
        na_xp_req_drop(xp, op->req);     /* a stuck one leaves the worker to the exit */
        xp_owned_finish(xp, op, NA_ERR_PEER);
        ep->refs--;
    }
    NA_FREELIST_DRAIN(xp->op_free, xp->op_free_n, na_xp_op_t, next);
}

/* ---- receive path ----------------------------------------------------------- */

/* Rendezvous payload landed (or failed). */
static void xp_rndv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    na_xp_msg_t *m = user_data;
    (void)length;                       /* UCX's callback type; the size is known */
    m->ready = (status == UCS_OK) ? 1 : -1;
    ucp_request_free(request);
}

/* m's payload lands in a pooled registered buffer of length bytes; when
 * there is none, m is dropped and ep fails (why). 0, or -1. */
static int xp_land(na_xp_t *xp, na_xp_ep_t *ep, na_xp_msg_t *m, size_t length, const char *why)
{
    m->pool_buf = na_xp_pool_get(xp, length);
    if (m->pool_buf == NULL) {
        m->ready = -1;
        na_xp_ep_fail(ep, NA_ERR_NOMEM, why);
        return -1;
    }
    m->data = m->pool_buf->ptr;
    return 0;
}

/* Active message on NA_XP_AM_MSG: queue it for the owner. */
static ucs_status_t xp_am_msg_cb(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
    na_xp_t *xp = arg;
    na_xp_ep_t *ep;
    na_xp_msg_t *m;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    uint64_t id;
    char why[128];

    if (header_length < NA_XP_ID_LEN)
        return rndv ? UCS_ERR_REJECTED : UCS_OK;        /* not one of ours: drop */
    header_length -= NA_XP_ID_LEN;
    memcpy(&id, (const uint8_t *)header + header_length, NA_XP_ID_LEN);
    ep = xp->rx_last;
    if (ep == NULL || ep->rx_id != id) {
        for (ep = xp->eps; ep != NULL && ep->rx_id != id; ep = ep->next)
            ;
        if (ep == NULL || !ep->rx_open)
            return rndv ? UCS_ERR_REJECTED : UCS_OK;    /* nobody we know: drop */
        xp->rx_last = ep;
    }
    /* a client takes messages once it sent its proof: the proven server may
     * send before its HELLO_OK is read */
    if (ep->state != NA_XP_EP_READY && ep->state != NA_XP_EP_CONNECTING)
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    if (header_length > NA_XP_HDR_MAX || length > xp->opts.max_msg) {
        snprintf(why, sizeof(why), "message of %zu+%zu bytes over the limits (%d+%zu)",
                 header_length, length, NA_XP_HDR_MAX, xp->opts.max_msg);
        na_xp_ep_fail(ep, NA_ERR_PROTO, why);
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    }
    m = na_xp_msg_new(xp);
    if (m == NULL) {
        na_xp_ep_fail(ep, NA_ERR_NOMEM, "out of memory for a message");
        return rndv ? UCS_ERR_NO_MEMORY : UCS_OK;
    }
    m->kind = NA_XP_MSG_DATA;
    m->ep = ep;
    m->hdr_len = header_length;
    if (header_length > 0)
        memcpy(m->hdr, header, header_length);
    m->len = length;
    ep->refs++;
    ep->stats.msgs_recv++;
    ep->stats.bytes_recv += header_length + length;
    ep->stats.last_recv_ns = na_xp_coarse_ns();
    na_xp_queue_push(xp, m);

    if (length == 0) {
        m->ready = 1;
        return UCS_OK;
    }
    if (rndv) {
        ucp_request_param_t p;
        void *req;
        if (xp_land(xp, ep, m, length, "no landing buffer for a large message") != 0)
            return UCS_ERR_NO_MEMORY;
        memset(&p, 0, sizeof(p));
        p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_MEMH | UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.cb.recv_am = xp_rndv_done;
        p.user_data = m;
        p.memh = (ucp_mem_h)m->pool_buf->memh;
        p.memory_type = UCS_MEMORY_TYPE_HOST;
        req = ucp_am_recv_data_nbx(xp->worker, data, m->data, length, &p);
        if (req == NULL)
            m->ready = 1;
        else if (UCS_PTR_IS_ERR(req))
            m->ready = -1;
        return UCS_INPROGRESS;
    }
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) {
        m->data = data;                 /* keep UCX's copy: no second copy */
        m->ucx_desc = data;
        m->ready = 1;
        return UCS_INPROGRESS;
    }
    /* UCX keeps no copy: ours goes into a pooled buffer (reused, no heap) */
    if (xp_land(xp, ep, m, length, "out of memory for a message") != 0)
        return UCS_OK;
    memcpy(m->data, data, length);
    m->ready = 1;
    return UCS_OK;
}

na_status_t na_xp_ep_setup(na_xp_t *xp)
{
    ucp_am_handler_param_t hp;
    ucs_status_t us;

    memset(&hp, 0, sizeof(hp));
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                    UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = NA_XP_AM_MSG;
    hp.cb = xp_am_msg_cb;
    hp.arg = xp;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA;
    us = ucp_worker_set_am_recv_handler(xp->worker, &hp);
    if (us != UCS_OK)
        return na_err(NA_ERR_TRANSPORT, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(us));
    return NA_OK;
}

/* ---- records: the owner's queue, message records, registered buffers and
 * the landing pool (used by every layer above; they call nothing above) --- */

void na_xp_req_drop(na_xp_t *xp, void *req)
{
    if (ucp_request_check_status(req) == UCS_INPROGRESS)
        xp->stuck++;
    ucp_request_free(req);
}

void na_xp_pool_drain(na_xp_t *xp)
{
    int c;
    for (c = 0; c < NA_XP_POOL_CLASSES; c++) {
        while (xp->pool[c] != NULL) {
            na_xp_buf_t *b = xp->pool[c];
            xp->pool[c] = b->next;
            na_xp_buf_destroy(xp, b);
        }
        xp->pool_count[c] = 0;
    }
    xp->pool_bytes = 0;
}

void na_xp_queue_push(na_xp_t *xp, na_xp_msg_t *msg)
{
    NA_SLIST_APPEND(xp->q_head, xp->q_tail, msg, next);
}

void na_xp_msg_release(na_xp_t *xp, na_xp_msg_t *msg)
{
    if (msg == NULL)
        return;
    if (msg->ucx_desc != NULL)
        ucp_am_data_release(xp->worker, msg->ucx_desc);
    if (msg->pool_buf != NULL)
        na_xp_pool_put(xp, msg->pool_buf);
    if (msg->ep != NULL)
        na_xp_ep_unref(msg->ep);
    NA_FREELIST_PUT(xp->msg_free, xp->msg_free_n, NA_XP_MSGS_KEEP, msg, next);
}

na_xp_msg_t *na_xp_msg_new(na_xp_t *xp)
{
    na_xp_msg_t *m;

    NA_FREELIST_TAKE(xp->msg_free, xp->msg_free_n, m, next);
    if (m == NULL)
        return calloc(1, sizeof(*m));
    /* the record is large (the header array): clear the fields, not the bytes */
    m->kind = NA_XP_MSG_DATA;
    m->ep = NULL;
    m->status = NA_OK;
    m->hdr_len = 0;
    m->data = NULL;
    m->len = 0;
    m->next = NULL;
    m->ready = 0;
    m->ucx_desc = NULL;
    m->pool_buf = NULL;
    return m;
}

void na_xp_recs_drain(na_xp_t *xp)
{
    NA_FREELIST_DRAIN(xp->msg_free, xp->msg_free_n, na_xp_msg_t, next);
}

na_xp_buf_t *na_xp_buf_get(na_xp_t *xp, size_t len)
{
    na_xp_buf_t *b = na_xp_pool_get(xp, len == 0 ? 1 : len);
    if (b == NULL)
        (void)na_err(NA_ERR_NOMEM, "transport: no registered buffer of %zu bytes", len);
    return b;
}

void na_xp_buf_put(na_xp_t *xp, na_xp_buf_t *buf)
{
    if (buf != NULL)
        na_xp_pool_put(xp, buf);
}

na_status_t na_xp_buf_create(na_xp_t *xp, size_t size, na_xp_mem_t mem, na_xp_buf_t **buf_p)
{
    ucp_mem_map_params_t mp;
    ucp_mem_h memh;
    ucs_status_t us;
    na_xp_buf_t *b;

    if (mem != NA_XP_MEM_HOST)
        return na_err(NA_ERR_UNSUPPORTED, "transport: only host memory buffers are built here");
    if (size == 0)
        return na_err(NA_ERR_INVALID, "transport: buffer of 0 bytes");
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    /* Plain page-aligned process memory, then registered: UCX's own
     * allocation (UCP_MEM_MAP_ALLOCATE) would hand out a sysv segment here,
     * which sends shared-memory rendezvous down a slower path. */
    if (posix_memalign(&b->ptr, size >= ((size_t)2 << 20) ? ((size_t)2 << 20) : 4096, size) != 0) {
        free(b);
        return na_err(NA_ERR_NOMEM, "transport: cannot allocate a %zu-byte buffer", size);
    }
    memset(&mp, 0, sizeof(mp));
    mp.field_mask  = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                     UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    mp.address     = b->ptr;
    mp.length      = size;
    mp.memory_type = UCS_MEMORY_TYPE_HOST;
    us = ucp_mem_map(xp->ctx, &mp, &memh);
    if (us != UCS_OK) {
        free(b->ptr);
        free(b);
        return na_err(NA_ERR_TRANSPORT, "ucp_mem_map(%zu bytes): %s", size, ucs_status_string(us));
    }
    b->size = size;
    b->mem  = mem;
    b->memh = memh;
    *buf_p = b;
    return NA_OK;
}

void na_xp_buf_destroy(na_xp_t *xp, na_xp_buf_t *buf)
{
    if (buf == NULL)
        return;
    ucp_mem_unmap(xp->ctx, (ucp_mem_h)buf->memh);
    free(buf->ptr);
    free(buf);
}

/* Size class of len: smallest c with (4 KiB << c) >= len, or -1 if too big. */
static int xp_pool_class(size_t len)
{
    int c;
    for (c = 0; c < NA_XP_POOL_CLASSES; c++)
        if (((size_t)1 << (NA_XP_POOL_MIN_SHIFT + c)) >= len)
            return c;
    return -1;
}

na_xp_buf_t *na_xp_pool_get(na_xp_t *xp, size_t len)
{
    na_xp_buf_t *b;
    int c = xp_pool_class(len);

    if (c < 0)
        return NULL;
    if (xp->pool[c] != NULL) {
        b = xp->pool[c];
        xp->pool[c] = b->next;
        xp->pool_count[c]--;
        xp->pool_bytes -= b->size;
        b->next = NULL;
        return b;
    }
    if (na_xp_buf_create(xp, (size_t)1 << (NA_XP_POOL_MIN_SHIFT + c), NA_XP_MEM_HOST, &b) != NA_OK) {
        na_log_warn("transport: landing buffer of %zu bytes: %s", len, na_errmsg());
        return NULL;
    }
    return b;
}

void na_xp_pool_put(na_xp_t *xp, na_xp_buf_t *buf)
{
    int c = xp_pool_class(buf->size);
    if (c < 0 || ((size_t)1 << (NA_XP_POOL_MIN_SHIFT + c)) != buf->size ||
        xp->pool_count[c] >= NA_XP_POOL_KEEP || xp->pool_bytes + buf->size > NA_XP_POOL_MAX_BYTES) {
        na_xp_buf_destroy(xp, buf);
        return;
    }
    buf->next = xp->pool[c];
    xp->pool[c] = buf;
    xp->pool_count[c]++;
    xp->pool_bytes += buf->size;
}

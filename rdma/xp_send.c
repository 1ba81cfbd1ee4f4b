/* rdma/xp_send.c — sending on an endpoint: owner messages (with the header
 * kept alive while in flight), waiting for their completion with a bound
 * (a send that does not finish fails its endpoint). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma/xp_internal.h"

/* Largest message sent with UCP_OP_ATTR_FLAG_FAST_CMPL (see xp_am_send). */
#define XP_FAST_CMPL_MAX ((size_t)256 << 10)

/* Issue ucp_am_send_nbx on id with the header (owner header + the peer's
 * connection id) kept in op. */
static void *xp_am_send(na_xp_ep_t *ep, unsigned id, const void *hdr, size_t hdr_len,
                        const void *data, size_t len, const na_xp_buf_t *buf)
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
    op = malloc(sizeof(*op));
    if (op == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    if (hdr_len > 0)
        memcpy(op->hdr, hdr, hdr_len);
    memcpy(op->hdr + hdr_len, &ep->tx_id, NA_XP_ID_LEN);
    req = xp_am_send(ep, NA_XP_AM_MSG, op->hdr, hdr_len + NA_XP_ID_LEN, data, len, buf);
    if (UCS_PTR_IS_ERR(req)) {
        free(op);
        na_xp_ep_fail(ep, NA_ERR_PEER, ucs_status_string(UCS_PTR_STATUS(req)));
        return na_err(NA_ERR_PEER, "transport: send to %s: %s", ep->name,
                      ucs_status_string(UCS_PTR_STATUS(req)));
    }
    if (req == NULL) {
        free(op);
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
        na_xp_progress(xp);          /* force-closes the ep: the request ends */
        (void)na_xp_wait_ms(xp, xp_op_done, op, t < 500 ? t : 500);
        st = na_err(NA_ERR_TIMEOUT, "transport: send to %s at %s: %s", ep->name, ep->addr, why);
    } else if (!xp_op_done(op)) {
        /* the peer is gone: give the force close a moment to end the request */
        na_xp_progress(xp);
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
    ucp_request_free(op->req);
    free(op);
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

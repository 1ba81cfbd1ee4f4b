/* rdma/xp_endpoint.c — endpoints: connecting, the ucp endpoint made from the
 * peer's worker address, peer failure and closing (the TCP side is
 * rdma/xp_door.c; sending and the active-message receive path rdma/xp_msg.c).
 * Endpoint state changes made inside UCX callbacks are only marks; the sweep
 * (run by na_xp_progress) closes and reports them. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "rdma/xp_internal.h"

/* ---- bookkeeping ---------------------------------------------------------- */

na_xp_ep_t *na_xp_ep_alloc(na_xp_t *xp, const char *addr, int is_server, int fd)
{
    uint8_t rnd[NA_WIRE_NONCE_SIZE];
    na_xp_ep_t *ep = calloc(1, sizeof(*ep));

    if (ep == NULL)
        return NULL;
    ep->xp = xp;
    ep->fd = fd;
    ep->state = NA_XP_EP_CONNECTING;
    ep->is_server = is_server;
    ep->hs_status = NA_INPROGRESS;
    ep->hs_deadline_ns = na_xp_deadline(xp->opts.timeout_ms);
    snprintf(ep->name, sizeof(ep->name), "?");
    snprintf(ep->addr, sizeof(ep->addr), "%s", addr);
    /* our connection id: random, so that a message is matched to its
     * connection only when the sender learnt the id in the handshake */
    do {
        if (na_wire_nonce(rnd) != NA_OK) {
            free(ep);
            return NULL;
        }
        memcpy(&ep->rx_id, rnd, sizeof(ep->rx_id));
    } while (ep->rx_id == 0);
    ep->next = xp->eps;
    xp->eps = ep;
    return ep;
}

/* Unlink and free an endpoint record (its ucp ep must be gone). */
static void xp_ep_free(na_xp_ep_t *ep)
{
    na_xp_ep_t **pp;
    na_xp_door_close(ep);
    na_xp_ep_setup_over(ep);
    if (ep->xp->rx_last == ep)
        ep->xp->rx_last = NULL;
    for (pp = &ep->xp->eps; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    free(ep);
}

/* UCX error callback (peer failure). Only marks; the sweep does the rest. */
static void xp_ep_err_cb(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    na_xp_ep_t *ep = arg;
    char why[128];
    (void)uep;
    /* errmode cm: the disconnect comes over the connection manager's socket
     * and can overtake the peer's last messages still in the shared-memory
     * FIFO (a BYE, then close): let those be delivered for a short grace,
     * then fail the endpoint (na_xp_ep_sweep). */
    if (ep->xp->opts.errmode == NA_XP_ERRMODE_CM && ep->state == NA_XP_EP_READY) {
        if (ep->fail_due_ns == 0) {
            ep->fail_due_ns = na_now_ns() + NA_XP_CM_GRACE_MS * 1000000ull;
            ep->err = NA_ERR_PEER;
            snprintf(ep->errmsg, sizeof(ep->errmsg), "connection lost (%s)",
                     ucs_status_string(status));
        }
        ep->xp->sweep_due = 1;
        return;
    }
    snprintf(why, sizeof(why), "connection lost (%s)", ucs_status_string(status));
    na_xp_ep_fail(ep, NA_ERR_PEER, why);
}

/* Start closing ep's ucp endpoint (force after errors) and its socket (the
 * peer sees EOF). UCX 1.13 force-closes only PEER-mode endpoints; without
 * force a remote-connected ucp ep is kept by UCX until the worker goes. */
static void xp_ep_close_start(na_xp_ep_t *ep, int force)
{
    ucp_request_param_t p;
    void *req;

    na_xp_door_close(ep);
    if (ep->uep == NULL) {
        ep->state = NA_XP_EP_CLOSED;
        return;
    }
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force && ep->xp->opts.errmode != NA_XP_ERRMODE_CM ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    req = ucp_ep_close_nbx(ep->uep, &p);
    ep->uep = NULL;
    ep->state = NA_XP_EP_CLOSED;
    if (req != NULL && !UCS_PTR_IS_ERR(req))
        ep->close_req = req;
    ep->xp->sweep_due = 1;
}

/* Free ep's close request once UCX finished it; 1 when none is pending. */
static int xp_ep_close_done(void *arg)
{
    na_xp_ep_t *ep = arg;
    if (ep->close_req != NULL && ucp_request_check_status(ep->close_req) != UCS_INPROGRESS) {
        ucp_request_free(ep->close_req);
        ep->close_req = NULL;
    }
    return ep->close_req == NULL;
}

void na_xp_ep_sweep(na_xp_t *xp)
{
    na_xp_ep_t *ep, *next;
    uint64_t now = na_now_ns();

    for (ep = xp->eps; ep != NULL; ep = next) {
        next = ep->next;
        if (ep->state == NA_XP_EP_CONNECTING && now > ep->hs_deadline_ns)
            na_xp_ep_fail(ep, NA_ERR_TIMEOUT, "handshake timed out");
        if (ep->fail_due_ns != 0 && ep->state == NA_XP_EP_READY) {
            if (now >= ep->fail_due_ns) {
                char why[sizeof(ep->errmsg)];
                snprintf(why, sizeof(why), "%s", ep->errmsg);
                na_xp_ep_fail(ep, NA_ERR_PEER, why);
            } else {
                xp->sweep_due = 1;             /* look again on the next service */
            }
        }
        if (ep->state == NA_XP_EP_FAILED) {
            if (ep->owned && !ep->lost_reported && ep->hs_status != NA_OK) {
                /* a connect in progress: na_xp_connect() reports it */
                na_log_debug("transport: connecting to %s failed: %s", ep->addr, ep->errmsg);
                ep->lost_reported = 1;
            } else if (ep->owned && !ep->lost_reported) {
                na_xp_msg_t *m = na_xp_msg_new(xp);
                /* info: after an orderly BYE this is the normal end; the owner
                 * decides whether a loss deserves a warning */
                na_log_info("transport: peer %s at %s disconnected: %s", ep->name, ep->addr,
                            ep->errmsg);
                if (m != NULL) {
                    m->kind = NA_XP_EV_LOST;
                    m->ep = ep;
                    m->status = ep->err;
                    m->ready = 1;
                    ep->refs++;
                    na_xp_queue_push(xp, m);
                }
                ep->lost_reported = 1;
            } else if (!ep->owned && ep->is_server) {
                /* before the proofs: anyone can cause this line */
                na_xp_rl_warn(&xp->rl_drop, "transport: dropped peer '%s' at %s: %s", ep->name,
                              ep->addr, ep->errmsg);
                ep->zombie = 1;
            }
            xp_ep_close_start(ep, 1);
        }
        if (ep->state == NA_XP_EP_CLOSED)
            (void)xp_ep_close_done(ep);
        if (ep->zombie && !ep->closing && ep->state == NA_XP_EP_CLOSED &&
            ep->close_req == NULL && ep->refs <= 0)
            xp_ep_free(ep);
    }
}

/* ---- connecting ------------------------------------------------------------------- */

/* UCX 1.13's packed worker address (src/ucp/wireup/address.c): the low 4
 * bits of byte 0 are the address version (0 = V1: the flags in the high 4
 * bits, a 1-byte header; 1 = V2: byte 0 is the version alone, byte 1 the
 * flags). Flags: DEBUG_INFO (a u8-length worker name follows), WORKER_UUID
 * (u64), CLIENT_ID (u64), AM_ONLY. The device list follows, read without a
 * length; ucp_address_unpack_header asserts (SIGABRT) on any other version. */
#define XP_UCX_ADDR_V1          0
#define XP_UCX_ADDR_V2          1
#define XP_UCX_ADDR_DEBUG_INFO  0x1
#define XP_UCX_ADDR_WORKER_UUID 0x2
#define XP_UCX_ADDR_CLIENT_ID   0x4
#define XP_UCX_ADDR_AM_ONLY     0x8

na_status_t na_xp_ucx_addr_check(const na_xp_t *xp, const uint8_t *a, size_t len)
{
    const uint8_t *own = (const uint8_t *)xp->waddr;
    unsigned ver, own_ver = xp->waddr_len > 0 ? own[0] & 0xfu : 0xffu;
    unsigned flags;
    size_t need;

    if (len < 3 || len > NA_XP_ADDR_MAX)
        return na_err(NA_ERR_PEER, "UCX worker address of %zu bytes (want 3..%d)", len,
                      NA_XP_ADDR_MAX);
    ver = a[0] & 0xfu;
    if (ver != own_ver || (ver != XP_UCX_ADDR_V1 && ver != XP_UCX_ADDR_V2))
        return na_err(NA_ERR_PEER, "UCX worker address version %u (header byte 0x%02x); this "
                      "UCX packs version %u", ver, a[0], own_ver);
    if (ver == XP_UCX_ADDR_V2) {
        if (a[0] >> 4 != 0)
            return na_err(NA_ERR_PEER, "UCX worker address header byte 0x%02x: high bits set",
                          a[0]);
        flags = a[1];
        need = 2;
    } else {
        flags = a[0] >> 4;
        need = 1;
    }
    if (flags & ~(unsigned)(XP_UCX_ADDR_DEBUG_INFO | XP_UCX_ADDR_WORKER_UUID |
                            XP_UCX_ADDR_CLIENT_ID | XP_UCX_ADDR_AM_ONLY))
        return na_err(NA_ERR_PEER, "UCX worker address flags 0x%02x: unknown bits", flags);
    /* UCX reads a uuid from a V1 address whether flagged or not */
    if ((flags & XP_UCX_ADDR_WORKER_UUID) || ver == XP_UCX_ADDR_V1)
        need += 8;
    if (flags & XP_UCX_ADDR_CLIENT_ID)
        need += 8;
    if ((flags & XP_UCX_ADDR_DEBUG_INFO) && need < len)
        need += 1 + a[need];             /* u8 length + the worker name */
    need += 1;                           /* at least the first device byte */
    if (need > len)
        return na_err(NA_ERR_PEER, "UCX worker address of %zu bytes: its header (flags 0x%02x) "
                      "announces at least %zu", len, flags, need);
    return NA_OK;
}

na_status_t na_xp_ep_ucp_create(na_xp_ep_t *ep, const void *waddr)
{
    ucp_ep_params_t p;
    ucs_status_t us;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = (const ucp_address_t *)waddr;
    p.err_mode = ep->xp->opts.errmode == NA_XP_ERRMODE_CM ? UCP_ERR_HANDLING_MODE_NONE
                                                          : UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = xp_ep_err_cb;
    p.err_handler.arg = ep;
    us = ucp_ep_create(ep->xp->worker, &p, &ep->uep);
    if (us != UCS_OK) {
        ep->uep = NULL;
        return na_err(NA_ERR_PEER, "transport: endpoint to %s: ucp_ep_create: %s", ep->addr,
                      ucs_status_string(us));
    }
    return NA_OK;
}

/* Handshake of ep finished (either way). */
static int xp_hs_finished(void *arg)
{
    na_xp_ep_t *ep = arg;
    return ep->hs_status != NA_INPROGRESS;
}

/* Open a non-blocking TCP connection to ss (connect() may still be in
 * progress). Returns the socket or -1 (*why set). */
static int xp_tcp_open(const struct sockaddr_storage *ss, socklen_t sslen, char *why, size_t wl)
{
    int one = 1;
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        snprintf(why, wl, "socket: %s", strerror(errno));
        return -1;
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, (const struct sockaddr *)ss, sslen) != 0 && errno != EINPROGRESS) {
        snprintf(why, wl, "connect: %s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

na_status_t na_xp_connect(na_xp_t *xp, const char *host, int port, na_xp_ep_t **ep_p)
{
    return na_xp_connect_ms(xp, host, port, -1, ep_p);
}

na_status_t na_xp_connect_ms(na_xp_t *xp, const char *host, int port, int timeout_ms,
                             na_xp_ep_t **ep_p)
{
    na_xp_ep_t *ep;
    na_status_t st = na_xp_connect_start(xp, host, port, timeout_ms, &ep);

    if (st != NA_OK)
        return st;
    if (!na_xp_wait_for(xp, xp_hs_finished, ep, ep->hs_deadline_ns + 1000000ull))
        na_xp_ep_fail(ep, NA_ERR_TIMEOUT, "handshake timed out");
    st = na_xp_connect_done(ep);
    if (st == NA_OK)
        *ep_p = ep;
    return st;
}

na_status_t na_xp_connect_start(na_xp_t *xp, const char *host, int port, int timeout_ms,
                                na_xp_ep_t **ep_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    char addr[64], why[160];
    na_xp_ep_t *ep;
    na_status_t st;
    int fd;

    st = na_xp_resolve(host, port, &ss, &sslen);
    if (st != NA_OK)
        return st;
    snprintf(addr, sizeof(addr), "%s:%d", host, port);
    fd = xp_tcp_open(&ss, sslen, why, sizeof(why));
    if (fd < 0)
        return na_err(NA_ERR_PEER, "transport: connecting to %s: %s", addr, why);
    ep = na_xp_ep_alloc(xp, addr, 0, fd);
    if (ep == NULL) {
        close(fd);
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    }
    ep->owned = 1;
    ep->tcp_connecting = 1;
    if (timeout_ms >= 0 && timeout_ms < xp->opts.timeout_ms)
        ep->hs_deadline_ns = na_xp_deadline(timeout_ms);
    xp->sweep_due = 1;
    *ep_p = ep;
    return NA_OK;
}

na_status_t na_xp_connect_done(na_xp_ep_t *ep)
{
    na_status_t st;

    if (ep->hs_status == NA_INPROGRESS) {
        if (na_now_ns() <= ep->hs_deadline_ns + 1000000ull)
            return NA_INPROGRESS;
        na_xp_ep_fail(ep, NA_ERR_TIMEOUT, "handshake timed out");
    }
    st = ep->hs_status;
    if (st == NA_OK && ep->state != NA_XP_EP_READY)
        st = ep->err != NA_OK ? ep->err : NA_ERR_PEER;  /* lost right after */
    if (st != NA_OK) {
        const char *why = ep->errmsg[0] ? ep->errmsg : na_errmsg();
        char msg[256], addr[sizeof(ep->addr)];
        snprintf(msg, sizeof(msg), "%s", why);
        snprintf(addr, sizeof(addr), "%s", ep->addr);
        na_xp_connect_cancel(ep);
        return na_err(st == NA_ERR_TIMEOUT ? NA_ERR_TIMEOUT : st,
                      "transport: connecting to %s: %s", addr, msg);
    }
    return NA_OK;
}

void na_xp_connect_cancel(na_xp_ep_t *ep)
{
    if (ep == NULL)
        return;
    ep->lost_reported = 1;               /* the caller hears it from us */
    ep->discard = 1;                     /* messages the owner must never see */
    na_xp_ep_close(ep);
}

void na_xp_ep_close(na_xp_ep_t *ep)
{
    na_xp_t *xp;
    if (ep == NULL)
        return;
    xp = ep->xp;
    ep->owned = 0;
    ep->lost_reported = 1;
    ep->closing = 1;
    if (ep->state == NA_XP_EP_READY && ep->uep != NULL && xp->opts.errmode != NA_XP_ERRMODE_CM) {
        /* deliver what was sent, then close by force: a gentle close keeps
         * a remote-connected ucp ep alive until the worker goes */
        ucp_request_param_t p;
        memset(&p, 0, sizeof(p));
        ep->close_req = ucp_ep_flush_nbx(ep->uep, &p);
        if (UCS_PTR_IS_ERR(ep->close_req))
            ep->close_req = NULL;
        (void)na_xp_wait_ms(xp, xp_ep_close_done, ep, xp->opts.timeout_ms);
        if (ep->close_req != NULL) {
            na_xp_req_drop(xp, ep->close_req);   /* UCX frees it when it ends */
            ep->close_req = NULL;
        }
        xp_ep_close_start(ep, 1);
    } else if (ep->state == NA_XP_EP_READY || ep->state == NA_XP_EP_CONNECTING)
        xp_ep_close_start(ep, ep->state != NA_XP_EP_READY);
    else if (ep->state == NA_XP_EP_FAILED) {
        /* the peer is gone: no clean close to wait for (a pending close
         * request is reaped by the sweep) */
        xp_ep_close_start(ep, 1);
        (void)xp_ep_close_done(ep);
        ep->closing = 0;
        ep->zombie = 1;
        if (ep->refs <= 0 && ep->close_req == NULL)
            xp_ep_free(ep);
        return;
    }
    (void)na_xp_wait_ms(xp, xp_ep_close_done, ep, xp->opts.timeout_ms);
    ep->closing = 0;
    ep->zombie = 1;
    if (ep->refs <= 0 && ep->close_req == NULL)
        xp_ep_free(ep);
}

void na_xp_ep_close_all(na_xp_t *xp)
{
    na_xp_ep_t *ep, *next;
    uint64_t deadline = na_xp_deadline(xp->opts.timeout_ms);

    for (ep = xp->eps; ep != NULL; ep = ep->next) {
        ep->owned = 0;
        ep->lost_reported = 1;
        ep->closing = 1;               /* freed by na_xp_ep_free_all() */
        ep->zombie = 1;
        if (ep->state != NA_XP_EP_CLOSED)
            xp_ep_close_start(ep, ep->state != NA_XP_EP_READY);
    }
    for (ep = xp->eps; ep != NULL; ep = ep->next)
        (void)na_xp_wait_for(xp, xp_ep_close_done, ep, deadline);
    for (ep = xp->eps; ep != NULL; ep = next) {
        next = ep->next;
        if (ep->close_req != NULL) {
            na_xp_req_drop(xp, ep->close_req);   /* UCX frees it when it completes */
            ep->close_req = NULL;
        }
    }
}

void na_xp_ep_free_all(na_xp_t *xp)
{
    while (xp->eps != NULL)
        xp_ep_free(xp->eps);
}

/* ---- accessors ------------------------------------------------------------------ */

const char *na_xp_ep_name(const na_xp_ep_t *ep) { return ep->name; }
const char *na_xp_ep_addr(const na_xp_ep_t *ep) { return ep->addr; }
int na_xp_ep_alive(const na_xp_ep_t *ep) { return ep->state == NA_XP_EP_READY; }
unsigned na_xp_ep_peer_heartbeat_ms(const na_xp_ep_t *ep) { return ep->peer_heartbeat_ms; }
int na_xp_ep_peer_role(const na_xp_ep_t *ep) { return ep->peer_role; }
void na_xp_ep_stats(const na_xp_ep_t *ep, na_xp_stats_t *stats_p) { *stats_p = ep->stats; }

void na_xp_ep_describe(const na_xp_ep_t *ep, FILE *f)
{
    if (ep->uep != NULL)
        ucp_ep_print_info(ep->uep, f);
    else
        fprintf(f, "endpoint %s at %s: closed\n", ep->name, ep->addr);
}

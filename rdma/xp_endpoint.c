/* rdma/xp_endpoint.c — endpoints: listening, connecting, the active-message
 * receive path, peer failure (UCP_ERR_HANDLING_MODE_PEER) and closing
 * (sending is in rdma/xp_send.c). Endpoint state changes made inside UCX
 * callbacks are only marks; the sweep (run by na_xp_progress) closes and
 * reports them. */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "rdma/xp_internal.h"

/* ---- bookkeeping ---------------------------------------------------------- */

/* Allocate an endpoint record and link it into xp->eps. NULL on OOM. */
static na_xp_ep_t *xp_ep_alloc(na_xp_t *xp, const char *addr, int is_server)
{
    na_xp_ep_t *ep = calloc(1, sizeof(*ep));
    if (ep == NULL)
        return NULL;
    ep->xp = xp;
    ep->state = NA_XP_EP_CONNECTING;
    ep->is_server = is_server;
    ep->hs_status = NA_INPROGRESS;
    ep->hs_deadline_ns = na_xp_deadline(xp->opts.timeout_ms);
    snprintf(ep->name, sizeof(ep->name), "?");
    snprintf(ep->addr, sizeof(ep->addr), "%s", addr);
    ep->next = xp->eps;
    xp->eps = ep;
    return ep;
}

/* Unlink and free an endpoint record (its ucp ep must be gone). */
static void xp_ep_free(na_xp_ep_t *ep)
{
    na_xp_ep_t **pp;
    for (pp = &ep->xp->eps; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ep) {
            *pp = ep->next;
            break;
        }
    }
    free(ep);
}

na_xp_ep_t *na_xp_ep_find(na_xp_t *xp, ucp_ep_h uep)
{
    na_xp_ep_t *ep;
    if (uep == NULL)
        return NULL;
    for (ep = xp->eps; ep != NULL; ep = ep->next)
        if (ep->uep == uep)
            return ep;
    return NULL;
}

void na_xp_ep_unref(na_xp_ep_t *ep)
{
    ep->refs--;
    if (ep->zombie && !ep->closing && ep->refs <= 0 && ep->state == NA_XP_EP_CLOSED &&
        ep->close_req == NULL && !ep->xp->servicing)
        xp_ep_free(ep);
}

void na_xp_ep_fail(na_xp_ep_t *ep, na_status_t st, const char *why)
{
    if (ep->state == NA_XP_EP_FAILED || ep->state == NA_XP_EP_CLOSED)
        return;
    ep->state = NA_XP_EP_FAILED;
    ep->xp->sweep_due = 1;
    if (ep->refused)
        return;                        /* keep the reason we refused it for */
    ep->err = st;
    snprintf(ep->errmsg, sizeof(ep->errmsg), "%s", why);
    if (ep->hs_status == NA_INPROGRESS)
        ep->hs_status = st;
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
            ep->fail_due_ns = na_xp_now_ns() + NA_XP_CM_GRACE_MS * 1000000ull;
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

/* Start closing ep's ucp endpoint (force after errors). */
static void xp_ep_close_start(na_xp_ep_t *ep, int force)
{
    ucp_request_param_t p;
    void *req;

    if (ep->uep == NULL) {
        ep->state = NA_XP_EP_CLOSED;
        return;
    }
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
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
    uint64_t now = na_xp_now_ns();

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
                na_xp_msg_t *m = calloc(1, sizeof(*m));
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
                na_log_warn("transport: dropped peer '%s' at %s: %s", ep->name, ep->addr, ep->errmsg);
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

/* ---- receive path ----------------------------------------------------------- */

/* Rendezvous payload landed (or failed). */
static void xp_rndv_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
    na_xp_msg_t *m = user_data;
    m->ready = (status == UCS_OK) ? 1 : -1;
    ucp_request_free(request);
}

/* Active message on NA_XP_AM_MSG: queue it for the owner. */
static ucs_status_t xp_am_msg_cb(void *arg, const void *header, size_t header_length,
                                 void *data, size_t length, const ucp_am_recv_param_t *param)
{
    na_xp_t *xp = arg;
    na_xp_ep_t *ep = NULL;
    na_xp_msg_t *m;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    char why[128];

    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        ep = na_xp_ep_find(xp, param->reply_ep);
    if (ep == NULL)
        return rndv ? UCS_ERR_REJECTED : UCS_OK;        /* nobody we know: drop */
    if (ep->state != NA_XP_EP_READY) {
        if (ep->state == NA_XP_EP_CONNECTING)
            na_xp_ep_fail(ep, NA_ERR_PROTO, "message before the handshake finished");
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    }
    if (header_length > NA_XP_HDR_MAX || length > xp->opts.max_msg) {
        snprintf(why, sizeof(why), "message of %zu+%zu bytes over the limits (%d+%zu)",
                 header_length, length, NA_XP_HDR_MAX, xp->opts.max_msg);
        na_xp_ep_fail(ep, NA_ERR_PROTO, why);
        return rndv ? UCS_ERR_REJECTED : UCS_OK;
    }
    m = calloc(1, sizeof(*m));
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
        m->pool_buf = na_xp_pool_get(xp, length);
        if (m->pool_buf == NULL) {
            m->ready = -1;
            na_xp_ep_fail(ep, NA_ERR_NOMEM, "no landing buffer for a large message");
            return UCS_ERR_NO_MEMORY;
        }
        m->data = m->pool_buf->ptr;
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
    m->data = malloc(length);
    if (m->data == NULL) {
        m->ready = -1;
        na_xp_ep_fail(ep, NA_ERR_NOMEM, "out of memory for a message");
        return UCS_OK;
    }
    m->heap = 1;
    memcpy(m->data, data, length);
    m->ready = 1;
    return UCS_OK;
}

/* Active message on NA_XP_AM_HELLO: queue it for the handshake (outside the
 * callback). */
static ucs_status_t xp_am_hello_cb(void *arg, const void *header, size_t header_length,
                                   void *data, size_t length, const ucp_am_recv_param_t *param)
{
    na_xp_t *xp = arg;
    na_xp_ep_t *ep = NULL;
    na_xp_ctl_t *c;

    if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
        ep = na_xp_ep_find(xp, param->reply_ep);
    if (ep == NULL)
        return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_REJECTED : UCS_OK;
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) || length > 4096 || header_length != 0) {
        na_xp_ep_fail(ep, NA_ERR_PROTO, "oversized handshake message");
        return (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) ? UCS_ERR_REJECTED : UCS_OK;
    }
    if (na_xp_hs_try_inline(ep, data, length))
        return UCS_OK;
    c = malloc(sizeof(*c) + length);
    if (c == NULL) {
        na_xp_ep_fail(ep, NA_ERR_NOMEM, "out of memory in the handshake");
        return UCS_OK;
    }
    c->next = NULL;
    c->ep = ep;
    c->len = length;
    memcpy(c->data, data, length);
    ep->refs++;
    if (xp->ctl_tail != NULL)
        xp->ctl_tail->next = c;
    else
        xp->ctl_head = c;
    xp->ctl_tail = c;
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
    hp.id = NA_XP_AM_HELLO;
    hp.cb = xp_am_hello_cb;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    us = ucp_worker_set_am_recv_handler(xp->worker, &hp);
    if (us != UCS_OK)
        return na_err(NA_ERR_TRANSPORT, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(us));
    return NA_OK;
}

/* ---- addresses, listening, connecting ------------------------------------------ */

/* Resolve host:port (IPv4/IPv6, numeric or name) into ss. */
static na_status_t xp_resolve(const char *host, int port, struct sockaddr_storage *ss,
                              socklen_t *len_p)
{
    struct addrinfo hints, *res = NULL;
    char portstr[16];
    int rc;

    if (port < 0 || port > 65535)
        return na_err(NA_ERR_RANGE, "transport: port %d out of range [0, 65535]", port);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(portstr, sizeof(portstr), "%d", port);
    rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0 || res == NULL)
        return na_err(NA_ERR_NOT_FOUND, "transport: cannot resolve host '%s': %s",
                      host ? host : "(any)", gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len_p = res->ai_addrlen;
    freeaddrinfo(res);
    return NA_OK;
}

/* "host:port" of a socket address. */
static void xp_addr_str(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    char h[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, h, sizeof(h));
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, h, sizeof(h));
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, len, "%s:%d", h, port);
}

/* Create a ucp endpoint with peer error handling, from a sockaddr (client) or
 * a connection request (server). */
static na_status_t xp_ep_ucp_create(na_xp_ep_t *ep, const struct sockaddr_storage *ss,
                                    socklen_t sslen, ucp_conn_request_h creq)
{
    ucp_ep_params_t p;
    ucs_status_t us;

    memset(&p, 0, sizeof(p));
    p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_mode = ep->xp->opts.errmode == NA_XP_ERRMODE_CM ? UCP_ERR_HANDLING_MODE_NONE
                                                          : UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = xp_ep_err_cb;
    p.err_handler.arg = ep;
    if (creq != NULL) {
        p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
        p.conn_request = creq;
    } else {
        p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
        p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        p.sockaddr.addr = (const struct sockaddr *)ss;
        p.sockaddr.addrlen = sslen;
    }
    us = ucp_ep_create(ep->xp->worker, &p, &ep->uep);
    if (us != UCS_OK) {
        ep->uep = NULL;
        return na_err(NA_ERR_PEER, "transport: endpoint to %s: ucp_ep_create: %s", ep->addr,
                      ucs_status_string(us));
    }
    return NA_OK;
}

/* Listener callback: remember the request; the endpoint is made in the sweep
 * of na_xp_accept_pending (outside UCX's callback). */
static void xp_conn_cb(ucp_conn_request_h creq, void *arg)
{
    na_xp_t *xp = arg;
    if (xp->n_pending_conn >= (int)(sizeof(xp->pending_conn) / sizeof(xp->pending_conn[0]))) {
        na_log_warn("transport: too many connections at once; rejecting one");
        ucp_listener_reject(xp->listener, creq);
        return;
    }
    xp->pending_conn[xp->n_pending_conn++] = creq;
    xp->sweep_due = 1;
}

/* Turn pending connection requests into endpoints waiting for HELLO. */
static void xp_accept_pending(na_xp_t *xp)
{
    int i;
    for (i = 0; i < xp->n_pending_conn; i++) {
        ucp_conn_request_h creq = xp->pending_conn[i];
        ucp_conn_request_attr_t a;
        char addr[64] = "?";
        na_xp_ep_t *ep;

        a.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
        if (ucp_conn_request_query(creq, &a) == UCS_OK)
            xp_addr_str(&a.client_address, addr, sizeof(addr));
        ep = xp_ep_alloc(xp, addr, 1);
        if (ep == NULL) {
            ucp_listener_reject(xp->listener, creq);
            continue;
        }
        if (xp_ep_ucp_create(ep, NULL, 0, creq) != NA_OK) {
            na_log_warn("%s", na_errmsg());
            xp_ep_free(ep);
            continue;
        }
        na_log_debug("transport: connection from %s", addr);
    }
    xp->n_pending_conn = 0;
}

/* Why port is taken, from /proc/net/tcp{,6}: 1 if only TIME_WAIT sockets
 * hold it (possible only when UCX_TCP_CM_REUSEADDR was turned off: then a
 * node that closed connections first cannot listen again for about a minute). */
static int xp_port_in_time_wait(int port)
{
    static const char *files[] = { "/proc/net/tcp", "/proc/net/tcp6" };
    int f, tw = 0, other = 0;
    for (f = 0; f < 2; f++) {
        char line[512];
        FILE *fp = fopen(files[f], "r");
        if (fp == NULL)
            continue;
        while (fgets(line, sizeof(line), fp) != NULL) {
            char local[128];
            unsigned st;
            const char *colon;
            if (sscanf(line, " %*d: %127s %*s %x", local, &st) != 2)
                continue;
            colon = strrchr(local, ':');
            if (colon == NULL || (int)strtol(colon + 1, NULL, 16) != port)
                continue;
            if (st == 0x06)
                tw = 1;
            else
                other = 1;
        }
        fclose(fp);
    }
    return tw && !other;
}

na_status_t na_xp_listen(na_xp_t *xp, const char *host, int port, int *port_p)
{
    ucp_listener_params_t lp;
    ucp_listener_attr_t la;
    struct sockaddr_storage ss;
    socklen_t sslen;
    ucs_status_t us;
    na_status_t st;

    if (xp->listener != NULL)
        return na_err(NA_ERR_INVALID, "transport: node already listens");
    st = xp_resolve(host, port, &ss, &sslen);
    if (st != NA_OK)
        return st;
    memset(&lp, 0, sizeof(lp));
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = (const struct sockaddr *)&ss;
    lp.sockaddr.addrlen = sslen;
    lp.conn_handler.cb = xp_conn_cb;
    lp.conn_handler.arg = xp;
    us = ucp_listener_create(xp->worker, &lp, &xp->listener);
    if (us == UCS_ERR_BUSY && xp_port_in_time_wait(port))
        return na_err(NA_ERR_BUSY, "transport: cannot listen on %s:%d: port taken by "
                      "connections in TIME_WAIT from a recent run (free again within about "
                      "60 s; UCX_TCP_CM_REUSEADDR was off in this or that run)", host, port);
    if (us == UCS_ERR_BUSY)
        return na_err(NA_ERR_BUSY, "transport: cannot listen on %s:%d: port taken", host, port);
    if (us != UCS_OK)
        return na_err(us == UCS_ERR_IO_ERROR ? NA_ERR_BUSY : NA_ERR_TRANSPORT,
                      "transport: cannot listen on %s:%d: %s", host, port, ucs_status_string(us));
    la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    if (port_p != NULL) {
        *port_p = port;
        if (ucp_listener_query(xp->listener, &la) == UCS_OK) {
            if (la.sockaddr.ss_family == AF_INET)
                *port_p = ntohs(((struct sockaddr_in *)&la.sockaddr)->sin_port);
            else if (la.sockaddr.ss_family == AF_INET6)
                *port_p = ntohs(((struct sockaddr_in6 *)&la.sockaddr)->sin6_port);
        }
    }
    na_log_info("transport: %s listening on %s:%d (tls %s, errmode %s)", xp->name, host,
                port_p ? *port_p : port, na_xp_tls_name(xp->opts.tls),
                na_xp_errmode_name(xp->opts.errmode));
    return NA_OK;
}

/* Handshake of ep finished (either way). */
static int xp_hs_finished(void *arg)
{
    na_xp_ep_t *ep = arg;
    return ep->hs_status != NA_INPROGRESS;
}

na_status_t na_xp_connect(na_xp_t *xp, const char *host, int port, na_xp_ep_t **ep_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen;
    char addr[64];
    na_xp_ep_t *ep;
    na_status_t st;

    st = xp_resolve(host, port, &ss, &sslen);
    if (st != NA_OK)
        return st;
    snprintf(addr, sizeof(addr), "%s:%d", host, port);
    ep = xp_ep_alloc(xp, addr, 0);
    if (ep == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    ep->owned = 1;
    st = xp_ep_ucp_create(ep, &ss, sslen, NULL);
    if (st != NA_OK) {
        xp_ep_free(ep);
        return st;
    }
    st = na_xp_hs_start(ep);
    if (st == NA_OK && !na_xp_wait_for(xp, xp_hs_finished, ep, ep->hs_deadline_ns + 1000000ull))
        na_xp_ep_fail(ep, NA_ERR_TIMEOUT, "handshake timed out");
    if (st == NA_OK)
        st = ep->hs_status;
    if (st != NA_OK) {
        const char *why = ep->errmsg[0] ? ep->errmsg : na_errmsg();
        char msg[256];
        snprintf(msg, sizeof(msg), "%s", why);
        ep->lost_reported = 1;               /* the caller hears it from us */
        na_xp_ep_close(ep);
        return na_err(st == NA_ERR_TIMEOUT ? NA_ERR_TIMEOUT : st,
                      "transport: connecting to %s: %s", addr, msg);
    }
    *ep_p = ep;
    return NA_OK;
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
    if (ep->state == NA_XP_EP_READY || ep->state == NA_XP_EP_CONNECTING)
        xp_ep_close_start(ep, ep->state != NA_XP_EP_READY);
    else if (ep->state == NA_XP_EP_FAILED)
        xp_ep_close_start(ep, 1);
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

    xp_accept_pending(xp);
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
            ucp_request_free(ep->close_req);   /* UCX frees it when it completes */
            ep->close_req = NULL;
        }
    }
}

void na_xp_ep_free_all(na_xp_t *xp)
{
    while (xp->eps != NULL)
        xp_ep_free(xp->eps);
}

void na_xp_accept(na_xp_t *xp)
{
    if (xp->n_pending_conn > 0)
        xp_accept_pending(xp);
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

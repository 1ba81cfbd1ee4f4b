/* rdma/xp_sock.c — a connection's TCP socket below the handshake: queued
 * writes (a whole frame is taken, written as far as the socket takes it,
 * the rest on the next service), the sealed ADDR frame, closing, and the
 * address resolution connect and listen share. Called by the front door
 * (xp_door.c), the handshake (xp_handshake.c) and the endpoints
 * (xp_endpoint.c); calls none of them. */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/wire.h"
#include "rdma/xp_internal.h"

na_status_t na_xp_resolve(const char *host, int port, struct sockaddr_storage *ss,
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

/* ---- writing ------------------------------------------------------------------ */

int na_xp_sock_io(ssize_t n, size_t *count)
{
    if (n > 0) {
        *count += (size_t)n;
        return 1;
    }
    if (n < 0 && errno == EINTR)
        return 1;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n == 0)
        errno = 0;
    return -1;
}

void na_xp_door_flush(na_xp_ep_t *ep)
{
    while (ep->ooff < ep->olen) {
        char why[128];
        int r = na_xp_sock_io(send(ep->fd, ep->obuf + ep->ooff, ep->olen - ep->ooff, MSG_NOSIGNAL),
                        &ep->ooff);
        if (r > 0)
            continue;
        if (r == 0)
            return;
        snprintf(why, sizeof(why), "send on the control socket: %s",
                 errno ? strerror(errno) : "closed");
        na_xp_ep_fail(ep, NA_ERR_PEER, why);
        return;
    }
    ep->ooff = ep->olen = 0;
    if (ep->state == NA_XP_EP_READY) {   /* set-up done: nothing more is written */
        free(ep->obuf);
        ep->obuf = NULL;
        ep->ocap = 0;
    }
}

na_status_t na_xp_door_write(na_xp_ep_t *ep, const void *data, size_t len)
{
    if (ep->fd < 0)
        return na_err(NA_ERR_PEER, "transport: handshake with %s: connection closed", ep->addr);
    if (ep->olen + len > ep->ocap) {
        size_t cap = ep->olen + len + 1024;
        uint8_t *p = realloc(ep->obuf, cap);
        if (p == NULL)
            return na_err(NA_ERR_NOMEM, "transport: out of memory");
        ep->obuf = p;
        ep->ocap = cap;
    }
    memcpy(ep->obuf + ep->olen, data, len);
    ep->olen += len;
    na_xp_door_flush(ep);
    if (ep->state == NA_XP_EP_FAILED)
        return na_err(NA_ERR_PEER, "transport: handshake with %s: %s", ep->addr, ep->errmsg);
    return NA_OK;
}

na_status_t na_xp_door_send_addr(na_xp_ep_t *ep)
{
    na_xp_t *xp = ep->xp;
    const void *waddr = xp->opts.test_addr ? xp->opts.test_addr : (const void *)xp->waddr;
    size_t wlen = xp->opts.test_addr ? xp->opts.test_addr_len : xp->waddr_len;
    size_t blen = NA_XP_ID_LEN + wlen;
    uint8_t *f = malloc(NA_XP_ADDR_HDR + blen);
    na_status_t st;

    if (f == NULL)
        return na_err(NA_ERR_NOMEM, "transport: out of memory");
    memcpy(f, "NAXA", 4);
    f[4] = (uint8_t)blen;
    f[5] = (uint8_t)(blen >> 8);
    f[6] = (uint8_t)(blen >> 16);
    f[7] = (uint8_t)(blen >> 24);
    /* body: our id (opaque to the peer: our own byte order) | worker address,
     * sealed to this handshake (encrypted, MAC over both nonces and the side) */
    memcpy(f + NA_XP_ADDR_HDR, &ep->rx_id, NA_XP_ID_LEN);
    memcpy(f + NA_XP_ADDR_HDR + NA_XP_ID_LEN, waddr, wlen);
    st = na_wire_addr_seal(xp->secret, xp->secret_len,
                           ep->is_server ? NA_WIRE_AUTH_SERVER : NA_WIRE_AUTH_CLIENT,
                           ep->is_server ? ep->nonce_peer : ep->nonce_local,
                           ep->is_server ? ep->nonce_local : ep->nonce_peer,
                           f + NA_XP_ADDR_HDR, blen, f + 8);
    if (st == NA_OK)
        st = na_xp_door_write(ep, f, NA_XP_ADDR_HDR + blen);
    free(f);
    return st;
}

void na_xp_door_close(na_xp_ep_t *ep)
{
    if (ep->fd >= 0)
        close(ep->fd);
    ep->fd = -1;
    free(ep->rbuf);
    free(ep->obuf);
    ep->rbuf = ep->obuf = NULL;
    ep->rlen = ep->rneed = ep->olen = ep->ooff = ep->ocap = 0;
}

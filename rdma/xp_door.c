/* rdma/xp_door.c — the front door: the node's own TCP listener and the TCP
 * socket of every connection. Nothing reaches UCX before the handshake on
 * that socket has passed (rdma/xp_handshake.c); afterwards the socket stays
 * open as the connection's liveness channel (EOF = the peer is gone).
 *
 * Defences: accepted connections still in set-up are capped
 * (NA_XP_PREAUTH_MAX, NA_XP_PREAUTH_PER_ADDR from one address; a newcomer
 * displaces the oldest unproven set-up of the address holding the most, so
 * that an attacker without the secret cannot starve peers that have it) and
 * must finish within NA_XP_PREAUTH_MS (NA_XP_PREAUTH_BUSY_MS when the table
 * is half full); frames are read incrementally with strict size limits
 * before anything is allocated or decoded; accept() failures (EMFILE ...)
 * pause the listener for a moment instead of spinning; every log line an
 * outsider can cause goes through a limiter. */
#define _GNU_SOURCE   /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/wire.h"
#include "rdma/xp_internal.h"

/* "host:port" of a socket address; the host alone in host (may be NULL). */
static void door_addr_str(const struct sockaddr_storage *ss, char *buf, size_t len,
                          char *host, size_t hlen)
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
    if (host != NULL)
        snprintf(host, hlen, "%s", h);
}

/* ---- listening -------------------------------------------------------------- */

na_status_t na_xp_listen(na_xp_t *xp, const char *host, int port, int *port_p)
{
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    na_status_t st;
    int fd, one = 1, e;

    if (xp->lfd >= 0)
        return na_err(NA_ERR_INVALID, "transport: node already listens");
    st = na_xp_resolve(host, port, &ss, &sslen);
    if (st != NA_OK)
        return st;
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return na_err(NA_ERR_TRANSPORT, "transport: socket: %s", strerror(errno));
    /* a node restarted at once listens again even while connections it
     * closed first sit in TIME_WAIT; a port another process listens on is
     * still refused (no SO_REUSEPORT) */
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss, sslen) != 0 || listen(fd, SOMAXCONN) != 0) {
        e = errno;
        close(fd);
        if (e == EADDRINUSE)
            return na_err(NA_ERR_BUSY, "transport: cannot listen on %s:%d: port taken", host, port);
        return na_err(e == EADDRNOTAVAIL ? NA_ERR_BUSY : NA_ERR_TRANSPORT,
                      "transport: cannot listen on %s:%d: %s", host, port, strerror(e));
    }
    sslen = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0)
        door_addr_str(&ss, xp->laddr, sizeof(xp->laddr), NULL, 0);
    else
        snprintf(xp->laddr, sizeof(xp->laddr), "%s:%d", host, port);
    if (port_p != NULL) {
        const char *colon = strrchr(xp->laddr, ':');
        *port_p = colon ? atoi(colon + 1) : port;
    }
    xp->lfd = fd;
    na_log_info("transport: %s listening on %s (tls %s, errmode %s)", xp->name, xp->laddr,
                na_xp_tls_name(xp->opts.tls), na_xp_errmode_name(xp->opts.errmode));
    return NA_OK;
}

void na_xp_door_unlisten(na_xp_t *xp)
{
    if (xp->lfd >= 0)
        close(xp->lfd);
    xp->lfd = -1;
}

/* Room in the set-up table for a connection from host. An attacker without
 * the secret must not starve peers that have it: a peer address holds at
 * most NA_XP_PREAUTH_PER_ADDR set-ups (past that its own oldest unproven one
 * goes), and a full table drops the oldest unproven set-up of the address
 * holding the most; a proven peer (AUTH checked) is never dropped. 1 if the
 * new connection may be taken (*why says what was dropped, "" if nothing). */
static int door_make_room(na_xp_t *xp, const char *host, char *why, size_t wl)
{
    na_xp_ep_t *ep, *victim = NULL, *oldest_same = NULL;
    int same = 0, i, n_hosts = 0, best = -1;
    struct { const char *host; int n; na_xp_ep_t *oldest; } h[NA_XP_PREAUTH_MAX];

    why[0] = '\0';
    for (ep = xp->eps; ep != NULL; ep = ep->next) {
        if (!ep->preauth || !ep->is_server)
            continue;
        if (strcmp(ep->host, host) == 0) {
            same++;
            if (!na_xp_hs_proven(ep) &&
                (oldest_same == NULL || ep->accepted_ns < oldest_same->accepted_ns))
                oldest_same = ep;
        }
        for (i = 0; i < n_hosts && strcmp(h[i].host, ep->host) != 0; i++)
            ;
        if (i == n_hosts) {
            if (n_hosts == NA_XP_PREAUTH_MAX)
                continue;
            h[i].host = ep->host;
            h[i].n = 0;
            h[i].oldest = NULL;
            n_hosts++;
        }
        h[i].n++;
        if (!na_xp_hs_proven(ep) &&
            (h[i].oldest == NULL || ep->accepted_ns < h[i].oldest->accepted_ns))
            h[i].oldest = ep;
    }
    if (same >= NA_XP_PREAUTH_PER_ADDR) {
        victim = oldest_same;
        if (victim == NULL)
            return 0;
        snprintf(why, wl, "%d connections in set-up from %s", same, host);
    } else if (xp->n_preauth >= NA_XP_PREAUTH_MAX) {
        for (i = 0; i < n_hosts; i++)
            if (h[i].oldest != NULL && (best < 0 || h[i].n > h[best].n))
                best = i;
        if (best < 0)
            return 0;
        victim = h[best].oldest;
        snprintf(why, wl, "%d connections in set-up, %d from %s", xp->n_preauth, h[best].n,
                 victim->host);
    } else {
        return 1;
    }
    xp->n_evicted++;
    na_xp_ep_fail(victim, NA_ERR_BUSY, "set-up dropped for a newer connection");
    return 1;
}

/* Accept what is waiting (a bounded burst). */
static void door_accept(na_xp_t *xp)
{
    int i;

    for (i = 0; i < NA_XP_ACCEPT_BURST; i++) {
        struct sockaddr_storage ss;
        socklen_t sslen = sizeof(ss);
        char addr[64], host[48], why[160];
        na_xp_ep_t *ep;
        int ms, fd = accept4(xp->lfd, (struct sockaddr *)&ss, &sslen, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO)
                continue;
            /* EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection stays in the
             * backlog and the listener readable; leave it for a moment
             * rather than spin on it */
            na_xp_rl_warn(&xp->rl_accept, "transport: accept on %s: %s (pausing %d ms)",
                          xp->laddr, strerror(errno), NA_XP_ACCEPT_PAUSE_MS);
            xp->accept_pause_ns = na_now_ns() + NA_XP_ACCEPT_PAUSE_MS * 1000000ull;
            return;
        }
        door_addr_str(&ss, addr, sizeof(addr), host, sizeof(host));
        if (!door_make_room(xp, host, why, sizeof(why))) {
            close(fd);
            xp->n_refused_full++;
            na_xp_rl_warn(&xp->rl_accept, "transport: %d connections in set-up already, none "
                          "droppable: closed one from %s", xp->n_preauth, addr);
            continue;
        }
        if (why[0] != '\0')
            na_xp_rl_warn(&xp->rl_accept, "transport: %s: dropped the oldest unproven one "
                          "for one from %s (%u so far)", why, addr, xp->n_evicted);
        ep = na_xp_ep_alloc(xp, addr, 1, fd);
        if (ep == NULL) {
            close(fd);
            na_xp_rl_warn(&xp->rl_accept, "transport: out of memory for a connection from %s",
                          addr);
            continue;
        }
        snprintf(ep->host, sizeof(ep->host), "%s", host);
        ep->accepted_ns = na_now_ns();
        /* under pressure (half the table taken) a set-up gets less time */
        ms = xp->n_preauth >= NA_XP_PREAUTH_MAX / 2 ? NA_XP_PREAUTH_BUSY_MS : NA_XP_PREAUTH_MS;
        ep->hs_deadline_ns = na_xp_deadline(ms < xp->opts.timeout_ms ? ms : xp->opts.timeout_ms);
        ep->preauth = 1;
        xp->n_preauth++;
        na_log_debug("transport: connection from %s", addr);
    }
}

/* ---- reading -------------------------------------------------------------------- */

/* The header of the frame in ep->rbuf is complete: check it and set the
 * frame's whole size. 0 if the frame is refused (ep told). */
static int door_frame_size(na_xp_ep_t *ep)
{
    if (ep->want_addr) {
        uint32_t len = (uint32_t)ep->rbuf[4] | (uint32_t)ep->rbuf[5] << 8 |
                       (uint32_t)ep->rbuf[6] << 16 | (uint32_t)ep->rbuf[7] << 24;
        if (memcmp(ep->rbuf, "NAXA", 4) != 0 || len <= NA_XP_ID_LEN ||
            len > NA_XP_ID_LEN + NA_XP_ADDR_MAX) {
            na_err(NA_ERR_PROTO, "bad address frame (body of %u bytes, want %d..%d)", len,
                   NA_XP_ID_LEN + 1, NA_XP_ID_LEN + NA_XP_ADDR_MAX);
            na_xp_hs_bad_frame(ep, NA_ERR_PROTO);
            return 0;
        }
        ep->rneed = NA_XP_ADDR_HDR + len;
    } else {
        na_wire_hdr_t h;
        na_status_t st = na_wire_hdr_decode(ep->rbuf, NA_WIRE_HDR_SIZE, &h);
        if (st != NA_OK) {
            na_xp_hs_bad_frame(ep, st);
            return 0;
        }
        if (h.payload_len > (uint64_t)(NA_XP_FRAME_MAX - h.hdr_len)) {
            na_err(NA_ERR_PROTO, "handshake frame %s of %llu+%u bytes over the %d-byte limit",
                   na_wire_type_name(h.type), (unsigned long long)h.payload_len, h.hdr_len,
                   NA_XP_FRAME_MAX);
            na_xp_hs_bad_frame(ep, NA_ERR_PROTO);
            return 0;
        }
        ep->rneed = h.hdr_len + (size_t)h.payload_len;
    }
    ep->frame_sized = 1;
    return 1;
}

/* Read from ep's socket in set-up: whole frames go to the handshake. */
static void door_read(na_xp_ep_t *ep)
{
    while (ep->state == NA_XP_EP_CONNECTING && ep->fd >= 0 && !ep->refused) {
        char why[160];
        int r;
        if (ep->rbuf == NULL) {
            ep->rbuf = malloc(NA_XP_ADDR_HDR + NA_XP_ID_LEN + NA_XP_ADDR_MAX + NA_XP_ADDR_PAD);
            if (ep->rbuf == NULL) {
                na_xp_ep_fail(ep, NA_ERR_NOMEM, "out of memory in the handshake");
                return;
            }
        }
        if (ep->rneed == 0) {
            ep->rneed = ep->want_addr ? NA_XP_ADDR_HDR : NA_WIRE_HDR_SIZE;
            ep->frame_sized = 0;
            ep->rlen = 0;
        }
        if (ep->rlen == ep->rneed) {
            if (!ep->frame_sized) {
                if (!door_frame_size(ep))
                    return;
                continue;
            }
            ep->rneed = 0;
            na_xp_hs_frame(ep);
            continue;
        }
        r = na_xp_sock_io(recv(ep->fd, ep->rbuf + ep->rlen, ep->rneed - ep->rlen, 0), &ep->rlen);
        if (r > 0)
            continue;
        if (r == 0)
            return;
        snprintf(why, sizeof(why), "%s during the handshake%s",
                 errno ? strerror(errno) : "connection closed",
                 ep->rlen > 0 ? " (in the middle of a frame)" : "");
        na_xp_ep_fail(ep, NA_ERR_PEER, why);
        return;
    }
}

/* A READY endpoint's socket is readable: nothing may come but EOF. */
static void door_watch(na_xp_ep_t *ep)
{
    uint8_t b[64];
    ssize_t n = recv(ep->fd, b, sizeof(b), 0);
    const char *why;

    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n > 0) {
        na_xp_door_close(ep);
        na_xp_ep_fail(ep, NA_ERR_PROTO, "data on the control socket after the set-up");
        return;
    }
    why = n == 0 ? "the peer closed its connection" : strerror(errno);
    na_xp_door_close(ep);
    /* messages still in flight on UCX's own lanes (a BYE sent just before
     * the close) may arrive after the socket's EOF: give them a moment */
    if (ep->fail_due_ns == 0) {
        ep->fail_due_ns = na_now_ns() + NA_XP_CM_GRACE_MS * 1000000ull;
        ep->err = NA_ERR_PEER;
        snprintf(ep->errmsg, sizeof(ep->errmsg), "connection lost (%s)", why);
    }
    ep->xp->sweep_due = 1;
}

/* The client's non-blocking connect() finished: start the handshake. */
static void door_connected(na_xp_ep_t *ep)
{
    int err = 0;
    socklen_t len = sizeof(err);

    if (getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    if (err == EINPROGRESS)
        return;
    ep->tcp_connecting = 0;
    if (err != 0) {
        char why[128];
        snprintf(why, sizeof(why), "connect: %s", strerror(err));
        na_xp_ep_fail(ep, NA_ERR_PEER, why);
        return;
    }
    (void)na_xp_hs_start(ep);
}

/* ---- the poll set --------------------------------------------------------------- */

/* Make room for n entries in the poll set. 0 on OOM. */
static int door_pfd_room(na_xp_t *xp, int n)
{
    struct pollfd *p;
    na_xp_ep_t **e;
    int cap;

    if (n <= xp->pfd_cap)
        return 1;
    cap = n + 32;
    p = realloc(xp->pfd, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return 0;
    xp->pfd = p;
    e = realloc(xp->pfd_ep, (size_t)cap * sizeof(*e));
    if (e == NULL)
        return 0;
    xp->pfd_ep = e;
    xp->pfd_cap = cap;
    return 1;
}

void na_xp_door_pollset(na_xp_t *xp)
{
    na_xp_ep_t *ep;
    int n = 2;

    for (ep = xp->eps; ep != NULL; ep = ep->next)
        n++;
    xp->pfd_n = 0;
    if (!door_pfd_room(xp, n))
        n = xp->pfd_cap;                    /* OOM: poll what fits */
    if (n < 1)
        return;
    xp->pfd[0].fd = xp->efd;
    xp->pfd[0].events = POLLIN;
    xp->pfd_ep[0] = NULL;
    xp->pfd_n = 1;
    if (xp->lfd >= 0 && xp->pfd_n < n &&
        (xp->accept_pause_ns == 0 || na_now_ns() >= xp->accept_pause_ns)) {
        xp->accept_pause_ns = 0;
        xp->pfd[xp->pfd_n].fd = xp->lfd;
        xp->pfd[xp->pfd_n].events = POLLIN;
        xp->pfd_ep[xp->pfd_n++] = NULL;
    }
    for (ep = xp->eps; ep != NULL && xp->pfd_n < n; ep = ep->next) {
        short ev;
        if (ep->fd < 0)
            continue;
        ev = ep->tcp_connecting || ep->olen > ep->ooff ? POLLOUT : 0;
        if (!ep->tcp_connecting && !ep->refused)
            ev |= POLLIN;            /* a refused peer: only our REFUSE goes out */
        if (ev == 0)
            continue;
        xp->pfd[xp->pfd_n].fd = ep->fd;
        xp->pfd[xp->pfd_n].events = ev;
        xp->pfd_ep[xp->pfd_n++] = ep;
    }
}

void na_xp_door_service(na_xp_t *xp)
{
    int i, n, accept_due = 0;

    na_xp_door_pollset(xp);
    if (xp->pfd_n <= 1)
        return;
    n = poll(xp->pfd + 1, (nfds_t)(xp->pfd_n - 1), 0);
    if (n <= 0)
        return;
    for (i = 1; i < xp->pfd_n; i++) {
        na_xp_ep_t *ep = xp->pfd_ep[i];
        short rev = xp->pfd[i].revents;
        if (rev == 0)
            continue;
        if (ep == NULL) {
            accept_due = 1;    /* after the sockets: a set-up that can progress does
                                  so before newcomers may displace it */
            continue;
        }
        if (ep->fd != xp->pfd[i].fd)
            continue;                       /* closed meanwhile */
        if (ep->tcp_connecting) {
            door_connected(ep);
            continue;
        }
        if (rev & POLLOUT)
            na_xp_door_flush(ep);
        if (!(rev & (POLLIN | POLLHUP | POLLERR)) || ep->fd < 0)
            continue;
        if (ep->state == NA_XP_EP_CONNECTING)
            door_read(ep);
        else if (ep->state == NA_XP_EP_READY)
            door_watch(ep);
    }
    if (accept_due)
        door_accept(xp);
    xp->sweep_due = 1;
}

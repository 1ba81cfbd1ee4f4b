/* rdma/xp_handshake.c — the HELLO handshake of common/wire.h on a new
 * connection's TCP socket (rdma/xp_door.c), before UCX is involved at all:
 *
 *   client                                server
 *   HELLO {name_c, role, cluster, nonce_c} ─▶ version, cluster checked
 *                                         ◀─ HELLO_CHALLENGE {name_s, nonce_s, mac_s}
 *   verify mac_s; AUTH {mac_c}            ─▶ verify mac_c
 *   ADDR {client worker address, id_c}    ─▶ ucp ep to the client (server: READY)
 *                                         ◀─ HELLO_OK {heartbeat_ms}
 *                                         ◀─ ADDR {server worker address, id_s}
 *   ucp ep to the server (client: READY)
 *
 * HELLO..HELLO_OK are wire messages (64-byte header + payload, at most
 * NA_XP_FRAME_MAX bytes); ADDR is the transport's own frame ("NAXA", u32
 * body length, mac[32], body = u64 connection id | the address), sealed to
 * this handshake (na_wire_addr_seal: encrypted, MAC over both nonces and the
 * sender's side): a relay that alters it gets the connection refused, and
 * the address is checked (na_xp_ucx_addr_check) before UCX parses it. A UCX
 * worker address leaves a node only for a peer that has proven the cluster
 * secret. The ids are random; every message carries the receiver's id, so
 * that a message is matched to its connection whatever UCX's endpoint
 * matching did.
 * Any failure answers REFUSE {reason, text} and drops that connection only. */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire.h"
#include "rdma/xp_internal.h"

enum {
    XP_HS_START = 0,     /* server: waiting for HELLO; client: TCP connect */
    XP_HS_HELLO_SENT,    /* client: waiting for HELLO_CHALLENGE */
    XP_HS_CHALLENGED,    /* server: waiting for AUTH */
    XP_HS_AUTHED,        /* server: client proven, waiting for its ADDR */
    XP_HS_AUTH_SENT,     /* client: waiting for HELLO_OK */
    XP_HS_OK_IN,         /* client: HELLO_OK in, waiting for the server's ADDR */
    XP_HS_DONE,
};

/* Encode m and send it on ep's handshake channel. */
static na_status_t xp_hs_send(na_xp_ep_t *ep, const na_wire_msg_t *m)
{
    uint8_t buf[1024];
    size_t len;
    na_status_t st = na_wire_encode(m, buf, sizeof(buf), &len);
    if (st != NA_OK)
        return st;
    return na_xp_door_write(ep, buf, len);
}

/* Answer REFUSE and drop ep shortly after (so the REFUSE can leave first). */
static void xp_hs_refuse(na_xp_ep_t *ep, na_wire_refuse_t reason, na_status_t st, const char *text)
{
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REFUSE;
    m.u.refuse.reason = reason;
    snprintf(m.u.refuse.text, sizeof(m.u.refuse.text), "%s", text);
    (void)xp_hs_send(ep, &m);
    if (ep->is_server) {
        /* keep the endpoint a moment so the REFUSE is delivered; the sweep
         * drops it at hs_deadline_ns with this reason */
        ep->refused = 1;
        ep->hs_status = st;
        ep->err = st;
        snprintf(ep->errmsg, sizeof(ep->errmsg), "refused (%s): %s",
                 na_wire_refuse_name(reason), text);
        ep->hs_deadline_ns = na_xp_deadline(200);
        ep->hs_step = XP_HS_DONE;
        ep->xp->sweep_due = 1;
    } else {
        /* a server that talks nonsense is a bad peer (NA_ERR_PEER), not our
         * protocol error */
        na_xp_ep_fail(ep, st == NA_ERR_PROTO ? NA_ERR_PEER : st, text);
    }
}

/* Version and cluster checks shared by HELLO and HELLO_CHALLENGE. */
static int xp_hs_check_hello(na_xp_ep_t *ep, const na_wire_hello_t *h)
{
    char text[400];
    if (na_wire_version_check(h->ver_major, h->ver_minor) != NA_OK) {
        snprintf(text, sizeof(text), "peer '%s' speaks wire version %u.%u, we speak %u.%u",
                 h->name, h->ver_major, h->ver_minor, NA_WIRE_VERSION_MAJOR, NA_WIRE_VERSION_MINOR);
        xp_hs_refuse(ep, NA_WIRE_REFUSE_VERSION, NA_ERR_VERSION, text);
        return 0;
    }
    if (strcmp(h->cluster, ep->xp->cluster) != 0) {
        snprintf(text, sizeof(text), "peer '%s' belongs to cluster '%s', not '%s'",
                 h->name, h->cluster, ep->xp->cluster);
        xp_hs_refuse(ep, NA_WIRE_REFUSE_CLUSTER, NA_ERR_AUTH, text);
        return 0;
    }
    snprintf(ep->name, sizeof(ep->name), "%s", h->name);
    ep->peer_role = h->role;
    memcpy(ep->nonce_peer, h->nonce, NA_XP_NONCE_LEN);
    return 1;
}

/* Fill a HELLO body with this node's identity and a fresh nonce. */
static na_status_t xp_hs_hello_fill(na_xp_ep_t *ep, na_wire_hello_t *h)
{
    na_status_t st = na_wire_nonce(ep->nonce_local);
    if (st != NA_OK)
        return st;
    h->role = (na_wire_role_t)ep->xp->opts.role;
    memcpy(h->nonce, ep->nonce_local, NA_XP_NONCE_LEN);
    snprintf(h->name, sizeof(h->name), "%s", ep->xp->name);
    snprintf(h->cluster, sizeof(h->cluster), "%s", ep->xp->cluster);
    return NA_OK;
}

na_status_t na_xp_hs_start(na_xp_ep_t *ep)
{
    na_wire_msg_t m;
    na_status_t st;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_HELLO;
    st = xp_hs_hello_fill(ep, &m.u.hello);
    if (st == NA_OK)
        st = xp_hs_send(ep, &m);
    if (st != NA_OK) {
        na_xp_ep_fail(ep, st, na_errmsg());
        return st;
    }
    ep->hs_step = XP_HS_HELLO_SENT;
    return NA_OK;
}

/* Server: HELLO arrived -> HELLO_CHALLENGE. */
static void xp_hs_on_hello(na_xp_ep_t *ep, const na_wire_hello_t *h)
{
    na_xp_t *xp = ep->xp;
    na_wire_msg_t m;
    na_status_t st;

    if (!xp_hs_check_hello(ep, h))
        return;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_HELLO_CHALLENGE;
    st = xp_hs_hello_fill(ep, &m.u.challenge.hello);
    if (st == NA_OK)
        st = na_wire_auth_compute(xp->secret, xp->secret_len, NA_WIRE_AUTH_SERVER,
                                  ep->nonce_peer, ep->nonce_local, ep->name, xp->name,
                                  xp->cluster, m.u.challenge.mac);
    if (st == NA_OK)
        st = xp_hs_send(ep, &m);
    if (st != NA_OK) {
        na_xp_ep_fail(ep, st, na_errmsg());
        return;
    }
    ep->hs_step = XP_HS_CHALLENGED;
}

/* Client: HELLO_CHALLENGE arrived -> verify the server, send AUTH. */
static void xp_hs_on_challenge(na_xp_ep_t *ep, const na_wire_challenge_t *c)
{
    na_xp_t *xp = ep->xp;
    na_wire_msg_t m;
    na_status_t st;
    char text[400];

    if (!xp_hs_check_hello(ep, &c->hello))
        return;
    if (na_wire_auth_verify(xp->secret, xp->secret_len, NA_WIRE_AUTH_SERVER, ep->nonce_local,
                            ep->nonce_peer, xp->name, ep->name, xp->cluster, c->mac) != NA_OK &&
        !xp->opts.test_skip_server_proof) {
        snprintf(text, sizeof(text), "peer '%s' could not prove the cluster secret", ep->name);
        xp_hs_refuse(ep, NA_WIRE_REFUSE_AUTH, NA_ERR_AUTH, text);
        return;
    }
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_AUTH;
    st = na_wire_auth_compute(xp->secret, xp->secret_len, NA_WIRE_AUTH_CLIENT, ep->nonce_local,
                              ep->nonce_peer, xp->name, ep->name, xp->cluster, m.u.auth.mac);
    if (st == NA_OK)
        st = xp_hs_send(ep, &m);
    if (st == NA_OK)
        st = na_xp_door_send_addr(ep);
    if (st != NA_OK) {
        na_xp_ep_fail(ep, st, na_errmsg());
        return;
    }
    /* the server is proven and alone knows rx_id: it may send as soon as it
     * is READY, possibly before its HELLO_OK is read here */
    ep->rx_open = 1;
    ep->hs_step = XP_HS_AUTH_SENT;
}

/* Server: AUTH arrived -> verify the client, then wait for its ADDR. */
static void xp_hs_on_auth(na_xp_ep_t *ep, const na_wire_auth_t *a)
{
    na_xp_t *xp = ep->xp;
    char text[400];

    if (na_wire_auth_verify(xp->secret, xp->secret_len, NA_WIRE_AUTH_CLIENT, ep->nonce_peer,
                            ep->nonce_local, ep->name, xp->name, xp->cluster, a->mac) != NA_OK) {
        snprintf(text, sizeof(text), "peer '%s' could not prove the cluster secret", ep->name);
        xp_hs_refuse(ep, NA_WIRE_REFUSE_AUTH, NA_ERR_AUTH, text);
        return;
    }
    ep->want_addr = 1;
    ep->hs_step = XP_HS_AUTHED;
}

/* Server: the proven client's ADDR arrived -> ucp ep, READY, HELLO_OK + our
 * ADDR, tell the owner. */
static void xp_hs_server_ready(na_xp_ep_t *ep)
{
    na_xp_t *xp = ep->xp;
    na_wire_msg_t m;
    na_xp_msg_t *ev;

    ev = calloc(1, sizeof(*ev));
    if (ev == NULL) {
        na_xp_ep_fail(ep, NA_ERR_NOMEM, "out of memory");
        return;
    }
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_HELLO_OK;
    m.u.hello_ok.heartbeat_ms = xp->opts.heartbeat_ms;
    ep->state = NA_XP_EP_READY;      /* before HELLO_OK: the client may send at once */
    ep->hs_status = NA_OK;
    ep->hs_step = XP_HS_DONE;
    ep->rx_open = 1;
    na_xp_ep_setup_over(ep);
    if (xp_hs_send(ep, &m) != NA_OK || na_xp_door_send_addr(ep) != NA_OK) {
        free(ev);
        na_xp_ep_fail(ep, NA_ERR_PEER, na_errmsg());
        return;
    }
    ep->owned = 1;
    ev->kind = NA_XP_EV_ACCEPTED;
    ev->ep = ep;
    ev->ready = 1;
    ep->refs++;
    na_xp_queue_push(xp, ev);
    na_log_info("transport: accepted peer '%s' (%s) from %s", ep->name,
                na_wire_role_name(ep->peer_role), ep->addr);
}

/* An ADDR frame arrived (after the proofs): check that it is bound to this
 * handshake and that UCX can parse the address, then connect UCX to the peer. */
static void xp_hs_on_addr(na_xp_ep_t *ep)
{
    na_xp_t *xp = ep->xp;
    uint8_t *body = ep->rbuf + NA_XP_ADDR_HDR;
    size_t blen = ep->rlen - NA_XP_ADDR_HDR;
    char text[400];
    na_status_t st;

    ep->want_addr = 0;
    st = na_wire_addr_open(xp->secret, xp->secret_len,
                           ep->is_server ? NA_WIRE_AUTH_CLIENT : NA_WIRE_AUTH_SERVER,
                           ep->is_server ? ep->nonce_peer : ep->nonce_local,
                           ep->is_server ? ep->nonce_local : ep->nonce_peer, body, blen,
                           ep->rbuf + 8);
    if (st != NA_OK) {
        snprintf(text, sizeof(text), "peer '%s': %s", ep->name, na_errmsg());
        xp_hs_refuse(ep, NA_WIRE_REFUSE_AUTH, NA_ERR_AUTH, text);
        return;
    }
    memcpy(&ep->tx_id, body, NA_XP_ID_LEN);
    st = na_xp_ucx_addr_check(xp, body + NA_XP_ID_LEN, blen - NA_XP_ID_LEN);
    if (st == NA_OK) {
        /* zeros after the address: UCX reads it without a length */
        memset(ep->rbuf + ep->rlen, 0, NA_XP_ADDR_PAD);
        st = na_xp_ep_ucp_create(ep, body + NA_XP_ID_LEN);
    }
    free(ep->rbuf);                      /* the last frame: the socket only watches now */
    ep->rbuf = NULL;
    ep->rlen = ep->rneed = 0;
    if (st != NA_OK) {
        snprintf(text, sizeof(text), "peer '%s': %s", ep->name, na_errmsg());
        xp_hs_refuse(ep, NA_WIRE_REFUSE_PROTO, NA_ERR_PEER, text);
        return;
    }
    if (ep->is_server) {
        xp_hs_server_ready(ep);
        return;
    }
    ep->state = NA_XP_EP_READY;
    ep->hs_status = NA_OK;
    ep->hs_step = XP_HS_DONE;
}

int na_xp_hs_proven(const na_xp_ep_t *ep)
{
    return !ep->refused && (ep->hs_step == XP_HS_AUTHED || ep->hs_step == XP_HS_DONE);
}

void na_xp_hs_bad_frame(na_xp_ep_t *ep, na_status_t st)
{
    char text[400];

    if (st == NA_ERR_VERSION) {
        snprintf(text, sizeof(text), "%s", na_errmsg());
        xp_hs_refuse(ep, NA_WIRE_REFUSE_VERSION, NA_ERR_VERSION, text);
        return;
    }
    snprintf(text, sizeof(text), "malformed handshake: %s", na_errmsg());
    xp_hs_refuse(ep, NA_WIRE_REFUSE_PROTO, NA_ERR_PROTO, text);
}

void na_xp_hs_frame(na_xp_ep_t *ep)
{
    na_wire_hdr_t h;
    na_wire_msg_t m;
    char text[400];
    na_status_t st;

    if (ep->state != NA_XP_EP_CONNECTING || ep->hs_step == XP_HS_DONE)
        return;                                  /* late or after refusal: ignore */
    if (ep->want_addr) {
        xp_hs_on_addr(ep);
        return;
    }
    st = na_wire_decode_buf(ep->rbuf, ep->rlen, &h, &m);
    if (st != NA_OK) {
        na_xp_hs_bad_frame(ep, st);
        return;
    }
    if (m.type == NA_WIRE_MSG_REFUSE) {
        snprintf(text, sizeof(text), "refused by peer (%s): %.256s",
                 na_wire_refuse_name(m.u.refuse.reason), m.u.refuse.text);
        na_xp_ep_fail(ep, m.u.refuse.reason == NA_WIRE_REFUSE_VERSION ? NA_ERR_VERSION :
                          m.u.refuse.reason == NA_WIRE_REFUSE_AUTH ? NA_ERR_AUTH : NA_ERR_PEER,
                      text);
        return;
    }
    switch (ep->hs_step) {
    case XP_HS_START:
        if (ep->is_server && m.type == NA_WIRE_MSG_HELLO) {
            xp_hs_on_hello(ep, &m.u.hello);
            return;
        }
        break;
    case XP_HS_HELLO_SENT:
        if (m.type == NA_WIRE_MSG_HELLO_CHALLENGE) {
            xp_hs_on_challenge(ep, &m.u.challenge);
            return;
        }
        break;
    case XP_HS_CHALLENGED:
        if (m.type == NA_WIRE_MSG_AUTH) {
            xp_hs_on_auth(ep, &m.u.auth);
            return;
        }
        break;
    case XP_HS_AUTH_SENT:
        if (m.type == NA_WIRE_MSG_HELLO_OK) {
            ep->peer_heartbeat_ms = m.u.hello_ok.heartbeat_ms;
            ep->want_addr = 1;
            ep->hs_step = XP_HS_OK_IN;
            return;
        }
        break;
    }
    snprintf(text, sizeof(text), "unexpected %s during the handshake", na_wire_type_name(m.type));
    xp_hs_refuse(ep, NA_WIRE_REFUSE_PROTO, NA_ERR_PROTO, text);
}

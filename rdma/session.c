/* rdma/session.c — the protocol session layer. See rdma/session.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "rdma/ses_fault.h"
#include "rdma/session.h"

#define SES_REPLY_MS   30000u   /* default bound on an answer */
#define SES_BATCH_MAX  256      /* messages handled per poll before the timers run */
#define SES_CALL_MS    50       /* one wait slice of a blocking call */
#define SES_PEND_KEEP  4096     /* idle request records kept for reuse */
#define SES_PEND_START 64       /* ... made at create (a burst after warm-up) */

/* A request waiting for its answer. */
typedef struct ses_pend {
    uint32_t        seq;                /* our seq of the request */
    na_wire_type_t  about, reply;
    uint64_t        req;                /* header key of the request */
    uint32_t        batch, layer;
    unsigned        flags;
    uint64_t        deadline_ns;
    int             timeout_ms;
    na_ses_reply_fn fn;
    uintptr_t       arg;
    struct ses_call *call;              /* a blocking na_peer_call, or NULL */
    struct ses_pend *next;
} ses_pend_t;

/* What a blocking call learns. */
typedef struct ses_call {
    int         done;
    na_status_t st;
    char        text[448];
} ses_call_t;

struct na_peer {
    na_ses_t   *ses;
    na_xp_ep_t *ep;
    char        name[NA_XP_NAME_MAX];
    void       *user;
    uint32_t    seq;
    uint64_t    since_ns, last_sent_ns, last_recv_ns;
    unsigned    hb_ms;
    int         alive, closed;
    int         broken;                 /* a send failed: ended at the next poll */
    int         bye_reason;             /* the reason of the BYE it sent (0: none) */
    char        why[320];
    ses_pend_t *pend;                   /* oldest first */
    struct na_peer *next;
};

struct na_ses {
    na_xp_t         *xp;
    na_ses_opts_t    o;
    char             who[96];
    void            *ctx;
    na_ses_handler_t on[NA_WIRE_MSG_COUNT];
    na_ses_peer_fn   on_accept, on_end;
    na_ses_tick_fn   on_tick;
    na_peer_t       *peers, *dead;
    int              n_peers;
    ses_pend_t      *pend_free;         /* idle request records (reused, no heap) */
    int              pend_free_n;
    int              depth;             /* nested polls (frees wait for 0) */
    uint64_t         last_tick_ns, stall_end_ns;
};

/* ---- request records ----------------------------------------------------- */

/* A zeroed request record from the session's free list (NULL: out of memory). */
static ses_pend_t *ses_pend_new(na_ses_t *s)
{
    ses_pend_t *q;

    NA_FREELIST_TAKE(s->pend_free, s->pend_free_n, q, next);
    if (q == NULL)
        return calloc(1, sizeof(*q));
    memset(q, 0, sizeof(*q));
    return q;
}

static void ses_pend_put(na_ses_t *s, ses_pend_t *q)
{
    NA_FREELIST_PUT(s->pend_free, s->pend_free_n, SES_PEND_KEEP, q, next);
}

/* ---- session ------------------------------------------------------------- */

na_status_t na_ses_create(na_xp_t *xp, const na_ses_opts_t *opts, void *ctx, na_ses_t **s_p)
{
    na_ses_t *s;

    if (xp == NULL || opts == NULL)
        return na_err(NA_ERR_INVALID, "session: no transport or options");
    if (na_ses_fault_init() != NA_OK)
        return NA_ERR_INVALID;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return na_err(NA_ERR_NOMEM, "session: out of memory");
    s->xp = xp;
    s->o = *opts;
    snprintf(s->who, sizeof(s->who), "%s", opts->who != NULL ? opts->who : "session");
    s->o.who = s->who;
    if (s->o.reply_timeout_ms == 0)
        s->o.reply_timeout_ms = SES_REPLY_MS;
    s->ctx = ctx;
    while (s->pend_free_n < SES_PEND_START) {   /* best effort: grown on demand */
        ses_pend_t *q = calloc(1, sizeof(*q));
        if (q == NULL)
            break;
        ses_pend_put(s, q);
    }
    *s_p = s;
    return NA_OK;
}

static void ses_free_peer(na_peer_t *p)
{
    while (p->pend != NULL) {
        ses_pend_t *q = p->pend;
        p->pend = q->next;
        ses_pend_put(p->ses, q);
    }
    free(p);
}

/* Free the peers of list *head, closing their endpoints (a closed peer's
 * is NULL already). */
static void ses_free_peers(na_peer_t **head)
{
    while (*head != NULL) {
        na_peer_t *p = *head;
        *head = p->next;
        na_xp_ep_close(p->ep);
        ses_free_peer(p);
    }
}

static void ses_reap(na_ses_t *s)
{
    ses_free_peers(&s->dead);
}

void na_ses_destroy(na_ses_t *s)
{
    if (s == NULL)
        return;
    ses_free_peers(&s->peers);
    s->depth = 0;
    ses_reap(s);
    NA_FREELIST_DRAIN(s->pend_free, s->pend_free_n, ses_pend_t, next);
    if (s->o.own_xp)
        na_xp_destroy(s->xp);
    free(s);
}

na_xp_t *na_ses_xp(na_ses_t *s) { return s->xp; }

void na_ses_on(na_ses_t *s, na_wire_type_t type, na_ses_handler_t fn)
{
    if ((unsigned)type < NA_WIRE_MSG_COUNT)
        s->on[type] = fn;
}

void na_ses_on_accept(na_ses_t *s, na_ses_peer_fn fn) { s->on_accept = fn; }
void na_ses_on_end(na_ses_t *s, na_ses_peer_fn fn) { s->on_end = fn; }
void na_ses_on_tick(na_ses_t *s, na_ses_tick_fn fn) { s->on_tick = fn; }

static na_peer_t *ses_add(na_ses_t *s, na_xp_ep_t *ep)
{
    na_peer_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return NULL;
    p->ses = s;
    p->ep = ep;
    snprintf(p->name, sizeof(p->name), "%s", na_xp_ep_name(ep));
    p->since_ns = p->last_sent_ns = p->last_recv_ns = na_xp_now_ns();
    p->hb_ms = na_xp_ep_peer_heartbeat_ms(ep);
    if (p->hb_ms == 0)
        p->hb_ms = s->o.heartbeat_ms;
    p->alive = 1;
    p->next = s->peers;
    s->peers = p;
    s->n_peers++;
    return p;
}

/* The connect bound of s (-1: the transport's). */
static int ses_connect_ms(const na_ses_t *s)
{
    return s->o.connect_timeout_ms > 0 ? (int)s->o.connect_timeout_ms : -1;
}

/* ep connected: make it a peer (*p_p), or close it. */
static na_status_t ses_connect_add(na_ses_t *s, na_xp_ep_t *ep, na_peer_t **p_p)
{
    na_peer_t *p = ses_add(s, ep);

    if (p == NULL) {
        char addr[NA_XP_NAME_MAX];
        snprintf(addr, sizeof(addr), "%s", na_xp_ep_addr(ep));
        na_xp_ep_close(ep);
        return na_err(NA_ERR_NOMEM, "%s: out of memory for peer %s", s->who, addr);
    }
    *p_p = p;
    return NA_OK;
}

na_status_t na_ses_connect(na_ses_t *s, const char *host, int port, na_peer_t **p_p)
{
    na_xp_ep_t *ep;
    na_status_t st = na_xp_connect_ms(s->xp, host, port, ses_connect_ms(s), &ep);

    return st != NA_OK ? st : ses_connect_add(s, ep, p_p);
}

na_status_t na_ses_connect_start(na_ses_t *s, const char *host, int port, na_xp_ep_t **ep_p)
{
    return na_xp_connect_start(s->xp, host, port, ses_connect_ms(s), ep_p);
}

na_status_t na_ses_connect_done(na_ses_t *s, na_xp_ep_t *ep, na_peer_t **p_p)
{
    na_status_t st = na_xp_connect_done(ep);

    return st != NA_OK ? st : ses_connect_add(s, ep, p_p);
}

void na_ses_msg_release(na_ses_t *s, na_xp_msg_t *raw)
{
    na_xp_msg_release(s->xp, raw);
}

/* ---- peers --------------------------------------------------------------- */

const char *na_peer_name(const na_peer_t *p) { return p->name; }
na_xp_ep_t *na_peer_ep(na_peer_t *p) { return p->ep; }
na_ses_t   *na_peer_ses(na_peer_t *p) { return p->ses; }
int         na_peer_alive(const na_peer_t *p) { return p->alive && !p->broken; }
const char *na_peer_why(const na_peer_t *p) { return p->why; }
int         na_peer_bye_reason(const na_peer_t *p) { return p->bye_reason; }
void       *na_peer_user(const na_peer_t *p) { return p->user; }
void        na_peer_set_user(na_peer_t *p, void *user) { p->user = user; }

int na_peer_pending(const na_peer_t *p)
{
    const ses_pend_t *q;
    int n = 0;
    for (q = p->pend; q != NULL; q = q->next)
        n++;
    return n;
}

/* Deliver an answer (or failure) to request q: unlinked already, unless it
 * is an ERROR about a NA_SES_ERR_NOTE request (a note; the request stays). */
static void ses_deliver(na_peer_t *p, ses_pend_t *q, na_status_t st, const char *text,
                        const na_ses_in_t *in)
{
    if (q->call != NULL && (st == NA_OK || !(q->flags & NA_SES_ERR_NOTE) || in == NULL)) {
        q->call->done = 1;
        q->call->st = st;
        snprintf(q->call->text, sizeof(q->call->text), "%s", text != NULL ? text : "");
    }
    if (q->fn != NULL) {
        if (st != NA_OK)
            (void)na_err(st, "%s", text != NULL ? text : na_status_string(st));
        q->fn(p->ses->ctx, p, q->arg, st, in);
    }
}

/* Fail every request of p with NA_ERR_PEER. */
static void ses_fail_pending(na_peer_t *p)
{
    char text[448];

    snprintf(text, sizeof(text), "peer %s lost: %s", p->name, p->why);
    while (p->pend != NULL) {
        ses_pend_t *q = p->pend;
        p->pend = q->next;
        ses_deliver(p, q, NA_ERR_PEER, text, NULL);
        ses_pend_put(p->ses, q);
    }
}

void na_peer_end(na_peer_t *p, na_ses_end_t how, const char *why)
{
    na_ses_t *s = p->ses;
    char text[sizeof(p->why)];

    if (!p->alive)
        return;
    p->alive = 0;
    snprintf(text, sizeof(text), "%s", why != NULL ? why : "");   /* why may be p->why */
    memcpy(p->why, text, sizeof(text));
    if (how == NA_SES_DROPPED)
        na_log_warn("%s: dropping peer %s: %s", s->who, p->name, p->why);
    else if (how == NA_SES_LOST)
        na_log_warn("%s: peer %s lost (%s)", s->who, p->name, p->why);
    else
        na_log_info("%s: peer %s left (%s)", s->who, p->name, p->why);
    s->depth++;                         /* the handler may close p: free it later */
    if (s->on_end != NULL && !p->closed)
        s->on_end(s->ctx, p, how, p->why);
    ses_fail_pending(p);
    if (--s->depth == 0)
        ses_reap(s);
}

/* End p now if a send to it failed (called where p may be freed). */
static void ses_end_broken(na_peer_t *p)
{
    if (p->broken && p->alive)
        na_peer_end(p, NA_SES_LOST, p->why);
}

/* Send an encoded message: hdr_len header bytes, then the payload from
 * NA_WIRE_HDR_SIZE up to len. own: the session's buffer holding it, handed
 * to the transport (back to its pool when the send completes; we do not
 * wait); else the caller's buf (or none), sent and waited for. */
static na_status_t ses_send_wire(na_peer_t *p, uint8_t *data, size_t hdr_len, size_t len,
                                 const na_xp_buf_t *buf, na_xp_buf_t *own)
{
    na_xp_op_t *op;
    na_status_t st;

    if (own != NULL)
        return na_xp_send_owned(p->ep, own, hdr_len, NA_WIRE_HDR_SIZE, len - NA_WIRE_HDR_SIZE,
                                NULL, NULL);
    st = na_xp_send_start(p->ep, data, hdr_len, data + NA_WIRE_HDR_SIZE,
                          len - NA_WIRE_HDR_SIZE, buf, &op);
    if (st == NA_OK)
        st = na_xp_op_wait(p->ses->xp, op, -1);
    return st;
}

/* ses_send_wire through the fault double (rdma/ses_fault.h). Takes own. */
static na_status_t ses_send_faulty(na_peer_t *p, const na_wire_msg_t *m, uint8_t *data,
                                   size_t len, const na_xp_buf_t *buf, na_xp_buf_t *own)
{
    na_xp_t *xp = p->ses->xp;
    na_xp_buf_t *dup;
    na_status_t st;

    switch (na_ses_fault_pick(p->ses->who, na_wire_type_name(m->type), p->name)) {
    case NA_SES_FAULT_DROP:
        na_xp_buf_put(xp, own);
        return NA_OK;
    case NA_SES_FAULT_FAIL:
        na_xp_buf_put(xp, own);
        return na_err(NA_ERR_PEER, "TEST DOUBLE: send to %s failed", p->name);
    case NA_SES_FAULT_CORRUPT:
        data[0] ^= 0x5a;                            /* the magic */
        return ses_send_wire(p, data, NA_WIRE_HDR_SIZE, len, buf, own);
    case NA_SES_FAULT_TRUNCATE:
        if (len > NA_WIRE_HDR_SIZE)
            return ses_send_wire(p, data, NA_WIRE_HDR_SIZE, len - 1, buf, own);
        return ses_send_wire(p, data, NA_WIRE_HDR_SIZE - 1, len, buf, own);
    case NA_SES_FAULT_DUP:
        /* an owned buffer goes with its send: the copy needs its own */
        dup = own != NULL ? na_xp_buf_get(xp, len) : NULL;
        if (own != NULL && dup == NULL) {
            na_xp_buf_put(xp, own);
            return NA_ERR_NOMEM;
        }
        if (dup != NULL)
            memcpy(dup->ptr, data, len);
        st = ses_send_wire(p, data, NA_WIRE_HDR_SIZE, len, buf, own);
        if (st != NA_OK) {
            na_xp_buf_put(xp, dup);
            return st;
        }
        return ses_send_wire(p, dup != NULL ? dup->ptr : data, NA_WIRE_HDR_SIZE, len, buf, dup);
    default:
        return ses_send_wire(p, data, NA_WIRE_HDR_SIZE, len, buf, own);
    }
}

/* Encode m into buf, or into a registered buffer of the transport's pool
 * that the send then owns, and send it. */
static na_status_t ses_send(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf,
                            na_wire_hdr_t *h_p)
{
    na_ses_t *s = p->ses;
    size_t size, len;
    uint8_t *data;
    na_xp_buf_t *own = NULL;
    na_status_t st;

    if (!p->alive || p->closed || p->broken)
        return na_err(NA_ERR_PEER, "peer %s is gone: %s", p->name, p->why);
    m->seq = ++p->seq;
    m->time_ns = na_xp_now_ns();
    st = na_wire_msg_size(m, &size);
    if (st != NA_OK)
        return na_err_prefix(st, "%s: encoding %s: ", s->who, na_wire_type_name(m->type));
    if (buf != NULL && buf->size < size)
        return na_err(NA_ERR_NOSPACE, "%s: %s of %zu bytes does not fit a %zu-byte buffer",
                      s->who, na_wire_type_name(m->type), size, buf->size);
    if (buf == NULL) {
        own = na_xp_buf_get(s->xp, size);
        if (own == NULL)
            return na_err(NA_ERR_NOMEM, "%s: no buffer for a %zu-byte message", s->who, size);
    }
    data = own != NULL ? own->ptr : buf->ptr;
    st = na_wire_encode(m, data, size, &len);
    if (st == NA_OK && h_p != NULL)
        st = na_wire_hdr_decode(data, NA_WIRE_HDR_SIZE, h_p);
    if (st != NA_OK) {
        na_xp_buf_put(s->xp, own);
        return na_err_prefix(st, "%s: encoding %s: ", s->who, na_wire_type_name(m->type));
    }
    /* own goes to the transport with the send, whatever happens */
    if (na_ses_faults_on)
        st = ses_send_faulty(p, m, data, len, buf, own);
    else
        st = ses_send_wire(p, data, NA_WIRE_HDR_SIZE, len, buf, own);
    p->last_sent_ns = na_xp_now_ns();
    if (st != NA_OK) {
        /* the peer ends at the next poll (or end of this one), never under
         * the caller's feet: a handler may still use what it owns */
        p->broken = 1;
        snprintf(p->why, sizeof(p->why), "send of %s failed: %.250s",
                 na_wire_type_name(m->type), na_errmsg());
        return na_err(NA_ERR_PEER, "peer %s: %s", p->name, p->why);
    }
    return NA_OK;
}

na_status_t na_peer_send(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf)
{
    return ses_send(p, m, buf, NULL);
}

/* Register request q (sent already) at the end of p's list. */
static void ses_pend_add(na_peer_t *p, ses_pend_t *q)
{
    ses_pend_t **pp = &p->pend;
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = q;
}

static na_status_t ses_request(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf,
                               na_wire_type_t reply, unsigned flags, int timeout_ms,
                               na_ses_reply_fn fn, uintptr_t arg, ses_call_t *call)
{
    ses_pend_t *q = ses_pend_new(p->ses);
    na_wire_hdr_t h;
    na_status_t st;

    if (q == NULL)
        return na_err(NA_ERR_NOMEM, "%s: out of memory", p->ses->who);
    st = ses_send(p, m, buf, &h);
    if (st != NA_OK) {
        ses_pend_put(p->ses, q);
        return st;
    }
    q->seq = h.seq;
    q->about = m->type;
    q->reply = reply;
    q->req = h.request_id;
    q->batch = h.batch_id;
    q->layer = h.layer;
    q->flags = flags;
    q->timeout_ms = timeout_ms > 0 ? timeout_ms : (int)p->ses->o.reply_timeout_ms;
    q->deadline_ns = na_xp_now_ns() + (uint64_t)q->timeout_ms * 1000000ull;
    q->fn = fn;
    q->arg = arg;
    q->call = call;
    ses_pend_add(p, q);
    return NA_OK;
}

na_status_t na_peer_request(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf,
                            na_wire_type_t reply, unsigned flags, int timeout_ms,
                            na_ses_reply_fn fn, uintptr_t arg)
{
    return ses_request(p, m, buf, reply, flags, timeout_ms, fn, arg, NULL);
}

na_status_t na_peer_call(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf,
                         na_wire_type_t reply, unsigned flags, int timeout_ms,
                         na_ses_reply_fn fn, uintptr_t arg)
{
    ses_call_t call;
    na_status_t st;

    memset(&call, 0, sizeof(call));
    st = ses_request(p, m, buf, reply, flags, timeout_ms, fn, arg, &call);
    if (st != NA_OK)
        return st;           /* a broken peer ends at the next poll */
    while (!call.done) {
        st = na_ses_poll(p->ses, SES_CALL_MS);
        if (st != NA_OK && st != NA_ERR_TIMEOUT)
            return st;
    }
    return call.st != NA_OK ? na_err(call.st, "%s", call.text) : NA_OK;
}

/* Copy text as printable ASCII (the wire's rule), truncated. */
static void ses_text(char *dst, size_t cap, const char *src)
{
    size_t i;
    for (i = 0; src != NULL && src[i] != '\0' && i + 1 < cap && i < NA_WIRE_TEXT_MAX; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
    dst[i] = '\0';
}

na_status_t na_peer_answer(na_peer_t *p, const na_wire_hdr_t *h, uint64_t req, na_status_t st,
                           const char *text)
{
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    if (st == NA_OK) {
        m.type = NA_WIRE_MSG_ACK;
        m.u.ack.request_id = req;
        m.u.ack.about_type = h->type;
        m.u.ack.about_seq = h->seq;
    } else {
        m.type = NA_WIRE_MSG_ERROR;
        m.u.error.request_id = req;
        m.u.error.batch_id = h != NULL ? h->batch_id : 0;
        m.u.error.layer = h != NULL ? h->layer : 0;
        m.u.error.status = st < 0 ? (int32_t)st : (int32_t)NA_ERR_INTERNAL;
        m.u.error.about_type = h != NULL ? h->type : 0;
        m.u.error.about_seq = h != NULL ? h->seq : 0;
        ses_text(m.u.error.text, sizeof(m.u.error.text), text != NULL ? text : na_errmsg());
    }
    return na_peer_send(p, &m, NULL);
}

void na_peer_close(na_peer_t *p, int reason, const char *bye_text)
{
    na_ses_t *s;
    na_peer_t **pp;

    if (p == NULL || p->closed)
        return;
    s = p->ses;
    if (bye_text != NULL && p->alive && na_xp_ep_alive(p->ep)) {
        na_wire_msg_t m;
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_BYE;
        m.u.bye.reason = (uint16_t)reason;
        ses_text(m.u.bye.text, sizeof(m.u.bye.text), bye_text);
        (void)ses_send(p, &m, NULL, NULL);
    }
    p->closed = 1;
    if (p->alive) {
        p->alive = 0;
        snprintf(p->why, sizeof(p->why), "closed");
    }
    ses_fail_pending(p);
    for (pp = &s->peers; *pp != NULL && *pp != p; pp = &(*pp)->next)
        ;
    if (*pp == p) {
        *pp = p->next;
        s->n_peers--;
    }
    na_xp_ep_close(p->ep);
    p->ep = NULL;
    if (s->depth > 0) {
        p->next = s->dead;
        s->dead = p;
    } else {
        ses_free_peer(p);
    }
}

/* ---- receiving ----------------------------------------------------------- */

static na_peer_t *ses_peer_of(na_ses_t *s, const na_xp_ep_t *ep)
{
    na_peer_t *p;
    for (p = s->peers; p != NULL; p = p->next)
        if (p->ep == ep)
            return p;
    return NULL;
}

static void ses_accept(na_ses_t *s, na_xp_ep_t *ep)
{
    na_peer_t *p;

    if (s->o.max_peers > 0 && s->n_peers >= s->o.max_peers) {
        na_log_warn("%s: refusing %s: %d peers already", s->who, na_xp_ep_name(ep), s->n_peers);
        na_xp_ep_close(ep);
        return;
    }
    p = ses_add(s, ep);
    if (p == NULL) {
        na_log_error("%s: out of memory for peer %s", s->who, na_xp_ep_name(ep));
        na_xp_ep_close(ep);
        return;
    }
    if (s->on_accept != NULL)
        s->on_accept(s->ctx, p, (na_ses_end_t)0, NULL);
}

/* The request of p that message in answers, unlinked; NULL if none. */
static ses_pend_t *ses_match(na_peer_t *p, const na_ses_in_t *in, int unlink)
{
    const na_wire_hdr_t *h = in->h;
    const na_wire_msg_t *m = in->m;
    ses_pend_t **pp;

    for (pp = &p->pend; *pp != NULL; pp = &(*pp)->next) {
        ses_pend_t *q = *pp;
        int hit;
        if (m->type == NA_WIRE_MSG_ACK)
            hit = q->seq == m->u.ack.about_seq && q->about == m->u.ack.about_type;
        else if (m->type == NA_WIRE_MSG_ERROR)
            hit = q->seq == m->u.error.about_seq && q->about == m->u.error.about_type;
        else
            hit = q->reply == m->type && q->req == h->request_id && q->batch == h->batch_id &&
                  q->layer == h->layer;
        if (!hit)
            continue;
        if (unlink)
            *pp = q->next;
        return q;
    }
    return NULL;
}

/* Answer a HEARTBEAT. */
static na_status_t ses_heartbeat_reply(na_peer_t *p, const na_wire_heartbeat_t *hb)
{
    na_wire_msg_t r;
    memset(&r, 0, sizeof(r));
    r.type = NA_WIRE_MSG_HEARTBEAT;
    r.flags = NA_WIRE_F_REPLY;
    r.u.heartbeat.send_ns = na_xp_now_ns();
    r.u.heartbeat.echo_ns = hb->send_ns;
    return na_peer_send(p, &r, NULL);
}

/* Dispatch one decoded message of p. */
static na_status_t ses_dispatch(na_ses_t *s, na_peer_t *p, na_ses_in_t *in)
{
    const na_wire_msg_t *m = in->m;
    int is_answer = m->type == NA_WIRE_MSG_ACK || m->type == NA_WIRE_MSG_ERROR ||
                    ((m->type == NA_WIRE_MSG_HEARTBEAT || m->type == NA_WIRE_MSG_ECHO) ?
                     (m->flags & NA_WIRE_F_REPLY) != 0 : 1);
    ses_pend_t *q = is_answer ? ses_match(p, in, 0) : NULL;

    if (q != NULL) {
        if (m->type == NA_WIRE_MSG_ERROR) {
            na_status_t es = m->u.error.status < 0 ? (na_status_t)m->u.error.status
                                                    : NA_ERR_INTERNAL;
            if (!(q->flags & NA_SES_ERR_NOTE))
                (void)ses_match(p, in, 1);
            ses_deliver(p, q, es, m->u.error.text, in);
            if (!(q->flags & NA_SES_ERR_NOTE))
                ses_pend_put(s, q);
            return NA_OK;
        }
        (void)ses_match(p, in, 1);
        ses_deliver(p, q, NA_OK, NULL, in);
        ses_pend_put(s, q);
        return NA_OK;
    }
    switch (m->type) {
    case NA_WIRE_MSG_HEARTBEAT:
        if (m->flags & NA_WIRE_F_REPLY)
            return NA_OK;               /* our heartbeat came back: arrival counted */
        return ses_heartbeat_reply(p, &m->u.heartbeat);
    case NA_WIRE_MSG_BYE:
        p->bye_reason = m->u.bye.reason;
        na_peer_end(p, NA_SES_LEFT, m->u.bye.text[0] ? m->u.bye.text : "said BYE");
        return NA_OK;
    case NA_WIRE_MSG_ACK:
        if (s->on[m->type] == NULL) {
            na_log_debug("%s: ACK from %s answers nothing open", s->who, p->name);
            return NA_OK;
        }
        break;
    case NA_WIRE_MSG_ERROR:
        if (s->on[m->type] == NULL) {
            na_log_warn("%s: %s reports: %s", s->who, p->name, m->u.error.text);
            return NA_OK;
        }
        break;
    default:
        break;
    }
    if (s->on[m->type] == NULL)
        return na_err(NA_ERR_PROTO, "%s sent %s, which %s does not serve", p->name,
                      na_wire_type_name(m->type), s->who);
    return s->on[m->type](s->ctx, in);
}

/* One transport message; returns 1 when a handler kept it. */
static int ses_handle(na_ses_t *s, na_xp_msg_t *msg)
{
    na_peer_t *p;
    na_wire_hdr_t h;
    na_wire_msg_t m;
    na_ses_in_t in;
    na_status_t st;

    if (msg->kind == NA_XP_EV_ACCEPTED) {
        ses_accept(s, msg->ep);
        return 0;
    }
    p = ses_peer_of(s, msg->ep);
    if (p == NULL || !p->alive)
        return 0;                       /* a peer that ended: late message */
    if (msg->kind == NA_XP_EV_LOST) {
        na_peer_end(p, NA_SES_LOST, msg->status != NA_OK ? na_status_string(msg->status)
                                                           : "connection closed");
        return 0;
    }
    p->last_recv_ns = na_xp_now_ns();
    st = na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h);
    if (st == NA_OK && h.hdr_len != msg->hdr_len)
        st = na_err(NA_ERR_PROTO, "wire: header says %u header bytes, %zu arrived",
                    (unsigned)h.hdr_len, msg->hdr_len);
    if (st == NA_OK && h.payload_len != msg->len)
        st = na_err(NA_ERR_PROTO, "wire %s: header says %llu payload bytes, %zu arrived",
                    na_wire_type_name(h.type), (unsigned long long)h.payload_len, msg->len);
    if (st == NA_OK)
        st = na_wire_decode(&h, msg->data, msg->len, &m);
    if (st == NA_OK) {
        in = (na_ses_in_t){ p, &h, &m, msg, 0 };
        st = ses_dispatch(s, p, &in);
        if (in.keep)
            return 1;
    }
    if (p->closed)
        return 0;
    if (st == NA_OK || !p->alive || p->broken) {
        ses_end_broken(p);
        return 0;
    }
    if (st == NA_ERR_CANCELED) {
        na_peer_end(p, NA_SES_LEFT, "ended by its handler");
    } else if (st == NA_ERR_PROTO || st == NA_ERR_VERSION) {
        char why[300];
        na_wire_msg_t bye;
        snprintf(why, sizeof(why), "%s", na_errmsg());
        memset(&bye, 0, sizeof(bye));
        bye.type = NA_WIRE_MSG_BYE;
        bye.u.bye.reason = NA_WIRE_REFUSE_PROTO;
        ses_text(bye.u.bye.text, sizeof(bye.u.bye.text), why);
        (void)na_peer_send(p, &bye, NULL);
        na_peer_end(p, NA_SES_DROPPED, why);
    } else if (st == NA_ERR_PEER || st == NA_ERR_TIMEOUT || st == NA_ERR_TRANSPORT) {
        char why[300];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        na_peer_end(p, NA_SES_LOST, why);
    } else {
        /* a failure the handler did not answer itself: tell the peer */
        char why[NA_WIRE_TEXT_MAX + 1];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        (void)na_peer_answer(p, &h, h.request_id, st, why);
    }
    return 0;
}

/* Requests of p past their deadline: an optional one fails alone, any other
 * loses the peer (returns 1 then). */
static int ses_expire(na_peer_t *p, uint64_t now)
{
    ses_pend_t **pp = &p->pend;

    while (*pp != NULL) {
        ses_pend_t *q = *pp;
        uint64_t t = (uint64_t)q->timeout_ms * 1000000ull, st = p->ses->stall_end_ns;
        uint64_t dl = st > q->deadline_ns - t ? st + t : q->deadline_ns;  /* we stalled */
        char why[128];
        if (now <= dl) {
            pp = &q->next;
            continue;
        }
        snprintf(why, sizeof(why), "no answer to %s within %d ms",
                 na_wire_type_name(q->about), q->timeout_ms);
        if (!(q->flags & NA_SES_NO_LOSS)) {
            na_peer_end(p, NA_SES_LOST, why);
            return 1;
        }
        *pp = q->next;
        ses_deliver(p, q, NA_ERR_TIMEOUT, why, NULL);
        ses_pend_put(p->ses, q);
    }
    return 0;
}

/* Heartbeats out, silent peers and unanswered requests lost. */
static void ses_timers(na_ses_t *s)
{
    uint64_t now = na_xp_now_ns();
    uint64_t stall = (uint64_t)(s->o.heartbeat_ms ? s->o.heartbeat_ms
                                                  : s->o.peer_timeout_ms / 4 + 1) * 1000000ull;
    na_peer_t *p, *next;

    /* If this loop itself was stalled (a long batch, a forward pass), peers
     * could not answer heartbeats we did not send: restart their clocks. */
    if (s->last_tick_ns != 0 && now - s->last_tick_ns > stall)
        s->stall_end_ns = now;
    s->last_tick_ns = now;
    for (p = s->peers; p != NULL; p = next) {
        next = p->next;
        ses_end_broken(p);
        if (!p->alive)
            continue;
        if (s->o.peer_timeout_ms > 0) {
            na_xp_stats_t xs;
            uint64_t last = p->last_recv_ns;
            na_xp_ep_stats(p->ep, &xs);
            if (xs.last_recv_ns > last)
                last = xs.last_recv_ns;
            if (s->stall_end_ns > last)
                last = s->stall_end_ns;
            if (now > last && now - last > (uint64_t)s->o.peer_timeout_ms * 1000000ull) {
                char why[96];
                snprintf(why, sizeof(why), "silent for %llu ms > peer_timeout_ms %u",
                         (unsigned long long)((now - last) / 1000000ull), s->o.peer_timeout_ms);
                na_peer_end(p, NA_SES_LOST, why);
                continue;
            }
        }
        if (ses_expire(p, now))
            continue;
        if (p->alive && p->hb_ms > 0 &&
            now - p->last_sent_ns >= (uint64_t)p->hb_ms * 1000000ull) {
            na_wire_msg_t m;
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_HEARTBEAT;
            m.u.heartbeat.send_ns = now;
            (void)na_peer_send(p, &m, NULL);
        }
    }
}

na_status_t na_ses_poll(na_ses_t *s, int timeout_ms)
{
    na_status_t ret = NA_ERR_TIMEOUT;
    int n;

    s->depth++;
    for (n = 0; n < SES_BATCH_MAX; n++) {
        na_xp_msg_t *msg;
        na_status_t st = na_xp_recv(s->xp, n == 0 ? timeout_ms : 0, &msg);
        if (st == NA_ERR_TIMEOUT)
            break;
        if (st != NA_OK) {
            ret = st;
            break;
        }
        ret = NA_OK;
        if (!ses_handle(s, msg))
            na_xp_msg_release(s->xp, msg);
    }
    ses_timers(s);
    if (s->on_tick != NULL)
        s->on_tick(s->ctx);
    if (--s->depth == 0)
        ses_reap(s);
    return ret;
}

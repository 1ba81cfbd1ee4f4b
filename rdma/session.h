/* rdma/session.h — the protocol session layer: wire messages (common/wire.h)
 * between peers over one transport (rdma/transport.h).
 *
 * A session owns the protocol plumbing every node role shares, once:
 *   - encode -> send: na_peer_send() encodes any na_wire_msg_t into a
 *     registered buffer (na_xp_buf_t, from the transport's pool, or the
 *     caller's) and sends header + payload without waiting: the send owns
 *     the pooled buffer until it completes (rdma/transport.h,
 *     na_xp_send_owned);
 *   - receive -> decode -> dispatch: na_ses_poll() takes what the transport
 *     delivers, validates and decodes the header and payload once and calls
 *     the handler registered for that message type. A message of a type with
 *     no handler, or one that fails validation, is a protocol error: the peer
 *     is told BYE and dropped (log line naming it), never a crash;
 *   - heartbeats: HEARTBEAT is sent to a peer nothing was sent to for its
 *     interval (the one it announced in HELLO_OK, else opts.heartbeat_ms) and
 *     every HEARTBEAT is answered here;
 *   - request/answer matching: na_peer_request() stamps the message's seq and
 *     remembers the waiter (records reused from a free list); an ACK or
 *     ERROR finds it by about_seq, any other answer (STATS, KV_DATA,
 *     ATTN_OUT, HEARTBEAT/ECHO replies) by type and the header's
 *     (request_id, batch_id, layer), oldest first. An answer that does not
 *     come within the request's timeout loses the peer;
 *   - the silence timer: a peer from which nothing arrived for
 *     opts.peer_timeout_ms is declared lost, exactly like a transport
 *     NA_XP_EV_LOST (a stall of the owner's own loop restarts the clocks).
 * A lost, dropped or departed peer fails its open requests (NA_ERR_PEER) and
 * is reported to the lost handler once; the owner then na_peer_close()s it.
 *
 * One thread owns a session, its transport and its peers (as the transport). */
#ifndef NA_RDMA_SESSION_H
#define NA_RDMA_SESSION_H

#include <stdint.h>

#include "common/wire.h"
#include "rdma/transport.h"

typedef struct na_ses  na_ses_t;
typedef struct na_peer na_peer_t;
struct na_cfg;

/* How a peer ended (the lost handler's `how`). */
typedef enum {
    NA_SES_LOST    = 1,   /* transport failure, silence, unanswered request */
    NA_SES_DROPPED = 2,   /* protocol error: we said BYE and dropped it */
    NA_SES_LEFT    = 3,   /* it said BYE */
} na_ses_end_t;

/* One decoded message, as a handler sees it (views of m point into raw). */
typedef struct {
    na_peer_t           *peer;
    const na_wire_hdr_t *h;
    const na_wire_msg_t *m;
    na_xp_msg_t         *raw;
    int                  keep;   /* set to 1: the handler keeps raw (na_ses_msg_release) */
} na_ses_in_t;

/* A message handler. NA_OK; NA_ERR_PROTO / NA_ERR_VERSION drop the peer;
 * NA_ERR_PEER / NA_ERR_TIMEOUT / NA_ERR_TRANSPORT lose it; NA_ERR_CANCELED
 * ends it as if it had said BYE; any other error is answered to the peer with
 * an ERROR about that message (na_errmsg() as text). */
typedef na_status_t (*na_ses_handler_t)(void *ctx, na_ses_in_t *in);
/* A peer accepted on our listener (how = 0, why NULL), or ended (how, why). */
typedef void (*na_ses_peer_fn)(void *ctx, na_peer_t *p, na_ses_end_t how, const char *why);
/* Called once per na_ses_poll() round, after the messages (a hook for work
 * the owner polls: slot reaping, completed batches ...). */
typedef void (*na_ses_tick_fn)(void *ctx);
/* The answer to a request: st NA_OK with the answer in `in`; an ERROR about
 * it (st = its status, na_errmsg() its text, `in` the ERROR); or the peer
 * ended / did not answer in time (st NA_ERR_PEER, in NULL). */
typedef void (*na_ses_reply_fn)(void *ctx, na_peer_t *p, uintptr_t arg, na_status_t st,
                                const na_ses_in_t *in);

typedef struct {
    const char *who;              /* log prefix ("node s0", "remote c0") */
    unsigned    heartbeat_ms;     /* interval towards peers that announced none; 0 = none */
    unsigned    peer_timeout_ms;  /* silence that loses a peer; 0 = never */
    unsigned    reply_timeout_ms; /* default bound on an answer; 0 = 30000 */
    unsigned    connect_timeout_ms; /* bound on na_ses_connect(); 0 = the transport's */
    int         max_peers;        /* accepted peers at once; 0 = no limit */
    int         own_xp;           /* 1: na_ses_destroy() destroys the transport too */
} na_ses_opts_t;

/* Request flags. */
#define NA_SES_ERR_NOTE 0x1u      /* an ERROR about the request is passed to the reply
                                     function but does not end it (its real answer
                                     follows: DECODE_ATTN, whose entries fail alone) */
#define NA_SES_NO_LOSS  0x2u      /* no answer in time fails the request alone
                                     (NA_ERR_TIMEOUT), the peer stays (counters, pings) */

/* ---- session ------------------------------------------------------------- */

/* Create a session over xp (borrowed: it must outlive the session). ctx is
 * passed to every handler. */
na_status_t na_ses_create(na_xp_t *xp, const na_ses_opts_t *opts, void *ctx, na_ses_t **s_p);
/* A compute-side session of node `name` from the layout: its own transport
 * (role, secret, tls, timeouts of cfg; destroyed with the session), heartbeat
 * and peer_timeout_ms of cfg's transport section, log prefix who. */
na_status_t na_ses_create_cfg(const struct na_cfg *cfg, const char *name, int role,
                              const char *who, void *ctx, na_ses_t **s_p);
/* Close every peer (no BYE, no lost handler) and free. NULL is a no-op. */
void        na_ses_destroy(na_ses_t *s);
na_xp_t    *na_ses_xp(na_ses_t *s);

/* Register the handler of one message type (NULL removes it). HEARTBEAT and
 * BYE are the session's own; handshake types are never delivered. */
void        na_ses_on(na_ses_t *s, na_wire_type_t type, na_ses_handler_t fn);
void        na_ses_on_accept(na_ses_t *s, na_ses_peer_fn fn);
void        na_ses_on_end(na_ses_t *s, na_ses_peer_fn fn);
void        na_ses_on_tick(na_ses_t *s, na_ses_tick_fn fn);

/* Connect to host:port (transport handshake included) and add the peer. */
na_status_t na_ses_connect(na_ses_t *s, const char *host, int port, na_peer_t **p_p);
/* The same in halves, for an owner that keeps serving its peers (polling)
 * while a host answers, or not: _start returns at once; _done is
 * NA_INPROGRESS while the handshake runs (it goes on in na_ses_poll), NA_OK
 * with the peer added (*p_p), or the connect's error (ep closed then). What
 * the host sends before that is dropped (a HEARTBEAT at most). A connect
 * still running is given up with na_xp_connect_cancel(ep), before
 * na_ses_destroy(). Both connects wait at most opts.connect_timeout_ms. */
na_status_t na_ses_connect_start(na_ses_t *s, const char *host, int port, na_xp_ep_t **ep_p);
na_status_t na_ses_connect_done(na_ses_t *s, na_xp_ep_t *ep, na_peer_t **p_p);

/* Receive and dispatch: wait up to timeout_ms (0 = poll) for the first
 * message, handle everything queued, then run the timers and the tick hook.
 * NA_OK when something was handled, NA_ERR_TIMEOUT when nothing came; any
 * other status is a transport failure. */
na_status_t na_ses_poll(na_ses_t *s, int timeout_ms);
/* Give back a message a handler kept (in->keep). */
void        na_ses_msg_release(na_ses_t *s, na_xp_msg_t *raw);

/* ---- peers --------------------------------------------------------------- */

/* Encode m (seq and time stamped here) and send it. With buf NULL (every
 * production call) the message is encoded into a registered buffer of the
 * transport's pool that the send owns (na_xp_send_owned): the call returns
 * once the send is started, the buffer goes back to the pool when it
 * completes, so sends to several peers overlap and a steady stream
 * allocates nothing. buf, if non-NULL, is the caller's registered buffer
 * the message is encoded into (it must hold na_wire_msg_size() bytes); the
 * call then waits for local completion, so buf can be reused at once.
 * NA_ERR_PEER on a peer that ended; a failed send loses the peer (at once,
 * or through the transport when it fails after the call returned). */
na_status_t na_peer_send(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf);
/* Send m as a request whose answer is of type `reply` (ACK, STATS, ...) and
 * return at once; fn (may be NULL) gets the answer from a later poll.
 * timeout_ms 0 = opts.reply_timeout_ms; flags NA_SES_*. */
na_status_t na_peer_request(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf,
                            na_wire_type_t reply, unsigned flags, int timeout_ms,
                            na_ses_reply_fn fn, uintptr_t arg);
/* na_peer_request and poll the session until it is answered: returns NA_OK,
 * the ERROR's status (text in na_errmsg()) or NA_ERR_PEER. */
na_status_t na_peer_call(na_peer_t *p, na_wire_msg_t *m, const na_xp_buf_t *buf,
                         na_wire_type_t reply, unsigned flags, int timeout_ms,
                         na_ses_reply_fn fn, uintptr_t arg);
/* Answer the message with header h: ACK (st == NA_OK) or ERROR with st and
 * text (NULL = na_errmsg()), for request req. */
na_status_t na_peer_answer(na_peer_t *p, const na_wire_hdr_t *h, uint64_t req, na_status_t st,
                           const char *text);
/* Declare the peer lost (or dropped) now: fails its requests, calls the end
 * handler. No-op on a peer that ended already. */
void        na_peer_end(na_peer_t *p, na_ses_end_t how, const char *why);
/* Say BYE (when bye_text is non-NULL and the peer is up; reason 0 or a
 * na_wire_refuse_t), close the connection and free the peer (at the end of
 * the current poll). Its requests fail without calling the end handler. */
void        na_peer_close(na_peer_t *p, int reason, const char *bye_text);

const char *na_peer_name(const na_peer_t *p);
na_ses_t   *na_peer_ses(na_peer_t *p);
na_xp_ep_t *na_peer_ep(na_peer_t *p);
int         na_peer_alive(const na_peer_t *p);
/* Why the peer ended ("" while alive). */
const char *na_peer_why(const na_peer_t *p);
/* The reason (na_wire_refuse_t) of the BYE the peer sent; 0 if it sent none. */
int         na_peer_bye_reason(const na_peer_t *p);
void       *na_peer_user(const na_peer_t *p);
void        na_peer_set_user(na_peer_t *p, void *user);
/* Requests still waiting for an answer. */
int         na_peer_pending(const na_peer_t *p);

#endif /* NA_RDMA_SESSION_H */

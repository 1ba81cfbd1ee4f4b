/* rdma/xp_internal.h — private structures of the transport (rdma/xp_*.c).
 * Nothing outside rdma/ includes this file. */
#ifndef NA_RDMA_XP_INTERNAL_H
#define NA_RDMA_XP_INTERNAL_H

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include "common/clock.h"
#include "rdma/transport.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#define NA_XP_AM_MSG    1   /* active-message id of owner messages */
#define NA_XP_ID_LEN    8   /* connection id appended to every message's header */
#define NA_XP_NONCE_LEN 32
#define NA_XP_MAC_LEN   32
#define NA_XP_POOL_MIN_SHIFT 12   /* smallest pooled landing buffer: 4 KiB */
#define NA_XP_POOL_CLASSES   20   /* 4 KiB .. 2 GiB, one free list per power of two */
#define NA_XP_POOL_KEEP      16   /* free buffers kept per class ... */
#define NA_XP_CM_GRACE_MS    50   /* errmode cm: delivery grace after a disconnect */
#define NA_XP_POOL_MAX_BYTES ((size_t)512 << 20) /* ... and at most this much idle memory */
/* The front door (rdma/xp_door.c): the node's own TCP listener. */
#define NA_XP_PREAUTH_MAX    64    /* accepted connections in set-up at once */
#define NA_XP_PREAUTH_PER_ADDR 8   /* ... of them from one peer address */
#define NA_XP_PREAUTH_MS     3000  /* an accepted connection has this long for the handshake */
#define NA_XP_PREAUTH_BUSY_MS 1000 /* ... when half the set-up table is taken */
#define NA_XP_FRAME_MAX      1024  /* largest handshake frame (wire header + payload) */
#define NA_XP_ADDR_HDR       40    /* ADDR frame header: "NAXA", u32 body length, mac[32] */
#define NA_XP_ADDR_MAX       16384 /* largest UCX worker address accepted */
#define NA_XP_ADDR_PAD       256   /* zeros kept after a received address (UCX reads it
                                      without a length) */
#define NA_XP_ACCEPT_BURST   64    /* accept() calls per service turn */
#define NA_XP_ACCEPT_PAUSE_MS 100  /* listener left alone this long after EMFILE & co */

/* Log limiter: a burst of lines, then at most one per second with a count
 * of what was left out. */
typedef struct {
    unsigned burst;             /* lines allowed at once (>= 1) */
    uint64_t last_ns;
    unsigned tokens;
    unsigned suppressed;
} na_xp_rl_t;

typedef enum {
    NA_XP_EP_CONNECTING = 0,  /* handshake on the TCP socket not finished */
    NA_XP_EP_READY      = 1,  /* handshake done: messages flow */
    NA_XP_EP_FAILED     = 2,  /* error seen; ucp ep still to be force-closed */
    NA_XP_EP_CLOSED     = 3,  /* ucp ep closed (or being closed) */
} na_xp_ep_state_t;

struct na_xp_ep {
    na_xp_t          *xp;
    ucp_ep_h          uep;
    na_xp_ep_state_t  state;
    int               is_server;     /* accepted from our listener */
    int               owned;         /* the owner holds it (connect / ACCEPTED) */
    int               lost_reported; /* NA_XP_EV_LOST queued */
    int               refused;       /* we sent REFUSE: keep errmsg, drop at hs_deadline */
    int               preauth;       /* counted in xp->n_preauth (accepted, not yet READY) */
    int               closing;       /* inside na_xp_ep_close: sweep must not free it */
    int               zombie;        /* owner let go: free once refs == 0 */
    int               refs;          /* queued messages + pending ops using it */
    void             *close_req;     /* pending ucp_ep_close_nbx request */
    uint64_t          fail_due_ns;   /* errmode cm: UCX reported the peer gone; fail
                                        at this time (messages still in flight on
                                        shared memory are delivered first) */
    na_status_t       err;           /* why it failed */
    char              errmsg[160];
    uint64_t          hs_deadline_ns;/* handshake must finish by then */
    int               hs_step;       /* handshake progress (xp_handshake.c) */
    /* the TCP socket: handshake, then liveness (EOF = peer gone) */
    int               fd;            /* -1 once closed */
    int               tcp_connecting;/* client: non-blocking connect() in progress */
    int               want_addr;     /* the next frame is an ADDR frame, not a wire one */
    int               frame_sized;   /* rneed holds the whole frame's size */
    uint8_t          *rbuf;          /* frame being read (set-up only) */
    size_t            rlen, rneed;
    uint8_t          *obuf;          /* bytes not yet written (set-up only) */
    size_t            olen, ooff, ocap;
    uint64_t          rx_id;         /* ours: messages to us carry it (random) */
    uint64_t          tx_id;         /* the peer's: our messages carry it */
    int               rx_open;       /* messages with rx_id are taken (peer proven) */
    int               discard;       /* its queued messages are dropped (failed connect) */
    na_status_t       hs_status;     /* NA_INPROGRESS, NA_OK or the failure */
    uint8_t           nonce_local[NA_XP_NONCE_LEN];
    uint8_t           nonce_peer[NA_XP_NONCE_LEN];
    char              name[NA_XP_NAME_MAX];
    char              addr[64];
    char              host[48];      /* server: the peer's address without the port */
    uint64_t          accepted_ns;   /* server: when it was accepted */
    int               peer_role;
    unsigned          peer_heartbeat_ms;
    na_xp_stats_t     stats;
    na_xp_ep_t       *next;          /* xp->eps list */
};

#define NA_XP_OPS_KEEP      256   /* idle send operations kept for reuse */
#define NA_XP_MSGS_KEEP     1024  /* idle message records kept for reuse */
#define NA_XP_INFLIGHT_MAX  4096  /* owned sends in flight before a send waits */
#define NA_XP_INFLIGHT_BYTES ((size_t)256 << 20) /* ... or this many bytes */

struct na_xp_op {
    void        *req;                /* UCX request */
    na_xp_ep_t  *ep;
    size_t       bytes;
    /* owned sends (na_xp_send_owned): on the node's in-flight list */
    na_xp_buf_t *buf;                /* back to the pool at completion */
    na_xp_sent_fn fn;                /* told the status at completion (may be NULL) */
    void        *arg;
    uint64_t     deadline_ns;        /* completion due by then, or the ep fails */
    int          done;               /* UCX called back (status in status) */
    ucs_status_t status;
    struct na_xp_op *next, *prev;    /* in-flight list; next: free list */
    /* last: xp_op_new clears every field before it */
    uint8_t      hdr[NA_XP_HDR_MAX + NA_XP_ID_LEN]; /* header + peer's id, alive in flight */
};

struct na_xp {
    ucp_context_h    ctx;
    ucp_worker_h     worker;
    int              efd;            /* worker event fd for blocking waits */
    ucp_address_t   *waddr;          /* our worker address (sent after the proofs) */
    size_t           waddr_len;
    int              lfd;            /* our TCP listener, -1 if none */
    char             laddr[80];      /* "host:port" it listens on */
    int              n_preauth;      /* accepted connections still in set-up */
    uint64_t         accept_pause_ns;/* listener not polled before this (EMFILE) */
    unsigned         n_refused_full; /* closed at once: pre-auth table full */
    unsigned         n_evicted;      /* unproven set-ups dropped for newer ones */
    na_xp_rl_t       rl_accept, rl_drop;
    struct pollfd   *pfd;            /* poll set: efd, listener, sockets */
    na_xp_ep_t     **pfd_ep;         /* [i] endpoint of pfd[i] (NULL: efd / listener) */
    int              pfd_cap, pfd_n;
    na_xp_ep_t      *rx_last;        /* last endpoint a message was matched to */    char             name[NA_XP_NAME_MAX];
    char             cluster[NA_XP_NAME_MAX];
    char             host[256];      /* opts.host ("" if none) */
    na_xp_opts_t     opts;           /* name/secret/tls_raw point into this struct */
    uint8_t         *secret;
    size_t           secret_len;
    char             tls_raw[256];
    na_xp_ep_t      *eps;            /* every endpoint, owned or not */
    na_xp_msg_t     *q_head, *q_tail;     /* owner queue (messages + events) */
    na_xp_msg_t     *q_pick, *q_pick_prev; /* set by the last successful readiness check */
    na_xp_buf_t     *pool[NA_XP_POOL_CLASSES];
    int              pool_count[NA_XP_POOL_CLASSES];
    size_t           pool_bytes;     /* idle bytes in the pool */
    int              servicing;      /* re-entrancy guard of xp_service */
    int              sweep_due;      /* an endpoint changed: sweep on the next service */
    unsigned         svc_count;      /* service calls (periodic sweeps) */
    uint64_t         svc_next_ns;    /* coarse clock: the door and a sweep are due */
    int              stuck;          /* UCX requests given up while still in progress */
    /* steady state without the heap: records reused, not freed */
    na_xp_op_t      *op_free;        /* idle send operations */
    int              op_free_n;
    na_xp_msg_t     *msg_free;       /* idle message records */
    int              msg_free_n;
    na_xp_op_t      *inflight;       /* owned sends not yet completed (newest first) */
    int              inflight_n;
    size_t           inflight_bytes;
    int              cmpl_due;       /* an owned send completed: finish it in progress */
    /* the loop (xp_worker.c's na_xp_progress and its wait), registered at
     * create: the layers below it block through na_xp_wait_for / _ms and
     * na_xp_loop_progress without calling up into xp_worker.c */
    int            (*loop_progress)(na_xp_t *xp);
    int            (*loop_wait)(na_xp_t *xp, int (*done)(void *), void *arg,
                                uint64_t deadline_ns, int timeout_ms);
};

/* ---- the transport's files, top-down: xp_worker.c (the node, the loop)
 * → xp_door.c (listener, sockets) → xp_handshake.c → xp_endpoint.c →
 * xp_msg.c (messages, records, buffers) and xp_sock.c (socket writes,
 * resolve); xp_log.c, xp_cfg.c at the floor. No file calls one above it:
 * the primitives every layer shares are static inline here, and the
 * waits reach the loop through what xp_worker.c registered. ---------------- */

/* Absolute deadline timeout_ms from now. Cannot fail. */
static inline uint64_t na_xp_deadline(int timeout_ms)
{
    return na_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
}

/* CLOCK_MONOTONIC_COARSE in ns (a few ms resolution, cheap). */
static inline uint64_t na_xp_coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Progress until done(arg) is true or the deadline passes; 1 if done. */
static inline int na_xp_wait_for(na_xp_t *xp, int (*done)(void *), void *arg, uint64_t deadline_ns)
{
    return xp->loop_wait(xp, done, arg, deadline_ns ? deadline_ns : 1, 0);
}

/* Same with a timeout counted from the first look at the clock; 1 if done. */
static inline int na_xp_wait_ms(na_xp_t *xp, int (*done)(void *), void *arg, int timeout_ms)
{
    return xp->loop_wait(xp, done, arg, 0, timeout_ms);
}

/* One pass of the loop (na_xp_progress). */
static inline int na_xp_loop_progress(na_xp_t *xp)
{
    return xp->loop_progress(xp);
}

/* An accepted connection left set-up (READY, failed or freed): it no longer
 * counts against NA_XP_PREAUTH_MAX. */
static inline void na_xp_ep_setup_over(na_xp_ep_t *ep)
{
    if (ep->preauth) {
        ep->preauth = 0;
        ep->xp->n_preauth--;
    }
}

/* Mark an endpoint failed (first reason wins); it is reported/closed by service. */
static inline void na_xp_ep_fail(na_xp_ep_t *ep, na_status_t st, const char *why)
{
    size_t n;

    if (ep->state == NA_XP_EP_FAILED || ep->state == NA_XP_EP_CLOSED)
        return;
    ep->state = NA_XP_EP_FAILED;
    ep->xp->sweep_due = 1;
    na_xp_ep_setup_over(ep);
    if (ep->refused)
        return;                        /* keep the reason we refused it for */
    ep->err = st;
    n = strlen(why);                     /* cut to the field, as snprintf("%s") */
    n = n < sizeof(ep->errmsg) ? n : sizeof(ep->errmsg) - 1;
    memcpy(ep->errmsg, why, n);
    ep->errmsg[n] = '\0';
    if (ep->hs_status == NA_INPROGRESS)
        ep->hs_status = st;
}

/* A message or operation let go of ep; a zombie (the owner let go) whose
 * last reference went is freed by the next sweep (xp_endpoint.c). */
static inline void na_xp_ep_unref(na_xp_ep_t *ep)
{
    if (--ep->refs <= 0 && ep->zombie)
        ep->xp->sweep_due = 1;
}

/* xp_msg.c: the records */
/* Free a ucp request we stop waiting for; one still in progress is counted
 * (na_xp_destroy then leaves the worker to the process exit: UCX 1.13 aborts,
 * "pending request ... should have been flushed", destroying a worker whose
 * endpoints still hold unfinished requests). */
void        na_xp_req_drop(na_xp_t *xp, void *req);
void        na_xp_queue_push(na_xp_t *xp, na_xp_msg_t *msg);
na_xp_buf_t *na_xp_pool_get(na_xp_t *xp, size_t len);
void        na_xp_pool_put(na_xp_t *xp, na_xp_buf_t *buf);
/* Free every buffer kept in the landing pool (destroy). */
void        na_xp_pool_drain(na_xp_t *xp);
/* A zeroed message record (reused), NULL when out of memory; its release
 * (na_xp_msg_release) keeps it for the next. */
na_xp_msg_t *na_xp_msg_new(na_xp_t *xp);
/* Free the idle records (destroy). */
void        na_xp_recs_drain(na_xp_t *xp);

/* xp_msg.c */
/* Finish the owned sends UCX completed (pool, callbacks); progress calls it. */
void        na_xp_owned_reap(na_xp_t *xp);
/* Owned sends past their deadline fail their endpoint (the sweep calls it). */
void        na_xp_owned_check(na_xp_t *xp, uint64_t now_ns);
/* Give up every owned send still in flight (destroy): buffers freed,
 * callbacks told NA_ERR_PEER. */
void        na_xp_owned_drop_all(na_xp_t *xp);

/* xp_endpoint.c */
na_status_t na_xp_ep_setup(na_xp_t *xp);     /* register AM handlers */
/* Allocate an endpoint record (fd: its TCP socket) and link it. NULL on OOM. */
na_xp_ep_t *na_xp_ep_alloc(na_xp_t *xp, const char *addr, int is_server, int fd);
/* Check a peer's UCX worker address before UCX parses it (UCX 1.13 asserts,
 * SIGABRT, on an unknown address version): its version must be the one this
 * UCX packs, its header flags known, and the fixed fields they announce
 * within len. NA_ERR_PEER naming what is wrong. */
na_status_t na_xp_ucx_addr_check(const na_xp_t *xp, const uint8_t *a, size_t len);
/* Create the ucp endpoint to the peer's worker address (after the proofs). */
na_status_t na_xp_ep_ucp_create(na_xp_ep_t *ep, const void *waddr);
/* Sweep endpoints: close failed ones, queue EV_LOST, free finished zombies. */
void        na_xp_ep_sweep(na_xp_t *xp);
/* Start closing every endpoint and wait (bounded) for the closes. */
void        na_xp_ep_close_all(na_xp_t *xp);
/* Free every endpoint record (destroy, after the queues are drained). */
void        na_xp_ep_free_all(na_xp_t *xp);

/* xp_log.c: log through the limiter (warn level). */
void        na_xp_rl_warn(na_xp_rl_t *rl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* xp_sock.c */
/* Account one send()/recv() that returned n: 1 = go on (bytes added to
 * *count, or EINTR), 0 = would block, -1 = closed (errno 0) or failed. */
int         na_xp_sock_io(ssize_t n, size_t *count);
/* Write what is queued on ep's socket; fails ep on a socket error. */
void        na_xp_door_flush(na_xp_ep_t *ep);
/* Queue bytes on ep's socket (written now as far as it takes). */
na_status_t na_xp_door_write(na_xp_ep_t *ep, const void *data, size_t len);
/* Queue an ADDR frame: our worker address and rx_id. */
na_status_t na_xp_door_send_addr(na_xp_ep_t *ep);
/* Close ep's socket (no-op when closed); frees the set-up buffers. */
void        na_xp_door_close(na_xp_ep_t *ep);
/* Resolve host:port (numeric or name, IPv4/IPv6). */
na_status_t na_xp_resolve(const char *host, int port, struct sockaddr_storage *ss,
                          socklen_t *len_p);

/* xp_door.c */
/* Poll the listener and every socket without waiting and act on them:
 * accept, read handshake frames, write what is queued, see peers go. */
void        na_xp_door_service(na_xp_t *xp);
/* Build xp->pfd: [0] the worker's event fd, then the listener and sockets. */
void        na_xp_door_pollset(na_xp_t *xp);
/* Close the listener. */
void        na_xp_door_unlisten(na_xp_t *xp);

/* xp_handshake.c */
/* Client: the TCP connection is up: send the first HELLO. */
na_status_t na_xp_hs_start(na_xp_ep_t *ep);
/* A whole frame arrived on ep's socket (ep->rbuf, ep->rlen bytes). */
void        na_xp_hs_frame(na_xp_ep_t *ep);
/* Server: the peer has proven the cluster secret (AUTH checked). */
int         na_xp_hs_proven(const na_xp_ep_t *ep);
/* A frame's header was bad (st: NA_ERR_VERSION or NA_ERR_PROTO, reason in na_errmsg()). */
void        na_xp_hs_bad_frame(na_xp_ep_t *ep, na_status_t st);

/* UCX's log lines to stderr unless UCX_LOG_FILE is set (rdma/xp_log.c);
 * once per process, before the first UCP context. */
void na_xp_log_setup(void);

#endif /* NA_RDMA_XP_INTERNAL_H */

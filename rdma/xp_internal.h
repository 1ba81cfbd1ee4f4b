/* rdma/xp_internal.h — private structures of the transport (rdma/xp_*.c).
 * Nothing outside rdma/ includes this file. */
#ifndef NA_RDMA_XP_INTERNAL_H
#define NA_RDMA_XP_INTERNAL_H

#include <ucp/api/ucp.h>

#include "rdma/transport.h"

#define NA_XP_AM_MSG    1   /* active-message id of owner messages */
#define NA_XP_AM_HELLO  2   /* active-message id of the handshake */
#define NA_XP_NONCE_LEN 32
#define NA_XP_MAC_LEN   32
#define NA_XP_POOL_MIN_SHIFT 12   /* smallest pooled landing buffer: 4 KiB */
#define NA_XP_POOL_CLASSES   20   /* 4 KiB .. 2 GiB, one free list per power of two */
#define NA_XP_POOL_KEEP      16   /* free buffers kept per class ... */
#define NA_XP_CM_GRACE_MS    50   /* errmode cm: delivery grace after a disconnect */
#define NA_XP_POOL_MAX_BYTES ((size_t)512 << 20) /* ... and at most this much idle memory */

typedef enum {
    NA_XP_EP_CONNECTING = 0,  /* ucp ep made, HELLO not finished */
    NA_XP_EP_READY      = 1,  /* handshake done: messages flow */
    NA_XP_EP_FAILED     = 2,  /* error seen; ucp ep still to be force-closed */
    NA_XP_EP_CLOSED     = 3,  /* ucp ep closed (or being closed) */
} na_xp_ep_state_t;

/* A handshake message waiting to be handled outside the UCX callback. */
typedef struct na_xp_ctl {
    struct na_xp_ctl *next;
    na_xp_ep_t       *ep;
    size_t            len;
    uint8_t           data[];   /* (len) the HELLO-family message */
} na_xp_ctl_t;

struct na_xp_ep {
    na_xp_t          *xp;
    ucp_ep_h          uep;
    na_xp_ep_state_t  state;
    int               is_server;     /* accepted from our listener */
    int               owned;         /* the owner holds it (connect / ACCEPTED) */
    int               lost_reported; /* NA_XP_EV_LOST queued */
    int               refused;       /* we sent REFUSE: keep errmsg, drop at hs_deadline */
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
    na_status_t       hs_status;     /* NA_INPROGRESS, NA_OK or the failure */
    uint8_t           nonce_local[NA_XP_NONCE_LEN];
    uint8_t           nonce_peer[NA_XP_NONCE_LEN];
    char              name[NA_XP_NAME_MAX];
    char              addr[64];
    int               peer_role;
    unsigned          peer_heartbeat_ms;
    na_xp_stats_t     stats;
    na_xp_ep_t       *next;          /* xp->eps list */
};

struct na_xp_op {
    void        *req;                /* UCX request */
    na_xp_ep_t  *ep;
    size_t       bytes;
    uint8_t      hdr[NA_XP_HDR_MAX]; /* header kept alive while in flight */
};

struct na_xp {
    ucp_context_h    ctx;
    ucp_worker_h     worker;
    int              efd;            /* worker event fd for blocking waits */
    ucp_listener_h   listener;
    ucp_conn_request_h pending_conn[16];  /* accepted in the callback, served later */
    int              n_pending_conn;
    char             name[NA_XP_NAME_MAX];
    char             cluster[NA_XP_NAME_MAX];
    na_xp_opts_t     opts;           /* name/secret/tls_raw point into this struct */
    uint8_t         *secret;
    size_t           secret_len;
    char             tls_raw[256];
    na_xp_ep_t      *eps;            /* every endpoint, owned or not */
    na_xp_msg_t     *q_head, *q_tail;     /* owner queue (messages + events) */
    na_xp_msg_t     *q_pick, *q_pick_prev; /* set by the last successful readiness check */
    na_xp_ctl_t     *ctl_head, *ctl_tail; /* handshake messages to handle */
    na_xp_buf_t     *pool[NA_XP_POOL_CLASSES];
    int              pool_count[NA_XP_POOL_CLASSES];
    size_t           pool_bytes;     /* idle bytes in the pool */
    int              servicing;      /* re-entrancy guard of xp_service */
    int              sweep_due;      /* an endpoint changed: sweep on the next service */
    unsigned         svc_count;      /* service calls (periodic sweeps) */
};

/* xp_worker.c */
uint64_t    na_xp_deadline(int timeout_ms);
/* Progress until done(arg) is true or the deadline passes; 1 if done. */
int         na_xp_wait_for(na_xp_t *xp, int (*done)(void *), void *arg, uint64_t deadline_ns);
/* Same with a timeout counted from the first look at the clock; 1 if done. */
int         na_xp_wait_ms(na_xp_t *xp, int (*done)(void *), void *arg, int timeout_ms);
/* CLOCK_MONOTONIC_COARSE in ns (a few ms resolution, cheap). */
uint64_t    na_xp_coarse_ns(void);
void        na_xp_queue_push(na_xp_t *xp, na_xp_msg_t *msg);
na_xp_buf_t *na_xp_pool_get(na_xp_t *xp, size_t len);
void        na_xp_pool_put(na_xp_t *xp, na_xp_buf_t *buf);

/* xp_endpoint.c */
na_status_t na_xp_ep_setup(na_xp_t *xp);     /* register AM handlers */
na_xp_ep_t *na_xp_ep_find(na_xp_t *xp, ucp_ep_h uep);
/* Mark an endpoint failed (first reason wins); it is reported/closed by service. */
void        na_xp_ep_fail(na_xp_ep_t *ep, na_status_t st, const char *why);
/* Sweep endpoints: close failed ones, queue EV_LOST, free finished zombies. */
void        na_xp_ep_sweep(na_xp_t *xp);
void        na_xp_ep_unref(na_xp_ep_t *ep);
/* Send one raw handshake message on the HELLO id (no readiness check). */
na_status_t na_xp_ep_send_ctl(na_xp_ep_t *ep, const void *data, size_t len);
/* Start closing every endpoint and wait (bounded) for the closes. */
void        na_xp_ep_close_all(na_xp_t *xp);
/* Free every endpoint record (destroy, after the queues are drained). */
void        na_xp_ep_free_all(na_xp_t *xp);
/* Make endpoints for connection requests the listener took. */
void        na_xp_accept(na_xp_t *xp);

/* xp_handshake.c */
/* Client: send the first HELLO. */
na_status_t na_xp_hs_start(na_xp_ep_t *ep);
/* Inside the UCX callback: take a HELLO_OK at once (it needs no send), so
 * that a message the server sends right after it finds the endpoint ready.
 * 1 if handled. */
int         na_xp_hs_try_inline(na_xp_ep_t *ep, const uint8_t *data, size_t len);
/* Handle one queued handshake message for ep (may fail the ep). */
void        na_xp_hs_handle(na_xp_ep_t *ep, const uint8_t *data, size_t len);

#endif /* NA_RDMA_XP_INTERNAL_H */

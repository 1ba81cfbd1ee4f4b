/* rdma/transport.h — the nearattn transport: framed messages between nodes
 * over UCX UCP active messages.
 *
 * One na_xp_t per node owns one UCP context and one worker. Storage nodes
 * (and compute replicas) listen on host:port; compute nodes connect by address.
 *
 * Connection set-up (docs/transport.md, "The front door"): a node listens
 * with a plain TCP socket of its own — no UCX sockaddr listener exists. A
 * connecting peer opens a TCP connection and the HELLO handshake of
 * common/wire.h runs over it first: both sides prove knowledge of the cluster
 * secret and the wire version is checked; a peer that fails is disconnected
 * with a log line naming it. Only then do the peers exchange their UCX worker
 * addresses over that socket and create UCX endpoints from them. Accepted
 * connections still in set-up are capped (64) and must finish within 3 s;
 * every frame is read incrementally with strict size limits, so garbage,
 * truncated frames, huge lengths, slow peers and floods cost a socket each,
 * never the process. The TCP socket stays open for the connection's life as
 * its liveness channel: its EOF means the peer is gone (NA_XP_EV_LOST after
 * a 50 ms grace for messages still in flight), in every errmode, so a
 * vanished peer is seen at once even over shared memory.
 *
 * After set-up, messages go over UCX: by default every endpoint runs with
 * UCP_ERR_HANDLING_MODE_PEER, so a peer that dies turns its pending
 * operations into errors and is reported to the owner as an NA_XP_EV_LOST
 * event — never a hang (see na_xp_errmode_t for the one trade-off: UCX 1.13
 * has no shared-memory transport with peer-failure support). Every wait
 * takes a timeout; a send that does not complete in time fails its
 * endpoint. Messages of one endpoint are delivered in the order sent; a peer
 * whose large message stalls never holds up the others.
 *
 * A message is an opaque header (up to NA_XP_HDR_MAX bytes: the wire header of
 * common/wire.h) plus an opaque payload of any size up to opts.max_msg. UCX
 * chooses eager or rendezvous (zero-copy) itself; rendezvous payloads land in
 * buffers registered with ucp_mem_map from a pool the transport owns. The
 * transport does not interpret headers.
 *
 * Progress is driven by the owner: na_xp_recv() (or na_xp_progress()) runs the
 * worker; nothing happens in background threads. The API is not thread-safe:
 * one thread owns a na_xp_t and all its endpoints.
 *
 * Lifetime: endpoints returned by na_xp_connect() or delivered in an
 * NA_XP_EV_ACCEPTED event belong to the owner until na_xp_ep_close();
 * na_xp_destroy() closes whatever is left. Messages returned by na_xp_recv()
 * belong to the owner until na_xp_msg_release(). */
#ifndef NA_RDMA_TRANSPORT_H
#define NA_RDMA_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"

#define NA_XP_HDR_MAX   256   /* largest opaque header carried by a message (= NA_WIRE_HDR_MAX) */
#define NA_XP_NAME_MAX  64    /* node names, including the terminating NUL */

typedef struct na_xp     na_xp_t;
typedef struct na_xp_ep  na_xp_ep_t;
typedef struct na_xp_op  na_xp_op_t;

/* Which UCX transports the context may use (UCX_TLS). */
typedef enum {
    NA_XP_TLS_AUTO = 0,   /* UCX's default choice */
    NA_XP_TLS_SHM  = 1,   /* shared memory for data ("sm,self,tcp": same-host lanes
                             go over shm; tcp stays for a peer on another host) */
    NA_XP_TLS_TCP  = 2,   /* TCP only ("tcp,self"): the network path */
    NA_XP_TLS_RAW  = 3,   /* opts.tls_raw is passed to UCX_TLS verbatim */
} na_xp_tls_t;

/* Parse "auto" | "shm" | "tcp" | anything else (= raw UCX_TLS string). */
na_xp_tls_t na_xp_tls_parse(const char *s);
const char *na_xp_tls_name(na_xp_tls_t tls);
/* The UCX_TLS value the transport gives UCX for tls (tls_raw for RAW), or
 * NULL for AUTO (UCX's default): the one table, in rdma/xp_cfg.c. */
const char *na_xp_tls_ucx(na_xp_tls_t tls, const char *tls_raw);

/* How UCX handles a failing peer on our endpoints (docs/transport.md). */
typedef enum {
    NA_XP_ERRMODE_AUTO = 0,   /* default: CM for tls shm (so shm really carries the
                                 data), PEER for every other tls */
    NA_XP_ERRMODE_PEER = 1,   /* UCP_ERR_HANDLING_MODE_PEER: a dead peer
                                 fails every pending operation. UCX 1.13 then uses
                                 only transports with peer-failure support (tcp,
                                 cma), i.e. no posix/sysv shared memory. */
    NA_XP_ERRMODE_CM   = 2,   /* UCP_ERR_HANDLING_MODE_NONE: lets UCX 1.13 use
                                 posix/sysv shared memory (the fast same-host path).
                                 A vanished peer is seen through the connection's
                                 TCP socket (EOF) at once; a peer that hangs
                                 is found by our timeouts (a send that never
                                 completes fails the endpoint after
                                 opts.timeout_ms) and heartbeats. */
} na_xp_errmode_t;

/* The mode AUTO stands for with this tls (PEER or CM; others unchanged). */
na_xp_errmode_t na_xp_errmode_resolve(na_xp_tls_t tls, na_xp_errmode_t mode);
/* "auto" | "peer" | "cm"; -1 for anything else. */
int         na_xp_errmode_parse(const char *s);
const char *na_xp_errmode_name(na_xp_errmode_t mode);

/* Memory type of a registered buffer. */
typedef enum {
    NA_XP_MEM_HOST = 0,
    NA_XP_MEM_CUDA = 1,   /* device memory (GPUDirect RDMA where available) */
} na_xp_mem_t;

typedef struct {
    const char    *name;        /* this node's name, sent in HELLO (1..63 chars) */
    const char    *host;        /* this node's layout host (copied): UCX's network
                                   transports are kept to the interface carrying its
                                   address (UCX_NET_DEVICES, unless set in the
                                   environment); NULL = every interface */
    const char    *cluster;     /* cluster name, must match the peer's; NULL = "nearattn" */
    int            role;        /* na_wire_role_t sent in HELLO; 0 = TOOL */
    unsigned       heartbeat_ms;/* interval announced in HELLO_OK (server side) */
    na_xp_tls_t    tls;
    const char    *tls_raw;     /* UCX_TLS string when tls == NA_XP_TLS_RAW */
    na_xp_errmode_t errmode;
    const uint8_t *secret;      /* cluster secret (copied); never on the wire */
    size_t         secret_len;  /* >= 1 */
    int            timeout_ms;  /* connect / handshake / send wait limit; 0 = 5000 */
    size_t         max_msg;     /* largest payload accepted; 0 = 256 MiB */
    int            spin_us;     /* busy-poll this long before sleeping on the
                                   worker's event fd in waits; 0 = 50, <0 = never */
    int            test_skip_server_proof; /* tests only: answer AUTH even when the
                                   server's proof fails, to exercise the server's
                                   own check; never set in a real node */
    const void    *test_addr;   /* tests only: sent in the ADDR frame instead of our
                                   UCX worker address (a peer that holds the secret
                                   and sends garbage); NULL in a real node */
    size_t         test_addr_len;
} na_xp_opts_t;

/* Per-endpoint counters (messages and payload+header bytes). */
typedef struct {
    uint64_t msgs_sent, bytes_sent;
    uint64_t msgs_recv, bytes_recv;
    uint64_t last_recv_ns;      /* CLOCK_MONOTONIC_COARSE (ns, a few ms resolution) of
                                   the last message received, for heartbeats */
} na_xp_stats_t;

typedef enum {
    NA_XP_MSG_DATA     = 0,   /* a message: hdr/hdr_len + data/len */
    NA_XP_EV_ACCEPTED  = 1,   /* a peer connected to our listener and passed HELLO */
    NA_XP_EV_LOST      = 2,   /* a peer failed (status says why); ep is dead */
} na_xp_kind_t;

/* What na_xp_recv() returns. Fields are read-only for the owner. */
typedef struct na_xp_msg {
    na_xp_kind_t   kind;
    na_xp_ep_t    *ep;                  /* the peer */
    na_status_t    status;              /* NA_XP_EV_LOST: the reason */
    size_t         hdr_len;
    uint8_t        hdr[NA_XP_HDR_MAX];  /* (hdr_len) opaque header */
    void          *data;                /* (len) payload; NULL when len == 0 */
    size_t         len;
    /* private to the transport */
    struct na_xp_msg *next;
    int            ready;               /* 1 when the payload has fully arrived */
    void          *ucx_desc;            /* UCX-owned eager data to release */
    struct na_xp_buf *pool_buf;         /* landing buffer (rendezvous, or a copy of
                                           eager data UCX does not keep) */
} na_xp_msg_t;

/* A registered buffer (ucp_mem_map). */
typedef struct na_xp_buf {
    void        *ptr;       /* (size) bytes */
    size_t       size;
    na_xp_mem_t  mem;
    void        *memh;      /* ucp_mem_h */
    struct na_xp_buf *next; /* pool free list (private) */
} na_xp_buf_t;

/* ---- node ---------------------------------------------------------------- */

/* Create the UCP context and worker with the given options; raises
 * RLIMIT_NOFILE to its hard limit (a socket per peer). Fails with
 * NA_ERR_INVALID (bad options) or NA_ERR_TRANSPORT (UCX refused). */
na_status_t na_xp_create(const na_xp_opts_t *opts, na_xp_t **xp_p);
/* Close all endpoints (bounded wait), the listener, buffers, the worker and the
 * context. Never fails; NULL is a no-op. */
void        na_xp_destroy(na_xp_t *xp);

/* Listen on host:port with a TCP socket of the transport's own (port 0 = any;
 * the bound port is written to *port_p if non-NULL). "port taken" is
 * NA_ERR_BUSY with a clear message. One listener per node. The socket
 * carries SO_REUSEADDR, so a node restarted at once on its port listens
 * again even while connections it closed first sit in TIME_WAIT; a port
 * another process listens on is still "port taken". Connections are
 * accepted and authenticated as the owner makes progress (na_xp_recv /
 * na_xp_progress); each that passes is an NA_XP_EV_ACCEPTED event. */
na_status_t na_xp_listen(na_xp_t *xp, const char *host, int port, int *port_p);

/* Connect to host:port over TCP, run the HELLO handshake there, then make
 * the UCX endpoint; waits at most opts.timeout_ms (other endpoints keep
 * progressing meanwhile). Returns the endpoint on success. NA_ERR_PEER if
 * nobody answers, the peer drops us or answers anything malformed,
 * NA_ERR_AUTH/NA_ERR_VERSION if the peer fails the proof, NA_ERR_TIMEOUT if
 * the wait ran out. */
na_status_t na_xp_connect(na_xp_t *xp, const char *host, int port, na_xp_ep_t **ep_p);
/* na_xp_connect() bounded by timeout_ms instead (< 0 or more than
 * opts.timeout_ms = opts.timeout_ms): a silent host costs at most that. */
na_status_t na_xp_connect_ms(na_xp_t *xp, const char *host, int port, int timeout_ms,
                             na_xp_ep_t **ep_p);
/* na_xp_connect_ms() in halves, for a caller that keeps serving its other
 * endpoints meanwhile. _start opens the connection and returns the endpoint
 * at once; its handshake goes on as the transport makes progress (na_xp_recv,
 * na_xp_progress). _done: NA_INPROGRESS while it runs, NA_OK once connected,
 * else the error of na_xp_connect() and the endpoint is closed (never use it
 * again). Messages that arrive before _done said NA_OK are the owner's to
 * drop. _cancel closes an endpoint whose connect is still running. */
na_status_t na_xp_connect_start(na_xp_t *xp, const char *host, int port, int timeout_ms,
                                na_xp_ep_t **ep_p);
na_status_t na_xp_connect_done(na_xp_ep_t *ep);
void        na_xp_connect_cancel(na_xp_ep_t *ep);

/* Close an endpoint and free it (its queued messages stay valid until
 * released). Never fails; waits at most opts.timeout_ms for a clean close. */
void        na_xp_ep_close(na_xp_ep_t *ep);

/* Peer name from its HELLO ("?" before the handshake), and "host:port". */
const char *na_xp_ep_name(const na_xp_ep_t *ep);
const char *na_xp_ep_addr(const na_xp_ep_t *ep);
/* 1 while the endpoint is usable (handshake done, no error). */
int         na_xp_ep_alive(const na_xp_ep_t *ep);
/* The error-handling mode the node's endpoints use (AUTO resolved). */
na_xp_errmode_t na_xp_errmode(const na_xp_t *xp);
/* Heartbeat interval and role the peer announced in the handshake. */
unsigned    na_xp_ep_peer_heartbeat_ms(const na_xp_ep_t *ep);
int         na_xp_ep_peer_role(const na_xp_ep_t *ep);
/* Print UCX's description of the endpoint (lanes, transports) to f. */
void        na_xp_ep_describe(const na_xp_ep_t *ep, FILE *f);
/* Counters of an endpoint (copied). */
void        na_xp_ep_stats(const na_xp_ep_t *ep, na_xp_stats_t *stats_p);

/* ---- messages ------------------------------------------------------------ */

/* Start sending hdr (hdr_len <= NA_XP_HDR_MAX, copied) + data (len bytes,
 * which must stay valid until the operation completes). buf, if non-NULL, is
 * the registered buffer holding data (lets UCX skip registration). If the send
 * completed at once *op_p is NULL; otherwise the owner must na_xp_op_wait()
 * it. Fails with NA_ERR_PEER on a dead endpoint. */
na_status_t na_xp_send_start(na_xp_ep_t *ep, const void *hdr, size_t hdr_len,
                             const void *data, size_t len, const na_xp_buf_t *buf,
                             na_xp_op_t **op_p);
/* Wait for a started send (op may be NULL: returns NA_OK; xp may be NULL:
 * the op's node). Frees op. On
 * timeout the endpoint is failed (so its other operations end too) and
 * NA_ERR_TIMEOUT is returned; a lost peer gives NA_ERR_PEER. timeout_ms < 0
 * means opts.timeout_ms. */
na_status_t na_xp_op_wait(na_xp_t *xp, na_xp_op_t *op, int timeout_ms);
/* Send and wait for local completion (the buffers can be reused afterwards). */
na_status_t na_xp_send(na_xp_ep_t *ep, const void *hdr, size_t hdr_len,
                       const void *data, size_t len);

/* Told once when an owned send completed locally: NA_OK, or why it failed
 * (NA_ERR_PEER, NA_ERR_TIMEOUT). Called from the owner's progress (never
 * from inside UCX); it may not call into the transport. */
typedef void (*na_xp_sent_fn)(void *arg, na_status_t st);

/* Send a message that owns its buffer and return without waiting: buf
 * (from na_xp_buf_get) holds the hdr_len header bytes at buf->ptr and the
 * payload's len bytes at buf->ptr + off. The transport takes buf in every
 * case, success or not, and gives it back to its pool once the send
 * completed (or failed); fn (may be NULL) is then told the status with arg,
 * at once when UCX completed the send inside this call, else from a later
 * progress. Sends to one endpoint arrive in order; sends to several
 * endpoints overlap. A send not completed within opts.timeout_ms fails its
 * endpoint (NA_XP_EV_LOST). With NA_XP_INFLIGHT_MAX sends or 256 MiB in
 * flight on the node the call first makes progress until the older ones
 * drain (bounded by opts.timeout_ms). Fails with NA_ERR_PEER on a dead
 * endpoint (fn not called then). Steady state allocates nothing: operation
 * records and buffers are reused. */
na_status_t na_xp_send_owned(na_xp_ep_t *ep, na_xp_buf_t *buf, size_t hdr_len, size_t off,
                             size_t len, na_xp_sent_fn fn, void *arg);
/* Owned sends of the node still in flight. */
int         na_xp_inflight(const na_xp_t *xp);

/* Make progress (non-blocking). Returns the number of UCX events handled. */
int         na_xp_progress(na_xp_t *xp);
/* Next message or event, waiting up to timeout_ms (0 = poll once; < 0 =
 * opts.timeout_ms). NA_ERR_TIMEOUT if nothing came. */
na_status_t na_xp_recv(na_xp_t *xp, int timeout_ms, na_xp_msg_t **msg_p);
/* Give a message back (frees or recycles its payload). NULL is a no-op. */
void        na_xp_msg_release(na_xp_t *xp, na_xp_msg_t *msg);

/* ---- registered memory --------------------------------------------------- */

/* Allocate (page-aligned) and register (ucp_mem_map) size bytes of the given
 * memory type: host only in this build (NA_ERR_UNSUPPORTED for cuda). */
na_status_t na_xp_buf_create(na_xp_t *xp, size_t size, na_xp_mem_t mem, na_xp_buf_t **buf_p);
void        na_xp_buf_destroy(na_xp_t *xp, na_xp_buf_t *buf);
/* A registered host buffer of at least len bytes (a power of two from
 * 4 KiB) from the transport's pool, grown on demand; NULL when out of memory
 * or over 2 GiB (na_errmsg says). Give it back with na_xp_buf_put, or hand
 * it to na_xp_send_owned. Idle buffers are kept (16 per size, 512 MiB in
 * all), so a steady stream of messages reuses the same few. */
na_xp_buf_t *na_xp_buf_get(na_xp_t *xp, size_t len);
void        na_xp_buf_put(na_xp_t *xp, na_xp_buf_t *buf);

/* CLOCK_MONOTONIC in nanoseconds (compare last_recv_ns with a margin of a
 * few ms: it is taken from the coarse clock). */
uint64_t    na_xp_now_ns(void);

#endif /* NA_RDMA_TRANSPORT_H */

/* storage-node/node_internal.h — private state of the storage node's loop
 * (storage-node/node*.c). */
#ifndef NA_NODE_INTERNAL_H
#define NA_NODE_INTERNAL_H

#include <stdint.h>

#include "common/wire.h"
#include "common/wire_stats.h"
#include "rdma/session.h"
#include "rdma/transport.h"
#include "storage-node/node.h"
#include "storage-node/slotset.h"

#define NA_NODE_REQ_BUCKETS 1024

/* A connected, authenticated peer. */
typedef struct na_node_peer {
    na_peer_t  *sp;                  /* its session peer (rdma/session.h) */
    uint32_t    id;                  /* unique per node lifetime (request keys) */
    char        name[NA_XP_NAME_MAX];
    uint64_t    n_requests;          /* open requests owned */
    uint64_t    msgs;                /* messages it sent that the node served */
    struct nd_open *decode_open;     /* DECODE_ATTN batch whose parts are still
                                        arriving (node_decode.c), or NULL */
    struct nd_open *decode_run;      /* closed batches computing, oldest first */
    int         n_run;               /* how many (at most na_node.max_run) */
    int         door;                /* 1 + index into na_node.doors of a connection
                                        this node made to announce itself; 0: accepted */
    struct na_node_peer *next;
} na_node_peer_t;

/* An open request: (peer, wire id) -> its parts on the slot set. */
typedef struct na_node_req {
    uint32_t peer_id;
    uint64_t wire_id;
    uint32_t max_tokens, n_layers;
    uint16_t kv_h0, kv_h1;           /* KV heads this node holds */
    na_slotset_req_t sr;             /* store id (node-unique) and parts, kvh0
                                        relative to kv_h0 */
    uint32_t *pfx_tokens;            /* the REQ_OPEN's prefix tokens until the prompt's
                                        blocks went to the prefix caches (NULL: none) */
    int       pfx_n;
    uint8_t   pfx_fp[NA_WIRE_FP_SIZE];
    uint32_t  n_prompt;              /* REQ_OPEN's: where its chunked prompt ends (0:
                                        not said, wire < 2.2) */
    int       prompt_in;             /* 1 once that prompt's KV was flushed */
    struct na_node_req *hnext;
} na_node_req_t;

/* A compute node an extra storage node announces itself to (node_join.c). */
typedef struct {
    const char *name, *host;         /* the layout's (borrowed) */
    int         port;
    na_xp_ep_t *pending;             /* connect in progress */
    int         up;                  /* announced: its connection is a peer */
    unsigned    retry_ms;            /* back-off, doubled per failure (0: first try) */
    uint64_t    next_ns;             /* next attempt */
    int         stopped;             /* refused for good (model, secret, version): not
                                        announced to again */
} na_node_door_t;

struct na_node {
    const na_cfg_t *cfg;
    char            name[NA_XP_NAME_MAX];
    char            host[256];
    int             port;
    na_xp_t        *xp;
    na_ses_t       *ses;             /* receive / dispatch / heartbeats of the peers */
    /* model shape (0 until known) */
    int             have_shape;
    na_slot_common_t common;
    /* device slots (storage-node/slotset.h) */
    na_slotset_spec_t spec;          /* from the layout (dir strings borrowed from cfg/opts) */
    na_slotset_t   *ss;              /* NULL until the shape is known */
    int             n_slots;
    na_slot_t     **slots;           /* [n_slots] the slot set's, borrowed */
    /* peers and requests */
    na_node_peer_t *peers;
    int             n_peers, max_peers;
    uint32_t        next_peer_id;
    uint64_t        next_sid;
    na_node_req_t  *req_hash[NA_NODE_REQ_BUCKETS];
    /* an extra node's announcements to the layout's compute nodes (node_join.c) */
    na_node_door_t *doors;
    int             n_doors;
    /* timing */
    unsigned        heartbeat_ms, peer_timeout_ms;
    /* counters (STATS), by key (common/wire_stats.h: NA_STAT_REQUESTS, open
     * requests owned, ... NA_STAT_FETCH_NS); the keys nd_stats computes
     * (peers, the model's shape, the prefix caches') stay 0 here */
    uint64_t        stat[NA_STAT_NODE_COUNT];
    uint64_t        prompts_flushed;  /* chunked prompts flushed at their end (n_prompt) */
    int             decode_computing;    /* closed batches not yet answered (all peers) */
    int             max_run;             /* closed batches one peer may have computing */
    uint64_t        decode_busy_since;   /* when decode_computing last left 0
                                            (NA_STAT_DECODE_NS counts the time with
                                            batches computing) */
    /* decode pools (node_decode.c): answered parts and batches kept for the
     * next ones, and the reply's scratch; grown rarely, freed at destroy */
    struct nd_part *part_free;
    struct nd_open *open_free;
    void           *reply_oe, *reply_conv;
    size_t          reply_oe_cap, reply_conv_cap;
};

/* The files of the node, top-down (each calls only those below it):
 * node.c (setup, the loop, peers coming and going) -> node_dispatch.c (the
 * handlers) -> node_decode.c, node_kvread.c; node_join.c; all of them ->
 * node_req.c (requests, peers, ERROR answers, prefix publishing). */

/* node_req.c: the request table. The lookup and the send are inline: the
 * decode path takes them for every entry and answer. */
static inline unsigned na_node_bucket(uint32_t peer_id, uint64_t wire_id)
{
    uint64_t h = (wire_id ^ ((uint64_t)peer_id << 40)) * 0x9e3779b97f4a7c15ull;
    return (unsigned)(h >> 54) & (NA_NODE_REQ_BUCKETS - 1);
}

static inline na_node_req_t *na_node_req_find(na_node_t *n, uint32_t peer_id, uint64_t wire_id)
{
    na_node_req_t *r;
    for (r = n->req_hash[na_node_bucket(peer_id, wire_id)]; r != NULL; r = r->hnext)
        if (r->peer_id == peer_id && r->wire_id == wire_id)
            return r;
    return NULL;
}

/* Send an encoded message m to peer p (the session stamps seq/time). */
static inline na_status_t na_node_send(na_node_peer_t *p, na_wire_msg_t *m)
{
    return na_peer_send(p->sp, m, NULL);
}

/* Link a new request into the table (counts it). */
void           na_node_req_insert(na_node_t *n, na_node_req_t *r);
/* Close the request on its slots, unlink and free it. */
na_status_t    na_node_req_free(na_node_t *n, na_node_req_t *r);
/* Send ERROR about the message with header h (request id r) to p. */
na_status_t    na_node_send_error(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                  uint64_t req, na_status_t st, const char *text);
/* Set up a peer on session peer sp (accepted, or our own announcement). */
na_node_peer_t *na_node_peer_add(na_node_t *n, na_peer_t *sp);
/* Request r's prompt is in (its last PREFILL_KV, or the attention of its
 * prompt's last chunk on the last layer answered): the prompt's whole blocks
 * go to the prefix caches, once (r->pfx_tokens is freed; nothing when NULL). */
void           na_node_prefix_publish(na_node_t *n, na_node_req_t *r);

/* node_join.c: an extra storage node (not in the layout) announces itself to
 * each compute node of the layout that has a port: it connects to it (front
 * door, the layout's secret), and that connection is then one of its peers,
 * served like an accepted one. Failed or ended announcements are retried
 * (1 s, doubling up to 8 s) while the node runs. */
na_status_t    na_node_join_init(na_node_t *n);
/* The loop's hook: finish / start announcements. */
void           na_node_join_poll(na_node_t *n);
/* 1 while an announcement's handshake runs (the loop then waits briefly). */
int            na_node_join_pending(const na_node_t *n);
/* Peer p (door > 0) ended: announce again after a pause, or never when
 * the compute node refused it for good (its BYE's reason: model, role). */
void           na_node_join_ended(na_node_t *n, const na_node_peer_t *p);
void           na_node_join_destroy(na_node_t *n);

/* node_dispatch.c: register the handlers of the message types a storage
 * node serves on its session (any other type drops the peer). A handler
 * returns NA_OK, an error that concerns one request only (already answered),
 * or NA_ERR_PROTO / transport errors after which the session drops the peer. */
void           na_node_handlers(na_ses_t *ses);

/* node_decode.c: DECODE_ATTN -> ATTN_OUT. Each part of a batch split over
 * several messages (flag MORE) is submitted to the slots' engines as it
 * arrives; the last part (no MORE) closes the batch, which computes while
 * the loop goes on; na_node_decode_reap answers it (one ATTN_OUT per part)
 * once done. Errors as the other handlers (na_node_handlers). */
na_status_t    na_node_on_decode(void *ctx, na_ses_in_t *in);
/* End p's decode batches (the open one and those computing): wait for the
 * engines, then answer their parts (reply = 1) or drop them (reply = 0: the
 * peer is going away). */
na_status_t    na_node_decode_finish(na_node_t *n, na_node_peer_t *p, int reply);
/* Before handling a message of type `type` from p: a message that touches
 * requests (release, prefill, fetch, open, BYE) first ends p's decode
 * batches (na_node_decode_finish); heartbeats, stats, echoes and further
 * DECODE_ATTN do not wait for them. */
na_status_t    na_node_decode_before(na_node_t *n, na_node_peer_t *p, unsigned type);
/* The loop's hook: answer every computing batch that completed (each peer's
 * in order), waiting at most wait_us for the oldest when none did. Returns
 * how many batches are still computing (0: the loop may block in recv). */
int            na_node_decode_reap(na_node_t *n, int wait_us);
/* Free the decode pools (after every peer's batches ended). */
void           na_node_decode_destroy(na_node_t *n);

/* node_kvread.c: KV_FETCH -> KV_DATA. */
na_status_t    na_node_kv_fetch(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                const na_wire_kv_fetch_t *f);

#endif /* NA_NODE_INTERNAL_H */

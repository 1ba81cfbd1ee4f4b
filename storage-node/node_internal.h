/* storage-node/node_internal.h — private state of the storage node's loop
 * (storage-node/node.c, node_dispatch.c, node_kvread.c). */
#ifndef NA_NODE_INTERNAL_H
#define NA_NODE_INTERNAL_H

#include <stdint.h>

#include "common/wire.h"
#include "rdma/session.h"
#include "rdma/transport.h"
#include "storage-node/node.h"
#include "storage-node/slot.h"

#define NA_NODE_REQ_BUCKETS 1024

/* A connected, authenticated peer. */
typedef struct na_node_peer {
    na_peer_t  *sp;                  /* its session peer (rdma/session.h) */
    uint32_t    id;                  /* unique per node lifetime (request keys) */
    char        name[NA_XP_NAME_MAX];
    uint64_t    n_requests;          /* open requests owned */
    struct nd_open *decode_open;     /* DECODE_ATTN batch whose parts are still
                                        arriving (node_decode.c), or NULL */
    struct na_node_peer *next;
} na_node_peer_t;

/* An open request: (peer, wire id) -> store id + its parts on the slots. */
typedef struct na_node_req {
    uint32_t peer_id;
    uint64_t wire_id;
    uint64_t sid;                    /* id in the slots' stores (node-unique) */
    uint32_t max_tokens, n_layers;
    uint16_t kv_h0, kv_h1;           /* KV heads this node holds */
    uint64_t bytes_per_kvh;          /* placement accounting */
    int      n_parts;
    na_place_part_t parts[NA_PLACE_MAX_SLOTS]; /* kvh0 relative to kv_h0 */
    struct na_node_req *hnext;
} na_node_req_t;

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
    /* device slots */
    int             n_slots;
    na_slot_dev_t  *devs;            /* [n_slots] (dir strings borrowed from cfg/opts) */
    na_slot_t     **slots;           /* [n_slots] (NULL until the shape is known) */
    na_place_t      place;
    int             partition;       /* na_partition_t */
    /* peers and requests */
    na_node_peer_t *peers;
    int             n_peers, max_peers;
    uint32_t        next_peer_id;
    uint64_t        next_sid;
    na_node_req_t  *req_hash[NA_NODE_REQ_BUCKETS];
    uint64_t        n_requests;
    /* timing */
    unsigned        heartbeat_ms, peer_timeout_ms;
    /* counters (STATS) */
    uint64_t        msgs, errors_sent, dropped, lost, refused_opens;
    uint64_t        decode_entries, prefill_tokens;
    uint64_t        decode_parts_early;  /* parts submitted while later ones were due */
    uint64_t        decode_ns, prefill_ns, fetch_ns;   /* time spent serving each kind */
};

/* node.c */
na_node_req_t *na_node_req_find(na_node_t *n, uint32_t peer_id, uint64_t wire_id);
/* Link a new request into the table (counts it). */
void           na_node_req_insert(na_node_t *n, na_node_req_t *r);
/* Close the request on its slots, unlink and free it. */
na_status_t    na_node_req_free(na_node_t *n, na_node_req_t *r);
na_status_t    na_node_shape_init(na_node_t *n, int n_layers, int n_heads, int n_kv_heads,
                                  int head_dim);
/* Send an encoded message m to peer p (stamps seq/time). */
na_status_t    na_node_send(na_node_t *n, na_node_peer_t *p, na_wire_msg_t *m);
/* Send ERROR about the message with header h (request id r) to p. */
na_status_t    na_node_send_error(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                  uint64_t req, na_status_t st, const char *text);

/* node_dispatch.c: register the handlers of the message types a storage
 * node serves on its session (any other type drops the peer). A handler
 * returns NA_OK, an error that concerns one request only (already answered),
 * or NA_ERR_PROTO / transport errors after which the session drops the peer. */
void           na_node_handlers(na_ses_t *ses);

/* node_decode.c: DECODE_ATTN -> ATTN_OUT. Each part of a batch split over
 * several messages (flag MORE) is submitted to the slots' engines as it
 * arrives; the last part (no MORE) closes the batch, waits and answers one
 * ATTN_OUT per part. Errors as na_node_dispatch. */
na_status_t    na_node_decode(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                              const na_wire_attn_t *a);
/* End p's open decode batch, if any: wait for the engines, then answer its
 * parts (reply = 1) or drop them (reply = 0: the peer is going away). */
na_status_t    na_node_decode_finish(na_node_t *n, na_node_peer_t *p, int reply);

/* node_kvread.c: KV_FETCH -> KV_DATA. */
na_status_t    na_node_kv_fetch(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                const na_wire_kv_fetch_t *f);

#endif /* NA_NODE_INTERNAL_H */

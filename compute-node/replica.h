/* compute-node/replica.h — several compute replicas for rotational pipelining
 * (Lamina §5.1): batch j's slice k runs on replica (j + k) mod R.
 *
 * Replica 0 (the one `nearattn run` starts) drives the job: it owns the
 * request queue, prefill and sampling (compute-node/offload.c, sched.c).
 * Replicas 1..R-1 are the layout's other compute nodes, each serving
 * `na_replica_serve` (started by `nearattn node`). Slice k of a step is
 * post_attn(k-1) + pre_attn(k) + the attention of layer k (slice 0: embed
 * instead of post_attn; slice L = n_layers: post_attn(L-1) only, final norm,
 * logits and sampling stay on replica 0). The attention of layer l of a batch
 * is therefore always sent by the same replica, which holds that layer's KV
 * under its own storage-node connection (a storage node keys requests by
 * connection): replica 0 opens every request on each replica (REQ_OPEN over
 * the compute link) and ships each layer's prompt KV to the replica owning it
 * (PREFILL_KV over the compute link; the replica forwards it to its storage
 * node). After a slice the batch context (x, the attention output, the row
 * table) travels as a BATCH_CTX (common/wire.h): replica 0 -> replica w ->
 * back to replica 0 (a star: a replica never forwards to another).
 *
 * Messages on the compute link (all common/wire.h types):
 *   0 -> w  REQ_OPEN (answered ACK / ERROR), PREFILL_KV (ACK / ERROR; without
 *           MORE it ends the prompt of that layer), REQ_RELEASE (no answer),
 *           BATCH_CTX {slice k, rows, x (k > 0), att of layer k-1 (k > 0)}
 *   w -> 0  BATCH_CTX {slice k+1, rows (status of a row whose attention
 *           failed), x, att of layer k (none when k = L)} */
#ifndef NA_REPLICA_H
#define NA_REPLICA_H

#include <signal.h>
#include <stdint.h>

#include "common/config.h"
#include "common/model.h"
#include "common/status.h"
#include "common/wire.h"
#include "compute-node/attn_service.h"
#include "rdma/transport.h"

#define NA_REP_MAX 16           /* compute replicas in one job */

typedef struct na_rep na_rep_t;

/* Counters of the compute link (replica 0's side). */
typedef struct {
    uint64_t ctx_sent, ctx_recv;       /* BATCH_CTX messages */
    uint64_t bytes_sent, bytes_recv;   /* all messages, header + payload */
    uint64_t prefill_bytes;            /* prompt KV forwarded to replicas */
} na_rep_stats_t;

/* Replica 0's link: connect to compute nodes 1..n_compute-1 of cfg (their
 * host:port) as `name`. NA_ERR_PEER naming the replica that cannot be
 * reached; NA_ERR_INVALID when a compute node has no port. */
na_status_t na_rep_create(const na_cfg_t *cfg, const char *name, na_rep_t **r_p);
/* Close the link (BYE to every replica); NULL is a no-op. */
void        na_rep_destroy(na_rep_t *r);
/* Number of replicas R, this one included. */
int         na_rep_count(const na_rep_t *r);
void        na_rep_stats(const na_rep_t *r, na_rep_stats_t *out);
/* Serve svc (na_asvc_progress: heartbeats) while waiting for a replica's
 * answer; NULL detaches. */
void        na_rep_attach_service(na_rep_t *r, na_asvc_t *svc);

/* Open request id on replica w (1..R-1) for max_tokens tokens: the replica
 * opens it on its storage nodes. Errors: the replica's (NOSPACE, ...) or
 * NA_ERR_PEER when it is gone. */
na_status_t na_rep_open(na_rep_t *r, int w, uint64_t id, int max_tokens,
                        const na_model_config_t *mc);
/* Ship positions 0..n_tok-1 of layer's prompt KV (rows of kv_dim, dtype) of
 * request id to replica w, which forwards them to its storage nodes and ends
 * that layer's prompt. Synchronous. */
na_status_t na_rep_prefill(na_rep_t *r, int w, uint64_t id, int layer, const void *k,
                           const void *v, na_dtype_t dtype, int n_tok,
                           const na_model_config_t *mc);
/* Release request id on replica w. Never fails (a lost replica is ignored). */
void        na_rep_release(na_rep_t *r, int w, uint64_t id, int status);
/* Send a batch context to replica w (c->rows, x, att as in common/wire.h). */
na_status_t na_rep_send_ctx(na_rep_t *r, int w, const na_wire_ctx_t *c);
/* Next BATCH_CTX from any replica, waiting up to timeout_ms: *msg_p is the
 * transport message (give it back with na_rep_msg_release) and *c_p the
 * decoded context (views into it). NA_ERR_TIMEOUT when none came;
 * NA_ERR_PEER when a replica was lost or sent something malformed. */
na_status_t na_rep_recv_ctx(na_rep_t *r, int timeout_ms, na_xp_msg_t **msg_p,
                            na_wire_ctx_t *c_p);
void        na_rep_msg_release(na_rep_t *r, na_xp_msg_t *msg);

/* A compute rank of the layout (`nearattn node`, compute branch): load the
 * layout's model, connect to the storage nodes, listen on the node's
 * host:port for replica 0, print "READY NAME (compute replica)" and serve
 * REQ_OPEN / PREFILL_KV / REQ_RELEASE / BATCH_CTX until *stop is set.
 * Requests of a replica 0 that goes away are released. Returns NA_OK on a
 * clean stop; the error that prevented serving otherwise. */
na_status_t na_replica_serve(const na_cfg_t *cfg, const char *name,
                             const volatile sig_atomic_t *stop);

/* 1 when compute node cn serves as a replica: rotational pipelining, not the
 * layout's first compute node (that one drives), and it has a port. */
int         na_replica_wanted(const na_cfg_t *cfg, const na_cfg_node_t *cn);

#endif /* NA_REPLICA_H */

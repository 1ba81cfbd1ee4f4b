/* storage-node/node.h — the storage node's main loop: serves the wire
 * protocol (common/wire.h) over the transport (rdma/transport.h) on top of
 * the node's device slots (storage-node/slot.h).
 *
 * One thread owns everything: the transport, the slots, the request table.
 * The loop receives one message at a time and answers it:
 *
 *   REQ_OPEN     place the request on slot(s) (storage-node/placement.c) and
 *                open it there -> ACK, or ERROR with the reason (SSD full ...)
 *   PREFILL_KV   bulk append of a prompt chunk of one layer -> ACK or ERROR
 *   DECODE_ATTN  append k_new/v_new and run attention on the slots' engines
 *                (all slots at once) -> ATTN_OUT (status per entry; a failed
 *                entry is also explained by an ERROR naming its request,
 *                sent just before the ATTN_OUT)
 *   KV_FETCH     read a KV range back -> KV_DATA or ERROR
 *   REQ_RELEASE  free the request on every slot -> ACK or ERROR
 *   STATS_REQ    -> STATS (node, slot, tier and engine counters)
 *   HEARTBEAT    -> HEARTBEAT with flag REPLY; ECHO -> ECHO REPLY; BYE -> close
 *
 * Requests are keyed by (peer, request id), so two compute nodes may use the
 * same ids and a lost peer frees exactly its own requests.
 *
 * Bad input: a message that fails wire validation, a handshake-family
 * message after the handshake, or a message type the storage node does not
 * serve drops that connection (log line "dropping peer NAME: why") and frees
 * its requests; every other peer keeps being served. An error that concerns
 * one request (unknown id, wrong shape, budget, I/O) is answered with ERROR
 * for that request only.
 *
 * Heartbeats: every transport.heartbeat_ms the node sends HEARTBEAT to each
 * peer it has not sent anything to for that long, and answers every
 * HEARTBEAT. A peer from which nothing (message, heartbeat or heartbeat
 * reply) arrived for transport.peer_timeout_ms is declared lost and dropped
 * like a peer whose connection failed (NA_XP_EV_LOST). A client must
 * therefore answer heartbeats (compute-node/storage_client.h does so in all
 * its waits, and na_sc_poll() for idle clients).
 *
 * Joining a running cluster (late storage nodes). A storage node of the
 * layout started by hand (`nearattn node --config F --name s3`) only
 * listens: compute nodes retry the layout's nodes they could not reach, and
 * re-read their layout file for nodes added to it. A node in no layout
 * (`--name s9 --listen H:P --kv-dir D`) also announces itself to the
 * layout's compute nodes that have a port (storage-node/node_join.c): it
 * connects to them, and that connection is then served like an accepted
 * one. A request is never moved; capacity scales out for new requests
 * (docs/cluster.md "Joining a running cluster"). */
#ifndef NA_NODE_H
#define NA_NODE_H

#include <signal.h>

#include "common/config.h"
#include "common/status.h"

typedef struct na_node na_node_t;

typedef struct {
    const na_cfg_t *cfg;        /* the layout (borrowed; must outlive the node) */
    const char *name;           /* this node's name (required): a storage node of the
                                   layout, or an extra one (then kv_dir is required) */
    const char *listen_host;    /* NULL: the layout's host for the node */
    int         listen_port;    /* < 0: the layout's port; 0: any free port */
    const char *kv_dir;         /* extra node: the KV directory of its one device slot */
    long        dram_mb;        /* extra node budgets (0 = 256 / 1024) */
    long        ssd_mb;
    const char *model_path;     /* NULL: the layout's model.path (only its shape is read) */
    int         shape[4];       /* n_layers, n_heads, n_kv_heads, head_dim: when
                                   shape[0] > 0, used instead of a model file (for
                                   storage hosts without the model) */
    int         max_peers;      /* connections served at once (0 = 64) */
    int         max_batches;    /* decode batches one peer may have computing at once;
                                   a peer that sends more is dropped (0 = 256) */
    int         threads;        /* engine threads per slot (0 = the device's) */
} na_node_opts_t;

/* Create the node: resolve its layout entry (or the extra), read the model's
 * shape (opts->shape, else the model file; NA_ERR_INVALID when neither is
 * given), create the device slots, create the transport and listen. Prints
 * nothing; na_node_run() announces readiness. Fails with the slot's,
 * transport's (NA_ERR_BUSY: port taken) or layout's error. On success *node_p
 * owns everything (na_node_destroy). */
na_status_t na_node_create(const na_node_opts_t *opts, na_node_t **node_p);

/* Serve until *stop becomes non-zero (set it from a signal handler), then
 * say BYE to every peer and return NA_OK. Prints "READY name host:port" on
 * stdout (flushed) once serving. Returns an error only if the transport
 * itself fails; a failing peer or request never ends the loop. */
na_status_t na_node_run(na_node_t *node, volatile sig_atomic_t *stop);

/* The port the node listens on (the bound one when 0 was asked). */
int         na_node_port(const na_node_t *node);

/* Free every request, slot and the transport. NULL is a no-op. */
void        na_node_destroy(na_node_t *node);

#endif /* NA_NODE_H */

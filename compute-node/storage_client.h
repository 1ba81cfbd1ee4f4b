/* compute-node/storage_client.h — the compute side of the storage-node
 * protocol (common/wire.h; server: `nearattn node`), as blocking calls
 * on one connection: open a request, ship its prompt KV, run decode
 * attention, fetch KV back, release, read stats.
 *
 * A connection is a peer of a protocol session (rdma/session.h). Each call
 * is one session request: it encodes one message, sends it and polls the
 * session until its answer came (bounded). Meanwhile the session answers
 * heartbeats and dispatches other peers' messages to the session's
 * handlers. A per-request failure is returned as the ERROR's status with its
 * text as the error message; a lost or refusing storage node is
 * NA_ERR_PEER. Idle callers call na_sc_poll() (or poll the session) at least
 * every heartbeat period, or the storage node drops them after
 * transport.peer_timeout_ms.
 *
 * Not thread-safe (one thread owns the session and its connections). */
#ifndef NA_STORAGE_CLIENT_H
#define NA_STORAGE_CLIENT_H

#include <stdint.h>

#include "common/wire.h"
#include "rdma/session.h"

typedef struct na_sc na_sc_t;

/* Connect to a storage node at host:port as a peer of ses (borrowed;
 * outlives the connection) and finish the HELLO handshake. Errors as
 * na_xp_connect. */
na_status_t na_sc_connect(na_ses_t *ses, const char *host, int port, na_sc_t **sc_p);
/* Say BYE (best effort) and close. NULL is a no-op. */
void        na_sc_close(na_sc_t *sc);
/* The endpoint (for stats, name) and the session peer. */
na_xp_ep_t *na_sc_ep(na_sc_t *sc);
na_peer_t  *na_sc_peer(na_sc_t *sc);

/* REQ_OPEN; waits for ACK. NA_ERR_NOSPACE (with the node's reason) when the
 * node refuses for lack of room. */
na_status_t na_sc_open(na_sc_t *sc, const na_wire_req_open_t *o);
/* PREFILL_KV of one layer; waits for ACK. kv->k/v in kv->dtype. */
na_status_t na_sc_prefill(na_sc_t *sc, const na_wire_kv_t *kv);
/* DECODE_ATTN of a->n_entries entries (a->entries set); waits for ATTN_OUT.
 * o_out[i] receives entry i's output as f32 ((kv_h1-kv_h0)*q_per_kv*head_dim
 * floats, zero for a failed entry); status_out[i] its status. Returns NA_OK
 * when the batch was answered, even with failed entries (their reasons were
 * logged from the node's ERROR messages). */
na_status_t na_sc_decode(na_sc_t *sc, const na_wire_attn_t *a, float *const *o_out,
                         int32_t *status_out);
/* KV_FETCH; waits for KV_DATA and converts it into k_out/v_out, f32
 * [n_tokens][kv_h1-kv_h0][head_dim] each. */
na_status_t na_sc_fetch(na_sc_t *sc, const na_wire_kv_fetch_t *f, int head_dim,
                        float *k_out, float *v_out);
/* REQ_RELEASE; waits for ACK. */
na_status_t na_sc_release(na_sc_t *sc, uint64_t request_id);
/* STATS_REQ; value of `key` in the answer (NA_ERR_NOT_FOUND if absent). */
na_status_t na_sc_stat(na_sc_t *sc, const char *key, uint64_t *value_p);
/* Serve heartbeats for timeout_ms (0 = what is queued now). NA_ERR_PEER if
 * the storage node went away meanwhile. */
na_status_t na_sc_poll(na_sc_t *sc, int timeout_ms);

/* Encode and send m on the connection (stamps seq/time), answer not waited
 * for (its handler is the session's). */
na_status_t na_sc_send(na_sc_t *sc, na_wire_msg_t *m);

#endif /* NA_STORAGE_CLIENT_H */

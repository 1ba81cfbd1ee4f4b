/* compute-node/storage_client.h — the one client of the storage-node
 * protocol (common/wire.h; server: `nearattn node`): open a request, ship
 * its prompt KV, run decode attention, fetch KV back, release, read stats.
 * The attention service over storage nodes (attn_remote*.c), the KV-fetch
 * service (attn_kvfetch.c), the benches and the node tests all use it.
 *
 * A connection to a storage node is a peer of a protocol session
 * (rdma/session.h: na_ses_connect, na_peer_close). Each call is one session
 * request in one of two forms over one implementation:
 *   - asynchronous (na_sc_*_send): encodes and sends the message and returns
 *     at once; fn(arg) gets the answer from a later poll of the session
 *     (na_peer_request; fn may be NULL). timeout_ms 0 = the session's
 *     reply_timeout_ms, flags NA_SES_*;
 *   - synchronous (the plain names): the same request, then the session is
 *     polled until its answer came (na_peer_call), and the answer is read
 *     into the caller's arrays. timeout_ms 0 = the session's bound.
 * Meanwhile the session answers heartbeats and dispatches other peers'
 * messages. A per-request failure is returned as the ERROR's status with its
 * text as the error message; a lost or refusing storage node is NA_ERR_PEER.
 * Idle callers poll the session (or na_sc_poll) at least every heartbeat
 * period, or the storage node drops them after transport.peer_timeout_ms.
 *
 * ATTN_OUT is checked in one place, na_sc_attn_check, against the
 * DECODE_ATTN part it answers, and read with na_sc_attn_take (an entry as
 * na_sc_decode gives it) or na_sc_attn_rows (its rows at a stride).
 *
 * Not thread-safe (one thread owns the session and its peers). */
#ifndef NA_STORAGE_CLIENT_H
#define NA_STORAGE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/model.h"
#include "common/wire.h"
#include "common/wire_stats.h"
#include "rdma/session.h"

/* The bound on one blocking call's answer that the callers outside the
 * attention service use (kv-fetch, the benches, the node tests). */
#define NA_SC_WAIT_MS  60000

/* ---- REQ_OPEN: answered by ACK (prefix_tokens: prompt tokens the node
 * attached from its prefix cache); NA_ERR_NOSPACE (with the node's reason)
 * when the node refuses for lack of room. */
na_status_t na_sc_open_send(na_peer_t *p, const na_wire_req_open_t *o, int timeout_ms,
                            na_ses_reply_fn fn, uintptr_t arg);
/* *prefix_p (may be NULL): the ACK's prefix_tokens. */
na_status_t na_sc_open(na_peer_t *p, const na_wire_req_open_t *o, int timeout_ms,
                       int *prefix_p);
/* Fill *o as the REQ_OPEN of request `req` (at most max_tokens tokens) for
 * a model of shape mc with its KV in dtype: every layer, KV heads [0,
 * n_kv_heads) (a head partition narrows kv_h0 / kv_h1), no prefix offered. */
void        na_sc_open_msg(na_wire_req_open_t *o, uint64_t req, int max_tokens,
                           const na_model_config_t *mc, na_dtype_t dtype);

/* ---- PREFILL_KV of one layer, kv->k/v in kv->dtype: answered by ACK. more:
 * flagged MORE (the node appends it and answers later; the first part
 * without MORE makes every part durable before its ACK). */
na_status_t na_sc_prefill_send(na_peer_t *p, const na_wire_kv_t *kv, int more, int timeout_ms,
                               na_ses_reply_fn fn, uintptr_t arg);
na_status_t na_sc_prefill(na_peer_t *p, const na_wire_kv_t *kv, int timeout_ms);

/* ---- DECODE_ATTN part a (a->n_entries entries from a->entry_base of
 * a->batch_total; more: MORE, another part follows): answered by ATTN_OUT.
 * An ERROR about one entry is a note (NA_SES_ERR_NOTE): the ATTN_OUT still
 * comes. */
na_status_t na_sc_decode_send(na_peer_t *p, const na_wire_attn_t *a, int more, int timeout_ms,
                              na_ses_reply_fn fn, uintptr_t arg);
/* The synchronous form: o_out[i] receives entry i's output as f32
 * (n_queries x (kv_h1-kv_h0)*q_per_kv*head_dim floats, zero for a failed
 * entry), status_out[i] its status. Returns NA_OK when the part was
 * answered, even with failed entries (their reasons were logged from the
 * node's ERROR messages); NA_ERR_PROTO when the ATTN_OUT does not answer it
 * (na_sc_attn_check). */
na_status_t na_sc_decode(na_peer_t *p, const na_wire_attn_t *a, int timeout_ms,
                         float *const *o_out, int32_t *status_out);
/* The same, a sent as at most `parts` DECODE_ATTN messages of equal size
 * (the last: the rest), MORE on all but the last, back to back: the answers may come in any order,
 * each checked against the part it answers (na_sc_attn_check, and MORE on
 * all but the last part's), and entry i of a lands in o_out[i] /
 * status_out[i]. parts 1 is na_sc_decode; at most NA_SC_DECODE_PARTS_MAX
 * (NA_ERR_INVALID). Returns after every part sent had its answer or the
 * node is gone. */
#define NA_SC_DECODE_PARTS_MAX 32
na_status_t na_sc_decode_parts(na_peer_t *p, const na_wire_attn_t *a, uint32_t parts,
                               int timeout_ms, float *const *o_out, int32_t *status_out);
/* Whether got answers the DECODE_ATTN part `asked`: batch, layer, entry
 * range and shapes, then every entry (request, KV heads, queries, a status
 * that is a na_status_t), all before any is used. NA_OK, or NA_ERR_PROTO
 * with the reason in why[cap] ("answered batch B layer L ...") and not set
 * as the error message. */
na_status_t na_sc_attn_check(const na_wire_attn_t *asked, const na_wire_attn_out_t *got,
                             char *why, size_t cap);
/* Entry k of a checked ATTN_OUT (whose status is 0) as f32: query t's rows
 * ((kv_h1-kv_h0)*q_per_kv*head_dim floats) at dst + t*q_stride. */
void        na_sc_attn_rows(const na_wire_attn_out_t *got, uint32_t k, float *dst,
                            size_t q_stride);
/* Entry k of a checked ATTN_OUT as na_sc_decode gives it: returns its
 * status; dst gets its output as f32, one query's rows after another's
 * (n_queries x (kv_h1-kv_h0)*q_per_kv*head_dim floats), zero for a failed
 * entry. */
int32_t     na_sc_attn_take(const na_wire_attn_out_t *got, uint32_t k, float *dst);

/* ---- KV_FETCH: answered by KV_DATA, which must hold the rows asked for
 * (positions, heads, head_dim, f->dtype). The synchronous form writes them,
 * [n_tokens][kv_h1-kv_h0][head_dim] each, into k_out/v_out in out_dtype:
 * f->dtype as sent, or NA_DTYPE_F32 converted. */
na_status_t na_sc_fetch_send(na_peer_t *p, const na_wire_kv_fetch_t *f, int timeout_ms,
                             na_ses_reply_fn fn, uintptr_t arg);
na_status_t na_sc_fetch(na_peer_t *p, const na_wire_kv_fetch_t *f, int head_dim,
                        int timeout_ms, void *k_out, void *v_out, na_dtype_t out_dtype);

/* ---- REQ_RELEASE (status: why it ends, 0 = done): answered by ACK. */
na_status_t na_sc_release_send(na_peer_t *p, uint64_t request_id, int status, int timeout_ms,
                               na_ses_reply_fn fn, uintptr_t arg);
na_status_t na_sc_release(na_peer_t *p, uint64_t request_id, int status, int timeout_ms);

/* ---- STATS_REQ: answered by STATS. flags: NA_SES_NO_LOSS keeps the peer
 * when no answer comes in time (NA_ERR_TIMEOUT). The synchronous form reads
 * the answer into *v (common/wire_stats.h). */
na_status_t na_sc_stats_send(na_peer_t *p, unsigned flags, int timeout_ms, na_ses_reply_fn fn,
                             uintptr_t arg);
na_status_t na_sc_stats(na_peer_t *p, unsigned flags, int timeout_ms, na_stats_view_t *v);

/* ---- HEARTBEAT, answered by HEARTBEAT (a ping; NA_SES_NO_LOSS). */
na_status_t na_sc_ping(na_peer_t *p, int timeout_ms);

/* Serve heartbeats for timeout_ms (0 = what is queued now). NA_ERR_PEER if
 * the storage node went away meanwhile. */
na_status_t na_sc_poll(na_peer_t *p, int timeout_ms);

#endif /* NA_STORAGE_CLIENT_H */

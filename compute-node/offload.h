/* compute-node/offload.h — offloaded generation: the compute node runs the
 * model slices, attention happens where each request's KV lives (an
 * attention service, compute-node/attn_service.h), and several batches are
 * kept in flight so compute and attention overlap (Lamina §5.1).
 *
 * Requests (compute-node/generate.h) are the same objects the monolithic
 * na_generate runs, and under greedy sampling give the same tokens:
 *
 *   admission  between steps of a batch, waiting requests (submitted at any
 *              time, see na_off_submit) join it (at most
 *              max_batch per batch, the waiting ones spread over the
 *              batches) and is opened on the service;
 *   prefill    chunked, as a state of the request (Sarathi-Serve): each
 *              step of its batch takes the decode rows of the members plus
 *              up to prefill_chunk prompt tokens of the members in prefill;
 *              a chunk's q/k/v rows go to the request's storage nodes as one
 *              multi-query entry (attn_service.h) that appends its K/V and
 *              answers each query causally with the decode attention code,
 *              so compute-node memory is O(chunk), never O(prompt), and the
 *              running streams keep decoding while a long prompt comes in;
 *              after the last chunk the first token is sampled. X-cache
 *              requests and rotational pipelining prefill here instead (local
 *              causal attention, the KV shipped in bulk or X kept);
 *   decode     per layer the batch sends q, k_new, v_new of every member and
 *              resumes when all outputs are back; a request leaves at a stop
 *              token, after max_new tokens or when the context is full, and
 *              its KV is released at once (continuous batching);
 *   pipelining fixed staggered (compute-node/sched.c): while batch j waits
 *              for attention, the next slice of another batch runs; time with
 *              nothing runnable is counted as idle; rotational (opts.rep):
 *              batch j's slice k runs on compute replica (j + k) mod R, its
 *              context migrating over the compute link (compute-node/replica.h);
 *   failures   a request whose storage node is lost (NA_ERR_PEER: gone,
 *              silent, wrong shapes) is re-placed: opened on another node,
 *              its prompt and outputs prefilled again in chunks, and it goes
 *              on from where it was (once; then, or when no node
 *              takes it, it fails). Any other failed entry (refused shape,
 *              I/O) fails its request with the reason (on_error); the
 *              others of the batch go on. A request the service has no room
 *              for waits until another leaves (queue), or fails if none is
 *              active. */
#ifndef NA_OFFLOAD_H
#define NA_OFFLOAD_H

#include "common/status.h"
#include "compute-node/attn_service.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/offload_types.h"
#include "compute-node/xcache.h"

/* ---- the engine object ----------------------------------------------------
 * A long-lived offload engine over one model engine e and one attention
 * service svc (both borrowed; they outlive it):
 *
 *   create    validate the options, allocate the batches; nothing runs yet
 *   submit    queue a request (state WAITING); it joins a batch at that
 *             batch's next step boundary, also while others are decoding
 *   cancel    mark a request; it ends at its batch's next step boundary (a
 *             waiting one at the next progress call): its KV is released on
 *             the storage nodes (and replicas), on_error gets NA_ERR_CANCELED
 *             and on_done follows
 *   progress  run steps until no request is left or the timeout passed
 *   destroy   wait (bounded) for attention in flight, release every request
 *             still held (no callbacks; they end as DONE, finish NONE) and
 *             free everything
 *
 * Thread model: single-threaded. Every call, and every callback, runs on the
 * caller's thread, inside progress (callbacks never run inside submit or
 * cancel). A front end that owns an event loop (the HTTP server) calls
 * submit and cancel from its loop between progress calls with a small
 * timeout; callbacks may call submit and cancel too. A request must stay
 * valid until its on_done returned (it may be destroyed inside on_done) or
 * the engine is destroyed. */
/* (na_off_t and the callbacks of one request, na_off_cb_t: offload_types.h) */

/* Create an engine (the options are copied; stop_ids and rep are borrowed).
 * NA_ERR_RANGE / NA_ERR_INVALID for options or a service of another shape,
 * NA_ERR_UNSUPPORTED for X-cache on a GQA model or with rotational
 * pipelining, NA_ERR_NOMEM. */
na_status_t na_off_create(na_engine_t *e, na_asvc_t *svc, const na_off_opts_t *opts,
                          na_off_t **g_p);
/* Queue request r (state WAITING, not held by this or another engine) with
 * callbacks cb (NULL: the options' on_token / on_done / on_error / user).
 * NA_ERR_INVALID for a request that is not waiting; the engine's fatal error
 * when it ended; NA_ERR_NOMEM. */
na_status_t na_off_submit(na_off_t *g, na_request_t *r, const na_off_cb_t *cb);
/* Ask request r to end (see above). NA_ERR_NOT_FOUND when the engine does
 * not hold r (never submitted, or ended already). */
na_status_t na_off_cancel(na_off_t *g, na_request_t *r);
/* Run decode steps, admissions and cancellations until no request is held
 * or timeout_ms passed (0: one pass, waiting at most about 1 ms for
 * attention; < 0: until no request is held). Returns NA_OK, or an error of the compute node itself
 * (out of memory, backend, a broken replica link); after such an error the
 * engine only accepts destroy (every later call returns the same error).
 * (Defined by the scheduler, compute-node/sched.c: it is its step loop.) */
na_status_t na_off_progress(na_off_t *g, int timeout_ms);
/* Requests held: submitted and not ended. */
int         na_off_pending(const na_off_t *g);
/* Counters since create (wall_s: since create; svc: the service's now). */
void        na_off_stats(na_off_t *g, na_off_stats_t *out);
/* See above. NULL is a no-op. */
void        na_off_destroy(na_off_t *g);

/* Run reqs[0..n) (state WAITING) to completion against service svc: an
 * engine, every request submitted, progress until none is left. Returns
 * NA_OK when every request ended (finished or failed with a reason through
 * on_error); an error of the compute node itself (out of memory, backend)
 * otherwise. NA_ERR_UNSUPPORTED for X-cache on a GQA model. stats may be
 * NULL. */
na_status_t na_offload_generate(na_engine_t *e, na_asvc_t *svc, na_request_t **reqs, int n,
                                const na_off_opts_t *opts, na_off_stats_t *stats);

#endif /* NA_OFFLOAD_H */

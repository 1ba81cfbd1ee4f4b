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

#define NA_OFF_MAX_BATCHES 8
/* Prompt tokens one batch step takes when na_off_opts_t.prefill_chunk <= 0
 * (the layout's parallel.prefill_chunk default; docs/offload.md says how it
 * was chosen). */
#define NA_OFF_DEFAULT_PREFILL_CHUNK 256
#define NA_OFF_MAX_PREFILL_CHUNK     65536   /* the wire's queries per entry */
#define NA_OFF_PREFIX_NODES 16

struct na_rep;   /* compute-node/replica.h */

typedef void (*na_off_error_fn)(void *user, const na_request_t *r, na_status_t st,
                                const char *reason);

typedef struct {
    int              max_batch;          /* requests per batch (<= 0: 64) */
    int              batches_in_flight;  /* 1 .. NA_OFF_MAX_BATCHES */
    int              prefill_chunk;      /* prompt tokens per batch step (the step's
                                            budget beside its decode rows); <= 0:
                                            NA_OFF_DEFAULT_PREFILL_CHUNK */
    const int       *stop_ids;           /* [n_stop] tokens that end a request */
    int              n_stop;
    /* X-cache (INF2 §4.3): keep the layer inputs of a share of the requests
     * here and regenerate their K,V each step (MHA models only) */
    int              xcache;             /* 0 = off */
    double           xcache_share;       /* (0, 1] fraction of requests */
    long             xcache_host_mb;     /* budget for X (MiB) */
    na_gen_token_fn  on_token;           /* may be NULL */
    na_gen_done_fn   on_done;            /* may be NULL (also called after on_error) */
    na_off_error_fn  on_error;           /* may be NULL */
    int              no_recover;         /* 1: a request whose storage node is lost
                                            fails instead of being re-prefilled */
    int              prefix_reuse;       /* 1: offer each prompt to the storage nodes'
                                            prefix caches (kv.prefix_reuse;
                                            docs/prefix-reuse.md) */
    /* rotational pipelining (compute-node/replica.h): the link to compute
     * replicas 1..R-1, or NULL for the fixed schedule on this node alone.
     * Batch j's slice k runs on replica (j + k) mod R; X-cache and the
     * re-placement of requests of a lost storage node are not available. */
    struct na_rep   *rep;
    void            *user;
} na_off_opts_t;

typedef struct {
    na_gen_stats_t   gen;                /* tokens and steps, as monolithic */
    int              prefill_chunk;      /* the prompt tokens a step took (the option) */
    long             failed;             /* requests ended with an error */
    long             cancelled;          /* requests ended by na_off_cancel */
    long             recovered;          /* requests re-prefilled after a lost node */
    long             reprefill_tokens;   /* tokens they prefilled again (prompt and
                                            outputs so far; not in gen.prompt_tokens) */
    long             xcache_reqs;        /* requests served from the X-cache */
    size_t           xcache_bytes_peak;
    double           wall_s;             /* the whole call */
    double           compute_s;          /* model slices + sampling (decode) */
    double           prefill_s;          /* local prefill compute */
    double           ship_s;             /* shipping prompt KV to owners */
    double           xcache_s;           /* regenerating K,V + local attention */
    double           idle_s;             /* compute node waiting, nothing runnable */
    double           submit_s;           /* encoding + sending attention requests */
    double           attn_rt_s;          /* sum over (batch, layer) of submit -> done */
    long             attn_calls;         /* (batch, layer) attention round trips */
    long             slices;             /* model slices run in decode (here) */
    long             ctx_sent;           /* rotational: batch contexts sent to replicas */
    long             ctx_recv;           /* rotational: batch contexts received back */
    double           ctx_rt_s;           /* rotational: sum of send -> back (the replica's
                                            slice + its attention + two hops) */
    long             prefix_hit_tokens;  /* prompt tokens whose KV a storage node
                                            already held (not in gen.prompt_tokens,
                                            which counts the tokens prefilled here) */
    long             prefix_hit_reqs;    /* requests with a prefix hit (their chunked
                                            prefill starts after it) */
    long             prefix_waits;       /* requests whose admission was put off until
                                            one computing a KV block they share had its
                                            prompt in (na_off_prefix_wait) */
    na_asvc_stats_t  svc;                /* the service's counters at the end */
    /* filled by front ends that print them (cli/run_offload.c): each storage
     * node's prefix tokens hit / computed (na_asvc_node_stats) */
    na_asvc_node_stats_t prefix_nodes[NA_OFF_PREFIX_NODES];
    int              n_prefix_nodes;
} na_off_stats_t;

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
typedef struct na_off na_off_t;

/* Callbacks of one request (any may be NULL). */
typedef struct {
    na_gen_token_fn  on_token;
    na_gen_done_fn   on_done;            /* also after on_error */
    na_off_error_fn  on_error;           /* failed, or NA_ERR_CANCELED */
    void            *user;
} na_off_cb_t;

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
 * engine only accepts destroy (every later call returns the same error). */
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

/* ---- X-cache (compute-node/xcache.c) ---------------------------------------
 * X of one request: per layer the normed layer input rows xb (f16), from
 * which K = RoPE(X·Wk) and V = X·Wv are regenerated every step. */
typedef struct na_xcache na_xcache_t;

/* NA_OK when the model can use the X-cache (MHA: X per token and layer is
 * dim values, K+V is 2·kv_dim); NA_ERR_UNSUPPORTED with the sizes when X
 * would not be smaller than K+V. */
na_status_t na_xcache_check(const na_model_config_t *mc);
/* Bytes of X for max_tokens tokens. */
size_t      na_xcache_bytes(const na_model_config_t *mc, int max_tokens);
na_status_t na_xcache_create(const na_model_config_t *mc, int max_tokens, na_xcache_t **x_p);
void        na_xcache_destroy(na_xcache_t *x);
/* Store rows xb (n, dim) at positions pos0.. of layer. */
void        na_xcache_put(na_xcache_t *x, int layer, int pos0, int n, const float *xb);
/* Attention of one query row q at position pos over layer's X[0..pos]
 * (regenerated K,V; the row at pos must be stored): out (q_dim). Uses the
 * engine's kernels; scratch is grown as needed. NA_ERR_NOMEM. */
na_status_t na_xcache_attend(na_xcache_t *x, na_engine_t *e, int layer, int pos,
                             const float *q, float *out);

#endif /* NA_OFFLOAD_H */

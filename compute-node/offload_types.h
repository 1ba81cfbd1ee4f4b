/* compute-node/offload_types.h — the offload engine's public types: its
 * options, counters and request callbacks (the API that uses them, and
 * what they mean: compute-node/offload.h). Apart so that the engine's
 * layers below its API (compute-node/offload_req.h, sched.h) take the
 * types without the API. */
#ifndef NA_OFFLOAD_TYPES_H
#define NA_OFFLOAD_TYPES_H

#include "common/status.h"
#include "compute-node/attn_service.h"
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
    int              adaptive_batches;   /* 1: batches_in_flight is the most; requests
                                            are spread over them only where measured
                                            faster per token (compute-node/
                                            batch_split.h); 0: always over all */
    int              prefill_chunk;      /* prompt tokens per batch step (the step's
                                            budget beside its decode rows); <= 0:
                                            NA_OFF_DEFAULT_PREFILL_CHUNK */
    int              prefill_weighted;   /* 1: a prompt token costs more the later it
                                            comes (its attention), prefill_chunk is the
                                            step's cost budget in position-0 tokens and
                                            its most tokens (compute-node/sched.c) */
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
    int              prefill_weighted;   /* the option: the budget weighed by position */
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
    int              adaptive_batches;   /* the option */
    long             split_steps;        /* batch steps run with the requests spread over
                                            every batch in flight */
    long             merged_steps;       /* ... over as few batches as max_batch allows */
    long             split_switches;     /* merged -> split and back (batch_split.h) */
    long             split_trials;       /* trials of split, and those it won */
    long             split_trials_won;
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

/* The engine object (compute-node/offload.h; its state: offload_req.h). */
typedef struct na_off na_off_t;

/* Callbacks of one request (any may be NULL). */
typedef struct {
    na_gen_token_fn  on_token;
    na_gen_done_fn   on_done;            /* also after on_error */
    na_off_error_fn  on_error;           /* failed, or NA_ERR_CANCELED */
    void            *user;
} na_off_cb_t;

#endif /* NA_OFFLOAD_TYPES_H */

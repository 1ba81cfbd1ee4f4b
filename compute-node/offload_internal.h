/* compute-node/offload_internal.h — private state of the offload engine
 * (compute-node/offload.c: the object, requests, prefill, sampling; sched.c:
 * batches in flight and the fixed / rotational schedule). */
#ifndef NA_OFFLOAD_INTERNAL_H
#define NA_OFFLOAD_INTERNAL_H

#include "common/clock.h"
#include "common/wire.h"
#include "compute-node/offload.h"

/* A request as the offload engine sees it (owned by the engine from submit
 * until it ended and left its batch). */
typedef struct na_off_req {
    na_request_t *r;          /* the caller's; not touched once done */
    na_off_cb_t   cb;         /* its callbacks */
    uint64_t      wid;        /* id on the service */
    long          index;      /* submission order (X-cache share) */
    int           batch;      /* batch it belongs to, -1 = waiting */
    int           opened;     /* open on the service */
    int           done;       /* ended (finished, failed or cancelled) */
    int           cancel;     /* cancel asked: ends at its batch's next step boundary */
    int           recover;    /* its storage node was lost this step: re-prefill */
    int           recoveries; /* re-prefills so far */
    char          lost[NA_ASVC_REASON_MAX + 64]; /* why it is being re-placed */
    na_xcache_t  *xc;         /* X-cache instead of remote KV, or NULL */
    /* chunked prefill on the storage nodes (state NA_REQ_PREFILL, pf_target
     * > 0): tokens 0..pf_target-1 go out pf_done at a time, a chunk a step */
    int           pf_done;    /* tokens of the prefill fed so far */
    int           pf_target;  /* tokens to feed (the prompt, or for a re-placement
                                 the prompt and outputs in its KV); 0 = none due */
    int           pf_first;   /* 1: a new request (sample its first token at the end);
                                 0: a re-placement (goes on decoding) */
    int           pf_seen;    /* prompt tokens counted in gen.prompt_tokens, or
                                 held by its storage node already (a prefix hit) */
    int           pfx;        /* opened offering its prompt (prefix reuse): its
                                 owner keeps the prompt's whole blocks once the
                                 prefill is in (docs/prefix-reuse.md) */
    int           pfx_waited; /* was put off for another's prompt (counted once) */
    int           pfx_hit;    /* prompt tokens its owner attached (its prefill's start) */
    struct na_off_req *next_wait;           /* waiting queue (FIFO) */
    struct na_off_req *prev_all, *next_all; /* every request the engine holds */
} na_off_req_t;

typedef enum {
    NA_OFF_B_IDLE  = 0,       /* between steps */
    NA_OFF_B_WAIT  = 1,       /* attention of `layer` in flight */
    NA_OFF_B_READY = 2,       /* attention of `layer` done: post_attn may run */
    NA_OFF_B_AWAY  = 3,       /* rotational: the context is on another replica */
} na_off_bstate_t;

/* One batch in flight: its members, its activations and its step. */
typedef struct {
    int              id;
    na_off_bstate_t  state;
    int              layer;
    na_acts_t       *acts;
    na_off_req_t   **mem;     /* [max_batch] members */
    int              n_mem;
    /* the current decode step (one row per member at step start) */
    int              n_rows;
    /* rows: one per decode member, plus up to prefill_chunk prompt rows of
     * members in prefill (max_rows = max_batch + prefill_chunk) */
    na_off_req_t   **row_req; /* [max_rows] */
    int             *tokens;  /* [max_rows] */
    int             *pos;     /* [max_rows] */
    int              n_seg;   /* segments: one per member with rows this step */
    int              pf_rows; /* of the rows, prompt tokens (chunked prefill) */
    na_step_seg_t   *seg;     /* [max_batch] */
    na_off_req_t   **seg_req; /* [max_batch] */
    na_asvc_entry_t *ent;     /* [max_batch] one per segment sent */
    int             *ent_seg; /* [max_batch] segment of each entry */
    int              n_ent;
    double           t_submit;
    uint64_t         step;    /* decode steps started */
    na_wire_ctx_row_t *crow;  /* [max_rows] rotational: rows of a migrating context */
} na_off_batch_t;

struct na_off {
    na_engine_t          *e;
    na_asvc_t            *svc;
    na_off_opts_t         opts;       /* a copy (stop_ids borrowed) */
    const na_off_opts_t  *o;          /* = &opts */
    na_off_stats_t        stats;
    na_off_stats_t       *st;         /* = &stats */
    double                t_create;
    na_status_t           fatal;      /* a compute-node error ended the engine */
    int                   max_batch;
    int                   prefill_chunk; /* prompt tokens a batch step takes (budget) */
    int                   n_batches;
    na_off_batch_t        b[NA_OFF_MAX_BATCHES];
    na_off_req_t         *all;        /* every request held (list) */
    na_off_req_t         *wait_head, *wait_tail;  /* submitted, not admitted (FIFO) */
    int                   n_wait;
    long                  n_submitted;
    int                   n_cancel;   /* cancels asked and not yet carried out */
    int                   n_live;     /* admitted, not ended */
    long                  ended;      /* requests that left (admission retries after one) */
    long                  blocked_at; /* `ended` when the service last said no room; -1 */
    size_t                xc_bytes;   /* X held now */
    long                  xc_budget;  /* bytes */
    na_acts_t            *pacts;      /* prefill activations */
    na_prob_index_t      *scratch;    /* [vocab] nucleus sampling */
    int                  *ptok, *ppos;/* [max_rows] prefill step */
    struct na_rep        *rep;        /* rotational: link to replicas 1..n_rep-1, or NULL */
    int                   n_rep;      /* replicas R (1 = fixed schedule) */
    uint8_t               pfx_fp[16]; /* the model's fingerprint (compute-node/prefix.h) */
};

/* prefix.c: open request q (its wid set) on the service, offering its
 * prompt when prefix reuse applies (o->prefix_reuse, a service that keeps
 * prefixes, a request prefilled in chunks on the storage nodes: never
 * X-cache or rotational, whose prompts are prefilled here whole). On a hit
 * of *hit_p tokens its owner holds their KV already (shared blocks): the
 * chunked prefill starts at position *hit_p, nothing is fetched back. */
na_status_t na_off_prefix_open(na_off_t *g, na_off_req_t *q, int max_tok, int *hit_p);
/* 1 when waiting request q should stay waiting: a request in its chunked
 * prefill, opened offering its prompt, is computing a KV block q shares
 * (the whole block after the prefix it attached itself: both prompts agree
 * up to its end), so once that prompt is in q's owner can attach the block
 * instead of q computing it again alongside (requests submitted together).
 * A request whose shared part is all attached already holds no one up. */
int         na_off_prefix_wait(const na_off_t *g, const na_off_req_t *q);

/* offload.c */
/* Admit waiting requests into batch b (at a step boundary): open, prefill,
 * ship, first token. Only compute-node errors are returned. */
na_status_t na_off_admit(na_off_t *g, na_off_batch_t *b);
/* Sample request q's next token from logits; ends it when due. */
void        na_off_take_token(na_off_t *g, na_off_req_t *q, float *logits);
/* End request q with an error (reason), releasing what it holds;
 * NA_ERR_CANCELED counts as a cancellation, not a failure. */
void        na_off_fail(na_off_t *g, na_off_req_t *q, na_status_t st, const char *reason);
/* End request q as cancelled (on_error NA_ERR_CANCELED, on_done). */
void        na_off_cancel_now(na_off_t *g, na_off_req_t *q);
/* End (and free) the waiting requests whose cancel was asked. */
void        na_off_cancel_waiting(na_off_t *g);
/* Re-place request q (flagged `recover`) after its storage node was lost:
 * release and open elsewhere; q goes back to chunked prefill of its prompt
 * and the outputs in its KV (from token 0), then on decoding. Fails q (with
 * the reason) if no node takes it; returns only compute-node errors. */
na_status_t na_off_recover(na_off_t *g, na_off_req_t *q);
/* Whether q prefills in chunks on the storage nodes (else here, at admission:
 * X-cache requests and rotational pipelining). */
int         na_off_chunked(const na_off_t *g, const na_off_req_t *q);
/* n more prefill tokens of q were fed (a step's segment); logits: the
 * segment's last row. At the end of its prefill q samples its first token
 * (a new request) or goes on decoding (a re-placement). */
void        na_off_chunk_done(na_off_t *g, na_off_req_t *q, int n, float *logits);
/* The token q feeds at position i: the prompt, then its outputs. */
int         na_off_token_at(const na_request_t *r, int i);
/* Drop ended members from batch b (and free them). */
void        na_off_compact(na_off_t *g, na_off_batch_t *b);
/* Unlink an ended request that is in no batch and free it. */
void        na_off_forget(na_off_t *g, na_off_req_t *q);

/* The replica that runs slice k of batch b: (b + k) mod R (0 = this one). */
static inline int na_off_owner(const na_off_t *g, const na_off_batch_t *b, int k)
{
    return (b->id + k) % g->n_rep;
}

/* sched.c */
/* Run the batches until every request ended or deadline (na_now_s()
 * seconds; < 0: none) passed; waits never go past the deadline. Returns
 * compute-node errors only. */
na_status_t na_off_sched_run(na_off_t *g, double deadline);
/* Wait (bounded) until no batch has attention or a context out, so that
 * their buffers may be freed. 0 when drained, -1 when it gave up. */
int         na_off_sched_drain(na_off_t *g);

#endif /* NA_OFFLOAD_INTERNAL_H */

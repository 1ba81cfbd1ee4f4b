/* compute-node/offload_req.h — the offload engine's state and the life of
 * its requests (compute-node/offload_req.c), the bottom of its three layers:
 *
 *   offload.c      the engine's API (offload.h): create, submit, cancel,
 *                  progress, destroy
 *   sched.c        batches in flight and the step loop (sched.h): it takes
 *                  requests off the waiting queue into batches, lays out and
 *                  runs their steps, and calls down here for each request
 *   offload_req.c  a request from submit to its end: the waiting queue,
 *                  admission (open on the service, prefix reuse, local
 *                  prefill and shipping), the chunked prefill's bookkeeping,
 *                  sampling, ending, failing, cancelling, re-placement
 *
 * Calls go down only: nothing here calls the scheduler or the API. */
#ifndef NA_OFFLOAD_REQ_H
#define NA_OFFLOAD_REQ_H

#include <stdint.h>

#include "common/clock.h"
#include "common/wire.h"
#include "compute-node/attn_service.h"
#include "compute-node/batch_split.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "compute-node/offload_types.h"
#include "compute-node/xcache.h"

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

struct na_off_batch;   /* compute-node/sched.h: the scheduler's */

struct na_off {
    na_engine_t          *e;
    na_asvc_t            *svc;
    na_off_opts_t         opts;       /* a copy (stop_ids borrowed) */
    const na_off_opts_t  *o;          /* = &opts */
    na_off_stats_t        stats;
    na_off_stats_t       *st;         /* = &stats */
    double                t_create;
    na_status_t           fatal;      /* a compute-node error ended the engine */
    /* the scheduler's (sched.c): its batches and their parameters */
    int                   max_batch;
    int                   prefill_chunk; /* prompt tokens a batch step takes (budget) */
    double                pf_peq;     /* weighted budget: P_eq (sched.c); 0 = tokens */
    double                tick_at;    /* sched.c: the session's last turn in a slice */
    int                   n_batches;
    struct na_off_batch  *b;          /* [n_batches] */
    na_bsplit_t           split;      /* how many of them the requests use */
    int                   rr;         /* the idle batch a step starts on first */
    long                  blocked_at; /* `ended` when the service last said no room; -1 */
    /* the requests (offload_req.c) */
    na_off_req_t         *all;        /* every request held (list) */
    na_off_req_t         *wait_head, *wait_tail;  /* submitted, not admitted (FIFO) */
    int                   n_wait;
    long                  n_submitted;
    int                   n_cancel;   /* cancels asked and not yet carried out */
    int                   n_live;     /* admitted, not ended */
    long                  ended;      /* requests that left (admission retries after one) */
    size_t                xc_bytes;   /* X held now */
    long                  xc_budget;  /* bytes */
    na_acts_t            *pacts;      /* prefill activations */
    na_prob_index_t      *scratch;    /* [vocab] nucleus sampling */
    int                  *ptok, *ppos;/* [max_rows] prefill step */
    struct na_rep        *rep;        /* rotational: link to replicas 1..n_rep-1, or NULL */
    int                   n_rep;      /* replicas R (1 = fixed schedule) */
    uint8_t               pfx_fp[16]; /* the model's fingerprint (compute-node/prefix.h) */
};

/* The replica that runs slice k (and sends the attention of layer k) of
 * batch `batch`: (batch + k) mod R (0 = this one). */
static inline int na_off_owner(const na_off_t *g, int batch, int k)
{
    return (batch + k) % g->n_rep;
}

/* ---- the waiting queue --------------------------------------------------- */
/* Hold request r (state WAITING) with callbacks cb (NULL: the options') and
 * queue it last. NA_ERR_NOMEM. */
na_status_t   na_off_req_new(na_off_t *g, na_request_t *r, const na_off_cb_t *cb);
/* Take the first waiting request that need not wait for another's prompt
 * (prefix reuse: one computing a KV block it shares) off the queue; NULL
 * when every one must. */
na_off_req_t *na_off_pop_wait(na_off_t *g);
/* Put q back at the front of the queue (it stays first). */
void          na_off_wait_front(na_off_t *g, na_off_req_t *q);
/* End (and free) the waiting requests whose cancel was asked. */
void          na_off_cancel_waiting(na_off_t *g);

/* ---- admission and prefill ----------------------------------------------- */
/* Admit request q into batch `batch`: open on the service (unless X-cache;
 * offering its prompt where prefix reuse applies), then either set up its
 * chunked prefill (its chunks run in the batch's steps) or prefill here,
 * ship, and sample the first token. q->batch is set once q joined the
 * batch (the caller adds it to the batch's members). Returns NA_ERR_NOSPACE
 * (q untouched, stays waiting) when the service has no room and other
 * requests are live; a compute-node error; or NA_OK (q admitted, finished
 * or failed). */
na_status_t   na_off_admit_one(na_off_t *g, na_off_req_t *q, int batch);
/* The token q feeds at position i: the prompt, then its outputs. */
int           na_off_token_at(const na_request_t *r, int i);
/* n more prefill tokens of q were fed (a step's segment); logits: the
 * segment's last row. At the end of its prefill q samples its first token
 * (a new request) or goes on decoding (a re-placement). */
void          na_off_chunk_done(na_off_t *g, na_off_req_t *q, int n, float *logits);

/* ---- sampling and ending ------------------------------------------------- */
/* Sample request q's next token from logits; ends it when due. */
void          na_off_take_token(na_off_t *g, na_off_req_t *q, float *logits);
/* End request q with an error (reason), releasing what it holds;
 * NA_ERR_CANCELED counts as a cancellation, not a failure. */
void          na_off_fail(na_off_t *g, na_off_req_t *q, na_status_t st, const char *reason);
/* End request q as cancelled (on_error NA_ERR_CANCELED, on_done). */
void          na_off_cancel_now(na_off_t *g, na_off_req_t *q);
/* Request q's storage work failed with st (why): when st says its node was
 * lost (NA_ERR_PEER) and q may be re-placed (once, not with no_recover or
 * rotational pipelining), flag it (`recover`, re-placed at the end of the
 * step by na_off_recover) and return 1; else fail q and return 0. */
int           na_off_lost(na_off_t *g, na_off_req_t *q, na_status_t st, const char *why);
/* Re-place request q (flagged `recover`) after its storage node was lost:
 * release and open elsewhere; q goes back to chunked prefill of its prompt
 * and the outputs in its KV (from token 0, or the end of a prefix its new
 * node holds), then on decoding. Fails q (with the reason) if no node takes
 * it; returns only compute-node errors. */
na_status_t   na_off_recover(na_off_t *g, na_off_req_t *q);
/* Unlink an ended request that is in no batch and free it. */
void          na_off_forget(na_off_t *g, na_off_req_t *q);
/* Destroy: release what q holds without callbacks (a request not ended ends
 * as DONE, finish NONE), unlink and free it. */
void          na_off_discard(na_off_t *g, na_off_req_t *q);

#endif /* NA_OFFLOAD_REQ_H */

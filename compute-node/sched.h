/* compute-node/sched.h — the offload engine's scheduler (compute-node/
 * sched.c): batches in flight and the step loop, the middle of the
 * engine's three layers (compute-node/offload_req.h). It is called by the
 * API (offload.c) and calls down into the request lifecycle
 * (offload_req.c), never back up. The API's na_off_progress (offload.h) is
 * defined in sched.c: it is the step loop itself, not a layer above it. */
#ifndef NA_SCHED_H
#define NA_SCHED_H

#include "compute-node/offload_req.h"

typedef enum {
    NA_OFF_B_IDLE  = 0,       /* between steps */
    NA_OFF_B_WAIT  = 1,       /* attention of `layer` in flight */
    NA_OFF_B_READY = 2,       /* attention of `layer` done: post_attn may run */
    NA_OFF_B_AWAY  = 3,       /* rotational: the context is on another replica */
} na_off_bstate_t;

/* One batch in flight: its members, its activations and its step. */
typedef struct na_off_batch {
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
    /* the step's measurement for the batch split (batch_split.h) */
    double           c_s;     /* compute charged to the step */
    double           a_s;     /* its attention round trips, summed */
    int              alone;   /* no other batch had work when it started */
    int              measure; /* a step ran: feed it at the next start */
    double           t_end;   /* when it ended */
    uint64_t         step;    /* decode steps started */
    na_wire_ctx_row_t *crow;  /* [max_rows] rotational: rows of a migrating context */
} na_off_batch_t;

/* Allocate g's n_batches batches of max_batch members (g->b). NA_ERR_NOMEM
 * (what was allocated is freed by na_off_sched_free). */
na_status_t na_off_sched_init(na_off_t *g);
/* Free the batches (NULL g->b is a no-op); not their members. */
void        na_off_sched_free(na_off_t *g);
/* Wait (bounded) until no batch has attention or a context out, so that
 * their buffers may be freed. 0 when drained, -1 when it gave up. */
int         na_off_sched_drain(na_off_t *g);

#endif /* NA_SCHED_H */

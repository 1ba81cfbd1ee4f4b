/* compute-node/sched.c — batches in flight and the fixed staggered schedule
 * (Lamina §5.1.2) of the offload generator (sched.h): the step loop, which
 * fills batches from the waiting queue and runs their steps, calling down
 * into the request lifecycle (compute-node/offload_req.c) for admission,
 * prefill bookkeeping, sampling and ending.
 *
 * A step of a batch is n_layers + 1 model slices separated by attention.
 * Its rows are one token of every decoding member plus up to prefill_chunk
 * prompt tokens of its members in prefill (the step's token budget,
 * Sarathi-Serve's chunked prefill): a prompt chunk is one segment of the
 * step, its attention one multi-query entry that the storage nodes answer
 * causally, so a long prompt comes in a chunk per step while the batch's
 * streams keep decoding. Each batch moves through
 *
 *   IDLE --start: admit, embed, pre_attn(0), submit(0)--> WAIT
 *   WAIT --its attention came back (poll)--------------> READY
 *   READY --post_attn(l), pre_attn(l+1), submit(l+1)---> WAIT
 *   READY --post_attn(L-1), final, sample--------------> IDLE
 *
 * One compute node runs all batches on one thread. The loop runs whatever
 * slice can run — a READY batch first (oldest attention first), else an IDLE
 * batch that has work — and blocks on the service only when every batch is
 * waiting for attention; that wait is the compute node's idle time. With n
 * batches in flight the attention of one batch thus overlaps the slices of
 * the others. X-cache members of a batch get their attention here, after the
 * batch's remote entries were sent, so it overlaps with the storage nodes'
 * attention of the same batch (INF2 §4.3 cooperative X-cache). With
 * parallel.adaptive_batches the requests use all batches only where that
 * was measured faster per token (compute-node/batch_split.h), else as few
 * as max_batch allows; members move between batches at their step
 * boundaries (na_sched_rebalance).
 *
 * Rotational (R compute replicas, compute-node/replica.h): slice k of batch
 * j runs on replica (j + k) mod R. When the next slice of a batch belongs to
 * replica w != 0 its context (rows, x, the attention output) is sent there
 * (AWAY); it comes back after that slice's attention with the next slice
 * number and the batch goes on here (or is forwarded to the next owner).
 * Slice L's final norm, logits and sampling always run here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/faults.h"
#include "common/log.h"
#include "compute-node/offload.h"
#include "compute-node/replica.h"
#include "compute-node/sched.h"

#define NA_SCHED_POLL_MS 1000   /* one blocking poll; the service bounds failures */
#define NA_SCHED_DRAIN_S 30.0   /* destroy: longest wait for attention in flight */
#define NA_SCHED_TICK_S  0.02   /* during a slice: the session's turn at most this often */

/* ---- the step's prompt budget ------------------------------------------ */

/* Sarathi-Serve's token budget counts a prompt token as one, but a token's
 * cost grows with its position: its projections and MLP cost the same at
 * every position, its attention (on the storage node) reads every row
 * before it. So a fixed chunk of prompt tokens makes a late chunk's step
 * several times an early one's (a chunk at position 3,800 reads 3,800 KV
 * rows a query), and the streams' inter-token gap with it. In the weighted
 * budget (parallel.prefill_weighted) a prompt token at position p costs
 *
 *   w(p) = 1 + p / P_eq
 *
 * position-0 tokens, where P_eq is the context at which one token's
 * attention costs as many FLOPs as its projections and MLP (per layer:
 * 2 (dim q_dim + 2 dim kv_dim + q_dim dim + 3 dim hidden) against 4 q_dim a
 * KV row: QK and PV). A step takes prompt tokens while their cost stays
 * within prefill_chunk, which stays the most tokens a step takes: a chunk
 * at position 0 is prefill_chunk tokens, one at P_eq about half as many.
 * Chunking never changes the numbers (a prompt token gets decode's bits at
 * its position: docs/offload.md), only the step a token comes in. */

/* The engine's P_eq (> 0), from the model's shape. */
static double na_sched_pf_peq(const na_engine_t *e)
{
    const double dim = e->cfg.dim, qd = e->q_dim, kd = e->kv_dim, hid = e->cfg.hidden_dim;
    double lin = 2.0 * (dim * qd + 2.0 * dim * kd + qd * dim + 3.0 * dim * hid);
    double att = 4.0 * qd;

    return att > 0 && lin > att ? lin / att : 1.0;
}

/* Cost of n prompt tokens from position p: sum of w(p..p+n-1). */
static double na_sched_pf_cost(double peq, int p, int n)
{
    return (double)n + ((double)n * (double)p + 0.5 * (double)n * (double)(n - 1)) / peq;
}

/* The most tokens (<= n) from position p whose cost fits *left; takes it
 * from *left. 0 when not even one fits. */
static int na_sched_pf_take(double peq, int p, int n, double *left)
{
    /* cost(k) = k^2 / 2P + k (1 + (p - 1/2) / P): the root of cost = left */
    double bq = 1.0 + ((double)p - 0.5) / peq;
    double k = peq * (sqrt(bq * bq + 2.0 * *left / peq) - bq);
    int m = k < (double)n ? (int)k : n;

    if (m < 0)
        m = 0;
    while (m < n && na_sched_pf_cost(peq, p, m + 1) <= *left)
        m++;                              /* rounding: the exact fit */
    while (m > 0 && na_sched_pf_cost(peq, p, m) > *left)
        m--;
    *left -= na_sched_pf_cost(peq, p, m);
    return m;
}

/* ---- the batches ---------------------------------------------------------- */

/* Allocate batch b's buffers for mb members. */
static na_status_t na_sched_batch_init(na_off_t *g, na_off_batch_t *b, int id, int mb)
{
    size_t rows = (size_t)mb + (size_t)g->prefill_chunk;

    b->id = id;
    b->mem = calloc((size_t)mb, sizeof(*b->mem));
    b->row_req = calloc(rows, sizeof(*b->row_req));
    b->tokens = calloc(rows, sizeof(int));
    b->pos = calloc(rows, sizeof(int));
    b->seg = calloc((size_t)mb, sizeof(*b->seg));
    b->seg_req = calloc((size_t)mb, sizeof(*b->seg_req));
    b->ent = calloc((size_t)mb, sizeof(*b->ent));
    b->ent_seg = calloc((size_t)mb, sizeof(int));
    b->crow = calloc(rows, sizeof(*b->crow));
    if (!b->mem || !b->row_req || !b->tokens || !b->pos || !b->seg || !b->seg_req ||
        !b->ent || !b->ent_seg || !b->crow)
        return na_err(NA_ERR_NOMEM, "offload: out of memory for a batch of %d", mb);
    return na_acts_create(g->e, mb, mb, &b->acts);
}

/* NA_FAULTS "compute:op_ms=N" (a test double, docs/fault-injection.md):
 * every op of a slice takes N ms longer, so a test can make the compute
 * node's work outlast the storage nodes' peer_timeout_ms. */
static na_status_t na_sched_faults(na_off_t *g)
{
    const char *spec = getenv("NA_FAULTS");
    char err[256];
    int ms = 0, r = na_faults_part_int(spec, "compute", "op_ms", 0, 60000, &ms, err, sizeof(err));

    if (r < 0)
        return na_err(NA_ERR_INVALID, "%s", err);
    if (r > 0 && ms > 0 && g->e->fault_op_ms != ms) {
        fprintf(stderr, "nearattn: TEST DOUBLE: every compute op %d ms slower (NA_FAULTS=\"%s\"); "
                "not for production\n", ms, spec);
        g->e->fault_op_ms = ms;
    }
    return NA_OK;
}

na_status_t na_off_sched_init(na_off_t *g)
{
    na_status_t st = na_sched_faults(g);
    int i;

    if (st != NA_OK)
        return st;

    g->pf_peq = g->o->prefill_weighted ? na_sched_pf_peq(g->e) : 0.0;
    /* rotational: a batch's slices are tied to replicas by its id, so its
     * members stay where they were admitted */
    na_bsplit_init(&g->split, g->o->adaptive_batches && g->rep == NULL, g->n_batches);
    g->b = calloc((size_t)g->n_batches, sizeof(*g->b));
    if (g->b == NULL)
        return na_err(NA_ERR_NOMEM, "offload: out of memory for %d batches", g->n_batches);
    for (i = 0; i < g->n_batches && st == NA_OK; i++)
        st = na_sched_batch_init(g, &g->b[i], i, g->max_batch);
    return st;
}

void na_off_sched_free(na_off_t *g)
{
    int i;

    if (g->b == NULL)
        return;
    for (i = 0; i < g->n_batches; i++) {
        na_off_batch_t *b = &g->b[i];
        na_acts_destroy(b->acts);
        free(b->mem);
        free(b->row_req);
        free(b->tokens);
        free(b->pos);
        free(b->seg);
        free(b->seg_req);
        free(b->ent);
        free(b->ent_seg);
        free(b->crow);
    }
    free(g->b);
    g->b = NULL;
}

/* Drop ended members from batch b (and free them). */
static void na_sched_compact(na_off_t *g, na_off_batch_t *b)
{
    int i, k = 0;
    for (i = 0; i < b->n_mem; i++)
        if (!b->mem[i]->done)
            b->mem[k++] = b->mem[i];
        else
            na_off_forget(g, b->mem[i]);
    b->n_mem = k;
}

/* Admit waiting requests into batch b (at a step boundary), spreading the
 * waiting ones over the batches; a request the service has no room for
 * goes back to the front of the queue, and admission waits until another
 * request left. Only compute-node errors are returned. */
static na_status_t na_sched_admit(na_off_t *g, na_off_batch_t *b)
{
    int target, k;
    na_status_t st;

    if (g->n_wait == 0 || g->blocked_at == g->ended)
        return NA_OK;       /* nothing waits, or no room since the last refusal */
    k = na_bsplit_batches(&g->split, g->n_wait + g->n_live, g->max_batch);
    if (b->id >= k)
        return NA_OK;       /* merged: this batch is not in use */
    target = (g->n_wait + g->n_live + k - 1) / k;
    if (target > g->max_batch)
        target = g->max_batch;
    if (target < 1)
        target = 1;
    while (g->n_wait > 0 && b->n_mem < target) {
        na_off_req_t *q = na_off_pop_wait(g);
        if (q == NULL)
            break;                  /* those left wait for a prompt sharing their prefix */
        st = na_off_admit_one(g, q, b->id);
        if (st == NA_ERR_NOSPACE) {
            na_off_wait_front(g, q);    /* it stays first */
            g->blocked_at = g->ended;   /* queue: retry when a request leaves */
            break;
        }
        if (q->batch == b->id)
            b->mem[b->n_mem++] = q;     /* it joined (it may have ended already) */
        else if (q->done)
            na_off_forget(g, q);        /* refused before it joined the batch */
        if (st != NA_OK)
            return st;
    }
    na_sched_compact(g, b);
    return NA_OK;
}

/* Move member i of batch from (between steps) to batch to. */
static void na_sched_move(na_off_batch_t *from, int i, na_off_batch_t *to)
{
    na_off_req_t *q = from->mem[i];

    from->mem[i] = from->mem[--from->n_mem];
    to->mem[to->n_mem++] = q;
    q->batch = to->id;
}

/* The batch below k, other than b, with the fewest members, if it has
 * fewer than `below` (NULL if none). */
static na_off_batch_t *na_sched_emptiest(na_off_t *g, const na_off_batch_t *b, int k, int below)
{
    na_off_batch_t *to = NULL;
    int i;

    for (i = 0; i < k; i++)
        if (&g->b[i] != b && g->b[i].n_mem < below && (to == NULL || g->b[i].n_mem < to->n_mem))
            to = &g->b[i];
    return to;
}

/* At the start of batch b's step (compute-node/batch_split.h): feed its
 * last step's measurement to the split, then move members so that the
 * live requests are spread over the k batches it says. A batch at or past
 * k hands its members to the emptiest below k, one below k its members
 * over its share (they wait there for that batch's next step); one below
 * k takes members from an idle batch that has more than its share. Members
 * move only between their steps, and the numbers do not change
 * (batch-invariant kernels, a request's own attention). Returns 1 when a
 * member moved. */
static int na_sched_rebalance(na_off_t *g, na_off_batch_t *b)
{
    na_off_batch_t *to;
    int i, k, share, moved = 0;

    if (b->measure) {
        static const char *const phase[] = { "merged", "trial", "split", "merged probe" };
        na_bsplit_step(&g->split, b->n_rows, b->c_s, b->a_s, b->pf_rows > 0, b->alone,
                       b->t_end);
        na_log_debug("batch split: batch %d step %llu: %d rows, compute %.3f ms, attention "
                     "%.3f ms%s%s; per decode row merged %.3f ms, split %.3f ms; now %s",
                     b->id, (unsigned long long)b->step, b->n_rows, 1e3 * b->c_s,
                     1e3 * b->a_s, b->pf_rows > 0 ? " (prompt rows)" : "",
                     b->alone ? "" : " (not alone)", 1e3 * g->split.merged_spr,
                     1e3 * g->split.split_spr, phase[g->split.phase]);
        b->measure = 0;
    }
    if (!g->split.adaptive)
        return 0;
    k = na_bsplit_batches(&g->split, g->n_live + g->n_wait, g->max_batch);
    if (b->id >= k) {
        while (b->n_mem > 0 && (to = na_sched_emptiest(g, b, k, g->max_batch)) != NULL) {
            na_sched_move(b, b->n_mem - 1, to);
            moved = 1;
        }
        return moved;
    }
    share = (g->n_live + k - 1) / k;
    while (b->n_mem > share && (to = na_sched_emptiest(g, b, k, share)) != NULL) {
        na_sched_move(b, b->n_mem - 1, to);
        moved = 1;
    }
    for (i = 0; i < g->n_batches && b->n_mem < share; i++) {
        na_off_batch_t *o = &g->b[i];
        if (o == b || o->state != NA_OFF_B_IDLE)
            continue;
        while (o->n_mem > (o->id < k ? share : 0) && b->n_mem < share) {
            na_sched_move(o, o->n_mem - 1, b);
            moved = 1;
        }
    }
    return moved;
}

/* ---- a batch's step ------------------------------------------------------- */

/* Send the attention of `layer` for batch b: one entry per segment (a
 * decode row, or a prompt chunk of several) goes to the service, X-cache
 * rows are computed here, rows of failed requests are zeroed. Leaves b in
 * WAIT (or READY when nothing went out). */
static na_status_t na_sched_launch(na_off_t *g, na_off_batch_t *b, int layer)
{
    na_engine_t *e = g->e;
    na_acts_t *a = b->acts;
    const size_t qd = (size_t)e->q_dim, kd = (size_t)e->kv_dim;
    na_status_t st;
    double t0;
    int i;

    st = na_acts_to_host(e, a, NA_ACT(NA_ACT_Q) | NA_ACT(NA_ACT_K) | NA_ACT(NA_ACT_V) |
                               NA_ACT(NA_ACT_XB));  /* read on the host */
    if (st != NA_OK)
        return st;
    b->layer = layer;
    b->n_ent = 0;
    for (i = 0; i < b->n_seg; i++) {
        na_off_req_t *q = b->seg_req[i];
        const size_t r0 = (size_t)b->seg[i].row0;
        na_asvc_entry_t *x;
        if (q->done || q->recover || q->xc != NULL)
            continue;
        x = &b->ent[b->n_ent];
        b->ent_seg[b->n_ent++] = i;
        x->req = q->wid;
        x->pos = b->seg[i].pos0;
        x->n_q = b->seg[i].n_tok;
        x->q = a->q + r0 * qd;
        x->k = a->k + r0 * kd;
        x->v = a->v + r0 * kd;
        x->o = a->att + r0 * qd;
        x->status = NA_OK;
        x->reason[0] = '\0';
    }
    b->t_submit = na_now_s();
    if (b->n_ent > 0) {
        st = na_asvc_submit(g->svc, b->id, layer, b->ent, b->n_ent);
        g->st->submit_s += na_now_s() - b->t_submit;
        if (st != NA_OK)
            return st;
        g->st->attn_calls++;
        b->state = NA_OFF_B_WAIT;
    } else {
        b->state = NA_OFF_B_READY;
    }
    /* local work of this layer: X-cache attention, zero rows of failed requests */
    t0 = na_now_s();
    for (i = 0; i < b->n_rows; i++) {
        na_off_req_t *q = b->row_req[i];
        float *att = a->att + (size_t)i * qd;
        if (q->done || q->recover) {
            memset(att, 0, qd * sizeof(float));
        } else if (q->xc != NULL) {         /* decode rows only (prefilled here) */
            na_xcache_put(q->xc, layer, b->pos[i], 1, a->xb + (size_t)i * (size_t)e->cfg.dim);
            st = na_xcache_attend(q->xc, e, layer, b->pos[i], a->q + (size_t)i * qd, att);
            if (st != NA_OK)
                return st;
        }
    }
    g->st->xcache_s += na_now_s() - t0;
    return NA_OK;
}

/* Send batch b's context to the replica owning slice k (AWAY): the rows of
 * the step (ended requests marked), x (none for slice 0) and att (the
 * attention of layer k-1). */
static na_status_t na_sched_send_away(na_off_t *g, na_off_batch_t *b, int k)
{
    na_engine_t *e = g->e;
    na_wire_ctx_t c;
    na_status_t st;
    int i;

    st = na_acts_to_host(e, b->acts, NA_ACT(NA_ACT_X) | NA_ACT(NA_ACT_ATT));
    if (st != NA_OK)
        return st;
    for (i = 0; i < b->n_rows; i++) {
        na_off_req_t *q = b->row_req[i];
        b->crow[i] = (na_wire_ctx_row_t){ q->wid, (uint32_t)b->pos[i], (uint32_t)b->tokens[i],
                                          0, q->done ?
                                             (int32_t)NA_ERR_CANCELED : 0 };
    }
    if (k == 0)
        memset(b->acts->x, 0, (size_t)b->n_rows * (size_t)e->cfg.dim * sizeof(float));
    memset(&c, 0, sizeof(c));
    c.batch_id = (uint32_t)b->id;
    c.slice = (uint32_t)k;
    c.n_rows = (uint32_t)b->n_rows;
    c.dim = (uint32_t)e->cfg.dim;
    c.att_dim = k > 0 ? (uint32_t)e->q_dim : 0;
    c.dtype = NA_DTYPE_F32;
    c.step = b->step;
    c.rows = b->crow;
    c.x = b->acts->x;
    c.att = k > 0 ? b->acts->att : NULL;
    b->layer = k;
    b->state = NA_OFF_B_AWAY;
    b->t_submit = na_now_s();
    st = na_rep_send_ctx(g->rep, na_off_owner(g, b->id, k), &c);
    if (st == NA_OK)
        g->st->ctx_sent++;
    return st;
}

/* Start a step of batch b (IDLE): end its members whose cancel was asked,
 * admit waiting requests, lay out the step's rows (a decode row per
 * decoding member, then prompt chunks of the members in prefill, oldest
 * first, up to prefill_chunk tokens), then embed + first pre-attention
 * slice + first attention. *ran_p is set when anything happened. */
static na_status_t na_sched_start(na_off_t *g, na_off_batch_t *b, int *ran_p)
{
    na_engine_t *e = g->e;
    int before = g->n_wait, i, budget;
    double wbudget;
    na_step_t s;
    na_status_t st;

    if (g->n_cancel > 0) {
        for (i = 0; i < b->n_mem; i++)
            if (b->mem[i]->cancel && !b->mem[i]->done) {
                na_off_cancel_now(g, b->mem[i]);
                *ran_p = 1;
            }
        na_sched_compact(g, b);
    }
    if (na_sched_rebalance(g, b))
        *ran_p = 1;
    st = na_sched_admit(g, b);
    if (st != NA_OK)
        return st;
    if (g->n_wait != before)
        *ran_p = 1;
    b->n_rows = 0;
    b->n_seg = 0;
    for (i = 0; i < b->n_mem; i++) {
        na_off_req_t *q = b->mem[i];
        if (q->r->state != NA_REQ_DECODE)
            continue;
        b->row_req[b->n_rows] = q;
        b->tokens[b->n_rows] = q->r->last;
        b->pos[b->n_rows] = q->r->n_pos;
        b->seg_req[b->n_seg] = q;
        b->seg[b->n_seg++] = (na_step_seg_t){ b->n_rows, 1, q->r->n_pos, NULL };
        b->n_rows++;
    }
    budget = g->prefill_chunk;          /* tokens: at most prefill_chunk rows */
    wbudget = (double)g->prefill_chunk; /* weighted: their cost (na_sched_pf_take) */
    b->pf_rows = 0;
    for (i = 0; i < b->n_mem && budget > 0 && wbudget > 0; i++) {
        na_off_req_t *q = b->mem[i];
        int n, j, row0 = b->n_rows;
        if (q->r->state != NA_REQ_PREFILL || q->pf_target <= 0 || q->done)
            continue;
        n = q->pf_target - q->pf_done < budget ? q->pf_target - q->pf_done : budget;
        if (g->pf_peq > 0) {
            int m = na_sched_pf_take(g->pf_peq, q->pf_done, n, &wbudget);
            if (m == 0 && budget == g->prefill_chunk) {
                m = 1;              /* one token over: a step always progresses */
                wbudget = 0;
            }
            if (m == 0)
                break;
            if (m < n)
                wbudget = 0;        /* oldest first: no later prompt this step */
            n = m;
        }
        budget -= n;
        for (j = 0; j < n; j++) {
            b->row_req[b->n_rows] = q;
            b->tokens[b->n_rows] = na_off_token_at(q->r, q->pf_done + j);
            b->pos[b->n_rows] = q->pf_done + j;
            b->n_rows++;
        }
        b->seg_req[b->n_seg] = q;
        b->seg[b->n_seg++] = (na_step_seg_t){ row0, n, q->pf_done, NULL };
    }
    b->pf_rows = g->prefill_chunk - budget;
    if (b->n_rows == 0)
        return NA_OK;
    *ran_p = 1;
    b->step++;
    b->measure = 1;
    b->c_s = 0.0;
    b->a_s = 0.0;
    b->alone = 1;
    for (i = 0; i < g->n_batches; i++)
        if (&g->b[i] != b && (g->b[i].state != NA_OFF_B_IDLE || g->b[i].n_mem > 0))
            b->alone = 0;
    if (b->pf_rows > 0)
        g->st->gen.prefill_steps++;
    s = (na_step_t){ b->n_rows, b->n_seg, b->tokens, b->pos, b->seg };
    st = na_acts_reserve(b->acts, e, b->n_rows, b->n_seg);
    if (st != NA_OK)
        return st;
    if (na_off_owner(g, b->id, 0) != 0)
        return na_sched_send_away(g, b, 0);
    st = na_slice_embed(e, b->acts, &s);
    if (st == NA_OK)
        st = na_slice_pre_attn(e, b->acts, &s, 0);
    if (st != NA_OK)
        return st;
    g->st->slices++;
    return na_sched_launch(g, b, 0);
}

/* Run slice k of batch b here: post_attn(k-1) (unless post_done: a replica
 * ran it), then pre_attn(k) and its attention, or for k = L the final norm,
 * logits and sampling, which end the step. */
static na_status_t na_sched_slice(na_off_t *g, na_off_batch_t *b, int k, int post_done)
{
    na_engine_t *e = g->e;
    na_step_t s = { b->n_rows, b->n_seg, b->tokens, b->pos, b->seg };
    int i, n_dec = 0;
    na_status_t st;

    if (!post_done) {
        st = na_acts_from_host(e, b->acts, NA_ACT(NA_ACT_ATT));   /* written on the host */
        if (st == NA_OK)
            st = na_slice_post_attn(e, b->acts, &s, k - 1);
        if (st != NA_OK)
            return st;
        g->st->slices++;
    }
    if (k < e->cfg.n_layers) {
        st = na_slice_pre_attn(e, b->acts, &s, k);
        return st != NA_OK ? st : na_sched_launch(g, b, k);
    }
    st = na_slice_final(e, b->acts, &s);
    if (st == NA_OK)
        st = na_acts_to_host(e, b->acts, NA_ACT(NA_ACT_LOGITS));
    if (st != NA_OK)
        return st;
    for (i = 0; i < b->n_seg; i++) {         /* logits row i: segment i's last row */
        na_off_req_t *q = b->seg_req[i];
        float *logits = b->acts->logits + (size_t)i * (size_t)e->cfg.vocab_size;
        int chunk = q->r->state == NA_REQ_PREFILL && q->pf_target > 0;
        n_dec += !chunk;
        if (q->done)
            continue;
        if (q->cancel) {                     /* the step boundary: it ends here */
            na_off_cancel_now(g, q);
            continue;
        }
        if (q->recover)
            continue;
        if (chunk) {
            na_off_chunk_done(g, q, b->seg[i].n_tok, logits);
            continue;
        }
        q->r->n_pos++;
        na_off_take_token(g, q, logits);
    }
    for (i = 0; i < b->n_seg; i++) {         /* re-place requests of a lost node */
        na_off_req_t *q = b->seg_req[i];
        if (q->recover && !q->done) {
            st = na_off_recover(g, q);
            if (st != NA_OK)
                return st;
        }
    }
    if (n_dec > 0) {
        g->st->gen.decode_steps++;
        g->st->gen.decode_tokens += n_dec;
    }
    na_sched_compact(g, b);
    b->state = NA_OFF_B_IDLE;
    b->t_end = na_now_s();
    return NA_OK;
}

/* Resume batch b (READY) after the attention of b->layer. */
static na_status_t na_sched_resume(na_off_t *g, na_off_batch_t *b)
{
    na_engine_t *e = g->e;
    int i, l = b->layer;

    for (i = 0; i < b->n_ent; i++) {
        na_asvc_entry_t *x = &b->ent[i];
        if (x->status != NA_OK) {
            na_off_req_t *q = b->seg_req[b->ent_seg[i]];
            char why[NA_ASVC_REASON_MAX + 64];
            snprintf(why, sizeof(why), "layer %d attention: %s", l,
                     x->reason[0] ? x->reason : na_status_string(x->status));
            memset(x->o, 0, (size_t)(x->n_q > 1 ? x->n_q : 1) * (size_t)e->q_dim *
                            sizeof(float));
            if (na_off_lost(g, q, x->status, why)) {
                /* its storage node is gone: this step is void for it; it is
                 * re-placed (a node that left cleanly was reported once, at info) */
                if (strstr(x->reason, " left: ") != NULL)
                    na_log_debug("request %d: %s; re-placing it", q->r->id, why);
                else
                    na_log_warn("request %d: %s; re-placing it", q->r->id, why);
            }
        }
    }
    if (g->n_rep > 1 && na_off_owner(g, b->id, l + 1) != 0)
        return na_sched_send_away(g, b, l + 1);
    return na_sched_slice(g, b, l + 1, 0);
}

/* A batch context came back from a replica (rotational): take x and att,
 * fail the rows whose attention failed there, and go on with its slice
 * here (or forward it to that slice's owner). */
static na_status_t na_sched_ctx(na_off_t *g, const na_wire_ctx_t *c)
{
    na_engine_t *e = g->e;
    const size_t dim = (size_t)e->cfg.dim, qd = (size_t)e->q_dim;
    na_off_batch_t *b;
    na_status_t st;
    uint32_t i;
    int k;

    if (c->batch_id >= (uint32_t)g->n_batches || g->b[c->batch_id].state != NA_OFF_B_AWAY)
        return na_err(NA_ERR_PEER, "offload: a compute replica returned batch %u, which is "
                      "not away", c->batch_id);
    b = &g->b[c->batch_id];
    k = (int)c->slice;
    if (c->n_rows != (uint32_t)b->n_rows || c->dim != dim || c->dtype != NA_DTYPE_F32 ||
        k != b->layer + 1 || k > e->cfg.n_layers + 1 ||
        (k <= e->cfg.n_layers && c->att_dim != qd) || (c->att_dim != 0 && c->att_dim != qd))
        return na_err(NA_ERR_PEER, "offload: a compute replica returned batch %u with %u "
                      "rows at slice %d (sent %d rows at slice %d)", c->batch_id, c->n_rows,
                      k, b->n_rows, b->layer);
    g->st->ctx_recv++;
    g->st->ctx_rt_s += na_now_s() - b->t_submit;
    memcpy(b->acts->x, c->x, (size_t)b->n_rows * dim * sizeof(float));
    if (c->att_dim > 0)
        memcpy(b->acts->att, c->att, (size_t)b->n_rows * qd * sizeof(float));
    st = na_acts_from_host(e, b->acts, NA_ACT(NA_ACT_X) | NA_ACT(NA_ACT_ATT));
    if (st != NA_OK)
        return st;
    for (i = 0; i < c->n_rows; i++) {
        na_wire_ctx_row_t r;
        na_off_req_t *q = b->row_req[i];
        (void)na_wire_ctx_get(c, i, &r);
        if (r.request_id != q->wid)
            return na_err(NA_ERR_PEER, "offload: a compute replica returned batch %u with "
                          "request %llu in row %u (sent %llu)", c->batch_id,
                          (unsigned long long)r.request_id, i, (unsigned long long)q->wid);
        if (r.status != 0 && !q->done) {
            char why[NA_ASVC_REASON_MAX + 64];
            snprintf(why, sizeof(why), "layer %d attention (on a compute replica): %s", k - 1,
                     na_status_string((na_status_t)r.status));
            na_off_fail(g, q, (na_status_t)r.status, why);
        }
    }
    if (k == e->cfg.n_layers + 1)
        return na_sched_slice(g, b, e->cfg.n_layers, 1);
    if (na_off_owner(g, b->id, k) != 0)
        return na_sched_send_away(g, b, k);
    return na_sched_slice(g, b, k, 0);
}

/* Take every batch context that came back (waiting up to timeout_ms for
 * the first). *ran_p is set when one was handled. */
static na_status_t na_sched_take_ctx(na_off_t *g, int timeout_ms, int *ran_p)
{
    na_xp_msg_t *msg;
    na_wire_ctx_t c;
    na_status_t st;
    double t0;

    for (;;) {
        t0 = na_now_s();
        st = na_rep_recv_ctx(g->rep, timeout_ms, &msg, &c);
        g->st->idle_s += na_now_s() - t0;
        if (st == NA_ERR_TIMEOUT)
            return NA_OK;
        if (st != NA_OK)
            return st;
        t0 = na_now_s();
        st = na_sched_ctx(g, &c);
        g->st->compute_s += na_now_s() - t0;   /* rotational: no prompt rows */
        na_rep_msg_release(g->rep, msg);
        if (st != NA_OK)
            return st;
        *ran_p = 1;
        timeout_ms = 0;
    }
}

/* Mark batch `id` READY (its attention completed). */
static void na_sched_done(na_off_t *g, int id)
{
    na_off_batch_t *b;

    if (id < 0 || id >= g->n_batches || g->b[id].state != NA_OFF_B_WAIT) {
        na_log_warn("offload: the attention service completed unknown batch %d", id);
        return;
    }
    b = &g->b[id];
    b->state = NA_OFF_B_READY;
    b->a_s += na_now_s() - b->t_submit;
    g->st->attn_rt_s += na_now_s() - b->t_submit;
}

/* dt seconds of compute on batch b's step: its share of prompt rows counts
 * as prefill compute (stats.prefill_s, a part of compute_s). */
static void na_sched_charge(na_off_t *g, na_off_batch_t *b, double dt)
{
    b->c_s += dt;
    g->st->compute_s += dt;
    if (b->pf_rows > 0 && b->n_rows > 0)
        g->st->prefill_s += dt * (double)b->pf_rows / (double)b->n_rows;
}

/* How long the next blocking wait may last: want_ms, cut at the deadline
 * but at least 1 ms (a service without a non-blocking test, the in-process
 * one, completes a batch only in a wait). */
static int na_sched_wait_ms(double deadline, int want_ms)
{
    double left;

    if (deadline < 0)
        return want_ms;
    left = 1e3 * (deadline - na_now_s());
    if (left < 1)
        return 1;
    return left < want_ms ? (int)left + 1 : want_ms;
}

/* The engine's tick during a slice (na_engine_t.tick): a slice over a
 * long prompt chunk runs for seconds on a slow machine (the sanitizer
 * build), and the storage nodes drop a compute node silent for
 * peer_timeout_ms; so the session takes its turn (heartbeats out, answers
 * in: attention of other batches lands in their own buffers) every
 * NA_SCHED_TICK_S of compute. The slice's numbers do not change. */
static void na_sched_tick(void *ctx)
{
    na_off_t *g = ctx;
    double now = na_now_s();

    if (now - g->tick_at < NA_SCHED_TICK_S)
        return;
    g->tick_at = now;
    na_asvc_progress(g->svc);
}

static na_status_t na_sched_loop(na_off_t *g, double deadline);

/* Run the batches until every request ended or deadline (na_now_s()
 * seconds; < 0: none) passed; waits never go past the deadline. Returns
 * compute-node errors only. */
static na_status_t na_sched_run(na_off_t *g, double deadline)
{
    void (*tick)(void *) = g->e->tick;
    void *tick_ctx = g->e->tick_ctx;
    na_status_t st;

    g->e->tick = na_sched_tick;
    g->e->tick_ctx = g;
    g->tick_at = na_now_s();
    st = na_sched_loop(g, deadline);
    g->e->tick = tick;
    g->e->tick_ctx = tick_ctx;
    return st;
}

static na_status_t na_sched_loop(na_off_t *g, double deadline)
{
    na_status_t st;

    do {
        na_off_batch_t *pick = NULL;
        int i, id, ran = 0, waiting = 0, away = 0;
        double t0;

        if (g->n_cancel > 0)
            na_off_cancel_waiting(g);
        if (g->n_wait == 0 && g->n_live == 0)
            break;
        /* completions that are already in */
        while (na_asvc_poll(g->svc, 0, &id) == NA_OK)
            na_sched_done(g, id);
        if (g->rep != NULL) {          /* contexts back from replicas */
            st = na_sched_take_ctx(g, 0, &ran);
            if (st != NA_OK)
                return st;
            if (ran)
                continue;
        }
        /* a batch whose attention is back: oldest first */
        for (i = 0; i < g->n_batches; i++)
            if (g->b[i].state == NA_OFF_B_READY &&
                (pick == NULL || g->b[i].t_submit < pick->t_submit))
                pick = &g->b[i];
        if (pick != NULL) {
            t0 = na_now_s();
            st = na_sched_resume(g, pick);
            na_sched_charge(g, pick, na_now_s() - t0);
            if (st != NA_OK)
                return st;
            continue;
        }
        /* else start a step on an idle batch (round robin) */
        for (i = 0; i < g->n_batches && !ran; i++) {
            na_off_batch_t *b = &g->b[(g->rr + i) % g->n_batches];
            if (b->state != NA_OFF_B_IDLE)
                continue;
            t0 = na_now_s();
            st = na_sched_start(g, b, &ran);
            na_sched_charge(g, b, na_now_s() - t0);
            if (st != NA_OK)
                return st;
            if (ran)
                g->rr = (b->id + 1) % g->n_batches;
        }
        if (ran)
            continue;
        /* nothing can run: wait for attention (idle time); our pool's
         * threads must not spin on cores the attention needs */
        if (g->svc->shares_cores)
            na_kernels_rest(g->e->kern);
        for (i = 0; i < g->n_batches; i++) {
            waiting += g->b[i].state == NA_OFF_B_WAIT;
            away += g->b[i].state == NA_OFF_B_AWAY;
        }
        if (away > 0) {
            /* wait on both sides: replicas first, then the storage nodes */
            st = na_sched_take_ctx(g, na_sched_wait_ms(deadline, waiting > 0 ? 1 : 20), &ran);
            if (st != NA_OK)
                return st;
            if (ran || waiting == 0)
                continue;
            t0 = na_now_s();
            st = na_asvc_poll(g->svc, na_sched_wait_ms(deadline, 1), &id);
            g->st->idle_s += na_now_s() - t0;
            if (st == NA_OK)
                na_sched_done(g, id);
            else if (st != NA_ERR_TIMEOUT)
                return st;
            continue;
        }
        if (waiting == 0)
            return na_err(NA_ERR_INTERNAL, "offload: %d request(s) can neither run nor wait "
                          "(%d live)", g->n_wait, g->n_live);
        t0 = na_now_s();
        st = na_asvc_poll(g->svc, na_sched_wait_ms(deadline, NA_SCHED_POLL_MS), &id);
        g->st->idle_s += na_now_s() - t0;
        if (st == NA_OK)
            na_sched_done(g, id);
        else if (st != NA_ERR_TIMEOUT)
            return st;
    } while (deadline < 0 || na_now_s() < deadline);
    if (g->n_wait == 0 && g->n_live == 0)
        na_asvc_progress(g->svc);      /* idle: still answer the owners' heartbeats */
    return NA_OK;
}

/* The API's progress (offload.h) is the scheduler's step loop, entered here
 * directly: the first error latches (g->fatal) and every later call returns
 * it. */
na_status_t na_off_progress(na_off_t *g, int timeout_ms)
{
    if (g->fatal != NA_OK)
        return na_err(g->fatal, "offload: the engine stopped after an error");
    g->fatal = na_sched_run(g, timeout_ms < 0 ? -1.0 : na_now_s() + 1e-3 * timeout_ms);
    return g->fatal;
}

int na_off_sched_drain(na_off_t *g)
{
    double t0 = na_now_s();
    int i, id, out;

    for (;;) {
        out = 0;
        for (i = 0; i < g->n_batches; i++)
            out += g->b[i].state == NA_OFF_B_WAIT || g->b[i].state == NA_OFF_B_AWAY;
        if (out == 0)
            return 0;
        if (na_now_s() - t0 > NA_SCHED_DRAIN_S)
            return -1;
        if (na_asvc_poll(g->svc, 10, &id) == NA_OK && id >= 0 && id < g->n_batches &&
            g->b[id].state == NA_OFF_B_WAIT)
            g->b[id].state = NA_OFF_B_IDLE;
        if (g->rep != NULL) {
            na_xp_msg_t *msg;
            na_wire_ctx_t c;
            if (na_rep_recv_ctx(g->rep, 10, &msg, &c) == NA_OK) {
                if (c.batch_id < (uint32_t)g->n_batches &&
                    g->b[c.batch_id].state == NA_OFF_B_AWAY)
                    g->b[c.batch_id].state = NA_OFF_B_IDLE;
                na_rep_msg_release(g->rep, msg);
            }
        }
    }
}

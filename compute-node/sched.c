/* compute-node/sched.c — batches in flight and the fixed staggered schedule
 * (Lamina §5.1.2) of the offload generator.
 *
 * A decode step of a batch is n_layers + 1 model slices separated by
 * attention; each batch moves through
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
 * attention of the same batch (INF2 §4.3 cooperative X-cache). */
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "compute-node/offload_internal.h"

#define NA_SCHED_POLL_MS 1000   /* one blocking poll; the service bounds failures */

/* Send the attention of `layer` for batch b: the remote entries go to the
 * service, X-cache rows are computed here, rows of failed requests are
 * zeroed. Leaves b in WAIT (or READY when nothing went out). */
static na_status_t na_sched_launch(na_off_t *g, na_off_batch_t *b, int layer)
{
    na_engine_t *e = g->e;
    na_acts_t *a = b->acts;
    const size_t qd = (size_t)e->q_dim, kd = (size_t)e->kv_dim;
    na_status_t st;
    double t0;
    int i;

    st = e->kern->ops->sync(e->kern);        /* q, k, v, xb are read on the host */
    if (st != NA_OK)
        return st;
    b->layer = layer;
    b->n_ent = 0;
    for (i = 0; i < b->n_rows; i++) {
        na_off_req_t *q = b->row_req[i];
        na_asvc_entry_t *x;
        if (q->r->state == NA_REQ_DONE || q->recover || q->xc != NULL)
            continue;
        x = &b->ent[b->n_ent];
        b->ent_row[b->n_ent++] = i;
        x->req = q->wid;
        x->pos = b->pos[i];
        x->q = a->q + (size_t)i * qd;
        x->k = a->k + (size_t)i * kd;
        x->v = a->v + (size_t)i * kd;
        x->o = a->att + (size_t)i * qd;
        x->status = NA_OK;
        x->reason[0] = '\0';
    }
    b->t_submit = na_off_now();
    if (b->n_ent > 0) {
        st = na_asvc_submit(g->svc, b->id, layer, b->ent, b->n_ent);
        g->st->submit_s += na_off_now() - b->t_submit;
        if (st != NA_OK)
            return st;
        g->st->attn_calls++;
        b->state = NA_OFF_B_WAIT;
    } else {
        b->state = NA_OFF_B_READY;
    }
    /* local work of this layer: X-cache attention, zero rows of failed requests */
    t0 = na_off_now();
    for (i = 0; i < b->n_rows; i++) {
        na_off_req_t *q = b->row_req[i];
        float *att = a->att + (size_t)i * qd;
        if (q->r->state == NA_REQ_DONE || q->recover) {
            memset(att, 0, qd * sizeof(float));
        } else if (q->xc != NULL) {
            na_xcache_put(q->xc, layer, b->pos[i], 1, a->xb + (size_t)i * (size_t)e->cfg.dim);
            st = na_xcache_attend(q->xc, e, layer, b->pos[i], a->q + (size_t)i * qd, att);
            if (st != NA_OK)
                return st;
        }
    }
    g->st->xcache_s += na_off_now() - t0;
    return NA_OK;
}

/* Start a decode step of batch b (IDLE): admit waiting requests, then
 * embed + first pre-attention slice + first attention. *ran_p is set when
 * anything happened. */
static na_status_t na_sched_start(na_off_t *g, na_off_batch_t *b, int *ran_p)
{
    na_engine_t *e = g->e;
    int before = g->next, i;
    na_step_t s;
    na_status_t st;

    st = na_off_admit(g, b);
    if (st != NA_OK)
        return st;
    if (g->next != before)
        *ran_p = 1;
    b->n_rows = 0;
    for (i = 0; i < b->n_mem; i++) {
        na_off_req_t *q = b->mem[i];
        if (q->r->state != NA_REQ_DECODE)
            continue;
        b->row_req[b->n_rows] = q;
        b->tokens[b->n_rows] = q->r->last;
        b->pos[b->n_rows] = q->r->n_pos;
        b->seg[b->n_rows] = (na_step_seg_t){ b->n_rows, 1, q->r->n_pos, NULL };
        b->n_rows++;
    }
    if (b->n_rows == 0)
        return NA_OK;
    *ran_p = 1;
    s = (na_step_t){ b->n_rows, b->n_rows, b->tokens, b->pos, b->seg };
    st = na_acts_reserve(b->acts, e, b->n_rows, b->n_rows);
    if (st != NA_OK)
        return st;
    na_slice_embed(e, b->acts, &s);
    na_slice_pre_attn(e, b->acts, &s, 0);
    g->st->slices++;
    return na_sched_launch(g, b, 0);
}

/* Resume batch b (READY) after the attention of b->layer. */
static na_status_t na_sched_resume(na_off_t *g, na_off_batch_t *b)
{
    na_engine_t *e = g->e;
    na_step_t s = { b->n_rows, b->n_rows, b->tokens, b->pos, b->seg };
    int i, l = b->layer;
    na_status_t st;

    for (i = 0; i < b->n_ent; i++) {
        na_asvc_entry_t *x = &b->ent[i];
        if (x->status != NA_OK) {
            na_off_req_t *q = b->row_req[b->ent_row[i]];
            char why[NA_ASVC_REASON_MAX + 64];
            snprintf(why, sizeof(why), "layer %d attention: %s", l,
                     x->reason[0] ? x->reason : na_status_string(x->status));
            memset(x->o, 0, (size_t)e->q_dim * sizeof(float));
            if (x->status == NA_ERR_PEER && !g->o->no_recover && q->recoveries < 1) {
                /* its storage node is gone: this step is void for it; re-place it */
                na_log_warn("request %d: %s; re-placing it", q->r->id, why);
                snprintf(q->lost, sizeof(q->lost), "%s", why);
                q->recover = 1;
                q->recoveries++;
            } else {
                na_off_fail(g, q, x->status, why);
            }
        }
    }
    na_slice_post_attn(e, b->acts, &s, l);
    g->st->slices++;
    if (l + 1 < e->cfg.n_layers) {
        na_slice_pre_attn(e, b->acts, &s, l + 1);
        return na_sched_launch(g, b, l + 1);
    }
    na_slice_final(e, b->acts, &s);
    st = e->kern->ops->sync(e->kern);
    if (st != NA_OK)
        return st;
    for (i = 0; i < b->n_rows; i++) {
        na_off_req_t *q = b->row_req[i];
        if (q->r->state == NA_REQ_DONE || q->recover)
            continue;
        q->r->n_pos++;
        na_off_take_token(g, q, b->acts->logits + (size_t)i * (size_t)e->cfg.vocab_size);
    }
    for (i = 0; i < b->n_rows; i++) {        /* re-place requests of a lost node */
        na_off_req_t *q = b->row_req[i];
        if (q->recover && q->r->state != NA_REQ_DONE) {
            st = na_off_recover(g, q);
            if (st != NA_OK)
                return st;
        }
    }
    g->st->gen.decode_steps++;
    g->st->gen.decode_tokens += b->n_rows;
    na_off_compact(g, b);
    b->state = NA_OFF_B_IDLE;
    return NA_OK;
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
    g->st->attn_rt_s += na_off_now() - b->t_submit;
}

na_status_t na_off_sched_run(na_off_t *g)
{
    int rr = 0;
    na_status_t st;

    while (g->next < g->n_req || g->n_live > 0) {
        na_off_batch_t *pick = NULL;
        int i, id, ran = 0, waiting = 0;
        double t0;

        /* completions that are already in */
        while (na_asvc_poll(g->svc, 0, &id) == NA_OK)
            na_sched_done(g, id);
        /* a batch whose attention is back: oldest first */
        for (i = 0; i < g->n_batches; i++)
            if (g->b[i].state == NA_OFF_B_READY &&
                (pick == NULL || g->b[i].t_submit < pick->t_submit))
                pick = &g->b[i];
        if (pick != NULL) {
            t0 = na_off_now();
            st = na_sched_resume(g, pick);
            g->st->compute_s += na_off_now() - t0;
            if (st != NA_OK)
                return st;
            continue;
        }
        /* else start a step on an idle batch (round robin) */
        for (i = 0; i < g->n_batches && !ran; i++) {
            na_off_batch_t *b = &g->b[(rr + i) % g->n_batches];
            if (b->state != NA_OFF_B_IDLE)
                continue;
            t0 = na_off_now();
            st = na_sched_start(g, b, &ran);
            g->st->compute_s += na_off_now() - t0;
            if (st != NA_OK)
                return st;
            if (ran)
                rr = (b->id + 1) % g->n_batches;
        }
        if (ran)
            continue;
        /* nothing can run: wait for attention (idle time) */
        for (i = 0; i < g->n_batches; i++)
            waiting += g->b[i].state == NA_OFF_B_WAIT;
        if (waiting == 0)
            return na_err(NA_ERR_INTERNAL, "offload: %d request(s) can neither run nor wait "
                          "(%d live)", g->n_req - g->next, g->n_live);
        t0 = na_off_now();
        st = na_asvc_poll(g->svc, NA_SCHED_POLL_MS, &id);
        g->st->idle_s += na_off_now() - t0;
        if (st == NA_OK)
            na_sched_done(g, id);
        else if (st != NA_ERR_TIMEOUT)
            return st;
    }
    return NA_OK;
}

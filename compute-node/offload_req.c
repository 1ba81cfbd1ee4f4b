/* compute-node/offload_req.c — the life of a request in the offload engine
 * (offload_req.h): the waiting queue, admission (open on the service,
 * offering the prompt for prefix reuse; local prefill and shipping of the
 * prompt's KV, or keeping its X, for X-cache requests and rotational
 * pipelining), the chunked prefill's bookkeeping (its chunks run in the
 * batches' steps, compute-node/sched.c), sampling, and ending, failing,
 * cancelling and re-placing requests. Called by the scheduler and the API
 * above it; calls neither. */
#include "compute-node/offload_req.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "common/log.h"
#include "compute-node/replica.h"

/* ---- ending -------------------------------------------------------------- */

/* Release what request q holds: its KV on the service and the replicas
 * (with status), its X, its local KV. */
static void na_off_let_go(na_off_t *g, na_off_req_t *q, int status)
{
    if (q->opened) {
        int w;
        na_asvc_release(g->svc, q->wid, status);
        for (w = 1; w < g->n_rep; w++)
            na_rep_release(g->rep, w, q->wid, status);
        q->opened = 0;
    }
    if (q->xc != NULL) {
        g->xc_bytes -= na_xcache_bytes(&g->e->cfg, q->r->n_prompt + q->r->max_new);
        na_xcache_destroy(q->xc);
        q->xc = NULL;
    }
    na_lkv_destroy(q->r->kv);
    q->r->kv = NULL;
}

/* Release everything request q holds and mark it done. */
static void na_off_drop(na_off_t *g, na_off_req_t *q, int status)
{
    na_off_let_go(g, q, status);
    q->done = 1;
    g->n_live--;
    g->ended++;
}

/* q's cancel, if asked, is carried out (it ends now). */
static void na_off_uncancel(na_off_t *g, na_off_req_t *q)
{
    if (q->cancel) {
        q->cancel = 0;
        g->n_cancel--;
    }
}

void na_off_fail(na_off_t *g, na_off_req_t *q, na_status_t st, const char *reason)
{
    na_request_t *r = q->r;

    if (q->done)
        return;
    if (st == NA_ERR_CANCELED) {
        na_log_info("request %d cancelled", r->id);
        g->st->cancelled++;
    } else {
        na_log_warn("request %d failed: %s", r->id, reason);
        g->st->failed++;
    }
    na_off_uncancel(g, q);
    r->state = NA_REQ_DONE;
    r->finish = NA_FINISH_NONE;
    na_off_drop(g, q, (int)st);
    if (q->cb.on_error != NULL)
        q->cb.on_error(q->cb.user, r, st, reason);
    if (q->cb.on_done != NULL)
        q->cb.on_done(q->cb.user, r);       /* may free r: not touched again */
}

void na_off_cancel_now(na_off_t *g, na_off_req_t *q)
{
    na_off_fail(g, q, NA_ERR_CANCELED, "cancelled");
}

int na_off_lost(na_off_t *g, na_off_req_t *q, na_status_t st, const char *why)
{
    if (st == NA_ERR_PEER && !g->o->no_recover && g->rep == NULL && q->recoveries < 1) {
        snprintf(q->lost, sizeof(q->lost), "%s", why);
        q->recover = 1;                     /* re-placed at the end of the step */
        q->recoveries++;
        return 1;
    }
    na_off_fail(g, q, st, why);
    return 0;
}

void na_off_take_token(na_off_t *g, na_off_req_t *q, float *logits)
{
    na_request_t *r = q->r;
    int t;

    if (na_request_sample(r, logits, g->scratch, &t) != NA_OK) {
        char why[128];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        na_off_fail(g, q, NA_ERR_RANGE, why);
        return;
    }
    g->st->gen.gen_tokens += na_request_take(r, t, g->o->stop_ids, g->o->n_stop,
                                             g->e->cfg.seq_len, q->cb.on_token, q->cb.user);
    if (r->finish != NA_FINISH_NONE) {
        r->state = NA_REQ_DONE;
        na_off_uncancel(g, q);
        na_off_drop(g, q, 0);
        if (q->cb.on_done != NULL)
            q->cb.on_done(q->cb.user, r);   /* may free r: not touched again */
    } else {
        r->state = NA_REQ_DECODE;
    }
}

void na_off_forget(na_off_t *g, na_off_req_t *q)
{
    NA_LIST_UNLINK(g->all, q, prev_all, next_all);
    free(q);
}

void na_off_discard(na_off_t *g, na_off_req_t *q)
{
    if (!q->done) {
        na_off_let_go(g, q, (int)NA_ERR_CANCELED);
        q->r->state = NA_REQ_DONE;
        q->r->finish = NA_FINISH_NONE;
    }
    na_off_forget(g, q);
}

/* ---- prefill ------------------------------------------------------------- */

int na_off_token_at(const na_request_t *r, int i)
{
    return i < r->n_prompt ? r->prompt[i] : r->out[i - r->n_prompt];
}

/* Whether q prefills in chunks on the storage nodes (else here, at admission:
 * X-cache requests and rotational pipelining). */
static int na_off_chunked(const na_off_t *g, const na_off_req_t *q)
{
    return q->xc == NULL && g->rep == NULL;
}
/* Prefill here the first n_tok tokens of q's prompt (X-cache requests and
 * rotational pipelining only; the others prefill in chunks on the storage
 * nodes): local causal attention over a temporary local KV (chunks of
 * max_rows), keeping each layer's X when q uses the X-cache. On return
 * g->pacts->logits row 0 holds the logits after the last token and r->kv
 * the KV (the caller ships it). A KV an earlier call left is dropped first. */
static na_status_t na_off_prefill_local(na_off_t *g, na_off_req_t *q, int n_tok)
{
    na_engine_t *e = g->e;
    na_request_t *r = q->r;
    int max_rows = e->opts.max_rows, done = 0;
    na_status_t st;
    int l, j;

    na_lkv_destroy(r->kv);
    r->kv = NULL;
    st = na_lkv_create(&e->cfg, e->opts.kv_dtype, e->kern, e->kern->mem, &r->kv);
    if (st != NA_OK)
        return st;
    while (done < n_tok) {
        int n = n_tok - done < max_rows ? n_tok - done : max_rows;
        na_step_seg_t seg = { 0, n, done, r->kv };
        na_step_t s = { n, 1, g->ptok, g->ppos, &seg };
        for (j = 0; j < n; j++) {
            g->ptok[j] = na_off_token_at(r, done + j);
            g->ppos[j] = done + j;
        }
        st = na_lkv_reserve(r->kv, done + n);
        if (st == NA_OK)
            st = na_acts_reserve(g->pacts, e, n, 1);
        if (st != NA_OK)
            return st;
        st = na_slice_embed(e, g->pacts, &s);
        for (l = 0; l < e->cfg.n_layers && st == NA_OK; l++) {
            st = na_slice_pre_attn(e, g->pacts, &s, l);
            if (st == NA_OK)
                st = na_engine_attn_local(e, g->pacts, &s, l);
            if (st == NA_OK && q->xc != NULL)
                st = na_acts_to_host(e, g->pacts, NA_ACT(NA_ACT_XB));
            if (st != NA_OK)
                return st;
            if (q->xc != NULL)
                na_xcache_put(q->xc, l, done, n, g->pacts->xb);
            st = na_slice_post_attn(e, g->pacts, &s, l);
            na_asvc_progress(g->svc);        /* heartbeats during a long prompt */
        }
        if (st == NA_OK)
            st = na_slice_final(e, g->pacts, &s);
        if (st == NA_OK)
            st = na_acts_to_host(e, g->pacts, NA_ACT(NA_ACT_LOGITS));
        if (st != NA_OK)
            return st;
        na_lkv_commit(r->kv, done + n);
        done += n;
        g->st->gen.prefill_steps++;
        g->st->gen.prompt_tokens += n;
    }
    return NA_OK;
}

/* Ship q's prompt KV (all layers) to its owners and drop the local copy.
 * Rotational: layer l goes through the replica that sends its attention,
 * (batch + l) mod R. */
static na_status_t na_off_ship(na_off_t *g, na_off_req_t *q, char *why, size_t len)
{
    na_lkv_t *kv = q->r->kv;
    na_status_t st = na_lkv_to_host(kv);
    int l;

    for (l = 0; l < kv->n_layers && st == NA_OK; l++) {
        int w = na_off_owner(g, q->batch, l);
        if (w == 0)
            st = na_asvc_prefill(g->svc, q->wid, l, kv->k[l], kv->v[l], kv->dtype, kv->n_tok);
        else
            st = na_rep_prefill(g->rep, w, q->wid, l, kv->k[l], kv->v[l], kv->dtype,
                                kv->n_tok, &g->e->cfg);
    }
    if (st == NA_OK)
        st = na_asvc_prefill_done(g->svc, q->wid);
    if (st != NA_OK)
        snprintf(why, len, "shipping the prompt's KV: %s", na_errmsg());
    return st;
}

void na_off_chunk_done(na_off_t *g, na_off_req_t *q, int n, float *logits)
{
    na_request_t *r = q->r;
    int fresh, st;

    /* tokens fed for the first time are prompt tokens, again: re-prefilled */
    fresh = q->pf_first && q->pf_done + n > q->pf_seen ? q->pf_done + n - q->pf_seen : 0;
    if (fresh > n)
        fresh = n;
    q->pf_seen += fresh;
    g->st->gen.prompt_tokens += fresh;
    g->st->reprefill_tokens += n - fresh;
    q->pf_done += n;
    if (q->pf_done < q->pf_target)
        return;
    /* its prefill is complete on the owners (they write it through) */
    st = na_asvc_prefill_done(g->svc, q->wid);
    if (st != NA_OK) {
        char why[NA_ASVC_REASON_MAX + 64];
        snprintf(why, sizeof(why), "ending the prompt's prefill: %s", na_errmsg());
        na_off_lost(g, q, st, why);      /* chunked: never rotational */
        return;
    }
    q->pf_target = 0;
    if (q->pf_first) {
        r->n_pos = r->n_prompt;
        na_off_take_token(g, q, logits);
    } else {
        r->state = NA_REQ_DECODE;
        na_log_warn("request %d: re-prefilled %d tokens on another storage node; it goes on",
                    r->id, r->n_pos);
    }
}


/* ---- admission ----------------------------------------------------------- */

/* Decide whether request q keeps X here (share and budget permitting). */
static void na_off_pick_xcache(na_off_t *g, na_off_req_t *q)
{
    const na_off_opts_t *o = g->o;
    size_t bytes;
    long i = q->index;

    if (!o->xcache)
        return;
    if ((long)((double)(i + 1) * o->xcache_share) == (long)((double)i * o->xcache_share))
        return;
    bytes = na_xcache_bytes(&g->e->cfg, q->r->n_prompt + q->r->max_new);
    if ((long)(g->xc_bytes + bytes) > g->xc_budget)
        return;
    if (na_xcache_create(&g->e->cfg, q->r->n_prompt + q->r->max_new, &q->xc) != NA_OK)
        return;
    g->xc_bytes += bytes;
    if (g->xc_bytes > g->st->xcache_bytes_peak)
        g->st->xcache_bytes_peak = g->xc_bytes;
    g->st->xcache_reqs++;
}

/* Rotational: open request q on replicas 1..R-1 too (each keeps the KV of
 * the layers whose attention it sends). On failure those opened are
 * released again and why says which replica refused. */
static na_status_t na_off_open_replicas(na_off_t *g, na_off_req_t *q, int max_tok, char *why,
                                        size_t len)
{
    na_status_t st;
    int w, k;

    for (w = 1; w < g->n_rep; w++) {
        st = na_rep_open(g->rep, w, q->wid, max_tok, &g->e->cfg);
        if (st != NA_OK) {
            snprintf(why, len, "a compute replica did not take the request: %s", na_errmsg());
            for (k = 1; k < w; k++)
                na_rep_release(g->rep, k, q->wid, (int)st);
            return st;
        }
    }
    return NA_OK;
}

/* Whether q's prompt is offered to the service (prefix reuse,
 * docs/prefix-reuse.md): o->prefix_reuse, a service that keeps prefixes,
 * a request prefilled in chunks on the storage nodes (never X-cache or
 * rotational, whose prompts are prefilled here whole). */
static int na_off_pfx_applies(const na_off_t *g, const na_off_req_t *q)
{
    return g->o->prefix_reuse && g->svc->prefix_block_tokens > 0 && q->xc == NULL &&
           na_off_chunked(g, q) && q->r->n_prompt >= 2;
}

/* Open request q (its wid set) on the service, offering its prompt when
 * prefix reuse applies. On a hit of *hit_p tokens its owner holds their KV
 * already (shared blocks): the chunked prefill starts at position *hit_p,
 * nothing is fetched back. */
static na_status_t na_off_prefix_open(na_off_t *g, na_off_req_t *q, int max_tok,
                                      int n_prompt, int *hit_p)
{
    na_request_t *r = q->r;
    na_asvc_prompt_t pr;
    na_status_t st;
    int hit = 0;

    *hit_p = 0;
    q->pfx = 0;
    q->pfx_hit = 0;
    memset(&pr, 0, sizeof(pr));
    pr.n_prompt = n_prompt;
    if (!na_off_pfx_applies(g, q)) {
        if (n_prompt <= 0)
            return na_asvc_open(g->svc, q->wid, max_tok);
        /* the owners are told where the prompt ends (no prefix offered) */
        return na_asvc_open_prefix(g->svc, q->wid, max_tok, &pr, &hit);
    }
    pr.fp = g->pfx_fp;
    pr.tokens = r->prompt;
    pr.n_tok = r->n_prompt;
    st = na_asvc_open_prefix(g->svc, q->wid, max_tok, &pr, &hit);
    if (st != NA_OK)
        return st;
    q->pfx = 1;
    if (hit <= 0)
        return NA_OK;
    if (hit >= r->n_prompt) {       /* an owner must leave the last token to us */
        na_asvc_release(g->svc, q->wid, (int)NA_ERR_PROTO);
        q->pfx = 0;
        return na_err(NA_ERR_PROTO, "a storage node attached %d tokens of a %d-token prompt",
                      hit, r->n_prompt);
    }
    /* the owner holds positions 0..hit-1 (shared blocks, read-only): the
     * chunked prefill feeds the rest, its queries answered over both */
    g->st->prefix_hit_tokens += hit;
    g->st->prefix_hit_reqs++;
    q->pfx_hit = hit;
    *hit_p = hit;
    return NA_OK;
}

/* 1 when waiting request q should stay waiting: a request in its chunked
 * prefill, opened offering its prompt, is computing a KV block q shares
 * (the whole block after the prefix it attached itself: both prompts agree
 * up to its end), so once that prompt is in q's owner can attach the block
 * instead of q computing it again alongside (requests submitted together).
 * A request whose shared part is all attached already holds no one up. */
static int na_off_prefix_wait(const na_off_t *g, const na_off_req_t *q)
{
    const na_off_req_t *p;
    int bt = g->svc->prefix_block_tokens;

    if (!na_off_pfx_applies(g, q) || q->r->n_prompt <= bt)
        return 0;                   /* no whole block of it could be attached */
    for (p = g->all; p != NULL; p = p->next_all) {
        int end = p->pfx_hit + bt;  /* the first block p computes itself */
        if (p != q && !p->done && p->batch >= 0 && p->pfx && p->pf_first &&
            p->pf_target > 0 && p->r->state == NA_REQ_PREFILL && p->r->n_prompt >= end &&
            q->r->n_prompt > end &&
            memcmp(p->r->prompt, q->r->prompt, sizeof(int) * (size_t)end) == 0)
            return 1;
    }
    return 0;
}

/* Fail request q, refused at admission before it joined a batch. */
static void na_off_refuse(na_off_t *g, na_off_req_t *q, na_status_t st, const char *why)
{
    g->n_live++;                        /* na_off_drop counts it out */
    q->r->state = NA_REQ_PREFILL;
    na_off_fail(g, q, st, why);
}

na_status_t na_off_admit_one(na_off_t *g, na_off_req_t *q, int batch)
{
    na_request_t *r = q->r;
    int max_tok = r->n_prompt + r->max_new, hit = 0;
    char why[NA_ASVC_REASON_MAX];
    double t0;
    na_status_t st;

    if (r->n_prompt < 1 || r->n_prompt > g->e->cfg.seq_len) {
        snprintf(why, sizeof(why), r->n_prompt < 1 ? "empty prompt" :
                 "prompt of %d tokens is longer than the model context of %d tokens",
                 r->n_prompt, g->e->cfg.seq_len);
        na_off_refuse(g, q, r->n_prompt < 1 ? NA_ERR_INVALID : NA_ERR_RANGE, why);
        return NA_OK;
    }
    if (max_tok > g->e->cfg.seq_len)
        max_tok = g->e->cfg.seq_len;
    na_off_pick_xcache(g, q);
    if (q->xc == NULL) {
        q->wid = na_asvc_new_id(g->svc);
        /* hit: its first tokens are there; a chunked prompt's end is said */
        st = na_off_prefix_open(g, q, max_tok, na_off_chunked(g, q) ? r->n_prompt : 0, &hit);
        r->n_cached = hit;
        if (st == NA_ERR_NOSPACE && g->n_live > 0)
            return NA_ERR_NOSPACE;
        if (st != NA_OK) {
            snprintf(why, sizeof(why), "no storage node took the request: %s", na_errmsg());
            na_off_refuse(g, q, st, why);
            return NA_OK;
        }
        q->opened = 1;
        st = na_off_open_replicas(g, q, max_tok, why, sizeof(why));
        if (st == NA_ERR_NOSPACE && g->n_live > 0) {
            na_asvc_release(g->svc, q->wid, 0);
            q->opened = 0;
            return NA_ERR_NOSPACE;
        }
        if (st != NA_OK) {
            na_off_refuse(g, q, st, why);    /* releases what opened */
            return NA_OK;
        }
    }
    g->n_live++;
    r->state = NA_REQ_PREFILL;
    q->batch = batch;                   /* it joins the batch (the caller adds it) */
    if (na_off_chunked(g, q)) {
        /* its prompt goes to its owners in chunks, in the batch's steps,
         * from the end of a prefix its owner holds already (hit tokens) */
        q->pf_done = hit;
        q->pf_seen = hit;
        q->pf_target = r->n_prompt;
        q->pf_first = 1;
        return NA_OK;
    }
    t0 = na_now_s();
    st = na_off_prefill_local(g, q, r->n_prompt);
    r->n_pos = r->n_prompt;
    g->st->prefill_s += na_now_s() - t0;
    if (st != NA_OK)
        return st;
    if (q->xc == NULL) {
        t0 = na_now_s();
        st = na_off_ship(g, q, why, sizeof(why));    /* rotational (no re-placement) */
        g->st->ship_s += na_now_s() - t0;
        if (st != NA_OK) {
            na_off_fail(g, q, st, why);
            return NA_OK;
        }
    }
    na_lkv_destroy(r->kv);
    r->kv = NULL;
    na_off_take_token(g, q, g->pacts->logits);
    return NA_OK;
}

na_status_t na_off_recover(na_off_t *g, na_off_req_t *q)
{
    na_request_t *r = q->r;
    int max_tok = r->n_prompt + r->max_new, hit = 0;
    char why[2 * NA_ASVC_REASON_MAX + 192];
    na_status_t st;

    if (max_tok > g->e->cfg.seq_len)
        max_tok = g->e->cfg.seq_len;
    q->recover = 0;
    na_asvc_release(g->svc, q->wid, (int)NA_ERR_PEER);      /* what is left of it */
    q->opened = 0;
    q->wid = na_asvc_new_id(g->svc);
    /* another node may hold its prefix; it is told where the prefill ends
     * (the prompt, or for a request that was decoding all but its last
     * output: below) */
    st = na_off_prefix_open(g, q, max_tok, q->pf_first && q->pf_target > 0 ? r->n_prompt
                                                                            : r->n_pos, &hit);
    if (st != NA_OK) {
        snprintf(why, sizeof(why), "%s; no other storage node took it: %s", q->lost,
                 na_errmsg());
        na_off_fail(g, q, st, why);
        return NA_OK;
    }
    q->opened = 1;
    g->st->recovered++;
    if (hit > 0)
        na_log_warn("request %d: re-placed; its new storage node holds the first %d tokens "
                    "of its prompt already", r->id, hit);
    /* chunked prefill again from token 0, or from the end of a prefix the
     * new owner holds (hit): a request still in its prompt feeds the prompt
     * (and samples its first token at the end); one that was decoding feeds
     * positions up to n_pos-1 (the prompt and all outputs but the last,
     * which its next step feeds) and goes on decoding */
    r->state = NA_REQ_PREFILL;
    q->pf_done = hit;
    if (q->pf_first && q->pf_target > 0) {
        q->pf_target = r->n_prompt;
    } else {
        q->pf_first = 0;
        q->pf_target = r->n_pos;
    }
    return NA_OK;
}

/* ---- the waiting queue --------------------------------------------------- */

na_off_req_t *na_off_pop_wait(na_off_t *g)
{
    na_off_req_t **pp = &g->wait_head, *q, *prev = NULL;

    while ((q = *pp) != NULL && na_off_prefix_wait(g, q)) {
        if (!q->pfx_waited) {
            q->pfx_waited = 1;
            g->st->prefix_waits++;
        }
        prev = q;
        pp = &q->next_wait;
    }
    if (q == NULL)
        return NULL;
    *pp = q->next_wait;
    if (g->wait_tail == q)
        g->wait_tail = prev;
    q->next_wait = NULL;
    g->n_wait--;
    return q;
}

void na_off_cancel_waiting(na_off_t *g)
{
    na_off_req_t **pp = &g->wait_head, *q, *gone = NULL;

    /* unlink first: the callbacks may submit (append to the queue) */
    g->wait_tail = NULL;
    while ((q = *pp) != NULL) {
        if (!q->cancel) {
            g->wait_tail = q;
            pp = &q->next_wait;
            continue;
        }
        *pp = q->next_wait;
        g->n_wait--;
        q->next_wait = gone;
        gone = q;
    }
    while ((q = gone) != NULL) {
        gone = q->next_wait;
        q->next_wait = NULL;
        na_off_refuse(g, q, NA_ERR_CANCELED, "cancelled");
        na_off_forget(g, q);
    }
}

void na_off_wait_front(na_off_t *g, na_off_req_t *q)
{
    q->next_wait = g->wait_head;
    g->wait_head = q;
    if (g->wait_tail == NULL)
        g->wait_tail = q;
    g->n_wait++;
}

na_status_t na_off_req_new(na_off_t *g, na_request_t *r, const na_off_cb_t *cb)
{
    na_off_req_t *q = calloc(1, sizeof(*q));

    if (q == NULL)
        return na_err(NA_ERR_NOMEM, "offload: out of memory for a request");
    q->r = r;
    if (cb != NULL)
        q->cb = *cb;
    else
        q->cb = (na_off_cb_t){ g->o->on_token, g->o->on_done, g->o->on_error, g->o->user };
    q->index = g->n_submitted++;
    q->batch = -1;
    NA_LIST_PUSH(g->all, q, prev_all, next_all);
    if (g->wait_tail != NULL)
        g->wait_tail->next_wait = q;
    else
        g->wait_head = q;
    g->wait_tail = q;
    g->n_wait++;
    return NA_OK;
}

/* compute-node/offload.c — the offload engine object and its requests:
 * create / submit / cancel / progress / destroy, admission into batches,
 * the chunked prefill's bookkeeping (its chunks run in the batches' steps,
 * compute-node/sched.c), local prefill with shipping of the prompt's KV (or
 * keeping its X) for X-cache requests and rotational pipelining, sampling,
 * ending, failing and cancelling requests (see offload.h). The batches'
 * steps and their schedule are in compute-node/sched.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "compute-node/offload_internal.h"
#include "compute-node/prefix.h"
#include "compute-node/replica.h"

/* Release everything request q holds (service KV, X, local KV) and mark it
 * done. */
static void na_off_drop(na_off_t *g, na_off_req_t *q, int status)
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
    na_kv_local_destroy(q->r->kv);
    q->r->kv = NULL;
    q->done = 1;
    g->n_live--;
    g->ended++;
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
    if (q->cancel) {
        q->cancel = 0;
        g->n_cancel--;
    }
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
        if (q->cancel) {
            q->cancel = 0;
            g->n_cancel--;
        }
        na_off_drop(g, q, 0);
        if (q->cb.on_done != NULL)
            q->cb.on_done(q->cb.user, r);   /* may free r: not touched again */
    } else {
        r->state = NA_REQ_DECODE;
    }
}

void na_off_forget(na_off_t *g, na_off_req_t *q)
{
    if (q->prev_all != NULL)
        q->prev_all->next_all = q->next_all;
    else
        g->all = q->next_all;
    if (q->next_all != NULL)
        q->next_all->prev_all = q->prev_all;
    free(q);
}

void na_off_compact(na_off_t *g, na_off_batch_t *b)
{
    int i, k = 0;
    for (i = 0; i < b->n_mem; i++)
        if (!b->mem[i]->done)
            b->mem[k++] = b->mem[i];
        else
            na_off_forget(g, b->mem[i]);
    b->n_mem = k;
}

int na_off_token_at(const na_request_t *r, int i)
{
    return i < r->n_prompt ? r->prompt[i] : r->out[i - r->n_prompt];
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

    na_kv_local_destroy(r->kv);
    r->kv = NULL;
    st = na_kv_local_create(&e->cfg, e->opts.kv_dtype, e->kern, e->kern->mem, &r->kv);
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
        st = na_kv_local_reserve(r->kv, done + n);
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
        na_kv_local_commit(r->kv, done + n);
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
    na_kv_local_t *kv = q->r->kv;
    na_status_t st = na_kv_local_to_host(kv);
    int l;

    for (l = 0; l < kv->n_layers && st == NA_OK; l++) {
        int w = g->n_rep > 1 ? (q->batch + l) % g->n_rep : 0;
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

int na_off_chunked(const na_off_t *g, const na_off_req_t *q)
{
    return q->xc == NULL && g->rep == NULL;
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
        if (st == NA_ERR_PEER && !g->o->no_recover && q->recoveries < 1) {
            snprintf(q->lost, sizeof(q->lost), "%s", why);
            q->recover = 1;              /* re-placed at the end of the step */
            q->recoveries++;
        } else {
            na_off_fail(g, q, st, why);
        }
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

/* Admit request q into batch b: open (unless X-cache), prefill, ship, first
 * token. Returns NA_ERR_NOSPACE (q untouched, stays waiting) when the
 * service has no room and other requests are live; a compute-node error;
 * or NA_OK (q admitted, finished or failed). */
static na_status_t na_off_admit_one(na_off_t *g, na_off_batch_t *b, na_off_req_t *q)
{
    na_request_t *r = q->r;
    int max_tok = r->n_prompt + r->max_new, hit = 0;
    char why[NA_ASVC_REASON_MAX];
    double t0;
    na_status_t st;

    if (r->n_prompt < 1 || r->n_prompt > g->e->cfg.seq_len) {
        g->n_live++;
        r->state = NA_REQ_PREFILL;
        snprintf(why, sizeof(why), r->n_prompt < 1 ? "empty prompt" :
                 "prompt of %d tokens is longer than the model context of %d tokens",
                 r->n_prompt, g->e->cfg.seq_len);
        na_off_fail(g, q, r->n_prompt < 1 ? NA_ERR_INVALID : NA_ERR_RANGE, why);
        return NA_OK;
    }
    if (max_tok > g->e->cfg.seq_len)
        max_tok = g->e->cfg.seq_len;
    na_off_pick_xcache(g, q);
    if (q->xc == NULL) {
        q->wid = na_asvc_new_id(g->svc);
        st = na_off_prefix_open(g, q, max_tok, &hit);   /* hit: its first tokens are there */
        if (st == NA_ERR_NOSPACE && g->n_live > 0)
            return NA_ERR_NOSPACE;
        if (st != NA_OK) {
            g->n_live++;
            r->state = NA_REQ_PREFILL;
            snprintf(why, sizeof(why), "no storage node took the request: %s", na_errmsg());
            na_off_fail(g, q, st, why);
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
            g->n_live++;
            r->state = NA_REQ_PREFILL;
            na_off_fail(g, q, st, why);      /* releases what opened */
            return NA_OK;
        }
    }
    g->n_live++;
    r->state = NA_REQ_PREFILL;
    q->batch = b->id;
    b->mem[b->n_mem++] = q;
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
    na_kv_local_destroy(r->kv);
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
    st = na_off_prefix_open(g, q, max_tok, &hit);   /* another node may hold its prefix */
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

/* Take the first waiting request that need not wait for another's prompt
 * (na_off_prefix_wait) off the queue; NULL when every one must. */
static na_off_req_t *na_off_pop_wait(na_off_t *g)
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
        g->n_live++;                /* na_off_drop counts it out */
        na_off_cancel_now(g, q);
        na_off_forget(g, q);
    }
}

na_status_t na_off_admit(na_off_t *g, na_off_batch_t *b)
{
    int target;
    na_status_t st;

    if (g->n_wait == 0 || g->blocked_at == g->ended)
        return NA_OK;       /* nothing waits, or no room since the last refusal */
    /* spread the waiting requests over the batches */
    target = (g->n_wait + g->n_live + g->n_batches - 1) / g->n_batches;
    if (target > g->max_batch)
        target = g->max_batch;
    if (target < 1)
        target = 1;
    while (g->n_wait > 0 && b->n_mem < target) {
        na_off_req_t *q = na_off_pop_wait(g);
        if (q == NULL)
            break;                  /* those left wait for a prompt sharing their prefix */
        st = na_off_admit_one(g, b, q);
        if (st == NA_ERR_NOSPACE) {
            q->next_wait = g->wait_head;  /* back to the front: it stays first */
            g->wait_head = q;
            if (g->wait_tail == NULL)
                g->wait_tail = q;
            g->n_wait++;
            g->blocked_at = g->ended;   /* queue: retry when a request leaves */
            break;
        }
        if (q->done && q->batch < 0)
            na_off_forget(g, q);        /* refused before it joined the batch */
        if (st != NA_OK)
            return st;
    }
    na_off_compact(g, b);
    return NA_OK;
}

/* Free the batches and the engine's buffers (not the requests). */
static void na_off_free_buffers(na_off_t *g)
{
    int i;

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
    na_acts_destroy(g->pacts);
    free(g->ptok);
    free(g->ppos);
    free(g->scratch);
}

/* The options' checks against the model and the service. */
static na_status_t na_off_check_opts(na_engine_t *e, na_asvc_t *svc, const na_off_opts_t *opts)
{
    na_status_t st;

    if (opts->batches_in_flight < 1 || opts->batches_in_flight > NA_OFF_MAX_BATCHES)
        return na_err(NA_ERR_RANGE, "offload: batches_in_flight %d out of range [1, %d]",
                      opts->batches_in_flight, NA_OFF_MAX_BATCHES);
    if (svc->mc.n_layers != e->cfg.n_layers || svc->mc.n_heads != e->cfg.n_heads ||
        svc->mc.n_kv_heads != e->cfg.n_kv_heads || svc->mc.head_dim != e->cfg.head_dim)
        return na_err(NA_ERR_INVALID, "offload: the attention service serves another shape");
    if (opts->prefill_chunk > NA_OFF_MAX_PREFILL_CHUNK)
        return na_err(NA_ERR_RANGE, "offload: prefill_chunk %d out of range [1, %d]",
                      opts->prefill_chunk, NA_OFF_MAX_PREFILL_CHUNK);
    if (opts->rep != NULL && opts->xcache)
        return na_err(NA_ERR_UNSUPPORTED, "offload: the X-cache is not available with "
                      "rotational pipelining (X lives on one replica)");
    if (opts->xcache) {
        st = na_xcache_check(&e->cfg);
        if (st != NA_OK)
            return st;
        if (!(opts->xcache_share > 0.0 && opts->xcache_share <= 1.0))
            return na_err(NA_ERR_RANGE, "offload: xcache share %g out of range (0, 1]",
                          opts->xcache_share);
        if (opts->xcache_host_mb <= 0)
            na_log_warn("offload: xcache is enabled with host_mb 0: no request can keep X; "
                        "set xcache.host_mb");
    }
    return NA_OK;
}

/* Allocate batch b's buffers for mb members. */
static na_status_t na_off_batch_init(na_off_t *g, na_off_batch_t *b, int id, int mb)
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

na_status_t na_off_create(na_engine_t *e, na_asvc_t *svc, const na_off_opts_t *opts,
                          na_off_t **g_p)
{
    na_off_t *g;
    na_status_t st;
    int i;

    st = na_off_check_opts(e, svc, opts);
    if (st != NA_OK)
        return st;
    g = calloc(1, sizeof(*g));
    if (g == NULL)
        return na_err(NA_ERR_NOMEM, "offload: out of memory");
    g->e = e;
    g->svc = svc;
    g->opts = *opts;
    g->o = &g->opts;
    g->st = &g->stats;
    g->t_create = na_now_s();
    g->max_batch = opts->max_batch > 0 ? opts->max_batch : 64;
    g->prefill_chunk = opts->prefill_chunk > 0 ? opts->prefill_chunk
                                               : NA_OFF_DEFAULT_PREFILL_CHUNK;
    g->n_batches = opts->batches_in_flight;
    g->rep = opts->rep;
    g->n_rep = na_rep_count(opts->rep);
    if (opts->prefix_reuse)
        na_pfx_fingerprint(e->model, g->pfx_fp);
    g->blocked_at = -1;
    g->xc_budget = opts->xcache_host_mb << 20;
    g->scratch = malloc((size_t)e->cfg.vocab_size * sizeof(*g->scratch));
    g->ptok = malloc((size_t)e->opts.max_rows * sizeof(int));
    g->ppos = malloc((size_t)e->opts.max_rows * sizeof(int));
    if (g->scratch == NULL || g->ptok == NULL || g->ppos == NULL) {
        st = na_err(NA_ERR_NOMEM, "offload: out of memory");
        goto err_free_buffers;
    }
    st = na_acts_create(e, e->opts.max_rows, 1, &g->pacts);
    for (i = 0; i < g->n_batches && st == NA_OK; i++)
        st = na_off_batch_init(g, &g->b[i], i, g->max_batch);
    if (st != NA_OK)
        goto err_free_buffers;
    na_rep_attach_service(g->rep, svc);
    *g_p = g;
    return NA_OK;

err_free_buffers:
    na_off_free_buffers(g);
    free(g);
    return st;
}

na_status_t na_off_submit(na_off_t *g, na_request_t *r, const na_off_cb_t *cb)
{
    na_off_req_t *q;

    if (g->fatal != NA_OK)
        return na_err(g->fatal, "offload: the engine stopped after an error");
    if (r == NULL || r->state != NA_REQ_WAITING)
        return na_err(NA_ERR_INVALID, "offload: request %d is not waiting (state %d)",
                      r ? r->id : -1, r ? (int)r->state : -1);
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        return na_err(NA_ERR_NOMEM, "offload: out of memory for a request");
    q->r = r;
    if (cb != NULL)
        q->cb = *cb;
    else
        q->cb = (na_off_cb_t){ g->o->on_token, g->o->on_done, g->o->on_error, g->o->user };
    q->index = g->n_submitted++;
    q->batch = -1;
    q->next_all = g->all;
    if (g->all != NULL)
        g->all->prev_all = q;
    g->all = q;
    if (g->wait_tail != NULL)
        g->wait_tail->next_wait = q;
    else
        g->wait_head = q;
    g->wait_tail = q;
    g->n_wait++;
    return NA_OK;
}

na_status_t na_off_cancel(na_off_t *g, na_request_t *r)
{
    na_off_req_t *q;

    for (q = g->all; q != NULL; q = q->next_all)
        if (q->r == r && !q->done)
            break;
    if (q == NULL)
        return na_err(NA_ERR_NOT_FOUND, "offload: request %d is not held by this engine",
                      r ? r->id : -1);
    if (!q->cancel) {
        q->cancel = 1;
        g->n_cancel++;
    }
    return NA_OK;
}

na_status_t na_off_progress(na_off_t *g, int timeout_ms)
{
    if (g->fatal != NA_OK)
        return na_err(g->fatal, "offload: the engine stopped after an error");
    g->fatal = na_off_sched_run(g, timeout_ms < 0 ? -1.0 : na_now_s() + 1e-3 * timeout_ms);
    return g->fatal;
}

int na_off_pending(const na_off_t *g)
{
    return g->n_wait + g->n_live;
}

void na_off_stats(na_off_t *g, na_off_stats_t *out)
{
    *out = g->stats;
    out->prefill_chunk = g->prefill_chunk;
    na_asvc_stats(g->svc, &out->svc);
    out->wall_s = na_now_s() - g->t_create;
}

void na_off_destroy(na_off_t *g)
{
    na_off_req_t *q;

    if (g == NULL)
        return;
    if (na_off_sched_drain(g) == 0)
        na_off_free_buffers(g);
    else
        na_log_warn("offload: attention still in flight at destroy; its buffers are kept");
    while ((q = g->all) != NULL) {
        if (!q->done) {
            na_request_t *r = q->r;
            if (q->opened) {
                int w;
                na_asvc_release(g->svc, q->wid, (int)NA_ERR_CANCELED);
                for (w = 1; w < g->n_rep; w++)
                    na_rep_release(g->rep, w, q->wid, (int)NA_ERR_CANCELED);
            }
            if (q->xc != NULL)
                na_xcache_destroy(q->xc);
            na_kv_local_destroy(r->kv);
            r->kv = NULL;
            r->state = NA_REQ_DONE;
            r->finish = NA_FINISH_NONE;
        }
        na_off_forget(g, q);
    }
    na_rep_attach_service(g->rep, NULL);
    free(g);
}

na_status_t na_offload_generate(na_engine_t *e, na_asvc_t *svc, na_request_t **reqs, int n,
                                const na_off_opts_t *opts, na_off_stats_t *stats)
{
    double t0 = na_now_s();
    na_off_t *g;
    na_status_t st;
    int i;

    if (stats != NULL)
        memset(stats, 0, sizeof(*stats));
    st = na_off_create(e, svc, opts, &g);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n && st == NA_OK; i++)
        st = na_off_submit(g, reqs[i], NULL);
    if (st == NA_OK)
        st = na_off_progress(g, -1);
    if (stats != NULL) {
        na_off_stats(g, stats);
        stats->wall_s = na_now_s() - t0;
    }
    na_off_destroy(g);
    return st;
}

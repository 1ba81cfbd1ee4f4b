/* compute-node/generate.c — requests and the batched prefill/decode loop of
 * the monolithic engine (see generate.h). */
#include "common/clock.h"
#include "compute-node/generate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

na_status_t na_request_create(const na_engine_t *e, int id, const int *prompt,
                              int n_prompt, int max_new, const na_sampler_cfg_t *scfg,
                              na_request_t **r_p)
{
    na_sampler_t sampler;
    na_request_t *r;
    na_status_t st;
    int i, cap_out = max_new;

    if (n_prompt <= 0)
        return na_err(NA_ERR_INVALID, "request %d: empty prompt", id);
    if (n_prompt > e->cfg.seq_len)
        return na_err(NA_ERR_RANGE,
                      "prompt of %d tokens is longer than the model context of %d tokens",
                      n_prompt, e->cfg.seq_len);
    if (max_new <= 0)
        return na_err(NA_ERR_INVALID, "request %d: number of new tokens %d must be > 0",
                      id, max_new);
    for (i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->cfg.vocab_size)
            return na_err(NA_ERR_INVALID, "request %d: prompt token %d = %d outside [0, %d)",
                          id, i, prompt[i], e->cfg.vocab_size);
    st = na_sampler_init(&sampler, scfg, e->cfg.vocab_size);
    if (st != NA_OK)
        return st;
    /* no more than seq_len - n_prompt + 1 tokens can come out */
    if (cap_out > e->cfg.seq_len - n_prompt + 1)
        cap_out = e->cfg.seq_len - n_prompt + 1;
    /* one block: the request, then its prompt copy, then its output */
    r = calloc(1, sizeof(*r) + (size_t)(n_prompt + cap_out) * sizeof(int));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "request %d: out of memory", id);
    r->id = id;
    r->n_prompt = n_prompt;
    r->max_new = max_new;
    r->prompt = (int *)(r + 1);
    r->out = r->prompt + n_prompt;
    memcpy(r->prompt, prompt, (size_t)n_prompt * sizeof(int));
    r->sampler = sampler;
    *r_p = r;
    return NA_OK;
}

void na_request_destroy(na_request_t *r)
{
    if (r == NULL)
        return;
    na_lkv_destroy(r->kv);
    free(r);
}

/* Monotonic wall clock in seconds. */
/* The state of one na_generate call: the step being built and the set of
 * admitted requests. */
typedef struct {
    na_engine_t         *e;
    const na_gen_opts_t *opts;
    na_gen_stats_t      *stats;
    na_acts_t           *acts;
    na_request_t       **active;   /* [max_batch] admitted, not done */
    int                  n_active;
    int                 *tokens;   /* [max_rows] step input */
    int                 *pos;      /* [max_rows] */
    na_step_seg_t       *seg;      /* [max_batch] */
    na_request_t       **seg_req;  /* [max_batch] request of each segment */
    na_prob_index_t     *scratch;  /* [vocab_size] nucleus sampling, shared */
} na_gen_t;

static int na_gen_is_stop(const int *stop_ids, int n_stop, int token)
{
    int i;
    for (i = 0; i < n_stop; i++)
        if (stop_ids[i] == token)
            return 1;
    return 0;
}

int na_request_take(na_request_t *r, int t, const int *stop_ids, int n_stop, int seq_len,
                    na_gen_token_fn on_token, void *user)
{
    if (na_gen_is_stop(stop_ids, n_stop, t)) {
        r->finish = NA_FINISH_STOP;
        return 0;
    }
    r->out[r->n_out++] = t;
    r->last = t;
    if (on_token != NULL)
        on_token(user, r, t);
    if (r->n_out >= r->max_new)
        r->finish = NA_FINISH_LENGTH;
    else if (r->n_pos >= seq_len)
        r->finish = NA_FINISH_CONTEXT;   /* no position left to feed t */
    return 1;
}

na_status_t na_request_force(na_request_t *r, const int *force, double *logprob)
{
    int k;

    if (r->state != NA_REQ_WAITING || r->n_out > 0)
        return na_err(NA_ERR_INVALID, "request %d: forced tokens must be set before it runs",
                      r->id);
    for (k = 0; k < r->max_new; k++)
        if (force[k] < 0 || force[k] >= r->sampler.vocab_size)
            return na_err(NA_ERR_INVALID, "request %d: forced token %d = %d outside [0, %d)",
                          r->id, k, force[k], r->sampler.vocab_size);
    r->force = force;
    r->force_lp = logprob;
    return NA_OK;
}

na_status_t na_request_sample(na_request_t *r, float *logits, na_prob_index_t *scratch,
                              int *t)
{
    if (r->force != NULL) {             /* teacher forcing: score, don't sample */
        if (!na_sampler_all_finite(logits, r->sampler.vocab_size))
            *t = NA_SAMPLER_NOT_FINITE;
        else {
            *t = r->force[r->n_out];
            r->force_lp[r->n_out] = na_sampler_logprob(logits, r->sampler.vocab_size, *t);
        }
    } else {
        *t = na_sampler_sample(&r->sampler, logits, scratch);
    }
    if (*t == NA_SAMPLER_NOT_FINITE)
        return na_err(NA_ERR_RANGE, "logits are not finite (NaN/Inf) at token %d", r->n_pos);
    return NA_OK;
}

/* Sample request r's next token from its logits row and decide whether it
 * ends; a finished (or failed) request's KV is freed at once. */
static void na_gen_take_token(na_gen_t *g, na_request_t *r, float *logits)
{
    int t;
    na_status_t st = na_request_sample(r, logits, g->scratch, &t);

    if (st != NA_OK) {
        g->stats->failed++;
        r->state = NA_REQ_DONE;
        r->finish = NA_FINISH_NONE;
        na_lkv_destroy(r->kv);
        r->kv = NULL;
        if (g->opts->on_error != NULL) {
            char why[128];
            snprintf(why, sizeof(why), "%s", na_errmsg());
            g->opts->on_error(g->opts->user, r, st, why);
        }
        if (g->opts->on_done != NULL)
            g->opts->on_done(g->opts->user, r);
        return;
    }
    g->stats->gen_tokens += na_request_take(r, t, g->opts->stop_ids, g->opts->n_stop,
                                            g->e->cfg.seq_len, g->opts->on_token,
                                            g->opts->user);
    if (r->finish != NA_FINISH_NONE) {
        r->state = NA_REQ_DONE;
        na_lkv_destroy(r->kv);
        r->kv = NULL;
        if (g->opts->on_done != NULL)
            g->opts->on_done(g->opts->user, r);
    } else {
        r->state = NA_REQ_DECODE;
    }
}

/* Sum of the KV bytes of the admitted requests, folded into the peak. */
static void na_gen_note_kv(na_gen_t *g)
{
    size_t sum = 0;
    int i;
    for (i = 0; i < g->n_active; i++)
        if (g->active[i]->kv != NULL)
            sum += na_lkv_bytes(g->active[i]->kv);
    if (sum > g->stats->kv_bytes_peak)
        g->stats->kv_bytes_peak = sum;
}

/* Run one step over the g->seg[0..n_seg) built by the caller. */
static na_status_t na_gen_run_step(na_gen_t *g, int n_rows, int n_seg)
{
    na_step_t s = { n_rows, n_seg, g->tokens, g->pos, g->seg };
    na_status_t st = na_engine_forward(g->e, g->acts, &s);
    if (st == NA_OK)
        na_gen_note_kv(g);
    return st;
}

/* Prefill every admitted request in state PREFILL: their remaining prompt
 * tokens are stacked into steps of at most max_rows rows; a request whose
 * prompt completes in a step samples its first token from that step. */
static na_status_t na_gen_prefill(na_gen_t *g)
{
    int max_rows = g->e->opts.max_rows;
    double t0 = na_now_s();
    na_status_t st = NA_OK;
    int i, j;

    for (;;) {
        int rows = 0, n_seg = 0;
        for (i = 0; i < g->n_active && rows < max_rows; i++) {
            na_request_t *r = g->active[i];
            int n;
            if (r->state != NA_REQ_PREFILL)
                continue;
            n = r->n_prompt - r->n_pos;
            if (n > max_rows - rows)
                n = max_rows - rows;
            for (j = 0; j < n; j++) {
                g->tokens[rows + j] = r->prompt[r->n_pos + j];
                g->pos[rows + j] = r->n_pos + j;
            }
            g->seg[n_seg] = (na_step_seg_t){ rows, n, r->n_pos, r->kv };
            g->seg_req[n_seg] = r;
            n_seg++;
            rows += n;
        }
        if (n_seg == 0)
            break;
        st = na_gen_run_step(g, rows, n_seg);
        if (st != NA_OK)
            break;
        g->stats->prefill_steps++;
        g->stats->prompt_tokens += rows;
        for (i = 0; i < n_seg; i++) {
            na_request_t *r = g->seg_req[i];
            r->n_pos += g->seg[i].n_tok;
            if (r->n_pos == r->n_prompt)
                na_gen_take_token(g, r, g->acts->logits +
                                        (size_t)i * (size_t)g->e->cfg.vocab_size);
        }
    }
    g->stats->prefill_s += na_now_s() - t0;
    return st;
}

/* One decode step: every request in state DECODE feeds its last token. */
static na_status_t na_gen_decode(na_gen_t *g)
{
    double t0 = na_now_s();
    na_status_t st;
    int i, n_seg = 0;

    for (i = 0; i < g->n_active; i++) {
        na_request_t *r = g->active[i];
        if (r->state != NA_REQ_DECODE)
            continue;
        g->tokens[n_seg] = r->last;
        g->pos[n_seg] = r->n_pos;
        g->seg[n_seg] = (na_step_seg_t){ n_seg, 1, r->n_pos, r->kv };
        g->seg_req[n_seg] = r;
        n_seg++;
    }
    if (n_seg == 0)
        return NA_OK;
    st = na_gen_run_step(g, n_seg, n_seg);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n_seg; i++) {
        na_request_t *r = g->seg_req[i];
        r->n_pos++;
        na_gen_take_token(g, r, g->acts->logits + (size_t)i * (size_t)g->e->cfg.vocab_size);
    }
    g->stats->decode_steps++;
    g->stats->decode_tokens += n_seg;
    g->stats->decode_s += na_now_s() - t0;
    return NA_OK;
}

/* Drop finished requests from the active set, keeping order. */
static void na_gen_compact(na_gen_t *g)
{
    int i, k = 0;
    for (i = 0; i < g->n_active; i++)
        if (g->active[i]->state != NA_REQ_DONE)
            g->active[k++] = g->active[i];
    g->n_active = k;
}

na_status_t na_generate(na_engine_t *e, na_request_t **reqs, int n,
                        const na_gen_opts_t *opts, na_gen_stats_t *stats)
{
    na_gen_stats_t local_stats;
    na_gen_t g;
    na_status_t st = NA_OK;
    int max_batch = opts->max_batch > 0 && opts->max_batch < n ? opts->max_batch : n;
    int max_rows = e->opts.max_rows > max_batch ? e->opts.max_rows : max_batch;
    int next = 0;

    memset(&g, 0, sizeof(g));
    g.e = e;
    g.opts = opts;
    g.stats = stats != NULL ? stats : &local_stats;
    memset(g.stats, 0, sizeof(*g.stats));
    if (n <= 0)
        return NA_OK;
    g.active = calloc((size_t)max_batch, sizeof(*g.active));
    g.seg = calloc((size_t)max_batch, sizeof(*g.seg));
    g.seg_req = calloc((size_t)max_batch, sizeof(*g.seg_req));
    g.tokens = calloc((size_t)max_rows, sizeof(*g.tokens));
    g.pos = calloc((size_t)max_rows, sizeof(*g.pos));
    g.scratch = malloc((size_t)e->cfg.vocab_size * sizeof(*g.scratch));
    if (!g.active || !g.seg || !g.seg_req || !g.tokens || !g.pos || !g.scratch) {
        st = na_err(NA_ERR_NOMEM, "generate: out of memory for a batch of %d", max_batch);
        goto out_free;
    }
    st = na_acts_create(e, max_rows, max_batch, &g.acts);
    if (st != NA_OK)
        goto out_free;

    while (next < n || g.n_active > 0) {
        /* admit waiting requests into free slots */
        int admitted = 0;
        while (next < n && g.n_active < max_batch) {
            na_request_t *r = reqs[next++];
            st = na_lkv_create(&e->cfg, e->opts.kv_dtype, e->kern, e->kern->mem,
                                    &r->kv);
            if (st != NA_OK)
                goto out_destroy_acts;
            r->state = NA_REQ_PREFILL;
            g.active[g.n_active++] = r;
            admitted++;
        }
        if (admitted > 0) {
            st = na_gen_prefill(&g);
            if (st != NA_OK)
                goto out_destroy_acts;
        }
        na_gen_compact(&g);
        st = na_gen_decode(&g);
        if (st != NA_OK)
            goto out_destroy_acts;
        na_gen_compact(&g);
    }

out_destroy_acts:
    na_acts_destroy(g.acts);
out_free:
    free(g.scratch);
    free(g.pos);
    free(g.tokens);
    free(g.seg_req);
    free(g.seg);
    free(g.active);
    return st;
}

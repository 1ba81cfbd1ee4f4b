/* compute-node/offload.c — the offload engine's API (offload.h): create,
 * submit, cancel, stats, destroy and na_offload_generate; the top of its
 * three layers. The step loop and the batches are the scheduler's
 * (compute-node/sched.c, which defines the API's na_off_progress: the step
 * loop itself, no forwarding layer on every call), the life of each request
 * below it (compute-node/offload_req.c); this file calls down into both and
 * is called by neither. */
#include "compute-node/offload.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "compute-node/prefix.h"
#include "compute-node/replica.h"
#include "compute-node/sched.h"

/* Free the batches and the engine's buffers (not the requests). */
static void na_off_free_buffers(na_off_t *g)
{
    na_off_sched_free(g);
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

na_status_t na_off_create(na_engine_t *e, na_asvc_t *svc, const na_off_opts_t *opts,
                          na_off_t **g_p)
{
    na_off_t *g;
    na_status_t st;

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
    if (st == NA_OK)
        st = na_off_sched_init(g);
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
    if (g->fatal != NA_OK)
        return na_err(g->fatal, "offload: the engine stopped after an error");
    if (r == NULL || r->state != NA_REQ_WAITING)
        return na_err(NA_ERR_INVALID, "offload: request %d is not waiting (state %d)",
                      r ? r->id : -1, r ? (int)r->state : -1);
    return na_off_req_new(g, r, cb);
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

int na_off_pending(const na_off_t *g)
{
    return g->n_wait + g->n_live;
}

void na_off_stats(na_off_t *g, na_off_stats_t *out)
{
    *out = g->stats;
    out->prefill_chunk = g->prefill_chunk;
    out->prefill_weighted = g->pf_peq > 0;
    out->adaptive_batches = g->split.adaptive;
    out->split_steps = g->split.split_steps;
    out->merged_steps = g->split.merged_steps;
    out->split_switches = g->split.switches;
    out->split_trials = g->split.trials;
    out->split_trials_won = g->split.trials_won;
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
    while ((q = g->all) != NULL)
        na_off_discard(g, q);
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

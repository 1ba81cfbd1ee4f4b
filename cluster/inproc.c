/* cluster/inproc.c — the attention service over device slots in this
 * process (cluster/inproc.h): the storage node's slot set
 * (storage-node/slotset.h: slots from the layout, placement, fan-out to the
 * engines, completion reaping) driven directly, without a network.
 *
 * A submitted batch starts on the engines' worker threads at once and is
 * reaped by poll with the engines' non-blocking test, so the compute node's
 * slices of other batches overlap with it; several batches may be on the
 * engines at once (they never share a request). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/inproc.h"
#include "common/clock.h"
#include "storage-node/slotset.h"

#define NA_INPROC_MAX_BATCH 64

typedef struct {
    na_asvc_req_t         link;           /* id, next (first) */
    na_slotset_req_t      sr;
    na_slotset_prompt_t   pr;             /* prefix reuse: the prompt until its
                                             prefill is done (tokens owned) */
    uint32_t             *pr_tokens;
} na_inproc_req_t;

/* A batch on the engines. */
typedef struct {
    na_slotset_batch_t       *b;              /* NULL when not in flight */
    uint64_t                  seq;            /* submit order */
    na_asvc_entry_t          *e;              /* its entries (caller's) */
    int                       n;
    na_attn_entry_t          *ae;             /* [cap] whole-request entries */
    const na_slotset_req_t  **rq;             /* [cap] their requests */
    int                      *owner;          /* [cap] index into e */
    int                       cap;
    double                    t0;
} na_inproc_run_t;

typedef struct {
    na_asvc_t         base;
    na_slotset_t     *ss;
    na_asvc_req_t    *reqs;                  /* open requests (na_inproc_req_t) */
    na_inproc_run_t   run[NA_INPROC_MAX_BATCH];  /* by batch id */
    uint64_t          seq;
    /* batches completed, not yet returned by poll (FIFO) */
    int               done[NA_INPROC_MAX_BATCH];
    int               n_done;
    na_asvc_stats_t   st;
} na_inproc_t;

static na_inproc_req_t *ip_find(na_inproc_t *p, uint64_t id)
{
    return (na_inproc_req_t *)na_asvc_req_find(p->reqs, id);
}

static na_status_t ip_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r;
    na_status_t st;

    if (ip_find(p, req) != NULL)
        return na_err(NA_ERR_BUSY, "inproc: request %llu is already open",
                      (unsigned long long)req);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "inproc: out of memory");
    r->link.id = req;
    st = na_slotset_open(p->ss, &r->sr, req, max_tokens, s->mc.n_kv_heads);
    if (st != NA_OK) {
        free(r);
        return na_err_prefix(st, "inproc: request %llu: ", (unsigned long long)req);
    }
    na_asvc_req_push(&p->reqs, &r->link);
    return NA_OK;
}

static na_status_t ip_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                              const void *v, na_dtype_t dtype, int n_tok)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r = na_asvc_req_get(s, p->reqs, req, "prefill");

    return r == NULL ? NA_ERR_NOT_FOUND
                     : na_slotset_prefill(p->ss, &r->sr, layer, k, v, dtype, (size_t)s->kv_dim,
                                          n_tok);
}

static na_status_t ip_prefill_done(na_asvc_t *s, uint64_t req)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r = na_asvc_req_get(s, p->reqs, req, "prefill_done");
    na_status_t st;

    if (r == NULL)
        return NA_ERR_NOT_FOUND;
    st = na_slotset_prefill_done(p->ss, &r->sr);
    if (st == NA_OK && r->pr_tokens != NULL)     /* its whole blocks to the prefix caches */
        na_slotset_prefix_publish(p->ss, &r->sr, &r->pr);
    free(r->pr_tokens);
    r->pr_tokens = NULL;
    return st;
}

/* Open with the prompt (docs/prefix-reuse.md): the slots' prefix caches
 * attach what they hold of it. */
static na_status_t ip_open_prefix(na_asvc_t *s, uint64_t req, int max_tokens,
                                  const na_asvc_prompt_t *pr, int *hit_p)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r;
    na_status_t st;
    int i, n, hit;

    *hit_p = 0;
    if (pr == NULL || pr->n_tok < 2)
        return ip_open(s, req, max_tokens);
    if (ip_find(p, req) != NULL)
        return na_err(NA_ERR_BUSY, "inproc: request %llu is already open",
                      (unsigned long long)req);
    r = calloc(1, sizeof(*r));
    n = pr->n_tok < max_tokens ? pr->n_tok : max_tokens;
    if (r == NULL || (r->pr_tokens = malloc(sizeof(uint32_t) * (size_t)n)) == NULL) {
        free(r);
        return ip_open(s, req, max_tokens);     /* no reuse for it: prefilled whole */
    }
    r->link.id = req;
    for (i = 0; i < n; i++)
        r->pr_tokens[i] = (uint32_t)pr->tokens[i];
    memcpy(r->pr.fp, pr->fp, NA_KVHASH_FP);
    r->pr.kv_h0 = 0;
    r->pr.tokens = r->pr_tokens;
    r->pr.n_tok = n;
    st = na_slotset_open_near(p->ss, &r->sr, req, max_tokens, s->mc.n_kv_heads, &r->pr);
    if (st != NA_OK) {
        free(r->pr_tokens);
        free(r);
        return na_err_prefix(st, "inproc: request %llu: ", (unsigned long long)req);
    }
    na_asvc_req_push(&p->reqs, &r->link);
    hit = na_slotset_prefix_attach(p->ss, &r->sr, &r->pr);
    if (hit < 0) {
        char why[200];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        s->ops->release(s, req, (int)NA_ERR_INTERNAL);
        return na_err(NA_ERR_INTERNAL, "inproc: request %llu: %s", (unsigned long long)req, why);
    }
    *hit_p = hit;
    return NA_OK;
}

static na_status_t ip_fetch(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok, void *k,
                            void *v, na_dtype_t dtype)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r = na_asvc_req_get(s, p->reqs, req, "fetch");

    if (r == NULL)
        return NA_ERR_NOT_FOUND;
    if (pos0 != 0)
        return na_err(NA_ERR_UNSUPPORTED, "inproc: fetch of rows from %d (the prefix only)", pos0);
    return na_slotset_prefix_read(p->ss, &r->sr, layer, n_tok, k, v, dtype);
}

/* Batch bi completed on the engines: statuses onto its entries, queue it. */
static void ip_complete(na_inproc_t *p, int bi)
{
    na_inproc_run_t *r = &p->run[bi];
    int j;

    for (j = 0; j < r->n; j++) {
        na_asvc_entry_t *e = &r->e[r->owner[j]];
        if (r->ae[j].status != NA_OK && e->status == NA_OK) {
            e->status = r->ae[j].status;
            snprintf(e->reason, sizeof(e->reason), "%s",
                     r->ae[j].reason[0] ? r->ae[j].reason : na_status_string(e->status));
        }
    }
    p->st.attn_s += na_now_s() - r->t0;
    p->done[p->n_done++] = bi;
    r->b = NULL;
}

/* The oldest batch on the engines, or -1. */
static int ip_oldest(const na_inproc_t *p)
{
    int b, best = -1;
    for (b = 0; b < NA_INPROC_MAX_BATCH; b++)
        if (p->run[b].b != NULL && (best < 0 || p->run[b].seq < p->run[best].seq))
            best = b;
    return best;
}

/* Reap the batches that completed (waiting at most wait_us on the oldest). */
static void ip_reap(na_inproc_t *p, int wait_us)
{
    int b, old = ip_oldest(p);

    if (old >= 0 && na_slotset_batch_test(p->ss, p->run[old].b, wait_us))
        ip_complete(p, old);
    for (b = 0; b < NA_INPROC_MAX_BATCH; b++)
        if (p->run[b].b != NULL && na_slotset_batch_test(p->ss, p->run[b].b, 0))
            ip_complete(p, b);
}

/* Wait for every batch on the engines (oldest first). */
static void ip_finish_all(na_inproc_t *p)
{
    int b;
    while ((b = ip_oldest(p)) >= 0) {
        na_slotset_batch_wait(p->ss, p->run[b].b);
        ip_complete(p, b);
    }
}

/* Room for n entries in run r. */
static na_status_t ip_run_reserve(na_inproc_run_t *r, int n)
{
    na_attn_entry_t *ae;
    const na_slotset_req_t **rq;
    int *ow, cap = 2 * (n + 1);

    if (n <= r->cap)
        return NA_OK;
    ae = realloc(r->ae, (size_t)cap * sizeof(*ae));
    if (ae != NULL)
        r->ae = ae;
    rq = ae ? realloc(r->rq, (size_t)cap * sizeof(*rq)) : NULL;
    if (rq != NULL)
        r->rq = rq;
    ow = rq ? realloc(r->owner, (size_t)cap * sizeof(*ow)) : NULL;
    if (ow == NULL)
        return na_err(NA_ERR_NOMEM, "inproc: out of memory for %d entries", n);
    r->owner = ow;
    r->cap = cap;
    return NA_OK;
}

static na_status_t ip_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_run_t *run;
    na_status_t st;
    int i;

    if (batch < 0 || batch >= NA_INPROC_MAX_BATCH || p->run[batch].b != NULL)
        return na_err(NA_ERR_INVALID, "inproc: batch %d already in flight or out of range",
                      batch);
    run = &p->run[batch];
    st = ip_run_reserve(run, n);
    if (st != NA_OK)
        return st;
    run->n = 0;
    for (i = 0; i < n; i++) {
        na_inproc_req_t *r = ip_find(p, e[i].req);
        na_attn_entry_t *a;
        e[i].status = NA_OK;
        e[i].reason[0] = '\0';
        if (r == NULL) {
            e[i].status = NA_ERR_NOT_FOUND;
            snprintf(e[i].reason, sizeof(e[i].reason), "inproc: unknown request %llu",
                     (unsigned long long)e[i].req);
            continue;
        }
        a = &run->ae[run->n];
        memset(a, 0, sizeof(*a));
        a->req = e[i].req;
        a->layer = layer;
        a->n_kv_heads = s->mc.n_kv_heads;
        a->n_q_heads = s->mc.n_heads;
        a->q = e[i].q;
        a->k_new = e[i].k;
        a->v_new = e[i].v;
        a->o = e[i].o;
        a->n_q = e[i].n_q;          /* > 1: a prompt chunk (the slot set splits it) */
        run->rq[run->n] = &r->sr;
        run->owner[run->n++] = i;
    }
    st = na_slotset_batch_begin(p->ss, &run->b);
    if (st == NA_OK)        /* closed here: a small entry runs on this thread */
        st = na_slotset_batch_add_close(p->ss, run->b, run->rq, run->ae, run->n);
    if (st != NA_OK) {
        if (run->b != NULL)
            na_slotset_batch_wait(p->ss, run->b);
        run->b = NULL;
        return st;
    }
    run->seq = ++p->seq;
    run->e = e;
    run->t0 = na_now_s();
    p->st.decode_entries += (uint64_t)n;
    return NA_OK;
}

static na_status_t ip_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    na_inproc_t *p = (na_inproc_t *)s;
    double end = na_now_s() + (timeout_ms > 0 ? timeout_ms : 0) / 1e3;

    (void)na_slotset_poll(p->ss);
    ip_reap(p, 0);
    while (p->n_done == 0 && ip_oldest(p) >= 0) {
        double left = timeout_ms < 0 ? 1.0 : end - na_now_s();   /* < 0: no limit */
        if (timeout_ms == 0 || left <= 0)
            break;
        ip_reap(p, left > 0.01 ? 10000 : (int)(left * 1e6) + 1);
    }
    return na_asvc_done_pop(p->done, &p->n_done, batch_p);
}

static void ip_release(na_asvc_t *s, uint64_t req, int status)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r = ip_find(p, req);

    (void)status;
    if (r == NULL)
        return;
    ip_finish_all(p);               /* their views may still be in use */
    (void)na_asvc_req_unlink(&p->reqs, req);
    (void)na_slotset_release(p->ss, &r->sr);
    free(r->pr_tokens);
    free(r);
}

static void ip_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    na_inproc_t *p = (na_inproc_t *)s;
    int i;

    *out = p->st;
    out->ssd_bytes_read = 0;
    for (i = 0; i < na_slotset_n(p->ss); i++) {
        na_slot_stats_t ss;
        na_slot_stats(na_slotset_slot(p->ss, i), &ss);
        out->ssd_bytes_read += ss.attn.ssd_bytes_read;
    }
}

static void ip_progress(na_asvc_t *s)
{
    (void)na_slotset_poll(((na_inproc_t *)s)->ss);
}

static void ip_destroy(na_asvc_t *s)
{
    na_inproc_t *p = (na_inproc_t *)s;
    int i;

    if (p->ss != NULL) {
        ip_finish_all(p);
        while (p->reqs != NULL)
            ip_release(s, p->reqs->id, 0);
    }
    na_slotset_destroy(p->ss);
    for (i = 0; i < NA_INPROC_MAX_BATCH; i++) {
        free(p->run[i].ae);
        free(p->run[i].rq);
        free(p->run[i].owner);
    }
    free(p);
}

static const na_asvc_ops_t na_inproc_ops = {
    ip_destroy, ip_open, ip_prefill, ip_prefill_done, ip_submit, ip_poll, ip_release, ip_stats,
    ip_progress, NULL,      /* no storage nodes */
    ip_open_prefix, ip_fetch,
};

na_status_t na_inproc_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  na_asvc_t **s_p)
{
    na_slotset_spec_t spec;
    na_inproc_t *p;
    na_status_t st;

    st = na_slotset_spec_layout(cfg, NULL, &spec);
    if (st != NA_OK)
        return na_err_prefix(st, "inproc: ");
    spec.common.kv.n_layers = mc->n_layers;
    spec.common.n_heads = mc->n_heads;
    spec.common.n_kv_heads = mc->n_kv_heads;
    spec.common.kv.head_dim = mc->head_dim;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "inproc: out of memory");
    na_asvc_base_init(&p->base, &na_inproc_ops, "inproc", mc);
    p->base.shares_cores = 1;          /* the slots' engine threads are ours */
    p->base.prefix_block_tokens = cfg->kv.prefix_cache_mb > 0 ? (int)cfg->kv.block_tokens : 0;
    st = na_slotset_create(&spec, &p->ss);
    if (st != NA_OK) {
        free(p);
        return st;
    }
    *s_p = &p->base;
    return NA_OK;
}

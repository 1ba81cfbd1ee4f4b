/* compute-node/attn_service.c — the calls of attn_service.h, dispatched to
 * the implementation's ops table. */
#include <stdlib.h>

#include "common/clock.h"
#include "compute-node/attn_service.h"

na_status_t na_asvc_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    return s->ops->open(s, req, max_tokens);
}

na_status_t na_asvc_open_prefix(na_asvc_t *s, uint64_t req, int max_tokens,
                                const na_asvc_prompt_t *p, int *hit_p)
{
    *hit_p = 0;
    if (s->ops->open_prefix == NULL || p == NULL)
        return s->ops->open(s, req, max_tokens);
    return s->ops->open_prefix(s, req, max_tokens, p, hit_p);
}

na_status_t na_asvc_fetch(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok,
                          void *k, void *v, na_dtype_t dtype)
{
    if (s->ops->fetch == NULL)
        return na_err(NA_ERR_UNSUPPORTED, "%s attention service: no KV fetch", s->kind);
    return s->ops->fetch(s, req, layer, pos0, n_tok, k, v, dtype);
}

na_status_t na_asvc_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                            const void *v, na_dtype_t dtype, int n_tok)
{
    double t0 = na_now_s();
    na_status_t st = s->ops->prefill(s, req, layer, k, v, dtype, n_tok);

    s->prefill_s += na_now_s() - t0;
    if (st == NA_OK)
        s->prefill_bytes += 2u * (uint64_t)n_tok * na_dtype_bytes(dtype, (size_t)s->kv_dim);
    return st;
}

na_status_t na_asvc_prefill_done(na_asvc_t *s, uint64_t req)
{
    double t0 = na_now_s();
    na_status_t st = s->ops->prefill_done(s, req);

    s->prefill_s += na_now_s() - t0;
    return st;
}

void na_asvc_release(na_asvc_t *s, uint64_t req, int status)
{
    s->ops->release(s, req, status);
}

void na_asvc_progress(na_asvc_t *s)
{
    s->ops->progress(s);
}

void na_asvc_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    s->ops->stats(s, out);
    out->prefill_s = s->prefill_s;      /* measured here, for every implementation */
    out->prefill_bytes = s->prefill_bytes;
}

int na_asvc_node_stats(na_asvc_t *s, na_asvc_node_stats_t *out, int cap)
{
    return s->ops->node_stats != NULL && cap > 0 ? s->ops->node_stats(s, out, cap) : 0;
}

void na_asvc_base_init(na_asvc_t *s, const na_asvc_ops_t *ops, const char *kind,
                       const na_model_config_t *mc)
{
    s->ops = ops;
    s->kind = kind;
    s->mc = *mc;
    s->q_dim = mc->n_heads * mc->head_dim;
    s->kv_dim = mc->n_kv_heads * mc->head_dim;
}

na_status_t na_asvc_layout_check(const na_cfg_t *cfg, const char *kind, int max_nodes,
                                 na_dtype_t *kv_dtype_p)
{
    if (cfg->n_storage < 1 || cfg->n_storage > max_nodes)
        return na_err(NA_ERR_RANGE, "%s: %d storage nodes out of range [1, %d]", kind,
                      cfg->n_storage, max_nodes);
    if (cfg->model.kv_dtype != NA_CFG_KV_F16 && cfg->model.kv_dtype != NA_CFG_KV_BF16 &&
        cfg->model.kv_dtype != NA_CFG_KV_F32)
        return na_err(NA_ERR_UNSUPPORTED, "%s: kv_dtype must be f16, bf16 or f32", kind);
    *kv_dtype_p = (na_dtype_t)cfg->model.kv_dtype;
    return NA_OK;
}

uint64_t na_asvc_new_id(na_asvc_t *s)
{
    return ++s->next_req_id;
}

void na_asvc_destroy(na_asvc_t *s)
{
    if (s != NULL)
        s->ops->destroy(s);
}

void *na_asvc_req_get(const na_asvc_t *s, na_asvc_req_t *head, uint64_t id, const char *call)
{
    na_asvc_req_t *r = na_asvc_req_find(head, id);

    if (r == NULL)
        (void)na_err(NA_ERR_NOT_FOUND, "%s: %s of unknown request %llu", s->kind, call,
                     (unsigned long long)id);
    return r;
}

/* ---- the forwarding base: every call passed to the wrapped service ------ */

static na_asvc_t *fwd_in(na_asvc_t *s)
{
    return ((na_asvc_fwd_t *)s)->in;
}

static void fwd_destroy(na_asvc_t *s)
{
    na_asvc_destroy(fwd_in(s));
    free(s);
}

static na_status_t fwd_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    return na_asvc_open(fwd_in(s), req, max_tokens);
}

static na_status_t fwd_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                               const void *v, na_dtype_t dtype, int n_tok)
{
    return na_asvc_prefill(fwd_in(s), req, layer, k, v, dtype, n_tok);
}

static na_status_t fwd_prefill_done(na_asvc_t *s, uint64_t req)
{
    return na_asvc_prefill_done(fwd_in(s), req);
}

static na_status_t fwd_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    return na_asvc_submit(fwd_in(s), batch, layer, e, n);
}

static na_status_t fwd_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    return na_asvc_poll(fwd_in(s), timeout_ms, batch_p);
}

static void fwd_release(na_asvc_t *s, uint64_t req, int status)
{
    na_asvc_release(fwd_in(s), req, status);
}

static void fwd_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    na_asvc_stats(fwd_in(s), out);
}

static void fwd_progress(na_asvc_t *s)
{
    na_asvc_progress(fwd_in(s));
}

static int fwd_node_stats(na_asvc_t *s, na_asvc_node_stats_t *out, int cap)
{
    return na_asvc_node_stats(fwd_in(s), out, cap);
}

static const na_asvc_ops_t na_asvc_fwd_ops = {
    fwd_destroy, fwd_open, fwd_prefill, fwd_prefill_done, fwd_submit, fwd_poll, fwd_release,
    fwd_stats, fwd_progress, fwd_node_stats, NULL, NULL,
};

na_asvc_fwd_t *na_asvc_fwd_new(na_asvc_t *in, size_t size, const char *kind)
{
    na_asvc_fwd_t *f = calloc(1, size);

    if (f == NULL)
        return NULL;
    f->base = *in;
    f->ops = na_asvc_fwd_ops;
    f->base.ops = &f->ops;
    f->base.kind = kind;
    f->in = in;
    return f;
}

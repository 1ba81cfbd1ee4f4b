/* storage-node/attn_engine.c — the engine table: the implementations by
 * registry id (common/engines.h) and the calls that forward to them. */
#include <stdio.h>
#include <string.h>

#include "common/engines.h"
#include "storage-node/attn_engine.h"

extern const na_attn_engine_ops_t na_attn_cpu_ops;    /* attn_cpu.c */
#if NA_HAVE_CSD_ENGINE
extern const na_attn_engine_ops_t na_attn_csd_ops;    /* attn_csd.c */
#endif
#if NA_HAVE_CUDA
extern const na_attn_engine_ops_t na_attn_cuda_ops;   /* attn_cuda.c */
#endif

/* Indexed by na_engine_id_t; NULL = not built (must agree with the registry). */
static const na_attn_engine_ops_t *const na_attn_impl[NA_ENGINE_COUNT] = {
    [NA_ENGINE_CPU] = &na_attn_cpu_ops,
#if NA_HAVE_CSD_ENGINE
    [NA_ENGINE_CSD] = &na_attn_csd_ops,
#endif
#if NA_HAVE_CUDA
    [NA_ENGINE_CUDA] = &na_attn_cuda_ops,
#endif
};

void na_attn_engine_cfg_default(na_attn_engine_cfg_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->n_threads = 1;
    cfg->group = 1;
    cfg->max_kv_heads = 8;
    cfg->split_tokens = 1024;
    cfg->stage_chunks = 8;
    cfg->io_depth = 32;
    cfg->prefetch_layers = 1;
    cfg->kernels = "cpu";
    cfg->csd_device = "0";
    cfg->csd_bytes = 64ull << 20;
    cfg->csd_timeout_ms = 10000;
}

int na_attn_engine_has(int id)
{
    return id >= 0 && id < NA_ENGINE_COUNT && na_attn_impl[id] != NULL;
}

na_status_t na_attn_engine_create(const char *kind, na_kv_store_t *store,
                                  const na_attn_engine_cfg_t *cfg, na_attn_engine_t **e_p)
{
    na_status_t st = na_engine_check(kind);
    int id = na_engine_find(kind);

    if (st != NA_OK)
        return st;
    if (!na_attn_engine_has(id))
        return na_err(NA_ERR_INTERNAL, "attention engine '%s': the registry says built, the "
                      "engine table has no implementation", kind);
    st = na_attn_impl[id]->create(store, cfg, e_p);
    if (st == NA_OK) {
        (*e_p)->ops = na_attn_impl[id];
        snprintf((*e_p)->kind, sizeof((*e_p)->kind), "%s", kind);
    }
    return st;
}

void na_attn_engine_destroy(na_attn_engine_t *e)
{
    if (e != NULL)
        e->ops->destroy(e);
}

na_status_t na_attn_batch_begin(na_attn_engine_t *e, na_attn_batch_t **b_p)
{
    return e->ops->begin(e, b_p);
}

na_status_t na_attn_submit(na_attn_engine_t *e, na_attn_batch_t *b, na_attn_entry_t *entries,
                           int n)
{
    int i;

    for (i = 0; i < n; i++)
        if (entries[i].n_q > 1 && !e->ops->block_queries)
            return na_err(NA_ERR_INVALID, "attention engine '%s' takes one query per entry, "
                          "given %d (request %llu)", e->kind, entries[i].n_q,
                          (unsigned long long)entries[i].req);
    return e->ops->submit(e, b, entries, n);
}

na_status_t na_attn_batch_close(na_attn_engine_t *e, na_attn_batch_t *b)
{
    return e->ops->close(e, b);
}

na_status_t na_attn_batch_test(na_attn_engine_t *e, na_attn_batch_t *b, int wait_us, int *done)
{
    return e->ops->test(e, b, wait_us < 0 ? 0 : wait_us, done);
}

na_status_t na_attn_batch_wait(na_attn_engine_t *e, na_attn_batch_t *b)
{
    return e->ops->wait(e, b);
}

void na_attn_engine_stats(na_attn_engine_t *e, na_attn_stats_t *out)
{
    e->ops->stats(e, out);
}

na_status_t na_attn_entry_check(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                                const na_attn_entry_t *en, na_kv_req_t **r_p)
{
    na_kv_req_t *r = na_kv_find(store, en->req);
    const int n_layers = na_kv_store_cfg(store)->n_layers;
    int n_kvh;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "unknown request %llu", (unsigned long long)en->req);
    n_kvh = na_kv_req_n_kvh(r);
    if (en->layer < 0 || en->layer >= n_layers)
        return na_err(NA_ERR_RANGE, "request %llu: layer %d out of range [0, %d)",
                      (unsigned long long)en->req, en->layer, n_layers);
    if (n_kvh > cfg->max_kv_heads)
        return na_err(NA_ERR_RANGE, "request %llu: %d KV heads, the engine takes at most %d",
                      (unsigned long long)en->req, n_kvh, cfg->max_kv_heads);
    if (en->n_kv_heads != n_kvh || en->n_q_heads != n_kvh * cfg->group)
        return na_err(NA_ERR_INVALID, "request %llu: shapes disagree: %d query / %d KV heads "
                      "sent, slot holds %d KV heads x group %d", (unsigned long long)en->req,
                      en->n_q_heads, en->n_kv_heads, n_kvh, cfg->group);
    if (en->q == NULL || en->o == NULL || (en->k_new == NULL) != (en->v_new == NULL))
        return na_err(NA_ERR_INVALID, "request %llu: missing q, o, k_new or v_new",
                      (unsigned long long)en->req);
    if (en->n_ctx < 0 || (en->n_q > 1 && en->k_new != NULL))
        return na_err(NA_ERR_INVALID, "request %llu: an engine entry of %d queries and %d "
                      "context tokens%s", (unsigned long long)en->req, en->n_q, en->n_ctx,
                      en->k_new != NULL ? " with K/V rows (a block's rows are appended by "
                      "the slot set)" : "");
    *r_p = r;
    return na_kv_req_check(r);
}

int na_attn_engine_blocks(const na_attn_engine_t *e)
{
    return e->ops->block_queries;
}

const char *na_attn_engine_kind(const na_attn_engine_t *e)
{
    return e->kind;
}

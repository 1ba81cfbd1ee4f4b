/* storage-node/attn_engine.c — the engine table: the implementations by
 * registry id (common/engines.h), above them (the calls to an engine are
 * inline in attn_engine.h, straight to its ops table). */
#include <string.h>

#include "common/engines.h"
#include "storage-node/attn_engine.h"

/* Indexed by na_engines_id_t; NULL = not built (must agree with the registry). */
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
    na_status_t st = na_engines_check(kind);
    int id = na_engines_find(kind);

    if (st != NA_OK)
        return st;
    if (!na_attn_engine_has(id))
        return na_err(NA_ERR_INTERNAL, "attention engine '%s': the registry says built, the "
                      "engine table has no implementation", kind);
    return na_attn_engine_create_impl(na_attn_impl[id], na_engines_names[id], store, cfg, e_p);
}

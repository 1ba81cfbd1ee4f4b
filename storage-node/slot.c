/* storage-node/slot.c — a device slot: KV store + attention engine with
 * their budgets, behind the calls a node's main loop makes. */
#include <stdlib.h>
#include <string.h>

#include "storage-node/mkdir.h"
#include "storage-node/slot.h"

void na_slot_common_default(na_slot_common_t *c)
{
    na_attn_engine_cfg_t ec;

    na_attn_engine_cfg_default(&ec);     /* the engine's knobs default there */
    memset(c, 0, sizeof(*c));
    c->kv.kv_dtype = NA_DTYPE_F16;
    c->kv.block_tokens = 64;
    c->kv.spill_interval = 2;
    c->prefetch_layers = ec.prefetch_layers;
    c->n_threads = ec.n_threads;
    c->kv.io_depth = ec.io_depth;
    c->split_tokens = ec.split_tokens;
    c->stage_chunks = ec.stage_chunks;
}

na_status_t na_slot_create(const na_slot_common_t *c, const na_slot_dev_t *dev, na_slot_t **s_p)
{
    na_kv_store_cfg_t kc;
    na_attn_engine_cfg_t ec;
    na_slot_t *s;
    na_status_t st;

    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0)
        return na_err(NA_ERR_INVALID, "slot %s: n_heads %d is not a multiple of n_kv_heads %d",
                      dev->dir ? dev->dir : "(dram)", c->n_heads, c->n_kv_heads);
    if (dev->dir != NULL && dev->dir[0] != '\0' && dev->ssd_bytes > 0) {
        st = na_mkdir_p(dev->dir, 0700);     /* the node creates its KV directory */
        if (st != NA_OK)
            return na_err_prefix(st, "slot %s: ", dev->dir);
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return na_err(NA_ERR_NOMEM, "slot: out of memory");
    s->common = *c;
    kc = c->kv;                     /* the shared settings, then this device's */
    kc.dram_bytes = dev->dram_bytes;
    kc.ssd_bytes = c->no_ssd_tier ? 0 : dev->ssd_bytes;
    kc.dir = dev->dir;
    st = na_kv_store_create(&kc, &s->store);
    if (st != NA_OK)
        goto fail;

    na_attn_engine_cfg_default(&ec);
    ec.n_threads = dev->threads > c->n_threads ? dev->threads : c->n_threads;
    ec.group = c->n_heads / c->n_kv_heads;
    ec.max_kv_heads = c->n_kv_heads;
    ec.split_tokens = c->split_tokens;
    ec.stage_chunks = c->stage_chunks;
    ec.io_depth = c->kv.io_depth;
    ec.prefetch_layers = c->prefetch_layers;
    ec.io_factory = c->kv.io_factory;
    ec.io_arg = c->kv.io_arg;
    if (dev->csd_device != NULL)
        ec.csd_device = dev->csd_device;
    ec.csd_xclbin = dev->csd_xclbin;
    if (dev->csd_bytes > 0)
        ec.csd_bytes = dev->csd_bytes;
    if (dev->csd_timeout_ms > 0)
        ec.csd_timeout_ms = dev->csd_timeout_ms;
    ec.csd_required = c->devices_required;
    ec.gpu = dev->gpu;
    ec.hbm_mb = dev->hbm_mb;
    st = na_attn_engine_create(dev->engine ? dev->engine : "cpu", s->store, &ec, &s->engine);
    if (st != NA_OK)
        goto fail;
    *s_p = s;
    return NA_OK;

fail:
    na_slot_destroy(s);             /* takes the half-built slot */
    return na_err_prefix(st, "slot %s: ", dev->dir ? dev->dir : "(dram)");
}

uint64_t na_slot_capacity(const na_slot_common_t *c, const na_slot_dev_t *dev)
{
    return dev->ssd_bytes && !c->no_ssd_tier ? dev->ssd_bytes : dev->dram_bytes;
}

void na_slot_destroy(na_slot_t *s)
{
    if (s == NULL)
        return;
    na_attn_engine_destroy(s->engine);
    na_kv_store_destroy(s->store);
    free(s);
}

na_status_t na_slot_open(na_slot_t *s, uint64_t req, int max_tokens, int n_kvh)
{
    if (n_kvh < 1 || n_kvh > s->common.n_kv_heads)
        return na_err(NA_ERR_RANGE, "request %llu: %d KV heads out of range [1, %d]",
                      (unsigned long long)req, n_kvh, s->common.n_kv_heads);
    return na_kv_open(s->store, req, max_tokens, n_kvh);
}

na_status_t na_slot_prefill(na_slot_t *s, uint64_t req, int layer, const void *k,
                            const void *v, na_dtype_t src_dtype, size_t row_stride, int n_tok)
{
    na_kv_req_t *r = na_kv_find(s->store, req);

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "prefill: unknown request %llu", (unsigned long long)req);
    if (k == NULL || v == NULL)
        return na_err(NA_ERR_INVALID, "prefill: request %llu: missing K or V", (unsigned long long)req);
    return na_kv_append(s->store, r, layer, k, v, src_dtype, row_stride, n_tok, 1);
}

na_status_t na_slot_prefill_done(na_slot_t *s, uint64_t req)
{
    na_kv_req_t *r = na_kv_find(s->store, req);

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "prefill: unknown request %llu", (unsigned long long)req);
    return na_kv_flush(s->store, r);
}

na_status_t na_slot_decode(na_slot_t *s, na_attn_entry_t *entries, int n)
{
    na_attn_batch_t *b;
    na_status_t st;

    st = na_attn_batch_begin(s->engine, &b);
    if (st != NA_OK)
        return st;
    st = na_attn_submit(s->engine, b, entries, n);
    (void)na_attn_batch_close(s->engine, b);
    (void)na_attn_batch_wait(s->engine, b);
    return st;
}

void na_slot_stats(na_slot_t *s, na_slot_stats_t *out)
{
    na_kv_stats(s->store, &out->kv);
    na_attn_engine_stats(s->engine, &out->attn);
}

void na_slot_stats_sum(na_slot_t *const *s, int n, na_slot_stats_t *out)
{
    int i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < n; i++) {
        na_slot_stats_t x;
        na_kv_stats_t *k = &out->kv;
        na_attn_stats_t *a = &out->attn;
        na_slot_stats(s[i], &x);
        k->dram_used += x.kv.dram_used;
        k->dram_budget += x.kv.dram_budget;
        k->ssd_used += x.kv.ssd_used;
        k->ssd_size += x.kv.ssd_size;
        k->n_requests += x.kv.n_requests;
        k->bytes_appended += x.kv.bytes_appended;
        k->bytes_spilled_dram += x.kv.bytes_spilled_dram;
        k->bytes_written_ssd += x.kv.bytes_written_ssd;
        k->bytes_read_ssd += x.kv.bytes_read_ssd;
        k->n_spills += x.kv.n_spills;
        k->n_refused += x.kv.n_refused;
        a->entries += x.attn.entries;
        a->entries_failed += x.attn.entries_failed;
        a->granules += x.attn.granules;
        a->granules_ssd += x.attn.granules_ssd;
        a->ssd_bytes_read += x.attn.ssd_bytes_read;
        a->prefetch_hits += x.attn.prefetch_hits;
        a->prefetch_issued += x.attn.prefetch_issued;
        a->tokens += x.attn.tokens;
        a->compute_ns += x.attn.compute_ns;
        a->helped += x.attn.helped;
        a->kernel_threads += x.attn.kernel_threads;
        a->batch_ns += x.attn.batch_ns;
        a->io_busy_ns += x.attn.io_busy_ns;
        a->csd_noop |= x.attn.csd_noop;
        a->csd_launches += x.attn.csd_launches;
        a->csd_launch_ns += x.attn.csd_launch_ns;
        a->csd_p2p_bytes += x.attn.csd_p2p_bytes;
        a->csd_host_bytes += x.attn.csd_host_bytes;
        a->cuda_budget += x.attn.cuda_budget;
        a->cuda_bytes += x.attn.cuda_bytes;
        a->cuda_peak += x.attn.cuda_peak;
        a->cuda_fallbacks += x.attn.cuda_fallbacks;
        a->cuda_alloc_failed += x.attn.cuda_alloc_failed;
    }
}

/* common/config_plan.c — lookups on a loaded layout (node by name or rank,
 * head split) and the human-readable plan `nearattn check-config`
 * prints. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/engines.h"
#include "config_internal.h"
#include "model.h"

const na_cfg_node_t *na_cfg_find_node(const na_cfg_t *cfg, const char *name)
{
    int i;

    for (i = 0; name != NULL && i < cfg->n_nodes; i++)
        if (!strcmp(cfg->nodes[i].name, name))
            return &cfg->nodes[i];
    return NULL;
}

const na_cfg_node_t *na_cfg_node_at(const na_cfg_t *cfg, int rank)
{
    return (rank >= 0 && rank < cfg->n_nodes) ? &cfg->nodes[rank] : NULL;
}

void na_cfg_head_split(int n_kv_heads, int n_slots, int slot, int *first_p, int *count_p)
{
    int base, extra;

    if (n_slots <= 0 || n_kv_heads <= 0 || slot < 0 || slot >= n_slots) {
        *first_p = 0;
        *count_p = 0;
        return;
    }
    base = n_kv_heads / n_slots;
    extra = n_kv_heads % n_slots;
    *first_p = slot * base + (slot < extra ? slot : extra);
    *count_p = base + (slot < extra ? 1 : 0);
}

/* The model's shape from its header (na_model_read_config: llama2.c or GGUF,
 * the weights are not read). Returns 1 with *mc filled, 0 with the reason
 * (the reader's message) in why. */
static int na_cfg_peek_model(const char *path, na_model_config_t *mc, char *why, size_t len)
{
    if (na_model_read_config(path, mc) == NA_OK)
        return 1;
    snprintf(why, len, "%s", na_errmsg());
    na_err_clear();
    return 0;
}

/* Print a MiB budget in the largest unit that reads well. */
static void na_cfg_print_mib(FILE *f, long mb)
{
    if (mb >= 1048576)
        fprintf(f, "%.4g TiB", (double)mb / 1048576.0);
    else if (mb >= 1024 && mb % 1024 == 0)
        fprintf(f, "%ld GiB", mb / 1024);
    else if (mb >= 1024)
        fprintf(f, "%.4g GiB", (double)mb / 1024.0);
    else
        fprintf(f, "%ld MiB", mb);
}

/* Print a token count as 123, 4.5k or 6.7M. */
static void na_cfg_print_tokens(FILE *f, double tokens)
{
    if (tokens >= 1e6)
        fprintf(f, "%.1fM", tokens / 1e6);
    else if (tokens >= 1e3)
        fprintf(f, "%.1fk", tokens / 1e3);
    else
        fprintf(f, "%.0f", tokens);
}

int na_cfg_engine_built(na_cfg_engine_t e)
{
    return na_engines_has((int)e);      /* common/engines.c: the registry */
}

int na_cfg_compute_dev_built(na_cfg_compute_dev_t d)
{
    return d == NA_CFG_DEV_CPU || (d == NA_CFG_DEV_CUDA && NA_HAVE_CUDA);
}

const char *na_cfg_built_engines(void)
{
    return na_engines_list();
}

const char *na_cfg_local_compute_backend(const na_cfg_t *cfg, char *buf, size_t cap)
{
    int i;
    for (i = 0; i < cfg->n_nodes; i++) {
        const na_cfg_node_t *n = &cfg->nodes[i];
        if (n->role != NA_CFG_ROLE_COMPUTE || !n->is_local)
            continue;
        if (n->device != NA_CFG_DEV_CUDA)
            return NULL;
        snprintf(buf, cap, "cuda:%ld", n->gpu);
        return buf;
    }
    return NULL;
}

/* Engines and compute devices of nodes on this machine must be built into
 * this nearattn (na_cfg_engine_built); remote nodes only get a plan warning.
 * NA_ERR_UNSUPPORTED at the first one that is not. */
na_status_t na_cfg_check_engines(na_cfg_parse_t *p, const na_cfg_t *cfg)
{
    int i, s;

    for (i = 0; i < cfg->n_nodes; i++) {
        const na_cfg_node_t *n = &cfg->nodes[i];
        if (n->is_local && n->role == NA_CFG_ROLE_COMPUTE && !na_cfg_compute_dev_built(n->device))
            return na_cfg_errat(p, na_cfg_key_at(na_cfg_node_yn(p, n), "device"),
                                NA_ERR_UNSUPPORTED, "compute node '%s' (this machine): device "
                                "%s is not built into this nearattn (available: %s)", n->name,
                                na_cfg_compute_dev_name(n->device), na_cfg_built_engines());
    }
    for (s = 0; s < cfg->n_slots; s++) {
        const na_cfg_node_t *n = &cfg->nodes[cfg->slots[s].node];
        const na_cfg_device_t *dev = &n->devices[cfg->slots[s].dev];
        const na_yn_t *devs = na_cfg_yn_get(na_cfg_node_yn(p, n), "devices");
        const na_yn_t *dm = (devs != NULL && devs->kind == NA_YN_SEQ &&
                             (size_t)cfg->slots[s].dev < devs->n)
                                ? devs->items[cfg->slots[s].dev] : na_cfg_node_yn(p, n);

        if (n->is_local && !na_cfg_engine_built(dev->engine))
            return na_cfg_errat(p, na_cfg_key_at(dm, "engine"), NA_ERR_UNSUPPORTED,
                                "storage node '%s' device %d (this machine): engine %s is not "
                                "built into this nearattn (available: %s)", n->name,
                                cfg->slots[s].dev, na_cfg_engine_name(dev->engine),
                                na_cfg_built_engines());
        if (dev->engine == NA_CFG_ENGINE_CSD && (dev->xclbin == NULL || dev->xclbin[0] == '\0'))
            return na_cfg_errat(p, na_cfg_key_at(dm, "engine"), NA_ERR_INVALID,
                                "storage node '%s' device %d: engine csd needs xclbin (the CSD "
                                "kernel's xclbin; for XRT noop write one with `nearattn "
                                "csd-xclbin --out FILE`)", n->name, cfg->slots[s].dev);
        {
            /* an engine's own keys on a slot of another engine would be ignored */
            static const struct { const char *key; na_cfg_engine_t engine; } own[] = {
                { "csd_device", NA_CFG_ENGINE_CSD }, { "xclbin", NA_CFG_ENGINE_CSD },
                { "csd_mb", NA_CFG_ENGINE_CSD }, { "csd_timeout_ms", NA_CFG_ENGINE_CSD },
                { "hbm_mb", NA_CFG_ENGINE_CUDA },
            };
            size_t i;
            for (i = 0; i < sizeof(own) / sizeof(own[0]); i++)
                if (dev->engine != own[i].engine && na_cfg_yn_get(dm, own[i].key) != NULL)
                    return na_cfg_errat(p, na_cfg_key_at(dm, own[i].key), NA_ERR_INVALID,
                                        "storage node '%s' device %d: %s is a key of engine %s, "
                                        "this slot's engine is %s (remove it or set engine)",
                                        n->name, cfg->slots[s].dev, own[i].key,
                                        na_cfg_engine_name(own[i].engine),
                                        na_cfg_engine_name(dev->engine));
        }
    }
    return NA_OK;
}

/* The node table of the plan: rank, role, name, address, device or slots. */
static void na_cfg_print_nodes(const na_cfg_t *cfg, FILE *f)
{
    int i;

    fprintf(f, "\nnodes (rank = launcher rank: compute first, then storage, in file order)\n");
    for (i = 0; i < cfg->n_nodes; i++) {
        const na_cfg_node_t *n = &cfg->nodes[i];
        fprintf(f, "  %3d  %-7s  %-12s %s", n->rank, na_cfg_role_name(n->role), n->name,
                n->host);
        if (n->port != 0)
            fprintf(f, ":%ld", n->port);
        fprintf(f, "%s", n->is_local ? "  (this machine)" : "");
        if (n->role == NA_CFG_ROLE_COMPUTE) {
            fprintf(f, "  device %s", na_cfg_compute_dev_name(n->device));
            if (n->device == NA_CFG_DEV_CUDA)
                fprintf(f, " %ld", n->gpu);
            fprintf(f, ", %ld thread%s%s\n", n->threads, n->threads == 1 ? "" : "s",
                    n->port == 0 ? ", connects out only" : "");
            if (!na_cfg_compute_dev_built(n->device))
                fprintf(f, "       WARNING: device %s is not built into this nearattn "
                           "(available: %s): host %s needs a nearattn built with it\n",
                        na_cfg_compute_dev_name(n->device), na_cfg_built_engines(), n->host);
        } else {
            fprintf(f, "  %ld slot%s (%d..%d)\n", n->n_devices, n->n_devices == 1 ? "" : "s",
                    n->first_slot, n->first_slot + (int)n->n_devices - 1);
        }
    }
}

/* The slot table of the plan; with a model shape, KV heads and token capacity per slot. */
static void na_cfg_print_slots(const na_cfg_t *cfg, const na_model_config_t *mc, FILE *f)
{
    size_t esize = na_dtype_bytes((na_dtype_t)cfg->model.kv_dtype, 1);
    int s;

    fprintf(f, "\ndevice slots (KV directory, engine, budgets%s)\n",
            mc != NULL ? ", KV heads and token capacity" : "");
    for (s = 0; s < cfg->n_slots; s++) {
        const na_cfg_node_t *n = &cfg->nodes[cfg->slots[s].node];
        const na_cfg_device_t *d = &n->devices[cfg->slots[s].dev];
        fprintf(f, "  slot %-3d %s/d%d  engine %s", s, n->name, cfg->slots[s].dev,
                na_cfg_engine_name(d->engine));
        if (d->engine == NA_CFG_ENGINE_CUDA)
            fprintf(f, " (gpu %ld)", d->gpu);
        if (d->engine == NA_CFG_ENGINE_CSD)
            fprintf(f, " (device %s, xclbin %s, %ld MiB buffer)", d->csd_device ? d->csd_device
                    : "0", d->xclbin ? d->xclbin : "(none)", d->csd_mb);
        fprintf(f, ", %ld thread%s, DRAM ", d->threads, d->threads == 1 ? "" : "s");
        na_cfg_print_mib(f, d->dram_mb);
        fprintf(f, ", SSD ");
        na_cfg_print_mib(f, d->ssd_mb);
        fprintf(f, "\n           %s%s\n", d->path, n->is_local ? "" : "  (remote: not checked)");
        if (!na_cfg_engine_built(d->engine))
            fprintf(f, "           WARNING: engine %s is not built into this nearattn "
                       "(available: %s): host %s needs a nearattn built with it\n",
                    na_cfg_engine_name(d->engine), na_cfg_built_engines(), n->host);
        if (mc != NULL) {
            int first = 0, count = mc->n_kv_heads;
            double per_tok;
            if (cfg->parallel.partition == NA_CFG_PARTITION_HEAD)
                na_cfg_head_split(mc->n_kv_heads, cfg->n_slots, s, &first, &count);
            /* K and V rows of `count` heads in every layer */
            per_tok = 2.0 * mc->n_layers * count * mc->head_dim * (double)esize;
            if (count == 0) {
                fprintf(f, "           KV heads: none (more slots than the model's %d KV heads)\n",
                        mc->n_kv_heads);
                continue;
            }
            fprintf(f, "           KV heads %d..%d, %.0f bytes/token: DRAM holds ", first,
                    first + count - 1, per_tok);
            na_cfg_print_tokens(f, (double)d->dram_mb * 1048576.0 / per_tok);
            fprintf(f, " tokens, SSD ");
            na_cfg_print_tokens(f, (double)d->ssd_mb * 1048576.0 / per_tok);
            fprintf(f, " tokens\n");
        }
    }
}

void na_cfg_print_plan(const na_cfg_t *cfg, FILE *f)
{
    na_model_config_t mc;
    char why[512] = "";
    int have_model = 0, adaptive;

    fprintf(f, "layout     %s (cluster '%s')\n", cfg->file, cfg->cluster.name);
    fprintf(f, "secret     %s, %zu bytes%s\n", cfg->cluster.secret_file, cfg->secret_len,
            cfg->secret_is_dev ? " -- the PUBLIC development secret: not for production" : "");
    if (cfg->model.path != NULL) {
        have_model = na_cfg_peek_model(cfg->model.path, &mc, why, sizeof(why));
        fprintf(f, "model      %s\n", cfg->model.path);
        if (have_model)
            fprintf(f, "           %s: dim %d, %d layers, %d heads, %d KV heads, head dim "
                       "%d, context %d, vocab %d\n", mc.arch, mc.dim, mc.n_layers, mc.n_heads,
                    mc.n_kv_heads, mc.head_dim, mc.seq_len, mc.vocab_size);
        else
            fprintf(f, "           (%s)\n", why);
    } else {
        fprintf(f, "model      (none in the layout: give --model)\n");
    }
    if (cfg->model.tokenizer != NULL)
        fprintf(f, "tokenizer  %s\n", cfg->model.tokenizer);
    fprintf(f, "kv dtype   %s\n", na_dtype_name((na_dtype_t)cfg->model.kv_dtype));
    fprintf(f, "transport  tls %s; timeout %ld ms, heartbeat %ld ms, peer lost after %ld ms\n",
            cfg->transport.tls,
            cfg->transport.timeout_ms, cfg->transport.heartbeat_ms,
            cfg->transport.peer_timeout_ms);

    na_cfg_print_nodes(cfg, f);
    na_cfg_print_slots(cfg, have_model ? &mc : NULL, f);

    fprintf(f, "\nparallel   partition %s: ", na_cfg_partition_name(cfg->parallel.partition));
    if (cfg->parallel.partition == NA_CFG_PARTITION_REQUEST)
        fprintf(f, "each request's KV lives on one of the %d slots, placed to balance bytes "
                   "across slots and nodes\n", cfg->n_slots);
    else
        fprintf(f, "every request's KV heads are split in contiguous ranges over all %d slots "
                   "(slot order above)\n", cfg->n_slots);
    adaptive = cfg->parallel.adaptive_batches && cfg->parallel.batches_in_flight > 1 &&
               cfg->parallel.pipelining == NA_CFG_PIPE_FIXED;
    fprintf(f, "           %s%ld batch%s in flight%s, %s pipelining over %d compute node%s, "
               "at most %ld requests per batch\n", adaptive ? "up to " : "",
            cfg->parallel.batches_in_flight, cfg->parallel.batches_in_flight == 1 ? "" : "es",
            adaptive ? " (adaptive: split only where measured faster than one)" : "",
            na_cfg_pipelining_name(cfg->parallel.pipelining), cfg->n_compute,
            cfg->n_compute == 1 ? "" : "s", cfg->parallel.max_batch);
    fprintf(f, "kv         blocks of %ld tokens, spill every %ld step%s, prefetch %ld layer%s "
               "ahead, tier %s\n", cfg->kv.block_tokens, cfg->kv.spill_interval,
            cfg->kv.spill_interval == 1 ? "" : "s", cfg->kv.prefetch_layers,
            cfg->kv.prefetch_layers == 1 ? "" : "s", na_cfg_tier_name(cfg->kv.tier));
    if (cfg->xcache.enabled) {
        fprintf(f, "xcache     on: %.0f%% of requests keep X, ", cfg->xcache.share * 100.0);
        na_cfg_print_mib(f, cfg->xcache.host_mb);
        fprintf(f, " per compute node%s\n",
                have_model && mc.n_kv_heads < mc.n_heads ? " (GQA model: X-cache will be refused)"
                                                         : "");
    } else {
        fprintf(f, "xcache     off\n");
    }
}

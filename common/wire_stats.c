/* common/wire_stats.c — the STATS key table (see wire_stats.h). */
#include "common/wire_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const na_stat_node_keys[NA_STAT_NODE_COUNT] = {
    [NA_STAT_PEERS]              = "node.peers",
    [NA_STAT_REQUESTS]           = "node.requests",
    [NA_STAT_MSGS]               = "node.msgs",
    [NA_STAT_ERRORS_SENT]        = "node.errors_sent",
    [NA_STAT_PEERS_DROPPED]      = "node.peers_dropped",
    [NA_STAT_PEERS_LOST]         = "node.peers_lost",
    [NA_STAT_OPENS_REFUSED]      = "node.opens_refused",
    [NA_STAT_DECODE_ENTRIES]     = "node.decode_entries",
    [NA_STAT_PREFILL_TOKENS]     = "node.prefill_tokens",
    [NA_STAT_DECODE_NS]          = "node.decode_ns",
    [NA_STAT_DECODE_PARTS_EARLY] = "node.decode_parts_early",
    [NA_STAT_PREFILL_NS]         = "node.prefill_ns",
    [NA_STAT_FETCH_NS]           = "node.fetch_ns",
    [NA_STAT_PREFIX_HIT_TOKENS]  = "node.prefix_hit_tokens",
    [NA_STAT_PREFIX_ASKED_TOKENS] = "node.prefix_asked_tokens",
    [NA_STAT_PREFIX_CACHE_BYTES] = "node.prefix_cache_bytes",
    [NA_STAT_PREFIX_EVICTED]     = "node.prefix_evicted",
    [NA_STAT_PREFIX_COLLISIONS]  = "node.prefix_collisions",
    [NA_STAT_ATTN_THREADS]       = "node.attn_threads",
    [NA_STAT_N_LAYERS]           = "node.n_layers",
    [NA_STAT_N_HEADS]            = "node.n_heads",
    [NA_STAT_N_KV_HEADS]         = "node.n_kv_heads",
    [NA_STAT_HEAD_DIM]           = "node.head_dim",
    [NA_STAT_KV_DTYPE]           = "node.kv_dtype",
};

static const char *const na_stat_slot_keys[NA_STAT_SLOT_COUNT] = {
    [NA_STAT_SLOT_REQUESTS]          = "requests",
    [NA_STAT_SLOT_DRAM_USED]         = "dram_used",
    [NA_STAT_SLOT_DRAM_BUDGET]       = "dram_budget",
    [NA_STAT_SLOT_SSD_USED]          = "ssd_used",
    [NA_STAT_SLOT_SSD_SIZE]          = "ssd_size",
    [NA_STAT_SLOT_BYTES_APPENDED]    = "bytes_appended",
    [NA_STAT_SLOT_BYTES_WRITTEN_SSD] = "bytes_written_ssd",
    [NA_STAT_SLOT_BYTES_READ_SSD]    = "bytes_read_ssd",
    [NA_STAT_SLOT_SPILLS]            = "spills",
    [NA_STAT_SLOT_REFUSED]           = "refused",
    [NA_STAT_SLOT_ATTN_ENTRIES]      = "attn_entries",
    [NA_STAT_SLOT_ATTN_FAILED]       = "attn_failed",
    [NA_STAT_SLOT_ATTN_TOKENS]       = "attn_tokens",
    [NA_STAT_SLOT_PREFETCH_HITS]     = "prefetch_hits",
    [NA_STAT_SLOT_ATTN_COMPUTE_NS]   = "attn_compute_ns",
    [NA_STAT_SLOT_CSD_NOOP]          = "csd_noop",
    [NA_STAT_SLOT_CSD_LAUNCHES]      = "csd_launches",
    [NA_STAT_SLOT_CSD_P2P_BYTES]     = "csd_p2p_bytes",
};

const char *na_stat_node_key(na_stat_node_t id)
{
    return (unsigned)id < NA_STAT_NODE_COUNT ? na_stat_node_keys[id] : NULL;
}

const char *na_stat_slot_key(na_stat_slot_t id)
{
    return (unsigned)id < NA_STAT_SLOT_COUNT ? na_stat_slot_keys[id] : NULL;
}

void na_stat_slot_name(char buf[NA_WIRE_STATS_KEY_MAX], int slot, na_stat_slot_t id)
{
    const char *k = na_stat_slot_key(id);
    snprintf(buf, NA_WIRE_STATS_KEY_MAX, "s%d.%s", slot, k != NULL ? k : "?");
}

/* "s<i>.KEY" -> slot i (-1 when key is not of that form); *rest_p = "KEY". */
static int na_stat_slot_of(const char *key, const char **rest_p)
{
    char *end;
    long s;

    if (key[0] != 's' || key[1] < '0' || key[1] > '9')
        return -1;
    s = strtol(key + 1, &end, 10);
    if (*end != '.' || s < 0 || s >= NA_STATS_MAX_SLOTS)
        return -1;
    *rest_p = end + 1;
    return (int)s;
}

void na_stats_view(const na_wire_stats_t *m, na_stats_view_t *v)
{
    uint32_t k;
    int i;

    memset(v, 0, sizeof(*v));
    for (k = 0; k < m->n; k++) {
        na_wire_stat_t sv;
        const char *rest;
        int slot;
        if (na_wire_stats_get(m, k, &sv) != NA_OK)
            continue;
        if ((slot = na_stat_slot_of(sv.key, &rest)) >= 0) {
            for (i = 0; i < NA_STAT_SLOT_COUNT; i++)
                if (!strcmp(rest, na_stat_slot_keys[i])) {
                    v->slot_sum[i] += sv.value;
                    v->has_slot[i] = 1;
                    if (slot >= v->n_slots)
                        v->n_slots = slot + 1;
                    break;
                }
            continue;
        }
        for (i = 0; i < NA_STAT_NODE_COUNT; i++)
            if (!strcmp(sv.key, na_stat_node_keys[i])) {
                v->node[i] = sv.value;
                v->has_node[i] = 1;
                break;
            }
    }
}

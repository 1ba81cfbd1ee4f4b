/* common/wire_stats.h — the counters a storage node's STATS answer carries:
 * one table of keys both sides use (storage-node/node_dispatch.c writes
 * them, compute-node/attn_remote.c and the benches read them), so that no
 * side matches key strings by hand.
 *
 * Keys on the wire (common/wire.h, na_wire_stat_t): a node counter as
 * "node.KEY", a device slot's as "s<i>.KEY" (i < NA_STATS_MAX_SLOTS). */
#ifndef NA_WIRE_STATS_H
#define NA_WIRE_STATS_H

#include <stdint.h>

#include "common/status.h"
#include "common/wire.h"

/* The node's own counters ("node.KEY"), in the order a node sends them. */
typedef enum {
    NA_STAT_PEERS = 0,
    NA_STAT_REQUESTS,
    NA_STAT_MSGS,
    NA_STAT_ERRORS_SENT,
    NA_STAT_PEERS_DROPPED,
    NA_STAT_PEERS_LOST,
    NA_STAT_OPENS_REFUSED,
    NA_STAT_DECODE_ENTRIES,
    NA_STAT_PREFILL_TOKENS,
    NA_STAT_DECODE_NS,
    NA_STAT_DECODE_PARTS_EARLY,
    NA_STAT_PREFILL_NS,
    NA_STAT_FETCH_NS,
    NA_STAT_ATTN_THREADS,       /* threads s<i>.attn_compute_ns is summed over */
    /* what the KV is for (a compute node checks it before placing requests) */
    NA_STAT_N_LAYERS,
    NA_STAT_N_HEADS,
    NA_STAT_N_KV_HEADS,
    NA_STAT_HEAD_DIM,
    NA_STAT_KV_DTYPE,           /* na_dtype_t */
    /* prefix reuse (docs/prefix-reuse.md) */
    NA_STAT_PREFIX_HIT_TOKENS,  /* prompt tokens attached from the prefix caches */
    NA_STAT_PREFIX_ASKED_TOKENS,/* prompt tokens looked up (whole blocks, last token excluded) */
    NA_STAT_PREFIX_CACHE_BYTES, /* KV the prefix caches hold now */
    NA_STAT_PREFIX_EVICTED,     /* blocks dropped for the budget */
    NA_STAT_PREFIX_COLLISIONS,  /* key matches that were other blocks (never served) */
    NA_STAT_NODE_COUNT
} na_stat_node_t;

/* A device slot's counters ("s<i>.KEY"). */
typedef enum {
    NA_STAT_SLOT_REQUESTS = 0,
    NA_STAT_SLOT_DRAM_USED,
    NA_STAT_SLOT_DRAM_BUDGET,
    NA_STAT_SLOT_SSD_USED,
    NA_STAT_SLOT_SSD_SIZE,
    NA_STAT_SLOT_BYTES_APPENDED,
    NA_STAT_SLOT_BYTES_WRITTEN_SSD,
    NA_STAT_SLOT_BYTES_READ_SSD,
    NA_STAT_SLOT_SPILLS,
    NA_STAT_SLOT_REFUSED,
    NA_STAT_SLOT_ATTN_ENTRIES,
    NA_STAT_SLOT_ATTN_FAILED,
    NA_STAT_SLOT_ATTN_TOKENS,
    NA_STAT_SLOT_PREFETCH_HITS,
    NA_STAT_SLOT_ATTN_COMPUTE_NS,
    NA_STAT_SLOT_CSD_NOOP,      /* the csd_* three: sent by engine csd slots only */
    NA_STAT_SLOT_CSD_LAUNCHES,
    NA_STAT_SLOT_CSD_P2P_BYTES,
    NA_STAT_SLOT_COUNT
} na_stat_slot_t;

#define NA_STATS_MAX_SLOTS 64

/* "node.requests" for NA_STAT_REQUESTS; "requests" (no "s<i>.") for a slot
 * counter. NULL out of range. */
const char *na_stat_node_key(na_stat_node_t id);
const char *na_stat_slot_key(na_stat_slot_t id);

/* "s<slot>.KEY" into buf (NA_WIRE_STATS_KEY_MAX bytes). */
void na_stat_slot_name(char buf[NA_WIRE_STATS_KEY_MAX], int slot, na_stat_slot_t id);

/* One STATS answer by id: node[id] and, summed over its slots, slot_sum[id];
 * has_* say which keys came (a node of another version may send fewer or
 * more: unknown keys are skipped); n_slots is 1 + the highest slot seen. */
typedef struct {
    uint64_t node[NA_STAT_NODE_COUNT];
    uint8_t  has_node[NA_STAT_NODE_COUNT];
    uint64_t slot_sum[NA_STAT_SLOT_COUNT];
    uint8_t  has_slot[NA_STAT_SLOT_COUNT];
    int      n_slots;
} na_stats_view_t;

/* Read every pair of a STATS message (encoded or decoded) into v. */
void na_stats_view(const na_wire_stats_t *m, na_stats_view_t *v);

#endif /* NA_WIRE_STATS_H */

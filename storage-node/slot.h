/* storage-node/slot.h — device slots and request placement: the API a
 * storage node's main loop calls.
 *
 * A device slot ("CSD slot") is a KV directory on one drive + its KV store
 * (DRAM and SSD tiers with budgets) + an attention engine bound to it. The
 * node's loop owns one na_slot_t per `devices:` entry of its layout and one
 * na_place_t that decides which slot(s) own a request:
 *
 *   open:     na_place_request -> parts; na_slot_open on each part's slot
 *   prefill:  na_slot_prefill(slot, req, layer, k, v, ...) per part (the
 *             part's head range of the prompt's [token][kv_head][head_dim])
 *   decode:   entries per slot pointing into the message's q/k/v/o at the
 *             part's head range; na_slot_decode (or the engine's
 *             begin/submit/close/wait to overlap with receiving)
 *   release:  na_slot_release per part; na_place_release
 *   stats:    na_slot_stats; call na_slot_poll between messages to reap
 *             writeback completions.
 *
 * Everything here runs on the node's loop thread. */
#ifndef NA_SLOT_H
#define NA_SLOT_H

#include <stddef.h>
#include <stdint.h>

#include "storage-node/attn_engine.h"
#include "storage-node/kv_store.h"

/* Model and KV settings shared by all slots of a node. */
typedef struct {
    /* the KV store's settings (n_layers, head_dim, kv_dtype F16 (default)
     * or F32, kv.block_tokens, kv.spill_interval, allow_buffered,
     * no_dram_tier (kv.tier ssd), io_depth (also the engine's reads in
     * flight), io_factory/io_arg (also the engine's)); the per-device
     * fields dram_bytes, ssd_bytes, dir and file_name stay 0: each slot
     * sets them from its na_slot_dev_t */
    na_kv_store_cfg_t  kv;
    int                n_heads, n_kv_heads;
    int                prefetch_layers;   /* kv.prefetch_layers */
    int                n_threads;         /* compute workers per slot */
    int                split_tokens;      /* granule of the split (tokens) */
    int                stage_chunks;      /* staging chunks per engine */
    int                no_ssd_tier;       /* no SSD tier, no file (kv.tier dram) */
    uint64_t           prefix_cache_bytes;/* prefix cache per slot (0: none) */
    int                prefix_hash_bits;  /* test hook: prefix keys cut to this many bits */
    int                devices_required;  /* a csd slot whose device cannot be used fails
                                             create (the node refuses to start) */
} na_slot_common_t;

/* One `devices:` entry. */
typedef struct {
    const char *dir;          /* KV directory */
    const char *engine;       /* "cpu" */
    uint64_t    dram_bytes;   /* dram_mb */
    uint64_t    ssd_bytes;    /* ssd_mb; 0 = DRAM only */
    int         threads;      /* engine workers; the slot takes max(this, common) */
    /* engine csd (attn_engine.h): device, xclbin, buffer, run timeout */
    const char *csd_device;   /* NULL = "0" */
    const char *csd_xclbin;
    uint64_t    csd_bytes;    /* 0 = default */
    int         csd_timeout_ms; /* 0 = default */
    int         gpu;          /* engine cuda: GPU index */
    long        hbm_mb;       /* engine cuda: device KV budget, MiB (0: 80% of the GPU) */
} na_slot_dev_t;

/* A slot: its store and the engine bound to it (slot.c builds them; the
 * slot set and the node reach them directly). */
typedef struct na_slot {
    na_slot_common_t  common;
    na_kv_store_t    *store;
    na_attn_engine_t *engine;
} na_slot_t;

typedef struct {
    na_kv_stats_t   kv;
    na_attn_stats_t attn;
} na_slot_stats_t;

/* Defaults: f16, block 64, spill 2, prefetch 1, 1 thread, depth 32,
 * split 1024, 8 chunks. Model fields must be set by the caller. */
void        na_slot_common_default(na_slot_common_t *c);
/* Create a slot (store + engine). Errors name the directory. */
na_status_t na_slot_create(const na_slot_common_t *c, const na_slot_dev_t *dev, na_slot_t **s_p);
void        na_slot_destroy(na_slot_t *s);
/* KV bytes placement may put on a slot of dev (its SSD budget if it has
 * an SSD tier, else its DRAM budget). */
uint64_t    na_slot_capacity(const na_slot_common_t *c, const na_slot_dev_t *dev);

na_status_t na_slot_open(na_slot_t *s, uint64_t req, int max_tokens, int n_kvh);
/* Bulk append of a prompt's KV for one layer: rows of n_kvh*head_dim
 * elements (src_dtype F32 or kv_dtype) with row_stride elements between
 * rows (0 = packed). Written straight to the tiers, asynchronously. */
na_status_t na_slot_prefill(na_slot_t *s, uint64_t req, int layer, const void *k,
                            const void *v, na_dtype_t src_dtype, size_t row_stride, int n_tok);
/* End of a prompt: wait for its writes; NA_ERR_IO (the request is failed)
 * if one did not make it to the SSD. */
na_status_t na_slot_prefill_done(na_slot_t *s, uint64_t req);
/* One decode attention batch, synchronous: entries[i].status/o on return. */
na_status_t na_slot_decode(na_slot_t *s, na_attn_entry_t *entries, int n);
static inline na_status_t na_slot_release(na_slot_t *s, uint64_t req)
{
    return na_kv_close(s->store, req);
}

/* Reap the store's writeback completions (never blocks). */
static inline na_status_t na_slot_poll(na_slot_t *s)
{
    return na_kv_poll(s->store, 0);
}

void        na_slot_stats(na_slot_t *s, na_slot_stats_t *out);
/* The counters of n slots added up (kernel_threads too: the threads of all
 * of them; csd_noop: 1 if any slot has it). */
void        na_slot_stats_sum(na_slot_t *const *s, int n, na_slot_stats_t *out);
static inline na_attn_engine_t *na_slot_engine(na_slot_t *s) { return s->engine; }
static inline na_kv_store_t    *na_slot_store(na_slot_t *s) { return s->store; }

/* ---------------------------------------------------------------------- */
/* Placement (placement.c)                                                 */

typedef enum {
    NA_PART_REQUEST = 0,   /* a request's KV on one slot (Lamina's choice) */
    NA_PART_HEAD    = 1,   /* KV heads split across slots (balanced work) */
} na_partition_t;

typedef struct {
    int slot;              /* index of the slot */
    int kvh0;              /* first KV head held there */
    int n_kvh;             /* KV heads held there */
} na_place_part_t;

#define NA_PLACE_MAX_SLOTS 64

typedef struct {
    na_partition_t mode;
    int            n_slots;
    int            n_kv_heads;
    uint64_t       load[NA_PLACE_MAX_SLOTS];   /* bytes placed per slot */
    uint64_t       cap[NA_PLACE_MAX_SLOTS];    /* capacity per slot (0 = unknown) */
} na_place_t;

/* Parse "request" / "head"; -1 otherwise. */
int         na_partition_parse(const char *s);
na_status_t na_place_init(na_place_t *p, na_partition_t mode, int n_slots, int n_kv_heads,
                          const uint64_t *cap);
/* Choose the parts of a request whose KV takes bytes_per_kvh bytes per KV
 * head: request mode -> the least-loaded slot that fits, all heads; head
 * mode -> min(n_slots, n_kv_heads) contiguous head ranges, as even as
 * possible, on the least-loaded slots. parts must hold NA_PLACE_MAX_SLOTS.
 * NA_ERR_NOSPACE when no slot has room. */
na_status_t na_place_request(na_place_t *p, uint64_t bytes_per_kvh,
                             na_place_part_t *parts, int *n_parts_p);
/* na_place_request, but with request partition on slot `prefer` (the one
 * whose prefix cache holds most of the prompt; -1: none) when it fits and
 * holds at most two such requests' bytes more than the least-loaded slot
 * that fits. */
na_status_t na_place_request_near(na_place_t *p, uint64_t bytes_per_kvh, int prefer,
                                  na_place_part_t *parts, int *n_parts_p);
void        na_place_release(na_place_t *p, uint64_t bytes_per_kvh,
                             const na_place_part_t *parts, int n_parts);

#endif /* NA_SLOT_H */

/* storage-node/slotset.h — the slot set: every device slot of one storage
 * service and the requests placed on them, shared by the storage node
 * (`nearattn node`, storage-node/node*.c) and the in-process attention
 * service (cluster/inproc.c). It owns
 *
 *   construction  the slots' settings from the layout (na_slotset_spec_layout:
 *                 kv dtype and element size, block, spill, prefetch, kv.tier,
 *                 budgets, engine, threads) and the slots and placement
 *                 built from them (na_slotset_create);
 *   requests      placement over the slots and the request's parts
 *                 (na_slotset_req_t: open / prefill / release);
 *   decode        fan-out of whole-request entries to the engines of the
 *                 slots holding their parts and completion reaping: a batch
 *                 takes entries (several adds), is closed, and is reaped by a
 *                 non-blocking test built on the engines' test().
 *
 * Everything runs on the owner's loop thread. */
#ifndef NA_SLOTSET_H
#define NA_SLOTSET_H

#include "common/config.h"
#include "storage-node/prefix_cache.h"
#include "storage-node/slot.h"

/* What to build: settings shared by all slots, the devices, the partition. */
typedef struct {
    na_slot_common_t common;          /* model shape fields set by the caller */
    int              n_devs;
    na_slot_dev_t    devs[NA_PLACE_MAX_SLOTS];
    na_partition_t   partition;
} na_slotset_spec_t;

/* A request's share of the slot set (embedded in the owner's request). */
typedef struct {
    uint64_t        sid;              /* id in the slots' stores */
    uint64_t        bytes_per_kvh;    /* placement accounting */
    int             n_parts;
    na_place_part_t parts[NA_PLACE_MAX_SLOTS];   /* kvh0 relative to the request */
    int              n_pfx;           /* leading blocks attached from the prefix caches */
    na_pcache_ent_t **pfx;            /* (n_parts x n_pfx) the entries, part-major */
} na_slotset_req_t;

/* A prompt for prefix reuse (docs/prefix-reuse.md): the model's fingerprint,
 * the request's first KV head (absolute; a part adds its own offset) and the
 * prompt's first n_tok token ids. */
typedef struct {
    uint8_t         fp[NA_KVHASH_FP];
    int             kv_h0;
    const uint32_t *tokens;
    int             n_tok;
} na_slotset_prompt_t;

/* Counters of the slots' prefix caches, summed. */
typedef struct {
    na_pcache_stats_t cache;
    uint64_t          hit_tokens;     /* prompt tokens attached from the caches */
    uint64_t          asked_tokens;   /* prompt tokens looked up */
} na_slotset_prefix_stats_t;

typedef struct na_slotset       na_slotset_t;
typedef struct na_slotset_batch na_slotset_batch_t;

/* The spec from a layout: the kv and partition settings, and the devices of
 * storage node cn (NULL: every device slot of the layout, in slot order).
 * kv.tier dram -> the slots have no SSD tier (no file); ssd -> no DRAM
 * tier. NA_ERR_UNSUPPORTED for a KV dtype other than f16 or f32. */
na_status_t na_slotset_spec_layout(const na_cfg_t *cfg, const na_cfg_node_t *cn,
                                   na_slotset_spec_t *spec);
/* Create the slots (store + engine each) and the placement. The model shape
 * in spec->common must be set. Errors name the slot's directory. */
na_status_t na_slotset_create(const na_slotset_spec_t *spec, na_slotset_t **ss_p);
/* Every batch must have been reaped first. */
void        na_slotset_destroy(na_slotset_t *ss);

int                     na_slotset_n(const na_slotset_t *ss);
na_slot_t              *na_slotset_slot(na_slotset_t *ss, int i);
const na_slot_common_t *na_slotset_common(const na_slotset_t *ss);
/* KV bytes one KV head of a request of max_tokens tokens takes (all layers,
 * K and V, element size of the KV dtype). */
uint64_t    na_slotset_bytes_per_kvh(const na_slotset_t *ss, int max_tokens);

/* Place request sid (n_kvh KV heads, max_tokens) and open its parts. On
 * failure nothing stays open; NA_ERR_NOSPACE (room may come when other
 * requests end) says how much it needed, the most any slot has free and
 * the slots' KV budget; NA_ERR_RANGE when it would not fit even with no
 * other request open (more than the budget: waiting cannot help). */
na_status_t na_slotset_open(na_slotset_t *ss, na_slotset_req_t *r, uint64_t sid,
                            int max_tokens, int n_kvh);
/* na_slotset_open for a request whose prompt p is offered for prefix reuse:
 * with request partition it goes to the slot whose prefix cache holds the
 * longest run of the prompt's first blocks among the slots in balance (at
 * most two such requests' bytes above the least-loaded slot that fits;
 * na_place_request_near), else as na_slotset_open. Then call
 * na_slotset_prefix_attach. */
na_status_t na_slotset_open_near(na_slotset_t *ss, na_slotset_req_t *r, uint64_t sid,
                                 int max_tokens, int n_kvh, const na_slotset_prompt_t *p);
/* Append n_tok prompt rows of layer: rows of the request's n_kvh*head_dim
 * elements of dtype (F32 or the KV dtype), row_stride elements apart
 * (0 = packed); each part takes its head range. */
na_status_t na_slotset_prefill(na_slotset_t *ss, const na_slotset_req_t *r, int layer,
                               const void *k, const void *v, na_dtype_t dtype,
                               size_t row_stride, int n_tok);
/* End of a prompt on every part (na_slot_prefill_done). */
na_status_t na_slotset_prefill_done(na_slotset_t *ss, const na_slotset_req_t *r);
/* Right after open: attach to r the longest run of the prompt's first
 * blocks that every part's slot holds in its prefix cache, leaving at least
 * the prompt's last token to be computed. Returns the tokens attached (a
 * multiple of block_tokens; 0 when none, also when the caches are off); r's
 * layers then hold that many rows and its prefill goes on from there. -1
 * (with the reason) when blocks could not be attached: release r. */
int         na_slotset_prefix_attach(na_slotset_t *ss, na_slotset_req_t *r,
                                     const na_slotset_prompt_t *p);
/* After r's prefill is done: keep the prompt's whole blocks that are in DRAM
 * in the slots' prefix caches (as far as the budgets allow). Never fails the
 * request: a block that cannot be kept ends the run there. */
void        na_slotset_prefix_publish(na_slotset_t *ss, na_slotset_req_t *r,
                                      const na_slotset_prompt_t *p);
void        na_slotset_prefix_stats(const na_slotset_t *ss, na_slotset_prefix_stats_t *out);
/* Rows 0..n_tok-1 of layer that r holds from the prefix caches (n_tok <=
 * its attached tokens) into k, v: (n_tok, n_kvh * head_dim) rows of the
 * request's heads, dtype F32 or the KV dtype (the in-process KV fetch).
 * NA_ERR_RANGE past the attached rows, NA_ERR_UNSUPPORTED for another dtype. */
na_status_t na_slotset_prefix_read(const na_slotset_t *ss, const na_slotset_req_t *r, int layer,
                                   int n_tok, void *k, void *v, na_dtype_t dtype);
/* Close the parts and give the placement back. No batch may hold it. */
na_status_t na_slotset_release(na_slotset_t *ss, na_slotset_req_t *r);
/* Tokens the request holds in layer (-1 if its store lost it). */
int         na_slotset_tokens(na_slotset_t *ss, const na_slotset_req_t *r, int layer);
/* Reap writeback completions of every slot. */
na_status_t na_slotset_poll(na_slotset_t *ss);

/* Decode: begin a batch, add whole-request entries (entries[i] covers the
 * request's n_kvh KV heads: q (n_kvh*group*head_dim) ... as in
 * na_attn_entry_t; req[i] its parts), close, then reap with test (or wait).
 * Work starts at add. Entries stay the caller's and must stay valid until
 * the batch is reaped; their status/reason are set then. add fails only for
 * lack of memory. An entry of n_q > 1 is a prompt chunk (chunked prefill):
 * add appends its n_q K/V rows at once (as na_slotset_prefill; the prompt's
 * prefill_done flushes them) and answers each query over the tokens up to
 * its position: on an engine that takes blocks (na_attn_engine_blocks: cpu)
 * as one engine entry of n_q rows, each K/V run read once for all of them,
 * else one engine entry per query (n_ctx). Either way a prompt query gets
 * exactly the bits a decode step at that position would get (attn_fold.h). */
na_status_t na_slotset_batch_begin(na_slotset_t *ss, na_slotset_batch_t **b_p);
na_status_t na_slotset_batch_add(na_slotset_t *ss, na_slotset_batch_t *b,
                                 const na_slotset_req_t *const *req, na_attn_entry_t *entries,
                                 int n);
/* na_slotset_batch_add of b's last entries, then na_slotset_batch_close, in
 * one call (b is closed even when it fails): the engines know no more are
 * coming (na_attn_submit_close: the cpu engine computes a small entry on
 * this thread instead of waking a worker). */
na_status_t na_slotset_batch_add_close(na_slotset_t *ss, na_slotset_batch_t *b,
                                       const na_slotset_req_t *const *req,
                                       na_attn_entry_t *entries, int n);
void        na_slotset_batch_close(na_slotset_t *ss, na_slotset_batch_t *b);
/* 1 when the closed batch b completed (results on the entries, b freed),
 * else 0; waits at most wait_us for it (0: just look). */
int         na_slotset_batch_test(na_slotset_t *ss, na_slotset_batch_t *b, int wait_us);
/* Close (if needed), block until b completed, free it. */
void        na_slotset_batch_wait(na_slotset_t *ss, na_slotset_batch_t *b);

#endif /* NA_SLOTSET_H */

/* storage-node/prefix_cache.h — the prefix cache of one device slot: full
 * KV blocks of prompts that finished prefill, kept so that a later request
 * whose prompt starts with the same tokens attaches them instead of having
 * them computed and shipped again (docs/prefix-reuse.md).
 *
 * An entry is one block of block_tokens tokens, all layers, for one KV head
 * range: n_layers images of the store's block layout (kv_store.h), in DRAM,
 * read-only once inserted. It is named by its hash-chain key
 * (common/kvhash.h) and also keeps what the key stands for: its token ids,
 * its parent entry (the block before it; NULL for a prompt's first block)
 * and, for a first block, the model fingerprint and head range. A lookup
 * walks a prompt's blocks from the first and takes an entry only when all
 * of these match, so a key collision (forced in tests by truncating keys,
 * cfg.hash_bits) costs a miss, never another prompt's KV. Each entry's
 * memory carries a checksum taken at insert and checked before it is handed
 * out; a block that fails it is dropped and the lookup stops there.
 *
 * References: every request that attached an entry and every child entry
 * holds one; entries nobody holds are kept in least-recently-used order and
 * evicted (dropped: DRAM only, no SSD tier for cached blocks) when an insert
 * would pass the byte budget. A hit refreshes the blocks deepest first, so
 * a chain's first blocks are the last to go. Nothing survives a restart: a
 * node starts with an empty cache.
 *
 * Single-threaded (the node's loop), like the KV store. */
#ifndef NA_PREFIX_CACHE_H
#define NA_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/kvhash.h"
#include "common/status.h"

typedef struct {
    uint64_t budget_bytes;   /* block memory kept at most (0: the cache keeps nothing) */
    int      n_layers;
    int      block_tokens;
    int      hash_bits;      /* test hook: keys cut to this many bits (0: all 256) */
} na_pcache_cfg_t;

/* Who a prompt's first block belongs to: the model and the KV heads. */
typedef struct {
    uint8_t fp[NA_KVHASH_FP];
    int     kv_h0, n_kvh;
    int     kv_dtype;        /* na_dtype_t */
} na_pcache_ident_t;

typedef struct {
    uint64_t lookups;        /* prompts looked up */
    uint64_t hit_blocks;     /* blocks handed out */
    uint64_t miss_blocks;    /* blocks looked up and not found */
    uint64_t inserted;       /* blocks inserted */
    uint64_t evicted;        /* blocks dropped for the budget */
    uint64_t collisions;     /* entries whose key matched but tokens / parent / owner did not */
    uint64_t bad_sums;       /* entries dropped because their memory failed its checksum */
    uint64_t entries, bytes, budget;   /* now */
} na_pcache_stats_t;

typedef struct na_pcache     na_pcache_t;
typedef struct na_pcache_ent na_pcache_ent_t;

na_status_t na_pcache_create(const na_pcache_cfg_t *cfg, na_pcache_t **pc_p);
/* Frees every entry, referenced or not (the owner has closed its requests). */
void        na_pcache_destroy(na_pcache_t *pc);

/* The longest run of the prompt's first blocks the cache holds, at most
 * n_blocks (tokens[0 .. n_blocks * block_tokens)): out[i] is block i, each
 * referenced once for the caller (na_pcache_unref each). block_bytes is the
 * size of one layer's image (the store's, for id->n_kvh heads); entries of
 * another size never match. Returns the count (0: none). */
int         na_pcache_lookup(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                             const uint32_t *tokens, int n_blocks, na_pcache_ent_t **out);
/* How many of the prompt's first blocks the cache holds (as lookup, but
 * nothing referenced, counted or refreshed, checksums not checked): a hint
 * for placement. */
int         na_pcache_peek(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                           const uint32_t *tokens, int n_blocks);
/* Insert block `index` of a prompt (tokens: its block_tokens ids) after
 * parent (out[index - 1] of a lookup or insert; NULL for index 0), copying
 * layer l's image from mem[l] (block_bytes each). If an equal entry is there
 * already it is returned instead. On success *out is referenced once for the
 * caller. NA_ERR_NOSPACE when the budget cannot make room (nothing evictable
 * is left), NA_ERR_NOMEM. */
na_status_t na_pcache_insert(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                             na_pcache_ent_t *parent, int index, const uint32_t *tokens,
                             const void *const *mem, na_pcache_ent_t **out);
/* Layer l's image of an entry (block_bytes, read-only). */
const void *na_pcache_mem(const na_pcache_ent_t *e, int layer);
void        na_pcache_ref(na_pcache_ent_t *e);
void        na_pcache_unref(na_pcache_t *pc, na_pcache_ent_t *e);
int         na_pcache_refs(const na_pcache_ent_t *e);
/* Drop every entry nobody references (returns the bytes freed). */
uint64_t    na_pcache_trim(na_pcache_t *pc);
void        na_pcache_stats(const na_pcache_t *pc, na_pcache_stats_t *out);

#endif /* NA_PREFIX_CACHE_H */

/* storage-node/kv_dram.c — the DRAM tier of a slot: block memory (aligned,
 * reused when requests end) and the byte budget that bounds it.
 *
 * Budget model: dram_used = sum of per-request reservations (writeback
 * buffer worst case, or every block when the slot has no SSD) + bytes of
 * blocks committed to the DRAM tier. A block is committed to DRAM only if it
 * fits; otherwise it goes to the SSD tier. Freed block memory is kept on a
 * free list for reuse (bounded by the budget, trimmed on destroy). */
#include <stdlib.h>

#include "storage-node/kv_internal.h"

/* Return block memory of `bytes` (aligned): a cached block of that size or
 * a fresh allocation. NULL when out of memory. Budget is not touched. */
void *na_kv_dram_block_get(na_kv_store_t *s, size_t bytes)
{
    na_kv_free_blk_t **pp = &s->free_blks, *b;

    for (b = *pp; b != NULL; pp = &b->next, b = b->next) {
        if (b->bytes == bytes) {
            *pp = b->next;
            s->free_bytes -= bytes;
            return b;
        }
    }
    return na_kv_aligned_alloc(bytes);
}

/* Give block memory back for reuse; frees it when the cache would not fit
 * in the part of the budget nobody has reserved (so cache + blocks in use
 * stay within the budget). Never fails. */
void na_kv_dram_block_put(na_kv_store_t *s, void *mem, size_t bytes)
{
    na_kv_free_blk_t *b = mem;
    uint64_t room = s->cfg.dram_bytes > s->dram_used ? s->cfg.dram_bytes - s->dram_used : 0;

    if (mem == NULL)
        return;
    if (bytes < sizeof(*b) || s->free_bytes + bytes > room) {
        na_kv_aligned_free(mem);
        return;
    }
    b->bytes = bytes;
    b->next = s->free_blks;
    s->free_blks = b;
    s->free_bytes += bytes;
}

/* Free every cached block. */
void na_kv_dram_trim(na_kv_store_t *s)
{
    while (s->free_blks != NULL) {
        na_kv_free_blk_t *b = s->free_blks;
        s->free_blks = b->next;
        na_kv_aligned_free(b);
    }
    s->free_bytes = 0;
}

/* Does `bytes` more fit under the budget? */
int na_kv_dram_fits(const na_kv_store_t *s, uint64_t bytes)
{
    return s->dram_used + bytes <= s->cfg.dram_bytes;
}

/* Drop DRAM-tier blocks (SSD slots only) until `bytes` more fit or none
 * is left to drop. Never fails. */
static void na_kv_dram_evict(na_kv_store_t *s, uint64_t bytes)
{
    int h, l, b;

    if (!s->has_ssd)
        return;
    for (h = 0; h < NA_KV_HASH && !na_kv_dram_fits(s, bytes); h++) {
        na_kv_req_t *r;
        for (r = s->hash[h]; r != NULL && !na_kv_dram_fits(s, bytes); r = r->next) {
            for (l = 0; l < s->cfg.n_layers && r->dram_tier > 0; l++) {
                na_kv_layer_t *L = &r->layers[l];
                if (L->busy)
                    continue;
                for (b = L->n_committed / s->cfg.block_tokens - 1; b >= 0; b--) {
                    na_kv_block_t *blk = &L->blocks[b];
                    if (blk->loc != NA_KV_LOC_DRAM)
                        continue;
                    na_kv_dram_block_put(s, blk->mem, r->block_bytes);
                    blk->mem = NULL;
                    blk->loc = NA_KV_LOC_SSD;
                    s->ssd_only = 1;
                    r->dram_tier -= r->block_bytes;
                    s->dram_used -= r->block_bytes;
                    if (na_kv_dram_fits(s, bytes))
                        return;
                }
            }
        }
    }
}

/* Charge `bytes` against the budget (trimming the block cache to keep
 * cache + charges within it) or fail with NA_ERR_NOSPACE naming
 * `what` and the figures. */
na_status_t na_kv_dram_reserve(na_kv_store_t *s, uint64_t bytes, const char *what)
{
    if (!na_kv_dram_fits(s, bytes))
        na_kv_dram_evict(s, bytes);
    if (!na_kv_dram_fits(s, bytes))
        return na_err(NA_ERR_NOSPACE, "DRAM budget full: %s needs %llu bytes, %llu of %llu in use",
                      what, (unsigned long long)bytes, (unsigned long long)s->dram_used,
                      (unsigned long long)s->cfg.dram_bytes);
    s->dram_used += bytes;
    while (s->free_blks != NULL && s->free_bytes > s->cfg.dram_bytes - s->dram_used) {
        na_kv_free_blk_t *b = s->free_blks;
        s->free_blks = b->next;
        s->free_bytes -= b->bytes;
        na_kv_aligned_free(b);
    }
    return NA_OK;
}

/* Return budget charged with na_kv_dram_reserve. */
void na_kv_dram_unreserve(na_kv_store_t *s, uint64_t bytes)
{
    s->dram_used = bytes > s->dram_used ? 0 : s->dram_used - bytes;
}

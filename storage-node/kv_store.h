/* storage-node/kv_store.h — the KV store of one device slot.
 *
 * Layout. A request's KV on this slot covers n_kvh KV heads (all of them
 * under request-level partitioning, a range under head-level partitioning).
 * For every (request, layer) there is a block table; block b holds tokens
 * [b*bt, (b+1)*bt) (bt = block_tokens) as
 *     [kv_head][K rows: bt x head_dim][V rows: bt x head_dim]   (kv_dtype)
 * padded to a multiple of 4 KiB, so one KV head of one block is a pair of
 * contiguous spans (na_kv_span_t) and a block is one aligned O_DIRECT I/O.
 *
 * Allocation is block-granular (Lamina's token-granular allocation would
 * avoid the unused tail of the last block; we pay at most bt-1 rows per
 * (request, layer) for aligned, sequential I/O). On the SSD each request
 * reserves at open one extent sized for max_tokens:
 *     [header 4 KiB][layer 0: nb blocks][layer 1: nb blocks]...
 * (nb = ceil(max_tokens / bt)), so every block has a fixed home, appends are
 * sequential within a layer and a layer's SSD blocks are read with a few
 * large reads (INF2 §4.1). Extents are returned to a first-fit free list
 * (coalescing) when the request is closed; fragmentation is external only,
 * between extents of different maxima, and internal at most
 * (max_tokens - tokens used) per request.
 *
 * Tiers. New rows land in the writeback buffer (DRAM, loc BUF) and feed
 * attention from there. Every spill_interval appended steps (per request and
 * layer) the full buffered blocks are committed: to the DRAM tier while its
 * byte budget allows (no copy: the block simply changes tier), else written
 * to their SSD home asynchronously (loc WRITING until the write completes;
 * attention keeps reading the DRAM copy meanwhile). A decode step's spill
 * is made by the loop's next na_kv_poll, after the step was answered (the
 * SSD write off the round trip), or by the next append when no poll came
 * in between. The partial last block
 * stays in the buffer and its image is also rewritten to its SSD home so
 * that the SSD holds every spilled row. See writeback.c for crash semantics.
 * Every whole block written to the SSD gets a checksum (na_kv_sum, kept in
 * its block table entry, in DRAM); whoever reads it back (the attention
 * engines, the KV fetch) checks it (na_kv_view_check), so a block the disk
 * corrupted fails its request with the reason instead of a wrong answer.
 *
 * Budgets. dram_bytes bounds all block memory (buffer + DRAM tier); each
 * request reserves its worst-case buffer at open. A slot without SSD
 * (ssd_bytes = 0) reserves DRAM for max_tokens at open. Opening a request
 * that does not fit fails with NA_ERR_NOSPACE and a reason; other requests
 * are untouched.
 *
 * Threading: all functions are called from one thread (the node's loop).
 * Engine threads read only views (snapshots) taken with na_kv_view, whose
 * memory stays valid until na_kv_view_release. */
#ifndef NA_KV_STORE_H
#define NA_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"
#include "common/status.h"
#include "storage-node/kv_ssd.h"

typedef struct {
    int                n_layers;       /* model layers */
    int                head_dim;
    int                block_tokens;   /* tokens per block (>= 1) */
    na_dtype_t         kv_dtype;       /* NA_DTYPE_F16, NA_DTYPE_BF16 or NA_DTYPE_F32 */
    int                spill_interval; /* decode steps between spills (>= 1) */
    uint64_t           dram_bytes;     /* DRAM budget: buffer + DRAM tier */
    uint64_t           ssd_bytes;      /* SSD tier file size; 0 = no SSD tier */
    const char        *dir;            /* KV directory (SSD file lives here) */
    const char        *file_name;      /* file in dir; NULL = "kv.dat" */
    int                allow_buffered; /* fall back to buffered I/O without O_DIRECT */
    int                no_dram_tier;   /* 1: full blocks never stay in DRAM (all-SSD) */
    int                io_depth;       /* io_uring queue depth (>= 8 recommended) */
    na_kv_io_factory_t io_factory;     /* NULL = io_uring */
    void              *io_arg;
} na_kv_store_cfg_t;

/* Where a block lives. */
typedef enum {
    NA_KV_LOC_NONE = 0,    /* not written yet */
    NA_KV_LOC_BUF,         /* writeback buffer (DRAM), not yet spilled */
    NA_KV_LOC_WRITING,     /* being written to SSD; DRAM copy still valid */
    NA_KV_LOC_DRAM,        /* DRAM tier */
    NA_KV_LOC_SSD,         /* SSD tier only */
} na_kv_loc_t;

typedef struct {
    uint8_t loc;           /* na_kv_loc_t */
    uint8_t keep;          /* WRITING: stays in the DRAM tier once written */
    uint8_t written;       /* WRITING: write completed, state change deferred
                              until no view of the layer is held */
    uint8_t shared;        /* DRAM: a prefix-cache block (storage-node/
                              prefix_cache.h) attached read-only; the cache
                              owns mem, never freed or written here */
    void   *mem;           /* block memory for BUF/WRITING/DRAM, else NULL */
    uint64_t sum;          /* na_kv_sum of the image written to the SSD (taken
                              when the whole block is spilled; set for
                              WRITING, DRAM after a write, SSD) */
} na_kv_block_t;

typedef struct na_kv_req na_kv_req_t;
typedef struct na_kv_store na_kv_store_t;

/* A snapshot of one (request, layer) for attention: n_tokens valid rows.
 * blocks[b].mem is readable for non-SSD blocks until the view is released;
 * SSD blocks are read from ssd_off + b * block_bytes. */
typedef struct {
    na_kv_req_t   *req;
    int            layer;
    int            n_tokens;
    int            n_blocks;
    int            n_kvh;
    size_t         block_bytes;
    int            fd;             /* SSD file (-1 without SSD tier) */
    uint64_t       ssd_off;        /* file offset of this layer's block 0 */
    na_kv_block_t *blocks;         /* (n_blocks) copy of the table */
} na_kv_view_t;

/* Per-tier counters (bytes), cumulative since create. */
typedef struct {
    uint64_t dram_used, dram_budget;      /* now */
    uint64_t ssd_used, ssd_size;          /* now (reserved extents) */
    uint64_t n_requests;                  /* open now */
    uint64_t bytes_appended;              /* rows written into the buffer */
    uint64_t bytes_spilled_dram;          /* blocks committed to DRAM */
    uint64_t bytes_written_ssd;           /* data + header writes completed */
    uint64_t bytes_read_ssd;              /* attention/prefetch reads (engine) */
    uint64_t n_spills;
    uint64_t n_refused;                   /* opens refused for space */
} na_kv_stats_t;

/* Create a store; opens (and preallocates) the SSD file when ssd_bytes > 0.
 * Fails on bad config (NA_ERR_INVALID/RANGE) or I/O setup (NA_ERR_IO,
 * NA_ERR_UNSUPPORTED when O_DIRECT is refused). */
na_status_t na_kv_store_create(const na_kv_store_cfg_t *cfg, na_kv_store_t **s_p);
/* Waits for outstanding writes, frees everything, removes the SSD file. */
void        na_kv_store_destroy(na_kv_store_t *s);
const na_kv_store_cfg_t *na_kv_store_cfg(const na_kv_store_t *s);

/* Open request `id` for up to max_tokens tokens of n_kvh KV heads. Reserves
 * its SSD extent (or DRAM when there is no SSD tier) and its buffer.
 * NA_ERR_BUSY if the id is open, NA_ERR_NOSPACE with a reason when it does
 * not fit, NA_ERR_RANGE for bad sizes. */
na_status_t na_kv_open(na_kv_store_t *s, uint64_t id, int max_tokens, int n_kvh);
/* Close: waits for the request's writes, frees its blocks and extent.
 * NA_ERR_NOT_FOUND for an unknown id, NA_ERR_BUSY while a view is held. */
na_status_t na_kv_close(na_kv_store_t *s, uint64_t id);
/* Look up an open request (NULL if unknown). */
na_kv_req_t *na_kv_find(na_kv_store_t *s, uint64_t id);
/* Failure state of a request: NA_OK, or the status that failed it with its
 * reason copied to the thread's error message. */
na_status_t na_kv_req_check(na_kv_req_t *r);
/* Mark a request failed with a reason (first failure wins). */
void        na_kv_req_fail(na_kv_req_t *r, na_status_t st, const char *reason);
uint64_t    na_kv_req_id(const na_kv_req_t *r);
uint64_t    na_kv_req_seq(const na_kv_req_t *r);   /* unique per open */
int         na_kv_req_n_kvh(const na_kv_req_t *r);
int         na_kv_req_tokens(const na_kv_req_t *r, int layer);
/* The request's SSD extent (0, 0 without one). */
void        na_kv_req_extent(const na_kv_req_t *r, uint64_t *off_p, uint64_t *len_p);

/* Append n_tok rows to (id, layer). k, v: n_tok rows of n_kvh*head_dim
 * elements in src_dtype (F32 or the store's kv_dtype), row t starting at
 * element t*row_stride (0 = n_kvh*head_dim; larger when the rows are a head
 * range of a wider [token][kv_head][head_dim] array). bulk = 1 (prefill)
 * spills at once (every MiB of full blocks as it fills, then the rest)
 * without waiting: call na_kv_flush at the end of a prompt to wait for the
 * writes and learn their outcome; bulk = 0 (decode) counts a step and
 * spills every spill_interval steps, asynchronously: at the next
 * na_kv_poll, or here one step later if none came. A failed write fails
 * the request (reported by later calls). Errors go to
 * this request only: NA_ERR_NOT_FOUND, NA_ERR_RANGE (past max_tokens or bad
 * layer), NA_ERR_BUSY (a view of (id, layer) is held), NA_ERR_IO. */
na_status_t na_kv_append(na_kv_store_t *s, na_kv_req_t *r, int layer, const void *k,
                         const void *v, na_dtype_t src_dtype, size_t row_stride,
                         int n_tok, int bulk);

/* Prefix reuse: append to (r, layer) one full block whose image (block
 * bytes of r's layout) another owner keeps read-only in DRAM (the prefix
 * cache) and keeps alive until r is closed. The layer must hold a whole
 * number of blocks, all committed, no view held. The block is read like a
 * DRAM-tier block and never written, spilled or freed by the store (it is
 * not in r's SSD extent: a header's durable count covers it as "held").
 * NA_ERR_RANGE / NA_ERR_BUSY otherwise. */
na_status_t na_kv_attach(na_kv_store_t *s, na_kv_req_t *r, int layer, const void *mem);
/* The DRAM image of block b of (r, layer) (block bytes), or NULL when it is
 * not in DRAM (SSD tier only, or not written). */
const void *na_kv_block_mem(const na_kv_req_t *r, int layer, int b);
size_t      na_kv_req_block_bytes(const na_kv_req_t *r);
/* Copy block b of (r, layer) (a whole, committed block) into buf (block
 * bytes, NA_KV_ALIGN-aligned): from DRAM, or read back from the SSD tier
 * (synchronously, after the ring's writes) and checked against the checksum
 * taken when it was written: NA_ERR_IO naming the block when the disk gave
 * other bytes, never those bytes. NA_ERR_RANGE for a block not held. */
na_status_t na_kv_block_read(na_kv_store_t *s, na_kv_req_t *r, int layer, int b, void *buf);

/* Take a snapshot of (r, layer) for attention; marks it busy until
 * na_kv_view_release. view->blocks is allocated here. */
na_status_t na_kv_view(na_kv_store_t *s, na_kv_req_t *r, int layer, na_kv_view_t *view);
/* The same for the first n_tok tokens only (n_tok <= 0: all): the view of a
 * prompt query whose chunk's later rows are appended already.
 * NA_ERR_RANGE when the layer holds fewer than n_tok tokens. */
na_status_t na_kv_view_n(na_kv_store_t *s, na_kv_req_t *r, int layer, int n_tok,
                         na_kv_view_t *view);
void        na_kv_view_release(na_kv_store_t *s, na_kv_view_t *view);
/* Check block b of view v, read back from the SSD into data (block_bytes),
 * against the checksum taken when it was written: NA_OK, or NA_ERR_IO with
 * a message naming the request, layer, block and file offset (the disk gave
 * back other bytes than were written: the request must fail, never compute
 * on them). Any thread (reads only the view). */
na_status_t na_kv_view_check(const na_kv_view_t *v, int b, const void *data);

/* Spill every buffered row of request r now (all layers) and wait. */
na_status_t na_kv_flush(na_kv_store_t *s, na_kv_req_t *r);
/* Make the decode spills that are due (na_kv_append), then reap completed
 * spill writes without blocking (wait = 1: block until all outstanding
 * writes completed). Failed writes fail their request. */
na_status_t na_kv_poll(na_kv_store_t *s, int wait);

void        na_kv_stats(na_kv_store_t *s, na_kv_stats_t *out);
/* 1 once a block of this store has lived on the SSD tier only (sticky):
 * before that no view holds a block to read back, so there is nothing to
 * read ahead (the engines' layer-ahead prefetch is skipped). */
int         na_kv_ssd_only_seen(const na_kv_store_t *s);
/* Engines add the SSD bytes they read (for stats; call from the loop thread). */
void        na_kv_count_read(na_kv_store_t *s, uint64_t bytes);

/* Bytes of one block for n_kvh heads (padded to NA_KV_ALIGN). */
size_t      na_kv_block_bytes(const na_kv_store_cfg_t *cfg, int n_kvh);

/* Durable state of a request's extent as recorded in its header block
 * (read back from the SSD; used by recovery and tests). tokens[l] = rows of
 * layer l known to be on the SSD. NA_ERR_FORMAT if the header is not valid
 * for request id. */
na_status_t na_kv_read_header(na_kv_store_t *s, uint64_t id, uint64_t *seq_p,
                              int *tokens, int n_layers);

#endif /* NA_KV_STORE_H */

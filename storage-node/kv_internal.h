/* storage-node/kv_internal.h — private structures of the KV store shared by
 * kv_store.c, kv_dram.c and writeback.c. Not for other modules. */
#ifndef NA_KV_INTERNAL_H
#define NA_KV_INTERNAL_H

#include "storage-node/kv_store.h"

#define NA_KV_HDR_BYTES   NA_KV_ALIGN
#define NA_KV_HDR_MAGIC   0x3130564b414e4e41ull   /* "ANNAKV01" little-endian */
#define NA_KV_MAX_LAYERS  1000                     /* fits the header block */
#define NA_KV_HASH        256

typedef struct {
    int            n_tokens;       /* rows appended */
    int            n_committed;    /* rows in committed (non-BUF) blocks = full blocks spilled */
    int            n_durable;      /* rows known to be on the SSD */
    int            n_spilled;      /* rows covered by submitted spills */
    int            pending_steps;  /* decode appends since the last spill */
    int            writes;         /* spill writes in flight */
    int            tail_writes;    /* of which partial-tail images (same offset as the
                                      block they grow into: never two in flight, and
                                      the full block goes out after them) */
    int            busy;           /* views held */
    int            deferred;       /* blocks written while busy: finish at release */
    int            due;            /* on the store's due list (kv_store.c's na_kv_spill_later) */
    na_kv_block_t *blocks;         /* (max_blocks) */
} na_kv_layer_t;

struct na_kv_req {
    uint64_t       id;
    int            max_tokens;
    int            n_kvh;
    int            max_blocks;     /* per layer */
    size_t         block_bytes;
    int            has_ext;
    uint64_t       ext_off;        /* header at ext_off, layer l at ext_off + 4 KiB + l*max_blocks*bs */
    uint64_t       ext_len;
    uint64_t       dram_reserved;  /* budget reserved at open */
    uint64_t       dram_tier;      /* budget charged for DRAM-tier blocks */
    uint64_t       seq;            /* generation written in the header */
    int            writes;         /* all writes in flight (data + header) */
    int            hdr_dirty;      /* durable counts changed since the last header write */
    int            hdr_writing;
    void          *hdr_buf;        /* NA_KV_HDR_BYTES, aligned */
    na_status_t    fail_st;
    char           reason[240];
    na_kv_layer_t *layers;         /* (n_layers) */
    na_kv_req_t   *next;           /* hash chain */
};

/* A view's copy of a block table (na_kv_view_t.blocks is b), kept on the
 * store's free list when the view is released. */
typedef struct na_kv_vbuf {
    struct na_kv_vbuf *next;
    int                cap;        /* blocks b holds */
    na_kv_block_t      b[];
} na_kv_vbuf_t;

/* A (request, layer) whose decode spill waits for the next na_kv_poll. */
typedef struct {
    na_kv_req_t *r;
    int          layer;
} na_kv_due_t;

/* One DRAM block kept for reuse. */
typedef struct na_kv_free_blk {
    struct na_kv_free_blk *next;
    size_t                 bytes;
} na_kv_free_blk_t;

struct na_kv_store {
    na_kv_store_cfg_t cfg;
    char              dir[512];
    int               has_ssd;
    int               ssd_only;    /* a block has lived on the SSD tier only (sticky):
                                      views may hold blocks to read back */
    na_kv_file_t      file;
    na_kv_io_t       *io;          /* writeback / prefill writes (this thread) */
    int               io_inflight;
    na_kv_req_t      *hash[NA_KV_HASH];
    uint64_t          next_seq;
    uint64_t          dram_used;   /* reservations + DRAM-tier charges */
    na_kv_free_blk_t *free_blks;   /* cached block memory */
    uint64_t          free_bytes;
    na_kv_vbuf_t     *vbuf_free;   /* released views' tables, reused */
    struct na_kv_wr  *wr_free;     /* completed write records with their bounce
                                      buffers (writeback.c), reused */
    na_kv_due_t      *due;         /* decode spills waiting for na_kv_poll */
    int               n_due;
    size_t            due_cap;
    na_kv_stats_t     st;
};

/* kv_dram.c — block memory and the DRAM byte budget. */
void       *na_kv_dram_block_get(na_kv_store_t *s, size_t bytes);
void        na_kv_dram_block_put(na_kv_store_t *s, void *mem, size_t bytes);
void        na_kv_dram_trim(na_kv_store_t *s);
na_status_t na_kv_dram_reserve(na_kv_store_t *s, uint64_t bytes, const char *what);
void        na_kv_dram_unreserve(na_kv_store_t *s, uint64_t bytes);
int         na_kv_dram_fits(const na_kv_store_t *s, uint64_t bytes);

/* writeback.c — spills, completions, extent headers. */
/* Commit full buffered blocks of (r, layer) and rewrite the partial tail's
 * SSD image; asynchronous unless sync. */
na_status_t na_kv_spill(na_kv_store_t *s, na_kv_req_t *r, int layer, int sync);
/* Wait until r has no write in flight. */
na_status_t na_kv_wait_req(na_kv_store_t *s, na_kv_req_t *r);
/* Free the write records kept for reuse (at destroy, nothing in flight). */
void        na_kv_wr_pool_destroy(na_kv_store_t *s);
/* Write r's header now (synchronous); used at open. */
na_status_t na_kv_header_write_sync(na_kv_store_t *s, na_kv_req_t *r);
/* Read r's header back from its extent (na_kv_read_header; r has one). */
na_status_t na_kv_header_read(na_kv_store_t *s, na_kv_req_t *r, uint64_t *seq_p, int *tokens,
                              int n_layers);

static inline uint64_t na_kv_layer_off(const na_kv_req_t *r, int layer)
{
    return r->ext_off + NA_KV_HDR_BYTES + (uint64_t)layer * (uint64_t)r->max_blocks * r->block_bytes;
}

/* A request's failure state: NA_OK, or the status that failed it, with its
 * reason as the thread's error message. The one body of kv_store.c's
 * na_kv_req_check (the other modules' call) and of writeback.c's checks
 * (below kv_store.c, it does not call up). */
static inline na_status_t na_kv_req_state(const na_kv_req_t *r)
{
    if (r->fail_st == NA_OK)
        return NA_OK;
    return na_err(r->fail_st, "request %llu failed earlier: %s",
                  (unsigned long long)r->id, r->reason);
}

#endif /* NA_KV_INTERNAL_H */

/* storage-node/attn_engine.h — the attention engine of one device slot.
 *
 * An engine computes exact decode attention for a batch of entries
 * {request, layer, q, k_new, v_new} over the KV the slot's store holds
 * (DRAM blocks, SSD blocks, writeback buffer) and writes o. The interface is
 * asynchronous and incremental, so that attention starts on the first
 * entries of a message while later ones are still arriving (Lamina §5.2.1):
 *
 *     na_attn_batch_t *b;
 *     na_attn_batch_begin(e, &b);
 *     na_attn_submit(e, b, entries, 4);     // work starts at once
 *     na_attn_submit(e, b, entries + 4, 4); // more as they arrive
 *     na_attn_batch_close(e, b);            // no more; prefetch next layer
 *     na_attn_batch_wait(e, b);             // entry[i].status, entry[i].o
 *
 * or, instead of the blocking wait, na_attn_batch_test(e, b, 0, &done)
 * from a loop that has other work (a storage node answering messages).
 *
 * Engines are an ops table (na_attn_engine_ops_t: create / begin / submit /
 * close / test / wait / stats / destroy) chosen per slot by name; the names
 * and which are built come from the one registry, common/engines.h. "cpu"
 * is the implementation here (attn_cpu.c); "csd" (attn_csd.c, built with
 * XRT) runs the kernel of kernels/csd on the FPGA beside the slot's SSD;
 * "cuda" (attn_cuda.c: KV copies in GPU memory, overflow through an inner
 * CPU engine) is built with the CUDA toolkit; a known name not built is
 * refused with NA_ERR_UNSUPPORTED.
 *
 * CPU engine: the context of an entry is cut into granules of whole parts
 * (NA_ATTN_PART tokens, kernels.h; split_tokens rounded down to parts,
 * flash-decoding); each part's online-softmax partial is computed by one of
 * n_threads workers (attn_fold.c over the kernels table's attn_partial,
 * each K/V row read once for all query heads of its KV head, f32
 * accumulation, chunks of NA_ATTN_CHUNK whatever block_tokens) and the
 * partials are merged in part order, so results do not depend on tiers,
 * threads, block size or timing, and equal the compute node's cpu
 * attn_decode / attn_prefill bit for bit. Granules with SSD blocks are read
 * by an I/O thread with io_uring into staging chunks (large reads, queue
 * depth); at batch close the SSD blocks of the next prefetch_layers layers
 * of the same requests are read ahead (prefetch.c).
 *
 * Threading: begin/submit/close/wait are called from the slot's loop thread
 * (the same thread that uses the store). */
#ifndef NA_ATTN_ENGINE_H
#define NA_ATTN_ENGINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/status.h"
#include "kernels/kernels.h"
#include "storage-node/kv_store.h"

/* One unit of decode attention. Shapes are those of the request on this
 * slot: n_kvh KV heads (as opened) and n_kvh*group query heads. */
typedef struct {
    uint64_t     req;        /* request id */
    int          layer;
    int          n_q_heads;  /* query heads sent (must be n_kvh*group) */
    int          n_kv_heads; /* KV heads sent (must be the request's n_kvh) */
    const float *q;          /* (n_q_heads*head_dim), RoPE applied */
    const float *k_new;      /* (n_kv_heads*head_dim) row to append first, or NULL */
    const float *v_new;      /* (n_kv_heads*head_dim), NULL iff k_new is NULL */
    float       *o;          /* (n_q_heads*head_dim) output */
    int          n_ctx;      /* > 0: attend over the request's first n_ctx tokens only
                                (a query of a prompt chunk whose later rows are
                                appended already: causal); 0 = all it holds */
    int          n_q;        /* query rows: 0 or 1 = one. > 1: a prompt chunk of n_q
                                queries at consecutive positions, q and o n_q rows
                                each (q_stride apart; one query's heads per row).
                                Slot set entries (na_slotset_batch_add) also carry
                                the chunk's n_q K/V rows in k_new/v_new; an engine
                                entry of n_q > 1 (engines whose ops say block_queries)
                                has them appended already (k_new NULL): the last row
                                sees the context's tokens (n_ctx), row i the first
                                ctx - n_q + 1 + i of them. */
    size_t       q_stride;   /* n_q > 1: floats from one row of q (and of o) to the
                                next; 0 = n_q_heads*head_dim */
    /* results, set by na_attn_batch_wait */
    na_status_t  status;
    char         reason[200];
} na_attn_entry_t;

typedef struct {
    int                n_threads;       /* compute workers (>= 1) */
    int                group;           /* query heads per KV head (GQA ratio) */
    int                max_kv_heads;    /* most KV heads a request holds here (sizes chunks) */
    int                split_tokens;    /* tokens per granule, rounded down to whole
                                           parts of NA_ATTN_PART (at least one) */
    int                stage_chunks;    /* staging chunks for SSD reads (>= 2) */
    int                io_depth;        /* reads in flight (>= 8 recommended) */
    int                prefetch_layers; /* 0 = off, else layers read ahead at close */
    const char        *kernels;         /* kernels backend name, "cpu" */
    na_kv_io_factory_t io_factory;      /* NULL = io_uring */
    void              *io_arg;
    /* engine csd (attn_csd.c): the FPGA beside the slot's SSD */
    const char        *csd_device;      /* XRT device index ("0") or PCIe BDF */
    const char        *csd_xclbin;      /* xclbin path (NULL: the slot fails every entry) */
    uint64_t           csd_bytes;       /* device buffer for KV pages per launch */
    int                csd_timeout_ms;  /* bound on one kernel run */
    int                csd_required;    /* 1 (a storage node starting): a device that cannot
                                           be used fails create, naming why, instead of a
                                           slot that fails every entry mid-run */
    /* engine cuda (storage-node/attn_cuda.c) */
    int                gpu;             /* GPU index ("cuda:N") */
    long               hbm_mb;          /* device KV budget, MiB; 0 = 80% of the GPU */
    const char        *device_kernels;  /* NULL = "cuda:<gpu>"; tests: "refdev" */
} na_attn_engine_cfg_t;

typedef struct na_attn_engine na_attn_engine_t;
typedef struct na_attn_batch  na_attn_batch_t;    /* opaque, per implementation */

typedef struct {
    uint64_t entries, entries_failed;
    uint64_t granules, granules_ssd;
    uint64_t ssd_bytes_read;         /* demand + prefetch reads completed */
    uint64_t prefetch_hits, prefetch_issued;
    uint64_t tokens;                 /* context tokens attended */
    uint64_t compute_ns;             /* time in attention kernels (all workers and the
                                        loop thread while it helps) */
    uint64_t helped;                 /* jobs the loop thread ran while waiting (cpu) */
    uint32_t kernel_threads;         /* threads that run kernels: compute_ns / this is
                                        the busy wall time (0: n_threads) */
    uint64_t batch_ns;               /* begin -> wait returned, summed over batches */
    uint64_t io_busy_ns;             /* wall time with >= 1 SSD read in flight (cpu) */
    /* engine csd */
    uint64_t csd_noop;               /* 1: XRT noop + C model (never hardware) */
    uint64_t csd_launches;           /* kernel runs */
    uint64_t csd_launch_ns;          /* xrtRunStart -> wait returned, summed */
    uint64_t csd_p2p_bytes;          /* KV read SSD -> device buffer (pread into the P2P map) */
    uint64_t csd_host_bytes;         /* KV copied host DRAM -> device buffer */
    /* engine cuda */
    uint64_t cuda_budget;            /* device KV budget (bytes; lowered after a failed
                                        allocation to what was held then) */
    uint64_t cuda_bytes, cuda_peak;  /* device KV copies held now / at most */
    uint64_t cuda_fallbacks;         /* entries sent to the CPU engine for want of room
                                        or device memory (not SSD-only blocks) */
    uint64_t cuda_alloc_failed;      /* device allocations refused (cudaMalloc) */
} na_attn_stats_t;

/* One engine implementation. Every call is made from the slot's loop
 * thread; the calls below forward to these (inline: no layer of its own). */
typedef struct {
    /* builds the engine; na_attn_engine_create_impl sets its head (ops:
     * this table, kind: its registry name) */
    na_status_t (*create)(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                          na_attn_engine_t **e_p);
    void        (*destroy)(na_attn_engine_t *e);
    na_status_t (*begin)(na_attn_engine_t *e, na_attn_batch_t **b_p);
    na_status_t (*submit)(na_attn_engine_t *e, na_attn_batch_t *b, na_attn_entry_t *entries,
                          int n);
    na_status_t (*close)(na_attn_engine_t *e, na_attn_batch_t *b);
    /* *done = 1 once b is closed and every entry completed: the results are
     * on the entries and b is freed (as by wait). Waits at most wait_us. */
    na_status_t (*test)(na_attn_engine_t *e, na_attn_batch_t *b, int wait_us, int *done);
    na_status_t (*wait)(na_attn_engine_t *e, na_attn_batch_t *b);
    void        (*stats)(na_attn_engine_t *e, na_attn_stats_t *out);
    /* 1: submit takes entries of n_q > 1 query rows (a prompt chunk answered
     * as one block, each K/V run read once for all rows: cpu); 0: one query
     * per entry (the slot set splits a chunk into per-query entries: csd,
     * cuda). */
    int           block_queries;
    /* optional (NULL: submit, then close): the batch's last entries and its
     * close in one call, so that the engine knows no more are coming (cpu:
     * a small entry is computed on the calling thread, no worker woken) */
    na_status_t (*submit_close)(na_attn_engine_t *e, na_attn_batch_t *b,
                                na_attn_entry_t *entries, int n);
} na_attn_engine_ops_t;

/* The head of every engine object (an implementation's first member). */
struct na_attn_engine {
    const na_attn_engine_ops_t *ops;
    char                        kind[16];
};

/* The implementations (attn_engine.c's table indexes them by registry id;
 * the cuda engine runs an inner cpu one). */
extern const na_attn_engine_ops_t na_attn_cpu_ops;    /* attn_cpu.c */
#if NA_HAVE_CSD_ENGINE
extern const na_attn_engine_ops_t na_attn_csd_ops;    /* attn_csd.c */
#endif
#if NA_HAVE_CUDA
extern const na_attn_engine_ops_t na_attn_cuda_ops;   /* attn_cuda.c */
#endif

/* Fill cfg with defaults (1 thread, group 1, 8 KV heads, split 1024, 8 chunks,
 * depth 32, prefetch 1, kernels "cpu"). */
void        na_attn_engine_cfg_default(na_attn_engine_cfg_t *cfg);
/* Create engine `kind` over store. Starts its threads. An unknown kind
 * fails with NA_ERR_NOT_FOUND, a known one not built with
 * NA_ERR_UNSUPPORTED (common/engines.h says why), a bad cfg NA_ERR_RANGE. */
na_status_t na_attn_engine_create(const char *kind, na_kv_store_t *store,
                                  const na_attn_engine_cfg_t *cfg, na_attn_engine_t **e_p);
/* Whether the table has an implementation for registry id (common/engines.h). */
int         na_attn_engine_has(int id);
/* Create an engine of implementation impl and set its head (ops: impl,
 * kind); na_attn_engine_create's last step, and the cuda engine's for its
 * inner cpu one. */
static inline na_status_t na_attn_engine_create_impl(const na_attn_engine_ops_t *impl,
                                                     const char *kind, na_kv_store_t *store,
                                                     const na_attn_engine_cfg_t *cfg,
                                                     na_attn_engine_t **e_p)
{
    na_status_t st = impl->create(store, cfg, e_p);

    if (st == NA_OK) {
        (*e_p)->ops = impl;
        snprintf((*e_p)->kind, sizeof((*e_p)->kind), "%s", kind);
    }
    return st;
}

/* Stops the threads (after the reads in flight) and frees everything.
 * Every batch must have been completed (wait, or test said done) first. */
static inline void na_attn_engine_destroy(na_attn_engine_t *e)
{
    if (e != NULL)
        e->ops->destroy(e);
}

static inline na_status_t na_attn_batch_begin(na_attn_engine_t *e, na_attn_batch_t **b_p)
{
    return e->ops->begin(e, b_p);
}

/* Validate and start n entries: appends k_new/v_new to the store, takes a
 * view and queues the work. An entry of n_q > 1 to an engine without
 * block_queries fails the call (NA_ERR_INVALID; na_attn_engine_blocks says
 * which engines take them). An entry that fails validation completes at
 * once with its status and reason; the call itself fails only for engine
 * errors (out of memory). Entries must stay valid until b completes. */
static inline na_status_t na_attn_submit(na_attn_engine_t *e, na_attn_batch_t *b,
                                         na_attn_entry_t *entries, int n)
{
    int i;

    for (i = 0; i < n && !e->ops->block_queries; i++)
        if (entries[i].n_q > 1)
            return na_err(NA_ERR_INVALID, "attention engine '%s' takes one query per entry, "
                          "given %d (request %llu)", e->kind, entries[i].n_q,
                          (unsigned long long)entries[i].req);
    return e->ops->submit(e, b, entries, n);
}

/* na_attn_submit of b's last entries, then na_attn_batch_close (one call:
 * the engine may compute small entries on this thread rather than wake a
 * worker; errors as na_attn_submit, b is closed either way). */
static inline na_status_t na_attn_submit_close(na_attn_engine_t *e, na_attn_batch_t *b,
                                               na_attn_entry_t *entries, int n)
{
    na_status_t st;

    if (e->ops->submit_close == NULL) {
        st = na_attn_submit(e, b, entries, n);
        (void)e->ops->close(e, b);
        return st;
    }
    return e->ops->submit_close(e, b, entries, n);
}

/* No more entries for b; starts the layer-ahead prefetch. */
static inline na_status_t na_attn_batch_close(na_attn_engine_t *e, na_attn_batch_t *b)
{
    return e->ops->close(e, b);
}

/* Non-blocking completion check of a closed batch (waits at most wait_us;
 * 0 = just look). When *done = 1, b completed as by na_attn_batch_wait and
 * is freed; otherwise b is untouched. */
static inline na_status_t na_attn_batch_test(na_attn_engine_t *e, na_attn_batch_t *b,
                                             int wait_us, int *done)
{
    return e->ops->test(e, b, wait_us < 0 ? 0 : wait_us, done);
}

/* Block until every entry of b completed, release its views, propagate
 * failures to the store (a failed read fails its request), free b. */
static inline na_status_t na_attn_batch_wait(na_attn_engine_t *e, na_attn_batch_t *b)
{
    return e->ops->wait(e, b);
}

static inline void na_attn_engine_stats(na_attn_engine_t *e, na_attn_stats_t *out)
{
    e->ops->stats(e, out);
}

static inline const char *na_attn_engine_kind(const na_attn_engine_t *e)
{
    return e->kind;
}

/* 1 if e answers an entry of n_q > 1 query rows as one block. */
static inline int na_attn_engine_blocks(const na_attn_engine_t *e)
{
    return e->ops->block_queries;
}

#endif /* NA_ATTN_ENGINE_H */

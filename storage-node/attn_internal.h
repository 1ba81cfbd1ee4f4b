/* storage-node/attn_internal.h — private structures of the CPU attention
 * engine shared by attn_cpu.c and prefetch.c. Not for other modules. */
#ifndef NA_ATTN_INTERNAL_H
#define NA_ATTN_INTERNAL_H

#include <pthread.h>

#include "storage-node/attn_engine.h"

typedef struct na_attn_item na_attn_item_t;
typedef struct na_attn_cpu  na_attn_cpu_t;     /* the CPU engine */

/* One granule of one entry, or a prefetch read not yet claimed by one. */
typedef struct na_attn_job {
    struct na_attn_job *next;        /* prefetch list (e->pf) */
    struct na_attn_job *qnext;       /* read queue or compute queue */
    na_attn_item_t     *item;        /* NULL while an unclaimed prefetch */
    int                 g;           /* granule index in the item */
    int                 t0, t1;      /* tokens [t0, t1): whole parts (NA_ATTN_PART) */
    int                 i0, i1;      /* the item's query rows folded (a block: a range
                                        of its rows; one query: 0, 1) */
    int                 b0, nb;      /* blocks [b0, b0+nb) of the layer: those of t0..t1 */
    int                 s0;          /* first block held in chunk (SSD range) */
    int                 fd;          /* SSD file */
    uint64_t            off;         /* file offset of block s0 */
    size_t              got;         /* bytes read so far */
    size_t              len;         /* bytes read into chunk (0 = no read) */
    void               *chunk;       /* staging chunk, or NULL */
    int                 pieces;      /* reads in flight */
    int                 failed;      /* a read failed, came back short or failed
                                        its checksum */
    char                why[200];
    /* prefetch */
    int                 prefetch;    /* issued by prefetch */
    int                 done;        /* all reads completed */
    int                 stale;       /* drop on completion */
    uint64_t            req_id, seq;
    int                 layer;
    uint64_t            round;
} na_attn_job_t;

struct na_attn_item {
    na_attn_entry_t *entry;
    na_attn_batch_t *batch;
    na_kv_view_t     view;
    int              has_view;
    int              n_kvh, group;
    int              n_gran;
    int              n_parts;        /* parts of the context (NA_ATTN_PART tokens) */
    int              pending;        /* jobs not yet computed */
    int              started;        /* its jobs were made (or it completed at once) */
    int              n_q;            /* query rows (a prompt chunk's block: > 1) */
    int              lim0;           /* row i sees the first lim0 + i tokens */
    const float     *qg;             /* the rows, KV-head major (na_attn_rows_t) */
    float           *qg_own;         /* qg when gathered here (n_q > 1) */
    na_attn_stat_t  *st;             /* (n_parts, n_kvh*n_q*group) partial stats */
    float           *acc;            /* (n_parts, n_kvh*n_q*group*head_dim) partial sums */
    na_attn_stat_t  *tst;            /* n_q > 1: a row's parts, to merge */
    float           *tacc;           /*   (n_parts, n_kvh*group[*head_dim]) */
    size_t           qg_cap, st_cap, acc_cap, tst_cap, tacc_cap;  /* their sizes (elements):
                                        kept with the item on the engine's free list */
    struct na_attn_item *next;       /* on the engine's free list */
    na_status_t      status;
    char             reason[200];
};

struct na_attn_batch {
    uint64_t         t_begin_ns;
    na_attn_item_t **items;
    int              n, cap;
    int              done;           /* items completed (written under engine mu,
                                        atomically: na_attn_yield_wait polls it) */
    int              closed;
    struct na_attn_batch *next_free; /* on the engine's free list (items kept) */
};

struct na_attn_cpu {
    na_attn_engine_t     base;          /* ops table and kind: first */
    na_attn_engine_cfg_t cfg;
    na_kv_store_t       *store;
    const na_kv_store_cfg_t *kcfg;
    na_kv_io_t          *io;
    size_t               chunk_bytes;
    void               **chunks;        /* (stage_chunks) */
    void               **free_chunks;   /* stack */
    int                  n_free_chunks;

    pthread_mutex_t      mu;
    pthread_cond_t       cv_work;       /* workers: tasks queued / stop */
    pthread_cond_t       cv_io;         /* I/O thread: reads queued, chunk freed / stop */
    pthread_cond_t       cv_done;       /* loop thread: an item completed */
    na_attn_job_t       *rq_head, *rq_tail;   /* jobs waiting for a chunk + reads */
    na_attn_job_t       *cq_head, *cq_tail;   /* jobs ready to compute */
    na_attn_job_t       *pf;                  /* prefetch jobs issued, not claimed */
    int                  reads_inflight;
    uint64_t             io_busy_since; /* when reads_inflight last rose from 0 */
    int                  stop;
    uint64_t             round;
    pthread_t            io_thread;
    pthread_t           *workers;
    na_kernels_t       **kernels;       /* one backend per worker, then the loop's */
    int                  n_started;
    na_attn_stats_t      stats;         /* guarded by mu */
    uint64_t             read_unreported;
    /* free lists (guarded by mu): steady decode reuses what completed */
    na_attn_job_t       *job_free;
    na_attn_item_t      *item_free;
    na_attn_batch_t     *batch_free;
};

/* attn_cpu.c (e->mu held): a zeroed job from the free list or new (NULL
 * out of memory); a job done with back onto it. */
na_attn_job_t *na_attn_job_get(na_attn_cpu_t *e);
void           na_attn_job_put(na_attn_cpu_t *e, na_attn_job_t *j);

/* prefetch.c (called with e->mu held) */
/* Claim a prefetch job matching (req, seq, layer, granule range, read
 * range) for item; returns it (moved off the prefetch list) or NULL. */
na_attn_job_t *na_attn_pf_claim(na_attn_cpu_t *e, const na_attn_job_t *want);
/* Queue reads for the SSD granules of layers layer+1 .. layer+P of the
 * batch's requests (called at batch close, without e->mu). */
void           na_attn_pf_issue(na_attn_cpu_t *e, na_attn_batch_t *b);
/* Drop prefetches older than keep rounds (e->mu held). */
void           na_attn_pf_expire(na_attn_cpu_t *e, uint64_t keep);
/* Granules of a context of n_tokens (attn_cpu.c): whole parts each
 * (split_tokens rounded down to parts, at least one). */
int            na_attn_n_granules(const na_attn_cpu_t *e, int n_tokens);
/* Granule g's tokens [t0, t1) and the blocks [b0, b0+nb) that hold them. */
void           na_attn_granule_range(const na_attn_cpu_t *e, int n_tokens, int g, int *t0_p,
                                     int *t1_p, int *b0_p, int *nb_p);
/* Compute the SSD read range of granule [b0, b0+nb) of view; 0 if none. */
int            na_attn_granule_ssd(const na_kv_view_t *v, int b0, int nb, int *s0_p,
                                   uint64_t *off_p, size_t *len_p);
/* Queue a job for reading (e->mu held) and wake the I/O thread. */
void           na_attn_rq_push(na_attn_cpu_t *e, na_attn_job_t *j);
void           na_attn_chunk_put(na_attn_cpu_t *e, void *chunk);

#endif /* NA_ATTN_INTERNAL_H */

/* storage-node/attn_cpu.c — the CPU attention engine ("cpu" in the engine
 * table, attn_engine.c): an I/O thread that reads SSD granules with io_uring
 * into staging chunks, compute workers that fold granules through the
 * kernels table (attn_fold.c), and the layer-ahead prefetch of the next
 * layers' SSD granules at batch close (see attn_engine.h for the model). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/grow.h"
#include "common/log.h"
#include "storage-node/attn_engine.h"
#include "storage-node/attn_fold.h"
#include "storage-node/kv_fault.h"

/* Longest the loop thread polls (yielding) for a batch's last jobs before it
 * sleeps (na_attn_yield_wait). */
#define NA_ATTN_YIELD_US 1000
/* Longest the loop thread runs a batch's jobs in one test before it goes
 * back to its peers (it finishes the job in hand): a STATS or ECHO sent right
 * after a batch was answered only after the whole batch otherwise
 * (test_node_tier's busy client: 5 of 5 layers late in a CI run, once the
 * kernels took 2-3 ms per batch). */
#define NA_ATTN_HELP_US 500
/* Most work (tokens x query heads x head_dim, summed over the jobs) the
 * loop thread queues without waking a worker (na_attn_cq_push_quiet):
 * about 15 us of kernels on the 2-vCPU VMs, below a worker's wake-up. */
#define NA_ATTN_INLINE_WORK (128u * 1024u)

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
    na_kattn_stat_t  *st;             /* (n_parts, n_kvh*n_q*group) partial stats */
    float           *acc;            /* (n_parts, n_kvh*n_q*group*head_dim) partial sums */
    na_kattn_stat_t  *tst;            /* n_q > 1: a row's parts, to merge */
    float           *tacc;           /*   (n_parts, n_kvh*group[*head_dim]) */
    void            *scratch;        /* the one block those five lie in (cpu_item_arrays) */
    size_t           scratch_cap;    /* its bytes: kept with the item on the engine's free
                                        list */
    struct na_attn_item *next;       /* on the engine's free list */
    na_status_t      status;
    char             reason[200];
};

struct na_attn_batch {
    uint64_t         t_begin_ns;
    na_attn_item_t **items;
    int              n;
    size_t           cap;
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
    uint64_t             quiet_work;    /* work of the jobs queued since a worker was last
                                           woken (na_attn_cq_push_quiet) */
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

/* Parts (NA_ATTN_PART tokens) per granule: split_tokens rounded down to
 * whole parts, at least one; a granule never cuts a part, whose chunks and
 * merge order are the canonical ones (attn_fold.h). */
static int na_attn_granule_parts(const na_attn_cpu_t *e)
{
    int p = e->cfg.split_tokens / NA_ATTN_PART;
    return p < 1 ? 1 : p;
}

static int na_attn_n_granules(const na_attn_cpu_t *e, int n_tokens)
{
    const int ppg = na_attn_granule_parts(e);
    return (na_attn_n_parts(n_tokens) + ppg - 1) / ppg;
}

static void na_attn_granule_range(const na_attn_cpu_t *e, int n_tokens, int g, int *t0_p,
                                  int *t1_p, int *b0_p, int *nb_p)
{
    const int gt = na_attn_granule_parts(e) * NA_ATTN_PART, bt = e->kcfg->block_tokens;
    const int t0 = g * gt, t1 = n_tokens - t0 < gt ? n_tokens : t0 + gt;

    *t0_p = t0;
    *t1_p = t1;
    *b0_p = t0 / bt;
    *nb_p = (t1 + bt - 1) / bt - t0 / bt;
}

static int na_attn_granule_ssd(const na_kv_view_t *v, int b0, int nb, int *s0_p,
                               uint64_t *off_p, size_t *len_p)
{
    int b, first = -1, last = -1;

    for (b = b0; b < b0 + nb; b++) {
        if (v->blocks[b].loc == NA_KV_LOC_SSD) {
            if (first < 0)
                first = b;
            last = b;
        }
    }
    if (first < 0)
        return 0;
    *s0_p = first;
    *off_p = v->ssd_off + (uint64_t)first * v->block_bytes;
    *len_p = (size_t)(last - first + 1) * v->block_bytes;
    return 1;
}

/* ---------------------------------------------------------------------- */
/* Queues (e->mu held)                                                     */

/* Append j to the FIFO *head .. *tail (linked by qnext). */
static void na_attn_q_append(na_attn_job_t **head, na_attn_job_t **tail, na_attn_job_t *j)
{
    j->qnext = NULL;
    if (*tail != NULL)
        (*tail)->qnext = j;
    else
        *head = j;
    *tail = j;
}

static void na_attn_rq_push(na_attn_cpu_t *e, na_attn_job_t *j)
{
    na_attn_q_append(&e->rq_head, &e->rq_tail, j);
    pthread_cond_signal(&e->cv_io);
}

static void na_attn_cq_push(na_attn_cpu_t *e, na_attn_job_t *j)
{
    na_attn_q_append(&e->cq_head, &e->cq_tail, j);
    pthread_cond_signal(&e->cv_work);
}

/* A granule in memory of a batch's last entries (submit_close: the loop
 * thread closes the batch at once; work: its tokens x query heads x
 * head_dim). While the jobs queued since the workers were last woken add
 * up to at most NA_ATTN_INLINE_WORK, no worker is woken: the loop thread
 * runs them itself at close (cpu_close), which costs less than waking a
 * sleeping worker and waiting for its wake-up back (20-110 us on the
 * 2-vCPU VMs; a decode entry of the demo model is ~2 us of kernels). Past
 * that, every worker is woken for the queue. Entries submitted before the
 * last ones start on the workers at once (streaming, attn_engine.h). */
static void na_attn_cq_push_quiet(na_attn_cpu_t *e, na_attn_job_t *j, uint64_t work)
{
    na_attn_q_append(&e->cq_head, &e->cq_tail, j);
    if (e->quiet_work + work <= NA_ATTN_INLINE_WORK) {
        e->quiet_work += work;
        return;
    }
    e->quiet_work = 0;
    pthread_cond_broadcast(&e->cv_work);
}

static na_attn_job_t *na_attn_job_get(na_attn_cpu_t *e)
{
    na_attn_job_t *j = e->job_free;

    if (j == NULL)
        return calloc(1, sizeof(*j));
    e->job_free = j->next;
    memset(j, 0, sizeof(*j));
    return j;
}

static void na_attn_job_put(na_attn_cpu_t *e, na_attn_job_t *j)
{
    j->next = e->job_free;
    e->job_free = j;
}

static void na_attn_chunk_put(na_attn_cpu_t *e, void *chunk)
{
    e->free_chunks[e->n_free_chunks++] = chunk;
    pthread_cond_signal(&e->cv_io);
}

/* ---------------------------------------------------------------------- */
/* Layer-ahead prefetch of SSD-resident KV.
 *
 * When a batch for layer l is closed (all its entries arrived), the compute
 * node is about to spend a while on the rest of layer l and on layer l+1's
 * projections; the storage node uses that time to read the SSD granules of
 * layers l+1 .. l+P of the same requests into staging chunks, so that when
 * layer l+1's entries arrive their SSD blocks are already (being) read and
 * disk reads overlap computation instead of following it.
 *
 * A prefetch is keyed by (request id, open generation, layer, first block,
 * block count, file offset, length). The next submit of that (request,
 * layer) computes the same granules from its own view and claims a match;
 * a mismatch (a block settled to the SSD tier in between, a request that
 * went away) is never used: the granule is read on demand and the stale
 * prefetch is dropped after a few rounds. Prefetches hold at most half of
 * the staging chunks, so demand reads always make progress. */

#define NA_ATTN_PF_KEEP_ROUNDS 2

static int na_attn_pf_match(const na_attn_job_t *p, const na_attn_job_t *w)
{
    return p->req_id == w->req_id && p->seq == w->seq && p->layer == w->layer &&
           p->b0 == w->b0 && p->nb == w->nb && p->s0 == w->s0 && p->off == w->off &&
           p->len == w->len;
}

static na_attn_job_t *na_attn_pf_claim(na_attn_cpu_t *e, const na_attn_job_t *want)
{
    na_attn_job_t **pp = &e->pf, *p;

    for (p = *pp; p != NULL; pp = &p->next, p = p->next) {
        if (!p->stale && na_attn_pf_match(p, want)) {
            *pp = p->next;
            p->next = NULL;
            return p;
        }
    }
    return NULL;
}

static void na_attn_pf_expire(na_attn_cpu_t *e, uint64_t keep)
{
    na_attn_job_t **pp = &e->pf, *p;

    while ((p = *pp) != NULL) {
        if (p->round + keep < e->round) {
            *pp = p->next;
            if (p->done) {                 /* read finished: give the chunk back */
                if (p->chunk != NULL)
                    na_attn_chunk_put(e, p->chunk);
                na_attn_job_put(e, p);
            } else {                       /* queued or in flight: drop when it lands */
                p->stale = 1;
                if (p->chunk == NULL) {    /* still queued: remove from the read queue */
                    na_attn_job_t **qq = &e->rq_head, *q, *prev = NULL;
                    for (q = *qq; q != NULL && q != p; prev = q, qq = &q->qnext, q = q->qnext)
                        ;
                    if (q == p) {
                        *qq = p->qnext;
                        if (e->rq_tail == p)
                            e->rq_tail = prev;
                        na_attn_job_put(e, p);
                    }
                }
            }
            continue;
        }
        pp = &p->next;
    }
}

static int na_attn_pf_count(const na_attn_cpu_t *e)
{
    const na_attn_job_t *p;
    int n = 0;
    for (p = e->pf; p != NULL; p = p->next)
        n++;
    return n;
}

static void na_attn_pf_issue(na_attn_cpu_t *e, na_attn_batch_t *b)
{
    const na_kv_store_cfg_t *kc = e->kcfg;
    const int budget = e->cfg.stage_chunks / 2;
    int i, d, g;

    pthread_mutex_lock(&e->mu);
    e->round++;
    na_attn_pf_expire(e, NA_ATTN_PF_KEEP_ROUNDS);
    pthread_mutex_unlock(&e->mu);

    for (d = 1; d <= e->cfg.prefetch_layers; d++) {
        for (i = 0; i < b->n; i++) {
            na_attn_item_t *it = b->items[i];
            na_kv_view_t v;
            int layer, n_gran;

            if (!it->has_view || it->status != NA_OK || it->entry->n_ctx > 0)
                continue;       /* a prompt chunk's earlier queries: its last one reads ahead */
            layer = it->entry->layer + d;
            if (layer >= kc->n_layers)
                continue;
            if (na_kv_view(e->store, it->view.req, layer, &v) != NA_OK)
                continue;
            n_gran = na_attn_n_granules(e, v.n_tokens);
            pthread_mutex_lock(&e->mu);
            for (g = 0; g < n_gran; g++) {
                na_attn_job_t *j;
                if (na_attn_pf_count(e) >= budget)
                    break;
                j = na_attn_job_get(e);
                if (j == NULL)
                    break;
                na_attn_granule_range(e, v.n_tokens, g, &j->t0, &j->t1, &j->b0, &j->nb);
                if (!na_attn_granule_ssd(&v, j->b0, j->nb, &j->s0, &j->off, &j->len) ||
                    j->len > e->chunk_bytes) {
                    na_attn_job_put(e, j);
                    continue;
                }
                j->fd = v.fd;
                j->prefetch = 1;
                j->req_id = it->entry->req;
                j->seq = na_kv_req_seq(it->view.req);
                j->layer = layer;
                j->round = e->round;
                j->next = e->pf;
                e->pf = j;
                e->stats.prefetch_issued++;
                na_attn_rq_push(e, j);
            }
            pthread_mutex_unlock(&e->mu);
            na_kv_view_release(e->store, &v);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* I/O thread                                                              */

static void na_attn_read_done(na_attn_cpu_t *e, na_attn_job_t *j)
{
    j->done = 1;
    e->stats.ssd_bytes_read += j->len;
    e->read_unreported += j->len;
    if (j->item != NULL) {
        na_attn_cq_push(e, j);
    } else if (j->stale) {                    /* expired prefetch */
        na_attn_chunk_put(e, j->chunk);
        na_attn_job_put(e, j);
    }
    /* else: an unclaimed prefetch stays on e->pf until claimed or expired */
}

static void *na_attn_io_main(void *arg)
{
    na_attn_cpu_t *e = arg;
    na_kv_io_cqe_t cqe[64];
    int n, i;

    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && e->rq_head != NULL && e->n_free_chunks > 0) {
            na_attn_job_t *j = e->rq_head;
            int need = (int)((j->len + NA_KV_IO_MAX - 1) / NA_KV_IO_MAX), pieces = 0;
            size_t o;

            /* keep at most io_depth reads in flight (one job alone may exceed it) */
            if (e->reads_inflight > 0 && e->reads_inflight + need > e->cfg.io_depth)
                break;
            e->rq_head = j->qnext;
            if (e->rq_head == NULL)
                e->rq_tail = NULL;
            j->chunk = e->free_chunks[--e->n_free_chunks];
            for (o = 0; o < j->len; o += NA_KV_IO_MAX) {
                size_t piece = j->len - o < NA_KV_IO_MAX ? j->len - o : NA_KV_IO_MAX;
                na_status_t st = e->io->ops->prep_read(e->io, j->fd, (char *)j->chunk + o,
                                                       piece, j->off + o, (uint64_t)(uintptr_t)j);
                if (st == NA_ERR_BUSY && e->io->ops->submit(e->io) == NA_OK)
                    st = e->io->ops->prep_read(e->io, j->fd, (char *)j->chunk + o, piece,
                                               j->off + o, (uint64_t)(uintptr_t)j);
                if (st != NA_OK) {
                    j->failed = 1;
                    snprintf(j->why, sizeof(j->why), "%s", na_errmsg());
                    break;
                }
                pieces++;
            }
            j->pieces = pieces;
            if (e->reads_inflight == 0 && pieces > 0)
                e->io_busy_since = na_now_ns();      /* the disk gets work: busy from now */
            e->reads_inflight += pieces;
            if (pieces == 0)
                na_attn_read_done(e, j);
        }
        if (e->stop && e->reads_inflight == 0)
            break;
        if (e->reads_inflight == 0) {
            pthread_cond_wait(&e->cv_io, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        if (e->io->ops->wait(e->io, 1, cqe, 64, &n) != NA_OK) {
            na_log_error("attention engine: %s", na_errmsg());
            n = 0;
        }
        pthread_mutex_lock(&e->mu);
        for (i = 0; i < n; i++) {
            na_attn_job_t *j = (na_attn_job_t *)(uintptr_t)cqe[i].tag;
            if (--e->reads_inflight == 0)          /* idle again: close the busy span */
                e->stats.io_busy_ns += na_now_ns() - e->io_busy_since;
            j->pieces--;
            if (cqe[i].res < 0) {
                if (!j->failed)
                    snprintf(j->why, sizeof(j->why), "SSD read at offset %llu: %s",
                             (unsigned long long)j->off, strerror((int)-cqe[i].res));
                j->failed = 1;
            } else {
                j->got += (size_t)cqe[i].res;
            }
            if (j->pieces == 0) {
                if (!j->failed && j->got != j->len) {
                    j->failed = 1;
                    snprintf(j->why, sizeof(j->why), "short SSD read at offset %llu: %zu of %zu bytes",
                             (unsigned long long)j->off, j->got, j->len);
                }
                na_attn_read_done(e, j);
            }
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---------------------------------------------------------------------- */
/* Compute workers                                                         */

typedef struct {
    na_attn_cpu_t *e;
    int               idx;
} na_attn_worker_arg_t;

/* The base of block b of granule j's view: in memory, or in the granule's
 * SSD chunk. */
static const char *na_attn_block_base(const na_attn_job_t *j, const na_kv_view_t *v, int b)
{
    const na_kv_block_t *blk = &v->blocks[b];
    return blk->loc == NA_KV_LOC_SSD
        ? (const char *)j->chunk + (size_t)(b - j->s0) * v->block_bytes
        : (const char *)blk->mem;
}

/* The base of block b for na_attn_fold_range: arg is the granule's job. */
static const char *na_attn_job_block(void *arg, int b)
{
    const na_attn_job_t *j = arg;
    return na_attn_block_base(j, &j->item->view, b);
}

/* Fold job j: each part of its granule, for the item's rows [i0, i1), into
 * the item's partial slots of that part (attn_fold.c: runs of whole chunks,
 * a run's blocks read for every KV head before the next run, once for all
 * of the rows that see it; each span names the next head's K and V for the
 * kernel to prefetch). */
static void na_attn_granule_compute(na_attn_cpu_t *e, na_kernels_t *k, na_attn_job_t *j)
{
    na_attn_item_t *it = j->item;
    const int hd = e->kcfg->head_dim, grp = it->group, rows = it->n_kvh * grp;
    const na_attn_shape_t sh = { e->kcfg->block_tokens, hd, e->kcfg->kv_dtype, it->n_kvh,
                                 grp };
    const size_t pr = (size_t)rows * it->n_q;        /* one part's rows */
    int t, h;

    for (t = j->t0; t < j->t1; t += NA_ATTN_PART) {
        const int p = t / NA_ATTN_PART, t1 = j->t1 - t < NA_ATTN_PART ? j->t1 : t + NA_ATTN_PART;
        const na_attn_rows_t r = { it->qg, it->st + (size_t)p * pr, it->acc + (size_t)p * pr * hd,
                                   it->n_q, j->i0, j->i1, it->lim0 };
        for (h = 0; h < it->n_kvh; h++) {
            const size_t x = ((size_t)h * it->n_q + j->i0) * grp;
            na_kattn_init(r.st + x, r.acc + x * hd, (j->i1 - j->i0) * grp, hd);
        }
        na_attn_fold_rows(k, &sh, &r, t, t1, na_attn_job_block, j);
    }
}

/* All jobs of item done: merge the parts' partials in order, write o (a
 * block: each row its own parts, na_attn_rows_merge). */
static void na_attn_item_finalize(na_attn_cpu_t *e, na_attn_item_t *it)
{
    const int hd = e->kcfg->head_dim, rows = it->n_kvh * it->group;

    if (it->status != NA_OK)
        return;
    if (it->n_parts == 0) {
        memset(it->entry->o, 0, sizeof(float) * (size_t)rows * hd);
        return;
    }
    if (it->n_q > 1) {
        const na_attn_shape_t sh = { e->kcfg->block_tokens, hd, e->kcfg->kv_dtype, it->n_kvh,
                                     it->group };
        na_attn_rows_merge(&sh, it->n_q, it->lim0, it->n_parts, it->st, it->acc, it->tst,
                           it->tacc, it->entry->o, it->entry->q_stride ? it->entry->q_stride
                           : (size_t)rows * hd);
        return;
    }
    na_attn_fold_merge(it->entry->o, it->st, it->acc, it->n_parts, rows, hd);
}

/* e->mu held: one more item of its batch completed. */
static void na_attn_item_done(na_attn_cpu_t *e, na_attn_item_t *it)
{
    e->stats.entries++;
    if (it->status != NA_OK)
        e->stats.entries_failed++;
    __atomic_add_fetch(&it->batch->done, 1, __ATOMIC_RELEASE);   /* polled unlocked */
    pthread_cond_broadcast(&e->cv_done);
}

/* e->mu held, e->cq_head != NULL: take the head job off the compute queue,
 * fold it with kernels k (e->mu released meanwhile), account for it and,
 * if it was its item's last, finalize the item. Returns with e->mu held. */
static void na_attn_job_run(na_attn_cpu_t *e, na_kernels_t *k)
{
    na_attn_job_t *j = e->cq_head;
    na_attn_item_t *it = j->item;
    uint64_t t0 = 0;
    int ok;

    e->cq_head = j->qnext;
    if (e->cq_head == NULL)
        e->cq_tail = NULL;
    ok = !j->failed && it->status == NA_OK;
    pthread_mutex_unlock(&e->mu);
    if (ok && j->len > 0) {                      /* blocks read back from the SSD */
        const na_kv_view_t *v = &it->view;
        int b;
        for (b = j->b0; b < j->b0 + j->nb && ok; b++)
            if (v->blocks[b].loc == NA_KV_LOC_SSD &&
                na_kv_view_check(v, b, (const char *)j->chunk +
                                       (size_t)(b - j->s0) * v->block_bytes) != NA_OK) {
                snprintf(j->why, sizeof(j->why), "%s", na_errmsg());
                j->failed = 1;
                ok = 0;
            }
    }
    if (ok) {
        t0 = na_now_ns();
        na_attn_granule_compute(e, k, j);
        t0 = na_now_ns() - t0;
    }
    pthread_mutex_lock(&e->mu);
    e->stats.compute_ns += t0;
    if (j->chunk != NULL)
        na_attn_chunk_put(e, j->chunk);
    if (j->failed && it->status == NA_OK) {
        it->status = NA_ERR_IO;
        snprintf(it->reason, sizeof(it->reason), "%s", j->why);
    }
    e->stats.granules++;
    if (j->len > 0)
        e->stats.granules_ssd++;
    if (j->prefetch)
        e->stats.prefetch_hits++;
    na_attn_job_put(e, j);
    if (--it->pending == 0) {
        pthread_mutex_unlock(&e->mu);
        na_attn_item_finalize(e, it);
        pthread_mutex_lock(&e->mu);
        na_attn_item_done(e, it);
    }
}

static void *na_attn_worker_main(void *arg)
{
    na_attn_worker_arg_t *wa = arg;
    na_attn_cpu_t *e = wa->e;
    na_kernels_t *k = e->kernels[wa->idx];

    free(wa);
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && e->cq_head == NULL)
            pthread_cond_wait(&e->cv_work, &e->mu);
        if (e->cq_head == NULL)
            break;
        na_attn_job_run(e, k);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---------------------------------------------------------------------- */
/* Create / destroy                                                        */

static na_status_t na_attn_cfg_check(const na_attn_engine_cfg_t *c)
{
    if (c->n_threads < 1 || c->n_threads > 256)
        return na_err(NA_ERR_RANGE, "attention engine: n_threads = %d out of range [1, 256]",
                      c->n_threads);
    if (c->group < 1 || c->group > 256)
        return na_err(NA_ERR_RANGE, "attention engine: group = %d out of range [1, 256]", c->group);
    if (c->max_kv_heads < 1 || c->max_kv_heads > 1024)
        return na_err(NA_ERR_RANGE, "attention engine: max_kv_heads = %d out of range [1, 1024]",
                      c->max_kv_heads);
    if (c->split_tokens < 1)
        return na_err(NA_ERR_RANGE, "attention engine: split_tokens = %d < 1", c->split_tokens);
    if (c->stage_chunks < 2 || c->stage_chunks > 1024)
        return na_err(NA_ERR_RANGE, "attention engine: stage_chunks = %d out of range [2, 1024]",
                      c->stage_chunks);
    if (c->io_depth < 1 || c->io_depth > 1024)
        return na_err(NA_ERR_RANGE, "attention engine: io_depth = %d out of range [1, 1024]",
                      c->io_depth);
    if (c->prefetch_layers < 0 || c->prefetch_layers > 8)
        return na_err(NA_ERR_RANGE, "attention engine: prefetch_layers = %d out of range [0, 8]",
                      c->prefetch_layers);
    return NA_OK;
}

static void na_attn_engine_stop(na_attn_cpu_t *e)
{
    int i;

    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->cv_work);
    pthread_cond_broadcast(&e->cv_io);
    pthread_mutex_unlock(&e->mu);
    if (e->n_started > 0)
        pthread_join(e->io_thread, NULL);
    for (i = 0; i + 1 < e->n_started; i++)
        pthread_join(e->workers[i], NULL);
    e->n_started = 0;
}

static void cpu_item_destroy(na_attn_item_t *it)
{
    free(it->scratch);
    free(it);
}

/* Free a list of jobs linked by next (the prefetches, the free list). */
static void cpu_job_list_free(na_attn_job_t *j)
{
    while (j != NULL) {
        na_attn_job_t *next = j->next;
        free(j);
        j = next;
    }
}

static void cpu_destroy(na_attn_engine_t *base)
{
    na_attn_cpu_t *e = (na_attn_cpu_t *)base;
    int i;

    if (e == NULL)
        return;
    na_attn_engine_stop(e);
    while (e->rq_head != NULL) {           /* unclaimed prefetches are on e->pf */
        na_attn_job_t *j = e->rq_head;
        e->rq_head = j->qnext;
        if (!(j->prefetch && j->item == NULL))
            free(j);
    }
    cpu_job_list_free(e->pf);
    cpu_job_list_free(e->job_free);
    while (e->item_free != NULL) {
        na_attn_item_t *it = e->item_free;
        e->item_free = it->next;
        cpu_item_destroy(it);
    }
    while (e->batch_free != NULL) {
        na_attn_batch_t *b = e->batch_free;
        e->batch_free = b->next_free;
        free(b->items);
        free(b);
    }
    for (i = 0; e->chunks && i < e->cfg.stage_chunks; i++)
        na_kv_aligned_free(e->chunks[i]);
    free(e->chunks);
    free(e->free_chunks);
    for (i = 0; e->kernels && i <= e->cfg.n_threads; i++)
        if (e->kernels[i])
            na_kernels_destroy(e->kernels[i]);
    free(e->kernels);
    free(e->workers);
    na_kv_io_destroy(e->io);
    pthread_cond_destroy(&e->cv_done);
    pthread_cond_destroy(&e->cv_io);
    pthread_cond_destroy(&e->cv_work);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static na_status_t cpu_create(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                              na_attn_engine_t **e_p)
{
    na_attn_cpu_t *e;
    na_status_t st;
    int i, g0;

    st = na_attn_cfg_check(cfg);
    if (st != NA_OK)
        return st;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return na_err(NA_ERR_NOMEM, "attention engine: out of memory");
    e->cfg = *cfg;
    if (e->cfg.kernels == NULL)
        e->cfg.kernels = "cpu";
    e->store = store;
    e->kcfg = na_kv_store_cfg(store);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_work, NULL);
    pthread_cond_init(&e->cv_io, NULL);
    na_cond_init_mono(&e->cv_done);                /* timed: na_attn_batch_wait */

    /* a granule's blocks: its parts' tokens, plus a block cut at each end */
    g0 = na_attn_granule_parts(e) * NA_ATTN_PART / e->kcfg->block_tokens + 2;
    e->chunk_bytes = (size_t)g0 * na_kv_block_bytes(e->kcfg, cfg->max_kv_heads);
    st = cfg->io_factory ? cfg->io_factory(cfg->io_arg, cfg->io_depth, &e->io)
                         : na_kv_io_default_create(cfg->io_depth, &e->io);
    if (st != NA_OK)
        goto err_destroy;
    e->chunks = calloc((size_t)cfg->stage_chunks, sizeof(void *));
    e->free_chunks = calloc((size_t)cfg->stage_chunks, sizeof(void *));
    e->kernels = calloc((size_t)cfg->n_threads + 1, sizeof(*e->kernels));  /* + the loop's */
    e->workers = calloc((size_t)cfg->n_threads, sizeof(*e->workers));
    if (!e->chunks || !e->free_chunks || !e->kernels || !e->workers)
        goto err_nomem;
    for (i = 0; i < cfg->stage_chunks; i++) {
        e->chunks[i] = na_kv_aligned_alloc(e->chunk_bytes);
        if (e->chunks[i] == NULL)
            goto err_nomem;
        e->free_chunks[e->n_free_chunks++] = e->chunks[i];
    }
    for (i = 0; i <= cfg->n_threads; i++) {
        st = na_kernels_create(e->cfg.kernels, 1, &e->kernels[i]);
        if (st != NA_OK)
            goto err_destroy;
    }
    if (pthread_create(&e->io_thread, NULL, na_attn_io_main, e) != 0) {
        st = na_err(NA_ERR_INTERNAL, "attention engine: pthread_create failed");
        goto err_destroy;
    }
    e->n_started = 1;
    for (i = 0; i < cfg->n_threads; i++) {
        na_attn_worker_arg_t *wa = malloc(sizeof(*wa));
        if (wa == NULL)
            goto err_nomem;
        wa->e = e;
        wa->idx = i;
        if (pthread_create(&e->workers[i], NULL, na_attn_worker_main, wa) != 0) {
            free(wa);
            st = na_err(NA_ERR_INTERNAL, "attention engine: pthread_create failed");
            goto err_destroy;
        }
        e->n_started++;
    }
    *e_p = &e->base;
    return NA_OK;

err_nomem:
    st = na_err(NA_ERR_NOMEM, "attention engine: out of memory");
err_destroy:
    cpu_destroy(&e->base);
    return st;
}

static void cpu_stats(na_attn_engine_t *base, na_attn_stats_t *out)
{
    na_attn_cpu_t *e = (na_attn_cpu_t *)base;

    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    pthread_mutex_unlock(&e->mu);
    out->kernel_threads = (uint32_t)e->cfg.n_threads + 1;   /* the workers and the loop */
}

/* ---------------------------------------------------------------------- */
/* Batches                                                                 */

static na_status_t cpu_begin(na_attn_engine_t *base, na_attn_batch_t **b_p)
{
    na_attn_cpu_t *e = (na_attn_cpu_t *)base;
    na_attn_batch_t *b;

    pthread_mutex_lock(&e->mu);
    b = e->batch_free;
    if (b != NULL)
        e->batch_free = b->next_free;
    pthread_mutex_unlock(&e->mu);
    if (b == NULL && (b = calloc(1, sizeof(*b))) == NULL)
        return na_err(NA_ERR_NOMEM, "attention batch: out of memory");
    b->n = 0;                       /* items and cap are kept */
    b->done = 0;
    b->closed = 0;
    b->next_free = NULL;
    b->t_begin_ns = na_now_ns();
    *b_p = b;
    return NA_OK;
}

/* Rows per job of a granule in memory: a block of rows is cut into ranges
 * (each a job, reading the granule's blocks again) only as far as it takes
 * to give every thread (the workers and the loop) a job; at least this many
 * rows a range, so each K/V row read still serves a full kernel group
 * (NA_CPU_MAX_GROUP 16 rows). A granule read from the SSD is one job (one
 * read). */
#define NA_ATTN_MIN_ROWS 16
/* Most work (tokens x query heads x head_dim) in one job of a block of rows,
 * about 2 ms of kernels on the 2-vCPU VMs. The loop thread runs queued jobs
 * while it waits for a batch (na_attn_help) and gets back to its peers,
 * HEARTBEAT answers included, only between jobs: a prompt chunk of 4,096
 * rows over a whole granule as one job kept it away for 0.5 s and more, past
 * a peer_timeout_ms of 600 on a busy machine (test_offload_run_longctx). The
 * rows' results do not depend on how they are cut (each row folds its own
 * tokens in the canonical order). */
#define NA_ATTN_JOB_WORK (128u * NA_ATTN_INLINE_WORK)

static int na_attn_rows_per_job(const na_attn_cpu_t *e, const na_attn_item_t *it)
{
    const int threads = e->cfg.n_threads + 1;
    const uint64_t row_work = (uint64_t)na_attn_granule_parts(e) * NA_ATTN_PART *
                              (uint64_t)it->n_kvh * (uint64_t)it->group *
                              (uint64_t)e->kcfg->head_dim;
    uint64_t cap = row_work > 0 ? NA_ATTN_JOB_WORK / row_work : (uint64_t)it->n_q;
    int rb = it->n_q;

    if (it->n_q <= 1)
        return it->n_q;
    if (it->n_gran < threads) {
        int splits = (threads + it->n_gran - 1) / it->n_gran;
        rb = (it->n_q + splits - 1) / splits;
    }
    if ((uint64_t)rb > cap)
        rb = (int)cap;
    return rb < NA_ATTN_MIN_ROWS ? NA_ATTN_MIN_ROWS : rb;
}

/* Granule g's jobs (e->mu held): one per range of rb rows that see it (an
 * SSD granule: one for all of them). queue 0: count them only; 1: make and
 * queue them, counting those made in *made_p; 2: the same, a granule in
 * memory without waking a worker (na_attn_cq_push_quiet). Returns the number of jobs,
 * or -1 (item failed: status and reason set) when one cannot be made. */
static int na_attn_granule_jobs(na_attn_cpu_t *e, na_attn_item_t *it, na_kv_req_t *r, int g,
                                int rb, int queue, int *made_p)
{
    na_attn_entry_t *en = it->entry;
    int t0, t1, b0, nb, s0, ssd, i0, ilo, n = 0;
    uint64_t off;
    size_t len;

    na_attn_granule_range(e, it->view.n_tokens, g, &t0, &t1, &b0, &nb);
    ssd = na_attn_granule_ssd(&it->view, b0, nb, &s0, &off, &len);
    ilo = t0 - it->lim0 + 1 > 0 ? t0 - it->lim0 + 1 : 0;    /* rows that see the granule */
    for (i0 = ilo; i0 < it->n_q; i0 += ssd ? it->n_q : rb) {
        na_attn_job_t *j, *pf;
        n++;
        if (!queue)
            continue;
        if (ssd && len > e->chunk_bytes) {   /* a shape the chunks were not sized for */
            it->status = NA_ERR_INTERNAL;
            snprintf(it->reason, sizeof(it->reason), "attention: a granule's SSD blocks "
                     "(%zu bytes) exceed the staging chunk (%zu bytes)", len, e->chunk_bytes);
            return -1;
        }
        if ((j = na_attn_job_get(e)) == NULL) {
            it->status = NA_ERR_NOMEM;
            snprintf(it->reason, sizeof(it->reason), "attention: out of memory");
            return -1;
        }
        j->item = it;
        j->g = g;
        j->t0 = t0;
        j->t1 = t1;
        j->b0 = b0;
        j->nb = nb;
        j->i0 = i0;
        j->i1 = ssd || i0 + rb > it->n_q ? it->n_q : i0 + rb;
        j->fd = it->view.fd;
        (*made_p)++;
        if (!ssd && queue == 2) {
            na_attn_cq_push_quiet(e, j, (uint64_t)(t1 - t0) * (uint64_t)(j->i1 - j->i0) *
                                        (uint64_t)it->n_kvh * (uint64_t)it->group *
                                        (uint64_t)e->kcfg->head_dim);
            continue;
        }
        if (!ssd) {
            na_attn_cq_push(e, j);
            continue;
        }
        j->s0 = s0;
        j->off = off;
        j->len = len;
        j->req_id = en->req;
        j->seq = na_kv_req_seq(r);
        j->layer = en->layer;
        pf = na_attn_pf_claim(e, j);
        if (pf != NULL) {
            pf->t0 = j->t0;
            pf->t1 = j->t1;
            pf->i0 = j->i0;
            pf->i1 = j->i1;
            na_attn_job_put(e, j);
            pf->item = it;
            pf->g = g;
            if (pf->done)
                na_attn_cq_push(e, pf);
            continue;
        }
        na_attn_rq_push(e, j);
    }
    return n;
}

/* Carve the item's arrays from its scratch block: st and acc for every
 * part's rows (n_parts * rows * n_q), and for a block of query rows
 * (n_q > 1) qg_own (rows * n_q) and tst, tacc (n_parts * rows); each array
 * starts on a cache line. The block only grows (kept with the item, it stops
 * growing once it fits the largest context) and its contents are scratch:
 * nothing is copied over. 0, or -1 out of memory. */
static int cpu_item_arrays(na_attn_item_t *it, size_t rows, size_t hd)
{
    const size_t slots = (size_t)it->n_parts * rows * it->n_q;
    const size_t trows = it->n_q > 1 ? (size_t)it->n_parts * rows : 0;
    const size_t qrows = it->n_q > 1 ? rows * it->n_q : 0;
    const size_t bytes[5] = { slots * sizeof(*it->st), slots * hd * sizeof(float),
                              qrows * hd * sizeof(float), trows * sizeof(*it->tst),
                              trows * hd * sizeof(float) };
    size_t off[5], need = 0;
    char *b;
    int i;

    for (i = 0; i < 5; i++) {
        off[i] = need;
        need += (bytes[i] + 63) & ~(size_t)63;
    }
    if (need > it->scratch_cap) {
        size_t cap = need < 2 * it->scratch_cap ? 2 * it->scratch_cap : need;
        void *nb;
        if (posix_memalign(&nb, 64, cap) != 0)
            return -1;
        free(it->scratch);
        it->scratch = nb;
        it->scratch_cap = cap;
    }
    b = it->scratch;
    it->st = (na_kattn_stat_t *)(void *)(b + off[0]);
    it->acc = (float *)(void *)(b + off[1]);
    it->qg_own = (float *)(void *)(b + off[2]);
    it->tst = (na_kattn_stat_t *)(void *)(b + off[3]);
    it->tacc = (float *)(void *)(b + off[4]);
    return 0;
}

/* A cleared item from the free list (scratch block kept) or a new one (e->mu
 * held); NULL out of memory. */
static na_attn_item_t *cpu_item_get(na_attn_cpu_t *e)
{
    na_attn_item_t *it = e->item_free;
    void *scratch;
    size_t cap;

    if (it == NULL)
        return calloc(1, sizeof(*it));
    e->item_free = it->next;
    scratch = it->scratch;
    cap = it->scratch_cap;
    memset(it, 0, sizeof(*it));
    it->scratch = scratch;
    it->scratch_cap = cap;
    return it;
}

/* Build item and queue its jobs (loop thread): a granule (whole parts of
 * the context) per job, or for a block of query rows (a prompt chunk,
 * n_q > 1) a granule and a range of the rows that see it. */
static na_status_t na_attn_item_start(na_attn_cpu_t *e, na_attn_item_t *it, na_kv_req_t *r,
                                      int quiet)
{
    na_attn_entry_t *en = it->entry;
    const int hd = e->kcfg->head_dim;
    na_status_t st;
    int g, rb, total = 0, made = 0, i;
    uint64_t tokens = 0;

    if (en->k_new != NULL) {
        st = na_kv_append(e->store, r, en->layer, en->k_new, en->v_new, NA_DTYPE_F32, 0, 1, 0);
        if (st != NA_OK)
            return st;
    }
    st = na_kv_view_n(e->store, r, en->layer, en->n_ctx, &it->view);
    if (st != NA_OK)
        return st;
    it->has_view = 1;
    it->n_kvh = it->view.n_kvh;
    it->group = e->cfg.group;
    it->n_q = en->n_q > 1 ? en->n_q : 1;
    it->n_gran = na_attn_n_granules(e, it->view.n_tokens);
    it->n_parts = na_attn_n_parts(it->view.n_tokens);
    if (it->view.n_tokens < it->n_q)
        return na_err(NA_ERR_RANGE, "request %llu layer %d: %d query rows over %d tokens "
                      "(a block's rows must be in the store)", (unsigned long long)en->req,
                      en->layer, it->n_q, it->view.n_tokens);
    it->lim0 = it->view.n_tokens - it->n_q + 1;
    it->qg = en->q;
    if (it->n_gran > 0) {
        const size_t rows = (size_t)it->n_kvh * it->group;
        if (cpu_item_arrays(it, rows, (size_t)hd) != 0)
            return na_err(NA_ERR_NOMEM, "attention: out of memory");
        if (it->n_q > 1) {
            const na_attn_shape_t sh = { e->kcfg->block_tokens, hd, e->kcfg->kv_dtype,
                                         it->n_kvh, it->group };
            na_attn_rows_gather(&sh, it->n_q, en->q, en->q_stride ? en->q_stride : rows * hd,
                                it->qg_own);
            it->qg = it->qg_own;
        }
    }
    for (i = 0; i < it->n_q; i++)
        tokens += (uint64_t)(it->lim0 + i);
    rb = na_attn_rows_per_job(e, it);
    it->started = 1;                /* its completion is accounted for from here */
    pthread_mutex_lock(&e->mu);
    e->stats.tokens += tokens;
    for (g = 0; g < it->n_gran; g++)
        total += na_attn_granule_jobs(e, it, r, g, rb, 0, &made);
    it->pending = total;
    if (total == 0) {
        pthread_mutex_unlock(&e->mu);
        na_attn_item_finalize(e, it);
        pthread_mutex_lock(&e->mu);
        na_attn_item_done(e, it);
    }
    for (g = 0; g < it->n_gran; g++)
        if (na_attn_granule_jobs(e, it, r, g, rb, quiet ? 2 : 1, &made) < 0) {
            /* fail the entry; the jobs queued finish alone */
            it->pending -= total - made;
            if (it->pending == 0)
                na_attn_item_done(e, it);
            break;
        }
    pthread_mutex_unlock(&e->mu);
    return NA_OK;
}

/* Submit (quiet: the batch's last entries, close follows at once: their
 * small granules wake no worker, na_attn_cq_push_quiet). */
static na_status_t cpu_submit_q(na_attn_cpu_t *e, na_attn_batch_t *b, na_attn_entry_t *entries,
                                int n, int quiet)
{
    void *items = na_grow(b->items, &b->cap, (size_t)b->n + (size_t)n, sizeof(*b->items), 16);
    int i;

    if (items == NULL)
        return na_err(NA_ERR_NOMEM, "attention batch: out of memory");
    b->items = items;
    for (i = 0; i < n; i++) {
        na_attn_entry_t *en = &entries[i];
        na_attn_item_t *it;
        na_kv_req_t *r = NULL;
        na_status_t st;

        pthread_mutex_lock(&e->mu);
        it = cpu_item_get(e);
        if (it == NULL) {
            pthread_mutex_unlock(&e->mu);
            return na_err(NA_ERR_NOMEM, "attention batch: out of memory");
        }
        it->entry = en;
        it->batch = b;
        en->status = NA_OK;
        en->reason[0] = '\0';
        b->items[b->n++] = it;
        pthread_mutex_unlock(&e->mu);
        st = na_attn_entry_check(e->store, &e->cfg, en, &r);
        if (st == NA_OK)
            st = na_attn_item_start(e, it, r, quiet);
        if (st != NA_OK) {
            /* fails this entry only; nothing of it is queued */
            it->status = st;
            snprintf(it->reason, sizeof(it->reason), "%s", na_errmsg());
            pthread_mutex_lock(&e->mu);
            if (!it->started)
                na_attn_item_done(e, it);
            pthread_mutex_unlock(&e->mu);
        }
    }
    return NA_OK;
}

static na_status_t cpu_submit(na_attn_engine_t *base, na_attn_batch_t *b,
                              na_attn_entry_t *entries, int n)
{
    return cpu_submit_q((na_attn_cpu_t *)base, b, entries, n, 0);
}

static int na_attn_help(na_attn_cpu_t *e, na_attn_batch_t *b, uint64_t t_end_ns);

static na_status_t cpu_close(na_attn_engine_t *base, na_attn_batch_t *b)
{
    na_attn_cpu_t *e = (na_attn_cpu_t *)base;

    b->closed = 1;
    /* nothing of this store was ever on the SSD tier only (all in DRAM):
     * no view has a block to read, no prefetch is out, nothing to read
     * ahead */
    if (e->cfg.prefetch_layers > 0 && na_kv_ssd_only_seen(e->store))
        na_attn_pf_issue(e, b);
    /* jobs queued without waking a worker (na_attn_cq_push_quiet): the
     * loop thread runs them now; what is left (another batch's, or past
     * NA_ATTN_HELP_US) goes to the workers */
    pthread_mutex_lock(&e->mu);
    if (e->quiet_work > 0) {
        e->quiet_work = 0;
        (void)na_attn_help(e, b, na_now_ns() + (uint64_t)NA_ATTN_HELP_US * 1000ull);
        if (e->cq_head != NULL)
            pthread_cond_broadcast(&e->cv_work);
    }
    pthread_mutex_unlock(&e->mu);
    return NA_OK;
}

/* Every item of b completed (e->mu held): take the read counts. */
static uint64_t cpu_batch_settle(na_attn_cpu_t *e, na_attn_batch_t *b)
{
    uint64_t rd = e->read_unreported;
    e->read_unreported = 0;
    e->stats.batch_ns += na_now_ns() - b->t_begin_ns;
    return rd;
}

/* b completed (loop thread, e->mu not held): results onto the entries,
 * views released, failures propagated, b and its items onto the free
 * lists. */
static void cpu_batch_finish(na_attn_cpu_t *e, na_attn_batch_t *b, uint64_t rd)
{
    int i;

    na_kv_count_read(e->store, rd);
    for (i = 0; i < b->n; i++) {
        na_attn_item_t *it = b->items[i];
        it->entry->status = it->status;
        snprintf(it->entry->reason, sizeof(it->entry->reason), "%s", it->reason);
        if (it->has_view) {
            if (it->status == NA_ERR_IO)      /* a failed read fails its request */
                na_kv_req_fail(it->view.req, NA_ERR_IO, it->reason);
            na_kv_view_release(e->store, &it->view);
        }
    }
    pthread_mutex_lock(&e->mu);     /* items and b onto the free lists */
    for (i = 0; i < b->n; i++) {
        b->items[i]->next = e->item_free;
        e->item_free = b->items[i];
    }
    b->n = 0;
    b->next_free = e->batch_free;
    e->batch_free = b;
    pthread_mutex_unlock(&e->mu);
}

/* e->mu held, the loop thread about to wait for b: rather than sleep while
 * jobs are queued, run them here (any batch's: they are all owed), with the
 * loop's own kernels (e->kernels[n_threads]). The waiting thread becomes one
 * more worker: no wake-up of a sleeping worker for that share and none of
 * the loop at the end, and on a machine with as many workers as cores the
 * loop's core is not left idle (bench e2e --remote, "t_a: node other").
 * It starts no job after t_end_ns (0: no limit), so the loop gets back to
 * its peers (NA_ATTN_HELP_US). Returns 1 when b completed. */
static int na_attn_help(na_attn_cpu_t *e, na_attn_batch_t *b, uint64_t t_end_ns)
{
    while (b->done < b->n && e->cq_head != NULL && (t_end_ns == 0 || na_now_ns() < t_end_ns)) {
        e->stats.helped++;
        na_attn_job_run(e, e->kernels[e->cfg.n_threads]);
    }
    return b->done >= b->n;
}

/* e->mu held, no job left to help with: wait up to us for b's last jobs on
 * the workers by polling its count between sched_yield()s (mu released
 * meanwhile), then fall back to sleeping. A yield gives the core to any
 * thread runnable on it (the compute node's, on a shared machine), so this
 * polls only a core nobody else wants; sleeping on cv_done instead cost a
 * wake-up of ~110 us on average on the 2-vCPU VMs (broadcast -> woken,
 * measured in the node during bench e2e --remote, dim 768, ctx 4096, B=1),
 * a fifth of the round trip. Returns 1 when b completed. */
static int na_attn_yield_wait(na_attn_cpu_t *e, na_attn_batch_t *b, int us)
{
    uint64_t t_end = na_now_ns() + (uint64_t)us * 1000ull;

    pthread_mutex_unlock(&e->mu);
    while (__atomic_load_n(&b->done, __ATOMIC_ACQUIRE) < b->n && na_now_ns() < t_end)
        sched_yield();
    pthread_mutex_lock(&e->mu);
    return b->done >= b->n;
}

static na_status_t cpu_test(na_attn_engine_t *base, na_attn_batch_t *b, int wait_us, int *done)
{
    na_attn_cpu_t *e = (na_attn_cpu_t *)base;
    uint64_t rd = 0;
    int ok;

    pthread_mutex_lock(&e->mu);
    ok = b->closed && b->done >= b->n;
    if (!ok && wait_us > 0 && b->closed) {
        struct timespec ts;
        int help_us = wait_us < NA_ATTN_HELP_US ? wait_us : NA_ATTN_HELP_US;
        ok = na_attn_help(e, b, na_now_ns() + (uint64_t)help_us * 1000ull);
        if (!ok && e->cq_head != NULL)      /* jobs left: the peers first, then more */
            goto out;
        if (!ok)
            ok = na_attn_yield_wait(e, b, wait_us < NA_ATTN_YIELD_US ? wait_us : NA_ATTN_YIELD_US);
        ts = na_cond_deadline((uint64_t)wait_us);
        while (!ok && pthread_cond_timedwait(&e->cv_done, &e->mu, &ts) == 0)
            ok = b->done >= b->n;
        ok = b->done >= b->n;
    }
out:
    if (ok)
        rd = cpu_batch_settle(e, b);
    pthread_mutex_unlock(&e->mu);
    *done = ok;
    if (ok)
        cpu_batch_finish(e, b, rd);
    return NA_OK;
}

static na_status_t cpu_wait(na_attn_engine_t *base, na_attn_batch_t *b)
{
    na_attn_cpu_t *e = (na_attn_cpu_t *)base;
    uint64_t rd;

    pthread_mutex_lock(&e->mu);
    (void)na_attn_help(e, b, 0);
    while (b->done < b->n)
        pthread_cond_wait(&e->cv_done, &e->mu);
    rd = cpu_batch_settle(e, b);
    pthread_mutex_unlock(&e->mu);
    cpu_batch_finish(e, b, rd);
    return NA_OK;
}

/* The batch's last entries: small granules in memory wake no worker, close
 * runs them on this thread (na_attn_cq_push_quiet). */
static na_status_t cpu_submit_close(na_attn_engine_t *base, na_attn_batch_t *b,
                                    na_attn_entry_t *entries, int n)
{
    na_status_t st = cpu_submit_q((na_attn_cpu_t *)base, b, entries, n, 1);

    (void)cpu_close(base, b);
    return st;
}

const na_attn_engine_ops_t na_attn_cpu_ops = {
    cpu_create, cpu_destroy, cpu_begin, cpu_submit, cpu_close, cpu_test, cpu_wait, cpu_stats,
    1,   /* block_queries: a prompt chunk's rows as one block (na_attn_fold_rows) */
    cpu_submit_close,
};

/* storage-node/attn_cuda.c — the GPU attention engine ("cuda" in the engine
 * table, attn_engine.c): Lamina's memory devices.
 *
 * The slot's KV store (DRAM/SSD tiers) stays the source of truth: every
 * k_new/v_new row is appended to it as with the CPU engine. Beside it, the
 * engine keeps device copies of (request, layer) KV, [token][kv_head]
 * [head_dim] in the store's dtype, under a budget of hbm_mb; an entry whose
 * copy is on the device (or can be made from DRAM-resident blocks within the
 * budget, evicting the least recently used copies no batch holds) runs the
 * kernels backend's decode attention there (flash-decoding, kernels/cuda/);
 * every other entry — SSD-resident blocks, no room, a bad entry — goes to an
 * inner CPU engine over the same store, so overflow is served from DRAM/SSD
 * exactly as the CPU engine does and results agree up to float rounding.
 * A copy is rebuilt from the store whenever its token count disagrees with
 * the store's (a prefill appended rows, the request was reopened).
 *
 * Memory. Every device copy grows only within the budget (acu_room evicts
 * first). A device allocation that fails anyway (the GPU is shared: two
 * slots on one GPU with the default hbm_mb 0 each plan for 80 % of it) is
 * not an entry's failure: the entry goes to the CPU engine and the budget
 * is lowered to what the engine holds then, so later growth evicts first.
 * A batch's device and pinned buffers and its event come from a pool kept
 * by the engine (one set preallocated at create, sized for
 * NA_ACU_PRE_ENTRIES entries, grown in place when a batch needs more,
 * never freed per batch: cudaMalloc / cudaFree per batch synchronised the
 * device).
 *
 * The device backend is "cuda:<gpu>", or cfg->device_kernels (tests run the
 * engine here on "refdev", ref with emulated device memory, and
 * "refdev:N" with N MiB of it to see failed allocations). Work is enqueued
 * on the backend's stream: submit copies an entry's q and k_new / v_new rows
 * into the batch's pinned staging, uploads them in one asynchronous copy
 * and appends the rows to the device copy from there (a pageable upload
 * made the host wait for the device three times per entry); close
 * launches the attention of every device entry — on cuda one batched launch
 * per shape, i.e. per layer (na_kernels_cuda_attn_decode_batch, UNVERIFIED
 * on a GPU; NA_CUDA_ATTN_BATCH=0 takes one attn_decode per entry, the path
 * refdev tests) — and one download of the outputs into a pinned buffer,
 * then records the batch's event. Single loop thread, as every engine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "storage-node/attn_engine.h"
#if NA_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#define NA_ACU_DEFAULT_MB 256     /* budget when neither hbm_mb nor the device says */
#define NA_ACU_PRE_ENTRIES 64     /* entries of the batch buffers made at create */

/* The device copy of one (request, layer). */
typedef struct {
    uint64_t   req, seq;
    int        layer, n_kvh;
    int        n, cap;             /* tokens held, tokens allocated */
    na_kbuf_t *k, *v;
    uint64_t   last;               /* round of the last use (LRU) */
    int        pins;               /* items of batches not yet completed */
} na_acu_res_t;

/* One submitted entry: on the device (res != NULL) or delegated. */
typedef struct {
    na_attn_entry_t *en;
    na_attn_entry_t  shadow;       /* delegated: the copy the CPU engine fills */
    int              on_dev;       /* 1: computed on the device, its copy pinned */
    size_t           off;          /* floats into the batch's q/o buffers (its q) */
    na_kbuf_t       *kc, *vc;      /* on_dev: its (pinned) copy, launched at close */
    int              ctx, n_kvh;
    int              vi;           /* its q/o views: views[2 vi + 0/1] (acu_launch) */
    na_status_t      status;
    char             reason[200];
} na_acu_item_t;

struct na_attn_batch {
    na_attn_batch_t *inner;        /* the CPU engine's batch (delegated entries) */
    int              inner_done;
    na_acu_item_t  **items;        /* one allocation each: the CPU engine holds shadows;
                                      items[0..n_alloc) are kept for the next batch */
    int              n, cap, n_alloc;
    na_attn_batch_t *next;         /* in the engine's pool */
    size_t           floats, buf_floats;
    na_kbuf_t       *q, *o, *o_host; /* q: the entries' inputs (q, k_new, v_new rows) */
    na_kbuf_t       *in_host;      /* pinned: the inputs, uploaded from here */
#if NA_HAVE_CUDA
    na_kcuda_attn_req_t *rq;       /* the batched launch's requests, cap_views / 2 */
#endif
    char            *done;         /* its per-item marks, cap */
    na_kevent_t     *ev;
    na_kbuf_t       *views;        /* q and o views of the batched launch, 2 per item */
    int              cap_views;
    na_status_t      dev_st;       /* a launch at close failed: every device entry fails */
    char             dev_reason[200];
    int              closed;
    uint64_t         t0;
};

typedef struct {
    na_attn_engine_t         base;   /* first */
    na_attn_engine_cfg_t     cfg;
    na_kv_store_t           *store;
    const na_kv_store_cfg_t *kcfg;
    na_attn_engine_t        *cpu;
    na_kernels_t            *k;
    uint64_t                 budget, used;
    na_acu_res_t            *res;
    int                      n_res, cap_res;
    uint64_t                 round;
    char                    *gather; /* host staging of a layer's rows */
    size_t                   gather_bytes;
    na_attn_batch_t         *pool;   /* completed batches: buffers, event, items */
    na_attn_stats_t          stats;
} na_attn_cuda_t;

static size_t acu_row_bytes(const na_attn_cuda_t *e, int n_kvh)
{
    return na_dtype_bytes(e->kcfg->kv_dtype, (size_t)n_kvh * (size_t)e->kcfg->head_dim);
}

/* ---- device copies -------------------------------------------------------- */

static na_acu_res_t *acu_find(na_attn_cuda_t *e, uint64_t req, int layer)
{
    int i;
    for (i = 0; i < e->n_res; i++)
        if (e->res[i].req == req && e->res[i].layer == layer)
            return &e->res[i];
    return NULL;
}

static void acu_drop(na_attn_cuda_t *e, na_acu_res_t *r)
{
    e->used -= 2 * (uint64_t)r->cap * acu_row_bytes(e, r->n_kvh);
    e->k->ops->buf_free(e->k, r->k);
    e->k->ops->buf_free(e->k, r->v);
    *r = e->res[--e->n_res];
}

/* Room for `bytes` more: evict unpinned copies, least recently used first.
 * 0 when it cannot be made. */
static int acu_room(na_attn_cuda_t *e, uint64_t bytes)
{
    if (bytes > e->budget)
        return 0;
    while (e->used + bytes > e->budget) {
        na_acu_res_t *lru = NULL;
        int i;
        for (i = 0; i < e->n_res; i++)
            if (e->res[i].pins == 0 && (lru == NULL || e->res[i].last < lru->last))
                lru = &e->res[i];
        if (lru == NULL)
            return 0;
        if (na_kernels_finish(e->k) != NA_OK)   /* nothing may still read it */
            return 0;
        acu_drop(e, lru);
    }
    return 1;
}

/* 1 when every block of (r, layer) is in host memory (not SSD-only). */
static int acu_all_dram(na_attn_cuda_t *e, na_kv_req_t *r, int layer)
{
    na_kv_view_t v;
    int b, ok = 1;
    if (na_kv_view(e->store, r, layer, &v) != NA_OK)
        return 0;
    for (b = 0; b < v.n_blocks && ok; b++)
        ok = v.blocks[b].loc != NA_KV_LOC_SSD && v.blocks[b].mem != NULL;
    na_kv_view_release(e->store, &v);
    return ok;
}

/* Allocate or grow copy r to hold cap tokens (contents kept); the caller
 * made room in the budget. A device allocation that fails (NA_ERR_NOMEM:
 * the GPU is fuller than the budget assumed) lowers the budget to what is
 * held now and reads as NA_ERR_NOSPACE: the entry goes to the CPU engine. */
static na_status_t acu_reserve(na_attn_cuda_t *e, na_acu_res_t *r, int cap)
{
    const na_kernel_ops_t *ops = e->k->ops;
    size_t row = acu_row_bytes(e, r->n_kvh);
    na_status_t st;
    if (cap <= r->cap)
        return NA_OK;
    if (r->k == NULL) {
        st = ops->buf_alloc(e->k, (size_t)cap * row, NA_KMEM_DEVICE, &r->k);
        if (st == NA_OK)
            st = ops->buf_alloc(e->k, (size_t)cap * row, NA_KMEM_DEVICE, &r->v);
        if (st != NA_OK) {
            ops->buf_free(e->k, r->k);
            r->k = r->v = NULL;
        }
    } else if ((st = ops->buf_resize(e->k, r->k, (size_t)cap * row)) == NA_OK) {
        st = ops->buf_resize(e->k, r->v, (size_t)cap * row);
    }
    if (st == NA_ERR_NOMEM) {
        e->stats.cuda_alloc_failed++;
        if (e->budget > e->used)
            e->budget = e->used;
        return na_err(NA_ERR_NOSPACE, "attention cuda: device memory full at %llu MiB of KV "
                      "copies (budget lowered to that): %s", (unsigned long long)(e->used >> 20),
                      na_errmsg());
    }
    if (st != NA_OK)
        return st;
    e->used += 2 * (uint64_t)(cap - r->cap) * row;
    if (e->used > e->stats.cuda_peak)
        e->stats.cuda_peak = e->used;
    r->cap = cap;
    return NA_OK;
}

/* Room in the budget to grow copy *r_p to cap tokens, evicting others (never
 * *r_p itself; *r_p is looked up again: evictions move the table's
 * entries). NA_ERR_NOSPACE when it cannot be made. */
static na_status_t acu_grow_room(na_attn_cuda_t *e, na_acu_res_t **r_p, int cap)
{
    na_acu_res_t *r = *r_p;
    uint64_t more, req = r->req;
    int layer = r->layer, ok;
    if (cap <= r->cap)
        return NA_OK;
    more = 2 * (uint64_t)(cap - r->cap) * acu_row_bytes(e, r->n_kvh);
    r->pins++;                                /* not evicted by the room it makes */
    ok = acu_room(e, more);
    *r_p = r = acu_find(e, req, layer);
    r->pins--;
    return ok ? NA_OK : na_err(NA_ERR_NOSPACE, "attention cuda: hbm budget full");
}

/* (Re)load copy r from the store's n_tok rows of (kr, layer): gather the
 * blocks ([kv_head][token][head_dim] per block) into [token][kv_head]
 * [head_dim] on the host, upload. 0 = done, 1 = a block is on the SSD only
 * (not loaded), < 0 error. */
static int acu_load(na_attn_cuda_t *e, na_acu_res_t **r_p, na_kv_req_t *kr, int layer)
{
    na_acu_res_t *r = *r_p;
    const int bt = e->kcfg->block_tokens, hd = e->kcfg->head_dim;
    const size_t es = na_dtype_bytes(e->kcfg->kv_dtype, 1), hrow = (size_t)hd * es;
    const size_t row = acu_row_bytes(e, r->n_kvh), half = (size_t)bt * hrow;
    na_kv_view_t v;
    na_kbuf_t kv, vv;
    size_t need;
    int b, t, h, rc = 0;
    na_status_t st;

    if ((st = na_kv_view(e->store, kr, layer, &v)) != NA_OK)
        return st;
    for (b = 0; b < v.n_blocks; b++)
        if (v.blocks[b].loc == NA_KV_LOC_SSD || v.blocks[b].mem == NULL)
            rc = 1;
    need = 2 * (size_t)v.n_tokens * row;
    if (rc == 0)                                   /* grown within the budget */
        rc = acu_grow_room(e, r_p, v.n_tokens);
    r = *r_p;
    if (rc == 0 && need > e->gather_bytes) {
        char *g = realloc(e->gather, need);
        if (g == NULL)
            rc = na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
        else {
            e->gather = g;
            e->gather_bytes = need;
        }
    }
    if (rc == 0 && v.n_tokens > 0 && (rc = na_kernels_finish(e->k)) == NA_OK) {
        /* the host staging is free once the uploads before it completed */
        for (t = 0; t < v.n_tokens; t++) {
            const char *base = v.blocks[t / bt].mem;
            for (h = 0; h < r->n_kvh; h++) {
                const char *src = base + (size_t)h * 2 * half + (size_t)(t % bt) * hrow;
                memcpy(e->gather + (size_t)t * row + (size_t)h * hrow, src, hrow);
                memcpy(e->gather + need / 2 + (size_t)t * row + (size_t)h * hrow, src + half,
                       hrow);
            }
        }
        if ((rc = acu_reserve(e, r, v.n_tokens)) == NA_OK) {
            kv = na_kbuf_view(r->k, 0, need / 2);
            vv = na_kbuf_view(r->v, 0, need / 2);
            if ((rc = e->k->ops->upload(e->k, &kv, e->gather, need / 2)) == NA_OK)
                rc = e->k->ops->upload(e->k, &vv, e->gather + need / 2, need / 2);
        }
    }
    if (rc == 0)
        r->n = v.n_tokens;
    na_kv_view_release(e->store, &v);
    return rc;
}

/* Append one f32 row pair (n_kvh*head_dim each), already uploaded to
 * b->q at floats kv_off (k) and kv_off + n (v), to copy *r_p on the device
 * (*r_p is looked up again: making room may move the table's entries). */
static na_status_t acu_append(na_attn_cuda_t *e, na_acu_res_t **r_p, na_attn_batch_t *b,
                              size_t kv_off)
{
    const na_kernel_ops_t *ops = e->k->ops;
    na_acu_res_t *r = *r_p;
    size_t n = (size_t)r->n_kvh * (size_t)e->kcfg->head_dim, row = acu_row_bytes(e, r->n_kvh);
    na_kbuf_t ks, vs, kd, vd;
    na_status_t st;

    if (r->n + 1 > r->cap) {
        int cap = r->cap < 16 ? 16 : 2 * r->cap;
        st = acu_grow_room(e, r_p, cap);
        r = *r_p;
        if (st == NA_OK)
            st = acu_reserve(e, r, cap);
        if (st != NA_OK)
            return st;
    }
    ks = na_kbuf_view(b->q, kv_off * sizeof(float), n * sizeof(float));
    vs = na_kbuf_view(b->q, (kv_off + n) * sizeof(float), n * sizeof(float));
    kd = na_kbuf_view(r->k, (size_t)r->n * row, row);
    vd = na_kbuf_view(r->v, (size_t)r->n * row, row);
    if ((st = ops->store(e->k, &kd, e->kcfg->kv_dtype, &ks, n)) != NA_OK ||
        (st = ops->store(e->k, &vd, e->kcfg->kv_dtype, &vs, n)) != NA_OK)
        return st;
    r->n++;
    return NA_OK;
}

/* The device copy for entry en of request kr, up to date after its k_new
 * (appended to the store here too; on the device from b->q at floats
 * kv_off, see acu_stage): NULL with *st_p = NA_OK when the entry should go
 * to the CPU engine (*appended says whether k_new is already in the store),
 * NULL with an error when the entry fails. */
static na_acu_res_t *acu_prepare(na_attn_cuda_t *e, const na_attn_entry_t *en, na_kv_req_t *kr,
                                 na_attn_batch_t *b, size_t kv_off, int *appended,
                                 na_status_t *st_p)
{
    na_acu_res_t *r = acu_find(e, en->req, en->layer);
    uint64_t seq = na_kv_req_seq(kr);
    int n_kvh = na_kv_req_n_kvh(kr), tokens, rc;

    *appended = 0;
    *st_p = NA_OK;
    if (r != NULL && (r->seq != seq || r->n_kvh != n_kvh)) {   /* reopened */
        if (r->pins > 0)
            return NULL;
        acu_drop(e, r);
        r = NULL;
    }
    if (r == NULL) {
        uint64_t want = 2 * (uint64_t)(na_kv_req_tokens(kr, en->layer) + 16) *
                        acu_row_bytes(e, n_kvh);
        if (!acu_all_dram(e, kr, en->layer))
            return NULL;
        if (!acu_room(e, want)) {
            e->stats.cuda_fallbacks++;
            return NULL;
        }
        if (e->n_res == e->cap_res) {
            int cap = e->cap_res ? 2 * e->cap_res : 64;
            na_acu_res_t *nr = realloc(e->res, sizeof(*nr) * (size_t)cap);
            if (nr == NULL)
                return NULL;
            e->res = nr;
            e->cap_res = cap;
        }
        r = &e->res[e->n_res++];
        memset(r, 0, sizeof(*r));
        r->req = en->req;
        r->seq = seq;
        r->layer = en->layer;
        r->n_kvh = n_kvh;
    }
    r->last = e->round;
    if (en->k_new != NULL) {
        *st_p = na_kv_append(e->store, kr, en->layer, en->k_new, en->v_new, NA_DTYPE_F32, 0, 1,
                             0);
        if (*st_p != NA_OK)
            return NULL;
        *appended = 1;
    }
    tokens = na_kv_req_tokens(kr, en->layer);
    if (en->k_new != NULL && r->n == tokens - 1 && r->n > 0)
        *st_p = acu_append(e, &r, b, kv_off);
    else if (r->n != tokens) {
        rc = acu_load(e, &r, kr, en->layer);
        if (rc == 1 || rc == NA_ERR_NOSPACE) {        /* a block went to the SSD, no room */
            if (r->pins == 0)                          /* stale: its memory is better free */
                acu_drop(e, r);
            if (rc == 1)
                return NULL;
        }
        *st_p = (na_status_t)rc;
    }
    if (*st_p == NA_ERR_NOSPACE) {                    /* no room to grow: the CPU's turn */
        e->stats.cuda_fallbacks++;
        *st_p = NA_OK;
        return NULL;
    }
    return *st_p == NA_OK ? r : NULL;
}

/* ---- batches ------------------------------------------------------------- */

/* A batch's buffers for `floats` q/o floats: grown in place keeping the
 * contents (entries already enqueued), never shrunk: the pooled batch keeps
 * them for the next one. */
static na_status_t acu_batch_room(na_attn_cuda_t *e, na_attn_batch_t *b, size_t floats)
{
    const na_kernel_ops_t *ops = e->k->ops;
    size_t cap = b->buf_floats ? b->buf_floats : 4096, bytes;
    na_status_t st;
    if (b->floats + floats <= b->buf_floats)
        return NA_OK;
    while (cap < b->floats + floats)
        cap *= 2;
    bytes = cap * sizeof(float);
    if (b->q == NULL) {
        if ((st = ops->buf_alloc(e->k, bytes, NA_KMEM_DEVICE, &b->q)) != NA_OK ||
            (st = ops->buf_alloc(e->k, bytes, NA_KMEM_DEVICE, &b->o)) != NA_OK ||
            (st = ops->buf_alloc(e->k, bytes, NA_KMEM_PINNED, &b->o_host)) != NA_OK ||
            (st = ops->buf_alloc(e->k, bytes, NA_KMEM_PINNED, &b->in_host)) != NA_OK) {
            ops->buf_free(e->k, b->q);
            ops->buf_free(e->k, b->o);
            ops->buf_free(e->k, b->o_host);
            b->q = b->o = b->o_host = NULL;
            return st;
        }
    } else if ((st = ops->buf_resize(e->k, b->q, bytes)) != NA_OK ||
               (st = ops->buf_resize(e->k, b->o, bytes)) != NA_OK ||
               (st = ops->buf_resize(e->k, b->o_host, bytes)) != NA_OK ||
               (st = ops->buf_resize(e->k, b->in_host, bytes)) != NA_OK) {
        return st;
    }
    b->buf_floats = cap;
    return NA_OK;
}

static void acu_batch_free(na_attn_cuda_t *e, na_attn_batch_t *b)
{
    int i;
    if (b == NULL)
        return;
    e->k->ops->event_destroy(e->k, b->ev);
    e->k->ops->buf_free(e->k, b->q);
    e->k->ops->buf_free(e->k, b->o);
    e->k->ops->buf_free(e->k, b->o_host);
    e->k->ops->buf_free(e->k, b->in_host);
    for (i = 0; i < b->n_alloc; i++)
        free(b->items[i]);
    free(b->items);
    free(b->views);
#if NA_HAVE_CUDA
    free(b->rq);
#endif
    free(b->done);
    free(b);
}

/* A new batch object with its event and buffers for `floats` floats. */
static na_status_t acu_batch_new(na_attn_cuda_t *e, size_t floats, na_attn_batch_t **b_p)
{
    na_attn_batch_t *b = calloc(1, sizeof(*b));
    na_status_t st;
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
    if ((st = e->k->ops->event_create(e->k, &b->ev)) != NA_OK ||
        (floats > 0 && (st = acu_batch_room(e, b, floats)) != NA_OK)) {
        acu_batch_free(e, b);
        return st;
    }
    *b_p = b;
    return NA_OK;
}

static na_status_t acu_begin(na_attn_engine_t *base, na_attn_batch_t **b_p)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    na_attn_batch_t *b = e->pool;
    na_status_t st;
    if (b != NULL) {
        e->pool = b->next;
    } else if ((st = acu_batch_new(e, 0, &b)) != NA_OK) {
        return st;
    }
    b->next = NULL;
    b->inner = NULL;
    b->inner_done = 0;
    b->n = 0;
    b->floats = 0;
    b->closed = 0;
    b->dev_st = NA_OK;
    b->dev_reason[0] = '\0';
    b->t0 = na_now_ns();
    e->round++;
    *b_p = b;
    return NA_OK;
}

/* Entry en's inputs into b: q, then k_new and v_new when it has them,
 * copied into the pinned staging at b->floats and uploaded to b->q in one
 * asynchronous copy; *q_off / *kv_off: where they start (floats). The
 * staging is never reused before the batch completes (its event), nor is
 * the room given back when the entry goes to the CPU engine after all: the
 * copy may still be reading it. The caller made the room. */
static na_status_t acu_stage(na_attn_cuda_t *e, na_attn_batch_t *b, const na_attn_entry_t *en,
                             size_t *q_off, size_t *kv_off)
{
    size_t nq = (size_t)en->n_q_heads * (size_t)e->kcfg->head_dim;
    size_t nk = (size_t)en->n_kv_heads * (size_t)e->kcfg->head_dim, n = nq;
    float *h = (float *)b->in_host->host + b->floats;
    na_kbuf_t d;
    na_status_t st;

    memcpy(h, en->q, nq * sizeof(float));
    if (en->k_new != NULL) {
        memcpy(h + nq, en->k_new, nk * sizeof(float));
        memcpy(h + nq + nk, en->v_new, nk * sizeof(float));
        n += 2 * nk;
    }
    d = na_kbuf_view(b->q, b->floats * sizeof(float), n * sizeof(float));
    if ((st = e->k->ops->upload(e->k, &d, h, n * sizeof(float))) != NA_OK)
        return st;
    *q_off = b->floats;
    *kv_off = b->floats + nq;
    b->floats += n;
    return NA_OK;
}

/* Entry it (copy r) on the device, its q staged at floats q_off: the
 * attention itself is launched at close, for all device entries at once
 * (acu_launch). */
static void acu_run(na_acu_item_t *it, const na_acu_res_t *r, size_t q_off)
{
    it->off = q_off;
    it->kc = r->k;
    it->vc = r->v;
    it->ctx = r->n;
    it->n_kvh = r->n_kvh;
}

/* 1 when the backend takes a batch of decodes in one launch (cuda), unless
 * NA_CUDA_ATTN_BATCH=0 (one launch per entry: the path refdev takes). */
static int acu_batched(const na_attn_cuda_t *e)
{
#if NA_HAVE_CUDA
    const char *v = getenv("NA_CUDA_ATTN_BATCH");
    return strcmp(e->k->ops->name, "cuda") == 0 && !(v != NULL && strcmp(v, "0") == 0);
#else
    (void)e;
    return 0;
#endif
}

/* Launch the attention of b's device entries: on cuda one batched launch per
 * shape (n_q_heads, n_kv_heads) — one per layer in practice — else one
 * attn_decode per entry; then the outputs down in one copy. */
static na_status_t acu_launch(na_attn_cuda_t *e, na_attn_batch_t *b)
{
    const na_kernel_ops_t *ops = e->k->ops;
    const size_t hd = (size_t)e->kcfg->head_dim;
    na_status_t st = NA_OK;
    int i, j, n_dev = 0;

    for (i = 0; i < b->n; i++)
        n_dev += b->items[i]->on_dev;
    if (n_dev == 0)
        return NA_OK;
    if (b->cap_views < 2 * n_dev) {         /* kept by the pooled batch */
        na_kbuf_t *v = realloc(b->views, sizeof(*v) * 2 * (size_t)n_dev);
        if (v == NULL)
            return na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
        b->views = v;
#if NA_HAVE_CUDA
        {
            na_kcuda_attn_req_t *rq = realloc(b->rq, sizeof(*rq) * (size_t)n_dev);
            if (rq == NULL)
                return na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
            b->rq = rq;
        }
#endif
        b->cap_views = 2 * n_dev;
    }
    for (i = 0, j = 0; i < b->n; i++) {
        na_acu_item_t *it = b->items[i];
        size_t bytes = (size_t)it->en->n_q_heads * hd * sizeof(float);
        if (!it->on_dev)
            continue;
        it->vi = j++;
        b->views[2 * it->vi] = na_kbuf_view(b->q, it->off * sizeof(float), bytes);
        b->views[2 * it->vi + 1] = na_kbuf_view(b->o, it->off * sizeof(float), bytes);
    }
#if NA_HAVE_CUDA
    if (acu_batched(e)) {
        na_kcuda_attn_req_t *rq = b->rq;
        char *done = b->done;               /* b->cap long (acu_submit) */
        memset(done, 0, (size_t)b->n);
        for (i = 0; st == NA_OK && i < b->n; i++) {   /* one launch per shape */
            const na_acu_item_t *a = b->items[i];
            int n = 0, k;
            if (!a->on_dev || done[i])
                continue;
            for (k = i; k < b->n; k++) {
                const na_acu_item_t *it = b->items[k];
                if (it->on_dev && !done[k] && it->en->n_q_heads == a->en->n_q_heads &&
                    it->n_kvh == a->n_kvh) {
                    rq[n++] = (na_kcuda_attn_req_t){ &b->views[2 * it->vi + 1],
                                                     &b->views[2 * it->vi], it->kc, it->vc,
                                                     it->ctx };
                    done[k] = 1;
                }
            }
            st = na_kernels_cuda_attn_decode_batch(e->k, rq, n, e->kcfg->kv_dtype,
                                                   a->en->n_q_heads, a->n_kvh, (int)hd);
        }
    } else
#endif
    {
        for (i = 0; st == NA_OK && i < b->n; i++) {
            const na_acu_item_t *it = b->items[i];
            na_kbuf_t kc, vc;
            size_t kvb;
            if (!it->on_dev)
                continue;
            kvb = (size_t)it->ctx * acu_row_bytes(e, it->n_kvh);
            kc = na_kbuf_view(it->kc, 0, kvb);
            vc = na_kbuf_view(it->vc, 0, kvb);
            st = ops->attn_decode(e->k, &b->views[2 * it->vi + 1], &b->views[2 * it->vi], &kc,
                                  &vc, e->kcfg->kv_dtype, it->ctx, it->en->n_q_heads,
                                  it->n_kvh, (int)hd);
        }
    }
    if (st == NA_OK)
        st = ops->download(e->k, b->o_host->host, b->o, b->floats * sizeof(float));
    return st;
}

/* A valid entry for this slot: the request, its shapes, its pointers. */
static int acu_entry_ok(na_attn_cuda_t *e, const na_attn_entry_t *en, na_kv_req_t **kr_p)
{
    na_kv_req_t *kr = na_kv_find(e->store, en->req);
    int n_kvh;
    if (kr == NULL || na_kv_req_check(kr) != NA_OK || en->layer < 0 ||
        en->layer >= e->kcfg->n_layers || en->q == NULL || en->o == NULL ||
        (en->k_new == NULL) != (en->v_new == NULL) || en->n_ctx > 0)
        return 0;   /* n_ctx (a prompt chunk's query): the CPU engine's turn */
    n_kvh = na_kv_req_n_kvh(kr);
    if (n_kvh > e->cfg.max_kv_heads || en->n_kv_heads != n_kvh ||
        en->n_q_heads != n_kvh * e->cfg.group)
        return 0;
    *kr_p = kr;
    return 1;
}

static na_status_t acu_submit(na_attn_engine_t *base, na_attn_batch_t *b,
                              na_attn_entry_t *entries, int n)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    na_status_t st;
    int i;

    if (b->cap < b->n + n) {
        int cap = b->cap ? b->cap : 16;
        na_acu_item_t **ni;
        char *dn;
        while (cap < b->n + n)
            cap *= 2;
        ni = realloc(b->items, sizeof(*ni) * (size_t)cap);
        if (ni != NULL)
            b->items = ni;
        if (ni == NULL || (dn = realloc(b->done, (size_t)cap)) == NULL)
            return na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
        b->done = dn;
        b->cap = cap;
    }
    for (i = 0; i < n; i++) {
        na_attn_entry_t *en = &entries[i];
        na_acu_item_t *it;
        na_kv_req_t *kr = NULL;
        na_acu_res_t *r = NULL;
        size_t q_off = 0, kv_off = 0;
        int appended = 0;

        if (b->n == b->n_alloc) {                 /* kept by the pooled batch */
            if ((b->items[b->n] = malloc(sizeof(*it))) == NULL)
                return na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
            b->n_alloc++;
        }
        it = b->items[b->n++];
        memset(it, 0, sizeof(*it));
        it->en = en;
        en->status = NA_OK;
        en->reason[0] = '\0';
        st = NA_OK;
        if (acu_entry_ok(e, en, &kr)) {
            /* the batch's room first: no device memory for it is no room
             * (the CPU's turn), not the entry's failure */
            size_t fl = (size_t)(en->n_q_heads + 2 * en->n_kv_heads) *
                        (size_t)e->kcfg->head_dim;
            if (acu_batch_room(e, b, fl) != NA_OK)
                e->stats.cuda_fallbacks++;
            else if ((st = acu_stage(e, b, en, &q_off, &kv_off)) == NA_OK)
                r = acu_prepare(e, en, kr, b, kv_off, &appended, &st);
        }
        if (r != NULL) {
            acu_run(it, r, q_off);
            it->on_dev = 1;
            r->pins++;
            e->stats.entries++;
            e->stats.tokens += (uint64_t)r->n;
            continue;
        }
        if (st != NA_OK) {                        /* fails this entry only */
            it->status = st;
            snprintf(it->reason, sizeof(it->reason), "%s", na_errmsg());
            e->stats.entries++;
            e->stats.entries_failed++;
            continue;
        }
        it->shadow = *en;                         /* the CPU engine's turn */
        if (appended) {
            it->shadow.k_new = NULL;
            it->shadow.v_new = NULL;
        }
        if (b->inner == NULL && (st = na_attn_batch_begin(e->cpu, &b->inner)) != NA_OK)
            return st;
        if ((st = na_attn_submit(e->cpu, b->inner, &it->shadow, 1)) != NA_OK)
            return st;
    }
    return NA_OK;
}

static na_status_t acu_close(na_attn_engine_t *base, na_attn_batch_t *b)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    na_status_t st = NA_OK;
    b->closed = 1;
    if (b->inner != NULL)
        st = na_attn_batch_close(e->cpu, b->inner);
    if (st == NA_OK && (b->dev_st = acu_launch(e, b)) != NA_OK)
        snprintf(b->dev_reason, sizeof(b->dev_reason), "%s", na_errmsg());
    if (st == NA_OK)
        st = e->k->ops->event_record(e->k, b->ev);
    return st;
}

/* b completed: results onto the entries, copies unpinned, b freed. dev_st:
 * the device's status (an error fails every device entry). */
static void acu_finish(na_attn_cuda_t *e, na_attn_batch_t *b, na_status_t dev_st)
{
    size_t hd = (size_t)e->kcfg->head_dim;
    int i;
    if (b->dev_st != NA_OK) {                     /* the launch at close failed */
        dev_st = b->dev_st;
        na_err(dev_st, "%s", b->dev_reason);
    }
    for (i = 0; i < b->n; i++) {
        na_acu_item_t *it = b->items[i];
        na_attn_entry_t *en = it->en;
        if (it->on_dev) {
            na_acu_res_t *r = acu_find(e, en->req, en->layer);
            if (r != NULL)
                r->pins--;
            if (dev_st == NA_OK)
                memcpy(en->o, (float *)b->o_host->host + it->off,
                       (size_t)en->n_q_heads * hd * sizeof(float));
            else
                snprintf(en->reason, sizeof(en->reason), "attention cuda: %s", na_errmsg());
            en->status = dev_st;
        } else if (it->status != NA_OK) {
            en->status = it->status;
            snprintf(en->reason, sizeof(en->reason), "%s", it->reason);
        } else {
            en->status = it->shadow.status;
            snprintf(en->reason, sizeof(en->reason), "%s", it->shadow.reason);
        }
    }
    e->stats.batch_ns += na_now_ns() - b->t0;
    b->next = e->pool;                            /* buffers, event, items kept */
    e->pool = b;
}

static na_status_t acu_test(na_attn_engine_t *base, na_attn_batch_t *b, int wait_us, int *done)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    na_status_t st, dev_st;
    *done = 0;
    if (!b->closed)
        return NA_OK;
    if (b->inner != NULL && !b->inner_done) {
        st = na_attn_batch_test(e->cpu, b->inner, wait_us, &b->inner_done);
        if (st != NA_OK || !b->inner_done)
            return st;
    }
    dev_st = e->k->ops->event_query(e->k, b->ev);
    if (dev_st == NA_ERR_BUSY)
        return NA_OK;
    *done = 1;
    acu_finish(e, b, dev_st);
    return NA_OK;
}

static na_status_t acu_wait(na_attn_engine_t *base, na_attn_batch_t *b)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    na_status_t st = NA_OK;
    if (b->inner != NULL && !b->inner_done)
        st = na_attn_batch_wait(e->cpu, b->inner);
    acu_finish(e, b, e->k->ops->event_wait(e->k, b->ev));
    return st;
}

static void acu_stats(na_attn_engine_t *base, na_attn_stats_t *out)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    na_attn_stats_t in;
    na_attn_engine_stats(e->cpu, &in);
    *out = in;                                    /* tiers, granules: the CPU side */
    out->entries += e->stats.entries;
    out->entries_failed += e->stats.entries_failed;
    out->tokens += e->stats.tokens;
    out->batch_ns = e->stats.batch_ns;
    out->cuda_budget = e->budget;
    out->cuda_bytes = e->used;
    out->cuda_peak = e->stats.cuda_peak;
    out->cuda_fallbacks = e->stats.cuda_fallbacks;
    out->cuda_alloc_failed = e->stats.cuda_alloc_failed;
}

/* ---- create / destroy ---------------------------------------------------- */

static void acu_destroy(na_attn_engine_t *base)
{
    na_attn_cuda_t *e = (na_attn_cuda_t *)base;
    if (e->k != NULL) {
        (void)na_kernels_finish(e->k);
        while (e->n_res > 0)
            acu_drop(e, &e->res[e->n_res - 1]);
        while (e->pool != NULL) {
            na_attn_batch_t *b = e->pool;
            e->pool = b->next;
            acu_batch_free(e, b);
        }
        na_kernels_destroy(e->k);
    }
    na_attn_engine_destroy(e->cpu);
    free(e->res);
    free(e->gather);
    free(e);
}

static na_status_t acu_create(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                              na_attn_engine_t **e_p)
{
    na_attn_cuda_t *e = calloc(1, sizeof(*e));
    char name[32];
    uint64_t dev_mem = 0;
    na_status_t st;

    if (e == NULL)
        return na_err(NA_ERR_NOMEM, "attention cuda: out of memory");
    e->cfg = *cfg;
    e->store = store;
    e->kcfg = na_kv_store_cfg(store);
    snprintf(name, sizeof(name), "cuda:%d", cfg->gpu);
    if ((st = na_kernels_create(cfg->device_kernels ? cfg->device_kernels : name, 1, &e->k)) !=
            NA_OK ||
        (st = na_attn_engine_create_impl(&na_attn_cpu_ops, "cpu", store, cfg, &e->cpu)) !=
            NA_OK)
        goto fail;
#if NA_HAVE_CUDA
    {
        const char *dn;
        size_t mem;
        if (na_kernels_cuda_info(e->k, &dn, &mem) == NA_OK)
            dev_mem = mem;
    }
#endif
    if (cfg->hbm_mb > 0 && dev_mem > 0 && ((uint64_t)cfg->hbm_mb << 20) > dev_mem) {
        st = na_err(NA_ERR_RANGE, "attention cuda: hbm_mb %ld is more than the GPU's %llu MiB",
                    cfg->hbm_mb, (unsigned long long)(dev_mem >> 20));
        goto fail;
    }
    e->budget = cfg->hbm_mb > 0 ? (uint64_t)cfg->hbm_mb << 20
              : dev_mem > 0     ? dev_mem / 10 * 8
                                : (uint64_t)NA_ACU_DEFAULT_MB << 20;
    /* one batch's buffers now, so a batch of up to NA_ACU_PRE_ENTRIES
     * entries allocates nothing */
    if ((st = acu_batch_new(e, (size_t)NA_ACU_PRE_ENTRIES * (size_t)cfg->max_kv_heads *
                                   (size_t)((cfg->group > 0 ? cfg->group : 1) + 2) *
                                   (size_t)e->kcfg->head_dim, &e->pool)) != NA_OK)
        goto fail;
    *e_p = &e->base;
    return NA_OK;
fail:
    acu_destroy(&e->base);
    return st;
}

const na_attn_engine_ops_t na_attn_cuda_ops = {
    acu_create, acu_destroy, acu_begin, acu_submit, acu_close, acu_test, acu_wait, acu_stats,
    0,   /* block_queries: one query per entry */
    NULL,   /* submit_close: submit, then close */
};

/* storage-node/writeback.c — delayed KV writeback (INF2 §4.2), the
 * per-extent header that makes a crash detectable, and the marking of a
 * request failed (na_kv_req_fail: a write that fails fails its request; the
 * state is read with na_kv_req_state, inline in kv_internal.h). Below
 * kv_store.c, which calls down into it and never the reverse.
 *
 * New rows are appended into blocks in the writeback buffer (DRAM) and
 * attention reads them from there. Every spill_interval decode steps of a
 * (request, layer) — or at once for a prefill — the buffered rows are
 * spilled in bulk: full blocks are copied into one bounce buffer per run of
 * up to 1 MiB and written with one asynchronous write to their (sequential)
 * SSD home; the partial last block's image is rewritten to its home too.
 * Nothing waits for these writes on the decode path, and a decode step does
 * not even issue them: its spill is listed (kv_store.c's due list) and made by
 * the loop's next na_kv_poll, after the step's answer went out (or by the
 * next append of that layer when no poll came); completions are reaped by
 * na_kv_poll (the node loop calls it between messages) or when the queue
 * is full. Until a block's write completes it stays WRITING and attention
 * keeps reading its DRAM copy. A block that fits the DRAM budget stays in
 * the DRAM tier after its write (write-through), otherwise its memory is
 * released and attention reads it from the SSD.
 *
 * What a crash loses. DRAM is volatile: after a crash only the SSD file is
 * left. For each (request, layer) the SSD holds the rows of every spill
 * whose writes completed; rows appended since (at most spill_interval - 1
 * decode steps, plus a spill due at the next poll or still in flight) are
 * lost. Detection: each
 * request's extent begins with a 4 KiB header — magic, request id, a
 * generation number unique per open, the shape, the durable row count of
 * each layer and an FNV-1a checksum — rewritten after every spill whose
 * writes all completed (data first, header after, so the header never
 * claims rows that are not on the disk). A reader (na_kv_read_header)
 * rejects a torn or foreign header; rows past a layer's durable count are
 * garbage. Recovery then re-prefills the lost positions (the compute node
 * holds the tokens); with no valid header the request is re-prefilled. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fnv.h"
#include "common/log.h"
#include "storage-node/kv_internal.h"

/* ---- a request's failure state (first failure wins) ---------------------- */

void na_kv_req_fail(na_kv_req_t *r, na_status_t st, const char *reason)
{
    if (r->fail_st != NA_OK)
        return;
    r->fail_st = st;
    snprintf(r->reason, sizeof(r->reason), "%s", reason);
    na_log_warn("kv: request %llu failed: %s", (unsigned long long)r->id, reason);
}

/* ---- write records -------------------------------------------------------- */

enum { NA_KV_WR_DATA, NA_KV_WR_TAIL, NA_KV_WR_HDR };

typedef struct na_kv_wr {
    na_kv_req_t *r;
    int          layer;
    int          kind;         /* NA_KV_WR_* */
    int          b0, nb;       /* DATA: blocks [b0, b0+nb) */
    void        *buf;          /* bounce, or the request's header image */
    size_t       len;
    uint64_t     off;
    void        *bounce;       /* owned aligned buffer of bounce_cap bytes, kept
                                  with the record on the store's free list */
    size_t       bounce_cap;
    struct na_kv_wr *next;     /* on s->wr_free */
} na_kv_wr_t;

/* A record from the store's free list (or new) with a bounce buffer of at
 * least len bytes (len 0: none needed); NULL out of memory. */
static na_kv_wr_t *na_kv_wr_get(na_kv_store_t *s, size_t len)
{
    na_kv_wr_t *w = s->wr_free;
    void *bounce;
    size_t cap;

    if (w != NULL)
        s->wr_free = w->next;
    else if ((w = calloc(1, sizeof(*w))) == NULL)
        return NULL;
    if (len > w->bounce_cap) {
        void *nb = na_kv_aligned_alloc(len);
        if (nb == NULL) {
            w->next = s->wr_free;
            s->wr_free = w;
            return NULL;
        }
        na_kv_aligned_free(w->bounce);
        w->bounce = nb;
        w->bounce_cap = len;
    }
    bounce = w->bounce;
    cap = w->bounce_cap;
    memset(w, 0, sizeof(*w));
    w->bounce = bounce;
    w->bounce_cap = cap;
    w->buf = bounce;
    w->len = len;
    return w;
}

/* w completed (or was never submitted): back onto the free list. */
static void na_kv_wr_put(na_kv_store_t *s, na_kv_wr_t *w)
{
    w->next = s->wr_free;
    s->wr_free = w;
}

void na_kv_wr_pool_destroy(na_kv_store_t *s)
{
    while (s->wr_free != NULL) {
        na_kv_wr_t *w = s->wr_free;
        s->wr_free = w->next;
        na_kv_aligned_free(w->bounce);
        free(w);
    }
}

static void na_kv_put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }  /* little-endian host */
static void na_kv_put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t na_kv_get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t na_kv_get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Header layout (bytes): 0 magic, 8 id, 16 seq, 24 n_layers, 28 max_tokens,
 * 32 n_kvh, 36 block_tokens, 40 head_dim, 44 kv_dtype, 48 checksum,
 * 64 + 4*l durable rows of layer l. */
static void na_kv_header_build(na_kv_store_t *s, na_kv_req_t *r)
{
    uint8_t *h = r->hdr_buf;
    int l;

    memset(h, 0, NA_KV_HDR_BYTES);
    na_kv_put64(h + 0, NA_KV_HDR_MAGIC);
    na_kv_put64(h + 8, r->id);
    na_kv_put64(h + 16, r->seq);
    na_kv_put32(h + 24, (uint32_t)s->cfg.n_layers);
    na_kv_put32(h + 28, (uint32_t)r->max_tokens);
    na_kv_put32(h + 32, (uint32_t)r->n_kvh);
    na_kv_put32(h + 36, (uint32_t)s->cfg.block_tokens);
    na_kv_put32(h + 40, (uint32_t)s->cfg.head_dim);
    na_kv_put32(h + 44, (uint32_t)s->cfg.kv_dtype);
    for (l = 0; l < s->cfg.n_layers; l++)
        na_kv_put32(h + 64 + 4 * l, (uint32_t)r->layers[l].n_durable);
    na_kv_put64(h + 48, na_fnv1a64(h, NA_KV_HDR_BYTES));
}

static na_status_t na_kv_reap(na_kv_store_t *s, int min_wait);

/* Queue one write record; reaps completions while the queue is full. */
static na_status_t na_kv_wr_submit(na_kv_store_t *s, na_kv_wr_t *w)
{
    na_status_t st;

    for (;;) {
        st = s->io->ops->prep_write(s->io, s->file.fd, w->buf, w->len, w->off,
                                    (uint64_t)(uintptr_t)w);
        if (st != NA_ERR_BUSY)
            break;
        if (s->io_inflight == 0)
            return na_err(NA_ERR_INTERNAL, "writeback: queue full with nothing in flight");
        st = na_kv_reap(s, 1);
        if (st != NA_OK)
            return st;
    }
    if (st != NA_OK)
        return st;
    s->io_inflight++;
    w->r->writes++;
    if (w->kind != NA_KV_WR_HDR)
        w->r->layers[w->layer].writes++;
    else
        w->r->hdr_writing = 1;
    return s->io->ops->submit(s->io);
}

static na_status_t na_kv_header_submit(na_kv_store_t *s, na_kv_req_t *r)
{
    na_kv_wr_t *w = na_kv_wr_get(s, 0);
    na_status_t st;

    if (w == NULL)
        return na_err(NA_ERR_NOMEM, "writeback: out of memory");
    na_kv_header_build(s, r);
    r->hdr_dirty = 0;
    w->r = r;
    w->layer = -1;
    w->kind = NA_KV_WR_HDR;
    w->buf = r->hdr_buf;
    w->len = NA_KV_HDR_BYTES;
    w->off = r->ext_off;
    st = na_kv_wr_submit(s, w);
    if (st != NA_OK)
        na_kv_wr_put(s, w);
    return st;
}

/* Finish a written DATA block: DRAM tier (keep) or SSD only. */
static void na_kv_block_settle(na_kv_store_t *s, na_kv_req_t *r, na_kv_block_t *blk)
{
    if (blk->keep) {
        blk->loc = NA_KV_LOC_DRAM;
    } else {
        na_kv_dram_block_put(s, blk->mem, r->block_bytes);
        blk->mem = NULL;
        blk->loc = NA_KV_LOC_SSD;
        s->ssd_only = 1;
    }
    blk->written = 0;
}

static void na_kv_wr_complete(na_kv_store_t *s, na_kv_wr_t *w, int64_t res)
{
    na_kv_req_t *r = w->r;
    int ok = res == (int64_t)w->len, b;

    s->io_inflight--;
    r->writes--;
    if (!ok) {
        char why[200];
        snprintf(why, sizeof(why), "spill write of layer %d at offset %llu of the SSD tier failed: %s",
                 w->layer, (unsigned long long)w->off,
                 res < 0 ? strerror((int)-res) : "short write");
        na_kv_req_fail(r, NA_ERR_IO, why);
    } else {
        s->st.bytes_written_ssd += w->len;
    }
    if (w->kind == NA_KV_WR_HDR) {
        r->hdr_writing = 0;
        na_kv_wr_put(s, w);
        return;
    }
    {
        na_kv_layer_t *L = &r->layers[w->layer];
        if (w->kind == NA_KV_WR_TAIL)
            L->tail_writes--;
        if (w->kind == NA_KV_WR_DATA && ok) {
            for (b = w->b0; b < w->b0 + w->nb; b++) {
                if (L->busy) {
                    L->blocks[b].written = 1;
                    L->deferred = 1;
                } else {
                    na_kv_block_settle(s, r, &L->blocks[b]);
                }
            }
        }
        if (--L->writes == 0 && r->fail_st == NA_OK) {
            L->n_durable = L->n_spilled;
            r->hdr_dirty = 1;
        }
    }
    na_kv_wr_put(s, w);
}

/* Reap completions (at least min_wait), then write headers made dirty. */
static na_status_t na_kv_reap(na_kv_store_t *s, int min_wait)
{
    na_kv_io_cqe_t cqe[64];
    na_kv_req_t *touched[64];
    na_status_t st;
    int n, i;

    st = s->io->ops->wait(s->io, min_wait, cqe, 64, &n);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n; i++) {
        na_kv_wr_t *w = (na_kv_wr_t *)(uintptr_t)cqe[i].tag;
        touched[i] = w->r;
        na_kv_wr_complete(s, w, cqe[i].res);
    }
    for (i = 0; i < n; i++) {
        na_kv_req_t *r = touched[i];
        if (r->hdr_dirty && !r->hdr_writing && r->fail_st == NA_OK && r->writes == 0)
            (void)na_kv_header_submit(s, r);   /* retried at the next spill if refused */
    }
    return NA_OK;
}

/* The spills left for the poll (kv_store.c's na_kv_spill_later), unless made since. A
 * write that cannot be issued fails its request (na_kv_wr_issue). */
static void na_kv_spill_due(na_kv_store_t *s)
{
    int i;

    for (i = 0; i < s->n_due; i++) {
        na_kv_req_t *r = s->due[i].r;
        na_kv_layer_t *L = &r->layers[s->due[i].layer];
        L->due = 0;
        if (L->pending_steps >= s->cfg.spill_interval && r->fail_st == NA_OK)
            (void)na_kv_spill(s, r, s->due[i].layer, 0);
    }
    s->n_due = 0;
}

na_status_t na_kv_poll(na_kv_store_t *s, int wait)
{
    na_status_t st = NA_OK;

    if (!s->has_ssd)
        return NA_OK;
    if (s->n_due > 0)
        na_kv_spill_due(s);
    if (!wait)
        return s->io_inflight > 0 ? na_kv_reap(s, 0) : NA_OK;
    while (s->io_inflight > 0 && st == NA_OK)
        st = na_kv_reap(s, 1);
    return st;
}

na_status_t na_kv_wait_req(na_kv_store_t *s, na_kv_req_t *r)
{
    na_status_t st;

    while (r->writes > 0) {
        st = na_kv_reap(s, 1);
        if (st != NA_OK)
            return st;
    }
    return na_kv_req_state(r);
}

na_status_t na_kv_header_write_sync(na_kv_store_t *s, na_kv_req_t *r)
{
    na_status_t st = na_kv_header_submit(s, r);
    if (st != NA_OK)
        return st;
    return na_kv_wait_req(s, r);
}

/* A write record with an aligned buffer of len bytes (reused). NA_ERR_NOMEM. */
static na_status_t na_kv_wr_new(na_kv_store_t *s, size_t len, na_kv_wr_t **w_p)
{
    *w_p = na_kv_wr_get(s, len);
    return *w_p != NULL ? NA_OK : na_err(NA_ERR_NOMEM, "writeback: out of memory");
}

/* Submit w (from na_kv_wr_new) for r's layer at byte `at` of the layer's
 * extent. On failure w goes back to the free list and r is failed with the
 * error. */
static na_status_t na_kv_wr_issue(na_kv_store_t *s, na_kv_wr_t *w, na_kv_req_t *r, int layer,
                                  int kind, uint64_t at)
{
    na_status_t st;

    w->r = r;
    w->layer = layer;
    w->kind = kind;
    w->off = na_kv_layer_off(r, layer) + at;
    st = na_kv_wr_submit(s, w);
    if (st != NA_OK) {
        na_kv_wr_put(s, w);
        na_kv_req_fail(r, st, na_errmsg());
    }
    return st;
}

na_status_t na_kv_spill(na_kv_store_t *s, na_kv_req_t *r, int layer, int sync)
{
    na_kv_layer_t *L = &r->layers[layer];
    const int bt = s->cfg.block_tokens;
    const int full = L->n_tokens / bt;
    const size_t bs = r->block_bytes;
    int b = L->n_committed / bt, per_run, i;
    na_status_t st;

    L->pending_steps = 0;
    if (!s->has_ssd) {
        for (; b < full; b++)
            L->blocks[b].loc = NA_KV_LOC_DRAM;   /* reserved at open */
        L->n_committed = full * bt;
        L->n_spilled = L->n_tokens;
        return NA_OK;
    }
    per_run = bs >= NA_KV_IO_MAX ? 1 : (int)(NA_KV_IO_MAX / bs);
    /* block b's earlier partial image may still be in flight to the same
     * offset: writes are not ordered, so the full block (and its checksum)
     * goes out only after it landed, else the disk may keep the older image
     * (a checksum failure when it is read back) */
    while (b < full && L->tail_writes > 0) {
        st = na_kv_reap(s, 1);
        if (st != NA_OK)
            return st;
    }
    while (b < full) {
        int nb = full - b < per_run ? full - b : per_run;
        na_kv_wr_t *w = NULL;
        st = na_kv_wr_new(s, (size_t)nb * bs, &w);
        if (st != NA_OK)
            return st;
        for (i = 0; i < nb; i++) {
            na_kv_block_t *blk = &L->blocks[b + i];
            memcpy((char *)w->buf + (size_t)i * bs, blk->mem, bs);
            blk->sum = na_kv_sum((char *)w->buf + (size_t)i * bs, bs);   /* checked on reads */
            blk->loc = NA_KV_LOC_WRITING;
            blk->written = 0;
            blk->keep = 0;
            if (!s->cfg.no_dram_tier && na_kv_dram_fits(s, bs) &&
                na_kv_dram_reserve(s, bs, "a DRAM-tier block") == NA_OK) {   /* stays in DRAM */
                blk->keep = 1;
                r->dram_tier += bs;
                s->st.bytes_spilled_dram += bs;
            }
        }
        w->b0 = b;
        w->nb = nb;
        st = na_kv_wr_issue(s, w, r, layer, NA_KV_WR_DATA, (uint64_t)b * bs);
        if (st != NA_OK)
            return st;
        b += nb;
    }
    L->n_committed = full * bt;
    if (L->n_tokens % bt != 0 && L->n_spilled != L->n_tokens) {   /* partial tail image */
        na_kv_wr_t *w = NULL;
        if (L->tail_writes > 0) {
            /* the previous image is still in flight: this one waits for the
             * next spill (rows up to the full blocks are spilled) */
            L->n_spilled = L->n_committed;
            s->st.n_spills++;
            return sync ? na_kv_wait_req(s, r) : NA_OK;
        }
        st = na_kv_wr_new(s, bs, &w);
        if (st != NA_OK)
            return st;
        memcpy(w->buf, L->blocks[full].mem, bs);
        st = na_kv_wr_issue(s, w, r, layer, NA_KV_WR_TAIL, (uint64_t)full * bs);
        if (st != NA_OK)
            return st;
        L->tail_writes++;
    }
    L->n_spilled = L->n_tokens;
    s->st.n_spills++;
    if (sync)
        return na_kv_wait_req(s, r);
    return NA_OK;
}

na_status_t na_kv_flush(na_kv_store_t *s, na_kv_req_t *r)
{
    na_status_t st;
    int l, again;

    do {         /* a tail image held back behind one in flight goes out after it */
        again = 0;
        for (l = 0; l < s->cfg.n_layers; l++) {
            if (r->layers[l].n_spilled == r->layers[l].n_tokens)
                continue;
            st = na_kv_spill(s, r, l, 0);
            if (st != NA_OK)
                return st;
            again |= r->layers[l].n_spilled != r->layers[l].n_tokens;
        }
        if (!s->has_ssd)
            return NA_OK;
        st = na_kv_wait_req(s, r);
    } while (st == NA_OK && again);
    if (st == NA_OK && r->hdr_dirty)
        st = na_kv_header_write_sync(s, r);
    return st;
}

na_status_t na_kv_header_read(na_kv_store_t *s, na_kv_req_t *r, uint64_t *seq_p, int *tokens,
                              int n_layers)
{
    const uint64_t id = r->id;
    uint8_t *h;
    uint64_t sum;
    na_status_t st;
    int l;

    st = na_kv_poll(s, 1);              /* the ring is shared: drain it first */
    if (st != NA_OK)
        return st;
    h = na_kv_aligned_alloc(NA_KV_HDR_BYTES);
    if (h == NULL)
        return na_err(NA_ERR_NOMEM, "read header: out of memory");
    st = na_kv_io_rw_sync(s->io, s->file.fd, 0, h, NA_KV_HDR_BYTES, r->ext_off, s->file.path);
    if (st != NA_OK)
        goto out;
    sum = na_kv_get64(h + 48);
    memset(h + 48, 0, 8);
    if (na_kv_get64(h) != NA_KV_HDR_MAGIC || na_fnv1a64(h, NA_KV_HDR_BYTES) != sum ||
        na_kv_get64(h + 8) != id || (int)na_kv_get32(h + 24) != s->cfg.n_layers) {
        st = na_err(NA_ERR_FORMAT, "%s: header of request %llu at offset %llu is torn or foreign",
                    s->file.path, (unsigned long long)id, (unsigned long long)r->ext_off);
        goto out;
    }
    *seq_p = na_kv_get64(h + 16);
    for (l = 0; l < n_layers && l < s->cfg.n_layers; l++)
        tokens[l] = (int)na_kv_get32(h + 64 + 4 * l);
out:
    na_kv_aligned_free(h);
    return st;
}

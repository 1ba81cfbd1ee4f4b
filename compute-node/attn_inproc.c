/* compute-node/attn_inproc.c — the attention service over device slots in
 * this process (see attn_service.h): the storage node's KV stores and
 * attention engines (storage-node/slot.h) driven directly, without a network.
 *
 * Every device slot of every storage node of the layout becomes one slot
 * here; requests are placed over them by the storage node's placement
 * (request- or head-level partition). A submitted batch starts on the
 * engines' worker threads at once and is reaped by poll, so the compute
 * node's slices of other batches overlap with it; several batches may be on
 * the engines at once (they never share a request). The engines have no
 * non-blocking test, so poll(0) returns only batches already reaped and a
 * waiting poll reaps the oldest batch submitted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_service.h"
#include "storage-node/slot.h"

#define NA_INPROC_MAX_BATCH 64

typedef struct na_inproc_req {
    uint64_t        id;
    uint64_t        bytes_per_kvh;
    int             n_parts;
    na_place_part_t parts[NA_PLACE_MAX_SLOTS];
    struct na_inproc_req *next;
} na_inproc_req_t;

/* A batch on the engines. */
typedef struct {
    int               active;
    uint64_t          seq;                   /* submit order */
    na_asvc_entry_t  *e;                     /* its entries (caller's) */
    na_attn_entry_t  *ae;                    /* [cap] engine entries */
    int              *owner;                 /* [cap] index into e */
    int               cap, total;
    na_attn_batch_t  *eb[NA_PLACE_MAX_SLOTS];
    double            t0;
} na_inproc_run_t;

typedef struct {
    na_asvc_t         base;
    int               n_slots;
    na_slot_t       **slots;                 /* [n_slots] */
    na_place_t        place;
    na_inproc_req_t  *reqs;                  /* open requests (list) */
    na_inproc_run_t   run[NA_INPROC_MAX_BATCH];  /* by batch id */
    uint64_t          seq;
    /* batches completed, not yet returned by poll (FIFO) */
    int               done[NA_INPROC_MAX_BATCH];
    int               n_done;
    na_asvc_stats_t   st;
} na_inproc_t;

static na_inproc_req_t *ip_find(na_inproc_t *p, uint64_t id)
{
    na_inproc_req_t *r;
    for (r = p->reqs; r != NULL; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static na_status_t ip_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    na_inproc_t *p = (na_inproc_t *)s;
    const na_model_config_t *mc = &s->mc;
    na_inproc_req_t *r;
    na_status_t st;
    int i;

    if (ip_find(p, req) != NULL)
        return na_err(NA_ERR_BUSY, "inproc: request %llu is already open",
                      (unsigned long long)req);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "inproc: out of memory");
    r->id = req;
    r->bytes_per_kvh = (uint64_t)max_tokens * (uint64_t)mc->n_layers * 2u *
                       (uint64_t)mc->head_dim * 2u;
    p->place.n_kv_heads = mc->n_kv_heads;
    st = na_place_request(&p->place, r->bytes_per_kvh, r->parts, &r->n_parts);
    if (st != NA_OK)
        goto err_free_req;
    for (i = 0; i < r->n_parts; i++) {
        st = na_slot_open(p->slots[r->parts[i].slot], req, max_tokens, r->parts[i].n_kvh);
        if (st != NA_OK)
            goto err_close_parts;
    }
    r->next = p->reqs;
    p->reqs = r;
    return NA_OK;

err_close_parts:
    while (--i >= 0)
        (void)na_slot_release(p->slots[r->parts[i].slot], req);
    na_place_release(&p->place, r->bytes_per_kvh, r->parts, r->n_parts);
err_free_req:
    free(r);
    return st;
}

static na_status_t ip_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                              const void *v, na_dtype_t dtype, int n_tok)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r = ip_find(p, req);
    size_t esz = na_dtype_bytes(dtype, 1);
    double t0 = na_now_s();
    na_status_t st = NA_OK;
    int i;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "inproc: prefill of unknown request %llu",
                      (unsigned long long)req);
    for (i = 0; i < r->n_parts && st == NA_OK; i++) {
        size_t off = (size_t)r->parts[i].kvh0 * (size_t)s->mc.head_dim * esz;
        st = na_slot_prefill(p->slots[r->parts[i].slot], req, layer,
                             (const uint8_t *)k + off, (const uint8_t *)v + off, dtype,
                             (size_t)s->kv_dim, n_tok);
    }
    p->st.prefill_bytes += 2u * (uint64_t)n_tok * (uint64_t)s->kv_dim * esz;
    p->st.prefill_s += na_now_s() - t0;
    return st;
}

static na_status_t ip_prefill_done(na_asvc_t *s, uint64_t req)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t *r = ip_find(p, req);
    na_status_t st = NA_OK;
    int i;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "inproc: unknown request %llu",
                      (unsigned long long)req);
    for (i = 0; i < r->n_parts && st == NA_OK; i++)
        st = na_slot_prefill_done(p->slots[r->parts[i].slot], req);
    return st;
}

/* Wait for batch bi on the engines, copy statuses, queue its id. */
static void ip_finish(na_inproc_t *p, int bi)
{
    na_inproc_run_t *r = &p->run[bi];
    int s, j;

    for (s = 0; s < p->n_slots; s++)
        if (r->eb[s] != NULL) {
            (void)na_attn_batch_wait(na_slot_engine(p->slots[s]), r->eb[s]);
            r->eb[s] = NULL;
        }
    for (j = 0; j < r->total; j++) {
        na_asvc_entry_t *e = &r->e[r->owner[j]];
        if (r->ae[j].status != NA_OK && e->status == NA_OK) {
            e->status = r->ae[j].status;
            snprintf(e->reason, sizeof(e->reason), "%s",
                     r->ae[j].reason[0] ? r->ae[j].reason : na_status_string(e->status));
        }
    }
    p->st.attn_s += na_now_s() - r->t0;
    p->done[p->n_done++] = bi;
    r->active = 0;
}

/* The oldest batch on the engines, or -1. */
static int ip_oldest(const na_inproc_t *p)
{
    int b, best = -1;
    for (b = 0; b < NA_INPROC_MAX_BATCH; b++)
        if (p->run[b].active && (best < 0 || p->run[b].seq < p->run[best].seq))
            best = b;
    return best;
}

/* Reap every batch on the engines (oldest first). */
static void ip_finish_all(na_inproc_t *p)
{
    int b;
    while ((b = ip_oldest(p)) >= 0)
        ip_finish(p, b);
}

static na_status_t ip_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    na_inproc_t *p = (na_inproc_t *)s;
    const int hd = s->mc.head_dim, grp = s->mc.n_heads / s->mc.n_kv_heads;
    int count[NA_PLACE_MAX_SLOTS] = { 0 }, fill[NA_PLACE_MAX_SLOTS];
    na_inproc_req_t **rs;
    na_inproc_run_t *run;
    int i, j, total = 0, sl;

    if (batch < 0 || batch >= NA_INPROC_MAX_BATCH || p->run[batch].active)
        return na_err(NA_ERR_INVALID, "inproc: batch %d already in flight or out of range",
                      batch);
    run = &p->run[batch];
    rs = calloc((size_t)(n > 0 ? n : 1), sizeof(*rs));
    if (rs == NULL)
        return na_err(NA_ERR_NOMEM, "inproc: out of memory");
    for (i = 0; i < n; i++) {
        e[i].status = NA_OK;
        e[i].reason[0] = '\0';
        rs[i] = ip_find(p, e[i].req);
        if (rs[i] == NULL) {
            e[i].status = NA_ERR_NOT_FOUND;
            snprintf(e[i].reason, sizeof(e[i].reason), "inproc: unknown request %llu",
                     (unsigned long long)e[i].req);
            continue;
        }
        for (j = 0; j < rs[i]->n_parts; j++)
            count[rs[i]->parts[j].slot]++;
        total += rs[i]->n_parts;
    }
    if (total + 1 > run->cap) {
        int cap = 2 * (total + 1);
        na_attn_entry_t *ae = realloc(run->ae, (size_t)cap * sizeof(*ae));
        int *ow = ae ? realloc(run->owner, (size_t)cap * sizeof(*ow)) : NULL;
        if (ae != NULL)
            run->ae = ae;
        if (ow == NULL) {
            free(rs);
            return na_err(NA_ERR_NOMEM, "inproc: out of memory for %d entries", total);
        }
        run->owner = ow;
        run->cap = cap;
    }
    for (sl = 0, j = 0; sl < p->n_slots; sl++) {
        fill[sl] = j;
        j += count[sl];
    }
    memset(run->ae, 0, (size_t)(total + 1) * sizeof(*run->ae));
    run->total = total;
    for (i = 0; i < n; i++) {
        if (rs[i] == NULL)
            continue;
        for (j = 0; j < rs[i]->n_parts; j++) {
            const na_place_part_t *pt = &rs[i]->parts[j];
            int x = fill[pt->slot]++;
            na_attn_entry_t *a = &run->ae[x];
            run->owner[x] = i;
            a->req = e[i].req;
            a->layer = layer;
            a->n_kv_heads = pt->n_kvh;
            a->n_q_heads = pt->n_kvh * grp;
            a->q = e[i].q + (size_t)pt->kvh0 * grp * hd;
            a->k_new = e[i].k + (size_t)pt->kvh0 * hd;
            a->v_new = e[i].v + (size_t)pt->kvh0 * hd;
            a->o = e[i].o + (size_t)pt->kvh0 * grp * hd;
        }
    }
    run->active = 1;
    run->seq = ++p->seq;
    run->e = e;
    run->t0 = na_now_s();
    p->st.decode_entries += (uint64_t)n;
    for (sl = 0, j = 0; sl < p->n_slots; j += count[sl], sl++) {
        na_attn_engine_t *eng = na_slot_engine(p->slots[sl]);
        na_status_t st;
        if (count[sl] == 0)
            continue;
        st = na_attn_batch_begin(eng, &run->eb[sl]);
        if (st != NA_OK) {
            run->eb[sl] = NULL;
        } else {
            st = na_attn_submit(eng, run->eb[sl], &run->ae[j], count[sl]);
            (void)na_attn_batch_close(eng, run->eb[sl]);
        }
        if (st != NA_OK) {
            int x;
            for (x = j; x < j + count[sl]; x++)
                if (run->ae[x].status == NA_OK) {
                    run->ae[x].status = st;
                    snprintf(run->ae[x].reason, sizeof(run->ae[x].reason), "%s", na_errmsg());
                }
        }
    }
    free(rs);
    return NA_OK;
}

static na_status_t ip_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    na_inproc_t *p = (na_inproc_t *)s;
    int i;

    for (i = 0; i < p->n_slots; i++)
        (void)na_slot_poll(p->slots[i]);
    if (p->n_done == 0 && timeout_ms != 0 && ip_oldest(p) >= 0)
        ip_finish(p, ip_oldest(p)); /* engines have no "test": waiting is the poll */
    if (p->n_done == 0)
        return NA_ERR_TIMEOUT;
    *batch_p = p->done[0];
    memmove(p->done, p->done + 1, (size_t)(p->n_done - 1) * sizeof(int));
    p->n_done--;
    return NA_OK;
}

static void ip_release(na_asvc_t *s, uint64_t req, int status)
{
    na_inproc_t *p = (na_inproc_t *)s;
    na_inproc_req_t **pp, *r;
    int i;

    (void)status;
    for (pp = &p->reqs; *pp != NULL && (*pp)->id != req; pp = &(*pp)->next)
        ;
    r = *pp;
    if (r == NULL)
        return;
    ip_finish_all(p);               /* their views may still be in use */
    *pp = r->next;
    for (i = 0; i < r->n_parts; i++)
        (void)na_slot_release(p->slots[r->parts[i].slot], req);
    na_place_release(&p->place, r->bytes_per_kvh, r->parts, r->n_parts);
    free(r);
}

static void ip_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    na_inproc_t *p = (na_inproc_t *)s;
    int i;

    *out = p->st;
    out->ssd_bytes_read = 0;
    for (i = 0; i < p->n_slots; i++) {
        na_slot_stats_t ss;
        na_slot_stats(p->slots[i], &ss);
        out->ssd_bytes_read += ss.attn.ssd_bytes_read;
    }
}

static void ip_progress(na_asvc_t *s)
{
    na_inproc_t *p = (na_inproc_t *)s;
    int i;
    for (i = 0; i < p->n_slots; i++)
        (void)na_slot_poll(p->slots[i]);
}

static void ip_destroy(na_asvc_t *s)
{
    na_inproc_t *p = (na_inproc_t *)s;
    int i;

    ip_finish_all(p);
    while (p->reqs != NULL)
        ip_release(s, p->reqs->id, 0);
    for (i = 0; i < p->n_slots; i++)
        na_slot_destroy(p->slots[i]);
    free(p->slots);
    for (i = 0; i < NA_INPROC_MAX_BATCH; i++) {
        free(p->run[i].ae);
        free(p->run[i].owner);
    }
    free(p);
}

static const na_asvc_ops_t na_inproc_ops = {
    ip_destroy, ip_open, ip_prefill, ip_prefill_done, ip_submit, ip_poll, ip_release, ip_stats,
    ip_progress,
};

na_status_t na_asvc_inproc_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  na_asvc_t **s_p)
{
    uint64_t cap[NA_PLACE_MAX_SLOTS] = { 0 };
    na_slot_common_t c;
    na_inproc_t *p;
    na_status_t st;
    int i;

    if (cfg->n_slots < 1 || cfg->n_slots > NA_PLACE_MAX_SLOTS)
        return na_err(NA_ERR_RANGE, "inproc: %d device slots out of range [1, %d]",
                      cfg->n_slots, NA_PLACE_MAX_SLOTS);
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "inproc: out of memory");
    p->base.ops = &na_inproc_ops;
    p->base.kind = "inproc";
    p->base.mc = *mc;
    p->base.q_dim = mc->n_heads * mc->head_dim;
    p->base.kv_dim = mc->n_kv_heads * mc->head_dim;
    p->slots = calloc((size_t)cfg->n_slots, sizeof(*p->slots));
    if (p->slots == NULL) {
        free(p);
        return na_err(NA_ERR_NOMEM, "inproc: out of memory");
    }
    na_slot_common_default(&c);
    c.n_layers = mc->n_layers;
    c.n_heads = mc->n_heads;
    c.n_kv_heads = mc->n_kv_heads;
    c.head_dim = mc->head_dim;
    c.kv_dtype = cfg->model.kv_dtype == NA_CFG_KV_F32 ? NA_DTYPE_F32 : NA_DTYPE_F16;
    c.block_tokens = (int)cfg->kv.block_tokens;
    c.spill_interval = (int)cfg->kv.spill_interval;
    c.prefetch_layers = (int)cfg->kv.prefetch_layers;
    c.no_dram_tier = cfg->kv.tier == NA_CFG_TIER_SSD;
    c.allow_buffered = 1;
    for (i = 0; i < cfg->n_slots; i++) {
        const na_cfg_node_t *nd = &cfg->nodes[cfg->slots[i].node];
        const na_cfg_device_t *d = &nd->devices[cfg->slots[i].dev];
        na_slot_dev_t dev;
        dev.dir = d->path;
        dev.engine = na_cfg_engine_name(d->engine);
        dev.dram_bytes = (uint64_t)d->dram_mb << 20;
        dev.ssd_bytes = cfg->kv.tier == NA_CFG_TIER_DRAM ? 0 : (uint64_t)d->ssd_mb << 20;
        c.n_threads = (int)(d->threads > 0 ? d->threads : 1);
        st = na_slot_create(&c, &dev, &p->slots[i]);
        if (st != NA_OK)
            goto err_destroy_slots;
        p->n_slots++;
        cap[i] = dev.ssd_bytes ? dev.ssd_bytes : dev.dram_bytes;
    }
    st = na_place_init(&p->place, cfg->parallel.partition == NA_CFG_PARTITION_HEAD ?
                       NA_PART_HEAD : NA_PART_REQUEST, p->n_slots, mc->n_kv_heads, cap);
    if (st != NA_OK)
        goto err_destroy_slots;
    *s_p = &p->base;
    return NA_OK;

err_destroy_slots:
    ip_destroy(&p->base);
    return st;
}

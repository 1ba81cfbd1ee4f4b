/* compute-node/attn_inproc.c — the attention service over device slots in
 * this process (see attn_service.h): the storage node's KV stores and
 * attention engines (storage-node/slot.h) driven directly, without a network.
 *
 * Every device slot of every storage node of the layout becomes one slot
 * here; requests are placed over them by the storage node's placement
 * (request- or head-level partition). A submitted batch starts on the
 * engines' worker threads at once and is reaped by poll, so the compute
 * node's next slice of another batch overlaps with it. One batch is on the
 * engines at a time: a second submit first completes the one running. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

typedef struct {
    na_asvc_t         base;
    int               n_slots;
    na_slot_t       **slots;                 /* [n_slots] */
    na_place_t        place;
    na_inproc_req_t  *reqs;                  /* open requests (list) */
    /* the batch on the engines */
    int               running;               /* batch id, -1 = none */
    na_asvc_entry_t  *run_e;                 /* its entries (caller's) */
    int               run_n;
    na_attn_entry_t  *ae;                    /* [cap_ae] engine entries */
    int              *owner;                 /* [cap_ae] index into run_e */
    int               cap_ae;
    na_attn_batch_t  *eb[NA_PLACE_MAX_SLOTS];
    double            run_t0;
    /* batches completed, not yet returned by poll (FIFO) */
    int               done[NA_INPROC_MAX_BATCH];
    int               n_done;
    na_asvc_stats_t   st;
} na_inproc_t;

static double ip_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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
    double t0 = ip_now();
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
    p->st.prefill_s += ip_now() - t0;
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

/* Wait for the batch on the engines, copy statuses, queue its id. */
static void ip_finish_running(na_inproc_t *p)
{
    int s, j;

    if (p->running < 0)
        return;
    for (s = 0; s < p->n_slots; s++)
        if (p->eb[s] != NULL) {
            (void)na_attn_batch_wait(na_slot_engine(p->slots[s]), p->eb[s]);
            p->eb[s] = NULL;
        }
    for (j = 0; j < p->cap_ae && p->owner[j] >= 0; j++) {
        na_asvc_entry_t *e = &p->run_e[p->owner[j]];
        if (p->ae[j].status != NA_OK && e->status == NA_OK) {
            e->status = p->ae[j].status;
            snprintf(e->reason, sizeof(e->reason), "%s",
                     p->ae[j].reason[0] ? p->ae[j].reason : na_status_string(e->status));
        }
    }
    p->st.attn_s += ip_now() - p->run_t0;
    p->done[p->n_done++] = p->running;
    p->running = -1;
}

static na_status_t ip_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    na_inproc_t *p = (na_inproc_t *)s;
    const int hd = s->mc.head_dim, grp = s->mc.n_heads / s->mc.n_kv_heads;
    int count[NA_PLACE_MAX_SLOTS] = { 0 }, fill[NA_PLACE_MAX_SLOTS];
    na_inproc_req_t **rs;
    int i, j, total = 0, sl;

    if (batch < 0 || batch >= NA_INPROC_MAX_BATCH || batch == p->running)
        return na_err(NA_ERR_INVALID, "inproc: batch %d already in flight or out of range",
                      batch);
    ip_finish_running(p);
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
    if (total + 1 > p->cap_ae) {
        int cap = 2 * (total + 1);
        na_attn_entry_t *ae = realloc(p->ae, (size_t)cap * sizeof(*ae));
        int *ow = ae ? realloc(p->owner, (size_t)cap * sizeof(*ow)) : NULL;
        if (ae != NULL)
            p->ae = ae;
        if (ow == NULL) {
            free(rs);
            return na_err(NA_ERR_NOMEM, "inproc: out of memory for %d entries", total);
        }
        p->owner = ow;
        p->cap_ae = cap;
    }
    for (sl = 0, j = 0; sl < p->n_slots; sl++) {
        fill[sl] = j;
        j += count[sl];
    }
    memset(p->ae, 0, (size_t)(total + 1) * sizeof(*p->ae));
    for (i = 0; i < total + 1; i++)
        p->owner[i] = -1;
    for (i = 0; i < n; i++) {
        if (rs[i] == NULL)
            continue;
        for (j = 0; j < rs[i]->n_parts; j++) {
            const na_place_part_t *pt = &rs[i]->parts[j];
            int x = fill[pt->slot]++;
            na_attn_entry_t *a = &p->ae[x];
            p->owner[x] = i;
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
    p->running = batch;
    p->run_e = e;
    p->run_n = n;
    p->run_t0 = ip_now();
    p->st.decode_entries += (uint64_t)n;
    for (sl = 0, j = 0; sl < p->n_slots; j += count[sl], sl++) {
        na_attn_engine_t *eng = na_slot_engine(p->slots[sl]);
        na_status_t st;
        if (count[sl] == 0)
            continue;
        st = na_attn_batch_begin(eng, &p->eb[sl]);
        if (st != NA_OK) {
            p->eb[sl] = NULL;
        } else {
            st = na_attn_submit(eng, p->eb[sl], &p->ae[j], count[sl]);
            (void)na_attn_batch_close(eng, p->eb[sl]);
        }
        if (st != NA_OK) {
            int x;
            for (x = j; x < j + count[sl]; x++)
                if (p->ae[x].status == NA_OK) {
                    p->ae[x].status = st;
                    snprintf(p->ae[x].reason, sizeof(p->ae[x].reason), "%s", na_errmsg());
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
    if (p->n_done == 0 && p->running >= 0 && timeout_ms != 0)
        ip_finish_running(p);       /* engines have no "test": waiting is the poll */
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
    if (p->running >= 0)
        ip_finish_running(p);       /* its views may still be in use */
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

    ip_finish_running(p);
    while (p->reqs != NULL)
        ip_release(s, p->reqs->id, 0);
    for (i = 0; i < p->n_slots; i++)
        na_slot_destroy(p->slots[i]);
    free(p->slots);
    free(p->ae);
    free(p->owner);
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
    p->running = -1;
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

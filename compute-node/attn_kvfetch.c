/* compute-node/attn_kvfetch.c — the kv-fetch attention service (see
 * compute-node/attn_kvfetch.h): the FlexGen-style baseline the offload modes
 * are compared with. The storage nodes hold the KV exactly as for offload
 * (REQ_OPEN, PREFILL_KV, REQ_RELEASE); a decode entry of layer l at position
 * pos then costs, on the entry's storage node:
 *
 *   KV_FETCH  tokens [0, pos) of layer l      -> KV_DATA 2·pos·kv_dim·elem bytes
 *   PREFILL_KV token pos (k_new, v_new)        -> ACK     (the store stays whole)
 *
 * and here: o = attn_decode(q, K[0..pos], V[0..pos]) with the engine's
 * kernels on a KV row buffer of the storage dtype, the same call and layout
 * monolithic generation makes (compute-node/kv_local.c), so greedy tokens
 * agree.
 *
 * All calls are blocking (compute-node/storage_client.h): submit does the
 * whole batch and queues it as done; poll hands it back. So there is no
 * overlap of fetch and attention (FlexGen overlaps them; here the link is the
 * bound either way, see docs/benchmarks.md). Counters: send_s = time in fetch
 * and append calls (network + the storage node's read), attn_s = local
 * attention time, bytes from the transport's per-endpoint counters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/wire_stats.h"
#include "compute-node/attn_kvfetch.h"
#include "compute-node/storage_client.h"

#define KF_MAX_NODES 64
#define KF_MAX_BATCH 64

typedef struct {
    na_peer_t *sc;
    char     name[NA_XP_NAME_MAX];
    int      alive;
    long     n_open;
    char     why[NA_ASVC_REASON_MAX];
} kf_node_t;

typedef struct {
    na_asvc_req_t  link;            /* id, next (first) */
    int            node;            /* index in nodes[] */
} kf_req_t;

typedef struct {
    na_asvc_t     base;
    const na_cfg_t *cfg;
    na_kernels_t *kern;             /* borrowed */
    na_ses_t     *ses;             /* the storage nodes' connections */
    kf_node_t     nodes[KF_MAX_NODES];
    int           n_nodes;
    na_dtype_t    kv_dtype;         /* storage and wire dtype: F16, BF16 or F32 */
    na_asvc_req_t *reqs;            /* open requests (kf_req_t) */
    int           done[KF_MAX_BATCH];
    int           n_done;
    int           busy[KF_MAX_BATCH];
    /* scratch for one entry: one block, kf first (each entry rewrites it all) */
    size_t        cap;              /* tokens the buffers hold */
    float        *kf, *vf;          /* [cap][kv_dim] fetched rows as f32 */
    void         *kb, *vb;          /* [cap][kv_dim] rows in kv_dtype for attn_decode */
    na_asvc_stats_t st;
} kf_t;

static kf_req_t *kf_find(kf_t *p, uint64_t id)
{
    return (kf_req_t *)na_asvc_req_find(p->reqs, id);
}

/* Mark node j lost with a reason (first reason kept). */
static void kf_node_lost(kf_t *p, int j, const char *why)
{
    kf_node_t *nd = &p->nodes[j];
    char tmp[NA_ASVC_REASON_MAX];
    if (!nd->alive)
        return;
    nd->alive = 0;
    snprintf(tmp, sizeof(tmp), "storage node %.60s lost: %.110s", nd->name, why);
    memcpy(nd->why, tmp, sizeof(tmp));
    na_log_warn("%s", nd->why);
}

/* Grow the scratch to hold n tokens. NA_ERR_NOMEM. */
static na_status_t kf_reserve(kf_t *p, size_t n)
{
    size_t kvd = (size_t)p->base.kv_dim, es = na_dtype_bytes(p->kv_dtype, 1), cap = p->cap;
    float *b;

    if (n <= p->cap)
        return NA_OK;
    while (cap < n)
        cap = cap ? 2 * cap : 256;
    b = malloc(cap * kvd * (2 * sizeof(float) + 2 * es));
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "kv-fetch: out of memory for %zu tokens of KV", cap);
    free(p->kf);
    p->kf = b;
    p->vf = p->kf + cap * kvd;
    p->kb = p->vf + cap * kvd;
    p->vb = (uint8_t *)p->kb + cap * kvd * es;
    p->cap = cap;
    return NA_OK;
}

static na_status_t kf_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    kf_t *p = (kf_t *)s;
    na_wire_req_open_t o;
    kf_req_t *r;
    na_status_t st = NA_ERR_PEER;
    int tried[KF_MAX_NODES] = { 0 }, t, j;

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "kv-fetch: out of memory");
    na_sc_open_msg(&o, req, max_tokens, &s->mc, p->kv_dtype);
    for (t = 0; t < p->n_nodes; t++) {
        int best = -1;
        for (j = 0; j < p->n_nodes; j++)
            if (p->nodes[j].alive && !tried[j] &&
                (best < 0 || p->nodes[j].n_open < p->nodes[best].n_open))
                best = j;
        if (best < 0)
            break;
        tried[best] = 1;
        st = na_sc_open(p->nodes[best].sc, &o, NA_SC_WAIT_MS, NULL);
        if (st == NA_OK) {
            r->link.id = req;
            r->node = best;
            na_asvc_req_push(&p->reqs, &r->link);
            p->nodes[best].n_open++;
            return NA_OK;
        }
        if (st == NA_ERR_PEER)
            kf_node_lost(p, best, na_errmsg());
        else if (st != NA_ERR_NOSPACE)
            break;
    }
    free(r);
    if (st == NA_OK || st == NA_ERR_PEER)
        return na_err(NA_ERR_PEER, "kv-fetch: no storage node is reachable");
    return st;
}

static na_status_t kf_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                              const void *v, na_dtype_t dtype, int n_tok)
{
    kf_t *p = (kf_t *)s;
    kf_req_t *r = na_asvc_req_get(s, p->reqs, req, "prefill");
    na_wire_kv_t kv;
    na_status_t st;

    if (r == NULL)
        return NA_ERR_NOT_FOUND;
    if (!p->nodes[r->node].alive)
        return na_err(NA_ERR_PEER, "%s", p->nodes[r->node].why);
    memset(&kv, 0, sizeof(kv));
    kv.request_id = req;
    kv.layer = (uint32_t)layer;
    kv.pos0 = 0;
    kv.n_tokens = (uint32_t)n_tok;
    kv.kv_h0 = 0;
    kv.kv_h1 = (uint16_t)s->mc.n_kv_heads;
    kv.head_dim = (uint16_t)s->mc.head_dim;
    kv.dtype = dtype;
    kv.k = k;
    kv.v = v;
    st = na_sc_prefill(p->nodes[r->node].sc, &kv, NA_SC_WAIT_MS);
    if (st == NA_ERR_PEER)
        kf_node_lost(p, r->node, na_errmsg());
    return st;
}

static na_status_t kf_prefill_done(na_asvc_t *s, uint64_t req)
{
    (void)s;
    (void)req;
    return NA_OK;       /* each PREFILL_KV was written through before its ACK */
}

/* Fail entry x with st and the current error message (or text). */
static void kf_entry_fail(na_asvc_entry_t *x, na_status_t st, const char *text)
{
    x->status = st;
    snprintf(x->reason, sizeof(x->reason), "%s", text);
}

/* One entry: fetch [0, pos), append pos on the node, attend here. */
static void kf_entry(kf_t *p, int layer, na_asvc_entry_t *x)
{
    const na_model_config_t *mc = &p->base.mc;
    const size_t kvd = (size_t)p->base.kv_dim, es = na_dtype_bytes(p->kv_dtype, 1);
    kf_req_t *r = kf_find(p, x->req);
    kf_node_t *nd;
    na_status_t st;
    double t0;

    if (r == NULL) {
        kf_entry_fail(x, NA_ERR_NOT_FOUND, "kv-fetch: unknown request");
        return;
    }
    nd = &p->nodes[r->node];
    if (!nd->alive) {
        kf_entry_fail(x, NA_ERR_PEER, nd->why);
        return;
    }
    if (kf_reserve(p, (size_t)x->pos + 1) != NA_OK) {
        kf_entry_fail(x, NA_ERR_NOMEM, na_errmsg());
        return;
    }
    t0 = na_now_s();
    if (x->pos > 0) {
        na_wire_kv_fetch_t f;
        memset(&f, 0, sizeof(f));
        f.request_id = x->req;
        f.layer = (uint32_t)layer;
        f.pos0 = 0;
        f.n_tokens = (uint32_t)x->pos;
        f.kv_h0 = 0;
        f.kv_h1 = (uint16_t)mc->n_kv_heads;
        f.dtype = p->kv_dtype;
        st = na_sc_fetch(nd->sc, &f, mc->head_dim, NA_SC_WAIT_MS, p->kf, p->vf, NA_DTYPE_F32);
        if (st != NA_OK)
            goto err_net;
    }
    /* the new row, in the storage dtype, appended here and there */
    na_wire_rows_from_f32(x->k, p->kv_dtype, kvd, (uint8_t *)p->kb + (size_t)x->pos * kvd * es);
    na_wire_rows_from_f32(x->v, p->kv_dtype, kvd, (uint8_t *)p->vb + (size_t)x->pos * kvd * es);
    {
        na_wire_kv_t kv;
        memset(&kv, 0, sizeof(kv));
        kv.request_id = x->req;
        kv.layer = (uint32_t)layer;
        kv.pos0 = (uint32_t)x->pos;
        kv.n_tokens = 1;
        kv.kv_h0 = 0;
        kv.kv_h1 = (uint16_t)mc->n_kv_heads;
        kv.head_dim = (uint16_t)mc->head_dim;
        kv.dtype = p->kv_dtype;
        kv.k = (uint8_t *)p->kb + (size_t)x->pos * kvd * es;
        kv.v = (uint8_t *)p->vb + (size_t)x->pos * kvd * es;
        st = na_sc_prefill(nd->sc, &kv, NA_SC_WAIT_MS);
        if (st != NA_OK)
            goto err_net;
    }
    p->st.send_s += na_now_s() - t0;
    /* fetched rows were stored in kv_dtype on the node: converting back is exact */
    na_wire_rows_from_f32(p->kf, p->kv_dtype, (size_t)x->pos * kvd, p->kb);
    na_wire_rows_from_f32(p->vf, p->kv_dtype, (size_t)x->pos * kvd, p->vb);
    t0 = na_now_s();
    st = na_kernels_attn_decode_host(p->kern, x->o, x->q, p->kb, p->vb, p->kv_dtype,
                                     x->pos + 1, mc->n_heads, mc->n_kv_heads, mc->head_dim);
    p->st.attn_s += na_now_s() - t0;
    if (st != NA_OK)
        kf_entry_fail(x, st, na_errmsg());
    return;

err_net:
    p->st.send_s += na_now_s() - t0;
    if (st == NA_ERR_PEER || st == NA_ERR_TIMEOUT) {
        kf_node_lost(p, r->node, na_errmsg());
        kf_entry_fail(x, NA_ERR_PEER, nd->why);
    } else {
        kf_entry_fail(x, st, na_errmsg());
    }
}

static na_status_t kf_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    kf_t *p = (kf_t *)s;
    int i;

    if (batch < 0 || batch >= KF_MAX_BATCH || p->busy[batch])
        return na_err(NA_ERR_INVALID, "kv-fetch: batch %d already in flight or out of range",
                      batch);
    for (i = 0; i < n; i++) {
        int t, nq = e[i].n_q > 1 ? e[i].n_q : 1;
        e[i].status = NA_OK;
        e[i].reason[0] = '\0';
        /* a prompt chunk: its queries one after another, each over the
         * tokens up to its own (this service is synchronous) */
        for (t = 0; t < nq && e[i].status == NA_OK; t++) {
            na_asvc_entry_t one = e[i];
            one.pos = e[i].pos + t;
            one.n_q = 1;
            one.q = e[i].q + (size_t)t * (size_t)s->q_dim;
            one.k = e[i].k + (size_t)t * (size_t)s->kv_dim;
            one.v = e[i].v + (size_t)t * (size_t)s->kv_dim;
            one.o = e[i].o + (size_t)t * (size_t)s->q_dim;
            kf_entry(p, layer, &one);
            if (one.status != NA_OK) {
                e[i].status = one.status;
                snprintf(e[i].reason, sizeof(e[i].reason), "%s", one.reason);
            }
        }
    }
    p->st.decode_entries += (uint64_t)n;
    p->busy[batch] = 1;
    p->done[p->n_done++] = batch;
    return NA_OK;
}

static void kf_progress(na_asvc_t *s)
{
    kf_t *p = (kf_t *)s;
    int j;
    (void)na_ses_poll(p->ses, 0);
    for (j = 0; j < p->n_nodes; j++)
        if (p->nodes[j].alive && !na_peer_alive(p->nodes[j].sc))
            kf_node_lost(p, j, na_peer_why(p->nodes[j].sc));
}

static na_status_t kf_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    kf_t *p = (kf_t *)s;

    if (p->n_done == 0) {
        /* nothing is ever in flight between calls: serve heartbeats only when
         * the caller is idle anyway (the session's poll; the
         * fetch calls answer heartbeats while they wait) */
        if (timeout_ms > 0)
            kf_progress(s);
        return NA_ERR_TIMEOUT;
    }
    (void)na_asvc_done_pop(p->done, &p->n_done, batch_p);
    p->busy[*batch_p] = 0;
    return NA_OK;
}

static void kf_release(na_asvc_t *s, uint64_t req, int status)
{
    kf_t *p = (kf_t *)s;
    kf_req_t *r = (kf_req_t *)na_asvc_req_unlink(&p->reqs, req);

    (void)status;
    if (r == NULL)
        return;
    p->nodes[r->node].n_open--;
    if (p->nodes[r->node].alive &&
        na_sc_release(p->nodes[r->node].sc, req, 0, NA_SC_WAIT_MS) == NA_ERR_PEER)
        kf_node_lost(p, r->node, na_errmsg());
    free(r);
}

static void kf_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    kf_t *p = (kf_t *)s;
    int j;

    *out = p->st;
    for (j = 0; j < p->n_nodes; j++) {
        na_xp_stats_t xs;
        na_stats_view_t v;
        if (p->nodes[j].sc == NULL)
            continue;
        na_xp_ep_stats(na_peer_ep(p->nodes[j].sc), &xs);
        out->msgs_sent += xs.msgs_sent;
        out->msgs_recv += xs.msgs_recv;
        out->bytes_sent += xs.bytes_sent;
        out->bytes_recv += xs.bytes_recv;
        /* one STATS answer: bytes_read_ssd summed over the node's slots */
        if (p->nodes[j].alive && na_sc_stats(p->nodes[j].sc, 0, NA_SC_WAIT_MS, &v) == NA_OK)
            out->ssd_bytes_read += v.slot_sum[NA_STAT_SLOT_BYTES_READ_SSD];
    }
}

static void kf_destroy(na_asvc_t *s)
{
    kf_t *p = (kf_t *)s;
    int j;

    while (p->reqs != NULL)
        kf_release(s, p->reqs->id, 0);
    for (j = 0; j < p->n_nodes; j++)
        na_peer_close(p->nodes[j].sc, 0, "done");
    na_ses_destroy(p->ses);
    free(p->kf);
    free(p);
}

static const na_asvc_ops_t na_kvfetch_ops = {
    kf_destroy, kf_open, kf_prefill, kf_prefill_done, kf_submit, kf_poll, kf_release, kf_stats,
    kf_progress, NULL,      /* no per-node counters */
    NULL, NULL,             /* no prefix reuse */
};

na_status_t na_asvc_kvfetch_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                   const char *name, na_kernels_t *kern, na_asvc_t **s_p)
{
    na_dtype_t kv_dtype;
    kf_t *p;
    na_status_t st;
    int j, n_alive = 0;

    st = na_asvc_layout_check(cfg, "kv-fetch", KF_MAX_NODES, &kv_dtype);
    if (st != NA_OK)
        return st;
    if (cfg->parallel.partition != NA_CFG_PARTITION_REQUEST)
        return na_err(NA_ERR_UNSUPPORTED, "kv-fetch: only the request partition is supported");
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "kv-fetch: out of memory");
    na_asvc_base_init(&p->base, &na_kvfetch_ops, "kv-fetch", mc);
    p->cfg = cfg;
    p->kern = kern;
    p->kv_dtype = kv_dtype;
    st = na_ses_create_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, "kv-fetch", p, &p->ses);
    if (st != NA_OK) {
        free(p);
        return st;
    }
    p->n_nodes = cfg->n_storage;
    for (j = 0; j < p->n_nodes; j++) {
        const na_cfg_node_t *nd = &cfg->nodes[cfg->n_compute + j];
        kf_node_t *kn = &p->nodes[j];
        snprintf(kn->name, sizeof(kn->name), "%s", nd->name);
        st = na_ses_connect(p->ses, nd->host, (int)nd->port, &kn->sc);
        if (st != NA_OK) {
            snprintf(kn->why, sizeof(kn->why), "storage node %s (%s:%ld) unreachable: %s",
                     nd->name, nd->host, nd->port, na_errmsg());
            na_log_warn("%s", kn->why);
            kn->sc = NULL;
            continue;
        }
        kn->alive = 1;
        n_alive++;
    }
    if (n_alive == 0) {
        kf_destroy(&p->base);
        return na_err(NA_ERR_PEER, "kv-fetch: no storage node of the layout is reachable");
    }
    *s_p = &p->base;
    return NA_OK;
}

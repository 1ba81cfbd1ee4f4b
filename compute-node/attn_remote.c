/* compute-node/attn_remote.c — the attention service over the storage nodes
 * of a layout (see attn_service.h), on the wire protocol of common/wire.h.
 *
 * The storage nodes are peers of one protocol session (rdma/session.h), which
 * receives, answers heartbeats, runs the silence timer and matches every
 * answer to its request. Several batches are in flight at once: each
 * DECODE_ATTN part is a request whose ATTN_OUT (and the ERRORs of its
 * entries) go to compute-node/attn_remote_msg.c, whatever order they come in;
 * prefill parts (sent with MORE and not waited for, but for the last layer's)
 * are requests whose answers are counted per request; open, release and
 * STATS are blocking calls.
 *
 * Placement. Request partition: a request lives on one storage node (the
 * live one with the fewest open requests; the node places it on one of its
 * slots). Head partition: the KV heads are split over the layout's global
 * slots (na_cfg_head_split) and each node gets its slots' heads (contiguous,
 * since slots are numbered node by node); the node splits them over its own
 * slots. A decode batch becomes one DECODE_ATTN per node involved, each with
 * that node's head range of every entry; the batch completes when every
 * node answered or failed.
 *
 * Failures. A node lost (transport event, BYE, silence, a request not
 * answered within 6 x transport.timeout_ms) fails exactly the entries it owes
 * and every later entry of its requests, with a reason naming it; an
 * ATTN_OUT whose shape does not match what was sent fails its entries and
 * drops the node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_remote_internal.h"

#define RM_SPLIT_MIN   16   /* entries for one node at which its message is split */
#define RM_SPLIT_MAX   4    /* messages per node and batch (Lamina §5.2.1 mini-batches) */
#define RM_RETRY_MS    1000 /* a node unreachable at create is retried after this, */
#define RM_RETRY_MAX   32000 /* doubling up to this (a silent host costs a timeout) */

/* Request partition: try again to connect the storage nodes of the layout
 * that were unreachable when the service was created (started later, by hand
 * or by a launcher), after RM_RETRY_MS, doubling per failure up to
 * RM_RETRY_MAX (a refused connect returns at once, but a silent host blocks
 * this call for the transport's timeout). A node that joins takes
 * new requests; a node lost after it was connected is not retried (its
 * requests failed or were re-placed). Never fails. */
static void rm_retry_late(rm_t *p)
{
    uint64_t now = na_xp_now_ns();
    int j;

    for (j = 0; j < p->n_nodes; j++) {
        rm_node_t *rn = &p->nodes[j];
        const na_cfg_node_t *nd = &p->cfg->nodes[p->cfg->n_compute + j];
        if (rn->alive || rn->peer != NULL || now < rn->next_try_ns)
            continue;
        if (rm_node_connect(p, j) != NA_OK) {
            rn->retry_ms = rn->retry_ms * 2 < RM_RETRY_MAX ? rn->retry_ms * 2 : RM_RETRY_MAX;
            rn->next_try_ns = na_xp_now_ns() + (uint64_t)rn->retry_ms * 1000000ull;
            na_log_debug("storage node %s still unreachable: %s", rn->name, na_errmsg());
            continue;
        }
        na_log_info("storage node %s joined (%s:%ld): it takes new requests", rn->name,
                    nd->host, nd->port);
    }
}

static na_status_t rm_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    rm_t *p = (rm_t *)s;
    na_wire_msg_t m;
    rm_req_t *r;
    na_status_t st = NA_ERR_PEER;
    int j, t;

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    r->link.id = req;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_REQ_OPEN;
    m.u.req_open.request_id = req;
    m.u.req_open.max_tokens = (uint32_t)max_tokens;
    m.u.req_open.n_layers = (uint32_t)s->mc.n_layers;
    m.u.req_open.head_dim = (uint16_t)s->mc.head_dim;
    m.u.req_open.q_per_kv = (uint16_t)(s->mc.n_heads / s->mc.n_kv_heads);
    m.u.req_open.dtype = p->kv_dtype;
    if (p->head_part) {
        for (j = 0; j < p->n_nodes; j++) {
            if (p->nodes[j].h1 == p->nodes[j].h0)
                continue;
            m.u.req_open.kv_h0 = (uint16_t)p->nodes[j].h0;
            m.u.req_open.kv_h1 = (uint16_t)p->nodes[j].h1;
            st = rm_call(p, j, &m, NA_WIRE_MSG_ACK, 0, 0, NULL, 0);
            if (st != NA_OK)
                goto err_release;
            r->own[r->n_own++] = j;
            p->nodes[j].n_open++;
        }
    } else {
        m.u.req_open.kv_h1 = (uint16_t)s->mc.n_kv_heads;
        rm_retry_late(p);
        for (t = 0; t < p->n_nodes; t++) {
            int best = -1;
            for (j = 0; j < p->n_nodes; j++) {
                int jj = (p->rr + j) % p->n_nodes;
                if (p->nodes[jj].alive && (best < 0 || p->nodes[jj].n_open < p->nodes[best].n_open))
                    best = jj;
            }
            if (best < 0)
                break;
            st = rm_call(p, best, &m, NA_WIRE_MSG_ACK, 0, 0, NULL, 0);
            if (st == NA_OK) {
                r->own[r->n_own++] = best;
                p->nodes[best].n_open++;
                p->rr = (best + 1) % p->n_nodes;
                break;
            }
            if (st != NA_ERR_NOSPACE)
                break;
            /* full: count it as loaded so the next try picks another node */
            p->nodes[best].n_open += 1L << 20;
        }
        for (j = 0; j < p->n_nodes; j++)
            if (p->nodes[j].n_open >= (1L << 20))
                p->nodes[j].n_open -= 1L << 20;
        if (r->n_own == 0) {
            if (st == NA_OK)
                st = na_err(NA_ERR_PEER, "no storage node is reachable");
            free(r);
            return st;
        }
    }
    na_asvc_req_push(&p->reqs, &r->link);
    return NA_OK;

err_release:
    {
        char why[NA_ASVC_REASON_MAX];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        for (j = 0; j < r->n_own; j++) {
            na_wire_msg_t rel;
            memset(&rel, 0, sizeof(rel));
            rel.type = NA_WIRE_MSG_REQ_RELEASE;
            rel.u.req_release.request_id = req;
            (void)rm_call(p, r->own[j], &rel, NA_WIRE_MSG_ACK, 0, 0, NULL, 0);
            p->nodes[r->own[j]].n_open--;
        }
        free(r);
        return na_err(st, "%s", why);
    }
}

/* Wait until every owner of r answered all PREFILL_KV parts sent so far (or
 * an owner is lost: the session bounds the wait for each answer). Returns r's first
 * failure, NA_OK when every part was accepted. */
static na_status_t rm_prefill_wait(rm_t *p, rm_req_t *r)
{
    int i, owed;

    for (;;) {
        owed = 0;
        for (i = 0; i < r->n_own; i++) {
            rm_node_t *nd = &p->nodes[r->own[i]];
            if (r->pf_pend[i] == 0)
                continue;
            if (!nd->alive) {
                r->pf_pend[i] = 0;
                if (r->pf_st == NA_OK) {
                    r->pf_st = NA_ERR_PEER;
                    rm_copy(r->pf_why, sizeof(r->pf_why), nd->why);
                }
                continue;
            }
            owed++;
        }
        if (owed == 0)
            break;
        (void)na_ses_poll(p->ses, RM_SLICE_MS);
    }
    r->pf_open = 0;
    if (r->pf_st != NA_OK)
        return na_err(r->pf_st, "%s", r->pf_why);
    return NA_OK;
}

/* Ship one layer of the prompt to every owner of req. Every layer but the
 * model's last goes with MORE and is not waited for (the node appends it and
 * ACKs later); the last goes without MORE: the node makes every part durable
 * before it answers, and this call waits for all the answers, so it returns
 * the first failure of any part of this request (a refused layer, an SSD
 * write error, a lost owner). A failure already known fails a later call at
 * once. */
static na_status_t rm_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                              const void *v, na_dtype_t dtype, int n_tok)
{
    rm_t *p = (rm_t *)s;
    rm_req_t *r = rm_find(p, req);
    const int hd = s->mc.head_dim, nkv = s->mc.n_kv_heads;
    const int last = layer == s->mc.n_layers - 1;
    size_t esz = na_dtype_bytes(dtype, 1);
    double t0 = na_now_s();
    na_status_t st = NA_OK;
    int i;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "remote: prefill of unknown request %llu",
                      (unsigned long long)req);
    (void)na_ses_poll(p->ses, 0);   /* answers of earlier parts, if any came */
    if (r->pf_st != NA_OK)
        return rm_prefill_wait(p, r);
    for (i = 0; i < r->n_own && st == NA_OK; i++) {
        int j = r->own[i];
        int h0 = p->head_part ? p->nodes[j].h0 : 0, h1 = p->head_part ? p->nodes[j].h1 : nkv;
        size_t row = (size_t)(h1 - h0) * hd * esz, t;
        uint8_t *pk = NULL;
        na_wire_msg_t m;

        if (!p->nodes[j].alive) {
            st = na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
            break;
        }
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_PREFILL_KV;
        m.flags = last ? 0 : NA_WIRE_F_MORE;
        m.u.kv.request_id = req;
        m.u.kv.layer = (uint32_t)layer;
        m.u.kv.pos0 = 0;
        m.u.kv.n_tokens = (uint32_t)n_tok;
        m.u.kv.kv_h0 = (uint16_t)h0;
        m.u.kv.kv_h1 = (uint16_t)h1;
        m.u.kv.head_dim = (uint16_t)hd;
        m.u.kv.dtype = dtype;
        if (h1 - h0 == nkv) {
            m.u.kv.k = k;
            m.u.kv.v = v;
        } else {            /* this node's heads of every token, packed */
            pk = malloc(2 * row * (size_t)n_tok);
            if (pk == NULL) {
                st = na_err(NA_ERR_NOMEM, "remote: out of memory for a prefill");
                break;
            }
            for (t = 0; t < (size_t)n_tok; t++) {
                size_t src = (t * nkv + h0) * hd * esz;
                memcpy(pk + t * row, (const uint8_t *)k + src, row);
                memcpy(pk + (n_tok + t) * row, (const uint8_t *)v + src, row);
            }
            m.u.kv.k = pk;
            m.u.kv.v = pk + (size_t)n_tok * row;
        }
        st = na_peer_request(p->nodes[j].peer, &m, NULL, NA_WIRE_MSG_ACK, 0, 0,
                             rm_prefill_reply, (uintptr_t)req);
        free(pk);
        if (st != NA_OK) {
            rm_node_lost(p, j, na_errmsg());
            st = na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
            break;
        }
        r->pf_pend[i]++;
        p->st.prefill_bytes += 2 * row * (size_t)n_tok;
    }
    if (st == NA_OK && !last) {
        r->pf_open = 1;
    } else {
        na_status_t wst = rm_prefill_wait(p, r);   /* closing part, or a failure */
        if (st == NA_OK)
            st = wst;
    }
    p->st.prefill_s += na_now_s() - t0;
    return st;
}

/* The prompt is complete. Normally the model's last layer closed it (see
 * rm_prefill); when this service got only some layers (a rotational replica)
 * the parts still open are waited for here: accepted, not yet flushed. */
static na_status_t rm_prefill_done(na_asvc_t *s, uint64_t req)
{
    rm_t *p = (rm_t *)s;
    rm_req_t *r = rm_find(p, req);
    double t0 = na_now_s();
    na_status_t st;

    if (r == NULL)
        return na_err(NA_ERR_NOT_FOUND, "remote: prefill of unknown request %llu",
                      (unsigned long long)req);
    if (!r->pf_open && r->pf_st == NA_OK)
        return NA_OK;
    st = rm_prefill_wait(p, r);
    p->st.prefill_s += na_now_s() - t0;
    return st;
}

static na_status_t rm_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    rm_t *p = (rm_t *)s;
    const int hd = s->mc.head_dim, qpk = s->mc.n_heads / s->mc.n_kv_heads;
    rm_batch_t *b;
    na_wire_attn_entry_t *we;
    double t0 = na_now_s();
    int i, j, k, c, n_chunks;

    if (batch < 0 || batch >= RM_MAX_BATCH || p->b[batch].active)
        return na_err(NA_ERR_INVALID, "remote: batch %d already in flight or out of range",
                      batch);
    b = &p->b[batch];
    we = calloc((size_t)(n > 0 ? n : 1), sizeof(*we));
    if (we == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    for (j = 0; j < p->n_nodes; j++) {
        int *mp = realloc(b->map[j], (size_t)(n > 0 ? n : 1) * sizeof(int));
        if (mp == NULL) {
            free(we);
            return na_err(NA_ERR_NOMEM, "remote: out of memory");
        }
        b->map[j] = mp;
        b->cnt[j] = 0;
        b->owes[j] = 0;
    }
    b->active = 1;
    b->layer = layer;
    b->e = e;
    b->n = n;
    b->pending = 1;         /* held until every message went out */
    b->t0_ns = na_xp_now_ns();
    for (i = 0; i < n; i++) {
        rm_req_t *r = rm_find(p, e[i].req);
        e[i].status = NA_OK;
        e[i].reason[0] = '\0';
        if (r == NULL) {
            rm_entry_fail(&e[i], NA_ERR_NOT_FOUND, "remote: unknown request");
            continue;
        }
        for (k = 0; k < r->n_own; k++) {
            j = r->own[k];
            if (!p->nodes[j].alive)
                rm_entry_fail(&e[i], NA_ERR_PEER, p->nodes[j].why);
        }
        if (e[i].status != NA_OK)
            continue;
        for (k = 0; k < r->n_own; k++) {
            j = r->own[k];
            b->map[j][b->cnt[j]++] = i;
        }
    }
    for (j = 0; j < p->n_nodes; j++) {
        int h0 = p->head_part ? p->nodes[j].h0 : 0;
        int h1 = p->head_part ? p->nodes[j].h1 : s->mc.n_kv_heads;
        na_wire_msg_t m;
        if (b->cnt[j] == 0)
            continue;
        for (k = 0; k < b->cnt[j]; k++) {
            na_asvc_entry_t *x = &e[b->map[j][k]];
            we[k].request_id = x->req;
            we[k].position = (uint32_t)x->pos;
            we[k].kv_h0 = (uint16_t)h0;
            we[k].kv_h1 = (uint16_t)h1;
            we[k].q = x->q + (size_t)h0 * qpk * hd;
            we[k].k = x->k + (size_t)h0 * hd;
            we[k].v = x->v + (size_t)h0 * hd;
        }
        /* one message, or up to RM_SPLIT_MAX mini-batches the node can start on
         * while the next ones are still on the way (Lamina §5.2.1) */
        b->chunk[j] = b->cnt[j] >= RM_SPLIT_MIN ? (b->cnt[j] + RM_SPLIT_MAX - 1) / RM_SPLIT_MAX
                                                : b->cnt[j];
        n_chunks = (b->cnt[j] + b->chunk[j] - 1) / b->chunk[j];
        b->want[j] = (1u << n_chunks) - 1u;
        b->owes[j] = 1;
        b->pending++;
        p->st.node_parts++;
        if (!p->nodes[j].alive) {
            for (k = 0; k < b->cnt[j]; k++)
                rm_entry_fail(&e[b->map[j][k]], NA_ERR_PEER, p->nodes[j].why);
            rm_batch_node_done(p, batch, j);
            continue;
        }
        for (c = 0; c < n_chunks; c++) {
            int base = c * b->chunk[j];
            int cn = b->cnt[j] - base < b->chunk[j] ? b->cnt[j] - base : b->chunk[j];
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_DECODE_ATTN;
            m.flags = c + 1 < n_chunks ? NA_WIRE_F_MORE : 0;
            m.u.attn.batch_id = (uint32_t)batch;
            m.u.attn.layer = (uint32_t)layer;
            m.u.attn.n_entries = (uint32_t)cn;
            m.u.attn.entry_base = (uint32_t)base;
            m.u.attn.batch_total = (uint32_t)b->cnt[j];
            m.u.attn.head_dim = (uint16_t)hd;
            m.u.attn.q_per_kv = (uint16_t)qpk;
            m.u.attn.dtype = NA_DTYPE_F32;
            m.u.attn.scale = 1.0f / sqrtf((float)hd);
            m.u.attn.entries = we + base;
            if (na_peer_request(p->nodes[j].peer, &m, NULL, NA_WIRE_MSG_ATTN_OUT,
                                NA_SES_ERR_NOTE, 0, rm_attn_reply, (uintptr_t)batch) != NA_OK) {
                rm_node_lost(p, j, na_errmsg());    /* fails what it owes, this batch too */
                break;
            }
        }
    }
    free(we);
    p->st.decode_entries += (uint64_t)n;
    p->st.send_s += na_now_s() - t0;
    if (--b->pending == 0) {      /* nothing went out (all failed / empty) */
        b->active = 0;
        p->done[p->n_done++] = batch;
    }
    return NA_OK;
}

static na_status_t rm_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    rm_t *p = (rm_t *)s;
    uint64_t deadline = na_xp_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;

    (void)na_ses_poll(p->ses, 0);
    while (p->n_done == 0 && timeout_ms > 0 && na_xp_now_ns() < deadline)
        (void)na_ses_poll(p->ses, RM_SLICE_MS);
    return na_asvc_done_pop(p->done, &p->n_done, batch_p);
}

static void rm_release(na_asvc_t *s, uint64_t req, int status)
{
    rm_t *p = (rm_t *)s;
    rm_req_t *r = (rm_req_t *)na_asvc_req_unlink(&p->reqs, req);
    int k;

    if (r == NULL)
        return;
    for (k = 0; k < r->n_own; k++) {
        int j = r->own[k];
        p->nodes[j].n_open--;
        if (p->nodes[j].alive) {
            na_wire_msg_t m;
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_REQ_RELEASE;
            m.u.req_release.request_id = req;
            m.u.req_release.status = status;
            /* the ACK is not waited for (the session matches it when it comes) */
            if (na_peer_request(p->nodes[j].peer, &m, NULL, NA_WIRE_MSG_ACK, 0, 0, NULL,
                                0) != NA_OK)
                rm_node_lost(p, j, na_errmsg());
        }
    }
    free(r);
}

static void rm_progress(na_asvc_t *s)
{
    (void)na_ses_poll(((rm_t *)s)->ses, 0);
}

static void rm_destroy(na_asvc_t *s)
{
    rm_t *p = (rm_t *)s;
    int j, bi;

    /* The caller may already have freed the entries of batches still in
     * flight (a run that failed mid-step): forget them, so answers that
     * arrive while we drain are dropped as stray instead of written. */
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        p->b[bi].active = 0;
    while (p->reqs != NULL)
        rm_release(s, p->reqs->id, 0);
    if (p->ses != NULL)
        (void)na_ses_poll(p->ses, 0);
    for (j = 0; j < p->n_nodes; j++)
        na_peer_close(p->nodes[j].peer, 0, "done");
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        for (j = 0; j < RM_MAX_NODES; j++)
            free(p->b[bi].map[j]);
    na_ses_destroy(p->ses);
    free(p);
}

static const na_asvc_ops_t na_remote_ops = {
    rm_destroy, rm_open, rm_prefill, rm_prefill_done, rm_submit, rm_poll, rm_release, rm_stats,
    rm_progress,
};

na_status_t na_asvc_remote_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  const char *name, na_asvc_t **s_p)
{
    na_dtype_t kv_dtype;
    rm_t *p;
    na_status_t st;
    int i, j, n_alive = 0;

    st = na_asvc_layout_check(cfg, "remote", RM_MAX_NODES, &kv_dtype);
    if (st != NA_OK)
        return st;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    na_asvc_base_init(&p->base, &na_remote_ops, "remote", mc);
    p->cfg = cfg;
    p->head_part = cfg->parallel.partition == NA_CFG_PARTITION_HEAD;
    p->kv_dtype = kv_dtype;
    st = na_ses_create_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, "remote", p, &p->ses);
    if (st != NA_OK) {
        free(p);
        return st;
    }
    na_ses_on_end(p->ses, rm_on_end);
    p->n_nodes = cfg->n_storage;
    for (j = 0; j < p->n_nodes; j++) {
        const na_cfg_node_t *nd = &cfg->nodes[cfg->n_compute + j];
        rm_node_t *rn = &p->nodes[j];
        snprintf(rn->name, sizeof(rn->name), "%s", nd->name);
        /* head range: this node's global slots */
        rn->h0 = rn->h1 = -1;
        for (i = 0; i < nd->n_devices; i++) {
            int f, c;
            na_cfg_head_split(mc->n_kv_heads, cfg->n_slots, nd->first_slot + i, &f, &c);
            if (c == 0)
                continue;
            if (rn->h0 < 0)
                rn->h0 = f;
            rn->h1 = f + c;
        }
        if (rn->h0 < 0)
            rn->h0 = rn->h1 = 0;
        st = rm_node_connect(p, j);
        if (st != NA_OK) {
            snprintf(rn->why, sizeof(rn->why), "storage node %s (%s:%ld) unreachable: %s",
                     nd->name, nd->host, nd->port, na_errmsg());
            na_log_warn("%s", rn->why);
            rn->retry_ms = RM_RETRY_MS;
            rn->next_try_ns = na_xp_now_ns() + (uint64_t)RM_RETRY_MS * 1000000ull;
            continue;
        }
        n_alive++;
    }
    if (n_alive == 0 || (p->head_part && n_alive < p->n_nodes)) {
        st = na_err(NA_ERR_PEER, "remote: %s", n_alive == 0 ? "no storage node of the layout "
                    "is reachable" : "head partition needs every storage node, one is "
                    "unreachable");
        rm_destroy(&p->base);
        return st;
    }
    *s_p = &p->base;
    return NA_OK;
}

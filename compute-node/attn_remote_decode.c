/* compute-node/attn_remote_decode.c — the decode round trip of the attention
 * service over storage nodes (compute-node/attn_remote.c): a batch becomes
 * one DECODE_ATTN per node involved (each with that node's head range of
 * every entry, split into mini-batches the node starts on as they arrive,
 * Lamina §5.2.1), each a request of the protocol session (rdma/session.h);
 * the ATTN_OUT answers and the entries' ERRORs, whatever order they come in,
 * fill the entries, and poll hands back the batches every node answered. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_remote_internal.h"

#define RM_SPLIT_MIN   16   /* entries for one node at which its message is split */
#define RM_SPLIT_MAX   4    /* messages per node and batch (Lamina §5.2.1 mini-batches) */

/* Fail entry x with st / text (keeps the first reason). */
void rm_entry_fail(na_asvc_entry_t *x, na_status_t st, const char *text)
{
    if (x->status != NA_OK)
        return;
    x->status = st;
    rm_copy(x->reason, sizeof(x->reason), text);
}

void rm_batch_node_done(rm_t *p, int bi, int j)
{
    rm_batch_t *b = &p->b[bi];
    if (!b->owes[j])
        return;
    b->owes[j] = 0;
    if (p->nodes[j].alive) {            /* answered (a lost node's batch ends too) */
        p->nodes[j].attn_calls++;
        p->nodes[j].attn_rt_ns += na_xp_now_ns() - b->t0_ns;
    }
    if (--b->pending == 0) {
        b->active = 0;
        p->st.attn_s += 1e-9 * (double)(na_xp_now_ns() - b->t0_ns);
        p->done[p->n_done++] = bi;
    }
}

na_status_t rm_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    rm_t *p = (rm_t *)s;
    const int hd = s->mc.head_dim, qpk = s->mc.n_heads / s->mc.n_kv_heads;
    rm_batch_t *b;
    na_wire_attn_entry_t *we;
    double t0 = na_now_s();
    int i, j, k, c, n_chunks, ans_ms = (int)p->cfg->transport.peer_timeout_ms;

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
            we[k].n_queries = x->n_q > 1 ? (uint32_t)x->n_q : 1;
            we[k].q_stride = (size_t)s->q_dim;      /* a prompt chunk's rows */
            we[k].kv_stride = (size_t)s->kv_dim;
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
            long long dl_ms;
            uint32_t mq = 1;
            for (k = base; k < base + cn; k++)
                mq = we[k].n_queries > mq ? we[k].n_queries : mq;
            /* a prompt chunk of mq queries is at most mq decode steps' work
             * at its position: its answer gets mq x the decode deadline */
            dl_ms = (long long)ans_ms * mq;
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
            /* answered within peer_timeout_ms (x mq), like any sign of
             * life: the node answers heartbeats while it computes, so a lost
             * answer (or a batch it forgot) is only seen by this deadline */
            if (na_peer_request(p->nodes[j].peer, &m, NULL, NA_WIRE_MSG_ATTN_OUT,
                                NA_SES_ERR_NOTE, dl_ms < INT_MAX ? (int)dl_ms : INT_MAX,
                                rm_attn_reply,
                                (uintptr_t)batch) != NA_OK) {
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

na_status_t rm_poll(na_asvc_t *s, int timeout_ms, int *batch_p)
{
    rm_t *p = (rm_t *)s;
    uint64_t deadline = na_xp_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;

    (void)na_ses_poll(p->ses, 0);
    while (p->n_done == 0 && timeout_ms > 0 && na_xp_now_ns() < deadline)
        (void)na_ses_poll(p->ses, RM_SLICE_MS);
    return na_asvc_done_pop(p->done, &p->n_done, batch_p);
}

/* ATTN_OUT from node j. */
static void rm_on_attn_out(rm_t *p, int j, const na_wire_attn_out_t *a)
{
    const int hd = p->base.mc.head_dim;
    const int qpk = p->base.mc.n_heads / p->base.mc.n_kv_heads;
    rm_batch_t *b;
    uint32_t k;

    if (a->batch_id >= RM_MAX_BATCH || !p->b[a->batch_id].active ||
        !p->b[a->batch_id].owes[j] || p->b[a->batch_id].layer != (int)a->layer) {
        na_log_debug("storage node %s: stray ATTN_OUT batch %u layer %u", p->nodes[j].name,
                     a->batch_id, a->layer);
        return;
    }
    b = &p->b[a->batch_id];
    if (a->entry_base % (uint32_t)b->chunk[j] != 0 || a->entry_base >= (uint32_t)b->cnt[j] ||
        !(b->want[j] & (1u << (a->entry_base / (uint32_t)b->chunk[j]))) ||
        a->batch_total != (uint32_t)b->cnt[j] ||
        a->n_entries != (uint32_t)(b->cnt[j] - (int)a->entry_base < b->chunk[j] ?
                                   b->cnt[j] - (int)a->entry_base : b->chunk[j]) ||
        a->head_dim != hd || a->q_per_kv != qpk) {
        char why[NA_ASVC_REASON_MAX];
        snprintf(why, sizeof(why), "answered batch %u layer %u with wrong shapes (%u entries "
                 "from %u, head_dim %u, q_per_kv %u)", a->batch_id, a->layer, a->n_entries,
                 a->entry_base, a->head_dim, a->q_per_kv);
        na_peer_end(p->nodes[j].peer, NA_SES_DROPPED, why);
        return;
    }
    /* every entry checked before any is used: a node that answers another
     * request than asked (a wrong or repeated id), other heads, or a status
     * that is no na_status_t (the wire allows -255..0; ours are
     * NA_ERR_VERSION..-1) is dropped at once, and what it owes is re-placed,
     * instead of failing those requests and staying placeable */
    for (k = 0; k < a->n_entries; k++) {
        na_wire_out_entry_t oe;
        na_asvc_entry_t *x = &b->e[b->map[j][a->entry_base + k]];
        int h0 = p->head_part ? p->nodes[j].h0 : 0;
        int h1 = p->head_part ? p->nodes[j].h1 : p->base.mc.n_kv_heads;
        char why[NA_ASVC_REASON_MAX];
        why[0] = '\0';
        if (na_wire_attn_out_get(a, k, &oe) != NA_OK)
            snprintf(why, sizeof(why), "answered batch %u layer %u with an unreadable entry %u",
                     a->batch_id, a->layer, a->entry_base + k);
        else if (oe.request_id != x->req)
            snprintf(why, sizeof(why), "answered batch %u layer %u entry %u with request %llu "
                     "where %llu was asked", a->batch_id, a->layer, a->entry_base + k,
                     (unsigned long long)oe.request_id, (unsigned long long)x->req);
        else if (oe.kv_h0 != h0 || oe.kv_h1 != h1)
            snprintf(why, sizeof(why), "answered batch %u layer %u entry %u with KV heads "
                     "[%u, %u) where [%d, %d) were asked", a->batch_id, a->layer,
                     a->entry_base + k, oe.kv_h0, oe.kv_h1, h0, h1);
        else if (oe.n_queries != (uint32_t)(x->n_q > 1 ? x->n_q : 1))
            snprintf(why, sizeof(why), "answered batch %u layer %u entry %u with %u queries "
                     "where %d were asked", a->batch_id, a->layer, a->entry_base + k,
                     oe.n_queries, x->n_q > 1 ? x->n_q : 1);
        else if (oe.status > 0 || oe.status < (int32_t)NA_ERR_VERSION)
            snprintf(why, sizeof(why), "answered batch %u layer %u entry %u with status %d, "
                     "which is no status", a->batch_id, a->layer, a->entry_base + k,
                     (int)oe.status);
        if (why[0] != '\0') {
            na_peer_end(p->nodes[j].peer, NA_SES_DROPPED, why);
            return;
        }
    }
    for (k = 0; k < a->n_entries; k++) {
        na_wire_out_entry_t oe;
        na_asvc_entry_t *x = &b->e[b->map[j][a->entry_base + k]];
        int h0 = p->head_part ? p->nodes[j].h0 : 0;
        int h1 = p->head_part ? p->nodes[j].h1 : p->base.mc.n_kv_heads;
        (void)na_wire_attn_out_get(a, k, &oe);      /* read fine above */
        if (oe.status != 0) {
            char why[NA_ASVC_REASON_MAX];
            snprintf(why, sizeof(why), "storage node %s: %s", p->nodes[j].name,
                     na_status_string((na_status_t)oe.status));
            rm_entry_fail(x, (na_status_t)oe.status, why);
            continue;
        }
        {
            const size_t cnt = (size_t)(h1 - h0) * qpk * hd, es = na_dtype_bytes(a->dtype, 1);
            uint32_t t;
            for (t = 0; t < oe.n_queries; t++)      /* query t's heads of this node */
                na_wire_rows_to_f32((const uint8_t *)oe.o + t * cnt * es, a->dtype, cnt,
                                    x->o + (size_t)t * p->base.q_dim + (size_t)h0 * qpk * hd);
        }
    }
    b->want[j] &= ~(1u << (a->entry_base / (uint32_t)b->chunk[j]));
    if (b->want[j] == 0)
        rm_batch_node_done(p, (int)a->batch_id, j);
}

/* The answer to one DECODE_ATTN part: its ATTN_OUT, or an ERROR about one
 * entry (a note: the ATTN_OUT still comes), or the node ended (done by
 * rm_on_end). */
void rm_attn_reply(void *ctx, na_peer_t *peer, uintptr_t batch, na_status_t st,
                   const na_ses_in_t *in)
{
    rm_t *p = ctx;
    int j = rm_node_of(p, peer), k;

    if (j < 0 || in == NULL)
        return;
    if (st == NA_OK) {
        rm_on_attn_out(p, j, &in->m->u.attn_out);
    } else if (batch < RM_MAX_BATCH) {
        const na_wire_error_t *er = &in->m->u.error;
        rm_batch_t *b = &p->b[batch];
        char text[NA_WIRE_TEXT_MAX + NA_XP_NAME_MAX + 32];
        snprintf(text, sizeof(text), "storage node %s: %s", p->nodes[j].name, er->text);
        if (b->active && b->owes[j])
            for (k = 0; k < b->cnt[j]; k++)
                if (b->e[b->map[j][k]].req == er->request_id)
                    rm_entry_fail(&b->e[b->map[j][k]], st, text);
    }
}

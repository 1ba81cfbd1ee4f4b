/* compute-node/attn_remote_decode.c — the decode round trip of the attention
 * service over storage nodes (compute-node/attn_remote.c), and what a node
 * that goes down fails: a batch becomes one DECODE_ATTN per node involved
 * (each with that node's head range of every entry, split into mini-batches
 * the node starts on as they arrive, Lamina §5.2.1), each an asynchronous
 * request of the storage client (compute-node/storage_client.h); the
 * ATTN_OUT answers (checked by na_sc_attn_check) and the entries' ERRORs,
 * whatever order they come in, fill the entries, and poll hands back the
 * batches every node answered. The lowest of the three attn_remote layers:
 * it calls only the storage client and the session. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_remote_state.h"
#include "compute-node/storage_client.h"

#define RM_SPLIT_MIN   16   /* entries for one node at which its message is split */
#define RM_SPLIT_MAX   4    /* messages per node and batch (Lamina §5.2.1 mini-batches) */

/* Fail entry x with st / text (keeps the first reason). */
static void rm_entry_fail(na_asvc_entry_t *x, na_status_t st, const char *text)
{
    if (x->status != NA_OK)
        return;
    x->status = st;
    rm_copy(x->reason, sizeof(x->reason), text);
}

/* Node j answered batch bi (or failed it): the batch is done when no node
 * owes it anything. */
static void rm_batch_node_done(rm_t *p, int bi, int j)
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

void rm_node_end(rm_t *p, int j, const char *why, int left)
{
    rm_node_t *nd = &p->nodes[j];
    char tmp[NA_ASVC_REASON_MAX], nm[NA_XP_NAME_MAX];
    int bi, k;

    if (!nd->alive)
        return;
    nd->alive = 0;
    na_pfx_map_forget(p->pmap, j);      /* what it held is gone with it */
    rm_copy(tmp, 120, why);
    rm_copy(nm, sizeof(nm), nd->name);
    snprintf(nd->why, sizeof(nd->why), "storage node %.60s %s: %.110s", nm,
             left ? "left" : "lost", tmp);
    if (left)       /* a clean leave (BYE, e.g. SIGTERM): its requests are re-placed */
        na_log_info("%s; it takes no new requests", nd->why);
    else
        na_log_warn("%s", nd->why);
    for (bi = 0; bi < RM_MAX_BATCH; bi++) {
        rm_batch_t *b = &p->b[bi];
        if (!b->active || !b->owes[j])
            continue;
        for (k = 0; k < b->cnt[j]; k++)
            rm_entry_fail(&b->e[b->map[j][k]], NA_ERR_PEER, nd->why);
        rm_batch_node_done(p, bi, j);
    }
}

void rm_node_lost(rm_t *p, int j, const char *why)
{
    rm_node_end(p, j, why, 0);
}

void rm_batches_forget(rm_t *p)
{
    int bi, j;

    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        p->b[bi].active = 0;
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        for (j = 0; j < RM_MAX_NODES; j++) {
            free(p->b[bi].map[j]);
            free(p->b[bi].we[j]);
            p->b[bi].map[j] = NULL;
            p->b[bi].we[j] = NULL;
            p->b[bi].cap[j] = 0;
        }
}

/* Room for n entries to node j in batch b: grown when a batch is larger
 * than any before it, so the steady state allocates nothing. */
static na_status_t rm_batch_room(rm_batch_t *b, int j, int n)
{
    int cap = b->cap[j];
    int *mp;
    na_wire_attn_entry_t *we;

    if (n <= cap)
        return NA_OK;
    cap = cap * 2 > n ? cap * 2 : (n > 8 ? n : 8);
    mp = realloc(b->map[j], (size_t)cap * sizeof(*mp));
    if (mp == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    b->map[j] = mp;
    we = realloc(b->we[j], (size_t)cap * sizeof(*we));
    if (we == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    b->we[j] = we;
    b->cap[j] = cap;
    return NA_OK;
}

/* Part c of batch bi's DECODE_ATTN to node j (its entries b->we[j]): what
 * is sent, and what its ATTN_OUT is checked against. */
static void rm_part(const rm_t *p, int bi, int j, int c, na_wire_attn_t *a)
{
    const rm_batch_t *b = &p->b[bi];
    const int hd = p->base.mc.head_dim, base = c * b->chunk[j];

    memset(a, 0, sizeof(*a));
    a->batch_id = (uint32_t)bi;
    a->layer = (uint32_t)b->layer;
    a->n_entries = (uint32_t)(b->cnt[j] - base < b->chunk[j] ? b->cnt[j] - base : b->chunk[j]);
    a->entry_base = (uint32_t)base;
    a->batch_total = (uint32_t)b->cnt[j];
    a->head_dim = (uint16_t)hd;
    a->q_per_kv = (uint16_t)(p->base.mc.n_heads / p->base.mc.n_kv_heads);
    a->dtype = NA_DTYPE_F32;
    a->scale = 1.0f / sqrtf((float)hd);
    a->entries = b->we[j] + base;
}

static void rm_attn_reply(void *ctx, na_peer_t *peer, uintptr_t batch, na_status_t st,
                          const na_ses_in_t *in);

na_status_t rm_submit(na_asvc_t *s, int batch, int layer, na_asvc_entry_t *e, int n)
{
    rm_t *p = (rm_t *)s;
    const int hd = s->mc.head_dim, qpk = s->mc.n_heads / s->mc.n_kv_heads;
    rm_batch_t *b;
    double t0 = na_now_s();
    int i, j, k, c, n_chunks, ans_ms = (int)p->cfg->transport.peer_timeout_ms;

    if (batch < 0 || batch >= RM_MAX_BATCH || p->b[batch].active)
        return na_err(NA_ERR_INVALID, "remote: batch %d already in flight or out of range",
                      batch);
    b = &p->b[batch];
    for (j = 0; j < p->n_nodes; j++) {
        if (rm_batch_room(b, j, n) != NA_OK)
            return NA_ERR_NOMEM;
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
        na_wire_attn_entry_t *we = b->we[j];
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
        b->n_chunks[j] = n_chunks;
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
            na_wire_attn_t part;
            long long dl_ms;
            uint32_t mq = 1, e;
            rm_part(p, batch, j, c, &part);
            for (e = 0; e < part.n_entries; e++)
                mq = part.entries[e].n_queries > mq ? part.entries[e].n_queries : mq;
            /* answered within peer_timeout_ms, like any sign of life: the
             * node answers heartbeats while it computes, so a lost answer
             * (or a batch it forgot) is only seen by this deadline; a prompt
             * chunk of mq queries is at most mq decode steps' work at its
             * position, so its answer gets mq x that deadline */
            dl_ms = (long long)ans_ms * mq;
            if (na_sc_decode_send(p->nodes[j].peer, &part, c + 1 < n_chunks,
                                  dl_ms < INT_MAX ? (int)dl_ms : INT_MAX,
                                  rm_attn_reply, (uintptr_t)batch) != NA_OK) {
                rm_node_lost(p, j, na_errmsg());    /* fails what it owes, this batch too */
                break;
            }
        }
    }
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
    while (p->n_done == 0 && timeout_ms > 0) {
        uint64_t now = na_xp_now_ns();
        uint64_t left_ms = now < deadline ? (deadline - now + 999999) / 1000000 : 0;
        if (left_ms == 0)
            break;      /* a slice never runs past the caller's timeout */
        (void)na_ses_poll(p->ses, left_ms < RM_SLICE_MS ? (int)left_ms : RM_SLICE_MS);
    }
    return na_asvc_done_pop(p->done, &p->n_done, batch_p);
}

/* ATTN_OUT from node j. */
static void rm_on_attn_out(rm_t *p, int j, const na_wire_attn_out_t *a)
{
    const int hd = p->base.mc.head_dim;
    const int qpk = p->base.mc.n_heads / p->base.mc.n_kv_heads;
    const int h0 = p->head_part ? p->nodes[j].h0 : 0;
    char why[NA_ASVC_REASON_MAX];
    na_wire_attn_t asked;
    rm_batch_t *b;
    uint32_t k, c;

    if (a->batch_id >= RM_MAX_BATCH || !p->b[a->batch_id].active ||
        !p->b[a->batch_id].owes[j] || p->b[a->batch_id].layer != (int)a->layer) {
        na_log_debug("storage node %s: stray ATTN_OUT batch %u layer %u", p->nodes[j].name,
                     a->batch_id, a->layer);
        return;
    }
    b = &p->b[a->batch_id];
    /* the part it answers: the one starting at its entry_base, still owed;
     * any other (none starts there, or answered already) is checked as the
     * first part, whose entry_base differs, so it fails the check */
    c = a->entry_base / (uint32_t)b->chunk[j];
    rm_part(p, (int)a->batch_id, j,
            c < (uint32_t)b->n_chunks[j] && (b->want[j] >> c & 1u) ? (int)c : 0, &asked);
    if (!(c < (uint32_t)b->n_chunks[j] && (b->want[j] >> c & 1u)))
        asked.entry_base = UINT32_MAX;
    /* every entry checked before any is used: a node that answers other
     * than asked is dropped at once, and what it owes is re-placed, instead
     * of failing those requests and staying placeable */
    if (na_sc_attn_check(&asked, a, why, sizeof(why)) != NA_OK) {
        na_peer_end(p->nodes[j].peer, NA_SES_DROPPED, why);
        return;
    }
    for (k = 0; k < a->n_entries; k++) {
        na_wire_out_entry_t oe;
        na_asvc_entry_t *x = &b->e[b->map[j][a->entry_base + k]];
        (void)na_wire_attn_out_get(a, k, &oe);      /* read fine by the check */
        if (oe.status != 0) {
            snprintf(why, sizeof(why), "storage node %s: %s", p->nodes[j].name,
                     na_status_string((na_status_t)oe.status));
            rm_entry_fail(x, (na_status_t)oe.status, why);
            continue;
        }
        /* query t's heads of this node */
        na_sc_attn_rows(a, k, x->o + (size_t)h0 * qpk * hd, (size_t)p->base.q_dim);
    }
    b->want[j] &= ~(1u << c);
    if (b->want[j] == 0)
        rm_batch_node_done(p, (int)a->batch_id, j);
}

/* The answer to one DECODE_ATTN part: its ATTN_OUT, or an ERROR about one
 * entry (a note: the ATTN_OUT still comes), or the node ended (done by
 * rm_node_end through the session's end handler). */
static void rm_attn_reply(void *ctx, na_peer_t *peer, uintptr_t batch, na_status_t st,
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

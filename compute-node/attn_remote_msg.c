/* compute-node/attn_remote_msg.c — the storage nodes' answers to the
 * attention service over storage nodes (compute-node/attn_remote.c), as
 * handlers of its protocol session (rdma/session.h): ATTN_OUT and the
 * entries' ERRORs matched to the batches in flight, the answers to prefill
 * parts counted per request, lost nodes failing what they owe, STATS
 * counters and pings for the run's time split. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_remote_internal.h"

#define RM_PINGS       5    /* HEARTBEAT round trips per node measured at the end */

/* Copy the string src into dst[cap], cut to fit. */
void rm_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memmove(dst, src, n);
    dst[n] = '\0';
}

rm_req_t *rm_find(rm_t *p, uint64_t id)
{
    return (rm_req_t *)na_asvc_req_find(p->reqs, id);
}

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
    if (--b->pending == 0) {
        b->active = 0;
        p->st.attn_s += 1e-9 * (double)(na_xp_now_ns() - b->t0_ns);
        p->done[p->n_done++] = bi;
    }
}

void rm_node_lost(rm_t *p, int j, const char *why)
{
    rm_node_t *nd = &p->nodes[j];
    char tmp[NA_ASVC_REASON_MAX], nm[NA_XP_NAME_MAX];
    int bi, k;

    if (!nd->alive)
        return;
    nd->alive = 0;
    rm_copy(tmp, 120, why);
    rm_copy(nm, sizeof(nm), nd->name);
    snprintf(nd->why, sizeof(nd->why), "storage node %.60s lost: %.110s", nm, tmp);
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

static int rm_node_of(rm_t *p, na_peer_t *peer)
{
    rm_node_t *nd = na_peer_user(peer);
    return nd != NULL ? (int)(nd - p->nodes) : -1;
}

void rm_on_end(void *ctx, na_peer_t *peer, na_ses_end_t how, const char *why)
{
    rm_t *p = ctx;
    int j = rm_node_of(p, peer);

    (void)how;
    if (j >= 0)
        rm_node_lost(p, j, why);
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
    for (k = 0; k < a->n_entries; k++) {
        na_wire_out_entry_t oe;
        na_asvc_entry_t *x = &b->e[b->map[j][a->entry_base + k]];
        int h0 = p->head_part ? p->nodes[j].h0 : 0;
        int h1 = p->head_part ? p->nodes[j].h1 : p->base.mc.n_kv_heads;
        if (na_wire_attn_out_get(a, k, &oe) != NA_OK || oe.request_id != x->req ||
            oe.kv_h0 != h0 || oe.kv_h1 != h1) {
            rm_entry_fail(x, NA_ERR_PROTO, "storage node answered with a wrong entry shape");
            continue;
        }
        if (oe.status != 0) {
            char why[NA_ASVC_REASON_MAX];
            snprintf(why, sizeof(why), "storage node %s: %s", p->nodes[j].name,
                     na_status_string((na_status_t)oe.status));
            rm_entry_fail(x, (na_status_t)oe.status, why);
            continue;
        }
        na_wire_rows_to_f32(oe.o, a->dtype, (size_t)(h1 - h0) * qpk * hd,
                            x->o + (size_t)h0 * qpk * hd);
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

/* Node j answered a PREFILL_KV of request req (ACK, ERROR, or it ended):
 * counts the answer and keeps the request's first error; an answer for a
 * request no longer open is dropped. */
void rm_prefill_reply(void *ctx, na_peer_t *peer, uintptr_t req, na_status_t st,
                      const na_ses_in_t *in)
{
    rm_t *p = ctx;
    int j = rm_node_of(p, peer), i;
    rm_req_t *r = rm_find(p, (uint64_t)req);
    char text[NA_WIRE_TEXT_MAX + NA_XP_NAME_MAX + 32];

    if (r == NULL || j < 0) {
        na_log_debug("storage node %s: prefill answer for closed request %llu",
                     na_peer_name(peer), (unsigned long long)req);
        return;
    }
    for (i = 0; i < r->n_own; i++)
        if (r->own[i] == j && r->pf_pend[i] > 0) {
            r->pf_pend[i]--;
            break;
        }
    if (st != NA_OK && r->pf_st == NA_OK) {
        r->pf_st = st;
        if (in != NULL)
            snprintf(text, sizeof(text), "storage node %s: %s", p->nodes[j].name,
                     in->m->u.error.text);
        else
            snprintf(text, sizeof(text), "%s", p->nodes[j].why[0] ? p->nodes[j].why
                                                                   : na_errmsg());
        rm_copy(r->pf_why, sizeof(r->pf_why), text);
    }
}

/* Read the counters this service uses from a STATS answer. */
static void rm_counters(const na_wire_stats_t *s, rm_counters_t *c)
{
    uint64_t thr = 1, comp = 0;
    uint32_t k;

    memset(c, 0, sizeof(*c));
    for (k = 0; k < s->n; k++) {
        na_wire_stat_t sv;
        const char *dot;
        if (na_wire_stats_get(s, k, &sv) != NA_OK)
            continue;
        dot = strchr(sv.key, '.');
        if (sv.key[0] == 's' && dot != NULL && !strcmp(dot, ".bytes_read_ssd"))
            c->ssd += sv.value;
        else if (sv.key[0] == 's' && dot != NULL && !strcmp(dot, ".attn_compute_ns"))
            comp += sv.value;
        else if (!strcmp(sv.key, "node.decode_ns"))
            c->dec_ns = sv.value;
        else if (!strcmp(sv.key, "node.attn_threads") && sv.value > 0)
            thr = sv.value;
    }
    c->comp_ns = comp / thr;
}

/* STATS at connect: the base of this service's time split (a node that never
 * answers is only left without a share). */
static void rm_base_reply(void *ctx, na_peer_t *peer, uintptr_t arg, na_status_t st,
                          const na_ses_in_t *in)
{
    rm_node_t *nd = na_peer_user(peer);
    rm_counters_t c;

    (void)ctx;
    (void)arg;
    if (st != NA_OK || nd == NULL)
        return;
    rm_counters(&in->m->u.stats, &c);
    nd->base_ok = 1;
    nd->base_ssd = c.ssd;
    nd->base_dec_ns = c.dec_ns;
    nd->base_comp_ns = c.comp_ns;
}

static void rm_stats_reply(void *ctx, na_peer_t *peer, uintptr_t arg, na_status_t st,
                           const na_ses_in_t *in)
{
    (void)ctx;
    (void)peer;
    if (st == NA_OK)
        rm_counters(&in->m->u.stats, (rm_counters_t *)arg);
}

na_status_t rm_node_connect(rm_t *p, int j)
{
    const na_cfg_node_t *nd = &p->cfg->nodes[p->cfg->n_compute + j];
    rm_node_t *rn = &p->nodes[j];
    na_wire_msg_t m;
    na_status_t st = na_ses_connect(p->ses, nd->host, (int)nd->port, &rn->peer);

    if (st != NA_OK) {
        rn->peer = NULL;
        return st;
    }
    na_peer_set_user(rn->peer, rn);
    rn->alive = 1;
    rn->why[0] = '\0';
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    (void)na_peer_request(rn->peer, &m, NULL, NA_WIRE_MSG_STATS, NA_SES_NO_LOSS,
                          (int)p->cfg->transport.timeout_ms, rm_base_reply, 0);
    return NA_OK;
}

na_status_t rm_call(rm_t *p, int j, na_wire_msg_t *m, na_wire_type_t reply, unsigned flags,
                    int timeout_ms, na_ses_reply_fn fn, uintptr_t arg)
{
    na_status_t st;

    if (!p->nodes[j].alive)
        return na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
    st = na_peer_call(p->nodes[j].peer, m, NULL, reply, flags, timeout_ms, fn, arg);
    if (st != NA_OK && !p->nodes[j].alive)
        return na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
    return st;
}

/* 1 while a batch is waiting for a node. */
static int rm_busy(const rm_t *p)
{
    int bi;
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        if (p->b[bi].active)
            return 1;
    return p->n_done > 0;
}

static int rm_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Counters, plus (when nothing is in flight) each live node's SSD reads
 * (STATS) and the median HEARTBEAT round trip (RM_PINGS pings per node). */
void rm_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    rm_t *p = (rm_t *)s;
    const int wait_ms = (int)p->cfg->transport.timeout_ms;
    double rtt[RM_MAX_NODES * RM_PINGS];
    int j, n_rtt = 0;

    *out = p->st;
    for (j = 0; j < p->n_nodes; j++) {
        rm_node_t *nd = &p->nodes[j];
        na_xp_stats_t xs;
        if (nd->peer == NULL)
            continue;
        na_xp_ep_stats(na_peer_ep(nd->peer), &xs);
        if (nd->alive && !rm_busy(p)) {
            rm_counters_t c;
            na_wire_msg_t m;
            int k;
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_STATS_REQ;
            if (rm_call(p, j, &m, NA_WIRE_MSG_STATS, NA_SES_NO_LOSS, wait_ms, rm_stats_reply,
                        (uintptr_t)&c) == NA_OK) {
                out->ssd_bytes_read += c.ssd - (nd->base_ok ? nd->base_ssd : 0);
                if (nd->base_ok && c.dec_ns >= nd->base_dec_ns) {
                    double dec = 1e-9 * (double)(c.dec_ns - nd->base_dec_ns);
                    double att = 1e-9 * (double)(c.comp_ns - nd->base_comp_ns);
                    if (att > dec)
                        att = dec;      /* slots of one node work in parallel */
                    out->node_s += dec;
                    out->node_attn_s += att;
                    out->node_disk_s += dec - att;
                }
            }
            for (k = 0; k < RM_PINGS && n_rtt < RM_MAX_NODES * RM_PINGS; k++) {
                double t0 = na_now_s();
                memset(&m, 0, sizeof(m));
                m.type = NA_WIRE_MSG_HEARTBEAT;
                m.u.heartbeat.send_ns = na_xp_now_ns();
                if (rm_call(p, j, &m, NA_WIRE_MSG_HEARTBEAT, NA_SES_NO_LOSS, wait_ms, NULL,
                            0) != NA_OK)
                    break;
                rtt[n_rtt++] = na_now_s() - t0;
            }
        }
        out->msgs_sent += xs.msgs_sent;
        out->msgs_recv += xs.msgs_recv;
        out->bytes_sent += xs.bytes_sent;
        out->bytes_recv += xs.bytes_recv;
    }
    if (n_rtt > 0) {
        qsort(rtt, (size_t)n_rtt, sizeof(double), rm_cmp_double);
        out->link_rtt_s = rtt[n_rtt / 2];
    }
}

/* compute-node/attn_remote.c — the attention service over the storage nodes
 * of a layout (see attn_service.h), on the wire protocol of common/wire.h.
 *
 * Connections come from compute-node/storage_client.h (connect, send, close);
 * receiving is done here, in one loop over all storage nodes, because
 * several batches are in flight at once: the loop answers heartbeats, matches
 * ACK / ERROR to the one blocking call that may be waiting (open, release,
 * STATS), counts the answers to each request's prefill parts (sent with MORE
 * and not waited for, but for the last layer's) and matches ATTN_OUT / ERROR
 * to the batches in flight, whatever order they come in.
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
 * Failures. A node lost (transport event, BYE) or silent for longer than a
 * bounded time fails exactly the entries it owes and every later entry of
 * its requests, with a reason naming it; an ATTN_OUT whose shape does not
 * match what was sent fails its entries and drops the node. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_service.h"
#include "compute-node/storage_client.h"
#include "rdma/xp_cfg.h"

#define RM_MAX_NODES   64
#define RM_MAX_BATCH   64
#define RM_SLICE_MS    50
#define RM_PINGS       5    /* HEARTBEAT round trips per node measured at the end */
#define RM_SPLIT_MIN   16   /* entries for one node at which its message is split */
#define RM_SPLIT_MAX   4    /* messages per node and batch (Lamina §5.2.1 mini-batches) */
#define RM_RETRY_MS    1000 /* a node unreachable at create is retried after this, */
#define RM_RETRY_MAX   32000 /* doubling up to this (a silent host costs a timeout) */

typedef struct {
    na_sc_t *sc;
    char     name[NA_XP_NAME_MAX];
    int      alive;
    int      h0, h1;               /* head partition: KV heads held (h1 == h0: none) */
    long     n_open;
    uint64_t last_recv_ns;
    char     why[NA_ASVC_REASON_MAX]; /* why it is dead */
    uint64_t next_try_ns;          /* unreachable at create: next connect attempt */
    unsigned retry_ms;             /* its back-off, doubled per failed attempt */
    int      base_ok;              /* counters below read at connect */
    int      base_pending;         /* their STATS_REQ is out, not answered yet */
    uint64_t base_dec_ns, base_comp_ns, base_ssd;
} rm_node_t;

typedef struct rm_req {
    uint64_t id;
    int      n_own;
    int      own[RM_MAX_NODES];     /* node indexes */
    /* prefill shipping: PREFILL_KV with MORE is not waited for; its ACK or
     * ERROR arrives later and is counted here */
    int      pf_pend[RM_MAX_NODES]; /* answers owed by own[i] */
    int      pf_open;               /* MORE parts sent since the last closing part */
    uint64_t pf_last_ns;            /* last prefill answer (or send): silence timer */
    na_status_t pf_st;              /* first failed part (NA_OK: none) */
    char     pf_why[NA_ASVC_REASON_MAX];
    struct rm_req *next;
} rm_req_t;

/* A batch in flight. */
typedef struct {
    int              active;
    int              layer;
    na_asvc_entry_t *e;
    int              n;
    int              pending;               /* nodes that still owe an ATTN_OUT */
    int              owes[RM_MAX_NODES];    /* 1 while node j owes one */
    int             *map[RM_MAX_NODES];     /* node j's message entry k -> index in e */
    int              cnt[RM_MAX_NODES];
    int              chunk[RM_MAX_NODES];   /* entries per message to node j */
    unsigned         want[RM_MAX_NODES];    /* bit c: ATTN_OUT of chunk c still owed */
    uint64_t         t0_ns;
} rm_batch_t;

typedef struct {
    na_asvc_t   base;
    const na_cfg_t *cfg;
    na_xp_t    *xp;
    rm_node_t   nodes[RM_MAX_NODES];
    int         n_nodes;
    int         head_part;
    na_dtype_t  kv_dtype;
    rm_req_t   *reqs;
    rm_batch_t  b[RM_MAX_BATCH];
    int         done[RM_MAX_BATCH];
    int         n_done;
    int         rr;
    uint64_t    silence_ns;         /* a node owing an answer this long is lost */
    /* the blocking call waiting for an answer */
    int         w_node;             /* -1 = none */
    uint64_t    w_req;
    int         w_about;
    int         w_done;
    uint64_t    w_t0_ns;            /* when the call was sent */
    uint64_t    w_stat;             /* STATS: sum of the slots' SSD bytes read */
    uint64_t    w_dec_ns;           /* STATS: node.decode_ns */
    uint64_t    w_comp_ns;          /* STATS: sum of s<i>.attn_compute_ns / node.attn_threads */
    na_status_t w_st;
    char        w_text[NA_WIRE_TEXT_MAX + 1];
    na_asvc_stats_t st;
} rm_t;

/* Copy the string src into dst[cap], cut to fit. */
static void rm_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memmove(dst, src, n);
    dst[n] = '\0';
}

static rm_req_t *rm_find(rm_t *p, uint64_t id)
{
    rm_req_t *r;
    for (r = p->reqs; r != NULL; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

/* Fail entry i of batch b with st / text (keeps the first reason). */
static void rm_entry_fail(na_asvc_entry_t *x, na_status_t st, const char *text)
{
    if (x->status != NA_OK)
        return;
    x->status = st;
    rm_copy(x->reason, sizeof(x->reason), text);
}

static void rm_batch_node_done(rm_t *p, int bi, int j)
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

/* Node j is gone: fail what it owes, answer a blocking call waiting on it. */
static void rm_node_lost(rm_t *p, int j, const char *why)
{
    rm_node_t *nd = &p->nodes[j];
    char tmp[NA_ASVC_REASON_MAX];
    int bi, k;

    if (!nd->alive)
        return;
    nd->alive = 0;
    char nm[NA_XP_NAME_MAX];
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
    if (p->w_node == j && !p->w_done) {
        p->w_done = 1;
        p->w_st = NA_ERR_PEER;
        rm_copy(p->w_text, sizeof(p->w_text), nd->why);
    }
}

static int rm_node_of(rm_t *p, const na_xp_ep_t *ep)
{
    int j;
    for (j = 0; j < p->n_nodes; j++)
        if (p->nodes[j].sc != NULL && na_sc_ep(p->nodes[j].sc) == ep)
            return j;
    return -1;
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
        rm_node_lost(p, j, why);
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

/* Node j answered a PREFILL_KV of request id: st NA_OK (ACK) or the error
 * with its text. Counts the answer and keeps the request's first error; an
 * answer for a request no longer open is dropped. */
static void rm_on_prefill_answer(rm_t *p, int j, uint64_t id, na_status_t st, const char *text)
{
    rm_req_t *r = rm_find(p, id);
    int i;

    if (r == NULL) {
        na_log_debug("storage node %s: prefill answer for closed request %llu",
                     p->nodes[j].name, (unsigned long long)id);
        return;
    }
    for (i = 0; i < r->n_own; i++)
        if (r->own[i] == j && r->pf_pend[i] > 0) {
            r->pf_pend[i]--;
            break;
        }
    r->pf_last_ns = na_xp_now_ns();
    if (st != NA_OK && r->pf_st == NA_OK) {
        r->pf_st = st;
        rm_copy(r->pf_why, sizeof(r->pf_why), text != NULL ? text : na_status_string(st));
    }
}

/* ERROR from node j: a blocking call's answer, or the reason of an entry. */
static void rm_on_error(rm_t *p, int j, const na_wire_hdr_t *h, const na_wire_error_t *er)
{
    char text[NA_WIRE_TEXT_MAX + NA_XP_NAME_MAX + 32];
    int k;

    snprintf(text, sizeof(text), "storage node %s: %s", p->nodes[j].name, er->text);
    if (er->about_type == NA_WIRE_MSG_PREFILL_KV) {
        rm_on_prefill_answer(p, j, er->request_id,
                             er->status < 0 ? (na_status_t)er->status : NA_ERR_INTERNAL, text);
        return;
    }
    if (er->about_type == NA_WIRE_MSG_DECODE_ATTN) {
        rm_batch_t *b = er->batch_id < RM_MAX_BATCH ? &p->b[er->batch_id] : NULL;
        if (b != NULL && b->active && b->owes[j])
            for (k = 0; k < b->cnt[j]; k++)
                if (b->e[b->map[j][k]].req == er->request_id)
                    rm_entry_fail(&b->e[b->map[j][k]], (na_status_t)er->status, text);
        return;
    }
    (void)h;
    if (p->w_node == j && !p->w_done && (er->request_id == p->w_req || er->request_id == 0)) {
        p->w_done = 1;
        p->w_st = er->status < 0 ? (na_status_t)er->status : NA_ERR_INTERNAL;
        rm_copy(p->w_text, sizeof(p->w_text), text);
        return;
    }
    na_log_warn("%s", text);
}

/* Receive and dispatch for up to timeout_ms (0: what is queued). */
static void rm_pump(rm_t *p, int timeout_ms)
{
    uint64_t now;
    int j, first = 1;

    for (;;) {
        na_xp_msg_t *msg;
        na_wire_hdr_t h;
        na_wire_msg_t m;
        na_status_t st = na_xp_recv(p->xp, first ? timeout_ms : 0, &msg);
        first = 0;
        if (st != NA_OK)
            break;
        j = rm_node_of(p, msg->ep);
        if (j < 0) {
            na_xp_msg_release(p->xp, msg);
            continue;
        }
        if (msg->kind == NA_XP_EV_LOST) {
            char why[120];
            snprintf(why, sizeof(why), "%s", na_status_string(msg->status));
            na_xp_msg_release(p->xp, msg);
            rm_node_lost(p, j, why);
            continue;
        }
        if (msg->kind != NA_XP_MSG_DATA) {
            na_xp_msg_release(p->xp, msg);
            continue;
        }
        p->nodes[j].last_recv_ns = na_xp_now_ns();
        st = na_wire_hdr_decode(msg->hdr, msg->hdr_len, &h);
        if (st == NA_OK)
            st = na_wire_decode(&h, msg->data, msg->len, &m);
        if (st != NA_OK) {
            char why[NA_ASVC_REASON_MAX];
            snprintf(why, sizeof(why), "malformed message: %s", na_errmsg());
            na_xp_msg_release(p->xp, msg);
            rm_node_lost(p, j, why);
            continue;
        }
        switch (m.type) {
        case NA_WIRE_MSG_HEARTBEAT:
            if ((m.flags & NA_WIRE_F_REPLY) && p->w_node == j && !p->w_done &&
                p->w_about == NA_WIRE_MSG_HEARTBEAT) {
                p->w_done = 1;          /* a ping of ours came back */
                p->w_st = NA_OK;
            } else if (!(m.flags & NA_WIRE_F_REPLY)) {
                na_wire_msg_t r;
                memset(&r, 0, sizeof(r));
                r.type = NA_WIRE_MSG_HEARTBEAT;
                r.flags = NA_WIRE_F_REPLY;
                r.u.heartbeat.send_ns = na_xp_now_ns();
                r.u.heartbeat.echo_ns = m.u.heartbeat.send_ns;
                (void)na_sc_send(p->nodes[j].sc, &r);
            }
            break;
        case NA_WIRE_MSG_ACK:
            if (m.u.ack.about_type == NA_WIRE_MSG_PREFILL_KV) {
                rm_on_prefill_answer(p, j, m.u.ack.request_id, NA_OK, NULL);
                break;
            }
            if (p->w_node == j && !p->w_done && m.u.ack.request_id == p->w_req &&
                m.u.ack.about_type == p->w_about) {
                p->w_done = 1;
                p->w_st = NA_OK;
            }
            break;
        case NA_WIRE_MSG_ERROR:
            rm_on_error(p, j, &h, &m.u.error);
            break;
        case NA_WIRE_MSG_ATTN_OUT:
            rm_on_attn_out(p, j, &m.u.attn_out);
            break;
        case NA_WIRE_MSG_STATS:
            if (p->nodes[j].base_pending || (p->w_node == j && !p->w_done &&
                                             p->w_about == NA_WIRE_MSG_STATS_REQ)) {
                uint64_t thr = 1, comp = 0, ssd = 0, dec = 0;
                uint32_t k;
                for (k = 0; k < m.u.stats.n; k++) {
                    na_wire_stat_t sv;
                    const char *dot;
                    if (na_wire_stats_get(&m.u.stats, k, &sv) != NA_OK)
                        continue;
                    dot = strchr(sv.key, '.');
                    if (sv.key[0] == 's' && dot != NULL && !strcmp(dot, ".bytes_read_ssd"))
                        ssd += sv.value;
                    else if (sv.key[0] == 's' && dot != NULL && !strcmp(dot, ".attn_compute_ns"))
                        comp += sv.value;
                    else if (!strcmp(sv.key, "node.decode_ns"))
                        dec = sv.value;
                    else if (!strcmp(sv.key, "node.attn_threads") && sv.value > 0)
                        thr = sv.value;
                }
                if (p->nodes[j].base_pending) {     /* answers come in order: ours first */
                    p->nodes[j].base_pending = 0;
                    p->nodes[j].base_ok = 1;
                    p->nodes[j].base_ssd = ssd;
                    p->nodes[j].base_dec_ns = dec;
                    p->nodes[j].base_comp_ns = comp / thr;
                } else {
                    p->w_stat = ssd;
                    p->w_dec_ns = dec;
                    p->w_comp_ns = comp / thr;
                    p->w_done = 1;
                    p->w_st = NA_OK;
                }
            }
            break;
        case NA_WIRE_MSG_BYE:
            rm_node_lost(p, j, m.u.bye.text[0] ? m.u.bye.text : "said BYE");
            break;
        default:
            na_log_debug("storage node %s: %s ignored", p->nodes[j].name,
                         na_wire_type_name(m.type));
            break;
        }
        na_xp_msg_release(p->xp, msg);
    }
    /* a node that owes an answer for too long is lost (heartbeats do not
     * count: a node that is alive but never answers must not hang us) */
    now = na_xp_now_ns();
    for (j = 0; j < p->n_nodes; j++) {
        uint64_t since = p->w_node == j && !p->w_done ? p->w_t0_ns : now;
        int bi;
        for (bi = 0; bi < RM_MAX_BATCH; bi++)
            if (p->b[bi].active && p->b[bi].owes[j] && p->b[bi].t0_ns < since)
                since = p->b[bi].t0_ns;
        if (p->nodes[j].alive && now > since && now - since > p->silence_ns) {
            char why[96];
            snprintf(why, sizeof(why), "no answer within %llu ms",
                     (unsigned long long)(p->silence_ns / 1000000ull));
            rm_node_lost(p, j, why);
        }
    }
}

/* Send m to node j and wait for its ACK about m (or ERROR / loss). */
static na_status_t rm_call(rm_t *p, int j, na_wire_msg_t *m, uint64_t req)
{
    na_status_t st;

    if (!p->nodes[j].alive)
        return na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
    p->w_node = j;
    p->w_req = req;
    p->w_about = m->type;
    p->w_done = 0;
    p->w_stat = 0;
    p->w_dec_ns = 0;
    p->w_comp_ns = 0;
    p->w_t0_ns = na_xp_now_ns();
    if (m->type == NA_WIRE_MSG_STATS_REQ || m->type == NA_WIRE_MSG_HEARTBEAT)
        /* counters and pings only: wait one timeout_ms */
        p->w_t0_ns -= p->silence_ns - (uint64_t)p->cfg->transport.timeout_ms * 1000000ull;
    st = na_sc_send(p->nodes[j].sc, m);
    if (st != NA_OK) {
        p->w_node = -1;
        rm_node_lost(p, j, na_errmsg());
        return na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
    }
    while (!p->w_done)
        rm_pump(p, RM_SLICE_MS);
    p->w_node = -1;
    if (p->w_st != NA_OK)
        return na_err(p->w_st, "%s", p->w_text);
    return NA_OK;
}

static void rm_node_base(rm_t *p, int j);

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
        if (rn->alive || rn->sc != NULL || now < rn->next_try_ns)
            continue;
        if (na_sc_connect(p->xp, nd->host, (int)nd->port, &rn->sc) != NA_OK) {
            rn->sc = NULL;
            rn->retry_ms = rn->retry_ms * 2 < RM_RETRY_MAX ? rn->retry_ms * 2 : RM_RETRY_MAX;
            rn->next_try_ns = na_xp_now_ns() + (uint64_t)rn->retry_ms * 1000000ull;
            na_log_debug("storage node %s still unreachable: %s", rn->name, na_errmsg());
            continue;
        }
        rn->alive = 1;
        rn->why[0] = '\0';
        rn->last_recv_ns = na_xp_now_ns();
        na_log_info("storage node %s joined (%s:%ld): it takes new requests", rn->name,
                    nd->host, nd->port);
        rm_node_base(p, j);
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
    r->id = req;
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
            st = rm_call(p, j, &m, req);
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
            st = rm_call(p, best, &m, req);
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
    r->next = p->reqs;
    p->reqs = r;
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
            (void)rm_call(p, r->own[j], &rel, req);
            p->nodes[r->own[j]].n_open--;
        }
        free(r);
        return na_err(st, "%s", why);
    }
}

/* Wait until every owner of r answered all PREFILL_KV parts sent so far (or
 * an owner is lost or silent for the silence bound). Returns r's first
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
            if (na_xp_now_ns() - r->pf_last_ns > p->silence_ns) {
                char why[96];
                snprintf(why, sizeof(why), "no answer to a prefill within %llu ms",
                         (unsigned long long)(p->silence_ns / 1000000ull));
                rm_node_lost(p, r->own[i], why);
                i--;            /* look at it again: now lost */
                continue;
            }
            owed++;
        }
        if (owed == 0)
            break;
        rm_pump(p, RM_SLICE_MS);
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
    rm_pump(p, 0);          /* answers of earlier parts, if any came */
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
        st = na_sc_send(p->nodes[j].sc, &m);    /* encoded into a copy, sent */
        free(pk);
        if (st != NA_OK) {
            rm_node_lost(p, j, na_errmsg());
            st = na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
            break;
        }
        if (r->pf_pend[i]++ == 0)
            r->pf_last_ns = na_xp_now_ns();
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
            if (na_sc_send(p->nodes[j].sc, &m) != NA_OK) {
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

    rm_pump(p, 0);
    while (p->n_done == 0 && timeout_ms > 0 && na_xp_now_ns() < deadline)
        rm_pump(p, RM_SLICE_MS);
    if (p->n_done == 0)
        return NA_ERR_TIMEOUT;
    *batch_p = p->done[0];
    memmove(p->done, p->done + 1, (size_t)(p->n_done - 1) * sizeof(int));
    p->n_done--;
    return NA_OK;
}

static void rm_release(na_asvc_t *s, uint64_t req, int status)
{
    rm_t *p = (rm_t *)s;
    rm_req_t **pp, *r;
    int k;

    for (pp = &p->reqs; *pp != NULL && (*pp)->id != req; pp = &(*pp)->next)
        ;
    r = *pp;
    if (r == NULL)
        return;
    *pp = r->next;
    for (k = 0; k < r->n_own; k++) {
        int j = r->own[k];
        p->nodes[j].n_open--;
        if (p->nodes[j].alive) {
            na_wire_msg_t m;
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_REQ_RELEASE;
            m.u.req_release.request_id = req;
            m.u.req_release.status = status;
            /* no wait for the ACK: the node answers in order, a later call sees it */
            if (na_sc_send(p->nodes[j].sc, &m) != NA_OK)
                rm_node_lost(p, j, na_errmsg());
        }
    }
    free(r);
}

/* 1 while a batch or a blocking call is waiting for a node. */
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

/* Ask node j for its STATS counters, the base of this service's time split;
 * the answer is taken by rm_pump whenever it comes (not waited for: a node
 * that never answers STATS is only left without a share). */
static void rm_node_base(rm_t *p, int j)
{
    na_wire_msg_t m;

    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS_REQ;
    if (na_sc_send(p->nodes[j].sc, &m) == NA_OK)
        p->nodes[j].base_pending = 1;
}

/* Counters, plus (when nothing is in flight) each live node's SSD reads
 * (STATS) and the median HEARTBEAT round trip (RM_PINGS pings per node). */
static void rm_stats(na_asvc_t *s, na_asvc_stats_t *out)
{
    rm_t *p = (rm_t *)s;
    double rtt[RM_MAX_NODES * RM_PINGS];
    int j, n_rtt = 0;

    *out = p->st;
    for (j = 0; j < p->n_nodes; j++) {
        na_xp_stats_t xs;
        if (p->nodes[j].sc == NULL)
            continue;
        na_xp_ep_stats(na_sc_ep(p->nodes[j].sc), &xs);
        if (p->nodes[j].alive && !rm_busy(p)) {
            na_wire_msg_t m;
            int k;
            memset(&m, 0, sizeof(m));
            m.type = NA_WIRE_MSG_STATS_REQ;
            if (rm_call(p, j, &m, 0) == NA_OK) {
                rm_node_t *nd = &p->nodes[j];
                out->ssd_bytes_read += p->w_stat - (nd->base_ok ? nd->base_ssd : 0);
                if (nd->base_ok && p->w_dec_ns >= nd->base_dec_ns) {
                    double dec = 1e-9 * (double)(p->w_dec_ns - nd->base_dec_ns);
                    double att = 1e-9 * (double)(p->w_comp_ns - nd->base_comp_ns);
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
                if (rm_call(p, j, &m, 0) != NA_OK)
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

static void rm_progress(na_asvc_t *s)
{
    rm_pump((rm_t *)s, 0);
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
    rm_pump(p, 0);
    for (j = 0; j < p->n_nodes; j++)
        na_sc_close(p->nodes[j].sc);
    for (bi = 0; bi < RM_MAX_BATCH; bi++)
        for (j = 0; j < RM_MAX_NODES; j++)
            free(p->b[bi].map[j]);
    na_xp_destroy(p->xp);
    free(p);
}

static const na_asvc_ops_t na_remote_ops = {
    rm_destroy, rm_open, rm_prefill, rm_prefill_done, rm_submit, rm_poll, rm_release, rm_stats,
    rm_progress,
};

na_status_t na_asvc_remote_create(const na_cfg_t *cfg, const na_model_config_t *mc,
                                  const char *name, na_asvc_t **s_p)
{
    na_xp_opts_t xo;
    rm_t *p;
    na_status_t st;
    int i, j, n_alive = 0;

    if (cfg->n_storage < 1 || cfg->n_storage > RM_MAX_NODES)
        return na_err(NA_ERR_RANGE, "remote: %d storage nodes out of range [1, %d]",
                      cfg->n_storage, RM_MAX_NODES);
    if (cfg->model.kv_dtype != NA_CFG_KV_F16 && cfg->model.kv_dtype != NA_CFG_KV_F32)
        return na_err(NA_ERR_UNSUPPORTED, "remote: kv_dtype must be f16 or f32");
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    p->base.ops = &na_remote_ops;
    p->base.kind = "remote";
    p->base.mc = *mc;
    p->base.q_dim = mc->n_heads * mc->head_dim;
    p->base.kv_dim = mc->n_kv_heads * mc->head_dim;
    p->cfg = cfg;
    p->w_node = -1;
    p->head_part = cfg->parallel.partition == NA_CFG_PARTITION_HEAD;
    p->kv_dtype = cfg->model.kv_dtype == NA_CFG_KV_F32 ? NA_DTYPE_F32 : NA_DTYPE_F16;
    p->silence_ns = (uint64_t)(cfg->transport.timeout_ms * 6) * 1000000ull;
    na_xp_opts_from_cfg(cfg, name, NA_WIRE_ROLE_COMPUTE, (size_t)NA_WIRE_MAX_PAYLOAD, &xo);
    st = na_xp_create(&xo, &p->xp);
    if (st != NA_OK) {
        free(p);
        return st;
    }
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
        st = na_sc_connect(p->xp, nd->host, (int)nd->port, &rn->sc);
        if (st != NA_OK) {
            snprintf(rn->why, sizeof(rn->why), "storage node %s (%s:%ld) unreachable: %s",
                     nd->name, nd->host, nd->port, na_errmsg());
            na_log_warn("%s", rn->why);
            rn->sc = NULL;
            rn->retry_ms = RM_RETRY_MS;
            rn->next_try_ns = na_xp_now_ns() + (uint64_t)RM_RETRY_MS * 1000000ull;
            continue;
        }
        rn->alive = 1;
        rn->last_recv_ns = na_xp_now_ns();
        n_alive++;
        rm_node_base(p, (int)(rn - p->nodes));
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

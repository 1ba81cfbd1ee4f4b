/* storage-node/node_dispatch.c — the storage node's message handlers: one
 * function per message type, each validating the message against the
 * node's state (requests, model shape) before touching a slot. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/wire_stats.h"
#include "storage-node/node_internal.h"

static na_status_t nd_ack(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h, uint64_t req)
{
    (void)n;
    return na_peer_answer(p->sp, h, req, NA_OK, NULL);
}

/* Answer a per-request failure st (message in na_errmsg()) with ERROR;
 * returns the send's status (a failed send drops the peer). */
static na_status_t nd_fail(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                           uint64_t req, na_status_t st)
{
    char text[NA_WIRE_TEXT_MAX + 1];
    snprintf(text, sizeof(text), "%s", na_errmsg()[0] ? na_errmsg() : na_status_string(st));
    return na_node_send_error(n, p, h, req, st, text);
}


/* ---- REQ_OPEN ------------------------------------------------------------- */

static na_status_t nd_open_check(na_node_t *n, const na_wire_req_open_t *o)
{
    const na_slot_common_t *c = &n->common;
    if (o->n_layers != (uint32_t)c->kv.n_layers)
        return na_err(NA_ERR_INVALID, "node %s: request %llu: n_layers %u, the model has %d",
                      n->name, (unsigned long long)o->request_id, o->n_layers, c->kv.n_layers);
    if (o->head_dim != c->kv.head_dim)
        return na_err(NA_ERR_INVALID, "node %s: request %llu: head_dim %u, the model has %d",
                      n->name, (unsigned long long)o->request_id, o->head_dim, c->kv.head_dim);
    if (o->q_per_kv != c->n_heads / c->n_kv_heads)
        return na_err(NA_ERR_INVALID, "node %s: request %llu: q_per_kv %u, the model has %d",
                      n->name, (unsigned long long)o->request_id, o->q_per_kv,
                      c->n_heads / c->n_kv_heads);
    if (o->kv_h0 >= o->kv_h1 || o->kv_h1 > c->n_kv_heads)
        return na_err(NA_ERR_RANGE, "node %s: request %llu: KV heads [%u, %u) outside the "
                      "model's [0, %d)", n->name, (unsigned long long)o->request_id,
                      o->kv_h0, o->kv_h1, c->n_kv_heads);
    return NA_OK;
}

static na_status_t nd_prefix_open(na_node_t *n, na_node_req_t *r, const na_wire_req_open_t *o,
                                  int *hit_p);

/* Keep the REQ_OPEN's prefix tokens in r (until its prefill is done:
 * na_node_prefix_publish) and describe them in *pr. 0 when out of memory (the
 * request goes on without prefix reuse). */
static int nd_prefix_take(na_node_req_t *r, const na_wire_req_open_t *o, na_slotset_prompt_t *pr)
{
    uint32_t i;

    r->pfx_tokens = malloc(sizeof(uint32_t) * o->n_prefix);
    if (r->pfx_tokens == NULL)
        return 0;
    for (i = 0; i < o->n_prefix; i++)
        r->pfx_tokens[i] = na_wire_req_open_token(o, i);
    r->pfx_n = (int)o->n_prefix;
    memcpy(r->pfx_fp, o->model_fp, NA_WIRE_FP_SIZE);
    memset(pr, 0, sizeof(*pr));
    memcpy(pr->fp, r->pfx_fp, NA_KVHASH_FP);
    pr->kv_h0 = r->kv_h0;
    pr->tokens = r->pfx_tokens;
    pr->n_tok = r->pfx_n;
    return 1;
}

static na_status_t nd_open(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                           const na_wire_req_open_t *o)
{
    na_node_req_t *r;
    na_slotset_prompt_t pr;
    na_status_t st;
    int nkvh, hit = 0;

    if (na_node_req_find(n, p->id, o->request_id) != NULL) {
        st = na_err(NA_ERR_BUSY, "node %s: request %llu is already open", n->name,
                    (unsigned long long)o->request_id);
        return nd_fail(n, p, h, o->request_id, st);
    }
    st = nd_open_check(n, o);
    if (st != NA_OK)
        return nd_fail(n, p, h, o->request_id, st);
    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return nd_fail(n, p, h, o->request_id, na_err(NA_ERR_NOMEM, "node: out of memory"));
    nkvh = o->kv_h1 - o->kv_h0;
    r->peer_id = p->id;
    r->wire_id = o->request_id;
    r->max_tokens = o->max_tokens;
    r->n_layers = o->n_layers;
    r->kv_h0 = o->kv_h0;
    r->kv_h1 = o->kv_h1;
    r->n_prompt = o->n_prompt;
    if (o->n_prefix > 0 && nd_prefix_take(r, o, &pr))       /* prefix reuse: near its blocks */
        st = na_slotset_open_near(n->ss, &r->sr, n->next_sid++, (int)o->max_tokens, nkvh, &pr);
    else
        st = na_slotset_open(n->ss, &r->sr, n->next_sid++, (int)o->max_tokens, nkvh);
    if (st != NA_OK) {
        char why[NA_WIRE_TEXT_MAX + 1];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        if (st == NA_ERR_NOSPACE || st == NA_ERR_RANGE)    /* full now / past the budget */
            n->stat[NA_STAT_OPENS_REFUSED]++;
        st = na_err(st, "node %s refused request %llu: %s", n->name,
                    (unsigned long long)o->request_id, why);
        free(r->pfx_tokens);
        free(r);
        return nd_fail(n, p, h, o->request_id, st);
    }
    na_node_req_insert(n, r);
    p->n_requests++;
    if (r->pfx_tokens != NULL) {
        st = nd_prefix_open(n, r, o, &hit);
        if (st != NA_OK) {
            char why[NA_WIRE_TEXT_MAX + 1];
            snprintf(why, sizeof(why), "%s", na_errmsg());
            (void)na_node_req_free(n, r);
            return nd_fail(n, p, h, o->request_id, na_err(st, "%s", why));
        }
    }
    na_log_debug("node %s: %s opened request %llu (%u tokens, heads [%u, %u), %d part(s), "
                 "%d prefix tokens attached)", n->name, p->name,
                 (unsigned long long)o->request_id, o->max_tokens, o->kv_h0, o->kv_h1,
                 r->sr.n_parts, hit);
    if (hit > 0) {
        na_wire_msg_t m;
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_ACK;
        m.u.ack.request_id = o->request_id;
        m.u.ack.about_type = h->type;
        m.u.ack.about_seq = h->seq;
        m.u.ack.prefix_tokens = (uint32_t)hit;
        return na_peer_send(p->sp, &m, NULL);
    }
    return nd_ack(n, p, h, o->request_id);
}

/* The leading blocks of r's prompt (nd_prefix_take) the prefix caches hold,
 * attached now (*hit_p tokens). */
static na_status_t nd_prefix_open(na_node_t *n, na_node_req_t *r, const na_wire_req_open_t *o,
                                  int *hit_p)
{
    na_slotset_prompt_t pr;
    int hit;

    memset(&pr, 0, sizeof(pr));
    memcpy(pr.fp, r->pfx_fp, NA_KVHASH_FP);
    pr.kv_h0 = r->kv_h0;
    pr.tokens = r->pfx_tokens;
    pr.n_tok = r->pfx_n;
    hit = na_slotset_prefix_attach(n->ss, &r->sr, &pr);
    if (hit < 0)
        return na_err_prefix(NA_ERR_INTERNAL, "node %s: request %llu: attaching its prefix: ",
                             n->name, (unsigned long long)o->request_id);
    *hit_p = hit;
    return NA_OK;
}

/* ---- PREFILL_KV ------------------------------------------------------------ */

static na_status_t nd_prefill(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                              const na_wire_kv_t *kv)
{
    na_node_req_t *r = na_node_req_find(n, p->id, kv->request_id);
    const int hd = n->common.kv.head_dim;
    const void *k = kv->k, *v = kv->v;
    float *kf = NULL;
    na_dtype_t src = kv->dtype;
    size_t row;
    na_status_t st = NA_OK;
    int nh;

    if (r == NULL)
        return nd_fail(n, p, h, kv->request_id,
                       na_err(NA_ERR_NOT_FOUND, "node %s: prefill: unknown request %llu",
                              n->name, (unsigned long long)kv->request_id));
    if (kv->layer >= r->n_layers || kv->kv_h0 != r->kv_h0 || kv->kv_h1 != r->kv_h1 ||
        kv->head_dim != hd)
        return nd_fail(n, p, h, kv->request_id,
                       na_err(NA_ERR_INVALID, "node %s: prefill of request %llu: layer %u, "
                              "heads [%u, %u), head_dim %u do not match the request (%u "
                              "layers, heads [%u, %u), head_dim %d)", n->name,
                              (unsigned long long)kv->request_id, kv->layer, kv->kv_h0,
                              kv->kv_h1, kv->head_dim, r->n_layers, r->kv_h0, r->kv_h1, hd));
    {
        int have = na_slotset_tokens(n->ss, &r->sr, (int)kv->layer);
        if (have != (int)kv->pos0 || (uint64_t)kv->pos0 + kv->n_tokens > r->max_tokens)
            return nd_fail(n, p, h, kv->request_id,
                           na_err(NA_ERR_RANGE, "node %s: prefill of request %llu layer %u: "
                                  "tokens [%u, %u) but the layer holds %d of at most %u",
                                  n->name, (unsigned long long)kv->request_id, kv->layer,
                                  kv->pos0, kv->pos0 + kv->n_tokens, have, r->max_tokens));
    }
    nh = r->kv_h1 - r->kv_h0;
    row = (size_t)nh * hd;
    if (src != n->common.kv.kv_dtype || !na_wire_aligned(k, src) || !na_wire_aligned(v, src)) {
        size_t cnt = row * kv->n_tokens;
        kf = malloc(2 * cnt * sizeof(float));
        if (kf == NULL)
            return nd_fail(n, p, h, kv->request_id,
                           na_err(NA_ERR_NOMEM, "node %s: out of memory for a prefill of %u "
                                  "tokens", n->name, kv->n_tokens));
        na_wire_rows_to_f32(kv->k, src, cnt, kf);
        na_wire_rows_to_f32(kv->v, src, cnt, kf + cnt);
        k = kf;
        v = kf + cnt;
        src = NA_DTYPE_F32;
    }
    st = na_slotset_prefill(n->ss, &r->sr, (int)kv->layer, k, v, src, row, (int)kv->n_tokens);
    free(kf);
    /* The slots write prefill KV asynchronously. A PREFILL_KV without MORE
     * is a write-through point: every row of the request sent so far is on
     * its tier (SSD writes completed, header written) before the ACK, and a
     * failed write fails this request now, in this answer. With MORE (more
     * parts of the same prompt follow) the ACK only says "appended"; the
     * last part's ACK covers all of them. compute-node/attn_remote.c sends
     * one PREFILL_KV per layer without MORE and relies on this. */
    if (st == NA_OK && !(h->flags & NA_WIRE_F_MORE))
        st = na_slotset_prefill_done(n->ss, &r->sr);
    if (st != NA_OK)
        return nd_fail(n, p, h, kv->request_id, st);
    if (!(h->flags & NA_WIRE_F_MORE) && kv->layer + 1 == r->n_layers)
        na_node_prefix_publish(n, r);
    n->stat[NA_STAT_PREFILL_TOKENS] += kv->n_tokens;
    return nd_ack(n, p, h, kv->request_id);
}

/* ---- REQ_RELEASE, STATS, HEARTBEAT ---------------------------------------- */

static na_status_t nd_release(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                              const na_wire_req_release_t *rel)
{
    na_node_req_t *r = na_node_req_find(n, p->id, rel->request_id);
    na_status_t st;

    if (r == NULL)
        return nd_fail(n, p, h, rel->request_id,
                       na_err(NA_ERR_NOT_FOUND, "node %s: release: unknown request %llu",
                              n->name, (unsigned long long)rel->request_id));
    st = na_node_req_free(n, r);
    if (st != NA_OK)
        return nd_fail(n, p, h, rel->request_id, st);
    return nd_ack(n, p, h, rel->request_id);
}

static void nd_stat(na_wire_stat_t *v, uint32_t *k, uint32_t cap, const char *key, uint64_t val)
{
    if (*k >= cap)
        return;
    snprintf(v[*k].key, sizeof(v[*k].key), "%s", key);
    v[*k].value = val;
    (*k)++;
}

/* Where a slot's uint64_t counters of a STATS answer live (keys:
 * common/wire_stats.h; the node's own are its stat[] array). */
static const size_t nd_slot_counters[NA_STAT_SLOT_COUNT] = {
    [NA_STAT_SLOT_REQUESTS]          = offsetof(na_slot_stats_t, kv.n_requests),
    [NA_STAT_SLOT_DRAM_USED]         = offsetof(na_slot_stats_t, kv.dram_used),
    [NA_STAT_SLOT_DRAM_BUDGET]       = offsetof(na_slot_stats_t, kv.dram_budget),
    [NA_STAT_SLOT_SSD_USED]          = offsetof(na_slot_stats_t, kv.ssd_used),
    [NA_STAT_SLOT_SSD_SIZE]          = offsetof(na_slot_stats_t, kv.ssd_size),
    [NA_STAT_SLOT_BYTES_APPENDED]    = offsetof(na_slot_stats_t, kv.bytes_appended),
    [NA_STAT_SLOT_BYTES_WRITTEN_SSD] = offsetof(na_slot_stats_t, kv.bytes_written_ssd),
    [NA_STAT_SLOT_BYTES_READ_SSD]    = offsetof(na_slot_stats_t, kv.bytes_read_ssd),
    [NA_STAT_SLOT_SPILLS]            = offsetof(na_slot_stats_t, kv.n_spills),
    [NA_STAT_SLOT_REFUSED]           = offsetof(na_slot_stats_t, kv.n_refused),
    [NA_STAT_SLOT_ATTN_ENTRIES]      = offsetof(na_slot_stats_t, attn.entries),
    [NA_STAT_SLOT_ATTN_FAILED]       = offsetof(na_slot_stats_t, attn.entries_failed),
    [NA_STAT_SLOT_ATTN_TOKENS]       = offsetof(na_slot_stats_t, attn.tokens),
    [NA_STAT_SLOT_PREFETCH_HITS]     = offsetof(na_slot_stats_t, attn.prefetch_hits),
    [NA_STAT_SLOT_ATTN_COMPUTE_NS]   = offsetof(na_slot_stats_t, attn.compute_ns),
    [NA_STAT_SLOT_CSD_NOOP]          = offsetof(na_slot_stats_t, attn.csd_noop),
    [NA_STAT_SLOT_CSD_LAUNCHES]      = offsetof(na_slot_stats_t, attn.csd_launches),
    [NA_STAT_SLOT_CSD_P2P_BYTES]     = offsetof(na_slot_stats_t, attn.csd_p2p_bytes),
};

/* The most threads any slot's engine runs kernels on (see nd_stats). */
static uint64_t nd_kernel_threads(na_node_t *n)
{
    uint64_t most = (uint64_t)n->common.n_threads;
    int s;

    for (s = 0; s < n->n_slots && n->slots[s] != NULL; s++) {
        na_slot_stats_t ss;
        na_slot_stats(n->slots[s], &ss);
        if (ss.attn.kernel_threads > most)
            most = ss.attn.kernel_threads;
    }
    return most;
}

static na_status_t nd_stats(na_node_t *n, na_node_peer_t *p)
{
    na_wire_stat_t v[NA_WIRE_STATS_MAX];
    uint64_t node[NA_STAT_NODE_COUNT];
    na_wire_msg_t m;
    uint32_t k = 0;
    int i, s;

    memset(v, 0, sizeof(v));
    memcpy(node, n->stat, sizeof(node));
    node[NA_STAT_PEERS] = (uint64_t)n->n_peers;
    /* attention kernel time: s<i>.attn_compute_ns is summed over this many
     * threads of a slot (the compute side's time split divides by it): the
     * engine's kernel_threads (cpu: the workers and the loop, which helps
     * while it waits), else its workers */
    node[NA_STAT_ATTN_THREADS] = nd_kernel_threads(n);
    /* what the KV is for: a compute node checks it before placing requests
     * on a node that joins (compute-node/attn_remote.c) */
    node[NA_STAT_N_LAYERS] = (uint64_t)n->common.kv.n_layers;
    node[NA_STAT_N_HEADS] = (uint64_t)n->common.n_heads;
    node[NA_STAT_N_KV_HEADS] = (uint64_t)n->common.n_kv_heads;
    node[NA_STAT_HEAD_DIM] = (uint64_t)n->common.kv.head_dim;
    node[NA_STAT_KV_DTYPE] = (uint64_t)n->common.kv.kv_dtype;
    {
        na_slotset_prefix_stats_t ps;
        na_slotset_prefix_stats(n->ss, &ps);
        node[NA_STAT_PREFIX_HIT_TOKENS] = ps.hit_tokens;
        node[NA_STAT_PREFIX_ASKED_TOKENS] = ps.asked_tokens;
        node[NA_STAT_PREFIX_CACHE_BYTES] = ps.cache.bytes;
        node[NA_STAT_PREFIX_EVICTED] = ps.cache.evicted;
        node[NA_STAT_PREFIX_COLLISIONS] = ps.cache.collisions;
    }
    for (i = 0; i < NA_STAT_NODE_COUNT; i++)
        nd_stat(v, &k, NA_WIRE_STATS_MAX, na_stat_node_key((na_stat_node_t)i), node[i]);
    for (s = 0; s < n->n_slots && n->slots[s] != NULL; s++) {
        na_slot_stats_t ss;
        char key[NA_WIRE_STATS_KEY_MAX];
        na_slot_stats(n->slots[s], &ss);
        for (i = 0; i < NA_STAT_SLOT_COUNT; i++) {
            if (i >= NA_STAT_SLOT_CSD_NOOP && i <= NA_STAT_SLOT_CSD_P2P_BYTES &&
                ss.attn.csd_noop == 0 && ss.attn.csd_launches == 0)
                continue;               /* engine csd keys only for csd slots */
            na_stat_slot_name(key, s, (na_stat_slot_t)i);
            nd_stat(v, &k, NA_WIRE_STATS_MAX, key,
                    *(const uint64_t *)((const char *)&ss + nd_slot_counters[i]));
        }
    }
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS;
    m.u.stats.n = k;
    m.u.stats.pairs = v;
    return na_node_send(p, &m);
}

static na_status_t nd_echo(na_node_peer_t *p, const na_wire_hdr_t *h, const na_wire_echo_t *e)
{
    na_wire_msg_t m;
    if (h->flags & NA_WIRE_F_REPLY)
        return NA_OK;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_ECHO;
    m.flags = NA_WIRE_F_REPLY;
    m.u.echo = *e;
    return na_node_send(p, &m);
}

/* One message of a type the node serves (registered in na_node_handlers). */
static na_status_t nd_on_msg(void *ctx, na_ses_in_t *in)
{
    na_node_t *n = ctx;
    na_node_peer_t *p = na_peer_user(in->peer);
    const na_wire_hdr_t *h = in->h;
    const na_wire_msg_t *m = in->m;
    uint64_t t0 = na_xp_now_ns();
    na_status_t st;

    n->stat[NA_STAT_MSGS]++;
    p->msgs++;
    /* a message that touches requests first ends the peer's decode batches
     * (node_decode.c), so none is touched while an engine holds it */
    st = na_node_decode_before(n, p, m->type);
    if (st != NA_OK)
        return st;
    switch (m->type) {
    case NA_WIRE_MSG_REQ_OPEN:    return nd_open(n, p, h, &m->u.req_open);
    case NA_WIRE_MSG_PREFILL_KV:
        st = nd_prefill(n, p, h, &m->u.kv);
        n->stat[NA_STAT_PREFILL_NS] += na_xp_now_ns() - t0;
        return st;
    case NA_WIRE_MSG_KV_FETCH:
        st = na_node_kv_fetch(n, p, h, &m->u.kv_fetch);
        n->stat[NA_STAT_FETCH_NS] += na_xp_now_ns() - t0;
        return st;
    case NA_WIRE_MSG_REQ_RELEASE: return nd_release(n, p, h, &m->u.req_release);
    case NA_WIRE_MSG_STATS_REQ:   return nd_stats(n, p);
    case NA_WIRE_MSG_ECHO:        return nd_echo(p, h, &m->u.echo);
    default:
        return na_err(NA_ERR_PROTO, "%s sent %s, which a storage node does not serve",
                      p->name, na_wire_type_name(m->type));
    }
}

void na_node_handlers(na_ses_t *ses)
{
    static const na_wire_type_t served[] = {
        NA_WIRE_MSG_REQ_OPEN, NA_WIRE_MSG_PREFILL_KV, NA_WIRE_MSG_KV_FETCH,
        NA_WIRE_MSG_REQ_RELEASE, NA_WIRE_MSG_STATS_REQ, NA_WIRE_MSG_ECHO,
    };
    size_t i;

    for (i = 0; i < sizeof(served) / sizeof(served[0]); i++)
        na_ses_on(ses, served[i], nd_on_msg);
    /* the hot path goes straight to the decode handler (node_decode.c) */
    na_ses_on(ses, NA_WIRE_MSG_DECODE_ATTN, na_node_on_decode);
}

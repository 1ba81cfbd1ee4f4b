/* storage-node/node_dispatch.c — the storage node's message handlers: one
 * function per message type, each validating the message against the
 * node's state (requests, model shape) before touching a slot. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "storage-node/node_internal.h"

#define NA_NODE_MAX_ERRORS_PER_BATCH 16   /* ERROR messages explaining one ATTN_OUT */

static na_status_t nd_ack(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h, uint64_t req)
{
    na_wire_msg_t m;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_ACK;
    m.u.ack.request_id = req;
    m.u.ack.about_type = h->type;
    m.u.ack.about_seq = h->seq;
    return na_node_send(n, p, &m);
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

static size_t nd_esize(na_dtype_t t) { return na_dtype_bytes(t, 1); }

/* ---- REQ_OPEN ------------------------------------------------------------- */

static na_status_t nd_open_check(na_node_t *n, const na_wire_req_open_t *o)
{
    const na_slot_common_t *c = &n->common;
    if (o->n_layers != (uint32_t)c->n_layers)
        return na_err(NA_ERR_INVALID, "node %s: request %llu: n_layers %u, the model has %d",
                      n->name, (unsigned long long)o->request_id, o->n_layers, c->n_layers);
    if (o->head_dim != c->head_dim)
        return na_err(NA_ERR_INVALID, "node %s: request %llu: head_dim %u, the model has %d",
                      n->name, (unsigned long long)o->request_id, o->head_dim, c->head_dim);
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

static na_status_t nd_open(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                           const na_wire_req_open_t *o)
{
    na_node_req_t *r;
    na_status_t st;
    int nkvh, i;

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
    r->sid = n->next_sid++;
    r->max_tokens = o->max_tokens;
    r->n_layers = o->n_layers;
    r->kv_h0 = o->kv_h0;
    r->kv_h1 = o->kv_h1;
    r->bytes_per_kvh = (uint64_t)o->max_tokens * o->n_layers * 2u * o->head_dim *
                       nd_esize(n->common.kv_dtype);
    n->place.n_kv_heads = nkvh;          /* this request's share of the heads */
    st = na_place_request(&n->place, r->bytes_per_kvh, r->parts, &r->n_parts);
    if (st != NA_OK)
        goto err_refused;
    for (i = 0; i < r->n_parts; i++) {
        st = na_slot_open(n->slots[r->parts[i].slot], r->sid, (int)o->max_tokens,
                          r->parts[i].n_kvh);
        if (st != NA_OK)
            goto err_close_parts;
    }
    na_node_req_insert(n, r);
    p->n_requests++;
    na_log_debug("node %s: %s opened request %llu (%u tokens, heads [%u, %u), %d part(s))",
                 n->name, p->name, (unsigned long long)o->request_id, o->max_tokens,
                 o->kv_h0, o->kv_h1, r->n_parts);
    return nd_ack(n, p, h, o->request_id);

err_close_parts:
    while (--i >= 0)
        (void)na_slot_release(n->slots[r->parts[i].slot], r->sid);
    na_place_release(&n->place, r->bytes_per_kvh, r->parts, r->n_parts);
err_refused:
    {
        char why[NA_WIRE_TEXT_MAX + 1];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        if (st == NA_ERR_NOSPACE) {
            uint64_t best = 0, need = r->bytes_per_kvh * (uint64_t)nkvh;
            int k;
            for (k = 0; k < n->place.n_slots; k++) {
                uint64_t free_b = n->place.cap[k] > n->place.load[k]
                                  ? n->place.cap[k] - n->place.load[k] : 0;
                if (free_b > best)
                    best = free_b;
            }
            n->refused_opens++;
            st = na_err(st, "node %s refused request %llu: it needs %.1f MiB of KV "
                        "(%u tokens), the most any slot has free is %.1f MiB (%s)", n->name,
                        (unsigned long long)o->request_id, (double)need / 1048576.0,
                        o->max_tokens, (double)best / 1048576.0, why);
        } else {
            st = na_err(st, "node %s refused request %llu: %s", n->name,
                        (unsigned long long)o->request_id, why);
        }
        free(r);
        return nd_fail(n, p, h, o->request_id, st);
    }
}

/* ---- PREFILL_KV ------------------------------------------------------------ */

static na_status_t nd_prefill(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                              const na_wire_kv_t *kv)
{
    na_node_req_t *r = na_node_req_find(n, p->id, kv->request_id);
    const int hd = n->common.head_dim;
    const void *k = kv->k, *v = kv->v;
    float *kf = NULL;
    na_dtype_t src = kv->dtype;
    size_t row, esz;
    na_status_t st = NA_OK;
    int nh, i;

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
        na_kv_req_t *kr = na_kv_find(na_slot_store(n->slots[r->parts[0].slot]), r->sid);
        int have = kr ? na_kv_req_tokens(kr, (int)kv->layer) : -1;
        if (have != (int)kv->pos0 || (uint64_t)kv->pos0 + kv->n_tokens > r->max_tokens)
            return nd_fail(n, p, h, kv->request_id,
                           na_err(NA_ERR_RANGE, "node %s: prefill of request %llu layer %u: "
                                  "tokens [%u, %u) but the layer holds %d of at most %u",
                                  n->name, (unsigned long long)kv->request_id, kv->layer,
                                  kv->pos0, kv->pos0 + kv->n_tokens, have, r->max_tokens));
    }
    nh = r->kv_h1 - r->kv_h0;
    row = (size_t)nh * hd;
    if (src != n->common.kv_dtype || !na_wire_aligned(k, src) || !na_wire_aligned(v, src)) {
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
    esz = nd_esize(src);
    for (i = 0; i < r->n_parts && st == NA_OK; i++) {
        size_t off = (size_t)r->parts[i].kvh0 * hd * esz;
        st = na_slot_prefill(n->slots[r->parts[i].slot], r->sid, (int)kv->layer,
                             (const uint8_t *)k + off, (const uint8_t *)v + off, src, row,
                             (int)kv->n_tokens);
    }
    free(kf);
    if (st != NA_OK)
        return nd_fail(n, p, h, kv->request_id, st);
    n->prefill_tokens += kv->n_tokens;
    return nd_ack(n, p, h, kv->request_id);
}

/* ---- DECODE_ATTN ------------------------------------------------------------ */

/* Per wire entry of one DECODE_ATTN. */
typedef struct {
    na_wire_attn_entry_t e;
    na_node_req_t *r;
    na_status_t status;
    char reason[200];
    float *q, *k, *v, *o;     /* f32 copies: (nq*hd), (nh*hd), (nh*hd), (nq*hd) */
} nd_entry_t;

/* Validate entry x against its request; NA_OK or a status with x->reason. */
static na_status_t nd_entry_check(na_node_t *n, na_node_peer_t *p, const na_wire_attn_t *a,
                                  nd_entry_t *x)
{
    na_node_req_t *r = na_node_req_find(n, p->id, x->e.request_id);
    na_kv_req_t *kr;
    int have;

    if (r == NULL) {
        snprintf(x->reason, sizeof(x->reason), "node %s: unknown request %llu", n->name,
                 (unsigned long long)x->e.request_id);
        return NA_ERR_NOT_FOUND;
    }
    x->r = r;
    if (a->layer >= r->n_layers || x->e.kv_h0 != r->kv_h0 || x->e.kv_h1 != r->kv_h1) {
        snprintf(x->reason, sizeof(x->reason), "node %s: request %llu: layer %u / heads "
                 "[%u, %u) do not match the request (%u layers, heads [%u, %u))", n->name,
                 (unsigned long long)x->e.request_id, a->layer, x->e.kv_h0, x->e.kv_h1,
                 r->n_layers, r->kv_h0, r->kv_h1);
        return NA_ERR_INVALID;
    }
    kr = na_kv_find(na_slot_store(n->slots[r->parts[0].slot]), r->sid);
    have = kr ? na_kv_req_tokens(kr, (int)a->layer) : -1;
    if (have != (int)x->e.position || x->e.position >= r->max_tokens) {
        snprintf(x->reason, sizeof(x->reason), "node %s: request %llu layer %u: new token at "
                 "position %u but the layer holds %d tokens (max %u)", n->name,
                 (unsigned long long)x->e.request_id, a->layer, x->e.position, have,
                 r->max_tokens);
        return NA_ERR_RANGE;
    }
    return NA_OK;
}

/* Message-level shape check: head_dim, GQA ratio, scale. */
static na_status_t nd_attn_check(na_node_t *n, const na_wire_attn_t *a, char *why, size_t len)
{
    const na_slot_common_t *c = &n->common;
    float want;

    want = 1.0f / sqrtf((float)c->head_dim);
    if (a->head_dim != c->head_dim || a->q_per_kv != c->n_heads / c->n_kv_heads ||
        fabsf(a->scale - want) > 1e-6f * want) {
        snprintf(why, len, "node %s: DECODE_ATTN head_dim %u, q_per_kv %u, scale %g; the "
                 "model has %d, %d, %g", n->name, a->head_dim, a->q_per_kv, (double)a->scale,
                 c->head_dim, c->n_heads / c->n_kv_heads, (double)want);
        return NA_ERR_INVALID;
    }
    return NA_OK;
}

/* Run the valid entries on their slots (all slots in parallel). */
static na_status_t nd_attn_run(na_node_t *n, const na_wire_attn_t *a, nd_entry_t *xs)
{
    const int hd = n->common.head_dim, grp = n->common.n_heads / n->common.n_kv_heads;
    int count[NA_PLACE_MAX_SLOTS] = { 0 }, base[NA_PLACE_MAX_SLOTS], fill[NA_PLACE_MAX_SLOTS];
    na_attn_batch_t *batch[NA_PLACE_MAX_SLOTS] = { NULL };
    na_attn_entry_t *ae;
    int *owner, total = 0, s;
    uint32_t i;
    int j;

    for (i = 0; i < a->n_entries; i++)
        for (j = 0; xs[i].status == NA_OK && j < xs[i].r->n_parts; j++)
            count[xs[i].r->parts[j].slot]++;
    for (s = 0; s < n->n_slots; s++) {
        base[s] = fill[s] = total;
        total += count[s];
    }
    if (total == 0)
        return NA_OK;
    ae = calloc((size_t)total, sizeof(*ae));
    owner = calloc((size_t)total, sizeof(*owner));
    if (ae == NULL || owner == NULL) {
        free(ae);
        free(owner);
        return na_err(NA_ERR_NOMEM, "node %s: out of memory for %d attention entries",
                      n->name, total);
    }
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &xs[i];
        for (j = 0; x->status == NA_OK && j < x->r->n_parts; j++) {
            const na_place_part_t *pt = &x->r->parts[j];
            na_attn_entry_t *e = &ae[fill[pt->slot]];
            owner[fill[pt->slot]++] = (int)i;
            e->req = x->r->sid;
            e->layer = (int)a->layer;
            e->n_kv_heads = pt->n_kvh;
            e->n_q_heads = pt->n_kvh * grp;
            e->q = x->q + (size_t)pt->kvh0 * grp * hd;
            e->k_new = x->k + (size_t)pt->kvh0 * hd;
            e->v_new = x->v + (size_t)pt->kvh0 * hd;
            e->o = x->o + (size_t)pt->kvh0 * grp * hd;
        }
    }
    /* start every slot's batch before waiting for any: the engines run side by side */
    for (s = 0; s < n->n_slots; s++) {
        na_attn_engine_t *eng;
        na_status_t st;
        if (count[s] == 0)
            continue;
        eng = na_slot_engine(n->slots[s]);
        st = na_attn_batch_begin(eng, &batch[s]);
        if (st == NA_OK) {
            st = na_attn_submit(eng, batch[s], &ae[base[s]], count[s]);
            (void)na_attn_batch_close(eng, batch[s]);
        }
        if (st != NA_OK) {
            for (j = base[s]; j < base[s] + count[s]; j++)
                if (ae[j].status == NA_OK) {
                    ae[j].status = st;
                    snprintf(ae[j].reason, sizeof(ae[j].reason), "%s", na_errmsg());
                }
        }
    }
    for (s = 0; s < n->n_slots; s++)
        if (batch[s] != NULL)
            (void)na_attn_batch_wait(na_slot_engine(n->slots[s]), batch[s]);
    for (j = 0; j < total; j++) {
        nd_entry_t *x = &xs[owner[j]];
        if (ae[j].status != NA_OK && x->status == NA_OK) {
            x->status = ae[j].status;
            snprintf(x->reason, sizeof(x->reason), "%s", ae[j].reason[0] ? ae[j].reason
                     : na_status_string(ae[j].status));
        }
    }
    free(owner);
    free(ae);
    return NA_OK;
}

/* Answer: ERROR for (up to 16) failed entries, then ATTN_OUT. */
static na_status_t nd_attn_reply(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                 const na_wire_attn_t *a, nd_entry_t *xs)
{
    const int hd = n->common.head_dim ? n->common.head_dim : a->head_dim;
    na_wire_out_entry_t *oe;
    uint8_t *conv = NULL;
    na_wire_msg_t m;
    na_status_t st = NA_OK;
    uint32_t i, n_err = 0;
    size_t esz = nd_esize(a->dtype), off = 0;

    oe = calloc(a->n_entries, sizeof(*oe));
    if (oe == NULL)
        return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
    if (a->dtype != NA_DTYPE_F32) {
        size_t bytes = 0;
        for (i = 0; i < a->n_entries; i++)
            if (xs[i].status == NA_OK)
                bytes += (size_t)(xs[i].e.kv_h1 - xs[i].e.kv_h0) * a->q_per_kv * hd * esz;
        conv = malloc(bytes ? bytes : 1);
        if (conv == NULL) {
            free(oe);
            return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
        }
    }
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &xs[i];
        oe[i].request_id = x->e.request_id;
        oe[i].kv_h0 = x->e.kv_h0;
        oe[i].kv_h1 = x->e.kv_h1;
        oe[i].status = (int32_t)x->status;
        if (x->status != NA_OK) {
            if (n_err++ < NA_NODE_MAX_ERRORS_PER_BATCH && st == NA_OK)
                st = na_node_send_error(n, p, h, x->e.request_id, x->status, x->reason);
            continue;
        }
        if (conv == NULL) {
            oe[i].o = x->o;
        } else {
            size_t cnt = (size_t)(x->e.kv_h1 - x->e.kv_h0) * a->q_per_kv * hd;
            na_wire_rows_from_f32(x->o, a->dtype, cnt, conv + off);
            oe[i].o = conv + off;
            off += cnt * esz;
        }
    }
    if (n_err > NA_NODE_MAX_ERRORS_PER_BATCH)
        na_log_warn("node %s: %u failed entries in batch %u layer %u (%d explained)", n->name,
                    n_err, a->batch_id, a->layer, NA_NODE_MAX_ERRORS_PER_BATCH);
    if (st == NA_OK) {
        memset(&m, 0, sizeof(m));
        m.type = NA_WIRE_MSG_ATTN_OUT;
        m.flags = h->flags & NA_WIRE_F_MORE;
        m.u.attn_out.batch_id = a->batch_id;
        m.u.attn_out.layer = a->layer;
        m.u.attn_out.n_entries = a->n_entries;
        m.u.attn_out.entry_base = a->entry_base;
        m.u.attn_out.batch_total = a->batch_total;
        m.u.attn_out.head_dim = a->head_dim;
        m.u.attn_out.q_per_kv = a->q_per_kv;
        m.u.attn_out.dtype = a->dtype;
        m.u.attn_out.entries = oe;
        st = na_node_send(n, p, &m);
    }
    free(conv);
    free(oe);
    return st;
}

static na_status_t nd_decode(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                             const na_wire_attn_t *a)
{
    nd_entry_t *xs;
    float *arena = NULL;
    size_t floats = 0, off = 0;
    char why[200];
    na_status_t all, st;
    uint32_t i;

    xs = calloc(a->n_entries, sizeof(*xs));
    if (xs == NULL)
        return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
    all = nd_attn_check(n, a, why, sizeof(why));
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &xs[i];
        (void)na_wire_attn_get(a, i, &x->e);
        if (all != NA_OK) {
            x->status = all;
            snprintf(x->reason, sizeof(x->reason), "%s", why);
            continue;
        }
        x->status = nd_entry_check(n, p, a, x);
        if (x->status == NA_OK) {
            size_t nh = (size_t)(x->e.kv_h1 - x->e.kv_h0);
            floats += nh * a->head_dim * (2u * a->q_per_kv + 2u);
        }
    }
    if (floats > 0) {
        arena = malloc(floats * sizeof(float));
        if (arena == NULL) {
            free(xs);
            return na_err(NA_ERR_NOMEM, "node %s: out of memory for a batch of %u", n->name,
                          a->n_entries);
        }
    }
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &xs[i];
        size_t nh = (size_t)(x->e.kv_h1 - x->e.kv_h0), nq = nh * a->q_per_kv * a->head_dim;
        if (x->status != NA_OK)
            continue;
        x->q = arena + off;
        x->k = x->q + nq;
        x->v = x->k + nh * a->head_dim;
        x->o = x->v + nh * a->head_dim;
        off += 2 * nq + 2 * nh * a->head_dim;
        na_wire_rows_to_f32(x->e.q, a->dtype, nq, x->q);
        na_wire_rows_to_f32(x->e.k, a->dtype, nh * a->head_dim, x->k);
        na_wire_rows_to_f32(x->e.v, a->dtype, nh * a->head_dim, x->v);
    }
    st = nd_attn_run(n, a, xs);
    if (st != NA_OK)
        goto out;
    n->decode_entries += a->n_entries;
    st = nd_attn_reply(n, p, h, a, xs);
out:
    free(arena);
    free(xs);
    return st;
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

static na_status_t nd_stats(na_node_t *n, na_node_peer_t *p)
{
    na_wire_stat_t v[NA_WIRE_STATS_MAX];
    na_wire_msg_t m;
    uint32_t k = 0;
    int s;

    memset(v, 0, sizeof(v));
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.peers", (uint64_t)n->n_peers);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.requests", n->n_requests);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.msgs", n->msgs);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.errors_sent", n->errors_sent);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.peers_dropped", n->dropped);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.peers_lost", n->lost);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.opens_refused", n->refused_opens);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.decode_entries", n->decode_entries);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.prefill_tokens", n->prefill_tokens);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.decode_ns", n->decode_ns);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.prefill_ns", n->prefill_ns);
    nd_stat(v, &k, NA_WIRE_STATS_MAX, "node.fetch_ns", n->fetch_ns);
    for (s = 0; s < n->n_slots && n->slots[s] != NULL; s++) {
        na_slot_stats_t ss;
        char key[NA_WIRE_STATS_KEY_MAX];
#define ND_SLOT_STAT(name, val) do { \
            snprintf(key, sizeof(key), "s%d.%s", s, name); \
            nd_stat(v, &k, NA_WIRE_STATS_MAX, key, (val)); } while (0)
        na_slot_stats(n->slots[s], &ss);
        ND_SLOT_STAT("requests", ss.kv.n_requests);
        ND_SLOT_STAT("dram_used", ss.kv.dram_used);
        ND_SLOT_STAT("dram_budget", ss.kv.dram_budget);
        ND_SLOT_STAT("ssd_used", ss.kv.ssd_used);
        ND_SLOT_STAT("ssd_size", ss.kv.ssd_size);
        ND_SLOT_STAT("bytes_appended", ss.kv.bytes_appended);
        ND_SLOT_STAT("bytes_written_ssd", ss.kv.bytes_written_ssd);
        ND_SLOT_STAT("bytes_read_ssd", ss.kv.bytes_read_ssd);
        ND_SLOT_STAT("spills", ss.kv.n_spills);
        ND_SLOT_STAT("refused", ss.kv.n_refused);
        ND_SLOT_STAT("attn_entries", ss.attn.entries);
        ND_SLOT_STAT("attn_failed", ss.attn.entries_failed);
        ND_SLOT_STAT("attn_tokens", ss.attn.tokens);
        ND_SLOT_STAT("prefetch_hits", ss.attn.prefetch_hits);
#undef ND_SLOT_STAT
    }
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_STATS;
    m.u.stats.n = k;
    m.u.stats.pairs = v;
    return na_node_send(n, p, &m);
}

static na_status_t nd_heartbeat(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                const na_wire_heartbeat_t *hb)
{
    na_wire_msg_t m;
    if (h->flags & NA_WIRE_F_REPLY)
        return NA_OK;                    /* the peer answered ours: arrival time counted */
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_HEARTBEAT;
    m.flags = NA_WIRE_F_REPLY;
    m.u.heartbeat.send_ns = na_xp_now_ns();
    m.u.heartbeat.echo_ns = hb->send_ns;
    return na_node_send(n, p, &m);
}

static na_status_t nd_echo(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                           const na_wire_echo_t *e)
{
    na_wire_msg_t m;
    if (h->flags & NA_WIRE_F_REPLY)
        return NA_OK;
    memset(&m, 0, sizeof(m));
    m.type = NA_WIRE_MSG_ECHO;
    m.flags = NA_WIRE_F_REPLY;
    m.u.echo = *e;
    return na_node_send(n, p, &m);
}

na_status_t na_node_dispatch(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                             const na_wire_msg_t *m)
{
    uint64_t t0 = na_xp_now_ns();
    na_status_t st;

    switch (m->type) {
    case NA_WIRE_MSG_REQ_OPEN:    return nd_open(n, p, h, &m->u.req_open);
    case NA_WIRE_MSG_PREFILL_KV:
        st = nd_prefill(n, p, h, &m->u.kv);
        n->prefill_ns += na_xp_now_ns() - t0;
        return st;
    case NA_WIRE_MSG_DECODE_ATTN:
        st = nd_decode(n, p, h, &m->u.attn);
        n->decode_ns += na_xp_now_ns() - t0;
        return st;
    case NA_WIRE_MSG_KV_FETCH:
        st = na_node_kv_fetch(n, p, h, &m->u.kv_fetch);
        n->fetch_ns += na_xp_now_ns() - t0;
        return st;
    case NA_WIRE_MSG_REQ_RELEASE: return nd_release(n, p, h, &m->u.req_release);
    case NA_WIRE_MSG_STATS_REQ:   return nd_stats(n, p);
    case NA_WIRE_MSG_HEARTBEAT:   return nd_heartbeat(n, p, h, &m->u.heartbeat);
    case NA_WIRE_MSG_ECHO:        return nd_echo(n, p, h, &m->u.echo);
    case NA_WIRE_MSG_BYE:
        na_log_info("node %s: %s says BYE (%s)", n->name, p->name, m->u.bye.text);
        return NA_ERR_CANCELED;
    case NA_WIRE_MSG_ERROR:
        na_log_warn("node %s: %s reports: %s", n->name, p->name, m->u.error.text);
        return NA_OK;
    default:
        return na_err(NA_ERR_PROTO, "%s sent %s, which a storage node does not serve",
                      p->name, na_wire_type_name(m->type));
    }
}

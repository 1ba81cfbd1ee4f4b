/* storage-node/node_decode.c — DECODE_ATTN: decode attention for a batch of
 * request slots, with communication–attention overlap (Lamina §5.2.1).
 *
 * A compute node may split one batch over several DECODE_ATTN messages
 * (entries [entry_base, entry_base + n_entries) of batch_total, flag MORE on
 * all but the last). Each part is validated, converted to f32 and submitted
 * to the slot set (storage-node/slotset.h: fan-out to the slots' engines)
 * the moment it arrives — the engines' workers start on it while the loop
 * goes back to receive the next part. One slot-set batch spans all parts;
 * the last part (no MORE) closes it (which starts the layer-ahead prefetch)
 * and the batch computes while the loop keeps serving messages. The loop's
 * hook na_node_decode_reap answers a batch once the engines' test says it
 * completed: one ATTN_OUT per part (plus ERROR lines for failed entries), in
 * part order and in each peer's batch order, as the compute side
 * (compute-node/attn_remote.c) expects.
 *
 * Batches belong to their peer (na_node_peer_t.decode_open while parts
 * arrive, then decode_run while computing). A message of that peer that
 * touches requests — a release, a prefill, a fetch, an open, BYE — first
 * ends them (waiting, answering); heartbeats, stats and further batches do
 * not wait. A peer that goes away has them waited for and dropped, so no
 * request is released while an engine still holds a view of it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "storage-node/node_internal.h"

#define NA_NODE_MAX_ERRORS_PER_BATCH 16   /* ERROR messages explaining one ATTN_OUT */

/* Per wire entry of one DECODE_ATTN. */
typedef struct {
    na_wire_attn_entry_t e;
    na_node_req_t *r;
    na_status_t status;
    char reason[200];
    float *q, *k, *v, *o;     /* f32 copies, n_queries rows each: (nq*hd), (nh*hd),
                                 (nh*hd), (nq*hd) per query */
} nd_entry_t;

/* Validate entry x against its request; NA_OK or a status with x->reason. */
static na_status_t nd_entry_check(na_node_t *n, na_node_peer_t *p, const na_wire_attn_t *a,
                                  nd_entry_t *x)
{
    na_node_req_t *r = na_node_req_find(n, p->id, x->e.request_id);
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
    have = na_slotset_tokens(n->ss, &r->sr, (int)a->layer);
    if (have != (int)x->e.position ||
        (uint64_t)x->e.position + x->e.n_queries > r->max_tokens) {
        snprintf(x->reason, sizeof(x->reason), "node %s: request %llu layer %u: %u new "
                 "token(s) at position %u but the layer holds %d tokens (max %u)", n->name,
                 (unsigned long long)x->e.request_id, a->layer, x->e.n_queries,
                 x->e.position, have, r->max_tokens);
        return NA_ERR_RANGE;
    }
    return NA_OK;
}

/* Message-level shape check: head_dim, GQA ratio, scale. */
static na_status_t nd_attn_check(na_node_t *n, const na_wire_attn_t *a, char *why, size_t len)
{
    const na_slot_common_t *c = &n->common;
    float want;

    want = 1.0f / sqrtf((float)c->kv.head_dim);
    if (a->head_dim != c->kv.head_dim || a->q_per_kv != c->n_heads / c->n_kv_heads ||
        fabsf(a->scale - want) > 1e-6f * want) {
        snprintf(why, len, "node %s: DECODE_ATTN head_dim %u, q_per_kv %u, scale %g; the "
                 "model has %d, %d, %g", n->name, a->head_dim, a->q_per_kv, (double)a->scale,
                 c->kv.head_dim, c->n_heads / c->n_kv_heads, (double)want);
        return NA_ERR_INVALID;
    }
    return NA_OK;
}

/* Grow *buf to at least want bytes (kept, reused: steady decode allocates
 * nothing once the buffers have their size); 0, or -1 out of memory. */
static int nd_grow(void **buf, size_t *cap, size_t want)
{
    void *nb;

    if (want <= *cap)
        return 0;
    if (want < 2 * *cap)
        want = 2 * *cap;
    nb = realloc(*buf, want);
    if (nb == NULL)
        return -1;
    *buf = nb;
    *cap = want;
    return 0;
}

/* Answer: ERROR for (up to 16) failed entries, then ATTN_OUT. The entries
 * and converted rows are the node's reply scratch (reused). */
static na_status_t nd_attn_reply(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                 const na_wire_attn_t *a, nd_entry_t *xs)
{
    const int hd = n->common.kv.head_dim ? n->common.kv.head_dim : a->head_dim;
    na_wire_out_entry_t *oe;
    uint8_t *conv = NULL;
    na_wire_msg_t m;
    na_status_t st = NA_OK;
    uint32_t i, n_err = 0;
    size_t esz = na_dtype_bytes(a->dtype, 1), off = 0;

    if (nd_grow((void **)&n->reply_oe, &n->reply_oe_cap,
                (size_t)(a->n_entries ? a->n_entries : 1) * sizeof(*oe)) != 0)
        return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
    oe = n->reply_oe;
    memset(oe, 0, (size_t)a->n_entries * sizeof(*oe));
    if (a->dtype != NA_DTYPE_F32) {
        size_t bytes = 0;
        for (i = 0; i < a->n_entries; i++)
            if (xs[i].status == NA_OK)
                bytes += (size_t)xs[i].e.n_queries * (xs[i].e.kv_h1 - xs[i].e.kv_h0) *
                         a->q_per_kv * hd * esz;
        if (nd_grow((void **)&n->reply_conv, &n->reply_conv_cap, bytes ? bytes : 1) != 0)
            return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
        conv = n->reply_conv;
    }
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &xs[i];
        oe[i].request_id = x->e.request_id;
        oe[i].kv_h0 = x->e.kv_h0;
        oe[i].kv_h1 = x->e.kv_h1;
        oe[i].n_queries = x->e.n_queries;
        oe[i].status = (int32_t)x->status;
        if (x->status != NA_OK) {
            if (n_err++ < NA_NODE_MAX_ERRORS_PER_BATCH && st == NA_OK)
                st = na_node_send_error(n, p, h, x->e.request_id, x->status, x->reason);
            continue;
        }
        if (conv == NULL) {
            oe[i].o = x->o;
        } else {
            size_t cnt = (size_t)x->e.n_queries * (x->e.kv_h1 - x->e.kv_h0) * a->q_per_kv * hd;
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
        st = na_node_send(p, &m);   /* encodes a copy: oe and conv are free again */
    }
    return st;
}

/* One received part of a batch: its entries, their f32 copies and the
 * whole-request engine entries they became. */
typedef struct nd_part {
    na_wire_hdr_t    h;           /* header of the part's message (for replies) */
    na_wire_attn_t   a;           /* the message's fields; a.entries is stale */
    nd_entry_t      *xs;          /* (a.n_entries); the block ae, rq and owner lie in too
                                     (nd_part_get) */
    float           *arena;       /* f32 q/k/v/o of the valid entries */
    na_attn_entry_t *ae;          /* (total) engine entries of the valid ones */
    const na_slotset_req_t **rq;  /* (total) their requests' parts */
    int             *owner;       /* (total) index into xs of each ae */
    int              total;
    size_t           cap, arena_cap;   /* entries the block holds, arena bytes (reused) */
    struct nd_part  *next;        /* in its batch, or on the node's free list */
} nd_part_t;

/* A batch: parts arriving (decode_open), then computing (decode_run). */
struct nd_open {
    uint32_t            batch_id, layer, batch_total, got;
    na_slotset_batch_t *sb;       /* the slot set's batch (all parts) */
    nd_part_t          *head, *tail;
    struct nd_open     *next;     /* decode_run queue, or the node's free list */
};

static void nd_part_destroy(nd_part_t *pt)
{
    if (pt == NULL)
        return;
    free(pt->arena);
    free(pt->xs);
    free(pt);
}

/* n bytes rounded up to whole cache lines. */
static size_t nd_line(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Part pt is answered: back onto the node's free list, arrays kept. */
static void nd_part_put(na_node_t *n, nd_part_t *pt)
{
    if (pt == NULL)
        return;
    pt->next = n->part_free;
    n->part_free = pt;
}

/* A part from the free list (or a new one) whose arrays hold n_entries
 * entries: xs, and ae, rq and owner for as many valid ones, in one block
 * (each array on a cache line); NULL out of memory. Its xs are zeroed, the
 * rest is stale. */
static nd_part_t *nd_part_get(na_node_t *n, uint32_t n_entries)
{
    nd_part_t *pt = n->part_free;
    size_t want = n_entries ? n_entries : 1;

    if (pt != NULL)
        n->part_free = pt->next;
    else if ((pt = calloc(1, sizeof(*pt))) == NULL)
        return NULL;
    if (want > pt->cap) {
        const size_t o_ae = nd_line(want * sizeof(*pt->xs));
        const size_t o_rq = o_ae + nd_line(want * sizeof(*pt->ae));
        const size_t o_owner = o_rq + nd_line(want * sizeof(*pt->rq));
        void *nb;
        char *b;
        if (posix_memalign(&nb, 64, o_owner + nd_line(want * sizeof(*pt->owner))) != 0) {
            nd_part_put(n, pt);
            return NULL;
        }
        b = nb;
        free(pt->xs);                 /* the arrays are rebuilt for each part: no copy */
        pt->xs = (nd_entry_t *)(void *)b;
        pt->ae = (na_attn_entry_t *)(void *)(b + o_ae);
        pt->rq = (const na_slotset_req_t **)(void *)(b + o_rq);
        pt->owner = (int *)(void *)(b + o_owner);
        pt->cap = want;
    }
    memset(pt->xs, 0, want * sizeof(*pt->xs));
    pt->total = 0;
    pt->next = NULL;
    return pt;
}

/* Grow pt's arena to floats and zero the ae of its total valid entries;
 * 0, or -1 out of memory. */
static int nd_part_size(nd_part_t *pt, size_t floats, size_t total)
{
    if (nd_grow((void **)&pt->arena, &pt->arena_cap, floats * sizeof(float)) != 0)
        return -1;
    if (total > 0)
        memset(pt->ae, 0, total * sizeof(*pt->ae));
    return 0;
}

void na_node_decode_destroy(na_node_t *n)
{
    nd_part_t *pt;
    struct nd_open *o;

    while ((pt = n->part_free) != NULL) {
        n->part_free = pt->next;
        nd_part_destroy(pt);
    }
    while ((o = n->open_free) != NULL) {
        n->open_free = o->next;
        free(o);
    }
    free(n->reply_oe);
    free(n->reply_conv);
    n->reply_oe = NULL;
    n->reply_conv = NULL;
    n->reply_oe_cap = n->reply_conv_cap = 0;
}

/* Validate a part's entries and convert the valid ones to f32. Owns nothing
 * of a; fails only for lack of memory (NULL, message in na_errmsg()). */
static nd_part_t *nd_part_build(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                                const na_wire_attn_t *a)
{
    nd_part_t *pt = nd_part_get(n, a->n_entries);
    size_t floats = 0, off = 0;
    char why[200];
    na_status_t all;
    uint32_t i;

    if (pt == NULL)
        goto err_nomem;
    pt->h = *h;
    pt->a = *a;
    pt->a.entries = NULL;
    all = nd_attn_check(n, a, why, sizeof(why));
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &pt->xs[i];
        (void)na_wire_attn_get(a, i, &x->e);
        if (all != NA_OK) {
            x->status = all;
            snprintf(x->reason, sizeof(x->reason), "%s", why);
            continue;
        }
        x->status = nd_entry_check(n, p, a, x);
        if (x->status == NA_OK) {
            size_t nh = (size_t)(x->e.kv_h1 - x->e.kv_h0);
            floats += (size_t)x->e.n_queries * nh * a->head_dim * (2u * a->q_per_kv + 2u);
            pt->total++;
        }
    }
    if (nd_part_size(pt, floats, (size_t)pt->total) != 0)
        goto err_nomem;
    pt->total = 0;
    for (i = 0; i < a->n_entries; i++) {
        nd_entry_t *x = &pt->xs[i];
        size_t nt = x->e.n_queries, nh = (size_t)(x->e.kv_h1 - x->e.kv_h0);
        size_t nq = nt * nh * a->q_per_kv * a->head_dim, nk = nt * nh * a->head_dim;
        na_attn_entry_t *e;
        if (x->status != NA_OK)
            continue;
        x->q = pt->arena + off;
        x->k = x->q + nq;
        x->v = x->k + nk;
        x->o = x->v + nk;
        off += 2 * nq + 2 * nk;
        na_wire_rows_to_f32(x->e.q, a->dtype, nq, x->q);
        na_wire_rows_to_f32(x->e.k, a->dtype, nk, x->k);
        na_wire_rows_to_f32(x->e.v, a->dtype, nk, x->v);
        x->e.q = x->e.k = x->e.v = NULL;          /* the message goes away */
        e = &pt->ae[pt->total];
        e->layer = (int)a->layer;
        e->n_kv_heads = (int)nh;
        e->n_q_heads = (int)(nh * a->q_per_kv);
        e->q = x->q;
        e->k_new = x->k;
        e->v_new = x->v;
        e->o = x->o;
        e->n_q = (int)nt;                         /* > 1: a prompt chunk (slot set) */
        /* STATS node.prefill_tokens (as PREFILL_KV): a prompt chunk, also a
         * last chunk of one token, which only the prompt the request offered
         * (its prefix section) tells from a decode step */
        if (nt > 1 || (x->r->pfx_tokens != NULL && x->e.position < (uint32_t)x->r->pfx_n))
            n->stat[NA_STAT_PREFILL_TOKENS] += nt;
        pt->rq[pt->total] = &x->r->sr;
        pt->owner[pt->total++] = (int)i;
    }
    return pt;

err_nomem:
    nd_part_put(n, pt);
    (void)na_err(NA_ERR_NOMEM, "node %s: out of memory for a batch of %u", n->name,
                 a->n_entries);
    return NULL;
}

/* Entry failures the engines reported, onto the wire entries of pt. */
static void nd_part_collect(nd_part_t *pt)
{
    int j;
    for (j = 0; j < pt->total; j++) {
        nd_entry_t *x = &pt->xs[pt->owner[j]];
        if (pt->ae[j].status != NA_OK && x->status == NA_OK) {
            x->status = pt->ae[j].status;
            snprintf(x->reason, sizeof(x->reason), "%s", pt->ae[j].reason[0] ? pt->ae[j].reason
                     : na_status_string(pt->ae[j].status));
        }
    }
}

/* Part pt was answered: a request whose prompt it completed (the last
 * layer's rows up to the prompt's end are in: chunked prefill feeds the
 * prompt's rows through DECODE_ATTN, never PREFILL_KV) has the prompt's KV
 * flushed (the write-through point of a PREFILL_KV without MORE: every row
 * on its tier) when the REQ_OPEN said where the prompt ends (n_prompt), and
 * then its whole blocks published to the prefix caches, before any later
 * message of the peer (a REQ_OPEN sharing the prompt) is read. A flush that
 * fails publishes nothing (the request's next access reports the error). */
static void nd_part_prompts(na_node_t *n, const nd_part_t *pt)
{
    uint32_t i;

    for (i = 0; i < pt->a.n_entries; i++) {
        const nd_entry_t *x = &pt->xs[i];
        na_node_req_t *r = x->r;
        uint64_t end = (uint64_t)x->e.position + (x->e.n_queries ? x->e.n_queries : 1);
        if (x->status != NA_OK || r == NULL || pt->a.layer + 1 != r->n_layers)
            continue;
        if (r->n_prompt > 0 && !r->prompt_in && end >= (uint64_t)r->n_prompt) {
            na_status_t st = na_slotset_prefill_done(n->ss, &r->sr);
            r->prompt_in = 1;
            if (st != NA_OK) {
                na_log_warn("node %s: request %llu: flushing its prompt's KV (%u tokens): %s",
                            n->name, (unsigned long long)r->wire_id, r->n_prompt, na_errmsg());
                continue;
            }
            n->prompts_flushed++;
            na_node_prefix_publish(n, r);
        } else if (r->n_prompt == 0 && r->pfx_tokens != NULL && end >= (uint64_t)r->pfx_n) {
            na_node_prefix_publish(n, r);      /* a peer before wire 2.2 */
        }
    }
}

/* No more parts for p's open batch: it computes on, queued on decode_run. */
static void nd_close(na_node_t *n, na_node_peer_t *p)
{
    struct nd_open *o = p->decode_open, **pp = &p->decode_run;

    if (o == NULL)
        return;
    p->decode_open = NULL;
    na_slotset_batch_close(n->ss, o->sb);
    while (*pp != NULL)
        pp = &(*pp)->next;
    *pp = o;
    p->n_run++;
    if (n->decode_computing++ == 0)
        n->decode_busy_since = na_xp_now_ns();
}

/* o (the head of p's decode_run) completed: answer (reply) or drop its parts. */
static na_status_t nd_answer(na_node_t *n, na_node_peer_t *p, int reply)
{
    struct nd_open *o = p->decode_run;
    na_status_t st = NA_OK;
    nd_part_t *pt;

    p->decode_run = o->next;
    p->n_run--;
    if (--n->decode_computing == 0)     /* STATS node.decode_ns: time serving decode */
        n->stat[NA_STAT_DECODE_NS] += na_xp_now_ns() - n->decode_busy_since;
    while ((pt = o->head) != NULL) {
        o->head = pt->next;
        nd_part_collect(pt);
        n->stat[NA_STAT_DECODE_ENTRIES] += pt->a.n_entries;
        if (reply && st == NA_OK)
            st = nd_attn_reply(n, p, &pt->h, &pt->a, pt->xs);
        if (reply)
            nd_part_prompts(n, pt);
        nd_part_put(n, pt);
    }
    if (reply && o->got < o->batch_total)
        na_log_warn("node %s: %s left batch %u layer %u after %u of %u entries", n->name,
                    p->name, o->batch_id, o->layer, o->got, o->batch_total);
    o->next = n->open_free;
    n->open_free = o;
    return st;
}

na_status_t na_node_decode_finish(na_node_t *n, na_node_peer_t *p, int reply)
{
    na_status_t st = NA_OK, st2;

    nd_close(n, p);
    while (p->decode_run != NULL) {
        na_slotset_batch_wait(n->ss, p->decode_run->sb);
        st2 = nd_answer(n, p, reply);
        if (st == NA_OK)
            st = st2;
    }
    return st;
}

na_status_t na_node_decode_before(na_node_t *n, na_node_peer_t *p, unsigned type)
{
    if (p->decode_open == NULL && p->decode_run == NULL)
        return NA_OK;
    switch (type) {
    case NA_WIRE_MSG_DECODE_ATTN:
    case NA_WIRE_MSG_HEARTBEAT:
    case NA_WIRE_MSG_STATS_REQ:
    case NA_WIRE_MSG_ECHO:
    case NA_WIRE_MSG_ERROR:
        return NA_OK;
    default:
        return na_node_decode_finish(n, p, 1);
    }
}

/* Answer the head of p's decode_run if it completed (waiting at most
 * wait_us); 1 if it did. A failed send is logged: the transport reports
 * the peer lost and the loop drops it. */
static int nd_reap_head(na_node_t *n, na_node_peer_t *p, int wait_us)
{
    if (p->decode_run == NULL || !na_slotset_batch_test(n->ss, p->decode_run->sb, wait_us))
        return 0;
    if (nd_answer(n, p, 1) != NA_OK)
        na_log_warn("node %s: answering %s: %s", n->name, p->name, na_errmsg());
    return 1;
}

int na_node_decode_reap(na_node_t *n, int wait_us)
{
    na_node_peer_t *p;
    int answered = 0;

    for (p = n->peers; p != NULL && n->decode_computing > 0; p = p->next)
        while (nd_reap_head(n, p, 0))
            answered++;
    if (answered == 0 && wait_us > 0 && n->decode_computing > 0) {
        for (p = n->peers; p != NULL && p->decode_run == NULL; p = p->next)
            ;
        if (p != NULL)
            (void)nd_reap_head(n, p, wait_us);
    }
    return n->decode_computing;
}

static na_status_t nd_decode(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                             const na_wire_attn_t *a)
{
    struct nd_open *o = p->decode_open;
    nd_part_t *pt;
    na_status_t st;
    int last;

    /* a part that does not continue the open batch closes it (it computes on) */
    if (o != NULL && (o->batch_id != a->batch_id || o->layer != a->layer ||
                      o->batch_total != a->batch_total || o->got != a->entry_base)) {
        nd_close(n, p);
        o = NULL;
    }
    if (o == NULL && p->n_run >= n->max_run)    /* it does not wait for its answers */
        return na_err(NA_ERR_PROTO, "node %s: %s has %d decode batches computing, the most "
                      "one peer may have (nearattn node --max-batches): it sends batches "
                      "without waiting for their answers", n->name, p->name, p->n_run);
    if (o == NULL) {
        if ((o = n->open_free) != NULL)
            n->open_free = o->next;
        else
            o = malloc(sizeof(*o));
        if (o != NULL)
            memset(o, 0, sizeof(*o));
        if (o == NULL || na_slotset_batch_begin(n->ss, &o->sb) != NA_OK) {
            if (o != NULL) {
                o->next = n->open_free;
                n->open_free = o;
            }
            return na_err(NA_ERR_NOMEM, "node %s: out of memory", n->name);
        }
        o->batch_id = a->batch_id;
        o->layer = a->layer;
        o->batch_total = a->batch_total;
        o->got = a->entry_base;
        p->decode_open = o;
    }
    pt = nd_part_build(n, p, h, a);
    if (pt == NULL) {
        (void)na_node_decode_finish(n, p, 1);
        return NA_ERR_NOMEM;
    }
    if (o->tail != NULL)
        o->tail->next = pt;
    else
        o->head = pt;
    o->tail = pt;
    o->got += a->n_entries;
    last = !(h->flags & NA_WIRE_F_MORE) || o->got >= o->batch_total;
    /* the last part: its entries and the close in one call (the engines
     * know no more are coming: a small entry is computed right here) */
    st = last ? na_slotset_batch_add_close(n->ss, o->sb, pt->rq, pt->ae, pt->total)
              : na_slotset_batch_add(n->ss, o->sb, pt->rq, pt->ae, pt->total);
    if (st != NA_OK) {
        na_status_t st2 = na_node_decode_finish(n, p, 1);
        return st != NA_OK ? st : st2;
    }
    if (last) {
        nd_close(n, p);            /* computes on; na_node_decode_reap answers it */
        return NA_OK;
    }
    n->stat[NA_STAT_DECODE_PARTS_EARLY]++;
    return NA_OK;                  /* more parts to come: the engines work meanwhile */
}

/* The session handler of DECODE_ATTN (registered by na_node_handlers): a
 * decode part never waits for the peer's computing batches. */
na_status_t na_node_on_decode(void *ctx, na_ses_in_t *in)
{
    na_node_t *n = ctx;
    uint64_t t0 = na_xp_now_ns();
    na_status_t st;
    int busy = n->decode_computing > 0;

    n->stat[NA_STAT_MSGS]++;
    ((na_node_peer_t *)na_peer_user(in->peer))->msgs++;
    st = nd_decode(n, na_peer_user(in->peer), in->h, &in->m->u.attn);
    /* node.decode_ns is the time with decode work: the busy window (batches
     * computing, counted by nd_close / nd_answer) plus the handling outside
     * it. Only the part before a window opened is added here, so a part
     * handled while batches compute is not counted twice. */
    if (!busy)
        n->stat[NA_STAT_DECODE_NS] += (n->decode_computing > 0 ? n->decode_busy_since : na_xp_now_ns()) - t0;
    return st;
}

/* compute-node/attn_remote_req.c — a request's life on the storage nodes
 * for the attention service over storage nodes (compute-node/attn_remote.c):
 * open (placement: request partition on the live node with the fewest open
 * requests, head partition over the layout's slots), prefill (the prompt's
 * K/V shipped in parts sent with MORE and not waited for, their answers
 * counted per request; the last layer's part waits for every answer:
 * durable), prefill_done and release. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_remote_internal.h"

na_status_t rm_open(na_asvc_t *s, uint64_t req, int max_tokens)
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
            if (!p->nodes[best].alive)      /* lost meanwhile: another node takes it */
                continue;
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
na_status_t rm_prefill(na_asvc_t *s, uint64_t req, int layer, const void *k,
                       const void *v, na_dtype_t dtype, int n_tok)
{
    rm_t *p = (rm_t *)s;
    rm_req_t *r = na_asvc_req_get(s, p->reqs, req, "prefill");
    const int hd = s->mc.head_dim, nkv = s->mc.n_kv_heads;
    const int last = layer == s->mc.n_layers - 1;
    size_t esz = na_dtype_bytes(dtype, 1);
    na_status_t st = NA_OK;
    int i;

    if (r == NULL)
        return NA_ERR_NOT_FOUND;
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
    }
    if (st == NA_OK && !last) {
        r->pf_open = 1;
    } else {
        na_status_t wst = rm_prefill_wait(p, r);   /* closing part, or a failure */
        if (st == NA_OK)
            st = wst;
    }
    return st;
}

/* The prompt is complete. Normally the model's last layer closed it (see
 * rm_prefill); when this service got only some layers (a rotational replica)
 * the parts still open are waited for here: accepted, not yet flushed. */
na_status_t rm_prefill_done(na_asvc_t *s, uint64_t req)
{
    rm_t *p = (rm_t *)s;
    rm_req_t *r = na_asvc_req_get(s, p->reqs, req, "prefill_done");
    na_status_t st;

    if (r == NULL)
        return NA_ERR_NOT_FOUND;
    if (!r->pf_open && r->pf_st == NA_OK)
        return NA_OK;
    st = rm_prefill_wait(p, r);
    return st;
}

void rm_release(na_asvc_t *s, uint64_t req, int status)
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

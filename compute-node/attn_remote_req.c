/* compute-node/attn_remote_req.c — a request's life on the storage nodes
 * for the attention service over storage nodes (compute-node/attn_remote.c):
 * open (placement: request partition on the live node with the fewest open
 * requests, head partition over the layout's slots), prefill (the prompt's
 * K/V shipped in parts sent with MORE and not waited for, their answers
 * counted per request; the last layer's part waits for every answer:
 * durable), prefill_done, fetch and release, through the storage client
 * (compute-node/storage_client.h). The middle attn_remote layer: below the
 * service (attn_remote.c), above the decode layer (attn_remote_decode.c,
 * rm_node_lost). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "compute-node/attn_remote_state.h"
#include "compute-node/storage_client.h"

na_peer_t *rm_call_peer(rm_t *p, int j)
{
    if (!p->nodes[j].alive) {
        (void)na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
        return NULL;
    }
    return p->nodes[j].peer;
}

na_status_t rm_call_end(rm_t *p, int j, na_status_t st)
{
    if (st != NA_OK && p->nodes[j].alive && !na_peer_alive(p->nodes[j].peer))
        rm_node_lost(p, j, na_peer_why(p->nodes[j].peer));
    if (st != NA_OK && !p->nodes[j].alive)
        return na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
    return st;
}

/* A blocking REQ_OPEN o to node j; *hit_p: the prompt tokens it attached. */
static na_status_t rm_open_on(rm_t *p, int j, const na_wire_req_open_t *o, int *hit_p)
{
    na_peer_t *peer = rm_call_peer(p, j);
    return peer == NULL ? NA_ERR_PEER : rm_call_end(p, j, na_sc_open(peer, o, 0, hit_p));
}

/* Request partition: the live node to try next. Among the nodes within the
 * balance bound (at most 2 + min/4 open requests more than the least loaded
 * one) the one likely to hold the longest prefix of the prompt (keys[0..nk),
 * p->pmap), then the least loaded, from p->rr on. -1: none alive. */
static int rm_pick(rm_t *p, const na_kvhash_t *keys, int nk)
{
    long lo = -1, bound;
    int best = -1, best_pfx = -1, j;

    for (j = 0; j < p->n_nodes; j++)
        if (p->nodes[j].alive && (lo < 0 || p->nodes[j].n_open < lo))
            lo = p->nodes[j].n_open;
    if (lo < 0)
        return -1;
    bound = nk > 0 ? lo + 2 + lo / 4 : lo;
    for (j = 0; j < p->n_nodes; j++) {
        int jj = (p->rr + j) % p->n_nodes, pfx;
        if (!p->nodes[jj].alive || p->nodes[jj].n_open > bound)
            continue;
        pfx = nk > 0 ? na_pfx_map_longest(p->pmap, keys, nk, jj) : 0;
        if (best < 0 || pfx > best_pfx ||
            (pfx == best_pfx && p->nodes[jj].n_open < p->nodes[best].n_open)) {
            best = jj;
            best_pfx = pfx;
        }
    }
    return best;
}

/* The error when no node took a request: the nodes lost and why, so the
 * user reads which node went away rather than a bare status. */
static na_status_t rm_none_alive(const rm_t *p, na_status_t st)
{
    char why[NA_ASVC_REASON_MAX];
    size_t n = 0;
    int j, n_dead = 0;

    why[0] = '\0';
    for (j = 0; j < p->n_nodes && n + 1 < sizeof(why); j++) {
        const rm_node_t *nd = &p->nodes[j];
        if (nd->alive)
            continue;
        n += (size_t)snprintf(why + n, sizeof(why) - n, "%s%s lost (%s)", n_dead++ ? ", " : "",
                              nd->name, nd->why[0] ? nd->why : "unreachable");
    }
    if (n_dead == 0)
        return na_err(st, "no storage node accepted the request (%s)", na_status_string(st));
    return na_err(st, "no storage node is alive: %s", why);
}

static na_status_t rm_open_with(na_asvc_t *s, uint64_t req, int max_tokens,
                                const na_asvc_prompt_t *pr, int *hit_p);

na_status_t rm_open(na_asvc_t *s, uint64_t req, int max_tokens)
{
    int hit = 0;
    return rm_open_with(s, req, max_tokens, NULL, &hit);
}

na_status_t rm_open_prefix(na_asvc_t *s, uint64_t req, int max_tokens,
                           const na_asvc_prompt_t *pr, int *hit_p)
{
    return rm_open_with(s, req, max_tokens, pr, hit_p);    /* head partition: no offer */
}

static na_status_t rm_open_with(na_asvc_t *s, uint64_t req, int max_tokens,
                                const na_asvc_prompt_t *pr, int *hit_p)
{
    rm_t *p = (rm_t *)s;
    na_wire_req_open_t o;
    rm_req_t *r;
    na_status_t st = NA_ERR_PEER;
    uint32_t *ids = NULL;
    na_kvhash_t *keys = NULL;
    char full_why[NA_ASVC_REASON_MAX];
    int j, t, nk = 0, hit = 0, full = 0;

    r = calloc(1, sizeof(*r));
    if (r == NULL)
        return na_err(NA_ERR_NOMEM, "remote: out of memory");
    r->link.id = req;
    na_sc_open_msg(&o, req, max_tokens, &s->mc, p->kv_dtype);
    if (pr != NULL && pr->n_prompt > 0 && pr->n_prompt <= max_tokens)
        o.n_prompt = (uint32_t)pr->n_prompt;    /* the owners flush the prompt there */
    if (p->head_part) {
        for (j = 0; j < p->n_nodes; j++) {
            if (p->nodes[j].h1 == p->nodes[j].h0)
                continue;
            o.kv_h0 = (uint16_t)p->nodes[j].h0;
            o.kv_h1 = (uint16_t)p->nodes[j].h1;
            st = rm_open_on(p, j, &o, NULL);
            if (st != NA_OK)
                goto err_release;
            r->own[r->n_own++] = j;
            p->nodes[j].n_open++;
        }
    } else {                                    /* every KV head (na_sc_open_msg) */
        if (pr != NULL && pr->tokens != NULL && pr->n_tok >= 2) {  /* prefix reuse: offer it */
            int bt = (int)p->cfg->kv.block_tokens, n = pr->n_tok, i;
            if (n > max_tokens)
                n = max_tokens;
            if (n > (int)NA_WIRE_MAX_TOKENS)
                n = (int)NA_WIRE_MAX_TOKENS;
            ids = malloc(sizeof(uint32_t) * (size_t)n);
            keys = bt > 0 ? malloc(sizeof(na_kvhash_t) * (size_t)(n / bt + 1)) : NULL;
            if (ids != NULL) {
                for (i = 0; i < n; i++)
                    ids[i] = (uint32_t)pr->tokens[i];
                o.n_prefix = (uint32_t)n;
                o.prefix = ids;
                memcpy(o.model_fp, pr->fp, NA_WIRE_FP_SIZE);
            }
            if (keys != NULL)
                nk = na_pfx_keys(pr->fp, bt, 0, s->mc.n_kv_heads, p->kv_dtype, pr->tokens, n,
                                 keys, n / bt + 1);
        }
        for (t = 0; t < p->n_nodes; t++) {
            int best = rm_pick(p, keys, nk);
            if (best < 0)
                break;
            hit = 0;
            st = rm_open_on(p, best, &o, &hit);
            if (st == NA_OK) {
                r->own[r->n_own++] = best;
                p->nodes[best].n_open++;
                p->rr = (best + 1) % p->n_nodes;
                /* it keeps the prompt's whole blocks once prefilled (a guess) */
                if (nk > 0 && o.n_prefix > 0) {
                    int all = (int)o.n_prefix / (int)p->cfg->kv.block_tokens;
                    na_pfx_map_note(p->pmap, keys, all < nk ? all : nk, best);
                }
                break;
            }
            if (!p->nodes[best].alive)      /* lost meanwhile: another node takes it */
                continue;
            /* full (NOSPACE), or too small for it even when empty (RANGE:
             * another node's budget may be larger) */
            if (st != NA_ERR_NOSPACE && st != NA_ERR_RANGE)
                break;
            if (st == NA_ERR_NOSPACE && !full) {    /* room may come: the caller waits */
                full = 1;
                snprintf(full_why, sizeof(full_why), "%s", na_errmsg());
            }
            /* count it as loaded so the next try picks another node */
            p->nodes[best].n_open += 1L << 20;
        }
        if (r->n_own == 0 && st == NA_ERR_RANGE && full)
            st = na_err(NA_ERR_NOSPACE, "%s", full_why);
        for (j = 0; j < p->n_nodes; j++)
            if (p->nodes[j].n_open >= (1L << 20))
                p->nodes[j].n_open -= 1L << 20;
        free(ids);
        free(keys);
        if (r->n_own == 0) {
            free(r);
            if (st == NA_OK || st == NA_ERR_PEER)
                return rm_none_alive(p, st == NA_OK ? NA_ERR_PEER : st);
            return st;
        }
        if (hit < 0 || hit >= max_tokens)
            hit = 0;
        r->pos0 = hit;
        *hit_p = hit;
    }
    na_asvc_req_push(&p->reqs, &r->link);
    return NA_OK;

err_release:
    {
        char why[NA_ASVC_REASON_MAX];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        for (j = 0; j < r->n_own; j++) {
            na_peer_t *peer = rm_call_peer(p, r->own[j]);
            if (peer != NULL)
                (void)rm_call_end(p, r->own[j], na_sc_release(peer, req, 0, 0));
            p->nodes[r->own[j]].n_open--;
        }
        free(r);
        return na_err(st, "%s", why);
    }
}

static void rm_prefill_reply(void *ctx, na_peer_t *peer, uintptr_t req, na_status_t st,
                             const na_ses_in_t *in);

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
        na_wire_kv_t kv;

        if (!p->nodes[j].alive) {
            st = na_err(NA_ERR_PEER, "%s", p->nodes[j].why);
            break;
        }
        memset(&kv, 0, sizeof(kv));
        kv.request_id = req;
        kv.layer = (uint32_t)layer;
        kv.pos0 = (uint32_t)r->pos0;    /* after the prefix its node attached */
        kv.n_tokens = (uint32_t)n_tok;
        kv.kv_h0 = (uint16_t)h0;
        kv.kv_h1 = (uint16_t)h1;
        kv.head_dim = (uint16_t)hd;
        kv.dtype = dtype;
        if (h1 - h0 == nkv) {
            kv.k = k;
            kv.v = v;
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
            kv.k = pk;
            kv.v = pk + (size_t)n_tok * row;
        }
        st = na_sc_prefill_send(p->nodes[j].peer, &kv, !last, 0, rm_prefill_reply,
                                (uintptr_t)req);
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
        /* the ACK is not waited for (the session matches it when it comes) */
        if (p->nodes[j].alive &&
            na_sc_release_send(p->nodes[j].peer, req, status, 0, NULL, 0) != NA_OK)
            rm_node_lost(p, j, na_errmsg());
    }
    free(r);
}

/* Node j answered a PREFILL_KV of request req (ACK, ERROR, or it ended):
 * counts the answer and keeps the request's first error; an answer for a
 * request no longer open is dropped. */
static void rm_prefill_reply(void *ctx, na_peer_t *peer, uintptr_t req, na_status_t st,
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

na_status_t rm_fetch(na_asvc_t *s, uint64_t req, int layer, int pos0, int n_tok, void *k,
                     void *v, na_dtype_t dtype)
{
    rm_t *p = (rm_t *)s;
    rm_req_t *r = na_asvc_req_get(s, p->reqs, req, "fetch");
    const size_t row = na_dtype_bytes(dtype, (size_t)s->mc.n_kv_heads * (size_t)s->mc.head_dim);
    int done = 0;

    if (r == NULL)
        return NA_ERR_NOT_FOUND;
    if (p->head_part || r->n_own != 1)
        return na_err(NA_ERR_UNSUPPORTED, "remote: KV fetch under head partition");
    while (done < n_tok) {
        int n = n_tok - done < 1024 ? n_tok - done : 1024;   /* bounded messages */
        int j = r->own[0];
        na_peer_t *peer = rm_call_peer(p, j);
        na_wire_kv_fetch_t f;
        na_status_t st;

        if (peer == NULL)
            return NA_ERR_PEER;
        memset(&f, 0, sizeof(f));
        f.request_id = req;
        f.layer = (uint32_t)layer;
        f.pos0 = (uint32_t)(pos0 + done);
        f.n_tokens = (uint32_t)n;
        f.kv_h0 = 0;
        f.kv_h1 = (uint16_t)s->mc.n_kv_heads;
        f.dtype = dtype;
        st = rm_call_end(p, j, na_sc_fetch(peer, &f, s->mc.head_dim, 0,
                                           (uint8_t *)k + row * (size_t)done,
                                           (uint8_t *)v + row * (size_t)done, dtype));
        if (st != NA_OK)
            return st;
        done += n;
    }
    return NA_OK;
}

/* storage-node/node_req.c — the storage node's requests and peers, below
 * its loop (node.c) and its handlers (node_dispatch.c, node_decode.c,
 * node_kvread.c, node_join.c), which call down into it and never the
 * reverse: the request table (na_node_req_find and na_node_send are inline
 * in node_internal.h), a new peer, ERROR answers, and a request's prompt
 * going to the prefix caches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "storage-node/node_internal.h"

/* ---- request table ------------------------------------------------------- */

void na_node_req_insert(na_node_t *n, na_node_req_t *r)
{
    unsigned b = na_node_bucket(r->peer_id, r->wire_id);
    r->hnext = n->req_hash[b];
    n->req_hash[b] = r;
    n->stat[NA_STAT_REQUESTS]++;
}

na_status_t na_node_req_free(na_node_t *n, na_node_req_t *r)
{
    na_node_req_t **pp = &n->req_hash[na_node_bucket(r->peer_id, r->wire_id)];
    na_node_peer_t *p;
    na_status_t st = na_slotset_release(n->ss, &r->sr);

    while (*pp != NULL && *pp != r)
        pp = &(*pp)->hnext;
    if (*pp == r)
        *pp = r->hnext;
    for (p = n->peers; p != NULL; p = p->next)
        if (p->id == r->peer_id && p->n_requests > 0)
            p->n_requests--;
    n->stat[NA_STAT_REQUESTS]--;
    free(r->pfx_tokens);
    free(r);
    return st;
}

/* ---- peers and answers --------------------------------------------------- */

na_node_peer_t *na_node_peer_add(na_node_t *n, na_peer_t *sp)
{
    na_node_peer_t *p = calloc(1, sizeof(*p));

    if (p == NULL) {
        na_log_error("node %s: out of memory for peer %s", n->name, na_peer_name(sp));
        na_peer_close(sp, 0, NULL);
        return NULL;
    }
    p->sp = sp;
    p->id = n->next_peer_id++;
    snprintf(p->name, sizeof(p->name), "%s", na_peer_name(sp));
    na_peer_set_user(sp, p);
    p->next = n->peers;
    n->peers = p;
    n->n_peers++;
    na_log_info("node %s: peer %s (%s, %s) connected", n->name, p->name,
                na_wire_role_name((unsigned)na_xp_ep_peer_role(na_peer_ep(sp))),
                na_xp_ep_addr(na_peer_ep(sp)));
    return p;
}

na_status_t na_node_send_error(na_node_t *n, na_node_peer_t *p, const na_wire_hdr_t *h,
                               uint64_t req, na_status_t st, const char *text)
{
    n->stat[NA_STAT_ERRORS_SENT]++;
    na_log_info("node %s: ERROR to %s: request %llu: %s", n->name, p->name,
                (unsigned long long)req, text);
    return na_peer_answer(p->sp, h, req, st != NA_OK ? st : NA_ERR_INTERNAL, text);
}

/* ---- prefix reuse -------------------------------------------------------- */

void na_node_prefix_publish(na_node_t *n, na_node_req_t *r)
{
    na_slotset_prompt_t pr;

    if (r->pfx_tokens == NULL)
        return;
    memset(&pr, 0, sizeof(pr));
    memcpy(pr.fp, r->pfx_fp, NA_KVHASH_FP);
    pr.kv_h0 = r->kv_h0;
    pr.tokens = r->pfx_tokens;
    pr.n_tok = r->pfx_n;
    na_slotset_prefix_publish(n->ss, &r->sr, &pr);
    free(r->pfx_tokens);
    r->pfx_tokens = NULL;
    r->pfx_n = 0;
}

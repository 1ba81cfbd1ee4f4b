/* storage-node/prefetch.c — layer-ahead prefetch of SSD-resident KV.
 *
 * When a batch for layer l is closed (all its entries arrived), the compute
 * node is about to spend a while on the rest of layer l and on layer l+1's
 * projections; the storage node uses that time to read the SSD granules of
 * layers l+1 .. l+P of the same requests into staging chunks, so that when
 * layer l+1's entries arrive their SSD blocks are already (being) read and
 * disk reads overlap computation instead of following it.
 *
 * A prefetch is keyed by (request id, open generation, layer, first block,
 * block count, file offset, length). The next submit of that (request,
 * layer) computes the same granules from its own view and claims a match;
 * a mismatch (a block settled to the SSD tier in between, a request that
 * went away) is never used: the granule is read on demand and the stale
 * prefetch is dropped after a few rounds. Prefetches hold at most half of
 * the staging chunks, so demand reads always make progress. */
#include <stdlib.h>

#include "storage-node/attn_internal.h"

#define NA_ATTN_PF_KEEP_ROUNDS 2

static int na_attn_pf_match(const na_attn_job_t *p, const na_attn_job_t *w)
{
    return p->req_id == w->req_id && p->seq == w->seq && p->layer == w->layer &&
           p->b0 == w->b0 && p->nb == w->nb && p->s0 == w->s0 && p->off == w->off &&
           p->len == w->len;
}

na_attn_job_t *na_attn_pf_claim(na_attn_cpu_t *e, const na_attn_job_t *want)
{
    na_attn_job_t **pp = &e->pf, *p;

    for (p = *pp; p != NULL; pp = &p->next, p = p->next) {
        if (!p->stale && na_attn_pf_match(p, want)) {
            *pp = p->next;
            p->next = NULL;
            return p;
        }
    }
    return NULL;
}

void na_attn_pf_expire(na_attn_cpu_t *e, uint64_t keep)
{
    na_attn_job_t **pp = &e->pf, *p;

    while ((p = *pp) != NULL) {
        if (p->round + keep < e->round) {
            *pp = p->next;
            if (p->done) {                 /* read finished: give the chunk back */
                if (p->chunk != NULL)
                    na_attn_chunk_put(e, p->chunk);
                na_attn_job_put(e, p);
            } else {                       /* queued or in flight: drop when it lands */
                p->stale = 1;
                if (p->chunk == NULL) {    /* still queued: remove from the read queue */
                    na_attn_job_t **qq = &e->rq_head, *q, *prev = NULL;
                    for (q = *qq; q != NULL && q != p; prev = q, qq = &q->qnext, q = q->qnext)
                        ;
                    if (q == p) {
                        *qq = p->qnext;
                        if (e->rq_tail == p)
                            e->rq_tail = prev;
                        na_attn_job_put(e, p);
                    }
                }
            }
            continue;
        }
        pp = &p->next;
    }
}

static int na_attn_pf_count(const na_attn_cpu_t *e)
{
    const na_attn_job_t *p;
    int n = 0;
    for (p = e->pf; p != NULL; p = p->next)
        n++;
    return n;
}

void na_attn_pf_issue(na_attn_cpu_t *e, na_attn_batch_t *b)
{
    const na_kv_store_cfg_t *kc = e->kcfg;
    const int budget = e->cfg.stage_chunks / 2;
    int i, d, g;

    pthread_mutex_lock(&e->mu);
    e->round++;
    na_attn_pf_expire(e, NA_ATTN_PF_KEEP_ROUNDS);
    pthread_mutex_unlock(&e->mu);

    for (d = 1; d <= e->cfg.prefetch_layers; d++) {
        for (i = 0; i < b->n; i++) {
            na_attn_item_t *it = b->items[i];
            na_kv_view_t v;
            int layer, n_gran;

            if (!it->has_view || it->status != NA_OK || it->entry->n_ctx > 0)
                continue;       /* a prompt chunk's earlier queries: its last one reads ahead */
            layer = it->entry->layer + d;
            if (layer >= kc->n_layers)
                continue;
            if (na_kv_view(e->store, it->view.req, layer, &v) != NA_OK)
                continue;
            n_gran = na_attn_n_granules(e, v.n_tokens);
            pthread_mutex_lock(&e->mu);
            for (g = 0; g < n_gran; g++) {
                na_attn_job_t *j;
                if (na_attn_pf_count(e) >= budget)
                    break;
                j = na_attn_job_get(e);
                if (j == NULL)
                    break;
                na_attn_granule_range(e, v.n_tokens, g, &j->t0, &j->t1, &j->b0, &j->nb);
                if (!na_attn_granule_ssd(&v, j->b0, j->nb, &j->s0, &j->off, &j->len) ||
                    j->len > e->chunk_bytes) {
                    na_attn_job_put(e, j);
                    continue;
                }
                j->fd = v.fd;
                j->prefetch = 1;
                j->req_id = it->entry->req;
                j->seq = na_kv_req_seq(it->view.req);
                j->layer = layer;
                j->round = e->round;
                j->next = e->pf;
                e->pf = j;
                e->stats.prefetch_issued++;
                na_attn_rq_push(e, j);
            }
            pthread_mutex_unlock(&e->mu);
            na_kv_view_release(e->store, &v);
        }
    }
}

/* compute-node/prefix.c — prefix reuse on the compute node (prefix.h): the
 * model's fingerprint, prompt block keys, the placement map, and the
 * admission hooks of the offload engine (na_off_prefix_open,
 * na_off_prefix_wait). */
#include "compute-node/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"
#include "compute-node/offload_internal.h"

void na_pfx_fingerprint(const na_model_t *m, uint8_t fp[NA_KVHASH_FP])
{
    const size_t piece = 64 * 1024;
    uint8_t d[NA_SHA256_SIZE];
    na_sha256_t s;
    uint64_t size = m->map_size;
    int i;

    na_sha256_init(&s);
    na_sha256_update(&s, "nearattn-model-v1", 17);
    na_sha256_update(&s, &m->cfg, sizeof(m->cfg));
    na_sha256_update(&s, &size, sizeof(size));
    if (m->map != NULL) {
        /* 32 pieces spread over the file: its header and weights from every part */
        for (i = 0; i < 32; i++) {
            size_t off = size > piece ? (size_t)((size - piece) / 31 * (uint64_t)i) : 0;
            size_t n = size - off < piece ? size - off : piece;
            na_sha256_update(&s, (const uint8_t *)m->map + off, n);
            if (size <= piece)
                break;
        }
    }
    na_sha256_final(&s, d);
    memcpy(fp, d, NA_KVHASH_FP);
}

int na_pfx_keys(const uint8_t fp[NA_KVHASH_FP], int block_tokens, int kv_h0, int kv_h1,
                na_dtype_t kv_dtype, const int *tokens, int n_tok, na_kvhash_t *keys, int cap)
{
    uint32_t *t;
    na_kvhash_t root;
    int n = n_tok > 0 ? (n_tok - 1) / block_tokens : 0, b, i;

    if (n > cap)
        n = cap;
    if (n <= 0 || (t = malloc(sizeof(uint32_t) * (size_t)block_tokens)) == NULL)
        return 0;
    na_kvhash_root(fp, block_tokens, kv_h0, kv_h1, kv_dtype, &root);
    for (b = 0; b < n; b++) {
        for (i = 0; i < block_tokens; i++)
            t[i] = (uint32_t)tokens[b * block_tokens + i];
        na_kvhash_next(b == 0 ? &root : &keys[b - 1], t, block_tokens, &keys[b]);
    }
    free(t);
    return n;
}

/* ---- the placement map: open addressing over the keys' first 8 bytes ---- */

typedef struct {
    uint64_t key;      /* 0: empty */
    uint64_t nodes;    /* bit j: sent to node j */
} na_pfx_slot_t;

struct na_pfx_map {
    na_pfx_slot_t *t;
    int            cap;   /* power of two, twice the keys kept */
    int            used;
};

static uint64_t pfx_k(const na_kvhash_t *h)
{
    uint64_t k;
    memcpy(&k, h->b, sizeof(k));
    return k ? k : 1;
}

na_pfx_map_t *na_pfx_map_create(int cap)
{
    na_pfx_map_t *m = calloc(1, sizeof(*m));
    int c = 64;

    if (m == NULL)
        return NULL;
    while (c < 2 * cap)
        c *= 2;
    m->t = calloc((size_t)c, sizeof(*m->t));
    if (m->t == NULL) {
        free(m);
        return NULL;
    }
    m->cap = c;
    return m;
}

void na_pfx_map_destroy(na_pfx_map_t *m)
{
    if (m == NULL)
        return;
    free(m->t);
    free(m);
}

static na_pfx_slot_t *pfx_find(const na_pfx_map_t *m, uint64_t k, int add)
{
    unsigned i = (unsigned)(k * 0x9e3779b97f4a7c15ull >> 32) & (unsigned)(m->cap - 1);

    for (;; i = (i + 1) & (unsigned)(m->cap - 1)) {
        na_pfx_slot_t *s = &m->t[i];
        if (s->key == k)
            return s;
        if (s->key == 0)
            return add ? s : NULL;
    }
}

int na_pfx_map_longest(const na_pfx_map_t *m, const na_kvhash_t *keys, int n, int node)
{
    int b;

    if (m == NULL || node < 0 || node >= 64)
        return 0;
    for (b = 0; b < n; b++) {
        const na_pfx_slot_t *s = pfx_find(m, pfx_k(&keys[b]), 0);
        if (s == NULL || !(s->nodes & (1ull << node)))
            break;
    }
    return b;
}

void na_pfx_map_note(na_pfx_map_t *m, const na_kvhash_t *keys, int n, int node)
{
    int b;

    if (m == NULL || node < 0 || node >= 64)
        return;
    for (b = 0; b < n; b++) {
        uint64_t k = pfx_k(&keys[b]);
        na_pfx_slot_t *s = pfx_find(m, k, 1);
        if (s->key == 0) {
            if (2 * (m->used + 1) > m->cap) {     /* full: start over (a guess only) */
                memset(m->t, 0, sizeof(*m->t) * (size_t)m->cap);
                m->used = 0;
                s = pfx_find(m, k, 1);
            }
            s->key = k;
            m->used++;
        }
        s->nodes |= 1ull << node;
    }
}

void na_pfx_map_forget(na_pfx_map_t *m, int node)
{
    int i;

    if (m == NULL || node < 0 || node >= 64)
        return;
    for (i = 0; i < m->cap; i++)
        m->t[i].nodes &= ~(1ull << node);
}

/* ---- admission (the offload engine's hooks) ----------------------------- */

/* Whether q's prompt is offered to the service (see offload_internal.h). */
static int pfx_applies(const na_off_t *g, const na_off_req_t *q)
{
    return g->o->prefix_reuse && g->svc->prefix_block_tokens > 0 && q->xc == NULL &&
           na_off_chunked(g, q) && q->r->n_prompt >= 2;
}

na_status_t na_off_prefix_open(na_off_t *g, na_off_req_t *q, int max_tok, int *hit_p)
{
    na_request_t *r = q->r;
    na_asvc_prompt_t pr;
    na_status_t st;
    int hit = 0;

    *hit_p = 0;
    q->pfx = 0;
    q->pfx_hit = 0;
    if (!pfx_applies(g, q))
        return na_asvc_open(g->svc, q->wid, max_tok);
    pr.fp = g->pfx_fp;
    pr.tokens = r->prompt;
    pr.n_tok = r->n_prompt;
    st = na_asvc_open_prefix(g->svc, q->wid, max_tok, &pr, &hit);
    if (st != NA_OK)
        return st;
    q->pfx = 1;
    if (hit <= 0)
        return NA_OK;
    if (hit >= r->n_prompt) {       /* an owner must leave the last token to us */
        na_asvc_release(g->svc, q->wid, (int)NA_ERR_PROTO);
        q->pfx = 0;
        return na_err(NA_ERR_PROTO, "a storage node attached %d tokens of a %d-token prompt",
                      hit, r->n_prompt);
    }
    /* the owner holds positions 0..hit-1 (shared blocks, read-only): the
     * chunked prefill feeds the rest, its queries answered over both */
    g->st->prefix_hit_tokens += hit;
    g->st->prefix_hit_reqs++;
    q->pfx_hit = hit;
    *hit_p = hit;
    return NA_OK;
}

int na_off_prefix_wait(const na_off_t *g, const na_off_req_t *q)
{
    const na_off_req_t *p;
    int bt = g->svc->prefix_block_tokens;

    if (!pfx_applies(g, q) || q->r->n_prompt <= bt)
        return 0;                   /* no whole block of it could be attached */
    for (p = g->all; p != NULL; p = p->next_all) {
        int end = p->pfx_hit + bt;  /* the first block p computes itself */
        if (p != q && !p->done && p->batch >= 0 && p->pfx && p->pf_first &&
            p->pf_target > 0 && p->r->state == NA_REQ_PREFILL && p->r->n_prompt >= end &&
            q->r->n_prompt > end &&
            memcmp(p->r->prompt, q->r->prompt, sizeof(int) * (size_t)end) == 0)
            return 1;
    }
    return 0;
}

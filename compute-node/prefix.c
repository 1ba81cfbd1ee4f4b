/* compute-node/prefix.c — prefix reuse on the compute node (prefix.h): the
 * model's fingerprint, prompt block keys, the placement map, and the
 * admission hook of the offload engine (na_off_prefix_open). */
#include "compute-node/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
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

/* ---- admission (the offload engine's hook) ------------------------------ */

na_status_t na_off_prefix_open(na_off_t *g, na_off_req_t *q, int max_tok, int *hit_p)
{
    na_request_t *r = q->r;
    na_engine_t *e = g->e;
    na_asvc_prompt_t pr;
    na_kv_local_t *kv;
    void *buf = NULL;
    double t0;
    size_t row;
    na_status_t st;
    int hit = 0, l;

    *hit_p = 0;
    if (!g->o->prefix_reuse || g->n_rep > 1 || r->n_prompt < 2)
        return na_asvc_open(g->svc, q->wid, max_tok);
    pr.fp = g->pfx_fp;
    pr.tokens = r->prompt;
    pr.n_tok = r->n_prompt;
    st = na_asvc_open_prefix(g->svc, q->wid, max_tok, &pr, &hit);
    if (st != NA_OK || hit <= 0)
        return st;
    if (hit >= r->n_prompt) {       /* an owner must leave the last token to us */
        na_asvc_release(g->svc, q->wid, (int)NA_ERR_PROTO);
        return na_err(NA_ERR_PROTO, "a storage node attached %d tokens of a %d-token prompt",
                      hit, r->n_prompt);
    }
    /* the prefix's KV back into the request's local KV (prefilled after it) */
    t0 = na_now_s();
    na_kv_local_destroy(r->kv);
    r->kv = NULL;
    st = na_kv_local_create(&e->cfg, e->opts.kv_dtype, e->kern, e->kern->mem, &r->kv);
    if (st == NA_OK)
        st = na_kv_local_reserve(r->kv, hit);
    kv = r->kv;
    row = kv != NULL ? na_dtype_bytes(kv->dtype, (size_t)kv->kv_dim) : 0;
    if (st == NA_OK && (buf = malloc(2 * row * (size_t)hit)) == NULL)
        st = na_err(NA_ERR_NOMEM, "out of memory for a %d-token prefix", hit);
    for (l = 0; l < e->cfg.n_layers && st == NA_OK; l++) {
        na_kbuf_t kb, vb;
        st = na_asvc_fetch(g->svc, q->wid, l, 0, hit, buf, (uint8_t *)buf + row * (size_t)hit,
                           kv->dtype);
        if (st != NA_OK)
            break;
        kb = na_kbuf_view(kv->kb[l], 0, row * (size_t)hit);
        vb = na_kbuf_view(kv->vb[l], 0, row * (size_t)hit);
        st = e->kern->ops->upload(e->kern, &kb, buf, row * (size_t)hit);
        if (st == NA_OK)
            st = e->kern->ops->upload(e->kern, &vb, (uint8_t *)buf + row * (size_t)hit,
                                      row * (size_t)hit);
    }
    free(buf);
    if (st == NA_OK)
        st = na_kernels_finish(e->kern);
    g->st->prefix_fetch_s += na_now_s() - t0;
    if (st != NA_OK) {
        /* the request goes on without its prefix: prefilled whole elsewhere */
        na_log_warn("request %d: fetching its %d-token prefix failed (%s); prefilling it all",
                    r->id, hit, na_errmsg());
        na_kv_local_destroy(r->kv);
        r->kv = NULL;
        na_asvc_release(g->svc, q->wid, 0);
        q->wid = na_asvc_new_id(g->svc);
        return na_asvc_open(g->svc, q->wid, max_tok);
    }
    na_kv_local_commit(r->kv, hit);
    g->st->prefix_hit_tokens += hit;
    g->st->prefix_hit_reqs++;
    *hit_p = hit;
    return NA_OK;
}

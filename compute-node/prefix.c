/* compute-node/prefix.c — prefix reuse on the compute node (prefix.h): the
 * model's fingerprint, prompt block keys and the placement map. */
#include "compute-node/prefix.h"

#include <stdlib.h>
#include <string.h>

#include "common/sha256.h"

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
    int            cap;   /* power of two, twice the keys kept */
    int            used;
    na_pfx_slot_t  t[];   /* [cap], in the map's own allocation */
};

static uint64_t pfx_k(const na_kvhash_t *h)
{
    uint64_t k;
    memcpy(&k, h->b, sizeof(k));
    return k ? k : 1;
}

na_pfx_map_t *na_pfx_map_create(int cap)
{
    na_pfx_map_t *m;
    int c = 64;

    while (c < 2 * cap)
        c *= 2;
    m = calloc(1, sizeof(*m) + (size_t)c * sizeof(m->t[0]));
    if (m != NULL)
        m->cap = c;
    return m;
}

void na_pfx_map_destroy(na_pfx_map_t *m)
{
    free(m);
}

/* The index of key k's slot, or of the empty slot where k would go. */
static unsigned pfx_find(const na_pfx_map_t *m, uint64_t k)
{
    unsigned i = (unsigned)(k * 0x9e3779b97f4a7c15ull >> 32) & (unsigned)(m->cap - 1);

    while (m->t[i].key != k && m->t[i].key != 0)
        i = (i + 1) & (unsigned)(m->cap - 1);
    return i;
}

int na_pfx_map_longest(const na_pfx_map_t *m, const na_kvhash_t *keys, int n, int node)
{
    int b;

    if (m == NULL || node < 0 || node >= 64)
        return 0;
    for (b = 0; b < n; b++) {
        uint64_t k = pfx_k(&keys[b]);
        const na_pfx_slot_t *s = &m->t[pfx_find(m, k)];
        if (s->key != k || !(s->nodes & (1ull << node)))
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
        na_pfx_slot_t *s = &m->t[pfx_find(m, k)];
        if (s->key == 0) {
            if (2 * (m->used + 1) > m->cap) {     /* full: start over (a guess only) */
                memset(m->t, 0, sizeof(*m->t) * (size_t)m->cap);
                m->used = 0;
                s = &m->t[pfx_find(m, k)];
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

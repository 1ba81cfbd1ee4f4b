/* storage-node/prefix_cache.c — the prefix cache of a slot (prefix_cache.h). */
#include "storage-node/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/list.h"
#include "storage-node/kv_ssd.h"

#define PC_BUCKETS 4096

struct na_pcache_ent {
    na_kvhash_t       key;         /* the chain's key (full) */
    na_kvhash_t       tkey;        /* the key the table uses (cut to hash_bits) */
    na_pcache_ent_t  *parent;      /* holds a reference; NULL for a first block */
    na_pcache_ident_t id;          /* owner (compared for first blocks; heads for all) */
    int               index;       /* block index in the prompt */
    size_t            block_bytes;
    uint32_t         *tokens;      /* (block_tokens) */
    void             *mem;         /* n_layers x block_bytes */
    uint64_t          sum;         /* na_kv_sum of mem at insert */
    int               refs;        /* requests + children */
    na_pcache_ent_t  *hnext;       /* bucket chain */
    na_pcache_ent_t  *prev, *next; /* LRU list, most recent first */
};

struct na_pcache {
    na_pcache_cfg_t   cfg;
    na_pcache_ent_t  *bucket[PC_BUCKETS];
    na_pcache_ent_t  *mru, *lru;
    na_pcache_stats_t st;
};

na_status_t na_pcache_create(const na_pcache_cfg_t *cfg, na_pcache_t **pc_p)
{
    na_pcache_t *pc;

    if (cfg->n_layers < 1 || cfg->block_tokens < 1)
        return na_err(NA_ERR_INVALID, "prefix cache: n_layers %d, block_tokens %d must be >= 1",
                      cfg->n_layers, cfg->block_tokens);
    pc = calloc(1, sizeof(*pc));
    if (pc == NULL)
        return na_err(NA_ERR_NOMEM, "prefix cache: out of memory");
    pc->cfg = *cfg;
    pc->st.budget = cfg->budget_bytes;
    *pc_p = pc;
    return NA_OK;
}

static unsigned pc_bucket(const na_kvhash_t *k)
{
    uint32_t v;
    memcpy(&v, k->b, sizeof(v));
    return v % PC_BUCKETS;
}

static void pc_lru_unlink(na_pcache_t *pc, na_pcache_ent_t *e)
{
    NA_LIST_UNLINK_TAIL(pc->mru, pc->lru, e, prev, next);
    e->prev = e->next = NULL;
}

static void pc_lru_front(na_pcache_t *pc, na_pcache_ent_t *e)
{
    NA_LIST_PUSH(pc->mru, e, prev, next);
    if (pc->lru == NULL)
        pc->lru = e;
}

static size_t pc_bytes(const na_pcache_t *pc, const na_pcache_ent_t *e)
{
    return (size_t)pc->cfg.n_layers * e->block_bytes;
}

/* Take e out of the table and the list and free it; its parent loses a
 * reference. e must be unreferenced. */
static void pc_free(na_pcache_t *pc, na_pcache_ent_t *e)
{
    na_pcache_ent_t **pp = &pc->bucket[pc_bucket(&e->tkey)];

    while (*pp != NULL && *pp != e)
        pp = &(*pp)->hnext;
    if (*pp == e)
        *pp = e->hnext;
    pc_lru_unlink(pc, e);
    pc->st.entries--;
    pc->st.bytes -= pc_bytes(pc, e);
    if (e->parent != NULL)
        e->parent->refs--;
    na_kv_aligned_free(e->mem);
    free(e->tokens);
    free(e);
}

void na_pcache_destroy(na_pcache_t *pc)
{
    na_pcache_ent_t *e;

    if (pc == NULL)
        return;
    for (e = pc->mru; e != NULL; e = e->next)
        e->parent = NULL;           /* every entry goes: no parent to give back to */
    while (pc->mru != NULL)
        pc_free(pc, pc->mru);
    free(pc);
}

/* Evict unreferenced entries, least recently used first, until `need` more
 * bytes fit the budget. 1 when they fit. */
static int pc_make_room(na_pcache_t *pc, uint64_t need)
{
    na_pcache_ent_t *e = pc->lru;

    while (pc->st.bytes + need > pc->cfg.budget_bytes && e != NULL) {
        na_pcache_ent_t *prev = e->prev;
        if (e->refs == 0) {
            na_pcache_ent_t *parent = e->parent;
            pc_free(pc, e);
            pc->st.evicted++;
            /* its parent may just have become free: look again from the end */
            prev = parent != NULL && parent->refs == 0 ? pc->lru : prev;
        }
        e = prev;
    }
    return pc->st.bytes + need <= pc->cfg.budget_bytes;
}

/* Does e stand for block `index` of this prompt after parent? */
static int pc_match(const na_pcache_t *pc, const na_pcache_ent_t *e, const na_pcache_ident_t *id,
                    size_t block_bytes, const na_pcache_ent_t *parent, int index,
                    const uint32_t *tokens)
{
    if (e->parent != parent || e->index != index || e->block_bytes != block_bytes ||
        e->id.kv_h0 != id->kv_h0 || e->id.n_kvh != id->n_kvh || e->id.kv_dtype != id->kv_dtype)
        return 0;
    if (parent == NULL && memcmp(e->id.fp, id->fp, NA_KVHASH_FP) != 0)
        return 0;
    return memcmp(e->tokens, tokens, sizeof(uint32_t) * (size_t)pc->cfg.block_tokens) == 0;
}

/* The entry for block index after parent with key k (cut), or NULL; counts
 * key matches that are other blocks as collisions. */
static na_pcache_ent_t *pc_find(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                                const na_pcache_ent_t *parent, int index,
                                const uint32_t *tokens, const na_kvhash_t *tk)
{
    na_pcache_ent_t *e;

    for (e = pc->bucket[pc_bucket(tk)]; e != NULL; e = e->hnext) {
        if (memcmp(e->tkey.b, tk->b, NA_KVHASH_SIZE) != 0)
            continue;
        if (pc_match(pc, e, id, block_bytes, parent, index, tokens))
            return e;
        pc->st.collisions++;
    }
    return NULL;
}

/* The key of block index after parent (full and cut). */
static void pc_key(const na_pcache_t *pc, const na_pcache_ident_t *id,
                   const na_pcache_ent_t *parent, const uint32_t *tokens, na_kvhash_t *key,
                   na_kvhash_t *tkey)
{
    na_kvhash_t root;

    if (parent == NULL) {
        na_kvhash_root(id->fp, pc->cfg.block_tokens, id->kv_h0, id->kv_h0 + id->n_kvh,
                       (na_dtype_t)id->kv_dtype, &root);
        parent = NULL;
        na_kvhash_next(&root, tokens, pc->cfg.block_tokens, key);
    } else {
        na_kvhash_next(&parent->key, tokens, pc->cfg.block_tokens, key);
    }
    *tkey = *key;
    na_kvhash_truncate(tkey, pc->cfg.hash_bits);
}

/* The run of the prompt's first blocks the cache holds, at most n_blocks:
 * with out, each block checked against its sum (a bad one ends the run and
 * is dropped once nobody holds it) and referenced into out[i]; without,
 * only found. Returns the run's length. */
static int pc_walk(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                   const uint32_t *tokens, int n_blocks, na_pcache_ent_t **out)
{
    const int bt = pc->cfg.block_tokens;
    na_pcache_ent_t *parent = NULL;
    int n;

    for (n = 0; n < n_blocks; n++) {
        na_kvhash_t key, tkey;
        na_pcache_ent_t *e;

        pc_key(pc, id, parent, tokens + (size_t)n * bt, &key, &tkey);
        e = pc_find(pc, id, block_bytes, parent, n, tokens + (size_t)n * bt, &tkey);
        if (e == NULL)
            break;
        if (out != NULL) {
            if (na_kv_sum(e->mem, pc_bytes(pc, e)) != e->sum) {
                pc->st.bad_sums++;      /* never hand it out; drop it when nobody holds it */
                if (e->refs == 0)
                    pc_free(pc, e);
                break;
            }
            e->refs++;
            out[n] = e;
        }
        parent = e;
    }
    return n;
}

int na_pcache_lookup(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                     const uint32_t *tokens, int n_blocks, na_pcache_ent_t **out)
{
    int n, i;

    pc->st.lookups++;
    n = pc_walk(pc, id, block_bytes, tokens, n_blocks, out);
    for (i = n - 1; i >= 0; i--) {      /* deepest first: the first blocks end up newest */
        pc_lru_unlink(pc, out[i]);
        pc_lru_front(pc, out[i]);
    }
    pc->st.hit_blocks += (uint64_t)n;
    pc->st.miss_blocks += (uint64_t)(n_blocks - n);
    return n;
}

int na_pcache_peek(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                   const uint32_t *tokens, int n_blocks)
{
    uint64_t coll = pc->st.collisions;
    int n = pc_walk(pc, id, block_bytes, tokens, n_blocks, NULL);

    pc->st.collisions = coll;           /* a look, not a lookup */
    return n;
}

na_status_t na_pcache_insert(na_pcache_t *pc, const na_pcache_ident_t *id, size_t block_bytes,
                             na_pcache_ent_t *parent, int index, const uint32_t *tokens,
                             const void *const *mem, na_pcache_ent_t **out)
{
    const int bt = pc->cfg.block_tokens;
    na_kvhash_t key, tkey;
    na_pcache_ent_t *e;
    size_t bytes = (size_t)pc->cfg.n_layers * block_bytes;
    int l;

    if ((parent == NULL) != (index == 0))
        return na_err(NA_ERR_INVALID, "prefix cache: block %d inserted %s a parent", index,
                      parent == NULL ? "without" : "with");
    pc_key(pc, id, parent, tokens, &key, &tkey);
    e = pc_find(pc, id, block_bytes, parent, index, tokens, &tkey);
    if (e != NULL) {
        e->refs++;
        pc_lru_unlink(pc, e);
        pc_lru_front(pc, e);
        *out = e;
        return NA_OK;
    }
    if (parent != NULL)
        parent->refs++;                 /* not evicted while making room */
    if (!pc_make_room(pc, bytes)) {
        if (parent != NULL)
            parent->refs--;
        return na_err(NA_ERR_NOSPACE, "prefix cache: %zu bytes do not fit its budget of %llu "
                      "(%llu held by running requests)", bytes,
                      (unsigned long long)pc->cfg.budget_bytes,
                      (unsigned long long)pc->st.bytes);
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        goto nomem;
    e->tokens = malloc(sizeof(uint32_t) * (size_t)bt);
    e->mem = na_kv_aligned_alloc(bytes);
    if (e->tokens == NULL || e->mem == NULL) {
        free(e->tokens);
        na_kv_aligned_free(e->mem);
        free(e);
        goto nomem;
    }
    memcpy(e->tokens, tokens, sizeof(uint32_t) * (size_t)bt);
    for (l = 0; l < pc->cfg.n_layers; l++)
        memcpy((char *)e->mem + (size_t)l * block_bytes, mem[l], block_bytes);
    e->sum = na_kv_sum(e->mem, bytes);
    e->key = key;
    e->tkey = tkey;
    e->parent = parent;                 /* keeps the reference taken above */
    e->id = *id;
    e->index = index;
    e->block_bytes = block_bytes;
    e->refs = 1;
    e->hnext = pc->bucket[pc_bucket(&tkey)];
    pc->bucket[pc_bucket(&tkey)] = e;
    pc_lru_front(pc, e);
    pc->st.entries++;
    pc->st.bytes += bytes;
    pc->st.inserted++;
    *out = e;
    return NA_OK;
nomem:
    if (parent != NULL)
        parent->refs--;
    return na_err(NA_ERR_NOMEM, "prefix cache: out of memory");
}

const void *na_pcache_mem(const na_pcache_ent_t *e, int layer)
{
    return (const char *)e->mem + (size_t)layer * e->block_bytes;
}

void na_pcache_ref(na_pcache_ent_t *e)
{
    e->refs++;
}

void na_pcache_unref(na_pcache_t *pc, na_pcache_ent_t *e)
{
    (void)pc;
    if (e->refs > 0)
        e->refs--;
}

int na_pcache_refs(const na_pcache_ent_t *e)
{
    return e->refs;
}

uint64_t na_pcache_trim(na_pcache_t *pc)
{
    uint64_t before = pc->st.bytes;
    uint64_t budget = pc->cfg.budget_bytes;

    pc->cfg.budget_bytes = 0;
    (void)pc_make_room(pc, 0);
    pc->cfg.budget_bytes = budget;
    return before - pc->st.bytes;
}

void na_pcache_stats(const na_pcache_t *pc, na_pcache_stats_t *out)
{
    *out = pc->st;
}

/* tests/unit/test_prefix_cache.c — the prefix cache of a slot
 * (storage-node/prefix_cache.c) and the store's shared blocks
 * (na_kv_attach): hits along a chain, references, LRU eviction within the
 * budget, forced key collisions that must never return another prompt's KV,
 * a corrupted block that must never be served (in the cache, and read back
 * from the SSD tier to be kept: na_kv_block_read). */
#define _GNU_SOURCE            /* O_DIRECT (kv_fault_io.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage-node/kv_ssd.h"
#include "storage-node/kv_store.h"
#include "storage-node/prefix_cache.h"
#include "tests/testutil.h"
#include "tests/unit/kv_fault_io.h"

#define NL  3                 /* layers */
#define BT  4                 /* tokens per block */
#define BB  256               /* bytes of one layer's block image */
#define ENT (NL * BB)         /* bytes of one entry */

/* Layer images of block `b` of a prompt tagged `tag`: every byte says
 * whose it is, so a wrong hit shows. */
static void images(uint8_t img[NL][BB], int tag, int b, const void *mem[NL])
{
    int l;
    for (l = 0; l < NL; l++) {
        memset(img[l], (tag * 31 + b * 7 + l) & 0xff, BB);
        mem[l] = img[l];
    }
}

static int holds(const na_pcache_ent_t *e, int tag, int b)
{
    int l, i;
    for (l = 0; l < NL; l++) {
        const uint8_t *m = na_pcache_mem(e, l);
        for (i = 0; i < BB; i++)
            if (m[i] != ((tag * 31 + b * 7 + l) & 0xff))
                return 0;
    }
    return 1;
}

static void ident(na_pcache_ident_t *id, int model)
{
    memset(id, 0, sizeof(*id));
    memset(id->fp, model, sizeof(id->fp));
    id->kv_h0 = 0;
    id->n_kvh = 2;
    id->kv_dtype = NA_DTYPE_F16;
}

/* A cache of budget bytes (NL layers, blocks of BT; keys cut to hash_bits
 * bits, 0: whole), model 1's identity in *id and model 2's in *other (when
 * not NULL). */
static na_pcache_t *pc_new(uint64_t budget, int hash_bits, na_pcache_ident_t *id,
                           na_pcache_ident_t *other)
{
    na_pcache_cfg_t cfg = { budget, NL, BT, hash_bits };
    na_pcache_t *pc = NULL;

    NA_CHECK_OK(na_pcache_create(&cfg, &pc));
    ident(id, 1);
    if (other != NULL)
        ident(other, 2);
    return pc;
}

/* Insert the n_blocks blocks of tokens (prompt `tag`); the entries are
 * given back at once (kept by their children / the LRU list). Returns how
 * many went in. */
static int put_chain(na_pcache_t *pc, const na_pcache_ident_t *id, const uint32_t *tokens,
                     int n_blocks, int tag)
{
    na_pcache_ent_t *prev = NULL, *e;
    uint8_t img[NL][BB];
    const void *mem[NL];
    int b;

    for (b = 0; b < n_blocks; b++) {
        images(img, tag, b, mem);
        if (na_pcache_insert(pc, id, BB, prev, b, tokens + b * BT, mem, &e) != NA_OK)
            break;
        if (prev != NULL)
            na_pcache_unref(pc, prev);
        prev = e;
    }
    if (prev != NULL)
        na_pcache_unref(pc, prev);
    return b;
}

static void unref_all(na_pcache_t *pc, na_pcache_ent_t **e, int n)
{
    int i;
    for (i = 0; i < n; i++)
        na_pcache_unref(pc, e[i]);
}

static void test_hits_and_refs(void)
{
    const uint32_t a[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
    uint32_t b[12];
    na_pcache_ident_t id, other;
    na_pcache_ent_t *e[3], *f[3];
    na_pcache_stats_t st;
    na_pcache_t *pc = pc_new(10 * ENT, 0, &id, &other);
    int n;

    NA_CHECK(na_pcache_lookup(pc, &id, BB, a, 3, e) == 0);
    NA_CHECK(put_chain(pc, &id, a, 3, 1) == 3);
    n = na_pcache_lookup(pc, &id, BB, a, 3, e);
    NA_CHECK(n == 3);
    NA_CHECK(n == 3 && holds(e[0], 1, 0) && holds(e[1], 1, 1) && holds(e[2], 1, 2));
    /* one reference from us, one from the child */
    NA_CHECK(n == 3 && na_pcache_refs(e[0]) == 2 && na_pcache_refs(e[2]) == 1);
    unref_all(pc, e, n);
    NA_CHECK(na_pcache_refs(e[2]) == 0);
    /* a prompt that differs in its second block: only the first is shared */
    memcpy(b, a, sizeof(b));
    b[5] = 99;
    NA_CHECK(na_pcache_lookup(pc, &id, BB, b, 3, f) == 1);
    na_pcache_unref(pc, f[0]);
    /* a shorter ask, another model, other heads, another block size: no more */
    NA_CHECK((n = na_pcache_lookup(pc, &id, BB, a, 2, f)) == 2);
    unref_all(pc, f, n);
    NA_CHECK(na_pcache_lookup(pc, &other, BB, a, 3, f) == 0);
    other = id;
    other.kv_h0 = 1;
    NA_CHECK(na_pcache_lookup(pc, &other, BB, a, 3, f) == 0);
    NA_CHECK(na_pcache_lookup(pc, &id, BB * 2, a, 3, f) == 0);
    /* inserting what is there hands out the same entry */
    NA_CHECK(put_chain(pc, &id, a, 3, 7) == 3);
    n = na_pcache_lookup(pc, &id, BB, a, 3, f);
    NA_CHECK(n == 3 && holds(f[2], 1, 2));
    unref_all(pc, f, n);
    na_pcache_stats(pc, &st);
    NA_CHECK(st.entries == 3 && st.bytes == 3 * ENT && st.inserted == 3);
    NA_CHECK(na_pcache_trim(pc) == 3 * ENT);
    na_pcache_stats(pc, &st);
    NA_CHECK(st.entries == 0 && st.bytes == 0);
    na_pcache_destroy(pc);
}

/* Budget of 4 entries: the least recently used chain goes first, a chain's
 * first blocks last, and nothing referenced is ever evicted. */
static void test_lru_budget(void)
{
    const uint32_t a[8] = { 1, 1, 1, 1, 2, 2, 2, 2 };
    const uint32_t b[8] = { 3, 3, 3, 3, 4, 4, 4, 4 };
    const uint32_t c[8] = { 5, 5, 5, 5, 6, 6, 6, 6 };
    na_pcache_ident_t id;
    na_pcache_ent_t *e[2], *f[2], *g[2];
    na_pcache_stats_t st;
    na_pcache_t *pc = pc_new(4 * ENT, 0, &id, NULL);
    int n, m;

    NA_CHECK(put_chain(pc, &id, a, 2, 1) == 2);
    NA_CHECK(put_chain(pc, &id, b, 2, 2) == 2);
    n = na_pcache_lookup(pc, &id, BB, a, 2, e);     /* a is now the most recent */
    NA_CHECK(n == 2);
    unref_all(pc, e, n);
    NA_CHECK(put_chain(pc, &id, c, 2, 3) == 2);     /* evicts b (both blocks) */
    na_pcache_stats(pc, &st);
    NA_CHECK(st.bytes <= 4 * ENT && st.evicted == 2);
    NA_CHECK((n = na_pcache_lookup(pc, &id, BB, a, 2, e)) == 2);
    NA_CHECK(na_pcache_lookup(pc, &id, BB, b, 2, f) == 0);
    NA_CHECK((m = na_pcache_lookup(pc, &id, BB, c, 2, g)) == 2);
    /* everything referenced now: b cannot go in, nothing is evicted */
    NA_CHECK(put_chain(pc, &id, b, 2, 2) == 0);
    na_pcache_stats(pc, &st);
    NA_CHECK(st.entries == 4 && st.evicted == 2);
    NA_CHECK(n == 2 && holds(e[1], 1, 1) && m == 2 && holds(g[1], 3, 1));
    unref_all(pc, e, n);
    unref_all(pc, g, m);
    /* c is the more recent: one block of b makes room by dropping a's tail
     * (a leaf) before any first block */
    NA_CHECK(put_chain(pc, &id, b, 1, 2) == 1);
    NA_CHECK((n = na_pcache_lookup(pc, &id, BB, a, 2, e)) == 1);
    unref_all(pc, e, n);
    na_pcache_stats(pc, &st);
    NA_CHECK(st.bytes <= 4 * ENT);
    na_pcache_destroy(pc);
}

/* Keys cut to 1 bit: nearly every key collides. Tokens, parent and owner
 * decide, so a lookup gets its own prompt's KV or a miss, never another's. */
static void test_forced_collision(void)
{
    const uint32_t a[8] = { 10, 11, 12, 13, 20, 21, 22, 23 };
    const uint32_t b[8] = { 90, 91, 92, 93, 20, 21, 22, 23 };   /* same 2nd block, other parent */
    na_pcache_ident_t id, other;
    na_pcache_ent_t *e[2];
    na_pcache_stats_t st;
    na_pcache_t *pc = pc_new(64 * ENT, 1, &id, &other);      /* keys cut to 1 bit */
    int n;

    NA_CHECK(put_chain(pc, &id, a, 2, 1) == 2);
    NA_CHECK(na_pcache_lookup(pc, &id, BB, b, 2, e) == 0);
    NA_CHECK(na_pcache_lookup(pc, &other, BB, a, 2, e) == 0);   /* another model, same tokens */
    NA_CHECK(put_chain(pc, &id, b, 1, 2) == 1);
    n = na_pcache_lookup(pc, &id, BB, b, 2, e);
    NA_CHECK_MSG(n == 1, "b's second block must miss (a's has its tokens, not its parent): %d", n);
    NA_CHECK(n >= 1 && holds(e[0], 2, 0));
    unref_all(pc, e, n);
    NA_CHECK(put_chain(pc, &id, b, 2, 2) == 2);
    n = na_pcache_lookup(pc, &id, BB, b, 2, e);
    NA_CHECK(n == 2 && holds(e[0], 2, 0) && holds(e[1], 2, 1));
    unref_all(pc, e, n);
    n = na_pcache_lookup(pc, &id, BB, a, 2, e);
    NA_CHECK(n == 2 && holds(e[0], 1, 0) && holds(e[1], 1, 1));
    unref_all(pc, e, n);
    na_pcache_stats(pc, &st);
    NA_CHECK(st.collisions > 0);
    na_pcache_destroy(pc);
}

/* A block whose memory changed after insert is never handed out. */
static void test_bad_sum(void)
{
    const uint32_t a[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    na_pcache_ident_t id;
    na_pcache_ent_t *e[2];
    na_pcache_stats_t st;
    na_pcache_t *pc = pc_new(8 * ENT, 0, &id, NULL);
    int n;

    NA_CHECK(put_chain(pc, &id, a, 2, 1) == 2);
    n = na_pcache_lookup(pc, &id, BB, a, 2, e);
    NA_CHECK(n == 2);
    if (n == 2)
        ((uint8_t *)(uintptr_t)na_pcache_mem(e[1], NL - 1))[BB - 1] ^= 1;   /* a flipped bit */
    unref_all(pc, e, n);
    n = na_pcache_lookup(pc, &id, BB, a, 2, e);
    NA_CHECK(n == 1);
    unref_all(pc, e, n);
    na_pcache_stats(pc, &st);
    NA_CHECK(st.bad_sums == 1 && st.entries == 1);
    na_pcache_destroy(pc);
}

/* The KV store of these tests: one layer, head_dim 8, blocks of BT f32
 * tokens, 1 MiB of DRAM, a spill every token, I/O depth 8. */
static void store_cfg(na_kv_store_cfg_t *c)
{
    memset(c, 0, sizeof(*c));
    c->n_layers = 1;
    c->head_dim = 8;
    c->block_tokens = BT;
    c->kv_dtype = NA_DTYPE_F32;
    c->spill_interval = 1;
    c->dram_bytes = 1u << 20;
    c->io_depth = 8;
}

/* The store reads an attached block like its own and never frees or
 * writes it; the request's own rows follow it. */
static void test_store_attach(void)
{
    na_kv_store_cfg_t c;
    na_kv_store_t *s;
    na_kv_view_t v;
    na_kv_req_t *r;
    void *shared;
    float k[2 * 8], vv[2 * 8];
    size_t bb;
    int i;

    store_cfg(&c);
    NA_CHECK_OK(na_kv_store_create(&c, &s));
    bb = na_kv_block_bytes(&c, 1);
    shared = calloc(1, bb);
    memset(shared, 0x5a, bb);
    NA_CHECK_OK(na_kv_open(s, 1, 3 * BT, 1));
    r = na_kv_find(s, 1);
    NA_CHECK_OK(na_kv_attach(s, r, 0, shared));
    NA_CHECK(na_kv_req_tokens(r, 0) == BT && na_kv_block_mem(r, 0, 0) == shared);
    for (i = 0; i < 16; i++)
        k[i] = vv[i] = (float)i;
    NA_CHECK_OK(na_kv_append(s, r, 0, k, vv, NA_DTYPE_F32, 0, 2, 0));
    NA_CHECK(na_kv_req_tokens(r, 0) == BT + 2);
    NA_CHECK(na_kv_attach(s, r, 0, shared) == NA_ERR_RANGE);        /* not on a partial block */
    NA_CHECK_OK(na_kv_view(s, r, 0, &v));
    NA_CHECK(v.n_blocks == 2 && v.blocks[0].mem == shared && v.blocks[1].mem != shared);
    na_kv_view_release(s, &v);
    NA_CHECK_OK(na_kv_close(s, 1));
    for (i = 0; i < (int)bb; i++)
        if (((uint8_t *)shared)[i] != 0x5a)
            break;
    NA_CHECK_MSG(i == (int)bb, "the shared block was written at byte %d", i);
    na_kv_store_destroy(s);
    free(shared);                 /* still ours: a double free shows under ASan */
}

/* A block kept on the SSD tier only is read back for the cache and checked:
 * the bytes written come back; a block the disk changed is refused with
 * NA_ERR_IO, never handed over. */
static void test_block_read_ssd(void)
{
    char dir[512], file[600];
    na_kv_store_cfg_t c;
    na_kv_store_t *s;
    na_kv_req_t *r;
    float k[2 * BT * 8], v[2 * BT * 8];
    uint8_t *buf;
    uint64_t off, len;
    size_t bb;
    int i, fd;

    if (na_kv_test_dir(dir, sizeof(dir)) != 0) {
        fprintf(stderr, "no O_DIRECT directory: SSD read-back not tested\n");
        return;
    }
    store_cfg(&c);
    c.ssd_bytes = 1u << 20;
    c.dir = dir;
    c.no_dram_tier = 1;                 /* whole blocks go to the SSD only */
    c.io_depth = 8;
    if (na_kv_store_create(&c, &s) != NA_OK) {
        fprintf(stderr, "kv store on %s: %s: SSD read-back not tested\n", dir, na_errmsg());
        na_test_rmtree(dir);
        return;
    }
    bb = na_kv_block_bytes(&c, 1);
    buf = na_kv_aligned_alloc(bb);
    for (i = 0; i < 2 * BT * 8; i++)
        k[i] = v[i] = (float)i * 0.5f;
    NA_CHECK_OK(na_kv_open(s, 1, 4 * BT, 1));
    r = na_kv_find(s, 1);
    NA_CHECK_OK(na_kv_append(s, r, 0, k, v, NA_DTYPE_F32, 0, 2 * BT, 1));
    NA_CHECK_OK(na_kv_flush(s, r));
    NA_CHECK(na_kv_block_mem(r, 0, 0) == NULL);          /* on the SSD only */
    NA_CHECK_OK(na_kv_block_read(s, r, 0, 0, buf));
    NA_CHECK(buf != NULL && memcmp(buf, k, 8 * sizeof(float)) == 0);   /* head 0, K row 0 */
    NA_CHECK(na_kv_block_read(s, r, 0, 2, buf) == NA_ERR_RANGE);        /* not held */
    /* the disk changes a byte of block 1 */
    na_kv_req_extent(r, &off, &len);
    snprintf(file, sizeof(file), "%s/kv.dat", dir);
    fd = open(file, O_RDWR);
    NA_CHECK(fd >= 0);
    if (fd >= 0) {
        uint8_t x = 0x77;
        NA_CHECK(pwrite(fd, &x, 1, (off_t)(off + NA_KV_ALIGN + bb + 5)) == 1);
        fsync(fd);
        close(fd);
    }
    NA_CHECK(na_kv_block_read(s, r, 0, 1, buf) == NA_ERR_IO);
    NA_CHECK(strstr(na_errmsg(), "checksum") != NULL);
    NA_CHECK_OK(na_kv_close(s, 1));
    na_kv_store_destroy(s);
    na_kv_aligned_free(buf);
    na_test_rmtree(dir);
}

int main(void)
{
    test_hits_and_refs();
    test_lru_budget();
    test_forced_collision();
    test_bad_sum();
    test_store_attach();
    test_block_read_ssd();
    return na_test_finish();
}

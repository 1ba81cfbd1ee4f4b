/* tests/unit/test_kv_store.c — the KV store of a slot (storage-node/
 * kv_store.c, kv_dram.c, writeback.c): block tables, tiers and budgets,
 * delayed writeback and its durable header, faults and bad input. */
#define _GNU_SOURCE            /* O_DIRECT (kv_fault_io.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "storage-node/kv_store.h"
#include "tests/testutil.h"
#include "tests/unit/kv_fault_io.h"

#define HD  64
#define BT  16
#define KVH 2
#define BS  (KVH * 2 * BT * HD * 2)          /* 8 KiB block */

static char g_dir[512];
static na_dtype_t g_kv_dtype = NA_DTYPE_F16;    /* the stores' KV dtype (2-byte: BS holds) */

static void cfg_init(na_kv_store_cfg_t *c, const char *sub, uint64_t dram, uint64_t ssd)
{
    static char d[600];
    snprintf(d, sizeof(d), "%s/%s-%s", g_dir, na_dtype_name(g_kv_dtype), sub);
    (void)mkdir(d, 0700);
    memset(c, 0, sizeof(*c));
    c->n_layers = 2;
    c->head_dim = HD;
    c->block_tokens = BT;
    c->kv_dtype = g_kv_dtype;
    c->spill_interval = 4;
    c->dram_bytes = dram;
    c->ssd_bytes = ssd;
    c->dir = d;
    c->io_depth = 8;
}

static float *rows(int n, uint64_t seed)
{
    na_rng_t rng;
    float *x = malloc(sizeof(float) * (size_t)n * KVH * HD);
    na_rng_seed(&rng, seed);
    na_rng_fill(&rng, x, (size_t)n * KVH * HD, -2.0f, 2.0f);
    return x;
}

/* Check row t of (r, layer) in a view against src (f32 rounded to the KV
 * dtype); only for blocks held in memory. */
static int row_ok(const na_kv_view_t *v, int t, const float *k)
{
    const na_kv_block_t *b = &v->blocks[t / BT];
    int h, i;
    if (b->mem == NULL)
        return 1;
    for (h = 0; h < KVH; h++) {
        const uint16_t *kr = (const uint16_t *)((const char *)b->mem + (size_t)h * 2 * BT * HD * 2) +
                             (size_t)(t % BT) * HD;
        for (i = 0; i < HD; i++)
            if (kr[i] != (g_kv_dtype == NA_DTYPE_BF16
                          ? na_f32_to_bf16(k[(size_t)t * KVH * HD + h * HD + i])
                          : na_f32_to_f16(k[(size_t)t * KVH * HD + h * HD + i])))
                return 0;
    }
    return 1;
}

static void test_budgets(void)
{
    na_kv_store_cfg_t c;
    na_kv_store_t *s;
    na_kv_view_t v;
    na_kv_stats_t st;
    float *k = rows(200, 1), *vv = rows(200, 2);
    int t, n_dram = 0, n_ssd = 0, b;
    uint64_t ext_len;

    /* DRAM only: every block reserved at open; the second request is refused */
    cfg_init(&c, "dram", 2u * 2 * 13 * BS, 0);
    NA_CHECK_OK(na_kv_store_create(&c, &s));
    NA_CHECK_OK(na_kv_open(s, 1, 200, KVH));                 /* 13 blocks x 2 layers */
    NA_CHECK(na_kv_open(s, 2, 300, KVH) == NA_ERR_NOSPACE);
    NA_CHECK(strstr(na_errmsg(), "DRAM budget") != NULL);
    NA_CHECK_OK(na_kv_open(s, 3, 200, KVH));                 /* exactly fits */
    NA_CHECK_OK(na_kv_append(s, na_kv_find(s, 1), 0, k, vv, NA_DTYPE_F32, 0, 200, 1));
    NA_CHECK_OK(na_kv_view(s, na_kv_find(s, 1), 0, &v));
    NA_CHECK(v.n_tokens == 200 && v.n_blocks == 13 && v.fd == -1);
    for (t = 0; t < 200; t++)
        NA_CHECK(row_ok(&v, t, k));
    NA_CHECK(v.blocks[0].loc == NA_KV_LOC_DRAM && v.blocks[12].loc == NA_KV_LOC_BUF);
    na_kv_view_release(s, &v);
    NA_CHECK_OK(na_kv_close(s, 1));
    NA_CHECK_OK(na_kv_open(s, 2, 200, KVH));                 /* space reused */
    na_kv_store_destroy(s);

    /* SSD: DRAM budget = buffers of 2 requests + 3 blocks -> the rest of a
     * prompt goes to the SSD */
    ext_len = 4096 + 2ull * 13 * BS;
    cfg_init(&c, "mixed", 2u * 2 * 2 * BS + 7 * BS, 2 * ext_len + 4096);
    NA_CHECK_OK(na_kv_store_create(&c, &s));
    NA_CHECK_OK(na_kv_open(s, 1, 200, KVH));
    NA_CHECK_OK(na_kv_open(s, 2, 200, KVH));
    NA_CHECK(na_kv_open(s, 3, 200, KVH) == NA_ERR_NOSPACE);  /* SSD full: refused */
    na_kv_stats(s, &st);
    NA_CHECK(st.dram_used == 8u * BS);                       /* its reservation undone */
    NA_CHECK(strstr(na_errmsg(), "SSD tier") != NULL && strstr(na_errmsg(), "request 3") != NULL);
    NA_CHECK(na_kv_find(s, 3) == NULL);
    NA_CHECK_OK(na_kv_append(s, na_kv_find(s, 1), 0, k, vv, NA_DTYPE_F32, 0, 200, 1));
    NA_CHECK_OK(na_kv_append(s, na_kv_find(s, 2), 1, k, vv, NA_DTYPE_F32, 0, 150, 1));
    NA_CHECK_OK(na_kv_poll(s, 1));
    NA_CHECK_OK(na_kv_view(s, na_kv_find(s, 1), 0, &v));
    for (b = 0; b < v.n_blocks; b++) {
        n_dram += v.blocks[b].loc == NA_KV_LOC_DRAM;
        n_ssd += v.blocks[b].loc == NA_KV_LOC_SSD;
    }
    NA_CHECK_MSG(n_dram == 7 && n_ssd == 5, "dram %d ssd %d", n_dram, n_ssd);
    for (t = 0; t < 200; t++)
        NA_CHECK(row_ok(&v, t, k));
    na_kv_view_release(s, &v);
    na_kv_stats(s, &st);
    NA_CHECK(st.dram_used <= st.dram_budget);
    NA_CHECK(st.n_refused == 1 && st.n_requests == 2);
    NA_CHECK(st.bytes_written_ssd >= 21ull * BS);
    NA_CHECK(st.bytes_spilled_dram == 7u * BS);
    NA_CHECK_OK(na_kv_close(s, 1));
    NA_CHECK_OK(na_kv_open(s, 3, 200, KVH));                 /* extent reused */
    NA_CHECK_OK(na_kv_close(s, 3));
    NA_CHECK_OK(na_kv_close(s, 2));
    na_kv_stats(s, &st);
    NA_CHECK(st.dram_used == 0 && st.ssd_used == 0);
    na_kv_store_destroy(s);
    free(k);
    free(vv);
}

static void test_writeback(void)
{
    na_kv_store_cfg_t c;
    na_kv_store_t *s;
    na_kv_req_t *r;
    na_kv_view_t v;
    float *k = rows(64, 3), *vv = rows(64, 4);
    int tok[2], t;
    uint64_t seq, seq2;

    cfg_init(&c, "wb", 1u << 20, 1u << 20);
    c.no_dram_tier = 1;
    NA_CHECK_OK(na_kv_store_create(&c, &s));
    NA_CHECK_OK(na_kv_open(s, 7, 60, KVH));
    r = na_kv_find(s, 7);
    NA_CHECK_OK(na_kv_read_header(s, 7, &seq, tok, 2));
    NA_CHECK(tok[0] == 0 && tok[1] == 0);
    NA_CHECK_OK(na_kv_append(s, r, 0, k, vv, NA_DTYPE_F32, 0, 30, 1));   /* prefill */
    NA_CHECK_OK(na_kv_flush(s, r));
    NA_CHECK_OK(na_kv_read_header(s, 7, &seq2, tok, 2));
    NA_CHECK(seq2 == seq && tok[0] == 30 && tok[1] == 0);
    for (t = 30; t < 33; t++)                                           /* 3 steps < 4 */
        NA_CHECK_OK(na_kv_append(s, r, 0, k + t * KVH * HD, vv + t * KVH * HD,
                                 NA_DTYPE_F32, 0, 1, 0));
    NA_CHECK_OK(na_kv_read_header(s, 7, &seq2, tok, 2));
    NA_CHECK_MSG(tok[0] == 30, "rows not spilled yet must not be durable: %d", tok[0]);
    NA_CHECK_OK(na_kv_view(s, r, 0, &v));                               /* buffer feeds attention */
    NA_CHECK(v.n_tokens == 33 && v.blocks[2].loc == NA_KV_LOC_BUF);
    NA_CHECK(row_ok(&v, 32, k));
    /* the 4th step spills while the view is held: the block stays readable */
    NA_CHECK(na_kv_append(s, r, 0, k, vv, NA_DTYPE_F32, 0, 1, 0) == NA_ERR_BUSY);
    na_kv_view_release(s, &v);
    {   /* a decode step's spill waits for the loop's next poll (after the
         * step was answered) */
        na_kv_stats_t k0, k1;
        na_kv_stats(s, &k0);
        NA_CHECK_OK(na_kv_append(s, r, 0, k + 33 * KVH * HD, vv + 33 * KVH * HD, NA_DTYPE_F32,
                                 0, 1, 0));
        na_kv_stats(s, &k1);
        NA_CHECK_MSG(k1.n_spills == k0.n_spills, "the 4th step spilled in the append");
        NA_CHECK_OK(na_kv_poll(s, 0));
        na_kv_stats(s, &k1);
        NA_CHECK_MSG(k1.n_spills == k0.n_spills + 1, "the poll did not spill the 4th step");
    }
    NA_CHECK_OK(na_kv_poll(s, 1));
    NA_CHECK_OK(na_kv_read_header(s, 7, &seq2, tok, 2));
    NA_CHECK(tok[0] == 34);
    NA_CHECK_OK(na_kv_view(s, r, 0, &v));
    NA_CHECK(v.blocks[0].loc == NA_KV_LOC_SSD && v.blocks[1].loc == NA_KV_LOC_SSD &&
             v.blocks[2].loc == NA_KV_LOC_BUF);
    na_kv_view_release(s, &v);
    NA_CHECK_OK(na_kv_flush(s, r));
    {   /* no poll after the 4th step: the 5th step's append spills (the
         * buffer never holds more than one step past the interval) */
        na_kv_stats_t k0, k1;
        na_kv_stats(s, &k0);
        for (t = 34; t < 38; t++)
            NA_CHECK_OK(na_kv_append(s, r, 0, k + t * KVH * HD, vv + t * KVH * HD,
                                     NA_DTYPE_F32, 0, 1, 0));
        na_kv_stats(s, &k1);
        NA_CHECK(k1.n_spills == k0.n_spills);
        NA_CHECK_OK(na_kv_append(s, r, 0, k + 38 * KVH * HD, vv + 38 * KVH * HD, NA_DTYPE_F32,
                                 0, 1, 0));
        na_kv_stats(s, &k1);
        NA_CHECK_MSG(k1.n_spills == k0.n_spills + 1, "the 5th step did not spill");
        NA_CHECK_OK(na_kv_poll(s, 1));                  /* nothing left due */
        na_kv_stats(s, &k1);
        NA_CHECK(k1.n_spills == k0.n_spills + 1);
        NA_CHECK_OK(na_kv_flush(s, r));
    }
    /* bad input leaves the request as it was */
    NA_CHECK(na_kv_append(s, r, 2, k, vv, NA_DTYPE_F32, 0, 1, 0) == NA_ERR_RANGE);
    NA_CHECK(na_kv_append(s, r, 0, k, vv, g_kv_dtype == NA_DTYPE_BF16 ? NA_DTYPE_F16
                                                                      : NA_DTYPE_BF16,
                          0, 1, 0) == NA_ERR_INVALID);      /* rows of another 2-byte type */
    NA_CHECK(na_kv_append(s, r, 0, k, vv, NA_DTYPE_F32, 0, 27, 0) == NA_ERR_RANGE);
    NA_CHECK(na_kv_req_tokens(r, 0) == 39);
    NA_CHECK(na_kv_close(s, 8) == NA_ERR_NOT_FOUND);
    NA_CHECK_OK(na_kv_close(s, 7));
    na_kv_store_destroy(s);
    free(k);
    free(vv);
}

static void test_write_fault(void)
{
    na_kv_store_cfg_t c;
    na_kv_store_t *s;
    na_kv_fault_t f;
    float *k = rows(64, 5), *vv = rows(64, 6);
    uint64_t off, len;
    na_status_t st;

    memset(&f, 0, sizeof(f));
    cfg_init(&c, "wfault", 1u << 20, 1u << 20);
    c.io_factory = na_kv_fault_factory;
    c.io_arg = &f;
    NA_CHECK_OK(na_kv_store_create(&c, &s));
    NA_CHECK_OK(na_kv_open(s, 1, 60, KVH));
    NA_CHECK_OK(na_kv_open(s, 2, 60, KVH));
    na_kv_req_extent(na_kv_find(s, 2), &off, &len);
    f.mode = NA_FAULT_ERROR;
    f.on_writes = 1;
    f.lo = off + 4096;                 /* its data, not its header */
    f.hi = off + len;
    NA_CHECK_OK(na_kv_append(s, na_kv_find(s, 1), 0, k, vv, NA_DTYPE_F32, 0, 40, 1));
    NA_CHECK_OK(na_kv_flush(s, na_kv_find(s, 1)));
    st = na_kv_append(s, na_kv_find(s, 2), 0, k, vv, NA_DTYPE_F32, 0, 40, 1);
    if (st == NA_OK)                   /* asynchronous: the flush reports it */
        st = na_kv_flush(s, na_kv_find(s, 2));
    NA_CHECK(st == NA_ERR_IO);
    NA_CHECK(strstr(na_errmsg(), "spill write") != NULL);
    NA_CHECK(na_kv_req_check(na_kv_find(s, 2)) == NA_ERR_IO);          /* stays failed */
    NA_CHECK_OK(na_kv_req_check(na_kv_find(s, 1)));                    /* the other goes on */
    NA_CHECK_OK(na_kv_append(s, na_kv_find(s, 1), 1, k, vv, NA_DTYPE_F32, 0, 40, 1));
    NA_CHECK_OK(na_kv_close(s, 2));
    NA_CHECK_OK(na_kv_open(s, 2, 60, KVH));
    NA_CHECK(f.hits > 0);
    na_kv_store_destroy(s);
    free(k);
    free(vv);
}

int main(void)
{
    na_kv_store_cfg_t c;
    na_kv_store_t *s;
    na_status_t st;

    if (na_kv_test_dir(g_dir, sizeof(g_dir)) != 0)
        NA_SKIP("no temporary directory on a file system that takes O_DIRECT");
    cfg_init(&c, "probe", 1u << 20, 1u << 20);
    st = na_kv_store_create(&c, &s);
    if (st == NA_ERR_UNSUPPORTED) {
        na_test_rmtree(g_dir);
        NA_SKIP("%s", na_errmsg());
    }
    NA_CHECK_OK(st);
    if (st == NA_OK)
        na_kv_store_destroy(s);
    c.block_tokens = 0;
    NA_CHECK(na_kv_store_create(&c, &s) == NA_ERR_RANGE);
    c.block_tokens = BT;
    c.kv_dtype = NA_DTYPE_Q8_0;
    NA_CHECK(na_kv_store_create(&c, &s) == NA_ERR_UNSUPPORTED);

    test_budgets();
    test_writeback();
    test_write_fault();
    g_kv_dtype = NA_DTYPE_BF16;     /* the same tiers and writeback with bf16 rows */
    test_budgets();
    test_writeback();
    na_test_rmtree(g_dir);
    return na_test_finish();
}

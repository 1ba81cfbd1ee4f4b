/* tests/unit/test_slotset.c — the storage engine table and the slot set
 * (storage-node/attn_engine.c, storage-node/slotset.c, common/engines.c):
 * the registry agrees with the engine table; unknown and unbuilt engines
 * are refused with a clear message by config validation and by slot
 * construction; an engine's test() reports a running batch as not done,
 * then done; slot construction from a layout honours kv.tier (dram: no SSD
 * file) and the KV element size (f32 placement accounts 4-byte elements,
 * also in the in-process service, cluster/inproc.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/inproc.h"
#include "common/config.h"
#include "common/engines.h"
#include "common/log.h"
#include "storage-node/slotset.h"
#include "tests/testutil.h"

static char g_dir[512];

/* Write a one-storage-node layout (two devices) and load it. */
static na_status_t layout(const char *name, const char *engine, const char *kv_dtype,
                          const char *tier, int dram_mb, int ssd_mb, na_cfg_t **cfg_p)
{
    char path[700];
    FILE *f;
    int d;

    snprintf(path, sizeof(path), "%s/%s.yaml", g_dir, name);
    f = na_test_layout_begin(path, "t");
    if (f == NULL)
        return NA_ERR_IO;
    fprintf(f, "model: { kv_dtype: %s }\n", kv_dtype);
    fprintf(f, "compute:\n  - { name: c0, host: 127.0.0.1 }\nstorage:\n");
    fprintf(f, "  - name: s0\n    host: 127.0.0.1\n    port: 14900\n    devices:\n");
    for (d = 0; d < 2; d++)
        fprintf(f, "      - { path: \"%s/%s/d%d\", engine: %s, dram_mb: %d, ssd_mb: %d }\n",
                g_dir, name, d, engine, dram_mb, ssd_mb);
    fprintf(f, "parallel: { partition: head }\nkv: { block_tokens: 16, tier: %s }\n", tier);
    fclose(f);
    for (d = 0; d < 2; d++) {         /* nodes make their directories when they start */
        char dir[800];
        snprintf(dir, sizeof(dir), "%s/%s", g_dir, name);
        (void)mkdir(dir, 0700);
        snprintf(dir, sizeof(dir), "%s/%s/d%d", g_dir, name, d);
        (void)mkdir(dir, 0700);
    }
    return na_cfg_load(path, cfg_p);
}

static int exists(const char *name, int d)
{
    char p[800];
    snprintf(p, sizeof(p), "%s/%s/d%d/kv.dat", g_dir, name, d);
    return access(p, F_OK) == 0;
}

/* An engine name known but not built here, and the built list: cuda is
 * built with the CUDA toolkit (storage-node/attn_cuda.c), csd is not. */
#if NA_HAVE_CUDA_ENGINE && NA_HAVE_CSD_ENGINE
#define BUILT_LIST "cpu, cuda, csd"          /* nothing left unbuilt */
#elif NA_HAVE_CUDA_ENGINE
#define UNBUILT "csd"
#define BUILT_LIST "cpu, cuda"
#elif NA_HAVE_CSD_ENGINE
#define UNBUILT "cuda"
#define BUILT_LIST "cpu, csd"
#else
#define UNBUILT "cuda"
#define BUILT_LIST "cpu"
#endif

/* 1. One registry: names, built flags, the engine table, clear refusals. */
static void test_registry(void)
{
    na_kv_store_cfg_t kc;
    na_kv_store_t *store;
    na_attn_engine_cfg_t ec;
    na_attn_engine_t *e = NULL;
    int id;

    for (id = 0; id < NA_ENGINE_COUNT; id++) {
        NA_CHECK(na_engines_find(na_engines_names[id]) == id);
        NA_CHECK_MSG(na_engines_has(id) == na_attn_engine_has(id),
                     "engine %s: registry says built %d, the engine table %d",
                     na_engines_names[id], na_engines_has(id), na_attn_engine_has(id));
    }
    NA_CHECK(!strcmp(na_engines_list(), BUILT_LIST));
    NA_CHECK_OK(na_engines_check("cpu"));
#ifdef UNBUILT
    NA_CHECK(na_engines_check(UNBUILT) == NA_ERR_UNSUPPORTED);
    NA_CHECK_MSG(strstr(na_errmsg(), "'" UNBUILT "' is not built") &&
                 strstr(na_errmsg(), "built: " BUILT_LIST),
                 "message: %s", na_errmsg());
#endif
    NA_CHECK(na_engines_check("warp") == NA_ERR_NOT_FOUND);
    NA_CHECK_MSG(strstr(na_errmsg(), "'warp' is unknown") && strstr(na_errmsg(), "cpu, cuda, csd"),
                 "message: %s", na_errmsg());

    memset(&kc, 0, sizeof(kc));
    kc.n_layers = 1;
    kc.head_dim = 64;
    kc.block_tokens = 16;
    kc.kv_dtype = NA_DTYPE_F16;
    kc.spill_interval = 2;
    kc.dram_bytes = 1 << 20;
    kc.io_depth = 8;
    NA_CHECK_OK(na_kv_store_create(&kc, &store));
    na_attn_engine_cfg_default(&ec);
#if !NA_HAVE_CSD_ENGINE
    NA_CHECK(na_attn_engine_create("csd", store, &ec, &e) == NA_ERR_UNSUPPORTED);
#endif
    NA_CHECK(na_attn_engine_create("warp", store, &ec, &e) == NA_ERR_NOT_FOUND);
    NA_CHECK(e == NULL);
    NA_CHECK_OK(na_attn_engine_create("cpu", store, &ec, &e));
    NA_CHECK(e != NULL && !strcmp(na_attn_engine_kind(e), "cpu"));
    na_attn_engine_destroy(e);
    na_kv_store_destroy(store);
}

/* 2. Config validation and slot construction refuse an unbuilt engine. */
static void test_unbuilt_refused(void)
{
#ifndef UNBUILT
    printf("test_unbuilt_refused: every engine is built here, nothing to refuse\n");
}
#else
    na_slotset_spec_t spec;
    na_slotset_t *ss = NULL;
    na_cfg_t *cfg = NULL;

    NA_CHECK(layout(UNBUILT, UNBUILT, "f16", "auto", 8, 16, &cfg) == NA_ERR_UNSUPPORTED);
    NA_CHECK_MSG(strstr(na_errmsg(), "engine " UNBUILT " is not built into this nearattn") &&
                 strstr(na_errmsg(), "available: cpu"), "message: %s", na_errmsg());
    NA_CHECK(layout("warp", "warp", "f16", "auto", 8, 16, &cfg) != NA_OK);
    NA_CHECK_MSG(strstr(na_errmsg(), "warp") != NULL, "message: %s", na_errmsg());

    /* the node's path (the layout was validated elsewhere): slot construction */
    NA_CHECK_OK(layout("cpu", "cpu", "f16", "auto", 8, 16, &cfg));
    if (cfg == NULL)
        return;
    NA_CHECK_OK(na_slotset_spec_layout(cfg, na_cfg_find_node(cfg, "s0"), &spec));
    spec.common.kv.n_layers = 2;
    spec.common.n_heads = spec.common.n_kv_heads = 2;
    spec.common.kv.head_dim = 64;
    spec.devs[1].engine = UNBUILT;
    NA_CHECK(na_slotset_create(&spec, &ss) == NA_ERR_UNSUPPORTED);
    NA_CHECK_MSG(strstr(na_errmsg(), "/cpu/d1") &&
                 strstr(na_errmsg(), "'" UNBUILT "' is not built"),
                 "message: %s", na_errmsg());
    NA_CHECK(ss == NULL);
    na_cfg_destroy(cfg);
}
#endif

/* 3. test(): a long batch is not done at once, then done, with the same
 * output as a blocking wait. */
static void test_engine_test(void)
{
    const int hd = 64, nkvh = 4, ntok = 32768;
    na_slotset_spec_t spec;
    na_slotset_t *ss;
    na_slotset_req_t r;
    const na_slotset_req_t *rp = &r;
    na_slotset_batch_t *b;
    na_attn_entry_t e;
    na_cfg_t *cfg;
    float *k = malloc(sizeof(float) * (size_t)ntok * nkvh * hd), q[4 * 64], o1[4 * 64],
          o2[4 * 64], kn[4 * 64];
    int i, polls = 0, first;

    for (i = 0; i < ntok * nkvh * hd; i++)
        k[i] = (float)((long)(((unsigned)i * 7919u) % 2001u) - 1000) / 1000.0f;
    for (i = 0; i < nkvh * hd; i++)
        q[i] = kn[i] = (float)(i % 17 - 8) / 8.0f;
    NA_CHECK_OK(layout("test", "cpu", "f16", "dram", 64, 16, &cfg));
    NA_CHECK_OK(na_slotset_spec_layout(cfg, NULL, &spec));
    spec.common.kv.n_layers = 1;
    spec.common.n_heads = spec.common.n_kv_heads = nkvh;
    spec.common.kv.head_dim = hd;
    spec.partition = NA_PART_REQUEST;
    NA_CHECK_OK(na_slotset_create(&spec, &ss));
    NA_CHECK_OK(na_slotset_open(ss, &r, 1, ntok + 4, nkvh));
    NA_CHECK_OK(na_slotset_prefill(ss, &r, 0, k, k, NA_DTYPE_F32, 0, ntok));
    NA_CHECK_OK(na_slotset_prefill_done(ss, &r));

    memset(&e, 0, sizeof(e));
    e.layer = 0;
    e.n_kv_heads = e.n_q_heads = nkvh;
    e.q = q;
    e.o = o1;
    NA_CHECK_OK(na_slotset_batch_begin(ss, &b));
    NA_CHECK_OK(na_slotset_batch_add(ss, b, &rp, &e, 1));
    NA_CHECK(na_slotset_batch_test(ss, b, 0) == 0);      /* not closed: never done */
    na_slotset_batch_close(ss, b);
    /* the workers start at add, so on a loaded machine the batch may already
     * be done here: say which, the check is that test() gets there */
    first = na_slotset_batch_test(ss, b, 0);
    while (!first && !na_slotset_batch_test(ss, b, 1000))
        polls++;
    NA_CHECK(e.status == NA_OK);
    printf("test(): %s at close, done after %d polls of 1 ms\n",
           first ? "already done" : "not done", polls);

    e.o = o2;                            /* the same again, reaped by wait */
    NA_CHECK_OK(na_slotset_batch_begin(ss, &b));
    NA_CHECK_OK(na_slotset_batch_add(ss, b, &rp, &e, 1));
    na_slotset_batch_wait(ss, b);
    NA_CHECK(e.status == NA_OK && memcmp(o1, o2, sizeof(o1)) == 0);

    e.req = 0;                           /* a new row appended: decode entry */
    e.k_new = e.v_new = kn;
    NA_CHECK_OK(na_slotset_batch_begin(ss, &b));
    NA_CHECK_OK(na_slotset_batch_add(ss, b, &rp, &e, 1));
    na_slotset_batch_wait(ss, b);
    NA_CHECK(e.status == NA_OK && na_slotset_tokens(ss, &r, 0) == ntok + 1);
    NA_CHECK_OK(na_slotset_release(ss, &r));
    na_slotset_destroy(ss);
    na_cfg_destroy(cfg);
    free(k);
}

/* 4. kv.tier from the layout: dram makes no SSD file, auto does. */
static void test_tier(void)
{
    na_slotset_spec_t spec;
    na_slotset_t *ss;
    na_cfg_t *cfg;
    const char *names[2] = { "tier_dram", "tier_auto" };
    int t;

    for (t = 0; t < 2; t++) {
        NA_CHECK_OK(layout(names[t], "cpu", "f16", t == 0 ? "dram" : "auto", 8, 16, &cfg));
        NA_CHECK_OK(na_slotset_spec_layout(cfg, na_cfg_find_node(cfg, "s0"), &spec));
        spec.common.kv.n_layers = 2;
        spec.common.n_heads = spec.common.n_kv_heads = 2;
        spec.common.kv.head_dim = 64;
        NA_CHECK_OK(na_slotset_create(&spec, &ss));
        NA_CHECK_MSG(exists(names[t], 0) == (t == 1) && exists(names[t], 1) == (t == 1),
                     "kv.tier %s: kv.dat %s", t == 0 ? "dram" : "auto",
                     t == 0 ? "created" : "missing");
        NA_CHECK(na_slot_capacity(&spec.common, &spec.devs[0]) ==
                 (uint64_t)(t == 0 ? 8 : 16) << 20);
        na_slotset_destroy(ss);
        na_cfg_destroy(cfg);
    }
}

/* 5. Element size from the dtype: f32 KV takes 4 bytes an element in
 * placement, in the slot set and in the in-process service. */
static void test_f32_placement(void)
{
    na_model_config_t mc;
    na_slotset_spec_t spec;
    na_slotset_t *ss;
    na_slotset_req_t r;
    na_asvc_t *svc;
    na_cfg_t *c16, *c32;
    /* 2 layers, 2 KV heads of 64: one token is 2*2*2*64 elements; the SSD
     * budget of 1 MiB per slot (head partition: one head per slot) holds
     * 1 MiB / (2*2*64*es) = 2048 tokens of f16, 1024 of f32 */
    const int tokens = 1536;

    NA_CHECK_OK(layout("f16", "cpu", "f16", "auto", 1, 1, &c16));
    NA_CHECK_OK(layout("f32", "cpu", "f32", "auto", 1, 1, &c32));
    if (c16 == NULL || c32 == NULL)
        return;
    NA_CHECK_OK(na_slotset_spec_layout(c32, NULL, &spec));
    spec.common.kv.n_layers = 2;
    spec.common.n_heads = spec.common.n_kv_heads = 2;
    spec.common.kv.head_dim = 64;
    NA_CHECK(spec.common.kv.kv_dtype == NA_DTYPE_F32);
    NA_CHECK_OK(na_slotset_create(&spec, &ss));
    NA_CHECK(na_slotset_bytes_per_kvh(ss, 100) == 100u * 2 * 2 * 64 * 4);
    /* more than the budget even with nothing open: RANGE (waiting cannot
     * help), naming the budget */
    NA_CHECK(na_slotset_open(ss, &r, 7, tokens, 2) == NA_ERR_RANGE);
    NA_CHECK_MSG(strstr(na_errmsg(), "KV budget of any slot here (1.0 MiB, "
                        "storage[].devices[].ssd_mb)") != NULL, "message: %s", na_errmsg());
    NA_CHECK_OK(na_slotset_open(ss, &r, 7, 1000, 2));
    {   /* fits when empty, not beside request 7: NOSPACE (it may wait) */
        na_slotset_req_t r2;
        NA_CHECK(na_slotset_open(ss, &r2, 8, 1000, 2) == NA_ERR_NOSPACE);
        NA_CHECK_MSG(strstr(na_errmsg(), "of its KV budget (1.0 MiB") != NULL, "message: %s",
                     na_errmsg());
    }
    NA_CHECK_OK(na_slotset_release(ss, &r));
    na_slotset_destroy(ss);

    memset(&mc, 0, sizeof(mc));
    mc.n_layers = 2;
    mc.n_heads = mc.n_kv_heads = 2;
    mc.head_dim = 64;
    NA_CHECK_OK(na_inproc_create(c16, &mc, &svc));
    NA_CHECK_OK(na_asvc_open(svc, 1, tokens));          /* f16: fits */
    na_asvc_destroy(svc);
    NA_CHECK_OK(na_inproc_create(c32, &mc, &svc));
    NA_CHECK(na_asvc_open(svc, 1, tokens) == NA_ERR_RANGE);     /* f32: twice the bytes */
    NA_CHECK_MSG(strstr(na_errmsg(), "(1572864 bytes)") != NULL, "message: %s", na_errmsg());
    NA_CHECK_OK(na_asvc_open(svc, 2, 1000));
    na_asvc_destroy(svc);
    na_cfg_destroy(c16);
    na_cfg_destroy(c32);
}

int main(void)
{
    na_log_set_level(NA_LOG_LEVEL_ERROR);
    if (na_test_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return 1;
    test_registry();
    test_unbuilt_refused();
    test_engine_test();
    test_tier();
    test_f32_placement();
    na_test_rmtree(g_dir);
    return na_test_finish();
}

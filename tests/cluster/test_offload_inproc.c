/* tests/cluster/test_offload_inproc.c — offloaded generation (compute-node/
 * offload.c, sched.c, xcache.c) against the storage node's device slots in
 * this process (cluster/inproc.c): the same greedy tokens as the
 * monolithic engine for request / head partition, 1 and 3 slots, 1..3
 * batches in flight, KV forced to DRAM and to SSD, spill intervals 1 and 4,
 * X-cache on and off (MHA), prompts prefilled on the slots in chunks of
 * 1, 7, 64 and the default (more than any prompt here: one chunk), with
 * requests admitted while others decode (max_batch 2: chunks interleaved
 * with decode rows); X-cache is refused for GQA. (Queueing past a
 * storage budget: tests/cluster/test_offload_run.sh queue.) Models: stories260K (GQA) and generated MHA / GQA ones,
 * and one of each architecture (llama3's rope_freqs, qwen2's biases, qwen3's
 * q/k norms with key_length != dim/heads, partial RoPE with yarn scaling;
 * MHA ones also through the X-cache's K/V regeneration). Prefix reuse:
 * prompts sharing a prefix give the monolithic tokens with the shared
 * blocks attached (test_prefix). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "cluster/inproc.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"
#include "tests/testutil.h"

#define N_REQ   6
#define MAX_NEW 10

typedef struct {
    const char *partition;
    int         slots;
    int         bif;
    const char *tier;
    int         spill;
    int         xcache;
    int         dram_mb;        /* per slot */
    int         max_batch;
    int         chunk;          /* prefill_chunk (0: the default) */
    int         weighted;       /* prefill_weighted: the budget weighs tokens by position */
} variant_t;

static char g_tmp[512];

/* Write a layout for variant v into the temp dir and load it. */
static na_status_t load_layout(const variant_t *v, int idx, na_cfg_t **cfg_p)
{
    char path[700], kvdir[600];

    snprintf(path, sizeof(path), "%s/layout%d.yaml", g_tmp, idx);
    snprintf(kvdir, sizeof(kvdir), "%s/kv%d", g_tmp, idx);
    if (na_test_layout_write(path, "t", v->slots, 14100, kvdir, v->dram_mb,
                             "parallel: { partition: %s, batches_in_flight: %d, "
                             "max_batch: %d }\n"
                             "kv: { block_tokens: 16, spill_interval: %d, tier: %s }\n"
                             "xcache: { enabled: %s, host_mb: 64, share: 0.5 }\n",
                             v->partition, v->bif, v->max_batch, v->spill, v->tier,
                             v->xcache ? "true" : "false") != NA_OK)
        return NA_ERR_IO;
    return na_cfg_load(path, cfg_p);
}

static void make_requests(na_engine_t *e, na_request_t **r, int vocab, int seq_len)
{
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    uint64_t rng = 12345;
    int i;

    for (i = 0; i < N_REQ; i++) {
        int n = 3 + (i * 7) % 23, toks[64];
        if (n > seq_len - MAX_NEW)
            n = seq_len - MAX_NEW;
        na_test_prompt(&rng, toks, n, vocab);
        NA_CHECK_OK(na_request_create(e, i, toks, n, MAX_NEW, &sc, &r[i]));
    }
}

static void free_requests(na_request_t **r)
{
    int i;
    for (i = 0; i < N_REQ; i++)
        na_request_destroy(r[i]);
}

static int g_errors;
static void on_error(void *user, const na_request_t *r, na_status_t st, const char *why)
{
    (void)user;
    fprintf(stderr, "request %d failed (%s): %s\n", r->id, na_status_string(st), why);
    g_errors++;
}

/* The monolithic side: a model and its engine (cpu, 1 thread, f16 KV). */
typedef struct {
    na_model_t  *m;
    na_engine_t *e;
} mono_t;

/* 0, or -1 after a failed check (nothing to close). */
static int mono_open(mono_t *mo, const char *path)
{
    na_engine_opts_t eo = { "cpu", 1, NA_DTYPE_F16, 0 };

    mo->e = NULL;
    if (na_model_open(path, &mo->m) != NA_OK) {
        NA_CHECK_MSG(0, "cannot open %s", path);
        return -1;
    }
    NA_CHECK_OK(na_engine_create(mo->m, &eo, &mo->e));
    if (mo->e == NULL) {
        na_model_destroy(mo->m);
        return -1;
    }
    return 0;
}

/* The monolithic greedy outputs of ref[0..n), generated together. */
static void mono_reference(const mono_t *mo, na_request_t **ref, int n)
{
    na_gen_opts_t go;
    int stop = -1;

    memset(&go, 0, sizeof(go));
    go.max_batch = n;
    go.stop_ids = &stop;
    NA_CHECK_OK(na_generate(mo->e, ref, n, &go, NULL));
}

/* ref[0..n) destroyed, then the engine and the model. */
static void mono_close(mono_t *mo, na_request_t **ref, int n)
{
    int i;
    for (i = 0; i < n; i++)
        na_request_destroy(ref[i]);
    na_engine_destroy(mo->e);
    na_model_destroy(mo->m);
}

/* The in-process storage service of variant v (layout idx) for the model
 * mc, its layout in *cfg_p: the service, or NULL after a failed check. */
static na_asvc_t *variant_service(const variant_t *v, int idx, const na_model_config_t *mc,
                                  na_cfg_t **cfg_p)
{
    na_asvc_t *svc = NULL;

    *cfg_p = NULL;
    NA_CHECK_OK(load_layout(v, idx, cfg_p));
    if (*cfg_p != NULL)
        NA_CHECK_OK(na_inproc_create(*cfg_p, mc, &svc));
    if (svc == NULL) {
        na_cfg_destroy(*cfg_p);
        *cfg_p = NULL;
    }
    return svc;
}

static void variant_service_close(na_asvc_t *svc, na_cfg_t *cfg)
{
    na_asvc_destroy(svc);
    na_cfg_destroy(cfg);
}

/* Prefix reuse (docs/prefix-reuse.md): prompts sharing 40 tokens, then 5 of
 * their own; the in-process slots attach the shared blocks (block 16: 32
 * tokens) to the later requests. Same greedy tokens as monolithic, with
 * request partition on 1 and 3 slots and head partition over 3 slots (a
 * request in 3 parts: every part must hold the block), with chunks of 7 and
 * 5 tokens (ending inside blocks) and on the SSD tier only. The chunked
 * prefill of a hit starts after the attached blocks; the requests are
 * submitted together, so the later ones wait for the first one's prompt
 * (na_off_prefix_wait) and on one slot every one of them hits. */
static void test_prefix(const char *path)
{
    static const variant_t pv[] = {
        { "request", 1, 1, "dram", 1, 0, 16, 64, 0, 0 },
        { "request", 3, 2, "auto", 4, 0, 16, 64, 0, 0 },
        { "head",    3, 1, "auto", 2, 0, 16, 2, 0, 0 },
        /* chunks that end inside blocks, after the attached ones; the SSD
         * tier only (blocks read back to be kept) */
        { "request", 1, 1, "dram", 1, 0, 16, 64, 7, 0 },
        { "request", 1, 2, "ssd",  1, 0, 16, 64, 5, 0 },
    };
    mono_t mo;
    na_model_t *m;
    na_engine_t *e;
    na_request_t *ref[N_REQ], *got[N_REQ];
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    int toks[N_REQ][45], i, k;
    uint64_t rng = 777;

    if (mono_open(&mo, path) != 0)
        return;
    m = mo.m;
    e = mo.e;
    na_test_prompt(&rng, toks[0], 45, m->cfg.vocab_size);
    for (i = 1; i < N_REQ; i++) {
        memcpy(toks[i], toks[0], sizeof(toks[0]));
        na_test_prompt(&rng, toks[i] + 40, 5, m->cfg.vocab_size);
    }
    for (i = 0; i < N_REQ; i++)
        NA_CHECK_OK(na_request_create(e, i, toks[i], 45, MAX_NEW, &sc, &ref[i]));
    mono_reference(&mo, ref, N_REQ);
    for (k = 0; k < (int)(sizeof(pv) / sizeof(pv[0])); k++) {
        na_cfg_t *cfg;
        na_asvc_t *svc = variant_service(&pv[k], 900 + k, &m->cfg, &cfg);
        na_off_opts_t oo;
        na_off_stats_t os;

        if (svc == NULL)
            continue;
        for (i = 0; i < N_REQ; i++)
            NA_CHECK_OK(na_request_create(e, i, toks[i], 45, MAX_NEW, &sc, &got[i]));
        memset(&oo, 0, sizeof(oo));
        oo.max_batch = pv[k].max_batch;
        oo.batches_in_flight = pv[k].bif;
        oo.prefix_reuse = 1;
        oo.prefill_chunk = pv[k].chunk;
        oo.on_error = on_error;
        g_errors = 0;
        NA_CHECK_OK(na_offload_generate(e, svc, got, N_REQ, &oo, &os));
        NA_CHECK(g_errors == 0);
        for (i = 0; i < N_REQ; i++)
            NA_CHECK_MSG(na_test_same_ints(got[i]->out, got[i]->n_out, ref[i]->out,
                                           ref[i]->n_out),
                         "%s prefix variant %d (%s, %d slots): request %d differs", path, k,
                         pv[k].partition, pv[k].slots, i);
        /* one slot: every request after the first hits its 2 blocks. 3
         * slots, request partition: the 6 requests stay open together, so
         * placement near the blocks keeps balance (at most 2 requests more
         * than the least-loaded slot): the 4th goes to an empty slot and
         * misses, the 5th and 6th go near it again: 4 hits (3 when placement
         * ignored the caches). Head partition rotates the head ranges over
         * the slots: the first request of each layout misses. */
        {
            int want = pv[k].slots == 1 ? N_REQ - 1 : !strcmp(pv[k].partition, "request") ? 4 : 1;
            NA_CHECK_MSG(pv[k].slots == 1 || !strcmp(pv[k].partition, "request")
                         ? os.prefix_hit_tokens == 32 * want : os.prefix_hit_tokens >= 32 * want,
                         "%s prefix variant %d: %ld prompt tokens hit, want %d", path, k,
                         os.prefix_hit_tokens, 32 * want);
        }
        NA_CHECK(os.gen.prompt_tokens == 45 * N_REQ - os.prefix_hit_tokens);
        fprintf(stderr, "%s prefix v%d: %ld prompt tokens hit, %ld prefilled\n", path, k,
                os.prefix_hit_tokens, os.gen.prompt_tokens);
        free_requests(got);
        variant_service_close(svc, cfg);
    }
    mono_close(&mo, ref, N_REQ);
}

/* Run all variants on one model; compare with monolithic greedy tokens. */
static void run_model(const char *path, const variant_t *vs, int nv, int mha)
{
    mono_t mo;
    na_model_t *m;
    na_engine_t *e;
    na_request_t *ref[N_REQ], *got[N_REQ];
    int i, k;
    static int idx;

    if (mono_open(&mo, path) != 0)
        return;
    m = mo.m;
    e = mo.e;
    make_requests(e, ref, m->cfg.vocab_size, m->cfg.seq_len);
    mono_reference(&mo, ref, N_REQ);
    for (k = 0; k < nv; k++) {
        const variant_t *v = &vs[k];
        na_cfg_t *cfg;
        na_asvc_t *svc;
        na_off_opts_t oo;
        na_off_stats_t os;
        na_status_t st;

        if (v->xcache && !mha)
            continue;
        svc = variant_service(v, idx++, &m->cfg, &cfg);
        if (svc == NULL)
            continue;
        make_requests(e, got, m->cfg.vocab_size, m->cfg.seq_len);
        memset(&oo, 0, sizeof(oo));
        oo.max_batch = v->max_batch;
        oo.batches_in_flight = v->bif;
        oo.prefill_chunk = v->chunk;
        oo.prefill_weighted = v->weighted;
        oo.xcache = v->xcache;
        oo.xcache_share = 0.5;
        oo.xcache_host_mb = 64;
        oo.on_error = on_error;
        g_errors = 0;
        st = na_offload_generate(e, svc, got, N_REQ, &oo, &os);
        NA_CHECK_MSG(st == NA_OK, "%s variant %d: %s", path, k, na_errmsg());
        NA_CHECK_MSG(g_errors == 0, "%s variant %d: %d request errors", path, k, g_errors);
        for (i = 0; i < N_REQ; i++)
            NA_CHECK_MSG(na_test_same_ints(got[i]->out, got[i]->n_out, ref[i]->out,
                                           ref[i]->n_out),
                         "%s variant %d (%s, %d slots, bif %d, %s, spill %d, xc %d, "
                         "chunk %d%s): request %d differs (%d vs %d tokens)", path, k,
                         v->partition, v->slots, v->bif, v->tier, v->spill, v->xcache,
                         v->chunk, v->weighted ? " weighted" : "", i, got[i]->n_out,
                         ref[i]->n_out);
        /* chunked prefill: a prompt of n tokens takes ceil(n / chunk) steps */
        if (v->chunk == 1 && !v->xcache)
            NA_CHECK_MSG(os.gen.prefill_steps >= os.gen.prompt_tokens / v->bif,
                         "variant %d: %d prefill steps for %ld prompt tokens in chunks of 1",
                         k, os.gen.prefill_steps, os.gen.prompt_tokens);
        NA_CHECK(os.svc.decode_entries > 0 || v->xcache);
        fprintf(stderr, "%s v%d: %ld tokens, %ld slices, %llu remote entries, %ld x-cache, "
                "ssd read %llu B, idle %.3f s\n", path, k, os.gen.gen_tokens, os.slices,
                (unsigned long long)os.svc.decode_entries, os.xcache_reqs,
                (unsigned long long)os.svc.ssd_bytes_read, os.idle_s);
        if (v->xcache)
            NA_CHECK(os.xcache_reqs > 0);
        if (!strcmp(v->tier, "ssd"))
            NA_CHECK_MSG(os.svc.ssd_bytes_read > 0, "variant %d: tier ssd read nothing", k);
        free_requests(got);
        variant_service_close(svc, cfg);
    }
    /* X-cache on a GQA model: a clear refusal */
    if (!mha) {
        na_off_opts_t oo;
        na_cfg_t *cfg;
        na_asvc_t *svc = variant_service(&vs[0], idx++, &m->cfg, &cfg);
        memset(&oo, 0, sizeof(oo));
        oo.batches_in_flight = 1;
        oo.xcache = 1;
        oo.xcache_share = 1.0;
        make_requests(e, got, m->cfg.vocab_size, m->cfg.seq_len);
        NA_CHECK(na_offload_generate(e, svc, got, N_REQ, &oo, NULL) == NA_ERR_UNSUPPORTED);
        NA_CHECK(strstr(na_errmsg(), "GQA") != NULL);
        free_requests(got);
        variant_service_close(svc, cfg);
    }
    mono_close(&mo, ref, N_REQ);
}

/* Tokens of request 0 seen when request 1 produced its first token. */
static int g_tok0, g_tok0_at_first1 = -1;
static void on_token_order(void *user, const na_request_t *r, int token)
{
    (void)user;
    (void)token;
    if (r->id == 0)
        g_tok0++;
    else if (r->id == 1 && g_tok0_at_first1 < 0)
        g_tok0_at_first1 = g_tok0;
}

/* Prefill as a scheduler state: request 0 (5 prompt tokens) and request 1
 * (200) in one batch, prefill_chunk 8: request 1's prompt comes in 8 tokens
 * a step beside request 0's decode rows, so request 0 has produced many
 * tokens before request 1's first (a prefill done at admission would let it
 * produce at most one), and both texts are the monolithic ones. */
/* The prompt steps a weighted budget of `chunk` gives prompts of len[0..n)
 * fed in that order in one batch (compute-node/sched.c): each step takes
 * tokens while their costs 1 + p / P_eq fit in chunk (at least one). */
static int weighted_steps(const na_model_config_t *c, const int *len, int n, int chunk)
{
    double qd = (double)c->n_heads * c->head_dim, kd = (double)c->n_kv_heads * c->head_dim;
    double peq = 2.0 * (c->dim * qd + 2.0 * c->dim * kd + qd * c->dim +
                        3.0 * c->dim * (double)c->hidden_dim) / (4.0 * qd);
    double left = 0;
    int i, p, steps = 0;

    for (i = 0; i < n; i++)
        for (p = 0; p < len[i]; p++) {
            double w = 1.0 + p / peq;
            if (steps == 0 || w > left) {     /* it does not fit: the next step */
                steps++;
                left = chunk;
            }
            left -= w;                        /* a step's first token always goes */
        }
    return steps;
}

static void test_interleave(const char *path)
{
    mono_t mo;
    na_model_t *m;
    na_engine_t *e;
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    static const variant_t v = { "request", 1, 1, "dram", 2, 0, 16, 2, 8, 0 };
    na_request_t *ref[2], *got[2];
    int toks[200], len[2] = { 5, 200 }, news[2] = { 60, 4 }, i, w, stop = -1;
    uint64_t rng = 99;
    na_off_opts_t oo;
    na_cfg_t *cfg = NULL;
    na_asvc_t *svc = NULL;

    if (mono_open(&mo, path) != 0)
        return;
    m = mo.m;
    e = mo.e;
    na_test_prompt(&rng, toks, 200, m->cfg.vocab_size);
    for (i = 0; i < 2; i++)
        NA_CHECK_OK(na_request_create(e, i, toks, len[i], news[i], &sc, &ref[i]));
    mono_reference(&mo, ref, 2);
    NA_CHECK_OK(load_layout(&v, 900, &cfg));
    for (w = 0; w < 2; w++) {
        na_off_stats_t os;
        int want = weighted_steps(&m->cfg, len, 2, 8);
        NA_CHECK_OK(na_inproc_create(cfg, &m->cfg, &svc));
        memset(&oo, 0, sizeof(oo));
        oo.max_batch = 2;
        oo.batches_in_flight = 1;
        oo.prefill_chunk = 8;
        oo.prefill_weighted = w;
        oo.stop_ids = &stop;
        oo.on_token = on_token_order;
        oo.on_error = on_error;
        g_errors = 0;
        g_tok0 = 0;
        g_tok0_at_first1 = -1;
        for (i = 0; i < 2; i++)
            NA_CHECK_OK(na_request_create(e, i, toks, len[i], news[i], &sc, &got[i]));
        NA_CHECK_OK(na_offload_generate(e, svc, got, 2, &oo, &os));
        NA_CHECK(g_errors == 0);
        for (i = 0; i < 2; i++)
            NA_CHECK_MSG(na_test_same_ints(got[i]->out, got[i]->n_out, ref[i]->out,
                                           ref[i]->n_out),
                         "interleaved prefill%s: request %d differs from monolithic",
                         w ? " (weighted)" : "", i);
        /* request 1 needs ceil((200 - 3) / 8) = 25 more steps after the first */
        NA_CHECK_MSG(g_tok0_at_first1 >= 20, "request 0 produced %d tokens before request "
                     "1's first (its 200-token prompt in chunks of 8 should take ~25 steps)",
                     g_tok0_at_first1);
        /* tokens: 205 prompt tokens, 8 a step; weighted: a token at p costs
         * 1 + p / P_eq, so the later chunks are smaller (more steps) */
        NA_CHECK_MSG(os.gen.prefill_steps == (w ? want : (205 + 7) / 8),
                     "interleave%s: %d prompt steps, want %d", w ? " (weighted)" : "",
                     os.gen.prefill_steps, w ? want : (205 + 7) / 8);
        fprintf(stderr, "interleave%s: request 0 had %d tokens at request 1's first; %d "
                "prompt steps\n", w ? " (weighted)" : "", g_tok0_at_first1,
                os.gen.prefill_steps);
        for (i = 0; i < 2; i++)
            na_request_destroy(got[i]);
        na_asvc_destroy(svc);
    }
    NA_CHECK(weighted_steps(&m->cfg, len, 2, 8) > (205 + 7) / 8);
    na_cfg_destroy(cfg);
    mono_close(&mo, ref, 2);
}

int main(void)
{
    static const variant_t vs[] = {
        /* partition slots bif tier spill xc dram max_batch chunk */
        { "request", 1, 1, "dram", 1, 0, 16, 64, 0, 0 },
        { "request", 3, 2, "auto", 4, 0, 16, 64, 7, 0 },
        { "head",    3, 3, "ssd",  1, 0, 16, 64, 1, 0 },
        { "head",    1, 2, "ssd",  4, 1, 16, 64, 64, 0 },
        { "request", 3, 3, "dram", 4, 1, 16, 2, 7, 0 },
        { "request", 1, 2, "auto", 2, 0, 1, 64, 0, 0 },   /* 1 MiB DRAM tier: blocks spill */
        { "request", 1, 1, "ssd",  1, 0, 16, 2, 1, 0 },   /* chunks beside decode rows */
        { "head",    3, 2, "auto", 2, 0, 16, 3, 7, 0 },
        /* the weighted budget: chunks shrink with their position */
        { "request", 3, 2, "auto", 4, 0, 16, 2, 7, 1 },
        { "head",    3, 1, "ssd",  1, 0, 16, 3, 3, 1 },
        { "request", 1, 1, "dram", 1, 1, 16, 2, 1, 1 },
    };
    const int nv = (int)(sizeof(vs) / sizeof(vs[0]));
    const char *stories = na_test_shared_model("stories260K.bin");
    na_genmodel_opts_t go;
    char path[720];

    if (na_test_tmpdir(g_tmp, sizeof(g_tmp)) != 0)
        return 1;
    setenv("NA_KV_DIR", g_tmp, 1);
    if (stories != NULL) {
        test_prefix(stories);
        run_model(stories, vs, nv, 0);
        test_interleave(stories);
    } else
        fprintf(stderr, "stories260K absent: generated models only\n");

    /* generated MHA model (kv_heads == heads) */
    na_genmodel_shape(&go, 64, 128, 2, 4, 4, 300, 96);
    if (na_test_genmodel(g_tmp, "mha", &go, "bin", path, sizeof(path)) == 0)
        run_model(path, vs, nv, 1);

    /* generated GQA model */
    go.n_heads = 8;
    go.n_kv_heads = 2;
    go.seed = 7;
    if (na_test_genmodel(g_tmp, "gqa", &go, "bin", path, sizeof(path)) == 0)
        run_model(path, vs, nv, 0);

    /* the architectures (GGUF only): f32 weights, GQA and MHA */
    {
        static const struct {
            const char *name;
            na_genmodel_arch_t arch;
            int heads, kv_heads, head_dim, rope_dims;
            const char *scaling;
        } as[] = {
            { "llama3",   NA_GENMODEL_LLAMA3, 8, 2, 0,  0,  NULL },
            { "qwen2",    NA_GENMODEL_QWEN2,  8, 2, 0,  0,  NULL },
            { "qwen2mha", NA_GENMODEL_QWEN2,  4, 4, 0,  0,  NULL },
            { "qwen3",    NA_GENMODEL_QWEN3,  4, 2, 24, 0,  NULL },
            { "qwen3mha", NA_GENMODEL_QWEN3,  4, 4, 0,  0,  NULL },
            { "llamapy",  NA_GENMODEL_LLAMA,  4, 2, 24, 16, "yarn" },
        };
        size_t a;
        for (a = 0; a < sizeof(as) / sizeof(as[0]); a++) {
            na_genmodel_shape(&go, 64, 128, 2, as[a].heads, as[a].kv_heads, 300, 96);
            na_genmodel_set_arch(&go, as[a].arch);
            go.head_dim = as[a].head_dim;
            go.rope_dims = as[a].rope_dims;
            go.rope_scaling = as[a].scaling;
            go.rope_scaling_factor = 4.0f;
            go.write_llama2c = 0;
            go.write_gguf = 1;
            go.seed = 11 + a;
            if (na_test_genmodel(g_tmp, as[a].name, &go, "gguf", path, sizeof(path)) == 0)
                run_model(path, vs, nv, as[a].heads == as[a].kv_heads);
        }
    }

    na_test_rmtree(g_tmp);
    return na_test_finish();
}

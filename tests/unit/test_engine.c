/* tests/unit/test_engine.c — the monolithic engine (compute-node/engine.c,
 * slices.c, kv_local.c, generate.c).
 *
 *   test_engine stories    on shared/models/stories260K.bin (skipped if absent):
 *                          the known greedy story; batched generation equals
 *                          one-request-at-a-time generation (f32 and f16 KV,
 *                          chunked prefill, continuous batching); cpu and ref
 *                          backends give the same greedy tokens.
 *   test_engine generated  on generated models: GGUF and llama2.c files of the
 *                          same weights give the same logits; batched = single
 *                          on a GQA model; the engine's kernels are batch-
 *                          invariant for every weight dtype; bad requests are
 *                          refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/genmodel.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "tests/testutil.h"
#include "tests/unit/kern_util.h"

#define MAX_PROMPTS 8
#define MAX_NEW     128

typedef struct {
    int tok[MAX_PROMPTS][MAX_NEW];
    int n[MAX_PROMPTS];
} gen_out_t;

/* Generate for prompts[0..n) with the given engine options, all admitted at
 * once up to max_batch; greedy unless temp > 0 (request i is seeded by its
 * index id0 + i). Tokens into out. */
static na_status_t run_gen(const na_model_t *m, const char *backend, na_dtype_t kv,
                           int max_rows, int max_batch, int id0, int *const *prompts,
                           const int *n_prompt, int n, int max_new, float temp,
                           const int *stop, int n_stop, gen_out_t *out)
{
    na_engine_opts_t eo = { backend, 1, kv, max_rows };
    na_sampler_cfg_t sc = { temp, 0.9f, 0 };
    na_request_t *reqs[MAX_PROMPTS] = { 0 };
    na_gen_opts_t go = { max_batch, stop, n_stop, NULL, NULL, NULL, NULL };
    na_engine_t *e = NULL;
    na_status_t st;
    int i;

    st = na_engine_create(m, &eo, &e);
    if (st != NA_OK)
        return st;
    for (i = 0; i < n && st == NA_OK; i++) {
        sc.seed = na_sampler_request_seed(42, (uint64_t)(id0 + i));
        st = na_request_create(e, i, prompts[i], n_prompt[i], max_new, &sc, &reqs[i]);
    }
    if (st == NA_OK)
        st = na_generate(e, reqs, n, &go, NULL);
    for (i = 0; i < n; i++) {
        if (reqs[i] != NULL && st == NA_OK) {
            out->n[i] = reqs[i]->n_out;
            memcpy(out->tok[i], reqs[i]->out, (size_t)reqs[i]->n_out * sizeof(int));
        }
        na_request_destroy(reqs[i]);
    }
    na_engine_destroy(e);
    return st;
}

static int same_out(const gen_out_t *a, const gen_out_t *b, int n)
{
    int i, j;
    for (i = 0; i < n; i++) {
        if (a->n[i] != b->n[i]) {
            fprintf(stderr, "prompt %d: %d vs %d tokens\n", i, a->n[i], b->n[i]);
            return 0;
        }
        for (j = 0; j < a->n[i]; j++)
            if (a->tok[i][j] != b->tok[i][j]) {
                fprintf(stderr, "prompt %d: token %d differs (%d vs %d)\n", i, j,
                        a->tok[i][j], b->tok[i][j]);
                return 0;
            }
    }
    return 1;
}

/* Batched (all together, chunked prefill, limited batch) vs one at a time. */
static void check_batched_equals_single(const na_model_t *m, na_dtype_t kv,
                                        int *const *prompts, const int *n_prompt, int n,
                                        int max_new, float temp, const int *stop, int n_stop)
{
    gen_out_t single, batched;
    int i;

    memset(&single, 0, sizeof(single));
    for (i = 0; i < n; i++) {
        gen_out_t one;
        NA_CHECK_OK(run_gen(m, "cpu", kv, 0, 0, i, &prompts[i], &n_prompt[i], 1, max_new, temp,
                            stop, n_stop, &one));
        single.n[i] = one.n[0];
        NA_CHECK_MSG(one.n[0] > 0, "prompt %d generated nothing", i);
        memcpy(single.tok[i], one.tok[0], sizeof(one.tok[0]));
    }
    memset(&batched, 0, sizeof(batched));
    NA_CHECK_OK(run_gen(m, "cpu", kv, 0, 0, 0, prompts, n_prompt, n, max_new, temp, stop,
                        n_stop, &batched));
    NA_CHECK_MSG(same_out(&single, &batched, n), "all together, kv %s, temp %g",
                 na_dtype_name(kv), (double)temp);
    memset(&batched, 0, sizeof(batched));
    NA_CHECK_OK(run_gen(m, "cpu", kv, 7, 0, 0, prompts, n_prompt, n, max_new, temp, stop,
                        n_stop, &batched));
    NA_CHECK_MSG(same_out(&single, &batched, n), "prefill chunks of 7 rows, kv %s",
                 na_dtype_name(kv));
    memset(&batched, 0, sizeof(batched));
    NA_CHECK_OK(run_gen(m, "cpu", kv, 0, 2, 0, prompts, n_prompt, n, max_new, temp, stop,
                        n_stop, &batched));
    NA_CHECK_MSG(same_out(&single, &batched, n), "batch limit 2, kv %s", na_dtype_name(kv));
}

static char *decode_text(const na_tokenizer_t *tok, const int *prompt, int n_prompt,
                         const int *out, int n_out)
{
    size_t cap = 16384, len = 0;
    char *buf = calloc(1, cap);
    int prev = -1, i;

    for (i = 0; i < n_prompt + n_out; i++) {
        int t = i < n_prompt ? prompt[i] : out[i - n_prompt];
        size_t pl;
        const char *p = na_tokenizer_decode_len(tok, prev, t, &pl);
        if (len + pl + 1 < cap) {
            memcpy(buf + len, p, pl);
            len += pl;
        }
        prev = t;
    }
    buf[len] = '\0';
    return buf;
}

static int encode(const na_tokenizer_t *tok, const char *text, int *toks, int cap)
{
    size_t n = 0;
    if (na_tokenizer_encode(tok, text, 1, 0, toks, (size_t)cap, &n) != NA_OK)
        return 0;
    return (int)n;
}

static na_status_t two_step_logits(const na_model_t *m, const char *backend, const int *toks,
                                   int n, float *pre, float *dec);

/* Logits after toks[0..n-2] computed by one prefill of n-1 tokens equal those
 * of a prefill of n-2 tokens followed by a decode step (every backend, f32
 * KV). Needs 3 <= n <= 64. */
static void check_prefill_vs_decode(const na_model_t *m, const int *toks, int n)
{
    size_t v = (size_t)m->cfg.vocab_size;
    float *pre = malloc(v * sizeof(float)), *dec = malloc(v * sizeof(float));
    float *full = malloc(v * sizeof(float)), *unused = malloc(v * sizeof(float));
    const char *backends[3] = { "ref", "cpu", "refdev" };
    int b;

    for (b = 0; b < 3; b++) {
        NA_CHECK_OK(two_step_logits(m, backends[b], toks, n - 2, pre, dec));
        NA_CHECK_OK(two_step_logits(m, backends[b], toks, n - 1, full, unused));
        NA_CHECK_MSG(na_close_ratio(dec, full, v, 1e-4, 1e-4) <= 1.0,
                     "%s: decode vs prefill logits ratio %g", backends[b],
                     na_close_ratio(dec, full, v, 1e-4, 1e-4));
    }
    free(pre);
    free(dec);
    free(full);
    free(unused);
}

static int test_stories(void)
{
    static const char *expect = "Once upon a time, there was a little girl named Lily. "
                                "She loved to play outside in the park.";
    /* what llama2.c's run.c prints for this model, prompt and temperature 0
     * (run with -n 120): an independent reference for 110+ tokens */
    static const char *expect_run_c =
        "Once upon a time, there was a little girl named Lily. She loved to play outside "
        "in the park. One day, she saw a big, red ball. She wanted to play with it, but it "
        "was too high.\nLily's mom said, \"Lily, let's go to the park.\" Lily was sad and "
        "didn't know what to do. She said, \"I want to play with your ball, but";
    static const char *texts[5] = {
        "Once upon a time", "The cat", "Tom and his dog went to the big red", "Lily",
        "One day, a little boy named Tim found a shiny stone in the garden. He",
    };
    char mpath[1024], tpath[1024];
    na_model_t *m = NULL;
    na_tokenizer_t *tok = NULL;
    int ptok[5][128], n_prompt[5], *prompts[5], stop[2], i;
    gen_out_t out, ref_out;
    char *text;

    /* na_test_shared_model returns a static buffer: copy each path */
    if (na_test_shared_model("stories260K.bin") == NULL ||
        na_test_shared_model("tok512.bin") == NULL)
        NA_SKIP("shared/models/stories260K.bin or tok512.bin absent");
    snprintf(mpath, sizeof(mpath), "%s", na_test_shared_model("stories260K.bin"));
    snprintf(tpath, sizeof(tpath), "%s", na_test_shared_model("tok512.bin"));
    NA_CHECK_OK(na_model_open(mpath, &m));
    if (m == NULL)
        return na_test_finish();
    NA_CHECK_OK(na_tokenizer_open(tpath, m->cfg.vocab_size, &tok));
    if (tok == NULL)
        goto out_model;
    stop[0] = na_tokenizer_eos(tok);
    stop[1] = na_tokenizer_bos(tok);
    for (i = 0; i < 5; i++) {
        prompts[i] = ptok[i];
        n_prompt[i] = encode(tok, texts[i], ptok[i], 128);
        NA_CHECK(n_prompt[i] > 1);
    }

    /* the known greedy story, and llama2.c's longer text of it */
    memset(&out, 0, sizeof(out));
    NA_CHECK_OK(run_gen(m, "cpu", NA_DTYPE_F32, 0, 0, 0, prompts, n_prompt, 1, MAX_NEW, 0.0f,
                        stop, 2, &out));
    text = decode_text(tok, ptok[0], n_prompt[0], out.tok[0], out.n[0]);
    NA_CHECK_MSG(strncmp(text, expect, strlen(expect)) == 0, "got \"%s\"", text);
    free(text);
    memset(&out, 0, sizeof(out));
    NA_CHECK_OK(run_gen(m, "cpu", NA_DTYPE_F32, 0, 0, 0, prompts, n_prompt, 1, 120, 0.0f,
                        stop, 2, &out));
    text = decode_text(tok, ptok[0], n_prompt[0], out.tok[0], out.n[0]);
    NA_CHECK_MSG(strncmp(text, expect_run_c, strlen(expect_run_c)) == 0, "got \"%s\"", text);
    free(text);
    check_prefill_vs_decode(m, ptok[4], n_prompt[4]);

    /* batched == one at a time: greedy with f32 and f16 KV, and sampled
     * (each request has its own seeded sampler) */
    check_batched_equals_single(m, NA_DTYPE_F32, prompts, n_prompt, 5, 48, 0.0f, stop, 2);
    check_batched_equals_single(m, NA_DTYPE_F16, prompts, n_prompt, 5, 48, 0.0f, stop, 2);
    check_batched_equals_single(m, NA_DTYPE_F16, prompts, n_prompt, 5, 48, 0.9f, stop, 2);

    /* cpu and ref backends: same greedy tokens */
    memset(&out, 0, sizeof(out));
    memset(&ref_out, 0, sizeof(ref_out));
    NA_CHECK_OK(run_gen(m, "cpu", NA_DTYPE_F32, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f, NULL, 0,
                        &out));
    NA_CHECK_OK(run_gen(m, "ref", NA_DTYPE_F32, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f, NULL, 0,
                        &ref_out));
    NA_CHECK_MSG(same_out(&out, &ref_out, 3), "cpu vs ref backend");
    /* refdev: activations and KV in (emulated) device memory, read on the host
     * only through downloads: the same tokens as ref, bit for bit */
    memset(&out, 0, sizeof(out));
    NA_CHECK_OK(run_gen(m, "refdev", NA_DTYPE_F16, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f,
                        NULL, 0, &out));
    memset(&ref_out, 0, sizeof(ref_out));
    NA_CHECK_OK(run_gen(m, "ref", NA_DTYPE_F16, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f, NULL,
                        0, &ref_out));
    NA_CHECK_MSG(same_out(&out, &ref_out, 3), "refdev vs ref backend");
    /* bf16 KV: cpu, ref and refdev give the same greedy tokens, batched or not */
    memset(&out, 0, sizeof(out));
    memset(&ref_out, 0, sizeof(ref_out));
    NA_CHECK_OK(run_gen(m, "cpu", NA_DTYPE_BF16, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f, NULL,
                        0, &out));
    NA_CHECK_OK(run_gen(m, "ref", NA_DTYPE_BF16, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f, NULL,
                        0, &ref_out));
    NA_CHECK_MSG(same_out(&out, &ref_out, 3), "bf16 KV: cpu vs ref backend");
    memset(&out, 0, sizeof(out));
    NA_CHECK_OK(run_gen(m, "refdev", NA_DTYPE_BF16, 0, 0, 0, prompts, n_prompt, 3, 48, 0.0f,
                        NULL, 0, &out));
    NA_CHECK_MSG(same_out(&out, &ref_out, 3), "bf16 KV: refdev vs ref backend");
    check_batched_equals_single(m, NA_DTYPE_BF16, prompts, n_prompt, 5, 48, 0.0f, stop, 2);

    na_tokenizer_destroy(tok);
out_model:
    na_model_destroy(m);
    return na_test_finish();
}

/* Logits of a prefill step of `n` tokens and then one decode step. */
static na_status_t two_step_logits(const na_model_t *m, const char *backend, const int *toks,
                                   int n, float *pre, float *dec)
{
    na_engine_opts_t eo = { backend, 1, NA_DTYPE_F32, 0 };
    na_engine_t *e = NULL;
    na_acts_t *a = NULL;
    na_lkv_t *kv = NULL;
    int pos[64], i;
    size_t v = (size_t)m->cfg.vocab_size;
    na_status_t st;

    for (i = 0; i < n + 1; i++)
        pos[i] = i;
    st = na_engine_create(m, &eo, &e);
    if (st != NA_OK)
        return st;
    st = na_acts_create(e, n, 1, &a);
    if (st == NA_OK && e->kern->mem == NA_KMEM_DEVICE)     /* host views are mirrors */
        NA_CHECK(a->buf[NA_ACT_LOGITS]->host == NULL && a->mirror[NA_ACT_LOGITS] != NULL &&
                 a->logits == a->mirror[NA_ACT_LOGITS]->host);
    if (st == NA_OK)
        st = na_lkv_create(&m->cfg, NA_DTYPE_F32, e->kern, e->kern->mem, &kv);
    if (st == NA_OK) {
        na_step_seg_t seg = { 0, n, 0, kv };
        na_step_t s = { n, 1, toks, pos, &seg };
        st = na_engine_forward(e, a, &s);
        if (st == NA_OK)
            memcpy(pre, a->logits, v * sizeof(float));
    }
    if (st == NA_OK) {
        na_step_seg_t seg = { 0, 1, n, kv };
        na_step_t s = { 1, 1, &toks[n], &pos[n], &seg };
        st = na_engine_forward(e, a, &s);
        if (st == NA_OK)
            memcpy(dec, a->logits, v * sizeof(float));
    }
    na_lkv_destroy(kv);
    na_acts_destroy(a);
    na_engine_destroy(e);
    return st;
}

static void test_gguf_vs_llama2c(const char *dir)
{
    char path[700];
    na_genmodel_opts_t o;
    na_model_t *bin = NULL, *gguf = NULL;
    int toks[9] = { 1, 300, 301, 17, 400, 5, 77, 260, 333 };
    float *lb_pre, *lb_dec, *lg_pre, *lg_dec;
    size_t v;
    const char *backends[2] = { "ref", "cpu" };
    int b;

    na_genmodel_shape(&o, 96, 256, 2, 6, 2, 600, 64);
    o.shared_classifier = 0;
    o.seed = 31;
    o.write_gguf = 1;
    bin = na_test_genmodel_open(dir, "g", &o, "bin");
    snprintf(path, sizeof(path), "%s/g.gguf", dir);
    NA_CHECK_OK(na_model_open(path, &gguf));
    if (bin == NULL || gguf == NULL)
        goto out_models;
    v = (size_t)bin->cfg.vocab_size;
    lb_pre = malloc(v * sizeof(float));
    lb_dec = malloc(v * sizeof(float));
    lg_pre = malloc(v * sizeof(float));
    lg_dec = malloc(v * sizeof(float));
    for (b = 0; b < 2; b++) {
        NA_CHECK_OK(two_step_logits(bin, backends[b], toks, 8, lb_pre, lb_dec));
        NA_CHECK_OK(two_step_logits(gguf, backends[b], toks, 8, lg_pre, lg_dec));
        NA_CHECK_MSG(na_close_ratio(lg_pre, lb_pre, v, 1e-5, 0.0) <= 1.0,
                     "%s prefill logits differ (ratio %g)", backends[b],
                     na_close_ratio(lg_pre, lb_pre, v, 1e-5, 0.0));
        NA_CHECK_MSG(na_close_ratio(lg_dec, lb_dec, v, 1e-5, 0.0) <= 1.0,
                     "%s decode logits differ (ratio %g)", backends[b],
                     na_close_ratio(lg_dec, lb_dec, v, 1e-5, 0.0));
    }
    free(lb_pre);
    free(lb_dec);
    free(lg_pre);
    free(lg_dec);
out_models:
    na_model_destroy(bin);
    na_model_destroy(gguf);
}

/* GGUF files in f16, bf16 and q8_0 against the f32 checkpoint of the same
 * weights: logits agree to the rounding of the weight type (relative to the
 * spread of the logits). */
static void test_gguf_dtypes(const char *dir)
{
    static const na_dtype_t types[3] = { NA_DTYPE_F16, NA_DTYPE_BF16, NA_DTYPE_Q8_0 };
    /* of the logits RMS; about 3x, 3x, 2x what f16, bf16, q8_0 showed (the
     * ref backend gives the same differences: they are the formats rounding) */
    static const double tol[3] = { 0.01, 0.05, 0.15 };
    char name[16];
    na_genmodel_opts_t o;
    na_model_t *bin = NULL, *q = NULL;
    int toks[7] = { 1, 280, 290, 300, 310, 320, 330 };
    float *ref_pre, *ref_dec, *pre, *dec;
    size_t v, i;
    int t;

    na_genmodel_shape(&o, 64, 160, 2, 4, 2, 512, 256);
    o.seed = 77;
    o.shared_classifier = 0;
    bin = na_test_genmodel_open(dir, "d", &o, "bin");
    if (bin == NULL)
        return;
    v = (size_t)bin->cfg.vocab_size;
    ref_pre = malloc(v * sizeof(float));
    ref_dec = malloc(v * sizeof(float));
    pre = malloc(v * sizeof(float));
    dec = malloc(v * sizeof(float));
    NA_CHECK_OK(two_step_logits(bin, "cpu", toks, 6, ref_pre, ref_dec));
    for (t = 0; t < 3; t++) {
        double rms = 0.0, worst = 0.0;
        o.dtype = types[t];
        o.write_llama2c = 0;
        o.write_gguf = 1;
        snprintf(name, sizeof(name), "d%d", t);
        q = na_test_genmodel_open(dir, name, &o, "gguf");
        if (q == NULL)
            continue;
        NA_CHECK_OK(two_step_logits(q, "cpu", toks, 6, pre, dec));
        for (i = 0; i < v; i++) {
            double d = fabs((double)pre[i] - ref_pre[i]);
            double d2 = fabs((double)dec[i] - ref_dec[i]);
            rms += (double)ref_pre[i] * ref_pre[i];
            worst = d > worst ? d : worst;
            worst = d2 > worst ? d2 : worst;
        }
        rms = sqrt(rms / (double)v);
        NA_CHECK_MSG(worst <= tol[t] * rms, "%s: logits differ by %g (rms %g)",
                     na_dtype_name(types[t]), worst, rms);
        na_model_destroy(q);
        q = NULL;
    }
    free(ref_pre);
    free(ref_dec);
    free(pre);
    free(dec);
    na_model_destroy(bin);
}

/* This process's resident pages of mapped files (RssFile of
 * /proc/self/status), in KiB; -1 when it cannot be read. */
static long rss_file_kib(void)
{
    char line[256];
    long kib = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "RssFile: %ld", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

/* A weight the cpu backend copies (Q8_0 in groups of 8 rows) no longer
 * keeps its pages of the model file resident in this process: with every
 * page of the file touched first, creating the engine lowers RssFile by
 * at least half the file (these weights are most of it); the logits are
 * what test_gguf_dtypes checks. */
static void test_source_pages(const char *dir)
{
    na_genmodel_opts_t o;
    na_engine_opts_t eo = { "cpu", 1, NA_DTYPE_F32, 0 };
    na_engine_t *e = NULL;
    na_model_t *m;
    long before, after;
    size_t i;

    na_genmodel_shape(&o, 256, 512, 2, 4, 4, 2048, 64);
    o.seed = 5;
    o.shared_classifier = 0;
    o.dtype = NA_DTYPE_Q8_0;
    o.write_llama2c = 0;
    o.write_gguf = 1;
    m = na_test_genmodel_open(dir, "pages", &o, "gguf");
    if (m == NULL)
        return;
    for (i = 0; i < m->map_size; i += 4096)       /* a volatile read maps each page */
        (void)((const volatile unsigned char *)m->map)[i];
    before = rss_file_kib();
    NA_CHECK_OK(na_engine_create(m, &eo, &e));
    after = rss_file_kib();
    NA_CHECK_MSG(before >= 0 && after >= 0 && before - after >= (long)(m->map_size / 2048),
                 "RssFile %ld KiB before the engine, %ld after: the %zu KiB model file's pages "
                 "under the copied weights stayed resident", before, after, m->map_size / 1024);
    na_engine_destroy(e);
    na_model_destroy(m);
}

/* The default generated model (GQA: 8 heads, 4 kv heads) as dir/name.bin
 * (llama2.c only), with seed and seq_len when not 0: open, or NULL after a
 * failed check. */
static na_model_t *default_model(const char *dir, const char *name, uint64_t seed, int seq_len)
{
    na_genmodel_opts_t o;

    na_genmodel_defaults(&o);
    o.write_gguf = 0;
    if (seed != 0)
        o.seed = seed;
    if (seq_len != 0)
        o.seq_len = seq_len;
    return na_test_genmodel_open(dir, name, &o, "bin");
}

static void test_generated_batching(const char *dir)
{
    na_model_t *m = NULL;
    static int p0[] = { 1, 40, 41, 42 }, p1[] = { 1, 300 },
               p2[] = { 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 }, p3[] = { 1, 99, 98 };
    int *prompts[4] = { p0, p1, p2, p3 };
    int n_prompt[4] = { 4, 2, 13, 3 };

    m = default_model(dir, "b", 5, 0);
    if (m == NULL)
        return;
    check_batched_equals_single(m, NA_DTYPE_F32, prompts, n_prompt, 4, 30, 0.0f, NULL, 0);
    check_batched_equals_single(m, NA_DTYPE_F16, prompts, n_prompt, 4, 30, 0.0f, NULL, 0);
    check_prefill_vs_decode(m, p2, 13);
    na_model_destroy(m);
}

static void test_bad_requests(const char *dir)
{
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_engine_opts_t eo = { "cpu", 1, NA_DTYPE_F16, 0 };
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    na_request_t *r = NULL;
    int *long_prompt, i, t = 1, bad = 100000;

    m = default_model(dir, "c", 0, 32);
    if (m == NULL)
        return;
    NA_CHECK_OK(na_engine_create(m, &eo, &e));
    eo.kv_dtype = NA_DTYPE_Q8_0;
    {
        na_engine_t *e2 = NULL;
        NA_CHECK(na_engine_create(m, &eo, &e2) == NA_ERR_INVALID);
    }
    if (e == NULL)
        goto out_model;
    long_prompt = calloc(40, sizeof(int));
    for (i = 0; i < 40; i++)
        long_prompt[i] = 1;
    NA_CHECK(na_request_create(e, 0, long_prompt, 33, 4, &sc, &r) == NA_ERR_RANGE);
    NA_CHECK(strstr(na_errmsg(), "longer than the model context") != NULL);
    NA_CHECK(na_request_create(e, 0, &t, 1, 0, &sc, &r) == NA_ERR_INVALID);
    NA_CHECK(na_request_create(e, 0, &bad, 1, 4, &sc, &r) == NA_ERR_INVALID);
    sc.top_p = 0.0f;
    NA_CHECK(na_request_create(e, 0, &t, 1, 4, &sc, &r) == NA_ERR_INVALID);
    sc.top_p = 1.0f;

    /* a full prompt of seq_len tokens: one token, then the context is full */
    NA_CHECK_OK(na_request_create(e, 0, long_prompt, 32, 10, &sc, &r));
    if (r != NULL) {
        na_gen_opts_t go = { 0, NULL, 0, NULL, NULL, NULL, NULL };
        NA_CHECK_OK(na_generate(e, &r, 1, &go, NULL));
        NA_CHECK(r->n_out == 1 && r->finish == NA_FINISH_CONTEXT);
        NA_CHECK(r->kv == NULL);            /* freed as soon as it finished */
        na_request_destroy(r);
        r = NULL;
    }
    /* prompt + n past the context stops at the context */
    NA_CHECK_OK(na_request_create(e, 0, long_prompt, 28, 10, &sc, &r));
    if (r != NULL) {
        na_gen_opts_t go = { 0, NULL, 0, NULL, NULL, NULL, NULL };
        NA_CHECK_OK(na_generate(e, &r, 1, &go, NULL));
        NA_CHECK(r->n_out == 5 && r->finish == NA_FINISH_CONTEXT);
        na_request_destroy(r);
    }
    /* a huge -n is fine: the output buffer is bounded by the context */
    NA_CHECK_OK(na_request_create(e, 0, &t, 1, 2147483647, &sc, &r));
    na_request_destroy(r);
    r = NULL;

    /* the local KV grows with use, not with the context */
    {
        na_lkv_t *kv = NULL;
        size_t row = 2u * (size_t)m->cfg.n_kv_heads * (size_t)m->cfg.head_dim;  /* f16 */
        NA_CHECK_OK(na_lkv_create(&m->cfg, NA_DTYPE_F16, e->kern, NA_KMEM_HOST, &kv));
        if (kv != NULL) {
            NA_CHECK(na_lkv_bytes(kv) == 0);
            NA_CHECK_OK(na_lkv_reserve(kv, 5));
            NA_CHECK(kv->cap == 16);
            NA_CHECK(na_lkv_bytes(kv) == 2u * (size_t)m->cfg.n_layers * 16u * row);
            NA_CHECK_OK(na_lkv_reserve(kv, 17));
            NA_CHECK(kv->cap == 32);
            NA_CHECK(na_lkv_reserve(kv, 33) == NA_ERR_RANGE);
            NA_CHECK(kv->cap == 32);
        }
        na_lkv_destroy(kv);
    }
    free(long_prompt);
    na_engine_destroy(e);
out_model:
    na_model_destroy(m);
}

/* ---- batch invariance of the engine's kernels --------------------------
 * Every front end creates its kernels through na_engine_create, which makes
 * them batch-invariant: row b of a batch-B matmul is bit-identical to the
 * batch-1 matmul of input b, for every weight dtype and batches on both
 * sides of every kernel's crossover (sgemm, the GEMMs, the tiles), with 1
 * and 2 threads. Without it greedy text depends on what was batched beside
 * a request (`run --batch 1` vs the default; serve vs run). */
static void test_engine_batch_invariant(const char *dir)
{
    static const int batches[] = { 1, 3, 31, 32, 33, 64, 70, 130 };
    static const int shapes[][2] = { { 37, 512 }, { 70, 768 } };
    enum { MAXB = 130 };
    na_model_t *m = NULL;
    na_rng_t rng;
    int th, dt, s, bi, b;

    m = default_model(dir, "inv", 11, 0);
    if (m == NULL)
        return;
    na_rng_seed(&rng, 2026);
    for (th = 1; th <= 2; th++) {
        na_engine_opts_t eo = { "cpu", th, NA_DTYPE_F32, 0 };
        na_engine_t *e = NULL;
        NA_CHECK_OK(na_engine_create(m, &eo, &e));
        if (e == NULL)
            break;
        NA_CHECK(e->kern->batch_invariant == 1);
        for (dt = 0; dt < NA_DTYPE_COUNT; dt++)
            for (s = 0; s < 2; s++) {
                int rows = shapes[s][0], cols = shapes[s][1];
                na_tensor_t w;
                void *wbuf = na_test_rand_weight(&rng, (na_dtype_t)dt, rows, cols, &w);
                float *x = na_test_xmalloc(sizeof(float) * (size_t)MAXB * (size_t)cols);
                float *yb = na_test_xmalloc(sizeof(float) * (size_t)MAXB * (size_t)rows);
                float *y1 = na_test_xmalloc(sizeof(float) * (size_t)MAXB * (size_t)rows);

                na_rng_fill(&rng, x, (size_t)MAXB * (size_t)cols, -1.0f, 1.0f);
                for (b = 0; b < MAXB; b++)             /* each input alone */
                    NA_CHECK_OK(na_test_mm(e->kern, y1 + (size_t)b * rows,
                                          x + (size_t)b * cols, &w, 1));
                for (bi = 0; bi < (int)(sizeof(batches) / sizeof(batches[0])); bi++) {
                    int bad = 0, first = -1;
                    NA_CHECK_OK(na_test_mm(e->kern, yb, x, &w, batches[bi]));
                    for (b = 0; b < batches[bi]; b++)
                        if (memcmp(yb + (size_t)b * rows, y1 + (size_t)b * rows,
                                   sizeof(float) * (size_t)rows) != 0) {
                            bad++;
                            first = first < 0 ? b : first;
                        }
                    NA_CHECK_MSG(bad == 0, "engine kernels, %s %dx%d, batch %d, %d thread(s): "
                                 "%d rows differ from batch 1 (first: input %d)",
                                 na_dtype_name((na_dtype_t)dt), rows, cols, batches[bi], th,
                                 bad, first);
                }
                free(wbuf);
                free(x);
                free(yb);
                free(y1);
            }
        na_engine_destroy(e);
    }
    na_model_destroy(m);
}

static int test_generated(void)
{
    char dir[512];

    if (na_test_tmpdir(dir, sizeof(dir)) != 0) {
        NA_CHECK(!"cannot make a temporary directory");
        return na_test_finish();
    }
    test_gguf_vs_llama2c(dir);
    test_gguf_dtypes(dir);
    test_source_pages(dir);
    test_generated_batching(dir);
    test_engine_batch_invariant(dir);
    test_bad_requests(dir);
    na_test_rmtree(dir);
    return na_test_finish();
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "stories"))
        return test_stories();
    if (argc > 1 && !strcmp(argv[1], "generated"))
        return test_generated();
    fprintf(stderr, "usage: test_engine stories|generated\n");
    return 2;
}

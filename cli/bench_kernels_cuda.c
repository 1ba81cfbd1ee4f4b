/* cli/bench_kernels_cuda.c — `nearattn bench kernels --backend cuda`: the
 * CUDA backend through the kernels table, beside limits measured in the
 * same run on the same GPU.
 *
 *   device-to-device copy of 256 MiB (ops->copy = cudaMemcpyAsync D2D),
 *     GB/s counting read + write bytes (as STREAM copy)           the limit
 *   decode attention, f16 KV, GQA 32 q / 8 kv heads, head_dim 128, contexts
 *     1K..64K, batch 1..64 (batch 1: attn_decode; more: one batched launch
 *     for all, as the GPU attention engine runs a layer; each request on its
 *     own KV slice of a >= 512 MiB pool): GB/s of K+V read vs the copy, for
 *     the tile kernel and again for the warp kernel (NA_CUDA_ATTN_KERNEL=warp)
 *   matmul 4096x4096 (2048 with --quick), batch 1/8/64/512, F32/F16/BF16/
 *     Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K weights: TFLOP/s beside the
 *     plain cublasSgemm of the same shape (the F32 op is exactly that call);
 *     batch 1 also as GB/s of weight read (the placed bytes: quantised
 *     weights repacked, a few % over GGML's) vs the copy.
 *   batch-1 greedy decode of a generated 1B-shape model (dim 2048, hidden
 *     8192, 16 layers, 32/8 heads, vocab 32000, bf16 weights, bf16 KV; 4
 *     layers with --quick) on the engine: tokens/s beside the limit weight
 *     bytes / copy bandwidth. The model is written to a temporary directory
 *     ($TMPDIR) and removed.
 * Timing: each figure enqueues `reps` calls between two na_kernels_finish
 * and divides (launch overhead included, as a decode step sees it); warm-up
 * first, median of >= 5 such groups. Without a CUDA device the command stops
 * with "no CUDA device: ..." (exit 1) before measuring anything. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/bench_kernels_cuda.h"
#include "cli/cli.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "common/quantize.h"
#include "compute-node/engine.h"
#include "compute-node/generate.h"
#include "kernels/kernels.h"

#if NA_HAVE_CUDA
#include "kernels/cuda/cuda.h"

#define NA_BKC_GROUPS  7
#define NA_BKC_COPY    ((size_t)256 << 20)
#define NA_BKC_ATTN_MAXB 64

typedef na_status_t (*na_bkc_fn)(void *ctx, int rep);

/* Median seconds per call of fn over NA_BKC_GROUPS groups of reps calls. */
static na_status_t na_bkc_time(na_kernels_t *k, na_bkc_fn fn, void *ctx, int reps, double *med,
                               double *spread)
{
    double t[NA_BKC_GROUPS];
    na_status_t st;
    int g, r;

    for (r = 0; r < reps; r++)                    /* warm-up */
        if ((st = fn(ctx, r)) != NA_OK)
            return st;
    if ((st = na_kernels_finish(k)) != NA_OK)
        return st;
    for (g = 0; g < NA_BKC_GROUPS; g++) {
        double a = na_bench_now();
        for (r = 0; r < reps; r++)
            if ((st = fn(ctx, g * reps + r)) != NA_OK)
                return st;
        if ((st = na_kernels_finish(k)) != NA_OK)
            return st;
        t[g] = (na_bench_now() - a) / reps;
    }
    *med = na_bench_median(t, NA_BKC_GROUPS);
    *spread = na_bench_spread(t, NA_BKC_GROUPS);
    return NA_OK;
}

/* A device buffer of n bytes filled with small random f16 values (any
 * dtype reads them as finite numbers). */
static na_status_t na_bkc_buf(na_kernels_t *k, size_t n, na_kbuf_t **b_p)
{
    size_t chunk = (size_t)16 << 20, off, i;
    uint16_t *h = malloc(chunk);
    uint64_t s = 99;
    na_status_t st;
    if (h == NULL)
        return na_err(NA_ERR_NOMEM, "bench kernels: out of memory");
    for (i = 0; i < chunk / 2; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = na_f32_to_f16((float)((s >> 40) & 0xffff) / 65536.0f - 0.5f);
    }
    st = k->ops->buf_alloc(k, n, NA_KMEM_DEVICE, b_p);
    for (off = 0; st == NA_OK && off < n; off += chunk) {
        na_kbuf_t v = na_kbuf_view(*b_p, off, chunk);
        st = k->ops->upload(k, &v, h, v.size);
    }
    if (st == NA_OK)
        st = na_kernels_finish(k);
    free(h);
    return st;
}

/* ---- copy ---------------------------------------------------------------- */
typedef struct {
    na_kernels_t *k;
    na_kbuf_t    *a, *b;
} na_bkc_copy_t;

static na_status_t na_bkc_copy_call(void *ctx, int rep)
{
    na_bkc_copy_t *c = ctx;
    return rep % 2 ? c->k->ops->copy(c->k, c->a, c->b, NA_BKC_COPY)
                   : c->k->ops->copy(c->k, c->b, c->a, NA_BKC_COPY);
}

/* ---- decode attention ---------------------------------------------------- */
typedef struct {
    na_kernels_t *k;
    na_kbuf_t    *q, *out, *pool;       /* pool: K then V of pool_tokens tokens */
    size_t        pool_tokens;
    int           ctx, batch, n_heads, n_kv, hd;
} na_bkc_attn_t;

/* batch > 1: one batched launch for all requests (na_kernels_cuda_attn_decode_batch,
 * as the GPU attention engine runs a layer's entries), batch 1: attn_decode. */
static na_status_t na_bkc_attn_call(void *ctx, int rep)
{
    na_bkc_attn_t *a = ctx;
    size_t row = (size_t)a->n_kv * a->hd * 2, half = a->pool_tokens * row, qb;
    size_t slices = a->pool_tokens / (size_t)a->ctx;
    na_kbuf_t v[4 * NA_BKC_ATTN_MAXB];
    na_kcuda_attn_req_t rq[NA_BKC_ATTN_MAXB];
    int i;
    qb = (size_t)a->n_heads * a->hd * sizeof(float);
    for (i = 0; i < a->batch; i++) {
        size_t s = ((size_t)rep * a->batch + i) % slices, off = s * a->ctx * row;
        v[4 * i + 0] = na_kbuf_view(a->out, (size_t)i * qb, qb);
        v[4 * i + 1] = na_kbuf_view(a->q, (size_t)i * qb, qb);
        v[4 * i + 2] = na_kbuf_view(a->pool, off, (size_t)a->ctx * row);
        v[4 * i + 3] = na_kbuf_view(a->pool, half + off, (size_t)a->ctx * row);
        rq[i] = (na_kcuda_attn_req_t){ &v[4 * i], &v[4 * i + 1], &v[4 * i + 2], &v[4 * i + 3],
                                       a->ctx };
    }
    if (a->batch == 1)
        return a->k->ops->attn_decode(a->k, &v[0], &v[1], &v[2], &v[3], NA_DTYPE_F16, a->ctx,
                                      a->n_heads, a->n_kv, a->hd);
    return na_kernels_cuda_attn_decode_batch(a->k, rq, a->batch, NA_DTYPE_F16, a->n_heads,
                                             a->n_kv, a->hd);
}

static na_status_t na_bkc_attention(na_kernels_t *k, na_bench_t *b, int quick, double copy)
{
    static const int ctxs[] = { 1024, 4096, 16384, 65536 }, batches[] = { 1, 8, 64 };
    na_bkc_attn_t a = { k, NULL, NULL, NULL, 0, 0, 0, 32, 8, 128 };
    size_t row = (size_t)a.n_kv * a.hd * 2;
    na_status_t st;
    char name[96];
    int c, bi, kern, n_ctx = quick ? 2 : 4, n_b = quick ? 2 : 3;
    const char *prev;
    char saved[64] = "";

    a.pool_tokens = (size_t)(quick ? 256 : 1024) << 10;   /* 1 / 4 GiB of K+V */
    if ((st = na_bkc_buf(k, 2 * a.pool_tokens * row, &a.pool)) != NA_OK ||
        (st = na_bkc_buf(k, (size_t)64 * a.n_heads * a.hd * sizeof(float), &a.q)) != NA_OK ||
        (st = k->ops->buf_alloc(k, (size_t)64 * a.n_heads * a.hd * sizeof(float),
                                NA_KMEM_DEVICE, &a.out)) != NA_OK)
        goto out;
    /* the tile kernel (the default), then the one-token-a-warp kernel it
     * replaced (NA_CUDA_ATTN_KERNEL=warp), both against the copy; the
     * variable is set for each and restored after (a user's own value,
     * e.g. warp, must not relabel the tile rows) */
    if ((prev = getenv("NA_CUDA_ATTN_KERNEL")) != NULL)
        snprintf(saved, sizeof(saved), "%s", prev);
    for (kern = 0; kern < 2 && st == NA_OK; kern++)
        for (c = 0; c < n_ctx && st == NA_OK; c++)
            for (bi = 0; bi < n_b && st == NA_OK; bi++) {
                double med = 0, spread = 0, bytes;
                a.ctx = ctxs[c];
                a.batch = batches[bi];
                setenv("NA_CUDA_ATTN_KERNEL", kern ? "warp" : "tile", 1);
                st = na_bkc_time(k, na_bkc_attn_call, &a, 20, &med, &spread);
                bytes = 2.0 * (double)a.ctx * (double)row * a.batch;
                snprintf(name, sizeof(name), "cuda attn_decode f16 32q/8kv/128 ctx=%dK batch=%d%s",
                         a.ctx / 1024, a.batch, kern ? " (warp kernel)" : "");
                if (st == NA_OK)
                    st = na_bench_add(b, name, bytes / med / 1e9, "GB/s", spread,
                                      "cuda D2D copy (same run)", copy);
            }
    if (prev != NULL)
        setenv("NA_CUDA_ATTN_KERNEL", saved, 1);
    else
        unsetenv("NA_CUDA_ATTN_KERNEL");
out:
    k->ops->buf_free(k, a.out);
    k->ops->buf_free(k, a.q);
    k->ops->buf_free(k, a.pool);
    return st;
}

/* ---- matmul -------------------------------------------------------------- */
typedef struct {
    na_kernels_t *k;
    na_kbuf_t    *x, *y;
    na_kweight_t *w;
    int           batch;
} na_bkc_mm_t;

static na_status_t na_bkc_mm_call(void *ctx, int rep)
{
    na_bkc_mm_t *m = ctx;
    (void)rep;
    return m->k->ops->matmul(m->k, m->y, m->x, m->w, m->batch);
}

/* The matmul rows of the types in mask dtypes (a bit per na_dtype_t; F32,
 * the reference, always). */
static na_status_t na_bkc_matmul(na_kernels_t *k, na_bench_t *b, int quick, double copy,
                                 unsigned dtypes)
{
    static const int batches[] = { 1, 8, 64, 512 };
    int n = quick ? 2048 : 4096, d, bi;
    size_t wn = (size_t)n * n;
    float *host = malloc(wn * sizeof(float));
    na_kweight_t w[NA_DTYPE_COUNT];
    double sg[4] = { 0 };
    na_bkc_mm_t m = { k, NULL, NULL, NULL, 1 };
    na_status_t st = NA_OK;
    uint64_t s = 5;
    size_t i;
    char name[96], ref[96];

    memset(w, 0, sizeof(w));
    if (host == NULL)
        return na_err(NA_ERR_NOMEM, "bench kernels: out of memory");
    if ((st = na_bkc_buf(k, (size_t)512 * n * sizeof(float), &m.x)) != NA_OK ||
        (st = k->ops->buf_alloc(k, (size_t)512 * n * sizeof(float), NA_KMEM_DEVICE, &m.y)) != NA_OK)
        goto out;
    for (d = 0; d < NA_DTYPE_COUNT && st == NA_OK; d++) {
        na_tensor_t t = { (na_dtype_t)d, n, n, NULL, NA_LAYOUT_ROWS };
        size_t bytes = na_dtype_bytes((na_dtype_t)d, wn);
        uint8_t *p;
        if (d != NA_DTYPE_F32 && !(dtypes & (1u << d)))
            continue;
        if ((p = malloc(bytes)) == NULL) {
            st = na_err(NA_ERR_NOMEM, "bench kernels: out of memory");
            break;
        }
        for (i = 0; i < wn; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            host[i] = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        }
        for (i = 0; d < NA_DTYPE_Q8_0 && i < wn; i++) {
            if (d == NA_DTYPE_F32)
                ((float *)p)[i] = host[i];
            else
                ((uint16_t *)p)[i] = d == NA_DTYPE_F16 ? na_f32_to_f16(host[i])
                                                       : na_f32_to_bf16(host[i]);
        }
        for (i = 0; d == NA_DTYPE_Q8_0 && i < wn / NA_Q8_0_BLOCK; i++) {
            uint16_t dh = na_f32_to_f16(0.5f / 127.0f);
            int j;
            memcpy(p + i * NA_Q8_0_BLOCK_SIZE, &dh, 2);
            for (j = 0; j < NA_Q8_0_BLOCK; j++)
                p[i * NA_Q8_0_BLOCK_SIZE + 2 + j] =
                    (uint8_t)(int8_t)(host[i * NA_Q8_0_BLOCK + j] * 254.0f);
        }
        if (d > NA_DTYPE_Q8_0)                /* Q4_0 ... Q6_K: gen-model's quantiser */
            na_quantize((na_dtype_t)d, host, wn, p);
        t.data = p;
        st = k->ops->place(k, &t, &w[d]);
        free(p);
    }
    for (d = 0; d < NA_DTYPE_COUNT && st == NA_OK; d++)
        for (bi = 0; bi < 4 && st == NA_OK && (d == NA_DTYPE_F32 || (dtypes & (1u << d)));
             bi++) {
            double med = 0, spread = 0, flops;
            m.w = &w[d];
            m.batch = batches[bi];
            st = na_bkc_time(k, na_bkc_mm_call, &m, 10, &med, &spread);
            if (st != NA_OK)
                break;
            flops = 2.0 * wn * m.batch;
            if (d == NA_DTYPE_F32)
                sg[bi] = flops / med / 1e12;
            snprintf(name, sizeof(name), "cuda matmul %s %dx%d b=%d",
                     na_dtype_name((na_dtype_t)d), n, n, m.batch);
            snprintf(ref, sizeof(ref), "cublasSgemm f32 %dx%d b=%d", n, n, m.batch);
            st = na_bench_add(b, name, flops / med / 1e12, "TFLOP/s", spread, ref, sg[bi]);
            if (st == NA_OK && m.batch == 1) {
                snprintf(name, sizeof(name), "cuda matmul %s %dx%d b=1 weight read",
                         na_dtype_name((na_dtype_t)d), n, n);
                st = na_bench_add(b, name, (double)w[d].buf.size / med / 1e9, "GB/s", spread,
                                  "cuda D2D copy (same run)", copy);
            }
        }
out:
    for (d = 0; d < NA_DTYPE_COUNT; d++)
        if (w[d].buf.dev != NULL)
            k->ops->unplace(k, &w[d]);
    k->ops->buf_free(k, m.x);
    k->ops->buf_free(k, m.y);
    free(host);
    return st;
}

/* ---- batch-1 decode of a 1B-shape model ----------------------------------- */

static uint64_t na_bkc_tensor_bytes(const na_tensor_t *t)
{
    return (uint64_t)t->rows * na_dtype_bytes(t->dtype, (size_t)t->cols);
}

/* Weight bytes a decode step reads: every layer matrix and the classifier. */
static uint64_t na_bkc_step_bytes(const na_model_t *m)
{
    uint64_t n = na_bkc_tensor_bytes(&m->output);
    int l;
    for (l = 0; l < m->cfg.n_layers; l++) {
        const na_layer_weights_t *w = &m->layers[l];
        n += na_bkc_tensor_bytes(&w->wq) + na_bkc_tensor_bytes(&w->wk) +
             na_bkc_tensor_bytes(&w->wv) + na_bkc_tensor_bytes(&w->wo) +
             na_bkc_tensor_bytes(&w->w1) + na_bkc_tensor_bytes(&w->w2) +
             na_bkc_tensor_bytes(&w->w3);
    }
    return n;
}

static void na_bkc_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[4400];
    while (d != NULL && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        (void)unlink(p);
    }
    if (d != NULL)
        closedir(d);
    (void)rmdir(dir);
}

static na_status_t na_bkc_model(na_bench_t *b, int quick, double copy)
{
    const char *tmp = getenv("TMPDIR");
    char dir[4096], prefix[4200], path[4300], name[128];
    na_genmodel_opts_t o;
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_request_t *r = NULL;
    na_engine_opts_t eo = { "cuda", 1, NA_DTYPE_BF16, 0 };
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    na_gen_opts_t go = { 1, NULL, 0, NULL, NULL, NULL, NULL };
    na_gen_stats_t gs;
    int prompt[1] = { 1 };
    na_status_t st;

    snprintf(dir, sizeof(dir), "%s/nearattn-bench-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        return na_err(NA_ERR_IO, "bench kernels: mkdtemp %s failed", dir);
    na_genmodel_shape(&o, 2048, 8192, quick ? 4 : 16, 32, 8, 32000, 1024);
    o.dtype = NA_DTYPE_BF16;
    o.write_llama2c = 0;
    o.write_gguf = 1;
    snprintf(prefix, sizeof(prefix), "%s/m", dir);
    snprintf(path, sizeof(path), "%s.gguf", prefix);
    memset(&gs, 0, sizeof(gs));
    if ((st = na_genmodel_check_space(prefix, &o)) == NA_OK &&
        (st = na_genmodel_write(prefix, &o)) == NA_OK &&
        (st = na_model_open(path, &m)) == NA_OK &&
        (st = na_engine_create(m, &eo, &e)) == NA_OK &&
        (st = na_request_create(e, 0, prompt, 1, quick ? 32 : 128, &sc, &r)) == NA_OK)
        st = na_generate(e, &r, 1, &go, &gs);
    if (st == NA_OK && gs.decode_s > 0) {
        double bytes = (double)na_bkc_step_bytes(m), tps = gs.decode_tokens / gs.decode_s;
        snprintf(name, sizeof(name), "cuda decode 1B-shape bf16 %d layers batch 1 (%.2f GB "
                 "weights/step)", m->cfg.n_layers, bytes / 1e9);
        st = na_bench_add(b, name, tps, "tok/s", 0.0, "weight bytes / D2D copy",
                          copy * 1e9 / bytes);
    }
    na_request_destroy(r);
    na_engine_destroy(e);
    na_model_destroy(m);
    na_bkc_rmdir(dir);
    return st;
}

na_status_t na_cli_bench_kernels_cuda(na_bench_t *b, int quick, const char *part,
                                      unsigned dtypes)
{
    na_kernels_t *k = NULL;
    na_bkc_copy_t c = { NULL, NULL, NULL };
    double copy = 0, spread = 0;
    const char *dev = "?";
    size_t mem = 0;
    na_status_t st = na_kernels_create("cuda", 1, &k);

    if (st != NA_OK)
        return st;
    c.k = k;
    (void)na_kernels_cuda_info(k, &dev, &mem);
    if ((st = na_bkc_buf(k, NA_BKC_COPY, &c.a)) == NA_OK &&
        (st = na_bkc_buf(k, NA_BKC_COPY, &c.b)) == NA_OK &&
        (st = na_bkc_time(k, na_bkc_copy_call, &c, 10, &copy, &spread)) == NA_OK) {
        copy = 2.0 * (double)NA_BKC_COPY / copy / 1e9;
        st = na_bench_add(b, "cuda D2D copy 256 MiB (read + write)", copy, "GB/s", spread,
                          NULL, 0.0);
    }
    if (st == NA_OK && (!strcmp(part, "all") || !strcmp(part, "attn")))
        st = na_bkc_attention(k, b, quick, copy);
    if (st == NA_OK && (!strcmp(part, "all") || !strcmp(part, "matmul")))
        st = na_bkc_matmul(k, b, quick, copy, dtypes);
    if (st == NA_OK && (!strcmp(part, "all") || !strcmp(part, "model")))
        st = na_bkc_model(b, quick, copy);
    if (st == NA_OK)
        st = na_bench_note(b, "cuda: %s, %.0f GiB; attention GB/s = K+V bytes read; matmul "
                           "reference = cublasSgemm f32 (the F32 op); copy counts read + write",
                           dev, (double)mem / (1u << 30));
    k->ops->buf_free(k, c.a);
    k->ops->buf_free(k, c.b);
    na_kernels_destroy(k);
    return st;
}
#else
na_status_t na_cli_bench_kernels_cuda(na_bench_t *b, int quick, const char *part,
                                      unsigned dtypes)
{
    (void)b;
    (void)quick;
    (void)part;
    (void)dtypes;
    return na_err(NA_ERR_UNSUPPORTED, "kernels: backend 'cuda' is not built into this binary "
                  "(build with the CUDA toolkit, NA_CUDA=AUTO or ON)");
}
#endif

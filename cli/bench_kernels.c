/* cli/bench_kernels.c — `nearattn bench kernels`: the cpu kernels against the
 * limits measured in the same run.
 *
 *   STREAM copy, 1 and N threads, 2 x 64 MiB arrays (>> L3)      the limits
 *   decode attention, f16 KV, GQA 32 q / 8 kv heads, head_dim 128, contexts
 *     1K..64K: GB/s of K+V bytes read, 1 thread vs 1-thread copy, N threads
 *     vs N-thread copy, and (rows marked TARGET, always present) attention at
 *     the --threads used (N, or 1 with --threads 1) vs the 1-thread copy (the
 *     issue's target: >= 85% at >= 8K). The KV lives in a >= 128 MiB buffer and each repeat
 *     reads another slice of it, so small contexts come from DRAM too.
 *   matmul 4096x4096 (2048 with --quick), batch 1/8/64, F32/F16/BF16/Q8_0
 *     weights: GFLOP/s vs cblas_sgemm of the same shape with F32 weights
 *     (N threads); batch 1 also as GB/s of weights read vs N-thread copy,
 *     from rotating copies of the weight (>= 128 MiB in all).
 * Every figure: warm-up, then repeats for ~0.3 s (at least 5), median and
 * spread. Data is random, never all-zero. All large buffers, the STREAM
 * arrays included, come from na_bench_alloc (transparent huge pages). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cli/bench.h"
#include "cli/bench_kernels_cuda.h"
#include "cli/cli.h"
#include "common/quantize.h"
#include "kernels/kernels.h"

#define NA_BK_MAX_REPS   200
#define NA_BK_COPY_BYTES ((size_t)64 << 20)   /* per array; >> L3 */

typedef void (*na_bk_fn)(void *ctx, int rep);

/* Call fn once to warm up, then repeatedly for >= min_s seconds and >= 5
 * times; median seconds per call in *med, spread in *spread. With a copy
 * object, one STREAM copy pass runs before each sample (same machine load for
 * both, and the caches are flushed of the operands) and its median GB/s goes
 * to *copy_med; with a second one (copy2, may be NULL), a pass of it runs
 * too and its median goes to *copy2_med. burst > 0: a sample is one untimed
 * call then `burst` calls timed together (seconds per call), as decode runs
 * its ops back to back: right after a copy pass the backend's threads wake
 * from sleep and the scheduler may first put two of them on one vCPU, which
 * halved t=2 attention at 8K-32K (0.5-2 ms calls) and not at 64K. */
static void na_bk_time2(na_bk_fn fn, void *ctx, na_bench_copy_t *copy, na_bench_copy_t *copy2,
                        double min_s, int burst, double *med, double *spread, double *copy_med,
                        double *copy2_med)
{
    double t[NA_BK_MAX_REPS], cg[NA_BK_MAX_REPS], cg2[NA_BK_MAX_REPS], t0;
    int n = 0, rep = 1, i;

    fn(ctx, 0);
    t0 = na_bench_now();
    while (n < NA_BK_MAX_REPS && (n < 5 || na_bench_now() - t0 < min_s)) {
        double a;
        if (copy2 != NULL)
            cg2[n] = na_bench_copy_pass(copy2);
        if (copy != NULL)
            cg[n] = na_bench_copy_pass(copy);
        if (burst > 0)
            fn(ctx, rep++);
        a = na_bench_now();
        for (i = 0; i < (burst > 0 ? burst : 1); i++)
            fn(ctx, rep++);
        t[n++] = (na_bench_now() - a) / (burst > 0 ? burst : 1);
    }
    *med = na_bench_median(t, n);
    *spread = na_bench_spread(t, n);
    if (copy != NULL)
        *copy_med = na_bench_median(cg, n);
    if (copy2 != NULL)
        *copy2_med = na_bench_median(cg2, n);
}

/* na_bk_time2 with at most one copy reference. */
static void na_bk_time(na_bk_fn fn, void *ctx, na_bench_copy_t *copy, double min_s,
                       double *med, double *spread, double *copy_med)
{
    na_bk_time2(fn, ctx, copy, NULL, min_s, 0, med, spread, copy_med, NULL);
}

/* Deterministic pseudo-random floats in [-1, 1). */
static float na_bk_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

/* ---- decode attention ------------------------------------------------------ */
typedef struct {
    na_kernels_t   *k;
    float          *out, *q;
    const uint16_t *kc, *vc;     /* (buf_tokens, n_kv, hd) f16 */
    int             buf_tokens, ctx, n_heads, n_kv, hd;
    int             cached;      /* 1: always the first ctx tokens (kept in cache) */
} na_bk_attn_t;

#define NA_BK_ATTN_BURST 3       /* decode attention calls timed back to back (na_bk_time2) */
#define NA_BK_L2_CTX 128         /* tokens of K+V (1 MiB of f16 at 8 kv x 128) in cache */

static void na_bk_attn_call(void *ctx, int rep)
{
    na_bk_attn_t *a = ctx;
    size_t off = a->cached ? 0 :
                 (size_t)(((long)rep * a->ctx) % (a->buf_tokens - a->ctx + 1)) * a->n_kv * a->hd;
    (void)na_kernels_attn_decode_host(a->k, a->out, a->q, a->kc + off, a->vc + off,
                                      NA_DTYPE_F16, a->ctx, a->n_heads, a->n_kv, a->hd);
}

/* The roof's compute side at N threads: N threads at once, each with its own
 * 1-thread backend, run the kernel over the first NA_BK_L2_CTX tokens again
 * and again (KV in each core's L2). Measured, not l2(t=1) x N: the two vCPUs
 * of these VMs may share one core's FP pipes (two 1-thread runs at once ran
 * ~2x slower each). */
#define NA_BK_L2_CALLS 2000      /* calls per thread per repeat (~50 ms) */
#define NA_BK_L2_REPS  7

typedef struct {
    na_bk_attn_t a;              /* own backend and output; shared read-only KV, q */
    volatile int *go;            /* 0 until every thread exists */
} na_bk_l2_thr_t;

static void *na_bk_l2_main(void *arg)
{
    na_bk_l2_thr_t *t = arg;
    int i;
    while (!__atomic_load_n(t->go, __ATOMIC_ACQUIRE))
        ;
    for (i = 0; i < NA_BK_L2_CALLS; i++)
        na_bk_attn_call(&t->a, i);
    return NULL;
}

/* GB/s of K+V read by `threads` concurrent in-cache runs of the kernel
 * (median of NA_BK_L2_REPS repeats, spread in *spread); 0 on failure. */
static double na_bk_attn_l2(const na_bk_attn_t *proto, int threads, double *spread)
{
    na_bk_l2_thr_t *t = calloc((size_t)threads, sizeof(*t));
    pthread_t *th = calloc((size_t)threads, sizeof(*th));
    double v[NA_BK_L2_REPS], bytes = 2.0 * NA_BK_L2_CTX * proto->n_kv * proto->hd * 2.0, gbs = 0;
    volatile int go = 0;
    int i, r, n = 0, ok = t != NULL && th != NULL;

    for (i = 0; ok && i < threads; i++, n++) {
        t[i].a = *proto;
        t[i].a.ctx = NA_BK_L2_CTX;
        t[i].a.cached = 1;
        t[i].a.out = malloc(sizeof(float) * (size_t)proto->n_heads * proto->hd);
        t[i].go = &go;
        ok = t[i].a.out != NULL && na_kernels_create("cpu", 1, &t[i].a.k) == NA_OK;
        if (ok)
            na_bk_attn_call(&t[i].a, 0);            /* warm-up: KV into cache */
    }
    for (r = 0; ok && r < NA_BK_L2_REPS; r++) {
        double t0;
        int started = 0;
        __atomic_store_n(&go, 0, __ATOMIC_RELEASE);
        for (i = 0; ok && i < threads; i++, started++)
            ok = pthread_create(&th[i], NULL, na_bk_l2_main, &t[i]) == 0;
        if (!ok)
            started--;                              /* the failed one did not start */
        t0 = na_bench_now();
        __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
        for (i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        v[r] = (double)threads * NA_BK_L2_CALLS * bytes / (na_bench_now() - t0) / 1e9;
    }
    if (ok) {
        gbs = na_bench_median(v, NA_BK_L2_REPS);
        *spread = na_bench_spread(v, NA_BK_L2_REPS);
    } else {
        fprintf(stderr, "bench kernels: in-cache attention at %d threads: no memory, "
                "backend or thread\n", threads);
    }
    for (i = 0; i < n; i++) {
        na_kernels_destroy(t[i].a.k);
        free(t[i].a.out);
    }
    free(t);
    free(th);
    return gbs;
}

static na_status_t na_bk_attention(na_bench_t *b, const na_cli_bench_opts_t *o,
                                   na_bench_copy_t *copy1, na_bench_copy_t *copyN)
{
    static const int ctxs[] = { 1024, 4096, 8192, 16384, 32768, 65536 };
    static const int quick_ctxs[] = { 1024, 8192 };
    const int *cs = o->quick ? quick_ctxs : ctxs;
    int n_ctx = o->quick ? 2 : 6, ti, c, n_threads_set = o->threads > 1 ? 2 : 1;
    na_bk_attn_t a = { NULL, NULL, NULL, NULL, NULL, 0, 0, 32, 8, 128, 0 };
    double l2 = 0.0;             /* the kernel's own rate, KV in cache, these threads (GB/s) */
    size_t row = (size_t)a.n_kv * a.hd, i, n;
    uint16_t *kv;
    uint64_t seed = 1;
    na_status_t st = NA_OK;
    char name[96], ref[96];

    a.buf_tokens = o->quick ? 32768 : 65536;         /* 128 / 256 MiB of K+V */
    n = (size_t)a.buf_tokens * row;
    kv = na_bench_alloc(2 * n * sizeof(uint16_t));
    a.q = malloc(sizeof(float) * (size_t)a.n_heads * a.hd);
    a.out = malloc(sizeof(float) * (size_t)a.n_heads * a.hd);
    if (kv == NULL || a.q == NULL || a.out == NULL) {
        st = na_err(NA_ERR_NOMEM, "bench kernels: no memory for %zu MiB of KV", (4 * n) >> 20);
        goto out_free;
    }
    for (i = 0; i < 2 * n; i++)
        kv[i] = na_f32_to_f16(na_bk_rand(&seed));
    for (i = 0; i < (size_t)a.n_heads * a.hd; i++)
        a.q[i] = na_bk_rand(&seed);
    a.kc = kv;
    a.vc = kv + n;
    for (ti = 0; ti < n_threads_set; ti++) {
        int threads = ti == 0 ? 1 : o->threads;
        st = na_kernels_create("cpu", threads, &a.k);
        if (st != NA_OK)
            goto out_free;
        {
            /* the roof's compute side: the same kernel over NA_BK_L2_CTX tokens
             * read again and again (in L2), at these threads (na_bk_attn_l2) */
            double spread = 0;
            l2 = na_bk_attn_l2(&a, threads, &spread);
            snprintf(name, sizeof(name), "attn_decode f16 32q/8kv/128 ctx=%d t=%d KV in cache",
                     NA_BK_L2_CTX, threads);
            st = na_bench_add(b, name, l2, "GB/s", spread, NULL, 0.0);
            if (st != NA_OK)
                goto out_free;
        }
        for (c = 0; c < n_ctx; c++) {
            double med, spread, bytes, copy, copy_one = 0.0;
            a.ctx = cs[c];
            /* t=N: the 1-thread copy is interleaved too, for the target row */
            na_bk_time2(na_bk_attn_call, &a, threads == 1 ? copy1 : copyN,
                        threads == 1 ? NULL : copy1, o->quick ? 0.1 : 0.3, NA_BK_ATTN_BURST,
                        &med, &spread,
                        &copy, &copy_one);
            bytes = 2.0 * (double)a.ctx * (double)row * 2.0;
            snprintf(name, sizeof(name), "attn_decode f16 32q/8kv/128 ctx=%dK t=%d",
                     a.ctx / 1024, threads);
            snprintf(ref, sizeof(ref), "STREAM copy t=%d (interleaved)", threads);
            st = na_bench_add(b, name, bytes / med / 1e9, "GB/s", spread, ref, copy);
            /* the target row at the thread count used (the last pass):
             * attention t=o->threads vs the 1-thread copy */
            if (st == NA_OK && ti == n_threads_set - 1) {
                snprintf(name, sizeof(name), "attn_decode f16 32q/8kv/128 ctx=%dK TARGET "
                         "attn t=%d vs copy t=1", a.ctx / 1024, threads);
                snprintf(ref, sizeof(ref), "STREAM copy t=1 (interleaved)");
                st = na_bench_add(b, name, bytes / med / 1e9, "GB/s", spread, ref,
                                  threads == 1 ? copy : copy_one);
            }
            /* the roof: min(copy at these threads, the in-cache kernel at these
             * threads) */
            if (st == NA_OK && ti == n_threads_set - 1 && a.ctx >= 8192 && l2 > 0) {
                double roof = l2 < copy ? l2 : copy;
                snprintf(name, sizeof(name), "attn_decode f16 32q/8kv/128 ctx=%dK TARGET "
                         "attn roof t=%d", a.ctx / 1024, threads);
                snprintf(ref, sizeof(ref), "min(copy t=%d, in-cache kernel t=%d)", threads,
                         threads);
                st = na_bench_add(b, name, bytes / med / 1e9, "GB/s", spread, ref, roof);
            }
            if (st != NA_OK)
                break;
        }
        na_kernels_destroy(a.k);
        a.k = NULL;
        if (st != NA_OK)
            goto out_free;
    }

out_free:
    free(a.out);
    free(a.q);
    free(kv);
    return st;
}

/* ---- matmul ---------------------------------------------------------------- */
typedef struct {
    na_kernels_t *k;
    float        *y, *x;
    na_tensor_t   w;
    const uint8_t *copies;       /* n_copies consecutive copies of the weight */
    na_kweight_t  *placed;       /* each copy placed once, as the engine places at load
                                  * (a backend may reorder it then: kernels/cpu/cpu_pack.c) */
    size_t        wbytes;
    int           n_copies, batch;
    int           sgemm;         /* 1: cblas_sgemm with F32 weights */
    int           threads;       /* the peer's OpenBLAS threads */
} na_bk_mm_t;

static void na_bk_mm_call(void *ctx, int rep)
{
    na_bk_mm_t *m = ctx;
    na_tensor_t w = m->w;
    w.data = m->copies + (size_t)(rep % m->n_copies) * m->wbytes;
    if (m->sgemm) {
        /* the peer: OpenBLAS with its own threads (the cpu backend keeps it
         * at 1 thread and splits rows over its pool instead) */
        openblas_set_num_threads(m->threads);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m->batch, w.rows, w.cols, 1.0f,
                    m->x, w.cols, (const float *)w.data, w.cols, 0.0f, m->y, w.rows);
        openblas_set_num_threads(1);
    } else {
        na_kbuf_t y = na_kbuf_host(m->y, (size_t)m->batch * w.rows * sizeof(float));
        na_kbuf_t x = na_kbuf_host(m->x, (size_t)m->batch * w.cols * sizeof(float));
        (void)m->k->ops->matmul(m->k, &y, &x, &m->placed[rep % m->n_copies], m->batch);
    }
}

/* n_copies copies of a random (rows, cols) weight of dtype dt. */
static uint8_t *na_bk_weights(na_dtype_t dt, int rows, int cols, int n_copies, size_t *wbytes)
{
    size_t n = (size_t)rows * cols, bytes = na_dtype_bytes(dt, n), i;
    uint8_t *p = na_bench_alloc(bytes * (size_t)n_copies);
    uint64_t seed = 7 + (uint64_t)dt;
    int c;

    if (p == NULL)
        return NULL;
    if (dt > NA_DTYPE_Q8_0) {          /* the other block formats: quantised f32 */
        float *f = malloc(sizeof(float) * n);
        if (f == NULL) {
            free(p);
            return NULL;
        }
        for (i = 0; i < n; i++)
            f[i] = na_bk_rand(&seed);
        na_quantize(dt, f, n, p);
        free(f);
        n = 0;
    }
    for (i = 0; i < n; i++) {
        float f = na_bk_rand(&seed);
        if (dt == NA_DTYPE_F32) {
            memcpy(p + 4 * i, &f, 4);
        } else if (dt == NA_DTYPE_F16 || dt == NA_DTYPE_BF16) {
            uint16_t h = dt == NA_DTYPE_F16 ? na_f32_to_f16(f) : na_f32_to_bf16(f);
            memcpy(p + 2 * i, &h, 2);
        } else {
            uint8_t *blk = p + (i / 32) * NA_Q8_0_BLOCK_SIZE;
            if (i % 32 == 0) {
                uint16_t d = na_f32_to_f16(0.01f);
                memcpy(blk, &d, 2);
            }
            blk[2 + i % 32] = (uint8_t)(int8_t)(f * 127.0f);
        }
    }
    for (c = 1; c < n_copies; c++)
        memcpy(p + (size_t)c * bytes, p, bytes);
    *wbytes = bytes;
    return p;
}

/* Set up m for a matmul bench: x (nx floats, random from seed), y (ny floats)
 * and the cpu kernels on `threads` threads (OpenBLAS too). Fails with
 * NA_ERR_NOMEM or the backend's error, holding nothing then. */
static na_status_t na_bk_mm_init(na_bk_mm_t *m, size_t nx, size_t ny, uint64_t seed, int threads)
{
    na_status_t st;
    size_t i;

    memset(m, 0, sizeof(*m));
    m->x = malloc(sizeof(float) * nx);
    m->y = malloc(sizeof(float) * ny);
    if (m->x == NULL || m->y == NULL) {
        st = na_err(NA_ERR_NOMEM, "bench kernels: out of memory");
        goto err_free;
    }
    for (i = 0; i < nx; i++)
        m->x[i] = na_bk_rand(&seed);
    st = na_kernels_create("cpu", threads, &m->k);
    if (st != NA_OK)
        goto err_free;
    m->threads = threads;
    return NA_OK;

err_free:
    free(m->y);
    free(m->x);
    return st;
}

static void na_bk_mm_cleanup(na_bk_mm_t *m)
{
    na_kernels_destroy(m->k);
    free(m->y);
    free(m->x);
}

/* Undo na_bk_mm_weights (also a partial one). */
static void na_bk_mm_weights_free(na_bk_mm_t *m)
{
    int c;
    for (c = 0; m->placed != NULL && c < m->n_copies; c++)
        m->k->ops->unplace(m->k, &m->placed[c]);
    free(m->placed);
    free((void *)m->copies);
    m->placed = NULL;
    m->copies = NULL;
}

/* m->w := a rows x cols weight of dt, in copies that rotate through
 * >= 128 MiB (m->copies), each placed on m->k (m->placed); undo with
 * na_bk_mm_weights_free. NA_ERR_NOMEM or the backend's error. */
static na_status_t na_bk_mm_weights(na_bk_mm_t *m, na_dtype_t dt, int rows, int cols)
{
    na_status_t st = NA_OK;
    int c;

    m->w.dtype = dt;
    m->w.rows = rows;
    m->w.cols = cols;
    m->w.layout = NA_LAYOUT_ROWS;
    m->n_copies = (int)(((size_t)128 << 20) / na_dtype_bytes(dt, (size_t)rows * cols)) + 1;
    m->copies = na_bk_weights(dt, rows, cols, m->n_copies, &m->wbytes);
    m->placed = calloc((size_t)m->n_copies, sizeof(*m->placed));
    if (m->copies == NULL || m->placed == NULL) {
        na_bk_mm_weights_free(m);
        return na_err(NA_ERR_NOMEM, "bench kernels: no memory for the weights");
    }
    for (c = 0; c < m->n_copies && st == NA_OK; c++) {
        na_tensor_t w = m->w;
        w.data = m->copies + (size_t)c * m->wbytes;
        st = m->k->ops->place(m->k, &w, &m->placed[c]);
    }
    if (st != NA_OK)
        na_bk_mm_weights_free(m);
    return st;
}

static na_status_t na_bk_matmul(na_bench_t *b, const na_cli_bench_opts_t *o,
                                na_bench_copy_t *copyN, unsigned dtypes)
{
    static const int batches[] = { 1, 8, 64 };
    int dim = o->quick ? 2048 : 4096, bi, dt;
    na_bk_mm_t m;
    double sg_med[3], sg_spread[3];
    na_status_t st;
    char name[96], ref[96];

    st = na_bk_mm_init(&m, 64 * (size_t)dim, 64 * (size_t)dim, 3, o->threads);
    if (st != NA_OK)
        return st;
    for (dt = 0; dt < NA_DTYPE_COUNT && st == NA_OK; dt++) {
        if (!(dtypes & (1u << dt)) && dt != NA_DTYPE_F32)   /* f32: the sgemm reference */
            continue;
        st = na_bk_mm_weights(&m, (na_dtype_t)dt, dim, dim);
        if (st != NA_OK)
            break;
        for (bi = 0; bi < 3; bi++) {
            double med, spread, copy = 0.0, flops = 2.0 * batches[bi] * (double)dim * dim;
            m.batch = batches[bi];
            if (dt == NA_DTYPE_F32) {                  /* the reference, once per batch */
                m.sgemm = 1;
                na_bk_time(na_bk_mm_call, &m, NULL, o->quick ? 0.1 : 0.25, &sg_med[bi],
                           &sg_spread[bi], NULL);
                snprintf(name, sizeof(name), "cblas_sgemm f32 %dx%d b=%d t=%d", dim, dim,
                         m.batch, o->threads);
                st = na_bench_add(b, name, flops / sg_med[bi] / 1e9, "GFLOP/s", sg_spread[bi],
                                  NULL, 0.0);
                if (st != NA_OK)
                    break;
                m.sgemm = 0;
            }
            na_bk_time(na_bk_mm_call, &m, m.batch == 1 ? copyN : NULL, o->quick ? 0.1 : 0.25,
                       &med, &spread, &copy);
            snprintf(name, sizeof(name), "matmul %s %dx%d b=%d t=%d",
                     na_dtype_name((na_dtype_t)dt), dim, dim, m.batch, o->threads);
            snprintf(ref, sizeof(ref), "cblas_sgemm f32 b=%d", m.batch);
            st = na_bench_add(b, name, flops / med / 1e9, "GFLOP/s", spread, ref,
                              flops / sg_med[bi] / 1e9);
            if (st == NA_OK && m.batch == 1) {
                snprintf(name, sizeof(name), "matmul %s %dx%d b=1 t=%d weight read",
                         na_dtype_name((na_dtype_t)dt), dim, dim, o->threads);
                snprintf(ref, sizeof(ref), "STREAM copy t=%d (interleaved)", o->threads);
                st = na_bench_add(b, name, (double)m.wbytes / med / 1e9, "GB/s", spread, ref, copy);
            }
            if (st != NA_OK)
                break;
        }
        na_bk_mm_weights_free(&m);
    }
    na_bk_mm_cleanup(&m);
    return st;
}

/* Small-batch F32 matmul on the shapes of a 15M-parameter model (dim 288,
 * hidden 768, vocab 32000) and on 4096x4096: the cpu kernel (row kernel
 * below NA_CPU_F32_SGEMM_MIN_BATCH, cblas_sgemm from there) against
 * cblas_sgemm of the same shape; the ratio locates the crossover. Weights
 * rotate through >= 128 MiB of copies, as the engine reads them from DRAM. */
static na_status_t na_bk_matmul_f32_small(na_bench_t *b, const na_cli_bench_opts_t *o)
{
    static const int shapes[][2] = { { 768, 288 }, { 32000, 288 }, { 4096, 4096 } };
    static const int batches[] = { 2, 4, 8, 16, 32 };
    int n_shapes = o->quick ? 2 : 3, n_b = o->quick ? 3 : 5, si, bi;
    na_bk_mm_t m;
    na_status_t st;
    char name[96], ref[96];

    st = na_bk_mm_init(&m, 32 * (size_t)4096, 32 * (size_t)32000, 5, o->threads);
    if (st != NA_OK)
        return st;
    for (si = 0; si < n_shapes && st == NA_OK; si++) {
        st = na_bk_mm_weights(&m, NA_DTYPE_F32, shapes[si][0], shapes[si][1]);
        if (st != NA_OK)
            break;
        for (bi = 0; bi < n_b && st == NA_OK; bi++) {
            double med, spread, sg_med, sg_spread;
            double flops = 2.0 * batches[bi] * (double)m.w.rows * m.w.cols;
            m.batch = batches[bi];
            m.sgemm = 1;
            na_bk_time(na_bk_mm_call, &m, NULL, o->quick ? 0.1 : 0.25, &sg_med, &sg_spread, NULL);
            m.sgemm = 0;
            na_bk_time(na_bk_mm_call, &m, NULL, o->quick ? 0.1 : 0.25, &med, &spread, NULL);
            snprintf(name, sizeof(name), "matmul f32 %dx%d b=%d t=%d", m.w.rows, m.w.cols,
                     m.batch, o->threads);
            snprintf(ref, sizeof(ref), "cblas_sgemm f32 %dx%d b=%d", m.w.rows, m.w.cols,
                     m.batch);
            st = na_bench_add(b, name, flops / med / 1e9, "GFLOP/s", spread, ref,
                              flops / sg_med / 1e9);
        }
        na_bk_mm_weights_free(&m);
    }
    na_bk_mm_cleanup(&m);
    return st;
}

static void na_bk_usage(FILE *f)
{
    fprintf(f, "usage: nearattn bench kernels [--json FILE] [--threads N] [--quick]\n"
               "                              [--part all|attn|matmul|small] [--backend cpu|cuda]\n"
               "                              [--dtypes LIST]\n\n"
               "Decode attention (f16 KV, 32 q / 8 kv heads, head_dim 128, contexts 1K-64K)\n"
               "as GB/s of KV read beside a STREAM copy measured in the same run, and\n"
               "matmul GFLOP/s for F32/F16/BF16/Q8_0 weights beside cblas_sgemm, and\n"
               "small-batch F32 matmul on 15M-model shapes beside cblas_sgemm.\n\n"
               "options:\n" NA_CLI_BENCH_OPTS_HELP
               "  --dtypes LIST  matmul weight types (default f32,f16,bf16,q8_0, with --backend\n"
               "                 cuda all; also q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k);\n"
               "                 f32, the reference, always runs\n"
               "  --part P       run only attn, matmul or small (the F32 small-batch\n"
               "                 crossover); STREAM copy always runs (default all)\n"
               "  --backend B    cpu (default) or cuda: the GPU's decode attention GB/s\n"
               "                 (ctx 1K-64K, batch 1-64) beside a device-to-device copy and\n"
               "                 matmul TFLOP/s beside cublasSgemm, measured in the same run\n"
               "                 and batch-1 decode tok/s of a generated 1B-shape bf16 model\n"
               "                 (--part model) beside weight bytes / copy bandwidth\n"
               "                 (no CUDA device: one 'no CUDA device' line, exit 1)\n");
}

/* kernels' own options: --part P, --backend B (ctx: their two strings). */
typedef struct {
    const char *part, *backend;
    unsigned    dtypes;         /* --dtypes: bit per na_dtype_t of the matmul rows (0: the
                                   backend's default set) */
} na_bk_own_t;

static int na_bk_opt(const char *cmd, void *ctx, int argc, char **argv, int *i)
{
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;

    if (strcmp(argv[*i], "--backend") == 0) {
        if (v == NULL || (strcmp(v, "cpu") && strcmp(v, "cuda"))) {
            fprintf(stderr, "nearattn %s: --backend needs cpu or cuda\n", cmd);
            return 2;
        }
        ((na_bk_own_t *)ctx)->backend = v;
        ++*i;
        return 1;
    }
    if (strcmp(argv[*i], "--dtypes") == 0) {
        char buf[256], *tok, *save = NULL;
        unsigned m = 0;
        int t;
        snprintf(buf, sizeof(buf), "%s", v ? v : "");
        for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if ((t = na_dtype_parse(tok)) < 0) {
                fprintf(stderr, "nearattn %s: --dtypes: unknown type '%s'\n", cmd, tok);
                return 2;
            }
            m |= 1u << t;
        }
        if (m == 0) {
            fprintf(stderr, "nearattn %s: --dtypes needs a list of types\n", cmd);
            return 2;
        }
        ((na_bk_own_t *)ctx)->dtypes = m;
        ++*i;
        return 1;
    }
    if (strcmp(argv[*i], "--part") != 0)
        return 0;
    if (v == NULL || (strcmp(v, "all") && strcmp(v, "attn") && strcmp(v, "matmul") &&
                      strcmp(v, "small") && strcmp(v, "model"))) {
        fprintf(stderr, "nearattn %s: --part needs all, attn, matmul, small or model\n", cmd);
        return 2;
    }
    ((na_bk_own_t *)ctx)->part = v;
    ++*i;
    return 1;
}

int na_cli_bench_kernels(int argc, char **argv)
{
    na_cli_bench_opts_t o;
    na_bench_t *b = NULL;
    na_bench_copy_t *copy1 = NULL, *copyN = NULL;
    double copy, spread;
    na_status_t st;
    int i, rc;
    char name[64];
    na_bk_own_t own = { "all", "cpu", 0 };
    const char *part;
    const na_cli_bench_own_t opts = { .own = na_bk_opt, .ctx = &own };

    rc = na_cli_bench_parse("kernels", argc, argv, &o, na_bk_usage, &opts);
    if (rc >= 0)
        return rc;
    part = own.part;
    st = na_bench_create("kernels", &b);
    if (st != NA_OK)
        return na_cli_fail("bench kernels", st);
    if (!strcmp(own.backend, "cuda")) {
        if (!strcmp(part, "small")) {
            na_bench_destroy(b);
            fprintf(stderr, "nearattn bench kernels: --part small is a cpu part\n");
            return 2;
        }
    } else if (!strcmp(part, "model")) {
        na_bench_destroy(b);
        fprintf(stderr, "nearattn bench kernels: --part model is a cuda part (--backend cuda)\n");
        return 2;
    }
    if (!strcmp(own.backend, "cuda")) {
        st = na_cli_bench_kernels_cuda(b, o.quick, part,
                                       own.dtypes ? own.dtypes : ~0u);
        return na_cli_bench_end("kernels", "bench kernels", st, b, &o);
    }
    /* The limits on their own first, then interleaved with each measurement. */
    for (i = 0; i < (o.threads > 1 ? 2 : 1); i++) {
        int t = i == 0 ? 1 : o.threads;
        st = na_bench_stream_copy(t, NA_BK_COPY_BYTES, o.quick ? 4 : 10, &copy, &spread);
        if (st != NA_OK)
            goto out;
        snprintf(name, sizeof(name), "STREAM copy t=%d", t);
        na_bench_add(b, name, copy, "GB/s", spread, NULL, 0.0);
    }
    st = na_bench_copy_create(1, NA_BK_COPY_BYTES, &copy1);
    if (st == NA_OK)
        st = na_bench_copy_create(o.threads, NA_BK_COPY_BYTES, &copyN);
    if (st == NA_OK && (!strcmp(part, "all") || !strcmp(part, "attn")))
        st = na_bk_attention(b, &o, copy1, copyN);
    if (st == NA_OK && (!strcmp(part, "all") || !strcmp(part, "matmul")))
        st = na_bk_matmul(b, &o, copyN,
                          own.dtypes ? own.dtypes
                                     : (1u << NA_DTYPE_F32) | (1u << NA_DTYPE_F16) |
                                           (1u << NA_DTYPE_BF16) | (1u << NA_DTYPE_Q8_0));
    if (st == NA_OK && (!strcmp(part, "all") || !strcmp(part, "small")))
        st = na_bk_matmul_f32_small(b, &o);
    if (st != NA_OK)
        goto out;
    na_bench_note(b, "ratios: attn_decode t=1 / STREAM copy t=1 and t=N / copy t=N: "
                  "per-core and whole-machine efficiency");
    na_bench_note(b, "TARGET rows: attn_decode at t=%d (the --threads used%s) / STREAM copy "
                  "at t=1, both in this run -- the issue's target is >= 85%% at ctx >= 8K",
                  o.threads, o.threads > 1 ? "; context split across the threads" : "");
    na_bench_note(b, "TARGET attn roof rows: attn_decode from DRAM / min(STREAM copy at the same "
                  "threads, the same kernel with its KV in cache at the same threads (N "
                  "concurrent 1-thread runs over ctx=%d, read again and again)) -- target >= "
                  "85%% at ctx >= 8K", NA_BK_L2_CTX);
    na_bench_note(b, "STREAM copy: 2 x %d MiB arrays, counts read + write bytes; 'interleaved' "
                  "= one copy pass before each timed call, median",
                  (int)(NA_BK_COPY_BYTES >> 20));
    na_bench_note(b, "attn_decode counts the K+V bytes read; matmul 'weight read' the weight "
                  "bytes");
out:
    na_bench_copy_destroy(copyN);
    na_bench_copy_destroy(copy1);
    return na_cli_bench_end("kernels", "bench kernels", st, b, &o);
}

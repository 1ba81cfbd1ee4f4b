/* cli/plan_rates.c — the planner's inputs measured on this machine, and
 * `nearattn check-config FILE --plan [--rates measured|RATES]`
 * (common/plan.h, docs/benchmarks.md "Planner").
 *
 * Measured in process, a second or two: the model's matmuls at batch 1
 * (weight streaming, gemv_Bps) and batch 64 (gemm_flops) with the cpu
 * kernels over one matrix as large as all the layers' weights (so cache
 * residency is the model's), and decode attention over 4096 tokens of f16 KV
 * (attn_Bps). Not measured here: the disk (disk_Bps) and the link (link_Bps,
 * link_rtt_s) — `nearattn bench e2e --sweep` measures the link in-run; give
 * them in a rates file otherwise. What was assumed is printed as such. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan_rates.h"
#include "common/bench.h"
#include "common/config.h"
#include "common/model.h"
#include "kernels/kernels.h"

/* Median seconds of reps calls of matmul with batch b. */
static double pr_time_matmul(na_kernels_t *k, float *y, float *x, const na_tensor_t *w,
                             int b, int reps)
{
    na_kbuf_t yb = na_kbuf_host(y, (size_t)b * w->rows * sizeof(float));
    na_kbuf_t xb = na_kbuf_host(x, (size_t)b * w->cols * sizeof(float));
    na_kweight_t pw;
    double t[16], t0;
    int i;
    if (k->ops->place(k, w, &pw) != NA_OK)
        return 1e9;
    (void)k->ops->matmul(k, &yb, &xb, &pw, b);          /* warm up */
    (void)na_kernels_finish(k);
    for (i = 0; i < reps && i < 16; i++) {
        t0 = na_bench_now();
        (void)k->ops->matmul(k, &yb, &xb, &pw, b);
        (void)na_kernels_finish(k);
        t[i] = na_bench_now() - t0;
    }
    k->ops->unplace(k, &pw);
    return na_bench_median(t, reps < 16 ? reps : 16);
}

na_status_t na_cli_plan_measure(const na_model_config_t *mc, int threads, na_plan_rates_t *r)
{
    const int d = mc->dim, q = mc->n_heads * mc->head_dim, kv = mc->n_kv_heads * mc->head_dim;
    const long P = (long)d * (q + 2 * kv) + (long)q * d + 3L * d * mc->hidden_dim;
    const int rows = (int)((P * mc->n_layers + d - 1) / d), ctx = 4096;
    na_kernels_t *k = NULL;
    na_tensor_t w;
    float *wt = NULL, *x = NULL, *y = NULL, *qv = NULL, *o = NULL;
    uint16_t *kc = NULL;
    double t, tt[8], t0;
    size_t i;
    na_status_t st;

    st = na_kernels_create("cpu", threads, &k);
    if (st != NA_OK)
        return st;
    wt = malloc((size_t)rows * d * sizeof(float));
    x = malloc((size_t)64 * d * sizeof(float));
    y = malloc((size_t)64 * rows * sizeof(float));
    kc = malloc((size_t)2 * ctx * kv * sizeof(uint16_t));
    qv = malloc((size_t)q * sizeof(float));
    o = malloc((size_t)q * sizeof(float));
    if (wt == NULL || x == NULL || y == NULL || kc == NULL || qv == NULL || o == NULL) {
        st = na_err(NA_ERR_NOMEM, "plan: out of memory for the measurements");
        goto out;
    }
    for (i = 0; i < (size_t)rows * d; i++)
        wt[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    for (i = 0; i < (size_t)64 * d; i++)
        x[i] = (float)((i * 40503u) % 997) * 1e-3f - 0.5f;
    for (i = 0; i < (size_t)2 * ctx * kv; i++)
        kc[i] = na_f32_to_f16((float)((i * 7919u) % 1009) * 1e-3f - 0.5f);
    for (i = 0; i < (size_t)q; i++)
        qv[i] = (float)(i % 13) * 0.05f - 0.3f;
    w.dtype = NA_DTYPE_F32;
    w.rows = rows;
    w.cols = d;
    w.data = wt;
    t = pr_time_matmul(k, y, x, &w, 1, 9);
    r->gemv_Bps = (double)rows * d * sizeof(float) / t;
    t = pr_time_matmul(k, y, x, &w, 64, 5);
    r->gemm_flops = 2.0 * 64 * rows * d / t;
    (void)na_kernels_attn_decode_host(k, o, qv, kc, kc + (size_t)ctx * kv, NA_DTYPE_F16, ctx,
                                      mc->n_heads, mc->n_kv_heads, mc->head_dim);
    for (i = 0; i < 8; i++) {
        t0 = na_bench_now();
        (void)na_kernels_attn_decode_host(k, o, qv, kc, kc + (size_t)ctx * kv, NA_DTYPE_F16,
                                          ctx, mc->n_heads, mc->n_kv_heads, mc->head_dim);
        tt[i] = na_bench_now() - t0;
    }
    r->attn_Bps = 2.0 * ctx * kv * 2 / na_bench_median(tt, 8);
    st = NA_OK;
out:
    free(wt);
    free(x);
    free(y);
    free(kc);
    free(qv);
    free(o);
    na_kernels_destroy(k);
    return st;
}

void na_cli_plan_defaults(na_plan_rates_t *r)
{
    memset(r, 0, sizeof(*r));
    r->gemv_Bps = 20e9;
    r->gemm_flops = 90e9;
    r->attn_Bps = 10e9;
    r->disk_Bps = 1.0e9;       /* ../shared/BENCHMARKS.md: O_DIRECT read of this machine kind */
    r->link_Bps = 1.1e9;       /* tbf 10gbit veth as seen here; loopback tcp is faster */
    r->link_rtt_s = 50e-6;
    r->step_overhead_s = 0;
}

/* Print the plan for cfg's model at a few batch/context points. */
static void pr_print(const na_cfg_t *cfg, const na_model_config_t *mc, const na_plan_rates_t *r,
                     const char *how)
{
    static const int bs[] = { 1, 8, 32 }, cs[] = { 512, 2048, 8192 };
    const int ssd = cfg->kv.tier == NA_CFG_TIER_SSD;
    size_t i, j;

    printf("\nplan (%s rates; model dim %d, %d layers, %d/%d heads, KV f16 on %s):\n", how,
           mc->dim, mc->n_layers, mc->n_heads, mc->n_kv_heads, ssd ? "SSD" : "DRAM");
    na_plan_rates_print(r, stdout);
    printf("%6s %6s | %10s %10s %10s | %12s %12s %12s | %4s %5s %10s\n", "batch", "ctx",
           "t_m us", "t_a us", "KB/layer", "mono tok/s", "kvfetch tok/s", "offload tok/s",
           "bif", "nodes", "tok/s");
    for (i = 0; i < sizeof(bs) / sizeof(bs[0]); i++)
        for (j = 0; j < sizeof(cs) / sizeof(cs[0]); j++) {
            na_plan_est_t em, ek, eo;
            na_plan_suggest_t s;
            int B = bs[i], C = cs[j];
            na_plan_estimate(mc, r, NA_PLAN_MONO, B, C, 1, 1, 0, &em);
            na_plan_estimate(mc, r, NA_PLAN_KVFETCH, B, C, cfg->n_storage, 1, ssd, &ek);
            na_plan_estimate(mc, r, NA_PLAN_OFFLOAD, B, C, cfg->n_storage,
                             (int)cfg->parallel.batches_in_flight, ssd, &eo);
            na_plan_suggest(mc, r, B, C, cfg->n_compute, ssd, &s);
            printf("%6d %6d | %10.1f %10.1f %10.1f | %12.1f %12.1f %12.1f | %4d %5d %10.1f\n", B,
                   C, 1e6 * eo.t_m, 1e6 * eo.t_a, eo.bytes_layer / 1024.0, B / em.step_s,
                   B / ek.step_s, B / eo.step_s, s.bif, s.nodes, s.tok_s);
        }
    printf("offload columns use this layout (%d storage node(s), %ld batch(es) in flight); "
           "bif/nodes/tok/s is the suggestion: t_a ~= t_m/(n-1) (Lamina 4.1, 5.1) with "
           "n-1 = %d compute replica(s)\n", cfg->n_storage, cfg->parallel.batches_in_flight,
           cfg->n_compute > 0 ? cfg->n_compute : 1);
}

int na_cli_plan(const na_cfg_t *cfg, const char *rates)
{
    na_plan_rates_t r;
    na_model_t *m = NULL;
    na_status_t st;
    const char *how;

    if (cfg->model.path == NULL) {
        fprintf(stderr, "nearattn check-config --plan: the layout names no model.path\n");
        return 1;
    }
    st = na_model_open(cfg->model.path, &m);
    if (st != NA_OK)
        return na_cli_fail("check-config --plan", st);
    na_cli_plan_defaults(&r);
    if (rates == NULL || !strcmp(rates, "measured")) {
        st = na_cli_plan_measure(&m->cfg, 1, &r);
        if (st != NA_OK) {
            na_model_destroy(m);
            return na_cli_fail("check-config --plan", st);
        }
        how = "measured";
        printf("\nrates: gemv_Bps, gemm_flops, attn_Bps measured now (1 thread); disk_Bps, "
               "link_Bps, link_rtt_s assumed (give --rates FILE; `nearattn bench e2e --sweep` "
               "measures the link)\n");
    } else {
        st = na_plan_rates_load(rates, &r);
        if (st != NA_OK) {
            na_model_destroy(m);
            return na_cli_fail("check-config --plan", st);
        }
        how = "given";
    }
    pr_print(cfg, &m->cfg, &r, how);
    na_model_destroy(m);
    return 0;
}

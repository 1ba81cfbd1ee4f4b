/* common/plan.c — planner arithmetic (see common/plan.h). The formulas are
 * written out in docs/benchmarks.md ("Analytic traffic", "Planner"). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/plan.h"

#define PLAN_HDR   64.0      /* NA_WIRE_HDR_SIZE: every message */
#define PLAN_WBYTES 4.0      /* weights as f32 (llama2.c checkpoints, generated models) */
#define PLAN_KVB   2.0       /* KV elements as f16 */

static double pl_r64(double x)
{
    return ceil(x / 64.0) * 64.0;
}

/* DECODE_ATTN of n entries (f32 rows) and its ATTN_OUT (f32 o). */
static void pl_attn_msgs(const na_model_config_t *mc, int n, double *out, double *in)
{
    const double q = (double)mc->n_heads * mc->head_dim, kv = (double)mc->n_kv_heads * mc->head_dim;
    /* entries start on 64-byte boundaries; the last one is not padded */
    *out = PLAN_HDR + pl_r64(32.0 + 24.0 * n) + (n - 1) * pl_r64((q + 2 * kv) * 4.0) +
           (q + 2 * kv) * 4.0;
    *in = PLAN_HDR + pl_r64(32.0 + 24.0 * n) + (n - 1) * pl_r64(q * 4.0) + q * 4.0;
}

void na_plan_traffic_nodes(const na_model_config_t *mc, na_plan_kind_t kind, int n_req,
                           int n_batches, int n_nodes, int ctx, int n_steps,
                           na_plan_traffic_t *t)
{
    const double kv = (double)mc->n_kv_heads * mc->head_dim, L = mc->n_layers;
    int s, b;

    t->out = t->in = 0;
    if (n_req <= 0 || n_steps <= 0 || kind == NA_PLAN_MONO)
        return;
    if (n_batches < 1)
        n_batches = 1;
    if (n_nodes < 1)
        n_nodes = 1;
    for (s = 0; s < n_steps; s++) {
        double pos = (double)ctx + s;
        if (kind == NA_PLAN_KVFETCH) {
            double row = kv * PLAN_KVB;
            /* KV_FETCH; one-row PREFILL_KV | KV_DATA of pos rows; ACK */
            t->out += L * n_req * ((PLAN_HDR + 16) + (PLAN_HDR + 64 + pl_r64(row) + row));
            t->in += L * n_req * ((PLAN_HDR + 64 + pl_r64(pos * row) + pos * row) + (PLAN_HDR + 8));
            continue;
        }
        for (b = 0; b < n_batches; b++) {
            int nb = n_req / n_batches + (b < n_req % n_batches), msgs, k;
            if (nb == 0)
                continue;
            msgs = nb < n_nodes ? nb : n_nodes;
            for (k = 0; k < msgs; k++) {
                int ne = nb / msgs + (k < nb % msgs);
                double o, i;
                pl_attn_msgs(mc, ne, &o, &i);
                t->out += L * o;
                t->in += L * i;
            }
        }
    }
}

void na_plan_traffic(const na_model_config_t *mc, na_plan_kind_t kind, int n_req, int n_batches,
                     int ctx, int n_steps, na_plan_traffic_t *out)
{
    na_plan_traffic_nodes(mc, kind, n_req, n_batches, 1, ctx, n_steps, out);
}

/* Parameters of one layer's matmuls. */
static double pl_params_layer(const na_model_config_t *mc)
{
    const double d = mc->dim, q = (double)mc->n_heads * mc->head_dim,
                 kv = (double)mc->n_kv_heads * mc->head_dim, h = mc->hidden_dim;
    return d * (q + 2 * kv) + q * d + 3 * d * h;
}

/* A matmul of P parameters over b rows. */
static double pl_matmul_s(const na_plan_rates_t *r, double P, int b)
{
    double mem = P * PLAN_WBYTES / r->gemv_Bps, fl = 2.0 * b * P / r->gemm_flops;
    return mem > fl ? mem : fl;
}

void na_plan_estimate(const na_model_config_t *mc, const na_plan_rates_t *r, na_plan_kind_t kind,
                      int B, int ctx, int n_nodes, int bif, int ssd, na_plan_est_t *e)
{
    const double kv = (double)mc->n_kv_heads * mc->head_dim, L = mc->n_layers;
    const double kvb = 2.0 * ctx * kv * PLAN_KVB;        /* one request's KV of one layer */
    na_plan_traffic_t tr;
    int b, used;

    memset(e, 0, sizeof(*e));
    if (bif < 1 || kind != NA_PLAN_OFFLOAD)
        bif = 1;
    if (n_nodes < 1)
        n_nodes = 1;
    b = (B + bif - 1) / bif;
    e->t_m = pl_matmul_s(r, pl_params_layer(mc), b) + r->step_overhead_s;
    e->t_head = pl_matmul_s(r, (double)mc->vocab_size * mc->dim, B);
    used = b < n_nodes ? b : n_nodes;
    switch (kind) {
    case NA_PLAN_MONO:
        e->t_attn = b * kvb / r->attn_Bps;
        e->t_a = e->t_attn;
        e->step_s = L * (e->t_m + e->t_a) + e->t_head;
        return;
    case NA_PLAN_KVFETCH:
        na_plan_traffic(mc, kind, b, 1, ctx, 1, &tr);
        e->bytes_layer = (tr.out + tr.in) / L;
        /* per entry: two round trips, the bytes, the node's read, local attention */
        e->t_net = b * 2 * r->link_rtt_s + e->bytes_layer / r->link_Bps;
        e->t_disk = b * kvb / (ssd ? r->disk_Bps : r->attn_Bps);
        e->t_attn = b * kvb / r->attn_Bps;
        e->t_a = e->t_net + e->t_disk + e->t_attn;
        e->step_s = L * (e->t_m + e->t_a) + e->t_head;
        return;
    case NA_PLAN_OFFLOAD:
        na_plan_traffic_nodes(mc, kind, b, 1, n_nodes, ctx, 1, &tr);
        e->bytes_layer = (tr.out + tr.in) / L;
        e->t_net = r->link_rtt_s + e->bytes_layer / r->link_Bps;
        e->t_attn = b * kvb / r->attn_Bps / used;
        e->t_disk = ssd ? b * kvb / r->disk_Bps / used : 0;
        e->t_a = e->t_net + (e->t_attn > e->t_disk ? e->t_attn : e->t_disk);
        {
            /* per layer, all bif batches: the compute node runs bif slices; a
             * batch cannot start its next slice before its attention is back;
             * the storage devices serve the batches one after the other */
            double cyc = bif * e->t_m, chain = e->t_m + e->t_a;
            double dev = bif * (e->t_a - e->t_net);
            if (chain > cyc) cyc = chain;
            if (dev > cyc) cyc = dev;
            e->step_s = L * cyc + bif * pl_matmul_s(r, (double)mc->vocab_size * mc->dim, b);
        }
        e->bytes_layer *= bif;
        return;
    }
}

void na_plan_suggest(const na_model_config_t *mc, const na_plan_rates_t *r, int B, int ctx,
                     int n_compute, int ssd, na_plan_suggest_t *s)
{
    na_plan_est_t e1, e;
    int n = n_compute + 1, nodes, b;
    double budget;

    if (n < 2)
        n = 2;
    if (n > B)
        n = B > 1 ? B : 1;
    b = (B + n - 1) / n;
    /* t_a(nodes) = t_net + t_dev(1 node)/nodes; want t_a = t_m/(n-1) */
    na_plan_estimate(mc, r, NA_PLAN_OFFLOAD, b, ctx, 1, 1, ssd, &e1);
    budget = (n > 1 ? e1.t_m / (n - 1) : e1.t_m) - e1.t_net;
    {
        double dev = e1.t_a - e1.t_net;
        nodes = budget > 0 ? (int)ceil(dev / budget - 1e-9) : 64;
    }
    if (nodes < 1)
        nodes = 1;
    if (nodes > 64)
        nodes = 64;
    if (nodes > b)
        nodes = b;      /* request partition: no more nodes than requests per batch */
    na_plan_estimate(mc, r, NA_PLAN_OFFLOAD, B, ctx, nodes, n, ssd, &e);
    s->bif = n;
    s->nodes = nodes;
    s->t_m = e.t_m;
    s->t_a = e.t_a;
    s->step_s = e.step_s;
    s->tok_s = e.step_s > 0 ? B / e.step_s : 0;
}

static const struct {
    const char *key;
    size_t off;
} pl_keys[] = {
    { "gemv_Bps", offsetof(na_plan_rates_t, gemv_Bps) },
    { "gemm_flops", offsetof(na_plan_rates_t, gemm_flops) },
    { "attn_Bps", offsetof(na_plan_rates_t, attn_Bps) },
    { "disk_Bps", offsetof(na_plan_rates_t, disk_Bps) },
    { "link_Bps", offsetof(na_plan_rates_t, link_Bps) },
    { "link_rtt_s", offsetof(na_plan_rates_t, link_rtt_s) },
    { "step_overhead_s", offsetof(na_plan_rates_t, step_overhead_s) },
};

na_status_t na_plan_rates_load(const char *path, na_plan_rates_t *r)
{
    FILE *f = fopen(path, "r");
    char line[256];
    int ln = 0;

    if (f == NULL)
        return na_err(NA_ERR_IO, "%s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f) != NULL) {
        char key[64], extra[8];
        double v;
        size_t k;
        int n;
        ln++;
        if (line[strspn(line, " \t\r\n")] == '\0' || line[strspn(line, " \t")] == '#')
            continue;
        n = sscanf(line, "%63s %lf %7s", key, &v, extra);
        if (n != 2 || !isfinite(v) || v < 0) {
            fclose(f);
            return na_err(NA_ERR_FORMAT, "%s:%d: expected 'key value' with a number >= 0", path,
                          ln);
        }
        for (k = 0; k < sizeof(pl_keys) / sizeof(pl_keys[0]); k++)
            if (!strcmp(key, pl_keys[k].key))
                break;
        if (k == sizeof(pl_keys) / sizeof(pl_keys[0])) {
            fclose(f);
            return na_err(NA_ERR_FORMAT, "%s:%d: unknown key '%s'", path, ln, key);
        }
        if (v == 0 && strcmp(key, "link_rtt_s") && strcmp(key, "step_overhead_s")) {
            fclose(f);
            return na_err(NA_ERR_RANGE, "%s:%d: '%s' must be > 0", path, ln, key);
        }
        *(double *)((char *)r + pl_keys[k].off) = v;
    }
    fclose(f);
    return NA_OK;
}

void na_plan_rates_print(const na_plan_rates_t *r, FILE *f)
{
    size_t k;
    for (k = 0; k < sizeof(pl_keys) / sizeof(pl_keys[0]); k++)
        fprintf(f, "%-16s %.6g\n", pl_keys[k].key,
                *(const double *)((const char *)r + pl_keys[k].off));
}

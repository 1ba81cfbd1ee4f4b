/* cli/bench_sweep.c — `nearattn bench e2e --sweep`: the Lamina / INF2-style
 * comparison (docs/benchmarks.md): modes x batch x context x storage nodes x
 * link, each point a separate compute process (cli/bench_point.c) against
 * storage-node processes started here on the link (cli/bench_links.c).
 *
 * For each point: decode tokens/s, speedup over kv-fetch at the same link,
 * batch, context and nodes, the per-step split, bytes per layer counted by
 * the transport beside the analytic count (common/plan.h), the fraction of
 * the link's bandwidth reached (measured in-run by a bulk transfer over the
 * same link: the probe), and the planner's predicted step time beside the
 * measured one. Writes one JSON document and gnuplot PNGs beside it. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/e2e_sweep.h"
#include "cli/plan_rates.h"
#include "common/bench.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "common/plan.h"

#define SW_MAX_PTS   1024
#define SW_MAX_LIST  16
#define SW_POINT_S   420        /* bound on one point process */

typedef struct {
    na_link_t link;
    int       tried, ok;
    char      why[256];
    double    up_Bps, down_Bps, rtt_s;
} sw_link_t;

typedef struct {
    int            link;        /* index in links[], -1 = no link (monolithic) */
    na_e2e_point_t p;
    double         pred_step_s;
    double         spread;      /* (max - min) / median of tokens/s over the repeats */
    char           why[200];    /* why it failed / was skipped */
} sw_pt_t;

typedef struct {
    sw_link_t links[NA_LINK_COUNT];
    int       n_links;
    sw_pt_t   pts[SW_MAX_PTS];
    int       n_pts;
    char      dir[512];         /* temporary directory (model, layouts, logs) */
    char      exe[PATH_MAX];
    int       threads, n_new, reps;
    na_model_config_t mc;
    na_plan_rates_t   rates;
    char      peers[4][256];    /* peer lines for the table */
    int       n_peers;
    char      skipped[32][256];
    int       n_skipped;
} sw_t;

static sw_t *g_sw;              /* for the signal handler: namespaces to delete */

static void sw_on_signal(int sig)
{
    int i;
    if (g_sw != NULL)
        for (i = 0; i < g_sw->n_links; i++)
            if (g_sw->links[i].link.ns_a[0] || g_sw->links[i].link.ns_b[0])
                na_link_down(&g_sw->links[i].link);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void sw_skip(sw_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sw_skip(sw_t *s, const char *fmt, ...)
{
    va_list ap;
    if (s->n_skipped >= 32)
        return;
    va_start(ap, fmt);
    vsnprintf(s->skipped[s->n_skipped], sizeof(s->skipped[0]), fmt, ap);
    va_end(ap);
    fprintf(stderr, "bench e2e: skipped: %s\n", s->skipped[s->n_skipped]);
    s->n_skipped++;
}

/* Parse a comma list of ints / names. Returns the count, -1 on error. */
static int sw_ints(const char *s, int *v, int cap)
{
    int n = 0;
    char *end;
    while (*s && n < cap) {
        long x = strtol(s, &end, 10);
        if (end == s || x < 1 || x > 65536)
            return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return *s != '\0' ? -1 : n;         /* more than cap: refused, never dropped */
}

static int sw_names(const char *s, int (*parse)(const char *), int *v, int cap)
{
    char buf[512], *tok, *save = NULL;
    int n = 0;
    if (snprintf(buf, sizeof(buf), "%s", s) >= (int)sizeof(buf))
        return -1;                        /* too long: refused, never cut */
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        int x = parse(tok);
        if (x < 0 || n == cap)            /* more than cap: refused, never dropped */
            return -1;
        v[n++] = x;
    }
    return n;
}

/* Write the layout of one storage group and return its path in out. The
 * cluster secret is the sweep's own, written once into its directory (an
 * absolute path: a relative one in a layout is taken from the layout's
 * directory), so the sweep needs nothing from the source tree. */
static int sw_layout(sw_t *s, const sw_link_t *L, int nodes, int spill, char *out, size_t cap)
{
    char secret[PATH_MAX];
    FILE *f;
    int j, port[NA_CLI_BENCH_MAX_PORTS];

    if (nodes > NA_CLI_BENCH_MAX_PORTS)
        return -1;
    /* free ports (two sweeps at once, a Release and a sanitizer build's
     * tests, must not collide; in a link's own network namespace any is) */
    na_cli_bench_ports(port, nodes, 14600 + 10 * (int)L->link.kind);
    snprintf(secret, sizeof(secret), "%s/cluster.secret", s->dir);
    if (access(secret, R_OK) != 0) {
        na_status_t st = na_cli_write_secret(secret);
        if (st != NA_OK) {
            (void)na_cli_fail("bench e2e --sweep", st);
            return -1;
        }
    }
    snprintf(out, cap, "%s/%s-n%d-s%d.yaml", s->dir, L->link.name, nodes, spill);
    f = na_cli_bench_layout(out, "sweep", secret, s->dir);
    if (f == NULL)
        return -1;
    fprintf(f, "transport: { tls: %s, timeout_ms: 20000, heartbeat_ms: 500, "
               "peer_timeout_ms: 60000 }\n"
               "compute:\n  - { name: c0, host: %s }\n  - { name: c1, host: %s }\n"
               "storage:\n", L->link.tls, L->link.addr_b, L->link.addr_b);
    for (j = 0; j < nodes; j++)
        fprintf(f, "  - name: s%d\n    host: %s\n    port: %d\n    devices:\n"
                   "      - { path: \"%s/kv/%s-n%d-s%d/s%d\", dram_mb: 512, ssd_mb: 8192 }\n",
                j, L->link.addr_a, port[j], s->dir, L->link.name,
                nodes, spill, j);
    fprintf(f, "parallel: { partition: request, batches_in_flight: 2, max_batch: 64 }\n"
               "kv: { block_tokens: 64, spill_interval: %d, prefetch_layers: 1, tier: ssd }\n",
            spill);
    fclose(f);
    return 0;
}

/* Run one point process once; fills pt. */
static void sw_run_once(sw_t *s, const sw_link_t *L, const char *cfg, sw_pt_t *pt)
{
    char lb[32], lr[32];
    char *more[] = { "--link-Bps", lb, "--link-rtt", lr, NULL };
    int rc, mode = pt->p.mode, B = pt->p.batch, C = pt->p.ctx, nodes = pt->p.nodes;

    snprintf(lb, sizeof(lb), "%.6g", L != NULL ? L->down_Bps : 0.0);
    snprintf(lr, sizeof(lr), "%.6g", L != NULL ? L->rtt_s : 0.0);
    fprintf(stderr, "bench e2e: %-9s nodes=%d %-24s B=%-3d ctx=%-5d ...", L ? L->link.name : "local",
            nodes, na_e2e_mode_name(mode), B, C);
    fflush(stderr);
    rc = na_e2e_point_run(L ? &L->link : NULL, s->exe, cfg, mode, B, C, s->n_new, s->threads,
                          more, SW_POINT_S, &pt->p);
    if (!pt->p.ok) {
        snprintf(pt->why, sizeof(pt->why), "point process %s (exit %d)",
                 rc < 0 ? "timed out or could not run" : "failed", rc);
        pt->p.ok = 0;
        pt->p.mode = mode;
        pt->p.batch = B;
        pt->p.ctx = C;
        pt->p.nodes = nodes;
        fprintf(stderr, " FAILED (%s)\n", pt->why);
        return;
    }
    fprintf(stderr, " %.1f tok/s\n", pt->p.tok_s);
}

/* Run a point s->reps times; keep the repeat with the median tokens/s and
 * the spread. A point fails when any repeat fails. */
static void sw_run_point(sw_t *s, const sw_link_t *L, const char *cfg, sw_pt_t *pt)
{
    sw_pt_t r[9];
    double v[9], med;
    int k, n = s->reps < 1 ? 1 : s->reps > 9 ? 9 : s->reps, best = 0;

    for (k = 0; k < n; k++) {
        r[k] = *pt;
        sw_run_once(s, L, cfg, &r[k]);
        if (!r[k].p.ok) {
            *pt = r[k];
            pt->p.load1 = na_bench_loadavg();
            return;
        }
        v[k] = r[k].p.tok_s;
    }
    pt->spread = na_bench_spread(v, n);
    med = na_bench_median(v, n);
    for (k = 0; k < n; k++)
        if (r[k].p.tok_s == med)
            best = k;
    r[best].spread = pt->spread;
    *pt = r[best];
    pt->p.load1 = na_bench_loadavg();      /* what else ran beside the point */
}

/* Link probe: PROBE line from a point process on the link. */
static void sw_probe(sw_t *s, sw_link_t *L, const char *cfg)
{
    char out[1024], *line;
    char *argv[] = { s->exe, "bench", "e2e", "--point", "--config", (char *)cfg, "--probe", NULL };
    int rc = na_e2e_run_capture(&L->link, argv, out, sizeof(out), 120);

    line = strstr(out, "PROBE ");
    if (rc != 0 || line == NULL ||
        sscanf(line, "PROBE up_Bps=%lf down_Bps=%lf rtt_s=%lf", &L->up_Bps, &L->down_Bps,
               &L->rtt_s) != 3) {
        sw_skip(s, "link %s: the bandwidth probe failed (exit %d); link fractions not shown",
                L->link.name, rc);
        L->up_Bps = L->down_Bps = L->rtt_s = 0;
        return;
    }
    fprintf(stderr, "bench e2e: link %s: bulk %.3f GB/s one way, %.3f GB/s round-trip avg, round "
            "trip %.1f us\n", L->link.name, 1e-9 * L->up_Bps, 1e-9 * L->down_Bps, 1e6 * L->rtt_s);
}

static na_plan_kind_t sw_kind(int mode)
{
    return mode == NA_E2E_MONO ? NA_PLAN_MONO : mode == NA_E2E_KVFETCH ? NA_PLAN_KVFETCH
                                                                       : NA_PLAN_OFFLOAD;
}

static int sw_bif(int mode, int B)
{
    return (mode == NA_E2E_OFF_WB_PIPE || mode == NA_E2E_OFF_WB_PIPE_XC) && B >= 2 ? 2 : 1;
}

/* The kv-fetch point of the same link / batch / context / nodes. */
static const sw_pt_t *sw_ref(const sw_t *s, const sw_pt_t *pt, int mode)
{
    int i;
    for (i = 0; i < s->n_pts; i++) {
        const sw_pt_t *q = &s->pts[i];
        if (q->p.ok && q->p.mode == mode && q->p.batch == pt->p.batch && q->p.ctx == pt->p.ctx &&
            (mode == NA_E2E_MONO || (q->link == pt->link && q->p.nodes == pt->p.nodes)))
            return q;
    }
    return NULL;
}

/* Run the peers on the same model file and threads. */
static void sw_peers(sw_t *s, const char *l2c, const char *lbench)
{
    char out[16384], model[600], tok[600], th[16], *p;
    int rc;

    snprintf(model, sizeof(model), "%.500s/model.bin", s->dir);
    snprintf(tok, sizeof(tok), "%s/model.tok.bin", s->dir);
    snprintf(th, sizeof(th), "%d", s->threads);
    if (l2c == NULL) {
        sw_skip(s, "peer llama2.c run: not given (--llama2c-run PATH)");
    } else {
        char n[16];
        /* run.c prints its tokens/s on stderr: merge it into what is read */
        char *argv[] = { "sh", "-c", "exec \"$0\" \"$@\" 2>&1", (char *)l2c, model, "-z", tok,
                         "-n", n, "-t", "0", "-i", "Once", NULL };
        double v;
        snprintf(n, sizeof(n), "%d", 256);
        setenv("OMP_NUM_THREADS", th, 1);
        rc = na_e2e_run_capture(NULL, argv, out, sizeof(out), 300);
        p = strstr(out, "achieved tok/s:");
        if (rc != 0 || p == NULL || sscanf(p, "achieved tok/s: %lf", &v) != 1)
            sw_skip(s, "peer llama2.c run (%s) failed (exit %d) or printed no 'achieved tok/s'",
                    l2c, rc);
        else
            snprintf(s->peers[s->n_peers++], sizeof(s->peers[0]),
                     "llama2.c run, same model.bin, batch 1, %s thread(s) (OMP): %.1f tok/s "
                     "(prefill included)", th, v);
    }
    if (lbench == NULL) {
        sw_skip(s, "peer llama.cpp llama-bench: not given (--llama-bench PATH)");
    } else {
        char gguf[600];
        char *argv[] = { (char *)lbench, "-m", gguf, "-t", th, "-p", "0", "-n", "64", "-o", "csv",
                         NULL };
        char *hdr, *row, *save = NULL;
        snprintf(gguf, sizeof(gguf), "%s/model.gguf", s->dir);
        rc = na_e2e_run_capture(NULL, argv, out, sizeof(out), 300);
        hdr = strtok_r(out, "\n", &save);
        row = hdr ? strtok_r(NULL, "\n", &save) : NULL;
        if (rc != 0 || hdr == NULL || row == NULL || strstr(hdr, "avg_ts") == NULL) {
            sw_skip(s, "peer llama-bench (%s) failed (exit %d) or printed no CSV with avg_ts",
                    lbench, rc);
        } else {
            /* column index of avg_ts in the header, the same field of the row */
            int col = 0, k;
            char *h = hdr, *c = row;
            while ((p = strchr(h, ',')) != NULL && strncmp(h, "\"avg_ts\"", 8) &&
                   strncmp(h, "avg_ts", 6)) {
                h = p + 1;
                col++;
            }
            for (k = 0; k < col && c != NULL; k++) {
                c = strchr(c, ',');
                c = c ? c + 1 : NULL;
            }
            if (c != NULL)
                snprintf(s->peers[s->n_peers++], sizeof(s->peers[0]),
                         "llama.cpp llama-bench, same weights (model.gguf), batch 1, tg64, %s "
                         "thread(s): %.1f tok/s", th, atof(c[0] == '"' ? c + 1 : c));
            else
                sw_skip(s, "peer llama-bench: could not read avg_ts from its CSV");
        }
    }
}

/* Print the table; write the JSON. */
static int sw_report(sw_t *s, const char *json, int plot)
{
    char machine[512], date[64], sprd[16];
    time_t now = time(NULL);
    FILE *f;
    int i, j;

    na_bench_machine(machine, sizeof(machine));
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("# nearattn bench e2e --sweep, %s\n# machine: %s\n", date, machine);
    printf("# model: generated MHA dim %d, hidden %d, %d layers, %d heads (head_dim %d), vocab "
           "%d; KV f16 on the storage nodes' SSD tier; %d new tokens per request, greedy; "
           "compute %d thread(s)\n", s->mc.dim, s->mc.hidden_dim, s->mc.n_layers, s->mc.n_heads,
           s->mc.head_dim, s->mc.vocab_size, s->n_new, s->threads);
    printf("# rates: gemv %.2f GB/s, gemm %.1f GFLOP/s, attention %.2f GB/s (measured now); "
           "disk %.2f GB/s (assumed)\n", 1e-9 * s->rates.gemv_Bps, 1e-9 * s->rates.gemm_flops,
           1e-9 * s->rates.attn_Bps, 1e-9 * s->rates.disk_Bps);
    for (i = 0; i < s->n_links; i++) {
        sw_link_t *L = &s->links[i];
        if (L->ok)
            printf("# link %-9s: probe (ECHO) %.3f GB/s one way, %.3f GB/s round-trip average, rtt %.1f us%s\n",
                   L->link.name, 1e-9 * L->up_Bps, 1e-9 * L->down_Bps, 1e6 * L->rtt_s,
                   L->link.rate_bps > 0 ? " (tbf-shaped veth between namespaces, UCX_TLS=tcp)"
                                        : "");
    }
    printf("%-9s %2s %-22s %3s %5s | %9s %5s %7s | %8s %7s %7s %7s %7s %7s | %9s %9s %9s %9s %6s | "
           "%5s %5s | %8s %5s | %5s\n", "link", "n", "mode", "B", "ctx", "tok/s", "sprd", "x kvf",
           "step ms", "comp", "net", "attn", "disk", "idle", "out B/L", "an out", "in B/L", "an in",
           "wire/an", "link%", "busy%", "pred ms", "p/m", "load");
    for (i = 0; i < s->n_pts; i++) {
        sw_pt_t *pt = &s->pts[i];
        const na_e2e_point_t *p = &pt->p;
        const sw_link_t *L = pt->link >= 0 ? &s->links[pt->link] : NULL;
        const sw_pt_t *ref = sw_ref(s, pt, NA_E2E_KVFETCH);
        double an = p->an_out + p->an_in, me = p->bytes_out + p->bytes_in, lf = 0;
        if (!p->ok) {
            printf("%-9s %2d %-22s %3d %5d | FAILED: %s\n", L ? L->link.name : "local", p->nodes,
                   na_e2e_mode_name(p->mode), p->batch, p->ctx, pt->why);
            continue;
        }
        if (L != NULL && L->down_Bps > 0 && p->step_s > 0)
            lf = me * s->mc.n_layers / p->step_s /
                 L->down_Bps;
        if (pt->spread > 0)
            snprintf(sprd, sizeof(sprd), "%.2f", pt->spread);
        else
            snprintf(sprd, sizeof(sprd), "-");     /* one repeat: no spread to give */
        printf("%-9s %2d %-22s %3d %5d | %9.1f %5s %7s | %8.2f %7.2f %7.2f %7.2f %7.2f %7.2f | "
               "%9.0f %9.0f %9.0f %9.0f %6.3f | %5.1f %5.1f | %8.2f %5.2f | %5.2f\n",
               L ? L->link.name : "local", p->nodes, na_e2e_mode_name(p->mode), p->batch, p->ctx,
               p->tok_s, sprd, ref && ref->p.tok_s > 0 ? (snprintf(date, sizeof(date), "%.2f",
                                                             p->tok_s / ref->p.tok_s), date) : "-",
               1e3 * p->step_s, 1e3 * p->compute_s, 1e3 * p->net_s, 1e3 * p->attn_s,
               1e3 * p->disk_s, 1e3 * p->idle_s, p->bytes_out, p->an_out, p->bytes_in, p->an_in,
               an > 0 ? me / an : 0.0, 100 * lf,
               p->step_s > 0 ? 100 * (p->compute_s > p->step_s ? 1 : p->compute_s / p->step_s) : 0,
               1e3 * pt->pred_step_s, p->step_s > 0 ? pt->pred_step_s / p->step_s : 0, p->load1);
    }
    printf("# x kvf: tokens/s over kv-fetch at the same link, batch, context and nodes. "
           "out/in B/L: bytes per layer per decode step (all requests) counted by the transport "
           "(nearattn header + payload), an: the analytic count (docs/benchmarks.md). link%%: "
           "wire bytes/s over the probe's bandwidth of the same link. busy%%: compute node busy "
           "share of a step. pred: planner (common/plan.h) from the rates above and the probe; "
           "p/m = predicted / measured step time. sprd: (max - min) / median of the repeats' "
           "tokens/s (- for one repeat). load: the 1-min load average as the point ended "
           "(/proc/loadavg): what else ran beside it.\n");
    for (i = 0; i < s->n_peers; i++)
        printf("# peer: %s\n", s->peers[i]);
    for (i = 0; i < s->n_skipped; i++)
        printf("# skipped: %s\n", s->skipped[i]);
    f = fopen(json, "w");
    if (f == NULL) {
        fprintf(stderr, "nearattn bench e2e: cannot write %s: %s\n", json, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"bench\": \"e2e-sweep\",\n  \"date\": \"%s\",\n  \"machine\": \"%s\",\n",
            date, machine);
    fprintf(f, "  \"model\": {\"dim\": %d, \"hidden_dim\": %d, \"n_layers\": %d, \"n_heads\": %d, "
               "\"n_kv_heads\": %d, \"head_dim\": %d, \"vocab\": %d, \"kv_dtype\": \"f16\", "
               "\"new_tokens\": %d, \"threads\": %d},\n", s->mc.dim, s->mc.hidden_dim,
            s->mc.n_layers, s->mc.n_heads, s->mc.n_kv_heads, s->mc.head_dim, s->mc.vocab_size,
            s->n_new, s->threads);
    fprintf(f, "  \"rates\": {\"gemv_Bps\": %.6g, \"gemm_flops\": %.6g, \"attn_Bps\": %.6g, "
               "\"disk_Bps_assumed\": %.6g},\n  \"links\": [", s->rates.gemv_Bps,
            s->rates.gemm_flops, s->rates.attn_Bps, s->rates.disk_Bps);
    for (i = 0, j = 0; i < s->n_links; i++) {
        sw_link_t *L = &s->links[i];
        fprintf(f, "%s\n    {\"name\": \"%s\", \"ok\": %d, \"tbf_bps\": %.6g, \"probe_up_Bps\": "
                   "%.6g, \"probe_down_Bps\": %.6g, \"rtt_s\": %.6g, \"why\": \"%s\"}",
                j++ ? "," : "", L->link.name, L->ok, L->link.rate_bps, L->up_Bps, L->down_Bps,
                L->rtt_s, L->why);
    }
    fprintf(f, "\n  ],\n  \"points\": [");
    for (i = 0; i < s->n_pts; i++) {
        const sw_pt_t *pt = &s->pts[i];
        const na_e2e_point_t *p = &pt->p;
        fprintf(f, "%s\n    {\"link\": \"%s\", \"mode\": \"%s\", \"nodes\": %d, \"batch\": %d, "
                   "\"ctx\": %d, \"ok\": %d, \"tok_s\": %.6g, \"step_s\": %.6g, \"compute_s\": "
                   "%.6g, \"net_s\": %.6g, \"attn_s\": %.6g, \"disk_s\": %.6g, \"idle_s\": %.6g, "
                   "\"bytes_out_layer\": %.6g, \"bytes_in_layer\": %.6g, \"analytic_out_layer\": "
                   "%.6g, \"analytic_in_layer\": %.6g, \"ssd_bytes_step\": %.6g, \"t_m\": %.6g, "
                   "\"t_a\": %.6g, \"predicted_step_s\": %.6g, \"spread\": %.4g, \"load_avg\": "
                   "%.2f, \"why\": \"%s\"}",
                i ? "," : "", pt->link >= 0 ? s->links[pt->link].link.name : "local",
                na_e2e_mode_name(p->mode), p->nodes, p->batch, p->ctx, p->ok, p->tok_s, p->step_s,
                p->compute_s, p->net_s, p->attn_s, p->disk_s, p->idle_s, p->bytes_out,
                p->bytes_in, p->an_out, p->an_in, p->ssd_bytes, p->tm, p->ta, pt->pred_step_s,
                pt->spread, p->load1, pt->why);
    }
    fprintf(f, "\n  ],\n  \"peers\": [");
    for (i = 0; i < s->n_peers; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", s->peers[i]);
    fprintf(f, "],\n  \"skipped\": [");
    for (i = 0; i < s->n_skipped; i++)
        fprintf(f, "%s\n    \"%s\"", i ? "," : "", s->skipped[i]);
    fprintf(f, "\n  ]\n}\n");
    fclose(f);
    printf("wrote %s\n", json);
    if (plot) {
        const char *names[NA_LINK_COUNT + 1];
        na_e2e_point_t pts[SW_MAX_PTS];
        int lk[SW_MAX_PTS];
        for (i = 0; i < s->n_links; i++)
            names[i] = s->links[i].link.name;
        names[s->n_links] = "local";
        for (i = 0; i < s->n_pts; i++) {
            pts[i] = s->pts[i].p;
            lk[i] = s->pts[i].link >= 0 ? s->pts[i].link : s->n_links;
        }
        na_e2e_plot(json, pts, names, lk, s->n_pts, s->n_links + 1);
    }
    return 0;
}

/* Add the points of one link to s->pts (not run yet). */
static void sw_add(sw_t *s, int link, int mode, int B, int ctx, int nodes)
{
    sw_pt_t *pt;
    int i;
    if (s->n_pts >= SW_MAX_PTS)
        return;
    if (mode == NA_E2E_MONO)
        link = -1;
    for (i = 0; i < s->n_pts; i++)          /* no duplicates */
        if (s->pts[i].link == link && s->pts[i].p.mode == mode && s->pts[i].p.batch == B &&
            s->pts[i].p.ctx == ctx && (mode == NA_E2E_MONO || s->pts[i].p.nodes == nodes))
            return;
    pt = &s->pts[s->n_pts++];
    memset(pt, 0, sizeof(*pt));
    pt->link = link;
    pt->p.mode = mode;
    pt->p.batch = B;
    pt->p.ctx = ctx;
    pt->p.nodes = mode == NA_E2E_MONO ? 0 : nodes;
}

static void sw_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench e2e --sweep [--full] [--links L,..] [--modes M,..]\n"
        "                          [--batches B,..] [--ctxs C,..] [--nodes N,..] [--new N]\n"
        "                          [--reps R]\n"
        "                          [--llama2c-run PATH] [--llama-bench PATH] [--no-plot]\n"
        "                          [--json FILE] [--threads N]\n\n"
        "Modes x batch x context x storage nodes x link, each point a compute process\n"
        "against storage-node processes started here (KV f16 on the SSD tier).\n"
        "links: shm tcp ns-1gbit ns-10gbit (network namespaces + veth + tc tbf, UCX_TLS=tcp;\n"
        "       skipped with a reason without root / iproute2)\n"
        "modes: monolithic kv-fetch offload offload+wb offload+wb+pipe offload+wb+pipe+xcache\n"
        "Default (bounded to ~10 min on 2 cores): shm and tcp: every mode at B 1, 8, ctx 512;\n"
        "ns-1gbit: kv-fetch, offload, offload+wb+pipe at B 2, ctx 512..8192; ns-10gbit:\n"
        "kv-fetch, offload at B 2, ctx 2048, 8192. --full: every link and mode at B 1,4,16,32,\n"
        "ctx 512,2048,8192, nodes 1,2. Given lists replace the defaults (full cross product).\n"
        "--json FILE (default bench-e2e-sweep.json); PNGs are written beside it.\n"
        "Each point runs --reps times (default 3): the median tokens/s and the spread.\n"
        "--new N tokens per request (default 8; the first comes from the prefill).\n");
}

int na_cli_e2e_sweep(int argc, char **argv)
{
    static sw_t S;
    sw_t *s = &S;
    int links[NA_LINK_COUNT], modes[NA_E2E_N_MODES], bs[SW_MAX_LIST], cs[SW_MAX_LIST],
        ns[SW_MAX_LIST];
    int nl = -1, nm = -1, nb = -1, nc = -1, nn = -1, full = 0, plot = 1, i, j, k, q, rc = 1;
    int maxctx = 0;
    const char *json = "bench-e2e-sweep.json", *l2c = NULL, *lbench = NULL, *tmp;
    na_cli_bench_opts_t o;
    na_genmodel_opts_t go;
    char path[700];
    ssize_t len;
    na_model_t *m = NULL;

    const na_cli_switch_t sw[] = { { "--full", &full, 1 }, { "--no-plot", &plot, 0 } };
    const na_cli_num_t num[] = { { "--new", 2, 4096, &s->n_new }, { "--reps", 1, 9, &s->reps } };

    memset(s, 0, sizeof(*s));
    na_cli_bench_opts_init(&o);
    s->threads = 1;
    s->n_new = 8;
    s->reps = 3;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = na_cli_bench_opt("e2e", argc, argv, &i, &o);
        if (r < 0)
            return 2;
        if (r > 0) {
            if (!strcmp(a, "--threads"))
                s->threads = o.threads;
            continue;
        }
        if (!strcmp(a, "--sweep") || !strcmp(a, "e2e")) {
            continue;
        } else if (!strcmp(a, "--help")) {
            sw_usage(stdout);
            return 0;
        } else if (na_cli_switch(sw, sizeof(sw) / sizeof(sw[0]), a)) {
            continue;
        } else if (v != NULL && !strcmp(a, "--links")) {
            nl = sw_names(argv[++i], na_link_parse, links, NA_LINK_COUNT);
        } else if (v != NULL && !strcmp(a, "--modes")) {
            nm = sw_names(argv[++i], na_e2e_mode_parse, modes, NA_E2E_N_MODES);
        } else if (v != NULL && !strcmp(a, "--batches")) {
            nb = sw_ints(argv[++i], bs, SW_MAX_LIST);
        } else if (v != NULL && !strcmp(a, "--ctxs")) {
            nc = sw_ints(argv[++i], cs, SW_MAX_LIST);
        } else if (v != NULL && !strcmp(a, "--nodes")) {
            nn = sw_ints(argv[++i], ns, SW_MAX_LIST);
        } else if (v != NULL &&
                   (r = na_cli_num("bench e2e", num, sizeof(num) / sizeof(num[0]), argc, argv,
                                   &i)) != 0) {
            if (r != 1)
                return r;
        } else if (v != NULL && !strcmp(a, "--llama2c-run")) {
            l2c = argv[++i];
        } else if (v != NULL && !strcmp(a, "--llama-bench")) {
            lbench = argv[++i];
        } else {
            fprintf(stderr, "nearattn bench e2e --sweep: unknown option or missing value '%s'\n",
                    a);
            sw_usage(stderr);
            return 2;
        }
        if ((nl == -1 && !strcmp(a, "--links")) || (nm == -1 && !strcmp(a, "--modes")) ||
            (nb == -1 && !strcmp(a, "--batches")) || (nc == -1 && !strcmp(a, "--ctxs")) ||
            (nn == -1 && !strcmp(a, "--nodes")) || (nb > 0 && bs[0] > 64)) {
            fprintf(stderr, "nearattn bench e2e --sweep: bad list for %s\n", a);
            return 2;
        }
    }
    if (o.json != NULL)
        json = o.json;
    for (i = 0; i < nb; i++)
        if (bs[i] > 64) {
            fprintf(stderr, "nearattn bench e2e --sweep: batch %d > 64\n", bs[i]);
            return 2;
        }
    len = readlink("/proc/self/exe", s->exe, sizeof(s->exe) - 1);
    if (len <= 0) {
        fprintf(stderr, "nearattn bench e2e: cannot find the nearattn executable\n");
        return 1;
    }
    s->exe[len] = '\0';
    /* the points */
    for (i = 0; i < NA_LINK_COUNT; i++) {
        s->links[i].link.kind = (na_link_kind_t)i;
        s->links[i].link.name = na_link_name((na_link_kind_t)i);
    }
    s->n_links = NA_LINK_COUNT;
    if (nl > 0 || nm > 0 || nb > 0 || nc > 0 || nn > 0 || full) {
        static const int fb[] = { 1, 4, 16, 32 }, fc[] = { 512, 2048, 8192 }, fn[] = { 1, 2 };
        static const int db[] = { 1, 8 }, dc[] = { 512 }, dn[] = { 1 };
        if (nl <= 0)
            for (nl = 0; nl < NA_LINK_COUNT; nl++)
                links[nl] = nl;
        if (nm <= 0)
            for (nm = 0; nm < NA_E2E_N_MODES; nm++)
                modes[nm] = nm;
        if (nb <= 0)
            for (nb = 0; nb < (full ? 4 : 2); nb++)
                bs[nb] = full ? fb[nb] : db[nb];
        if (nc <= 0)
            for (nc = 0; nc < (full ? 3 : 1); nc++)
                cs[nc] = full ? fc[nc] : dc[nc];
        if (nn <= 0)
            for (nn = 0; nn < (full ? 2 : 1); nn++)
                ns[nn] = full ? fn[nn] : dn[nn];
        for (i = 0; i < nl; i++)
            for (j = 0; j < nm; j++)
                for (k = 0; k < nb; k++)
                    for (q = 0; q < nc; q++) {
                        int t;
                        for (t = 0; t < nn; t++)
                            sw_add(s, links[i], modes[j], bs[k], cs[q], ns[t]);
                    }
    } else {
        static const int lm[] = { NA_E2E_KVFETCH, NA_E2E_OFF, NA_E2E_OFF_WB_PIPE };
        for (i = 0; i < 2; i++)
            for (j = 0; j < NA_E2E_N_MODES; j++)
                for (k = 0; k < 2; k++)
                    sw_add(s, i, j, k ? 8 : 1, 512, 1);
        sw_add(s, NA_LINK_SHM, NA_E2E_OFF_WB_PIPE, 8, 512, 2);
        for (j = 0; j < 3; j++)
            for (q = 0; q < 3; q++)
                sw_add(s, NA_LINK_NS1G, lm[j], 2, q == 0 ? 512 : q == 1 ? 2048 : 8192, 1);
        for (j = 0; j < 2; j++)
            for (q = 0; q < 2; q++)
                sw_add(s, NA_LINK_NS10G, lm[j], 2, q ? 8192 : 2048, 1);
    }
    for (i = 0; i < s->n_pts; i++)
        if (s->pts[i].p.ctx > maxctx)
            maxctx = s->pts[i].p.ctx;
    /* the model */
    tmp = getenv("TMPDIR");
    snprintf(s->dir, sizeof(s->dir), "%s/nearattn-sweep-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL) {
        fprintf(stderr, "nearattn bench e2e: cannot make a temporary directory\n");
        return 1;
    }
    chmod(s->dir, 0755);
    g_sw = s;
    signal(SIGINT, sw_on_signal);
    signal(SIGTERM, sw_on_signal);
    na_genmodel_shape(&go, 256, 512, 4, 8, 8, 512, maxctx + s->n_new + 8);
    go.write_gguf = lbench != NULL;
    snprintf(path, sizeof(path), "%.500s/model", s->dir);
    if (na_genmodel_write(path, &go) != NA_OK) {
        na_cli_fail("bench e2e", NA_ERR_INVALID);
        goto out;
    }
    snprintf(path, sizeof(path), "%.500s/model.bin", s->dir);
    if (na_model_open(path, &m) != NA_OK) {
        na_cli_fail("bench e2e", NA_ERR_INVALID);
        goto out;
    }
    s->mc = m->cfg;
    na_model_destroy(m);
    na_cli_plan_defaults(&s->rates);
    if (na_cli_plan_measure(&s->mc, s->threads, &s->rates) != NA_OK)
        sw_skip(s, "rate measurement failed (%s): predictions use defaults", na_errmsg());
    /* monolithic points: no link */
    for (i = 0; i < s->n_pts; i++)
        if (s->pts[i].link < 0) {
            sw_link_t lo;
            memset(&lo, 0, sizeof(lo));
            lo.link.name = "local";
            lo.link.tls = "shm";
            snprintf(lo.link.addr_a, sizeof(lo.link.addr_a), "127.0.0.1");
            snprintf(lo.link.addr_b, sizeof(lo.link.addr_b), "127.0.0.1");
            sw_layout(s, &lo, 1, 1, path, sizeof(path));
            sw_run_point(s, NULL, path, &s->pts[i]);
        }
    /* per link, per (nodes, spill) group: start the storage nodes, run its points */
    for (i = 0; i < NA_LINK_COUNT; i++) {
        sw_link_t *L = &s->links[i];
        int used = 0, g;
        for (j = 0; j < s->n_pts; j++)
            used |= s->pts[j].link == i;
        if (!used)
            continue;
        L->tried = 1;
        if (na_link_up(&L->link, (na_link_kind_t)i, i) != NA_OK) {
            snprintf(L->why, sizeof(L->why), "%s", na_errmsg());
            sw_skip(s, "%s", L->why);
            for (j = 0; j < s->n_pts; j++)
                if (s->pts[j].link == i)
                    snprintf(s->pts[j].why, sizeof(s->pts[j].why), "link not available");
            continue;
        }
        L->ok = 1;
        for (g = 0; g < 2 * SW_MAX_LIST; g++) {
            int nodes = 0, spill = 0, any = 0;
            na_e2e_nodes_t nd;
            /* the g-th distinct (nodes, spill) group of this link */
            int seen = 0;
            for (j = 0; j < s->n_pts && !any; j++) {
                sw_pt_t *pt = &s->pts[j];
                int sp = pt->p.mode >= NA_E2E_OFF_WB ? NA_E2E_SPILL_WB : 1, dup = 0;
                if (pt->link != i)
                    continue;
                for (k = 0; k < j; k++) {
                    sw_pt_t *o2 = &s->pts[k];
                    int sp2 = o2->p.mode >= NA_E2E_OFF_WB ? NA_E2E_SPILL_WB : 1;
                    if (o2->link == i && o2->p.nodes == pt->p.nodes && sp2 == sp)
                        dup = 1;
                }
                if (dup)
                    continue;
                if (seen++ == g) {
                    any = 1;
                    nodes = pt->p.nodes;
                    spill = sp;
                }
            }
            if (!any)
                break;
            if (sw_layout(s, L, nodes, spill, path, sizeof(path)) != 0 ||
                na_e2e_nodes_start(&L->link, s->exe, path, nodes, s->dir, &nd) != NA_OK) {
                sw_skip(s, "link %s, %d node(s): storage nodes did not start: %s", L->link.name,
                        nodes, na_errmsg());
                na_e2e_nodes_stop(&nd);
                continue;
            }
            if (g == 0)
                sw_probe(s, L, path);
            for (j = 0; j < s->n_pts; j++) {
                sw_pt_t *pt = &s->pts[j];
                int sp = pt->p.mode >= NA_E2E_OFF_WB ? NA_E2E_SPILL_WB : 1;
                if (pt->link == i && pt->p.nodes == nodes && sp == spill)
                    sw_run_point(s, L, path, pt);
            }
            na_e2e_nodes_stop(&nd);
        }
        na_link_down(&L->link);
    }
    /* predictions: the planner with the measured rates and each link's probe */
    for (i = 0; i < s->n_pts; i++) {
        sw_pt_t *pt = &s->pts[i];
        na_plan_rates_t r = s->rates;
        na_plan_est_t e;
        if (pt->link >= 0 && s->links[pt->link].down_Bps > 0) {
            const sw_link_t *L = &s->links[pt->link];
            r.link_Bps = L->down_Bps;
            r.link_rtt_s = L->rtt_s;
        }
        na_plan_estimate(&s->mc, &r, sw_kind(pt->p.mode), pt->p.batch, pt->p.ctx, pt->p.nodes,
                         sw_bif(pt->p.mode, pt->p.batch), 1, &e);
        pt->pred_step_s = e.step_s;
    }
    sw_peers(s, l2c, lbench);
    rc = sw_report(s, json, plot);
out:
    g_sw = NULL;
    for (i = 0; i < s->n_links; i++)
        if (s->links[i].link.ns_a[0])
            na_link_down(&s->links[i].link);
    na_cli_bench_rmdir("bench e2e", s->dir);
    return rc;
}

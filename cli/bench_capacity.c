/* cli/bench_capacity.c — `nearattn bench capacity`: how much KV a compute
 * node can serve within a fixed memory budget, monolithic vs offloaded to 1,
 * 2, 4 ... storage nodes (Lamina's capacity argument, docs/benchmarks.md).
 *
 * Every figure comes from point processes (`nearattn bench e2e --point`, a
 * compute node alone in its process, so its peak RSS is the compute node's
 * memory) against storage-node processes started here (shared memory):
 *
 *   monolithic   RSS in decode of B requests at contexts C1 < C2 < ...: the
 *                slope is the KV bytes per token the compute node holds (set
 *                beside the analytic count), the intercept the rest (weights,
 *                activations); the most KV tokens within --budget-mb follow,
 *                and a point at that batch checks the RSS and gives tokens/s
 *   offload      the same contexts against one storage node: the compute
 *                node's RSS stays flat; with n storage nodes of --node-mb
 *                each, the requests the nodes admit (KV reserved until one
 *                is refused: `--point --capacity`) give the most concurrent
 *                KV tokens, expected to grow linearly with n, and a point at
 *                that batch gives tokens/s and the compute node's RSS.
 *
 * With --json FILE, FILE-capacity.png (gnuplot) plots KV tokens vs storage
 * nodes and compute RSS vs context. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/e2e_sweep.h"
#include "common/genmodel.h"
#include "common/model.h"

#define CAP_MAX_NODES 8
#define CAP_MAX_CTX   8
#define CAP_POINT_S   900        /* one point process at most */
#define CAP_PORT0     14760      /* storage-node ports when no free ones are found */
#define CAP_B_RSS     32         /* requests of the RSS-vs-context points */
#define CAP_FIT_TRIES 6          /* monolithic runs to find the most that fits */

typedef struct {
    int    budget_mb;            /* compute-node memory budget */
    int    node_mb;              /* DRAM KV budget of each storage node */
    int    ctx;                  /* prompt tokens of the capacity points */
    int    n_new;                /* tokens generated per request */
    int    nodes[CAP_MAX_NODES], n_nodes;
    int    ctxs[CAP_MAX_CTX], n_ctxs;   /* RSS-vs-context points */
    int    threads;
    na_e2e_host_t h;             /* the executable, directory, link, nodes, table */
} cap_t;

static void cap_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench capacity [--budget-mb M] [--node-mb N] [--nodes LIST]\n"
        "                               [--ctx C] [--new N] [options]\n\n"
        "KV capacity within a compute-node memory budget: monolithic (KV in the compute\n"
        "node) vs offload to 1, 2, 4 storage-node processes (shared memory), on a\n"
        "generated GQA model (dim 256, 4 layers, 8 q / 2 kv heads, f16 KV). Rows: the\n"
        "compute node's KV bytes per token (RSS slope) beside the analytic count, the\n"
        "most concurrent KV tokens monolithic within the budget and offloaded with n\n"
        "nodes (beside n x the 1-node figure: linear growth), tokens/s at each maximum,\n"
        "and the compute node's peak RSS vs context in both modes.\n\n"
        "  --budget-mb M  compute-node memory budget, MiB (default 96)\n"
        "  --node-mb N    DRAM KV budget of each storage node, MiB (default 32)\n"
        "  --nodes LIST   storage-node counts, comma-separated (default 1,2,4)\n"
        "  --ctx C        prompt tokens per request of the capacity points (default 512)\n"
        "  --new N        tokens generated per request (default 8)\n"
        NA_CLI_BENCH_OPTS_HELP
        "  (--quick: nodes 1,2 and two contexts)\n");
}

/* The layout of n storage nodes (DRAM tier only, node_mb each). */
static int cap_layout(const cap_t *c, int n, char *out, size_t cap)
{
    FILE *f;
    int j, port[CAP_MAX_NODES];

    if (n > CAP_MAX_NODES)
        return -1;
    na_cli_bench_ports(port, n, CAP_PORT0);
    snprintf(out, cap, "%s/cap-n%d.yaml", c->h.dir, n);
    f = na_cli_bench_layout(out, "capacity", c->h.secret, c->h.dir);
    if (f == NULL)
        return -1;
    fprintf(f, "transport: { tls: shm, timeout_ms: 20000, peer_timeout_ms: 60000 }\n"
               "compute:\n  - { name: c0, host: 127.0.0.1 }\n  - { name: c1, host: 127.0.0.1 }\n"
               "storage:\n");
    for (j = 0; j < n; j++)
        fprintf(f, "  - name: s%d\n    host: 127.0.0.1\n    port: %d\n    devices:\n"
                   "      - { path: \"%s/kv/n%d-s%d\", dram_mb: %d, ssd_mb: 1 }\n",
                j, port[j], c->h.dir, n, j, c->node_mb);
    fprintf(f, "parallel: { partition: request, batches_in_flight: 1, max_batch: 4096 }\n"
               "kv: { block_tokens: 64, spill_interval: 4, tier: dram }\n");
    return fclose(f) == 0 ? 0 : -1;
}

/* Say on stderr which point process runs (mode NULL: the capacity probe). */
static void cap_say(const char *mode, int B, int ctx)
{
    fprintf(stderr, "bench capacity: %-10s B=%-5d ctx=%-5d ...", mode ? mode : "capacity", B, ctx);
    fflush(stderr);
}

/* ... and how it ended; rc, its exit status. */
static int cap_said(int rc)
{
    fprintf(stderr, rc == 0 ? " done\n" : " FAILED (exit %d)\n", rc);
    return rc;
}

/* The capacity probe (`--point --capacity`) at ctx; its output in out. 0 ok. */
static int cap_probe(const cap_t *c, const char *cfg, int ctx, char *out, size_t outcap)
{
    char cx[16], nn[16];
    char *argv[] = { (char *)c->h.exe, "bench", "e2e", "--point", "--config", (char *)cfg,
                     "--capacity", "--ctx", cx, "--new", nn, NULL };

    snprintf(cx, sizeof(cx), "%d", ctx);
    snprintf(nn, sizeof(nn), "%d", c->n_new);
    cap_say(NULL, 0, ctx);
    return cap_said(na_e2e_run_capture(NULL, argv, out, outcap, CAP_POINT_S));
}

/* A POINT line of mode at (B, ctx); p->ok 0 when it failed. */
static void cap_run(const cap_t *c, const char *cfg, int mode, int B, int ctx, na_e2e_point_t *p)
{
    memset(p, 0, sizeof(*p));
    cap_say(na_e2e_mode_name((na_e2e_mode_t)mode), B, ctx);
    cap_said(na_e2e_point_run(NULL, c->h.exe, cfg, mode, B, ctx, c->n_new, c->threads, NULL,
                              CAP_POINT_S, p));
}

/* Least-squares line y = a + s x over n points. */
static void cap_fit(const double *x, const double *y, int n, double *a, double *s)
{
    double mx = 0, my = 0, sxx = 0, sxy = 0;
    int i;
    for (i = 0; i < n; i++) {
        mx += x[i] / n;
        my += y[i] / n;
    }
    for (i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    *s = sxx > 0 ? sxy / sxx : 0;
    *a = my - *s * mx;
}

/* gnuplot: KV tokens vs storage nodes (0 = monolithic) and compute RSS vs
 * context; returns 1 when the PNG was made. */
static int cap_plot(const char *json, const int *nodes, const double *tok, int n,
                    double mono_tok, const int *ctxs, const double *rss_m, const double *rss_o,
                    int nc, double budget)
{
    char stem[PATH_MAX], dat[PATH_MAX + 16], gp[PATH_MAX + 16], out[512];
    char *argv[] = { "gnuplot", gp, NULL };
    const char *dot = strrchr(json, '.');
    FILE *f;
    int i;

    snprintf(stem, sizeof(stem), "%.*s", dot ? (int)(dot - json) : (int)strlen(json), json);
    snprintf(dat, sizeof(dat), "%s-capacity.dat", stem);
    snprintf(gp, sizeof(gp), "%s-capacity.gp", stem);
    if ((f = fopen(dat, "w")) == NULL)
        return 0;
    fprintf(f, "# nodes kv_tokens (0 = monolithic)\n0 %.0f\n", mono_tok);
    for (i = 0; i < n; i++)
        fprintf(f, "%d %.0f\n", nodes[i], tok[i]);
    fprintf(f, "\n\n# ctx rss_mono_MiB rss_offload_MiB\n");
    for (i = 0; i < nc; i++)
        fprintf(f, "%d %.2f %.2f\n", ctxs[i], rss_m[i] / 1048576.0, rss_o[i] / 1048576.0);
    fclose(f);
    if ((f = fopen(gp, "w")) == NULL)
        return 0;
    fprintf(f, "set terminal pngcairo size 1200,480\nset output '%s-capacity.png'\n"
               "set multiplot layout 1,2\nset grid\n"
               "set title 'Most concurrent KV tokens (compute budget %.0f MiB)'\n"
               "set xlabel 'storage nodes (0 = monolithic)'\nset ylabel 'KV tokens'\n"
               "set boxwidth 0.5\nset style fill solid 0.6\nset xtics 1\n"
               "set yrange [0:*]\nset xrange [-0.5:*]\nset key top left\n"
               "plot '%s' index 0 using 1:2 with boxes title 'max KV tokens'\n"
               "set yrange [0:*]\nset xrange [*:*]\n"
               "set title 'Compute-node RSS in decode vs context (%d requests)'\n"
               "set xlabel 'context (tokens)'\nset ylabel 'MiB'\nset logscale x 2\n"
               "set xtics auto\n"
               "plot '%s' index 1 using 1:2 with linespoints title 'monolithic', "
               "'' index 1 using 1:3 with linespoints title 'offload'\n"
               "unset multiplot\n", stem, budget / 1048576.0, dat, CAP_B_RSS, dat);
    fclose(f);
    if (na_e2e_run_capture(NULL, argv, out, sizeof(out), 60) != 0) {
        fprintf(stderr, "bench capacity: gnuplot failed or is absent (no PNG)\n");
        return 0;
    }
    printf("wrote %s-capacity.png\n", stem);
    return 1;
}

int na_cli_bench_capacity(int argc, char **argv)
{
    cap_t c;
    na_cli_bench_opts_t o;
    na_genmodel_opts_t go;
    na_bench_t *b;
    na_e2e_point_t p;
    char cfg[PATH_MAX], prefix[PATH_MAX], out[4096], name[96], ref[96];
    double x[CAP_MAX_CTX], rss_m[CAP_MAX_CTX], tok_n[CAP_MAX_NODES];
    double dec_m[CAP_MAX_CTX], dec_o[CAP_MAX_CTX];
    double a, slope, kv_tok, budget, mono_tok = 0, mono_tps = 0, base_tok = 0;
    int rc = 1, i, r, nc = 0, B;
    const na_cli_num_t num[] = {
        { "--budget-mb", 1, 1 << 20, &c.budget_mb }, { "--node-mb", 1, 1 << 20, &c.node_mb },
        { "--ctx", 1, 1 << 20, &c.ctx }, { "--new", 1, 1 << 20, &c.n_new },
    };
    const na_cli_list_opt_t list[] = {
        { "--nodes", 1, CAP_MAX_NODES, c.nodes, CAP_MAX_NODES, &c.n_nodes, 0 },
    };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]),
                                     .list = list, .n_list = sizeof(list) / sizeof(list[0]) };

    memset(&c, 0, sizeof(c));
    c.budget_mb = 96;
    c.node_mb = 32;
    c.ctx = 512;
    c.n_new = 8;
    r = na_cli_bench_parse("capacity", argc, argv, &o, cap_usage, &own);
    if (r >= 0)
        return r;
    if (c.n_nodes == 0) {
        static const int def[] = { 1, 2, 4 };
        c.n_nodes = o.quick ? 2 : 3;
        memcpy(c.nodes, def, sizeof(int) * (size_t)c.n_nodes);
    }
    c.n_ctxs = o.quick ? 2 : 4;
    for (i = 0; i < c.n_ctxs; i++)
        c.ctxs[i] = o.quick ? 256 << (2 * i) : 256 << i;    /* 256..2048 (quick: 256, 1024) */
    c.threads = o.threads;
    budget = (double)c.budget_mb * 1048576.0;
    if (na_e2e_host_open(&c.h, "capacity", "cap") != 0)
        return 1;
    b = c.h.b;
    na_genmodel_shape(&go, 256, 512, 4, 8, 2, 512, c.ctx + c.n_new + 8);
    if (go.seq_len < c.ctxs[c.n_ctxs - 1] + c.n_new + 8)
        go.seq_len = c.ctxs[c.n_ctxs - 1] + c.n_new + 8;
    snprintf(prefix, sizeof(prefix), "%s/model", c.h.dir);
    if (na_genmodel_write(prefix, &go) != NA_OK) {
        na_cli_fail("bench capacity", NA_ERR_IO);
        goto out;
    }
    kv_tok = 2.0 * go.n_layers * (go.dim / go.n_heads) * go.n_kv_heads * 2.0;   /* f16 K+V */

    /* ---- monolithic: RSS vs context, slope = KV bytes per token ---------- */
    if (cap_layout(&c, 1, cfg, sizeof(cfg)) != 0) {
        na_cli_fail("bench capacity", na_err(NA_ERR_IO, "cannot write %s", cfg));
        goto out;
    }
    for (i = 0; i < c.n_ctxs; i++) {
        cap_run(&c, cfg, NA_E2E_MONO, CAP_B_RSS, c.ctxs[i], &p);
        if (!p.ok || p.rss <= 0) {
            fprintf(stderr, "nearattn bench capacity: the monolithic point failed\n");
            goto out;
        }
        x[nc] = (double)CAP_B_RSS * (c.ctxs[i] + c.n_new);
        dec_m[nc] = p.rss_dec;
        rss_m[nc++] = p.rss;
    }
    cap_fit(x, dec_m, nc, &a, &slope);     /* decode RSS: the KV held, no prefill buffers */
    na_bench_add(b, "monolithic compute-node KV bytes/token (decode RSS slope)", slope, "B", 0,
                 "analytic f16 K+V bytes/token", kv_tok);
    na_bench_add(b, "monolithic compute-node memory without KV (decode RSS at 0)",
                 a / 1048576.0, "MiB", 0, "budget", (double)c.budget_mb);
    /* the slope's estimate ignores what grows with the batch besides KV (prefill
     * activations of all admitted prompts): run it, and shrink B in proportion
     * to the excess until the peak RSS fits the budget */
    mono_tok = slope > 0 && budget > a ? (budget - a) / slope : 0;
    B = (int)(mono_tok / (c.ctx + c.n_new));
    for (i = 0; i < CAP_FIT_TRIES && B >= 1; i++) {
        int nb;
        cap_run(&c, cfg, NA_E2E_MONO, B, c.ctx, &p);
        if (!p.ok) {
            B = 0;
            break;
        }
        if (p.rss <= budget)
            break;
        nb = (int)((double)B * (budget - a) / (p.rss - a));
        B = nb < B ? nb : B - 1;
    }
    if (i == CAP_FIT_TRIES)
        B = 0;                          /* nothing that fits was found */
    if (B >= 1) {
        mono_tps = p.tok_s;
        snprintf(name, sizeof(name), "monolithic peak RSS at the most requests (B=%d ctx=%d)",
                 B, c.ctx);
        na_bench_add(b, name, p.rss / 1048576.0, "MiB", 0, "budget", (double)c.budget_mb);
        snprintf(name, sizeof(name), "monolithic decode at the most requests (B=%d)", B);
        na_bench_add(b, name, p.tok_s, "tok/s", 0, NULL, 0);
    }
    mono_tok = (double)(B > 0 ? B : 0) * (c.ctx + c.n_new);
    na_bench_add(b, "monolithic most concurrent KV tokens within the budget", mono_tok,
                 "tokens", 0, NULL, 0);

    /* ---- offload: compute RSS vs context against one storage node ------- */
    if (na_e2e_nodes_start(&c.h.link, c.h.exe, cfg, 1, c.h.dir, &c.h.nodes) != NA_OK) {
        na_cli_fail("bench capacity", NA_ERR_PEER);
        goto out;
    }
    for (i = 0; i < c.n_ctxs; i++) {
        cap_run(&c, cfg, NA_E2E_OFF_WB, CAP_B_RSS, c.ctxs[i], &p);
        dec_o[i] = p.ok ? p.rss_dec : 0;
        if (!p.ok)
            continue;
        snprintf(name, sizeof(name), "compute RSS in decode ctx=%d B=%d offload", c.ctxs[i],
                 CAP_B_RSS);
        snprintf(ref, sizeof(ref), "monolithic at ctx=%d", c.ctxs[i]);
        na_bench_add(b, name, p.rss_dec / 1048576.0, "MiB", 0, ref, dec_m[i] / 1048576.0);
        snprintf(name, sizeof(name), "compute peak RSS ctx=%d B=%d offload", c.ctxs[i], CAP_B_RSS);
        na_bench_add(b, name, p.rss / 1048576.0, "MiB", 0, ref, rss_m[i] / 1048576.0);
    }
    na_e2e_nodes_stop(&c.h.nodes);
    if (dec_o[0] > 0 && dec_o[c.n_ctxs - 1] > 0) {
        snprintf(name, sizeof(name), "offload compute RSS growth in decode, ctx %d->%d",
                 c.ctxs[0], c.ctxs[c.n_ctxs - 1]);
        na_bench_add(b, name, (dec_o[c.n_ctxs - 1] - dec_o[0]) / 1048576.0, "MiB", 0,
                     "monolithic growth", (dec_m[c.n_ctxs - 1] - dec_m[0]) / 1048576.0);
    }

    /* ---- offload capacity with n storage nodes --------------------------- */
    for (i = 0; i < c.n_nodes; i++) {
        int n = c.nodes[i], reqs = 0;
        const char *line;

        tok_n[i] = 0;
        if (cap_layout(&c, n, cfg, sizeof(cfg)) != 0 ||
            na_e2e_nodes_start(&c.h.link, c.h.exe, cfg, n, c.h.dir, &c.h.nodes) != NA_OK) {
            fprintf(stderr, "bench capacity: %d storage nodes: %s\n", n, na_errmsg());
            na_e2e_nodes_stop(&c.h.nodes);
            continue;
        }
        if (cap_probe(&c, cfg, c.ctx, out, sizeof(out)) == 0 &&
            (line = strstr(out, "CAPACITY reqs=")) != NULL)
            reqs = atoi(line + 14);
        tok_n[i] = (double)reqs * (c.ctx + c.n_new);
        if (n == 1 || base_tok == 0)
            base_tok = tok_n[i] / n;
        snprintf(name, sizeof(name), "offload most concurrent KV tokens, %d node%s", n,
                 n == 1 ? "" : "s");
        snprintf(ref, sizeof(ref), "%d x the 1-node figure (linear)", n);
        na_bench_add(b, name, tok_n[i], "tokens", 0, ref, base_tok * n);
        snprintf(name, sizeof(name), "offload vs monolithic KV tokens, %d node%s", n,
                 n == 1 ? "" : "s");
        na_bench_add(b, name, tok_n[i], "tokens", 0, "monolithic within the budget", mono_tok);
        if (reqs >= 1) {
            cap_run(&c, cfg, NA_E2E_OFF_WB, reqs, c.ctx, &p);
            if (p.ok) {
                snprintf(name, sizeof(name), "offload compute peak RSS at the most (B=%d, %d node%s)",
                         reqs, n, n == 1 ? "" : "s");
                na_bench_add(b, name, p.rss / 1048576.0, "MiB", 0, "budget",
                             (double)c.budget_mb);
                snprintf(name, sizeof(name), "offload decode at the most (B=%d, %d node%s)", reqs,
                         n, n == 1 ? "" : "s");
                na_bench_add(b, name, p.tok_s, "tok/s", 0, "monolithic at its most", mono_tps);
            }
        }
        na_e2e_nodes_stop(&c.h.nodes);
    }
    na_bench_note(b, "model: dim %d, %d layers, %d q / %d kv heads, head_dim %d, f16 KV (%.0f B "
                  "per token); compute budget %d MiB, each storage node %d MiB of DRAM KV "
                  "(tier dram), requests of %d prompt + %d new tokens; peak RSS = VmHWM of the "
                  "compute-node process (includes prefilling one batch of prompts), RSS in "
                  "decode = its VmRSS when every request had its first token; what offload's "
                  "RSS gains with context is the engine's prefill buffers, sized by the longest "
                  "prompt, not the KV held", go.dim, go.n_layers, go.n_heads,
                  go.n_kv_heads, go.dim / go.n_heads, kv_tok, c.budget_mb, c.node_mb, c.ctx,
                  c.n_new);
    na_bench_note(b, "monolithic most = (budget - RSS intercept) / RSS slope in whole requests, "
                  "run and shrunk until its peak RSS fits the budget; offload most = requests the nodes admit "
                  "(`bench e2e --point --capacity`), then run");
    rc = na_cli_bench_finish("capacity", b, &o);
    if (rc == 0 && o.json != NULL)
        cap_plot(o.json, c.nodes, tok_n, c.n_nodes, mono_tok, c.ctxs, dec_m, dec_o, c.n_ctxs,
                 budget);
out:
    na_e2e_host_close(&c.h, "capacity");
    return rc;
}

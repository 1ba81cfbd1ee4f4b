/* cli/bench_e2e.c — `nearattn bench e2e`: end-to-end decode throughput of
 * monolithic and offloaded generation on a generated model, at batch sizes
 * and contexts, with the per-step time split.
 *
 * Offload here runs against the layout's device slots in this process
 * (cluster/inproc.c: the storage node's KV store and attention
 * engine threads, no network), so the figures isolate the compute /
 * attention overlap of the scheduler; `nearattn run` prints the same split
 * over real storage-node processes. For each point:
 *   monolithic tok/s of B requests (the reference), offload tok/s of one
 *   batch of B and of 2 batches of B in flight, t_m (mean compute slice) and
 *   t_a (mean attention round trip) measured with 1 in flight, the ideal
 *   pipelining gain (t_m+t_a)/max(t_m,t_a) and the achieved gain
 *   tok/s(2 in flight) / tok/s(1 in flight). */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "cli/e2e_sweep.h"
#include "cli/run_offload.h"
#include "cluster/nodes.h"
#include "common/config.h"
#include "common/genmodel.h"
#include "common/model.h"
#include "cluster/inproc.h"
#include "compute-node/generate.h"
#include "compute-node/offload.h"

#define E2E_NEW  16
#define E2E_REPS 3          /* runs per point: median and spread (--quick: 1) */
#define E2E_MAX_TOKENS (256 * 1024)  /* prompt tokens of a point (2 batches: 1 GiB of KV) */

static void e2e_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench e2e [--mode monolithic|offload|both] [--full] [--remote]\n"
        "                          [options]\n\n"
        "Decode tokens/s of monolithic and offloaded generation (in-process device\n"
        "slots) on a generated MHA model (dim 256, 4 layers, 8 heads), with t_m, t_a\n"
        "and the ideal vs achieved gain of 2 batches of B in flight. Default: B = 1 and\n"
        "8 at context 512; --full: batch 1..64 at contexts 512..16384 (points past\n"
        "256K prompt tokens skipped).\n\n"
        "  --sweep        the comparison sweep over modes, links, batch, context and\n"
        "                 storage nodes (nearattn bench e2e --sweep --help)\n"
        "  --peers        batch-1 decode and pp512 beside llama.cpp's llama-bench on the\n"
        "                 same GGUF files (nearattn bench e2e --peers --help)\n"
        "  --mode M       monolithic, offload or both (default both)\n"
        "  --full         the larger sweep\n"
        "  --remote       offload to one storage-node process started here (shared\n"
        "                 memory transport) instead of in-process slots\n"
        "  --dim D        model dim (default 256; hidden 2*D, head_dim 32)\n"
        "  --layers N     layers (default 4)\n"
        "  --batch B      only batch size B (replaces the default list)\n"
        "  --ctx C        only context C (replaces the default list)\n"
        NA_CLI_BENCH_OPTS_HELP);
}

/* Write a one-slot DRAM layout into dir and load it (shared-memory
 * transport, one storage node for --remote on a port free now, 13999 if
 * none can be picked). */
static na_status_t e2e_layout(const char *dir, int bif, int threads, na_cfg_t **cfg_p)
{
    char path[600], secret[600];
    FILE *f;
    na_status_t st;
    int port;

    snprintf(secret, sizeof(secret), "%s/e2e.secret", dir);
    if ((st = na_cli_write_secret(secret)) != NA_OK)
        return st;
    snprintf(path, sizeof(path), "%s/e2e-%d.yaml", dir, bif);
    na_cli_bench_ports(&port, 1, 13999);
    f = fopen(path, "w");
    if (f == NULL)
        return na_err(NA_ERR_IO, "cannot write %s", path);
    fprintf(f, "cluster: { name: e2e, secret_file: \"%s\" }\n"
               "model: { path: \"%s/model.bin\" }\n"
               "transport: { tls: shm }\n"
               "compute:\n  - { name: c0, host: 127.0.0.1 }\n"
               "storage:\n  - name: s0\n    host: 127.0.0.1\n    port: %d\n    devices:\n"
               "      - { path: \"%s/kv\", dram_mb: 2048, ssd_mb: 4096, threads: %d }\n"
               "parallel: { partition: request, batches_in_flight: %d }\n"
               "kv: { block_tokens: 64, spill_interval: 4, tier: dram }\n", secret, dir, port,
               dir, threads > 1 ? threads - 1 : 1, bif);
    fclose(f);
    return na_cfg_load(path, cfg_p);
}

static void e2e_requests(na_engine_t *e, na_request_t **r, int n, int ctx)
{
    na_sampler_cfg_t sc = { 0.0f, 1.0f, 1 };
    int *toks = malloc((size_t)ctx * sizeof(int)), i, j;
    for (i = 0; i < n && toks != NULL; i++) {
        for (j = 0; j < ctx; j++)
            toks[j] = 3 + (j * 7 + i * 13) % (e->cfg.vocab_size - 3);
        if (na_request_create(e, i, toks, ctx, E2E_NEW, &sc, &r[i]) != NA_OK)
            r[i] = NULL;
    }
    free(toks);
}

static void e2e_free(na_request_t **r, int n)
{
    int i;
    for (i = 0; i < n; i++)
        na_request_destroy(r[i]);
}

/* One offload run: decode tok/s, per-slice compute and per-call attention
 * round trip, idle share, and the storage node's part of a round trip. */
typedef struct {
    double tok_s;       /* decode tokens/s */
    double tm, ta;      /* compute time per slice, attention round trip per call (s) */
    double idle;        /* share of the decode wall time waiting for attention */
    double node_att;    /* of a round trip: the node's attention kernels (s; remote only) */
    double node_other;  /* of a round trip: the node's other serving time (s; remote only) */
} e2e_off_t;

static double g_link_rtt;   /* --remote: the last HEARTBEAT round trip measured (s) */

/* Offload decode with bif batches of B in flight at context ctx into *out
 * (zeros when the run failed). */
static void e2e_offload(na_engine_t *e, const char *dir, const na_cfg_t *rcfg, int bif,
                        int B, int ctx, int threads, e2e_off_t *out)
{
    na_request_t *r[2 * 64];
    na_cfg_t *cfg = NULL;
    na_asvc_t *svc = NULL;
    na_off_opts_t oo;
    na_off_stats_t os;
    double dec;

    memset(out, 0, sizeof(*out));
    if (rcfg != NULL ? na_asvc_remote_create(rcfg, &e->cfg, "c0", &svc) != NA_OK :
        (e2e_layout(dir, bif, threads, &cfg) != NA_OK ||
         na_inproc_create(cfg, &e->cfg, &svc) != NA_OK)) {
        fprintf(stderr, "bench e2e: %s\n", na_errmsg());
        na_cfg_destroy(cfg);
        return;
    }
    e2e_requests(e, r, B * bif, ctx);      /* bif batches of B requests each */
    memset(&oo, 0, sizeof(oo));
    oo.max_batch = B;
    oo.batches_in_flight = bif;
    if (na_offload_generate(e, svc, r, B * bif, &oo, &os) == NA_OK) {
        dec = os.wall_s - os.prefill_s - os.ship_s;
        out->tm = os.slices ? (os.compute_s - os.prefill_s - os.ship_s) / (double)os.slices : 0;
        out->ta = os.attn_calls ? os.attn_rt_s / (double)os.attn_calls : 0;
        out->idle = os.idle_s / (dec > 0 ? dec : 1);
        if (os.svc.node_parts > 0 && os.attn_calls > 0) {
            /* a batch's nodes work in parallel: one round trip holds the
             * mean node time of one (batch, node) message (as nearattn run) */
            out->node_att = os.svc.node_attn_s / (double)os.svc.node_parts;
            out->node_other = os.svc.node_disk_s / (double)os.svc.node_parts;
        }
        if (os.svc.link_rtt_s > 0)
            g_link_rtt = os.svc.link_rtt_s;
        out->tok_s = dec > 0 ? (double)os.gen.decode_tokens / dec : 0;
    }
    e2e_free(r, B * bif);
    na_asvc_destroy(svc);
    na_cfg_destroy(cfg);
}

/* Median (spread = 0) or spread (1) of one field (at byte offset off) over n runs. */
static double e2e_stat(const e2e_off_t *v, int n, size_t off, int spread)
{
    double x[E2E_REPS];
    int i;
    for (i = 0; i < n && i < E2E_REPS; i++)
        x[i] = *(const double *)((const char *)&v[i] + off);
    return spread ? na_bench_spread(x, i) : na_bench_median(x, i);
}

static double e2e_med(const e2e_off_t *v, int n, size_t off)
{
    return e2e_stat(v, n, off, 0);
}

static double e2e_spread(const e2e_off_t *v, int n, size_t off)
{
    return e2e_stat(v, n, off, 1);
}

static double e2e_mono(na_engine_t *e, int B, int ctx)
{
    na_request_t *r[64];
    na_gen_opts_t go;
    na_gen_stats_t gs;
    double v = 0;

    memset(&go, 0, sizeof(go));
    go.max_batch = B;
    e2e_requests(e, r, B, ctx);
    if (na_generate(e, r, B, &go, &gs) == NA_OK && gs.decode_s > 0)
        v = (double)gs.decode_tokens / gs.decode_s;
    e2e_free(r, B);
    return v;
}

/* e2e's own options and what they set. */
typedef struct {
    int         full, remote;   /* --full, --remote */
    int         dim, layers;    /* --dim, --layers of the generated model */
    int         one_b, one_c;   /* --batch, --ctx: one point only (0: the grid) */
    const char *mode;           /* --mode monolithic | offload | both */
} e2e_args_t;

int na_cli_bench_e2e(int argc, char **argv)
{
    static const int qb[] = { 1, 8 }, qc[] = { 512 };
    static const int fb[] = { 1, 8, 32, 64 }, fc[] = { 512, 2048, 8192, 16384 };
    const int *bs = qb, *cs = qc;
    e2e_args_t ea = { .dim = 256, .layers = 4, .mode = "both" };
    int nb = 2, nc = 1, reps, i, j, k, rc = 1;
    na_cfg_t *rcfg = NULL;
    na_nodes_t *cl = NULL;
    na_cli_bench_opts_t o;
    na_genmodel_opts_t go;
    na_engine_opts_t eo;
    na_model_t *m = NULL;
    na_engine_t *e = NULL;
    na_bench_t *b = NULL;
    char dir[512], prefix[600], path[620], name[96];
    const char *tmp = getenv("TMPDIR");
    const na_cli_switch_t sw[] = { { "--full", &ea.full, 1 }, { "--remote", &ea.remote, 1 } };
    const na_cli_num_t num[] = {
        { "--dim", 32, 4096, &ea.dim }, { "--layers", 1, 64, &ea.layers },
        { "--batch", 1, 64, &ea.one_b }, { "--ctx", 1, 131072, &ea.one_c },
    };
    const na_cli_str_t str[] = { { "--mode", &ea.mode } };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]),
                                     .sw = sw, .n_sw = sizeof(sw) / sizeof(sw[0]),
                                     .str = str, .n_str = 1 };

    /* --sweep / --point: the mode x batch x context x nodes x link comparison
     * (cli/bench_sweep.c, cli/bench_point.c; docs/benchmarks.md) */
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--point"))
            return na_cli_e2e_point(argc, argv);
        if (!strcmp(argv[i], "--sweep"))
            return na_cli_e2e_sweep(argc, argv);
        if (!strcmp(argv[i], "--peers"))
            return na_cli_e2e_peers(argc, argv);
    }
    rc = na_cli_bench_parse("e2e", argc, argv, &o, e2e_usage, &own);
    if (rc >= 0)
        return rc;
    rc = 1;
    if (ea.dim % 32 != 0) {
        fprintf(stderr, "nearattn bench e2e: --dim %d is not a multiple of 32\n", ea.dim);
        return 2;
    }
    if (strcmp(ea.mode, "monolithic") && strcmp(ea.mode, "offload") && strcmp(ea.mode, "both")) {
        fprintf(stderr, "nearattn bench e2e: --mode monolithic, offload or both\n");
        return 2;
    }
    reps = o.quick ? 1 : E2E_REPS;
    if (ea.full) {
        bs = fb; nb = 4; cs = fc; nc = 4;
    }
    if (ea.one_b > 0) {
        bs = &ea.one_b; nb = 1;
    }
    if (ea.one_c > 0) {
        cs = &ea.one_c; nc = 1;
    }
    snprintf(dir, sizeof(dir), "%s/nearattn-e2e-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "nearattn bench e2e: cannot make a temporary directory\n");
        return 1;
    }
    na_genmodel_defaults(&go);
    go.dim = ea.dim;
    go.hidden_dim = 2 * ea.dim;
    go.n_layers = ea.layers;
    go.n_heads = ea.dim / 32;
    go.n_kv_heads = ea.dim / 32;
    go.seq_len = (ea.one_c > 0 ? ea.one_c : ea.full ? 16384 : 512) + E2E_NEW + 8;
    go.write_gguf = 0;
    snprintf(prefix, sizeof(prefix), "%s/model", dir);
    snprintf(path, sizeof(path), "%s.bin", prefix);
    eo = (na_engine_opts_t){ "cpu", o.threads > 0 ? o.threads : 1, NA_DTYPE_F16, 0 };
    if (na_genmodel_write(prefix, &go) != NA_OK || na_model_open(path, &m) != NA_OK ||
        na_engine_create(m, &eo, &e) != NA_OK || na_bench_create("e2e", &b) != NA_OK) {
        na_cli_fail("bench e2e", NA_ERR_INVALID);
        goto out;
    }
    if (ea.remote) {
        snprintf(path, sizeof(path), "%s/e2e-1.yaml", dir);
        na_nodes_opts_t no = { .config_path = path };   /* the layout's port and paths */
        if (e2e_layout(dir, 1, eo.n_threads, &rcfg) != NA_OK || na_nodes_start(rcfg, &no, &cl) != NA_OK) {
            na_cli_fail("bench e2e", NA_ERR_PEER);
            goto out;
        }
    }
    for (i = 0; i < nc; i++)
        for (j = 0; j < nb; j++) {
            int B = bs[j], C = cs[i], r;
            double vm[E2E_REPS], mono, sm, t1, t2, tm, ta;
            e2e_off_t o1[E2E_REPS], o2[E2E_REPS];
            if ((long)B * C * 2 > E2E_MAX_TOKENS) {
                na_bench_note(b, "B=%d ctx=%d skipped: %ld prompt tokens exceed the bench's "
                              "bound of %d", B, C, (long)B * C * 2, E2E_MAX_TOKENS);
                continue;
            }
            memset(o1, 0, sizeof(o1));
            memset(o2, 0, sizeof(o2));
            for (r = 0; r < reps; r++) {
                vm[r] = 0;
                if (strcmp(ea.mode, "offload"))
                    vm[r] = e2e_mono(e, B, C);
                if (strcmp(ea.mode, "monolithic")) {
                    e2e_offload(e, dir, rcfg, 1, B, C, eo.n_threads, &o1[r]);
                    e2e_offload(e, dir, rcfg, 2, B, C, eo.n_threads, &o2[r]);
                }
            }
            sm = na_bench_spread(vm, reps);
            mono = na_bench_median(vm, reps);
            t1 = e2e_med(o1, reps, offsetof(e2e_off_t, tok_s));
            t2 = e2e_med(o2, reps, offsetof(e2e_off_t, tok_s));
            tm = e2e_med(o1, reps, offsetof(e2e_off_t, tm));
            ta = e2e_med(o1, reps, offsetof(e2e_off_t, ta));
            snprintf(name, sizeof(name), "B=%d ctx=%d", B, C);
            if (mono > 0)
                na_bench_add(b, strcat(strcpy(path, name), " monolithic"), mono, "tok/s", sm,
                             NULL, 0);
            if (t1 > 0) {
                double na = e2e_med(o1, reps, offsetof(e2e_off_t, node_att));
                double no = e2e_med(o1, reps, offsetof(e2e_off_t, node_other));
                na_bench_add(b, strcat(strcpy(path, name), " offload bif=1"), t1, "tok/s",
                             e2e_spread(o1, reps, offsetof(e2e_off_t, tok_s)), "monolithic",
                             mono);
                if (mono > 0 && B == 1)   /* batch-1 latency: the issue's <= 1.3x target */
                    na_bench_add(b, strcat(strcpy(path, name),
                                           " TARGET latency offload/monolithic"),
                                 mono / t1, "x", 0, "limit", 1.3);
                na_bench_add(b, strcat(strcpy(path, name), " t_m slice"), 1e6 * tm, "us", 0,
                             NULL, 0);
                na_bench_add(b, strcat(strcpy(path, name), " t_a attention"), 1e6 * ta, "us", 0,
                             NULL, 0);
                if (na + no > 0) {      /* remote: the node's view of one round trip */
                    na_bench_add(b, strcat(strcpy(path, name), " t_a: node attention kernels"),
                                 1e6 * na, "us", 0, "t_a attention", 1e6 * ta);
                    na_bench_add(b, strcat(strcpy(path, name), " t_a: node other"), 1e6 * no,
                                 "us", 0, "t_a attention", 1e6 * ta);
                    na_bench_add(b, strcat(strcpy(path, name), " t_a: link and queueing"),
                                 1e6 * (ta - na - no), "us", 0, "t_a attention", 1e6 * ta);
                    if (g_link_rtt > 0)
                        na_bench_add(b, strcat(strcpy(path, name),
                                               " TARGET t_a / (ping + node attention)"),
                                     ta / (g_link_rtt + na), "x", 0, "limit", 2.0);
                }
                na_bench_add(b, strcat(strcpy(path, name), " idle share bif=1"),
                             e2e_med(o1, reps, offsetof(e2e_off_t, idle)), "", 0, NULL, 0);
            }
            if (t2 > 0 && t1 > 0) {
                double ideal = (tm + ta) / (tm > ta ? tm : ta);
                na_bench_add(b, strcat(strcpy(path, name), " offload bif=2"), t2, "tok/s",
                             e2e_spread(o2, reps, offsetof(e2e_off_t, tok_s)),
                             "offload bif=1", t1);
                na_bench_add(b, strcat(strcpy(path, name), " gain bif=2 achieved"), t2 / t1,
                             "x", 0, "ideal (t_m+t_a)/max", ideal);
                na_bench_add(b, strcat(strcpy(path, name), " idle share bif=2"),
                             e2e_med(o2, reps, offsetof(e2e_off_t, idle)), "", 0, NULL, 0);
            }
        }
    if (ea.remote && g_link_rtt > 0)
        na_bench_add(b, "link round trip (HEARTBEAT ping)", 1e6 * g_link_rtt, "us", 0, NULL, 0);
    if (ea.remote)
        na_bench_note(b, "TARGET latency rows: the performance issue sets <= 1.3x at --dim 768 "
                      "--ctx 4096 --batch 1; at small shapes a layer's attention is tens of us "
                      "and its round trip (two wake-ups of sleeping threads, 20-45 us each on "
                      "2-vCPU VMs) dominates");
    na_bench_note(b, "generated MHA model dim %d, %d layers, %d heads, f16 KV; %d new tokens "
                  "per request, greedy; offload = %s (1 slot, DRAM tier, %d engine worker(s) + "
                  "the thread that waits for the batch, which helps: the machine's %d "
                  "core(s) go to attention while the compute node waits, as monolithic's "
                  "do); compute %d thread(s); median of %d runs per point",
                  ea.dim, ea.layers, ea.dim / 32, E2E_NEW,
                  ea.remote ? "one storage-node process over UCX shared memory"
                         : "in-process device slot without a network",
                  eo.n_threads > 1 ? eo.n_threads - 1 : 1, eo.n_threads, eo.n_threads, reps);
    rc = na_cli_bench_finish("e2e", b, &o);
out:
    na_nodes_stop(cl);
    na_cfg_destroy(rcfg);
    for (k = 0; k < 3; k++) {
        const char *f[] = { "model.bin", "model.tok.bin", "e2e-1.yaml" };
        snprintf(path, sizeof(path), "%s/%s", dir, f[k]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/e2e-2.yaml", dir);
    unlink(path);
    na_bench_destroy(b);
    na_engine_destroy(e);
    na_model_destroy(m);
    na_cli_bench_rmdir("bench e2e", dir);
    return rc;
}

/* cli/bench_longctx.c — `nearattn bench longctx`: long prompts, offloaded vs
 * monolithic (issue 21, docs/benchmarks.md "Long contexts").
 *
 * Every figure comes from a point process (`nearattn bench e2e --point`,
 * cli/bench_point.c: the compute node alone in its process, so its peak RSS
 * is the compute node's memory) with one request, against one storage-node
 * process started here (shared memory, KV in DRAM):
 *
 *   RSS     the compute process's peak RSS (VmHWM) for prompts of each
 *           --rss-sizes length in offload mode (chunked prefill on the
 *           storage node): flat within 10 % is the target, so the spread
 *           (max / min - 1) is printed beside that limit, and each prompt's
 *           KV (what a monolithic compute node would hold) beside its RSS
 *   speed   for each --ctx context: time to first token (the whole prefill)
 *           and decode tokens/s, offload beside monolithic.
 *
 * A generated model (common/genmodel.h, random weights): by default the
 * 110M-class shape of llama2.c's stories110M (dim 768, 12 layers). */
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

#define LC_MAX_SIZES 8
#define LC_POINT_S   (6 * 3600)  /* one point process at most (a 32K prefill: an hour here) */
#define LC_PORT0     14790       /* the storage node's port when no free one is found */
#define LC_RSS_LIMIT 0.10        /* offload peak RSS: max / min - 1 within 10 % */

typedef struct {
    int    dim, hidden, layers, heads, kv_heads, vocab, n_new, chunk, seq_len;
    int    rss[LC_MAX_SIZES], n_rss;         /* offload RSS prompts */
    int    ctx[LC_MAX_SIZES], n_ctx;         /* TTFT / decode contexts, both modes */
    int    threads, port;
    na_e2e_host_t h;                         /* the executable, directory, link, nodes, table */
} lc_t;

static void lc_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn bench longctx [--rss-sizes LIST] [--ctx LIST] [--full] [shape]\n"
        "                              [options]\n\n"
        "Long prompts, one request at a time, each in its own compute process against\n"
        "one storage-node process started here (shared memory, KV in DRAM):\n"
        "  - the compute process's peak RSS in offload mode (chunked prefill on the\n"
        "    storage node) for each --rss-sizes prompt: flat within 10 %% is the\n"
        "    target (the spread is printed beside it), and each prompt's KV, what a\n"
        "    monolithic compute node would hold, beside each figure;\n"
        "  - at each --ctx context: time to first token and decode tok/s, offload\n"
        "    beside monolithic.\n"
        "Generated model with random weights, f16 KV.\n\n"
        "  --rss-sizes L  offload prompt lengths for the RSS rows, comma-separated\n"
        "                 (default 512,2048,8192; --full 2048,8192,32768)\n"
        "  --ctx L        contexts of the TTFT / decode rows (default 2048,8192;\n"
        "                 --full 8192,32768; 0: none)\n"
        "  --full         the issue's sizes (an hour or more on 2 cores)\n"
        "  --new N        tokens generated per request (default 16)\n"
        "  --prefill-chunk N  layout parallel.prefill_chunk (default 256)\n"
        "  --seq-len N    the model's context (default: the longest prompt + new\n"
        "                 tokens); e.g. a 100,000-token prompt on a 128K-context model:\n"
        "                 --rss-sizes 100000 --ctx 0 --seq-len 131072 --dim 64\n"
        "                 --hidden 172 --layers 2 --heads 4 --kv-heads 1 --vocab 512\n"
        "  --dim D --hidden H --layers N --heads Q --kv-heads K --vocab V\n"
        "                 the model (default the 110M-class shape of stories110M:\n"
        "                 768, 2048, 12, 12, 12, 32000; --quick: 64, 172, 2, 4, 4, 512\n"
        "                 and sizes 256,1024 / ctx 512)\n"
        NA_CLI_BENCH_OPTS_HELP);
}

/* --full: the sizes (lists given after it replace them). */
static int lc_full(const char *cmd, void *ctx, int argc, char **argv, int *i)
{
    static const int rss[] = { 2048, 8192, 32768 }, cx[] = { 8192, 32768 };
    lc_t *c = ctx;

    (void)cmd;
    (void)argc;
    if (strcmp(argv[*i], "--full"))
        return 0;
    memcpy(c->rss, rss, sizeof(rss));
    c->n_rss = 3;
    memcpy(c->ctx, cx, sizeof(cx));
    c->n_ctx = 2;
    return 1;
}

/* The layout: one storage node with DRAM for the longest request's KV. */
static int lc_layout(const lc_t *c, int max_tok, char *out, size_t cap)
{
    double kv = (double)max_tok * (double)c->layers * 2.0 *
                (double)(c->dim / c->heads * c->kv_heads) * 2.0;
    FILE *f;

    snprintf(out, cap, "%s/lc.yaml", c->h.dir);
    f = na_cli_bench_layout(out, "longctx", c->h.secret, c->h.dir);
    if (f == NULL)
        return -1;
    /* a chunk's answer over a 32K prefix takes seconds to minutes on a
     * busy machine: the peer timeout is the point's own bound. The node's
     * attention engine gets the compute node's thread count: at batch 1 the
     * compute process waits while the node attends, so each side in turn
     * has the cores monolithic has (with 1 engine thread, decode at 32K
     * was 12.3 against monolithic's 17.3 tok/s on 2 cores) */
    fprintf(f, "transport: { tls: shm, timeout_ms: 60000, peer_timeout_ms: 3600000 }\n"
               "compute:\n  - { name: c0, host: 127.0.0.1 }\n  - { name: c1, host: 127.0.0.1 }\n"
               "storage:\n  - name: s0\n    host: 127.0.0.1\n    port: %d\n    devices:\n"
               "      - { path: \"%s/kv\", dram_mb: %.0f, ssd_mb: 1, threads: %d }\n"
               "parallel: { partition: request, batches_in_flight: 1, max_batch: 4, "
               "prefill_chunk: %d }\n"
               "kv: { block_tokens: 64, spill_interval: 4, tier: dram, prefix_reuse: false }\n",
            c->port, c->h.dir, 64 + kv * 1.25 / 1048576.0, c->threads, c->chunk);
    return fclose(f) == 0 ? 0 : -1;
}

/* One point process: mode at context ctx, one request; p->ok 0 when it failed. */
static void lc_point(const lc_t *c, const char *cfg, int mode, int ctx, na_e2e_point_t *p)
{
    double t0 = na_bench_now();
    int rc;

    fprintf(stderr, "bench longctx: %-10s prompt %6d tokens ...",
            na_e2e_mode_name((na_e2e_mode_t)mode), ctx);
    fflush(stderr);
    memset(p, 0, sizeof(*p));
    rc = na_e2e_point_run(NULL, c->h.exe, cfg, mode, 1, ctx, c->n_new, c->threads, NULL,
                          LC_POINT_S, p);
    p->load1 = na_bench_loadavg();
    if (p->ok)
        fprintf(stderr, " %.1f s: TTFT %.2f s, decode %.2f tok/s, peak RSS %.1f MiB, load %.2f\n",
                na_bench_now() - t0, p->ttft, p->tok_s, p->rss / 1048576.0, p->load1);
    else
        fprintf(stderr, " FAILED (exit %d)\n", rc);
}

/* Index of v in a[n], or -1. */
static int lc_find(const int *a, int n, int v)
{
    int i;
    for (i = 0; i < n; i++)
        if (a[i] == v)
            return i;
    return -1;
}

int na_cli_bench_longctx(int argc, char **argv)
{
    lc_t c;
    const na_cli_bench_dflt_t dflt[] = {    /* the model: --quick's, else stories110M's */
        { &c.dim, 64, 768 }, { &c.hidden, 172, 2048 }, { &c.layers, 2, 12 },
        { &c.heads, 4, 12 }, { &c.vocab, 512, 32000 },
    };
    na_cli_bench_opts_t o;
    na_genmodel_opts_t go;
    na_bench_t *b;
    na_e2e_point_t off[2 * LC_MAX_SIZES], mono;
    int off_len[2 * LC_MAX_SIZES], n_off = 0;
    char cfg[PATH_MAX], path[PATH_MAX], name[96], ref[96];
    double kv_tok, lo = 0, hi = 0, lmin = -1, lmax = -1;
    int rc = 1, i, r, max_tok = 0, failed = 0;

    const na_cli_num_t num[] = {
        { "--dim", 1, 1 << 20, &c.dim }, { "--hidden", 1, 1 << 20, &c.hidden },
        { "--layers", 1, 1 << 20, &c.layers }, { "--heads", 1, 1 << 20, &c.heads },
        { "--kv-heads", 1, 1 << 20, &c.kv_heads }, { "--vocab", 1, 1 << 20, &c.vocab },
        { "--new", 1, 1 << 20, &c.n_new }, { "--prefill-chunk", 1, 1 << 20, &c.chunk },
        { "--seq-len", 1, 1 << 20, &c.seq_len },
    };
    const na_cli_list_opt_t list[] = {
        { "--rss-sizes", 1, 1 << 20, c.rss, LC_MAX_SIZES, &c.n_rss, 0 },
        { "--ctx", 1, 1 << 20, c.ctx, LC_MAX_SIZES, &c.n_ctx, 1 },
    };
    const na_cli_bench_own_t own = { .num = num, .n_num = sizeof(num) / sizeof(num[0]),
                                     .list = list, .n_list = sizeof(list) / sizeof(list[0]),
                                     .own = lc_full, .ctx = &c };

    memset(&c, 0, sizeof(c));
    c.n_new = 16;
    c.chunk = 256;
    c.n_ctx = -1;
    r = na_cli_bench_parse("longctx", argc, argv, &o, lc_usage, &own);
    if (r >= 0)
        return r;
    na_cli_bench_defaults(&o, dflt, sizeof(dflt) / sizeof(dflt[0]));
    if (c.kv_heads == 0)
        c.kv_heads = c.heads;
    if (c.n_rss == 0) {
        static const int def[] = { 512, 2048, 8192 }, q[] = { 256, 1024 };
        c.n_rss = o.quick ? 2 : 3;
        memcpy(c.rss, o.quick ? q : def, sizeof(int) * (size_t)c.n_rss);
    }
    if (c.n_ctx < 0) {
        static const int def[] = { 2048, 8192 };
        c.n_ctx = o.quick ? 1 : 2;
        if (o.quick)
            c.ctx[0] = 512;
        else
            memcpy(c.ctx, def, sizeof(def));
    }
    c.threads = o.threads;
    na_cli_bench_ports(&c.port, 1, LC_PORT0);
    for (i = 0; i < c.n_rss; i++)
        max_tok = c.rss[i] > max_tok ? c.rss[i] : max_tok;
    for (i = 0; i < c.n_ctx; i++)
        max_tok = c.ctx[i] > max_tok ? c.ctx[i] : max_tok;
    max_tok += c.n_new + 8;
    if (c.seq_len > 0 && c.seq_len < max_tok) {
        fprintf(stderr, "nearattn bench longctx: --seq-len %d is shorter than the longest "
                "prompt + new tokens (%d)\n", c.seq_len, max_tok);
        return 2;
    }
    if (c.seq_len > max_tok)
        max_tok = c.seq_len;
    na_genmodel_shape(&go, c.dim, c.hidden, c.layers, c.heads, c.kv_heads, c.vocab, max_tok);
    if (na_genmodel_check(&go) != NA_OK) {
        fprintf(stderr, "nearattn bench longctx: %s\n", na_errmsg());
        return 2;
    }
    if (na_e2e_host_open(&c.h, "longctx", "lc") != 0)
        return 1;
    b = c.h.b;
    snprintf(path, sizeof(path), "%s/model", c.h.dir);
    if (na_genmodel_write(path, &go) != NA_OK || lc_layout(&c, max_tok, cfg, sizeof(cfg)) != 0) {
        na_cli_fail("bench longctx", NA_ERR_IO);
        goto out;
    }
    kv_tok = 2.0 * (double)c.layers * (double)(c.dim / c.heads * c.kv_heads) * 2.0;
    if (na_e2e_nodes_start(&c.h.link, c.h.exe, cfg, 1, c.h.dir, &c.h.nodes) != NA_OK) {
        na_cli_fail("bench longctx", NA_ERR_PEER);
        goto out;
    }

    /* ---- offload: every RSS size and context, shortest first ------------ */
    for (i = 0; i < c.n_rss; i++)
        off_len[n_off++] = c.rss[i];
    for (i = 0; i < c.n_ctx; i++)
        if (lc_find(off_len, n_off, c.ctx[i]) < 0)
            off_len[n_off++] = c.ctx[i];
    for (i = 0; i < n_off; i++) {
        lc_point(&c, cfg, NA_E2E_OFF, off_len[i], &off[i]);
        failed += !off[i].ok;
    }
    na_e2e_nodes_stop(&c.h.nodes);
    for (i = 0; i < c.n_rss; i++) {
        const na_e2e_point_t *p = &off[lc_find(off_len, n_off, c.rss[i])];
        double mib;
        if (!p->ok)
            continue;
        mib = p->rss / 1048576.0;
        lo = lo == 0 || mib < lo ? mib : lo;
        hi = mib > hi ? mib : hi;
        snprintf(name, sizeof(name), "offload compute peak RSS, %d-token prompt", c.rss[i]);
        na_bench_add(b, name, mib, "MiB", 0, "the prompt's KV (monolithic holds it)",
                     kv_tok * (double)(c.rss[i] + c.n_new) / 1048576.0);
    }
    if (lo > 0 && c.n_rss >= 2) {
        snprintf(name, sizeof(name), "offload compute peak RSS spread, prompts %d..%d",
                 c.rss[0], c.rss[c.n_rss - 1]);
        na_bench_add(b, name, 100.0 * (hi / lo - 1.0), "%", 0, "limit (flat within 10 %)",
                     100.0 * LC_RSS_LIMIT);
    }

    /* ---- monolithic at each context, beside offload -------------------- */
    for (i = 0; i < c.n_ctx; i++) {
        const na_e2e_point_t *p = &off[lc_find(off_len, n_off, c.ctx[i])];
        lc_point(&c, cfg, NA_E2E_MONO, c.ctx[i], &mono);
        failed += !mono.ok;
        snprintf(ref, sizeof(ref), "monolithic");
        if (p->ok) {
            snprintf(name, sizeof(name), "TTFT offload, %d-token prompt", c.ctx[i]);
            na_bench_add(b, name, p->ttft, "s", 0, mono.ok ? ref : NULL, mono.ok ? mono.ttft : 0);
            snprintf(name, sizeof(name), "decode offload at %d context", c.ctx[i]);
            na_bench_add(b, name, p->tok_s, "tok/s", 0, mono.ok ? ref : NULL,
                         mono.ok ? mono.tok_s : 0);
        }
        if (mono.ok) {
            snprintf(name, sizeof(name), "monolithic compute peak RSS, %d-token prompt",
                     c.ctx[i]);
            na_bench_add(b, name, mono.rss / 1048576.0, "MiB", 0, p->ok ? "offload" : NULL,
                         p->ok ? p->rss / 1048576.0 : 0);
        }
        lmin = lmin < 0 || mono.load1 < lmin ? mono.load1 : lmin;
        lmax = mono.load1 > lmax ? mono.load1 : lmax;
    }
    for (i = 0; i < n_off; i++) {
        lmin = lmin < 0 || off[i].load1 < lmin ? off[i].load1 : lmin;
        lmax = off[i].load1 > lmax ? off[i].load1 : lmax;
    }
    na_bench_note(b, "one request per point process (`bench e2e --point`, batch 1, %d new "
                  "tokens, greedy, %d compute threads) against one storage-node process "
                  "(shared memory, KV in DRAM, %d engine threads, prefill_chunk %d, prefix "
                  "reuse off); generated "
                  "model dim %d, hidden %d, %d layers, %d q / %d kv heads, vocab %d, context "
                  "%d, f16 KV (%.0f B per token); peak RSS = VmHWM of the compute process (weights "
                  "included); TTFT = from the start of generation (engine and connection "
                  "made) to the first token", c.n_new, c.threads, c.threads, c.chunk, c.dim, c.hidden,
                  c.layers, c.heads, c.kv_heads, c.vocab, max_tok, kv_tok);
    na_bench_note(b, "1-minute load average at the end of each point: %.2f .. %.2f (the "
                  "storage node's prefill attention shares the machine's cores with the "
                  "compute process)", lmin, lmax);
    rc = na_cli_bench_finish("longctx", b, &o);
    if (rc == 0 && failed > 0) {
        fprintf(stderr, "nearattn bench longctx: %d point(s) failed\n", failed);
        rc = 1;
    }
out:
    na_e2e_host_close(&c.h, "longctx");
    return rc;
}

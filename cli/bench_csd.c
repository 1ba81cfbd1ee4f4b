/* cli/bench_csd.c — `nearattn bench storage --engine csd`: the csd engine
 * (storage-node/attn_csd.c) on one slot with its KV on the SSD tier, through
 * XRT (here XCL_EMULATION_MODE=noop: XRT's host path for real, the C model
 * of kernels/csd as the FPGA's stand-in, and every figure says so):
 *   - kernel launches per second and the median time of a launch (staging
 *     the pages into the P2P buffer + run + C model), per decode step
 *   - the per-launch overhead of XRT itself: an empty launch (no jobs)
 *     through xrtRunStart/xrtRunWait, 200 times
 *   - KV bytes moved SSD -> device buffer per generated token beside the
 *     analytic count (layers x context x 2 x kv_heads x head_dim x 2 bytes)
 *   - a modelled SmartSSD line from a rates file of the planner's format
 *     (common/plan.h): disk_Bps = the P2P read SSD -> FPGA DRAM, attn_Bps =
 *     the kernel's KV rate, step_overhead_s = the overhead of one launch;
 *     step time = launches x overhead + bytes / disk_Bps + bytes / attn_Bps
 *     (staging then kernel, as the engine does), labelled "modelled".
 * Shape: 8 requests x 4 layers, 32 q / 8 kv heads, head_dim 128, block 64,
 * context 2048 (512 with --quick), one launch per (layer, batch). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/bench_slot.h"
#include "cli/cli.h"
#include "common/plan.h"
#include "storage-node/slot.h"
#if NA_HAVE_XRT
#include "storage-node/csd_xclbin.h"
#include "storage-node/xrt_dev.h"
#endif

#define NA_BC_REQ    8
#define NA_BC_LAYERS 4
#define NA_BC_HEADS  32
#define NA_BC_KVH    8
#define NA_BC_HD     128
#define NA_BC_STEPS  6          /* 1 warm-up + 5 timed */

#if NA_HAVE_XRT
/* Median seconds of an empty launch (XRT's own overhead), n times. */
static na_status_t na_bc_empty_launch(const char *xclbin, int n, double *s_p)
{
    na_xrt_dev_t *d = NULL;
    na_xrt_bo_t *bo[7] = { NULL };
    static const int args[7] = { NA_CSD_ARG_DESC, NA_CSD_ARG_PAGES, NA_CSD_ARG_KV, NA_CSD_ARG_Q,
                                 NA_CSD_ARG_O, NA_CSD_ARG_LSE, NA_CSD_ARG_STATUS };
    double *t = malloc(sizeof(double) * (size_t)n);
    na_xrt_launch_t l;
    na_status_t st;
    int i;

    if (t == NULL)
        return na_err(NA_ERR_NOMEM, "bench csd: out of memory");
    st = na_xrt_dev_open("0", xclbin, &d);
    for (i = 0; st == NA_OK && i < 7; i++)
        st = na_xrt_bo_alloc(d, 4096, i == 2, args[i], &bo[i]);
    memset(&l, 0, sizeof(l));
    if (st == NA_OK) {
        l.desc = bo[0]; l.pages = bo[1]; l.kv = bo[2]; l.q = bo[3]; l.o = bo[4]; l.lse = bo[5];
        l.status = bo[6];
        l.head_dim = NA_BC_HD; l.group = 1; l.page_tokens = 64; l.scale = 1.0f;
    }
    for (i = 0; st == NA_OK && i < n; i++) {
        double t0 = na_bench_now();
        st = na_xrt_run(d, &l, 10000);
        t[i] = na_bench_now() - t0;
    }
    if (st == NA_OK)
        *s_p = na_bench_median(t, n);
    for (i = 0; i < 7; i++)
        na_xrt_bo_free(bo[i]);
    na_xrt_dev_close(d);
    free(t);
    return st;
}

/* The decode run: fills *stats_p with the csd counters over the timed steps
 * and *step_s_p with the median step. */
static na_status_t na_bc_run(const char *dir, const char *xclbin, int ctx,
                             na_attn_stats_t *delta, double *step_s_p, double *spread_p)
{
    const int kvw = NA_BC_KVH * NA_BC_HD, qw = NA_BC_HEADS * NA_BC_HD, max_tok = ctx + NA_BC_STEPS + 1;
    const uint64_t kv_req_layer = (uint64_t)max_tok * kvw * 2 * 2;
    na_slot_common_t c;
    na_slot_dev_t dev;
    na_slot_t *s = NULL;
    na_slot_stats_t s0, s1;
    na_attn_entry_t ent[NA_BC_REQ];
    float *k = malloc(sizeof(float) * (size_t)ctx * kvw), *q = malloc(sizeof(float) * NA_BC_REQ * qw);
    float *o = malloc(sizeof(float) * NA_BC_REQ * qw);
    double t[NA_BC_STEPS];
    uint64_t seed = 1;
    na_status_t st;
    int r, l, step;
    size_t i;

    if (k == NULL || q == NULL || o == NULL) {
        st = na_err(NA_ERR_NOMEM, "bench csd: out of memory");
        goto out;
    }
    for (i = 0; i < (size_t)ctx * kvw + (size_t)NA_BC_REQ * qw; i++) {   /* random, untimed */
        float x;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x = (float)((seed >> 40) & 0xffffff) / 8388608.0f - 1.0f;
        if (i < (size_t)ctx * kvw)
            k[i] = x;
        else
            q[i - (size_t)ctx * kvw] = x;
    }
    na_slot_common_default(&c);
    c.kv.n_layers = NA_BC_LAYERS;
    c.n_heads = NA_BC_HEADS;
    c.n_kv_heads = NA_BC_KVH;
    c.kv.head_dim = NA_BC_HD;
    c.kv.no_dram_tier = 1;                    /* KV on the SSD: every step reads it */
    memset(&dev, 0, sizeof(dev));
    dev.dir = dir;
    dev.engine = "csd";
    dev.ssd_bytes = (kv_req_layer + (1u << 20)) * NA_BC_REQ * NA_BC_LAYERS;
    dev.dram_bytes = 64u << 20;
    dev.csd_device = "0";
    dev.csd_xclbin = xclbin;
    dev.csd_bytes = kv_req_layer * NA_BC_REQ + (4u << 20);   /* one launch per layer */
    st = na_slot_create(&c, &dev, &s);
    for (r = 0; st == NA_OK && r < NA_BC_REQ; r++) {
        st = na_slot_open(s, (uint64_t)r, max_tok, NA_BC_KVH);
        for (l = 0; st == NA_OK && l < NA_BC_LAYERS; l++)
            st = na_slot_prefill(s, (uint64_t)r, l, k, k, NA_DTYPE_F32, 0, ctx);
        if (st == NA_OK)
            st = na_slot_prefill_done(s, (uint64_t)r);
    }
    for (step = 0; st == NA_OK && step < NA_BC_STEPS; step++) {
        double t0;
        if (step == 1)
            na_slot_stats(s, &s0);
        t0 = na_bench_now();
        for (l = 0; st == NA_OK && l < NA_BC_LAYERS; l++)
            st = na_cli_bench_slot_layer(s, ent, NA_BC_REQ, l, NA_BC_HEADS, NA_BC_KVH, q, qw, k, k,
                                         o, "bench csd");
        t[step] = na_bench_now() - t0;
    }
    if (st == NA_OK) {
        na_slot_stats(s, &s1);
        memset(delta, 0, sizeof(*delta));
        delta->csd_noop = s1.attn.csd_noop;
        delta->csd_launches = s1.attn.csd_launches - s0.attn.csd_launches;
        delta->csd_launch_ns = s1.attn.csd_launch_ns - s0.attn.csd_launch_ns;
        delta->csd_p2p_bytes = s1.attn.csd_p2p_bytes - s0.attn.csd_p2p_bytes;
        delta->csd_host_bytes = s1.attn.csd_host_bytes - s0.attn.csd_host_bytes;
        *step_s_p = na_bench_median(t + 1, NA_BC_STEPS - 1);
        *spread_p = na_bench_spread(t + 1, NA_BC_STEPS - 1);
    }
out:
    for (r = 0; s != NULL && r < NA_BC_REQ; r++)
        (void)na_slot_release(s, (uint64_t)r);
    na_slot_destroy(s);
    free(k);
    free(q);
    free(o);
    return st;
}
#endif

int na_cli_bench_csd(const na_cli_bench_opts_t *o, const char *base, const char *rates)
{
#if !NA_HAVE_XRT
    (void)o; (void)base; (void)rates;
    fprintf(stderr, "nearattn bench storage: engine csd is not built into this nearattn (it "
            "needs XRT: install libxrt-dev and rebuild)\n");
    return 1;
#else
    const int ctx = o->quick ? 512 : 2048, timed = NA_BC_STEPS - 1;
    char dir[1024], xclbin[1100];
    na_plan_rates_t rt;
    na_attn_stats_t d;
    na_bench_t *b = NULL;
    double step_s = 0, spread = 0, empty_s = 0, analytic, per_tok, bytes_step, model_s, noop;
    na_status_t st;
    int rc, noop_env;

    st = na_xrt_env_check(&noop_env);
    if (st != NA_OK)
        return na_cli_fail("bench storage --engine csd", st);
    memset(&rt, 0, sizeof(rt));
    rt.disk_Bps = 3.0e9;          /* defaults when no file: see kernels/csd/smartssd.rates */
    rt.attn_Bps = 9.6e9;
    rt.step_overhead_s = 30e-6;
    if (rates != NULL && (st = na_plan_rates_load(rates, &rt)) != NA_OK)
        return na_cli_fail("bench storage --engine csd", st);
    snprintf(dir, sizeof(dir), "%s/nearattn-bench-csd-XXXXXX", base);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "nearattn bench storage: mkdtemp(%s): %s\n", dir, strerror(errno));
        return 1;
    }
    snprintf(xclbin, sizeof(xclbin), "%s/na_csd.xclbin", dir);
    if ((st = na_xrt_xclbin_write(xclbin)) != NA_OK ||
        (st = na_bench_create("storage-csd", &b)) != NA_OK ||
        (st = na_bc_empty_launch(xclbin, 200, &empty_s)) != NA_OK ||
        (st = na_bc_run(dir, xclbin, ctx, &d, &step_s, &spread)) != NA_OK)
        goto out;
    noop = (double)d.csd_noop;
    bytes_step = (double)d.csd_p2p_bytes / timed;
    na_bench_add(b, noop ? "csd launches/s (XRT noop + C model)" : "csd launches/s (XRT hardware)",
                 (double)d.csd_launches / (step_s * timed), "1/s", spread, NULL, 0.0);
    na_bench_add(b, noop ? "csd launch: stage + run + C model (XRT noop)" : "csd launch (hardware)",
                 1e3 * (double)d.csd_launch_ns * 1e-9 / (double)d.csd_launches, "ms", 0.0, NULL, 0.0);
    na_bench_add(b, noop ? "csd per-launch overhead, empty launch (XRT noop host path)"
                         : "csd per-launch overhead, empty launch", 1e6 * empty_s, "us", 0.0,
                 NULL, 0.0);
    per_tok = (double)d.csd_p2p_bytes / ((double)timed * NA_BC_REQ);
    analytic = (double)NA_BC_LAYERS * (ctx + 1 + NA_BC_STEPS / 2.0) * NA_BC_KVH * NA_BC_HD * 2 * 2;
    na_bench_add(b, "SSD -> device bytes per token", per_tok / 1e6, "MB", 0.0,
                 "analytic L*ctx*2*kvh*hd*2", analytic / 1e6);
    na_bench_add(b, "host DRAM -> device bytes per token (rows not yet on SSD)",
                 (double)d.csd_host_bytes / ((double)timed * NA_BC_REQ) / 1e6, "MB", 0.0, NULL,
                 0.0);
    na_bench_add(b, noop ? "attn KV on SSD via csd (XRT noop + C model)" : "attn KV on SSD via csd",
                 bytes_step / step_s / 1e9, "GB/s", spread, NULL, 0.0);
    model_s = (double)d.csd_launches / timed * rt.step_overhead_s + bytes_step / rt.disk_Bps +
              bytes_step / rt.attn_Bps;
    na_bench_add(b, "modelled SmartSSD attn KV on SSD (rates file, not measured)",
                 bytes_step / model_s / 1e9, "GB/s", 0.0, NULL, 0.0);
    na_bench_add(b, "modelled SmartSSD decode step (rates file, not measured)", 1e3 * model_s,
                 "ms", 0.0, NULL, 0.0);
    na_bench_note(b, "engine csd: %s; %d requests x %d layers, %dq/%dkv heads, head_dim %d, "
                  "block 64, context %d, KV on the SSD tier read by pread(O_DIRECT) into the "
                  "mapped P2P buffer (bounced: noop buffers are not 4 KiB aligned)",
                  noop ? "XRT noop + C model: XRT's host path ran, the kernel was the C model "
                  "on the CPU, NOT an FPGA" : "XRT hardware", NA_BC_REQ, NA_BC_LAYERS,
                  NA_BC_HEADS, NA_BC_KVH, NA_BC_HD, ctx);
    na_bench_note(b, "modelled SmartSSD (%s): step = launches x %.3g s + bytes / %.3g B/s (P2P "
                  "read, disk_Bps) + bytes / %.3g B/s (kernel, attn_Bps); %.0f launches and "
                  "%.0f bytes per step as measured here", rates ? rates : "built-in defaults",
                  rt.step_overhead_s, rt.disk_Bps, rt.attn_Bps, (double)d.csd_launches / timed,
                  bytes_step);
out:
    rc = na_cli_bench_end("storage", "bench storage --engine csd", st, b, o);
    unlink(xclbin);
    rmdir(dir);
    return rc;
#endif
}

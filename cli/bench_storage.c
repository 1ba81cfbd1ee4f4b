/* cli/bench_storage.c — `nearattn bench storage`: decode attention of a
 * storage node's device slot against the limits measured in the same run.
 *
 *   attention with the KV entirely on the SSD tier (GQA 32 q / 8 kv heads):
 *     GB/s of KV attended vs the best O_DIRECT read bandwidth of the KV file
 *     (a sweep of 1/4 MiB reads, queue depth 8..64, 1/4/8 regions at once,
 *     after the timed steps) and vs a 1 MiB QD32 sequential read of it (as
 *     the engine's), read whole after every timed step so both see the same
 *     machine load; SSD bytes read per generated token vs the analytic count
 *     (layers x context x 2 x kv_heads x head_dim x 2 bytes)
 *   attention with the KV in the DRAM tier: GQA with 1 and N engine threads
 *     and MHA with 1 thread, vs STREAM copy (2 x 64 MiB) of as many threads,
 *     run after every timed step
 *   prefill (f32 rows -> f16 blocks -> O_DIRECT writes) vs O_DIRECT write
 *
 * Shape: head_dim 128, f16 KV, block 64 tokens, 8 requests x 4 layers;
 * context 8192 on the SSD (1 GiB of KV) and 4096 in DRAM (512 MiB), a
 * quarter of that with --quick. Every step appends a new row per (request,
 * layer) through the delayed writeback (spill interval 2), as in decoding.
 * One warm-up step, then 5 timed steps: median and spread. O_DIRECT
 * bypasses the page cache; data is random. */
#define _GNU_SOURCE            /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/bench_disk.h"
#include "cli/bench_slot.h"
#include "cli/cli.h"
#include "storage-node/slot.h"

#define NA_BS_REQ     8
#define NA_BS_LAYERS  4
#define NA_BS_HEADS   32         /* GQA 4; the DRAM run also measures MHA (8) */
#define NA_BS_KVH     8
#define NA_BS_HD      128
#define NA_BS_STEPS   6          /* 1 warm-up + 5 timed */
#define NA_BS_MAX_SLOTS 4        /* device slots of the SSD run (each its own engine) */

/* The in-run limit, measured once after every timed step so that limit
 * and attention see the same machine load: returns GB/s or < 0 on error. */
typedef double (*na_bs_ref_fn)(void *ctx);

/* A run of n_slots slots over dir: ctx tokens per request, threads engine
 * workers per slot, KV on the SSD tier (ssd) or in DRAM, n_heads query
 * heads; then what it measured. */
typedef struct {
    const char *dir;
    int         ctx;             /* tokens of context per request */
    int         threads;
    int         ssd;             /* 1: KV on SSD tier only; 0: DRAM tier */
    int         n_slots;         /* device slots sharing the requests (1..NA_BS_MAX_SLOTS) */
    int         n_heads;         /* query heads (NA_BS_KVH * group) */
    double      med_s, spread;   /* per decode step (all layers) */
    double      kv_bytes_step;   /* KV bytes attended per step */
    double      ssd_read_per_tok;
    double      prefill_s;
    uint64_t    prefetch_hits;
    uint64_t    helped, granules; /* jobs run by the thread waiting for the step / all */
    double      compute_frac;    /* kernel time / (timed wall time x kernel threads) */
    double      io_busy_frac;    /* wall time with >= 1 SSD read in flight / timed wall */
    double      io_busy_gbs;     /* SSD bytes read / that busy time (GB/s) */
    na_bs_ref_fn ref;            /* limit measured between steps */
    void        *ref_ctx;
    double       ref_med, ref_spread;
    double       pair_med, pair_min, pair_max;   /* per-step attention / limit */
    double       best_rd;        /* SSD run: best read GB/s of the sweep over the KV file */
    const struct na_bs_rdcfg *best_cfg;
} na_bs_run_t;

/* One slot's part of a decode step: its requests (ids 0..n_req-1 in that
 * slot) through every layer; run by a thread of its own when there are
 * several slots, so their engines read the disk at once. */
typedef struct {
    na_slot_t      *s;
    int             n_req, n_heads;
    size_t          qw;
    const float    *q, *k, *v;   /* q: n_req rows of qw; k, v: the new row */
    float          *o;
    na_attn_entry_t ent[NA_BS_REQ];
    na_status_t     st;
    char            why[256];    /* the failure's message (errors are per thread) */
} na_bs_part_t;

static void *na_bs_part_step(void *arg)
{
    na_bs_part_t *p = arg;
    int l;

    p->st = NA_OK;
    for (l = 0; l < NA_BS_LAYERS && p->st == NA_OK; l++) {
        p->st = na_cli_bench_slot_layer(p->s, p->ent, p->n_req, l, p->n_heads, NA_BS_KVH, p->q,
                                        p->qw, p->k, p->v, p->o, "bench storage");
        (void)na_slot_poll(p->s);
    }
    if (p->st != NA_OK)
        snprintf(p->why, sizeof(p->why), "%s", na_errmsg());
    return NULL;
}

/* One decode step over every part (threads when there are several). */
static na_status_t na_bs_step(na_bs_part_t *parts, int n)
{
    pthread_t th[NA_BS_MAX_SLOTS];
    int i, started = 0;

    if (n == 1) {
        na_bs_part_step(&parts[0]);
    } else {
        for (i = 0; i < n; i++, started++)
            if (pthread_create(&th[i], NULL, na_bs_part_step, &parts[i]) != 0)
                break;
        for (i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        if (started < n)
            return na_err(NA_ERR_INTERNAL, "bench storage: pthread_create failed");
    }
    for (i = 0; i < n; i++)
        if (parts[i].st != NA_OK)
            return na_err(parts[i].st, "%s", parts[i].why);
    return NA_OK;
}

/* Prefill NA_BS_REQ requests of ctx tokens over NA_BS_LAYERS layers, spread
 * over run->n_slots device slots (each in a directory of its own when there
 * are several), then time NA_BS_STEPS decode steps. */
static na_status_t na_bs_attn(na_bs_run_t *run)
{
    const int kvw = NA_BS_KVH * NA_BS_HD, qw = run->n_heads * NA_BS_HD;
    const int max_tok = run->ctx + NA_BS_STEPS + 1, ns = run->n_slots;
    const uint64_t kv_req_layer = (uint64_t)max_tok * kvw * 2 * 2;
    na_slot_common_t c;
    na_slot_dev_t dev = { 0 };
    na_slot_t *s[NA_BS_MAX_SLOTS] = { NULL };
    na_bs_part_t *parts = NULL;
    na_slot_stats_t st0, st1;
    float *k = NULL, *v = NULL, *k2 = NULL, *v2 = NULL, *q = NULL, *o = NULL;
    double t[NA_BS_STEPS], refv[NA_BS_STEPS];
    char sdir[NA_BS_MAX_SLOTS][1100] = { { 0 } };
    na_bs_disk_t kvfile;
    int have_kvfile = 0, made = 0;
    na_status_t st = NA_OK;
    int r, l, step, i, chunk = 512;

    if (ns < 1 || ns > NA_BS_MAX_SLOTS)
        return na_err(NA_ERR_RANGE, "bench storage: %d slots (1..%d)", ns, NA_BS_MAX_SLOTS);
    na_slot_common_default(&c);
    c.kv.n_layers = NA_BS_LAYERS;
    c.n_heads = run->n_heads;
    c.n_kv_heads = NA_BS_KVH;
    c.kv.head_dim = NA_BS_HD;
    c.n_threads = run->threads;
    c.kv.io_depth = NA_BS_QD;
    c.stage_chunks = 16;
    c.split_tokens = 1024;
    c.kv.no_dram_tier = run->ssd;
    parts = calloc((size_t)ns, sizeof(*parts));
    if (parts == NULL)
        return na_err(NA_ERR_NOMEM, "bench storage: out of memory");
    for (i = 0; i < ns; i++, made++) {
        int n_req = NA_BS_REQ / ns + (i < NA_BS_REQ % ns);
        if (ns == 1) {
            snprintf(sdir[i], sizeof(sdir[i]), "%s", run->dir);
        } else {
            snprintf(sdir[i], sizeof(sdir[i]), "%s/slot%d", run->dir, i);
            if (mkdir(sdir[i], 0700) != 0) {
                st = na_err(NA_ERR_IO, "bench storage: mkdir %s: %s", sdir[i], strerror(errno));
                goto out;
            }
        }
        memset(&dev, 0, sizeof(dev));
        dev.dir = sdir[i];
        dev.engine = "cpu";
        if (run->ssd) {
            dev.ssd_bytes = (kv_req_layer + (1u << 20)) * n_req * NA_BS_LAYERS;
            dev.dram_bytes = 64u << 20;                 /* writeback buffers only */
        } else {
            dev.dram_bytes = (kv_req_layer + (1u << 20)) * n_req * NA_BS_LAYERS;
        }
        st = na_slot_create(&c, &dev, &s[i]);
        if (st != NA_OK)
            goto out;
        parts[i].s = s[i];
        parts[i].n_req = n_req;
    }
    k = malloc(sizeof(float) * (size_t)chunk * kvw);
    v = malloc(sizeof(float) * (size_t)chunk * kvw);
    k2 = malloc(sizeof(float) * (size_t)chunk * kvw);
    v2 = malloc(sizeof(float) * (size_t)chunk * kvw);
    q = malloc(sizeof(float) * (size_t)NA_BS_REQ * qw);
    o = malloc(sizeof(float) * (size_t)NA_BS_REQ * qw);
    if (!k || !v || !k2 || !v2 || !q || !o) {
        st = na_err(NA_ERR_NOMEM, "bench storage: out of memory");
        goto out;
    }
    /* two pools of random rows, used alternately (generation is not timed) */
    na_bs_fill(k, (size_t)chunk * kvw, 1);
    na_bs_fill(v, (size_t)chunk * kvw, 2);
    na_bs_fill(k2, (size_t)chunk * kvw, 3);
    na_bs_fill(v2, (size_t)chunk * kvw, 4);
    run->prefill_s = na_bench_now();
    for (i = 0; i < ns; i++)
        for (r = 0; r < parts[i].n_req; r++) {
            st = na_slot_open(s[i], (uint64_t)r, max_tok, NA_BS_KVH);
            if (st != NA_OK)
                goto out;
            for (l = 0; l < NA_BS_LAYERS; l++) {
                int j;
                for (j = 0; j < run->ctx; j += chunk) {
                    int n = run->ctx - j < chunk ? run->ctx - j : chunk;
                    int alt = ((j / chunk) + r + l + i) & 1;
                    st = na_slot_prefill(s[i], (uint64_t)r, l, alt ? k2 : k, alt ? v2 : v,
                                         NA_DTYPE_F32, 0, n);
                    if (st != NA_OK)
                        goto out;
                }
            }
            st = na_slot_prefill_done(s[i], (uint64_t)r);
            if (st != NA_OK)
                goto out;
        }
    run->prefill_s = na_bench_now() - run->prefill_s;
    if (run->ssd && run->ref == NULL) {      /* the limit: O_DIRECT reads of this very file */
        char path[1200];                     /* (slot 0's with several: the same disk) */
        snprintf(path, sizeof(path), "%s/kv.dat", sdir[0]);
        st = na_bs_disk_attach(&kvfile, path);
        if (st != NA_OK)
            goto out;
        have_kvfile = 1;
        run->ref = na_bs_disk_read;
        run->ref_ctx = &kvfile;
    }
    na_bs_fill(q, (size_t)NA_BS_REQ * qw, 99);
    na_bs_fill(k, (size_t)kvw, 7);
    na_bs_fill(v, (size_t)kvw, 8);
    for (i = 0, r = 0; i < ns; r += parts[i].n_req, i++) {
        parts[i].n_heads = run->n_heads;
        parts[i].qw = (size_t)qw;
        parts[i].q = q + (size_t)r * qw;
        parts[i].o = o + (size_t)r * qw;
        parts[i].k = k;
        parts[i].v = v;
    }
    for (step = 0; step < NA_BS_STEPS; step++) {
        double t0;
        if (step == 1)
            na_slot_stats_sum(s, ns, &st0);
        t0 = na_bench_now();
        st = na_bs_step(parts, ns);
        if (st != NA_OK)
            goto out;
        t[step] = na_bench_now() - t0;
        if (step > 0 && run->ref != NULL) {
            refv[step] = run->ref(run->ref_ctx);
            if (refv[step] < 0) {
                st = NA_ERR_IO;
                goto out;
            }
        }
    }
    if (have_kvfile) {                      /* the file system's best read of the KV file */
        const na_bs_rdcfg_t *bc;
        st = na_bs_disk_best(&kvfile, &run->best_rd, &bc);
        if (st != NA_OK)
            goto out;
        run->best_cfg = bc;
    }
    if (run->ref != NULL) {
        double kvb = (double)NA_BS_REQ * NA_BS_LAYERS * kvw * 2.0 * 2.0, pr[NA_BS_STEPS];
        for (step = 1; step < NA_BS_STEPS; step++)   /* context ctx+1+step tokens */
            pr[step - 1] = kvb * (run->ctx + 1 + step) / t[step] / 1e9 / refv[step];
        run->pair_min = run->pair_max = pr[0];
        for (step = 1; step < NA_BS_STEPS - 1; step++) {
            run->pair_min = pr[step] < run->pair_min ? pr[step] : run->pair_min;
            run->pair_max = pr[step] > run->pair_max ? pr[step] : run->pair_max;
        }
        run->pair_med = na_bench_median(pr, NA_BS_STEPS - 1);
        run->ref_med = na_bench_median(refv + 1, NA_BS_STEPS - 1);
        run->ref_spread = na_bench_spread(refv + 1, NA_BS_STEPS - 1);
    }
    na_slot_stats_sum(s, ns, &st1);
    run->med_s = na_bench_median(t + 1, NA_BS_STEPS - 1);
    run->spread = na_bench_spread(t + 1, NA_BS_STEPS - 1);
    /* context at the timed steps: ctx+1 .. ctx+NA_BS_STEPS-1 tokens; use the mean */
    run->kv_bytes_step = (double)NA_BS_REQ * NA_BS_LAYERS * (run->ctx + 1 + NA_BS_STEPS / 2.0) *
                         kvw * 2.0 * 2.0;
    run->ssd_read_per_tok = (double)(st1.kv.bytes_read_ssd - st0.kv.bytes_read_ssd) /
                            ((NA_BS_STEPS - 1) * (double)NA_BS_REQ);
    run->prefetch_hits = st1.attn.prefetch_hits - st0.attn.prefetch_hits;
    run->helped = st1.attn.helped - st0.attn.helped;
    run->granules = st1.attn.granules - st0.attn.granules;
    {
        double wall = 0;
        for (i = 1; i < NA_BS_STEPS; i++)
            wall += t[i];
        int kt = st1.attn.kernel_threads > 0 ? (int)st1.attn.kernel_threads
                                              : run->threads * ns;
        double busy = (double)(st1.attn.io_busy_ns - st0.attn.io_busy_ns) / 1e9;
        run->compute_frac = (double)(st1.attn.compute_ns - st0.attn.compute_ns) / 1e9 /
                            (wall * kt);
        run->io_busy_frac = busy / (wall * ns);   /* per slot, on average */
        run->io_busy_gbs = busy > 0 ? (double)(st1.kv.bytes_read_ssd - st0.kv.bytes_read_ssd) /
                                      busy / 1e9 : 0;
    }
out:
    if (have_kvfile) {
        na_bs_disk_close(&kvfile);
        run->ref = NULL;
    }
    free(k);
    free(v);
    free(k2);
    free(v2);
    free(q);
    free(o);
    for (i = 0; i < ns; i++) {
        for (r = 0; i < made && r < parts[i].n_req; r++)
            (void)na_slot_release(s[i], (uint64_t)r);
        na_slot_destroy(s[i]);
        if (ns > 1 && sdir[i][0] != '\0')
            rmdir(sdir[i]);          /* absent when its mkdir failed: harmless */
    }
    free(parts);
    return st;
}

/* An SSD run whose attention beat its best O_DIRECT read: say so. */
static void na_bs_note_over(na_bench_t *b, const char *what, const na_bs_run_t *run)
{
    double gbs = run->kv_bytes_step / run->med_s / 1e9;
    if (gbs > run->best_rd)
        na_bench_note(b, "NOTE: %s: attention on SSD KV (%.2f GB/s) exceeds the best O_DIRECT "
                      "read measured in its run (%.2f GB/s, the first slot's KV file): on this "
                      "(virtual) disk that reference is not a bound -- the host may cache or the "
                      "device may serve reads of other shapes faster", what, gbs, run->best_rd);
}

typedef struct {
    int    threads;
    double multi[NA_BS_STEPS];   /* copies with `threads` threads */
    int    n_multi;
} na_bs_copy_t;

/* na_bs_ref_fn: single-thread STREAM copy, 2 x 64 MiB, 3 passes; with
 * threads > 1 also the copy with that many threads, kept in c->multi. */
static double na_bs_copy(void *ctx)
{
    na_bs_copy_t *c = ctx;
    double gbs, sp;
    if (c->threads > 1 && c->n_multi < NA_BS_STEPS) {
        if (na_bench_stream_copy(c->threads, (size_t)64 << 20, 3, &gbs, &sp) != NA_OK)
            return -1.0;
        c->multi[c->n_multi++] = gbs;
    }
    if (na_bench_stream_copy(1, (size_t)64 << 20, 3, &gbs, &sp) != NA_OK)
        return -1.0;
    return gbs;
}

static void na_bs_usage(FILE *f)
{
    fprintf(f, "usage: nearattn bench storage [--dir D] [--engine cpu|csd] [--rates FILE]\n"
               "                              [--json FILE] [--threads N] [--quick]\n\n"
               "Decode attention over KV on the SSD tier vs the best O_DIRECT read bandwidth\n"
               "of the KV file (a sweep of read sizes, queue depths and parallel regions)\n"
               "and vs a 1 MiB QD32 sequential read of it, and over KV in DRAM vs STREAM\n"
               "copy, all measured in the same run. Files go to a fresh directory under D\n"
               "(default: the current directory; use a real disk, not tmpfs) and are\n"
               "removed afterwards.\n\n"
               "With --engine csd: the computational-storage engine through XRT (needs\n"
               "XILINX_XRT; XCL_EMULATION_MODE=noop runs the C model, and says so):\n"
               "launches/s, per-launch overhead, SSD -> device bytes per token vs the\n"
               "analytic count, and a modelled SmartSSD line from --rates (cli/bench_csd.c).\n\n"
               "options:\n"
               "  --dir D        where the KV and bandwidth files go\n"
               "  --engine E     cpu (default) or csd\n"
               "  --rates FILE   csd: SmartSSD rates, planner format (disk_Bps = P2P read,\n"
               "                 attn_Bps = kernel, step_overhead_s = per launch);\n"
               "                 e.g. kernels/csd/smartssd.rates\n"
               NA_CLI_BENCH_OPTS_HELP);
}

/* storage's own options: --dir DIR, --engine E, --rates FILE. */
typedef struct {
    const char *dir, *engine, *rates;
} na_bs_args_t;

int na_cli_bench_storage(int argc, char **argv)
{
    na_cli_bench_opts_t o;
    const char *base = ".";
    char dir[1024];
    na_bench_t *b = NULL;
    na_bs_run_t run;
    na_bs_disk_t disk;
    double wr = 0, rd_fresh = 0, analytic;
    char name[96], ref[96];
    na_status_t st;
    int rc, ctx_ssd, ctx_dram, v;

    na_bs_args_t args = { ".", "cpu", NULL };
    const na_cli_str_t str[] = {
        { "--dir", &args.dir }, { "--engine", &args.engine }, { "--rates", &args.rates },
    };
    const na_cli_bench_own_t own = { .str = str, .n_str = sizeof(str) / sizeof(str[0]) };

    rc = na_cli_bench_parse("storage", argc, argv, &o, na_bs_usage, &own);
    if (rc >= 0)
        return rc;
    base = args.dir;
    if (!strcmp(args.engine, "csd"))
        return na_cli_bench_csd(&o, base, args.rates);
    if (strcmp(args.engine, "cpu") != 0) {
        fprintf(stderr, "nearattn bench storage: --engine %s: cpu or csd\n", args.engine);
        return 2;
    }
    ctx_ssd = o.quick ? 2048 : 8192;
    ctx_dram = o.quick ? 1024 : 4096;
    snprintf(dir, sizeof(dir), "%s/nearattn-bench-storage-XXXXXX", base);
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "nearattn bench storage: mkdtemp(%s): %s\n", dir, strerror(errno));
        return 1;
    }
    st = na_bench_create("storage", &b);
    if (st != NA_OK)
        goto out;

    /* the disk: a fresh file as large as the SSD-resident KV, written and read */
    st = na_bs_disk_open(&disk, dir, (uint64_t)NA_BS_REQ * NA_BS_LAYERS * ctx_ssd * NA_BS_KVH *
                         NA_BS_HD * 4, &wr);
    if (st != NA_OK)
        goto out;
    rd_fresh = na_bs_disk_read(&disk);
    na_bs_disk_close(&disk);
    if (rd_fresh < 0) {
        st = na_err(NA_ERR_IO, "bench storage: O_DIRECT read of the bandwidth file failed");
        goto out;
    }

    /* attention over SSD-resident KV; after each step the KV file itself is
     * read whole with O_DIRECT, the limit on the same data path */
    run = (na_bs_run_t){ .dir = dir, .ctx = ctx_ssd, .threads = o.threads, .ssd = 1,
                         .n_heads = NA_BS_HEADS, .n_slots = 1 };
    st = na_bs_attn(&run);
    if (st != NA_OK)
        goto out;
    na_bench_add(b, "O_DIRECT seq read of the KV file, 1MiB QD32", run.ref_med, "GB/s",
                 run.ref_spread, NULL, 0.0);
    snprintf(ref, sizeof(ref), "O_DIRECT read of the KV file, best of %d configs", NA_BS_N_RDCFG);
    na_bench_add(b, ref, run.best_rd, "GB/s", 0.0, NULL, 0.0);
    snprintf(name, sizeof(name), "attn KV on SSD %dq/%dkv ctx=%d t=%d", NA_BS_HEADS, NA_BS_KVH,
             ctx_ssd, o.threads);
    na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread,
                 "O_DIRECT read, best config", run.best_rd);
    na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread,
                 "O_DIRECT seq read 1MiB QD32", run.ref_med);
    na_bench_note(b, "SSD run: the read reference is the best of %d O_DIRECT read configurations "
                  "of the KV file (1/4 MiB reads, queue depth 8..64, 1/4/8 file regions at once), "
                  "each twice, after the timed steps; best: %zu MiB reads, QD %d, %d region%s",
                  NA_BS_N_RDCFG, run.best_cfg->len >> 20, run.best_cfg->qd, run.best_cfg->regions,
                  run.best_cfg->regions == 1 ? "" : "s");
    na_bs_note_over(b, "1 slot", &run);
    analytic = (double)NA_BS_LAYERS * (ctx_ssd + 1 + NA_BS_STEPS / 2.0) * NA_BS_KVH * NA_BS_HD * 2 * 2;
    na_bench_add(b, "SSD bytes read per token", run.ssd_read_per_tok / 1e6, "MB", 0.0,
                 "analytic L*ctx*2*kvh*hd*2", analytic / 1e6);
    na_bench_add(b, "O_DIRECT seq read, fresh file, once", rd_fresh, "GB/s", 0.0, NULL, 0.0);
    na_bench_add(b, "O_DIRECT seq write 1MiB QD32", wr, "GB/s", 0.0, NULL, 0.0);
    na_bench_add(b, "prefill (f32->f16 + write) of KV", (double)NA_BS_REQ * NA_BS_LAYERS * ctx_ssd *
                 NA_BS_KVH * NA_BS_HD * 4 / run.prefill_s / 1e9, "GB/s", 0.0,
                 "O_DIRECT seq write", wr);
    na_bench_note(b, "SSD run: attention / read of the KV file, step by step: median %.1f%% "
                  "(%.1f%% .. %.1f%%)", 100.0 * run.pair_med, 100.0 * run.pair_min,
                  100.0 * run.pair_max);
    /* where a step's time goes: the disk's share (gaps in it = the pipeline
     * left it idle), its rate while busy (below the reference = reads too
     * small or too few in flight), the kernels' share (hidden under I/O) */
    na_bench_add(b, "SSD step: disk busy (>= 1 read in flight)", 100.0 * run.io_busy_frac, "%",
                 0.0, NULL, 0.0);
    na_bench_add(b, "SSD step: read rate while the disk is busy", run.io_busy_gbs, "GB/s", 0.0,
                 "O_DIRECT read, best config", run.best_rd);
    na_bench_add(b, "SSD step: kernels busy (per kernel thread)", 100.0 * run.compute_frac, "%",
                 0.0, NULL, 0.0);
    na_bench_note(b, "SSD run: %llu prefetched granules used over the timed steps; a step = "
                  "disk busy share x its rate; kernels busy %.0f%% of the time (hidden under "
                  "the reads); the thread waiting for each layer ran %llu of the %llu granule "
                  "jobs itself", (unsigned long long)run.prefetch_hits, 100.0 * run.compute_frac,
                  (unsigned long long)run.helped, (unsigned long long)run.granules);

    /* the same requests over two device slots (each its own engine, I/O
     * thread and KV file, as a node with two devices: here on one disk),
     * against the best read measured in that run */
    run = (na_bs_run_t){ .dir = dir, .ctx = ctx_ssd, .threads = o.threads, .ssd = 1,
                         .n_heads = NA_BS_HEADS, .n_slots = 2 };
    st = na_bs_attn(&run);
    if (st != NA_OK)
        goto out;
    snprintf(name, sizeof(name), "attn KV on SSD %dq/%dkv ctx=%d t=%d, 2 slots", NA_BS_HEADS,
             NA_BS_KVH, ctx_ssd, o.threads);
    na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread,
                 "O_DIRECT read, best config", run.best_rd);
    na_bench_add(b, "SSD step, 2 slots: disk busy per slot", 100.0 * run.io_busy_frac, "%", 0.0,
                 NULL, 0.0);
    na_bs_note_over(b, "2 slots", &run);

    /* attention over DRAM-resident KV, a STREAM copy after each step:
     * GQA 4 with 1 and N engine threads, MHA with 1 thread */
    for (v = 0; v < 3; v++) {
        int t = v == 1 ? o.threads : 1, heads = v == 2 ? NA_BS_KVH : NA_BS_HEADS;
        na_bs_copy_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.threads = t;
        if (v == 1 && o.threads == 1)
            continue;
        run = (na_bs_run_t){ .dir = dir, .ctx = ctx_dram, .threads = t, .ssd = 0,
                             .n_heads = heads, .n_slots = 1 };
        run.ref = na_bs_copy;
        run.ref_ctx = &cp;
        st = na_bs_attn(&run);
        if (st != NA_OK)
            goto out;
        na_bench_add(b, "STREAM copy t=1", run.ref_med, "GB/s", run.ref_spread, NULL, 0.0);
        snprintf(name, sizeof(name), "attn KV in DRAM %dq/%dkv ctx=%d t=%d", heads, NA_BS_KVH,
                 ctx_dram, t);
        na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread,
                     "STREAM copy t=1", run.ref_med);
        na_bench_note(b, "%s / STREAM copy t=1, step by step: median %.1f%% (%.1f%% .. %.1f%%)",
                      name, 100.0 * run.pair_med, 100.0 * run.pair_min, 100.0 * run.pair_max);
        if (t > 1) {
            double med = na_bench_median(cp.multi, cp.n_multi), sp;
            sp = na_bench_spread(cp.multi, cp.n_multi);
            snprintf(ref, sizeof(ref), "STREAM copy t=%d", t);
            na_bench_add(b, ref, med, "GB/s", sp, NULL, 0.0);
            na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread, ref, med);
        }
    }
    na_bench_note(b, "shape: %d requests x %d layers, head_dim %d, f16 KV, block 64, spill interval 2, "
                  "split 1024 tokens, engine queue depth %d; KV files under %s", NA_BS_REQ,
                  NA_BS_LAYERS, NA_BS_HD, NA_BS_QD, base);
out:
    rc = na_cli_bench_end("storage", "bench storage", st, b, &o);
    rmdir(dir);
    return rc;
}

na_status_t na_cli_bench_slot_layer(na_slot_t *s, na_attn_entry_t *ent, int n_req, int layer,
                                    int n_q_heads, int n_kv_heads, const float *q, size_t qw,
                                    const float *k, const float *v, float *o, const char *who)
{
    na_status_t st;
    int r;

    for (r = 0; r < n_req; r++) {
        memset(&ent[r], 0, sizeof(ent[r]));
        ent[r].req = (uint64_t)r;
        ent[r].layer = layer;
        ent[r].n_q_heads = n_q_heads;
        ent[r].n_kv_heads = n_kv_heads;
        ent[r].q = q + (size_t)r * qw;
        ent[r].k_new = k;
        ent[r].v_new = v;
        ent[r].o = o + (size_t)r * qw;
    }
    st = na_slot_decode(s, ent, n_req);
    for (r = 0; st == NA_OK && r < n_req; r++)
        if (ent[r].status != NA_OK)
            st = na_err(ent[r].status, "%s: %s", who, ent[r].reason);
    return st;
}

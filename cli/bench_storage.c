/* cli/bench_storage.c — `nearattn bench storage`: decode attention of a
 * storage node's device slot against the limits measured in the same run.
 *
 *   O_DIRECT sequential read of a file of the same size on the same file
 *     system (1 MiB reads, io_uring, queue depth 16), and write      the limit
 *   attention with the KV entirely on the SSD tier: GB/s of KV attended vs
 *     that read bandwidth; SSD bytes read per generated token vs the analytic
 *     count (layers x context x 2 x kv_heads x head_dim x 2 bytes)
 *   STREAM copy, 1 and N threads (2 x 64 MiB)                        the limit
 *   attention with the KV in the DRAM tier, 1 and N engine threads, vs copy
 *
 * Shape: GQA 32 query / 8 KV heads, head_dim 128, f16 KV, block 64 tokens,
 * 8 requests x 4 layers; context 8192 on the SSD (1 GiB of KV) and 4096 in
 * DRAM (512 MiB), a quarter of that with --quick. Every step appends a new
 * row per (request, layer) through the delayed writeback (spill interval 2),
 * as in decoding. Warm-up step, then >= 3 timed steps: median and spread.
 * O_DIRECT bypasses the page cache, so the file sizes only need to exceed
 * the drive's own cache; data is random. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/cli.h"
#include "storage-node/slot.h"

#define NA_BS_REQ     8
#define NA_BS_LAYERS  4
#define NA_BS_HEADS   32
#define NA_BS_KVH     8
#define NA_BS_HD      128
#define NA_BS_STEPS   4          /* 1 warm-up + 3 timed */

typedef struct {
    const char *dir;
    int         ctx;             /* tokens of context per request */
    int         threads;
    int         ssd;             /* 1: KV on SSD tier only; 0: DRAM tier */
    double      med_s, spread;   /* per decode step (all layers) */
    double      kv_bytes_step;   /* KV bytes attended per step */
    double      ssd_read_per_tok;
    double      prefill_s;
    uint64_t    prefetch_hits;
} na_bs_run_t;

static void na_bs_fill(float *x, size_t n, uint64_t seed)
{
    size_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) & 0xffffff) / 8388608.0f - 1.0f;
    }
}

/* Prefill NA_BS_REQ requests of ctx tokens over NA_BS_LAYERS layers, then
 * time NA_BS_STEPS decode steps. */
static na_status_t na_bs_attn(na_bs_run_t *run)
{
    const int kvw = NA_BS_KVH * NA_BS_HD, qw = NA_BS_HEADS * NA_BS_HD;
    const int max_tok = run->ctx + NA_BS_STEPS + 1;
    const uint64_t kv_req_layer = (uint64_t)max_tok * kvw * 2 * 2;
    na_slot_common_t c;
    na_slot_dev_t dev;
    na_slot_t *s = NULL;
    na_slot_stats_t st0, st1;
    na_attn_entry_t ent[NA_BS_REQ];
    float *k = NULL, *v = NULL, *q = NULL, *o = NULL;
    double t[NA_BS_STEPS];
    na_status_t st;
    int r, l, step, i, chunk = 512;

    na_slot_common_default(&c);
    c.n_layers = NA_BS_LAYERS;
    c.n_heads = NA_BS_HEADS;
    c.n_kv_heads = NA_BS_KVH;
    c.head_dim = NA_BS_HD;
    c.n_threads = run->threads;
    c.io_depth = 32;
    c.stage_chunks = 16;
    c.split_tokens = 1024;
    c.no_dram_tier = run->ssd;
    memset(&dev, 0, sizeof(dev));
    dev.dir = run->dir;
    dev.engine = "cpu";
    if (run->ssd) {
        dev.ssd_bytes = (kv_req_layer + (1u << 20)) * NA_BS_REQ * NA_BS_LAYERS;
        dev.dram_bytes = 64u << 20;                     /* writeback buffers only */
    } else {
        dev.dram_bytes = (kv_req_layer + (1u << 20)) * NA_BS_REQ * NA_BS_LAYERS;
    }
    st = na_slot_create(&c, &dev, &s);
    if (st != NA_OK)
        return st;
    k = malloc(sizeof(float) * (size_t)chunk * kvw);
    v = malloc(sizeof(float) * (size_t)chunk * kvw);
    q = malloc(sizeof(float) * (size_t)NA_BS_REQ * qw);
    o = malloc(sizeof(float) * (size_t)NA_BS_REQ * qw);
    if (!k || !v || !q || !o) {
        st = na_err(NA_ERR_NOMEM, "bench storage: out of memory");
        goto out;
    }
    run->prefill_s = na_bench_now();
    for (r = 0; r < NA_BS_REQ; r++) {
        st = na_slot_open(s, (uint64_t)r, max_tok, NA_BS_KVH);
        if (st != NA_OK)
            goto out;
        for (l = 0; l < NA_BS_LAYERS; l++) {
            for (i = 0; i < run->ctx; i += chunk) {
                int n = run->ctx - i < chunk ? run->ctx - i : chunk;
                na_bs_fill(k, (size_t)n * kvw, ((uint64_t)r << 40) ^ ((uint64_t)l << 32) ^ (uint64_t)i);
                na_bs_fill(v, (size_t)n * kvw, ((uint64_t)r << 40) ^ ((uint64_t)l << 32) ^ (uint64_t)i ^ 1);
                st = na_slot_prefill(s, (uint64_t)r, l, k, v, NA_DTYPE_F32, 0, n);
                if (st != NA_OK)
                    goto out;
            }
        }
        st = na_slot_prefill_done(s, (uint64_t)r);
        if (st != NA_OK)
            goto out;
    }
    run->prefill_s = na_bench_now() - run->prefill_s;
    na_bs_fill(q, (size_t)NA_BS_REQ * qw, 99);
    na_bs_fill(k, (size_t)kvw, 7);
    na_bs_fill(v, (size_t)kvw, 8);
    for (step = 0; step < NA_BS_STEPS; step++) {
        double t0;
        if (step == 1)
            na_slot_stats(s, &st0);
        t0 = na_bench_now();
        for (l = 0; l < NA_BS_LAYERS; l++) {
            for (r = 0; r < NA_BS_REQ; r++) {
                memset(&ent[r], 0, sizeof(ent[r]));
                ent[r].req = (uint64_t)r;
                ent[r].layer = l;
                ent[r].n_q_heads = NA_BS_HEADS;
                ent[r].n_kv_heads = NA_BS_KVH;
                ent[r].q = q + (size_t)r * qw;
                ent[r].k_new = k;
                ent[r].v_new = v;
                ent[r].o = o + (size_t)r * qw;
            }
            st = na_slot_decode(s, ent, NA_BS_REQ);
            for (r = 0; st == NA_OK && r < NA_BS_REQ; r++)
                if (ent[r].status != NA_OK)
                    st = na_err(ent[r].status, "bench storage: %s", ent[r].reason);
            if (st != NA_OK)
                goto out;
            (void)na_slot_poll(s);
        }
        t[step] = na_bench_now() - t0;
    }
    na_slot_stats(s, &st1);
    run->med_s = na_bench_median(t + 1, NA_BS_STEPS - 1);
    run->spread = na_bench_spread(t + 1, NA_BS_STEPS - 1);
    /* context at the timed steps: ctx+1 .. ctx+NA_BS_STEPS-1 tokens; use the mean */
    run->kv_bytes_step = (double)NA_BS_REQ * NA_BS_LAYERS * (run->ctx + 1 + NA_BS_STEPS / 2.0) *
                         kvw * 2.0 * 2.0;
    run->ssd_read_per_tok = (double)(st1.kv.bytes_read_ssd - st0.kv.bytes_read_ssd) /
                            ((NA_BS_STEPS - 1) * (double)NA_BS_REQ);
    run->prefetch_hits = st1.attn.prefetch_hits - st0.attn.prefetch_hits;
out:
    free(k);
    free(v);
    free(q);
    free(o);
    for (r = 0; r < NA_BS_REQ; r++)
        (void)na_slot_release(s, (uint64_t)r);
    na_slot_destroy(s);
    return st;
}

/* O_DIRECT sequential write then read of `bytes` in dir: median GB/s. */
static na_status_t na_bs_disk(const char *dir, uint64_t bytes, double *rd, double *rd_spread,
                              double *wr)
{
    na_kv_file_t f;
    na_kv_io_t *io;
    void *buf;
    double t[3], t0;
    uint64_t off;
    size_t piece = 64u << 20;
    na_status_t st;
    int i;

    st = na_kv_file_open(&f, dir, "bandwidth.dat", bytes, 0);
    if (st != NA_OK)
        return st;
    st = na_kv_io_uring_create(16, &io);
    if (st != NA_OK)
        goto err_close;
    buf = na_kv_aligned_alloc(piece);
    if (buf == NULL) {
        st = na_err(NA_ERR_NOMEM, "bench storage: out of memory");
        goto err_io;
    }
    na_bs_fill(buf, piece / sizeof(float), 5);
    t0 = na_bench_now();
    for (off = 0; off < f.size && st == NA_OK; off += piece)
        st = na_kv_io_rw_sync(io, f.fd, 1, buf, piece, off, f.path);
    *wr = (double)f.size / (na_bench_now() - t0) / 1e9;
    for (i = 0; i < 3 && st == NA_OK; i++) {
        t0 = na_bench_now();
        for (off = 0; off < f.size && st == NA_OK; off += piece)
            st = na_kv_io_rw_sync(io, f.fd, 0, buf, piece, off, f.path);
        t[i] = na_bench_now() - t0;
    }
    if (st == NA_OK) {
        double gb[3];
        for (i = 0; i < 3; i++)
            gb[i] = (double)f.size / t[i] / 1e9;
        *rd = na_bench_median(gb, 3);
        *rd_spread = na_bench_spread(gb, 3);
    }
    na_kv_aligned_free(buf);
err_io:
    na_kv_io_destroy(io);
err_close:
    na_kv_file_close(&f);
    return st;
}

static void na_bs_usage(FILE *f)
{
    fprintf(f, "usage: nearattn bench storage [--dir D] [--json FILE] [--threads N] [--quick]\n\n"
               "Decode attention over KV on the SSD tier vs O_DIRECT sequential-read bandwidth\n"
               "of the same file system, and over KV in DRAM vs STREAM copy, measured in\n"
               "the same run. Files go to a fresh directory under D (default: the current\n"
               "directory; use a real disk, not tmpfs) and are removed afterwards.\n\n"
               "options:\n"
               "  --dir D        where the KV and bandwidth files go\n"
               NA_CLI_BENCH_OPTS_HELP);
}

int na_cli_bench_storage(int argc, char **argv)
{
    na_cli_bench_opts_t o;
    const char *base = ".";
    char dir[1024];
    na_bench_t *b = NULL;
    na_bs_run_t run;
    double rd = 0, rd_sp = 0, wr = 0, copy1 = 0, s1 = 0, copyN = 0, sN = 0, analytic;
    char name[96], ref[96];
    na_status_t st;
    int i, rc, ctx_ssd, ctx_dram, t;

    na_cli_bench_opts_init(&o);
    for (i = 1; i < argc; i++) {
        int r = na_cli_bench_opt("storage", argc, argv, &i, &o);
        if (r < 0)
            return 2;
        if (r > 0)
            continue;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            na_bs_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
            base = argv[++i];
            continue;
        }
        fprintf(stderr, "nearattn bench storage: unknown option '%s'\n", argv[i]);
        na_bs_usage(stderr);
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
        goto fail;

    /* the disk: write + read a file as large as the SSD-resident KV */
    st = na_bs_disk(dir, (uint64_t)NA_BS_REQ * NA_BS_LAYERS * ctx_ssd * NA_BS_KVH * NA_BS_HD * 4,
                    &rd, &rd_sp, &wr);
    if (st != NA_OK)
        goto fail;
    na_bench_add(b, "O_DIRECT seq read 1MiB QD16", rd, "GB/s", rd_sp, NULL, 0.0);
    na_bench_add(b, "O_DIRECT seq write 1MiB QD16", wr, "GB/s", 0.0, NULL, 0.0);

    /* attention over SSD-resident KV */
    memset(&run, 0, sizeof(run));
    run.dir = dir;
    run.ctx = ctx_ssd;
    run.threads = o.threads;
    run.ssd = 1;
    st = na_bs_attn(&run);
    if (st != NA_OK)
        goto fail;
    snprintf(name, sizeof(name), "attn KV on SSD ctx=%d B=%d L=%d t=%d", ctx_ssd, NA_BS_REQ,
             NA_BS_LAYERS, o.threads);
    na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread,
                 "O_DIRECT seq read", rd);
    analytic = (double)NA_BS_LAYERS * (ctx_ssd + 1 + NA_BS_STEPS / 2.0) * NA_BS_KVH * NA_BS_HD * 2 * 2;
    na_bench_add(b, "SSD bytes read per token", run.ssd_read_per_tok / 1e6, "MB", 0.0,
                 "analytic L*ctx*2*kvh*hd*2", analytic / 1e6);
    na_bench_add(b, "prefill write of KV", (double)NA_BS_REQ * NA_BS_LAYERS * ctx_ssd *
                 NA_BS_KVH * NA_BS_HD * 4 / run.prefill_s / 1e9, "GB/s", 0.0,
                 "O_DIRECT seq write", wr);
    na_bench_note(b, "SSD run: %llu prefetched granules used over the timed steps",
                  (unsigned long long)run.prefetch_hits);

    /* the memory: STREAM copy, then attention over DRAM-resident KV */
    st = na_bench_stream_copy(1, (size_t)64 << 20, o.quick ? 4 : 10, &copy1, &s1);
    if (st == NA_OK && o.threads > 1)
        st = na_bench_stream_copy(o.threads, (size_t)64 << 20, o.quick ? 4 : 10, &copyN, &sN);
    if (st != NA_OK)
        goto fail;
    na_bench_add(b, "STREAM copy t=1", copy1, "GB/s", s1, NULL, 0.0);
    if (o.threads > 1) {
        snprintf(name, sizeof(name), "STREAM copy t=%d", o.threads);
        na_bench_add(b, name, copyN, "GB/s", sN, NULL, 0.0);
    }
    for (t = 1; t <= o.threads; t = t == 1 && o.threads > 1 ? o.threads : t + o.threads) {
        memset(&run, 0, sizeof(run));
        run.dir = dir;
        run.ctx = ctx_dram;
        run.threads = t;
        run.ssd = 0;
        st = na_bs_attn(&run);
        if (st != NA_OK)
            goto fail;
        snprintf(name, sizeof(name), "attn KV in DRAM ctx=%d B=%d L=%d t=%d", ctx_dram,
                 NA_BS_REQ, NA_BS_LAYERS, t);
        snprintf(ref, sizeof(ref), "STREAM copy t=%d", t);
        na_bench_add(b, name, run.kv_bytes_step / run.med_s / 1e9, "GB/s", run.spread, ref,
                     t == 1 ? copy1 : copyN);
    }
    na_bench_note(b, "shape: %d q / %d kv heads, head_dim %d, f16 KV, block 64, spill interval 2, "
                  "KV files under %s", NA_BS_HEADS, NA_BS_KVH, NA_BS_HD, base);
    rc = na_cli_bench_finish("storage", b, &o);
    na_bench_destroy(b);
    rmdir(dir);
    return rc;

fail:
    rc = na_cli_fail("bench storage", st);
    na_bench_destroy(b);
    rmdir(dir);
    return rc;
}

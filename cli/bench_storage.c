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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/bench_slot.h"
#include "cli/cli.h"
#include "storage-node/slot.h"

#define NA_BS_REQ     8
#define NA_BS_LAYERS  4
#define NA_BS_HEADS   32         /* GQA 4; the DRAM run also measures MHA (8) */
#define NA_BS_QD      32         /* queue depth of the engine and of the limit */
#define NA_BS_KVH     8
#define NA_BS_HD      128
#define NA_BS_STEPS   6          /* 1 warm-up + 5 timed */
#define NA_BS_QD_MAX  64         /* deepest queue of the read sweep */

/* The in-run limit, measured once after every timed step so that limit
 * and attention see the same machine load: returns GB/s or < 0 on error. */
typedef double (*na_bs_ref_fn)(void *ctx);

typedef struct {
    const char *dir;
    int         ctx;             /* tokens of context per request */
    int         threads;
    int         ssd;             /* 1: KV on SSD tier only; 0: DRAM tier */
    int         n_heads;         /* query heads (NA_BS_KVH * group) */
    double      med_s, spread;   /* per decode step (all layers) */
    double      kv_bytes_step;   /* KV bytes attended per step */
    double      ssd_read_per_tok;
    double      prefill_s;
    uint64_t    prefetch_hits;
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

static void na_bs_fill(float *x, size_t n, uint64_t seed)
{
    size_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) & 0xffffff) / 8388608.0f - 1.0f;
    }
}

/* A file read as the disk limit: either a fresh file of the KV's size
 * (written once, O_DIRECT, 64 MiB calls of 1 MiB pieces at queue depth
 * NA_BS_QD) or the slot's own KV file, opened read-only with O_DIRECT. */
typedef struct {
    int          fd;
    uint64_t     size;
    char         path[1100];
    int          own;            /* 1: fresh file in f (unlinked on close) */
    na_kv_file_t f;
    na_kv_io_t  *io;
    void        *buf;
    size_t       piece;
} na_bs_disk_t;

static void na_bs_disk_close(na_bs_disk_t *d)
{
    na_kv_aligned_free(d->buf);
    na_kv_io_destroy(d->io);
    if (d->own)
        na_kv_file_close(&d->f);
    else if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
}

static na_status_t na_bs_disk_init(na_bs_disk_t *d)
{
    na_status_t st = na_kv_io_uring_create(NA_BS_QD_MAX, &d->io);
    d->piece = 64u << 20;
    if (st == NA_OK && (d->buf = na_kv_aligned_alloc(d->piece)) == NULL)
        st = na_err(NA_ERR_NOMEM, "bench storage: out of memory");
    if (st != NA_OK)
        na_bs_disk_close(d);
    return st;
}

/* Create and write a fresh file in dir; write GB/s in *wr. */
static na_status_t na_bs_disk_open(na_bs_disk_t *d, const char *dir, uint64_t bytes, double *wr)
{
    uint64_t off;
    double t0;
    na_status_t st;

    memset(d, 0, sizeof(*d));
    d->fd = -1;
    st = na_kv_file_open(&d->f, dir, "bandwidth.dat", bytes, 0);
    if (st != NA_OK)
        return st;
    d->own = 1;
    d->fd = d->f.fd;
    d->size = d->f.size;
    st = na_bs_disk_init(d);
    if (st != NA_OK)
        return st;
    na_bs_fill(d->buf, d->piece / sizeof(float), 5);
    t0 = na_bench_now();
    for (off = 0; off < d->size && st == NA_OK; off += d->piece)
        st = na_kv_io_rw_sync(d->io, d->fd, 1, d->buf, d->piece, off, d->f.path);
    *wr = (double)d->size / (na_bench_now() - t0) / 1e9;
    if (st != NA_OK)
        na_bs_disk_close(d);
    return st;
}

/* Open an existing file (the slot's KV file) for O_DIRECT reads. */
static na_status_t na_bs_disk_attach(na_bs_disk_t *d, const char *path)
{
    struct stat sb;

    memset(d, 0, sizeof(*d));
    snprintf(d->path, sizeof(d->path), "%s", path);
    d->fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (d->fd < 0)
        return na_err(NA_ERR_IO, "open(%s): %s", path, strerror(errno));
    if (fstat(d->fd, &sb) != 0) {
        close(d->fd);
        return na_err(NA_ERR_IO, "fstat(%s): %s", path, strerror(errno));
    }
    d->size = (uint64_t)sb.st_size / NA_KV_IO_MAX * NA_KV_IO_MAX;
    return na_bs_disk_init(d);
}

/* Reads in flight on a disk's ring, into buffer slots of d->buf (a read's
 * tag: its length << 8 | its slot). */
typedef struct {
    na_kv_io_cqe_t cqe[NA_BS_QD_MAX];
    int            free_slot[NA_BS_QD_MAX];
    int            n_free, inflight;
} na_bs_rq_t;

static void na_bs_rq_init(na_bs_rq_t *q, int qd)
{
    int i;

    for (i = 0; i < qd; i++)
        q->free_slot[i] = i;
    q->n_free = qd;
    q->inflight = 0;
}

/* Read len bytes at off into a free slot (slots slot_bytes apart). 0, or -1
 * when the ring refused it. */
static int na_bs_rq_read(na_bs_disk_t *d, na_bs_rq_t *q, size_t slot_bytes, uint64_t len,
                         uint64_t off)
{
    int slot = q->free_slot[--q->n_free];

    if (d->io->ops->prep_read(d->io, d->fd, (char *)d->buf + (size_t)slot * slot_bytes,
                              (size_t)len, off, len << 8 | (uint64_t)slot) != NA_OK)
        return -1;
    q->inflight++;
    return 0;
}

/* Wait for at least one read and free the slots of those done. 0, or -1 on
 * an I/O error or a short read. */
static int na_bs_rq_reap(na_bs_disk_t *d, na_bs_rq_t *q)
{
    int n, i;

    if (d->io->ops->wait(d->io, 1, q->cqe, NA_BS_QD_MAX, &n) != NA_OK)
        return -1;
    for (i = 0; i < n; i++) {
        q->inflight--;
        if (q->cqe[i].res != (int64_t)(q->cqe[i].tag >> 8))
            return -1;
        q->free_slot[q->n_free++] = (int)(q->cqe[i].tag & 0xff);
    }
    return 0;
}

/* na_bs_ref_fn: read the whole file sequentially, 1 MiB reads with up to
 * NA_BS_QD in flight all along; freed buffers are refilled in groups of 4
 * adjacent reads (as the engine queues a granule), which the block layer
 * may merge. */
static double na_bs_disk_read(void *ctx)
{
    na_bs_disk_t *d = ctx;
    na_bs_rq_t q;
    double t0 = na_bench_now();
    uint64_t next = 0;

    na_bs_rq_init(&q, NA_BS_QD);
    for (;;) {
        while (next < d->size && (q.n_free >= 4 || (q.n_free > 0 && q.inflight == 0))) {
            int g;
            for (g = 0; g < 4 && q.n_free > 0 && next < d->size; g++, next += NA_KV_IO_MAX)
                if (na_bs_rq_read(d, &q, NA_KV_IO_MAX, NA_KV_IO_MAX, next) != 0)
                    return -1.0;
        }
        if (q.inflight == 0)
            break;
        if (na_bs_rq_reap(d, &q) != 0)
            return -1.0;
    }
    return (double)d->size / (na_bench_now() - t0) / 1e9;
}

/* One read configuration of the sweep for the file system's best read
 * bandwidth: read size, queue depth, contiguous file regions read at once. */
typedef struct na_bs_rdcfg {
    size_t len;
    int    qd;
    int    regions;
} na_bs_rdcfg_t;

/* len * qd <= the 64 MiB buffer; qd <= NA_BS_QD_MAX */
static const na_bs_rdcfg_t na_bs_rdcfgs[] = {
    { 1u << 20,  8, 1 }, { 1u << 20, 32, 1 }, { 1u << 20, 64, 1 },
    { 4u << 20,  8, 1 }, { 4u << 20, 16, 1 },
    { 1u << 20, 64, 4 }, { 4u << 20, 16, 4 }, { 1u << 20, 64, 8 },
};
#define NA_BS_N_RDCFG ((int)(sizeof(na_bs_rdcfgs) / sizeof(na_bs_rdcfgs[0])))

/* Read the whole file once as c says: c->regions contiguous regions, each
 * read front to back, requests issued round-robin over the regions, up to
 * c->qd reads of c->len bytes in flight. Returns GB/s, < 0 on an I/O error. */
static double na_bs_disk_read_cfg(na_bs_disk_t *d, const na_bs_rdcfg_t *c)
{
    na_bs_rq_t q;
    uint64_t cur[8], end[8], per = d->size / (uint64_t)c->regions / NA_KV_IO_MAX * NA_KV_IO_MAX;
    int rr = 0, i;
    double t0 = na_bench_now();

    for (i = 0; i < c->regions; i++) {
        cur[i] = (uint64_t)i * per;
        end[i] = i == c->regions - 1 ? d->size : cur[i] + per;
    }
    na_bs_rq_init(&q, c->qd);
    for (;;) {
        while (q.n_free > 0) {
            uint64_t len;
            int k, r = -1;
            for (k = 0; k < c->regions && r < 0; k++)
                if (cur[(rr + k) % c->regions] < end[(rr + k) % c->regions])
                    r = (rr + k) % c->regions;
            if (r < 0)
                break;
            rr = r + 1;
            len = end[r] - cur[r] < c->len ? end[r] - cur[r] : c->len;
            if (na_bs_rq_read(d, &q, c->len, len, cur[r]) != 0)
                return -1.0;
            cur[r] += len;
        }
        if (q.inflight == 0)
            break;
        if (na_bs_rq_reap(d, &q) != 0)
            return -1.0;
    }
    return (double)d->size / (na_bench_now() - t0) / 1e9;
}

/* The sweep: every configuration twice (best kept); the best GB/s of all in
 * *best_p and its configuration in *cfg_p. Returns NA_ERR_IO on a failed read. */
static na_status_t na_bs_disk_best(na_bs_disk_t *d, double *best_p, const na_bs_rdcfg_t **cfg_p)
{
    int c, rep;

    *best_p = 0.0;
    *cfg_p = &na_bs_rdcfgs[0];
    for (c = 0; c < NA_BS_N_RDCFG; c++)
        for (rep = 0; rep < 2; rep++) {
            double g = na_bs_disk_read_cfg(d, &na_bs_rdcfgs[c]);
            if (g < 0)
                return na_err(NA_ERR_IO, "bench storage: O_DIRECT read sweep of %s failed",
                              d->path);
            if (g > *best_p) {
                *best_p = g;
                *cfg_p = &na_bs_rdcfgs[c];
            }
        }
    return NA_OK;
}

/* Prefill NA_BS_REQ requests of ctx tokens over NA_BS_LAYERS layers, then
 * time NA_BS_STEPS decode steps. */
static na_status_t na_bs_attn(na_bs_run_t *run)
{
    const int kvw = NA_BS_KVH * NA_BS_HD, qw = run->n_heads * NA_BS_HD;
    const int max_tok = run->ctx + NA_BS_STEPS + 1;
    const uint64_t kv_req_layer = (uint64_t)max_tok * kvw * 2 * 2;
    na_slot_common_t c;
    na_slot_dev_t dev = { 0 };
    na_slot_t *s = NULL;
    na_slot_stats_t st0, st1;
    na_attn_entry_t ent[NA_BS_REQ];
    float *k = NULL, *v = NULL, *k2 = NULL, *v2 = NULL, *q = NULL, *o = NULL;
    double t[NA_BS_STEPS], refv[NA_BS_STEPS];
    na_bs_disk_t kvfile;
    int have_kvfile = 0;
    na_status_t st;
    int r, l, step, i, chunk = 512;

    na_slot_common_default(&c);
    c.n_layers = NA_BS_LAYERS;
    c.n_heads = run->n_heads;
    c.n_kv_heads = NA_BS_KVH;
    c.head_dim = NA_BS_HD;
    c.n_threads = run->threads;
    c.io_depth = NA_BS_QD;
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
    for (r = 0; r < NA_BS_REQ; r++) {
        st = na_slot_open(s, (uint64_t)r, max_tok, NA_BS_KVH);
        if (st != NA_OK)
            goto out;
        for (l = 0; l < NA_BS_LAYERS; l++) {
            for (i = 0; i < run->ctx; i += chunk) {
                int n = run->ctx - i < chunk ? run->ctx - i : chunk;
                int alt = ((i / chunk) + r + l) & 1;
                st = na_slot_prefill(s, (uint64_t)r, l, alt ? k2 : k, alt ? v2 : v,
                                     NA_DTYPE_F32, 0, n);
                if (st != NA_OK)
                    goto out;
            }
        }
        st = na_slot_prefill_done(s, (uint64_t)r);
        if (st != NA_OK)
            goto out;
    }
    run->prefill_s = na_bench_now() - run->prefill_s;
    if (run->ssd && run->ref == NULL) {      /* the limit: O_DIRECT reads of this very file */
        char path[1100];
        snprintf(path, sizeof(path), "%s/kv.dat", run->dir);
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
    for (step = 0; step < NA_BS_STEPS; step++) {
        double t0;
        if (step == 1)
            na_slot_stats(s, &st0);
        t0 = na_bench_now();
        for (l = 0; l < NA_BS_LAYERS; l++) {
            st = na_cli_bench_slot_layer(s, ent, NA_BS_REQ, l, run->n_heads, NA_BS_KVH, q, qw, k,
                                         v, o, "bench storage");
            if (st != NA_OK)
                goto out;
            (void)na_slot_poll(s);
        }
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
    na_slot_stats(s, &st1);
    run->med_s = na_bench_median(t + 1, NA_BS_STEPS - 1);
    run->spread = na_bench_spread(t + 1, NA_BS_STEPS - 1);
    /* context at the timed steps: ctx+1 .. ctx+NA_BS_STEPS-1 tokens; use the mean */
    run->kv_bytes_step = (double)NA_BS_REQ * NA_BS_LAYERS * (run->ctx + 1 + NA_BS_STEPS / 2.0) *
                         kvw * 2.0 * 2.0;
    run->ssd_read_per_tok = (double)(st1.kv.bytes_read_ssd - st0.kv.bytes_read_ssd) /
                            ((NA_BS_STEPS - 1) * (double)NA_BS_REQ);
    run->prefetch_hits = st1.attn.prefetch_hits - st0.attn.prefetch_hits;
    {
        double wall = 0;
        for (i = 1; i < NA_BS_STEPS; i++)
            wall += t[i];
        int kt = st1.attn.kernel_threads > 0 ? (int)st1.attn.kernel_threads : run->threads;
        double busy = (double)(st1.attn.io_busy_ns - st0.attn.io_busy_ns) / 1e9;
        run->compute_frac = (double)(st1.attn.compute_ns - st0.attn.compute_ns) / 1e9 /
                            (wall * kt);
        run->io_busy_frac = busy / wall;
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
    for (r = 0; r < NA_BS_REQ; r++)
        (void)na_slot_release(s, (uint64_t)r);
    na_slot_destroy(s);
    return st;
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

static int na_bs_opt(void *ctx, int argc, char **argv, int *i)
{
    na_bs_args_t *a = ctx;
    const char **to = !strcmp(argv[*i], "--dir") ? &a->dir
                    : !strcmp(argv[*i], "--engine") ? &a->engine
                    : !strcmp(argv[*i], "--rates") ? &a->rates : NULL;
    if (to != NULL && *i + 1 < argc) {
        *to = argv[++*i];
        return 1;
    }
    return 0;
}

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

    rc = na_cli_bench_parse("storage", argc, argv, &o, na_bs_usage, na_bs_opt, &args);
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
        goto fail;

    /* the disk: a fresh file as large as the SSD-resident KV, written and read */
    st = na_bs_disk_open(&disk, dir, (uint64_t)NA_BS_REQ * NA_BS_LAYERS * ctx_ssd * NA_BS_KVH *
                         NA_BS_HD * 4, &wr);
    if (st != NA_OK)
        goto fail;
    rd_fresh = na_bs_disk_read(&disk);
    na_bs_disk_close(&disk);
    if (rd_fresh < 0) {
        st = na_err(NA_ERR_IO, "bench storage: O_DIRECT read of the bandwidth file failed");
        goto fail;
    }

    /* attention over SSD-resident KV; after each step the KV file itself is
     * read whole with O_DIRECT, the limit on the same data path */
    memset(&run, 0, sizeof(run));
    run.dir = dir;
    run.ctx = ctx_ssd;
    run.threads = o.threads;
    run.ssd = 1;
    run.n_heads = NA_BS_HEADS;
    st = na_bs_attn(&run);
    if (st != NA_OK)
        goto fail;
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
    if (run.kv_bytes_step / run.med_s / 1e9 > run.best_rd)
        na_bench_note(b, "NOTE: attention on SSD KV (%.2f GB/s) exceeds the best O_DIRECT read "
                      "measured (%.2f GB/s): on this (virtual) disk that reference is not a "
                      "bound -- the host may cache or the device may serve reads of different "
                      "shapes faster", run.kv_bytes_step / run.med_s / 1e9, run.best_rd);
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
                  "the reads)", (unsigned long long)run.prefetch_hits, 100.0 * run.compute_frac);

    /* attention over DRAM-resident KV, a STREAM copy after each step:
     * GQA 4 with 1 and N engine threads, MHA with 1 thread */
    for (v = 0; v < 3; v++) {
        int t = v == 1 ? o.threads : 1, heads = v == 2 ? NA_BS_KVH : NA_BS_HEADS;
        na_bs_copy_t cp;
        memset(&cp, 0, sizeof(cp));
        cp.threads = t;
        if (v == 1 && o.threads == 1)
            continue;
        memset(&run, 0, sizeof(run));
        run.dir = dir;
        run.ctx = ctx_dram;
        run.threads = t;
        run.ssd = 0;
        run.n_heads = heads;
        run.ref = na_bs_copy;
        run.ref_ctx = &cp;
        st = na_bs_attn(&run);
        if (st != NA_OK)
            goto fail;
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

/* tests/unit/test_attn_engine.c — decode attention of the storage node's
 * CPU engine (storage-node/attn_engine.c) against kernels' "ref" backend,
 * and exactness across tiers, spill intervals and partitions, and bit for
 * bit against the cpu backend's decode (blocks of 16, 7, 64), also for a
 * prompt chunk's rows submitted as one block entry (n_q rows); injected I/O
 * faults, a zeroed region of kv.dat (block checksums) and bad entries fail
 * only the affected request. */
#define _GNU_SOURCE            /* O_DIRECT (kv_fault_io.h) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kernels/kernels.h"
#include "storage-node/slot.h"
#include "tests/testutil.h"
#include "tests/unit/kv_fault_io.h"

#define MAX_SLOTS 4
#define MAX_REQ   4

/* A workload: R requests with prompts of P[r] tokens, then S decode steps
 * over every layer. All rows and queries are drawn up front (f32). */
typedef struct {
    int    n_layers, n_heads, n_kv_heads, head_dim, group;
    int    R, S, P[MAX_REQ];
    int    block_tokens, split_tokens;
    float *K[MAX_REQ], *V[MAX_REQ];   /* (n_layers, P+S, n_kv_heads*head_dim) */
    float *Q[MAX_REQ];                /* (S, n_layers, n_heads*head_dim) */
} work_t;

/* How to run it. */
typedef struct {
    int            n_slots;
    na_partition_t part;
    int            spill_interval;
    uint64_t       dram_bytes, ssd_bytes;
    int            no_dram_tier;
    int            n_threads;
    int            prefetch;
    int            incremental;       /* submit entries one by one */
    na_kv_fault_t    *fault;             /* NULL: plain io_uring */
    int            fault_req;         /* request whose extent gets the fault */
    int            zero;              /* zero fault_req's KV in kv.dat after its prefill */
    int            block;             /* the S steps' queries as one block entry per layer
                                         (a prompt chunk: its S K/V rows appended first,
                                         left unflushed), not S decode steps */
} run_t;

/* Overwrite request id's KV on slot s (dir: its KV directory) in kv.dat with
 * zeros, past the extent's header: what a disk that lost the data returns. */
static void zero_kv(na_slot_t *s, const char *dir, uint64_t id)
{
    char path[700];
    uint64_t off, len;
    void *z;
    int fd;

    na_kv_req_extent(na_kv_find(na_slot_store(s), id), &off, &len);
    snprintf(path, sizeof(path), "%s/kv.dat", dir);
    fd = open(path, O_WRONLY);
    z = calloc(1, (size_t)len);
    NA_CHECK(fd >= 0 && z != NULL && len > 4096);
    if (fd >= 0 && z != NULL && len > 4096) {
        NA_CHECK(pwrite(fd, z, (size_t)len - 4096, (off_t)(off + 4096)) == (ssize_t)len - 4096);
        NA_CHECK(fdatasync(fd) == 0);
    }
    free(z);
    if (fd >= 0)
        close(fd);
}

static char g_dir[512];

static void work_init(work_t *w, uint64_t seed, int n_layers, int n_heads, int n_kv_heads,
                      int head_dim, int R, const int *P, int S, int bt, int split)
{
    na_rng_t rng;
    int r, kvw, qw;

    memset(w, 0, sizeof(*w));
    na_rng_seed(&rng, seed);
    w->n_layers = n_layers;
    w->n_heads = n_heads;
    w->n_kv_heads = n_kv_heads;
    w->head_dim = head_dim;
    w->group = n_heads / n_kv_heads;
    w->R = R;
    w->S = S;
    w->block_tokens = bt;
    w->split_tokens = split;
    kvw = n_kv_heads * head_dim;
    qw = n_heads * head_dim;
    for (r = 0; r < R; r++) {
        size_t nkv = (size_t)n_layers * (P[r] + S) * kvw;
        w->P[r] = P[r];
        w->K[r] = malloc(sizeof(float) * nkv);
        w->V[r] = malloc(sizeof(float) * nkv);
        w->Q[r] = malloc(sizeof(float) * (size_t)S * n_layers * qw);
        na_rng_fill(&rng, w->K[r], nkv, -1.0f, 1.0f);
        na_rng_fill(&rng, w->V[r], nkv, -1.0f, 1.0f);
        na_rng_fill(&rng, w->Q[r], (size_t)S * n_layers * qw, -1.0f, 1.0f);
    }
}

static void work_free(work_t *w)
{
    int r;
    for (r = 0; r < w->R; r++) {
        free(w->K[r]);
        free(w->V[r]);
        free(w->Q[r]);
    }
}

static float *krow(const work_t *w, float *const *A, int r, int l, int pos)
{
    return A[r] + ((size_t)l * (w->P[r] + w->S) + pos) * w->n_kv_heads * w->head_dim;
}

static size_t out_index(const work_t *w, int step, int l, int r)
{
    return (((size_t)step * w->n_layers + l) * w->R + r) * w->n_heads * w->head_dim;
}

/* The slot parameters of w's shape (layers, heads, head_dim, block size). */
static void slot_common(na_slot_common_t *c, const work_t *w)
{
    na_slot_common_default(c);
    c->kv.n_layers = w->n_layers;
    c->n_heads = w->n_heads;
    c->n_kv_heads = w->n_kv_heads;
    c->kv.head_dim = w->head_dim;
    c->kv.block_tokens = w->block_tokens;
}

static size_t out_len(const work_t *w)
{
    return (size_t)w->S * w->n_layers * w->R * w->n_heads * w->head_dim;
}

/* A batch begun on the engine of each of cfg's slots, and the number of
 * entries gathered for it. */
typedef struct {
    na_attn_batch_t *b[MAX_SLOTS];
    int              ns[MAX_SLOTS];
} slot_batches_t;

static void batches_begin(slot_batches_t *sb, const run_t *cfg, na_slot_t **slots)
{
    int i;
    for (i = 0; i < cfg->n_slots; i++) {
        sb->ns[i] = 0;
        NA_CHECK_OK(na_attn_batch_begin(na_slot_engine(slots[i]), &sb->b[i]));
    }
}

/* Each slot's batch: its entries ent[i][0..ns[i]) submitted (unless they
 * were, one by one: submit 0), closed; then each waited for. */
static void batches_run(slot_batches_t *sb, const run_t *cfg, na_slot_t **slots,
                        na_attn_entry_t (*ent)[MAX_REQ], int submit)
{
    int i;
    for (i = 0; i < cfg->n_slots; i++) {
        if (submit)
            NA_CHECK_OK(na_attn_submit(na_slot_engine(slots[i]), sb->b[i], ent[i], sb->ns[i]));
        NA_CHECK_OK(na_attn_batch_close(na_slot_engine(slots[i]), sb->b[i]));
    }
    for (i = 0; i < cfg->n_slots; i++)
        NA_CHECK_OK(na_attn_batch_wait(na_slot_engine(slots[i]), sb->b[i]));
}

/* e: a fresh entry of request 100 + r at layer l over nk KV heads. */
static void entry_init(na_attn_entry_t *e, const work_t *w, int r, int l, int nk)
{
    memset(e, 0, sizeof(*e));
    e->req = 100 + r;
    e->layer = l;
    e->n_kv_heads = nk;
    e->n_q_heads = nk * w->group;
}

/* run_t.block: the S steps of every request as one block of S query rows
 * per layer (what the slot set sends the engine for a prompt chunk): the S
 * K/V rows appended first (as a chunk's, not flushed: they stay in the
 * writeback buffer or DRAM), then one engine entry of n_q = S per request
 * part, row i over the first P + i + 1 tokens. */
static int run_block(const work_t *w, const run_t *cfg, na_slot_t **slots,
                     na_place_part_t (*parts)[NA_PLACE_MAX_SLOTS], const int *n_parts,
                     float *out, na_status_t *sts)
{
    const int hd = w->head_dim, kvw = w->n_kv_heads * hd, qw = w->n_heads * hd;
    na_attn_entry_t ent[MAX_SLOTS][MAX_REQ];
    float *qb[MAX_REQ], *ob[MAX_REQ];
    int i, r, l, p, step;

    for (r = 0; r < w->R; r++) {
        qb[r] = malloc(sizeof(float) * (size_t)w->S * qw);
        ob[r] = malloc(sizeof(float) * (size_t)w->S * qw);
        NA_CHECK(qb[r] != NULL && ob[r] != NULL);
        if (qb[r] == NULL || ob[r] == NULL)
            exit(1);
        for (p = 0; p < n_parts[r]; p++)
            for (l = 0; l < w->n_layers; l++)
                NA_CHECK_OK(na_slot_prefill(slots[parts[r][p].slot], 100 + r, l,
                                            krow(w, w->K, r, l, w->P[r]) + parts[r][p].kvh0 * hd,
                                            krow(w, w->V, r, l, w->P[r]) + parts[r][p].kvh0 * hd,
                                            NA_DTYPE_F32, (size_t)kvw, w->S));
    }
    for (l = 0; l < w->n_layers; l++) {
        slot_batches_t sb;
        batches_begin(&sb, cfg, slots);
        for (r = 0; r < w->R; r++) {
            for (step = 0; step < w->S; step++)
                memcpy(qb[r] + (size_t)step * qw, w->Q[r] + ((size_t)step * w->n_layers + l) * qw,
                       sizeof(float) * (size_t)qw);
            for (p = 0; p < n_parts[r]; p++) {
                int si = parts[r][p].slot, h0 = parts[r][p].kvh0, nk = parts[r][p].n_kvh;
                na_attn_entry_t *e = &ent[si][sb.ns[si]++];
                entry_init(e, w, r, l, nk);
                e->q = qb[r] + (size_t)h0 * w->group * hd;
                e->o = ob[r] + (size_t)h0 * w->group * hd;
                e->n_q = w->S;
                e->q_stride = (size_t)qw;
            }
        }
        batches_run(&sb, cfg, slots, ent, 1);
        for (r = 0; r < w->R; r++)
            for (step = 0; step < w->S; step++)
                sts[((size_t)step * w->n_layers + l) * w->R + r] = NA_OK;
        for (i = 0; i < cfg->n_slots; i++) {
            int k;
            for (k = 0; k < sb.ns[i]; k++) {
                r = (int)ent[i][k].req - 100;
                if (ent[i][k].status != NA_OK) {
                    fprintf(stderr, "  block entry req %d layer %d: %s\n", r, l,
                            ent[i][k].reason);
                    for (step = 0; step < w->S; step++)
                        sts[((size_t)step * w->n_layers + l) * w->R + r] = ent[i][k].status;
                }
            }
            (void)na_slot_poll(slots[i]);
        }
        for (r = 0; r < w->R; r++)
            for (step = 0; step < w->S; step++)
                memcpy(out + out_index(w, step, l, r), ob[r] + (size_t)step * qw,
                       sizeof(float) * (size_t)qw);
    }
    for (r = 0; r < w->R; r++) {
        free(qb[r]);
        free(ob[r]);
    }
    return 0;
}

/* Run the workload; outputs (S, n_layers, R, n_heads*head_dim) into out
 * (zeroed first), statuses (S, n_layers, R) into sts. Returns 0, or -1 if
 * setup failed (message printed) and 77 if O_DIRECT is refused here. */
static int run(const work_t *w, const run_t *cfg, float *out, na_status_t *sts,
               na_slot_stats_t *stats_out)
{
    na_slot_common_t c;
    na_slot_t *slots[MAX_SLOTS] = { 0 };
    na_place_t place;
    na_place_part_t parts[MAX_REQ][NA_PLACE_MAX_SLOTS];
    int n_parts[MAX_REQ] = { 0 }, opened[MAX_REQ] = { 0 };
    int i, r, l, p, step, rc = 0;
    const int hd = w->head_dim, kvw = w->n_kv_heads * hd;
    na_attn_entry_t ent[MAX_SLOTS][MAX_REQ];

    memset(out, 0, out_len(w) * sizeof(float));
    slot_common(&c, w);
    c.split_tokens = w->split_tokens;
    c.kv.spill_interval = cfg->spill_interval;
    c.prefetch_layers = cfg->prefetch;
    c.n_threads = cfg->n_threads;
    c.kv.io_depth = 8;
    c.stage_chunks = 4;
    c.kv.no_dram_tier = cfg->no_dram_tier;
    if (cfg->fault) {
        c.kv.io_factory = na_kv_fault_factory;
        c.kv.io_arg = cfg->fault;
    }
    for (i = 0; i < cfg->n_slots; i++) {
        char d[600];
        na_slot_dev_t dev = { .dir = d, .engine = "cpu", .dram_bytes = cfg->dram_bytes,
                              .ssd_bytes = cfg->ssd_bytes };
        na_status_t st;
        snprintf(d, sizeof(d), "%s/s%d", g_dir, i);
        (void)mkdir(d, 0700);
        st = na_slot_create(&c, &dev, &slots[i]);
        if (st != NA_OK) {
            fprintf(stderr, "slot create: %s\n", na_errmsg());
            rc = st == NA_ERR_UNSUPPORTED ? 77 : -1;
            goto out;
        }
    }
    if (na_place_init(&place, cfg->part, cfg->n_slots, w->n_kv_heads, NULL) != NA_OK)
        return -1;
    /* open + prefill */
    for (r = 0; r < w->R; r++) {
        int max_tok = w->P[r] + w->S;
        NA_CHECK_OK(na_place_request(&place, (uint64_t)max_tok, parts[r], &n_parts[r]));
        for (p = 0; p < n_parts[r]; p++) {
            na_slot_t *s = slots[parts[r][p].slot];
            na_status_t st = na_slot_open(s, 100 + r, max_tok, parts[r][p].n_kvh);
            if (st != NA_OK) {
                fprintf(stderr, "open %d: %s\n", r, na_errmsg());
                rc = -1;
                goto out;
            }
            for (l = 0; l < w->n_layers; l++)
                NA_CHECK_OK(na_slot_prefill(s, 100 + r, l,
                                            krow(w, w->K, r, l, 0) + parts[r][p].kvh0 * hd,
                                            krow(w, w->V, r, l, 0) + parts[r][p].kvh0 * hd,
                                            NA_DTYPE_F32, (size_t)kvw, w->P[r]));
            NA_CHECK_OK(na_slot_prefill_done(s, 100 + r));
        }
        opened[r] = 1;
        for (p = 0; cfg->zero && r == cfg->fault_req && p < n_parts[r]; p++) {
            char d[600];
            snprintf(d, sizeof(d), "%s/s%d", g_dir, parts[r][p].slot);
            zero_kv(slots[parts[r][p].slot], d, 100 + r);
        }
        if (cfg->fault && r == cfg->fault_req) {
            uint64_t off, len;
            na_kv_req_extent(na_kv_find(na_slot_store(slots[parts[r][0].slot]), 100 + r),
                             &off, &len);
            cfg->fault->lo = off;
            cfg->fault->hi = off + len;
        }
    }
    if (cfg->block) {
        rc = run_block(w, cfg, slots, parts, n_parts, out, sts);
        goto out;
    }
    /* decode */
    for (step = 0; step < w->S; step++) {
        for (l = 0; l < w->n_layers; l++) {
            slot_batches_t sb;
            batches_begin(&sb, cfg, slots);
            for (r = 0; r < w->R; r++) {
                for (p = 0; p < n_parts[r]; p++) {
                    int si = parts[r][p].slot, h0 = parts[r][p].kvh0, nk = parts[r][p].n_kvh;
                    na_attn_entry_t *e = &ent[si][sb.ns[si]];
                    entry_init(e, w, r, l, nk);
                    e->q = w->Q[r] + ((size_t)step * w->n_layers + l) * w->n_heads * hd +
                           (size_t)h0 * w->group * hd;
                    e->k_new = krow(w, w->K, r, l, w->P[r] + step) + h0 * hd;
                    e->v_new = krow(w, w->V, r, l, w->P[r] + step) + h0 * hd;
                    e->o = out + out_index(w, step, l, r) + (size_t)h0 * w->group * hd;
                    if (cfg->incremental)
                        NA_CHECK_OK(na_attn_submit(na_slot_engine(slots[si]), sb.b[si], e, 1));
                    sb.ns[si]++;
                }
            }
            batches_run(&sb, cfg, slots, ent, !cfg->incremental);
            for (r = 0; r < w->R; r++)
                sts[((size_t)step * w->n_layers + l) * w->R + r] = NA_OK;
            for (i = 0; i < cfg->n_slots; i++) {
                int k;
                for (k = 0; k < sb.ns[i]; k++) {
                    size_t si = ((size_t)step * w->n_layers + l) * w->R + (ent[i][k].req - 100);
                    if (ent[i][k].status != NA_OK) {
                        sts[si] = ent[i][k].status;
                        if (step == 0 || cfg->fault == NULL)
                            fprintf(stderr, "  entry req %llu layer %d step %d: %s\n",
                                    (unsigned long long)ent[i][k].req, l, step, ent[i][k].reason);
                    }
                }
                (void)na_slot_poll(slots[i]);
            }
        }
    }
    if (stats_out)
        na_slot_stats_sum(slots, cfg->n_slots, stats_out);
out:
    for (r = 0; r < w->R; r++)
        for (p = 0; opened[r] && p < n_parts[r]; p++)
            NA_CHECK_OK(na_slot_release(slots[parts[r][p].slot], 100 + r));
    for (i = 0; i < cfg->n_slots; i++)
        na_slot_destroy(slots[i]);
    return rc;
}

/* Request r's keys and values of layer l, every position up to P[r] + S, as
 * contiguous f16 rows into kc and vc. */
static void kv_f16(const work_t *w, int r, int l, uint16_t *kc, uint16_t *vc)
{
    const int kvw = w->n_kv_heads * w->head_dim;
    int t, i;

    for (t = 0; t < w->P[r] + w->S; t++)
        for (i = 0; i < kvw; i++) {
            kc[(size_t)t * kvw + i] = na_f32_to_f16(krow(w, w->K, r, l, t)[i]);
            vc[(size_t)t * kvw + i] = na_f32_to_f16(krow(w, w->V, r, l, t)[i]);
        }
}

/* One request's contiguous f16 KV (room for the longest) and one output row. */
typedef struct {
    uint16_t *kc, *vc;
    float    *o;
} kvbuf_t;

static void kvbuf_init(kvbuf_t *b, const work_t *w)
{
    size_t ctx_max = 0, kvw = (size_t)w->n_kv_heads * w->head_dim;
    int r;

    for (r = 0; r < w->R; r++)
        ctx_max = (size_t)(w->P[r] + w->S) > ctx_max ? (size_t)(w->P[r] + w->S) : ctx_max;
    b->kc = malloc(sizeof(uint16_t) * ctx_max * kvw);
    b->vc = malloc(sizeof(uint16_t) * ctx_max * kvw);
    b->o = malloc(sizeof(float) * (size_t)w->n_heads * w->head_dim);
}

static void kvbuf_free(kvbuf_t *b)
{
    free(b->kc);
    free(b->vc);
    free(b->o);
}

/* Compare every OK output with kernels' ref attn_decode over the same f16
 * KV laid out contiguously. Returns the worst close ratio. */
static double ref_check(const work_t *w, const float *out, const na_status_t *sts, int only_r)
{
    na_kernels_t *ref;
    const int hd = w->head_dim, qw = w->n_heads * hd;
    kvbuf_t b;
    double worst = 0.0;
    int step, l, r;

    if (na_kernels_create("ref", 1, &ref) != NA_OK) {
        fprintf(stderr, "ref backend: %s\n", na_errmsg());
        return 1e9;
    }
    kvbuf_init(&b, w);
    for (r = 0; r < w->R; r++) {
        if (only_r >= 0 && r != only_r)
            continue;
        for (l = 0; l < w->n_layers; l++) {
            kv_f16(w, r, l, b.kc, b.vc);
            for (step = 0; step < w->S; step++) {
                double cr;
                if (sts[((size_t)step * w->n_layers + l) * w->R + r] != NA_OK)
                    continue;
                na_kernels_attn_decode_host(ref, b.o,
                                            w->Q[r] + ((size_t)step * w->n_layers + l) * qw,
                                            b.kc, b.vc, NA_DTYPE_F16, w->P[r] + step + 1,
                                            w->n_heads, w->n_kv_heads, hd);
                cr = na_close_ratio(out + out_index(w, step, l, r), b.o, (size_t)qw, 1e-4, 1e-3);
                if (cr > worst)
                    worst = cr;
            }
        }
    }
    kvbuf_free(&b);
    na_kernels_destroy(ref);
    return worst;
}

/* Compare every OK output with the cpu backend's attn_decode (1 thread)
 * over the same f16 KV laid out contiguously, bit for bit: the engine folds
 * in the canonical order (storage-node/attn_fold.h) whatever its blocks,
 * tiers, threads or granules. Returns the number of differing outputs. */
static int cpu_exact_check(const work_t *w, const float *out, const na_status_t *sts,
                           const char *what)
{
    na_kernels_t *cpu;
    const int hd = w->head_dim, qw = w->n_heads * hd;
    kvbuf_t b;
    int step, l, r, i, bad = 0;

    if (na_kernels_create("cpu", 1, &cpu) != NA_OK) {
        fprintf(stderr, "cpu backend: %s\n", na_errmsg());
        return 1;
    }
    kvbuf_init(&b, w);
    for (r = 0; r < w->R; r++) {
        for (l = 0; l < w->n_layers; l++) {
            kv_f16(w, r, l, b.kc, b.vc);
            for (step = 0; step < w->S; step++) {
                const float *e = out + out_index(w, step, l, r);
                NA_CHECK(sts[((size_t)step * w->n_layers + l) * w->R + r] == NA_OK);
                NA_CHECK_OK(na_kernels_attn_decode_host(
                    cpu, b.o, w->Q[r] + ((size_t)step * w->n_layers + l) * qw, b.kc, b.vc,
                    NA_DTYPE_F16, w->P[r] + step + 1, w->n_heads, w->n_kv_heads, hd));
                if (memcmp(b.o, e, sizeof(float) * (size_t)qw) != 0 && bad++ < 3) {
                    for (i = 0; i < qw && memcmp(b.o + i, e + i, sizeof(float)) == 0; i++)
                        ;
                    NA_CHECK_MSG(0, "%s: request %d layer %d ctx %d: engine %.9g != cpu decode "
                                 "%.9g at element %d", what, r, l, w->P[r] + step + 1, e[i], b.o[i],
                                 i);
                }
            }
        }
    }
    kvbuf_free(&b);
    na_kernels_destroy(cpu);
    return bad;
}

static run_t run_default(void)
{
    run_t c;
    memset(&c, 0, sizeof(c));
    c.n_slots = 1;
    c.part = NA_PART_REQUEST;
    c.spill_interval = 2;
    c.dram_bytes = 256u << 20;
    c.ssd_bytes = 0;
    c.n_threads = 1;
    c.prefetch = 1;
    return c;
}

/* 1. random shapes against the reference: GQA 1, 2, 4, 8; head_dim 64, 128. */
static int test_shapes(void)
{
    static const int groups[] = { 1, 2, 4, 8 }, hds[] = { 64, 128 };
    int gi, hi, rc;

    for (gi = 0; gi < 4; gi++) {
        for (hi = 0; hi < 2; hi++) {
            const int P[3] = { 37 + gi, 130 - hi * 3, 1 };
            work_t w;
            run_t c = run_default();
            float *out;
            na_status_t *sts;
            double cr;

            work_init(&w, 1000 + gi * 10 + hi, 2, 2 * groups[gi], 2, hds[hi], 3, P, 3, 16, 48);
            out = calloc(out_len(&w), sizeof(float));
            sts = calloc((size_t)w.S * w.n_layers * w.R, sizeof(*sts));
            c.incremental = gi & 1;
            c.n_threads = 1 + hi;
            if (gi == 2) {                       /* one shape on the SSD tier */
                c.ssd_bytes = 16u << 20;
                c.no_dram_tier = 1;
            }
            rc = run(&w, &c, out, sts, NULL);
            if (rc != 0) {
                work_free(&w);
                free(out);
                free(sts);
                return rc;
            }
            cr = ref_check(&w, out, sts, -1);
            NA_CHECK_MSG(cr <= 1.0, "group %d head_dim %d: close ratio %.3g", groups[gi], hds[hi], cr);
            work_free(&w);
            free(out);
            free(sts);
        }
    }
    return 0;
}

static int same(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* 2. tiers, spill intervals, partitions, prefetch, threads: identical outputs. */
static int test_exactness(void)
{
    const int P[3] = { 37, 130, 5 };
    work_t w;
    run_t c;
    float *base, *out;
    na_status_t *sts;
    na_slot_stats_t st;
    size_t n;
    int rc, si;
    double cr;

    work_init(&w, 77, 2, 8, 4, 64, 3, P, 9, 16, 32);
    n = out_len(&w);
    base = calloc(n, sizeof(float));
    out = calloc(n, sizeof(float));
    sts = calloc((size_t)w.S * w.n_layers * w.R, sizeof(*sts));

    c = run_default();                               /* all DRAM (with an SSD behind) */
    c.ssd_bytes = 16u << 20;
    c.spill_interval = 1;
    rc = run(&w, &c, base, sts, &st);
    if (rc != 0)
        goto out;
    cr = ref_check(&w, base, sts, -1);
    NA_CHECK_MSG(cr <= 1.0, "all-DRAM vs ref: close ratio %.3g", cr);
    NA_CHECK(st.attn.granules_ssd == 0);
    NA_CHECK(st.kv.bytes_spilled_dram > 0);

    c.no_dram_tier = 1;                              /* all SSD */
    for (si = 1; si <= 8; si++) {
        c.spill_interval = si;
        rc = run(&w, &c, out, sts, &st);
        if (rc != 0)
            goto out;
        NA_CHECK_MSG(same(base, out, n), "all-SSD spill_interval %d differs from all-DRAM", si);
        NA_CHECK(st.attn.granules_ssd > 0);
        NA_CHECK(st.kv.bytes_spilled_dram == 0);
        NA_CHECK(st.kv.bytes_read_ssd > 0);
        NA_CHECK_MSG(st.attn.prefetch_hits > 0, "layer-ahead prefetch never used");
    }

    c.no_dram_tier = 0;                              /* mixed: DRAM budget runs out */
    c.dram_bytes = 3 * 2 * 2 * 16384 + 12 * 16384;   /* buffers + 12 blocks */
    for (si = 1; si <= 8; si += 3) {
        c.spill_interval = si;
        rc = run(&w, &c, out, sts, &st);
        if (rc != 0)
            goto out;
        NA_CHECK_MSG(same(base, out, n), "mixed spill_interval %d differs", si);
        NA_CHECK_MSG(st.kv.bytes_spilled_dram > 0 && st.attn.granules_ssd > 0,
                     "mixed: dram %llu bytes, ssd granules %llu",
                     (unsigned long long)st.kv.bytes_spilled_dram,
                     (unsigned long long)st.attn.granules_ssd);
    }

    c = run_default();                               /* head partition, 2 and 3 slots */
    c.ssd_bytes = 16u << 20;
    c.no_dram_tier = 1;
    c.part = NA_PART_HEAD;
    for (si = 2; si <= 3; si++) {
        c.n_slots = si;
        rc = run(&w, &c, out, sts, NULL);
        if (rc != 0)
            goto out;
        NA_CHECK_MSG(same(base, out, n), "head partition over %d slots differs", si);
    }
    c.part = NA_PART_REQUEST;                        /* request partition over 3 slots */
    c.n_slots = 3;
    c.prefetch = 0;
    c.n_threads = 2;
    c.incremental = 1;
    rc = run(&w, &c, out, sts, &st);
    if (rc != 0)
        goto out;
    NA_CHECK_MSG(same(base, out, n), "request partition / no prefetch / 2 threads differs");
    NA_CHECK(st.attn.prefetch_hits == 0);
out:
    work_free(&w);
    free(base);
    free(out);
    free(sts);
    return rc;
}

/* Run c over w, check every output is the cpu decode's bits
 * (cpu_exact_check; what names the case, subject what is checked), then free
 * w. 0, or run's failure. */
static int exact_case(work_t *w, const run_t *c, const char *what, const char *subject)
{
    float *out = calloc(out_len(w), sizeof(float));
    na_status_t *sts = calloc((size_t)w->S * w->n_layers * w->R, sizeof(*sts));
    int rc = run(w, c, out, sts, NULL);

    if (rc == 0)
        NA_CHECK_MSG(cpu_exact_check(w, out, sts, what) == 0,
                     "%s: %s is not the cpu decode bit for bit", what, subject);
    work_free(w);
    free(out);
    free(sts);
    return rc;
}

/* 2b. the engine's outputs are the compute node's decode attention bit for
 * bit (issue 22 item 15): blocks of 16, 7 (cutting chunks and parts) and 64
 * tokens, contexts across the chunk (64) and part (1024) boundaries, all
 * DRAM and all SSD (staging chunks, prefetch), 1 and 2 workers, granules of
 * one part and of two (split_tokens 2048).
 * With block: a prompt chunk's rows as one block entry (n_q rows, each with
 * its own causal limit): every row the cpu decode's bits at its context, on
 * DRAM, on the SSD tier (blocks read into staging chunks) with the chunk's
 * rows still in the writeback buffer, with 1 and 3 workers (rows split into
 * ranges) and over two slots (head partition). */
static int test_exact(int block)
{
    static const int bts[] = { 16, 7, 64 };
    const int P[3] = { block ? 1000 : 1030, 62, 1 };
    int bi, v, rc = 0;

    for (bi = 0; bi < 3 && rc == 0; bi++)
        for (v = 0; v < (block ? 4 : 3) && rc == 0; v++) {
            work_t w;
            run_t c = run_default();
            char what[128];

            work_init(&w, (block ? 5151 : 4242) + bi, 2, 8, 2, 64, 3, P, block ? 70 : 4,
                      bts[bi], v == 2 ? 2048 : 1024);
            c.block = block;
            c.ssd_bytes = 16u << 20;
            if (v == 1 || v == 2) {          /* all SSD, 2 workers (block: 3) */
                c.no_dram_tier = 1;
                c.n_threads = block ? 3 : 2;
            }
            if (v == 3) {                    /* block: DRAM, 3 workers, 2 slots by head */
                c.n_threads = 3;
                c.n_slots = 2;
                c.part = NA_PART_HEAD;
            }
            if (block)
                snprintf(what, sizeof(what), "blocks of %d, a block of %d rows, %s, split %d, "
                         "%d worker(s), %d slot(s)", bts[bi], w.S, c.no_dram_tier ? "SSD" :
                         "DRAM", w.split_tokens, c.n_threads, c.n_slots);
            else
                snprintf(what, sizeof(what), "blocks of %d, %s, split %d", bts[bi],
                         v == 0 ? "DRAM" : "SSD", w.split_tokens);
            rc = exact_case(&w, &c, what, block ? "the block" : "the engine");
        }
    return rc;
}

/* A fault case: the work (seed; 3 requests of contexts 70, 90, 33 and 3
 * steps, 2 layers, 4 heads on 2 KV heads of 64), a run's outputs and
 * statuses, and those of a reference run (base, sts0). */
typedef struct {
    work_t       w;
    float       *base, *out;
    na_status_t *sts, *sts0;
} fcase_t;

static void fcase_init(fcase_t *fc, uint64_t seed)
{
    static const int P[3] = { 70, 90, 33 };
    size_t n, ns;

    work_init(&fc->w, seed, 2, 4, 2, 64, 3, P, 3, 16, 32);
    n = out_len(&fc->w);
    ns = (size_t)fc->w.S * fc->w.n_layers * fc->w.R;
    fc->base = calloc(n, sizeof(float));
    fc->out = calloc(n, sizeof(float));
    fc->sts = calloc(ns, sizeof(*fc->sts));
    fc->sts0 = calloc(ns, sizeof(*fc->sts0));
}

static void fcase_free(fcase_t *fc)
{
    work_free(&fc->w);
    free(fc->base);
    free(fc->out);
    free(fc->sts);
    free(fc->sts0);
}

/* The fault cases' slot: the KV all on SSD (16 MiB, no DRAM tier). */
static run_t run_ssd_only(void)
{
    run_t c = run_default();
    c.ssd_bytes = 16u << 20;
    c.no_dram_tier = 1;
    return c;
}

/* Request bad_r failed at every step and layer (with want; with any error
 * when want is NA_OK); every other request NA_OK at every step and layer
 * with the outputs of base (the run without the fault). "<what> <arg>"
 * names the case. */
static void check_fault(const fcase_t *fc, int bad_r, na_status_t want, const char *what,
                        int arg)
{
    const work_t *w = &fc->w;
    int step, l, r;

    for (step = 0; step < w->S; step++)
        for (l = 0; l < w->n_layers; l++)
            for (r = 0; r < w->R; r++) {
                size_t i = out_index(w, step, l, r);
                na_status_t st = fc->sts[((size_t)step * w->n_layers + l) * w->R + r];
                if (r == bad_r) {
                    NA_CHECK_MSG(want == NA_OK ? st != NA_OK : st == want,
                                 "%s %d step %d layer %d: the faulted request got %s", what,
                                 arg, step, l, na_status_string(st));
                    continue;
                }
                NA_CHECK_MSG(st == NA_OK, "%s %d: request %d failed", what, arg, r);
                NA_CHECK(same(fc->base + i, fc->out + i, (size_t)w->n_heads * w->head_dim));
            }
}

/* 3. an injected read error or short read fails only that request. */
static int test_faults(void)
{
    fcase_t fc;
    run_t c = run_ssd_only();
    na_kv_fault_t f;
    int rc, mode;

    fcase_init(&fc, 4242);
    rc = run(&fc.w, &c, fc.base, fc.sts0, NULL);
    for (mode = NA_FAULT_ERROR; mode <= NA_FAULT_SHORT && rc == 0; mode++) {
        memset(&f, 0, sizeof(f));
        f.mode = mode;
        f.on_reads = 1;
        f.lo = f.hi = 0;
        c.fault = &f;
        c.fault_req = 1;
        rc = run(&fc.w, &c, fc.out, fc.sts, NULL);
        if (rc != 0)
            break;
        NA_CHECK(f.hits > 0);
        check_fault(&fc, 1, NA_OK, "mode", mode);
    }
    fcase_free(&fc);
    return rc;
}

/* 3b. a zeroed region of kv.dat (the disk lost the data) fails that request
 * with the checksum's reason at its first read (all SSD; with and without
 * prefetch); the others give the same outputs. */
static int test_corrupt(void)
{
    fcase_t fc;
    int rc = 0, pf;

    fcase_init(&fc, 4343);
    for (pf = 0; pf < 2 && rc == 0; pf++) {
        run_t c = run_ssd_only();
        c.prefetch = pf;
        rc = run(&fc.w, &c, fc.base, fc.sts, NULL);
        if (rc != 0)
            break;
        c.zero = 1;
        c.fault_req = 1;
        rc = run(&fc.w, &c, fc.out, fc.sts, NULL);
        if (rc == 0)
            check_fault(&fc, 1, NA_ERR_IO, "prefetch", pf);
    }
    fcase_free(&fc);
    return rc;
}

/* 4. bad entries fail alone; the store stays consistent. */
static int test_bad_input(void)
{
    const int P[1] = { 20 };
    work_t w;
    na_slot_common_t c;
    na_slot_dev_t dev = { 0 };
    na_slot_t *s;
    na_attn_entry_t e[7];
    float o[7][4 * 64];
    na_status_t st, sts[1];
    float outs_keep[4 * 64];
    char d[600];
    int i, l;
    double cr;

    work_init(&w, 9, 2, 4, 2, 64, 1, P, 1, 16, 32);
    slot_common(&c, &w);
    snprintf(d, sizeof(d), "%s/bad", g_dir);
    (void)mkdir(d, 0700);
    dev.dir = d;
    dev.engine = "cpu";
    dev.dram_bytes = 64u << 20;
    dev.ssd_bytes = 8u << 20;
    st = na_slot_create(&c, &dev, &s);
    if (st != NA_OK) {
        fprintf(stderr, "slot: %s\n", na_errmsg());
        work_free(&w);
        return st == NA_ERR_UNSUPPORTED ? 77 : -1;
    }
    NA_CHECK(na_slot_open(s, 100, 21, 3) == NA_ERR_RANGE);        /* 3 > 2 KV heads */
    NA_CHECK_OK(na_slot_open(s, 100, 21, 2));
    NA_CHECK(na_slot_open(s, 100, 21, 2) == NA_ERR_BUSY);
    for (l = 0; l < 2; l++)
        NA_CHECK_OK(na_slot_prefill(s, 100, l, krow(&w, w.K, 0, l, 0), krow(&w, w.V, 0, l, 0),
                                    NA_DTYPE_F32, 0, 20));
    NA_CHECK(na_slot_prefill(s, 100, 5, krow(&w, w.K, 0, 0, 0), krow(&w, w.V, 0, 0, 0),
                             NA_DTYPE_F32, 0, 1) == NA_ERR_RANGE);
    NA_CHECK(na_slot_prefill(s, 101, 0, krow(&w, w.K, 0, 0, 0), krow(&w, w.V, 0, 0, 0),
                             NA_DTYPE_F32, 0, 1) == NA_ERR_NOT_FOUND);
    NA_CHECK(na_slot_prefill(s, 100, 0, krow(&w, w.K, 0, 0, 0), krow(&w, w.V, 0, 0, 0),
                             NA_DTYPE_F32, 0, 5) == NA_ERR_RANGE);   /* past max_tokens */

    for (i = 0; i < 7; i++) {
        memset(&e[i], 0, sizeof(e[i]));
        e[i].req = 100;
        e[i].layer = 0;
        e[i].n_kv_heads = 2;
        e[i].n_q_heads = 4;
        e[i].q = w.Q[0];
        e[i].k_new = krow(&w, w.K, 0, 0, 20);
        e[i].v_new = krow(&w, w.V, 0, 0, 20);
        e[i].o = o[i];
    }
    e[0].req = 999;                       /* unknown request */
    e[1].layer = 7;                       /* unknown layer */
    e[2].n_kv_heads = 1;                  /* shapes disagree */
    e[3].n_q_heads = 8;
    e[4].q = NULL;                        /* missing q */
    /* e[5] valid; e[6] the same (request, layer) again -> busy */
    NA_CHECK_OK(na_slot_decode(s, e, 7));
    NA_CHECK(e[0].status == NA_ERR_NOT_FOUND);
    NA_CHECK(e[1].status == NA_ERR_RANGE);
    NA_CHECK(e[2].status == NA_ERR_INVALID);
    NA_CHECK(e[3].status == NA_ERR_INVALID);
    NA_CHECK(e[4].status == NA_ERR_INVALID);
    NA_CHECK_MSG(e[5].status == NA_OK, "%s", e[5].reason);
    NA_CHECK(e[6].status == NA_ERR_BUSY);
    for (i = 0; i < 7; i++)
        NA_CHECK(i == 5 || e[i].reason[0] != '\0');
    NA_CHECK(na_kv_req_tokens(na_kv_find(na_slot_store(s), 100), 0) == 21);
    NA_CHECK(na_kv_req_tokens(na_kv_find(na_slot_store(s), 100), 1) == 20);
    /* the valid entry is right: compare with ref over the 21 rows */
    {
        float outs[2][4 * 64];
        na_status_t ok[2] = { NA_OK, NA_ERR_INVALID };
        memcpy(outs[0], o[5], sizeof(outs[0]));
        memcpy(outs_keep, o[5], sizeof(outs_keep));
        sts[0] = NA_OK;
        (void)sts;
        cr = ref_check(&w, outs[0], ok, 0);
        NA_CHECK_MSG(cr <= 1.0, "valid entry among bad ones: ratio %.3g", cr);
    }
    /* streaming: the first entry completes before the batch is closed */
    {
        na_attn_engine_t *eng = na_slot_engine(s);
        na_attn_batch_t *bt;
        na_attn_stats_t as0, as1;
        int waited = 0;
        e[5].k_new = NULL;                  /* attend again, no append */
        e[5].v_new = NULL;
        e[2].n_kv_heads = 2;
        e[2].layer = 1;
        e[2].k_new = NULL;
        e[2].v_new = NULL;
        na_attn_engine_stats(eng, &as0);
        NA_CHECK_OK(na_attn_batch_begin(eng, &bt));
        NA_CHECK_OK(na_attn_submit(eng, bt, &e[5], 1));
        do {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
            na_attn_engine_stats(eng, &as1);
        } while (as1.entries == as0.entries && ++waited < 10000);
        NA_CHECK_MSG(as1.entries == as0.entries + 1, "first entry not computed before close");
        NA_CHECK_OK(na_attn_submit(eng, bt, &e[2], 1));
        NA_CHECK_OK(na_attn_batch_close(eng, bt));
        NA_CHECK_OK(na_attn_batch_wait(eng, bt));
        NA_CHECK(e[5].status == NA_OK && e[2].status == NA_OK);
        NA_CHECK(memcmp(e[5].o, outs_keep, sizeof(outs_keep)) == 0);  /* same context, same o */
    }
    /* the last entries with the close (na_attn_submit_close): a small entry
     * is computed on the calling thread, no worker woken, so it is done when
     * the call returns */
    {
        na_attn_engine_t *eng = na_slot_engine(s);
        na_attn_batch_t *bt;
        na_attn_stats_t as0, as1;
        na_attn_engine_stats(eng, &as0);
        NA_CHECK_OK(na_attn_batch_begin(eng, &bt));
        NA_CHECK_OK(na_attn_submit_close(eng, bt, &e[5], 1));
        na_attn_engine_stats(eng, &as1);
        NA_CHECK_MSG(as1.entries == as0.entries + 1 && as1.helped == as0.helped + 1,
                     "submit_close: %llu entries, %llu helped (want %llu, %llu)",
                     (unsigned long long)as1.entries, (unsigned long long)as1.helped,
                     (unsigned long long)as0.entries + 1, (unsigned long long)as0.helped + 1);
        NA_CHECK_OK(na_attn_batch_wait(eng, bt));
        NA_CHECK(e[5].status == NA_OK);
        NA_CHECK(memcmp(e[5].o, outs_keep, sizeof(outs_keep)) == 0);
    }
    /* a further append past max_tokens fails that entry only */
    e[5].k_new = krow(&w, w.K, 0, 0, 20);
    e[5].v_new = krow(&w, w.V, 0, 0, 20);
    NA_CHECK_OK(na_slot_decode(s, &e[5], 1));
    NA_CHECK(e[5].status == NA_ERR_RANGE);
    NA_CHECK(na_slot_release(s, 999) == NA_ERR_NOT_FOUND);
    NA_CHECK_OK(na_slot_release(s, 100));
    NA_CHECK_OK(na_slot_open(s, 100, 21, 2));      /* extent reused */
    NA_CHECK_OK(na_slot_release(s, 100));
    na_slot_destroy(s);
    work_free(&w);
    return 0;
}

int main(void)
{
    int rc;

    if (na_kv_test_dir(g_dir, sizeof(g_dir)) != 0)
        NA_SKIP("no temporary directory on a file system that takes O_DIRECT");
    rc = test_shapes();
    if (rc == 0)
        rc = test_exactness();
    if (rc == 0)
        rc = test_exact(0);
    if (rc == 0)
        rc = test_exact(1);
    if (rc == 0)
        rc = test_faults();
    if (rc == 0)
        rc = test_corrupt();
    if (rc == 0)
        rc = test_bad_input();
    na_test_rmtree(g_dir);
    if (rc == 77)
        NA_SKIP("the file system of %s refuses O_DIRECT", g_dir);
    if (rc != 0)
        return 1;
    return na_test_finish();
}

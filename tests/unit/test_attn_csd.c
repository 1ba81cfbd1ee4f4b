/* tests/unit/test_attn_csd.c — the csd attention engine (storage-node/
 * attn_csd.c) through real XRT calls under XCL_EMULATION_MODE=noop (the
 * shim root of the build tree, the metadata xclbin of `csd-xclbin`), the C
 * kernel as the FPGA's stand-in:
 *   match   a cpu slot and a csd slot fed the same prompt and decode rows
 *           give the same o (2e-5 abs + 1e-4 rel) for GQA 1/2/4/8 and
 *           head_dim 64/128, KV in DRAM or forced to the SSD (pread O_DIRECT
 *           into the mapped P2P buffer, bounced when the noop map is not
 *           aligned), several requests per batch, a device buffer so small
 *           that a batch takes several launches; stats say noop
 *   errors  a missing xclbin, a malformed one, a wrong device index,
 *           XILINX_XRT unset, a context larger than the device buffer: the
 *           slot is created, every entry fails with a reason naming it
 *   faults  NA_FAULTS csd (test doubles): a corrupted page (checksum), a
 *           bad descriptor, a run that never completes, a lost device: the
 *           affected entries fail with the reason, the others are computed
 *   zeroed  a request's KV zeroed in kv.dat (KV forced to the SSD): its
 *           entry fails with the block checksum's reason, the others are
 *           computed
 * Exit 77 when XRT is not built. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/status.h"
#include "storage-node/slot.h"
#include "tests/testutil.h"
#if NA_HAVE_XRT
#include "storage-node/csd_xclbin.h"

static char g_dir[512], g_xclbin[600];

typedef struct {
    int    n_kvh, group, hd, n_layers;
    int    bt;
    int    tier_ssd;          /* KV forced to the SSD */
    size_t csd_bytes;
    const char *device, *xclbin;
} csd_setup_t;

static void common_of(na_slot_common_t *c, const csd_setup_t *s)
{
    na_slot_common_default(c);
    c->kv.n_layers = s->n_layers;
    c->n_heads = s->n_kvh * s->group;
    c->n_kv_heads = s->n_kvh;
    c->kv.head_dim = s->hd;
    c->kv.block_tokens = s->bt;
    c->kv.spill_interval = 1;
    c->kv.no_dram_tier = s->tier_ssd;
    c->kv.io_depth = 8;
    c->stage_chunks = 4;
    c->kv.allow_buffered = 1;
}

static na_status_t make_slot(const csd_setup_t *s, const char *engine, const char *name,
                             na_slot_t **slot_p)
{
    na_slot_common_t c;
    na_slot_dev_t dev;
    char d[700];

    common_of(&c, s);
    snprintf(d, sizeof(d), "%s/%s", g_dir, name);
    (void)mkdir(d, 0700);
    memset(&dev, 0, sizeof(dev));
    dev.dir = d;
    dev.engine = engine;
    dev.dram_bytes = 64u << 20;
    dev.ssd_bytes = 32u << 20;
    dev.csd_device = s->device;
    dev.csd_xclbin = s->xclbin;
    dev.csd_bytes = s->csd_bytes;
    dev.csd_timeout_ms = 2000;
    return na_slot_create(&c, &dev, slot_p);
}

/* Feed both slots n_req requests (prompt P tokens, then steps decode steps)
 * and compare every decode output. Returns the worst close ratio. */
static double run_pair(const csd_setup_t *s, int n_req, int P, int steps, uint64_t seed,
                       na_slot_t *cpu, na_slot_t *csd)
{
    const int nq = s->n_kvh * s->group * s->hd, nk = s->n_kvh * s->hd;
    float *kp = malloc(sizeof(float) * (size_t)P * nk), *vp = malloc(sizeof(float) * (size_t)P * nk);
    float *q = malloc(sizeof(float) * (size_t)n_req * nq);
    float *kn = malloc(sizeof(float) * (size_t)n_req * nk), *vn = malloc(sizeof(float) * (size_t)n_req * nk);
    float *o1 = malloc(sizeof(float) * (size_t)n_req * nq), *o2 = malloc(sizeof(float) * (size_t)n_req * nq);
    na_attn_entry_t *e1 = calloc((size_t)n_req, sizeof(*e1)), *e2 = calloc((size_t)n_req, sizeof(*e2));
    na_rng_t rng;
    double worst = 0;
    int r, l, t;

    na_rng_seed(&rng, seed);
    for (r = 0; r < n_req; r++) {
        NA_CHECK_OK(na_slot_open(cpu, 10 + r, P + steps + 1, s->n_kvh));
        NA_CHECK_OK(na_slot_open(csd, 10 + r, P + steps + 1, s->n_kvh));
        for (l = 0; l < s->n_layers; l++) {
            na_rng_fill(&rng, kp, (size_t)P * nk, -1, 1);
            na_rng_fill(&rng, vp, (size_t)P * nk, -1, 1);
            NA_CHECK_OK(na_slot_prefill(cpu, 10 + r, l, kp, vp, NA_DTYPE_F32, 0, P));
            NA_CHECK_OK(na_slot_prefill(csd, 10 + r, l, kp, vp, NA_DTYPE_F32, 0, P));
        }
        NA_CHECK_OK(na_slot_prefill_done(cpu, 10 + r));
        NA_CHECK_OK(na_slot_prefill_done(csd, 10 + r));
    }
    for (t = 0; t < steps; t++)
        for (l = 0; l < s->n_layers; l++) {
            na_rng_fill(&rng, q, (size_t)n_req * nq, -2, 2);
            na_rng_fill(&rng, kn, (size_t)n_req * nk, -1, 1);
            na_rng_fill(&rng, vn, (size_t)n_req * nk, -1, 1);
            for (r = 0; r < n_req; r++) {
                na_attn_entry_t *a = &e1[r], *b = &e2[r];
                memset(a, 0, sizeof(*a));
                a->req = 10 + (uint64_t)r;
                a->layer = l;
                a->n_q_heads = s->n_kvh * s->group;
                a->n_kv_heads = s->n_kvh;
                a->q = q + (size_t)r * nq;
                a->k_new = kn + (size_t)r * nk;
                a->v_new = vn + (size_t)r * nk;
                *b = *a;
                a->o = o1 + (size_t)r * nq;
                b->o = o2 + (size_t)r * nq;
            }
            NA_CHECK_OK(na_slot_decode(cpu, e1, n_req));
            NA_CHECK_OK(na_slot_decode(csd, e2, n_req));
            for (r = 0; r < n_req; r++) {
                NA_CHECK_MSG(e1[r].status == NA_OK, "cpu: %s", e1[r].reason);
                NA_CHECK_MSG(e2[r].status == NA_OK, "csd: %s", e2[r].reason);
            }
            {
                double cr = na_close_ratio(o2, o1, (size_t)n_req * nq, 2e-5, 1e-4);
                if (cr > worst)
                    worst = cr;
            }
        }
    for (r = 0; r < n_req; r++) {
        NA_CHECK_OK(na_slot_release(cpu, 10 + r));
        NA_CHECK_OK(na_slot_release(csd, 10 + r));
    }
    free(kp); free(vp); free(q); free(kn); free(vn); free(o1); free(o2); free(e1); free(e2);
    return worst;
}

static void match_case(int n_kvh, int group, int hd, int tier_ssd, size_t csd_bytes,
                       int n_req, int P)
{
    csd_setup_t s = { n_kvh, group, hd, 2, 16, tier_ssd, csd_bytes, "0", g_xclbin };
    na_slot_t *cpu = NULL, *csd = NULL;
    na_slot_stats_t st;
    double cr;
    char name[64];

    snprintf(name, sizeof(name), "m%d_%d_%d_%d_%zu", n_kvh, group, hd, tier_ssd, csd_bytes);
    NA_CHECK_OK(make_slot(&s, "cpu", "cpu", &cpu));
    NA_CHECK_OK(make_slot(&s, "csd", name, &csd));
    if (cpu == NULL || csd == NULL)
        goto out;
    cr = run_pair(&s, n_req, P, 3, (uint64_t)(n_kvh * 1000 + group * 100 + hd + tier_ssd),
                  cpu, csd);
    NA_CHECK_MSG(cr <= 1.0, "csd vs cpu: kvh %d group %d hd %d ssd %d buffer %zu: ratio %.3g",
                 n_kvh, group, hd, tier_ssd, csd_bytes, cr);
    na_slot_stats(csd, &st);
    NA_CHECK(st.attn.csd_noop == 1);
    NA_CHECK(st.attn.csd_launches > 0);
    NA_CHECK(st.attn.entries_failed == 0);
    if (tier_ssd)
        NA_CHECK_MSG(st.attn.csd_p2p_bytes > 0, "KV forced to SSD but no P2P read");
    if (csd_bytes < (1u << 20))   /* batch split over launches */
        NA_CHECK_MSG(st.attn.csd_launches > (uint64_t)(3 * 2),
                     "small buffer: %llu launches", (unsigned long long)st.attn.csd_launches);
out:
    na_slot_destroy(cpu);
    na_slot_destroy(csd);
}

/* A csd slot that cannot run: created, every entry fails naming why. */
static void error_case(const char *what, const char *device, const char *xclbin,
                       const char *want)
{
    csd_setup_t s = { 2, 2, 64, 1, 16, 0, 8u << 20, device, xclbin };
    na_slot_t *slot = NULL;
    na_attn_entry_t e;
    float q[4 * 64], k[2 * 64], o[4 * 64];
    na_status_t st = make_slot(&s, "csd", "err", &slot);

    NA_CHECK_MSG(st == NA_OK, "%s: slot not created: %s", what, na_errmsg());
    if (slot == NULL)
        return;
    memset(q, 0, sizeof(q));
    memset(k, 0, sizeof(k));
    NA_CHECK_OK(na_slot_open(slot, 1, 8, 2));
    memset(&e, 0, sizeof(e));
    e.req = 1;
    e.n_q_heads = 4;
    e.n_kv_heads = 2;
    e.q = q;
    e.k_new = k;
    e.v_new = k;
    e.o = o;
    NA_CHECK_OK(na_slot_decode(slot, &e, 1));
    NA_CHECK_MSG(e.status != NA_OK && strstr(e.reason, want) != NULL,
                 "%s: status %d reason '%s', wanted '%s'", what, (int)e.status, e.reason, want);
    NA_CHECK_OK(na_slot_release(slot, 1));
    na_slot_destroy(slot);
}

/* Four requests' decode batch: entries, query, new K = V row, outputs, and
 * the prompt's K = V rows (up to 40 tokens). */
typedef struct {
    na_attn_entry_t e[4];
    float           q[4 * 64], k[2 * 64], o[4][4 * 64], kp[40 * 2 * 64];
} four_t;

/* Requests 1..4 opened on slot (max_tokens each, 2 KV heads), n_prompt
 * tokens of random K = V rows prefilled (then prefill_done when done), and
 * one decode entry each in f->e (4 query heads): the draws of seed, query,
 * new row, then the prompt. */
static void open_four(four_t *f, na_slot_t *slot, uint64_t seed, int max_tokens, int n_prompt,
                      int done)
{
    na_rng_t rng;
    int r;

    na_rng_seed(&rng, seed);
    na_rng_fill(&rng, f->q, 4 * 64, -1, 1);
    na_rng_fill(&rng, f->k, 2 * 64, -1, 1);
    na_rng_fill(&rng, f->kp, (size_t)n_prompt * 2 * 64, -1, 1);
    for (r = 0; r < 4; r++) {
        NA_CHECK_OK(na_slot_open(slot, 1 + (uint64_t)r, max_tokens, 2));
        NA_CHECK_OK(na_slot_prefill(slot, 1 + (uint64_t)r, 0, f->kp, f->kp, NA_DTYPE_F32, 0,
                                    n_prompt));
        if (done)
            NA_CHECK_OK(na_slot_prefill_done(slot, 1 + (uint64_t)r));
        memset(&f->e[r], 0, sizeof(f->e[r]));
        f->e[r].req = 1 + (uint64_t)r;
        f->e[r].n_q_heads = 4;
        f->e[r].n_kv_heads = 2;
        f->e[r].q = f->q;
        f->e[r].k_new = f->k;
        f->e[r].v_new = f->k;
        f->e[r].o = f->o[r];
    }
}

/* Release requests 1..4 and destroy slot. */
static void close_four(na_slot_t *slot)
{
    int r;

    for (r = 0; r < 4; r++)
        NA_CHECK_OK(na_slot_release(slot, 1 + (uint64_t)r));
    na_slot_destroy(slot);
}

/* NA_FAULTS csd:KEY=1 (the first launch): entry 0..3 of one batch. */
static void fault_case(const char *spec, const char *want, int all_fail)
{
    csd_setup_t s = { 2, 2, 64, 1, 16, 0, 8u << 20, "0", g_xclbin };
    na_slot_t *slot = NULL;
    four_t f;
    na_attn_entry_t *e = f.e;
    int r, failed = 0;

    setenv("NA_FAULTS", spec, 1);
    NA_CHECK_OK(make_slot(&s, "csd", "fault", &slot));
    unsetenv("NA_FAULTS");
    if (slot == NULL)
        return;
    open_four(&f, slot, 5, 30, 20, 0);
    NA_CHECK_OK(na_slot_decode(slot, e, 4));
    for (r = 0; r < 4; r++) {
        if (e[r].status != NA_OK) {
            failed++;
            NA_CHECK_MSG(strstr(e[r].reason, want) != NULL, "%s: reason '%s', wanted '%s'",
                         spec, e[r].reason, want);
        }
    }
    NA_CHECK_MSG(all_fail ? failed == 4 : failed == 1, "%s: %d of 4 entries failed", spec, failed);
    close_four(slot);
}

/* Request 3's KV zeroed in kv.dat after its prefill (KV on the SSD only):
 * entry 3 fails with the checksum's reason, entries 1, 2, 4 are computed. */
static void zeroed_case(void)
{
    csd_setup_t s = { 2, 2, 64, 1, 16, 1, 8u << 20, "0", g_xclbin };
    na_slot_t *slot = NULL;
    four_t f;
    na_attn_entry_t *e = f.e;
    char path[700];
    uint64_t off = 0, len = 0;
    int r, fd;

    NA_CHECK_OK(make_slot(&s, "csd", "zeroed", &slot));
    if (slot == NULL)
        return;
    open_four(&f, slot, 6, 50, 40, 1);
    na_kv_req_extent(na_kv_find(na_slot_store(slot), 3), &off, &len);
    snprintf(path, sizeof(path), "%s/zeroed/kv.dat", g_dir);
    fd = open(path, O_WRONLY);
    NA_CHECK(fd >= 0 && len > 4096);
    if (fd >= 0 && len > 4096) {
        char *z = calloc(1, (size_t)len);
        NA_CHECK(z != NULL && pwrite(fd, z, (size_t)len - 4096, (off_t)(off + 4096)) ==
                 (ssize_t)len - 4096);
        NA_CHECK(fdatasync(fd) == 0);
        free(z);
    }
    if (fd >= 0)
        close(fd);
    NA_CHECK_OK(na_slot_decode(slot, e, 4));
    for (r = 0; r < 4; r++) {
        if (r == 2)
            NA_CHECK_MSG(e[r].status == NA_ERR_IO && strstr(e[r].reason, "fails its checksum"),
                         "zeroed: entry %d: %s", r, e[r].reason);
        else
            NA_CHECK_MSG(e[r].status == NA_OK, "zeroed: entry %d: %s", r, e[r].reason);
    }
    close_four(slot);
}

int main(void)
{
    static const int groups[] = { 1, 2, 4, 8 };
    char bad[700];
    const char *xrt = getenv("XILINX_XRT");
    int i;

    if (xrt == NULL || getenv("XCL_EMULATION_MODE") == NULL)
        NA_SKIP("XILINX_XRT / XCL_EMULATION_MODE=noop not set (ctest sets them)");
    if (na_test_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return 1;
    snprintf(g_xclbin, sizeof(g_xclbin), "%s/na_csd.xclbin", g_dir);
    NA_CHECK_OK(na_xrt_xclbin_write(g_xclbin));

    for (i = 0; i < 4; i++) {
        match_case(2, groups[i], 64, 0, 8u << 20, 3, 37);
        match_case(2, groups[i], 128, i % 2, 8u << 20, 2, 21);
    }
    match_case(4, 2, 64, 1, 8u << 20, 4, 50);          /* KV forced to the SSD */
    match_case(3, 1, 64, 0, 8u << 20, 2, 70);          /* MHA, odd head count */
    match_case(2, 4, 64, 1, 64u << 10, 5, 40);         /* 64 KiB buffer: many launches */

    error_case("no xclbin", "0", NULL, "names no xclbin");
    snprintf(bad, sizeof(bad), "%s/missing.xclbin", g_dir);
    error_case("missing xclbin", "0", bad, "missing.xclbin");
    snprintf(bad, sizeof(bad), "%s/bad.xclbin", g_dir);
    na_test_write_file(bad, "not an xclbin at all\n", 21);
    error_case("malformed xclbin", "0", bad, "not a valid xclbin");
    error_case("wrong device index", "7", g_xclbin, "device 7 not found");
    error_case("BDF under noop", "0000:3b:00.1", g_xclbin, "not found");
    {
        char *saved = strdup(xrt);
        unsetenv("XILINX_XRT");
        error_case("XILINX_XRT unset", "0", g_xclbin, "XILINX_XRT is not set");
        setenv("XILINX_XRT", saved, 1);
        free(saved);
    }
    /* a context too large for the device buffer */
    {
        csd_setup_t s = { 2, 2, 64, 1, 16, 0, 8192, "0", g_xclbin };
        na_slot_t *slot = NULL;
        (void)s;
        NA_CHECK_OK(make_slot(&s, "csd", "small", &slot));
        if (slot != NULL) {
            na_attn_entry_t e;
            float q[4 * 64], k[2 * 64], o[4 * 64], kp[40 * 2 * 64];
            memset(q, 0, sizeof(q));
            memset(k, 0, sizeof(k));
            memset(kp, 0, sizeof(kp));
            NA_CHECK_OK(na_slot_open(slot, 1, 50, 2));
            NA_CHECK_OK(na_slot_prefill(slot, 1, 0, kp, kp, NA_DTYPE_F32, 0, 40));
            memset(&e, 0, sizeof(e));
            e.req = 1; e.n_q_heads = 4; e.n_kv_heads = 2; e.q = q; e.k_new = k; e.v_new = k;
            e.o = o;
            NA_CHECK_OK(na_slot_decode(slot, &e, 1));
            NA_CHECK_MSG(e.status == NA_ERR_NOSPACE && strstr(e.reason, "raise csd_mb"),
                         "small buffer: %s", e.reason);
            NA_CHECK_OK(na_slot_release(slot, 1));
            na_slot_destroy(slot);
        }
    }
    fault_case("csd:corrupt_launch=1", "checksum mismatch", 0);
    fault_case("csd:bad_desc_launch=1", "bad descriptor", 0);
    fault_case("csd:hang_launch=1", "did not complete", 1);
    fault_case("csd:lose_launch=1", "lost", 1);
    zeroed_case();
    na_test_rmtree(g_dir);
    return na_test_finish();
}
#else
int main(void)
{
    NA_SKIP("XRT not built (install libxrt-dev)");
}
#endif

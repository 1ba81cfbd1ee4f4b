/* storage-node/attn_csd.c — the "csd" attention engine (attn_engine.h): the
 * decode attention of a slot runs on the FPGA beside its SSD (SmartSSD),
 * through XRT (xrt_dev.h), with the kernel of kernels/csd.
 *
 * Per slot one device (index or BDF), one xclbin and the slot's KV file on
 * the drive's own file system (the store's kv.dat). submit validates each
 * entry, appends its new row (the store's delayed writeback, as for cpu)
 * and takes a view; close runs the batch as launches: every block of an
 * entry's view is placed in the device KV buffer, SSD blocks by
 * pread(O_DIRECT) straight into the mapped P2P buffer (on hardware the SSD
 * DMAs into FPGA DRAM; no host copy), blocks still in host DRAM (writeback
 * buffer, DRAM tier) by a copy, with a page checksum the kernel verifies.
 * One job per (entry, KV head), its pages listed in the page table; q in,
 * o + log-sum-exp out. Entries that do not fit the device buffer together go
 * to the next launch. A launch runs start/wait with csd_timeout_ms.
 *
 * Under XCL_EMULATION_MODE=noop the XRT calls all run but the kernel does
 * nothing: after the run completes the C kernel runs on the mapped buffers
 * as the FPGA's stand-in. The engine says so (NA_XRT_NOOP_NAME) in its log
 * line and stats (csd_noop = 1): it never passes for hardware.
 *
 * Failures. A device that cannot be opened (no XILINX_XRT, a missing or
 * malformed xclbin, a wrong index) fails create when cfg->csd_required (a
 * storage node starting: refused at start, with the noop hint, not mid-run);
 * otherwise the engine is built in a failed state and every entry fails with
 * that reason. A bad descriptor, a page outside the buffer
 * or a checksum mismatch fails its entry (kernel status); a run that times
 * out or a lost device fails the entries of that launch. NA_FAULTS "csd"
 * (test doubles, docs/csd.md) injects those.
 *
 * Threading: everything runs on the slot's loop thread; close computes the
 * whole batch (synchronously) and test then reports it done. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/dtype.h"
#include "common/faults.h"
#include "common/grow.h"
#include "common/log.h"
#include "kernels/csd/csd_kernel.h"
#include "storage-node/attn_fold.h"
#include "storage-node/csd_xclbin.h"
#include "storage-node/xrt_dev.h"

#define NA_CSD_ALIGN 4096

typedef struct {
    na_attn_entry_t *entry;
    na_kv_view_t     view;
    int              has_view;
    na_status_t      status;
    char             reason[200];
} csd_item_t;

struct na_attn_batch {
    uint64_t    t_begin_ns;
    csd_item_t *items;
    int         n;
    size_t      cap;
    int         closed;
};

/* NA_FAULTS "csd" (test doubles): launch numbers (1-based, 0 = never). */
typedef struct {
    unsigned long long corrupt_launch;   /* flip a byte of a checksummed page */
    unsigned long long bad_desc_launch;  /* a descriptor naming pages past the table */
    unsigned long long hang_launch;      /* the run is treated as never completing */
    unsigned long long lose_launch;      /* the device is lost at this launch */
} csd_faults_t;

typedef struct {
    na_attn_engine_t     base;          /* first */
    na_attn_engine_cfg_t cfg;
    na_kv_store_t       *store;
    const na_kv_store_cfg_t *kcfg;
    na_xrt_dev_t        *dev;           /* NULL: failed (dev_st, dev_why) */
    na_status_t          dev_st;
    char                 dev_why[200];
    na_xrt_launch_t      launch;        /* what every launch shares: the buffers (csd_bufs)
                                           and the shape; a launch adds its counts */
    uint32_t             max_jobs, max_pages;
    size_t               kv_cap;
    void                *bounce;        /* aligned block for O_DIRECT into an unaligned map */
    csd_faults_t         faults;
    na_attn_stats_t      stats;
} csd_engine_t;

static int csd_fault_key(void *arg, const char *key, const char *val, char *err, size_t errlen)
{
    csd_faults_t *f = arg;
    unsigned long long *v = !strcmp(key, "corrupt_launch")  ? &f->corrupt_launch
                          : !strcmp(key, "bad_desc_launch") ? &f->bad_desc_launch
                          : !strcmp(key, "hang_launch")     ? &f->hang_launch
                          : !strcmp(key, "lose_launch")     ? &f->lose_launch : NULL;
    if (v == NULL) {
        snprintf(err, errlen, "NA_FAULTS csd: unknown key %s (corrupt_launch, bad_desc_launch, "
                 "hang_launch, lose_launch)", key);
        return -1;
    }
    return na_faults_u64(key, val, v, err, errlen);
}

/* Mark the device failed: every later entry fails with why. */
static void csd_fail_device(csd_engine_t *e, na_status_t st, const char *why)
{
    e->dev_st = st;
    snprintf(e->dev_why, sizeof(e->dev_why), "%s", why);
}

/* The launch buffers: where the engine holds each, its kernel argument,
 * P2P (the SSD DMAs into it) and bytes. */
typedef struct {
    na_xrt_bo_t **bo;
    int           arg, p2p;
    size_t        bytes;
} csd_buf_t;

#define CSD_N_BUFS 7

static void csd_bufs(csd_engine_t *e, csd_buf_t b[CSD_N_BUFS])
{
    const size_t qn = (size_t)e->cfg.group * e->kcfg->head_dim;
    const csd_buf_t t[CSD_N_BUFS] = {
        { &e->launch.kv, NA_CSD_ARG_KV, 1, e->kv_cap },
        { &e->launch.desc, NA_CSD_ARG_DESC, 0, sizeof(na_csd_desc_t) * e->max_jobs },
        { &e->launch.pages, NA_CSD_ARG_PAGES, 0, sizeof(na_csd_page_t) * e->max_pages },
        { &e->launch.q, NA_CSD_ARG_Q, 0, sizeof(float) * qn * e->max_jobs },
        { &e->launch.o, NA_CSD_ARG_O, 0, sizeof(float) * qn * e->max_jobs },
        { &e->launch.lse, NA_CSD_ARG_LSE, 0, sizeof(float) * e->cfg.group * e->max_jobs },
        { &e->launch.status, NA_CSD_ARG_STATUS, 0, sizeof(int32_t) * e->max_jobs },
    };

    memcpy(b, t, sizeof(t));
}

/* Free the launch buffers, then close the device (every handle before the
 * device); e->dev is NULL after. */
static void csd_dev_close(csd_engine_t *e)
{
    csd_buf_t b[CSD_N_BUFS];
    int i;

    csd_bufs(e, b);
    for (i = 0; i < CSD_N_BUFS; i++) {
        na_xrt_bo_free(*b[i].bo);
        *b[i].bo = NULL;
    }
    na_xrt_dev_close(e->dev);
    e->dev = NULL;
}

/* Open the device and allocate the launch buffers. */
static na_status_t csd_open(csd_engine_t *e)
{
    const na_kv_store_cfg_t *k = e->kcfg;
    size_t bb = na_kv_block_bytes(k, e->cfg.max_kv_heads);
    csd_buf_t b[CSD_N_BUFS];
    na_status_t st;
    int i;

    if (e->cfg.csd_xclbin == NULL || e->cfg.csd_xclbin[0] == '\0')
        return na_err(NA_ERR_INVALID, "csd: the slot names no xclbin (devices[].xclbin)");
    st = na_xrt_dev_open(e->cfg.csd_device, e->cfg.csd_xclbin, &e->dev);
    if (st != NA_OK)
        return st;
    e->kv_cap = (size_t)e->cfg.csd_bytes / bb * bb;
    if (e->kv_cap < bb)
        return na_err(NA_ERR_RANGE, "csd: device buffer %llu bytes is smaller than one KV block "
                      "(%zu bytes): raise csd_mb", (unsigned long long)e->cfg.csd_bytes, bb);
    /* worst case: every block holds one token of one request */
    e->max_pages = (uint32_t)(e->kv_cap / bb * (size_t)e->cfg.max_kv_heads);
    e->max_jobs = e->max_pages;
    csd_bufs(e, b);
    for (i = 0; i < CSD_N_BUFS; i++)
        if ((st = na_xrt_bo_alloc(e->dev, b[i].bytes, b[i].p2p, b[i].arg, b[i].bo)) != NA_OK)
            return st;
    e->launch.head_dim = (uint32_t)k->head_dim;
    e->launch.group = (uint32_t)e->cfg.group;
    e->launch.page_tokens = (uint32_t)k->block_tokens;
    e->launch.scale = 1.0f / sqrtf((float)k->head_dim);
    if (posix_memalign(&e->bounce, NA_CSD_ALIGN, bb) != 0)
        return na_err(NA_ERR_NOMEM, "csd: out of memory (bounce block)");
    return NA_OK;
}

static void csd_destroy(na_attn_engine_t *base)
{
    csd_engine_t *e = (csd_engine_t *)base;

    csd_dev_close(e);
    free(e->bounce);
    free(e);
}

static na_status_t csd_create(na_kv_store_t *store, const na_attn_engine_cfg_t *cfg,
                              na_attn_engine_t **e_p)
{
    csd_engine_t *e;
    const na_kv_store_cfg_t *k = na_kv_store_cfg(store);
    char err[200];
    na_status_t st;

    if (cfg->group < 1 || cfg->group > NA_CSD_MAX_GROUP || cfg->max_kv_heads < 1 ||
        k->head_dim > NA_CSD_MAX_HEAD_DIM || cfg->csd_timeout_ms < 1)
        return na_err(NA_ERR_RANGE, "csd: group %d (1..%d), head_dim %d (<= %d) or timeout %d ms "
                      "out of the kernel's bounds", cfg->group, NA_CSD_MAX_GROUP, k->head_dim,
                      NA_CSD_MAX_HEAD_DIM, cfg->csd_timeout_ms);
    if (k->kv_dtype != NA_DTYPE_F16)
        return na_err(NA_ERR_UNSUPPORTED, "csd: the kernel reads f16 KV pages, the slot stores "
                      "%s (set model.kv_dtype: f16)", na_dtype_name(k->kv_dtype));
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return na_err(NA_ERR_NOMEM, "csd: out of memory");
    e->cfg = *cfg;
    e->store = store;
    e->kcfg = k;
    if (na_faults_part(getenv("NA_FAULTS"), "csd", csd_fault_key, &e->faults, err,
                       sizeof(err)) < 0) {
        free(e);
        return na_err(NA_ERR_INVALID, "%s", err);
    }
    if (e->faults.corrupt_launch || e->faults.bad_desc_launch || e->faults.hang_launch ||
        e->faults.lose_launch)
        fprintf(stderr, "nearattn: TEST DOUBLE: csd faults injected (NA_FAULTS=\"%s\"); not "
                "for production\n", getenv("NA_FAULTS"));
    st = csd_open(e);
    if (st != NA_OK && cfg->csd_required) {
        /* a storage node starting: refuse now, with how to run without an FPGA */
        char why[400];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        csd_destroy(&e->base);
        return na_err(st, "engine csd, device %s: %s%s", cfg->csd_device ? cfg->csd_device : "?",
                      why, na_xrt_noop_hint());
    }
    if (st != NA_OK) {
        /* not fatal: this slot fails its entries with the reason */
        char why[200];
        snprintf(why, sizeof(why), "%s", na_errmsg());
        na_log_error("csd slot %s (device %s): %s; its requests fail, other slots serve",
                     k->dir ? k->dir : "(dram)", cfg->csd_device ? cfg->csd_device : "?", why);
        csd_dev_close(e);
        csd_fail_device(e, st, why);
    } else {
        e->stats.csd_noop = (uint64_t)na_xrt_dev_noop(e->dev);
        na_log_info("csd slot %s: %s (device %s, xclbin %s, %zu KiB device buffer)",
                    k->dir ? k->dir : "(dram)", na_xrt_dev_mode(e->dev), cfg->csd_device,
                    cfg->csd_xclbin, e->kv_cap >> 10);
    }
    *e_p = &e->base;
    return NA_OK;
}

static void csd_stats(na_attn_engine_t *base, na_attn_stats_t *out)
{
    *out = ((csd_engine_t *)base)->stats;
}

static na_status_t csd_begin(na_attn_engine_t *base, na_attn_batch_t **b_p)
{
    na_attn_batch_t *b = calloc(1, sizeof(*b));

    (void)base;
    if (b == NULL)
        return na_err(NA_ERR_NOMEM, "csd batch: out of memory");
    b->t_begin_ns = na_now_ns();
    *b_p = b;
    return NA_OK;
}

static void csd_item_fail(csd_item_t *it, na_status_t st, const char *why)
{
    if (it->status != NA_OK)
        return;
    it->status = st;
    snprintf(it->reason, sizeof(it->reason), "%s", why);
}

static na_status_t csd_submit(na_attn_engine_t *base, na_attn_batch_t *b,
                              na_attn_entry_t *entries, int n)
{
    csd_engine_t *e = (csd_engine_t *)base;
    void *items = na_grow(b->items, &b->cap, (size_t)b->n + (size_t)n, sizeof(*b->items), 16);
    int i;

    if (items == NULL)
        return na_err(NA_ERR_NOMEM, "csd batch: out of memory");
    b->items = items;
    for (i = 0; i < n; i++) {
        na_attn_entry_t *en = &entries[i];
        csd_item_t *it;
        na_kv_req_t *r = NULL;
        na_status_t st;

        it = &b->items[b->n++];
        memset(it, 0, sizeof(*it));
        it->entry = en;
        en->status = NA_OK;
        en->reason[0] = '\0';
        if (e->dev == NULL) {
            csd_item_fail(it, e->dev_st, e->dev_why);
            continue;
        }
        st = na_attn_entry_check(e->store, &e->cfg, en, &r);
        if (st == NA_OK && en->k_new != NULL)
            st = na_kv_append(e->store, r, en->layer, en->k_new, en->v_new, NA_DTYPE_F32, 0, 1, 0);
        if (st == NA_OK) {
            st = na_kv_view_n(e->store, r, en->layer, en->n_ctx, &it->view);
            it->has_view = st == NA_OK;
        }
        if (st != NA_OK)
            csd_item_fail(it, st, na_errmsg());
    }
    return NA_OK;
}

/* Place block b of item it at kv + off (SSD: pread, else copy). */
static na_status_t csd_stage_block(csd_engine_t *e, const csd_item_t *it, int b, char *dst)
{
    const na_kv_view_t *v = &it->view;
    const na_kv_block_t *blk = &v->blocks[b];
    size_t bb = v->block_bytes, got = 0;
    uint64_t off;

    if (blk->loc != NA_KV_LOC_SSD) {
        memcpy(dst, blk->mem, bb);
        e->stats.csd_host_bytes += bb;
        return NA_OK;
    }
    off = v->ssd_off + (uint64_t)b * bb;
    /* O_DIRECT needs an aligned destination: XRT noop maps plain malloc memory */
    {
        int aligned = ((uintptr_t)dst % NA_CSD_ALIGN) == 0;
        char *to = aligned ? dst : e->bounce;
        while (got < bb) {
            ssize_t r = pread(v->fd, to + got, bb - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return na_err(NA_ERR_IO, "csd: pread(KV file, %zu bytes at %llu) into the "
                              "device buffer: %s", bb - got, (unsigned long long)(off + got),
                              r < 0 ? strerror(errno) : "end of file");
            got += (size_t)r;
        }
        if (na_kv_view_check(v, b, to) != NA_OK)
            return NA_ERR_IO;                    /* the disk returned other bytes */
        if (!aligned)
            memcpy(dst, e->bounce, bb);
    }
    e->stats.csd_p2p_bytes += bb;
    e->stats.ssd_bytes_read += bb;
    na_kv_count_read(e->store, bb);
    return NA_OK;
}

/* Blocks and jobs item it needs in one launch. */
static void csd_item_need(const csd_engine_t *e, const csd_item_t *it, size_t *bytes,
                          uint32_t *jobs, uint32_t *pages)
{
    (void)e;
    *bytes = (size_t)it->view.n_blocks * it->view.block_bytes;
    *jobs = (uint32_t)it->view.n_kvh;
    *pages = (uint32_t)it->view.n_blocks * (uint32_t)it->view.n_kvh;
}

/* One launch over items [i0, i1) (all with status OK and a view). */
static void csd_launch(csd_engine_t *e, csd_item_t *items, int i0, int i1)
{
    const int hd = e->kcfg->head_dim, grp = e->cfg.group, bt = e->kcfg->block_tokens;
    const size_t qn = (size_t)grp * hd, half = (size_t)bt * hd * sizeof(uint16_t);
    na_xrt_launch_t l = e->launch;
    na_csd_desc_t *desc = na_xrt_bo_map(l.desc);
    na_csd_page_t *pages = na_xrt_bo_map(l.pages);
    char *kv = na_xrt_bo_map(l.kv);
    float *q = na_xrt_bo_map(l.q), *o = na_xrt_bo_map(l.o);
    float *lse = na_xrt_bo_map(l.lse);
    int32_t *status = na_xrt_bo_map(l.status);
    size_t kv_used = 0;
    uint32_t nj = 0, np = 0;
    uint64_t t0, launch_no = e->stats.csd_launches + 1;
    na_status_t st = NA_OK;
    int i, b, h, first_sum = -1;

    for (i = i0; i < i1; i++) {
        csd_item_t *it = &items[i];
        const na_kv_view_t *v = &it->view;
        size_t base = kv_used;
        uint32_t p0 = np;

        for (b = 0; b < v->n_blocks && it->status == NA_OK; b++) {
            st = csd_stage_block(e, it, b, kv + base + (size_t)b * v->block_bytes);
            if (st != NA_OK)
                csd_item_fail(it, st, na_errmsg());
        }
        if (it->status != NA_OK)
            continue;
        kv_used += (size_t)v->n_blocks * v->block_bytes;
        for (h = 0; h < v->n_kvh; h++) {
            na_csd_desc_t *d = &desc[nj];
            memset(d, 0, sizeof(*d));
            d->req = it->entry->req;
            d->kv_head = (uint32_t)h;
            d->n_tokens = (uint32_t)v->n_tokens;
            d->page0 = np;
            d->n_pages = (uint32_t)v->n_blocks;
            for (b = 0; b < v->n_blocks; b++) {
                na_csd_page_t *pg = &pages[np++];
                pg->off = base + (size_t)b * v->block_bytes + (size_t)h * 2 * half;
                pg->flags = 0;
                pg->sum = 0;
                if (v->blocks[b].loc != NA_KV_LOC_SSD) {
                    /* host-staged page: its sum from the source, checked on the device */
                    pg->sum = na_csd_page_sum((const char *)v->blocks[b].mem + (size_t)h * 2 * half,
                                              2 * half);
                    pg->flags = NA_CSD_PAGE_SUM;
                    if (first_sum < 0)
                        first_sum = (int)(np - 1);
                }
            }
            memcpy(q + (size_t)nj * qn, it->entry->q + (size_t)h * qn, sizeof(float) * qn);
            nj++;
        }
        (void)p0;
    }
    if (nj == 0)
        return;
    if (e->faults.corrupt_launch == launch_no && first_sum >= 0)
        kv[pages[first_sum].off + 3] ^= 0x5a;
    if (e->faults.bad_desc_launch == launch_no)
        desc[0].page0 = np + 1;
    l.n_jobs = nj;
    l.n_page_entries = np;
    l.kv_bytes = kv_used;
    /* the KV buffer is P2P (written through its mapping): no sync; the rest is */
    if ((st = na_xrt_bo_sync(l.desc, 1, sizeof(*desc) * nj, 0)) == NA_OK &&
        (st = na_xrt_bo_sync(l.pages, 1, sizeof(*pages) * np, 0)) == NA_OK)
        st = na_xrt_bo_sync(l.q, 1, sizeof(float) * qn * nj, 0);
    t0 = na_now_ns();
    e->stats.csd_launches++;
    if (st == NA_OK && e->faults.lose_launch == launch_no) {
        st = na_err(NA_ERR_IO, "csd: device %s lost (NA_FAULTS csd:lose_launch)",
                    e->cfg.csd_device);
        csd_fail_device(e, st, na_errmsg());
    }
    if (st == NA_OK) {
        st = na_xrt_run(e->dev, &l, e->cfg.csd_timeout_ms);
        if (st == NA_OK && e->faults.hang_launch == launch_no)
            st = na_err(NA_ERR_TIMEOUT, "csd: device %s: the run did not complete in %d ms "
                        "(NA_FAULTS csd:hang_launch)", e->cfg.csd_device, e->cfg.csd_timeout_ms);
    }
    if (st == NA_OK) {
        if (na_xrt_dev_noop(e->dev))   /* the FPGA's stand-in, on the mapped buffers */
            na_csd_attn(desc, nj, pages, np, (const uint16_t *)kv, kv_used, q, o, lse, status,
                        (na_csd_shape_t){ l.head_dim, l.group, l.page_tokens, l.scale });
        else if ((st = na_xrt_bo_sync(l.status, 0, sizeof(*status) * nj, 0)) == NA_OK &&
                 (st = na_xrt_bo_sync(l.o, 0, sizeof(float) * qn * nj, 0)) == NA_OK)
            st = na_xrt_bo_sync(l.lse, 0, sizeof(float) * grp * nj, 0);
    }
    e->stats.csd_launch_ns += na_now_ns() - t0;
    e->stats.compute_ns += na_now_ns() - t0;
    e->stats.granules++;
    nj = 0;
    for (i = i0; i < i1; i++) {
        csd_item_t *it = &items[i];
        if (it->status != NA_OK)
            continue;
        if (st != NA_OK) {
            csd_item_fail(it, st, na_errmsg());
            continue;
        }
        e->stats.tokens += (uint64_t)it->view.n_tokens;
        for (h = 0; h < it->view.n_kvh; h++, nj++) {
            if (status[nj] != NA_CSD_OK) {
                char why[200];
                snprintf(why, sizeof(why), "csd: request %llu KV head %d layer %d: %s (device %s)",
                         (unsigned long long)it->entry->req, h, it->entry->layer,
                         na_csd_status_name(status[nj]), e->cfg.csd_device);
                csd_item_fail(it, NA_ERR_IO, why);
                continue;
            }
            memcpy(it->entry->o + (size_t)h * qn, o + (size_t)nj * qn, sizeof(float) * qn);
        }
    }
}

/* Run every item of b as launches that fit the device buffers. */
static void csd_run_batch(csd_engine_t *e, na_attn_batch_t *b)
{
    size_t bytes = 0;
    uint32_t jobs = 0, pages = 0;
    int i, i0 = 0;

    for (i = 0; i < b->n; i++) {
        csd_item_t *it = &b->items[i];
        size_t nb;
        uint32_t nj, np;

        if (it->status == NA_OK && e->dev == NULL)
            csd_item_fail(it, e->dev_st, e->dev_why);
        if (it->status != NA_OK)
            continue;
        csd_item_need(e, it, &nb, &nj, &np);
        if (nb > e->kv_cap || nj > e->max_jobs || np > e->max_pages) {
            char why[200];
            snprintf(why, sizeof(why), "csd: request %llu layer %d needs %zu MiB of device "
                     "buffer, the slot has %zu MiB (raise csd_mb)",
                     (unsigned long long)it->entry->req, it->entry->layer, nb >> 20,
                     e->kv_cap >> 20);
            csd_item_fail(it, NA_ERR_NOSPACE, why);
            continue;
        }
        if (bytes + nb > e->kv_cap || jobs + nj > e->max_jobs || pages + np > e->max_pages) {
            csd_launch(e, b->items, i0, i);
            i0 = i;
            bytes = jobs = pages = 0;
        }
        bytes += nb;
        jobs += nj;
        pages += np;
    }
    if (e->dev != NULL)
        csd_launch(e, b->items, i0, b->n);
}

static na_status_t csd_close(na_attn_engine_t *base, na_attn_batch_t *b)
{
    csd_engine_t *e = (csd_engine_t *)base;

    b->closed = 1;
    csd_run_batch(e, b);
    return NA_OK;
}

/* Results onto the entries, views released, b freed. */
static void csd_finish(csd_engine_t *e, na_attn_batch_t *b)
{
    int i;

    for (i = 0; i < b->n; i++) {
        csd_item_t *it = &b->items[i];
        it->entry->status = it->status;
        snprintf(it->entry->reason, sizeof(it->entry->reason), "%s", it->reason);
        e->stats.entries++;
        if (it->status != NA_OK)
            e->stats.entries_failed++;
        if (it->has_view)
            na_kv_view_release(e->store, &it->view);
    }
    e->stats.batch_ns += na_now_ns() - b->t_begin_ns;
    free(b->items);
    free(b);
}

static na_status_t csd_test(na_attn_engine_t *base, na_attn_batch_t *b, int wait_us, int *done)
{
    (void)wait_us;
    *done = b->closed;
    if (b->closed)
        csd_finish((csd_engine_t *)base, b);
    return NA_OK;
}

static na_status_t csd_wait(na_attn_engine_t *base, na_attn_batch_t *b)
{
    if (!b->closed)
        (void)csd_close(base, b);
    csd_finish((csd_engine_t *)base, b);
    return NA_OK;
}

const na_attn_engine_ops_t na_attn_csd_ops = {
    csd_create, csd_destroy, csd_begin, csd_submit, csd_close, csd_test, csd_wait, csd_stats,
    0,   /* block_queries: one query per entry */
    NULL,   /* submit_close: submit, then close */
};

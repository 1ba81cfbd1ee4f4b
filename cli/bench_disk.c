/* cli/bench_disk.c — the disk limit of `bench storage` (cli/bench_disk.h). */
#define _GNU_SOURCE            /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/bench.h"
#include "cli/bench_disk.h"

void na_bs_fill(float *x, size_t n, uint64_t seed)
{
    size_t i;
    for (i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) & 0xffffff) / 8388608.0f - 1.0f;
    }
}

void na_bs_disk_close(na_bs_disk_t *d)
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
na_status_t na_bs_disk_open(na_bs_disk_t *d, const char *dir, uint64_t bytes, double *wr)
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
na_status_t na_bs_disk_attach(na_bs_disk_t *d, const char *path)
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
double na_bs_disk_read(void *ctx)
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


/* len * qd <= the 64 MiB buffer; qd <= NA_BS_QD_MAX */
const na_bs_rdcfg_t na_bs_rdcfgs[] = {   /* exactly NA_BS_N_RDCFG (the header's size) */
    { 1u << 20,  8, 1 }, { 1u << 20, 32, 1 }, { 1u << 20, 64, 1 },
    { 4u << 20,  8, 1 }, { 4u << 20, 16, 1 },
    { 1u << 20, 64, 4 }, { 4u << 20, 16, 4 }, { 1u << 20, 64, 8 },
};


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
na_status_t na_bs_disk_best(na_bs_disk_t *d, double *best_p, const na_bs_rdcfg_t **cfg_p)
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

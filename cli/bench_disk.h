/* cli/bench_disk.h — the disk limit of `bench storage` (cli/bench_storage.c):
 * O_DIRECT reads of a file (a fresh one, or a slot's own KV file) through the
 * storage node's I/O layer (storage-node/kv_ssd.h), once at the engine's
 * shape and as a sweep of read shapes for the best. */
#ifndef NA_CLI_BENCH_DISK_H
#define NA_CLI_BENCH_DISK_H

#include <stddef.h>
#include <stdint.h>

#include "common/status.h"
#include "storage-node/kv_ssd.h"

#define NA_BS_QD      32         /* queue depth of the engine and of the limit */
#define NA_BS_QD_MAX  64         /* deepest queue of the read sweep */

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

/* One read configuration of the sweep for the file system's best read
 * bandwidth: read size, queue depth, contiguous file regions read at once. */
typedef struct na_bs_rdcfg {
    size_t len;
    int    qd;
    int    regions;
} na_bs_rdcfg_t;

#define NA_BS_N_RDCFG 8
extern const na_bs_rdcfg_t na_bs_rdcfgs[NA_BS_N_RDCFG];

/* n deterministic pseudo-random floats in [-1, 1) from seed. */
void        na_bs_fill(float *x, size_t n, uint64_t seed);
void        na_bs_disk_close(na_bs_disk_t *d);
/* A fresh file of `bytes` under dir, written once (its write GB/s in *wr). */
na_status_t na_bs_disk_open(na_bs_disk_t *d, const char *dir, uint64_t bytes, double *wr);
/* An existing file (a slot's KV file), read-only with O_DIRECT. */
na_status_t na_bs_disk_attach(na_bs_disk_t *d, const char *path);
/* Read the whole file once, 1 MiB pieces at NA_BS_QD (ctx: the na_bs_disk_t):
 * GB/s, < 0 on an I/O error. */
double      na_bs_disk_read(void *ctx);
/* The best GB/s of the sweep na_bs_rdcfgs (each twice) and its configuration. */
na_status_t na_bs_disk_best(na_bs_disk_t *d, double *best_p, const na_bs_rdcfg_t **cfg_p);

#endif /* NA_CLI_BENCH_DISK_H */

/* rdma/ibv.h — the RDMA devices of this machine, through libibverbs
 * (rdma-core): each device's ports with state, link layer, rate and GIDs,
 * its NUMA node and PCI address (sysfs), and the choice of the UCX network
 * device (UCX_NET_DEVICES form "mlx5_0:1") nearest a GPU. No device (the
 * build machines: ibv_get_device_list returns NULL or an empty list) is
 * NA_OK with n = 0 and the line "no RDMA device: UCX uses shm/tcp", not an
 * error. Built without libibverbs, the list is always empty. */
#ifndef NA_RDMA_IBV_H
#define NA_RDMA_IBV_H

#include <stdio.h>

#include "common/status.h"

#define NA_IBV_MAX_PORTS 8
#define NA_IBV_MAX_GIDS  4     /* non-zero GIDs kept per port */

typedef struct {
    int    port;                    /* 1-based */
    int    active;                  /* state IBV_PORT_ACTIVE */
    char   state[16];               /* "ACTIVE", "DOWN", ... */
    char   link_layer[16];          /* "InfiniBand", "Ethernet" */
    int    width;                   /* lanes: 1, 2, 4, 8, 12 (0: unknown) */
    double lane_gbps;               /* per lane: 2.5 SDR .. 100 NDR (0: unknown) */
    double gbps;                    /* width * lane_gbps */
    int    gid_tbl_len;
    int    n_gids;                  /* non-zero GIDs below (at most NA_IBV_MAX_GIDS) */
    char   gids[NA_IBV_MAX_GIDS][40];
} na_ibv_port_t;

typedef struct {
    char          name[64];         /* "mlx5_0" */
    char          pci[32];          /* "0000:17:00.0", "" when unknown */
    int           numa_node;        /* -1 when unknown */
    int           n_ports;
    na_ibv_port_t ports[NA_IBV_MAX_PORTS];
} na_ibv_dev_t;

/* The devices of this machine into *devs_p (free with na_ibv_free; NULL when
 * none) and their count. NA_ERR_IO only when a device cannot be opened or
 * queried (named in the message); no device is NA_OK with *n_p = 0. */
na_status_t na_ibv_list(na_ibv_dev_t **devs_p, int *n_p);
void        na_ibv_free(na_ibv_dev_t *devs);

/* The UCX device ("NAME:PORT") for a process near NUMA node `numa` (-1: no
 * preference): an active port, on that NUMA node when one is, else the
 * fastest; among equals the first. buf gets "" and the return is -1 when no
 * port is active. */
int na_ibv_pick(const na_ibv_dev_t *devs, int n, int numa, char *buf, size_t cap);

/* Print the devices for `check-config --plan`: a header, one line per port,
 * the UCX choice; or the single line "no RDMA device: UCX uses shm/tcp". */
void na_ibv_print(FILE *f, const na_ibv_dev_t *devs, int n);

/* Rate of one lane from the verbs active_speed code, lanes from the
 * active_width code (0 for codes it does not know). */
double na_ibv_lane_gbps(int speed_code);
int    na_ibv_lanes(int width_code);

#endif /* NA_RDMA_IBV_H */

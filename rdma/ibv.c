/* rdma/ibv.c — RDMA device enumeration through libibverbs (see ibv.h). The
 * verbs calls are compiled only with NA_HAVE_IBVERBS; the rate tables, the
 * choice and the printing are plain C either way. */
#include <stdlib.h>
#include <string.h>

#include "rdma/ibv.h"

#if NA_HAVE_IBVERBS
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <unistd.h>
#endif

double na_ibv_lane_gbps(int speed_code)
{
    switch (speed_code) {
    case 1:   return 2.5;        /* SDR */
    case 2:   return 5.0;        /* DDR */
    case 4:   return 10.0;       /* QDR */
    case 8:   return 10.3125;    /* FDR10 */
    case 16:  return 14.0625;    /* FDR */
    case 32:  return 25.78125;   /* EDR */
    case 64:  return 50.0;       /* HDR */
    case 128: return 100.0;      /* NDR */
    case 256: return 200.0;      /* XDR */
    default:  return 0.0;
    }
}

int na_ibv_lanes(int width_code)
{
    switch (width_code) {
    case 1:  return 1;
    case 2:  return 4;
    case 4:  return 8;
    case 8:  return 12;
    case 16: return 2;
    default: return 0;
    }
}

void na_ibv_free(na_ibv_dev_t *devs)
{
    free(devs);
}

#if NA_HAVE_IBVERBS
static const char *na_ibv_state_name(enum ibv_port_state s)
{
    switch (s) {
    case IBV_PORT_DOWN:         return "DOWN";
    case IBV_PORT_INIT:         return "INIT";
    case IBV_PORT_ARMED:        return "ARMED";
    case IBV_PORT_ACTIVE:       return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default:                    return "NOP";
    }
}

/* NUMA node and PCI address from sysfs (ibdev_path/device). */
static void na_ibv_sysfs(struct ibv_device *d, na_ibv_dev_t *out)
{
    char path[PATH_MAX + 32], link[PATH_MAX];
    FILE *f;
    ssize_t len;

    out->numa_node = -1;
    snprintf(path, sizeof(path), "%s/device/numa_node", d->ibdev_path);
    if ((f = fopen(path, "r")) != NULL) {
        if (fscanf(f, "%d", &out->numa_node) != 1)
            out->numa_node = -1;
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/device", d->ibdev_path);
    len = readlink(path, link, sizeof(link) - 1);
    if (len > 0) {
        const char *slash;
        link[len] = '\0';
        slash = strrchr(link, '/');
        snprintf(out->pci, sizeof(out->pci), "%.31s", slash != NULL ? slash + 1 : link);
    }
}

static na_status_t na_ibv_port(struct ibv_context *ctx, const char *dev, int p,
                               na_ibv_port_t *out)
{
    struct ibv_port_attr pa;
    int i, rc;

    memset(&pa, 0, sizeof(pa));
    if ((rc = ibv_query_port(ctx, (uint8_t)p, &pa)) != 0)
        return na_err(NA_ERR_IO, "rdma: ibv_query_port(%s, %d) failed: %s", dev, p, strerror(rc));
    out->port = p;
    out->active = pa.state == IBV_PORT_ACTIVE;
    snprintf(out->state, sizeof(out->state), "%s", na_ibv_state_name(pa.state));
    snprintf(out->link_layer, sizeof(out->link_layer), "%s",
             pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand");
    out->width = na_ibv_lanes(pa.active_width);
    out->lane_gbps = na_ibv_lane_gbps(pa.active_speed);
    out->gbps = out->width * out->lane_gbps;
    out->gid_tbl_len = pa.gid_tbl_len;
    for (i = 0; i < pa.gid_tbl_len && out->n_gids < NA_IBV_MAX_GIDS; i++) {
        union ibv_gid g;
        static const uint8_t zero[16];
        if (ibv_query_gid(ctx, (uint8_t)p, i, &g) != 0 || memcmp(g.raw, zero, 16) == 0)
            continue;
        snprintf(out->gids[out->n_gids++], sizeof(out->gids[0]),
                 "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                 g.raw[0], g.raw[1], g.raw[2], g.raw[3], g.raw[4], g.raw[5], g.raw[6],
                 g.raw[7], g.raw[8], g.raw[9], g.raw[10], g.raw[11], g.raw[12], g.raw[13],
                 g.raw[14], g.raw[15]);
    }
    return NA_OK;
}

static na_status_t na_ibv_device(struct ibv_device *d, na_ibv_dev_t *out)
{
    struct ibv_context *ctx;
    struct ibv_device_attr da;
    na_status_t st = NA_OK;
    int p, rc;

    snprintf(out->name, sizeof(out->name), "%s", ibv_get_device_name(d));
    na_ibv_sysfs(d, out);
    if ((ctx = ibv_open_device(d)) == NULL)
        return na_err(NA_ERR_IO, "rdma: ibv_open_device(%s) failed: %s", out->name,
                      strerror(errno));
    if ((rc = ibv_query_device(ctx, &da)) != 0) {
        ibv_close_device(ctx);
        return na_err(NA_ERR_IO, "rdma: ibv_query_device(%s) failed: %s", out->name,
                      strerror(rc));
    }
    for (p = 1; p <= da.phys_port_cnt && p <= NA_IBV_MAX_PORTS && st == NA_OK; p++)
        if ((st = na_ibv_port(ctx, out->name, p, &out->ports[p - 1])) == NA_OK)
            out->n_ports = p;
    ibv_close_device(ctx);
    return st;
}

na_status_t na_ibv_list(na_ibv_dev_t **devs_p, int *n_p)
{
    struct ibv_device **list;
    na_ibv_dev_t *devs = NULL;
    na_status_t st = NA_OK;
    int n = 0, i;

    *devs_p = NULL;
    *n_p = 0;
    list = ibv_get_device_list(&n);
    if (list == NULL || n <= 0) {          /* no device, or no RDMA subsystem at all */
        if (list != NULL)
            ibv_free_device_list(list);
        return NA_OK;
    }
    devs = calloc((size_t)n, sizeof(*devs));
    if (devs == NULL) {
        ibv_free_device_list(list);
        return na_err(NA_ERR_NOMEM, "rdma: out of memory listing %d RDMA devices", n);
    }
    for (i = 0; i < n && st == NA_OK; i++)
        st = na_ibv_device(list[i], &devs[i]);
    ibv_free_device_list(list);
    if (st != NA_OK) {
        free(devs);
        return st;
    }
    *devs_p = devs;
    *n_p = n;
    return NA_OK;
}
#else
na_status_t na_ibv_list(na_ibv_dev_t **devs_p, int *n_p)
{
    *devs_p = NULL;
    *n_p = 0;
    return NA_OK;
}
#endif

int na_ibv_pick(const na_ibv_dev_t *devs, int n, int numa, char *buf, size_t cap)
{
    int best_d = -1, best_p = -1, best_near = 0, d, p;
    double best_gbps = -1.0;

    for (d = 0; d < n; d++)
        for (p = 0; p < devs[d].n_ports; p++) {
            const na_ibv_port_t *pt = &devs[d].ports[p];
            int near = numa >= 0 && devs[d].numa_node == numa;
            if (!pt->active)
                continue;
            if (best_d < 0 || near > best_near ||
                (near == best_near && pt->gbps > best_gbps)) {
                best_d = d;
                best_p = p;
                best_near = near;
                best_gbps = pt->gbps;
            }
        }
    if (best_d < 0) {
        if (cap > 0)
            buf[0] = '\0';
        return -1;
    }
    snprintf(buf, cap, "%s:%d", devs[best_d].name, devs[best_d].ports[best_p].port);
    return 0;
}

void na_ibv_print(FILE *f, const na_ibv_dev_t *devs, int n)
{
    char pick[96];
    int d, p, g;

    fprintf(f, "\nrdma devices (this machine, libibverbs)\n");
    if (n == 0) {
        fprintf(f, "  no RDMA device: UCX uses shm/tcp\n");
        return;
    }
    for (d = 0; d < n; d++) {
        fprintf(f, "  %s  pci %s  numa %d  %d port%s\n", devs[d].name,
                devs[d].pci[0] ? devs[d].pci : "?", devs[d].numa_node, devs[d].n_ports,
                devs[d].n_ports == 1 ? "" : "s");
        for (p = 0; p < devs[d].n_ports; p++) {
            const na_ibv_port_t *pt = &devs[d].ports[p];
            fprintf(f, "    port %d  %-6s  %-10s  %dx %.4g Gb/s = %.4g Gb/s  %d/%d GIDs", pt->port,
                    pt->state, pt->link_layer, pt->width, pt->lane_gbps, pt->gbps, pt->n_gids,
                    pt->gid_tbl_len);
            for (g = 0; g < pt->n_gids; g++)
                fprintf(f, "%s%s", g == 0 ? ": " : ", ", pt->gids[g]);
            fputc('\n', f);
        }
    }
    if (na_ibv_pick(devs, n, -1, pick, sizeof(pick)) == 0)
        fprintf(f, "  UCX device: %s (UCX_NET_DEVICES; the fastest active port)\n", pick);
    else
        fprintf(f, "  no active RDMA port: UCX uses shm/tcp\n");
}

/* tests/unit/test_ibv.c — rdma/ibv.c: RDMA device enumeration through the
 * real libibverbs of this machine (none on the build machines: NA_OK, no
 * device, the "no RDMA device: UCX uses shm/tcp" line; with devices, sane
 * ports and rates), the verbs rate tables, and the UCX device choice on
 * device records written here (a test double of data only: no machine here
 * has two NICs on two NUMA nodes). */
#include <stdlib.h>
#include <string.h>

#include "rdma/ibv.h"
#include "tests/testutil.h"

static char *print_to_string(const na_ibv_dev_t *d, int n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return NULL;
    na_ibv_print(f, d, n);
    fclose(f);
    return buf;
}

static void test_this_machine(void)
{
    na_ibv_dev_t *devs = NULL;
    int n = -1, d, p;
    char *text;

    NA_CHECK_OK(na_ibv_list(&devs, &n));
    NA_CHECK(n >= 0);
    NA_CHECK((n == 0) == (devs == NULL));
    text = print_to_string(devs, n);
    NA_CHECK(text != NULL);
    if (n == 0) {
        NA_CHECK(text != NULL && strstr(text, "no RDMA device: UCX uses shm/tcp") != NULL);
        fprintf(stderr, "no RDMA device on this machine\n");
    }
    for (d = 0; d < n; d++) {
        NA_CHECK(devs[d].name[0] != '\0');
        NA_CHECK(devs[d].n_ports >= 1);
        NA_CHECK(text != NULL && strstr(text, devs[d].name) != NULL);
        for (p = 0; p < devs[d].n_ports; p++) {
            const na_ibv_port_t *pt = &devs[d].ports[p];
            NA_CHECK(pt->port == p + 1);
            NA_CHECK(pt->gbps >= 0.0 && pt->gbps <= 12 * 200.0);
            NA_CHECK(pt->n_gids >= 0 && pt->n_gids <= NA_IBV_MAX_GIDS);
            NA_CHECK(!strcmp(pt->link_layer, "InfiniBand") || !strcmp(pt->link_layer, "Ethernet"));
        }
    }
    free(text);
    na_ibv_free(devs);
}

static void test_tables(void)
{
    NA_CHECK(na_ibv_lane_gbps(64) == 50.0);       /* HDR */
    NA_CHECK(na_ibv_lane_gbps(128) == 100.0);     /* NDR */
    NA_CHECK(na_ibv_lane_gbps(3) == 0.0);
    NA_CHECK(na_ibv_lanes(2) == 4);
    NA_CHECK(na_ibv_lanes(8) == 12);
    NA_CHECK(na_ibv_lanes(0) == 0);
}

static void set_port(na_ibv_port_t *pt, int port, int active, double gbps)
{
    memset(pt, 0, sizeof(*pt));
    pt->port = port;
    pt->active = active;
    snprintf(pt->state, sizeof(pt->state), "%s", active ? "ACTIVE" : "DOWN");
    snprintf(pt->link_layer, sizeof(pt->link_layer), "InfiniBand");
    pt->width = 4;
    pt->lane_gbps = gbps / 4;
    pt->gbps = gbps;
}

static void test_pick(void)
{
    na_ibv_dev_t d[3];
    char buf[96];
    char *text;

    memset(d, 0, sizeof(d));
    snprintf(d[0].name, sizeof(d[0].name), "mlx5_0");
    d[0].numa_node = 0;
    d[0].n_ports = 2;
    set_port(&d[0].ports[0], 1, 0, 400.0);       /* down: never chosen */
    set_port(&d[0].ports[1], 2, 1, 100.0);
    snprintf(d[1].name, sizeof(d[1].name), "mlx5_1");
    d[1].numa_node = 1;
    d[1].n_ports = 1;
    set_port(&d[1].ports[0], 1, 1, 200.0);
    snprintf(d[2].name, sizeof(d[2].name), "mlx5_2");
    d[2].numa_node = 1;
    d[2].n_ports = 1;
    set_port(&d[2].ports[0], 1, 1, 200.0);

    NA_CHECK(na_ibv_pick(d, 3, -1, buf, sizeof(buf)) == 0 && !strcmp(buf, "mlx5_1:1"));
    NA_CHECK(na_ibv_pick(d, 3, 0, buf, sizeof(buf)) == 0 && !strcmp(buf, "mlx5_0:2"));
    NA_CHECK(na_ibv_pick(d, 3, 1, buf, sizeof(buf)) == 0 && !strcmp(buf, "mlx5_1:1"));
    NA_CHECK(na_ibv_pick(d, 1, 1, buf, sizeof(buf)) == 0 && !strcmp(buf, "mlx5_0:2"));
    d[0].ports[1].active = 0;
    NA_CHECK(na_ibv_pick(d, 1, -1, buf, sizeof(buf)) == -1 && buf[0] == '\0');
    NA_CHECK(na_ibv_pick(NULL, 0, -1, buf, sizeof(buf)) == -1);
    text = print_to_string(d, 3);
    NA_CHECK(text != NULL && strstr(text, "UCX device: mlx5_1:1") != NULL);
    NA_CHECK(text != NULL && strstr(text, "port 1  DOWN") != NULL);
    free(text);
    text = print_to_string(d, 1);
    NA_CHECK(text != NULL && strstr(text, "no active RDMA port") != NULL);
    free(text);
}

int main(void)
{
    test_this_machine();
    test_tables();
    test_pick();
    return na_test_finish();
}

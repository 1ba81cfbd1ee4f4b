/* cli/cmd_check_config.c — `nearattn check-config FILE`: validate a cluster
 * layout and print the resolved plan; `--keys` prints every key of the schema. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/plan_rates.h"
#include "common/config.h"
#include "rdma/ibv.h"
#include "rdma/xp_cfg.h"

static void na_check_config_usage(FILE *f)
{
    fprintf(f, "usage: nearattn check-config FILE [--plan [--rates measured|RATES]]\n"
               "       nearattn check-config --keys\n\n"
               "Validate the cluster layout FILE (docs/config.md) and print the resolved plan:\n"
               "nodes and their ranks, addresses, device slots with budgets, partition and\n"
               "pipelining. KV directories of storage nodes on this machine are checked\n"
               "(creatable and writable), never created: each node creates its own when it\n"
               "starts.\n"
               "Exit 0 when valid, 1 with a 'file:line:col: message' when not, 2 on usage.\n\n"
               "  --keys   print every layout key with its type, default and meaning\n"
               "  --plan   also estimate t_m, t_a, bytes per layer and tokens/s of each\n"
               "           mode, and suggest batches in flight and storage nodes\n"
               "           (t_a ~= t_m/(n-1), Lamina 4.1/5.1; docs/benchmarks.md);\n"
               "           then this machine's RDMA devices (libibverbs: ports, state,\n"
               "           link layer, rate, GIDs, the UCX device) or \"no RDMA device\"\n"
               "  --rates R  'measured' (default: measured now on this machine) or a file\n"
               "           of 'key value' lines (gemv_Bps gemm_flops attn_Bps disk_Bps\n"
               "           link_Bps link_rtt_s step_overhead_s)\n");
}

/* The RDMA devices of this machine (rdma/ibv.c); none is a line, not an error. */
static int na_check_config_rdma(void)
{
    na_ibv_dev_t *devs = NULL;
    int n = 0;
    na_status_t st = na_ibv_list(&devs, &n);
    if (st != NA_OK)
        return na_cli_fail("check-config", st);
    na_ibv_print(stdout, devs, n);
    na_ibv_free(devs);
    return 0;
}

/* Returns 0 valid, 1 invalid layout, 2 usage error. */
int na_cmd_check_config(int argc, char **argv)
{
    const char *file = NULL, *rates = NULL, *tls;
    int plan = 0;
    na_cfg_t *cfg;
    na_status_t st;
    int i;

    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            na_check_config_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--keys")) {
            na_cfg_print_schema(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--plan")) {
            plan = 1;
        } else if (!strcmp(argv[i], "--rates")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "nearattn check-config: --rates needs 'measured' or a file\n");
                return 2;
            }
            rates = argv[++i];
        } else if (na_cli_one_file("check-config", &file, argv[i], na_check_config_usage) != 0) {
            return 2;
        }
    }
    if (file == NULL) {
        na_check_config_usage(stderr);
        return 2;
    }
    st = na_cfg_load(file, &cfg);
    if (st != NA_OK)
        return na_cli_fail("check-config", st);
    na_cfg_print_plan(cfg, stdout);
    tls = na_xp_cfg_ucx_tls(cfg);      /* the transport's mapping (rdma/) */
    printf("ucx        UCX_TLS=%s\n", tls != NULL ? tls : "(from environment)");
    i = plan ? na_cli_plan(cfg, rates) : 0;
    if (plan && i == 0)
        i = na_check_config_rdma();
    na_cfg_destroy(cfg);
    return i;
}

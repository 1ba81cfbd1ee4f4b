/* cli/cmd_node.c — `nearattn node`: run one node of a cluster layout. Who
 * this process is comes from --name, --rank, or the launcher's rank
 * (mpirun/srun: rdma/bootstrap.h) mapped onto the layout's node order. A
 * storage node serves the wire protocol (storage-node/node.h) until SIGINT or
 * SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cluster/rundir.h"
#include "common/config.h"
#include "common/log.h"
#include "compute-node/replica.h"
#include "rdma/bootstrap.h"
#include "storage-node/node.h"

static void na_node_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn node --config FILE [--name NAME | --rank R] [options]\n\n"
        "Run one node of the cluster layout FILE until SIGINT/SIGTERM/SIGUSR1. The node is\n"
        "--name NAME, else layout rank R (--rank), else the launcher's rank from\n"
        "OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK or SLURM_PROCID; ranks count the\n"
        "layout's compute nodes first, then its storage nodes (see check-config).\n"
        "A storage node serves KV and attention to compute nodes; it prints\n"
        "'READY NAME HOST:PORT' once listening. A storage node started by hand joins\n"
        "the running cluster: compute nodes connect to a layout node; a node in no\n"
        "layout (--listen, --kv-dir) announces itself to the layout's compute nodes\n"
        "that have a port (docs/cluster.md, \"Joining a running cluster\").\n"
        "A compute rank has nothing to serve in this command yet: it waits for the\n"
        "signal so that a whole-layout mpirun job stays up.\n\n"
        "  --config FILE       the cluster layout (required)\n"
        "  --name NAME         node name: a storage node of the layout, or an extra one\n"
        "  --rank R            layout rank (instead of the launcher's)\n"
        "  --listen HOST:PORT  listen here instead of the layout's address (required for\n"
        "                      an extra node; port 0 = any free port)\n"
        "  --kv-dir DIR        KV directory of an extra node's one device slot; for a layout\n"
        "                      node, device i's KV goes to DIR/dI instead of its path\n"
        "                      (`nearattn run` gives each run's nodes a private one)\n"
        "  --dram-mb N         extra node DRAM budget (default 256)\n"
        "  --ssd-mb N          extra node SSD budget (default 1024)\n"
        "  --model FILE        model whose shape sizes the slots (default: the layout's)\n"
        "  --shape L:H:KVH:HD  model shape without a model file (layers, heads, KV heads,\n"
        "                      head_dim)\n"
        "  --kv-dtype T        KV element type f16, bf16 or f32 instead of the layout's\n"
        "                      model.kv_dtype (`nearattn run --kv-dtype` passes it)\n"
        "  --threads N         attention threads per slot (default: the layout's)\n"
        "  --max-batches N     decode batches one compute node may have computing here at\n"
        "                      once (default 256); one that sends more is dropped\n");
}

/* Split HOST:PORT. 0 ok. */
static int na_node_hostport(const char *s, char *host, size_t hlen, long *port)
{
    const char *c = strrchr(s, ':');
    char *end;
    if (c == NULL || c == s || (size_t)(c - s) >= hlen)
        return -1;
    memcpy(host, s, (size_t)(c - s));
    host[c - s] = '\0';
    *port = strtol(c + 1, &end, 10);
    return (*end == '\0' && c[1] != '\0' && *port >= 0 && *port < 65536) ? 0 : -1;
}

/* Which layout node this process is: opts->name set on success. */
static int na_node_identity(const na_cfg_t *cfg, const char *name, long rank,
                            char *buf, size_t len, const na_cfg_node_t **cn_p)
{
    na_boot_t b;
    na_status_t st;

    *cn_p = NULL;
    if (name != NULL) {
        snprintf(buf, len, "%s", name);
        *cn_p = na_cfg_find_node(cfg, name);
        return 0;
    }
    if (rank < 0) {
        st = na_boot_detect(NULL, &b);
        if (st != NA_OK) {
            fprintf(stderr, "nearattn node: no --name or --rank, and no launcher rank in the "
                    "environment (%s)\n", na_errmsg());
            return 2;
        }
        rank = b.rank;
        na_log_info("rank %ld from %s", rank, b.source);
    }
    *cn_p = na_cfg_node_at(cfg, (int)rank);
    if (*cn_p == NULL) {
        fprintf(stderr, "nearattn node: rank %ld out of range: %s has %d nodes\n", rank,
                cfg->file, cfg->n_nodes);
        return 1;
    }
    snprintf(buf, len, "%s", (*cn_p)->name);
    return 0;
}

/* A compute rank: nothing to serve here yet; wait for the signal. */
static int na_node_idle(const na_cfg_node_t *cn)
{
    na_log_info("compute node %s: `nearattn node` has no compute service yet; waiting for "
                "SIGINT/SIGTERM", cn->name);
    printf("READY %s (compute, idle)\n", cn->name);
    fflush(stdout);
    while (!na_cli_stop)
        usleep(50000);
    return 0;
}

int na_cmd_node(int argc, char **argv)
{
    const char *file = NULL, *name = NULL, *listen = NULL;
    const na_cfg_node_t *cn;
    na_node_opts_t o;
    na_node_t *node;
    na_cfg_t *cfg;
    char host[256], me[64];
    long rank = -1, port = -1, v;
    int kv_dtype = -1;
    na_status_t st;
    int i, rc;

    memset(&o, 0, sizeof(o));
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            na_node_usage(stdout);
            return 0;
        }
        if (val == NULL) {
            fprintf(stderr, "nearattn node: %s\n", a[0] == '-' ? "option needs a value" : "unexpected argument");
            na_node_usage(stderr);
            return 2;
        }
        i++;
        if (!strcmp(a, "--config")) file = val;
        else if (!strcmp(a, "--name")) name = val;
        else if (!strcmp(a, "--listen")) listen = val;
        else if (!strcmp(a, "--kv-dir")) {
            size_t k = 0;
            while (val[k] != '\0' && (unsigned char)val[k] >= 0x20 && val[k] != 0x7f)
                k++;
            if (val[k] != '\0') {
                fprintf(stderr, "nearattn node: --kv-dir holds a control character (0x%02x at "
                        "byte %zu): newlines and tabs are not allowed in paths\n",
                        (unsigned)(unsigned char)val[k], k);
                return 2;
            }
            o.kv_dir = val;
        }
        else if (!strcmp(a, "--model")) o.model_path = val;
        else if (!strcmp(a, "--kv-dtype")) {
            if (na_cli_kv_dtype("node", val, &kv_dtype) != NA_OK)
                return 2;
        }
        else if (!strcmp(a, "--shape")) {
            if (sscanf(val, "%d:%d:%d:%d", &o.shape[0], &o.shape[1], &o.shape[2], &o.shape[3]) != 4 ||
                o.shape[0] < 1 || o.shape[0] > 1024 || o.shape[1] < 1 || o.shape[1] > 1024 ||
                o.shape[2] < 1 || o.shape[2] > o.shape[1] || o.shape[3] < 1 || o.shape[3] > 1024) {
                fprintf(stderr, "nearattn node: --shape expects LAYERS:HEADS:KV_HEADS:HEAD_DIM, "
                        "got '%s'\n", val);
                return 2;
            }
        }
        else if (!strcmp(a, "--rank")) {
            if (na_cli_int("node", a, val, 0, 1 << 20, &rank) != NA_OK) return 2;
        } else if (!strcmp(a, "--dram-mb")) {
            if (na_cli_int("node", a, val, 1, 1L << 30, &o.dram_mb) != NA_OK) return 2;
        } else if (!strcmp(a, "--ssd-mb")) {
            if (na_cli_int("node", a, val, 1, 1L << 40, &o.ssd_mb) != NA_OK) return 2;
        } else if (!strcmp(a, "--max-batches")) {
            if (na_cli_int("node", a, val, 1, 1 << 20, &v) != NA_OK) return 2;
            o.max_batches = (int)v;
        } else if (!strcmp(a, "--threads")) {
            if (na_cli_int("node", a, val, 1, 1024, &v) != NA_OK) return 2;
            o.threads = (int)v;
        } else {
            fprintf(stderr, "nearattn node: unknown option '%s'\n", a);
            na_node_usage(stderr);
            return 2;
        }
    }
    if (file == NULL) {
        fprintf(stderr, "nearattn node: --config FILE is required\n");
        na_node_usage(stderr);
        return 2;
    }
    if (name != NULL && rank >= 0) {
        fprintf(stderr, "nearattn node: give --name or --rank, not both\n");
        return 2;
    }
    if (listen != NULL && na_node_hostport(listen, host, sizeof(host), &port) != 0) {
        fprintf(stderr, "nearattn node: --listen expects HOST:PORT, got '%s'\n", listen);
        return 2;
    }
    st = na_cfg_load(file, &cfg);
    if (st != NA_OK)
        return na_cli_fail("node", st);
    if (kv_dtype >= 0)
        cfg->model.kv_dtype = (na_cfg_kv_dtype_t)kv_dtype;
    if (o.model_path != NULL) {     /* a compute replica loads it instead of the layout's */
        char *mp = strdup(o.model_path);
        if (mp == NULL) {
            rc = na_cli_fail("node", na_err(NA_ERR_NOMEM, "out of memory"));
            goto out_cfg;
        }
        free(cfg->model.path);
        cfg->model.path = mp;
    }
    rc = na_node_identity(cfg, name, rank, me, sizeof(me), &cn);
    if (rc != 0)
        goto out_cfg;
    na_log_set_tag(me);

    na_cli_catch_stop(SIGUSR1);         /* what mpirun forwards: see cluster/launch.h */
    signal(SIGPIPE, SIG_IGN);

    if (cn != NULL && cn->role == NA_CFG_ROLE_COMPUTE) {
        if (na_replica_wanted(cfg, cn))     /* rotational replica: compute-node/replica.h */
            rc = (st = na_replica_serve(cfg, cn->name, &na_cli_stop)) == NA_OK ? 0 : na_cli_fail("node", st);
        else
            rc = na_node_idle(cn);
        goto out_cfg;
    }
    if (cn != NULL && o.kv_dir != NULL) {
        st = na_rundir_move_node_kv(&cfg->nodes[cn->rank], o.kv_dir);   /* DIR/dI */
        if (st != NA_OK) {
            rc = na_cli_fail("node", st);
            goto out_cfg;
        }
    }
    o.cfg = cfg;
    o.name = me;
    o.listen_host = listen ? host : NULL;
    o.listen_port = listen ? (int)port : -1;
    st = na_node_create(&o, &node);
    if (st != NA_OK) {
        rc = na_cli_fail("node", st);
        goto out_cfg;
    }
    st = na_node_run(node, &na_cli_stop);
    rc = st == NA_OK ? 0 : na_cli_fail("node", st);
    na_node_destroy(node);
    if (rc == 0)
        na_log_info("node %s: stopped cleanly", me);
out_cfg:
    na_cfg_destroy(cfg);
    return rc;
}

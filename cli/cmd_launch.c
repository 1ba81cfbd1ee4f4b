/* cli/cmd_launch.c — `nearattn launch FILE`: start every node of a layout
 * (cluster/launch.h): fork/exec on this machine, or one mpirun job for a
 * multi-host layout. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/config.h"
#include "cluster/launch.h"

static void na_launch_usage(FILE *f)
{
    fprintf(f,
        "usage: nearattn launch FILE [--dry-run] [--log-dir DIR] [--mpirun]\n\n"
        "Start every node of the cluster layout FILE and wait. When every node's host\n"
        "is this machine, each node is forked as `nearattn node --config FILE --name\n"
        "NAME` (storage nodes first) with its output in DIR/NAME.log; otherwise one\n"
        "mpirun job runs them, with a host file made from the layout (DIR/hostfile).\n"
        "SIGINT/SIGTERM is forwarded to the nodes, which shut down cleanly. If a node\n"
        "fails, launch names it, stops the others and exits 1.\n\n"
        "  --dry-run       print the commands (and host file) instead of running them\n"
        "  --log-dir DIR   where logs go (default $TMPDIR/nearattn-launch-CLUSTER)\n"
        "  --mpirun        use mpirun even when every node is local\n"
        "  --timeout-ms T  grace period for nodes to stop after a signal (default 10000)\n");
}

int na_cmd_launch(int argc, char **argv)
{
    const char *file = NULL;
    na_launch_opts_t o;
    char exe[PATH_MAX], path[PATH_MAX];
    na_cfg_t *cfg;
    na_status_t st;
    ssize_t len;
    long v;
    int i, code = 1;

    memset(&o, 0, sizeof(o));
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            na_launch_usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--dry-run")) {
            o.dry_run = 1;
        } else if (!strcmp(argv[i], "--mpirun")) {
            o.force_mpirun = 1;
        } else if (!strcmp(argv[i], "--log-dir") && i + 1 < argc) {
            o.log_dir = argv[++i];
        } else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) {
            if (na_cli_int("launch", argv[i], argv[i + 1], 1, 3600000, &v) != NA_OK)
                return 2;
            o.timeout_ms = (int)v;
            i++;
        } else if (na_cli_one_file("launch", &file, argv[i], na_launch_usage) != 0) {
            return 2;
        }
    }
    if (file == NULL) {
        na_launch_usage(stderr);
        return 2;
    }
    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0) {
        fprintf(stderr, "nearattn launch: cannot find the nearattn executable\n");
        return 1;
    }
    exe[len] = '\0';
    if (realpath(file, path) == NULL) {        /* children (and other hosts) get it absolute */
        fprintf(stderr, "nearattn launch: %s: %s\n", file, strerror(errno));
        return 1;
    }
    file = path;
    st = na_cfg_load(file, &cfg);
    if (st != NA_OK)
        return na_cli_fail("launch", st);

    na_cli_catch_stop(0);
    o.config_path = file;
    o.exe = exe;
    o.stop = &na_cli_stop;
    o.out = stdout;
    st = na_launch_run(cfg, &o, &code);
    na_cfg_destroy(cfg);
    if (st != NA_OK)
        return na_cli_fail("launch", st);
    return code;
}

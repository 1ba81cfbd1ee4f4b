/* cluster/launch.h — start every node of a cluster layout (`nearattn launch`).
 *
 * Local layouts (every node's host is this machine): fork/exec
 * `nearattn node --config FILE --name NAME` for each node, storage nodes first
 * (compute nodes connect to them), stdout+stderr of each into LOG_DIR/NAME.log.
 * Then wait:
 *   - a stop request (*stop set by the caller's SIGINT/SIGTERM handler) is
 *     forwarded to every node as the same signal; nodes get timeout_ms to exit,
 *     then SIGKILL; the launch ends 0 when every node exited 0 after the signal;
 *   - a node that exits non-zero (or is killed) while the cluster runs is
 *     reported by name with its log file; the others are stopped (SIGTERM) and
 *     the launch ends non-zero;
 *   - when every node has exited 0 by itself, the launch ends 0.
 *
 * Multi-host layouts: one `mpirun` job. A host file lists each distinct host
 * of the layout with slots = its number of nodes; the command is an MPMD line
 * with one app context per node, `-n 1 --host HOST nearattn node --config FILE
 * --name NAME`, so identities never depend on how mpirun maps ranks. The
 * layout file and the nearattn binary must exist at the same paths on every
 * host (a shared file system). Dry runs print the host file and the command.
 * A stop request is passed to mpirun as SIGUSR1, which mpirun forwards to
 * every rank (SIGTERM would make it kill the job at once) and which
 * `nearattn node` treats as a clean stop; SIGTERM follows after timeout_ms.
 */
#ifndef NA_LAUNCH_H
#define NA_LAUNCH_H

#include <signal.h>
#include <stdio.h>

#include "common/config.h"
#include "common/status.h"

typedef struct {
    const char *config_path;       /* the layout file, as children get it */
    const char *exe;               /* the nearattn executable for children */
    const char *log_dir;           /* per-node logs; NULL = $TMPDIR/nearattn-launch-CLUSTER */
    const char *mpirun;            /* NULL = "mpirun" */
    int         dry_run;           /* print what would run, start nothing */
    int         force_mpirun;      /* use mpirun even for a local layout */
    int         timeout_ms;        /* grace period after a stop signal (0 = 10000) */
    volatile sig_atomic_t *stop;   /* set to the signal number to stop the cluster */
    FILE       *out;               /* progress lines and dry-run output (stdout) */
} na_launch_opts_t;

/* Run the layout as described above. *exit_code_p gets the launch's exit code
 * (0 all clean, 1 a node failed). Returns an error only for setup failures
 * (log directory, fork, host file) with a message. */
na_status_t na_launch_run(const na_cfg_t *cfg, const na_launch_opts_t *o, int *exit_code_p);

#endif /* NA_LAUNCH_H */

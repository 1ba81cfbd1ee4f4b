/* cluster/nodes.h — the storage nodes of a layout (and, for rotational
 * pipelining, its compute replicas 1..) started on this machine as child
 * processes (cluster/proc.h), each waited for until it prints READY.
 *
 * Private (what `nearattn run --cluster start` uses): the nodes share no
 * port or file with other runs on the machine. Each storage node listens on
 * a free port (`--listen HOST:0`; the port it got is read from its READY
 * line and written into the caller's layout, so the compute node connects
 * there) and keeps its KV under a directory made for this run (mkdtemp
 * $TMPDIR/nearattn-kv-XXXXXX, `--kv-dir DIR/NAME`) that stop removes. With
 * compute replicas the storage nodes keep the layout's ports (the replicas
 * read them from the layout file); the KV stays private.
 * Not private (the benchmarks): the layout's ports and KV paths.
 * Either way each node's stdout/stderr go to $TMPDIR/nearattn-run-CLUSTER-
 * NAME-PID.log (PID: the run's). A private run removes them at stop when
 * every node exited cleanly on SIGTERM, unless na_nodes_keep_logs was called
 * (the run failed) or NA_KEEP_LOGS=1; otherwise they are kept and named in a
 * warning. The benchmarks' nodes (not private) keep their logs. */
#ifndef NA_NODES_H
#define NA_NODES_H

#include <signal.h>

#include "common/config.h"
#include "common/status.h"

typedef struct {
    const char *config_path;      /* the layout file the nodes load */
    const char *exe;              /* nearattn executable; NULL: this one */
    int         private_run;      /* see above */
    volatile sig_atomic_t *stop;  /* non-NULL and set: give up waiting (NA_ERR_CANCELED) */
    const char *model_path;       /* the compute node's model when not the layout's
                                     (compute replicas load it), or NULL */
    const char *shape;            /* "L:H:KVH:HD" of the compute node's model: sizes
                                     the storage nodes' KV slots; NULL: the layout's */
    const char *kv_dtype;         /* KV element type for every node ("f16", "f32")
                                     when not the layout's model.kv_dtype, or NULL */
} na_nodes_opts_t;

typedef struct na_nodes na_nodes_t;

/* Start the nodes of cfg (ports rewritten in cfg when private). *n_p is set
 * also on failure (what started must be stopped: na_nodes_stop).
 * NA_ERR_PEER naming a node that exited with the last line of its log,
 * NA_ERR_TIMEOUT, NA_ERR_IO, NA_ERR_CANCELED. */
na_status_t na_nodes_start(na_cfg_t *cfg, const na_nodes_opts_t *o, na_nodes_t **n_p);
/* SIGTERM, a bounded wait, SIGKILL; removes a private run's directory;
 * frees n. NULL is a no-op. */
void        na_nodes_stop(na_nodes_t *n);
/* Reap the nodes that exited (waitpid, no zombies) and start the storage
 * nodes among them again, each on its port and KV directory, after a
 * back-off (0.5 s, doubling; at most 5 restarts in a row of a node that ran
 * less than 30 s each, then it is given up with a warning). Never blocks
 * (a restarted node is not waited for: the compute node dials it again).
 * Returns how many nodes are down now. NULL: 0. */
int         na_nodes_heal(na_nodes_t *n);
/* Keep the nodes' logs at na_nodes_stop (the run failed: they explain it).
 * NULL is a no-op. */
void        na_nodes_keep_logs(na_nodes_t *n);
/* The private run's directory ("" when not private). */
const char *na_nodes_dir(const na_nodes_t *n);

#endif /* NA_NODES_H */

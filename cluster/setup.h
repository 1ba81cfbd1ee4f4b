/* cluster/setup.h — the cluster a compute node runs against, set up in one
 * call for `nearattn run` and `nearattn serve`:
 *
 *   start    the layout's storage nodes (and rotational compute replicas)
 *            started here as child processes, private to this process
 *            (free ports, a KV directory removed at the end: cluster/nodes.h)
 *   connect  a running cluster (`nearattn launch`, mpirun, nodes by hand) on
 *            the layout's addresses
 *   inproc   the layout's device slots inside this process (no network;
 *            private: KV in a directory of this run, removed at the end)
 *
 * and the attention service over it (compute-node/attn_service.h: remote,
 * or the kv-fetch baseline; in-process for inproc), plus the link to the
 * compute replicas for rotational pipelining. The offload engine
 * (compute-node/offload.h) is created over na_cluster_service(). */
#ifndef NA_SETUP_H
#define NA_SETUP_H

#include <signal.h>

#include "common/config.h"
#include "common/status.h"
#include "compute-node/attn_service.h"
#include "compute-node/engine.h"

struct na_rep;

typedef struct {
    const char *config_path;      /* the layout file (required) */
    const char *mode;             /* "start" (default), "connect" or "inproc" */
    int         kvfetch;          /* 1: the kv-fetch baseline instead of remote attention */
    int         private_run;      /* start: free ports + private KV directory, inproc:
                                     private KV directory (default 1); 0: the
                                     layout's ports and paths */
    const char *exe;              /* start: nearattn executable (NULL: this one) */
    volatile sig_atomic_t *stop;  /* start: set (by a signal) to give up waiting */
    const char *model_path;       /* the engine's model file when it is not the layout's
                                     (`run --model`): start passes it to compute replicas */
    int         kv_dtype_given;   /* 1: the engine's KV dtype (`run --kv-dtype`) replaces
                                     the layout's model.kv_dtype (start, inproc) */
} na_cluster_opts_t;

typedef struct na_cluster na_cluster_t;

void        na_cluster_opts_default(na_cluster_opts_t *o);
/* Load the layout, set it up as o->mode says for engine e's model (the
 * service's shape) and create the service. The nodes started here (and the
 * in-process slots) take the shape of e's model (`nearattn node --shape`),
 * whatever the layout's model is, and, with o->kv_dtype_given, e's KV dtype.
 * connect cannot change a running cluster: NA_ERR_INVALID when e's model has
 * another shape than the layout's model, or o->kv_dtype_given names another
 * KV dtype than the layout's. NA_ERR_INVALID for kv-fetch with inproc; the
 * layout's, a node's or the service's error otherwise (what was started is
 * stopped again). */
na_status_t na_cluster_create(const na_cluster_opts_t *o, na_engine_t *e, na_cluster_t **c_p);
/* The layout as the cluster runs it (ports of private nodes filled in). */
const na_cfg_t *na_cluster_cfg(const na_cluster_t *c);
/* The attention service (owned by the cluster) or NULL once taken. */
na_asvc_t  *na_cluster_service(const na_cluster_t *c);
/* Hand the service over to the caller (who destroys it before the cluster). */
na_asvc_t  *na_cluster_take_service(na_cluster_t *c);
/* The link to compute replicas 1.. (rotational), or NULL. */
struct na_rep *na_cluster_rep(const na_cluster_t *c);
/* How the cluster was set up, for summaries ("cluster started here", ...). */
const char *na_cluster_how(const na_cluster_t *c);
/* start: reap the nodes started here that exited and start the storage
 * nodes among them again (na_nodes_heal); never blocks. Returns how many are
 * down now; 0 for connect and inproc. */
int         na_cluster_heal(na_cluster_t *c);
/* The run failed: keep the started nodes' logs at destroy (cluster/nodes.h:
 * a private run's logs are otherwise removed when its nodes exit cleanly).
 * NULL is a no-op. */
void        na_cluster_keep_logs(na_cluster_t *c);
/* Service, replicas, started nodes (stopped), private directory (removed),
 * layout. NULL is a no-op. */
void        na_cluster_destroy(na_cluster_t *c);

#endif /* NA_SETUP_H */
